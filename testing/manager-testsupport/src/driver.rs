//! The in-process driver: runs the Cluster, Component and Hypervisor controllers over a
//! [`MemoryStore`] as kube-runtime's `Controller` runs them over an API server.
//!
//! ```text
//!   start: every Cluster, Component, Hypervisor ─┐
//!   MemoryStore::subscribe() ── Change ─► map ───┴─► WorkQueue ─► up to 4 reconciles at once
//!        Cluster c    ─► (cluster, c)                  ▲  (one per key, one per cluster)
//!        Component k  ─► (component, k), (cluster, cluster_of_component(k))
//!        Hypervisor h ─► (hypervisor, h), (cluster, each cluster with a component on h)
//!   Context::cluster_wakeups() ── Cluster c ─► (cluster, c)   (reachability changed)
//!   result: Requeue(d) ─► again in d; AwaitChange ─► nothing; Err ─► Context::error_backoff
//! ```
//!
//! The queue deduplicates (a key queued many times runs once), never runs a key twice at
//! once, nor two keys of one cluster (a Cluster and its Components share a group), and a key
//! waiting for a later time runs at once when a change comes. A key whose object is gone is
//! still reconciled once: the controllers see it missing, as after a watch's delete event.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oi_api::{Cluster, Component, Hypervisor, Kind, ObjectKey, SipCluster};
use oi_engine::{Connector, Network};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinSet;

use crate::memory::{Change, MemoryStore};
use oi_manager::controller::{self, Action, Context, ControllerKind, ReconcileError};
use oi_manager::metrics::Metrics;

/// How many reconciles run at once.
pub const CONCURRENCY: usize = 4;

/// Keys waiting for their time, and the keys (and groups) running now. Pure: time is passed
/// in, so the rules are tested without a clock.
#[derive(Debug)]
pub struct WorkQueue<K, G> {
    pending: BTreeMap<K, (Instant, G)>,
    running: BTreeSet<K>,
    running_groups: BTreeSet<G>,
}

impl<K: Ord + Clone, G: Ord + Clone> Default for WorkQueue<K, G> {
    fn default() -> Self {
        WorkQueue {
            pending: BTreeMap::new(),
            running: BTreeSet::new(),
            running_groups: BTreeSet::new(),
        }
    }
}

impl<K: Ord + Clone, G: Ord + Clone> WorkQueue<K, G> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `key` (in `group`) to run at `at`. A key already waiting keeps the earlier of
    /// the two times; a running key is queued to run again after it finishes.
    pub fn add(&mut self, key: K, group: G, at: Instant) {
        let entry = self.pending.entry(key).or_insert((at, group.clone()));
        entry.0 = entry.0.min(at);
        entry.1 = group;
    }

    fn eligible(&self) -> impl Iterator<Item = (&K, &(Instant, G))> {
        self.pending
            .iter()
            .filter(|(k, (_, g))| !self.running.contains(*k) && !self.running_groups.contains(g))
    }

    /// The next key due by `now` whose key and group are not running, earliest first (ties:
    /// in key order); it is marked running until [`WorkQueue::finish`].
    pub fn pop_ready(&mut self, now: Instant) -> Option<(K, G)> {
        let key = self
            .eligible()
            .filter(|(_, (at, _))| *at <= now)
            .min_by_key(|(_, (at, _))| *at)
            .map(|(k, _)| k.clone())?;
        let (_, group) = self.pending.remove(&key)?;
        self.running.insert(key.clone());
        self.running_groups.insert(group.clone());
        Some((key, group))
    }

    /// When the next key that could run now is due; `None` when every waiting key waits for
    /// a running key or group to finish, or nothing waits.
    pub fn next_due(&self) -> Option<Instant> {
        self.eligible().map(|(_, (at, _))| *at).min()
    }

    /// Marks `key` (of `group`) finished.
    pub fn finish(&mut self, key: &K, group: &G) {
        self.running.remove(key);
        self.running_groups.remove(group);
    }

    /// Whether `key` waits (running or not).
    pub fn is_pending(&self, key: &K) -> bool {
        self.pending.contains_key(key)
    }

    /// When `key` is due, if it waits.
    pub fn due(&self, key: &K) -> Option<Instant> {
        self.pending.get(key).map(|(at, _)| *at)
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.pending.len()
    }
}

/// A queued reconcile: which controller, which object.
pub type Job = (ControllerKind, ObjectKey);

/// The group of every SIPCluster job (no Cluster has an empty namespace).
fn sip_group() -> ObjectKey {
    ObjectKey::new("", "sipclusters")
}

