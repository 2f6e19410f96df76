//! Wire compatibility of our types with oneinfra's CRD schemas, and of our CRDs with our
//! types: an object holding every property a schema declares (sample values) parses and
//! writes back identically; every oneinfra property is in our schemas; every field our types
//! write is in our schemas. Golden file for the generated CRDs.

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use super::*;
use crate::manifest::parse_manifests;
use crate::manifest::tests::props::world;

fn oneinfra_crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/oneinfra/crd")
}

const ONEINFRA_FILES: [(Kind, &str); 4] = [
    (
        Kind::Hypervisor,
        "infra.oneinfra.ereslibre.es_hypervisors.yaml",
    ),
    (Kind::Cluster, "cluster.oneinfra.ereslibre.es_clusters.yaml"),
    (
        Kind::Component,
        "cluster.oneinfra.ereslibre.es_components.yaml",
    ),
    (
        Kind::NodeJoinRequest,
        "node.oneinfra.ereslibre.es_nodejoinrequests.openapi.yaml",
    ),
];

/// The object schema of a CRD, or a bare schema (NodeJoinRequest's openapi file).
fn object_schema(doc: &Value) -> Value {
    match doc.get("spec") {
        // apiextensions.k8s.io/v1beta1 (metal3's) has one schema for every version.
        Some(spec) if spec.get("validation").is_some() => {
            spec["validation"]["openAPIV3Schema"].clone()
        }
        Some(spec) => spec["versions"][0]["schema"]["openAPIV3Schema"].clone(),
        None => doc.clone(),
    }
}

fn oneinfra_schema(file: &str) -> Value {
    let text = std::fs::read_to_string(oneinfra_crd_dir().join(file)).unwrap();
    object_schema(&serde_yaml_ng::from_str(&text).unwrap())
}

fn our_schema(kind: Kind) -> Value {
    object_schema(&serde_yaml_ng::to_value(custom_resource_definition(kind).unwrap()).unwrap())
}

/// A sample value for every property of `schema`.
fn sample(schema: &Value, path: &str) -> Value {
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object");
    match ty {
        "object" => {
            let mut m = Mapping::new();
            if let Some(Value::Mapping(props)) = schema.get("properties") {
                for (k, v) in props {
                    let key = k.as_str().unwrap();
                    // A reference is resolved into `privateKey` before typing (`crate::keys`):
                    // the typed objects never hold one.
                    if key == crate::keys::PRIVATE_KEY_REF {
                        continue;
                    }
                    m.insert(k.clone(), sample(v, &format!("{path}.{key}")));
                }
            }
            if let Some(additional) = schema.get("additionalProperties") {
                m.insert("k".into(), sample(additional, &format!("{path}.*")));
            }
            Value::Mapping(m)
        }
        "array" => Value::Sequence(vec![sample(&schema["items"], &format!("{path}[]"))]),
        "integer" => Value::Number(7.into()),
        "boolean" => Value::Bool(true),
        "string" => {
            // oneinfra's schemas have no enums: pick values our enums accept.
            let s = if let Some(Value::Sequence(values)) = schema.get("enum") {
                values[values.len() - 1].as_str().unwrap().to_string()
            } else if path.ends_with(".role") {
                "control-plane-ingress".to_string()
            } else if path.ends_with("conditions[].status") {
                "Unknown".to_string()
            } else if schema.get("format").and_then(Value::as_str) == Some("date-time") {
                "2026-01-02T03:04:05Z".to_string()
            } else {
                "s".to_string()
            };
            Value::String(s)
        }
        other => panic!("{path}: unexpected schema type {other}"),
    }
}

