//! `oi-http`: the HTTP client of the project's own calls over HTTP (the engine's to API
//! servers, object stores, Redfish BMCs, the join commands').
//!
//! ```text
//! Trust + identity ──► Client::new ──► one rustls configuration, built here, once
//!                                      (the system's roots are read once per process)
//! Client::send(request) ──► a kept connection to that origin once it is ready, else a new
//!                           one (HTTP/1.1; `http://` in plain TCP, `https://` over TLS);
//!                           every method reuses connections: a request a kept connection
//!                           closed before taking goes to the next one; a read it leaves
//!                           unanswered is asked again on a new one; anything else that
//!                           may have left is the caller's to retry
//!                       ──► with [`Options::http2`], over TLS to a server that agrees
//!                           (ALPN `h2`): one connection per origin, shared by every
//!                           request at once (the others wait while the first one dials
//!                           it); a server that does not is spoken to as above
//! ```
//!
//! Every exchange is bounded: the connection by [`Options::connect_timeout`], the answer's
//! head by [`Options::timeout`], and a streamed body by the same time without a byte
//! ([`Options::timeout`] between frames), so that a download of any size can proceed while a
//! server that stops sending fails.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper::client::conn::http1::SendRequest;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

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
    /// Offers HTTP/2 over TLS (ALPN `h2`, then `http/1.1`): a server that takes it gets every
    /// request on one shared connection, in parallel. Off, only HTTP/1.1 is offered.
    pub http2: bool,
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
            http2: false,
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

/// The rustls configuration of `options` (over ring; ALPN `http/1.1`, after `h2` with
/// [`Options::http2`]): [`Error::Settings`] names the part that does not parse (never the
/// key's content).
fn tls_config(options: &Options) -> Result<ClientConfig, Error> {
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
    let mut config = match &options.identity {
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
    config.alpn_protocols = if options.http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(config)
}

/// A connection's destination: scheme, host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Origin {
    tls: bool,
    host: String,
    port: u16,
}

