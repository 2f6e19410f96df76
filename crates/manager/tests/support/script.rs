//! A scripted API server for kube-rs clients, as kube-rs's controller-rs tests do: a
//! `tower_test` service pair, the client on one end, the test on the other. The test awaits
//! each expected request ([`Script::expect`]), asserts its method, path, query and body, and
//! answers it: exact sequences. No API semantics live here: the one copy of those is the API
//! server stand-in (`oi-manager-testsupport`).
//!
//! (Under `tests/support/`, included with `#[path]`: a file directly in `tests/` would be a
//! test crate of its own.)

#![allow(dead_code)]

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
