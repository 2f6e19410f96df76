//! The controllers against a [`MemoryStore`], oi_cri's recording `FakeRuntime` per hypervisor
//! and a simulated network in which etcd members and API servers answer once their pods run
//! (the endpoints are learned from the Components and Hypervisors in the store).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oi_api::common::{ConditionStatus, condition_types, find_condition};
use oi_api::runtime::{ContainerSpec, PodSpec};
use oi_api::{
    Cluster, ClusterSpec, Component, Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectKey,
    ObjectMeta, OwnerReference, PortRange, Resource as _, World,
};
use oi_cri::HypervisorRuntime as _;
use oi_cri::fake::FakeRuntime;
use oi_engine::{ConnectError, Connector, ExecuteOptions};
use oi_engine_testsupport::sim;
use pretty_assertions::assert_eq;

use oi_manager::controller::*;
use oi_manager::metrics::Metrics;
use oi_manager::store::{EventType, Store as _, StoreError};
use oi_manager_testsupport::memory::{MemoryStore, Op, StoreSource, Write};

const HYPERVISORS: [(&str, bool, &str); 4] = [
    ("private-1", false, "10.0.0.1"),
    ("private-2", false, "10.0.0.2"),
    ("private-3", false, "10.0.0.3"),
    ("public-1", true, "10.0.1.1"),
];

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
        ObjectMeta::namespaced("default", name),
        ClusterSpec {
            control_plane_replicas: Some(replicas),
            ..ClusterSpec::default()
        },
    )
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("default", name)
}

struct FakeConnector {
    runtimes: BTreeMap<String, Arc<FakeRuntime>>,
    down: Mutex<BTreeSet<String>>,
}

impl Connector for FakeConnector {
    type Runtime = FakeRuntime;

    async fn connect(&self, h: &Hypervisor) -> Result<Arc<FakeRuntime>, oi_engine::ConnectError> {
        let name = h.metadata.name.clone();
        if self.down.lock().unwrap().contains(&name) {
            return Err(ConnectError::Unreachable {
                hypervisor: name,
                reason: "connection refused".into(),
            });
        }
        self.runtimes
            .get(&name)
            .cloned()
            .ok_or(ConnectError::NoEndpoint { hypervisor: name })
    }
}

type SimNetwork = sim::SimNetwork<StoreSource>;

type Ctx = Context<MemoryStore, FakeConnector, SimNetwork>;

struct Harness {
    store: Arc<MemoryStore>,
    ctx: Ctx,
}

fn options() -> ManagerOptions {
    ManagerOptions {
        plan: oi_planner::PlanOptions::default(),
        execute: ExecuteOptions {
            max_wait: Duration::from_secs(2),
            poll_interval: Duration::from_millis(5),
            ..ManagerOptions::default().execute
        },
        requeue_ready: Duration::from_secs(300),
        requeue_not_ready: Duration::from_secs(2),
        hypervisor_probe_interval: Duration::from_secs(30),
        backoff_min: Duration::from_secs(1),
        backoff_max: Duration::from_secs(10),
        certificate_warning: oi_manager::controller::CertificateWarning::default(),
        snapshot_store: oi_s3::Store::default(),
    }
}

impl Harness {
    fn new() -> Self {
        Self::with_options(options())
    }

    fn with_options(options: ManagerOptions) -> Self {
        let store = Arc::new(MemoryStore::default());
        for (name, public, ip) in HYPERVISORS {
            store.insert(hypervisor(name, public, ip));
        }
        let runtimes: BTreeMap<String, Arc<FakeRuntime>> = HYPERVISORS
            .iter()
            .map(|(h, _, _)| (h.to_string(), Arc::new(FakeRuntime::new(*h))))
            .collect();
        let connector = FakeConnector {
            runtimes: runtimes.clone(),
            down: Mutex::new(BTreeSet::new()),
        };
        let network = SimNetwork::new(StoreSource(Arc::clone(&store)), runtimes);
        let ctx = Context::new(
            Arc::clone(&store),
            connector,
            network,
            options,
            Arc::new(Metrics::new()),
        );
        Harness { store, ctx }
    }

    fn components(&self, cluster: &str) -> Vec<Component> {
        self.store
            .objects::<Component>()
            .into_iter()
            .filter(|c| c.spec.cluster == cluster)
            .collect()
    }

    fn names(&self, cluster: &str) -> Vec<String> {
        self.components(cluster)
            .into_iter()
            .map(|c| c.metadata.name)
            .collect()
    }

    fn cluster(&self, name: &str) -> Option<Cluster> {
        self.store.object(&key(name))
    }

    fn hypervisor(&self, name: &str) -> Hypervisor {
        self.store.object(&ObjectKey::cluster_scoped(name)).unwrap()
    }

    /// (hypervisor, cluster, component, port) of every allocation in the store.
    fn allocations(&self) -> BTreeSet<(String, String, String, u16)> {
        self.store
            .objects::<Hypervisor>()
            .into_iter()
            .flat_map(|h| {
                h.status
                    .allocated_ports
                    .into_iter()
                    .map(move |a| (h.metadata.name.clone(), a.cluster, a.component, a.port))
            })
            .collect()
    }

    /// Pods on every fake hypervisor, as `hypervisor/pod`.
    fn pods(&self) -> Vec<String> {
        self.ctx
            .connector
            .runtimes
            .iter()
            .flat_map(|(h, rt)| {
                futures::executor::block_on(rt.list_pods(&BTreeMap::new()))
                    .unwrap()
                    .into_iter()
                    .map(move |p| format!("{h}/{}", p.name))
            })
            .collect()
    }

    fn mutating_calls(&self) -> u64 {
        self.ctx
            .connector
            .runtimes
            .values()
            .map(|r| r.mutating_calls())
            .sum()
    }

    fn event_reasons(&self) -> Vec<String> {
        self.store.events().into_iter().map(|e| e.reason).collect()
    }

    /// A ready cluster `name` of `replicas` replicas, events and journal cleared.
    async fn ready(&self, name: &str, replicas: u32) {
        self.store.insert(cluster(name, replicas));
        let action = reconcile_cluster(&key(name), &self.ctx).await.unwrap();
        assert_eq!(action, Action::Requeue(Duration::from_secs(300)));
    }
}

fn succeeded(c: &Cluster) -> Option<(ConditionStatus, String)> {
    find_condition(&c.status.conditions, condition_types::RECONCILE_SUCCEEDED)
        .map(|c| (c.status, c.reason.clone()))
}

#[tokio::test]
async fn a_new_cluster_is_prepared_written_back_and_comes_up() {
    let h = Harness::new();
    h.store.insert(cluster("c", 3));
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(300)));

    let c = h.cluster("c").unwrap();
    assert_eq!(c.metadata.finalizers, [FINALIZER]);
    assert!(c.spec.api_server.ca.is_some(), "PKI persisted");
    assert_eq!(
        succeeded(&c),
        Some((ConditionStatus::True, "ReconcileSucceeded".into()))
    );
    // Ready, but its join requests are not watched: the simulated network's addresses
    // (10.0.1.1 here) are made up, and nothing may dial them.
    assert_eq!(h.ctx.joins.clusters(), []);
    assert!(
        c.status
            .api_server_endpoint
            .starts_with("https://10.0.1.1:")
    );
    assert_eq!(c.status.storage_client_endpoints.len(), 3);

    assert_eq!(
        h.names("c"),
        [
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2",
            "c-ingress"
        ]
    );
    let owner = OwnerReference {
        api_version: "cluster.oneinfra.ereslibre.es/v1alpha1".into(),
        kind: "Cluster".into(),
        name: "c".into(),
        uid: c.metadata.uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut expected = BTreeSet::new();
    for component in h.components("c") {
        assert_eq!(component.metadata.finalizers, [FINALIZER]);
        assert_eq!(
            component.metadata.owner_references,
            std::slice::from_ref(&owner)
        );
        if component.spec.role == oi_api::ComponentRole::ControlPlane {
            assert!(
                !component.status.server_certificates.is_empty(),
                "{}: certificates persisted",
                component.metadata.name
            );
        }
        let hv = component.spec.hypervisor.clone().unwrap();
        for p in &component.status.allocated_host_ports {
            expected.insert((
                hv.clone(),
                "c".to_string(),
                format!("{}-{}", component.metadata.name, p.name),
                p.port,
            ));
        }
    }
    assert_eq!(expected.len(), 3 * 3 + 2);
    assert_eq!(h.allocations(), expected);
    for (name, _, _) in HYPERVISORS {
        let files = &h.hypervisor(name).status.files;
        assert_eq!(
            files["default"]["c"].len(),
            1,
            "{name}: one component's files"
        );
    }
    assert_eq!(h.pods().len(), 7, "{:?}", h.pods());
    assert_eq!(
        h.ctx.network.members(),
        [[
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2"
        ]]
    );

    let writes = h.store.writes();
    assert_eq!(
        writes[0],
        Write::new(Op::Update, oi_api::Kind::Cluster, key("c"))
    );
    let created: Vec<_> = writes
        .iter()
        .filter(|w| w.op == Op::Create)
        .map(|w| w.key.name.clone())
        .collect();
    assert_eq!(created, h.names("c"));
    assert_eq!(
        h.event_reasons(),
        [
            "ComponentCreated",
            "ComponentCreated",
            "ComponentCreated",
            "ComponentCreated",
            "ClusterReady"
        ]
    );
    assert!(
        h.store
            .events()
            .iter()
            .all(|e| e.type_ == EventType::Normal)
    );
}

