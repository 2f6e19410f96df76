//! KubeStore, the leader election and the controllers against a mock API server, checking
//! the exact requests (see `mock/mod.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod mock;

use http::Method;
use mock::Script;
use oi_api::{
    Cluster, ClusterSpec, Component, ComponentRole, ComponentSpec, Hypervisor, HypervisorSpec,
    Kind, LocalCriEndpoint, ObjectKey, ObjectMeta, PortRange,
};
use oi_manager::kube_store::KubeStore;
use oi_manager::store::{EventType, ObjectEvent, Store, StoreError};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const CLUSTERS: &str = "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/ns/clusters";
const COMPONENTS: &str = "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/ns/components";
const ALL_COMPONENTS: &str = "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/components";
const HYPERVISORS: &str = "/apis/infra.oneinfra.ereslibre.es/v1alpha1/hypervisors";

fn store() -> (KubeStore, Script) {
    let (client, handle) = mock::client();
    (
        KubeStore::new(client, "oneinfra.ereslibre.es/oi-manager", "oi-manager-0"),
        Script::new(handle),
    )
}

/// A Cluster as the API server returns it.
fn cluster_json(name: &str, version: &str) -> Value {
    json!({
        "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
        "kind": "Cluster",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": format!("uid-{name}"),
            "resourceVersion": version,
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["cluster.oneinfra.ereslibre.es/cleanup"],
        },
        "spec": {"kubernetesVersion": "1.33.1", "controlPlaneReplicas": 3},
    })
}

fn component_json(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
        "kind": "Component",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "3", "uid": format!("uid-{name}")},
        "spec": {"cluster": "c1", "role": "control-plane", "hypervisor": "h1"},
    })
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn get_reads_one_object_and_a_missing_one_is_none() {
    let (store, mut api) = store();
    let key = ObjectKey::new("ns", "c1");
    let (got, ()) = tokio::join!(store.get::<Cluster>(&key), async {
        api.expect(Method::GET, &format!("{CLUSTERS}/c1"))
            .await
            .respond(200, cluster_json("c1", "7"));
    });
    assert_eq!(
        got.unwrap(),
        Some(decode::<Cluster>(cluster_json("c1", "7")))
    );

    let gone = ObjectKey::new("ns", "gone");
    let (got, ()) = tokio::join!(store.get::<Cluster>(&gone), async {
        api.expect(Method::GET, &format!("{CLUSTERS}/gone"))
            .await
            .fail(404, "NotFound", "clusters \"gone\" not found");
    });
    assert_eq!(got.unwrap(), None);
    api.assert_idle().await;
}

#[tokio::test]
async fn get_of_a_cluster_scoped_kind_has_no_namespace_in_the_path() {
    let (store, mut api) = store();
    let body = json!({
        "apiVersion": "infra.oneinfra.ereslibre.es/v1alpha1",
        "kind": "Hypervisor",
        "metadata": {"name": "h1", "resourceVersion": "2"},
        "spec": {"localCRIEndpoint": {"criEndpointPath": "/run/h1.sock"}, "public": false,
                 "ipAddress": "10.0.0.1", "portRange": {"low": 30000, "high": 30010}},
    });
    let key = ObjectKey::cluster_scoped("h1");
    let (got, ()) = tokio::join!(store.get::<Hypervisor>(&key), async {
        api.expect(Method::GET, &format!("{HYPERVISORS}/h1"))
            .await
            .respond(200, body.clone());
    });
    let expected = Hypervisor {
        metadata: ObjectMeta {
            resource_version: Some("2".into()),
            ..ObjectMeta::named("h1")
        },
        ..Hypervisor::new(
            ObjectMeta::default(),
            HypervisorSpec {
                local_cri_endpoint: Some(LocalCriEndpoint {
                    cri_endpoint_path: "/run/h1.sock".into(),
                }),
                remote_cri_endpoint: None,
                public: false,
                ip_address: "10.0.0.1".into(),
                port_range: PortRange {
                    low: 30000,
                    high: 30010,
                },
            },
        )
    };
    assert_eq!(got.unwrap(), Some(expected));
}

#[tokio::test]
async fn list_reads_every_namespace_or_one() {
    let (store, mut api) = store();
    let list = |items: Vec<Value>| {
        json!({"apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1", "kind": "ComponentList",
               "metadata": {"resourceVersion": "9"}, "items": items})
    };
    let (all, ()) = tokio::join!(store.list::<Component>(None), async {
        api.expect(Method::GET, &format!("{ALL_COMPONENTS}?"))
            .await
            .respond(
                200,
                list(vec![
                    component_json("a", "c1-0"),
                    component_json("b", "c1-1"),
                ]),
            );
    });
    let names: Vec<(String, String)> = all
        .unwrap()
        .into_iter()
        .map(|c| (c.metadata.namespace.unwrap(), c.metadata.name))
        .collect();
    assert_eq!(
        names,
        [
            ("a".to_string(), "c1-0".to_string()),
            ("b".into(), "c1-1".into())
        ]
    );

    let (one, ()) = tokio::join!(store.list::<Component>(Some("ns")), async {
        api.expect(Method::GET, &format!("{COMPONENTS}?"))
            .await
            .respond(200, list(vec![component_json("ns", "c1-0")]));
    });
    assert_eq!(
        one.unwrap(),
        [decode::<Component>(component_json("ns", "c1-0"))]
    );

    // Hypervisors are cluster scoped: the namespace is ignored.
    let (hs, ()) = tokio::join!(store.list::<Hypervisor>(Some("ns")), async {
        api.expect(Method::GET, &format!("{HYPERVISORS}?"))
            .await
            .respond(
                200,
                json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}),
            );
    });
    assert_eq!(hs.unwrap(), []);
    api.assert_idle().await;
}

