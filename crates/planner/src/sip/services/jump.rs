//! The jump host's kubeconfig for the `clusterRef` cluster, when it is one of ours: a client
//! certificate of its own (`oneinfra:sipcluster:<namespace>:<name>:<service>`, in
//! `system:masters`, as upstream SIP hands the jump host the cluster's admin kubeconfig),
//! issued by the cluster's API server client CA and kept in the SIPCluster's
//! `status.jumpHosts`; the kubeconfig names the cluster's endpoint and trusts its API server
//! CA (both, during a CA rotation).

use std::collections::BTreeSet;

use oi_api::common::Certificate;
use oi_api::sip::JumpHostStatus;
use oi_api::{ObjectKey, SipCluster, World};
use oi_pki::{CaKind, LeafSpec, SYSTEM_MASTERS};
use time::OffsetDateTime;

use super::oidc::{RENEW_BEFORE, SERVING_LIFETIME};
use super::own_cluster;

/// The user the jump host's kubeconfig authenticates as.
pub fn user(key: &ObjectKey, service: &str) -> String {
    format!(
        "oneinfra:sipcluster:{}:{}:{service}",
        key.namespace, key.name
    )
}

/// Keeps the client certificates of SIPCluster `key`'s jump hosts `services` in its status
/// (made, or renewed when expiring or issued by another CA); drops the others. Without a
/// cluster of ours, or before its client CA exists, there is none.
pub(super) fn keep_credentials(
    world: &mut World,
    key: &ObjectKey,
    services: &BTreeSet<String>,
    now: OffsetDateTime,
) -> Result<(), String> {
    let Some(sip) = world.sip_clusters.get(key) else {
        return Ok(());
    };
    let ca = own_cluster(world, sip).and_then(|(_, c)| {
        c.spec
            .certificate_authorities
            .api_server_client
            .clone()
            .filter(|ca| !ca.certificate.is_empty())
    });
    let Some(sip) = world.sip_clusters.get_mut(key) else {
        return Ok(());
    };
    let Some(ca) = ca else {
        sip.status.jump_hosts.clear();
        return Ok(());
    };
    sip.status
        .jump_hosts
        .retain(|j| services.contains(&j.service));
    let loaded = CaKind::ApiServerClient
        .load(&ca.certificate, &ca.private_key)
        .map_err(|e| format!("the cluster's API server client CA: {e}"))?;
    for service in services {
        let current = sip
            .status
            .jump_hosts
            .iter()
            .position(|j| &j.service == service);
        let keep = current.is_some_and(|i| {
            let c = &sip.status.jump_hosts[i].client_certificate;
            !c.private_key.is_empty()
                && matches!(
                    oi_pki::needs_renewal(
                        &c.certificate,
                        &ca.certificate,
                        &[] as &[&str],
                        now,
                        RENEW_BEFORE
                    ),
                    Ok(None)
                )
        });
        if keep {
            continue;
        }
        let spec = LeafSpec::client(
            CaKind::ApiServerClient,
            &user(key, service),
            &[SYSTEM_MASTERS],
        );
        let pem = loaded
            .issue(&spec, now, SERVING_LIFETIME)
            .map_err(|e| format!("{service}: its client certificate: {e}"))?;
        let entry = JumpHostStatus {
            service: service.clone(),
            client_certificate: Certificate {
                certificate: pem.certificate_pem,
                private_key: pem.private_key_pem,
            },
        };
        match current {
            Some(i) => sip.status.jump_hosts[i] = entry,
            None => sip.status.jump_hosts.push(entry),
        }
    }
    sip.status
        .jump_hosts
        .sort_by(|a, b| a.service.cmp(&b.service));
    Ok(())
}

/// What the jump host `service` gets: `Ok(Some(kubeconfig))` with a cluster of ours that has
/// an endpoint, `Ok(None)` without a cluster of ours, `Err(why)` while it is not ready for one.
pub(super) fn kubeconfig(
    world: &World,
    sip: &SipCluster,
    service: &str,
) -> Result<Option<String>, String> {
    let Some((cluster_key, cluster)) = own_cluster(world, sip) else {
        return Ok(None);
    };
    let server = &cluster.status.api_server_endpoint;
    let credential = sip.status.jump_hosts.iter().find(|j| j.service == service);
    let trust = crate::rotation::trust_bundle(cluster, CaKind::ApiServer);
    let (Some(credential), Some(trust), false) = (credential, trust, server.is_empty()) else {
        return Err(format!(
            "{service}: the kubeconfig of cluster {cluster_key} waits for its PKI and API server endpoint"
        ));
    };
    let key = ObjectKey::new(
        sip.metadata.namespace_or_default(),
        sip.metadata.name.clone(),
    );
    oi_pki::kubeconfig(
        &cluster_key.name,
        server,
        &trust,
        &user(&key, service),
        &credential.client_certificate.certificate,
        &credential.client_certificate.private_key,
    )
    .map(Some)
    .map_err(|e| format!("{service}: its kubeconfig: {e}"))
}
