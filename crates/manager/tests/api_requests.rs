//! KubeStore and the leader election against a scripted API server (tower-test, as
//! kube-rs's controller-rs tests do): each test answers the exact requests it expects, in
//! order (see `support/script.rs`). What the requests do is the API server stand-in's
//! business (`oi-manager-testsupport`, one copy of the semantics); here, their shape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/script.rs"]
mod mock;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use mock::Script;
use oi_api::{
    Cluster, Component, ComponentRole, ComponentSpec, Hypervisor, HypervisorSpec, Kind,
    LocalCriEndpoint, ObjectKey, ObjectMeta, PortRange,
};

use oi_manager::kube_store::KubeStore;
use oi_manager::leader::{LeaderElector, LeaseConfig};
use oi_manager::metrics::Metrics;
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
                capacity: None,
                unschedulable: false,
                drain: false,
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
async fn an_object_our_types_cannot_read_is_unavailable_without_its_values() {
    let (store, mut api) = store();
    let mut body = cluster_json("c1", "7");
    // A field a newer CRD might add, next to key material.
    body["spec"]["futureField"] = json!(true);
    body["spec"]["joinKey"] = json!({"privateKey": "-----BEGIN PRIVATE KEY-----"});
    let key = ObjectKey::new("ns", "c1");
    let (got, ()) = tokio::join!(store.get::<Cluster>(&key), async {
        api.expect(Method::GET, &format!("{CLUSTERS}/c1"))
            .await
            .respond(200, body);
    });
    let StoreError::Unavailable(message) = got.unwrap_err() else {
        panic!("not Unavailable");
    };
    assert!(
        message.starts_with(
            "Cluster ns/c1 from the API server does not decode: unknown field `futureField`"
        ),
        "{message}"
    );
    assert!(!message.contains("PRIVATE"), "{message}");
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

// ---------------------------------------------------------------------------------------
// Leader election

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/oi-system/leases/oi-manager";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/oi-system/leases";

fn elector(identity: &str) -> (LeaderElector, Script) {
    let (client, handle) = mock::client();
    let config = LeaseConfig::new("oi-system", "oi-manager", identity);
    (LeaderElector::new(client, config), Script::new(handle))
}

fn micro(t: k8s_openapi::jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn ago(seconds: i64) -> String {
    micro(
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(seconds),
    )
}

fn lease(holder: &str, renewed: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "oi-manager", "namespace": "oi-system", "resourceVersion": "41"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": renewed,
            "leaseTransitions": transitions,
        },
    })
}

fn time_of(v: &Value) -> k8s_openapi::jiff::Timestamp {
    v.as_str().unwrap().parse().unwrap()
}

/// Asserts that `t` is a MicroTime within the last minute.
fn assert_recent(t: &Value) {
    let t = time_of(t);
    let now = k8s_openapi::jiff::Timestamp::now();
    let age = now.duration_since(t);
    assert!(
        age >= k8s_openapi::jiff::SignedDuration::ZERO
            && age < k8s_openapi::jiff::SignedDuration::from_secs(60),
        "{t}"
    );
}

#[tokio::test]
async fn an_absent_lease_is_created() {
    let (elector, mut api) = elector("pod-a");
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE).await.fail(
            404,
            "NotFound",
            "leases \"oi-manager\" not found",
        );
        let exchange = api.expect(Method::POST, &format!("{LEASES}?")).await;
        let body = exchange.body().clone();
        assert_recent(&body["spec"]["acquireTime"]);
        assert_eq!(body["spec"]["acquireTime"], body["spec"]["renewTime"]);
        let mut rest = body.clone();
        for t in ["acquireTime", "renewTime"] {
            rest["spec"].as_object_mut().unwrap().remove(t);
        }
        assert_eq!(
            rest,
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "oi-manager", "namespace": "oi-system"},
                "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "leaseTransitions": 0},
            })
        );
        exchange.respond(201, body);
    });
    assert!(held.unwrap());
    api.assert_idle().await;
}

