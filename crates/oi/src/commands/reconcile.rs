//! `oi reconcile`: plans the world (pure), executes the plan on its hypervisors, records what
//! happened into the world; progress and a summary on stderr, the updated manifests on stdout.
//!
//! ```text
//! manifests ─► oi_planner::plan ─► oi_engine::execute ─► oi_planner::record ─► manifests
//!   (load)       (pure)               │ progress events      (pure)        not ready after
//!                                     ▼                                  --max-wait: written
//!        [hypervisor] cluster/component: created pod ...                  anyway, exit 1
//! reconciled N clusters: X ready, Y not ready; pods created a, replaced b, unchanged c,
//! removed d; files written e; mutating CRI calls f; cluster API writes g
//! ```
//!
//! `--dry-run` stops after the plan: `oi_engine::dry_run` compares it with what the
//! hypervisors list (read-only calls).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};

use anyhow::Context as _;
use oi_api::versions::INFRA;
use oi_cri::ClientOptions;
use oi_engine::{CriConnector, DryRun, Event, ExecuteOptions, Executed, RealNetwork};
use oi_planner::PlanOptions;
use oi_planner::render::RenderOptions;

use crate::args::ReconcileArgs;
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// The summary line (its shape is relied upon by scripts and the end-to-end tests).
pub fn summary(executed: &Executed) -> String {
    let live: Vec<_> = executed
        .clusters
        .values()
        .map(|r| &r.outcome)
        .filter(|o| !o.deleted)
        .collect();
    let ready = live.iter().filter(|o| o.ready).count();
    let c = &executed.counts;
    format!(
        "reconciled {} clusters: {} ready, {} not ready; pods created {}, replaced {}, \
         unchanged {}, removed {}; files written {}; mutating CRI calls {}; cluster API writes {}",
        live.len(),
        ready,
        live.len() - ready,
        c.pods_created,
        c.pods_replaced,
        c.pods_unchanged,
        c.pods_removed,
        c.files_written,
        c.mutating_calls,
        c.cluster_writes
    )
}

/// What is not ready and why, one cluster per line.
pub fn not_ready(executed: &Executed) -> Option<String> {
    let lines: Vec<String> = executed
        .clusters
        .values()
        .map(|r| &r.outcome)
        .filter(|o| !o.ready && !o.deleted)
        .map(|o| {
            format!(
                "cluster {} is not ready: {}: {}",
                o.cluster, o.reason, o.message
            )
        })
        .collect();
    crate::commands::note(lines)
}

/// SIPClusters that could not get their hosts (nothing was labelled for them), and those
/// whose support services do not all run (`services`: per SIPCluster, its line and whether
/// it is ready).
pub fn sip_unschedulable(
    reports: &[oi_planner::sip::SipReport],
    services: &[oi_planner::sip::services::ServicesOutcome],
) -> Option<String> {
    let lines: Vec<String> = reports
        .iter()
        .filter(|r| !r.deleted && !r.selection.shortfalls.is_empty())
        .map(|r| format!("sipcluster {} is not ready: {}", r.key, r.message))
        .chain(services.iter().filter(|o| !o.ready).map(|o| {
            format!(
                "sipcluster {} is not ready: its support services: {}",
                o.key,
                o.failing.join("; ")
            )
        }))
        .collect();
    crate::commands::note(lines)
}

/// Warnings about SIP: hosts labelled for SIPClusters the manifests do not hold (left as
/// they are).
fn sip_warnings(world: &oi_api::World) -> Vec<String> {
    let mut out = Vec::new();
    let mut orphans: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (host, sip) in oi_planner::sip::orphaned_hosts(world) {
        orphans.entry(sip).or_default().push(host.to_string());
    }
    for (sip, hosts) in orphans {
        out.push(format!(
            "warning: hosts {} carry the labels of SIPCluster {sip}, which these manifests do not \
             hold: left as they are (delete it with `oi sipcluster delete` to let them go)",
            hosts.join(", ")
        ));
    }
    out
}

