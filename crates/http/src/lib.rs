//! `oi-http`: the HTTP client of the project's own calls to other services (object stores,
//! Redfish BMCs).
//!
//! ```text
//! Trust + identity ──► Client::new ──► one rustls configuration, built here, once
//!                                      (the system's roots are read once per process)
//! Client::send(request) ──► a kept connection to that origin if one is idle, else a new
//!                           one (HTTP/1.1; `http://` in plain TCP, `https://` over TLS);
//!                           every method reuses connections: a request that provably never
//!                           left (the kept connection had closed) is sent again on a new
//!                           one, anything else is the caller's to retry
//! ```
//!
//! Every exchange is bounded: the connection by [`Options::connect_timeout`], the answer's
//! head by [`Options::timeout`], and a streamed body by the same time without a byte
//! ([`Options::timeout`] between frames), so that a download of any size can proceed while a
//! server that stops sending fails.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Any error a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of a request: whole bytes ([`full`]) or any stream of them.
pub type Body = BoxBody<Bytes, BoxError>;

/// A body of `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// An empty body.
pub fn empty() -> Body {
    full(Bytes::new())
}

/// Which certificate authorities a server's certificate must chain to.
#[derive(Clone, PartialEq, Eq)]
pub enum Roots {
    /// The system's (read once per process), as every TLS client does by default.
    System,
    /// The system's, and these PEM CAs besides (e.g. `AWS_CA_BUNDLE`, a BMC's CA).
    SystemAnd(String),
    /// These PEM CAs alone (a cluster's own CA: the system's are not trusted for it).
    Only(String),
}

/// A client certificate and its key, both PEM. The key never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    pub certificate_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Identity { <certificate>, <redacted key> }")
    }
}

impl fmt::Debug for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Roots::System => "Roots::System",
            Roots::SystemAnd(_) => "Roots::SystemAnd(<pem>)",
            Roots::Only(_) => "Roots::Only(<pem>)",
        })
    }
}

/// How a [`Client`] connects and how long it waits.
#[derive(Debug, Clone)]
pub struct Options {
    pub roots: Roots,
    pub identity: Option<Identity>,
    /// For the TCP connection (and its TLS handshake).
    pub connect_timeout: Duration,
    /// For the answer's status and headers, and then between two pieces of its body.
    pub timeout: Duration,
    /// How long an idle connection is kept for a later request.
    pub idle_timeout: Duration,
    /// At most this many idle connections are kept per origin.
    pub idle_per_origin: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            roots: Roots::System,
            identity: None,
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            idle_per_origin: 8,
        }
    }
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The trust or identity could not be made into a TLS configuration (nothing was sent).
    #[error("TLS settings: {0}")]
    Settings(String),
    /// No connection could be made (refused, unreachable, TLS handshake): nothing was sent.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// No status within [`Options::timeout`] (connecting included).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The exchange broke after the request may have left: whether the server acted on it
    /// is unknown.
    #[error("{0}")]
    Exchange(String),
}

impl Error {
    /// Whether the request is known not to have reached the server.
    pub fn not_sent(&self) -> bool {
        matches!(self, Error::Settings(_) | Error::Connect(_))
    }
}

/// The system's trust roots, read once per process; the ones rustls cannot use are left out,
/// as every TLS client does.
pub fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

fn pem_certs(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Settings(format!("{what}: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Settings(format!("{what}: no PEM certificate in it")));
    }
    Ok(certs)
}

/// The rustls configuration of `options` (over ring): [`Error::Settings`] names the part
/// that does not parse (never the key's content).
fn tls_config(options: &Options) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    if matches!(options.roots, Roots::System | Roots::SystemAnd(_)) {
        let (_added, _unusable) = roots.add_parsable_certificates(system_roots().iter().cloned());
    }
    if let Roots::SystemAnd(pem) | Roots::Only(pem) = &options.roots {
        for cert in pem_certs(pem, "CA certificates")? {
            roots
                .add(cert)
                .map_err(|e| Error::Settings(format!("CA certificate refused: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Settings(e.to_string()))?
        .with_root_certificates(roots);
    let config = match &options.identity {
        Some(identity) => {
            let certs = pem_certs(&identity.certificate_pem, "client certificate")?;
            // The error of a key that does not parse says nothing of the key's content.
            let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
                .map_err(|_| Error::Settings("client key PEM does not parse".into()))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| Error::Settings(format!("client identity refused: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    // ALPN (http/1.1) is set by the connector.
    Ok(Arc::new(config))
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// A pooled HTTP/1.1 client of one trust and identity. Cloning it shares its connections.
#[derive(Clone)]
pub struct Client {
    inner: hyper_util::client::legacy::Client<Connector, Body>,
    options: Arc<Options>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// An answer: status, headers, and its body, streamed.
pub type Response = http::Response<ResponseBody>;

impl Client {
    /// A client of `options`, its TLS configuration built now.
    ///
    /// # Errors
    /// [`Error::Settings`] when the trust or identity does not parse.
    pub fn new(options: Options) -> Result<Client, Error> {
        let config = tls_config(&options)?;
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(options.connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(Arc::unwrap_or_clone(config))
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let inner = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(options.idle_timeout)
            .pool_max_idle_per_host(options.idle_per_origin)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        Ok(Client {
            inner,
            options: Arc::new(options),
        })
    }

    /// The options it was made with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Sends `request` (an absolute URI) and returns once the answer's head came; its body
    /// is then read as it arrives, each piece within [`Options::timeout`] of the last. A
    /// non-2xx status is an answer, not an error.
    ///
    /// # Errors
    /// [`Error`]; [`Error::not_sent`] tells when the request surely never left.
    pub async fn send(&self, request: http::Request<Body>) -> Result<Response, Error> {
        let timeout = self.options.timeout;
        let response = match tokio::time::timeout(timeout, self.inner.request(request)).await {
            Err(_) => return Err(Error::Timeout(timeout)),
            Ok(Err(e)) if e.is_connect() => return Err(Error::Connect(error_chain(&e))),
            Ok(Err(e)) => return Err(Error::Exchange(error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        Ok(response.map(|body| ResponseBody {
            inner: body,
            timeout,
            idle: None,
        }))
    }

    /// Sends `request` and reads its whole body: the status, headers and bytes.
    ///
    /// # Errors
    /// [`Error`], also when the body breaks off.
    pub async fn call(
        &self,
        request: http::Request<Body>,
    ) -> Result<(http::response::Parts, Bytes), Error> {
        let (parts, body) = self.send(request).await?.into_parts();
        let bytes = body
            .collect()
            .await
            .map_err(|e| Error::Exchange(format!("reading the answer: {}", error_chain(&*e))))?
            .to_bytes();
        Ok((parts, bytes))
    }
}

/// An error and its causes, one line (each cause once).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A streamed answer body, failing when no piece of it comes within the client's timeout.
pub struct ResponseBody {
    inner: hyper::body::Incoming,
    timeout: Duration,
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.idle = None;
                Poll::Ready(frame.map(|f| f.map_err(|e| Box::new(e) as BoxError)))
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let idle = this
                    .idle
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match idle.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                        "the answer stopped: nothing more came within {timeout:?}"
                    )
                    .into()))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

use std::future::Future as _;

#[cfg(test)]
mod tests;
