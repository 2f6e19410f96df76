//! The steps of a live cluster, in order: files, retiring components, etcd, the Kubernetes
//! control plane and the ingress (and the pods a component no longer renders removed),
//! observation until ready, then what the cluster holds inside (`bootstrap`).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use futures::future::join_all;
use oi_api::ObjectKey;
use oi_api::runtime::PodSpec;
use oi_cri::{HypervisorRuntime, Outcome};
use oi_planner::{ClusterResult, ComponentPlan, Convergence, PlacedFiles, Reason};

use crate::error::{Step, StepError};
use crate::teardown::Retired;

use crate::etcd::EtcdClient;
use crate::https::{Network, Tls};
use crate::progress::Counters;
use crate::{Executor, selector};

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    pub(crate) async fn converge(
        &self,
        key: &ObjectKey,
        plan: &Convergence,
        result: &mut ClusterResult,
    ) -> Step {
        for h in &plan.hypervisors {
            self.runtime(h)?;
        }
        // What runs decides how far the plan may go, whatever the world says it runs.
        self.check_versions(key, plan).await?;
        // 1. Files.
        let written = join_all(plan.components.iter().map(|c| self.files(key, c))).await;
        for w in written {
            result.files.push(w?);
        }
        let identity = plan
            .etcd
            .client
            .as_ref()
            .map_err(|reason| StepError::EtcdIdentity {
                reason: reason.clone(),
            })?;
        let tls = Tls {
            ca_pem: identity.server_ca.clone(),
            identity: Some((identity.certificate.clone(), identity.private_key.clone())),
        };
        let etcd = EtcdClient {
            network: self.network,
            tls: &tls,
        };
        let members = &plan.etcd.members;
        // A recovery: the survivor a healthy cluster of one before anything retires.
        if let Some(recover) = &plan.recover {
            self.recover(key, recover, plan, &etcd).await?;
        }
        // 2. Retiring components: etcd member first, then pods, then directories. A retiring
        //    replica's API server is first taken out of the ingress (haproxy's runtime API,
        //    until it holds no connection), then the running haproxy reloads the
        //    configuration written above, which no longer has it.
        // Ingresses reloaded here already read every file written above.
        let mut reloaded = std::collections::BTreeSet::new();
        if plan.retiring.iter().any(|r| r.member.is_some()) {
            for ingress in ingresses(plan) {
                for r in plan.retiring.iter().filter(|r| r.member.is_some()) {
                    self.take_out(key, ingress, &r.key.name).await?;
                }
                if let Some(reload) = ingress.rendered.reloads.first()
                    && self.reload(key, ingress, reload).await?
                {
                    reloaded.insert(ingress.name());
                    self.emit(
                        Some(&ingress.hypervisor),
                        key,
                        Some(ingress.name()),
                        "retiring replicas taken out of the ingress".to_string(),
                    );
                }
            }
        }
        // A member whose removal would break the quorum now waits for the etcd step: the
        // members that stay may be brought back there (a stopped etcd started again).
        let mut deferred = Vec::new();
        for r in &plan.retiring {
            match self.retire(key, r, members, &etcd).await {
                Ok(Retired::Gone) => result.removed.push(r.key.clone()),
                Ok(Retired::LeftBehind) => {}
                Err(StepError::QuorumWouldBreak { .. }) => deferred.push(r),
                Err(e) => return Err(e),
            }
        }
        // A restore: every replica's etcd data replaced by the snapshot's, its pods stopped;
        //    the etcd step below then finds nobody answering and starts them together.
        if let Some(restore) = &plan.restore {
            Box::pin(self.restore(key, restore)).await?;
        }
        // 3. etcd. A cluster whose etcd answers keeps its quorum: replica by replica (in
        //    replica order), a member joins (learner, pod, promotion) or has its pod created or
        //    replaced, and a changed pod must be healthy again before the next one is touched
        //    (a certificate renewal or an image change never takes more than one member down).
        //    A new cluster, or one whose etcd does not answer (no quorum to keep), starts the
        //    pods of the replicas that found it together; replicas added later join one by one.
        let replicas: Vec<&ComponentPlan> = members
            .iter()
            .filter_map(|m| plan.component(&m.name))
            .collect();
        let answered = self.first_answer(members, &etcd).await.ok();
        let running = answered.is_some();
        // A run that may restart an API server, or the etcd member one stores in, first puts
        // back what an earlier one, stopped while a server was taken out, left out of the
        // ingress. A run that restarts none asks nothing.
        let (control_plane, ingress): (Vec<&ComponentPlan>, Vec<&ComponentPlan>) =
            plan.components.iter().partition(|c| c.role.serves_api());
        if running
            && control_plane
                .iter()
                .any(|c| c.staged.is_some() || !c.restart.is_empty())
        {
            let live: Vec<&str> = control_plane.iter().map(|c| c.name()).collect();
            for ingress in ingresses(plan) {
                self.put_back_left_out(key, ingress, &live).await?;
            }
        }
        // A new cluster's founders, when nothing else waits for their etcd: their pods start
        // with the others, and their quorum is waited for meanwhile (an API server waits
        // for etcd by itself).
        let mut founding = Vec::new();
        if let Some((_, list)) = answered {
            // Members no replica owns go first, when they can: a dead one would keep a
            // replacement from joining ("unhealthy cluster").
            let orphans = self
                .remove_orphan_members(key, members, &list, &etcd, false)
                .await?;
            let voting = |replica: &ComponentPlan| {
                members
                    .iter()
                    .find(|m| m.name == replica.name())
                    .is_some_and(|me| {
                        list.iter().any(|m| {
                            m.peer_urls.contains(&me.peer_url) && m.started() && !m.is_learner
                        })
                    })
            };
            let (voters, joiners): (Vec<&ComponentPlan>, Vec<&ComponentPlan>) =
                replicas.into_iter().partition(|r| voting(r));
            // Started voting members only need their pods, one at a time.
            for replica in voters {
                self.etcd_voter(key, plan, replica, members, &etcd, result)
                    .await?;
            }
            // What could not leave before, now that the voting members run.
            if orphans {
                let (_, list) = self.members(members, &etcd).await?;
                self.remove_orphan_members(key, members, &list, &etcd, true)
                    .await?;
            }
            for r in std::mem::take(&mut deferred) {
                if self.retire(key, r, members, &etcd).await? == Retired::Gone {
                    result.removed.push(r.key.clone());
                }
            }
            // Then the others join, one at a time.
            for replica in joiners {
                let outcome = self.etcd_join(key, replica, members, &etcd).await?;
                if outcome != Outcome::Unchanged {
                    self.etcd_healthy(key, replica, members, &etcd).await?;
                }
            }
        } else {
            let (founders, joiners): (Vec<&ComponentPlan>, Vec<&ComponentPlan>) = replicas
                .into_iter()
                .partition(|r| plan.etcd.founders.contains(r.name()));
            if joiners.is_empty() && deferred.is_empty() {
                founding = founders;
            } else {
                self.etcd_founders(key, &founders).await?;
                self.etcd_founded(&founders, members, &etcd).await?;
                for replica in joiners {
                    self.etcd_join(key, replica, members, &etcd).await?;
                }
            }
        }
        for r in deferred {
            if self.retire(key, r, members, &etcd).await? == Retired::Gone {
                result.removed.push(r.key.clone());
            }
        }
        // 4. The Kubernetes control plane of every replica and 5. the ingress, together. In a
        //    running cluster, control plane pods are created or replaced one replica at a
        //    time (replica order), a replaced one's API server ready before the next, so the
        //    ingress always has API servers to send requests to.
        let rolled = Box::pin(async {
            // An upgrade: every replica's new API server first (beside the running version's
            // controller-manager and scheduler), one at a time, each ready before the next;
            // then each replica whole, below. A replica past that step already is left be.
            // A replica's API server is taken out of the ingress before it restarts, and put
            // back once ready: no request goes to an API server that is not ready.
            for c in &control_plane {
                let (Some(staged), Some(main)) = (&c.staged, c.main_pod()) else {
                    continue;
                };
                if self.runs_one_of(key, c, &[staged, main]).await? {
                    continue;
                }
                self.drained(
                    key,
                    plan,
                    c,
                    Box::pin(async {
                        if self.staged_pod(key, c, staged).await? == Outcome::Replaced {
                            self.apiserver_ready(key, c, &plan.apiserver_ca).await?;
                        }
                        Ok(((), true))
                    }),
                )
                .await?;
            }
            for c in &control_plane {
                let Some(spec) = c.main_pod() else {
                    continue;
                };
                let replaced =
                    !self.runs_one_of(key, c, &[spec]).await? || c.restart.contains(&spec.name);
                if !replaced {
                    self.pod(key, c, spec).await?;
                    continue;
                }
                self.drained(
                    key,
                    plan,
                    c,
                    Box::pin(async {
                        if self.pod(key, c, spec).await? == Outcome::Replaced {
                            self.apiserver_ready(key, c, &plan.apiserver_ca).await?;
                        }
                        Ok(((), true))
                    }),
                )
                .await?;
            }
            Ok(())
        });
        let pods = if running {
            ingress
        } else {
            plan.components.iter().collect()
        };
        // A replica's control plane pod; the ingress's haproxy and, with the VPN on, its
        // endpoint.
        let reloaded = &reloaded;
        let together = join_all(
            pods.into_iter()
                .flat_map(|c| c.serving_pods().map(move |p| (c, p)))
                .map(|(c, p)| async move {
                    let outcome = self.pod(key, c, p).await?;
                    // A pod left running reloads the files it is told to reload.
                    if outcome == Outcome::Unchanged && !reloaded.contains(c.name()) {
                        for r in c.reload.iter().filter(|r| r.pod == p.name) {
                            self.reload(key, c, r).await?;
                            self.emit(
                                Some(&c.hypervisor),
                                key,
                                Some(c.name()),
                                format!("pod {} reloaded its files", r.pod),
                            );
                        }
                    }
                    Ok::<_, StepError>(outcome)
                }),
        );
        // The ingress first, then the replicas one at a time (taken out of it in turn).
        let founded = async {
            self.etcd_founders(key, &founding).await?;
            self.etcd_founded(&founding, members, &etcd).await
        };
        let (founded, together) = futures::join!(founded, together);
        founded?;
        let rolled: Step = if running { rolled.await } else { Ok(()) };
        rolled?;
        for outcome in together {
            outcome?;
        }
        // A live component's pods and files it no longer renders (its cluster's VPN or OIDC
        // issuer turned off): gone, now that no pod that reads them runs.
        for c in &plan.components {
            self.remove_stale_pods(key, c).await?;
            self.remove_stale_files(key, c, result).await?;
        }
        // 6. Observe until ready or out of time. API servers all ready and the ingress not:
        //    haproxy is told so once rather than waiting for its checks to rise again.
        //    So is an ingress of a cluster whose pods started in this run, once all its API
        //    servers are ready, even when a request through it got through: its checks failed
        //    while they started, and haproxy may still be counting down to holding them down
        //    (the requests of step 7 would then find no server for a second or more).
        //    A cluster that ran before this run is read from inside (step 7) while it is
        //    first observed: when it is ready then, those reads serve step 7.
        let mut vouched = false;
        let mut early = None;
        let mut first = running;
        loop {
            let observed = if std::mem::take(&mut first) {
                let (observed, reads) =
                    futures::join!(self.observe(plan, &etcd), self.early_reads(plan));
                early = reads;
                observed
            } else {
                self.observe(plan, &etcd).await
            };
            let ingress_lags = matches!(observed.failure, Some(StepError::IngressNotReady(_)));
            if !vouched
                && observed.apiservers_ready > 0
                && (ingress_lags || (!running && observed.failure.is_none()))
            {
                vouched = true;
                let servers: Vec<&str> = plan
                    .components
                    .iter()
                    .filter(|c| c.role.serves_api() && c.apiserver_url.is_some())
                    .map(ComponentPlan::name)
                    .collect();
                for ingress in ingresses(plan) {
                    self.vouch_for(key, ingress, &servers).await;
                }
                if ingress_lags {
                    early = None;
                    continue;
                }
            }
            let outcome = &mut result.outcome;
            outcome.etcd_started = observed.etcd_started;
            outcome.etcd_voting = observed.etcd_voting;
            outcome.apiservers_ready = observed.apiservers_ready;
            outcome.ingress_ready = observed.ingress_ready;
            match observed.failure {
                None => break,
                Some(failure) if self.out_of_time() => return Err(failure),
                Some(_) => {
                    early = None;
                    self.pause().await;
                }
            }
        }
        // 7. What the cluster holds inside, through its API.
        self.bootstrap(key, plan, result, early).await?;
        let outcome = &mut result.outcome;
        outcome.ready = true;
        outcome.reason = Reason::Succeeded;
        outcome.message = String::new();
        // `ready` is said by `Executor::cluster`, as the run's end.
        Ok(())
    }

    /// Runs `step` (a replica's API server, or the etcd member it stores in, restarting)
    /// with that replica taken out of every ingress that has it (see [`crate::ingress`]),
    /// and put back after, whatever `step` did: told it is up when `step` succeeded saying
    /// the API server answered, otherwise left to haproxy's own checks.
    async fn drained<T>(
        &self,
        key: &ObjectKey,
        plan: &Convergence,
        replica: &ComponentPlan,
        step: impl std::future::Future<Output = Step<(T, bool)>>,
    ) -> Step<T> {
        let mut out = Vec::new();
        for ingress in ingresses(plan) {
            match self.take_out(key, ingress, replica.name()).await {
                Ok(true) => {
                    out.push(ingress);
                    self.emit(
                        Some(&ingress.hypervisor),
                        key,
                        Some(ingress.name()),
                        format!("{} taken out of the ingress", replica.name()),
                    );
                }
                Ok(false) => {}
                Err(e) => {
                    // Those already out go back in: nothing was restarted.
                    for i in out {
                        let _ = self.put_back(key, i, replica.name(), false).await;
                    }
                    return Err(e);
                }
            }
        }
        let stepped = step.await;
        let ready = matches!(stepped, Ok((_, true)));
        let mut back = Ok(());
        for ingress in out {
            match self.put_back(key, ingress, replica.name(), ready).await {
                Ok(()) => self.emit(
                    Some(&ingress.hypervisor),
                    key,
                    Some(ingress.name()),
                    format!("{} back in the ingress", replica.name()),
                ),
                Err(e) => back = back.and(Err(e)),
            }
        }
        let (t, _) = stepped?;
        back.map(|()| t)
    }

    /// Refuses a plan that would take a component's kube-apiserver or etcd more than one
    /// minor ahead of the image it runs, or back (see
    /// [`oi_api::versions::version_step_refusal`]): what runs is read from its pods, so an
    /// edited `status.kubernetesVersion` cannot hide a jump. One pod listing per hypervisor.
    async fn check_versions(&self, key: &ObjectKey, plan: &Convergence) -> Step {
        let mut by_hypervisor: BTreeMap<&str, Vec<&ComponentPlan>> = BTreeMap::new();
        for c in &plan.components {
            by_hypervisor
                .entry(c.hypervisor.as_str())
                .or_default()
                .push(c);
        }
        for (h, components) in by_hypervisor {
            let pods = self.runtime(h)?.list_pods(&selector(key, None)).await?;
            for c in components {
                let running = pods.iter().filter(|p| {
                    p.labels
                        .get(oi_api::runtime::labels::COMPONENT)
                        .map(String::as_str)
                        == Some(c.name())
                });
                for pod in running {
                    let Some(planned) = c.pod(&pod.name) else {
                        continue;
                    };
                    for k in &pod.containers {
                        let Some(want) = planned.containers.iter().find(|w| w.name == k.name)
                        else {
                            continue;
                        };
                        if let Some(why) =
                            oi_api::versions::version_step_refusal(&k.name, &k.image, &want.image)
                        {
                            return Err(StepError::VersionSkew {
                                component: c.name().to_string(),
                                container: k.name.clone(),
                                running: k.image.clone(),
                                planned: want.image.clone(),
                                why,
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A started voting member's etcd pod made to run as rendered, and healthy again if it
    /// changed. A member whose etcd does not run is asked first whether its data can still be
    /// used, and one whose data cannot (lost, another cluster's, behind the cluster) joins
    /// again with fresh data ([`Self::etcd_rejoin`], recorded in `result`), in this run.
    async fn etcd_voter(
        &self,
        key: &ObjectKey,
        plan: &Convergence,
        c: &ComponentPlan,
        members: &[oi_planner::EtcdMember],
        etcd: &EtcdClient<'_, N>,
        result: &mut ClusterResult,
    ) -> Step {
        let spec = etcd_pod(c)?;
        // Its etcd stopped (or never came back): can it start again on its data?
        let rt = self.runtime(&c.hypervisor)?;
        let pods = rt.list_pods(&selector(key, Some(c.name()))).await?;
        let stopped = !container_in(&pods, &spec.name, "etcd")
            .is_some_and(|k| k.state == oi_cri::ContainerState::Running);
        let rejoined = if stopped {
            // Its API server, which stores in this member only, already fails; haproxy's
            // checks took it out, and bring it back once both serve again.
            self.etcd_restarted(key, c, spec, members, etcd, true)
                .await?
        } else if c.restart.contains(&spec.name)
            || oi_cri::pod_decision(spec, &pods).outcome() != Outcome::Unchanged
        {
            // A running member about to restart: its API server is taken out of the ingress
            // until it serves again from the restarted member.
            self.drained(
                key,
                plan,
                c,
                Box::pin(async {
                    // A leader about to restart hands its leadership over first: the others
                    // would otherwise wait out an election timeout before anything is
                    // written again.
                    self.lead_elsewhere(key, c, members, etcd).await;
                    let rejoined = self
                        .etcd_restarted(key, c, spec, members, etcd, false)
                        .await?;
                    let serves = self.apiserver_serves(key, c, plan).await?;
                    Ok((rejoined, serves))
                }),
            )
            .await?
        } else {
            self.pod(key, c, spec).await?;
            None
        };
        if let Some(start) = rejoined {
            result.etcd_rejoined.push((c.name().to_string(), start));
        }
        Ok(())
    }

    /// Starts (`stopped`) or replaces member `c`'s etcd pod, and waits for it to be healthy.
    /// A member that cannot use its data (it exited before, or exits now) rejoins on an
    /// empty one: the time it started doing so is returned.
    async fn etcd_restarted(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        spec: &PodSpec,
        members: &[oi_planner::EtcdMember],
        etcd: &EtcdClient<'_, N>,
        stopped: bool,
    ) -> Step<Option<oi_api::EtcdMemberStart>> {
        if stopped {
            let exited = self.etcd_exited(key, c).await?;
            if let Some(cause) = self.etcd_data_unusable(key, c, exited).await? {
                return self
                    .etcd_rejoin(key, c, members, etcd, &cause)
                    .await
                    .map(Some);
            }
        }
        if self.pod(key, c, spec).await? == Outcome::Unchanged {
            return Ok(None);
        }
        match self.etcd_healthy(key, c, members, etcd).await {
            Err(StepError::EtcdExited { exit_code, log, .. }) => {
                // It started and exited: its data may be what it cannot use.
                match self
                    .etcd_data_unusable(key, c, Some((exit_code, log.clone())))
                    .await?
                {
                    Some(cause) => self
                        .etcd_rejoin(key, c, members, etcd, &cause)
                        .await
                        .map(Some),
                    None => Err(StepError::EtcdExited {
                        member: c.name().to_string(),
                        hypervisor: c.hypervisor.clone(),
                        exit_code,
                        log,
                    }),
                }
            }
            other => other.map(|()| None),
        }
    }

    /// Tells a running pod of `c` to reload (see [`oi_planner::render::Reload`]); whether it
    /// runs.
    async fn reload(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        r: &oi_planner::render::Reload,
    ) -> Step<bool> {
        let rt = self.runtime(&c.hypervisor)?;
        let Some(container) = self.container_of(key, c, &r.pod, &r.container).await? else {
            return Ok(false);
        };
        match &c.rendered.runtime_api {
            Some(api) if api.pod == r.pod && api.container == r.container => {
                self.reload_haproxy(c, api, &container.id, &r.command)
                    .await?;
            }
            _ => rt.exec("reload", &container.id, &r.command).await?,
        }
        Ok(true)
    }

    /// Container `container` of component `c`'s pod `pod`, as its hypervisor lists it now.
    pub(crate) async fn container_of(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        pod: &str,
        container: &str,
    ) -> Step<Option<oi_cri::ContainerStatus>> {
        let rt = self.runtime(&c.hypervisor)?;
        let pods = rt.list_pods(&selector(key, Some(c.name()))).await?;
        Ok(container_in(&pods, pod, container).cloned())
    }

    /// Whether component `c`'s pod of the name of `specs[0]` was created from one of `specs`.
    async fn runs_one_of(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        specs: &[&PodSpec],
    ) -> Step<bool> {
        let rt = self.runtime(&c.hypervisor)?;
        let hashes: Vec<String> = specs.iter().map(|s| s.content_hash()).collect();
        Ok(rt
            .list_pods(&selector(key, Some(c.name())))
            .await?
            .iter()
            .filter(|p| specs.first().is_some_and(|s| s.name == p.name))
            .any(|p| p.spec_hash().is_some_and(|h| hashes.iter().any(|x| x == h))))
    }

    /// The upgrade's first step for one replica (see [`ComponentPlan::staged`]).
    async fn staged_pod(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        staged: &PodSpec,
    ) -> Step<Outcome> {
        let rt = self.runtime(&c.hypervisor)?;
        let outcome = rt.ensure_pod(staged).await?;
        if outcome != Outcome::Unchanged {
            let counter = match outcome {
                Outcome::Created => &self.counters.created,
                _ => &self.counters.replaced,
            };
            Counters::add(counter, 1);
            self.emit(
                Some(&c.hypervisor),
                key,
                Some(c.name()),
                format!("upgraded the API server of pod {}", staged.name),
            );
        }
        Ok(outcome)
    }

    /// Removes the files of component `c` its rendering no longer has
    /// ([`ComponentPlan::stale_files`]), and their records.
    async fn remove_stale_files(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        result: &mut ClusterResult,
    ) -> Step {
        let stale = &c.stale_files;
        if stale.is_empty() {
            return Ok(());
        }
        self.runtime(&c.hypervisor)?
            .remove_host_paths(stale)
            .await?;
        if let Some(placed) = result
            .files
            .iter_mut()
            .find(|p| p.component == c.name() && p.hypervisor == c.hypervisor)
        {
            placed.hashes.retain(|path, _| !stale.contains(path));
        }
        self.emit(
            Some(&c.hypervisor),
            key,
            Some(c.name()),
            format!("removed {} files it no longer has", stale.len()),
        );
        Ok(())
    }

    /// Removes the pods of component `c` that its rendering no longer has.
    async fn remove_stale_pods(&self, key: &ObjectKey, c: &ComponentPlan) -> Step {
        let rt = self.runtime(&c.hypervisor)?;
        for pod in rt.list_pods(&selector(key, Some(c.name()))).await? {
            if c.pod(&pod.name).is_some() {
                continue;
            }
            rt.remove_pod(&pod.id).await?;
            Counters::add(&self.counters.removed, 1);
            self.emit(
                Some(&c.hypervisor),
                key,
                Some(c.name()),
                format!("removed pod {} (no longer wanted)", pod.name),
            );
        }
        Ok(())
    }

    /// Writes a component's changed files; returns the hashes of all its files placed.
    async fn files(&self, key: &ObjectKey, c: &ComponentPlan) -> Step<PlacedFiles> {
        let rt = self.runtime(&c.hypervisor)?;
        let changed = c.changed_files() as u64;
        let hashes = rt.write_files(&c.rendered.files, &c.known_files).await?;
        if changed > 0 {
            Counters::add(&self.counters.files, changed);
            self.emit(
                Some(&c.hypervisor),
                key,
                Some(c.name()),
                format!("wrote {changed} files"),
            );
        }
        Ok(PlacedFiles {
            hypervisor: c.hypervisor.clone(),
            component: c.name().to_string(),
            hashes,
        })
    }

    /// Makes one pod of a component run as rendered; a pod that runs as rendered but must
    /// read files that changed is restarted. Returns what happened to it.
    pub(crate) async fn pod(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        spec: &PodSpec,
    ) -> Step<Outcome> {
        let rt = self.runtime(&c.hypervisor)?;
        let mut outcome = rt.ensure_pod(spec).await?;
        if outcome == Outcome::Unchanged && c.restart.contains(&spec.name) {
            let running = rt.list_pods(&selector(key, Some(c.name()))).await?;
            for pod in running.iter().filter(|p| p.name == spec.name) {
                rt.remove_pod(&pod.id).await?;
            }
            rt.ensure_pod(spec).await?;
            outcome = Outcome::Replaced;
        }
        let (counter, verb): (&AtomicU64, &str) = match outcome {
            Outcome::Created => (&self.counters.created, "created"),
            Outcome::Replaced => (&self.counters.replaced, "replaced"),
            Outcome::Unchanged => (&self.counters.unchanged, ""),
        };
        Counters::add(counter, 1);
        if outcome != Outcome::Unchanged {
            self.emit(
                Some(&c.hypervisor),
                key,
                Some(c.name()),
                format!("{verb} pod {}", spec.name),
            );
        }
        Ok(outcome)
    }
}

/// The ingresses of a plan.
fn ingresses(plan: &Convergence) -> impl Iterator<Item = &ComponentPlan> {
    plan.components
        .iter()
        .filter(|c| c.role == oi_api::ComponentRole::ControlPlaneIngress)
}

/// Container `container` of pod `pod` among `pods`.
pub(crate) fn container_in<'p>(
    pods: &'p [oi_cri::PodStatus],
    pod: &str,
    container: &str,
) -> Option<&'p oi_cri::ContainerStatus> {
    pods.iter()
        .filter(|p| p.name == pod)
        .flat_map(|p| &p.containers)
        .find(|k| k.name == container)
}

/// A replica's etcd pod.
pub(crate) fn etcd_pod(c: &ComponentPlan) -> Step<&PodSpec> {
    c.etcd_pod().ok_or_else(|| StepError::MissingPod {
        component: c.name().to_string(),
        pod: format!("{}-etcd", c.name()),
    })
}
