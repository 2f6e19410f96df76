//! The three patch formats of `PATCH`: JSON patch (RFC 6902), JSON merge patch (RFC 7386)
//! and strategic merge patch (built-in kinds only, as in Kubernetes: lists merged by their
//! merge key where the Go types declare one, with the `$patch`, `$retainKeys`,
//! `$setElementOrder/` and `$deleteFromPrimitiveList/` directives).

use serde_json::{Map, Value};

/// Why a patch cannot be applied (the server answers 422 or 400 with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);

fn err(message: impl Into<String>) -> PatchError {
    PatchError(message.into())
}

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// The JSON merge patch that turns `from` into `to`.
pub fn merge_diff(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut patch = Map::new();
            for (k, v) in b {
                match a.get(k) {
                    Some(old) if old == v => {}
                    Some(old) => {
                        patch.insert(k.clone(), merge_diff(old, v));
                    }
                    None => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in a.keys() {
                if !b.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => to.clone(),
    }
}

// ------------------------------------------------------------------ JSON patch

fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn pointer_tokens(pointer: &str) -> Result<Vec<String>, PatchError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(err(format!(
            "invalid JSON pointer {pointer:?}: must start with '/'"
        )));
    };
    Ok(rest.split('/').map(unescape_token).collect())
}

fn array_index(
    token: &str,
    len: usize,
    allow_end: bool,
    pointer: &str,
) -> Result<usize, PatchError> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    let index: usize = if valid {
        token
            .parse()
            .map_err(|_| err(format!("invalid index in {pointer:?}")))?
    } else {
        return Err(err(format!("invalid index {token:?} in {pointer:?}")));
    };
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if index > max || (!allow_end && len == 0) {
        return Err(err(format!(
            "index {index} out of bounds in {pointer:?} (array of {len})"
        )));
    }
    Ok(index)
}

fn parent_mut<'a>(
    doc: &'a mut Value,
    tokens: &[String],
    pointer: &str,
) -> Result<&'a mut Value, PatchError> {
    let mut current = doc;
    for token in tokens {
        current = match current {
            Value::Object(map) => map
                .get_mut(token)
                .ok_or_else(|| err(format!("path {pointer:?}: {token:?} does not exist")))?,
            Value::Array(list) => {
                let len = list.len();
                let i = array_index(token, len, false, pointer)?;
                &mut list[i]
            }
            _ => {
                return Err(err(format!(
                    "path {pointer:?}: {token:?} is inside a value that is neither an object nor an array"
                )));
            }
        };
    }
    Ok(current)
}

fn get_pointer<'a>(doc: &'a Value, pointer: &str) -> Result<&'a Value, PatchError> {
    let tokens = pointer_tokens(pointer)?;
    let mut current = doc;
    for token in &tokens {
        current = match current {
            Value::Object(map) => map
                .get(token)
                .ok_or_else(|| err(format!("path {pointer:?} does not exist")))?,
            Value::Array(list) => &list[array_index(token, list.len(), false, pointer)?],
            _ => return Err(err(format!("path {pointer:?} does not exist"))),
        };
    }
    Ok(current)
}

fn add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), PatchError> {
    let tokens = pointer_tokens(pointer)?;
    let Some((last, parents)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents, pointer)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(list) => {
            let i = array_index(last, list.len(), true, pointer)?;
            list.insert(i, value);
            Ok(())
        }
        _ => Err(err(format!(
            "cannot add at {pointer:?}: the parent is not a container"
        ))),
    }
}

fn remove(doc: &mut Value, pointer: &str) -> Result<Value, PatchError> {
    let tokens = pointer_tokens(pointer)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err(err("cannot remove the whole document"));
    };
    match parent_mut(doc, parents, pointer)? {
        Value::Object(map) => map
            .remove(last)
            .ok_or_else(|| err(format!("cannot remove {pointer:?}: it does not exist"))),
        Value::Array(list) => {
            let i = array_index(last, list.len(), false, pointer)?;
            Ok(list.remove(i))
        }
        _ => Err(err(format!(
            "cannot remove {pointer:?}: the parent is not a container"
        ))),
    }
}

