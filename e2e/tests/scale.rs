//! Scenario 3: scaling a cluster's control plane 3 → 1 → 3 by editing
//! `spec.controlPlaneReplicas`; a key written to etcd before is read after each step.

use std::time::Duration;

use oi_e2e::{
    Etcdctl, LocalSet, World, eventually, inject_cluster, prerequisites, reconcile_until_ready,
};

/// Reconciles until ready, then waits for `replicas` started voting members and reads `key`.
fn converge(world: &str, replicas: usize, key: &str, value: &str) -> World {
    let (run, summary, runs) = reconcile_until_ready(world, 1).unwrap();
    eprintln!("{replicas} replicas: {runs} reconcile(s), last {summary}");
    let world = World::parse(&run.stdout).unwrap();
    let (status, message) = world.condition("c1", "ReconcileSucceeded").unwrap();
    assert_eq!(status, "True", "{message}");
    let etcd = Etcdctl::new(&world, "c1").unwrap();
    etcd.wait_voting_members(replicas, Duration::from_secs(30))
        .unwrap();
    let got = etcd
        .run(&["get", key, "--print-value-only"])
        .unwrap()
        .stdout;
    assert_eq!(got.trim_end(), value);
    world
}

#[test]
fn scale_three_to_one_to_three_keeps_etcd_data() {
    if !prerequisites("scale_three_to_one_to_three_keeps_etcd_data") {
        return;
    }
    let set = LocalSet::create("scale", 3, 1, false).unwrap();
    let injected = inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let etcd = Etcdctl::new(&world, "c1").unwrap();
    eventually(Duration::from_secs(30), || {
        etcd.run(&["put", "/oi-e2e/kept", "across-scaling"])
    })
    .unwrap();

    let world = converge(
        &world.with_replicas("c1", 1).unwrap(),
        1,
        "/oi-e2e/kept",
        "across-scaling",
    );
    assert_eq!(
        world.components_of("c1").count(),
        2,
        "1 control plane + ingress"
    );
    let world = converge(
        &world.with_replicas("c1", 3).unwrap(),
        3,
        "/oi-e2e/kept",
        "across-scaling",
    );
    assert_eq!(
        world.components_of("c1").count(),
        4,
        "3 control planes + ingress"
    );
    drop(set);
}
