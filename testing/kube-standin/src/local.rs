//! An API server stand-in in the test's own process, on loopback: the same [`Api`] the kube
//! stand-in image serves, over any storage (memory by default), with a freshly minted PKI
//! (serving CA, client CA, service-account key) and kubeconfigs for any identity. It runs on
//! a runtime of its own, so synchronous and async tests alike can use it, and stops when
//! dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ipnet::IpNet;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::sync::watch;

use crate::api::authn::{AuthnConfig, ServiceAccountTokens};
use crate::api::authz::Mode;
use crate::api::storage::{MemoryStorage, SharedStorage};
use crate::api::{Api, ApiConfig, TokenIssuer, jwt};

/// The issuer of the local server's service-account tokens.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// How the local server is set up.
pub struct LocalOptions {
    /// The storage; a fresh [`MemoryStorage`] when `None` (and no `etcd`).
    pub storage: Option<SharedStorage>,
    /// Objects in etcd instead (connected on the server's own runtime).
    pub etcd: Option<EtcdConnection>,
    /// `--authorization-mode` (default `Node,RBAC`).
    pub modes: Vec<Mode>,
    /// The longest watch.
    pub watch_timeout: Duration,
    /// How often bookmarks come.
    pub bookmark_interval: Duration,
    /// Keep every request line.
    pub record_requests: bool,
    /// `--service-cluster-ip-range`.
    pub service_cidr: Option<IpNet>,
    /// `--anonymous-auth`.
    pub anonymous: bool,
    /// `--enable-bootstrap-token-auth`.
    pub bootstrap_tokens: bool,
    /// NodeRestriction admission.
    pub node_restriction: bool,
    /// The node proxy's client.
    pub kubelet: Option<crate::api::proxy::KubeletClient>,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            storage: None,
            etcd: None,
            modes: vec![Mode::Node, Mode::Rbac],
            watch_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(60),
            record_requests: false,
            service_cidr: "10.96.0.0/12".parse().ok(),
            anonymous: true,
            bootstrap_tokens: true,
            node_restriction: true,
            kubelet: None,
        }
    }
}

