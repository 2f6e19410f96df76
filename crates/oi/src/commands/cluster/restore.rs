//! `oi cluster restore --from LOCATION [--cluster N] [--hypervisor H]...`: a cluster brought
//! back from a snapshot (`oi_planner::snapshot`), then reconciled with the rest of the world.
//!
//! ```text
//! LOCATION ─► checks: a oneinfra snapshot, whole, both checksums, of this cluster ─ refused:
//!   │                                                        nothing stopped, exit 1
//!   ▼ the cluster from the manifests, or from the snapshot (pinned to --hypervisor)
//! plan_restore ─► engine: snapshot beside every replica's etcd ─► replicas stopped ─►
//!   data replaced ─► members start together ─► control plane ─► ready ─► manifests
//! ```
//!
//! Rerunning it after any failure starts over from the snapshot and converges.

use std::io::{Read, Write};

use anyhow::Context as _;
use oi_api::ObjectKey;
use oi_planner::snapshot::{Snapshot, plan_restore, target};
use oi_s3::{Location, S3Config, Store};
use time::format_description::well_known::Rfc3339;

use crate::args::ClusterRestoreArgs;
use crate::commands::cluster::snapshot::size as snapshot_size;
use crate::commands::reconcile::{Runner, not_ready, summary};
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// `NAME` (in `default`) or `NAMESPACE/NAME`.
fn cluster_key(selector: &str) -> ObjectKey {
    match selector.split_once('/') {
        Some((namespace, name)) => ObjectKey::new(namespace, name),
        None => ObjectKey::new(oi_api::DEFAULT_NAMESPACE, selector),
    }
}

/// # Errors
/// When the manifests do not load, the snapshot cannot be read or is refused (nothing is
/// stopped then); [`OutputThenFail`] (after the manifests were written) when the restored
/// cluster is not ready in time.
pub fn run(
    args: &ClusterRestoreArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let source = Location::parse(&args.from).map_err(|e| anyhow::anyhow!("--from {e}"))?;
    let runner = Runner::new(args.image_repository.clone(), args.max_wait, args.quiet)?;
    let store = Store::new(S3Config::from_env());
    let bytes = runner
        .runtime
        .block_on(store.get(&source))
        .context("cannot read the snapshot")?;
    let name = source.to_string();
    let snapshot = Snapshot::decode(&bytes, &name)?;
    drop(bytes);
    let wanted = args.cluster.as_deref().map(cluster_key);
    let existed = world.clusters.contains_key(&snapshot.cluster_key());
    let key = target(
        &mut world,
        &snapshot,
        wanted.as_ref(),
        &args.hypervisors,
        &name,
        args.allow_other_cluster,
    )?;
    let header = &snapshot.header;
    if !args.quiet {
        eprintln!(
            "oi: restoring cluster {key} from {name} (taken {}, etcd revision {}, {}){}: the snapshot goes beside every replica's etcd first; then every replica's etcd and control plane restart on it (the ingress stays)",
            header.taken_at.format(&Rfc3339).unwrap_or_default(),
            header.revision,
            snapshot_size(snapshot.etcd.len()),
            if existed {
                ""
            } else {
                ", the cluster itself from the snapshot"
            }
        );
    }
    runner
        .progress
        .set_step(format!("restore {key} from {name}"));
    let plan = plan_restore(world, &key, &snapshot, ctx.now, &runner.plan_options);
    let (world, executed) = runner.execute(plan, ctx.now);
    manifests::finish(&world, output)?;
    if !args.quiet {
        eprintln!("{}", summary(&executed));
    }
    if let Some(why) = not_ready(&executed) {
        return Err(OutputThenFail(format!(
            "{why} (the restore starts over from the snapshot when run again)"
        ))
        .into());
    }
    Ok(Some(format!(
        "oi: cluster {key} restored to etcd revision {} of {}",
        header.revision,
        header.taken_at.format(&Rfc3339).unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_is_named_as_everywhere_else() {
        assert_eq!(cluster_key("demo"), ObjectKey::new("default", "demo"));
        assert_eq!(cluster_key("team/demo"), ObjectKey::new("team", "demo"));
    }
}
