//! `oi hypervisor check --name H`: is a registered hypervisor ready before anything is placed
//! on it? Read-only: one CRI `Version` call, image status calls, a path probe (a throwaway
//! pod of the toolbox image, as every run uses), and TCP connections to its port range.
//!
//! ```text
//! CHECK     RESULT  DETAIL
//! cri       ok      containerd 1.7.24 (CRI v1) at tcp://10.0.0.2:27000
//! tls       ok      server CA until 2036-11-26, client certificate until 2027-11-29
//! images    FAIL    missing 2 of 6: localhost/oneinfra/etcd:3.6.4-0, ...
//!                   -> import them into the runtime, or let it reach the registry
//! ports     ok      30000-32767 (2768 ports): 3 held by components, none taken by another program
//! capacity  warn    none declared: ... -> oi hypervisor inject --capacity-...
//! kvm       ok      /dev/kvm present
//! ```
//!
//! A `FAIL` makes the exit code 1, after the report; a `warn` does not.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use oi_api::hypervisor::CriEndpoint as ApiEndpoint;
use oi_api::versions::{INFRA, Image};
use oi_api::{Hypervisor, ObjectKey, World};
use oi_cri::{CriClient, HypervisorRuntime as _};
use oi_engine::Connector as _;
use time::OffsetDateTime;

use crate::args::HypervisorCheckArgs;
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub outcome: Outcome,
    pub detail: String,
    /// What to do about a warning or a failure.
    pub remedy: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            outcome: Outcome::Ok,
            detail: detail.into(),
            remedy: None,
        }
    }

    fn not_ok(
        name: &'static str,
        outcome: Outcome,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Check {
        Check {
            name,
            outcome,
            detail: detail.into(),
            remedy: Some(remedy.into()),
        }
    }
}

/// Certificates closer to their end than this are a warning.
const EXPIRY_WARNING: time::Duration = time::Duration::days(30);
/// How long one port may take to answer or refuse.
const PORT_TIMEOUT: Duration = Duration::from_millis(500);
/// Ports probed at once.
const PORTS_AT_ONCE: usize = 256;

/// # Errors
/// When the manifests do not load or the hypervisor does not exist; [`OutputThenFail`] after
/// the report when a check failed.
pub fn run(
    args: &HypervisorCheckArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let key = ObjectKey::cluster_scoped(args.name.as_str());
    let hypervisor = world
        .hypervisors
        .get(&key)
        .ok_or_else(|| anyhow::anyhow!("hypervisor {} not found in the manifests", args.name))?;
    let repository = args.image_repository.as_deref().filter(|r| !r.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let checks = runtime.block_on(check(&world, hypervisor, repository, ctx.now));
    output.write_all(report(&checks).as_bytes())?;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.outcome == Outcome::Fail)
        .map(|c| c.name)
        .collect();
    if failed.is_empty() {
        Ok(None)
    } else {
        Err(OutputThenFail(format!(
            "hypervisor {} is not ready: {} failed",
            args.name,
            failed.join(", ")
        ))
        .into())
    }
}

/// Every check of `hypervisor`, in the report's order.
pub async fn check(
    world: &World,
    hypervisor: &Hypervisor,
    repository: Option<&str>,
    now: OffsetDateTime,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let connector = crate::commands::reconcile::connector(repository);
    let endpoint = crate::commands::get::cri_endpoint(hypervisor);
    let client = match connector.connect(hypervisor).await {
        Ok(client) => match client.version().await {
            Ok(v) => {
                checks.push(Check::ok(
                    "cri",
                    format!(
                        "{} {} (CRI {}) at {endpoint}",
                        v.runtime_name, v.runtime_version, v.runtime_api_version
                    ),
                ));
                Some(client)
            }
            Err(e) => {
                checks.push(unreachable(&endpoint, &e.to_string()));
                None
            }
        },
        Err(e) => {
            checks.push(unreachable(&endpoint, &e.to_string()));
            None
        }
    };
    checks.push(tls(hypervisor, now));
    match &client {
        Some(client) => checks.push(images(world, hypervisor, repository, client).await),
        None => checks.push(not_checked("images")),
    }
    checks.push(ports(hypervisor).await);
    checks.push(capacity(hypervisor));
    match &client {
        Some(client) => checks.push(kvm(client).await),
        None => checks.push(not_checked("kvm")),
    }
    checks
}

