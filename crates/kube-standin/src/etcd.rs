//! etcd through its v3 JSON gateway (`POST /v3/kv/put`, `POST /v3/kv/range`, keys and values
//! base64), which etcd 3.4 and later serve on the client port, over mutual TLS.
//!
//! Note for whoever mints etcd's certificates: with `--client-cert-auth`, etcd 3.4's gateway
//! dials etcd's own gRPC server presenting the *server* certificate as a client certificate,
//! so that certificate needs the clientAuth extended key usage as well as serverAuth (kubeadm's
//! etcd server certificates have both).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use http::Method;
use rustls::ClientConfig;

use crate::https::{self, Endpoint, HttpsError};

/// An error talking to one etcd endpoint.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The request did not complete.
    #[error("etcd {endpoint}")]
    Transport {
        /// The endpoint.
        endpoint: String,
        /// Why.
        #[source]
        source: HttpsError,
    },
    /// etcd answered with an error status.
    #[error("etcd {endpoint} answered {operation} with HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        endpoint: String,
        /// put or range.
        operation: &'static str,
        /// The status.
        status: u16,
        /// etcd's message (it holds no key material: keys and values are ours).
        body: String,
    },
    /// etcd answered with something that is not the expected JSON.
    #[error("etcd {endpoint} answered {operation} with an unexpected body: {reason}")]
    Body {
        /// The endpoint.
        endpoint: String,
        /// put or range.
        operation: &'static str,
        /// Why.
        reason: String,
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

/// A client of one or more etcd endpoints.
#[derive(Debug, Clone)]
pub struct Etcd {
    endpoints: Vec<Endpoint>,
    tls: Arc<ClientConfig>,
    timeout: Duration,
}

#[derive(serde::Deserialize)]
struct RangeResponse {
    #[serde(default)]
    kvs: Vec<KeyValue>,
}

#[derive(serde::Deserialize)]
struct KeyValue {
    #[serde(default)]
    value: String,
}

impl Etcd {
    /// A client of `servers` (`https://` URLs) using `tls` (etcd CA, client certificate).
    ///
    /// # Errors
    /// A server that is not an `https://` URL.
    pub fn new(
        servers: &[String],
        tls: Arc<ClientConfig>,
        timeout: Duration,
    ) -> Result<Etcd, HttpsError> {
        let endpoints = servers
            .iter()
            .map(|s| Endpoint::parse(s))
            .collect::<Result<_, _>>()?;
        Ok(Etcd {
            endpoints,
            tls,
            timeout,
        })
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.endpoints.iter().map(|e| e.url.as_str())
    }

    async fn call(
        &self,
        endpoint: &Endpoint,
        operation: &'static str,
        body: serde_json::Value,
    ) -> Result<bytes::Bytes, EtcdError> {
        let response = https::request(
            &self.tls,
            endpoint,
            Method::POST,
            &format!("/v3/kv/{operation}"),
            Some(body.to_string().into_bytes()),
            self.timeout,
        )
        .await
        .map_err(|source| EtcdError::Transport {
            endpoint: endpoint.url.clone(),
            source,
        })?;
        if !response.status.is_success() {
            return Err(EtcdError::Status {
                endpoint: endpoint.url.clone(),
                operation,
                status: response.status.as_u16(),
                body: String::from_utf8_lossy(&response.body)
                    .chars()
                    .take(300)
                    .collect(),
            });
        }
        Ok(response.body)
    }

    /// Writes `value` at `key` on `endpoint`.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn put(&self, endpoint: &Endpoint, key: &str, value: &str) -> Result<(), EtcdError> {
        let body = serde_json::json!({"key": B64.encode(key), "value": B64.encode(value)});
        self.call(endpoint, "put", body).await.map(|_| ())
    }

    /// Reads `key` on `endpoint`; `None` when absent.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn get(&self, endpoint: &Endpoint, key: &str) -> Result<Option<String>, EtcdError> {
        let bad = |reason: String| EtcdError::Body {
            endpoint: endpoint.url.clone(),
            operation: "range",
            reason,
        };
        let body = self
            .call(
                endpoint,
                "range",
                serde_json::json!({"key": B64.encode(key)}),
            )
            .await?;
        let range: RangeResponse = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
        match range.kvs.first() {
            None => Ok(None),
            Some(kv) => {
                let bytes = B64.decode(&kv.value).map_err(|e| bad(e.to_string()))?;
                Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
            }
        }
    }

    /// Writes `value` at `key` and reads it back, on every endpoint in turn. Returns one
    /// result per endpoint.
    pub async fn write_and_read(
        &self,
        key: &str,
        value: &str,
    ) -> Vec<(String, Result<(), EtcdError>)> {
        let mut results = Vec::with_capacity(self.endpoints.len());
        for endpoint in &self.endpoints {
            let result = async {
                self.put(endpoint, key, value).await?;
                let found = self.get(endpoint, key).await?;
                if found.as_deref() == Some(value) {
                    Ok(())
                } else {
                    Err(EtcdError::Mismatch {
                        endpoint: endpoint.url.clone(),
                        key: key.to_string(),
                        wrote: value.to_string(),
                        found,
                    })
                }
            }
            .await;
            results.push((endpoint.url.clone(), result));
        }
        results
    }
}
