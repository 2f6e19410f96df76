//! The provider's endpoints, over plain request and reply values (the TLS server in
//! [`crate::serve`] feeds them): discovery, JWKS, the authorization endpoint with its login
//! form, the token endpoint and userinfo.
//!
//! - Clients are public: no secret, PKCE with `S256` required, redirect URIs matched exactly.
//!   An unknown client or redirect URI is answered with an error page, never a redirect.
//! - Codes are single use and live [`CODE_LIFETIME`] seconds; ID tokens are ES256 JWTs with
//!   `iss`, `sub` (the username), `aud`/`azp` (the client), `exp`, `iat`, `auth_time`,
//!   `nonce`, `preferred_username`, `name`, `email` and `email_verified` (when the user has an
//!   email), `groups`.
//! - The code flow also gives a refresh token: single use (each refresh gives the next one),
//!   bound to its client, refused [`SESSION_LIFETIME`] seconds after the login it descends
//!   from, and for a user no longer listed. They live in memory: a restart ends sessions.
//! - After [`MAX_FAILURES`] failed logins for a username from one address within
//!   [`FAILURE_WINDOW`] seconds, that username is refused from that address until the window
//!   has passed; after [`MAX_FAILURES_PER_USER`] from any addresses, from everywhere. One
//!   client guessing cannot lock a user out; many guessing together get few guesses each. An
//!   unknown username costs the same hash computation as a known one. An attempt counts from
//!   before its password is checked, so attempts at once cannot exceed the limits.
//! - Codes and tokens are 32 bytes from the system's random source; if it fails, nothing is
//!   issued (500).
//! - Nothing secret is logged: log lines name users and clients, never passwords, codes or
//!   tokens.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use oi_api::oidc::{HashParts, OidcUser, ProviderClient, ProviderConfig, parse_hash};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest as _, Sha256};

use crate::keys::SigningKey;
use crate::password;

/// Seconds an authorization code lives.
pub const CODE_LIFETIME: u64 = 60;
/// Seconds a login's session lasts: refresh tokens are refused after this long from the
/// login they descend from.
pub const SESSION_LIFETIME: u64 = 24 * 3600;
/// Failed logins allowed per username and client address within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: usize = 5;
/// Failed logins allowed per username, from all addresses together, within
/// [`FAILURE_WINDOW`].
pub const MAX_FAILURES_PER_USER: usize = 50;
/// Seconds failed logins are remembered.
pub const FAILURE_WINDOW: u64 = 900;

/// A request, as the endpoints need it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The query string, undecoded.
    pub query: String,
    /// `Authorization` header.
    pub authorization: Option<String>,
    /// The body, form-decoded (`application/x-www-form-urlencoded`).
    pub form: Vec<(String, String)>,
    /// The client's address, when known: failed logins are counted per username and address.
    pub peer: Option<IpAddr>,
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    fn json(status: u16, value: &serde_json::Value) -> Reply {
        Reply {
            status,
            headers: vec![
                ("content-type", "application/json".into()),
                ("cache-control", "no-store".into()),
                ("pragma", "no-cache".into()),
            ],
            body: value.to_string().into_bytes(),
        }
    }

    fn html(status: u16, body: String) -> Reply {
        Reply {
            status,
            headers: vec![
                ("content-type", "text/html; charset=utf-8".into()),
                ("cache-control", "no-store".into()),
                ("x-frame-options", "DENY".into()),
                (
                    "content-security-policy",
                    "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'".into(),
                ),
            ],
            body: body.into_bytes(),
        }
    }

    fn redirect(location: String) -> Reply {
        Reply {
            status: 303,
            headers: vec![("location", location), ("cache-control", "no-store".into())],
            body: Vec::new(),
        }
    }

    fn oauth_error(status: u16, error: &str, description: &str) -> Reply {
        Reply::json(
            status,
            &serde_json::json!({"error": error, "error_description": description}),
        )
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    nonce: Option<String>,
    username: String,
    auth_time: u64,
    expires: u64,
}

/// What a refresh token continues.
struct Session {
    username: String,
    client_id: String,
    auth_time: u64,
}

