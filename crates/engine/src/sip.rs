//! Runs SIPClusters' support services ([`oi_planner::sip::services`]), one SIPCluster at a
//! time: on every hypervisor it holds or held something on, its pods that are not planned
//! there are removed and the directories of services that left go; then each service's
//! changed files are written, its pod made to run as rendered (restarted when a file it
//! reads changed), and its containers watched until they run or the deadline passes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use oi_api::World;
use oi_cri::{ContainerState, HypervisorRuntime, Outcome};
use oi_planner::sip::services::{
    ServicePlan, ServiceResult, SipServices, SipServicesResult, labels,
};

use crate::connect::{Runtimes, runtime};
use crate::error::{Step, StepError};
use crate::{Event, ExecuteOptions};

/// The hypervisors the services of `plans` are run on (those of a plan that could not be
/// placed are left alone).
pub(crate) fn hypervisors(plans: &[SipServices]) -> BTreeSet<String> {
    plans
        .iter()
        .filter(|p| p.error.is_none())
        .flat_map(|p| p.hypervisors.iter().cloned())
        .collect()
}

/// Runs every plan of `plans` in order (see the module documentation) over `runtimes` (every
/// hypervisor of [`hypervisors`] connected, or why not). Never fails as a whole: each
/// service's outcome is in its result.
pub(crate) async fn execute_services<R: HypervisorRuntime>(
    world: &World,
    plans: &[SipServices],
    runtimes: &Runtimes<R>,
    options: &ExecuteOptions,
    progress: &(dyn Fn(&Event) + Sync),
) -> Vec<SipServicesResult> {
    if hypervisors(plans).is_empty() {
        return plans
            .iter()
            .map(|p| SipServicesResult {
                key: p.key.clone(),
                ..SipServicesResult::default()
            })
            .collect();
    }
    let deadline = Instant::now() + options.max_wait;
    let mut results = Vec::with_capacity(plans.len());
    // A removed hypervisor that does not answer keeps what was left there: nothing of it
    // is waited for.
    let removed: BTreeSet<&str> = world
        .hypervisors
        .values()
        .filter(|h| h.metadata.is_being_deleted())
        .map(|h| h.metadata.name.as_str())
        .collect();
    for plan in plans {
        results.push(run_one(plan, runtimes, &removed, options, deadline, progress).await);
    }
    results
}

fn emit(
    progress: &(dyn Fn(&Event) + Sync),
    key: &oi_api::ObjectKey,
    hypervisor: &str,
    service: Option<&str>,
    message: String,
) {
    progress(&Event {
        hypervisor: Some(hypervisor.to_string()),
        cluster: oi_api::ObjectKey::new(key.namespace.clone(), format!("sipcluster/{}", key.name)),
        component: service.map(str::to_string),
        message,
        ended: None,
    });
}

/// A failed runtime call made while doing `what`.
fn service_step(what: impl Into<String>) -> impl FnOnce(oi_cri::Error) -> StepError {
    let what = what.into();
    move |source| StepError::Service {
        what,
        source: Box::new(source),
    }
}

/// The labels of `key`'s pods (of its `service`'s, when given).
pub(crate) fn selector(key: &oi_api::ObjectKey, service: Option<&str>) -> BTreeMap<String, String> {
    let mut s = BTreeMap::from([
        (
            labels::SIP_CLUSTER_NAMESPACE.to_string(),
            key.namespace.clone(),
        ),
        (labels::SIP_CLUSTER.to_string(), key.name.clone()),
    ]);
    if let Some(service) = service {
        s.insert(labels::SERVICE.to_string(), service.to_string());
    }
    s
}

