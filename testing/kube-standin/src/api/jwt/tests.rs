use std::path::PathBuf;

use serde_json::json;

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn ecdsa_tokens_sign_and_verify_with_every_key_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let private = write(dir.path(), "sa.key", &key.serialize_pem());
    let public = write(dir.path(), "sa.pub", &key.public_key_pem());
    let signer = Signer::from_file(&private).unwrap();
    assert_eq!(signer.public_key().algorithm, Algorithm::Es256);
    let keys = public_keys(&public).unwrap();
    assert_eq!(keys, vec![signer.public_key().clone()]);
    let token = signer
        .sign(&json!({"sub": "system:serviceaccount:a:b"}))
        .unwrap();
    assert_eq!(
        verify(&token, &keys).unwrap()["sub"],
        "system:serviceaccount:a:b"
    );
    // A private key file verifies too (its public half).
    assert_eq!(public_keys(&private).unwrap(), keys);
    // Tampering breaks it; another key does not verify it.
    let mut parts: Vec<&str> = token.split('.').collect();
    let forged = B64URL.encode(json!({"sub": "system:admin"}).to_string());
    parts[1] = &forged;
    assert_eq!(verify(&parts.join("."), &keys), Err(JwtError::Signature));
    let other = rcgen::KeyPair::generate().unwrap();
    let other = public_keys(&write(dir.path(), "o.pub", &other.public_key_pem())).unwrap();
    assert_eq!(verify(&token, &other), Err(JwtError::Signature));
    assert!(matches!(verify("a.b", &keys), Err(JwtError::Malformed(_))));
    assert_eq!(signer.public_key().jwk()["crv"], "P-256");
}

#[test]
fn rsa_tokens_sign_and_verify_from_pkcs1_and_pkcs8() {
    use rsa::pkcs1::EncodeRsaPrivateKey as _;
    use rsa::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};
    let dir = tempfile::tempdir().unwrap();
    let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).unwrap();
    let pkcs1 = write(dir.path(), "k1", &key.to_pkcs1_pem(LineEnding::LF).unwrap());
    let pkcs8 = write(dir.path(), "k8", &key.to_pkcs8_pem(LineEnding::LF).unwrap());
    let public = write(
        dir.path(),
        "pub",
        &key.to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
    );
    let keys = public_keys(&public).unwrap();
    assert_eq!(keys[0].algorithm, Algorithm::Rs256);
    for file in [&pkcs1, &pkcs8] {
        let signer = Signer::from_file(file).unwrap();
        let token = signer.sign(&json!({"n": 1})).unwrap();
        assert_eq!(verify(&token, &keys).unwrap()["n"], 1);
    }
    let jwk = keys[0].jwk();
    assert_eq!(
        (jwk["kty"].as_str(), jwk["e"].as_str()),
        (Some("RSA"), Some("AQAB"))
    );
}

#[test]
fn sec1_ec_keys_are_read() {
    use p256::pkcs8::LineEnding;
    let dir = tempfile::tempdir().unwrap();
    let secret = p256::SecretKey::random(&mut rand::thread_rng());
    let sec1 = write(
        dir.path(),
        "ec.key",
        &secret.to_sec1_pem(LineEnding::LF).unwrap(),
    );
    let signer = Signer::from_file(&sec1).unwrap();
    let token = signer.sign(&json!({})).unwrap();
    assert!(verify(&token, &[signer.public_key().clone()]).is_ok());
    let garbage = write(
        dir.path(),
        "g",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    );
    assert!(matches!(
        Signer::from_file(&garbage),
        Err(JwtError::Key { .. })
    ));
}
