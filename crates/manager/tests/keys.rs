//! Clusters' private keys on the management cluster (`oi_manager::keys`), through the store
//! the controllers use (`KubeStore`, with and without its watch cache) against the API server
//! stand-in (RBAC, status subresource, label selectors, as the API server has them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use http::Method;
use oi_api::{Cluster, ObjectKey};
use oi_manager::cache::{CACHED_KINDS, WatchCache};
use oi_manager::kube_store::KubeStore;
use oi_manager::store::Store as _;
use oi_manager_testsupport::apiserver_standin::{ApiServer, StandinOptions};
use serde_json::{Value, json};

const NS: &str = "tenants";

fn key() -> ObjectKey {
    ObjectKey::new(NS, "c1")
}

/// A Cluster as oneinfra's manifests have it: every private key inline, in its spec and in
/// its status. (The keys are opaque text to the store: no PEM is checked here.)
fn inline_cluster() -> Value {
    json!({
        "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": NS},
        "spec": {
            "kubernetesVersion": "1.37.1",
            "certificateAuthorities": {
                "apiServerClient": {"certificate": "CLIENT-CA-CERT", "privateKey": "CLIENT-CA-KEY"},
                "etcdPeer": {"certificate": "PEER-CA-CERT", "privateKey": "PEER-CA-KEY"},
            },
            "apiServer": {
                "ca": {"certificate": "API-CA-CERT", "privateKey": "API-CA-KEY"},
                "serviceAccount": {"publicKey": "SA-PUB", "privateKey": "SA-KEY"},
            },
            "etcdServer": {"ca": {"certificate": "ETCD-CA-CERT", "privateKey": "ETCD-CA-KEY"}},
            "joinKey": {"publicKey": "JOIN-PUB", "privateKey": "JOIN-KEY"},
            "vpn": {"enabled": true, "CIDR": "10.0.0.0/16", "privateKey": "WG-KEY", "publicKey": "WG-PUB"},
        },
    })
}

fn admin_certificate() -> Value {
    json!({"certificate": "ADMIN-CERT", "privateKey": "ADMIN-KEY"})
}

/// Stores [`inline_cluster`] as an administrator applying it would, with an admin client
/// certificate in its status. Returns its uid.
fn apply_inline(server: &ApiServer) -> String {
    let created = server
        .call(
            Method::POST,
            &format!("/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/{NS}/clusters"),
            Some(&inline_cluster()),
        )
        .unwrap();
    let mut status = created.clone();
    status["status"] = json!({"clientCertificates": {"admin": admin_certificate()}});
    server
        .call(
            Method::PUT,
            &format!(
                "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/{NS}/clusters/c1/status"
            ),
            Some(&status),
        )
        .unwrap();
    created["metadata"]["uid"].as_str().unwrap().to_string()
}

fn stored_cluster(server: &ApiServer) -> Value {
    server
        .call(
            Method::GET,
            &format!("/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/{NS}/clusters/c1"),
            None,
        )
        .unwrap()
}

