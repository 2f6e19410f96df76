#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;

use crate::testutil::{basic, cluster, hypervisor, world};
use std::collections::BTreeMap;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("default", name)
}

fn ready(name: &str, w: World) -> World {
    let mut result = crate::ClusterResult::new(&key(name));
    result.outcome.ready = true;
    result.outcome.reason = crate::Reason::Succeeded;
    crate::record(w, &BTreeMap::from([(key(name), result)]), NOW)
}

#[test]
fn the_survivor_is_forced_once_and_every_other_replica_is_replaced() {
    let mut hvs = basic();
    for i in 4..=5 {
        hvs.push(hypervisor(
            &format!("private-{i}"),
            false,
            &format!("10.0.0.{i}"),
            None,
            (30000, 30099),
        ));
    }
    let w = crate::prepare(world(hvs, vec![cluster("c", 3, false)]), NOW).world;
    let mut w = ready("c", w);
    // The two others' hypervisors are gone for good.
    for c in ["c-control-plane-0", "c-control-plane-1"] {
        let h = w.components[&key(c)].spec.hypervisor.clone().unwrap();
        w.hypervisors
            .get_mut(&ObjectKey::cluster_scoped(h))
            .unwrap()
            .metadata
            .deletion_timestamp = Some(NOW);
    }
    let plan = plan_recover(
        w,
        &key("c"),
        "c-control-plane-2",
        NOW,
        &PlanOptions::default(),
    )
    .unwrap();
    let ClusterPlan::Converge(c) = &plan.clusters[&key("c")] else {
        panic!("not converged");
    };
    let r = c.recover.as_ref().unwrap();
    assert_eq!(r.member, "c-control-plane-2");
    let survivor = c.component("c-control-plane-2").unwrap();
    assert_eq!(r.hypervisor, survivor.hypervisor);
    let etcd = |p: &PodSpec| p.containers[0].args.clone();
    let normal = etcd(survivor.etcd_pod().unwrap());
    let forced = etcd(&r.forced);
    assert_eq!(forced[..normal.len()], normal[..]);
    assert_eq!(forced[normal.len()..], ["--force-new-cluster".to_string()]);
    // The others retire; two replacements join the survivor, one after the other.
    let retiring: Vec<&str> = c.retiring.iter().map(|r| r.key.name.as_str()).collect();
    assert_eq!(retiring, ["c-control-plane-0", "c-control-plane-1"]);
    let members: Vec<&str> = c.etcd.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        members,
        [
            "c-control-plane-2",
            "c-control-plane-3",
            "c-control-plane-4"
        ]
    );
    let start = |name: &str| {
        plan.world.components[&key(name)]
            .status
            .etcd_member
            .clone()
            .unwrap()
    };
    assert_eq!(
        start("c-control-plane-3")
            .initial_cluster
            .keys()
            .collect::<Vec<_>>(),
        ["c-control-plane-2", "c-control-plane-3"]
    );
    assert_eq!(
        start("c-control-plane-4").initial_cluster_state,
        oi_api::EtcdInitialClusterState::Existing
    );
    // Nothing new on a lost hypervisor.
    for name in ["c-control-plane-3", "c-control-plane-4"] {
        let h = c.component(name).unwrap().hypervisor.clone();
        assert!(h == "private-4" || h == "private-5", "{name} on {h}");
    }
}

#[test]
fn a_member_that_is_no_replica_of_the_cluster_is_refused_naming_them() {
    let w = crate::prepare(world(basic(), vec![cluster("c", 3, false)]), NOW).world;
    let e = plan_recover(
        w.clone(),
        &key("c"),
        "c-ingress",
        NOW,
        &PlanOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "c-ingress is not a live control plane replica of cluster default/c (its replicas: \
         c-control-plane-0, c-control-plane-1, c-control-plane-2)"
    );
    let e = plan_recover(w, &key("d"), "x", NOW, &PlanOptions::default()).unwrap_err();
    assert_eq!(e, RecoverError::NoCluster(key("d")));
}
