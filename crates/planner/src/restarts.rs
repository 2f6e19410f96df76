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

/// The paths `known` records that `files` no longer has, among those inside directory `dir`:
/// what is removed once nothing reads them. A record naming a path outside `dir` is never
/// acted upon (the records come from the world, which people edit).
pub fn stale_files(files: &[HostFile], known: &BTreeMap<String, String>, dir: &str) -> Vec<String> {
    let inside = format!("{}/", dir.trim_end_matches('/'));
    known
        .keys()
        .filter(|path| path.starts_with(&inside) && oi_api::runtime::check_host_path(path).is_ok())
        .filter(|path| !files.iter().any(|f| &f.path == *path))
        .cloned()
        .collect()
}

/// The pods of `rendered` that must restart because files they read change (their hash
/// differs from `known`). A pod reads the files its containers name (command, arguments,
/// environment) and the files that those files name (a kubeconfig or an haproxy
/// configuration naming a certificate). A changed file that no pod names restarts every pod
/// of the component: nothing tells which one reads it. A name is matched as a substring, so a
/// mistake can only restart a pod too many, never one too few. A file whose reader takes a
/// change by itself ([`Rendered::reloaded`]) restarts nothing.
pub fn pods_reading_changed_files(
    rendered: &Rendered,
    known: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let mut changed = changed_files(rendered, known);
    changed.retain(|f| !rendered.reloaded.contains(&f.path));
    if changed.is_empty() {
        return BTreeSet::new();
    }
    // What each pod reads, worked out once: not once per changed file.
    let reads: Vec<(&PodSpec, BTreeSet<&str>)> = rendered
        .pods
        .iter()
        .map(|p| (p, files_read(p, &rendered.files)))
        .collect();
    let mut restart = BTreeSet::new();
    for file in changed {
        let readers: Vec<&PodSpec> = reads
            .iter()
            .filter(|(_, read)| read.contains(file.path.as_str()))
            .map(|(p, _)| *p)
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

/// The paths of `files` that `pod` reads: those its containers name, and those named by the
/// content of a file they name (see [`pods_reading_changed_files`]).
fn files_read<'f>(pod: &PodSpec, files: &'f [HostFile]) -> BTreeSet<&'f str> {
    let tokens: Vec<&str> = pod
        .containers
        .iter()
        .flat_map(|c| c.command.iter().chain(&c.args).chain(c.env.values()))
        .map(String::as_str)
        .collect();
    let named: Vec<&HostFile> = files
        .iter()
        .filter(|f| tokens.iter().any(|t| t.contains(&f.path)))
        .collect();
    let mut read: BTreeSet<&str> = named.iter().map(|f| f.path.as_str()).collect();
    // A content that names a file names their common prefix (the component's directory): most
    // contents (certificates, keys) do not, and are passed over at once.
    let prefix = common_prefix(files);
    for f in &named {
        let content = String::from_utf8_lossy(&f.content);
        if !content.contains(prefix) {
            continue;
        }
        read.extend(
            files
                .iter()
                .filter(|other| other.path != f.path && content.contains(other.path.as_str()))
                .map(|other| other.path.as_str()),
        );
    }
    read
}

/// The longest prefix every path of `files` starts with.
fn common_prefix(files: &[HostFile]) -> &str {
    let Some(first) = files.first() else {
        return "";
    };
    let mut len = first.path.len();
    for f in &files[1..] {
        len = first
            .path
            .bytes()
            .zip(f.path.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count();
    }
    // On a character boundary (paths are text).
    while !first.path.is_char_boundary(len) {
        len -= 1;
    }
    &first.path[..len]
}

#[cfg(test)]
mod tests;
