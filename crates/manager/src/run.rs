//! `oi-manager run`: the controllers on a management cluster, with kube-runtime.
//!
//! ```text
//!  start ─► HTTP: /metrics (8080), /healthz /readyz (8081) ─► kubeconfig ─► API server
//!        reachable, CRDs installed (else exit 1, naming the server) ─► /readyz 200 (standby)
//!  ─► leader election on a Lease (--leader-elect) ─► leader: three Controllers
//!        Cluster    (watches Clusters; owns Components; Hypervisors ─► clusters on them)
//!        Component  (watches Components)          ─► controller::reconcile_*(key, ctx)
//!        Hypervisor (watches Hypervisors)            Action ─► requeue, error ─► backoff
//!  ─► leadership lost: exit 1 (the Deployment restarts the pod as a candidate)
//!  ─► SIGTERM/SIGINT: controllers drain, the Lease is released, exit 0
//! ```
//!
//! As in the in-process driver, two reconciles of one cluster (the Cluster and one of its
//! Components) never run at once, and at most `--concurrency` reconciles run in all.
//!
//! The command line is defined here too ([`Cli`]), so that tests parse the Deployment's
//! arguments with the real parser.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{ArgAction, Args, Parser, Subcommand};
use futures::{FutureExt as _, StreamExt as _};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::controller::{self as kube_controller, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use oi_api::versions::INFRA;
use oi_api::{Component, DEFAULT_NAMESPACE, Kind, ObjectKey};
use oi_cri::ClientOptions;
use oi_engine::{CriConnector, RealNetwork};
use oi_planner::render::RenderOptions;
use tokio::sync::{Semaphore, oneshot, watch};

use crate::controller::{self, Action, Context, ControllerKind, ManagerOptions, ReconcileError};
use crate::http::{self, Endpoints, Readiness};
use crate::kube_store::{KubeStore, api_resource};
use crate::leader::{LeaderElector, LeaseConfig};
use crate::metrics::Metrics;

/// The default name of the leader Lease.
pub const DEFAULT_LEADER_ELECTION_ID: &str = "oi-manager.oneinfra.ereslibre.es";
/// The namespace of the Lease when neither the flag nor `POD_NAMESPACE` says.
pub const DEFAULT_LEADER_ELECTION_NAMESPACE: &str = "oneinfra-system";
/// The events' `reportingController`.
pub const REPORTER: &str = "oneinfra.ereslibre.es/oi-manager";
/// How long changes are gathered before a key reconciles: a status write and the watch
/// event it causes do not each cost a reconcile.
pub const DEBOUNCE: Duration = Duration::from_millis(500);
/// How often readiness looks whether a controller's cache is filled.
const SYNC_POLL: Duration = Duration::from_millis(250);

// ---------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------

/// oi-manager: oneinfra's controllers over Hypervisor, Cluster and Component custom
/// resources on a management Kubernetes cluster.
#[derive(Debug, Parser)]
#[command(
    name = "oi-manager",
    version,
    max_term_width = 100,
    after_help = "Examples:\n  oi-manager crds | kubectl apply -f -\n  \
                  oi-manager run --kubeconfig ~/.kube/config --leader-elect=false"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions of the four kinds (multi-document YAML), as
    /// committed under config/crd.
    Crds,

    /// Run the Cluster, Component and Hypervisor controllers against a management cluster.
    Run(Box<RunArgs>),

    /// Print the version of oi-manager.
    Version,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubeconfig of the management cluster. Without it: KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Watch Clusters and Components of this namespace only (Hypervisors are cluster
    /// scoped and always watched). Default: every namespace.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Elect a leader on a Lease, so that several replicas can run and one reconciles.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,

    /// Namespace of the leader Lease.
    #[arg(long, value_name = "NAMESPACE", env = "POD_NAMESPACE",
          default_value = DEFAULT_LEADER_ELECTION_NAMESPACE)]
    pub leader_election_namespace: String,

    /// Name of the leader Lease.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_LEADER_ELECTION_ID)]
    pub leader_election_id: String,

    /// This replica's identity in the Lease and in events. Default: the host name and the
    /// process id.
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub leader_election_identity: Option<String>,

    /// How long a Lease stays valid after its last renewal.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = oi_cli_io::parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// A leader that could not renew for this long steps down (and oi-manager exits).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = oi_cli_io::parse_duration)]
    pub leader_election_renew_deadline: Duration,

    /// Delay between attempts to acquire or renew the Lease.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = oi_cli_io::parse_duration)]
    pub leader_election_retry_period: Duration,

    /// Where /metrics is served.
    #[arg(long, value_name = "ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: SocketAddr,

    /// Where /healthz and /readyz are served.
    #[arg(long, value_name = "ADDRESS", default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: SocketAddr,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,

    /// How long one reconcile waits for a cluster to become ready before requeueing it.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: Duration,

    /// Next look at a ready cluster (drift check).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub requeue_ready: Duration,

    /// Next look at a cluster that is not ready yet.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = oi_cli_io::parse_duration)]
    pub requeue_not_ready: Duration,

    /// How often each hypervisor's CRI endpoint is probed.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = oi_cli_io::parse_duration)]
    pub hypervisor_probe_interval: Duration,

    /// First delay after a failed reconcile, doubled per consecutive failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = oi_cli_io::parse_duration)]
    pub backoff_min: Duration,

    /// Longest delay after failed reconciles.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub backoff_max: Duration,

    /// How many reconciles run at once (all controllers together).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub concurrency: usize,

    /// On SIGTERM, how long reconciles under way may take to finish before the process
    /// exits (then without releasing the Lease, which expires).
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = oi_cli_io::parse_duration)]
    pub shutdown_timeout: Duration,

    /// Log filter (tracing's EnvFilter syntax: `info`, `oi_manager=debug,kube=warn`).
    #[arg(long, value_name = "FILTER", env = "RUST_LOG", default_value = "info")]
    pub log: String,
}

