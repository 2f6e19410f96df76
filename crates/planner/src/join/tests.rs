#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use base64::Engine as _;
use oi_api::common::find_condition;
use oi_api::{NodeJoinRequestSpec, ObjectKey, ObjectMeta};
use time::macros::datetime;

use super::*;
use crate::testutil::{basic, cluster, world};

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

fn prepared() -> Cluster {
    let w = crate::prepare(world(basic(), vec![cluster("c", 1, false)]), NOW).world;
    w.clusters[&ObjectKey::new("default", "c")].clone()
}

/// A request as `oi node join` makes it: a fresh key wrapped to the join key, the endpoint
/// and extra SANs sealed with it.
fn request(
    cluster: &Cluster,
    name: &str,
    endpoint: Option<&str>,
    sans: &[&str],
) -> (NodeJoinRequest, SymmetricKey) {
    let key = SymmetricKey::generate();
    let public = &cluster.spec.join_key.as_ref().unwrap().public_key;
    let seal = |s: &str| key.seal(s.as_bytes()).unwrap();
    let spec = NodeJoinRequestSpec {
        symmetric_key: key.wrap(public).unwrap(),
        api_server_endpoint: endpoint.map(seal).unwrap_or_default(),
        container_runtime_endpoint: seal("unix:///run/containerd/containerd.sock"),
        image_service_endpoint: seal("unix:///run/containerd/containerd.sock"),
        extra_sans: sans.iter().map(|s| seal(s)).collect(),
    };
    (NodeJoinRequest::new(ObjectMeta::named(name), spec), key)
}

fn open(key: &SymmetricKey, sealed: &str) -> String {
    String::from_utf8(key.open(sealed).unwrap()).unwrap()
}

fn issued(answer: &Answer) -> Option<(ConditionStatus, String)> {
    find_condition(&answer.status.conditions, ISSUED).map(|c| (c.status, c.reason.clone()))
}

