use super::*;
use crate::manifest::parse_raw;

const CLUSTER: &str = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Cluster
metadata:
  name: c1
  namespace: team-a
  uid: 0b7c5d3e-1111-4222-8333-944445555666
spec:
  apiServer:
    ca:
      certificate: API-CA-CERT
      privateKey: API-CA-KEY
    serviceAccount:
      publicKey: SA-PUB
      privateKey: SA-KEY
  etcdServer:
    ca:
      certificate: ETCD-CA-CERT
      privateKey: ETCD-CA-KEY
  certificateAuthorities:
    etcdPeer:
      certificate: PEER-CA-CERT
      privateKey: PEER-CA-KEY
  joinKey:
    publicKey: JOIN-PUB
    privateKey: JOIN-KEY
status:
  clientCertificates:
    admin:
      certificate: ADMIN-CERT
      privateKey: ADMIN-KEY
";

fn value(text: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap()
}

fn secret_named<'a>(secrets: &'a [Value], name: &str) -> &'a Value {
    secrets
        .iter()
        .find(|s| s["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no Secret {name}: {secrets:?}"))
}

fn decoded(secret: &Value, key: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD
        .decode(secret["data"][key].as_str().unwrap())
        .unwrap();
    String::from_utf8(b).unwrap()
}

fn raw(texts: &[&str]) -> Vec<RawDocument> {
    texts
        .iter()
        .enumerate()
        .flat_map(|(i, t)| parse_raw(t, &format!("input-{i}")).unwrap())
        .collect()
}

#[test]
fn keys_move_into_secrets_by_cluster_api_names_and_back_unchanged() {
    let original = value(CLUSTER);
    let mut object = original.clone();
    let secrets = externalize(Kind::Cluster, &mut object).unwrap();
    let text = serde_yaml_ng::to_string(&object).unwrap();
    assert!(!text.contains("privateKey:"), "{text}");
    assert!(!text.contains("-KEY"), "{text}");
    // The certificates and public keys stay.
    assert!(
        text.contains("API-CA-CERT") && text.contains("SA-PUB"),
        "{text}"
    );
    let names: BTreeSet<&str> = secrets
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "c1-ca",
            "c1-sa",
            "c1-etcd",
            "c1-certificate-authorities-etcd-peer",
            "c1-join-key",
            "c1-client-certificates-admin",
        ])
    );
    let ca = secret_named(&secrets, "c1-ca");
    assert_eq!(ca["type"].as_str(), Some("kubernetes.io/tls"));
    assert_eq!(ca["metadata"]["namespace"].as_str(), Some("team-a"));
    assert_eq!(decoded(ca, "tls.crt"), "API-CA-CERT");
    assert_eq!(decoded(ca, "tls.key"), "API-CA-KEY");
    assert_eq!(
        ca["metadata"]["annotations"][KEYS_OF].as_str(),
        Some("Cluster/c1")
    );
    let owner = &ca["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"].as_str(), Some("Cluster"));
    assert_eq!(
        owner["uid"].as_str(),
        Some("0b7c5d3e-1111-4222-8333-944445555666")
    );
    let sa = secret_named(&secrets, "c1-sa");
    assert_eq!(sa["type"].as_str(), Some("Opaque"));
    assert_eq!(decoded(sa, "tls.crt"), "SA-PUB");
    assert_eq!(decoded(sa, "tls.key"), "SA-KEY");
    assert_eq!(
        object["spec"]["apiServer"]["ca"][PRIVATE_KEY_REF],
        value("{name: c1-ca, key: tls.key}")
    );

    // Back: the Secrets in another input, after the object.
    let secrets_text: Vec<String> = secrets
        .iter()
        .map(|s| serde_yaml_ng::to_string(s).unwrap())
        .collect();
    let mut documents = raw(&[&text, &secrets_text.join("---\n")]);
    assert!(resolve(&mut documents).unwrap());
    assert_eq!(documents[0].value, original);
}

#[test]
fn a_world_without_references_is_left_alone() {
    let mut documents = raw(&[CLUSTER]);
    assert!(!resolve(&mut documents).unwrap());
    assert_eq!(documents[0].value, value(CLUSTER));
}

#[test]
fn an_object_without_uid_gets_no_owner_and_objects_in_lists_resolve() {
    let mut object = value(&CLUSTER.replace("  uid: 0b7c5d3e-1111-4222-8333-944445555666\n", ""));
    let secrets = externalize(Kind::Cluster, &mut object).unwrap();
    assert!(
        secrets
            .iter()
            .all(|s| s["metadata"].get("ownerReferences").is_none())
    );
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {}\n",
        serde_yaml_ng::to_string(&object)
            .unwrap()
            .trim_end()
            .replace('\n', "\n  ")
    );
    let secrets_text: Vec<String> = secrets
        .iter()
        .map(|s| serde_yaml_ng::to_string(s).unwrap())
        .collect();
    let mut documents = raw(&[&secrets_text.join("---\n"), &list]);
    assert!(resolve(&mut documents).unwrap());
    let item = &documents.last().unwrap().value["items"][0];
    assert_eq!(
        item["spec"]["joinKey"]["privateKey"].as_str(),
        Some("JOIN-KEY")
    );
}

