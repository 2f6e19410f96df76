//! Property: writing any world, parsing the output and writing it again is a fixed point.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use time::OffsetDateTime;

use crate::cluster::{
    CertificateAuthorities, Cluster, ClusterNetworking, ClusterSpec, ClusterStatus, KubeApiServer,
    Vpn, VpnPeer,
};
use crate::common::{Certificate, Condition, ConditionStatus, KeyPair};
use crate::component::{
    Component, ComponentHostPortAllocation, ComponentRole, ComponentSpec, ComponentStatus,
};
use crate::hypervisor::{
    Hypervisor, HypervisorPortAllocation, HypervisorSpec, HypervisorStatus, LocalCriEndpoint,
    PortRange, RemoteCriEndpoint,
};
use crate::manifest::parse_manifests;
use crate::meta::{ObjectMeta, OwnerReference};
use crate::node_join_request::{NodeJoinRequest, NodeJoinRequestSpec, NodeJoinRequestStatus};
use crate::world::World;

/// Free text, including what YAML treats specially: `yes`, `~`, `1.0`, `: `, `#`, quotes,
/// leading and trailing spaces, newlines, non-ASCII.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,16}",
        "[a-z0-9 :#'\"\n-]{0,24}",
        Just("yes".to_string()),
        Just("~".to_string()),
        Just("1.0".to_string()),
        Just("null".to_string()),
        Just("True".to_string()),
        "\\PC{0,8}",
        "-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=]{1,40}\n-----END CERTIFICATE-----\n",
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,8}[a-z0-9]"
}

fn time() -> impl Strategy<Value = OffsetDateTime> {
    // Years 1970..2100, whole seconds or nanoseconds, and a few offsets.
    (
        0i64..4_102_444_800,
        prop_oneof![Just(0u32), 0u32..1_000_000_000],
        -12i8..=12,
    )
        .prop_map(|(secs, nanos, hours)| {
            let t = OffsetDateTime::from_unix_timestamp(secs)
                .unwrap()
                .replace_nanosecond(nanos)
                .unwrap();
            t.to_offset(time::UtcOffset::from_hms(hours, 0, 0).unwrap())
        })
}

fn meta(namespaced: bool) -> impl Strategy<Value = ObjectMeta> {
    (
        name(),
        if namespaced {
            option::of(name()).boxed()
        } else {
            Just(None).boxed()
        },
        btree_map(name(), text(), 0..3),
        btree_map("[a-z.]{1,10}/[a-z]{1,5}", text(), 0..2),
        option::of(time()),
        option::of(time()),
        option::of("[0-9]{1,6}"),
        vec(name(), 0..2),
        option::of(any::<i64>()),
        vec(
            (name(), name(), any::<Option<bool>>()).prop_map(|(kind, name, controller)| {
                OwnerReference {
                    api_version: "v1".into(),
                    kind,
                    name,
                    uid: "u".into(),
                    controller,
                    block_owner_deletion: None,
                }
            }),
            0..2,
        ),
        vec(
            (name(), any::<i32>(), any::<bool>()).prop_map(|(k, n, b)| {
                serde_json::json!({"manager": k, "fieldsV1": {"f:spec": {".": {}, "n": n, "b": b}}})
            }),
            0..2,
        ),
    )
        .prop_map(
            |(
                name,
                namespace,
                labels,
                annotations,
                creation_timestamp,
                deletion_timestamp,
                resource_version,
                finalizers,
                generation,
                owner_references,
                managed_fields,
            )| ObjectMeta {
                name,
                namespace,
                labels,
                annotations,
                creation_timestamp,
                deletion_timestamp,
                resource_version,
                finalizers,
                generation,
                owner_references,
                managed_fields,
                ..ObjectMeta::default()
            },
        )
}

fn certificate() -> impl Strategy<Value = Certificate> {
    (text(), text()).prop_map(|(certificate, private_key)| Certificate {
        certificate,
        private_key,
    })
}

