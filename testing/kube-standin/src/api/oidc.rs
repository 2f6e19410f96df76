//! OpenID Connect ID tokens, as kube-apiserver's JWT authenticators take them (one from
//! `--oidc-*`, or one per `jwt` entry of `--authentication-config`, [`super::authn_config`]):
//!
//! ```text
//!  Bearer JWT whose (unverified) iss is --oidc-issuer-url
//!    keys: <issuer>/.well-known/openid-configuration (its `issuer` must be ours)
//!          ─► jwks_uri ─► the JWKS (fetched at first use, again for a key it lacks,
//!             at most every 10 s), over TLS trusting --oidc-ca-file
//!    signature by one of them, alg among --oidc-signing-algs (RS256 by default)
//!    aud holds --oidc-client-id; exp not passed; nbf/iat not in the future (1 min of skew)
//!    --oidc-required-claim pairs present with those values
//!    user: --oidc-username-claim (sub), a string; for `email`, email_verified not false;
//!          prefixed by --oidc-username-prefix (absent: "<issuer>#" unless the claim is
//!          email; "-": nothing)
//!    groups: --oidc-groups-claim, a string or a list of strings, --oidc-groups-prefix
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::Method;
use rustls::ClientConfig;
use serde_json::Value;

use super::authn::User;
use super::jwt::{self, PublicKey};
use crate::https::{Endpoint, request};

/// How long fetched keys are used before they are fetched again.
const KEYS_TTL: Duration = Duration::from_secs(3600);
/// A token signed by a key we lack fetches the keys again, at most this often.
const REFETCH_EVERY: Duration = Duration::from_secs(10);
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Clock skew allowed for `nbf` and `iat`.
const SKEW_SECONDS: f64 = 60.0;

/// One JWT authenticator's settings: from `--oidc-*`, or one `jwt` entry of the structured
/// authentication configuration ([`super::authn_config`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OidcConfig {
    pub issuer_url: String,
    /// Where the discovery document is, when not under the issuer URL (`discoveryURL`).
    pub discovery_url: Option<String>,
    /// The audience a token must name (`--oidc-client-id`, or the first of `audiences`).
    pub client_id: String,
    /// More audiences, any one of which is enough (`audiences` beyond the first).
    pub audiences: Vec<String>,
    /// `sub` unless set.
    pub username_claim: String,
    /// As `--oidc-username-prefix` takes it (absent: `<issuer>#` unless the claim is
    /// `email`; `-`: none), or, when `exact_prefix`, put before the name as it is.
    pub username_prefix: Option<String>,
    /// `username_prefix` is the structured configuration's, used as it is.
    pub exact_prefix: bool,
    pub groups_claim: Option<String>,
    pub groups_prefix: Option<String>,
    pub required_claims: BTreeMap<String, String>,
    /// `RS256` unless set.
    pub signing_algs: Vec<String>,
}

struct Keys {
    keys: Vec<PublicKey>,
    fetched: Instant,
}

