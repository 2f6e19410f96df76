//! MemoryStore keeps the Kubernetes semantics of the Store contract (crates/manager/src/store.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use oi_api::{
    Cluster, ClusterSpec, Component, ComponentRole, ComponentSpec, Hypervisor, HypervisorSpec,
    Kind, LocalCriEndpoint, Object, ObjectKey, ObjectMeta, PortRange, Resource,
};
use oi_manager::memory::{Change, MemoryStore, Op, Write};
use oi_manager::store::{EventType, ObjectEvent, Store, StoreError};
use pretty_assertions::assert_eq;
use tokio::sync::broadcast::error::TryRecvError;

fn cluster(namespace: Option<&str>, name: &str) -> Cluster {
    let metadata = match namespace {
        Some(ns) => ObjectMeta::namespaced(ns, name),
        None => ObjectMeta::named(name),
    };
    Cluster::new(
        metadata,
        ClusterSpec {
            kubernetes_version: "1.37.1".to_string(),
            ..ClusterSpec::default()
        },
    )
}

fn component(namespace: &str, name: &str, cluster: &str) -> Component {
    Component::new(
        ObjectMeta::namespaced(namespace, name),
        ComponentSpec {
            cluster: cluster.to_string(),
            role: ComponentRole::ControlPlane,
            hypervisor: None,
        },
    )
}

fn hypervisor(name: &str) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named(name),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: "/run/containerd/containerd.sock".to_string(),
            }),
            remote_cri_endpoint: None,
            public: false,
            ip_address: "10.0.0.1".to_string(),
            port_range: PortRange {
                low: 30000,
                high: 30100,
            },
        },
    )
}

fn key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey::new(namespace, name)
}

fn drain(changes: &mut tokio::sync::broadcast::Receiver<Change>) -> Vec<Change> {
    let mut seen = Vec::new();
    loop {
        match changes.try_recv() {
            Ok(change) => seen.push(change),
            Err(TryRecvError::Empty) => return seen,
            Err(e) => panic!("{e}"),
        }
    }
}

/// A change as `(kind, key, resourceVersion, the snapshot's resourceVersion and a spec or
/// status detail)`: enough to tell which write each change reports.
type Seen = (Kind, ObjectKey, u64, Option<(String, String)>);

fn seen(change: Change) -> Seen {
    let snapshot = change.object.map(|object| {
        let version = object
            .metadata()
            .resource_version
            .clone()
            .unwrap_or_default();
        let detail = match object {
            Object::Cluster(c) => format!(
                "replicas {:?} tokens {:?} deleting {}",
                c.spec.control_plane_replicas,
                c.status.join_tokens,
                c.metadata.is_being_deleted()
            ),
            other => other.key().to_string(),
        };
        (version, detail)
    });
    (change.kind, change.key, change.resource_version, snapshot)
}

