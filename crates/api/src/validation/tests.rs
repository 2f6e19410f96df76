use pretty_assertions::assert_eq;

use super::*;
use crate::manifest::parse_manifests;
use crate::world::World;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/// A valid hypervisor document with `spec` replaced by the given YAML (indented by 2).
fn hypervisor(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

const LOCAL: &str = "  public: false\n  ipAddress: 192.0.2.10\n  portRange: {low: 30000, high: 30099}\n  localCRIEndpoint: {criEndpointPath: /run/containerd.sock}\n";

fn cluster(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// Validation errors of one input, which must parse.
fn errors(text: &str) -> Vec<ValidationError> {
    validate_documents(&parse_manifests(text, "in.yaml").unwrap())
}

fn error(
    position: usize,
    kind: Kind,
    key: ObjectKey,
    field: &str,
    reason: Reason,
) -> ValidationError {
    ValidationError {
        source_name: "in.yaml".into(),
        position,
        kind,
        object: key,
        field: field.into(),
        reason,
    }
}

fn hv_error(name: &str, field: &str, reason: Reason) -> ValidationError {
    error(
        1,
        Kind::Hypervisor,
        ObjectKey::cluster_scoped(name),
        field,
        reason,
    )
}

fn cluster_error(name: &str, field: &str, reason: Reason) -> ValidationError {
    error(
        1,
        Kind::Cluster,
        ObjectKey::new("default", name),
        field,
        reason,
    )
}

#[test]
fn valid_hypervisors_pass() {
    assert_eq!(errors(&hypervisor("h1", LOCAL)), []);
    let remote = format!(
        "  public: true\n  ipAddress: 2001:db8::1\n  portRange: {{low: 1, high: 65535}}\n  remoteCRIEndpoint:\n    criEndpointURI: tcp://[2001:db8::1]:27000\n    caCertificate: {CA:?}\n    clientCertificate: {{certificate: {CA:?}, privateKey: k}}\n"
    );
    assert_eq!(errors(&hypervisor("hv.example.com", &remote)), []);
}

#[test]
fn both_cri_endpoints() {
    let spec = format!(
        "{LOCAL}  remoteCRIEndpoint:\n    criEndpointURI: tcp://192.0.2.10:27000\n    caCertificate: {CA:?}\n    clientCertificate: {{certificate: c, privateKey: k}}\n"
    );
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [hv_error("h1", "spec", Reason::BothCriEndpoints)]
    );
}

#[test]
fn neither_cri_endpoint() {
    let spec = "  public: false\n  ipAddress: 192.0.2.10\n  portRange: {low: 30000, high: 30099}\n";
    assert_eq!(
        errors(&hypervisor("h1", spec)),
        [hv_error("h1", "spec", Reason::NoCriEndpoint)]
    );
}

#[test]
fn incomplete_cri_endpoints() {
    let spec = "  public: true\n  ipAddress: 192.0.2.10\n  portRange: {low: 30000, high: 30099}\n  remoteCRIEndpoint:\n    criEndpointURI: tcp://192.0.2.10:27000\n";
    assert_eq!(
        errors(&hypervisor("h1", spec)),
        [
            hv_error(
                "h1",
                "spec.remoteCRIEndpoint.caCertificate",
                Reason::Required
            ),
            hv_error(
                "h1",
                "spec.remoteCRIEndpoint.clientCertificate",
                Reason::Required
            ),
        ]
    );
    let spec = format!(
        "  public: true\n  ipAddress: 192.0.2.10\n  portRange: {{low: 30000, high: 30099}}\n  remoteCRIEndpoint:\n    caCertificate: {CA:?}\n    clientCertificate: {{certificate: c}}\n"
    );
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [
            hv_error(
                "h1",
                "spec.remoteCRIEndpoint.criEndpointURI",
                Reason::Required
            ),
            hv_error(
                "h1",
                "spec.remoteCRIEndpoint.clientCertificate.privateKey",
                Reason::Required
            ),
        ]
    );
    let spec = "  public: false\n  ipAddress: 192.0.2.10\n  portRange: {low: 30000, high: 30099}\n  localCRIEndpoint: {}\n";
    assert_eq!(
        errors(&hypervisor("h1", spec)),
        [hv_error(
            "h1",
            "spec.localCRIEndpoint.criEndpointPath",
            Reason::Required
        )]
    );
}

