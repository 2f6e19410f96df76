//! CONTRACT SKELETON (owned by the controllers helper; bodies are replaced, signatures kept).
//!
//! The reconcile functions of the three controllers, over any [`Store`]. Drivers (the kube-rs
//! runtime in `run.rs`, the in-process loop in `driver.rs`) call them with an object key and
//! turn the returned [`Action`] or error into a requeue.

use std::sync::Arc;
use std::time::Duration;

use oi_api::{Component, ObjectKey};
use oi_engine::{Connector, EngineOptions, Network};

use crate::metrics::Metrics;
use crate::store::{Store, StoreError};

/// The finalizer the manager puts on Clusters and Components it manages.
pub const FINALIZER: &str = "cluster.oneinfra.ereslibre.es/cleanup";

/// Which controller, for metrics labels and backoff bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControllerKind {
    Cluster,
    Component,
    Hypervisor,
}

impl ControllerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerKind::Cluster => "cluster",
            ControllerKind::Component => "component",
            ControllerKind::Hypervisor => "hypervisor",
        }
    }
}

/// Settings of the controllers.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    pub engine: EngineOptions,
    /// Next look at a ready cluster (drift check).
    pub requeue_ready: Duration,
    /// Next look at a cluster that is not ready yet.
    pub requeue_not_ready: Duration,
    /// How often hypervisors are probed.
    pub hypervisor_probe_interval: Duration,
    /// Error backoff: first delay, doubled per consecutive failure of a key, up to the max.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            engine: EngineOptions {
                max_wait: Duration::from_secs(5),
                ..EngineOptions::default()
            },
            requeue_ready: Duration::from_secs(300),
            requeue_not_ready: Duration::from_secs(2),
            hypervisor_probe_interval: Duration::from_secs(30),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
        }
    }
}

/// What the driver does next with a key after a successful reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Requeue(Duration),
    AwaitChange,
}

/// Why a reconcile failed; the driver requeues the key with [`Context::error_backoff`].
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ReconcileError {
    /// A short reason for the errors metric.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Store(e) => e.reason(),
        }
    }
}

/// Everything the reconcile functions need.
pub struct Context<S, C, N> {
    pub store: Arc<S>,
    pub connector: C,
    pub network: N,
    pub options: ManagerOptions,
    pub metrics: Arc<Metrics>,
}

impl<S: Store, C: Connector, N: Network> Context<S, C, N> {
    pub fn new(
        store: Arc<S>,
        connector: C,
        network: N,
        options: ManagerOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        Context {
            store,
            connector,
            network,
            options,
            metrics,
        }
    }

    /// The delay before retrying `key` after its `failures`-th consecutive failure.
    pub fn error_backoff(&self, _controller: ControllerKind, _key: &ObjectKey) -> Duration {
        todo!()
    }
}

/// The Cluster controller (see the module documentation).
pub async fn reconcile_cluster<S: Store, C: Connector, N: Network>(
    _key: &ObjectKey,
    _ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    todo!()
}

/// The Component controller.
pub async fn reconcile_component<S: Store, C: Connector, N: Network>(
    _key: &ObjectKey,
    _ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    todo!()
}

/// The Hypervisor controller; `key` is cluster scoped.
pub async fn reconcile_hypervisor<S: Store, C: Connector, N: Network>(
    _key: &ObjectKey,
    _ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    todo!()
}

/// The cluster a component belongs to (`spec.cluster` in the component's namespace).
pub fn cluster_of_component(component: &Component) -> ObjectKey {
    ObjectKey::new(
        component.metadata.namespace_or_default(),
        component.spec.cluster.clone(),
    )
}

/// The clusters with a component on hypervisor `hypervisor`: what to reconcile when it
/// changes (comes back, changes its port range).
pub fn clusters_using_hypervisor(
    components: &[Component],
    hypervisor: &str,
) -> std::collections::BTreeSet<ObjectKey> {
    components
        .iter()
        .filter(|c| c.spec.hypervisor.as_deref() == Some(hypervisor))
        .map(cluster_of_component)
        .collect()
}