#[tokio::test]
async fn a_converged_cluster_costs_no_write_and_no_mutating_call() {
    let h = Harness::new();
    h.ready("c", 3).await;
    h.store.clear_writes();
    let events = h.store.events().len();
    let calls = h.mutating_calls();
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(300)));
    assert_eq!(h.store.writes(), []);
    assert_eq!(h.store.events().len(), events);
    assert_eq!(h.mutating_calls(), calls);
}

#[tokio::test]
async fn scale_down_deletes_the_surplus_after_its_teardown() {
    let h = Harness::new();
    h.ready("c", 3).await;
    let before = h.allocations();
    let mut c = h.cluster("c").unwrap();
    c.spec.control_plane_replicas = Some(1);
    h.store.update(&c).await.unwrap();

    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(300)));
    assert_eq!(h.names("c"), ["c-control-plane-0", "c-ingress"]);
    assert_eq!(h.ctx.network.members(), [["c-control-plane-0"]]);
    let pods = h.pods();
    assert_eq!(pods.len(), 3, "{pods:?}");
    assert!(
        pods.iter()
            .all(|p| !p.contains("control-plane-1") && !p.contains("control-plane-2"))
    );
    let after = h.allocations();
    let released: BTreeSet<_> = before.difference(&after).cloned().collect();
    assert_eq!(released.len(), 6, "{released:?}");
    for (hv, _, component, port) in &released {
        assert!(
            component.starts_with("c-control-plane-1")
                || component.starts_with("c-control-plane-2")
        );
        assert!(
            h.hypervisor(hv).status.freed_ports.contains(port),
            "{hv}: {port} freed"
        );
    }
    for hv in ["private-1", "private-2", "private-3"] {
        let files = &h.hypervisor(hv).status.files;
        let names: Vec<_> = files
            .get("default")
            .and_then(|m| m.get("c"))
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        assert!(
            names.iter().all(|n: &String| n == "c-control-plane-0"),
            "{hv}: {names:?}"
        );
    }
    let deleted: Vec<_> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == "ComponentDeleted")
        .map(|e| e.key.name)
        .collect();
    assert_eq!(deleted, ["c-control-plane-1", "c-control-plane-2"]);

    // Converged again.
    h.store.clear_writes();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);
}

#[tokio::test]
async fn a_drained_hypervisor_is_left_replica_by_replica_and_each_step_is_said() {
    let h = Harness::new();
    h.ready("c", 2).await;
    let on = |hv: &str| -> Vec<String> {
        h.components("c")
            .into_iter()
            .filter(|c| c.spec.hypervisor.as_deref() == Some(hv))
            .map(|c| c.metadata.name)
            .collect()
    };
    assert_eq!(on("private-1"), ["c-control-plane-0"]);
    let mut hv = h.hypervisor("private-1");
    hv.spec.drain = true;
    h.store.update(&hv).await.unwrap();
    let soon = Action::Requeue(Duration::from_secs(2));
    let drained = |h: &Harness| {
        find_condition(
            &h.cluster("c").unwrap().status.conditions,
            condition_types::DRAINED,
        )
        .map(|c| (c.status, c.reason.clone()))
    };

    // The replacement joins; the replica stays until the next reconcile, which comes soon.
    assert_eq!(reconcile_cluster(&key("c"), &h.ctx).await.unwrap(), soon);
    assert_eq!(on("private-3"), ["c-control-plane-2"]);
    assert_eq!(on("private-1"), ["c-control-plane-0"]);
    assert_eq!(
        h.ctx.network.members(),
        [[
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2"
        ]]
    );
    assert_eq!(drained(&h), Some((ConditionStatus::False, "Moving".into())));
    // Then the replica leaves: its member, pods and ports; nothing is left there, which is
    // said, and the usual pace resumes.
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    assert_eq!(on("private-1"), Vec::<String>::new());
    assert_eq!(
        h.ctx.network.members(),
        [["c-control-plane-1", "c-control-plane-2"]]
    );
    assert!(
        h.pods().iter().all(|p| !p.starts_with("private-1/")),
        "{:?}",
        h.pods()
    );
    assert!(h.allocations().iter().all(|a| a.0 != "private-1"));
    assert_eq!(drained(&h), Some((ConditionStatus::True, "Moved".into())));
    // And stays so.
    h.store.clear_writes();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);
    let said: Vec<String> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == event_reasons::DRAIN)
        .map(|e| e.note)
        .collect();
    assert_eq!(
        said,
        [
            "c-control-plane-0 leaves drained hypervisor private-1 once its replacement \
             c-control-plane-2 on private-3 has joined",
            "nothing of the cluster runs on a drained hypervisor",
        ]
    );
    assert_eq!(
        succeeded(&h.cluster("c").unwrap()),
        Some((ConditionStatus::True, "ReconcileSucceeded".into()))
    );
}

#[tokio::test]
async fn a_drain_with_no_room_elsewhere_is_a_warning_and_moves_nothing() {
    let h = Harness::new();
    h.ready("c", 3).await;
    let before = h.pods();
    let mut hv = h.hypervisor("private-2");
    hv.spec.capacity = None;
    hv.spec.drain = true;
    h.store.update(&hv).await.unwrap();
    for name in ["private-1", "private-3"] {
        let mut hv = h.hypervisor(name);
        hv.spec.capacity = Some(oi_api::HypervisorCapacity {
            components: Some(1),
            ..Default::default()
        });
        h.store.update(&hv).await.unwrap();
    }
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(h.pods(), before);
    let c = h.cluster("c").unwrap();
    let d = find_condition(&c.status.conditions, condition_types::DRAINED).unwrap();
    assert_eq!(
        (d.status, d.reason.as_str()),
        (ConditionStatus::False, "NoCapacity")
    );
    assert_eq!(
        succeeded(&c),
        Some((ConditionStatus::True, "ReconcileSucceeded".into()))
    );
    let warned: Vec<String> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == event_reasons::DRAIN_BLOCKED)
        .map(|e| e.note)
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with(
            "c-control-plane-1 cannot leave drained hypervisor private-2 and keeps running there"
        ),
        "{warned:?}"
    );
    // Said once.
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(
        h.event_reasons()
            .iter()
            .filter(|r| *r == event_reasons::DRAIN_BLOCKED)
            .count(),
        1
    );
}

#[tokio::test]
async fn a_replica_added_to_a_running_cluster_is_placed_among_every_hypervisor() {
    // A settled cluster is planned over its own hypervisors only; one that grows must be
    // placed over all of them (its new replica on another hypervisor than the first).
    let h = Harness::new();
    h.ready("c", 1).await;
    let mut c = h.cluster("c").unwrap();
    c.spec.control_plane_replicas = Some(2);
    h.store.update(&c).await.unwrap();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    let placed: Vec<Option<String>> = h
        .components("c")
        .into_iter()
        .filter(|c| c.spec.role == oi_api::ComponentRole::ControlPlane)
        .map(|c| c.spec.hypervisor)
        .collect();
    assert_eq!(placed.len(), 2);
    assert_ne!(placed[0], placed[1], "{placed:?}");
    assert_eq!(
        succeeded(&h.cluster("c").unwrap()),
        Some((ConditionStatus::True, "ReconcileSucceeded".into()))
    );
    // Settled again: nothing written.
    h.store.clear_writes();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);
}

#[tokio::test]
async fn a_shared_ingress_address_is_one_clusters() {
    let h = Harness::new();
    let with_address = |name: &str| {
        let mut c = cluster(name, 1);
        c.spec.ingress = Some(oi_api::ClusterIngress {
            replicas: None,
            virtual_ip: "10.0.1.100".into(),
            virtual_router_id: None,
        });
        c
    };
    // (The simulated network serves no shared address: the cluster is planned and placed,
    // but not found ready through it.)
    let reason = |h: &Harness, name: &str| {
        find_condition(
            &h.cluster(name).unwrap().status.conditions,
            condition_types::RECONCILE_SUCCEEDED,
        )
        .map(|c| c.reason.clone())
    };
    h.store.insert(with_address("a"));
    reconcile_cluster(&key("a"), &h.ctx).await.unwrap();
    assert_ne!(reason(&h, "a").as_deref(), Some("PrepareFailed"));
    assert!(
        h.cluster("a")
            .unwrap()
            .status
            .api_server_endpoint
            .starts_with("https://10.0.1.100:")
    );
    // A second cluster with the same address is refused, naming the first; nothing placed.
    h.store.insert(with_address("b"));
    reconcile_cluster(&key("b"), &h.ctx).await.unwrap();
    let b = h.cluster("b").unwrap();
    let c = find_condition(&b.status.conditions, condition_types::RECONCILE_SUCCEEDED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::False, "PrepareFailed")
    );
    assert_eq!(
        c.message,
        "cluster default/b: spec.ingress.virtualIP 10.0.1.100 is also cluster default/a's"
    );
    assert!(h.components("b").is_empty());
    // The first keeps it.
    reconcile_cluster(&key("a"), &h.ctx).await.unwrap();
    assert_ne!(reason(&h, "a").as_deref(), Some("PrepareFailed"));
}

