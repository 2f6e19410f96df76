//! The Cluster controller: plan (phase 1), execute (phase 2), record and write back
//! (phase 3); see the documentation of [`super`].

use std::collections::{BTreeMap, BTreeSet};

use oi_api::common::{ConditionStatus, condition_types, find_condition, set_condition};
use oi_api::{
    Cluster, Component, Hypervisor, Kind, ObjectKey, OwnerReference, Resource as _, World,
};
use oi_engine::{Connector, Executed, Network};
use oi_planner::{ClusterPlan, Plan, Reason};
use time::OffsetDateTime;

use super::writeback::{
    has_finalizer, release_component, remove_finalizer, sync_meta_spec, sync_status, write_share,
};
use super::{
    Action, Context, Event, FINALIZER, HypervisorGuard, Next, ReconcileError, event_reasons, now,
};
use crate::store::Store;

/// The objects of the sub-world as the store holds them now, after this reconcile's writes.
struct Stored {
    cluster: Cluster,
    components: BTreeMap<ObjectKey, Component>,
}

pub(super) async fn reconcile<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Next, ReconcileError> {
    let store = &*ctx.store;
    let Some(mut cluster) = store.get::<Cluster>(key).await? else {
        ctx.joins.stop(key);
        ctx.observe_certificates(key, None, None, now()).await;
        return Ok(Next::Done(Action::AwaitChange));
    };
    if !has_finalizer(&cluster) {
        if cluster.is_being_deleted() {
            // Not (or no longer) ours: its components are orphans, the Component
            // controller tears them down.
            return Ok(Next::Done(Action::AwaitChange));
        }
        cluster.metadata.finalizers.push(FINALIZER.to_string());
        cluster = store.update(&cluster).await?;
    }
    let now = now();
    // A CA rotation the annotation asks for starts here (its phase is the status's).
    super::rotation::begin(ctx, key, &mut cluster, now).await?;

    // Phase 1: plan, and write back what preparing derived, under the write lock.
    let (plan, mut stored) = {
        // First over the hypervisors the cluster is on and its components only, holding the
        // locks of those hypervisors only: enough when nothing is to be placed (the usual
        // resync), and other clusters' reconciles go on beside it. A pass that would place
        // anything (a new replica, a replacement) or fails is planned again over every
        // hypervisor and component, holding every hypervisor's lock: placement weighs them
        // all.
        let on: BTreeSet<String> = store
            .list_map::<Component, _>(Some(&key.namespace), |c| {
                (c.belongs_to(key))
                    .then(|| c.spec.hypervisor.clone())
                    .flatten()
            })
            .await?
            .into_iter()
            .flatten()
            .collect();
        let mut lock = if on.is_empty() {
            ctx.hypervisor_locks.all().await
        } else {
            ctx.hypervisor_locks.some(on).await
        };
        // An HA ingress's shared address and router ID are one cluster's (the planner
        // sees only this one): checked against every stored Cluster and Hypervisor.
        if let Some(ingress) = &cluster.spec.ingress
            && ingress.virtual_ip().is_some()
        {
            let clusters = store
                .list_map::<Cluster, _>(None, |c| {
                    if c.is_being_deleted() {
                        return None;
                    }
                    Some((c.key(), c.spec.ingress.clone()?))
                })
                .await?;
            let hypervisors = store
                .list_map::<Hypervisor, _>(None, |h| {
                    (h.metadata.name.clone(), h.spec.ip_address.clone())
                })
                .await?;
            let shared =
                oi_planner::SharedAddresses::new(clusters.into_iter().flatten(), hypervisors);
            if let Err(e) = shared.check(key, &cluster) {
                let mut stored = cluster.clone();
                prepare_failed(ctx, key, &mut stored, &e.to_string(), now).await?;
                return Ok(Next::Backoff);
            }
        }
        let (world, mut stored) = sub_world(store, key, &cluster, Scope::Own).await?;
        // What phase 1 writes back is compared with the hypervisors as read: only they are
        // kept of the world planned in.
        let hypervisors = world.hypervisors.clone();
        let narrow = oi_planner::plan(world, now, &ctx.options.plan);
        let settled = !stored.components.is_empty()
            && lock.covers(hypervisors.keys().map(|k| k.name.as_str()))
            && matches!(narrow.clusters.get(key), Some(ClusterPlan::Converge(_)))
            && narrow
                .world
                .components
                .values()
                .filter(|c| c.belongs_to(key))
                .all(|c| {
                    stored.components.get(&c.key()).is_some_and(|was| {
                        was.spec.hypervisor.is_some() && was.spec.hypervisor == c.spec.hypervisor
                    })
                });
        let (hypervisors, mut plan) = if settled {
            (hypervisors, narrow)
        } else {
            drop(narrow);
            if !matches!(lock, HypervisorGuard::All(_)) {
                drop(lock);
                lock = ctx.hypervisor_locks.all().await;
            }
            let (world, full) = sub_world(store, key, &cluster, Scope::All).await?;
            stored = full;
            (
                world.hypervisors.clone(),
                oi_planner::plan(world, now, &ctx.options.plan),
            )
        };
        if let Some(ClusterPlan::Unplannable(error)) = plan.clusters.get(key)
            && error.reason() == Reason::PrepareFailed
        {
            let message = error.to_string();
            prepare_failed(ctx, key, &mut stored.cluster, &message, now).await?;
            return Ok(Next::Backoff);
        }
        plan.world.components.retain(|_, c| c.belongs_to(key));
        let before = World {
            hypervisors,
            ..World::default()
        };
        write_prepared(ctx, key, &before, &plan.world, &mut stored).await?;
        drop(lock);
        replacing(ctx, key, &plan.world, &stored.cluster).await;
        (plan, stored)
    };

    // Phase 2: the engine executes the plan; no lock, but one cluster at a time replaces
    // what ran on lost hypervisors.
    let healing = match plan.clusters.get(key) {
        Some(ClusterPlan::Converge(c)) if c.retiring.iter().any(|r| r.lost.is_some()) => {
            Some(ctx.healing.lock().await)
        }
        _ => None,
    };
    let executed = Box::pin(execute_plan(ctx, &plan)).await;
    drop(healing);
    // A ready cluster's join requests are watched, so that they are answered as they come
    // (over a network whose addresses can be dialled: not a simulation's).
    match executed.clusters.get(key).map(|r| &r.outcome) {
        Some(o) if o.deleted => ctx.joins.stop(key),
        Some(o) if o.ready && ctx.network.dialable() => {
            if let Some(credentials) = join_credentials(&plan, key) {
                ctx.joins.ensure(key, credentials, ctx.waker());
            }
        }
        _ => {}
    }

    // Phase 3: record what the engine did, and write it back, under the write lock.
    let after = oi_planner::record(plan.world.clone(), &executed.clusters, now);
    let next = {
        let _lock = ctx
            .hypervisor_locks
            .some(
                plan.world
                    .hypervisors
                    .keys()
                    .map(|k| k.name.clone())
                    .collect(),
            )
            .await;
        write_report(ctx, key, &plan.world, &after, &executed, &mut stored).await?
    };
    // A ready cluster's scheduled snapshot, when due; no lock.
    let ready = executed.clusters.get(key).is_some_and(|r| r.outcome.ready);
    if !ready {
        return Ok(next);
    }
    let joined = executed
        .clusters
        .get(key)
        .and_then(|r| r.joined.clone())
        .unwrap_or_default();
    if let Some(soon) = Box::pin(super::rotation::advance(
        ctx,
        key,
        &mut stored.cluster,
        now,
        &joined,
    ))
    .await?
    {
        return Ok(match next {
            Next::Done(Action::Requeue(_)) => Next::Done(Action::Requeue(soon)),
            other => other,
        });
    }
    let again = Box::pin(super::snapshots::run(
        ctx,
        key,
        &plan,
        &mut stored.cluster,
        now,
    ))
    .await?;
    Ok(match (next, again) {
        (Next::Done(Action::Requeue(after)), Some(due)) => Next::Done(Action::Requeue(
            after.min(due.max(std::time::Duration::from_secs(1))),
        )),
        (next, _) => next,
    })
}