impl Origin {
    fn of(uri: &http::Uri) -> Result<Origin, Error> {
        let bad = |why: &str| Error::Settings(format!("{uri}: {why}"));
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("not an http:// or https:// URL")),
        };
        let host = uri
            .host()
            .ok_or_else(|| bad("no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Origin { tls, host, port })
    }

    /// `host:port` as the `Host` header says it.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// An idle connection, and since when.
struct Idle {
    sender: SendRequest<Body>,
    since: Instant,
}

type Pool = Arc<Mutex<HashMap<Origin, Vec<Idle>>>>;

/// The HTTP/2 side of a client: its shared connection per origin, the origins found to speak
/// only HTTP/1.1, and the gate one dialer of each origin holds while the others wait.
#[derive(Default)]
struct Multiplexed {
    shared: HashMap<Origin, http2::SendRequest<Body>>,
    http1_only: HashSet<Origin>,
    dialing: HashMap<Origin, Arc<tokio::sync::Mutex<()>>>,
}

/// A new connection: HTTP/1.1, or HTTP/2 when the server took it.
enum Connection {
    Http1(SendRequest<Body>),
    Http2(http2::SendRequest<Body>),
}

/// How long a kept connection may take to become ready for the next request.
const READY_WAIT: Duration = Duration::from_secs(1);

/// How long a read over a kept connection may wait for its answer before it is asked again
/// on a new connection: a machine that went away without closing its connections answers
/// nothing on them, where a new connection is refused at once.
const REUSE_WAIT: Duration = Duration::from_secs(1);

/// A pooled HTTP/1.1 client of one trust and identity. Cloning it shares its connections.
///
/// Every method reuses idle connections. A request is handed to a kept connection only if
/// it is ready for one; one that closed before taking the request gives it back, and the
/// request goes to the next connection (hyper's `try_send_request`): nothing that may have
/// been sent is ever sent twice, except a read (GET or HEAD without a body) that got no
/// answer within [`REUSE_WAIT`] on a kept connection, which is asked again on a new one.
#[derive(Clone)]
pub struct Client {
    options: Arc<Options>,
    tls: tokio_rustls::TlsConnector,
    idle: Pool,
    multiplexed: Arc<Mutex<Multiplexed>>,
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
        Ok(Client {
            options: Arc::new(options),
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            idle: Arc::default(),
            multiplexed: Arc::default(),
        })
    }

    /// The options it was made with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// How many idle connections it keeps now that are still open (an HTTP/2 connection,
    /// shared, counts as one).
    pub fn idle_connections(&self) -> usize {
        let shared = self
            .mux()
            .shared
            .values()
            .filter(|s| !s.is_closed())
            .count();
        shared
            + self
                .pool()
                .values()
                .flatten()
                .filter(|i| !i.sender.is_closed())
                .count()
    }

    fn mux(&self) -> std::sync::MutexGuard<'_, Multiplexed> {
        self.multiplexed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open HTTP/2 connection to `origin`, if there is one (a closed one is forgotten).
    fn live_shared(&self, origin: &Origin) -> Option<http2::SendRequest<Body>> {
        let mut mux = self.mux();
        match mux.shared.get(origin) {
            Some(s) if !s.is_closed() => Some(s.clone()),
            Some(_) => {
                mux.shared.remove(origin);
                None
            }
            None => None,
        }
    }

    /// The HTTP/2 connection to `origin` and whether it was just made: the open one, or a
    /// new one dialed by the first caller while the others wait for it. `None` when the
    /// origin speaks only HTTP/1.1 (the connection made to learn so kept for the next
    /// request).
    async fn shared(
        &self,
        origin: &Origin,
    ) -> Result<Option<(http2::SendRequest<Body>, bool)>, Error> {
        if let Some(s) = self.live_shared(origin) {
            return Ok(Some((s, false)));
        }
        let gate = {
            let mut mux = self.mux();
            if mux.http1_only.contains(origin) {
                return Ok(None);
            }
            Arc::clone(mux.dialing.entry(origin.clone()).or_default())
        };
        let _dialing = gate.lock().await;
        if let Some(s) = self.live_shared(origin) {
            return Ok(Some((s, false)));
        }
        if self.mux().http1_only.contains(origin) {
            return Ok(None);
        }
        match self.connect(origin).await? {
            Connection::Http2(s) => {
                self.mux().shared.insert(origin.clone(), s.clone());
                Ok(Some((s, true)))
            }
            Connection::Http1(s) => {
                self.mux().http1_only.insert(origin.clone());
                Client::keep(&self.idle, origin.clone(), s, self.options.idle_per_origin);
                Ok(None)
            }
        }
    }

    /// Forgets `origin`'s HTTP/2 connection: the next request dials a new one.
    fn forget_shared(&self, origin: &Origin) {
        self.mux().shared.remove(origin);
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, HashMap<Origin, Vec<Idle>>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest idle connection to `origin` that is still open, not too old, and ready
    /// for a request (one given back as its last answer ended becomes ready at once).
    async fn take_ready(&self, origin: &Origin) -> Option<SendRequest<Body>> {
        loop {
            let mut sender = {
                let mut pool = self.pool();
                let idle = pool.get_mut(origin)?;
                let fresh_after = Instant::now().checked_sub(self.options.idle_timeout);
                idle.retain(|i| !i.sender.is_closed() && fresh_after.is_none_or(|t| i.since > t));
                idle.pop()?.sender
            };
            if let Ok(Ok(())) = tokio::time::timeout(READY_WAIT, sender.ready()).await {
                return Some(sender);
            }
        }
    }

    /// Keeps `sender` for a later request (its last answer ended).
    fn keep(pool: &Pool, origin: Origin, sender: SendRequest<Body>, most: usize) {
        if sender.is_closed() {
            return;
        }
        let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
        let idle = pool.entry(origin).or_default();
        idle.retain(|i| !i.sender.is_closed());
        if idle.len() < most {
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// A new connection to `origin`: TCP, TLS for https, HTTP/1.1 (or HTTP/2 when offered
    /// and taken); its driver runs until it closes or its senders are dropped.
    async fn connect(&self, origin: &Origin) -> Result<Connection, Error> {
        let limit = self.options.connect_timeout;
        let work = async {
            let tcp = TcpStream::connect((origin.host.as_str(), origin.port))
                .await
                .map_err(|e| Error::Connect(format!("{}: {e}", origin.authority())))?;
            let _ = tcp.set_nodelay(true);
            if origin.tls {
                let name = ServerName::try_from(origin.host.clone())
                    .map_err(|e| Error::Connect(format!("{}: {e}", origin.host)))?;
                let stream = self.tls.connect(name, tcp).await.map_err(|e| {
                    Error::Connect(format!("{}: TLS handshake: {e}", origin.authority()))
                })?;
                if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                    handshake2(TokioIo::new(stream))
                        .await
                        .map(Connection::Http2)
                } else {
                    handshake(TokioIo::new(stream)).await.map(Connection::Http1)
                }
            } else {
                handshake(TokioIo::new(tcp)).await.map(Connection::Http1)
            }
        };
        tokio::time::timeout(limit, work).await.map_err(|_| {
            Error::Connect(format!(
                "{}: no connection within {limit:?}",
                origin.authority()
            ))
        })?
    }

    /// Sends `request` (an absolute URI) and returns once the answer's head came; its body
    /// is then read as it arrives, each piece within [`Options::timeout`] of the last. A
    /// non-2xx status is an answer, not an error.
    ///
    /// # Errors
    /// [`Error`]; [`Error::not_sent`] tells when the request surely never left.
    pub async fn send(&self, request: http::Request<Body>) -> Result<Response, Error> {
        let timeout = self.options.timeout;
        tokio::time::timeout(timeout, self.exchange(request))
            .await
            .map_err(|_| Error::Timeout(timeout))?
    }

    async fn exchange(&self, request: http::Request<Body>) -> Result<Response, Error> {
        let origin = Origin::of(request.uri())?;
        let (mut parts, body) = request.into_parts();
        parts.uri = origin_form(&parts.uri);
        parts.headers.entry(http::header::HOST).or_insert(
            http::HeaderValue::from_str(&origin.authority())
                .map_err(|e| Error::Settings(e.to_string()))?,
        );
        let replayable = matches!(parts.method, http::Method::GET | http::Method::HEAD)
            && http_body::Body::is_end_stream(&body);
        // A read is asked again from its head alone; anything else once.
        let again = replayable.then(|| parts.clone());
        let request = http::Request::from_parts(parts, body);
        let mut pending = Some(if self.options.http2 && origin.tls {
            match self
                .multiplexed_exchange(&origin, request, again.as_ref())
                .await?
            {
                Ok(response) => return Ok(response),
                Err(request) => request,
            }
        } else {
            request
        });
        while let Some(request) = pending.take() {
            let Some(mut sender) = self.take_ready(&origin).await else {
                pending = Some(request);
                break;
            };
            let attempt = sender.try_send_request(request);
            let outcome = match &again {
                Some(_) => match tokio::time::timeout(REUSE_WAIT, attempt).await {
                    Ok(outcome) => outcome,
                    // No answer: its machine may be gone. Asked again on a new connection.
                    Err(_) => break,
                },
                None => attempt.await,
            };
            match outcome {
                Ok(response) => return Ok(self.given_back(response, origin, sender)),
                Err(mut e) => match e.take_message() {
                    // The connection closed before taking it: nothing was sent.
                    Some(back) => pending = Some(back),
                    None if again.is_some() => break,
                    None => return Err(Error::Exchange(error_chain(e.error()))),
                },
            }
        }
        let request = match (pending, &again) {
            (Some(request), _) => request,
            (None, Some(head)) => http::Request::from_parts(head.clone(), empty()),
            (None, None) => {
                return Err(Error::Exchange(
                    "the request was lost on a kept connection".into(),
                ));
            }
        };
        match self.connect(&origin).await? {
            Connection::Http1(mut sender) => {
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| Error::Exchange(error_chain(&e)))?;
                Ok(self.given_back(response, origin, sender))
            }
            // A server found to speak only HTTP/1.1 that now takes HTTP/2.
            Connection::Http2(mut sender) => {
                self.mux().http1_only.remove(&origin);
                self.mux().shared.insert(origin.clone(), sender.clone());
                let response = sender
                    .send_request(absolute_form(&origin, request))
                    .await
                    .map_err(|e| Error::Exchange(error_chain(&e)))?;
                Ok(self.streamed(response, None))
            }
        }
    }

    /// `request` over `origin`'s shared HTTP/2 connection, with the HTTP/1.1 rules: one the
    /// connection did not take goes to a new one; a read (`again`) a kept connection leaves
    /// unanswered within [`REUSE_WAIT`], or that it drops, is asked again on a new one;
    /// anything else that may have left fails. `Err(request)` when the origin speaks only
    /// HTTP/1.1.
    async fn multiplexed_exchange(
        &self,
        origin: &Origin,
        request: http::Request<Body>,
        again: Option<&http::request::Parts>,
    ) -> Result<Result<Response, http::Request<Body>>, Error> {
        let mut pending = request;
        // At most once on a kept connection, then once on a new one.
        for _ in 0..2 {
            let Some((mut sender, fresh)) = self.shared(origin).await? else {
                return Ok(Err(pending));
            };
            let attempt = sender.try_send_request(absolute_form(origin, pending));
            let outcome = match again {
                Some(head) if !fresh => match tokio::time::timeout(REUSE_WAIT, attempt).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        self.forget_shared(origin);
                        pending = http::Request::from_parts(head.clone(), empty());
                        continue;
                    }
                },
                _ => attempt.await,
            };
            match outcome {
                Ok(response) => return Ok(Ok(self.streamed(response, None))),
                Err(mut e) => {
                    if sender.is_closed() {
                        self.forget_shared(origin);
                    }
                    match (e.take_message(), again) {
                        (Some(back), _) => pending = back_to_origin_form(back),
                        (None, Some(head)) if !fresh => {
                            pending = http::Request::from_parts(head.clone(), empty());
                        }
                        (None, _) => return Err(Error::Exchange(error_chain(e.error()))),
                    }
                }
            }
        }
        let Some((mut sender, _)) = self.shared(origin).await? else {
            return Ok(Err(pending));
        };
        let response = sender
            .send_request(absolute_form(origin, pending))
            .await
            .map_err(|e| Error::Exchange(error_chain(&e)))?;
        Ok(Ok(self.streamed(response, None)))
    }

    /// `response`, whose body gives `sender` back to the pool when it ends.
    fn given_back(
        &self,
        response: http::Response<hyper::body::Incoming>,
        origin: Origin,
        sender: SendRequest<Body>,
    ) -> Response {
        let back = GiveBack {
            pool: Arc::clone(&self.idle),
            origin,
            sender,
            most: self.options.idle_per_origin,
        };
        self.streamed(response, Some(back))
    }

    /// `response` with its body bounded by the client's timeout; `back` is the HTTP/1.1
    /// connection given back to the pool when the body ends.
    fn streamed(
        &self,
        response: http::Response<hyper::body::Incoming>,
        back: Option<GiveBack>,
    ) -> Response {
        let timeout = self.options.timeout;
        response.map(|body| ResponseBody {
            inner: body,
            timeout,
            idle: None,
            back,
        })
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

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<T>(io: TokioIo<T>) -> Result<SendRequest<Body>, Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| Error::Connect(format!("HTTP handshake: {e}")))?;
    tokio::spawn(async move {
        // Its end is seen by the sender (closed), its errors by the requests.
        let _ = connection.await;
    });
    Ok(sender)
}