/// Parses a command line (`args[0]` is the program name).
///
/// # Errors
/// clap's error for unknown flags and bad values; `.exit()` prints it with usage.
pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args)
}

/// Flags that parse but do not make sense together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("--{flag} must be longer than zero")]
    Zero { flag: &'static str },
    #[error("--backoff-min ({min:?}) must not be longer than --backoff-max ({max:?})")]
    Backoff { min: Duration, max: Duration },
    #[error(
        "--leader-election-lease-duration ({lease:?}) must be longer than \
         --leader-election-renew-deadline ({renew:?}), which must be longer than \
         --leader-election-retry-period ({retry:?})"
    )]
    Lease {
        lease: Duration,
        renew: Duration,
        retry: Duration,
    },
    #[error("--{flag} must not be empty")]
    Empty { flag: &'static str },
}

/// What `run` works with, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub kubeconfig: Option<PathBuf>,
    pub namespace: Option<String>,
    /// `None` without leader election.
    pub lease: Option<LeaseConfig>,
    pub identity: String,
    pub metrics_address: SocketAddr,
    pub probe_address: SocketAddr,
    pub options: ManagerOptions,
    pub toolbox_image: String,
    pub concurrency: usize,
    pub shutdown_timeout: Duration,
}

impl RunArgs {
    /// Checks the flags and builds the settings. `default_identity` is used when neither
    /// `--leader-election-identity` nor `POD_NAME` says.
    ///
    /// # Errors
    /// [`ArgsError`] for zero durations, a backoff or lease timing out of order, empty names.
    pub fn settings(&self, default_identity: &str) -> Result<Settings, ArgsError> {
        for (flag, value) in [
            ("max-wait", self.max_wait),
            ("requeue-ready", self.requeue_ready),
            ("requeue-not-ready", self.requeue_not_ready),
            ("hypervisor-probe-interval", self.hypervisor_probe_interval),
            ("backoff-min", self.backoff_min),
            (
                "leader-election-retry-period",
                self.leader_election_retry_period,
            ),
        ] {
            if value.is_zero() {
                return Err(ArgsError::Zero { flag });
            }
        }
        if self.concurrency == 0 {
            return Err(ArgsError::Zero {
                flag: "concurrency",
            });
        }
        if self.backoff_min > self.backoff_max {
            return Err(ArgsError::Backoff {
                min: self.backoff_min,
                max: self.backoff_max,
            });
        }
        if self.namespace.as_deref() == Some("") {
            return Err(ArgsError::Empty { flag: "namespace" });
        }
        let identity = match self.leader_election_identity.as_deref() {
            Some("") => {
                return Err(ArgsError::Empty {
                    flag: "leader-election-identity",
                });
            }
            Some(identity) => identity.to_string(),
            None => default_identity.to_string(),
        };
        let lease = if self.leader_elect {
            let (lease, renew, retry) = (
                self.leader_election_lease_duration,
                self.leader_election_renew_deadline,
                self.leader_election_retry_period,
            );
            if lease <= renew || renew <= retry {
                return Err(ArgsError::Lease {
                    lease,
                    renew,
                    retry,
                });
            }
            for (flag, value) in [
                ("leader-election-namespace", &self.leader_election_namespace),
                ("leader-election-id", &self.leader_election_id),
            ] {
                if value.is_empty() {
                    return Err(ArgsError::Empty { flag });
                }
            }
            Some(LeaseConfig {
                namespace: self.leader_election_namespace.clone(),
                name: self.leader_election_id.clone(),
                identity: identity.clone(),
                lease_duration: lease,
                renew_deadline: renew,
                retry_period: retry,
            })
        } else {
            None
        };
        let repository = self.image_repository.clone().filter(|r| !r.is_empty());
        let mut options = ManagerOptions::default();
        options.plan.render = RenderOptions {
            image_repository: repository.clone(),
        };
        options.execute.max_wait = self.max_wait;
        options.requeue_ready = self.requeue_ready;
        options.requeue_not_ready = self.requeue_not_ready;
        options.hypervisor_probe_interval = self.hypervisor_probe_interval;
        options.backoff_min = self.backoff_min;
        options.backoff_max = self.backoff_max;
        Ok(Settings {
            kubeconfig: self.kubeconfig.clone(),
            namespace: self.namespace.clone(),
            lease,
            identity,
            metrics_address: self.metrics_bind_address,
            probe_address: self.health_probe_bind_address,
            options,
            toolbox_image: INFRA.toolbox.reference(repository.as_deref()),
            concurrency: self.concurrency,
            shutdown_timeout: self.shutdown_timeout,
        })
    }
}

