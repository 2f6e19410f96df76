//! What a run did, written back into the world: the other pure end of a run.
//!
//! ```text
//! Plan.world ──record_run(plan.sip, results of the engine, now)──► World
//!   per cluster result:  file hashes placed ─► Hypervisor status files
//!                        VPN peers after join requests ─► Cluster status vpnPeers
//!                        ready ─► Cluster status kubernetesVersion (the version it runs)
//!                        components torn down ─► out of the world, their ports freed
//!                        deleted ─► the cluster, its components and ports out of the world
//!                        otherwise ─► ReconcileStarted=True, then ReconcileSucceeded
//!                                     True, or False with the reason and message
//!   trust changes the SIPClusters planned ─► the clusters' spec.apiServer.oidc
//!   per SIPCluster's services' result ─► Hypervisor status files, ports of one deleted
//!                        freed, its Ready condition (sip::services::record_services)
//! ```
//!
//! The engine executes a [`crate::Plan`] and reports a [`ClusterResult`] per cluster; it
//! never writes the world itself, so that what a run records is tested without a hypervisor.

use std::collections::BTreeMap;
use std::fmt;

use oi_api::common::{ConditionStatus, condition_types, find_condition, set_condition};
use oi_api::{ObjectKey, World};
use time::OffsetDateTime;

/// Why a cluster is (not) ready: the reason of its `ReconcileSucceeded` condition, and of
/// the manager's metrics and events. One place names them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Ready: etcd voting, every API server and the ingress answering.
    Succeeded,
    /// Set on every cluster a run converges, when it starts.
    Started,
    /// Torn down and out of the world.
    Deleted,
    /// The cluster could not be prepared (invalid, unschedulable, a PKI that does not load).
    PrepareFailed,
    /// A component could not be rendered.
    RenderFailed,
    /// A hypervisor of the cluster could not be reached.
    HypervisorUnreachable,
    /// A hypervisor's runtime refused or failed a call.
    RuntimeError,
    /// etcd did not answer, or not with every member voting.
    EtcdNotReady,
    /// An API server did not answer `/readyz`.
    ApiServerNotReady,
    /// The ingress did not answer `/readyz`.
    IngressNotReady,
    /// Tearing the cluster down failed.
    DeleteFailed,
    /// The cluster is up but what it must hold inside (CRDs, RBAC, join tokens, add-ons)
    /// could not be written through its API.
    ClusterBootstrapFailed,
    /// What the plan would run is more than one minor away from what runs (or behind it):
    /// nothing was changed.
    VersionSkew,
    /// A SIPCluster's support service does not run (its containers exited, or did not run
    /// by the deadline).
    ServiceNotRunning,
}

impl Reason {
    /// The reason as conditions, events and metrics carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Succeeded => condition_types::RECONCILE_SUCCEEDED,
            Reason::Started => condition_types::RECONCILE_STARTED,
            Reason::Deleted => "Deleted",
            Reason::PrepareFailed => "PrepareFailed",
            Reason::RenderFailed => "RenderFailed",
            Reason::HypervisorUnreachable => "HypervisorUnreachable",
            Reason::RuntimeError => "RuntimeError",
            Reason::EtcdNotReady => "EtcdNotReady",
            Reason::ApiServerNotReady => "APIServerNotReady",
            Reason::IngressNotReady => "IngressNotReady",
            Reason::DeleteFailed => "DeleteFailed",
            Reason::ClusterBootstrapFailed => "ClusterBootstrapFailed",
            Reason::VersionSkew => "VersionSkew",
            Reason::ServiceNotRunning => "ServiceNotRunning",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a step failed: a reason of [`Reason`] (as the engine's errors classify it) and what
/// happened, for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: Reason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.reason)
    }
}

