//! Test support shared by the crates whose tests need real systems (containerd, etcd, haproxy,
//! network namespaces, root).
//!
//! A test that needs a prerequisite calls [`require`] first. When the prerequisite is missing:
//! - with `OI_REQUIRE_REAL=1` (set by `scripts/test.sh`, hence by CI), the test **fails**, naming
//!   what is missing, so CI can never pass by skipping;
//! - otherwise it prints a loud `SKIPPED` banner to stderr and returns `false`, and the test
//!   returns early. `cargo test -- --nocapture` shows the banners.

use std::path::Path;

pub mod redfish;
pub mod reference;

/// The environment variable that turns a missing prerequisite into a test failure.
pub const REQUIRE_ENV: &str = "OI_REQUIRE_REAL";

/// Whether a missing prerequisite must fail the test rather than skip it.
pub fn real_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1" || v == "true")
}

/// Checks one prerequisite. Returns `true` when it is there; see the crate docs otherwise.
///
/// # Panics
/// When the prerequisite is missing and [`REQUIRE_ENV`] is set.
pub fn require(test: &str, what: &str, available: bool) -> bool {
    if available {
        return true;
    }
    if real_required() {
        panic!(
            "{test}: prerequisite missing: {what} ({REQUIRE_ENV}=1, so this is a failure, not a skip)"
        );
    }
    eprintln!(
        "\n######## SKIPPED {test}: prerequisite missing: {what}\n######## run scripts/setup.sh, then scripts/test.sh (which sets {REQUIRE_ENV}=1) to run it for real\n"
    );
    false
}

/// Whether the process runs as root (uid 0), read from /proc without libc.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Whether an executable is on PATH (or is an existing absolute path).
pub fn have_command(name: &str) -> bool {
    if name.contains('/') {
        return Path::new(name).is_file();
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// Requires root and every listed command; see [`require`].
pub fn require_root_and_commands(test: &str, commands: &[&str]) -> bool {
    if !require(test, "root (uid 0)", is_root()) {
        return false;
    }
    commands
        .iter()
        .all(|c| require(test, &format!("command `{c}` on PATH"), have_command(c)))
}

/// Where [`free_loopback_port`] picks: below the kernel's ephemeral range (32768-60999 on
/// these machines), which it hands out to every outgoing connection and `bind(0)` of every
/// process, and above the ports services listen on by convention.
pub const TEST_PORTS: std::ops::Range<u16> = 20000..32000;

/// A TCP port on 127.0.0.1 that nothing listens on at the time of the call (bound, then
/// released), for a process under test to listen on. It is taken from [`TEST_PORTS`], outside
/// the kernel's ephemeral range: between this call and the process's own bind, no outgoing
/// connection of a test running beside it can be given the same port, as one given by
/// `bind(0)` could be. A process starts at its own place (process id, time) and goes on one
/// port at a time: its calls never repeat a port, and tests running at once seldom meet.
///
/// # Panics
/// When no port of [`TEST_PORTS`] nor any other can be bound on loopback.
pub fn free_loopback_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static START: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let span = u32::from(TEST_PORTS.end - TEST_PORTS.start);
    // Where this process starts (process id and time); then one port after the other, so
    // two calls of one process never give the same port.
    let start = *START.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        std::process::id()
            .wrapping_mul(2_654_435_761)
            .wrapping_add(nanos)
    });
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let offset = u16::try_from(start.wrapping_add(n) % span).unwrap_or(0);
        let port = TEST_PORTS.start + offset;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(address) => address.port(),
        Err(e) => panic!("cannot bind a port on 127.0.0.1: {e}"),
    }
}

/// The environment variable naming the directory of the offline image tarballs.
pub const IMAGES_DIR_ENV: &str = "OI_IMAGES_DIR";

/// Where a test run records the name of every local hypervisor set a test creates, one a
/// line (`scripts/test.sh` sets it): what it destroys afterwards if a test's own cleanup
/// failed, and nothing else.
pub const SETS_RECORD_ENV: &str = "OI_TEST_SETS_RECORD";

