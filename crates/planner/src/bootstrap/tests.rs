#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use base64::Engine as _;
use oi_api::ObjectKey;
use time::macros::datetime;

use super::*;
use crate::testutil::{basic, cluster, world};

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);
const TOKEN: &str = "abcdef.0123456789abcdef";

/// A prepared cluster `c` with one join token.
fn prepared() -> Cluster {
    let mut c = cluster("c", 1, false);
    c.spec.join_tokens = vec![TOKEN.into()];
    let w = crate::prepare(world(basic(), vec![c]), NOW).world;
    w.clusters[&ObjectKey::new("default", "c")].clone()
}

fn find<'a>(i: &'a InCluster, describe: &str) -> &'a ClusterObject {
    i.objects
        .iter()
        .find(|o| o.describe == describe)
        .unwrap_or_else(|| panic!("no {describe}"))
}

#[test]
fn the_cluster_dns_address_is_the_tenth_of_the_service_cidr() {
    assert_eq!(cluster_dns_address("10.96.0.0/12").unwrap(), "10.96.0.10");
    assert_eq!(cluster_dns_address("fd00:10::/108").unwrap(), "fd00:10::a");
    assert!(
        cluster_dns_address("10.0.0.0/29")
            .unwrap_err()
            .contains("too small")
    );
    assert!(cluster_dns_address("banana").is_err());
}

#[test]
fn holds_compares_desired_fields_only_and_lists_element_by_element() {
    let desired = json!({"a": 1, "m": {"k": "v"}, "l": [{"x": 1}, {"y": 2}]});
    let served = json!({"a": 1, "uid": "u", "m": {"k": "v", "extra": true},
                        "l": [{"x": 1, "default": 0}, {"y": 2}]});
    assert!(holds(&served, &desired));
    assert!(!holds(
        &json!({"a": 2, "m": {"k": "v"}, "l": [{"x": 1}, {"y": 2}]}),
        &desired
    ));
    assert!(!holds(
        &json!({"a": 1, "m": {"k": "v"}, "l": [{"x": 1}]}),
        &desired
    ));
    assert!(!holds(
        &json!({"a": 1, "l": [{"x": 1}, {"y": 2}]}),
        &desired
    ));
}

#[test]
fn objects_come_in_oneinfras_order_with_the_join_key_last() {
    let c = prepared();
    let i = in_cluster(&c, NOW).unwrap();
    let order: Vec<&str> = i.objects.iter().map(|o| o.describe.as_str()).collect();
    assert_eq!(
        order.first().copied(),
        Some("CustomResourceDefinition nodejoinrequests.node.oneinfra.ereslibre.es")
    );
    assert_eq!(order[1], "Namespace oneinfra-system");
    assert_eq!(
        order.last().copied(),
        Some("ConfigMap oneinfra-system/oneinfra-join")
    );
    let position = |d: &str| order.iter().position(|o| *o == d).unwrap();
    assert!(
        position("ClusterRole oneinfra:node:join-requester")
            < position("Secret kube-system/bootstrap-token-abcdef")
    );
    assert!(
        position("Secret kube-system/bootstrap-token-abcdef")
            < position("DaemonSet kube-system/kube-proxy")
    );
    assert!(
        position("DaemonSet kube-system/kube-proxy") < position("Deployment kube-system/coredns")
    );
    // Every object's path is its collection and name, and names are unique.
    let mut paths: Vec<String> = i.objects.iter().map(ClusterObject::path).collect();
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), i.objects.len());
    assert_eq!(
        i.objects[0].body["spec"]["names"]["kind"],
        "NodeJoinRequest"
    );
    assert_eq!(
        i.objects[0].body["spec"]["names"]["shortNames"],
        json!(["njr", "njrs"])
    );
    assert_eq!(i.endpoint, c.status.api_server_endpoint);
    assert_eq!(i.join_tokens, [TOKEN]);
    assert_eq!(
        find(&i, "ConfigMap oneinfra-system/oneinfra-join").body["data"]["joinKey"],
        c.spec.join_key.as_ref().unwrap().public_key.as_str()
    );
}

