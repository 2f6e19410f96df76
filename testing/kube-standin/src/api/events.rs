//! Events are one resource with two faces: `v1` Events and `events.k8s.io/v1` Events are kept
//! once, in the core form (as kube-apiserver stores them), and converted field by field
//! (`involvedObject` is `regarding`, `message` is `note`, ...) for the other group.

use serde_json::{Map, Value, json};

/// (core field, events.k8s.io field)
const FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn convert(object: &Value, to_events_group: bool, api_version: &str) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    out.insert(
        "metadata".into(),
        object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    );
    for (core, events) in FIELDS {
        let (from, to) = if to_events_group {
            (core, events)
        } else {
            (events, core)
        };
        if let Some(v) = object.get(*from).filter(|v| !v.is_null()) {
            out.insert((*to).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// A stored (core) Event as `events.k8s.io/v1` shows it.
pub fn to_events_group(core: &Value) -> Value {
    convert(core, true, "events.k8s.io/v1")
}

/// An `events.k8s.io/v1` Event in the stored (core) form.
pub fn to_core(event: &Value) -> Value {
    convert(event, false, "v1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_convert_both_ways_without_loss() {
        let event = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "n"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "c", "reportingInstance": "i",
            "action": "Probe", "reason": "Unreachable", "type": "Warning",
            "regarding": {"kind": "Hypervisor", "name": "h1"},
            "note": "cannot reach", "deprecatedCount": 2,
        });
        let core = to_core(&event);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "h1");
        assert_eq!(core["message"], "cannot reach");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["count"], 2);
        assert_eq!(to_events_group(&core), event);
    }
}
