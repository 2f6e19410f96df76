//! Which pods restart for which files: a pod spec names the files its containers read, not
//! their content, so a file that changes under a running pod goes unnoticed unless the pod
//! restarts. Pure: a function of what a component renders and of the file hashes its
//! hypervisor's status records.

use std::collections::{BTreeMap, BTreeSet};

use oi_api::runtime::{HostFile, PodSpec};

use crate::render::Rendered;

/// The files of `rendered` whose hash differs from `known` (never written, or changed).
pub fn changed_files<'r>(
    rendered: &'r Rendered,
    known: &BTreeMap<String, String>,
) -> Vec<&'r HostFile> {
    rendered
        .files
        .iter()
        .filter(|f| known.get(&f.path) != Some(&f.content_hash()))
        .collect()
}

/// The pods of `rendered` that must restart because files they read change (their hash
/// differs from `known`). A pod reads the files its containers name (command, arguments,
/// environment) and the files that those files name (a kubeconfig or an haproxy
/// configuration naming a certificate). A changed file that no pod names restarts every pod
/// of the component: nothing tells which one reads it. A name is matched as a substring, so a
/// mistake can only restart a pod too many, never one too few.
pub fn pods_reading_changed_files(
    rendered: &Rendered,
    known: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let mut restart = BTreeSet::new();
    for file in changed_files(rendered, known) {
        let readers: Vec<&PodSpec> = rendered
            .pods
            .iter()
            .filter(|p| pod_reads(p, &rendered.files, &file.path))
            .collect();
        let readers = if readers.is_empty() {
            rendered.pods.iter().collect()
        } else {
            readers
        };
        restart.extend(readers.into_iter().map(|p| p.name.clone()));
    }
    restart
}

/// Whether `pod` reads the file at `path`: see [`pods_reading_changed_files`].
fn pod_reads(pod: &PodSpec, files: &[HostFile], path: &str) -> bool {
    let named: Vec<&str> = pod
        .containers
        .iter()
        .flat_map(|c| c.command.iter().chain(&c.args).chain(c.env.values()))
        .map(String::as_str)
        .collect();
    named.iter().any(|t| t.contains(path))
        || files.iter().any(|f| {
            f.path != path
                && named.iter().any(|t| t.contains(&f.path))
                && String::from_utf8_lossy(&f.content).contains(path)
        })
}

#[cfg(test)]
mod tests;