#[tokio::test]
async fn a_deleted_cluster_leaves_nothing_behind() {
    let h = Harness::new();
    h.ready("c", 3).await;
    let held: BTreeSet<u16> = h.allocations().into_iter().map(|a| a.3).collect();
    h.store.delete::<Cluster>(&key("c")).await.unwrap();
    assert!(h.cluster("c").unwrap().metadata.is_being_deleted());

    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::AwaitChange);
    assert!(h.cluster("c").is_none());
    assert_eq!(h.components("c"), []);
    assert_eq!(h.allocations(), BTreeSet::new());
    assert_eq!(h.pods(), Vec::<String>::new());
    let mut freed = BTreeSet::new();
    for (name, _, _) in HYPERVISORS {
        let status = h.hypervisor(name).status;
        assert!(status.files.is_empty(), "{name}: {:?}", status.files);
        freed.extend(status.freed_ports);
    }
    assert_eq!(freed, held);
    assert_eq!(
        h.event_reasons().last().map(String::as_str),
        Some("ClusterDeleted")
    );
    assert!(!h.event_reasons().contains(&"ComponentDeleted".to_string()));

    // Gone: nothing more to do.
    h.store.clear_writes();
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        Action::AwaitChange
    );
    assert_eq!(h.store.writes(), []);
}

#[tokio::test]
async fn orphan_components_are_torn_down_through_the_engine() {
    let h = Harness::new();
    h.ready("c", 1).await;
    h.ready("d", 1).await;
    let d_allocations: BTreeSet<_> = h.allocations().into_iter().filter(|a| a.1 == "d").collect();
    // The Cluster goes without the manager: finalizer removed by hand.
    let mut c = h.cluster("c").unwrap();
    c.metadata.finalizers.clear();
    h.store.update(&c).await.unwrap();
    h.store.delete::<Cluster>(&key("c")).await.unwrap();
    assert!(h.cluster("c").is_none());
    assert_eq!(h.components("c").len(), 2);

    let action = reconcile_component(&key("c-ingress"), &h.ctx)
        .await
        .unwrap();
    assert_eq!(action, Action::AwaitChange);
    assert_eq!(h.components("c"), []);
    assert_eq!(h.allocations(), d_allocations, "only d's ports are left");
    let pods = h.pods();
    assert!(pods.iter().all(|p| p.contains("/d-")), "{pods:?}");
    assert_eq!(pods.len(), 3, "{pods:?}");
    let deleted: BTreeSet<_> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == "ComponentDeleted")
        .map(|e| e.key.name)
        .collect();
    assert_eq!(
        deleted,
        BTreeSet::from(["c-control-plane-0".to_string(), "c-ingress".to_string()])
    );
    // The other orphan is gone already.
    assert_eq!(
        reconcile_component(&key("c-control-plane-0"), &h.ctx)
            .await
            .unwrap(),
        Action::AwaitChange
    );
    // d is untouched and converged.
    h.store.clear_writes();
    reconcile_cluster(&key("d"), &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);
}

#[tokio::test]
async fn a_live_clusters_component_gets_the_finalizer_and_is_left_to_the_cluster() {
    let h = Harness::new();
    h.ready("c", 1).await;
    let mut ingress: Component = h.store.object(&key("c-ingress")).unwrap();
    ingress.metadata.finalizers.clear();
    h.store.update(&ingress).await.unwrap();
    h.store.clear_writes();
    let action = reconcile_component(&key("c-ingress"), &h.ctx)
        .await
        .unwrap();
    assert_eq!(action, Action::AwaitChange);
    let ingress: Component = h.store.object(&key("c-ingress")).unwrap();
    assert_eq!(ingress.metadata.finalizers, [FINALIZER]);
    assert_eq!(
        h.store.writes(),
        [Write::new(
            Op::Update,
            oi_api::Kind::Component,
            key("c-ingress")
        )]
    );
    h.store.clear_writes();
    reconcile_component(&key("c-ingress"), &h.ctx)
        .await
        .unwrap();
    assert_eq!(h.store.writes(), []);
    assert_eq!(
        reconcile_component(&key("missing"), &h.ctx).await.unwrap(),
        Action::AwaitChange
    );
}

#[tokio::test]
async fn a_hypervisor_that_goes_or_comes_back_wakes_the_clusters_on_it() {
    let h = Harness::new();
    // a: 3 replicas on the 3 private hypervisors; b: 1 replica on one of them.
    h.store.insert(cluster("a", 3));
    h.store.insert(cluster("b", 1));
    reconcile_cluster(&key("a"), &h.ctx).await.unwrap();
    reconcile_cluster(&key("b"), &h.ctx).await.unwrap();
    let placed = |cluster: &str| -> BTreeSet<String> {
        h.store
            .objects::<Component>()
            .into_iter()
            .filter(|c| c.spec.cluster == cluster)
            .filter_map(|c| c.spec.hypervisor)
            .collect()
    };
    // Each has its ingress on public-1 too.
    let b_on = placed("b")
        .into_iter()
        .find(|n| n.starts_with("private"))
        .unwrap();
    assert_eq!(placed("a").len(), 4);
    let hk = ObjectKey::cluster_scoped(&b_on);
    let mut wakeups = h.ctx.cluster_wakeups();
    let woken = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<ObjectKey>| {
        std::iter::from_fn(|| rx.try_recv().ok()).collect::<Vec<_>>()
    };

    // The first probe and a steady state wake nobody.
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert_eq!(woken(&mut wakeups), []);

    // Gone: both clusters on it, once.
    h.ctx.connector.down.lock().unwrap().insert(b_on.clone());
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert_eq!(woken(&mut wakeups), [key("a"), key("b")]);

    // Back: the same.
    h.ctx.connector.down.lock().unwrap().clear();
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert_eq!(woken(&mut wakeups), [key("a"), key("b")]);

    // A private hypervisor without b's replica: a only.
    let other = placed("a")
        .into_iter()
        .find(|n| n.starts_with("private") && *n != b_on)
        .unwrap();
    let ok = ObjectKey::cluster_scoped(&other);
    reconcile_hypervisor(&ok, &h.ctx).await.unwrap();
    h.ctx.connector.down.lock().unwrap().insert(other.clone());
    reconcile_hypervisor(&ok, &h.ctx).await.unwrap();
    assert_eq!(woken(&mut wakeups), [key("a")]);
}

#[tokio::test]
async fn hypervisor_probes_publish_transitions_and_keep_the_metric() {
    let h = Harness::new();
    let k = ObjectKey::cluster_scoped("private-1");
    let every = Action::Requeue(Duration::from_secs(30));
    // A throwaway pod a killed run left behind is removed by the first probe.
    let rt = &h.ctx.connector.runtimes["private-1"];
    let leftover = |name: &str| PodSpec {
        namespace: oi_cri::requests::RUN_NAMESPACE.into(),
        name: name.into(),
        labels: BTreeMap::from([(oi_cri::requests::RUN_LABEL.into(), "true".into())]),
        containers: vec![ContainerSpec {
            name: "writer".into(),
            image: "busybox".into(),
            command: vec![],
            args: vec![],
            env: BTreeMap::new(),
            mounts: vec![],
            privileged: false,
            resources: None,
        }],
    };
    rt.ensure_pod(&leftover("oi-run-left")).await.unwrap();

    assert_eq!(reconcile_hypervisor(&k, &h.ctx).await.unwrap(), every);
    assert_eq!(h.pods().iter().filter(|p| p.contains("oi-run")).count(), 0);
    let metric = |v: u8| format!("oi_manager_hypervisor_reachable{{hypervisor=\"private-1\"}} {v}");
    assert!(h.ctx.metrics.encode().contains(&metric(1)));
    assert_eq!(h.store.events(), []);

    // Swept once per process: a later throwaway pod may be a live run's.
    rt.ensure_pod(&leftover("oi-run-live")).await.unwrap();
    h.ctx
        .connector
        .down
        .lock()
        .unwrap()
        .insert("private-1".into());
    assert_eq!(reconcile_hypervisor(&k, &h.ctx).await.unwrap(), every);
    assert!(h.ctx.metrics.encode().contains(&metric(0)));
    let events = h.store.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (
            events[0].type_,
            events[0].reason.as_str(),
            events[0].key.clone()
        ),
        (EventType::Warning, "HypervisorUnreachable", k.clone())
    );
    assert!(
        events[0].note.contains("connection refused"),
        "{}",
        events[0].note
    );
    // Still down: no new event.
    reconcile_hypervisor(&k, &h.ctx).await.unwrap();
    assert_eq!(h.store.events().len(), 1);

    h.ctx.connector.down.lock().unwrap().clear();
    reconcile_hypervisor(&k, &h.ctx).await.unwrap();
    assert!(h.ctx.metrics.encode().contains(&metric(1)));
    assert_eq!(
        h.event_reasons(),
        ["HypervisorUnreachable", "HypervisorReachable"]
    );
    assert_eq!(h.pods().iter().filter(|p| p.contains("oi-run")).count(), 1);

    h.store.delete::<Hypervisor>(&k).await.unwrap();
    assert_eq!(
        reconcile_hypervisor(&k, &h.ctx).await.unwrap(),
        Action::AwaitChange
    );
    assert!(!h.ctx.metrics.encode().contains("private-1"));
}

