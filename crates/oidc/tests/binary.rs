//! The `oi-oidc-provider` binary as the image runs it: `serve --config` on loopback over TLS
//! (discovery and keys fetched with a client that trusts only the test's CA), its signing key
//! made 0600 and kept across restarts, a bad configuration refused naming the file and the
//! field; `hash-password` hashing the first line of stdin. (Also what makes
//! `cargo nextest run --workspace` build the binary the e2e tests run.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

const PROVIDER: &str = env!("CARGO_BIN_EXE_oi-oidc-provider");
const START_WITHIN: Duration = Duration::from_secs(60);

/// A running provider, killed on drop (also when the test panics).
struct Served {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A CA, and a serving certificate and key for 127.0.0.1 signed by it, written into `dir`:
/// the CA's path.
fn certificates(dir: &Path) -> PathBuf {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "test oidc ca");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "oidc provider");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    dir.join("ca.crt")
}

/// A users list with one user, `alice`, whose password is `pw`.
fn users(dir: &Path) -> PathBuf {
    let hash = oi_oidc::password::hash("pw", oi_api::oidc::MIN_ITERATIONS).unwrap();
    let path = dir.join("users.yaml");
    std::fs::write(
        &path,
        format!("- username: alice\n  groups: [admins]\n  passwordHash: '{hash}'\n"),
    )
    .unwrap();
    path
}

/// The configuration for a provider listening on 127.0.0.1:`port`.
fn config(dir: &Path, port: u16) -> serde_json::Value {
    serde_json::json!({
        "issuer": format!("https://127.0.0.1:{port}"),
        "listen": format!("127.0.0.1:{port}"),
        "tlsCertificate": dir.join("tls.crt"),
        "tlsPrivateKey": dir.join("tls.key"),
        "signingKey": dir.join("state/signing-key.pem"),
        "users": dir.join("users.yaml"),
        "clients": [{"id": "kubernetes", "redirectURIs": ["http://localhost:8000"]}],
    })
}

fn spawn(dir: &Path, config: &Path, log: &str) -> Child {
    let log = std::fs::File::create(dir.join(log)).unwrap();
    Command::new(PROVIDER)
        .args(["serve", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The provider started on a free loopback port and answering its discovery document. A port
/// taken between choosing and binding (another test's) is retried with another.
fn start(dir: &Path, ca: &Path) -> Served {
    for attempt in 0..5 {
        let port = oi_testsupport::free_loopback_port();
        let path = dir.join("config.json");
        std::fs::write(&path, config(dir, port).to_string()).unwrap();
        let log = format!("provider-{attempt}.log");
        let mut served = Served {
            child: spawn(dir, &path, &log),
            port,
            log: dir.join(log),
        };
        let deadline = Instant::now() + START_WITHIN;
        loop {
            if let Some(status) = served.child.try_wait().unwrap() {
                let log = served.log();
                assert!(
                    log.contains("cannot listen"),
                    "the provider exited ({status}) before serving: {log}"
                );
                break;
            }
            if let Ok((200, _)) = get(ca, port, "/.well-known/openid-configuration") {
                return served;
            }
            assert!(
                Instant::now() < deadline,
                "the provider did not answer within {START_WITHIN:?}: {}",
                served.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("no free loopback port could be listened on in five attempts");
}

/// `GET path` over TLS from 127.0.0.1:`port`, trusting only the CA at `ca`: status and body.
fn get(ca: &Path, port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    tls.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no HTTP response: {response}")))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status: {head}")))?;
    Ok((status, body.to_string()))
}

fn json(ca: &Path, port: u16, path: &str) -> serde_json::Value {
    let (status, body) = get(ca, port, path).unwrap();
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// The one key the provider publishes: its `kid`, after checking it is a public P-256 key.
fn published_key(ca: &Path, served: &Served) -> String {
    let discovery = json(ca, served.port, "/.well-known/openid-configuration");
    let issuer = format!("https://127.0.0.1:{}", served.port);
    assert_eq!(discovery["issuer"], issuer.as_str());
    let keys_path = discovery["jwks_uri"]
        .as_str()
        .and_then(|u| u.strip_prefix(&issuer))
        .unwrap_or_else(|| panic!("jwks_uri not under the issuer: {discovery}"))
        .to_string();
    let jwks = json(ca, served.port, &keys_path);
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{jwks}");
    assert_eq!(keys[0]["kty"], "EC", "{jwks}");
    assert_eq!(keys[0]["crv"], "P-256", "{jwks}");
    assert!(keys[0].get("d").is_none(), "private part published: {jwks}");
    keys[0]["kid"].as_str().unwrap().to_string()
}

#[test]
fn the_provider_serves_discovery_and_its_key_over_tls_and_keeps_its_signing_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path());
    users(dir.path());
    let served = start(dir.path(), &ca);
    let kid = published_key(&ca, &served);
    let key = dir.path().join("state/signing-key.pem");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "signing key mode {mode:o}");
    let pem = std::fs::read(&key).unwrap();
    assert!(
        !served.log().contains("PRIVATE KEY"),
        "key material in the log: {}",
        served.log()
    );
    assert!(served.log().contains("1 users"), "{}", served.log());
    drop(served);

    let served = start(dir.path(), &ca);
    assert_eq!(
        published_key(&ca, &served),
        kid,
        "a restart changed the key"
    );
    assert_eq!(
        std::fs::read(&key).unwrap(),
        pem,
        "the key file was rewritten"
    );
}

/// Runs the provider on `config`, which must make it exit: its exit code and output.
fn refused(dir: &Path, config: &Path) -> (Option<i32>, String) {
    let mut child = spawn(dir, config, "refused.log");
    let deadline = Instant::now() + START_WITHIN;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the provider kept running on a bad configuration");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.code(),
        std::fs::read_to_string(dir.join("refused.log")).unwrap(),
    )
}

#[test]
fn a_bad_configuration_is_refused_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let users_path = users(dir.path());
    let path = dir.path().join("config.json");

    let (code, out) = refused(dir.path(), &dir.path().join("missing.json"));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("cannot read") && out.contains("missing.json"),
        "{out}"
    );

    let mut bad = config(dir.path(), 1);
    bad["issuerURL"] = "https://127.0.0.1:1".into();
    std::fs::write(&path, bad.to_string()).unwrap();
    let (code, out) = refused(dir.path(), &path);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&path.display().to_string()) && out.contains("issuerURL"),
        "{out}"
    );

    std::fs::write(&path, config(dir.path(), 1).to_string()).unwrap();
    std::fs::write(
        &users_path,
        "- username: bob\n  passwordHash: 'plain-text'\n",
    )
    .unwrap();
    let (code, out) = refused(dir.path(), &path);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&users_path.display().to_string()) && out.contains("bob"),
        "{out}"
    );
    assert!(!out.contains("plain-text"), "the hash was printed: {out}");
}

fn hash_password(stdin: &str) -> std::process::Output {
    let mut child = Command::new(PROVIDER)
        .args(["hash-password", "--iterations"])
        .arg(oi_api::oidc::MIN_ITERATIONS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn hash_password_hashes_the_first_line_of_stdin() {
    let out = hash_password("s3cret\nsecond line\n");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("s3cret"), "{text}");
    let parts = oi_api::oidc::parse_hash(text.trim()).unwrap();
    assert_eq!(parts.iterations.get(), oi_api::oidc::MIN_ITERATIONS);
    assert!(oi_oidc::password::verify(&parts, "s3cret"));
    assert!(!oi_oidc::password::verify(&parts, "second line"));

    let out = hash_password("");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no password on stdin"),
        "{out:?}"
    );
}
