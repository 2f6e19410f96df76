//! Shared by the tests that run the stand-in binaries against a real etcd: certificates
//! minted with rcgen, child processes killed on drop (their logs printed when a test
//! panics), etcd with client mutual TLS, the kube-apiserver stand-in's flags.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use oi_kube_standin::https::{self, Endpoint, Response};
use oi_kube_standin::tls;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

pub const VERSION: &str = "v1.37.1";

// ---------------------------------------------------------------- certificates

pub struct Ca {
    pub issuer: CertifiedIssuer<'static, KeyPair>,
}

pub enum Usage {
    Server,
    Client,
    Both,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// (certificate PEM, key PEM)
    pub fn leaf(&self, cn: &str, orgs: &[&str], sans: &[&str], usage: Usage) -> (String, String) {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *org);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match usage {
            Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::Both => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

pub fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

// ---------------------------------------------------------------- processes

/// A child process killed on drop; its stderr (and stdout) go to a log file.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, mut command: Command, dir: &Path) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            name: name.to_string(),
            child,
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status if it exited within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- {} log ----\n{}", self.name, self.log());
        }
    }
}

/// A symlink named `name` to the stand-in binary, so it picks its role from argv[0].
pub fn standin_as(dir: &Path, name: &str) -> Command {
    let link = dir.join(name);
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kube-standin"), &link).unwrap();
    }
    let mut command = Command::new(link);
    command.env("KUBE_STANDIN_VERSION", VERSION);
    command
}

// ---------------------------------------------------------------- the cluster

