//! kube-apiserver's structured authentication configuration (`--authentication-config`,
//! `AuthenticationConfiguration` of `apiserver.config.k8s.io/v1`, also `v1beta1` and
//! `v1alpha1`): its JWT authenticators, checked as the real server checks them, and read
//! again when the file changes ([`watch`]).
//!
//! ```text
//! jwt[]  (at most 64)
//!   issuer.url                 https, each once, not a --service-account-issuer
//!   issuer.discoveryURL        where the discovery document is (optional)
//!   issuer.certificateAuthority  PEM the issuer's TLS certificate is checked against
//!                              (else the system's bundle)
//!   issuer.audiences           at least one; several need audienceMatchPolicy: MatchAny
//!   claimValidationRules[]     claim + requiredValue
//!   claimMappings.username     claim + prefix (the prefix is required with a claim)
//!   claimMappings.groups       claim + prefix (optional)
//! ```
//!
//! What the stand-in does not implement is refused when the file is read, naming the field:
//! CEL expressions (`expression`, `userValidationRules`, `claimMappings.extra`, `uid`),
//! `anonymous`. The real server checks the file again within seconds of a change; the
//! stand-in every [`RELOAD_EVERY`]. A file that no longer parses leaves the authenticators
//! in force as they were, as the real server does.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::oidc::{JwtAuthenticators, Oidc, OidcConfig};

/// How many JWT authenticators kube-apiserver takes.
pub const MAX_JWT: usize = 64;
/// How often the file is looked at again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// One JWT authenticator of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtIssuer {
    pub config: OidcConfig,
    /// `issuer.certificateAuthority`.
    pub ca: Option<String>,
}

/// The JWT authenticators of a configuration file's `text`, or why it is refused (naming
/// the field). `service_account_issuers`: no authenticator may claim one of them.
///
/// # Errors
/// The first problem found.
pub fn parse(text: &str, service_account_issuers: &[String]) -> Result<Vec<JwtIssuer>, String> {
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("not YAML or JSON: {e}"))?;
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    if ![
        "apiserver.config.k8s.io/v1",
        "apiserver.config.k8s.io/v1beta1",
        "apiserver.config.k8s.io/v1alpha1",
    ]
    .contains(&api_version)
    {
        return Err(format!(
            "apiVersion: {api_version:?} is not apiserver.config.k8s.io/v1 (or v1beta1, v1alpha1)"
        ));
    }
    if doc["kind"] != "AuthenticationConfiguration" {
        return Err(format!(
            "kind: {} is not AuthenticationConfiguration",
            doc["kind"]
        ));
    }
    only(&doc, "", &["apiVersion", "kind", "jwt"])?;
    let entries = match &doc["jwt"] {
        Value::Null => Vec::new(),
        Value::Array(a) => a.clone(),
        other => return Err(format!("jwt: {other} is not a list")),
    };
    if entries.len() > MAX_JWT {
        return Err(format!(
            "jwt: {} authenticators, at most {MAX_JWT}",
            entries.len()
        ));
    }
    let mut out: Vec<JwtIssuer> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("jwt[{i}]");
        let issuer = jwt(entry, &at)?;
        if let Some(j) = out
            .iter()
            .position(|o| o.config.issuer_url == issuer.config.issuer_url)
        {
            return Err(format!(
                "{at}.issuer.url: {:?} duplicates jwt[{j}]",
                issuer.config.issuer_url
            ));
        }
        if service_account_issuers.contains(&issuer.config.issuer_url) {
            return Err(format!(
                "{at}.issuer.url: {:?} is a --service-account-issuer",
                issuer.config.issuer_url
            ));
        }
        out.push(issuer);
    }
    Ok(out)
}

