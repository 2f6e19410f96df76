//! oi-manager's controllers on real local hypervisors: Hypervisors and a Cluster in an
//! in-process store, the manager's loop brings the control plane up (3 voting etcd members,
//! kubectl through the ingress), scales it 3 → 1, then deletes it: nothing is left in the
//! store, on the hypervisors or in their port allocations.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use oi_api::common::{ConditionStatus, condition_types, find_condition};
use oi_api::versions::INFRA;
use oi_api::{Cluster, ClusterSpec, Component, ObjectKey, ObjectMeta};
use oi_cri::ClientOptions;
use oi_e2e::{
    Etcdctl, IMAGE_REPOSITORY, LocalSet, World, admin_kubeconfig, all_reachable_metrics,
    eventually, kubectl_version, nothing_left, prerequisites,
};
use oi_engine::{CriConnector, ExecuteOptions, RealNetwork};
use oi_manager::controller::{Action, Context, ManagerOptions, reconcile_cluster};
use oi_manager::metrics::Metrics;
use oi_manager::store::Store as _;
use oi_manager_testsupport::driver::Driver;
use oi_manager_testsupport::memory::MemoryStore;
use oi_planner::PlanOptions;
use oi_planner::render::RenderOptions;

type Ctx = Context<MemoryStore, CriConnector, RealNetwork>;

fn context(store: &Arc<MemoryStore>) -> Arc<Ctx> {
    let repository = Some(IMAGE_REPOSITORY.to_string());
    let defaults = ManagerOptions::default();
    let options = ManagerOptions {
        plan: PlanOptions {
            render: RenderOptions {
                image_repository: repository.clone(),
            },
            ..defaults.plan.clone()
        },
        execute: ExecuteOptions {
            max_wait: Duration::from_secs(60),
            ..defaults.execute.clone()
        },
        requeue_not_ready: Duration::from_secs(1),
        backoff_min: Duration::from_millis(500),
        backoff_max: Duration::from_secs(5),
        ..defaults
    };
    let connector = CriConnector {
        options: ClientOptions {
            toolbox_image: INFRA.toolbox.reference(repository.as_deref()),
            ..ClientOptions::default()
        },
    };
    Arc::new(Context::new(
        Arc::clone(store),
        connector,
        RealNetwork::default(),
        options,
        Arc::new(Metrics::new()),
    ))
}

/// The manager's in-process loop ([`Driver`]) until `done` holds of the store.
fn run_until(
    runtime: &tokio::runtime::Runtime,
    ctx: &Arc<Ctx>,
    timeout: Duration,
    done: impl Fn(&MemoryStore) -> bool + Send + Sync,
) {
    let driver = Driver::new(Arc::clone(ctx));
    if let Err(e) = runtime.block_on(driver.run_until(done, timeout)) {
        panic!("{e:#}\nevents: {:#?}", ctx.store.events());
    }
}

fn ready(store: &MemoryStore, key: &ObjectKey) -> bool {
    store.object::<Cluster>(key).is_some_and(|c| {
        find_condition(&c.status.conditions, condition_types::RECONCILE_SUCCEEDED)
            .is_some_and(|c| c.status == ConditionStatus::True)
    })
}

fn components(store: &MemoryStore, cluster: &str) -> Vec<Component> {
    store
        .objects::<Component>()
        .into_iter()
        .filter(|c| c.spec.cluster == cluster)
        .collect()
}

fn voting_members(store: &MemoryStore, replicas: usize) {
    Etcdctl::new(&World::of_store(store).unwrap(), "c1")
        .unwrap()
        .wait_voting_members(replicas, Duration::from_secs(30))
        .unwrap();
}