#[tokio::test]
async fn a_lease_created_by_another_candidate_first_is_not_ours() {
    let (elector, mut api) = elector("pod-a");
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .fail(404, "NotFound", "not found");
        api.expect(Method::POST, &format!("{LEASES}?")).await.fail(
            409,
            "AlreadyExists",
            "leases \"oi-manager\" already exists",
        );
    });
    assert!(!held.unwrap());
    api.assert_idle().await;
}

#[tokio::test]
async fn our_lease_is_renewed_with_its_resource_version() {
    let (elector, mut api) = elector("pod-a");
    let old = ago(5);
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, lease("pod-a", &old, 2));
        let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
        let body = exchange.body().clone();
        assert!(time_of(&body["spec"]["renewTime"]) > time_of(&json!(old)));
        assert_recent(&body["spec"]["renewTime"]);
        let mut expected = lease("pod-a", "", 2);
        expected["spec"]["renewTime"] = body["spec"]["renewTime"].clone();
        // Same holder: acquireTime and leaseTransitions stay; resourceVersion is the one read.
        assert_eq!(body, expected);
        exchange.respond(200, body);
    });
    assert!(held.unwrap());
    api.assert_idle().await;
}

#[tokio::test]
async fn a_fresh_lease_of_another_holder_is_left_alone() {
    let (elector, mut api) = elector("pod-a");
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, lease("pod-b", &ago(3), 2));
    });
    assert!(!held.unwrap());
    // No write.
    api.assert_idle().await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_is_taken_over() {
    let (elector, mut api) = elector("pod-a");
    // First seen: whatever its renewTime says (another machine's clock), it counts as
    // renewed now.
    let stale = lease("pod-b", &ago(16), 2);
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, stale.clone());
    });
    assert!(!held.unwrap());
    // Unchanged for 14 s of our clock: still valid.
    tokio::time::advance(Duration::from_secs(14)).await;
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, stale.clone());
    });
    assert!(!held.unwrap());
    // Unchanged for leaseDurationSeconds (15 s): expired, taken over.
    tokio::time::advance(Duration::from_secs(1)).await;
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, stale.clone());
        let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
        let body = exchange.body().clone();
        assert_recent(&body["spec"]["acquireTime"]);
        assert_eq!(body["spec"]["acquireTime"], body["spec"]["renewTime"]);
        let mut expected = lease("pod-a", "", 3);
        expected["spec"]["renewTime"] = body["spec"]["renewTime"].clone();
        expected["spec"]["acquireTime"] = body["spec"]["acquireTime"].clone();
        assert_eq!(body, expected);
        exchange.respond(200, body);
    });
    assert!(held.unwrap());
    api.assert_idle().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_its_holder_renews_is_never_taken_whatever_its_clock_says() {
    let (elector, mut api) = elector("pod-a");
    // pod-b's clock is a minute behind ours, so every renewTime it writes looks expired by
    // our clock; it renews every 2 s.
    for round in 0..10 {
        let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
            api.expect(Method::GET, LEASE)
                .await
                .respond(200, lease("pod-b", &ago(60 - round * 2), 2));
        });
        assert!(!held.unwrap(), "round {round}");
        tokio::time::advance(Duration::from_secs(2)).await;
    }
    // It stops renewing: 15 s after the last change we saw, the Lease is ours.
    let last = lease("pod-b", &ago(40), 2);
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, last.clone());
    });
    assert!(!held.unwrap());
    tokio::time::advance(Duration::from_secs(15)).await;
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, last.clone());
        let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
        assert_eq!(exchange.body()["spec"]["holderIdentity"], json!("pod-a"));
        assert_eq!(exchange.body()["spec"]["leaseTransitions"], json!(3));
        let body = exchange.body().clone();
        exchange.respond(200, body);
    });
    assert!(held.unwrap());
    api.assert_idle().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_dated_in_the_future_still_expires_when_nobody_renews_it() {
    let (elector, mut api) = elector("pod-a");
    // The holder's clock ran an hour ahead of ours, then the holder died.
    let ahead = micro(
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(3600),
    );
    let dead = lease("pod-b", &ahead, 2);
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, dead.clone());
    });
    assert!(!held.unwrap());
    tokio::time::advance(Duration::from_secs(15)).await;
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, dead.clone());
        let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
        assert_eq!(exchange.body()["spec"]["holderIdentity"], json!("pod-a"));
        let body = exchange.body().clone();
        exchange.respond(200, body);
    });
    assert!(held.unwrap());
    api.assert_idle().await;
}