/// `HOST_PID`: unique among processes that run at once, which is what a Lease holder must
/// be (two processes with one identity would both think they lead).
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "oi-manager".to_string());
    format!("{host}_{}", std::process::id())
}

// ---------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------

/// The context of the manager's reconciles on a management cluster.
pub type KubeContext = Context<KubeStore, CriConnector, RealNetwork>;

/// Runs the manager until SIGTERM or SIGINT (then `Ok`) or until something stops it
/// (`Err`).
///
/// # Errors
/// When a bind address is taken, the kubeconfig cannot be loaded, the API server cannot be
/// reached or lacks the CRDs, leadership is lost, or the controllers stop.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let (ready_tx, ready_rx) = watch::channel(Readiness::not_ready("connecting to the API server"));
    let _servers = serve_http(&settings, Arc::clone(&metrics), ready_rx).await?;

    let stop = shutdown_signal()?;
    let mut stopped = stop.clone();
    let connected = async {
        let (client, server) = connect(settings.kubeconfig.as_ref()).await?;
        check_api(&client, &server, settings.namespace.as_deref()).await?;
        anyhow::Ok((client, server))
    };
    let (client, server) = tokio::select! {
        connected = connected => connected?,
        _ = stopped.wait_for(|s| *s) => {
            tracing::info!("shutting down before connecting");
            return Ok(());
        }
    };
    tracing::info!(%server, identity = %settings.identity, "connected to the management cluster");
    // A standby replica is ready: it reaches the API server and can take over.
    ready_tx.send_replace(Readiness::Ready);

    let (release_tx, release_rx) = oneshot::channel::<()>();
    let (mut leading, elector, _always_leading) = match &settings.lease {
        Some(lease) => {
            tracing::info!(lease = %format!("{}/{}", lease.namespace, lease.name), "waiting for leadership");
            let (rx, handle) = LeaderElector::new(client.clone(), lease.clone()).spawn(
                Arc::clone(&metrics),
                async move {
                    let _ = release_rx.await;
                },
            );
            (rx, Some(handle), None)
        }
        None => {
            metrics.set_leader(true);
            let (tx, rx) = watch::channel(true);
            (rx, None, Some(tx))
        }
    };

    let mut stopped = stop.clone();
    tokio::select! {
        result = leading.wait_for(|l| *l) => {
            if result.is_err() {
                anyhow::bail!("leader election stopped unexpectedly");
            }
        }
        _ = stopped.wait_for(|s| *s) => {
            tracing::info!("shutting down before leading");
            drop(release_tx);
            if let Some(elector) = elector {
                let _ = tokio::time::timeout(Duration::from_secs(5), elector).await;
            }
            return Ok(());
        }
    }

    tracing::info!("leading: starting the controllers");
    let store = KubeStore::new(client.clone(), REPORTER, settings.identity.clone());
    let connector = CriConnector {
        options: ClientOptions {
            toolbox_image: settings.toolbox_image.clone(),
            ..ClientOptions::default()
        },
    };
    let ctx = Context::new(
        Arc::new(store),
        connector,
        RealNetwork::default(),
        settings.options.clone(),
        Arc::clone(&metrics),
    );
    let (graceful_tx, graceful_rx) = oneshot::channel::<()>();
    let graceful = graceful_rx.map(|_| ()).shared();
    let wakeups = ctx.cluster_wakeups();
    let controllers = Controllers::new(&client, settings.namespace.as_deref(), wakeups);
    let syncing = controllers.syncing();
    let readiness = tokio::spawn({
        let ready_tx = ready_tx.clone();
        async move {
            for (kind, store) in syncing {
                ready_tx.send_replace(Readiness::not_ready(format!(
                    "waiting for the {kind} watch to sync"
                )));
                // Polled again and again: the store's readiness is a oneshot that wakes only
                // its last poller, and the controller's applier polls it too.
                loop {
                    match tokio::time::timeout(SYNC_POLL, store.wait_until_ready()).await {
                        Ok(Ok(())) => break,
                        Ok(Err(_)) => return,
                        Err(_) => {}
                    }
                }
            }
            ready_tx.send_replace(Readiness::Ready);
        }
    });
    let shared = Arc::new(Shared {
        ctx,
        groups: Groups::default(),
        permits: Semaphore::new(settings.concurrency),
    });
    let running = controllers.run(shared, graceful);
    tokio::pin!(running);

    let mut stopped = stop.clone();
    let result = tokio::select! {
        () = &mut running => Err(anyhow::anyhow!("the controllers stopped unexpectedly")),
        _ = leading.wait_for(|l| !*l) => Err(anyhow::anyhow!(
            "lost leadership of Lease {}: exiting, so that this replica restarts as a candidate",
            settings.lease.as_ref().map(|l| format!("{}/{}", l.namespace, l.name)).unwrap_or_default()
        )),
        _ = stopped.wait_for(|s| *s) => Ok(()),
    };
    readiness.abort();
    result?;
    tracing::info!("shutting down: waiting for the reconciles under way");
    ready_tx.send_replace(Readiness::not_ready("shutting down"));
    let _ = graceful_tx.send(());
    if tokio::time::timeout(settings.shutdown_timeout, &mut running)
        .await
        .is_err()
    {
        // Releasing now would let another replica start while ours still write: the Lease
        // expires instead.
        tracing::warn!(
            timeout = ?settings.shutdown_timeout,
            "reconciles still under way: exiting without releasing the Lease"
        );
        return Ok(());
    }
    drop(release_tx);
    if let Some(elector) = elector {
        let _ = tokio::time::timeout(Duration::from_secs(5), elector).await;
        tracing::info!("released the leader Lease");
    }
    Ok(())
}

