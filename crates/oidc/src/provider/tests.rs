use base64::Engine as _;
use oi_api::oidc::{ProviderClient, ProviderConfig, parse_users};

use super::*;

const NOW: u64 = 1_800_000_000;
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
// RFC 7636 appendix B: S256 of the verifier above.
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const REDIRECT: &str = "http://localhost:8000";

fn provider(dir: &std::path::Path, password_grant: bool) -> Provider {
    provider_with(
        dir,
        password_grant,
        oi_api::oidc::MIN_ITERATIONS,
        Box::new(SystemRandom::new()),
    )
}

/// A provider whose users' hashes cost `iterations`, drawing from `rng`: users alice and bob,
/// password `s3cret`; client `kubernetes`.
pub(crate) fn provider_with(
    dir: &std::path::Path,
    password_grant: bool,
    iterations: u32,
    rng: Box<dyn Random>,
) -> Provider {
    let hash = crate::password::hash("s3cret", iterations).unwrap();
    let users = parse_users(&format!(
        "- username: alice\n  email: alice@example.com\n  groups: [admins, dev]\n  passwordHash: '{hash}'\n- username: bob\n  passwordHash: '{hash}'\n"
    ))
    .unwrap();
    let config = ProviderConfig {
        issuer: "https://192.0.2.1:30443".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        tls_certificate: String::new(),
        tls_private_key: String::new(),
        signing_key: String::new(),
        users: String::new(),
        clients: vec![ProviderClient {
            id: "kubernetes".into(),
            redirect_uris: vec![REDIRECT.into(), "http://localhost:18000/cb?x=1".into()],
        }],
        password_grant,
        token_lifetime_seconds: 600,
    };
    let key = SigningKey::load_or_create(&dir.join("key.pem")).unwrap();
    Provider::with_random(config, users, key, rng).unwrap()
}

/// A form of `pairs`.
fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn auth_params(redirect: &str) -> Vec<(String, String)> {
    form(&[
        ("client_id", "kubernetes"),
        ("redirect_uri", redirect),
        ("response_type", "code"),
        ("scope", "openid email groups"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("state", "st<&>"),
        ("nonce", "n-1"),
    ])
}

fn query(params: &[(String, String)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        q.append_pair(k, v);
    }
    q.finish()
}

fn get(p: &Provider, path_and_query: &str, now: u64) -> Reply {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    p.handle(
        &Request {
            method: "GET".into(),
            path: path.into(),
            query: query.into(),
            ..Request::default()
        },
        now,
    )
}

fn post(p: &Provider, path: &str, form: Vec<(String, String)>, now: u64) -> Reply {
    post_from(p, path, form, None, now)
}

fn post_from(
    p: &Provider,
    path: &str,
    form: Vec<(String, String)>,
    peer: Option<std::net::IpAddr>,
    now: u64,
) -> Reply {
    p.handle(
        &Request {
            method: "POST".into(),
            path: path.into(),
            form,
            peer,
            ..Request::default()
        },
        now,
    )
}

fn login(p: &Provider, user: &str, password: &str, now: u64) -> Reply {
    login_from(p, user, password, None, now)
}

/// A login through the form from client address `peer`.
fn login_from(p: &Provider, user: &str, password: &str, peer: Option<&str>, now: u64) -> Reply {
    let mut form = auth_params(REDIRECT);
    form.push(("username".into(), user.into()));
    form.push(("password".into(), password.into()));
    post_from(p, "/auth", form, peer.map(|a| a.parse().unwrap()), now)
}

fn code_of(reply: &Reply) -> String {
    assert_eq!(
        reply.status,
        303,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let location = reply.header("location").unwrap();
    let (base, q) = location.split_once('?').unwrap();
    assert_eq!(base, REDIRECT);
    let q = decode(q);
    assert_eq!(q["state"], "st<&>");
    assert_eq!(q["iss"], "https://192.0.2.1:30443");
    q["code"].clone()
}

fn exchange(p: &Provider, code: &str, verifier: &str, now: u64) -> Reply {
    post(
        p,
        "/token",
        form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("client_id", "kubernetes"),
            ("code_verifier", verifier),
        ]),
        now,
    )
}

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_slice(&reply.body).unwrap()
}

