//! Scheduled etcd snapshots (`spec.snapshots`, ours): after a reconcile that left the
//! cluster ready, a snapshot is taken when the last one (`status.lastSnapshot`) is `every`
//! old, written to `location` as `oi cluster snapshot` names it, and the oldest of the
//! cluster's snapshots there beyond `keep` are removed (only files of that exact name form:
//! another cluster's, or anything else, are never touched).
//!
//! ```text
//! ready ─► due? ─no─► requeue when it is due (or the usual ready requeue, if sooner)
//!           │yes
//!           ▼
//! take (etcd maintenance API, checksum checked) ─► put <location>/<ns>-<name>-<time>.oisnap
//!   ─► list <location>, remove the oldest of the cluster's beyond keep
//!   ─► status.lastSnapshot, event SnapshotTaken      (a failure: event SnapshotFailed,
//!                                                     tried again in a minute)
//! ```

use std::time::Duration;

use oi_api::{Cluster, Kind, ObjectKey, SnapshotRecord};
use oi_engine::{Connector, Network};
use oi_planner::snapshot::{beyond_retention, snapshot_name};
use oi_planner::{ClusterPlan, Plan};
use oi_s3::Location;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::writeback::sync_status;
use super::{Context, Event, ReconcileError, event_reasons};
use crate::store::Store;

/// When a failed snapshot is tried again.
const RETRY: Duration = Duration::from_secs(60);

/// When the next snapshot of `cluster` is due from `now` (`Duration::ZERO`: now), if it has
/// a schedule; a schedule that does not parse has none (validation reports it).
pub fn due_in(cluster: &Cluster, now: OffsetDateTime) -> Option<Duration> {
    let schedule = cluster.spec.snapshots.as_ref()?;
    let every = schedule.interval().ok()?;
    let Some(last) = cluster
        .status
        .last_snapshot
        .as_ref()
        .and_then(|l| OffsetDateTime::parse(&l.taken_at, &Rfc3339).ok())
    else {
        return Some(Duration::ZERO);
    };
    let next = last + every;
    Some(if next <= now {
        Duration::ZERO
    } else {
        (next - now).try_into().unwrap_or(Duration::ZERO)
    })
}

/// Takes the cluster's snapshot if it is due; returns when to look again for the next one.
pub(super) async fn run<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    plan: &Plan,
    cluster: &mut Cluster,
    now: OffsetDateTime,
) -> Result<Option<Duration>, ReconcileError> {
    let Some(wait) = due_in(cluster, now) else {
        return Ok(None);
    };
    if !wait.is_zero() {
        return Ok(Some(wait));
    }
    let Some(schedule) = cluster.spec.snapshots.clone() else {
        return Ok(None);
    };
    let uid = cluster.metadata.uid.clone();
    match take(ctx, key, plan, cluster, &schedule, now).await {
        Ok((record, removed)) => {
            let mut note = format!(
                "snapshot of etcd revision {} ({} bytes) written to {}",
                record.revision, record.size, record.location
            );
            if !removed.is_empty() {
                note.push_str(&format!(
                    "; {} older removed (keep {}): {}",
                    removed.len(),
                    schedule.kept(),
                    removed.join(", ")
                ));
            }
            tracing::info!(cluster = %key, "{note}");
            let mut desired = cluster.clone();
            desired.status.last_snapshot = Some(record);
            sync_status(&*ctx.store, cluster, &desired).await?;
            ctx.publish(
                Kind::Cluster,
                key,
                uid.as_deref(),
                Event::normal(event_reasons::SNAPSHOT_TAKEN, note),
            )
            .await;
            Ok(due_in(cluster, now))
        }
        Err(why) => {
            tracing::warn!(cluster = %key, "scheduled snapshot failed: {why}");
            ctx.publish(
                Kind::Cluster,
                key,
                uid.as_deref(),
                Event::warning(
                    event_reasons::SNAPSHOT_FAILED,
                    format!("scheduled snapshot to {} failed: {why}", schedule.location),
                ),
            )
            .await;
            Ok(Some(RETRY))
        }
    }
}

/// One snapshot written, and the old ones removed.
async fn take<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    plan: &Plan,
    cluster: &Cluster,
    schedule: &oi_api::SnapshotSchedule,
    now: OffsetDateTime,
) -> Result<(SnapshotRecord, Vec<String>), String> {
    let Some(ClusterPlan::Converge(c)) = plan.clusters.get(key) else {
        return Err("the cluster is not planned to run".into());
    };
    let base = Location::parse(&schedule.location)?;
    let location = base.join(&snapshot_name(key, now));
    let store = &ctx.options.snapshot_store;
    let of = oi_engine::SnapshotOf {
        key,
        cluster,
        taken_at: now,
    };
    let taken = oi_engine::take_snapshot(&ctx.network, &c.etcd, of, |stream| async {
        store
            .put_stream(&location, stream)
            .await
            .map_err(|e| e.to_string())
    })
    .await?;
    let size = taken.written;
    let listed = store.list(&base).await.map_err(|e| e.to_string())?;
    let names: Vec<&str> = listed.iter().map(|o| o.location.name()).collect();
    let mut removed = Vec::new();
    for name in beyond_retention(key, &names, schedule.kept()) {
        store
            .delete(&base.join(name))
            .await
            .map_err(|e| e.to_string())?;
        removed.push(name.to_string());
    }
    Ok((
        SnapshotRecord {
            taken_at: now.format(&Rfc3339).unwrap_or_default(),
            location: location.to_string(),
            revision: taken.revision,
            size,
        },
        removed,
    ))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn a_snapshot_is_due_every_so_often_from_the_last() {
        let mut c = Cluster::new(
            oi_api::ObjectMeta::named("demo"),
            oi_api::ClusterSpec::default(),
        );
        let now = datetime!(2026-11-25 12:00:00 UTC);
        assert_eq!(due_in(&c, now), None, "no schedule");
        c.spec.snapshots = Some(oi_api::SnapshotSchedule {
            every: "6h".into(),
            keep: None,
            location: "s3://b".into(),
        });
        assert_eq!(due_in(&c, now), Some(Duration::ZERO), "never taken");
        c.status.last_snapshot = Some(SnapshotRecord {
            taken_at: "2026-11-25T10:00:00Z".into(),
            ..SnapshotRecord::default()
        });
        assert_eq!(due_in(&c, now), Some(Duration::from_secs(4 * 3600)));
        c.status.last_snapshot = Some(SnapshotRecord {
            taken_at: "2026-11-25T05:00:00Z".into(),
            ..SnapshotRecord::default()
        });
        assert_eq!(due_in(&c, now), Some(Duration::ZERO), "overdue");
    }
}