/// The authenticator of one issuer.
pub struct Oidc {
    config: OidcConfig,
    tls: Arc<ClientConfig>,
    keys: tokio::sync::Mutex<Option<Keys>>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Oidc {
    /// The authenticator of `config`'s issuer, reached with `tls`.
    pub fn new(config: OidcConfig, tls: Arc<ClientConfig>) -> Oidc {
        Oidc {
            config,
            tls,
            keys: tokio::sync::Mutex::new(None),
        }
    }

    /// With the issuer's keys given instead of fetched (tests).
    pub fn with_keys(config: OidcConfig, tls: Arc<ClientConfig>, keys: Vec<PublicKey>) -> Oidc {
        Oidc {
            config,
            tls,
            keys: tokio::sync::Mutex::new(Some(Keys {
                keys,
                fetched: Instant::now() + Duration::from_secs(365 * 24 * 3600),
            })),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// Whether `token` says it comes from our issuer (before anything is verified): only
    /// such tokens are ours to accept or refuse.
    pub fn claims_to_be_ours(&self, token: &str) -> bool {
        jwt::unverified(token)
            .is_some_and(|(_, claims)| claims["iss"].as_str() == Some(&self.config.issuer_url))
    }

    /// The user of an ID token of our issuer.
    ///
    /// # Errors
    /// Why it is refused (logged; the client gets 401).
    pub async fn authenticate(&self, token: &str) -> Result<User, String> {
        let (header, _) = jwt::unverified(token).ok_or("a malformed ID token")?;
        let alg = header["alg"].as_str().unwrap_or_default().to_string();
        let allowed: Vec<&str> = if self.config.signing_algs.is_empty() {
            vec!["RS256"]
        } else {
            self.config
                .signing_algs
                .iter()
                .map(String::as_str)
                .collect()
        };
        if !allowed.contains(&alg.as_str()) {
            return Err(format!(
                "ID token signed with {alg:?}, not one of {}",
                allowed.join(", ")
            ));
        }
        let claims = match jwt::verify(token, &self.keys(false).await?) {
            Ok(c) => c,
            // Keys rotate: a token signed by a key we lack fetches them again.
            Err(jwt::JwtError::Signature) => {
                jwt::verify(token, &self.keys(true).await?).map_err(|e| format!("ID token: {e}"))?
            }
            Err(e) => return Err(format!("ID token: {e}")),
        };
        self.user(&claims, now_seconds())
    }

    /// The user of verified `claims` at `now` (seconds since the epoch).
    ///
    /// # Errors
    /// Why the claims are refused.
    pub fn user(&self, claims: &Value, now: f64) -> Result<User, String> {
        let c = &self.config;
        if claims["iss"].as_str() != Some(&c.issuer_url) {
            return Err(format!(
                "ID token issued by {}, not {}",
                claims["iss"], c.issuer_url
            ));
        }
        let audiences: Vec<&str> = match &claims["aud"] {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audiences
            .iter()
            .any(|a| *a == c.client_id || c.audiences.iter().any(|ours| ours == a))
        {
            return Err(format!(
                "ID token for {audiences:?}, not for client {}",
                c.client_id
            ));
        }
        let exp = claims["exp"].as_f64().ok_or("ID token without exp")?;
        if exp <= now {
            return Err(format!("ID token expired {:.0} s ago", now - exp));
        }
        for field in ["nbf", "iat"] {
            if let Some(t) = claims[field].as_f64()
                && t > now + SKEW_SECONDS
            {
                return Err(format!(
                    "ID token {field} is {:.0} s in the future",
                    t - now
                ));
            }
        }
        for (name, value) in &c.required_claims {
            if claims[name].as_str() != Some(value.as_str()) {
                return Err(format!("ID token: required claim {name}={value} missing"));
            }
        }
        let claim = if c.username_claim.is_empty() {
            "sub"
        } else {
            c.username_claim.as_str()
        };
        let name = claims[claim]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("ID token without a string claim {claim:?}"))?;
        if claim == "email" && claims["email_verified"].as_bool() == Some(false) {
            return Err("ID token: email not verified".to_string());
        }
        let prefix = match c.username_prefix.as_deref() {
            Some(p) if c.exact_prefix => p.to_string(),
            None if c.exact_prefix => String::new(),
            Some("-") => String::new(),
            Some(p) => p.to_string(),
            None if claim == "email" => String::new(),
            None => format!("{}#", c.issuer_url),
        };
        let mut groups = Vec::new();
        if let Some(groups_claim) = &c.groups_claim {
            let listed: Vec<&str> = match &claims[groups_claim.as_str()] {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                Value::Null => Vec::new(),
                other => {
                    return Err(format!(
                        "ID token claim {groups_claim:?} is neither a string nor a list: {other}"
                    ));
                }
            };
            let group_prefix = c.groups_prefix.as_deref().unwrap_or_default();
            groups = listed
                .into_iter()
                .map(|g| format!("{group_prefix}{g}"))
                .collect();
        }
        Ok(User {
            name: format!("{prefix}{name}"),
            groups,
            ..User::default()
        })
    }

    /// The issuer's keys: cached ones unless they are old, or `refresh` and the last fetch
    /// is not too recent.
    async fn keys(&self, refresh: bool) -> Result<Vec<PublicKey>, String> {
        let mut cached = self.keys.lock().await;
        if let Some(k) = cached.as_ref() {
            let age = k.fetched.elapsed();
            let stale = age > KEYS_TTL;
            if !stale && (!refresh || age < REFETCH_EVERY) {
                return Ok(k.keys.clone());
            }
        }
        let keys = self.fetch().await?;
        *cached = Some(Keys {
            keys: keys.clone(),
            fetched: Instant::now(),
        });
        Ok(keys)
    }

    async fn get(&self, url: &str) -> Result<Value, String> {
        let endpoint = Endpoint::parse(url).map_err(|e| e.to_string())?;
        let response = request(&self.tls, &endpoint, Method::GET, "", None, FETCH_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        if !response.status.is_success() {
            return Err(format!("GET {url}: {}", response.status));
        }
        serde_json::from_slice(&response.body).map_err(|e| format!("GET {url}: {e}"))
    }

    async fn fetch(&self) -> Result<Vec<PublicKey>, String> {
        let issuer = &self.config.issuer_url;
        let discovery_url = self.config.discovery_url.clone().unwrap_or_else(|| {
            format!(
                "{}/.well-known/openid-configuration",
                issuer.trim_end_matches('/')
            )
        });
        let discovery = self.get(&discovery_url).await?;
        if discovery["issuer"].as_str() != Some(issuer.as_str()) {
            return Err(format!(
                "{discovery_url} names issuer {}, not {issuer}",
                discovery["issuer"]
            ));
        }
        let jwks_uri = discovery["jwks_uri"]
            .as_str()
            .ok_or_else(|| format!("{discovery_url} has no jwks_uri"))?;
        let jwks = self.get(jwks_uri).await?;
        let keys: Vec<PublicKey> = jwks["keys"]
            .as_array()
            .map(|keys| keys.iter().filter_map(jwt::from_jwk).collect())
            .unwrap_or_default();
        if keys.is_empty() {
            return Err(format!("{jwks_uri} lists no signing key we can use"));
        }
        tracing::info!(issuer = %issuer, keys = keys.len(), "OIDC issuer keys fetched");
        Ok(keys)
    }
}

/// The system's trust bundle, for an issuer given no CA.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The TLS an issuer is reached with: trusting `ca` (PEM, named `what` in errors), else the
/// system's bundle (if there is one), as kube-apiserver does.
///
/// # Errors
/// A CA or bundle that is not PEM certificates.
pub fn issuer_tls(ca: Option<&[u8]>, what: &str) -> crate::tls::Result<Arc<ClientConfig>> {
    let roots = match ca {
        Some(pem) => crate::tls::roots_from_pem(pem, what)?,
        None if std::path::Path::new(SYSTEM_CA_BUNDLE).is_file() => crate::tls::roots_from_pem(
            &crate::tls::read(std::path::Path::new(SYSTEM_CA_BUNDLE))?,
            SYSTEM_CA_BUNDLE,
        )?,
        None => rustls::RootCertStore::empty(),
    };
    crate::tls::client_config(roots, None, what)
}

/// The JWT authenticators in force: `--oidc-*`'s, or those of the structured authentication
/// configuration, which a reload of its file replaces while requests go on.
#[derive(Default)]
pub struct JwtAuthenticators {
    current: std::sync::RwLock<Vec<Arc<Oidc>>>,
    /// Reloads of a changed file that were put in force, and that were refused (the real
    /// server's `apiserver_authentication_config_controller_automatic_reloads_total`).
    reloaded: std::sync::atomic::AtomicU64,
    refused: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for JwtAuthenticators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.current().iter()).finish()
    }
}

impl JwtAuthenticators {
    pub fn new(authenticators: Vec<Arc<Oidc>>) -> JwtAuthenticators {
        JwtAuthenticators {
            current: std::sync::RwLock::new(authenticators),
            ..JwtAuthenticators::default()
        }
    }

    /// Counts a reload of a changed file: put in force, or refused.
    pub fn count_reload(&self, in_force: bool) {
        let counter = if in_force {
            &self.reloaded
        } else {
            &self.refused
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Reloads so far: put in force, refused.
    pub fn reloads(&self) -> (u64, u64) {
        (
            self.reloaded.load(std::sync::atomic::Ordering::SeqCst),
            self.refused.load(std::sync::atomic::Ordering::SeqCst),
        )
    }

    /// The authenticators now.
    pub fn current(&self) -> Vec<Arc<Oidc>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts `authenticators` in force, for the requests that follow.
    pub fn replace(&self, authenticators: Vec<Arc<Oidc>>) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = authenticators;
    }

    /// The authenticator of the issuer `token` says it comes from (its unverified `iss`,
    /// read once), if one is in force.
    pub fn for_token(&self, token: &str) -> Option<Arc<Oidc>> {
        let (_, claims) = jwt::unverified(token)?;
        let iss = claims["iss"].as_str()?;
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|o| o.config.issuer_url == iss)
            .cloned()
    }
}

#[cfg(test)]
mod tests;