#[test]
fn inverted_port_range() {
    let spec = LOCAL.replace("{low: 30000, high: 30099}", "{low: 30099, high: 30000}");
    let errs = errors(&hypervisor("h1", &spec));
    assert_eq!(
        errs,
        [hv_error(
            "h1",
            "spec.portRange",
            Reason::PortRangeInverted {
                low: 30099,
                high: 30000
            }
        )]
    );
    assert_eq!(
        errs[0].to_string(),
        "in.yaml: document 1: Hypervisor h1: field `spec.portRange`: low port 30099 is above high port 30000"
    );
}

#[test]
fn ports_out_of_range() {
    let spec = LOCAL.replace("{low: 30000, high: 30099}", "{low: 0, high: 70000}");
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [
            hv_error(
                "h1",
                "spec.portRange.low",
                Reason::PortOutOfRange { port: 0 }
            ),
            hv_error(
                "h1",
                "spec.portRange.high",
                Reason::PortOutOfRange { port: 70000 }
            ),
        ]
    );
    // A missing range is a zero range.
    let spec = LOCAL.replace("  portRange: {low: 30000, high: 30099}\n", "");
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [
            hv_error(
                "h1",
                "spec.portRange.low",
                Reason::PortOutOfRange { port: 0 }
            ),
            hv_error(
                "h1",
                "spec.portRange.high",
                Reason::PortOutOfRange { port: 0 }
            ),
        ]
    );
}

#[test]
fn bad_ip_address() {
    let spec = LOCAL.replace("192.0.2.10", "192.0.2.300");
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [hv_error(
            "h1",
            "spec.ipAddress",
            Reason::InvalidIp {
                value: "192.0.2.300".into()
            }
        )]
    );
    let spec = LOCAL.replace("  ipAddress: 192.0.2.10\n", "");
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [hv_error("h1", "spec.ipAddress", Reason::Required)]
    );
}

#[test]
fn bad_hypervisor_name_and_namespace() {
    let text = hypervisor("Bad_Name", LOCAL)
        .replace("  name: Bad_Name\n", "  name: Bad_Name\n  namespace: x\n");
    assert_eq!(
        errors(&text),
        [
            hv_error(
                "Bad_Name",
                "metadata.name",
                Reason::InvalidName {
                    value: "Bad_Name".into(),
                    rule: NameRule::Dns1123Subdomain
                }
            ),
            hv_error(
                "Bad_Name",
                "metadata.namespace",
                Reason::NamespaceNotAllowed {
                    kind: Kind::Hypervisor,
                    namespace: "x".into()
                }
            ),
        ]
    );
}

#[test]
fn valid_clusters_pass() {
    assert_eq!(errors(&cluster("c", "  kubernetesVersion: default\n")), []);
    assert_eq!(
        errors(&cluster(
            "c",
            "  kubernetesVersion: v1.35.9\n  controlPlaneReplicas: 3\n  vpn: {enabled: true, CIDR: 10.1.0.0/16}\n  networking: {clusterCIDR: 'fd00::/48', serviceCIDR: 10.96.0.0/12, nodeCIDRMaskSize: 64}\n"
        )),
        []
    );
}

#[test]
fn zero_replicas() {
    assert_eq!(
        errors(&cluster("c", "  controlPlaneReplicas: 0\n")),
        [cluster_error(
            "c",
            "spec.controlPlaneReplicas",
            Reason::InvalidReplicas { replicas: 0 }
        )]
    );
}

#[test]
fn api_servers_are_at_least_the_replicas_and_at_most_the_maximum() {
    assert_eq!(
        errors(&cluster(
            "c",
            "  controlPlaneReplicas: 3\n  apiServerReplicas: 2\n"
        )),
        [cluster_error(
            "c",
            "spec.apiServerReplicas",
            Reason::FewerApiServersThanReplicas {
                api_servers: 2,
                replicas: 3
            }
        )]
    );
    let errs = errors(&cluster("c", "  apiServerReplicas: 33\n"));
    assert_eq!(
        errs,
        [cluster_error(
            "c",
            "spec.apiServerReplicas",
            Reason::TooManyApiServers {
                api_servers: 33,
                max: 32
            }
        )]
    );
    assert!(
        errs[0].to_string().ends_with("33 API servers; at most 32"),
        "{}",
        errs[0]
    );
    // As many as the replicas, or more: valid.
    assert_eq!(errors(&cluster("c", "  apiServerReplicas: 1\n")), []);
    assert_eq!(
        errors(&cluster(
            "c",
            "  controlPlaneReplicas: 3\n  apiServerReplicas: 7\n"
        )),
        []
    );
}