fn payload(jwt: &str) -> serde_json::Value {
    let part = jwt.split('.').nth(1).unwrap();
    serde_json::from_slice(&B64URL.decode(part).unwrap()).unwrap()
}

#[test]
fn discovery_and_keys_describe_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), false);
    let d = json(&get(&p, "/.well-known/openid-configuration", NOW));
    assert_eq!(d["issuer"], "https://192.0.2.1:30443");
    assert_eq!(d["jwks_uri"], "https://192.0.2.1:30443/keys");
    assert_eq!(d["token_endpoint"], "https://192.0.2.1:30443/token");
    assert_eq!(
        d["grant_types_supported"],
        serde_json::json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(
        d["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    let keys = json(&get(&p, "/keys", NOW));
    assert_eq!(keys["keys"][0]["kid"], p.kid());
    assert_eq!(keys["keys"][0]["alg"], "ES256");
    assert_eq!(get(&p, "/nothing", NOW).status, 404);
}

#[test]
fn the_code_flow_issues_a_signed_id_token_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), false);
    let page = get(&p, &format!("/auth?{}", query(&auth_params(REDIRECT))), NOW);
    assert_eq!(page.status, 200);
    let html = String::from_utf8(page.body.clone()).unwrap();
    // The request is carried, escaped, in the form.
    assert!(html.contains("value=\"st&lt;&amp;&gt;\""), "{html}");
    assert!(html.contains("name=\"password\" type=\"password\""));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));

    let code = code_of(&login(&p, "alice", "s3cret", NOW));
    let tokens = exchange(&p, &code, VERIFIER, NOW + 5);
    assert_eq!(
        tokens.status,
        200,
        "{}",
        String::from_utf8_lossy(&tokens.body)
    );
    assert_eq!(tokens.header("cache-control"), Some("no-store"));
    let t = json(&tokens);
    assert_eq!(t["token_type"], "Bearer");
    assert_eq!(t["expires_in"], 600);
    let id = t["id_token"].as_str().unwrap();
    assert!(p.key.verify(id));
    let claims = payload(id);
    assert_eq!(claims["iss"], "https://192.0.2.1:30443");
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["aud"], "kubernetes");
    assert_eq!(claims["email"], "alice@example.com");
    assert_eq!(claims["email_verified"], true);
    assert_eq!(claims["groups"], serde_json::json!(["admins", "dev"]));
    assert_eq!(claims["nonce"], "n-1");
    assert_eq!(claims["iat"], NOW + 5);
    assert_eq!(claims["exp"], NOW + 5 + 600);
    assert_eq!(claims["auth_time"], NOW);

    // Userinfo answers the access token.
    let info = p.handle(
        &Request {
            method: "GET".into(),
            path: "/userinfo".into(),
            authorization: Some(format!("Bearer {}", t["access_token"].as_str().unwrap())),
            ..Request::default()
        },
        NOW + 6,
    );
    assert_eq!(json(&info)["sub"], "alice");
    assert_eq!(get(&p, "/userinfo", NOW).status, 401);

    // The code is single use.
    let again = exchange(&p, &code, VERIFIER, NOW + 6);
    assert_eq!(again.status, 400);
    assert_eq!(json(&again)["error"], "invalid_grant");
}

#[test]
fn a_code_needs_its_verifier_client_and_redirect_and_expires() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), false);
    let wrong = "x".repeat(43);
    let code = code_of(&login(&p, "alice", "s3cret", NOW));
    assert_eq!(
        json(&exchange(&p, &code, &wrong, NOW))["error"],
        "invalid_grant"
    );
    // A failed exchange spends the code too (no guessing verifiers against one code).
    assert_eq!(exchange(&p, &code, VERIFIER, NOW).status, 400);

    let code = code_of(&login(&p, "alice", "s3cret", NOW));
    assert_eq!(
        exchange(&p, &code, VERIFIER, NOW + CODE_LIFETIME + 1).status,
        400
    );

    let code = code_of(&login(&p, "alice", "s3cret", NOW));
    let other_redirect = post(
        &p,
        "/token",
        form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", "http://localhost:18000/cb?x=1"),
            ("client_id", "kubernetes"),
            ("code_verifier", VERIFIER),
        ]),
        NOW,
    );
    assert_eq!(json(&other_redirect)["error"], "invalid_grant");

    let unknown_client = post(
        &p,
        "/token",
        form(&[("grant_type", "authorization_code"), ("client_id", "x")]),
        NOW,
    );
    assert_eq!(unknown_client.status, 401);
    assert_eq!(json(&unknown_client)["error"], "invalid_client");
}

