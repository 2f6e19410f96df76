#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;

use crate::testutil::{basic, cluster, hypervisor, shared_pki, without_issued, world};

use oi_api::{Hypervisor, validation::Reason};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);
const LATER: OffsetDateTime = datetime!(2026-11-23 03:00:00 UTC);

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("default", name)
}

fn ok(w: World) -> World {
    let p = prepare(w, NOW);
    assert_eq!(p.failures, BTreeMap::new());
    p.world
}

fn placement(w: &World) -> Vec<(String, Option<String>, bool)> {
    w.components
        .values()
        .map(|c| {
            (
                c.metadata.name.clone(),
                c.spec.hypervisor.clone(),
                c.metadata.is_being_deleted(),
            )
        })
        .collect()
}

fn host_ports(w: &World, component: &str) -> Vec<(String, u16)> {
    w.components[&key(component)]
        .status
        .allocated_host_ports
        .iter()
        .map(|p| (p.name.clone(), p.port))
        .collect()
}

fn hp(pairs: &[(&str, u16)]) -> Vec<(String, u16)> {
    pairs.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

#[test]
fn single_replica_cluster_is_fully_described() {
    let w = ok(world(basic(), vec![cluster("c1", 1, false)]));
    assert_eq!(
        placement(&w),
        vec![
            ("c1-control-plane-0".into(), Some("private-1".into()), false),
            ("c1-ingress".into(), Some("public-1".into()), false),
        ]
    );
    assert_eq!(
        host_ports(&w, "c1-control-plane-0"),
        hp(&[
            ("apiserver", 30000),
            ("etcd-client", 30001),
            ("etcd-peer", 30002)
        ])
    );
    assert_eq!(
        host_ports(&w, "c1-ingress"),
        hp(&[("apiserver", 40000), ("haproxy-runtime", 40001)])
    );
    let status = &w.clusters[&key("c1")].status;
    assert_eq!(status.api_server_endpoint, "https://192.0.2.1:40000");
    assert_eq!(status.vpn_server_endpoint, "");
    assert_eq!(
        status.storage_client_endpoints,
        BTreeMap::from([(
            "c1-control-plane-0".to_string(),
            "https://10.0.0.1:30001".to_string()
        )])
    );
    assert_eq!(
        status.storage_peer_endpoints,
        BTreeMap::from([(
            "c1-control-plane-0".to_string(),
            "https://10.0.0.1:30002".to_string()
        )])
    );
    let allocated: Vec<(String, String, String, u16)> = w.hypervisors
        [&ObjectKey::cluster_scoped("private-1")]
        .status
        .allocated_ports
        .iter()
        .map(|a| {
            (
                a.cluster_namespace.clone(),
                a.cluster.clone(),
                a.component.clone(),
                a.port,
            )
        })
        .collect();
    assert_eq!(
        allocated,
        vec![
            (
                "default".into(),
                "c1".into(),
                "c1-control-plane-0-apiserver".into(),
                30000
            ),
            (
                "default".into(),
                "c1".into(),
                "c1-control-plane-0-etcd-client".into(),
                30001
            ),
            (
                "default".into(),
                "c1".into(),
                "c1-control-plane-0-etcd-peer".into(),
                30002
            ),
        ]
    );
    // Components of the default namespace are written without one, like the input.
    assert_eq!(w.components[&key("c1-ingress")].metadata.namespace, None);
}

#[test]
fn namespaced_cluster_gets_namespaced_components() {
    let mut c = cluster("c1", 1, false);
    c.metadata.namespace = Some("team-a".into());
    let w = ok(world(basic(), vec![c]));
    let ingress = &w.components[&ObjectKey::new("team-a", "c1-ingress")];
    assert_eq!(ingress.metadata.namespace.as_deref(), Some("team-a"));
    let a = &w.hypervisors[&ObjectKey::cluster_scoped("public-1")]
        .status
        .allocated_ports[0];
    assert_eq!(
        (a.cluster_namespace.as_str(), a.component.as_str()),
        ("team-a", "c1-ingress-apiserver")
    );
}

#[test]
fn vpn_gets_a_wireguard_port_an_egress_proxy_port_and_endpoint() {
    let w = ok(world(basic(), vec![cluster("c1", 1, true)]));
    assert_eq!(
        host_ports(&w, "c1-ingress"),
        hp(&[
            ("apiserver", 40000),
            ("haproxy-runtime", 40001),
            ("vpn-proxy", 40002),
            ("wireguard", 40003)
        ])
    );
    assert_eq!(
        w.clusters[&key("c1")].status.vpn_server_endpoint,
        "192.0.2.1:40003"
    );
    // The proxy's serving certificate, for the ingress's address.
    let ingress = &w.components[&ObjectKey::new("default", "c1-ingress")];
    let proxy = &ingress.status.server_certificates[crate::render::certs::VPN_PROXY];
    assert_eq!(
        oi_pki::inspect_certificate(&proxy.certificate)
            .unwrap()
            .sans,
        ["192.0.2.1"]
    );
    // A world prepared before the proxy existed keeps its WireGuard port (workers know it).
    let mut old = w.clone();
    let hv = old
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped("public-1"))
        .unwrap();
    hv.status
        .allocated_ports
        .retain(|a| a.component != "c1-ingress-vpn-proxy");
    let ingress = old
        .components
        .get_mut(&ObjectKey::new("default", "c1-ingress"))
        .unwrap();
    ingress
        .status
        .allocated_host_ports
        .retain(|p| p.name != "vpn-proxy");
    let again = ok(old);
    let ports = host_ports(&again, "c1-ingress");
    assert!(
        ports.contains(&("wireguard".to_string(), 40003)),
        "{ports:?}"
    );
    assert!(ports.iter().any(|(n, _)| n == "vpn-proxy"), "{ports:?}");
    // Disabling it releases the ports.
    let mut w2 = w.clone();
    w2.clusters.get_mut(&key("c1")).unwrap().spec.vpn.enabled = false;
    let w2 = ok(w2);
    assert_eq!(
        host_ports(&w2, "c1-ingress"),
        hp(&[("apiserver", 40000), ("haproxy-runtime", 40001)])
    );
    assert_eq!(
        w2.hypervisors[&ObjectKey::cluster_scoped("public-1")]
            .status
            .freed_ports,
        vec![40002, 40003]
    );
    assert_eq!(w2.clusters[&key("c1")].status.vpn_server_endpoint, "");
}

#[test]
fn a_vpn_gets_its_wireguard_keys_once_and_a_given_private_key_its_public_key() {
    let mut fresh = cluster("c1", 1, true);
    fresh.spec.vpn.private_key.clear();
    fresh.spec.vpn.public_key.clear();
    let w = ok(world(basic(), vec![fresh, cluster("c2", 1, false)]));
    let vpn = &w.clusters[&key("c1")].spec.vpn;
    assert_ne!(vpn.private_key, cluster("c1", 1, true).spec.vpn.private_key);
    oi_pki::check_wireguard_keys(&vpn.private_key, &vpn.public_key).unwrap();
    assert!(!vpn.public_key.is_empty());
    assert_eq!(w.clusters[&key("c2")].spec.vpn.private_key, "");
    // Prepared again: kept.
    let again = ok(w.clone());
    assert_eq!(&again.clusters[&key("c1")].spec.vpn, vpn);
    // A private key given alone gets its public key.
    let mut given = w.clone();
    let (private, public) = oi_pki::generate_wireguard_keys();
    let spec = &mut given.clusters.get_mut(&key("c1")).unwrap().spec.vpn;
    spec.private_key = private;
    spec.public_key.clear();
    let given = ok(given);
    assert_eq!(given.clusters[&key("c1")].spec.vpn.public_key, public);
}

#[test]
fn replicas_spread_over_distinct_hypervisors_least_loaded_first() {
    let w = ok(world(
        basic(),
        vec![cluster("a", 1, false), cluster("b", 3, false)],
    ));
    assert_eq!(
        placement(&w)
            .into_iter()
            .filter(|(n, ..)| n.starts_with("b-control"))
            .map(|(_, h, _)| h.unwrap())
            .collect::<Vec<_>>(),
        // private-1 holds a's replica: b starts on the least loaded ones.
        vec!["private-2", "private-3", "private-1"]
    );
}

