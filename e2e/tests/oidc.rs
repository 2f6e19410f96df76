//! A cluster whose API servers trust an OpenID Connect issuer (`oi cluster inject
//! --oidc-*`): a real OIDC provider (oauth2-mock-server, over TLS from a CA of the test's,
//! on the set's bridge) issues an ID token; `kubectl auth whoami` with it is answered as that
//! user by the tenant's API server (the stand-in validating it as kube-apiserver does:
//! discovery, JWKS, issuer, audience, expiry, claims). A token of another issuer, and one of
//! ours for another client, are refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    /// Starts one on `ip:port` serving TLS with `cert`/`key`; waits (polling, at most 30 s)
    /// for its discovery document.
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
        let url = format!("{}/.well-known/openid-configuration", provider.issuer);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = curl(ca, &[&url]);
            if out.contains("jwks_uri") {
                assert!(out.contains(&provider.issuer), "{out}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the provider did not answer {url} within 30 s: {out}\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        provider
    }

    /// An ID token for `client` (the password grant: its ID token names the client in
    /// `aud`; the provider's user is `johndoe`).
    fn id_token(&self, ca: &Path, client: &str) -> String {
        let out = curl(
            ca,
            &[
                "-d",
                "grant_type=password",
                "-d",
                "username=alice",
                "-d",
                "password=unused",
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

fn curl(ca: &Path, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
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

#[test]
fn an_oidc_id_token_is_answered_as_its_user_and_others_are_refused() {
    if !prerequisites(TEST)
        || !oi_testsupport::require(
            TEST,
            &format!(
                "node and the OIDC provider {} (scripts/setup.sh installs it)",
                provider_cli().display()
            ),
            provider_cli().is_file() && Command::new("node").arg("--version").output().is_ok(),
        )
    {
        return;
    }
    let set = LocalSet::create("oidc", 1, 1, false).unwrap();
    let state = set.state().unwrap();
    let gateway = state.gateway.to_string();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path(), &gateway);
    let ours = Provider::start(
        &gateway,
        oi_testsupport::free_loopback_port(),
        &cert,
        &key,
        &ca,
        &dir.path().join("ours.log"),
    );
    let theirs = Provider::start(
        &gateway,
        oi_testsupport::free_loopback_port(),
        &cert,
        &key,
        &ca,
        &dir.path().join("theirs.log"),
    );

    let ca_text = ca.to_str().unwrap();
    let injected = inject_cluster_with(
        &set.manifests,
        "c1",
        &[
            "--oidc-issuer-url",
            &ours.issuer,
            "--oidc-client-id",
            CLIENT,
            "--oidc-ca-file",
            ca_text,
        ],
    )
    .unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 3).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let admin = admin_kubeconfig(&world, "c1", dir.path()).unwrap();

    // Our issuer's token for our client: that user, as kube-apiserver names it (the issuer
    // as prefix, the `sub` claim), among the authenticated.
    let token = ours.id_token(&ca, CLIENT);
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
        ("another issuer", theirs.id_token(&ca, CLIENT)),
        ("another client", ours.id_token(&ca, "dashboard")),
    ] {
        let out = whoami(&admin, &token);
        assert!(!out.status.success(), "{what}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
            "{what}: {out:?}"
        );
    }
    drop(set);
}