/// Every private key `value` holds inline, by the text of the document.
fn inline_keys(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, at: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k == "privateKey" && v.as_str().is_some_and(|s| !s.is_empty()) {
                        out.push(format!("{at}.{k}"));
                    }
                    walk(v, &format!("{at}.{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    walk(value, "", &mut out);
    out
}

fn secret_names(server: &ApiServer) -> Vec<String> {
    let mut names: Vec<String> = server
        .key_secrets(NS)
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn decoded(secret: &Value, key: &str) -> String {
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD
        .decode(secret["data"][key].as_str().unwrap())
        .unwrap();
    String::from_utf8(b).unwrap()
}

#[test]
fn a_cluster_applied_with_inline_keys_ends_with_none_and_its_secrets_hold_them() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    let uid = apply_inline(&server);
    assert_eq!(inline_keys(&stored_cluster(&server)).len(), 8);

    let cluster: Cluster = server.block_on(async {
        let store = KubeStore::new(server.client().await.unwrap(), "test/reporter", "test-1");
        store.get(&key()).await.unwrap().unwrap()
    });
    // The controllers get every key inline, as applied.
    assert_eq!(
        cluster.spec.api_server.ca.as_ref().unwrap().private_key,
        "API-CA-KEY"
    );
    assert_eq!(cluster.spec.vpn.private_key, "WG-KEY");
    assert_eq!(
        cluster.status.client_certificates["admin"].private_key,
        "ADMIN-KEY"
    );

    // The stored Cluster holds none, in spec or status: references and certificates.
    let stored = stored_cluster(&server);
    assert_eq!(inline_keys(&stored), Vec::<String>::new(), "{stored:#}");
    assert_eq!(
        stored["spec"]["apiServer"]["ca"],
        json!({"certificate": "API-CA-CERT", "privateKeyRef": {"name": "c1-ca", "key": "tls.key"}})
    );
    assert_eq!(
        stored["status"]["clientCertificates"]["admin"]["privateKeyRef"]["name"],
        "c1-client-certificates-admin"
    );

    // Its Secrets hold them, named as Cluster API names them where it does, owned by it.
    assert_eq!(
        secret_names(&server),
        [
            "c1-ca",
            "c1-certificate-authorities-api-server-client",
            "c1-certificate-authorities-etcd-peer",
            "c1-client-certificates-admin",
            "c1-etcd",
            "c1-join-key",
            "c1-sa",
            "c1-vpn",
        ]
    );
    for secret in server.key_secrets(NS) {
        let name = secret["metadata"]["name"].as_str().unwrap();
        let owner = &secret["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], uid.as_str(), "{name}");
        assert_eq!(owner["kind"], "Cluster", "{name}");
        let expected_type = if ["c1-sa", "c1-join-key", "c1-vpn"].contains(&name) {
            "Opaque"
        } else {
            "kubernetes.io/tls"
        };
        assert_eq!(secret["type"], expected_type, "{name}");
    }
    let ca = server
        .key_secrets(NS)
        .into_iter()
        .find(|s| s["metadata"]["name"] == "c1-ca")
        .unwrap();
    assert_eq!(decoded(&ca, "tls.crt"), "API-CA-CERT");
    assert_eq!(decoded(&ca, "tls.key"), "API-CA-KEY");

    // An event says so.
    let events = server.events();
    let moved: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "PrivateKeysMoved")
        .collect();
    assert_eq!(moved.len(), 1, "{events:#?}");
    assert_eq!(moved[0]["regarding"]["name"], "c1");
    assert!(
        moved[0]["note"]
            .as_str()
            .unwrap()
            .contains("moved 8 inline private key(s)"),
        "{}",
        moved[0]["note"]
    );
    assert!(
        !moved[0].to_string().contains("API-CA-KEY"),
        "no key in the event"
    );

    // Read again: resolved from the Secrets, nothing written.
    let requests = server.requests().len();
    let again: Cluster = server.block_on(async {
        let store = KubeStore::new(server.client().await.unwrap(), "test/reporter", "test-2");
        store.get(&key()).await.unwrap().unwrap()
    });
    assert_eq!(again.spec, cluster.spec);
    assert_eq!(
        again.status.client_certificates,
        cluster.status.client_certificates
    );
    let writes: Vec<String> = server.requests()[requests..]
        .iter()
        .filter(|r| !r.starts_with("GET "))
        .cloned()
        .collect();
    assert_eq!(writes, Vec::<String>::new());
}

#[test]
fn a_reader_of_clusters_without_secrets_sees_no_private_key() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    apply_inline(&server);
    server.block_on(async {
        let store = KubeStore::new(server.client().await.unwrap(), "test/reporter", "test-1");
        store.get::<Cluster>(&key()).await.unwrap().unwrap();
    });
    server
        .call(
            Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            Some(&json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "cluster-reader"},
                "rules": [{"apiGroups": ["cluster.oneinfra.ereslibre.es"],
                           "resources": ["clusters"], "verbs": ["get", "list"]}],
            })),
        )
        .unwrap();
    server
        .call(
            Method::POST,
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
            Some(&json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "alice-reads-clusters", "namespace": NS},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "cluster-reader"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": "alice"}],
            })),
        )
        .unwrap();
    let kubeconfig = server.local().kubeconfig_for("alice", &[]).unwrap();
    server.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let clusters: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(
            client.clone(),
            NS,
            &oi_manager::kube_store::api_resource(oi_api::Kind::Cluster),
        );
        let cluster = clusters.get("c1").await.unwrap();
        let text = serde_json::to_string(&cluster).unwrap();
        assert!(
            text.contains("API-CA-CERT"),
            "alice reads the Cluster: {text}"
        );
        assert_eq!(
            inline_keys(&serde_json::to_value(&cluster).unwrap()),
            Vec::<String>::new()
        );
        for key in ["KEY", "SA-KEY", "WG-KEY", "ADMIN-KEY"] {
            assert!(!text.contains(&format!("\"{key}")), "{key} in {text}");
        }
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client, NS);
        match secrets.get("c1-ca").await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
            other => panic!("alice read the CA's Secret: {other:?}"),
        }
    });
}

/// A store reading through a synced watch cache, as the manager runs it, and the cache.
async fn cached_store(server: &ApiServer) -> (KubeStore, std::sync::Arc<WatchCache>) {
    let client = server.client().await.unwrap();
    let cache = std::sync::Arc::new(WatchCache::start(&client, None, &CACHED_KINDS));
    cache.synced().await;
    let store =
        KubeStore::new(client, "test/reporter", "test-1").with_cache(std::sync::Arc::clone(&cache));
    (store, cache)
}