/// What the loop calls: the three controllers over a context ([`Driver`]), or a recording
/// fake in tests.
pub(crate) trait Reconcilers: Send + Sync + 'static {
    fn reconcile(
        &self,
        controller: ControllerKind,
        key: ObjectKey,
    ) -> impl Future<Output = Result<Action, ReconcileError>> + Send + 'static;
    fn error_backoff(&self, controller: ControllerKind, key: &ObjectKey) -> Duration;
    fn store(&self) -> &MemoryStore;
    fn metrics(&self) -> &Metrics;
    /// The Clusters to reconcile at once ([`Context::cluster_wakeups`]), if any.
    fn cluster_wakeups(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<ObjectKey>>;
}

struct Controllers<C, N>(Arc<Context<MemoryStore, C, N>>);

impl<C: Connector + 'static, N: Network + 'static> Reconcilers for Controllers<C, N> {
    fn reconcile(
        &self,
        kind: ControllerKind,
        key: ObjectKey,
    ) -> impl Future<Output = Result<Action, ReconcileError>> + Send + 'static {
        let ctx = Arc::clone(&self.0);
        async move { controller::reconcile(kind, &key, &ctx).await }
    }

    fn error_backoff(&self, kind: ControllerKind, key: &ObjectKey) -> Duration {
        self.0.error_backoff(kind, key)
    }

    fn store(&self) -> &MemoryStore {
        &self.0.store
    }

    fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    fn cluster_wakeups(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<ObjectKey>> {
        Some(self.0.cluster_wakeups())
    }
}

/// Runs the controllers over a [`MemoryStore`]; see the module documentation.
pub struct Driver<C, N> {
    controllers: Arc<Controllers<C, N>>,
}

impl<C: Connector + 'static, N: Network + 'static> Driver<C, N> {
    pub fn new(ctx: Arc<Context<MemoryStore, C, N>>) -> Self {
        Driver {
            controllers: Arc::new(Controllers(ctx)),
        }
    }

    /// Runs until `shutdown` resolves, then waits for the reconciles under way.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send) {
        let never = |_: &MemoryStore| false;
        drive(&self.controllers, shutdown, &never, true).await;
    }

    /// Runs until `done(&store)` is true after a reconcile (then waits for the reconciles
    /// under way), or `timeout` passes.
    ///
    /// # Errors
    /// On timeout, with the last result of every key reconciled.
    pub async fn run_until(
        &self,
        done: impl Fn(&MemoryStore) -> bool + Send + Sync,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        run_until(&self.controllers, done, timeout).await
    }
}

pub(crate) async fn run_until<R: Reconcilers>(
    reconcilers: &Arc<R>,
    done: impl Fn(&MemoryStore) -> bool + Send + Sync,
    timeout: Duration,
) -> anyhow::Result<()> {
    let end = drive(reconcilers, tokio::time::sleep(timeout), &done, false).await;
    if end.done {
        return Ok(());
    }
    let mut seen = String::new();
    for ((kind, key), result) in &end.last {
        seen.push_str(&format!("\n  {} {key}: {result}", kind.as_str()));
    }
    if seen.is_empty() {
        seen.push_str(" nothing was reconciled");
    }
    anyhow::bail!(
        "the store did not reach the expected state within {timeout:?}; last reconcile \
         results:{seen}"
    )
}

/// The last result of a key, for the timeout message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok(Action),
    Err(String),
    Panicked,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(Action::Requeue(d)) => write!(f, "requeue in {d:?}"),
            Outcome::Ok(Action::AwaitChange) => f.write_str("await change"),
            Outcome::Err(e) => write!(f, "error: {e}"),
            Outcome::Panicked => f.write_str("panicked"),
        }
    }
}

/// How a run ended.
pub(crate) struct End {
    /// `done` held after a reconcile (otherwise the shutdown came first).
    pub done: bool,
    /// The last result of every key reconciled.
    pub last: BTreeMap<Job, Outcome>,
}

/// The queue plus what maps changes to jobs: the last known copy of every Component (a
/// removed one still names its cluster) and the fingerprint of every Hypervisor (a change
/// of its status only wakes no cluster, as the kube-runtime wiring has it).
struct State {
    queue: WorkQueue<Job, ObjectKey>,
    components: BTreeMap<ObjectKey, Component>,
    hypervisors: BTreeMap<ObjectKey, u64>,
}

