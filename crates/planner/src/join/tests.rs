#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use base64::Engine as _;
use oi_api::common::find_condition;
use oi_api::{NodeJoinRequestSpec, ObjectKey, ObjectMeta, VpnPeer};
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
        vpn_public_key: String::new(),
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
    let answer = answerer.answer(&req, None, NOW);
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
    let answer = answerer.answer(&req, None, NOW);
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
    let answer = answerer.answer(&req, None, NOW);
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
    let answer = answerer.answer(&req, None, NOW);
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

fn prepared_vpn(cidr: &str) -> Cluster {
    let mut c = cluster("c", 1, true);
    c.spec.vpn.cidr = cidr.into();
    let w = crate::prepare(world(basic(), vec![c]), NOW).world;
    w.clusters[&ObjectKey::new("default", "c")].clone()
}

fn vpn_plan(c: &Cluster) -> VpnPlan {
    VpnPlan::new(c, "public-1", "c-ingress", "/etc/x/vpn.conf".into(), 30001).unwrap()
}

/// A request of the new form: the worker's own WireGuard public key, sealed.
fn vpn_request(c: &Cluster, name: &str) -> (NodeJoinRequest, SymmetricKey, String) {
    let (mut req, key) = request(c, name, None, &[]);
    let (_, public) = oi_pki::generate_wireguard_keys();
    req.spec.vpn_public_key = key.seal(public.as_bytes()).unwrap();
    (req, key, public)
}

fn with_status(mut r: NodeJoinRequest, answer: &Answer) -> NodeJoinRequest {
    r.status = answer.status.clone();
    r
}

fn sans_of(pem: &str) -> Vec<String> {
    oi_pki::inspect_certificate(pem).unwrap().sans
}

#[test]
fn a_vpn_answer_gives_an_address_the_endpoint_and_no_private_key_of_a_worker_that_has_one() {
    let c = prepared_vpn("10.0.0.0/16");
    let plan = vpn_plan(&c);
    let answerer = JoinAnswerer::new(&c).unwrap();
    let (req, key, public) = vpn_request(&c, "w1");
    let mut peers = Vec::new();
    let answer = answerer.answer(&req, Some((&plan, &mut peers)), NOW);
    assert_eq!(answer.refused, None);
    let v = answer.status.vpn.as_ref().unwrap();
    assert_eq!(open(&key, &v.cidr), "10.0.0.0/16");
    assert_eq!(open(&key, &v.address), "10.0.0.2/16");
    assert_eq!(open(&key, &v.endpoint), c.status.vpn_server_endpoint);
    assert!(!c.status.vpn_server_endpoint.is_empty());
    assert_eq!(open(&key, &v.endpoint_public_key), c.spec.vpn.public_key);
    assert_eq!(v.peer_private_key, "", "the worker's key never leaves it");
    assert_eq!(peers.len(), 1);
    assert_eq!(peers[0].name, "worker-w1");
    assert_eq!(peers[0].address, "10.0.0.2/16");
    assert_eq!(peers[0].public_key, public);
    assert_eq!(peers[0].private_key, "");
    // Its VPN address is a SAN of its serving certificate: the API servers reach it there.
    let serving = open(&key, &answer.status.kubelet_server_certificate);
    assert!(sans_of(&serving).contains(&"10.0.0.2".to_string()));
}

#[test]
fn oneinfras_form_gets_a_key_pair_made_for_it() {
    let c = prepared_vpn("10.0.0.0/16");
    let plan = vpn_plan(&c);
    let answerer = JoinAnswerer::new(&c).unwrap();
    let (req, key) = request(&c, "w1", None, &[]);
    let mut peers = Vec::new();
    let answer = answerer.answer(&req, Some((&plan, &mut peers)), NOW);
    let private = open(&key, &answer.status.vpn.as_ref().unwrap().peer_private_key);
    assert_eq!(
        oi_pki::wireguard_public_key(&private).unwrap(),
        peers[0].public_key
    );
    assert_eq!(peers[0].private_key, private);
}

