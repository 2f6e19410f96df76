//! [`MemoryStore`]: the [`Store`] contract held in process, with the API server's semantics,
//! for tests and the in-process loop ([`crate::driver::Driver`]).
//!
//! ```text
//!   controllers ──Store──▶ MemoryStore ──Change──▶ subscribers (the driver)
//!                              │
//!   tests ◀── writes(), events(), object(), objects(); fail_next() injects errors
//! ```
//!
//! What it does as the API server does:
//! - `create` sets uid, resourceVersion (one store-wide counter, as a decimal string),
//!   generation 1 and creationTimestamp (second precision), and drops the given status (every
//!   kind has a status subresource). A set `resourceVersion` is refused ([`StoreError::Invalid`])
//!   and an empty name takes `generateName` plus a suffix.
//! - `update` writes metadata and spec, keeps status and the server-owned metadata (uid,
//!   creationTimestamp, deletionTimestamp, generation), bumps generation when spec changed and
//!   removes an object being deleted once its finalizers are empty. A set `resourceVersion` or
//!   `uid` that differs from the stored one is a [`StoreError::Conflict`]; absent, the update
//!   is unconditional. No finalizer can be added to an object being deleted.
//! - `update_status` writes status only.
//! - `delete` of an object with finalizers sets deletionTimestamp once (and bumps generation);
//!   without finalizers the object is removed; a missing object is Ok.
//! - A write that changes nothing (the same metadata, spec or status again) does not bump the
//!   resourceVersion and notifies nobody, like an API server's no-op update.
//!
//! For tests: [`MemoryStore::writes`] is the journal of every successful mutating call
//! (no-ops and deletes of missing objects included: they are calls a controller made),
//! [`MemoryStore::fail_next`] makes the next call of an operation fail, and
//! [`MemoryStore::insert`] seeds objects as an administrator would, outside the journal.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use oi_api::{Kind, Object, ObjectKey};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::broadcast;

use oi_manager::store::{ObjectEvent, Result, Store, StoreError, Stored};

/// How many changes a subscriber may fall behind before it sees
/// [`broadcast::error::RecvError::Lagged`] (and must list again).
pub const CHANGE_CAPACITY: usize = 1024;

/// A store operation, for [`MemoryStore::fail_next`] and the write journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Get,
    List,
    Create,
    Update,
    UpdateStatus,
    Delete,
    Publish,
}

/// An object that was created, written or removed: what a watch would report. Changes are
/// sent in the order of their resourceVersions.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub kind: Kind,
    pub key: ObjectKey,
    /// The store's resourceVersion after the change (the object's own, unless removed).
    pub resource_version: u64,
    /// The object as the change left it; `None` once removed.
    pub object: Option<Object>,
}

/// One successful mutating call (create, update, update_status or delete).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Write {
    pub op: Op,
    pub kind: Kind,
    pub key: ObjectKey,
}

impl Write {
    pub fn new(op: Op, kind: Kind, key: impl Into<ObjectKey>) -> Self {
        Write {
            op,
            kind,
            key: key.into(),
        }
    }
}

#[derive(Default)]
struct Inner {
    objects: BTreeMap<Kind, BTreeMap<ObjectKey, Object>>,
    /// The last resourceVersion handed out.
    resource_version: u64,
    /// uids and generateName suffixes handed out.
    serial: u64,
    events: Vec<ObjectEvent>,
    writes: Vec<Write>,
    failures: BTreeMap<Op, VecDeque<StoreError>>,
}

impl Inner {
    fn fail(&mut self, op: Op) -> Result<()> {
        match self.failures.get_mut(&op).and_then(VecDeque::pop_front) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn get<K: Stored>(&self, key: &ObjectKey) -> Option<K> {
        self.objects
            .get(&K::KIND)?
            .get(key)
            .cloned()
            .and_then(K::from_object)
    }

    fn put<K: Stored>(&mut self, object: K, changes: &broadcast::Sender<Change>) {
        let key = object.key();
        let object = object.into_object();
        self.objects
            .entry(K::KIND)
            .or_default()
            .insert(key.clone(), object.clone());
        self.notify(changes, K::KIND, key, Some(object));
    }

    fn remove(&mut self, kind: Kind, key: &ObjectKey, changes: &broadcast::Sender<Change>) {
        if let Some(objects) = self.objects.get_mut(&kind) {
            objects.remove(key);
        }
        self.notify(changes, kind, key.clone(), None);
    }

    fn notify(
        &self,
        changes: &broadcast::Sender<Change>,
        kind: Kind,
        key: ObjectKey,
        object: Option<Object>,
    ) {
        // No subscriber is fine: nobody is watching.
        let _ = changes.send(Change {
            kind,
            key,
            resource_version: self.resource_version,
            object,
        });
    }

    fn next_resource_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn journal(&mut self, op: Op, kind: Kind, key: ObjectKey) {
        self.writes.push(Write { op, kind, key });
    }
}

/// Now, at second precision as Kubernetes timestamps have it.
fn now() -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap_or(now)
}

