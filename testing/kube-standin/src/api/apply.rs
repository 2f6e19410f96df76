//! Field ownership (`metadata.managedFields`) and server-side apply, approximated.
//!
//! What it does as Kubernetes does: every write records which manager set which fields
//! (`fieldsV1`, operation `Apply` or `Update`, per subresource); an apply creates the object
//! when it is absent; applied fields overwrite, fields the same manager applied before and no
//! longer applies are removed unless another manager owns them; a field another manager owns
//! with a different value is a `409 Conflict` naming manager and field, unless `force=true`,
//! which takes it over; an update takes ownership of the fields it changes.
//!
//! What it approximates: every list is atomic (owned and replaced whole), where Kubernetes
//! merges `x-kubernetes-list-type: map`/`set` lists element by element; a field's owner is
//! tracked down to the deepest object key, and `fieldsV1` written by a client with `k:`/`v:`/
//! `i:` keys counts as owning the whole list.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A field path: object keys from the root.
pub type Path = Vec<String>;

/// Leaf paths of an object.
pub type FieldSet = BTreeSet<Path>;

/// Which part of an object a write covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The main resource of a kind without a status subresource: everything.
    Whole,
    /// The main resource of a kind with a status subresource: all but `status`.
    Main,
    /// The status subresource: `status` only.
    Status,
}

impl Scope {
    fn subresource(self) -> Option<&'static str> {
        match self {
            Scope::Status => Some("status"),
            _ => None,
        }
    }
}

const UNTRACKED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

fn tracked(path: &[String], scope: Scope) -> bool {
    match path {
        [] => false,
        [first, ..] if first == "apiVersion" || first == "kind" => false,
        [first, second, ..] if first == "metadata" => {
            !UNTRACKED_METADATA.contains(&second.as_str()) && scope != Scope::Status
        }
        [first] if first == "metadata" => false,
        [first, ..] if first == "status" => scope != Scope::Main,
        _ => scope != Scope::Status,
    }
}

/// The leaf paths of `value` in `scope`: scalars, lists and empty objects.
pub fn leaves(value: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    collect(value, &mut Vec::new(), &mut out);
    out.retain(|p| tracked(p, scope));
    out
}

fn collect(value: &Value, path: &mut Path, out: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                path.push(k.clone());
                collect(v, path, out);
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

/// The value at `path`.
pub fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = value;
    for k in path {
        current = current.as_object()?.get(k)?;
    }
    Some(current)
}

fn remove(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = value;
    for k in parents {
        match current.as_object_mut().and_then(|m| m.get_mut(k)) {
            Some(next) => current = next,
            None => return,
        }
    }
    if let Some(map) = current.as_object_mut() {
        map.remove(last);
    }
}

/// `fieldsV1` for a set of paths.
pub fn to_fields_v1(fields: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut current = &mut root;
        for k in path {
            let entry = current.entry(format!("f:{k}")).or_insert_with(|| json!({}));
            if !entry.is_object() {
                *entry = json!({});
            }
            current = match entry.as_object_mut() {
                Some(m) => m,
                // Made an object just above.
                None => unreachable!("fieldsV1 entries are objects"),
            };
        }
    }
    Value::Object(root)
}

/// The paths of a `fieldsV1` value.
pub fn from_fields_v1(fields: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    walk_v1(fields, &mut Vec::new(), &mut out);
    out
}