#[tokio::test(start_paused = true)]
async fn losing_the_race_to_an_expired_lease_is_not_leading() {
    let (elector, mut api) = elector("pod-a");
    let stale = lease("pod-b", &ago(60), 2);
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, stale.clone());
    });
    assert!(!held.unwrap());
    tokio::time::advance(Duration::from_secs(15)).await;
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, stale.clone());
        api.expect(Method::PUT, &format!("{LEASE}?")).await.fail(
            409,
            "Conflict",
            "the object has been modified",
        );
    });
    assert!(!held.unwrap());
    api.assert_idle().await;
}

#[tokio::test]
async fn other_errors_are_returned() {
    let (elector, mut api) = elector("pod-a");
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE)
            .await
            .fail(403, "Forbidden", "leases is forbidden");
    });
    let error = held.unwrap_err();
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 403),
        "{error}"
    );
}

#[tokio::test]
async fn release_frees_only_our_lease() {
    let (elector, mut api) = elector("pod-a");
    let (released, ()) = tokio::join!(elector.release(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, lease("pod-a", &ago(1), 2));
        let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
        let body = exchange.body().clone();
        assert_recent(&body["spec"]["renewTime"]);
        let mut expected = lease("pod-a", "", 2);
        expected["spec"]
            .as_object_mut()
            .unwrap()
            .remove("holderIdentity");
        expected["spec"]["leaseDurationSeconds"] = json!(1);
        expected["spec"]["renewTime"] = body["spec"]["renewTime"].clone();
        assert_eq!(body, expected);
        exchange.respond(200, body);
    });
    released.unwrap();

    let (released, ()) = tokio::join!(elector.release(), async {
        api.expect(Method::GET, LEASE)
            .await
            .respond(200, lease("pod-b", &ago(1), 3));
    });
    released.unwrap();
    api.assert_idle().await;
}

#[tokio::test]
async fn a_released_lease_is_taken_at_once() {
    let (elector, mut api) = elector("pod-b");
    let mut released = lease("", &ago(0), 2);
    released["spec"]
        .as_object_mut()
        .unwrap()
        .remove("holderIdentity");
    released["spec"]["leaseDurationSeconds"] = json!(1);
    let (held, ()) = tokio::join!(elector.try_acquire_or_renew(), async {
        api.expect(Method::GET, LEASE).await.respond(200, released);
        let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
        assert_eq!(exchange.body()["spec"]["holderIdentity"], json!("pod-b"));
        assert_eq!(exchange.body()["spec"]["leaseDurationSeconds"], json!(15));
        assert_eq!(exchange.body()["spec"]["leaseTransitions"], json!(3));
        let body = exchange.body().clone();
        exchange.respond(200, body);
    });
    assert!(held.unwrap());
}

