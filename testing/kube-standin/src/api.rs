//! **The Kubernetes API, served by a stand-in (test support, not Kubernetes).**
//!
//! One implementation of the REST API as kube-apiserver serves it, for the kinds our product
//! and `kubectl` touch, over a [`storage::Storage`]: the cluster's real etcd inside the kube
//! stand-in image ([`etcd_storage::EtcdStorage`], so every replica serves the same objects),
//! or memory in tests of a management cluster ([`storage::MemoryStorage`]).
//!
//! ```text
//!  HTTPS (server.rs) ── client certificate requested, verified by authn ──┐
//!   │                                                                     │
//!   ▼                                                                     │
//!  authn.rs   certificate │ bootstrap token │ service-account JWT │ anonymous
//!  authz.rs   system:masters → --authorization-mode chain (Node, RBAC, ...) → 401/403 Status
//!  request.rs verb, group, version, namespace, resource, name, subresource
//!   ├─ /healthz /livez /readyz /version /api /apis /openapi/v3 /openid   (discovery.rs)
//!   └─ resources (rest.rs)
//!        get · list (selectors, limit/continue) · watch (watch.rs: replay, bookmarks, 410)
//!        create (generateName) · update · patch (patch.rs: json, merge, strategic;
//!        apply.rs: server-side apply) · delete (finalizers) · deletecollection
//!        subresources: status, finalize, approval, token, proxy (proxy.rs: node → kubelet)
//!        per kind: kinds.rs (defaults, validation), schema.rs (CRD schemas), events.rs,
//!        admission.rs (NamespaceLifecycle, NodeRestriction, RBAC escalation)
//!   background (maintenance.rs): system namespaces, bootstrap RBAC (policy.rs), the
//!   `kubernetes` Service, finishing deleted namespaces and CRDs
//! ```
//!
//! ## What is approximated or not done
//!
//! - **Server-side apply**: lists are atomic (owned and replaced whole) where Kubernetes
//!   merges `listType: map`/`set` lists element by element; see [`apply`].
//! - **Strategic merge patch** knows the merge keys of the kinds served here (containers,
//!   ports, env, volumes, conditions, ...), not every Go type's.
//! - **Validation**: names, labels, annotations, finalizers, owner references, and the fields
//!   of ConfigMaps, Secrets, Services, Leases, RBAC objects, CRDs, Events, Deployments,
//!   DaemonSets and CSRs that our product writes; custom resources against their structural
//!   schema (pruning, defaults, types, bounds, enums, patterns; no CEL rules, no `format`).
//!   Unknown fields of built-in kinds are kept (no Go types to check them against), so
//!   `fieldValidation=Strict` catches them only for custom resources.
//! - **Admission**: NamespaceLifecycle, NodeRestriction (a node writes only its own Node and
//!   Lease), RBAC escalation checks. Not run: ServiceAccount, LimitRanger, ResourceQuota,
//!   PodSecurity, DefaultStorageClass, mutating/validating webhooks, ValidatingAdmissionPolicy.
//! - **Deletion**: `propagationPolicy` is accepted but no garbage collector deletes dependents
//!   (nothing in the stand-in owns anything); namespaces and CRDs are finished by the API
//!   server itself (in Kubernetes: the namespace controller and the apiextensions finalizer).
//! - **Workloads** (Deployments, DaemonSets, Pods) are stored, never run.
//! - **Events** never expire (no `--event-ttl`).
//! - **Lists at an old resourceVersion** (`continue`, `resourceVersionMatch=Exact`) are exact
//!   within the history kept (etcd's, or the memory store's last changes), `410 Gone` beyond.
//! - **Aggregated discovery, OpenAPI v3**: served with paths and the `fieldValidation`
//!   parameter (what `kubectl` needs), categories (`all`, `api-extensions`), the schemas of
//!   custom resources and, for the built-in kinds, their top-level fields and the metadata's
//!   (`openapi.rs`: enough for `kubectl explain configmap.data`; a workload's spec is one
//!   undescribed object).
//! - **Boolean query parameters** are read as kube-apiserver reads them: absent, `0` or
//!   `false` (any case) is false, anything else true (`request::query_bool`).
//! - Not served: protobuf, `kubectl exec`/`logs`/`port-forward` streams, API aggregation,
//!   legacy secret-based service-account tokens, the `scale` subresource, Table output for
//!   kinds beyond those served.

