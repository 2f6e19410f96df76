//! The admission checks the stand-in runs after authorization, as kube-apiserver's plugins:
//! NodeRestriction (with `--enable-admission-plugins=NodeRestriction`: a node writes only its
//! own Node, only its own Lease in `kube-node-lease`, and no `node-restriction.kubernetes.io/`
//! labels) and RBAC's escalation prevention (a Role or binding may grant only what its author
//! holds, unless the author may `escalate` or `bind`). NamespaceLifecycle is in `rest`.

use serde_json::Value;

use super::Api;
use super::authn::User;
use super::authz::{self, Attributes};
use super::meta;
use super::registry::Served;
use super::status::{ApiError, ApiResult};

const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
const RESTRICTED_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The concrete permissions a rule grants, as attributes to check one by one.
fn expand(rule: &Value, namespace: &str) -> Vec<Attributes> {
    let verbs = strings(&rule["verbs"]);
    let mut out = Vec::new();
    let urls = strings(&rule["nonResourceURLs"]);
    if !urls.is_empty() {
        for verb in &verbs {
            for url in &urls {
                out.push(Attributes {
                    verb: verb.clone(),
                    resource_request: false,
                    path: url.clone(),
                    ..Attributes::default()
                });
            }
        }
        return out;
    }
    let names = strings(&rule["resourceNames"]);
    let names = if names.is_empty() {
        vec![String::new()]
    } else {
        names
    };
    for verb in &verbs {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                let (resource, subresource) = match resource.split_once('/') {
                    Some((r, s)) => (r.to_string(), s.to_string()),
                    None => (resource.clone(), String::new()),
                };
                for name in &names {
                    out.push(Attributes {
                        verb: verb.clone(),
                        resource_request: true,
                        namespace: namespace.to_string(),
                        group: group.clone(),
                        resource: resource.clone(),
                        subresource: subresource.clone(),
                        name: name.clone(),
                        ..Attributes::default()
                    });
                }
            }
        }
    }
    out
}