fn conditions() -> impl Strategy<Value = Vec<Condition>> {
    vec(
        (
            name(),
            prop_oneof![
                Just(ConditionStatus::True),
                Just(ConditionStatus::False),
                Just(ConditionStatus::Unknown)
            ],
            text(),
            text(),
            option::of(time()),
            option::of(time()),
        )
            .prop_map(
                |(type_, status, reason, message, last_set_time, last_transition_time)| Condition {
                    type_,
                    status,
                    reason,
                    message,
                    last_set_time,
                    last_transition_time,
                },
            ),
        0..3,
    )
}

fn hypervisor() -> impl Strategy<Value = Hypervisor> {
    (
        meta(false),
        any::<bool>(),
        prop_oneof![
            text().prop_map(|p| (
                Some(LocalCriEndpoint {
                    cri_endpoint_path: p
                }),
                None
            )),
            (text(), text(), option::of(certificate())).prop_map(|(uri, ca, cert)| (
                None,
                Some(RemoteCriEndpoint {
                    cri_endpoint_uri: uri,
                    ca_certificate: ca,
                    client_certificate: cert,
                })
            )),
        ],
        text(),
        (any::<u32>(), any::<u32>()),
        vec(
            (name(), name(), name(), any::<u16>()).prop_map(|(cluster, ns, component, port)| {
                HypervisorPortAllocation {
                    cluster,
                    cluster_namespace: ns,
                    component,
                    port,
                }
            }),
            0..3,
        ),
        vec(any::<u16>(), 0..3),
        btree_map(
            name(),
            btree_map(
                name(),
                btree_map(name(), btree_map(text(), text(), 0..2), 0..2),
                0..2,
            ),
            0..2,
        ),
    )
        .prop_map(
            |(
                meta,
                public,
                (local, remote),
                ip,
                (low, high),
                allocated_ports,
                freed_ports,
                files,
            )| {
                let mut h = Hypervisor::new(
                    meta,
                    HypervisorSpec {
                        local_cri_endpoint: local,
                        remote_cri_endpoint: remote,
                        public,
                        ip_address: ip,
                        port_range: PortRange { low, high },
                        capacity: (low % 3 == 0).then(|| crate::HypervisorCapacity {
                            components: Some(high % 50),
                            cpu: (low % 2 == 0).then(|| "3500m".to_string()),
                            memory: Some("8Gi".to_string()),
                        }),
                        unschedulable: low % 5 == 0,
                        drain: low % 7 == 0,
                    },
                );
                h.status = HypervisorStatus {
                    allocated_ports,
                    freed_ports,
                    files,
                    conditions: Vec::new(),
                };
                h
            },
        )
}

fn cluster() -> impl Strategy<Value = Cluster> {
    (
        meta(true),
        (text(), option::of(any::<u32>()), vec(text(), 0..2)),
        (option::of(certificate()), option::of(certificate())),
        (any::<bool>(), text(), text(), text()),
        (
            text(),
            text(),
            option::of(any::<u8>()),
            option::of(any::<u8>()),
        ),
        option::of((text(), text())),
        (
            text(),
            btree_map(name(), text(), 0..2),
            btree_map(name(), certificate(), 0..2),
        ),
        vec((name(), text(), text(), text()), 0..2),
        conditions(),
    )
        .prop_map(
            |(
                meta,
                (kubernetes_version, control_plane_replicas, join_tokens),
                (api_server_client, ca),
                (enabled, cidr, private_key, public_key),
                (cluster_cidr, service_cidr, node_cidr_mask_size, node_cidr_mask_size_ipv6),
                join_key,
                (api_server_endpoint, storage_client_endpoints, client_certificates),
                peers,
                conditions,
            )| {
                let mut c = Cluster::new(
                    meta,
                    ClusterSpec {
                        kubernetes_version,
                        control_plane_replicas,
                        certificate_authorities: CertificateAuthorities {
                            api_server_client,
                            ..CertificateAuthorities::default()
                        },
                        api_server: KubeApiServer {
                            ca,
                            extra_sans: join_tokens.clone(),
                            service_account: None,
                            oidc: None,
                            oidc_issuers: Vec::new(),
                        },
                        join_key: join_key.map(|(public_key, private_key)| KeyPair {
                            public_key,
                            private_key,
                        }),
                        join_tokens,
                        vpn: Vpn {
                            enabled,
                            cidr,
                            private_key,
                            public_key,
                        },
                        networking: ClusterNetworking {
                            cluster_cidr,
                            service_cidr,
                            node_cidr_mask_size,
                            node_cidr_mask_size_ipv4: None,
                            node_cidr_mask_size_ipv6,
                        },
                        ..ClusterSpec::default()
                    },
                );
                c.status = ClusterStatus {
                    api_server_endpoint,
                    storage_client_endpoints,
                    client_certificates,
                    vpn_peers: peers
                        .into_iter()
                        .map(|(name, address, private_key, public_key)| VpnPeer {
                            name,
                            address,
                            private_key,
                            public_key,
                        })
                        .collect(),
                    conditions,
                    ..ClusterStatus::default()
                };
                c
            },
        )
}

