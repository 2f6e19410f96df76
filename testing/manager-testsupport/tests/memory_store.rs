//! What only MemoryStore does: change notifications, the journal of writes, injected failures,
//! refusing a resourceVersion on create. The semantics it shares with KubeStore are the store
//! contract's (tests/store_contract.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{cluster, component, hypervisor, key};
use oi_api::{Cluster, Component, Hypervisor, Kind, Object, ObjectKey, Resource};
use oi_manager::store::{EventType, ObjectEvent, Store, StoreError};
use oi_manager_testsupport::memory::{Change, MemoryStore, Op, Write};
use pretty_assertions::assert_eq;
use tokio::sync::broadcast::error::TryRecvError;

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