#[tokio::test]
async fn a_conflict_fails_the_reconcile_and_a_rerun_converges() {
    let h = Harness::new();
    h.store.insert(cluster("c", 1));
    h.store.fail_next(
        Op::Update,
        StoreError::Conflict {
            kind: oi_api::Kind::Cluster,
            key: key("c"),
            message: "the object has been modified".into(),
        },
    );
    let error = reconcile_cluster(&key("c"), &h.ctx).await.unwrap_err();
    assert_eq!(error.reason(), "Conflict");
    assert_eq!(h.store.writes(), []);
    assert_eq!(
        h.ctx.error_backoff(ControllerKind::Cluster, &key("c")),
        Duration::from_secs(1)
    );
    // A failure in the middle of phase 1 (the first component's creation), after the
    // cluster's spec and ports were written.
    h.store.fail_next(
        Op::Create,
        StoreError::AlreadyExists {
            kind: oi_api::Kind::Component,
            key: key("c-ingress"),
        },
    );
    let error = reconcile_cluster(&key("c"), &h.ctx).await.unwrap_err();
    assert_eq!(error.reason(), "AlreadyExists");
    assert_eq!(h.components("c").len(), 0);
    assert_eq!(
        h.ctx.error_backoff(ControllerKind::Cluster, &key("c")),
        Duration::from_secs(2)
    );
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(300)));
    assert_eq!(
        h.ctx
            .consecutive_failures(ControllerKind::Cluster, &key("c")),
        0
    );
    assert_eq!(h.names("c"), ["c-control-plane-0", "c-ingress"]);
    // The ports written before the failed creation went to the same components: none leaked.
    assert_eq!(h.allocations().len(), 3 + 2, "{:?}", h.allocations());
    h.store.clear_writes();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);
}

#[tokio::test]
async fn a_cluster_that_cannot_be_prepared_reports_it_once_and_backs_off() {
    let h = Harness::new();
    h.store
        .delete::<Hypervisor>(&ObjectKey::cluster_scoped("public-1"))
        .await
        .unwrap();
    h.store.insert(cluster("c", 1));
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(1)));
    let c = h.cluster("c").unwrap();
    assert_eq!(
        succeeded(&c),
        Some((ConditionStatus::False, "PrepareFailed".into()))
    );
    assert_eq!(h.components("c"), []);
    let events = h.store.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].type_, events[0].reason.as_str()),
        (EventType::Warning, "PrepareFailed")
    );
    assert!(
        events[0].note.contains("no public hypervisor"),
        "{}",
        events[0].note
    );
    h.store.clear_writes();
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(2)));
    assert_eq!(h.store.writes(), []);
    assert_eq!(h.store.events().len(), 1);

    // A public hypervisor arrives: the cluster comes up.
    h.store.insert(hypervisor("public-1", true, "10.0.1.1"));
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(300)));
    assert_eq!(
        h.event_reasons().last().map(String::as_str),
        Some("ClusterReady")
    );
}

#[tokio::test]
async fn a_cluster_with_broken_key_material_is_not_deployed_and_its_field_named() {
    let h = Harness::new();
    h.store.insert(cluster("c", 1));
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(
        h.event_reasons().last().map(String::as_str),
        Some("ClusterReady")
    );
    let pods = h.pods();
    // The etcd peer CA's key replaced by the API server CA's: the CA no longer owns its key.
    let mut c = h.cluster("c").unwrap();
    let other_key = c.spec.api_server.ca.as_ref().unwrap().private_key.clone();
    c.spec
        .certificate_authorities
        .etcd_peer
        .as_mut()
        .unwrap()
        .private_key = other_key;
    h.store.insert(c);
    let calls = h.mutating_calls();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    let c = h.cluster("c").unwrap();
    assert_eq!(
        succeeded(&c),
        Some((ConditionStatus::False, "PrepareFailed".into()))
    );
    let message = &find_condition(&c.status.conditions, condition_types::RECONCILE_SUCCEEDED)
        .unwrap()
        .message;
    assert!(
        message.contains("spec.certificateAuthorities.etcdPeer.privateKey")
            && message.contains("the private key is not the one of certificate"),
        "{message}"
    );
    assert_eq!(h.mutating_calls(), calls, "nothing was deployed");
    assert_eq!(h.pods(), pods);
}

#[tokio::test]
async fn concurrent_clusters_never_share_a_port() {
    let h = Harness::new();
    for name in ["a", "b", "c"] {
        h.store.insert(cluster(name, 3));
    }
    let (ka, kb, kc) = (key("a"), key("b"), key("c"));
    let (a, b, c) = tokio::join!(
        reconcile_cluster(&ka, &h.ctx),
        reconcile_cluster(&kb, &h.ctx),
        reconcile_cluster(&kc, &h.ctx),
    );
    for r in [a, b, c] {
        assert_eq!(r.unwrap(), Action::Requeue(Duration::from_secs(300)));
    }
    let allocations = h.allocations();
    assert_eq!(allocations.len(), 3 * 11);
    let ports: BTreeSet<(String, u16)> = allocations
        .iter()
        .map(|(hv, _, _, p)| (hv.clone(), *p))
        .collect();
    assert_eq!(ports.len(), allocations.len(), "a port held twice");
    // Every component's status agrees with its hypervisor.
    for component in h.store.objects::<Component>() {
        let hv = component.spec.hypervisor.clone().unwrap();
        for p in &component.status.allocated_host_ports {
            assert!(allocations.contains(&(
                hv.clone(),
                component.spec.cluster.clone(),
                format!("{}-{}", component.metadata.name, p.name),
                p.port
            )));
        }
    }
    // Each hypervisor holds the files of every cluster placed on it.
    for (name, _, _) in HYPERVISORS {
        let files = &h.hypervisor(name).status.files["default"];
        assert_eq!(files.keys().collect::<Vec<_>>(), ["a", "b", "c"], "{name}");
    }
    h.store.clear_writes();
    for name in ["a", "b", "c"] {
        reconcile_cluster(&key(name), &h.ctx).await.unwrap();
    }
    assert_eq!(h.store.writes(), []);
}

#[test]
fn backoff_doubles_per_consecutive_failure_up_to_the_max_and_resets() {
    let h = Harness::new();
    let k = key("c");
    let kind = ControllerKind::Cluster;
    let delays: Vec<u64> = (0..6)
        .map(|_| h.ctx.error_backoff(kind, &k).as_secs())
        .collect();
    assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
    // Per controller and key.
    assert_eq!(
        h.ctx.error_backoff(ControllerKind::Component, &k),
        Duration::from_secs(1)
    );
    assert_eq!(h.ctx.error_backoff(kind, &key("d")), Duration::from_secs(1));
    h.ctx.record_success(kind, &k);
    assert_eq!(h.ctx.error_backoff(kind, &k), Duration::from_secs(1));
    // Many failures do not overflow.
    for _ in 0..100 {
        h.ctx.error_backoff(kind, &k);
    }
    assert_eq!(h.ctx.error_backoff(kind, &k), Duration::from_secs(10));
}

#[test]
fn preparing_a_prepared_sub_world_allocates_and_issues_nothing() {
    let mut world = World::default();
    for (name, public, ip) in HYPERVISORS {
        let h = hypervisor(name, public, ip);
        world.hypervisors.insert(h.key(), h);
    }
    let c = cluster("c", 3);
    world.clusters.insert(c.key(), c);
    let now = time::macros::datetime!(2026-11-22 08:00 UTC);
    let options = oi_planner::PrepareOptions::default();
    let once = oi_planner::prepare_with(world, now, &options);
    assert!(once.failures.is_empty());
    let twice = oi_planner::prepare_with(once.world.clone(), now, &options);
    assert!(twice.failures.is_empty());
    assert_eq!(twice.world, once.world);
    // A day later too: certificates are far from their renewal window.
    let later =
        oi_planner::prepare_with(once.world.clone(), now + time::Duration::days(1), &options);
    assert_eq!(later.world, once.world);
}

