//! Where the API keeps objects: keys and JSON values with revisions, as kube-apiserver keeps
//! them in etcd. An object's `resourceVersion` is the revision of its last write; every write
//! takes the next revision of the whole store; a watch replays what followed a revision, then
//! follows live.
//!
//! Two stores: [`MemoryStorage`] (in process, for tests of a management cluster) and
//! `EtcdStorage` (the cluster's real etcd, so that every API server replica serves the same
//! objects).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::broadcast;

/// Why a storage operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// Create of a key that exists.
    #[error("{key} exists")]
    Exists { key: String },
    /// Update or delete of a key that does not exist.
    #[error("{key} not found")]
    NotFound { key: String },
    /// Update or delete of a key whose revision is not the expected one.
    #[error("{key} is at revision {current}, not {expected}")]
    Conflict {
        key: String,
        expected: u64,
        current: u64,
    },
    /// A watch from a revision the store no longer has the history of.
    #[error("revision {requested} is compacted (the oldest kept is {oldest})")]
    Compacted { requested: u64, oldest: u64 },
    /// The store could not be reached or answered something else.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// A result of this module.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// A stored value and the revision of its last write.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub value: Value,
    pub revision: u64,
}

/// A change to a key, as a watch sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub key: String,
    /// The revision of the change.
    pub revision: u64,
    /// The value written; `None` for a deletion.
    pub value: Option<Value>,
    /// The value before (for a deletion: what was deleted; `None` for a creation).
    pub previous: Option<Value>,
}

/// Changes under a prefix, in revision order.
pub type ChangeStream = BoxStream<'static, Result<Change>>;

/// Which part of a prefix to list, and as of when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// The first key to return (inclusive); `None` from the prefix's start.
    pub start: Option<String>,
    /// At most this many keys; `None` for all.
    pub limit: Option<usize>,
    /// The state as of this revision; `None` for the current one.
    pub revision: Option<u64>,
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// Keys and values, in key order.
    pub items: Vec<(String, Stored)>,
    /// The revision the listing reflects.
    pub revision: u64,
    /// How many keys under the prefix follow the page.
    pub remaining: usize,
}

/// A key-value store with revisions.
pub trait Storage: Send + Sync + 'static {
    /// The value at `key`.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Stored>>>;

    /// Keys under `prefix`, in key order, as `options` choose.
    ///
    /// # Errors
    /// [`StorageError::Compacted`] for a revision older than the history kept.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        options: &'a ListOptions,
    ) -> BoxFuture<'a, Result<Listed>>;

    /// Writes `value` at `key`, which must not exist; returns the revision.
    fn create<'a>(&'a self, key: &'a str, value: &'a Value) -> BoxFuture<'a, Result<u64>>;

    /// Writes `value` at `key`, whose revision must be `expected`; returns the new revision.
    fn update<'a>(
        &'a self,
        key: &'a str,
        value: &'a Value,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64>>;

    /// Deletes `key`, whose revision must be `expected`; returns the revision of the deletion.
    fn delete<'a>(&'a self, key: &'a str, expected: u64) -> BoxFuture<'a, Result<u64>>;

    /// Changes under `prefix` after revision `after`: those that happened already (in
    /// order), then live ones.
    ///
    /// # Errors
    /// [`StorageError::Compacted`] when `after` is older than the history kept.
    fn watch<'a>(&'a self, prefix: &'a str, after: u64) -> BoxFuture<'a, Result<ChangeStream>>;

    /// The store's current revision.
    fn revision(&self) -> BoxFuture<'_, Result<u64>>;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many changes [`MemoryStorage`] keeps for watches to replay.
pub const MEMORY_HISTORY: usize = 10_000;

struct Memory {
    entries: BTreeMap<String, Stored>,
    revision: u64,
    history: VecDeque<Change>,
    /// Changes at or before this revision are gone from the history.
    compacted: u64,
}

impl Memory {
    /// Every entry as of `revision`: the current ones with later changes undone.
    fn state_at(&self, revision: u64) -> Result<BTreeMap<String, Stored>> {
        if revision < self.compacted {
            return Err(StorageError::Compacted {
                requested: revision,
                oldest: self.compacted,
            });
        }
        let mut state = self.entries.clone();
        for change in self.history.iter().rev() {
            if change.revision <= revision {
                break;
            }
            match &change.previous {
                Some(previous) => {
                    // The previous value's own revision: the last change of the key before.
                    let before = self
                        .history
                        .iter()
                        .rev()
                        .filter(|c| c.revision < change.revision && c.key == change.key)
                        .map(|c| c.revision)
                        .next()
                        .unwrap_or(0);
                    state.insert(
                        change.key.clone(),
                        Stored {
                            value: previous.clone(),
                            revision: before,
                        },
                    );
                }
                None => {
                    state.remove(&change.key);
                }
            }
        }
        Ok(state)
    }
}

/// An in-process store: every write notifies watchers; the last [`MEMORY_HISTORY`] changes
/// are kept for replay.
pub struct MemoryStorage {
    inner: Mutex<Memory>,
    live: broadcast::Sender<Change>,
    history: usize,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        MemoryStorage::with_history(MEMORY_HISTORY)
    }
}

impl MemoryStorage {
    /// A store that keeps `history` changes for replay (a watch from an older revision gets
    /// [`StorageError::Compacted`]).
    pub fn with_history(history: usize) -> Self {
        let (live, _) = broadcast::channel(4096);
        MemoryStorage {
            inner: Mutex::new(Memory {
                entries: BTreeMap::new(),
                revision: 0,
                history: VecDeque::new(),
                compacted: 0,
            }),
            live,
            history: history.max(1),
        }
    }

