//! The kubelet stand-in: a node as the control plane sees one. It runs no pods.
//!
//! ```text
//!  start: --kubeconfig (the node's client certificate), KubeletConfiguration + flags
//!         serving certificate (tlsCertFile) or a self-signed one written to --cert-dir
//!  register: POST /api/v1/nodes/<name> (labels, taints, addresses, capacity, Ready)
//!  every nodeStatusUpdateFrequency: PATCH nodes/<name>/status (conditions' heartbeats)
//!  every nodeLeaseDurationSeconds/4: renew Lease kube-node-lease/<name> (owned by the Node)
//!  :port (10250) over TLS:  /healthz /pods /configz /metrics /stats/summary
//!     authentication: client certificates (x509.clientCAFile), bearer tokens (TokenReview
//!     when webhook authentication is on), anonymous when enabled; authorization:
//!     AlwaysAllow, or Webhook (a SubjectAccessReview for nodes/<subresource>)
//!  healthzBindAddress:healthzPort (127.0.0.1:10248): /healthz over plain HTTP
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::client::{Client, ClientError};
use crate::config::KubeletConfig;
use crate::kubeconfig::{self, KubeconfigError};
use crate::serve::{self, AsyncHandler, Reply};
use crate::tls::{self, TlsError};

const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Why the kubelet stand-in stopped.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// The kubeconfig.
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    /// Certificates and keys.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The self-signed serving certificate.
    #[error("cannot make a self-signed serving certificate in {dir}")]
    SelfSigned {
        /// `--cert-dir`.
        dir: String,
        /// Why.
        reason: String,
    },
    /// A listening socket.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The signal handlers.
    #[error("cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    /// The client CA cannot verify certificates.
    #[error("client CA {path} cannot be used")]
    ClientCa {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

fn now() -> String {
    crate::api::meta::now()
}

fn now_micro() -> String {
    crate::api::meta::now_micro()
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    read_trimmed("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".to_string())
}

fn memory_kib() -> u64 {
    read_trimmed("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The address the API server reaches this node at: `--node-ip`, else the local address of
/// the route to the API server.
async fn internal_ip(config: &KubeletConfig, server: &str) -> Option<IpAddr> {
    if let Some(ip) = config.node_ips.first() {
        return Some(*ip);
    }
    let uri: http::Uri = server.parse().ok()?;
    let host = uri.host()?.trim_matches(['[', ']']).to_string();
    let port = uri.port_u16().unwrap_or(443);
    let target = tokio::net::lookup_host((host.as_str(), port))
        .await
        .ok()?
        .next()?;
    let bind = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = std::net::UdpSocket::bind(bind).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// The Node object this kubelet registers.
fn node_object(config: &KubeletConfig, ip: Option<IpAddr>, version: &str) -> Value {
    let mut labels = json!({
        "kubernetes.io/hostname": config.node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": go_arch(),
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": go_arch(),
    });
    for (k, v) in &config.labels {
        labels[k] = json!(v);
    }
    let mut spec = json!({});
    if let Some(cidr) = &config.pod_cidr {
        spec["podCIDR"] = json!(cidr);
        spec["podCIDRs"] = json!([cidr]);
    }
    if let Some(id) = &config.provider_id {
        spec["providerID"] = json!(id);
    }
    if !config.register_schedulable {
        spec["unschedulable"] = json!(true);
    }
    if !config.taints.is_empty() {
        spec["taints"] = json!(
            config
                .taints
                .iter()
                .map(|t| {
                    let mut taint = json!({"key": t.key, "effect": t.effect});
                    if !t.value.is_empty() {
                        taint["value"] = json!(t.value);
                    }
                    taint
                })
                .collect::<Vec<_>>()
        );
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": config.node_name, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": spec,
        "status": node_status(config, ip, version, None),
    })
}

/// The Node's status now; `since`: when Ready last changed (kept across updates).
fn node_status(
    config: &KubeletConfig,
    ip: Option<IpAddr>,
    version: &str,
    since: Option<&str>,
) -> Value {
    let now = now();
    let since = since.map_or_else(|| now.clone(), str::to_string);
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": since})
    };
    let mut addresses = Vec::new();
    if let Some(ip) = ip {
        addresses.push(json!({"type": "InternalIP", "address": ip.to_string()}));
    }
    addresses.push(json!({"type": "Hostname", "address": config.node_name}));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let capacity = json!({
        "cpu": cpus.to_string(),
        "memory": format!("{}Ki", memory_kib()),
        "pods": config.max_pods.to_string(),
        "ephemeral-storage": "0",
    });
    json!({
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": addresses,
        "capacity": capacity,
        "allocatable": capacity,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": config.port}},
        "nodeInfo": {
            "machineID": read_trimmed("/etc/machine-id"),
            "systemUUID": read_trimmed("/sys/class/dmi/id/product_uuid"),
            "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": read_trimmed("/proc/sys/kernel/osrelease"),
            "osImage": os_image(),
            "containerRuntimeVersion": "kube-standin://no-runtime",
            "kubeletVersion": version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": go_arch(),
        },
    })
}

/// The node, registered and kept up to date.
struct Node {
    config: KubeletConfig,
    client: Client,
    version: String,
    ip: Option<IpAddr>,
    /// When Ready last turned true (as this kubelet reported it).
    ready_since: Option<String>,
}

impl Node {
    fn path(&self) -> String {
        format!("/api/v1/nodes/{}", self.config.node_name)
    }

    /// Creates the Node, or takes over an existing one (a restarted kubelet).
    async fn register(&mut self) -> Result<Value, ClientError> {
        let node = node_object(&self.config, self.ip, &self.version);
        match self.client.create("/api/v1/nodes", &node).await {
            Ok(created) => {
                tracing::info!("registered node {} ({:?})", self.config.node_name, self.ip);
                self.ready_since = created["status"]["conditions"][3]["lastTransitionTime"]
                    .as_str()
                    .map(str::to_string);
                self.event(
                    "RegisteredNode",
                    &format!(
                        "Node {} registered with the API server",
                        self.config.node_name
                    ),
                )
                .await;
                Ok(created)
            }
            Err(e) if e.code() == Some(409) => {
                tracing::info!("node {} exists: updating its status", self.config.node_name);
                match self.update_status().await? {
                    Some(node) => Ok(node),
                    None => Err(ClientError::Transport(
                        "the node went away while registering".to_string(),
                    )),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Updates the status; `None` when the Node is gone (it registers again then).
    async fn update_status(&mut self) -> Result<Option<Value>, ClientError> {
        let current = self.client.get(&self.path()).await?;
        let Some(current) = current else {
            return Ok(None);
        };
        let was_ready = current["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if !was_ready || self.ready_since.is_none() {
            self.ready_since = Some(now());
        }
        let status = node_status(
            &self.config,
            self.ip,
            &self.version,
            self.ready_since.as_deref(),
        );
        self.client
            .merge_patch(
                &format!("{}/status", self.path()),
                &json!({"status": status}),
            )
            .await
            .map(Some)
    }

    async fn renew_lease(&self, node_uid: &str) -> Result<(), ClientError> {
        let name = &self.config.node_name;
        let path =
            format!("/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{name}");
        let spec = json!({
            "holderIdentity": name,
            "leaseDurationSeconds": self.config.node_lease_duration_seconds,
            "renewTime": now_micro(),
        });
        match self.client.get(&path).await? {
            Some(mut lease) => {
                lease["spec"] = spec;
                self.client.replace(&path, &lease).await.map(drop)
            }
            None => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE,
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}]},
                    "spec": spec,
                });
                self.client
                    .create(
                        &format!(
                            "/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
                        ),
                        &lease,
                    )
                    .await
                    .map(drop)
            }
        }
    }

    /// A core Event about the node (failures only logged: events are best effort).
    async fn event(&self, reason: &str, message: &str) {
        let name = &self.config.node_name;
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": name, "uid": name, "apiVersion": "v1"},
            "reason": reason, "message": message, "type": "Normal",
            "source": {"component": "kubelet", "host": name},
            "firstTimestamp": now(), "lastTimestamp": now(), "count": 1,
            "reportingComponent": "kubelet", "reportingInstance": name,
        });
        if let Err(e) = self
            .client
            .create("/api/v1/namespaces/default/events", &event)
            .await
        {
            tracing::debug!("event {reason}: {e}");
        }
    }
}

