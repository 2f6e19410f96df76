//! The reconcile functions of the three controllers, over any [`Store`]. Drivers (the kube-rs
//! runtime, the in-process loop in `driver.rs`) call them with an object key and turn the
//! returned [`Action`] or error into a requeue ([`Context::error_backoff`] on errors).
//!
//! The engine's unit of work is a cluster (etcd membership spans its replicas, steps are
//! ordered), so the Cluster controller runs `oi reconcile`'s planner and engine on the
//! cluster's sub-world, nothing of either reimplemented, and plans once per reconcile:
//!
//! ```text
//! Cluster key ─► finalizer ─► sub-world: every Hypervisor, the Cluster, its Components
//!   1. under the write lock: oi_planner::plan (PKI, components, placement, ports,
//!      certificates, every step) ─► the prepared world written back: cluster spec, the
//!      cluster's share of hypervisor statuses, new Components (finalizer, owner reference),
//!      changed ones, surplus ones deleted (deletionTimestamp)
//!   2. no lock: oi_engine::execute the plan (files, etcd, pods, observe)
//!   3. under the write lock: oi_planner::record what it did, then written back: the
//!      cluster's share of hypervisor statuses (files, released ports), torn down
//!      Components released (finalizer removed), the Cluster's status (conditions), or,
//!      once the engine deleted the cluster, its finalizer removed
//! ```
//!
//! Hypervisor statuses are shared by every cluster placed on them, and phase 2 of one
//! cluster runs while other clusters go through phases 1 and 3: only the cluster's own share
//! of a status is ever written, onto a fresh read ([`share::merge_share`]). Writes happen only
//! where something differs, so a converged cluster costs reads and no write.
//!
//! The Component controller tears down orphans (components whose Cluster is gone) through
//! the engine's deletion path; the components of a live cluster are the Cluster
//! controller's. The Hypervisor controller probes each CRI endpoint, keeps the
//! `hypervisor_reachable` metric and publishes transitions as events.

mod cluster;
mod component;
mod hypervisor;
mod rotation;
pub mod share;
mod sip;
pub mod snapshots;
mod writeback;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use oi_api::{Component, Kind, ObjectKey};
use oi_engine::{Connector, ExecuteOptions, Network};
use oi_planner::PlanOptions;
use time::OffsetDateTime;

use crate::metrics::Metrics;
use crate::store::{EventType, ObjectEvent, Store, StoreError};

pub use share::merge_share;

/// The finalizer the manager puts on Clusters, Components and Hypervisors it manages.
pub const FINALIZER: &str = "cluster.oneinfra.ereslibre.es/cleanup";

/// Which controller, for metrics labels and backoff bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControllerKind {
    Cluster,
    Component,
    Hypervisor,
    SipCluster,
}

impl ControllerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerKind::Cluster => "cluster",
            ControllerKind::Component => "component",
            ControllerKind::Hypervisor => "hypervisor",
            ControllerKind::SipCluster => "sipcluster",
        }
    }
}

/// Settings of the controllers.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// How clusters are planned (image repository, PKI settings).
    pub plan: PlanOptions,
    /// How plans are executed (how long a cluster may take, polling).
    pub execute: ExecuteOptions,
    /// Next look at a ready cluster (drift check).
    pub requeue_ready: Duration,
    /// Next look at a cluster that is not ready yet.
    pub requeue_not_ready: Duration,
    /// How often hypervisors are probed.
    pub hypervisor_probe_interval: Duration,
    /// Error backoff: first delay, doubled per consecutive failure of a key, up to the max.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// When a certificate earns a `CertificateExpiring` event: a CA this long before it
    /// expires (CAs are replaced by a rotation, which someone starts), a certificate renewed
    /// automatically this long before (its renewal, due 30 days before, did not happen).
    pub certificate_warning: CertificateWarning,
    /// Where scheduled snapshots (`spec.snapshots`) are written: S3 settings from the
    /// manager's AWS_* environment.
    pub snapshot_store: oi_s3::Store,
}