/// A full sample object of `schema` parses as `kind` and writes back identically.
fn assert_round_trips(schema: &Value, kind: Kind, what: &str) {
    let mut object = sample(schema, "");
    object["apiVersion"] = kind.api_version().into();
    object["kind"] = kind.as_str().into();
    object["metadata"] = serde_yaml_ng::from_str("{name: sample}").unwrap();
    let text = serde_yaml_ng::to_string(&object).unwrap();
    let docs = parse_manifests(&text, what).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(docs.len(), 1);
    let written: Value = serde_yaml_ng::from_str(&docs[0].object.to_yaml().unwrap()).unwrap();
    assert_eq!(written, object, "{what}");
}

/// Every `privateKey` of a Cluster or Component may be a reference instead: `privateKeyRef: {name, key}`
/// beside it in the schema, or a real API server would prune what `oi keys export` and
/// `oi-manager` write.
#[test]
fn every_private_key_may_be_a_reference() {
    fn check(schema: &serde_json::Value, path: &str, keyed: bool, found: &mut usize) {
        if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
            if props.contains_key("privateKey") && !keyed {
                assert!(!props.contains_key("privateKeyRef"), "{path}: not resolved");
            } else if props.contains_key("privateKey") {
                *found += 1;
                let reference = &props["privateKeyRef"];
                assert_eq!(
                    reference["required"],
                    serde_json::json!(["name", "key"]),
                    "{path}"
                );
                assert_eq!(reference["properties"]["name"]["type"], "string", "{path}");
            }
            for (k, v) in props {
                check(v, &format!("{path}.{k}"), keyed, found);
            }
        }
        for nested in ["items", "additionalProperties"] {
            if let Some(v) = schema.get(nested) {
                check(v, &format!("{path}.{nested}"), keyed, found);
            }
        }
    }
    let mut found = 0;
    for kind in Kind::ALL {
        if let Some(crd) = crate::crd::custom_resource_definition(kind) {
            for version in crd["spec"]["versions"].as_array().unwrap() {
                // Clusters' and Components' keys may be kept in Secrets; the others' not yet
                // (their schemas must not offer what nothing resolves).
                let keyed = matches!(kind, Kind::Cluster | Kind::Component);
                check(
                    &version["schema"]["openAPIV3Schema"],
                    kind.as_str(),
                    keyed,
                    &mut found,
                );
            }
        }
    }
    assert!(found >= 10, "{found} privateKey fields");
}

#[test]
fn every_oneinfra_property_parses_and_writes_back() {
    for (kind, file) in ONEINFRA_FILES {
        assert_round_trips(&oneinfra_schema(file), kind, file);
    }
}

/// Upstream SIP's SIPCluster and metal3's BareMetalHost: every property parses and writes
/// back (the BareMetalHost as read, though we only read some of it).
#[test]
fn every_sip_and_metal3_property_parses_and_writes_back() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/sip/crd");
    for (kind, file) in [
        (Kind::SipCluster, "airship.airshipit.org_sipclusters.yaml"),
        (Kind::BareMetalHost, "metal3.io_baremetalhosts.yaml"),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let doc = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).unwrap())
            .find(|v| !v.is_null())
            .unwrap();
        assert_round_trips(&object_schema(&doc), kind, file);
    }
}

#[test]
fn every_property_of_our_crds_parses_and_writes_back() {
    for kind in Kind::ONEINFRA.into_iter().chain([Kind::SipCluster]) {
        assert_round_trips(&our_schema(kind), kind, kind.as_str());
    }
}

/// Our SIPCluster CRD holds every property of upstream SIP's, with the same types, and the
/// same group, names and scope; the kinds that are not ours have no CRD of ours.
#[test]
fn our_sip_cluster_crd_covers_upstreams() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/sip/crd/airship.airshipit.org_sipclusters.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let theirs = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|v| !v.is_null())
        .unwrap();
    assert_superset(
        &our_schema(Kind::SipCluster),
        &object_schema(&theirs),
        "SIPCluster",
    );
    let ours =
        serde_yaml_ng::to_value(custom_resource_definition(Kind::SipCluster).unwrap()).unwrap();
    assert_eq!(ours["metadata"]["name"], theirs["metadata"]["name"]);
    assert_eq!(ours["spec"]["group"], theirs["spec"]["group"]);
    assert_eq!(
        ours["spec"]["names"]["plural"],
        theirs["spec"]["names"]["plural"]
    );
    assert_eq!(
        ours["spec"]["names"]["kind"],
        theirs["spec"]["names"]["kind"]
    );
    assert_eq!(ours["spec"]["scope"], theirs["spec"]["scope"]);
    assert_eq!(
        ours["spec"]["versions"][0]["name"],
        theirs["spec"]["versions"][0]["name"]
    );
    assert!(custom_resource_definition(Kind::BareMetalHost).is_none());
    assert!(custom_resource_definition(Kind::Secret).is_none());
}

