//! An HTTPS server (HTTP/1.1 and h2 by ALPN) that hands each request, with the verified client
//! identity if any, to a synchronous handler, and shuts down gracefully.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::tls::{Identity, identity};

/// A response with a whole body.
pub type Reply = Response<Full<Bytes>>;

/// Answers one request; the identity is that of a client certificate the TLS layer verified.
pub type Handler = Arc<dyn Fn(&Request<Incoming>, Option<&Identity>) -> Reply + Send + Sync>;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A plain-text reply.
pub fn text(status: StatusCode, body: impl Into<String>) -> Reply {
    reply(
        status,
        "text/plain; charset=utf-8",
        body.into().into_bytes(),
    )
}

/// A JSON reply.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Reply {
    reply(status, "application/json", value.to_string().into_bytes())
}

fn reply(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

/// Serves `listener` until `shutdown` turns true, then lets open connections finish their
/// requests (up to a few seconds).
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    handler: Handler,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut shutdown) => break,
        };
        // Reap finished connections so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let handler = Arc::clone(&handler);
        let mut shutdown = shutdown.clone();
        connections.spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::info!("TLS handshake error from {peer}: {e}");
                    return;
                }
                Err(_) => {
                    tracing::info!("TLS handshake from {peer} timed out");
                    return;
                }
            };
            let who = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(identity);
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let reply = handler(&request, who.as_ref());
                async move { Ok::<_, Infallible>(reply) }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("connection from {peer} ended: {e}");
                    }
                }
                _ = stopped(&mut shutdown) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!("closing connections still open after {DRAIN_TIMEOUT:?}");
        connections.abort_all();
    }
}

/// Resolves once `stop` holds true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers' futures stay `Send`.
    let _ = stop.wait_for(|s| *s).await;
}

/// Resolves on SIGTERM or SIGINT.
///
/// # Errors
/// When the signal handlers cannot be installed.
pub async fn termination() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

/// The response status for a path nobody serves.
pub fn not_found(path: &str) -> Reply {
    status_json(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("the server could not find the requested resource ({path})"),
    )
}

/// A Kubernetes `Status` object.
pub fn status_json(code: StatusCode, reason: &str, message: &str) -> Reply {
    json(
        code,
        &serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code.as_u16(),
        }),
    )
}

/// Answers one request asynchronously, with the certificate chain the client presented (not
/// verified by TLS: the handler decides).
pub type AsyncHandler = Arc<
    dyn Fn(
            Request<Bytes>,
            Arc<Vec<rustls::pki_types::CertificateDer<'static>>>,
        ) -> futures::future::BoxFuture<'static, Reply>
        + Send
        + Sync,
>;

/// The largest request body [`serve_async`] reads.
const MAX_BODY: usize = 1024 * 1024;

/// Like [`serve`], for an async handler that reads whole request bodies (up to 1 MiB).
pub async fn serve_async(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    handler: AsyncHandler,
    mut shutdown: watch::Receiver<bool>,
) {
    use http_body_util::{BodyExt as _, Limited};
    let acceptor = TlsAcceptor::from(tls);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut shutdown) => break,
        };
        while connections.try_join_next().is_some() {}
        let Ok((tcp, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let acceptor = acceptor.clone();
        let handler = Arc::clone(&handler);
        let mut shutdown = shutdown.clone();
        connections.spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                _ => {
                    tracing::debug!("TLS handshake from {peer} failed or timed out");
                    return;
                }
            };
            let certificates: Arc<Vec<rustls::pki_types::CertificateDer<'static>>> = Arc::new(
                stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                    .unwrap_or_default(),
            );
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let handler = Arc::clone(&handler);
                let certificates = Arc::clone(&certificates);
                async move {
                    let (parts, body) = request.into_parts();
                    let reply = match Limited::new(body, MAX_BODY).collect().await {
                        Ok(body) => {
                            handler(Request::from_parts(parts, body.to_bytes()), certificates).await
                        }
                        Err(_) => text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
                    };
                    Ok::<_, Infallible>(reply)
                }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stopped(&mut shutdown) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        connections.abort_all();
    }
}