/// Records that a test is about to create the local hypervisor set `name` (see
/// [`SETS_RECORD_ENV`]); nothing without the variable.
///
/// # Panics
/// When the record cannot be written: a set the run could not name would be left behind.
pub fn record_test_set(name: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os(SETS_RECORD_ENV) else {
        return;
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", Path::new(&path).display()));
    // One write of a whole line: appends from tests running at once do not interleave.
    file.write_all(format!("{name}\n").as_bytes())
        .unwrap_or_else(|e| panic!("cannot record set {name}: {e}"));
}

/// The workspace's root directory.
pub fn workspace_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the offline image tarballs are (`cargo xtask images` writes them there):
/// `$OI_IMAGES_DIR`, else `<workspace>/target/oi-images`.
pub fn images_dir() -> std::path::PathBuf {
    match std::env::var_os(IMAGES_DIR_ENV) {
        Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => workspace_root().join("target").join("oi-images"),
    }
}

/// The environment variable that makes [`assert_golden`] rewrite golden files.
pub const UPDATE_GOLDEN_ENV: &str = "OI_UPDATE_GOLDEN";

/// Compares generated text with the golden file at `path`; with `OI_UPDATE_GOLDEN=1` it
/// rewrites the file instead. `regenerate` is the command that does so, for the failure
/// message.
///
/// # Panics
/// When the text differs from the file (or the file cannot be read or written).
pub fn assert_golden(path: &Path, actual: &str, regenerate: &str) {
    if std::env::var(UPDATE_GOLDEN_ENV).is_ok_and(|v| v == "1") {
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            panic!("cannot create {}: {e}", dir.display());
        }
        if let Err(e) = std::fs::write(path, actual) {
            panic!("cannot write golden file {}: {e}", path.display());
        }
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "golden file {}: {e}; create it with: {UPDATE_GOLDEN_ENV}=1 {regenerate}",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the generated text, first at line {}; if the change is intended, \
             regenerate it with: {UPDATE_GOLDEN_ENV}=1 {regenerate}\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display(),
            first + 1
        );
    }
}

/// Makes a device node or FIFO at `path` (mode 0600) for a test of what is written there.
///
/// # Panics
/// When it cannot be made (making device nodes needs root; the message says so).
pub fn mknod(path: &Path, kind: rustix::fs::FileType, dev: (u32, u32)) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        kind,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(dev.0, dev.1),
    )
    .unwrap_or_else(|e| panic!("mknod {} (needs root): {e}", path.display()));
}

/// The environment variable naming the `moto_server` executable (an S3-compatible server
/// from the Python package registry); `<workspace>/.tools/venv/bin/moto_server` (where
/// `scripts/setup.sh` installs it) when unset.
pub const MOTO_SERVER_ENV: &str = "OI_MOTO_SERVER";

/// Where `moto_server` is expected (see [`MOTO_SERVER_ENV`]).
pub fn moto_server_path() -> std::path::PathBuf {
    match std::env::var_os(MOTO_SERVER_ENV) {
        Some(p) if !p.is_empty() => std::path::PathBuf::from(p),
        _ => workspace_root().join(".tools/venv/bin/moto_server"),
    }
}

/// A real S3-compatible server (moto) on a loopback port of its own, killed when dropped
/// (a test that panics leaves no server behind). Any access key is accepted; buckets start
/// empty.
pub struct S3Server {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl S3Server {
    /// Starts one and waits (at most 60 s, polling) until it answers; `None` when
    /// `moto_server` is missing (after [`require`] said so).
    ///
    /// # Panics
    /// When it cannot be started or does not answer in time.
    pub fn start(test: &str) -> Option<S3Server> {
        let path = moto_server_path();
        if !require(
            test,
            &format!(
                "an S3-compatible server: {} (scripts/setup.sh installs moto[server] there; or set {MOTO_SERVER_ENV})",
                path.display()
            ),
            path.is_file(),
        ) {
            return None;
        }
        let port = free_loopback_port();
        let log = std::env::temp_dir().join(format!("oi-moto-{port}.log"));
        let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let child = std::process::Command::new(&path)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            if std::time::Instant::now() >= deadline {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("moto_server did not answer on port {port} within 60 s: {tail}");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Sends moto an unsigned `method path` (moto takes them) and returns its whole answer,
    /// head and body.
    ///
    /// # Panics
    /// When moto cannot be reached.
    pub fn raw(&self, method: &str, path: &str) -> String {
        use std::io::{Read as _, Write as _};
        let authority = self.endpoint.trim_start_matches("http://");
        let mut tcp = std::net::TcpStream::connect(authority)
            .unwrap_or_else(|e| panic!("moto at {authority}: {e}"));
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap_or_else(|e| panic!("moto at {authority}: {e}"));
        write!(
            tcp,
            "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap_or_else(|e| panic!("moto at {authority}: {e}"));
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        answer
    }

    /// Creates bucket `name` (the product never creates buckets: a snapshot's bucket is the
    /// user's).
    ///
    /// # Panics
    /// When moto does not answer 200.
    pub fn create_bucket(&self, name: &str) {
        let answer = self.raw("PUT", &format!("/{name}"));
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "moto did not create bucket {name}: {answer}"
        );
    }

    /// The environment a client needs to use it (`AWS_ENDPOINT_URL` and a test key).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "oneinfra-test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "oneinfra-test-secret".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn free_ports_are_distinct_outside_the_ephemeral_range_and_bindable() {
        let ports: Vec<u16> = (0..200).map(|_| free_loopback_port()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        assert!(ports.iter().all(|p| TEST_PORTS.contains(p)), "{ports:?}");
        // The port a call would give next, listened on by someone: passed over.
        let p = free_loopback_port();
        let next = if p + 1 < TEST_PORTS.end {
            p + 1
        } else {
            TEST_PORTS.start
        };
        let _held = std::net::TcpListener::bind(("127.0.0.1", next));
        let q = free_loopback_port();
        assert_ne!(q, next);
        std::net::TcpListener::bind(("127.0.0.1", q)).unwrap();
    }
}
