//! The OIDC provider we run for a SIPCluster (`spec.services.oidcProvider`): its configuration
//! file and its users, as the planner writes them and `oi-oidc-provider` reads them. Both
//! sides validate with the same code, so a users list the planner accepts is one the provider
//! starts with.
//!
//! Users come from the Secret named by the service's `usersSecret`, key [`USERS_KEY`]: a YAML
//! (or JSON) list of
//!
//! ```yaml
//! - username: alice                      # the token's sub and preferred_username
//!   email: alice@example.com             # optional; email_verified is true when given
//!   groups: [platform-admins]            # optional
//!   passwordHash: $pbkdf2-sha256$i=600000$<salt>$<hash>   # `oi sip hash-password`
//! ```

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use serde::{Deserialize, Serialize};

/// The key of the users Secret holding the users list.
pub const USERS_KEY: &str = "users.yaml";
/// Password hashes with fewer PBKDF2 iterations are refused.
pub const MIN_ITERATIONS: u32 = 10_000;
/// The PHC identifier of our password hashes.
pub const HASH_PREFIX: &str = "$pbkdf2-sha256$";
/// The length of a password hash's derived key.
pub const HASH_BYTES: usize = 32;
/// Redirect URIs of the cluster's client when the service names none: kubelogin's defaults
/// (`kubectl oidc-login`, its first port and its fallback).
pub const DEFAULT_REDIRECT_URIS: [&str; 2] = ["http://localhost:8000", "http://localhost:18000"];
/// How long ID tokens live when not said.
pub const DEFAULT_TOKEN_LIFETIME_SECONDS: u64 = 3600;

/// `oi-oidc-provider`'s configuration file (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// `https://<address>:<port>`: every token's `iss`, and where the provider answers.
    pub issuer: String,
    pub listen: SocketAddr,
    /// PEM serving certificate (chain) and key.
    pub tls_certificate: String,
    pub tls_private_key: String,
    /// The ES256 signing key (PKCS#8 PEM): made, 0600, on first start; kept after.
    pub signing_key: String,
    /// The users list (see the module documentation).
    pub users: String,
    pub clients: Vec<ProviderClient>,
    /// Whether the resource owner password grant is allowed (for `kubectl oidc-login
    /// --grant-type=password`); off unless asked.
    #[serde(default)]
    pub password_grant: bool,
    #[serde(default = "default_lifetime")]
    pub token_lifetime_seconds: u64,
}

fn default_lifetime() -> u64 {
    DEFAULT_TOKEN_LIFETIME_SECONDS
}

/// A public client (no secret; PKCE S256 required).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderClient {
    pub id: String,
    /// Exact matches only.
    #[serde(rename = "redirectURIs")]
    pub redirect_uris: Vec<String>,
}

/// One user of the provider.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcUser {
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub email: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    pub password_hash: String,
}

impl std::fmt::Debug for OidcUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcUser")
            .field("username", &self.username)
            .field("email", &self.email)
            .field("groups", &self.groups)
            .field("password_hash", &"<redacted>")
            .finish()
    }
}

/// A password hash's parts: `$pbkdf2-sha256$i=<iterations>$<salt>$<hash>` (unpadded
/// standard base64, as the PHC string format has it).
#[derive(Clone, PartialEq, Eq)]
pub struct HashParts {
    pub iterations: NonZeroU32,
    pub salt: Vec<u8>,
    pub hash: Vec<u8>,
}

impl std::fmt::Debug for HashParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HashParts(pbkdf2-sha256, i={})", self.iterations)
    }
}

/// A redirect URI a client may register: absolute `http(s)`, with a host part, no fragment
/// and no blanks (matched exactly, so nothing is normalized).
///
/// # Errors
/// Why not.
pub fn check_redirect_uri(uri: &str) -> Result<(), String> {
    let scheme_ok = ["http://", "https://"]
        .iter()
        .any(|s| uri.strip_prefix(s).is_some_and(|rest| !rest.is_empty()));
    if !scheme_ok || uri.contains('#') || uri.contains(char::is_whitespace) {
        return Err(format!(
            "{uri:?} is not an absolute http(s) URI without fragment"
        ));
    }
    Ok(())
}

/// Parses a password hash.
///
/// # Errors
/// The reason, when `text` is not such a hash or is weaker than [`MIN_ITERATIONS`].
pub fn parse_hash(text: &str) -> Result<HashParts, String> {
    let rest = text
        .trim()
        .strip_prefix(HASH_PREFIX)
        .ok_or_else(|| format!("not a {HASH_PREFIX}i=<iterations>$<salt>$<hash> string"))?;
    let mut parts = rest.split('$');
    let (Some(params), Some(salt), Some(hash), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!(
            "expected {HASH_PREFIX}i=<iterations>$<salt>$<hash>"
        ));
    };
    let iterations: u32 = params
        .strip_prefix("i=")
        .and_then(|i| i.parse().ok())
        .ok_or_else(|| format!("parameters {params:?}: expected i=<iterations>"))?;
    if iterations < MIN_ITERATIONS {
        return Err(format!(
            "{iterations} iterations: at least {MIN_ITERATIONS} are required"
        ));
    }
    let salt = B64
        .decode(salt)
        .map_err(|_| "the salt is not unpadded base64".to_string())?;
    let hash = B64
        .decode(hash)
        .map_err(|_| "the hash is not unpadded base64".to_string())?;
    if salt.len() < 8 {
        return Err("the salt is shorter than 8 bytes".into());
    }
    if hash.len() != HASH_BYTES {
        return Err(format!("the hash is not {HASH_BYTES} bytes"));
    }
    Ok(HashParts {
        iterations: NonZeroU32::new(iterations).ok_or("0 iterations")?,
        salt,
        hash,
    })
}

