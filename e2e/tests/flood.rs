//! No denial of service without credentials, with real haproxy: from a hypervisor's own
//! network namespace (an address of the test's set), thousands of idle TCP connections are
//! opened to a mutual-TLS CRI front and to a cluster's ingress, and held. A valid client from
//! another address is still served (a CRI call through the front, `kubectl` through the
//! ingress), and the idle connections are closed by the front (no TLS handshake within its
//! idle timeout) and by the ingress (no ClientHello within its delay). The counts and times
//! are printed.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use oi_e2e::{LocalSet, World, admin_kubeconfig, eventually, kubectl, prerequisites, str_at};

/// Opens `count` TCP connections to `address:port` and holds them, printing `open N`, then
/// once a second `closed N` (how many the server closed), until all are closed or `hold`
/// seconds passed: `done OPEN_LEFT`.
const FLOOD: &str = r#"
import socket, sys, time, select
addr, port, count, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks = {}
for _ in range(count):
    try:
        s = socket.create_connection((addr, port), timeout=2)
        s.setblocking(False)
        socks[s.fileno()] = s
    except OSError:
        pass
print("open", len(socks), flush=True)
poll = select.poll()
for fd in socks:
    poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
start = time.time()
closed = 0
while time.time() - start < hold and closed < len(socks):
    for fd, _ in poll.poll(1000):
        try:
            gone = socks[fd].recv(1) == b""
        except BlockingIOError:
            gone = False
        except OSError:
            gone = True
        if gone:
            poll.unregister(fd)
            closed += 1
    print("closed", closed, flush=True)
print("done", len(socks) - closed, flush=True)
"#;

/// A flood running in a hypervisor's namespace; killed when dropped.
struct Flood {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Flood {
    fn start(
        set: &LocalSet,
        from: &str,
        address: &str,
        port: u16,
        count: usize,
        hold: u64,
    ) -> Flood {
        let mut child = set
            .exec(
                from,
                &[
                    "python3",
                    "-c",
                    FLOOD,
                    address,
                    &port.to_string(),
                    &count.to_string(),
                    &hold.to_string(),
                ],
            )
            .unwrap()
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Flood { child, lines }
    }

    /// The next line starting with `prefix`, its number; waits at most `timeout`.
    fn expect(&self, prefix: &str, timeout: Duration) -> usize {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {prefix:?} line within {timeout:?}"));
            if let Some(n) = line.strip_prefix(prefix) {
                return n.trim().parse().unwrap();
            }
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn idle_connection_floods_keep_no_valid_client_out() {
    let test = "idle_connection_floods_keep_no_valid_client_out";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("flood", 1, 1, true).unwrap();
    let world = oi_e2e::inject_cluster(&set.manifests, "c1", 1).unwrap();
    let (run, _, _) = oi_e2e::reconcile_until_ready(&world, 2).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let private = format!("{}-private-1", set.name());
    let public = format!("{}-public-1", set.name());
    let public_ip = set.public_ip().unwrap().to_string();

    // 1. The public hypervisor's CRI front.
    let hypervisors = oi_api::World::load(&run.stdout, "world")
        .unwrap()
        .hypervisors;
    let h = hypervisors
        .values()
        .find(|h| h.metadata.name == public)
        .unwrap();
    let remote = h.spec.remote_cri_endpoint.clone().unwrap();
    let endpoint = oi_cri::CriEndpoint::Tls {
        uri: remote.cri_endpoint_uri.clone(),
        ca_pem: remote.ca_certificate.clone(),
        cert_pem: remote
            .client_certificate
            .as_ref()
            .unwrap()
            .certificate
            .clone(),
        key_pem: remote
            .client_certificate
            .as_ref()
            .unwrap()
            .private_key
            .clone(),
    };
    let port: u16 = remote
        .cri_endpoint_uri
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let flood = Flood::start(&set, &private, &public_ip, port, 1100, 40);
    let opened = flood.expect("open ", Duration::from_secs(60));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let asked = Instant::now();
    let answer = runtime.block_on(async {
        let client = oi_cri::CriClient::connect(
            public.clone(),
            endpoint,
            oi_cri::ClientOptions {
                connect_timeout: Duration::from_secs(10),
                ..oi_cri::ClientOptions::default()
            },
        )
        .await?;
        client.version().await
    });
    let took = asked.elapsed();
    let version = answer.unwrap();
    eprintln!(
        "CRI front: {opened} idle connections opened from {private}; a valid client answered \
         ({}) in {took:.2?}",
        version.runtime_name
    );
    // Every idle connection goes: refused beyond the per-source limit at once, the others
    // once the handshake timeout passes.
    let left = flood.expect("done ", Duration::from_secs(60));
    assert_eq!(left, 0, "idle connections the front kept open");
    drop(flood);

    // 2. The cluster's ingress.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let endpoint = str_at(
        world.require_cluster("c1").unwrap(),
        &["status", "apiServerEndpoint"],
    )
    .unwrap()
    .to_string();
    let (address, port) = endpoint
        .trim_start_matches("https://")
        .rsplit_once(':')
        .unwrap();
    let flood = Flood::start(&set, &private, address, port.parse().unwrap(), 4200, 40);
    let opened = flood.expect("open ", Duration::from_secs(120));
    let asked = Instant::now();
    let readyz = eventually(Duration::from_secs(20), || {
        kubectl(
            &kubeconfig,
            &["--request-timeout=5s", "get", "--raw", "/readyz"],
        )?
        .ok("readyz")
    })
    .unwrap();
    let took = asked.elapsed();
    eprintln!(
        "ingress: {opened} idle connections opened from {private}; kubectl answered ({}) in \
         {took:.2?}",
        readyz.stdout.trim()
    );
    let left = flood.expect("done ", Duration::from_secs(60));
    assert_eq!(left, 0, "idle connections the ingress kept open");
}
