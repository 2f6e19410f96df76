//! The crate's error type.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use ipnet::Ipv4Net;

/// Everything that can go wrong while creating, destroying or listing sets.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid set name {name:?}: {reason}")]
    InvalidSetName { name: String, reason: &'static str },
    #[error("invalid set size ({private} private, {public} public): {reason}")]
    InvalidSize {
        private: usize,
        public: usize,
        reason: &'static str,
    },
    #[error("set {name} already exists (state in {path})")]
    AlreadyExists { name: String, path: PathBuf },
    #[error("no free /24 left in {pool} for set {name}")]
    NoFreeSubnet { name: String, pool: Ipv4Net },
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("cannot parse the output of `{command}`")]
    ParseOutput {
        command: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("i/o on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {path} is invalid")]
    StateParse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} of hypervisor {hypervisor} exited before it was ready (log: {log})")]
    DiedEarly {
        what: &'static str,
        hypervisor: String,
        log: PathBuf,
    },
    #[error("{what} of hypervisor {hypervisor} not ready after {timeout:?} (log: {log})")]
    NotReady {
        what: &'static str,
        hypervisor: String,
        timeout: Duration,
        log: PathBuf,
    },
    #[error("no image tarballs (*.tar) in {dir}")]
    NoImages { dir: PathBuf },
    #[error("the mutual-TLS front of hypervisor {hypervisor}: {message}")]
    Front { hypervisor: String, message: String },
    #[error("cri on hypervisor {hypervisor} failed")]
    Cri {
        hypervisor: String,
        // Boxed: the CRI error is large and would bloat every `Result` of this crate.
        #[source]
        source: Box<oi_cri::Error>,
    },
    #[error("cannot start an async runtime for cri calls")]
    AsyncRuntime(#[source] std::io::Error),
    #[error("cannot signal process {pid}")]
    Signal {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("processes {pids:?} of set {set} survived SIGKILL")]
    Unkillable { set: String, pids: Vec<u32> },
    #[error("cannot render the hypervisor manifests")]
    Manifest(#[source] serde_yaml_ng::Error),
    #[error("set {set} does not exist")]
    NoSuchSet { set: String },
    #[error("set {set} has no host {host} (its hosts: {known})")]
    NoSuchHost {
        set: String,
        host: String,
        known: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Maps an i/o error on `path` (closure form, for `map_err`).
pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