#[test]
fn reconcile_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let h = Harness::new();
    let k = key("c");
    let cluster = reconcile_cluster(&k, &h.ctx);
    send(&cluster);
    let component = reconcile_component(&k, &h.ctx);
    send(&component);
    let hypervisor = reconcile_hypervisor(&k, &h.ctx);
    send(&hypervisor);
}

#[tokio::test]
async fn readiness_transitions_are_published_once_each() {
    let h = Harness::new();
    h.ready("c", 3).await;
    h.ctx
        .connector
        .down
        .lock()
        .unwrap()
        .insert("private-2".into());
    let not_ready = Action::Requeue(Duration::from_secs(2));
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        not_ready
    );
    let c = h.cluster("c").unwrap();
    assert_eq!(
        succeeded(&c),
        Some((ConditionStatus::False, "HypervisorUnreachable".into()))
    );
    let warnings: Vec<_> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.type_ == EventType::Warning)
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].reason, "ClusterNotReady");
    assert!(
        warnings[0].note.contains("HypervisorUnreachable")
            && warnings[0].note.contains("private-2"),
        "{}",
        warnings[0].note
    );
    // Still down: the same status, no write, no second event.
    h.store.clear_writes();
    let events = h.store.events().len();
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        not_ready
    );
    assert_eq!(h.store.writes(), []);
    assert_eq!(h.store.events().len(), events);

    h.ctx.connector.down.lock().unwrap().clear();
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    assert_eq!(h.event_reasons()[events..], ["ClusterReady".to_string()]);
}

#[tokio::test]
async fn a_component_deleted_by_hand_is_replaced_then_released() {
    let h = Harness::new();
    h.ready("c", 3).await;
    h.store
        .delete::<Component>(&key("c-control-plane-1"))
        .await
        .unwrap();
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    // The lowest free index replaces it; the old one is torn down and gone.
    assert_eq!(
        h.names("c"),
        [
            "c-control-plane-0",
            "c-control-plane-2",
            "c-control-plane-3",
            "c-ingress"
        ]
    );
    assert_eq!(
        h.ctx.network.members(),
        [[
            "c-control-plane-0",
            "c-control-plane-2",
            "c-control-plane-3"
        ]]
    );
    assert!(h.pods().iter().all(|p| !p.contains("c-control-plane-1")));
    assert!(
        h.allocations()
            .iter()
            .all(|a| !a.2.starts_with("c-control-plane-1-"))
    );
}

#[tokio::test]
async fn engine_runs_never_remove_another_runs_throwaway_pods() {
    let h = Harness::new();
    let mut ctx_options = options();
    // Even when asked to: the manager's runs are many at once.
    ctx_options.execute.remove_leftover_throwaway_pods = true;
    let ctx = Context::new(
        Arc::clone(&h.store),
        FakeConnector {
            runtimes: h.ctx.connector.runtimes.clone(),
            down: Mutex::new(BTreeSet::new()),
        },
        SimNetwork::new(
            StoreSource(Arc::clone(&h.store)),
            h.ctx.connector.runtimes.clone(),
        ),
        ctx_options,
        Arc::new(Metrics::new()),
    );
    // Another cluster's file writer, running on a hypervisor c uses.
    let writer = PodSpec {
        namespace: oi_cri::requests::RUN_NAMESPACE.into(),
        name: "oi-run-writer-of-another-cluster".into(),
        labels: BTreeMap::from([(oi_cri::requests::RUN_LABEL.into(), "true".into())]),
        containers: vec![ContainerSpec {
            name: "writer".into(),
            image: "busybox".into(),
            command: vec![],
            args: vec![],
            env: BTreeMap::new(),
            mounts: vec![],
            privileged: false,
            resources: None,
        }],
    };
    h.ctx.connector.runtimes["public-1"]
        .ensure_pod(&writer)
        .await
        .unwrap();
    h.store.insert(cluster("c", 1));
    assert_eq!(
        reconcile_cluster(&key("c"), &ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    assert!(
        h.pods()
            .contains(&"public-1/oi-run-writer-of-another-cluster".to_string()),
        "{:?}",
        h.pods()
    );
}

/// The `oi_manager_cluster_certificate_expiry_timestamp_seconds` sample of cluster `name`.
fn certificate_expiry_metric(h: &Harness, name: &str) -> Option<i64> {
    let prefix = format!(
        "oi_manager_cluster_certificate_expiry_timestamp_seconds{{namespace=\"default\",cluster=\"{name}\"}} "
    );
    h.ctx
        .metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
}

#[tokio::test]
async fn certificate_expiry_is_a_metric_and_a_ca_close_to_it_an_event_once() {
    // CAs of 60 days: within the 90 days of warning from the start.
    let mut o = options();
    o.plan.prepare.ca_lifetime = time::Duration::days(60);
    let h = Harness::with_options(o);
    h.ready("c", 1).await;
    let c = h.cluster("c").unwrap();
    let world = {
        let mut w = oi_api::World::default();
        w.clusters.insert(key("c"), c.clone());
        for component in h.components("c") {
            w.components.insert(component.key(), component);
        }
        w
    };
    let all = oi_planner::expiry::certificates(&world, &key("c"));
    assert!(all.len() > 8, "{all:?}");
    let ca =
        oi_pki::inspect_certificate(&c.spec.api_server.ca.as_ref().unwrap().certificate).unwrap();
    let first = all.iter().map(|e| e.not_after).min().unwrap();
    assert!(first <= ca.not_after);
    assert_eq!(
        certificate_expiry_metric(&h, "c"),
        Some(first.unix_timestamp())
    );
    let expiring: Vec<_> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == "CertificateExpiring")
        .collect();
    assert_eq!(expiring.len(), 1, "{expiring:?}");
    assert_eq!(expiring[0].type_, EventType::Warning);
    assert_eq!(expiring[0].key, key("c"));
    let note = &expiring[0].note;
    assert!(
        note.starts_with("8 certificate(s) of cluster c expire soon:")
            && note.contains("Cluster default/c spec.apiServer.ca on ")
            && note.contains("oi cluster rotate-ca")
            && note.contains("and 3 more (oi cluster certificates)"),
        "{note}"
    );
    // The same certificates next time: no second event.
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(
        h.event_reasons()
            .iter()
            .filter(|r| *r == "CertificateExpiring")
            .count(),
        1
    );
    // Gone with the cluster.
    h.store.delete::<Cluster>(&key("c")).await.unwrap();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert!(h.cluster("c").is_none());
    assert_eq!(certificate_expiry_metric(&h, "c"), None);
}

#[tokio::test]
async fn certificates_far_from_expiry_raise_no_event() {
    let h = Harness::new();
    h.ready("c", 3).await;
    let metric = certificate_expiry_metric(&h, "c").expect("the metric is there");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // Leaves of a year are the first to expire.
    assert!(
        (metric - now - 365 * 86_400).abs() < 3_600,
        "{metric} vs now {now}"
    );
    assert!(
        !h.event_reasons()
            .contains(&"CertificateExpiring".to_string())
    );
}

#[tokio::test]
async fn scheduled_snapshots_are_taken_when_due_and_keep_only_the_newest() {
    let h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    // Older snapshots of this cluster, one of a cluster whose name it prefixes, and a file
    // that is nobody's snapshot.
    for name in [
        "default-c-20200101T000000Z.oisnap",
        "default-c-20200102T000000Z.oisnap",
        "default-c-2-20200101T000000Z.oisnap",
        "notes.txt",
    ] {
        std::fs::write(dir.path().join(name), name).unwrap();
    }
    let mut c = cluster("c", 1);
    c.spec.snapshots = Some(oi_api::SnapshotSchedule {
        every: "1h".into(),
        keep: Some(2),
        location: format!("file://{}", dir.path().display()),
    });
    h.store.insert(c);
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(300)));
    assert_eq!(h.ctx.network.snapshots_taken(), 1);
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let new = files
        .iter()
        .find(|f| {
            f.starts_with("default-c-")
                && !f.starts_with("default-c-2-")
                && !f.starts_with("default-c-202001")
        })
        .unwrap()
        .clone();
    assert_eq!(
        files,
        [
            "default-c-2-20200101T000000Z.oisnap".to_string(),
            "default-c-20200102T000000Z.oisnap".to_string(),
            new.clone(),
            "notes.txt".to_string(),
        ]
    );
    // The file is a snapshot of the cluster, as oi cluster restore reads it.
    let bytes = std::fs::read(dir.path().join(&new)).unwrap();
    let snapshot = oi_planner::snapshot::Snapshot::decode(&bytes, &new).unwrap();
    assert_eq!(snapshot.cluster_key(), key("c"));
    assert_eq!(snapshot.header.revision, 100);
    assert_eq!(*snapshot.etcd, oi_engine_testsupport::sim::sim_snapshot(1));
    let stored = h.cluster("c").unwrap();
    let last = stored.status.last_snapshot.clone().unwrap();
    assert_eq!(last.location, dir.path().join(&new).display().to_string());
    assert_eq!((last.revision, last.size), (100, bytes.len() as u64));
    let taken: Vec<_> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == "SnapshotTaken")
        .collect();
    assert_eq!(taken.len(), 1);
    assert!(
        taken[0]
            .note
            .contains("1 older removed (keep 2): default-c-20200101T000000Z.oisnap"),
        "{}",
        taken[0].note
    );

    // Not due again for an hour: nothing taken, nothing written.
    h.store.clear_writes();
    reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(h.ctx.network.snapshots_taken(), 1);
    assert_eq!(h.store.writes(), []);
    // Due in a minute: looked at again then, not at the usual five.
    let mut c = h.cluster("c").unwrap();
    let at = time::OffsetDateTime::now_utc() - time::Duration::minutes(59);
    c.status.last_snapshot.as_mut().unwrap().taken_at = at
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    h.store.insert(c);
    let Action::Requeue(after) = reconcile_cluster(&key("c"), &h.ctx).await.unwrap() else {
        panic!("not requeued");
    };
    assert!(
        after <= Duration::from_secs(61) && after >= Duration::from_secs(50),
        "{after:?}"
    );
    assert_eq!(h.ctx.network.snapshots_taken(), 1);
}

