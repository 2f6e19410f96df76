//! Whether a user may do what a request asks, decided as kube-apiserver's authorizer chain
//! decides it: `system:masters` first (always allowed, whatever the modes), then each
//! `--authorization-mode` in order (`AlwaysAllow`, `AlwaysDeny`, `Node`, `RBAC`) until one
//! allows or denies; nobody allowing is a denial.
//!
//! RBAC reads the stored roles and bindings through a cache of at most a second, read again
//! before a denial is final, so a grant written through any replica takes effect at once.
//! The Node mode allows a node (`system:node:<name>` in `system:nodes`) what the kubelet
//! needs; NodeRestriction admission (see `admission`) then limits its writes to its own Node
//! and Lease.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::authn::User;
use super::registry::Registry;
use super::selectors::LabelSelector;
use super::storage::{ListOptions, Storage};

/// What a request asks to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// For resource requests.
    pub resource_request: bool,
    pub namespace: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// For non-resource requests.
    pub path: String,
}

/// An authorization mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    AlwaysDeny,
    Node,
    Rbac,
}

impl Mode {
    /// From an `--authorization-mode` value.
    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "AlwaysAllow" => Some(Mode::AlwaysAllow),
            "AlwaysDeny" => Some(Mode::AlwaysDeny),
            "Node" => Some(Mode::Node),
            "RBAC" => Some(Mode::Rbac),
            _ => None,
        }
    }
}

/// The outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Why not (or why), as the authorizers say it.
    pub reason: String,
}

/// The RBAC objects, as last read.
#[derive(Default, Clone)]
struct Snapshot {
    roles: Vec<Value>,
    cluster_roles: Vec<Value>,
    bindings: Vec<Value>,
    cluster_bindings: Vec<Value>,
}

const RBAC_CACHE: Duration = Duration::from_secs(1);

/// The authorizer chain.
pub struct Authorizer {
    modes: Vec<Mode>,
    cache: Mutex<Option<(Instant, Snapshot)>>,
}

enum Verdict {
    Allow(String),
    Deny(String),
    NoOpinion(String),
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether an RBAC rule covers `a`.
pub fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strings(&rule["verbs"]);
    if !verbs.iter().any(|v| *v == "*" || *v == a.verb) {
        return false;
    }
    if !a.resource_request {
        return strings(&rule["nonResourceURLs"]).iter().any(|u| {
            *u == "*"
                || *u == a.path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| a.path.starts_with(prefix))
        });
    }
    let groups = strings(&rule["apiGroups"]);
    if !groups.iter().any(|g| *g == "*" || *g == a.group) {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resources = strings(&rule["resources"]);
    let resource_ok = resources.iter().any(|r| {
        *r == "*"
            || *r == combined
            || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
    });
    if !resource_ok {
        return false;
    }
    let names = strings(&rule["resourceNames"]);
    names.is_empty() || names.iter().any(|n| *n == a.name)
}

