//! The API over a real etcd (Debian's 3.4, client mutual TLS): the storage contract against
//! `EtcdStorage`, and two kube-apiserver stand-in processes sharing one etcd, driven by real
//! `kubectl` and by kube-rs (the product's client): every replica serves the same objects, a
//! watch on one sees a write through the other, one may die, a compacted resourceVersion is
//! `410 Gone`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/kubectl.rs"]
mod kubectl;

use std::time::Duration;

use cluster::{
    Ca, Etcd, Proc, Usage, apiserver_args, client, eventually, get, runtime, standin_as,
    start_etcd, status,
};
use http::StatusCode;
use kubectl::Kubectl;
use oi_kube_standin::api::etcd_storage::EtcdStorage;
use oi_kube_standin::api::storage::{Storage as _, contract};
use oi_kube_standin::https::Endpoint;
use oi_kube_standin::local::{KubeconfigUser, kubeconfig};
use oi_kube_standin::tls;

fn prerequisites(test: &str) -> bool {
    oi_testsupport::require(
        test,
        "command `etcd` (Debian etcd-server)",
        oi_testsupport::have_command("etcd"),
    ) && kubectl::available(test)
}

async fn etcd_storage(etcd: &Etcd) -> EtcdStorage {
    storage_on(etcd, std::slice::from_ref(&etcd.url)).await
}

/// A store on `servers`, with `etcd`'s trust and client identity.
async fn storage_on(etcd: &Etcd, servers: &[String]) -> EtcdStorage {
    EtcdStorage::connect(
        servers,
        &std::fs::read(&etcd.ca).unwrap(),
        &std::fs::read(&etcd.client_cert).unwrap(),
        &std::fs::read(&etcd.client_key).unwrap(),
        Duration::from_secs(10),
    )
    .await
    .unwrap()
}

#[test]
fn etcd_storage_meets_the_storage_contract() {
    if !prerequisites("api_etcd: storage contract") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(dir.path());
    let rt = runtime();
    rt.block_on(async {
        let storage = etcd_storage(&etcd).await;
        // etcd takes a moment to serve.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while storage.revision().await.is_err() {
            assert!(std::time::Instant::now() < deadline, "etcd did not answer");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        contract::run(&storage, "/contract/a").await;
        contract::run(&storage, "/contract/b").await;
        for i in 0..5 {
            storage
                .create(&format!("/compacted/{i}"), &serde_json::json!(i))
                .await
                .unwrap();
        }
        let revision = storage.revision().await.unwrap();
        storage.compact(revision).await.unwrap();
        // etcd keeps the compaction revision itself: the oldest a watch may start after is the
        // one before it.
        contract::compacted_watch_is_refused(&storage, "/compacted/", revision - 1).await;
    });
}

/// A loopback URL where nothing listens: a port taken from the kernel and let go.
fn refusing_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("https://127.0.0.1:{port}")
}

