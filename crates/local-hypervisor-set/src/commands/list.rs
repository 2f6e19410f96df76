//! `list`: the sets on this machine and their hypervisors.

use std::io::Write;

use crate::error::{Result, io};
use crate::procs;
use crate::state::{Paths, Phase, SetState};

/// Writes one line per hypervisor of every set, with a header.
///
/// # Errors
/// [`crate::Error::Io`] or [`crate::Error::StateParse`].
pub fn list(paths: &Paths, out: &mut dyn Write) -> Result<()> {
    let mut rows = vec![[
        "SET".to_string(),
        "STATE".to_string(),
        "HYPERVISOR".to_string(),
        "IP".to_string(),
        "KIND".to_string(),
        "ENDPOINT".to_string(),
        "CONTAINERD".to_string(),
    ]];
    for name in SetState::list_names(paths)? {
        let Some(state) = SetState::load(paths, &name)? else {
            continue;
        };
        for hv in &state.hypervisors {
            let config = paths.hypervisor(&name, &hv.name).containerd_config;
            let containerd = match hv.containerd_pid {
                Some(pid) if procs::alive_with(pid, &config.to_string_lossy()) => {
                    format!("{pid} running")
                }
                Some(pid) => format!("{pid} dead"),
                None => "-".to_string(),
            };
            rows.push([
                name.clone(),
                match state.phase {
                    Phase::Creating => "creating",
                    Phase::Ready => "ready",
                }
                .to_string(),
                hv.name.clone(),
                hv.ip.to_string(),
                hv.visibility.as_str().to_string(),
                hv.cri_endpoint_uri
                    .clone()
                    .unwrap_or_else(|| format!("unix://{}", hv.socket.display())),
                containerd,
            ]);
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
