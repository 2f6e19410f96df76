#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

const ISSUER: &str = "https://idp.example:8443/realms/ops";

/// An RSA signer and its verification key, as an issuer's JWKS publishes it.
fn rsa_signer(dir: &std::path::Path, name: &str) -> (jwt::Signer, PublicKey) {
    use rsa::pkcs8::{EncodePrivateKey as _, LineEnding};
    let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, key.to_pkcs8_pem(LineEnding::LF).unwrap()).unwrap();
    let signer = jwt::Signer::from_file(&path).unwrap();
    // Through its JWK and back: what a fetched JWKS gives.
    let public = jwt::from_jwk(&signer.public_key().jwk()).unwrap();
    assert_eq!(&public, signer.public_key());
    (signer, public)
}

fn tls() -> Arc<ClientConfig> {
    crate::tls::client_config(rustls::RootCertStore::empty(), None, "test").unwrap()
}

fn config() -> OidcConfig {
    OidcConfig {
        issuer_url: ISSUER.into(),
        client_id: "kubernetes".into(),
        username_claim: "sub".into(),
        groups_claim: Some("groups".into()),
        ..OidcConfig::default()
    }
}

fn claims(now: f64) -> Value {
    json!({"iss": ISSUER, "aud": ["other", "kubernetes"], "sub": "alice", "exp": now + 300.0,
           "iat": now, "groups": ["ops", "dev"], "email": "alice@example.com",
           "email_verified": true})
}

#[tokio::test]
async fn an_id_token_of_our_issuer_is_its_user_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let (signer, public) = rsa_signer(dir.path(), "idp.key");
    let oidc = Oidc::with_keys(config(), tls(), vec![public]);
    let token = signer.sign(&claims(now_seconds())).unwrap();
    assert!(oidc.claims_to_be_ours(&token));
    let user = oidc.authenticate(&token).await.unwrap();
    assert_eq!(user.name, format!("{ISSUER}#alice"));
    assert_eq!(user.groups, ["ops", "dev"]);

    // Another issuer's key: refused; a token of another issuer is not ours at all.
    let (stranger, _) = rsa_signer(dir.path(), "other.key");
    let forged = stranger.sign(&claims(now_seconds())).unwrap();
    let why = oidc.authenticate(&forged).await.unwrap_err();
    assert!(why.contains("signature"), "{why}");
    let mut theirs = claims(now_seconds());
    theirs["iss"] = json!("https://elsewhere.example");
    assert!(!oidc.claims_to_be_ours(&stranger.sign(&theirs).unwrap()));

    // An algorithm not allowed (ES256 unless --oidc-signing-algs lists it).
    let key = rcgen::KeyPair::generate().unwrap();
    let path = dir.path().join("ec.key");
    std::fs::write(&path, key.serialize_pem()).unwrap();
    let ec = jwt::Signer::from_file(&path).unwrap();
    let ec_public = jwt::from_jwk(&ec.public_key().jwk()).unwrap();
    let oidc_ec = Oidc::with_keys(config(), tls(), vec![ec_public.clone()]);
    let why = oidc_ec
        .authenticate(&ec.sign(&claims(now_seconds())).unwrap())
        .await
        .unwrap_err();
    assert_eq!(why, "ID token signed with \"ES256\", not one of RS256");
    let allowed = OidcConfig {
        signing_algs: vec!["ES256".into()],
        ..config()
    };
    let oidc_ec = Oidc::with_keys(allowed, tls(), vec![ec_public]);
    assert!(
        oidc_ec
            .authenticate(&ec.sign(&claims(now_seconds())).unwrap())
            .await
            .is_ok()
    );
}