#[tokio::test]
async fn a_snapshot_that_cannot_be_written_is_a_warning_and_tried_again_soon() {
    let h = Harness::new();
    let mut c = cluster("c", 1);
    c.spec.snapshots = Some(oi_api::SnapshotSchedule {
        every: "1h".into(),
        keep: None,
        location: "s3://snaps/prod".into(),
    });
    h.store.insert(c);
    // No S3 credentials in the harness's store.
    let action = reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(60)));
    let c = h.cluster("c").unwrap();
    assert_eq!(
        succeeded(&c),
        Some((ConditionStatus::True, "ReconcileSucceeded".into())),
        "the cluster itself is fine"
    );
    assert_eq!(c.status.last_snapshot, None);
    let failed: Vec<_> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == "SnapshotFailed")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].type_, EventType::Warning);
    assert!(
        failed[0]
            .note
            .contains("scheduled snapshot to s3://snaps/prod failed: s3://snaps/prod/default-c-")
            && failed[0].note.contains("no credentials"),
        "{}",
        failed[0].note
    );
}

#[tokio::test]
async fn the_rotate_ca_annotation_rotates_one_phase_per_ready_reconcile() {
    let h = Harness::new();
    h.ready("c", 3).await;
    let before = h.cluster("c").unwrap();
    let old_ca = before.spec.api_server.ca.clone().unwrap();
    // An annotation naming nothing known: one warning, nothing started.
    let mut c = before.clone();
    c.metadata
        .annotations
        .insert(oi_api::ROTATE_CA_ANNOTATION.into(), "apiserver".into());
    h.store.insert(c);
    for _ in 0..2 {
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap();
    }
    let refused: Vec<_> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == "CARotationRefused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].note.contains("unknown CA \"apiserver\""),
        "{}",
        refused[0].note
    );
    assert_eq!(h.cluster("c").unwrap().status.ca_rotation, None);

    let mut c = h.cluster("c").unwrap();
    c.metadata.annotations.insert(
        oi_api::ROTATE_CA_ANNOTATION.into(),
        "apiServer,serviceAccount".into(),
    );
    h.store.insert(c);
    let soon = Action::Requeue(Duration::from_secs(1));
    // Trust: started and rolled out, then moved on to reissue.
    assert_eq!(reconcile_cluster(&key("c"), &h.ctx).await.unwrap(), soon);
    let c = h.cluster("c").unwrap();
    let rotation = c.status.ca_rotation.clone().unwrap();
    assert_eq!(rotation.phase, "reissue");
    assert_eq!(rotation.previous["spec.apiServer.ca"], old_ca.certificate);
    assert_ne!(c.spec.api_server.ca.as_ref().unwrap(), &old_ca);
    // Reissue: rolled out, then done (the annotation gone).
    assert_eq!(reconcile_cluster(&key("c"), &h.ctx).await.unwrap(), soon);
    let c = h.cluster("c").unwrap();
    assert_eq!(c.status.ca_rotation, None);
    assert!(
        !c.metadata
            .annotations
            .contains_key(oi_api::ROTATE_CA_ANNOTATION)
    );
    // The old CA gone from the bundles: an ordinary ready reconcile.
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    let notes: Vec<String> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == "CARotation")
        .map(|e| e.note)
        .collect();
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(
        notes[0]
            .starts_with("rotating spec.apiServer.ca, spec.apiServer.serviceAccount; phase 1 of 3")
    );
    assert!(notes[1].starts_with("phase 2 of 3"));
    assert!(
        notes[2].starts_with("phase 3 of 3, the last: the old CAs leave every trust bundle now"),
        "{}",
        notes[2]
    );
    // Every leaf of the replicas is the new CA's.
    let new_ca = h.cluster("c").unwrap().spec.api_server.ca.unwrap();
    for component in h.components("c") {
        if let Some(leaf) = component.status.server_certificates.get("apiserver") {
            assert!(oi_pki::is_signed_by(&leaf.certificate, &new_ca.certificate).unwrap());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The SIPCluster controller

const TENANTS: &str = "tenants";

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Hosts `(name, flavor, rack)` with their BMC credentials and network data Secrets, and a
/// SIPCluster `s1` asking for a control plane of 1 active + 1 standby, one per rack.
fn sip_world(hosts: &[(&str, &str, &str)]) -> World {
    let mut docs = Vec::new();
    for (i, (name, flavor, rack)) in hosts.iter().enumerate() {
        let nd = format!(
            r#"{{"networks": [{{"id": "oam-ipv4", "ip_address": "10.9.0.{}"}}]}}"#,
            i + 1
        );
        docs.push(format!(
            "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: {name}\n  namespace: {TENANTS}\n  labels: {{flavor: {flavor}, rack: {rack}}}\nspec:\n  online: true\n  bmc: {{address: 'redfish+http://127.0.0.1:8000/redfish/v1/Systems/{name}', credentialsName: {name}-bmc}}\n  networkData: {{name: {name}-nd, namespace: {TENANTS}}}\n  hardwareProfile: unknown\n"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-bmc, namespace: {TENANTS}}}\ndata: {{username: {}, password: {}}}\n",
            b64("admin"),
            b64("pw")
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-nd, namespace: {TENANTS}}}\ndata: {{networkData: {}}}\n",
            b64(&nd)
        ));
    }
    docs.push(format!(
        "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: s1, namespace: {TENANTS}}}\nspec:\n  nodes:\n    ControlPlane:\n      labelSelector: {{matchLabels: {{flavor: cp}}}}\n      topologyKey: rack\n      count: {{active: 1, standby: 1}}\n  services: {{}}\n"
    ));
    World::load(&docs.join("---\n"), "sip").unwrap()
}

fn seed(h: &Harness, world: &World) {
    for o in world.bare_metal_hosts.values() {
        h.store.insert(o.clone());
    }
    for o in world.secrets.values() {
        h.store.insert(o.clone());
    }
    for o in world.sip_clusters.values() {
        h.store.insert(o.clone());
    }
}

