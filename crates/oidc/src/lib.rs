//! oneinfra-rs's OpenID Connect provider, run for a SIPCluster that asks for one
//! (`spec.services.oidcProvider`): static users (PBKDF2 password hashes) from the SIPCluster's
//! users Secret, the authorization code flow with PKCE for public clients (kubectl with
//! kubelogin), ES256 ID tokens, over TLS with a certificate from the SIPCluster's own CA.
//! The configuration it reads is [`oi_api::oidc::ProviderConfig`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod keys;
pub mod password;
pub mod provider;
pub mod serve;

use std::path::Path;
use std::sync::Arc;

use oi_api::oidc::{ProviderConfig, parse_users};

/// Reads the configuration at `path`, its users, TLS files and signing key (made when
/// missing), and serves until the process ends.
///
/// # Errors
/// What is wrong, naming the file (never a key or hash).
pub async fn run(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let config: ProviderConfig =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let users_text = std::fs::read_to_string(&config.users)
        .map_err(|e| format!("cannot read {}: {e}", config.users))?;
    let users = parse_users(&users_text).map_err(|e| format!("{}: {e}", config.users))?;
    let tls = serve::tls_config(
        Path::new(&config.tls_certificate),
        Path::new(&config.tls_private_key),
    )?;
    let key = keys::SigningKey::load_or_create(Path::new(&config.signing_key))?;
    let listen = config.listen;
    let issuer = config.issuer.clone();
    let count = users.len();
    let provider = Arc::new(provider::Provider::new(config, users, key)?);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    eprintln!(
        "OIDC provider {issuer} on {listen}: {count} users, signing key {}",
        provider.kid()
    );
    serve::serve(listener, tls, provider).await;
    Ok(())
}
