//! `meta.k8s.io/v1` Tables: what `kubectl get` asks for (`Accept: ...;as=Table`) and prints.
//! Columns are those of kube-apiserver's printers for the kinds served here, and for custom
//! resources the CRD's `additionalPrinterColumns` (simple JSONPaths) or `Age`.

use serde_json::{Value, json};

use super::meta;
use super::registry::Served;

/// One column.
struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    priority: u8,
    description: &'static str,
}

const fn col(name: &'static str, kind: &'static str, priority: u8) -> Column {
    Column {
        name,
        kind,
        format: "",
        priority,
        description: "",
    }
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
};

const AGE: Column = Column {
    name: "Age",
    kind: "string",
    format: "",
    priority: 0,
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
};

/// kube's `duration.HumanDuration`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    let s = seconds.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    if minutes < 10 {
        let rest = s % 60;
        return if rest == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{rest}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = s / 3600;
    if hours < 8 {
        let rest = minutes % 60;
        return if rest == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{rest}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let rest = hours % 24;
        return if rest == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{rest}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of a timestamp, as printers show it; `<unknown>` when absent.
pub fn age(timestamp: Option<&str>) -> String {
    match timestamp.and_then(meta::parse_time) {
        Some(t) => {
            let elapsed = time::OffsetDateTime::now_utc() - t;
            human_duration(elapsed.whole_seconds())
        }
        None => "<unknown>".to_string(),
    }
}

fn created(object: &Value) -> String {
    age(object["metadata"]["creationTimestamp"].as_str())
}

fn str_or<'a>(value: &'a Value, default: &'a str) -> &'a str {
    value.as_str().filter(|s| !s.is_empty()).unwrap_or(default)
}

fn count(value: &Value) -> usize {
    value.as_object().map_or(0, |m| m.len())
}

fn node_status(object: &Value) -> String {
    let ready = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        // As kubectl's printer: anything but True is NotReady; no condition at all, Unknown.
        .map(|c| {
            if c["status"] == "True" {
                "Ready"
            } else {
                "NotReady"
            }
        })
        .unwrap_or("Unknown");
    if object["spec"]["unschedulable"].as_bool() == Some(true) {
        format!("{ready},SchedulingDisabled")
    } else {
        ready.to_string()
    }
}

fn node_roles(object: &Value) -> String {
    let labels = meta::labels(object);
    let mut roles: Vec<String> = labels
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(role) = labels
        .and_then(|l| l.get("kubernetes.io/role"))
        .and_then(Value::as_str)
    {
        roles.push(role.to_string());
    }
    roles.sort();
    roles.dedup();
    if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    }
}

