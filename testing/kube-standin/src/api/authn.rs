//! Who is asking, decided as kube-apiserver's authenticators decide it:
//!
//! ```text
//!  client certificate ── verified against --client-ca-file ─► CN = user, O = groups
//!  Authorization: Bearer <token>
//!     ├─ --token-auth-file            static token ─────────► its user and groups
//!     ├─ <id>.<secret> and --enable-bootstrap-token-auth
//!     │     Secret kube-system/bootstrap-token-<id>, type bootstrap.kubernetes.io/token,
//!     │     usage-bootstrap-authentication "true", not expired, not being deleted
//!     │                                  ─► system:bootstrap:<id>, system:bootstrappers + extras
//!     ├─ JWT whose iss is a trusted issuer's (--oidc-issuer-url, or a jwt entry of
//!     │  --authentication-config): an ID token of that issuer (oidc.rs)
//!     │                                  ─► its username and groups claims
//!     └─ JWT signed by a --service-account-key-file key, issuer and audience ours, not
//!        expired, its ServiceAccount (and pod) still there with the same uid
//!                                        ─► system:serviceaccount:<ns>:<name>
//!  any credential presented that none accepts ─► 401
//!  no credential at all ─► system:anonymous (--anonymous-auth), else 401
//! ```
//!
//! Every authenticated user is also in `system:authenticated`.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use serde_json::Value;

use super::jwt::{self, PublicKey};
use super::meta;
use super::resources::Resource;
use super::storage::Storage;

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// `system:anonymous`.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".to_string(),
            groups: vec!["system:unauthenticated".to_string()],
            ..User::default()
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// `userInfo` as reviews show it.
    pub fn to_user_info(&self) -> Value {
        let mut info = serde_json::json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = serde_json::json!(self.uid);
        }
        if !self.extra.is_empty() {
            info["extra"] = serde_json::json!(self.extra);
        }
        info
    }

    fn authenticated(mut self) -> User {
        if !self.in_group("system:authenticated") {
            self.groups.push("system:authenticated".to_string());
        }
        self
    }
}

/// Service-account token checks.
#[derive(Debug, Clone)]
pub struct ServiceAccountTokens {
    /// The verification keys (`--service-account-key-file`).
    pub keys: Vec<PublicKey>,
    /// Accepted issuers (`--service-account-issuer`).
    pub issuers: Vec<String>,
    /// Accepted audiences (`--api-audiences`, else the issuers).
    pub audiences: Vec<String>,
}

/// A `--token-auth-file` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticToken {
    pub token: String,
    pub user: User,
}

/// Parses a `--token-auth-file`: `token,user,uid[,"group1,group2"]` per line.
///
/// # Errors
/// A line with fewer than three fields.
pub fn parse_token_file(text: &str) -> Result<Vec<StaticToken>, String> {
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = split_csv(line);
        if fields.len() < 3 {
            return Err(format!("line {}: need at least token, user and uid", n + 1));
        }
        let groups = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        tokens.push(StaticToken {
            token: fields[0].clone(),
            user: User {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
                extra: BTreeMap::new(),
            },
        });
    }
    Ok(tokens)
}

fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    out.push(current);
    out
}

/// How requests are authenticated.
#[derive(Default)]
pub struct AuthnConfig {
    /// `--client-ca-file`.
    pub client_ca: Option<rustls::RootCertStore>,
    /// `--enable-bootstrap-token-auth`.
    pub bootstrap_tokens: bool,
    /// Service-account tokens, when keys are configured.
    pub service_accounts: Option<ServiceAccountTokens>,
    /// `--token-auth-file`.
    pub static_tokens: Vec<StaticToken>,
    /// `--anonymous-auth`.
    pub anonymous: bool,
    /// The JWT authenticators: `--oidc-*`'s, or `--authentication-config`'s.
    pub jwt: Arc<super::oidc::JwtAuthenticators>,
}