/// Every property path of `theirs` is in `ours`, with the same JSON type.
fn assert_superset(ours: &Value, theirs: &Value, path: &str) {
    let ty = |s: &Value| {
        s.get("type")
            .and_then(Value::as_str)
            .unwrap_or("object")
            .to_string()
    };
    assert_eq!(ty(ours), ty(theirs), "type of {path}");
    if let Some(Value::Mapping(props)) = theirs.get("properties") {
        for (k, their_prop) in props {
            let key = k.as_str().unwrap();
            let our_prop = ours
                .get("properties")
                .and_then(|p| p.get(key))
                .unwrap_or_else(|| panic!("{path}.{key} is missing from our schema"));
            assert_superset(our_prop, their_prop, &format!("{path}.{key}"));
        }
    }
    if let Some(their_values) = theirs.get("additionalProperties") {
        let our_values = ours
            .get("additionalProperties")
            .unwrap_or_else(|| panic!("{path}: our schema is not a map"));
        assert_superset(our_values, their_values, &format!("{path}.*"));
    }
    if let Some(their_items) = theirs.get("items") {
        assert_superset(&ours["items"], their_items, &format!("{path}[]"));
    }
}

#[test]
fn our_crds_cover_oneinfra_schemas() {
    for (kind, file) in ONEINFRA_FILES {
        assert_superset(&our_schema(kind), &oneinfra_schema(file), kind.as_str());
    }
}

