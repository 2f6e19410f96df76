//! The SIPCluster controller: Airship SIP's hosts and support services, one SIPCluster at a
//! time (every SIPCluster waits for the one before it, so two never take the same host), in
//! `oi reconcile`'s run order ([`oi_planner::plan_run`], [`oi_engine::execute`],
//! [`oi_planner::record_run`]):
//!
//! ```text
//! SIPCluster key ─► (one at a time) finalizer ─► sub-world: the SIPCluster, every
//!   BareMetalHost and the Secrets they reference, every Hypervisor and Component, the
//!   Secrets its services read, its clusterRef Cluster (read, not run)
//!   ─► plan (Runs::SipClusters): hosts selected, services placed and rendered
//!   ─► relabelled hosts, port shares, status PKI written ─► execute ─► record
//!   ─► port shares, the clusterRef Cluster's trust when it changes, the SIPCluster's status
//!   (Ready condition), or, when it is being deleted, its services and our labels gone and
//!   the finalizer removed
//! ```
//!
//! A host update that conflicts fails the reconcile; what was written stays and the next run
//! (the error backoff) goes on from it, selection being idempotent. Host changes (a failure,
//! a new host, a removed one) reach every SIPCluster through the drivers' watches.

use std::time::Duration;

use oi_api::sip::SIP_FINALIZER;
use oi_api::{
    BareMetalHost, Cluster, Component, Hypervisor, Kind, ObjectKey, Resource, Secret, SipCluster,
    World,
};
use oi_engine::{Connector, Network};

use super::{Action, Context, Event, Next, ReconcileError, event_reasons, now};
use crate::store::Store;

/// Next look at a SIPCluster that is not ready (host watches wake it sooner).
pub const REQUEUE_NOT_READY: Duration = Duration::from_secs(30);

pub(super) async fn reconcile<S: Store, C: Connector, N: Network>(
    key: &ObjectKey,
    ctx: &Context<S, C, N>,
) -> Result<Next, ReconcileError> {
    let _one_at_a_time = ctx.sip_lock.lock().await;
    let store = &ctx.store;
    let Some(mut sip) = store.get::<SipCluster>(key).await? else {
        return Ok(Next::Done(Action::AwaitChange));
    };
    let ours = sip.metadata.finalizers.iter().any(|f| f == SIP_FINALIZER);
    if sip.metadata.is_being_deleted() && !ours {
        return Ok(Next::Done(Action::AwaitChange));
    }
    if !ours {
        sip.metadata.finalizers.push(SIP_FINALIZER.to_string());
        sip = store.update(&sip).await?;
    }

    let mut world = World::default();
    for host in store.list::<BareMetalHost>(None).await? {
        let mut refs = Vec::new();
        refs.extend(host.network_data_secret());
        if !host.spec.bmc.credentials_name.is_empty() {
            refs.push(host.bmc_credentials_secret());
        }
        for secret in refs {
            if !world.secrets.contains_key(&secret)
                && let Some(s) = store.get::<Secret>(&secret).await?
            {
                world.secrets.insert(secret, s);
            }
        }
        world.bare_metal_hosts.insert(host.key(), host);
    }
    world.sip_clusters.insert(key.clone(), sip.clone());
    let Some(run) = run(ctx, key, &sip, world).await? else {
        return Ok(Next::Done(Action::AwaitChange));
    };
    let Run {
        report,
        world,
        services,
    } = run;
    let uid = sip.metadata.uid.clone();
    if report.deleted {
        if let Some(why) = services.as_ref().and_then(|s| s.teardown_error.clone()) {
            // Its services are not all gone: the finalizer stays and the next try goes on.
            return Err(ReconcileError::SipTeardown {
                sip_cluster: key.clone(),
                message: why,
            });
        }
        sip.metadata.finalizers.retain(|f| f != SIP_FINALIZER);
        store.update(&sip).await?;
        tracing::info!(sipcluster = %key, hosts = report.relabelled.len(), "deleted, hosts let go");
        ctx.publish(
            Kind::SipCluster,
            key,
            uid.as_deref(),
            Event::normal(
                event_reasons::SIP_CLUSTER_DELETED,
                format!("{} host(s) let go", report.relabelled.len()),
            ),
        )
        .await;
        return Ok(Next::Done(Action::AwaitChange));
    }
    // With services, their run decides readiness ([`oi_planner::sip::services::record_services`]);
    // an unschedulable one that keeps running its services stays unschedulable.
    let (ready, reason, message) = match services.as_ref().and_then(|s| s.outcome.as_ref()) {
        _ if !report.selection.shortfalls.is_empty() => {
            (report.ready, report.reason.clone(), report.message.clone())
        }
        Some(o) if o.ready => (
            true,
            oi_api::sip::REASON_RECONCILIATION_SUCCEEDED.to_string(),
            o.message.clone(),
        ),
        Some(o) => (
            false,
            oi_api::sip::REASON_INFRA_SERVICE_FAILURE.to_string(),
            o.message.clone(),
        ),
        None => (report.ready, report.reason.clone(), report.message.clone()),
    };
    if !report.selection.released.is_empty()
        || !report.selection.promoted.is_empty()
        || !report.selection.chosen.is_empty()
    {
        // The summary names the hosts let go, promoted and chosen, and the holdings.
        ctx.publish(
            Kind::SipCluster,
            key,
            uid.as_deref(),
            Event::normal(event_reasons::SIP_HOSTS_CHANGED, report.summary()),
        )
        .await;
    }
    let updated = world.sip_clusters.get(key).cloned();
    if let Some(updated) = updated
        && updated.status != sip.status
    {
        let was_ready = sip
            .condition(oi_api::sip::CONDITION_READY)
            .map(|c| (c.status, c.reason.clone()));
        store.update_status(&updated).await?;
        let now_ready = updated
            .condition(oi_api::sip::CONDITION_READY)
            .map(|c| (c.status, c.reason.clone()));
        if was_ready != now_ready {
            let event = if ready {
                Event::normal(event_reasons::SIP_CLUSTER_READY, message.clone())
            } else {
                Event::warning(
                    event_reasons::SIP_CLUSTER_NOT_READY,
                    format!("{reason}: {message}"),
                )
            };
            ctx.publish(Kind::SipCluster, key, uid.as_deref(), event)
                .await;
        }
    }
    Ok(Next::Done(if ready {
        Action::Requeue(ctx.options.requeue_ready)
    } else {
        Action::Requeue(REQUEUE_NOT_READY)
    }))
}

