//! Scenario 6: one private hypervisor's containerd is killed. The cluster with a replica on
//! it is reported `ReconcileSucceeded False` with a message naming the hypervisor, the other
//! cluster converges, and `oi reconcile` exits non-zero while still printing the world. Once
//! containerd is started again (the harness does it as `create` does: the set has no restart
//! command), both clusters converge.

use oi_e2e::{
    LocalSet, World, inject_cluster, prerequisites, reconcile, reconcile_until_ready, str_at,
};

#[test]
fn stopped_containerd_fails_only_the_clusters_it_hosts() {
    if !prerequisites("stopped_containerd_fails_only_the_clusters_it_hosts") {
        return;
    }
    let set = LocalSet::create("down", 2, 1, false).unwrap();
    let mut world = set.manifests.clone();
    for cluster in ["c1", "c2"] {
        world = inject_cluster(&world, cluster, 1).unwrap();
    }
    let (run, _, _) = reconcile_until_ready(&world, 3).unwrap();
    let converged = World::parse(&run.stdout).unwrap();
    let control_plane_of = |cluster: &str| -> Vec<String> {
        converged
            .components_of(cluster)
            .filter(|c| str_at(c, &["spec", "role"]) == Some("control-plane"))
            .filter_map(|c| str_at(c, &["spec", "hypervisor"]).map(str::to_owned))
            .collect()
    };
    let (c1_on, c2_on) = (control_plane_of("c1"), control_plane_of("c2"));
    assert_eq!(c1_on.len(), 1, "{c1_on:?}");
    let victim = c1_on[0].clone();
    assert!(
        !c2_on.contains(&victim),
        "both clusters were scheduled on {victim}: c1 {c1_on:?}, c2 {c2_on:?}"
    );

    set.kill_containerd(&victim).unwrap();

    let after = reconcile(&run.stdout, &["--max-wait", "20s"]).unwrap();
    let summary = after.summary().unwrap();
    eprintln!("with {victim} down: {summary}");
    assert!(
        !after.success,
        "a cluster is not ready, so oi must exit non-zero"
    );
    assert_eq!((summary.ready, summary.not_ready), (1, 1), "{summary}");
    let world = World::parse(&after.stdout).unwrap();
    let (status, message) = world.condition("c1", "ReconcileSucceeded").unwrap();
    eprintln!("c1 ReconcileSucceeded {status}: {message}");
    assert_eq!(status, "False");
    assert!(
        message.contains(&victim),
        "the message should name the hypervisor {victim}: {message:?}"
    );
    let (status, message) = world.condition("c2", "ReconcileSucceeded").unwrap();
    assert_eq!(status, "True", "{message}");

    set.restart_containerd(&victim).unwrap();
    let (run, summary, runs) = reconcile_until_ready(&after.stdout, 1).unwrap();
    eprintln!("after restarting {victim}: {runs} reconcile(s), last {summary}");
    let world = World::parse(&run.stdout).unwrap();
    for cluster in ["c1", "c2"] {
        let (status, message) = world.condition(cluster, "ReconcileSucceeded").unwrap();
        assert_eq!(status, "True", "{cluster}: {message}");
    }
    drop(set);
}