fn invalid(kind: Kind, key: &ObjectKey, message: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        kind,
        key: key.clone(),
        message: message.into(),
    }
}

fn to_value<K: Stored>(object: &K) -> Result<Value> {
    serde_json::to_value(object).map_err(|e| invalid(K::KIND, &object.key(), e.to_string()))
}

fn from_value<K: Stored>(key: &ObjectKey, value: Value) -> Result<K> {
    serde_json::from_value(value).map_err(|e| invalid(K::KIND, key, e.to_string()))
}

/// `value` with its `status` replaced by `status` (absent: the default status).
fn with_status(mut value: Value, status: Option<&Value>) -> Value {
    if let Value::Object(map) = &mut value {
        match status {
            Some(status) => {
                map.insert("status".to_string(), status.clone());
            }
            None => {
                map.remove("status");
            }
        }
    }
    value
}

/// The API server's preconditions: a set resourceVersion or uid must match the stored one.
fn check_preconditions<K: Stored>(given: &K, stored: &K) -> Result<()> {
    let (given_meta, stored_meta) = (given.metadata(), stored.metadata());
    if let Some(version) = &given_meta.resource_version
        && stored_meta.resource_version.as_ref() != Some(version)
    {
        return Err(StoreError::Conflict {
            kind: K::KIND,
            key: stored.key(),
            message: format!(
                "the object has been modified (resourceVersion {version}, stored {}); \
                 apply your changes to the latest version and try again",
                stored_meta.resource_version.as_deref().unwrap_or("")
            ),
        });
    }
    if let Some(uid) = &given_meta.uid
        && stored_meta.uid.as_ref() != Some(uid)
    {
        return Err(StoreError::Conflict {
            kind: K::KIND,
            key: stored.key(),
            message: format!(
                "uid {uid} does not match the stored uid {}; the object was deleted and \
                 recreated",
                stored_meta.uid.as_deref().unwrap_or("")
            ),
        });
    }
    Ok(())
}

