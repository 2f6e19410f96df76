//! What issued certificates say, read back with x509-parser, and the renewal decisions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use oi_pki::{
    BACKDATE, CaKind, CertificateAuthority, ClusterPki, Error, KeyAlgorithm, LeafSpec,
    RenewalReason, Usage, inspect_certificate, is_signed_by, needs_renewal, renewal_reason,
};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::{FromDer as _, X509Certificate};

const YEAR: Duration = Duration::days(365);
const NOW: OffsetDateTime = datetime!(2030-01-01 12:00:00.75 UTC);

fn der(pem_text: &str) -> Vec<u8> {
    pem::parse(pem_text).unwrap().into_contents()
}

#[test]
fn cluster_pki_cas_are_distinct_self_signed_cas() {
    let started = Instant::now();
    let pki = ClusterPki::generate("prod", KeyAlgorithm::EcdsaP256, NOW, 10 * YEAR).unwrap();
    // A figure, not an assertion: run with --nocapture to see it.
    eprintln!(
        "ClusterPki::generate(ecdsa-p256) took {:?}",
        started.elapsed()
    );
    let mut seen = std::collections::BTreeSet::new();
    for kind in CaKind::ALL {
        let ca = pki.ca(kind);
        assert!(
            seen.insert(ca.certificate_pem().to_owned()),
            "{kind} repeated"
        );
        assert_eq!(
            ca.common_name(),
            format!("prod-{}", kind.common_name_suffix())
        );
        assert_eq!(ca.algorithm(), KeyAlgorithm::EcdsaP256);
        assert!(is_signed_by(ca.certificate_pem(), ca.certificate_pem()).unwrap());
        let info = inspect_certificate(ca.certificate_pem()).unwrap();
        assert!(info.is_ca, "{kind}");
        assert!(info.key_usages.key_cert_sign && info.key_usages.crl_sign);
        assert!(info.key_usages.digital_signature);
        assert_eq!(info.not_before, datetime!(2030-01-01 11:55:00 UTC));
        assert_eq!(
            info.not_after,
            datetime!(2030-01-01 12:00:00 UTC) + 10 * YEAR
        );
        let der = der(ca.certificate_pem());
        let (_, x509) = X509Certificate::from_der(&der).unwrap();
        let bc = x509.basic_constraints().unwrap().unwrap();
        assert!(bc.critical && bc.value.ca && bc.value.path_len_constraint.is_none());
    }
    assert_eq!(
        pki.service_account.algorithm().unwrap(),
        KeyAlgorithm::EcdsaP256
    );
    // The join key follows the cluster's algorithm (ECIES for EC keys), and is its own key.
    assert_eq!(pki.join_key.algorithm().unwrap(), KeyAlgorithm::EcdsaP256);
    assert_ne!(pki.service_account, pki.join_key);
    let symmetric = oi_pki::SymmetricKey::generate();
    let wrapped = symmetric.wrap(&pki.join_key.public_key_pem).unwrap();
    assert_eq!(
        oi_pki::SymmetricKey::unwrap_with(&pki.join_key.private_key_pem, &wrapped).unwrap(),
        symmetric
    );
    assert!(
        pki.service_account
            .public_key_pem
            .starts_with("-----BEGIN PUBLIC KEY-----")
    );
    // Nothing secret in Debug output.
    let shown = format!("{pki:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

#[test]
fn roles_carry_kubeadm_subjects_sans_and_usages() {
    let pki = ClusterPki::generate("c1", KeyAlgorithm::EcdsaP256, NOW, 10 * YEAR).unwrap();
    let cases: Vec<(LeafSpec, &str, &[&str], Usage)> = vec![
        (
            LeafSpec::kube_apiserver("cluster.local", "10.96.0.0/12", &["10.0.0.1"], &["x.io"])
                .unwrap(),
            "kube-apiserver",
            &[],
            Usage::Server,
        ),
        (
            LeafSpec::apiserver_kubelet_client(),
            "kube-apiserver-kubelet-client",
            &["system:masters"],
            Usage::Client,
        ),
        (
            LeafSpec::apiserver_etcd_client(),
            "kube-apiserver-etcd-client",
            &[],
            Usage::Client,
        ),
        (
            LeafSpec::controller_manager(),
            "system:kube-controller-manager",
            &[],
            Usage::Client,
        ),
        (
            LeafSpec::scheduler(),
            "system:kube-scheduler",
            &[],
            Usage::Client,
        ),
        (
            LeafSpec::admin(),
            "kubernetes-admin",
            &["system:masters"],
            Usage::Client,
        ),
        (
            LeafSpec::etcd_server("m0", &["10.0.0.2"]).unwrap(),
            "m0",
            &[],
            Usage::Server,
        ),
        (
            LeafSpec::etcd_peer("m0", &["10.0.0.2"]).unwrap(),
            "m0",
            &[],
            Usage::ServerAndClient,
        ),
        (
            LeafSpec::kubelet_serving("n1", &["10.0.0.8"]).unwrap(),
            "system:node:n1",
            &["system:nodes"],
            Usage::Server,
        ),
        (
            LeafSpec::client(CaKind::CertificateSigner, "u", &["g1", "g2"]),
            "u",
            &["g1", "g2"],
            Usage::Client,
        ),
    ];
    for (spec, cn, orgs, usage) in cases {
        let leaf = pki.issue(&spec, NOW, YEAR).unwrap();
        let info = inspect_certificate(&leaf.certificate_pem).unwrap();
        assert_eq!(info.common_name.as_deref(), Some(cn));
        assert_eq!(info.organizations, orgs, "{cn}");
        assert_eq!(info.sans, spec.sans, "{cn}");
        assert_eq!(info.usage, Some(usage), "{cn}");
        assert!(!info.is_ca, "{cn}");
        assert_eq!(
            info.issuer_common_name.as_deref(),
            Some(pki.ca(spec.issuer).common_name())
        );
        assert!(info.key_usages.digital_signature, "{cn}");
        assert!(!info.key_usages.key_encipherment, "{cn}: ECDSA key");
        assert!(!info.key_usages.key_cert_sign, "{cn}");
        assert_eq!(info.serial_hex.len(), 32, "{cn}: 16-byte serial");
        assert!(
            is_signed_by(&leaf.certificate_pem, pki.ca(spec.issuer).certificate_pem()).unwrap()
        );

        // Straight from x509-parser, not through our own reader.
        let der = der(&leaf.certificate_pem);
        let (_, x509) = X509Certificate::from_der(&der).unwrap();
        let eku = x509.extended_key_usage().unwrap().unwrap().value;
        assert_eq!(
            (eku.server_auth, eku.client_auth),
            match usage {
                Usage::Server => (true, false),
                Usage::Client => (false, true),
                Usage::ServerAndClient => (true, true),
            },
            "{cn}"
        );
        assert!(!eku.any && !eku.code_signing);
        let ku = x509.key_usage().unwrap().unwrap().value;
        assert!(ku.digital_signature() && !ku.key_cert_sign() && !ku.crl_sign());
        assert!(
            x509.basic_constraints()
                .unwrap()
                .is_some_and(|bc| !bc.value.ca)
        );
    }
}

#[test]
fn rsa_leaves_also_get_key_encipherment_and_serials_differ() {
    let ca = CertificateAuthority::generate("rsa", KeyAlgorithm::Rsa2048, NOW, YEAR).unwrap();
    let a = ca.issue(&LeafSpec::admin(), NOW, YEAR).unwrap();
    let b = ca.issue(&LeafSpec::admin(), NOW, YEAR).unwrap();
    let (a, b) = (
        inspect_certificate(&a.certificate_pem).unwrap(),
        inspect_certificate(&b.certificate_pem).unwrap(),
    );
    assert!(a.key_usages.digital_signature && a.key_usages.key_encipherment);
    assert_ne!(a.serial_hex, b.serial_hex);
}

#[test]
fn extra_sans_never_replace_defaults() {
    let pki = ClusterPki::generate("c", KeyAlgorithm::EcdsaP256, NOW, YEAR).unwrap();
    let spec = LeafSpec::kube_apiserver(
        "cluster.local",
        "10.96.0.0/12",
        &["192.168.1.1"],
        &["only-this.example.com"],
    )
    .unwrap();
    let info = inspect_certificate(&pki.issue(&spec, NOW, YEAR).unwrap().certificate_pem).unwrap();
    for wanted in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
        "127.0.0.1",
        "10.96.0.1",
        "192.168.1.1",
        "only-this.example.com",
    ] {
        assert!(
            info.sans.iter().any(|s| s == wanted),
            "{wanted} missing: {:?}",
            info.sans
        );
    }
    assert_eq!(info.sans.len(), 9);
}

#[test]
fn leaf_validity_honours_now_and_is_cut_at_the_ca_expiry() {
    let ca =
        CertificateAuthority::generate("short", KeyAlgorithm::EcdsaP256, NOW, Duration::days(10))
            .unwrap();
    let leaf = ca
        .issue(&LeafSpec::admin(), NOW, Duration::days(2))
        .unwrap();
    let info = inspect_certificate(&leaf.certificate_pem).unwrap();
    assert_eq!(
        info.not_before,
        datetime!(2030-01-01 12:00:00 UTC) - BACKDATE
    );
    assert_eq!(info.not_after, datetime!(2030-01-03 12:00:00 UTC));

    let long = ca.issue(&LeafSpec::admin(), NOW, YEAR).unwrap();
    let info = inspect_certificate(&long.certificate_pem).unwrap();
    assert_eq!(info.not_after, ca.not_after());
    assert_eq!(ca.not_after(), datetime!(2030-01-11 12:00:00 UTC));

    let late = NOW + Duration::days(11);
    assert!(matches!(
        ca.issue(&LeafSpec::admin(), late, YEAR),
        Err(Error::CaExpired { .. })
    ));
    for lifetime in [Duration::ZERO, Duration::seconds(-1)] {
        assert!(matches!(
            ca.issue(&LeafSpec::admin(), NOW, lifetime),
            Err(Error::InvalidLifetime { .. })
        ));
    }
}

#[test]
fn bad_subjects_are_refused() {
    let ca = CertificateAuthority::generate("ca", KeyAlgorithm::EcdsaP256, NOW, YEAR).unwrap();
    let three = LeafSpec::client(CaKind::ApiServerClient, "u", &["a", "b", "c"]);
    assert!(matches!(
        ca.issue(&three, NOW, YEAR),
        Err(Error::TooManyOrganizations { count: 3, .. })
    ));
    let empty = LeafSpec::client(CaKind::ApiServerClient, " ", &[]);
    assert!(matches!(
        ca.issue(&empty, NOW, YEAR),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        CertificateAuthority::generate("", KeyAlgorithm::EcdsaP256, NOW, YEAR),
        Err(Error::InvalidName { .. })
    ));
}

#[test]
fn loading_refuses_non_cas_and_foreign_keys() {
    let ca = CertificateAuthority::generate("ca", KeyAlgorithm::EcdsaP256, NOW, YEAR).unwrap();
    let leaf = ca.issue(&LeafSpec::admin(), NOW, YEAR).unwrap();
    assert!(matches!(
        CertificateAuthority::from_pem(&leaf.certificate_pem, &leaf.private_key_pem),
        Err(Error::NotACa { common_name }) if common_name == "kubernetes-admin"
    ));
    assert!(matches!(
        CertificateAuthority::from_pem(ca.certificate_pem(), &leaf.private_key_pem),
        Err(Error::KeyMismatch { .. })
    ));
    assert!(matches!(
        CertificateAuthority::from_pem("garbage", ca.private_key_pem()),
        Err(Error::InvalidCertificate { .. })
    ));
    let err = CaKind::Kubelet
        .load(ca.certificate_pem(), "nope")
        .unwrap_err();
    assert!(matches!(
        &err,
        Error::Field { field: "spec.certificateAuthorities.kubelet", source }
            if matches!(**source, Error::InvalidPrivateKey { .. })
    ));
}

#[test]
fn renewal_decisions() {
    let pki = ClusterPki::generate("r", KeyAlgorithm::EcdsaP256, NOW, 10 * YEAR).unwrap();
    let other =
        CertificateAuthority::generate("r-apiserver-ca", KeyAlgorithm::EcdsaP256, NOW, YEAR)
            .unwrap();
    let spec = LeafSpec::kube_apiserver("cluster.local", "10.96.0.0/12", &["10.0.0.1"], &["a.io"])
        .unwrap();
    let leaf = pki.issue(&spec, NOW, YEAR).unwrap();
    let ca = pki.api_server.certificate_pem();
    let month = Duration::days(30);

    assert_eq!(
        needs_renewal(&leaf.certificate_pem, ca, &spec.sans, NOW, month).unwrap(),
        None
    );
    assert_eq!(
        needs_renewal(
            &leaf.certificate_pem,
            other.certificate_pem(),
            &spec.sans,
            NOW,
            month
        )
        .unwrap(),
        Some(RenewalReason::IssuerChanged)
    );
    let expires = datetime!(2030-01-01 12:00:00 UTC) + YEAR;
    assert_eq!(
        needs_renewal(
            &leaf.certificate_pem,
            ca,
            &spec.sans,
            expires - Duration::days(29),
            month
        )
        .unwrap(),
        Some(RenewalReason::Expiring { not_after: expires })
    );
    assert_eq!(
        needs_renewal(
            &leaf.certificate_pem,
            ca,
            &spec.sans,
            expires - Duration::days(31),
            month
        )
        .unwrap(),
        None
    );
    let mut wanted = spec.sans.clone();
    wanted.retain(|s| s != "a.io");
    wanted.push("b.io".to_owned());
    assert_eq!(
        needs_renewal(&leaf.certificate_pem, ca, &wanted, NOW, month).unwrap(),
        Some(RenewalReason::SansDiffer {
            missing: vec!["b.io".to_owned()],
            unexpected: vec!["a.io".to_owned()],
        })
    );
    // Spelling does not matter, only the names: same set in another order and case.
    let info = inspect_certificate(&leaf.certificate_pem).unwrap();
    let mut respelled: Vec<String> = spec.sans.iter().rev().map(|s| s.to_uppercase()).collect();
    respelled.push("0:0:0:0:0:0:0:0:0".replace("0:0:0:0:0:0:0:0:0", "127.0.0.1"));
    assert_eq!(renewal_reason(&info, &respelled, NOW, month).unwrap(), None);
}
