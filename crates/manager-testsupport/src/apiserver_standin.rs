//! Test support (feature `standin`): a management cluster's API server, as far as
//! `oi-manager run` uses one, on loopback. No Kubernetes API server can run on our machines,
//! so tests drive the real `oi-manager` binary (kube-rs client, kube-runtime watches and
//! controllers, Lease leader election, events) against this one.
//!
//! ```text
//!  oi-manager run ──HTTP──► ApiServer ──► MemoryStore: the oneinfra kinds, with the API
//!    (kube-rs)                 │           server's semantics (resource versions, conflicts,
//!                              │           finalizers, the status subresource)
//!                              ├─ watch: every change, in resourceVersion order, replayed
//!                              │  from any resourceVersion the server has seen, then live
//!                              ├─ Leases (coordination.k8s.io/v1): create, get, replace
//!                              └─ Events (events.k8s.io/v1): created, kept for the test
//! ```
//!
//! Objects are stored by [`MemoryStore`], the store the in-process driver uses, so the API
//! semantics exist once. The test reads and writes them through [`ApiServer::store`] as an
//! administrator's `kubectl` would; watchers see those writes like any other.
//!
//! Not served: authentication and authorization (plain HTTP on 127.0.0.1), pagination (a list
//! is one page whatever its `limit`), label and field selectors (refused with 400), PATCH,
//! schema validation and pruning (the CRD tests in oi-api cover the schemas), and garbage
//! collection by owner reference (oi-manager deletes what it owns itself).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::memory::{Change, MemoryStore};
use anyhow::{Context as _, Result};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use oi_api::{Cluster, Component, Hypervisor, Kind, NodeJoinRequest, Object, ObjectKey};
use oi_manager::kube_store::api_resource;
use oi_manager::store::{Store as _, StoreError, Stored};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// How many watch events a slow watcher may fall behind before its watch ends with
/// `410 Gone` (it then lists again, as against a real API server).
const WATCH_CAPACITY: usize = 4096;

/// A watch event: what a watcher of its kind (and namespace) receives.
#[derive(Debug, Clone)]
struct Entry {
    version: u64,
    kind: Kind,
    key: ObjectKey,
    type_: &'static str,
    object: Arc<Value>,
}

/// Every change since the server started, and the live feed of new ones.
struct Feed {
    entries: Vec<Entry>,
    live: broadcast::Sender<Entry>,
    /// The last state of each object, for the DELETED event that reports its removal.
    last: BTreeMap<(Kind, ObjectKey), Arc<Value>>,
    /// Set when the recorder fell behind the store: the history is incomplete.
    broken: Option<String>,
}

struct Shared {
    store: Arc<MemoryStore>,
    feed: Mutex<Feed>,
    leases: Mutex<BTreeMap<(String, String), Value>>,
    lease_version: Mutex<u64>,
    events: Mutex<Vec<Value>>,
    requests: Mutex<Vec<String>>,
    options: StandinOptions,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How the stand-in behaves.
#[derive(Debug, Clone)]
pub struct StandinOptions {
    /// Every watch ends after this long at the latest (kube-runtime then resumes it from the
    /// last resourceVersion it saw), so that resuming is exercised too.
    pub watch_timeout: Duration,
    /// Whether the oneinfra CRDs are installed; without them their paths answer 404.
    pub crds: bool,
}

impl Default for StandinOptions {
    fn default() -> Self {
        StandinOptions {
            watch_timeout: Duration::from_secs(30),
            crds: true,
        }
    }
}

/// The API server stand-in; it stops when dropped.
pub struct ApiServer {
    pub address: SocketAddr,
    shared: Arc<Shared>,
    /// Its own runtime, so that synchronous tests can use it too; `None` once dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl ApiServer {
    /// Starts serving on `127.0.0.1:0`, on a runtime of its own (so that synchronous and
    /// async tests alike can use it).
    ///
    /// # Errors
    /// When the runtime cannot be built or the port cannot be bound.
    pub fn start(options: StandinOptions) -> Result<ApiServer> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("apiserver")
            .enable_all()
            .build()
            .context("building the API server's runtime")?;
        let store = Arc::new(MemoryStore::new());
        let (live, _) = broadcast::channel(WATCH_CAPACITY);
        let shared = Arc::new(Shared {
            feed: Mutex::new(Feed {
                entries: Vec::new(),
                live,
                last: BTreeMap::new(),
                broken: None,
            }),
            store: Arc::clone(&store),
            leases: Mutex::default(),
            lease_version: Mutex::default(),
            events: Mutex::default(),
            requests: Mutex::default(),
            options,
        });
        let changes = store.subscribe();
        runtime.spawn(record(Arc::clone(&shared), changes));
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .context("binding the API server to 127.0.0.1")?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        runtime.spawn(serve(Arc::clone(&shared), listener));
        Ok(ApiServer {
            address,
            shared,
            runtime: Some(runtime),
        })
    }

