//! A cluster whose API servers trust an OpenID Connect issuer (`oi cluster inject
//! --oidc-*`): a real OIDC provider (oauth2-mock-server, over TLS from a CA of the test's,
//! on the set's bridge) issues an ID token; `kubectl auth whoami` with it is answered as that
//! user by the tenant's API server (the stand-in validating it as kube-apiserver does:
//! discovery, JWKS, issuer, audience, expiry, claims). A token of another issuer, and one of
//! ours for another client, are refused.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oi_e2e::{
    LocalSet, World, admin_kubeconfig, inject_cluster_with, prerequisites, reconcile_until_ready,
};

const TEST: &str = "an_oidc_id_token_is_answered_as_its_user_and_others_are_refused";
const CLIENT: &str = "kubernetes";

/// Where scripts/setup.sh installs the provider.
fn provider_cli() -> PathBuf {
    oi_testsupport::workspace_root()
        .join(".tools/npm/node_modules/oauth2-mock-server/dist/oauth2-mock-server.mjs")
}

/// A running provider, killed when dropped.
struct Provider {
    child: Child,
    issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    /// Starts oauth2-mock-server on `ip:port` serving TLS with `cert`/`key`; waits (polling,
    /// at most 30 s) for its discovery document.
    fn start(ip: &str, port: u16, cert: &Path, key: &Path, ca: &Path, log: &Path) -> Provider {
        let port_text = port.to_string();
        let log_file = std::fs::File::create(log).unwrap();
        let child = Command::new("node")
            .arg(provider_cli())
            .args(["-a", ip, "-p", &port_text, "-c"])
            .arg(cert)
            .arg("-k")
            .arg(key)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let provider = Provider {
            child,
            issuer: format!("https://{ip}:{port}"),
        };
        wait_for_issuer(&provider.issuer, ca, Duration::from_secs(30), Some(log));
        provider
    }

    /// An ID token for `client` (the password grant: its ID token names the client in
    /// `aud`; oauth2-mock-server's user is `johndoe` whatever the credentials).
    fn id_token(&self, ca: &Path, client: &str) -> String {
        self.password_grant(ca, client, "alice", "unused")
    }

    /// The ID token of the password grant for `user`.
    fn password_grant(&self, ca: &Path, client: &str, user: &str, password: &str) -> String {
        let out = curl(
            ca,
            &[
                "-d",
                "grant_type=password",
                "-d",
                &format!("username={user}"),
                "-d",
                &format!("password={password}"),
                "-d",
                &format!("client_id={client}"),
                "-d",
                "scope=openid",
                &format!("{}/token", self.issuer),
            ],
        );
        let answer: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        answer["id_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no id_token: {out}"))
            .to_string()
    }
}

