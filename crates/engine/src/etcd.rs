//! etcd for the engine: cluster membership, each member's status and health, leadership
//! transfer and snapshots, through an [`Etcd`] — etcd's gRPC API for
//! [`RealNetwork`](crate::https::RealNetwork) (the `etcd-client` crate, mutual TLS, one
//! client per endpoint and identity, kept), a simulation in tests.
//!
//! Refusals are told apart as etcd's own Go client does (clientv3's `rpctypes`): by the gRPC
//! code, and by etcd's error descriptions, compared whole.

use std::future::Future;

use crate::https::Tls;

/// One member as etcd reports it. A member added but not started yet has no name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl Member {
    /// Whether the member process has started and joined (it has published its name).
    pub fn started(&self) -> bool {
        !self.name.is_empty()
    }
}

/// etcd's error descriptions the engine acts on (`api/v3rpc/rpctypes` of etcd).
pub mod refusals {
    /// A learner asked to be promoted before it caught up with the leader.
    pub const LEARNER_NOT_READY: &str =
        "etcdserver: can only promote a learner member which is in sync with leader";
    /// A learner added while another one has not been promoted yet.
    pub const TOO_MANY_LEARNERS: &str = "etcdserver: too many learner members in cluster";
    /// A membership change refused while the cluster is not healthy (a member just joined).
    pub const UNHEALTHY_CLUSTER: &str = "etcdserver: unhealthy cluster";
    /// A membership change that would leave too few started members.
    pub const NOT_ENOUGH_STARTED: &str =
        "etcdserver: re-configuration failed due to not enough started members";
}

/// A gRPC status code etcd answered with (the names of gRPC's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unavailable,
    DeadlineExceeded,
    FailedPrecondition,
    NotFound,
    InvalidArgument,
    PermissionDenied,
    Other(i32),
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Code::Other(n) => write!(f, "code {n}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Why an etcd call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd {endpoint} unreachable: {reason}")]
    Unreachable { endpoint: String, reason: String },
    #[error("etcd {endpoint} refused {operation} ({code}): {message}")]
    Refused {
        endpoint: String,
        operation: &'static str,
        code: Code,
        message: String,
    },
    #[error("etcd {endpoint} answered {operation} with an unexpected body: {reason}")]
    Body {
        endpoint: String,
        operation: &'static str,
        reason: String,
    },
}

impl EtcdError {
    /// Whether etcd refused a membership change for a passing reason: the member could not
    /// serve it (no leader, stopping), the cluster looks unhealthy (a member just joined or
    /// was promoted), a learner is not in sync yet, or the endpoint did not answer.
    pub fn retryable(&self) -> bool {
        match self {
            EtcdError::Unreachable { .. } => true,
            EtcdError::Refused { code, message, .. } => {
                matches!(code, Code::Unavailable | Code::DeadlineExceeded)
                    || [
                        refusals::LEARNER_NOT_READY,
                        refusals::TOO_MANY_LEARNERS,
                        refusals::UNHEALTHY_CLUSTER,
                        refusals::NOT_ENOUGH_STARTED,
                    ]
                    .contains(&message.as_str())
            }
            EtcdError::Body { .. } => false,
        }
    }

    /// Whether etcd refused to promote a learner that has not caught up yet (retryable).
    pub fn not_in_sync(&self) -> bool {
        matches!(self, EtcdError::Refused { message, .. } if message == refusals::LEARNER_NOT_READY)
    }
}

/// Where a snapshot's bytes go as they arrive: a bounded channel, so that a destination
/// slower than etcd slows etcd's stream instead of piling its bytes up; a receiver that
/// stopped taking them ends the transfer.
pub type SnapshotSink = tokio::sync::mpsc::Sender<bytes::Bytes>;

/// What a [`SnapshotSink`]'s closed receiver means to the transfer.
pub fn sink_closed(endpoint: &str) -> EtcdError {
    EtcdError::Body {
        endpoint: endpoint.to_string(),
        operation: "snapshot",
        reason: "its bytes could not be kept: their destination stopped taking them".into(),
    }
}

/// etcd's API, as the engine uses it: each call asks the member at `endpoint`, trusting
/// `tls.ca_pem` and presenting `tls.identity`.
pub trait Etcd: Send + Sync {
    /// The members, as `endpoint` sees them.
    fn members(
        &self,
        endpoint: &str,
        tls: &Tls,
    ) -> impl Future<Output = Result<Vec<Member>, EtcdError>> + Send;

    /// Adds a learner with `peer_url`.
    fn add_learner(
        &self,
        endpoint: &str,
        tls: &Tls,
        peer_url: &str,
    ) -> impl Future<Output = Result<(), EtcdError>> + Send;

    /// Promotes learner `id` to a voting member.
    fn promote(
        &self,
        endpoint: &str,
        tls: &Tls,
        id: u64,
    ) -> impl Future<Output = Result<(), EtcdError>> + Send;

    /// Removes member `id`.
    fn remove(
        &self,
        endpoint: &str,
        tls: &Tls,
        id: u64,
    ) -> impl Future<Output = Result<(), EtcdError>> + Send;