fn leader_metric(metrics: &Metrics) -> String {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("oi_manager_leader "))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(start_paused = true)]
async fn spawn_leads_renews_and_releases_on_shutdown() {
    let (elector, mut api) = elector("pod-a");
    let metrics = Arc::new(Metrics::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (mut leader, task) = elector.spawn(Arc::clone(&metrics), async {
        let _ = stopped.await;
    });
    assert!(!*leader.borrow());

    api.expect(Method::GET, LEASE)
        .await
        .fail(404, "NotFound", "not found");
    let exchange = api.expect(Method::POST, &format!("{LEASES}?")).await;
    let body = exchange.body().clone();
    exchange.respond(201, body.clone());
    leader.changed().await.unwrap();
    assert!(*leader.borrow());
    assert_eq!(leader_metric(&metrics), "oi_manager_leader 1");

    // A renewal after the retry period (2 s of paused time).
    let mut stored = body;
    stored["metadata"]["resourceVersion"] = json!("1");
    api.expect(Method::GET, LEASE)
        .await
        .respond(200, stored.clone());
    let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
    assert_eq!(exchange.body()["metadata"]["resourceVersion"], json!("1"));
    let renewed = exchange.body().clone();
    exchange.respond(200, renewed.clone());
    assert!(*leader.borrow());

    stop.send(()).unwrap();
    api.expect(Method::GET, LEASE).await.respond(200, renewed);
    let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
    assert_eq!(exchange.body()["spec"].get("holderIdentity"), None);
    assert_eq!(exchange.body()["spec"]["leaseDurationSeconds"], json!(1));
    let body = exchange.body().clone();
    exchange.respond(200, body);
    task.await.unwrap();
    assert!(!*leader.borrow());
    assert_eq!(leader_metric(&metrics), "oi_manager_leader 0");
}

#[tokio::test(start_paused = true)]
async fn spawn_steps_down_when_another_replica_holds_the_lease() {
    let (elector, mut api) = elector("pod-a");
    let metrics = Arc::new(Metrics::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (mut leader, task) = elector.spawn(Arc::clone(&metrics), async {
        let _ = stopped.await;
    });
    api.expect(Method::GET, LEASE)
        .await
        .respond(200, lease("pod-a", &ago(1), 0));
    let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
    let body = exchange.body().clone();
    exchange.respond(200, body);
    leader.changed().await.unwrap();
    assert!(*leader.borrow());

    // Someone else holds it now (our renewals stopped for longer than the lease, say).
    api.expect(Method::GET, LEASE)
        .await
        .respond(200, lease("pod-b", &ago(0), 1));
    leader.changed().await.unwrap();
    assert!(!*leader.borrow());
    assert_eq!(leader_metric(&metrics), "oi_manager_leader 0");
    // Back to a candidate: it tries again at once, and finds the Lease still taken.
    api.expect(Method::GET, LEASE)
        .await
        .respond(200, lease("pod-b", &ago(0), 1));

    // Shut down while not leading: nothing to release.
    stop.send(()).unwrap();
    task.await.unwrap();
    api.assert_idle().await;
}

#[tokio::test(start_paused = true)]
async fn spawn_steps_down_when_renewals_fail_past_the_deadline() {
    let (elector, mut api) = elector("pod-a");
    let metrics = Arc::new(Metrics::new());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (mut leader, task) = elector.spawn(Arc::clone(&metrics), async {
        let _ = stopped.await;
    });
    api.expect(Method::GET, LEASE)
        .await
        .respond(200, lease("pod-a", &ago(1), 0));
    let exchange = api.expect(Method::PUT, &format!("{LEASE}?")).await;
    let body = exchange.body().clone();
    exchange.respond(200, body);
    leader.changed().await.unwrap();
    let became = tokio::time::Instant::now();

    // Renewals every 2 s fail; at the 5th (10 s, the renew deadline) leadership is lost.
    for _ in 0..5 {
        assert!(*leader.borrow());
        api.expect(Method::GET, LEASE).await.fail(
            500,
            "InternalError",
            "etcdserver: request timed out",
        );
    }
    leader.changed().await.unwrap();
    assert!(!*leader.borrow());
    assert_eq!(became.elapsed(), std::time::Duration::from_secs(10));
    task.abort();
}
