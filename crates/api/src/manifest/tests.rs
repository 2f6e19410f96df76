use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;

use super::*;
use crate::cluster::Cluster;
use crate::meta::ObjectKey;
use crate::meta::Resource;
use crate::world::World;

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/oneinfra/samples")
}

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Loads, writes, loads the output again and writes it again: both outputs must be equal,
/// and the reloaded world equal to the first.
fn assert_fixed_point(world: &World) -> String {
    let first = world.to_yaml().unwrap();
    let docs = parse_manifests(&first, "first-pass").unwrap();
    let reloaded = World::from_documents(docs).unwrap();
    assert_eq!(&reloaded, world);
    let second = reloaded.to_yaml().unwrap();
    assert_eq!(first, second);
    first
}

#[test]
fn every_oneinfra_sample_loads_and_round_trips() {
    let mut names: Vec<_> = std::fs::read_dir(samples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let expected_clusters = [
        ("10-simple-clusters.yaml", 10),
        ("5-simple-clusters.yaml", 5),
        ("ha-cluster.yaml", 1),
        ("simple-cluster-with-vpn.yaml", 1),
        ("simple-cluster.yaml", 1),
    ];
    let found: Vec<_> = names
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        found,
        expected_clusters
            .iter()
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>()
    );
    for (path, (_, clusters)) in names.iter().zip(expected_clusters) {
        let text = read(path);
        let source = path.display().to_string();
        let raw = World::from_documents(parse_manifests(&text, &source).unwrap()).unwrap();
        assert_eq!(raw.clusters.len(), clusters, "{source}");
        assert_fixed_point(&raw);
        let defaulted = World::load(&text, &source).unwrap();
        assert_fixed_point(&defaulted);
        for cluster in defaulted.clusters.values() {
            assert_eq!(cluster.spec.kubernetes_version, "1.37.1");
            assert!(cluster.metadata.namespace.is_none());
        }
    }
}

#[test]
fn samples_keep_their_settings() {
    let ha = World::load(&read(&samples_dir().join("ha-cluster.yaml")), "ha").unwrap();
    let cluster = &ha.clusters[&ObjectKey::new("default", "ha-cluster")];
    assert_eq!(cluster.control_plane_replicas(), 3);
    assert!(!cluster.spec.vpn.enabled);
    let vpn = World::load(
        &read(&samples_dir().join("simple-cluster-with-vpn.yaml")),
        "vpn",
    )
    .unwrap();
    let cluster = &vpn.clusters[&ObjectKey::new("default", "simple-cluster-with-vpn")];
    assert!(cluster.spec.vpn.enabled);
    assert_eq!(cluster.spec.vpn.cidr, "10.0.0.0/16");
    // A defaulted cluster carries its defaults in the output, but no namespace.
    let out = vpn.to_yaml().unwrap();
    assert_eq!(
        out,
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Cluster
metadata:
  name: simple-cluster-with-vpn
spec:
  kubernetesVersion: 1.37.1
  controlPlaneReplicas: 1
  vpn:
    enabled: true
    CIDR: 10.0.0.0/16
  networking:
    clusterCIDR: 10.244.0.0/16
    serviceCIDR: 10.96.0.0/12
    nodeCIDRMaskSize: 24
"
    );
}

/// Golden file: `testdata/full-world.yaml` loaded (with defaults) and written must equal
/// `testdata/full-world.out.yaml`. Regenerate with
/// `OI_UPDATE_GOLDEN=1 cargo test -p oi-api full_world_golden`.
#[test]
fn full_world_golden() {
    let world = World::load(&read(&testdata("full-world.yaml")), "full-world.yaml").unwrap();
    assert_eq!(world.hypervisors.len(), 2);
    assert_eq!(world.clusters.len(), 1);
    assert_eq!(world.components.len(), 2);
    assert_eq!(world.node_join_requests.len(), 1);
    let out = assert_fixed_point(&world);
    oi_testsupport::assert_golden(
        &testdata("full-world.out.yaml"),
        &out,
        "cargo test -p oi-api full_world_golden",
    );
}