#[test]
fn replicas_spread_over_zones_before_reusing_one() {
    let hvs = vec![
        hypervisor("a1", false, "10.0.0.1", Some("zone-a"), (30000, 30099)),
        hypervisor("a2", false, "10.0.0.2", Some("zone-a"), (30000, 30099)),
        hypervisor("a3", false, "10.0.0.3", Some("zone-a"), (30000, 30099)),
        hypervisor("b1", false, "10.0.1.1", Some("zone-b"), (30000, 30099)),
        hypervisor("x", false, "10.0.2.1", None, (30000, 30099)),
        hypervisor("pub", true, "192.0.2.1", None, (40000, 40099)),
    ];
    let w = ok(world(hvs, vec![cluster("c", 4, false)]));
    let hosts: Vec<String> = placement(&w)
        .into_iter()
        .filter(|(n, ..)| n.starts_with("c-control"))
        .map(|(_, h, _)| h.unwrap())
        .collect();
    assert_eq!(hosts, vec!["a1", "b1", "x", "a2"]);
}

#[test]
fn placed_components_stay() {
    let mut w = world(basic(), vec![cluster("c1", 2, false)]);
    let mut placed = Component::new(
        ObjectMeta::named("c1-control-plane-0"),
        ComponentSpec {
            cluster: "c1".into(),
            role: ComponentRole::ControlPlane,
            hypervisor: Some("private-3".into()),
        },
    );
    placed.status.allocated_host_ports = vec![ComponentHostPortAllocation {
        name: "apiserver".into(),
        port: 30050,
    }];
    w.components.insert(placed.key(), placed);
    let w = ok(w);
    assert_eq!(
        placement(&w),
        vec![
            ("c1-control-plane-0".into(), Some("private-3".into()), false),
            ("c1-control-plane-1".into(), Some("private-1".into()), false),
            ("c1-ingress".into(), Some("public-1".into()), false),
        ]
    );
    // The port its status recorded (and the hypervisor lost) is claimed back.
    assert_eq!(
        host_ports(&w, "c1-control-plane-0"),
        hp(&[
            ("apiserver", 30050),
            ("etcd-client", 30000),
            ("etcd-peer", 30001)
        ])
    );
}

