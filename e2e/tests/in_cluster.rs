//! What a managed cluster holds inside once `oi reconcile` made it ready, written through its
//! own API (the kube stand-in's, objects in the cluster's etcd): the NodeJoinRequest CRD, the
//! `oneinfra-system` namespace, the join RBAC, every join token as a bootstrap-token Secret,
//! kube-proxy, CoreDNS and the join public key ConfigMap. A join token may do exactly what
//! joining needs (create a NodeJoinRequest, read the join key) and gets the real 403 for the
//! rest; join requests are answered (the issued kubeconfig authenticates as the node) or
//! refused; a converged reconcile writes nothing inside; a token removed from the Cluster is
//! revoked in the cluster; objects changed or deleted by someone are put back.

use std::path::Path;

use crate::kubectl::{self, Kubectl};
use base64::Engine as _;
use oi_e2e::{LocalSet, Summary, admin_kubeconfig, inject_cluster, prerequisites, reconcile};
use oi_kube_standin::local::{KubeconfigUser, kubeconfig};

const JOIN_REQUEST: &str = r"
apiVersion: node.oneinfra.ereslibre.es/v1alpha1
kind: NodeJoinRequest
metadata: {name: worker-1}
spec:
  symmetricKey: c3ltbWV0cmlj
  containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
  imageServiceEndpoint: unix:///run/containerd/containerd.sock
  extraSANs: [worker-1.example]
";

/// A kubeconfig with `user` for the server and CA of the admin kubeconfig.
fn with_credentials(admin: &Path, user: KubeconfigUser<'_>) -> String {
    let text = std::fs::read_to_string(admin).unwrap();
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let cluster = &value["clusters"][0]["cluster"];
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster["certificate-authority-data"].as_str().unwrap())
        .unwrap();
    kubeconfig(
        cluster["server"].as_str().unwrap(),
        &String::from_utf8(ca).unwrap(),
        user,
    )
}

fn reconciled(world: &str, what: &str) -> (String, Summary) {
    let run = reconcile(world, &[]).unwrap();
    let summary = run.summary().unwrap();
    let run = run.ok(what).unwrap();
    (run.stdout, summary)
}

