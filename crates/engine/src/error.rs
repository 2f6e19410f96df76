//! Why a step of a cluster's run failed: the error keeps its source, and [`StepError::reason`]
//! is the one place that says which condition reason each failure is.

use std::sync::Arc;

use oi_planner::Reason;

use crate::connect::ConnectError;
use crate::etcd::EtcdError;

/// A failed step of a cluster's run. Its text is the condition's message.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A hypervisor of the cluster could not be reached.
    #[error(
        "hypervisor {hypervisor} is unreachable: {source}; if it is gone for good, remove it (`oi hypervisor remove --name {hypervisor}`, or delete the Hypervisor)"
    )]
    Unreachable {
        hypervisor: String,
        #[source]
        source: Arc<ConnectError>,
    },
    /// A component names a hypervisor the run does not know.
    #[error("hypervisor {hypervisor} is not known")]
    UnknownHypervisor { hypervisor: String },
    /// A hypervisor's runtime refused or failed a call.
    #[error("{0}")]
    Runtime(#[source] oi_cri::Error),
    /// The engine has no identity to talk to etcd with.
    #[error("etcd client identity: {reason}")]
    EtcdIdentity { reason: String },
    /// No member answered before the deadline (the last answer, or that there was nobody
    /// to ask).
    #[error("{last}")]
    EtcdUnanswered { last: String },
    /// Removing a member would leave the voting members that stay without a quorum.
    #[error(
        "etcd member {member} is not removed: the {staying} voting members that would stay need {quorum} healthy and {} {}{}; bring the others back, or, if they are gone for good too, start again from a survivor's data (`oi cluster recover --from-member NAME`)",
        healthy.len(),
        if healthy.len() == 1 { "is" } else { "are" },
        describe_quorum(healthy, unhealthy)
    )]
    QuorumWouldBreak {
        member: String,
        staying: usize,
        quorum: usize,
        healthy: Vec<String>,
        /// Each with why.
        unhealthy: Vec<String>,
    },
    /// Removing a retiring member failed.
    #[error("{0}")]
    EtcdRemove(#[source] EtcdError),
    /// Adding a member as a learner failed.
    #[error("adding etcd member {member}: {source}")]
    EtcdAdd {
        member: String,
        #[source]
        source: EtcdError,
    },
    /// Promoting a learner failed until the deadline.
    #[error("promoting etcd member {member}: {source}")]
    EtcdPromote {
        member: String,
        #[source]
        source: EtcdError,
    },
    /// A member being joined disappeared from the membership.
    #[error("etcd member {member} left the membership")]
    EtcdLeft { member: String },
    /// A member whose pod changed is not a healthy voting member by the deadline.
    #[error(
        "etcd member {member} is not healthy after its pod changed: {last}; its log ends: {}",
        crate::membership::last_lines(log)
    )]
    EtcdUnhealthy {
        member: String,
        last: String,
        /// The tail of its log, or why there is none.
        log: String,
    },
    /// A member's etcd process exited.
    #[error(
        "etcd member {member} on {hypervisor} exited with code {exit_code}; its log ends: {}",
        crate::membership::last_lines(log)
    )]
    EtcdExited {
        member: String,
        hypervisor: String,
        exit_code: i32,
        log: String,
    },
    /// The survivor of a recovery did not become a healthy cluster of one.
    #[error(
        "etcd member {member} did not become a healthy cluster of one: {last}; its log ends: {}",
        crate::membership::last_lines(log)
    )]
    EtcdRecover {
        member: String,
        last: String,
        log: String,
    },
    /// A member whose data is unusable could not join again.
    #[error("etcd member {member} lost its data ({cause}) and cannot join again: {reason}")]
    EtcdRejoin {
        member: String,
        cause: String,
        reason: String,
    },
    /// Not every member votes.
    #[error(
        "etcd: {voting} of {members} members voting, {started} started, {listed} in the membership"
    )]
    EtcdNotVoting {
        voting: usize,
        members: usize,
        started: usize,
        listed: usize,
    },
    /// A container would go from the version it runs more than one minor ahead, or back.
    #[error(
        "{component}'s {container} runs {running} and the plan would run {planned}: {why}; nothing was changed (the version a cluster runs is read from its pods: set spec.kubernetesVersion one minor after it, or use `oi cluster upgrade`)"
    )]
    VersionSkew {
        component: String,
        container: String,
        running: String,
        planned: String,
        why: String,
    },
    /// A replica's rendering has no etcd pod.
    #[error("{component} has no pod {pod}")]
    MissingPod { component: String, pod: String },
    /// An API server whose pod was replaced does not answer `/readyz` by the deadline.
    #[error(
        "kube-apiserver {component} on {hypervisor} ({url}) is not ready after its pod changed: {reason}"
    )]
    ApiServerNotReadyAfterChange {
        component: String,
        hypervisor: String,
        url: String,
        reason: String,
    },
    /// API servers that do not answer `/readyz`, each with why.
    #[error("{}", .0.join("; "))]
    ApiServersNotReady(Vec<String>),
    /// The ingress does not answer `/readyz`, or there is none.
    #[error("{}", .0.join("; "))]
    IngressNotReady(Vec<String>),
    /// An ingress's haproxy runtime API refused, failed or did not answer in time.
    #[error(
        "ingress {component} on {hypervisor}: haproxy's runtime API: {reason} (its image needs a shell and `nc`)"
    )]
    IngressRuntimeApi {
        component: String,
        hypervisor: String,
        reason: String,
    },
    /// The snapshot to restore could not be packed for the journey to the hypervisors.
    #[error("packing the snapshot to restore: {0}")]
    SnapshotPack(String),
    /// Tearing a cluster down failed.
    #[error(transparent)]
    Teardown(Box<StepError>),
    /// A call to a hypervisor's runtime for a SIPCluster's service (`what` it was doing)
    /// failed.
    #[error("{what}: {source}")]
    Service {
        what: String,
        #[source]
        source: Box<oi_cri::Error>,
    },
    /// A SIPCluster's service's pod does not run: its containers exited, or did not all run
    /// by the deadline (each with why).
    #[error("pod {pod} on {hypervisor}: {}", .why.join(", "))]
    ServiceNotRunning {
        pod: String,
        hypervisor: String,
        why: Vec<String>,
    },
    /// What the cluster must hold inside could not be planned or written through its API
    /// (`endpoint`), and `object` names what (empty when nothing was tried).
    #[error("inside the cluster ({endpoint}): {object}{}{reason}", if .object.is_empty() { "" } else { ": " })]
    ClusterBootstrap {
        endpoint: String,
        object: String,
        reason: String,
    },
}