/// Scaling down keeps the replicas left as spread as they can be: the one sharing a
/// hypervisor goes, not simply the highest (the property test found the sequence below:
/// 2 → 1 → 2 → 3 → 2 replicas on two hypervisors left two replicas on one).
#[test]
fn scale_down_lets_a_replica_sharing_a_hypervisor_go_first() {
    let two = vec![
        hypervisor("private-1", false, "10.0.0.1", None, (30000, 30099)),
        hypervisor("private-2", false, "10.0.0.2", None, (30000, 30099)),
        hypervisor("public-1", true, "192.0.2.1", None, (40000, 40099)),
    ];
    let scale = |w: &mut World, n: u32| {
        w.clusters
            .get_mut(&key("c1"))
            .unwrap()
            .spec
            .control_plane_replicas = Some(n);
    };
    let live = |w: &World| -> Vec<(String, String)> {
        w.components
            .values()
            .filter(|c| {
                c.spec.role == ComponentRole::ControlPlane && !c.metadata.is_being_deleted()
            })
            .map(|c| {
                (
                    c.metadata.name.clone(),
                    c.spec.hypervisor.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    let mut w = ok(world(two, vec![cluster("c1", 2, false)]));
    scale(&mut w, 1);
    w = ok(w);
    scale(&mut w, 2);
    w = ok(w);
    let gone: Vec<ObjectKey> = w
        .components
        .iter()
        .filter(|(_, c)| c.metadata.is_being_deleted())
        .map(|(k, _)| k.clone())
        .collect();
    for k in gone {
        assert!(remove_component(&mut w, &k).is_some());
    }
    scale(&mut w, 3);
    w = ok(w);
    let three = live(&w);
    assert_eq!(three.len(), 3);
    // Two of the three share a hypervisor; the highest of those two goes.
    let shared: Vec<&(String, String)> = three
        .iter()
        .filter(|(_, h)| three.iter().filter(|(_, o)| o == h).count() == 2)
        .collect();
    assert_eq!(shared.len(), 2, "{three:?}");
    scale(&mut w, 2);
    w = ok(w);
    let left = live(&w);
    let hypervisors: BTreeSet<&String> = left.iter().map(|(_, h)| h).collect();
    assert_eq!(
        hypervisors.len(),
        2,
        "replicas left share a hypervisor: {left:?}"
    );
    let went: Vec<&(String, String)> = three.iter().filter(|r| !left.contains(r)).collect();
    assert_eq!(
        went,
        [shared.iter().max().copied().unwrap()],
        "{three:?} -> {left:?}"
    );
}

#[test]
fn scale_down_marks_highest_indexes_and_keeps_their_ports_until_removed() {
    let w = ok(world(basic(), vec![cluster("c1", 3, false)]));
    let mut down = w.clone();
    down.clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(1);
    let down = ok(down);
    assert_eq!(
        placement(&down),
        vec![
            ("c1-control-plane-0".into(), Some("private-1".into()), false),
            ("c1-control-plane-1".into(), Some("private-2".into()), true),
            ("c1-control-plane-2".into(), Some("private-3".into()), true),
            ("c1-ingress".into(), Some("public-1".into()), false),
        ]
    );
    assert_eq!(
        down.components[&key("c1-control-plane-2")]
            .metadata
            .deletion_timestamp,
        Some(NOW)
    );
    assert_eq!(
        host_ports(&down, "c1-control-plane-2"),
        host_ports(&w, "c1-control-plane-2")
    );
    assert_eq!(
        down.hypervisors[&ObjectKey::cluster_scoped("private-3")]
            .status
            .allocated_ports
            .len(),
        3
    );
    let status = &down.clusters[&key("c1")].status;
    assert_eq!(status.storage_client_endpoints.len(), 1);
    // Preparing again, later, changes nothing.
    assert_eq!(prepare(down.clone(), LATER).world, down);

    // The engine removed replica 2: its ports are freed and reused first.
    let mut removed = down.clone();
    assert!(remove_component(&mut removed, &key("c1-control-plane-2")).is_some());
    let h3 = &removed.hypervisors[&ObjectKey::cluster_scoped("private-3")].status;
    assert_eq!(h3.allocated_ports, vec![]);
    assert_eq!(h3.freed_ports, vec![30000, 30001, 30002]);
    // Scaling up again: index 1 is still taken by the replica being deleted.
    removed
        .clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(2);
    let up = ok(removed);
    assert_eq!(
        placement(&up)[2],
        ("c1-control-plane-2".into(), Some("private-3".into()), false)
    );
    assert_eq!(
        host_ports(&up, "c1-control-plane-2"),
        hp(&[
            ("apiserver", 30000),
            ("etcd-client", 30001),
            ("etcd-peer", 30002)
        ])
    );
    assert_eq!(
        up.hypervisors[&ObjectKey::cluster_scoped("private-3")]
            .status
            .freed_ports,
        Vec::<u16>::new()
    );
}

/// `status.etcdMember` of a component: its state and initial cluster, as `name=url` pairs.
fn etcd_start(w: &World, component: &str) -> Option<(EtcdInitialClusterState, Vec<String>)> {
    w.components[&key(component)]
        .status
        .etcd_member
        .as_ref()
        .map(|m| {
            (
                m.initial_cluster_state,
                m.initial_cluster
                    .iter()
                    .map(|(n, u)| format!("{n}={u}"))
                    .collect(),
            )
        })
}

#[test]
fn a_new_cluster_is_founded_by_all_its_replicas_and_later_ones_join_it() {
    use EtcdInitialClusterState::{Existing, New};
    let peer0 = "c1-control-plane-0=https://10.0.0.1:30002";
    let peer1 = "c1-control-plane-1=https://10.0.0.2:30002";
    let peer2 = "c1-control-plane-2=https://10.0.0.3:30002";
    let w = ok(world(basic(), vec![cluster("c1", 3, false)]));
    let founders = Some((New, vec![peer0.into(), peer1.into(), peer2.into()]));
    for i in 0..3 {
        assert_eq!(etcd_start(&w, &format!("c1-control-plane-{i}")), founders);
    }
    assert_eq!(etcd_start(&w, "c1-ingress"), None);

    // Scale to 1 (the engine removes the others), then back to 3: the founder keeps its
    // record; the new replicas join in order, each with the members at its time.
    let mut down = w.clone();
    down.clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(1);
    let mut down = ok(down);
    for i in [1, 2] {
        assert!(remove_component(&mut down, &key(&format!("c1-control-plane-{i}"))).is_some());
    }
    let mut up = ok(down);
    up.clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(3);
    let up = ok(up);
    assert_eq!(etcd_start(&up, "c1-control-plane-0"), founders);
    assert_eq!(
        etcd_start(&up, "c1-control-plane-1"),
        Some((Existing, vec![peer0.into(), peer1.into()]))
    );
    assert_eq!(
        etcd_start(&up, "c1-control-plane-2"),
        Some((Existing, vec![peer0.into(), peer1.into(), peer2.into()]))
    );

    // A replica removed by hand and replaced joins all the recorded members, whatever
    // their index.
    let mut hole = up.clone();
    assert!(remove_component(&mut hole, &key("c1-control-plane-1")).is_some());
    let hole = ok(hole);
    assert_eq!(
        etcd_start(&hole, "c1-control-plane-1"),
        Some((Existing, vec![peer0.into(), peer1.into(), peer2.into()]))
    );
    assert_eq!(
        etcd_start(&hole, "c1-control-plane-2"),
        etcd_start(&up, "c1-control-plane-2")
    );
}

#[test]
fn replicas_planned_before_etcd_records_are_recorded_as_they_were_started() {
    use EtcdInitialClusterState::{Existing, New};
    let mut w = ok(world(basic(), vec![cluster("c1", 3, false)]));
    for c in w.components.values_mut() {
        c.status.etcd_member = None;
    }
    let w = ok(w);
    let peer = |i: usize| format!("c1-control-plane-{i}=https://10.0.0.{}:30002", i + 1);
    assert_eq!(
        etcd_start(&w, "c1-control-plane-0"),
        Some((New, vec![peer(0)]))
    );
    assert_eq!(
        etcd_start(&w, "c1-control-plane-1"),
        Some((Existing, vec![peer(0), peer(1)]))
    );
    assert_eq!(
        etcd_start(&w, "c1-control-plane-2"),
        Some((Existing, vec![peer(0), peer(1), peer(2)]))
    );
}

#[test]
fn no_public_hypervisor_is_an_error_and_leaves_the_cluster_untouched() {
    let hvs = vec![hypervisor("p", false, "10.0.0.1", None, (30000, 30099))];
    let input = world(hvs, vec![cluster("c1", 1, false)]);
    let p = prepare(input.clone(), NOW);
    assert_eq!(
        p.failures,
        BTreeMap::from([(key("c1"), Error::NoPublicHypervisor { cluster: key("c1") })])
    );
    let mut expected = input;
    expected.apply_defaults();
    assert_eq!(p.world, expected);
    assert_eq!(
        Error::NoPublicHypervisor { cluster: key("c1") }.to_string(),
        "cluster default/c1 cannot be scheduled: there is no public hypervisor for its ingress"
    );
}

#[test]
fn no_private_hypervisor_is_an_error_other_clusters_proceed() {
    let hvs = vec![
        hypervisor("pub", true, "192.0.2.1", None, (40000, 40099)),
        hypervisor("priv", false, "10.0.0.1", None, (30000, 30002)),
    ];
    // `a` takes the only private hypervisor's three ports; `b` finds no room.
    let p = prepare(
        world(
            hvs.clone(),
            vec![cluster("a", 1, false), cluster("b", 1, false)],
        ),
        NOW,
    );
    assert_eq!(
        p.failures,
        BTreeMap::from([(
            key("b"),
            Error::NoCapacity {
                cluster: key("b"),
                role: ComponentRole::ControlPlane,
                missing: 1,
                hypervisors: "priv: 0 free ports, 3 needed".to_string(),
            }
        )])
    );
    assert_eq!(p.world.components.len(), 2);
    // b's ingress ports were rolled back: a's two remain.
    assert_eq!(
        p.world.hypervisors[&ObjectKey::cluster_scoped("pub")]
            .status
            .allocated_ports
            .len(),
        2
    );
    let p = prepare(
        world(vec![hvs[0].clone()], vec![cluster("a", 1, false)]),
        NOW,
    );
    assert_eq!(
        p.failures,
        BTreeMap::from([(key("a"), Error::NoPrivateHypervisor { cluster: key("a") })])
    );
    assert!(p.world.components.is_empty());
}

#[test]
fn exhausted_range_names_hypervisor_and_range_and_rolls_back() {
    let hvs = vec![
        hypervisor("pub", true, "192.0.2.1", None, (40000, 40001)),
        hypervisor("priv", false, "10.0.0.1", None, (30000, 30099)),
    ];
    let w = ok(world(hvs, vec![cluster("c1", 1, false)]));
    let mut vpn = w.clone();
    vpn.clusters.get_mut(&key("c1")).unwrap().spec.vpn.enabled = true;
    vpn.clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(2);
    let p = prepare(vpn.clone(), NOW);
    assert_eq!(
        p.failures,
        BTreeMap::from([(
            key("c1"),
            Error::PortRangeExhausted {
                hypervisor: "pub".into(),
                low: 40000,
                high: 40001
            }
        )])
    );
    // Nothing of the failed attempt remains: no second replica, no ports on priv.
    let mut expected = vpn;
    expected.apply_defaults();
    assert_eq!(p.world, expected);
}

#[test]
fn unknown_hypervisor_is_an_error() {
    let mut w = world(basic(), vec![cluster("c1", 1, false)]);
    let c = Component::new(
        ObjectMeta::named("c1-control-plane-0"),
        ComponentSpec {
            cluster: "c1".into(),
            role: ComponentRole::ControlPlane,
            hypervisor: Some("gone".into()),
        },
    );
    w.components.insert(c.key(), c);
    assert_eq!(
        prepare(w, NOW).failures[&key("c1")],
        Error::UnknownHypervisor {
            cluster: key("c1"),
            component: key("c1-control-plane-0"),
            hypervisor: "gone".into()
        }
    );
}

#[test]
fn invalid_cluster_is_reported_with_its_fields() {
    let mut c = cluster("c1", 1, false);
    c.spec.kubernetes_version = "1.2.3".into();
    let p = prepare(world(basic(), vec![c]), NOW);
    let Error::Invalid { object, errors } = &p.failures[&key("c1")] else {
        panic!("{:?}", p.failures);
    };
    assert_eq!(object, &key("c1"));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].field, "spec.kubernetesVersion");
    assert!(matches!(
        errors[0].reason,
        Reason::UnsupportedVersion { .. }
    ));
}

#[test]
fn cluster_being_deleted_is_not_expanded_and_remove_cluster_frees_its_ports() {
    let w = ok(world(
        basic(),
        vec![cluster("c1", 2, false), cluster("c2", 1, false)],
    ));
    let mut deleting = w.clone();
    deleting
        .clusters
        .get_mut(&key("c1"))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    deleting
        .clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .control_plane_replicas = Some(3);
    assert_eq!(ok(deleting.clone()), deleting);
    let fresh = world(
        basic(),
        vec![{
            let mut c = cluster("c1", 1, false);
            c.metadata.deletion_timestamp = Some(NOW);
            c
        }],
    );
    assert!(ok(fresh).components.is_empty());

    assert!(remove_cluster(&mut deleting, &key("c1")));
    assert!(!deleting.clusters.contains_key(&key("c1")));
    assert!(deleting.components.values().all(|c| c.spec.cluster == "c2"));
    let p1 = &deleting.hypervisors[&ObjectKey::cluster_scoped("private-1")].status;
    assert_eq!(p1.freed_ports, vec![30000, 30001, 30002]);
    assert!(p1.allocated_ports.is_empty());
    // c2's replica, placed on the least loaded private-3, keeps its ports.
    let p3 = &deleting.hypervisors[&ObjectKey::cluster_scoped("private-3")].status;
    assert_eq!(p3.allocated_ports.len(), 3);
    assert!(p3.allocated_ports.iter().all(|a| a.cluster == "c2"));
    assert!(!remove_cluster(&mut deleting, &key("c1")));
}

#[test]
fn missing_pki_is_generated_once_and_existing_kept() {
    let mut c = cluster("c1", 1, false);
    c.spec.certificate_authorities.etcd_peer = None;
    c.spec.api_server.service_account = None;
    let w = ok(world(basic(), vec![c]));
    let spec = &w.clusters[&key("c1")].spec;
    let peer = spec.certificate_authorities.etcd_peer.clone().unwrap();
    let info = oi_pki::inspect_certificate(&peer.certificate).unwrap();
    assert_eq!(info.common_name.as_deref(), Some("c1-etcd-peer-ca"));
    assert!(info.is_ca);
    assert!(
        spec.api_server
            .service_account
            .as_ref()
            .unwrap()
            .private_key
            .contains("PRIVATE KEY")
    );
    assert_eq!(
        spec.certificate_authorities
            .etcd_client
            .as_ref()
            .unwrap()
            .certificate,
        shared_pki().etcd_client.certificate_pem()
    );
    assert_eq!(
        spec.join_key.as_ref().unwrap().public_key,
        shared_pki().join_key.public_key_pem
    );
    // The replica's peer certificate is signed by the new etcd peer CA.
    let leaf = &w.components[&key("c1-control-plane-0")]
        .status
        .server_certificates["etcd-peer"];
    assert!(oi_pki::is_signed_by(&leaf.certificate, &peer.certificate).unwrap());
    // Generated material is kept on the next pass.
    assert_eq!(ok(w.clone()), w);
}

#[test]
fn leaf_certificates_are_issued_kept_and_renewed() {
    let w = ok(world(basic(), vec![cluster("c1", 1, false)]));
    let replica = &w.components[&key("c1-control-plane-0")].status;
    let mut names: Vec<&str> = replica
        .server_certificates
        .keys()
        .chain(replica.client_certificates.keys())
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        vec![
            "apiserver",
            "apiserver-etcd-client",
            "apiserver-kubelet-client",
            "controller-manager",
            "etcd-peer",
            "etcd-server",
            "scheduler"
        ]
    );
    let apiserver = &replica.server_certificates["apiserver"];
    let info = oi_pki::inspect_certificate(&apiserver.certificate).unwrap();
    // Reached directly and through the ingress (TCP passthrough).
    assert!(
        info.sans.contains(&"10.0.0.1".to_string()),
        "{:?}",
        info.sans
    );
    assert!(
        info.sans.contains(&"192.0.2.1".to_string()),
        "{:?}",
        info.sans
    );
    assert!(
        oi_pki::is_signed_by(
            &apiserver.certificate,
            shared_pki().api_server.certificate_pem()
        )
        .unwrap()
    );
    assert!(
        w.clusters[&key("c1")]
            .status
            .client_certificates
            .contains_key("admin")
    );

    // A new extra SAN reissues the API server certificate only.
    let mut sans = w.clone();
    sans.clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .api_server
        .extra_sans = vec!["api.example.com".into()];
    let sans = ok(sans);
    let after = &sans.components[&key("c1-control-plane-0")].status;
    assert_ne!(after.server_certificates["apiserver"], *apiserver);
    assert_eq!(
        after.server_certificates["etcd-peer"],
        replica.server_certificates["etcd-peer"]
    );
    assert_eq!(after.client_certificates, replica.client_certificates);

    // Eleven months later, every leaf (valid one year) is within 30 days of expiry.
    let later = prepare(w.clone(), NOW + Duration::days(340));
    assert!(later.failures.is_empty());
    let renewed = &later.world.components[&key("c1-control-plane-0")].status;
    for (name, cert) in &renewed.client_certificates {
        assert_ne!(cert, &replica.client_certificates[name], "{name}");
    }
}

#[test]
fn unusable_ca_fails_verification_and_the_cluster_is_left_as_it_was() {
    let mut c = cluster("c1", 1, false);
    c.spec.certificate_authorities.etcd_peer = Some(Certificate {
        certificate: "not a certificate".into(),
        private_key: "not a key".into(),
    });
    let p = prepare(
        world(basic(), vec![c.clone(), cluster("c2", 1, false)]),
        NOW,
    );
    let Error::Invalid { object, errors } = &p.failures[&key("c1")] else {
        panic!("{:?}", p.failures);
    };
    assert_eq!(object, &key("c1"));
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["spec.certificateAuthorities.etcdPeer.certificate"]);
    assert_eq!(p.failures.len(), 1);
    // Nothing of c1 was placed or allocated; c2 was prepared.
    let c1 = &p.world.clusters[&key("c1")];
    assert_eq!(c1.status, c.status);
    assert_eq!(
        c1.spec.certificate_authorities,
        c.spec.certificate_authorities
    );
    assert!(!p.world.components.contains_key(&key("c1-control-plane-0")));
    let c2 = &p.world.components[&key("c2-control-plane-0")];
    assert_eq!(c2.status.server_certificates.len(), 3);
}

