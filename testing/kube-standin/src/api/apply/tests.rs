use serde_json::json;

use super::*;

fn path(p: &str) -> Path {
    p.split('.').map(str::to_string).collect()
}

#[test]
fn fields_v1_round_trips_and_skips_server_fields() {
    let object = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "uid": "u", "labels": {"a": "b"}},
        "data": {"k": "v", "list": [1, 2]}, "empty": {},
    });
    let fields = leaves(&object, Scope::Whole);
    let expected: FieldSet = ["metadata.labels.a", "data.k", "data.list", "empty"]
        .iter()
        .map(|p| path(p))
        .collect();
    assert_eq!(fields, expected);
    let v1 = to_fields_v1(&fields);
    assert_eq!(v1["f:metadata"]["f:labels"]["f:a"], json!({}));
    assert_eq!(from_fields_v1(&v1), fields);
    // A client's element keys own the whole list.
    let foreign = json!({"f:spec": {"f:ports": {"k:{\"port\":80}": {".": {}}}}});
    assert_eq!(
        from_fields_v1(&foreign),
        [path("spec.ports")].into_iter().collect()
    );
    // Status scope and main scope split the object.
    let with_status = json!({"spec": {"a": 1}, "status": {"b": 2}});
    assert_eq!(
        leaves(&with_status, Scope::Main),
        [path("spec.a")].into_iter().collect()
    );
    assert_eq!(
        leaves(&with_status, Scope::Status),
        [path("status.b")].into_iter().collect()
    );
}

#[test]
fn apply_creates_then_removes_what_the_manager_stopped_applying() {
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                       "data": {"a": "1", "b": "2"}});
    let created = apply(None, &first, "oi", "v1", Scope::Whole, false).unwrap();
    assert_eq!(created["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "oi");
    assert_eq!(
        created["metadata"]["managedFields"][0]["operation"],
        "Apply"
    );
    // The same apply again changes nothing but the time.
    let again = apply(Some(&created), &first, "oi", "v1", Scope::Whole, false).unwrap();
    assert_eq!(again["data"], created["data"]);
    // Dropping b from the applied configuration removes it.
    let second = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                        "data": {"a": "3"}});
    let updated = apply(Some(&created), &second, "oi", "v1", Scope::Whole, false).unwrap();
    assert_eq!(updated["data"], json!({"a": "3"}));
}

#[test]
fn another_managers_field_conflicts_unless_forced_or_equal() {
    let applied = json!({"metadata": {"name": "x"}, "data": {"a": "1"}});
    let mut object = apply(None, &applied, "oi", "v1", Scope::Whole, false).unwrap();
    // kubectl edits a and adds c: it owns both now.
    let before = object.clone();
    object["data"]["a"] = json!("edited");
    object["data"]["c"] = json!("new");
    record_update(
        Some(&before),
        &mut object,
        "kubectl-edit",
        "v1",
        Scope::Whole,
    );
    let owners = read(&object);
    let kubectl = owners.iter().find(|e| e.manager == "kubectl-edit").unwrap();
    assert!(kubectl.fields.contains(&path("data.a")));
    assert!(
        owners.iter().all(|e| e.manager != "oi"),
        "the update took a over, and oi, owning nothing, has no entry: {owners:?}"
    );

    let conflicts = apply(Some(&object), &applied, "oi", "v1", Scope::Whole, false).unwrap_err();
    assert_eq!(
        conflicts,
        vec![Conflict {
            manager: "kubectl-edit".into(),
            api_version: "v1".into(),
            field: ".data.a".into()
        }]
    );
    // Applying the value the other manager set is no conflict; forcing takes the field.
    let same = json!({"metadata": {"name": "x"}, "data": {"a": "edited"}});
    assert!(apply(Some(&object), &same, "oi", "v1", Scope::Whole, false).is_ok());
    let forced = apply(Some(&object), &applied, "oi", "v1", Scope::Whole, true).unwrap();
    assert_eq!(forced["data"], json!({"a": "1", "c": "new"}));
    let owners = read(&forced);
    let kubectl = owners.iter().find(|e| e.manager == "kubectl-edit").unwrap();
    assert!(!kubectl.fields.contains(&path("data.a")));
    assert!(kubectl.fields.contains(&path("data.c")));
}

#[test]
fn a_field_owned_by_another_manager_stays_when_the_applier_drops_it() {
    let applied = json!({"metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}});
    let object = apply(None, &applied, "one", "v1", Scope::Whole, false).unwrap();
    let object = apply(Some(&object), &applied, "two", "v1", Scope::Whole, false).unwrap();
    let narrower = json!({"metadata": {"name": "x"}, "data": {"a": "1"}});
    let object = apply(Some(&object), &narrower, "one", "v1", Scope::Whole, false).unwrap();
    assert_eq!(
        object["data"],
        json!({"a": "1", "b": "2"}),
        "two still applies b"
    );
}

#[test]
fn status_applies_touch_only_status() {
    let object = json!({"spec": {"a": 1}, "status": {"ok": false, "old": 1}});
    let applied = json!({"metadata": {"name": "x"}, "spec": {"a": 2}, "status": {"ok": true}});
    let result = apply(Some(&object), &applied, "ctl", "v1", Scope::Status, false).unwrap();
    assert_eq!(result["spec"], json!({"a": 1}));
    assert_eq!(result["status"], json!({"ok": true, "old": 1}));
    assert_eq!(
        result["metadata"]["managedFields"][0]["subresource"],
        "status"
    );
}
