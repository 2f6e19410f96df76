//! Custom resources against their CRD's structural OpenAPI v3 schema, as the apiextensions
//! server treats them: unknown fields pruned (and reported, for `fieldValidation`), defaults
//! applied, and values validated (type, `required`, `enum`, `nullable`, bounds, lengths,
//! `pattern`, item counts, `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-embedded-resource`). Not evaluated: `x-kubernetes-validations` (CEL rules),
//! `format`, `uniqueItems`, `multipleOf`, list types (`x-kubernetes-list-type`) and `oneOf`/
//! `anyOf`/`allOf`/`not`.

use serde_json::{Map, Value, json};

use super::status::{Cause, json_type};

/// Removes the fields the schema does not know (below the root's `apiVersion`, `kind` and
/// `metadata`); returns their paths.
pub fn prune(schema: &Value, object: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Value::Object(map) = object {
        let properties = schema["properties"].as_object();
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match properties.and_then(|p| p.get(&key)) {
                Some(sub) => {
                    if let Some(value) = map.get_mut(&key) {
                        prune_value(sub, value, &key, &mut unknown);
                    }
                }
                None if preserves(schema) => {}
                None => {
                    map.remove(&key);
                    unknown.push(key);
                }
            }
        }
    }
    unknown
}

fn preserves(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
}

