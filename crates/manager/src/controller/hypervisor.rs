//! The Hypervisor controller: probes the CRI endpoint (connecting asks the runtime its
//! version), keeps the `hypervisor_reachable` metric and the `Reachable` condition,
//! publishes transitions, and removes the throwaway pods a killed manager left on the
//! hypervisor once per process.
//!
//! A hypervisor is lost when it is deleted, or (with `--replace-unreachable-after`) when it
//! has not answered for that long: the clusters with components on it are woken, and their
//! reconciles replace what ran there (see `oi_planner::prepare`). A deleted one keeps the
//! manager's finalizer until nothing holds it (no component, no SIPCluster's port).

use oi_api::common::{ConditionStatus, condition_types, set_condition};
use oi_api::hypervisor::Lost;
use oi_api::{Component, Hypervisor, Kind, ObjectKey};
use oi_engine::{Connector, Network};

use super::writeback::{has_finalizer, remove_finalizer, sync_status};
use super::{
    Action, Context, Event, FINALIZER, Next, ReconcileError, clusters_using_hypervisor,
    event_reasons, lock, now,
};
use crate::store::Store;

pub(super) async fn reconcile<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Next, ReconcileError> {
    let name = key.name.as_str();
    let Some(mut hypervisor) = ctx.store.get::<Hypervisor>(key).await? else {
        forget(ctx, name);
        return Ok(Next::Done(Action::AwaitChange));
    };
    if hypervisor.metadata.is_being_deleted() {
        return removed(ctx, key, hypervisor).await;
    }
    if !has_finalizer(&hypervisor) {
        hypervisor.metadata.finalizers.push(FINALIZER.to_string());
        hypervisor = ctx.store.update(&hypervisor).await?;
    }
    let probe = ctx.connector.connect(&hypervisor).await;
    let reachable = probe.is_ok();
    ctx.metrics.set_hypervisor_reachable(name, reachable);
    let previous = lock(&ctx.reachable).insert(name.to_string(), reachable);
    // The first probe publishes only bad news; later ones every transition.
    let event = match (&probe, previous) {
        (Ok(_), Some(false)) => Some(Event::normal(
            event_reasons::HYPERVISOR_REACHABLE,
            format!("hypervisor {name} answers again"),
        )),
        (Err(e), None | Some(true)) => Some(Event::warning(
            event_reasons::HYPERVISOR_UNREACHABLE,
            e.to_string(),
        )),
        _ => None,
    };
    match &probe {
        Ok(_) if previous != Some(true) => tracing::info!(hypervisor = name, "reachable"),
        Err(e) if previous != Some(false) => {
            tracing::warn!(hypervisor = name, "unreachable: {e}");
        }
        _ => {}
    }
    // The condition, written when it changes: whether the hypervisor is lost after the
    // grace period is read from its last transition.
    let now = now();
    let mut desired = hypervisor.clone();
    let (status, reason, message) = match &probe {
        Ok(_) => (ConditionStatus::True, "Reachable", String::new()),
        Err(e) => (ConditionStatus::False, "Unreachable", e.to_string()),
    };
    if set_condition(
        &mut desired.status.conditions,
        condition_types::REACHABLE,
        status,
        reason,
        &message,
        now,
    ) {
        let _lock = ctx.hypervisor_locks.some([name.to_string()].into()).await;
        if let Some(mut fresh) = ctx.store.get::<Hypervisor>(key).await? {
            let mut with = fresh.clone();
            with.status.conditions = desired.status.conditions.clone();
            sync_status(&*ctx.store, &mut fresh, &with).await?;
            hypervisor = fresh;
        }
    }
    let grace = ctx.options.plan.prepare.replace_unreachable_after;
    let lost = hypervisor.lost(now, grace);
    if lost.is_none() {
        lock(&ctx.lost).remove(name);
    }
    if previous.is_some_and(|p| p != reachable) || lost.is_some() {
        // Back, gone, or lost for good: the clusters placed on it reconcile now rather than
        // at their next requeue (a ready cluster's is minutes away).
        let components = ctx.store.list::<Component>(None).await?;
        let clusters = clusters_using_hypervisor(&components, name);
        let newly = match &lost {
            Some(why) => announce_lost(ctx, key, &hypervisor, why, &clusters).await,
            None => false,
        };
        if lost.is_none() || newly {
            for cluster in clusters {
                ctx.wake_cluster(cluster);
            }
        }
    }
    if let Some(event) = event {
        ctx.publish(
            Kind::Hypervisor,
            key,
            hypervisor.metadata.uid.as_deref(),
            event,
        )
        .await;
    }
    let swept = lock(&ctx.swept).contains(name);
    if let Ok(runtime) = probe
        && !swept
    {
        // Exclusive: no engine run of this process is in flight, so every throwaway pod
        // found is a leftover of a process that died mid-run.
        let removed = {
            let _no_runs = ctx.engine_runs.write().await;
            oi_engine::remove_throwaway_pods(runtime.as_ref()).await
        };
        if removed > 0 {
            tracing::info!(
                hypervisor = name,
                removed,
                "removed leftover throwaway pods"
            );
        }
        lock(&ctx.swept).insert(name.to_string());
    }
    // Unreachable with a grace period running: looked at again when it ends, if sooner.
    let mut next = ctx.options.hypervisor_probe_interval;
    if let (false, Some(grace), Some(since)) = (
        reachable,
        grace,
        oi_api::common::find_condition(&hypervisor.status.conditions, condition_types::REACHABLE)
            .and_then(|c| c.last_transition_time),
    ) {
        let left = since + grace - now;
        if left > time::Duration::ZERO {
            next = next.min(std::time::Duration::try_from(left).unwrap_or(next));
        }
    }
    Ok(Next::Done(Action::Requeue(next)))
}