/// `curl -sS --max-time 10 --cacert CA ARGS...`.
fn curl_output(ca: &Path, args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// What curl printed, stdout then stderr, whatever its status.
fn curl(ca: &Path, args: &[&str]) -> String {
    let out = curl_output(ca, args);
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA, and a serving certificate for `ip` signed by it.
fn certificates(dir: &Path, ip: &str) -> (PathBuf, PathBuf, PathBuf) {
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "1", "-subj", "/CN=oidc-test-ca"];
    ca.extend(ec);
    let (ca_key, ca_crt) = (p("ca.key"), p("ca.crt"));
    ca.extend(["-keyout", &ca_key, "-out", &ca_crt]);
    openssl(&ca);
    let (key, csr, crt, ext) = (p("idp.key"), p("idp.csr"), p("idp.crt"), p("idp.ext"));
    std::fs::write(
        &ext,
        format!("subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
    )
    .unwrap();
    let mut req = vec!["req", "-subj", "/CN=idp"];
    req.extend(ec);
    req.extend(["-keyout", &key, "-out", &csr]);
    openssl(&req);
    openssl(&[
        "x509", "-req", "-in", &csr, "-CA", &ca_crt, "-CAkey", &ca_key, "-days", "1", "-extfile",
        &ext, "-out", &crt,
    ]);
    (
        PathBuf::from(ca_crt),
        PathBuf::from(crt),
        PathBuf::from(key),
    )
}

/// `kubectl auth whoami` as the bearer of `token` (no client certificate), at the server and
/// with the CA of `admin`'s kubeconfig.
fn whoami(admin: &Path, token: &str) -> std::process::Output {
    let config: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(admin).unwrap()).unwrap();
    let cluster = &config["clusters"][0]["cluster"];
    let kubeconfig = admin.with_file_name("token.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
        cluster["server"].as_str().unwrap(),
        cluster["certificate-authority-data"].as_str().unwrap(),
    );
    std::fs::write(&kubeconfig, text).unwrap();
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--request-timeout", "20s", "auth", "whoami", "-o", "json"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A local set (`private` private hypervisors and one public), and certificates for OIDC
/// providers listening on its bridge (the gateway address).
struct Bridge {
    set: LocalSet,
    dir: tempfile::TempDir,
    gateway: String,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Bridge {
    /// `None` (the test says why) when what `test` needs is missing: root and the local set's
    /// parts, node and oauth2-mock-server.
    fn set_up(test: &str, name: &str, private: usize) -> Option<Bridge> {
        if !prerequisites(test)
            || !oi_testsupport::require(
                test,
                &format!(
                    "node and the OIDC provider {} (scripts/setup.sh installs it)",
                    provider_cli().display()
                ),
                provider_cli().is_file() && Command::new("node").arg("--version").output().is_ok(),
            )
        {
            return None;
        }
        let set = LocalSet::create(name, private, 1, false).unwrap();
        let gateway = set.state().unwrap().gateway.to_string();
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = certificates(dir.path(), &gateway);
        Some(Bridge {
            set,
            dir,
            gateway,
            ca,
            cert,
            key,
        })
    }

    /// Cluster c1, `replicas` control plane replicas, trusting `issuer` for [`CLIENT`]
    /// (`oi cluster inject --oidc-*`), reconciled until ready: the run and its admin
    /// kubeconfig.
    fn cluster_trusting(&self, issuer: &Provider, replicas: u32) -> (oi_e2e::Run, PathBuf) {
        let injected = inject_cluster_with(
            &self.set.manifests,
            "c1",
            &[
                "--control-plane-replicas",
                &replicas.to_string(),
                "--oidc-issuer-url",
                &issuer.issuer,
                "--oidc-client-id",
                CLIENT,
                "--oidc-ca-file",
                self.ca.to_str().unwrap(),
            ],
        )
        .unwrap();
        let (run, _, _) = reconcile_until_ready(&injected, 3).unwrap();
        let world = World::parse(&run.stdout).unwrap();
        let admin = admin_kubeconfig(&world, "c1", self.dir.path()).unwrap();
        (run, admin)
    }

    /// An oauth2-mock-server on the bridge, on a free port, its log in `log`.
    fn provider(&self, log: &str) -> Provider {
        Provider::start(
            &self.gateway,
            oi_testsupport::free_loopback_port(),
            &self.cert,
            &self.key,
            &self.ca,
            &self.dir.path().join(log),
        )
    }
}

#[test]
fn an_oidc_id_token_is_answered_as_its_user_and_others_are_refused() {
    let Some(bridge) = Bridge::set_up(TEST, "oidc", 1) else {
        return;
    };
    let ca = bridge.ca.as_path();
    let ours = bridge.provider("ours.log");
    let theirs = bridge.provider("theirs.log");

    let (_, admin) = bridge.cluster_trusting(&ours, 1);

    // Our issuer's token for our client: that user, as kube-apiserver names it (the issuer
    // as prefix, the `sub` claim), among the authenticated.
    let token = ours.id_token(ca, CLIENT);
    let out = whoami(&admin, &token);
    assert!(out.status.success(), "{out:?}");
    let review: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        review["status"]["userInfo"]["username"],
        format!("{}#johndoe", ours.issuer),
        "{review}"
    );
    assert!(
        review["status"]["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("system:authenticated")),
        "{review}"
    );

    // Another issuer's token, and ours for another client: refused.
    for (what, token) in [
        ("another issuer", theirs.id_token(ca, CLIENT)),
        ("another client", ours.id_token(ca, "dashboard")),
    ] {
        let out = whoami(&admin, &token);
        assert!(!out.status.success(), "{what}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
            "{what}: {out:?}"
        );
    }
    drop(bridge);
}

const SIP_TEST: &str = "a_sip_clusters_oidc_provider_logs_users_into_our_cluster";
/// RFC 7636 appendix B: a PKCE verifier and its S256 challenge.
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const REDIRECT: &str = "http://localhost:8000";
const OIDC_PORT: u16 = 30443;

/// `curl` that fails the test when curl itself fails (not on an HTTP error status).
fn curl_ok(ca: &Path, args: &[&str]) -> String {
    let out = curl_output(ca, args);
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The authorization code flow as a browser and kubelogin run it: the login form, the
/// credentials posted, the code from the redirect exchanged with the PKCE verifier. `Err`:
/// the login's HTTP status and page when it is refused.
fn code_flow(issuer: &str, ca: &Path, user: &str, password: &str) -> Result<Tokens, String> {
    let request = [
        ("client_id", CLIENT),
        ("redirect_uri", REDIRECT),
        ("response_type", "code"),
        ("scope", "openid email groups"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("state", "e2e-state"),
    ];
    let mut get = vec!["-G".to_string(), format!("{issuer}/auth")];
    let mut post = vec![
        "-o".to_string(),
        "-".to_string(),
        "-w".to_string(),
        "\n%{http_code} %{redirect_url}".to_string(),
        format!("{issuer}/auth"),
    ];
    for (k, v) in request {
        for args in [&mut get, &mut post] {
            args.push("--data-urlencode".into());
            args.push(format!("{k}={v}"));
        }
    }
    let page = curl_ok(ca, &get.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(page.contains("name=\"password\""), "no login form: {page}");
    for (k, v) in [("username", user), ("password", password)] {
        post.push("--data-urlencode".into());
        post.push(format!("{k}={v}"));
    }
    let out = curl_ok(ca, &post.iter().map(String::as_str).collect::<Vec<_>>());
    let (body, last) = out.rsplit_once('\n').unwrap();
    let (status, location) = last.split_once(' ').unwrap();
    if status != "303" {
        return Err(format!("{status} {body}"));
    }
    // curl writes the location normalized (`http://localhost:8000/?…`).
    let query = location
        .strip_prefix(REDIRECT)
        .map(|rest| rest.trim_start_matches('/'))
        .and_then(|rest| rest.strip_prefix('?'))
        .unwrap_or_else(|| panic!("redirected elsewhere: {location}"));
    let params: std::collections::BTreeMap<String, String> =
        form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
    assert_eq!(params["state"], "e2e-state");
    assert_eq!(params["iss"], issuer);
    let tokens = curl_ok(
        ca,
        &[
            "--data-urlencode",
            "grant_type=authorization_code",
            "--data-urlencode",
            &format!("code={}", params["code"]),
            "--data-urlencode",
            &format!("redirect_uri={REDIRECT}"),
            "--data-urlencode",
            &format!("client_id={CLIENT}"),
            "--data-urlencode",
            &format!("code_verifier={VERIFIER}"),
            &format!("{issuer}/token"),
        ],
    );
    let answer: serde_json::Value =
        serde_json::from_str(&tokens).unwrap_or_else(|e| panic!("{e}: {tokens}"));
    Ok(Tokens::of(&answer, &tokens))
}

/// What the token endpoint answered.
#[derive(Debug)]
struct Tokens {
    id: String,
    refresh: String,
}

impl Tokens {
    fn of(answer: &serde_json::Value, text: &str) -> Tokens {
        let get = |k: &str| {
            answer[k]
                .as_str()
                .unwrap_or_else(|| panic!("no {k}: {text}"))
                .to_string()
        };
        Tokens {
            id: get("id_token"),
            refresh: get("refresh_token"),
        }
    }

    /// The refresh grant: the next ID and refresh tokens.
    fn refreshed(&self, issuer: &str, ca: &Path) -> Tokens {
        let out = curl_ok(
            ca,
            &[
                "--data-urlencode",
                "grant_type=refresh_token",
                "--data-urlencode",
                &format!("refresh_token={}", self.refresh),
                "--data-urlencode",
                &format!("client_id={CLIENT}"),
                &format!("{issuer}/token"),
            ],
        );
        let answer: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        Tokens::of(&answer, &out)
    }
}

/// Waits (polling, at most `within`) until `issuer` answers its discovery document, which
/// must name it; `log`, the provider's, is shown if it does not.
fn wait_for_issuer(issuer: &str, ca: &Path, within: Duration, log: Option<&Path>) {
    let url = format!("{issuer}/.well-known/openid-configuration");
    let deadline = Instant::now() + within;
    loop {
        let out = curl(ca, &[&url]);
        if out.contains("jwks_uri") {
            assert!(out.contains(issuer), "{out}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not answer within {within:?}: {out}\n{}",
            log.map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Another provider (ours, run here on loopback with its own CA and users, its password
/// grant on): an issuer the cluster does not trust. With its CA.
fn another_issuer(dir: &Path, users: &str) -> (Provider, PathBuf) {
    let (ca, cert, key) = certificates(dir, "127.0.0.1");
    let port = oi_testsupport::free_loopback_port();
    let issuer = format!("https://127.0.0.1:{port}");
    std::fs::write(dir.join("users.yaml"), users).unwrap();
    let config = serde_json::json!({
        "issuer": issuer,
        "listen": format!("127.0.0.1:{port}"),
        "tlsCertificate": cert,
        "tlsPrivateKey": key,
        "signingKey": dir.join("signing-key.pem"),
        "users": dir.join("users.yaml"),
        "clients": [{"id": CLIENT, "redirectURIs": [REDIRECT]}],
        "passwordGrant": true,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let log = dir.join("provider.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let child = Command::new(oi_e2e::binary("oi-oidc-provider").unwrap())
        .args(["serve", "--config"])
        .arg(dir.join("config.json"))
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap();
    let provider = Provider { child, issuer };
    wait_for_issuer(&provider.issuer, &ca, Duration::from_secs(60), Some(&log));
    (provider, ca)
}

fn sip_cluster(hash: &str) -> String {
    let users = format!(
        "- username: alice\n  email: alice@example.com\n  groups: [platform-admins]\n  passwordHash: '{hash}'\n"
    );
    format!(
        "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: t1, namespace: default}}\nspec:\n  clusterRef: {{name: c1}}\n  nodes: {{}}\n  services:\n    oidcProvider:\n    - {{image: 'dex:v2', nodePort: {OIDC_PORT}, usersSecret: t1-users}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: t1-users, namespace: default}}\nstringData:\n  users.yaml: |\n{}",
        users
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    )
}

/// A SIPCluster whose `clusterRef` names one of our clusters asks for an OIDC provider: we
/// run it (`oi-oidc-provider`, TLS from the SIPCluster's own CA) on the public hypervisor, and
/// the cluster's API servers are configured to trust it in the same run. A user logs in
/// through the authorization code flow with PKCE, and `kubectl auth whoami` with the ID token
/// is answered as that user, in their groups; a wrong password gets no code; a token of
/// another issuer is refused; the SIPCluster deleted, the API servers trust it no more.
#[test]
fn a_sip_clusters_oidc_provider_logs_users_into_our_cluster() {
    if !prerequisites(SIP_TEST)
        || !oi_testsupport::require(
            SIP_TEST,
            "openssl and curl (scripts/setup.sh installs them)",
            ["/usr/bin/openssl", "/usr/bin/curl"]
                .iter()
                .all(|p| Path::new(p).is_file()),
        )
    {
        return;
    }
    let set = LocalSet::create("sipoidc", 1, 1, false).unwrap();
    let public = set.public_ip().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hash = oi_e2e::oi(
        &["sipcluster", "hash-password", "--iterations", "10000"],
        "s3cret\n",
    )
    .unwrap()
    .ok("oi sipcluster hash-password")
    .unwrap()
    .stdout;
    let hash = hash.trim();
    let manifests = format!(
        "{}---\n{}",
        inject_cluster_with(&set.manifests, "c1", &["--control-plane-replicas", "1"]).unwrap(),
        sip_cluster(hash)
    );
    let (run, _, _) = reconcile_until_ready(&manifests, 3).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let issuer = format!("https://{public}:{OIDC_PORT}");
    assert!(
        run.stderr.contains(&format!(
            "cluster default/c1's API servers trust it ({issuer})"
        )),
        "{}",
        run.stderr
    );
    let sip = world.of_kind("SIPCluster").next().unwrap();
    let provider = &oi_e2e::at(sip, &["status", "oidcProviders"]).unwrap()[0];
    assert_eq!(provider["issuerURL"].as_str(), Some(issuer.as_str()));
    let ca = dir.path().join("sip-ca.crt");
    std::fs::write(
        &ca,
        provider["certificateAuthority"]["certificate"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let cluster = world.require_cluster("c1").unwrap();
    assert_eq!(
        oi_e2e::at(cluster, &["spec", "apiServer", "oidc", "issuerURL"]).and_then(|v| v.as_str()),
        Some(issuer.as_str())
    );
    let admin = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    wait_for_issuer(&issuer, &ca, Duration::from_secs(60), None);

    // Logged in: that user, in their groups; a refreshed ID token works the same.
    let tokens = code_flow(&issuer, &ca, "alice", "s3cret").unwrap();
    let refreshed = tokens.refreshed(&issuer, &ca);
    assert_ne!(refreshed.refresh, tokens.refresh);
    let token = refreshed.id;
    let out = whoami(&admin, &token);
    assert!(out.status.success(), "{out:?}");
    let review: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], format!("{issuer}#alice"), "{review}");
    let groups = user["groups"].as_array().unwrap();
    for g in ["platform-admins", "system:authenticated"] {
        assert!(groups.contains(&serde_json::json!(g)), "{review}");
    }

    // A wrong password gets no code.
    let refused = code_flow(&issuer, &ca, "alice", "guess").unwrap_err();
    assert!(
        refused.starts_with("401") && refused.contains("invalid username or password"),
        "{refused}"
    );

    // Another issuer's token (the same user, client and software): refused.
    let other_dir = dir.path().join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let users = format!("- username: alice\n  passwordHash: '{hash}'\n");
    let (other, other_ca) = another_issuer(&other_dir, &users);
    let foreign = other.password_grant(&other_ca, CLIENT, "alice", "s3cret");
    let out = whoami(&admin, &foreign);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{out:?}"
    );

    // Deleted: the provider goes, and the API servers no longer trust its tokens (their
    // authentication configuration rewritten and read again, none restarted).
    assert_eq!(trusted_issuers(&set), std::slice::from_ref(&issuer));
    let api_servers = set.container_starts("kube-apiserver").unwrap();
    let deleted = oi_e2e::oi(
        &[
            "sipcluster",
            "delete",
            "--name",
            "t1",
            "--namespace",
            "default",
        ],
        &run.stdout,
    )
    .unwrap()
    .ok("oi sipcluster delete")
    .unwrap();
    let (gone, _, _) = reconcile_until_ready(&deleted.stdout, 3).unwrap();
    assert!(
        gone.stderr.contains("removed pod t1-oidc-provider-0"),
        "{}",
        gone.stderr
    );
    let world = World::parse(&gone.stdout).unwrap();
    let cluster = world.require_cluster("c1").unwrap();
    let left = oi_e2e::at(cluster, &["spec", "apiServer", "oidc", "issuerURL"]);
    assert!(left.is_none(), "still trusted: {left:?}");
    assert!(trusted_issuers(&set).is_empty());
    whoami_until(&admin, &token, false);
    assert_eq!(
        set.container_starts("kube-apiserver").unwrap(),
        api_servers,
        "an API server restarted"
    );
    drop(set);
}

/// How long a changed authentication configuration may take to be in force: the stand-in
/// reads it again every second; kube-apiserver checks it periodically too.
const RELOAD_WITHIN: Duration = Duration::from_secs(90);

/// Polls `kubectl auth whoami` with `token` (at most [`RELOAD_WITHIN`]) until it is
/// accepted (`accepted`) or refused as Unauthorized; returns the last answer.
fn whoami_until(admin: &Path, token: &str, accepted: bool) -> std::process::Output {
    let deadline = Instant::now() + RELOAD_WITHIN;
    loop {
        let out = whoami(admin, token);
        let refused = String::from_utf8_lossy(&out.stderr).contains("Unauthorized");
        if (accepted && out.status.success()) || (!accepted && refused) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after {RELOAD_WITHIN:?}: {out:?}",
            if accepted { "refused" } else { "accepted" }
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The issuer URLs the API servers' authentication configurations name, on every
/// hypervisor of the set (sorted, each once).
fn trusted_issuers(set: &LocalSet) -> Vec<String> {
    let mut urls: Vec<String> = set
        .state()
        .unwrap()
        .hypervisors
        .iter()
        .flat_map(|h| oi_e2e::files_under(&set.etc_oneinfra(&h.name)))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n == "authentication-config.yaml")
        })
        .flat_map(|p| {
            let config: serde_json::Value =
                serde_yaml_ng::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            assert_eq!(
                config["kind"],
                "AuthenticationConfiguration",
                "{}",
                p.display()
            );
            config["jwt"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["issuer"]["url"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    urls.sort();
    urls.dedup();
    urls
}

const SECOND_TEST: &str = "a_second_issuer_is_trusted_and_let_go_without_restarting_an_api_server";

/// A cluster trusting one issuer (`oi cluster inject --oidc-*`) is told to trust a second
/// (`oi cluster trust-issuer`), then to let it go (`oi cluster distrust-issuer`): each time
/// only the API servers' authentication configuration changes, which they read again, so
/// no API server container restarts (ids and start times unchanged); the second issuer's
/// tokens are answered as their users, then refused; the first's are answered throughout.
#[test]
fn a_second_issuer_is_trusted_and_let_go_without_restarting_an_api_server() {
    let Some(bridge) = Bridge::set_up(SECOND_TEST, "oidc2", 2) else {
        return;
    };
    let (set, ca) = (&bridge.set, bridge.ca.as_path());
    let (first, second) = (bridge.provider("first.log"), bridge.provider("second.log"));
    let ca_text = ca.to_str().unwrap();
    let (run, admin) = bridge.cluster_trusting(&first, 2);
    let first_token = first.id_token(ca, CLIENT);
    let second_token = second.id_token(ca, "console");
    whoami_until(&admin, &first_token, true);
    whoami_until(&admin, &second_token, false);
    let api_servers = set.container_starts("kube-apiserver").unwrap();
    assert_eq!(api_servers.len(), 2, "{api_servers:?}");

    // Trusted: its token (for its own audience, its own prefix) is answered as its user.
    let trusted = oi_e2e::oi(
        &[
            "cluster",
            "trust-issuer",
            "--cluster",
            "c1",
            "--issuer-url",
            &second.issuer,
            "--client-id",
            CLIENT,
            "--audience",
            "console",
            "--username-prefix",
            "org:",
            "--ca-file",
            ca_text,
        ],
        &run.stdout,
    )
    .unwrap()
    .ok("oi cluster trust-issuer")
    .unwrap();
    let (both, _, _) = reconcile_until_ready(&trusted.stdout, 3).unwrap();
    assert!(
        both.stderr.contains("replaced 0"),
        "a pod was replaced: {}",
        both.stderr
    );
    let mut expected = vec![first.issuer.clone(), second.issuer.clone()];
    expected.sort();
    assert_eq!(trusted_issuers(set), expected);
    let out = whoami_until(&admin, &second_token, true);
    let review: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        review["status"]["userInfo"]["username"], "org:johndoe",
        "{review}"
    );
    whoami_until(&admin, &first_token, true);
    assert_eq!(
        set.container_starts("kube-apiserver").unwrap(),
        api_servers,
        "an API server restarted when an issuer was added"
    );

    // Let go: refused again; the first still answered; still no restart.
    let distrusted = oi_e2e::oi(
        &[
            "cluster",
            "distrust-issuer",
            "--cluster",
            "c1",
            "--issuer-url",
            &second.issuer,
        ],
        &both.stdout,
    )
    .unwrap()
    .ok("oi cluster distrust-issuer")
    .unwrap();
    let (one, _, _) = reconcile_until_ready(&distrusted.stdout, 3).unwrap();
    assert!(one.stderr.contains("replaced 0"), "{}", one.stderr);
    assert_eq!(trusted_issuers(set), std::slice::from_ref(&first.issuer));
    whoami_until(&admin, &second_token, false);
    whoami_until(&admin, &first_token, true);
    assert_eq!(
        set.container_starts("kube-apiserver").unwrap(),
        api_servers,
        "an API server restarted when an issuer was let go"
    );
    drop(bridge);
}
