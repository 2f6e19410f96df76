//! One isolated containerd 1.6 instance: its configuration file, and a process handle that
//! starts it (optionally inside a network namespace and a private mount namespace), waits
//! for its CRI socket, imports image tarballs and tears it down.
//!
//! ```text
//!  ContainerdConfig::in_dir(dir, sandbox_image) --render()--> dir/config.toml
//!  Containerd::spawn(config, SpawnOptions)
//!     nsenter --net=/run/netns/NAME --                    (when netns is given)
//!       unshare --mount --propagation private --          (when bind mounts are given)
//!         sh -c 'mount --bind SRC DST ...; exec "$@"' --
//!           containerd --config dir/config.toml           (same PID as the child we spawned)
//!  .import_images([tarballs])   ctr --address SOCK -n k8s.io images import FILE
//!  .stop()   every pod sandbox stopped + removed through CRI, then SIGTERM, then SIGKILL
//! ```
//!
//! Killing containerd leaves its containers running (their shims outlive it), so `stop`
//! removes every pod through CRI first; [`Containerd::kill`] skips that on purpose, to
//! simulate a crash. Dropping a handle that was not stopped runs `stop` on a helper thread.
//! Each instance has its own root, state, sockets and runc root; shim sockets still go to
//! `/run/containerd/s/` whatever the configuration says (containerd 1.6).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::CriClient;
use crate::endpoint::{ClientOptions, CriEndpoint};

/// Longest Unix socket path the kernel accepts (`sun_path` is 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Errors of the containerd launcher; each names the instance's socket or the file involved.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    #[error(
        "containerd {socket}: socket path is {len} bytes, longer than the {MAX_SOCKET_PATH} a unix socket allows"
    )]
    SocketPathTooLong { socket: PathBuf, len: usize },

    #[error("containerd {socket}: cannot {what} {}", path.display())]
    Io {
        socket: PathBuf,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("containerd {socket}: cannot run {program}")]
    Spawn {
        socket: PathBuf,
        program: String,
        #[source]
        source: std::io::Error,
    },

    #[error("containerd {socket}: exited during startup ({status}); log tail: {log_tail}")]
    ExitedEarly {
        socket: PathBuf,
        status: String,
        log_tail: String,
    },

    #[error(
        "containerd {socket}: CRI socket did not answer within {timeout:?}: {last_error}; log tail: {log_tail}"
    )]
    NotReady {
        socket: PathBuf,
        timeout: Duration,
        last_error: String,
        log_tail: String,
    },

    #[error("containerd {socket}: importing {} failed: {reason}", file.display())]
    Import {
        socket: PathBuf,
        file: PathBuf,
        reason: String,
    },

    #[error("containerd {socket}: tearing down pods failed")]
    Teardown {
        socket: PathBuf,
        #[source]
        source: crate::Error,
    },

    #[error("containerd {socket}: cannot signal pid {pid}: {reason}")]
    Signal {
        socket: PathBuf,
        pid: u32,
        reason: String,
    },
}

/// The paths and images of one isolated containerd instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerdConfig {
    /// Persistent data (content store, snapshots, metadata).
    pub root: PathBuf,
    /// Runtime state.
    pub state: PathBuf,
    /// The gRPC socket (CRI and containerd API); the ttrpc socket is `<socket>.ttrpc`.
    pub socket: PathBuf,
    /// runc's state directory (`--root`), so instances do not see each other's containers.
    pub runc_root: PathBuf,
    /// Fully qualified pause image, e.g. `localhost/oneinfra/pause:3.10.1`.
    pub sandbox_image: String,
    /// Where the configuration file is written.
    pub config_path: PathBuf,
}

impl ContainerdConfig {
    /// Everything under `dir`: `root/`, `state/`, `runc/`, `containerd.sock`, `config.toml`.
    pub fn in_dir(dir: &Path, sandbox_image: impl Into<String>) -> Self {
        ContainerdConfig {
            root: dir.join("root"),
            state: dir.join("state"),
            socket: dir.join("containerd.sock"),
            runc_root: dir.join("runc"),
            sandbox_image: sandbox_image.into(),
            config_path: dir.join("config.toml"),
        }
    }

    /// The CRI endpoint of this instance.
    pub fn endpoint(&self) -> CriEndpoint {
        CriEndpoint::Unix(self.socket.clone())
    }

