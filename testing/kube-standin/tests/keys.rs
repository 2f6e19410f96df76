//! Service-account and signing key checks with the key formats oneinfra and kubeadm write:
//! RSA as PKCS#1 or PKCS#8, ECDSA as PKCS#8 or SEC1, public keys as SPKI or PKCS#1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use oi_kube_standin::keys::{self, KeyError};
use rsa::pkcs1::{EncodeRsaPrivateKey, EncodeRsaPublicKey, LineEnding};
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey};

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn rsa_key() -> rsa::RsaPrivateKey {
    rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).unwrap()
}

#[test]
fn rsa_signing_keys_match_their_public_keys_in_every_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = rsa_key();
    let public = key.to_public_key();
    let pkcs1 = write(
        d,
        "sa-pkcs1.key",
        &key.to_pkcs1_pem(LineEnding::LF).unwrap(),
    );
    let pkcs8 = write(
        d,
        "sa-pkcs8.key",
        &key.to_pkcs8_pem(LineEnding::LF).unwrap(),
    );
    let spki = write(
        d,
        "sa.pub",
        &public.to_public_key_pem(LineEnding::LF).unwrap(),
    );
    let rsa_pub = write(
        d,
        "sa-rsa.pub",
        &public.to_pkcs1_pem(LineEnding::LF).unwrap(),
    );
    for private in [&pkcs1, &pkcs8] {
        for verification in [&spki, &rsa_pub, &pkcs1, &pkcs8] {
            keys::check_private_matches(private, &[verification.as_path()]).unwrap_or_else(|e| {
                panic!("{} vs {}: {e}", private.display(), verification.display())
            });
        }
    }

    let other = write(
        d,
        "other.pub",
        &rsa_key()
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    );
    assert!(matches!(
        keys::check_private_matches(&pkcs1, &[other.as_path()]),
        Err(KeyError::Mismatch { .. })
    ));
    // Several verification files: one matching is enough (key rotation).
    keys::check_private_matches(&pkcs1, &[other.as_path(), spki.as_path()]).unwrap();
}

#[test]
fn ecdsa_keys_match_and_garbage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = rcgen::KeyPair::generate().unwrap();
    let private = write(d, "ec.key", &key.serialize_pem());
    let public = write(d, "ec.pub", &key.public_key_pem());
    keys::check_private_matches(&private, &[public.as_path()]).unwrap();

    let garbage = write(d, "garbage.pub", "not a key\n");
    assert_eq!(
        keys::public_keys(&garbage).unwrap_err(),
        KeyError::NoKey {
            path: garbage.display().to_string(),
            found: vec![]
        }
    );
    let broken = write(
        d,
        "broken.pub",
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    );
    assert!(matches!(
        keys::public_keys(&broken),
        Err(KeyError::Invalid { ref label, .. }) if label == "PUBLIC KEY"
    ));
    assert!(matches!(
        keys::private_key_public_half(&public),
        Err(KeyError::NoKey { .. })
    ));
}

#[test]
fn sec1_ec_keys_match() {
    if !oi_testsupport::require(
        "sec1_ec_keys_match",
        "command `openssl` (to write a SEC1 key)",
        oi_testsupport::have_command("openssl"),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = rcgen::KeyPair::generate().unwrap();
    let pkcs8 = write(d, "ec-pkcs8.key", &key.serialize_pem());
    let public = write(d, "ec.pub", &key.public_key_pem());
    let sec1 = d.join("ec-sec1.key");
    let status = Command::new("openssl")
        .args(["ec", "-in"])
        .arg(&pkcs8)
        .arg("-out")
        .arg(&sec1)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        std::fs::read_to_string(&sec1)
            .unwrap()
            .contains("BEGIN EC PRIVATE KEY")
    );
    keys::check_private_matches(&sec1, &[public.as_path()]).unwrap();
    let other = write(
        d,
        "other.pub",
        &rcgen::KeyPair::generate().unwrap().public_key_pem(),
    );
    assert!(matches!(
        keys::check_private_matches(&sec1, &[other.as_path()]),
        Err(KeyError::Mismatch { .. })
    ));
}
