//! The engine against recording fakes: oi_cri's FakeRuntime per hypervisor and a simulated
//! network in which etcd members and API servers answer once their pods run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oi_api::common::condition_types;

use oi_api::ObjectKey;
use oi_api::{
    Cluster, ClusterSpec, Component, EtcdInitialClusterState, Hypervisor, HypervisorSpec,
    LocalCriEndpoint, ObjectMeta, PortRange, Resource as _, World, find_condition,
};
use oi_cri::HypervisorRuntime as _;
use oi_cri::fake::{Call, FakeRuntime};
use oi_planner::{ClusterOutcome, ClusterPlan, Plan, PlanOptions, Reason};
use time::OffsetDateTime;
use time::macros::datetime;

use oi_engine::*;
use oi_engine_testsupport::sim;

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

fn hypervisor(name: &str, public: bool, ip: &str) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named(name),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: format!("/run/{name}/containerd.sock"),
            }),
            remote_cri_endpoint: None,
            public,
            ip_address: ip.into(),
            port_range: PortRange {
                low: 30000,
                high: 30099,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

fn cluster(name: &str, replicas: u32) -> Cluster {
    Cluster::new(
        ObjectMeta::named(name),
        ClusterSpec {
            control_plane_replicas: Some(replicas),
            ..ClusterSpec::default()
        },
    )
}

fn world(public: usize, clusters: &[(&str, u32)]) -> World {
    let mut w = World::default();
    for i in 1..=3 {
        let h = hypervisor(&format!("private-{i}"), false, &format!("10.0.0.{i}"));
        w.hypervisors.insert(h.key(), h);
    }
    for i in 1..=public {
        let h = hypervisor(&format!("public-{i}"), true, &format!("10.0.1.{i}"));
        w.hypervisors.insert(h.key(), h);
    }
    for (name, replicas) in clusters {
        let c = cluster(name, *replicas);
        w.clusters.insert(c.key(), c);
    }
    w
}

struct FakeConnector {
    runtimes: BTreeMap<String, Arc<FakeRuntime>>,
    down: Mutex<BTreeSet<String>>,
}

impl FakeConnector {
    fn new() -> Self {
        let runtimes = [
            "private-1",
            "private-2",
            "private-3",
            "private-4",
            "private-5",
            "public-1",
            "public-2",
        ]
        .into_iter()
        .map(|h| (h.to_string(), Arc::new(FakeRuntime::new(h))))
        .collect();
        FakeConnector {
            runtimes,
            down: Mutex::new(BTreeSet::new()),
        }
    }

    fn all_calls(&self) -> Vec<(String, Call)> {
        self.runtimes
            .iter()
            .flat_map(|(h, rt)| rt.calls().into_iter().map(move |c| (h.clone(), c)))
            .collect()
    }

    fn clear(&self) {
        for rt in self.runtimes.values() {
            rt.clear_calls();
        }
    }
}

impl Connector for FakeConnector {
    type Runtime = FakeRuntime;

    async fn connect(&self, h: &Hypervisor) -> Result<Arc<FakeRuntime>, ConnectError> {
        let name = h.metadata.name.clone();
        if self.down.lock().unwrap().contains(&name) {
            return Err(ConnectError::Unreachable {
                hypervisor: name,
                reason: "connection refused".into(),
            });
        }
        Ok(Arc::clone(&self.runtimes[&name]))
    }
}

/// The world of the current run, as the simulated network sees it.
#[derive(Default)]
struct Learned(Mutex<World>);

impl sim::Source for Learned {
    fn find_component<T>(&self, f: impl FnMut(&Component) -> Option<T>) -> Option<T> {
        self.0.lock().unwrap().components.values().find_map(f)
    }
    fn find_hypervisor<T>(&self, f: impl FnMut(&Hypervisor) -> Option<T>) -> Option<T> {
        self.0.lock().unwrap().hypervisors.values().find_map(f)
    }
    fn with_component<T>(
        &self,
        key: &ObjectKey,
        f: impl FnOnce(&Component) -> Option<T>,
    ) -> Option<T> {
        self.0.lock().unwrap().components.get(key).and_then(f)
    }
}

type SimNetwork = sim::SimNetwork<Learned>;

fn options() -> ExecuteOptions {
    ExecuteOptions {
        max_wait: Duration::from_secs(2),
        poll_interval: Duration::from_millis(5),
        ..ExecuteOptions::default()
    }
}

/// A whole run as `oi reconcile` makes it: plan, execute, record.
struct Report {
    world: World,
    clusters: BTreeMap<ObjectKey, ClusterOutcome>,
    counts: Counts,
    /// The workers each cluster's run found joined.
    joined: BTreeMap<ObjectKey, Option<Vec<String>>>,
}

impl Report {
    fn all_ready(&self) -> bool {
        self.clusters.values().all(|c| c.ready || c.deleted)
    }
}

struct Harness {
    connector: FakeConnector,
    network: SimNetwork,
    events: Mutex<Vec<String>>,
}

impl Harness {
    fn new() -> Self {
        let connector = FakeConnector::new();
        let network = SimNetwork::new(Learned::default(), connector.runtimes.clone());
        Harness {
            connector,
            network,
            events: Mutex::new(Vec::new()),
        }
    }

    async fn run(&self, world: World) -> Report {
        let world = oi_planner::prepare(world, NOW).world;
        *self.network.source().0.lock().unwrap() = world.clone();
        self.events.lock().unwrap().clear();
        let progress = |e: &Event| self.events.lock().unwrap().push(e.to_string());
        let plan = oi_planner::plan(world, NOW, &PlanOptions::default());
        let executed = execute(&plan, &options(), &self.connector, &self.network, &progress).await;
        Report {
            world: oi_planner::record(plan.world, &executed.clusters, NOW),
            joined: executed
                .clusters
                .iter()
                .map(|(k, r)| (k.clone(), r.joined.clone()))
                .collect(),
            clusters: executed
                .clusters
                .into_iter()
                .map(|(k, r)| (k, r.outcome))
                .collect(),
            counts: executed.counts,
        }
    }
}

fn succeeded(report: &Report, name: &str) -> Option<String> {
    let c = &report.world.clusters[&ObjectKey::new("default", name)];
    find_condition(&c.status.conditions, condition_types::RECONCILE_SUCCEEDED)
        .map(|c| format!("{:?} {}", c.status, c.reason))
}

#[tokio::test]
async fn three_new_replicas_found_etcd_together_and_a_second_run_changes_nothing() {
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert_eq!(
        succeeded(&report, "c").as_deref(),
        Some("True ReconcileSucceeded")
    );
    let outcome = &report.clusters[&ObjectKey::new("default", "c")];
    assert_eq!((outcome.etcd_voting, outcome.apiservers_ready), (3, 3));
    assert!(outcome.ingress_ready);
    assert_eq!(report.counts.pods_created, 7);
    assert!(report.counts.files_written > 0);
    assert_eq!(
        h.network.log(),
        ["bootstrap c-control-plane-0,c-control-plane-1,c-control-plane-2"]
    );
    // Files first, then the etcd pod, then the Kubernetes pod, on each private hypervisor.
    let calls = h.connector.all_calls();
    let on = |hv: &str| -> Vec<String> {
        calls
            .iter()
            .filter(|(x, c)| x == hv && !matches!(c, Call::PullImage(_)))
            .map(|(_, c)| match c {
                Call::WriteFiles(_) => "files".to_string(),
                Call::CreatePod { name, .. } => name.clone(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let placed = |name: &str| {
        report.world.components[&ObjectKey::new("default", name)]
            .spec
            .hypervisor
            .clone()
            .unwrap()
    };
    assert_eq!(
        on(&placed("c-control-plane-1")),
        ["files", "c-control-plane-1-etcd", "c-control-plane-1"]
    );
    // The ingress of the new cluster is told once that its API servers answer: haproxy's
    // checks failed while they started.
    assert_eq!(
        on("public-1")
            .into_iter()
            .map(
                |c| if c.contains("haproxy runtime API") && c.contains("health up") {
                    "vouched".to_string()
                } else {
                    c
                }
            )
            .collect::<Vec<_>>(),
        ["files", "c-ingress", "vouched"]
    );
    let events = h.events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e.ends_with("c/c-control-plane-0: created pod c-control-plane-0-etcd")),
        "{events:?}"
    );
    assert!(events.iter().all(|e| !e.contains("PRIVATE KEY")));

    // Second run over the output: zero mutating calls.
    h.connector.clear();
    h.network.clear_log();
    let second = h.run(report.world.clone()).await;
    assert!(second.all_ready());
    assert_eq!(second.counts.mutating_calls, 0);
    assert_eq!(second.counts.pods_unchanged, 7);
    assert_eq!(
        (second.counts.pods_created, second.counts.files_written),
        (0, 0)
    );
    assert!(h.connector.all_calls().is_empty());
    assert!(h.network.log().is_empty());
    assert_eq!(
        second.world.to_yaml().unwrap(),
        report.world.to_yaml().unwrap()
    );
}

#[tokio::test]
async fn the_simulations_etcd_keeps_the_contract_real_etcd_keeps() {
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 1)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let plan = oi_planner::plan(report.world, NOW, &PlanOptions::default());
    let ClusterPlan::Converge(c) = &plan.clusters[&ObjectKey::new("default", "c")] else {
        panic!("c converges");
    };
    let identity = c.etcd.client.as_ref().unwrap();
    let tls = Tls {
        ca_pem: identity.server_ca.clone(),
        identity: Some((identity.certificate.clone(), identity.private_key.clone())),
    };
    let url = c.etcd.members[0].client_url.clone();
    oi_engine_testsupport::etcd_contract::run(oi_engine_testsupport::etcd_contract::Subject {
        etcd: &h.network,
        url: &url,
        tls: &tls,
        spare: [
            "https://10.0.0.250:2380".to_string(),
            "https://10.0.0.251:2380".to_string(),
        ],
        unreachable: "https://10.0.0.252:2379",
        check_snapshot: oi_planner::snapshot::check_etcd_snapshot,
    })
    .await;
}

#[tokio::test]
async fn scaling_down_removes_the_member_before_its_pod_and_frees_its_ports() {
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready());
    let mut w = report.world.clone();
    w.clusters
        .get_mut(&ObjectKey::new("default", "c"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(1);
    let gone = ObjectKey::new("default", "c-control-plane-2");
    let hv = w.components[&gone].spec.hypervisor.clone().unwrap();
    h.connector.clear();
    h.network.clear_log();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let log = h.network.log();
    let removals: Vec<&String> = log.iter().filter(|l| l.starts_with("remove")).collect();
    assert_eq!(
        removals,
        [
            "remove c-control-plane-1 running=true",
            "remove c-control-plane-2 running=true"
        ]
    );
    // Each removal only once the members that stay were seen healthy: the last one only once
    // c-control-plane-0 (the one that stays) was.
    let last = log
        .iter()
        .position(|l| l == "remove c-control-plane-2 running=true");
    let healthy = log
        .iter()
        .rposition(|l| l == "health c-control-plane-0 true");
    assert!(healthy < last, "{log:?}");
    assert!(!report.world.components.contains_key(&gone));
    let h_status = &report.world.hypervisors[&ObjectKey::cluster_scoped(hv.clone())].status;
    assert!(
        h_status
            .allocated_ports
            .iter()
            .all(|p| p.component != "c-control-plane-2")
    );
    assert!(!h_status.freed_ports.is_empty());
    let calls = h.connector.runtimes[&hv].calls();
    assert!(calls.contains(&Call::RemovePod {
        namespace: "default".into(),
        name: "c-control-plane-2-etcd".into()
    }));
    assert!(calls.iter().any(|c| matches!(c, Call::RemoveHostPaths(p)
        if p.contains(&"/var/lib/oneinfra/default/c/c-control-plane-2".to_string()))));
    assert_eq!(report.counts.pods_removed, 4);
    // The ingress's configuration lost two backends: haproxy takes them out first (runtime
    // API), then is told to reload it, and keeps running (no connection refused); the
    // reload is over once the new worker answers.
    let public = h.connector.runtimes["public-1"].calls();
    assert_eq!(
        runtime_api_commands(&public),
        [
            "set server apiservers/c-control-plane-1 state drain; show stat",
            "set server apiservers/c-control-plane-2 state drain; show stat",
            "show info",
            "show info",
        ]
    );
    // The one replica left is not restarted: its API server stores in its own etcd member
    // only, so the others leaving changed none of its flags.
    assert_eq!(report.counts.pods_replaced, 0, "{:?}", report.counts);
    assert!(
        public
            .iter()
            .any(|c| matches!(c, Call::WriteFiles(f) if f.len() == 1))
    );
    assert!(
        public
            .iter()
            .any(|c| matches!(c, Call::Exec { job, command, .. }
            if job == "reload" && command.last().map(String::as_str) == Some("kill -USR2 1"))),
        "{public:?}"
    );
    assert!(
        !public
            .iter()
            .any(|c| matches!(c, Call::RemovePod { .. } | Call::CreatePod { .. })),
        "{public:?}"
    );
    let outcome = &report.clusters[&ObjectKey::new("default", "c")];
    assert_eq!(outcome.etcd_voting, 1);
}

#[tokio::test]
async fn replicas_added_later_join_one_by_one_as_learners() {
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 1)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert_eq!(h.network.log(), ["bootstrap c-control-plane-0"]);
    let mut w = report.world.clone();
    w.clusters
        .get_mut(&ObjectKey::new("default", "c"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(3);
    let first = w.components[&ObjectKey::new("default", "c-control-plane-0")]
        .spec
        .hypervisor
        .clone()
        .unwrap();
    h.connector.clear();
    h.network.clear_log();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert_eq!(
        h.network.log(),
        [
            "add c-control-plane-1 running=false",
            "promote c-control-plane-1",
            // A member whose pod changed is healthy before the next one is touched.
            "health c-control-plane-1 false",
            "health c-control-plane-1 true",
            "add c-control-plane-2 running=false",
            "promote c-control-plane-2",
            "health c-control-plane-2 false",
            "health c-control-plane-2 true",
        ]
    );
    assert_eq!(
        report.clusters[&ObjectKey::new("default", "c")].etcd_voting,
        3
    );
    // The founding member keeps running: only its API server (new etcd servers) restarts.
    let calls = h.connector.runtimes[&first].calls();
    assert!(
        calls.iter().all(|c| !matches!(c,
            Call::CreatePod { name, .. } | Call::RemovePod { name, .. } if name == "c-control-plane-0-etcd")),
        "{calls:?}"
    );
}

/// A converged 3-replica cluster `c`, then a run over it in which the `certificate` server
/// certificate of every replica is reissued (as on renewal); returns that run's report, its
/// etcd membership and health log, and the progress lines (without the hypervisor) for
/// which `step` holds.
async fn reissue_all(
    h: &Harness,
    certificate: &str,
    step: impl Fn(&str) -> bool,
) -> (Report, Vec<String>, Vec<String>) {
    rerun_after(h, |w| drop_server_certificates(w, &[certificate]), step).await
}

/// `certificates` dropped from the status of each of cluster `c`'s three replicas, so that
/// the next run reissues them; each must have been there.
fn drop_server_certificates(w: &mut World, certificates: &[&str]) {
    for i in 0..3 {
        let key = ObjectKey::new("default", format!("c-control-plane-{i}"));
        let held = &mut w
            .components
            .get_mut(&key)
            .unwrap()
            .status
            .server_certificates;
        for certificate in certificates {
            assert!(
                held.remove(*certificate).is_some(),
                "{key:?} had no {certificate} certificate"
            );
        }
    }
}

/// A converged 3-replica cluster `c`, then a run over it once `change` has been made to its
/// world; returns that run's report, its etcd membership and health log, and the progress
/// lines (without the hypervisor) for which `step` holds.
async fn rerun_after(
    h: &Harness,
    change: impl FnOnce(&mut World),
    step: impl Fn(&str) -> bool,
) -> (Report, Vec<String>, Vec<String>) {
    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    change(&mut w);
    h.connector.clear();
    h.network.clear_log();
    h.events.lock().unwrap().clear();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let steps = h
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| step(e))
        .map(|e| e.split("] ").nth(1).unwrap_or(e).to_string())
        .collect();
    (report, h.network.log(), steps)
}

#[tokio::test]
async fn a_reissued_etcd_serving_or_peer_certificate_restarts_nothing() {
    let h = Harness::new();
    // etcd reads its own serving and peer certificates again for each new connection: the
    // files are rewritten, no pod is touched, no member goes unhealthy.
    let (report, log, _) = rerun_after(
        &h,
        |w| drop_server_certificates(w, &["etcd-server", "etcd-peer"]),
        |_| false,
    )
    .await;
    assert_eq!(report.counts.pods_replaced, 0, "{:?}", report.counts);
    assert!(
        report.counts.mutating_calls > 0,
        "the files are written: {:?}",
        report.counts
    );
    assert_eq!(log, Vec::<String>::new());
    let calls: Vec<_> = h
        .connector
        .runtimes
        .values()
        .flat_map(|r| r.calls())
        .collect();
    let written: Vec<_> = calls
        .iter()
        .flat_map(|c| match c {
            Call::WriteFiles(paths) => paths.clone(),
            _ => Vec::new(),
        })
        .map(|p| p.rsplit('/').next().unwrap().to_string())
        .collect();
    for f in [
        "etcd-server.crt",
        "etcd-server.key",
        "etcd-peer.crt",
        "etcd-peer.key",
    ] {
        assert_eq!(
            written.iter().filter(|w| *w == f).count(),
            3,
            "{f}: {written:?}"
        );
    }
}

/// A rotation's first phase for the etcd peer CA: cluster c trusts a new one beside the
/// current, so every etcd pod must restart (etcd reads its trusted CA files only at start).
fn trust_a_new_etcd_peer_ca(w: &mut World) {
    let c = w.clusters.get_mut(&ObjectKey::new("default", "c")).unwrap();
    let selection = oi_planner::rotation::Selection {
        cas: vec![oi_pki::CaKind::EtcdPeer],
        service_account: false,
    };
    oi_planner::rotation::start(c, &selection, NOW, &Default::default()).unwrap();
}

#[tokio::test]
async fn a_running_clusters_etcd_pods_are_replaced_one_at_a_time_each_healthy_before_the_next() {
    let h = Harness::new();
    // A new etcd peer CA is trusted beside the current one (a rotation's first phase): every
    // etcd pod must restart to read its trusted CA file (etcd reads it only at start).
    let (report, log, etcd_steps) = rerun_after(&h, trust_a_new_etcd_peer_ca, |e| {
        e.contains("-etcd") || e.contains("etcd member healthy") || e.contains("leadership")
    })
    .await;
    // Only the etcd pods read the etcd serving certificate: the Kubernetes control plane
    // pods and the ingress keep running.
    assert_eq!(
        (report.counts.pods_replaced, report.counts.pods_unchanged),
        (3, 4),
        "{:?}",
        report.counts
    );
    // One member at a time: each is healthy again (etcd's own /health, asked until it says
    // so) before the next pod is touched; membership unchanged.
    assert_eq!(
        log,
        [
            "health c-control-plane-0 false",
            "health c-control-plane-0 true",
            "health c-control-plane-1 false",
            "health c-control-plane-1 true",
            "health c-control-plane-2 false",
            "health c-control-plane-2 true",
        ]
    );
    assert_eq!(
        etcd_steps,
        [
            // The leader (the simulation's is the first voting member) hands leadership to
            // the next before it restarts: no election timeout to wait out.
            "c/c-control-plane-0: handed etcd leadership to c-control-plane-1",
            "c/c-control-plane-0: replaced pod c-control-plane-0-etcd",
            "c/c-control-plane-0: etcd member healthy",
            "c/c-control-plane-1: replaced pod c-control-plane-1-etcd",
            "c/c-control-plane-1: etcd member healthy",
            "c/c-control-plane-2: replaced pod c-control-plane-2-etcd",
            "c/c-control-plane-2: etcd member healthy",
        ]
    );
    // A converged cluster asks no health and changes nothing.
    h.connector.clear();
    h.network.clear_log();
    let again = h.run(report.world.clone()).await;
    assert!(again.all_ready());
    assert_eq!(h.network.log(), Vec::<String>::new());
    assert_eq!(again.counts.mutating_calls, 0, "{:?}", again.counts);
}

#[tokio::test]
async fn a_members_etcd_restart_takes_its_api_server_out_of_the_ingress_until_it_reads_from_it() {
    let h = Harness::new();
    let default = "/api/v1/namespaces/default";
    // Every etcd pod restarts to trust a new etcd peer CA (a rotation's first phase). Each
    // replica's API server stores in its own member only, so it is out of the ingress while
    // that member restarts, and back only once a read through it reached etcd again: the
    // first such read (c-control-plane-0's) fails, as one would while its storage reconnects.
    let (report, _, steps) = rerun_after(
        &h,
        |w| {
            h.network
                .script_api("GET", default, 503, "etcd reconnecting", 1);
            trust_a_new_etcd_peer_ca(w);
        },
        |e| e.contains("-etcd") || e.contains("the ingress") || e.contains("reads from"),
    )
    .await;
    assert_eq!(report.counts.pods_replaced, 3, "{:?}", report.counts);
    assert_eq!(
        steps,
        [0, 1, 2]
            .map(|i| [
                format!("c/c-ingress: c-control-plane-{i} taken out of the ingress"),
                format!("c/c-control-plane-{i}: replaced pod c-control-plane-{i}-etcd"),
                format!("c/c-control-plane-{i}: kube-apiserver reads from its etcd member again"),
                format!("c/c-ingress: c-control-plane-{i} back in the ingress"),
            ])
            .concat(),
    );
    // Asked with the run's identity until it answered from storage: 1 refusal, then one
    // read per replica.
    let reads = h
        .network
        .api_reads()
        .into_iter()
        .filter(|r| r == &format!("GET {default}"))
        .count();
    assert_eq!(reads, 4);
    // Taken out and waited for, told up and put back, through haproxy's runtime API.
    let public = h.connector.runtimes["public-1"].calls();
    assert_eq!(
        runtime_api_commands(&public),
        one_replica_at_a_time_out_of_the_ingress(),
    );
}

#[tokio::test]
async fn a_running_clusters_api_servers_are_replaced_one_at_a_time_each_ready_before_the_next() {
    let h = Harness::new();
    // Every replica's API serving certificate is reissued: the control plane pods restart,
    // the etcd pods (which do not read it) stay.
    let (report, log, steps) = reissue_all(&h, "apiserver", |e| {
        e.contains("pod") || e.contains("kube-apiserver ready") || e.contains("the ingress")
    })
    .await;
    assert_eq!(
        (report.counts.pods_replaced, report.counts.pods_unchanged),
        (3, 4),
        "{:?}",
        report.counts
    );
    assert_eq!(log, Vec::<String>::new(), "etcd untouched");
    assert_eq!(
        steps,
        [0, 1, 2]
            .map(|i| [
                format!("c/c-ingress: c-control-plane-{i} taken out of the ingress"),
                format!("c/c-control-plane-{i}: replaced pod c-control-plane-{i}"),
                format!("c/c-control-plane-{i}: kube-apiserver ready"),
                format!("c/c-ingress: c-control-plane-{i} back in the ingress"),
            ])
            .concat(),
        "each API server out of the ingress while it restarts"
    );
    // First, what an earlier run may have left out is looked for (nothing here); then each
    // was taken out through haproxy's runtime API and waited for, then told up and put back:
    // no configuration written, no reload, no pod of the ingress touched.
    let public = h.connector.runtimes["public-1"].calls();
    assert_eq!(
        runtime_api_commands(&public),
        one_replica_at_a_time_out_of_the_ingress(),
    );
    let writes = public
        .iter()
        .filter(|c| matches!(c, Call::WriteFiles(_)))
        .count();
    let reloads = public
        .iter()
        .filter(|c| matches!(c, Call::Exec { job, .. } if job == "reload"))
        .count();
    assert_eq!((writes, reloads), (0, 0), "{public:?}");
    assert!(
        !public
            .iter()
            .any(|c| matches!(c, Call::RemovePod { .. } | Call::CreatePod { .. })),
        "{public:?}"
    );
}

/// What haproxy's runtime API is asked when each of c's three replicas restarts in turn: what
/// an earlier run left out looked for, then each taken out and waited for, told up and put
/// back.
fn one_replica_at_a_time_out_of_the_ingress() -> Vec<String> {
    [vec!["show stat".to_string()]]
        .into_iter()
        .chain([0, 1, 2].map(|i| {
            let s = format!("apiservers/c-control-plane-{i}");
            vec![
                format!("set server {s} state drain; show stat"),
                format!("set server {s} health up; set server {s} state ready; show stat"),
            ]
        }))
        .flatten()
        .collect()
}

/// The commands sent to haproxy's runtime API, in order.
fn runtime_api_commands(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Exec { job, command, .. } if job == "haproxy runtime API" => {
                command.last().cloned()
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_api_server_restarts_only_once_haproxy_says_it_holds_no_connection() {
    let h = Harness::new();
    // c-control-plane-1 still holds a connection in the first two answers after its drain.
    h.connector.runtimes["public-1"].hold_sessions("c-control-plane-1", 2);
    let (report, _, steps) = reissue_all(&h, "apiserver", |e| {
        e.contains("replaced pod") || e.contains("the ingress")
    })
    .await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let public = h.connector.runtimes["public-1"].calls();
    let s = "apiservers/c-control-plane-1";
    let asked = runtime_api_commands(&public);
    let from = asked
        .iter()
        .position(|c| *c == format!("set server {s} state drain; show stat"))
        .expect("c-control-plane-1 taken out");
    // Asked again until the connection was gone, then restarted.
    assert_eq!(
        asked[from..from + 4],
        [
            format!("set server {s} state drain; show stat"),
            "show stat".to_string(),
            "show stat".to_string(),
            format!("set server {s} health up; set server {s} state ready; show stat"),
        ]
    );
    let out = steps
        .iter()
        .position(|e| e == "c/c-ingress: c-control-plane-1 taken out of the ingress")
        .expect("taken out");
    assert_eq!(
        steps[out + 1],
        "c/c-control-plane-1: replaced pod c-control-plane-1"
    );
}

#[tokio::test]
async fn a_cluster_planned_before_etcd_records_is_brought_up_as_it_was() {
    // A manifest written before `status.etcdMember` existed: placed, ports allocated, no
    // records. Its members were started one by one, so they are recorded that way.
    let h = Harness::new();
    let mut w = oi_planner::prepare(world(1, &[("c", 3)]), NOW).world;
    for c in w.components.values_mut() {
        c.status.etcd_member = None;
    }
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert_eq!(
        h.network.log(),
        [
            "bootstrap c-control-plane-0",
            "add c-control-plane-1 running=false",
            "promote c-control-plane-1",
            "add c-control-plane-2 running=false",
            "promote c-control-plane-2",
        ]
    );
    let state = |name: &str| {
        let m = report.world.components[&ObjectKey::new("default", name)]
            .status
            .etcd_member
            .clone()
            .unwrap();
        (m.initial_cluster_state, m.initial_cluster.len())
    };
    assert_eq!(
        state("c-control-plane-0"),
        (EtcdInitialClusterState::New, 1)
    );
    assert_eq!(
        state("c-control-plane-2"),
        (EtcdInitialClusterState::Existing, 3)
    );
}

#[tokio::test]
async fn deleting_a_cluster_removes_everything_and_frees_its_ports() {
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 2), ("d", 1)])).await;
    assert!(report.all_ready());
    let mut w = report.world.clone();
    w.clusters
        .get_mut(&ObjectKey::new("default", "c"))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    h.connector.clear();
    let report = h.run(w).await;
    let c = ObjectKey::new("default", "c");
    assert!(report.clusters[&c].deleted);
    assert!(!report.world.clusters.contains_key(&c));
    assert!(
        report
            .world
            .components
            .values()
            .all(|x| x.spec.cluster != "c")
    );
    for hv in report.world.hypervisors.values() {
        assert!(hv.status.allocated_ports.iter().all(|p| p.cluster != "c"));
        assert!(
            hv.status
                .files
                .get("default")
                .is_none_or(|m| !m.contains_key("c"))
        );
    }
    assert_eq!(report.counts.pods_removed, 5);
    let mut removed_logs = BTreeSet::new();
    for rt in h.connector.runtimes.values() {
        let pods = futures::executor::block_on(rt.list_pods(&BTreeMap::new())).unwrap();
        assert!(pods.iter().all(|p| !p.name.starts_with("c-")), "{pods:?}");
        for call in rt.calls() {
            if let Call::RemoveHostPaths(paths) = call {
                removed_logs.extend(
                    paths
                        .into_iter()
                        .filter(|p| p.starts_with(oi_api::runtime::paths::POD_LOG_DIR)),
                );
            }
        }
    }
    // Each removed pod's log directory went with the cluster's directories; d's stay.
    assert_eq!(removed_logs.len(), 5, "{removed_logs:?}");
    assert!(
        removed_logs.iter().all(|p| p.starts_with(&format!(
            "{}/default_c-",
            oi_api::runtime::paths::POD_LOG_DIR
        ))),
        "{removed_logs:?}"
    );
    assert!(report.all_ready(), "d is untouched and ready");
    assert_eq!(
        succeeded(&report, "d").as_deref(),
        Some("True ReconcileSucceeded")
    );
}

#[tokio::test]
async fn an_unreachable_hypervisor_fails_only_its_clusters() {
    let h = Harness::new();
    let w = oi_planner::prepare(world(2, &[("a", 1), ("b", 1)]), NOW).world;
    let a_host = w.components[&ObjectKey::new("default", "a-control-plane-0")]
        .spec
        .hypervisor
        .clone()
        .unwrap();
    assert!(
        w.components
            .values()
            .filter(|c| c.spec.cluster == "b")
            .all(|c| c.spec.hypervisor.as_deref() != Some(a_host.as_str())),
        "b shares no hypervisor with a"
    );
    h.connector.down.lock().unwrap().insert(a_host.clone());
    let report = h.run(w).await;
    let a = &report.clusters[&ObjectKey::new("default", "a")];
    assert!(!a.ready);
    assert_eq!(a.reason, Reason::HypervisorUnreachable);
    assert!(a.message.contains(&a_host), "{}", a.message);
    assert_eq!(
        succeeded(&report, "a").as_deref(),
        Some("False HypervisorUnreachable")
    );
    assert!(report.clusters[&ObjectKey::new("default", "b")].ready);
    assert!(!report.all_ready());
}

#[tokio::test]
async fn dry_run_lists_the_plan_without_mutating() {
    let h = Harness::new();
    let w = world(1, &[("c", 1)]);
    let plan = dry_run(
        &oi_planner::plan(w.clone(), NOW, &PlanOptions::default()),
        &h.connector,
        false,
    )
    .await;
    assert!(h.connector.all_calls().is_empty());
    let public = &plan.hypervisors["public-1"];
    assert_eq!(public.create, ["default/c-ingress"]);
    assert_eq!(public.files.len(), 2);
    let report = h.run(w).await;
    let plan = dry_run(
        &oi_planner::plan(report.world.clone(), NOW, &PlanOptions::default()),
        &h.connector,
        false,
    )
    .await;
    let public = &plan.hypervisors["public-1"];
    assert_eq!(public.keep, ["default/c-ingress"]);
    assert!(public.create.is_empty() && public.files.is_empty());

    // A reissued API serving certificate: its files are rewritten and the control plane pod
    // that reads them is planned for replacement; the etcd pod stays.
    let mut w = report.world.clone();
    let key = ObjectKey::new("default", "c-control-plane-0");
    let hv = w.components[&key].spec.hypervisor.clone().unwrap();
    w.components
        .get_mut(&key)
        .unwrap()
        .status
        .server_certificates
        .remove("apiserver");
    h.connector.clear();
    let plan = dry_run(
        &oi_planner::plan(w, NOW, &PlanOptions::default()),
        &h.connector,
        false,
    )
    .await;
    assert!(h.connector.all_calls().is_empty());
    let private = &plan.hypervisors[&hv];
    assert_eq!(private.replace, ["default/c-control-plane-0"]);
    assert_eq!(private.keep, ["default/c-control-plane-0-etcd"]);
    let files: Vec<&str> = private
        .files
        .iter()
        .map(|f| f.rsplit('/').next().unwrap_or(f))
        .collect();
    assert_eq!(files, ["apiserver.crt", "apiserver.key"]);
    assert!(private.remove_directories.is_empty(), "{private:?}");

    // Deleted: every pod of it goes, and its directories on each hypervisor it used.
    let mut w = report.world.clone();
    w.clusters
        .get_mut(&ObjectKey::new("default", "c"))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    let plan = dry_run(
        &oi_planner::plan(w, NOW, &PlanOptions::default()),
        &h.connector,
        false,
    )
    .await;
    for hv in [hv.as_str(), "public-1"] {
        let p = &plan.hypervisors[hv];
        assert!(!p.remove.is_empty() && p.keep.is_empty(), "{hv}: {p:?}");
        assert_eq!(
            p.remove_directories,
            [
                oi_api::runtime::paths::cluster_config_dir("default", "c"),
                oi_api::runtime::paths::cluster_data_dir("default", "c"),
            ],
            "{hv}"
        );
    }
}

#[tokio::test]
async fn throwaway_pods_a_killed_run_left_are_removed() {
    let h = Harness::new();
    let writer = oi_api::runtime::ContainerSpec {
        name: "oi-file-writer".into(),
        image: "busybox".into(),
        command: vec!["sh".into()],
        args: Vec::new(),
        env: BTreeMap::new(),
        mounts: Vec::new(),
        privileged: false,
        resources: None,
    };
    let leftover = oi_cri::requests::throwaway_pod(&writer, "killed");
    let rt = &h.connector.runtimes["private-1"];
    rt.ensure_pod(&leftover).await.unwrap();
    h.connector.clear();

    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let run = BTreeMap::from([(oi_cri::requests::RUN_LABEL.to_string(), "true".to_string())]);
    assert!(rt.list_pods(&run).await.unwrap().is_empty());
    assert!(h.connector.all_calls().contains(&(
        "private-1".to_string(),
        Call::RemovePod {
            namespace: leftover.namespace.clone(),
            name: leftover.name.clone()
        }
    )));
    // Only cluster pods remain, and a converged run makes no call at all.
    assert_eq!(report.counts.pods_created, 7);
    h.connector.clear();
    let again = h.run(report.world).await;
    assert_eq!(again.counts.mutating_calls, 0);
}

#[test]
fn every_step_error_has_its_condition_reason() {
    let unreachable = Arc::new(ConnectError::Unreachable {
        hypervisor: "h".into(),
        reason: "refused".into(),
    });
    let etcd = || oi_engine::etcd::EtcdError::Unreachable {
        endpoint: "https://10.0.0.1:30001".into(),
        reason: "refused".into(),
    };
    let cases: Vec<(StepError, Reason, &str)> = vec![
        (
            StepError::Unreachable {
                hypervisor: "h".into(),
                source: unreachable,
            },
            Reason::HypervisorUnreachable,
            "hypervisor h is unreachable: hypervisor h is unreachable: refused; if it is gone for \
             good, remove it (`oi hypervisor remove --name h`, or delete the Hypervisor)",
        ),
        (
            StepError::UnknownHypervisor {
                hypervisor: "h".into(),
            },
            Reason::HypervisorUnreachable,
            "hypervisor h is not known",
        ),
        (
            StepError::EtcdIdentity {
                reason: "no etcd client CA".into(),
            },
            Reason::EtcdNotReady,
            "etcd client identity: no etcd client CA",
        ),
        (
            StepError::EtcdAdd {
                member: "m".into(),
                source: etcd(),
            },
            Reason::EtcdNotReady,
            "adding etcd member m: etcd https://10.0.0.1:30001 unreachable: refused",
        ),
        (
            StepError::EtcdNotVoting {
                voting: 2,
                members: 3,
                started: 3,
                listed: 3,
            },
            Reason::EtcdNotReady,
            "etcd: 2 of 3 members voting, 3 started, 3 in the membership",
        ),
        (
            StepError::MissingPod {
                component: "c".into(),
                pod: "c-etcd".into(),
            },
            Reason::RenderFailed,
            "c has no pod c-etcd",
        ),
        (
            StepError::ApiServersNotReady(vec!["a".into(), "b".into()]),
            Reason::ApiServerNotReady,
            "a; b",
        ),
        (
            StepError::IngressNotReady(vec!["the cluster has no ingress".into()]),
            Reason::IngressNotReady,
            "the cluster has no ingress",
        ),
        (
            StepError::Teardown(Box::new(StepError::UnknownHypervisor {
                hypervisor: "h".into(),
            })),
            Reason::DeleteFailed,
            "hypervisor h is not known",
        ),
        (
            StepError::ClusterBootstrap {
                endpoint: "https://10.0.1.1:30000".into(),
                object: "Secret kube-system/bootstrap-token-abcdef".into(),
                reason: "create answered 422: invalid".into(),
            },
            Reason::ClusterBootstrapFailed,
            "inside the cluster (https://10.0.1.1:30000): Secret kube-system/bootstrap-token-abcdef: create answered 422: invalid",
        ),
        (
            StepError::ClusterBootstrap {
                endpoint: "not planned".into(),
                object: String::new(),
                reason: "the cluster has no join key".into(),
            },
            Reason::ClusterBootstrapFailed,
            "inside the cluster (not planned): the cluster has no join key",
        ),
    ];
    for (error, reason, message) in cases {
        assert_eq!(
            (error.reason(), error.to_string().as_str()),
            (reason, message)
        );
    }
    // The source chain is kept.
    let chained = StepError::EtcdAdd {
        member: "m".into(),
        source: etcd(),
    };
    assert!(std::error::Error::source(&chained).is_some());
}

#[test]
fn a_dry_run_leaves_alone_the_pods_of_clusters_that_cannot_be_planned() {
    // What the hypervisors run: both clusters' pods and files, as a converged run left them.
    let running = oi_planner::plan(
        world(1, &[("a", 1), ("b", 1)]),
        NOW,
        &PlanOptions::default(),
    );
    let placed: BTreeMap<ObjectKey, oi_planner::ClusterResult> = running
        .clusters
        .iter()
        .map(|(key, cluster)| {
            let oi_planner::ClusterPlan::Converge(c) = cluster else {
                panic!("{cluster:?}");
            };
            let mut result = oi_planner::ClusterResult::new(key);
            result.outcome.ready = true;
            result.files = c
                .components
                .iter()
                .map(|p| oi_planner::PlacedFiles {
                    hypervisor: p.hypervisor.clone(),
                    component: p.name().to_string(),
                    hashes: p
                        .rendered
                        .files
                        .iter()
                        .map(|f| (f.path.clone(), f.content_hash()))
                        .collect(),
                })
                .collect();
            (key.clone(), result)
        })
        .collect();
    let w = oi_planner::record(running.world.clone(), &placed, NOW);
    let mut broken = w.clone();
    broken
        .clusters
        .get_mut(&ObjectKey::new("default", "b"))
        .unwrap()
        .spec
        .api_server
        .ca
        .as_mut()
        .unwrap()
        .certificate = "not a certificate".into();
    let plan = oi_planner::plan(broken, NOW, &PlanOptions::default());
    let mut listed: BTreeMap<String, Result<Vec<oi_cri::PodStatus>, String>> = BTreeMap::new();
    for cluster in running.clusters.values() {
        let oi_planner::ClusterPlan::Converge(c) = cluster else {
            panic!("{cluster:?}");
        };
        for component in &c.components {
            let pods = listed
                .entry(component.hypervisor.clone())
                .or_insert_with(|| Ok(Vec::new()))
                .as_mut()
                .unwrap();
            for spec in &component.rendered.pods {
                pods.push(oi_cri::PodStatus {
                    id: spec.name.clone(),
                    namespace: spec.namespace.clone(),
                    name: spec.name.clone(),
                    labels: spec.labels.clone(),
                    annotations: BTreeMap::from([(
                        oi_api::runtime::labels::SPEC_HASH.to_string(),
                        spec.content_hash(),
                    )]),
                    state: oi_cri::PodState::Ready,
                    containers: spec
                        .containers
                        .iter()
                        .map(|c| oi_cri::ContainerStatus {
                            id: c.name.clone(),
                            name: c.name.clone(),
                            image: c.image.clone(),
                            state: oi_cri::ContainerState::Running,
                            exit_code: None,
                        })
                        .collect(),
                });
            }
        }
    }
    listed.insert("private-3".into(), Err("connection refused".into()));
    let dry = oi_engine::dry_run::diff(&plan, &listed, false);
    assert_eq!(dry.failures.len(), 1);
    assert!(dry.failures[&ObjectKey::new("default", "b")].contains("spec.apiServer.ca"));
    let all = |f: fn(&HypervisorPlan) -> &Vec<String>| -> Vec<String> {
        dry.hypervisors
            .values()
            .flat_map(|p| f(p).clone())
            .collect()
    };
    assert!(
        all(|p| &p.remove).is_empty(),
        "b's pods are left alone: {dry:?}"
    );
    assert!(all(|p| &p.create).is_empty() && all(|p| &p.replace).is_empty());
    // a's pods run as planned and read no changed file: kept.
    let mut kept = all(|p| &p.keep);
    kept.sort();
    assert_eq!(
        kept,
        [
            "default/a-control-plane-0",
            "default/a-control-plane-0-etcd",
            "default/a-ingress"
        ]
    );
    assert_eq!(
        dry.hypervisors["private-3"].unreachable.as_deref(),
        Some("connection refused")
    );
}

const TOKEN_A: &str = "abcdef.0123456789abcdef";
const TOKEN_B: &str = "ghijkl.0123456789abcdef";
const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";

#[tokio::test]
async fn a_ready_cluster_gets_its_objects_inside_once_and_revoked_tokens_are_deleted() {
    let h = Harness::new();
    let mut w = world(1, &[("c", 1)]);
    let key = ObjectKey::new("default", "c");
    w.clusters.get_mut(&key).unwrap().spec.join_tokens = vec![TOKEN_A.into(), TOKEN_B.into()];
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let paths = h.network.api_paths();
    for path in [
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodejoinrequests.node.oneinfra.ereslibre.es",
        "/api/v1/namespaces/oneinfra-system",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/oneinfra:node:join-requester",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/oneinfra-system/roles/oneinfra:node:join-requester",
        "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef",
        "/api/v1/namespaces/kube-system/secrets/bootstrap-token-ghijkl",
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
        "/apis/apps/v1/namespaces/kube-system/deployments/coredns",
        "/api/v1/namespaces/kube-system/services/kube-dns",
        "/api/v1/namespaces/oneinfra-system/configmaps/oneinfra-join",
    ] {
        assert!(paths.iter().any(|p| p == path), "{path} not in {paths:?}");
    }
    // Created in order, the join key last; each write counted and told.
    let writes = h.network.api_writes();
    assert!(writes.iter().all(|w| w.starts_with("POST ")), "{writes:?}");
    assert_eq!(report.counts.cluster_writes, writes.len() as u64);
    assert_eq!(
        writes.first().map(String::as_str),
        Some("POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    );
    assert_eq!(
        writes.last().map(String::as_str),
        Some("POST /api/v1/namespaces/oneinfra-system/configmaps")
    );
    let joined = report.world.clusters[&key].spec.join_key.clone().unwrap();
    assert_eq!(
        h.network
            .api_object("/api/v1/namespaces/oneinfra-system/configmaps/oneinfra-join")
            .unwrap()["data"]["joinKey"],
        joined.public_key.as_str()
    );
    assert_eq!(
        report.world.clusters[&key].status.join_tokens,
        [TOKEN_A, TOKEN_B]
    );
    let events = h.events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e == "c: created Secret kube-system/bootstrap-token-abcdef"),
        "{events:?}"
    );
    // No event carries a token secret.
    assert!(events.iter().all(|e| !e.contains("0123456789abcdef")));

    // A second run writes nothing inside, though the API server added fields of its own.
    let crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodejoinrequests.node.oneinfra.ereslibre.es";
    let mut served = h.network.api_object(crd).unwrap();
    served["metadata"]["uid"] = "u-1".into();
    served["status"] = serde_json::json!({"acceptedNames": {"kind": "NodeJoinRequest"}});
    h.network.set_api_object(crd, Some(served));
    h.connector.clear();
    h.network.clear_log();
    let before = h.network.api_writes().len();
    let second = h.run(report.world.clone()).await;
    assert!(second.all_ready());
    assert_eq!(second.counts.cluster_writes, 0);
    assert_eq!(h.network.api_writes().len(), before);
    // Read with one LIST per collection holding several of the objects (their items
    // without apiVersion and kind, as kube-apiserver lists them), a GET for the others:
    // no object both listed and read alone.
    let reads = h.network.api_reads();
    let in_cluster = "labelSelector=oneinfra.ereslibre.es/in-cluster%3Dtrue";
    let lists: Vec<&String> = reads.iter().filter(|r| r.ends_with(in_cluster)).collect();
    for collection in [
        "/api/v1/namespaces/kube-system/secrets",
        "/api/v1/namespaces/kube-system/configmaps",
        "/api/v1/namespaces/kube-system/serviceaccounts",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    ] {
        assert!(
            lists.contains(&&format!("GET {collection}?{in_cluster}")),
            "{collection} not listed: {reads:?}"
        );
    }
    for read in &reads {
        let path = read.trim_start_matches("GET ");
        if let Some((collection, _)) = path.rsplit_once('/')
            && !path.contains('?')
        {
            assert!(
                !lists.contains(&&format!("GET {collection}?{in_cluster}")),
                "{path} read alone though its collection was listed: {reads:?}"
            );
        }
    }
    let objects = [
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodejoinrequests.node.oneinfra.ereslibre.es",
        "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
        "/api/v1/namespaces/kube-system/services/kube-dns",
    ];
    for path in objects {
        assert!(
            reads.contains(&format!("GET {path}")),
            "{path} not read: {reads:?}"
        );
    }
    assert!(reads.len() < 20, "{} reads: {reads:?}", reads.len());

    // Someone changed the join key ConfigMap and deleted the kube-dns Service: put back.
    let join = "/api/v1/namespaces/oneinfra-system/configmaps/oneinfra-join";
    let mut changed = h.network.api_object(join).unwrap();
    changed["data"]["joinKey"] = "forged".into();
    changed["data"]["other"] = "kept".into();
    h.network.set_api_object(join, Some(changed));
    h.network
        .set_api_object("/api/v1/namespaces/kube-system/services/kube-dns", None);
    // A bootstrap token that is not ours (no label) stays; token B leaves the Cluster.
    let foreign = format!("{SECRETS}/bootstrap-token-zzzzzz");
    let mut w = second.world.clone();
    w.clusters.get_mut(&key).unwrap().spec.join_tokens = vec![TOKEN_A.into()];
    let writes_before = h.network.api_writes().len();
    put_object(
        &h.network,
        &report,
        SECRETS,
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-zzzzzz", "namespace": "kube-system"}}),
    )
    .await;
    let third = h.run(w).await;
    assert!(third.all_ready(), "{:?}", third.clusters);
    let writes: Vec<String> = h.network.api_writes()[writes_before + 1..].to_vec();
    assert_eq!(
        writes,
        [
            "POST /api/v1/namespaces/kube-system/services",
            "PATCH /api/v1/namespaces/oneinfra-system/configmaps/oneinfra-join",
            "DELETE /api/v1/namespaces/kube-system/secrets/bootstrap-token-ghijkl",
        ]
    );
    let join_map = h.network.api_object(join).unwrap();
    assert_eq!(join_map["data"]["joinKey"], joined.public_key.as_str());
    assert_eq!(join_map["data"]["other"], "kept");
    assert!(h.network.api_object(&foreign).is_some());
    assert_eq!(report_tokens(&third, &key), [TOKEN_A]);
}

/// A run over converged clusters costs two round trips of the network, whatever the
/// number of in-cluster objects: etcd's members, then etcd's members again, every `/readyz`
/// and every read of the objects inside, all at once. Counted on a paused clock, each
/// request taking one round trip.
#[tokio::test(start_paused = true)]
async fn a_converged_clusters_run_costs_two_round_trips() {
    let h = Harness::new();
    let mut w = world(1, &[("a", 3)]);
    let key = ObjectKey::new("default", "a");
    w.clusters.get_mut(&key).unwrap().spec.join_tokens = vec![TOKEN_A.into(), TOKEN_B.into()];
    let first = h.run(w).await;
    assert!(first.all_ready(), "{:?}", first.clusters);
    let round_trip = Duration::from_millis(100);
    h.network.set_round_trip(Some(round_trip));
    h.network.clear_log();
    let started = tokio::time::Instant::now();
    let again = h.run(first.world.clone()).await;
    let took = started.elapsed();
    assert!(again.all_ready(), "{:?}", again.clusters);
    assert_eq!(again.counts.cluster_writes, 0);
    // The reads of a cluster's objects were made (their paths are those of the first run's
    // test above); none twice.
    let reads = h.network.api_reads();
    assert!(reads.len() > 10, "{reads:?}");
    let distinct: BTreeSet<&String> = reads.iter().collect();
    assert_eq!(distinct.len(), reads.len(), "{reads:?}");
    assert_eq!(
        took,
        2 * round_trip,
        "{} round trips",
        took.as_secs_f64() / round_trip.as_secs_f64()
    );
}

fn report_tokens(report: &Report, key: &ObjectKey) -> Vec<String> {
    report.world.clusters[key].status.join_tokens.clone()
}

/// Creates `object` in `collection` of the (only) cluster's API, as another client would.
async fn put_object(
    network: &SimNetwork,
    report: &Report,
    collection: &str,
    object: serde_json::Value,
) {
    let cluster = report.world.clusters.values().next().unwrap();
    let ca = cluster.spec.api_server.ca.clone().unwrap().certificate;
    let endpoint = cluster.status.api_server_endpoint.clone();
    let body = object.to_string();
    let tls = Tls {
        ca_pem: ca,
        identity: Some(("cert".into(), "key".into())),
    };
    let r = network
        .request(HttpsRequest {
            base: &endpoint,
            method: &http::Method::POST,
            path: collection,
            body: Some(&body),
            tls: &tls,
            bearer: None,
        })
        .await
        .unwrap();
    assert_eq!(r.status, 201);
}

#[tokio::test]
async fn an_api_server_not_ready_yet_is_waited_for_and_a_refusal_fails_at_once_naming_the_object() {
    let h = Harness::new();
    let mut w = world(1, &[("c", 1)]);
    let key = ObjectKey::new("default", "c");
    w.clusters.get_mut(&key).unwrap().spec.join_tokens = vec![TOKEN_A.into()];
    // kube-system not served yet for the first two tries: waited for.
    h.network.script_api(
        "POST",
        SECRETS,
        404,
        "namespaces \"kube-system\" not found",
        2,
    );
    let report = h.run(w.clone()).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let posts = |h: &Harness| {
        h.network
            .api_writes()
            .iter()
            .filter(|w| *w == &format!("POST {SECRETS}"))
            .count()
    };
    assert_eq!(posts(&h), 3);

    // A new token the API server refuses: the cluster fails at once, naming the Secret and
    // the API server's message, never the token.
    let h = Harness::new();
    h.network.script_api(
        "POST",
        SECRETS,
        422,
        "Secret \"bootstrap-token-abcdef\" is invalid",
        100,
    );
    let report = h.run(w).await;
    let outcome = &report.clusters[&key];
    assert!(!outcome.ready);
    assert_eq!(outcome.reason, Reason::ClusterBootstrapFailed);
    assert_eq!(
        outcome.message,
        format!(
            "inside the cluster ({}): Secret kube-system/bootstrap-token-abcdef: create answered 422: Secret \"bootstrap-token-abcdef\" is invalid",
            report.world.clusters[&key].status.api_server_endpoint
        )
    );
    assert_eq!(posts(&h), 1, "a refusal is not retried");
    assert_eq!(
        succeeded(&report, "c").as_deref(),
        Some("False ClusterBootstrapFailed")
    );
    // The tokens are not recorded as in force.
    assert!(report.world.clusters[&key].status.join_tokens.is_empty());
}

const REQUESTS: &str = "/apis/node.oneinfra.ereslibre.es/v1alpha1/nodejoinrequests";

/// A NodeJoinRequest for `name` as `oi node join` makes it, to the cluster's join key.
fn join_request(cluster: &Cluster, name: &str) -> (serde_json::Value, oi_pki::SymmetricKey) {
    let key = oi_pki::SymmetricKey::generate();
    let public = &cluster.spec.join_key.as_ref().unwrap().public_key;
    let request = serde_json::json!({
        "apiVersion": "node.oneinfra.ereslibre.es/v1alpha1", "kind": "NodeJoinRequest",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "7"},
        "spec": {"symmetricKey": key.wrap(public).unwrap(),
                 "extraSANs": [key.seal(b"10.9.0.1").unwrap()]},
    });
    (request, key)
}