/// Parses and validates a users list (YAML or JSON): every username present, printable and
/// unique, every email plausible, every hash ours and strong enough. Errors name the entry
/// (`[i]`, and the user when known) and the field.
///
/// # Errors
/// As above.
pub fn parse_users(text: &str) -> Result<Vec<OidcUser>, String> {
    let users: Vec<OidcUser> = serde_yaml_ng::from_str(text)
        .map_err(|e| format!("not a list of users (username, email, groups, passwordHash): {e}"))?;
    if users.is_empty() {
        return Err("no user".into());
    }
    let mut seen = BTreeSet::new();
    for (i, u) in users.iter().enumerate() {
        let at = format!("[{i}]");
        let printable = |s: &str| !s.is_empty() && s.chars().all(|c| !c.is_control());
        if !printable(&u.username) || u.username.len() > 256 {
            return Err(format!(
                "{at}.username: empty, too long or with control characters"
            ));
        }
        let at = format!("[{i}] ({})", u.username);
        if !seen.insert(u.username.as_str()) {
            return Err(format!("{at}.username: listed twice"));
        }
        if !u.email.is_empty() {
            let ok = printable(&u.email)
                && !u.email.contains(char::is_whitespace)
                && u.email
                    .split_once('@')
                    .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty());
            if !ok {
                return Err(format!("{at}.email: {:?} is not an address", u.email));
            }
        }
        for g in &u.groups {
            if !printable(g) {
                return Err(format!(
                    "{at}.groups: an empty group or one with control characters"
                ));
            }
        }
        parse_hash(&u.password_hash).map_err(|e| format!("{at}.passwordHash: {e}"))?;
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str =
        "$pbkdf2-sha256$i=10000$c2FsdHNhbHQ$8AsC4H/147lFlEEMCnL1JMziEIWaSGvXLB7jM4MIJaM";

    #[test]
    fn malformed_or_weak_hashes_are_refused_with_the_reason() {
        assert_eq!(parse_hash(HASH).unwrap().iterations.get(), 10_000);
        for (text, reason) in [
            ("plain", "not a $pbkdf2-sha256$"),
            ("$pbkdf2-sha256$i=10000$c2FsdHNhbHQ", "expected"),
            ("$pbkdf2-sha256$n=10000$c2FsdHNhbHQ$xx", "expected i="),
            (
                "$pbkdf2-sha256$i=1000$c2FsdHNhbHQ$8AsC4H/147lFlEEMCnL1JMziEIWaSGvXLB7jM4MIJaM",
                "at least 10000",
            ),
            (
                "$pbkdf2-sha256$i=10000$!!$8AsC4H/147lFlEEMCnL1JMziEIWaSGvXLB7jM4MIJaM",
                "salt",
            ),
            ("$pbkdf2-sha256$i=10000$c2FsdHNhbHQ$AAAA", "not 32 bytes"),
        ] {
            let e = parse_hash(text).unwrap_err();
            assert!(e.contains(reason), "{text}: {e}");
        }
    }

    #[test]
    fn users_load_from_yaml_and_json() {
        let yaml = format!(
            "- username: alice\n  email: alice@example.com\n  groups: [admins]\n  passwordHash: {HASH}\n- username: bob\n  passwordHash: '{HASH}'\n"
        );
        let users = parse_users(&yaml).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users[0].groups, vec!["admins".to_string()]);
        assert_eq!(users[1].email, "");
        let json = format!(r#"[{{"username":"carol","passwordHash":"{HASH}"}}]"#);
        assert_eq!(parse_users(&json).unwrap()[0].username, "carol");
    }

    #[test]
    fn bad_users_name_the_entry_and_field() {
        let user = |name: &str, email: &str, hash: &str| {
            format!("- username: {name:?}\n  email: {email:?}\n  passwordHash: {hash:?}\n")
        };
        for (text, want) in [
            (String::new(), "no user"),
            ("a: b".to_string(), "not a list"),
            ("[]".to_string(), "no user"),
            (user("", "", HASH), "[0].username"),
            (
                format!("{}{}", user("a", "", HASH), user("a", "", HASH)),
                "[1] (a).username: listed twice",
            ),
            (user("a", "nobody", HASH), "[0] (a).email"),
            (
                user("a", "", "$pbkdf2-sha256$i=10$c2FsdHNhbHQ$x"),
                "[0] (a).passwordHash: 10 iterations",
            ),
            (
                "- username: a\n  password: x\n".to_string(),
                "unknown field `password`",
            ),
        ] {
            let e = parse_users(&text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn debug_hides_password_hashes() {
        let users = parse_users(&format!("- username: a\n  passwordHash: {HASH}\n")).unwrap();
        let shown = format!("{users:?} {:?}", parse_hash(HASH).unwrap());
        assert!(!shown.contains("8AsC4H"), "{shown}");
        assert!(!shown.contains("c2FsdHNhbHQ"), "{shown}");
    }
}