/// RFC 6902: `add`, `remove`, `replace`, `move`, `copy`, `test`, in order, all or nothing.
///
/// # Errors
/// A malformed operation, a path that does not exist, a failed `test`.
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Some(operations) = patch.as_array() else {
        return Err(err("a JSON patch must be an array of operations"));
    };
    let mut result = doc.clone();
    for (n, op) in operations.iter().enumerate() {
        let kind = op["op"]
            .as_str()
            .ok_or_else(|| err(format!("operation {n}: missing \"op\"")))?;
        let path = op["path"]
            .as_str()
            .ok_or_else(|| err(format!("operation {n}: missing \"path\"")))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| err(format!("operation {n} ({kind}): missing \"value\"")))
        };
        let from = || {
            op["from"]
                .as_str()
                .ok_or_else(|| err(format!("operation {n} ({kind}): missing \"from\"")))
        };
        match kind {
            "add" => add(&mut result, path, value()?)?,
            "remove" => {
                remove(&mut result, path)?;
            }
            "replace" => {
                get_pointer(&result, path)?;
                if path.is_empty() {
                    result = value()?;
                } else {
                    remove(&mut result, path)?;
                    add(&mut result, path, value()?)?;
                }
            }
            "move" => {
                let from = from()?;
                if path.starts_with(&format!("{from}/")) {
                    return Err(err(format!(
                        "operation {n}: cannot move {from:?} into its own child {path:?}"
                    )));
                }
                let moved = remove(&mut result, from)?;
                add(&mut result, path, moved)?;
            }
            "copy" => {
                let copied = get_pointer(&result, from()?)?.clone();
                add(&mut result, path, copied)?;
            }
            "test" => {
                let expected = value()?;
                let found = get_pointer(&result, path)?;
                if *found != expected {
                    return Err(err(format!(
                        "testing value {path} failed: found {found}, expected {expected}"
                    )));
                }
            }
            other => return Err(err(format!("operation {n}: unknown op {other:?}"))),
        }
    }
    Ok(result)
}

// ------------------------------------------------------------------ strategic merge patch

/// How a list field of a built-in kind merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// Replaced whole (the default).
    Replace,
    /// Elements merged by this key.
    MergeKey(&'static str),
    /// A list of scalars merged as a set.
    MergePrimitives,
}

/// The merge strategy of the list at `path` (field names; list elements as `[]`) of `kind`.
pub fn list_strategy(kind: &str, path: &[&str]) -> ListStrategy {
    use ListStrategy::{MergeKey, MergePrimitives, Replace};
    match path {
        ["metadata", "finalizers"] => return MergePrimitives,
        ["metadata", "ownerReferences"] => return MergeKey("uid"),
        _ => {}
    }
    // Pod specs: a Pod's, or a workload's template's.
    let pod_spec: Option<&[&str]> = match (kind, path) {
        ("Pod", ["spec", rest @ ..]) => Some(rest),
        ("Deployment" | "DaemonSet", ["spec", "template", "spec", rest @ ..]) => Some(rest),
        _ => None,
    };
    if let Some(rest) = pod_spec {
        return match rest {
            ["containers" | "initContainers" | "ephemeralContainers"] => MergeKey("name"),
            [
                "containers" | "initContainers" | "ephemeralContainers",
                "[]",
                field,
            ] => match *field {
                "ports" => MergeKey("containerPort"),
                "env" => MergeKey("name"),
                "volumeMounts" => MergeKey("mountPath"),
                "volumeDevices" => MergeKey("devicePath"),
                _ => Replace,
            },
            ["volumes"] | ["imagePullSecrets"] => MergeKey("name"),
            ["hostAliases"] => MergeKey("ip"),
            _ => Replace,
        };
    }
    match (kind, path) {
        ("Service", ["spec", "ports"]) => MergeKey("port"),
        ("ServiceAccount", ["secrets"]) => MergeKey("name"),
        ("ServiceAccount", ["imagePullSecrets"]) => MergeKey("name"),
        ("Node", ["status", "conditions"]) | ("Node", ["status", "addresses"]) => MergeKey("type"),
        (
            "Pod" | "Namespace" | "Deployment" | "DaemonSet" | "CertificateSigningRequest",
            ["status", "conditions"],
        ) => MergeKey("type"),
        ("Pod", ["status", "containerStatuses" | "initContainerStatuses"]) => MergeKey("name"),
        _ => Replace,
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVES: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `original`, a `kind` object.
///
/// # Errors
/// A directive that is not understood or applied to the wrong kind of value.
pub fn strategic_merge_patch(
    original: &Value,
    patch: &Value,
    kind: &str,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(err("a strategic merge patch must be an object"));
    };
    let mut result = original.clone();
    if !result.is_object() {
        result = Value::Object(Map::new());
    }
    merge_map(&mut result, patch, kind, &mut Vec::new())?;
    Ok(result)
}

fn merge_map(
    target: &mut Value,
    patch: &Map<String, Value>,
    kind: &str,
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    match patch.get(DIRECTIVE).and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove(DIRECTIVE);
            *target = Value::Object(replaced);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(err(format!("unknown patch type: {other}"))),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let retain: Option<Vec<String>> = patch.get(RETAIN_KEYS).map(|keys| {
        keys.as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect()
    });
    // Primitive deletions and element orders apply to their list after the merge.
    let mut orders = Vec::new();
    let mut deletions = Vec::new();
    for (key, value) in patch {
        if key == DIRECTIVE || key == RETAIN_KEYS {
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ORDER) {
            orders.push((field.to_string(), value.clone()));
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_PRIMITIVES) {
            deletions.push((field.to_string(), value.clone()));
            continue;
        }
        let Value::Object(map) = target else {
            break;
        };
        if value.is_null() {
            map.remove(key);
            continue;
        }
        path.push(key.clone());
        let slot = map.entry(key.clone()).or_insert(Value::Null);
        match value {
            Value::Object(inner) => {
                merge_map(slot, inner, kind, path)?;
                if slot.is_null() {
                    map.remove(key);
                }
            }
            Value::Array(items) => {
                let names: Vec<&str> = path.iter().map(String::as_str).collect();
                let strategy = list_strategy(kind, &names);
                merge_list(slot, items, strategy, kind, path)?;
            }
            other => *slot = other.clone(),
        }
        path.pop();
    }
    if let Value::Object(map) = target {
        for (field, values) in deletions {
            if let Some(Value::Array(list)) = map.get_mut(&field) {
                let remove: Vec<&Value> = values.as_array().into_iter().flatten().collect();
                list.retain(|v| !remove.contains(&v));
            }
        }
        for (field, order) in orders {
            path.push(field.clone());
            let names: Vec<&str> = path.iter().map(String::as_str).collect();
            let strategy = list_strategy(kind, &names);
            path.pop();
            if let Some(Value::Array(list)) = map.get_mut(&field) {
                reorder(list, &order, strategy);
            }
        }
        if let Some(retain) = retain {
            map.retain(|k, _| retain.contains(k));
        }
    }
    Ok(())
}

fn key_of<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    item.get(key)
}