    /// The containerd 1.6 configuration (version 2). Host-network pods only: the CNI
    /// directories point inside `root` so the host's CNI setup is never picked up; the CRI
    /// streaming server listens on an ephemeral loopback port so instances do not clash.
    pub fn render(&self) -> String {
        let s = |p: &Path| toml_string(&p.to_string_lossy());
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        format!(
            r#"# Generated by oi-cri: one isolated containerd instance.
version = 2
root = {root}
state = {state}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = {socket}

[ttrpc]
  address = {ttrpc}

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[{cri}]
  sandbox_image = {sandbox}
  # This VM's root lacks CAP_SYS_RESOURCE: a negative oom_score_adj makes runc fail.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = {runc_root}

[{cri}.cni]
  bin_dir = {cni_bin}
  conf_dir = {cni_conf}
"#,
            root = s(&self.root),
            state = s(&self.state),
            socket = s(&self.socket),
            ttrpc = toml_string(&format!("{}.ttrpc", self.socket.to_string_lossy())),
            opt = s(&self.root.join("opt")),
            sandbox = toml_string(&self.sandbox_image),
            runc_root = s(&self.runc_root),
            cni_bin = s(&self.root.join("cni/bin")),
            cni_conf = s(&self.root.join("cni/net.d")),
        )
    }
}

/// A TOML basic string. JSON string escapes are a subset of TOML's.
fn toml_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// A host directory bind-mounted over a path inside containerd's private mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    /// The directory on the host, e.g. `/tmp/hv1/var-lib-oneinfra`.
    pub source: PathBuf,
    /// Where containerd and its containers see it, e.g. `/var/lib/oneinfra`.
    pub target: PathBuf,
}

/// How to start the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnOptions {
    /// Network namespace name (under `/run/netns/`) to run in; `None` for the caller's.
    pub netns: Option<String>,
    /// When non-empty, containerd runs in a private mount namespace with these bind mounts
    /// (and so do its shims and containers).
    pub bind_mounts: Vec<BindMount>,
    /// containerd's own stdout and stderr.
    pub log_file: PathBuf,
    /// The containerd executable.
    pub containerd: PathBuf,
    /// Bound on waiting for the CRI socket to answer.
    pub ready_timeout: Duration,
    /// Bound on SIGTERM before SIGKILL when stopping.
    pub stop_timeout: Duration,
}

impl SpawnOptions {
    /// Defaults for an instance whose files live in `dir`: log in `dir/containerd.log`, no
    /// namespaces, 20 s to become ready, 10 s to stop.
    pub fn in_dir(dir: &Path) -> Self {
        SpawnOptions {
            netns: None,
            bind_mounts: Vec::new(),
            log_file: dir.join("containerd.log"),
            containerd: PathBuf::from("containerd"),
            ready_timeout: Duration::from_secs(20),
            stop_timeout: Duration::from_secs(10),
        }
    }
}

/// The shell snippet run inside the private mount namespace: bind mounts given as pairs of
/// positional arguments up to `--`, then `exec` of the rest.
const MOUNT_SCRIPT: &str = r#"set -e
while [ "$1" != "--" ]; do
  mkdir -p "$2"
  mount --bind "$1" "$2"
  shift 2
done
shift
exec "$@""#;

/// The full command line that starts containerd with `config_path` under `options` (pure, so
/// that it is tested without starting anything).
pub fn command_line(config_path: &Path, options: &SpawnOptions) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(netns) = &options.netns {
        // Never `ip netns exec`: it remounts /sys and hides the cgroup v1 mounts.
        argv.extend([
            "nsenter".to_string(),
            format!("--net=/run/netns/{netns}"),
            "--".into(),
        ]);
    }
    if !options.bind_mounts.is_empty() {
        argv.extend(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                MOUNT_SCRIPT,
                "oi-mounts",
            ]
            .map(String::from),
        );
        for m in &options.bind_mounts {
            argv.push(m.source.to_string_lossy().into_owned());
            argv.push(m.target.to_string_lossy().into_owned());
        }
        argv.push("--".into());
    }
    argv.push(options.containerd.to_string_lossy().into_owned());
    argv.push("--config".into());
    argv.push(config_path.to_string_lossy().into_owned());
    argv
}

/// What [`Containerd::stop`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// containerd's PID.
    pub pid: u32,
    /// Pod sandboxes stopped and removed through CRI before the process was signalled.
    pub pods_removed: usize,
    /// Whether SIGTERM was not enough and SIGKILL was sent.
    pub killed: bool,
}

/// A running containerd instance started by us.
#[derive(Debug)]
pub struct Containerd {
    config: ContainerdConfig,
    options: SpawnOptions,
    child: Option<Child>,
    pid: u32,
}

