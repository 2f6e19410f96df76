#![allow(clippy::unwrap_used)]

use super::*;
use crate::{KeyAlgorithm, KeyPairPem};

fn raw(wrapped: &str) -> Vec<u8> {
    STANDARD_NO_PAD.decode(wrapped).unwrap()
}

fn flip(wrapped: &str, index: usize) -> String {
    let mut bytes = raw(wrapped);
    bytes[index] ^= 1;
    STANDARD_NO_PAD.encode(bytes)
}

#[test]
fn seal_matches_the_gcm_known_answer() {
    // GCM specification, test case 14: AES-256, zero key, zero nonce, 16 zero bytes.
    let key = SymmetricKey::from_bytes(vec![0; 32]).unwrap();
    let mut sealed = vec![0u8; 12];
    sealed.extend(hex::decode("cea7403d4d606b6e074ec5d3baf39d18").unwrap());
    sealed.extend(hex::decode("d0d1c8a799996bf0265b98b5d48ab919").unwrap());
    let text = STANDARD_NO_PAD.encode(&sealed);
    assert_eq!(key.open(&text).unwrap(), vec![0u8; 16]);
    // Padded base64 is accepted too.
    let padded = base64::engine::general_purpose::STANDARD.encode(&sealed);
    assert_eq!(key.open(&padded).unwrap(), vec![0u8; 16]);
}

#[test]
fn seal_round_trips_and_detects_tampering() {
    for len in [16, 32] {
        let key = SymmetricKey::from_bytes(vec![7; len]).unwrap();
        let sealed = key.seal(b"kubeconfig contents").unwrap();
        assert!(!sealed.ends_with('='));
        assert_eq!(key.open(&sealed).unwrap(), b"kubeconfig contents");
        assert_ne!(
            sealed,
            key.seal(b"kubeconfig contents").unwrap(),
            "random nonce"
        );

        let tampered = flip(&sealed, raw(&sealed).len() - 1);
        assert!(matches!(key.open(&tampered), Err(Error::Join { .. })));
        let other = SymmetricKey::generate();
        assert!(matches!(other.open(&sealed), Err(Error::Join { .. })));
    }
    assert!(matches!(
        SymmetricKey::from_bytes(vec![0; 24]),
        Err(Error::InvalidSymmetricKey { length: 24 })
    ));
    assert!(matches!(
        SymmetricKey::generate().open("AAAA"),
        Err(Error::Join { .. })
    ));
}

/// Round trip with the join key only, for every join key type; tampering anywhere fails.
#[test]
fn wrap_round_trips_with_the_join_key_only() {
    for algorithm in [
        KeyAlgorithm::EcdsaP256,
        KeyAlgorithm::EcdsaP384,
        KeyAlgorithm::Rsa2048,
    ] {
        let join = KeyPairPem::generate(algorithm).unwrap();
        let other = KeyPairPem::generate(algorithm).unwrap();
        let key = SymmetricKey::generate();
        let wrapped = key.wrap(&join.public_key_pem).unwrap();
        assert!(!wrapped.ends_with('='), "{algorithm}: unpadded base64");
        assert_eq!(
            SymmetricKey::unwrap_with(&join.private_key_pem, &wrapped).unwrap(),
            key,
            "{algorithm}"
        );
        assert_ne!(
            wrapped,
            key.wrap(&join.public_key_pem).unwrap(),
            "{algorithm}: randomized"
        );
        assert!(
            matches!(
                SymmetricKey::unwrap_with(&other.private_key_pem, &wrapped),
                Err(Error::Join {
                    operation: "unwrap",
                    ..
                })
            ),
            "{algorithm}: wrong key"
        );
        let len = raw(&wrapped).len();
        for index in [0, 1, len / 2, len - 1] {
            let tampered = flip(&wrapped, index);
            assert!(
                decrypt_with_join_key(&join.private_key_pem, &tampered).is_err(),
                "{algorithm}: byte {index} altered"
            );
        }
        assert!(!format!("{key:?}").contains(&hex::encode(key.as_bytes())));
    }
}