async fn run_one<R: HypervisorRuntime>(
    plan: &SipServices,
    runtimes: &Runtimes<R>,
    removed: &BTreeSet<&str>,
    options: &ExecuteOptions,
    deadline: Instant,
    progress: &(dyn Fn(&Event) + Sync),
) -> SipServicesResult {
    let key = &plan.key;
    let mut result = SipServicesResult {
        key: key.clone(),
        ..SipServicesResult::default()
    };
    if plan.error.is_some() {
        return result;
    }
    let mut sweep_errors = Vec::new();
    for h in &plan.hypervisors {
        let wanted: BTreeSet<&str> = plan
            .services
            .iter()
            .filter(|s| &s.hypervisor == h)
            .map(|s| s.pod.name.as_str())
            .collect();
        if removed.contains(h.as_str())
            && let Err(e) = runtime(runtimes, h)
        {
            let why = match &e {
                StepError::Unreachable { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            emit(
                progress,
                key,
                h,
                None,
                format!("left what ran on removed hypervisor {h}, which does not answer: {why}"),
            );
            continue;
        }
        let swept = async {
            let rt = runtime(runtimes, h)?;
            let pods = rt
                .list_pods(&selector(key, None))
                .await
                .map_err(service_step(format!("listing its pods on {h}")))?;
            for pod in pods.iter().filter(|p| !wanted.contains(p.name.as_str())) {
                rt.remove_pod(&pod.id)
                    .await
                    .map_err(service_step(format!("removing pod {} on {h}", pod.name)))?;
                emit(
                    progress,
                    key,
                    h,
                    None,
                    format!("removed pod {} (no longer wanted)", pod.name),
                );
            }
            if let Some(dirs) = plan.leaving.get(h) {
                rt.remove_host_paths(dirs)
                    .await
                    .map_err(service_step(format!(
                        "removing the directories of services that left {h}"
                    )))?;
                emit(
                    progress,
                    key,
                    h,
                    None,
                    "removed the directories of services that left".into(),
                );
            }
            Ok::<(), StepError>(())
        }
        .await;
        if let Err(e) = swept {
            sweep_errors.push(e);
        }
    }
    // The first failure's reason; every failure's message.
    if let Some(first) = sweep_errors.first() {
        let messages: Vec<String> = sweep_errors.iter().map(ToString::to_string).collect();
        result.sweep_error = Some(oi_planner::record::Failure::new(
            first.reason(),
            messages.join("; "),
        ));
    }
    for s in &plan.services {
        let mut out = ServiceResult {
            name: s.name.clone(),
            hypervisor: s.hypervisor.clone(),
            failure: None,
            hashes: None,
        };
        if let Err(e) = run_service(key, s, runtimes, options, deadline, progress, &mut out).await {
            out.failure = Some(e.failure());
        }
        result.services.push(out);
    }
    result
}

/// Runs one service: its files written (their hashes into `out` as soon as they are), its
/// pod made to run as rendered, its containers watched until they run.
async fn run_service<R: HypervisorRuntime>(
    key: &oi_api::ObjectKey,
    s: &ServicePlan,
    runtimes: &Runtimes<R>,
    options: &ExecuteOptions,
    deadline: Instant,
    progress: &(dyn Fn(&Event) + Sync),
    out: &mut ServiceResult,
) -> Step {
    let rt = runtime(runtimes, &s.hypervisor)?;
    let h = s.hypervisor.as_str();
    let changed = oi_cri::requests::file_writes(&s.files, &s.known_files)
        .0
        .len();
    out.hashes = Some(
        rt.write_files(&s.files, &s.known_files)
            .await
            .map_err(service_step("writing its files"))?,
    );
    if changed > 0 {
        emit(
            progress,
            key,
            h,
            Some(&s.name),
            format!("wrote {changed} files"),
        );
    }
    let mut outcome = rt
        .ensure_pod(&s.pod)
        .await
        .map_err(service_step(format!("pod {}", s.pod.name)))?;
    if outcome == Outcome::Unchanged && changed > 0 {
        // It reads its files when it starts: a changed file restarts it.
        let restarted = async {
            for pod in rt.list_pods(&selector(key, Some(&s.name))).await? {
                rt.remove_pod(&pod.id).await?;
            }
            rt.ensure_pod(&s.pod).await
        }
        .await;
        restarted.map_err(service_step(format!("restarting pod {}", s.pod.name)))?;
        outcome = Outcome::Replaced;
    }
    // Files it no longer has (a node key taken out of the Secret): gone, now that the pod
    // runs as rendered.
    let stale = &s.stale_files;
    if !stale.is_empty() {
        rt.remove_host_paths(stale)
            .await
            .map_err(service_step("removing files it no longer has"))?;
        if let Some(hashes) = &mut out.hashes {
            hashes.retain(|path, _| !stale.contains(path));
        }
        emit(
            progress,
            key,
            h,
            Some(&s.name),
            format!("removed {} files it no longer has", stale.len()),
        );
    }
    match outcome {
        Outcome::Created => emit(
            progress,
            key,
            h,
            Some(&s.name),
            format!("created pod {}", s.pod.name),
        ),
        Outcome::Replaced => emit(
            progress,
            key,
            h,
            Some(&s.name),
            format!("replaced pod {}", s.pod.name),
        ),
        Outcome::Unchanged => {}
    }
    // Running: every container of the pod runs, seen twice a poll apart (an sshd refusing
    // its configuration exits right after it starts).
    let mut seen_running = false;
    loop {
        let state = rt
            .list_pods(&selector(key, Some(&s.name)))
            .await
            .map_err(service_step(format!("pod {}", s.pod.name)))?
            .into_iter()
            .find(|p| p.name == s.pod.name)
            .map(|p| p.containers);
        let not_running: Vec<String> = match &state {
            None => vec!["the pod is gone".into()],
            Some(cs) if cs.is_empty() => vec!["no container".into()],
            Some(cs) => cs
                .iter()
                .filter(|c| c.state != ContainerState::Running)
                .map(|c| match c.exit_code {
                    Some(code) => format!("container {} exited with code {code}", c.name),
                    None => format!("container {} is {:?}", c.name, c.state),
                })
                .collect(),
        };
        if not_running.is_empty() {
            if seen_running {
                return Ok(());
            }
            seen_running = true;
            tokio::time::sleep(options.poll_interval).await;
            continue;
        }
        seen_running = false;
        let exited = state
            .iter()
            .flatten()
            .any(|c| c.state == ContainerState::Exited);
        if exited || Instant::now() >= deadline {
            return Err(StepError::ServiceNotRunning {
                pod: s.pod.name.clone(),
                hypervisor: h.to_string(),
                why: not_running,
            });
        }
        tokio::time::sleep(options.poll_interval).await;
    }
}
