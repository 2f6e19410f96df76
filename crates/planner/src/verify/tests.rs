#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use oi_api::{Certificate, HypervisorPortAllocation, RemoteCriEndpoint};
use oi_pki::{CertificateAuthority, KeyAlgorithm, LeafSpec};
use pretty_assertions::assert_eq;
use time::Duration;
use time::macros::datetime;

use super::*;
use crate::testutil::{basic, cluster, world};

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

/// A prepared world: 3 private and 1 public hypervisors, cluster `c` with 3 replicas and every
/// leaf certificate issued.
fn prepared() -> World {
    let p = crate::prepare(world(basic(), vec![cluster("c", 3, false)]), NOW);
    assert!(p.failures.is_empty(), "{:?}", p.failures);
    p.world
}

/// The findings of `world`, as (kind, object, field, message).
fn findings(world: &World) -> Vec<(Kind, String, String, String)> {
    verify_world(world, NOW)
        .into_iter()
        .map(|f| {
            (
                f.kind,
                f.object.to_string(),
                f.error.field,
                f.error.reason.to_string(),
            )
        })
        .collect()
}

fn one(
    kind: Kind,
    object: &str,
    field: &str,
    message: &str,
) -> Vec<(Kind, String, String, String)> {
    vec![(kind, object.into(), field.into(), message.into())]
}

fn other_ca(name: &str) -> CertificateAuthority {
    CertificateAuthority::generate(name, KeyAlgorithm::EcdsaP256, NOW, Duration::days(365)).unwrap()
}

fn cluster_mut(w: &mut World) -> &mut Cluster {
    w.clusters.get_mut(&ObjectKey::new("default", "c")).unwrap()
}

fn replica_mut(w: &mut World, i: usize) -> &mut Component {
    w.components
        .get_mut(&ObjectKey::new("default", format!("c-control-plane-{i}")))
        .unwrap()
}

#[test]
fn a_prepared_world_verifies() {
    assert_eq!(findings(&prepared()), []);
}

#[test]
fn broken_cluster_cas_are_named_by_field() {
    let mut w = prepared();
    cluster_mut(&mut w)
        .spec
        .certificate_authorities
        .etcd_peer
        .as_mut()
        .unwrap()
        .certificate = "not a pem".into();
    let found = findings(&w);
    assert_eq!(
        found[0].2,
        "spec.certificateAuthorities.etcdPeer.certificate"
    );
    assert!(found[0].3.starts_with("invalid certificate: "), "{found:?}");

    let mut w = prepared();
    let other = other_ca("other");
    cluster_mut(&mut w)
        .spec
        .api_server
        .ca
        .as_mut()
        .unwrap()
        .private_key = other.private_key_pem().into();
    assert_eq!(
        findings(&w),
        one(
            Kind::Cluster,
            "default/c",
            "spec.apiServer.ca.privateKey",
            "the private key is not the one of certificate \"test-apiserver-ca\""
        )
    );

    let mut w = prepared();
    cluster_mut(&mut w)
        .spec
        .etcd_server
        .ca
        .as_mut()
        .unwrap()
        .private_key = String::new();
    assert_eq!(
        findings(&w),
        one(
            Kind::Cluster,
            "default/c",
            "spec.etcdServer.ca.privateKey",
            "required"
        )
    );

    let expired = prepared();
    let found: Vec<_> = verify_world(&expired, NOW + Duration::days(3651))
        .into_iter()
        .filter(|f| f.kind == Kind::Cluster)
        .map(|f| f.error.field)
        .collect();
    assert_eq!(found.len(), 8, "every CA expired: {found:?}");
    assert!(found.iter().all(|f| f.ends_with(".certificate")));
}

