//! `--dry-run`: the plan compared with what each hypervisor lists (read-only calls only):
//! the clusters' pods ([`dry_run`]) and the SIPClusters' support services
//! ([`dry_run_services`]).

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use oi_api::ObjectKey;
use oi_api::runtime::labels;
use oi_cri::{HypervisorRuntime, PodDecision, PodStatus, pod_decision};
use oi_planner::sip::services::SipServices;
use oi_planner::{ClusterPlan, ComponentPlan, Plan};

use crate::connect::{Connector, connect_all};

/// What would happen on one hypervisor. Pods as `namespace/name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HypervisorPlan {
    pub create: Vec<String>,
    pub replace: Vec<String>,
    /// Pods that run as planned and read no changed file: kept as they are.
    pub keep: Vec<String>,
    pub remove: Vec<String>,
    /// Pods of clusters or components the manifests do not hold: left running (removed,
    /// and listed under `remove`, with `--prune`).
    pub orphans: Vec<String>,
    /// Host paths whose content would be written.
    pub files: Vec<String>,
    /// Files that would be removed: recorded as placed, no longer planned.
    pub remove_files: Vec<String>,
    /// Directories that would be removed (a deleted cluster's, a retired component's, a
    /// support service's that left).
    pub remove_directories: Vec<String>,
    /// Set when the hypervisor could not be asked.
    pub unreachable: Option<String>,
}

/// The plan of a run, per hypervisor, and the clusters (and SIPClusters' services) that
/// could not be planned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DryRun {
    pub hypervisors: BTreeMap<String, HypervisorPlan>,
    pub failures: BTreeMap<ObjectKey, String>,
    pub sip_failures: BTreeMap<ObjectKey, String>,
}

/// Lists the managed pods of every hypervisor of `plan` (`list_pods` only: no mutating
/// call is made) and compares them with the plan ([`diff`]).
pub async fn dry_run<C: Connector>(plan: &Plan, connector: &C, prune: bool) -> DryRun {
    // Where the run looks for orphans too.
    let mut names = plan.hypervisors.clone();
    names.extend(crate::orphans::scanned_hypervisors(&plan.world));
    let services = crate::sip::hypervisors(&plan.sip.services);
    let runtimes = connect_all(
        &plan.world,
        &names.union(&services).cloned().collect(),
        connector,
    )
    .await;
    let managed = BTreeMap::from([(labels::MANAGED.to_string(), "true".to_string())]);
    let names: Vec<&String> = runtimes.keys().filter(|h| names.contains(*h)).collect();
    let listed = join_all(names.iter().map(|h| async {
        match runtimes.get(*h) {
            Some(Ok(rt)) => rt.list_pods(&managed).await.map_err(|e| e.to_string()),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("not connected".to_string()),
        }
    }))
    .await;
    let listed: BTreeMap<String, Result<Vec<PodStatus>, String>> =
        names.into_iter().cloned().zip(listed).collect();
    let mut out = diff(plan, &listed, prune);
    dry_run_services(&plan.sip.services, &runtimes, &mut out).await;
    out
}

/// What executing `plan` would do on hypervisors whose managed pods are `listed` (or could
/// not be listed): per pod planned, create, replace (it runs otherwise, or must restart to
/// read changed files) or keep; pods planned nowhere are removed, but for those of clusters
/// that cannot be planned, which a run leaves alone, and orphans (pods of clusters or
/// components the world does not hold), which a run names and leaves running unless it
/// prunes (`prune`: removed, with their directories); files whose content changes, files no
/// longer planned, directories of what goes.
pub fn diff(
    plan: &Plan,
    listed: &BTreeMap<String, Result<Vec<PodStatus>, String>>,
    prune: bool,
) -> DryRun {
    let world = &plan.world;
    let mut out = DryRun::default();
    let mut wanted: BTreeMap<&str, Vec<&ComponentPlan>> = BTreeMap::new();
    let mut left_alone: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut directories: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (key, cluster) in &plan.clusters {
        match cluster {
            ClusterPlan::Unplannable(e) => {
                out.failures.insert(key.clone(), e.to_string());
                left_alone.insert((&key.namespace, &key.name));
            }
            ClusterPlan::Teardown(t) => {
                for h in &t.hypervisors {
                    directories
                        .entry(h)
                        .or_default()
                        .extend(t.directories.iter().map(String::as_str));
                }
            }
            ClusterPlan::Converge(c) => {
                for component in &c.components {
                    wanted
                        .entry(component.hypervisor.as_str())
                        .or_default()
                        .push(component);
                }
                for r in &c.retiring {
                    if let Some(h) = &r.hypervisor {
                        directories
                            .entry(h)
                            .or_default()
                            .extend(r.directories.iter().map(String::as_str));
                    }
                }
            }
        }
    }
    for (h, pods) in listed {
        let mut plan = HypervisorPlan::default();
        let components = wanted.remove(h.as_str()).unwrap_or_default();
        match pods {
            Err(e) => plan.unreachable = Some(e.clone()),
            Ok(pods) => {
                for c in &components {
                    for spec in &c.rendered.pods {
                        let id = format!("{}/{}", spec.namespace, spec.name);
                        match pod_decision(spec, pods) {
                            PodDecision::Create => plan.create.push(id),
                            // Running as rendered, but restarted to read changed files.
                            PodDecision::Keep if !c.restart.contains(&spec.name) => {
                                plan.keep.push(id);
                            }
                            PodDecision::Keep | PodDecision::Replace { .. } => {
                                plan.replace.push(id);
                            }
                        }
                    }
                    plan.files.extend(
                        oi_planner::restarts::changed_files(&c.rendered, &c.known_files)
                            .into_iter()
                            .map(|f| f.path.clone()),
                    );
                    plan.remove_files.extend(c.stale_files.iter().cloned());
                }
                let orphans = crate::orphans::orphan_pods(world, h, pods);
                for pod in pods {
                    let planned = components.iter().any(|c| {
                        c.rendered
                            .pods
                            .iter()
                            .any(|s| s.namespace == pod.namespace && s.name == pod.name)
                    });
                    let cluster = (
                        pod.labels
                            .get(labels::CLUSTER_NAMESPACE)
                            .map_or("", String::as_str),
                        pod.labels.get(labels::CLUSTER).map_or("", String::as_str),
                    );
                    let id = format!("{}/{}", pod.namespace, pod.name);
                    if planned || left_alone.contains(&cluster) {
                        continue;
                    }
                    match orphans.iter().find(|o| o.id == pod.id) {
                        Some(_) if !prune => plan.orphans.push(id),
                        _ => plan.remove.push(id),
                    }
                }
                if prune {
                    let mut dirs: BTreeSet<String> = BTreeSet::new();
                    for o in &orphans {
                        let (ns, name) = (&o.cluster.namespace, &o.cluster.name);
                        match &o.component {
                            Some(c) => {
                                dirs.insert(oi_api::runtime::paths::component_config_dir(
                                    ns, name, c,
                                ));
                                dirs.insert(oi_api::runtime::paths::component_data_dir(
                                    ns, name, c,
                                ));
                            }
                            None => {
                                dirs.insert(oi_api::runtime::paths::cluster_config_dir(ns, name));
                                dirs.insert(oi_api::runtime::paths::cluster_data_dir(ns, name));
                            }
                        }
                    }
                    plan.remove_directories.extend(dirs);
                }
                plan.remove_directories.extend(
                    directories
                        .remove(h.as_str())
                        .unwrap_or_default()
                        .into_iter()
                        .map(str::to_string),
                );
            }
        }
        out.hypervisors.insert(h.clone(), plan);
    }
    out
}