impl Containerd {
    /// Writes the configuration, creates the directories, starts containerd and waits until
    /// its CRI socket answers `Version` (bounded by `options.ready_timeout`).
    ///
    /// # Errors
    /// When a directory or file cannot be written, the process cannot start, exits early, or
    /// does not answer in time (the error carries the tail of its log).
    pub async fn spawn(
        config: ContainerdConfig,
        options: SpawnOptions,
    ) -> Result<Self, ContainerdError> {
        let socket = config.socket.clone();
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(ContainerdError::SocketPathTooLong { socket, len });
        }
        let io = |what: &'static str, path: &Path| {
            let socket = socket.clone();
            let path = path.to_path_buf();
            move |source| ContainerdError::Io {
                socket,
                what,
                path,
                source,
            }
        };
        for dir in [&config.root, &config.state, &config.runc_root] {
            std::fs::create_dir_all(dir).map_err(io("create directory", dir))?;
        }
        if let Some(parent) = config.socket.parent() {
            std::fs::create_dir_all(parent).map_err(io("create directory", parent))?;
        }
        for m in &options.bind_mounts {
            std::fs::create_dir_all(&m.source).map_err(io("create directory", &m.source))?;
        }
        // A stale socket from a killed instance would make the readiness probe lie.
        match std::fs::remove_file(&config.socket) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove stale socket", &config.socket)(e)),
        }
        std::fs::write(&config.config_path, config.render())
            .map_err(io("write configuration", &config.config_path))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&options.log_file)
            .map_err(io("open log file", &options.log_file))?;
        let log_err = log
            .try_clone()
            .map_err(io("open log file", &options.log_file))?;
        let argv = command_line(&config.config_path, &options);
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|source| ContainerdError::Spawn {
                socket: socket.clone(),
                program: argv[0].clone(),
                source,
            })?;
        let pid = child.id();
        let mut handle = Containerd {
            config,
            options,
            child: Some(child),
            pid,
        };
        if let Err(e) = handle.wait_ready().await {
            handle.kill();
            return Err(e);
        }
        tracing::info!(pid, socket = %handle.config.socket.display(), "containerd ready");
        Ok(handle)
    }

    async fn wait_ready(&mut self) -> Result<(), ContainerdError> {
        let deadline = Instant::now() + self.options.ready_timeout;
        let mut last_error = String::from("socket not created yet");
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(ContainerdError::ExitedEarly {
                    socket: self.config.socket.clone(),
                    status: status.to_string(),
                    log_tail: self.log_tail(),
                });
            }
            if self.config.socket.exists() {
                let options = ClientOptions {
                    connect_timeout: Duration::from_secs(1),
                    call_timeout: Duration::from_secs(2),
                    ..ClientOptions::default()
                };
                match CriClient::connect("containerd", self.config.endpoint(), options).await {
                    Ok(_) => return Ok(()),
                    Err(e) => last_error = e.to_string(),
                }
            }
            if Instant::now() >= deadline {
                return Err(ContainerdError::NotReady {
                    socket: self.config.socket.clone(),
                    timeout: self.options.ready_timeout,
                    last_error,
                    log_tail: self.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The last 2 KiB of containerd's log (for error messages).
    pub fn log_tail(&self) -> String {
        let read = || -> std::io::Result<String> {
            let mut f = std::fs::File::open(&self.options.log_file)?;
            let len = f.metadata()?.len();
            f.seek(SeekFrom::Start(len.saturating_sub(2048)))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            Ok(String::from_utf8_lossy(&buf).into_owned())
        };
        read().unwrap_or_else(|e| format!("(cannot read {}: {e})", self.options.log_file.display()))
    }

    /// containerd's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The configuration the instance runs with.
    pub fn config(&self) -> &ContainerdConfig {
        &self.config
    }

    /// The CRI endpoint (its Unix socket).
    pub fn endpoint(&self) -> CriEndpoint {
        self.config.endpoint()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Imports OCI image-layout tarballs into the CRI namespace (`k8s.io`) with `ctr`.
    ///
    /// # Errors
    /// When `ctr` cannot run or fails; the error names the file and carries ctr's stderr.
    pub async fn import_images(&self, files: &[PathBuf]) -> Result<(), ContainerdError> {
        for file in files {
            let output = tokio::process::Command::new("ctr")
                .arg("--address")
                .arg(&self.config.socket)
                .args(["-n", "k8s.io", "images", "import"])
                .arg(file)
                .stdin(Stdio::null())
                .output();
            let output = tokio::time::timeout(Duration::from_secs(300), output)
                .await
                .map_err(|_| ContainerdError::Import {
                    socket: self.config.socket.clone(),
                    file: file.clone(),
                    reason: "timed out after 300s".into(),
                })?
                .map_err(|source| ContainerdError::Spawn {
                    socket: self.config.socket.clone(),
                    program: "ctr".into(),
                    source,
                })?;
            if !output.status.success() {
                return Err(ContainerdError::Import {
                    socket: self.config.socket.clone(),
                    file: file.clone(),
                    reason: format!(
                        "ctr {}: {}",
                        output.status,
                        String::from_utf8_lossy(&output.stderr).trim()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Kills containerd with SIGKILL and reaps it, leaving its containers running (a crash,
    /// for tests of what survives one). Returns the PID. Idempotent.
    pub fn kill(&mut self) -> u32 {
        if let Some(mut child) = self.child.take() {
            if let Err(e) = child.kill() {
                tracing::warn!(pid = self.pid, error = %e, "cannot kill containerd");
            }
            let _ = child.wait();
        }
        self.pid
    }

    /// Stops and removes every pod sandbox through CRI, then sends SIGTERM and, after
    /// `stop_timeout`, SIGKILL. The process is gone when this returns, even on error.
    ///
    /// # Errors
    /// When the pods cannot be removed (containerd is stopped anyway) or signalling fails.
    pub async fn stop(mut self) -> Result<StopReport, ContainerdError> {
        self.stop_inner().await
    }

    async fn stop_inner(&mut self) -> Result<StopReport, ContainerdError> {
        let pid = self.pid;
        if self.child.is_none() {
            return Ok(StopReport {
                pid,
                pods_removed: 0,
                killed: false,
            });
        }
        let teardown = self.remove_all_pods().await;
        let signalled = self.terminate().await;
        let pods_removed = teardown.map_err(|source| ContainerdError::Teardown {
            socket: self.config.socket.clone(),
            source,
        })?;
        Ok(StopReport {
            pid,
            pods_removed,
            killed: signalled?,
        })
    }

    async fn remove_all_pods(&self) -> crate::Result<usize> {
        let options = ClientOptions {
            connect_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(30),
            ..ClientOptions::default()
        };
        let client = CriClient::connect("containerd", self.config.endpoint(), options).await?;
        let sandboxes = client.list_sandboxes(None).await?;
        for sandbox in &sandboxes {
            client.stop_and_remove_sandbox(&sandbox.id).await?;
        }
        Ok(sandboxes.len())
    }

    /// SIGTERM, wait, SIGKILL. Returns whether SIGKILL was needed.
    async fn terminate(&mut self) -> Result<bool, ContainerdError> {
        let Some(mut child) = self.child.take() else {
            return Ok(false);
        };
        // std can only send SIGKILL, and `unsafe` (libc::kill) is forbidden: use kill(1).
        let term = tokio::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .stdin(Stdio::null())
            .output()
            .await;
        let term_error = match term {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => Some(e.to_string()),
        };
        let deadline = Instant::now() + self.options.stop_timeout;
        while term_error.is_none() && Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let killed = child.kill();
        let _ = child.wait();
        match (term_error, killed) {
            (_, Ok(())) => Ok(true),
            (Some(reason), Err(_)) => Err(ContainerdError::Signal {
                socket: self.config.socket.clone(),
                pid: self.pid,
                reason,
            }),
            // SIGTERM worked after all: the process exited between the last poll and SIGKILL.
            (None, Err(_)) => Ok(false),
        }
    }

    /// Restarts a killed instance with the same configuration and options (the pods it had
    /// keep running); waits for the socket like [`Containerd::spawn`].
    ///
    /// # Errors
    /// Like [`Containerd::spawn`].
    pub async fn restart(&mut self) -> Result<u32, ContainerdError> {
        self.kill();
        let mut fresh = Containerd::spawn(self.config.clone(), self.options.clone()).await?;
        // `fresh` without its child drops as a no-op.
        self.child = fresh.child.take();
        self.pid = fresh.pid;
        Ok(self.pid)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_none() {
            return;
        }
        // `stop` is async and Drop may run inside a runtime: run it on a fresh thread with
        // its own runtime, and fall back to SIGKILL when that is impossible.
        let result = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    runtime
                        .block_on(self.stop_inner())
                        .map_err(|e| e.to_string())
                })
                .join()
                .map_err(|_| "teardown thread panicked".to_string())
                .and_then(|r| r)
        });
        if let Err(e) = result {
            tracing::warn!(pid = self.pid, error = %e, "containerd teardown on drop failed");
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests;