#[test]
fn a_bad_vpn_key_or_a_full_cidr_is_refused_with_nothing_issued_and_no_peer() {
    let c = prepared_vpn("10.9.0.0/30");
    let plan = vpn_plan(&c);
    let answerer = JoinAnswerer::new(&c).unwrap();
    let (mut req, key) = request(&c, "w1", None, &[]);
    req.spec.vpn_public_key = key.seal(b"not a key").unwrap();
    let mut peers = Vec::new();
    let answer = answerer.answer(&req, Some((&plan, &mut peers)), NOW);
    assert_eq!(answer.refused, Some(Refusal::InvalidRequest));
    assert!(peers.is_empty());
    // /30 holds the endpoint and one worker.
    let (first, _, _) = vpn_request(&c, "w1");
    assert_eq!(
        answerer
            .answer(&first, Some((&plan, &mut peers)), NOW)
            .refused,
        None
    );
    let (second, _, _) = vpn_request(&c, "w2");
    let answer = answerer.answer(&second, Some((&plan, &mut peers)), NOW);
    assert_eq!(answer.refused, Some(Refusal::NoVpnAddress));
    assert_eq!(
        issued(&answer),
        Some((ConditionStatus::False, "NoVPNAddress".to_string()))
    );
    assert!(answer.status.kube_config.is_empty());
    assert_eq!(peers.len(), 1);
}

#[test]
fn a_pass_answers_marks_registered_nodes_and_forgets_deleted_ones() {
    let c = prepared_vpn("10.0.0.0/16");
    let answerer = JoinAnswerer::new(&c).unwrap();
    let plan = vpn_plan(&c);
    // w1 and w2 join in one pass.
    let (r1, _, _) = vpn_request(&c, "w1");
    let (r2, _, _) = vpn_request(&c, "w2");
    let step = join_step(
        &answerer,
        Some(&plan),
        &[r1.clone(), r2.clone()],
        &BTreeSet::new(),
        NOW,
    );
    assert_eq!(step.answers.len(), 2);
    assert!(step.answers.iter().all(|(_, a)| a.refused.is_none()));
    let peers = step.peers.clone().unwrap();
    let addresses: Vec<&str> = peers.iter().map(|p| p.address.as_str()).collect();
    assert_eq!(addresses, ["10.0.0.2/16", "10.0.0.3/16"]);
    let r1 = with_status(r1, &step.answers[0].1);
    let r2 = with_status(r2, &step.answers[1].1);

    // Both joined, neither registered yet, at their addresses.
    let joined = joined_nodes(&[r1.clone(), r2.clone()], &step, &peers, NOW);
    let seen: Vec<(&str, bool, &str)> = joined
        .iter()
        .map(|n| (n.name.as_str(), n.registered, n.vpn_address.as_str()))
        .collect();
    assert_eq!(
        seen,
        [("w1", false, "10.0.0.2/16"), ("w2", false, "10.0.0.3/16")]
    );
    assert!(joined.iter().all(|n| n.issued_at == Some(NOW)));

    // Their Nodes register: each request is marked once, nothing else happens.
    let mut c2 = c.clone();
    c2.status.vpn_peers = peers;
    let plan = vpn_plan(&c2);
    let nodes: BTreeSet<String> = ["w1".to_string(), "w2".to_string()].into();
    let step = join_step(
        &answerer,
        Some(&plan),
        &[r1.clone(), r2.clone()],
        &nodes,
        NOW,
    );
    assert_eq!(step.registered, ["w1", "w2"]);
    assert!(step.answers.is_empty() && step.forget.is_empty());
    let joined = joined_nodes(&[r1.clone(), r2.clone()], &step, &plan.peers, NOW);
    assert!(joined.iter().all(|n| n.registered), "{joined:?}");
    assert_eq!(step.peers.as_ref().unwrap(), &plan.peers);
    let mark = |mut r: NodeJoinRequest| {
        set_condition(
            &mut r.status.conditions,
            NODE_REGISTERED,
            ConditionStatus::True,
            NODE_REGISTERED,
            "",
            NOW,
        );
        r
    };
    let (r1, r2) = (mark(r1), mark(r2));

    // Node w1 is deleted: its request is forgotten and its peer goes; w3 joins and is handed
    // w1's address.
    let (r3, _, _) = vpn_request(&c, "w3");
    let nodes: BTreeSet<String> = ["w2".to_string()].into();
    let step = join_step(
        &answerer,
        Some(&plan),
        &[r1.clone(), r2.clone(), r3.clone()],
        &nodes,
        NOW,
    );
    assert_eq!(step.forget, ["w1"]);
    // w1 is no longer joined; w3 is, answered now, not registered.
    let later = NOW + time::Duration::hours(1);
    let joined = joined_nodes(
        &[r1, r2.clone(), r3],
        &step,
        step.peers.as_deref().unwrap(),
        later,
    );
    let seen: Vec<(&str, bool, &str)> = joined
        .iter()
        .map(|n| (n.name.as_str(), n.registered, n.vpn_address.as_str()))
        .collect();
    assert_eq!(
        seen,
        [("w2", true, "10.0.0.3/16"), ("w3", false, "10.0.0.2/16")]
    );
    assert_eq!(
        joined[0].issued_at,
        Some(NOW),
        "answered before: its Issued time"
    );
    assert_eq!(joined[1].issued_at, Some(later), "answered in this pass");
    assert!(step.registered.is_empty());
    let peers = step.peers.unwrap();
    let names: Vec<(&str, &str)> = peers
        .iter()
        .map(|p| (p.name.as_str(), p.address.as_str()))
        .collect();
    assert_eq!(
        names,
        [("worker-w2", "10.0.0.3/16"), ("worker-w3", "10.0.0.2/16")]
    );

    // A request deleted by hand: its peer goes too.
    let step = join_step(&answerer, Some(&plan), &[r2], &nodes, NOW);
    let names: Vec<&str> = step
        .peers
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["worker-w2"]);
}

