//! Watch caches: the objects the controllers list, kept current by a watch per kind, so that
//! a reconcile reads every Component and Hypervisor from memory instead of LISTing them from
//! the API server (a LIST per reconcile made the manager's traffic quadratic in the number of
//! clusters).
//!
//! ```text
//!  API server ──WATCH (one per kind, resumed and relisted by kube-runtime's watcher)──┐
//!                                                                                    ▼
//!  KubeStore::list / list_map ──(synced, scope covers the request)──► WatchCache ◄── our own
//!        └──(not cached, not synced yet, or another namespace)──► LIST              writes
//! ```
//!
//! Each object is decoded into our type once, when its event arrives, and lists map over the
//! decoded objects in place. An object that does not decode stays in the cache as its error, so
//! a list over it fails as a LIST would.
//!
//! **Staleness.** A watch lags behind writes. The manager's own successful writes are applied
//! to the cache at once (write-through), so a reconcile sees what the one before it wrote,
//! as with the in-process store. Whatever the cache holds, a write carries the
//! `resourceVersion` that was read, so a stale read ends in a `Conflict` and a retry, never in
//! a lost update. Versions are compared as etcd's revisions (numbers): an event or a write never
//! replaces a newer copy of its object. Where a version is not a number (an API server not
//! backed by etcd), writes are not applied and only the watch updates the cache.
//!
//! **Triggers.** The controllers' own watches decide when a reconcile runs, and the cache's
//! watch may be a moment behind theirs. So each live change the cache takes also wakes the
//! Clusters it concerns ([`WatchCache::wake_clusters_with`]): a reconcile that ran before
//! the cache held a change runs again after. The two triggers usually fall in one debounce
//! window and cost one reconcile.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt as _;
use kube::core::DynamicObject;
use kube::runtime::{WatchStreamExt as _, watcher};
use oi_api::{
    Cluster, Component, DEFAULT_NAMESPACE, Hypervisor, Kind, Object, ObjectKey, Resource as _,
    Secret,
};
use tokio::sync::watch;

use crate::joins::Waker;
use crate::store::{Result, StoreError, Stored};

/// A live change the cache took: the object before and now.
struct Change {
    before: Option<Object>,
    now: Option<Object>,
}

/// One kind's objects and whether its first list arrived.
struct KindCache {
    state: RwLock<State>,
    synced: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<ObjectKey, Entry>,
    /// A (re)list under way: what it has brought so far.
    relist: Option<BTreeMap<ObjectKey, Entry>>,
}

struct Entry {
    /// `metadata.resourceVersion` as a number, when it is one.
    version: Option<u64>,
    object: std::result::Result<Object, StoreError>,
    /// The object as the watch brought it and the Secrets it references, when it references
    /// any: decoded again when one of them changes ([`Inner::redecode`]).
    raw: Option<Box<(DynamicObject, BTreeSet<String>)>>,
}

impl Entry {
    /// Whether `self` may replace `held`: not when both have versions and `held`'s is newer.
    fn supersedes(&self, held: &Entry) -> bool {
        match (self.version, held.version) {
            (Some(new), Some(old)) => new >= old,
            _ => true,
        }
    }
}

