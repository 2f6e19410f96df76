//! One contract, two stores: the Kubernetes semantics the controllers rely on from
//! [`Store`], checked against `MemoryStore` (the double their tests use) and against
//! `KubeStore` talking to the API server stand-in over HTTP on loopback (the product's store
//! over the wire). A double that passes it behaves, for the controllers, as the real one does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{cluster, component, hypervisor, key};
use std::sync::Arc;
use std::time::Duration;

use oi_api::{Cluster, Hypervisor, Kind, ObjectKey, Resource as _};
use oi_manager::cache::{self, WatchCache};
use oi_manager::kube_store::KubeStore;
use oi_manager::store::{Store, StoreError};
use oi_manager_testsupport::apiserver_standin::{ApiServer, StandinOptions};
use oi_manager_testsupport::memory::MemoryStore;
use pretty_assertions::assert_eq;

/// Create sets the server's fields and keeps the spec, drops status and a deletion mark;
/// a namespaced object without a namespace is in `default`; a cluster-scoped one has none;
/// the same key twice is refused; names come from `generateName`.
async fn create<S: Store>(store: &S) {
    let mut given = cluster(None, "c1");
    given.status.api_server_endpoint = "https://10.0.0.1:6443".to_string();
    given.metadata.deletion_timestamp = Some(time::OffsetDateTime::now_utc());
    let created = store.create(&given).await.unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(
        meta.uid.as_deref().is_some_and(|u| !u.is_empty()),
        "{meta:?}"
    );
    assert!(meta.resource_version.is_some());
    assert_eq!(meta.generation, Some(1));
    assert_eq!(meta.deletion_timestamp, None);
    let created_at = meta.creation_timestamp.unwrap();
    assert!((time::OffsetDateTime::now_utc() - created_at).whole_seconds() < 5);
    assert_eq!(created.status, Default::default());
    assert_eq!(created.spec, given.spec);
    let read: Cluster = store.get(&key("default", "c1")).await.unwrap().unwrap();
    assert_eq!(read.spec, created.spec);
    assert_eq!(read.metadata.uid, created.metadata.uid);
    assert!(matches!(
        store.create(&cluster(Some("default"), "c1")).await,
        Err(StoreError::AlreadyExists {
            kind: Kind::Cluster,
            ..
        })
    ));

    let h = store.create(&hypervisor("h1")).await.unwrap();
    assert_eq!(h.metadata.namespace, None);
    assert_ne!(h.metadata.uid, created.metadata.uid);
    assert!(
        store
            .get::<Hypervisor>(&ObjectKey::cluster_scoped("h1"))
            .await
            .unwrap()
            .is_some()
    );

    let mut unnamed = cluster(Some("gen"), "");
    unnamed.metadata.generate_name = Some("c-".to_string());
    let a = store.create(&unnamed).await.unwrap();
    let b = store.create(&unnamed).await.unwrap();
    assert!(a.metadata.name.starts_with("c-") && a.metadata.name.len() > 2);
    assert_ne!(a.metadata.name, b.metadata.name);
    assert_eq!(store.list::<Cluster>(Some("gen")).await.unwrap().len(), 2);
}