/// What became of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOutcome {
    pub cluster: ObjectKey,
    pub ready: bool,
    /// The cluster was deleted and left the world.
    pub deleted: bool,
    /// Why it is (not) ready.
    pub reason: Reason,
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
    /// Nothing observed yet, not ready.
    pub fn new(cluster: &ObjectKey) -> Self {
        ClusterOutcome {
            cluster: cluster.clone(),
            ready: false,
            deleted: false,
            reason: Reason::Started,
            message: String::new(),
            etcd_started: 0,
            etcd_voting: 0,
            apiservers_ready: 0,
            ingress_ready: false,
        }
    }

    /// Not ready, for `reason`.
    #[must_use]
    pub fn fail(mut self, reason: Reason, message: impl Into<String>) -> Self {
        self.ready = false;
        self.reason = reason;
        self.message = message.into();
        self
    }
}

/// File hashes the engine placed for one component on its hypervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedFiles {
    pub hypervisor: String,
    pub component: String,
    /// Path -> content hash: every file the component has there now.
    pub hashes: BTreeMap<String, String>,
}

/// What one cluster's run changed and found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterResult {
    pub outcome: ClusterOutcome,
    pub files: Vec<PlacedFiles>,
    /// Components whose pods, etcd member and directories are gone.
    pub removed: Vec<ObjectKey>,
    /// The join tokens in force inside the cluster, once its in-cluster objects are in
    /// place (`status.joinTokens`).
    pub join_tokens: Option<Vec<String>>,
    /// The VPN peers after the run answered and forgot join requests (`status.vpnPeers`).
    pub vpn_peers: Option<Vec<oi_api::VpnPeer>>,
    /// The workers that joined through a NodeJoinRequest answered (`Issued=True`), as the
    /// run found them inside the cluster: what a CA rotation's last phase names.
    pub joined: Option<Vec<String>>,
    /// The joined workers after the run's pass over join requests, with whether each Node
    /// registered and its VPN address (`status.joinedNodes`); `None` when the run did not
    /// reach the cluster's API (what was recorded stays).
    pub joined_nodes: Option<Vec<oi_api::JoinedNode>>,
    /// Replicas whose etcd member lost its data and joined again, with how it was started
    /// (their `status.etcdMember` from now on).
    pub etcd_rejoined: Vec<(String, oi_api::EtcdMemberStart)>,
}

impl ClusterResult {
    /// A result with nothing done yet.
    pub fn new(cluster: &ObjectKey) -> Self {
        ClusterResult {
            outcome: ClusterOutcome::new(cluster),
            files: Vec::new(),
            removed: Vec::new(),
            join_tokens: None,
            vpn_peers: None,
            joined: None,
            joined_nodes: None,
            etcd_rejoined: Vec::new(),
        }
    }
}

/// What [`record_run`] gives: the world after the run, and how each live SIPCluster's
/// services ended it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub world: World,
    pub services: Vec<crate::sip::services::ServicesOutcome>,
}

/// The world after a run of `plan` ([`crate::plan_run`]): the clusters' results recorded
/// ([`record`]), the trust changes the SIPClusters asked for written into their clusters'
/// specs, then the services' results ([`crate::sip::services::record_services`]).
pub fn record_run(
    world: World,
    sip: &crate::SipPlan,
    clusters: &BTreeMap<ObjectKey, ClusterResult>,
    services: &[crate::sip::services::SipServicesResult],
    now: OffsetDateTime,
) -> Recorded {
    let mut world = record(world, clusters, now);
    for t in &sip.trust {
        t.apply(&mut world);
    }
    let services = crate::sip::services::record_services(
        &mut world,
        &sip.reports,
        &sip.services,
        services,
        now,
    );
    Recorded { world, services }
}

