//! The manager's HTTP endpoints: Prometheus metrics for scrapers, liveness and readiness for
//! the kubelet. Two listeners, as controller-runtime has them, so that the probes never sit
//! behind a slow scrape and the metrics port can be exposed alone:
//!
//! ```text
//! --metrics-bind-address      (8080)  GET /metrics  200, OpenMetrics text of Metrics::encode
//! --health-probe-bind-address (8081)  GET /healthz  200 "ok" while the process serves
//!                                     GET /readyz   200 "ok" | 503 "not ready: <reason>"
//! anything else: 404; a method other than GET or HEAD: 405
//! ```
//!
//! Readiness is a [`tokio::sync::watch`] value that `run.rs` sets (API server reachable,
//! watches synced); this module only reports it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// Where Prometheus scrapes.
pub const METRICS_PATH: &str = "/metrics";
/// The liveness probe.
pub const HEALTHZ_PATH: &str = "/healthz";
/// The readiness probe.
pub const READYZ_PATH: &str = "/readyz";
/// Default port of [`METRICS_PATH`].
pub const DEFAULT_METRICS_PORT: u16 = 8080;
/// Default port of [`HEALTHZ_PATH`] and [`READYZ_PATH`].
pub const DEFAULT_PROBE_PORT: u16 = 8081;
/// The content type of the OpenMetrics text format that [`Metrics::encode`] writes.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether the manager can do its work, as `/readyz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Not ready, and why (for a person reading `kubectl describe pod`).
    NotReady(String),
}

impl Readiness {
    pub fn not_ready(reason: impl Into<String>) -> Self {
        Readiness::NotReady(reason.into())
    }
}

/// What one listener serves. A listener may serve both sets of endpoints (when the two bind
/// addresses are the same).
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    /// Serve [`METRICS_PATH`] from these metrics.
    pub metrics: Option<Arc<Metrics>>,
    /// Serve [`HEALTHZ_PATH`] and [`READYZ_PATH`], readiness from this channel.
    pub probes: Option<watch::Receiver<Readiness>>,
}

impl Endpoints {
    pub fn metrics(metrics: Arc<Metrics>) -> Self {
        Endpoints {
            metrics: Some(metrics),
            probes: None,
        }
    }

    pub fn probes(readiness: watch::Receiver<Readiness>) -> Self {
        Endpoints {
            metrics: None,
            probes: Some(readiness),
        }
    }

    /// The answer to `method path`: pure, no I/O, so that tests and the server agree.
    pub fn respond(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        let known = match path {
            METRICS_PATH => self.metrics.is_some(),
            HEALTHZ_PATH | READYZ_PATH => self.probes.is_some(),
            _ => false,
        };
        if !known {
            return text(StatusCode::NOT_FOUND, "not found\n");
        }
        if method != Method::GET && method != Method::HEAD {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        match (path, &self.metrics, &self.probes) {
            (METRICS_PATH, Some(metrics), _) => {
                let mut response = Response::new(Full::new(Bytes::from(metrics.encode())));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
                );
                response
            }
            (READYZ_PATH, _, Some(readiness)) => match &*readiness.borrow() {
                Readiness::Ready => text(StatusCode::OK, "ok\n"),
                Readiness::NotReady(reason) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("not ready: {reason}\n"),
                ),
            },
            // The process answers, which is all liveness asks: a wedged runtime answers
            // nothing and the kubelet restarts it.
            _ => text(StatusCode::OK, "ok\n"),
        }
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Binds `address`.
///
/// # Errors
/// When the address cannot be bound (in use, not local, no permission).
pub async fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address).await
}

/// Serves `endpoints` on `listener` until the returned future is dropped (or the task that
/// runs it aborted). Each connection runs in its own task; a failed connection is logged at
/// debug level and does not stop the server.
///
/// # Errors
/// When accepting fails in a way that is not about one connection (the listener is gone).
pub async fn serve(listener: TcpListener, endpoints: Endpoints) -> std::io::Result<()> {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of file descriptors and the like: one client's problem is not a reason to
            // stop serving the probes; wait a little and go on.
            Err(e) if is_transient(&e) => {
                tracing::warn!(error = %e, "accepting an HTTP connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = endpoints.respond(request.method(), request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock | OutOfMemory
    ) || e
        .raw_os_error()
        .is_some_and(|code| code == 23 || code == 24) // ENFILE, EMFILE
}

#[cfg(test)]
mod tests;