/// Aborts the HTTP servers when dropped.
struct Servers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Servers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

async fn serve_http(
    settings: &Settings,
    metrics: Arc<Metrics>,
    readiness: watch::Receiver<Readiness>,
) -> anyhow::Result<Servers> {
    let listeners = if settings.metrics_address == settings.probe_address {
        vec![(
            settings.metrics_address,
            Endpoints {
                metrics: Some(metrics),
                probes: Some(readiness),
            },
        )]
    } else {
        vec![
            (settings.metrics_address, Endpoints::metrics(metrics)),
            (settings.probe_address, Endpoints::probes(readiness)),
        ]
    };
    let mut tasks = Vec::new();
    for (address, endpoints) in listeners {
        let listener = http::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        let address = listener.local_addr().unwrap_or(address);
        tracing::info!(%address, "serving HTTP");
        tasks.push(tokio::spawn(async move {
            if let Err(e) = http::serve(listener, endpoints).await {
                tracing::error!(%address, error = %e, "the HTTP server stopped");
            }
        }));
    }
    Ok(Servers(tasks))
}

/// A client for the management cluster, and the server's URL (for messages).
async fn connect(kubeconfig: Option<&PathBuf>) -> anyhow::Result<(kube::Client, String)> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the kubeconfig {}: {}",
                    path.display(),
                    error_chain(&e)
                )
            })?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot use the kubeconfig {}: {}",
                        path.display(),
                        error_chain(&e)
                    )
                })?
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "no management cluster: pass --kubeconfig, set KUBECONFIG, or run in a pod with \
                 a service account: {}",
                error_chain(&e)
            )
        })?,
    };
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .with_context(|| format!("cannot build a client for the API server at {server}"))?;
    Ok((client, server))
}

