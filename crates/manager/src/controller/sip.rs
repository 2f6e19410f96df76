//! The SIPCluster controller: Airship SIP's host selection over the management cluster's
//! BareMetalHosts, one SIPCluster at a time (every SIPCluster waits for the one before it,
//! so two never take the same host), with `oi reconcile`'s function (`oi_planner::sip`):
//!
//! ```text
//! SIPCluster key ─► (one at a time) finalizer ─► sub-world: the SIPCluster, every
//!   BareMetalHost, the Secrets they reference ─► oi_planner::sip::select_hosts
//!   ─► every relabelled host updated ─► the SIPCluster's status (Ready condition), or, when
//!   it is being deleted, our labels off its hosts and the finalizer removed
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
    let reports = oi_planner::sip::select_hosts(&mut world, now());
    let Some(report) = reports.into_iter().find(|r| r.key == *key) else {
        return Ok(Next::Done(Action::AwaitChange));
    };
    for host in &report.relabelled {
        if let Some(h) = world.bare_metal_hosts.get(host) {
            store.update(h).await?;
        }
    }
    let uid = sip.metadata.uid.clone();
    let services = run_services(ctx, key, &sip, &mut world, &report).await?;
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

/// Runs the services of the SIPCluster `key` as `oi reconcile` does
/// ([`oi_planner::sip::services`]): placement and ports under the write lock, the engine
/// run outside it, the record under it again; each hypervisor status written as the
/// SIPCluster's share only (`SIPCluster/<name>`, [`super::writeback::write_share`]).
/// `None` when its hosts could not be selected (its services are left as they are).
async fn run_services<S: Store, C: Connector, N: Network>(
    ctx: &Context<S, C, N>,
    key: &ObjectKey,
    sip: &SipCluster,
    world: &mut World,
    report: &oi_planner::sip::SipReport,
) -> Result<Option<ServicesRun>, ReconcileError> {
    use oi_planner::sip::services::{owner_cluster, plan_services, record_services};
    let store = &*ctx.store;
    let reports = std::slice::from_ref(report);
    let owner = ObjectKey::new(key.namespace.clone(), owner_cluster(&key.name));
    let (plans, placed) = {
        let _lock = ctx.write_lock.lock().await;
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
        let mut cluster_before = None;
        if let Some(r) = &sip.spec.cluster_ref {
            let cluster = ObjectKey::new(key.namespace.clone(), r.name.clone());
            if let Some(c) = store.get::<Cluster>(&cluster).await? {
                cluster_before = Some(c.clone());
                world.clusters.insert(cluster, c);
            }
        }
        let before = world.hypervisors.clone();
        let plans = plan_services(world, reports, &ctx.options.plan, now());
        write_shares(store, &before, world, &owner).await?;
        // What the planner keeps in the status (an OIDC provider's PKI, the jump hosts'
        // credentials) is written before anything runs (a failed run must not make new
        // certificates next time), and the clusterRef cluster told to trust the provider:
        // its own controller then configures its API servers.
        if !report.deleted
            && let Some(updated) = world.sip_clusters.get(key)
            && (updated.status.oidc_providers != sip.status.oidc_providers
                || updated.status.jump_hosts != sip.status.jump_hosts)
        {
            let written = store.update_status(updated).await?;
            world.sip_clusters.insert(key.clone(), written);
        }
        if let Some(before) = cluster_before
            && let Some(after) = world.clusters.get(&before.key())
            && after.spec.api_server.oidc != before.spec.api_server.oidc
        {
            let written = store.update(after).await?;
            world.clusters.insert(before.key(), written);
        }
        (plans, world.hypervisors.clone())
    };
    if plans.is_empty() {
        return Ok(None);
    }
    let progress = |e: &oi_engine::Event| {
        tracing::info!(
            sipcluster = %key,
            hypervisor = e.hypervisor.as_deref().unwrap_or(""),
            service = e.component.as_deref().unwrap_or(""),
            "{}",
            e.message
        );
    };
    let results = {
        let _run = ctx.engine_runs.read().await;
        oi_engine::sip::execute_services(
            world,
            &plans,
            &ctx.execute_options(),
            &ctx.connector,
            &progress,
        )
        .await
    };
    let _lock = ctx.write_lock.lock().await;
    let outcome = record_services(world, reports, &plans, &results, now())
        .into_iter()
        .next();
    write_shares(store, &placed, world, &owner).await?;
    Ok(Some(ServicesRun {
        outcome,
        teardown_error: results
            .into_iter()
            .next()
            .and_then(|r| r.sweep_error)
            .map(|f| f.to_string()),
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