/// What running a SIPCluster's services gave: their outcome (none when it is deleted), and
/// why tearing down what left failed.
struct ServicesRun {
    outcome: Option<oi_planner::sip::services::ServicesOutcome>,
    teardown_error: Option<String>,
}

/// What one run of a SIPCluster gave: its host selection, the world as recorded, and its
/// services' run (`None` when it has none to run: its hosts could not be selected and it
/// holds no port).
struct Run {
    report: oi_planner::sip::SipReport,
    world: World,
    services: Option<ServicesRun>,
}

/// Runs the SIPCluster `key` in `oi reconcile`'s run order ([`oi_planner::plan_run`] with
/// [`oi_planner::Runs::SipClusters`]: the clusters are read, their own controller runs them;
/// [`oi_engine::execute`]; [`oi_planner::record_run`]) over `world` (its hosts and their
/// Secrets) with every Hypervisor and Component (capacity) and the Secrets and `clusterRef`
/// Cluster its services read. Under the write lock: the plan, then what it changed (the
/// relabelled hosts, each hypervisor status as the SIPCluster's share only
/// (`SIPCluster/<name>`, [`super::writeback::write_share`]), the PKI and credentials it keeps
/// in its status, written before anything runs so that a failed run makes no new
/// certificates next time). The engine runs outside it; then, under it again, the record:
/// the shares, and the `clusterRef` Cluster's trust when the plan changes it (its own
/// controller then configures its API servers). `None` when the SIPCluster left the store.
async fn run<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    sip: &SipCluster,
    mut world: World,
) -> Result<Option<Run>, ReconcileError> {
    let store = &*ctx.store;
    let owner = ObjectKey::new(
        key.namespace.clone(),
        oi_planner::sip::services::owner_cluster(&key.name),
    );
    let (plan, placed, report) = {
        let _lock = ctx.hypervisor_locks.all().await;
        for h in store.list::<Hypervisor>(None).await? {
            world.hypervisors.insert(h.key(), h);
        }
        // What the hypervisors hold counts against their capacity: every placed component.
        for c in store.list::<Component>(None).await? {
            world.components.insert(c.key(), c);
        }
        // The Secrets the services read: the jump hosts' node keys, the OIDC providers' users.
        let services = &sip.spec.services;
        let names = services
            .jump_host
            .iter()
            .map(|j| &j.node_ssh_private_keys)
            .chain(services.oidc_provider.iter().map(|o| &o.users_secret));
        for name in names {
            let secret = ObjectKey::new(key.namespace.clone(), name.clone());
            if !world.secrets.contains_key(&secret)
                && let Some(s) = store.get::<Secret>(&secret).await?
            {
                world.secrets.insert(secret, s);
            }
        }
        if let Some(r) = &sip.spec.cluster_ref {
            let cluster = ObjectKey::new(key.namespace.clone(), r.name.clone());
            if let Some(c) = store.get::<Cluster>(&cluster).await? {
                world.clusters.insert(cluster, c);
            }
        }
        let before = world.hypervisors.clone();
        let mut plan = oi_planner::plan_run(
            world,
            oi_planner::Runs::SipClusters,
            now(),
            &ctx.options.plan,
        );
        let Some(report) = plan.sip.reports.iter().find(|r| r.key == *key).cloned() else {
            return Ok(None);
        };
        for report in &plan.sip.reports {
            for host in &report.relabelled {
                if let Some(h) = plan.world.bare_metal_hosts.get(host) {
                    let written = store.update(h).await?;
                    plan.world.bare_metal_hosts.insert(host.clone(), written);
                }
            }
        }
        write_shares(store, &before, &plan.world, &owner).await?;
        if !report.deleted
            && let Some(updated) = plan.world.sip_clusters.get(key)
            && (updated.status.oidc_providers != sip.status.oidc_providers
                || updated.status.jump_hosts != sip.status.jump_hosts)
        {
            let written = store.update_status(updated).await?;
            plan.world.sip_clusters.insert(key.clone(), written);
        }
        let placed = plan.world.hypervisors.clone();
        (plan, placed, report)
    };
    let progress = |e: &oi_engine::Event| {
        tracing::info!(
            sipcluster = %key,
            hypervisor = e.hypervisor.as_deref().unwrap_or(""),
            service = e.component.as_deref().unwrap_or(""),
            "{}",
            e.message
        );
    };
    let has_services = !plan.sip.services.is_empty();
    let executed = if !has_services {
        None
    } else {
        let _run = ctx.engine_runs.read().await;
        Some(
            oi_engine::execute(
                &plan,
                &ctx.execute_options(),
                &ctx.connector,
                &ctx.network,
                &progress,
            )
            .await,
        )
    };
    let _lock = ctx.hypervisor_locks.all().await;
    let results = executed.map(|e| e.services).unwrap_or_default();
    let clusters_before = plan.world.clusters.clone();
    let recorded = oi_planner::record_run(
        plan.world,
        &plan.sip,
        &std::collections::BTreeMap::new(),
        &results,
        now(),
    );
    let mut world = recorded.world;
    write_shares(store, &placed, &world, &owner).await?;
    for t in &plan.sip.trust {
        if let (Some(before), Some(after)) = (
            clusters_before.get(&t.cluster),
            world.clusters.get(&t.cluster),
        ) && after.spec.api_server.oidc != before.spec.api_server.oidc
        {
            let written = store.update(after).await?;
            world.clusters.insert(t.cluster.clone(), written);
        }
    }
    let services = has_services.then(|| ServicesRun {
        outcome: recorded.services.into_iter().find(|o| o.key == *key),
        teardown_error: results
            .into_iter()
            .find(|r| r.key == *key)
            .and_then(|r| r.sweep_error)
            .map(|f| f.to_string()),
    });
    Ok(Some(Run {
        report,
        world,
        services,
    }))
}

/// Writes the SIPCluster's share (`owner`) of every hypervisor status that changed from
/// `before` to `after`.
async fn write_shares<S: Store>(
    store: &S,
    before: &std::collections::BTreeMap<ObjectKey, Hypervisor>,
    after: &World,
    owner: &ObjectKey,
) -> Result<(), ReconcileError> {
    for (hk, h) in &after.hypervisors {
        if let Some(b) = before.get(hk) {
            super::writeback::write_share(store, hk, &b.status, &h.status, owner).await?;
        }
    }
    Ok(())
}
