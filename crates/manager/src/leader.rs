//! Leader election on a coordination.k8s.io/v1 Lease, as client-go's `leaderelection` does
//! (kube-rs has none), so several manager replicas can run and one reconciles.
//!
//! ```text
//!  candidate ──try_acquire_or_renew every retry_period──▶ leader
//!      ▲                                                   │ renew every retry_period
//!      └── lost: another holder, or no renewal for renew_deadline ◀┘
//! ```
//!
//! The Lease is taken when absent (create), ours (renew: `renewTime`), free (no holder) or
//! expired (`leaseTransitions + 1`, `acquireTime` now). Every write is a create or a replace
//! carrying the `resourceVersion` that was read, so of two candidates racing for the same
//! Lease one gets 409 and loses.
//!
//! Expiry never compares another replica's clock with ours (clocks of different machines
//! disagree): as client-go does, a candidate remembers when, on its own monotonic clock, it
//! last saw the Lease record change; the Lease has expired once it stayed unchanged for
//! `leaseDurationSeconds` since. A holder that renews changes `renewTime`, so its Lease never
//! expires, whatever its clock says; a candidate that just started waits one lease duration
//! before taking over a Lease it has never seen renewed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

/// Where and how to elect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's `holderIdentity` (the pod name).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal (`leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down; shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// Delay between attempts, to acquire or to renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What one attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease (created, renewed or taken over).
    Held,
    /// Another replica holds a fresh Lease.
    HeldByOther,
    /// Our write raced with another one (409); nothing is known.
    Conflict,
}

/// Elects one leader among the replicas sharing a [`LeaseConfig`]'s Lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The Lease record (its spec, serialized) as last seen, and when (our monotonic clock)
    /// it was first seen so.
    observed: Arc<std::sync::Mutex<Option<(String, Instant)>>>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn lease_seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}

impl LeaderElector {
    pub fn new(client: kube::Client, config: LeaseConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: Arc::new(std::sync::Mutex::new(None)),
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// One attempt to acquire or renew the Lease; returns whether we hold it. A write that
    /// loses a race (409) returns `Ok(false)`.
    ///
    /// # Errors
    ///
    /// Any other API or transport error.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        Ok(self.attempt(Timestamp::now()).await? == Attempt::Held)
    }

    async fn attempt(&self, now: Timestamp) -> Result<Attempt, kube::Error> {
        let identity = self.config.identity.as_str();
        let duration = lease_seconds(self.config.lease_duration);
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity.to_string()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held),
                Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder != identity {
            let unchanged_since = self.observe(&spec);
            let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
                (Some(_), Some(seconds)) => {
                    let seconds = u64::try_from(seconds).unwrap_or(0);
                    unchanged_since.elapsed() >= Duration::from_secs(seconds)
                }
                // A Lease without a renewal time or duration cannot be valid.
                _ => true,
            };
            if !holder.is_empty() && !expired {
                return Ok(Attempt::HeldByOther);
            }
            spec.holder_identity = Some(identity.to_string());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(MicroTime(now));
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Held),
            Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Records the Lease record `spec` as seen now; returns since when (our monotonic
    /// clock) it has been seen unchanged.
    fn observe(&self, spec: &LeaseSpec) -> Instant {
        let record = serde_json::to_string(spec).unwrap_or_default();
        let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        match observed.as_ref() {
            Some((seen, since)) if *seen == record => *since,
            _ => {
                let since = Instant::now();
                *observed = Some((record, since));
                since
            }
        }
    }

    /// Gives the Lease up if we hold it, so another replica takes over at once: no holder,
    /// `leaseDurationSeconds` 1. A Lease held by another replica, or absent, is left alone.
    ///
    /// # Errors
    ///
    /// API or transport errors (including 409 if the Lease changed meanwhile).
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    /// An attempt bounded by `renew_deadline`, so a hung request cannot keep a leader that
    /// stopped renewing.
    async fn bounded_attempt(&self) -> Result<Attempt, String> {
        match tokio::time::timeout(self.config.renew_deadline, self.attempt(Timestamp::now())).await
        {
            Ok(Ok(attempt)) => Ok(attempt),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("timed out".to_string()),
        }
    }

    /// Runs the election until `shutdown` completes: tries every `retry_period` until it holds
    /// the Lease, then renews every `retry_period`. Leadership is lost when another replica
    /// holds the Lease or renewals failed for `renew_deadline`; the task then becomes a
    /// candidate again. On shutdown a leader releases the Lease.
    ///
    /// The returned channel says whether this replica leads (`true`) and changes with it;
    /// `metrics.set_leader` follows it. Controllers should run only while it is `true`.
    pub fn spawn(
        self,
        metrics: Arc<Metrics>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> (watch::Receiver<bool>, JoinHandle<()>) {
        let (tx, rx) = watch::channel(false);
        metrics.set_leader(false);
        let handle = tokio::spawn(async move {
            tokio::pin!(shutdown);
            let set = |leader: bool| {
                metrics.set_leader(leader);
                tx.send_replace(leader);
            };
            loop {
                // Candidate.
                loop {
                    match self.bounded_attempt().await {
                        Ok(Attempt::Held) => break,
                        Ok(_) => {}
                        Err(e) => tracing::warn!(
                            lease = %self.config.name,
                            error = %e,
                            "cannot acquire the leader lease"
                        ),
                    }
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = tokio::time::sleep(self.config.retry_period) => {}
                    }
                }
                tracing::info!(lease = %self.config.name, identity = %self.config.identity, "became leader");
                set(true);
                // Leader.
                let mut renewed = Instant::now();
                loop {
                    tokio::select! {
                        () = &mut shutdown => {
                            set(false);
                            if let Err(e) = self.release().await {
                                tracing::warn!(lease = %self.config.name, error = %e, "cannot release the leader lease");
                            }
                            return;
                        }
                        () = tokio::time::sleep(self.config.retry_period) => {}
                    }
                    match self.bounded_attempt().await {
                        Ok(Attempt::Held) => renewed = Instant::now(),
                        Ok(Attempt::HeldByOther) => {
                            tracing::warn!(lease = %self.config.name, "another replica holds the leader lease");
                            break;
                        }
                        Ok(Attempt::Conflict) => {}
                        Err(e) => tracing::warn!(
                            lease = %self.config.name,
                            error = %e,
                            "cannot renew the leader lease"
                        ),
                    }
                    if renewed.elapsed() >= self.config.renew_deadline {
                        tracing::warn!(lease = %self.config.name, "leader lease not renewed in time");
                        break;
                    }
                }
                set(false);
            }
        });
        (rx, handle)
    }
}