/// See [`ManagerOptions::certificate_warning`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertificateWarning {
    pub ca: time::Duration,
    pub leaf: time::Duration,
}

impl Default for CertificateWarning {
    /// 90 days ahead for CAs, 7 for the rest.
    fn default() -> Self {
        CertificateWarning {
            ca: time::Duration::days(90),
            leaf: time::Duration::days(7),
        }
    }
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            plan: PlanOptions::default(),
            execute: ExecuteOptions {
                max_wait: Duration::from_secs(5),
                remove_leftover_throwaway_pods: false,
                ..ExecuteOptions::default()
            },
            requeue_ready: Duration::from_secs(300),
            requeue_not_ready: Duration::from_secs(2),
            hypervisor_probe_interval: Duration::from_secs(30),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            certificate_warning: CertificateWarning::default(),
            snapshot_store: oi_s3::Store::default(),
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
    /// The engine could not tear down the components of a cluster that is gone.
    #[error("cannot tear down the orphan components of cluster {cluster}: {reason}: {message}")]
    Teardown {
        cluster: ObjectKey,
        /// Why, as the cluster's condition would say.
        reason: oi_planner::Reason,
        message: String,
    },
    /// The support services of a SIPCluster being deleted could not all be torn down.
    #[error("cannot tear down the support services of SIPCluster {sip_cluster}: {message}")]
    SipTeardown {
        sip_cluster: ObjectKey,
        message: String,
    },
}

impl ReconcileError {
    /// A short reason for the errors metric.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Store(e) => e.reason(),
            ReconcileError::Teardown { .. } | ReconcileError::SipTeardown { .. } => {
                "TeardownFailed"
            }
        }
    }
}

/// Reasons of the events the controllers publish (see [`ObjectEvent`]).
pub mod event_reasons {
    /// A Component was created for a cluster (Normal).
    pub const COMPONENT_CREATED: &str = "ComponentCreated";
    /// A Component was torn down and removed: scale down, or orphan (Normal).
    pub const COMPONENT_DELETED: &str = "ComponentDeleted";
    /// A cluster became ready (Normal).
    pub const CLUSTER_READY: &str = "ClusterReady";
    /// A cluster stopped being (or is not yet) ready (Warning).
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    /// A cluster marked for deletion was torn down and removed (Normal).
    pub const CLUSTER_DELETED: &str = "ClusterDeleted";
    /// A cluster cannot be prepared: invalid, no hypervisor or no port for it (Warning).
    pub const PREPARE_FAILED: &str = "PrepareFailed";
    /// A certificate of a cluster expires soon and will not be renewed by itself: a CA
    /// ([`super::CertificateWarning::ca`] ahead), or a certificate whose automatic renewal
    /// did not happen (Warning). Published when the set of such certificates grows.
    pub const CERTIFICATE_EXPIRING: &str = "CertificateExpiring";
    /// A scheduled snapshot was written, and older ones beyond `keep` removed (Normal).
    pub const SNAPSHOT_TAKEN: &str = "SnapshotTaken";
    /// A scheduled snapshot could not be taken or written; tried again in a minute (Warning).
    pub const SNAPSHOT_FAILED: &str = "SnapshotFailed";
    /// A CA rotation asked for by the annotation started or moved a phase on (Normal).
    pub const CA_ROTATION: &str = "CARotation";
    /// The rotate-ca annotation names no known CA, or the rotation cannot go on (Warning).
    pub const CA_ROTATION_REFUSED: &str = "CARotationRefused";
    /// A cluster's drain moved a replica or an ingress off a drained hypervisor, or has
    /// nothing left there (Normal), as its `Drained` condition says.
    pub const DRAIN: &str = "Drain";
    /// A cluster's drain cannot go on: no room elsewhere; what runs there stays (Warning).
    pub const DRAIN_BLOCKED: &str = "DrainBlocked";
    /// Components of a cluster are on lost hypervisors and are being replaced (Warning).
    pub const REPLACING: &str = "ReplacingLostReplicas";
    /// Nothing of a cluster is left on a lost hypervisor any more (Normal).
    pub const HEALED: &str = "Healed";
    /// A hypervisor is lost: deleted, or unreachable for longer than
    /// `--replace-unreachable-after`; what runs there is replaced (Warning).
    pub const HYPERVISOR_LOST: &str = "HypervisorLost";
    /// A hypervisor answered again (Normal).
    pub const HYPERVISOR_REACHABLE: &str = "HypervisorReachable";
    /// A hypervisor does not answer (Warning).
    pub const HYPERVISOR_UNREACHABLE: &str = "HypervisorUnreachable";
    /// A SIPCluster holds all its hosts and runs what it asks for (Normal).
    pub const SIP_CLUSTER_READY: &str = "SIPClusterReady";
    /// A SIPCluster is not ready: unschedulable, or its services not run (Warning).
    pub const SIP_CLUSTER_NOT_READY: &str = "SIPClusterNotReady";
    /// A SIPCluster's hosts changed: chosen, let go, standby promoted (Normal).
    pub const SIP_HOSTS_CHANGED: &str = "HostsChanged";
    /// A SIPCluster marked for deletion let its hosts go and was released (Normal).
    pub const SIP_CLUSTER_DELETED: &str = "SIPClusterDeleted";
}

