#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use oi_api::common::{Condition, find_condition};
use pretty_assertions::assert_eq;
use time::macros::datetime;

use super::*;
use crate::testutil::{basic, cluster, world};

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("default", name)
}

fn prepared(replicas: u32) -> World {
    let p = crate::prepare(world(basic(), vec![cluster("c", replicas, false)]), NOW);
    assert!(p.failures.is_empty(), "{:?}", p.failures);
    p.world
}

fn conditions(world: &World) -> Vec<(String, String, String)> {
    world.clusters[&key("c")]
        .status
        .conditions
        .iter()
        .map(|c: &Condition| (c.type_.clone(), format!("{:?}", c.status), c.reason.clone()))
        .collect()
}

fn results(result: ClusterResult) -> BTreeMap<ObjectKey, ClusterResult> {
    BTreeMap::from([(result.outcome.cluster.clone(), result)])
}

#[test]
fn a_ready_cluster_is_started_and_succeeded_with_its_files_placed() {
    let mut result = ClusterResult::new(&key("c"));
    result.outcome.ready = true;
    result.outcome.reason = Reason::Succeeded;
    result.files.push(PlacedFiles {
        hypervisor: "public-1".into(),
        component: "c-ingress".into(),
        hashes: BTreeMap::from([(
            "/etc/oneinfra/default/c/c-ingress/haproxy.cfg".into(),
            "h".into(),
        )]),
    });
    let w = record(prepared(1), &results(result), NOW);
    assert_eq!(
        conditions(&w),
        [
            (
                "ReconcileStarted".into(),
                "True".into(),
                "ReconcileStarted".into()
            ),
            (
                "ReconcileSucceeded".into(),
                "True".into(),
                "ReconcileSucceeded".into()
            ),
        ]
    );
    let files = &w.hypervisors[&ObjectKey::cluster_scoped("public-1")]
        .status
        .files;
    assert_eq!(files["default"]["c"]["c-ingress"].len(), 1);
}

#[test]
fn a_failure_is_the_condition_with_its_reason_and_message() {
    let result = ClusterResult {
        outcome: ClusterOutcome::new(&key("c"))
            .fail(Reason::EtcdNotReady, "etcd: 2 of 3 members voting"),
        files: Vec::new(),
        removed: Vec::new(),
        join_tokens: None,
        vpn_peers: None,
        joined: None,
        joined_nodes: None,
        etcd_rejoined: Vec::new(),
    };
    let w = record(prepared(3), &results(result), NOW);
    assert_eq!(
        conditions(&w),
        [
            (
                "ReconcileStarted".into(),
                "True".into(),
                "ReconcileStarted".into()
            ),
            (
                "ReconcileSucceeded".into(),
                "False".into(),
                "EtcdNotReady".into()
            ),
        ]
    );
    let c = &w.clusters[&key("c")];
    let succeeded =
        find_condition(&c.status.conditions, condition_types::RECONCILE_SUCCEEDED).unwrap();
    assert_eq!(succeeded.message, "etcd: 2 of 3 members voting");

    // A cluster that could not be prepared was never started.
    let result = ClusterResult {
        outcome: ClusterOutcome::new(&key("c")).fail(Reason::PrepareFailed, "no public hypervisor"),
        files: Vec::new(),
        removed: Vec::new(),
        join_tokens: None,
        vpn_peers: None,
        joined: None,
        joined_nodes: None,
        etcd_rejoined: Vec::new(),
    };
    let w = record(prepared(1), &results(result), NOW);
    assert_eq!(
        conditions(&w),
        [(
            "ReconcileSucceeded".into(),
            "False".into(),
            "PrepareFailed".into()
        )]
    );
}

