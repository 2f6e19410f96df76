//! Making a machine a hypervisor reachable over TCP with mutual TLS: the front of its CRI
//! runtime, run *through that runtime* (the machine needs nothing but the runtime and the
//! haproxy image). `oi hypervisor join` uses it, and so does the local hypervisor set for its
//! `--tcp` hypervisors, so every test over TCP goes through it.
//!
//! ```text
//! 1. the local runtime answers CRI Version at the socket                 else: fail
//! 2. the front's PKI in the state directory (0700; keys 0600): a server CA and a client CA,
//!    kept (a rerun reuses them, so manifests already given out stay good); the server
//!    certificate (SAN = the address) and client certificate issued from them, again when
//!    missing, for another address, or within 30 days of expiry
//! 3. haproxy.cfg + server.pem + client-ca.crt written (atomically)
//! 4. the front: haproxy in TCP mode as a host-network pod (`oneinfra-system/
//!    oneinfra-cri-front`): TLS with a client certificate required (ALPN h2), forwarding to
//!    the runtime's socket; ensured like every pod of ours (same spec: left running;
//!    another: replaced; new certificates: restarted)
//! 5. the front answers CRI Version over mutual TLS with the client certificate
//! ```
//!
//! ```text
//! CRI client ──TLS (client cert, ALPN h2)──► haproxy IP:PORT ──h2c──► unix socket ──► runtime
//! ```

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use oi_api::runtime::{ContainerSpec, Mount, PodSpec};
use oi_cri::{ClientOptions, CriClient, CriEndpoint, HypervisorRuntime as _, Outcome};
use oi_pki::{CaKind, CertificateAuthority, KeyAlgorithm, LeafSpec, Usage};
use time::OffsetDateTime;

/// How long the front's CAs are valid.
pub const CA_LIFETIME: time::Duration = time::Duration::days(3650);
/// How long its server and client certificates are valid.
pub const LEAF_LIFETIME: time::Duration = time::Duration::days(365);
/// A certificate this close to its end is issued again by a rerun.
pub const RENEW_BEFORE: time::Duration = time::Duration::days(30);
/// How long the front may take to answer once its pod runs.
pub const FRONT_TIMEOUT: Duration = Duration::from_secs(60);

/// The front pod's CRI namespace and name.
pub const FRONT_NAMESPACE: &str = "oneinfra-system";
pub const FRONT_POD: &str = "oneinfra-cri-front";

/// What the front is made from.
#[derive(Debug, Clone)]
pub struct FrontOptions<'a> {
    /// The hypervisor's name (in errors and certificate names).
    pub name: &'a str,
    /// The address it is reached at: the front listens there, its certificate names it.
    pub ip: IpAddr,
    pub port: u16,
    /// The local runtime's socket.
    pub socket: &'a Path,
    /// Where the CAs, certificates, keys and haproxy's configuration are kept.
    pub state_dir: &'a Path,
    /// The haproxy image reference (repository override applied).
    pub image: String,
    pub now: OffsetDateTime,
}

/// The front as it runs. `Debug` is not derived: it holds the client key.
pub struct Front {
    /// `tcp://IP:PORT`.
    pub uri: String,
    /// Verifies the front's server certificate (the manifest's `caCertificate`).
    pub server_ca_pem: String,
    /// The client certificate and key for the manifest.
    pub client_cert_pem: String,
    pub client_key_pem: String,
    /// What was done, one line each (no secret in them).
    pub notes: Vec<String>,
}

/// The files of the front in the state directory.
struct Files<'a> {
    dir: &'a Path,
}

