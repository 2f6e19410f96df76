//! The engine's HTTPS client: API server health and the cluster's own API (its in-cluster
//! objects); etcd is spoken to over gRPC (`etcd_grpc`), over rustls with the cluster's own CAs (never the system
//! roots); connections kept open for later reads of the same server and identity, and each
//! TLS configuration built once.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Trust and identity of one HTTPS request: the CA the server is verified against and,
/// optionally, the client certificate presented.
#[derive(Clone, PartialEq, Eq)]
pub struct Tls {
    /// PEM of the CA (or CAs) the server certificate must chain to.
    pub ca_pem: String,
    /// PEM certificate and PEM private key presented to the server.
    pub identity: Option<(String, String)>,
}

impl Tls {
    /// The SHA-256 of the CA, certificate and key, each length-prefixed: what caches of
    /// connections and configurations are keyed by, so that the key is never kept as such.
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        for part in [
            self.ca_pem.as_str(),
            self.identity.as_ref().map_or("", |(c, _)| c.as_str()),
            self.identity.as_ref().map_or("", |(_, k)| k.as_str()),
        ] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part.as_bytes());
        }
        hash.finalize().into()
    }
}

// Hand-written so that the private key never reaches a log through `{:?}`.
impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("ca_pem", &"<pem>")
            .field(
                "identity",
                &self
                    .identity
                    .as_ref()
                    .map(|_| "<certificate, redacted key>"),
            )
            .finish()
    }
}

/// One HTTPS request.
#[derive(Debug, Clone, Copy)]
pub struct HttpsRequest<'a> {
    /// `https://host:port`, without a path.
    pub base: &'a str,
    /// GET, POST, PATCH or DELETE.
    pub method: &'a Method,
    /// The path, starting with `/`, with its query.
    pub path: &'a str,
    /// A JSON body (POST); a JSON merge patch (RFC 7386) with PATCH.
    pub body: Option<&'a str>,
    pub tls: &'a Tls,
    /// A bearer token (`Authorization: Bearer`), e.g. a worker's join token. Never logged.
    pub bearer: Option<&'a str>,
}

impl HttpsRequest<'_> {
    /// Whether asking again is safe when an answer was lost: a read (GET).
    pub fn replayable(&self) -> bool {
        *self.method == Method::GET
    }
}

/// A response: status and whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpsResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url}: {reason}")]
pub struct HttpsError {
    pub url: String,
    pub reason: String,
}

/// How the engine reaches etcd ([`Etcd`](crate::etcd::Etcd)) and the API servers (HTTPS
/// requests). [`RealNetwork`] talks gRPC to etcd and HTTPS to the API servers; tests pass a
/// simulation.
pub trait Network: crate::etcd::Etcd + Send + Sync {
    /// Sends one request; a non-2xx status is a response, not an error.
    ///
    /// # Errors
    /// [`HttpsError`] when no response came (connection, TLS, timeout, bad material).
    fn request(
        &self,
        request: HttpsRequest<'_>,
    ) -> impl Future<Output = Result<HttpsResponse, HttpsError>> + Send;

    /// Whether the addresses this network reaches are real, so that other clients (the
    /// manager's join watches, kube-rs over its own sockets) may dial them too. A simulation
    /// answers in memory at made-up addresses that nothing else may connect to.
    fn dialable(&self) -> bool {
        true
    }
}

/// HTTPS over TCP with rustls (ring), each request bounded by `timeout`. Connections are
/// kept open and reused (HTTP/1.1 keep-alive) by later reads ([`HttpsRequest::replayable`])
/// of the same server with the same trust and identity: a converged cluster's reads cost one
/// handshake. The TLS configuration of each trust and identity is built once. etcd is
/// reached over gRPC ([`Etcd`](crate::etcd::Etcd)), one kept client per endpoint and
/// identity.
#[derive(Clone)]
pub struct RealNetwork {
    pub timeout: Duration,
    pool: Pool,
    configs: Configs,
    pub(crate) etcd: crate::etcd_grpc::Clients,
}

/// Idle connections by server, CA and client certificate (never the key).
type Pool = Arc<Mutex<HashMap<String, Vec<SendRequest<Full<Bytes>>>>>>;

/// TLS configurations by the SHA-256 of their CA, certificate and key (the key never kept
/// as such).
type Configs = Arc<Mutex<HashMap<[u8; 32], Arc<ClientConfig>>>>;

/// At most this many idle connections are kept per key.
const IDLE_PER_KEY: usize = 4;

/// How long a read over a kept connection may take before it is asked again on a new one.
const REUSE_TIMEOUT: Duration = Duration::from_secs(1);

/// At most this many TLS configurations are kept (each cluster has a few trusts and
/// identities; rotated ones are left behind): past it, the cache starts again.
const CONFIGS_KEPT: usize = 1024;

impl fmt::Debug for RealNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RealNetwork")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Default for RealNetwork {
    fn default() -> Self {
        RealNetwork::new(Duration::from_secs(5))
    }
}

impl RealNetwork {
    /// A network whose requests are bounded by `timeout`.
    pub fn new(timeout: Duration) -> Self {
        RealNetwork {
            timeout,
            pool: Arc::default(),
            configs: Arc::default(),
            etcd: Arc::default(),
        }
    }

    /// The TLS configuration of `tls`, built the first time it is asked for.
    fn config(&self, tls: &Tls) -> Result<Arc<ClientConfig>, String> {
        let key = tls.fingerprint();
        let mut configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = configs.get(&key) {
            return Ok(Arc::clone(c));
        }
        let config = client_config(tls)?;
        if configs.len() >= CONFIGS_KEPT {
            configs.clear();
        }
        configs.insert(key, Arc::clone(&config));
        Ok(config)
    }