/// The write locks of the hypervisors' shared state: two reconciles never plan ports on one
/// hypervisor at once. A reconcile that plans over every hypervisor holds them all; one that
/// plans over a few (a settled cluster's) holds those, beside others that hold other ones.
#[derive(Default)]
pub(crate) struct HypervisorLocks {
    all: tokio::sync::RwLock<()>,
    each: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held hypervisor locks ([`HypervisorLocks`]).
pub(crate) enum HypervisorGuard<'a> {
    All(#[allow(dead_code, reason = "held, never read")] tokio::sync::RwLockWriteGuard<'a, ()>),
    Some {
        _all: tokio::sync::RwLockReadGuard<'a, ()>,
        held: BTreeSet<String>,
        _each: Vec<tokio::sync::OwnedMutexGuard<()>>,
    },
}

impl HypervisorGuard<'_> {
    /// Whether it holds the lock of every hypervisor in `names`.
    pub(crate) fn covers<'n>(&self, mut names: impl Iterator<Item = &'n str>) -> bool {
        match self {
            HypervisorGuard::All(_) => true,
            HypervisorGuard::Some { held, .. } => names.all(|n| held.contains(n)),
        }
    }
}

impl HypervisorLocks {
    /// Every hypervisor's, alone.
    pub(crate) async fn all(&self) -> HypervisorGuard<'_> {
        HypervisorGuard::All(self.all.write().await)
    }

    /// Those of `names` (taken in order, so two holders never wait for each other).
    pub(crate) async fn some(&self, names: BTreeSet<String>) -> HypervisorGuard<'_> {
        let all = self.all.read().await;
        let locks: Vec<_> = {
            let mut each = lock(&self.each);
            names
                .iter()
                .map(|n| Arc::clone(each.entry(n.clone()).or_default()))
                .collect()
        };
        let mut guards = Vec::with_capacity(locks.len());
        for l in locks {
            guards.push(l.lock_owned().await);
        }
        HypervisorGuard::Some {
            _all: all,
            held: names,
            _each: guards,
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
    /// Held while a controller reads and writes the shared state of hypervisors (ports,
    /// files) and the objects it derives from it (phases 1 and 3 of a cluster reconcile),
    /// never during an engine run: of the hypervisors a settled cluster is on, or of all.
    hypervisor_locks: HypervisorLocks,
    /// Held for a whole SIPCluster reconcile: one SIPCluster at a time, as upstream SIP.
    sip_lock: tokio::sync::Mutex<()>,
    /// Held while a cluster's engine run replaces what ran on lost hypervisors: one cluster
    /// at a time (a machine holding many clusters' replicas does not move them all at once).
    healing: tokio::sync::Mutex<()>,
    /// Engine runs hold it shared; removing leftover throwaway pods holds it exclusively, so
    /// that a live run's file writer is never taken for a leftover.
    engine_runs: tokio::sync::RwLock<()>,
    /// Consecutive failures per key, for [`Context::error_backoff`].
    failures: Mutex<BTreeMap<(ControllerKind, ObjectKey), u32>>,
    /// The last probe result per hypervisor, to publish transitions only.
    reachable: Mutex<BTreeMap<String, bool>>,
    /// Per cluster, the rotate-ca annotation value last refused (reported once).
    refused_rotations: Mutex<BTreeMap<ObjectKey, String>>,
    /// Per cluster, the certificates last reported in a `CertificateExpiring` event.
    expiring: Mutex<BTreeMap<ObjectKey, BTreeSet<String>>>,
    /// Hypervisors whose leftover throwaway pods this process removed.
    swept: Mutex<BTreeSet<String>>,
    /// Hypervisors this process saw lost (deleted, or unreachable past the grace period),
    /// so that each loss is published and acted upon once.
    lost: Mutex<BTreeSet<String>>,
    /// Where the Hypervisor controller and the join watches send the Clusters to reconcile
    /// at once (see [`Context::cluster_wakeups`]).
    wakeups: Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<ObjectKey>>>>,
    /// The watches on ready clusters' join requests ([`crate::joins`]).
    pub joins: crate::joins::JoinWatches,
}

