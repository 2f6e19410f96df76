//! `list`: the sets on this machine and their hypervisors.

use std::io::Write;

use crate::error::{Result, io};
use crate::procs;
use crate::state::{Paths, Phase, SetState};

/// Writes one line per host of every set (hypervisors, then the router and the workers),
/// with a header.
///
/// # Errors
/// [`crate::Error::Io`] or [`crate::Error::StateParse`].
pub fn list(paths: &Paths, out: &mut dyn Write) -> Result<()> {
    let mut rows = vec![[
        "SET".to_string(),
        "STATE".to_string(),
        "HOST".to_string(),
        "IP".to_string(),
        "KIND".to_string(),
        "ENDPOINT".to_string(),
        "CONTAINERD".to_string(),
    ]];
    for name in SetState::list_names(paths)? {
        let Some(state) = SetState::load(paths, &name)? else {
            continue;
        };
        let phase = match state.phase {
            Phase::Creating => "creating",
            Phase::Ready => "ready",
        };
        let containerd = |host: &str, pid: Option<u32>| {
            let config = paths.hypervisor(&name, host).containerd_config;
            match pid {
                Some(pid) if procs::alive_with(pid, &config.to_string_lossy()) => {
                    format!("{pid} running")
                }
                Some(pid) => format!("{pid} dead"),
                None => "-".to_string(),
            }
        };
        for hv in &state.hypervisors {
            rows.push([
                name.clone(),
                phase.to_string(),
                hv.name.clone(),
                hv.ip.to_string(),
                hv.visibility.as_str().to_string(),
                hv.cri_endpoint_uri
                    .clone()
                    .unwrap_or_else(|| format!("unix://{}", hv.socket.display())),
                containerd(&hv.name, hv.containerd_pid),
            ]);
        }
        if let Some(nat) = &state.nat {
            rows.push([
                name.clone(),
                phase.to_string(),
                nat.router.clone(),
                nat.uplink_ip.to_string(),
                "router".into(),
                format!("NAT for {}", nat.lan),
                "-".into(),
            ]);
            for w in &nat.workers {
                rows.push([
                    name.clone(),
                    phase.to_string(),
                    w.name.clone(),
                    w.ip.to_string(),
                    "worker".into(),
                    format!("unix://{}", w.socket.display()),
                    containerd(&w.name, w.containerd_pid),
                ]);
            }
        }
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        text.push_str(line.join("  ").trim_end());
        text.push('\n');
    }
    out.write_all(text.as_bytes()).map_err(io("<stdout>"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan_set;

    #[test]
    fn lists_every_hypervisor_with_its_containerd() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            lib: dir.path().join("lib"),
            run: dir.path().join("run"),
        };
        let mut out = Vec::new();
        list(&paths, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "SET  STATE  HOST  IP  KIND  ENDPOINT  CONTAINERD\n"
        );

        let mut a = SetState::from_plan(&plan_set("a", 1, 1, 1).unwrap(), false, &paths);
        // This test process is alive but its command line is not containerd's: "dead".
        a.hypervisors[0].containerd_pid = Some(std::process::id());
        a.phase = Phase::Ready;
        a.save(&paths).unwrap();
        let mut b = SetState::from_plan(&plan_set("b", 2, 0, 1).unwrap(), true, &paths);
        b.hypervisors[0].cri_endpoint_uri = Some("tcp://10.128.2.2:27000".into());
        b.save(&paths).unwrap();

        let mut out = Vec::new();
        list(&paths, &mut out).unwrap();
        let run = paths.run.display().to_string();
        let expected = format!(
            "SET  STATE     HOST         IP          KIND     ENDPOINT{pad}  CONTAINERD
a    ready     a-private-1  10.128.1.2  private  unix://{run}/a/a-private-1/cri.sock  {pid} dead
a    ready     a-public-1   10.128.1.3  public   unix://{run}/a/a-public-1/cri.sock   -
b    creating  b-public-1   10.128.2.2  public   tcp://10.128.2.2:27000{pad2}  -
",
            pad = " ".repeat(format!("unix://{run}/a/a-private-1/cri.sock").len() - 8),
            pad2 = " ".repeat(format!("unix://{run}/a/a-private-1/cri.sock").len() - 22),
            pid = std::process::id(),
        );
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }
}
