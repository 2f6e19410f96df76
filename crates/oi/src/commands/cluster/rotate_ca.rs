//! `oi cluster rotate-ca [--ca NAMES] [--cluster N]`: a cluster's CAs and service-account key
//! rotated without downtime (`oi_planner::rotation`), one reconcile per phase, each ready
//! before the next.
//!
//! ```text
//! start (new CAs in status.caRotation.next) ─► reconcile: trust both      ─ ready? ─►
//! advance (new CAs into the spec)            ─► reconcile: reissue        ─ ready? ─►
//! "last phase: ... stop working" ─► advance   ─► reconcile: the old gone  ─ ready? ─► done
//!                       not ready: the world as far as it got is written, exit 1; rerun
//!                       to go on from that phase
//! ```

use std::io::{Read, Write};

use oi_planner::rotation::{self, Selection};

use crate::args::ClusterRotateCaArgs;
use crate::commands::reconcile::{Runner, not_ready, summary};
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// # Errors
/// When the manifests do not load, the cluster is not found, `--ca` names an unknown CA or
/// the rotation cannot start; [`OutputThenFail`] (the world written as far as it got) when
/// a phase is not ready.
pub fn run(
    args: &ClusterRotateCaArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let selection = Selection::parse(&args.ca).map_err(|e| anyhow::anyhow!("--ca: {e}"))?;
    let key = manifests::select_cluster(&world, args.cluster.as_deref())?
        .0
        .clone();
    let runner = Runner::new(args.image_repository.clone(), args.max_wait, args.quiet)?;
    let say = |line: String| {
        if !args.quiet {
            eprintln!("{line}");
        }
    };
    {
        let cluster = manifests::select_cluster_mut(&mut world, Some(&key.to_string()))?;
        match &cluster.status.ca_rotation {
            Some(r) => say(format!(
                "oi: cluster {key}: the rotation of {} under way goes on (phase {})",
                r.cas.join(", "),
                r.phase
            )),
            None => {
                rotation::start(cluster, &selection, ctx.now, &runner.plan_options.prepare)?;
                let cas = cluster
                    .status
                    .ca_rotation
                    .as_ref()
                    .map(|r| r.cas.join(", "))
                    .unwrap_or_default();
                say(format!(
                    "oi: cluster {key}: rotating {cas}; phase 1 of 3: the new CAs trusted beside the old"
                ));
            }
        }
    }
    loop {
        let phase = manifests::select_cluster(&world, Some(&key.to_string()))?
            .1
            .status
            .ca_rotation
            .as_ref()
            .map(|r| match r.phase.as_str() {
                rotation::TRUST => 1,
                rotation::REISSUE => 2,
                _ => 3,
            });
        runner.progress.set_step(match phase {
            Some(n) => format!("rotate-ca {key}: phase {n} of 3"),
            None => format!("rotate-ca {key}: the old CAs dropped"),
        });
        let (after, executed) = runner.run(world, ctx.now);
        world = after;
        say(summary(&executed));
        let cluster = manifests::select_cluster_mut(&mut world, Some(&key.to_string()))?;
        let phase = cluster.status.ca_rotation.as_ref().map(|r| r.phase.clone());
        if let Some(why) = not_ready(&executed) {
            manifests::finish(&world, output)?;
            let at = phase.map_or_else(
                || "after the old CAs were dropped".to_string(),
                |p| format!("in phase {p}"),
            );
            return Err(OutputThenFail(format!(
                "{why} (the rotation stopped {at}; the world records it: run oi cluster rotate-ca again to go on)"
            ))
            .into());
        }
        match phase.as_deref() {
            Some(rotation::TRUST) => {
                rotation::advance(cluster, ctx.now)?;
                say(format!(
                    "oi: cluster {key}: phase 2 of 3: every certificate reissued by the new CAs, the old still trusted"
                ));
            }
            Some(_) => {
                if let Some(r) = &cluster.status.ca_rotation {
                    say(format!(
                        "oi: cluster {key}: phase 3 of 3, the last: {}",
                        rotation::last_phase_note(r)
                    ));
                }
                let joined = executed
                    .clusters
                    .get(&key)
                    .and_then(|r| r.joined.clone())
                    .unwrap_or_default();
                if !joined.is_empty() {
                    eprintln!(
                        "warning: cluster {key}: workers joined with the old CAs need the new ones (join them again): {}",
                        joined.join(", ")
                    );
                }
                rotation::advance(cluster, ctx.now)?;
            }
            None => break,
        }
    }
    manifests::finish(&world, output)?;
    Ok(Some(format!("oi: cluster {key}: CA rotation done")))
}
