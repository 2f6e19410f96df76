//! `oi-engine`: executes a [`Plan`] on its hypervisors and reports what it did and saw. It
//! decides only what it must observe first; everything else is in the plan, and it never
//! calls back into planning.
//!
//! ```text
//! Plan ─► connect to every hypervisor of the plan, concurrently           (connect)
//!   │     throwaway pods a killed run left behind are removed
//!   ▼  per cluster, all clusters concurrently; the steps of one cluster in order:
//!   Unplannable   nothing is done; the result says why
//!   Teardown      every pod and directory on every hypervisor it used       (teardown)
//!   Converge      every hypervisor of it reachable, then
//!   1. files      write_files(known hashes) ─► hashes placed                (converge)
//!   (recover)     a recovery planned: the survivor's etcd restarted once as  (recover)
//!                 a cluster of one on its data, healthy, then as rendered
//!   2. retiring   etcd member remove (while the members that stay keep a   (teardown)
//!                 quorum, else after step 3) ─► pods ─► directories (on a
//!                 lost hypervisor only if it answers)
//!   (restore)     a restore planned: every replica's etcd data made from     (restore)
//!                 the snapshot beside the running one, then its pods stopped
//!                 and its data replaced; the etcd step starts them together
//!   3. etcd       etcd answers: members no replica owns removed (quorum      (membership)
//!                 allowing); each voting member's pod, one at a time, healthy
//!                 again if it changed, its replica's API server (which stores
//!                 in it alone) out of the ingress until a read through it
//!                 answers (one whose data is lost or unusable joins
//!                 again with fresh data); then each other replica joins (learner,
//!                 pod, promote); no answer: the founders' pods together, then
//!                 each joiner
//!   4. kube       running: control plane pods one replica at a time, a replaced API
//!   5. ingress    server ready before the next, the ingress alongside; new: all at once
//!   6. observe    etcd members, each API server's and the ingress's /readyz,  (observe)
//!                 all at once, until ready or the deadline; a cluster whose etcd
//!                 answered at the start has step 7's reads made meanwhile
//!   7. inside     through the cluster's API: the NodeJoinRequest CRD, the   (bootstrap)
//!                 oneinfra-system namespace, RBAC, join tokens, kube-proxy,
//!                 CoreDNS, the join key ConfigMap; revoked tokens deleted
//!                 (every read in one wave, then the writes a difference calls for)
//!   then the SIPClusters' services, one SIPCluster at a time                (sip)
//!   ▼
//! Executed {per cluster: ClusterResult (outcome, files placed, components removed, join
//!           tokens in force), per SIPCluster: its services' results, counts of pods,
//!           files, mutating CRI calls and cluster writes}
//!   ──► oi_planner::record_run writes it into the world
//! ```
//!
//! A hypervisor that cannot be reached fails only the clusters with components on it. Over
//! converged manifests a run makes no mutating call and no write inside a cluster. Hypervisors come from a [`Connector`]
//! ([`CriConnector`] for real endpoints); etcd and the API servers are reached through a
//! [`Network`] ([`RealNetwork`] over HTTPS). Progress events name what happens where and never
//! carry key material. Failures are [`StepError`]s, whose [`StepError::reason`] is the
//! condition reason.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod bootstrap;
mod connect;
mod converge;
pub mod dry_run;
mod error;
pub mod etcd;
mod etcd_grpc;
pub mod https;
mod ingress;
mod membership;
mod observe;
pub mod orphans;
mod progress;
pub mod recover;
pub mod restore;
pub mod sip;
mod teardown;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use oi_api::ObjectKey;
use oi_cri::HypervisorRuntime;
use oi_planner::{ClusterPlan, ClusterResult, Plan, Reason};

pub use connect::{ConnectError, Connector, CriConnector, remove_throwaway_pods};
pub use dry_run::{DryRun, HypervisorPlan, diff_services, dry_run};
pub use error::StepError;
pub use etcd::{EtcdClient, EtcdError, Member};
pub use https::{HttpsError, HttpsRequest, HttpsResponse, Network, RealNetwork, Tls};
pub use progress::{Counts, Ended, Event};
pub use restore::{SnapshotOf, SnapshotStream, Taken, take_snapshot};

use connect::{Runtimes, connect_all, remove_leftover_throwaway_pods};
use error::Step;
use progress::Counters;