/// Refuses fields of `value` (at `at`) beyond `known`.
fn only(value: &Value, at: &str, known: &[&str]) -> Result<(), String> {
    let Some(map) = value.as_object() else {
        return Err(format!("{at}: {value} is not an object"));
    };
    for key in map.keys() {
        if !known.contains(&key.as_str()) {
            let field = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            return Err(format!(
                "{field}: not implemented by the kube-apiserver stand-in (or unknown)"
            ));
        }
    }
    Ok(())
}

fn string(value: &Value, at: &str) -> Result<Option<String>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(format!("{at}: {other} is not a string")),
    }
}

/// A claim mapping's `claim` and `prefix`: the prefix is required with a claim.
fn mapping(value: &Value, at: &str) -> Result<Option<(String, String)>, String> {
    if value.is_null() {
        return Ok(None);
    }
    only(value, at, &["claim", "prefix"])?;
    let claim = string(&value["claim"], &format!("{at}.claim"))?
        .filter(|c| !c.is_empty())
        .ok_or_else(|| format!("{at}.claim: required (expressions are not implemented)"))?;
    let prefix = string(&value["prefix"], &format!("{at}.prefix"))?
        .ok_or_else(|| format!("{at}.prefix: required when claim is set"))?;
    Ok(Some((claim, prefix)))
}

fn jwt(entry: &Value, at: &str) -> Result<JwtIssuer, String> {
    only(
        entry,
        at,
        &["issuer", "claimValidationRules", "claimMappings"],
    )?;
    let issuer = &entry["issuer"];
    let i_at = format!("{at}.issuer");
    only(
        issuer,
        &i_at,
        &[
            "url",
            "discoveryURL",
            "certificateAuthority",
            "audiences",
            "audienceMatchPolicy",
        ],
    )?;
    let url = string(&issuer["url"], &format!("{i_at}.url"))?.unwrap_or_default();
    if !url.starts_with("https://") || url.contains(['?', '#']) {
        return Err(format!(
            "{i_at}.url: {url:?} is not an https URL without query or fragment"
        ));
    }
    let discovery_url = string(&issuer["discoveryURL"], &format!("{i_at}.discoveryURL"))?;
    if let Some(d) = &discovery_url
        && (!d.starts_with("https://") || *d == url)
    {
        return Err(format!(
            "{i_at}.discoveryURL: {d:?} must be an https URL other than the issuer's"
        ));
    }
    let audiences: Vec<String> = match &issuer["audiences"] {
        Value::Array(a) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| format!("{i_at}.audiences: {v} is not a non-empty string"))
            })
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    let Some((client_id, more)) = audiences.split_first() else {
        return Err(format!("{i_at}.audiences: at least one is required"));
    };
    let policy = string(
        &issuer["audienceMatchPolicy"],
        &format!("{i_at}.audienceMatchPolicy"),
    )?;
    match (more.is_empty(), policy.as_deref()) {
        (_, Some("MatchAny")) | (true, None | Some("")) => {}
        (false, _) => {
            return Err(format!(
                "{i_at}.audienceMatchPolicy: must be MatchAny with several audiences"
            ));
        }
        (true, Some(other)) => {
            return Err(format!(
                "{i_at}.audienceMatchPolicy: {other:?} is not MatchAny"
            ));
        }
    }
    let ca = string(
        &issuer["certificateAuthority"],
        &format!("{i_at}.certificateAuthority"),
    )?
    .filter(|c| !c.is_empty());
    let mut required_claims = std::collections::BTreeMap::new();
    if let Value::Array(rules) = &entry["claimValidationRules"] {
        for (j, rule) in rules.iter().enumerate() {
            let r_at = format!("{at}.claimValidationRules[{j}]");
            only(rule, &r_at, &["claim", "requiredValue"])?;
            let claim = string(&rule["claim"], &format!("{r_at}.claim"))?
                .ok_or_else(|| format!("{r_at}.claim: required"))?;
            let value = string(&rule["requiredValue"], &format!("{r_at}.requiredValue"))?
                .unwrap_or_default();
            required_claims.insert(claim, value);
        }
    }
    let m_at = format!("{at}.claimMappings");
    let mappings = &entry["claimMappings"];
    only(mappings, &m_at, &["username", "groups"])?;
    let (username_claim, username_prefix) =
        mapping(&mappings["username"], &format!("{m_at}.username"))?
            .ok_or_else(|| format!("{m_at}.username: required"))?;
    let groups = mapping(&mappings["groups"], &format!("{m_at}.groups"))?;
    Ok(JwtIssuer {
        config: OidcConfig {
            issuer_url: url,
            discovery_url,
            client_id: client_id.clone(),
            audiences: more.to_vec(),
            username_claim,
            username_prefix: Some(username_prefix),
            exact_prefix: true,
            groups_prefix: groups.as_ref().map(|(_, p)| p.clone()),
            groups_claim: groups.map(|(c, _)| c),
            required_claims,
            // The structured configuration accepts what the issuer's keys sign with; the
            // stand-in verifies these.
            signing_algs: vec!["RS256".into(), "ES256".into(), "ES384".into()],
        },
        ca,
    })
}