#[test]
fn kubectl_output_loads() {
    let text = read(&testdata("kubectl-get-cluster.yaml"));
    let world = World::load(&text, "kubectl").unwrap();
    let cluster = &world.clusters[&ObjectKey::new("default", "simple-cluster")];
    assert_eq!(
        cluster.metadata.uid.as_deref(),
        Some("9f5d0c1e-0b56-4d0d-9d3a-0a6b7a2e4c55")
    );
    assert_eq!(cluster.metadata.managed_fields.len(), 1);
    assert_eq!(
        cluster.metadata.finalizers,
        ["oneinfra.ereslibre.es/cleanup"]
    );
    assert_eq!(
        cluster.metadata.owner_references[0].block_owner_deletion,
        Some(true)
    );
    assert!(!cluster.is_being_deleted());
    // An explicit `namespace: default` is kept as written.
    let out = assert_fixed_point(&world);
    assert!(out.contains("  namespace: default\n"), "{out}");
}

#[test]
fn deletion_timestamp_marks_deletion() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Cluster
metadata:
  name: c
  deletionTimestamp: 2026-11-21T08:15:42Z
";
    let world = World::load(text, "t").unwrap();
    assert!(world.clusters[&ObjectKey::new("default", "c")].is_being_deleted());
    assert_fixed_point(&world);
}

#[test]
fn empty_documents_are_skipped_but_counted() {
    let text = "---\n# nothing\n---\napiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: a}\n---\n---\napiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: b}\n";
    let docs = parse_manifests(text, "t").unwrap();
    let positions: Vec<_> = docs
        .iter()
        .map(|d| (d.position, d.object.key().name))
        .collect();
    assert_eq!(positions, [(2, "a".to_string()), (4, "b".to_string())]);
    assert_eq!(parse_manifests("", "t").unwrap(), []);
    assert_eq!(parse_manifests("---\n", "t").unwrap(), []);
}

#[test]
fn unquoted_condition_status_is_accepted() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Cluster
metadata: {name: c}
status:
  conditions:
  - {type: ReconcileSucceeded, status: True}
";
    let world = World::load(text, "t").unwrap();
    let out = assert_fixed_point(&world);
    assert!(out.contains("status: 'True'"), "{out}");
}