#[tokio::test]
async fn join_requests_are_answered_once_and_a_taken_node_name_is_refused() {
    let h = Harness::new();
    let key = ObjectKey::new("default", "c");
    let report = h.run(world(1, &[("c", 1)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let cluster = report.world.clusters[&key].clone();
    let (w1, w1_key) = join_request(&cluster, "w1");
    put_object(&h.network, &report, REQUESTS, w1).await;
    let (w2, _) = join_request(&cluster, "w2");
    put_object(&h.network, &report, REQUESTS, w2).await;
    // w2 names a Node that exists already.
    put_object(
        &h.network,
        &report,
        "/api/v1/nodes",
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w2"}}),
    )
    .await;
    let before = h.network.api_writes().len();
    let second = h.run(report.world.clone()).await;
    assert!(second.all_ready(), "{:?}", second.clusters);
    let writes = h.network.api_writes()[before..].to_vec();
    assert_eq!(
        writes,
        [
            format!("PUT {REQUESTS}/w1/status"),
            format!("PUT {REQUESTS}/w2/status")
        ]
    );
    assert_eq!(second.counts.cluster_writes, 2);
    let answered = h.network.api_object(&format!("{REQUESTS}/w1")).unwrap();
    let status = &answered["status"];
    assert_eq!(status["conditions"][0]["type"], "Issued");
    assert_eq!(status["conditions"][0]["status"], "True");
    let open = |field: &str| {
        String::from_utf8(w1_key.open(status[field].as_str().unwrap()).unwrap()).unwrap()
    };
    assert_eq!(open("kubernetesVersion"), "1.37.1");
    assert!(open("kubeConfig").contains(&cluster.status.api_server_endpoint));
    assert!(open("kubeletServerPrivateKey").contains("PRIVATE KEY"));
    // The spec is kept as the worker wrote it.
    assert_eq!(
        answered["spec"]["extraSANs"].as_array().map(Vec::len),
        Some(1)
    );
    let refused = h.network.api_object(&format!("{REQUESTS}/w2")).unwrap();
    assert_eq!(refused["status"]["conditions"][0]["status"], "False");
    assert_eq!(
        refused["status"]["conditions"][0]["reason"],
        "NodeNameTaken"
    );
    assert!(refused["status"].get("kubeConfig").is_none());
    let events = h.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e == "c: issued NodeJoinRequest w1"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e == "c: refused NodeJoinRequest w2 (NodeNameTaken)"),
        "{events:?}"
    );
    assert!(events.iter().all(|e| !e.contains("PRIVATE KEY")));

    // Answered requests are left alone.
    let before = h.network.api_writes().len();
    let third = h.run(second.world.clone()).await;
    assert!(third.all_ready());
    assert_eq!(third.counts.cluster_writes, 0);
    assert_eq!(h.network.api_writes().len(), before);
    // The next run finds w1 joined (what a CA rotation names), not the refused w2.
    let third = h.run(second.world.clone()).await;
    assert_eq!(third.joined[&key], Some(vec!["w1".to_string()]));
}

/// A request of the new form: the worker's own WireGuard public key, sealed.
fn vpn_join_request(
    cluster: &Cluster,
    name: &str,
) -> (serde_json::Value, oi_pki::SymmetricKey, String) {
    let (mut request, key) = join_request(cluster, name);
    let (_, public) = oi_pki::generate_wireguard_keys();
    request["spec"]["vpnPublicKey"] = key.seal(public.as_bytes()).unwrap().into();
    (request, key, public)
}

#[tokio::test]
async fn vpn_peers_follow_join_requests_and_nodes_without_restarting_the_endpoint() {
    let h = Harness::new();
    let key = ObjectKey::new("default", "c");
    let mut w = world(1, &[("c", 1)]);
    w.clusters.get_mut(&key).unwrap().spec.vpn.enabled = true;
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    // The ingress runs haproxy and the VPN endpoint.
    let pods: BTreeSet<String> = h.connector.runtimes["public-1"]
        .list_pods(&BTreeMap::new())
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(
        pods,
        BTreeSet::from(["c-ingress".into(), "c-ingress-vpn".into()])
    );
    let conf_path = "/etc/oneinfra/default/c/c-ingress/vpn.conf";
    let conf = |h: &Harness| {
        String::from_utf8(
            h.connector.runtimes["public-1"].files()[conf_path]
                .content
                .clone(),
        )
        .unwrap()
    };
    assert!(!conf(&h).contains("[Peer]"));

    // Two workers ask at once: both become peers, the file is rewritten and nothing restarts.
    let cluster = report.world.clusters[&key].clone();
    let (w1, w1_key, w1_public) = vpn_join_request(&cluster, "w1");
    put_object(&h.network, &report, REQUESTS, w1).await;
    let (w2, _) = join_request(&cluster, "w2");
    put_object(&h.network, &report, REQUESTS, w2).await;
    h.connector.clear();
    let second = h.run(report.world.clone()).await;
    assert!(second.all_ready(), "{:?}", second.clusters);
    assert_eq!(second.counts.pods_created + second.counts.pods_replaced, 0);
    assert_eq!(second.counts.files_written, 1);
    let text = conf(&h);
    assert!(
        text.contains(&format!(
            "# worker-w1\nPublicKey = {w1_public}\nAllowedIPs = 10.0.0.2/32\n"
        )),
        "{text}"
    );
    assert!(text.contains("# worker-w2\n"), "{text}");
    let peers = &second.world.clusters[&key].status.vpn_peers;
    let names: Vec<(&str, &str)> = peers
        .iter()
        .map(|p| (p.name.as_str(), p.address.as_str()))
        .collect();
    assert_eq!(
        names,
        [("worker-w1", "10.0.0.2/16"), ("worker-w2", "10.0.0.3/16")]
    );
    // The new form keeps its private key home; oneinfra's form gets one made.
    assert!(peers[0].private_key.is_empty());
    assert!(!peers[1].private_key.is_empty());
    let answered = h.network.api_object(&format!("{REQUESTS}/w1")).unwrap();
    let vpn = &answered["status"]["vpn"];
    let open = |v: &serde_json::Value| {
        String::from_utf8(w1_key.open(v.as_str().unwrap()).unwrap()).unwrap()
    };
    assert_eq!(open(&vpn["address"]), "10.0.0.2/16");
    assert_eq!(open(&vpn["endpoint"]), cluster.status.vpn_server_endpoint);
    assert!(vpn.get("peerPrivateKey").is_none());
    // The file's hash is recorded: the next run writes nothing and changes nothing.
    let third = h.run(second.world.clone()).await;
    assert!(third.all_ready());
    assert_eq!(third.counts.files_written, 0);
    assert_eq!(third.counts.cluster_writes, 0);
    assert_eq!(third.world.clusters[&key].status.vpn_peers, *peers);

    // w1's Node registers (marked once); then it is deleted: its request goes, its peer
    // goes, and its address is the next worker's.
    put_object(
        &h.network,
        &report,
        "/api/v1/nodes",
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w1"}}),
    )
    .await;
    let before = h.network.api_writes().len();
    let fourth = h.run(third.world.clone()).await;
    assert!(fourth.all_ready());
    assert_eq!(
        h.network.api_writes()[before..],
        [format!("PUT {REQUESTS}/w1/status")]
    );
    let marked = h.network.api_object(&format!("{REQUESTS}/w1")).unwrap();
    assert!(
        marked["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "NodeRegistered" && c["status"] == "True")
    );
    h.network.set_api_object("/api/v1/nodes/w1", None);
    let (w3, _, _) = vpn_join_request(&cluster, "w3");
    put_object(&h.network, &report, REQUESTS, w3).await;
    let fifth = h.run(fourth.world.clone()).await;
    assert!(fifth.all_ready(), "{:?}", fifth.clusters);
    assert!(h.network.api_object(&format!("{REQUESTS}/w1")).is_none());
    let names: Vec<(String, String)> = fifth.world.clusters[&key]
        .status
        .vpn_peers
        .iter()
        .map(|p| (p.name.clone(), p.address.clone()))
        .collect();
    assert_eq!(
        names,
        [
            ("worker-w2".into(), "10.0.0.3/16".into()),
            ("worker-w3".into(), "10.0.0.2/16".into())
        ]
    );
    assert!(!conf(&h).contains(&w1_public));
    assert_eq!(fifth.counts.pods_created + fifth.counts.pods_replaced, 0);
    let events = h.events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e.contains("VPN peers added worker-w3; removed worker-w1")),
        "{events:?}"
    );
    assert!(events.iter().all(|e| !e.contains("PRIVATE KEY")));
}

