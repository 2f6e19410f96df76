//! oi-manager's controllers on real local hypervisors: Hypervisors and a Cluster in an
//! in-process store, the manager's loop brings the control plane up (3 voting etcd members,
//! kubectl through the ingress), scales it 3 → 1, then deletes it: nothing is left in the
//! store, on the hypervisors or in their port allocations.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oi_api::common::{ConditionStatus, condition_types, find_condition};
use oi_api::{Cluster, ClusterSpec, Component, ObjectKey, ObjectMeta};
use oi_e2e::{
    Etcdctl, LocalSet, World, admin_kubeconfig, all_reachable_metrics, eventually, kubectl_version,
    nothing_left, prerequisites,
};
use oi_manager::controller::{Action, reconcile_cluster};
use oi_manager::store::Store as _;
use oi_manager_testsupport::memory::MemoryStore;

type Ctx = oi_e2e::ManagerCtx;

fn context(store: &Arc<MemoryStore>) -> Arc<Ctx> {
    oi_e2e::manager_context(store)
}

fn run_until(
    runtime: &tokio::runtime::Runtime,
    ctx: &Arc<Ctx>,
    timeout: Duration,
    done: impl Fn(&MemoryStore) -> bool + Send + Sync,
) {
    oi_e2e::run_manager_until(runtime, ctx, timeout, done);
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

/// How many Cluster reconciles the manager ran, from its metrics.
fn cluster_reconciles(ctx: &Ctx) -> u64 {
    let text = ctx.metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix("oi_manager_reconciles_total{controller=\"cluster\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
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
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
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

/// The VPN scenario driven by the manager: a VPN Cluster with a join token; a worker behind
/// NAT joins and is answered as it asks (the manager watches the cluster's join requests:
/// a ready cluster's own requeue is minutes away); its kubelet is reached through the
/// tunnel; its Node deleted, its peer goes.
#[test]
fn manager_answers_a_worker_behind_nat_on_a_vpn_cluster() {
    let test = "manager_answers_a_worker_behind_nat_on_a_vpn_cluster";
    if !prerequisites(test)
        || !oi_testsupport::require_root_and_commands(test, &["wg", "wireguard-go", "iptables"])
    {
        return;
    }
    let set = LocalSet::create_with_workers("mvpn", 1, 1, false, 1).unwrap();
    let store = Arc::new(MemoryStore::default());
    for h in oi_api::World::load(&set.manifests, "oi-local-hypervisor-set")
        .unwrap()
        .hypervisors
        .into_values()
    {
        store.insert(h);
    }
    let key = ObjectKey::new("default", "c1");
    let token = "abcdef.0123456789abcdef";
    store.insert(Cluster::new(
        ObjectMeta::namespaced("default", "c1"),
        ClusterSpec {
            control_plane_replicas: Some(1),
            join_tokens: vec![token.to_string()],
            vpn: oi_api::Vpn {
                enabled: true,
                ..oi_api::Vpn::default()
            },
            ..ClusterSpec::default()
        },
    ));
    let ctx = context(&store);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    run_until(&runtime, &ctx, Duration::from_secs(300), |s| ready(s, &key));
    assert_eq!(ctx.joins.clusters(), std::slice::from_ref(&key));
    let world = World::of_store(&*store).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let admin = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let cluster: Cluster = store.object(&key).unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(
        &ca,
        &cluster.spec.api_server.ca.as_ref().unwrap().certificate,
    )
    .unwrap();
    let kubelet = oi_e2e::kubelet_standin(dir.path()).unwrap();
    let target = oi_e2e::JoinTarget {
        endpoint: &cluster.status.api_server_endpoint,
        ca: &ca,
        token,
        kubelet: &kubelet,
    };
    let worker = oi_e2e::Worker::new(&set, 1, dir.path()).unwrap();

    // The worker asks while the manager runs, after its first pass (the one every run of
    // the driver starts with): only the join watch can wake the cluster now, a ready
    // cluster's requeue being minutes away.
    let has_peer = |s: &MemoryStore| {
        s.object::<Cluster>(&key)
            .is_some_and(|c| c.status.vpn_peers.iter().any(|p| p.name == "worker-w1"))
    };
    let before = cluster_reconciles(&ctx);
    let child = std::thread::scope(|scope| {
        let driver = scope.spawn(|| run_until(&runtime, &ctx, Duration::from_secs(150), has_peer));
        eventually(Duration::from_secs(60), || {
            anyhow::ensure!(cluster_reconciles(&ctx) > before, "no pass yet");
            Ok(())
        })
        .unwrap();
        let child = worker
            .join_command("w1", &target, "120s")
            .unwrap()
            .spawn()
            .unwrap();
        driver.join().unwrap();
        child
    });
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let cluster: Cluster = store.object(&key).unwrap();
    let peers: Vec<(String, String)> = cluster
        .status
        .vpn_peers
        .iter()
        .map(|p| (p.name.clone(), p.address.clone()))
        .collect();
    assert_eq!(
        peers,
        [("worker-w1".to_string(), "10.0.0.2/16".to_string())]
    );
    let _kubelet = worker
        .start_kubelet(
            &oi_e2e::kubelet_command_of(&stderr).unwrap(),
            "v1.37.1",
            &dir.path().join("kubelet.log"),
        )
        .unwrap();
    let healthz = eventually(Duration::from_secs(60), || {
        let run = oi_e2e::kubectl(&admin, &["get", "--raw", "/api/v1/nodes/w1/proxy/healthz"])?;
        anyhow::ensure!(
            run.success && run.stdout == "ok",
            "{:?} {}",
            run.stdout,
            run.stderr
        );
        Ok(())
    });
    if let Err(e) = healthz {
        let log = std::fs::read_to_string(dir.path().join("kubelet.log")).unwrap_or_default();
        panic!("{e:#}\nkubelet:\n{log}");
    }

    // Its Node registered (marked so on the next pass), then deleted: the manager hears of
    // it and the peer goes.
    run_until(&runtime, &ctx, Duration::from_secs(60), |_| {
        oi_e2e::kubectl(
            &admin,
            &[
                "get",
                "nodejoinrequest",
                "w1",
                "-o",
                "jsonpath={.status.conditions[*].type}",
            ],
        )
        .is_ok_and(|r| r.stdout.contains("NodeRegistered"))
    });
    drop(_kubelet);
    oi_e2e::kubectl(&admin, &["delete", "node", "w1"])
        .unwrap()
        .ok("kubectl delete node")
        .unwrap();
    run_until(&runtime, &ctx, Duration::from_secs(60), |s| {
        s.object::<Cluster>(&key)
            .is_some_and(|c| c.status.vpn_peers.is_empty())
    });

    // Deleted: its watch stops with it.
    runtime.block_on(store.delete::<Cluster>(&key)).unwrap();
    run_until(&runtime, &ctx, Duration::from_secs(120), |s| {
        s.object::<Cluster>(&key).is_none() && components(s, "c1").is_empty()
    });
    assert!(ctx.joins.clusters().is_empty());
    nothing_left(&*store, &set).unwrap();
    drop(set);
}