#[test]
fn prepared_world_renders() {
    let w = ok(world(basic(), vec![cluster("c1", 3, true)]));
    for k in w.components.keys() {
        let r = crate::render::render_component(&w, k, &Default::default()).unwrap();
        assert!(!r.pods.is_empty() && !r.files.is_empty(), "{k}");
    }
}

// --- properties ---

#[derive(Debug, Clone)]
struct Shape {
    private: Vec<Option<u8>>,
    public: usize,
    clusters: Vec<(u32, bool)>,
    range_len: u32,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop::collection::vec(prop::option::of(0u8..3), 1..7),
        1usize..3,
        prop::collection::vec((1u32..6, any::<bool>()), 1..7),
        prop_oneof![Just(200u32), 6u32..30],
    )
        .prop_map(|(private, public, clusters, range_len)| Shape {
            private,
            public,
            clusters,
            range_len,
        })
}

fn build(s: &Shape) -> World {
    let mut hvs = Vec::new();
    for (i, zone) in s.private.iter().enumerate() {
        let z = zone.map(|z| format!("zone-{z}"));
        hvs.push(hypervisor(
            &format!("priv-{i}"),
            false,
            &format!("10.0.0.{i}"),
            z.as_deref(),
            (30000, 30000 + s.range_len - 1),
        ));
    }
    for i in 0..s.public {
        hvs.push(hypervisor(
            &format!("pub-{i}"),
            true,
            &format!("192.0.2.{i}"),
            None,
            (40000, 40000 + s.range_len - 1),
        ));
    }
    let clusters = s
        .clusters
        .iter()
        .enumerate()
        .map(|(i, (r, vpn))| cluster(&format!("c{i}"), *r, *vpn))
        .collect();
    world(hvs, clusters)
}