/// Locks a std mutex whose data stays sound when a holder panicked (plain inserts and
/// removals).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
            hypervisor_locks: HypervisorLocks::default(),
            sip_lock: tokio::sync::Mutex::new(()),
            healing: tokio::sync::Mutex::new(()),
            engine_runs: tokio::sync::RwLock::new(()),
            failures: Mutex::new(BTreeMap::new()),
            reachable: Mutex::new(BTreeMap::new()),
            swept: Mutex::new(BTreeSet::new()),
            lost: Mutex::new(BTreeSet::new()),
            expiring: Mutex::new(BTreeMap::new()),
            refused_rotations: Mutex::new(BTreeMap::new()),
            wakeups: Arc::new(Mutex::new(None)),
            joins: crate::joins::JoinWatches::default(),
        }
    }

    /// The Clusters the Hypervisor controller wants reconciled now: those with a Component on
    /// a hypervisor whose reachability changed, so that a hypervisor that comes back gets its
    /// components run again (and one that goes away marks its clusters not ready) without
    /// waiting for the clusters' next requeue. The caller feeds them to the Cluster
    /// controller. A later call replaces the earlier receiver.
    pub fn cluster_wakeups(&self) -> tokio::sync::mpsc::UnboundedReceiver<ObjectKey> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *lock(&self.wakeups) = Some(tx);
        rx
    }

    fn wake_cluster(&self, key: ObjectKey) {
        if let Some(tx) = lock(&self.wakeups).as_ref() {
            // A receiver that went away wants nothing more.
            let _ = tx.send(key);
        }
    }

    /// What wakes a cluster from outside a reconcile (the join watches, the watch caches).
    pub(crate) fn waker(&self) -> crate::joins::Waker {
        let wakeups = Arc::clone(&self.wakeups);
        Arc::new(move |key| {
            if let Some(tx) = lock(&wakeups).as_ref() {
                let _ = tx.send(key);
            }
        })
    }

    /// The delay before retrying `key` after its `failures`-th consecutive failure.
    ///
    /// Counts one more consecutive failure of `key` and returns `backoff_min * 2^(n-1)`,
    /// at most `backoff_max`, `n` being the count. The count is reset by
    /// [`Context::record_success`], which the reconcile functions call when they succeed.
    pub fn error_backoff(&self, controller: ControllerKind, key: &ObjectKey) -> Duration {
        let n = {
            let mut failures = lock(&self.failures);
            let n = failures.entry((controller, key.clone())).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let factor = 1u32 << (n - 1).min(31);
        self.options
            .backoff_min
            .saturating_mul(factor)
            .min(self.options.backoff_max)
    }

    /// Forgets the consecutive failures of `key`.
    pub fn record_success(&self, controller: ControllerKind, key: &ObjectKey) {
        lock(&self.failures).remove(&(controller, key.clone()));
    }

    /// Consecutive failures of `key` so far.
    pub fn consecutive_failures(&self, controller: ControllerKind, key: &ObjectKey) -> u32 {
        lock(&self.failures)
            .get(&(controller, key.clone()))
            .copied()
            .unwrap_or(0)
    }

    /// The execute options of the manager's runs: one sub-world per run, several at once,
    /// so a run never removes throwaway pods it did not create (see
    /// [`reconcile_hypervisor`]).
    fn execute_options(&self) -> ExecuteOptions {
        ExecuteOptions {
            remove_leftover_throwaway_pods: false,
            ..self.options.execute.clone()
        }
    }

    /// Whether the rotate-ca annotation `value` of `key` is refused for the first time.
    fn note_refused_rotation(&self, key: &ObjectKey, value: &str) -> bool {
        lock(&self.refused_rotations).insert(key.clone(), value.to_string())
            != Some(value.to_string())
    }

    /// Keeps the certificate expiry metric of cluster `key` (`None`: gone), and publishes
    /// a `CertificateExpiring` warning when certificates needing attention appeared since
    /// the last one.
    async fn observe_certificates(
        &self,
        key: &ObjectKey,
        uid: Option<&str>,
        world: Option<&oi_api::World>,
        now: OffsetDateTime,
    ) {
        let all = world
            .map(|w| oi_planner::expiry::certificates(w, key))
            .unwrap_or_default();
        self.metrics
            .set_certificate_expiry(key, all.first().map(|e| e.not_after.unix_timestamp()));
        let warning = self.options.certificate_warning;
        let soon: Vec<_> = all
            .iter()
            .filter(|e| e.needs_attention(now, warning.ca, warning.leaf))
            .collect();
        let names: BTreeSet<String> = soon
            .iter()
            .map(|e| format!("{} {}", e.object, e.field))
            .collect();
        let new = {
            let mut expiring = lock(&self.expiring);
            let before = expiring.remove(key).unwrap_or_default();
            let new = names.iter().any(|n| !before.contains(n));
            if !names.is_empty() {
                expiring.insert(key.clone(), names);
            }
            new
        };
        if !new {
            return;
        }
        let mut note = format!(
            "{} certificate(s) of cluster {} expire soon:",
            soon.len(),
            key.name
        );
        for e in soon.iter().take(5) {
            let when = e
                .not_after
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            let remedy = match e.renewal {
                oi_planner::expiry::Renewal::Rotation => "rotate it: oi cluster rotate-ca",
                oi_planner::expiry::Renewal::Automatic => "its renewal did not happen",
            };
            note.push_str(&format!(" {} {} on {when} ({remedy});", e.object, e.field));
        }
        if soon.len() > 5 {
            note.push_str(&format!(
                " and {} more (oi cluster certificates)",
                soon.len() - 5
            ));
        }
        tracing::warn!(cluster = %key, "{note}");
        self.publish(
            Kind::Cluster,
            key,
            uid,
            Event::warning(event_reasons::CERTIFICATE_EXPIRING, note),
        )
        .await;
    }

    async fn publish(&self, kind: Kind, key: &ObjectKey, uid: Option<&str>, event: Event<'_>) {
        let event = ObjectEvent {
            kind,
            key: key.clone(),
            uid: uid.map(str::to_string),
            type_: event.type_,
            reason: event.reason.to_string(),
            action: "Reconcile".to_string(),
            note: event.note,
        };
        // Events are notes for people: one that cannot be published fails nothing.
        if let Err(error) = self.store.publish(&event).await {
            tracing::warn!(%error, reason = %event.reason, object = %key, "cannot publish an event");
        }
    }
}