/// Polls `f` until it answers `Some`, for at most 10 s.
async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn keys_change_through_their_secrets_and_go_with_their_cluster() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    apply_inline(&server);
    server.block_on(async {
        let (store, cache) = cached_store(&server).await;
        let mut cluster: Cluster = store.get(&key()).await.unwrap().unwrap();

        // The watch cache holds the Cluster with its keys, read from the Secrets it watches.
        eventually("the cache's copy with its keys", || {
            store.cached::<Cluster, _>(&key(), |c| {
                (c.spec.join_key.as_ref()?.private_key == "JOIN-KEY").then_some(())
            })?
        })
        .await;

        // A key changes (as a rotation's step does): its Secret holds the new pair alone once
        // the Cluster's write went through.
        let ca = cluster.spec.api_server.ca.as_mut().unwrap();
        ca.certificate = "API-CA-CERT-2".into();
        ca.private_key = "API-CA-KEY-2".into();
        // A key goes: its Secret goes.
        cluster.spec.join_key = None;
        cluster.metadata.finalizers = vec!["test/hold".into()];
        let cluster = store.update(&cluster).await.unwrap();
        assert_eq!(
            cluster.spec.api_server.ca.as_ref().unwrap().private_key,
            "API-CA-KEY-2"
        );
        let ca = server
            .key_secrets(NS)
            .into_iter()
            .find(|s| s["metadata"]["name"] == "c1-ca")
            .unwrap();
        assert_eq!(decoded(&ca, "tls.key"), "API-CA-KEY-2");
        assert!(ca["data"].get("previous.key").is_none(), "{ca:#}");
        assert!(!secret_names(&server).contains(&"c1-join-key".to_string()));
        let fresh: Cluster = server.object(&key()).unwrap();
        assert_eq!(fresh.spec, cluster.spec);

        // Listed from the cache, with the new key once the watch brought it.
        eventually("the cache's copy with the new key", || {
            let listed = cache.list_map::<Cluster, _>(Some(NS), |c| {
                c.spec
                    .api_server
                    .ca
                    .as_ref()
                    .map(|ca| ca.private_key.clone())
            })?;
            (listed.ok()? == [Some("API-CA-KEY-2".to_string())]).then_some(())
        })
        .await;

        // Deleted: its Secrets go when its last finalizer does.
        store.delete::<Cluster>(&key()).await.unwrap();
        let mut marked: Cluster = store.get(&key()).await.unwrap().unwrap();
        assert!(marked.is_being_deleted());
        assert!(!secret_names(&server).is_empty());
        marked.metadata.finalizers.clear();
        store.update(&marked).await.unwrap();
        assert_eq!(store.get::<Cluster>(&key()).await.unwrap(), None);
        assert_eq!(secret_names(&server), Vec::<String>::new());
    });
}

/// `kubectl apply` may create a Cluster before the Secrets it references: it cannot be read
/// until they arrive (an error naming the field and the Secret, never a Cluster without its
/// keys), and the watch cache reads it as soon as they do, with no change to the Cluster.
#[test]
fn a_cluster_applied_before_its_secrets_is_read_once_they_arrive() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    let (cluster, secrets) =
        oi_manager::keys::externalize(oi_api::Kind::Cluster, &inline_cluster()).unwrap();
    server
        .call(
            Method::POST,
            &format!("/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/{NS}/clusters"),
            Some(&cluster),
        )
        .unwrap();
    server.block_on(async {
        let (store, cache) = cached_store(&server).await;
        let e = store.get::<Cluster>(&key()).await.unwrap_err().to_string();
        assert!(
            e.contains("spec.apiServer.ca.privateKeyRef") && e.contains("Secret tenants/c1-ca"),
            "{e}"
        );
        let listed = cache
            .list_map::<Cluster, _>(Some(NS), |c| c.metadata.name.clone())
            .unwrap();
        assert!(listed.is_err(), "{listed:?}");

        for secret in &secrets {
            server
                .call(
                    Method::POST,
                    &format!("/api/v1/namespaces/{NS}/secrets"),
                    Some(secret),
                )
                .unwrap();
        }
        eventually("the cache's copy with its keys", || {
            let listed = cache
                .list_map::<Cluster, _>(Some(NS), |c| c.spec.vpn.private_key.clone())?
                .ok()?;
            (listed == ["WG-KEY"]).then_some(())
        })
        .await;
        let read: Cluster = store.get(&key()).await.unwrap().unwrap();
        assert_eq!(read.spec.join_key.unwrap().private_key, "JOIN-KEY");
    });
}