/// Keeps the Node registered, its status fresh and its Lease renewed, until `stop`.
async fn keep_node(mut node: Node, mut stop: watch::Receiver<bool>) {
    let lease_every = Duration::from_secs_f64(node.config.node_lease_duration_seconds as f64 / 4.0);
    let status_every = node.config.node_status_update_frequency;
    let mut uid = String::new();
    let mut next_status = Instant::now();
    let mut next_lease = Instant::now();
    let mut failures = 0u32;
    loop {
        if Instant::now() >= next_status || uid.is_empty() {
            let result = if uid.is_empty() {
                node.register().await
            } else {
                match node.update_status().await {
                    Ok(Some(object)) => Ok(object),
                    Ok(None) => {
                        tracing::warn!(
                            "node {} was deleted: registering it again",
                            node.config.node_name
                        );
                        node.register().await
                    }
                    Err(e) => Err(e),
                }
            };
            match result {
                Ok(object) => {
                    uid = object["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    next_status = Instant::now() + status_every;
                    failures = 0;
                }
                Err(e) => {
                    if failures.is_multiple_of(10) {
                        tracing::warn!("node status: {e}");
                    }
                    failures += 1;
                    next_status = Instant::now() + Duration::from_secs(1);
                }
            }
        }
        if !uid.is_empty() && Instant::now() >= next_lease {
            match node.renew_lease(&uid).await {
                Ok(()) => next_lease = Instant::now() + lease_every,
                Err(e) => {
                    tracing::warn!("lease renewal: {e}");
                    next_lease = Instant::now() + Duration::from_secs(1);
                }
            }
        }
        let wake = next_status.min(next_lease);
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = serve::stopped(&mut stop) => return,
        }
    }
}