/// Arbitrary plaintexts, not only symmetric keys, go through ECIES.
#[test]
fn ecies_carries_any_plaintext() {
    let join = KeyPairPem::generate(KeyAlgorithm::EcdsaP256).unwrap();
    for plaintext in [&b""[..], b"x", &[0xa5; 1000]] {
        let wrapped = encrypt_to_join_key(&join.public_key_pem, plaintext).unwrap();
        assert_eq!(
            decrypt_with_join_key(&join.private_key_pem, &wrapped).unwrap(),
            plaintext
        );
    }
}

/// The documented layout: scheme || ephemeral point (uncompressed) || nonce || ct || tag.
#[test]
fn ecies_ciphertexts_have_the_documented_structure() {
    for (algorithm, scheme, point_len) in [
        (KeyAlgorithm::EcdsaP256, ECIES_P256_V1, 65),
        (KeyAlgorithm::EcdsaP384, ECIES_P384_V1, 97),
    ] {
        let join = KeyPairPem::generate(algorithm).unwrap();
        let key = SymmetricKey::generate();
        let bytes = raw(&key.wrap(&join.public_key_pem).unwrap());
        assert_eq!(bytes.len(), 1 + point_len + 12 + 32 + 16, "{algorithm}");
        assert_eq!(bytes[0], scheme, "{algorithm}");
        assert_eq!(bytes[1], 0x04, "{algorithm}: uncompressed SEC1 point");
        // The ephemeral key is fresh each time.
        let again = raw(&key.wrap(&join.public_key_pem).unwrap());
        assert_ne!(bytes[1..1 + point_len], again[1..1 + point_len]);
    }
    let rsa = KeyPairPem::generate(KeyAlgorithm::Rsa2048).unwrap();
    let wrapped = SymmetricKey::generate().wrap(&rsa.public_key_pem).unwrap();
    assert_eq!(raw(&wrapped).len(), 256, "RSA-OAEP: the modulus size");
}

/// Decrypting by hand with the recipient's ECDH, HKDF and AES-GCM as documented recovers the
/// plaintext: the layout and derivation are the ones the docs state, not just self-consistent.
#[test]
fn ecies_follows_the_documented_derivation() {
    let join = KeyPairPem::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let secret = p256::SecretKey::from_pkcs8_pem(&join.private_key_pem).unwrap();
    let bytes = raw(&encrypt_to_join_key(&join.public_key_pem, b"hello join").unwrap());
    let (point, rest) = bytes[1..].split_at(65);
    let (nonce, sealed) = rest.split_at(12);
    let ephemeral = p256::PublicKey::from_sec1_bytes(point).unwrap();
    let shared = p256::ecdh::diffie_hellman(secret.to_nonzero_scalar(), ephemeral.as_affine());
    let mut salt = point.to_vec();
    salt.extend_from_slice(secret.public_key().to_encoded_point(false).as_bytes());
    let mut okm = [0u8; 32];
    Hkdf::<Sha256>::new(Some(&salt), shared.raw_secret_bytes())
        .expand(b"oneinfra join v1", &mut okm)
        .unwrap();
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &okm).unwrap());
    let mut in_out = sealed.to_vec();
    let plaintext = key
        .open_in_place(
            Nonce::try_assume_unique_for_key(nonce).unwrap(),
            Aad::empty(),
            &mut in_out,
        )
        .unwrap();
    assert_eq!(plaintext, b"hello join");
}