fn subject_matches(subject: &Value, user: &User, binding_namespace: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => user.name == name,
        Some("Group") => user.in_group(name),
        Some("ServiceAccount") => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

impl Snapshot {
    fn cluster_role(&self, name: &str) -> Option<&Value> {
        self.cluster_roles
            .iter()
            .find(|r| r["metadata"]["name"] == name)
    }

    /// The rules of a ClusterRole, with those its aggregation rule selects.
    fn cluster_role_rules(&self, name: &str) -> Option<Vec<Value>> {
        let role = self.cluster_role(name)?;
        let mut rules: Vec<Value> = role["rules"].as_array().cloned().unwrap_or_default();
        for selector in role["aggregationRule"]["clusterRoleSelectors"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Ok(selector) = LabelSelector::from_object(selector) else {
                continue;
            };
            for other in &self.cluster_roles {
                if other["metadata"]["name"] != name
                    && selector.matches(other["metadata"]["labels"].as_object())
                {
                    rules.extend(other["rules"].as_array().cloned().unwrap_or_default());
                }
            }
        }
        Some(rules)
    }

    fn role_rules(&self, namespace: &str, name: &str) -> Option<Vec<Value>> {
        self.roles
            .iter()
            .find(|r| r["metadata"]["name"] == name && r["metadata"]["namespace"] == namespace)
            .map(|r| r["rules"].as_array().cloned().unwrap_or_default())
    }

    /// Every rule that applies to `user` in `namespace` (cluster-wide ones always), and the
    /// problems met (bindings to missing roles).
    fn rules_for(&self, user: &User, namespace: &str) -> (Vec<Value>, Vec<String>) {
        let mut rules = Vec::new();
        let mut problems = Vec::new();
        for b in &self.cluster_bindings {
            if !strings_any(&b["subjects"], |s| subject_matches(s, user, "")) {
                continue;
            }
            let role = b["roleRef"]["name"].as_str().unwrap_or_default();
            match self.cluster_role_rules(role) {
                Some(r) => rules.extend(r),
                None => problems.push(format!(
                    "clusterrole.rbac.authorization.k8s.io {role:?} not found"
                )),
            }
        }
        if !namespace.is_empty() {
            for b in self
                .bindings
                .iter()
                .filter(|b| b["metadata"]["namespace"] == namespace)
            {
                if !strings_any(&b["subjects"], |s| subject_matches(s, user, namespace)) {
                    continue;
                }
                let role = b["roleRef"]["name"].as_str().unwrap_or_default();
                let found = match b["roleRef"]["kind"].as_str() {
                    Some("Role") => self.role_rules(namespace, role),
                    _ => self.cluster_role_rules(role),
                };
                match found {
                    Some(r) => {
                        rules.extend(r.into_iter().filter(|r| r["nonResourceURLs"].is_null()))
                    }
                    None => problems.push(format!(
                        "{} {role:?} not found",
                        if b["roleRef"]["kind"] == "Role" {
                            "role.rbac.authorization.k8s.io"
                        } else {
                            "clusterrole.rbac.authorization.k8s.io"
                        }
                    )),
                }
            }
        }
        (rules, problems)
    }
}

fn strings_any(list: &Value, f: impl Fn(&Value) -> bool) -> bool {
    list.as_array().into_iter().flatten().any(f)
}

/// The node name of a node identity.
pub fn node_name(user: &User) -> Option<&str> {
    if !user.in_group("system:nodes") {
        return None;
    }
    user.name
        .strip_prefix("system:node:")
        .filter(|n| !n.is_empty())
}

/// What the Node authorizer grants a kubelet (the rules of its graph-free part).
fn node_rules() -> Vec<Value> {
    let r = |verbs: &[&str], groups: &[&str], resources: &[&str]| json!({"verbs": verbs, "apiGroups": groups, "resources": resources});
    vec![
        r(
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
            &[""],
            &["nodes"],
        ),
        r(&["patch", "update"], &[""], &["nodes/status"]),
        r(
            &["get", "create", "update", "patch", "delete"],
            &["coordination.k8s.io"],
            &["leases"],
        ),
        r(
            &["create", "patch", "update"],
            &["", "events.k8s.io"],
            &["events"],
        ),
        r(
            &["get", "list", "watch"],
            &[""],
            &["services", "endpoints", "pods"],
        ),
        r(&["create", "delete"], &[""], &["pods"]),
        r(&["patch", "update"], &[""], &["pods/status"]),
        r(&["create"], &[""], &["pods/eviction"]),
        r(
            &["create", "get", "list", "watch"],
            &["certificates.k8s.io"],
            &["certificatesigningrequests"],
        ),
        r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        r(
            &["create"],
            &["authorization.k8s.io"],
            &[
                "subjectaccessreviews",
                "selfsubjectaccessreviews",
                "selfsubjectrulesreviews",
            ],
        ),
        r(
            &["create"],
            &["authentication.k8s.io"],
            &["selfsubjectreviews"],
        ),
        r(
            &["get", "list", "watch"],
            &["node.k8s.io"],
            &["runtimeclasses"],
        ),
        r(
            &["get", "list", "watch"],
            &["storage.k8s.io"],
            &["csidrivers", "csinodes"],
        ),
    ]
}

impl Authorizer {
    /// The chain of `modes`.
    pub fn new(modes: Vec<Mode>) -> Authorizer {
        Authorizer {
            modes,
            cache: Mutex::new(None),
        }
    }

    /// Whether RBAC is one of the modes.
    pub fn rbac(&self) -> bool {
        self.modes.contains(&Mode::Rbac)
    }

    async fn snapshot(&self, storage: &dyn Storage, registry: &Registry, fresh: bool) -> Snapshot {
        if !fresh {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((at, snapshot)) = cache.as_ref()
                && at.elapsed() < RBAC_CACHE
            {
                return snapshot.clone();
            }
        }
        let root = registry.root();
        let read = |plural: &'static str| async move {
            let Some(resource) = registry.builtin("rbac.authorization.k8s.io", plural) else {
                return Ok(Vec::new());
            };
            storage
                .list(&resource.prefix(root), &ListOptions::default())
                .await
                .map(|l| l.items.into_iter().map(|(_, s)| s.value).collect())
        };
        let read = async {
            Ok::<_, crate::api::storage::StorageError>(Snapshot {
                roles: read("roles").await?,
                cluster_roles: read("clusterroles").await?,
                bindings: read("rolebindings").await?,
                cluster_bindings: read("clusterrolebindings").await?,
            })
        };
        match read.await {
            Ok(snapshot) => {
                *self.cache.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((Instant::now(), snapshot.clone()));
                snapshot
            }
            // The store does not answer: decide on what was read last, as kube-apiserver's
            // informer caches do while etcd is away (a health check must not turn into a
            // refusal because the store is down).
            Err(_) => self
                .cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map(|(_, s)| s.clone())
                .unwrap_or_default(),
        }
    }

    /// Forgets the cached RBAC objects (after one is written through this server).
    pub fn invalidate(&self) {
        *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn decide(&self, snapshot: &Snapshot, user: &User, a: &Attributes) -> Decision {
        if user.in_group("system:masters") {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let mut reasons = Vec::new();
        for mode in &self.modes {
            let verdict = match mode {
                Mode::AlwaysAllow => Verdict::Allow(String::new()),
                Mode::AlwaysDeny => Verdict::Deny("Everything is forbidden.".to_string()),
                Mode::Node => match node_name(user) {
                    None => Verdict::NoOpinion(String::new()),
                    Some(_) if node_rules().iter().any(|r| rule_allows(r, a)) => {
                        Verdict::Allow(String::new())
                    }
                    Some(node)
                        if a.resource_request
                            && matches!(
                                a.resource.as_str(),
                                "secrets"
                                    | "configmaps"
                                    | "persistentvolumeclaims"
                                    | "persistentvolumes"
                                    | "serviceaccounts"
                            ) =>
                    {
                        Verdict::NoOpinion(format!(
                            "no relationship found between node '{node}' and this object"
                        ))
                    }
                    Some(_) => Verdict::NoOpinion(String::new()),
                },
                Mode::Rbac => {
                    let namespace = if a.resource_request {
                        a.namespace.as_str()
                    } else {
                        ""
                    };
                    let (rules, problems) = snapshot.rules_for(user, namespace);
                    if rules.iter().any(|r| rule_allows(r, a)) {
                        Verdict::Allow(String::new())
                    } else if problems.is_empty() {
                        Verdict::NoOpinion(String::new())
                    } else {
                        Verdict::NoOpinion(format!("RBAC: {}", problems.join(", ")))
                    }
                }
            };
            match verdict {
                Verdict::Allow(reason) => {
                    return Decision {
                        allowed: true,
                        reason,
                    };
                }
                Verdict::Deny(reason) => {
                    reasons.push(reason);
                    return Decision {
                        allowed: false,
                        reason: reasons
                            .into_iter()
                            .filter(|r| !r.is_empty())
                            .collect::<Vec<_>>()
                            .join(", "),
                    };
                }
                Verdict::NoOpinion(reason) => reasons.push(reason),
            }
        }
        Decision {
            allowed: false,
            reason: reasons
                .into_iter()
                .filter(|r| !r.is_empty())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Decides `a` for `user`.
    pub async fn authorize(
        &self,
        storage: &dyn Storage,
        registry: &Registry,
        user: &User,
        a: &Attributes,
    ) -> Decision {
        let needs_rbac = self.rbac() && !user.in_group("system:masters");
        let snapshot = if needs_rbac {
            self.snapshot(storage, registry, false).await
        } else {
            Snapshot::default()
        };
        let decision = self.decide(&snapshot, user, a);
        if decision.allowed || !needs_rbac {
            return decision;
        }
        // A denial is final only against what is stored now.
        let fresh = self.snapshot(storage, registry, true).await;
        self.decide(&fresh, user, a)
    }

    /// The rules `user` has in `namespace` (SelfSubjectRulesReview): (resource rules,
    /// non-resource rules, incomplete).
    pub async fn rules(
        &self,
        storage: &dyn Storage,
        registry: &Registry,
        user: &User,
        namespace: &str,
    ) -> (Vec<Value>, Vec<Value>, bool) {
        let mut resource_rules = Vec::new();
        let mut url_rules = Vec::new();
        let mut incomplete = false;
        for mode in &self.modes {
            match mode {
                Mode::Rbac => {
                    let snapshot = self.snapshot(storage, registry, true).await;
                    let (rules, problems) = snapshot.rules_for(user, namespace);
                    incomplete |= !problems.is_empty();
                    for r in rules {
                        if r["nonResourceURLs"].is_array() {
                            url_rules.push(json!({"verbs": r["verbs"], "nonResourceURLs": r["nonResourceURLs"]}));
                        } else {
                            let mut entry = json!({"verbs": r["verbs"], "apiGroups": r["apiGroups"], "resources": r["resources"]});
                            if r["resourceNames"].is_array() {
                                entry["resourceNames"] = r["resourceNames"].clone();
                            }
                            resource_rules.push(entry);
                        }
                    }
                }
                // As in Kubernetes: a node's rules depend on what is bound to it, so they are
                // not enumerated; anyone else has none from this mode.
                Mode::Node if node_name(user).is_some() => {
                    resource_rules.extend(node_rules());
                    incomplete = true;
                }
                Mode::Node => {}
                Mode::AlwaysAllow => {
                    resource_rules
                        .push(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
                    url_rules.push(json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
                }
                _ => incomplete = true,
            }
        }
        (resource_rules, url_rules, incomplete)
    }
}

/// kube-apiserver's wording of a refusal: `User "u" cannot list resource "pods" in API group
/// "" in the namespace "n"`.
pub fn forbidden_message(user: &User, a: &Attributes) -> String {
    if !a.resource_request {
        return format!("User {:?} cannot {} path {:?}", user.name, a.verb, a.path);
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    if a.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            user.name, a.verb, a.group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            user.name, a.verb, a.group, a.namespace
        )
    }
}

#[cfg(test)]
mod tests;