#[test]
fn unsupported_version_lists_supported_ones() {
    let errs = errors(&cluster("c", "  kubernetesVersion: 1.20.0\n"));
    assert_eq!(
        errs,
        [cluster_error(
            "c",
            "spec.kubernetesVersion",
            Reason::UnsupportedVersion {
                version: "1.20.0".into(),
                supported: vec!["1.35.9".into(), "1.36.4".into(), "1.37.1".into()],
            }
        )]
    );
    assert!(
        errs[0].to_string().ends_with(
            "unsupported Kubernetes version \"1.20.0\"; supported: 1.35.9, 1.36.4, 1.37.1"
        ),
        "{}",
        errs[0]
    );
}

#[test]
fn bad_cidrs() {
    assert_eq!(
        errors(&cluster(
            "c",
            "  vpn: {enabled: true, CIDR: 10.0.0.0/33}\n  networking: {clusterCIDR: 10.244.0.0, serviceCIDR: banana}\n"
        )),
        [
            cluster_error(
                "c",
                "spec.networking.clusterCIDR",
                Reason::InvalidCidr {
                    value: "10.244.0.0".into()
                }
            ),
            cluster_error(
                "c",
                "spec.networking.serviceCIDR",
                Reason::InvalidCidr {
                    value: "banana".into()
                }
            ),
            cluster_error(
                "c",
                "spec.vpn.CIDR",
                Reason::InvalidCidr {
                    value: "10.0.0.0/33".into()
                }
            ),
        ]
    );
}

#[test]
fn node_mask_must_fit_cluster_cidr() {
    assert_eq!(
        errors(&cluster(
            "c",
            "  networking: {clusterCIDR: 10.244.0.0/16, nodeCIDRMaskSize: 8, nodeCIDRMaskSizeIPv6: 129}\n"
        )),
        [
            cluster_error(
                "c",
                "spec.networking.nodeCIDRMaskSize",
                Reason::InvalidMaskSize {
                    size: 8,
                    min: 16,
                    max: 32
                }
            ),
            cluster_error(
                "c",
                "spec.networking.nodeCIDRMaskSizeIPv6",
                Reason::InvalidMaskSize {
                    size: 129,
                    min: 0,
                    max: 128
                }
            ),
        ]
    );
}

#[test]
fn bad_cluster_names() {
    let long = "a".repeat(MAX_CLUSTER_NAME_LEN + 1);
    for bad in ["Prod", "-prod", "prod-", "prod.x", "pröd", long.as_str()] {
        let text = cluster(&format!("{bad:?}"), "  kubernetesVersion: default\n");
        assert_eq!(
            errors(&text),
            [cluster_error(
                bad,
                "metadata.name",
                Reason::InvalidName {
                    value: bad.into(),
                    rule: NameRule::Dns1123Label {
                        max_len: MAX_CLUSTER_NAME_LEN
                    }
                }
            )],
            "{bad}"
        );
    }
    let ok = "a".repeat(MAX_CLUSTER_NAME_LEN);
    assert_eq!(errors(&cluster(&ok, "  kubernetesVersion: default\n")), []);
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {}\n";
    assert_eq!(
        errors(text),
        [cluster_error("", "metadata.name", Reason::Required)]
    );
}

#[test]
fn components_are_checked() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Component\nmetadata: {name: c-0, namespace: Team}\nspec: {role: control-plane, hypervisor: 'h_1'}\n";
    let key = ObjectKey::new("Team", "c-0");
    assert_eq!(
        errors(text),
        [
            error(
                1,
                Kind::Component,
                key.clone(),
                "metadata.namespace",
                Reason::InvalidName {
                    value: "Team".into(),
                    rule: NameRule::Dns1123Label { max_len: 63 }
                }
            ),
            error(
                1,
                Kind::Component,
                key.clone(),
                "spec.cluster",
                Reason::Required
            ),
            error(
                1,
                Kind::Component,
                key,
                "spec.hypervisor",
                Reason::InvalidName {
                    value: "h_1".into(),
                    rule: NameRule::Dns1123Subdomain
                }
            ),
        ]
    );
}

