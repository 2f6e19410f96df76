//! What differs per kind, as kube-apiserver's registry strategies and validation do it: name
//! rules, defaults on create, which part an update may change, what increments
//! `metadata.generation`, the fields a field selector may use, and the validation the real
//! server applies to the fields our product and tests write. Validation is not the complete
//! Go validation of every field: the crate documentation lists what is checked.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use super::meta::{self, NameRule};
use super::registry::Served;
use super::selectors::{LabelSelector, field_value, valid_label_key, valid_label_value};
use super::status::Cause;

/// The name rule of a resource.
pub fn name_rule(served: &Served) -> NameRule {
    let r = &served.resource;
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "namespaces") => NameRule::Label,
        ("", "services") => NameRule::Label1035,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        ("", "events") | ("events.k8s.io", "events") => NameRule::Subdomain,
        _ => NameRule::Subdomain,
    }
}

/// Whether writes to the main resource keep the stored status (the status subresource owns
/// it).
pub fn status_kept_on_update(served: &Served) -> bool {
    served.resource.status
}

/// Whether `metadata.generation` is kept for this kind (incremented when the spec changes).
pub fn tracks_generation(served: &Served) -> bool {
    let r = &served.resource;
    served.crd.is_some()
        || matches!(
            (r.group.as_str(), r.plural.as_str()),
            ("apps", _) | ("apiextensions.k8s.io", _) | ("", "pods")
        )
}

/// The part of an object whose change bumps its generation: all but metadata and (where the
/// status subresource exists) status.
pub fn generation_relevant(served: &Served, object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(o) = copy.as_object_mut() {
        o.remove("metadata");
        o.remove("apiVersion");
        o.remove("kind");
        if served.resource.status {
            o.remove("status");
        }
    }
    copy
}

/// Whether the status is dropped on create (the status subresource owns it, and the real
/// strategy resets it).
fn status_reset_on_create(served: &Served) -> bool {
    let r = &served.resource;
    if served.crd.is_some() {
        return r.status;
    }
    matches!(
        (r.group.as_str(), r.plural.as_str()),
        ("", "services") | ("apps", _) | ("certificates.k8s.io", _)
    )
}

/// Defaults on create, before validation.
pub fn default_on_create(served: &Served, object: &mut Value) {
    let r = &served.resource;
    if status_reset_on_create(served)
        && let Some(o) = object.as_object_mut()
    {
        o.remove("status");
    }
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "namespaces") => {
            let name = meta::name(object).to_string();
            let labels = meta::metadata_mut(object)
                .entry("labels")
                .or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
        }
        ("", "secrets") => {
            if object["type"].as_str().unwrap_or_default().is_empty() {
                object["type"] = json!("Opaque");
            }
            fold_string_data(object);
        }
        ("", "services") => default_service(object),
        ("", "pods") => {
            object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        ("apps", "deployments") => {
            default_if_absent(object, &["spec", "replicas"], json!(1));
            default_if_absent(object, &["spec", "revisionHistoryLimit"], json!(10));
            default_if_absent(object, &["spec", "progressDeadlineSeconds"], json!(600));
            default_if_absent(
                object,
                &["spec", "strategy"],
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
        }
        ("apps", "daemonsets") => {
            default_if_absent(object, &["spec", "revisionHistoryLimit"], json!(10));
            default_if_absent(
                object,
                &["spec", "updateStrategy"],
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
            );
        }
        ("certificates.k8s.io", _) => {
            object["status"] = json!({});
        }
        ("apiextensions.k8s.io", _) => {
            default_crd(object);
        }
        _ => {}
    }
}

/// Defaults on every write (create and update).
pub fn default_on_write(served: &Served, object: &mut Value) {
    let r = &served.resource;
    if let (Some(_), "secrets") = (Some(()), r.plural.as_str())
        && r.group.is_empty()
    {
        fold_string_data(object);
    }
    if r.group == "apiextensions.k8s.io" {
        default_crd_versions(object);
    }
}

fn default_if_absent(object: &mut Value, path: &[&str], value: Value) {
    let mut current = object;
    for (i, part) in path.iter().enumerate() {
        if !current.is_object() {
            return;
        }
        if i == path.len() - 1 {
            if current.get(*part).is_none_or(Value::is_null) {
                current[*part] = value;
            }
            return;
        }
        if current.get(*part).is_none_or(Value::is_null) {
            current[*part] = json!({});
        }
        current = &mut current[*part];
    }
}

