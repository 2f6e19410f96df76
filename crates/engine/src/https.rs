//! The engine's HTTPS: API server health and the cluster's own API (its in-cluster objects),
//! through the project's HTTP client (`oi_http`) with the cluster's own CAs (never the
//! system roots); etcd is spoken to over gRPC (`etcd_grpc`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;

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

/// HTTPS through [`oi_http`], each request bounded by `timeout`: one pooled client per
/// trust and identity (its TLS configuration built once), over HTTP/2 where the server
/// takes it (one connection per server carrying every request at once), whose kept
/// connections every method reuses; a read a kept connection leaves unanswered is asked
/// again on a new one, a write is never sent twice. etcd is reached over gRPC ([`Etcd`](crate::etcd::Etcd)),
/// one kept client per endpoint and identity.
#[derive(Clone)]
pub struct RealNetwork {
    pub timeout: Duration,
    clients: Clients,
    pub(crate) etcd: crate::etcd_grpc::Clients,
}

/// HTTP clients by the SHA-256 of their CA, certificate and key (the key never kept as
/// such).
type Clients = Arc<Mutex<HashMap<[u8; 32], oi_http::Client>>>;

/// At most this many clients are kept (each cluster has a few trusts and identities;
/// rotated ones are left behind): past it, the cache starts again.
const CLIENTS_KEPT: usize = 1024;

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
            clients: Arc::default(),
            etcd: Arc::default(),
        }
    }

    /// The client of `tls`, made the first time it is asked for.
    fn client(&self, tls: &Tls) -> Result<oi_http::Client, String> {
        let key = tls.fingerprint();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = oi_http::Client::new(oi_http::Options {
            roots: oi_http::Roots::Only(tls.ca_pem.clone()),
            identity: tls.identity.as_ref().map(|(cert, key)| oi_http::Identity {
                certificate_pem: cert.clone(),
                key_pem: key.clone(),
            }),
            connect_timeout: self.timeout,
            timeout: self.timeout,
            // API servers speak HTTP/2: a cluster's reads share one connection.
            http2: true,
            ..oi_http::Options::default()
        })
        .map_err(|e| e.to_string())?;
        if clients.len() >= CLIENTS_KEPT {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// How many clients (TLS configurations) were made and are kept.
    #[cfg(test)]
    fn clients_kept(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    async fn exchange(
        &self,
        request: HttpsRequest<'_>,
        url: &str,
    ) -> Result<HttpsResponse, String> {
        let client = self.client(request.tls)?;
        let built = oi_http::json_request(
            request.method,
            url,
            "oi-engine",
            request.bearer,
            request.body,
        )
        .map_err(|e| format!("building {url}: {e}"))?;
        let (parts, bytes) = client.call(built).await.map_err(|e| e.to_string())?;
        Ok(HttpsResponse {
            status: parts.status.as_u16(),
            body: bytes.to_vec(),
        })
    }
}

impl Network for RealNetwork {
    async fn request(&self, request: HttpsRequest<'_>) -> Result<HttpsResponse, HttpsError> {
        let url = format!("{}{}", request.base, request.path);
        let error = |reason: String| HttpsError {
            url: url.clone(),
            reason,
        };
        if !request.base.starts_with("https://") {
            return Err(error("the scheme must be https".to_string()));
        }
        match tokio::time::timeout(self.timeout, self.exchange(request, &url)).await {
            Ok(result) => result.map_err(error),
            Err(_) => Err(error(format!("timed out after {:?}", self.timeout))),
        }
    }
}

#[cfg(test)]
mod tests;
