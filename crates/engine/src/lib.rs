//! `oi-engine`: executes the plan of a world on its hypervisors, drives etcd membership and
//! turns what it observes into status and conditions.
//!
//! ```text
//! World ─► prepare_with (pure: PKI, scheduling, ports) ─► render_component (pure)
//!   │
//!   ▼  per hypervisor: throwaway pods a killed run left behind are removed
//!   ▼  per cluster, all clusters concurrently; the steps of one cluster in order:
//!   1. files      write_files(known = Hypervisor status files) ─► hashes back into status
//!   2. leaving    etcd member remove ─► remove pods ─► remove host dirs ─► remove_component
//!   3. etcd       founders of a new cluster (`new`): all pods at once, wait for an answer;
//!                 each joining replica (`existing`), in order: member add (learner)
//!                 ─► pod ─► promote once in sync
//!   4. kube       kube-apiserver + controller-manager + scheduler pod of every replica,
//!   5. ingress    and the haproxy pod, all at once
//!   6. observe    etcd members (started, voting), each API server /readyz, ingress /readyz,
//!                 polled until ready or `max_wait`
//!   ▼
//! Report {world with status + ReconcileStarted / ReconcileSucceeded, per cluster outcome,
//!         counts of pods, files and mutating CRI calls}
//! ```
//!
//! A cluster marked for deletion loses every pod and directory on every hypervisor it used,
//! then leaves the world with its ports. A hypervisor that cannot be reached fails only the
//! clusters with components on it. Over converged manifests a run makes no mutating call.
//!
//! Hypervisors come from a [`Connector`] ([`CriConnector`] for real endpoints); etcd and the
//! API servers are reached through a [`Network`] ([`RealNetwork`] over HTTPS). Progress
//! events name what happens where and never carry key material.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod etcd;
pub mod https;
#[cfg(any(test, feature = "sim"))]
pub mod sim;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use http::Method;
use oi_api::common::{ConditionStatus, condition_types, set_condition};
use oi_api::hypervisor::CriEndpoint as ApiEndpoint;
use oi_api::runtime::{HostFile, PodSpec, labels};
use oi_api::{Component, ComponentRole, EtcdInitialClusterState, Hypervisor, ObjectKey, World};
use oi_cri::{ClientOptions, CriClient, CriEndpoint, HypervisorRuntime, Outcome};
use oi_planner::ports::names;
use oi_planner::render::{self, EtcdMember, RenderOptions, Rendered};
use time::OffsetDateTime;

pub use etcd::{EtcdClient, EtcdError, Member};
pub use https::{HttpsError, HttpsRequest, HttpsResponse, Network, RealNetwork, Tls};

/// What can go wrong reaching a hypervisor.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("hypervisor {hypervisor} has no usable CRI endpoint")]
    NoEndpoint { hypervisor: String },
    #[error("hypervisor {hypervisor} is unreachable: {reason}")]
    Unreachable { hypervisor: String, reason: String },
    #[error(transparent)]
    Cri(#[from] oi_cri::Error),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Yields the runtime of a hypervisor.
pub trait Connector: Send + Sync {
    type Runtime: HypervisorRuntime + 'static;

    /// Connects to `hypervisor`'s runtime.
    ///
    /// # Errors
    /// [`Error`] when the endpoint is missing, invalid or does not answer.
    fn connect(
        &self,
        hypervisor: &Hypervisor,
    ) -> impl Future<Output = Result<Arc<Self::Runtime>>> + Send;
}

/// Connects [`CriClient`]s from the Hypervisor spec: a local socket or mutual TLS.
#[derive(Debug, Clone, Default)]
pub struct CriConnector {
    pub options: ClientOptions,
}

impl Connector for CriConnector {
    type Runtime = CriClient;

    async fn connect(&self, hypervisor: &Hypervisor) -> Result<Arc<CriClient>> {
        let name = hypervisor.metadata.name.clone();
        let endpoint = match hypervisor.spec.cri_endpoint() {
            Some(ApiEndpoint::Local(path)) => CriEndpoint::Unix(path.into()),
            Some(ApiEndpoint::Remote(remote)) => {
                let Some(client) = remote.client_certificate.as_ref() else {
                    return Err(Error::NoEndpoint { hypervisor: name });
                };
                CriEndpoint::Tls {
                    uri: remote.cri_endpoint_uri.clone(),
                    ca_pem: remote.ca_certificate.clone(),
                    cert_pem: client.certificate.clone(),
                    key_pem: client.private_key.clone(),
                }
            }
            None => return Err(Error::NoEndpoint { hypervisor: name }),
        };
        Ok(Arc::new(
            CriClient::connect(name, endpoint, self.options.clone()).await?,
        ))
    }
}

/// Settings of [`reconcile`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub prepare: oi_planner::Options,
    pub render: RenderOptions,
    /// How long a cluster may take to become ready (etcd, API servers, ingress).
    pub max_wait: Duration,
    /// Pause between two observations while waiting.
    pub poll_interval: Duration,
    /// Remove throwaway pods found before the clusters are driven, as leftovers of a killed
    /// run (on by default: `oi reconcile` is the only run). Off for callers that run the
    /// engine on several sub-worlds at once (oi-manager, one run per cluster), where another
    /// run's live writer would be taken for a leftover; they call
    /// [`remove_throwaway_pods`] when no run of theirs is in flight.
    pub remove_leftover_throwaway_pods: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            prepare: oi_planner::Options::default(),
            render: RenderOptions::default(),
            max_wait: Duration::from_secs(60),
            poll_interval: Duration::from_millis(250),
            remove_leftover_throwaway_pods: true,
        }
    }
}