/// The authenticators.
pub struct Authenticator {
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    bootstrap_tokens: bool,
    service_accounts: Option<ServiceAccountTokens>,
    static_tokens: Vec<StaticToken>,
    anonymous: bool,
    jwt: Arc<super::oidc::JwtAuthenticators>,
}

/// Why credentials were refused (logged by the server; the client sees only 401).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl Authenticator {
    /// Authenticators for `config`.
    ///
    /// # Errors
    /// A client CA rustls cannot use.
    pub fn new(config: AuthnConfig) -> Result<Authenticator, rustls::server::VerifierBuilderError> {
        let verifier = match config.client_ca {
            Some(roots) => Some(
                WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    crate::tls::provider(),
                )
                .build()?,
            ),
            None => None,
        };
        Ok(Authenticator {
            verifier,
            bootstrap_tokens: config.bootstrap_tokens,
            service_accounts: config.service_accounts,
            static_tokens: config.static_tokens,
            anonymous: config.anonymous,
            jwt: config.jwt,
        })
    }

    /// The user behind a request's credentials.
    ///
    /// # Errors
    /// Why the credentials were refused; the request gets 401.
    pub async fn authenticate(
        &self,
        storage: &dyn Storage,
        root: &str,
        certificates: &[CertificateDer<'static>],
        authorization: Option<&str>,
    ) -> Result<User, Refusal> {
        let mut refusals = Vec::new();
        if let Some((leaf, intermediates)) = certificates.split_first() {
            match self.certificate(leaf, intermediates) {
                Ok(user) => return Ok(user.authenticated()),
                Err(why) => refusals.push(why),
            }
        }
        let token = authorization
            .and_then(|h| {
                let (scheme, rest) = h.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty());
        if let Some(token) = token {
            match self.token(storage, root, token).await {
                Ok(user) => return Ok(user.authenticated()),
                Err(why) => refusals.push(why),
            }
        } else if authorization.is_some_and(|h| !h.trim().is_empty()) {
            refusals.push("an Authorization header that is not a bearer token".to_string());
        }
        if refusals.is_empty() && self.anonymous {
            return Ok(User::anonymous());
        }
        if refusals.is_empty() {
            refusals.push("no credentials, and anonymous requests are disabled".to_string());
        }
        Err(Refusal(refusals.join("; ")))
    }

    fn certificate(
        &self,
        leaf: &CertificateDer<'static>,
        intermediates: &[CertificateDer<'static>],
    ) -> Result<User, String> {
        let Some(verifier) = &self.verifier else {
            return Err("client certificates are not accepted (no --client-ca-file)".to_string());
        };
        verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| format!("verifying certificate: {e}"))?;
        let identity = crate::tls::identity(leaf).ok_or("an unparsable client certificate")?;
        if identity.user.is_empty() {
            return Err("a client certificate without a common name".to_string());
        }
        Ok(User {
            name: identity.user,
            groups: identity.groups,
            ..User::default()
        })
    }

    async fn token(&self, storage: &dyn Storage, root: &str, token: &str) -> Result<User, String> {
        if let Some(found) = self
            .static_tokens
            .iter()
            .find(|t| constant_time_eq(&t.token, token))
        {
            return Ok(found.user.clone());
        }
        if let Some((id, secret)) = bootstrap_token_parts(token)
            && self.bootstrap_tokens
        {
            return bootstrap_token(storage, root, id, secret).await;
        }
        if let Some(oidc) = self.jwt.for_token(token) {
            return oidc.authenticate(token).await;
        }
        if token.matches('.').count() == 2
            && let Some(sa) = &self.service_accounts
        {
            return service_account_token(storage, root, sa, token).await;
        }
        Err("invalid bearer token".to_string())
    }
}

/// Compares secrets in time that depends on their lengths only.
fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `<id>.<secret>`: six and sixteen characters of `[a-z0-9]`.
pub fn bootstrap_token_parts(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

fn secrets() -> Resource {
    super::resources::builtins()
        .into_iter()
        .find(|r| r.group.is_empty() && r.plural == "secrets")
        .unwrap_or_else(|| unreachable!("secrets are built in"))
}

fn data(secret: &Value, key: &str) -> Option<String> {
    let encoded = secret["data"][key].as_str()?;
    let bytes = B64.decode(encoded).ok()?;
    String::from_utf8(bytes).ok()
}

async fn bootstrap_token(
    storage: &dyn Storage,
    root: &str,
    id: &str,
    secret: &str,
) -> Result<User, String> {
    let name = format!("bootstrap-token-{id}");
    let key = secrets().key(root, Some("kube-system"), &name);
    let stored = storage
        .get(&key)
        .await
        .map_err(|e| format!("reading bootstrap token {id}: {e}"))?
        .ok_or_else(|| format!("bootstrap token {id}: no secret kube-system/{name}"))?;
    let s = &stored.value;
    if s["type"] != "bootstrap.kubernetes.io/token" {
        return Err(format!(
            "bootstrap token {id}: secret of type {}",
            s["type"]
        ));
    }
    if meta::deleting(s) {
        return Err(format!("bootstrap token {id}: being deleted"));
    }
    if data(s, "token-id").as_deref() != Some(id) {
        return Err(format!("bootstrap token {id}: token-id does not match"));
    }
    let stored_secret = data(s, "token-secret").unwrap_or_default();
    if !constant_time_eq(&stored_secret, secret) {
        return Err(format!("bootstrap token {id}: wrong secret"));
    }
    if data(s, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err(format!(
            "bootstrap token {id}: not marked usage-bootstrap-authentication"
        ));
    }
    if let Some(expiration) = data(s, "expiration") {
        match meta::parse_time(&expiration) {
            Some(t) if t > time::OffsetDateTime::now_utc() => {}
            Some(_) => return Err(format!("bootstrap token {id}: expired at {expiration}")),
            None => return Err(format!("bootstrap token {id}: unparsable expiration")),
        }
    }
    let mut groups = vec!["system:bootstrappers".to_string()];
    if let Some(extra) = data(s, "auth-extra-groups") {
        for group in extra.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let valid = group
                .strip_prefix("system:bootstrappers:")
                .is_some_and(|rest| {
                    !rest.is_empty()
                        && rest.bytes().all(|b| {
                            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-'
                        })
                });
            if !valid {
                return Err(format!(
                    "bootstrap token {id}: invalid extra group {group:?}"
                ));
            }
            groups.push(group.to_string());
        }
    }
    Ok(User {
        name: format!("system:bootstrap:{id}"),
        groups,
        ..User::default()
    })
}

async fn service_account_token(
    storage: &dyn Storage,
    root: &str,
    config: &ServiceAccountTokens,
    token: &str,
) -> Result<User, String> {
    let claims = jwt::verify(token, &config.keys).map_err(|e| e.to_string())?;
    let issuer = claims["iss"].as_str().unwrap_or_default();
    if !config.issuers.iter().any(|i| i == issuer) {
        return Err(format!("token issuer {issuer:?} is not accepted"));
    }
    let audiences: Vec<&str> = match &claims["aud"] {
        Value::String(a) => vec![a.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !audiences
        .iter()
        .any(|a| config.audiences.iter().any(|ours| ours == a))
    {
        return Err("token audiences are not accepted".to_string());
    }
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // kube-apiserver allows a minute of clock skew.
    if claims["exp"].as_i64().is_some_and(|exp| exp + 60 < now) {
        return Err("token has expired".to_string());
    }
    if claims["nbf"].as_i64().is_some_and(|nbf| nbf - 60 > now) {
        return Err("token is not valid yet".to_string());
    }
    let k8s = &claims["kubernetes.io"];
    let namespace = k8s["namespace"].as_str().unwrap_or_default();
    let name = k8s["serviceaccount"]["name"].as_str().unwrap_or_default();
    let uid = k8s["serviceaccount"]["uid"].as_str().unwrap_or_default();
    if namespace.is_empty() || name.is_empty() {
        return Err("token without a service account".to_string());
    }
    let sa_resource = super::resources::builtins()
        .into_iter()
        .find(|r| r.group.is_empty() && r.plural == "serviceaccounts")
        .unwrap_or_else(|| unreachable!("serviceaccounts are built in"));
    let sa = storage
        .get(&sa_resource.key(root, Some(namespace), name))
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("service account {namespace}/{name} has been deleted"))?;
    let stored_uid = sa.value["metadata"]["uid"].as_str().unwrap_or_default();
    if stored_uid != uid {
        return Err(format!(
            "service account uid ({uid}) does not match ({stored_uid})"
        ));
    }
    let mut extra = BTreeMap::new();
    if let Some(pod) = k8s["pod"].as_object() {
        let pod_name = pod.get("name").and_then(Value::as_str).unwrap_or_default();
        let pod_uid = pod.get("uid").and_then(Value::as_str).unwrap_or_default();
        let pods = super::resources::builtins()
            .into_iter()
            .find(|r| r.group.is_empty() && r.plural == "pods")
            .unwrap_or_else(|| unreachable!("pods are built in"));
        let found = storage
            .get(&pods.key(root, Some(namespace), pod_name))
            .await
            .map_err(|e| e.to_string())?;
        if found
            .as_ref()
            .and_then(|p| p.value["metadata"]["uid"].as_str())
            != Some(pod_uid)
        {
            return Err(format!(
                "pod {namespace}/{pod_name} bound to the token no longer exists"
            ));
        }
        extra.insert(
            "authentication.kubernetes.io/pod-name".to_string(),
            vec![pod_name.to_string()],
        );
        extra.insert(
            "authentication.kubernetes.io/pod-uid".to_string(),
            vec![pod_uid.to_string()],
        );
    }
    if let Some(jti) = claims["jti"].as_str() {
        extra.insert(
            "authentication.kubernetes.io/credential-id".to_string(),
            vec![format!("JTI={jti}")],
        );
    }
    Ok(User {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        uid: uid.to_string(),
        groups: vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
        ],
        extra,
    })
}

/// The claims of a token for `namespace/name` (uid `uid`) from now for `seconds`.
pub fn service_account_claims(
    issuer: &str,
    audiences: &[String],
    namespace: &str,
    name: &str,
    uid: &str,
    seconds: i64,
    bound: Option<(&str, &str, &str)>,
) -> Value {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut k8s = serde_json::json!({
        "namespace": namespace,
        "serviceaccount": {"name": name, "uid": uid},
    });
    if let Some((kind, bound_name, bound_uid)) = bound {
        let field = kind.to_ascii_lowercase();
        k8s[field] = serde_json::json!({"name": bound_name, "uid": bound_uid});
    }
    serde_json::json!({
        "aud": audiences,
        "exp": now + seconds,
        "iat": now,
        "nbf": now,
        "iss": issuer,
        "jti": meta::uid(),
        "kubernetes.io": k8s,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_parse_with_quoted_groups() {
        let tokens = parse_token_file("# comment\nt1,alice,1,\"dev,ops\"\nt2,bob,2\n").unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].user.groups, vec!["dev", "ops"]);
        assert!(tokens[1].user.groups.is_empty());
        assert!(parse_token_file("t,u\n").is_err());
    }

    #[test]
    fn bootstrap_tokens_have_their_shape() {
        assert_eq!(
            bootstrap_token_parts("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        assert_eq!(bootstrap_token_parts("ABCDEF.0123456789abcdef"), None);
        assert_eq!(bootstrap_token_parts("abcdef.0123"), None);
        assert_eq!(bootstrap_token_parts("a.b.c"), None);
    }
}