#[test]
fn duplicate_names() {
    let text = format!(
        "{}\n---\n{}\n---\n{}---\n{}",
        cluster("c", "  kubernetesVersion: default\n"),
        hypervisor("c", LOCAL),
        cluster("c", "  controlPlaneReplicas: 2\n"),
        cluster("c", "  kubernetesVersion: default\n")
            .replace("  name: c\n", "  name: c\n  namespace: other\n"),
    );
    assert_eq!(
        errors(&text),
        [error(
            3,
            Kind::Cluster,
            ObjectKey::new("default", "c"),
            "metadata.name",
            Reason::Duplicate {
                first_source_name: "in.yaml".into(),
                first_position: 1
            }
        )]
    );
    // An explicit `default` namespace is the same identity as none.
    let text = format!(
        "{}\n---\n{}",
        cluster("c", "  kubernetesVersion: default\n"),
        cluster("c", "  kubernetesVersion: default\n")
            .replace("  name: c\n", "  name: c\n  namespace: default\n"),
    );
    assert_eq!(errors(&text).len(), 1);
}

#[test]
fn duplicates_across_inputs_name_the_first_input() {
    let mut docs =
        parse_manifests(&cluster("c", "  kubernetesVersion: default\n"), "a.yaml").unwrap();
    docs.extend(
        parse_manifests(&cluster("c", "  kubernetesVersion: default\n"), "b.yaml").unwrap(),
    );
    let errs = World::from_documents(docs).unwrap_err();
    assert_eq!(
        errs,
        [ValidationError {
            source_name: "b.yaml".into(),
            position: 1,
            kind: Kind::Cluster,
            object: ObjectKey::new("default", "c"),
            field: "metadata.name".into(),
            reason: Reason::Duplicate {
                first_source_name: "a.yaml".into(),
                first_position: 1
            }
        }]
    );
}

