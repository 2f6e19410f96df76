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
    /// that answered: one attempt each, in order. The error names each member with why it
    /// did not answer, or says that there was nobody to ask.
    pub(crate) async fn first_answer(
        &self,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Result<(String, Vec<Member>), String> {
        let mut why = Vec::new();
        for m in members {
            match etcd.list(&m.client_url).await {
                Ok(list) => return Ok((m.client_url.clone(), list)),
                Err(e) => why.push(format!("{}: {e}", m.name)),
            }
        }
        if why.is_empty() {
            return Err("no etcd member to ask".to_string());
        }
        Err(format!("no etcd member answers ({})", why.join("; ")))
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

    /// Starts the etcd pods of the replicas that found the cluster (`new`) together; see
    /// [`Self::etcd_founded`] for the wait.
    pub(crate) async fn etcd_founders(&self, key: &ObjectKey, founders: &[&ComponentPlan]) -> Step {
        let mut pods = Vec::new();
        for c in founders {
            pods.push((*c, etcd_pod(c)?));
        }
        for outcome in join_all(pods.into_iter().map(|(c, spec)| self.pod(key, c, spec))).await {
            outcome?;
        }
        Ok(())
    }

    /// Waits until one of the founders answers (a new cluster answers once it has a quorum).
    pub(crate) async fn etcd_founded(
        &self,
        founders: &[&ComponentPlan],
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        if founders.is_empty() {
            return Ok(());
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
            // A member whose process exited will not become healthy: say why now, in its own
            // words, rather than at the deadline.
            if let Some((exit_code, log)) = self.etcd_exited(key, c).await? {
                return Err(StepError::EtcdExited {
                    member: name.to_string(),
                    hypervisor: c.hypervisor.clone(),
                    exit_code,
                    log,
                });
            }
            if self.out_of_time() {
                return Err(StepError::EtcdUnhealthy {
                    member: name.to_string(),
                    last,
                    log: self.etcd_log(key, c).await,
                });
            }
            self.pause().await;
        }
    }

    /// The etcd container of replica `c`, if its pod is there.
    pub(crate) async fn etcd_container(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
    ) -> Step<Option<oi_cri::ContainerStatus>> {
        self.container_of(key, c, &format!("{}-etcd", c.name()), "etcd")
            .await
    }

    /// Its exit code and log tail, when the etcd container of replica `c` exited.
    pub(crate) async fn etcd_exited(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
    ) -> Step<Option<(i32, String)>> {
        let Some(container) = self.etcd_container(key, c).await? else {
            return Ok(None);
        };
        if container.state != oi_cri::ContainerState::Exited {
            return Ok(None);
        }
        let rt = self.runtime(&c.hypervisor)?;
        let log = rt
            .log_tail(&container.id)
            .await
            .unwrap_or_else(|e| format!("(its log cannot be read: {e})"));
        Ok(Some((container.exit_code.unwrap_or(-1), log)))
    }

    /// The tail of replica `c`'s etcd log, or why there is none: for a message.
    pub(crate) async fn etcd_log(&self, key: &ObjectKey, c: &ComponentPlan) -> String {
        let container = match self.etcd_container(key, c).await {
            Ok(Some(container)) => container,
            Ok(None) => return "(no etcd container runs)".to_string(),
            Err(e) => return format!("(its log cannot be read: {e})"),
        };
        match self.runtime(&c.hypervisor) {
            Ok(rt) => rt
                .log_tail(&container.id)
                .await
                .unwrap_or_else(|e| format!("(its log cannot be read: {e})")),
            Err(e) => format!("(its log cannot be read: {e})"),
        }
    }

    /// Why replica `c`'s member cannot go on with the data it has, if it cannot: its data
    /// directory has no write-ahead log (lost, or never made), or its process exited saying
    /// its data belongs to another cluster or is behind what the cluster committed. Asked
    /// only of a member whose etcd does not run (`exited`: how it ended, if it did).
    pub(crate) async fn etcd_data_unusable(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        exited: Option<(i32, String)>,
    ) -> Step<Option<String>> {
        let rt = self.runtime(&c.hypervisor)?;
        let dir = oi_api::runtime::paths::etcd_data_dir(&key.namespace, &key.name, c.name());
        let wal = format!("{dir}/member/wal");
        let log = match &exited {
            Some((code, log)) => format!(
                "; it exited with code {code}, its log ends: {}",
                last_lines(log)
            ),
            None => String::new(),
        };
        if !rt
            .host_paths_present(std::slice::from_ref(&wal))
            .await?
            .contains(&wal)
        {
            return Ok(Some(format!(
                "its data directory {dir} on {} has no write-ahead log (member/wal){log}",
                c.hypervisor
            )));
        }
        if let Some((_, text)) = &exited
            && let Some(sign) = UNUSABLE_DATA.iter().find(|s| text.contains(**s))
        {
            return Ok(Some(format!(
                "its data in {dir} on {} cannot be used (etcd says \"{sign}\"){log}",
                c.hypervisor
            )));
        }
        Ok(None)
    }

    /// Joins replica `c`'s member again with fresh data, its old data being unusable
    /// (`cause`): its member removed (while the others keep a quorum), its etcd pod and data
    /// directory removed, then added as a learner, started as the plan's
    /// [`oi_planner::ComponentPlan::etcd_rejoin`] says, and promoted. Returns how it was
    /// started, for the run to record.
    pub(crate) async fn etcd_rejoin(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
        cause: &str,
    ) -> Step<oi_api::EtcdMemberStart> {
        let name = c.name();
        let fail = |reason: String| StepError::EtcdRejoin {
            member: name.to_string(),
            cause: cause.to_string(),
            reason,
        };
        let rejoin = c.etcd_rejoin.as_ref().ok_or_else(|| {
            fail(
                "it is the cluster's only member: restore a snapshot (`oi cluster restore`)"
                    .to_string(),
            )
        })?;
        let Some(me) = members.iter().find(|m| m.name == name) else {
            return Err(fail("it is not a member of the plan".to_string()));
        };
        self.emit(
            Some(&c.hypervisor),
            key,
            Some(name),
            format!("etcd member lost its data: {cause}; it joins again as a learner with the cluster's data"),
        );
        // The members it joins must be those its start names.
        let (_, list) = self.members(members, etcd).await?;
        let mut others: Vec<&str> = list
            .iter()
            .filter(|m| !m.peer_urls.contains(&me.peer_url))
            .flat_map(|m| m.peer_urls.iter().map(String::as_str))
            .collect();
        let mut expected: Vec<&str> = rejoin
            .start
            .initial_cluster
            .iter()
            .filter(|(n, _)| *n != name)
            .map(|(_, url)| url.as_str())
            .collect();
        others.sort_unstable();
        expected.sort_unstable();
        if others != expected {
            return Err(fail(format!(
                "the membership is {} while the replicas are {}; run again once the membership settles",
                others.join(","),
                expected.join(",")
            )));
        }
        self.etcd_remove(key, me, &c.hypervisor, true, members, etcd)
            .await?;
        let rt = self.runtime(&c.hypervisor)?;
        let pod = format!("{name}-etcd");
        for p in rt.list_pods(&crate::selector(key, Some(name))).await? {
            if p.name == pod {
                rt.remove_pod(&p.id).await?;
            }
        }
        let dir = oi_api::runtime::paths::etcd_data_dir(&key.namespace, &key.name, name);
        rt.remove_host_paths(std::slice::from_ref(&dir)).await?;
        self.emit(
            Some(&c.hypervisor),
            key,
            Some(name),
            format!("removed its etcd pod and data directory {dir}"),
        );
        self.etcd_join_with(key, c, &rejoin.pod, members, etcd)
            .await?;
        self.etcd_healthy(key, c, members, etcd).await?;
        Ok(rejoin.start.clone())
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
        self.etcd_join_with(key, c, etcd_pod(c)?, members, etcd)
            .await
    }

    /// [`Self::etcd_join`] with the etcd pod `spec`.
    async fn etcd_join_with(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        spec: &oi_api::runtime::PodSpec,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) -> Step<Outcome> {
        let name = c.name();
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

    /// Replica `c`'s member, about to restart, hands its leadership (if it leads) to the
    /// first other started voting member in replica order: one restarted before it, when
    /// one was. Best effort, as [`Self::hand_over_leadership`].
    pub(crate) async fn lead_elsewhere(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        members: &[EtcdMember],
        etcd: &EtcdClient<'_, N>,
    ) {
        let Some(me) = members.iter().find(|m| m.name == c.name()) else {
            return;
        };
        let Ok((_, list)) = self.first_answer(members, etcd).await else {
            return;
        };
        let Some(my_id) = list
            .iter()
            .find(|m| m.peer_urls.contains(&me.peer_url))
            .map(|m| m.id)
        else {
            return;
        };
        // The others in replica order.
        let ordered: Vec<crate::etcd::Member> = members
            .iter()
            .filter_map(|o| list.iter().find(|m| m.peer_urls.contains(&o.peer_url)))
            .cloned()
            .collect();
        self.hand_over_leadership(key, me, my_id, &c.hypervisor, &ordered, etcd)
            .await;
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

    /// Removes a retiring replica's member (`me`) from the membership, only while the voting
    /// members that stay keep a quorum ([`Self::quorum_without`]). etcd refuses to remove a
    /// voting member for 5 s after any member (re)connected ("unhealthy cluster"): retry
    /// until the deadline, as when adding. A member on a lost hypervisor (`lost`) is not asked
    /// to hand its leadership over.
    pub(crate) async fn etcd_remove(
        &self,
        key: &ObjectKey,
        me: &EtcdMember,
        hypervisor: &str,
        lost: bool,
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
            self.quorum_without(&list, member, etcd).await?;
            if !lost {
                self.hand_over_leadership(key, me, member.id, hypervisor, &list, etcd)
                    .await;
            }
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

    /// Whether the voting members of `list` other than `leaving` keep a quorum once it is
    /// gone: a majority of them answers etcd's own health check. A learner leaving never
    /// matters. The error names the healthy members and why each other one is not.
    pub(crate) async fn quorum_without(
        &self,
        list: &[Member],
        leaving: &Member,
        etcd: &EtcdClient<'_, N>,
    ) -> Step {
        if leaving.is_learner {
            return Ok(());
        }
        let staying: Vec<&Member> = list
            .iter()
            .filter(|m| !m.is_learner && m.id != leaving.id)
            .collect();
        let quorum = staying.len() / 2 + 1;
        if staying.is_empty() {
            return Ok(());
        }
        // A member that just (re)started may still be catching up: asked again for a while.
        let until = std::time::Instant::now() + QUORUM_WAIT;
        let (healthy, unhealthy) = loop {
            let answers = join_all(staying.iter().map(|m| async move {
                let Some(url) = m.client_urls.first() else {
                    return Err("not started".to_string());
                };
                match etcd.healthy(url).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err("etcd reports it unhealthy".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }))
            .await;
            let mut healthy = Vec::new();
            let mut unhealthy = Vec::new();
            for (m, answer) in staying.iter().zip(answers) {
                match answer {
                    Ok(()) => healthy.push(member_name(m)),
                    Err(why) => unhealthy.push(format!("{} ({why})", member_name(m))),
                }
            }
            if healthy.len() >= quorum {
                return Ok(());
            }
            if std::time::Instant::now() >= until || self.out_of_time() {
                break (healthy, unhealthy);
            }
            self.pause().await;
        };
        Err(StepError::QuorumWouldBreak {
            member: member_name(leaving),
            staying: staying.len(),
            quorum,
            healthy,
            unhealthy,
        })
    }

    /// Removes the members of `list` that no replica of the plan owns (their component was
    /// cut from the world, or a run was killed between adding a learner and recording it):
    /// each only while the others keep a quorum. Each one removed is named; with `last`, so is
    /// each one that stays, and why. Returns whether any stays.
    pub(crate) async fn remove_orphan_members(
        &self,
        key: &ObjectKey,
        members: &[EtcdMember],
        list: &[Member],
        etcd: &EtcdClient<'_, N>,
        last: bool,
    ) -> Step<bool> {
        let owned = |m: &Member| members.iter().any(|p| m.peer_urls.contains(&p.peer_url));
        let orphans: Vec<&Member> = list.iter().filter(|m| !owned(m)).collect();
        let mut stays = false;
        for orphan in orphans {
            let name = member_name(orphan);
            let peer = orphan.peer_urls.join(",");
            let removed = loop {
                let (endpoint, now) = self.members(members, etcd).await?;
                if !now.iter().any(|m| m.id == orphan.id) {
                    break Ok(());
                }
                if let Err(e) = self.quorum_without(&now, orphan, etcd).await {
                    break Err(e.to_string());
                }
                match etcd.remove(&endpoint, orphan.id).await {
                    Ok(()) => break Ok(()),
                    Err(e) if e.retryable() && !self.out_of_time() => self.pause().await,
                    Err(e) => break Err(e.to_string()),
                }
            };
            match removed {
                Ok(()) => self.emit(
                    None,
                    key,
                    None,
                    format!(
                        "removed etcd member {name} ({peer}): no component of the cluster owns it"
                    ),
                ),
                Err(why) => {
                    stays = true;
                    if last {
                        self.emit(
                            None,
                            key,
                            None,
                            format!(
                                "etcd member {name} ({peer}) is owned by no component of the \
                                 cluster and stays: {why}"
                            ),
                        );
                    }
                }
            }
        }
        Ok(stays)
    }
}

/// A member's name as etcd lists it, or its ID while it has not started.
pub(crate) fn member_name(m: &Member) -> String {
    if m.name.is_empty() {
        format!("{:x} (not started)", m.id)
    } else {
        m.name.clone()
    }
}

/// How long the members that stay are asked for their health before a removal is refused.
const QUORUM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What etcd says when it exits because its data cannot be used with the cluster: started
/// anew on a member the cluster knows, data of another cluster, or a log behind what the
/// cluster committed (data lost or rolled back).
const UNUSABLE_DATA: &[&str] = &[
    "has already been bootstrapped",
    "cluster ID mismatch",
    "raft log corrupted, truncated, or lost",
];

/// The last few lines of a log, for a message.
pub(crate) fn last_lines(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    if lines.is_empty() {
        "(empty)".to_string()
    } else {
        lines[start..].join(" | ")
    }
}
