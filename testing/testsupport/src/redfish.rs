//! A real Redfish BMC emulator for tests: sushy-tools' `sushy-emulator` (from the Python
//! package registry, installed by scripts/setup.sh into `.tools/venv`), fake driver, HTTP
//! basic authentication (user `admin`), on a loopback port of its own, killed and its
//! directory removed when dropped. Power changes land 1–11 s after they are asked, as the
//! fake driver has them.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Where `sushy-emulator` is expected.
pub fn emulator_path() -> PathBuf {
    crate::workspace_root().join(".tools/venv/bin/sushy-emulator")
}

/// The running emulator.
pub struct RedfishEmulator {
    child: Child,
    /// The address it listens on.
    pub ip: String,
    pub port: u16,
    dir: PathBuf,
}

impl Drop for RedfishEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedfishEmulator {
    /// Starts one serving `systems` (`(uuid, name)`, all powered on) for `admin` with
    /// `password`, and waits (at most 60 s, polling) until it answers; `None` when the
    /// emulator is missing (after [`crate::require`] said so).
    ///
    /// # Panics
    /// When it cannot be started or does not answer in time.
    pub fn start(test: &str, systems: &[(&str, &str)], password: &str) -> Option<RedfishEmulator> {
        Self::start_on(test, "127.0.0.1", systems, password)
    }

    /// [`RedfishEmulator::start`] listening on `ip` (an address of a network the test made,
    /// such as a local hypervisor set's bridge), so that hosts in network namespaces reach it.
    ///
    /// # Panics
    /// As [`RedfishEmulator::start`].
    pub fn start_on(
        test: &str,
        ip: &str,
        systems: &[(&str, &str)],
        password: &str,
    ) -> Option<RedfishEmulator> {
        if !crate::require(
            test,
            &format!(
                "a Redfish emulator: {} (scripts/setup.sh installs sushy-tools there)",
                emulator_path().display()
            ),
            emulator_path().is_file(),
        ) {
            return None;
        }
        let port = crate::free_loopback_port();
        let dir = std::env::temp_dir().join(format!("oi-host-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let python = crate::workspace_root().join(".tools/venv/bin/python");
        // bcrypt is the only digest the emulator takes; 4 rounds keep each request cheap.
        let hash = Command::new(&python)
            .arg("-c")
            .arg("import bcrypt, sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(4)).decode())")
            .arg(password)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
        assert!(hash.status.success(), "bcrypt: {hash:?}");
        let htpasswd = dir.join("htpasswd");
        let hash = String::from_utf8_lossy(&hash.stdout).trim().to_string();
        std::fs::write(&htpasswd, format!("admin:{hash}\n"))
            .unwrap_or_else(|e| panic!("{}: {e}", htpasswd.display()));
        let listed: Vec<String> = systems
            .iter()
            .enumerate()
            .map(|(i, (uuid, name))| {
                format!(
                    "{{'uuid': '{uuid}', 'name': '{name}', 'power_state': 'On', \
                     'nics': [{{'mac': '00:5c:52:31:3a:{i:02x}', 'ip': '10.9.0.{}'}}]}}",
                    i + 1
                )
            })
            .collect();
        let config = dir.join("emulator.py");
        std::fs::write(
            &config,
            format!(
                "SUSHY_EMULATOR_LISTEN_IP = '{ip}'\n\
                 SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
                 SUSHY_EMULATOR_FAKE_DRIVER = True\n\
                 SUSHY_EMULATOR_STATE_DIR = '{state}'\n\
                 SUSHY_EMULATOR_AUTH_FILE = '{auth}'\n\
                 SUSHY_EMULATOR_FAKE_SYSTEMS = [{systems}]\n",
                state = dir.join("state").display(),
                auth = htpasswd.display(),
                systems = listed.join(", "),
            ),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", config.display()));
        let log = std::fs::File::create(dir.join("log")).unwrap_or_else(|e| panic!("log: {e}"));
        let err = log.try_clone().unwrap_or_else(|e| panic!("log: {e}"));
        let child = Command::new(emulator_path())
            .arg("--config")
            .arg(&config)
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", emulator_path().display()));
        let emulator = RedfishEmulator {
            child,
            ip: ip.to_string(),
            port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect((ip, port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sushy-emulator did not answer on port {port} within 60 s: {}",
                emulator.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(emulator)
    }

    /// metal3's BMC address of system `uuid`.
    pub fn address(&self, uuid: &str) -> String {
        format!(
            "redfish+http://{}:{}/redfish/v1/Systems/{uuid}",
            self.ip, self.port
        )
    }

    /// Its log, without the terminal colours werkzeug puts around requests.
    pub fn log(&self) -> String {
        let raw = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let mut log = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                log.push(c);
            }
        }
        log
    }

    /// The Reset actions it answered, from its request log: `(system id, status)`.
    pub fn resets(&self) -> Vec<(String, String)> {
        self.log()
            .lines()
            .filter_map(|l| {
                let request = l.split('"').nth(1)?;
                let status = l.split('"').nth(2)?.split_whitespace().next()?;
                let path = request.strip_prefix("POST /redfish/v1/Systems/")?;
                let system = path.strip_suffix("/Actions/ComputerSystem.Reset HTTP/1.1")?;
                Some((system.to_string(), status.to_string()))
            })
            .collect()
    }

    /// [`RedfishEmulator::resets`] once it holds `count` (the request log is written after
    /// the answer), polled for at most 10 s.
    pub fn wait_resets(&self, count: usize) -> Vec<(String, String)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let resets = self.resets();
            if resets.len() >= count || Instant::now() >= deadline {
                return resets;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
