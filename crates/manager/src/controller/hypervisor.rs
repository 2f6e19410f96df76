//! The Hypervisor controller: probes the CRI endpoint (connecting asks the runtime its
//! version), keeps the `hypervisor_reachable` metric, publishes transitions, and removes the
//! throwaway pods a killed manager left on the hypervisor once per process.

use oi_api::{Component, Hypervisor, Kind, ObjectKey};
use oi_engine::{Connector, Network};

use super::{
    Action, Context, Event, Next, ReconcileError, clusters_using_hypervisor, event_reasons, lock,
};
use crate::store::Store;

pub(super) async fn reconcile<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Next, ReconcileError> {
    let name = key.name.as_str();
    let Some(hypervisor) = ctx.store.get::<Hypervisor>(key).await? else {
        ctx.metrics.remove_hypervisor(name);
        lock(&ctx.reachable).remove(name);
        lock(&ctx.swept).remove(name);
        return Ok(Next::Done(Action::AwaitChange));
    };
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
    if previous.is_some_and(|p| p != reachable) {
        // Back or gone: the clusters placed on it reconcile now rather than at their next
        // requeue (a ready cluster's is minutes away).
        let components = ctx.store.list::<Component>(None).await?;
        for cluster in clusters_using_hypervisor(&components, name) {
            ctx.wake_cluster(cluster);
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
    Ok(Next::Done(Action::Requeue(
        ctx.options.hypervisor_probe_interval,
    )))
}
