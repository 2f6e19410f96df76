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
//! The command line is in [`crate::args`]; the controllers' wiring to kube-runtime in
//! [`crate::wiring`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::FutureExt as _;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use oi_api::Kind;
use oi_cri::ClientOptions;
use oi_engine::{CriConnector, RealNetwork};
use tokio::sync::{Semaphore, oneshot, watch};

use crate::args::Settings;
use crate::cache::{self, WatchCache};
use crate::controller::Context;
use crate::http::{self, Endpoints, Readiness};
use crate::kube_store::{KubeStore, api_resource};
use crate::leader::LeaderElector;
use crate::metrics::Metrics;
use crate::wiring::{Controllers, Groups, Shared};

/// The events' `reportingController`.
pub const REPORTER: &str = "oneinfra.ereslibre.es/oi-manager";
/// How often readiness looks whether a controller's cache is filled.
const SYNC_POLL: Duration = Duration::from_millis(250);

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
        let sip = check_api(&client, &server, settings.namespace.as_deref()).await?;
        anyhow::Ok((client, server, sip))
    };
    let (client, server, sip) = tokio::select! {
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
    // What the reconciles list is read from watch caches, not LISTed per reconcile.
    let cache = Arc::new(WatchCache::start(
        &client,
        settings.namespace.as_deref(),
        &cache::CACHED_KINDS,
    ));
    let store = KubeStore::new(client.clone(), REPORTER, settings.identity.clone())
        .with_cache(Arc::clone(&cache));
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
    cache.wake_clusters_with(ctx.waker());
    let controllers = Controllers::new(&client, settings.namespace.as_deref(), wakeups, sip);
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
            ready_tx.send_replace(Readiness::not_ready("waiting for the watch caches to sync"));
            cache.synced().await;
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

/// The API server answers, and serves the three kinds the controllers watch. Returns
/// whether it also serves SIPClusters and metal3's BareMetalHosts, which the SIPCluster
/// controller needs (without them it does not run, and the log says why).
async fn check_api(
    client: &kube::Client,
    server: &str,
    namespace: Option<&str>,
) -> anyhow::Result<bool> {
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
    for kind in [Kind::SipCluster, Kind::BareMetalHost] {
        let api = dynamic_api(client, kind, namespace);
        match tokio::time::timeout(API_CHECK_TIMEOUT, api.list(&ListParams::default().limit(1)))
            .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                tracing::info!(
                    "the SIPCluster controller is off: the API server does not serve {kind}s{}",
                    if kind == Kind::BareMetalHost {
                        " (metal3's CRD)"
                    } else {
                        " (`oi-manager crds | kubectl apply -f -`)"
                    }
                );
                return Ok(false);
            }
            Ok(Err(e)) => {
                tracing::warn!(
                    "the SIPCluster controller is off: cannot list {kind}s: {}",
                    error_chain(&e)
                );
                return Ok(false);
            }
            Err(_) => {
                tracing::warn!(
                    "the SIPCluster controller is off: listing {kind}s took over {API_CHECK_TIMEOUT:?}"
                );
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// An error and its sources, `: `-separated (kube's transport errors hide the cause).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
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

pub(crate) fn dynamic_api(
    client: &kube::Client,
    kind: Kind,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let resource = api_resource(kind);
    match namespace {
        Some(ns) if kind.namespaced() => Api::namespaced_with(client.clone(), ns, &resource),
        _ => Api::all_with(client.clone(), &resource),
    }
}