/// The names of the pods on public-1.
async fn public_pods(h: &Harness) -> BTreeSet<String> {
    h.connector.runtimes["public-1"]
        .list_pods(&BTreeMap::new())
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect()
}

/// The paths of the files of the fake hypervisor `h` under `dir`.
fn files_under(harness: &Harness, h: &str, dir: &str) -> BTreeSet<String> {
    harness.connector.runtimes[h]
        .files()
        .into_keys()
        .filter(|p| p.starts_with(&format!("{dir}/")))
        .collect()
}

/// What the world records as placed for component `component` of cluster `default/c` on `h`.
fn recorded(w: &World, h: &str, component: &str) -> BTreeSet<String> {
    w.hypervisors[&ObjectKey::cluster_scoped(h)]
        .status
        .files
        .get("default")
        .and_then(|c| c.get("c"))
        .and_then(|c| c.get(component))
        .map(|f| f.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn turning_the_vpn_off_removes_its_endpoint_pod_egress_and_files() {
    let h = Harness::new();
    let key = ObjectKey::new("default", "c");
    let mut w = world(1, &[("c", 1)]);
    w.clusters.get_mut(&key).unwrap().spec.vpn.enabled = true;
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert!(public_pods(&h).await.contains("c-ingress-vpn"));
    let dir = "/etc/oneinfra/default/c/c-ingress";
    let with_vpn = files_under(&h, "public-1", dir);
    let vpn_files: BTreeSet<String> = ["vpn.conf", "vpn-proxy.crt", "vpn-proxy.key"]
        .iter()
        .map(|f| format!("{dir}/{f}"))
        .collect();
    assert!(with_vpn.is_superset(&vpn_files), "{with_vpn:?}");
    assert_eq!(recorded(&report.world, "public-1", "c-ingress"), with_vpn);
    let mut w = report.world.clone();
    w.clusters.get_mut(&key).unwrap().spec.vpn.enabled = false;
    // The dry run says which files go.
    let planned = dry_run(
        &oi_planner::plan(w.clone(), NOW, &PlanOptions::default()),
        &h.connector,
        false,
    )
    .await;
    let removed: BTreeSet<String> = planned.hypervisors["public-1"]
        .remove_files
        .iter()
        .cloned()
        .collect();
    assert!(removed.is_superset(&vpn_files), "{removed:?}");
    let off = h.run(w).await;
    assert!(off.all_ready(), "{:?}", off.clusters);
    assert_eq!(
        public_pods(&h).await,
        BTreeSet::from(["c-ingress".to_string()])
    );
    assert_eq!(off.counts.pods_removed, 1);
    // The API server went without its egress configuration (its pod replaced).
    assert_eq!(off.counts.pods_replaced, 1);
    // The endpoint's files (its private key among them) went, and their records.
    let without = files_under(&h, "public-1", dir);
    assert!(without.is_disjoint(&vpn_files), "{without:?}");
    assert_eq!(
        with_vpn
            .difference(&without)
            .cloned()
            .collect::<BTreeSet<_>>(),
        removed
    );
    assert_eq!(recorded(&off.world, "public-1", "c-ingress"), without);
    let again = h.run(off.world.clone()).await;
    assert_eq!(again.counts.pods_removed, 0);
    assert_eq!(again.counts.mutating_calls, 0);
}

#[tokio::test]
async fn a_record_naming_a_file_outside_the_components_directory_is_never_acted_upon() {
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 1)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    let records = w
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped("public-1"))
        .unwrap()
        .status
        .files
        .get_mut("default")
        .unwrap()
        .get_mut("c")
        .unwrap()
        .get_mut("c-ingress")
        .unwrap();
    records.insert("/etc/passwd".into(), "edited".into());
    records.insert(
        "/etc/oneinfra/default/c/c-ingress/old.crt".into(),
        "old".into(),
    );
    h.connector.clear();
    let next = h.run(w).await;
    assert!(next.all_ready(), "{:?}", next.clusters);
    let removals: Vec<Call> = h.connector.runtimes["public-1"]
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::RemoveHostPaths(_)))
        .collect();
    assert_eq!(
        removals,
        [Call::RemoveHostPaths(vec![
            "/etc/oneinfra/default/c/c-ingress/old.crt".into()
        ])]
    );
    let kept = recorded(&next.world, "public-1", "c-ingress");
    assert!(kept.contains("/etc/passwd"), "{kept:?}");
    assert!(
        !kept.contains("/etc/oneinfra/default/c/c-ingress/old.crt"),
        "{kept:?}"
    );
}