/// A deleted hypervisor: its clusters woken (once) to replace what runs there; the manager's
/// finalizer removed once nothing holds it.
async fn removed<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    mut hypervisor: Hypervisor,
) -> Result<Next, ReconcileError> {
    let name = key.name.as_str();
    let components = ctx.store.list::<Component>(None).await?;
    let clusters = clusters_using_hypervisor(&components, name);
    if clusters.is_empty() && hypervisor.status.allocated_ports.is_empty() {
        if has_finalizer(&hypervisor) {
            remove_finalizer(&*ctx.store, &mut hypervisor).await?;
            tracing::info!(hypervisor = name, "removed: nothing is left on it");
        }
        forget(ctx, name);
        return Ok(Next::Done(Action::AwaitChange));
    }
    announce_lost(ctx, key, &hypervisor, &Lost::Removed, &clusters).await;
    for cluster in clusters {
        ctx.wake_cluster(cluster);
    }
    Ok(Next::Done(Action::Requeue(
        ctx.options.hypervisor_probe_interval,
    )))
}

/// Publishes, once per process, that hypervisor `key` is lost and why, naming the clusters
/// that replace what runs there. Returns whether it did (the loss is new).
async fn announce_lost<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    hypervisor: &Hypervisor,
    why: &Lost,
    clusters: &std::collections::BTreeSet<ObjectKey>,
) -> bool {
    let name = key.name.as_str();
    if !lock(&ctx.lost).insert(name.to_string()) {
        return false;
    }
    let names: Vec<String> = clusters.iter().map(ToString::to_string).collect();
    let message = format!(
        "hypervisor {name} is lost ({why}): what runs there is replaced elsewhere{}",
        if names.is_empty() {
            String::new()
        } else {
            format!(" (clusters {})", names.join(", "))
        }
    );
    tracing::warn!(hypervisor = name, "{message}");
    ctx.publish(
        Kind::Hypervisor,
        key,
        hypervisor.metadata.uid.as_deref(),
        Event::warning(event_reasons::HYPERVISOR_LOST, message),
    )
    .await;
    true
}

/// Forgets what this process kept of a hypervisor that is gone.
fn forget<S: Store, C: Connector, N: Network>(ctx: &Context<S, C, N>, name: &str) {
    ctx.metrics.remove_hypervisor(name);
    lock(&ctx.reachable).remove(name);
    lock(&ctx.swept).remove(name);
    lock(&ctx.lost).remove(name);
}
