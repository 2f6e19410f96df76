use serde_json::json;

use super::*;

fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.to_string(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..User::default()
    }
}

fn resource(verb: &str, namespace: &str, group: &str, resource: &str, name: &str) -> Attributes {
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    Attributes {
        verb: verb.into(),
        resource_request: true,
        namespace: namespace.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

#[test]
fn rules_match_verbs_groups_resources_names_and_urls() {
    let rule = json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps", "pods/log"], "resourceNames": ["a"]});
    assert!(rule_allows(
        &rule,
        &resource("get", "n", "", "configmaps", "a")
    ));
    assert!(!rule_allows(
        &rule,
        &resource("get", "n", "", "configmaps", "b")
    ));
    assert!(
        !rule_allows(&rule, &resource("list", "n", "", "configmaps", "")),
        "names restrict lists"
    );
    assert!(rule_allows(
        &rule,
        &resource("get", "n", "", "pods/log", "a")
    ));
    assert!(!rule_allows(&rule, &resource("get", "n", "", "pods", "a")));
    assert!(!rule_allows(
        &rule,
        &resource("delete", "n", "", "configmaps", "a")
    ));
    assert!(!rule_allows(
        &rule,
        &resource("get", "n", "apps", "configmaps", "a")
    ));
    let star = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/scale"]});
    assert!(rule_allows(
        &star,
        &resource("update", "n", "apps", "deployments/scale", "x")
    ));
    assert!(!rule_allows(
        &star,
        &resource("update", "n", "apps", "deployments", "x")
    ));
    let urls = json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]});
    let path = |p: &str| Attributes {
        verb: "get".into(),
        path: p.into(),
        ..Attributes::default()
    };
    assert!(rule_allows(&urls, &path("/healthz")));
    assert!(rule_allows(&urls, &path("/api/v1")));
    assert!(!rule_allows(&urls, &path("/apis")));
}

fn snapshot() -> Snapshot {
    Snapshot {
        roles: vec![json!({"metadata": {"name": "reader", "namespace": "team"},
                           "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]})],
        cluster_roles: vec![
            json!({"metadata": {"name": "ns-viewer"}, "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["namespaces"]}]}),
            json!({"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}, "rules": []}),
            json!({"metadata": {"name": "part", "labels": {"agg": "yes"}}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]}]}),
        ],
        bindings: vec![
            json!({"metadata": {"name": "b", "namespace": "team"}, "roleRef": {"kind": "Role", "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "bot"}]}),
            json!({"metadata": {"name": "c", "namespace": "team"}, "roleRef": {"kind": "ClusterRole", "name": "ns-viewer"},
                   "subjects": [{"kind": "Group", "name": "devs"}]}),
            json!({"metadata": {"name": "d", "namespace": "team"}, "roleRef": {"kind": "Role", "name": "missing"},
                   "subjects": [{"kind": "User", "name": "eve"}]}),
        ],
        cluster_bindings: vec![
            json!({"metadata": {"name": "e"}, "roleRef": {"kind": "ClusterRole", "name": "agg"},
                                      "subjects": [{"kind": "User", "name": "ops"}]}),
        ],
    }
}

#[test]
fn rbac_follows_bindings_to_roles_in_their_scope() {
    let authz = Authorizer::new(vec![Mode::Node, Mode::Rbac]);
    let s = snapshot();
    let bot = user(
        "system:serviceaccount:team:bot",
        &["system:serviceaccounts"],
    );
    assert!(
        authz
            .decide(&s, &bot, &resource("get", "team", "", "secrets", "x"))
            .allowed
    );
    assert!(
        !authz
            .decide(&s, &bot, &resource("get", "other", "", "secrets", "x"))
            .allowed
    );
    let dev = user("dana", &["devs"]);
    // A ClusterRole bound in a namespace grants only there.
    assert!(
        authz
            .decide(&s, &dev, &resource("list", "team", "", "namespaces", ""))
            .allowed
    );
    assert!(
        !authz
            .decide(&s, &dev, &resource("list", "", "", "namespaces", ""))
            .allowed
    );
    // Aggregated rules count.
    assert!(
        authz
            .decide(
                &s,
                &user("ops", &[]),
                &resource("get", "", "", "nodes", "n")
            )
            .allowed
    );
    // A binding to a missing role says so.
    let d = authz.decide(
        &s,
        &user("eve", &[]),
        &resource("get", "team", "", "secrets", "x"),
    );
    assert!(!d.allowed);
    assert_eq!(
        d.reason,
        "RBAC: role.rbac.authorization.k8s.io \"missing\" not found"
    );
    // system:masters needs no binding.
    assert!(
        authz
            .decide(
                &s,
                &user("root", &["system:masters"]),
                &resource("delete", "", "", "nodes", "n")
            )
            .allowed
    );
}

#[test]
fn nodes_get_the_kubelet_rules_and_nothing_of_other_objects() {
    let authz = Authorizer::new(vec![Mode::Node, Mode::Rbac]);
    let node = user("system:node:w1", &["system:nodes"]);
    let s = Snapshot::default();
    assert!(
        authz
            .decide(&s, &node, &resource("update", "", "", "nodes/status", "w1"))
            .allowed
    );
    assert!(
        authz
            .decide(
                &s,
                &node,
                &resource(
                    "create",
                    "kube-node-lease",
                    "coordination.k8s.io",
                    "leases",
                    "w1"
                )
            )
            .allowed
    );
    let d = authz.decide(
        &s,
        &node,
        &resource("get", "kube-system", "", "secrets", "x"),
    );
    assert!(!d.allowed);
    assert_eq!(
        d.reason,
        "no relationship found between node 'w1' and this object"
    );
    assert_eq!(
        node_name(&user("system:node:w1", &[])),
        None,
        "the group is required"
    );
    assert_eq!(
        forbidden_message(&node, &resource("get", "kube-system", "", "secrets", "x")),
        "User \"system:node:w1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
}

#[test]
fn always_deny_stops_the_chain() {
    let authz = Authorizer::new(vec![Mode::AlwaysDeny, Mode::AlwaysAllow]);
    let d = authz.decide(
        &Snapshot::default(),
        &user("u", &[]),
        &resource("get", "", "", "nodes", ""),
    );
    assert_eq!(
        d,
        Decision {
            allowed: false,
            reason: "Everything is forbidden.".into()
        }
    );
}