#[tokio::test]
async fn an_upgrade_rolls_every_api_server_before_any_controller_manager_or_scheduler() {
    let h = Harness::new();
    let key = ObjectKey::new("default", "c");
    let mut w = world(1, &[("c", 3)]);
    w.clusters.get_mut(&key).unwrap().spec.kubernetes_version = "1.36".into();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert_eq!(
        report.world.clusters[&key].status.kubernetes_version, "1.36.4",
        "a ready cluster records the version it runs"
    );
    let mut w = report.world.clone();
    w.clusters.get_mut(&key).unwrap().spec.kubernetes_version = "1.37".into();
    // What the pods will be: each replica's staged pod, then its final one.
    let plan = oi_planner::plan(
        oi_planner::prepare(w.clone(), NOW).world,
        NOW,
        &PlanOptions::default(),
    );
    let ClusterPlan::Converge(c) = &plan.clusters[&key] else {
        panic!("not planned: {:?}", plan.clusters[&key]);
    };
    let mut staged = BTreeMap::new();
    let mut fin = BTreeMap::new();
    for r in c.components.iter().filter(|c| c.staged.is_some()) {
        let s = r.staged.as_ref().unwrap();
        let images: Vec<&str> = s.containers.iter().map(|c| c.image.as_str()).collect();
        assert!(
            images.contains(&"registry.k8s.io/kube-apiserver:v1.37.1"),
            "{images:?}"
        );
        assert!(
            images.contains(&"registry.k8s.io/kube-controller-manager:v1.36.4"),
            "{images:?}"
        );
        staged.insert(s.content_hash(), r.name().to_string());
        fin.insert(r.main_pod().unwrap().content_hash(), r.name().to_string());
    }
    assert_eq!(staged.len(), 3);
    h.connector.clear();
    let upgraded = h.run(w).await;
    assert!(upgraded.all_ready(), "{:?}", upgraded.clusters);
    // Each replica got its staged pod and then its final one (per hypervisor)...
    for (h_name, rt) in &h.connector.runtimes {
        if !upgraded
            .world
            .hypervisors
            .contains_key(&ObjectKey::cluster_scoped(h_name.clone()))
        {
            continue;
        }
        let created: Vec<String> = rt
            .calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::CreatePod { spec_hash, .. } => staged
                    .get(&spec_hash)
                    .map(|n| format!("staged {n}"))
                    .or_else(|| fin.get(&spec_hash).map(|n| format!("final {n}"))),
                _ => None,
            })
            .collect();
        if h_name.starts_with("private") {
            assert_eq!(created.len(), 2, "{h_name}: {created:?}");
            assert!(created[0].starts_with("staged") && created[1].starts_with("final"));
        }
    }
    // ... and, in the run's order, every API server went first.
    let events = h.events.lock().unwrap().clone();
    let steps: Vec<&String> = events
        .iter()
        .filter(|e| {
            e.contains("upgraded the API server of pod")
                || (e.contains("replaced pod c-control-plane-") && !e.contains("-etcd"))
        })
        .collect();
    assert_eq!(steps.len(), 6, "{events:#?}");
    assert!(
        steps[..3]
            .iter()
            .all(|e| e.contains("upgraded the API server")),
        "{steps:#?}"
    );
    assert_eq!(
        upgraded.world.clusters[&key].status.kubernetes_version,
        "1.37.1"
    );
    // Converged: nothing more.
    h.connector.clear();
    let again = h.run(upgraded.world.clone()).await;
    assert_eq!(again.counts.mutating_calls, 0);

    // Two minors at once, or down: refused, nothing touched.
    for (version, reason) in [
        ("1.35", "Kubernetes 1.37.1 and cannot go to 1.35.9"),
        ("1.36", "a downgrade is not supported"),
    ] {
        let mut w = again.world.clone();
        w.clusters.get_mut(&key).unwrap().spec.kubernetes_version = version.into();
        h.connector.clear();
        let refused = h.run(w).await;
        let outcome = &refused.clusters[&key];
        assert_eq!(outcome.reason, Reason::PrepareFailed);
        assert!(outcome.message.contains(reason), "{}", outcome.message);
        assert_eq!(refused.counts.mutating_calls, 0);
    }
    let mut w = report.world.clone();
    w.clusters.get_mut(&key).unwrap().status.kubernetes_version = "1.35.9".into();
    w.clusters.get_mut(&key).unwrap().spec.kubernetes_version = "1.37".into();
    let refused = h.run(w).await;
    assert!(
        refused.clusters[&key]
            .message
            .contains("upgrade one minor at a time, 1.35 -> 1.36 -> 1.37"),
        "{}",
        refused.clusters[&key].message
    );
}

