//! `oi node join`: a worker joins a managed cluster (run on the worker, as root).
//!
//! ```text
//! 1. GET  the join key ConfigMap with the join token       wrong/expired token, unreachable
//!         (API server verified with --apiserver-ca-cert-file) endpoint, CA mismatch: fail here,
//!                                                           nothing written
//! 2. the symmetric key: read from <root>/etc/oneinfra/join.key (a rerun continues the same
//!    request), else a new one, kept there (0600) once its request is created; wrapped to
//!    the join key
//! 3. POST the NodeJoinRequest (endpoint, CRI endpoints, extra SANs sealed with the key);
//!    one that exists already is waited for (a rerun)
//! 4. GET  it until Issued (progress on stderr, --timeout); Issued=False: its reason, fail
//! 5. the answer opened; the kubelet's files written atomically, keys 0600:
//!    /etc/oneinfra/kubelet.conf, kubelet.crt, kubelet.key, kubelet-client-ca.crt,
//!    /var/lib/kubelet/config.yaml; the systemd unit /etc/systemd/system/kubelet.service;
//!    with the cluster VPN: /etc/oneinfra/<interface>.conf (WireGuard's format, 0600),
//!    <interface>.sh and the unit <interface>.service that run it
//! 6. the VPN interface up (the unit under systemd, else the script): the kernel's
//!    WireGuard, or wireguard-go where there is none; peer = the cluster's endpoint,
//!    allowed IPs = the VPN CIDR, keepalive 20 s (behind NAT the worker dials out)
//! 7. where systemd runs: `systemctl daemon-reload` and `systemctl enable --now kubelet`;
//!    elsewhere the exact command to start the kubelet is printed (with the VPN,
//!    `--node-ip` is the node's VPN address: the API servers reach it there)
//! ```
//!
//! The node's WireGuard key pair is made here and kept in /etc/oneinfra/wireguard.key
//! (0600); only its public key goes into the request (`spec.vpnPublicKey`, sealed). A
//! cluster that answers in oneinfra's form (with a private key made for the node) is
//! followed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http::Method;
use oi_api::NodeJoinRequest;
use oi_pki::SymmetricKey;
use oi_planner::bootstrap::{
    JOIN_CONFIG_MAP, JOIN_CONFIG_MAP_KEY, JOIN_CONFIG_MAP_VPN_KEY, NAMESPACE,
};
use oi_planner::join::{ISSUED, paths};

use crate::args::NodeJoinArgs;

/// The cluster's NodeJoinRequests.
const REQUESTS: &str = "/apis/node.oneinfra.ereslibre.es/v1alpha1/nodejoinrequests";
/// Where the symmetric key of this node's request is kept.
const KEY_FILE: &str = "/etc/oneinfra/join.key";
/// Where this node's WireGuard private key is kept.
const VPN_KEY_FILE: &str = "/etc/oneinfra/wireguard.key";
/// The kubelet's systemd unit.
const UNIT_FILE: &str = "/etc/systemd/system/kubelet.service";

/// Joins; returns the note for stderr (what was written, how the kubelet starts).
///
/// # Errors
/// Each failure names what failed: the token, the endpoint, the CA, the request's refusal,
/// the timeout, a file.
pub fn run(args: &NodeJoinArgs, output: &mut impl Write) -> anyhow::Result<String> {
    let _ = output;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(join(args))
}

/// An API server's answer: its status and whole body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// Calls to an API server with a join token (over oi-http, trusting the CA given alone).
pub(crate) struct Client<'a> {
    pub(crate) http: oi_http::Client,
    pub(crate) endpoint: &'a str,
    pub(crate) token: &'a str,
}