/// Adds to `out` what running the SIPClusters' services of `plans` would do
/// ([`crate::sip::execute_services`]): their pods listed on each hypervisor each holds
/// (`list_pods` only, over `runtimes`) and compared with the plans ([`diff_services`]).
async fn dry_run_services<R: oi_cri::HypervisorRuntime>(
    plans: &[SipServices],
    runtimes: &crate::connect::Runtimes<R>,
    out: &mut DryRun,
) {
    let mut listed = BTreeMap::new();
    for plan in plans.iter().filter(|p| p.error.is_none()) {
        for h in &plan.hypervisors {
            let pods = match runtimes.get(h) {
                Some(Ok(rt)) => rt
                    .list_pods(&crate::sip::selector(&plan.key, None))
                    .await
                    .map_err(|e| e.to_string()),
                Some(Err(e)) => Err(e.to_string()),
                None => Err(format!("hypervisor {h} does not exist")),
            };
            listed.insert((plan.key.clone(), h.clone()), pods);
        }
    }
    diff_services(plans, &listed, out);
}

/// What running `plans` would do on hypervisors where each SIPCluster's pods are `listed`
/// (by SIPCluster and hypervisor), added to `out`: per service, its pod created, replaced
/// (it runs otherwise, or a file it reads changes) or kept, its changed files and those it
/// no longer has; pods of
/// the SIPCluster planned nowhere removed, with the directories of services that left. A
/// SIPCluster whose services cannot be placed is a failure (nothing is done for it).
pub fn diff_services(
    plans: &[SipServices],
    listed: &BTreeMap<(ObjectKey, String), Result<Vec<PodStatus>, String>>,
    out: &mut DryRun,
) {
    for plan in plans {
        if let Some(e) = &plan.error {
            out.sip_failures.insert(plan.key.clone(), e.clone());
            continue;
        }
        for h in &plan.hypervisors {
            let entry = out.hypervisors.entry(h.clone()).or_default();
            let pods = match listed.get(&(plan.key.clone(), h.clone())) {
                Some(Ok(pods)) => pods,
                Some(Err(e)) => {
                    entry.unreachable.get_or_insert_with(|| e.clone());
                    continue;
                }
                None => {
                    entry
                        .unreachable
                        .get_or_insert_with(|| "not listed".to_string());
                    continue;
                }
            };
            let services: Vec<_> = plan
                .services
                .iter()
                .filter(|s| &s.hypervisor == h)
                .collect();
            for s in &services {
                let id = format!("{}/{}", s.pod.namespace, s.pod.name);
                let changed = oi_cri::requests::file_writes(&s.files, &s.known_files).0;
                match pod_decision(&s.pod, pods) {
                    PodDecision::Create => entry.create.push(id),
                    PodDecision::Keep if changed.is_empty() => entry.keep.push(id),
                    PodDecision::Keep | PodDecision::Replace { .. } => entry.replace.push(id),
                }
                entry
                    .files
                    .extend(changed.into_iter().map(|f| f.path.clone()));
                entry.remove_files.extend(s.stale_files.iter().cloned());
            }
            for pod in pods {
                if !services.iter().any(|s| s.pod.name == pod.name) {
                    entry.remove.push(format!("{}/{}", pod.namespace, pod.name));
                }
            }
            if let Some(dirs) = plan.leaving.get(h) {
                entry.remove_directories.extend(dirs.iter().cloned());
            }
        }
    }
}