pub struct Etcd {
    /// None when only the files were made.
    pub proc: Option<Proc>,
    pub url: String,
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// etcd's CA and the API server's etcd client certificate, for tests that stop before etcd.
pub fn etcd_client_files(dir: &Path) -> Etcd {
    let ca = Ca::new("etcd-ca");
    let (client_cert, client_key) = ca.leaf("etcd-client", &[], &[], Usage::Client);
    Etcd {
        proc: None,
        url: "https://127.0.0.1:1".to_string(),
        ca: write(dir, "etcd-ca.crt", &ca.pem()),
        client_cert: write(dir, "apiserver-etcd-client.crt", &client_cert),
        client_key: write(dir, "apiserver-etcd-client.key", &client_key),
    }
}

pub fn start_etcd(dir: &Path) -> Etcd {
    let ca = Ca::new("etcd-ca");
    // Serving only: the stand-in speaks etcd's gRPC API, not its JSON gateway (which dialed
    // etcd with the server certificate as a client certificate).
    let (server_cert, server_key) =
        ca.leaf("etcd", &[], &["127.0.0.1", "localhost"], Usage::Server);
    let (client_cert, client_key) = ca.leaf(
        "kube-apiserver-etcd-client",
        &["system:masters"],
        &[],
        Usage::Client,
    );
    let ca_path = write(dir, "etcd-ca.crt", &ca.pem());
    let server_cert = write(dir, "etcd-server.crt", &server_cert);
    let server_key = write(dir, "etcd-server.key", &server_key);
    let client_cert = write(dir, "apiserver-etcd-client.crt", &client_cert);
    let client_key = write(dir, "apiserver-etcd-client.key", &client_key);
    let client_port = oi_testsupport::free_loopback_port();
    let peer_port = oi_testsupport::free_loopback_port();
    let url = format!("https://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let mut command = Command::new("etcd");
    command
        .arg("--name=standin")
        .arg(format!("--data-dir={}", dir.join("etcd-data").display()))
        .arg(format!("--listen-client-urls={url}"))
        .arg(format!("--advertise-client-urls={url}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=standin={peer}"))
        .arg(format!("--cert-file={}", server_cert.display()))
        .arg(format!("--key-file={}", server_key.display()))
        .arg(format!("--trusted-ca-file={}", ca_path.display()))
        .arg("--client-cert-auth");
    Etcd {
        proc: Some(Proc::spawn("etcd", command, dir)),
        url,
        ca: ca_path,
        client_cert,
        client_key,
    }
}

pub struct ApiServer {
    pub proc: Proc,
    pub port: u16,
    pub endpoint: Endpoint,
    pub serving_ca: rustls::RootCertStore,
    pub client_ca: Ca,
}

pub fn apiserver_args(dir: &Path, etcd: &Etcd, port: u16) -> (Vec<String>, Ca, String) {
    let serving_ca = Ca::new("kube-apiserver-ca");
    let client_ca = Ca::new("kube-apiserver-client-ca");
    let (serving_cert, serving_key) = serving_ca.leaf(
        "kube-apiserver",
        &[],
        &["127.0.0.1", "kube-apiserver"],
        Usage::Server,
    );
    let sa = KeyPair::generate().unwrap();
    let serving_cert = write(dir, "apiserver.crt", &serving_cert);
    let serving_key = write(dir, "apiserver.key", &serving_key);
    let client_ca_path = write(dir, "apiserver-client-ca.crt", &client_ca.pem());
    let sa_pub = write(dir, "sa.pub", &sa.public_key_pem());
    let sa_key = write(dir, "sa.key", &sa.serialize_pem());
    let args = vec![
        // the shapes oneinfra renders: `--flag value`, `--flag=value`, bare booleans
        "--etcd-servers".to_string(),
        etcd.url.clone(),
        format!("--etcd-cafile={}", etcd.ca.display()),
        "--etcd-certfile".to_string(),
        etcd.client_cert.display().to_string(),
        format!("--etcd-keyfile={}", etcd.client_key.display()),
        "--anonymous-auth=true".to_string(),
        "--authorization-mode=Node,RBAC".to_string(),
        "--enable-bootstrap-token-auth".to_string(),
        "--allow-privileged=true".to_string(),
        "--bind-address=127.0.0.1".to_string(),
        "--advertise-address=127.0.0.1".to_string(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", serving_cert.display()),
        format!("--tls-private-key-file={}", serving_key.display()),
        format!("--client-ca-file={}", client_ca_path.display()),
        format!("--service-account-key-file={}", sa_pub.display()),
        format!("--service-account-signing-key-file={}", sa_key.display()),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
        "--service-cluster-ip-range=10.96.0.0/12".to_string(),
        "--kubelet-preferred-address-types=ExternalIP,ExternalDNS,Hostname,InternalDNS,InternalIP"
            .to_string(),
        "--v=2".to_string(),
    ];
    (args, client_ca, serving_ca.pem())
}

pub fn start_apiserver(dir: &Path, etcd: &Etcd) -> ApiServer {
    let port = oi_testsupport::free_loopback_port();
    let (args, client_ca, serving_ca_pem) = apiserver_args(dir, etcd, port);
    let mut command = standin_as(dir, "kube-apiserver");
    command.args(&args);
    ApiServer {
        proc: Proc::spawn("kube-apiserver", command, dir),
        port,
        endpoint: Endpoint::parse(&format!("https://127.0.0.1:{port}")).unwrap(),
        serving_ca: tls::roots_from_pem(serving_ca_pem.as_bytes(), "serving CA").unwrap(),
        client_ca,
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn client(
    roots: &rustls::RootCertStore,
    identity: Option<(String, String)>,
) -> Arc<rustls::ClientConfig> {
    let identity = identity.map(|(cert, key)| {
        (
            tls::certs_from_pem(cert.as_bytes(), "test client cert").unwrap(),
            tls::key_from_pem(key.as_bytes(), "test client key").unwrap(),
        )
    });
    tls::client_config(roots.clone(), identity, "test client").unwrap()
}

pub fn get(
    rt: &tokio::runtime::Runtime,
    tls: &Arc<rustls::ClientConfig>,
    endpoint: &Endpoint,
    path: &str,
) -> Result<Response, https::HttpsError> {
    rt.block_on(https::request(
        tls,
        endpoint,
        Method::GET,
        path,
        None,
        Duration::from_secs(5),
    ))
}

/// Polls `check` until it returns true or `timeout` passes.
pub fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

pub fn status(result: &Result<Response, https::HttpsError>) -> Option<StatusCode> {
    result.as_ref().ok().map(|r| r.status)
}

pub fn prerequisites(test: &str) -> bool {
    oi_testsupport::require(
        test,
        "command `etcd` (Debian etcd-server)",
        oi_testsupport::have_command("etcd"),
    )
}