/// Publishes that what ran on lost hypervisors is being replaced, when preparing just
/// marked it (`prepared`'s `Healed` condition is `False` and the stored one did not say so).
async fn replacing<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    prepared: &World,
    stored: &Cluster,
) {
    let Some(h) = prepared
        .clusters
        .get(key)
        .and_then(|c| find_condition(&c.status.conditions, condition_types::HEALED))
        .filter(|h| h.status == ConditionStatus::False)
    else {
        return;
    };
    let said = find_condition(&stored.status.conditions, condition_types::HEALED)
        .is_some_and(|was| was.status == h.status && was.message == h.message);
    if said {
        return;
    }
    tracing::warn!(cluster = %key, "replacing: {}", h.message);
    ctx.publish(
        Kind::Cluster,
        key,
        stored.metadata.uid.as_deref(),
        Event::warning(event_reasons::REPLACING, h.message.clone()),
    )
    .await;
}

/// Where and as whom a ready cluster's join requests are watched: its endpoint and the
/// plan's short-lived identity towards its API.
fn join_credentials(plan: &Plan, key: &ObjectKey) -> Option<crate::joins::Credentials> {
    let ClusterPlan::Converge(c) = plan.clusters.get(key)? else {
        return None;
    };
    let in_cluster = c.in_cluster.as_ref().ok()?;
    let identity = in_cluster.client.as_ref().ok()?;
    Some(crate::joins::Credentials {
        endpoint: in_cluster.endpoint.clone(),
        ca_pem: identity.server_ca.clone(),
        certificate_pem: identity.certificate.clone(),
        key_pem: identity.private_key.clone(),
    })
}

