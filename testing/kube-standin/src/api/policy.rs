//! What kube-apiserver creates when it starts: the system namespaces and the bootstrap RBAC
//! policy (the roles and bindings of Kubernetes' `bootstrappolicy` that our product, the
//! stand-ins and `kubectl` rely on). Each object is created if absent and never overwritten,
//! so an administrator's changes stay.

use serde_json::{Value, json};

/// The namespaces the server makes.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The namespaces that may not be deleted.
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

const RBAC: &str = "rbac.authorization.k8s.io/v1";

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

fn named_rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources, "resourceNames": names})
}

fn urls(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"verbs": verbs, "nonResourceURLs": urls})
}

fn bootstrapping_labels() -> Value {
    json!({"kubernetes.io/bootstrapping": "rbac-defaults"})
}

fn cluster_role(name: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": RBAC, "kind": "ClusterRole",
        "metadata": {"name": name, "labels": bootstrapping_labels(),
                     "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    })
}

fn role(namespace: &str, name: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": RBAC, "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": bootstrapping_labels(),
                     "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    })
}

/// A subject: `User:name`, `Group:name` or `ServiceAccount:namespace/name`.
fn subject(spec: &str) -> Value {
    let (kind, name) = spec.split_once(':').unwrap_or(("User", spec));
    match kind {
        "ServiceAccount" => {
            let (ns, name) = name.split_once('/').unwrap_or(("kube-system", name));
            json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
        }
        _ => json!({"kind": kind, "apiGroup": "rbac.authorization.k8s.io", "name": name}),
    }
}

fn cluster_binding(name: &str, role: &str, subjects: &[&str]) -> Value {
    json!({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": bootstrapping_labels(),
                     "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects.iter().map(|s| subject(s)).collect::<Vec<_>>(),
    })
}

fn binding(namespace: &str, name: &str, role_kind: &str, role: &str, subjects: &[&str]) -> Value {
    json!({
        "apiVersion": RBAC, "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": bootstrapping_labels(),
                     "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects.iter().map(|s| subject(s)).collect::<Vec<_>>(),
    })
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const EVENTS: &[&str] = &["create", "patch", "update"];

/// The resources the `view`, `edit` and `admin` roles cover (without secrets for `view`).
fn workload_rules(verbs: &[&str], secrets: bool) -> Vec<Value> {
    let mut core = vec![
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "pods",
        "replicationcontrollers",
        "services",
        "serviceaccounts",
        "events",
    ];
    if secrets {
        core.push("secrets");
    }
    vec![
        rule(verbs, &[""], &core),
        rule(
            verbs,
            &["apps"],
            &["daemonsets", "deployments", "replicasets", "statefulsets"],
        ),
        rule(verbs, &["batch"], &["cronjobs", "jobs"]),
        rule(verbs, &["coordination.k8s.io"], &["leases"]),
        rule(verbs, &["events.k8s.io"], &["events"]),
    ]
}

/// The bootstrap ClusterRoles, ClusterRoleBindings, Roles and RoleBindings.
pub fn bootstrap_policy() -> Vec<Value> {
    let all_read_write: Vec<&str> = READ.iter().chain(WRITE.iter()).copied().collect();
    let mut view = workload_rules(READ, false);
    view.push(rule(READ, &[""], &["namespaces"]));
    let mut edit = workload_rules(&all_read_write, true);
    edit.push(rule(READ, &[""], &["namespaces"]));
    let mut admin = edit.clone();
    admin.push(rule(
        &all_read_write,
        &["rbac.authorization.k8s.io"],
        &["roles", "rolebindings"],
    ));
    admin.push(rule(
        &["create"],
        &["authorization.k8s.io"],
        &["localsubjectaccessreviews"],
    ));
    vec![
        // --- cluster roles
        cluster_role(
            "cluster-admin",
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        cluster_role("admin", admin),
        cluster_role("edit", edit),
        cluster_role("view", view),
        cluster_role(
            "system:discovery",
            vec![urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:basic-user",
            vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        cluster_role(
            "system:monitoring",
            vec![urls(
                &["get"],
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            vec![
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![urls(
                &["get"],
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
            )],
        ),
        cluster_role(
            "system:node-bootstrapper",
            vec![rule(
                &["create", "get", "list", "watch"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule(
                &["create"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule(
                &["create"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
        cluster_role(
            "system:node",
            vec![
                rule(
                    &[
                        "get", "list", "watch", "create", "update", "patch", "delete",
                    ],
                    &[""],
                    &["nodes"],
                ),
                rule(&["patch", "update"], &[""], &["nodes/status"]),
                rule(
                    &["create", "delete", "get", "patch", "update"],
                    &["coordination.k8s.io"],
                    &["leases"],
                ),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
                rule(READ, &[""], &["services", "endpoints", "pods"]),
            ],
        ),
        cluster_role(
            "system:node-proxier",
            vec![
                rule(&["list", "watch"], &[""], &["endpoints", "services"]),
                rule(READ, &[""], &["nodes"]),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
                rule(
                    &["list", "watch"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
            ],
        ),
        cluster_role(
            "system:kube-dns",
            vec![rule(&["list", "watch"], &[""], &["endpoints", "services"])],
        ),
        cluster_role(
            "system:kubelet-api-admin",
            vec![
                rule(&["get", "list", "watch"], &[""], &["nodes"]),
                rule(&["proxy"], &[""], &["nodes"]),
                rule(
                    &["*"],
                    &[""],
                    &[
                        "nodes/proxy",
                        "nodes/metrics",
                        "nodes/stats",
                        "nodes/log",
                        "nodes/pods",
                        "nodes/healthz",
                        "nodes/configz",
                        "nodes/checkpoint",
                    ],
                ),
            ],
        ),
        cluster_role(
            "system:kube-controller-manager",
            vec![
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
                rule(&["create"], &["coordination.k8s.io"], &["leases"]),
                named_rule(
                    &["get", "update"],
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["kube-controller-manager"],
                ),
                rule(&["create"], &[""], &["secrets", "serviceaccounts"]),
                rule(&["delete"], &[""], &["secrets"]),
                rule(
                    &["get"],
                    &[""],
                    &["configmaps", "namespaces", "secrets", "serviceaccounts"],
                ),
                rule(&["update"], &[""], &["secrets", "serviceaccounts"]),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
            ],
        ),
        cluster_role(
            "system:kube-scheduler",
            vec![
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
                rule(&["create"], &["coordination.k8s.io"], &["leases"]),
                named_rule(
                    &["get", "update"],
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["kube-scheduler"],
                ),
                rule(&["create"], &[""], &["endpoints"]),
                rule(&["delete", "get", "list", "watch"], &[""], &["pods"]),
                rule(&["create"], &[""], &["bindings", "pods/binding"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(
                    READ,
                    &[""],
                    &[
                        "nodes",
                        "namespaces",
                        "services",
                        "persistentvolumeclaims",
                        "persistentvolumes",
                        "replicationcontrollers",
                        "configmaps",
                    ],
                ),
                rule(READ, &["apps"], &["replicasets", "statefulsets"]),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:controller:node-controller",
            vec![
                rule(
                    &["delete", "get", "list", "patch", "update"],
                    &[""],
                    &["nodes"],
                ),
                rule(&["patch", "update"], &[""], &["nodes/status"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(&["delete", "list"], &[""], &["pods"]),
                rule(
                    &["get", "list", "watch"],
                    &["coordination.k8s.io"],
                    &["leases"],
                ),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
            ],
        ),
        cluster_role(
            "system:controller:service-account-controller",
            vec![
                rule(&["create"], &[""], &["serviceaccounts"]),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
            ],
        ),
        cluster_role(
            "system:controller:root-ca-cert-publisher",
            vec![
                rule(&["create", "update"], &[""], &["configmaps"]),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
            ],
        ),
        // --- cluster role bindings
        cluster_binding("cluster-admin", "cluster-admin", &["Group:system:masters"]),
        cluster_binding(
            "system:discovery",
            "system:discovery",
            &["Group:system:authenticated"],
        ),
        cluster_binding(
            "system:basic-user",
            "system:basic-user",
            &["Group:system:authenticated"],
        ),
        cluster_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["Group:system:authenticated", "Group:system:unauthenticated"],
        ),
        cluster_binding(
            "system:monitoring",
            "system:monitoring",
            &["Group:system:monitoring"],
        ),
        cluster_binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            &["Group:system:serviceaccounts"],
        ),
        cluster_binding(
            "system:node-proxier",
            "system:node-proxier",
            &["User:system:kube-proxy"],
        ),
        cluster_binding(
            "system:kube-dns",
            "system:kube-dns",
            &["ServiceAccount:kube-system/kube-dns"],
        ),
        cluster_binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            &["User:system:kube-controller-manager"],
        ),
        cluster_binding(
            "system:kube-scheduler",
            "system:kube-scheduler",
            &["User:system:kube-scheduler"],
        ),
        cluster_binding(
            "system:controller:node-controller",
            "system:controller:node-controller",
            &["ServiceAccount:kube-system/node-controller"],
        ),
        cluster_binding(
            "system:controller:service-account-controller",
            "system:controller:service-account-controller",
            &["ServiceAccount:kube-system/service-account-controller"],
        ),
        cluster_binding(
            "system:controller:root-ca-cert-publisher",
            "system:controller:root-ca-cert-publisher",
            &["ServiceAccount:kube-system/root-ca-cert-publisher"],
        ),
        // --- roles and bindings in kube-system
        role(
            "kube-system",
            "system:controller:token-cleaner",
            vec![
                rule(&["delete", "get", "list", "watch"], &[""], &["secrets"]),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
            ],
        ),
        binding(
            "kube-system",
            "system:controller:token-cleaner",
            "Role",
            "system:controller:token-cleaner",
            &["ServiceAccount:kube-system/token-cleaner"],
        ),
        role(
            "kube-system",
            "system:controller:bootstrap-signer",
            vec![rule(READ, &[""], &["secrets"])],
        ),
        binding(
            "kube-system",
            "system:controller:bootstrap-signer",
            "Role",
            "system:controller:bootstrap-signer",
            &["ServiceAccount:kube-system/bootstrap-signer"],
        ),
        role(
            "kube-public",
            "system:controller:bootstrap-signer",
            vec![
                rule(READ, &[""], &["configmaps"]),
                named_rule(&["update"], &[""], &["configmaps"], &["cluster-info"]),
                rule(EVENTS, &["", "events.k8s.io"], &["events"]),
            ],
        ),
        binding(
            "kube-public",
            "system:controller:bootstrap-signer",
            "Role",
            "system:controller:bootstrap-signer",
            &["ServiceAccount:kube-system/bootstrap-signer"],
        ),
        role(
            "kube-system",
            "extension-apiserver-authentication-reader",
            vec![named_rule(
                READ,
                &[""],
                &["configmaps"],
                &["extension-apiserver-authentication"],
            )],
        ),
        binding(
            "kube-system",
            "system::extension-apiserver-authentication-reader",
            "Role",
            "extension-apiserver-authentication-reader",
            &[
                "User:system:kube-controller-manager",
                "User:system:kube-scheduler",
            ],
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            vec![
                rule(&["watch"], &[""], &["configmaps"]),
                named_rule(
                    &["get", "update"],
                    &[""],
                    &["configmaps"],
                    &["kube-controller-manager"],
                ),
            ],
        ),
        binding(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            "Role",
            "system::leader-locking-kube-controller-manager",
            &["ServiceAccount:kube-system/kube-controller-manager"],
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            vec![
                rule(&["watch"], &[""], &["configmaps"]),
                named_rule(
                    &["get", "update"],
                    &[""],
                    &["configmaps"],
                    &["kube-scheduler"],
                ),
            ],
        ),
        binding(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            "Role",
            "system::leader-locking-kube-scheduler",
            &["ServiceAccount:kube-system/kube-scheduler"],
        ),
    ]
}

/// The namespace object of `name`, as the server creates it.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}
