//! A small JSON client of the Kubernetes API for the stand-in components (the kubelet and
//! the controller-manager): get, list, create, replace, merge-patch and delete, with the
//! kubeconfig's client certificate or a bearer token. Failures keep the server's `Status`
//! (code and reason), so callers can tell a conflict from a refusal.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use rustls::ClientConfig;
use serde_json::Value;

use crate::https::{self, Endpoint, Outgoing, chain};
use crate::kubeconfig::Kubeconfig;

/// How long one request may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// No answer.
    #[error("{0}")]
    Transport(String),
    /// An answer that is a failure.
    #[error("{method} {path}: {code} {reason}: {message}")]
    Status {
        method: String,
        path: String,
        code: u16,
        reason: String,
        message: String,
    },
}

impl ClientError {
    /// The HTTP status, for failures the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Status { code, .. } => Some(*code),
            ClientError::Transport(_) => None,
        }
    }
}

/// A result of the client.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// A client of one API server with one identity.
#[derive(Clone)]
pub struct Client {
    server: Endpoint,
    tls: Arc<ClientConfig>,
    roots: rustls::RootCertStore,
    token: Option<String>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The kubeconfig's server and credentials.
    pub fn new(kubeconfig: &Kubeconfig) -> Client {
        Client {
            server: kubeconfig.server.clone(),
            tls: Arc::clone(&kubeconfig.tls),
            roots: kubeconfig.roots.clone(),
            token: kubeconfig.token.clone(),
        }
    }

    /// The same server, authenticating with `token` instead.
    ///
    /// # Errors
    /// A TLS configuration rustls refuses.
    pub fn with_token(&self, token: &str) -> Result<Client> {
        let tls = crate::tls::client_config(self.roots.clone(), None, "token client")
            .map_err(|e| ClientError::Transport(chain(&e)))?;
        Ok(Client {
            server: self.server.clone(),
            tls,
            roots: self.roots.clone(),
            token: Some(token.to_string()),
        })
    }

    /// The server's URL.
    pub fn server(&self) -> &str {
        &self.server.url
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: &str,
    ) -> Result<Option<Value>> {
        let outgoing = Outgoing {
            method: method.clone(),
            path,
            body: body.map(|b| b.to_string().into_bytes()),
            content_type,
            bearer: self.token.as_deref(),
        };
        let response = https::send(&self.tls, &self.server, outgoing, TIMEOUT)
            .await
            .map_err(|e| ClientError::Transport(chain(&e)))?;
        let value: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
        if response.status.is_success() {
            return Ok(Some(value));
        }
        if response.status == http::StatusCode::NOT_FOUND && method == Method::GET {
            return Ok(None);
        }
        Err(ClientError::Status {
            method: method.to_string(),
            path: path.to_string(),
            code: response.status.as_u16(),
            reason: value["reason"].as_str().unwrap_or_default().to_string(),
            message: value["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&response.body).into_owned()),
        })
    }

    /// The object at `path`; `None` when it does not exist.
    ///
    /// # Errors
    /// Transport failures, or the server refusing.
    pub async fn get(&self, path: &str) -> Result<Option<Value>> {
        self.call(Method::GET, path, None, "application/json").await
    }

    /// The items of the list at `path`.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn list(&self, path: &str) -> Result<Vec<Value>> {
        Ok(self
            .get(path)
            .await?
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default())
    }

    /// Creates `object` in the collection at `path`.
    ///
    /// # Errors
    /// As [`Client::get`]; `409 AlreadyExists` when it exists.
    pub async fn create(&self, path: &str, object: &Value) -> Result<Value> {
        Ok(self
            .call(Method::POST, path, Some(object), "application/json")
            .await?
            .unwrap_or_default())
    }

    /// Replaces the object at `path` (at its resourceVersion).
    ///
    /// # Errors
    /// As [`Client::get`]; `409 Conflict` when it changed.
    pub async fn replace(&self, path: &str, object: &Value) -> Result<Value> {
        Ok(self
            .call(Method::PUT, path, Some(object), "application/json")
            .await?
            .unwrap_or_default())
    }

    /// Merge-patches the object at `path`.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Result<Value> {
        Ok(self
            .call(
                Method::PATCH,
                path,
                Some(patch),
                "application/merge-patch+json",
            )
            .await?
            .unwrap_or_default())
    }

    /// Deletes the object at `path`.
    ///
    /// # Errors
    /// As [`Client::get`]; `404` when it is gone already.
    pub async fn delete(&self, path: &str) -> Result<()> {
        self.call(Method::DELETE, path, None, "application/json")
            .await
            .map(drop)
    }
}
