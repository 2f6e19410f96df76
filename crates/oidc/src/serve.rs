//! The provider over HTTPS (HTTP/1.1): each request's form body read (at most
//! [`MAX_BODY`] bytes), answered by [`Provider::handle`] (a POST, which may check a password,
//! on a blocking thread).

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request as HttpRequest, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::provider::{Provider, Reply, Request, decode};

/// Request bodies larger than this are refused.
pub const MAX_BODY: usize = 64 * 1024;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The TLS configuration from PEM files.
///
/// # Errors
/// The reason (never key material), naming the file.
pub fn tls_config(certificate: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .and_then(Iterator::collect)
        .map_err(|e| format!("{}: no PEM certificate ({e})", certificate.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", certificate.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|_| format!("{}: no PEM private key", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: {e}", certificate.display()))?;
    Ok(Arc::new(config))
}

/// Serves `provider` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, tls: Arc<rustls::ServerConfig>, provider: Arc<Provider>) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let provider = Arc::clone(&provider);
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    eprintln!("TLS handshake from {peer} failed: {e}");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(move |request: HttpRequest<Incoming>| {
                let provider = Arc::clone(&provider);
                async move { Ok::<_, Infallible>(answer(provider, request, peer).await) }
            });
            // A client that does not finish its headers is dropped (slow clients cannot hold
            // connections open for ever).
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    provider: Arc<Provider>,
    request: HttpRequest<Incoming>,
    peer: std::net::SocketAddr,
) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let form = if parts.method == http::Method::POST {
        let is_form = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !is_form {
            return plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "POST bodies must be application/x-www-form-urlencoded",
            );
        }
        match Limited::new(body, MAX_BODY).collect().await {
            Ok(b) => decode(&String::from_utf8_lossy(&b.to_bytes()))
                .into_iter()
                .collect(),
            Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
        }
    } else {
        Vec::new()
    };
    let request = Request {
        method: parts.method.as_str().to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or_default().to_string(),
        authorization: parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        form,
        // An IPv4 client of a dual-stack socket counts as its IPv4 address.
        peer: Some(peer.ip().to_canonical()),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // A POST may check a password (PBKDF2, a fifth of a second at the default cost): on a
    // blocking thread, so the async workers go on answering everyone else meanwhile.
    if request.method == "POST" {
        return match tokio::task::spawn_blocking(move || provider.handle(&request, now)).await {
            Ok(reply) => to_http(reply),
            Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "the request failed"),
        };
    }
    to_http(provider.handle(&request, now))
}

fn to_http(reply: Reply) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(reply.body)));
    *r.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in reply.headers {
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            r.headers_mut().insert(name, v);
        }
    }
    r
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_string())));
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests;
