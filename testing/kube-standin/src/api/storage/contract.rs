//! The storage contract: one suite every [`Storage`] must pass, run against
//! [`MemoryStorage`](super::MemoryStorage) in unit tests and against a real etcd through
//! [`EtcdStorage`](super::super::etcd_storage::EtcdStorage) in the crate's real tests. It
//! panics, naming the check, on the first broken promise.

// A test suite: panicking on a broken promise is its job.
#![allow(clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::json;

use super::{ListOptions, Storage, StorageError};

async fn next(stream: &mut super::ChangeStream, what: &str) -> super::Change {
    match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        Ok(Some(Ok(change))) => change,
        other => panic!("{what}: expected a change, got {other:?}"),
    }
}

/// Runs the whole contract under `root` (a prefix no other test uses).
///
/// # Panics
/// When the storage breaks a promise.
pub async fn run(s: &dyn Storage, root: &str) {
    let a1 = format!("{root}/a/1");
    let a2 = format!("{root}/a/2");
    let a3 = format!("{root}/a/3");
    let b1 = format!("{root}/b/1");
    let prefix_a = format!("{root}/a/");

    // Writes take revisions that grow, and check the expected one.
    let start = s.revision().await.expect("revision");
    let r1 = s.create(&a1, &json!({"n": 1})).await.expect("create a1");
    assert!(r1 > start, "a write takes a later revision");
    assert_eq!(
        s.create(&a1, &json!({})).await,
        Err(StorageError::Exists { key: a1.clone() }),
        "create of an existing key"
    );
    let r2 = s.create(&b1, &json!({"n": 2})).await.expect("create b1");
    let r3 = s
        .update(&a1, &json!({"n": 3}), r1)
        .await
        .expect("update a1");
    assert!(r3 > r2);
    match s.update(&a1, &json!({"n": 4}), r1).await {
        Err(StorageError::Conflict { current, .. }) => {
            assert_eq!(current, r3, "conflict reports the current revision")
        }
        other => panic!("update at an old revision: {other:?}"),
    }
    assert!(
        matches!(
            s.update(&a2, &json!({}), 1).await,
            Err(StorageError::NotFound { .. })
        ),
        "update of a missing key"
    );
    let got = s.get(&a1).await.expect("get").expect("a1 exists");
    assert_eq!((got.value, got.revision), (json!({"n": 3}), r3));
    assert_eq!(s.get(&a2).await.expect("get"), None);

    // Lists: in key order, under the prefix only, in pages.
    let r4 = s.create(&a2, &json!({"n": 5})).await.expect("create a2");
    let r5 = s.create(&a3, &json!({"n": 6})).await.expect("create a3");
    let all = s
        .list(&prefix_a, &ListOptions::default())
        .await
        .expect("list");
    let keys: Vec<&str> = all.items.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        vec![a1.as_str(), a2.as_str(), a3.as_str()],
        "list in key order, prefix only"
    );
    assert!(
        all.revision >= r5,
        "a list reports a revision at least its newest item's"
    );
    assert_eq!(all.remaining, 0);
    let page = s
        .list(
            &prefix_a,
            &ListOptions {
                limit: Some(2),
                ..ListOptions::default()
            },
        )
        .await
        .expect("page 1");
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.remaining, 1, "one key follows the first page");
    let rest = s
        .list(
            &prefix_a,
            &ListOptions {
                start: Some(format!("{}\u{0}", page.items[1].0)),
                limit: Some(2),
                revision: Some(page.revision),
            },
        )
        .await
        .expect("page 2");
    assert_eq!(
        rest.items
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>(),
        vec![a3.as_str()]
    );
    assert_eq!(rest.remaining, 0);

    // A list at an old revision sees the state then.
    let r6 = s
        .update(&a2, &json!({"n": 7}), r4)
        .await
        .expect("update a2");
    let then = s
        .list(
            &prefix_a,
            &ListOptions {
                revision: Some(r5),
                ..ListOptions::default()
            },
        )
        .await
        .expect("list at r5");
    let a2_then = then.items.iter().find(|(k, _)| *k == a2).expect("a2 at r5");
    assert_eq!(
        (a2_then.1.value.clone(), a2_then.1.revision),
        (json!({"n": 5}), r4),
        "a list at a revision is a snapshot"
    );

    // Deletes check the revision too.
    assert!(
        matches!(s.delete(&a3, r1).await, Err(StorageError::Conflict { .. })),
        "delete at an old revision"
    );
    let r7 = s.delete(&a3, r5).await.expect("delete a3");
    assert!(r7 > r6);
    assert!(
        matches!(s.delete(&a3, r7).await, Err(StorageError::NotFound { .. })),
        "delete of a missing key"
    );

    // A watch replays what followed its revision, in order, with previous values, then
    // follows live.
    let mut w = s.watch(&prefix_a, r5).await.expect("watch from r5");
    let first = next(&mut w, "replayed update").await;
    assert_eq!(
        (
            first.key.as_str(),
            first.revision,
            first.value.clone(),
            first.previous.clone()
        ),
        (
            a2.as_str(),
            r6,
            Some(json!({"n": 7})),
            Some(json!({"n": 5}))
        )
    );
    let second = next(&mut w, "replayed delete").await;
    assert_eq!(
        (
            second.key.as_str(),
            second.value.clone(),
            second.previous.clone()
        ),
        (a3.as_str(), None, Some(json!({"n": 6})))
    );
    s.create(&format!("{root}/b/2"), &json!({}))
        .await
        .expect("create b2");
    let r9 = s
        .create(&format!("{root}/a/4"), &json!({"n": 8}))
        .await
        .expect("create a4");
    let live = next(&mut w, "live create").await;
    assert_eq!(
        (live.revision, live.previous.clone()),
        (r9, None),
        "only the prefix's changes, live"
    );
    assert!(s.revision().await.expect("revision") >= r9);
}

/// A watch from a revision older than the history kept fails as compacted: `oldest` is the
/// oldest revision a watch may start after.
///
/// # Panics
/// When it does not.
pub async fn compacted_watch_is_refused(s: &dyn Storage, prefix: &str, oldest: u64) {
    match s.watch(prefix, oldest.saturating_sub(1)).await {
        Err(StorageError::Compacted { .. }) => {}
        Ok(mut stream) => {
            match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
                Ok(Some(Err(StorageError::Compacted { .. }))) => {}
                other => panic!("a watch from a compacted revision: {other:?}"),
            }
        }
        Err(other) => panic!("a watch from a compacted revision: {other:?}"),
    }
}