/// Records a cluster that cannot be prepared in its `ReconcileSucceeded` condition, as the
/// engine does, and publishes a warning when the condition changed.
async fn prepare_failed<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    cluster: &mut Cluster,
    message: &str,
    now: OffsetDateTime,
) -> Result<(), ReconcileError> {
    tracing::warn!(cluster = %key, "cannot prepare: {message}");
    let mut desired = cluster.clone();
    let changed = set_condition(
        &mut desired.status.conditions,
        condition_types::RECONCILE_SUCCEEDED,
        ConditionStatus::False,
        Reason::PrepareFailed.as_str(),
        message,
        now,
    );
    if changed {
        sync_status(&*ctx.store, cluster, &desired).await?;
        ctx.publish(
            Kind::Cluster,
            key,
            cluster.metadata.uid.as_deref(),
            Event::warning(event_reasons::PREPARE_FAILED, message),
        )
        .await;
    }
    Ok(())
}

/// Phase 1 write-back, in dependency order: the cluster's spec (its PKI, before anything
/// uses it), its share of hypervisor statuses (ports), new components, changed components,
/// components prepare marked for deletion.
async fn write_prepared<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    before: &World,
    prepared: &World,
    stored: &mut Stored,
) -> Result<(), ReconcileError> {
    let store = &*ctx.store;
    if let Some(cluster) = prepared.clusters.get(key) {
        sync_meta_spec(store, &mut stored.cluster, cluster).await?;
    }
    for (hk, after) in &prepared.hypervisors {
        if let Some(h) = before.hypervisors.get(hk) {
            write_share(store, hk, &h.status, &after.status, key).await?;
        }
    }
    let owner = owner_reference(&stored.cluster);
    let mut created = BTreeSet::new();
    for (ck, component) in &prepared.components {
        if stored.components.contains_key(ck) {
            continue;
        }
        let mut new = component.clone();
        new.metadata.finalizers = vec![FINALIZER.to_string()];
        new.metadata.owner_references = vec![owner.clone()];
        new.metadata.deletion_timestamp = None;
        let mut new_component = store.create(&new).await?;
        sync_status(store, &mut new_component, &new).await?;
        tracing::info!(cluster = %key, component = %ck, "created component");
        ctx.publish(
            Kind::Component,
            ck,
            new_component.metadata.uid.as_deref(),
            Event::normal(
                event_reasons::COMPONENT_CREATED,
                format!(
                    "{} {} of cluster {} on hypervisor {}",
                    component.spec.role,
                    ck.name,
                    key.name,
                    component.spec.hypervisor.as_deref().unwrap_or("none")
                ),
            ),
        )
        .await;
        stored.components.insert(ck.clone(), new_component);
        created.insert(ck.clone());
    }
    for (ck, component) in &prepared.components {
        let Some(current) = stored.components.get_mut(ck) else {
            continue;
        };
        if created.contains(ck) {
            continue;
        }
        // A component someone else created is the manager's too, once it is the cluster's:
        // it keeps the finalizer until the engine tore it down.
        let mut desired = component.clone();
        if !current.metadata.is_being_deleted() && !has_finalizer(&desired) {
            desired.metadata.finalizers.push(FINALIZER.to_string());
        }
        sync_meta_spec(store, current, &desired).await?;
        sync_status(store, current, &desired).await?;
    }
    for (ck, component) in &prepared.components {
        let Some(current) = stored.components.get_mut(ck) else {
            continue;
        };
        if component.metadata.is_being_deleted() && !current.metadata.is_being_deleted() {
            store.delete::<Component>(ck).await?;
            tracing::info!(cluster = %key, component = %ck, "component marked for deletion");
            if let Some(now) = store.get::<Component>(ck).await? {
                *current = now;
            }
        }
    }
    Ok(())
}