fn new_component() -> Component {
    let mut meta = ObjectMeta::namespaced("ns", "c1-0");
    meta.finalizers = vec!["cluster.oneinfra.ereslibre.es/cleanup".into()];
    meta.resource_version = Some("stale".into());
    Component::new(
        meta,
        ComponentSpec {
            cluster: "c1".into(),
            role: ComponentRole::ControlPlane,
            hypervisor: Some("h1".into()),
        },
    )
}

#[tokio::test]
async fn create_posts_the_object_without_resource_version() {
    let (store, mut api) = store();
    let component = new_component();
    let (created, ()) = tokio::join!(store.create(&component), async {
        let exchange = api.expect(Method::POST, &format!("{COMPONENTS}?")).await;
        assert_eq!(
            exchange.body(),
            &json!({
                "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
                "kind": "Component",
                "metadata": {
                    "name": "c1-0",
                    "namespace": "ns",
                    "finalizers": ["cluster.oneinfra.ereslibre.es/cleanup"],
                },
                "spec": {"cluster": "c1", "role": "control-plane", "hypervisor": "h1"},
            })
        );
        let mut answer = exchange.body().clone();
        answer["metadata"]["uid"] = json!("u-1");
        answer["metadata"]["resourceVersion"] = json!("11");
        exchange.respond(201, answer);
    });
    let created = created.unwrap();
    assert_eq!(created.metadata.uid.as_deref(), Some("u-1"));
    assert_eq!(created.metadata.resource_version.as_deref(), Some("11"));

    let (again, ()) = tokio::join!(store.create(&component), async {
        api.expect(Method::POST, &format!("{COMPONENTS}?"))
            .await
            .fail(409, "AlreadyExists", "components \"c1-0\" already exists");
    });
    assert_eq!(
        again.unwrap_err(),
        StoreError::AlreadyExists {
            kind: Kind::Component,
            key: ObjectKey::new("ns", "c1-0")
        }
    );
    api.assert_idle().await;
}

#[tokio::test]
async fn update_puts_the_object_with_its_resource_version_and_a_stale_one_conflicts() {
    let (store, mut api) = store();
    let mut cluster: Cluster = decode(cluster_json("c1", "7"));
    cluster.metadata.finalizers.clear();
    let (updated, ()) = tokio::join!(store.update(&cluster), async {
        let exchange = api.expect(Method::PUT, &format!("{CLUSTERS}/c1?")).await;
        let mut expected = cluster_json("c1", "7");
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("finalizers");
        assert_eq!(exchange.body(), &expected);
        let mut answer = expected;
        answer["metadata"]["resourceVersion"] = json!("8");
        exchange.respond(200, answer);
    });
    assert_eq!(
        updated.unwrap().metadata.resource_version.as_deref(),
        Some("8")
    );

    let message = "Operation cannot be fulfilled on clusters.cluster.oneinfra.ereslibre.es \"c1\": the object has been modified; please apply your changes to the latest version and try again";
    let (stale, ()) = tokio::join!(store.update(&cluster), async {
        api.expect(Method::PUT, &format!("{CLUSTERS}/c1?"))
            .await
            .fail(409, "Conflict", message);
    });
    assert_eq!(
        stale.unwrap_err(),
        StoreError::Conflict {
            kind: Kind::Cluster,
            key: ObjectKey::new("ns", "c1"),
            message: message.to_string(),
        }
    );
    api.assert_idle().await;
}

#[tokio::test]
async fn update_status_puts_the_status_subresource() {
    let (store, mut api) = store();
    let mut cluster: Cluster = decode(cluster_json("c1", "7"));
    cluster.status.api_server_endpoint = "https://10.0.0.1:30000".into();
    let (updated, ()) = tokio::join!(store.update_status(&cluster), async {
        let exchange = api
            .expect(Method::PUT, &format!("{CLUSTERS}/c1/status?"))
            .await;
        let mut expected = cluster_json("c1", "7");
        expected["status"] = json!({"apiServerEndpoint": "https://10.0.0.1:30000"});
        assert_eq!(exchange.body(), &expected);
        expected["metadata"]["resourceVersion"] = json!("8");
        exchange.respond(200, expected);
    });
    let updated = updated.unwrap();
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("8"));
    assert_eq!(updated.status.api_server_endpoint, "https://10.0.0.1:30000");
    api.assert_idle().await;
}

