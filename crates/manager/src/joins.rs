//! Join requests answered as they come: a watch per ready cluster, through its own API, on
//! its NodeJoinRequests and Nodes, that wakes the cluster's reconcile (which answers them,
//! [`oi_engine`]'s in-cluster step) instead of leaving a worker waiting for the next
//! requeue of a ready cluster (minutes away).
//!
//! ```text
//! Cluster reconcile, ready ─► JoinWatches::ensure(cluster, endpoint + identity)
//!   watch NodeJoinRequests: one without an answer (added, or found on a (re)start),
//!                           one deleted (its VPN peer goes)           ─► wake the cluster
//!   watch Nodes:            a name not seen before (mark it registered),
//!                           one deleted (its request and peer go)     ─► wake the cluster
//! Cluster deleted ─► JoinWatches::stop
//! ```
//!
//! The identity is the plan's short-lived `system:masters` client certificate (one hour);
//! a reconcile of the ready cluster hands a fresh one at least every `requeue_ready`, and
//! the watch takes it when the one it uses is 20 minutes old. Watches relist and back off
//! as kube-runtime's watcher does; an unreachable cluster costs one retrying task.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use oi_api::ObjectKey;

/// How old an identity may get before a newer one replaces it.
const REFRESH_AFTER: Duration = Duration::from_secs(20 * 60);

/// Where a cluster's API is and who the watch is there. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub endpoint: String,
    pub ca_pem: String,
    pub certificate_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// What wakes a cluster's reconcile.
pub type Waker = Arc<dyn Fn(ObjectKey) + Send + Sync>;

struct Running {
    credentials: tokio::sync::watch::Sender<Credentials>,
    since: Instant,
    task: tokio::task::JoinHandle<()>,
}

/// The running watches, by cluster.
#[derive(Default)]
pub struct JoinWatches {
    running: Mutex<HashMap<ObjectKey, Running>>,
}

impl fmt::Debug for JoinWatches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinWatches")
            .field("clusters", &self.clusters())
            .finish()
    }
}

impl JoinWatches {
    /// Starts `cluster`'s watch, or hands it `credentials` when it has another endpoint or
    /// CA, or its identity is getting old. Needs a tokio runtime.
    pub fn ensure(&self, cluster: &ObjectKey, credentials: Credentials, wake: Waker) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = running.get_mut(cluster)
            && !r.task.is_finished()
        {
            let same_place = {
                let current = r.credentials.borrow();
                current.endpoint == credentials.endpoint && current.ca_pem == credentials.ca_pem
            };
            if !same_place || r.since.elapsed() >= REFRESH_AFTER {
                r.credentials.send_replace(credentials);
                r.since = Instant::now();
            }
            return;
        }
        let (tx, rx) = tokio::sync::watch::channel(credentials);
        let key = cluster.clone();
        let task = tokio::spawn(async move { watch(key, rx, wake).await });
        running.insert(
            cluster.clone(),
            Running {
                credentials: tx,
                since: Instant::now(),
                task,
            },
        );
    }

    /// Stops `cluster`'s watch (the cluster is gone, or not ready to be watched).
    pub fn stop(&self, cluster: &ObjectKey) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = running.remove(cluster) {
            r.task.abort();
        }
    }

    /// The clusters watched, sorted.
    pub fn clusters(&self) -> Vec<ObjectKey> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let mut keys: Vec<ObjectKey> = running.keys().cloned().collect();
        keys.sort();
        keys
    }
}

impl Drop for JoinWatches {
    fn drop(&mut self) {
        let running = self
            .running
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for r in running.values() {
            r.task.abort();
        }
    }
}

/// What a watch has seen: whether an event is worth a reconcile of its cluster.
#[derive(Debug, Default)]
pub struct Seen {
    nodes: BTreeSet<String>,
    listing: Option<BTreeSet<String>>,
}

fn name(o: &DynamicObject) -> String {
    o.metadata.name.clone().unwrap_or_default()
}

/// Whether a NodeJoinRequest has its answer (an `Issued` condition, either way).
fn answered(o: &DynamicObject) -> bool {
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == oi_planner::join::ISSUED)
}

impl Seen {
    /// A NodeJoinRequest event: one to answer, or one gone.
    pub fn request(event: &Event<DynamicObject>) -> bool {
        match event {
            Event::Apply(o) | Event::InitApply(o) => !answered(o),
            Event::Delete(_) => true,
            Event::Init | Event::InitDone => false,
        }
    }