#[test]
fn a_ready_cluster_holds_its_objects_and_join_tokens_are_limited_to_joining() {
    let test = "a_ready_cluster_holds_its_objects_and_join_tokens_are_limited_to_joining";
    if !prerequisites(test) || !kubectl::available(test) {
        return;
    }
    let set = LocalSet::create("inc", 1, 1, false).unwrap();
    let world = inject_cluster(&set.manifests, "c1", 1).unwrap();
    let (world, token_a) = oi_e2e::inject_join_token(&world, "c1").unwrap();
    let (world, token_b) = oi_e2e::inject_join_token(&world, "c1").unwrap();
    let (world, summary) = reconciled(&world, "first oi reconcile");
    eprintln!("{test}: {summary}");
    assert_eq!(summary.ready, 1, "{summary}");
    assert!(summary.cluster_api_writes >= 20, "{summary}");
    let parsed = oi_e2e::World::parse(&world).unwrap();
    let cluster = parsed.require_cluster("c1").unwrap();
    let tokens: Vec<&str> = cluster["status"]["joinTokens"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert_eq!(tokens, [token_a.as_str(), token_b.as_str()]);
    let join_key = oi_e2e::str_at(cluster, &["spec", "joinKey", "publicKey"])
        .unwrap()
        .to_string();

    let dir = tempfile::tempdir().unwrap();
    let admin_path = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    let admin = Kubectl::new(
        dir.path(),
        "admin",
        &std::fs::read_to_string(&admin_path).unwrap(),
    );
    // What the reconcile wrote, as kubectl reads it back.
    assert_eq!(
        admin.ok(&["get", "crd", "-o", "name"]),
        "customresourcedefinition.apiextensions.k8s.io/nodejoinrequests.node.oneinfra.ereslibre.es\n"
    );
    assert_eq!(
        admin.ok(&[
            "get",
            "cm",
            "oneinfra-join",
            "-n",
            "oneinfra-system",
            "-o",
            "jsonpath={.data.joinKey}"
        ]),
        join_key
    );
    let id = |t: &str| t.split_once('.').unwrap().0.to_string();
    assert_eq!(
        admin.ok(&[
            "get",
            "secrets",
            "-n",
            "kube-system",
            "-l",
            "node.oneinfra.ereslibre.es/join-token=true",
            "-o",
            "name"
        ]),
        {
            let mut names = [
                format!("secret/bootstrap-token-{}\n", id(&token_a)),
                format!("secret/bootstrap-token-{}\n", id(&token_b)),
            ];
            names.sort();
            names.concat()
        }
    );
    assert_eq!(
        admin.ok(&[
            "get",
            "svc",
            "kube-dns",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.spec.clusterIP}"
        ]),
        "10.96.0.10"
    );
    let workloads = admin.ok(&["get", "ds,deploy", "-n", "kube-system", "-o", "name"]);
    assert_eq!(
        workloads,
        "daemonset.apps/kube-proxy\ndeployment.apps/coredns\n"
    );
    let image = admin.ok(&[
        "get",
        "ds",
        "kube-proxy",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "localhost/oneinfra/kube-proxy:v1.37.1");

    // A join token: create a NodeJoinRequest, read it back and the join key; nothing else.
    let joiner = Kubectl::new(
        dir.path(),
        "joiner",
        &with_credentials(&admin_path, KubeconfigUser::Token(&token_a)),
    );
    assert!(
        joiner
            .ok(&["auth", "whoami"])
            .contains("system:bootstrappers:oneinfra")
    );
    assert_eq!(
        joiner.ok(&[
            "get",
            "cm",
            "oneinfra-join",
            "-n",
            "oneinfra-system",
            "-o",
            "jsonpath={.data.joinKey}"
        ]),
        join_key
    );
    assert_eq!(
        joiner.ok_with(&["create", "-f", "-"], JOIN_REQUEST),
        "nodejoinrequest.node.oneinfra.ereslibre.es/worker-1 created\n"
    );
    assert!(
        joiner
            .ok(&["get", "njr", "worker-1", "-o", "yaml"])
            .contains("worker-1.example")
    );
    let user = format!("system:bootstrap:{}", id(&token_a));
    for (args, message) in [
        (
            vec!["get", "secrets", "-n", "kube-system"],
            format!(
                "secrets is forbidden: User \"{user}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
            ),
        ),
        (
            vec!["get", "cm", "-n", "oneinfra-system"],
            format!(
                "configmaps is forbidden: User \"{user}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"oneinfra-system\""
            ),
        ),
        (
            vec!["get", "njr"],
            format!(
                "nodejoinrequests.node.oneinfra.ereslibre.es is forbidden: User \"{user}\" cannot list resource \"nodejoinrequests\" in API group \"node.oneinfra.ereslibre.es\" at the cluster scope"
            ),
        ),
        (
            vec!["delete", "njr", "worker-1"],
            format!(
                "nodejoinrequests.node.oneinfra.ereslibre.es \"worker-1\" is forbidden: User \"{user}\" cannot delete resource \"nodejoinrequests\" in API group \"node.oneinfra.ereslibre.es\" at the cluster scope"
            ),
        ),
    ] {
        let refused = joiner.fails(&args);
        assert_eq!(
            refused.trim(),
            format!("Error from server (Forbidden): {message}"),
            "{args:?}"
        );
    }

    // A request made as `oi node join` makes it (a fresh key wrapped to the join key read
    // above, its extra SAN sealed with it): the next reconcile answers both, worker-1's
    // (whose key is no wrapped key) with a refusal.
    let key = oi_pki::SymmetricKey::generate();
    let worker_2 = serde_json::json!({
        "apiVersion": "node.oneinfra.ereslibre.es/v1alpha1", "kind": "NodeJoinRequest",
        "metadata": {"name": "worker-2"},
        "spec": {"symmetricKey": key.wrap(&join_key).unwrap(),
                 "extraSANs": [key.seal(b"worker-2.example").unwrap()]}});
    joiner.ok_with(&["create", "-f", "-"], &worker_2.to_string());
    let (world, summary) = reconciled(&world, "second oi reconcile");
    assert_eq!(
        (summary.cluster_api_writes, summary.mutating_cri_calls),
        (2, 0),
        "{summary}"
    );
    assert_eq!(
        joiner.ok(&[
            "get",
            "njr",
            "worker-1",
            "-o",
            "jsonpath={.status.conditions[0].type}={.status.conditions[0].status} {.status.conditions[0].reason}"
        ]),
        "Issued=False InvalidSymmetricKey"
    );
    let answered: serde_json::Value =
        serde_json::from_str(&joiner.ok(&["get", "njr", "worker-2", "-o", "json"])).unwrap();
    let status = &answered["status"];
    assert_eq!(status["conditions"][0]["status"], "True", "{status}");
    let open = |field: &str| {
        String::from_utf8(key.open(status[field].as_str().unwrap()).unwrap()).unwrap()
    };
    assert_eq!(open("kubernetesVersion"), "1.37.1");
    // The issued kubeconfig authenticates as the node, through the ingress.
    let node = Kubectl::new(dir.path(), "node", &open("kubeConfig"));
    let me = node.ok(&["auth", "whoami"]);
    assert!(
        me.contains("system:node:worker-2") && me.contains("system:nodes"),
        "{me}"
    );

    // Converged: nothing written inside, nothing on the hypervisors.
    let (world, summary) = reconciled(&world, "third oi reconcile");
    assert_eq!(
        (summary.cluster_api_writes, summary.mutating_cri_calls),
        (0, 0),
        "{summary}"
    );

    // Token B leaves the Cluster: revoked inside (its Secret deleted, the token refused);
    // someone's changes to our objects are undone, their own fields kept.
    admin.ok(&["delete", "svc", "kube-dns", "-n", "kube-system"]);
    admin.ok(&[
        "patch",
        "cm",
        "oneinfra-join",
        "-n",
        "oneinfra-system",
        "--type=merge",
        "-p",
        r#"{"data":{"joinKey":"forged","note":"mine"}}"#,
    ]);
    let parsed = oi_e2e::World::parse(&world).unwrap();
    let world = parsed
        .with_spec_field("c1", "joinTokens", vec![token_a.clone()].into())
        .unwrap();
    let (world, summary) = reconciled(&world, "fourth oi reconcile");
    assert_eq!(summary.cluster_api_writes, 3, "{summary}");
    let revoked = Kubectl::new(
        dir.path(),
        "revoked",
        &with_credentials(&admin_path, KubeconfigUser::Token(&token_b)),
    );
    assert!(
        revoked
            .fails(&["get", "cm", "oneinfra-join", "-n", "oneinfra-system"])
            .contains("You must be logged in to the server")
    );
    assert_eq!(
        admin.ok(&[
            "get",
            "cm",
            "oneinfra-join",
            "-n",
            "oneinfra-system",
            "-o",
            "jsonpath={.data.joinKey} {.data.note}"
        ]),
        format!("{join_key} mine")
    );
    assert_eq!(
        admin.ok(&[
            "get",
            "svc",
            "kube-dns",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.spec.clusterIP}"
        ]),
        "10.96.0.10"
    );
    let parsed = oi_e2e::World::parse(&world).unwrap();
    let tokens = &parsed.require_cluster("c1").unwrap()["status"]["joinTokens"];
    assert_eq!(tokens.as_sequence().map(Vec::len), Some(1), "{tokens:?}");
    drop(set);
}