/// Who a kubelet request comes from, and whether it may do what it asks.
struct Guard {
    node: String,
    client: Client,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    anonymous: bool,
    webhook_authentication: bool,
    webhook_authorization: bool,
    configz: Value,
}

/// The subresource of `nodes` a kubelet path is authorized as.
fn subresource(path: &str) -> &'static str {
    let first = path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default();
    match first {
        "stats" => "stats",
        "metrics" => "metrics",
        "logs" => "log",
        "spec" => "spec",
        "checkpoint" => "checkpoint",
        "configz" => "configz",
        "healthz" => "healthz",
        "pods" => "pods",
        _ => "proxy",
    }
}

fn verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "get",
    }
}

impl Guard {
    /// `(user, groups)`, or why not.
    async fn authenticate(
        &self,
        request: &Request<Bytes>,
        certificates: &[CertificateDer<'static>],
    ) -> Result<(String, Vec<String>), String> {
        if let Some((leaf, intermediates)) = certificates.split_first() {
            if let Some(verifier) = &self.verifier
                && verifier
                    .verify_client_cert(leaf, intermediates, UnixTime::now())
                    .is_ok()
                && let Some(identity) = tls::identity(leaf)
            {
                return Ok((identity.user, identity.groups));
            }
            return Err("client certificate not verified".to_string());
        }
        let token = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "));
        if let Some(token) = token {
            if !self.webhook_authentication {
                return Err(
                    "bearer tokens are not accepted (webhook authentication off)".to_string(),
                );
            }
            let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
            let answer = self
                .client
                .create("/apis/authentication.k8s.io/v1/tokenreviews", &review)
                .await
                .map_err(|e| e.to_string())?;
            if answer["status"]["authenticated"].as_bool() == Some(true) {
                let user = &answer["status"]["user"];
                let groups = user["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect();
                return Ok((
                    user["username"].as_str().unwrap_or_default().to_string(),
                    groups,
                ));
            }
            return Err("token not authenticated".to_string());
        }
        if self.anonymous {
            return Ok((
                "system:anonymous".to_string(),
                vec!["system:unauthenticated".to_string()],
            ));
        }
        Err("no credentials".to_string())
    }

    async fn authorize(
        &self,
        user: &str,
        groups: &[String],
        verb: &str,
        subresource: &str,
    ) -> Result<bool, String> {
        if !self.webhook_authorization {
            return Ok(true);
        }
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": {
                "verb": verb, "resource": "nodes", "subresource": subresource, "name": self.node, "version": "v1"}},
        });
        let answer = self
            .client
            .create(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                &review,
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer["status"]["allowed"].as_bool() == Some(true))
    }

    async fn answer(
        &self,
        request: Request<Bytes>,
        certificates: Arc<Vec<CertificateDer<'static>>>,
    ) -> Reply {
        let (user, groups) = match self.authenticate(&request, &certificates).await {
            Ok(who) => who,
            Err(why) => {
                tracing::debug!("unauthorized {}: {why}", request.uri().path());
                return serve::text(StatusCode::UNAUTHORIZED, "Unauthorized");
            }
        };
        let path = request.uri().path();
        let (verb, sub) = (verb(request.method()), subresource(path));
        // Fine-grained subresources (healthz, pods, configz) fall back to proxy, as the
        // kubelet's KubeletFineGrainedAuthz does.
        let decision = match self.authorize(&user, &groups, verb, sub).await {
            Ok(false) if matches!(sub, "healthz" | "pods" | "configz") => {
                self.authorize(&user, &groups, verb, "proxy").await
            }
            other => other,
        };
        match decision {
            Ok(true) => {}
            Ok(false) => {
                return serve::text(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Forbidden (user={user}, verb={verb}, resource=nodes, subresource={sub})"
                    ),
                );
            }
            Err(e) => {
                return serve::text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("authorization failed: {e}"),
                );
            }
        }
        match path {
            "/healthz" | "/healthz/ping" | "/healthz/syncloop" => serve::text(StatusCode::OK, "ok"),
            "/pods" | "/pods/" => serve::json(
                StatusCode::OK,
                &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}),
            ),
            "/runningpods" | "/runningpods/" => serve::json(
                StatusCode::OK,
                &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}),
            ),
            "/configz" => serve::json(StatusCode::OK, &json!({"kubeletconfig": self.configz})),
            "/stats/summary" => serve::json(
                StatusCode::OK,
                &json!({"node": {"nodeName": self.node, "startTime": now()}, "pods": []}),
            ),
            "/metrics" => serve::text(
                StatusCode::OK,
                format!(
                    "# HELP kubelet_node_name The node's name. The count is always 1.\n# TYPE kubelet_node_name gauge\nkubelet_node_name{{node=\"{}\"}} 1\n# HELP kubelet_running_pods Number of pods that have a running pod sandbox\n# TYPE kubelet_running_pods gauge\nkubelet_running_pods 0\n",
                    self.node
                ),
            ),
            _ => serve::text(StatusCode::NOT_FOUND, "404 page not found\n"),
        }
    }
}

