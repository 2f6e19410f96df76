//! The three controllers wired to kube-runtime: what each watches, how watch events map to
//! keys (a Component or a Hypervisor to the Clusters it concerns), one reconcile per cluster
//! at a time, and the reconcile functions' results turned into kube-runtime actions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::controller::{self as kube_controller, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use oi_api::{Component, DEFAULT_NAMESPACE, Kind, ObjectKey};
use tokio::sync::Semaphore;

use crate::controller::{self, Action, ControllerKind, ReconcileError};
use crate::kube_store::api_resource;
use crate::run::{KubeContext, dynamic_api, error_chain};

/// How long changes are gathered before a key reconciles: a status write and the watch
/// event it causes do not each cost a reconcile.
pub const DEBOUNCE: Duration = Duration::from_millis(500);

/// What every reconcile shares.
pub struct Shared {
    pub ctx: KubeContext,
    pub(crate) groups: Groups,
    pub(crate) permits: Semaphore,
}

/// One async lock per cluster: a Cluster and its Components reconcile one at a time.
#[derive(Default)]
pub(crate) struct Groups(Mutex<HashMap<ObjectKey, Arc<tokio::sync::Mutex<()>>>>);

impl Groups {
    async fn lock(&self, group: &ObjectKey) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(map.entry(group.clone()).or_default())
        };
        lock.lock_owned().await
    }

    /// Forgets `group`'s lock when nobody holds or waits for it.
    fn release(&self, group: &ObjectKey, guard: tokio::sync::OwnedMutexGuard<()>) {
        drop(guard);
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(group).is_some_and(|l| Arc::strong_count(l) == 1) {
            map.remove(group);
        }
    }
}