/// The stack each thread of a runtime that executes plans should have: a cluster's steps
/// make deep futures, which unoptimized builds lay out in large frames (the manager's
/// reconcile, with the engine inside, needs about 1.5 MiB there; the default is 2 MiB).
pub const RUNTIME_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Settings of [`execute`].
#[derive(Debug, Clone)]
pub struct ExecuteOptions {
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

impl Default for ExecuteOptions {
    fn default() -> Self {
        ExecuteOptions {
            max_wait: Duration::from_secs(60),
            poll_interval: Duration::from_millis(100),
            remove_leftover_throwaway_pods: true,
        }
    }
}

/// What a run did: per cluster, what it changed and found; the counts; how long it took.
#[derive(Debug, Clone)]
pub struct Executed {
    /// Every cluster of the plan, by key.
    pub clusters: BTreeMap<ObjectKey, ClusterResult>,
    /// Every SIPCluster's services of the plan, in its order.
    pub services: Vec<oi_planner::sip::services::SipServicesResult>,
    pub counts: Counts,
    pub elapsed: Duration,
}

impl Executed {
    /// Whether every cluster still in the world is ready.
    pub fn all_ready(&self) -> bool {
        self.clusters
            .values()
            .all(|c| c.outcome.ready || c.outcome.deleted)
    }
}

/// Executes `plan` on its hypervisors; see the crate documentation. Never fails as a whole:
/// each cluster's outcome is in its [`ClusterResult`].
pub async fn execute<C: Connector, N: Network>(
    plan: &Plan,
    options: &ExecuteOptions,
    connector: &C,
    network: &N,
    progress: &(dyn Fn(&Event) + Sync),
) -> Executed {
    let started = Instant::now();
    let mut hypervisors = plan.hypervisors.clone();
    hypervisors.extend(sip::hypervisors(&plan.sip.services));
    let runtimes = connect_all(&plan.world, &hypervisors, connector).await;
    let before: BTreeMap<&String, u64> = runtimes
        .iter()
        .filter_map(|(h, r)| r.as_ref().ok().map(|r| (h, r.mutating_calls())))
        .collect();
    if options.remove_leftover_throwaway_pods {
        remove_leftover_throwaway_pods(&runtimes).await;
    }
    let counters = Counters::default();
    let executor = Executor {
        options,
        runtimes: &runtimes,
        network,
        progress,
        counters: &counters,
        deadline: started + options.max_wait,
    };
    let results = join_all(
        plan.clusters
            .iter()
            .map(|(key, cluster)| executor.cluster(key, cluster)),
    )
    .await;
    // The SIPClusters' services after the clusters (their own deadline).
    let services = sip::execute_services(
        &plan.world,
        &plan.sip.services,
        &runtimes,
        options,
        progress,
    )
    .await;
    let mutating_calls = runtimes
        .iter()
        .filter_map(|(h, r)| {
            r.as_ref()
                .ok()
                .map(|r| r.mutating_calls() - before.get(h).copied().unwrap_or(0))
        })
        .sum();
    Executed {
        clusters: results
            .into_iter()
            .map(|r| (r.outcome.cluster.clone(), r))
            .collect(),
        services,
        counts: counters.counts(mutating_calls),
        elapsed: started.elapsed(),
    }
}

/// What every cluster's run shares: the hypervisors' runtimes, the network, where progress
/// goes, the counts and the deadline.
struct Executor<'a, R, N> {
    options: &'a ExecuteOptions,
    runtimes: &'a Runtimes<R>,
    network: &'a N,
    progress: &'a (dyn Fn(&Event) + Sync),
    counters: &'a Counters,
    deadline: Instant,
}

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// Runs one cluster's plan.
    async fn cluster(&self, key: &ObjectKey, plan: &ClusterPlan) -> ClusterResult {
        let mut result = ClusterResult::new(key);
        match plan {
            ClusterPlan::Unplannable(e) => {
                result.outcome = result.outcome.fail(e.reason(), e.to_string());
            }
            ClusterPlan::Teardown(teardown) => match self.teardown(key, teardown).await {
                Ok(()) => {
                    result.outcome.deleted = true;
                    result.outcome.reason = Reason::Deleted;
                }
                Err(e) => result.outcome = result.outcome.fail(e.reason(), e.to_string()),
            },
            ClusterPlan::Converge(convergence) => {
                // On the heap: a cluster's steps make a large future, and a caller may run
                // many on one thread's stack.
                if let Err(e) = Box::pin(self.converge(key, convergence, &mut result)).await {
                    result.outcome = result.outcome.fail(e.reason(), e.to_string());
                }
            }
        }
        let (ended, message) = if result.outcome.ready {
            (Ended::Ready, "ready".to_string())
        } else if result.outcome.deleted {
            (Ended::Deleted, "deleted".to_string())
        } else {
            (
                Ended::Failed,
                format!("not ready: {}", result.outcome.message),
            )
        };
        (self.progress)(&Event {
            hypervisor: None,
            cluster: key.clone(),
            component: None,
            message,
            ended: Some(ended),
        });
        result
    }

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
            ended: None,
        });
    }

    /// The runtime of a hypervisor, or why it cannot be had.
    fn runtime(&self, hypervisor: &str) -> Step<&Arc<R>> {
        connect::runtime(self.runtimes, hypervisor)
    }

    /// Whether the deadline passed.
    fn out_of_time(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Waits one poll interval.
    async fn pause(&self) {
        tokio::time::sleep(self.options.poll_interval).await;
    }
}

/// The label selector of a cluster's (or one component's) pods.
fn selector(cluster: &ObjectKey, component: Option<&str>) -> BTreeMap<String, String> {
    use oi_api::runtime::labels;
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
