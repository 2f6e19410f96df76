#![allow(clippy::unwrap_used, clippy::expect_used)]

use time::{Duration, OffsetDateTime};

use super::*;
use crate::{KeyAlgorithm, KeyPairPem, LeafSpec};

fn now() -> OffsetDateTime {
    time::macros::datetime!(2026-11-22 00:00:00 UTC)
}

fn ca(name: &str) -> CertificateAuthority {
    CertificateAuthority::generate(name, KeyAlgorithm::EcdsaP256, now(), Duration::days(3650))
        .unwrap()
}

#[test]
fn a_ca_must_parse_be_a_ca_own_its_key_and_not_have_expired() {
    let a = ca("a");
    let b = ca("b");
    check_ca(a.certificate_pem(), a.private_key_pem(), now()).unwrap();
    assert!(matches!(
        check_ca("not a pem", a.private_key_pem(), now()),
        Err(Error::InvalidCertificate { .. })
    ));
    assert!(matches!(
        check_ca(a.certificate_pem(), "xx", now()),
        Err(Error::InvalidPrivateKey { .. })
    ));
    assert!(matches!(
        check_ca(a.certificate_pem(), b.private_key_pem(), now()),
        Err(Error::KeyMismatch { common_name }) if common_name == "a"
    ));
    let leaf = a
        .issue(&LeafSpec::admin(), now(), Duration::days(1))
        .unwrap();
    assert!(matches!(
        check_ca(&leaf.certificate_pem, &leaf.private_key_pem, now()),
        Err(Error::NotACa { common_name }) if common_name == "kubernetes-admin"
    ));
    let later = now() + Duration::days(3651);
    assert!(matches!(
        check_ca(a.certificate_pem(), a.private_key_pem(), later),
        Err(Error::CaExpired { common_name, .. }) if common_name == "a"
    ));
}

#[test]
fn a_ca_certificate_alone_must_be_a_ca() {
    let a = ca("a");
    check_ca_certificate(a.certificate_pem()).unwrap();
    let leaf = a
        .issue(&LeafSpec::admin(), now(), Duration::days(1))
        .unwrap();
    assert!(matches!(
        check_ca_certificate(&leaf.certificate_pem),
        Err(Error::NotACa { .. })
    ));
    assert!(matches!(
        check_ca_certificate(a.private_key_pem()),
        Err(Error::InvalidCertificate { .. })
    ));
}

#[test]
fn a_leaf_must_own_its_key_not_be_a_ca_and_chain_to_its_ca() {
    let a = ca("a");
    let b = ca("b");
    let leaf = a
        .issue(&LeafSpec::admin(), now(), Duration::days(1))
        .unwrap();
    let other = a
        .issue(&LeafSpec::scheduler(), now(), Duration::days(1))
        .unwrap();
    check_leaf(&leaf.certificate_pem, &leaf.private_key_pem, None).unwrap();
    check_leaf(
        &leaf.certificate_pem,
        &leaf.private_key_pem,
        Some(a.certificate_pem()),
    )
    .unwrap();
    assert_eq!(
        check_leaf(
            &leaf.certificate_pem,
            &leaf.private_key_pem,
            Some(b.certificate_pem())
        )
        .unwrap_err()
        .to_string(),
        "certificate \"kubernetes-admin\" is not signed by CA \"b\""
    );
    assert_eq!(
        check_leaf(&leaf.certificate_pem, &other.private_key_pem, None)
            .unwrap_err()
            .to_string(),
        "the private key is not the one of certificate \"kubernetes-admin\""
    );
    assert!(matches!(
        check_leaf(a.certificate_pem(), a.private_key_pem(), None),
        Err(Error::LeafIsACa { .. })
    ));
    assert!(matches!(
        check_leaf("garbage", &leaf.private_key_pem, None),
        Err(Error::InvalidCertificate { .. })
    ));
}

#[test]
fn a_key_pair_public_key_must_be_its_private_keys() {
    for algorithm in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::Rsa2048] {
        let pair = KeyPairPem::generate(algorithm).unwrap();
        let other = KeyPairPem::generate(algorithm).unwrap();
        check_key_pair(&pair.public_key_pem, &pair.private_key_pem).unwrap();
        check_key_pair("", &pair.private_key_pem).unwrap();
        assert!(matches!(
            check_key_pair(&other.public_key_pem, &pair.private_key_pem),
            Err(Error::PublicKeyMismatch)
        ));
        assert!(matches!(
            check_key_pair(&pair.public_key_pem, "xx"),
            Err(Error::InvalidPrivateKey { .. })
        ));
        assert!(matches!(
            check_key_pair("xx", &pair.private_key_pem),
            Err(Error::InvalidPublicKey { .. })
        ));
    }
    // Go's x509.MarshalPKCS1PublicKey form of an RSA public key.
    let pair = KeyPairPem::generate(KeyAlgorithm::Rsa2048).unwrap();
    let key = load_key("t", &pair.private_key_pem).unwrap();
    let pkcs1 = pem::encode(&pem::Pem::new("RSA PUBLIC KEY", key.der_bytes().to_vec()));
    check_key_pair(&pkcs1, &pair.private_key_pem).unwrap();
}

#[test]
fn wireguard_keys_are_32_bytes_and_a_pair() {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    // RFC 7748, section 6.1: Alice's private and public keys.
    let private =
        hex::decode("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a").unwrap();
    let public =
        hex::decode("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a").unwrap();
    check_wireguard_keys(&b64(&private), &b64(&public)).unwrap();
    check_wireguard_keys("", &b64(&public)).unwrap();
    check_wireguard_keys(&b64(&private), "").unwrap();
    assert!(matches!(
        check_wireguard_keys(&b64(&private), &b64(&private)),
        Err(Error::PublicKeyMismatch)
    ));
    assert_eq!(
        check_wireguard_keys("xx", "").unwrap_err().to_string(),
        "invalid WireGuard private key: Invalid padding"
    );
    assert_eq!(
        check_wireguard_keys("", &b64(&[1; 16]))
            .unwrap_err()
            .to_string(),
        "invalid WireGuard public key: 16 bytes instead of 32"
    );
}

#[test]
fn generated_wireguard_keys_are_a_clamped_pair_and_differ_each_time() {
    use base64::Engine as _;
    let (private, public) = crate::generate_wireguard_keys();
    check_wireguard_keys(&private, &public).unwrap();
    assert_eq!(crate::wireguard_public_key(&private).unwrap(), public);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&private)
        .unwrap();
    assert_eq!(bytes[0] & 7, 0);
    assert_eq!(bytes[31] & 0xc0, 0x40);
    assert_ne!(crate::generate_wireguard_keys().0, private);
    assert!(crate::wireguard_public_key("c2hvcnQ=").is_err());
}
