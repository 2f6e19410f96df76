//! The SIPCluster controller: Airship SIP's host selection over the management cluster's
//! BareMetalHosts, one SIPCluster at a time (every SIPCluster waits for the one before it,
//! so two never take the same host), with `oi reconcile`'s function (`oi_planner::sip`):
//!
//! ```text
//! SIPCluster key ─► (one at a time) finalizer ─► sub-world: the SIPCluster, every
//!   BareMetalHost, the Secrets they reference ─► oi_planner::sip::reconcile_sip
//!   ─► every relabelled host updated ─► the SIPCluster's status (Ready condition), or, when
//!   it is being deleted, our labels off its hosts and the finalizer removed
//! ```
//!
//! A host update that conflicts fails the reconcile; what was written stays and the next run
//! (the error backoff) goes on from it, selection being idempotent. Host changes (a failure,
//! a new host, a removed one) reach every SIPCluster through the drivers' watches.

use std::time::Duration;

use oi_api::sip::SIP_FINALIZER;
use oi_api::{BareMetalHost, Kind, ObjectKey, Resource, Secret, SipCluster, World};
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
    let reports = oi_planner::sip::reconcile_sip(&mut world, now());
    let Some(report) = reports.into_iter().find(|r| r.key == *key) else {
        return Ok(Next::Done(Action::AwaitChange));
    };
    for host in &report.relabelled {
        if let Some(h) = world.bare_metal_hosts.get(host) {
            store.update(h).await?;
        }
    }
    let uid = sip.metadata.uid.clone();
    if report.deleted {
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
            let event = if report.ready {
                Event::normal(event_reasons::SIP_CLUSTER_READY, report.message.clone())
            } else {
                Event::warning(
                    event_reasons::SIP_CLUSTER_NOT_READY,
                    format!("{}: {}", report.reason, report.message),
                )
            };
            ctx.publish(Kind::SipCluster, key, uid.as_deref(), event)
                .await;
        }
    }
    Ok(Next::Done(if report.ready {
        Action::Requeue(ctx.options.requeue_ready)
    } else {
        Action::Requeue(REQUEUE_NOT_READY)
    }))
}
