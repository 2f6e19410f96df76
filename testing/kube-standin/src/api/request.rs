//! What a request asks for, read from its method, path and query as kube-apiserver's
//! `RequestInfoFactory` reads them: the verb (`get`, `list`, `watch`, `create`, `update`,
//! `patch`, `delete`, `deletecollection`), and for a resource request the group, version,
//! namespace, resource, name and subresource. Authorization and routing both start here.

use std::collections::BTreeMap;

use http::Method;

/// A request for a resource (as opposed to `/healthz`, `/version`, discovery).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourcePath {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    /// The plural, e.g. `configmaps`.
    pub resource: String,
    pub name: Option<String>,
    /// `status`, `proxy`, `token`, `finalize`, ...
    pub subresource: Option<String>,
    /// For `proxy`: the path after the subresource (with its leading slash).
    pub rest: String,
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// The verb as authorization sees it.
    pub verb: String,
    /// The path, without the query.
    pub path: String,
    /// Set for resource requests.
    pub resource: Option<ResourcePath>,
    /// The query parameters (last value wins).
    pub query: BTreeMap<String, String>,
}

impl RequestInfo {
    /// A query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    /// A boolean query parameter, read as kube-apiserver reads one ([`query_bool`]).
    pub fn flag(&self, name: &str) -> bool {
        query_bool(self.param(name))
    }
}

/// A boolean query parameter as kube-apiserver decodes one (apimachinery's
/// `Convert_Slice_string_To_bool`): absent, `0` or `false` in any case is false, and any other
/// value, the empty one included, is true. Clients send `true`, `True` (the official Python
/// client), `1` or `t`, and all of them mean true.
pub fn query_bool(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
    }
}

/// Decodes the query string of a URI.
pub fn parse_query(query: &str) -> BTreeMap<String, String> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn decode_segment(segment: &str) -> String {
    percent_decode(segment)
}

/// Percent-decoding of one path segment (`+` stays a plus).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Subresources of a namespace itself (`namespaces/<n>/<sub>`), as opposed to resources in it.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Parses a request.
pub fn parse(method: &Method, path: &str, query: &str) -> RequestInfo {
    let query = parse_query(query);
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_segment)
        .collect();
    let lower_verb = method.as_str().to_ascii_lowercase();
    let non_resource = |verb: String| RequestInfo {
        verb,
        path: path.to_string(),
        resource: None,
        query: query.clone(),
    };
    // /api/v1/... or /apis/<group>/<version>/...
    let (group, version, rest) = match segments.first().map(String::as_str) {
        Some("api") if segments.len() >= 2 => (String::new(), segments[1].clone(), &segments[2..]),
        Some("apis") if segments.len() >= 3 => {
            (segments[1].clone(), segments[2].clone(), &segments[3..])
        }
        _ => return non_resource(lower_verb),
    };
    if rest.is_empty() {
        // Discovery of a group version.
        return non_resource(lower_verb);
    }
    let mut resource = ResourcePath {
        group,
        version,
        ..ResourcePath::default()
    };
    let parts: &[String] = if rest[0] == "namespaces" && rest.len() >= 2 {
        if rest.len() == 2 || NAMESPACE_SUBRESOURCES.contains(&rest[2].as_str()) {
            // The namespace object itself: namespaces/<n>[/<sub>].
            resource.resource = "namespaces".to_string();
            resource.name = Some(rest[1].clone());
            resource.subresource = rest.get(2).cloned();
            return finish(method, path, query, resource);
        }
        resource.namespace = Some(rest[1].clone());
        &rest[2..]
    } else {
        rest
    };
    resource.resource = parts[0].clone();
    resource.name = parts.get(1).cloned();
    resource.subresource = parts.get(2).cloned();
    if parts.len() > 3 {
        resource.rest = format!("/{}", parts[3..].join("/"));
        if path.ends_with('/') {
            resource.rest.push('/');
        }
    } else if resource.subresource.is_some() && path.ends_with('/') {
        resource.rest = "/".to_string();
    }
    finish(method, path, query, resource)
}

