//! The kubelet and kube-controller-manager stand-ins (the real binary, as processes) against
//! the API server stand-in (in process, over memory), driven and checked with real kubectl:
//! a node registers, stays Ready, renews its Lease, serves its port over TLS and is reached
//! through the node proxy; its identity writes only its own objects; the controller-manager
//! elects a leader, marks a silent node NotReady, cleans expired bootstrap tokens, signs
//! cluster-info and fills namespaces, as its service accounts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/kubectl.rs"]
mod kubectl;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use cluster::{Proc, standin_as, write};
use kubectl::{Kubectl, eventually};
use oi_kube_standin::api::proxy::{Egress, KubeletClient};
use oi_kube_standin::local::{
    KubeconfigUser, LocalApiServer, LocalOptions, TestCa, kubeconfig, write_private,
};
use oi_kube_standin::tls;
use serde_json::Value;

struct Setup {
    server: LocalApiServer,
    admin: Kubectl,
    /// The CA kubelets trust client certificates of; the API server's kubelet client is one.
    kubelet_client_ca: TestCa,
    dir: PathBuf,
}

fn setup(test: &str) -> Option<Setup> {
    if !kubectl::available(test) {
        return None;
    }
    let kubelet_client_ca = TestCa::new("kubelet-client-ca").unwrap();
    let (cert, key) = kubelet_client_ca
        .leaf(
            "kube-apiserver-kubelet-client",
            &["system:masters"],
            &[],
            false,
            true,
        )
        .unwrap();
    let identity = (
        tls::certs_from_pem(cert.as_bytes(), "kubelet client").unwrap(),
        tls::key_from_pem(key.as_bytes(), "kubelet client key").unwrap(),
    );
    let server = LocalApiServer::start(LocalOptions {
        kubelet: Some(KubeletClient {
            tls: tls::unverified_client_config(Some(identity), "kubelet client").unwrap(),
            preferred: vec!["InternalIP".to_string(), "Hostname".to_string()],
            default_port: 10250,
            egress: Egress::Direct,
            timeout: Duration::from_secs(5),
        }),
        ..LocalOptions::default()
    })
    .unwrap();
    let admin = Kubectl::new(server.dir(), "admin", &server.admin_kubeconfig().unwrap());
    let dir = server.dir().to_path_buf();
    Some(Setup {
        server,
        admin,
        kubelet_client_ca,
        dir,
    })
}

fn user_kubeconfig(
    server: &LocalApiServer,
    dir: &Path,
    name: &str,
    user: &str,
    groups: &[&str],
) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    write_private(&path, &server.kubeconfig_for(user, groups).unwrap()).unwrap();
    path
}

