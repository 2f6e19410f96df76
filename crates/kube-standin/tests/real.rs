//! The stand-ins against a real etcd (Debian's 3.4) with client mutual TLS, on loopback.
//!
//! Certificates are minted fresh with rcgen. Every child process is killed when its guard
//! drops, so a failing assertion leaves nothing running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use http::{Method, StatusCode};
use oi_kube_standin::https::{self, Endpoint, Response};
use oi_kube_standin::tls;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

const VERSION: &str = "v1.37.1";

// ---------------------------------------------------------------- certificates

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

enum Usage {
    Server,
    Client,
    Both,
}

impl Ca {
    fn new(name: &str) -> Ca {
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

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// (certificate PEM, key PEM)
    fn leaf(&self, cn: &str, orgs: &[&str], sans: &[&str], usage: Usage) -> (String, String) {
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

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

// ---------------------------------------------------------------- processes

/// A child process killed on drop; its stderr (and stdout) go to a log file.
struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(name: &str, mut command: Command, dir: &Path) -> Proc {
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

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status if it exited within `timeout`.
    fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    fn kill(&mut self) {
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
fn standin_as(dir: &Path, name: &str) -> Command {
    let link = dir.join(name);
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kube-standin"), &link).unwrap();
    }
    let mut command = Command::new(link);
    command.env("KUBE_STANDIN_VERSION", VERSION);
    command
}

// ---------------------------------------------------------------- the cluster

struct Etcd {
    /// None when only the files were made.
    proc: Option<Proc>,
    url: String,
    ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// etcd's CA and the API server's etcd client certificate, for tests that stop before etcd.
fn etcd_client_files(dir: &Path) -> Etcd {
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

fn start_etcd(dir: &Path) -> Etcd {
    let ca = Ca::new("etcd-ca");
    // etcd 3.4's JSON gateway dials etcd's own gRPC with the server certificate as a client
    // certificate when client-cert-auth is on: the server certificate needs both usages.
    let (server_cert, server_key) = ca.leaf("etcd", &[], &["127.0.0.1", "localhost"], Usage::Both);
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

struct ApiServer {
    proc: Proc,
    port: u16,
    endpoint: Endpoint,
    serving_ca: rustls::RootCertStore,
    client_ca: Ca,
}

fn apiserver_args(dir: &Path, etcd: &Etcd, port: u16) -> (Vec<String>, Ca, String) {
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

fn start_apiserver(dir: &Path, etcd: &Etcd) -> ApiServer {
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client(
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

fn get(
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
fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

fn status(result: &Result<Response, https::HttpsError>) -> Option<StatusCode> {
    result.as_ref().ok().map(|r| r.status)
}

fn prerequisites(test: &str) -> bool {
    oi_testsupport::require(
        test,
        "command `etcd` (Debian etcd-server)",
        oi_testsupport::have_command("etcd"),
    )
}

// ---------------------------------------------------------------- tests

#[test]
fn apiserver_against_real_etcd_with_mutual_tls() {
    if !prerequisites("apiserver_against_real_etcd_with_mutual_tls") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = start_etcd(dir.path());
    let api = start_apiserver(dir.path(), &etcd);
    let rt = runtime();
    let anonymous = client(&api.serving_ca, None);
    let (admin_cert, admin_key) =
        api.client_ca
            .leaf("kubernetes-admin", &["system:masters"], &[], Usage::Client);
    let admin = client(&api.serving_ca, Some((admin_cert, admin_key)));
    let stranger_ca = Ca::new("somebody-else");
    let (stranger_cert, stranger_key) =
        stranger_ca.leaf("kubernetes-admin", &["system:masters"], &[], Usage::Client);
    let stranger = client(&api.serving_ca, Some((stranger_cert, stranger_key)));

    eventually(Duration::from_secs(30), "/readyz 200", || {
        status(&get(&rt, &anonymous, &api.endpoint, "/readyz")) == Some(StatusCode::OK)
    });
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/healthz")),
        Some(StatusCode::OK)
    );
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/livez")),
        Some(StatusCode::OK)
    );

    let version = get(&rt, &anonymous, &api.endpoint, "/version").unwrap();
    assert_eq!(version.status, StatusCode::OK);
    let version: serde_json::Value = serde_json::from_slice(&version.body).unwrap();
    assert_eq!(version["gitVersion"], VERSION);
    assert_eq!(version["major"], "1");
    assert_eq!(version["minor"], "37");

    // Without a client certificate: 401 on anything but the health endpoints.
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/api")),
        Some(StatusCode::UNAUTHORIZED)
    );
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/apis")),
        Some(StatusCode::UNAUTHORIZED)
    );
    // With a certificate from the client CA.
    let discovery = get(&rt, &admin, &api.endpoint, "/api").unwrap();
    assert_eq!(discovery.status, StatusCode::OK);
    let discovery: serde_json::Value = serde_json::from_slice(&discovery.body).unwrap();
    assert_eq!(discovery["kind"], "APIVersions");
    assert_eq!(
        status(&get(&rt, &admin, &api.endpoint, "/apis")),
        Some(StatusCode::OK)
    );
    assert_eq!(
        status(&get(&rt, &admin, &api.endpoint, "/api/v1/pods")),
        Some(StatusCode::NOT_FOUND)
    );
    // A certificate from another CA is refused at the TLS layer, even for /healthz.
    for path in ["/api", "/healthz"] {
        let refused = get(&rt, &stranger, &api.endpoint, path);
        assert!(
            refused.is_err(),
            "a client certificate from another CA got {:?} on {path}",
            status(&refused)
        );
    }
    // The server certificate is checked by clients too: a client trusting another CA fails.
    let wrong_trust = client(
        &tls::roots_from_pem(stranger_ca.pem().as_bytes(), "other").unwrap(),
        None,
    );
    assert!(get(&rt, &wrong_trust, &api.endpoint, "/healthz").is_err());

    // The key the stand-in writes is in etcd, as etcdctl sees it.
    let key = format!("/registry/standin/127.0.0.1:{}", api.port);
    if oi_testsupport::require(
        "apiserver_against_real_etcd_with_mutual_tls (etcdctl part)",
        "command `etcdctl` (Debian etcd-client)",
        oi_testsupport::have_command("etcdctl"),
    ) {
        let output = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", etcd.url))
            .arg(format!("--cacert={}", etcd.ca.display()))
            .arg(format!("--cert={}", etcd.client_cert.display()))
            .arg(format!("--key={}", etcd.client_key.display()))
            .args(["get", &key, "--print-value-only"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("\"standin\":\"kube-apiserver\""),
            "etcdctl get {key}: {:?} {stdout} {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let log = api.proc.log();
    assert!(
        log.contains("etcd ok"),
        "no etcd success in the log:\n{log}"
    );
    assert!(
        log.contains("first authenticated request from user \"kubernetes-admin\""),
        "{log}"
    );
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");

    // etcd gone: /readyz turns 500 and says why; /livez stays 200.
    etcd.proc.as_mut().unwrap().kill();
    eventually(
        Duration::from_secs(20),
        "/readyz 500 after etcd died",
        || {
            status(&get(&rt, &anonymous, &api.endpoint, "/readyz"))
                == Some(StatusCode::INTERNAL_SERVER_ERROR)
        },
    );
    let readyz = get(&rt, &anonymous, &api.endpoint, "/readyz").unwrap();
    let body = String::from_utf8_lossy(&readyz.body);
    assert!(body.contains("[-]etcd failed"), "{body}");
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/livez")),
        Some(StatusCode::OK)
    );

    // SIGTERM: a clean exit.
    let mut api = api;
    terminate(&api.proc);
    let exited = api.proc.wait_exit(Duration::from_secs(10));
    assert!(
        exited.is_some_and(|s| s.success()),
        "SIGTERM did not end the API server cleanly: {exited:?}"
    );
}

fn terminate(proc: &Proc) {
    let status = Command::new("kill")
        .args(["-TERM", &proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn apiserver_refuses_anonymous_health_checks_when_anonymous_auth_is_off() {
    if !prerequisites("apiserver_refuses_anonymous_health_checks_when_anonymous_auth_is_off") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(dir.path());
    let port = oi_testsupport::free_loopback_port();
    let (args, client_ca, serving_ca_pem) = apiserver_args(dir.path(), &etcd, port);
    let mut command = standin_as(dir.path(), "kube-apiserver");
    command.args(&args).arg("--anonymous-auth=false");
    let _api = Proc::spawn("kube-apiserver", command, dir.path());
    let roots = tls::roots_from_pem(serving_ca_pem.as_bytes(), "serving CA").unwrap();
    let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{port}")).unwrap();
    let rt = runtime();
    let (cert, key) = client_ca.leaf("probe", &[], &[], Usage::Client);
    let admin = client(&roots, Some((cert, key)));
    eventually(
        Duration::from_secs(30),
        "/readyz 200 with a client cert",
        || status(&get(&rt, &admin, &endpoint, "/readyz")) == Some(StatusCode::OK),
    );
    let anonymous = client(&roots, None);
    for path in ["/healthz", "/readyz", "/livez", "/version"] {
        assert_eq!(
            status(&get(&rt, &anonymous, &endpoint, path)),
            Some(StatusCode::UNAUTHORIZED),
            "{path}"
        );
    }
}

fn kubeconfig(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: user\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: ctx\n  context:\n    cluster: cluster\n    user: user\ncurrent-context: ctx\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem)
    )
}

#[test]
fn controller_stand_ins_check_their_kubeconfig_credentials() {
    if !prerequisites("controller_stand_ins_check_their_kubeconfig_credentials") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = start_etcd(d);
    let port = oi_testsupport::free_loopback_port();
    let (args, client_ca, serving_ca_pem) = apiserver_args(d, &etcd, port);
    let mut command = standin_as(d, "kube-apiserver");
    command.args(&args);
    let _api = Proc::spawn("kube-apiserver", command, d);
    let server = format!("https://127.0.0.1:{port}");

    let (cm_cert, cm_key) =
        client_ca.leaf("system:kube-controller-manager", &[], &[], Usage::Client);
    let good = write(
        d,
        "controller-manager.kubeconfig",
        &kubeconfig(&server, &serving_ca_pem, &cm_cert, &cm_key),
    );
    let (sched_cert, sched_key) = client_ca.leaf("system:kube-scheduler", &[], &[], Usage::Client);
    let scheduler_kubeconfig = write(
        d,
        "scheduler.kubeconfig",
        &kubeconfig(&server, &serving_ca_pem, &sched_cert, &sched_key),
    );
    let other_ca = Ca::new("not-the-client-ca");
    let (bad_cert, bad_key) =
        other_ca.leaf("system:kube-controller-manager", &[], &[], Usage::Client);
    let bad = write(
        d,
        "bad.kubeconfig",
        &kubeconfig(&server, &serving_ca_pem, &bad_cert, &bad_key),
    );

    // Controller-manager files: a signing CA with its key, a root CA, a service-account key.
    let signing = Ca::new("cluster-signing-ca");
    let signing_key_pem = signing.issuer.key().serialize_pem();
    let signing_cert = write(d, "cluster-signing-ca.crt", &signing.pem());
    let signing_key = write(d, "cluster-signing-ca.key", &signing_key_pem);
    let sa = KeyPair::generate().unwrap();
    let sa_key = write(d, "sa-cm.key", &sa.serialize_pem());
    let root_ca = write(d, "root-ca.crt", &serving_ca_pem);
    let healthz_ca = Ca::new("healthz-ca");
    let (healthz_cert, healthz_key) = healthz_ca.leaf(
        "kube-controller-manager",
        &[],
        &["127.0.0.1"],
        Usage::Server,
    );
    let healthz_cert = write(d, "cm-serving.crt", &healthz_cert);
    let healthz_key = write(d, "cm-serving.key", &healthz_key);
    let cm_port = oi_testsupport::free_loopback_port();

    let mut command = standin_as(d, "kube-controller-manager");
    command.env("KUBE_STANDIN_GRACE_SECONDS", "30").args([
        "--kubeconfig".to_string(),
        good.display().to_string(),
        format!("--authentication-kubeconfig={}", good.display()),
        format!("--authorization-kubeconfig={}", good.display()),
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={cm_port}"),
        format!("--tls-cert-file={}", healthz_cert.display()),
        format!("--tls-private-key-file={}", healthz_key.display()),
        "--leader-elect=false".to_string(),
        "--controllers=*,bootstrapsigner,tokencleaner".to_string(),
        format!("--cluster-signing-cert-file={}", signing_cert.display()),
        format!("--cluster-signing-key-file={}", signing_key.display()),
        format!("--root-ca-file={}", root_ca.display()),
        format!("--service-account-private-key-file={}", sa_key.display()),
        "--use-service-account-credentials=true".to_string(),
        "--allocate-node-cidrs".to_string(),
        "--cluster-cidr=10.244.0.0/16".to_string(),
        "--service-cluster-ip-range=10.96.0.0/12".to_string(),
    ]);
    let mut controller_manager = Proc::spawn("kube-controller-manager", command, d);

    let mut command = standin_as(d, "kube-scheduler");
    command.env("KUBE_STANDIN_GRACE_SECONDS", "30").args([
        format!("--kubeconfig={}", scheduler_kubeconfig.display()),
        "--bind-address=127.0.0.1".to_string(),
        "--secure-port=0".to_string(),
        "--leader-elect".to_string(),
    ]);
    let mut scheduler = Proc::spawn("kube-scheduler", command, d);

    let mut command = standin_as(d, "kube-controller-manager");
    command.env("KUBE_STANDIN_GRACE_SECONDS", "3").args([
        format!("--kubeconfig={}", bad.display()),
        "--secure-port=0".to_string(),
    ]);
    let mut wrong_ca = Proc::spawn("kube-controller-manager-wrong-ca", command, d);

    // The one whose client certificate comes from the wrong CA gives up after its grace period.
    let exited = wrong_ca.wait_exit(Duration::from_secs(30));
    assert!(
        exited.is_some_and(|s| !s.success()),
        "the wrong-CA controller-manager did not exit non-zero: {exited:?}\n{}",
        wrong_ca.log()
    );
    assert!(
        wrong_ca
            .log()
            .contains("no successful check of the API server"),
        "{}",
        wrong_ca.log()
    );

    // The good ones reached the API server with their certificates and are still up.
    for proc in [&mut controller_manager, &mut scheduler] {
        let name = proc.name.clone();
        eventually(
            Duration::from_secs(30),
            "a successful API server check",
            || proc.log().contains("/version v1.37.1, /api ok"),
        );
        assert!(
            proc.child.try_wait().unwrap().is_none(),
            "{name} exited:\n{}",
            proc.log()
        );
    }
    let log = controller_manager.log();
    assert!(
        log.contains("cluster signing certificate") && log.contains("match"),
        "{log}"
    );

    // The controller-manager serves /healthz with the certificate it was given.
    let rt = runtime();
    let roots = tls::roots_from_pem(healthz_ca.pem().as_bytes(), "healthz CA").unwrap();
    let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{cm_port}")).unwrap();
    let healthz = get(&rt, &client(&roots, None), &endpoint, "/healthz").unwrap();
    assert_eq!(healthz.status, StatusCode::OK);

    // SIGTERM: a clean exit.
    terminate(&controller_manager);
    let exited = controller_manager.wait_exit(Duration::from_secs(10));
    assert!(
        exited.is_some_and(|s| s.success()),
        "SIGTERM did not end the controller-manager cleanly: {exited:?}"
    );
}

#[test]
fn apiserver_exits_1_when_a_key_does_not_match_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = etcd_client_files(d);
    let other = Ca::new("other");

    // The serving key replaced by another key.
    let (args, _, _) = apiserver_args(d, &etcd, oi_testsupport::free_loopback_port());
    let (_, wrong_key) = other.leaf("x", &[], &[], Usage::Server);
    write(d, "apiserver.key", &wrong_key);
    let output = standin_as(d, "kube-apiserver")
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--tls-cert-file and --tls-private-key-file")
            && stderr.contains("does not match"),
        "{stderr}"
    );

    // A proxy client certificate with somebody else's key.
    let (args, _, _) = apiserver_args(d, &etcd, oi_testsupport::free_loopback_port());
    let (proxy_cert, _) = other.leaf("front-proxy-client", &[], &[], Usage::Client);
    let (_, proxy_key) = other.leaf("front-proxy-client", &[], &[], Usage::Client);
    let proxy_cert = write(d, "front-proxy-client.crt", &proxy_cert);
    let proxy_key = write(d, "front-proxy-client.key", &proxy_key);
    let output = standin_as(d, "kube-apiserver")
        .args(&args)
        .arg(format!("--proxy-client-cert-file={}", proxy_cert.display()))
        .arg(format!("--proxy-client-key-file={}", proxy_key.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--proxy-client-cert-file and its key"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("PRIVATE KEY"),
        "key material in the output"
    );

    // Half a pair is refused by flag validation.
    let (args, _, _) = apiserver_args(d, &etcd, oi_testsupport::free_loopback_port());
    let output = standin_as(d, "kube-apiserver")
        .args(&args)
        .arg(format!(
            "--kubelet-client-certificate={}",
            proxy_cert.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("requires --kubelet-client-key"), "{stderr}");
}