/// Invariants every prepared world holds.
fn check(
    w: &World,
    failures: &BTreeMap<ObjectKey, Error>,
) -> std::result::Result<(), TestCaseError> {
    for h in w.hypervisors.values() {
        let range = h.spec.port_range;
        let mut seen = BTreeSet::new();
        for a in &h.status.allocated_ports {
            prop_assert!(
                seen.insert(a.port),
                "port {} twice on {}",
                a.port,
                h.metadata.name
            );
            prop_assert!(range.contains(a.port));
        }
        for f in &h.status.freed_ports {
            prop_assert!(!seen.contains(f) && range.contains(*f));
        }
    }
    for c in w.components.values() {
        let hv = c.spec.hypervisor.as_ref().unwrap();
        let h = &w.hypervisors[&ObjectKey::cluster_scoped(hv.clone())];
        prop_assert_eq!(
            h.spec.public,
            c.spec.role == ComponentRole::ControlPlaneIngress
        );
        for p in &c.status.allocated_host_ports {
            let owner = format!("{}-{}", c.metadata.name, p.name);
            prop_assert!(
                h.status.allocated_ports.iter().any(|a| a.port == p.port
                    && a.component == owner
                    && a.cluster == c.spec.cluster),
                "{} {} not recorded on {}",
                owner,
                p.port,
                hv
            );
        }
    }
    let privates: Vec<&Hypervisor> = w.hypervisors.values().filter(|h| !h.spec.public).collect();
    let domains: BTreeSet<Domain<'_>> = privates
        .iter()
        .map(|h| {
            Domain::of(
                &h.metadata.name,
                h.metadata.labels.get(ZONE_LABEL).map(String::as_str),
            )
        })
        .collect();
    for (k, cl) in &w.clusters {
        if failures.contains_key(k) {
            continue;
        }
        let replicas: Vec<&Component> = w
            .components_of(k)
            .filter(|c| {
                c.spec.role == ComponentRole::ControlPlane && !c.metadata.is_being_deleted()
            })
            .collect();
        prop_assert_eq!(replicas.len() as u32, cl.control_plane_replicas());
        for c in &replicas {
            let record = c.status.etcd_member.as_ref();
            let peer = c.status.host_port(names::ETCD_PEER);
            let ip = &w.hypervisors[&ObjectKey::cluster_scoped(c.spec.hypervisor.clone().unwrap())]
                .spec
                .ip_address;
            let url = peer.map(|p| format!("https://{ip}:{p}"));
            prop_assert_eq!(
                record.and_then(|r| r.initial_cluster.get(&c.metadata.name)),
                url.as_ref(),
                "{} has no etcd record naming its peer URL",
                &c.metadata.name
            );
        }
        let used: BTreeSet<&str> = replicas
            .iter()
            .map(|c| c.spec.hypervisor.as_deref().unwrap())
            .collect();
        let enough_room = privates
            .iter()
            .all(|h| h.spec.port_range.high - h.spec.port_range.low >= 100);
        if enough_room {
            prop_assert_eq!(
                used.len(),
                replicas.len().min(privates.len()),
                "replicas share a hypervisor"
            );
            let used_domains: BTreeSet<Domain<'_>> = privates
                .iter()
                .filter(|h| used.contains(h.metadata.name.as_str()))
                .map(|h| {
                    Domain::of(
                        &h.metadata.name,
                        h.metadata.labels.get(ZONE_LABEL).map(String::as_str),
                    )
                })
                .collect();
            prop_assert_eq!(
                used_domains.len(),
                replicas.len().min(domains.len()),
                "replicas share a domain"
            );
        }
        prop_assert!(
            cl.status
                .api_server_endpoint
                .starts_with("https://192.0.2.")
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn prepare_is_deterministic_idempotent_and_consistent(s in shape()) {
        let w = build(&s);
        let first = prepare(w.clone(), NOW);
        let second = prepare(w, NOW);
        // Equal but for the freshly minted leaf keys and certificates.
        prop_assert_eq!(&first.failures, &second.failures);
        prop_assert_eq!(without_issued(&first.world), without_issued(&second.world));
        check(&first.world, &first.failures)?;
        if first.failures.is_empty() {
            let again = prepare(first.world.clone(), LATER);
            prop_assert_eq!(&again.world, &first.world);
            prop_assert!(again.failures.is_empty());
        }
    }

    #[test]
    fn rescaling_keeps_invariants(s in shape(), scales in prop::collection::vec((0usize..7, 1u32..6, any::<bool>()), 1..6)) {
        let mut w = prepare(build(&s), NOW).world;
        for (i, replicas, remove_deleted) in scales {
            let k = key(&format!("c{}", i % s.clusters.len()));
            w.clusters.get_mut(&k).unwrap().spec.control_plane_replicas = Some(replicas);
            let p = prepare(w.clone(), NOW);
            check(&p.world, &p.failures)?;
            for (k, before) in &w.components {
                if let (Some(old), Some(after)) = (&before.status.etcd_member, p.world.components.get(k)) {
                    prop_assert_eq!(Some(old), after.status.etcd_member.as_ref(), "{} changed its etcd record", k);
                }
            }
            w = p.world;
            if remove_deleted {
                let gone: Vec<ObjectKey> = w.components.iter().filter(|(_, c)| c.metadata.is_being_deleted()).map(|(k, _)| k.clone()).collect();
                for k in gone {
                    prop_assert!(remove_component(&mut w, &k).is_some());
                }
            }
            let again = prepare(w.clone(), LATER);
            if again.failures.is_empty() {
                let twice = prepare(again.world.clone(), LATER);
                prop_assert_eq!(twice.world, again.world);
            }
        }
    }
}

#[test]
fn replicas_sharing_a_hypervisor_beyond_what_quorum_can_lose_are_not_highly_available() {
    use crate::schedule::not_highly_available;
    let private = |n: usize| -> Vec<Hypervisor> {
        let mut hvs: Vec<Hypervisor> = (1..=n)
            .map(|i| {
                hypervisor(
                    &format!("private-{i}"),
                    false,
                    &format!("10.0.0.{i}"),
                    None,
                    (30000, 30099),
                )
            })
            .collect();
        hvs.push(hypervisor(
            "public-1",
            true,
            "192.0.2.1",
            None,
            (40000, 40099),
        ));
        hvs
    };
    let busiest = |hypervisors: usize, replicas: u32| {
        let w = ok(world(
            private(hypervisors),
            vec![cluster("c", replicas, false)],
        ));
        not_highly_available(&w)
            .into_iter()
            .map(|n| (n.cluster.to_string(), n.replicas, n.busiest, n.on_busiest))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        busiest(1, 3),
        [("default/c".to_string(), 3, "private-1".to_string(), 3)]
    );
    assert_eq!(
        busiest(2, 3),
        [("default/c".to_string(), 3, "private-1".to_string(), 2)]
    );
    assert_eq!(
        busiest(1, 2),
        [("default/c".to_string(), 2, "private-1".to_string(), 2)]
    );
    assert_eq!(busiest(3, 3), []);
    assert_eq!(busiest(2, 2), []);
    assert_eq!(
        busiest(3, 5),
        [],
        "2+2+1: losing 2 of 5 keeps a quorum of 3"
    );
    assert_eq!(busiest(1, 1), []);
}

#[test]
fn declared_capacity_is_never_exceeded_and_a_cluster_that_does_not_fit_is_refused_with_numbers() {
    let mut hvs = vec![
        hypervisor("pub", true, "192.0.2.1", None, (40000, 40099)),
        hypervisor("p1", false, "10.0.0.1", None, (30000, 30099)),
        hypervisor("p2", false, "10.0.0.2", None, (30000, 30099)),
        hypervisor("p3", false, "10.0.0.3", None, (30000, 30099)),
    ];
    // p1: one component; p2: CPU for two replicas (650m each); p3: memory for one (960Mi).
    hvs[1].spec.capacity = Some(oi_api::HypervisorCapacity {
        components: Some(1),
        ..Default::default()
    });
    hvs[2].spec.capacity = Some(oi_api::HypervisorCapacity {
        cpu: Some("1500m".into()),
        ..Default::default()
    });
    hvs[3].spec.capacity = Some(oi_api::HypervisorCapacity {
        memory: Some("1Gi".into()),
        ..Default::default()
    });
    // a: 3 replicas, one per hypervisor; b: 1 more fits (p2's CPU); c: 2 more do not.
    let p = prepare(
        world(
            hvs.clone(),
            vec![
                cluster("a", 3, false),
                cluster("b", 1, false),
                cluster("c", 2, false),
            ],
        ),
        NOW,
    );
    let on = |h: &str| {
        p.world
            .components
            .values()
            .filter(|c| {
                c.spec.hypervisor.as_deref() == Some(h)
                    && c.spec.role == ComponentRole::ControlPlane
            })
            .count()
    };
    assert_eq!((on("p1"), on("p2"), on("p3")), (1, 2, 1));
    let e = &p.failures[&key("c")];
    assert_eq!(
        e.to_string(),
        "cluster default/c cannot be scheduled: 2 more control-plane component(s) fit on no private hypervisor (p1: no room for another component; p2: 200m CPU left, 650m needed; p3: 64Mi memory left, 960Mi needed)"
    );
    // c is left as it was: nothing placed for it.
    assert!(p.world.components.values().all(|c| c.spec.cluster != "c"));
    // Preparing again changes nothing and still refuses c.
    let again = prepare(p.world.clone(), NOW);
    assert_eq!(again.world, p.world);
    assert!(again.failures.contains_key(&key("c")));
}

/// What a run that ended with `cluster` ready records, with `removed` torn down.
fn ran_ready(w: World, cluster: &str, removed: &[&str]) -> World {
    let mut result = crate::ClusterResult::new(&key(cluster));
    result.outcome.ready = true;
    result.outcome.reason = crate::Reason::Succeeded;
    result.removed = removed.iter().map(|c| key(c)).collect();
    crate::record(w, &BTreeMap::from([(key(cluster), result)]), NOW)
}

fn drained_condition(w: &World, cluster: &str) -> Option<(ConditionStatus, String, String)> {
    find_condition(
        &w.clusters[&key(cluster)].status.conditions,
        condition_types::DRAINED,
    )
    .map(|c| (c.status, c.reason.clone(), c.message.clone()))
}

fn drain(w: &mut World, hypervisor: &str) {
    w.hypervisors
        .get_mut(&ObjectKey::cluster_scoped(hypervisor))
        .unwrap()
        .spec
        .drain = true;
}

#[test]
fn a_drained_hypervisor_is_left_one_replica_at_a_time_each_after_its_replacement_joined() {
    let mut hvs = basic();
    hvs.push(hypervisor(
        "private-4",
        false,
        "10.0.0.4",
        None,
        (30000, 30099),
    ));
    hvs.push(hypervisor(
        "public-2",
        true,
        "192.0.2.2",
        None,
        (40000, 40099),
    ));
    let w = ran_ready(ok(world(hvs, vec![cluster("c1", 3, false)])), "c1", &[]);
    assert_eq!(placement(&w)[1].1.as_deref(), Some("private-2"));
    assert_eq!(drained_condition(&w, "c1"), None);
    let mut w = w;
    drain(&mut w, "private-2");

    // The replacement first, beside the replica it replaces.
    let moving = ok(w);
    assert_eq!(
        placement(&moving),
        vec![
            ("c1-control-plane-0".into(), Some("private-1".into()), false),
            ("c1-control-plane-1".into(), Some("private-2".into()), false),
            ("c1-control-plane-2".into(), Some("private-3".into()), false),
            ("c1-control-plane-3".into(), Some("private-4".into()), false),
            ("c1-ingress".into(), Some("public-1".into()), false),
        ]
    );
    assert_eq!(
        drained_condition(&moving, "c1"),
        Some((
            ConditionStatus::False,
            "Moving".into(),
            "c1-control-plane-1 leaves drained hypervisor private-2 once its replacement \
             c1-control-plane-3 on private-4 has joined"
                .into()
        ))
    );
    // It joins as a learner of the four members.
    assert_eq!(
        etcd_start(&moving, "c1-control-plane-3").unwrap().0,
        EtcdInitialClusterState::Existing
    );
    // Until a run was ready with it, nothing leaves.
    let waiting = prepare(moving.clone(), LATER).world;
    assert!(
        placement(&waiting).iter().all(|(_, _, deleted)| !deleted),
        "{:?}",
        placement(&waiting)
    );
    assert_eq!(drained_condition(&waiting, "c1").unwrap().1, "Waiting");
    // A run that ended not ready does not count either.
    let mut failed = crate::ClusterResult::new(&key("c1"));
    failed.outcome.reason = crate::Reason::EtcdNotReady;
    let not_ready = crate::record(moving.clone(), &BTreeMap::from([(key("c1"), failed)]), NOW);
    assert!(
        placement(&prepare(not_ready, LATER).world)
            .iter()
            .all(|(_, _, deleted)| !deleted)
    );

    // Joined: the replica on the drained hypervisor leaves.
    let leaving = prepare(ran_ready(moving, "c1", &[]), LATER).world;
    assert_eq!(
        placement(&leaving)[1],
        ("c1-control-plane-1".into(), Some("private-2".into()), true)
    );
    assert!(placement(&leaving).iter().filter(|p| p.2).count() == 1);
    assert_eq!(
        drained_condition(&leaving, "c1").unwrap().2,
        "c1-control-plane-1 leaves drained hypervisor private-2: its replacement joined"
    );
    // Gone: nothing of the cluster is left there, and that is said.
    let recorded = ran_ready(leaving, "c1", &["c1-control-plane-1"]);
    // Said as soon as the run that retired it is recorded.
    assert_eq!(
        drained_condition(&recorded, "c1"),
        Some((
            ConditionStatus::True,
            "Moved".into(),
            "nothing of the cluster runs on a drained hypervisor".into()
        ))
    );
    let done = prepare(recorded, LATER).world;
    assert!(
        done.components
            .values()
            .all(|c| c.spec.hypervisor.as_deref() != Some("private-2"))
    );
    assert_eq!(
        done.clusters[&key("c1")]
            .status
            .storage_peer_endpoints
            .len(),
        3
    );
    assert_eq!(
        drained_condition(&done, "c1").unwrap().0,
        ConditionStatus::True
    );
    assert_eq!(prepare(done.clone(), LATER).world, done);

    // The ingress's public hypervisor drained: it moves in one run, and the address with it.
    let mut w = done;
    drain(&mut w, "public-1");
    let moved = prepare(w, LATER).world;
    assert_eq!(
        placement(&moved)[3..],
        [
            ("c1-ingress".into(), Some("public-1".into()), true),
            ("c1-ingress-1".into(), Some("public-2".into()), false),
        ]
    );
    let status = &moved.clusters[&key("c1")].status;
    assert!(
        status.api_server_endpoint.starts_with("https://192.0.2.2:"),
        "{}",
        status.api_server_endpoint
    );
    assert!(drained_condition(&moved, "c1").unwrap().2.contains(
        "c1-ingress-1 replaces it on public-2, and the cluster's address becomes https://192.0.2.2:"
    ));
}

#[test]
fn a_drain_without_room_elsewhere_says_so_and_leaves_everything_running() {
    let mut hvs = basic();
    for h in &mut hvs[..3] {
        h.spec.capacity = Some(oi_api::HypervisorCapacity {
            components: Some(1),
            ..Default::default()
        });
    }
    let mut w = ran_ready(ok(world(hvs, vec![cluster("c1", 3, false)])), "c1", &[]);
    drain(&mut w, "private-3");
    let p = prepare(w.clone(), LATER);
    // The cluster is prepared (its certificates, its ports) all the same.
    assert_eq!(p.failures, BTreeMap::new());
    assert_eq!(placement(&p.world), placement(&w));
    let (status, reason, message) = drained_condition(&p.world, "c1").unwrap();
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "NoCapacity")
    );
    assert_eq!(
        message,
        "c1-control-plane-2 cannot leave drained hypervisor private-3 and keeps running there: \
         cluster default/c1 cannot be scheduled: 1 more control-plane component(s) fit on no \
         private hypervisor (private-1: no room for another component; private-2: no room for \
         another component; private-3: drained, no room for another component)"
    );
    // And nothing new lands on a drained hypervisor, even with room.
    let mut w = p.world;
    w.clusters.insert(key("c2"), cluster("c2", 1, false));
    for h in w.hypervisors.values_mut() {
        h.spec.capacity = None;
    }
    let p = prepare(w, LATER);
    assert!(
        p.world
            .components
            .values()
            .filter(|c| c.spec.cluster == "c2")
            .all(|c| c.spec.hypervisor.as_deref() != Some("private-3"))
    );
}