impl<'a> Client<'a> {
    /// A client of `endpoint` trusting `ca_pem` alone, each answer awaited at most `timeout`.
    pub(crate) fn new(
        endpoint: &'a str,
        ca_pem: String,
        token: &'a str,
        timeout: std::time::Duration,
    ) -> anyhow::Result<Client<'a>> {
        let http = oi_http::Client::new(oi_http::Options {
            roots: oi_http::Roots::Only(ca_pem),
            timeout,
            ..oi_http::Options::default()
        })?;
        Ok(Client {
            http,
            endpoint,
            token,
        })
    }

    /// One request: JSON (a JSON merge patch with PATCH), the token as a bearer token.
    pub(crate) async fn call(
        &self,
        method: &Method,
        path: &str,
        body: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let url = format!("{}{path}", self.endpoint);
        let request = oi_http::json_request(method, &url, "oi", Some(self.token), body)
            .with_context(|| url.clone())?;
        match self.http.call(request).await {
            Ok((parts, bytes)) => Ok(Answer {
                status: parts.status.as_u16(),
                body: bytes.to_vec(),
            }),
            Err(e @ oi_http::Error::Connect(_)) if e.to_string().contains("certificate") => {
                Err(anyhow::anyhow!(
                    "{}: the API server's certificate is not trusted by --apiserver-ca-cert-file ({e})",
                    self.endpoint
                ))
            }
            Err(e) => Err(anyhow::anyhow!("{}: unreachable: {e}", self.endpoint)),
        }
    }
}

/// The API server's message of a refusal.
pub(crate) fn refusal(what: &str, r: &Answer) -> anyhow::Error {
    let status: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    let message = status["message"].as_str().map_or_else(
        || String::from_utf8_lossy(&r.body).trim().to_string(),
        str::to_string,
    );
    match r.status {
        401 => anyhow::anyhow!(
            "{what}: the join token was refused (401 Unauthorized): it is wrong, expired or deleted"
        ),
        403 => anyhow::anyhow!("{what}: the join token may not do this (403 Forbidden): {message}"),
        status => anyhow::anyhow!("{what}: the API server answered {status}: {message}"),
    }
}

