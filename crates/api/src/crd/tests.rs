//! Wire compatibility with oneinfra's CRD schemas: for each kind, an object holding every
//! property its schema declares (with sample values) parses, and writes back identically.
//! So every oneinfra field is accepted under its exact JSON name, and none is renamed or lost.

use std::path::Path;

use serde_yaml::{Mapping, Value};

use crate::manifest::parse_manifests;
use crate::meta::Kind;

fn crd_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/oneinfra/crd")
}

/// The object schema of a CRD file, or the bare schema (NodeJoinRequest's openapi file).
fn schema(file: &str) -> Value {
    let text = std::fs::read_to_string(crd_dir().join(file)).unwrap();
    let doc: Value = serde_yaml::from_str(&text).unwrap();
    match doc.get("spec") {
        Some(spec) => spec["versions"][0]["schema"]["openAPIV3Schema"].clone(),
        None => doc,
    }
}

/// A sample value for every property of `schema`; `path` (dotted) picks values for
/// string fields that are enums on our side.
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
            let s = if path.ends_with(".role") {
                "control-plane-ingress"
            } else if path.ends_with("conditions[].status") {
                "Unknown"
            } else if schema.get("format").and_then(Value::as_str) == Some("date-time") {
                "2026-01-02T03:04:05Z"
            } else {
                "s"
            };
            Value::String(s.into())
        }
        other => panic!("{path}: unexpected schema type {other}"),
    }
}

fn check(file: &str, kind: Kind) {
    let mut object = sample(&schema(file), "");
    object["apiVersion"] = kind.api_version().into();
    object["kind"] = kind.as_str().into();
    object["metadata"] = serde_yaml::from_str("{name: sample}").unwrap();
    let text = serde_yaml::to_string(&object).unwrap();
    let docs = parse_manifests(&text, file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(docs.len(), 1);
    let written: Value = serde_yaml::from_str(&docs[0].object.to_yaml().unwrap()).unwrap();
    assert_eq!(written, object, "{file}");
}

#[test]
fn hypervisor_matches_crd() {
    check(
        "infra.oneinfra.ereslibre.es_hypervisors.yaml",
        Kind::Hypervisor,
    );
}

#[test]
fn cluster_matches_crd() {
    check("cluster.oneinfra.ereslibre.es_clusters.yaml", Kind::Cluster);
}

#[test]
fn component_matches_crd() {
    check(
        "cluster.oneinfra.ereslibre.es_components.yaml",
        Kind::Component,
    );
}

#[test]
fn node_join_request_matches_openapi_schema() {
    check(
        "node.oneinfra.ereslibre.es_nodejoinrequests.openapi.yaml",
        Kind::NodeJoinRequest,
    );
}