fn unreachable(endpoint: &str, error: &str) -> Check {
    // The error names the endpoint already when it comes from the client.
    let detail = if error.contains(endpoint) {
        format!("the CRI runtime does not answer: {error}")
    } else {
        format!("the CRI runtime at {endpoint} does not answer: {error}")
    };
    Check::not_ok(
        "cri",
        Outcome::Fail,
        detail,
        "start the runtime (and its mutual-TLS front, `oi hypervisor join`), and check that \
         this machine reaches the endpoint",
    )
}

fn not_checked(name: &'static str) -> Check {
    Check::not_ok(
        name,
        Outcome::Fail,
        "not checked: the CRI runtime does not answer",
        "fix cri first",
    )
}

/// The mutual-TLS material of a remote endpoint: each certificate parses and is in force.
fn tls(hypervisor: &Hypervisor, now: OffsetDateTime) -> Check {
    let remote = match hypervisor.spec.cri_endpoint() {
        Some(ApiEndpoint::Remote(remote)) => remote,
        Some(ApiEndpoint::Local(_)) => {
            return Check::ok("tls", "a local unix socket: no TLS");
        }
        None => {
            return Check::not_ok(
                "tls",
                Outcome::Fail,
                "no CRI endpoint in the manifest",
                "give the hypervisor a localCRIEndpoint or a remoteCRIEndpoint",
            );
        }
    };
    let mut parts = vec![("server CA", remote.ca_certificate.as_str())];
    match &remote.client_certificate {
        Some(client) => parts.push(("client certificate", client.certificate.as_str())),
        None => {
            return Check::not_ok(
                "tls",
                Outcome::Fail,
                "the remote endpoint has no client certificate",
                "register it with the manifest `oi hypervisor join` printed",
            );
        }
    }
    let mut details = Vec::new();
    let mut outcome = Outcome::Ok;
    for (what, pem) in parts {
        match oi_pki::inspect_certificate(pem) {
            Err(e) => {
                details.push(format!("{what} does not parse: {e}"));
                outcome = Outcome::Fail;
            }
            Ok(info) if info.not_after <= now => {
                details.push(format!("{what} expired on {}", day(info.not_after)));
                outcome = Outcome::Fail;
            }
            Ok(info) if info.not_after - now < EXPIRY_WARNING => {
                details.push(format!("{what} expires on {}", day(info.not_after)));
                if outcome == Outcome::Ok {
                    outcome = Outcome::Warn;
                }
            }
            Ok(info) => details.push(format!("{what} until {}", day(info.not_after))),
        }
    }
    let detail = details.join(", ");
    match outcome {
        Outcome::Ok => Check::ok("tls", detail),
        _ => Check::not_ok(
            "tls",
            outcome,
            detail,
            "run `oi hypervisor join` on the machine again: it renews certificates within 30 \
             days of their end; then register the manifest it prints",
        ),
    }
}

fn day(t: OffsetDateTime) -> String {
    t.date().to_string()
}

/// The images this hypervisor's components would need: a private one the control plane of
/// every Kubernetes version in use (each cluster's wanted one and, mid-upgrade, the one it
/// runs; the default when no cluster is declared), a public one
/// the ingress's (and SIP's services' when the world holds SIPClusters); the pause and
/// toolbox images both.
pub fn needed_images(
    world: &World,
    hypervisor: &Hypervisor,
    repository: Option<&str>,
) -> Vec<String> {
    let mut images: Vec<Image> = vec![INFRA.pause, INFRA.toolbox];
    if hypervisor.spec.public {
        images.extend([INFRA.haproxy, INFRA.vpn_endpoint, INFRA.keepalived]);
        if !world.sip_clusters.is_empty() {
            images.extend(INFRA.sip_service_only());
        }
    } else {
        // The spec's version (empty is the default) is the next run's; the status's, when set,
        // is what runs until an upgrade is done.
        let mut releases: Vec<&oi_api::versions::KubernetesRelease> = world
            .clusters
            .values()
            .flat_map(|c| {
                let running = &c.status.kubernetes_version;
                std::iter::once(&c.spec.kubernetes_version)
                    .chain((!running.is_empty()).then_some(running))
            })
            .filter_map(|v| oi_api::versions::find_release(v))
            .collect();
        if releases.is_empty() {
            releases.push(oi_api::versions::default_release());
        }
        for release in releases {
            images.extend(release.images());
        }
    }
    let references: BTreeSet<String> = images.iter().map(|i| i.reference(repository)).collect();
    references.into_iter().collect()
}

