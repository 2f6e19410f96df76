//! The resources the API serves: the built-in ones our product and `kubectl` touch, and those
//! that CustomResourceDefinitions add; discovery documents built from them.

use serde_json::{Value, json};

/// One served resource (of one group version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The path segment: `configmaps`.
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Whether it has the status subresource (status kept apart from the rest).
    pub status: bool,
    /// Whether it is only created, never stored (the reviews): the answer is computed.
    pub review: bool,
    /// Categories (`all`) for `kubectl get all`.
    pub categories: Vec<String>,
}

impl Resource {
    /// `group/version`, or `version` for the core group.
    pub fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The `kind` of a list of it.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The storage prefix of its objects (all namespaces), as kube-apiserver lays out etcd:
    /// `/registry/<group>/<plural>/`.
    pub fn prefix(&self, root: &str) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{root}/{group}/{}/", self.plural)
    }

    /// The storage key of one object.
    pub fn key(&self, root: &str, namespace: Option<&str>, name: &str) -> String {
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!("{}{ns}/{name}", self.prefix(root)),
            None => format!("{}{name}", self.prefix(root)),
        }
    }

    /// The verbs discovery lists.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.review {
            vec!["create"]
        } else {
            vec![
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
        }
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
    review: bool,
}

const fn builtin(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        kind,
        plural,
        namespaced,
        short_names,
        status,
        review: false,
    }
}

const fn review(group: &'static str, kind: &'static str, plural: &'static str) -> Builtin {
    Builtin {
        group,
        version: "v1",
        kind,
        plural,
        namespaced: false,
        short_names: &[],
        status: false,
        review: true,
    }
}

/// The group of CustomResourceDefinitions.
pub const APIEXTENSIONS: &str = "apiextensions.k8s.io";

const BUILTINS: &[Builtin] = &[
    builtin("", "v1", "Namespace", "namespaces", false, &["ns"], true),
    builtin("", "v1", "ConfigMap", "configmaps", true, &["cm"], false),
    builtin("", "v1", "Secret", "secrets", true, &[], false),
    builtin(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        false,
    ),
    builtin("", "v1", "Service", "services", true, &["svc"], true),
    builtin("", "v1", "Endpoints", "endpoints", true, &["ep"], false),
    builtin("", "v1", "Node", "nodes", false, &["no"], true),
    builtin("", "v1", "Event", "events", true, &["ev"], false),
    builtin("", "v1", "Pod", "pods", true, &["po"], true),
    builtin(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        &["ev"],
        false,
    ),
    builtin(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        &[],
        false,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        false,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        false,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        false,
    ),
    builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        false,
    ),
    builtin(
        APIEXTENSIONS,
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        true,
    ),
    builtin(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        true,
    ),
    builtin("apps", "v1", "DaemonSet", "daemonsets", true, &["ds"], true),
    builtin(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
        &["csr"],
        true,
    ),
    review(
        "authentication.k8s.io",
        "SelfSubjectReview",
        "selfsubjectreviews",
    ),
    review(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
    ),
    review(
        "authorization.k8s.io",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
    ),
    review(
        "authorization.k8s.io",
        "SubjectAccessReview",
        "subjectaccessreviews",
    ),
    review("authentication.k8s.io", "TokenReview", "tokenreviews"),
];

/// The built-in resources.
pub fn builtins() -> Vec<Resource> {
    BUILTINS
        .iter()
        .map(|b| Resource {
            group: b.group.to_string(),
            version: b.version.to_string(),
            kind: b.kind.to_string(),
            plural: b.plural.to_string(),
            singular: b.kind.to_ascii_lowercase(),
            namespaced: b.namespaced,
            short_names: b.short_names.iter().map(|s| (*s).to_string()).collect(),
            status: b.status,
            review: b.review,
            categories: categories(b.group, b.plural)
                .iter()
                .map(|c| (*c).to_string())
                .collect(),
        })
        .collect()
}

/// The categories kube-apiserver gives a built-in resource in discovery: `all` for the
/// workloads and services `kubectl get all` lists, `api-extensions` for CRDs.
fn categories(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods" | "services" | "replicationcontrollers")
        | ("apps", "deployments" | "daemonsets" | "replicasets" | "statefulsets")
        | ("batch", "jobs" | "cronjobs")
        | ("autoscaling", "horizontalpodautoscalers") => &["all"],
        (APIEXTENSIONS, "customresourcedefinitions") => &["api-extensions"],
        _ => &[],
    }
}

/// The resources a CustomResourceDefinition serves (one per served version), if it is well
/// formed.
pub fn from_crd(crd: &Value) -> Vec<Resource> {
    let spec = &crd["spec"];
    let (Some(group), Some(plural), Some(kind)) = (
        spec["group"].as_str(),
        spec["names"]["plural"].as_str(),
        spec["names"]["kind"].as_str(),
    ) else {
        return Vec::new();
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = spec["names"]["singular"]
        .as_str()
        .map_or_else(|| kind.to_ascii_lowercase(), str::to_string);
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(|v| {
            Some(Resource {
                group: group.to_string(),
                version: v["name"].as_str()?.to_string(),
                kind: kind.to_string(),
                plural: plural.to_string(),
                singular: singular.clone(),
                namespaced,
                short_names: strings(&spec["names"]["shortNames"]),
                status: v["subresources"]["status"].is_object(),
                review: false,
                categories: strings(&spec["names"]["categories"]),
            })
        })
        .collect()
}

/// `/api`: the core group's versions.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}