fn finish(
    method: &Method,
    path: &str,
    query: BTreeMap<String, String>,
    resource: ResourcePath,
) -> RequestInfo {
    let watch = query_bool(query.get("watch").map(String::as_str));
    let verb = match *method {
        Method::GET | Method::HEAD if resource.subresource.as_deref() == Some("proxy") => "get",
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if resource.name.is_some() => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if resource.name.is_some() => "delete",
        Method::DELETE => "deletecollection",
        _ => "",
    };
    let verb = if verb.is_empty() {
        method.as_str().to_ascii_lowercase()
    } else {
        verb.to_string()
    };
    RequestInfo {
        verb,
        path: path.to_string(),
        resource: Some(resource),
        query,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, uri: &str) -> RequestInfo {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        parse(&method, path, query)
    }

    #[test]
    fn boolean_query_parameters_are_read_as_kube_apiserver_reads_them() {
        for truthy in ["true", "True", "TRUE", "1", "t", "T", "yes", ""] {
            assert!(query_bool(Some(truthy)), "{truthy:?}");
            let r = info(Method::GET, &format!("/api/v1/pods?watch={truthy}"));
            assert_eq!(r.verb, "watch", "watch={truthy:?}");
        }
        for falsy in ["false", "False", "FALSE", "0"] {
            assert!(!query_bool(Some(falsy)), "{falsy:?}");
            let r = info(Method::GET, &format!("/api/v1/pods?watch={falsy}"));
            assert_eq!(r.verb, "list", "watch={falsy:?}");
        }
        assert!(!query_bool(None));
        assert!(
            info(
                Method::GET,
                "/api/v1/pods?watch=True&allowWatchBookmarks=True"
            )
            .flag("allowWatchBookmarks")
        );
    }

    #[test]
    fn resource_requests_are_read_as_the_real_server_reads_them() {
        let r = info(Method::GET, "/api/v1/namespaces/default/configmaps/x");
        assert_eq!(r.verb, "get");
        let p = r.resource.unwrap();
        assert_eq!(
            (p.group.as_str(), p.version.as_str(), p.namespace.as_deref()),
            ("", "v1", Some("default"))
        );
        assert_eq!(
            (p.resource.as_str(), p.name.as_deref()),
            ("configmaps", Some("x"))
        );

        let r = info(
            Method::GET,
            "/apis/apps/v1/deployments?watch=1&labelSelector=a%3Db",
        );
        assert_eq!(r.verb, "watch");
        assert_eq!(r.param("labelSelector"), Some("a=b"));
        assert_eq!(r.resource.unwrap().namespace, None);

        let r = info(Method::GET, "/api/v1/namespaces/kube-system");
        let p = r.resource.unwrap();
        assert_eq!(
            (p.resource.as_str(), p.name.as_deref()),
            ("namespaces", Some("kube-system"))
        );
        assert_eq!(r.verb, "get");

        let r = info(Method::PUT, "/api/v1/namespaces/x/finalize");
        let p = r.resource.unwrap();
        assert_eq!(
            (
                p.resource.as_str(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("namespaces", Some("x"), Some("finalize"))
        );
        assert_eq!(r.verb, "update");

        let r = info(Method::DELETE, "/api/v1/namespaces/a/secrets");
        assert_eq!(r.verb, "deletecollection");

        let r = info(
            Method::POST,
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        );
        assert_eq!(r.verb, "create");
        assert_eq!(r.resource.unwrap().resource, "selfsubjectreviews");
    }

    #[test]
    fn proxy_paths_keep_the_rest() {
        let r = info(Method::GET, "/api/v1/nodes/w1/proxy/healthz?verbose=1");
        assert_eq!(r.verb, "get");
        let p = r.resource.unwrap();
        assert_eq!(p.subresource.as_deref(), Some("proxy"));
        assert_eq!(p.rest, "/healthz");
        let r = info(Method::GET, "/api/v1/nodes/w1/proxy/");
        assert_eq!(r.resource.unwrap().rest, "/");
    }

    #[test]
    fn other_paths_are_not_resource_requests() {
        for path in [
            "/healthz",
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps/v1",
            "/version",
        ] {
            let r = info(Method::GET, path);
            assert!(r.resource.is_none(), "{path}");
            assert_eq!(r.verb, "get");
        }
        assert_eq!(percent_decode("a%3Ab%zz"), "a:b%zz");
    }
}