    /// Whether the member is healthy by etcd's own measure (as `etcdctl endpoint health`: a
    /// linearizable read through it succeeds, so it has a leader and a quorum answers).
    /// `Ok(false)` when it answered that it cannot serve one, an error when it did not
    /// answer.
    fn healthy(
        &self,
        endpoint: &str,
        tls: &Tls,
    ) -> impl Future<Output = Result<bool, EtcdError>> + Send;

    /// What the member says of itself.
    fn status(
        &self,
        endpoint: &str,
        tls: &Tls,
    ) -> impl Future<Output = Result<MemberStatus, EtcdError>> + Send;

    /// Hands leadership to member `target`; `endpoint` must be the leader's.
    fn transfer_leadership(
        &self,
        endpoint: &str,
        tls: &Tls,
        target: u64,
    ) -> impl Future<Output = Result<(), EtcdError>> + Send;

    /// Streams a snapshot of the member's database into `sink` as it arrives: the database
    /// and its SHA-256, as `etcdctl snapshot save` receives them (the caller checks the
    /// checksum). Returns the bytes streamed.
    fn snapshot(
        &self,
        endpoint: &str,
        tls: &Tls,
        sink: &SnapshotSink,
    ) -> impl Future<Output = Result<u64, EtcdError>> + Send;
}

/// Calls against one cluster's etcd, with the engine's etcd client identity.
pub struct EtcdClient<'a, N> {
    pub network: &'a N,
    pub tls: &'a Tls,
}

impl<N: Etcd> EtcdClient<'_, N> {
    /// The members, as `endpoint` sees them (sorted by name, then ID).
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn list(&self, endpoint: &str) -> Result<Vec<Member>, EtcdError> {
        let mut members = self.network.members(endpoint, self.tls).await?;
        members.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
        Ok(members)
    }

    /// Adds a learner with `peer_url`.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn add_learner(&self, endpoint: &str, peer_url: &str) -> Result<(), EtcdError> {
        self.network.add_learner(endpoint, self.tls, peer_url).await
    }

    /// Promotes learner `id` to a voting member.
    ///
    /// # Errors
    /// Any [`EtcdError`]; [`EtcdError::not_in_sync`] tells when retrying makes sense.
    pub async fn promote(&self, endpoint: &str, id: u64) -> Result<(), EtcdError> {
        self.network.promote(endpoint, self.tls, id).await
    }

    /// Whether the member at `endpoint` is healthy by etcd's own measure ([`Etcd::healthy`]).
    ///
    /// # Errors
    /// [`EtcdError::Unreachable`] when it did not answer.
    pub async fn healthy(&self, endpoint: &str) -> Result<bool, EtcdError> {
        self.network.healthy(endpoint, self.tls).await
    }

    /// The status of the member at `endpoint`.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn status(&self, endpoint: &str) -> Result<MemberStatus, EtcdError> {
        self.network.status(endpoint, self.tls).await
    }

    /// A snapshot of the member at `endpoint`, streamed into `sink`; returns its size.
    ///
    /// # Errors
    /// Any [`EtcdError`]; an empty snapshot is [`EtcdError::Body`].
    pub async fn snapshot(&self, endpoint: &str, sink: &SnapshotSink) -> Result<u64, EtcdError> {
        let size = self.network.snapshot(endpoint, self.tls, sink).await?;
        if size == 0 {
            return Err(EtcdError::Body {
                endpoint: endpoint.to_string(),
                operation: "snapshot",
                reason: "an empty snapshot".into(),
            });
        }
        Ok(size)
    }

    /// Hands leadership to member `target`; `endpoint` must be the leader's.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn transfer_leadership(&self, endpoint: &str, target: u64) -> Result<(), EtcdError> {
        self.network
            .transfer_leadership(endpoint, self.tls, target)
            .await
    }

    /// Removes member `id`.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn remove(&self, endpoint: &str, id: u64) -> Result<(), EtcdError> {
        self.network.remove(endpoint, self.tls, id).await
    }
}

/// What a member says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub revision: u64,
    pub member_id: u64,
    /// The etcd cluster the member belongs to: a member started on another cluster's data
    /// (or its own, founded anew) names another.
    pub cluster_id: u64,
    pub leader: u64,
    pub db_size: u64,
    pub version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: Code, message: &str) -> EtcdError {
        EtcdError::Refused {
            endpoint: "https://x".into(),
            operation: "promote",
            code,
            message: message.into(),
        }
    }

    #[test]
    fn refusals_are_told_apart_by_code_and_etcds_whole_descriptions() {
        let early = refused(Code::FailedPrecondition, refusals::LEARNER_NOT_READY);
        assert!(early.retryable() && early.not_in_sync());
        assert!(refused(Code::FailedPrecondition, refusals::TOO_MANY_LEARNERS).retryable());
        assert!(refused(Code::Unavailable, "etcdserver: no leader").retryable());
        let gone = refused(Code::NotFound, "etcdserver: member not found");
        assert!(!gone.retryable() && !gone.not_in_sync());
        // A description that merely contains etcd's words is not etcd's refusal.
        let other = refused(
            Code::FailedPrecondition,
            "not a learner: can only promote a learner member which is in sync with leader",
        );
        assert!(!other.retryable() && !other.not_in_sync());
        assert_eq!(
            early.to_string(),
            format!(
                "etcd https://x refused promote (FailedPrecondition): {}",
                refusals::LEARNER_NOT_READY
            )
        );
    }
}
