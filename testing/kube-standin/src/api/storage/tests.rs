use futures::StreamExt as _;
use serde_json::json;

use super::*;

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn writes_take_the_next_revision_and_check_the_expected_one() {
    run(async {
        let s = MemoryStorage::default();
        assert_eq!(s.create("/a/1", &json!({"n": 1})).await, Ok(1));
        assert_eq!(
            s.create("/a/1", &json!({})).await,
            Err(StorageError::Exists { key: "/a/1".into() })
        );
        assert_eq!(s.create("/b/1", &json!({"n": 2})).await, Ok(2));
        assert_eq!(s.update("/a/1", &json!({"n": 3}), 1).await, Ok(3));
        assert_eq!(
            s.update("/a/1", &json!({"n": 4}), 1).await,
            Err(StorageError::Conflict {
                key: "/a/1".into(),
                expected: 1,
                current: 3
            })
        );
        assert_eq!(
            s.get("/a/1").await.unwrap(),
            Some(Stored {
                value: json!({"n": 3}),
                revision: 3
            })
        );
        let listed = s.list("/a/", &ListOptions::default()).await.unwrap();
        assert_eq!(listed.revision, 3);
        assert_eq!(listed.items.len(), 1);
        assert!(matches!(
            s.delete("/a/1", 1).await,
            Err(StorageError::Conflict { .. })
        ));
        assert_eq!(s.delete("/a/1", 3).await, Ok(4));
        assert_eq!(s.get("/a/1").await.unwrap(), None);
        assert!(matches!(
            s.delete("/a/1", 4).await,
            Err(StorageError::NotFound { .. })
        ));
        assert_eq!(s.revision().await, Ok(4));
    });
}

#[test]
fn a_watch_replays_then_follows_and_a_compacted_start_is_refused() {
    run(async {
        let s = MemoryStorage::with_history(3);
        s.create("/a/1", &json!(1)).await.unwrap();
        s.create("/b/1", &json!(2)).await.unwrap();
        s.update("/a/1", &json!(3), 1).await.unwrap();
        let mut w = s.watch("/a/", 1).await.unwrap();
        let first = w.next().await.unwrap().unwrap();
        assert_eq!(
            (first.revision, first.value, first.previous),
            (3, Some(json!(3)), Some(json!(1)))
        );
        s.create("/b/2", &json!(4)).await.unwrap();
        s.delete("/a/1", 3).await.unwrap();
        let deleted = w.next().await.unwrap().unwrap();
        assert_eq!(
            (deleted.revision, deleted.value, deleted.previous),
            (5, None, Some(json!(3)))
        );
        // Three changes kept: revisions 3, 4, 5; a watch after 1 would miss 2.
        s.create("/a/2", &json!(5)).await.unwrap();
        assert_eq!(
            s.watch("/a/", 1).await.err(),
            Some(StorageError::Compacted {
                requested: 1,
                oldest: 3
            })
        );
        assert!(s.watch("/a/", 3).await.is_ok());
    });
}

#[test]
fn memory_storage_meets_the_contract() {
    run(async {
        let s = MemoryStorage::default();
        contract::run(&s, "/c1").await;
        // Sharing a store with other keys changes nothing.
        contract::run(&s, "/c2").await;
        let small = MemoryStorage::with_history(2);
        for i in 0..5 {
            small.create(&format!("/x/{i}"), &json!(i)).await.unwrap();
        }
        contract::compacted_watch_is_refused(&small, "/x/", 2).await;
    });
}