/// One thing the engine did, or saw, somewhere. Holds names and URLs, never key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The hypervisor it happened on, if any.
    pub hypervisor: Option<String>,
    pub cluster: ObjectKey,
    /// The component, if the event concerns one.
    pub component: Option<String>,
    pub message: String,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(h) = &self.hypervisor {
            write!(f, "[{h}] ")?;
        }
        f.write_str(&self.cluster.name)?;
        if let Some(c) = &self.component {
            write!(f, "/{c}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Counts of what a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub pods_created: u64,
    pub pods_replaced: u64,
    pub pods_unchanged: u64,
    pub pods_removed: u64,
    pub files_written: u64,
    /// Mutating CRI calls of every runtime during the run.
    pub mutating_calls: u64,
}

#[derive(Debug, Default)]
struct Counters {
    created: AtomicU64,
    replaced: AtomicU64,
    unchanged: AtomicU64,
    removed: AtomicU64,
    files: AtomicU64,
}

/// Why a cluster is not ready (the reason of its `ReconcileSucceeded=False` condition).
pub mod reasons {
    pub const SUCCEEDED: &str = "ReconcileSucceeded";
    pub const STARTED: &str = "ReconcileStarted";
    pub const PREPARE_FAILED: &str = "PrepareFailed";
    pub const RENDER_FAILED: &str = "RenderFailed";
    pub const HYPERVISOR_UNREACHABLE: &str = "HypervisorUnreachable";
    pub const RUNTIME_ERROR: &str = "RuntimeError";
    pub const ETCD_NOT_READY: &str = "EtcdNotReady";
    pub const APISERVER_NOT_READY: &str = "APIServerNotReady";
    pub const INGRESS_NOT_READY: &str = "IngressNotReady";
    pub const DELETE_FAILED: &str = "DeleteFailed";
}

/// What became of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOutcome {
    pub cluster: ObjectKey,
    pub ready: bool,
    /// The cluster was deleted and left the world.
    pub deleted: bool,
    /// [`reasons`]: why it is (not) ready.
    pub reason: String,
    /// What and where, for a person.
    pub message: String,
    /// etcd members started, and voting, as last observed.
    pub etcd_started: usize,
    pub etcd_voting: usize,
    /// API servers answering /readyz with 200, as last observed.
    pub apiservers_ready: usize,
    pub ingress_ready: bool,
}

impl ClusterOutcome {
    fn new(cluster: &ObjectKey) -> Self {
        ClusterOutcome {
            cluster: cluster.clone(),
            ready: false,
            deleted: false,
            reason: String::new(),
            message: String::new(),
            etcd_started: 0,
            etcd_voting: 0,
            apiservers_ready: 0,
            ingress_ready: false,
        }
    }

    fn fail(mut self, reason: &str, message: impl Into<String>) -> Self {
        self.ready = false;
        self.reason = reason.to_string();
        self.message = message.into();
        self
    }
}

/// The result of a run: the updated world and what happened to each cluster.
#[derive(Debug, Clone)]
pub struct Report {
    pub world: World,
    /// By cluster key, every cluster of the input (deleted ones included).
    pub clusters: BTreeMap<ObjectKey, ClusterOutcome>,
    pub counts: Counts,
    pub elapsed: Duration,
}

impl Report {
    /// Whether every cluster still in the world is ready.
    pub fn all_ready(&self) -> bool {
        self.clusters.values().all(|c| c.ready || c.deleted)
    }
}

type Runtimes<R> = BTreeMap<String, std::result::Result<Arc<R>, String>>;

/// Connects to every hypervisor that holds a component, concurrently.
async fn connect_all<C: Connector>(world: &World, connector: &C) -> Runtimes<C::Runtime> {
    let mut used: Vec<&Hypervisor> = world
        .hypervisors
        .values()
        .filter(|h| {
            world
                .components
                .values()
                .any(|c| c.spec.hypervisor.as_deref() == Some(h.metadata.name.as_str()))
        })
        .collect();
    used.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let results = join_all(used.iter().map(|h| connector.connect(h))).await;
    used.into_iter()
        .zip(results)
        .map(|(h, r)| (h.metadata.name.clone(), r.map_err(|e| e.to_string())))
        .collect()
}

/// Removes the throwaway pods (file writers, path removers) a run killed mid-step left on
/// the connected hypervisors: a run removes its own before it returns, so any found before
/// the clusters are driven is a leftover. Best effort: a hypervisor that fails here fails its
/// clusters' steps anyway, and the next run tries again.
async fn remove_leftover_throwaway_pods<R: HypervisorRuntime>(runtimes: &Runtimes<R>) {
    join_all(
        runtimes
            .values()
            .filter_map(|r| r.as_ref().ok())
            .map(|rt| remove_throwaway_pods(rt.as_ref())),
    )
    .await;
}

