//! A cluster's PKI set up (missing CAs and key pairs made), and its objects validated and
//! verified.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Generates the CAs and key pairs the cluster lacks; existing ones are kept.
pub(super) fn init_pki(
    key: &ObjectKey,
    cluster: &mut Cluster,
    now: OffsetDateTime,
    options: &PrepareOptions,
) -> Result<()> {
    let name = cluster.metadata.name.clone();
    let algorithm = options.key_algorithm;
    let spec = &mut cluster.spec;
    let slots: [(CaKind, &mut Option<Certificate>); 8] = [
        (CaKind::ApiServer, &mut spec.api_server.ca),
        (
            CaKind::ApiServerClient,
            &mut spec.certificate_authorities.api_server_client,
        ),
        (
            CaKind::CertificateSigner,
            &mut spec.certificate_authorities.certificate_signer,
        ),
        (CaKind::Kubelet, &mut spec.certificate_authorities.kubelet),
        (
            CaKind::KubeletClient,
            &mut spec.certificate_authorities.kubelet_client,
        ),
        (CaKind::EtcdServer, &mut spec.etcd_server.ca),
        (
            CaKind::EtcdClient,
            &mut spec.certificate_authorities.etcd_client,
        ),
        (
            CaKind::EtcdPeer,
            &mut spec.certificate_authorities.etcd_peer,
        ),
    ];
    for (kind, slot) in slots {
        if slot.as_ref().is_some_and(|c| !c.certificate.is_empty()) {
            continue;
        }
        let ca = CertificateAuthority::generate(
            &format!("{name}-{}", kind.common_name_suffix()),
            algorithm,
            now,
            options.ca_lifetime,
        )
        .map_err(|e| pki_error(key, kind.manifest_field(), &e))?;
        *slot = Some(Certificate {
            certificate: ca.certificate_pem().to_string(),
            private_key: ca.private_key_pem().to_string(),
        });
    }
    let key_pairs: [(&'static str, KeyAlgorithm, &mut Option<KeyPair>); 2] = [
        (
            oi_pki::SERVICE_ACCOUNT_FIELD,
            algorithm,
            &mut spec.api_server.service_account,
        ),
        (
            oi_pki::JOIN_KEY_FIELD,
            join_key_algorithm(algorithm),
            &mut spec.join_key,
        ),
    ];
    for (field, algorithm, slot) in key_pairs {
        if slot.as_ref().is_some_and(|k| !k.private_key.is_empty()) {
            continue;
        }
        let pair = KeyPairPem::generate(algorithm).map_err(|e| pki_error(key, field, &e))?;
        *slot = Some(KeyPair {
            public_key: pair.public_key_pem,
            private_key: pair.private_key_pem,
        });
    }
    // The VPN endpoint's WireGuard keys, when the VPN is on (a given private key is kept and
    // its public key derived).
    let vpn = &mut spec.vpn;
    if vpn.enabled {
        if vpn.private_key.is_empty() {
            (vpn.private_key, vpn.public_key) = oi_pki::generate_wireguard_keys();
        } else if vpn.public_key.is_empty() {
            vpn.public_key = oi_pki::wireguard_public_key(&vpn.private_key)
                .map_err(|e| pki_error(key, "spec.vpn.privateKey", &e))?;
        }
    }
    Ok(())
}

pub(super) fn pki_error(key: &ObjectKey, field: &'static str, e: &oi_pki::Error) -> Error {
    Error::Pki {
        cluster: key.clone(),
        field,
        message: e.to_string(),
    }
}

/// Validates a cluster and returns it with its missing PKI generated.
pub(super) fn validate_and_init_pki(
    key: &ObjectKey,
    cluster: &Cluster,
    now: OffsetDateTime,
    options: &PrepareOptions,
) -> Result<Cluster> {
    let mut errors = validate_cluster(cluster);
    errors.extend(verify_cluster(cluster, now));
    if !errors.is_empty() {
        return Err(Error::Invalid {
            object: key.clone(),
            errors,
        });
    }
    // A version change is an upgrade from what runs: one minor at a time, never down.
    let running = &cluster.status.kubernetes_version;
    if !running.is_empty()
        && let Err(refusal) =
            oi_api::versions::check_upgrade(running, &cluster.spec.kubernetes_version)
    {
        return Err(Error::UpgradeRefused {
            cluster: key.clone(),
            from: running.clone(),
            to: cluster.spec.kubernetes_version.clone(),
            reason: refusal.to_string(),
        });
    }
    let mut cluster = cluster.clone();
    init_pki(key, &mut cluster, now, options)?;
    Ok(cluster)
}

/// Validates and verifies a cluster's existing components against it (its PKI included):
/// the first invalid one fails the cluster.
pub(super) fn validate_components(cluster: &Cluster, components: &[&Component]) -> Result<()> {
    for c in components {
        let mut errors = validate_component(c);
        errors.extend(verify_component(c, Some(cluster)));
        if !errors.is_empty() {
            return Err(Error::Invalid {
                object: c.key(),
                errors,
            });
        }
    }
    Ok(())
}