#[test]
fn ciphertexts_of_another_scheme_are_refused_clearly() {
    let p256 = KeyPairPem::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let p384 = KeyPairPem::generate(KeyAlgorithm::EcdsaP384).unwrap();
    let rsa = KeyPairPem::generate(KeyAlgorithm::Rsa2048).unwrap();
    let key = SymmetricKey::generate();
    let for_p256 = key.wrap(&p256.public_key_pem).unwrap();
    let for_p384 = key.wrap(&p384.public_key_pem).unwrap();
    let for_rsa = key.wrap(&rsa.public_key_pem).unwrap();

    let cases = [
        (&rsa, &for_p256, "an RSA key", "an ECIES P-256 ciphertext"),
        (&rsa, &for_p384, "an RSA key", "an ECIES P-384 ciphertext"),
        (
            &p256,
            &for_rsa,
            "an EC P-256 key",
            "an RSA-OAEP ciphertext for a 2048-bit key",
        ),
        (
            &p256,
            &for_p384,
            "an EC P-256 key",
            "an ECIES P-384 ciphertext",
        ),
        (
            &p384,
            &for_p256,
            "an EC P-384 key",
            "an ECIES P-256 ciphertext",
        ),
        (
            &p384,
            &for_rsa,
            "an EC P-384 key",
            "an RSA-OAEP ciphertext for a 2048-bit key",
        ),
    ];
    for (join, wrapped, key_type, ciphertext_type) in cases {
        let err = decrypt_with_join_key(&join.private_key_pem, wrapped).unwrap_err();
        assert!(
            matches!(
                err,
                Error::JoinSchemeMismatch { key, ciphertext }
                    if key == key_type && ciphertext == ciphertext_type
            ),
            "{key_type}: {err:?}"
        );
        assert!(err.to_string().contains(ciphertext_type), "{err}");
    }

    // Truncated or unrecognisable data is a plain decryption error.
    let short = STANDARD_NO_PAD.encode(&raw(&for_p256)[..40]);
    let err = decrypt_with_join_key(&p256.private_key_pem, &short).unwrap_err();
    assert!(err.to_string().contains("shorter"), "{err}");
    let err = decrypt_with_join_key(&p256.private_key_pem, "").unwrap_err();
    assert!(matches!(err, Error::Join { .. }), "{err:?}");
    let err = decrypt_with_join_key(&rsa.private_key_pem, &short).unwrap_err();
    assert!(
        err.to_string().contains("not an RSA-OAEP ciphertext"),
        "{err}"
    );
}

#[test]
fn unsupported_or_garbage_join_keys_are_refused_without_quoting_them() {
    // Ed25519, PKCS#8 and SPKI (RFC 8410 examples).
    let ed25519_private = "-----BEGIN PRIVATE KEY-----\n\
        MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n\
        -----END PRIVATE KEY-----\n";
    let ed25519_public = "-----BEGIN PUBLIC KEY-----\n\
        MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n\
        -----END PUBLIC KEY-----\n";
    let err = encrypt_to_join_key(ed25519_public, b"k").unwrap_err();
    assert!(
        matches!(&err, Error::Join { operation: "wrap", reason } if reason.contains("1.3.101.112")),
        "{err:?}"
    );
    let err = decrypt_with_join_key(ed25519_private, "AAAA").unwrap_err();
    assert!(err.to_string().contains("1.3.101.112"), "{err}");
    assert!(!err.to_string().contains("MC4CAQAw"), "{err}");

    let ec = KeyPairPem::generate(KeyAlgorithm::EcdsaP256).unwrap();
    // A private key where a public key is expected, and the other way round.
    assert!(encrypt_to_join_key(&ec.private_key_pem, b"k").is_err());
    let err = decrypt_with_join_key(&ec.public_key_pem, "AAAA").unwrap_err();
    assert!(err.to_string().contains("PUBLIC KEY"), "{err}");
    assert!(decrypt_with_join_key("not a pem", "AAAA").is_err());
}

/// Go writes RSA keys as PKCS#1; oneinfra's join keys may come that way.
#[test]
fn pkcs1_rsa_join_keys_unwrap() {
    use rsa::pkcs1::EncodeRsaPrivateKey as _;
    use rsa::pkcs8::EncodePublicKey as _;
    let private = RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048).unwrap();
    let pkcs1 = private.to_pkcs1_pem(rsa::pkcs1::LineEnding::LF).unwrap();
    let public = private
        .to_public_key()
        .to_public_key_pem(rsa::pkcs8::LineEnding::LF)
        .unwrap();
    let key = SymmetricKey::generate();
    let wrapped = key.wrap(&public).unwrap();
    assert_eq!(SymmetricKey::unwrap_with(&pkcs1, &wrapped).unwrap(), key);
}