/// Removes every throwaway pod (file writer, path remover) on one hypervisor; returns how
/// many it removed. Best effort: listing or removal errors count as nothing removed.
pub async fn remove_throwaway_pods<R: HypervisorRuntime>(rt: &R) -> usize {
    let selector = BTreeMap::from([(oi_cri::requests::RUN_LABEL.to_string(), "true".to_string())]);
    let mut removed = 0;
    for pod in rt.list_pods(&selector).await.unwrap_or_default() {
        if rt.remove_pod(&pod.id).await.is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Reconciles `world` with its hypervisors; see the crate documentation. Never fails as a
/// whole: each cluster's outcome is in the [`Report`] and in its conditions.
pub async fn reconcile<C: Connector, N: Network>(
    world: World,
    now: OffsetDateTime,
    options: &EngineOptions,
    connector: &C,
    network: &N,
    progress: &(dyn Fn(&Event) + Sync),
) -> Report {
    let started = Instant::now();
    let prepared = oi_planner::prepare_with(world, now, &options.prepare);
    let mut world = prepared.world;
    for (key, cluster) in world.clusters.iter_mut() {
        if !cluster.is_being_deleted() && !prepared.failures.contains_key(key) {
            set_condition(
                &mut cluster.status.conditions,
                condition_types::RECONCILE_STARTED,
                ConditionStatus::True,
                reasons::STARTED,
                "",
                now,
            );
        }
    }
    let runtimes = connect_all(&world, connector).await;
    let before: BTreeMap<&String, u64> = runtimes
        .iter()
        .filter_map(|(h, r)| r.as_ref().ok().map(|r| (h, r.mutating_calls())))
        .collect();
    if options.remove_leftover_throwaway_pods {
        remove_leftover_throwaway_pods(&runtimes).await;
    }
    let counters = Counters::default();
    let cx = Cx {
        world: &world,
        options,
        runtimes: &runtimes,
        network,
        progress,
        counters: &counters,
        deadline: started + options.max_wait,
        now,
    };
    let keys: Vec<ObjectKey> = world.clusters.keys().cloned().collect();
    let runs = join_all(keys.iter().map(|key| {
        let failure = prepared.failures.get(key).map(ToString::to_string);
        cx.cluster(key, failure)
    }))
    .await;
    let mutating_calls = runtimes
        .iter()
        .filter_map(|(h, r)| {
            r.as_ref()
                .ok()
                .map(|r| r.mutating_calls() - before.get(h).copied().unwrap_or(0))
        })
        .sum();
    let counts = Counts {
        pods_created: counters.created.load(Ordering::Relaxed),
        pods_replaced: counters.replaced.load(Ordering::Relaxed),
        pods_unchanged: counters.unchanged.load(Ordering::Relaxed),
        pods_removed: counters.removed.load(Ordering::Relaxed),
        files_written: counters.files.load(Ordering::Relaxed),
        mutating_calls,
    };
    let mut clusters = BTreeMap::new();
    for run in runs {
        apply(&mut world, &run, now);
        clusters.insert(run.outcome.cluster.clone(), run.outcome);
    }
    Report {
        world,
        clusters,
        counts,
        elapsed: started.elapsed(),
    }
}

/// What one cluster's run changes in the world.
struct ClusterRun {
    outcome: ClusterOutcome,
    /// (hypervisor, component) -> file hashes placed.
    files: Vec<(String, String, BTreeMap<String, String>)>,
    /// Components whose pods, member and directories are gone.
    removed: Vec<ObjectKey>,
}

fn files_entry<'w>(
    world: &'w mut World,
    hypervisor: &str,
    namespace: &str,
    cluster: &str,
) -> Option<&'w mut BTreeMap<String, BTreeMap<String, String>>> {
    world
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped(hypervisor))
        .map(|h| {
            h.status
                .files
                .entry(namespace.to_string())
                .or_default()
                .entry(cluster.to_string())
                .or_default()
        })
}

/// Drops empty maps left in a hypervisor's files status.
fn prune_files(world: &mut World) {
    for h in world.hypervisors.values_mut() {
        for clusters in h.status.files.values_mut() {
            clusters.retain(|_, components| !components.is_empty());
        }
        h.status.files.retain(|_, clusters| !clusters.is_empty());
    }
}

fn apply(world: &mut World, run: &ClusterRun, now: OffsetDateTime) {
    let key = &run.outcome.cluster;
    for (hypervisor, component, files) in &run.files {
        if let Some(entry) = files_entry(world, hypervisor, &key.namespace, &key.name) {
            entry.insert(component.clone(), files.clone());
        }
    }
    for component in &run.removed {
        if let Some(c) = oi_planner::remove_component(world, component)
            && let Some(entry) = c
                .spec
                .hypervisor
                .as_deref()
                .and_then(|h| files_entry(world, h, &key.namespace, &key.name))
        {
            entry.remove(&c.metadata.name);
        }
    }
    if run.outcome.deleted {
        oi_planner::remove_cluster(world, key);
        for h in world.hypervisors.values_mut() {
            if let Some(clusters) = h.status.files.get_mut(&key.namespace) {
                clusters.remove(&key.name);
            }
        }
    } else if let Some(cluster) = world.clusters.get_mut(key) {
        let (status, reason) = if run.outcome.ready {
            (ConditionStatus::True, reasons::SUCCEEDED)
        } else {
            (ConditionStatus::False, run.outcome.reason.as_str())
        };
        set_condition(
            &mut cluster.status.conditions,
            condition_types::RECONCILE_SUCCEEDED,
            status,
            reason,
            &run.outcome.message,
            now,
        );
    }
    prune_files(world);
}

/// Everything a cluster's run reads.
struct Cx<'a, R, N> {
    world: &'a World,
    options: &'a EngineOptions,
    runtimes: &'a Runtimes<R>,
    network: &'a N,
    progress: &'a (dyn Fn(&Event) + Sync),
    counters: &'a Counters,
    deadline: Instant,
    now: OffsetDateTime,
}

/// A failed step: reason and message for the condition.
struct Failure(&'static str, String);

type Step<T = ()> = std::result::Result<T, Failure>;

fn cri_failure(e: &oi_cri::Error) -> Failure {
    Failure(reasons::RUNTIME_ERROR, e.to_string())
}

/// The label selector of a cluster's (or one component's) pods.
fn selector(cluster: &ObjectKey, component: Option<&str>) -> BTreeMap<String, String> {
    let mut s = BTreeMap::from([
        (
            labels::CLUSTER_NAMESPACE.to_string(),
            cluster.namespace.clone(),
        ),
        (labels::CLUSTER.to_string(), cluster.name.clone()),
    ]);
    if let Some(c) = component {
        s.insert(labels::COMPONENT.to_string(), c.to_string());
    }
    s
}

/// A live replica with its rendering.
struct Replica<'a> {
    component: &'a Component,
    hypervisor: String,
    rendered: Rendered,
    /// Its pods that must restart to read files that change (pod specs name the files, not
    /// their content): see [`pods_reading_changed_files`].
    restart: BTreeSet<String>,
}