/// The [`Store`] in process; see the module documentation. Share it with an `Arc`.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Change>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("MemoryStore")
            .field("objects", &inner.objects)
            .field("resource_version", &inner.resource_version)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        MemoryStore {
            inner: Mutex::new(Inner::default()),
            changes: broadcast::channel(CHANGE_CAPACITY).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held left no half-written object behind (every write is
        // one map insert or removal), so the data is still sound.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every create, write and removal from now on (not [`Store::publish`]), in order.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Makes the next call of `op` (of any kind) fail with `error`, without effect. Calls
    /// queue up: two `fail_next(Op::Update, ..)` fail the next two updates.
    pub fn fail_next(&self, op: Op, error: StoreError) {
        self.lock().failures.entry(op).or_default().push_back(error);
    }

    /// The journal of successful create, update, update_status and delete calls, in order.
    /// [`MemoryStore::insert`] is not in it.
    pub fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    /// Empties the journal, so a test can look at what one step wrote.
    pub fn clear_writes(&self) {
        self.lock().writes.clear();
    }

    /// The events published, in order.
    pub fn events(&self) -> Vec<ObjectEvent> {
        self.lock().events.clone()
    }

    /// The stored object, read synchronously (no injected failure applies).
    pub fn object<K: Stored>(&self, key: &ObjectKey) -> Option<K> {
        self.lock().get(key)
    }

    /// Every stored object of a kind, sorted by key, read synchronously.
    pub fn objects<K: Stored>(&self) -> Vec<K> {
        list_of(&self.lock(), None)
    }

    /// The first `Some` that `f` answers for a stored object of kind `K`, in key order,
    /// without copying the others (under the store's lock: `f` must not call the store).
    pub fn find_map<K: Stored, T>(&self, f: impl FnMut(&K) -> Option<T>) -> Option<T> {
        objects_of(&self.lock(), None).find_map(f)
    }

    /// What `f` answers for the stored object `key` of kind `K`, without copying it (under
    /// the store's lock: `f` must not call the store).
    pub fn with_object<K: Stored, T>(
        &self,
        key: &ObjectKey,
        f: impl FnOnce(&K) -> Option<T>,
    ) -> Option<T> {
        self.lock()
            .objects
            .get(&K::KIND)?
            .get(key)
            .and_then(K::from_object_ref)
            .and_then(f)
    }

    /// The last resourceVersion handed out (0 before any write).
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Seeds `object` as an administrator would create it: as `create` does, but keeping the
    /// given status and ignoring a given resourceVersion; an object with the same key is
    /// replaced (as delete and create would). Not in the journal; subscribers are notified.
    ///
    /// An object that cannot be stored (no name, one that does not serialize) is left out
    /// with a warning: seeding is test setup, and the test then fails on the missing object.
    pub fn insert<K: Stored>(&self, object: K) {
        let mut inner = self.lock();
        let key = object.key();
        if let Some(objects) = inner.objects.get_mut(&K::KIND) {
            objects.remove(&key);
        }
        let mut object = object;
        object.metadata_mut().resource_version = None;
        if let Err(error) = self.create_locked(&mut inner, &object, true) {
            tracing::warn!(%error, "seeding the memory store");
        }
    }

    fn create_locked<K: Stored>(
        &self,
        inner: &mut Inner,
        object: &K,
        keep_status: bool,
    ) -> Result<K> {
        let mut object = object.clone();
        {
            let meta = object.metadata_mut();
            meta.namespace = K::KIND
                .namespaced()
                .then(|| meta.namespace_or_default().to_string());
        }
        if object.metadata().name.is_empty() {
            match object
                .metadata()
                .generate_name
                .clone()
                .filter(|p| !p.is_empty())
            {
                Some(prefix) => {
                    object.metadata_mut().name = format!("{prefix}{:05x}", inner.next_serial());
                }
                None => {
                    return Err(invalid(
                        K::KIND,
                        &object.key(),
                        "metadata.name or metadata.generateName is required",
                    ));
                }
            }
        }
        let key = object.key();
        if object.metadata().resource_version.is_some() {
            return Err(invalid(
                K::KIND,
                &key,
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if inner.get::<K>(&key).is_some() {
            return Err(StoreError::AlreadyExists { kind: K::KIND, key });
        }
        let serial = inner.next_serial();
        let resource_version = inner.next_resource_version();
        let meta = object.metadata_mut();
        meta.uid = Some(format!("00000000-0000-4000-8000-{serial:012x}"));
        meta.resource_version = Some(resource_version);
        meta.generation = Some(1);
        meta.creation_timestamp = Some(now());
        meta.deletion_timestamp = None;
        meta.deletion_grace_period_seconds = None;
        if !keep_status {
            object = from_value(&key, with_status(to_value(&object)?, None))?;
        }
        inner.put(object.clone(), &self.changes);
        Ok(object)
    }
}

/// The stored objects of kind `K` (in `namespace`, or all), borrowed, in key order.
fn objects_of<'a, K: Stored>(
    inner: &'a Inner,
    namespace: Option<&'a str>,
) -> impl Iterator<Item = &'a K> {
    inner
        .objects
        .get(&K::KIND)
        .into_iter()
        .flatten()
        .filter(move |(key, _)| match namespace {
            Some(ns) if K::KIND.namespaced() => key.namespace == ns,
            _ => true,
        })
        .filter_map(|(_, object)| K::from_object_ref(object))
}

fn list_of<K: Stored>(inner: &Inner, namespace: Option<&str>) -> Vec<K> {
    objects_of(inner, namespace).cloned().collect()
}

impl Store for MemoryStore {
    async fn get<K: Stored>(&self, key: &ObjectKey) -> Result<Option<K>> {
        let mut inner = self.lock();
        inner.fail(Op::Get)?;
        Ok(inner.get(key))
    }

    async fn list<K: Stored>(&self, namespace: Option<&str>) -> Result<Vec<K>> {
        let mut inner = self.lock();
        inner.fail(Op::List)?;
        Ok(list_of(&inner, namespace))
    }

    async fn list_map<K: Stored, T: Send>(
        &self,
        namespace: Option<&str>,
        f: impl Fn(&K) -> T + Send,
    ) -> Result<Vec<T>> {
        let mut inner = self.lock();
        inner.fail(Op::List)?;
        Ok(objects_of(&inner, namespace).map(f).collect())
    }

    async fn create<K: Stored>(&self, object: &K) -> Result<K> {
        let mut inner = self.lock();
        inner.fail(Op::Create)?;
        let created = self.create_locked(&mut inner, object, false)?;
        inner.journal(Op::Create, K::KIND, created.key());
        Ok(created)
    }

    async fn update<K: Stored>(&self, object: &K) -> Result<K> {
        let mut inner = self.lock();
        inner.fail(Op::Update)?;
        let key = object.key();
        let stored: K = inner.get(&key).ok_or_else(|| StoreError::NotFound {
            kind: K::KIND,
            key: key.clone(),
        })?;
        check_preconditions(object, &stored)?;
        let stored_meta = stored.metadata();
        if stored_meta.is_being_deleted()
            && let Some(added) = object
                .metadata()
                .finalizers
                .iter()
                .find(|f| !stored_meta.finalizers.contains(f))
        {
            return Err(invalid(
                K::KIND,
                &key,
                format!(
                    "metadata.finalizers: no new finalizers can be added if the object is being \
                     deleted, found new finalizer {added}"
                ),
            ));
        }
        let mut updated = object.clone();
        let meta = updated.metadata_mut();
        meta.name = stored_meta.name.clone();
        meta.namespace = stored_meta.namespace.clone();
        meta.uid = stored_meta.uid.clone();
        meta.resource_version = stored_meta.resource_version.clone();
        meta.generation = stored_meta.generation;
        meta.creation_timestamp = stored_meta.creation_timestamp;
        meta.deletion_timestamp = stored_meta.deletion_timestamp;
        meta.deletion_grace_period_seconds = stored_meta.deletion_grace_period_seconds;
        let stored_value = to_value(&stored)?;
        let mut value = with_status(to_value(&updated)?, stored_value.get("status"));
        for field in ["apiVersion", "kind"] {
            if let (Value::Object(map), Some(v)) = (&mut value, stored_value.get(field)) {
                map.insert(field.to_string(), v.clone());
            }
        }
        inner.journal(Op::Update, K::KIND, key.clone());
        if value == stored_value {
            return Ok(stored);
        }
        let spec_changed = value.get("spec") != stored_value.get("spec");
        let mut updated: K = from_value(&key, value)?;
        let resource_version = inner.next_resource_version();
        let meta = updated.metadata_mut();
        meta.resource_version = Some(resource_version);
        if spec_changed {
            meta.generation = Some(meta.generation.unwrap_or(0) + 1);
        }
        if meta.is_being_deleted() && meta.finalizers.is_empty() {
            inner.remove(K::KIND, &key, &self.changes);
        } else {
            inner.put(updated.clone(), &self.changes);
        }
        Ok(updated)
    }

    async fn update_status<K: Stored>(&self, object: &K) -> Result<K> {
        let mut inner = self.lock();
        inner.fail(Op::UpdateStatus)?;
        let key = object.key();
        let stored: K = inner.get(&key).ok_or_else(|| StoreError::NotFound {
            kind: K::KIND,
            key: key.clone(),
        })?;
        check_preconditions(object, &stored)?;
        let stored_value = to_value(&stored)?;
        let value = with_status(stored_value.clone(), to_value(object)?.get("status"));
        inner.journal(Op::UpdateStatus, K::KIND, key.clone());
        if value == stored_value {
            return Ok(stored);
        }
        let mut updated: K = from_value(&key, value)?;
        updated.metadata_mut().resource_version = Some(inner.next_resource_version());
        inner.put(updated.clone(), &self.changes);
        Ok(updated)
    }

    async fn delete<K: Stored>(&self, key: &ObjectKey) -> Result<()> {
        let mut inner = self.lock();
        inner.fail(Op::Delete)?;
        inner.journal(Op::Delete, K::KIND, key.clone());
        let Some(mut stored) = inner.get::<K>(key) else {
            return Ok(());
        };
        if stored.metadata().finalizers.is_empty() {
            inner.next_resource_version();
            inner.remove(K::KIND, key, &self.changes);
        } else if !stored.metadata().is_being_deleted() {
            let resource_version = inner.next_resource_version();
            let meta = stored.metadata_mut();
            meta.deletion_timestamp = Some(now());
            meta.deletion_grace_period_seconds = Some(0);
            meta.generation = Some(meta.generation.unwrap_or(0) + 1);
            meta.resource_version = Some(resource_version);
            inner.put(stored, &self.changes);
        }
        Ok(())
    }

    async fn publish(&self, event: &ObjectEvent) -> Result<()> {
        let mut inner = self.lock();
        inner.fail(Op::Publish)?;
        inner.events.push(event.clone());
        Ok(())
    }
}

/// The simulated network's view of a [`MemoryStore`] (`oi_engine_testsupport::sim::SimNetwork`): etcd
/// members and API servers are found among the Components and Hypervisors it holds.
pub struct StoreSource(pub std::sync::Arc<MemoryStore>);

impl oi_engine_testsupport::sim::Source for StoreSource {
    fn find_component<T>(&self, f: impl FnMut(&oi_api::Component) -> Option<T>) -> Option<T> {
        self.0.find_map(f)
    }
    fn find_hypervisor<T>(&self, f: impl FnMut(&oi_api::Hypervisor) -> Option<T>) -> Option<T> {
        self.0.find_map(f)
    }
    fn with_component<T>(
        &self,
        key: &oi_api::ObjectKey,
        f: impl FnOnce(&oi_api::Component) -> Option<T>,
    ) -> Option<T> {
        self.0.with_object(key, f)
    }
}
