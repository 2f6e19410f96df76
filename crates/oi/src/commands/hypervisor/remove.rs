//! `oi hypervisor remove --name N` (ours): declares a hypervisor gone for good
//! (`metadata.deletionTimestamp`), then reconciles until nothing of any cluster or SIPCluster
//! is left on it, and the hypervisor leaves the world.
//!
//! ```text
//! remove ─► reconcile ─ ready? ─► anything left on N? ─ no ─► N out of the world: done
//!             │ no: stop, exit 1        │ yes: reconcile again (at most a few runs)
//!             ▼ world as far as it got  ▼
//! ```
//!
//! Unlike `drain`, nothing waits for the hypervisor: a lost control plane replica's etcd
//! member is removed (only while the members that stay keep a quorum: otherwise the run
//! fails naming them, and `oi cluster recover` is the way on), its replacement joins as a
//! learner and is promoted in the same run; ingresses and API servers are placed anew (an
//! ingress's address changes with it, unless the cluster has a virtual address). What ran
//! there is removed if the machine answers, and left alone if it does not.
//!
//! Why a command of its own rather than `drain --force`: a drain keeps the hypervisor (it
//! stays cordoned, and can be uncordoned); a removal forgets it, and says so in the object
//! the way Kubernetes does (a deletion), which `oi-manager` reads the same way.

use std::io::{Read, Write};

use oi_api::ObjectKey;

use crate::args::HypervisorDrainArgs;
use crate::commands::hypervisor::drain::{left_on, services_left_on};
use crate::commands::reconcile::{Runner, not_ready, summary};
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// Runs beyond the first: a replica whose replacement's run failed midway, a SIPCluster's
/// services, each gets another.
const RUNS: usize = 3;

/// # Errors
/// When the manifests do not load or the hypervisor does not exist; [`OutputThenFail`] (the
/// world written as far as it got) when a run is not ready (a removal refused for quorum
/// among the reasons) or something is still there after its runs.
pub fn run(
    args: &HypervisorDrainArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let name = args.name.as_str();
    let key = ObjectKey::cluster_scoped(name);
    let hypervisor = world
        .hypervisors
        .get_mut(&key)
        .ok_or_else(|| anyhow::anyhow!("hypervisor {name} not found"))?;
    if hypervisor.metadata.deletion_timestamp.is_none() {
        hypervisor.metadata.deletion_timestamp = Some(ctx.now);
    }
    let runner = Runner::new(args.image_repository.clone(), args.max_wait, args.quiet)?;
    for run in 1..=RUNS {
        runner
            .progress
            .set_step(format!("remove {name}: run {run}"));
        let (after, executed, sip) = runner.run_all(world, ctx.now);
        world = after;
        if !args.quiet {
            eprintln!("{}", summary(&executed));
        }
        let stuck_services: Vec<String> = sip
            .services
            .iter()
            .filter(|o| !o.ready)
            .map(oi_planner::sip::services::ServicesOutcome::line)
            .collect();
        if let Some(why) = not_ready(&executed) {
            manifests::finish(&world, output)?;
            return Err(OutputThenFail(format!(
                "{why}\nhypervisor {name} is removed from placement, and what ran there is not \
                 replaced yet (run it again to go on)"
            ))
            .into());
        }
        if !stuck_services.is_empty() {
            manifests::finish(&world, output)?;
            return Err(OutputThenFail(format!(
                "hypervisor {name}: support services are not replaced:\n{}",
                stuck_services.join("\n")
            ))
            .into());
        }
        if !world.hypervisors.contains_key(&key) {
            manifests::finish(&world, output)?;
            let clusters: Vec<String> = executed
                .clusters
                .values()
                .filter(|r| !r.removed.is_empty())
                .map(|r| {
                    let names: Vec<&str> = r.removed.iter().map(|k| k.name.as_str()).collect();
                    format!(
                        "cluster {}: {} replaced",
                        r.outcome.cluster,
                        names.join(", ")
                    )
                })
                .collect();
            let mut note = format!(
                "oi: hypervisor {name} is removed: nothing of any cluster or SIPCluster is left \
                 on it"
            );
            for c in clusters {
                note.push_str(&format!("\n{c}"));
            }
            return Ok(Some(note));
        }
    }
    manifests::finish(&world, output)?;
    let left: Vec<String> = left_on(&world, name)
        .into_iter()
        .map(|(k, cs)| format!("cluster {k}: {} still there", cs.join(", ")))
        .chain(
            services_left_on(&world, name)
                .into_iter()
                .map(|(k, ss)| format!("sipcluster {k}: {} still there", ss.join(", "))),
        )
        .collect();
    Err(OutputThenFail(format!(
        "hypervisor {name} is not removed after {RUNS} runs:\n{}",
        left.join("\n")
    ))
    .into())
}