/// Which objects a reconcile's sub-world holds besides the cluster's own components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Only the hypervisors its components are on.
    Own,
    /// Every hypervisor, and every other component as placement sees it.
    All,
}

/// The world one cluster is planned in: the cluster, its components, and the hypervisors
/// (and other components) `scope` says; with the components as stored.
async fn sub_world<S: Store>(
    store: &S,
    key: &ObjectKey,
    cluster: &Cluster,
    scope: Scope,
) -> Result<(World, Stored), ReconcileError> {
    // Every component counts for placement (the least loaded hypervisor wins, names are
    // taken); only this cluster's are planned, the others are left alone, so of those only
    // what placement reads is copied (see `placement_view`): a copy of every component per
    // reconcile made the manager quadratic in the number of clusters.
    let components: Vec<(bool, Component)> = store
        .list_map::<Component, _>(None, |c| {
            if c.belongs_to(key) {
                Some((true, c.clone()))
            } else if scope == Scope::All {
                Some((false, placement_view(c)))
            } else {
                None
            }
        })
        .await?
        .into_iter()
        .flatten()
        .collect();
    let on: BTreeSet<&str> = components
        .iter()
        .filter(|(own, _)| *own)
        .filter_map(|(_, c)| c.spec.hypervisor.as_deref())
        .collect();
    // Of each hypervisor, its spec, every port allocation and only this cluster's files.
    let hypervisors = store
        .list_map::<Hypervisor, _>(None, |h| {
            (scope == Scope::All || on.contains(h.metadata.name.as_str()))
                .then(|| share_view(h, key))
        })
        .await?;
    let mut world = World::default();
    for h in hypervisors.into_iter().flatten() {
        world.hypervisors.insert(h.key(), h);
    }
    let mut stored = Stored {
        cluster: cluster.clone(),
        components: BTreeMap::new(),
    };
    for (own, c) in components {
        if own {
            stored.components.insert(c.key(), c.clone());
        }
        world.components.insert(c.key(), c);
    }
    world.clusters.insert(key.clone(), cluster.clone());
    Ok((world, stored))
}

/// A hypervisor as one cluster's reconcile needs it: spec, metadata, every port allocation
/// (placement allocates among them) and this cluster's files only. The files of every
/// cluster on it are the bulk of its status, and the write-back merges this cluster's share
/// only ([`super::share::merge_share`]).
fn share_view(h: &Hypervisor, cluster: &ObjectKey) -> Hypervisor {
    let mut files = oi_api::hypervisor::NamespacedClusterFileMap::new();
    if let Some(mine) = h
        .status
        .files
        .get(&cluster.namespace)
        .and_then(|clusters| clusters.get(&cluster.name))
    {
        files
            .entry(cluster.namespace.clone())
            .or_default()
            .insert(cluster.name.clone(), mine.clone());
    }
    Hypervisor {
        api_version: h.api_version.clone(),
        kind: h.kind.clone(),
        metadata: h.metadata.clone(),
        spec: h.spec.clone(),
        status: oi_api::HypervisorStatus {
            allocated_ports: h.status.allocated_ports.clone(),
            freed_ports: h.status.freed_ports.clone(),
            files,
            // `Reachable`: whether the hypervisor is lost (see `oi_api::Hypervisor::lost`).
            conditions: h.status.conditions.clone(),
        },
    }
}