pub mod admission;
pub mod apply;
pub mod authn;
pub mod authn_config;
pub mod authz;
pub mod discovery;
pub mod etcd_storage;
pub mod events;
pub mod jwt;
pub mod kinds;
pub mod maintenance;
pub mod meta;
pub mod oidc;
pub mod openapi;
pub mod patch;
pub mod policy;
pub mod protobuf;
pub mod proxy;
pub mod registry;
pub mod request;
pub mod resources;
pub mod rest;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod status;
pub mod storage;
pub mod table;
pub mod watch;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use ipnet::IpNet;
use rustls::pki_types::CertificateDer;
use serde_json::Value;
use tokio::sync::{Notify, watch as tokio_watch};

use authn::{Authenticator, AuthnConfig, User};
use authz::{Attributes, Authorizer, Mode};
use registry::Registry;
use request::RequestInfo;
use status::ApiError;
use storage::SharedStorage;

/// A boxed error of a response body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body: whole, or streamed (watches, the node proxy).
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// What the last storage health check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Whether storage answered.
    pub ready: bool,
    /// Why not, when not.
    pub reason: String,
}

impl Health {
    /// Healthy.
    pub fn ok() -> Health {
        Health {
            ready: true,
            reason: String::new(),
        }
    }
}

/// The service-account token issuer (TokenRequest).
pub struct TokenIssuer {
    /// `--service-account-signing-key-file`.
    pub signer: jwt::Signer,
    /// The first `--service-account-issuer`.
    pub issuer: String,
    /// `--api-audiences` (default: the issuers).
    pub audiences: Vec<String>,
    /// `--service-account-max-token-expiration` (default: none).
    pub max_seconds: Option<i64>,
}

/// How the API is served.
pub struct ApiConfig {
    /// The storage key prefix (`--etcd-prefix`, `/registry`).
    pub root: String,
    /// `/version`'s body.
    pub version: Value,
    /// Authentication.
    pub authn: AuthnConfig,
    /// `--authorization-mode`.
    pub modes: Vec<Mode>,
    /// `--enable-admission-plugins` has NodeRestriction.
    pub node_restriction: bool,
    /// `--service-cluster-ip-range`.
    pub service_cluster_ip_ranges: Vec<IpNet>,
    /// Service-account tokens, when a signing key is configured.
    pub tokens: Option<TokenIssuer>,
    /// How the node proxy reaches kubelets.
    pub kubelet: Option<proxy::KubeletClient>,
    /// The longest a watch stays open (Kubernetes: `--min-request-timeout`, 30 min, times a
    /// random factor between 1 and 2); a client's `timeoutSeconds` may shorten it.
    pub watch_timeout: Duration,
    /// How often a watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Whether to keep `METHOD path?query` of every request (tests).
    pub record_requests: bool,
    /// This server's address and port as the `kubernetes` Service's endpoint.
    pub advertise: Option<(IpAddr, u16)>,
    /// The server address discovery reports.
    pub server_address: String,
    /// The largest request body taken.
    pub max_body: usize,
    /// Storage health, as a background check last found it.
    pub health: Option<tokio_watch::Receiver<Health>>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            root: "/registry".to_string(),
            version: crate::version_info(&crate::reported_version()),
            authn: AuthnConfig::default(),
            modes: vec![Mode::Rbac],
            node_restriction: false,
            service_cluster_ip_ranges: Vec::new(),
            tokens: None,
            kubelet: None,
            watch_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(60),
            record_requests: false,
            advertise: None,
            server_address: "127.0.0.1:6443".to_string(),
            max_body: 3 * 1024 * 1024,
            health: None,
        }
    }
}