impl KindCache {
    fn new() -> Self {
        KindCache {
            state: RwLock::new(State::default()),
            synced: watch::channel(false).0,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies one watch event. Returns, for a live change (not a list) that the cache took,
    /// the copy it held before and the one it holds now (`None`: absent).
    fn apply(&self, event: watcher::Event<(ObjectKey, Entry)>) -> Option<Change> {
        let mut state = self.write();
        match event {
            watcher::Event::Init => state.relist = Some(BTreeMap::new()),
            watcher::Event::InitApply((key, entry)) => {
                state
                    .relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, entry);
            }
            watcher::Event::InitDone => {
                let mut listed = state.relist.take().unwrap_or_default();
                // What the list brought replaces what was held, except where a newer copy
                // was written meanwhile; what it did not bring is gone.
                for (key, entry) in listed.iter_mut() {
                    if let Some(held) = state.objects.remove(key)
                        && !entry.supersedes(&held)
                    {
                        *entry = held;
                    }
                }
                state.objects = listed;
                drop(state);
                self.synced.send_replace(true);
            }
            watcher::Event::Apply((key, entry)) => {
                let held = state.objects.get(&key);
                if held.is_none_or(|held| entry.supersedes(held)) {
                    // Our own write, seen again: nothing changed.
                    let seen =
                        held.is_some_and(|h| h.version.is_some() && h.version == entry.version);
                    let now = entry.object.as_ref().ok().cloned();
                    let before = state.objects.insert(key, entry);
                    if !seen {
                        return Some(Change {
                            before: before.and_then(|e| e.object.ok()),
                            now,
                        });
                    }
                }
            }
            watcher::Event::Delete((key, entry)) => {
                if state
                    .objects
                    .get(&key)
                    .is_some_and(|held| entry.supersedes(held))
                {
                    let before = state.objects.remove(&key);
                    return Some(Change {
                        before: before.and_then(|e| e.object.ok()),
                        now: None,
                    });
                }
            }
        }
        None
    }

    /// A write of ours: `created` says whether it created the object.
    fn wrote(&self, key: ObjectKey, entry: Entry, created: bool) {
        if entry.version.is_none() {
            return;
        }
        let mut state = self.write();
        match state.objects.get(&key) {
            Some(held) if entry.supersedes(held) => {
                state.objects.insert(key, entry);
            }
            Some(_) => {}
            // An update of an object the cache does not hold (yet, or any more: its deletion
            // may have been seen already) waits for the watch.
            None if created => {
                state.objects.insert(key, entry);
            }
            None => {}
        }
    }
}

/// The watch caches of the kinds the controllers list; see the module documentation.
/// Dropping it stops its watches.
pub struct WatchCache {
    inner: Arc<Inner>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What the cache's watches share with it.
pub struct Inner {
    /// `None`: every namespace.
    namespace: Option<String>,
    kinds: HashMap<Kind, Arc<KindCache>>,
    /// Told the Clusters a live change concerns ([`WatchCache::wake_clusters_with`]).
    waker: RwLock<Option<Waker>>,
    /// Held while an object of a kind with keys in Secrets is decoded and applied, and while
    /// such objects are decoded again after a Secret changed: so that no decode misses a
    /// Secret that arrived while it ran.
    keyed: std::sync::Mutex<()>,
}

impl std::ops::Deref for WatchCache {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache")
            .field("namespace", &self.namespace)
            .field("kinds", &self.kinds.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Drop for WatchCache {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The kinds the reconciles list, and so the ones cached: every Cluster, Component and
/// Hypervisor, and the Secrets holding Clusters' and Components' keys (those labelled
/// [`crate::keys::KEYS_OF_KIND`], and no other: a cached Cluster or Component is held with
/// its keys resolved from them, and decoded again when they change). (SIP's BareMetalHosts are listed
/// once per SIPCluster reconcile, which the hosts' own changes trigger: they are read from the
/// API server, never older than the change that asked for the reconcile.)
pub const CACHED_KINDS: [Kind; 4] = [
    Kind::Secret,
    Kind::Cluster,
    Kind::Component,
    Kind::Hypervisor,
];

impl WatchCache {
    /// Starts a watch of each of `kinds` (of [`CACHED_KINDS`]; others are ignored) in
    /// `namespace` (`None`: every one), on the current tokio runtime.
    pub fn start(client: &kube::Client, namespace: Option<&str>, kinds: &[Kind]) -> Self {
        let cached: Vec<Kind> = kinds
            .iter()
            .copied()
            .filter(|k| CACHED_KINDS.contains(k))
            .collect();
        let inner = Arc::new(Inner {
            namespace: namespace.map(str::to_string),
            kinds: cached
                .iter()
                .map(|k| (*k, Arc::new(KindCache::new())))
                .collect(),
            waker: RwLock::new(None),
            keyed: std::sync::Mutex::new(()),
        });
        let tasks = cached
            .iter()
            .map(|kind| match kind {
                Kind::Secret => watch::<Secret>(&inner, client),
                Kind::Cluster => watch::<Cluster>(&inner, client),
                Kind::Component => watch::<Component>(&inner, client),
                _ => watch::<Hypervisor>(&inner, client),
            })
            .collect();
        WatchCache { inner, tasks }
    }

    /// A cache of `kinds` fed by hand (no watch), for tests of its rules.
    #[cfg(test)]
    fn detached(namespace: Option<&str>, kinds: &[Kind]) -> Self {
        WatchCache {
            inner: Arc::new(Inner {
                namespace: namespace.map(str::to_string),
                kinds: kinds
                    .iter()
                    .map(|k| (*k, Arc::new(KindCache::new())))
                    .collect(),
                waker: RwLock::new(None),
                keyed: std::sync::Mutex::new(()),
            }),
            tasks: Vec::new(),
        }
    }

    /// From now on, every live change the watches bring wakes the Clusters it concerns
    /// through `waker`: a Cluster's change its own, a Component's its cluster, a Hypervisor's
    /// change of spec, labels or deletion (not of status) the clusters with a Component on
    /// it. The controllers' own watches trigger the same reconciles; these come once the
    /// cache holds the change, so a reconcile that read the cache before it arrived runs
    /// again with it.
    pub fn wake_clusters_with(&self, waker: Waker) {
        *self.waker.write().unwrap_or_else(PoisonError::into_inner) = Some(waker);
    }

    /// Waits until every cached kind's first list arrived.
    pub async fn synced(&self) {
        for cache in self.kinds.values() {
            let mut rx = cache.synced.subscribe();
            // The sender lives as long as `self`.
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// The cache of `kind` if it answers a list in `namespace`: cached, first list arrived,
    /// and watched in every namespace or in that one.
    fn serving(&self, kind: Kind, namespace: Option<&str>) -> Option<&KindCache> {
        let cache = self.kinds.get(&kind)?;
        if !*cache.synced.borrow() {
            return None;
        }
        let covers = match (&self.namespace, namespace) {
            _ if !kind.namespaced() => true,
            (None, _) => true,
            (Some(watched), Some(asked)) => {
                watched
                    == if asked.is_empty() {
                        DEFAULT_NAMESPACE
                    } else {
                        asked
                    }
            }
            (Some(_), None) => false,
        };
        covers.then_some(&**cache)
    }

    /// Every cached `K` in `namespace` (`None`: all) mapped through `f`, in the API server's
    /// order (namespace, then name); `None` when the cache cannot answer (see [`Self::serving`]).
    pub fn list_map<K: Stored, T>(
        &self,
        namespace: Option<&str>,
        f: impl Fn(&K) -> T,
    ) -> Option<Result<Vec<T>>> {
        let cache = self.serving(K::KIND, namespace)?;
        let state = cache.read();
        let namespace = namespace
            .filter(|_| K::KIND.namespaced())
            .map(|ns| if ns.is_empty() { DEFAULT_NAMESPACE } else { ns });
        let mut out = Vec::new();
        // Keys sort by namespace first: one namespace's objects are a range.
        let objects: Box<dyn Iterator<Item = (&ObjectKey, &Entry)>> = match namespace {
            Some(ns) => Box::new(
                state
                    .objects
                    .range(ObjectKey::new(ns, "")..)
                    .take_while(move |(key, _)| key.namespace == ns),
            ),
            None => Box::new(state.objects.iter()),
        };
        for (_, entry) in objects {
            match &entry.object {
                Ok(object) => {
                    if let Some(typed) = K::from_object_ref(object) {
                        out.push(f(typed));
                    }
                }
                Err(e) => return Some(Err(e.clone())),
            }
        }
        Some(Ok(out))
    }

    /// Our delete of `key` succeeded and took the object away: the cache no longer holds it.
    /// (An event of an older version the watch delivers after this may show it again until
    /// the watch's own deletion event arrives.)
    pub fn deleted(&self, kind: Kind, key: &ObjectKey) {
        if let Some(cache) = self.kinds.get(&kind) {
            cache.write().objects.remove(key);
        }
    }

    /// The first `Some` that `f` answers for a cached `K`, in key order; `None` too while the
    /// first list has not arrived.
    pub fn find_map<K: Stored, T>(&self, mut f: impl FnMut(&K) -> Option<T>) -> Option<T> {
        let cache = self.serving(K::KIND, self.namespace.as_deref())?;
        let state = cache.read();
        state.objects.values().find_map(|entry| {
            let object = entry.object.as_ref().ok()?;
            f(K::from_object_ref(object)?)
        })
    }

    /// What `f` answers for the cached `K` at `key`, if the cache holds it.
    pub fn with_object<K: Stored, T>(
        &self,
        key: &ObjectKey,
        f: impl FnOnce(&K) -> Option<T>,
    ) -> Option<T> {
        let cache = self.serving(K::KIND, self.namespace.as_deref())?;
        let state = cache.read();
        let object = state.objects.get(key)?.object.as_ref().ok()?;
        f(K::from_object_ref(object)?)
    }

    /// Our write of `object` succeeded: the cache holds it from now on, unless it holds a newer
    /// copy. `created`: the write created it.
    pub fn wrote<K: Stored>(&self, object: &K, created: bool) {
        if let Some(cache) = self.kinds.get(&K::KIND) {
            cache.wrote(object.key(), entry(object.clone()), created);
        }
    }
}

fn decode_event(
    event: watcher::Event<DynamicObject>,
    decode: impl Fn(DynamicObject) -> (ObjectKey, Entry),
) -> watcher::Event<(ObjectKey, Entry)> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(decode(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(decode(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(decode(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

impl Inner {
    /// Decodes and applies `event` of `K`, and wakes the Clusters a live change concerns.
    fn receive<K: Stored>(&self, event: watcher::Event<DynamicObject>) {
        if crate::keys::keyed(K::KIND) {
            let _keyed = self.keyed.lock().unwrap_or_else(PoisonError::into_inner);
            let event = decode_event(event, |o| self.decoded_keyed::<K>(o));
            self.apply(K::KIND, event);
            return;
        }
        let changed = match &event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                Some(crate::kube_store::dynamic_key(K::KIND, o))
            }
            watcher::Event::InitDone => None,
            _ => return self.apply(K::KIND, decode_event(event, decoded::<K>)),
        };
        self.apply(K::KIND, decode_event(event, decoded::<K>));
        if K::KIND == Kind::Secret {
            self.redecode(
                changed.as_ref().map(|k| k.namespace.as_str()),
                changed.as_ref().map(|k| k.name.as_str()),
            );
        }
    }

    /// A watched object of a kind whose keys live in Secrets, as our type with its keys
    /// resolved from the cached Secrets.
    fn decoded_keyed<K: Stored>(&self, object: DynamicObject) -> (ObjectKey, Entry) {
        let key = crate::kube_store::dynamic_key(K::KIND, &object);
        let version = revision(object.metadata.resource_version.as_deref());
        let raw = object.clone();
        let value = crate::kube_store::dynamic_value::<K>(object);
        let names = value
            .as_ref()
            .map(crate::keys::referenced)
            .unwrap_or_default();
        if names.is_empty() {
            let object = value.and_then(|value| {
                serde_json::from_value::<K>(value)
                    .map(K::into_object)
                    .map_err(|e| crate::kube_store::undecodable(K::KIND, &key, &e))
            });
            return (
                key,
                Entry {
                    version,
                    object,
                    raw: None,
                },
            );
        }
        let secrets: BTreeMap<String, Secret> = self
            .kinds
            .get(&Kind::Secret)
            .map(|cache| {
                let state = cache.read();
                names
                    .iter()
                    .filter_map(|name| {
                        let entry = state.objects.get(&ObjectKey::new(&key.namespace, name))?;
                        match entry.object.as_ref().ok()? {
                            Object::Secret(s) => Some((name.clone(), s.clone())),
                            _ => None,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let object = value.and_then(|value| {
            crate::kube_store::resolved::<K>(&key, value, &secrets).map(K::into_object)
        });
        (
            key,
            Entry {
                version,
                object,
                raw: Some(Box::new((raw, names))),
            },
        )
    }

    /// Decodes again the cached objects that reference the Secret `namespace`/`secret` after
    /// it changed (`None`: every one, after a list of the Secrets); wakes the Clusters whose
    /// copy changed.
    fn redecode(&self, namespace: Option<&str>, secret: Option<&str>) {
        let _keyed = self.keyed.lock().unwrap_or_else(PoisonError::into_inner);
        let mut woken = BTreeSet::new();
        for (kind, cache) in &self.kinds {
            if !crate::keys::keyed(*kind) {
                continue;
            }
            let mut state = cache.write();
            let state = &mut *state;
            let relist = state.relist.iter_mut().flat_map(|r| r.iter_mut());
            for (key, entry) in state.objects.iter_mut().chain(relist) {
                if namespace.is_some_and(|ns| ns != key.namespace) {
                    continue;
                }
                let Some((raw, refs)) = entry.raw.as_deref() else {
                    continue;
                };
                if secret.is_some_and(|name| !refs.contains(name)) {
                    continue;
                }
                let (_, fresh) = match kind {
                    Kind::Cluster => self.decoded_keyed::<Cluster>(raw.clone()),
                    Kind::Component => self.decoded_keyed::<Component>(raw.clone()),
                    _ => continue,
                };
                let changed = match (&entry.object, &fresh.object) {
                    (Ok(a), Ok(b)) => a != b,
                    (Err(_), Err(_)) => false,
                    _ => true,
                };
                if changed {
                    match &fresh.object {
                        Ok(Object::Cluster(c)) => {
                            woken.insert(c.key());
                        }
                        Ok(Object::Component(c)) => {
                            woken.insert(crate::controller::cluster_of_component(c));
                        }
                        _ => {}
                    }
                    *entry = fresh;
                }
            }
        }
        drop(_keyed);
        self.wake(woken);
    }

    /// Wakes `clusters`, once a waker is set.
    fn wake(&self, clusters: BTreeSet<ObjectKey>) {
        let waker = self
            .waker
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(waker) = waker {
            for cluster in clusters {
                waker(cluster);
            }
        }
    }

    /// Applies `event` of `kind`, and wakes the Clusters a live change concerns.
    fn apply(&self, kind: Kind, event: watcher::Event<(ObjectKey, Entry)>) {
        let Some(cache) = self.kinds.get(&kind) else {
            return;
        };
        let Some(change) = cache.apply(event) else {
            return;
        };
        self.wake(self.concerned(&change));
    }

    /// The Clusters `change` concerns.
    fn concerned(&self, change: &Change) -> BTreeSet<ObjectKey> {
        let mut clusters = BTreeSet::new();
        for object in [&change.before, &change.now].into_iter().flatten() {
            match object {
                Object::Cluster(c) => {
                    clusters.insert(c.key());
                }
                Object::Component(c) => {
                    clusters.insert(crate::controller::cluster_of_component(c));
                }
                _ => {}
            }
        }
        let hypervisor = |o: &Option<Object>| match o {
            Some(Object::Hypervisor(h)) => Some(crate::controller::hypervisor_fingerprint(h)),
            _ => None,
        };
        let name = match (&change.now, &change.before) {
            (Some(Object::Hypervisor(h)), _) | (None, Some(Object::Hypervisor(h))) => {
                Some(h.metadata.name.as_str())
            }
            _ => None,
        };
        if let Some(name) = name
            && hypervisor(&change.before) != hypervisor(&change.now)
            && let Some(components) = self.kinds.get(&Kind::Component)
        {
            let state = components.read();
            let components = state.objects.values().filter_map(|e| match &e.object {
                Ok(Object::Component(c)) => Some(c),
                _ => None,
            });
            clusters.extend(crate::controller::clusters_using_hypervisor(
                components, name,
            ));
        }
        clusters
    }
}

/// Starts the watch of `K` that feeds `inner`'s cache of it.
fn watch<K: Stored>(inner: &Arc<Inner>, client: &kube::Client) -> tokio::task::JoinHandle<()> {
    let inner = Arc::clone(inner);
    let api = crate::run::dynamic_api(client, K::KIND, inner.namespace.as_deref());
    tokio::spawn(async move {
        let config = match K::KIND {
            // Only the Secrets holding keys: the manager reads no other.
            Kind::Secret => watcher::Config::default().labels(crate::keys::KEYS_OF_KIND),
            _ => watcher::Config::default(),
        };
        let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => inner.receive::<K>(event),
                // The watcher retries with backoff, and lists again where it must.
                Err(e) => tracing::warn!(
                    kind = %K::KIND,
                    error = %crate::run::error_chain(&e),
                    "watch of the cache failed; retrying"
                ),
            }
        }
    })
}

/// A watched object as our type, keyed.
fn decoded<K: Stored>(object: DynamicObject) -> (ObjectKey, Entry) {
    let key = crate::kube_store::dynamic_key(K::KIND, &object);
    let version = revision(object.metadata.resource_version.as_deref());
    let object = crate::kube_store::from_dynamic::<K>(object).map(K::into_object);
    (
        key,
        Entry {
            version,
            object,
            raw: None,
        },
    )
}

fn entry<K: Stored>(object: K) -> Entry {
    Entry {
        version: revision(object.metadata().resource_version.as_deref()),
        object: Ok(object.into_object()),
        raw: None,
    }
}

/// A `resourceVersion` as etcd's revision, when it is a number.
fn revision(resource_version: Option<&str>) -> Option<u64> {
    resource_version.and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests;
