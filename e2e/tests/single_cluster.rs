//! Scenarios 1 and 2: one 3-replica cluster on 3 private + 1 public local hypervisors, over
//! Unix CRI sockets and over mutual-TLS TCP, brought up by `oi reconcile`; kubectl reaches
//! the stand-in through the ingress, etcd has 3 started voting members, and a second
//! reconcile mutates nothing.

use std::time::Duration;

use oi_e2e::{
    Etcdctl, LocalSet, World, admin_kubeconfig, cluster_version, eventually, inject_cluster,
    prerequisites, reconcile, server_git_version,
};

fn three_replicas(test: &str, tag: &str, tcp: bool) {
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create(tag, 3, 1, tcp).unwrap();
    let injected = inject_cluster(&set.manifests, "c1", 3).unwrap();

    let first = reconcile(&injected, &[]).unwrap();
    let summary = first.summary().unwrap();
    let first = first.ok("first oi reconcile").unwrap();
    eprintln!("{test}: first reconcile {:.1?}: {summary}", first.elapsed);
    assert_eq!(
        (summary.clusters, summary.ready, summary.not_ready),
        (1, 1, 0)
    );
    assert!(summary.mutating_cri_calls > 0, "{summary}");
    // The cluster's objects inside (CRD, namespace, RBAC, kube-proxy, CoreDNS, join key).
    assert!(summary.cluster_api_writes > 10, "{summary}");
    let world = World::parse(&first.stdout).unwrap();
    let (status, message) = world.condition("c1", "ReconcileSucceeded").unwrap();
    assert_eq!(status, "True", "{message}");

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let git_version =
        eventually(Duration::from_secs(20), || server_git_version(&kubeconfig)).unwrap();
    assert_eq!(
        git_version.trim_start_matches('v'),
        cluster_version(&world, "c1").unwrap()
    );

    let etcd = Etcdctl::new(&world, "c1").unwrap();
    let members = etcd
        .wait_voting_members(3, Duration::from_secs(20))
        .unwrap();
    eprintln!("{test}: etcd members {members:?}");

    let second = reconcile(&first.stdout, &[]).unwrap();
    let summary = second.summary().unwrap();
    let second = second.ok("second oi reconcile").unwrap();
    eprintln!("{test}: second reconcile {:.1?}: {summary}", second.elapsed);
    assert_eq!(summary.mutating_cri_calls, 0, "{summary}");
    assert_eq!(summary.cluster_api_writes, 0, "{summary}");
    assert_eq!((summary.ready, summary.not_ready), (1, 0), "{summary}");
    assert_eq!(
        summary.pods_created + summary.pods_replaced + summary.pods_removed,
        0,
        "{summary}"
    );
    drop(set);
}

#[test]
fn unix_cri_three_replicas_ready_then_no_op() {
    three_replicas("unix_cri_three_replicas_ready_then_no_op", "one", false);
}

#[test]
fn tcp_cri_three_replicas_ready_then_no_op() {
    three_replicas("tcp_cri_three_replicas_ready_then_no_op", "tcp", true);
}