/// The plan of `--dry-run`, for a person: what the SIPClusters' host selection would do
/// (`sip`, one line each), then per hypervisor, then what cannot be planned.
pub fn render_plan(plan: &DryRun, sip: &[String]) -> String {
    let mut out = String::new();
    for line in sip {
        let _ = writeln!(out, "{line}");
    }
    for (h, p) in &plan.hypervisors {
        if let Some(e) = &p.unreachable {
            let _ = writeln!(out, "hypervisor {h}: unreachable: {e}");
            continue;
        }
        let _ = writeln!(out, "hypervisor {h}:");
        for (verb, pods) in [
            ("create", &p.create),
            ("replace", &p.replace),
            ("keep", &p.keep),
            ("remove", &p.remove),
        ] {
            for pod in pods {
                let _ = writeln!(out, "  {verb} pod {pod}");
            }
        }
        for pod in &p.orphans {
            let _ = writeln!(
                out,
                "  leave orphan pod {pod} (its cluster or component is not in the manifests; \
                 --prune removes it)"
            );
        }
        for f in &p.files {
            let _ = writeln!(out, "  write file {f}");
        }
        for f in &p.remove_files {
            let _ = writeln!(out, "  remove file {f}");
        }
        for d in &p.remove_directories {
            let _ = writeln!(out, "  remove directory {d}");
        }
    }
    for (cluster, e) in &plan.failures {
        let _ = writeln!(out, "cluster {cluster} cannot be planned: {e}");
    }
    for (sip, e) in &plan.sip_failures {
        let _ = writeln!(out, "sipcluster {sip} cannot be planned: {e}");
    }
    out
}

