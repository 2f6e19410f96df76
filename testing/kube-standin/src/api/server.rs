//! Serving the API over HTTPS (HTTP/1.1 and h2 by ALPN): each connection's client
//! certificate chain goes to authentication with every request; bodies are read up to the
//! API's limit; responses may stream (watches). Shutdown lets requests in flight finish for a
//! few seconds, then closes what is left (open watches).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::status::ApiError;
use super::{Api, Body, Peer, error_response};
use crate::serve::stopped;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

async fn answer(api: Arc<Api>, peer: Arc<Peer>, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let limit = api.settings.max_body;
    let bytes: Bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return if e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                error_response(&ApiError::too_large(limit))
            } else {
                error_response(&ApiError::bad_request(format!(
                    "reading the request body: {e}"
                )))
            };
        }
    };
    api.handle(Request::from_parts(parts, bytes), &peer).await
}

/// Serves `api` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    api: Arc<Api>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut shutdown) => break,
        };
        while connections.try_join_next().is_some() {}
        let (tcp, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let api = Arc::clone(&api);
        let mut shutdown = shutdown.clone();
        connections.spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake error from {remote}: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake from {remote} timed out");
                    return;
                }
            };
            let peer = Arc::new(Peer {
                certificates: stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .map(|certs| certs.iter().map(|c| c.clone().into_owned()).collect())
                    .unwrap_or_default(),
            });
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let api = Arc::clone(&api);
                let peer = Arc::clone(&peer);
                async move { Ok::<_, Infallible>(answer(api, peer, request).await) }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("connection from {remote} ended: {e}");
                    }
                }
                _ = stopped(&mut shutdown) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
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
        connections.abort_all();
    }
}