/// The authenticator of `issuer`, reaching it over TLS that trusts its CA, else the
/// system's bundle (if there is one).
///
/// # Errors
/// A CA that is not PEM certificates.
pub fn authenticator(issuer: &JwtIssuer) -> Result<Arc<Oidc>, String> {
    let tls = super::oidc::issuer_tls(
        issuer.ca.as_deref().map(str::as_bytes),
        "certificateAuthority",
    )
    .map_err(|e| e.to_string())?;
    Ok(Arc::new(Oidc::new(issuer.config.clone(), tls)))
}

/// The authenticators of `text`, the content of the file at `path`, reusing those of
/// `before` whose issuer did not change (their fetched keys kept).
///
/// # Errors
/// The file is refused: the path and why.
pub fn load(
    path: &Path,
    text: &[u8],
    service_account_issuers: &[String],
    before: &[(JwtIssuer, Arc<Oidc>)],
) -> Result<Vec<(JwtIssuer, Arc<Oidc>)>, String> {
    let shown = path.display();
    let text = std::str::from_utf8(text).map_err(|_| format!("{shown}: not UTF-8"))?;
    let issuers = parse(text, service_account_issuers).map_err(|e| format!("{shown}: {e}"))?;
    issuers
        .into_iter()
        .map(|issuer| {
            let reused = before
                .iter()
                .find(|(b, _)| *b == issuer)
                .map(|(_, o)| Arc::clone(o));
            let oidc = match reused {
                Some(o) => o,
                None => authenticator(&issuer).map_err(|e| format!("{shown}: {e}"))?,
            };
            Ok((issuer, oidc))
        })
        .collect()
}

/// Looks at the file every [`RELOAD_EVERY`] and puts its authenticators in force when its
/// content changed and it is accepted; a refused file is logged and changes nothing. Runs
/// until the task is dropped.
pub async fn watch(
    path: PathBuf,
    service_account_issuers: Vec<String>,
    jwt: Arc<JwtAuthenticators>,
    mut loaded: Vec<(JwtIssuer, Arc<Oidc>)>,
    mut last: Vec<u8>,
) {
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        let Ok(now) = std::fs::read(&path) else {
            continue;
        };
        if now == last {
            continue;
        }
        let next = load(&path, &now, &service_account_issuers, &loaded);
        last = now;
        match next {
            Ok(next) => {
                jwt.replace(next.iter().map(|(_, o)| Arc::clone(o)).collect());
                jwt.count_reload(true);
                let issuers: Vec<&str> = next
                    .iter()
                    .map(|(i, _)| i.config.issuer_url.as_str())
                    .collect();
                tracing::info!(
                    issuers = ?issuers,
                    "authentication configuration reloaded"
                );
                loaded = next;
            }
            Err(e) => {
                jwt.count_reload(false);
                tracing::warn!(
                    error = %e,
                    "authentication configuration refused; the one in force stays"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