/// How long the first requests may take before the API server counts as unreachable.
const API_CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// The API server answers, and serves the three kinds the controllers watch.
async fn check_api(
    client: &kube::Client,
    server: &str,
    namespace: Option<&str>,
) -> anyhow::Result<()> {
    let unreachable = |e: String| anyhow::anyhow!("cannot reach the API server at {server}: {e}");
    match tokio::time::timeout(API_CHECK_TIMEOUT, client.apiserver_version()).await {
        Err(_) => return Err(unreachable(format!("no answer in {API_CHECK_TIMEOUT:?}"))),
        Ok(Err(e)) => return Err(unreachable(error_chain(&e))),
        Ok(Ok(_)) => {}
    }
    for kind in [Kind::Cluster, Kind::Component, Kind::Hypervisor] {
        let api = dynamic_api(client, kind, namespace);
        match tokio::time::timeout(API_CHECK_TIMEOUT, api.list(&ListParams::default().limit(1)))
            .await
        {
            Err(_) => return Err(unreachable(format!("no answer in {API_CHECK_TIMEOUT:?}"))),
            Ok(Ok(_)) => {}
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => anyhow::bail!(
                "the API server at {server} does not serve {kind}s: install the \
                 CustomResourceDefinitions (`oi-manager crds | kubectl apply -f -`, or \
                 `kubectl apply -k config`)"
            ),
            Ok(Err(e)) => anyhow::bail!(
                "cannot list {kind}s on the API server at {server}: {}",
                error_chain(&e)
            ),
        }
    }
    Ok(())
}

/// An error and its sources, `: `-separated (kube's transport errors hide the cause).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

/// A watch on SIGTERM and SIGINT: `true` once either came.
fn shutdown_signal() -> anyhow::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
        tx.send_replace(true);
        // Keep the sender, so that receivers see `true` rather than a closed channel.
        std::future::pending::<()>().await;
    });
    Ok(rx)
}

fn dynamic_api(client: &kube::Client, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = api_resource(kind);
    match namespace {
        Some(ns) if kind.namespaced() => Api::namespaced_with(client.clone(), ns, &resource),
        _ => Api::all_with(client.clone(), &resource),
    }
}

// ---------------------------------------------------------------------------------------
// Controllers
// ---------------------------------------------------------------------------------------

/// What every reconcile shares.
pub struct Shared {
    pub ctx: KubeContext,
    groups: Groups,
    permits: Semaphore,
}

/// One async lock per cluster: a Cluster and its Components reconcile one at a time.
#[derive(Default)]
struct Groups(Mutex<HashMap<ObjectKey, Arc<tokio::sync::Mutex<()>>>>);