fn prune_value(schema: &Value, value: &mut Value, path: &str, unknown: &mut Vec<String>) {
    if schema["x-kubernetes-embedded-resource"].as_bool() == Some(true) {
        // apiVersion, kind and metadata of an embedded object are kept as they are.
        if let Value::Object(map) = value {
            let embedded: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
                .iter()
                .filter_map(|k| map.remove(*k).map(|v| ((*k).to_string(), v)))
                .collect();
            prune_object(schema, map, path, unknown);
            map.extend(embedded);
        }
        return;
    }
    match value {
        Value::Object(map) => prune_object(schema, map, path, unknown),
        Value::Array(items) if schema["items"].is_object() => {
            for (i, item) in items.iter_mut().enumerate() {
                prune_value(&schema["items"], item, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

fn prune_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    unknown: &mut Vec<String>,
) {
    if let Some(properties) = schema["properties"].as_object() {
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            let child = format!("{path}.{key}");
            match properties.get(&key) {
                Some(sub) => {
                    if let Some(v) = map.get_mut(&key) {
                        prune_value(sub, v, &child, unknown);
                    }
                }
                None if preserves(schema) => {}
                None => {
                    map.remove(&key);
                    unknown.push(child);
                }
            }
        }
    } else if schema["additionalProperties"].is_object() {
        for (key, v) in map.iter_mut() {
            prune_value(
                &schema["additionalProperties"],
                v,
                &format!("{path}.{key}"),
                unknown,
            );
        }
    } else if !preserves(schema) && schema["additionalProperties"].as_bool() != Some(true) {
        // An object schema with neither properties nor additionalProperties keeps nothing,
        // unless it preserves unknown fields.
        if schema["type"] == "object" {
            for key in map.keys() {
                unknown.push(format!("{path}.{key}"));
            }
            map.clear();
        }
    }
}

/// Applies the schema's `default`s to absent fields of present objects.
pub fn apply_defaults(schema: &Value, object: &mut Value) {
    let Value::Object(map) = object else {
        return;
    };
    if let Some(properties) = schema["properties"].as_object() {
        for (key, sub) in properties {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if !map.contains_key(key)
                && let Some(default) = sub.get("default")
            {
                map.insert(key.clone(), default.clone());
            }
            if let Some(v) = map.get_mut(key) {
                match v {
                    Value::Object(_) => apply_defaults(sub, v),
                    Value::Array(items) => {
                        for item in items {
                            apply_defaults(&sub["items"], item);
                        }
                    }
                    _ => {}
                }
            }
        }
    } else if schema["additionalProperties"].is_object() {
        for v in map.values_mut() {
            apply_defaults(&schema["additionalProperties"], v);
        }
    }
}

/// Validates `object` (a custom resource) against `schema`, adding a cause per violation.
pub fn validate(schema: &Value, object: &Value, causes: &mut Vec<Cause>) {
    let Some(map) = object.as_object() else {
        return;
    };
    check_required(schema, map, "", causes);
    if let Some(properties) = schema["properties"].as_object() {
        for (key, value) in map {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(sub) = properties.get(key) {
                check(sub, value, key, causes);
            }
        }
    }
}

fn check_required(schema: &Value, map: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    for required in schema["required"].as_array().into_iter().flatten() {
        if let Some(name) = required.as_str()
            && !map.contains_key(name)
        {
            let field = if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            };
            causes.push(Cause::required(&field, ""));
        }
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    }
}

fn check(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    if value.is_null() {
        if schema["nullable"].as_bool() != Some(true)
            && let Some(expected) = schema["type"].as_str()
        {
            causes.push(Cause::type_invalid(path, value, expected));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"].as_bool() == Some(true) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            causes.push(Cause::type_invalid(path, value, "integer or string"));
        }
        return;
    }
    if let Some(expected) = schema["type"].as_str()
        && !type_matches(expected, value)
    {
        causes.push(Cause::type_invalid(path, value, expected));
        return;
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(value)
    {
        let supported: Vec<String> = options
            .iter()
            .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_string))
            .collect();
        let supported: Vec<&str> = supported.iter().map(String::as_str).collect();
        let shown = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        causes.push(Cause::unsupported(path, &shown, &supported));
    }
    match value {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            if let Some(max) = schema["maximum"].as_f64() {
                let exclusive = schema["exclusiveMaximum"].as_bool() == Some(true);
                if x > max || (exclusive && x >= max) {
                    let word = if exclusive {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    causes.push(Cause::invalid(
                        path,
                        value,
                        &format!("{path} in body should be {word} {}", schema["maximum"]),
                    ));
                }
            }
            if let Some(min) = schema["minimum"].as_f64() {
                let exclusive = schema["exclusiveMinimum"].as_bool() == Some(true);
                if x < min || (exclusive && x <= min) {
                    let word = if exclusive {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    causes.push(Cause::invalid(
                        path,
                        value,
                        &format!("{path} in body should be {word} {}", schema["minimum"]),
                    ));
                }
            }
        }
        Value::String(s) => {
            let length = s.chars().count() as u64;
            if let Some(max) = schema["maxLength"].as_u64()
                && length > max
            {
                causes.push(Cause {
                    field: path.to_string(),
                    reason: "FieldValueTooLong",
                    message: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = schema["minLength"].as_u64()
                && length < min
            {
                causes.push(Cause::invalid(
                    path,
                    value,
                    &format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(pattern) = schema["pattern"].as_str() {
                match regex::Regex::new(pattern) {
                    Ok(re) if !re.is_match(s) => causes.push(Cause::invalid(
                        path,
                        value,
                        &format!("{path} in body should match '{pattern}'"),
                    )),
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                causes.push(Cause {
                    field: path.to_string(),
                    reason: "FieldValueTooMany",
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                });
            }
            if let Some(min) = schema["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                causes.push(Cause::invalid(
                    path,
                    &json!(items.len()),
                    &format!("{path} in body should have at least {min} items"),
                ));
            }
            if schema["items"].is_object() {
                for (i, item) in items.iter().enumerate() {
                    check(&schema["items"], item, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(map) => {
            check_required(schema, map, path, causes);
            if let Some(max) = schema["maxProperties"].as_u64()
                && map.len() as u64 > max
            {
                causes.push(Cause {
                    field: path.to_string(),
                    reason: "FieldValueTooMany",
                    message: format!("Too many: {}: must have at most {max} items", map.len()),
                });
            }
            if let Some(properties) = schema["properties"].as_object() {
                for (key, v) in map {
                    if let Some(sub) = properties.get(key) {
                        check(sub, v, &format!("{path}.{key}"), causes);
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                for (key, v) in map {
                    check(
                        &schema["additionalProperties"],
                        v,
                        &format!("{path}.{key}"),
                        causes,
                    );
                }
            }
        }
        _ => {}
    }
    let _ = json_type;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "port": {"x-kubernetes-int-or-string": true},
                        "items": {"type": "array", "maxItems": 2, "items": {
                            "type": "object", "properties": {"n": {"type": "integer"}}}},
                    },
                },
                "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            },
        })
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported() {
        let mut o = json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "whatever": 1},
            "spec": {"size": 2, "bogus": 1, "extra": {"kept": true},
                     "items": [{"n": 1, "m": 2}], "labels": {"a": "b"}},
            "top": true,
        });
        let unknown = prune(&schema(), &mut o);
        assert_eq!(unknown, vec!["spec.bogus", "spec.items[0].m", "top"]);
        assert_eq!(o["spec"]["extra"], json!({"kept": true}));
        assert_eq!(o["metadata"]["whatever"], 1);
        assert_eq!(o["spec"]["labels"], json!({"a": "b"}));
    }

    #[test]
    fn defaults_fill_absent_fields() {
        let mut o = json!({"spec": {}});
        apply_defaults(&schema(), &mut o);
        assert_eq!(o["spec"], json!({"size": 3, "mode": "a"}));
        let mut absent = json!({});
        apply_defaults(&schema(), &mut absent);
        assert_eq!(absent, json!({}));
    }

    #[test]
    fn values_are_validated_with_the_real_messages() {
        let o = json!({"spec": {"size": 11, "mode": "c", "name": "ABCDEFG",
                                "items": [{"n": "x"}, {}, {}], "port": true}});
        let mut causes = Vec::new();
        validate(&schema(), &o, &mut causes);
        let text: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert!(text.contains(&"spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10".to_string()), "{text:?}");
        assert!(
            text.contains(
                &"spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"".to_string()
            ),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t.starts_with("spec.name: Too long")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t.contains("should match '^[a-z]+$'")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.items: Too many: 3")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.items[0].n: Invalid value: \"string\"")),
            "{text:?}"
        );
        assert!(text.iter().any(|t| t.starts_with("spec.port:")), "{text:?}");
        let mut causes = Vec::new();
        validate(&schema(), &json!({"metadata": {}}), &mut causes);
        assert_eq!(causes, vec![Cause::required("spec", "")]);
        let mut causes = Vec::new();
        validate(
            &schema(),
            &json!({"spec": {"size": 1, "port": "http"}}),
            &mut causes,
        );
        assert_eq!(causes, vec![]);
    }
}
