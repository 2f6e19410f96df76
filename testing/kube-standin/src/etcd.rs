//! etcd over its gRPC API (the `etcd-client` crate), over mutual TLS: one client per
//! endpoint, so that each member is asked on its own (the API server's readiness writes and
//! reads back a key on every member).

use std::time::Duration;

use etcd_client::Client;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// A client of the one etcd endpoint `server`, over mutual TLS; it connects when first used.
/// A plain channel, not etcd-client's balanced one: a call on an endpoint that cannot be
/// reached fails at once (the balancer waits for an endpoint to become ready; and it kept
/// sending calls to a removed member while another answered: grpc/grpc-rust#2839).
///
/// # Errors
/// A server that is not a URL, or material the TLS stack refuses.
pub(crate) async fn client_of(
    server: &str,
    ca_pem: &[u8],
    cert_pem: &[u8],
    key_pem: &[u8],
    timeout: Duration,
) -> Result<Client, String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .identity(Identity::from_pem(cert_pem, key_pem));
    let channel = Endpoint::from_shared(server.to_string())
        .and_then(|e| e.tls_config(tls))
        .map_err(|e| format!("etcd server {server}: {e}"))?
        .connect_timeout(timeout)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(timeout)
        .keep_alive_while_idle(true)
        .connect_lazy();
    Client::from_channel(etcd_client::Channel::Tonic(channel), None)
        .await
        .map_err(|e| format!("etcd server {server}: {e}"))
}

/// An error talking to one etcd endpoint.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The call failed: no connection, a refusal.
    #[error("etcd {endpoint} answered {operation}: {reason}")]
    Call {
        /// The endpoint.
        endpoint: String,
        /// put or range.
        operation: &'static str,
        /// Why (etcd's message holds no key material: keys and values are ours).
        reason: String,
    },
    /// No answer in time.
    #[error("etcd {endpoint}: no answer to {operation} within {timeout:?}")]
    Timeout {
        /// The endpoint.
        endpoint: String,
        /// put or range.
        operation: &'static str,
        /// How long it was given.
        timeout: Duration,
    },
    /// The value read back is not the value written.
    #[error("etcd {endpoint}: key {key} read back {found:?}, wrote {wrote:?}")]
    Mismatch {
        /// The endpoint.
        endpoint: String,
        /// The key.
        key: String,
        /// What was written.
        wrote: String,
        /// What was read (None: no such key).
        found: Option<String>,
    },
}

/// A client of one or more etcd endpoints, each asked on its own.
#[derive(Clone)]
pub struct Etcd {
    endpoints: Vec<(String, Client)>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.endpoints().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// A client of `servers` (`https://` URLs), trusting `ca_pem`, presenting `cert_pem` and
    /// `key_pem`; connecting and keep-alives bounded by `timeout`. Connects when first used.
    ///
    /// # Errors
    /// A server that is not an `https://` URL, or material the TLS stack refuses.
    pub async fn connect(
        servers: &[String],
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
        timeout: Duration,
    ) -> Result<Etcd, String> {
        let mut endpoints = Vec::with_capacity(servers.len());
        for server in servers {
            if !server.starts_with("https://") {
                return Err(format!("etcd server {server} is not an https:// URL"));
            }
            let client = client_of(server, ca_pem, cert_pem, key_pem, timeout).await?;
            endpoints.push((server.clone(), client));
        }
        Ok(Etcd { endpoints })
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.endpoints.iter().map(|(url, _)| url.as_str())
    }

    /// Writes `value` at `key` and reads it back, on every endpoint in turn, each call
    /// allowed `within`. Returns one result per endpoint.
    pub async fn write_and_read(
        &self,
        key: &str,
        value: &str,
        within: Duration,
    ) -> Vec<(String, Result<(), EtcdError>)> {
        let mut results = Vec::with_capacity(self.endpoints.len());
        for (url, client) in &self.endpoints {
            let result = async {
                let mut kv = client.kv_client();
                bounded(url, "put", within, kv.put(key, value, None)).await?;
                let answer = bounded(url, "range", within, kv.get(key, None)).await?;
                let found = answer
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
                if found.as_deref() == Some(value) {
                    Ok(())
                } else {
                    Err(EtcdError::Mismatch {
                        endpoint: url.clone(),
                        key: key.to_string(),
                        wrote: value.to_string(),
                        found,
                    })
                }
            }
            .await;
            results.push((url.clone(), result));
        }
        results
    }
}

/// `call` on `endpoint`, allowed `within`.
async fn bounded<T>(
    endpoint: &str,
    operation: &'static str,
    within: Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(within, call).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(EtcdError::Call {
            endpoint: endpoint.to_string(),
            operation,
            reason: e.to_string(),
        }),
        Err(_) => Err(EtcdError::Timeout {
            endpoint: endpoint.to_string(),
            operation,
            timeout: within,
        }),
    }
}