#[test]
fn a_reference_that_cannot_be_resolved_names_its_field_and_why() {
    let mut object = value(CLUSTER);
    let secrets = externalize(Kind::Cluster, &mut object).unwrap();
    let text = serde_yaml_ng::to_string(&object).unwrap();
    let others: Vec<String> = secrets
        .iter()
        .filter(|s| s["metadata"]["name"].as_str() != Some("c1-etcd"))
        .map(|s| serde_yaml_ng::to_string(s).unwrap())
        .collect();
    let error = |texts: &[&str]| resolve(&mut raw(texts)).unwrap_err().to_string();

    let missing = error(&[&text, &others.join("---\n")]);
    assert!(
        missing.contains("spec.etcdServer.ca.privateKeyRef")
            && missing.contains("Secret team-a/c1-etcd is not among the inputs"),
        "{missing}"
    );
    // In another namespace it is not found either.
    let etcd = serde_yaml_ng::to_string(secret_named(&secrets, "c1-etcd")).unwrap();
    let elsewhere = etcd.replace("namespace: team-a", "namespace: team-b");
    let all = format!("{}---\n{elsewhere}", others.join("---\n"));
    assert!(error(&[&text, &all]).contains("is not among the inputs"));

    let no_key = etcd.replace("tls.key:", "other.key:");
    let all = format!("{}---\n{no_key}", others.join("---\n"));
    let e = error(&[&text, &all]);
    assert!(
        e.contains("Secret team-a/c1-etcd has no key `tls.key`"),
        "{e}"
    );

    let mut bad = value(&etcd);
    bad["data"]["tls.key"] = "not base64!".into();
    let all = format!(
        "{}---\n{}",
        others.join("---\n"),
        serde_yaml_ng::to_string(&bad).unwrap()
    );
    let e = error(&[&text, &all]);
    assert!(e.contains("not base64"), "{e}");

    let both = text.replacen(
        "privateKeyRef:",
        "privateKey: INLINE\n      privateKeyRef:",
        1,
    );
    let e = error(&[&both, &secrets_text(&secrets)]);
    assert!(e.contains("both `privateKey` and `privateKeyRef`"), "{e}");

    let shape = text.replacen("key: tls.key", "key: tls.key\n        extra: 1", 1);
    let e = error(&[&shape, &secrets_text(&secrets)]);
    assert!(e.contains("expected `{name, key}`"), "{e}");
}

fn secrets_text(secrets: &[Value]) -> String {
    secrets
        .iter()
        .map(|s| serde_yaml_ng::to_string(s).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

#[test]
fn two_fields_sharing_a_secret_name_are_refused() {
    let mut object = value(
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Component
metadata: {name: x}
status:
  clientCertificates:
    a-b: {certificate: C1, privateKey: K1}
  client:
    certificates:
      aB: {certificate: C2, privateKey: K2}
",
    );
    let e = externalize(Kind::Component, &mut object).unwrap_err();
    assert!(e.contains("x-client-certificates-a-b"), "{e}");
}

#[test]
fn secret_names() {
    assert_eq!(secret_name(Kind::Cluster, "c", "spec.apiServer.ca"), "c-ca");
    assert_eq!(
        secret_name(
            Kind::Component,
            "c-control-plane-0",
            "status.serverCertificates.etcd-peer"
        ),
        "c-control-plane-0-server-certificates-etcd-peer"
    );
    assert!(is_secret_name("c-ca"));
    assert!(!is_secret_name(&"a".repeat(254)));
    assert!(!is_secret_name("C-ca"));
}

#[test]
fn list_items_are_named_by_their_name_and_secrets_carry_the_kind_label() {
    let mut object = value(
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Cluster
metadata: {name: c, namespace: ops}
status:
  vpnPeers:
  - {name: worker-1, address: 10.0.0.2/32, privateKey: P1, publicKey: Q1}
  - {address: 10.0.0.3/32, privateKey: P2, publicKey: Q2}
",
    );
    let secrets = externalize(Kind::Cluster, &mut object).unwrap();
    let names: Vec<&str> = secrets
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c-vpn-peers-worker-1", "c-vpn-peers-1"]);
    for secret in &secrets {
        assert_eq!(secret["metadata"]["labels"][KEYS_OF_KIND], "Cluster");
        assert_eq!(secret["type"], "Opaque");
    }
    assert_eq!(
        object["status"]["vpnPeers"][0]["privateKeyRef"]["name"],
        "c-vpn-peers-worker-1"
    );
    assert!(!holds_inline_keys(&object));
    assert_eq!(
        referenced_secrets(&object),
        BTreeSet::from([
            "c-vpn-peers-1".to_string(),
            "c-vpn-peers-worker-1".to_string()
        ])
    );
}

#[test]
fn one_object_resolves_from_a_lookup_and_says_which_field_failed() {
    let text = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1
kind: Cluster
metadata: {name: c}
spec:
  apiServer:
    ca: {certificate: C, privateKey: K}
";
    let original = value(text);
    assert!(holds_inline_keys(&original));
    let mut object = original.clone();
    let secrets = externalize(Kind::Cluster, &mut object).unwrap();
    let held: BTreeMap<String, String> = secrets
        .iter()
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap().to_string(),
                decoded(s, "tls.key"),
            )
        })
        .collect();
    let mut resolved = object.clone();
    let referenced = resolve_object(&mut resolved, "", &mut |name, key, public| {
        assert_eq!(key, "tls.key");
        assert_eq!(public, Some("C"));
        held.get(name).cloned().ok_or_else(|| "absent".to_string())
    })
    .unwrap();
    assert!(referenced);
    assert_eq!(resolved, original);

    let (field, reason) = resolve_object(&mut object.clone(), "", &mut |name, _, _| {
        Err(format!("Secret {name} is gone"))
    })
    .unwrap_err();
    assert_eq!(field, "spec.apiServer.ca.privateKeyRef");
    assert_eq!(reason, "Secret c-ca is gone");
}