impl StepError {
    /// The failure as a record carries it: the reason and the message.
    pub fn failure(&self) -> oi_planner::record::Failure {
        oi_planner::record::Failure::new(self.reason(), self.to_string())
    }

    /// The reason of the `ReconcileSucceeded=False` condition this failure sets.
    pub fn reason(&self) -> Reason {
        match self {
            StepError::Unreachable { .. } | StepError::UnknownHypervisor { .. } => {
                Reason::HypervisorUnreachable
            }
            StepError::Runtime(_) | StepError::Service { .. } | StepError::SnapshotPack(_) => {
                Reason::RuntimeError
            }
            StepError::ServiceNotRunning { .. } => Reason::ServiceNotRunning,
            StepError::EtcdIdentity { .. }
            | StepError::EtcdUnanswered { .. }
            | StepError::EtcdRemove(_)
            | StepError::QuorumWouldBreak { .. }
            | StepError::EtcdAdd { .. }
            | StepError::EtcdPromote { .. }
            | StepError::EtcdLeft { .. }
            | StepError::EtcdUnhealthy { .. }
            | StepError::EtcdExited { .. }
            | StepError::EtcdRejoin { .. }
            | StepError::EtcdRecover { .. }
            | StepError::EtcdNotVoting { .. } => Reason::EtcdNotReady,
            StepError::MissingPod { .. } => Reason::RenderFailed,
            StepError::VersionSkew { .. } => Reason::VersionSkew,
            StepError::ApiServerNotReadyAfterChange { .. } | StepError::ApiServersNotReady(_) => {
                Reason::ApiServerNotReady
            }
            StepError::IngressNotReady(_) | StepError::IngressRuntimeApi { .. } => {
                Reason::IngressNotReady
            }
            StepError::Teardown(_) => Reason::DeleteFailed,
            StepError::ClusterBootstrap { .. } => Reason::ClusterBootstrapFailed,
        }
    }
}

impl From<oi_cri::Error> for StepError {
    fn from(e: oi_cri::Error) -> Self {
        StepError::Runtime(e)
    }
}

/// ` (healthy: a, b; not: c (why))` for a quorum refusal.
fn describe_quorum(healthy: &[String], unhealthy: &[String]) -> String {
    let mut parts = Vec::new();
    if !healthy.is_empty() {
        parts.push(format!("healthy: {}", healthy.join(", ")));
    }
    if !unhealthy.is_empty() {
        parts.push(format!("not: {}", unhealthy.join(", ")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join("; "))
    }
}

/// A step's result.
pub(crate) type Step<T = ()> = Result<T, StepError>;