    /// The objects, as an administrator reads and writes them.
    pub fn store(&self) -> &Arc<MemoryStore> {
        &self.shared.store
    }

    /// Runs `future` on the server's runtime (for the store's async calls from a synchronous
    /// test).
    ///
    /// # Panics
    /// When called from an async context (as any `block_on`).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        match &self.runtime {
            Some(runtime) => runtime.block_on(future),
            None => unreachable!("the runtime is only taken on drop"),
        }
    }

    /// Writes a kubeconfig for this server to `dir/kubeconfig`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: management\n  cluster:\n    server: http://{}\n\
                 users:\n- name: admin\n  user: {{}}\n\
                 contexts:\n- name: management\n  context:\n    cluster: management\n    user: admin\n\
                 current-context: management\n",
                self.address
            ),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// The Lease `namespace/name`, as stored.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.shared.leases)
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Another replica takes (or creates) the Lease `namespace/name`: `holder` renewed it just
    /// now, for `duration_seconds`.
    pub fn put_lease(&self, namespace: &str, name: &str, holder: &str, duration_seconds: i64) {
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let version = self.shared.next_lease_version();
        lock(&self.shared.leases).insert(
            (namespace.to_string(), name.to_string()),
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace, "resourceVersion": version},
                "spec": {
                    "holderIdentity": holder, "leaseDurationSeconds": duration_seconds,
                    "acquireTime": now, "renewTime": now,
                },
            }),
        );
    }

    /// The holder of the Lease `namespace/name`, if it exists and is held.
    pub fn lease_holder(&self, namespace: &str, name: &str) -> Option<String> {
        self.lease(namespace, name)?
            .pointer("/spec/holderIdentity")?
            .as_str()
            .map(str::to_string)
    }

    /// The Events created so far (events.k8s.io/v1 objects), in order.
    pub fn events(&self) -> Vec<Value> {
        lock(&self.shared.events).clone()
    }

    /// `METHOD path?query` of every request so far, in order.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared.requests).clone()
    }

    /// Why the watch history is incomplete, if it is (the test then fails, naming it).
    pub fn broken(&self) -> Option<String> {
        lock(&self.shared.feed).broken.clone()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // Open watches hold connections: do not wait for them (and do not block, which an
        // async test's context forbids).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Turns the store's changes into watch events, in order.
async fn record(shared: Arc<Shared>, mut changes: broadcast::Receiver<Change>) {
    loop {
        match changes.recv().await {
            Ok(change) => shared.append(change),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                lock(&shared.feed).broken = Some(format!(
                    "the watch recorder fell {n} changes behind the store"
                ));
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

impl Shared {
    fn next_lease_version(&self) -> String {
        let mut version = lock(&self.lease_version);
        *version += 1;
        version.to_string()
    }

    fn append(&self, change: Change) {
        let mut feed = lock(&self.feed);
        let slot = (change.kind, change.key.clone());
        let (type_, object) = match change.object {
            Some(object) => {
                let value = Arc::new(object_value(&object));
                let previous = feed.last.insert(slot, Arc::clone(&value));
                (
                    if previous.is_some() {
                        "MODIFIED"
                    } else {
                        "ADDED"
                    },
                    value,
                )
            }
            None => {
                let Some(last) = feed.last.remove(&slot) else {
                    return;
                };
                // A DELETED event carries the object at the deletion's resourceVersion.
                let mut value = (*last).clone();
                value["metadata"]["resourceVersion"] = json!(change.resource_version.to_string());
                ("DELETED", Arc::new(value))
            }
        };
        let entry = Entry {
            version: change.resource_version,
            kind: change.kind,
            key: change.key,
            type_,
            object,
        };
        feed.entries.push(entry.clone());
        // Nobody watching is fine.
        let _ = feed.live.send(entry);
    }
}

fn object_value(object: &Object) -> Value {
    match object {
        Object::Hypervisor(o) => to_json(o),
        Object::Cluster(o) => to_json(o),
        Object::Component(o) => to_json(o),
        Object::NodeJoinRequest(o) => to_json(o),
    }
}

async fn serve(shared: Arc<Shared>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(shared.answer(request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A `Status` failure, as the API server answers one.
fn failure(code: u16, reason: &str, message: &str) -> Response<Body> {
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        }),
    )
}

fn store_failure(error: &StoreError) -> Response<Body> {
    let message = error.to_string();
    match error {
        StoreError::NotFound { .. } => failure(404, "NotFound", &message),
        StoreError::AlreadyExists { .. } => failure(409, "AlreadyExists", &message),
        StoreError::Conflict { .. } => failure(409, "Conflict", &message),
        StoreError::Invalid { .. } => failure(422, "Invalid", &message),
        StoreError::Unavailable(_) => failure(500, "InternalError", &message),
    }
}

/// A request for one of the oneinfra kinds, parsed.
struct KindRequest {
    method: Method,
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
    query: BTreeMap<String, String>,
    body: Value,
}

/// The kind served at `group/version/plural`.
fn kind_at(group: &str, version: &str, plural: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|&kind| {
        let resource = api_resource(kind);
        resource.group == group && resource.version == version && resource.plural == plural
    })
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect()
}

impl Shared {
    async fn answer(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        lock(&self.requests).push(format!("{method} {path}?{query}"));
        let body = match request.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return failure(400, "BadRequest", &format!("reading the body: {e}")),
        };
        let body: Value = if body.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&body) {
                Ok(value) => value,
                Err(e) => return failure(400, "BadRequest", &format!("the body is not JSON: {e}")),
            }
        };
        if let Some(broken) = lock(&self.feed).broken.clone() {
            return failure(500, "InternalError", &broken);
        }
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            ["version"] => json_response(
                StatusCode::OK,
                &json!({
                    "major": "1", "minor": "33", "gitVersion": "v1.33.0-oneinfra-e2e",
                    "gitCommit": "none", "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none",
                    "compiler": "none", "platform": "linux/amd64",
                }),
            ),
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
                rest @ ..,
            ] => self.lease_request(&method, ns, rest.first().copied(), body),
            ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"]
                if method == Method::POST =>
            {
                self.create_event(ns, body)
            }
            ["apis", group, version, rest @ ..] => {
                let (namespace, rest) = match rest {
                    ["namespaces", ns, rest @ ..] => (Some((*ns).to_string()), rest),
                    _ => (None, rest),
                };
                let (plural, name, status) = match rest {
                    [plural] => (*plural, None, false),
                    [plural, name] => (*plural, Some((*name).to_string()), false),
                    [plural, name, "status"] => (*plural, Some((*name).to_string()), true),
                    _ => {
                        return failure(
                            404,
                            "NotFound",
                            "the server could not find the requested resource",
                        );
                    }
                };
                let Some(kind) = kind_at(group, version, plural).filter(|_| self.options.crds)
                else {
                    return failure(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    );
                };
                // A namespaced kind's objects live under a namespace; a cluster-scoped kind has
                // none (listing a namespaced kind across namespaces is fine).
                if (namespace.is_some() && !kind.namespaced())
                    || (name.is_some() && namespace.is_none() && kind.namespaced())
                    || (method == Method::POST && namespace.is_none() && kind.namespaced())
                {
                    return failure(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    );
                }
                let request = KindRequest {
                    method,
                    kind,
                    namespace,
                    name,
                    status,
                    query: parse_query(&query),
                    body,
                };
                match kind {
                    Kind::Hypervisor => self.kind_request::<Hypervisor>(request).await,
                    Kind::Cluster => self.kind_request::<Cluster>(request).await,
                    Kind::Component => self.kind_request::<Component>(request).await,
                    Kind::NodeJoinRequest => self.kind_request::<NodeJoinRequest>(request).await,
                }
            }
            _ => failure(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        }
    }

    async fn kind_request<K: Stored>(self: Arc<Self>, r: KindRequest) -> Response<Body> {
        for selector in ["labelSelector", "fieldSelector"] {
            if r.query.get(selector).is_some_and(|s| !s.is_empty()) {
                return failure(
                    400,
                    "BadRequest",
                    &format!("{selector} is not served by this API server"),
                );
            }
        }
        let key = |name: &str| match &r.namespace {
            Some(ns) => ObjectKey::new(ns.clone(), name.to_string()),
            None => ObjectKey::cluster_scoped(name.to_string()),
        };
        match (&r.method, r.name.as_deref(), r.status) {
            (&Method::GET, None, false) => {
                if r.query
                    .get("watch")
                    .is_some_and(|w| w == "true" || w == "1")
                {
                    return self.watch(
                        r.kind,
                        r.namespace.clone(),
                        r.query.get("resourceVersion"),
                        r.query.get("timeoutSeconds"),
                    );
                }
                self.list::<K>(r.namespace.as_deref()).await
            }
            (&Method::GET, Some(name), false) => match self.store.get::<K>(&key(name)).await {
                Ok(Some(object)) => json_response(StatusCode::OK, &to_json(&object)),
                Ok(None) => store_failure(&StoreError::NotFound {
                    kind: r.kind,
                    key: key(name),
                }),
                Err(e) => store_failure(&e),
            },
            (&Method::POST, None, false) => {
                let mut object: K = match decode(r.kind, r.body) {
                    Ok(object) => object,
                    Err(message) => return failure(400, "BadRequest", &message),
                };
                let meta = object.metadata_mut();
                if let Some(ns) = &r.namespace {
                    match meta.namespace.as_deref() {
                        None | Some("") => meta.namespace = Some(ns.clone()),
                        Some(given) if given == ns => {}
                        Some(_) => {
                            return failure(
                                400,
                                "BadRequest",
                                "the namespace of the provided object does not match the namespace sent on the request",
                            );
                        }
                    }
                }
                // As the API server records who wrote what.
                meta.managed_fields = vec![json!({
                    "manager": "oi-manager", "operation": "Update",
                    "apiVersion": r.kind.api_version(), "fieldsType": "FieldsV1", "fieldsV1": {},
                })];
                match self.store.create(&object).await {
                    Ok(created) => json_response(StatusCode::CREATED, &to_json(&created)),
                    Err(e) => store_failure(&e),
                }
            }
            (&Method::PUT, Some(name), status) => {
                let object: K = match decode(r.kind, r.body) {
                    Ok(object) => object,
                    Err(message) => return failure(400, "BadRequest", &message),
                };
                if object.key() != key(name) {
                    return failure(
                        400,
                        "BadRequest",
                        &format!(
                            "the name or namespace of the object ({}) does not match the request ({})",
                            object.key(),
                            key(name)
                        ),
                    );
                }
                let written = if status {
                    self.store.update_status(&object).await
                } else {
                    self.store.update(&object).await
                };
                match written {
                    Ok(written) => json_response(StatusCode::OK, &to_json(&written)),
                    Err(e) => store_failure(&e),
                }
            }
            (&Method::DELETE, Some(name), false) => {
                let key = key(name);
                match self.store.get::<K>(&key).await {
                    Ok(Some(_)) => {}
                    Ok(None) => return store_failure(&StoreError::NotFound { kind: r.kind, key }),
                    Err(e) => return store_failure(&e),
                }
                if let Err(e) = self.store.delete::<K>(&key).await {
                    return store_failure(&e);
                }
                match self.store.get::<K>(&key).await {
                    // Kept by its finalizers, marked for deletion.
                    Ok(Some(object)) => json_response(StatusCode::OK, &to_json(&object)),
                    Ok(None) => json_response(
                        StatusCode::OK,
                        &json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success",
                            "details": {"name": key.name, "kind": api_resource(r.kind).plural},
                        }),
                    ),
                    Err(e) => store_failure(&e),
                }
            }
            _ => failure(
                405,
                "MethodNotAllowed",
                &format!("{} is not served here", r.method),
            ),
        }
    }

    async fn list<K: Stored>(&self, namespace: Option<&str>) -> Response<Body> {
        // The version first: a change after it shows in the list and again in a watch from
        // it (harmless), never in neither.
        let version = self.store.resource_version();
        match self.store.list::<K>(namespace).await {
            Ok(items) => {
                let resource = api_resource(K::KIND);
                json_response(
                    StatusCode::OK,
                    &json!({
                        "apiVersion": resource.api_version,
                        "kind": format!("{}List", resource.kind),
                        "metadata": {"resourceVersion": version.to_string()},
                        "items": items.iter().map(to_json).collect::<Vec<_>>(),
                    }),
                )
            }
            Err(e) => store_failure(&e),
        }
    }

    /// A watch of `kind` (in `namespace`) from `from`: the recorded events after it, then
    /// live ones, until the timeout. Without a resourceVersion (or "0"), every object as
    /// ADDED first, as the API server starts such a watch.
    fn watch(
        &self,
        kind: Kind,
        namespace: Option<String>,
        from: Option<&String>,
        timeout_seconds: Option<&String>,
    ) -> Response<Body> {
        let from = match from.map(String::as_str) {
            None | Some("" | "0") => None,
            Some(v) => match v.parse::<u64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    return failure(
                        400,
                        "BadRequest",
                        &format!("resourceVersion {v:?} is not a number"),
                    );
                }
            },
        };
        let timeout = timeout_seconds
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(self.options.watch_timeout, |t| {
                Duration::from_secs(t).min(self.options.watch_timeout)
            });
        let matches = move |e: &Entry| {
            e.kind == kind && namespace.as_ref().is_none_or(|ns| e.key.namespace == *ns)
        };
        let (backlog, live) = {
            let feed = lock(&self.feed);
            let backlog: Vec<Entry> = match from {
                Some(from) => feed
                    .entries
                    .iter()
                    .filter(|e| e.version > from)
                    .filter(|e| matches(e))
                    .cloned()
                    .collect(),
                None => feed
                    .last
                    .iter()
                    .map(|((kind, key), object)| Entry {
                        version: 0,
                        kind: *kind,
                        key: key.clone(),
                        type_: "ADDED",
                        object: Arc::clone(object),
                    })
                    .filter(|e| matches(e))
                    .collect(),
            };
            (backlog, feed.live.subscribe())
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let stream = futures::stream::unfold(
            (backlog.into_iter(), Some(live), matches),
            move |(mut backlog, live, matches)| async move {
                if let Some(entry) = backlog.next() {
                    return Some((Ok(frame(&entry)), (backlog, live, matches)));
                }
                let mut live = live?;
                loop {
                    match tokio::time::timeout_at(deadline, live.recv()).await {
                        Ok(Ok(entry)) if matches(&entry) => {
                            return Some((Ok(frame(&entry)), (backlog, Some(live), matches)));
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                            // Too far behind: the watcher must list again.
                            let gone = json!({"type": "ERROR", "object": {
                                "kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "reason": "Expired", "code": 410,
                                "message": "too old resource version",
                            }});
                            return Some((Ok(line(&gone)), (backlog, None, matches)));
                        }
                        Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return None,
                    }
                }
            },
        );
        let mut response = Response::new(StreamBody::new(stream).boxed());
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        response
    }

    fn lease_request(
        &self,
        method: &Method,
        namespace: &str,
        name: Option<&str>,
        body: Value,
    ) -> Response<Body> {
        let key = |name: &str| (namespace.to_string(), name.to_string());
        let mut leases = lock(&self.leases);
        match (method, name) {
            (&Method::GET, Some(name)) => match leases.get(&key(name)) {
                Some(lease) => json_response(StatusCode::OK, lease),
                None => failure(
                    404,
                    "NotFound",
                    &format!("leases.coordination.k8s.io \"{name}\" not found"),
                ),
            },
            (&Method::POST, None) => {
                let mut lease = body;
                let Some(name) = lease
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                else {
                    return failure(422, "Invalid", "metadata.name: Required value");
                };
                if leases.contains_key(&key(&name)) {
                    return failure(
                        409,
                        "AlreadyExists",
                        &format!("leases.coordination.k8s.io \"{name}\" already exists"),
                    );
                }
                lease["metadata"]["resourceVersion"] = json!(self.next_lease_version());
                lease["metadata"]["namespace"] = json!(namespace);
                leases.insert(key(&name), lease.clone());
                json_response(StatusCode::CREATED, &lease)
            }
            (&Method::PUT, Some(name)) => {
                let Some(current) = leases.get(&key(name)) else {
                    return failure(
                        404,
                        "NotFound",
                        &format!("leases.coordination.k8s.io \"{name}\" not found"),
                    );
                };
                if body.pointer("/metadata/resourceVersion")
                    != current.pointer("/metadata/resourceVersion")
                {
                    return failure(
                        409,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                        ),
                    );
                }
                let mut lease = body;
                lease["metadata"]["resourceVersion"] = json!(self.next_lease_version());
                leases.insert(key(name), lease.clone());
                json_response(StatusCode::OK, &lease)
            }
            _ => failure(405, "MethodNotAllowed", "not served for leases"),
        }
    }

    fn create_event(&self, namespace: &str, body: Value) -> Response<Body> {
        let mut events = lock(&self.events);
        let mut event = body;
        if event
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            let prefix = event
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            event["metadata"]["name"] = json!(format!("{prefix}{:05x}", events.len() + 1));
        }
        event["metadata"]["namespace"] = json!(namespace);
        events.push(event.clone());
        json_response(StatusCode::CREATED, &event)
    }
}

/// Our types always serialize (they were deserialized or built by us).
fn to_json<K: Stored>(object: &K) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// The request body as our type, or why it is not one.
fn decode<K: Stored>(kind: Kind, body: Value) -> Result<K, String> {
    serde_json::from_value(body).map_err(|e| format!("the body is not a valid {kind}: {e}"))
}

fn line(value: &Value) -> Frame<Bytes> {
    let mut text = value.to_string();
    text.push('\n');
    Frame::data(Bytes::from(text))
}

fn frame(entry: &Entry) -> Frame<Bytes> {
    line(&json!({"type": entry.type_, "object": &*entry.object}))
}