impl Replica<'_> {
    fn name(&self) -> &str {
        &self.component.metadata.name
    }

    fn pod(&self, name: &str) -> Option<&PodSpec> {
        self.rendered.pods.iter().find(|p| p.name == name)
    }

    fn url(&self, world: &World, port: &str) -> Option<String> {
        let ip = world.hypervisor_of(self.component)?.spec.ip_address.clone();
        let port = self.component.status.host_port(port)?;
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip
        };
        Some(format!("https://{host}:{port}"))
    }
}

impl<R: HypervisorRuntime, N: Network> Cx<'_, R, N> {
    fn emit(
        &self,
        hypervisor: Option<&str>,
        cluster: &ObjectKey,
        component: Option<&str>,
        message: String,
    ) {
        (self.progress)(&Event {
            hypervisor: hypervisor.map(str::to_string),
            cluster: cluster.clone(),
            component: component.map(str::to_string),
            message,
        });
    }

    fn runtime(&self, hypervisor: &str) -> Step<&Arc<R>> {
        match self.runtimes.get(hypervisor) {
            Some(Ok(rt)) => Ok(rt),
            Some(Err(e)) => Err(Failure(
                reasons::HYPERVISOR_UNREACHABLE,
                format!("hypervisor {hypervisor} is unreachable: {e}"),
            )),
            None => Err(Failure(
                reasons::HYPERVISOR_UNREACHABLE,
                format!("hypervisor {hypervisor} is not known"),
            )),
        }
    }

    async fn cluster(&self, key: &ObjectKey, prepare_failure: Option<String>) -> ClusterRun {
        let mut run = ClusterRun {
            outcome: ClusterOutcome::new(key),
            files: Vec::new(),
            removed: Vec::new(),
        };
        if let Some(message) = prepare_failure {
            run.outcome = run.outcome.fail(reasons::PREPARE_FAILED, message);
            return run;
        }
        let deleting = self
            .world
            .clusters
            .get(key)
            .is_some_and(|c| c.is_being_deleted());
        let result = if deleting {
            self.delete(key).await.map(|()| {
                run.outcome.deleted = true;
                run.outcome.reason = "Deleted".to_string();
            })
        } else {
            self.converge(key, &mut run).await
        };
        if let Err(Failure(reason, message)) = result {
            run.outcome = run.outcome.fail(reason, message);
        }
        run
    }

    /// Removes every pod and directory of a cluster marked for deletion.
    async fn delete(&self, key: &ObjectKey) -> Step {
        let mut hypervisors: Vec<&str> = self
            .world
            .components_of(key)
            .filter_map(|c| c.spec.hypervisor.as_deref())
            .collect();
        for h in self.world.hypervisors.values() {
            if h.status
                .files
                .get(&key.namespace)
                .is_some_and(|m| m.contains_key(&key.name))
            {
                hypervisors.push(&h.metadata.name);
            }
        }
        hypervisors.sort_unstable();
        hypervisors.dedup();
        let results = join_all(hypervisors.iter().map(|h| async move {
            let rt = self.runtime(h)?;
            let pods = rt
                .list_pods(&selector(key, None))
                .await
                .map_err(|e| cri_failure(&e))?;
            for pod in pods {
                rt.remove_pod(&pod.id).await.map_err(|e| cri_failure(&e))?;
                self.counters.removed.fetch_add(1, Ordering::Relaxed);
                self.emit(Some(h), key, None, format!("removed pod {}", pod.name));
            }
            let dirs = vec![
                format!("/etc/oneinfra/{}/{}", key.namespace, key.name),
                format!("/var/lib/oneinfra/{}/{}", key.namespace, key.name),
            ];
            rt.remove_host_paths(&dirs)
                .await
                .map_err(|e| cri_failure(&e))?;
            self.emit(
                Some(h),
                key,
                None,
                "removed cluster directories".to_string(),
            );
            Ok(())
        }))
        .await;
        for r in results {
            r.map_err(|Failure(_, m)| Failure(reasons::DELETE_FAILED, m))?;
        }
        self.emit(None, key, None, "deleted".to_string());
        Ok(())
    }

    async fn converge(&self, key: &ObjectKey, run: &mut ClusterRun) -> Step {
        let world = self.world;
        let components: Vec<&Component> = world.components_of(key).collect();
        for c in &components {
            if let Some(h) = c.spec.hypervisor.as_deref() {
                self.runtime(h)?;
            }
        }
        // Render every live component (pure).
        let mut live = Vec::new();
        for c in components.iter().filter(|c| !c.metadata.is_being_deleted()) {
            let Some(h) = c.spec.hypervisor.clone() else {
                continue;
            };
            let ck = ObjectKey::new(key.namespace.clone(), c.metadata.name.clone());
            let rendered = render::render_component(world, &ck, &self.options.render)
                .map_err(|e| Failure(reasons::RENDER_FAILED, e.to_string()))?;
            let known = world_files(world, &h, key, &c.metadata.name);
            let restart = pods_reading_changed_files(&rendered, &known);
            live.push(Replica {
                component: c,
                hypervisor: h,
                rendered,
                restart,
            });
        }
        // 1. Files.
        let written = join_all(live.iter().map(|r| self.files(key, r))).await;
        for w in written {
            run.files.push(w?);
        }
        let tls = self.etcd_tls(key)?;
        let etcd = EtcdClient {
            network: self.network,
            tls: &tls,
        };
        let membership = render::etcd_membership(world, key);
        // 2. Leaving components: etcd member first, then pods, then directories.
        for c in components.iter().filter(|c| c.metadata.is_being_deleted()) {
            let ck = ObjectKey::new(key.namespace.clone(), c.metadata.name.clone());
            self.leave(key, c, &membership.members, &membership.leaving, &etcd)
                .await?;
            run.removed.push(ck);
        }
        // 3. etcd. A cluster whose etcd answers keeps its quorum: replica by replica (in
        //    replica order), a member joins (learner, pod, promotion) or has its pod created or
        //    replaced, and a changed pod must be healthy again before the next one is touched
        //    (a certificate renewal or an image change never takes more than one member down).
        //    A new cluster, or one whose etcd does not answer (no quorum to keep), starts the
        //    pods of the replicas that found it together; replicas added later join one by one.
        let replicas: Vec<&Replica> = membership
            .members
            .iter()
            .filter_map(|m| live.iter().find(|r| r.name() == m.name))
            .collect();
        let answered = self.etcd_answers(&membership.members, &etcd).await;
        let running = answered.is_some();
        if let Some(list) = answered {
            for replica in &replicas {
                // A started voting member only needs its pod; any other joins first.
                let voting = membership
                    .members
                    .iter()
                    .find(|m| m.name == replica.name())
                    .is_some_and(|me| {
                        list.iter().any(|m| {
                            m.peer_urls.contains(&me.peer_url) && m.started() && !m.is_learner
                        })
                    });
                let outcome = if voting {
                    self.pod(key, replica, self.etcd_pod(replica)?).await?
                } else {
                    self.etcd_join(key, replica, &membership.members, &etcd)
                        .await?
                };
                if outcome != Outcome::Unchanged {
                    self.etcd_healthy(key, replica, &membership.members, &etcd)
                        .await?;
                }
            }
        } else {
            let (founders, joiners): (Vec<&Replica>, Vec<&Replica>) =
                replicas.into_iter().partition(|r| {
                    r.component
                        .status
                        .etcd_member
                        .as_ref()
                        .map(|m| m.initial_cluster_state)
                        == Some(EtcdInitialClusterState::New)
                });
            self.etcd_founders(key, &founders, &membership.members, &etcd)
                .await?;
            for replica in joiners {
                self.etcd_join(key, replica, &membership.members, &etcd)
                    .await?;
            }
        }
        // 4. The Kubernetes control plane of every replica and 5. the ingress, together. In a
        //    running cluster, control plane pods are created or replaced one replica at a
        //    time (replica order), a replaced one's API server ready before the next, so the
        //    ingress always has API servers to send requests to.
        let (control_plane, ingress): (Vec<&Replica>, Vec<&Replica>) = live
            .iter()
            .partition(|r| r.component.spec.role == ComponentRole::ControlPlane);
        let rolled = async {
            for r in &control_plane {
                let Some(spec) = r.pod(r.name()) else {
                    continue;
                };
                if self.pod(key, r, spec).await? == Outcome::Replaced {
                    self.apiserver_ready(key, r).await?;
                }
            }
            Ok(())
        };
        let pods = if running {
            ingress
        } else {
            live.iter().collect()
        };
        let together = join_all(
            pods.into_iter()
                .filter_map(|r| r.pod(r.name()).map(|p| (r, p)))
                .map(|(r, p)| self.pod(key, r, p)),
        );
        let (rolled, together): (Step, _) = if running {
            futures::join!(rolled, together)
        } else {
            (Ok(()), together.await)
        };
        rolled?;
        for result in together {
            result?;
        }
        // 6. Observe until ready or out of time.
        loop {
            let observed = self.observe(key, &live, &membership.members, &etcd).await;
            run.outcome.etcd_started = observed.etcd_started;
            run.outcome.etcd_voting = observed.etcd_voting;
            run.outcome.apiservers_ready = observed.apiservers_ready;
            run.outcome.ingress_ready = observed.ingress_ready;
            match observed.failure {
                None => {
                    run.outcome.ready = true;
                    run.outcome.reason = reasons::SUCCEEDED.to_string();
                    run.outcome.message = String::new();
                    self.emit(None, key, None, "ready".to_string());
                    return Ok(());
                }
                Some(f) if Instant::now() >= self.deadline => return Err(f),
                Some(_) => tokio::time::sleep(self.options.poll_interval).await,
            }
        }
    }

    async fn files(
        &self,
        key: &ObjectKey,
        r: &Replica<'_>,
    ) -> Step<(String, String, BTreeMap<String, String>)> {
        let rt = self.runtime(&r.hypervisor)?;
        let known = world_files(self.world, &r.hypervisor, key, r.name());
        let changed = count_changed(&r.rendered.files, &known);
        let hashes = rt
            .write_files(&r.rendered.files, &known)
            .await
            .map_err(|e| cri_failure(&e))?;
        if changed > 0 {
            self.counters.files.fetch_add(changed, Ordering::Relaxed);
            self.emit(
                Some(&r.hypervisor),
                key,
                Some(r.name()),
                format!("wrote {changed} files"),
            );
        }
        Ok((r.hypervisor.clone(), r.name().to_string(), hashes))
    }

    async fn pod(&self, key: &ObjectKey, r: &Replica<'_>, spec: &PodSpec) -> Step<Outcome> {
        let rt = self.runtime(&r.hypervisor)?;
        let mut outcome = rt.ensure_pod(spec).await.map_err(|e| cri_failure(&e))?;
        if outcome == Outcome::Unchanged && r.restart.contains(&spec.name) {
            let running = rt
                .list_pods(&selector(key, Some(r.name())))
                .await
                .map_err(|e| cri_failure(&e))?;
            for pod in running.iter().filter(|p| p.name == spec.name) {
                rt.remove_pod(&pod.id).await.map_err(|e| cri_failure(&e))?;
            }
            rt.ensure_pod(spec).await.map_err(|e| cri_failure(&e))?;
            outcome = Outcome::Replaced;
        }
        let (counter, verb) = match outcome {
            Outcome::Created => (&self.counters.created, "created"),
            Outcome::Replaced => (&self.counters.replaced, "replaced"),
            Outcome::Unchanged => (&self.counters.unchanged, ""),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if outcome != Outcome::Unchanged {
            self.emit(
                Some(&r.hypervisor),
                key,
                Some(r.name()),
                format!("{verb} pod {}", spec.name),
            );
        }
        Ok(outcome)
    }

    /// The engine's own etcd client identity: a short-lived certificate from the cluster's
    /// etcd client CA, trusting the etcd server CA.
    fn etcd_tls(&self, key: &ObjectKey) -> Step<Tls> {
        let pki = |m: String| {
            Failure(
                reasons::ETCD_NOT_READY,
                format!("etcd client identity: {m}"),
            )
        };
        let cluster = self
            .world
            .clusters
            .get(key)
            .ok_or_else(|| pki("cluster not found".into()))?;
        let client_ca = cluster
            .spec
            .certificate_authorities
            .etcd_client
            .as_ref()
            .ok_or_else(|| pki("no etcd client CA".into()))?;
        let server_ca = cluster
            .spec
            .etcd_server
            .ca
            .as_ref()
            .ok_or_else(|| pki("no etcd server CA".into()))?;
        let ca = oi_pki::CaKind::EtcdClient
            .load(&client_ca.certificate, &client_ca.private_key)
            .map_err(|e| pki(e.to_string()))?;
        let mut spec = oi_pki::LeafSpec::client(oi_pki::CaKind::EtcdClient, "oneinfra-engine", &[]);
        spec.key_algorithm = Some(oi_pki::KeyAlgorithm::EcdsaP256);
        let leaf = ca
            .issue(&spec, self.now, time::Duration::hours(1))
            .map_err(|e| pki(e.to_string()))?;
        Ok(Tls {
            ca_pem: server_ca.certificate.clone(),
            identity: Some((leaf.certificate_pem, leaf.private_key_pem)),
        })
    }

    /// The members as the first answering endpoint of `members` sees them, waiting for one
    /// until the deadline.
    async fn members(
        &self,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step<(String, Vec<Member>)> {
        loop {
            let mut last = String::from("no etcd member to ask");
            for m in members {
                match etcd.list(&m.client_url).await {
                    Ok(list) => return Ok((m.client_url.clone(), list)),
                    Err(e) => last = e.to_string(),
                }
            }
            if Instant::now() >= self.deadline {
                return Err(Failure(reasons::ETCD_NOT_READY, last));
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    async fn leave(
        &self,
        key: &ObjectKey,
        c: &Component,
        members: &[EtcdMember],
        leaving: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        let name = c.metadata.name.as_str();
        let hypervisor = c.spec.hypervisor.as_deref().unwrap_or_default();
        // etcd refuses to remove a voting member for 5 s after any member (re)connected
        // ("unhealthy cluster"): retry until the deadline, as when adding.
        while let Some(me) = leaving.iter().find(|m| m.name == name) {
            let (endpoint, list) = self.members(members, etcd).await?;
            let Some(member) = list
                .iter()
                .find(|m| m.name == name || m.peer_urls.contains(&me.peer_url))
            else {
                break;
            };
            match etcd.remove(&endpoint, member.id).await {
                Ok(()) => {
                    self.emit(
                        Some(hypervisor),
                        key,
                        Some(name),
                        "removed etcd member".to_string(),
                    );
                    break;
                }
                Err(e) if e.retryable() && Instant::now() < self.deadline => {
                    tokio::time::sleep(self.options.poll_interval).await;
                }
                Err(e) => return Err(Failure(reasons::ETCD_NOT_READY, e.to_string())),
            }
        }
        if let Some(h) = c.spec.hypervisor.as_deref() {
            let rt = self.runtime(h)?;
            let pods = rt
                .list_pods(&selector(key, Some(name)))
                .await
                .map_err(|e| cri_failure(&e))?;
            for pod in pods {
                rt.remove_pod(&pod.id).await.map_err(|e| cri_failure(&e))?;
                self.counters.removed.fetch_add(1, Ordering::Relaxed);
                self.emit(
                    Some(h),
                    key,
                    Some(name),
                    format!("removed pod {}", pod.name),
                );
            }
            let dirs = vec![
                render::config_dir(&key.namespace, &key.name, name),
                render::data_dir(&key.namespace, &key.name, name),
            ];
            rt.remove_host_paths(&dirs)
                .await
                .map_err(|e| cri_failure(&e))?;
            self.emit(Some(h), key, Some(name), "removed directories".to_string());
        }
        Ok(())
    }

    /// The replica's etcd pod.
    fn etcd_pod<'r>(&self, r: &'r Replica<'_>) -> Step<&'r PodSpec> {
        let pod_name = format!("{}-etcd", r.name());
        r.pod(&pod_name).ok_or_else(|| {
            Failure(
                reasons::RENDER_FAILED,
                format!("{} has no pod {pod_name}", r.name()),
            )
        })
    }

    /// Starts the etcd pods of the replicas that found the cluster (`new`) together, then
    /// waits until one of them answers (a new cluster answers once it has a quorum).
    async fn etcd_founders(
        &self,
        key: &ObjectKey,
        founders: &[&Replica<'_>],
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        if founders.is_empty() {
            return Ok(());
        }
        let mut pods = Vec::new();
        for r in founders {
            pods.push((*r, self.etcd_pod(r)?));
        }
        for result in join_all(pods.into_iter().map(|(r, spec)| self.pod(key, r, spec))).await {
            result?;
        }
        let founding: Vec<EtcdMember> = members
            .iter()
            .filter(|m| founders.iter().any(|r| r.name() == m.name))
            .cloned()
            .collect();
        self.members(&founding, etcd).await?;
        Ok(())
    }

    /// The cluster's API server CA certificate (PEM), which `/readyz` answers are checked
    /// against.
    fn apiserver_ca(&self, key: &ObjectKey) -> String {
        self.world
            .clusters
            .get(key)
            .and_then(|c| c.spec.api_server.ca.as_ref())
            .map(|c| c.certificate.clone())
            .unwrap_or_default()
    }

    /// Waits (until the deadline) for the API server of replica `r`, whose pod was just
    /// replaced, to answer `/readyz`.
    async fn apiserver_ready(&self, key: &ObjectKey, r: &Replica<'_>) -> Step {
        let Some(url) = r.url(self.world, names::APISERVER) else {
            return Ok(());
        };
        let ca = self.apiserver_ca(key);
        loop {
            match self.readyz(&url, &ca).await {
                Ok(()) => {
                    self.emit(
                        Some(&r.hypervisor),
                        key,
                        Some(r.name()),
                        "kube-apiserver ready".to_string(),
                    );
                    return Ok(());
                }
                Err(e) if Instant::now() >= self.deadline => {
                    return Err(Failure(
                        reasons::APISERVER_NOT_READY,
                        format!(
                            "kube-apiserver {} on {} ({url}) is not ready after its pod changed: {e}",
                            r.name(),
                            r.hypervisor
                        ),
                    ));
                }
                Err(_) => tokio::time::sleep(self.options.poll_interval).await,
            }
        }
    }

    /// The member list of the first member that answers right now (one attempt each, no
    /// waiting): when there is one, the cluster is running and has a quorum to keep.
    async fn etcd_answers(
        &self,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Option<Vec<Member>> {
        for m in members {
            if let Ok(list) = etcd.list(&m.client_url).await {
                return Some(list);
            }
        }
        None
    }

    /// Waits (until the deadline) for the member of replica `r`, whose pod was just created
    /// or replaced, to be a started voting member that etcd itself reports healthy.
    async fn etcd_healthy(
        &self,
        key: &ObjectKey,
        r: &Replica<'_>,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        let name = r.name();
        let Some(me) = members.iter().find(|m| m.name == name) else {
            return Ok(());
        };
        loop {
            let last = match etcd.healthy(&me.client_url).await {
                Ok(true) => {
                    let (_, list) = self.members(members, etcd).await?;
                    match list.iter().find(|m| m.peer_urls.contains(&me.peer_url)) {
                        Some(m) if m.started() && !m.is_learner => {
                            self.emit(
                                Some(&r.hypervisor),
                                key,
                                Some(name),
                                "etcd member healthy".to_string(),
                            );
                            return Ok(());
                        }
                        Some(_) => "not a started voting member yet".to_string(),
                        None => "not in the membership".to_string(),
                    }
                }
                Ok(false) => "etcd reports it unhealthy".to_string(),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= self.deadline {
                return Err(Failure(
                    reasons::ETCD_NOT_READY,
                    format!("etcd member {name} is not healthy after its pod changed: {last}"),
                ));
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    /// Joins a replica to the running cluster: member add as a learner (unless it is in the
    /// membership already), its pod, promotion once it caught up. Returns what happened to
    /// the pod.
    async fn etcd_join(
        &self,
        key: &ObjectKey,
        r: &Replica<'_>,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step<Outcome> {
        let name = r.name();
        let spec = self.etcd_pod(r)?;
        let Some(me) = members.iter().find(|m| m.name == name) else {
            return Ok(Outcome::Unchanged);
        };
        // Asked: the other members first, then the replica itself (a member already, whose
        // pod may be the only one running).
        let others: Vec<EtcdMember> = members
            .iter()
            .filter(|m| m.name != name)
            .chain(std::iter::once(me))
            .cloned()
            .collect();
        let found = |list: &[Member]| {
            list.iter()
                .find(|m| m.peer_urls.contains(&me.peer_url))
                .cloned()
        };
        // etcd refuses a new member while it considers the cluster unhealthy (a member
        // promoted moments ago counts as not yet connected): retry until the deadline.
        loop {
            let (endpoint, list) = self.members(&others, etcd).await?;
            if found(&list).is_some() {
                break;
            }
            match etcd.add_learner(&endpoint, &me.peer_url).await {
                Ok(()) => {
                    self.emit(
                        Some(&r.hypervisor),
                        key,
                        Some(name),
                        "added etcd member as learner".to_string(),
                    );
                    break;
                }
                Err(e) if e.retryable() && Instant::now() < self.deadline => {
                    tokio::time::sleep(self.options.poll_interval).await;
                }
                Err(e) => {
                    return Err(Failure(
                        reasons::ETCD_NOT_READY,
                        format!("adding etcd member {name}: {e}"),
                    ));
                }
            }
        }
        let outcome = self.pod(key, r, spec).await?;
        // Promote once the learner caught up.
        loop {
            let (endpoint, list) = self.members(&others, etcd).await?;
            let Some(member) = found(&list) else {
                return Err(Failure(
                    reasons::ETCD_NOT_READY,
                    format!("etcd member {name} left the membership"),
                ));
            };
            if !member.is_learner {
                return Ok(outcome);
            }
            match etcd.promote(&endpoint, member.id).await {
                Ok(()) => {
                    self.emit(
                        Some(&r.hypervisor),
                        key,
                        Some(name),
                        "promoted etcd member".to_string(),
                    );
                    return Ok(outcome);
                }
                Err(e) if Instant::now() >= self.deadline => {
                    return Err(Failure(
                        reasons::ETCD_NOT_READY,
                        format!("promoting etcd member {name}: {e}"),
                    ));
                }
                Err(_) => tokio::time::sleep(self.options.poll_interval).await,
            }
        }
    }

    async fn readyz(&self, base: &str, ca: &str) -> std::result::Result<(), String> {
        let tls = Tls {
            ca_pem: ca.to_string(),
            identity: None,
        };
        let response = self
            .network
            .request(HttpsRequest {
                base,
                method: &Method::GET,
                path: "/readyz",
                body: None,
                tls: &tls,
            })
            .await
            .map_err(|e| e.reason)?;
        if response.status == 200 {
            Ok(())
        } else {
            Err(format!(
                "/readyz answered {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body).trim()
            ))
        }
    }

    async fn observe(
        &self,
        key: &ObjectKey,
        live: &[Replica<'_>],
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Observed {
        let mut o = Observed::default();
        let mut failures: Vec<Failure> = Vec::new();
        if !members.is_empty() {
            let mut list = None;
            let mut last = String::new();
            for m in members {
                match etcd.list(&m.client_url).await {
                    Ok(l) => {
                        list = Some(l);
                        break;
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            match list {
                None => failures.push(Failure(reasons::ETCD_NOT_READY, last)),
                Some(list) => {
                    let wanted =
                        |m: &Member| members.iter().any(|w| m.peer_urls.contains(&w.peer_url));
                    o.etcd_started = list.iter().filter(|m| m.started() && wanted(m)).count();
                    o.etcd_voting = list
                        .iter()
                        .filter(|m| m.started() && !m.is_learner && wanted(m))
                        .count();
                    if o.etcd_voting != members.len() || list.len() != members.len() {
                        failures.push(Failure(
                            reasons::ETCD_NOT_READY,
                            format!(
                                "etcd: {} of {} members voting, {} started, {} in the membership",
                                o.etcd_voting,
                                members.len(),
                                o.etcd_started,
                                list.len()
                            ),
                        ));
                    }
                }
            }
        }
        let ca = self.apiserver_ca(key);
        let ca = ca.as_str();
        let checks = live.iter().filter_map(|r| {
            r.url(self.world, names::APISERVER)
                .map(|url| async move { (r, url.clone(), self.readyz(&url, ca).await) })
        });
        let mut apiserver_errors = Vec::new();
        let mut ingress_errors = Vec::new();
        let mut ingresses = 0;
        for (r, url, result) in join_all(checks).await {
            let is_ingress = r.component.spec.role == ComponentRole::ControlPlaneIngress;
            ingresses += usize::from(is_ingress);
            match (result, is_ingress) {
                (Ok(()), false) => o.apiservers_ready += 1,
                (Ok(()), true) => o.ingress_ready = true,
                (Err(e), false) => apiserver_errors.push(format!(
                    "kube-apiserver {} on {} ({url}): {e}",
                    r.name(),
                    r.hypervisor
                )),
                (Err(e), true) => ingress_errors.push(format!(
                    "ingress {} on {} ({url}): {e}",
                    r.name(),
                    r.hypervisor
                )),
            }
        }
        if ingresses == 0 {
            o.ingress_ready = false;
            ingress_errors.push("the cluster has no ingress".to_string());
        }
        if !apiserver_errors.is_empty() {
            failures.push(Failure(
                reasons::APISERVER_NOT_READY,
                apiserver_errors.join("; "),
            ));
        }
        if !ingress_errors.is_empty() {
            failures.push(Failure(
                reasons::INGRESS_NOT_READY,
                ingress_errors.join("; "),
            ));
        }
        o.failure = failures.into_iter().next();
        o
    }
}

#[derive(Default)]
struct Observed {
    etcd_started: usize,
    etcd_voting: usize,
    apiservers_ready: usize,
    ingress_ready: bool,
    failure: Option<Failure>,
}

fn world_files(
    world: &World,
    hypervisor: &str,
    cluster: &ObjectKey,
    component: &str,
) -> BTreeMap<String, String> {
    world
        .hypervisors
        .get(&ObjectKey::cluster_scoped(hypervisor))
        .and_then(|h| h.status.files.get(&cluster.namespace))
        .and_then(|m| m.get(&cluster.name))
        .and_then(|m| m.get(component))
        .cloned()
        .unwrap_or_default()
}

/// The pods of `rendered` that must restart because files they read change (their hash
/// differs from `known`). A pod reads the files its containers name (command, arguments,
/// environment) and the files that those files name (a kubeconfig or an haproxy
/// configuration naming a certificate). A changed file that no pod names restarts every pod
/// of the component: nothing tells which one reads it. A name is matched as a substring, so a
/// mistake can only restart a pod too many, never one too few.
fn pods_reading_changed_files(
    rendered: &Rendered,
    known: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let changed: Vec<&HostFile> = rendered
        .files
        .iter()
        .filter(|f| known.get(&f.path) != Some(&f.content_hash()))
        .collect();
    let mut restart = BTreeSet::new();
    for file in changed {
        let readers: Vec<&PodSpec> = rendered
            .pods
            .iter()
            .filter(|p| pod_reads(p, &rendered.files, &file.path))
            .collect();
        let readers = if readers.is_empty() {
            rendered.pods.iter().collect()
        } else {
            readers
        };
        restart.extend(readers.into_iter().map(|p| p.name.clone()));
    }
    restart
}

/// Whether `pod` reads the file at `path`: see [`pods_reading_changed_files`].
fn pod_reads(pod: &PodSpec, files: &[HostFile], path: &str) -> bool {
    let named: Vec<&str> = pod
        .containers
        .iter()
        .flat_map(|c| c.command.iter().chain(&c.args).chain(c.env.values()))
        .map(String::as_str)
        .collect();
    named.iter().any(|t| t.contains(path))
        || files.iter().any(|f| {
            f.path != path
                && named.iter().any(|t| t.contains(&f.path))
                && String::from_utf8_lossy(&f.content).contains(path)
        })
}

fn count_changed(files: &[HostFile], known: &BTreeMap<String, String>) -> u64 {
    files
        .iter()
        .filter(|f| known.get(&f.path) != Some(&f.content_hash()))
        .count() as u64
}

mod dry_run;
pub use dry_run::{DryRun, HypervisorPlan, dry_run};

#[cfg(test)]
mod tests;