#[test]
fn broken_key_pairs_and_vpn_keys_are_named_by_field() {
    let mut w = prepared();
    cluster_mut(&mut w)
        .spec
        .join_key
        .as_mut()
        .unwrap()
        .private_key = "xx".into();
    let found = findings(&w);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].2, "spec.joinKey.privateKey");
    assert!(found[0].3.starts_with("invalid private key of key pair"));

    let mut w = prepared();
    let c = cluster_mut(&mut w);
    let join_public = c.spec.join_key.as_ref().unwrap().public_key.clone();
    c.spec
        .api_server
        .service_account
        .as_mut()
        .unwrap()
        .public_key = join_public;
    assert_eq!(
        findings(&w),
        one(
            Kind::Cluster,
            "default/c",
            "spec.apiServer.serviceAccount.publicKey",
            "the public key is not the one of the private key"
        )
    );

    let mut w = prepared();
    cluster_mut(&mut w).spec.vpn.public_key = "AAAA".into();
    assert_eq!(
        findings(&w),
        one(
            Kind::Cluster,
            "default/c",
            "spec.vpn.publicKey",
            "invalid WireGuard public key: 3 bytes instead of 32"
        )
    );

    // The VPN's peers: a public key each, and oneinfra's form's private key its pair's.
    let (private, public) = oi_pki::generate_wireguard_keys();
    let (_, other) = oi_pki::generate_wireguard_keys();
    let peer = |name: &str, private: &str, public: &str| oi_api::VpnPeer {
        name: name.into(),
        address: "10.0.0.2/16".into(),
        private_key: private.into(),
        public_key: public.into(),
    };
    let mut w = prepared();
    cluster_mut(&mut w).status.vpn_peers = vec![
        peer("worker-a", "", &public),
        peer("worker-b", &private, &public),
        peer("worker-c", &private, &other),
        peer("worker-d", "", ""),
    ];
    let fields: Vec<(String, String)> = findings(&w)
        .into_iter()
        .map(|(_, _, field, message)| (field, message))
        .collect();
    assert_eq!(
        fields,
        [
            (
                "status.vpnPeers[2].publicKey".to_string(),
                "the public key is not the one of the private key".to_string()
            ),
            (
                "status.vpnPeers[3].publicKey".to_string(),
                "required".to_string()
            ),
        ]
    );
}

#[test]
fn broken_leaves_are_named_by_component_and_field() {
    let mut w = prepared();
    replica_mut(&mut w, 1)
        .status
        .server_certificates
        .get_mut("etcd-server")
        .unwrap()
        .certificate = "garbage".into();
    let found = findings(&w);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].1.as_str(), found[0].2.as_str()),
        (
            "default/c-control-plane-1",
            "status.serverCertificates.etcd-server.certificate"
        )
    );

    // Signed by another CA than the one of its role.
    let mut w = prepared();
    let foreign = other_ca("other")
        .issue(&LeafSpec::scheduler(), NOW, Duration::days(30))
        .unwrap();
    replica_mut(&mut w, 0).status.client_certificates.insert(
        "scheduler".into(),
        Certificate {
            certificate: foreign.certificate_pem,
            private_key: foreign.private_key_pem,
        },
    );
    assert_eq!(
        findings(&w),
        one(
            Kind::Component,
            "default/c-control-plane-0",
            "status.clientCertificates.scheduler.certificate",
            "certificate \"system:kube-scheduler\" is not signed by CA \"test-apiserver-client-ca\""
        )
    );

    // Another leaf's key.
    let mut w = prepared();
    let c = cluster_mut(&mut w);
    let admin_key = c.status.client_certificates["admin"].private_key.clone();
    replica_mut(&mut w, 2)
        .status
        .client_certificates
        .get_mut("controller-manager")
        .unwrap()
        .private_key = admin_key;
    assert_eq!(
        findings(&w),
        one(
            Kind::Component,
            "default/c-control-plane-2",
            "status.clientCertificates.controller-manager.privateKey",
            "the private key is not the one of certificate \"system:kube-controller-manager\""
        )
    );
}

#[test]
fn a_remote_hypervisors_ca_must_be_a_ca_and_its_client_key_its_own() {
    let ca = other_ca("front-ca");
    let client = ca
        .issue(
            &LeafSpec::client(CaKind::ApiServerClient, "oi", &[]),
            NOW,
            Duration::days(30),
        )
        .unwrap();
    let other = ca
        .issue(
            &LeafSpec::client(CaKind::ApiServerClient, "other", &[]),
            NOW,
            Duration::days(30),
        )
        .unwrap();
    let remote = |ca_certificate: &str, key: &str| RemoteCriEndpoint {
        cri_endpoint_uri: "tcp://10.0.0.1:27000".into(),
        ca_certificate: ca_certificate.into(),
        client_certificate: Some(Certificate {
            certificate: client.certificate_pem.clone(),
            private_key: key.into(),
        }),
    };
    let mut w = prepared();
    let h = w
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped("private-1"))
        .unwrap();
    h.spec.local_cri_endpoint = None;
    h.spec.remote_cri_endpoint = Some(remote(ca.certificate_pem(), &client.private_key_pem));
    assert_eq!(findings(&w), []);

    let h = w
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped("private-1"))
        .unwrap();
    h.spec.remote_cri_endpoint = Some(remote(&client.certificate_pem, &other.private_key_pem));
    assert_eq!(
        findings(&w),
        vec![
            (
                Kind::Hypervisor,
                "private-1".to_string(),
                "spec.remoteCRIEndpoint.caCertificate".to_string(),
                "certificate \"oi\" is not a CA (no basicConstraints CA:TRUE)".to_string()
            ),
            (
                Kind::Hypervisor,
                "private-1".to_string(),
                "spec.remoteCRIEndpoint.clientCertificate.privateKey".to_string(),
                "the private key is not the one of certificate \"oi\"".to_string()
            ),
        ]
    );
}