#[test]
fn malformed_yaml_reports_line_and_column() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata:\n  name: [a, b\n";
    let err = parse_manifests(text, "bad.yaml").unwrap_err();
    let ManifestError::Yaml {
        source_name,
        position,
        line,
        column,
        message,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((source_name.as_str(), *position), ("bad.yaml", 1));
    assert_eq!((*line, *column), (Some(5), Some(1)));
    assert!(
        message.contains("while parsing a flow sequence, expected ',' or ']'"),
        "{message}"
    );
    assert_eq!(
        err.to_string(),
        format!("bad.yaml: document 1: malformed yaml at line 5, column 1: {message}")
    );
}

#[test]
fn malformed_second_document_names_its_position() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: a}\n---\nkind: : :\n";
    let err = parse_manifests(text, "bad.yaml").unwrap_err();
    assert!(
        matches!(
            &err,
            ManifestError::Yaml {
                position: 2,
                line: Some(5),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn unknown_kind_is_an_error() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n";
    assert_eq!(
        parse_manifests(text, "in.yaml"),
        Err(ManifestError::UnknownKind {
            source_name: "in.yaml".into(),
            position: 1,
            name: Some("cm".into()),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        })
    );
}

#[test]
fn unknown_api_version_is_an_error() {
    let text =
        "apiVersion: cluster.oneinfra.ereslibre.es/v1beta1\nkind: Cluster\nmetadata: {name: c}\n";
    let err = parse_manifests(text, "in.yaml").unwrap_err();
    assert_eq!(
        err,
        ManifestError::UnknownApiVersion {
            source_name: "in.yaml".into(),
            position: 1,
            name: Some("c".into()),
            kind: Kind::Cluster,
            api_version: "cluster.oneinfra.ereslibre.es/v1beta1".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "in.yaml: document 1 (\"c\"): unknown apiVersion \"cluster.oneinfra.ereslibre.es/v1beta1\" for kind Cluster; expected cluster.oneinfra.ereslibre.es/v1alpha1"
    );
    // A Hypervisor under the cluster group is as wrong.
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata: {name: h}\nspec: {public: true}\n";
    assert!(matches!(
        parse_manifests(text, "in.yaml"),
        Err(ManifestError::UnknownApiVersion {
            kind: Kind::Hypervisor,
            ..
        })
    ));
}

#[test]
fn missing_kind_is_an_error() {
    let text = "---\napiVersion: v1\nmetadata: {name: x}\n";
    assert_eq!(
        parse_manifests(text, "in.yaml"),
        Err(ManifestError::MissingTypeField {
            source_name: "in.yaml".into(),
            position: 1,
            name: Some("x".into()),
            field: "kind",
        })
    );
    assert_eq!(
        parse_manifests("- a\n- b\n", "in.yaml"),
        Err(ManifestError::NotAnObject {
            source_name: "in.yaml".into(),
            position: 1,
        })
    );
}

#[test]
fn unknown_field_names_its_path() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: a}\n---\napiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: Hypervisor
metadata:
  name: h1
spec:
  public: true
  portRange:
    low: 30000
    lowest: 30001
";
    let err = parse_manifests(text, "hv.yaml").unwrap_err();
    assert_eq!(
        err,
        ManifestError::Field {
            source_name: "hv.yaml".into(),
            position: 2,
            kind: Some(Kind::Hypervisor),
            name: Some("h1".into()),
            path: "spec.portRange.lowest".into(),
            message: "unknown field `lowest`, expected `low` or `high`".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "hv.yaml: document 2: Hypervisor (\"h1\"): field `spec.portRange.lowest`: unknown field `lowest`, expected `low` or `high`"
    );
}

#[test]
fn unknown_fields_deep_and_shallow() {
    let cases = [
        (
            "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  vpn: {enabled: true, cidr: 10.0.0.0/16}\n",
            "spec.vpn.cidr",
        ),
        (
            "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nextra: 1\n",
            "extra",
        ),
        (
            "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: c, labelz: {}}\n",
            "metadata.labelz",
        ),
        (
            "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Component\nmetadata: {name: c}\nspec: {cluster: x, role: control-plane}\nstatus:\n  allocatedHostPorts:\n  - {name: a, port: 1, protocol: tcp}\n",
            "status.allocatedHostPorts[0].protocol",
        ),
    ];
    for (text, expected) in cases {
        match parse_manifests(text, "t") {
            Err(ManifestError::Field { path, .. }) => assert_eq!(path, expected),
            other => panic!("{expected}: {other:?}"),
        }
    }
}

#[test]
fn missing_and_mistyped_fields_name_their_path() {
    let text = "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata: {name: h}\nspec: {ipAddress: 192.0.2.1}\n";
    assert_eq!(
        parse_manifests(text, "t"),
        Err(ManifestError::Field {
            source_name: "t".into(),
            position: 1,
            kind: Some(Kind::Hypervisor),
            name: Some("h".into()),
            path: "spec".into(),
            message: "missing field `public`".into(),
        })
    );
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Component\nmetadata: {name: c}\nspec: {cluster: x, role: worker}\n";
    match parse_manifests(text, "t") {
        Err(ManifestError::Field { path, message, .. }) => {
            assert_eq!(path, "spec.role");
            assert!(message.contains("unknown variant `worker`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn written_cluster_is_typed_back() {
    let mut world = World::default();
    let cluster = Cluster::new(
        crate::meta::ObjectMeta::namespaced("team-b", "z"),
        crate::cluster::ClusterSpec::default(),
    );
    world.insert(cluster.clone().into());
    let out = world.to_yaml().unwrap();
    assert_eq!(
        out,
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata:\n  name: z\n  namespace: team-b\n"
    );
    let docs = parse_manifests(&out, "t").unwrap();
    assert_eq!(docs[0].object, Object::Cluster(cluster));
}

#[test]
fn kubectl_lists_yield_their_items() {
    let text = "apiVersion: v1
kind: List
metadata:
  resourceVersion: \"\"
items:
- apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
  kind: Cluster
  metadata: {name: a, namespace: default}
- apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
  kind: Cluster
  metadata: {name: b, namespace: default}
---
apiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: HypervisorList
items: []
";
    let docs = parse_manifests(text, "list.yaml").unwrap();
    let got: Vec<_> = docs
        .iter()
        .map(|d| (d.position, d.object.kind(), d.object.key().to_string()))
        .collect();
    assert_eq!(
        got,
        [
            (1, Kind::Cluster, "default/a".to_string()),
            (1, Kind::Cluster, "default/b".to_string()),
        ]
    );
}

#[test]
fn list_item_errors_name_the_item() {
    let text = "apiVersion: v1
kind: List
items:
- apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
  kind: Cluster
  metadata: {name: a}
- apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
  kind: Cluster
  metadata: {name: b}
  spec: {replicas: 3}
";
    assert_eq!(
        parse_manifests(text, "list.yaml"),
        Err(ManifestError::Field {
            source_name: "list.yaml".into(),
            position: 1,
            kind: Some(Kind::Cluster),
            name: Some("b".into()),
            path: "items[1].spec.replicas".into(),
            message: "unknown field `replicas`, expected one of `kubernetesVersion`, `controlPlaneReplicas`, `apiServerReplicas`, `certificateAuthorities`, `etcdServer`, `apiServer`, `joinKey`, `joinTokens`, `vpn`, `networking`, `ingress`, `snapshots`".into(),
        })
    );
    let text = "apiVersion: v1\nkind: List\nitems: []\nextra: 1\n";
    let err = parse_manifests(text, "list.yaml").unwrap_err();
    assert!(
        matches!(&err, ManifestError::Field { kind: None, path, .. } if path == "extra"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "list.yaml: document 1: List: field `extra`: unknown field `extra`, expected one of `apiVersion`, `kind`, `metadata`, `items`"
    );
    let text = "apiVersion: v1\nkind: List\nitems:\n- 3\n";
    assert!(matches!(
        parse_manifests(text, "list.yaml"),
        Err(ManifestError::Field { path, .. }) if path == "items[0]"
    ));
    // A list of someone else's kind is still an unknown kind.
    let text =
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p}}\n";
    assert!(matches!(
        parse_manifests(text, "list.yaml"),
        Err(ManifestError::UnknownKind { kind, .. }) if kind == "Pod"
    ));
}

pub(crate) mod props;

#[test]
fn world_lookups_follow_references() {
    let world = World::load(&read(&testdata("full-world.yaml")), "full-world.yaml").unwrap();
    let cluster_key = ObjectKey::new("team-a", "prod");
    let names: Vec<_> = world
        .components_of(&cluster_key)
        .map(|c| c.metadata.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["prod-control-plane-0", "prod-control-plane-ingress"]
    );
    let cp = &world.components[&ObjectKey::new("team-a", "prod-control-plane-0")];
    assert_eq!(world.cluster_of(cp).map(|c| c.key()), Some(cluster_key));
    let hv = world.hypervisor_of(cp).unwrap();
    assert_eq!(
        hv.spec.cri_endpoint(),
        Some(crate::hypervisor::CriEndpoint::Local(
            "/run/oi/private-1/containerd.sock"
        ))
    );
    let ingress = &world.components[&ObjectKey::new("team-a", "prod-control-plane-ingress")];
    assert!(world.hypervisor_of(ingress).is_none());
    assert!(matches!(
        world.hypervisors[&ObjectKey::cluster_scoped("public-1")]
            .spec
            .cri_endpoint(),
        Some(crate::hypervisor::CriEndpoint::Remote(r)) if r.cri_endpoint_uri == "tcp://192.0.2.20:27000"
    ));
}

#[test]
fn yaml_merge_keys_and_anchors_resolve() {
    let text = "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: Hypervisor
metadata: {name: h1}
spec: &common
  public: false
  ipAddress: 192.0.2.10
  portRange: {low: 30000, high: 30099}
  localCRIEndpoint: {criEndpointPath: /run/h1.sock}
---
apiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: Hypervisor
metadata: {name: h2}
spec:
  <<: *common
  public: true
";
    // Anchors do not cross documents in YAML: the second document's alias is an error.
    assert!(matches!(
        parse_manifests(text, "t"),
        Err(ManifestError::Yaml { position: 2, .. })
    ));
    let text = "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: Hypervisor
metadata: {name: h1, labels: &l {zone: a}, annotations: {<<: *l, note: x}}
spec:
  public: true
  ipAddress: 192.0.2.10
  portRange: {low: 30000, high: 30099}
  localCRIEndpoint: {criEndpointPath: /run/h1.sock}
";
    let docs = parse_manifests(text, "t").unwrap();
    assert_eq!(
        docs[0].object.metadata().annotations,
        [
            ("note".to_string(), "x".to_string()),
            ("zone".to_string(), "a".to_string())
        ]
        .into()
    );
}

#[test]
fn duplicate_yaml_keys_are_malformed() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {name: a}\nspec:\n  controlPlaneReplicas: 1\n  controlPlaneReplicas: 3\n";
    let err = parse_manifests(text, "t").unwrap_err();
    assert!(
        matches!(&err, ManifestError::Yaml { position: 1, line: Some(_), message, .. } if message.contains("duplicate")),
        "{err:?}"
    );
}

#[test]
fn empty_sections_read_as_defaults() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Cluster
metadata:
  name: c
spec:
  # controlPlaneReplicas: 3
  vpn:
status:
";
    let docs = parse_manifests(text, "t").unwrap();
    let Object::Cluster(cluster) = &docs[0].object else {
        panic!("{docs:?}");
    };
    assert_eq!(cluster.spec, crate::cluster::ClusterSpec::default());
    // Null is not a way around required fields.
    let text = "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata: {name: h}\nspec:\n";
    assert!(matches!(
        parse_manifests(text, "t"),
        Err(ManifestError::Field { path, .. }) if path == "spec"
    ));
}

/// Hostile inputs are refused quickly, whatever their shape; each time is printed, not
/// asserted on (timings belong to benchmarks). Before the structure check, the first took over
/// a minute in libyaml.
#[test]
fn hostile_yaml_is_refused_with_its_position() {
    let n = 200_000;
    let laughs = {
        let mut s = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        let mut previous = 'a';
        for c in 'b'..='k' {
            let refs = vec![format!("*{previous}"); 10].join(", ");
            s.push_str(&format!("{c}: &{c} [{refs}]\n"));
            previous = c;
        }
        s
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "flow sequences 400 KB deep",
            format!("a: {}{}\n", "[".repeat(n), "]".repeat(n)),
            "hostile.yaml: document 1: collections nested deeper than 64 levels at line 1, column 259",
        ),
        (
            "flow mappings 250 KB deep",
            format!("a: {}x{}\n", "{a: ".repeat(n / 4), "}".repeat(n / 4)),
            "hostile.yaml: document 1: collections nested deeper than 64 levels at line 1, column 256",
        ),
        (
            "unclosed flow sequences",
            format!("a: {}\n", "[".repeat(n)),
            "hostile.yaml: document 1: collections nested deeper than 64 levels at line 1, column 259",
        ),
        (
            "block sequences on one line",
            format!("{}x\n", "- ".repeat(n)),
            "hostile.yaml: document 1: collections nested deeper than 64 levels at line 1, column 129",
        ),
        (
            "deep in a second document",
            format!("a: 1\n---\nb: {}{}\n", "[".repeat(100), "]".repeat(100)),
            "hostile.yaml: document 2: collections nested deeper than 64 levels at line 3, column 67",
        ),
        (
            "aliases expanding to 10^10 nodes",
            laughs,
            "hostile.yaml: document 1: malformed yaml: repetition limit exceeded",
        ),
    ];
    for (name, text, expected) in cases {
        let started = std::time::Instant::now();
        let err = parse_manifests(&text, "hostile.yaml").unwrap_err();
        println!("{name}: refused in {:?}", started.elapsed());
        assert_eq!(err.to_string(), expected, "{name}");
    }
}

#[test]
fn nesting_up_to_the_limit_is_accepted() {
    // 64 levels: the document mapping and 63 sequences.
    let text = format!(
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {{name: a}}\nx: {}{}\n",
        "[".repeat(63),
        "]".repeat(63)
    );
    // The structure check passes; the unknown field `x` is what the typed parse refuses.
    let err = parse_manifests(&text, "deep.yaml").unwrap_err();
    assert!(
        matches!(&err, ManifestError::Field { path, .. } if path == "x"),
        "{err:?}"
    );
}