#[tokio::test]
async fn create_sets_server_fields_and_drops_status() {
    let store = MemoryStore::new();
    let mut given = cluster(None, "c1");
    given.status.api_server_endpoint = "https://10.0.0.1:6443".to_string();
    given.metadata.deletion_timestamp = Some(time::OffsetDateTime::now_utc());
    let created = store.create(&given).await.unwrap();

    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(
        meta.uid.as_deref().is_some_and(|u| u.len() == 36),
        "{meta:?}"
    );
    assert_eq!(meta.resource_version.as_deref(), Some("1"));
    assert_eq!(meta.generation, Some(1));
    assert_eq!(meta.deletion_timestamp, None);
    let created_at = meta.creation_timestamp.unwrap();
    assert_eq!(created_at.nanosecond(), 0);
    assert!((time::OffsetDateTime::now_utc() - created_at).whole_seconds() < 5);
    assert_eq!(created.status, Default::default());
    assert_eq!(created.spec, given.spec);

    let read: Cluster = store.get(&key("default", "c1")).await.unwrap().unwrap();
    assert_eq!(read, created);

    // The same key again, even through an explicit "default" namespace.
    assert_eq!(
        store.create(&cluster(Some("default"), "c1")).await,
        Err(StoreError::AlreadyExists {
            kind: Kind::Cluster,
            key: key("default", "c1")
        })
    );

    // Another object gets another uid; cluster-scoped kinds get no namespace.
    let h = store.create(&hypervisor("h1")).await.unwrap();
    assert_eq!(h.metadata.namespace, None);
    assert_ne!(h.metadata.uid, created.metadata.uid);
    assert_eq!(h.metadata.resource_version.as_deref(), Some("2"));
    assert!(
        store
            .get::<Hypervisor>(&ObjectKey::cluster_scoped("h1"))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn create_refuses_a_resource_version_and_names_from_generate_name() {
    let store = MemoryStore::new();
    let mut given = cluster(Some("ns"), "c1");
    given.metadata.resource_version = Some("7".to_string());
    assert!(matches!(
        store.create(&given).await,
        Err(StoreError::Invalid { kind: Kind::Cluster, ref key, .. }) if *key == self::key("ns", "c1")
    ));

    let mut unnamed = cluster(Some("ns"), "");
    assert!(matches!(
        store.create(&unnamed).await,
        Err(StoreError::Invalid { .. })
    ));
    unnamed.metadata.generate_name = Some("c-".to_string());
    let a = store.create(&unnamed).await.unwrap();
    let b = store.create(&unnamed).await.unwrap();
    assert!(a.metadata.name.starts_with("c-") && a.metadata.name.len() > 2);
    assert_ne!(a.metadata.name, b.metadata.name);
    assert_eq!(store.objects::<Cluster>().len(), 2);
    // Nothing was stored by the refused calls, nothing journaled for them.
    assert_eq!(
        store.writes(),
        vec![
            Write::new(Op::Create, Kind::Cluster, a.key()),
            Write::new(Op::Create, Kind::Cluster, b.key()),
        ]
    );
}

#[tokio::test]
async fn update_checks_resource_version_and_uid() {
    let store = MemoryStore::new();
    let created = store.create(&cluster(Some("ns"), "c1")).await.unwrap();

    let mut first = created.clone();
    first.metadata.labels.insert("a".into(), "1".into());
    let first = store.update(&first).await.unwrap();
    assert_eq!(first.metadata.resource_version.as_deref(), Some("2"));

    // A writer that still holds the created copy loses.
    let mut stale = created.clone();
    stale.metadata.labels.insert("b".into(), "2".into());
    match store.update(&stale).await {
        Err(StoreError::Conflict { kind, key, .. }) => {
            assert_eq!((kind, key), (Kind::Cluster, self::key("ns", "c1")));
        }
        other => panic!("{other:?}"),
    }
    match store.update_status(&stale).await {
        Err(StoreError::Conflict { .. }) => {}
        other => panic!("{other:?}"),
    }
    let stored: Cluster = store.object(&key("ns", "c1")).unwrap();
    assert_eq!(stored, first);

    // Without a resourceVersion the update is unconditional.
    stale.metadata.resource_version = None;
    let unconditional = store.update(&stale).await.unwrap();
    assert_eq!(unconditional.metadata.labels.get("b").unwrap(), "2");
    assert_eq!(unconditional.metadata.labels.get("a"), None);
    assert_eq!(
        unconditional.metadata.resource_version.as_deref(),
        Some("3")
    );

    // A uid from an earlier incarnation is a conflict too.
    let mut other_uid = unconditional.clone();
    other_uid.metadata.resource_version = None;
    other_uid.metadata.uid = Some("another".into());
    assert!(matches!(
        store.update(&other_uid).await,
        Err(StoreError::Conflict { .. })
    ));
}

#[tokio::test]
async fn update_writes_metadata_and_spec_keeps_status_and_server_fields() {
    let store = MemoryStore::new();
    let mut seeded = cluster(Some("ns"), "c1");
    seeded.status.api_server_endpoint = "https://old:6443".into();
    store.insert(seeded);
    let stored: Cluster = store.object(&key("ns", "c1")).unwrap();
    assert_eq!(stored.status.api_server_endpoint, "https://old:6443");
    assert_eq!(stored.metadata.generation, Some(1));

    // Metadata only: no generation bump, status as stored.
    let mut edit = stored.clone();
    edit.metadata.labels.insert("team".into(), "a".into());
    edit.metadata.annotations.insert("note".into(), "x".into());
    edit.metadata.finalizers.push("f".into());
    edit.status.api_server_endpoint = "https://ignored:6443".into();
    edit.metadata.deletion_timestamp = Some(time::OffsetDateTime::now_utc());
    edit.metadata.generation = Some(40);
    edit.metadata.creation_timestamp = None;
    let updated = store.update(&edit).await.unwrap();
    assert_eq!(updated.metadata.labels.get("team").unwrap(), "a");
    assert_eq!(updated.metadata.annotations.get("note").unwrap(), "x");
    assert_eq!(updated.metadata.finalizers, vec!["f".to_string()]);
    assert_eq!(updated.status.api_server_endpoint, "https://old:6443");
    assert_eq!(updated.metadata.deletion_timestamp, None);
    assert_eq!(updated.metadata.generation, Some(1));
    assert_eq!(
        updated.metadata.creation_timestamp,
        stored.metadata.creation_timestamp
    );
    assert_eq!(updated.metadata.uid, stored.metadata.uid);
    assert_eq!(store.object::<Cluster>(&key("ns", "c1")).unwrap(), updated);

    // Spec changed: generation bumps.
    let mut edit = updated.clone();
    edit.spec.control_plane_replicas = Some(3);
    let updated = store.update(&edit).await.unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    assert_eq!(updated.spec.control_plane_replicas, Some(3));
    assert_eq!(updated.status.api_server_endpoint, "https://old:6443");
}

#[tokio::test]
async fn update_status_writes_status_only() {
    let store = MemoryStore::new();
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
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("2"));
    assert_eq!(
        store.object::<Component>(&key("ns", "k1")).unwrap(),
        updated
    );

    assert_eq!(
        store.update_status(&component("ns", "missing", "c1")).await,
        Err(StoreError::NotFound {
            kind: Kind::Component,
            key: key("ns", "missing")
        })
    );
    assert_eq!(
        store.update(&component("ns", "missing", "c1")).await,
        Err(StoreError::NotFound {
            kind: Kind::Component,
            key: key("ns", "missing")
        })
    );
}

#[tokio::test]
async fn writes_that_change_nothing_keep_the_version_and_notify_nobody() {
    let store = MemoryStore::new();
    let created = store.create(&cluster(Some("ns"), "c1")).await.unwrap();
    let mut changes = store.subscribe();
    assert_eq!(store.update(&created).await.unwrap(), created);
    assert_eq!(store.update_status(&created).await.unwrap(), created);
    assert_eq!(store.resource_version(), 1);
    assert_eq!(drain(&mut changes), vec![]);
    // They are still calls the controller made.
    assert_eq!(
        store.writes(),
        vec![
            Write::new(Op::Create, Kind::Cluster, ("ns", "c1")),
            Write::new(Op::Update, Kind::Cluster, ("ns", "c1")),
            Write::new(Op::UpdateStatus, Kind::Cluster, ("ns", "c1")),
        ]
    );
}

#[tokio::test]
async fn delete_honours_finalizers() {
    let store = MemoryStore::new();
    // Without finalizers: gone at once; a missing object is Ok.
    store.create(&cluster(Some("ns"), "plain")).await.unwrap();
    store.delete::<Cluster>(&key("ns", "plain")).await.unwrap();
    assert_eq!(store.object::<Cluster>(&key("ns", "plain")), None);
    store.delete::<Cluster>(&key("ns", "plain")).await.unwrap();

    let mut given = cluster(Some("ns"), "c1");
    given.metadata.finalizers = vec!["a".into(), "b".into()];
    let created = store.create(&given).await.unwrap();
    store.delete::<Cluster>(&key("ns", "c1")).await.unwrap();
    let deleting: Cluster = store.object(&key("ns", "c1")).unwrap();
    let marked_at = deleting.metadata.deletion_timestamp.unwrap();
    assert_eq!(marked_at.nanosecond(), 0);
    assert_eq!(deleting.metadata.generation, Some(2));
    assert_ne!(
        deleting.metadata.resource_version,
        created.metadata.resource_version
    );

    // A second delete keeps the first timestamp and changes nothing.
    let version = store.resource_version();
    store.delete::<Cluster>(&key("ns", "c1")).await.unwrap();
    assert_eq!(store.object::<Cluster>(&key("ns", "c1")).unwrap(), deleting);
    assert_eq!(store.resource_version(), version);

    // No new finalizer while being deleted.
    let mut add = deleting.clone();
    add.metadata.finalizers.push("c".into());
    assert!(matches!(
        store.update(&add).await,
        Err(StoreError::Invalid { .. })
    ));

    // Removing one finalizer keeps it, with its deletionTimestamp.
    let mut one = deleting.clone();
    one.metadata.finalizers = vec!["b".into()];
    let one = store.update(&one).await.unwrap();
    assert_eq!(one.metadata.deletion_timestamp, Some(marked_at));
    assert_eq!(
        store
            .object::<Cluster>(&key("ns", "c1"))
            .unwrap()
            .metadata
            .finalizers,
        vec!["b".to_string()]
    );

    // Status can still be written while being deleted.
    let mut status = one.clone();
    status.status.api_server_endpoint = "https://x:6443".into();
    let one = store.update_status(&status).await.unwrap();

    // The last finalizer removed: the object goes away.
    let mut none = one.clone();
    none.metadata.finalizers.clear();
    let last = store.update(&none).await.unwrap();
    assert!(last.metadata.finalizers.is_empty());
    assert_eq!(store.object::<Cluster>(&key("ns", "c1")), None);
    assert_eq!(store.get::<Cluster>(&key("ns", "c1")).await.unwrap(), None);
}

#[tokio::test]
async fn list_sorts_by_key_and_filters_by_namespace() {
    let store = MemoryStore::new();
    for (ns, name) in [("b", "z"), ("a", "y"), ("b", "a"), ("a", "x")] {
        store.create(&cluster(Some(ns), name)).await.unwrap();
    }
    store.create(&hypervisor("h2")).await.unwrap();
    store.create(&hypervisor("h1")).await.unwrap();
    store.create(&component("a", "k", "x")).await.unwrap();

    let keys = |list: Vec<Cluster>| list.iter().map(|c| c.key()).collect::<Vec<_>>();
    assert_eq!(
        keys(store.list(None).await.unwrap()),
        vec![key("a", "x"), key("a", "y"), key("b", "a"), key("b", "z")]
    );
    assert_eq!(
        keys(store.list(Some("b")).await.unwrap()),
        vec![key("b", "a"), key("b", "z")]
    );
    assert_eq!(keys(store.list(Some("c")).await.unwrap()), vec![]);
    // Cluster-scoped kinds ignore the namespace.
    let hypervisors: Vec<Hypervisor> = store.list(Some("a")).await.unwrap();
    assert_eq!(
        hypervisors.iter().map(|h| h.name()).collect::<Vec<_>>(),
        vec!["h1", "h2"]
    );
    let components: Vec<Component> = store.list(None).await.unwrap();
    assert_eq!(components.len(), 1);
    assert_eq!(store.objects::<Cluster>().len(), 4);
}

#[tokio::test]
async fn every_change_is_notified_in_order() {
    let store = MemoryStore::new();
    let mut changes = store.subscribe();
    let c1 = key("ns", "c1");
    let mut given = cluster(Some("ns"), "c1");
    given.metadata.finalizers = vec!["f".into()];
    let created = store.create(&given).await.unwrap();
    let mut edit = created.clone();
    edit.spec.control_plane_replicas = Some(2);
    let edited = store.update(&edit).await.unwrap();
    let mut status = edited.clone();
    status.status.join_tokens = vec!["t".into()];
    store.update_status(&status).await.unwrap();
    store.delete::<Cluster>(&c1).await.unwrap();
    store
        .publish(&ObjectEvent {
            kind: Kind::Cluster,
            key: c1.clone(),
            uid: None,
            type_: EventType::Normal,
            reason: "Test".into(),
            action: "Test".into(),
            note: "not a change".into(),
        })
        .await
        .unwrap();
    let mut last = store.object::<Cluster>(&c1).unwrap();
    last.metadata.finalizers.clear();
    store.update(&last).await.unwrap();
    store.insert(hypervisor("h1"));
    store
        .delete::<Hypervisor>(&ObjectKey::cluster_scoped("h1"))
        .await
        .unwrap();
    // Failed calls change nothing.
    assert!(store.update(&created).await.is_err());

    let snapshot = |version: &str, detail: &str| Some((version.to_string(), detail.to_string()));
    assert_eq!(
        drain(&mut changes)
            .into_iter()
            .map(seen)
            .collect::<Vec<_>>(),
        vec![
            (
                Kind::Cluster,
                c1.clone(),
                1,
                snapshot("1", "replicas None tokens [] deleting false")
            ),
            (
                Kind::Cluster,
                c1.clone(),
                2,
                snapshot("2", "replicas Some(2) tokens [] deleting false")
            ),
            (
                Kind::Cluster,
                c1.clone(),
                3,
                snapshot("3", "replicas Some(2) tokens [\"t\"] deleting false")
            ),
            (
                Kind::Cluster,
                c1.clone(),
                4,
                snapshot("4", "replicas Some(2) tokens [\"t\"] deleting true")
            ),
            // Removed once its finalizers are gone: no snapshot.
            (Kind::Cluster, c1.clone(), 5, None),
            (
                Kind::Hypervisor,
                ObjectKey::cluster_scoped("h1"),
                6,
                snapshot("6", "h1")
            ),
            (Kind::Hypervisor, ObjectKey::cluster_scoped("h1"), 7, None),
        ]
    );
    assert_eq!(store.events().len(), 1);
    assert_eq!(store.events()[0].note, "not a change");
}

#[tokio::test]
async fn journal_lists_successful_mutating_calls() {
    let store = MemoryStore::new();
    store.insert(hypervisor("h1"));
    let created = store.create(&component("ns", "k1", "c1")).await.unwrap();
    let _ = store.create(&component("ns", "k1", "c1")).await;
    let mut edit = created.clone();
    edit.spec.hypervisor = Some("h1".into());
    store.update(&edit).await.unwrap();
    let _ = store.update(&edit).await; // stale: Conflict
    let mut h: Hypervisor = store.object(&ObjectKey::cluster_scoped("h1")).unwrap();
    h.status.freed_ports = vec![30001];
    store.update_status(&h).await.unwrap();
    store.delete::<Component>(&key("ns", "k1")).await.unwrap();
    store.delete::<Component>(&key("ns", "gone")).await.unwrap();
    store.get::<Component>(&key("ns", "k1")).await.unwrap();
    store.list::<Component>(None).await.unwrap();
    assert_eq!(
        store.writes(),
        vec![
            Write::new(Op::Create, Kind::Component, ("ns", "k1")),
            Write::new(Op::Update, Kind::Component, ("ns", "k1")),
            Write::new(
                Op::UpdateStatus,
                Kind::Hypervisor,
                ObjectKey::cluster_scoped("h1")
            ),
            Write::new(Op::Delete, Kind::Component, ("ns", "k1")),
            Write::new(Op::Delete, Kind::Component, ("ns", "gone")),
        ]
    );
    store.clear_writes();
    assert_eq!(store.writes(), vec![]);
    // insert keeps the given status and is no write of a controller.
    let h: Hypervisor = store.object(&ObjectKey::cluster_scoped("h1")).unwrap();
    assert_eq!(h.status.freed_ports, vec![30001]);
    let mut seeded = hypervisor("h2");
    seeded.status.freed_ports = vec![30002];
    store.insert(seeded);
    let h2: Hypervisor = store.object(&ObjectKey::cluster_scoped("h2")).unwrap();
    assert_eq!(h2.status.freed_ports, vec![30002]);
    assert_eq!(h2.metadata.generation, Some(1));
    assert!(h2.metadata.uid.is_some());
    assert_eq!(store.writes(), vec![]);
}

#[tokio::test]
async fn fail_next_fails_the_next_calls_of_one_operation_without_effect() {
    let store = MemoryStore::new();
    let unavailable = StoreError::Unavailable("injected".into());
    store.fail_next(Op::Create, unavailable.clone());
    assert_eq!(
        store.create(&cluster(Some("ns"), "c1")).await,
        Err(unavailable.clone())
    );
    assert_eq!(store.object::<Cluster>(&key("ns", "c1")), None);
    let created = store.create(&cluster(Some("ns"), "c1")).await.unwrap();

    // Two queued failures fail two calls, of any kind; other operations are untouched.
    store.fail_next(Op::Get, unavailable.clone());
    store.fail_next(
        Op::Get,
        StoreError::NotFound {
            kind: Kind::Cluster,
            key: key("x", "y"),
        },
    );
    assert_eq!(
        store.list::<Cluster>(None).await.unwrap(),
        vec![created.clone()]
    );
    assert_eq!(
        store
            .get::<Hypervisor>(&ObjectKey::cluster_scoped("h"))
            .await,
        Err(unavailable.clone())
    );
    assert!(matches!(
        store.get::<Cluster>(&key("ns", "c1")).await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        store.get::<Cluster>(&key("ns", "c1")).await.unwrap(),
        Some(created.clone())
    );

    let conflict = StoreError::Conflict {
        kind: Kind::Cluster,
        key: key("ns", "c1"),
        message: "injected".into(),
    };
    for op in [
        Op::Update,
        Op::UpdateStatus,
        Op::Delete,
        Op::List,
        Op::Publish,
    ] {
        store.fail_next(op, conflict.clone());
    }
    let mut edit = created.clone();
    edit.spec.control_plane_replicas = Some(3);
    edit.status.join_tokens = vec!["t".into()];
    assert_eq!(store.update(&edit).await, Err(conflict.clone()));
    assert_eq!(store.update_status(&edit).await, Err(conflict.clone()));
    assert_eq!(
        store.delete::<Cluster>(&key("ns", "c1")).await,
        Err(conflict.clone())
    );
    assert_eq!(store.list::<Cluster>(None).await, Err(conflict.clone()));
    let event = ObjectEvent {
        kind: Kind::Cluster,
        key: key("ns", "c1"),
        uid: created.metadata.uid.clone(),
        type_: EventType::Warning,
        reason: "R".into(),
        action: "A".into(),
        note: "n".into(),
    };
    assert_eq!(store.publish(&event).await, Err(conflict));
    assert_eq!(store.events(), vec![]);
    assert_eq!(store.object::<Cluster>(&key("ns", "c1")).unwrap(), created);
    assert_eq!(
        store.writes(),
        vec![Write::new(Op::Create, Kind::Cluster, ("ns", "c1"))]
    );
    // And then everything works again.
    store.update(&edit).await.unwrap();
    store.publish(&event).await.unwrap();
    assert_eq!(store.events(), vec![event]);
}
