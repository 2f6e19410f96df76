//! Where a set lives on disk, and its state file.
//!
//! ```text
//! /var/lib/oi-local-hypervisor-set/<set>/state.json          this file, written atomically
//! /var/lib/oi-local-hypervisor-set/<set>/<hv>/containerd/    containerd root, config, log
//! /var/lib/oi-local-hypervisor-set/<set>/<hv>/host/...       bind-mounted over /var/lib/oneinfra
//!                                                            /etc/oneinfra, /var/log/oneinfra
//! /var/lib/oi-local-hypervisor-set/<set>/<hv>/tls/           front certificates (keys 0600)
//! /run/oi-local-hypervisor-set/<set>/<hv>/cri.sock           containerd socket, state, runc root
//! ```
//!
//! The state file is written before anything is created on the host and updated after each
//! step, so `destroy` always knows what a half-created set may have left behind.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io};
use crate::plan::{NatPlan, SetPlan, Visibility};

/// Roots of all sets' files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// Persistent files: state, containerd roots, certificates.
    pub lib: PathBuf,
    /// Runtime files: sockets, containerd state, runc roots.
    pub run: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            lib: PathBuf::from("/var/lib/oi-local-hypervisor-set"),
            run: PathBuf::from("/run/oi-local-hypervisor-set"),
        }
    }
}

impl Paths {
    pub fn set_lib(&self, set: &str) -> PathBuf {
        self.lib.join(set)
    }

    pub fn set_run(&self, set: &str) -> PathBuf {
        self.run.join(set)
    }

    pub fn state_file(&self, set: &str) -> PathBuf {
        self.set_lib(set).join("state.json")
    }

    /// The lock serialising subnet choice between concurrent `create`s.
    pub fn lock_file(&self) -> PathBuf {
        self.run.join(".lock")
    }

    pub fn hypervisor(&self, set: &str, hypervisor: &str) -> HypervisorPaths {
        let lib = self.set_lib(set).join(hypervisor);
        let run = self.set_run(set).join(hypervisor);
        HypervisorPaths {
            containerd_config: lib.join("containerd/config.toml"),
            containerd_log: lib.join("containerd/containerd.log"),
            containerd_root: lib.join("containerd/root"),
            containerd_state: run.join("containerd"),
            socket: run.join("cri.sock"),
            runc_root: run.join("runc"),
            var_lib_oneinfra: lib.join("host/var/lib/oneinfra"),
            etc_oneinfra: lib.join("host/etc/oneinfra"),
            var_log_oneinfra: lib.join("host/var/log/oneinfra"),
            tls: lib.join("tls"),
            haproxy_config: lib.join("haproxy/haproxy.cfg"),
            haproxy_log: lib.join("haproxy/haproxy.log"),
            lib,
            run,
        }
    }
}

/// Files of one hypervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HypervisorPaths {
    pub lib: PathBuf,
    pub run: PathBuf,
    pub containerd_config: PathBuf,
    pub containerd_log: PathBuf,
    pub containerd_root: PathBuf,
    pub containerd_state: PathBuf,
    pub socket: PathBuf,
    pub runc_root: PathBuf,
    /// Seen as /var/lib/oneinfra by this hypervisor's containerd and containers.
    pub var_lib_oneinfra: PathBuf,
    /// Seen as /etc/oneinfra by this hypervisor's containerd and containers.
    pub etc_oneinfra: PathBuf,
    /// Seen as /var/log/oneinfra (pod logs) by this hypervisor's containerd and containers.
    pub var_log_oneinfra: PathBuf,
    pub tls: PathBuf,
    pub haproxy_config: PathBuf,
    pub haproxy_log: PathBuf,
}

/// How far `create` got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Creating,
    Ready,
}

/// The state file of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetState {
    pub name: String,
    pub phase: Phase,
    pub tcp: bool,
    pub subnet: Ipv4Net,
    pub gateway: Ipv4Addr,
    pub bridge: String,
    pub hypervisors: Vec<HypervisorState>,
    /// Workers behind a NAT router (`create --workers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat: Option<NatState>,
}

/// The router and workers of a set in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatState {
    /// Also the name of its network namespace.
    pub router: String,
    pub router_veth: String,
    pub uplink_ip: Ipv4Addr,
    pub lan: Ipv4Net,
    pub lan_gateway: Ipv4Addr,
    pub workers: Vec<WorkerState>,
}