#[test]
fn bad_requests_never_redirect_to_unregistered_uris() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), false);
    let mut params = auth_params("http://evil.example/cb");
    let r = get(&p, &format!("/auth?{}", query(&params)), NOW);
    assert_eq!(r.status, 400);
    assert!(r.header("location").is_none());
    assert!(String::from_utf8_lossy(&r.body).contains("is not registered"));

    params = auth_params(REDIRECT);
    params.retain(|(k, _)| k != "code_challenge");
    let r = get(&p, &format!("/auth?{}", query(&params)), NOW);
    assert_eq!(r.status, 303);
    let location = r.header("location").unwrap();
    assert!(
        location.starts_with("http://localhost:8000?error=invalid_request"),
        "{location}"
    );
    assert!(location.contains("state=st%3C%26%3E"), "{location}");

    // A redirect URI with a query gets the error appended with &.
    let mut params = auth_params("http://localhost:18000/cb?x=1");
    params.retain(|(k, _)| k != "scope");
    let r = get(&p, &format!("/auth?{}", query(&params)), NOW);
    assert!(
        r.header("location")
            .unwrap()
            .starts_with("http://localhost:18000/cb?x=1&error=invalid_scope")
    );
}

#[test]
fn failures_lock_a_user_out_from_that_address_and_from_everywhere_only_when_many() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), false);
    let (a, b) = (Some("192.0.2.10"), Some("198.51.100.20"));
    for _ in 0..MAX_FAILURES {
        assert_eq!(login_from(&p, "alice", "wrong", a, NOW).status, 401);
    }
    // One address guessing locks alice out from there, not from elsewhere, and no one else.
    assert_eq!(login_from(&p, "alice", "s3cret", a, NOW + 1).status, 429);
    code_of(&login_from(&p, "alice", "s3cret", b, NOW + 1));
    code_of(&login_from(&p, "bob", "s3cret", a, NOW + 1));
    // Her login from b does not lift the lock on a.
    assert_eq!(login_from(&p, "alice", "s3cret", a, NOW + 2).status, 429);
    // Many addresses guessing together: once MAX_FAILURES_PER_USER failed, alice is refused
    // from everywhere, an address that never failed too.
    let mut failed = MAX_FAILURES;
    let mut host = 0;
    while failed < MAX_FAILURES_PER_USER {
        host += 1;
        let address = format!("203.0.113.{host}");
        for _ in 0..MAX_FAILURES.min(MAX_FAILURES_PER_USER - failed) {
            assert_eq!(
                login_from(&p, "alice", "wrong", Some(&address), NOW + 3).status,
                401
            );
            failed += 1;
        }
    }
    assert_eq!(login_from(&p, "alice", "s3cret", b, NOW + 4).status, 429);
    assert_eq!(
        login_from(&p, "alice", "s3cret", Some("203.0.113.250"), NOW + 4).status,
        429
    );
    code_of(&login_from(&p, "bob", "s3cret", b, NOW + 4));
    // The window passed: everyone may try again.
    code_of(&login_from(
        &p,
        "alice",
        "s3cret",
        a,
        NOW + 4 + FAILURE_WINDOW,
    ));
}

/// 50 wrong logins at once from one address (each password check a fifth of a second, so
/// they overlap): the limit holds, as each attempt is counted in the same lock section that
/// checks the limit, before its password is checked.
#[test]
fn fifty_concurrent_wrong_logins_get_only_the_limit_checked() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider_with(
        dir.path(),
        false,
        crate::password::DEFAULT_ITERATIONS,
        Box::new(SystemRandom::new()),
    );
    let address = Some("192.0.2.7");
    let start = std::sync::Barrier::new(50);
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let guesses: Vec<_> = (0..50)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    login_from(&p, "alice", "wrong", address, NOW).status
                })
            })
            .collect();
        guesses.into_iter().map(|g| g.join().unwrap()).collect()
    });
    let checked = statuses.iter().filter(|s| **s == 401).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(
        (checked, refused),
        (MAX_FAILURES, 50 - MAX_FAILURES),
        "{statuses:?}"
    );
    assert_eq!(p.password_checks(), (0, MAX_FAILURES as u64));
    // Locked from that address, the right password too; not from another.
    assert_eq!(login_from(&p, "alice", "s3cret", address, NOW).status, 429);
    code_of(&login_from(&p, "alice", "s3cret", Some("192.0.2.8"), NOW));
}