/// Update writes metadata and spec and keeps status and the server's fields; the spec bumps
/// the generation; a stale resourceVersion conflicts, none is unconditional; a missing
/// object is not found.
async fn update<S: Store>(store: &S) {
    let created = store.create(&cluster(Some("ns"), "c1")).await.unwrap();
    let mut seeded = created.clone();
    seeded.status.api_server_endpoint = "https://old:6443".into();
    let stored = store.update_status(&seeded).await.unwrap();

    let mut edit = stored.clone();
    edit.metadata.labels.insert("team".into(), "a".into());
    edit.metadata.annotations.insert("note".into(), "x".into());
    edit.metadata.finalizers.push("example.com/f".into());
    edit.status.api_server_endpoint = "https://ignored:6443".into();
    let updated = store.update(&edit).await.unwrap();
    assert_eq!(updated.metadata.labels.get("team").unwrap(), "a");
    assert_eq!(updated.metadata.annotations.get("note").unwrap(), "x");
    assert_eq!(updated.metadata.finalizers, ["example.com/f"]);
    assert_eq!(updated.status.api_server_endpoint, "https://old:6443");
    assert_eq!(updated.metadata.generation, Some(1), "metadata only");
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    assert_eq!(
        updated.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );
    assert_ne!(
        updated.metadata.resource_version,
        stored.metadata.resource_version
    );

    let mut spec = updated.clone();
    spec.spec.control_plane_replicas = Some(3);
    let respecced = store.update(&spec).await.unwrap();
    assert_eq!(respecced.metadata.generation, Some(2));
    assert_eq!(respecced.spec.control_plane_replicas, Some(3));
    assert_eq!(respecced.status.api_server_endpoint, "https://old:6443");

    // A writer that still holds an older copy loses, through spec and status alike.
    let mut stale = updated.clone();
    stale.metadata.labels.insert("b".into(), "2".into());
    assert!(matches!(
        store.update(&stale).await,
        Err(StoreError::Conflict {
            kind: Kind::Cluster,
            ..
        })
    ));
    assert!(matches!(
        store.update_status(&stale).await,
        Err(StoreError::Conflict { .. })
    ));
    let now: Cluster = store.get(&key("ns", "c1")).await.unwrap().unwrap();
    assert_eq!(now.metadata.labels.get("b"), None);
    // Without a resourceVersion the update is unconditional.
    stale.metadata.resource_version = None;
    stale.spec.control_plane_replicas = Some(3);
    let unconditional = store.update(&stale).await.unwrap();
    assert_eq!(unconditional.metadata.labels.get("b").unwrap(), "2");

    assert!(matches!(
        store.update(&component("ns", "missing", "c1")).await,
        Err(StoreError::NotFound {
            kind: Kind::Component,
            ..
        })
    ));
    assert!(matches!(
        store.update_status(&component("ns", "missing", "c1")).await,
        Err(StoreError::NotFound {
            kind: Kind::Component,
            ..
        })
    ));
}

/// Status writes status only; a write that changes nothing keeps the resourceVersion.
async fn update_status<S: Store>(store: &S) {
    let created = store.create(&component("ns", "k1", "c1")).await.unwrap();
    let mut edit = created.clone();
    edit.status
        .input_endpoints
        .insert("etcd".into(), "https://10.0.0.1:2379".into());
    edit.spec.hypervisor = Some("ignored".into());
    edit.metadata.labels.insert("ignored".into(), "yes".into());
    let updated = store.update_status(&edit).await.unwrap();
    assert_eq!(
        updated.status.input_endpoints.get("etcd").unwrap(),
        "https://10.0.0.1:2379"
    );
    assert_eq!(updated.spec, created.spec);
    assert!(updated.metadata.labels.is_empty());
    assert_eq!(updated.metadata.generation, Some(1));

    let same = store.update(&updated).await.unwrap();
    assert_eq!(
        same.metadata.resource_version,
        updated.metadata.resource_version
    );
    let same = store.update_status(&same).await.unwrap();
    assert_eq!(
        same.metadata.resource_version,
        updated.metadata.resource_version
    );
}

/// Delete removes an object at once, or marks it while finalizers hold it; the last
/// finalizer removed takes it away; a missing object deletes fine.
async fn delete<S: Store>(store: &S) {
    store.create(&cluster(Some("del"), "plain")).await.unwrap();
    store.delete::<Cluster>(&key("del", "plain")).await.unwrap();
    assert_eq!(
        store.get::<Cluster>(&key("del", "plain")).await.unwrap(),
        None
    );
    store.delete::<Cluster>(&key("del", "plain")).await.unwrap();

    let mut given = cluster(Some("del"), "held");
    given.metadata.finalizers = vec!["example.com/a".into(), "example.com/b".into()];
    store.create(&given).await.unwrap();
    store.delete::<Cluster>(&key("del", "held")).await.unwrap();
    let marked: Cluster = store.get(&key("del", "held")).await.unwrap().unwrap();
    let marked_at = marked.metadata.deletion_timestamp.unwrap();
    // A second delete keeps the mark.
    store.delete::<Cluster>(&key("del", "held")).await.unwrap();
    let again: Cluster = store.get(&key("del", "held")).await.unwrap().unwrap();
    assert_eq!(again.metadata.deletion_timestamp, Some(marked_at));

    let mut one = again.clone();
    one.metadata.finalizers = vec!["example.com/b".into()];
    let one = store.update(&one).await.unwrap();
    assert_eq!(one.metadata.deletion_timestamp, Some(marked_at));
    // Status can still be written while being deleted.
    let mut status = one.clone();
    status.status.api_server_endpoint = "https://x:6443".into();
    let one = store.update_status(&status).await.unwrap();
    let mut none = one.clone();
    none.metadata.finalizers.clear();
    store.update(&none).await.unwrap();
    assert_eq!(
        store.get::<Cluster>(&key("del", "held")).await.unwrap(),
        None
    );
}