/// What placement reads of another cluster's component: its name, namespace and whether it
/// is being deleted, its spec (cluster, role, hypervisor). Not its status (certificates,
/// ports: a hypervisor's status holds its allocations), labels or annotations.
fn placement_view(c: &Component) -> Component {
    Component {
        api_version: c.api_version.clone(),
        kind: c.kind.clone(),
        metadata: oi_api::ObjectMeta {
            name: c.metadata.name.clone(),
            namespace: c.metadata.namespace.clone(),
            deletion_timestamp: c.metadata.deletion_timestamp,
            ..oi_api::ObjectMeta::default()
        },
        spec: c.spec.clone(),
        status: oi_api::ComponentStatus::default(),
    }
}

/// The owner reference of a cluster's components.
fn owner_reference(cluster: &Cluster) -> OwnerReference {
    OwnerReference {
        api_version: Kind::Cluster.api_version().to_string(),
        kind: Kind::Cluster.as_str().to_string(),
        name: cluster.metadata.name.clone(),
        uid: cluster.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Executes a plan, its progress going to the log (names only).
pub(super) async fn execute_plan<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    plan: &Plan,
) -> Executed {
    let progress = |e: &oi_engine::Event| {
        tracing::info!(
            cluster = %e.cluster,
            hypervisor = e.hypervisor.as_deref().unwrap_or(""),
            component = e.component.as_deref().unwrap_or(""),
            "{}",
            e.message
        );
    };
    let options = ctx.execute_options();
    let _run = ctx.engine_runs.read().await;
    oi_engine::execute(plan, &options, &ctx.connector, &ctx.network, &progress).await
}

/// Phase 3 write-back: the cluster's share of hypervisor statuses, components the engine
/// tore down, component and cluster status, and the end of a deleted cluster. `after` is
/// the prepared world with what the engine did recorded.
async fn write_report<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    prepared: &World,
    after: &World,
    executed: &Executed,
    stored: &mut Stored,
) -> Result<Next, ReconcileError> {
    let store = &*ctx.store;
    for (hk, h) in &after.hypervisors {
        if let Some(before) = prepared.hypervisors.get(hk) {
            write_share(store, hk, &before.status, &h.status, key).await?;
        }
    }
    let outcome = executed.clusters.get(key).map(|r| &r.outcome);
    let deleted = outcome.is_some_and(|o| o.deleted);
    for (ck, component) in &prepared.components {
        if after.components.contains_key(ck) {
            continue;
        }
        let uid = stored
            .components
            .remove(ck)
            .and_then(|c| c.metadata.uid)
            .or_else(|| component.metadata.uid.clone());
        release_component(store, ck).await?;
        if !deleted {
            tracing::info!(cluster = %key, component = %ck, "component torn down and removed");
            ctx.publish(
                Kind::Component,
                ck,
                uid.as_deref(),
                Event::normal(
                    event_reasons::COMPONENT_DELETED,
                    format!(
                        "{} torn down on hypervisor {} and removed",
                        ck.name,
                        component.spec.hypervisor.as_deref().unwrap_or("none")
                    ),
                ),
            )
            .await;
        }
    }
    if deleted {
        // Components created by someone else since phase 1 are torn down with the cluster
        // (the engine removed every pod of the cluster): release them too.
        for c in store.list::<Component>(Some(&key.namespace)).await? {
            if c.belongs_to(key) {
                release_component(store, &c.key()).await?;
            }
        }
        remove_finalizer(store, &mut stored.cluster).await?;
        ctx.observe_certificates(key, None, None, now()).await;
        tracing::info!(cluster = %key, "cluster torn down and removed");
        ctx.publish(
            Kind::Cluster,
            key,
            stored.cluster.metadata.uid.as_deref(),
            Event::normal(
                event_reasons::CLUSTER_DELETED,
                format!("cluster {} torn down and removed", key.name),
            ),
        )
        .await;
        return Ok(Next::Done(Action::AwaitChange));
    }
    for (ck, component) in &after.components {
        if let Some(current) = stored.components.get_mut(ck) {
            sync_status(store, current, component).await?;
        }
    }
    let Some(cluster) = after.clusters.get(key) else {
        return Ok(Next::Done(Action::AwaitChange));
    };
    let was = find_condition(
        &stored.cluster.status.conditions,
        condition_types::RECONCILE_SUCCEEDED,
    )
    .map(|c| c.status);
    let drained_was = find_condition(&stored.cluster.status.conditions, condition_types::DRAINED)
        .map(|c| (c.status, c.reason.clone(), c.message.clone()));
    let healed_was = find_condition(&stored.cluster.status.conditions, condition_types::HEALED)
        .map(|c| (c.status, c.message.clone()));
    sync_status(store, &mut stored.cluster, cluster).await?;
    let ready = outcome.is_some_and(|o| o.ready);
    // A drain's step: said once, as its condition changes; one in progress goes on soon.
    let drain = find_condition(&cluster.status.conditions, condition_types::DRAINED);
    let draining = drain.is_some_and(|d| {
        d.status == ConditionStatus::False && matches!(d.reason.as_str(), "Moving" | "Waiting")
    });
    if let Some(d) = drain
        && drained_was.as_ref().is_none_or(|(s, r, m)| {
            (*s, r.as_str(), m.as_str()) != (d.status, d.reason.as_str(), d.message.as_str())
        })
    {
        let event = if d.reason == "NoCapacity" {
            tracing::warn!(cluster = %key, "drain blocked: {}", d.message);
            Event::warning(event_reasons::DRAIN_BLOCKED, d.message.clone())
        } else {
            tracing::info!(cluster = %key, "drain: {}", d.message);
            Event::normal(event_reasons::DRAIN, d.message.clone())
        };
        ctx.publish(
            Kind::Cluster,
            key,
            stored.cluster.metadata.uid.as_deref(),
            event,
        )
        .await;
    }
    // What ran on lost hypervisors replaced (the replacement was said by phase 1).
    if let Some(h) = find_condition(&cluster.status.conditions, condition_types::HEALED)
        && h.status == ConditionStatus::True
        && healed_was
            .as_ref()
            .is_none_or(|(s, _)| *s != ConditionStatus::True)
    {
        tracing::info!(cluster = %key, "healed: {}", h.message);
        ctx.publish(
            Kind::Cluster,
            key,
            stored.cluster.metadata.uid.as_deref(),
            Event::normal(event_reasons::HEALED, h.message.clone()),
        )
        .await;
    }
    let uid = stored.cluster.metadata.uid.clone();
    ctx.observe_certificates(key, uid.as_deref(), Some(after), now())
        .await;
    if ready && was != Some(ConditionStatus::True) {
        tracing::info!(cluster = %key, "ready");
        ctx.publish(
            Kind::Cluster,
            key,
            uid.as_deref(),
            Event::normal(
                event_reasons::CLUSTER_READY,
                format!("cluster {} is ready", key.name),
            ),
        )
        .await;
    } else if !ready && was != Some(ConditionStatus::False) {
        let (reason, message) = outcome
            .map(|o| (o.reason.as_str(), o.message.as_str()))
            .unwrap_or_default();
        tracing::warn!(cluster = %key, reason, "not ready: {message}");
        ctx.publish(
            Kind::Cluster,
            key,
            uid.as_deref(),
            Event::warning(
                event_reasons::CLUSTER_NOT_READY,
                format!("cluster {} is not ready: {reason}: {message}", key.name),
            ),
        )
        .await;
    }
    Ok(Next::Done(Action::Requeue(if ready && !draining {
        ctx.options.requeue_ready
    } else {
        ctx.options.requeue_not_ready
    })))
}
