//! `exec`: a command on one host of a set (a hypervisor, a worker or the router), in its
//! network namespace (`nsenter --net`, which keeps the host's /sys, unlike `ip netns exec`).
//! The command replaces this process: its exit status is the command's.

use std::os::unix::process::CommandExt as _;
use std::process::Command;

use crate::error::{Error, Result};
use crate::host;
use crate::state::{Paths, SetState};

/// Every host of a set: hypervisors, workers, the router.
pub fn hosts(state: &SetState) -> Vec<String> {
    state
        .hypervisors
        .iter()
        .map(|h| h.name.clone())
        .chain(state.nat.iter().flat_map(|n| {
            n.workers
                .iter()
                .map(|w| w.name.clone())
                .chain([n.router.clone()])
        }))
        .collect()
}

/// The `nsenter` command that runs `command` on `host`.
///
/// # Errors
/// [`Error::NoSuchSet`], [`Error::NoSuchHost`], or a state file that does not read.
pub fn command(paths: &Paths, set: &str, host: &str, command: &[String]) -> Result<Command> {
    let state = SetState::load(paths, set)?.ok_or_else(|| Error::NoSuchSet {
        set: set.to_string(),
    })?;
    let known = hosts(&state);
    if !known.iter().any(|h| h == host) {
        return Err(Error::NoSuchHost {
            set: set.to_string(),
            host: host.to_string(),
            known: known.join(", "),
        });
    }
    let mut c = Command::new("nsenter");
    c.arg(format!("--net={}", host::netns_path(host).display()))
        .arg("--")
        .args(command);
    Ok(c)
}

/// Runs `command` on `host` in place of this process; returns only when that fails.
pub fn exec(paths: &Paths, set: &str, host: &str, command_line: &[String]) -> Error {
    match command(paths, set, host, command_line) {
        Ok(mut c) => Error::Spawn {
            program: "nsenter".into(),
            source: c.exec(),
        },
        Err(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan_nat, plan_set};

    #[test]
    fn commands_run_in_the_hosts_namespace_and_unknown_hosts_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            lib: dir.path().join("lib"),
            run: dir.path().join("run"),
        };
        assert!(matches!(
            command(&paths, "demo", "demo-worker-1", &["true".into()]),
            Err(Error::NoSuchSet { .. })
        ));
        let mut plan = plan_set("demo", 7, 1, 1).unwrap();
        plan.nat = Some(plan_nat(&plan, 8, 2).unwrap());
        SetState::from_plan(&plan, false, &paths)
            .save(&paths)
            .unwrap();
        let c = command(
            &paths,
            "demo",
            "demo-worker-2",
            &["ip".into(), "addr".into()],
        )
        .unwrap();
        let argv: Vec<String> = std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv,
            [
                "nsenter",
                "--net=/run/netns/demo-worker-2",
                "--",
                "ip",
                "addr"
            ]
        );
        match command(&paths, "demo", "demo-worker-3", &["true".into()]) {
            Err(Error::NoSuchHost { known, .. }) => assert_eq!(
                known,
                "demo-private-1, demo-public-1, demo-worker-1, demo-worker-2, demo-router"
            ),
            other => panic!("unexpected {other:?}"),
        }
    }
}
