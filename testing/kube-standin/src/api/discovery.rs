//! What a client reads before it asks for objects: health, `/version`, discovery (legacy and
//! aggregated, as kubectl 1.30+ asks for it), OpenAPI v3 (paths with the `fieldValidation`
//! parameter, so `kubectl apply` validates on the server; schemas of custom resources), and
//! the service-account issuer's OIDC discovery.

use std::collections::BTreeMap;

use http::StatusCode;
use serde_json::{Value, json};

use super::registry::Served;
use super::resources::{self, Resource};
use super::status::ApiError;
use super::{Api, Call, Health, Reply};

/// Answers a health endpoint like the real server: checks `ping`, `etcd` (not for `/livez`)
/// and `poststarthook/rbac/bootstrap-roles` (not for `/livez`); `?verbose` lists them;
/// `/<endpoint>/<check>` asks for one. `None`: not a health path.
pub fn health_check(
    path: &str,
    verbose: bool,
    health: &Health,
    bootstrapped: bool,
) -> Option<(StatusCode, String)> {
    let trimmed = path.strip_prefix('/')?;
    let (endpoint, only) = match trimmed.split_once('/') {
        Some((endpoint, check)) => (endpoint, Some(check)),
        None => (trimmed, None),
    };
    if !matches!(endpoint, "healthz" | "livez" | "readyz") {
        return None;
    }
    let mut checks: Vec<(&str, Result<(), &str>)> = vec![("ping", Ok(()))];
    if endpoint != "livez" {
        checks.push((
            "etcd",
            if health.ready {
                Ok(())
            } else {
                Err(health.reason.as_str())
            },
        ));
        checks.push((
            "poststarthook/rbac/bootstrap-roles",
            if bootstrapped {
                Ok(())
            } else {
                Err("not finished")
            },
        ));
    }
    if let Some(only) = only {
        return Some(match checks.iter().find(|(name, _)| *name == only) {
            Some((_, Ok(()))) => (StatusCode::OK, "ok".to_string()),
            Some((name, Err(reason))) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {name} failed: {reason}\n"),
            ),
            None => (
                StatusCode::NOT_FOUND,
                format!("no such {endpoint} check: {only}\n"),
            ),
        });
    }
    let failed = checks.iter().any(|(_, r)| r.is_err());
    if !failed && !verbose {
        return Some((StatusCode::OK, "ok".to_string()));
    }
    let mut body = String::new();
    for (name, result) in &checks {
        match result {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(reason) => body.push_str(&format!("[-]{name} failed: {reason}\n")),
        }
    }
    if failed {
        body.push_str(&format!("{endpoint} check failed\n"));
        Some((StatusCode::INTERNAL_SERVER_ERROR, body))
    } else {
        body.push_str(&format!("{endpoint} check passed\n"));
        Some((StatusCode::OK, body))
    }
}

/// Kubernetes' version priority: GA before beta before alpha, higher numbers first, then
/// anything else alphabetically.
pub fn version_rank(version: &str) -> (u8, i64, i64, String) {
    let parse = |v: &str| -> Option<(u8, i64, i64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: i64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((0, -major, 0));
        }
        for (kind, rank) in [("beta", 1u8), ("alpha", 2u8)] {
            if let Some(n) = tail.strip_prefix(kind) {
                let minor: i64 = n.parse().ok()?;
                return Some((rank, -major, -minor));
            }
        }
        None
    };
    match parse(version) {
        Some((rank, major, minor)) => (rank, major, minor, String::new()),
        None => (3, 0, 0, version.to_string()),
    }
}

fn sorted_versions(versions: &mut [String]) {
    versions.sort_by_key(|v| version_rank(v));
}

/// The groups served, each with its versions in priority order.
fn groups(served: &[Served]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for s in served.iter().filter(|s| !s.resource.group.is_empty()) {
        let r = &s.resource;
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version.clone());
                }
            }
            None => groups.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    for (_, versions) in &mut groups {
        sorted_versions(versions);
    }
    groups
}