/// The client side of a connection, as TLS saw it.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// The certificate chain the client presented (not verified by TLS: authentication does).
    pub certificates: Vec<CertificateDer<'static>>,
}

/// The API: one per server, shared by its connections.
pub struct Api {
    pub(crate) storage: SharedStorage,
    pub(crate) registry: Registry,
    pub(crate) authn: Authenticator,
    pub(crate) authz: Authorizer,
    pub(crate) tokens: Option<TokenIssuer>,
    pub(crate) kubelet: Option<proxy::KubeletClient>,
    pub(crate) settings: Settings,
    requests: Mutex<Vec<String>>,
    /// The token of the server's own loopback client (`system:apiserver`, in
    /// `system:masters`), as kube-apiserver has one for its post-start hooks.
    loopback_token: String,
    bootstrapped: AtomicBool,
    /// Wakes the maintenance loop (a namespace or CRD was deleted).
    pub(crate) wake: Notify,
    health: Option<tokio_watch::Receiver<Health>>,
}

/// The plain settings of [`ApiConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub root: String,
    pub version: Value,
    pub node_restriction: bool,
    pub service_cluster_ip_ranges: Vec<IpNet>,
    pub watch_timeout: Duration,
    pub bookmark_interval: Duration,
    pub record_requests: bool,
    pub advertise: Option<(IpAddr, u16)>,
    pub server_address: String,
    pub max_body: usize,
}

/// Why the API could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ApiSetupError {
    /// The client CA cannot verify certificates.
    #[error("--client-ca-file cannot be used to verify client certificates")]
    ClientCa(#[source] rustls::server::VerifierBuilderError),
}

