use serde_json::json;

use super::*;

#[test]
fn merge_patches_merge_objects_delete_nulls_and_replace_the_rest() {
    let mut doc = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
    merge_patch(
        &mut doc,
        &json!({"a": {"b": null, "c": [3], "e": {"f": 1}}, "d": null}),
    );
    assert_eq!(doc, json!({"a": {"c": [3], "e": {"f": 1}}}));
    let from = json!({"a": 1, "b": {"c": 2, "d": 3}});
    let to = json!({"b": {"c": 2, "d": 4}, "e": 5});
    let diff = merge_diff(&from, &to);
    assert_eq!(diff, json!({"a": null, "b": {"d": 4}, "e": 5}));
    let mut applied = from.clone();
    merge_patch(&mut applied, &diff);
    assert_eq!(applied, to);
}

#[test]
fn json_patches_follow_rfc_6902() {
    let doc = json!({"a": [1, 2], "b": {"c~d": 1, "e/f": 2}});
    let patched = json_patch(
        &doc,
        &json!([
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "add", "path": "/a/0", "value": 0},
            {"op": "remove", "path": "/b/c~0d"},
            {"op": "replace", "path": "/b/e~1f", "value": 9},
            {"op": "copy", "from": "/a/3", "path": "/g"},
            {"op": "move", "from": "/g", "path": "/h"},
            {"op": "test", "path": "/h", "value": 3},
        ]),
    )
    .unwrap();
    assert_eq!(patched, json!({"a": [0, 1, 2, 3], "b": {"e/f": 9}, "h": 3}));
    // All or nothing, and clear about why.
    let e = json_patch(&doc, &json!([{"op": "test", "path": "/a/0", "value": 5}])).unwrap_err();
    assert!(e.0.contains("testing value /a/0 failed"), "{e}");
    assert!(json_patch(&doc, &json!([{"op": "remove", "path": "/x"}])).is_err());
    assert!(json_patch(&doc, &json!([{"op": "replace", "path": "/x", "value": 1}])).is_err());
    assert!(json_patch(&doc, &json!([{"op": "add", "path": "/a/5", "value": 1}])).is_err());
    assert!(json_patch(&doc, &json!([{"op": "add", "path": "/a/01", "value": 1}])).is_err());
    assert!(json_patch(&doc, &json!({"op": "add"})).is_err());
    assert!(json_patch(&doc, &json!([{"op": "move", "from": "/b", "path": "/b/x"}])).is_err());
}

fn deployment(containers: serde_json::Value) -> serde_json::Value {
    json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": containers}}}})
}

#[test]
fn strategic_patches_merge_lists_by_their_merge_key() {
    let original = deployment(json!([
        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "b:1"},
    ]));
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
        {"name": "b", "$patch": "delete"},
        {"name": "c", "image": "c:1"},
    ]}}}});
    let patched = strategic_merge_patch(&original, &patch, "Deployment").unwrap();
    assert_eq!(
        patched,
        deployment(json!([
            {"name": "a", "image": "a:2", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
            {"name": "c", "image": "c:1"},
        ]))
    );
    // A list without a merge key is replaced, as in a merge patch.
    let node = json!({"spec": {"taints": [{"key": "a"}]}});
    let patched =
        strategic_merge_patch(&node, &json!({"spec": {"taints": [{"key": "b"}]}}), "Node").unwrap();
    assert_eq!(patched, json!({"spec": {"taints": [{"key": "b"}]}}));
}

#[test]
fn strategic_directives_are_honoured() {
    let original = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}}});
    let patch = json!({"metadata": {
        "finalizers": ["c"],
        "$deleteFromPrimitiveList/finalizers": ["a"],
        "labels": {"$patch": "replace", "z": "3"},
    }});
    let patched = strategic_merge_patch(&original, &patch, "ConfigMap").unwrap();
    assert_eq!(
        patched,
        json!({"metadata": {"finalizers": ["b", "c"], "labels": {"z": "3"}}})
    );
    let patched = strategic_merge_patch(
        &json!({"data": {"a": "1", "b": "2"}, "x": 1}),
        &json!({"data": {"$retainKeys": ["a"], "a": "3"}}),
        "ConfigMap",
    )
    .unwrap();
    assert_eq!(patched, json!({"data": {"a": "3"}, "x": 1}));
    let svc =
        json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}});
    let patched = strategic_merge_patch(
        &svc,
        &json!({"spec": {"$setElementOrder/ports": [{"port": 443}, {"port": 80}], "ports": [{"port": 80, "name": "web"}]}}),
        "Service",
    )
    .unwrap();
    assert_eq!(
        patched,
        json!({"spec": {"ports": [{"port": 443, "name": "https"}, {"port": 80, "name": "web"}]}})
    );
    let deleted = strategic_merge_patch(
        &json!({"a": {"b": 1}, "c": 2}),
        &json!({"a": {"$patch": "delete"}}),
        "ConfigMap",
    )
    .unwrap();
    assert_eq!(deleted, json!({"c": 2}));
    assert!(strategic_merge_patch(&json!({}), &json!({"$patch": "bogus"}), "ConfigMap").is_err());
    assert!(
        strategic_merge_patch(
            &deployment(json!([])),
            &deployment(json!([{"image": "x"}])),
            "Deployment"
        )
        .is_err()
    );
}
