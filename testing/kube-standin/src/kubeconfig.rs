//! The part of a kubeconfig the controller stand-ins use: the current context's server, CA,
//! client certificate and key (inline `-data` fields, or files relative to the kubeconfig).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rustls::ClientConfig;
use serde::Deserialize;

use crate::https::{Endpoint, HttpsError};
use crate::tls::{self, TlsError};

/// An error loading a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The file could not be read.
    #[error("cannot read kubeconfig {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not a kubeconfig.
    #[error("kubeconfig {path} does not parse")]
    Yaml {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// Something the stand-in needs is absent or unusable.
    #[error("kubeconfig {path}: {what}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// A `-data` field that is not base64.
    #[error("kubeconfig {path}: {field} is not valid base64")]
    Base64 {
        /// The file.
        path: String,
        /// The field.
        field: String,
        /// Why.
        #[source]
        source: base64::DecodeError,
    },
    /// Certificates or keys.
    #[error("kubeconfig {path}")]
    Tls {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: TlsError,
    },
    /// The server URL.
    #[error("kubeconfig {path}: server")]
    Server {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: HttpsError,
    },
}

#[derive(Debug, Deserialize)]
struct Raw {
    #[serde(default, rename = "current-context")]
    current_context: String,
    #[serde(default)]
    clusters: Vec<Named<RawCluster>>,
    #[serde(default)]
    users: Vec<Named<RawUser>>,
    #[serde(default)]
    contexts: Vec<Named<RawContext>>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    item: T,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RawCluster {
    #[serde(default)]
    server: String,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    certificate_authority: Option<String>,
    #[serde(default)]
    tls_server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RawUser {
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_certificate: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    client_key: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    token_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawContext {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

/// A loaded kubeconfig: where to go and with which TLS client configuration.
#[derive(Debug, Clone)]
pub struct Kubeconfig {
    /// The API server.
    pub server: Endpoint,
    /// The context used.
    pub context: String,
    /// The user name in the kubeconfig.
    pub user: String,
    /// CA, and the client certificate and key when the user has them.
    pub tls: Arc<ClientConfig>,
    /// The CA, for other clients of the same server (with tokens).
    pub roots: rustls::RootCertStore,
    /// The user's bearer token, when it authenticates with one.
    pub token: Option<String>,
}

/// Loads the current context of the kubeconfig at `path`.
///
/// # Errors
/// Any [`KubeconfigError`]: unreadable, not YAML, no current context, no server, no CA, no
/// client certificate and key (the stand-in API server knows no other credential).
pub fn load(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
    let shown = path.display().to_string();
    let invalid = |what: String| KubeconfigError::Invalid {
        path: shown.clone(),
        what,
    };
    let text = std::fs::read(path).map_err(|source| KubeconfigError::Read {
        path: shown.clone(),
        source,
    })?;
    let raw: Raw = serde_yaml_ng::from_slice(&text).map_err(|source| KubeconfigError::Yaml {
        path: shown.clone(),
        source,
    })?;
    let (context_name, context) = if raw.current_context.is_empty() {
        match raw.contexts.as_slice() {
            [only] => (only.name.clone(), &only.item),
            _ => return Err(invalid("no current-context".to_string())),
        }
    } else {
        let found = raw
            .contexts
            .iter()
            .find(|c| c.name == raw.current_context)
            .ok_or_else(|| invalid(format!("context {:?} not found", raw.current_context)))?;
        (found.name.clone(), &found.item)
    };
    let cluster = &raw
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .ok_or_else(|| invalid(format!("cluster {:?} not found", context.cluster)))?
        .item;
    let user = &raw
        .users
        .iter()
        .find(|u| u.name == context.user)
        .ok_or_else(|| invalid(format!("user {:?} not found", context.user)))?
        .item;
    if cluster.tls_server_name.is_some() {
        return Err(invalid(
            "tls-server-name is not supported by the stand-in".to_string(),
        ));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let ca = material(
        &shown,
        base,
        "certificate-authority",
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    )?;
    let tls_error = |source| KubeconfigError::Tls {
        path: shown.clone(),
        source,
    };
    let roots = tls::roots_from_pem(&ca, "certificate-authority").map_err(tls_error)?;
    let token = match (&user.token, &user.token_file) {
        (Some(t), _) if !t.is_empty() => Some(t.trim().to_string()),
        (_, Some(f)) if !f.is_empty() => {
            let full = base.join(f);
            let text = std::fs::read_to_string(&full).map_err(|source| KubeconfigError::Read {
                path: full.display().to_string(),
                source,
            })?;
            Some(text.trim().to_string())
        }
        _ => None,
    };
    let has_certificate = user
        .client_certificate_data
        .as_deref()
        .is_some_and(|d| !d.is_empty())
        || user
            .client_certificate
            .as_deref()
            .is_some_and(|f| !f.is_empty());
    let identity = if token.is_some() && !has_certificate {
        None
    } else {
        let cert = material(
            &shown,
            base,
            "client-certificate",
            &user.client_certificate_data,
            &user.client_certificate,
        )?;
        let key = material(
            &shown,
            base,
            "client-key",
            &user.client_key_data,
            &user.client_key,
        )?;
        let certs = tls::certs_from_pem(&cert, "client-certificate").map_err(tls_error)?;
        let key = tls::key_from_pem(&key, "client-key").map_err(tls_error)?;
        Some((certs, key))
    };
    let tls = tls::client_config(roots.clone(), identity, "kubeconfig user").map_err(tls_error)?;
    let server = Endpoint::parse(&cluster.server).map_err(|source| KubeconfigError::Server {
        path: shown.clone(),
        source,
    })?;
    Ok(Kubeconfig {
        server,
        context: context_name,
        user: context.user.clone(),
        tls,
        roots,
        token,
    })
}

/// Inline `<field>-data` (base64 PEM) or `<field>` (a file, relative to the kubeconfig).
fn material(
    shown: &str,
    base: &Path,
    field: &str,
    data: &Option<String>,
    file: &Option<String>,
) -> Result<Vec<u8>, KubeconfigError> {
    if let Some(data) = data.as_deref().filter(|d| !d.is_empty()) {
        let compact: String = data.split_whitespace().collect();
        return B64
            .decode(compact)
            .map_err(|source| KubeconfigError::Base64 {
                path: shown.to_string(),
                field: format!("{field}-data"),
                source,
            });
    }
    if let Some(file) = file.as_deref().filter(|f| !f.is_empty()) {
        let full: PathBuf = base.join(file);
        return std::fs::read(&full).map_err(|source| KubeconfigError::Read {
            path: full.display().to_string(),
            source,
        });
    }
    Err(KubeconfigError::Invalid {
        path: shown.to_string(),
        what: format!("neither {field}-data nor {field} is set (and no token)"),
    })
}
