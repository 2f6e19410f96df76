//! Recovering a cluster that lost its etcd quorum from a surviving member's data (the step
//! `oi_planner::recover` plans), and what is observed before one is decided: each member's
//! health, status and membership as it sees it.

use futures::future::join_all;
use oi_api::ObjectKey;
use oi_cri::HypervisorRuntime;
use oi_planner::recover::Recover;
use oi_planner::{ClusterPlan, Convergence, Plan};

use crate::connect::connect_all;
use crate::converge::etcd_pod;
use crate::error::{Step, StepError};
use crate::etcd::{EtcdClient, MemberStatus};
use crate::https::{Network, Tls};
use crate::{Connector, Executor};

/// One member of a cluster as observed before a recovery.
#[derive(Debug, Clone)]
pub struct MemberState {
    pub name: String,
    pub hypervisor: String,
    /// Whether its hypervisor's runtime answers.
    pub hypervisor_answers: Result<(), String>,
    /// etcd's own health check (a leader and a quorum), or why it did not answer.
    pub healthy: Result<bool, String>,
    /// What it says of itself (revision, raft state), or why it did not answer.
    pub status: Result<MemberStatus, String>,
    /// The membership as it sees it (member names; the ID of one not started), if it
    /// answered.
    pub members: Option<Vec<String>>,
}

/// Observes every member cluster `key` of `plan` ran with (read-only calls): its replicas
/// that took part in a ready run, live or retiring, by name.
///
/// # Errors
/// When the cluster has no convergence in the plan or no etcd client identity.
pub async fn observe_members<C: Connector, N: Network>(
    plan: &Plan,
    key: &ObjectKey,
    connector: &C,
    network: &N,
) -> Result<Vec<MemberState>, String> {
    let Some(ClusterPlan::Converge(c)) = plan.clusters.get(key) else {
        return Err(format!("cluster {key} cannot be planned"));
    };
    let identity = c
        .etcd
        .client
        .as_ref()
        .map_err(|r| format!("etcd client identity: {r}"))?;
    let tls = Tls {
        ca_pem: identity.server_ca.clone(),
        identity: Some((identity.certificate.clone(), identity.private_key.clone())),
    };
    let etcd = EtcdClient { network, tls: &tls };
    // The members the cluster ran with: replicas that took part in a ready run, live or
    // retiring (those on lost hypervisors are), not replacements yet to join.
    let joined = |name: &str| {
        plan.world
            .components
            .get(&ObjectKey::new(key.namespace.clone(), name.to_string()))
            .is_some_and(|c| {
                oi_api::common::condition_is_true(
                    &c.status.conditions,
                    oi_api::common::condition_types::JOINED,
                )
            })
    };
    let mut members: Vec<&oi_planner::EtcdMember> = c
        .etcd
        .members
        .iter()
        .chain(c.retiring.iter().filter_map(|r| r.member.as_ref()))
        .filter(|m| joined(&m.name))
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let hypervisors: std::collections::BTreeSet<String> = members
        .iter()
        .filter_map(|m| hypervisor_of(c, plan, key, &m.name))
        .collect();
    let runtimes = connect_all(&plan.world, &hypervisors, connector).await;
    let states = join_all(members.into_iter().map(|m| {
        let etcd = &etcd;
        let runtimes = &runtimes;
        async move {
            let hypervisor = hypervisor_of(c, plan, key, &m.name).unwrap_or_default();
            let hypervisor_answers = match runtimes.get(&hypervisor) {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(e.to_string()),
                None => Err(format!("hypervisor {hypervisor} is not known")),
            };
            let (healthy, status, list) = futures::join!(
                etcd.healthy(&m.client_url),
                etcd.status(&m.client_url),
                etcd.list(&m.client_url)
            );
            MemberState {
                name: m.name.clone(),
                hypervisor,
                hypervisor_answers,
                healthy: healthy.map_err(|e| e.to_string()),
                status: status.map_err(|e| e.to_string()),
                members: list
                    .ok()
                    .map(|l| l.iter().map(crate::membership::member_name).collect()),
            }
        }
    }))
    .await;
    Ok(states)
}

/// The hypervisor of member `name` of the cluster: from its live component, or from the
/// world for one retiring.
fn hypervisor_of(c: &Convergence, plan: &Plan, key: &ObjectKey, name: &str) -> Option<String> {
    c.component(name).map(|p| p.hypervisor.clone()).or_else(|| {
        plan.world
            .components
            .get(&ObjectKey::new(key.namespace.clone(), name.to_string()))
            .and_then(|c| c.spec.hypervisor.clone())
    })
}

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// Makes the survivor of a recovery a healthy etcd cluster of one on its own data: its
    /// etcd restarted once with `--force-new-cluster`, then as rendered. A survivor that is
    /// a cluster of one already (a recovery that ran before) is only made to run as rendered.
    pub(crate) async fn recover(
        &self,
        key: &ObjectKey,
        r: &Recover,
        plan: &Convergence,
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        let fail = |last: String, log: String| StepError::EtcdRecover {
            member: r.member.clone(),
            last,
            log,
        };
        let c = plan
            .component(&r.member)
            .ok_or_else(|| fail("it has no plan".into(), String::new()))?;
        let me = plan
            .etcd
            .members
            .iter()
            .find(|m| m.name == r.member)
            .ok_or_else(|| fail("it is not a member of the plan".into(), String::new()))?;
        let alone = |list: &[crate::etcd::Member]| {
            list.len() == 1 && list[0].peer_urls.contains(&me.peer_url)
        };
        let done = matches!(etcd.list(&me.client_url).await, Ok(list) if alone(&list))
            && matches!(etcd.healthy(&me.client_url).await, Ok(true));
        if !done {
            let rt = self.runtime(&r.hypervisor)?;
            rt.ensure_pod(&r.forced).await?;
            self.emit(
                Some(&r.hypervisor),
                key,
                Some(&r.member),
                "restarted etcd with --force-new-cluster: a new cluster of one on its own data"
                    .to_string(),
            );
        }
        // A cluster of one, healthy: then as rendered (a later start must not force again).
        let mut forced = !done;
        loop {
            let last = match (
                etcd.list(&me.client_url).await,
                etcd.healthy(&me.client_url).await,
            ) {
                (Ok(list), Ok(true)) if alone(&list) => {
                    if !forced {
                        break;
                    }
                    self.pod(key, c, etcd_pod(c)?).await?;
                    forced = false;
                    continue;
                }
                (Ok(list), Ok(_)) => format!("{} members, healthy: not yet", list.len()),
                (Err(e), _) | (_, Err(e)) => e.to_string(),
            };
            if self.out_of_time() {
                return Err(fail(last, self.etcd_log(key, c).await));
            }
            self.pause().await;
        }
        self.emit(
            Some(&r.hypervisor),
            key,
            Some(&r.member),
            "etcd runs as a cluster of one; the other replicas are replaced and join it"
                .to_string(),
        );
        Ok(())
    }
}