#[test]
fn removed_components_and_deleted_clusters_leave_with_their_ports_and_files() {
    let mut w = prepared(3);
    let ports_before = w.hypervisors[&ObjectKey::cluster_scoped("private-3")]
        .status
        .allocated_ports
        .len();
    assert_eq!(ports_before, 3);
    w.hypervisors
        .get_mut(&ObjectKey::cluster_scoped("private-3"))
        .unwrap()
        .status
        .files
        .entry("default".into())
        .or_default()
        .entry("c".into())
        .or_default()
        .insert(
            "c-control-plane-2".into(),
            BTreeMap::from([("/x".into(), "h".into())]),
        );
    let mut result = ClusterResult::new(&key("c"));
    result.outcome.ready = true;
    result.removed.push(key("c-control-plane-2"));
    let after = record(w.clone(), &results(result), NOW);
    assert!(!after.components.contains_key(&key("c-control-plane-2")));
    let h = &after.hypervisors[&ObjectKey::cluster_scoped("private-3")];
    assert!(h.status.allocated_ports.is_empty());
    assert_eq!(h.status.freed_ports.len(), 3);
    assert!(h.status.files.is_empty(), "{:?}", h.status.files);

    let mut result = ClusterResult::new(&key("c"));
    result.outcome.deleted = true;
    result.outcome.reason = Reason::Deleted;
    let after = record(w, &results(result), NOW);
    assert!(after.clusters.is_empty() && after.components.is_empty());
    assert!(
        after
            .hypervisors
            .values()
            .all(|h| h.status.allocated_ports.is_empty() && h.status.files.is_empty())
    );
}

#[test]
fn a_cluster_being_deleted_whose_teardown_failed_is_not_started() {
    let mut w = prepared(1);
    w.clusters
        .get_mut(&key("c"))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    let result = ClusterResult {
        outcome: ClusterOutcome::new(&key("c"))
            .fail(Reason::DeleteFailed, "hypervisor public-1 is unreachable"),
        files: Vec::new(),
        removed: Vec::new(),
        join_tokens: None,
        vpn_peers: None,
        joined: None,
        joined_nodes: None,
        etcd_rejoined: Vec::new(),
    };
    let after = record(w, &results(result), NOW);
    assert_eq!(
        conditions(&after),
        [(
            "ReconcileSucceeded".into(),
            "False".into(),
            "DeleteFailed".into()
        )]
    );
}

#[test]
fn join_tokens_in_force_are_recorded_only_when_reported() {
    let mut w = prepared(1);
    w.clusters.get_mut(&key("c")).unwrap().status.join_tokens = vec!["old".into()];
    let mut result = ClusterResult::new(&key("c"));
    let kept = record(w.clone(), &results(result.clone()), NOW);
    assert_eq!(kept.clusters[&key("c")].status.join_tokens, ["old"]);
    result.join_tokens = Some(vec!["abcdef.0123456789abcdef".into()]);
    let after = record(w, &results(result), NOW);
    assert_eq!(
        after.clusters[&key("c")].status.join_tokens,
        ["abcdef.0123456789abcdef"]
    );
}

#[test]
fn the_vpn_peers_a_run_leaves_are_the_clusters() {
    let peer = oi_api::VpnPeer {
        name: "worker-w1".into(),
        address: "10.0.0.2/16".into(),
        private_key: String::new(),
        public_key: "k".into(),
    };
    let mut w = prepared(1);
    w.clusters
        .get_mut(&key("c"))
        .unwrap()
        .status
        .vpn_peers
        .push(oi_api::VpnPeer {
            name: "worker-old".into(),
            ..peer.clone()
        });
    // A run that did not get to the join requests leaves the peers as they were.
    let w = record(w, &results(ClusterResult::new(&key("c"))), NOW);
    assert_eq!(w.clusters[&key("c")].status.vpn_peers[0].name, "worker-old");
    let mut result = ClusterResult::new(&key("c"));
    result.vpn_peers = Some(vec![peer.clone()]);
    let w = record(w, &results(result), NOW);
    assert_eq!(w.clusters[&key("c")].status.vpn_peers, [peer]);
}

#[test]
fn the_joined_nodes_a_run_found_are_recorded_and_kept_when_it_found_none() {
    let node = |name: &str, registered: bool| oi_api::JoinedNode {
        name: name.into(),
        registered,
        vpn_address: String::new(),
        issued_at: Some(NOW),
    };
    let mut result = ClusterResult::new(&key("c"));
    result.outcome.ready = true;
    result.joined_nodes = Some(vec![node("w1", true), node("w2", false)]);
    let w = record(prepared(1), &results(result), NOW);
    assert_eq!(
        w.clusters[&key("c")].status.joined_nodes,
        [node("w1", true), node("w2", false)]
    );
    // A run that did not reach the cluster's API says nothing of them: they stay.
    let result = ClusterResult::new(&key("c"));
    let w = record(w, &results(result), NOW);
    assert_eq!(w.clusters[&key("c")].status.joined_nodes.len(), 2);
}