#[derive(Default)]
struct State {
    codes: HashMap<String, Grant>,
    /// Access tokens (for userinfo): the user and expiry.
    access: HashMap<String, (String, u64)>,
    refresh: HashMap<String, Session>,
    /// Login attempts by username that count against its limits: failed ones, and those
    /// whose password is being checked (counted from before the check, so that attempts at
    /// once cannot all pass the limit).
    failures: HashMap<String, Vec<Attempt>>,
    /// The next [`Attempt::id`].
    next_attempt: u64,
}

/// A login attempt counted against a username's limits.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    at: u64,
    peer: Option<IpAddr>,
    id: u64,
    /// Its password is still being checked.
    pending: bool,
}

/// The provider.
pub struct Provider {
    config: ProviderConfig,
    users: BTreeMap<String, (OidcUser, HashParts)>,
    /// What an unknown username is checked against (same cost as a real hash).
    decoy: HashParts,
    key: SigningKey,
    rng: Box<dyn Random>,
    state: Mutex<State>,
    /// Password checks running now, and done since the start.
    checking: AtomicUsize,
    checked: AtomicU64,
}

/// Where codes and tokens get their randomness; a failure is an error, never a weaker value.
pub(crate) trait Random: Send + Sync {
    fn fill(&self, dest: &mut [u8]) -> Result<(), ring::error::Unspecified>;
}

impl Random for SystemRandom {
    fn fill(&self, dest: &mut [u8]) -> Result<(), ring::error::Unspecified> {
        SecureRandom::fill(self, dest)
    }
}

/// An authorization request, validated.
struct AuthRequest {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    state: Option<String>,
    nonce: Option<String>,
    scope: String,
}

impl Provider {
    /// A provider for `config` with `users` (already validated) signing with `key`.
    ///
    /// # Errors
    /// When the configuration is inconsistent (no client, a bad issuer or redirect URI).
    pub fn new(
        config: ProviderConfig,
        users: Vec<OidcUser>,
        key: SigningKey,
    ) -> Result<Provider, String> {
        Provider::with_random(config, users, key, Box::new(SystemRandom::new()))
    }

    /// [`Provider::new`] drawing its codes, tokens and decoy salt from `rng`.
    pub(crate) fn with_random(
        config: ProviderConfig,
        users: Vec<OidcUser>,
        key: SigningKey,
        rng: Box<dyn Random>,
    ) -> Result<Provider, String> {
        if !config.issuer.starts_with("https://") || config.issuer.ends_with('/') {
            return Err(format!(
                "issuer {:?}: must be https://… without a trailing /",
                config.issuer
            ));
        }
        if config.clients.is_empty() {
            return Err("no client".into());
        }
        for c in &config.clients {
            if c.id.is_empty() || c.redirect_uris.is_empty() {
                return Err(format!(
                    "client {:?}: an ID and a redirect URI are required",
                    c.id
                ));
            }
            for u in &c.redirect_uris {
                oi_api::oidc::check_redirect_uri(u)
                    .map_err(|e| format!("client {}: redirect URI {e}", c.id))?;
            }
        }
        let mut by_name = BTreeMap::new();
        let mut iterations = oi_api::oidc::MIN_ITERATIONS;
        for u in users {
            let parts = parse_hash(&u.password_hash)
                .map_err(|e| format!("user {}: passwordHash: {e}", u.username))?;
            iterations = iterations.max(parts.iterations.get());
            by_name.insert(u.username.clone(), (u, parts));
        }
        let mut salt = [0u8; 16];
        rng.fill(&mut salt).map_err(|_| "no randomness")?;
        let decoy = HashParts {
            iterations: std::num::NonZeroU32::new(iterations).ok_or("0 iterations")?,
            salt: salt.to_vec(),
            hash: vec![0; oi_api::oidc::HASH_BYTES],
        };
        Ok(Provider {
            config,
            users: by_name,
            decoy,
            key,
            rng,
            state: Mutex::new(State::default()),
            checking: AtomicUsize::new(0),
            checked: AtomicU64::new(0),
        })
    }

    /// Password checks running now, and done since the provider started (each costs a
    /// PBKDF2 computation; an attempt refused by the failure limits costs none).
    pub fn password_checks(&self) -> (usize, u64) {
        (
            self.checking.load(Ordering::SeqCst),
            self.checked.load(Ordering::SeqCst),
        )
    }

    /// The signing key's ID.
    pub fn kid(&self) -> &str {
        &self.key.kid
    }