/// The serving certificate: the configured one, or a self-signed one kept in `cert_dir`
/// (made once, as the kubelet keeps `kubelet.crt`/`kubelet.key`).
fn serving_identity(
    config: &KubeletConfig,
    ip: Option<IpAddr>,
) -> Result<
    (
        Vec<CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    KubeletError,
> {
    let (cert, key) = match &config.tls {
        Some((cert, key)) => (cert.clone(), key.clone()),
        None => {
            let cert = config.cert_dir.join("kubelet.crt");
            let key = config.cert_dir.join("kubelet.key");
            if !(cert.is_file() && key.is_file()) {
                make_self_signed(&config.cert_dir, &cert, &key, &config.node_name, ip)?;
            }
            (cert, key)
        }
    };
    let certs = tls::certs_from_pem(&tls::read(&cert)?, &cert.display().to_string())?;
    let key = tls::key_from_pem(&tls::read(&key)?, &key.display().to_string())?;
    Ok((certs, key))
}

fn make_self_signed(
    dir: &Path,
    cert: &Path,
    key: &Path,
    name: &str,
    ip: Option<IpAddr>,
) -> Result<(), KubeletError> {
    let fail = |reason: String| KubeletError::SelfSigned {
        dir: dir.display().to_string(),
        reason,
    };
    let mut names = vec![name.to_string()];
    if let Some(ip) = ip {
        names.push(ip.to_string());
    }
    let certified = rcgen::generate_simple_self_signed(names).map_err(|e| fail(e.to_string()))?;
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(e.to_string()))?;
    }
    crate::local::write_private(key, &certified.signing_key.serialize_pem())
        .map_err(|e| fail(e.to_string()))?;
    std::fs::write(cert, certified.cert.pem()).map_err(|e| fail(e.to_string()))?;
    tracing::info!(
        "made a self-signed serving certificate {} (key {})",
        cert.display(),
        key.display()
    );
    Ok(())
}