#[tokio::test]
async fn a_server_an_interrupted_upgrade_left_out_of_the_ingress_is_put_back() {
    let h = Harness::new();
    let key = ObjectKey::new("default", "c");
    let mut w = world(1, &[("c", 3)]);
    w.clusters.get_mut(&key).unwrap().spec.kubernetes_version = "1.36".into();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    w.clusters.get_mut(&key).unwrap().spec.kubernetes_version = "1.37".into();
    let upgraded = h.run(w.clone()).await;
    assert!(upgraded.all_ready(), "{:?}", upgraded.clusters);
    // Stopped after its last API server restarted, before it went back into the ingress:
    // the world was not written, the pods run the new version, the server is drained.
    let server = "apiservers/c-control-plane-2";
    for rt in h.connector.runtimes.values() {
        rt.set_haproxy_server_state(server, "DRAIN");
    }
    let drained: Vec<String> = h
        .connector
        .runtimes
        .values()
        .flat_map(|rt| rt.haproxy_server_states(server))
        .collect();
    assert_eq!(drained, ["DRAIN"], "one ingress holds it out");
    let again = h.run(w).await;
    assert!(again.all_ready(), "{:?}", again.clusters);
    let states: Vec<String> = h
        .connector
        .runtimes
        .values()
        .flat_map(|rt| rt.haproxy_server_states(server))
        .collect();
    assert_eq!(states, ["UP"]);
    let events = h.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e
            .contains("c-control-plane-2 put back into the ingress (an earlier run left it out)")),
        "{events:?}"
    );
    // Nothing else was restarted for it.
    assert_eq!(again.counts.pods_replaced, 0, "{:?}", again.counts);
}

