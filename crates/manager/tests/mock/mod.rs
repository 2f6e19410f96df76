//! A mock API server for kube-rs clients, as kube-rs's controller-rs tests do: a
//! `tower_test` service pair, the client on one end, the test on the other.
//!
//! Two ways to answer:
//! - [`Script`]: the test awaits each expected request ([`Script::expect`]), asserts its
//!   method, path, query and body, and answers it: exact sequences, for small calls.
//! - [`FakeApiServer`]: a task answering from an in-memory object map with the API server's
//!   semantics for custom resources (resourceVersion conflicts, status subresource,
//!   finalizers and deletionTimestamp, generateName), recording every request: for the
//!   controllers, whose many calls are checked from the log.
//!
//! (`tests/mock/mod.rs` rather than `tests/mock.rs`: Cargo would build the latter as a test
//! crate of its own.)

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

type MockHandle = Handle<Request<Body>, Response<Body>>;

/// How long a test waits for a request it expects.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A client whose requests arrive at the returned handle.
pub fn client() -> (kube::Client, MockHandle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

/// A `metav1.Status` failure body, as the API server sends with 4xx and 5xx answers.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn response(code: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().unwrap(),
    );
    response
}

/// A request as received, its body parsed (`Null` when empty).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: Method,
    /// Path and query, e.g. `/apis/g/v1/namespaces/ns/things?`.
    pub uri: String,
    pub body: Value,
}

impl Recorded {
    /// `METHOD uri`, for comparing sequences of calls.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.uri)
    }
}

async fn receive(request: Request<Body>) -> Recorded {
    let (parts, body) = request.into_parts();
    let bytes = body.collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    Recorded {
        method: parts.method,
        uri: parts.uri.to_string(),
        body,
    }
}

/// One request of a [`Script`], to be answered.
pub struct Exchange {
    pub request: Recorded,
    send: SendResponse<Response<Body>>,
}

impl Exchange {
    pub fn body(&self) -> &Value {
        &self.request.body
    }

    /// Answers with `code` and the JSON `body`.
    pub fn respond(self, code: u16, body: Value) {
        self.send.send_response(response(code, &body));
    }

    /// Answers with a `Status` failure.
    pub fn fail(self, code: u16, reason: &str, message: &str) {
        self.respond(code, status(code, reason, message));
    }
}

/// The test's end of the pair, answering request by request.
pub struct Script {
    handle: MockHandle,
}

impl Script {
    pub fn new(handle: MockHandle) -> Self {
        Script { handle }
    }

    /// The next request, whatever it is.
    pub async fn next(&mut self) -> Exchange {
        let (request, send) = tokio::time::timeout(REQUEST_TIMEOUT, self.handle.next_request())
            .await
            .expect("no request came")
            .expect("the client is gone");
        Exchange {
            request: receive(request).await,
            send,
        }
    }

    /// The next request, asserting its method and path with query.
    pub async fn expect(&mut self, method: Method, uri: &str) -> Exchange {
        let exchange = self.next().await;
        assert_eq!(
            (&exchange.request.method, exchange.request.uri.as_str()),
            (&method, uri),
            "unexpected request, body {}",
            exchange.request.body
        );
        exchange
    }

    /// Asserts that no request comes within a short while.
    pub async fn assert_idle(&mut self) {
        if let Ok(Some((request, _))) =
            tokio::time::timeout(Duration::from_millis(50), self.handle.next_request()).await
        {
            let r = receive(request).await;
            panic!("unexpected request {} {}", r.line(), r.body);
        }
    }
}

/// A resource path: `/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/status]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// `<group>/<version>/<plural>`.
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

fn parse_path(path: &str) -> Option<Target> {
    let rest = path.strip_prefix("/apis/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let (group, version, tail) = (parts.first()?, parts.get(1)?, &parts[2..]);
    let (namespace, tail) = match tail {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(ns.to_string()), tail),
        _ => (None, tail),
    };
    let (plural, name, status) = match tail {
        [plural] => (plural, None, false),
        [plural, name] => (plural, Some(name.to_string()), false),
        [plural, name, "status"] => (plural, Some(name.to_string()), true),
        _ => return None,
    };
    Some(Target {
        resource: format!("{group}/{version}/{plural}"),
        namespace,
        name,
        status,
    })
}