#[test]
fn load_reports_every_validation_error() {
    let text = format!(
        "{}\n---\n{}",
        cluster("c", "  controlPlaneReplicas: 0\n"),
        hypervisor("h", "  public: true\n")
    );
    match World::load(&text, "in.yaml") {
        Err(crate::world::LoadError::Invalid(errs)) => assert_eq!(errs.len(), 5, "{errs:#?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_cri_endpoint_forms() {
    let spec = LOCAL.replace("/run/containerd.sock", "run/containerd.sock");
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [hv_error(
            "h1",
            "spec.localCRIEndpoint.criEndpointPath",
            Reason::NotAbsolutePath {
                value: "run/containerd.sock".into()
            }
        )]
    );
    let spec = format!(
        "  public: true\n  ipAddress: 192.0.2.10\n  portRange: {{low: 30000, high: 30099}}\n  remoteCRIEndpoint:\n    criEndpointURI: unix:///run/c.sock\n    caCertificate: {CA:?}\n    clientCertificate: {{certificate: c, privateKey: k}}\n"
    );
    assert_eq!(
        errors(&hypervisor("h1", &spec)),
        [hv_error(
            "h1",
            "spec.remoteCRIEndpoint.criEndpointURI",
            Reason::InvalidEndpointUri {
                value: "unix:///run/c.sock".into()
            }
        )]
    );
}

#[test]
fn endpoint_uri_forms() {
    for ok in [
        "tcp://192.0.2.1:27000",
        "https://hv.example.com:443/",
        "grpcs://[2001:db8::1]:1",
        "192.0.2.1:65535",
    ] {
        assert!(is_endpoint_uri(ok), "{ok}");
    }
    for bad in [
        "",
        "tcp://192.0.2.1",
        "tcp://192.0.2.1:0",
        "tcp://192.0.2.1:65536",
        "tcp://:27000",
        "http://192.0.2.1:80",
        "tcp://2001:db8::1:27000",
        "tcp://[nonsense]:27000",
        "tcp://u@host:1",
        "tcp://host:1/path",
    ] {
        assert!(!is_endpoint_uri(bad), "{bad}");
    }
}

#[test]
fn dns_label_rule() {
    for ok in ["a", "a-b", "0", "a0-9z", &"a".repeat(63)] {
        assert!(is_dns1123_label(ok), "{ok}");
    }
    for bad in ["", "A", "a_b", "-a", "a-", "a.b", &"a".repeat(64)] {
        assert!(!is_dns1123_label(bad), "{bad}");
    }
}

#[test]
fn an_etcd_member_record_must_name_its_replica_and_only_a_replica_has_one() {
    let replica = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Component\nmetadata: {name: c-control-plane-1}\nspec: {cluster: c, role: control-plane}\nstatus:\n  etcdMember:\n    initialCluster: {c-control-plane-0: 'https://10.0.0.1:2380'}\n    initialClusterState: existing\n";
    assert_eq!(
        errors(replica),
        [error(
            1,
            Kind::Component,
            ObjectKey::new("default", "c-control-plane-1"),
            "status.etcdMember.initialCluster",
            Reason::MissingSelf {
                name: "c-control-plane-1".into()
            }
        )]
    );
    let fixed = replica.replace("c-control-plane-0:", "c-control-plane-1:");
    assert_eq!(errors(&fixed), []);

    let ingress = fixed
        .replace("name: c-control-plane-1}", "name: c-ingress}")
        .replace("role: control-plane}", "role: control-plane-ingress}");
    assert_eq!(
        errors(&ingress),
        [error(
            1,
            Kind::Component,
            ObjectKey::new("default", "c-ingress"),
            "status.etcdMember",
            Reason::NotAControlPlaneReplica
        )]
    );
    let unknown = fixed.replace("existing", "joining");
    let message = parse_manifests(&unknown, "in.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("status.etcdMember.initialClusterState") && message.contains("joining"),
        "{message}"
    );
}

#[test]
fn replicas_are_bounded_by_etcds_largest_cluster() {
    assert_eq!(errors(&cluster("c1", "  controlPlaneReplicas: 7\n")), []);
    for replicas in [8, 1000] {
        assert_eq!(
            errors(&cluster(
                "c1",
                &format!("  controlPlaneReplicas: {replicas}\n")
            )),
            [cluster_error(
                "c1",
                "spec.controlPlaneReplicas",
                Reason::TooManyReplicas { replicas, max: 7 }
            )]
        );
    }
}

#[test]
fn hypervisor_addresses_are_unicast() {
    for value in ["0.0.0.0", "::", "224.0.0.1", "ff02::1", "255.255.255.255"] {
        let spec = LOCAL.replace("192.0.2.10", &format!("\"{value}\""));
        assert_eq!(
            errors(&hypervisor("h1", &spec)),
            [hv_error(
                "h1",
                "spec.ipAddress",
                Reason::NotUnicast {
                    value: value.into()
                }
            )],
            "{value}"
        );
    }
    for value in ["127.0.0.1", "10.0.0.1", "2001:db8::1"] {
        assert_eq!(
            errors(&hypervisor("h1", &LOCAL.replace("192.0.2.10", value))),
            [],
            "{value}"
        );
    }
}

#[test]
fn join_tokens_are_bootstrap_tokens_with_distinct_ids_and_never_echoed() {
    let found = errors(&cluster(
        "c",
        "  joinTokens:\n  - abcdef.0123456789abcdef\n  - ABCDEF.0123456789abcdef\n  - abcdef.fedcba9876543210\n  - abc.def\n  - ghijkl.0123456789abcdef\n",
    ));
    assert_eq!(
        found,
        [
            cluster_error("c", "spec.joinTokens[1]", Reason::InvalidJoinToken),
            cluster_error(
                "c",
                "spec.joinTokens[2]",
                Reason::DuplicateJoinTokenId {
                    id: "abcdef".into(),
                    first: 0
                }
            ),
            cluster_error("c", "spec.joinTokens[3]", Reason::InvalidJoinToken),
        ]
    );
    for e in &found {
        let message = e.to_string();
        for secret in ["0123456789abcdef", "fedcba9876543210", "abc.def"] {
            assert!(!message.contains(secret), "{message}");
        }
    }
    assert!(is_bootstrap_token("07401b.f395accd246ae52d"));
    assert!(!is_bootstrap_token("07401b.f395accd246ae52"));
    assert!(!is_bootstrap_token("07401b:f395accd246ae52d"));
}

#[test]
fn vpn_cidrs_leave_room_and_peers_hold_distinct_addresses_of_them() {
    let doc = |spec: &str, status: &str| format!("{}{status}", cluster("c", spec));
    assert_eq!(
        errors(&doc("  vpn: {enabled: true, CIDR: 10.9.0.0/31}\n", "")),
        [cluster_error(
            "c",
            "spec.vpn.CIDR",
            Reason::VpnCidrTooSmall {
                value: "10.9.0.0/31".into()
            }
        )]
    );
    assert!(errors(&doc("  vpn: {enabled: true, CIDR: 10.9.0.0/30}\n", "")).is_empty());
    let peers = "status:\n  vpnPeers:\n  - {name: worker-a, address: 10.0.0.2/16}\n  - {name: worker-a, address: 10.0.0.3/16}\n  - {name: worker-b, address: 10.0.0.2/16}\n  - {name: worker-c, address: 10.1.0.2/16}\n  - {name: worker-d, address: 10.0.0.1/16}\n  - {name: worker-e, address: nowhere}\n";
    assert_eq!(
        errors(&doc("  vpn: {enabled: true, CIDR: 10.0.0.0/16}\n", peers)),
        [
            cluster_error(
                "c",
                "status.vpnPeers[1].name",
                Reason::DuplicateVpnPeer {
                    what: "the name",
                    value: "worker-a".into(),
                    first: 0
                }
            ),
            cluster_error(
                "c",
                "status.vpnPeers[2].address",
                Reason::DuplicateVpnPeer {
                    what: "the address",
                    value: "10.0.0.2/16".into(),
                    first: 0
                }
            ),
            cluster_error(
                "c",
                "status.vpnPeers[3].address",
                Reason::NotInVpnCidr {
                    value: "10.1.0.2/16".into(),
                    cidr: "10.0.0.0/16".into()
                }
            ),
            cluster_error(
                "c",
                "status.vpnPeers[4].address",
                Reason::ReservedVpnAddress {
                    value: "10.0.0.1/16".into()
                }
            ),
            cluster_error(
                "c",
                "status.vpnPeers[5].address",
                Reason::InvalidIp {
                    value: "nowhere".into()
                }
            ),
        ]
    );
}

#[test]
fn snapshot_schedules_name_what_is_wrong() {
    let ok = cluster(
        "c",
        "  snapshots: {every: 6h, keep: 3, location: s3://snaps/prod}\n",
    );
    assert_eq!(errors(&ok), []);
    let ok = cluster(
        "c",
        "  snapshots: {every: 1d, location: file:///var/backups}\n",
    );
    assert_eq!(errors(&ok), []);
    let bad = cluster(
        "c",
        "  snapshots: {every: 30s, keep: 0, location: /var/backups}\n",
    );
    let invalid = |problem: &str| Reason::InvalidSchedule {
        problem: problem.into(),
    };
    assert_eq!(
        errors(&bad),
        [
            cluster_error(
                "c",
                "spec.snapshots.every",
                invalid("\"30s\" is shorter than a minute")
            ),
            cluster_error(
                "c",
                "spec.snapshots.keep",
                invalid("0 keeps nothing: at least 1")
            ),
            cluster_error(
                "c",
                "spec.snapshots.location",
                invalid("\"/var/backups\" is not s3://bucket[/prefix] or file:///directory")
            ),
        ]
    );
    let bad = cluster("c", "  snapshots: {every: weekly, location: s3:///x}\n");
    let found = errors(&bad);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(
        found[0].to_string(),
        "in.yaml: document 1: Cluster default/c: field `spec.snapshots.every`: \"weekly\" is not a duration like 30m, 6h or 1d"
    );
    assert_eq!(
        crate::cluster::parse_interval("90m").unwrap(),
        time::Duration::minutes(90)
    );
}

/// Several issuers: each checked at its own field, each issuer URL once (across `oidc` and
/// `oidcIssuers`), never the service-account issuer, audiences distinct, at most 64.
#[test]
fn several_issuers_are_each_checked_and_each_trusted_once() {
    let invalid = |problem: &str| Reason::Invalid {
        problem: problem.into(),
    };
    let ok = cluster(
        "c",
        "  apiServer:\n    oidc: {issuerURL: 'https://a.example', clientID: k}\n    oidcIssuers:\n    - {issuerURL: 'https://b.example', clientID: k, audiences: [console, cli]}\n",
    );
    assert_eq!(errors(&ok), []);
    let bad = cluster(
        "c",
        "  apiServer:\n    oidc: {issuerURL: 'https://a.example', clientID: k}\n    oidcIssuers:\n    - {issuerURL: 'https://a.example', clientID: k}\n    - {issuerURL: 'https://kubernetes.default.svc.cluster.local', clientID: k}\n    - {issuerURL: 'https://c.example', clientID: k, audiences: [k, x, x, '']}\n    - {issuerURL: 'http://d.example'}\n",
    );
    assert_eq!(
        errors(&bad),
        [
            cluster_error(
                "c",
                "spec.apiServer.oidcIssuers[0].issuerURL",
                invalid("\"https://a.example\" is already trusted at spec.apiServer.oidc")
            ),
            cluster_error(
                "c",
                "spec.apiServer.oidcIssuers[1].issuerURL",
                invalid(
                    "\"https://kubernetes.default.svc.cluster.local\" is the API servers' own service-account issuer"
                )
            ),
            cluster_error(
                "c",
                "spec.apiServer.oidcIssuers[2].audiences[0]",
                invalid("\"k\" is listed twice (clientID is an audience too)")
            ),
            cluster_error(
                "c",
                "spec.apiServer.oidcIssuers[2].audiences[2]",
                invalid("\"x\" is listed twice (clientID is an audience too)")
            ),
            cluster_error(
                "c",
                "spec.apiServer.oidcIssuers[2].audiences[3]",
                invalid("\"\" is empty or has blanks")
            ),
            cluster_error(
                "c",
                "spec.apiServer.oidcIssuers[3].issuerURL",
                invalid("\"http://d.example\" is not an https:// URL")
            ),
            cluster_error(
                "c",
                "spec.apiServer.oidcIssuers[3].clientID",
                Reason::Required
            ),
        ]
    );
    let many: String = (0..64)
        .map(|i| format!("    - {{issuerURL: 'https://i{i}.example', clientID: k}}\n"))
        .collect();
    let too_many = cluster(
        "c",
        &format!(
            "  apiServer:\n    oidc: {{issuerURL: 'https://a.example', clientID: k}}\n    oidcIssuers:\n{many}"
        ),
    );
    assert_eq!(
        errors(&too_many),
        [cluster_error(
            "c",
            "spec.apiServer.oidcIssuers",
            invalid("65 issuers in all with spec.apiServer.oidc; at most 64 are trusted")
        )]
    );
}

#[test]
fn an_oidc_issuer_needs_https_a_client_id_and_claim_names() {
    let ok = cluster(
        "c",
        &format!(
            "  apiServer:\n    oidc:\n      issuerURL: https://idp.example/realms/ops\n      clientID: kubernetes\n      usernameClaim: email\n      groupsClaim: groups\n      ca: |\n{}",
            CA.lines()
                .map(|l| format!("        {l}\n"))
                .collect::<String>()
        ),
    );
    assert_eq!(errors(&ok), []);
    let invalid = |problem: &str| Reason::Invalid {
        problem: problem.into(),
    };
    let bad = cluster(
        "c",
        "  apiServer:\n    oidc:\n      issuerURL: http://idp.example\n      usernameClaim: 'e mail'\n      ca: not a certificate\n",
    );
    assert_eq!(
        errors(&bad),
        [
            cluster_error(
                "c",
                "spec.apiServer.oidc.issuerURL",
                invalid("\"http://idp.example\" is not an https:// URL")
            ),
            cluster_error("c", "spec.apiServer.oidc.clientID", Reason::Required),
            cluster_error(
                "c",
                "spec.apiServer.oidc.usernameClaim",
                invalid("\"e mail\" is not a claim name")
            ),
            cluster_error(
                "c",
                "spec.apiServer.oidc.ca",
                invalid("holds no PEM certificate")
            ),
        ]
    );
    let query = cluster(
        "c",
        "  apiServer:\n    oidc: {issuerURL: 'https://idp.example/?x=1', clientID: k}\n",
    );
    assert_eq!(
        errors(&query),
        [cluster_error(
            "c",
            "spec.apiServer.oidc.issuerURL",
            invalid("\"https://idp.example/?x=1\" has a query, a fragment or blanks")
        )]
    );
    let missing = cluster("c", "  apiServer:\n    oidc: {clientID: k}\n");
    assert_eq!(
        errors(&missing),
        [cluster_error(
            "c",
            "spec.apiServer.oidc.issuerURL",
            Reason::Required
        )]
    );
}
