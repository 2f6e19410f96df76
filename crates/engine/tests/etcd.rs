//! The engine's etcd client ([`RealNetwork`] as [`Etcd`], over etcd's gRPC API) against a
//! real etcd (Debian's, mutual TLS with the server and client CAs apart and a serving-only
//! server certificate, as the planner issues them): membership, refusals as etcd words them,
//! health, status, snapshots, and an endpoint that cannot be reached.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oi_engine::etcd::{Code, Etcd, EtcdError, refusals};
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

        // One started voting member, as it was started.
        let members = network.members(url, &tls).await.unwrap();
        assert_eq!(members.len(), 1, "{members:?}");
        let me = &members[0];
        assert!(me.started() && !me.is_learner, "{me:?}");
        assert_eq!(me.name, "m0");
        assert_eq!(me.peer_urls, std::slice::from_ref(&etcd.peer_url));
        assert_eq!(me.client_urls, std::slice::from_ref(&etcd.url));

        // It says who it is and that it leads.
        let status = network.status(url, &tls).await.unwrap();
        assert_eq!(status.member_id, me.id);
        assert_eq!(status.leader, me.id);
        assert_ne!(status.cluster_id, 0);
        assert!(status.revision >= 1, "{status:?}");
        assert!(status.version.starts_with("3."), "{status:?}");

        // A learner that never starts: added, not promotable (etcd's words, retryable), one
        // learner at a time, then removed.
        let spare = format!("http://127.0.0.1:{}", oi_testsupport::free_loopback_port());
        network.add_learner(url, &tls, &spare).await.unwrap();
        let members = network.members(url, &tls).await.unwrap();
        let learner = members
            .iter()
            .find(|m| m.peer_urls == [spare.clone()])
            .unwrap_or_else(|| panic!("the learner is not listed: {members:?}"))
            .clone();
        assert!(learner.is_learner && !learner.started(), "{learner:?}");
        let early = network.promote(url, &tls, learner.id).await.unwrap_err();
        assert!(early.not_in_sync() && early.retryable(), "{early}");
        assert!(
            matches!(&early, EtcdError::Refused { code: Code::FailedPrecondition, message, .. }
                if message == refusals::LEARNER_NOT_READY),
            "{early:?}"
        );
        let another = format!("http://127.0.0.1:{}", oi_testsupport::free_loopback_port());
        let second = network.add_learner(url, &tls, &another).await.unwrap_err();
        assert!(
            matches!(&second, EtcdError::Refused { message, .. } if message == refusals::TOO_MANY_LEARNERS),
            "{second:?}"
        );
        assert!(second.retryable() && !second.not_in_sync());
        network.remove(url, &tls, learner.id).await.unwrap();
        let members = network.members(url, &tls).await.unwrap();
        assert_eq!(members.len(), 1, "{members:?}");
        // Removing a member that is not there is a refusal that waiting does not cure.
        let unknown = network.remove(url, &tls, learner.id).await.unwrap_err();
        assert!(
            matches!(
                &unknown,
                EtcdError::Refused {
                    code: Code::NotFound,
                    ..
                }
            ),
            "{unknown:?}"
        );
        assert!(!unknown.retryable(), "{unknown}");

        // A snapshot streams in chunks into the sink, etcd's checksum at its end.
        let mut bytes = Vec::new();
        let mut chunks = 0;
        let size = network
            .snapshot(url, &tls, &mut |chunk: &[u8]| {
                chunks += 1;
                bytes.extend_from_slice(chunk);
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(size, bytes.len() as u64);
        assert!(chunks >= 1);
        oi_planner::snapshot::check_etcd_snapshot(&bytes).unwrap();
        // A sink that cannot keep the bytes ends the transfer with its reason.
        let refused = network
            .snapshot(url, &tls, &mut |_: &[u8]| Err("disk full".to_string()))
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("disk full"), "{refused}");

        // Leadership handed to itself is a no-op etcd accepts or a refusal, never a hang.
        let _ = network.transfer_leadership(url, &tls, me.id).await;

        // Nothing listening: unreachable, named; health too.
        let dead = refusing_url();
        let gone = network.members(&dead, &tls).await.unwrap_err();
        assert!(
            matches!(&gone, EtcdError::Unreachable { endpoint, .. } if *endpoint == dead),
            "{gone:?}"
        );
        assert!(gone.retryable());
        assert!(network.healthy(&dead, &tls).await.is_err());

        // A client certificate etcd does not trust (signed by its server CA) is turned away:
        // the server CA no longer vouches for clients.
        let stranger = client_tls(&pki.server_ca, &pki.server_ca, CaKind::EtcdServer);
        let turned_away = network.members(url, &stranger).await;
        assert!(turned_away.is_err(), "{turned_away:?}");
    });
}
