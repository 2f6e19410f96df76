use kube::core::DynamicObject;
use pretty_assertions::assert_eq;
use serde_json::json;

use oi_api::Resource as _;

use super::*;
use crate::kube_store::api_resource;

/// A Component of cluster `c1` as the API server sends it, at `version`.
fn component(namespace: &str, name: &str, version: &str, hypervisor: &str) -> DynamicObject {
    let mut object = DynamicObject::new(name, &api_resource(Kind::Component)).data(json!({
        "spec": {"cluster": "c1", "role": "control-plane", "hypervisor": hypervisor}
    }));
    object.metadata.namespace = Some(namespace.to_string());
    object.metadata.resource_version = Some(version.to_string());
    object
}

fn feed(cache: &WatchCache, event: watcher::Event<DynamicObject>) {
    cache
        .inner
        .apply(Kind::Component, decode_event(event, decoded::<Component>));
}

/// `(namespace/name, hypervisor, resourceVersion)` of every cached Component in `namespace`,
/// or `None` when the cache does not answer.
fn listed(cache: &WatchCache, namespace: Option<&str>) -> Option<Vec<(String, String, String)>> {
    cache
        .list_map::<Component, _>(namespace, |c| {
            (
                c.key().to_string(),
                c.spec.hypervisor.clone().unwrap_or_default(),
                c.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .map(|r| r.unwrap())
}

fn row(key: &str, hypervisor: &str, version: &str) -> (String, String, String) {
    (key.to_string(), hypervisor.to_string(), version.to_string())
}

fn typed(object: DynamicObject) -> Component {
    crate::kube_store::from_dynamic(object).unwrap()
}

fn synced(cache: &WatchCache, objects: Vec<DynamicObject>) {
    feed(cache, watcher::Event::Init);
    for o in objects {
        feed(cache, watcher::Event::InitApply(o));
    }
    feed(cache, watcher::Event::InitDone);
}

fn undecodable(namespace: &str, name: &str, version: &str) -> DynamicObject {
    let mut bad = component(namespace, name, version, "h1");
    bad.data["spec"]["role"] = json!(42);
    bad
}

#[test]
fn answers_only_once_its_first_list_arrived_and_in_the_api_servers_order() {
    let cache = WatchCache::detached(None, &[Kind::Component]);
    assert_eq!(listed(&cache, None), None);
    feed(&cache, watcher::Event::Init);
    feed(
        &cache,
        watcher::Event::InitApply(component("b", "x", "5", "h1")),
    );
    // Half a list is not an answer.
    assert_eq!(listed(&cache, None), None);
    feed(
        &cache,
        watcher::Event::InitApply(component("a", "y", "6", "h2")),
    );
    feed(&cache, watcher::Event::InitDone);
    assert_eq!(
        listed(&cache, None),
        Some(vec![row("a/y", "h2", "6"), row("b/x", "h1", "5")])
    );
    assert_eq!(listed(&cache, Some("b")), Some(vec![row("b/x", "h1", "5")]));
    // A kind it does not cache is not answered.
    assert!(cache.list_map::<Hypervisor, _>(None, |_| ()).is_none());
}

#[test]
fn an_event_never_replaces_a_newer_copy() {
    let cache = WatchCache::detached(None, &[Kind::Component]);
    synced(&cache, vec![component("a", "x", "5", "h1")]);
    // Our write (version 7) lands before the watch brings version 6.
    cache.wrote(&typed(component("a", "x", "7", "h3")), false);
    assert_eq!(listed(&cache, None), Some(vec![row("a/x", "h3", "7")]));
    feed(
        &cache,
        watcher::Event::Apply(component("a", "x", "6", "h2")),
    );
    assert_eq!(listed(&cache, None), Some(vec![row("a/x", "h3", "7")]));
    // A stale write does not either.
    cache.wrote(&typed(component("a", "x", "6", "h2")), false);
    assert_eq!(listed(&cache, None), Some(vec![row("a/x", "h3", "7")]));
    feed(
        &cache,
        watcher::Event::Apply(component("a", "x", "8", "h4")),
    );
    assert_eq!(listed(&cache, None), Some(vec![row("a/x", "h4", "8")]));
    // A deletion older than the copy held leaves it; a newer one removes it.
    feed(
        &cache,
        watcher::Event::Delete(component("a", "x", "7", "h3")),
    );
    assert_eq!(listed(&cache, None), Some(vec![row("a/x", "h4", "8")]));
    feed(
        &cache,
        watcher::Event::Delete(component("a", "x", "9", "h4")),
    );
    assert_eq!(listed(&cache, None), Some(vec![]));
}

#[test]
fn our_creates_are_seen_at_once_and_updates_of_unknown_objects_wait_for_the_watch() {
    let cache = WatchCache::detached(None, &[Kind::Component]);
    synced(&cache, vec![]);
    cache.wrote(&typed(component("a", "new", "3", "h1")), true);
    // An update of an object the cache does not hold: it may have been deleted already.
    cache.wrote(&typed(component("a", "gone", "4", "h1")), false);
    assert_eq!(listed(&cache, None), Some(vec![row("a/new", "h1", "3")]));
    // A version that is not a number cannot be ordered: the watch alone decides.
    cache.wrote(&typed(component("a", "new", "opaque", "h9")), false);
    assert_eq!(listed(&cache, None), Some(vec![row("a/new", "h1", "3")]));
    feed(
        &cache,
        watcher::Event::Apply(component("a", "new", "opaque", "h9")),
    );
    assert_eq!(
        listed(&cache, None),
        Some(vec![row("a/new", "h9", "opaque")])
    );
}

#[test]
fn a_relist_replaces_the_objects_but_keeps_a_newer_write() {
    let cache = WatchCache::detached(None, &[Kind::Component]);
    synced(
        &cache,
        vec![
            component("a", "kept", "2", "h1"),
            component("a", "gone", "2", "h1"),
        ],
    );
    cache.wrote(&typed(component("a", "kept", "9", "h5")), false);
    // The watch restarts: the old objects are served until the new list is complete.
    feed(&cache, watcher::Event::Init);
    feed(
        &cache,
        watcher::Event::InitApply(component("a", "kept", "8", "h4")),
    );
    assert_eq!(
        listed(&cache, None),
        Some(vec![row("a/gone", "h1", "2"), row("a/kept", "h5", "9")])
    );
    feed(
        &cache,
        watcher::Event::InitApply(component("a", "other", "8", "h2")),
    );
    feed(&cache, watcher::Event::InitDone);
    assert_eq!(
        listed(&cache, None),
        Some(vec![row("a/kept", "h5", "9"), row("a/other", "h2", "8")])
    );
}

#[test]
fn a_cache_of_one_namespace_answers_only_for_it() {
    let cache = WatchCache::detached(Some("ops"), &[Kind::Component, Kind::Hypervisor]);
    synced(&cache, vec![component("ops", "x", "1", "h1")]);
    cache.inner.apply(Kind::Hypervisor, watcher::Event::Init);
    cache
        .inner
        .apply(Kind::Hypervisor, watcher::Event::InitDone);
    assert_eq!(
        listed(&cache, Some("ops")),
        Some(vec![row("ops/x", "h1", "1")])
    );
    // Every namespace, or another one (the empty one is `default`): a LIST.
    assert_eq!(listed(&cache, None), None);
    assert_eq!(listed(&cache, Some("")), None);
    assert_eq!(listed(&cache, Some("tenants")), None);
    // Cluster-scoped kinds are answered whatever the namespace asked.
    assert_eq!(
        cache
            .list_map::<Hypervisor, _>(None, |h| h.metadata.name.clone())
            .map(Result::unwrap),
        Some(vec![])
    );
}

#[test]
fn an_object_that_does_not_decode_fails_the_list_as_a_list_would() {
    let cache = WatchCache::detached(None, &[Kind::Component]);
    synced(
        &cache,
        vec![
            component("a", "good", "2", "h1"),
            undecodable("a", "bad", "3"),
        ],
    );
    let error = cache
        .list_map::<Component, _>(None, |_| ())
        .unwrap()
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("Component a/bad from the API server does not decode"),
        "{error}"
    );
    // A list of another namespace is not in its way.
    synced(
        &cache,
        vec![
            component("a", "fine", "3", "h1"),
            undecodable("b", "bad", "4"),
        ],
    );
    assert_eq!(
        listed(&cache, Some("a")),
        Some(vec![row("a/fine", "h1", "3")])
    );
    // Once fixed, it decodes.
    feed(
        &cache,
        watcher::Event::Apply(component("b", "bad", "5", "h2")),
    );
    assert_eq!(
        listed(&cache, Some("b")),
        Some(vec![row("b/bad", "h2", "5")])
    );
}

#[test]
fn finds_and_reads_one_object_and_forgets_what_we_deleted() {
    let cache = WatchCache::detached(None, &[Kind::Component]);
    assert_eq!(cache.find_map::<Component, _>(|_| Some(())), None);
    synced(
        &cache,
        vec![
            component("a", "x", "2", "h1"),
            component("a", "y", "3", "h2"),
        ],
    );
    assert_eq!(
        cache.find_map::<Component, _>(
            |c| (c.spec.hypervisor.as_deref() == Some("h2")).then(|| c.key().to_string())
        ),
        Some("a/y".to_string())
    );
    assert_eq!(
        cache.with_object::<Component, _>(&ObjectKey::new("a", "x"), |c| c.spec.hypervisor.clone()),
        Some("h1".to_string())
    );
    assert_eq!(
        cache.with_object::<Component, _>(&ObjectKey::new("a", "z"), |_| Some(())),
        None
    );
    cache.deleted(Kind::Component, &ObjectKey::new("a", "x"));
    assert_eq!(listed(&cache, None), Some(vec![row("a/y", "h2", "3")]));
}

/// A Hypervisor as the API server sends it: `low` its port range's low end (spec),
/// `claims` how many ports it lists as allocated (status).
fn hypervisor(name: &str, version: &str, low: u16, claims: usize) -> DynamicObject {
    let allocated: Vec<_> = (0..claims)
        .map(|i| json!({"cluster": "c1", "component": format!("x{i}"), "port": 30000 + i}))
        .collect();
    let mut object = DynamicObject::new(name, &api_resource(Kind::Hypervisor)).data(json!({
        "spec": {"localCRIEndpoint": {"criEndpointPath": "/run/h.sock"}, "public": false,
                 "ipAddress": "10.0.0.1", "portRange": {"low": low, "high": 40000}},
        "status": {"allocatedPorts": allocated}
    }));
    object.metadata.resource_version = Some(version.to_string());
    object
}

#[test]
fn live_changes_wake_the_clusters_they_concern_once_the_cache_holds_them() {
    let cache = WatchCache::detached(None, &[Kind::Component, Kind::Hypervisor]);
    let woken = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&woken);
    cache.wake_clusters_with(Arc::new(move |key: ObjectKey| {
        sink.lock().unwrap().push(key.to_string());
    }));
    let take = || std::mem::take(&mut *woken.lock().unwrap());
    let hypervisors = |event| {
        cache
            .inner
            .apply(Kind::Hypervisor, decode_event(event, decoded::<Hypervisor>));
    };
    // Lists wake nobody: the controllers' own first lists reconcile everything.
    synced(&cache, vec![component("a", "x", "2", "h1")]);
    hypervisors(watcher::Event::Init);
    hypervisors(watcher::Event::InitApply(hypervisor("h1", "3", 20000, 1)));
    hypervisors(watcher::Event::InitDone);
    assert_eq!(take(), Vec::<String>::new());

    // A Component's change wakes its cluster; the event of our own write does not.
    feed(
        &cache,
        watcher::Event::Apply(component("a", "x", "4", "h1")),
    );
    assert_eq!(take(), ["a/c1"]);
    cache.wrote(&typed(component("a", "x", "5", "h1")), false);
    feed(
        &cache,
        watcher::Event::Apply(component("a", "x", "5", "h1")),
    );
    assert_eq!(take(), Vec::<String>::new());
    // A stale event neither.
    feed(
        &cache,
        watcher::Event::Apply(component("a", "x", "4", "h1")),
    );
    assert_eq!(take(), Vec::<String>::new());

    // A Hypervisor's status writes wake nobody; a change of its spec wakes the clusters on it.
    hypervisors(watcher::Event::Apply(hypervisor("h1", "6", 20000, 2)));
    assert_eq!(take(), Vec::<String>::new());
    hypervisors(watcher::Event::Apply(hypervisor("h1", "7", 21000, 2)));
    assert_eq!(take(), ["a/c1"]);
    hypervisors(watcher::Event::Apply(hypervisor("h2", "8", 21000, 0)));
    assert_eq!(take(), Vec::<String>::new());
    // Its deletion too.
    hypervisors(watcher::Event::Delete(hypervisor("h1", "9", 21000, 2)));
    assert_eq!(take(), ["a/c1"]);
    // A Component's deletion wakes its cluster.
    feed(
        &cache,
        watcher::Event::Delete(component("a", "x", "10", "h1")),
    );
    assert_eq!(take(), ["a/c1"]);
}