    /// Answers `request` at `now` (seconds since the epoch).
    pub fn handle(&self, request: &Request, now: u64) -> Reply {
        self.prune(now);
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/.well-known/openid-configuration") => Reply::json(200, &self.discovery()),
            ("GET", "/keys") => {
                let mut r = Reply::json(200, &self.key.jwks());
                r.headers.retain(|(n, _)| *n == "content-type");
                r
            }
            ("GET", "/healthz") => Reply {
                status: 200,
                headers: vec![("content-type", "text/plain".into())],
                body: b"ok".to_vec(),
            },
            ("GET", "/auth") => {
                let params = decode(&request.query);
                match self.auth_request(&params) {
                    Ok(a) => Reply::html(200, self.login_page(&a, None)),
                    Err(r) => r,
                }
            }
            ("POST", "/auth") => self.login(&request.form, request.peer, now),
            ("POST", "/token") => self.token(&request.form, request.peer, now),
            ("GET" | "POST", "/userinfo") => self.userinfo(request),
            (
                _,
                "/.well-known/openid-configuration" | "/keys" | "/auth" | "/token" | "/healthz",
            ) => Reply::oauth_error(405, "invalid_request", "method not allowed"),
            _ => Reply::oauth_error(404, "invalid_request", "not found"),
        }
    }

    fn discovery(&self) -> serde_json::Value {
        let i = &self.config.issuer;
        let mut grants = vec!["authorization_code", "refresh_token"];
        if self.config.password_grant {
            grants.push("password");
        }
        serde_json::json!({
            "issuer": i,
            "authorization_endpoint": format!("{i}/auth"),
            "token_endpoint": format!("{i}/token"),
            "jwks_uri": format!("{i}/keys"),
            "userinfo_endpoint": format!("{i}/userinfo"),
            "response_types_supported": ["code"],
            "grant_types_supported": grants,
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": ["openid", "email", "profile", "groups"],
            "claims_supported": ["iss", "sub", "aud", "azp", "exp", "iat", "auth_time", "nonce",
                "name", "preferred_username", "email", "email_verified", "groups"],
        })
    }

    fn client(&self, id: &str) -> Option<&ProviderClient> {
        self.config.clients.iter().find(|c| c.id == id)
    }

    /// Validates an authorization request. Before the client and redirect URI are known good
    /// the error is a page; after, a redirect carrying the error (RFC 6749 §4.1.2.1).
    fn auth_request(&self, p: &BTreeMap<String, String>) -> Result<AuthRequest, Reply> {
        let get = |k: &str| p.get(k).map(String::as_str).unwrap_or_default();
        let client_id = get("client_id");
        let Some(client) = self.client(client_id) else {
            return Err(error_page(400, &format!("unknown client {client_id:?}")));
        };
        let redirect_uri = get("redirect_uri");
        if !client.redirect_uris.iter().any(|u| u == redirect_uri) {
            return Err(error_page(
                400,
                &format!(
                    "redirect URI {redirect_uri:?} is not registered for client {client_id:?}"
                ),
            ));
        }
        let state = p.get("state").cloned().filter(|s| !s.is_empty());
        let fail = |error: &str, why: &str| {
            let mut q = form_urlencoded::Serializer::new(String::new());
            q.append_pair("error", error)
                .append_pair("error_description", why);
            if let Some(s) = &state {
                q.append_pair("state", s);
            }
            Reply::redirect(format!("{redirect_uri}{}{}", sep(redirect_uri), q.finish()))
        };
        if get("response_type") != "code" {
            return Err(fail(
                "unsupported_response_type",
                "only response_type=code is supported",
            ));
        }
        let scope = get("scope");
        if !scope.split(' ').any(|s| s == "openid") {
            return Err(fail("invalid_scope", "the scope must include openid"));
        }
        let challenge = get("code_challenge");
        let pkce_ok = (43..=128).contains(&challenge.len())
            && challenge
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~'));
        if !pkce_ok || get("code_challenge_method") != "S256" {
            return Err(fail(
                "invalid_request",
                "PKCE is required: code_challenge (43 to 128 characters) with code_challenge_method=S256",
            ));
        }
        let long = |v: &Option<String>| v.as_ref().is_some_and(|v| v.len() > 512);
        let nonce = p.get("nonce").cloned().filter(|s| !s.is_empty());
        if long(&state) || long(&nonce) {
            return Err(fail(
                "invalid_request",
                "state and nonce are at most 512 characters",
            ));
        }
        Ok(AuthRequest {
            client_id: client_id.to_string(),
            redirect_uri: redirect_uri.to_string(),
            challenge: challenge.to_string(),
            state,
            nonce,
            scope: scope.to_string(),
        })
    }

    fn login_page(&self, a: &AuthRequest, error: Option<&str>) -> String {
        let hidden = [
            ("client_id", Some(&a.client_id)),
            ("redirect_uri", Some(&a.redirect_uri)),
            ("response_type", Some(&"code".to_string())),
            ("scope", Some(&a.scope)),
            ("code_challenge", Some(&a.challenge)),
            ("code_challenge_method", Some(&"S256".to_string())),
            ("state", a.state.as_ref()),
            ("nonce", a.nonce.as_ref()),
        ];
        let mut fields = String::new();
        for (name, value) in hidden {
            if let Some(v) = value {
                fields.push_str(&format!(
                    "<input type=\"hidden\" name=\"{name}\" value=\"{}\">\n",
                    escape(v)
                ));
            }
        }
        let error = error
            .map(|e| format!("<p role=\"alert\" style=\"color:#b00\">{}</p>\n", escape(e)))
            .unwrap_or_default();
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Log in</title></head>\n\
             <body style=\"font-family:sans-serif;max-width:22em;margin:4em auto\">\n\
             <h1>Log in</h1>\n<p>to {issuer} for {client}</p>\n{error}\
             <form method=\"post\" action=\"/auth\">\n{fields}\
             <p><label>Username <input name=\"username\" autocomplete=\"username\" required autofocus></label></p>\n\
             <p><label>Password <input name=\"password\" type=\"password\" autocomplete=\"current-password\" required></label></p>\n\
             <p><button type=\"submit\">Log in</button></p>\n</form>\n</body></html>\n",
            issuer = escape(&self.config.issuer),
            client = escape(&a.client_id),
        )
    }

    /// Checks a username and password from `peer`, counting failures. `Err` is what to tell
    /// the user. The attempt is counted against the limits, in the same lock section as the
    /// check of those limits, before the password is: concurrent attempts see each other, so
    /// no more than the limit are ever checked. A success takes its own attempt back (and the
    /// finished failures from that address); a failure leaves it counted.
    fn authenticate(
        &self,
        username: &str,
        password: &str,
        peer: Option<IpAddr>,
        now: u64,
    ) -> Result<&OidcUser, String> {
        let from = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
        let id = {
            let mut state = self.lock();
            let id = state.next_attempt;
            state.next_attempt += 1;
            let attempts = state.failures.entry(username.to_string()).or_default();
            let from_peer = attempts.iter().filter(|a| a.peer == peer).count();
            if from_peer >= MAX_FAILURES || attempts.len() >= MAX_FAILURES_PER_USER {
                eprintln!("login refused for {username:?} from {from}: too many failed logins");
                return Err("too many failed logins for this user; try again later".into());
            }
            attempts.push(Attempt {
                at: now,
                peer,
                id,
                pending: true,
            });
            id
        };
        let user = self.users.get(username);
        let parts = user.map_or(&self.decoy, |(_, p)| p);
        self.checking.fetch_add(1, Ordering::SeqCst);
        let ok = password::verify(parts, password) && user.is_some();
        self.checking.fetch_sub(1, Ordering::SeqCst);
        self.checked.fetch_add(1, Ordering::SeqCst);
        let mut state = self.lock();
        let attempts = state.failures.entry(username.to_string()).or_default();
        match user {
            Some((u, _)) if ok => {
                // Its own attempt and the finished failures from this address go; attempts
                // still being checked stay counted.
                attempts.retain(|a| a.id != id && (a.peer != peer || a.pending));
                Ok(u)
            }
            _ => {
                if let Some(a) = attempts.iter_mut().find(|a| a.id == id) {
                    a.pending = false;
                }
                drop(state);
                eprintln!("login failed for {username:?} from {from}");
                Err("invalid username or password".into())
            }
        }
    }

    fn login(&self, form: &[(String, String)], peer: Option<IpAddr>, now: u64) -> Reply {
        let p: BTreeMap<String, String> = form.iter().cloned().collect();
        let a = match self.auth_request(&p) {
            Ok(a) => a,
            Err(r) => return r,
        };
        let username = p.get("username").map(String::as_str).unwrap_or_default();
        let password = p.get("password").map(String::as_str).unwrap_or_default();
        let user = match self.authenticate(username, password, peer, now) {
            Ok(u) => u,
            Err(why) => {
                let status = if why.starts_with("too many") {
                    429
                } else {
                    401
                };
                return Reply::html(status, self.login_page(&a, Some(&why)));
            }
        };
        let Ok(code) = self.random() else {
            return error_page(
                500,
                "the provider cannot issue a code now: its random source failed",
            );
        };
        self.lock().codes.insert(
            code.clone(),
            Grant {
                client_id: a.client_id.clone(),
                redirect_uri: a.redirect_uri.clone(),
                challenge: a.challenge,
                nonce: a.nonce,
                username: user.username.clone(),
                auth_time: now,
                expires: now + CODE_LIFETIME,
            },
        );
        eprintln!("login: {:?} for client {:?}", user.username, a.client_id);
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("code", &code);
        if let Some(s) = &a.state {
            q.append_pair("state", s);
        }
        q.append_pair("iss", &self.config.issuer);
        Reply::redirect(format!(
            "{}{}{}",
            a.redirect_uri,
            sep(&a.redirect_uri),
            q.finish()
        ))
    }

    fn token(&self, form: &[(String, String)], peer: Option<IpAddr>, now: u64) -> Reply {
        let p: BTreeMap<&str, &str> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let get = |k: &str| p.get(k).copied().unwrap_or_default();
        let client_id = get("client_id");
        if self.client(client_id).is_none() {
            return Reply::oauth_error(401, "invalid_client", "unknown client");
        }
        match get("grant_type") {
            "authorization_code" => {
                let Some(grant) = self.lock().codes.remove(get("code")) else {
                    return Reply::oauth_error(
                        400,
                        "invalid_grant",
                        "unknown, used or expired code",
                    );
                };
                if grant.client_id != client_id || grant.redirect_uri != get("redirect_uri") {
                    return Reply::oauth_error(
                        400,
                        "invalid_grant",
                        "the code was issued to another client or redirect URI",
                    );
                }
                let verifier = get("code_verifier");
                let computed = B64URL.encode(Sha256::digest(verifier.as_bytes()));
                if verifier.len() < 43 || !same(computed.as_bytes(), grant.challenge.as_bytes()) {
                    return Reply::oauth_error(
                        400,
                        "invalid_grant",
                        "the code verifier does not match",
                    );
                }
                let Some((user, _)) = self.users.get(&grant.username) else {
                    return Reply::oauth_error(400, "invalid_grant", "the user is gone");
                };
                self.tokens(
                    user,
                    client_id,
                    grant.nonce.as_deref(),
                    grant.auth_time,
                    now,
                    true,
                )
            }
            "refresh_token" => {
                // Single use: taken out whatever follows.
                let Some(session) = self.lock().refresh.remove(get("refresh_token")) else {
                    return Reply::oauth_error(
                        400,
                        "invalid_grant",
                        "unknown, used or expired refresh token",
                    );
                };
                if session.client_id != client_id {
                    return Reply::oauth_error(
                        400,
                        "invalid_grant",
                        "the refresh token was issued to another client",
                    );
                }
                let Some((user, _)) = self.users.get(&session.username) else {
                    return Reply::oauth_error(400, "invalid_grant", "the user is gone");
                };
                self.tokens(user, client_id, None, session.auth_time, now, true)
            }
            "password" if self.config.password_grant => {
                match self.authenticate(get("username"), get("password"), peer, now) {
                    Ok(user) => {
                        eprintln!(
                            "login (password grant): {:?} for client {client_id:?}",
                            user.username
                        );
                        self.tokens(user, client_id, None, now, now, false)
                    }
                    Err(why) => Reply::oauth_error(400, "invalid_grant", &why),
                }
            }
            other => Reply::oauth_error(
                400,
                "unsupported_grant_type",
                &format!("grant type {other:?} is not supported here"),
            ),
        }
    }

    fn claims(&self, user: &OidcUser) -> serde_json::Map<String, serde_json::Value> {
        let mut c = serde_json::Map::new();
        c.insert("sub".into(), user.username.clone().into());
        c.insert("preferred_username".into(), user.username.clone().into());
        c.insert("name".into(), user.username.clone().into());
        if !user.email.is_empty() {
            c.insert("email".into(), user.email.clone().into());
            c.insert("email_verified".into(), true.into());
        }
        c.insert("groups".into(), user.groups.clone().into());
        c
    }

    fn tokens(
        &self,
        user: &OidcUser,
        client_id: &str,
        nonce: Option<&str>,
        auth_time: u64,
        now: u64,
        refresh: bool,
    ) -> Reply {
        let lifetime = self.config.token_lifetime_seconds;
        let mut claims = self.claims(user);
        for (k, v) in [
            ("iss", serde_json::Value::from(self.config.issuer.clone())),
            ("aud", client_id.into()),
            ("azp", client_id.into()),
            ("iat", now.into()),
            ("exp", (now + lifetime).into()),
            ("auth_time", auth_time.into()),
        ] {
            claims.insert(k.into(), v);
        }
        if let Some(n) = nonce {
            claims.insert("nonce".into(), n.into());
        }
        let id_token = match self.key.sign(&serde_json::Value::Object(claims)) {
            Ok(t) => t,
            Err(e) => return Reply::oauth_error(500, "server_error", &e),
        };
        let (access, refresh_token) = match (self.random(), refresh.then(|| self.random())) {
            (Ok(a), None) => (a, None),
            (Ok(a), Some(Ok(r))) => (a, Some(r)),
            (Err(r), _) | (_, Some(Err(r))) => return r,
        };
        let mut answer = serde_json::json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": lifetime,
            "id_token": id_token,
        });
        let mut state = self.lock();
        state
            .access
            .insert(access, (user.username.clone(), now + lifetime));
        if let Some(token) = refresh_token {
            state.refresh.insert(
                token.clone(),
                Session {
                    username: user.username.clone(),
                    client_id: client_id.to_string(),
                    auth_time,
                },
            );
            answer["refresh_token"] = token.into();
        }
        drop(state);
        Reply::json(200, &answer)
    }

    fn userinfo(&self, request: &Request) -> Reply {
        let token = request
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap_or_default();
        let user = self.lock().access.get(token).map(|(u, _)| u.clone());
        match user.and_then(|u| self.users.get(&u)) {
            Some((u, _)) => Reply::json(200, &serde_json::Value::Object(self.claims(u))),
            None => {
                let mut r =
                    Reply::oauth_error(401, "invalid_token", "unknown or expired access token");
                r.headers
                    .push(("www-authenticate", "Bearer error=\"invalid_token\"".into()));
                r
            }
        }
    }

    /// What ends codes, access tokens and sessions, and forgets old failed logins: run first
    /// in every request ([`Provider::handle`]), so nothing expired is ever found after it.
    fn prune(&self, now: u64) {
        let mut s = self.lock();
        s.codes.retain(|_, g| g.expires >= now);
        s.access.retain(|_, (_, exp)| *exp >= now);
        s.refresh
            .retain(|_, session| session.auth_time + SESSION_LIFETIME >= now);
        s.failures.retain(|_, attempts| {
            attempts.retain(|a| a.pending || a.at + FAILURE_WINDOW > now);
            !attempts.is_empty()
        });
    }

    /// 32 random bytes, base64url: a code or token. A failure of the random source is an
    /// error (answered 500), never a predictable value.
    fn random(&self) -> Result<String, Reply> {
        let mut b = [0u8; 32];
        self.rng.fill(&mut b).map_err(|_| {
            eprintln!("the random source failed: no code or token issued");
            Reply::oauth_error(500, "server_error", "the random source failed")
        })?;
        Ok(B64URL.encode(b))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Constant-time equality.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn sep(uri: &str) -> char {
    if uri.contains('?') { '&' } else { '?' }
}

/// Decodes a query or form body; a repeated key keeps its first value.
pub fn decode(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(text.as_bytes()) {
        out.entry(k.into_owned()).or_insert_with(|| v.into_owned());
    }
    out
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn error_page(status: u16, why: &str) -> Reply {
    Reply::html(
        status,
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Error</title></head>\n\
             <body><h1>Cannot log in</h1><p>{}</p></body></html>\n",
            escape(why)
        ),
    )
}

#[cfg(test)]
pub(crate) mod tests;