/// An event about to be published.
struct Event<'a> {
    type_: EventType,
    reason: &'a str,
    note: String,
}

impl<'a> Event<'a> {
    fn normal(reason: &'a str, note: impl Into<String>) -> Self {
        Event {
            type_: EventType::Normal,
            reason,
            note: note.into(),
        }
    }

    fn warning(reason: &'a str, note: impl Into<String>) -> Self {
        Event {
            type_: EventType::Warning,
            reason,
            note: note.into(),
        }
    }
}

/// What an inner reconcile asks of its wrapper.
enum Next {
    /// Succeeded: the failure count is reset.
    Done(Action),
    /// Failed in a way that is reported in the object's status, not as an error: retried
    /// with the error backoff, the failure count kept.
    Backoff,
}

/// Now, at the second precision of Kubernetes timestamps, so that a status read back from
/// an API server compares equal to the one written.
fn now() -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap_or(now)
}

async fn finish<S: Store, C: Connector, N: Network>(
    controller: ControllerKind,
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
    result: Result<Next, ReconcileError>,
) -> Result<Action, ReconcileError> {
    match result? {
        Next::Done(action) => {
            ctx.record_success(controller, key);
            Ok(action)
        }
        Next::Backoff => Ok(Action::Requeue(ctx.error_backoff(controller, key))),
    }
}