#[test]
fn an_endpoint_that_refuses_connections_is_passed_over() {
    if !prerequisites("api_etcd: endpoint failover") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(dir.path());
    let rt = runtime();
    rt.block_on(async {
        let dead = refusing_url();
        // The dead endpoint comes first: every call must move on to the live one, a watch too.
        let storage = storage_on(&etcd, &[dead.clone(), etcd.url.clone()]).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while let Err(e) = storage.revision().await {
            assert!(
                std::time::Instant::now() < deadline,
                "etcd did not answer: {e}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        contract::run(&storage, "/failover/").await;

        // With only the dead endpoint, a call fails as unavailable, naming it.
        let alone = storage_on(&etcd, std::slice::from_ref(&dead)).await;
        let error = alone.get("/failover/x").await.unwrap_err().to_string();
        assert!(error.contains(&dead), "{error}");
    });
}

struct TwoServers {
    etcd: Etcd,
    a: Proc,
    b: Proc,
    port_a: u16,
    port_b: u16,
    client_ca: Ca,
    serving_ca: String,
    args: Vec<String>,
}

/// The kube-apiserver stand-in with `args` on `port`, logging to `dir/<name>.log`.
fn start_apiserver(dir: &std::path::Path, args: &[String], name: &str, port: u16) -> Proc {
    let mut command = standin_as(dir, "kube-apiserver");
    for arg in args {
        if arg.starts_with("--secure-port=") {
            command.arg(format!("--secure-port={port}"));
        } else {
            command.arg(arg);
        }
    }
    Proc::spawn(name, command, dir)
}

fn wait_ready(serving_ca: &str, port: u16) {
    let rt = runtime();
    let roots = tls::roots_from_pem(serving_ca.as_bytes(), "serving CA").unwrap();
    let anonymous = client(&roots, None);
    let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{port}")).unwrap();
    eventually(Duration::from_secs(30), "/readyz 200", || {
        status(&get(&rt, &anonymous, &endpoint, "/readyz")) == Some(StatusCode::OK)
    });
}

fn two_servers(dir: &std::path::Path) -> TwoServers {
    let etcd = start_etcd(dir);
    let port_a = oi_testsupport::free_loopback_port();
    let port_b = oi_testsupport::free_loopback_port();
    let (args, client_ca, serving_ca) = apiserver_args(dir, &etcd, port_a);
    let servers = TwoServers {
        a: start_apiserver(dir, &args, "apiserver-a", port_a),
        b: start_apiserver(dir, &args, "apiserver-b", port_b),
        etcd,
        port_a,
        port_b,
        client_ca,
        serving_ca,
        args,
    };
    wait_ready(&servers.serving_ca, port_a);
    wait_ready(&servers.serving_ca, port_b);
    servers
}

impl TwoServers {
    fn kubectl(
        &self,
        dir: &std::path::Path,
        name: &str,
        port: u16,
        user: &str,
        groups: &[&str],
    ) -> Kubectl {
        let (cert, key) = self.client_ca.leaf(user, groups, &[], Usage::Client);
        let text = kubeconfig(
            &format!("https://127.0.0.1:{port}"),
            &self.serving_ca,
            KubeconfigUser::Certificate {
                cert_pem: &cert,
                key_pem: &key,
            },
        );
        Kubectl::new(dir, name, &text)
    }
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {level: {type: integer}}}
"#;

#[test]
fn two_api_servers_on_one_etcd_serve_the_same_objects() {
    if !prerequisites("api_etcd: two API servers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut servers = two_servers(dir.path());
    let a = servers.kubectl(
        dir.path(),
        "a",
        servers.port_a,
        "kubernetes-admin",
        &["system:masters"],
    );
    let b = servers.kubectl(
        dir.path(),
        "b",
        servers.port_b,
        "kubernetes-admin",
        &["system:masters"],
    );

    // Written through A, read through B: a namespace, a CRD and an object of it.
    a.ok(&["create", "ns", "shared"]);
    a.ok(&[
        "create",
        "configmap",
        "c",
        "-n",
        "shared",
        "--from-literal=k=v",
    ]);
    a.ok_with(&["apply", "-f", "-"], CRD);
    a.ok_with(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\nspec: {level: 1}\n",
    );
    let read = b.ok(&[
        "get",
        "configmap",
        "c",
        "-n",
        "shared",
        "-o",
        "jsonpath={.data.k}",
    ]);
    assert_eq!(read, "v");
    kubectl::eventually("B serves the CRD A created", || {
        b.run(&["get", "gadget", "g1", "-o", "jsonpath={.spec.level}"])
            .stdout
            == b"1"
    });
    // Both servers are the kubernetes Service's endpoints.
    let endpoints = b.ok(&[
        "get",
        "endpoints",
        "kubernetes",
        "-n",
        "default",
        "-o",
        "jsonpath={.subsets[0].addresses[*].ip}",
    ]);
    assert_eq!(endpoints, "127.0.0.1");

    // A watch on B sees what a client of A changes.
    let watch = b.watch(&["get", "gadgets", "-w", "--output-watch-events"]);
    watch.until("the existing gadget", |l| {
        l.starts_with("ADDED") && l.contains("g1")
    });
    a.ok(&[
        "patch",
        "gadget",
        "g1",
        "--type=merge",
        "-p",
        r#"{"spec":{"level":2}}"#,
    ]);
    watch.until("A's change, seen on B", |l| {
        l.starts_with("MODIFIED") && l.contains("g1")
    });
    drop(watch);

    // A bootstrap token made through A authenticates on B.
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: bootstrap-token-tok123, namespace: kube-system}}\ntype: bootstrap.kubernetes.io/token\ndata:\n  token-id: {}\n  token-secret: {}\n  usage-bootstrap-authentication: {}\n",
        b64("tok123"),
        b64("0123456789abcdef"),
        b64("true")
    );
    a.ok_with(&["apply", "-f", "-"], &secret);
    let token = Kubectl::new(
        dir.path(),
        "token",
        &kubeconfig(
            &format!("https://127.0.0.1:{}", servers.port_b),
            &servers.serving_ca,
            KubeconfigUser::Token("tok123.0123456789abcdef"),
        ),
    );
    assert!(
        token
            .ok(&["auth", "whoami"])
            .contains("system:bootstrap:tok123")
    );
    let refused = token.fails(&["get", "ns"]);
    assert!(
        refused.contains("User \"system:bootstrap:tok123\" cannot list resource \"namespaces\""),
        "{refused}"
    );

    // A dies: B still serves everything.
    servers.a.kill();
    assert_eq!(
        b.ok(&["get", "gadget", "g1", "-o", "jsonpath={.spec.level}"]),
        "2"
    );
    let refused = a.fails(&["get", "ns"]);
    assert!(refused.contains("refused"), "{refused}");
    // A replacement for A (same flags, same port) serves the same objects at once.
    servers.a = start_apiserver(dir.path(), &servers.args, "apiserver-a2", servers.port_a);
    wait_ready(&servers.serving_ca, servers.port_a);
    assert_eq!(
        a.ok(&["get", "gadget", "g1", "-o", "jsonpath={.spec.level}"]),
        "2"
    );
    assert_eq!(
        a.ok(&[
            "get",
            "configmap",
            "c",
            "-n",
            "shared",
            "-o",
            "jsonpath={.data.k}"
        ]),
        "v"
    );
    for log in [servers.a.log(), servers.b.log()] {
        assert!(!log.contains("PRIVATE KEY"), "key material in a log");
    }
}

