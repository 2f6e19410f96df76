//! Helpers shared by this crate's tests.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::sync::OnceLock;

use oi_api::{
    Certificate, Cluster, ClusterSpec, Hypervisor, HypervisorSpec, KeyPair, LocalCriEndpoint,
    ObjectMeta, PortRange, Resource as _, World,
};
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
    if s.vpn.enabled && s.vpn.private_key.is_empty() {
        static VPN: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
        (s.vpn.private_key, s.vpn.public_key) =
            VPN.get_or_init(oi_pki::generate_wireguard_keys).clone();
    }
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

/// A hypervisor with a local CRI endpoint, optionally in a zone.
pub fn hypervisor(
    name: &str,
    public: bool,
    ip: &str,
    zone: Option<&str>,
    range: (u32, u32),
) -> Hypervisor {
    let mut meta = ObjectMeta::named(name);
    if let Some(z) = zone {
        meta.labels
            .insert(crate::schedule::ZONE_LABEL.into(), z.into());
    }
    Hypervisor::new(
        meta,
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: format!("/run/{name}/containerd.sock"),
            }),
            remote_cri_endpoint: None,
            public,
            ip_address: ip.into(),
            port_range: PortRange {
                low: range.0,
                high: range.1,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

pub fn cluster(name: &str, replicas: u32, vpn: bool) -> Cluster {
    let mut spec = ClusterSpec {
        control_plane_replicas: Some(replicas),
        ..ClusterSpec::default()
    };
    spec.vpn.enabled = vpn;
    with_pki(Cluster::new(ObjectMeta::named(name), spec))
}

pub fn world(hypervisors: Vec<Hypervisor>, clusters: Vec<Cluster>) -> World {
    let mut w = World::default();
    for h in hypervisors {
        w.hypervisors.insert(h.key(), h);
    }
    for c in clusters {
        w.clusters.insert(c.key(), c);
    }
    w
}

pub fn basic() -> Vec<Hypervisor> {
    vec![
        hypervisor("private-1", false, "10.0.0.1", None, (30000, 30099)),
        hypervisor("private-2", false, "10.0.0.2", None, (30000, 30099)),
        hypervisor("private-3", false, "10.0.0.3", None, (30000, 30099)),
        hypervisor("public-1", true, "192.0.2.1", None, (40000, 40099)),
    ]
}