    /// How many TLS configurations were built and are kept.
    #[cfg(test)]
    fn configs_kept(&self) -> usize {
        self.configs.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<SendRequest<Full<Bytes>>>>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection of `key` that is still open.
    fn idle(&self, key: &str) -> Option<SendRequest<Full<Bytes>>> {
        let mut pool = self.pool();
        let idle = pool.get_mut(key)?;
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put_back(&self, key: String, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let mut pool = self.pool();
        let idle = pool.entry(key).or_default();
        if idle.len() < IDLE_PER_KEY {
            idle.push(sender);
        }
    }

    /// One request over a connection of its own.
    async fn once(&self, request: HttpsRequest<'_>, url: &str) -> Result<HttpsResponse, String> {
        let mut sender = connect(&request, self.config(request.tls)?).await?;
        send(&mut sender, build(&request, url)?).await
    }

    async fn exchange(
        &self,
        request: HttpsRequest<'_>,
        url: &str,
    ) -> Result<HttpsResponse, String> {
        let key = format!(
            "{}\n{}\n{}",
            request.base,
            request.tls.ca_pem,
            request
                .tls
                .identity
                .as_ref()
                .map_or("", |(cert, _)| cert.as_str())
        );
        // Connections are not shared between bearer tokens (nor is a token kept as a key).
        let key = match request.bearer {
            Some(_) => return self.once(request, url).await,
            None => key,
        };
        // Only reads ([`HttpsRequest::replayable`]) reuse an idle connection: one the server
        // closed just as it was taken fails after the request went out (the client learns of
        // the close only then), and a read is simply asked again on a new connection, where
        // a write (a member added, an object created) may have been done.
        // A kept connection to a machine that went away without closing it answers nothing
        // (where a new one is refused at once): it is given [`REUSE_TIMEOUT`], then the read
        // is asked again on a new connection.
        if request.replayable()
            && let Some(mut sender) = self.idle(&key)
        {
            let reused = async {
                sender.ready().await.map_err(|e| format!("HTTP: {e}"))?;
                send(&mut sender, build(&request, url)?).await
            };
            if let Ok(Ok(response)) = tokio::time::timeout(REUSE_TIMEOUT, reused).await {
                self.put_back(key, sender);
                return Ok(response);
            }
        }
        let mut sender = connect(&request, self.config(request.tls)?).await?;
        let response = send(&mut sender, build(&request, url)?).await?;
        self.put_back(key, sender);
        Ok(response)
    }
}

fn client_config(tls: &Tls) -> Result<Arc<ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(tls.ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("CA certificate PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("CA certificate refused: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match &tls.identity {
        Some((cert, key)) => {
            let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client certificate PEM: {e}"))?;
            // The error of a key that does not parse says nothing about the key's content.
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
                .map_err(|_| "client key PEM does not parse".to_string())?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("client identity refused: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

impl Network for RealNetwork {
    async fn request(&self, request: HttpsRequest<'_>) -> Result<HttpsResponse, HttpsError> {
        let url = format!("{}{}", request.base, request.path);
        let error = |reason: String| HttpsError {
            url: url.clone(),
            reason,
        };
        match tokio::time::timeout(self.timeout, self.exchange(request, &url)).await {
            Ok(result) => result.map_err(error),
            Err(_) => Err(error(format!("timed out after {:?}", self.timeout))),
        }
    }
}

/// `host:port` and the host of a request's base URL.
fn authority(base: &str) -> Result<(String, String, u16), String> {
    let uri: http::Uri = base.parse().map_err(|_| "invalid URL".to_string())?;
    if uri.scheme_str() != Some("https") {
        return Err("the scheme must be https".to_string());
    }
    let host = uri
        .host()
        .ok_or("no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok((authority, host, port))
}

/// A new connection to the request's server: TCP, TLS with its trust and identity, HTTP/1.1.
/// Its driver runs until the connection closes or its sender is dropped.
async fn connect(
    request: &HttpsRequest<'_>,
    config: Arc<ClientConfig>,
) -> Result<SendRequest<Full<Bytes>>, String> {
    let (_, host, port) = authority(request.base)?;
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let server_name =
        ServerName::try_from(host.clone()).map_err(|e| format!("server name: {e}"))?;
    let stream = TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    tokio::spawn(async move {
        // The connection's own error also surfaces through `send_request`.
        let _ = connection.await;
    });
    Ok(sender)
}

/// The HTTP request of `request`.
fn build(request: &HttpsRequest<'_>, url: &str) -> Result<Request<Full<Bytes>>, String> {
    let (authority, _, _) = authority(request.base)?;
    let mut builder = Request::builder()
        .method(request.method.clone())
        .uri(request.path)
        .header(http::header::HOST, authority)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "oi-engine");
    if let Some(token) = request.bearer {
        builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if request.body.is_some() {
        let content_type = if request.method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    let body = Full::new(Bytes::from(
        request.body.unwrap_or_default().as_bytes().to_vec(),
    ));
    builder
        .body(body)
        .map_err(|e| format!("building {url}: {e}"))
}

/// A response's status and whole body.
async fn read(
    response: http::Response<hyper::body::Incoming>,
) -> Result<HttpsResponse, hyper::Error> {
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(HttpsResponse {
        status,
        body: body.to_vec(),
    })
}

/// One request over `sender`, its whole response read.
async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<HttpsResponse, String> {
    let result = async { read(sender.send_request(request).await?).await }.await;
    result.map_err(|e| format!("HTTP: {e}"))
}

#[cfg(test)]
mod tests;