impl State {
    /// Queues every Cluster, Component and Hypervisor of the store, as a controller's first
    /// list does (and again after falling behind the changes).
    fn resync(&mut self, store: &MemoryStore, now: Instant) {
        self.components = store
            .objects::<Component>()
            .into_iter()
            .map(|c| (oi_api::Resource::key(&c), c))
            .collect();
        for cluster in store.objects::<Cluster>() {
            let key = oi_api::Resource::key(&cluster);
            self.queue
                .add((ControllerKind::Cluster, key.clone()), key, now);
        }
        let components: Vec<(ObjectKey, ObjectKey)> = self
            .components
            .iter()
            .map(|(k, c)| (k.clone(), controller::cluster_of_component(c)))
            .collect();
        for (key, cluster) in components {
            self.queue
                .add((ControllerKind::Component, key), cluster, now);
        }
        self.hypervisors.clear();
        for hypervisor in store.objects::<Hypervisor>() {
            let key = oi_api::Resource::key(&hypervisor);
            self.hypervisors
                .insert(key.clone(), controller::hypervisor_fingerprint(&hypervisor));
            self.queue
                .add((ControllerKind::Hypervisor, key.clone()), key, now);
        }
        for sip in store.objects::<SipCluster>() {
            self.sip_cluster(oi_api::Resource::key(&sip), now);
        }
    }

    /// SIPClusters share one group: one at a time.
    fn sip_cluster(&mut self, key: ObjectKey, now: Instant) {
        self.queue
            .add((ControllerKind::SipCluster, key), sip_group(), now);
    }

    fn cluster(&mut self, key: ObjectKey, now: Instant) {
        self.queue
            .add((ControllerKind::Cluster, key.clone()), key, now);
    }

    fn on_change(&mut self, change: Change, store: &MemoryStore, now: Instant) {
        match change.kind {
            Kind::Cluster => self.cluster(change.key, now),
            Kind::Component => {
                let current = store.object::<Component>(&change.key);
                let previous = match &current {
                    Some(c) => self.components.insert(change.key.clone(), c.clone()),
                    None => self.components.remove(&change.key),
                };
                let clusters: BTreeSet<ObjectKey> = current
                    .iter()
                    .chain(previous.iter())
                    .map(controller::cluster_of_component)
                    .collect();
                // Its group: the cluster it belongs to now, or last belonged to.
                let group = current
                    .as_ref()
                    .or(previous.as_ref())
                    .map(controller::cluster_of_component)
                    .unwrap_or_else(|| change.key.clone());
                self.queue
                    .add((ControllerKind::Component, change.key), group, now);
                for cluster in clusters {
                    self.cluster(cluster, now);
                }
            }
            Kind::Hypervisor => {
                let now_print = store
                    .object::<Hypervisor>(&change.key)
                    .map(|h| controller::hypervisor_fingerprint(&h));
                let before = match now_print {
                    Some(print) => self.hypervisors.insert(change.key.clone(), print),
                    None => self.hypervisors.remove(&change.key),
                };
                if now_print.is_none() || before != now_print {
                    for cluster in controller::clusters_using_hypervisor(
                        self.components.values(),
                        &change.key.name,
                    ) {
                        self.cluster(cluster, now);
                    }
                }
                self.queue.add(
                    (ControllerKind::Hypervisor, change.key.clone()),
                    change.key,
                    now,
                );
            }
            Kind::SipCluster => self.sip_cluster(change.key, now),
            // A host concerns every SIPCluster (the one holding it, any waiting for hosts).
            Kind::BareMetalHost => {
                for sip in store.objects::<SipCluster>() {
                    self.sip_cluster(oi_api::Resource::key(&sip), now);
                }
            }
            Kind::NodeJoinRequest | Kind::Secret => {}
        }
    }
}

type Finished = (Job, ObjectKey, Duration, Result<Action, ReconcileError>);

