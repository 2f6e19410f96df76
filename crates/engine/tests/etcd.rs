//! The engine's etcd client ([`RealNetwork`] as [`Etcd`], over etcd's gRPC API) against a
//! real etcd (Debian's, mutual TLS with the server and client CAs apart and a serving-only
//! server certificate, as the planner issues them): `oi_engine_testsupport::etcd_contract`, which the
//! simulation passes too (membership, refusals as etcd words them, health, status,
//! snapshots, an endpoint that cannot be reached), and a client the etcd does not trust.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oi_engine::etcd::Etcd;
use oi_engine::https::{RealNetwork, Tls};
use oi_pki::{CaKind, CertificateAuthority, KeyAlgorithm, LeafSpec};

/// An etcd process, killed when dropped (a test that panics leaves none behind).
struct EtcdProcess {
    child: Child,
    url: String,
    peer_url: String,
    log: std::path::PathBuf,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl EtcdProcess {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

struct Pki {
    server_ca: CertificateAuthority,
    client_ca: CertificateAuthority,
}

fn write_private(path: &Path, contents: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(contents.as_bytes()).unwrap();
}

fn start(dir: &Path, pki: &Pki) -> EtcdProcess {
    let now = time::OffsetDateTime::now_utc();
    let year = time::Duration::days(365);
    let server = pki
        .server_ca
        .issue(
            &LeafSpec::etcd_server("m0", &["127.0.0.1"]).unwrap(),
            now,
            year,
        )
        .unwrap();
    write_private(&dir.join("server.crt"), &server.certificate_pem);
    write_private(&dir.join("server.key"), &server.private_key_pem);
    write_private(&dir.join("client-ca.crt"), pki.client_ca.certificate_pem());
    let client_port = oi_testsupport::free_loopback_port();
    let peer_port = oi_testsupport::free_loopback_port();
    let url = format!("https://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let log = dir.join("etcd.log");
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new("etcd")
        .arg("--name=m0")
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={url}"))
        .arg(format!("--advertise-client-urls={url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=m0={peer_url}"))
        .arg(format!("--cert-file={}", dir.join("server.crt").display()))
        .arg(format!("--key-file={}", dir.join("server.key").display()))
        .arg(format!(
            "--trusted-ca-file={}",
            dir.join("client-ca.crt").display()
        ))
        .arg("--client-cert-auth")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("cannot start etcd");
    EtcdProcess {
        child,
        url,
        peer_url,
        log,
    }
}

/// Trusting `server_ca`, presenting a client certificate `issuer` (of kind `kind`) signs.
fn client_tls(
    server_ca: &CertificateAuthority,
    issuer: &CertificateAuthority,
    kind: CaKind,
) -> Tls {
    let now = time::OffsetDateTime::now_utc();
    let client = issuer
        .issue(
            &LeafSpec::client(kind, "oneinfra-engine", &[]),
            now,
            time::Duration::days(1),
        )
        .unwrap();
    Tls {
        ca_pem: server_ca.certificate_pem().to_string(),
        identity: Some((client.certificate_pem, client.private_key_pem)),
    }
}

fn refusing_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("https://127.0.0.1:{port}")
}

#[test]
fn the_engines_etcd_client_meets_etcd() {
    if !oi_testsupport::require(
        "engine etcd: gRPC client against etcd",
        "command `etcd` (Debian etcd-server)",
        oi_testsupport::have_command("etcd"),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let now = time::OffsetDateTime::now_utc();
    let year = time::Duration::days(365);
    let pki = Pki {
        server_ca: CertificateAuthority::generate("etcd-ca", KeyAlgorithm::EcdsaP256, now, year)
            .unwrap(),
        client_ca: CertificateAuthority::generate(
            "etcd-client-ca",
            KeyAlgorithm::EcdsaP256,
            now,
            year,
        )
        .unwrap(),
    };
    let etcd = start(dir.path(), &pki);
    let tls = client_tls(&pki.server_ca, &pki.client_ca, CaKind::EtcdClient);
    let network = RealNetwork::new(Duration::from_secs(5));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = etcd.url.as_str();
        // etcd takes a moment to serve.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match network.healthy(url, &tls).await {
                Ok(true) => break,
                other => assert!(
                    Instant::now() < deadline,
                    "etcd did not become healthy: {other:?}\n{}",
                    etcd.log()
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let members = network.members(url, &tls).await.unwrap();
        assert_eq!(members[0].name, "m0");
        assert_eq!(members[0].peer_urls, std::slice::from_ref(&etcd.peer_url));

        let spare = || format!("http://127.0.0.1:{}", oi_testsupport::free_loopback_port());
        let dead = refusing_url();
        oi_engine_testsupport::etcd_contract::run(oi_engine_testsupport::etcd_contract::Subject {
            etcd: &network,
            url,
            tls: &tls,
            spare: [spare(), spare()],
            unreachable: &dead,
            check_snapshot: oi_planner::snapshot::check_etcd_snapshot,
        })
        .await;

        // A client certificate etcd does not trust (signed by its server CA) is turned away:
        // the server CA no longer vouches for clients.
        let stranger = client_tls(&pki.server_ca, &pki.server_ca, CaKind::EtcdServer);
        let turned_away = network.members(url, &stranger).await;
        assert!(turned_away.is_err(), "{turned_away:?}");
    });
}