#[test]
fn an_answer_gives_the_node_its_identity_its_serving_certificate_and_its_configuration() {
    let c = prepared();
    let answerer = JoinAnswerer::new(&c).unwrap();
    let (req, key) = request(&c, "worker-1", None, &["worker-1.example", "192.0.2.50"]);
    let answer = answerer.answer(&req, NOW);
    assert_eq!(answer.refused, None);
    assert_eq!(
        issued(&answer),
        Some((ConditionStatus::True, "Issued".to_string()))
    );
    let s = &answer.status;
    assert_eq!(open(&key, &s.kubernetes_version), "1.37.1");
    assert!(s.vpn.is_none());

    // The kubeconfig: the cluster's endpoint and CA, system:node:worker-1 in system:nodes.
    let kubeconfig: serde_json::Value =
        serde_yaml_ng::from_str(&open(&key, &s.kube_config)).unwrap();
    let b64 = |v: &serde_json::Value| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let server = &kubeconfig["clusters"][0]["cluster"];
    assert_eq!(server["server"], c.status.api_server_endpoint.as_str());
    assert_eq!(
        b64(&server["certificate-authority-data"]),
        c.spec.api_server.ca.as_ref().unwrap().certificate
    );
    let user = &kubeconfig["users"][0]["user"];
    let (cert, key_pem) = (
        b64(&user["client-certificate-data"]),
        b64(&user["client-key-data"]),
    );
    let client_ca = c
        .spec
        .certificate_authorities
        .api_server_client
        .as_ref()
        .unwrap();
    oi_pki::check_leaf(&cert, &key_pem, Some(&client_ca.certificate)).unwrap();
    let info = oi_pki::inspect_certificate(&cert).unwrap();
    assert_eq!(info.common_name.as_deref(), Some("system:node:worker-1"));
    assert_eq!(info.organizations, ["system:nodes"]);

    // The serving certificate: the kubelet CA, the node name and the extra SANs.
    let serving = open(&key, &s.kubelet_server_certificate);
    let serving_key = open(&key, &s.kubelet_server_private_key);
    let kubelet_ca = c.spec.certificate_authorities.kubelet.as_ref().unwrap();
    oi_pki::check_leaf(&serving, &serving_key, Some(&kubelet_ca.certificate)).unwrap();
    let info = oi_pki::inspect_certificate(&serving).unwrap();
    for san in ["worker-1", "worker-1.example", "192.0.2.50"] {
        assert!(
            info.sans.iter().any(|s| s == san),
            "{san} in {:?}",
            info.sans
        );
    }
    assert_eq!(info.not_after - NOW, KUBELET_CERTIFICATE_LIFETIME);
    assert_eq!(
        open(&key, &s.kubelet_client_ca_certificate),
        c.spec
            .certificate_authorities
            .kubelet_client
            .as_ref()
            .unwrap()
            .certificate
    );
    let config = open(&key, &s.kubelet_config);
    assert_eq!(config, kubelet_config("10.96.0.10"));
    assert!(config.contains("clientCAFile: /etc/oneinfra/kubelet-client-ca.crt\n"));
    assert!(config.contains("  anonymous:\n    enabled: false\n"));

    // Nothing readable without the key; no key in Debug.
    let shown = format!("{answer:?} {answerer:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    assert!(!shown.contains("system:node:worker-1"));
}

#[test]
fn the_endpoint_a_request_names_is_the_kubeconfigs() {
    let c = prepared();
    let answerer = JoinAnswerer::new(&c).unwrap();
    let (req, key) = request(&c, "w", Some("https://203.0.113.7:6443"), &[]);
    let answer = answerer.answer(&req, NOW);
    let kubeconfig = open(&key, &answer.status.kube_config);
    assert!(
        kubeconfig.contains("server: https://203.0.113.7:6443"),
        "{kubeconfig}"
    );
}

#[test]
fn a_request_for_another_cluster_or_altered_is_refused_with_nothing_issued() {
    let c = prepared();
    let answerer = JoinAnswerer::new(&c).unwrap();
    // Wrapped to another cluster's join key.
    let mut d = c.clone();
    let other = oi_pki::KeyPairPem::generate(oi_pki::KeyAlgorithm::EcdsaP256).unwrap();
    d.spec.join_key.as_mut().unwrap().public_key = other.public_key_pem;
    let (req, _) = request(&d, "w", None, &[]);
    let answer = answerer.answer(&req, NOW);
    assert_eq!(answer.refused, Some(Refusal::InvalidSymmetricKey));
    assert_eq!(
        issued(&answer),
        Some((ConditionStatus::False, "InvalidSymmetricKey".to_string()))
    );
    assert!(answer.status.kube_config.is_empty());
    assert!(answer.status.kubelet_server_private_key.is_empty());

    // A SAN sealed with another key.
    let (mut req, _) = request(&c, "w", None, &["a"]);
    req.spec
        .extra_sans
        .push(SymmetricKey::generate().seal(b"b").unwrap());
    let answer = answerer.answer(&req, NOW);
    assert_eq!(answer.refused, Some(Refusal::InvalidRequest));
    let condition = find_condition(&answer.status.conditions, ISSUED).unwrap();
    assert_eq!(
        condition.message,
        "spec.extraSANs[1] does not open with the request's key"
    );
    assert!(answer.status.kube_config.is_empty());

    // A name a Node holds.
    let taken = answerer.refuse_taken(&req, NOW);
    assert_eq!(taken.refused, Some(Refusal::NodeNameTaken));
    assert!(
        find_condition(&taken.status.conditions, ISSUED)
            .unwrap()
            .message
            .contains("a Node named \"w\" is registered already")
    );
}

#[test]
fn a_cluster_without_its_keys_cannot_answer() {
    let mut c = prepared();
    c.spec.join_key = None;
    assert_eq!(
        JoinAnswerer::new(&c).unwrap_err(),
        "the cluster has no join key"
    );
    let mut c = prepared();
    c.spec.certificate_authorities.kubelet = None;
    assert_eq!(
        JoinAnswerer::new(&c).unwrap_err(),
        "the cluster has no kubelet CA"
    );
}