/// A success while other attempts from its address are still being checked takes back its
/// own attempt and the finished failures, not those still running.
#[test]
fn a_success_forgets_finished_failures_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), false);
    for _ in 0..MAX_FAILURES - 1 {
        assert_eq!(login(&p, "alice", "wrong", NOW).status, 401);
    }
    code_of(&login(&p, "alice", "s3cret", NOW));
    // The slate is clean: MAX_FAILURES more wrong guesses are checked before the lock.
    for _ in 0..MAX_FAILURES {
        assert_eq!(login(&p, "alice", "wrong", NOW).status, 401);
    }
    assert_eq!(login(&p, "alice", "s3cret", NOW).status, 429);
    // An attempt still being checked is counted and kept by a success beside it.
    let mut state = p.lock();
    state.failures.clear();
    state.failures.insert(
        "bob".into(),
        vec![Attempt {
            at: NOW,
            peer: None,
            id: u64::MAX,
            pending: true,
        }],
    );
    drop(state);
    code_of(&login(&p, "bob", "s3cret", NOW));
    let kept = p.lock().failures.get("bob").map(Vec::len);
    assert_eq!(
        kept,
        Some(1),
        "the attempt still being checked stays counted"
    );
}

/// A random source that gives `0` more fills, then fails.
struct Failing(std::sync::atomic::AtomicUsize);

impl Random for Failing {
    fn fill(&self, dest: &mut [u8]) -> Result<(), ring::error::Unspecified> {
        let left = self.0.load(Ordering::SeqCst);
        if left == 0 {
            return Err(ring::error::Unspecified);
        }
        self.0.store(left - 1, Ordering::SeqCst);
        dest.fill(7);
        Ok(())
    }
}

/// When the random source fails, no code or token is issued (a predictable one would be
/// anyone's): the login page and the token endpoint answer 500.
#[test]
fn a_failing_random_source_issues_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // One fill for the decoy salt, then failures.
    let p = provider_with(
        dir.path(),
        true,
        oi_api::oidc::MIN_ITERATIONS,
        Box::new(Failing(1.into())),
    );
    let r = login(&p, "alice", "s3cret", NOW);
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("location").is_none(), "no code handed out");
    assert!(String::from_utf8_lossy(&r.body).contains("random source failed"));
    assert!(p.lock().codes.is_empty());
    let r = post(
        &p,
        "/token",
        form(&[
            ("grant_type", "password"),
            ("client_id", "kubernetes"),
            ("username", "alice"),
            ("password", "s3cret"),
        ]),
        NOW,
    );
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(json(&r)["error"], "server_error");
    assert!(json(&r).get("access_token").is_none());
    assert!(p.lock().access.is_empty());
}

#[test]
fn wrong_passwords_are_refused_and_repeated_failures_lock_the_user_for_a_while() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), false);
    let r = login(&p, "alice", "wrong", NOW);
    assert_eq!(r.status, 401);
    assert!(String::from_utf8_lossy(&r.body).contains("invalid username or password"));
    assert_eq!(login(&p, "nobody", "s3cret", NOW).status, 401);
    for _ in 1..MAX_FAILURES {
        assert_eq!(login(&p, "alice", "wrong", NOW).status, 401);
    }
    // Locked: even the right password is refused, for alice only.
    let locked = login(&p, "alice", "s3cret", NOW + 1);
    assert_eq!(locked.status, 429);
    assert!(String::from_utf8_lossy(&locked.body).contains("too many failed logins"));
    code_of(&login(&p, "bob", "s3cret", NOW + 1));
    // After the window, alice logs in again.
    code_of(&login(&p, "alice", "s3cret", NOW + FAILURE_WINDOW + 1));
}