/// HTTP/2 over `io` (TLS that negotiated `h2`), its connection driven by a task of its own.
async fn handshake2<T>(io: TokioIo<T>) -> Result<http2::SendRequest<Body>, Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| Error::Connect(format!("HTTP/2 handshake: {e}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// `request` (origin-form, with `Host`) as HTTP/2 sends it: its URI absolute (the
/// `:scheme` and `:authority` pseudo-headers), no `Host`.
fn absolute_form(origin: &Origin, request: http::Request<Body>) -> http::Request<Body> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let scheme = if origin.tls { "https" } else { "http" };
    if let Ok(uri) = http::Uri::try_from(format!("{scheme}://{}{path}", origin.authority())) {
        parts.uri = uri;
        parts.headers.remove(http::header::HOST);
    }
    http::Request::from_parts(parts, body)
}

/// A request HTTP/2 handed back unsent, in origin-form again with its `Host`.
fn back_to_origin_form(request: http::Request<Body>) -> http::Request<Body> {
    let (mut parts, body) = request.into_parts();
    if let Some(authority) = parts.uri.authority()
        && let Ok(host) = http::HeaderValue::from_str(authority.as_str())
    {
        parts.headers.entry(http::header::HOST).or_insert(host);
    }
    parts.uri = origin_form(&parts.uri);
    http::Request::from_parts(parts, body)
}

/// `uri`'s path and query, as HTTP/1.1 asks an origin server.
fn origin_form(uri: &http::Uri) -> http::Uri {
    uri.path_and_query().map_or_else(
        || http::Uri::from_static("/"),
        |p| http::Uri::try_from(p.as_str()).unwrap_or_else(|_| http::Uri::from_static("/")),
    )
}

/// A request to a JSON API as Kubernetes' API servers take them: `Accept` JSON, the bearer
/// token if any, and a body of JSON (a JSON merge patch, RFC 7386, with PATCH).
///
/// # Errors
/// When `url` or a header value is not valid.
pub fn json_request(
    method: &http::Method,
    url: &str,
    user_agent: &str,
    bearer: Option<&str>,
    body: Option<&str>,
) -> Result<http::Request<Body>, http::Error> {
    let mut builder = http::Request::builder()
        .method(method.clone())
        .uri(url)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, user_agent);
    if let Some(token) = bearer {
        builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if body.is_some() {
        let content_type = if *method == http::Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    builder.body(body.map_or_else(empty, |b| full(b.to_string())))
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
    /// The connection, given back to the pool when the body ends (dropped with the body
    /// otherwise: a connection whose answer was not read to its end is not reused).
    back: Option<GiveBack>,
}

struct GiveBack {
    pool: Pool,
    origin: Origin,
    sender: SendRequest<Body>,
    most: usize,
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
                if frame.is_none()
                    && let Some(back) = this.back.take()
                {
                    Client::keep(&back.pool, back.origin, back.sender, back.most);
                }
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

#[cfg(test)]
mod tests;