#[test]
fn a_join_token_is_a_bootstrap_token_secret_in_the_oneinfra_group_and_never_shown() {
    let c = prepared();
    let i = in_cluster(&c, NOW).unwrap();
    let secret = find(&i, "Secret kube-system/bootstrap-token-abcdef");
    assert_eq!(secret.body["type"], "bootstrap.kubernetes.io/token");
    assert_eq!(secret.body["metadata"]["labels"][JOIN_TOKEN_LABEL], "true");
    let data = |k: &str| {
        let encoded = secret.body["data"][k].as_str().unwrap();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(data("token-id"), "abcdef");
    assert_eq!(data("token-secret"), "0123456789abcdef");
    assert_eq!(data("usage-bootstrap-authentication"), "true");
    assert_eq!(data("auth-extra-groups"), JOIN_TOKEN_GROUP);
    assert_eq!(
        i.prune,
        [Prune {
            collection: "/api/v1/namespaces/kube-system/secrets".into(),
            label_selector: format!("{JOIN_TOKEN_LABEL}=true"),
            kind: "Secret",
            keep: ["bootstrap-token-abcdef".to_string()].into(),
        }]
    );
    let shown = format!("{i:?}");
    assert!(!shown.contains("0123456789abcdef"), "{shown}");
    assert!(!shown.contains("MDEyMzQ1Njc4OWFiY2RlZg"), "{shown}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

#[test]
fn join_tokens_may_create_and_get_join_requests_and_read_the_join_key_only() {
    let c = prepared();
    let i = in_cluster(&c, NOW).unwrap();
    assert_eq!(
        find(&i, "ClusterRole oneinfra:node:join-requester").body["rules"],
        json!([{"apiGroups": ["node.oneinfra.ereslibre.es"],
                "resources": ["nodejoinrequests"], "verbs": ["create", "get"]}])
    );
    assert_eq!(
        find(&i, "Role oneinfra-system/oneinfra:node:join-requester").body["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"],
                "resourceNames": ["oneinfra-join"], "verbs": ["get"]}])
    );
    for binding in [
        "ClusterRoleBinding oneinfra:node:join-requester",
        "RoleBinding oneinfra-system/oneinfra:node:join-requester",
    ] {
        assert_eq!(
            find(&i, binding).body["subjects"],
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                    "name": "system:bootstrappers:oneinfra"}]),
            "{binding}"
        );
    }
    // Nothing else is bound to the join token group.
    let bound = i
        .objects
        .iter()
        .filter(|o| o.body["subjects"].to_string().contains(JOIN_TOKEN_GROUP))
        .count();
    assert_eq!(bound, 2);
}

#[test]
fn kube_proxy_and_coredns_reach_the_api_through_the_cluster_endpoint() {
    let c = prepared();
    let mut i = in_cluster(&c, NOW).unwrap();
    let endpoint = &c.status.api_server_endpoint;
    let (host, port) = endpoint
        .trim_start_matches("https://")
        .rsplit_once(':')
        .unwrap();
    let proxy = find(&i, "ConfigMap kube-system/kube-proxy");
    let kubeconfig = proxy.body["data"]["kubeconfig.conf"].as_str().unwrap();
    assert!(
        kubeconfig.contains(&format!("server: {endpoint}\n")),
        "{kubeconfig}"
    );
    let config = proxy.body["data"]["config.conf"].as_str().unwrap();
    assert!(config.contains("clusterCIDR: 10.244.0.0/16\n"), "{config}");
    let dns = find(&i, "Deployment kube-system/coredns");
    let env = &dns.body["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        env[0],
        json!({"name": "KUBERNETES_SERVICE_HOST", "value": host})
    );
    assert_eq!(
        env[1],
        json!({"name": "KUBERNETES_SERVICE_PORT", "value": port})
    );
    let corefile = find(&i, "ConfigMap kube-system/coredns").body["data"]["Corefile"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(corefile.contains("kubernetes cluster.local in-addr.arpa ip6.arpa"));
    assert_eq!(
        find(&i, "Service kube-system/kube-dns").body["spec"]["clusterIP"],
        "10.96.0.10"
    );
    // Images as the versions table names them, or under the override.
    let image = |i: &InCluster, d: &str| {
        find(i, d).body["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        image(&i, "DaemonSet kube-system/kube-proxy"),
        "registry.k8s.io/kube-proxy:v1.37.1"
    );
    override_images(&mut i.objects, Some("localhost/oneinfra/"));
    assert_eq!(
        image(&i, "DaemonSet kube-system/kube-proxy"),
        "localhost/oneinfra/kube-proxy:v1.37.1"
    );
    assert_eq!(
        image(&i, "Deployment kube-system/coredns"),
        "localhost/oneinfra/coredns:v1.12.1"
    );
}

#[test]
fn what_cannot_be_planned_says_what_is_missing() {
    let mut c = prepared();
    c.status.api_server_endpoint.clear();
    assert!(
        in_cluster(&c, NOW)
            .unwrap_err()
            .contains("no API server endpoint")
    );
    let mut c = prepared();
    c.spec.join_key = None;
    assert!(in_cluster(&c, NOW).unwrap_err().contains("no join key"));
    let mut c = prepared();
    c.spec.certificate_authorities.api_server_client = None;
    let i = in_cluster(&c, NOW).unwrap();
    assert!(i.client.unwrap_err().contains("no API server client CA"));
}

#[test]
fn the_engine_identity_is_a_short_lived_system_masters_client_of_the_client_ca() {
    let c = prepared();
    let identity = in_cluster(&c, NOW).unwrap().client.unwrap();
    let info = oi_pki::inspect_certificate(&identity.certificate).unwrap();
    assert_eq!(info.common_name.as_deref(), Some("oneinfra-engine"));
    assert_eq!(info.organizations, ["system:masters"]);
    assert_eq!(info.not_after - NOW, time::Duration::hours(1));
    let ca = c
        .spec
        .certificate_authorities
        .api_server_client
        .as_ref()
        .unwrap();
    oi_pki::check_leaf(
        &identity.certificate,
        &identity.private_key,
        Some(&ca.certificate),
    )
    .unwrap();
    assert!(!format!("{identity:?}").contains("PRIVATE KEY"));
}
