#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use oi_api::Resource as _;
use pretty_assertions::assert_eq;
use time::macros::datetime;

use super::*;
use crate::record::{ClusterResult, PlacedFiles, record};
use crate::testutil::{basic, cluster, world};

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);
const LATER: OffsetDateTime = datetime!(2026-11-22 04:00:00 UTC);

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("default", name)
}

fn converge<'p>(plan: &'p Plan, cluster: &str) -> &'p Convergence {
    match &plan.clusters[&key(cluster)] {
        ClusterPlan::Converge(c) => c,
        other => panic!("{cluster}: {other:?}"),
    }
}

fn names(members: &[EtcdMember]) -> Vec<&str> {
    members.iter().map(|m| m.name.as_str()).collect()
}

#[test]
fn a_new_cluster_plans_every_component_with_its_etcd_founders() {
    let plan = plan(
        world(basic(), vec![cluster("c", 3, false)]),
        NOW,
        &PlanOptions::default(),
    );
    assert_eq!(
        plan.hypervisors
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["private-1", "private-2", "private-3", "public-1"]
    );
    let c = converge(&plan, "c");
    let components: Vec<(&str, &str, Vec<&str>)> = c
        .components
        .iter()
        .map(|p| {
            (
                p.name(),
                p.hypervisor.as_str(),
                p.rendered.pods.iter().map(|p| p.name.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        components,
        [
            (
                "c-control-plane-0",
                "private-1",
                vec!["c-control-plane-0", "c-control-plane-0-etcd"]
            ),
            (
                "c-control-plane-1",
                "private-2",
                vec!["c-control-plane-1", "c-control-plane-1-etcd"]
            ),
            (
                "c-control-plane-2",
                "private-3",
                vec!["c-control-plane-2", "c-control-plane-2-etcd"]
            ),
            ("c-ingress", "public-1", vec!["c-ingress"]),
        ]
    );
    assert_eq!(
        c.hypervisors.iter().map(String::as_str).collect::<Vec<_>>(),
        ["private-1", "private-2", "private-3", "public-1"]
    );
    assert!(c.retiring.is_empty());
    assert_eq!(
        names(&c.etcd.members),
        [
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2"
        ]
    );
    assert_eq!(c.etcd.members[1].peer_url, "https://10.0.0.2:30002");
    assert_eq!(c.etcd.members[1].client_url, "https://10.0.0.2:30001");
    assert_eq!(
        c.etcd
            .founders
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        [
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2"
        ]
    );
    let identity = c.etcd.client.as_ref().unwrap();
    let cluster = &plan.world.clusters[&key("c")];
    let etcd_client_ca = &cluster
        .spec
        .certificate_authorities
        .etcd_client
        .as_ref()
        .unwrap()
        .certificate;
    oi_pki::check_leaf(
        &identity.certificate,
        &identity.private_key,
        Some(etcd_client_ca),
    )
    .unwrap();
    assert_eq!(
        identity.server_ca,
        cluster.spec.etcd_server.ca.as_ref().unwrap().certificate
    );
    assert!(!format!("{identity:?}").contains("PRIVATE KEY"));
    assert_eq!(
        c.apiserver_ca,
        cluster.spec.api_server.ca.as_ref().unwrap().certificate
    );
    let replica = c.component("c-control-plane-1").unwrap();
    assert_eq!(
        replica.apiserver_url.as_deref(),
        Some("https://10.0.0.2:30000")
    );
    assert_eq!(
        c.component("c-ingress").unwrap().apiserver_url.as_deref(),
        Some("https://192.0.2.1:40000")
    );
    // Nothing is on the hypervisors yet: every file is to write, so every pod reads one.
    assert!(replica.known_files.is_empty());
    assert_eq!(replica.changed_files(), replica.rendered.files.len());
    assert_eq!(replica.restart.len(), 2);
}

/// The world after a run that placed every planned file.
fn recorded(plan: &Plan) -> World {
    let results = plan
        .clusters
        .iter()
        .map(|(k, p)| {
            let mut result = ClusterResult::new(k);
            result.outcome.ready = true;
            if let ClusterPlan::Converge(c) = p {
                result.files = c
                    .components
                    .iter()
                    .map(|p| PlacedFiles {
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
            }
            (k.clone(), result)
        })
        .collect();
    record(plan.world.clone(), &results, NOW)
}

#[test]
fn a_converged_cluster_restarts_nothing_and_a_reissued_certificate_restarts_its_readers() {
    let first = plan(
        world(basic(), vec![cluster("c", 3, false)]),
        NOW,
        &PlanOptions::default(),
    );
    let converged = recorded(&first);
    let again = plan(converged.clone(), NOW, &PlanOptions::default());
    for p in &converge(&again, "c").components {
        assert_eq!((p.changed_files(), p.restart.len()), (0, 0), "{}", p.name());
    }
    let restarts_after_reissue = |cert: &str| {
        let mut w = converged.clone();
        w.components
            .get_mut(&key("c-control-plane-0"))
            .unwrap()
            .status
            .server_certificates
            .remove(cert);
        let reissued = plan(w, NOW, &PlanOptions::default());
        let c = converge(&reissued, "c");
        assert!(c.component("c-control-plane-1").unwrap().restart.is_empty());
        let replica = c.component("c-control-plane-0").unwrap();
        assert_eq!(replica.changed_files(), 2, "{cert}: certificate and key");
        replica.restart.iter().cloned().collect::<Vec<_>>()
    };
    // The API server reads its serving certificate at start: it restarts.
    assert_eq!(
        restarts_after_reissue(crate::render::certs::APISERVER),
        ["c-control-plane-0"]
    );
    // etcd reads its own serving certificate again for each connection: nothing restarts.
    assert!(restarts_after_reissue("etcd-server").is_empty());
}

/// What `earlier` did, recorded, then cluster c scaled to `replicas`: the plan of the next run.
fn rescaled(earlier: &Plan, replicas: u32) -> Plan {
    let mut w = recorded(earlier);
    w.clusters
        .get_mut(&key("c"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(replicas);
    plan(w, LATER, &PlanOptions::default())
}

#[test]
fn scaling_down_retires_the_last_replica_and_the_ingress_forgets_it() {
    let first = plan(
        world(basic(), vec![cluster("c", 3, false)]),
        NOW,
        &PlanOptions::default(),
    );
    let plan = rescaled(&first, 2);
    let c = converge(&plan, "c");
    assert_eq!(
        names(&c.etcd.members),
        ["c-control-plane-0", "c-control-plane-1"]
    );
    assert_eq!(
        c.retiring,
        [Retirement {
            key: key("c-control-plane-2"),
            hypervisor: Some("private-3".into()),
            lost: None,
            member: Some(EtcdMember {
                name: "c-control-plane-2".into(),
                peer_url: "https://10.0.0.3:30002".into(),
                client_url: "https://10.0.0.3:30001".into(),
            }),
            directories: vec![
                "/etc/oneinfra/default/c/c-control-plane-2".into(),
                "/var/lib/oneinfra/default/c/c-control-plane-2".into(),
            ],
        }]
    );
    assert!(c.component("c-control-plane-2").is_none());
    assert!(
        c.hypervisors.contains("private-3"),
        "its hypervisor must be reachable"
    );
    let haproxy = c
        .component("c-ingress")
        .unwrap()
        .rendered
        .files
        .iter()
        .find(|f| f.path.ends_with("haproxy.cfg"))
        .unwrap();
    assert!(!String::from_utf8_lossy(&haproxy.content).contains("c-control-plane-2"));
    assert!(!String::from_utf8_lossy(&haproxy.content).is_empty());
}

#[test]
fn scaling_changes_neither_pods_nor_files_of_the_replicas_that_stay() {
    // A replica's API server stores in its own etcd member only (kubeadm's stacked layout):
    // the members of the others are in none of its flags.
    let pods_and_files = |p: &Plan, name: &str| {
        let c = converge(p, "c");
        let replica = c.component(name).unwrap();
        (replica.rendered.pods.clone(), replica.changed_files())
    };
    let one = plan(
        world(basic(), vec![cluster("c", 1, false)]),
        NOW,
        &PlanOptions::default(),
    );
    let apiserver = &converge(&one, "c")
        .component("c-control-plane-0")
        .unwrap()
        .main_pod()
        .unwrap()
        .containers[0];
    assert!(
        apiserver
            .args
            .contains(&"--etcd-servers=https://10.0.0.1:30001".to_string()),
        "{:?}",
        apiserver.args
    );
    let three = rescaled(&one, 3);
    assert_eq!(
        pods_and_files(&three, "c-control-plane-0"),
        (pods_and_files(&one, "c-control-plane-0").0, 0),
        "scaling up"
    );
    let two = rescaled(&three, 2);
    for name in ["c-control-plane-0", "c-control-plane-1"] {
        assert_eq!(
            pods_and_files(&two, name),
            (pods_and_files(&three, name).0, 0),
            "scaling down: {name}"
        );
        assert!(
            converge(&two, "c")
                .component(name)
                .unwrap()
                .restart
                .is_empty()
        );
    }
}

#[test]
fn a_cluster_marked_for_deletion_is_torn_down_where_it_has_anything() {
    let first = plan(
        world(basic(), vec![cluster("c", 1, false)]),
        NOW,
        &PlanOptions::default(),
    );
    let mut w = recorded(&first);
    w.clusters
        .get_mut(&key("c"))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    // Its components already gone from one hypervisor's view: its files there still count.
    let ingress = w.components.remove(&key("c-ingress")).unwrap();
    let plan = plan(w, LATER, &PlanOptions::default());
    let ClusterPlan::Teardown(t) = &plan.clusters[&key("c")] else {
        panic!("{:?}", plan.clusters);
    };
    assert_eq!(t.hypervisors, ["private-1", "public-1"]);
    assert_eq!(
        t.directories,
        ["/etc/oneinfra/default/c", "/var/lib/oneinfra/default/c"]
    );
    assert_eq!(ingress.spec.hypervisor.as_deref(), Some("public-1"));
    assert!(plan.hypervisors.contains("public-1"));
}

#[test]
fn a_cluster_that_cannot_be_prepared_or_rendered_is_unplannable_with_its_reason() {
    let mut hypervisors = basic();
    hypervisors.retain(|h| !h.spec.public);
    let plan = plan(
        world(hypervisors, vec![cluster("c", 1, false)]),
        NOW,
        &PlanOptions::default(),
    );
    let ClusterPlan::Unplannable(e) = &plan.clusters[&key("c")] else {
        panic!("{:?}", plan.clusters);
    };
    assert_eq!(e.reason(), Reason::PrepareFailed);
    assert!(e.to_string().contains("no public hypervisor"), "{e}");

    // A prepared world missing a certificate that preparation would have issued.
    let mut prepared = crate::prepare(world(basic(), vec![cluster("c", 1, false)]), NOW);
    prepared
        .world
        .components
        .get_mut(&key("c-control-plane-0"))
        .unwrap()
        .status
        .client_certificates
        .remove("scheduler");
    let plan = plan_prepared(prepared, NOW, &RenderOptions::default());
    let ClusterPlan::Unplannable(e) = &plan.clusters[&key("c")] else {
        panic!("{:?}", plan.clusters);
    };
    assert_eq!(e.reason(), Reason::RenderFailed);
    assert!(e.to_string().contains("scheduler"), "{e}");
}

#[test]
fn planning_is_deterministic_but_for_fresh_keys() {
    let prepared = crate::prepare(
        world(
            basic(),
            vec![cluster("c", 3, false), cluster("d", 1, false)],
        ),
        NOW,
    );
    let a = plan_prepared(prepared.clone(), NOW, &RenderOptions::default());
    let b = plan_prepared(prepared, NOW, &RenderOptions::default());
    assert_eq!(a.world, b.world);
    for (k, pa) in &a.clusters {
        let (ClusterPlan::Converge(ca), ClusterPlan::Converge(cb)) = (pa, &b.clusters[k]) else {
            panic!("{k}");
        };
        assert_eq!(ca.components, cb.components);
        assert_eq!(ca.etcd.members, cb.etcd.members);
        assert_eq!(ca.etcd.founders, cb.etcd.founders);
    }
    assert_eq!(
        a.world.components[&key("d-ingress")].key(),
        key("d-ingress")
    );
}