/// An etcd snapshot as etcd streams one: a database page with bbolt's magic and the
/// SHA-256 after it.
fn etcd_snapshot(len: usize) -> Vec<u8> {
    etcd_snapshot_of((0..len).map(|i| (i % 251) as u8).collect())
}

/// `db` made a snapshot etcd would take: its bbolt magic, then its SHA-256 appended.
fn etcd_snapshot_of(mut db: Vec<u8>) -> Vec<u8> {
    use sha2::Digest as _;
    db[16..20].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
    let sum = sha2::Sha256::digest(&db);
    db.extend_from_slice(&sum);
    db
}

impl Harness {
    /// A restore run of cluster `name` of `world` from `etcd`, as `oi cluster restore`
    /// makes it.
    async fn restore(&self, world: World, name: &str, etcd: Vec<u8>) -> Report {
        let key = ObjectKey::new("default", name);
        let snapshot = oi_planner::snapshot::Snapshot::new(
            &key,
            &world.clusters[&key],
            etcd,
            7,
            "3.4.23",
            "m",
            NOW,
        )
        .unwrap();
        let prepared = oi_planner::prepare(world, NOW).world;
        *self.network.source().0.lock().unwrap() = prepared.clone();
        self.events.lock().unwrap().clear();
        let progress = |e: &Event| self.events.lock().unwrap().push(e.to_string());
        let plan = oi_planner::snapshot::plan_restore(
            prepared,
            &key,
            &snapshot,
            NOW,
            &PlanOptions::default(),
        );
        // The simulated network answers as the restored world describes the members.
        *self.network.source().0.lock().unwrap() = plan.world.clone();
        let executed = execute(&plan, &options(), &self.connector, &self.network, &progress).await;
        Report {
            world: oi_planner::record(plan.world, &executed.clusters, NOW),
            joined: executed
                .clusters
                .iter()
                .map(|(k, r)| (k.clone(), r.joined.clone()))
                .collect(),
            clusters: executed
                .clusters
                .into_iter()
                .map(|(k, r)| (k, r.outcome))
                .collect(),
            counts: executed.counts,
        }
    }
}

