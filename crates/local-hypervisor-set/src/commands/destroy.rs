//! `destroy`: stops every pod, containerd and front of a set and removes its namespaces,
//! links, bridge and directories. Converges: a half-created set, or one already gone, is
//! fine.
//!
//! ```text
//! pods (CRI, per live containerd) ─► fronts, containerds (SIGTERM, then SIGKILL)
//!   ─► sweep: any process naming the set's directories or inside its namespaces (a
//!      worker's kubelet and WireGuard too)
//!   ─► namespaces (hypervisors, workers, router) ─► veths ─► bridge ─► directories
//!   ─► state.json last
//! ```

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, io};
use crate::plan;
use crate::state::{HypervisorState, Paths, SetState};
use crate::system::{RealSystem, System};

/// How long containerd gets to exit after SIGTERM.
const CONTAINERD_GRACE: Duration = Duration::from_secs(10);
/// How long leftovers get to exit after SIGTERM.
const SWEEP_GRACE: Duration = Duration::from_secs(2);

/// What `destroy` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestroyOutcome {
    Destroyed,
    /// There was nothing of the set on this machine.
    NothingToDo,
}

/// Destroys a set.
///
/// # Errors
/// [`Error::InvalidSetName`], or the first failure to remove something (the state file is
/// kept, so running `destroy` again resumes).
pub fn destroy(paths: &Paths, name: &str, progress: &mut dyn Write) -> Result<DestroyOutcome> {
    destroy_with(&RealSystem, paths, name, progress)
}

/// [`destroy`] against any [`System`].
///
/// # Errors
/// As [`destroy`].
pub fn destroy_with(
    sys: &dyn System,
    paths: &Paths,
    name: &str,
    progress: &mut dyn Write,
) -> Result<DestroyOutcome> {
    plan::validate_set_name(name)?;
    let state = match SetState::load(paths, name) {
        Ok(state) => state,
        Err(e @ Error::StateParse { .. }) => {
            let _ = writeln!(progress, "set {name}: {e}; removing what can be found");
            None
        }
        Err(e) => return Err(e),
    };
    let mut namespaces: Vec<String> = sys
        .netns_names()?
        .into_iter()
        .filter(|ns| plan::is_namespace_of(name, ns))
        .collect();
    let markers = markers(paths, name);
    let dirs_exist = paths.set_lib(name).exists() || paths.set_run(name).exists();
    if state.is_none()
        && namespaces.is_empty()
        && !dirs_exist
        && sys.pids_mentioning(&markers).is_empty()
    {
        let _ = writeln!(progress, "set {name} does not exist: nothing to do");
        return Ok(DestroyOutcome::NothingToDo);
    }
    let hypervisors: &[HypervisorState] = state.as_ref().map_or(&[], |s| &s.hypervisors);
    let nat = state.as_ref().and_then(|s| s.nat.as_ref());
    let workers = nat.map_or(&[][..], |n| &n.workers[..]);
    let recorded = hypervisors
        .iter()
        .map(|h| h.name.clone())
        .chain(workers.iter().map(|w| w.name.clone()))
        .chain(nat.map(|n| n.router.clone()));
    for ns in recorded {
        if !namespaces.contains(&ns) {
            namespaces.push(ns);
        }
    }

    // Pods first: killing containerd would leave them running.
    for hv in hypervisors {
        let config = paths.hypervisor(name, &hv.name).containerd_config;
        let live = hv
            .containerd_pid
            .is_some_and(|pid| sys.alive_with(pid, &config.to_string_lossy()));
        if !live {
            continue;
        }
        match sys.remove_all_pods(&hv.name, &hv.socket) {
            Ok(0) => {}
            Ok(n) => {
                let _ = writeln!(progress, "{}: stopped and removed {n} pods", hv.name);
            }
            // The sweep below still kills whatever runs in its namespace.
            Err(e) => {
                let _ = writeln!(progress, "{}: cannot remove pods through CRI: {e}", hv.name);
            }
        }
    }

    // Then fronts and containerds, by PID, each checked against its command line.
    let mut pids = Vec::new();
    for hv in hypervisors {
        let hp = paths.hypervisor(name, &hv.name);
        let owned = [
            (hv.haproxy_pid, &hp.haproxy_config),
            (hv.containerd_pid, &hp.containerd_config),
        ];
        for (pid, config) in owned {
            if let Some(pid) = pid
                && sys.alive_with(pid, &config.to_string_lossy())
            {
                pids.push(pid);
            }
        }
    }
    for w in workers {
        let config = paths.hypervisor(name, &w.name).containerd_config;
        if let Some(pid) = w.containerd_pid
            && sys.alive_with(pid, &config.to_string_lossy())
        {
            pids.push(pid);
        }
    }
    if !pids.is_empty() {
        let _ = writeln!(progress, "set {name}: stopping {} processes", pids.len());
        sys.terminate(&pids, CONTAINERD_GRACE)?;
    }
    sweep(sys, name, &markers, &namespaces, progress)?;

    for ns in &namespaces {
        sys.delete_netns(ns)?;
    }
    let mut links: Vec<String> = hypervisors.iter().map(|h| h.host_veth.clone()).collect();
    links.extend(nat.map(|n| n.router_veth.clone()));
    if let Some(state) = &state {
        links.push(state.bridge.clone());
    }
    for link in &links {
        sys.delete_link(link)?;
    }
    wait_links_gone(sys, &links);

    remove_dir(&paths.set_run(name))?;
    // The state file goes last: until then, a failed destroy can be run again.
    let lib = paths.set_lib(name);
    if lib.exists() {
        for entry in std::fs::read_dir(&lib).map_err(io(&lib))? {
            let path = entry.map_err(io(&lib))?.path();
            if path != paths.state_file(name) {
                remove_path(&path)?;
            }
        }
    }
    remove_dir(&lib)?;
    let _ = writeln!(progress, "set {name}: destroyed");
    Ok(DestroyOutcome::Destroyed)
}

/// Command-line fragments that only the set's processes carry (containerd, its shims,
/// haproxy all name files under these directories).
fn markers(paths: &Paths, name: &str) -> Vec<String> {
    [paths.set_lib(name), paths.set_run(name)]
        .iter()
        .map(|p| format!("{}/", p.display()))
        .collect()
}

/// Kills every process that names the set's directories or runs inside its namespaces.
fn sweep(
    sys: &dyn System,
    name: &str,
    markers: &[String],
    namespaces: &[String],
    progress: &mut dyn Write,
) -> Result<()> {
    let find = || {
        let mut pids = sys.pids_mentioning(markers);
        for ns in namespaces {
            pids.extend(sys.pids_in_netns(ns));
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    };
    for _ in 0..3 {
        let pids = find();
        if pids.is_empty() {
            return Ok(());
        }
        let _ = writeln!(
            progress,
            "set {name}: stopping {} leftover processes",
            pids.len()
        );
        sys.terminate(&pids, SWEEP_GRACE)?;
    }
    let pids = find();
    if pids.is_empty() {
        Ok(())
    } else {
        Err(Error::Unkillable {
            set: name.to_string(),
            pids,
        })
    }
}

/// Veths vanish with their namespace asynchronously; wait a little so that `destroy`
/// returning means they are gone.
fn wait_links_gone(sys: &dyn System, links: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while links.iter().any(|l| sys.link_exists(l)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn remove_path(path: &Path) -> Result<()> {
    let result = if path.is_dir() && !path.is_symlink() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

fn remove_dir(path: &Path) -> Result<()> {
    remove_path(path)
}