#[test]
fn manager_brings_up_scales_and_deletes_a_cluster() {
    if !prerequisites("manager_brings_up_scales_and_deletes_a_cluster") {
        return;
    }
    let set = LocalSet::create("mgr", 3, 1, false).unwrap();
    let hypervisors = oi_api::World::load(&set.manifests, "oi-local-hypervisor-set")
        .unwrap()
        .hypervisors;
    assert_eq!(hypervisors.len(), 4);
    let store = Arc::new(MemoryStore::default());
    for h in hypervisors.into_values() {
        store.insert(h);
    }
    let key = ObjectKey::new("default", "c1");
    store.insert(Cluster::new(
        ObjectMeta::namespaced("default", "c1"),
        ClusterSpec {
            control_plane_replicas: Some(3),
            ..ClusterSpec::default()
        },
    ));
    let ctx = context(&store);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    // Up: 3 replicas and the ingress, ready, reachable through the ingress.
    let started = Instant::now();
    // Ready, and every hypervisor probed: under load a probe can finish after the cluster is
    // ready (both run in the driver at once), so the metrics are part of the condition.
    let metrics = Arc::clone(&ctx.metrics);
    run_until(&runtime, &ctx, Duration::from_secs(300), |s| {
        let encoded = metrics.encode();
        ready(s, &key) && all_reachable_metrics(s).iter().all(|m| encoded.contains(m))
    });
    eprintln!("c1 ready after {:.1?}", started.elapsed());
    assert_eq!(components(&store, "c1").len(), 4);
    voting_members(&store, 3);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig =
        admin_kubeconfig(&World::of_store(&*store).unwrap(), "c1", dir.path()).unwrap();
    let version = eventually(Duration::from_secs(30), || kubectl_version(&kubeconfig)).unwrap();
    assert!(
        version.pointer("/serverVersion/gitVersion").is_some(),
        "{version}"
    );
    // The manager wrote the cluster's objects inside, as `oi reconcile` does: the join key
    // last of them.
    let join_key = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "configmap", "oneinfra-join", "-n", "oneinfra-system"])
        .args(["-o", "jsonpath={.data.joinKey}"])
        .output()
        .unwrap();
    let cluster: Cluster = store.object(&key).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&join_key.stdout),
        cluster.spec.join_key.unwrap().public_key,
        "{}",
        String::from_utf8_lossy(&join_key.stderr)
    );
    let reasons: Vec<String> = store.events().into_iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons.iter().filter(|r| *r == "ComponentCreated").count(),
        4,
        "{reasons:?}"
    );
    assert!(reasons.contains(&"ClusterReady".to_string()), "{reasons:?}");
    assert!(
        !reasons.contains(&"HypervisorUnreachable".to_string()),
        "{reasons:?}"
    );
    let metrics = ctx.metrics.encode();
    for reachable in all_reachable_metrics(&*store) {
        assert!(metrics.contains(&reachable), "{metrics}");
    }

    // A converged cluster: a reconcile writes nothing to the store.
    store.clear_writes();
    let action = runtime.block_on(reconcile_cluster(&key, &ctx)).unwrap();
    assert_eq!(action, Action::Requeue(ctx.options.requeue_ready));
    assert_eq!(store.writes(), []);

    // Scale 3 -> 1.
    let mut cluster: Cluster = store.object(&key).unwrap();
    cluster.spec.control_plane_replicas = Some(1);
    runtime.block_on(store.update(&cluster)).unwrap();
    run_until(&runtime, &ctx, Duration::from_secs(180), |s| {
        components(s, "c1").len() == 2 && ready(s, &key)
    });
    let names: Vec<String> = components(&store, "c1")
        .into_iter()
        .map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, ["c1-control-plane-0", "c1-ingress"]);
    voting_members(&store, 1);
    let deleted = store
        .events()
        .iter()
        .filter(|e| e.reason == "ComponentDeleted")
        .count();
    assert_eq!(deleted, 2);
    let version = eventually(Duration::from_secs(30), || kubectl_version(&kubeconfig)).unwrap();
    assert!(version.pointer("/serverVersion/gitVersion").is_some());

    // Delete: nothing left in the store, on the hypervisors, in their ports.
    runtime.block_on(store.delete::<Cluster>(&key)).unwrap();
    run_until(&runtime, &ctx, Duration::from_secs(120), |s| {
        s.object::<Cluster>(&key).is_none() && components(s, "c1").is_empty()
    });
    nothing_left(&*store, &set).unwrap();
    assert!(
        store.events().iter().any(|e| e.reason == "ClusterDeleted"),
        "{:?}",
        store.events()
    );
    drop(set);
}