fn node_address(object: &Value, kind: &str) -> String {
    object["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == kind)
        .and_then(|a| a["address"].as_str())
        .unwrap_or("<none>")
        .to_string()
}

fn service_ports(object: &Value) -> String {
    let ports: Vec<String> = object["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = str_or(&p["protocol"], "TCP");
            match p["nodePort"].as_i64() {
                Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    }
}

fn endpoints(object: &Value) -> String {
    let mut out = Vec::new();
    for subset in object["subsets"].as_array().into_iter().flatten() {
        for address in subset["addresses"].as_array().into_iter().flatten() {
            let ip = address["ip"].as_str().unwrap_or_default();
            let ports: Vec<i64> = subset["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["port"].as_i64())
                .collect();
            if ports.is_empty() {
                out.push(ip.to_string());
            }
            for port in ports {
                out.push(format!("{ip}:{port}"));
            }
        }
    }
    if out.is_empty() {
        "<none>".to_string()
    } else if out.len() > 3 {
        format!("{} + {} more...", out[..3].join(","), out.len() - 3)
    } else {
        out.join(",")
    }
}

fn csr_condition(object: &Value) -> String {
    let conditions: Vec<&str> = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .collect();
    let mut shown: Vec<String> = conditions.iter().map(|c| (*c).to_string()).collect();
    if object["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
    {
        shown.push("Issued".to_string());
    }
    if shown.is_empty() {
        "Pending".to_string()
    } else {
        shown.join(",")
    }
}

fn role_ref(object: &Value) -> String {
    format!(
        "{}/{}",
        object["roleRef"]["kind"].as_str().unwrap_or_default(),
        object["roleRef"]["name"].as_str().unwrap_or_default()
    )
}

fn subjects(object: &Value, kind: &str) -> String {
    let names: Vec<String> = object["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == kind)
        .map(|s| match (kind, s["namespace"].as_str()) {
            ("ServiceAccount", Some(ns)) => {
                format!("{ns}/{}", s["name"].as_str().unwrap_or_default())
            }
            _ => s["name"].as_str().unwrap_or_default().to_string(),
        })
        .collect();
    names.join(", ")
}

fn ready_count(ready: &Value, wanted: &Value) -> String {
    format!(
        "{}/{}",
        ready.as_i64().unwrap_or(0),
        wanted.as_i64().unwrap_or(0)
    )
}

fn event_object(object: &Value) -> String {
    let o = &object["involvedObject"];
    format!(
        "{}/{}",
        o["kind"].as_str().unwrap_or_default().to_ascii_lowercase(),
        o["name"].as_str().unwrap_or_default()
    )
}

/// A simple JSONPath (`.a.b`, `.a[0].b`, `.a['x.y']`) evaluated against an object.
pub fn simple_json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = object;
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            current = current.get(&after[..end])?;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = after[..end].trim_matches(['\'', '"']);
            current = match inner.parse::<usize>() {
                Ok(i) => current.get(i)?,
                Err(_) => current.get(inner)?,
            };
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Some(current)
}

fn cell_of(value: Option<&Value>, kind: &str) -> Value {
    match value {
        None | Some(Value::Null) => Value::Null,
        Some(v) if kind == "date" => json!(age(v.as_str())),
        Some(Value::String(s)) => json!(s),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => v.clone(),
        Some(other) => json!(other.to_string()),
    }
}

/// Columns and cells for `served`'s objects.
/// The cells of one object's row.
type RowCells<'a> = Box<dyn Fn(&Value) -> Vec<Value> + 'a>;

fn layout(served: &Served) -> (Vec<Value>, RowCells<'_>) {
    let r = &served.resource;
    if let Some(version) = served.crd_version() {
        let custom: Vec<Value> = version["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut columns = vec![definition(&NAME)];
        let specs: Vec<(String, String)> = if custom.is_empty() {
            columns.push(definition(&AGE));
            vec![(
                ".metadata.creationTimestamp".to_string(),
                "date".to_string(),
            )]
        } else {
            custom
                .iter()
                .map(|c| {
                    columns.push(json!({
                        "name": c["name"], "type": c["type"].as_str().map(|t| if t == "date" { "string" } else { t }).unwrap_or("string"),
                        "format": c["format"].as_str().unwrap_or(""), "description": c["description"].as_str().unwrap_or(""),
                        "priority": c["priority"].as_i64().unwrap_or(0),
                    }));
                    (
                        c["jsonPath"].as_str().unwrap_or_default().to_string(),
                        c["type"].as_str().unwrap_or("string").to_string(),
                    )
                })
                .collect()
        };
        let cells = move |o: &Value| {
            let mut row = vec![json!(meta::name(o))];
            for (path, kind) in &specs {
                row.push(cell_of(simple_json_path(o, path), kind));
            }
            row
        };
        return (columns, Box::new(cells));
    }
    type Cells = fn(&Value) -> Vec<Value>;
    let (columns, cells): (Vec<Column>, Cells) = match (r.group.as_str(), r.plural.as_str()) {
        ("", "namespaces") => (vec![NAME, col("Status", "string", 0), AGE], |o| {
            vec![
                json!(meta::name(o)),
                json!(str_or(&o["status"]["phase"], "")),
                json!(created(o)),
            ]
        }),
        ("", "nodes") => (
            vec![
                NAME,
                col("Status", "string", 0),
                col("Roles", "string", 0),
                AGE,
                col("Version", "string", 0),
                col("Internal-IP", "string", 1),
                col("External-IP", "string", 1),
                col("OS-Image", "string", 1),
                col("Kernel-Version", "string", 1),
                col("Container-Runtime", "string", 1),
            ],
            |o| {
                let info = &o["status"]["nodeInfo"];
                vec![
                    json!(meta::name(o)),
                    json!(node_status(o)),
                    json!(node_roles(o)),
                    json!(created(o)),
                    json!(str_or(&info["kubeletVersion"], "")),
                    json!(node_address(o, "InternalIP")),
                    json!(node_address(o, "ExternalIP")),
                    json!(str_or(&info["osImage"], "<unknown>")),
                    json!(str_or(&info["kernelVersion"], "<unknown>")),
                    json!(str_or(&info["containerRuntimeVersion"], "<unknown>")),
                ]
            },
        ),
        ("", "configmaps") => (vec![NAME, col("Data", "integer", 0), AGE], |o| {
            vec![
                json!(meta::name(o)),
                json!(count(&o["data"]) + count(&o["binaryData"])),
                json!(created(o)),
            ]
        }),
        ("", "secrets") => (
            vec![
                NAME,
                col("Type", "string", 0),
                col("Data", "integer", 0),
                AGE,
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(str_or(&o["type"], "Opaque")),
                    json!(count(&o["data"])),
                    json!(created(o)),
                ]
            },
        ),
        ("", "serviceaccounts") => (vec![NAME, col("Secrets", "string", 0), AGE], |o| {
            vec![
                json!(meta::name(o)),
                json!(o["secrets"].as_array().map_or(0, Vec::len)),
                json!(created(o)),
            ]
        }),
        ("", "services") => (
            vec![
                NAME,
                col("Type", "string", 0),
                col("Cluster-IP", "string", 0),
                col("External-IP", "string", 0),
                col("Port(s)", "string", 0),
                AGE,
                col("Selector", "string", 1),
            ],
            |o| {
                let selector: Vec<String> = o["spec"]["selector"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect();
                vec![
                    json!(meta::name(o)),
                    json!(str_or(&o["spec"]["type"], "ClusterIP")),
                    json!(str_or(&o["spec"]["clusterIP"], "<none>")),
                    json!("<none>"),
                    json!(service_ports(o)),
                    json!(created(o)),
                    json!(if selector.is_empty() {
                        "<none>".to_string()
                    } else {
                        selector.join(",")
                    }),
                ]
            },
        ),
        ("", "endpoints") => (vec![NAME, col("Endpoints", "string", 0), AGE], |o| {
            vec![json!(meta::name(o)), json!(endpoints(o)), json!(created(o))]
        }),
        ("", "events") | ("events.k8s.io", "events") => (
            vec![
                col("Last Seen", "string", 0),
                col("Type", "string", 0),
                col("Reason", "string", 0),
                col("Object", "string", 0),
                col("Message", "string", 0),
            ],
            |o| {
                let last = o["lastTimestamp"]
                    .as_str()
                    .or(o["deprecatedLastTimestamp"].as_str())
                    .or(o["eventTime"].as_str())
                    .or(o["metadata"]["creationTimestamp"].as_str());
                let object = if o["regarding"].is_object() {
                    let r = &o["regarding"];
                    format!(
                        "{}/{}",
                        r["kind"].as_str().unwrap_or_default().to_ascii_lowercase(),
                        r["name"].as_str().unwrap_or_default()
                    )
                } else {
                    event_object(o)
                };
                vec![
                    json!(age(last)),
                    json!(str_or(&o["type"], "")),
                    json!(str_or(&o["reason"], "")),
                    json!(object),
                    json!(
                        o["message"]
                            .as_str()
                            .or(o["note"].as_str())
                            .unwrap_or_default()
                    ),
                ]
            },
        ),
        ("", "pods") => (
            vec![
                NAME,
                col("Ready", "string", 0),
                col("Status", "string", 0),
                col("Restarts", "string", 0),
                AGE,
                col("IP", "string", 1),
                col("Node", "string", 1),
            ],
            |o| {
                let statuses = o["status"]["containerStatuses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
                let ready = statuses
                    .iter()
                    .filter(|s| s["ready"].as_bool() == Some(true))
                    .count();
                let restarts: i64 = statuses
                    .iter()
                    .filter_map(|s| s["restartCount"].as_i64())
                    .sum();
                vec![
                    json!(meta::name(o)),
                    json!(format!("{ready}/{total}")),
                    json!(str_or(&o["status"]["phase"], "Unknown")),
                    json!(restarts.to_string()),
                    json!(created(o)),
                    json!(str_or(&o["status"]["podIP"], "<none>")),
                    json!(str_or(&o["spec"]["nodeName"], "<none>")),
                ]
            },
        ),
        ("coordination.k8s.io", "leases") => (vec![NAME, col("Holder", "string", 0), AGE], |o| {
            vec![
                json!(meta::name(o)),
                json!(str_or(&o["spec"]["holderIdentity"], "")),
                json!(created(o)),
            ]
        }),
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") | ("apiextensions.k8s.io", _) => {
            (vec![NAME, col("Created At", "date", 0)], |o| {
                vec![
                    json!(meta::name(o)),
                    json!(
                        o["metadata"]["creationTimestamp"]
                            .as_str()
                            .unwrap_or_default()
                    ),
                ]
            })
        }
        ("rbac.authorization.k8s.io", _) => (
            vec![
                NAME,
                col("Role", "string", 0),
                AGE,
                col("Users", "string", 1),
                col("Groups", "string", 1),
                col("ServiceAccounts", "string", 1),
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(role_ref(o)),
                    json!(created(o)),
                    json!(subjects(o, "User")),
                    json!(subjects(o, "Group")),
                    json!(subjects(o, "ServiceAccount")),
                ]
            },
        ),
        ("apps", "deployments") => (
            vec![
                NAME,
                col("Ready", "string", 0),
                col("Up-to-date", "integer", 0),
                col("Available", "integer", 0),
                AGE,
            ],
            |o| {
                let s = &o["status"];
                vec![
                    json!(meta::name(o)),
                    json!(ready_count(&s["readyReplicas"], &o["spec"]["replicas"])),
                    json!(s["updatedReplicas"].as_i64().unwrap_or(0)),
                    json!(s["availableReplicas"].as_i64().unwrap_or(0)),
                    json!(created(o)),
                ]
            },
        ),
        ("apps", "daemonsets") => (
            vec![
                NAME,
                col("Desired", "integer", 0),
                col("Current", "integer", 0),
                col("Ready", "integer", 0),
                col("Up-to-date", "integer", 0),
                col("Available", "integer", 0),
                col("Node Selector", "string", 0),
                AGE,
            ],
            |o| {
                let s = &o["status"];
                let n = |k: &str| json!(s[k].as_i64().unwrap_or(0));
                let selector: Vec<String> = o["spec"]["template"]["spec"]["nodeSelector"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect();
                vec![
                    json!(meta::name(o)),
                    n("desiredNumberScheduled"),
                    n("currentNumberScheduled"),
                    n("numberReady"),
                    n("updatedNumberScheduled"),
                    n("numberAvailable"),
                    json!(if selector.is_empty() {
                        "<none>".to_string()
                    } else {
                        selector.join(",")
                    }),
                    json!(created(o)),
                ]
            },
        ),
        ("certificates.k8s.io", _) => (
            vec![
                NAME,
                AGE,
                col("SignerName", "string", 0),
                col("Requestor", "string", 0),
                col("RequestedDuration", "string", 0),
                col("Condition", "string", 0),
            ],
            |o| {
                let duration = o["spec"]["expirationSeconds"]
                    .as_i64()
                    .map_or_else(|| "<none>".to_string(), human_duration);
                vec![
                    json!(meta::name(o)),
                    json!(created(o)),
                    json!(str_or(&o["spec"]["signerName"], "")),
                    json!(str_or(&o["spec"]["username"], "")),
                    json!(duration),
                    json!(csr_condition(o)),
                ]
            },
        ),
        _ => (vec![NAME, AGE], |o| {
            vec![json!(meta::name(o)), json!(created(o))]
        }),
    };
    let columns = columns.iter().map(definition).collect();
    (columns, Box::new(cells))
}

fn definition(c: &Column) -> Value {
    json!({
        "name": c.name,
        "type": if c.kind == "date" { "string" } else { c.kind },
        "format": c.format,
        "description": c.description,
        "priority": c.priority,
    })
}

/// What a row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    /// From the `includeObject` query parameter (default `Metadata`).
    pub fn parse(value: Option<&str>) -> Include {
        match value {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

fn row(object: &Value, cells: Vec<Value>, include: Include) -> Value {
    let mut row = json!({"cells": cells});
    match include {
        Include::None => {}
        Include::Metadata => {
            let mut metadata = object["metadata"].clone();
            if let Some(m) = metadata.as_object_mut() {
                m.remove("managedFields");
            }
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": metadata,
            });
        }
        Include::Object => row["object"] = object.clone(),
    }
    row
}

/// The Table of `objects`, with the list's metadata.
pub fn table(served: &Served, objects: &[Value], list_metadata: Value, include: Include) -> Value {
    let (columns, cells) = layout(served);
    let rows: Vec<Value> = objects.iter().map(|o| row(o, cells(o), include)).collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources;

    fn served(plural: &str) -> Served {
        Served {
            resource: resources::builtins()
                .into_iter()
                .find(|r| r.plural == plural && r.group.is_empty())
                .unwrap(),
            crd: None,
        }
    }

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (700, "11m"),
            (3 * 3600 + 60, "3h1m"),
            (9 * 3600, "9h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ];
        for (s, text) in cases {
            assert_eq!(human_duration(s), text, "{s}");
        }
    }

    #[test]
    fn tables_have_the_kind_columns_and_partial_metadata() {
        let ns = json!({"metadata": {"name": "a", "creationTimestamp": meta::now(), "managedFields": []},
                        "status": {"phase": "Active"}});
        let t = table(
            &served("namespaces"),
            &[ns],
            json!({"resourceVersion": "5"}),
            Include::Metadata,
        );
        assert_eq!(t["columnDefinitions"][1]["name"], "Status");
        let cells = &t["rows"][0]["cells"];
        assert_eq!(
            (cells[0].as_str(), cells[1].as_str()),
            (Some("a"), Some("Active"))
        );
        assert!(cells[2].as_str().unwrap().ends_with('s'));
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert!(t["rows"][0]["object"]["metadata"]["managedFields"].is_null());
        let node = json!({"metadata": {"name": "n", "labels": {"node-role.kubernetes.io/worker": ""}},
                          "status": {"conditions": [{"type": "Ready", "status": "False"}], "nodeInfo": {"kubeletVersion": "v1.37.1"}}});
        let t = table(&served("nodes"), &[node], json!({}), Include::None);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(
            (cells[1].as_str(), cells[2].as_str(), cells[4].as_str()),
            (Some("NotReady"), Some("worker"), Some("v1.37.1"))
        );
        assert!(t["rows"][0]["object"].is_null());
    }

    #[test]
    fn custom_resources_use_their_printer_columns() {
        let crd = json!({"spec": {"group": "x.io", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                                                       {"name": "First", "type": "string", "jsonPath": ".spec.items[0].name"}]}]}});
        let served = Served {
            resource: resources::from_crd(&crd).remove(0),
            crd: Some(std::sync::Arc::new(crd)),
        };
        let w = json!({"metadata": {"name": "w"}, "spec": {"size": 3, "items": [{"name": "i0"}]}});
        let t = table(&served, &[w], json!({}), Include::Object);
        assert_eq!(t["rows"][0]["cells"], json!(["w", 3, "i0"]));
        assert_eq!(t["rows"][0]["object"]["spec"]["size"], 3);
        assert_eq!(
            simple_json_path(&json!({"a": {"b.c": 1}}), ".a['b.c']"),
            Some(&json!(1))
        );
    }
}