/// A kubelet stand-in for `node`, its ports free ones; returns the process and its port.
fn start_kubelet(setup: &Setup, node: &str) -> (Proc, u16) {
    let port = oi_testsupport::free_loopback_port();
    let healthz = oi_testsupport::free_loopback_port();
    let kubeconfig = user_kubeconfig(
        &setup.server,
        &setup.dir,
        node,
        &format!("system:node:{node}"),
        &["system:nodes"],
    );
    let ca = write(
        &setup.dir,
        "kubelet-client-ca.crt",
        &setup.kubelet_client_ca.pem(),
    );
    let config = write(
        &setup.dir,
        &format!("{node}-config.yaml"),
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\naddress: 127.0.0.1\nport: {port}\nhealthzBindAddress: 127.0.0.1\nhealthzPort: {healthz}\nauthentication:\n  x509:\n    clientCAFile: {}\n  webhook:\n    enabled: true\n  anonymous:\n    enabled: false\nauthorization:\n  mode: Webhook\nnodeStatusUpdateFrequency: 1s\nnodeLeaseDurationSeconds: 4\nclusterDomain: cluster.local\nclusterDNS: [10.96.0.10]\n",
            ca.display()
        ),
    );
    let mut command = standin_as(&setup.dir, "kubelet");
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--config={}", config.display()))
        .arg(format!("--hostname-override={node}"))
        .arg("--node-ip=127.0.0.1")
        .arg("--node-labels=tier=edge")
        .arg("--register-with-taints=edge=true:NoSchedule")
        .arg(format!(
            "--cert-dir={}",
            setup.dir.join(format!("{node}-pki")).display()
        ))
        .arg("--container-runtime-endpoint=unix:///run/containerd/containerd.sock");
    (
        Proc::spawn(&format!("kubelet-{node}"), command, &setup.dir),
        port,
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn ready(admin: &Kubectl, node: &str) -> Option<String> {
    let out = admin.run(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_kubelet_registers_stays_ready_and_serves_its_port_through_the_node_proxy() {
    let Some(setup) = setup("nodes: kubelet") else {
        return;
    };
    let (_kubelet, port) = start_kubelet(&setup, "w1");
    let admin = &setup.admin;
    eventually("node w1 Ready", || {
        ready(admin, "w1").as_deref() == Some("True")
    });
    let table = admin.ok(&["get", "nodes"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row[4]),
        ("w1", "Ready", cluster::VERSION),
        "{table}"
    );
    let node = json(&admin.ok(&["get", "node", "w1", "-o", "json"]));
    assert_eq!(node["metadata"]["labels"]["tier"], "edge");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "w1");
    assert_eq!(node["spec"]["taints"][0]["key"], "edge");
    assert_eq!(
        node["status"]["addresses"][0],
        serde_json::json!({"type": "InternalIP", "address": "127.0.0.1"})
    );
    assert_eq!(
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        port
    );
    // The Lease is renewed (every second: a quarter of 4 s), and owned by the Node.
    let renewed = || {
        admin.ok(&[
            "get",
            "lease",
            "w1",
            "-n",
            "kube-node-lease",
            "-o",
            "jsonpath={.spec.renewTime}",
        ])
    };
    let first = renewed();
    eventually("a lease renewal", || renewed() != first);
    let lease = json(&admin.ok(&["get", "lease", "w1", "-n", "kube-node-lease", "-o", "json"]));
    assert_eq!(lease["spec"]["holderIdentity"], "w1");
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        node["metadata"]["uid"]
    );

    // The node proxy reaches the kubelet over TLS with the API server's kubelet client
    // certificate; the kubelet checks it and asks the API server (SubjectAccessReview).
    assert_eq!(
        admin.ok(&["get", "--raw", "/api/v1/nodes/w1/proxy/healthz"]),
        "ok"
    );
    let pods = json(&admin.ok(&["get", "--raw", "/api/v1/nodes/w1/proxy/pods"]));
    assert_eq!(pods["kind"], "PodList");
    let configz = json(&admin.ok(&["get", "--raw", "/api/v1/nodes/w1/proxy/configz"]));
    assert_eq!(configz["kubeletconfig"]["clusterDomain"], "cluster.local");
    // Straight to the kubelet: no certificate is 401; a certificate the kubelet trusts of a
    // user RBAC does not let at nodes/proxy is 403.
    let rt = cluster::runtime();
    let direct = |identity: Option<(String, String)>| {
        let config = match identity {
            Some((c, k)) => tls::unverified_client_config(
                Some((
                    tls::certs_from_pem(c.as_bytes(), "c").unwrap(),
                    tls::key_from_pem(k.as_bytes(), "k").unwrap(),
                )),
                "t",
            )
            .unwrap(),
            None => tls::unverified_client_config(None, "t").unwrap(),
        };
        let endpoint =
            oi_kube_standin::https::Endpoint::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        rt.block_on(oi_kube_standin::https::request(
            &config,
            &endpoint,
            http::Method::GET,
            "/pods",
            None,
            Duration::from_secs(5),
        ))
        .unwrap()
    };
    assert_eq!(direct(None).status, 401);
    let nobody = setup
        .kubelet_client_ca
        .leaf("nobody", &[], &[], false, true)
        .unwrap();
    let refused = direct(Some(nobody));
    assert_eq!(refused.status, 403);
    assert_eq!(
        String::from_utf8_lossy(&refused.body),
        "Forbidden (user=nobody, verb=get, resource=nodes, subresource=pods)"
    );

    // The node's identity: its own Node and Lease only (Node authorizer, NodeRestriction).
    let other = user_kubeconfig(
        &setup.server,
        &setup.dir,
        "impostor",
        "system:node:w1",
        &["system:nodes"],
    );
    let as_node = Kubectl::new(
        &setup.dir,
        "as-node",
        &std::fs::read_to_string(other).unwrap(),
    );
    admin.ok_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata: {name: w2}\n",
    );
    let refused = as_node.fails(&["label", "node", "w2", "x=y"]);
    assert!(
        refused.contains(
            "nodes \"w2\" is forbidden: node \"w1\" is not allowed to modify node \"w2\""
        ),
        "{refused}"
    );
    as_node.ok(&["label", "node", "w1", "x=y"]);
    let refused = as_node.fails(&["get", "secrets", "-n", "kube-system"]);
    assert!(
        refused.contains("no relationship found between node 'w1' and this object"),
        "{refused}"
    );
    let lease_w2 = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: w2, namespace: kube-node-lease}\nspec: {holderIdentity: w2}\n";
    let refused =
        String::from_utf8_lossy(&as_node.run_with(&["create", "-f", "-"], lease_w2).stderr)
            .into_owned();
    assert!(
        refused.contains("can only access node lease with the same name as the requesting node"),
        "{refused}"
    );
}

