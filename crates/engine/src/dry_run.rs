//! `--dry-run`: what a reconcile would do on each hypervisor, found with read-only calls.

use std::collections::BTreeMap;

use futures::future::join_all;
use oi_api::runtime::labels;
use oi_api::{ObjectKey, World};
use oi_cri::HypervisorRuntime;
use oi_planner::render::{self, Rendered};
use time::OffsetDateTime;

use crate::{
    Connector, EngineOptions, connect_all, count_changed, pods_reading_changed_files, world_files,
};

/// What would happen on one hypervisor. Pods as `namespace/name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HypervisorPlan {
    pub create: Vec<String>,
    pub replace: Vec<String>,
    pub leave: Vec<String>,
    pub remove: Vec<String>,
    /// Host paths whose content would be written.
    pub files: Vec<String>,
    /// Set when the hypervisor could not be asked.
    pub unreachable: Option<String>,
}

/// The plan of a run, per hypervisor, and the clusters that could not be planned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DryRun {
    pub hypervisors: BTreeMap<String, HypervisorPlan>,
    pub failures: BTreeMap<ObjectKey, String>,
}

/// Prepares and renders `world` and compares it with what runs, through `list_pods` only:
/// no mutating call is made.
pub async fn dry_run<C: Connector>(
    world: World,
    now: OffsetDateTime,
    options: &EngineOptions,
    connector: &C,
) -> DryRun {
    let prepared = oi_planner::prepare_with(world, now, &options.prepare);
    let world = prepared.world;
    let mut out = DryRun {
        failures: prepared
            .failures
            .iter()
            .map(|(k, e)| (k.clone(), e.to_string()))
            .collect(),
        ..DryRun::default()
    };
    // Per hypervisor: (cluster key, component name, rendering) of every live component.
    let mut wanted: BTreeMap<String, Vec<(ObjectKey, String, Rendered)>> = BTreeMap::new();
    for (key, c) in &world.components {
        let (Some(h), Some(cluster)) = (c.spec.hypervisor.as_ref(), world.cluster_of(c)) else {
            continue;
        };
        if c.metadata.is_being_deleted() || cluster.is_being_deleted() {
            continue;
        }
        match render::render_component(&world, key, &options.render) {
            Ok(r) => wanted.entry(h.clone()).or_default().push((
                c.cluster_key(),
                c.metadata.name.clone(),
                r,
            )),
            Err(e) => {
                out.failures.insert(c.cluster_key(), e.to_string());
            }
        }
    }
    let runtimes = connect_all(&world, connector).await;
    let managed = BTreeMap::from([(labels::MANAGED.to_string(), "true".to_string())]);
    let names: Vec<&String> = runtimes.keys().collect();
    let listed = join_all(names.iter().map(|h| async {
        match runtimes.get(*h) {
            Some(Ok(rt)) => rt.list_pods(&managed).await.map_err(|e| e.to_string()),
            Some(Err(e)) => Err(e.clone()),
            None => Err("not connected".to_string()),
        }
    }))
    .await;
    for (h, pods) in names.into_iter().zip(listed) {
        let mut plan = HypervisorPlan::default();
        let components = wanted.remove(h).unwrap_or_default();
        match pods {
            Err(e) => plan.unreachable = Some(e),
            Ok(pods) => {
                for (cluster, component, rendered) in &components {
                    let known = world_files(&world, h, cluster, component);
                    let restart = pods_reading_changed_files(rendered, &known);
                    for spec in &rendered.pods {
                        let id = format!("{}/{}", spec.namespace, spec.name);
                        let same: Vec<_> = pods
                            .iter()
                            .filter(|p| p.namespace == spec.namespace && p.name == spec.name)
                            .collect();
                        match same.as_slice() {
                            [] => plan.create.push(id),
                            // Running as rendered, but restarted to read changed files.
                            [only] if only.runs(spec) && !restart.contains(&spec.name) => {
                                plan.leave.push(id);
                            }
                            _ => plan.replace.push(id),
                        }
                    }
                    if count_changed(&rendered.files, &known) > 0 {
                        plan.files.extend(
                            rendered
                                .files
                                .iter()
                                .filter(|f| known.get(&f.path) != Some(&f.content_hash()))
                                .map(|f| f.path.clone()),
                        );
                    }
                }
                for pod in &pods {
                    let wanted_here = components.iter().any(|(_, _, r)| {
                        r.pods
                            .iter()
                            .any(|s| s.namespace == pod.namespace && s.name == pod.name)
                    });
                    if !wanted_here {
                        plan.remove.push(format!("{}/{}", pod.namespace, pod.name));
                    }
                }
            }
        }
        out.hypervisors.insert(h.clone(), plan);
    }
    out
}