/// The loop: see the module documentation. Returns when `shutdown` resolves or `done` holds
/// after a reconcile. The reconciles under way are then awaited (their results booked, no
/// requeue), except after a shutdown when `graceful` is false: they are aborted.
pub(crate) async fn drive<R: Reconcilers>(
    reconcilers: &Arc<R>,
    shutdown: impl Future<Output = ()> + Send,
    done: &(dyn Fn(&MemoryStore) -> bool + Send + Sync),
    graceful: bool,
) -> End {
    let store = reconcilers.store();
    // Subscribed before the first list, so no change falls between the two.
    let mut changes = store.subscribe();
    let mut wakeups = reconcilers.cluster_wakeups();
    let mut state = State {
        queue: WorkQueue::new(),
        components: BTreeMap::new(),
        hypervisors: BTreeMap::new(),
    };
    state.resync(store, Instant::now());
    let mut tasks: JoinSet<Finished> = JoinSet::new();
    let mut jobs: BTreeMap<tokio::task::Id, (Job, ObjectKey)> = BTreeMap::new();
    let mut last = BTreeMap::new();
    let mut listening = true;
    tokio::pin!(shutdown);
    let reached = loop {
        while tasks.len() < CONCURRENCY {
            let Some((job, group)) = state.queue.pop_ready(Instant::now()) else {
                break;
            };
            let reconcile = reconcilers.reconcile(job.0, job.1.clone());
            let finished_job = job.clone();
            let finished_group = group.clone();
            let handle = tasks.spawn(async move {
                let start = Instant::now();
                let result = reconcile.await;
                (finished_job, finished_group, start.elapsed(), result)
            });
            jobs.insert(handle.id(), (job, group));
        }
        let next = if tasks.len() < CONCURRENCY {
            state.queue.next_due()
        } else {
            None
        };
        tokio::select! {
            () = &mut shutdown => break false,
            change = changes.recv(), if listening => match change {
                Ok(change) => state.on_change(change, store, Instant::now()),
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "fell behind the store's changes; listing again");
                    state.resync(store, Instant::now());
                }
                Err(RecvError::Closed) => listening = false,
            },
            Some(cluster) = recv_wakeup(&mut wakeups) => state.cluster(cluster, Instant::now()),
            Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                finished(reconcilers, &mut state, &mut jobs, &mut last, joined, true);
                if done(store) {
                    break true;
                }
            }
            () = sleep_until(next), if next.is_some() => {}
        }
    };
    if reached || graceful {
        while let Some(joined) = tasks.join_next_with_id().await {
            finished(reconcilers, &mut state, &mut jobs, &mut last, joined, false);
        }
    } else {
        tasks.abort_all();
    }
    End {
        done: reached,
        last,
    }
}

/// The next Cluster to wake up; pending forever without a receiver, `None` once it closed.
async fn recv_wakeup(
    wakeups: &mut Option<tokio::sync::mpsc::UnboundedReceiver<ObjectKey>>,
) -> Option<ObjectKey> {
    match wakeups {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }
}

/// Books a finished reconcile: metrics, log, last result, and when it runs next.
fn finished<R: Reconcilers>(
    reconcilers: &Arc<R>,
    state: &mut State,
    jobs: &mut BTreeMap<tokio::task::Id, (Job, ObjectKey)>,
    last: &mut BTreeMap<Job, Outcome>,
    joined: Result<(tokio::task::Id, Finished), tokio::task::JoinError>,
    requeue: bool,
) {
    let now = Instant::now();
    let (id, job, group, outcome, next) = match joined {
        Ok((id, (job, group, elapsed, result))) => {
            let reason = result.as_ref().err().map(ReconcileError::reason);
            reconcilers
                .metrics()
                .observe_reconcile(job.0.as_str(), elapsed, reason);
            match result {
                Ok(action) => {
                    let next = match action {
                        Action::Requeue(d) => Some(now + d),
                        Action::AwaitChange => None,
                    };
                    (id, job, group, Outcome::Ok(action), next)
                }
                Err(error) => {
                    tracing::warn!(
                        controller = job.0.as_str(),
                        key = %job.1,
                        %error,
                        "reconcile failed"
                    );
                    let backoff = reconcilers.error_backoff(job.0, &job.1);
                    (
                        id,
                        job,
                        group,
                        Outcome::Err(error.to_string()),
                        Some(now + backoff),
                    )
                }
            }
        }
        Err(error) => {
            let id = error.id();
            let Some((job, group)) = jobs.get(&id).cloned() else {
                return;
            };
            if error.is_cancelled() {
                jobs.remove(&id);
                state.queue.finish(&job, &group);
                return;
            }
            tracing::warn!(controller = job.0.as_str(), key = %job.1, "reconcile panicked");
            reconcilers
                .metrics()
                .observe_reconcile(job.0.as_str(), Duration::ZERO, Some("Panic"));
            let backoff = reconcilers.error_backoff(job.0, &job.1);
            (id, job, group, Outcome::Panicked, Some(now + backoff))
        }
    };
    jobs.remove(&id);
    state.queue.finish(&job, &group);
    if requeue && let Some(at) = next {
        state.queue.add(job.clone(), group, at);
    }
    last.insert(job, outcome);
}