#[test]
fn the_kubelet_refuses_what_the_real_one_refuses() {
    if !kubectl::available("nodes: kubelet refusals") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = standin_as(dir.path(), "kubelet")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["--no-such-flag"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("unknown flag: --no-such-flag"), "{stderr}");
    let (code, stderr) = run(&[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("\"kubeconfig\""), "{stderr}");
    let kubeconfig = write(
        dir.path(),
        "k",
        &kubeconfig("https://127.0.0.1:1", "x", KubeconfigUser::Token("t")),
    );
    let config = write(
        dir.path(),
        "c.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDomian: x\n",
    );
    let (code, stderr) = run(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--config={}", config.display()),
    ]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("strict decoding error: unknown field \"clusterDomian\""),
        "{stderr}"
    );
    let (code, stderr) = run(&[
        "--kubeconfig=/nonexistent/kubelet.conf",
        "--bootstrap-kubeconfig=/x",
    ]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(
            "TLS bootstrapping (--bootstrap-kubeconfig) is not done by the kubelet stand-in"
        ),
        "{stderr}"
    );
}

fn bootstrap_secret(id: &str, expiration: &str, signing: bool) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: bootstrap-token-{id}, namespace: kube-system}}\ntype: bootstrap.kubernetes.io/token\ndata:\n  token-id: {}\n  token-secret: {}\n  expiration: {}\n  usage-bootstrap-authentication: {}\n  usage-bootstrap-signing: {}\n",
        b64(id),
        b64("0123456789abcdef"),
        b64(expiration),
        b64("true"),
        b64(if signing { "true" } else { "false" })
    )
}

fn start_controller_manager(setup: &Setup, name: &str) -> Proc {
    let kubeconfig = user_kubeconfig(
        &setup.server,
        &setup.dir,
        name,
        "system:kube-controller-manager",
        &[],
    );
    let root_ca = write(&setup.dir, "root-ca.crt", &setup.server.serving_ca);
    let mut command = standin_as(&setup.dir, "kube-controller-manager");
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--root-ca-file={}", root_ca.display()))
        .arg("--controllers=*,bootstrapsigner,tokencleaner")
        .arg("--use-service-account-credentials=true")
        .arg("--node-monitor-grace-period=3s")
        .arg("--node-monitor-period=1s")
        .arg("--leader-elect=true")
        .arg("--leader-elect-lease-duration=3s")
        .arg("--leader-elect-renew-deadline=2s")
        .arg("--leader-elect-retry-period=500ms")
        .arg("--secure-port=0");
    Proc::spawn(name, command, &setup.dir)
}