    /// A Node event: a name not seen before, or one gone. A relist that finds the same
    /// names wakes nothing; one that finds others (a change missed while not watching)
    /// wakes once.
    pub fn node(&mut self, event: &Event<DynamicObject>) -> bool {
        match event {
            Event::Apply(o) => self.nodes.insert(name(o)),
            Event::Delete(o) => {
                self.nodes.remove(&name(o));
                true
            }
            Event::Init => {
                self.listing = Some(BTreeSet::new());
                false
            }
            Event::InitApply(o) => {
                self.listing.get_or_insert_default().insert(name(o));
                false
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let changed = listed != self.nodes;
                self.nodes = listed;
                changed
            }
        }
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// A client of a cluster's API with `credentials`.
async fn client(cluster: &ObjectKey, credentials: &Credentials) -> Result<kube::Client, String> {
    let kubeconfig = oi_pki::kubeconfig(
        &cluster.name,
        &credentials.endpoint,
        &credentials.ca_pem,
        "oneinfra-manager",
        &credentials.certificate_pem,
        &credentials.key_pem,
    )
    .map_err(|e| e.to_string())?;
    let parsed = kube::config::Kubeconfig::from_yaml(&kubeconfig).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// One cluster's watch, until aborted: rebuilt whenever its credentials change.
async fn watch(
    cluster: ObjectKey,
    mut credentials: tokio::sync::watch::Receiver<Credentials>,
    wake: Waker,
) {
    let mut seen = Seen::default();
    loop {
        let current = credentials.borrow_and_update().clone();
        let client = match client(&cluster, &current).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(cluster = %cluster, "join watch: {e}");
                // Until it gets other credentials.
                if credentials.changed().await.is_err() {
                    return;
                }
                continue;
            }
        };
        let requests: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource(
                "node.oneinfra.ereslibre.es",
                "v1alpha1",
                "NodeJoinRequest",
                "nodejoinrequests",
            ),
        );
        let nodes: Api<DynamicObject> = Api::all_with(client, &resource("", "v1", "Node", "nodes"));
        let config = watcher::Config::default();
        let mut requests = watcher::watcher(requests, config.clone())
            .default_backoff()
            .boxed();
        let mut nodes = watcher::watcher(nodes, config).default_backoff().boxed();
        tracing::debug!(cluster = %cluster, endpoint = current.endpoint, "join watch started");
        loop {
            let wakes = tokio::select! {
                changed = credentials.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                Some(event) = requests.next() => match event {
                    Ok(event) => Seen::request(&event),
                    Err(e) => {
                        tracing::debug!(cluster = %cluster, "join watch (requests): {e}");
                        false
                    }
                },
                Some(event) = nodes.next() => match event {
                    Ok(event) => seen.node(&event),
                    Err(e) => {
                        tracing::debug!(cluster = %cluster, "join watch (nodes): {e}");
                        false
                    }
                },
            };
            if wakes {
                wake(cluster.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, status: serde_json::Value) -> DynamicObject {
        let mut o = DynamicObject::new(
            name,
            &resource(
                "node.oneinfra.ereslibre.es",
                "v1alpha1",
                "NodeJoinRequest",
                "nodejoinrequests",
            ),
        );
        o.data = serde_json::json!({ "status": status });
        o
    }

    #[test]
    fn requests_wake_their_cluster_when_they_wait_for_an_answer_or_leave() {
        let pending = object("w1", serde_json::json!({}));
        let issued = object(
            "w1",
            serde_json::json!({"conditions": [{"type": "Issued", "status": "True"}]}),
        );
        assert!(Seen::request(&Event::Apply(pending.clone())));
        assert!(Seen::request(&Event::InitApply(pending)));
        assert!(!Seen::request(&Event::Apply(issued.clone())));
        assert!(Seen::request(&Event::Delete(issued)));
        assert!(!Seen::request(&Event::Init));
        assert!(!Seen::request(&Event::InitDone));
    }

    #[test]
    fn nodes_wake_their_cluster_when_one_arrives_or_leaves_not_on_heartbeats() {
        let mut seen = Seen::default();
        let node = |n: &str| object(n, serde_json::json!({}));
        // The first listing: a change from nothing.
        assert!(!seen.node(&Event::Init));
        assert!(!seen.node(&Event::InitApply(node("w1"))));
        assert!(seen.node(&Event::InitDone));
        // Status updates of a known Node: nothing.
        assert!(!seen.node(&Event::Apply(node("w1"))));
        assert!(seen.node(&Event::Apply(node("w2"))));
        assert!(!seen.node(&Event::Apply(node("w2"))));
        assert!(seen.node(&Event::Delete(node("w1"))));
        // A relist finding the same names: nothing; other names: once.
        assert!(!seen.node(&Event::Init));
        assert!(!seen.node(&Event::InitApply(node("w2"))));
        assert!(!seen.node(&Event::InitDone));
        assert!(!seen.node(&Event::Init));
        assert!(seen.node(&Event::InitDone));
    }
}