#[test]
fn a_compacted_resource_version_is_gone_and_kube_rs_works() {
    if !prerequisites("api_etcd: compaction and kube-rs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let servers = two_servers(dir.path());
    let admin = servers.kubectl(
        dir.path(),
        "admin",
        servers.port_a,
        "kubernetes-admin",
        &["system:masters"],
    );
    admin.ok(&["create", "ns", "old"]);
    let old_version = admin.ok(&[
        "get",
        "ns",
        "old",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    for i in 0..3 {
        admin.ok(&["create", "configmap", &format!("c{i}"), "-n", "old"]);
    }
    let rt = runtime();
    rt.block_on(async {
        let storage = etcd_storage(&servers.etcd).await;
        let now = storage.revision().await.unwrap();
        storage.compact(now).await.unwrap();
    });
    // A watch from before the compaction: one ERROR event, 410 Expired, as kube-apiserver.
    let raw = admin.ok(&["get", "--raw", &format!("/api/v1/namespaces/old/configmaps?watch=1&resourceVersion={old_version}&timeoutSeconds=5")]);
    let event: serde_json::Value = serde_json::from_str(raw.lines().next().unwrap()).unwrap();
    assert_eq!(event["type"], "ERROR", "{raw}");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");

    // kube-rs, as our product uses it: typed create, list, server-side apply, watch, delete.
    let (cert, key) =
        servers
            .client_ca
            .leaf("kubernetes-admin", &["system:masters"], &[], Usage::Client);
    let text = kubeconfig(
        &format!("https://127.0.0.1:{}", servers.port_b),
        &servers.serving_ca,
        KubeconfigUser::Certificate {
            cert_pem: &cert,
            key_pem: &key,
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use futures::StreamExt as _;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client, "old");
        let mut stream = kube::runtime::watcher(api.clone(), kube::runtime::watcher::Config::default()).boxed();
        let created: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "typed"}, "data": {"a": "1"}})).unwrap();
        api.create(&PostParams::default(), &created).await.unwrap();
        let listed = api.list(&ListParams::default()).await.unwrap();
        assert_eq!(listed.items.len(), 4);
        let applied = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"b": "2"}});
        let params = PatchParams::apply("oneinfra").force();
        let first = api.patch("applied", &params, &Patch::Apply(&applied)).await.unwrap();
        let again = api.patch("applied", &params, &Patch::Apply(&applied)).await.unwrap();
        assert_eq!(first.metadata.resource_version, again.metadata.resource_version, "an unchanged apply writes nothing");
        api.delete("typed", &DeleteParams::default()).await.unwrap();
        // The watcher saw the objects of the namespace, then the apply.
        let mut names = std::collections::BTreeSet::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !(names.contains("applied") && names.contains("c0")) {
            let event = tokio::time::timeout_at(deadline, stream.next()).await.expect("watch events in time").unwrap().unwrap();
            match event {
                kube::runtime::watcher::Event::Apply(cm) | kube::runtime::watcher::Event::InitApply(cm) => {
                    names.insert(cm.metadata.name.unwrap());
                }
                _ => {}
            }
        }
        assert!(names.contains("c0"), "{names:?}");
    });
}