/// The objects of a [`FakeApiServer`] and the requests it received.
#[derive(Debug, Default)]
pub struct State {
    /// (resource `<group>/<version>/<plural>`, namespace or "", name) -> object.
    pub objects: BTreeMap<(String, String, String), Value>,
    pub log: Vec<Recorded>,
    /// Answers to give instead of the usual ones: the first request matching `METHOD uri`
    /// (see [`Recorded::line`]) gets `(code, reason)` and the entry is used up.
    pub fail_next: Vec<(String, u16, String)>,
    next_version: u64,
    next_uid: u64,
    next_generated: u64,
}

impl State {
    fn version(&mut self) -> String {
        self.next_version += 1;
        self.next_version.to_string()
    }

    /// Adds `object` (apiVersion, kind, metadata with name and, if namespaced, namespace) as
    /// the server would store it: uid, resourceVersion, generation, creationTimestamp set.
    pub fn insert(&mut self, plural: &str, mut object: Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        self.next_uid += 1;
        let meta = &mut object["metadata"];
        meta["uid"] = json!(format!("uid-{}", self.next_uid));
        meta["generation"] = json!(1);
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        object["metadata"]["resourceVersion"] = json!(self.version());
        self.objects.insert(
            (format!("{api_version}/{plural}"), ns, name),
            object.clone(),
        );
        object
    }

