//! `oi cluster upgrade --to VERSION [--cluster N]`: a cluster walked to a Kubernetes version
//! one minor at a time, each minor reconciled and ready before the next.
//!
//! ```text
//! runs 1.35.9, --to 1.37 ─► spec 1.36.4, reconcile ─ ready? ─► spec 1.37.1, reconcile ─ ready?
//!                             (API servers first,       no: stop, the world as far as it
//!                              then the rest, one        got is written, exit 1
//!                              replica at a time)
//! ```
//!
//! A lower version than the one running is refused before anything is done. The other
//! clusters of the world are reconciled along (as `oi reconcile` would).

use std::io::{Read, Write};

use anyhow::{Context as _, bail};
use oi_api::versions;

use crate::args::ClusterUpgradeArgs;
use crate::commands::reconcile::{Runner, not_ready, summary};
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// The versions to set one after the other to go from `running` to `target`: the newest
/// patch of each minor after the running one, the target last.
///
/// # Errors
/// An unsupported version, or a downgrade.
pub fn steps(running: &str, target: &str) -> anyhow::Result<Vec<&'static str>> {
    // An unset shell variable is not a wish for the default release.
    if target.trim().is_empty() {
        bail!(
            "--to is empty: name the version to reach ({}, or `default` for the newest)",
            versions::supported_versions().join(", ")
        );
    }
    let from = versions::find_release(running).with_context(|| {
        format!("the cluster runs {running:?}, which is not a supported version")
    })?;
    let to = versions::find_release(target).with_context(|| {
        format!(
            "--to {target:?} is not a supported version; supported: {}",
            versions::supported_versions().join(", ")
        )
    })?;
    if let Err(versions::UpgradeRefusal::Downgrade) =
        versions::check_upgrade(from.version, to.version)
    {
        bail!(
            "the cluster runs Kubernetes {} and --to {} is older: {}",
            from.version,
            to.version,
            versions::UpgradeRefusal::Downgrade
        );
    }
    let ((major, first), (_, last)) = (from.minor(), to.minor());
    let mut out: Vec<&'static str> = ((first + 1)..last)
        .filter_map(|m| versions::find_release(&format!("{major}.{m}")).map(|r| r.version))
        .collect();
    if to.version != from.version {
        out.push(to.version);
    }
    Ok(out)
}

/// # Errors
/// When the manifests do not load, the cluster is not found, the target is unsupported or
/// older; [`OutputThenFail`] (the world written as far as it got) when a minor is not ready.
pub fn run(
    args: &ClusterUpgradeArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let (key, cluster) = manifests::select_cluster(&world, args.cluster.as_deref())?;
    let key = key.clone();
    let running = if cluster.status.kubernetes_version.is_empty() {
        cluster.spec.kubernetes_version.clone()
    } else {
        cluster.status.kubernetes_version.clone()
    };
    let steps = steps(&running, &args.to)?;
    let runner = Runner::new(args.image_repository.clone(), args.max_wait, args.quiet)?;
    let mut at = running;
    if steps.is_empty() {
        eprintln!("oi: cluster {key} runs Kubernetes {at} already; reconciling it");
    }
    // Nothing to upgrade still converges the cluster once.
    let mut walk: Vec<Option<&'static str>> = steps.iter().copied().map(Some).collect();
    if walk.is_empty() {
        walk.push(None);
    }
    let total = walk.len();
    for (n, step) in walk.into_iter().enumerate() {
        runner.progress.set_step(match step {
            Some(version) => format!("upgrade {key} {at} -> {version} ({} of {total})", n + 1),
            None => format!("upgrade {key}: reconcile at {at}"),
        });
        if let Some(version) = step {
            eprintln!("oi: cluster {key}: Kubernetes {at} -> {version}");
            manifests::select_cluster_mut(&mut world, Some(&key.to_string()))?
                .spec
                .kubernetes_version = version.to_string();
        }
        let (after, executed) = runner.run(world, ctx.now);
        world = after;
        if !args.quiet {
            eprintln!("{}", summary(&executed));
        }
        if let Some(why) = not_ready(&executed) {
            manifests::finish(&world, output)?;
            let stopped = step.map_or_else(String::new, |v| {
                format!(" (stopped at {v}, from {at}; the world records how far it got)")
            });
            return Err(OutputThenFail(format!("{why}{stopped}")).into());
        }
        if let Some(version) = step {
            at = version.to_string();
        }
    }
    manifests::finish(&world, output)?;
    Ok(Some(format!("oi: cluster {key} runs Kubernetes {at}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_is_each_minor_in_turn_to_the_target() {
        assert_eq!(steps("1.35.9", "1.37").unwrap(), ["1.36.4", "1.37.1"]);
        assert_eq!(steps("1.36.4", "1.37.1").unwrap(), ["1.37.1"]);
        assert!(steps("1.37.1", "default").unwrap().is_empty());
        let e = steps("1.37.1", "1.35").unwrap_err().to_string();
        assert!(
            e.contains("runs Kubernetes 1.37.1 and --to 1.35.9 is older"),
            "{e}"
        );
        assert!(
            steps("1.37.1", "1.20")
                .unwrap_err()
                .to_string()
                .contains("not a supported version")
        );
        // An unset variable is not the default release.
        for empty in ["", "  "] {
            let e = steps("1.35.9", empty).unwrap_err().to_string();
            assert!(
                e.starts_with("--to is empty: name the version to reach"),
                "{e}"
            );
        }
    }
}