/// One worker in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerState {
    /// Also the name of its network namespace.
    pub name: String,
    pub ip: Ipv4Addr,
    pub router_port: String,
    /// Its containerd's CRI socket (the kubelet's `--container-runtime-endpoint`).
    pub socket: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd_pid: Option<u32>,
}

impl NatState {
    fn from_plan(set: &str, nat: &NatPlan, paths: &Paths) -> NatState {
        NatState {
            router: nat.router.clone(),
            router_veth: nat.router_veth.clone(),
            uplink_ip: nat.uplink_ip,
            lan: nat.lan,
            lan_gateway: nat.lan_gateway,
            workers: nat
                .workers
                .iter()
                .map(|w| WorkerState {
                    name: w.name.clone(),
                    ip: w.ip,
                    router_port: w.router_port.clone(),
                    socket: paths.hypervisor(set, &w.name).socket,
                    containerd_pid: None,
                })
                .collect(),
        }
    }
}

/// One hypervisor in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HypervisorState {
    /// Also the name of its network namespace.
    pub name: String,
    pub visibility: Visibility,
    pub ip: Ipv4Addr,
    pub host_veth: String,
    pub socket: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub haproxy_pid: Option<u32>,
    /// `tcp://IP:PORT` of the mutual-TLS front, with `--tcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_endpoint_uri: Option<String>,
}

impl SetState {
    /// The initial state of a planned set: nothing started yet.
    pub fn from_plan(plan: &SetPlan, tcp: bool, paths: &Paths) -> Self {
        SetState {
            name: plan.name.clone(),
            phase: Phase::Creating,
            tcp,
            subnet: plan.subnet,
            gateway: plan.gateway,
            bridge: plan.bridge.clone(),
            hypervisors: plan
                .hypervisors
                .iter()
                .map(|h| HypervisorState {
                    name: h.name.clone(),
                    visibility: h.visibility,
                    ip: h.ip,
                    host_veth: h.host_veth.clone(),
                    socket: paths.hypervisor(&plan.name, &h.name).socket,
                    containerd_pid: None,
                    haproxy_pid: None,
                    cri_endpoint_uri: None,
                })
                .collect(),
            nat: plan
                .nat
                .as_ref()
                .map(|n| NatState::from_plan(&plan.name, n, paths)),
        }
    }

    /// Reads a set's state; `Ok(None)` when the set has no state file.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::StateParse`].
    pub fn load(paths: &Paths, set: &str) -> Result<Option<Self>> {
        let path = paths.state_file(set);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| Error::StateParse { path, source })
    }

    /// Writes the state file atomically (temporary file, fsync, rename, fsync of the directory).
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn save(&self, paths: &Paths) -> Result<()> {
        let path = paths.state_file(&self.name);
        // Serialising plain data with string keys cannot fail.
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        write_atomically(&path, &bytes, 0o644)
    }

    /// Names of all sets with a state file, sorted.
    ///
    /// # Errors
    /// [`Error::Io`] when the state root cannot be read.
    pub fn list_names(paths: &Paths) -> Result<Vec<String>> {
        let entries = match std::fs::read_dir(&paths.lib) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&paths.lib)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io(&paths.lib))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if paths.state_file(&name).is_file() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Writes `bytes` to `path` atomically with the given mode from creation, creating parent
/// directories ([`oi_cli_io::write_file`]).
///
/// # Errors
/// [`Error::Io`].
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    oi_cli_io::write_file(path, bytes, mode).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan_set;

    #[test]
    fn state_round_trips_and_lists() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            lib: dir.path().join("lib"),
            run: dir.path().join("run"),
        };
        assert_eq!(SetState::load(&paths, "demo").unwrap(), None);
        let plan = plan_set("demo", 3, 1, 1).unwrap();
        let mut state = SetState::from_plan(&plan, true, &paths);
        state.hypervisors[0].containerd_pid = Some(42);
        state.save(&paths).unwrap();
        assert_eq!(SetState::load(&paths, "demo").unwrap(), Some(state.clone()));
        assert_eq!(SetState::list_names(&paths).unwrap(), ["demo"]);
        assert_eq!(
            state.hypervisors[1].socket,
            dir.path().join("run/demo/demo-public-1/cri.sock")
        );
        std::fs::write(paths.state_file("demo"), b"{").unwrap();
        assert!(matches!(
            SetState::load(&paths, "demo"),
            Err(Error::StateParse { .. })
        ));
    }

    #[test]
    fn atomic_write_sets_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/key.pem");
        write_atomically(&path, b"secret", 0o600).unwrap();
        write_atomically(&path, b"secret2", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"secret2");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