impl Groups {
    async fn lock(&self, group: &ObjectKey) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(map.entry(group.clone()).or_default())
        };
        lock.lock_owned().await
    }

    /// Forgets `group`'s lock when nobody holds or waits for it.
    fn release(&self, group: &ObjectKey, guard: tokio::sync::OwnedMutexGuard<()>) {
        drop(guard);
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(group).is_some_and(|l| Arc::strong_count(l) == 1) {
            map.remove(group);
        }
    }
}

/// The key of a watched object.
pub fn object_key(object: &DynamicObject) -> ObjectKey {
    ObjectKey::new(
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// The cluster a reconcile belongs to, for mutual exclusion: a Cluster's own key, a
/// Component's `spec.cluster` in its namespace; `None` for Hypervisors.
pub fn cluster_group(kind: ControllerKind, object: &DynamicObject) -> Option<ObjectKey> {
    let key = object_key(object);
    match kind {
        ControllerKind::Cluster => Some(key),
        ControllerKind::Component => {
            let namespace = if key.namespace.is_empty() {
                DEFAULT_NAMESPACE.to_string()
            } else {
                key.namespace.clone()
            };
            match object.data["spec"]["cluster"].as_str() {
                Some(cluster) if !cluster.is_empty() => Some(ObjectKey::new(namespace, cluster)),
                _ => Some(key),
            }
        }
        ControllerKind::Hypervisor => None,
    }
}

/// kube-runtime's action for ours.
pub fn kube_action(action: Action) -> kube_controller::Action {
    match action {
        Action::Requeue(after) => kube_controller::Action::requeue(after),
        Action::AwaitChange => kube_controller::Action::await_change(),
    }
}

/// The Components among watched objects (those that do not convert are left out).
fn components(objects: &[Arc<DynamicObject>]) -> Vec<Component> {
    objects
        .iter()
        .filter_map(|o| {
            let value = serde_json::to_value(&**o).ok()?;
            serde_json::from_value(value).ok()
        })
        .collect()
}

/// The Clusters to reconcile when Hypervisor `hypervisor` changes.
pub fn clusters_on_hypervisor(
    components_on_record: &[Arc<DynamicObject>],
    hypervisor: &str,
    cluster_resource: &ApiResource,
) -> Vec<ObjectRef<DynamicObject>> {
    controller::clusters_using_hypervisor(&components(components_on_record), hypervisor)
        .into_iter()
        .map(|key| ObjectRef::new_with(&key.name, cluster_resource.clone()).within(&key.namespace))
        .collect()
}

async fn reconcile(
    kind: ControllerKind,
    object: Arc<DynamicObject>,
    shared: Arc<Shared>,
) -> Result<kube_controller::Action, ReconcileError> {
    let key = object_key(&object);
    let group = cluster_group(kind, &object);
    let guard = match &group {
        Some(group) => Some(shared.groups.lock(group).await),
        None => None,
    };
    // Never closed: `acquire` cannot fail.
    let permit = shared.permits.acquire().await.ok();
    let start = Instant::now();
    let ctx = &shared.ctx;
    let result = match kind {
        ControllerKind::Cluster => controller::reconcile_cluster(&key, ctx).await,
        ControllerKind::Component => controller::reconcile_component(&key, ctx).await,
        ControllerKind::Hypervisor => controller::reconcile_hypervisor(&key, ctx).await,
    };
    let elapsed = start.elapsed();
    drop(permit);
    if let (Some(group), Some(guard)) = (&group, guard) {
        shared.groups.release(group, guard);
    }
    ctx.metrics.observe_reconcile(
        kind.as_str(),
        elapsed,
        result.as_ref().err().map(ReconcileError::reason),
    );
    match &result {
        Ok(action) => {
            tracing::debug!(controller = kind.as_str(), %key, ?action, ?elapsed, "reconciled")
        }
        Err(e) => tracing::warn!(
            controller = kind.as_str(),
            %key,
            reason = e.reason(),
            error = %e,
            "reconcile failed"
        ),
    }
    result.map(kube_action)
}

fn error_policy(
    kind: ControllerKind,
    object: Arc<DynamicObject>,
    _error: &ReconcileError,
    shared: Arc<Shared>,
) -> kube_controller::Action {
    kube_controller::Action::requeue(shared.ctx.error_backoff(kind, &object_key(&object)))
}

/// The three controllers, built (watches set up) and not yet running.
struct Controllers {
    cluster: Controller<DynamicObject>,
    component: Controller<DynamicObject>,
    hypervisor: Controller<DynamicObject>,
}

impl Controllers {
    /// `wakeups`: the Clusters the Hypervisor controller wants reconciled now
    /// ([`Context::cluster_wakeups`]).
    fn new(
        client: &kube::Client,
        namespace: Option<&str>,
        wakeups: tokio::sync::mpsc::UnboundedReceiver<ObjectKey>,
    ) -> Self {
        let config = kube_controller::Config::default().debounce(DEBOUNCE);
        let cluster_resource = api_resource(Kind::Cluster);
        let component_resource = api_resource(Kind::Component);
        let hypervisor_resource = api_resource(Kind::Hypervisor);
        let component = Controller::new_with(
            dynamic_api(client, Kind::Component, namespace),
            watcher::Config::default(),
            component_resource.clone(),
        )
        .with_config(config.clone());
        let hypervisor = Controller::new_with(
            dynamic_api(client, Kind::Hypervisor, namespace),
            watcher::Config::default(),
            hypervisor_resource.clone(),
        )
        .with_config(config.clone());
        // The Component controller's cache of Components maps a Hypervisor to the Clusters
        // placed on it, as the in-process driver does.
        let known_components = component.store();
        let mapper_resource = cluster_resource.clone();
        let woken_resource = cluster_resource.clone();
        let woken = futures::stream::unfold(wakeups, |mut rx| async move {
            rx.recv().await.map(|key| (key, rx))
        })
        .map(move |key| {
            ObjectRef::new_with(&key.name, woken_resource.clone()).within(&key.namespace)
        });
        let cluster = Controller::new_with(
            dynamic_api(client, Kind::Cluster, namespace),
            watcher::Config::default(),
            cluster_resource,
        )
        .owns_with(
            dynamic_api(client, Kind::Component, namespace),
            component_resource,
            watcher::Config::default(),
        )
        .watches_with(
            dynamic_api(client, Kind::Hypervisor, namespace),
            hypervisor_resource,
            watcher::Config::default(),
            move |h: DynamicObject| {
                let name = h.metadata.name.clone().unwrap_or_default();
                clusters_on_hypervisor(&known_components.state(), &name, &mapper_resource)
            },
        )
        .reconcile_on(woken)
        .with_config(config);
        Controllers {
            cluster,
            component,
            hypervisor,
        }
    }

    /// The controllers' caches, whose first lists readiness waits for.
    fn syncing(&self) -> Vec<(Kind, kube::runtime::reflector::Store<DynamicObject>)> {
        vec![
            (Kind::Cluster, self.cluster.store()),
            (Kind::Component, self.component.store()),
            (Kind::Hypervisor, self.hypervisor.store()),
        ]
    }

    /// Runs the three until `graceful` resolves and their reconciles finished.
    async fn run(
        self,
        shared: Arc<Shared>,
        graceful: futures::future::Shared<impl Future<Output = ()> + Send + 'static>,
    ) {
        let drive = |controller: Controller<DynamicObject>, kind: ControllerKind| {
            controller
                .graceful_shutdown_on(graceful.clone())
                .run(
                    move |object, shared| reconcile(kind, object, shared),
                    move |object, error, shared| error_policy(kind, object, error, shared),
                    Arc::clone(&shared),
                )
                .for_each(move |result| async move {
                    match result {
                        Ok(_) => {}
                        // Logged with its key by `reconcile`.
                        Err(kube_controller::Error::ReconcilerFailed(..)) => {}
                        Err(e) => tracing::warn!(
                            controller = kind.as_str(),
                            error = %error_chain(&e),
                            "controller error"
                        ),
                    }
                })
        };
        futures::join!(
            drive(self.cluster, ControllerKind::Cluster),
            drive(self.component, ControllerKind::Component),
            drive(self.hypervisor, ControllerKind::Hypervisor),
        );
    }
}

#[cfg(test)]
mod tests;