/// `stringData` written into `data` (base64), as the Secret strategy does.
fn fold_string_data(object: &mut Value) {
    let Some(string_data) = object.as_object_mut().and_then(|o| o.remove("stringData")) else {
        return;
    };
    let Some(entries) = string_data.as_object() else {
        return;
    };
    if !object["data"].is_object() {
        object["data"] = json!({});
    }
    for (k, v) in entries {
        let text = v.as_str().unwrap_or_default();
        object["data"][k] = json!(B64.encode(text.as_bytes()));
    }
}

fn default_service(object: &mut Value) {
    default_if_absent(object, &["spec", "type"], json!("ClusterIP"));
    default_if_absent(object, &["spec", "sessionAffinity"], json!("None"));
    if let Some(ports) = object["spec"]["ports"].as_array_mut() {
        for port in ports {
            if port["protocol"].is_null() {
                port["protocol"] = json!("TCP");
            }
            if port["targetPort"].is_null() {
                port["targetPort"] = port["port"].clone();
            }
        }
    }
    object["status"] = json!({"loadBalancer": {}});
}

fn default_crd(object: &mut Value) {
    let finalizers = meta::metadata_mut(object)
        .entry("finalizers")
        .or_insert_with(|| json!([]));
    if let Some(list) = finalizers.as_array_mut() {
        let cleanup = json!(CRD_CLEANUP_FINALIZER);
        if !list.contains(&cleanup) {
            list.push(cleanup);
        }
    }
    default_crd_versions(object);
    let names = object["spec"]["names"].clone();
    let mut accepted = names.clone();
    if accepted["singular"].is_null()
        && let Some(kind) = names["kind"].as_str()
    {
        accepted["singular"] = json!(kind.to_ascii_lowercase());
    }
    if accepted["listKind"].is_null()
        && let Some(kind) = names["kind"].as_str()
    {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    object["spec"]["names"] = accepted.clone();
    let stored: Vec<Value> = object["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .map(|v| v["name"].clone())
        .collect();
    let now = meta::now();
    object["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": stored,
    });
}

fn default_crd_versions(object: &mut Value) {
    if object["spec"]["conversion"].is_null() && object["spec"].is_object() {
        object["spec"]["conversion"] = json!({"strategy": "None"});
    }
}

/// The finalizer the server puts on every CRD: its objects are deleted before it goes.
pub const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The fields a field selector may name for this resource, with the object's values.
/// `None` means the field is not supported for the resource.
pub fn selectable_fields(served: &Served, object: &Value) -> Vec<(String, String)> {
    let r = &served.resource;
    let mut names: Vec<String> = vec!["metadata.name".into(), "metadata.namespace".into()];
    let extra: &[&str] = match (r.group.as_str(), r.plural.as_str()) {
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "services") => &["spec.clusterIP", "spec.type"],
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("certificates.k8s.io", _) => &["spec.signerName"],
        _ => &[],
    };
    names.extend(extra.iter().map(|s| (*s).to_string()));
    if let Some(version) = served.crd_version() {
        for field in version["selectableFields"].as_array().into_iter().flatten() {
            if let Some(path) = field["jsonPath"].as_str() {
                names.push(path.trim_start_matches('.').to_string());
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let value = match name.as_str() {
                "spec.unschedulable" | "spec.hostNetwork" => {
                    field_value(object, &name).unwrap_or_else(|| "false".to_string())
                }
                "source" => field_value(object, "source.component").unwrap_or_default(),
                _ => field_value(object, &name).unwrap_or_default(),
            };
            (name, value)
        })
        .collect()
}

/// Whether a field selector may name `field` on this resource.
pub fn field_supported(served: &Served, field: &str) -> bool {
    selectable_fields(served, &json!({}))
        .iter()
        .any(|(name, _)| name == field)
}

// ------------------------------------------------------------------ validation

fn check_string_map(causes: &mut Vec<Cause>, value: &Value, field: &str) {
    if value.is_null() {
        return;
    }
    let Some(map) = value.as_object() else {
        causes.push(Cause::type_invalid(field, value, "object"));
        return;
    };
    for (k, v) in map {
        if !v.is_string() {
            causes.push(Cause::type_invalid(&format!("{field}.{k}"), v, "string"));
        }
    }
}

/// Finalizers of the built-in kinds that need no domain prefix.
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// `core_kind`: Kubernetes' own kinds, whose finalizers must be standard or fully qualified
/// (custom resources and CRDs only need qualified names).
fn check_metadata(causes: &mut Vec<Cause>, object: &Value, core_kind: bool) {
    let metadata = &object["metadata"];
    check_string_map(causes, &metadata["annotations"], "metadata.annotations");
    if let Some(labels) = metadata["labels"].as_object() {
        for (k, v) in labels {
            if let Err(why) = valid_label_key(k) {
                causes.push(Cause::invalid("metadata.labels", &json!(k), &why));
            }
            match v.as_str() {
                Some(v) => {
                    if let Err(why) = valid_label_value(v) {
                        causes.push(Cause::invalid("metadata.labels", &json!(v), &why));
                    }
                }
                None => causes.push(Cause::type_invalid(
                    &format!("metadata.labels.{k}"),
                    v,
                    "string",
                )),
            }
        }
    } else if !metadata["labels"].is_null() {
        causes.push(Cause::type_invalid(
            "metadata.labels",
            &metadata["labels"],
            "object",
        ));
    }
    if let Some(finalizers) = metadata["finalizers"].as_array() {
        for (i, f) in finalizers.iter().enumerate() {
            let at = format!("metadata.finalizers[{i}]");
            let Some(name) = f.as_str() else {
                causes.push(Cause::type_invalid(&at, f, "string"));
                continue;
            };
            if let Err(why) = valid_label_key(name) {
                causes.push(Cause::invalid(&at, f, &why));
            } else if core_kind && !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
                causes.push(Cause::invalid(
                    &at,
                    f,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
    if let Some(owners) = metadata["ownerReferences"].as_array() {
        for (i, owner) in owners.iter().enumerate() {
            for field in ["apiVersion", "kind", "name", "uid"] {
                if owner[field].as_str().unwrap_or_default().is_empty() {
                    causes.push(Cause::required(
                        &format!("metadata.ownerReferences[{i}].{field}"),
                        "",
                    ));
                }
            }
        }
    }
}

fn check_base64_map(causes: &mut Vec<Cause>, value: &Value, field: &str) {
    if let Some(map) = value.as_object() {
        for (k, v) in map {
            if !valid_config_key(k) {
                causes.push(Cause::invalid(&format!("{field}[{k}]"), &json!(k), "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"));
            }
            match v.as_str() {
                Some(text) if B64.decode(text).is_err() => causes.push(Cause::invalid(
                    &format!("{field}[{k}]"),
                    &json!("<secret contents redacted>"),
                    "illegal base64 data",
                )),
                Some(_) => {}
                None => causes.push(Cause::type_invalid(&format!("{field}[{k}]"), v, "string")),
            }
        }
    } else if !value.is_null() {
        causes.push(Cause::type_invalid(field, value, "object"));
    }
}

fn valid_config_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn required_string(causes: &mut Vec<Cause>, object: &Value, path: &[&str]) {
    let mut current = object;
    for p in path {
        current = &current[*p];
    }
    if current.as_str().unwrap_or_default().is_empty() {
        causes.push(Cause::required(&path.join("."), ""));
    }
}

fn check_rules(causes: &mut Vec<Cause>, rules: &Value, field: &str) {
    let Some(rules) = rules.as_array() else {
        if !rules.is_null() {
            causes.push(Cause::type_invalid(field, rules, "array"));
        }
        return;
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{field}[{i}]");
        if rule["verbs"].as_array().is_none_or(Vec::is_empty) {
            causes.push(Cause::required(
                &format!("{at}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        let has_urls = rule["nonResourceURLs"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        let has_resources = rule["resources"].as_array().is_some_and(|a| !a.is_empty());
        if has_urls && has_resources {
            causes.push(Cause::invalid(
                &format!("{at}.nonResourceURLs"),
                &rule["nonResourceURLs"],
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        if !has_urls && rule["apiGroups"].as_array().is_none_or(Vec::is_empty) {
            causes.push(Cause::required(
                &format!("{at}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if !has_urls && !has_resources {
            causes.push(Cause::required(
                &format!("{at}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

fn check_subjects(causes: &mut Vec<Cause>, object: &Value) {
    for (i, subject) in object["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("subjects[{i}]");
        match subject["kind"].as_str() {
            Some("ServiceAccount") => {
                if subject["name"].as_str().unwrap_or_default().is_empty() {
                    causes.push(Cause::required(&format!("{at}.name"), ""));
                }
            }
            Some("User" | "Group") => {
                if subject["name"].as_str().unwrap_or_default().is_empty() {
                    causes.push(Cause::required(&format!("{at}.name"), ""));
                }
            }
            other => causes.push(Cause::unsupported(
                &format!("{at}.kind"),
                other.unwrap_or_default(),
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

/// Validation of an object about to be stored (`old` for updates).
pub fn validate(served: &Served, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let r = &served.resource;
    check_metadata(
        &mut causes,
        object,
        served.crd.is_none() && r.group != "apiextensions.k8s.io",
    );
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "configmaps") => {
            check_string_map(&mut causes, &object["data"], "data");
            if let Some(data) = object["data"].as_object() {
                for k in data.keys() {
                    if !valid_config_key(k) {
                        causes.push(Cause::invalid(&format!("data[{k}]"), &json!(k), "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"));
                    }
                }
            }
            check_base64_map(&mut causes, &object["binaryData"], "binaryData");
            immutable_data(&mut causes, object, old, &["data", "binaryData"]);
        }
        ("", "secrets") => {
            check_base64_map(&mut causes, &object["data"], "data");
            if object["type"] == "bootstrap.kubernetes.io/token" {
                let id = decoded(&object["data"]["token-id"]);
                if let Some(id) = &id
                    && meta::name(object) != format!("bootstrap-token-{id}")
                {
                    causes.push(Cause::invalid(
                        "metadata.name",
                        &json!(meta::name(object)),
                        "bootstrap token secrets must be named bootstrap-token-<token-id>",
                    ));
                }
            }
            if let Some(old) = old
                && old["type"] != object["type"]
            {
                causes.push(Cause::invalid(
                    "type",
                    &object["type"],
                    "field is immutable",
                ));
            }
            immutable_data(&mut causes, object, old, &["data"]);
        }
        ("", "services") => {
            for (i, port) in object["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                match port["port"].as_i64() {
                    Some(p) if (1..=65535).contains(&p) => {}
                    Some(_) => causes.push(Cause::invalid(
                        &format!("spec.ports[{i}].port"),
                        &port["port"],
                        "must be between 1 and 65535, inclusive",
                    )),
                    None => causes.push(Cause::required(&format!("spec.ports[{i}].port"), "")),
                }
            }
            let kind = object["spec"]["type"].as_str().unwrap_or("ClusterIP");
            if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&kind) {
                causes.push(Cause::unsupported(
                    "spec.type",
                    kind,
                    &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
                ));
            }
            if let Some(old) = old {
                let before = old["spec"]["clusterIP"].as_str().unwrap_or_default();
                let after = object["spec"]["clusterIP"].as_str().unwrap_or_default();
                if !before.is_empty() && !after.is_empty() && before != after {
                    causes.push(Cause::invalid(
                        "spec.clusterIPs[0]",
                        &json!(after),
                        "may not change once set",
                    ));
                }
            }
        }
        ("coordination.k8s.io", "leases") => {
            let spec = &object["spec"];
            for field in ["leaseDurationSeconds", "leaseTransitions"] {
                if !spec[field].is_null() && !spec[field].is_i64() {
                    causes.push(Cause::type_invalid(
                        &format!("spec.{field}"),
                        &spec[field],
                        "integer",
                    ));
                }
            }
            if spec["leaseDurationSeconds"]
                .as_i64()
                .is_some_and(|d| d <= 0)
            {
                causes.push(Cause::invalid(
                    "spec.leaseDurationSeconds",
                    &spec["leaseDurationSeconds"],
                    "must be greater than 0",
                ));
            }
            for field in ["acquireTime", "renewTime"] {
                if let Some(t) = spec[field].as_str()
                    && meta::parse_time(t).is_none()
                {
                    causes.push(Cause::invalid(
                        &format!("spec.{field}"),
                        &spec[field],
                        "not a valid RFC 3339 time",
                    ));
                }
            }
        }
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
            check_rules(&mut causes, &object["rules"], "rules");
            if r.plural == "roles" {
                for (i, rule) in object["rules"].as_array().into_iter().flatten().enumerate() {
                    if rule["nonResourceURLs"]
                        .as_array()
                        .is_some_and(|a| !a.is_empty())
                    {
                        causes.push(Cause::invalid(
                            &format!("rules[{i}].nonResourceURLs"),
                            &rule["nonResourceURLs"],
                            "namespaced rules cannot apply to non-resource URLs",
                        ));
                    }
                }
            }
            if let Some(selectors) = object["aggregationRule"]["clusterRoleSelectors"].as_array() {
                for (i, s) in selectors.iter().enumerate() {
                    if let Err(e) = LabelSelector::from_object(s) {
                        causes.push(Cause::invalid(
                            &format!("aggregationRule.clusterRoleSelectors[{i}]"),
                            s,
                            &e.0,
                        ));
                    }
                }
            }
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            required_string(&mut causes, object, &["roleRef", "name"]);
            let kind = object["roleRef"]["kind"].as_str().unwrap_or_default();
            let allowed: &[&str] = if r.plural == "rolebindings" {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            if !allowed.contains(&kind) {
                causes.push(Cause::unsupported("roleRef.kind", kind, allowed));
            }
            if object["roleRef"]["apiGroup"].as_str() != Some("rbac.authorization.k8s.io") {
                causes.push(Cause::unsupported(
                    "roleRef.apiGroup",
                    object["roleRef"]["apiGroup"].as_str().unwrap_or_default(),
                    &["rbac.authorization.k8s.io"],
                ));
            }
            if let Some(old) = old
                && old["roleRef"] != object["roleRef"]
            {
                causes.push(Cause::invalid(
                    "roleRef",
                    &object["roleRef"],
                    "cannot change roleRef",
                ));
            }
            check_subjects(&mut causes, object);
        }
        ("apiextensions.k8s.io", _) => validate_crd(&mut causes, object, old),
        ("", "events") => {
            required_string(&mut causes, object, &["involvedObject", "name"]);
        }
        ("events.k8s.io", "events") => {
            if object["eventTime"].as_str().unwrap_or_default().is_empty() {
                causes.push(Cause::required("eventTime", ""));
            }
            if object["reportingController"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
            {
                causes.push(Cause::required("reportingController", ""));
            }
            if object["reportingInstance"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
            {
                causes.push(Cause::required("reportingInstance", ""));
            }
            for field in ["action", "reason"] {
                if object[field].as_str().unwrap_or_default().is_empty() {
                    causes.push(Cause::required(field, ""));
                }
            }
            let kind = object["type"].as_str().unwrap_or_default();
            if !["Normal", "Warning"].contains(&kind) {
                causes.push(Cause::unsupported("type", kind, &["Normal", "Warning"]));
            }
        }
        ("apps", "deployments" | "daemonsets") => {
            let selector = &object["spec"]["selector"];
            if !selector.is_object() {
                causes.push(Cause::required("spec.selector", ""));
            } else {
                match LabelSelector::from_object(selector) {
                    Ok(s) if s.is_empty() => causes.push(Cause::invalid(
                        "spec.selector",
                        selector,
                        "empty selector is invalid for deployment",
                    )),
                    Ok(s) => {
                        if !s.matches(object["spec"]["template"]["metadata"]["labels"].as_object())
                        {
                            causes.push(Cause::invalid(
                                "spec.template.metadata.labels",
                                &object["spec"]["template"]["metadata"]["labels"],
                                "`selector` does not match template `labels`",
                            ));
                        }
                    }
                    Err(e) => causes.push(Cause::invalid("spec.selector", selector, &e.0)),
                }
                if let Some(old) = old
                    && old["spec"]["selector"] != *selector
                {
                    causes.push(Cause::invalid(
                        "spec.selector",
                        selector,
                        "field is immutable",
                    ));
                }
            }
            if object["spec"]["template"]["spec"]["containers"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                causes.push(Cause::required("spec.template.spec.containers", ""));
            }
        }
        ("certificates.k8s.io", _) => {
            required_string(&mut causes, object, &["spec", "signerName"]);
            match object["spec"]["request"].as_str().map(|r| B64.decode(r)) {
                Some(Ok(pem)) if String::from_utf8_lossy(&pem).contains("CERTIFICATE REQUEST") => {}
                Some(_) => causes.push(Cause::invalid(
                    "spec.request",
                    &json!("<request>"),
                    "PEM block type must be CERTIFICATE REQUEST",
                )),
                None => causes.push(Cause::required("spec.request", "")),
            }
            if let Some(old) = old
                && old["spec"] != object["spec"]
            {
                causes.push(Cause::invalid(
                    "spec",
                    &json!("<spec>"),
                    "field is immutable",
                ));
            }
        }
        _ => {}
    }
    if let (Some(schema), true) = (served.schema(), served.crd.is_some()) {
        super::schema::validate(schema, object, &mut causes);
    }
    causes
}

fn decoded(value: &Value) -> Option<String> {
    value
        .as_str()
        .and_then(|t| B64.decode(t).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn immutable_data(causes: &mut Vec<Cause>, object: &Value, old: Option<&Value>, fields: &[&str]) {
    let Some(old) = old else {
        return;
    };
    if old["immutable"].as_bool() != Some(true) {
        return;
    }
    if object["immutable"].as_bool() != Some(true) {
        causes.push(Cause::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for field in fields {
        if old[*field] != object[*field] {
            causes.push(Cause::forbidden(
                field,
                "field is immutable when `immutable` is set",
            ));
        }
    }
}

fn validate_crd(causes: &mut Vec<Cause>, object: &Value, old: Option<&Value>) {
    let spec = &object["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    } else if !group.contains('.') {
        causes.push(Cause::invalid(
            "spec.group",
            &spec["group"],
            "should be a domain with at least one dot",
        ));
    } else if super::registry::builtin_group(group) {
        causes.push(Cause::invalid(
            "spec.group",
            &spec["group"],
            "is a group the server serves itself (the stand-in does not let a CRD replace it)",
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural", ""));
    }
    if spec["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        causes.push(Cause::required("spec.names.kind", ""));
    }
    for (field, value) in [
        ("plural", plural),
        (
            "singular",
            spec["names"]["singular"].as_str().unwrap_or_default(),
        ),
    ] {
        if !value.is_empty() && meta::check_name(value, NameRule::Label).is_some() {
            causes.push(Cause::invalid(&format!("spec.names.{field}"), &json!(value), "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"));
        }
    }
    let expected = format!("{plural}.{group}");
    if !plural.is_empty() && !group.is_empty() && meta::name(object) != expected {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(meta::name(object)),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = spec["scope"].as_str().unwrap_or_default();
    if !["Namespaced", "Cluster"].contains(&scope) {
        causes.push(Cause::unsupported(
            "spec.scope",
            scope,
            &["Cluster", "Namespaced"],
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::invalid(
            "spec.versions",
            &spec["versions"],
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v["storage"].as_bool() == Some(true))
            .count();
        if storage != 1 {
            causes.push(Cause::invalid(
                "spec.versions",
                &json!(format!("{storage} storage versions")),
                "must have exactly one version marked as storage version",
            ));
        }
        for (i, v) in versions.iter().enumerate() {
            if v["name"].as_str().unwrap_or_default().is_empty() {
                causes.push(Cause::required(&format!("spec.versions[{i}].name"), ""));
            }
            if v["served"].is_null() {
                causes.push(Cause::required(&format!("spec.versions[{i}].served"), ""));
            }
            if v["schema"]["openAPIV3Schema"].is_null() {
                causes.push(Cause::required(
                    &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    "schemas are required",
                ));
            }
        }
    }
    if let Some(old) = old {
        if old["spec"]["scope"] != spec["scope"] {
            causes.push(Cause::invalid(
                "spec.scope",
                &spec["scope"],
                "field is immutable",
            ));
        }
        if old["spec"]["group"] != spec["group"]
            || old["spec"]["names"]["plural"] != spec["names"]["plural"]
        {
            causes.push(Cause::invalid(
                "spec.names.plural",
                &spec["names"]["plural"],
                "field is immutable",
            ));
        }
    }
}

/// Object keys of a map, or none.
pub fn keys(value: &Value) -> Vec<String> {
    value
        .as_object()
        .map(Map::keys)
        .into_iter()
        .flatten()
        .cloned()
        .collect()
}