#[test]
fn the_password_grant_is_off_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let form = |password: &str| -> Vec<(String, String)> {
        form(&[
            ("grant_type", "password"),
            ("client_id", "kubernetes"),
            ("username", "bob"),
            ("password", password),
            ("scope", "openid"),
        ])
    };
    let off = provider(dir.path(), false);
    assert_eq!(
        json(&post(&off, "/token", form("s3cret"), NOW))["error"],
        "unsupported_grant_type"
    );
    let on = provider(dir.path(), true);
    let t = json(&post(&on, "/token", form("s3cret"), NOW));
    let claims = payload(t["id_token"].as_str().unwrap());
    assert_eq!(claims["sub"], "bob");
    assert!(claims.get("email").is_none());
    assert_eq!(
        json(&post(&on, "/token", form("nope"), NOW))["error"],
        "invalid_grant"
    );
}

#[test]
fn inconsistent_configurations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = || SigningKey::load_or_create(&dir.path().join("k.pem")).unwrap();
    let good = || ProviderConfig {
        issuer: "https://a:1".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        tls_certificate: String::new(),
        tls_private_key: String::new(),
        signing_key: String::new(),
        users: String::new(),
        clients: vec![ProviderClient {
            id: "c".into(),
            redirect_uris: vec![REDIRECT.into()],
        }],
        password_grant: false,
        token_lifetime_seconds: 60,
    };
    assert!(Provider::new(good(), Vec::new(), key()).is_ok());
    let mut c = good();
    c.issuer = "http://a:1".into();
    assert!(
        Provider::new(c, Vec::new(), key())
            .err()
            .unwrap()
            .contains("https://")
    );
    let mut c = good();
    c.clients.clear();
    assert!(
        Provider::new(c, Vec::new(), key())
            .err()
            .unwrap()
            .contains("no client")
    );
    let mut c = good();
    c.clients[0].redirect_uris = vec!["localhost:8000".into()];
    assert!(
        Provider::new(c, Vec::new(), key())
            .err()
            .unwrap()
            .contains("redirect URI")
    );
}

fn refresh(p: &Provider, token: &str, client: &str, now: u64) -> Reply {
    post(
        p,
        "/token",
        form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", token),
            ("client_id", client),
        ]),
        now,
    )
}

#[test]
fn refresh_tokens_are_single_use_bound_to_their_client_and_end_with_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(dir.path(), true);
    let code = code_of(&login(&p, "alice", "s3cret", NOW));
    let first = json(&exchange(&p, &code, VERIFIER, NOW));
    let r1 = first["refresh_token"].as_str().unwrap().to_string();

    // A refresh gives a new ID token (same user and login time) and the next refresh token.
    let later = NOW + 3000;
    let second = refresh(&p, &r1, "kubernetes", later);
    assert_eq!(
        second.status,
        200,
        "{}",
        String::from_utf8_lossy(&second.body)
    );
    let second = json(&second);
    let claims = payload(second["id_token"].as_str().unwrap());
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["iat"], later);
    assert_eq!(claims["auth_time"], NOW);
    assert!(claims.get("nonce").is_none());
    let r2 = second["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(r1, r2);
    // The used one is refused, so is the next one for another client (and it is spent).
    assert_eq!(
        json(&refresh(&p, &r1, "kubernetes", later))["error"],
        "invalid_grant"
    );
    assert_eq!(
        json(&refresh(&p, &r2, "other", later))["error"],
        "invalid_client"
    );
    let r3 = json(&refresh(&p, &r2, "kubernetes", later))["refresh_token"]
        .as_str()
        .unwrap()
        .to_string();
    // A day after the login, the session is over.
    let over = refresh(&p, &r3, "kubernetes", NOW + SESSION_LIFETIME + 1);
    assert_eq!(json(&over)["error"], "invalid_grant");

    // The password grant gives no refresh token.
    let pw = post(
        &p,
        "/token",
        form(&[
            ("grant_type", "password"),
            ("client_id", "kubernetes"),
            ("username", "bob"),
            ("password", "s3cret"),
        ]),
        NOW,
    );
    assert!(json(&pw).get("refresh_token").is_none());
    let d = json(&get(&p, "/.well-known/openid-configuration", NOW));
    assert_eq!(
        d["grant_types_supported"],
        serde_json::json!(["authorization_code", "refresh_token", "password"])
    );
}