impl Files<'_> {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> anyhow::Result<Option<String>> {
        let path = self.path(name);
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Writes atomically, with `mode` from creation ([`oi_cli_io::write_file`]).
    fn write(&self, name: &str, contents: &str, mode: u32) -> anyhow::Result<()> {
        let path = self.path(name);
        oi_cli_io::write_file(&path, contents.as_bytes(), mode)
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// A CA kept in the state directory, made when missing or close to its end.
fn ca(
    files: &Files<'_>,
    name: &str,
    now: OffsetDateTime,
) -> anyhow::Result<(CertificateAuthority, bool)> {
    let (cert, key) = (format!("{name}.crt"), format!("{name}.key"));
    if let (Some(c), Some(k)) = (files.read(&cert)?, files.read(&key)?) {
        let ca = CertificateAuthority::from_pem(&c, &k)
            .with_context(|| format!("{}: not a CA with its key", files.path(&cert).display()))?;
        if ca.not_after() - now > RENEW_BEFORE {
            return Ok((ca, false));
        }
    }
    let ca = CertificateAuthority::generate(
        &format!("oneinfra hypervisor {name}"),
        KeyAlgorithm::EcdsaP256,
        now,
        CA_LIFETIME,
    )?;
    files.write(&key, ca.private_key_pem(), 0o600)?;
    files.write(&cert, ca.certificate_pem(), 0o644)?;
    Ok((ca, true))
}

/// A leaf kept in the state directory: issued again when missing, not by `ca`, for other
/// SANs, or close to its end. Returns (certificate, key, issued now).
fn leaf(
    files: &Files<'_>,
    name: &str,
    ca: &CertificateAuthority,
    spec: &LeafSpec,
    now: OffsetDateTime,
) -> anyhow::Result<(String, String, bool)> {
    let (cert, key) = (format!("{name}.crt"), format!("{name}.key"));
    if let (Some(c), Some(k)) = (files.read(&cert)?, files.read(&key)?)
        && let Ok(info) = oi_pki::inspect_certificate(&c)
        && info.not_after - now > RENEW_BEFORE
        && info.sans == spec.sans
        && oi_pki::is_signed_by(&c, ca.certificate_pem()).unwrap_or(false)
    {
        return Ok((c, k, false));
    }
    let issued = ca.issue(spec, now, LEAF_LIFETIME)?;
    files.write(&key, &issued.private_key_pem, 0o600)?;
    files.write(&cert, &issued.certificate_pem, 0o644)?;
    Ok((issued.certificate_pem, issued.private_key_pem, true))
}

/// How long the front waits for a client that says nothing: during its TLS handshake (one
/// that does not finish in this time is closed) and between requests (our CRI client pings
/// every `oi_cri::KEEPALIVE_INTERVAL`, so only a silent connection goes).
pub const FRONT_IDLE_TIMEOUT: &str = "15s";
/// Connections the front holds at once, and at once from one address: a client (`oi`, the
/// manager) needs a few; one address flooding it gets refused at once beyond this.
pub const FRONT_MAXCONN: u32 = 1024;
pub const FRONT_PER_SOURCE: u32 = 32;

/// haproxy's configuration: mutual TLS in front of the runtime's socket. Nobody without
/// credentials can hold it: a connection must finish its handshake, and then speak, within
/// [`FRONT_IDLE_TIMEOUT`]; one address may hold [`FRONT_PER_SOURCE`] connections.
pub fn front_config(ip: IpAddr, port: u16, dir: &str, socket: &str) -> String {
    let bind = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    format!(
        "# Written by oneinfra: the mutual-TLS front of this machine's CRI runtime.
global
  maxconn {FRONT_MAXCONN}

defaults
  mode tcp
  timeout connect 5s
  timeout client {FRONT_IDLE_TIMEOUT}
  timeout server 1h

frontend cri
  bind {bind}:{port} ssl crt {dir}/server.pem ca-file {dir}/client-ca.crt verify required alpn h2
  maxconn {FRONT_MAXCONN}
  stick-table type ipv6 size 64k expire 60s store conn_cur
  tcp-request connection track-sc0 src
  tcp-request connection reject if {{ sc0_conn_cur gt {FRONT_PER_SOURCE} }}
  default_backend runtime

backend runtime
  server cri unix@{socket}
"
    )
}

/// `tcp://IP:PORT`.
pub fn uri(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("tcp://{v4}:{port}"),
        IpAddr::V6(v6) => format!("tcp://[{v6}]:{port}"),
    }
}

