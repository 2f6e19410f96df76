//! etcd membership steps: asking the members, founding a new cluster, joining a learner and
//! promoting it, waiting for a changed member to be healthy.

use futures::future::join_all;
use oi_api::ObjectKey;
use oi_cri::{HypervisorRuntime, Outcome};
use oi_planner::{ComponentPlan, EtcdMember};

use crate::Executor;
use crate::converge::etcd_pod;
use crate::error::{Step, StepError};
use crate::etcd::{EtcdClient, Member};
use crate::https::Network;

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// The membership as the first of `members` that answers now sees it, with the endpoint
    /// that answered: one attempt each, in order. The error is the last answer, or that
    /// there was nobody to ask.
    pub(crate) async fn first_answer(
        &self,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Result<(String, Vec<Member>), String> {
        let mut last = String::from("no etcd member to ask");
        for m in members {
            match etcd.list(&m.client_url).await {
                Ok(list) => return Ok((m.client_url.clone(), list)),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// [`Self::first_answer`], asked again until one answers or the deadline passes.
    pub(crate) async fn members(
        &self,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step<(String, Vec<Member>)> {
        loop {
            match self.first_answer(members, etcd).await {
                Ok(answer) => return Ok(answer),
                Err(last) if self.out_of_time() => return Err(StepError::EtcdUnanswered { last }),
                Err(_) => self.pause().await,
            }
        }
    }

    /// Starts the etcd pods of the replicas that found the cluster (`new`) together, then
    /// waits until one of them answers (a new cluster answers once it has a quorum).
    pub(crate) async fn etcd_founders(
        &self,
        key: &ObjectKey,
        founders: &[&ComponentPlan],
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        if founders.is_empty() {
            return Ok(());
        }
        let mut pods = Vec::new();
        for c in founders {
            pods.push((*c, etcd_pod(c)?));
        }
        for outcome in join_all(pods.into_iter().map(|(c, spec)| self.pod(key, c, spec))).await {
            outcome?;
        }
        let founding: Vec<EtcdMember> = members
            .iter()
            .filter(|m| founders.iter().any(|c| c.name() == m.name))
            .cloned()
            .collect();
        self.members(&founding, etcd).await?;
        Ok(())
    }

    /// Waits (until the deadline) for the member of replica `c`, whose pod was just created
    /// or replaced, to be a started voting member that etcd itself reports healthy.
    pub(crate) async fn etcd_healthy(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        let name = c.name();
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
                                Some(&c.hypervisor),
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
            if self.out_of_time() {
                return Err(StepError::EtcdUnhealthy {
                    member: name.to_string(),
                    last,
                });
            }
            self.pause().await;
        }
    }

    /// Joins a replica to the running cluster: member add as a learner (unless it is in the
    /// membership already), its pod, promotion once it caught up. Returns what happened to
    /// the pod.
    pub(crate) async fn etcd_join(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step<Outcome> {
        let name = c.name();
        let spec = etcd_pod(c)?;
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
                        Some(&c.hypervisor),
                        key,
                        Some(name),
                        "added etcd member as learner".to_string(),
                    );
                    break;
                }
                Err(e) if e.retryable() && !self.out_of_time() => self.pause().await,
                Err(source) => {
                    return Err(StepError::EtcdAdd {
                        member: name.to_string(),
                        source,
                    });
                }
            }
        }
        let outcome = self.pod(key, c, spec).await?;
        // Promote once the learner caught up.
        loop {
            let (endpoint, list) = self.members(&others, etcd).await?;
            let Some(member) = found(&list) else {
                return Err(StepError::EtcdLeft {
                    member: name.to_string(),
                });
            };
            if !member.is_learner {
                return Ok(outcome);
            }
            match etcd.promote(&endpoint, member.id).await {
                Ok(()) => {
                    self.emit(
                        Some(&c.hypervisor),
                        key,
                        Some(name),
                        "promoted etcd member".to_string(),
                    );
                    return Ok(outcome);
                }
                Err(source) if self.out_of_time() => {
                    return Err(StepError::EtcdPromote {
                        member: name.to_string(),
                        source,
                    });
                }
                Err(_) => self.pause().await,
            }
        }
    }

    /// A leader about to be removed hands leadership to a voting member that stays first,
    /// so that no request meets an election. Best effort: etcd copes without it (the
    /// removed leader steps down), so a failure is said and the removal goes on.
    async fn hand_over_leadership(
        &self,
        key: &ObjectKey,
        me: &EtcdMember,
        my_id: u64,
        hypervisor: &str,
        list: &[crate::etcd::Member],
        etcd: &EtcdClient<'_, N>,
    ) {
        let Ok(status) = etcd.status(&me.client_url).await else {
            return;
        };
        if status.leader != my_id {
            return;
        }
        let Some(target) = list
            .iter()
            .find(|m| m.id != my_id && m.started() && !m.is_learner)
        else {
            return;
        };
        let said = match etcd.transfer_leadership(&me.client_url, target.id).await {
            Ok(()) => format!("handed etcd leadership to {}", target.name),
            Err(e) => format!("could not hand etcd leadership over before leaving: {e}"),
        };
        self.emit(Some(hypervisor), key, Some(&me.name), said);
    }

    /// Removes a retiring replica's member (`me`) from the membership. etcd refuses to remove
    /// a voting member for 5 s after any member (re)connected ("unhealthy cluster"): retry
    /// until the deadline, as when adding.
    pub(crate) async fn etcd_remove(
        &self,
        key: &ObjectKey,
        me: &EtcdMember,
        hypervisor: &str,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        let name = me.name.as_str();
        loop {
            let (endpoint, list) = self.members(members, etcd).await?;
            let Some(member) = list
                .iter()
                .find(|m| m.name == name || m.peer_urls.contains(&me.peer_url))
            else {
                return Ok(());
            };
            self.hand_over_leadership(key, me, member.id, hypervisor, &list, etcd)
                .await;
            match etcd.remove(&endpoint, member.id).await {
                Ok(()) => {
                    self.emit(
                        Some(hypervisor),
                        key,
                        Some(name),
                        "removed etcd member".to_string(),
                    );
                    return Ok(());
                }
                Err(e) if e.retryable() && !self.out_of_time() => self.pause().await,
                Err(e) => return Err(StepError::EtcdRemove(e)),
            }
        }
    }
}
