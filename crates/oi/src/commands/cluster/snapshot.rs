//! `oi cluster snapshot --to LOCATION [--cluster N]`: a consistent snapshot of a running
//! cluster's etcd, written with the Cluster object it belongs to (`oi_planner::snapshot`'s
//! format) to a file or an S3-compatible store. The manifests are not changed.
//!
//! ```text
//! manifests ─► plan (the members, the engine's etcd identity) ─► etcd maintenance/status,
//!   maintenance/snapshot of the first member that answers, streamed: header, etcd's bytes
//!   as they arrive (etcd's checksum checked on the way), footer ─► LOCATION (a file: 0600;
//!   S3: one PUT or a multipart upload), written whole or not at all
//! ```

use std::io::{Read, Write};

use anyhow::Context as _;
use oi_api::ObjectKey;
use oi_planner::snapshot::snapshot_name;
use oi_planner::{ClusterPlan, PlanOptions};
use oi_s3::{Location, S3Config, Store};
use time::OffsetDateTime;

use crate::args::ClusterSnapshotArgs;
use crate::commands::Context;
use crate::manifests;

/// Where `--to` puts the snapshot: a location ending in `/`, or an existing directory, gets
/// [`snapshot_name`].
pub fn destination(to: &str, key: &ObjectKey, at: OffsetDateTime) -> anyhow::Result<Location> {
    let location = Location::parse(to).map_err(|e| anyhow::anyhow!("--to {e}"))?;
    let directory = to.ends_with('/')
        || matches!(&location, Location::File(p) if p.is_dir())
        || matches!(&location, Location::S3 { key, .. } if key.is_empty());
    Ok(if directory {
        location.join(&snapshot_name(key, at))
    } else {
        location
    })
}

/// Refuses a file `--to` would replace that is not a snapshot: one of the command's inputs,
/// a file of manifests, or anything else that exists and is not a snapshot.
///
/// # Errors
/// Naming the file and why.
pub fn check_file(
    path: &std::path::Path,
    inputs: &[(String, oi_cli_io::FileId)],
) -> anyhow::Result<()> {
    let shown = path.display();
    if let Some(id) = oi_cli_io::file_id(path)
        && let Some((input, _)) = inputs.iter().find(|(_, i)| *i == id)
    {
        anyhow::bail!(
            "--to {shown} is also an input ({input}): the snapshot would replace the manifests"
        );
    }
    if oi_cli_io::holds_manifests(path) {
        anyhow::bail!(
            "--to {shown} holds manifests: the snapshot would replace them (choose another file)"
        );
    }
    if path.exists() {
        use std::io::Read as _;
        let mut head = vec![0; oi_planner::snapshot::MAGIC.len()];
        let read = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut head))
            .with_context(|| format!("--to {shown} cannot be read"))?;
        let snapshot = read == head.len()
            && (head == oi_planner::snapshot::MAGIC || head == oi_planner::snapshot::MAGIC_V1);
        if read != 0 && !snapshot {
            anyhow::bail!(
                "--to {shown} exists and is not a snapshot: it is left as it is (remove it, or \
                 choose another file)"
            );
        }
    }
    Ok(())
}

/// Bytes for a person: `2.1 MB`.
pub fn size(bytes: usize) -> String {
    if bytes >= 1_000_000 {
        format!("{:.1} MB", bytes as f64 / 1_000_000.0)
    } else if bytes >= 1_000 {
        format!("{:.1} kB", bytes as f64 / 1_000.0)
    } else {
        format!("{bytes} B")
    }
}

/// # Errors
/// When the manifests do not load, the cluster is not found or cannot be planned, no etcd
/// member gives a sound snapshot, or the snapshot cannot be written.
pub fn run(
    args: &ClusterSnapshotArgs,
    ctx: &Context,
    input: impl Read,
    _output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let (key, cluster) = manifests::select_cluster(&world, args.cluster.as_deref())?;
    let (key, cluster) = (key.clone(), cluster.clone());
    let location = destination(&args.to, &key, ctx.now)?;
    if let Location::File(path) = &location {
        check_file(path, &manifests::input_ids(&args.input))?;
    }
    let plan = oi_planner::plan(world, ctx.now, &PlanOptions::default());
    let convergence = match plan.clusters.get(&key) {
        Some(ClusterPlan::Converge(c)) => c,
        Some(ClusterPlan::Unplannable(e)) => anyhow::bail!("cluster {key} cannot be planned: {e}"),
        _ => anyhow::bail!("cluster {key} is being deleted"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let network = oi_engine::RealNetwork::new(args.timeout);
    let store = Store::new(S3Config::from_env());
    let of = oi_engine::SnapshotOf {
        key: &key,
        cluster: &cluster,
        taken_at: ctx.now,
    };
    // On a terminal, the bytes written so far and the rate, live.
    let display = crate::progress::Progress::new(crate::progress::Mode::detect(false))
        .transfer(&format!("snapshot {key} to {location}"));
    let taken = runtime
        .block_on(oi_engine::take_snapshot(
            &network,
            &convergence.etcd,
            of,
            |stream| async {
                display.say("etcd streams its snapshot");
                let counted = futures::TryStreamExt::inspect_ok(stream, |chunk| {
                    display.add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
                });
                store
                    .put_stream(&location, counted)
                    .await
                    .map_err(|e| format!("cannot write the snapshot: {e}"))
            },
        ))
        .map_err(|e| anyhow::anyhow!("cluster {key}: {e}"))?;
    drop(display);
    let (revision, member, version) = (taken.revision, &taken.member, &taken.version);
    let written = usize::try_from(taken.written).unwrap_or(usize::MAX);
    Ok(Some(format!(
        "oi: snapshot of cluster {key} (etcd revision {revision}, from {member}, etcd {version}, {}) written to {location}",
        size(written)
    )))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn a_directory_gets_a_name_that_sorts_by_time() {
        let key = ObjectKey::new("team-a", "demo");
        let at = datetime!(2026-11-25 21:03:04 UTC);
        assert_eq!(
            snapshot_name(&key, at),
            "team-a-demo-20261125T210304Z.oisnap"
        );
        assert_eq!(
            destination("s3://snaps/prod/", &key, at)
                .unwrap()
                .to_string(),
            "s3://snaps/prod/team-a-demo-20261125T210304Z.oisnap"
        );
        assert_eq!(
            destination("s3://snaps", &key, at).unwrap().to_string(),
            "s3://snaps/team-a-demo-20261125T210304Z.oisnap"
        );
        assert_eq!(
            destination("s3://snaps/x.oisnap", &key, at)
                .unwrap()
                .to_string(),
            "s3://snaps/x.oisnap"
        );
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().to_str().unwrap();
        assert_eq!(
            destination(to, &key, at).unwrap(),
            Location::File(dir.path().join("team-a-demo-20261125T210304Z.oisnap"))
        );
        assert!(destination("gs://x", &key, at).is_err());
        assert_eq!(size(2_100_000), "2.1 MB");
        assert_eq!(size(999), "999 B");
    }
}
