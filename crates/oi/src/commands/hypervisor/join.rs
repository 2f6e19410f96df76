//! `oi hypervisor join`: run on a machine that has a CRI runtime (as root), it makes the
//! machine a hypervisor reachable over TCP with mutual TLS and prints its Hypervisor manifest.
//!
//! ```text
//! 1. the local runtime answers CRI Version at --cri-socket          else: fail, nothing done
//! 2. the front's PKI in --state-dir (0700; keys 0600): a server CA and a client CA, kept
//!    (a rerun reuses them, so manifests already given out stay good); the server
//!    certificate (SAN = --ip-address) and client certificate issued from them, again when
//!    missing, for another address, or within 30 days of expiry
//! 3. haproxy.cfg + server.pem + client-ca.crt written (atomically)
//! 4. the front: haproxy in TCP mode as a host-network pod *through the runtime itself*
//!    (`oneinfra-system/oneinfra-cri-front`): TLS with a client certificate required (ALPN
//!    h2), forwarding to the runtime's socket; ensured like every pod of ours (same spec:
//!    left running; another: replaced)
//! 5. the front answers CRI Version over mutual TLS with the client certificate
//! 6. the Hypervisor manifest printed: remoteCRIEndpoint tcp://IP:PORT, the server CA, the
//!    client certificate and key (a secret: use -o FILE, created 0600); or, with
//!    --management-endpoint, --management-ca-cert-file and --join-token (a hypervisor join
//!    token: a bootstrap token in the group config/rbac's joiner role binds, which may
//!    create Hypervisors and nothing else, not even read them), created there; one of that
//!    name already there is left as it is (the token cannot read it to compare)
//! ```
//!
//! Idempotent: a second run with the same flags changes nothing and prints the same manifest.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use oi_api::runtime::{ContainerSpec, Mount, PodSpec};
use oi_api::{
    Certificate, Hypervisor, HypervisorSpec, ObjectMeta, PortRange, RemoteCriEndpoint, World,
};
use oi_cri::{ClientOptions, CriClient, CriEndpoint, HypervisorRuntime as _};
use oi_pki::{CaKind, CertificateAuthority, KeyAlgorithm, LeafSpec, Usage};
use time::OffsetDateTime;

use crate::args::HypervisorJoinArgs;
use crate::commands::Context;

/// How long the front's CAs are valid.
const CA_LIFETIME: time::Duration = time::Duration::days(3650);
/// How long its server and client certificates are valid.
const LEAF_LIFETIME: time::Duration = time::Duration::days(365);
/// A certificate this close to its end is issued again by a rerun.
const RENEW_BEFORE: time::Duration = time::Duration::days(30);
/// How long the front may take to answer once its pod runs.
const FRONT_TIMEOUT: Duration = Duration::from_secs(60);

/// The front pod's CRI namespace and name.
pub const FRONT_NAMESPACE: &str = "oneinfra-system";
pub const FRONT_POD: &str = "oneinfra-cri-front";

/// Joins; returns the note for stderr (what was done).
///
/// # Errors
/// Each failure names what failed: the runtime, a file, the front.
pub fn run(
    args: &HypervisorJoinArgs,
    ctx: &Context,
    output: &mut impl Write,
) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(join(args, ctx.now, output))
}

/// The files of the front in the state directory.
struct Files {
    dir: PathBuf,
}

impl Files {
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

    fn write(&self, name: &str, contents: &str, mode: u32) -> anyhow::Result<()> {
        super::super::node::write_file(&self.path(name), contents.as_bytes(), mode)
    }
}