fn merge_list(
    target: &mut Value,
    items: &[Value],
    strategy: ListStrategy,
    kind: &str,
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    // `[{"$patch": "replace"}, ...]` replaces whatever the strategy.
    let replace = items
        .iter()
        .any(|i| i.get(DIRECTIVE).and_then(Value::as_str) == Some("replace"));
    if replace || strategy == ListStrategy::Replace {
        let kept: Vec<Value> = items
            .iter()
            .filter(|i| i.get(DIRECTIVE).is_none())
            .cloned()
            .collect();
        *target = Value::Array(kept);
        return Ok(());
    }
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(list) = target else {
        return Ok(());
    };
    match strategy {
        ListStrategy::MergePrimitives => {
            for item in items {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
        ListStrategy::MergeKey(key) => {
            path.push("[]".to_string());
            for item in items {
                let Some(id) = key_of(item, key).cloned() else {
                    path.pop();
                    return Err(err(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                let position = list.iter().position(|e| key_of(e, key) == Some(&id));
                if item.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                    if let Some(p) = position {
                        list.remove(p);
                    }
                    continue;
                }
                let Value::Object(fields) = item else {
                    continue;
                };
                match position {
                    Some(p) => merge_map(&mut list[p], fields, kind, path)?,
                    None => {
                        let mut fresh = Value::Object(Map::new());
                        merge_map(&mut fresh, fields, kind, path)?;
                        list.push(fresh);
                    }
                }
            }
            path.pop();
        }
        ListStrategy::Replace => {}
    }
    Ok(())
}

fn reorder(list: &mut [Value], order: &Value, strategy: ListStrategy) {
    let Some(order) = order.as_array() else {
        return;
    };
    let rank = |item: &Value| -> usize {
        let probe = match strategy {
            ListStrategy::MergeKey(key) => item.get(key),
            _ => Some(item),
        };
        order
            .iter()
            .position(|o| match strategy {
                ListStrategy::MergeKey(key) => o.get(key) == probe,
                _ => Some(o) == probe,
            })
            .unwrap_or(usize::MAX)
    };
    // Stable: elements the order does not name keep their relative place at the end.
    list.sort_by_key(|item| rank(item));
}

#[cfg(test)]
mod tests;