#[test]
fn claims_are_checked_as_kube_apiserver_checks_them() {
    let oidc = Oidc::with_keys(config(), tls(), Vec::new());
    let now = 1_800_000_000.0;
    let refused = |edit: &dyn Fn(&mut Value)| {
        let mut c = claims(now);
        edit(&mut c);
        oidc.user(&c, now).unwrap_err()
    };
    assert!(oidc.user(&claims(now), now).is_ok());
    assert_eq!(
        refused(&|c| c["aud"] = json!("dashboard")),
        "ID token for [\"dashboard\"], not for client kubernetes"
    );
    assert_eq!(
        refused(&|c| c["exp"] = json!(now - 10.0)),
        "ID token expired 10 s ago"
    );
    assert_eq!(refused(&|c| c["exp"] = Value::Null), "ID token without exp");
    assert_eq!(
        refused(&|c| c["nbf"] = json!(now + 600.0)),
        "ID token nbf is 600 s in the future"
    );
    assert_eq!(
        refused(&|c| c["iss"] = json!("https://elsewhere.example")),
        format!("ID token issued by \"https://elsewhere.example\", not {ISSUER}")
    );
    assert_eq!(
        refused(&|c| c["sub"] = json!(7)),
        "ID token without a string claim \"sub\""
    );
    assert_eq!(
        refused(&|c| c["groups"] = json!({"a": 1})),
        "ID token claim \"groups\" is neither a string nor a list: {\"a\":1}"
    );
    // A single group as a string; none when the claim is absent.
    let mut c = claims(now);
    c["groups"] = json!("ops");
    assert_eq!(oidc.user(&c, now).unwrap().groups, ["ops"]);
    c.as_object_mut().unwrap().remove("groups");
    assert!(oidc.user(&c, now).unwrap().groups.is_empty());

    // The email claim: no default prefix, and an unverified address is refused.
    let email = Oidc::with_keys(
        OidcConfig {
            username_claim: "email".into(),
            groups_prefix: Some("oidc:".into()),
            ..config()
        },
        tls(),
        Vec::new(),
    );
    let user = email.user(&claims(now), now).unwrap();
    assert_eq!(user.name, "alice@example.com");
    assert_eq!(user.groups, ["oidc:ops", "oidc:dev"]);
    let mut unverified = claims(now);
    unverified["email_verified"] = json!(false);
    assert_eq!(
        email.user(&unverified, now).unwrap_err(),
        "ID token: email not verified"
    );
    // Prefixes: "-" is none; any other is put before the name.
    for (prefix, name) in [("-", "alice"), ("oidc:", "oidc:alice")] {
        let o = Oidc::with_keys(
            OidcConfig {
                username_prefix: Some(prefix.into()),
                ..config()
            },
            tls(),
            Vec::new(),
        );
        assert_eq!(o.user(&claims(now), now).unwrap().name, name);
    }
    // Required claims.
    let required = Oidc::with_keys(
        OidcConfig {
            required_claims: [("hd".to_string(), "example.com".to_string())].into(),
            ..config()
        },
        tls(),
        Vec::new(),
    );
    assert_eq!(
        required.user(&claims(now), now).unwrap_err(),
        "ID token: required claim hd=example.com missing"
    );
    let mut with = claims(now);
    with["hd"] = json!("example.com");
    assert!(required.user(&with, now).is_ok());
}

#[test]
fn jwks_keys_are_read_and_unusable_ones_left_out() {
    let key = rcgen::KeyPair::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ec.key");
    std::fs::write(&path, key.serialize_pem()).unwrap();
    let signer = jwt::Signer::from_file(&path).unwrap();
    assert_eq!(
        jwt::from_jwk(&signer.public_key().jwk()).as_ref(),
        Some(signer.public_key())
    );
    let mut enc = signer.public_key().jwk();
    enc["use"] = json!("enc");
    assert_eq!(jwt::from_jwk(&enc), None);
    assert_eq!(jwt::from_jwk(&json!({"kty": "oct", "k": "AAAA"})), None);
    assert_eq!(
        jwt::from_jwk(&json!({"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA"})),
        None
    );
}