/// Every field of `value` is declared by `schema` with a matching JSON type.
fn assert_declared(schema: &Value, value: &serde_json::Value, path: &str) {
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object");
    match value {
        serde_json::Value::Object(fields) => {
            assert_eq!(ty, "object", "{path}");
            if path.ends_with(".metadata") {
                return;
            }
            for (key, field) in fields {
                let sub = schema
                    .get("properties")
                    .and_then(|p| p.get(key.as_str()))
                    .or_else(|| schema.get("additionalProperties"))
                    .unwrap_or_else(|| panic!("{path}.{key} is not in the schema"));
                assert_declared(sub, field, &format!("{path}.{key}"));
            }
        }
        serde_json::Value::Array(items) => {
            assert_eq!(ty, "array", "{path}");
            for item in items {
                assert_declared(&schema["items"], item, &format!("{path}[]"));
            }
        }
        serde_json::Value::String(_) => assert_eq!(ty, "string", "{path}"),
        serde_json::Value::Number(n) => {
            assert_eq!(ty, "integer", "{path}");
            assert!(n.is_u64(), "{path}: {n}");
        }
        serde_json::Value::Bool(_) => assert_eq!(ty, "boolean", "{path}"),
        serde_json::Value::Null => panic!("{path}: null written"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_field_we_write_is_in_our_crds(world in world()) {
        let schemas: Vec<(Kind, Value)> =
            Kind::ONEINFRA.into_iter().map(|k| (k, our_schema(k))).collect();
        let schema = |kind: Kind| &schemas.iter().find(|(k, _)| *k == kind).unwrap().1;
        for o in world.hypervisors.values() {
            assert_declared(schema(Kind::Hypervisor), &serde_json::to_value(o).unwrap(), "Hypervisor");
        }
        for o in world.clusters.values() {
            assert_declared(schema(Kind::Cluster), &serde_json::to_value(o).unwrap(), "Cluster");
        }
        for o in world.components.values() {
            assert_declared(schema(Kind::Component), &serde_json::to_value(o).unwrap(), "Component");
        }
        for o in world.node_join_requests.values() {
            assert_declared(
                schema(Kind::NodeJoinRequest),
                &serde_json::to_value(o).unwrap(),
                "NodeJoinRequest",
            );
        }
    }
}

/// `testdata/crds.yaml` is what [`crds_yaml`] writes. Regenerate with
/// `OI_UPDATE_GOLDEN=1 cargo test -p oi-api crds_golden`.
#[test]
fn crds_golden() {
    let out = crds_yaml().unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/crds.yaml");
    oi_testsupport::assert_golden(&golden, &out, "cargo test -p oi-api crds_golden");
    let names: Vec<String> = serde_yaml_ng::Deserializer::from_str(&out)
        .map(|d| {
            let v = Value::deserialize(d).unwrap();
            v["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "hypervisors.infra.oneinfra.ereslibre.es",
            "clusters.cluster.oneinfra.ereslibre.es",
            "components.cluster.oneinfra.ereslibre.es",
            "nodejoinrequests.node.oneinfra.ereslibre.es",
            "sipclusters.airship.airshipit.org",
        ]
    );
}

/// The book's CRD reference (`docs/src/reference/crds.md`) is generated from the CRDs
/// [`crds_yaml`] writes: every field of every kind with its type and constraints, so it cannot
/// drift from what the manager installs.
#[test]
fn the_books_crd_reference_is_every_field_of_the_generated_crds() {
    let page = crd_reference(&crds_yaml().unwrap());
    oi_testsupport::assert_golden(
        &oi_testsupport::workspace_root().join("docs/src/reference/crds.md"),
        &page,
        "cargo nextest run -p oi-api the_books_crd_reference",
    );
    // What a reader relies on, from the CRDs themselves rather than the golden page.
    assert!(
        page.contains(
            "## Cluster (`clusters.cluster.oneinfra.ereslibre.es`, v1alpha1, namespaced)"
        ),
        "{page}"
    );
    assert!(
        page.contains("| `spec.controlPlaneReplicas` | integer | 1 ≤ n ≤ 4294967295 |"),
        "{page}"
    );
    assert!(page.contains("| `spec.role` | string | required; one of `control-plane`, `control-plane-ingress`, `control-plane-apiserver` |"), "{page}");
}

/// The reference page of a multi-document CRD stream: one section per CRD, a row per field.
fn crd_reference(crds: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "# Custom resources\n\n\
         Every field of the custom resources `oi-manager crds` installs, with its type and what the \
         API server checks. The same objects are the documents of a world file for `oi`. This page \
         is generated from the CRDs (`oi_api::crd`); a test fails when it differs, and \
         `OI_UPDATE_GOLDEN=1 scripts/test.sh` rewrites it.\n",
    );
    for document in serde_yaml_ng::Deserializer::from_str(crds) {
        let crd = Value::deserialize(document).unwrap();
        let spec = &crd["spec"];
        let version = &spec["versions"][0];
        let kind = spec["names"]["kind"].as_str().unwrap();
        let _ = write!(
            out,
            "\n## {kind} (`{}`, {}, {})\n\n",
            crd["metadata"]["name"].as_str().unwrap(),
            version["name"].as_str().unwrap(),
            if spec["scope"].as_str() == Some("Namespaced") {
                "namespaced"
            } else {
                "cluster-scoped"
            },
        );
        if let Some(columns) = version["additionalPrinterColumns"].as_sequence()
            && !columns.is_empty()
        {
            let names: Vec<String> = columns
                .iter()
                .map(|c| {
                    format!(
                        "{} (`{}`)",
                        c["name"].as_str().unwrap(),
                        c["jsonPath"].as_str().unwrap()
                    )
                })
                .collect();
            let _ = writeln!(out, "`kubectl get` columns: {}.\n", names.join(", "));
        }
        out.push_str("| field | type | constraints |\n|---|---|---|\n");
        let root = &version["schema"]["openAPIV3Schema"];
        for name in ["spec", "status"] {
            if !root["properties"][name].is_null() {
                fields(&mut out, name, &root["properties"][name], false);
            }
        }
    }
    out
}

/// One row per field under `schema`, depth first in the schema's (sorted) order.
fn fields(out: &mut String, path: &str, schema: &Value, required: bool) {
    use std::fmt::Write as _;
    let kind = schema["type"].as_str().unwrap_or("any");
    let mut shown = kind.to_string();
    let mut element = schema;
    if kind == "array" {
        element = &schema["items"];
        shown = format!("array of {}", element["type"].as_str().unwrap_or("any"));
    } else if kind == "object" && schema["additionalProperties"].is_mapping() {
        element = &schema["additionalProperties"];
        shown = format!("map of {}", element["type"].as_str().unwrap_or("any"));
    }
    let mut constraints = Vec::new();
    if required {
        constraints.push("required".to_string());
    }
    let scalar = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    };
    match (element.get("minimum"), element.get("maximum")) {
        (Some(lo), Some(hi)) => constraints.push(format!("{} ≤ n ≤ {}", scalar(lo), scalar(hi))),
        (Some(lo), None) => constraints.push(format!("n ≥ {}", scalar(lo))),
        (None, Some(hi)) => constraints.push(format!("n ≤ {}", scalar(hi))),
        (None, None) => {}
    }
    if let Some(values) = element["enum"].as_sequence() {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", scalar(v))).collect();
        constraints.push(format!("one of {}", values.join(", ")));
    }
    if let Some(format) = element["format"].as_str() {
        constraints.push(format!("format `{format}`"));
    }
    let _ = writeln!(out, "| `{path}` | {shown} | {} |", constraints.join("; "));
    let (child_path, children) = match kind {
        "array" => (format!("{path}[]"), element),
        "object" if schema["additionalProperties"].is_mapping() => (format!("{path}.*"), element),
        _ => (path.to_string(), schema),
    };
    let Some(properties) = children["properties"].as_mapping() else {
        return;
    };
    let required: Vec<&str> = children["required"]
        .as_sequence()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        let name = name.as_str().unwrap();
        fields(
            out,
            &format!("{child_path}.{name}"),
            property,
            required.contains(&name),
        );
    }
}