#[test]
fn api_servers_beyond_the_replicas_run_alone_behind_the_ingress() {
    let mut c = cluster("c1", 1, false);
    c.spec.api_server_replicas = Some(3);
    let w = ok(world(basic(), vec![c]));
    assert_eq!(
        placement(&w),
        vec![
            ("c1-apiserver-0".into(), Some("private-2".into()), false),
            ("c1-apiserver-1".into(), Some("private-3".into()), false),
            ("c1-control-plane-0".into(), Some("private-1".into()), false),
            ("c1-ingress".into(), Some("public-1".into()), false),
        ]
    );
    let alone = &w.components[&key("c1-apiserver-0")];
    assert_eq!(alone.spec.role, ComponentRole::ApiServer);
    assert_eq!(
        host_ports(&w, "c1-apiserver-0"),
        hp(&[("apiserver", 30000)])
    );
    assert_eq!(alone.status.etcd_member, None);
    assert_eq!(
        alone.status.server_certificates.keys().collect::<Vec<_>>(),
        ["apiserver"]
    );
    assert_eq!(
        alone.status.client_certificates.keys().collect::<Vec<_>>(),
        ["apiserver-etcd-client", "apiserver-kubelet-client"]
    );
    // Its serving certificate names its own address and the ingress's.
    let info =
        oi_pki::inspect_certificate(&alone.status.server_certificates["apiserver"].certificate)
            .unwrap();
    assert!(info.sans.iter().any(|s| s == "10.0.0.2"), "{:?}", info.sans);
    assert!(
        info.sans.iter().any(|s| s == "192.0.2.1"),
        "{:?}",
        info.sans
    );
    // Only kube-apiserver runs, against the replica's etcd, with only what it reads.
    let options = crate::render::RenderOptions::default();
    let r = crate::render::render_component(&w, &key("c1-apiserver-0"), &options).unwrap();
    assert_eq!(r.pods.len(), 1);
    assert_eq!(r.pods[0].name, "c1-apiserver-0");
    let containers: Vec<&str> = r.pods[0]
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(containers, ["kube-apiserver"]);
    let args = &r.pods[0].containers[0].args;
    assert!(
        args.contains(&"--etcd-servers=https://10.0.0.1:30001".to_string()),
        "{args:?}"
    );
    assert!(args.contains(&"--advertise-address=10.0.0.2".to_string()));
    let files: Vec<&str> = r
        .files
        .iter()
        .map(|f| f.path.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(
        files,
        [
            "apiserver-ca.crt",
            "apiserver-client-ca.crt",
            "apiserver-etcd-client.crt",
            "apiserver-etcd-client.key",
            "apiserver-kubelet-client.crt",
            "apiserver-kubelet-client.key",
            "apiserver.crt",
            "apiserver.key",
            "authentication-config.yaml",
            "etcd-server-ca.crt",
            "sa.key",
            "sa.pub",
        ]
    );
    // The ingress balances all three.
    let ingress = crate::render::render_component(&w, &key("c1-ingress"), &options).unwrap();
    let cfg = ingress
        .files
        .iter()
        .find(|f| f.path.ends_with("haproxy.cfg"))
        .unwrap();
    let cfg = String::from_utf8_lossy(&cfg.content);
    for server in [
        "server c1-apiserver-0 10.0.0.2:30000",
        "server c1-apiserver-1 10.0.0.3:30000",
        "server c1-control-plane-0 10.0.0.1:30000",
    ] {
        assert!(cfg.contains(server), "{server} in\n{cfg}");
    }
    assert_eq!(prepare(w.clone(), LATER).world.components, w.components);

    // Fewer: the highest goes; as many as the replicas: none alone.
    let mut down = w.clone();
    down.clusters
        .get_mut(&key("c1"))
        .unwrap()
        .spec
        .api_server_replicas = Some(2);
    let down = ok(down);
    assert_eq!(
        placement(&down)[1],
        ("c1-apiserver-1".into(), Some("private-3".into()), true)
    );
    assert!(!placement(&down)[0].2);

    // Drained: it goes and its replacement starts elsewhere, in one pass.
    let mut drained = w;
    drain(&mut drained, "private-2");
    let drained = ok(drained);
    let moved: Vec<_> = placement(&drained)
        .into_iter()
        .filter(|(n, _, _)| n.contains("apiserver"))
        .collect();
    assert_eq!(
        moved,
        vec![
            ("c1-apiserver-0".into(), Some("private-2".into()), true),
            ("c1-apiserver-1".into(), Some("private-3".into()), false),
            ("c1-apiserver-2".into(), Some("private-1".into()), false),
        ]
    );
    assert_eq!(
        drained_condition(&drained, "c1").unwrap().2,
        "c1-apiserver-0 leaves drained hypervisor private-2; c1-apiserver-2 replaces it on private-1"
    );
}

fn ha_cluster(name: &str, vip: &str) -> Cluster {
    let mut c = cluster(name, 1, true);
    c.spec.ingress = Some(oi_api::ClusterIngress {
        replicas: Some(2),
        virtual_ip: vip.into(),
        virtual_router_id: None,
    });
    c
}

#[test]
fn ingresses_sharing_an_address_are_apart_on_the_same_ports_and_the_address_is_the_clusters() {
    let mut hvs = basic();
    let mut public2 = hypervisor("public-2", true, "192.0.2.2", None, (40000, 40099));
    // Port 40000 is another cluster's on public-2 only: the shared ports avoid it.
    public2
        .status
        .allocated_ports
        .push(oi_api::HypervisorPortAllocation {
            cluster: "other".into(),
            cluster_namespace: "default".into(),
            component: "other-ingress/apiserver".into(),
            port: 40000,
        });
    hvs.push(public2);
    let w = ok(world(hvs.clone(), vec![ha_cluster("c1", "192.0.2.100")]));
    assert_eq!(
        placement(&w)[1..],
        [
            ("c1-ingress".into(), Some("public-1".into()), false),
            ("c1-ingress-1".into(), Some("public-2".into()), false),
        ]
    );
    let ports = hp(&[
        ("apiserver", 40001),
        ("haproxy-runtime", 40002),
        ("vpn-proxy", 40003),
        ("wireguard", 40004),
    ]);
    assert_eq!(host_ports(&w, "c1-ingress"), ports);
    assert_eq!(host_ports(&w, "c1-ingress-1"), ports);
    let status = &w.clusters[&key("c1")].status;
    assert_eq!(status.api_server_endpoint, "https://192.0.2.100:40001");
    assert_eq!(status.vpn_server_endpoint, "192.0.2.100:40004");
    // The API servers answer to the shared address and to each ingress's.
    let replica = &w.components[&key("c1-control-plane-0")];
    let sans =
        oi_pki::inspect_certificate(&replica.status.server_certificates["apiserver"].certificate)
            .unwrap()
            .sans;
    for ip in ["192.0.2.1", "192.0.2.2", "192.0.2.100"] {
        assert!(sans.iter().any(|s| s == ip), "{ip} in {sans:?}");
    }
    // Each ingress runs keepalived, unicast to the other, the first one by name first.
    let options = crate::render::RenderOptions::default();
    let vrrp = |name: &str| {
        let r = crate::render::render_component(&w, &key(name), &options).unwrap();
        let pod = r
            .pods
            .iter()
            .find(|p| p.name == format!("{name}-vrrp"))
            .unwrap();
        assert!(pod.containers[0].privileged);
        let cfg = r
            .files
            .iter()
            .find(|f| f.path.ends_with("/keepalived.conf"))
            .unwrap();
        String::from_utf8(cfg.content.clone()).unwrap()
    };
    let first = vrrp("c1-ingress");
    for line in [
        "  virtual_router_id 100\n",
        "  priority 150\n",
        "  unicast_src_ip 192.0.2.1\n",
        "  unicast_peer {\n    192.0.2.2\n  }\n",
        "    192.0.2.100/32 dev @INTERFACE@\n",
        "  nopreempt\n",
    ] {
        assert!(first.contains(line), "{line:?} in\n{first}");
    }
    // Its VPN endpoint's egress proxy answers at the shared address too.
    let r = crate::render::render_component(&w, &key("c1-ingress"), &options).unwrap();
    let vpn_args = &r
        .pods
        .iter()
        .find(|p| p.name.ends_with("-vpn"))
        .unwrap()
        .containers[0]
        .args;
    assert!(
        vpn_args.contains(&"--proxy-listen=0.0.0.0:40003".to_string()),
        "{vpn_args:?}"
    );
    let second = vrrp("c1-ingress-1");
    assert!(second.contains("  priority 140\n"), "{second}");
    assert!(
        second.contains("  unicast_peer {\n    192.0.2.1\n  }\n"),
        "{second}"
    );
    // The API servers reach the VPN's egress proxy at the shared address too.
    let cp = crate::render::render_component(&w, &key("c1-control-plane-0"), &options).unwrap();
    let egress = cp
        .files
        .iter()
        .find(|f| f.path.ends_with(crate::render::EGRESS_SELECTOR))
        .unwrap();
    assert!(
        String::from_utf8_lossy(&egress.content).contains("url: https://192.0.2.100:40003"),
        "{}",
        String::from_utf8_lossy(&egress.content)
    );
    assert_eq!(prepare(w.clone(), LATER).world.components, w.components);

    // One public hypervisor cannot hold two.
    let p = prepare(world(basic(), vec![ha_cluster("c1", "192.0.2.100")]), NOW);
    assert_eq!(
        p.failures[&key("c1")].to_string(),
        "cluster default/c1 cannot be scheduled: its 2 ingresses need a public hypervisor each, and only 1 can take one"
    );
    // An address is one cluster's, and no hypervisor's; so is a router ID.
    let mut taken_vrid = ha_cluster("c4", "192.0.2.200");
    taken_vrid.spec.ingress.as_mut().unwrap().virtual_ip = "198.51.100.100".into();
    let p = prepare(
        world(
            hvs,
            vec![
                ha_cluster("c1", "192.0.2.100"),
                ha_cluster("c2", "192.0.2.100"),
                ha_cluster("c3", "192.0.2.1"),
                taken_vrid,
            ],
        ),
        NOW,
    );
    assert!(!p.failures.contains_key(&key("c1")));
    assert_eq!(
        p.failures[&key("c2")].to_string(),
        "cluster default/c2: spec.ingress.virtualIP 192.0.2.100 is also cluster default/c1's"
    );
    assert_eq!(
        p.failures[&key("c3")].to_string(),
        "cluster default/c3: spec.ingress.virtualIP 192.0.2.1 is also the address of hypervisor public-1"
    );
    assert_eq!(
        p.failures[&key("c4")].to_string(),
        "cluster default/c4: spec.ingress.virtualRouterID 100 is also cluster default/c1's (the last byte of virtualIP when absent): set spec.ingress.virtualRouterID to one of its own"
    );
}

fn healed_condition(w: &World, cluster: &str) -> Option<(ConditionStatus, String, String)> {
    find_condition(
        &w.clusters[&key(cluster)].status.conditions,
        condition_types::HEALED,
    )
    .map(|c| (c.status, c.reason.clone(), c.message.clone()))
}

fn with_private_4() -> Vec<Hypervisor> {
    let mut hvs = basic();
    hvs.push(hypervisor(
        "private-4",
        false,
        "10.0.0.4",
        None,
        (30000, 30099),
    ));
    hvs
}

#[test]
fn what_runs_on_a_removed_hypervisor_is_replaced_at_once_elsewhere() {
    let w = ok(world(with_private_4(), vec![cluster("c", 3, false)]));
    let w = ran_ready(w, "c", &[]);
    let on = |w: &World, c: &str| w.components[&key(c)].spec.hypervisor.clone().unwrap();
    let lost = on(&w, "c-control-plane-1");
    let mut removed = w.clone();
    removed
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped(lost.clone()))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    let p = prepare(removed, LATER);
    assert_eq!(p.failures, BTreeMap::new());
    assert_eq!(
        p.lost,
        BTreeMap::from([(lost.clone(), oi_api::hypervisor::Lost::Removed)])
    );
    let w = p.world;
    // The replica there goes at once (no waiting for the cluster, unlike a drain), and a
    // replacement is placed on the hypervisor that holds none.
    assert!(
        w.components[&key("c-control-plane-1")]
            .metadata
            .is_being_deleted()
    );
    assert_eq!(on(&w, "c-control-plane-3"), "private-4");
    assert!(
        !w.components[&key("c-control-plane-3")]
            .metadata
            .is_being_deleted()
    );
    assert_eq!(
        healed_condition(&w, "c"),
        Some((
            ConditionStatus::False,
            "Replacing".into(),
            format!(
                "lost: c-control-plane-1 on {lost} (removed); replaced by: c-control-plane-3 on \
                 private-4"
            )
        ))
    );
    // Its etcd start names the replicas that stay, not the lost one.
    let (state, initial) = etcd_start(&w, "c-control-plane-3").unwrap();
    assert_eq!(state, EtcdInitialClusterState::Existing);
    assert_eq!(
        initial,
        [
            "c-control-plane-0=https://10.0.0.1:30002",
            "c-control-plane-2=https://10.0.0.3:30002",
            "c-control-plane-3=https://10.0.0.4:30002"
        ]
    );
    // The run that retired it: healed, and the hypervisor can be forgotten.
    let mut w = ran_ready(w, "c", &["c-control-plane-1"]);
    assert_eq!(
        healed_condition(&w, "c").map(|c| (c.0, c.1)),
        Some((ConditionStatus::True, "Replaced".into()))
    );
    assert_eq!(
        forget_removed_hypervisors(&mut w),
        std::slice::from_ref(&lost)
    );
    assert!(!w.hypervisors.contains_key(&ObjectKey::cluster_scoped(lost)));
    // A later pass keeps the condition as it is.
    let again = prepare(w.clone(), LATER).world;
    assert_eq!(healed_condition(&again, "c"), healed_condition(&w, "c"));
}

