//! The Component controller: the components of a live cluster are the Cluster controller's
//! (drivers map a component's change to its cluster); here, orphans (their Cluster is gone)
//! are torn down through the engine's own deletion path, and a live cluster's component
//! someone else created gets the manager's finalizer.

use oi_api::{
    Cluster, ClusterSpec, Component, Hypervisor, Kind, ObjectKey, ObjectMeta, Resource as _, World,
};
use oi_engine::{Connector, Network};

use super::cluster::execute_plan;
use super::writeback::{has_finalizer, release_component, write_share};
use super::{
    Action, Context, Event, FINALIZER, Next, ReconcileError, cluster_of_component, event_reasons,
    now,
};
use crate::store::Store;

pub(super) async fn reconcile<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Next, ReconcileError> {
    let store = &*ctx.store;
    // The usual pass needs no request: the watch cache holds the component with the
    // manager's finalizer (or being deleted) and its cluster. Anything else is read from the
    // store before acting on it.
    let idle = store.cached::<Component, _>(key, |c| {
        (has_finalizer(c) || c.metadata.is_being_deleted()).then(|| cluster_of_component(c))
    });
    if let Some(Some(cluster)) = idle
        && store.cached::<Cluster, _>(&cluster, |_| ()).is_some()
    {
        return Ok(Next::Done(Action::AwaitChange));
    }
    let Some(mut component) = store.get::<Component>(key).await? else {
        return Ok(Next::Done(Action::AwaitChange));
    };
    let cluster = cluster_of_component(&component);
    if store.get::<Cluster>(&cluster).await?.is_some() {
        if !has_finalizer(&component) && !component.metadata.is_being_deleted() {
            component.metadata.finalizers.push(FINALIZER.to_string());
            store.update(&component).await?;
        }
        return Ok(Next::Done(Action::AwaitChange));
    }
    tear_down_orphans(ctx, &cluster).await
}

/// Tears down every component of `cluster`, which is not in the store: the engine deletes a
/// synthetic Cluster of that key marked for deletion (every pod and directory of the
/// cluster on every hypervisor it used, then its ports), then the components are released.
async fn tear_down_orphans<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    cluster: &ObjectKey,
) -> Result<Next, ReconcileError> {
    let store = &*ctx.store;
    let now = now();
    let mut world = World::default();
    for h in store.list::<Hypervisor>(None).await? {
        world.hypervisors.insert(h.key(), h);
    }
    for c in store.list::<Component>(Some(&cluster.namespace)).await? {
        if c.belongs_to(cluster) {
            world.components.insert(c.key(), c);
        }
    }
    let mut meta = ObjectMeta::namespaced(cluster.namespace.clone(), cluster.name.clone());
    meta.deletion_timestamp = Some(now);
    let synthetic = Cluster::new(meta, ClusterSpec::default());
    world.clusters.insert(cluster.clone(), synthetic);
    tracing::info!(
        cluster = %cluster,
        components = world.components.len(),
        "tearing down the components of a cluster that is gone"
    );
    let plan = oi_planner::plan(world.clone(), now, &ctx.options.plan);
    let executed = execute_plan(ctx, &plan).await;
    let outcome = executed.clusters.get(cluster).map(|r| &r.outcome);
    if !outcome.is_some_and(|o| o.deleted) {
        let (reason, message) = outcome
            .map_or((oi_planner::Reason::DeleteFailed, String::new()), |o| {
                (o.reason, o.message.clone())
            });
        return Err(ReconcileError::Teardown {
            cluster: cluster.clone(),
            reason,
            message,
        });
    }
    let after = oi_planner::record(plan.world, &executed.clusters, now);
    let _lock = ctx.hypervisor_locks.all().await;
    for (hk, h) in &after.hypervisors {
        if let Some(before) = world.hypervisors.get(hk) {
            write_share(store, hk, &before.status, &h.status, cluster).await?;
        }
    }
    for (ck, c) in &world.components {
        if release_component(store, ck).await? {
            ctx.publish(
                Kind::Component,
                ck,
                c.metadata.uid.as_deref(),
                Event::normal(
                    event_reasons::COMPONENT_DELETED,
                    format!(
                        "{} torn down on hypervisor {} and removed: its cluster {} is gone",
                        ck.name,
                        c.spec.hypervisor.as_deref().unwrap_or("none"),
                        cluster.name
                    ),
                ),
            )
            .await;
        }
    }
    Ok(Next::Done(Action::AwaitChange))
}