/// Ensures the front (see the module documentation) and waits until it answers.
///
/// # Errors
/// Each failure names what failed: the runtime, a file, the front.
pub async fn ensure_front(o: &FrontOptions<'_>) -> anyhow::Result<Front> {
    let mut notes = Vec::new();
    // 1. The runtime answers.
    let local = CriClient::connect(
        o.name,
        CriEndpoint::Unix(o.socket.to_path_buf()),
        ClientOptions::default(),
    )
    .await
    .with_context(|| format!("the CRI runtime at {}", o.socket.display()))?;

    // 2. The PKI.
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(o.state_dir)
            .with_context(|| format!("creating {}", o.state_dir.display()))?;
    }
    let files = Files { dir: o.state_dir };
    let (server_ca, server_ca_new) = ca(&files, "server-ca", o.now)?;
    let (client_ca, client_ca_new) = ca(&files, "client-ca", o.now)?;
    let server_spec = LeafSpec {
        issuer: CaKind::ApiServer,
        common_name: format!("{} cri", o.name),
        organizations: Vec::new(),
        sans: vec![o.ip.to_string()],
        usage: Usage::Server,
        key_algorithm: None,
    };
    let client_spec = LeafSpec::client(CaKind::ApiServerClient, "oneinfra", &[]);
    let (server_cert, server_key, server_new) =
        leaf(&files, "server", &server_ca, &server_spec, o.now)?;
    let (client_cert, client_key, client_new) =
        leaf(&files, "client", &client_ca, &client_spec, o.now)?;
    let dir_text = o.state_dir.display().to_string();
    for (new, what) in [
        (server_ca_new, "server CA"),
        (client_ca_new, "client CA"),
        (server_new, "server certificate"),
        (client_new, "client certificate"),
    ] {
        if new {
            notes.push(format!("{what} issued in {dir_text}"));
        }
    }

    // 3. The front's files.
    let socket_text = o.socket.display().to_string();
    files.write("server.pem", &format!("{server_cert}{server_key}"), 0o600)?;
    files.write("client-ca.crt", client_ca.certificate_pem(), 0o644)?;
    files.write(
        "haproxy.cfg",
        &front_config(o.ip, o.port, &dir_text, &socket_text),
        0o644,
    )?;

    // 4. The front, through the runtime.
    let socket_dir = o
        .socket
        .parent()
        .context("the CRI socket has no directory")?
        .display()
        .to_string();
    let pod = PodSpec {
        namespace: FRONT_NAMESPACE.to_string(),
        name: FRONT_POD.to_string(),
        labels: [("oneinfra/role".to_string(), "cri-front".to_string())].into(),
        containers: vec![ContainerSpec {
            name: "haproxy".into(),
            image: o.image.clone(),
            command: vec!["haproxy".into()],
            args: vec!["-db".into(), "-f".into(), format!("{dir_text}/haproxy.cfg")],
            env: Default::default(),
            mounts: vec![
                Mount {
                    host_path: dir_text.clone(),
                    container_path: dir_text.clone(),
                    readonly: true,
                },
                Mount {
                    host_path: socket_dir.clone(),
                    container_path: socket_dir,
                    readonly: false,
                },
            ],
            privileged: false,
            resources: None,
        }],
    };
    let outcome = local
        .ensure_pod(&pod)
        .await
        .with_context(|| format!("running the front pod {FRONT_NAMESPACE}/{FRONT_POD}"))?;
    let uri = uri(o.ip, o.port);
    let changed = !matches!(outcome, Outcome::Unchanged);
    // A new certificate needs a new haproxy: the files changed under a running one.
    if (server_new || client_ca_new) && !changed {
        let pods = local
            .list_pods(&pod.labels)
            .await
            .context("listing the front pod")?;
        for p in pods.iter().filter(|p| p.name == FRONT_POD) {
            local
                .remove_pod(&p.id)
                .await
                .context("replacing the front pod")?;
        }
        local
            .ensure_pod(&pod)
            .await
            .context("running the front pod")?;
        notes.push("the front restarted with its new certificates".to_string());
    } else if changed {
        notes.push(format!(
            "the front runs: pod {FRONT_NAMESPACE}/{FRONT_POD}, {}",
            uri.trim_start_matches("tcp://")
        ));
    } else {
        notes.push("the front runs already, unchanged".to_string());
    }

    // 5. The front answers, as the manager and `oi reconcile` will reach it.
    let remote = CriEndpoint::Tls {
        uri: uri.clone(),
        ca_pem: server_ca.certificate_pem().to_string(),
        cert_pem: client_cert.clone(),
        key_pem: client_key.clone(),
    };
    let start = Instant::now();
    loop {
        match CriClient::connect(o.name, remote.clone(), ClientOptions::default()).await {
            Ok(_) => break,
            Err(e) if start.elapsed() >= FRONT_TIMEOUT => {
                bail!("the front at {uri} did not answer within {FRONT_TIMEOUT:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    Ok(Front {
        uri,
        server_ca_pem: server_ca.certificate_pem().to_string(),
        client_cert_pem: client_cert,
        client_key_pem: client_key,
        notes,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_front_requires_a_client_certificate_and_forwards_to_the_socket() {
        let cfg = front_config(
            "192.0.2.10".parse().unwrap(),
            27000,
            "/etc/oneinfra/hypervisor",
            "/run/containerd/containerd.sock",
        );
        assert!(cfg.contains(
            "bind 192.0.2.10:27000 ssl crt /etc/oneinfra/hypervisor/server.pem ca-file /etc/oneinfra/hypervisor/client-ca.crt verify required alpn h2"
        ));
        assert!(cfg.contains("server cri unix@/run/containerd/containerd.sock"));
        let v6 = front_config("fd00::1".parse().unwrap(), 27000, "/d", "/s.sock");
        assert!(v6.contains("bind [fd00::1]:27000 ssl"));
        assert_eq!(uri("fd00::1".parse().unwrap(), 1), "tcp://[fd00::1]:1");
    }

    #[test]
    fn certificates_are_kept_and_issued_again_only_when_needed() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files { dir: dir.path() };
        let now = OffsetDateTime::now_utc();
        let spec = |ip: &str| LeafSpec {
            issuer: CaKind::ApiServer,
            common_name: "h cri".into(),
            organizations: Vec::new(),
            sans: vec![ip.to_string()],
            usage: Usage::Server,
            key_algorithm: None,
        };
        let (ca1, new) = ca(&files, "server-ca", now).unwrap();
        assert!(new);
        let (c1, _, new) = leaf(&files, "server", &ca1, &spec("192.0.2.10"), now).unwrap();
        assert!(new);
        // Again: the same CA and certificate.
        let (ca2, new) = ca(&files, "server-ca", now).unwrap();
        assert!(!new);
        assert_eq!(ca2.certificate_pem(), ca1.certificate_pem());
        let (c2, _, new) = leaf(&files, "server", &ca2, &spec("192.0.2.10"), now).unwrap();
        assert!(!new);
        assert_eq!(c1, c2);
        // Another address, or close to its end: issued again, by the same CA.
        let (c3, _, new) = leaf(&files, "server", &ca2, &spec("192.0.2.11"), now).unwrap();
        assert!(new && c3 != c2);
        let later = now + LEAF_LIFETIME - time::Duration::days(10);
        let (c4, _, new) = leaf(&files, "server", &ca2, &spec("192.0.2.11"), later).unwrap();
        assert!(new && c4 != c3);
        assert!(oi_pki::is_signed_by(&c4, ca1.certificate_pem()).unwrap());
        // A CA close to its end is made again, and its leaves with it.
        let late = now + CA_LIFETIME - time::Duration::days(10);
        let (ca3, new) = ca(&files, "server-ca", late).unwrap();
        assert!(new && ca3.certificate_pem() != ca1.certificate_pem());
        let (c5, _, new) = leaf(&files, "server", &ca3, &spec("192.0.2.11"), late).unwrap();
        assert!(new && oi_pki::is_signed_by(&c5, ca3.certificate_pem()).unwrap());
        // Keys are 0600 from their creation.
        use std::os::unix::fs::PermissionsExt as _;
        for key in ["server-ca.key", "server.key"] {
            let mode = std::fs::metadata(dir.path().join(key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
    }
}