/// The etcd the server stores its objects in: its client URLs, its CA and a client identity
/// (PEM).
#[derive(Debug, Clone)]
pub struct EtcdConnection {
    pub servers: Vec<String>,
    pub ca_pem: Vec<u8>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// How long a request to the etcd of [`LocalOptions::etcd`] may take.
const ETCD_TIMEOUT: Duration = Duration::from_secs(10);

/// A certificate authority minted for tests.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new self-signed CA named `name`.
    ///
    /// # Errors
    /// Key generation failing.
    pub fn new(name: &str) -> Result<TestCa> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ok(TestCa {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate()?)?,
        })
    }

    /// The CA certificate (PEM).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf: `(certificate PEM, key PEM)`, for a server (`sans`), a client (`cn`, `orgs`),
    /// or both.
    ///
    /// # Errors
    /// Key generation or signing failing.
    pub fn leaf(
        &self,
        cn: &str,
        orgs: &[&str],
        sans: &[&str],
        server: bool,
        client: bool,
    ) -> Result<(String, String)> {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| (*s).to_string()).collect::<Vec<_>>())?;
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
        if server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if client {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// A kubeconfig for `server` trusting `ca_pem`, authenticating with a client certificate or a
/// token.
pub fn kubeconfig(server: &str, ca_pem: &str, user: KubeconfigUser<'_>) -> String {
    let credentials = match user {
        KubeconfigUser::Certificate { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            B64.encode(cert_pem),
            B64.encode(key_pem)
        ),
        KubeconfigUser::Token(token) => format!("    token: {token}\n"),
        KubeconfigUser::Anonymous => "    {}\n".to_string(),
    };
    let credentials = if credentials.trim() == "{}" {
        "  user: {}\n".to_string()
    } else {
        format!("  user:\n{credentials}")
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: user\n{credentials}contexts:\n- name: local\n  context:\n    cluster: local\n    user: user\ncurrent-context: local\n",
        B64.encode(ca_pem)
    )
}

/// Who a kubeconfig authenticates as.
pub enum KubeconfigUser<'a> {
    /// A client certificate and its key.
    Certificate { cert_pem: &'a str, key_pem: &'a str },
    /// A bearer token.
    Token(&'a str),
    /// Nobody.
    Anonymous,
}

/// The local API server.
pub struct LocalApiServer {
    /// Where it listens.
    pub address: SocketAddr,
    /// The CA its serving certificate chains to.
    pub serving_ca: String,
    /// The CA client certificates must chain to.
    pub client_ca: TestCa,
    api: Arc<Api>,
    memory: Option<Arc<MemoryStorage>>,
    stop: watch::Sender<bool>,
    runtime: Option<tokio::runtime::Runtime>,
    dir: tempfile::TempDir,
}

impl LocalApiServer {
    /// Starts a server on `127.0.0.1:0` and waits until it is bootstrapped.
    ///
    /// # Errors
    /// Certificates, the runtime or the listener failing.
    pub fn start(options: LocalOptions) -> Result<LocalApiServer> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("local-apiserver")
            .enable_all()
            .build()
            .context("building the API server's runtime")?;
        let dir = tempfile::tempdir().context("a directory for the service-account key")?;
        let serving = TestCa::new("local-apiserver-serving-ca")?;
        let client_ca = TestCa::new("local-apiserver-client-ca")?;
        let (cert, key) = serving.leaf(
            "kube-apiserver",
            &[],
            &["127.0.0.1", "localhost", "kubernetes"],
            true,
            false,
        )?;
        let sa = KeyPair::generate()?;
        let sa_key = dir.path().join("sa.key");
        std::fs::write(&sa_key, sa.serialize_pem())?;
        let signer = jwt::Signer::from_file(&sa_key)?;
        let public = signer.public_key().clone();

        let (memory, storage): (Option<Arc<MemoryStorage>>, SharedStorage) =
            match (options.storage, options.etcd) {
                (Some(s), _) => (None, s),
                (None, Some(etcd)) => {
                    let storage = runtime
                        .block_on(crate::api::etcd_storage::EtcdStorage::connect(
                            &etcd.servers,
                            &etcd.ca_pem,
                            &etcd.cert_pem,
                            &etcd.key_pem,
                            ETCD_TIMEOUT,
                        ))
                        .context("connecting to the API server's etcd")?;
                    (None, Arc::new(storage))
                }
                (None, None) => {
                    let m = Arc::new(MemoryStorage::default());
                    (Some(Arc::clone(&m)), m)
                }
            };
        let client_roots = crate::tls::roots_from_pem(client_ca.pem().as_bytes(), "client CA")?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1")?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let config = ApiConfig {
            authn: AuthnConfig {
                client_ca: Some(client_roots.clone()),
                bootstrap_tokens: options.bootstrap_tokens,
                service_accounts: Some(ServiceAccountTokens {
                    keys: vec![public],
                    issuers: vec![ISSUER.to_string()],
                    audiences: vec![ISSUER.to_string()],
                }),
                static_tokens: Vec::new(),
                anonymous: options.anonymous,
                jwt: std::sync::Arc::default(),
            },
            modes: options.modes,
            node_restriction: options.node_restriction,
            service_cluster_ip_ranges: options.service_cidr.into_iter().collect(),
            tokens: Some(TokenIssuer {
                signer,
                issuer: ISSUER.to_string(),
                audiences: vec![ISSUER.to_string()],
                max_seconds: None,
            }),
            kubelet: options.kubelet,
            watch_timeout: options.watch_timeout,
            bookmark_interval: options.bookmark_interval,
            record_requests: options.record_requests,
            advertise: Some((address.ip(), address.port())),
            server_address: address.to_string(),
            ..ApiConfig::default()
        };
        let api = Api::new(storage, config)?;
        let tls = crate::tls::api_server_config(
            crate::tls::certs_from_pem(cert.as_bytes(), "serving certificate")?,
            crate::tls::key_from_pem(key.as_bytes(), "serving key")?,
            Some(&client_roots),
            "local API server",
        )?;
        let (stop, stopped) = watch::channel(false);
        {
            let _entered = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener)?;
            runtime.spawn(crate::api::server::serve(
                listener,
                tls,
                Arc::clone(&api),
                stopped.clone(),
            ));
            runtime.spawn(crate::api::maintenance::run(Arc::clone(&api), stopped));
        }
        let server = LocalApiServer {
            address,
            serving_ca: serving.pem(),
            client_ca,
            api,
            memory,
            stop,
            runtime: Some(runtime),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.api.bootstrapped() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the local API server did not bootstrap in 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(server)
    }

    /// The API behind it.
    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }

    /// Its memory storage, when it has one.
    pub fn memory(&self) -> Option<&Arc<MemoryStorage>> {
        self.memory.as_ref()
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// A client certificate and key for `user` in `groups`.
    ///
    /// # Errors
    /// Minting failing.
    pub fn identity(&self, user: &str, groups: &[&str]) -> Result<(String, String)> {
        self.client_ca.leaf(user, groups, &[], false, true)
    }

    /// A kubeconfig for `user` in `groups` (client certificate).
    ///
    /// # Errors
    /// Minting failing.
    pub fn kubeconfig_for(&self, user: &str, groups: &[&str]) -> Result<String> {
        let (cert, key) = self.identity(user, groups)?;
        Ok(kubeconfig(
            &self.url(),
            &self.serving_ca,
            KubeconfigUser::Certificate {
                cert_pem: &cert,
                key_pem: &key,
            },
        ))
    }

    /// A kubeconfig for `kubernetes-admin` in `system:masters`.
    ///
    /// # Errors
    /// Minting failing.
    pub fn admin_kubeconfig(&self) -> Result<String> {
        self.kubeconfig_for("kubernetes-admin", &["system:masters"])
    }

    /// A kubeconfig with a bearer token.
    pub fn token_kubeconfig(&self, token: &str) -> String {
        kubeconfig(&self.url(), &self.serving_ca, KubeconfigUser::Token(token))
    }

    /// Writes the admin kubeconfig to `dir/kubeconfig` (0600).
    ///
    /// # Errors
    /// Minting or writing failing.
    pub fn write_admin_kubeconfig(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join("kubeconfig");
        write_private(&path, &self.admin_kubeconfig()?)?;
        Ok(path)
    }

    /// A directory that lives as long as the server.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `future` on the server's runtime.
    ///
    /// # Panics
    /// When called from an async context (as any `block_on`).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        match &self.runtime {
            Some(runtime) => runtime.block_on(future),
            None => unreachable!("the runtime is only taken on drop"),
        }
    }

    /// The runtime's handle.
    pub fn handle(&self) -> tokio::runtime::Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle().clone(),
            None => unreachable!("the runtime is only taken on drop"),
        }
    }
}

/// Writes a file created 0600.
///
/// # Errors
/// Writing failing.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

impl Drop for LocalApiServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        // Open watches hold connections: do not wait for them (and do not block, which an
        // async test's context forbids).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