/// The Cluster controller (see the module documentation).
///
/// # Errors
/// [`ReconcileError::Store`] when the store refuses a read or write (a conflict included);
/// what was written before stays, and the next run continues from it.
pub async fn reconcile_cluster<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    let result = cluster::reconcile(key, ctx).await;
    finish(ControllerKind::Cluster, key, ctx, result).await
}

/// The Component controller.
///
/// # Errors
/// [`ReconcileError::Store`] as [`reconcile_cluster`]; [`ReconcileError::Teardown`] when the
/// components of a cluster that is gone cannot be torn down.
pub async fn reconcile_component<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    let result = component::reconcile(key, ctx).await;
    finish(ControllerKind::Component, key, ctx, result).await
}

/// The Hypervisor controller; `key` is cluster scoped.
///
/// # Errors
/// [`ReconcileError::Store`] when the hypervisor cannot be read.
pub async fn reconcile_hypervisor<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    let result = hypervisor::reconcile(key, ctx).await;
    finish(ControllerKind::Hypervisor, key, ctx, result).await
}

/// The SIPCluster controller: selects the hosts of one SIPCluster (see `controller/sip.rs`).
///
/// # Errors
/// [`ReconcileError::Store`] when the store refuses a read or write (a host update that
/// conflicts included); the next run goes on from what was written.
pub async fn reconcile_sip_cluster<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    let result = sip::reconcile(key, ctx).await;
    finish(ControllerKind::SipCluster, key, ctx, result).await
}

/// The controller `kind`'s reconcile of `key`: one of the four above.
///
/// # Errors
/// As the controller's own function.
pub async fn reconcile<S: Store, C: Connector, N: Network>(
    kind: ControllerKind,
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Action, ReconcileError> {
    match kind {
        ControllerKind::Cluster => reconcile_cluster(key, ctx).await,
        ControllerKind::Component => reconcile_component(key, ctx).await,
        ControllerKind::Hypervisor => reconcile_hypervisor(key, ctx).await,
        ControllerKind::SipCluster => reconcile_sip_cluster(key, ctx).await,
    }
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
pub fn clusters_using_hypervisor<'a>(
    components: impl IntoIterator<Item = &'a Component>,
    hypervisor: &str,
) -> std::collections::BTreeSet<ObjectKey> {
    components
        .into_iter()
        .filter(|c| c.spec.hypervisor.as_deref() == Some(hypervisor))
        .map(cluster_of_component)
        .collect()
}

/// What of a Hypervisor its clusters care about: its spec, labels (the zone) and whether it
/// is being deleted, hashed. A change of status only (ports and files, which every
/// cluster's reconcile writes) leaves it as it was and wakes no cluster: waking every
/// cluster on a hypervisor at each of their writes made the manager quadratic.
pub fn hypervisor_fingerprint(h: &oi_api::Hypervisor) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&h.spec)
        .unwrap_or_default()
        .hash(&mut hasher);
    h.metadata.labels.hash(&mut hasher);
    h.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    hasher.finish()
}