/// What a handler answers.
pub(crate) enum Reply {
    /// A JSON object with a status code.
    Object(StatusCode, Value),
    /// A response made already (streams, proxied answers).
    Raw(Response<Body>),
}

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn json_response(status: StatusCode, value: &Value, pretty: bool) -> Response<Body> {
    let text = if pretty {
        serde_json::to_string_pretty(value).unwrap_or_default()
    } else {
        value.to_string()
    };
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn text_response(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The response for a failure.
pub fn error_response(error: &ApiError) -> Response<Body> {
    json_response(error.status_code(), &error.to_status(), false)
}

impl Api {
    /// An API over `storage`.
    ///
    /// # Errors
    /// A client CA that cannot be used.
    pub fn new(storage: SharedStorage, mut config: ApiConfig) -> Result<Arc<Api>, ApiSetupError> {
        let loopback_token: String = {
            use rand::Rng as _;
            let mut rng = rand::thread_rng();
            (0..48)
                .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.gen_range(0..36)]))
                .collect()
        };
        config.authn.static_tokens.push(authn::StaticToken {
            token: loopback_token.clone(),
            user: User {
                name: "system:apiserver".to_string(),
                uid: meta::uid(),
                groups: vec!["system:masters".to_string()],
                ..User::default()
            },
        });
        let settings = Settings {
            root: config.root.trim_end_matches('/').to_string(),
            version: config.version,
            node_restriction: config.node_restriction,
            service_cluster_ip_ranges: config.service_cluster_ip_ranges,
            watch_timeout: config.watch_timeout,
            bookmark_interval: config.bookmark_interval,
            record_requests: config.record_requests,
            advertise: config.advertise,
            server_address: config.server_address,
            max_body: config.max_body,
        };
        Ok(Arc::new(Api {
            registry: Registry::new(&settings.root),
            storage,
            authn: Authenticator::new(config.authn).map_err(ApiSetupError::ClientCa)?,
            authz: Authorizer::new(config.modes),
            tokens: config.tokens,
            kubelet: config.kubelet,
            settings,
            requests: Mutex::new(Vec::new()),
            loopback_token,
            bootstrapped: AtomicBool::new(false),
            wake: Notify::new(),
            health: config.health,
        }))
    }

    /// The storage.
    pub fn storage(&self) -> &SharedStorage {
        &self.storage
    }

    /// `METHOD path?query` of every request so far (with `record_requests`).
    pub fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the requests recorded so far.
    pub fn clear_requests(&self) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// A request of the server's own loopback client (`system:apiserver`, all-powerful),
    /// through the whole API (authentication, admission, validation) but no network: how
    /// tests and the server's own tasks act as an administrator. Answers status and JSON
    /// body (a `Status` for failures). Not recorded in [`Api::requests`].
    pub async fn loopback(
        self: &Arc<Self>,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let content_type = if method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let request = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.loopback_token),
            )
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::USER_AGENT, "kube-apiserver-loopback")
            .body(Bytes::from(body.map(Value::to_string).unwrap_or_default()));
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                let error = ApiError::bad_request(format!("invalid loopback request: {e}"));
                return (error.status_code(), error.to_status());
            }
        };
        let response = self.handle(request, &Peer::default()).await;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    /// Whether the system namespaces and the bootstrap policy exist.
    pub fn bootstrapped(&self) -> bool {
        self.bootstrapped.load(Ordering::Acquire)
    }

    pub(crate) fn set_bootstrapped(&self) {
        self.bootstrapped.store(true, Ordering::Release);
    }

    fn storage_health(&self) -> Health {
        match &self.health {
            Some(rx) => rx.borrow().clone(),
            None => Health::ok(),
        }
    }

    /// Answers one request.
    pub async fn handle(self: &Arc<Self>, request: Request<Bytes>, peer: &Peer) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or_default().to_string();
        let authorization = parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok());
        let user = match self
            .authn
            .authenticate(
                &*self.storage,
                &self.settings.root,
                &peer.certificates,
                authorization,
            )
            .await
        {
            Ok(user) => user,
            Err(refusal) => {
                tracing::info!("unauthorized {} {path}: {}", parts.method, refusal.0);
                return error_response(&ApiError::unauthorized());
            }
        };
        if self.settings.record_requests && user.name != "system:apiserver" {
            // As sent: `path?` when the query is empty but present.
            let line = match parts.uri.query() {
                None => format!("{} {path}", parts.method),
                Some(q) => format!("{} {path}?{q}", parts.method),
            };
            self.requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line);
        }
        let user = match self.impersonate(user, &parts.headers).await {
            Ok(user) => user,
            Err(error) => return error_response(&error),
        };
        let info = request::parse(&parts.method, &path, &query);
        let pretty = info.flag("pretty");
        let attributes = attributes(&info);
        let decision = self
            .authz
            .authorize(&*self.storage, &self.registry, &user, &attributes)
            .await;
        if !decision.allowed {
            let mut why = authz::forbidden_message(&user, &attributes);
            if !decision.reason.is_empty() {
                why = format!("{why}: {}", decision.reason);
            }
            let error = ApiError::forbidden(
                &attributes.resource,
                &attributes.group,
                &attributes.name,
                &why,
            );
            return json_response(error.status_code(), &error.to_status(), pretty);
        }
        let call = Call {
            info: &info,
            user: &user,
            method: &parts.method,
            headers: &parts.headers,
            body: &body,
        };
        let reply = if info.resource.is_some() {
            self.resource(&call).await
        } else {
            self.non_resource(&call).await
        };
        match reply {
            Ok(Reply::Object(status, value)) => json_response(status, &value, pretty),
            Ok(Reply::Raw(response)) => response,
            Err(error) => json_response(error.status_code(), &error.to_status(), pretty),
        }
    }

    /// The user a request acts as: `Impersonate-*` headers, when the authenticated user may
    /// impersonate (verb `impersonate` on users, groups, serviceaccounts, uids, userextras).
    async fn impersonate(&self, user: User, headers: &HeaderMap) -> Result<User, ApiError> {
        let all = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let name = all("impersonate-user").into_iter().next();
        let groups = all("impersonate-group");
        let uid = all("impersonate-uid").into_iter().next();
        let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (header, value) in headers {
            if let Some(key) = header.as_str().strip_prefix("impersonate-extra-")
                && let Ok(v) = value.to_str()
            {
                let key = form_urlencoded::parse(key.as_bytes())
                    .map(|(k, _)| k.into_owned())
                    .next()
                    .unwrap_or_else(|| key.to_string());
                extra.entry(key).or_default().push(v.to_string());
            }
        }
        let Some(name) = name else {
            if groups.is_empty() && uid.is_none() && extra.is_empty() {
                return Ok(user);
            }
            return Err(ApiError::bad_request(
                "requested impersonation of groups, a uid or extras without impersonating a user",
            ));
        };
        let mut checks = Vec::new();
        let service_account = name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'));
        match service_account {
            Some((ns, sa)) => checks.push((
                "",
                "serviceaccounts",
                ns.to_string(),
                sa.to_string(),
                String::new(),
            )),
            None => checks.push(("", "users", String::new(), name.clone(), String::new())),
        }
        for g in &groups {
            checks.push(("", "groups", String::new(), g.clone(), String::new()));
        }
        if let Some(u) = &uid {
            checks.push((
                "authentication.k8s.io",
                "uids",
                String::new(),
                u.clone(),
                String::new(),
            ));
        }
        for (key, values) in &extra {
            for v in values {
                checks.push((
                    "authentication.k8s.io",
                    "userextras",
                    String::new(),
                    v.clone(),
                    key.clone(),
                ));
            }
        }
        for (group, resource, namespace, object, subresource) in checks {
            let a = Attributes {
                verb: "impersonate".to_string(),
                resource_request: true,
                namespace,
                group: group.to_string(),
                resource: resource.to_string(),
                subresource,
                name: object,
                ..Attributes::default()
            };
            let decision = self
                .authz
                .authorize(&*self.storage, &self.registry, &user, &a)
                .await;
            if !decision.allowed {
                return Err(ApiError::forbidden(
                    &a.resource,
                    &a.group,
                    &a.name,
                    &authz::forbidden_message(&user, &a),
                ));
            }
        }
        let mut groups = groups;
        if let Some((ns, _)) = service_account {
            for g in [
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{ns}"),
            ] {
                if !groups.contains(&g) {
                    groups.push(g);
                }
            }
        }
        let everyone = if name == "system:anonymous" {
            "system:unauthenticated"
        } else {
            "system:authenticated"
        };
        if !groups.iter().any(|g| g == everyone) {
            groups.push(everyone.to_string());
        }
        Ok(User {
            name,
            uid: uid.unwrap_or_default(),
            groups,
            extra,
        })
    }

    async fn non_resource(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let path = call.info.path.as_str();
        let query = call.info.query.clone();
        if let Some((status, text)) = self.health_answer(path, &query) {
            return Ok(Reply::Raw(text_response(status, text)));
        }
        if *call.method != Method::GET && *call.method != Method::HEAD {
            return Err(ApiError::method_not_supported("", "", call.method.as_str()));
        }
        self.discovery(call).await
    }

    fn health_answer(
        &self,
        path: &str,
        query: &std::collections::BTreeMap<String, String>,
    ) -> Option<(StatusCode, String)> {
        let health = self.storage_health();
        let bootstrapped = self.bootstrapped();
        discovery::health_check(path, query.contains_key("verbose"), &health, bootstrapped)
    }
}

/// A request being answered.
pub(crate) struct Call<'a> {
    pub info: &'a RequestInfo,
    pub user: &'a User,
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    pub body: &'a Bytes,
}

impl Call<'_> {
    /// A request header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The authorization attributes of a request.
pub fn attributes(info: &RequestInfo) -> Attributes {
    match &info.resource {
        None => Attributes {
            verb: info.verb.clone(),
            resource_request: false,
            path: info.path.clone(),
            ..Attributes::default()
        },
        Some(r) => {
            // The node proxy is authorized as `nodes/proxy` with the HTTP method's verb.
            Attributes {
                verb: info.verb.clone(),
                resource_request: true,
                namespace: r.namespace.clone().unwrap_or_default(),
                group: r.group.clone(),
                version: r.version.clone(),
                resource: r.resource.clone(),
                subresource: r.subresource.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                path: info.path.clone(),
            }
        }
    }
}