async fn join(args: &NodeJoinArgs) -> anyhow::Result<String> {
    if !oi_api::validation::is_bootstrap_token(&args.join_token) {
        bail!("--join-token is not a bootstrap token ([a-z0-9]{{6}}.[a-z0-9]{{16}})");
    }
    if !oi_api::validation::is_dns1123_label(&args.nodename) {
        bail!(
            "--nodename {:?} is not a DNS label (lowercase letters, digits and '-', at most 63)",
            args.nodename
        );
    }
    let endpoint = args.apiserver_endpoint.trim_end_matches('/');
    if !endpoint.starts_with("https://") {
        bail!("--apiserver-endpoint {endpoint:?} must be https://HOST:PORT");
    }
    let ca_file = args.apiserver_ca_cert_file.display();
    let ca = std::fs::read_to_string(&args.apiserver_ca_cert_file)
        .with_context(|| format!("--apiserver-ca-cert-file {ca_file}"))?;
    oi_pki::check_ca_certificate(&ca)
        .with_context(|| format!("--apiserver-ca-cert-file {ca_file}"))?;
    let client = Client::new(
        endpoint,
        ca,
        &args.join_token,
        std::time::Duration::from_secs(5),
    )?;

    // 1. The join key, with the token: nothing is written before this succeeds.
    let cm = format!("/api/v1/namespaces/{NAMESPACE}/configmaps/{JOIN_CONFIG_MAP}");
    let r = client.call(&Method::GET, &cm, None).await?;
    if r.status != 200 {
        return Err(refusal("reading the join key", &r));
    }
    let cm: serde_json::Value =
        serde_json::from_slice(&r.body).context("the join key ConfigMap")?;
    let join_key = cm["data"][JOIN_CONFIG_MAP_KEY]
        .as_str()
        .context("the join key ConfigMap has no joinKey")?
        .to_string();
    // A cluster with a VPN: this node must be able to bring WireGuard up, checked before
    // anything is asked or written.
    let vpn_cidr = cm["data"][JOIN_CONFIG_MAP_VPN_KEY]
        .as_str()
        .map(str::to_string);
    if let Some(cidr) = &vpn_cidr {
        vpn_prerequisites(cidr, &args.wireguard_go)?;
    }

    // 2. The symmetric key, kept for a rerun.
    let root = &std::path::absolute(&args.root_dir)
        .with_context(|| format!("--root-dir {}", args.root_dir.display()))?;
    let key_path = under(root, KEY_FILE);
    let (key, stored) = match std::fs::read(&key_path) {
        Ok(bytes) => (
            SymmetricKey::from_bytes(bytes)
                .with_context(|| format!("{}: not a key this command wrote", key_path.display()))?,
            true,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (SymmetricKey::generate(), false),
        Err(e) => return Err(e).with_context(|| key_path.display().to_string()),
    };
    // The node's WireGuard key pair, with a VPN: made here, its private key kept here.
    let vpn_key_path = under(root, VPN_KEY_FILE);
    let vpn_private = match (&vpn_cidr, std::fs::read_to_string(&vpn_key_path)) {
        (None, _) => None,
        (Some(_), Ok(k)) => {
            oi_pki::wireguard_public_key(k.trim()).with_context(|| {
                format!("{}: not a key this command wrote", vpn_key_path.display())
            })?;
            Some(k.trim().to_string())
        }
        (Some(_), Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(oi_pki::generate_wireguard_keys().0)
        }
        (Some(_), Err(e)) => return Err(e).with_context(|| vpn_key_path.display().to_string()),
    };
    let vpn_public = vpn_private
        .as_deref()
        .map(oi_pki::wireguard_public_key)
        .transpose()?;

    // 3. The request.
    let seal = |s: &str| key.seal(s.as_bytes()).map_err(anyhow::Error::from);
    let image_service = args
        .image_service_endpoint
        .clone()
        .unwrap_or_else(|| args.container_runtime_endpoint.clone());
    let mut request = serde_json::json!({
        "apiVersion": "node.oneinfra.ereslibre.es/v1alpha1",
        "kind": "NodeJoinRequest",
        "metadata": {"name": args.nodename},
        "spec": {
            "symmetricKey": key.wrap(&join_key).context("wrapping the key to the join key")?,
            "apiServerEndpoint": seal(endpoint)?,
            "containerRuntimeEndpoint": seal(&args.container_runtime_endpoint)?,
            "imageServiceEndpoint": seal(&image_service)?,
            "extraSANs": args.extra_san.iter().map(|s| seal(s)).collect::<anyhow::Result<Vec<_>>>()?,
        },
    });
    if let Some(public) = &vpn_public {
        request["spec"]["vpnPublicKey"] = seal(public)?.into();
    }
    let r = client
        .call(&Method::POST, REQUESTS, Some(&request.to_string()))
        .await?;
    match r.status {
        201 | 200 => {
            if !stored {
                write_file(&key_path, key.as_bytes(), 0o600)?;
            }
            if let Some(private) = &vpn_private
                && !vpn_key_path.exists()
            {
                write_file(&vpn_key_path, format!("{private}\n").as_bytes(), 0o600)?;
            }
            eprintln!("oi: join request {} created", args.nodename);
        }
        409 if stored => eprintln!(
            "oi: join request {} exists already: waiting for its answer",
            args.nodename
        ),
        409 => bail!(
            "join request {} exists already and was not made from here (no {}): another machine has this name, or its request must be deleted first",
            args.nodename,
            key_path.display()
        ),
        _ => return Err(refusal("creating the join request", &r)),
    }

    // 4. The answer.
    let started = Instant::now();
    let path = format!("{REQUESTS}/{}", args.nodename);
    let mut last_progress = Instant::now();
    let request: NodeJoinRequest = loop {
        let r = client.call(&Method::GET, &path, None).await?;
        if r.status != 200 {
            return Err(refusal("reading the join request", &r));
        }
        let request: NodeJoinRequest =
            serde_json::from_slice(&r.body).context("the join request as the API server has it")?;
        if let Some(c) = request.status.conditions.iter().find(|c| c.type_ == ISSUED) {
            if c.status != oi_api::common::ConditionStatus::True {
                bail!(
                    "the cluster refused join request {}: {}: {}",
                    args.nodename,
                    c.reason,
                    c.message
                );
            }
            break request;
        }
        if started.elapsed() >= args.timeout {
            bail!(
                "join request {} not answered after {:?}: is the cluster reconciled (oi reconcile, or oi-manager running)?",
                args.nodename,
                args.timeout
            );
        }
        if last_progress.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "oi: waiting for the answer to join request {} ({:.0?} so far)",
                args.nodename,
                started.elapsed()
            );
            last_progress = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    // 5. The kubelet's files.
    let s = &request.status;
    let open = |field: &str, sealed: &str| -> anyhow::Result<String> {
        let plain = key.open(sealed).with_context(|| {
            format!(
                "the answer's {field} does not open with this node's key: join request {} was made by another machine",
                args.nodename
            )
        })?;
        String::from_utf8(plain).with_context(|| format!("the answer's {field} is not text"))
    };
    let files = [
        (
            paths::KUBECONFIG,
            open("kubeConfig", &s.kube_config)?,
            0o600,
        ),
        (
            paths::SERVER_CERTIFICATE,
            open("kubeletServerCertificate", &s.kubelet_server_certificate)?,
            0o644,
        ),
        (
            paths::SERVER_PRIVATE_KEY,
            open("kubeletServerPrivateKey", &s.kubelet_server_private_key)?,
            0o600,
        ),
        (
            paths::CLIENT_CA_CERTIFICATE,
            open(
                "kubeletClientCACertificate",
                &s.kubelet_client_ca_certificate,
            )?,
            0o644,
        ),
        (
            paths::CONFIG,
            rooted_config(root, &open("kubeletConfig", &s.kubelet_config)?),
            0o644,
        ),
    ];
    let version = open("kubernetesVersion", &s.kubernetes_version)?;
    let vpn = match &s.vpn {
        None => None,
        Some(v) => Some(Vpn {
            cidr: open("vpn.CIDR", &v.cidr)?,
            address: open("vpn.address", &v.address)?,
            endpoint: open("vpn.endpoint", &v.endpoint)?,
            endpoint_public_key: open("vpn.endpointPublicKey", &v.endpoint_public_key)?,
            // oneinfra's form: the cluster made this node's key.
            private_key: match (v.peer_private_key.as_str(), &vpn_private) {
                ("", Some(own)) => own.clone(),
                ("", None) => bail!(
                    "the answer has a VPN part but no key for this node, and this node made none (the cluster's oneinfra-join ConfigMap did not say it has a VPN)"
                ),
                (sealed, _) => open("vpn.peerPrivateKey", sealed)?,
            },
        }),
    };
    let node_ip = match &vpn {
        Some(v) => Some(
            v.address
                .split('/')
                .next()
                .unwrap_or_default()
                .parse::<std::net::IpAddr>()
                .with_context(|| format!("the answer's VPN address {:?}", v.address))?,
        ),
        None => None,
    };
    let command = kubelet_command(args, root, &image_service, node_ip);
    for (path, contents, mode) in &files {
        write_file(&under(root, path), contents.as_bytes(), *mode)?;
    }
    let vpn_unit = vpn
        .as_ref()
        .map(|_| format!("{}.service", args.vpn_interface));
    write_file(
        &under(root, UNIT_FILE),
        unit(&command, vpn_unit.as_deref()).as_bytes(),
        0o644,
    )?;
    let systemd = root == Path::new("/") && Path::new("/run/systemd/system").is_dir();

    // 6. The VPN.
    let mut note = format!(
        "node {} joined the cluster (Kubernetes {version}): kubelet files in {}, unit {}",
        args.nodename,
        under(root, "/etc/oneinfra").display(),
        under(root, UNIT_FILE).display()
    );
    if let (Some(v), Some(vpn_unit)) = (&vpn, &vpn_unit) {
        let iface = &args.vpn_interface;
        let conf = under(root, &format!("/etc/oneinfra/{iface}.conf"));
        let script = under(root, &format!("/etc/oneinfra/{iface}.sh"));
        write_file(&conf, wireguard_config(v).as_bytes(), 0o600)?;
        write_file(
            &script,
            vpn_script(iface, &conf, &v.address, &args.wireguard_go).as_bytes(),
            0o700,
        )?;
        write_file(
            &under(root, &format!("/etc/systemd/system/{vpn_unit}")),
            vpn_unit_file(iface, &script).as_bytes(),
            0o644,
        )?;
        if systemd {
            systemctl(&["daemon-reload"])?;
            systemctl(&["enable", "--now", vpn_unit])?;
        } else {
            let out = std::process::Command::new("sh")
                .arg(&script)
                .output()
                .with_context(|| format!("running {}", script.display()))?;
            if !out.status.success() {
                bail!(
                    "the cluster VPN interface {iface} could not be brought up ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        note.push_str(&format!(
            "; VPN {iface} {} to {} (unit {})",
            v.address,
            v.endpoint,
            under(root, &format!("/etc/systemd/system/{vpn_unit}")).display()
        ));
    }

    // 7. The kubelet.
    if systemd {
        for step in [
            vec!["daemon-reload"],
            vec!["enable", "--now", "kubelet.service"],
        ] {
            let status = std::process::Command::new("systemctl")
                .args(&step)
                .status()
                .context("running systemctl")?;
            if !status.success() {
                bail!("systemctl {} failed ({status})", step.join(" "));
            }
        }
        note.push_str("; the kubelet runs under systemd (systemctl status kubelet)");
    } else {
        note.push_str(&format!(
            "\nsystemd does not run here: start the kubelet with:\n  {}",
            command.join(" ")
        ));
    }
    Ok(note)
}

/// The kubelet configuration with the files it names under `root`, where they were written.
fn rooted_config(root: &Path, config: &str) -> String {
    [
        paths::SERVER_CERTIFICATE,
        paths::SERVER_PRIVATE_KEY,
        paths::CLIENT_CA_CERTIFICATE,
    ]
    .iter()
    .fold(config.to_string(), |config, path| {
        config.replace(
            &format!(": {path}\n"),
            &format!(": {}\n", under(root, path).display()),
        )
    })
}

/// Whether this node can bring the cluster VPN up: `ip` and `wg`, and WireGuard in the
/// kernel or `wireguard_go`.
fn vpn_prerequisites(cidr: &str, wireguard_go: &Path) -> anyhow::Result<()> {
    let found = |program: &Path| -> bool {
        if program.components().count() > 1 {
            return program.is_file();
        }
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
    };
    let mut missing = Vec::new();
    for (program, package) in [("ip", "iproute2"), ("wg", "wireguard-tools")] {
        if !found(Path::new(program)) {
            missing.push(format!("{program} ({package})"));
        }
    }
    let kernel = Path::new("/sys/module/wireguard").is_dir();
    if !kernel && !found(wireguard_go) {
        missing.push(format!(
            "WireGuard: the kernel has none and {} is not found (wireguard-go)",
            wireguard_go.display()
        ));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        bail!(
            "the cluster has a VPN ({cidr}) and this node cannot join it: missing {}",
            missing.join(", ")
        )
    }
}

/// The VPN part of an answer, opened.
struct Vpn {
    cidr: String,
    address: String,
    endpoint: String,
    endpoint_public_key: String,
    private_key: String,
}

/// The node's WireGuard configuration (`wg setconf`): its key, the cluster's endpoint as its
/// one peer for the whole VPN CIDR, a keepalive that keeps its NAT mapping open.
fn wireguard_config(v: &Vpn) -> String {
    format!(
        "# The oneinfra cluster VPN of this node (written by oi node join).\n[Interface]\nPrivateKey = {}\n\n[Peer]\nPublicKey = {}\nEndpoint = {}\nAllowedIPs = {}\nPersistentKeepalive = {}\n",
        v.private_key,
        v.endpoint_public_key,
        v.endpoint,
        v.cidr,
        oi_planner::vpn::WORKER_KEEPALIVE
    )
}

/// The script that brings the VPN interface up (run at once, and by its unit at boot): the
/// kernel's WireGuard, else `wireguard_go`; the configuration; the address; up.
fn vpn_script(iface: &str, conf: &Path, address: &str, wireguard_go: &Path) -> String {
    format!(
        "#!/bin/sh\n\
         # The oneinfra cluster VPN of this node (written by oi node join): interface {iface}.\n\
         set -eu\n\
         ip link del dev {iface} 2>/dev/null || true\n\
         # A userspace instance goes with its interface; wait until its socket is free.\n\
         i=0\n\
         while wg show {iface} >/dev/null 2>&1 && [ \"$i\" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done\n\
         if ! ip link add dev {iface} type wireguard 2>/dev/null; then\n\
         \x20 {wg_go} {iface}\n\
         fi\n\
         wg setconf {iface} {conf}\n\
         ip address add {address} dev {iface}\n\
         ip link set dev {iface} mtu 1420 up\n",
        wg_go = wireguard_go.display(),
        conf = conf.display(),
    )
}

/// The VPN interface's systemd unit: the script once at boot, before the kubelet.
fn vpn_unit_file(iface: &str, script: &Path) -> String {
    format!(
        "[Unit]\nDescription=oneinfra cluster VPN ({iface})\nWants=network-online.target\nAfter=network-online.target\nBefore=kubelet.service\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sh {}\nExecStop=/sbin/ip link del dev {iface}\n\n[Install]\nWantedBy=multi-user.target\n",
        script.display()
    )
}

fn systemctl(step: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new("systemctl")
        .args(step)
        .status()
        .context("running systemctl")?;
    if !status.success() {
        bail!("systemctl {} failed ({status})", step.join(" "));
    }
    Ok(())
}

/// The kubelet's command line on this node; with the VPN, its Node's address is its VPN
/// address (`--node-ip`), where the API servers reach it.
fn kubelet_command(
    args: &NodeJoinArgs,
    root: &Path,
    image_service: &str,
    node_ip: Option<std::net::IpAddr>,
) -> Vec<String> {
    let mut command = vec![
        args.kubelet_binary.display().to_string(),
        format!("--kubeconfig={}", under(root, paths::KUBECONFIG).display()),
        format!("--config={}", under(root, paths::CONFIG).display()),
        format!(
            "--container-runtime-endpoint={}",
            args.container_runtime_endpoint
        ),
        format!("--image-service-endpoint={image_service}"),
        format!("--hostname-override={}", args.nodename),
    ];
    if let Some(ip) = node_ip {
        command.push(format!("--node-ip={ip}"));
    }
    command
}

/// The kubelet's systemd unit; after the VPN's unit when there is one.
pub fn unit(command: &[String], vpn_unit: Option<&str>) -> String {
    let (wants, after) = match vpn_unit {
        Some(u) => (
            format!("network-online.target {u}"),
            format!("network-online.target {u}"),
        ),
        None => (
            "network-online.target".to_string(),
            "network-online.target".to_string(),
        ),
    };
    format!(
        "[Unit]\nDescription=kubelet (joined by oi node join)\nDocumentation=https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/\nWants={wants}\nAfter={after}\n\n[Service]\nExecStart={}\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\n",
        command.join(" ")
    )
}

/// `path` (absolute) under `root`.
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Writes a file atomically with `mode` from its creation, its directory made when missing
/// ([`oi_cli_io::write_file`]).
fn write_file(path: &Path, contents: &[u8], mode: u32) -> anyhow::Result<()> {
    oi_cli_io::write_file(path, contents, mode)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_the_kubelet_with_the_joined_files() {
        let command = vec![
            "/usr/bin/kubelet".to_string(),
            "--kubeconfig=/etc/oneinfra/kubelet.conf".to_string(),
        ];
        let plain = unit(&command, None);
        assert!(plain.contains(
            "\nExecStart=/usr/bin/kubelet --kubeconfig=/etc/oneinfra/kubelet.conf\nRestart=always\n"
        ));
        assert!(plain.contains("\nAfter=network-online.target\n"));
        assert!(plain.ends_with("[Install]\nWantedBy=multi-user.target\n"));
        let with_vpn = unit(&command, Some("oi-wg.service"));
        assert!(with_vpn.contains("\nWants=network-online.target oi-wg.service\n"));
        assert!(with_vpn.contains("\nAfter=network-online.target oi-wg.service\n"));
    }

    fn vpn() -> Vpn {
        Vpn {
            cidr: "10.0.0.0/16".into(),
            address: "10.0.0.2/16".into(),
            endpoint: "192.0.2.1:30002".into(),
            endpoint_public_key: "ENDPOINT".into(),
            private_key: "PRIVATE".into(),
        }
    }

    #[test]
    fn the_vpn_configuration_peers_with_the_endpoint_for_the_whole_cidr() {
        assert_eq!(
            wireguard_config(&vpn()),
            "# The oneinfra cluster VPN of this node (written by oi node join).\n[Interface]\nPrivateKey = PRIVATE\n\n[Peer]\nPublicKey = ENDPOINT\nEndpoint = 192.0.2.1:30002\nAllowedIPs = 10.0.0.0/16\nPersistentKeepalive = 20\n"
        );
    }

    #[test]
    fn the_vpn_script_prefers_the_kernel_and_falls_back_to_wireguard_go() {
        let script = vpn_script(
            "oi-wg",
            Path::new("/etc/oneinfra/oi-wg.conf"),
            "10.0.0.2/16",
            Path::new("/usr/bin/wireguard-go"),
        );
        assert!(script.starts_with("#!/bin/sh\n"));
        let lines: Vec<&str> = script.lines().collect();
        for expected in [
            "set -eu",
            "ip link del dev oi-wg 2>/dev/null || true",
            "if ! ip link add dev oi-wg type wireguard 2>/dev/null; then",
            "  /usr/bin/wireguard-go oi-wg",
            "wg setconf oi-wg /etc/oneinfra/oi-wg.conf",
            "ip address add 10.0.0.2/16 dev oi-wg",
            "ip link set dev oi-wg mtu 1420 up",
        ] {
            assert!(lines.contains(&expected), "{expected:?} missing:\n{script}");
        }
        // POSIX sh reads it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sh");
        std::fs::write(&path, &script).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let unit = vpn_unit_file("oi-wg", Path::new("/etc/oneinfra/oi-wg.sh"));
        assert!(unit.contains("\nBefore=kubelet.service\n"));
        assert!(unit.contains(
            "\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sh /etc/oneinfra/oi-wg.sh\n"
        ));
    }

    #[test]
    fn the_kubelet_config_names_its_files_where_they_were_written() {
        let config = oi_planner::join::kubelet_config("10.96.0.10");
        assert_eq!(rooted_config(Path::new("/"), &config), config);
        let rooted = rooted_config(Path::new("/srv/node"), &config);
        assert!(rooted.contains("tlsCertFile: /srv/node/etc/oneinfra/kubelet.crt\n"));
        assert!(rooted.contains("tlsPrivateKeyFile: /srv/node/etc/oneinfra/kubelet.key\n"));
        assert!(rooted.contains("clientCAFile: /srv/node/etc/oneinfra/kubelet-client-ca.crt\n"));
    }

    #[test]
    fn files_are_written_with_their_mode_from_creation() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = under(dir.path(), "/etc/oneinfra/kubelet.key");
        write_file(&path, b"secret", 0o600).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"secret");
        write_file(&path, b"again", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"again");
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