/// A CA kept in the state directory, made when missing.
fn ca(
    files: &Files,
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

/// A leaf kept in the state directory: issued again when missing, not by `ca` (a new CA),
/// for other SANs, or close to its end. Returns (certificate, key, issued now).
fn leaf(
    files: &Files,
    name: &str,
    ca: &CertificateAuthority,
    ca_renewed: bool,
    spec: &LeafSpec,
    now: OffsetDateTime,
) -> anyhow::Result<(String, String, bool)> {
    let (cert, key) = (format!("{name}.crt"), format!("{name}.key"));
    if !ca_renewed
        && let (Some(c), Some(k)) = (files.read(&cert)?, files.read(&key)?)
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

/// haproxy's configuration: mutual TLS in front of the runtime's socket.
fn front_config(ip: IpAddr, port: u16, dir: &str, socket: &str) -> String {
    let bind = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    format!(
        "# Written by oi hypervisor join: the mutual-TLS front of this machine's CRI runtime.
global
  maxconn 1024

defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h

frontend cri
  bind {bind}:{port} ssl crt {dir}/server.pem ca-file {dir}/client-ca.crt verify required alpn h2
  default_backend runtime

backend runtime
  server cri unix@{socket}
"
    )
}

async fn join(
    args: &HypervisorJoinArgs,
    now: OffsetDateTime,
    output: &mut impl Write,
) -> anyhow::Result<String> {
    let mut notes = Vec::new();
    // 1. The runtime answers.
    let socket = &args.cri_socket;
    let local = CriClient::connect(
        &args.name,
        CriEndpoint::Unix(socket.clone()),
        ClientOptions::default(),
    )
    .await
    .with_context(|| format!("the CRI runtime at {}", socket.display()))?;

    // 2. The PKI.
    let dir = &args.state_dir;
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let files = Files { dir: dir.clone() };
    let (server_ca, server_ca_new) = ca(&files, "server-ca", now)?;
    let (client_ca, client_ca_new) = ca(&files, "client-ca", now)?;
    let server_spec = LeafSpec {
        issuer: CaKind::ApiServer,
        common_name: format!("{} cri", args.name),
        organizations: Vec::new(),
        sans: vec![args.ip_address.to_string()],
        usage: Usage::Server,
        key_algorithm: None,
    };
    let client_spec = LeafSpec::client(CaKind::ApiServerClient, "oneinfra", &[]);
    let (server_cert, server_key, server_new) = leaf(
        &files,
        "server",
        &server_ca,
        server_ca_new,
        &server_spec,
        now,
    )?;
    let (client_cert, client_key, client_new) = leaf(
        &files,
        "client",
        &client_ca,
        client_ca_new,
        &client_spec,
        now,
    )?;
    for (new, what) in [
        (server_ca_new, "server CA"),
        (client_ca_new, "client CA"),
        (server_new, "server certificate"),
        (client_new, "client certificate"),
    ] {
        if new {
            notes.push(format!("{what} issued in {}", dir.display()));
        }
    }

    // 3. The front's files.
    let dir_text = dir.display().to_string();
    let socket_text = socket.display().to_string();
    files.write("server.pem", &format!("{server_cert}{server_key}"), 0o600)?;
    files.write("client-ca.crt", client_ca.certificate_pem(), 0o644)?;
    files.write(
        "haproxy.cfg",
        &front_config(args.ip_address, args.listen_port, &dir_text, &socket_text),
        0o644,
    )?;

    // 4. The front, through the runtime.
    let socket_dir = socket
        .parent()
        .context("the CRI socket has no directory")?
        .display()
        .to_string();
    let image = oi_api::versions::INFRA
        .haproxy
        .reference(args.image_repository.as_deref());
    let pod = PodSpec {
        namespace: FRONT_NAMESPACE.to_string(),
        name: FRONT_POD.to_string(),
        labels: [("oneinfra/role".to_string(), "cri-front".to_string())].into(),
        containers: vec![ContainerSpec {
            name: "haproxy".into(),
            image,
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
        }],
    };
    let outcome = local
        .ensure_pod(&pod)
        .await
        .with_context(|| format!("running the front pod {FRONT_NAMESPACE}/{FRONT_POD}"))?;
    // A new certificate needs a new haproxy: the files changed under a running one.
    let changed = !matches!(outcome, oi_cri::Outcome::Unchanged);
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
            "the front runs: pod {FRONT_NAMESPACE}/{FRONT_POD}, {}:{}",
            args.ip_address, args.listen_port
        ));
    } else {
        notes.push("the front runs already, unchanged".to_string());
    }

    // 5. The front answers, as the manager and `oi reconcile` will reach it.
    let uri = match args.ip_address {
        IpAddr::V4(v4) => format!("tcp://{v4}:{}", args.listen_port),
        IpAddr::V6(v6) => format!("tcp://[{v6}]:{}", args.listen_port),
    };
    let remote = CriEndpoint::Tls {
        uri: uri.clone(),
        ca_pem: server_ca.certificate_pem().to_string(),
        cert_pem: client_cert.clone(),
        key_pem: client_key.clone(),
    };
    let start = Instant::now();
    loop {
        match CriClient::connect(&args.name, remote.clone(), ClientOptions::default()).await {
            Ok(_) => break,
            Err(e) if start.elapsed() >= FRONT_TIMEOUT => {
                bail!("the front at {uri} did not answer within {FRONT_TIMEOUT:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }

    // 6. The manifest.
    let (low, high) = args.port_range;
    let mut meta = ObjectMeta::named(&args.name);
    for (k, v) in &args.labels {
        meta.labels.insert(k.clone(), v.clone());
    }
    let hypervisor = Hypervisor::new(
        meta,
        HypervisorSpec {
            local_cri_endpoint: None,
            remote_cri_endpoint: Some(RemoteCriEndpoint {
                cri_endpoint_uri: uri,
                ca_certificate: server_ca.certificate_pem().to_string(),
                client_certificate: Some(Certificate {
                    certificate: client_cert,
                    private_key: client_key,
                }),
            }),
            public: args.public,
            ip_address: args.ip_address.to_string(),
            port_range: PortRange { low, high },
            capacity: None,
            unschedulable: false,
        },
    );
    let object = oi_api::Object::Hypervisor(hypervisor.clone());
    crate::manifests::validate_new(&object)?;
    match (
        &args.management_endpoint,
        &args.management_ca_cert_file,
        &args.join_token,
    ) {
        (Some(endpoint), Some(ca), Some(token)) => {
            notes.push(register(&hypervisor, endpoint, ca, token).await?);
        }
        _ => {
            let mut world = World::default();
            world.insert(object);
            output.write_all(world.to_yaml()?.as_bytes())?;
        }
    }
    Ok(notes.join("\n"))
}

/// The management cluster's Hypervisors.
const HYPERVISORS: &str = "/apis/infra.oneinfra.ereslibre.es/v1alpha1/hypervisors";

/// Creates the Hypervisor on the management cluster with a hypervisor join token, which may
/// create Hypervisors and do nothing else: one of that name already there is left as it is
/// (the token cannot read it to compare; an administrator updates it).
async fn register(
    hypervisor: &Hypervisor,
    endpoint: &str,
    ca: &std::path::Path,
    token: &str,
) -> anyhow::Result<String> {
    if !oi_api::validation::is_bootstrap_token(token) {
        bail!("--join-token is not a bootstrap token ([a-z0-9]{{6}}.[a-z0-9]{{16}})");
    }
    let ca_pem = std::fs::read_to_string(ca)
        .with_context(|| format!("--management-ca-cert-file {}", ca.display()))?;
    let client = super::super::node::Client {
        network: oi_engine::RealNetwork::new(Duration::from_secs(20)),
        endpoint,
        tls: oi_engine::Tls {
            ca_pem,
            identity: None,
        },
        token,
    };
    let body = serde_json::to_string(hypervisor)?;
    let name = &hypervisor.metadata.name;
    let answer = client
        .call(&http::Method::POST, HYPERVISORS, Some(&body))
        .await?;
    match answer.status {
        200 | 201 => Ok(format!("hypervisor {name} registered at {endpoint}")),
        409 => Ok(format!(
            "hypervisor {name} is registered at {endpoint} already: left as it is (a join \
             token cannot change it; an administrator can, with the manifest this command \
             prints without --management-endpoint)"
        )),
        _ => Err(super::super::node::refusal(
            &format!("registering hypervisor {name}"),
            &answer,
        )),
    }
}

#[cfg(test)]
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
    }

    #[test]
    fn certificates_are_kept_and_issued_again_only_when_needed() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files {
            dir: dir.path().to_path_buf(),
        };
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
        let (c1, _, new) = leaf(&files, "server", &ca1, false, &spec("192.0.2.10"), now).unwrap();
        assert!(new);
        // Again: the same CA and certificate.
        let (ca2, new) = ca(&files, "server-ca", now).unwrap();
        assert!(!new);
        assert_eq!(ca2.certificate_pem(), ca1.certificate_pem());
        let (c2, _, new) = leaf(&files, "server", &ca2, false, &spec("192.0.2.10"), now).unwrap();
        assert!(!new);
        assert_eq!(c1, c2);
        // Another address, or close to its end: issued again, by the same CA.
        let (c3, _, new) = leaf(&files, "server", &ca2, false, &spec("192.0.2.11"), now).unwrap();
        assert!(new && c3 != c2);
        let later = now + LEAF_LIFETIME - time::Duration::days(10);
        let (c4, _, new) = leaf(&files, "server", &ca2, false, &spec("192.0.2.11"), later).unwrap();
        assert!(new && c4 != c3);
        assert!(oi_pki::is_signed_by(&c4, ca1.certificate_pem()).unwrap());
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
