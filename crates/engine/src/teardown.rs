//! Taking things away: a retiring component (its etcd member, pods, directories) and a whole
//! cluster marked for deletion.

use futures::future::join_all;
use oi_api::ObjectKey;
use oi_api::hypervisor::Lost;
use oi_cri::HypervisorRuntime;
use oi_planner::{EtcdMember, Retirement, Teardown};

/// What became of a retiring component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retired {
    /// Out of the world: nothing of it left, or left on a removed hypervisor.
    Gone,
    /// Its etcd member is gone, its pods wait on an unreachable hypervisor: it stays in the
    /// world, retiring, until the hypervisor answers.
    LeftBehind,
}

use crate::error::{Step, StepError};
use crate::etcd::EtcdClient;
use crate::https::Network;
use crate::progress::Counters;
use crate::{Executor, selector};

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// Retires a component: its etcd member leaves first, then its pods and directories go
    /// (see [`Retirement::lost`] for a component on a lost hypervisor).
    pub(crate) async fn retire(
        &self,
        key: &ObjectKey,
        r: &Retirement,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step<Retired> {
        let name = r.key.name.as_str();
        if let Some(me) = &r.member {
            let hypervisor = r.hypervisor.as_deref().unwrap_or_default();
            self.etcd_remove(key, me, hypervisor, r.lost.is_some(), members, etcd)
                .await?;
        }
        let Some(h) = r.hypervisor.as_deref() else {
            return Ok(Retired::Gone);
        };
        // On a lost hypervisor, pods and directories go only if it answers; a removed one's
        // component leaves the world either way, an unreachable one's stays until it answers.
        if let Some(lost) = &r.lost
            && let Err(e) = self.runtime(h)
        {
            // Why it does not answer, without the advice to remove it: it is lost already.
            let e = match e {
                StepError::Unreachable { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            let (said, retired) = match lost {
                Lost::Removed => (
                    format!(
                        "left its pods and directories on removed hypervisor {h}, which does not answer: {e}"
                    ),
                    Retired::Gone,
                ),
                Lost::Unreachable { .. } => (
                    format!(
                        "its pods and directories on hypervisor {h} go once it answers again: {e}"
                    ),
                    Retired::LeftBehind,
                ),
            };
            self.emit(Some(h), key, Some(name), said);
            return Ok(retired);
        }
        self.remove_pods_and_directories(h, key, Some(name), &r.directories)
            .await?;
        self.emit(Some(h), key, Some(name), "removed directories".to_string());
        Ok(Retired::Gone)
    }

    /// Removes every pod and directory of a cluster marked for deletion.
    pub(crate) async fn teardown(&self, key: &ObjectKey, t: &Teardown) -> Step {
        let results = join_all(t.hypervisors.iter().map(|h| async move {
            self.remove_pods_and_directories(h, key, None, &t.directories)
                .await?;
            self.emit(
                Some(h),
                key,
                None,
                "removed cluster directories".to_string(),
            );
            Ok::<(), StepError>(())
        }))
        .await;
        for r in results {
            r.map_err(|e| StepError::Teardown(Box::new(e)))?;
        }
        self.emit(None, key, None, "deleted".to_string());
        Ok(())
    }

    /// Removes the pods of a cluster (of one of its components, when given) on a
    /// hypervisor, then the directories and the pods' log directories.
    async fn remove_pods_and_directories(
        &self,
        hypervisor: &str,
        key: &ObjectKey,
        component: Option<&str>,
        directories: &[String],
    ) -> Step {
        let rt = self.runtime(hypervisor)?;
        let mut directories = directories.to_vec();
        for pod in rt.list_pods(&selector(key, component)).await? {
            // Its logs go with the directories.
            let logs = rt.pod_log_directory(&pod.namespace, &pod.name);
            if !directories.contains(&logs) {
                directories.push(logs);
            }
            rt.remove_pod(&pod.id).await?;
            Counters::add(&self.counters.removed, 1);
            self.emit(
                Some(hypervisor),
                key,
                component,
                format!("removed pod {}", pod.name),
            );
        }
        rt.remove_host_paths(&directories).await?;
        Ok(())
    }
}