mod full {
    //! One instance of each kind with every field set, written as exhaustive struct literals
    //! (no `..Default::default()`): a field added to a type fails to compile here until it is
    //! given a value, and then fails the schema test until the CRD declares it.

    use std::collections::BTreeMap;

    use time::macros::datetime;

    use crate::cluster::*;
    use crate::common::*;
    use crate::component::*;
    use crate::hypervisor::*;
    use crate::meta::ObjectMeta;
    use crate::node_join_request::*;

    fn cert() -> Certificate {
        Certificate {
            certificate: "c".into(),
            private_key: "k".into(),
        }
    }

    fn keys() -> KeyPair {
        KeyPair {
            public_key: "p".into(),
            private_key: "k".into(),
        }
    }

    fn map<T: Clone>(v: T) -> BTreeMap<String, T> {
        [("k".to_string(), v)].into()
    }

    fn conditions() -> Vec<Condition> {
        vec![Condition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            reason: "r".into(),
            message: "m".into(),
            last_set_time: Some(datetime!(2026-01-01 00:00:00 UTC)),
            last_transition_time: Some(datetime!(2026-01-01 00:00:00 UTC)),
        }]
    }

    pub(super) fn hypervisor() -> Hypervisor {
        let mut h = Hypervisor::new(
            ObjectMeta::named("h"),
            HypervisorSpec {
                local_cri_endpoint: Some(LocalCriEndpoint {
                    cri_endpoint_path: "/p".into(),
                }),
                remote_cri_endpoint: Some(RemoteCriEndpoint {
                    cri_endpoint_uri: "tcp://h:1".into(),
                    ca_certificate: "ca".into(),
                    client_certificate: Some(cert()),
                }),
                public: true,
                ip_address: "192.0.2.1".into(),
                port_range: PortRange { low: 1, high: 2 },
                capacity: None,
                unschedulable: false,
                drain: false,
            },
        );
        h.status = HypervisorStatus {
            allocated_ports: vec![HypervisorPortAllocation {
                cluster: "c".into(),
                cluster_namespace: "n".into(),
                component: "p".into(),
                port: 1,
            }],
            freed_ports: vec![2],
            files: map(map(map(map("hash".to_string())))),
            conditions: vec![crate::common::Condition {
                type_: "Reachable".into(),
                status: crate::common::ConditionStatus::False,
                reason: "Unreachable".into(),
                message: "m".into(),
                last_set_time: None,
                last_transition_time: None,
            }],
        };
        h
    }

    pub(super) fn cluster() -> Cluster {
        let mut c = Cluster::new(
            ObjectMeta::namespaced("n", "c"),
            ClusterSpec {
                kubernetes_version: "1.37.1".into(),
                control_plane_replicas: Some(3),
                api_server_replicas: Some(5),
                ingress: Some(crate::ClusterIngress {
                    replicas: Some(2),
                    virtual_ip: "192.0.2.10".into(),
                    virtual_router_id: Some(42),
                }),
                certificate_authorities: CertificateAuthorities {
                    api_server_client: Some(cert()),
                    certificate_signer: Some(cert()),
                    kubelet: Some(cert()),
                    kubelet_client: Some(cert()),
                    etcd_client: Some(cert()),
                    etcd_peer: Some(cert()),
                },
                etcd_server: EtcdServer { ca: Some(cert()) },
                api_server: KubeApiServer {
                    ca: Some(cert()),
                    extra_sans: vec!["san".into()],
                    service_account: Some(keys()),
                    oidc: Some(crate::ApiServerOidc {
                        issuer_url: "https://idp.example".into(),
                        client_id: "kubernetes".into(),
                        username_claim: "email".into(),
                        username_prefix: Some("-".into()),
                        groups_claim: "groups".into(),
                        groups_prefix: Some("oidc:".into()),
                        signing_algs: vec!["ES256".into()],
                        ca: "ca".into(),
                        audiences: vec!["console".into()],
                    }),
                    oidc_issuers: vec![crate::ApiServerOidc {
                        issuer_url: "https://login.example.org".into(),
                        client_id: "k8s".into(),
                        ..crate::ApiServerOidc::default()
                    }],
                },
                join_key: Some(keys()),
                join_tokens: vec!["t".into()],
                vpn: Vpn {
                    enabled: true,
                    cidr: "10.0.0.0/16".into(),
                    private_key: "k".into(),
                    public_key: "p".into(),
                },
                networking: ClusterNetworking {
                    cluster_cidr: "10.244.0.0/16".into(),
                    service_cidr: "10.96.0.0/12".into(),
                    node_cidr_mask_size: Some(24),
                    node_cidr_mask_size_ipv4: Some(24),
                    node_cidr_mask_size_ipv6: Some(64),
                },
                snapshots: Some(crate::SnapshotSchedule {
                    every: "6h".into(),
                    keep: Some(7),
                    location: "s3://b/p".into(),
                }),
            },
        );
        c.status = ClusterStatus {
            api_server_endpoint: "https://a:1".into(),
            vpn_server_endpoint: "a:2".into(),
            kubernetes_version: "1.37.1".into(),
            storage_client_endpoints: map("https://e:1".to_string()),
            storage_peer_endpoints: map("https://e:2".to_string()),
            client_certificates: map(cert()),
            join_tokens: vec!["t".into()],
            vpn_peers: vec![VpnPeer {
                name: "w".into(),
                address: "10.0.0.2/32".into(),
                private_key: "k".into(),
                public_key: "p".into(),
            }],
            joined_nodes: vec![crate::JoinedNode {
                name: "w".into(),
                registered: true,
                vpn_address: "10.0.0.2/16".into(),
                issued_at: Some(datetime!(2026-11-25 00:00:00 UTC)),
            }],
            last_snapshot: Some(crate::SnapshotRecord {
                taken_at: "2026-11-25T00:00:00Z".into(),
                location: "s3://b/p/x.oisnap".into(),
                revision: 7,
                size: 42,
            }),
            ca_rotation: Some(crate::CaRotation {
                phase: "reissue".into(),
                started_at: "2026-11-25T00:00:00Z".into(),
                cas: vec!["spec.apiServer.ca".into()],
                next: map(cert()),
                previous: map("pem".to_string()),
                cross_signed: map("pem".to_string()),
                next_service_account: Some(keys()),
                previous_service_account: "pem".into(),
            }),
            conditions: conditions(),
        };
        c
    }

    pub(super) fn component() -> Component {
        let mut c = Component::new(
            ObjectMeta::namespaced("n", "p"),
            ComponentSpec {
                cluster: "c".into(),
                role: ComponentRole::ControlPlane,
                hypervisor: Some("h".into()),
            },
        );
        c.status = ComponentStatus {
            allocated_host_ports: vec![ComponentHostPortAllocation {
                name: "apiserver".into(),
                port: 1,
            }],
            client_certificates: map(cert()),
            server_certificates: map(cert()),
            input_endpoints: map("i".to_string()),
            output_endpoints: map("o".to_string()),
            conditions: conditions(),
            etcd_member: Some(EtcdMemberStart {
                initial_cluster: map("https://e:2".to_string()),
                initial_cluster_state: EtcdInitialClusterState::Existing,
            }),
        };
        c
    }

    pub(super) fn node_join_request() -> NodeJoinRequest {
        let mut r = NodeJoinRequest::new(
            ObjectMeta::named("w"),
            NodeJoinRequestSpec {
                symmetric_key: "s".into(),
                api_server_endpoint: "https://a:1".into(),
                container_runtime_endpoint: "unix:///c".into(),
                image_service_endpoint: "unix:///c".into(),
                extra_sans: vec!["san".into()],
                vpn_public_key: "p".into(),
            },
        );
        r.status = NodeJoinRequestStatus {
            kubernetes_version: "v".into(),
            vpn: Some(NodeJoinRequestVpn {
                cidr: "c".into(),
                address: "a".into(),
                endpoint: "e".into(),
                endpoint_public_key: "p".into(),
                peer_private_key: "k".into(),
            }),
            kube_config: "k".into(),
            kubelet_client_ca_certificate: "c".into(),
            kubelet_server_certificate: "c".into(),
            kubelet_server_private_key: "k".into(),
            kubelet_config: "k".into(),
            conditions: conditions(),
        };
        r
    }
}

#[test]
fn every_field_of_full_objects_is_in_our_crds() {
    let objects: [(Kind, serde_json::Value); 4] = [
        (
            Kind::Hypervisor,
            serde_json::to_value(full::hypervisor()).unwrap(),
        ),
        (
            Kind::Cluster,
            serde_json::to_value(full::cluster()).unwrap(),
        ),
        (
            Kind::Component,
            serde_json::to_value(full::component()).unwrap(),
        ),
        (
            Kind::NodeJoinRequest,
            serde_json::to_value(full::node_join_request()).unwrap(),
        ),
    ];
    for (kind, value) in &objects {
        assert_declared(&our_schema(*kind), value, kind.as_str());
    }
    // The check can fail: a field the schema does not declare is reported.
    let mut cluster = objects[1].1.clone();
    cluster["status"]["extra"] = "x".into();
    let caught = std::panic::catch_unwind(|| {
        assert_declared(&our_schema(Kind::Cluster), &cluster, "Cluster")
    });
    assert!(caught.is_err());
}