/// The world after a run: `world` (the plan's) with what `results` report written back;
/// see the module documentation. Clusters without a result are left as they are.
pub fn record(
    mut world: World,
    results: &BTreeMap<ObjectKey, ClusterResult>,
    now: OffsetDateTime,
) -> World {
    for result in results.values() {
        record_cluster(&mut world, result, now);
    }
    world
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

fn record_cluster(world: &mut World, result: &ClusterResult, now: OffsetDateTime) {
    let outcome = &result.outcome;
    let key = &outcome.cluster;
    for placed in &result.files {
        if let Some(entry) = files_entry(world, &placed.hypervisor, &key.namespace, &key.name) {
            entry.insert(placed.component.clone(), placed.hashes.clone());
        }
    }
    for (component, start) in &result.etcd_rejoined {
        if let Some(c) = world
            .components
            .get_mut(&ObjectKey::new(key.namespace.clone(), component.clone()))
        {
            c.status.etcd_member = Some(start.clone());
        }
    }
    for component in &result.removed {
        if let Some(c) = crate::remove_component(world, component)
            && let Some(entry) = c
                .spec
                .hypervisor
                .as_deref()
                .and_then(|h| files_entry(world, h, &key.namespace, &key.name))
        {
            entry.remove(&c.metadata.name);
        }
    }
    if outcome.deleted {
        crate::remove_cluster(world, key);
        for h in world.hypervisors.values_mut() {
            if let Some(clusters) = h.status.files.get_mut(&key.namespace) {
                clusters.remove(&key.name);
            }
        }
    } else if let Some(cluster) = world.clusters.get_mut(key) {
        // A drain's last step retired its replica: nothing is left on a drained hypervisor.
        if !result.removed.is_empty()
            && find_condition(&cluster.status.conditions, condition_types::DRAINED)
                .is_some_and(|c| c.status == ConditionStatus::False && c.reason == "Moving")
            && !crate::prepare::on_drained_hypervisors(&world.components, &world.hypervisors, key)
        {
            set_condition(
                &mut cluster.status.conditions,
                condition_types::DRAINED,
                ConditionStatus::True,
                crate::prepare::DRAINED_REASON,
                crate::prepare::DRAINED_MESSAGE,
                now,
            );
        }
        // Healed: the cluster is ready, so every replacement joined (what is left on an
        // unreachable hypervisor is only pods to remove once it answers).
        if outcome.ready
            && find_condition(&cluster.status.conditions, condition_types::HEALED)
                .is_some_and(|c| c.status == ConditionStatus::False)
        {
            set_condition(
                &mut cluster.status.conditions,
                condition_types::HEALED,
                ConditionStatus::True,
                crate::prepare::HEALED_REASON,
                crate::prepare::HEALED_MESSAGE,
                now,
            );
        }
        // A run starts on every live cluster it could prepare.
        let started = !cluster.is_being_deleted() && outcome.reason != Reason::PrepareFailed;
        if let Some(tokens) = &result.join_tokens {
            cluster.status.join_tokens.clone_from(tokens);
        }
        if let Some(peers) = &result.vpn_peers {
            cluster.status.vpn_peers.clone_from(peers);
        }
        if let Some(nodes) = &result.joined_nodes {
            cluster.status.joined_nodes.clone_from(nodes);
        }
        // Ready: the whole control plane runs the spec's version (an upgrade is done).
        if outcome.ready {
            cluster
                .status
                .kubernetes_version
                .clone_from(&cluster.spec.kubernetes_version);
        }
        let conditions = &mut cluster.status.conditions;
        // Ready: every live component of the plan took part.
        if outcome.ready {
            let namespace = world
                .components
                .range_mut(ObjectKey::new(key.namespace.clone(), String::new())..)
                .take_while(|(k, _)| k.namespace == key.namespace);
            for (_, c) in namespace
                .filter(|(_, c)| c.spec.cluster == key.name && !c.metadata.is_being_deleted())
            {
                set_condition(
                    &mut c.status.conditions,
                    condition_types::JOINED,
                    ConditionStatus::True,
                    condition_types::JOINED,
                    "",
                    now,
                );
            }
        }
        if started {
            set_condition(
                conditions,
                condition_types::RECONCILE_STARTED,
                ConditionStatus::True,
                Reason::Started.as_str(),
                "",
                now,
            );
        }
        let (status, reason) = if outcome.ready {
            (ConditionStatus::True, Reason::Succeeded)
        } else {
            (ConditionStatus::False, outcome.reason)
        };
        set_condition(
            conditions,
            condition_types::RECONCILE_SUCCEEDED,
            status,
            reason.as_str(),
            &outcome.message,
            now,
        );
    }
    prune_files(world);
}

#[cfg(test)]
mod tests;
