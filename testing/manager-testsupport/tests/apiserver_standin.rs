//! The management API server stand-in (`oi_manager_testsupport::apiserver_standin`, the API of
//! `oi_kube_standin` over memory) through the same clients oi-manager uses (kube-rs over TLS
//! with a client certificate, `KubeStore`, the kube-runtime watcher), on loopback only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, WatchEvent, WatchParams};
use kube::core::DynamicObject;
use kube::runtime::watcher;
use oi_api::{
    Cluster, ClusterSpec, Hypervisor, HypervisorSpec, Kind, LocalCriEndpoint, ObjectKey,
    ObjectMeta, PortRange, Resource as _,
};
use oi_manager::kube_store::{KubeStore, api_resource};
use oi_manager::store::{EventType, ObjectEvent, Store as _, StoreError};
use serde_json::json;

use oi_manager_testsupport::apiserver_standin::{ApiServer, StandinOptions};

fn hypervisor(name: &str) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named(name),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: format!("/run/{name}/containerd.sock"),
            }),
            remote_cri_endpoint: None,
            public: false,
            ip_address: "10.211.150.2".to_string(),
            port_range: PortRange {
                low: 30000,
                high: 30100,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

async fn client(server: &ApiServer) -> kube::Client {
    server.client().await.unwrap()
}

async fn dynamic(server: &ApiServer, kind: Kind) -> Api<DynamicObject> {
    Api::all_with(client(server).await, &api_resource(kind))
}

fn version(v: &Option<String>) -> u64 {
    v.as_deref().unwrap().parse().unwrap()
}

#[test]
fn kube_store_through_the_stand_in_has_the_api_servers_semantics() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    server.block_on(async {
        let store = KubeStore::new(client(&server).await, "test/reporter", "test-1");
        let mut given = Cluster::new(
            ObjectMeta::namespaced("team-a", "c1"),
            ClusterSpec {
                kubernetes_version: "1.37.1".to_string(),
                ..ClusterSpec::default()
            },
        );
        given.metadata.finalizers = vec!["test/hold".to_string()];
        given.status.api_server_endpoint = "https://10.211.150.5:30000".to_string();

        // Created: server fields set, status dropped (a status subresource), managedFields
        // recorded and read back by our types.
        let created = store.create(&given).await.unwrap();
        assert!(version(&created.metadata.resource_version) > 0);
        assert!(created.metadata.uid.is_some());
        assert_eq!(created.metadata.generation, Some(1));
        assert_eq!(created.status.api_server_endpoint, "");
        assert_eq!(created.metadata.managed_fields.len(), 1);
        assert!(matches!(
            store.create(&given).await,
            Err(StoreError::AlreadyExists { .. })
        ));

        let mut edit = created.clone();
        edit.spec.control_plane_replicas = Some(3);
        let edited = store.update(&edit).await.unwrap();
        assert_eq!(edited.metadata.generation, Some(2));
        // The stale version is refused.
        assert!(matches!(
            store.update(&edit).await,
            Err(StoreError::Conflict { .. })
        ));

        let mut status = edited.clone();
        status.status.api_server_endpoint = "https://10.211.150.5:30000".to_string();
        status.spec.control_plane_replicas = Some(5);
        let written = store.update_status(&status).await.unwrap();
        assert_eq!(written.spec.control_plane_replicas, Some(3), "status only");
        assert_eq!(
            written.status.api_server_endpoint,
            "https://10.211.150.5:30000"
        );

        // Deleted while a finalizer holds it: marked, then gone once the finalizer goes.
        let key = ObjectKey::new("team-a", "c1");
        store.delete::<Cluster>(&key).await.unwrap();
        let marked: Cluster = store.get(&key).await.unwrap().unwrap();
        assert!(marked.metadata.deletion_timestamp.is_some());
        let mut release = marked;
        release.metadata.finalizers.clear();
        store.update(&release).await.unwrap();
        assert_eq!(store.get::<Cluster>(&key).await.unwrap(), None);
        // Deleting a missing object is Ok for the store (a 404 from the server).
        store.delete::<Cluster>(&key).await.unwrap();

        store
            .publish(&ObjectEvent {
                kind: Kind::Cluster,
                key: key.clone(),
                uid: created.metadata.uid.clone(),
                type_: EventType::Normal,
                reason: "ClusterReady".to_string(),
                action: "Reconcile".to_string(),
                note: "ready".to_string(),
            })
            .await
            .unwrap();
    });
    let events = server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["reason"], "ClusterReady");
    assert_eq!(events[0]["metadata"]["namespace"], "team-a");
    // generateName "c1.": five random characters follow, as Kubernetes makes them.
    let name = events[0]["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("c1.") && name.len() == 8, "{name}");

    let writes: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET "))
        .map(|r| r.split('?').next().unwrap().to_string())
        .collect();
    let c1 = "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/team-a/clusters";
    assert_eq!(
        writes,
        [
            format!("POST {c1}"),
            format!("POST {c1}"),
            format!("PUT {c1}/c1"),
            format!("PUT {c1}/c1"),
            format!("PUT {c1}/c1/status"),
            format!("DELETE {c1}/c1"),
            format!("PUT {c1}/c1"),
            format!("DELETE {c1}/c1"),
            "POST /apis/events.k8s.io/v1/namespaces/team-a/events".to_string(),
        ]
    );
}