/// What a destination of [`take_snapshot`] took: every piece, and the error it ended with.
async fn collect(mut stream: oi_engine::SnapshotStream) -> (Vec<u8>, Option<String>) {
    use futures::StreamExt as _;
    let mut bytes = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(piece) => bytes.extend_from_slice(&piece),
            Err(e) => return (bytes, Some(e.to_string())),
        }
    }
    (bytes, None)
}

#[tokio::test]
async fn a_snapshot_streams_to_its_destination_and_a_destination_that_fails_is_the_error() {
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let key = ObjectKey::new("default", "c");
    let plan = oi_planner::plan(report.world.clone(), NOW, &PlanOptions::default());
    let Some(oi_planner::ClusterPlan::Converge(c)) = plan.clusters.get(&key) else {
        panic!("c is not planned to run");
    };
    let of = oi_engine::SnapshotOf {
        key: &key,
        cluster: &report.world.clusters[&key],
        taken_at: NOW,
    };
    let file = Mutex::new(Vec::new());
    let taken = oi_engine::take_snapshot(&h.network, &c.etcd, of, |stream| async {
        let (bytes, failed) = collect(stream).await;
        assert_eq!(failed, None);
        let written = bytes.len() as u64;
        *file.lock().unwrap() = bytes;
        Ok(written)
    })
    .await
    .unwrap();
    let file = file.into_inner().unwrap();
    assert_eq!(taken.written, file.len() as u64);
    let snapshot = oi_planner::snapshot::Snapshot::decode(&file, "taken").unwrap();
    assert_eq!(snapshot.header.size, taken.etcd_bytes);
    assert_eq!(snapshot.header.revision, taken.revision);
    assert_eq!(snapshot.header.member, taken.member);
    assert_eq!(snapshot.cluster_key(), key);

    // A destination that gives up after the first piece: its error is the snapshot's.
    let e = oi_engine::take_snapshot(&h.network, &c.etcd, of, |mut stream| async move {
        use futures::StreamExt as _;
        let _ = stream.next().await;
        drop(stream);
        Err::<u64, _>("the bucket is full".to_string())
    })
    .await
    .unwrap_err();
    assert_eq!(e, "the bucket is full");

    // An unsound snapshot: its destination is told, after every byte of it, and keeps none.
    h.network.corrupt_snapshots(true);
    let told = Mutex::new(None);
    let e = oi_engine::take_snapshot(&h.network, &c.etcd, of, |stream| async {
        let (_, failed) = collect(stream).await;
        *told.lock().unwrap() = failed.clone();
        Err::<u64, _>(format!("nothing kept: {}", failed.unwrap_or_default()))
    })
    .await
    .unwrap_err();
    h.network.corrupt_snapshots(false);
    assert!(
        e.contains("the snapshot etcd gave is not sound: etcd's own checksum"),
        "{e}"
    );
    assert_eq!(told.into_inner().unwrap().as_deref(), Some(e.as_str()));

    // No member answering: nothing reaches the destination.
    let mut none = c.etcd.clone();
    for m in &mut none.members {
        m.client_url = "https://192.0.2.1:2379".into();
    }
    let e = oi_engine::take_snapshot(&h.network, &none, of, |_| async {
        panic!("no destination is asked for a snapshot no member gives")
    })
    .await
    .unwrap_err();
    assert!(
        e.starts_with("no etcd member answered: c-control-plane-0"),
        "{e}"
    );
}

#[tokio::test]
async fn a_restore_stages_every_replica_before_stopping_any_then_starts_them_together() {
    let h = Harness::new();
    let key = ObjectKey::new("default", "c");
    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);

    // A restore job that fails on one replica: nothing is stopped anywhere.
    let placed = |w: &World, name: &str| {
        w.components[&ObjectKey::new("default", name)]
            .spec
            .hypervisor
            .clone()
            .unwrap()
    };
    let second = placed(&report.world, "c-control-plane-1");
    h.connector.runtimes[&second].fail_job(
        "etcd snapshot restore",
        "Error: snapshot file has wrong size",
    );
    h.connector.clear();
    let failed = h
        .restore(report.world.clone(), "c", etcd_snapshot(1_500_000))
        .await;
    let outcome = &failed.clusters[&key];
    assert!(!outcome.ready);
    assert_eq!(outcome.reason, Reason::RuntimeError);
    assert!(
        outcome.message.contains("etcd snapshot restore") && outcome.message.contains("wrong size"),
        "{}",
        outcome.message
    );
    assert!(
        !h.connector
            .all_calls()
            .iter()
            .any(|(_, c)| matches!(c, Call::RemovePod { .. })),
        "{:?}",
        h.connector.all_calls()
    );

    // A restore that goes through (another run, no failing job).
    let h2 = Harness::new();
    let report = h2.run(world(1, &[("c", 3)])).await;
    h2.connector.clear();
    h2.network.clear_log();
    // A snapshot that does not pack (as random as a test can make it cheaply): 1.5 MB in
    // parts of 700 KiB is three.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let noise = etcd_snapshot_of(
        (0..1_500_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect(),
    );
    let restored = h2.restore(report.world.clone(), "c", noise.clone()).await;
    assert!(restored.all_ready(), "{:?}", restored.clusters);
    // The parts written to each replica unpack to the snapshot.
    for i in 1..=3 {
        let files = h2.connector.runtimes[&format!("private-{i}")].files();
        let packed: Vec<u8> = files
            .iter()
            .filter(|(p, _)| p.contains("/restore/part-"))
            .flat_map(|(_, f)| f.content.clone())
            .collect();
        let mut unpacked = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&packed[..]),
            &mut unpacked,
        )
        .unwrap();
        assert!(
            unpacked == noise,
            "private-{i}: the parts unpack to the snapshot"
        );
    }
    // Every replica: the parts, joined, restored; then every replica stopped; then each
    // one's data swapped and its pods created again. The ingress is left alone.
    // Per hypervisor, in order.
    for i in 1..=3 {
        let hv = format!("private-{i}");
        let calls: Vec<String> = h2.connector.runtimes[&hv]
            .calls()
            .into_iter()
            .filter(|c| !matches!(c, Call::PullImage(_)))
            .map(|c| match c {
                Call::WriteFiles(paths) if paths.iter().all(|p| p.contains("/restore/part-")) => {
                    format!("parts {}", paths.len())
                }
                Call::WriteFiles(_) => "files".to_string(),
                Call::RunJob { job, .. } => job,
                Call::RemovePod { name, .. } => {
                    format!("stop {}", name.rsplit('-').next().unwrap())
                }
                Call::CreatePod { name, .. } => {
                    format!("start {}", name.rsplit('-').next().unwrap())
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            calls
                .iter()
                .filter(|c| !c.starts_with("files"))
                .cloned()
                .collect::<Vec<_>>(),
            [
                "parts 3",
                "snapshot join",
                "etcd snapshot restore",
                "stop 0",
                "stop etcd",
                "etcd data swap",
                "start etcd",
                "start 0",
            ]
            .map(|s| s.replace(" 0", &format!(" {}", i - 1)))
            .to_vec(),
            "{hv}"
        );
    }
    // The ingress keeps its pod and files; haproxy is told once that the API servers,
    // stopped for the swap, answer again.
    assert_eq!(
        runtime_api_commands(&h2.connector.runtimes["public-1"].calls()),
        ["set server apiservers/c-control-plane-0 health up; \
          set server apiservers/c-control-plane-1 health up; \
          set server apiservers/c-control-plane-2 health up"],
    );
    assert!(
        h2.connector.runtimes["public-1"]
            .calls()
            .iter()
            .all(|c| matches!(c, Call::Exec { job, .. } if job == "haproxy runtime API")),
        "the ingress is left alone: {:?}",
        h2.connector.runtimes["public-1"].calls()
    );
    // The restore command of each replica: upstream etcdutl, a member of a new cluster of
    // all three.
    let restore = h2.connector.runtimes["private-1"]
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::RunJob {
                job,
                image,
                command,
            } if job == "etcd snapshot restore" => Some((image, command)),
            _ => None,
        })
        .unwrap();
    assert_eq!(restore.0, "registry.k8s.io/etcd:3.6.4-0");
    assert_eq!(restore.1[..3], ["etcdutl", "snapshot", "restore"]);
    let initial = restore
        .1
        .iter()
        .find(|a| a.starts_with("--initial-cluster="))
        .unwrap();
    assert_eq!(initial.matches("=https://").count(), 3, "{initial}");
    assert_eq!(
        h2.network.log(),
        ["bootstrap c-control-plane-0,c-control-plane-1,c-control-plane-2"],
        "the members start together"
    );
    // The world records every replica as a founder of the restored cluster; a reconcile
    // after it changes nothing.
    for c in restored.world.components.values() {
        if let Some(m) = &c.status.etcd_member {
            assert_eq!(m.initial_cluster_state, EtcdInitialClusterState::New);
            assert_eq!(m.initial_cluster.len(), 3);
        }
    }
    h2.connector.clear();
    let again = h2.run(restored.world.clone()).await;
    assert!(again.all_ready());
    assert_eq!(again.counts.mutating_calls, 0);
}