    /// The stored object, if any.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&(resource.to_string(), ns.to_string(), name.to_string()))
    }

    /// The stored objects of `resource` (`<group>/<version>/<plural>`).
    pub fn all(&self, resource: &str) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|(_, v)| v)
            .collect()
    }

    /// `METHOD uri` of every request received, in order.
    pub fn lines(&self) -> Vec<String> {
        self.log.iter().map(Recorded::line).collect()
    }

    /// The requests that changed something (not GET), in order.
    pub fn writes(&self) -> Vec<&Recorded> {
        self.log
            .iter()
            .filter(|r| r.method != Method::GET)
            .collect()
    }

    fn handle(&mut self, r: &Recorded) -> (u16, Value) {
        let line = r.line();
        if let Some(i) = self.fail_next.iter().position(|(l, _, _)| *l == line) {
            let (_, code, reason) = self.fail_next.remove(i);
            return (code, status(code, &reason, &format!("injected {reason}")));
        }
        let path = r.uri.split('?').next().unwrap_or_default();
        if path.starts_with("/apis/events.k8s.io/") {
            if r.method == Method::POST {
                return (201, r.body.clone());
            }
            return (
                405,
                status(405, "MethodNotAllowed", "events are only created"),
            );
        }
        let Some(t) = parse_path(path) else {
            return (404, status(404, "NotFound", "unknown path"));
        };
        let ns = t.namespace.clone().unwrap_or_default();
        match (&r.method, &t.name) {
            (&Method::GET, None) => {
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|((res, n, _), _)| {
                        *res == t.resource && (t.namespace.is_none() || *n == ns)
                    })
                    .map(|(_, v)| v.clone())
                    .collect();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "List",
                        "metadata": {"resourceVersion": self.next_version.to_string()},
                        "items": items}),
                )
            }
            (&Method::GET, Some(name)) => match self.get(&t.resource, &ns, name) {
                Some(o) => (200, o.clone()),
                None => not_found(name),
            },
            (&Method::POST, None) => self.create(&t, &ns, r.body.clone()),
            (&Method::PUT, Some(name)) => self.replace(&t, &ns, name, r.body.clone()),
            (&Method::DELETE, Some(name)) => self.delete(&t, &ns, name),
            _ => (405, status(405, "MethodNotAllowed", "not supported")),
        }
    }

    fn create(&mut self, t: &Target, ns: &str, mut body: Value) -> (u16, Value) {
        if body["metadata"]["resourceVersion"].is_string() {
            return (
                422,
                status(
                    422,
                    "Invalid",
                    "resourceVersion should not be set on objects to be created",
                ),
            );
        }
        if body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        {
            let prefix = body["metadata"]["generateName"]
                .as_str()
                .unwrap_or_default();
            self.next_generated += 1;
            body["metadata"]["name"] = json!(format!("{prefix}{:05}", self.next_generated));
        }
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if self.get(&t.resource, ns, &name).is_some() {
            return (
                409,
                status(409, "AlreadyExists", &format!("{name} already exists")),
            );
        }
        if !ns.is_empty() {
            body["metadata"]["namespace"] = json!(ns);
        }
        // The status subresource: status is not written on create.
        if let Value::Object(map) = &mut body {
            map.remove("status");
        }
        let plural = t
            .resource
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let stored = self.insert(&plural, body);
        (201, stored)
    }

    fn replace(&mut self, t: &Target, ns: &str, name: &str, body: Value) -> (u16, Value) {
        let Some(current) = self.get(&t.resource, ns, name).cloned() else {
            return not_found(name);
        };
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
            return (
                409,
                status(
                    409,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on {name}: the object has been modified; please apply your changes to the latest version and try again"
                    ),
                ),
            );
        }
        let mut next = current.clone();
        if t.status {
            next["status"] = body.get("status").cloned().unwrap_or(Value::Null);
            if next["status"].is_null()
                && let Value::Object(map) = &mut next
            {
                map.remove("status");
            }
        } else {
            next["spec"] = body.get("spec").cloned().unwrap_or(Value::Null);
            if next["spec"].is_null()
                && let Value::Object(map) = &mut next
            {
                map.remove("spec");
            }
            for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                match body["metadata"].get(field) {
                    Some(v) => next["metadata"][field] = v.clone(),
                    None => {
                        if let Some(m) = next["metadata"].as_object_mut() {
                            m.remove(field);
                        }
                    }
                }
            }
            if next.get("spec") != current.get("spec") {
                let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
                next["metadata"]["generation"] = json!(generation + 1);
            }
        }
        let key = (t.resource.clone(), ns.to_string(), name.to_string());
        let finalizers_empty = next["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if next["metadata"]["deletionTimestamp"].is_string() && finalizers_empty {
            self.objects.remove(&key);
            return (200, next);
        }
        if next != current {
            next["metadata"]["resourceVersion"] = json!(self.version());
        }
        self.objects.insert(key, next.clone());
        (200, next)
    }

    fn delete(&mut self, t: &Target, ns: &str, name: &str) -> (u16, Value) {
        let key = (t.resource.clone(), ns.to_string(), name.to_string());
        let Some(current) = self.objects.get(&key).cloned() else {
            return not_found(name);
        };
        let has_finalizers = current["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !has_finalizers {
            self.objects.remove(&key);
            return (200, current);
        }
        let mut next = current.clone();
        if !next["metadata"]["deletionTimestamp"].is_string() {
            next["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
            next["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            next["metadata"]["resourceVersion"] = json!(self.version());
        }
        self.objects.insert(key, next.clone());
        (200, next)
    }
}

fn not_found(name: &str) -> (u16, Value) {
    (
        404,
        status(404, "NotFound", &format!("\"{name}\" not found")),
    )
}

/// A mock API server answering from a [`State`]; see the module documentation.
pub struct FakeApiServer {
    pub state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeApiServer {
    /// A client and the server behind it, serving `state`.
    pub fn start(state: State) -> (kube::Client, FakeApiServer) {
        let (client, mut handle) = client();
        let state = Arc::new(Mutex::new(state));
        let served = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let recorded = receive(request).await;
                let (code, body) = {
                    let mut state = served.lock().unwrap();
                    let answer = state.handle(&recorded);
                    state.log.push(recorded);
                    answer
                };
                send.send_response(response(code, &body));
            }
        });
        (client, FakeApiServer { state, task })
    }

    /// Runs `f` on the state.
    pub fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Forgets the requests received so far.
    pub fn clear_log(&self) {
        self.with(|s| s.log.clear());
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
