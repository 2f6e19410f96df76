//! The kube-controller-manager and kube-scheduler stand-ins.
//!
//! ```text
//!  start: --kubeconfig (and the authn/authz kubeconfigs) loaded; controller-manager files
//!         parsed: signing CA + key (must match), root CA, service-account private key
//!         /healthz /livez /readyz on --bind-address:--secure-port, HTTPS with
//!         --tls-cert-file/--tls-private-key-file or a self-signed certificate made at start
//!  every 2 s: GET /healthz, /version, /api on the kubeconfig's server with its client cert
//!         no success for longer than the grace period ──► exit 1
//!  controller-manager: leader election over the Lease --leader-elect-resource-name in
//!         kube-system (leader.rs); while leading, the controllers of controllers.rs
//! ```
//!
//! The scheduler stand-in schedules nothing and elects no leader: it only proves that its
//! kubeconfig, certificates and flags work against the API server.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::ControllerConfig;
use crate::https::{self, chain};
use crate::keys::{self, KeyError};
use crate::kubeconfig::{self, Kubeconfig, KubeconfigError};
use crate::serve::{self, Handler};
use crate::tls::{self, TlsError};

/// How often the API server is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The default grace period before giving up on the API server.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// Why a controller stand-in stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A kubeconfig.
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    /// Serving certificates, or certificates given by flags.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Keys given by flags.
    #[error(transparent)]
    Keys(#[from] KeyError),
    /// The self-signed serving certificate.
    #[error("cannot make a self-signed serving certificate")]
    SelfSigned(#[source] rcgen::Error),
    /// The listening socket.
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
    /// The API server never answered, or stopped answering, for longer than the grace period.
    #[error(
        "no successful check of the API server at {server} for {grace:?} (grace period, env KUBE_STANDIN_GRACE_SECONDS); last error: {last_error}"
    )]
    ApiServerUnreachable {
        /// The server URL.
        server: String,
        /// The grace period.
        grace: Duration,
        /// The last failure.
        last_error: String,
    },
}