#[test]
fn hypervisor_addresses_are_distinct() {
    let mut w = prepared();
    w.hypervisors
        .get_mut(&ObjectKey::cluster_scoped("private-3"))
        .unwrap()
        .spec
        .ip_address = "10.0.0.1".into();
    assert_eq!(
        findings(&w),
        one(
            Kind::Hypervisor,
            "private-3",
            "spec.ipAddress",
            "10.0.0.1 is also the address of hypervisor \"private-1\": hypervisors share no address (host ports are allocated per hypervisor)"
        )
    );
}

#[test]
fn edited_ports_are_found() {
    let hv = ObjectKey::cluster_scoped("private-1");
    // A port outside the range, and one held twice.
    let mut w = prepared();
    let status = &mut w.hypervisors.get_mut(&hv).unwrap().status;
    status.allocated_ports.push(HypervisorPortAllocation {
        cluster: "x".into(),
        cluster_namespace: "default".into(),
        component: "x-apiserver".into(),
        port: 29999,
    });
    let taken = status.allocated_ports[0].clone();
    status.allocated_ports.push(HypervisorPortAllocation {
        component: "y-apiserver".into(),
        ..taken.clone()
    });
    status.freed_ports.push(taken.port);
    let n = status.allocated_ports.len();
    let holder = format!("default/c component {}", taken.component);
    assert_eq!(
        findings(&w),
        vec![
            (
                Kind::Hypervisor,
                "private-1".to_string(),
                format!("status.allocatedPorts[{}].port", n - 2),
                "port 29999 is outside spec.portRange 30000-30099".to_string()
            ),
            (
                Kind::Hypervisor,
                "private-1".to_string(),
                format!("status.allocatedPorts[{}].port", n - 1),
                format!("port {} is also allocated to {holder}", taken.port)
            ),
            (
                Kind::Hypervisor,
                "private-1".to_string(),
                "status.freedPorts[0]".to_string(),
                format!("port {} is also allocated to {holder}", taken.port)
            ),
        ]
    );

    // A component whose status says another port than its hypervisor's.
    let mut w = prepared();
    let replica = replica_mut(&mut w, 0);
    let recorded = replica.status.allocated_host_ports[0].clone();
    replica.status.allocated_host_ports[0].port = recorded.port + 50;
    assert_eq!(
        findings(&w),
        one(
            Kind::Component,
            "default/c-control-plane-0",
            "status.allocatedHostPorts[0].port",
            &format!(
                "default/c component c-control-plane-0-{} holds port {} in hypervisor private-1's status, but this says {}",
                recorded.name,
                recorded.port,
                recorded.port + 50
            )
        )
    );
}

#[test]
fn a_cluster_being_deleted_is_not_verified() {
    let mut w = prepared();
    let c = cluster_mut(&mut w);
    c.spec.api_server.ca.as_mut().unwrap().certificate = "broken".into();
    c.metadata.deletion_timestamp = Some(NOW);
    replica_mut(&mut w, 0)
        .status
        .server_certificates
        .get_mut("apiserver")
        .unwrap()
        .certificate = "broken".into();
    assert_eq!(findings(&w), []);
}

#[test]
fn an_oidc_ca_bundle_must_hold_parsable_certificates() {
    let mut w = prepared();
    let good = other_ca("idp-ca");
    cluster_mut(&mut w).spec.api_server.oidc = Some(oi_api::ApiServerOidc {
        issuer_url: "https://idp.example".into(),
        client_id: "kubernetes".into(),
        ca: format!(
            "{}{}",
            good.certificate_pem(),
            other_ca("second").certificate_pem()
        ),
        ..oi_api::ApiServerOidc::default()
    });
    assert_eq!(findings(&w), []);
    cluster_mut(&mut w)
        .spec
        .api_server
        .oidc
        .as_mut()
        .unwrap()
        .ca = format!(
        "{}-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        good.certificate_pem()
    );
    let found = findings(&w);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].2, "spec.apiServer.oidc.ca");
    assert!(found[0].3.starts_with("invalid certificate: "), "{found:?}");
}