/// Why a dry run is incomplete, if it is: clusters that cannot be planned, hypervisors that
/// cannot be reached.
pub fn dry_run_incomplete(plan: &DryRun) -> Option<String> {
    let unreachable: Vec<&str> = plan
        .hypervisors
        .iter()
        .filter(|(_, p)| p.unreachable.is_some())
        .map(|(h, _)| h.as_str())
        .collect();
    let mut lines = Vec::new();
    for (what, failures) in [
        ("clusters", &plan.failures),
        ("SIPClusters", &plan.sip_failures),
    ] {
        if !failures.is_empty() {
            lines.push(format!(
                "{} {what} cannot be planned ({})",
                failures.len(),
                failures
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if !unreachable.is_empty() {
        lines.push(format!(
            "{} hypervisors cannot be reached ({})",
            unreachable.len(),
            unreachable.join(", ")
        ));
    }
    (!lines.is_empty()).then(|| format!("the dry run is incomplete: {}", lines.join("; ")))
}

/// What a run did with the SIPClusters: their host selections, and the outcome of each live
/// one's services.
pub struct SipRun {
    pub reports: Vec<oi_planner::sip::SipReport>,
    pub services: Vec<oi_planner::sip::services::ServicesOutcome>,
    /// Pods of clusters or components the world does not hold, found after the run (and
    /// removed, when pruning).
    pub orphans: oi_engine::orphans::Orphans,
}

/// What reaches hypervisors' runtimes for `oi`, its throwaway pods (file writers, path
/// probes) of the toolbox image under the image repository override `repository`.
pub fn connector(repository: Option<&str>) -> CriConnector {
    CriConnector {
        options: ClientOptions {
            toolbox_image: INFRA.toolbox.reference(repository),
            ..ClientOptions::default()
        },
    }
}

/// How a run is made: what `oi reconcile` and `oi cluster upgrade` share.
pub struct Runner {
    pub plan_options: PlanOptions,
    pub options: ExecuteOptions,
    pub connector: CriConnector,
    pub runtime: tokio::runtime::Runtime,
    pub quiet: bool,
    /// How runs show their progress (live on a terminal, lines, or nothing when quiet).
    pub progress: crate::progress::Progress,
    /// Remove orphans ([`oi_engine::orphans`]) and forget their ports and files: the world
    /// is taken to hold every cluster (`oi reconcile --prune`).
    pub prune: bool,
}

impl Runner {
    /// A runner with the image repository override `repository`, waiting `max_wait` for
    /// clusters to be ready.
    ///
    /// # Errors
    /// When the async runtime cannot start.
    pub fn new(
        repository: Option<String>,
        max_wait: std::time::Duration,
        quiet: bool,
    ) -> anyhow::Result<Runner> {
        let repository = repository.filter(|r| !r.is_empty());
        Ok(Runner {
            plan_options: PlanOptions {
                render: RenderOptions {
                    image_repository: repository.clone(),
                },
                ..PlanOptions::default()
            },
            options: ExecuteOptions {
                max_wait,
                ..ExecuteOptions::default()
            },
            connector: connector(repository.as_deref()),
            runtime: tokio::runtime::Builder::new_multi_thread()
                .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
                .enable_all()
                .build()
                .context("cannot start the async runtime")?,
            quiet,
            progress: crate::progress::Progress::new(crate::progress::Mode::detect(quiet)),
            prune: false,
        })
    }

    /// One run: plan, execute, record ([`oi_planner::plan`], [`oi_engine::execute`],
    /// [`oi_planner::record_run`]); progress on stderr unless quiet.
    pub fn run(
        &self,
        world: oi_api::World,
        now: time::OffsetDateTime,
    ) -> (oi_api::World, Executed) {
        let plan = oi_planner::plan(world, now, &self.plan_options);
        self.execute(plan, now)
    }

    /// What one run of everything the world holds would do (`--dry-run`): the plan of
    /// [`Runner::run_all`] compared with what the hypervisors list (read-only calls). Also
    /// one line per SIPCluster: its hosts, notes, what waits, and the trust of clusters it
    /// changes. A SIPCluster that cannot get its hosts is a failure of the dry run.
    pub fn dry_run_all(
        &self,
        world: oi_api::World,
        now: time::OffsetDateTime,
    ) -> (DryRun, Vec<String>) {
        let plan = oi_planner::plan(world, now, &self.plan_options);
        let mut dry_run =
            self.runtime
                .block_on(oi_engine::dry_run(&plan, &self.connector, self.prune));
        let mut lines = Vec::new();
        for r in &plan.sip.reports {
            lines.push(r.summary());
            if !r.deleted && !r.selection.shortfalls.is_empty() {
                dry_run
                    .sip_failures
                    .insert(r.key.clone(), r.message.clone());
            }
        }
        for p in &plan.sip.services {
            for note in &p.notes {
                lines.push(format!("sipcluster {}: {note}", p.key));
            }
            for why in &p.waiting {
                lines.push(format!("sipcluster {}: waits: {why}", p.key));
            }
        }
        for t in &plan.sip.trust {
            lines.push(t.describe());
        }
        (dry_run, lines)
    }

    /// One run of everything the world holds, in the one run order ([`oi_planner::plan_run`]):
    /// SIPClusters' hosts (their summaries on stderr unless quiet), their services placed,
    /// the clusters, the services rendered; executed and recorded as one plan. Then removed
    /// hypervisors nothing is left on leave the world, and orphans are found (and pruned).
    pub fn run_all(
        &self,
        world: oi_api::World,
        now: time::OffsetDateTime,
    ) -> (oi_api::World, Executed, SipRun) {
        let plan = oi_planner::plan(world, now, &self.plan_options);
        if !self.quiet {
            for r in &plan.sip.reports {
                eprintln!("{}", r.summary());
            }
            for t in &plan.sip.trust {
                eprintln!("oi: {}", t.describe());
            }
        }
        let reports = plan.sip.reports.clone();
        let (mut world, executed, services) = self.execute_recorded(plan, now);
        // Removed hypervisors nothing is left on leave the world.
        for h in oi_planner::forget_removed_hypervisors(&mut world) {
            if !self.quiet {
                eprintln!(
                    "oi: hypervisor {h} left the manifests: it was removed and nothing of any \
                     cluster or SIPCluster is on it any more"
                );
            }
        }
        let orphans = self.orphans(&mut world);
        (
            world,
            executed,
            SipRun {
                reports,
                services,
                orphans,
            },
        )
    }

    /// Finds the orphans the world's hypervisors hold and says so (a warning, unless quiet);
    /// when pruning, removes them and forgets their ports and files in `world`.
    fn orphans(&self, world: &mut oi_api::World) -> oi_engine::orphans::Orphans {
        let found = self
            .runtime
            .block_on(oi_engine::orphans::find_orphans(world, &self.connector));
        if self.prune {
            let quiet = self.quiet;
            let progress = move |e: &Event| {
                if !quiet {
                    eprintln!("{e}");
                }
            };
            let failed = self.runtime.block_on(oi_engine::orphans::prune_orphans(
                world,
                &found.pods,
                &self.connector,
                &progress,
            ));
            if failed.is_empty() && found.unreachable.is_empty() {
                let freed = oi_planner::forget_orphans(world);
                if !self.quiet && freed > 0 {
                    eprintln!(
                        "oi: --prune freed {freed} ports of clusters the manifests do not hold"
                    );
                }
            } else {
                for (h, e) in failed.iter().chain(&found.unreachable) {
                    eprintln!(
                        "warning: --prune: hypervisor {h}: {e}; its orphans and their ports stay \
                         (run it again)"
                    );
                }
            }
        } else if !self.quiet
            && let Some(line) = found.line()
        {
            eprintln!(
                "warning: {line}: left running, their ports held (`oi reconcile --prune` \
                 removes them once the manifests hold every cluster)"
            );
        }
        found
    }

    /// Executes a plan and records it; progress on stderr unless quiet.
    pub fn execute(
        &self,
        plan: oi_planner::Plan,
        now: time::OffsetDateTime,
    ) -> (oi_api::World, Executed) {
        let (world, executed, _) = self.execute_recorded(plan, now);
        (world, executed)
    }

    /// Executes a plan and records it ([`oi_planner::record_run`]); progress on stderr, and
    /// each live SIPCluster's line, unless quiet. Also returns the SIPClusters' outcomes.
    fn execute_recorded(
        &self,
        plan: oi_planner::Plan,
        now: time::OffsetDateTime,
    ) -> (
        oi_api::World,
        Executed,
        Vec<oi_planner::sip::services::ServicesOutcome>,
    ) {
        let quiet = self.quiet;
        let display = self.progress.run(plan.clusters.len());
        let progress = |e: &Event| display.event(e);
        let executed = self.runtime.block_on(oi_engine::execute(
            &plan,
            &self.options,
            &self.connector,
            &RealNetwork::default(),
            &progress,
        ));
        drop(display);
        let recorded = oi_planner::record_run(
            plan.world,
            &plan.sip,
            &executed.clusters,
            &executed.services,
            now,
        );
        if !quiet {
            for o in &recorded.services {
                eprintln!("{}", o.line());
            }
        }
        (recorded.world, executed, recorded.services)
    }
}

/// # Errors
/// When the manifests do not load or the async runtime cannot start; [`OutputThenFail`]
/// (after the manifests were written to `output`) when a cluster is not ready after
/// `--max-wait`, and (after the plan was) when a dry run is incomplete.
pub fn run(
    args: &ReconcileArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let mut runner = Runner::new(args.image_repository.clone(), args.max_wait, args.quiet)?;
    runner.prune = args.prune;
    if args.dry_run {
        let (dry_run, sip) = runner.dry_run_all(world, ctx.now);
        output.write_all(render_plan(&dry_run, &sip).as_bytes())?;
        return match dry_run_incomplete(&dry_run) {
            Some(why) => Err(OutputThenFail(why).into()),
            None => Ok(None),
        };
    }
    let quiet = args.quiet;
    let (world, executed, sip) = runner.run_all(world, ctx.now);
    manifests::finish(&world, output)?;
    if !quiet {
        let mut line = summary(&executed);
        if !sip.orphans.pods.is_empty() {
            let what = if args.prune {
                "removed"
            } else {
                "left running"
            };
            line.push_str(&format!(
                "; orphan pods {} ({what})",
                sip.orphans.pods.len()
            ));
        }
        eprintln!("{line}");
    }
    let mut warnings = crate::commands::availability_warnings(&world, None);
    warnings.extend(sip_warnings(&world));
    let unschedulable = sip_unschedulable(&sip.reports, &sip.services);
    let not_ready = match (not_ready(&executed), unschedulable) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (a, b) => a.or(b),
    };
    match not_ready {
        // The warnings go first: the error line is the last thing printed.
        Some(why) => {
            if let Some(note) = crate::commands::note(warnings) {
                eprintln!("{note}");
            }
            Err(OutputThenFail(why).into())
        }
        None => Ok(crate::commands::note(warnings)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use oi_api::ObjectKey;
    use oi_engine::{Counts, HypervisorPlan};
    use oi_planner::{ClusterOutcome, ClusterResult, Reason};

    use super::*;

    fn outcome(name: &str, ready: bool, deleted: bool) -> ClusterOutcome {
        ClusterOutcome {
            cluster: ObjectKey::new("default", name),
            ready,
            deleted,
            reason: if ready {
                Reason::Succeeded
            } else {
                Reason::EtcdNotReady
            },
            message: if ready {
                ""
            } else {
                "etcd: 2 of 3 members voting"
            }
            .into(),
            etcd_started: 3,
            etcd_voting: 2,
            apiservers_ready: 3,
            ingress_ready: true,
        }
    }

    #[test]
    fn summary_and_not_ready_report() {
        let report = Executed {
            clusters: [
                outcome("a", true, false),
                outcome("b", false, false),
                outcome("gone", false, true),
            ]
            .into_iter()
            .map(|o| {
                let result = ClusterResult {
                    outcome: o,
                    ..ClusterResult::new(&ObjectKey::new("default", "x"))
                };
                (result.outcome.cluster.clone(), result)
            })
            .collect(),
            services: Vec::new(),
            counts: Counts {
                pods_created: 3,
                pods_replaced: 0,
                pods_unchanged: 4,
                pods_removed: 1,
                files_written: 12,
                mutating_calls: 40,
                cluster_writes: 5,
            },
            elapsed: Duration::from_secs(1),
        };
        assert_eq!(
            summary(&report),
            "reconciled 2 clusters: 1 ready, 1 not ready; pods created 3, replaced 0, \
             unchanged 4, removed 1; files written 12; mutating CRI calls 40; \
             cluster API writes 5"
        );
        assert_eq!(
            not_ready(&report).as_deref(),
            Some("cluster default/b is not ready: EtcdNotReady: etcd: 2 of 3 members voting")
        );
    }

    #[test]
    fn plan_is_listed_per_hypervisor() {
        let plan = DryRun {
            hypervisors: BTreeMap::from([
                (
                    "h1".to_string(),
                    HypervisorPlan {
                        create: vec!["default/c-control-plane-0-etcd".into()],
                        keep: vec!["default/d-ingress".into()],
                        remove: vec!["default/t1-jump-host-0".into()],
                        files: vec!["/etc/oneinfra/default/c/c-ingress/haproxy.cfg".into()],
                        remove_files: vec![
                            "/etc/oneinfra/default/c/c-ingress/vpn-proxy.key".into(),
                        ],
                        remove_directories: vec!["/etc/oneinfra/_sip/default/t1".into()],
                        ..HypervisorPlan::default()
                    },
                ),
                (
                    "h2".to_string(),
                    HypervisorPlan {
                        unreachable: Some("connection refused".into()),
                        ..HypervisorPlan::default()
                    },
                ),
            ]),
            failures: BTreeMap::new(),
            sip_failures: BTreeMap::from([(
                ObjectKey::new("default", "t2"),
                "no public hypervisor".to_string(),
            )]),
        };
        assert_eq!(
            render_plan(
                &plan,
                &["sipcluster default/t1: deleted, 2 host(s) let go".into()]
            ),
            "sipcluster default/t1: deleted, 2 host(s) let go\n\
             hypervisor h1:\n  create pod default/c-control-plane-0-etcd\n  keep pod \
             default/d-ingress\n  remove pod default/t1-jump-host-0\n  write file \
             /etc/oneinfra/default/c/c-ingress/haproxy.cfg\n  remove file \
             /etc/oneinfra/default/c/c-ingress/vpn-proxy.key\n  remove directory \
             /etc/oneinfra/_sip/default/t1\n\
             hypervisor h2: unreachable: connection refused\n\
             sipcluster default/t2 cannot be planned: no public hypervisor\n"
        );
        assert_eq!(
            dry_run_incomplete(&plan).as_deref(),
            Some(
                "the dry run is incomplete: 1 SIPClusters cannot be planned (default/t2); \
                 1 hypervisors cannot be reached (h2)"
            )
        );
    }
}