async fn images(
    world: &World,
    hypervisor: &Hypervisor,
    repository: Option<&str>,
    client: &Arc<CriClient>,
) -> Check {
    let needed = needed_images(world, hypervisor, repository);
    let mut missing = Vec::new();
    for image in &needed {
        match client.image_present(image).await {
            Ok(true) => {}
            Ok(false) => missing.push(image.clone()),
            Err(e) => {
                return Check::not_ok(
                    "images",
                    Outcome::Fail,
                    format!("cannot ask for image {image}: {e}"),
                    "check the runtime's image service",
                );
            }
        }
    }
    if missing.is_empty() {
        Check::ok("images", format!("all {} present", needed.len()))
    } else {
        Check::not_ok(
            "images",
            Outcome::Fail,
            format!(
                "missing {} of {}: {}",
                missing.len(),
                needed.len(),
                missing.join(", ")
            ),
            "import them into the runtime (e.g. `ctr -n k8s.io images import`), or let the \
             hypervisor reach their registry; --image-repository names a mirror",
        )
    }
}

/// Each port of the range that is not a component's answers TCP only if another program
/// holds it. Ports that neither answer nor refuse in time (a firewall) are counted apart.
async fn ports(hypervisor: &Hypervisor) -> Check {
    let range = &hypervisor.spec.port_range;
    let ip: IpAddr = match hypervisor.spec.ip_address.parse() {
        Ok(ip) => ip,
        Err(_) => {
            return Check::not_ok(
                "ports",
                Outcome::Fail,
                format!(
                    "the address {:?} is not an IP address",
                    hypervisor.spec.ip_address
                ),
                "fix spec.ipAddress",
            );
        }
    };
    let (low, high) = (range.low, range.high);
    if low == 0 || high < low || high > u32::from(u16::MAX) {
        return Check::not_ok(
            "ports",
            Outcome::Fail,
            format!("the port range {low}-{high} is not valid"),
            "fix spec.portRange",
        );
    }
    let held: BTreeSet<u16> = hypervisor
        .status
        .allocated_ports
        .iter()
        .map(|a| a.port)
        .collect();
    let candidates: Vec<u16> = (low..=high)
        .filter_map(|p| u16::try_from(p).ok())
        .filter(|p| !held.contains(p))
        .collect();
    let (taken, silent) = probe(ip, &candidates).await;
    let total = high - low + 1;
    let mut detail = format!(
        "{low}-{high} ({total} ports): {} held by components, ",
        held.len()
    );
    if taken.is_empty() {
        detail.push_str("none taken by another program");
        if !silent.is_empty() {
            detail.push_str(&format!(
                " ({} did not answer within {} ms: filtered?)",
                silent.len(),
                PORT_TIMEOUT.as_millis()
            ));
        }
        return Check::ok("ports", detail);
    }
    let shown: Vec<String> = taken.iter().take(10).map(u16::to_string).collect();
    let more = if taken.len() > 10 {
        format!(" and {} more", taken.len() - 10)
    } else {
        String::new()
    };
    detail.push_str(&format!(
        "{} taken by another program: {}{more}",
        taken.len(),
        shown.join(", ")
    ));
    Check::not_ok(
        "ports",
        Outcome::Fail,
        detail,
        "free those ports on the machine, or give the hypervisor a range without them \
         (spec.portRange)",
    )
}

/// The ports that accept a TCP connection, and those that neither accept nor refuse in time.
async fn probe(ip: IpAddr, ports: &[u16]) -> (Vec<u16>, Vec<u16>) {
    let mut taken = Vec::new();
    let mut silent = Vec::new();
    for chunk in ports.chunks(PORTS_AT_ONCE) {
        let mut tasks = tokio::task::JoinSet::new();
        for &port in chunk {
            tasks.spawn(async move {
                let address = SocketAddr::new(ip, port);
                let answer =
                    tokio::time::timeout(PORT_TIMEOUT, tokio::net::TcpStream::connect(address))
                        .await;
                (port, answer.map(|r| r.is_ok()))
            });
        }
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((port, Ok(true))) => taken.push(port),
                Ok((port, Err(_))) => silent.push(port),
                _ => {}
            }
        }
    }
    taken.sort_unstable();
    silent.sort_unstable();
    (taken, silent)
}

fn capacity(hypervisor: &Hypervisor) -> Check {
    match &hypervisor.spec.capacity {
        Some(c) if c.components.is_some() || c.cpu.is_some() || c.memory.is_some() => {
            let mut parts = Vec::new();
            if let Some(n) = c.components {
                parts.push(format!("{n} components"));
            }
            if let Some(cpu) = &c.cpu {
                parts.push(format!("{cpu} CPU"));
            }
            if let Some(memory) = &c.memory {
                parts.push(format!("{memory} memory"));
            }
            Check::ok("capacity", format!("declared: {}", parts.join(", ")))
        }
        _ => Check::not_ok(
            "capacity",
            Outcome::Warn,
            "none declared: placement counts nothing against this machine's size",
            "declare it (spec.capacity; `oi hypervisor inject --capacity-components N \
             --capacity-cpu 4 --capacity-memory 8Gi`)",
        ),
    }
}