/// `/apis` (legacy form).
fn group_list(served: &[Served]) -> Value {
    let groups: Vec<Value> = groups(served)
        .into_iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_entry(r: &Resource) -> Value {
    let mut entry = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs(),
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    entry
}

fn subresources(r: &Resource) -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    let mut subs = Vec::new();
    if r.status {
        subs.push(("status", "", vec!["get", "patch", "update"]));
    }
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "nodes") => subs.push((
            "proxy",
            "NodeProxyOptions",
            vec!["create", "delete", "get", "patch", "update"],
        )),
        ("", "namespaces") => subs.push(("finalize", "", vec!["update"])),
        ("", "serviceaccounts") => subs.push(("token", "TokenRequest", vec!["create"])),
        ("certificates.k8s.io", _) => subs.push(("approval", "", vec!["get", "patch", "update"])),
        _ => {}
    }
    subs
}

/// `/api/v1`, `/apis/<group>/<version>` (legacy form).
fn resource_list(group_version: &str, served: &[Served]) -> Value {
    let mut list = Vec::new();
    for r in served
        .iter()
        .map(|s| &s.resource)
        .filter(|r| r.group_version() == group_version)
    {
        list.push(resource_entry(r));
        for (sub, kind, verbs) in subresources(r) {
            list.push(json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": if kind.is_empty() { r.kind.as_str() } else { kind },
                "verbs": verbs,
            }));
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list})
}

/// One group's aggregated discovery document (`apidiscovery.k8s.io/v2`).
fn aggregated_group(group: &str, versions: &[String], served: &[Served]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|version| {
            let resources: Vec<Value> = served
                .iter()
                .map(|s| &s.resource)
                .filter(|r| r.group == group && &r.version == version)
                .map(|r| {
                    let mut entry = json!({
                        "resource": r.plural,
                        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": r.singular,
                        "verbs": r.verbs(),
                    });
                    if !r.short_names.is_empty() {
                        entry["shortNames"] = json!(r.short_names);
                    }
                    if !r.categories.is_empty() {
                        entry["categories"] = json!(r.categories);
                    }
                    let subs: Vec<Value> = subresources(r)
                        .into_iter()
                        .map(|(sub, kind, verbs)| {
                            json!({
                                "subresource": sub,
                                "responseKind": {"group": if kind.is_empty() { r.group.as_str() } else { "" },
                                                 "version": r.version,
                                                 "kind": if kind.is_empty() { r.kind.as_str() } else { kind }},
                                "verbs": verbs,
                            })
                        })
                        .collect();
                    if !subs.is_empty() {
                        entry["subresources"] = json!(subs);
                    }
                    entry
                })
                .collect();
            json!({"version": version, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group}, "versions": versions})
}

fn wants_aggregated(call: &Call<'_>) -> bool {
    call.header("accept").is_some_and(|a| {
        a.split(',').next().is_some_and(|first| {
            first.contains("as=APIGroupDiscoveryList") && first.contains("g=apidiscovery.k8s.io")
        })
    })
}