#[test]
fn a_watch_replays_what_followed_its_version_then_follows_live() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    server.block_on(async {
        let api = dynamic(&server, Kind::Hypervisor).await;
        server.create(&hypervisor("h1")).unwrap();
        let listed = api.list(&Default::default()).await.unwrap();
        let from = listed.metadata.resource_version.clone().unwrap();
        assert_eq!(listed.items.len(), 1);

        // After the list: a second hypervisor and a status write of the first.
        let h2 = server.create(&hypervisor("h2")).unwrap();
        let mut h1: Hypervisor = server.object(&ObjectKey::cluster_scoped("h1")).unwrap();
        h1.status.freed_ports = vec![30001];
        let h1 = server.update_status(&h1).unwrap();

        let mut watch = api
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        let mut next = async || match watch.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            other => panic!("{other:?}"),
        };
        let seen = |(t, o): (&str, DynamicObject)| {
            (
                t.to_string(),
                o.metadata.name.unwrap(),
                o.metadata.resource_version.unwrap(),
            )
        };
        let s = |t: &str, n: &str, v: &Option<String>| {
            (t.to_string(), n.to_string(), v.clone().unwrap())
        };
        assert_eq!(
            seen(next().await),
            s("ADDED", "h2", &h2.metadata.resource_version)
        );
        assert_eq!(
            seen(next().await),
            s("MODIFIED", "h1", &h1.metadata.resource_version)
        );
        // Live: a deletion carries the object at the deletion's version.
        server
            .delete::<Hypervisor>(&ObjectKey::cluster_scoped("h2"))
            .unwrap();
        let (kind, name, deleted_at) = seen(next().await);
        assert_eq!((kind.as_str(), name.as_str()), ("DELETED", "h2"));
        assert!(deleted_at.parse::<u64>().unwrap() > version(&h1.metadata.resource_version));

        // Without a version: every object as ADDED first.
        let mut fresh = api
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        match fresh.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("h1")),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn the_kube_runtime_watcher_resumes_across_watch_timeouts_and_misses_nothing() {
    // Every watch ends after a second: the watcher resumes from the last version it saw.
    let server = ApiServer::start(StandinOptions {
        watch_timeout: Duration::from_secs(1),
        ..StandinOptions::default()
    })
    .unwrap();
    let seen = server.block_on(async {
        let api = dynamic(&server, Kind::Hypervisor).await;
        let writer = kube::runtime::reflector::store::Writer::new(api_resource(Kind::Hypervisor));
        let reader = writer.as_reader();
        let reflector = kube::runtime::reflector(writer, watcher(api, watcher::Config::default()));
        let watching = tokio::spawn(reflector.for_each(|_| async {}));
        reader.wait_until_ready().await.unwrap();
        // Writes for 3.5 s: creates, status writes, deletions, across several watches.
        for round in 0..35u16 {
            let name = format!("h{}", round % 7);
            let key = ObjectKey::cluster_scoped(name.clone());
            match server.object::<Hypervisor>(&key) {
                None => drop(server.create(&hypervisor(&name)).unwrap()),
                Some(_) if round % 5 == 0 => server.delete::<Hypervisor>(&key).unwrap(),
                Some(mut h) => {
                    h.status.freed_ports = vec![30000 + round];
                    server.update_status(&h).unwrap();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The reflector catches up with the store.
        let expected: BTreeMap<String, String> = server
            .objects::<Hypervisor>()
            .into_iter()
            .map(|h| (h.name().to_string(), h.metadata.resource_version.unwrap()))
            .collect();
        let mut seen = BTreeMap::new();
        for _ in 0..100 {
            seen = reader
                .state()
                .iter()
                .map(|o| {
                    (
                        o.metadata.name.clone().unwrap(),
                        o.metadata.resource_version.clone().unwrap(),
                    )
                })
                .collect();
            if seen == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        watching.abort();
        assert_eq!(seen, expected);
        seen
    });
    assert!(!seen.is_empty());
    // Several watches, each but the first resumed from a version (no relist needed).
    let watches: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.contains("watch=true"))
        .collect();
    assert!(watches.len() >= 3, "{watches:?}");
    let lists = server
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("GET ") && !r.contains("watch="))
        .count();
    assert_eq!(lists, 1, "{:?}", server.requests());
}

#[test]
fn leases_are_created_once_and_replaced_only_at_their_version() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    server.block_on(async {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client(&server).await, "oneinfra-system");
        assert!(matches!(
            leases.get("lock").await,
            Err(kube::Error::Api(s)) if s.code == 404
        ));
        let lease: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(json!({
            "metadata": {"name": "lock"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        }))
        .unwrap();
        let created = leases.create(&Default::default(), &lease).await.unwrap();
        assert!(matches!(
            leases.create(&Default::default(), &lease).await,
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists"
        ));
        let mut renewed = created.clone();
        renewed.spec.as_mut().unwrap().holder_identity = Some("b".to_string());
        leases
            .replace("lock", &Default::default(), &renewed)
            .await
            .unwrap();
        // The same (now stale) version again: a conflict.
        assert!(matches!(
            leases.replace("lock", &Default::default(), &renewed).await,
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "Conflict"
        ));
    });
    assert_eq!(
        server.lease_holder("oneinfra-system", "lock").as_deref(),
        Some("b")
    );
}

#[test]
fn selectors_are_served_unknown_resources_are_not_and_plain_http_is_refused() {
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    server.block_on(async {
        let mut labelled = hypervisor("h1");
        labelled
            .metadata
            .labels
            .insert("zone".to_string(), "a".to_string());
        server.create(&labelled).unwrap();
        server.create(&hypervisor("h2")).unwrap();
        let api = dynamic(&server, Kind::Hypervisor).await;
        let selected = api
            .list(&kube::api::ListParams::default().labels("zone=a"))
            .await
            .unwrap();
        let names: Vec<_> = selected
            .items
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["h1"]);
        let other = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("apps", "v1", "StatefulSet"),
            "statefulsets",
        );
        let missing = Api::<DynamicObject>::all_with(client(&server).await, &other)
            .list(&Default::default())
            .await;
        assert!(
            matches!(&missing, Err(kube::Error::Api(s)) if s.code == 404),
            "{missing:?}"
        );
        // Only TLS is spoken, as kube-apiserver has no insecure port any more.
        let url: http::Uri = format!("http://{}", server.address).parse().unwrap();
        let plain = kube::Client::try_from(kube::Config::new(url)).unwrap();
        let refused = Api::<DynamicObject>::all_with(plain, &api_resource(Kind::Hypervisor))
            .list(&Default::default())
            .await;
        assert!(refused.is_err(), "{refused:?}");
    });
}