/// Runs the kubelet stand-in until SIGTERM/SIGINT.
///
/// # Errors
/// See [`KubeletError`].
pub async fn run(config: KubeletConfig, version: String) -> Result<(), KubeletError> {
    let termination = serve::termination();
    tokio::pin!(termination);
    let kubeconfig = kubeconfig::load(&config.kubeconfig)?;
    let client = Client::new(&kubeconfig);
    tracing::info!(
        "node {}: API server {}, kubeconfig user {:?}",
        config.node_name,
        client.server(),
        kubeconfig.user
    );
    let ip = internal_ip(&config, client.server()).await;
    let (certs, key) = serving_identity(&config, ip)?;
    let verifier = match &config.client_ca {
        Some(ca) => {
            let roots = tls::roots_from_pem(&tls::read(ca)?, &ca.display().to_string())?;
            Some(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), tls::provider())
                    .build()
                    .map_err(|e| KubeletError::ClientCa {
                        path: ca.display().to_string(),
                        reason: e.to_string(),
                    })?,
            )
        }
        None => None,
    };
    let server_tls = tls::api_server_config(certs, key, None, "the kubelet's serving certificate")?;
    let guard = Arc::new(Guard {
        node: config.node_name.clone(),
        client: client.clone(),
        verifier,
        anonymous: config.anonymous,
        webhook_authentication: config.webhook_authentication,
        webhook_authorization: config.authorization_mode == "Webhook",
        configz: config.effective.clone(),
    });
    let handler: AsyncHandler = Arc::new(move |request, certificates| {
        let guard = Arc::clone(&guard);
        Box::pin(async move { guard.answer(request, certificates).await })
    });
    let address = SocketAddr::new(config.address, config.port);
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| KubeletError::Bind { address, source })?;
    tracing::info!(
        "serving on {address} (authentication: x509 {}, anonymous {}, webhook {}; authorization {})",
        config.client_ca.is_some(),
        config.anonymous,
        config.webhook_authentication,
        config.authorization_mode
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = vec![tokio::spawn(serve::serve_async(
        listener,
        server_tls,
        handler,
        stop_rx.clone(),
    ))];
    if let Some((ip, port)) = config.healthz {
        let address = SocketAddr::new(ip, port);
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| KubeletError::Bind { address, source })?;
        tasks.push(tokio::spawn(serve_healthz(listener, stop_rx.clone())));
    }
    if config.register_node {
        let node = Node {
            config: config.clone(),
            client,
            version,
            ip,
            ready_since: None,
        };
        node.event("Starting", "Starting kubelet.").await;
        tasks.push(tokio::spawn(keep_node(node, stop_rx.clone())));
    }
    let signal = termination.await.map_err(KubeletError::Signals)?;
    tracing::info!("{signal} received, shutting down");
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}

/// `/healthz` over plain HTTP, as the kubelet's healthz port serves it.
async fn serve_healthz(listener: TcpListener, mut stop: watch::Receiver<bool>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = serve::stopped(&mut stop) => return,
        };
        let Ok((mut stream, _)) = accepted else {
            continue;
        };
        tokio::spawn(async move {
            let mut buffer = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            let head = String::from_utf8_lossy(&buffer[..n]);
            let path = head.split_whitespace().nth(1).unwrap_or_default();
            let (status, body) = if path == "/healthz" {
                ("200 OK", "ok")
            } else {
                ("404 Not Found", "404 page not found\n")
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_subresources_the_real_kubelet_authorizes() {
        assert_eq!(subresource("/stats/summary"), "stats");
        assert_eq!(subresource("/metrics/cadvisor"), "metrics");
        assert_eq!(subresource("/logs/"), "log");
        assert_eq!(subresource("/pods"), "pods");
        assert_eq!(subresource("/exec/ns/pod/c"), "proxy");
        assert_eq!(verb(&http::Method::POST), "create");
        assert_eq!(verb(&http::Method::GET), "get");
    }
}