/// Lists come sorted by key, filtered by namespace; cluster-scoped kinds ignore it.
async fn list<S: Store>(store: &S) {
    for (ns, name) in [("lb", "z"), ("la", "y"), ("lb", "a"), ("la", "x")] {
        store.create(&cluster(Some(ns), name)).await.unwrap();
    }
    store.create(&hypervisor("h2")).await.unwrap();
    let keys = |list: Vec<Cluster>| list.iter().map(|c| c.key()).collect::<Vec<_>>();
    let all = keys(store.list(None).await.unwrap());
    let lettered: Vec<ObjectKey> = all
        .into_iter()
        .filter(|k| k.namespace.starts_with('l'))
        .collect();
    assert_eq!(
        lettered,
        [
            key("la", "x"),
            key("la", "y"),
            key("lb", "a"),
            key("lb", "z")
        ]
    );
    assert_eq!(
        keys(store.list(Some("lb")).await.unwrap()),
        [key("lb", "a"), key("lb", "z")]
    );
    assert_eq!(keys(store.list(Some("nowhere")).await.unwrap()), []);
    let hypervisors: Vec<Hypervisor> = store.list(Some("la")).await.unwrap();
    assert_eq!(
        hypervisors
            .iter()
            .map(|h| h.metadata.name.as_str())
            .collect::<Vec<_>>(),
        ["h1", "h2"]
    );
}

/// The whole contract, in one store (each step uses keys of its own).
async fn contract<S: Store>(store: &S) {
    create(store).await;
    update(store).await;
    update_status(store).await;
    delete(store).await;
    list(store).await;
}

#[tokio::test]
async fn memory_store_meets_the_contract() {
    contract(&MemoryStore::new()).await;
}

/// The API server stand-in, with the namespaces the contract's objects go in (they must
/// exist, as in Kubernetes).
fn standin() -> ApiServer {
    ApiServer::start(StandinOptions {
        namespaces: ["del", "gen", "la", "lb", "ns"].map(String::from).to_vec(),
        ..StandinOptions::default()
    })
    .unwrap()
}

#[test]
fn kube_store_over_the_api_server_stand_in_meets_the_contract() {
    let server = standin();
    server.block_on(async {
        let client = server.client().await.unwrap();
        let store = KubeStore::new(client, "test/reporter", "test-1");
        contract(&store).await;
        // Without a cache, nothing is known without a request.
        assert_eq!(store.cached::<Cluster, _>(&key("lb", "a"), |_| ()), None);
    });
}

/// With its watch caches (as `oi-manager run` has it), lists come from memory: what the store
/// wrote itself is listed at once, as the contract asks, without waiting for the watch.
#[test]
fn kube_store_with_watch_caches_meets_the_contract_and_lists_without_listing() {
    let server = standin();
    server.block_on(async {
        let client = server.client().await.unwrap();
        let cache = Arc::new(WatchCache::start(&client, None, &cache::CACHED_KINDS));
        tokio::time::timeout(Duration::from_secs(30), cache.synced())
            .await
            .expect("the caches sync");
        let store = KubeStore::new(client, "test/reporter", "test-1").with_cache(cache);
        server.local().api().clear_requests();
        contract(&store).await;
        let lists: Vec<String> = server
            .requests()
            .into_iter()
            .filter(|r| {
                let path = r.split('?').next().unwrap_or(r);
                r.starts_with("GET ")
                    && !r.contains("watch=")
                    && (path.ends_with("/clusters") || path.ends_with("/hypervisors"))
            })
            .collect();
        assert_eq!(
            lists,
            Vec::<String>::new(),
            "the contract's lists were LISTs"
        );

        // What it wrote is cached at once; what does not exist is not.
        let made = store.create(&cluster(Some("ns"), "cached")).await.unwrap();
        assert_eq!(
            store.cached::<Cluster, _>(&made.key(), |c| c.metadata.resource_version.clone()),
            Some(made.metadata.resource_version.clone())
        );
        assert_eq!(
            store.cached::<Cluster, _>(&key("ns", "absent"), |_| ()),
            None
        );
        assert_eq!(
            store.cached::<Hypervisor, _>(&ObjectKey::cluster_scoped("h1"), |h| h
                .metadata
                .name
                .clone()),
            Some("h1".to_string())
        );
    });
}