fn component() -> impl Strategy<Value = Component> {
    (
        meta(true),
        name(),
        prop_oneof![
            Just(ComponentRole::ControlPlane),
            Just(ComponentRole::ControlPlaneIngress)
        ],
        option::of(name()),
        vec((name(), any::<u16>()), 0..3),
        btree_map(name(), certificate(), 0..2),
        btree_map(name(), text(), 0..2),
        conditions(),
    )
        .prop_map(
            |(
                meta,
                cluster,
                role,
                hypervisor,
                ports,
                server_certificates,
                input_endpoints,
                conditions,
            )| {
                let mut c = Component::new(
                    meta,
                    ComponentSpec {
                        cluster,
                        role,
                        hypervisor,
                    },
                );
                c.status = ComponentStatus {
                    allocated_host_ports: ports
                        .into_iter()
                        .map(|(name, port)| ComponentHostPortAllocation { name, port })
                        .collect(),
                    server_certificates,
                    input_endpoints,
                    conditions,
                    ..ComponentStatus::default()
                };
                c
            },
        )
}

fn node_join_request() -> impl Strategy<Value = NodeJoinRequest> {
    (meta(false), text(), vec(text(), 0..2), text(), conditions()).prop_map(
        |(meta, symmetric_key, extra_sans, kube_config, conditions)| {
            let mut r = NodeJoinRequest::new(
                meta,
                NodeJoinRequestSpec {
                    symmetric_key,
                    extra_sans,
                    ..NodeJoinRequestSpec::default()
                },
            );
            r.status = NodeJoinRequestStatus {
                kube_config,
                conditions,
                ..NodeJoinRequestStatus::default()
            };
            r
        },
    )
}

pub(crate) fn world() -> impl Strategy<Value = World> {
    (
        vec(hypervisor(), 0..3),
        vec(cluster(), 0..3),
        vec(component(), 0..3),
        vec(node_join_request(), 0..2),
    )
        .prop_map(|(hs, cs, ps, ns)| {
            let mut w = World::default();
            for o in hs {
                w.insert(o.into());
            }
            for o in cs {
                w.insert(o.into());
            }
            for o in ps {
                w.insert(o.into());
            }
            for o in ns {
                w.insert(o.into());
            }
            w
        })
}

/// Parses without validation: generated worlds need not be valid to round-trip.
fn reparse(text: &str) -> World {
    let mut w = World::default();
    for d in parse_manifests(text, "generated").unwrap() {
        assert!(w.insert(d.object).is_none());
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn write_parse_write_is_a_fixed_point(world in world()) {
        let first = world.to_yaml().unwrap();
        let reparsed = reparse(&first);
        prop_assert_eq!(&reparsed, &world, "output:\n{}", first);
        let second = reparsed.to_yaml().unwrap();
        prop_assert_eq!(first, second);
    }
}

#[test]
fn generated_maps_are_ordered() {
    // The property above relies on BTreeMap ordering for byte-identical output.
    let m: BTreeMap<String, String> = [("b".into(), "1".into()), ("a".into(), "2".into())].into();
    assert_eq!(serde_yaml_ng::to_string(&m).unwrap(), "a: '2'\nb: '1'\n");
}
