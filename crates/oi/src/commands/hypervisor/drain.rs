//! `oi hypervisor drain --name N` (ours): marks the hypervisor drained (`spec.drain`, and
//! cordoned), then reconciles until nothing of any cluster or SIPCluster runs there (a
//! SIPCluster's support services move in one run).
//!
//! ```text
//! drain ─► reconcile ─ ready? ─► anything left on N? ─ yes ─► reconcile ...
//!            │ no: stop, exit 1       │ no: done            │ no room elsewhere (a cluster's
//!            ▼ world as far as it got ▼                     ▼ Drained=False NoCapacity): stop
//! ```
//!
//! Each run takes one step per cluster (see `oi_planner::prepare`): a control plane replica
//! on the hypervisor gets a replacement elsewhere, which joins (etcd learner, promoted, its
//! API server ready); the next run retires the replica. An ingress moves in one run, and the
//! cluster's address with it. What cannot move keeps running where it is, and is named.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use oi_api::common::{ConditionStatus, condition_types, find_condition};
use oi_api::{ObjectKey, World};

use crate::args::HypervisorDrainArgs;
use crate::commands::reconcile::{Runner, not_ready, summary};
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// The live components of every cluster on `hypervisor`, by cluster.
pub fn left_on(world: &World, hypervisor: &str) -> BTreeMap<ObjectKey, Vec<String>> {
    let mut out: BTreeMap<ObjectKey, Vec<String>> = BTreeMap::new();
    for c in world.components.values() {
        if c.spec.hypervisor.as_deref() == Some(hypervisor) {
            out.entry(c.cluster_key())
                .or_default()
                .push(c.metadata.name.clone());
        }
    }
    out
}

/// The SIPClusters' support services on `hypervisor` (from its port allocations), by
/// SIPCluster.
pub fn services_left_on(world: &World, hypervisor: &str) -> BTreeMap<ObjectKey, Vec<String>> {
    let mut out: BTreeMap<ObjectKey, Vec<String>> = BTreeMap::new();
    let Some(h) = world
        .hypervisors
        .get(&ObjectKey::cluster_scoped(hypervisor))
    else {
        return out;
    };
    for a in &h.status.allocated_ports {
        let Some(sip) = a
            .cluster
            .strip_prefix(oi_planner::sip::services::OWNER_PREFIX)
        else {
            continue;
        };
        let service = oi_planner::sip::services::service_of(&a.component).to_string();
        let services = out
            .entry(ObjectKey::new(a.cluster_namespace.clone(), sip))
            .or_default();
        if !services.contains(&service) {
            services.push(service);
        }
    }
    out
}

/// The clusters whose drain cannot go on, with why.
fn blocked(world: &World, clusters: &BTreeMap<ObjectKey, Vec<String>>) -> Vec<String> {
    clusters
        .keys()
        .filter_map(|k| {
            let c = world.clusters.get(k)?;
            let d = find_condition(&c.status.conditions, condition_types::DRAINED)?;
            (d.status == ConditionStatus::False && d.reason == "NoCapacity")
                .then(|| format!("cluster {k}: {}", d.message))
        })
        .collect()
}

/// # Errors
/// When the manifests do not load or the hypervisor does not exist; [`OutputThenFail`] (the
/// world written as far as it got) when a run is not ready, a component cannot move, or the
/// drain does not finish within its runs.
pub fn run(
    args: &HypervisorDrainArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let name = args.name.as_str();
    let hypervisor = world
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped(name))
        .ok_or_else(|| anyhow::anyhow!("hypervisor {name} not found"))?;
    hypervisor.spec.unschedulable = true;
    hypervisor.spec.drain = true;
    let runner = Runner::new(args.image_repository.clone(), args.max_wait, args.quiet)?;
    // Two runs per component (replacement, then retirement), one more for components that
    // never took part in a ready run (what lets them be moved), and one that finds nothing.
    // SIPClusters' services move in one run each.
    let mut still_there: usize = left_on(&world, name).values().map(Vec::len).sum();
    let runs = 2 * still_there + 2;
    for run in 1..=runs {
        runner.progress.set_step(format!(
            "drain {name}: run {run}, {still_there} component(s) still there"
        ));
        let (after, executed, sip) = runner.run_all(world, ctx.now);
        world = after;
        if !args.quiet {
            eprintln!("{}", summary(&executed));
        }
        let left = left_on(&world, name);
        still_there = left.values().map(Vec::len).sum();
        let services = services_left_on(&world, name);
        // A SIPCluster whose services are still here and do not run elsewhere: stuck.
        let stuck_services: Vec<String> = sip
            .services
            .iter()
            .filter(|o| !o.ready && services.contains_key(&o.key))
            .map(oi_planner::sip::services::ServicesOutcome::line)
            .collect();
        if !stuck_services.is_empty() {
            manifests::finish(&world, output)?;
            return Err(OutputThenFail(format!(
                "hypervisor {name} cannot be drained:\n{}",
                stuck_services.join("\n")
            ))
            .into());
        }
        if let Some(why) = not_ready(&executed) {
            manifests::finish(&world, output)?;
            return Err(OutputThenFail(format!(
                "{why}\nthe drain of hypervisor {name} stopped; what did not move runs where it \
                 was (run it again to go on)"
            ))
            .into());
        }
        if left.is_empty() && services.is_empty() {
            manifests::finish(&world, output)?;
            return Ok(Some(format!(
                "oi: hypervisor {name} is drained: nothing of any cluster or SIPCluster runs \
                 there (it stays cordoned; `oi hypervisor uncordon` makes it schedulable again)"
            )));
        }
        let stuck = blocked(&world, &left);
        if !stuck.is_empty() {
            manifests::finish(&world, output)?;
            return Err(OutputThenFail(format!(
                "hypervisor {name} cannot be drained:\n{}",
                stuck.join("\n")
            ))
            .into());
        }
        if !args.quiet {
            let names: Vec<String> = left
                .iter()
                .flat_map(|(k, cs)| cs.iter().map(move |c| format!("{}/{c}", k.namespace)))
                .chain(
                    services
                        .iter()
                        .flat_map(|(k, ss)| ss.iter().map(move |s| format!("sipcluster {k} {s}"))),
                )
                .collect();
            eprintln!("oi: hypervisor {name}: still there: {}", names.join(", "));
        }
    }
    manifests::finish(&world, output)?;
    let left: Vec<String> = left_on(&world, name)
        .keys()
        .filter_map(|k| {
            let d = find_condition(
                &world.clusters.get(k)?.status.conditions,
                condition_types::DRAINED,
            )?;
            Some(format!("cluster {k}: {}", d.message))
        })
        .chain(
            services_left_on(&world, name)
                .into_iter()
                .map(|(k, ss)| format!("sipcluster {k}: {} still there", ss.join(", "))),
        )
        .collect();
    Err(OutputThenFail(format!(
        "hypervisor {name} is not drained after {runs} runs:\n{}",
        left.join("\n")
    ))
    .into())
}