#[test]
fn a_peer_the_recorded_status_lost_is_rebuilt_from_its_request() {
    let c = prepared_vpn("10.0.0.0/16");
    let answerer = JoinAnswerer::new(&c).unwrap();
    let plan = vpn_plan(&c);
    let (r1, _, public) = vpn_request(&c, "w1");
    let (r2, _) = request(&c, "w2", None, &[]);
    let step = join_step(
        &answerer,
        Some(&plan),
        &[r1.clone(), r2.clone()],
        &BTreeSet::new(),
        NOW,
    );
    let before = step.peers.clone().unwrap();
    let r1 = with_status(r1, &step.answers[0].1);
    let r2 = with_status(r2, &step.answers[1].1);
    // The plan knows no peer (a world written before they joined): both come back as they
    // were, keys included, and a peer not named after a worker is left alone.
    let mut c2 = c.clone();
    c2.status.vpn_peers = vec![VpnPeer {
        name: "admin-laptop".into(),
        address: "10.0.200.1/16".into(),
        private_key: String::new(),
        public_key: public.clone(),
    }];
    let step = join_step(
        &answerer,
        Some(&vpn_plan(&c2)),
        &[r1, r2],
        &BTreeSet::new(),
        NOW,
    );
    assert!(step.answers.is_empty());
    let mut expected = before.clone();
    expected.push(c2.status.vpn_peers[0].clone());
    expected.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(step.peers.unwrap(), expected);
    assert_eq!(before[0].public_key, public);
}

#[test]
fn a_pass_without_the_vpn_answers_and_tracks_nodes_alike() {
    let c = prepared();
    let answerer = JoinAnswerer::new(&c).unwrap();
    let (r1, _) = request(&c, "w1", None, &[]);
    let (r2, _) = request(&c, "w2", None, &[]);
    let nodes: BTreeSet<String> = ["w2".to_string()].into();
    let step = join_step(&answerer, None, &[r1, r2], &nodes, NOW);
    assert_eq!(step.peers, None);
    assert_eq!(step.answers[0].1.refused, None);
    assert!(step.answers[0].1.status.vpn.is_none());
    assert_eq!(step.answers[1].1.refused, Some(Refusal::NodeNameTaken));
}
