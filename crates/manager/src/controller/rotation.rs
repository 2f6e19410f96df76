//! CA rotation on request: the annotation `cluster.oneinfra.ereslibre.es/rotate-ca` (`all`,
//! or names separated by commas) starts one (`oi_planner::rotation`), and each reconcile
//! that leaves the cluster ready moves it a phase on, as `oi cluster rotate-ca` does:
//!
//! ```text
//! annotation, no rotation ─► start (status.caRotation: trust) ─► reconcile ─ ready ─►
//!   advance (spec: the new CAs; reissue) ─► reconcile ─ ready ─► event naming what stops
//!   working ─► advance (done; annotation removed) ─► reconcile: the old CAs gone
//! ```
//!
//! The phase lives in the Cluster's status, so a manager that restarts goes on where the
//! last one was.

use std::time::Duration;

use oi_api::{Cluster, Kind, ObjectKey, ROTATE_CA_ANNOTATION};
use oi_engine::{Connector, Network};
use oi_planner::rotation::{self, Selection};
use time::OffsetDateTime;

use super::writeback::{sync_meta_spec, sync_status};
use super::{Context, Event, ReconcileError, event_reasons};
use crate::store::Store;

/// How soon a cluster is looked at again after its rotation moved on.
pub const NEXT_PHASE: Duration = Duration::from_secs(1);

/// Starts the rotation the annotation asks for, when none is under way. An annotation that
/// names no known CA is reported (once per value) and left alone.
pub(super) async fn begin<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    cluster: &mut Cluster,
    now: OffsetDateTime,
) -> Result<(), ReconcileError> {
    let Some(asked) = cluster
        .metadata
        .annotations
        .get(ROTATE_CA_ANNOTATION)
        .cloned()
    else {
        return Ok(());
    };
    if cluster.status.ca_rotation.is_some() {
        return Ok(());
    }
    let uid = cluster.metadata.uid.clone();
    let selection = match Selection::parse(&asked) {
        Ok(s) => s,
        Err(why) => {
            if ctx.note_refused_rotation(key, &asked) {
                ctx.publish(
                    Kind::Cluster,
                    key,
                    uid.as_deref(),
                    Event::warning(
                        event_reasons::CA_ROTATION_REFUSED,
                        format!("annotation {ROTATE_CA_ANNOTATION}={asked:?}: {why}"),
                    ),
                )
                .await;
            }
            return Ok(());
        }
    };
    let mut desired = cluster.clone();
    if let Err(why) = rotation::start(&mut desired, &selection, now, &ctx.options.plan.prepare) {
        ctx.publish(
            Kind::Cluster,
            key,
            uid.as_deref(),
            Event::warning(event_reasons::CA_ROTATION_REFUSED, why.to_string()),
        )
        .await;
        return Ok(());
    }
    sync_status(&*ctx.store, cluster, &desired).await?;
    let cas = cluster
        .status
        .ca_rotation
        .as_ref()
        .map(|r| r.cas.join(", "))
        .unwrap_or_default();
    tracing::info!(cluster = %key, "CA rotation of {cas} started");
    ctx.publish(
        Kind::Cluster,
        key,
        uid.as_deref(),
        Event::normal(
            event_reasons::CA_ROTATION,
            format!("rotating {cas}; phase 1 of 3: the new CAs trusted beside the old"),
        ),
    )
    .await;
    Ok(())
}

/// After a reconcile that left the cluster ready: its rotation, if one is under way, moves
/// a phase on. Returns when to look again.
/// `joined`: the workers the reconcile found joined, named before the last phase.
pub(super) async fn advance<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    cluster: &mut Cluster,
    now: OffsetDateTime,
    joined: &[String],
) -> Result<Option<Duration>, ReconcileError> {
    let Some(under_way) = cluster.status.ca_rotation.clone() else {
        return Ok(None);
    };
    let uid = cluster.metadata.uid.clone();
    let mut desired = cluster.clone();
    let note = if under_way.phase == rotation::TRUST {
        "phase 2 of 3: every certificate reissued by the new CAs, the old still trusted".to_string()
    } else {
        let mut note = format!(
            "phase 3 of 3, the last: {}",
            rotation::last_phase_note(&under_way)
        );
        if !joined.is_empty() {
            note.push_str(&format!(
                "; workers joined with the old CAs: {}",
                joined.join(", ")
            ));
        }
        note
    };
    match rotation::advance(&mut desired, now) {
        Ok(phase) => {
            if phase.is_none() {
                desired.metadata.annotations.remove(ROTATE_CA_ANNOTATION);
            }
        }
        Err(why) => {
            ctx.publish(
                Kind::Cluster,
                key,
                uid.as_deref(),
                Event::warning(event_reasons::CA_ROTATION_REFUSED, why.to_string()),
            )
            .await;
            return Ok(None);
        }
    }
    // The spec (the new CAs) before the status that refers to them.
    sync_meta_spec(&*ctx.store, cluster, &desired).await?;
    sync_status(&*ctx.store, cluster, &desired).await?;
    tracing::info!(cluster = %key, "CA rotation: {note}");
    ctx.publish(
        Kind::Cluster,
        key,
        uid.as_deref(),
        Event::normal(event_reasons::CA_ROTATION, note),
    )
    .await;
    Ok(Some(NEXT_PHASE))
}