/// Runs a controller stand-in until SIGTERM/SIGINT (Ok) or until the API server has not been
/// reachable with the kubeconfig's credentials for longer than `grace` (Err).
///
/// # Errors
/// See [`ControllerError`].
pub async fn run(config: ControllerConfig, grace: Duration) -> Result<(), ControllerError> {
    let termination = serve::termination();
    tokio::pin!(termination);
    let command = config.role.command();

    let kubeconfig = kubeconfig::load(&config.kubeconfig)?;
    tracing::info!(
        "kubeconfig {}: context {:?}, user {:?}, server {}",
        config.kubeconfig.display(),
        kubeconfig.context,
        kubeconfig.user,
        kubeconfig.server.url
    );
    for (flag, path) in [
        (
            "authentication-kubeconfig",
            &config.authentication_kubeconfig,
        ),
        ("authorization-kubeconfig", &config.authorization_kubeconfig),
    ] {
        if let Some(path) = path {
            let loaded = kubeconfig::load(path)?;
            tracing::info!("--{flag} {}: server {}", path.display(), loaded.server.url);
        }
    }
    if let Some(extras) = &config.controller_manager {
        if let Some((cert, key)) = &extras.cluster_signing {
            tls::certs_from_pem(&tls::read(cert)?, &cert.display().to_string())?;
            keys::check_private_matches(key, &[cert.as_path()])?;
            tracing::info!(
                "cluster signing certificate {} and key {} match",
                cert.display(),
                key.display()
            );
        }
        if let Some(root_ca) = &extras.root_ca {
            let certs = tls::certs_from_pem(&tls::read(root_ca)?, &root_ca.display().to_string())?;
            tracing::info!(
                "root CA {}: {} certificate(s)",
                root_ca.display(),
                certs.len()
            );
        }
        if let Some(key) = &extras.service_account_private_key {
            keys::private_key_public_half(key)?;
            tracing::info!("service-account private key {} parses", key.display());
        }
        tracing::info!(
            "controllers {}; cluster CIDRs {:?}; service ranges {:?}; allocate node CIDRs {}; service-account credentials {}",
            extras.controllers.join(","),
            extras
                .cluster_cidrs
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>(),
            extras
                .service_cluster_ip_ranges
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>(),
            extras.allocate_node_cidrs,
            extras.use_service_account_credentials
        );
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut background = Vec::new();
    if let Some(extras) = &config.controller_manager {
        let client = crate::client::Client::new(&kubeconfig);
        let root_ca = match &extras.root_ca {
            Some(path) => Some(String::from_utf8_lossy(&tls::read(path)?).into_owned()),
            None => None,
        };
        let controllers =
            crate::controllers::Controllers::new(client.clone(), extras.clone(), root_ca);
        let not_run: Vec<&String> = extras
            .controllers
            .iter()
            .filter(|c| *c != "*" && !c.starts_with('-'))
            .filter(|c| {
                !crate::controllers::IMPLEMENTED
                    .iter()
                    .any(|(name, _)| name == c)
            })
            .collect();
        tracing::info!(
            "controllers run by the stand-in: {}; named but not implemented: {:?}",
            controllers.running().join(","),
            not_run
        );
        let (leading_tx, leading_rx) = watch::channel(!config.leader_elect);
        if config.leader_elect {
            let identity = format!("{}_{}", hostname(), crate::api::meta::uid());
            tracing::info!(
                "leader election: Lease {}/{} as {identity}",
                config.leader_election.namespace,
                config.leader_election.name
            );
            let elector =
                crate::leader::Elector::new(client, config.leader_election.clone(), identity);
            background.push(tokio::spawn(elector.run(leading_tx, stop_rx.clone())));
        } else {
            tracing::info!("leader election off: leading at once");
            drop(leading_tx);
        }
        background.push(tokio::spawn(controllers.run(leading_rx, stop_rx.clone())));
    }
    let server = if config.secure_port == 0 {
        tracing::info!("--secure-port=0: not serving /healthz");
        None
    } else {
        let tls = serving_tls(&config)?;
        let address = SocketAddr::new(config.bind_address, config.secure_port);
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| ControllerError::Bind { address, source })?;
        tracing::info!("serving /healthz securely on {address}");
        Some(tokio::spawn(serve::serve(
            listener,
            tls,
            health_handler(),
            stop_rx,
        )))
    };

    let result = tokio::select! {
        result = watch_api_server(command, &kubeconfig, grace) => result,
        signal = &mut termination => {
            let signal = signal.map_err(ControllerError::Signals)?;
            tracing::info!("{signal} received, shutting down");
            Ok(())
        }
    };
    // Nobody else sends on this channel; a send error only means every receiver is gone.
    let _ = stop_tx.send(true);
    if let Some(server) = server {
        let _ = server.await;
    }
    for task in background {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    result
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

fn serving_tls(
    config: &ControllerConfig,
) -> Result<std::sync::Arc<rustls::ServerConfig>, ControllerError> {
    let (certs, key) = match &config.serving {
        Some((cert, key)) => {
            let certs = tls::certs_from_pem(&tls::read(cert)?, &cert.display().to_string())?;
            let key = tls::key_from_pem(&tls::read(key)?, &key.display().to_string())?;
            tracing::info!("serving with {}", cert.display());
            (certs, key)
        }
        None => {
            let mut names = vec!["localhost".to_string()];
            if !config.bind_address.is_unspecified() {
                names.push(config.bind_address.to_string());
            } else {
                names.push("127.0.0.1".to_string());
            }
            let certified =
                rcgen::generate_simple_self_signed(names).map_err(ControllerError::SelfSigned)?;
            tracing::info!("serving with a self-signed certificate made at start");
            let certs = vec![certified.cert.der().clone()];
            let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
                certified.signing_key.serialize_der().into(),
            );
            (certs, key)
        }
    };
    Ok(tls::server_config(
        certs,
        key,
        None,
        "the controller stand-in's /healthz",
    )?)
}

fn health_handler() -> Handler {
    std::sync::Arc::new(|request, _who| match request.uri().path() {
        "/healthz" | "/livez" | "/readyz" => serve::text(StatusCode::OK, "ok"),
        other => serve::not_found(other),
    })
}

/// One round of checks; the success message or the failure.
async fn check_once(kubeconfig: &Kubeconfig) -> Result<String, String> {
    let get = |path: &'static str| async move {
        let response = https::request(
            &kubeconfig.tls,
            &kubeconfig.server,
            Method::GET,
            path,
            None,
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|e| chain(&e))?;
        if response.status != StatusCode::OK {
            return Err(format!(
                "GET {path}: HTTP {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body).trim()
            ));
        }
        Ok(response.body)
    };
    get("/healthz").await?;
    let version = get("/version").await?;
    let git_version = serde_json::from_slice::<serde_json::Value>(&version)
        .ok()
        .and_then(|v| {
            v.get("gitVersion")
                .and_then(|g| g.as_str())
                .map(String::from)
        })
        .ok_or_else(|| "GET /version: no gitVersion in the answer".to_string())?;
    get("/api").await?;
    Ok(format!(
        "/healthz ok, /version {git_version}, /api ok as kubeconfig user {:?}",
        kubeconfig.user
    ))
}

async fn watch_api_server(
    command: &str,
    kubeconfig: &Kubeconfig,
    grace: Duration,
) -> Result<(), ControllerError> {
    let server = kubeconfig.server.url.clone();
    let mut last_ok = Instant::now();
    let mut healthy: Option<bool> = None;
    let mut last_error = String::new();
    let mut same_failures: u32 = 0;
    let mut interval = tokio::time::interval(CHECK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        match check_once(kubeconfig).await {
            Ok(message) => {
                if healthy != Some(true) {
                    tracing::info!("{command} stand-in: API server {server} ok: {message}");
                }
                healthy = Some(true);
                last_ok = Instant::now();
                same_failures = 0;
            }
            Err(error) => {
                if healthy != Some(false) || error != last_error || same_failures.is_multiple_of(15)
                {
                    tracing::warn!(
                        "{command} stand-in: API server {server} check failed ({:?} since the last success): {error}",
                        last_ok.elapsed()
                    );
                }
                same_failures += 1;
                healthy = Some(false);
                last_error = error;
                if last_ok.elapsed() > grace {
                    return Err(ControllerError::ApiServerUnreachable {
                        server,
                        grace,
                        last_error,
                    });
                }
            }
        }
    }
}

/// The grace period from [`crate::GRACE_ENV`], or [`DEFAULT_GRACE`].
///
/// # Errors
/// A value that is not a whole number of seconds.
pub fn grace_from_env() -> Result<Duration, String> {
    match std::env::var(crate::GRACE_ENV) {
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| {
                format!(
                    "{}={v:?} is not a whole number of seconds",
                    crate::GRACE_ENV
                )
            }),
        Err(_) => Ok(DEFAULT_GRACE),
    }
}
