use super::*;

/// A Secret as stored, from its JSON.
fn stored(value: &Value) -> Secret {
    serde_json::from_value(value.clone()).unwrap()
}

fn cluster(certificate: &str, key: &str) -> Value {
    serde_json::json!({
        "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "ops", "uid": "u-1"},
        "spec": {"apiServer": {"ca": {"certificate": certificate, "privateKey": key}}},
    })
}

#[test]
fn keys_move_into_owned_labelled_secrets_and_resolve_back() {
    let object = cluster("CERT-1", "KEY-1");
    assert!(holds_inline_keys(&object));
    let (body, secrets) = externalize(Kind::Cluster, &object).unwrap();
    assert!(!holds_inline_keys(&body));
    assert_eq!(
        body.pointer("/spec/apiServer/ca/privateKeyRef"),
        Some(&serde_json::json!({"name": "c-ca", "key": "tls.key"}))
    );
    assert_eq!(secrets.len(), 1);
    let secret = &secrets[0];
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(secret["metadata"]["labels"][KEYS_OF_KIND], "Cluster");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert!(holds_keys_of(&stored(secret), Kind::Cluster, "c"));
    assert!(!holds_keys_of(&stored(secret), Kind::Cluster, "d"));

    let mut resolved = body.clone();
    resolve(
        &mut resolved,
        &BTreeMap::from([("c-ca".to_string(), stored(secret))]),
    )
    .unwrap();
    assert_eq!(resolved, object);

    let e = resolve(&mut body.clone(), &BTreeMap::new()).unwrap_err();
    assert_eq!(
        e,
        "spec.apiServer.ca.privateKeyRef: Secret ops/c-ca does not exist"
    );
}

#[test]
fn a_secret_already_holding_its_key_is_not_written_again() {
    let (_, secrets) = externalize(Kind::Cluster, &cluster("CERT-1", "KEY-1")).unwrap();
    let held = stored(&secrets[0]);
    assert_eq!(to_write(&secrets[0], Some(&held), Some("CERT-1")), None);
    assert_eq!(to_write(&secrets[0], None, None), Some(secrets[0].clone()));
}

/// A key changes (a rotation's step, a renewed client certificate): the Secret is written
/// before the object. Whether or not the object's own write then goes through, the stored
/// object resolves to the key of the certificate it holds; once it went through, the
/// previous pair is dropped.
#[test]
fn an_interrupted_write_never_parts_a_key_from_its_certificate() {
    let (_, old) = externalize(Kind::Cluster, &cluster("CERT-1", "KEY-1")).unwrap();
    let held = stored(&old[0]);
    let (_, new) = externalize(Kind::Cluster, &cluster("CERT-2", "KEY-2")).unwrap();

    // The Secret is written; the stored object still holds CERT-1.
    let written = to_write(&new[0], Some(&held), Some("CERT-1")).unwrap();
    let written = stored(&written);
    assert_eq!(
        key_for(&written, "tls.key", Some("CERT-1")).unwrap(),
        "KEY-1"
    );
    assert_eq!(
        key_for(&written, "tls.key", Some("CERT-2")).unwrap(),
        "KEY-2"
    );
    // The Secret's own pair is the new one (as Cluster API's tools read it).
    assert_eq!(written.value("tls.crt").unwrap().unwrap(), b"CERT-2");

    // The object's write failed, and the next run makes yet another key: the pair the
    // stored object uses is the one kept.
    let (_, newer) = externalize(Kind::Cluster, &cluster("CERT-3", "KEY-3")).unwrap();
    let again = stored(&to_write(&newer[0], Some(&written), Some("CERT-1")).unwrap());
    assert_eq!(key_for(&again, "tls.key", Some("CERT-1")).unwrap(), "KEY-1");
    assert_eq!(key_for(&again, "tls.key", Some("CERT-3")).unwrap(), "KEY-3");
    let e = key_for(&again, "tls.key", Some("CERT-2")).unwrap_err();
    assert!(e.contains("another certificate"), "{e}");

    // The object's write went through (it holds CERT-3 now): the previous pair goes.
    let committed = stored(&to_write(&newer[0], Some(&again), Some("CERT-3")).unwrap());
    assert!(committed.value(PREVIOUS_KEY).is_none());
    assert_eq!(to_write(&newer[0], Some(&committed), Some("CERT-3")), None);
}

#[test]
fn public_parts_are_found_beside_each_reference() {
    let (body, _) = externalize(Kind::Cluster, &cluster("CERT-1", "KEY-1")).unwrap();
    assert_eq!(
        public_parts(&body),
        BTreeMap::from([("c-ca".to_string(), "CERT-1".to_string())])
    );
}