fn describe(rule: &Value) -> String {
    let list = |field: &str| {
        strings(&rule[field])
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if rule["nonResourceURLs"].is_array() {
        format!(
            "{{NonResourceURLs:[{}], Verbs:[{}]}}",
            list("nonResourceURLs"),
            list("verbs")
        )
    } else if rule["resourceNames"]
        .as_array()
        .is_some_and(|n| !n.is_empty())
    {
        format!(
            "{{APIGroups:[{}], Resources:[{}], ResourceNames:[{}], Verbs:[{}]}}",
            list("apiGroups"),
            list("resources"),
            list("resourceNames"),
            list("verbs")
        )
    } else {
        format!(
            "{{APIGroups:[{}], Resources:[{}], Verbs:[{}]}}",
            list("apiGroups"),
            list("resources"),
            list("verbs")
        )
    }
}

impl Api {
    /// The admission checks of a write by `user`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn admission(
        &self,
        user: &User,
        served: &Served,
        namespace: Option<&str>,
        name: &str,
        operation: &str,
        new: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let r = &served.resource;
        if self.settings.node_restriction
            && let Some(node) = authz::node_name(user)
        {
            match (r.group.as_str(), r.plural.as_str()) {
                ("", "nodes") => {
                    if name != node {
                        return Err(ApiError::forbidden(
                            "nodes",
                            "",
                            name,
                            &format!("node {node:?} is not allowed to modify node {name:?}"),
                        ));
                    }
                    let labels = |o: Option<&Value>| -> Vec<(String, Value)> {
                        o.and_then(meta::labels)
                            .map(|l| {
                                l.iter()
                                    .filter(|(k, _)| k.starts_with(RESTRICTED_LABEL_PREFIX))
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect()
                            })
                            .unwrap_or_default()
                    };
                    let (before, after) = (labels(old), labels(new));
                    if before != after {
                        let changed: Vec<String> = after
                            .iter()
                            .chain(before.iter())
                            .map(|(k, _)| k.clone())
                            .collect();
                        return Err(ApiError::forbidden(
                            "nodes",
                            "",
                            name,
                            &format!("is not allowed to modify labels: {}", changed.join(", ")),
                        ));
                    }
                }
                ("coordination.k8s.io", "leases") => {
                    if namespace != Some(NODE_LEASE_NAMESPACE) {
                        return Err(ApiError::forbidden(
                            "leases",
                            "coordination.k8s.io",
                            name,
                            &format!(
                                "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
                            ),
                        ));
                    }
                    if name != node {
                        return Err(ApiError::forbidden(
                            "leases",
                            "coordination.k8s.io",
                            name,
                            "can only access node lease with the same name as the requesting node",
                        ));
                    }
                }
                _ => {}
            }
        }
        if self.authz.rbac()
            && r.group == "rbac.authorization.k8s.io"
            && operation != "delete"
            && !user.in_group("system:masters")
            && let Some(new) = new
        {
            self.no_escalation(user, served, namespace, name, new, old)
                .await?;
        }
        Ok(())
    }

    async fn no_escalation(
        &self,
        user: &User,
        served: &Served,
        namespace: Option<&str>,
        name: &str,
        new: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let r = &served.resource;
        let ns = namespace.unwrap_or_default();
        let decide = |verb: &str, resource: &str, object: &str| Attributes {
            verb: verb.to_string(),
            resource_request: true,
            namespace: ns.to_string(),
            group: "rbac.authorization.k8s.io".to_string(),
            resource: resource.to_string(),
            name: object.to_string(),
            ..Attributes::default()
        };
        let (rules, permission): (Vec<Value>, Attributes) = match r.plural.as_str() {
            "roles" | "clusterroles" => {
                if old.is_some_and(|o| {
                    o["rules"] == new["rules"] && o["aggregationRule"] == new["aggregationRule"]
                }) {
                    return Ok(());
                }
                (
                    new["rules"].as_array().cloned().unwrap_or_default(),
                    decide("escalate", &r.plural, name),
                )
            }
            "rolebindings" | "clusterrolebindings" => {
                if old.is_some_and(|o| o["subjects"] == new["subjects"]) {
                    return Ok(());
                }
                let role = new["roleRef"]["name"].as_str().unwrap_or_default();
                let (kind, plural) = match new["roleRef"]["kind"].as_str() {
                    Some("Role") => ("Role", "roles"),
                    _ => ("ClusterRole", "clusterroles"),
                };
                let role_served = self
                    .registry
                    .builtin("rbac.authorization.k8s.io", plural)
                    .map(|resource| Served {
                        resource,
                        crd: None,
                    });
                let role_ns = if kind == "Role" { namespace } else { None };
                let rules = match role_served {
                    Some(s) => match self.read(&s, role_ns, role).await {
                        Ok((object, _)) => object["rules"].as_array().cloned().unwrap_or_default(),
                        Err(_) => Vec::new(),
                    },
                    None => Vec::new(),
                };
                let mut bind = decide("bind", plural, role);
                if kind == "ClusterRole" && r.plural == "clusterrolebindings" {
                    bind.namespace.clear();
                }
                (rules, bind)
            }
            _ => return Ok(()),
        };
        if self
            .authz
            .authorize(&*self.storage, &self.registry, user, &permission)
            .await
            .allowed
        {
            return Ok(());
        }
        let mut missing = Vec::new();
        for rule in &rules {
            let scoped_ns = if r.plural.starts_with("cluster") {
                ""
            } else {
                ns
            };
            let held = futures::future::join_all(expand(rule, scoped_ns).iter().map(|a| {
                self.authz
                    .authorize(&*self.storage, &self.registry, user, a)
            }))
            .await
            .into_iter()
            .all(|d| d.allowed);
            if !held {
                missing.push(describe(rule));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
        Err(ApiError::forbidden(
            &r.plural,
            &r.group,
            name,
            &format!(
                "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
                user.name,
                groups.join(" "),
                missing.join("\n")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rules_expand_into_every_permission_they_grant() {
        let rule =
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]});
        let expanded = expand(&rule, "ns");
        assert_eq!(expanded.len(), 4);
        assert!(
            expanded
                .iter()
                .any(|a| a.resource == "pods" && a.subresource == "log" && a.verb == "list")
        );
        let urls = json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/metrics"]});
        assert_eq!(expand(&urls, "").len(), 2);
        assert_eq!(
            describe(&rule),
            "{APIGroups:[\"\"], Resources:[\"pods\" \"pods/log\"], Verbs:[\"get\" \"list\"]}"
        );
    }
}
