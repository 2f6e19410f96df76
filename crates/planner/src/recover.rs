//! Recovering a cluster that lost its etcd quorum from a surviving member's data
//! (`oi cluster recover --from-member NAME`), usually newer than the last snapshot.
//!
//! ```text
//! World ─► the survivor stays; every other replica of the cluster marked for deletion
//!   │      (their members are not in the new cluster; their data is not used)
//!   ▼ prepare: replacements placed (not on lost hypervisors), to join as learners
//! Plan ─► the cluster's convergence carries a Recover:
//!   engine, before retiring anything: the survivor's etcd restarted once with
//!   `--force-new-cluster` (a cluster of one, its data kept), healthy; then restarted as
//!   rendered ─► the other replicas retire (no member left to remove; their pods and
//!   directories where their hypervisors answer) ─► the replacements join one at a time
//! ```
//!
//! Whether a recovery is right (quorum lost, the survivor's etcd running on its data) is
//! observed by the engine before this is planned (`oi_engine::recover`). Run again after a
//! failure, it converges: a survivor that is a cluster of one already is not forced again.

use oi_api::runtime::PodSpec;
use oi_api::{ComponentRole, ObjectKey, World};
use time::OffsetDateTime;

use crate::plan::{ClusterPlan, Plan, PlanOptions, plan};

/// The survivor's restart as a cluster of one, attached to the cluster's
/// [`crate::Convergence`]: the engine runs it before the retiring step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recover {
    /// The surviving replica (its etcd member's name).
    pub member: String,
    pub hypervisor: String,
    /// Its etcd pod with `--force-new-cluster`: run once, then the rendered one.
    pub forced: PodSpec,
}

/// Why a recovery cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoverError {
    #[error("cluster {0} not found")]
    NoCluster(ObjectKey),
    #[error(
        "{member} is not a live control plane replica of cluster {cluster} (its replicas: {replicas})"
    )]
    NotAReplica {
        cluster: ObjectKey,
        member: String,
        replicas: String,
    },
    #[error("cluster {cluster} cannot be planned: {reason}")]
    Unplannable { cluster: ObjectKey, reason: String },
}

/// The live control plane replicas of cluster `key`, by name.
pub fn replicas(world: &World, key: &ObjectKey) -> Vec<String> {
    let mut names: Vec<String> = world
        .components_of(key)
        .filter(|c| c.spec.role == ComponentRole::ControlPlane && !c.metadata.is_being_deleted())
        .map(|c| c.metadata.name.clone())
        .collect();
    names.sort_by_key(|n| crate::prepare::replica_order(&key.name, n));
    names
}

/// The plan of recovering cluster `key` from the data of replica `member` (see the module
/// documentation). The other clusters of the world are planned as usual.
///
/// # Errors
/// [`RecoverError`] when there is no such cluster or replica, or the cluster cannot be
/// planned (then nothing should be done).
pub fn plan_recover(
    mut world: World,
    key: &ObjectKey,
    member: &str,
    now: OffsetDateTime,
    options: &PlanOptions,
) -> Result<Plan, RecoverError> {
    if !world.clusters.contains_key(key) {
        return Err(RecoverError::NoCluster(key.clone()));
    }
    let live = replicas(&world, key);
    if !live.iter().any(|n| n == member) {
        return Err(RecoverError::NotAReplica {
            cluster: key.clone(),
            member: member.to_string(),
            replicas: live.join(", "),
        });
    }
    for name in live.iter().filter(|n| *n != member) {
        if let Some(c) = world
            .components
            .get_mut(&ObjectKey::new(key.namespace.clone(), name.clone()))
        {
            c.metadata.deletion_timestamp = Some(now);
        }
    }
    let mut plan = plan(world, now, options);
    match plan.clusters.get_mut(key) {
        Some(ClusterPlan::Converge(c)) => {
            let survivor = c
                .component(member)
                .ok_or_else(|| RecoverError::Unplannable {
                    cluster: key.clone(),
                    reason: format!("{member} has no plan"),
                })?;
            let pod = survivor
                .etcd_pod()
                .ok_or_else(|| RecoverError::Unplannable {
                    cluster: key.clone(),
                    reason: format!("{member} has no etcd pod"),
                })?;
            c.recover = Some(Recover {
                member: member.to_string(),
                hypervisor: survivor.hypervisor.clone(),
                forced: forced_pod(pod),
            });
            Ok(plan)
        }
        Some(ClusterPlan::Unplannable(e)) => Err(RecoverError::Unplannable {
            cluster: key.clone(),
            reason: e.to_string(),
        }),
        _ => Err(RecoverError::Unplannable {
            cluster: key.clone(),
            reason: "it is being deleted".to_string(),
        }),
    }
}

/// An etcd pod started once as a new cluster of one on its data (`--force-new-cluster`).
pub fn forced_pod(pod: &PodSpec) -> PodSpec {
    let mut pod = pod.clone();
    for c in pod.containers.iter_mut().filter(|c| c.name == "etcd") {
        if !c.args.iter().any(|a| a == "--force-new-cluster") {
            c.args.push("--force-new-cluster".to_string());
        }
    }
    pod
}

#[cfg(test)]
mod tests;