fn aggregated_response(list: Value, version: &str) -> Reply {
    let body = list.to_string();
    let mut response = http::Response::new(super::full(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(&format!(
            "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
        ))
        .unwrap_or_else(|_| http::HeaderValue::from_static("application/json")),
    );
    response.headers_mut().insert(
        "x-varied-accept",
        http::HeaderValue::from_static(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        ),
    );
    Reply::Raw(response)
}

fn discovery_version(call: &Call<'_>) -> &'static str {
    let first = call
        .header("accept")
        .unwrap_or_default()
        .split(',')
        .next()
        .unwrap_or_default();
    if first.contains("v=v2beta1") {
        "v2beta1"
    } else {
        "v2"
    }
}

impl Api {
    pub(crate) async fn discovery(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let path = call.info.path.trim_end_matches('/');
        let served = self.registry.all_fresh(&*self.storage).await;
        let ok = |v: Value| Ok(Reply::Object(StatusCode::OK, v));
        match path {
            "/version" => ok(self.settings.version.clone()),
            "/api" => {
                if wants_aggregated(call) {
                    let version = discovery_version(call);
                    let list = json!({
                        "kind": "APIGroupDiscoveryList",
                        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
                        "metadata": {},
                        "items": [aggregated_group("", &["v1".to_string()], &served)],
                    });
                    return Ok(aggregated_response(list, version));
                }
                ok(resources::core_versions(&self.settings.server_address))
            }
            "/apis" => {
                if wants_aggregated(call) {
                    let version = discovery_version(call);
                    let items: Vec<Value> = groups(&served)
                        .iter()
                        .map(|(g, versions)| aggregated_group(g, versions, &served))
                        .collect();
                    let list = json!({
                        "kind": "APIGroupDiscoveryList",
                        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
                        "metadata": {},
                        "items": items,
                    });
                    return Ok(aggregated_response(list, version));
                }
                ok(group_list(&served))
            }
            "/api/v1" => ok(resource_list("v1", &served)),
            "/openapi/v2" => Err(ApiError::no_route()),
            "/openapi/v3" => ok(self.openapi_root(&served)),
            "/.well-known/openid-configuration" => self.openid_configuration(),
            "/openid/v1/jwks" => self.jwks(),
            _ => {
                if let Some(rest) = path.strip_prefix("/openapi/v3/") {
                    return self.openapi_group_version(rest, &served);
                }
                if let Some(rest) = path.strip_prefix("/apis/") {
                    let parts: Vec<&str> = rest.split('/').collect();
                    match parts.as_slice() {
                        [group] => {
                            if let Some((g, versions)) =
                                groups(&served).into_iter().find(|(g, _)| g == group)
                            {
                                let versions: Vec<Value> = versions
                                    .iter()
                                    .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                                    .collect();
                                return ok(
                                    json!({"kind": "APIGroup", "apiVersion": "v1", "name": g,
                                                 "versions": versions, "preferredVersion": versions[0]}),
                                );
                            }
                        }
                        [group, version] => {
                            let gv = format!("{group}/{version}");
                            if served.iter().any(|s| s.resource.group_version() == gv) {
                                return ok(resource_list(&gv, &served));
                            }
                        }
                        _ => {}
                    }
                }
                Err(ApiError::no_route())
            }
        }
    }

    fn openapi_root(&self, served: &[Served]) -> Value {
        let mut paths = BTreeMap::new();
        let mut gvs: Vec<String> = served.iter().map(|s| s.resource.group_version()).collect();
        gvs.sort();
        gvs.dedup();
        for gv in gvs {
            let key = if gv.contains('/') {
                format!("apis/{gv}")
            } else {
                format!("api/{gv}")
            };
            let hash = openapi_hash(served, &gv);
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
            );
        }
        json!({"paths": paths})
    }

    fn openapi_group_version(&self, rest: &str, served: &[Served]) -> Result<Reply, ApiError> {
        let gv = rest
            .strip_prefix("apis/")
            .or_else(|| rest.strip_prefix("api/"))
            .ok_or_else(ApiError::no_route)?;
        let of_gv: Vec<&Served> = served
            .iter()
            .filter(|s| s.resource.group_version() == gv)
            .collect();
        if of_gv.is_empty() {
            return Err(ApiError::no_route());
        }
        Ok(Reply::Object(StatusCode::OK, openapi_document(&of_gv)))
    }

    fn openid_configuration(&self) -> Result<Reply, ApiError> {
        let issuer = self.tokens.as_ref().ok_or_else(ApiError::no_route)?;
        Ok(Reply::Object(
            StatusCode::OK,
            json!({
                "issuer": issuer.issuer,
                "jwks_uri": format!("https://{}/openid/v1/jwks", self.settings.server_address),
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": [issuer.signer.public_key().algorithm.name()],
            }),
        ))
    }

    fn jwks(&self) -> Result<Reply, ApiError> {
        let issuer = self.tokens.as_ref().ok_or_else(ApiError::no_route)?;
        Ok(Reply::Object(
            StatusCode::OK,
            json!({"keys": [issuer.signer.public_key().jwk()]}),
        ))
    }
}

fn openapi_hash(served: &[Served], gv: &str) -> String {
    let document = openapi_document(
        &served
            .iter()
            .filter(|s| s.resource.group_version() == gv)
            .collect::<Vec<_>>(),
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, document.to_string().as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

fn query_parameter(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

/// The OpenAPI v3 document of one group version: every resource's paths with the query
/// parameters the real server declares (kubectl looks for `fieldValidation` on PATCH), and
/// the schemas of custom resources.
fn openapi_document(served: &[&Served]) -> Value {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for s in served {
        let r = &s.resource;
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let base = if r.group.is_empty() {
            format!("/api/{}", r.version)
        } else {
            format!("/apis/{}/{}", r.group, r.version)
        };
        let collection = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        let write = |verb: &str| {
            json!({
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [query_parameter("dryRun"), query_parameter("fieldManager"), query_parameter("fieldValidation")],
                "responses": {"200": {"description": "OK"}},
            })
        };
        let read = |verb: &str| {
            json!({
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}},
            })
        };
        if r.review {
            paths.insert(collection, json!({"post": write("post")}));
            continue;
        }
        paths.insert(
            collection.clone(),
            json!({"get": read("list"), "post": write("post"), "delete": read("deletecollection")}),
        );
        let mut patch = write("patch");
        if let Some(list) = patch["parameters"].as_array_mut() {
            list.push(query_parameter("force"));
        }
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": read("get"), "put": write("put"), "patch": patch, "delete": read("delete"),
            }),
        );
        if r.status {
            paths.insert(
                format!("{collection}/{{name}}/status"),
                json!({
                    "get": read("get"), "put": write("put"),
                }),
            );
        }
        if let Some(schema) = s.schema() {
            let name = format!("{}.{}.{}", reverse_domain(&r.group), r.version, r.kind);
            let mut schema = schema.clone();
            schema["x-kubernetes-group-version-kind"] = json!([gvk]);
            schemas.insert(name, schema);
        } else if let Some(schema) = super::openapi::builtin_schema(&r.group, &r.version, &r.kind) {
            schemas.insert(
                super::openapi::schema_name(&r.group, &r.version, &r.kind),
                schema,
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

fn reverse_domain(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut v: Vec<String> = ["v1beta1", "v2", "foo", "v1", "v1alpha1", "v10beta2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sorted_versions(&mut v);
        assert_eq!(
            v,
            vec!["v2", "v1", "v10beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn health_checks_name_what_failed() {
        let up = Health::ok();
        let down = Health {
            ready: false,
            reason: "connection refused".into(),
        };
        assert_eq!(
            health_check("/readyz", false, &up, true),
            Some((StatusCode::OK, "ok".into()))
        );
        assert_eq!(
            health_check("/readyz", true, &up, true),
            Some((StatusCode::OK, "[+]ping ok\n[+]etcd ok\n[+]poststarthook/rbac/bootstrap-roles ok\nreadyz check passed\n".into()))
        );
        assert_eq!(
            health_check("/healthz", false, &down, true).map(|(s, _)| s),
            Some(StatusCode::INTERNAL_SERVER_ERROR)
        );
        assert_eq!(
            health_check("/readyz", false, &up, false).map(|(s, _)| s),
            Some(StatusCode::INTERNAL_SERVER_ERROR)
        );
        assert_eq!(
            health_check("/livez", false, &down, false),
            Some((StatusCode::OK, "ok".into()))
        );
        assert_eq!(
            health_check("/readyz/etcd", false, &down, true).map(|(s, _)| s),
            Some(StatusCode::INTERNAL_SERVER_ERROR)
        );
        assert_eq!(
            health_check("/livez/etcd", false, &up, true).map(|(s, _)| s),
            Some(StatusCode::NOT_FOUND)
        );
        assert_eq!(health_check("/api", false, &up, true), None);
    }

    #[test]
    fn openapi_documents_declare_field_validation_on_patch() {
        let served: Vec<Served> = resources::builtins()
            .into_iter()
            .filter(|r| r.group_version() == "v1")
            .map(|resource| Served {
                resource,
                crd: None,
            })
            .collect();
        let refs: Vec<&Served> = served.iter().collect();
        let doc = openapi_document(&refs);
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert_eq!(
            doc["paths"]["/api/v1/namespaces/{name}"]["patch"]["x-kubernetes-group-version-kind"]["kind"],
            "Namespace"
        );
        assert!(doc["paths"]["/api/v1/namespaces"]["get"].is_object());
    }
}