#[tokio::test]
async fn a_rejected_object_is_invalid_without_its_values() {
    let (store, mut api) = store();
    let cluster: Cluster = decode(cluster_json("c1", "7"));
    let (result, ()) = tokio::join!(store.update(&cluster), async {
        api.expect(Method::PUT, &format!("{CLUSTERS}/c1?")).await.fail(
            422,
            "Invalid",
            "Cluster.cluster.oneinfra.ereslibre.es \"c1\" is invalid: spec.joinKey.privateKey: Invalid value: \"-----BEGIN PRIVATE KEY-----\": bad",
        );
    });
    assert_eq!(
        result.unwrap_err(),
        StoreError::Invalid {
            kind: Kind::Cluster,
            key: ObjectKey::new("ns", "c1"),
            message: "Cluster.cluster.oneinfra.ereslibre.es \"<redacted>\" is invalid: spec.joinKey.privateKey: Invalid value: \"<redacted>\": bad".into(),
        }
    );
}

#[tokio::test]
async fn delete_sends_delete_and_a_missing_object_is_fine() {
    let (store, mut api) = store();
    let key = ObjectKey::new("ns", "c1-0");
    let (deleted, ()) = tokio::join!(store.delete::<Component>(&key), async {
        let exchange = api
            .expect(Method::DELETE, &format!("{COMPONENTS}/c1-0?"))
            .await;
        assert_eq!(exchange.body(), &json!({}));
        // With finalizers the object stays, marked.
        let mut answer = component_json("ns", "c1-0");
        answer["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        exchange.respond(200, answer);
    });
    deleted.unwrap();

    let (missing, ()) = tokio::join!(store.delete::<Component>(&key), async {
        api.expect(Method::DELETE, &format!("{COMPONENTS}/c1-0?"))
            .await
            .fail(404, "NotFound", "components \"c1-0\" not found");
    });
    missing.unwrap();

    let (broken, ()) = tokio::join!(store.delete::<Component>(&key), async {
        api.expect(Method::DELETE, &format!("{COMPONENTS}/c1-0?"))
            .await
            .fail(503, "ServiceUnavailable", "etcd is down");
    });
    assert_eq!(
        broken.unwrap_err(),
        StoreError::Unavailable(
            "delete Component ns/c1-0: the API server answered 503 ServiceUnavailable: etcd is down"
                .into()
        )
    );
    api.assert_idle().await;
}

#[tokio::test]
async fn publish_creates_an_events_k8s_io_event() {
    let (store, mut api) = store();
    let event = ObjectEvent {
        kind: Kind::Cluster,
        key: ObjectKey::new("ns", "c1"),
        uid: Some("uid-c1".into()),
        type_: EventType::Normal,
        reason: "ClusterReady".into(),
        action: "Reconcile".into(),
        note: "cluster c1 is ready".into(),
    };
    let before = k8s_openapi::jiff::Timestamp::now();
    let (published, mut body) = tokio::join!(store.publish(&event), async {
        let exchange = api
            .expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events?")
            .await;
        let body = exchange.body().clone();
        exchange.respond(201, body.clone());
        body
    });
    published.unwrap();
    let event_time: k8s_openapi::jiff::Timestamp =
        body["eventTime"].as_str().unwrap().parse().unwrap();
    let after = k8s_openapi::jiff::Timestamp::now();
    assert!(before <= event_time && event_time <= after, "{event_time}");
    body.as_object_mut().unwrap().remove("eventTime");
    assert_eq!(
        body,
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": "c1.", "namespace": "ns"},
            "reportingController": "oneinfra.ereslibre.es/oi-manager",
            "reportingInstance": "oi-manager-0",
            "action": "Reconcile",
            "reason": "ClusterReady",
            "note": "cluster c1 is ready",
            "type": "Normal",
            "regarding": {
                "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
                "kind": "Cluster",
                "name": "c1",
                "namespace": "ns",
                "uid": "uid-c1",
            },
        })
    );

    // About a cluster-scoped object: in `default`, with a note cut to 1 KiB.
    let event = ObjectEvent {
        kind: Kind::Hypervisor,
        key: ObjectKey::cluster_scoped("h1"),
        uid: None,
        type_: EventType::Warning,
        reason: "HypervisorUnreachable".into(),
        action: "Reconcile".into(),
        note: "x".repeat(5000),
    };
    let (published, body) = tokio::join!(store.publish(&event), async {
        let exchange = api
            .expect(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/default/events?",
            )
            .await;
        let body = exchange.body().clone();
        exchange.fail(403, "Forbidden", "events is forbidden");
        body
    });
    assert_eq!(body["note"], json!("x".repeat(1024)));
    assert_eq!(body["type"], json!("Warning"));
    assert_eq!(
        body["regarding"],
        json!({"apiVersion": "infra.oneinfra.ereslibre.es/v1alpha1", "kind": "Hypervisor", "name": "h1"})
    );
    assert_eq!(
        published.unwrap_err(),
        StoreError::Unavailable(
            "publish an event about Hypervisor h1: the API server answered 403 Forbidden: events is forbidden"
                .into()
        )
    );
    api.assert_idle().await;
}