fn walk_v1(node: &Value, path: &mut Path, out: &mut FieldSet) {
    let children: Vec<(&String, &Value)> = node
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
        .unwrap_or_default();
    let element_keys = node.as_object().is_some_and(|m| {
        m.keys()
            .any(|k| k.starts_with("k:") || k.starts_with("v:") || k.starts_with("i:"))
    });
    if (children.is_empty() || element_keys) && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (k, v) in children {
        path.push(k[2..].to_string());
        walk_v1(v, path, out);
        path.pop();
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

/// The entries of an object.
pub fn read(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_string(),
            operation: e["operation"].as_str().unwrap_or("Update").to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: e["time"].as_str().unwrap_or_default().to_string(),
            subresource: e["subresource"].as_str().map(str::to_string),
            fields: from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

/// Writes `entries` into the object's `metadata.managedFields` (dropping empty ones).
pub fn write(object: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    if !object.is_object() {
        return;
    }
    let metadata = super::meta::metadata_mut(object);
    if list.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata.insert("managedFields".into(), Value::Array(list));
    }
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn same_entry(e: &Entry, manager: &str, operation: &str, scope: Scope) -> bool {
    e.manager == manager
        && e.operation == operation
        && e.subresource.as_deref() == scope.subresource()
}

/// Records an update (`PUT`, `PATCH`, `POST`) by `manager`: it owns what it changed, which
/// others no longer own; fields that are gone are owned by nobody.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    scope: Scope,
) {
    let mut entries = old.map(read).unwrap_or_default();
    let present = leaves(new, Scope::Whole);
    let changed: FieldSet = leaves(new, scope)
        .into_iter()
        .filter(|p| old.and_then(|o| get(o, p)) != get(new, p))
        .collect();
    for e in &mut entries {
        e.fields.retain(|p| {
            present.iter().any(|q| q.starts_with(p) || p.starts_with(q))
                && !changed.iter().any(|c| overlaps(c, p))
        });
    }
    if !changed.is_empty() {
        let now = super::meta::now();
        match entries
            .iter_mut()
            .find(|e| same_entry(e, manager, "Update", scope))
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now;
                e.api_version = api_version.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".to_string(),
                api_version: api_version.to_string(),
                time: now,
                subresource: scope.subresource().map(str::to_string),
                fields: changed,
            }),
        }
    }
    write(new, &entries);
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    pub api_version: String,
    /// `.spec.replicas`
    pub field: String,
}

fn dotted(path: &[String]) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

fn merge(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

/// Server-side apply of `applied` by `manager` over `current` (absent: a create).
///
/// # Errors
/// The conflicts, when not forced.
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    scope: Scope,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = current.map(read).unwrap_or_default();
    let fields = leaves(applied, scope);
    let mut conflicts = Vec::new();
    for e in &mut entries {
        if same_entry(e, manager, "Apply", scope) {
            continue;
        }
        let mut taken = Vec::new();
        for p in &fields {
            for q in e.fields.iter().filter(|q| overlaps(p, q)) {
                let differs = current.and_then(|c| get(c, p)) != get(applied, p);
                if differs {
                    if force {
                        taken.push(q.clone());
                    } else {
                        conflicts.push(Conflict {
                            manager: e.manager.clone(),
                            api_version: e.api_version.clone(),
                            field: dotted(p),
                        });
                    }
                } else if e.operation == "Update" {
                    // Same value: both own it (shared ownership), nothing to take.
                }
            }
        }
        for q in taken {
            e.fields.remove(&q);
        }
    }
    if !conflicts.is_empty() {
        conflicts.sort_by(|a, b| (&a.field, &a.manager).cmp(&(&b.field, &b.manager)));
        conflicts.dedup();
        return Err(conflicts);
    }
    let mut result = current.cloned().unwrap_or_else(|| json!({}));
    let previous: FieldSet = entries
        .iter()
        .find(|e| same_entry(e, manager, "Apply", scope))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for p in previous.difference(&fields) {
        let owned_elsewhere = entries
            .iter()
            .filter(|e| !same_entry(e, manager, "Apply", scope))
            .any(|e| e.fields.iter().any(|q| overlaps(p, q)));
        let still_applied = fields.iter().any(|f| f.starts_with(p));
        if !owned_elsewhere && !still_applied {
            remove(&mut result, p);
        }
    }
    let mut body = applied.clone();
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in UNTRACKED_METADATA {
            if *key != "name" && *key != "namespace" {
                metadata.remove(*key);
            }
        }
    }
    match scope {
        Scope::Status => {
            if let Some(status) = body.get("status") {
                if !result["status"].is_object() {
                    result["status"] = json!({});
                }
                merge(&mut result["status"], status);
            }
        }
        _ => {
            if scope == Scope::Main
                && let Some(o) = body.as_object_mut()
            {
                o.remove("status");
            }
            merge(&mut result, &body);
        }
    }
    let now = super::meta::now();
    match entries
        .iter_mut()
        .find(|e| same_entry(e, manager, "Apply", scope))
    {
        Some(e) => {
            e.fields = fields;
            e.time = now;
            e.api_version = api_version.to_string();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Apply".to_string(),
            api_version: api_version.to_string(),
            time: now,
            subresource: scope.subresource().map(str::to_string),
            fields,
        }),
    }
    write(&mut result, &entries);
    Ok(result)
}

#[cfg(test)]
mod tests;