#[test]
fn the_controller_manager_leads_marks_silent_nodes_and_cleans_tokens() {
    let Some(setup) = setup("nodes: controller-manager") else {
        return;
    };
    let admin = &setup.admin;
    let first = start_controller_manager(&setup, "kcm-a");
    let holder = || {
        admin
            .run(&[
                "get",
                "lease",
                "kube-controller-manager",
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .stdout
    };
    eventually("a leader", || !holder().is_empty());
    let second = start_controller_manager(&setup, "kcm-b");
    let leader = String::from_utf8(holder()).unwrap();

    // Every namespace gets its default ServiceAccount and the root CA, written by the
    // controllers' own service accounts.
    admin.ok(&["create", "ns", "fresh"]);
    eventually("the default ServiceAccount", || {
        admin
            .run(&["get", "sa", "default", "-n", "fresh"])
            .status
            .success()
    });
    eventually("kube-root-ca.crt", || {
        admin
            .run(&["get", "cm", "kube-root-ca.crt", "-n", "fresh"])
            .status
            .success()
    });
    let ca = admin.ok(&[
        "get",
        "cm",
        "kube-root-ca.crt",
        "-n",
        "fresh",
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ]);
    assert_eq!(ca, setup.server.serving_ca);
    for account in [
        "node-controller",
        "token-cleaner",
        "service-account-controller",
        "root-ca-cert-publisher",
    ] {
        assert!(
            admin
                .run(&["get", "sa", account, "-n", "kube-system"])
                .status
                .success(),
            "{account}"
        );
    }
    // The manager's own identity may not create ConfigMaps (system:kube-controller-manager):
    // kube-root-ca.crt written means root-ca-cert-publisher's account wrote it.
    let refused = Kubectl::new(
        &setup.dir,
        "kcm",
        &std::fs::read_to_string(setup.dir.join("kcm-a.kubeconfig")).unwrap(),
    )
    .fails(&["create", "configmap", "x", "-n", "fresh"]);
    assert!(
        refused.contains(
            "User \"system:kube-controller-manager\" cannot create resource \"configmaps\""
        ),
        "{refused}"
    );

    // Expired bootstrap tokens go; others stay.
    admin.ok_with(
        &["apply", "-f", "-"],
        &bootstrap_secret("old123", "2001-01-01T00:00:00Z", false),
    );
    admin.ok_with(
        &["apply", "-f", "-"],
        &bootstrap_secret("new123", "2999-01-01T00:00:00Z", true),
    );
    eventually("the expired token deleted", || {
        !admin
            .run(&[
                "get",
                "secret",
                "bootstrap-token-old123",
                "-n",
                "kube-system",
            ])
            .status
            .success()
    });
    assert!(
        admin
            .run(&[
                "get",
                "secret",
                "bootstrap-token-new123",
                "-n",
                "kube-system"
            ])
            .status
            .success()
    );

    // cluster-info is signed with the signing token.
    admin.ok(&[
        "create",
        "configmap",
        "cluster-info",
        "-n",
        "kube-public",
        "--from-literal=kubeconfig=apiVersion: v1\n",
    ]);
    eventually("cluster-info signed", || {
        admin
            .run(&[
                "get",
                "cm",
                "cluster-info",
                "-n",
                "kube-public",
                "-o",
                "jsonpath={.data.jws-kubeconfig-new123}",
            ])
            .stdout
            .len()
            > 10
    });
    let jws = admin.ok(&[
        "get",
        "cm",
        "cluster-info",
        "-n",
        "kube-public",
        "-o",
        "jsonpath={.data.jws-kubeconfig-new123}",
    ]);
    assert_eq!(
        jws,
        oi_kube_standin::controllers::detached_jws(
            "apiVersion: v1\n",
            "new123",
            "0123456789abcdef"
        )
    );

    // A node that stops posting: NotReady (Ready Unknown) and unreachable taints; back: Ready.
    let (mut kubelet, _) = start_kubelet(&setup, "w1");
    eventually("w1 Ready", || ready(admin, "w1").as_deref() == Some("True"));
    kubelet.kill();
    eventually("w1 NotReady once its Lease is stale", || {
        ready(admin, "w1").as_deref() == Some("Unknown")
    });
    let table = admin.ok(&["get", "node", "w1"]);
    assert!(
        table.lines().nth(1).unwrap().contains(" NotReady "),
        "{table}"
    );
    let node = json(&admin.ok(&["get", "node", "w1", "-o", "json"]));
    let reason = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["message"]
        .clone();
    assert_eq!(reason, "Kubelet stopped posting node status.");
    let taints: Vec<&str> = node["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert!(
        taints.contains(&"node.kubernetes.io/unreachable"),
        "{taints:?}"
    );
    let (_kubelet, _) = start_kubelet(&setup, "w1");
    eventually("w1 Ready again, untainted", || {
        let node = json(&admin.ok(&["get", "node", "w1", "-o", "json"]));
        let ready = node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let tainted = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == "node.kubernetes.io/unreachable");
        ready && !tainted
    });

    // The leader dies: the other replica (its identity in its log) takes over.
    let (mut dead, alive) = if first.log().contains(&leader) {
        (first, second)
    } else {
        (second, first)
    };
    assert!(
        dead.log().contains(&leader),
        "no replica logged the leader's identity {leader}"
    );
    dead.kill();
    eventually("the other replica leads", || {
        let now = String::from_utf8(holder()).unwrap();
        !now.is_empty() && now != leader && alive.log().contains(&now)
    });
}