async fn kvm(client: &Arc<CriClient>) -> Check {
    match client.host_paths_present(&["/dev/kvm".to_string()]).await {
        Ok(present) if !present.is_empty() => Check::ok(
            "kvm",
            "/dev/kvm present: virtual machines (ViNO) run under KVM",
        ),
        Ok(_) => Check::not_ok(
            "kvm",
            Outcome::Warn,
            "/dev/kvm absent: virtual machines (ViNO) would run under emulation (TCG), slowly",
            "enable virtualization in the firmware and load kvm_intel or kvm_amd, if this \
             machine is to run ViNO's virtual machines",
        ),
        Err(e) => Check::not_ok(
            "kvm",
            Outcome::Fail,
            format!("cannot look for /dev/kvm: {e}"),
            "check that the runtime runs the toolbox image (--image-repository names a mirror)",
        ),
    }
}

/// The report: one line per check, its remedy on the next.
pub fn report(checks: &[Check]) -> String {
    let mut rows = vec![vec!["CHECK".to_string(), "RESULT".into(), "DETAIL".into()]];
    for c in checks {
        let outcome = match c.outcome {
            Outcome::Ok => "ok",
            Outcome::Warn => "warn",
            Outcome::Fail => "FAIL",
        };
        rows.push(vec![c.name.to_string(), outcome.into(), c.detail.clone()]);
        if let Some(remedy) = &c.remedy {
            rows.push(vec![String::new(), String::new(), format!("-> {remedy}")]);
        }
    }
    crate::commands::get::columns(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oi_api::ObjectMeta;
    use oi_api::hypervisor::{
        HypervisorCapacity, HypervisorSpec, LocalCriEndpoint, RemoteCriEndpoint,
    };
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-29 00:00:00 UTC);

    fn hypervisor(public: bool) -> Hypervisor {
        let spec = HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: "/run/nowhere.sock".into(),
            }),
            remote_cri_endpoint: None,
            public,
            ip_address: "127.0.0.1".into(),
            port_range: oi_api::hypervisor::PortRange {
                low: 30000,
                high: 30010,
            },
            unschedulable: false,
            drain: false,
            capacity: None,
        };
        Hypervisor::new(ObjectMeta::named("h1"), spec)
    }

    /// A remote endpoint whose CA ends in `ca_days` and client certificate in `client_days`.
    fn remote(ca_days: i64, client_days: i64) -> Hypervisor {
        let ca = |days: i64| {
            oi_pki::CertificateAuthority::generate(
                "test",
                oi_pki::KeyAlgorithm::EcdsaP256,
                NOW - time::Duration::days(400),
                time::Duration::days(400 + days),
            )
            .unwrap()
        };
        let mut h = hypervisor(false);
        h.spec.local_cri_endpoint = None;
        h.spec.remote_cri_endpoint = Some(RemoteCriEndpoint {
            cri_endpoint_uri: "tcp://127.0.0.1:27000".into(),
            ca_certificate: ca(ca_days).certificate_pem().to_string(),
            client_certificate: Some(oi_api::Certificate {
                certificate: ca(client_days).certificate_pem().to_string(),
                private_key: String::new(),
            }),
        });
        h
    }

    #[test]
    fn certificates_in_force_close_to_their_end_or_expired() {
        let ok = tls(&remote(3650, 365), NOW);
        assert_eq!(ok.outcome, Outcome::Ok, "{ok:?}");
        assert_eq!(
            ok.detail,
            "server CA until 2036-11-26, client certificate until 2027-11-29"
        );
        let soon = tls(&remote(3650, 10), NOW);
        assert_eq!(soon.outcome, Outcome::Warn, "{soon:?}");
        assert!(
            soon.detail
                .contains("client certificate expires on 2026-12-09"),
            "{soon:?}"
        );
        let gone = tls(&remote(-1, 10), NOW);
        assert_eq!(gone.outcome, Outcome::Fail, "{gone:?}");
        assert!(
            gone.detail.contains("server CA expired on 2026-11-28"),
            "{gone:?}"
        );
        assert!(gone.remedy.unwrap().contains("oi hypervisor join"));
        let mut broken = remote(3650, 365);
        if let Some(r) = broken.spec.remote_cri_endpoint.as_mut() {
            r.ca_certificate = "not a certificate".into();
        }
        let broken = tls(&broken, NOW);
        assert_eq!(broken.outcome, Outcome::Fail);
        assert!(
            broken.detail.starts_with("server CA does not parse"),
            "{broken:?}"
        );
        assert_eq!(
            tls(&hypervisor(false), NOW).detail,
            "a local unix socket: no TLS"
        );
    }

    #[test]
    fn images_follow_the_role_and_the_versions_in_use() {
        let world = World::default();
        let private = needed_images(&world, &hypervisor(false), Some("localhost/oneinfra"));
        let default = oi_api::versions::default_release();
        assert_eq!(private.len(), 6, "{private:?}");
        assert!(private.contains(&default.kube_apiserver.reference(Some("localhost/oneinfra"))));
        assert!(private.contains(&INFRA.toolbox.reference(Some("localhost/oneinfra"))));
        let public = needed_images(&world, &hypervisor(true), None);
        assert!(
            public.contains(&INFRA.haproxy.reference(None)),
            "{public:?}"
        );
        assert!(
            public.contains(&INFRA.keepalived.reference(None)),
            "{public:?}"
        );
        assert!(
            !public.iter().any(|i| i.contains("kube-apiserver")),
            "{public:?}"
        );
        assert!(
            !public.contains(&INFRA.jump_host.reference(None)),
            "no SIPCluster: {public:?}"
        );
        // Mid-upgrade, both the release that runs and the one wanted.
        let releases = oi_api::versions::RELEASES;
        let (old, new) = (&releases[0], &releases[releases.len() - 1]);
        let mut cluster = oi_api::Cluster::new(
            ObjectMeta::named("c1"),
            oi_api::ClusterSpec {
                kubernetes_version: new.version.to_string(),
                ..oi_api::ClusterSpec::default()
            },
        );
        cluster.status.kubernetes_version = old.version.to_string();
        let mut world = World::default();
        world
            .clusters
            .insert(ObjectKey::new("default", "c1"), cluster);
        let upgrading = needed_images(&world, &hypervisor(false), None);
        for release in [old, new] {
            assert!(
                upgrading.contains(&release.kube_apiserver.reference(None)),
                "{}: {upgrading:?}",
                release.version
            );
        }
    }

    #[test]
    fn capacity_declared_or_a_warning() {
        let mut h = hypervisor(false);
        let none = capacity(&h);
        assert_eq!(none.outcome, Outcome::Warn);
        assert!(none.remedy.unwrap().contains("--capacity-cpu"));
        h.spec.capacity = Some(HypervisorCapacity {
            components: Some(4),
            cpu: Some("4".into()),
            memory: Some("8Gi".into()),
        });
        let declared = capacity(&h);
        assert_eq!(declared.outcome, Outcome::Ok);
        assert_eq!(declared.detail, "declared: 4 components, 4 CPU, 8Gi memory");
    }

    #[tokio::test]
    async fn a_port_another_program_holds_is_named_and_ours_are_not_probed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut h = hypervisor(false);
        h.spec.port_range = oi_api::hypervisor::PortRange {
            low: u32::from(port),
            high: u32::from(port),
        };
        let taken = ports(&h).await;
        assert_eq!(taken.outcome, Outcome::Fail, "{taken:?}");
        assert!(
            taken
                .detail
                .ends_with(&format!("1 taken by another program: {port}")),
            "{taken:?}"
        );
        // The same port held by one of our components is not another program's.
        h.status
            .allocated_ports
            .push(oi_api::hypervisor::HypervisorPortAllocation {
                cluster: "c1".into(),
                cluster_namespace: "default".into(),
                component: "c1-control-plane-0".into(),
                port,
            });
        let ours = ports(&h).await;
        assert_eq!(ours.outcome, Outcome::Ok, "{ours:?}");
        assert!(
            ours.detail.contains("1 held by components, none taken"),
            "{ours:?}"
        );
        drop(listener);
    }

    #[test]
    fn the_report_puts_each_remedy_under_its_check() {
        let text = report(&[
            Check::ok("cri", "containerd 2.0"),
            Check::not_ok("ports", Outcome::Fail, "30001 taken", "free it"),
        ]);
        assert_eq!(
            text,
            "CHECK  RESULT  DETAIL\ncri    ok      containerd 2.0\nports  FAIL    30001 taken\n               -> free it\n"
        );
    }
}