    fn record(&self, inner: &mut Memory, change: Change) {
        inner.history.push_back(change.clone());
        while inner.history.len() > self.history {
            if let Some(gone) = inner.history.pop_front() {
                inner.compacted = gone.revision;
            }
        }
        // Nobody watching is fine.
        let _ = self.live.send(change);
    }
}

impl Storage for MemoryStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Stored>>> {
        Box::pin(async move { Ok(lock(&self.inner).entries.get(key).cloned()) })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        options: &'a ListOptions,
    ) -> BoxFuture<'a, Result<Listed>> {
        Box::pin(async move {
            let inner = lock(&self.inner);
            let start = options
                .start
                .clone()
                .filter(|s| s.as_str() > prefix)
                .unwrap_or_else(|| prefix.to_string());
            let in_range = |k: &String| k.starts_with(prefix) && *k >= start;
            let (all, revision): (Vec<(String, Stored)>, u64) = match options.revision {
                Some(revision) if revision < inner.revision => {
                    let past = inner.state_at(revision)?;
                    let items = past.into_iter().filter(|(k, _)| in_range(k)).collect();
                    (items, revision)
                }
                _ => {
                    let items = inner
                        .entries
                        .range(start.clone()..)
                        .take_while(|(k, _)| k.starts_with(prefix))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    (items, inner.revision)
                }
            };
            let limit = options.limit.unwrap_or(usize::MAX).max(1);
            let remaining = all.len().saturating_sub(limit);
            let items = all.into_iter().take(limit).collect();
            Ok(Listed {
                items,
                revision,
                remaining,
            })
        })
    }

    fn create<'a>(&'a self, key: &'a str, value: &'a Value) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let mut inner = lock(&self.inner);
            if inner.entries.contains_key(key) {
                return Err(StorageError::Exists {
                    key: key.to_string(),
                });
            }
            inner.revision += 1;
            let revision = inner.revision;
            inner.entries.insert(
                key.to_string(),
                Stored {
                    value: value.clone(),
                    revision,
                },
            );
            let change = Change {
                key: key.to_string(),
                revision,
                value: Some(value.clone()),
                previous: None,
            };
            self.record(&mut inner, change);
            Ok(revision)
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        value: &'a Value,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let mut inner = lock(&self.inner);
            let Some(current) = inner.entries.get(key) else {
                return Err(StorageError::NotFound {
                    key: key.to_string(),
                });
            };
            if current.revision != expected {
                return Err(StorageError::Conflict {
                    key: key.to_string(),
                    expected,
                    current: current.revision,
                });
            }
            let previous = current.value.clone();
            inner.revision += 1;
            let revision = inner.revision;
            inner.entries.insert(
                key.to_string(),
                Stored {
                    value: value.clone(),
                    revision,
                },
            );
            let change = Change {
                key: key.to_string(),
                revision,
                value: Some(value.clone()),
                previous: Some(previous),
            };
            self.record(&mut inner, change);
            Ok(revision)
        })
    }

    fn delete<'a>(&'a self, key: &'a str, expected: u64) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let mut inner = lock(&self.inner);
            let Some(current) = inner.entries.get(key) else {
                return Err(StorageError::NotFound {
                    key: key.to_string(),
                });
            };
            if current.revision != expected {
                return Err(StorageError::Conflict {
                    key: key.to_string(),
                    expected,
                    current: current.revision,
                });
            }
            let previous = inner.entries.remove(key).map(|s| s.value);
            inner.revision += 1;
            let revision = inner.revision;
            let change = Change {
                key: key.to_string(),
                revision,
                value: None,
                previous,
            };
            self.record(&mut inner, change);
            Ok(revision)
        })
    }

    fn watch<'a>(&'a self, prefix: &'a str, after: u64) -> BoxFuture<'a, Result<ChangeStream>> {
        Box::pin(async move {
            // Subscribe before reading the history, so that nothing falls between the two.
            let live = self.live.subscribe();
            let (replay, current) = {
                let inner = lock(&self.inner);
                if after < inner.compacted {
                    return Err(StorageError::Compacted {
                        requested: after,
                        oldest: inner.compacted,
                    });
                }
                let replay: Vec<Change> = inner
                    .history
                    .iter()
                    .filter(|c| c.revision > after && c.key.starts_with(prefix))
                    .cloned()
                    .collect();
                (replay, inner.revision)
            };
            let prefix = prefix.to_string();
            // Every change up to `current` is in the history: replayed, or not under the
            // prefix. Live ones start after it (and after `after`, which may be ahead).
            let last = after.max(current);
            let replayed = futures::stream::iter(replay.into_iter().map(Ok));
            let live = futures::stream::unfold(Some((live, prefix, last)), |state| async move {
                let (mut live, prefix, last) = state?;
                loop {
                    match live.recv().await {
                        Ok(change) if change.revision > last && change.key.starts_with(&prefix) => {
                            return Some((Ok(change), Some((live, prefix, last))));
                        }
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            // Too far behind to be told everything: end as etcd does, with an
                            // error the API turns into 410 Gone.
                            let error = StorageError::Compacted {
                                requested: last,
                                oldest: last + n,
                            };
                            return Some((Err(error), None));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            });
            let stream: ChangeStream = Box::pin(futures::StreamExt::chain(replayed, live));
            Ok(stream)
        })
    }

    fn revision(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move { Ok(lock(&self.inner).revision) })
    }
}

/// A shared store.
pub type SharedStorage = Arc<dyn Storage>;

pub mod contract;

#[cfg(test)]
mod tests;
