//! Scenario 5: two clusters of different Kubernetes versions side by side on the same
//! hypervisors; kubectl sees each one's own version through its own ingress.

use std::time::Duration;

use oi_e2e::{
    LocalSet, World, admin_kubeconfig, cluster_version, eventually, oi, prerequisites,
    reconcile_until_ready, server_git_version,
};

#[test]
fn two_kubernetes_versions_side_by_side() {
    if !prerequisites("two_kubernetes_versions_side_by_side") {
        return;
    }
    let set = LocalSet::create("ver", 3, 1, false).unwrap();
    let old = oi(
        &[
            "cluster",
            "inject",
            "--name",
            "c1",
            "--kubernetes-version",
            "1.36",
        ],
        &set.manifests,
    )
    .unwrap()
    .ok("oi cluster inject c1")
    .unwrap();
    let both = oi(&["cluster", "inject", "--name", "c2"], &old.stdout)
        .unwrap()
        .ok("oi cluster inject c2")
        .unwrap();
    let (run, summary, _) = reconcile_until_ready(&both.stdout, 3).unwrap();
    assert_eq!((summary.clusters, summary.ready), (2, 2), "{summary}");
    let world = World::parse(&run.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for cluster in ["c1", "c2"] {
        let (status, message) = world.condition(cluster, "ReconcileSucceeded").unwrap();
        assert_eq!(status, "True", "{cluster}: {message}");
        let kubeconfig = admin_kubeconfig(&world, cluster, dir.path()).unwrap();
        let git_version =
            eventually(Duration::from_secs(20), || server_git_version(&kubeconfig)).unwrap();
        assert_eq!(
            git_version.trim_start_matches('v'),
            cluster_version(&world, cluster).unwrap(),
            "{cluster}"
        );
        seen.push(git_version);
    }
    assert!(seen[0].starts_with("v1.36."), "{seen:?}");
    assert_ne!(seen[0], seen[1], "{seen:?}");
    drop(set);
}