/// The key of a watched object.
pub fn object_key(object: &DynamicObject) -> ObjectKey {
    ObjectKey::new(
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// The cluster a reconcile belongs to, for mutual exclusion: a Cluster's own key, a
/// Component's `spec.cluster` in its namespace; `None` for Hypervisors.
pub fn cluster_group(kind: ControllerKind, object: &DynamicObject) -> Option<ObjectKey> {
    let key = object_key(object);
    match kind {
        ControllerKind::Cluster => Some(key),
        ControllerKind::Component => {
            let namespace = if key.namespace.is_empty() {
                DEFAULT_NAMESPACE.to_string()
            } else {
                key.namespace.clone()
            };
            match object.data["spec"]["cluster"].as_str() {
                Some(cluster) if !cluster.is_empty() => Some(ObjectKey::new(namespace, cluster)),
                _ => Some(key),
            }
        }
        ControllerKind::Hypervisor | ControllerKind::SipCluster => None,
    }
}

/// kube-runtime's action for ours.
pub fn kube_action(action: Action) -> kube_controller::Action {
    match action {
        Action::Requeue(after) => kube_controller::Action::requeue(after),
        Action::AwaitChange => kube_controller::Action::await_change(),
    }
}

/// The Components among watched objects (those that do not convert are left out).
fn components(objects: &[Arc<DynamicObject>]) -> Vec<Component> {
    objects
        .iter()
        .filter_map(|o| {
            let value = serde_json::to_value(&**o).ok()?;
            serde_json::from_value(value).ok()
        })
        .collect()
}

/// The Hypervisors whose change concerns the clusters placed on them: a new one, one gone,
/// or one whose [`controller::hypervisor_fingerprint`] changed. Status writes (every
/// cluster's reconcile writes its ports and files there) pass by.
fn hypervisor_changes(
    api: kube::Api<DynamicObject>,
) -> impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send {
    let mut filter = HypervisorChanges::default();
    watcher::watcher(api, watcher::Config::default())
        .filter_map(move |event| std::future::ready(filter.pass(event)))
}

/// The fingerprint of every Hypervisor seen; see [`hypervisor_changes`].
#[derive(Debug, Default)]
pub struct HypervisorChanges {
    seen: HashMap<String, u64>,
}

impl HypervisorChanges {
    /// The hypervisor to map to clusters, if `event` is one that concerns them.
    pub fn pass(
        &mut self,
        event: Result<watcher::Event<DynamicObject>, watcher::Error>,
    ) -> Option<Result<DynamicObject, watcher::Error>> {
        match event {
            Ok(watcher::Event::Apply(h) | watcher::Event::InitApply(h)) => {
                let name = h.metadata.name.clone().unwrap_or_default();
                let print = serde_json::to_value(&h)
                    .ok()
                    .and_then(|v| serde_json::from_value::<oi_api::Hypervisor>(v).ok())
                    .map(|typed| controller::hypervisor_fingerprint(&typed));
                match print {
                    Some(print) if self.seen.insert(name, print) == Some(print) => None,
                    // One that does not convert passes: the mapper decides.
                    _ => Some(Ok(h)),
                }
            }
            Ok(watcher::Event::Delete(h)) => {
                self.seen
                    .remove(&h.metadata.name.clone().unwrap_or_default());
                Some(Ok(h))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// The Clusters to reconcile when Hypervisor `hypervisor` changes.
pub fn clusters_on_hypervisor(
    components_on_record: &[Arc<DynamicObject>],
    hypervisor: &str,
    cluster_resource: &ApiResource,
) -> Vec<ObjectRef<DynamicObject>> {
    controller::clusters_using_hypervisor(&components(components_on_record), hypervisor)
        .into_iter()
        .map(|key| ObjectRef::new_with(&key.name, cluster_resource.clone()).within(&key.namespace))
        .collect()
}

async fn reconcile(
    kind: ControllerKind,
    object: Arc<DynamicObject>,
    shared: Arc<Shared>,
) -> Result<kube_controller::Action, ReconcileError> {
    let key = object_key(&object);
    let group = cluster_group(kind, &object);
    let guard = match &group {
        Some(group) => Some(shared.groups.lock(group).await),
        None => None,
    };
    // Never closed: `acquire` cannot fail.
    let permit = shared.permits.acquire().await.ok();
    let start = Instant::now();
    // On a task of its own: kube-runtime polls every reconcile of a controller from one
    // task, so without this they would all share one thread.
    let task = Spawned(tokio::spawn({
        let shared = Arc::clone(&shared);
        let key = key.clone();
        async move { controller::reconcile(kind, &key, &shared.ctx).await }
    }));
    let result = task.finish().await;
    let ctx = &shared.ctx;
    let elapsed = start.elapsed();
    drop(permit);
    if let (Some(group), Some(guard)) = (&group, guard) {
        shared.groups.release(group, guard);
    }
    ctx.metrics.observe_reconcile(
        kind.as_str(),
        elapsed,
        result.as_ref().err().map(ReconcileError::reason),
    );
    match &result {
        Ok(action) => {
            tracing::debug!(controller = kind.as_str(), %key, ?action, ?elapsed, "reconciled")
        }
        Err(e) => tracing::warn!(
            controller = kind.as_str(),
            %key,
            reason = e.reason(),
            error = %e,
            "reconcile failed"
        ),
    }
    result.map(kube_action)
}

/// A spawned reconcile, aborted if its caller goes away before it ends.
struct Spawned<T>(tokio::task::JoinHandle<T>);

impl Spawned<Result<Action, ReconcileError>> {
    /// Its result; a panic in it goes on in the caller, as it would have unspawned.
    async fn finish(mut self) -> Result<Action, ReconcileError> {
        match (&mut self.0).await {
            Ok(result) => result,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Cancelled: the runtime is shutting down.
                Err(e) => Err(ReconcileError::Store(
                    crate::store::StoreError::Unavailable(format!(
                        "the reconcile was cancelled: {e}"
                    )),
                )),
            },
        }
    }
}

impl<T> Drop for Spawned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn error_policy(
    kind: ControllerKind,
    object: Arc<DynamicObject>,
    _error: &ReconcileError,
    shared: Arc<Shared>,
) -> kube_controller::Action {
    kube_controller::Action::requeue(shared.ctx.error_backoff(kind, &object_key(&object)))
}

/// The controllers, built (watches set up) and not yet running.
pub(crate) struct Controllers {
    cluster: Controller<DynamicObject>,
    component: Controller<DynamicObject>,
    hypervisor: Controller<DynamicObject>,
    /// Only where the API server serves SIPClusters and metal3's BareMetalHosts.
    sip_cluster: Option<Controller<DynamicObject>>,
}

impl Controllers {
    /// `wakeups`: the Clusters the Hypervisor controller wants reconciled now
    /// ([`Context::cluster_wakeups`]).
    /// `sip`: whether to run the SIPCluster controller (the API server serves SIPClusters
    /// and BareMetalHosts).
    pub(crate) fn new(
        client: &kube::Client,
        namespace: Option<&str>,
        wakeups: tokio::sync::mpsc::UnboundedReceiver<ObjectKey>,
        sip: bool,
    ) -> Self {
        let config = kube_controller::Config::default().debounce(DEBOUNCE);
        let cluster_resource = api_resource(Kind::Cluster);
        let component_resource = api_resource(Kind::Component);
        let hypervisor_resource = api_resource(Kind::Hypervisor);
        let component = Controller::new_with(
            dynamic_api(client, Kind::Component, namespace),
            watcher::Config::default(),
            component_resource.clone(),
        )
        .with_config(config.clone());
        let hypervisor = Controller::new_with(
            dynamic_api(client, Kind::Hypervisor, namespace),
            watcher::Config::default(),
            hypervisor_resource.clone(),
        )
        .with_config(config.clone());
        // The Component controller's cache of Components maps a Hypervisor to the Clusters
        // placed on it, as the in-process driver does.
        let known_components = component.store();
        let mapper_resource = cluster_resource.clone();
        let woken_resource = cluster_resource.clone();
        let woken = futures::stream::unfold(wakeups, |mut rx| async move {
            rx.recv().await.map(|key| (key, rx))
        })
        .map(move |key| {
            ObjectRef::new_with(&key.name, woken_resource.clone()).within(&key.namespace)
        });
        let cluster = Controller::new_with(
            dynamic_api(client, Kind::Cluster, namespace),
            watcher::Config::default(),
            cluster_resource,
        )
        .owns_with(
            dynamic_api(client, Kind::Component, namespace),
            component_resource,
            watcher::Config::default(),
        )
        .watches_stream_with(
            hypervisor_changes(dynamic_api(client, Kind::Hypervisor, namespace)),
            move |h: DynamicObject| {
                let name = h.metadata.name.clone().unwrap_or_default();
                clusters_on_hypervisor(&known_components.state(), &name, &mapper_resource)
            },
            hypervisor_resource,
        )
        .reconcile_on(woken)
        .with_config(config.clone());
        let sip_cluster = sip.then(|| {
            let sip_resource = api_resource(Kind::SipCluster);
            let controller = Controller::new_with(
                dynamic_api(client, Kind::SipCluster, namespace),
                watcher::Config::default(),
                sip_resource.clone(),
            );
            // A host that changes concerns every SIPCluster: the one holding it, and any that
            // could not get enough hosts.
            let known = controller.store();
            controller
                .watches_with(
                    dynamic_api(client, Kind::BareMetalHost, namespace),
                    api_resource(Kind::BareMetalHost),
                    watcher::Config::default(),
                    move |_host: DynamicObject| {
                        known
                            .state()
                            .iter()
                            .map(|s| {
                                let key = object_key(s);
                                ObjectRef::new_with(&key.name, sip_resource.clone())
                                    .within(&key.namespace)
                            })
                            .collect::<Vec<_>>()
                    },
                )
                .with_config(config)
        });
        Controllers {
            cluster,
            component,
            hypervisor,
            sip_cluster,
        }
    }

    /// The controllers' caches, whose first lists readiness waits for.
    pub(crate) fn syncing(&self) -> Vec<(Kind, kube::runtime::reflector::Store<DynamicObject>)> {
        let mut out = vec![
            (Kind::Cluster, self.cluster.store()),
            (Kind::Component, self.component.store()),
            (Kind::Hypervisor, self.hypervisor.store()),
        ];
        if let Some(sip) = &self.sip_cluster {
            out.push((Kind::SipCluster, sip.store()));
        }
        out
    }

    /// Runs them until `graceful` resolves and their reconciles finished.
    pub(crate) async fn run(
        self,
        shared: Arc<Shared>,
        graceful: futures::future::Shared<impl Future<Output = ()> + Send + 'static>,
    ) {
        let drive = |controller: Controller<DynamicObject>, kind: ControllerKind| {
            controller
                .graceful_shutdown_on(graceful.clone())
                .run(
                    move |object, shared| reconcile(kind, object, shared),
                    move |object, error, shared| error_policy(kind, object, error, shared),
                    Arc::clone(&shared),
                )
                .for_each(move |result| async move {
                    match result {
                        Ok(_) => {}
                        // Logged with its key by `reconcile`.
                        Err(kube_controller::Error::ReconcilerFailed(..)) => {}
                        Err(e) => tracing::warn!(
                            controller = kind.as_str(),
                            error = %error_chain(&e),
                            "controller error"
                        ),
                    }
                })
        };
        let sip = async {
            if let Some(sip) = self.sip_cluster {
                drive(sip, ControllerKind::SipCluster).await;
            }
        };
        futures::join!(
            drive(self.cluster, ControllerKind::Cluster),
            drive(self.component, ControllerKind::Component),
            drive(self.hypervisor, ControllerKind::Hypervisor),
            sip,
        );
    }
}

#[cfg(test)]
mod tests;