/// A SIPCluster `t1` with a jump host (no hosts to reach) on port `port`, and its node keys.
fn with_sip_cluster(mut w: World, port: u16) -> World {
    let docs = format!(
        "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: t1, namespace: default}}\nspec:\n  nodes: {{}}\n  services:\n    jumpHost:\n    - image: jump\n      nodePort: {port}\n      nodeInterfaceId: oam-ipv4\n      nodeSSHPrivateKeys: keys\n      sshAuthorizedKeys: ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGFu4aD6Qg2jhyY5fba9gqFO5quRH/2GbGT/qO/VrDt5 ops@example']\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: keys, namespace: default}}\nstringData: {{id_ed25519: \"-----BEGIN OPENSSH PRIVATE KEY-----\\nnode key\\n\"}}\n"
    );
    let sip = World::load(&docs, "sip").unwrap();
    w.sip_clusters.extend(sip.sip_clusters);
    w.secrets.extend(sip.secrets);
    w
}

/// The plan of one run of `w` ([`oi_planner::plan`]: its SIPClusters' hosts and services).
fn sip_plan(w: &World) -> Plan {
    oi_planner::plan(w.clone(), NOW, &oi_planner::PlanOptions::default())
}

/// The SIPClusters' services of `w` run as one run does ([`execute`]) and recorded
/// ([`oi_planner::record_run`]); each must run: the world after.
async fn run_sip(h: &Harness, w: World) -> World {
    let plan = sip_plan(&w);
    let executed = execute(&plan, &options(), &h.connector, &h.network, &|_: &Event| {}).await;
    let recorded = oi_planner::record_run(
        plan.world,
        &plan.sip,
        &executed.clusters,
        &executed.services,
        NOW,
    );
    assert!(
        recorded.services.iter().all(|o| o.ready),
        "{:?}",
        recorded.services
    );
    recorded.world
}

async fn sip_dry_run(h: &Harness, w: &World) -> DryRun {
    oi_engine::dry_run(&sip_plan(w), &h.connector, false).await
}

#[tokio::test]
async fn a_dry_run_lists_what_running_sip_services_would_do_without_mutating() {
    let h = Harness::new();
    let w = with_sip_cluster(world(1, &[]), 30010);
    let planned = sip_dry_run(&h, &w).await;
    assert!(h.connector.all_calls().is_empty());
    let public = &planned.hypervisors["public-1"];
    assert_eq!(public.create, ["default/t1-jump-host-0"]);
    assert!(public.keep.is_empty() && public.remove.is_empty());
    assert!(
        public
            .files
            .iter()
            .any(|f| f.ends_with("/jump-host-0/sshd_config")),
        "{public:?}"
    );
    assert!(planned.sip_failures.is_empty(), "{planned:?}");

    // Run and recorded: the same plan keeps the pod and writes nothing.
    let w = run_sip(&h, w).await;
    h.connector.clear();
    let planned = sip_dry_run(&h, &w).await;
    assert!(h.connector.all_calls().is_empty());
    let public = &planned.hypervisors["public-1"];
    assert_eq!(public.keep, ["default/t1-jump-host-0"]);
    assert!(public.create.is_empty() && public.replace.is_empty() && public.files.is_empty());

    // A changed authorized key: the file rewritten, the pod restarted to read it.
    let mut changed = w.clone();
    let key = ObjectKey::new("default", "t1");
    changed.sip_clusters.get_mut(&key).unwrap().spec.services.jump_host[0].ssh_authorized_keys =
        vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGFu4aD6Qg2jhyY5fba9gqFO5quRH/2GbGT/qO/VrDt5 other@example".into()];
    let planned = sip_dry_run(&h, &changed).await;
    let public = &planned.hypervisors["public-1"];
    assert_eq!(public.replace, ["default/t1-jump-host-0"]);
    assert!(public.keep.is_empty(), "{public:?}");
    assert!(
        public.files.iter().all(|f| f.ends_with("/authorized_keys")) && public.files.len() == 1,
        "{public:?}"
    );

    // Deleted: its pod and its directories go.
    let mut deleted = w.clone();
    deleted
        .sip_clusters
        .get_mut(&key)
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    let planned = sip_dry_run(&h, &deleted).await;
    let public = &planned.hypervisors["public-1"];
    assert_eq!(public.remove, ["default/t1-jump-host-0"]);
    assert!(public.create.is_empty() && public.keep.is_empty());
    assert!(
        public
            .remove_directories
            .iter()
            .any(|d| d.ends_with("/_sip/default/t1")),
        "{public:?}"
    );

    // The hypervisor down: said, not guessed.
    h.connector.down.lock().unwrap().insert("public-1".into());
    let planned = sip_dry_run(&h, &w).await;
    assert!(
        planned.hypervisors["public-1"].unreachable.is_some(),
        "{planned:?}"
    );
    h.connector.down.lock().unwrap().clear();

    // A port outside the hypervisor's range: the SIPCluster cannot be planned.
    let planned = sip_dry_run(&h, &with_sip_cluster(world(1, &[]), 40000)).await;
    assert!(planned.sip_failures[&key].contains("40000"), "{planned:?}");
    assert!(planned.hypervisors.is_empty(), "{planned:?}");
}

#[tokio::test]
async fn sip_services_fail_with_the_reasons_clusters_fail_with() {
    use oi_planner::record::Reason;
    let h = Harness::new();
    let w = with_sip_cluster(world(1, &[]), 30010);
    let plan = sip_plan(&w);
    let run = |plan: &Plan| {
        let h = &h;
        let plan = plan.clone();
        async move {
            execute(&plan, &options(), &h.connector, &h.network, &|_: &Event| {})
                .await
                .services
        }
    };
    // Its sshd exits at once: the service does not run, in its own words.
    let rt = &h.connector.runtimes["public-1"];
    rt.exit_on_start("sshd", Some(255));
    let results = run(&plan).await;
    let failure = results[0].services[0].failure.clone().expect("a failure");
    assert_eq!(failure.reason, Reason::ServiceNotRunning, "{failure}");
    assert!(
        failure
            .message
            .starts_with("pod t1-jump-host-0 on public-1: container sshd exited with code 255"),
        "{failure}"
    );
    let outcomes = oi_planner::record_run(
        plan.world.clone(),
        &plan.sip,
        &BTreeMap::new(),
        &results,
        NOW,
    )
    .services;
    assert!(
        outcomes[0]
            .failing
            .iter()
            .any(|f| f.ends_with("exited with code 255 (ServiceNotRunning)")),
        "{outcomes:?}"
    );
    rt.exit_on_start("sshd", None);
    // Its hypervisor does not answer: the service fails, and so does the sweep, each
    // saying which hypervisor.
    h.connector.down.lock().unwrap().insert("public-1".into());
    let results = run(&plan).await;
    let failure = results[0].services[0].failure.clone().expect("a failure");
    assert_eq!(failure.reason, Reason::HypervisorUnreachable, "{failure}");
    assert!(
        failure
            .message
            .starts_with("hypervisor public-1 is unreachable"),
        "{failure}"
    );
    let sweep = results[0].sweep_error.clone().expect("the sweep fails");
    assert_eq!(sweep.reason, Reason::HypervisorUnreachable, "{sweep}");
    h.connector.down.lock().unwrap().clear();
    // Back: it runs.
    let results = run(&plan).await;
    assert!(results[0].all_running(), "{results:?}");
}

#[tokio::test]
async fn a_node_key_taken_out_of_the_secret_leaves_the_jump_host() {
    let h = Harness::new();
    let mut w = run_sip(&h, with_sip_cluster(world(1, &[]), 30010)).await;
    let dir = "/etc/oneinfra/_sip/default/t1/jump-host-0";
    let old_key = format!("{dir}/node-keys/id_ed25519");
    assert!(files_under(&h, "public-1", dir).contains(&old_key));
    // The Secret now holds another key only.
    let secret = w
        .secrets
        .get_mut(&ObjectKey::new("default", "keys"))
        .unwrap();
    let replaced = World::load(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: keys, namespace: default}\nstringData: {id_rsa: \"-----BEGIN OPENSSH PRIVATE KEY-----\\nanother\\n\"}\n",
        "keys",
    )
    .unwrap();
    *secret = replaced.secrets.into_values().next().unwrap();
    let planned = sip_dry_run(&h, &w).await;
    assert_eq!(
        planned.hypervisors["public-1"].remove_files,
        std::slice::from_ref(&old_key),
        "{planned:?}"
    );
    h.connector.clear();
    w = run_sip(&h, w).await;
    let files = files_under(&h, "public-1", dir);
    assert!(!files.contains(&old_key), "{files:?}");
    assert!(
        files.contains(&format!("{dir}/node-keys/id_rsa")),
        "{files:?}"
    );
    let recorded: BTreeSet<String> = w.hypervisors[&ObjectKey::cluster_scoped("public-1")]
        .status
        .files
        .values()
        .flat_map(|c| c.values())
        .flat_map(|c| c.values())
        .flat_map(|f| f.keys().cloned())
        .filter(|p| p.starts_with(dir))
        .collect();
    assert_eq!(recorded, files);
    // Converged: nothing more to remove.
    let planned = sip_dry_run(&h, &w).await;
    assert!(planned.hypervisors["public-1"].remove_files.is_empty());
}

mod heal;

#[tokio::test]
async fn an_ingress_whose_checks_lag_is_told_its_api_servers_answer() {
    let h = Harness::new();
    // haproxy saw the API servers fail while they started and holds them down.
    h.network.ingress_checks_lag(true);
    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let events = h.events.lock().unwrap().clone();
    let told = "[public-1] c/c-ingress: told haproxy c-control-plane-0, c-control-plane-1, c-control-plane-2 answer";
    assert_eq!(
        events.iter().filter(|e| *e == told).count(),
        1,
        "told once, after every API server answered: {events:?}"
    );
    let asked = runtime_api_commands(&h.connector.runtimes["public-1"].calls());
    assert_eq!(
        asked,
        ["set server apiservers/c-control-plane-0 health up; \
          set server apiservers/c-control-plane-1 health up; \
          set server apiservers/c-control-plane-2 health up"]
    );
    // A new cluster's ingress that answers by itself is told too, once every API server
    // answered (haproxy may still be counting its failed checks down); a running cluster
    // whose API servers did not restart is told nothing.
    let h = Harness::new();
    let report = h.run(world(1, &[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert_eq!(
        runtime_api_commands(&h.connector.runtimes["public-1"].calls()),
        asked
    );
    h.connector.clear();
    let again = h.run(report.world.clone()).await;
    assert!(again.all_ready(), "{:?}", again.clusters);
    assert_eq!(
        runtime_api_commands(&h.connector.runtimes["public-1"].calls()),
        Vec::<String>::new()
    );
}
