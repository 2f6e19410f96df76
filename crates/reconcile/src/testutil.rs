//! Helpers shared by this crate's tests.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::sync::OnceLock;

use oi_api::{Certificate, Cluster, KeyPair, World};
use oi_pki::{CertificateAuthority, ClusterPki, KeyAlgorithm, KeyPairPem};
use time::{Duration, macros::datetime};

/// One real CA set shared by every test cluster, minted once: tests that are not about PKI
/// generation should not pay for it. Leaf certificates are still issued from it for real.
pub fn shared_pki() -> &'static ClusterPki {
    static PKI: OnceLock<ClusterPki> = OnceLock::new();
    PKI.get_or_init(|| {
        ClusterPki::generate(
            "test",
            KeyAlgorithm::EcdsaP256,
            datetime!(2026-11-01 00:00:00 UTC),
            Duration::days(3650),
        )
        .unwrap()
    })
}

/// The cluster with every CA and key pair of [`shared_pki`].
pub fn with_pki(mut c: Cluster) -> Cluster {
    let pki = shared_pki();
    let cert = |ca: &CertificateAuthority| {
        Some(Certificate {
            certificate: ca.certificate_pem().to_string(),
            private_key: ca.private_key_pem().to_string(),
        })
    };
    let pair = |k: &KeyPairPem| {
        Some(KeyPair {
            public_key: k.public_key_pem.clone(),
            private_key: k.private_key_pem.clone(),
        })
    };
    let s = &mut c.spec;
    s.api_server.ca = cert(&pki.api_server);
    s.etcd_server.ca = cert(&pki.etcd_server);
    s.api_server.service_account = pair(&pki.service_account);
    s.join_key = pair(&pki.join_key);
    let cas = &mut s.certificate_authorities;
    cas.api_server_client = cert(&pki.api_server_client);
    cas.certificate_signer = cert(&pki.certificate_signer);
    cas.kubelet = cert(&pki.kubelet);
    cas.kubelet_client = cert(&pki.kubelet_client);
    cas.etcd_client = cert(&pki.etcd_client);
    cas.etcd_peer = cert(&pki.etcd_peer);
    c
}

/// The world without the leaf certificates preparation issues (fresh keys each time).
pub fn without_issued(world: &World) -> World {
    let mut w = world.clone();
    for c in w.components.values_mut() {
        c.status.server_certificates.clear();
        c.status.client_certificates.clear();
    }
    for c in w.clusters.values_mut() {
        c.status.client_certificates.clear();
    }
    w
}