/// `(host, state)` of the hosts labelled for `tenants/s1`.
fn sip_hosts(store: &MemoryStore) -> Vec<(String, String)> {
    store
        .objects::<oi_api::BareMetalHost>()
        .into_iter()
        .filter(|h| {
            h.metadata
                .labels
                .get(oi_api::sip::CLUSTER_NAME_LABEL)
                .map(String::as_str)
                == Some("s1")
        })
        .map(|h| {
            (
                h.metadata.name.clone(),
                h.metadata.labels[oi_api::sip::NODE_STATE_LABEL].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_sip_cluster_controller_selects_replaces_and_lets_hosts_go() {
    let h = Harness::new();
    let world = sip_world(&[
        ("a1", "cp", "r1"),
        ("a2", "cp", "r1"),
        ("b1", "cp", "r2"),
        ("c1", "cp", "r3"),
    ]);
    seed(&h, &world);
    let k = ObjectKey::new(TENANTS, "s1");
    let action = reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    assert_eq!(action, Action::Requeue(Duration::from_secs(300)));
    assert_eq!(
        sip_hosts(&h.store),
        [
            ("a1".into(), "active".into()),
            ("b1".into(), "standby".into())
        ]
    );
    let sip: oi_api::SipCluster = h.store.object(&k).unwrap();
    assert_eq!(sip.metadata.finalizers, [oi_api::sip::SIP_FINALIZER]);
    let ready = sip.condition("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::True, "ReconciliationSucceeded")
    );
    // The hosts' own fields are as they were.
    let a1: oi_api::BareMetalHost = h.store.object(&ObjectKey::new(TENANTS, "a1")).unwrap();
    assert_eq!(a1.to_value()["spec"]["hardwareProfile"], "unknown");
    assert_eq!(a1.metadata.labels["flavor"], "cp");
    assert_eq!(h.event_reasons(), ["HostsChanged", "SIPClusterReady"]);

    // Converged: a second reconcile writes nothing.
    h.store.clear_writes();
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);

    // The active host fails: the standby takes over, a new standby is chosen (a2: its rack
    // is free again once a1 is let go; names decide among equals), the failed host is let go.
    let mut failed = a1.clone();
    failed.status.operational_status = "error".into();
    failed.status.error_type = "power management error".into();
    h.store.insert(failed);
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    assert_eq!(
        sip_hosts(&h.store),
        [
            ("a2".into(), "standby".into()),
            ("b1".into(), "active".into())
        ]
    );
    let a1: oi_api::BareMetalHost = h.store.object(&ObjectKey::new(TENANTS, "a1")).unwrap();
    assert!(
        !a1.metadata
            .labels
            .contains_key(oi_api::sip::CLUSTER_NAME_LABEL)
    );

    // A conflict on a host update fails the reconcile; the next one converges.
    h.store
        .insert(world.bare_metal_hosts[&ObjectKey::new(TENANTS, "a1")].clone());
    let a2 = ObjectKey::new(TENANTS, "a2");
    let mut going: oi_api::BareMetalHost = h.store.object(&a2).unwrap();
    going.status.operational_status = "error".into();
    h.store.insert(going);
    h.store.fail_next(
        Op::Update,
        StoreError::Conflict {
            kind: oi_api::Kind::BareMetalHost,
            key: a2.clone(),
            message: "stale".into(),
        },
    );
    assert!(reconcile_sip_cluster(&k, &h.ctx).await.is_err());
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    assert_eq!(
        sip_hosts(&h.store),
        [
            ("a1".into(), "standby".into()),
            ("b1".into(), "active".into())
        ]
    );

    // Deletion: our labels off every host, the finalizer removed, the object gone.
    h.store.delete::<oi_api::SipCluster>(&k).await.unwrap();
    assert_eq!(
        reconcile_sip_cluster(&k, &h.ctx).await.unwrap(),
        Action::AwaitChange
    );
    assert_eq!(sip_hosts(&h.store), []);
    assert!(h.store.object::<oi_api::SipCluster>(&k).is_none());
    for host in h.store.objects::<oi_api::BareMetalHost>() {
        assert!(
            oi_api::sip::SELECTION_LABELS
                .iter()
                .all(|l| !host.metadata.labels.contains_key(*l)),
            "{}",
            host.metadata.name
        );
        assert_eq!(host.metadata.labels["flavor"], "cp");
    }
    assert!(h.event_reasons().contains(&"SIPClusterDeleted".to_string()));
}

#[tokio::test]
async fn an_unschedulable_sip_cluster_says_why_and_a_new_host_lets_it_through() {
    // One rack only: one host per rack cannot give 1 active + 1 standby.
    let h = Arc::new(Harness::new());
    let world = sip_world(&[("a1", "cp", "r1"), ("a2", "cp", "r1")]);
    seed(&h, &world);
    let k = ObjectKey::new(TENANTS, "s1");
    assert_eq!(
        reconcile_sip_cluster(&k, &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(30))
    );
    assert_eq!(sip_hosts(&h.store), []);
    let sip: oi_api::SipCluster = h.store.object(&k).unwrap();
    let ready = sip.condition("Ready").unwrap();
    assert_eq!(ready.reason, "Unschedulable");
    assert!(
        ready.message.contains("a2: its rack r1 already holds a1"),
        "{}",
        ready.message
    );
    let warning = h
        .store
        .events()
        .into_iter()
        .find(|e| e.reason == "SIPClusterNotReady")
        .unwrap();
    assert_eq!(warning.type_, EventType::Warning);

    // The driver runs; a host on another rack arrives: its watch wakes the SIPCluster,
    // long before the 30 s requeue. The driver's first pass is told by the finalizer it puts
    // back (taken off here), so the host arrives after it.
    let mut bare = sip.clone();
    bare.metadata.finalizers.clear();
    h.store.insert(bare);
    h.store.clear_writes();
    let ctx = Arc::new(Context::new(
        Arc::clone(&h.store),
        FakeConnector {
            runtimes: BTreeMap::new(),
            down: Mutex::new(BTreeSet::new()),
        },
        SimNetwork::new(StoreSource(Arc::clone(&h.store)), BTreeMap::new()),
        options(),
        Arc::new(Metrics::new()),
    ));
    let driver = oi_manager_testsupport::driver::Driver::new(ctx);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        driver
            .run(async {
                let _ = stop_rx.await;
            })
            .await;
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while h
        .store
        .object::<oi_api::SipCluster>(&k)
        .is_none_or(|s| s.metadata.finalizers.is_empty())
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        std::time::Instant::now() < deadline,
        "the driver's first pass did not come"
    );
    // Its requeue is 30 s away: only the host watch can bring the next reconcile.
    let extra = sip_world(&[("b1", "cp", "r2")]);
    for o in extra.bare_metal_hosts.values() {
        h.store.insert(o.clone());
    }
    for o in extra.secrets.values() {
        h.store.insert(o.clone());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sip_hosts(&h.store).len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(());
    running.await.unwrap();
    assert_eq!(
        sip_hosts(&h.store),
        [
            ("a1".into(), "active".into()),
            ("b1".into(), "standby".into())
        ]
    );
    let sip: oi_api::SipCluster = h.store.object(&k).unwrap();
    assert_eq!(
        sip.condition("Ready").unwrap().reason,
        "ReconciliationSucceeded"
    );
}

#[tokio::test]
async fn the_sip_cluster_controller_runs_its_services_beside_clusters_and_tears_them_down() {
    let h = Harness::new();
    let mut world = sip_world(&[("a1", "cp", "r1"), ("b1", "cp", "r2")]);
    let services: oi_api::SipCluster = World::load(
        &format!(
            "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: s1, namespace: {TENANTS}}}\nspec:\n  nodes:\n    ControlPlane:\n      labelSelector: {{matchLabels: {{flavor: cp}}}}\n      topologyKey: rack\n      count: {{active: 1, standby: 1}}\n  services:\n    jumpHost: [{{image: jump, nodePort: 30090, nodeInterfaceId: oam-ipv4, nodeSSHPrivateKeys: keys}}]\n    loadBalancerControlPlane: [{{image: haproxy, nodePort: 30091, nodeInterfaceId: oam-ipv4}}]\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: keys, namespace: {TENANTS}}}\ndata: {{id_ed25519: {}}}\n",
            b64("a node key")
        ),
        "sip",
    )
    .map(|mut w| {
        world.secrets.append(&mut w.secrets);
        w.sip_clusters.into_values().next().unwrap()
    })
    .unwrap();
    world.sip_clusters = [(services.key(), services)].into();
    seed(&h, &world);
    let k = ObjectKey::new(TENANTS, "s1");
    assert_eq!(
        reconcile_sip_cluster(&k, &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    let sip: oi_api::SipCluster = h.store.object(&k).unwrap();
    let ready = sip.condition("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::True, "ReconciliationSucceeded"),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains(
            "services: control plane load balancer lb-control-plane-0 at 10.0.1.1:30091, jump host jump-host-0 at 10.0.1.1:30090"
        ),
        "{}",
        ready.message
    );
    let sip_ports = |h: &Harness| -> Vec<(String, String, u16)> {
        h.allocations()
            .into_iter()
            .filter(|a| a.1 == "SIPCluster/s1")
            .map(|(hv, _, c, p)| (hv, c, p))
            .collect()
    };
    let placed = vec![
        ("public-1".to_string(), "jump-host-0-ssh".to_string(), 30090),
        (
            "public-1".to_string(),
            "lb-control-plane-0-apiserver".to_string(),
            30091,
        ),
    ];
    assert_eq!(sip_ports(&h), placed);
    let pods = h.pods();
    for pod in ["public-1/s1-jump-host-0", "public-1/s1-lb-control-plane-0"] {
        assert!(pods.contains(&pod.to_string()), "{pods:?}");
    }
    let files = &h.hypervisor("public-1").status.files[TENANTS]["SIPCluster/s1"];
    assert_eq!(files.len(), 2);

    // Converged: nothing written, nothing done on the hypervisor.
    h.store.clear_writes();
    let calls = h.mutating_calls();
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);
    assert_eq!(h.mutating_calls(), calls);

    // A cluster placed on the same public hypervisor keeps away from the services' ports,
    // and its write-back keeps their share.
    h.ready("c", 1).await;
    assert_eq!(sip_ports(&h), placed);
    let cluster_ports: Vec<u16> = h
        .allocations()
        .into_iter()
        .filter(|a| a.1 == "c")
        .map(|a| a.3)
        .collect();
    assert!(!cluster_ports.contains(&30090) && !cluster_ports.contains(&30091));

    // More control plane hosts than the inventory has: unschedulable, and it says so; its
    // hosts and its running services are kept (planned with the hosts it holds).
    let grow = |h: &Harness, active: i64| {
        let mut sip: oi_api::SipCluster = h.store.object(&k).unwrap();
        sip.spec.nodes.get_mut("ControlPlane").unwrap().count.active = active;
        sip
    };
    h.store.update(&grow(&h, 3)).await.unwrap();
    // Not ready: tried again soon, not at the ready pace.
    assert_ne!(
        reconcile_sip_cluster(&k, &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    let sip: oi_api::SipCluster = h.store.object(&k).unwrap();
    let ready = sip.condition("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, "Unschedulable"),
        "{}",
        ready.message
    );
    assert_eq!(sip_ports(&h), placed);
    assert!(h.pods().contains(&"public-1/s1-jump-host-0".to_string()));
    h.store.update(&grow(&h, 1)).await.unwrap();
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    let sip: oi_api::SipCluster = h.store.object(&k).unwrap();
    assert_eq!(
        sip.condition("Ready").unwrap().reason,
        "ReconciliationSucceeded"
    );

    // Deleted while its hypervisor cannot be reached: the teardown fails, and the finalizer,
    // its ports and its pods all stay for the next try (which knows where to look).
    h.store.delete::<oi_api::SipCluster>(&k).await.unwrap();
    h.ctx
        .connector
        .down
        .lock()
        .unwrap()
        .insert("public-1".to_string());
    let failed = reconcile_sip_cluster(&k, &h.ctx).await;
    assert!(
        matches!(failed, Err(ReconcileError::SipTeardown { .. })),
        "{failed:?}"
    );
    assert!(h.store.object::<oi_api::SipCluster>(&k).is_some());
    assert_eq!(sip_ports(&h), placed);
    assert!(h.pods().contains(&"public-1/s1-jump-host-0".to_string()));
    h.ctx.connector.down.lock().unwrap().clear();
    // Reachable again: its pods and ports go before the finalizer does.
    assert_eq!(
        reconcile_sip_cluster(&k, &h.ctx).await.unwrap(),
        Action::AwaitChange
    );
    assert!(h.store.object::<oi_api::SipCluster>(&k).is_none());
    assert_eq!(sip_ports(&h), []);
    assert!(
        !h.pods().iter().any(|p| p.contains("s1-")),
        "{:?}",
        h.pods()
    );
    assert!(
        !h.hypervisor("public-1")
            .status
            .files
            .get(TENANTS)
            .is_some_and(|c| c.contains_key("SIPCluster/s1"))
    );
}

#[tokio::test]
async fn a_sip_clusters_oidc_provider_is_kept_and_its_cluster_told_to_trust_it() {
    let h = Harness::new();
    h.ready("c", 1).await;
    let hash = "$pbkdf2-sha256$i=10000$c2FsdHNhbHQ$8AsC4H/147lFlEEMCnL1JMziEIWaSGvXLB7jM4MIJaM";
    let users = format!("- username: alice\n  passwordHash: '{hash}'\n");
    let world = World::load(
        &format!(
            "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: s1, namespace: default}}\nspec:\n  clusterRef: {{name: c}}\n  nodes: {{}}\n  services:\n    oidcProvider: [{{image: dex, nodePort: 30093, usersSecret: users}}]\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: users, namespace: default}}\ndata: {{users.yaml: {}}}\n",
            b64(&users)
        ),
        "sip",
    )
    .unwrap();
    seed(&h, &world);
    let k = ObjectKey::new("default", "s1");
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    let sip: oi_api::SipCluster = h.store.object(&k).unwrap();
    let ready = sip.condition("Ready").unwrap();
    assert_eq!(ready.status, ConditionStatus::True, "{}", ready.message);
    assert_eq!(sip.status.oidc_providers.len(), 1);
    let provider = &sip.status.oidc_providers[0];
    assert_eq!(provider.issuer_url, "https://10.0.1.1:30093");
    assert!(
        h.pods()
            .contains(&"public-1/s1-oidc-provider-0".to_string())
    );
    // The cluster is told to trust it; its controller then renders the API server flags.
    let c: Cluster = h.store.object(&key("c")).unwrap();
    let oidc = c.spec.api_server.oidc.clone().unwrap();
    assert_eq!(oidc.issuer_url, provider.issuer_url);
    assert_eq!(oidc.ca, provider.certificate_authority.certificate);
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );

    // Converged: the same certificates, nothing written.
    h.store.clear_writes();
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    assert_eq!(h.store.writes(), []);

    // Deleted: the cluster no longer trusts it.
    h.store.delete::<oi_api::SipCluster>(&k).await.unwrap();
    reconcile_sip_cluster(&k, &h.ctx).await.unwrap();
    assert!(h.store.object::<oi_api::SipCluster>(&k).is_none());
    let c: Cluster = h.store.object(&key("c")).unwrap();
    assert_eq!(c.spec.api_server.oidc, None);
    assert!(
        !h.pods().iter().any(|p| p.contains("s1-oidc")),
        "{:?}",
        h.pods()
    );
}

#[tokio::test]
async fn a_deleted_hypervisor_has_its_replica_replaced_and_goes_once_nothing_holds_it() {
    let h = Harness::new();
    h.ready("c", 3).await;
    let hk = ObjectKey::cluster_scoped("private-1");
    // The manager's finalizer: a deletion waits for what runs there.
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert!(
        h.hypervisor("private-1")
            .metadata
            .finalizers
            .contains(&FINALIZER.to_string())
    );
    assert_eq!(
        find_condition(
            &h.hypervisor("private-1").status.conditions,
            condition_types::REACHABLE
        )
        .map(|c| c.status),
        Some(ConditionStatus::True)
    );
    // The machine is gone for good: it stops answering and is deleted.
    h.ctx.connector.runtimes["private-1"].crash_all(137);
    h.ctx
        .connector
        .down
        .lock()
        .unwrap()
        .insert("private-1".into());
    h.store.delete::<Hypervisor>(&hk).await.unwrap();
    let mut wakeups = h.ctx.cluster_wakeups();
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert!(h.hypervisor("private-1").metadata.is_being_deleted());
    assert_eq!(wakeups.try_recv().ok(), Some(key("c")));
    // The cluster replaces its replica in one reconcile: member removed, replacement joined.
    assert_eq!(
        reconcile_cluster(&key("c"), &h.ctx).await.unwrap(),
        Action::Requeue(Duration::from_secs(300))
    );
    // (Three private hypervisors: the replacement shares one with a replica.)
    assert_eq!(
        h.ctx.network.members(),
        [[
            "c-control-plane-1",
            "c-control-plane-2",
            "c-control-plane-3"
        ]]
    );
    assert!(
        h.components("c")
            .iter()
            .all(|c| c.spec.hypervisor.as_deref() != Some("private-1"))
    );
    let c = h.cluster("c").unwrap();
    assert_eq!(
        find_condition(&c.status.conditions, condition_types::HEALED)
            .map(|c| (c.status, c.reason.clone())),
        Some((ConditionStatus::True, "Replaced".into()))
    );
    let reasons = h.event_reasons();
    for reason in [
        event_reasons::HYPERVISOR_LOST,
        event_reasons::REPLACING,
        event_reasons::HEALED,
    ] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
    // Nothing holds it any more: its finalizer goes, and so does it.
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert!(h.store.object::<Hypervisor>(&hk).is_none());
}

#[tokio::test]
async fn a_hypervisor_unreachable_past_the_grace_period_is_lost_and_its_clusters_woken() {
    let mut o = options();
    o.plan.prepare.replace_unreachable_after = Some(time::Duration::ZERO);
    let h = Harness::with_options(o);
    h.ready("c", 2).await;
    let hk = ObjectKey::cluster_scoped("private-1");
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    h.ctx
        .connector
        .down
        .lock()
        .unwrap()
        .insert("private-1".into());
    let mut wakeups = h.ctx.cluster_wakeups();
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert_eq!(wakeups.try_recv().ok(), Some(key("c")));
    let lost: Vec<String> = h
        .store
        .events()
        .into_iter()
        .filter(|e| e.reason == event_reasons::HYPERVISOR_LOST)
        .map(|e| e.note)
        .collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0].starts_with("hypervisor private-1 is lost (unreachable since "),
        "{}",
        lost[0]
    );
    // Said once.
    reconcile_hypervisor(&hk, &h.ctx).await.unwrap();
    assert_eq!(
        h.event_reasons()
            .iter()
            .filter(|r| *r == event_reasons::HYPERVISOR_LOST)
            .count(),
        1
    );
}