#[test]
fn a_hypervisor_unreachable_past_the_grace_period_is_lost_only_when_asked() {
    let w = ok(world(with_private_4(), vec![cluster("c", 3, false)]));
    let mut w = ran_ready(w, "c", &[]);
    let lost = w.components[&key("c-control-plane-0")]
        .spec
        .hypervisor
        .clone()
        .unwrap();
    set_condition(
        &mut w
            .hypervisors
            .get_mut(&ObjectKey::cluster_scoped(lost.clone()))
            .unwrap()
            .status
            .conditions,
        condition_types::REACHABLE,
        ConditionStatus::False,
        "Unreachable",
        "connection refused",
        NOW,
    );
    // Off by default: nothing moves.
    let p = prepare(w.clone(), LATER);
    assert!(p.lost.is_empty());
    assert_eq!(placement(&p.world), placement(&w));
    // Within the grace period: nothing moves either.
    let options = |grace| PrepareOptions {
        replace_unreachable_after: Some(grace),
        ..PrepareOptions::default()
    };
    let p = prepare_with(w.clone(), LATER, &options(Duration::days(2)));
    assert!(p.lost.is_empty());
    assert_eq!(placement(&p.world), placement(&w));
    // Past it: replaced.
    let p = prepare_with(w.clone(), LATER, &options(Duration::hours(1)));
    assert_eq!(
        p.lost,
        BTreeMap::from([(
            lost.clone(),
            oi_api::hypervisor::Lost::Unreachable { since: NOW }
        )])
    );
    assert!(
        p.world.components[&key("c-control-plane-0")]
            .metadata
            .is_being_deleted()
    );
    let (_, _, message) = healed_condition(&p.world, "c").unwrap();
    assert!(
        message.starts_with(&format!(
            "lost: c-control-plane-0 on {lost} (unreachable since 2026-11-22T03:00:00Z)"
        )),
        "{message}"
    );
    // The run that joined the replacement left the component retiring (its pods wait on the
    // unreachable hypervisor): healed all the same, and a later pass keeps it so.
    let w = ran_ready(p.world, "c", &[]);
    assert_eq!(
        healed_condition(&w, "c").map(|c| (c.0, c.1)),
        Some((ConditionStatus::True, "Replaced".into()))
    );
    assert!(
        w.components[&key("c-control-plane-0")]
            .metadata
            .is_being_deleted()
    );
    let again = prepare_with(w.clone(), LATER, &options(Duration::hours(1))).world;
    assert_eq!(healed_condition(&again, "c"), healed_condition(&w, "c"));
}
