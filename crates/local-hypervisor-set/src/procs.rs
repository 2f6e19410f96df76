//! Processes of a set, found through /proc: by PID (checked against its command line, so a
//! reused PID is never signalled), by the set's paths in their command line (containerd,
//! its shims, haproxy), and by network namespace (whatever runs inside a hypervisor).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

use crate::error::{Error, Result};

/// The command line of a process, arguments joined by spaces; `None` when it is gone or a
/// zombie (zombies have an empty command line).
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if raw.is_empty() {
        return None;
    }
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name, which may itself contain ") ".
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X" | "x") | None)
}

/// Whether `pid` is alive and its command line contains `marker`.
pub fn alive_with(pid: u32, marker: &str) -> bool {
    alive(pid) && cmdline(pid).is_some_and(|c| c.contains(marker))
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Live processes whose command line contains any of `markers`, except this process.
pub fn pids_mentioning(markers: &[String]) -> Vec<u32> {
    let me = std::process::id();
    all_pids()
        .into_iter()
        .filter(|pid| *pid != me)
        .filter(|pid| {
            alive(*pid) && cmdline(*pid).is_some_and(|c| markers.iter().any(|m| c.contains(m)))
        })
        .collect()
}

/// Live processes inside the network namespace whose handle is `netns_handle`.
pub fn pids_in_netns(netns_handle: &Path) -> Vec<u32> {
    let Ok(meta) = std::fs::metadata(netns_handle) else {
        return Vec::new();
    };
    let wanted = format!("net:[{}]", meta.ino());
    all_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|l| l.as_os_str() == wanted.as_str())
                && alive(*pid)
        })
        .collect()
}

fn signal(pid: u32, sig: Signal) -> Result<()> {
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Ok(());
    };
    match kill_process(raw, sig) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(Error::Signal {
            pid,
            source: e.into(),
        }),
    }
}

fn wait_dead(pids: &[u32], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops processes: SIGTERM, up to `grace` to exit, then SIGKILL. Returns the PIDs still
/// alive after that (none, unless a process is stuck in the kernel).
///
/// # Errors
/// [`Error::Signal`] when signalling fails for another reason than the process being gone.
pub fn terminate(pids: &[u32], grace: Duration) -> Result<Vec<u32>> {
    for pid in pids {
        signal(*pid, Signal::TERM)?;
    }
    let left = wait_dead(pids, grace);
    for pid in &left {
        signal(*pid, Signal::KILL)?;
    }
    Ok(wait_dead(&left, Duration::from_secs(5)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_terminates_a_process_by_marker() {
        let marker = format!("oi-lhs-test-marker-{}", std::process::id());
        // `read` is a builtin: the shell never forks, so no second process (a fork not yet
        // exec'd) ever carries the marker. It blocks on a pipe held open until the end.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "trap '' TERM; read line", &marker])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !alive_with(pid, &marker) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(alive_with(pid, &marker));
        assert_eq!(pids_mentioning(std::slice::from_ref(&marker)), [pid]);
        // It ignores SIGTERM, so this exercises the SIGKILL path.
        let left = terminate(&[pid], Duration::from_millis(200)).unwrap();
        assert!(left.is_empty());
        child.wait().unwrap();
        assert!(!alive(pid));
        assert!(pids_mentioning(&[marker]).is_empty());
    }

    #[test]
    fn own_netns_holds_this_process() {
        let pids = pids_in_netns(Path::new("/proc/self/ns/net"));
        assert!(pids.contains(&std::process::id()));
    }
}
