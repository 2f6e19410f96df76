//! Orphans: pods of clusters (or components) the world does not hold, left on its
//! hypervisors (a cluster whose documents were cut from the manifests, a component removed by
//! hand). A run names them and leaves them running (a world may hold a subset of the
//! clusters); `oi reconcile --prune` removes them with their directories, and the world
//! forgets their ports and files ([`oi_planner::forget_orphans`]).

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use oi_api::runtime::{labels, paths};
use oi_api::{ObjectKey, World};
use oi_cri::{HypervisorRuntime, PodStatus};

use crate::connect::{Connector, connect_all};
use crate::progress::Event;

/// A pod of a cluster or component the world does not hold.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Orphan {
    pub hypervisor: String,
    /// The cluster its labels name.
    pub cluster: ObjectKey,
    /// The component its labels name, when its cluster is in the world (only the component
    /// is not).
    pub component: Option<String>,
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The runtime's sandbox id.
    pub id: String,
}

impl Orphan {
    /// `cluster default/c9` or `component default/c1-control-plane-4`.
    pub fn owner(&self) -> String {
        match &self.component {
            Some(c) => format!("component {}/{c}", self.cluster.namespace),
            None => format!("cluster {}", self.cluster),
        }
    }
}

/// What a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Orphans {
    pub pods: Vec<Orphan>,
    /// Hypervisors that could not be asked, with why.
    pub unreachable: BTreeMap<String, String>,
}

impl Orphans {
    /// One line naming them all (`N pods of clusters or components the manifests do not
    /// hold: …`), or `None` when there are none.
    pub fn line(&self) -> Option<String> {
        if self.pods.is_empty() {
            return None;
        }
        let mut by_owner: BTreeMap<(String, &str), Vec<&str>> = BTreeMap::new();
        for o in &self.pods {
            by_owner
                .entry((o.owner(), o.hypervisor.as_str()))
                .or_default()
                .push(o.pod.as_str());
        }
        let named: Vec<String> = by_owner
            .into_iter()
            .map(|((owner, h), pods)| format!("{owner} on {h}: {}", pods.join(", ")))
            .collect();
        Some(format!(
            "{} pods of clusters or components the manifests do not hold ({})",
            self.pods.len(),
            named.join("; ")
        ))
    }
}

/// The hypervisors a scan asks: those any component names, and those whose status holds
/// ports or files (where a cut cluster left its pods).
pub fn scanned_hypervisors(world: &World) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = world
        .components
        .values()
        .filter_map(|c| c.spec.hypervisor.clone())
        .collect();
    out.extend(
        world
            .hypervisors
            .values()
            .filter(|h| !h.status.allocated_ports.is_empty() || !h.status.files.is_empty())
            .map(|h| h.metadata.name.clone()),
    );
    out.retain(|h| {
        world
            .hypervisors
            .contains_key(&ObjectKey::cluster_scoped(h.clone()))
    });
    out
}

/// The orphans among the pods `pods` of hypervisor `hypervisor`: managed pods whose cluster
/// the world does not hold, or whose component it does not hold.
pub fn orphan_pods(world: &World, hypervisor: &str, pods: &[PodStatus]) -> Vec<Orphan> {
    pods.iter()
        .filter(|p| p.labels.get(labels::MANAGED).map(String::as_str) == Some("true"))
        .filter_map(|p| {
            let cluster = ObjectKey::new(
                p.labels.get(labels::CLUSTER_NAMESPACE)?.clone(),
                p.labels.get(labels::CLUSTER)?.clone(),
            );
            let component = if world.clusters.contains_key(&cluster) {
                let name = p.labels.get(labels::COMPONENT)?;
                let known = world
                    .components
                    .contains_key(&ObjectKey::new(cluster.namespace.clone(), name.clone()));
                if known {
                    return None;
                }
                Some(name.clone())
            } else {
                None
            };
            Some(Orphan {
                hypervisor: hypervisor.to_string(),
                cluster,
                component,
                pod: format!("{}/{}", p.namespace, p.name),
                id: p.id.clone(),
            })
        })
        .collect()
}

/// Lists the managed pods of every hypervisor [`scanned_hypervisors`] names (read-only
/// calls) and finds the orphans among them.
pub async fn find_orphans<C: Connector>(world: &World, connector: &C) -> Orphans {
    let names = scanned_hypervisors(world);
    let runtimes = connect_all(world, &names, connector).await;
    let managed = BTreeMap::from([(labels::MANAGED.to_string(), "true".to_string())]);
    let listed = join_all(runtimes.iter().map(|(h, rt)| {
        let managed = &managed;
        async move {
            let pods = match rt {
                Ok(rt) => rt.list_pods(managed).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            (h.clone(), pods)
        }
    }))
    .await;
    let mut out = Orphans::default();
    for (h, pods) in listed {
        match pods {
            Ok(pods) => out.pods.extend(orphan_pods(world, &h, &pods)),
            Err(e) => {
                out.unreachable.insert(h, e);
            }
        }
    }
    out.pods.sort();
    out
}

/// Removes `orphans`' pods and their directories on their hypervisors: a cluster's whole
/// directories, or a component's. Returns what failed, by hypervisor.
pub async fn prune_orphans<C: Connector>(
    world: &World,
    orphans: &[Orphan],
    connector: &C,
    progress: &(dyn Fn(&Event) + Sync),
) -> BTreeMap<String, String> {
    let names: BTreeSet<String> = orphans.iter().map(|o| o.hypervisor.clone()).collect();
    let runtimes = connect_all(world, &names, connector).await;
    let mut failed = BTreeMap::new();
    for (h, rt) in &runtimes {
        let rt = match rt {
            Ok(rt) => rt,
            Err(e) => {
                failed.insert(h.clone(), e.to_string());
                continue;
            }
        };
        let here: Vec<&Orphan> = orphans.iter().filter(|o| &o.hypervisor == h).collect();
        if let Err(e) = prune_on(rt.as_ref(), &here, progress).await {
            failed.insert(h.clone(), e.to_string());
        }
    }
    failed
}

async fn prune_on<R: HypervisorRuntime>(
    rt: &R,
    orphans: &[&Orphan],
    progress: &(dyn Fn(&Event) + Sync),
) -> Result<(), oi_cri::Error> {
    let mut directories = BTreeSet::new();
    for o in orphans {
        rt.remove_pod(&o.id).await?;
        progress(&Event {
            hypervisor: Some(o.hypervisor.clone()),
            cluster: o.cluster.clone(),
            component: o.component.clone(),
            message: format!("removed orphan pod {} (--prune)", o.pod),
            ended: None,
        });
        let (ns, name) = (&o.cluster.namespace, &o.cluster.name);
        match &o.component {
            Some(c) => {
                directories.insert(paths::component_config_dir(ns, name, c));
                directories.insert(paths::component_data_dir(ns, name, c));
            }
            None => {
                directories.insert(paths::cluster_config_dir(ns, name));
                directories.insert(paths::cluster_data_dir(ns, name));
            }
        }
    }
    let directories: Vec<String> = directories.into_iter().collect();
    rt.remove_host_paths(&directories).await
}
