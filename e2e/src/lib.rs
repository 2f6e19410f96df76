//! End-to-end scenarios of the `oi` CLI on real local hypervisors: real containerd, etcd and
//! haproxy in network namespaces made by `oi-local-hypervisor-set`, with the kube stand-in in
//! place of the Kubernetes binaries. The scenarios live in `tests/`; this crate is their
//! harness:
//!
//! ```text
//!  LocalSet::create ── oi-local-hypervisor-set create ──► Hypervisor manifests
//!        │                                                     │ stdin
//!        │            Oi::run(["cluster","inject",..]) ◄───────┘
//!        │            Oi::run(["reconcile",..]) ──► World (stdout) + Summary (stderr)
//!        │                                             │
//!        │                  kubectl version ◄── admin kubeconfig (through the ingress)
//!        │                  etcdctl member list ◄── storageClientEndpoints + minted client cert
//!        ▼
//!  Drop: oi-local-hypervisor-set destroy (also when the test panics)
//! ```
//!
//! Binaries are found in the workspace target directory next to the test executable
//! (`cargo nextest run --workspace` builds every binary of the workspace first).

pub use oi_manager_testsupport::apiserver_standin::ObjectSource;
use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use oi_local_hypervisor_set::state::SetState;
use oi_local_hypervisor_set::{Paths, RealSystem, System as _};
use serde_yaml_ng::Value;

/// Host commands every scenario needs.
pub const REQUIRED_COMMANDS: [&str; 8] = [
    "ip",
    "nsenter",
    "containerd",
    "runc",
    "ctr",
    "haproxy",
    "kubectl",
    "etcdctl",
];

/// The image repository the offline image set is named under (see HACKING.md).
pub const IMAGE_REPOSITORY: &str = "localhost/oneinfra";

/// Where kubectl is installed on these machines.
pub const KUBECTL: &str = "/usr/bin/kubectl";

/// The directory of the offline image tarballs: `OI_IMAGES_DIR`, else `<workspace>/target/oi-images`.
pub fn images_dir() -> PathBuf {
    oi_testsupport::images_dir()
}

/// Gates a scenario on root, the host commands and the offline images; see
/// [`oi_testsupport::require`]. Returns `false` when the scenario must be skipped.
pub fn prerequisites(test: &str) -> bool {
    if !oi_testsupport::require_root_and_commands(test, &REQUIRED_COMMANDS) {
        return false;
    }
    let dir = images_dir();
    let has = |prefix: &str| {
        std::fs::read_dir(&dir).is_ok_and(|entries| {
            entries
                .filter_map(std::result::Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
        })
    };
    let images = ["pause_", "etcd_", "haproxy_", "busybox_", "kube-apiserver_"];
    oi_testsupport::require(
        test,
        &format!(
            "image tarballs {images:?} in {} (cargo xtask images)",
            dir.display()
        ),
        images.iter().all(|i| has(i)),
    )
}

/// The directory holding the workspace's binaries, derived from the running test executable
/// (`<target>/<profile>/deps/<test>-<hash>`).
///
/// # Errors
/// When the executable's path cannot be read or has no such ancestors.
pub fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the test executable")?;
    let deps = exe
        .parent()
        .with_context(|| format!("{} has no parent directory", exe.display()))?;
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent()
            .with_context(|| format!("{} has no parent directory", deps.display()))?
    } else {
        deps
    };
    Ok(dir.to_path_buf())
}

/// A built binary of the workspace, by name.
///
/// # Errors
/// When it is not there, naming the binary and how to build it.
pub fn binary(name: &str) -> Result<PathBuf> {
    let path = bin_dir()?.join(name);
    ensure!(
        path.is_file(),
        "binary `{name}` not found at {}: build it first (`cargo build --workspace --bins`, as \
         scripts/test.sh does; `cargo nextest run` builds only the binaries of packages with \
         integration tests)",
        path.display()
    );
    Ok(path)
}

/// Every file under `dir` (directories that cannot be read are passed over), sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// What a command printed, with its exit status.
#[derive(Debug, Clone)]
pub struct Run {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    fn from_output(output: Output, elapsed: Duration) -> Self {
        Run {
            success: output.status.success(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            elapsed,
        }
    }

    /// `Ok(self)` when the command succeeded, else an error with its stderr.
    ///
    /// # Errors
    /// When the command exited non-zero.
    pub fn ok(self, what: &str) -> Result<Self> {
        ensure!(
            self.success,
            "{what} failed (exit {:?}) after {:.1?}:\n{}",
            self.code,
            self.elapsed,
            self.stderr
        );
        Ok(self)
    }

    /// The summary line `oi reconcile` printed on stderr.
    ///
    /// # Errors
    /// When there is none, or it is not exactly of the documented shape.
    pub fn summary(&self) -> Result<Summary> {
        let line = self
            .stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("reconciled "))
            .with_context(|| format!("no summary line on stderr:\n{}", self.stderr))?;
        line.parse()
    }
}

/// Runs a command with `stdin` on its standard input, capturing both outputs.
///
/// # Errors
/// When the command cannot be started or waited for.
pub fn run_command(command: &mut Command, stdin: &str) -> Result<Run> {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {command:?}"))?;
    let mut input = child
        .stdin
        .take()
        .context("child has no stdin although it was piped")?;
    let stdin = stdin.to_owned();
    // Write from another thread: a large world would fill the pipe while the child fills its
    // stdout.
    let writer = std::thread::spawn(move || input.write_all(stdin.as_bytes()));
    let output = child
        .wait_with_output()
        .with_context(|| format!("cannot wait for {command:?}"))?;
    match writer.join() {
        Ok(Ok(())) => {}
        // The child may legitimately exit without reading all of its input.
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Ok(Err(e)) => return Err(e).context("cannot write the child's stdin"),
        Err(_) => bail!("the stdin writer thread panicked"),
    }
    Ok(Run::from_output(output, started.elapsed()))
}

/// Runs `oi ARGS` with `stdin`, always with the offline image repository in the environment.
///
/// # Errors
/// When `oi` is not built or cannot be run (a non-zero exit is not an error: see [`Run::ok`]).
pub fn oi(args: &[&str], stdin: &str) -> Result<Run> {
    let bin = binary("oi")?;
    run_command(
        Command::new(bin)
            .args(args)
            .env("OI_IMAGE_REPOSITORY", IMAGE_REPOSITORY),
        stdin,
    )
}

/// `oi cluster inject --name NAME --control-plane-replicas REPLICAS` over `manifests`: the
/// manifests with the new cluster added.
///
/// # Errors
/// As [`oi`], and when the inject fails.
pub fn inject_cluster(manifests: &str, name: &str, replicas: u32) -> Result<String> {
    let replicas = replicas.to_string();
    inject_cluster_with(manifests, name, &["--control-plane-replicas", &replicas])
}

/// `oi cluster inject --name NAME FLAGS...` over `manifests`: the manifests with the new
/// cluster added.
///
/// # Errors
/// As [`oi`], and when the inject fails.
pub fn inject_cluster_with(manifests: &str, name: &str, flags: &[&str]) -> Result<String> {
    let mut args = vec!["cluster", "inject", "--name", name];
    args.extend_from_slice(flags);
    Ok(oi(&args, manifests)?
        .ok(&format!("oi cluster inject {name}"))?
        .stdout)
}

/// `oi join-token inject --cluster CLUSTER` over `world`: the new world, and the token it
/// printed on stderr.
///
/// # Errors
/// As [`oi`], when the inject fails or prints no token.
pub fn inject_join_token(world: &str, cluster: &str) -> Result<(String, String)> {
    let run = oi(&["join-token", "inject", "--cluster", cluster], world)?
        .ok(&format!("oi join-token inject {cluster}"))?;
    let token = run
        .stderr
        .lines()
        .map(str::trim)
        .find(|l| oi_api::validation::is_bootstrap_token(l))
        .with_context(|| format!("no token on oi join-token inject's stderr:\n{}", run.stderr))?
        .to_string();
    Ok((run.stdout, token))
}

/// `oi reconcile --image-repository localhost/oneinfra EXTRA...` over `world`.
///
/// # Errors
/// As [`oi`].
pub fn reconcile(world: &str, extra: &[&str]) -> Result<Run> {
    let mut args = vec!["reconcile", "--image-repository", IMAGE_REPOSITORY];
    args.extend_from_slice(extra);
    oi(&args, world)
}

/// The counts of `oi reconcile`'s summary line:
/// `reconciled N clusters: X ready, Y not ready; pods created a, replaced b, unchanged c,
/// removed d; files written e; mutating CRI calls f; cluster API writes g`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub clusters: u64,
    pub ready: u64,
    pub not_ready: u64,
    pub pods_created: u64,
    pub pods_replaced: u64,
    pub pods_unchanged: u64,
    pub pods_removed: u64,
    pub files_written: u64,
    pub mutating_cri_calls: u64,
    /// Objects created, updated or deleted inside the clusters, through their APIs.
    pub cluster_api_writes: u64,
    /// Pods of clusters or components the manifests do not hold, when there are any
    /// (`; orphan pods N (left running)`, or `(removed)` with `--prune`), and whether they
    /// were removed.
    pub orphan_pods: Option<(u64, bool)>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reconciled {} clusters: {} ready, {} not ready; pods created {}, replaced {}, \
             unchanged {}, removed {}; files written {}; mutating CRI calls {}; \
             cluster API writes {}",
            self.clusters,
            self.ready,
            self.not_ready,
            self.pods_created,
            self.pods_replaced,
            self.pods_unchanged,
            self.pods_removed,
            self.files_written,
            self.mutating_cri_calls,
            self.cluster_api_writes
        )?;
        if let Some((n, removed)) = self.orphan_pods {
            let what = if removed { "removed" } else { "left running" };
            write!(f, "; orphan pods {n} ({what})")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Summary {
    type Err = anyhow::Error;

    fn from_str(line: &str) -> Result<Self> {
        let numbers: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .with_context(|| format!("summary line {line:?}: a count does not fit u64"))?;
        let (counts, orphans) = match numbers.len() {
            10 => (&numbers[..], None),
            11 => (
                &numbers[..10],
                Some((numbers[10], line.trim_end().ends_with("(removed)"))),
            ),
            n => bail!("summary line {line:?}: expected 10 or 11 counts, found {n}"),
        };
        let [
            clusters,
            ready,
            not_ready,
            pods_created,
            pods_replaced,
            pods_unchanged,
            pods_removed,
            files_written,
            mutating_cri_calls,
            cluster_api_writes,
        ] = counts[..]
        else {
            bail!("summary line {line:?}: expected 10 counts");
        };
        let summary = Summary {
            clusters,
            ready,
            not_ready,
            pods_created,
            pods_replaced,
            pods_unchanged,
            pods_removed,
            files_written,
            mutating_cri_calls,
            cluster_api_writes,
            orphan_pods: orphans,
        };
        // Rendering back must give the very same line: this checks every word between counts.
        ensure!(
            summary.to_string() == line.trim_end(),
            "summary line {line:?} is not of the documented shape {:?}",
            summary.to_string()
        );
        Ok(summary)
    }
}

/// A set of local hypervisors that is destroyed when dropped, also when the test panics.
#[derive(Debug)]
pub struct LocalSet {
    name: String,
    /// The Hypervisor manifests `create` printed.
    pub manifests: String,
    pub create_time: Duration,
}

impl LocalSet {
    /// `oi-local-hypervisor-set create` with a name unique to this process and `tag`.
    ///
    /// # Errors
    /// When the binary is missing or `create` fails (its stderr is in the error).
    pub fn create(tag: &str, private: usize, public: usize, tcp: bool) -> Result<Self> {
        Self::create_with_workers(tag, private, public, tcp, 0)
    }

    /// [`LocalSet::create`] with `workers` hosts behind a NAT router (`--workers`).
    ///
    /// # Errors
    /// As [`LocalSet::create`].
    pub fn create_with_workers(
        tag: &str,
        private: usize,
        public: usize,
        tcp: bool,
        workers: usize,
    ) -> Result<Self> {
        let name = format!("e{tag}{}", std::process::id());
        oi_testsupport::record_test_set(&name);
        let (private, public, workers) =
            (private.to_string(), public.to_string(), workers.to_string());
        let mut args = vec![
            "create",
            "--name",
            &name,
            "--size-private",
            &private,
            "--size-public",
            &public,
            "--workers",
            &workers,
        ];
        if tcp {
            args.push("--tcp");
        }
        // Own the set from here on: a half-created set is destroyed too.
        let mut set = LocalSet {
            name: name.clone(),
            manifests: String::new(),
            create_time: Duration::ZERO,
        };
        let run = run_command(
            Command::new(binary("oi-local-hypervisor-set")?)
                .args(&args)
                .env("OI_IMAGES_DIR", images_dir()),
            "",
        )?
        .ok(&format!("oi-local-hypervisor-set create --name {name}"))?;
        set.manifests = run.stdout;
        set.create_time = run.elapsed;
        Ok(set)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The set's state file (hypervisors, sockets, containerd PIDs).
    ///
    /// # Errors
    /// When it cannot be read or does not exist.
    pub fn state(&self) -> Result<SetState> {
        SetState::load(&Paths::default(), &self.name)?
            .with_context(|| format!("set {} has no state file", self.name))
    }

    /// The address of the set's first public hypervisor.
    ///
    /// # Errors
    /// When the state cannot be read or there is no public hypervisor.
    pub fn public_ip(&self) -> Result<std::net::Ipv4Addr> {
        self.state()?
            .hypervisors
            .iter()
            .find(|h| h.visibility == oi_local_hypervisor_set::plan::Visibility::Public)
            .map(|h| h.ip)
            .with_context(|| format!("set {} has no public hypervisor", self.name))
    }

    /// The set's workers (`--workers`), from its state file.
    ///
    /// # Errors
    /// When the state cannot be read.
    pub fn workers(&self) -> Result<Vec<oi_local_hypervisor_set::state::WorkerState>> {
        Ok(self.state()?.nat.map(|n| n.workers).unwrap_or_default())
    }

    /// `oi-local-hypervisor-set exec --name SET HOST -- ARGS...`: `args` run in `host`'s
    /// network namespace.
    ///
    /// # Errors
    /// When the binary is not built.
    pub fn exec(&self, host: &str, args: &[&str]) -> Result<Command> {
        let mut c = Command::new(binary("oi-local-hypervisor-set")?);
        c.args(["exec", "--name", &self.name, host, "--"])
            .args(args);
        Ok(c)
    }

    /// Runs `args` on `host` to the end.
    ///
    /// # Errors
    /// As [`LocalSet::exec`], or when the command cannot be run.
    pub fn run_on(&self, host: &str, args: &[&str]) -> Result<Run> {
        run_command(&mut self.exec(host, args)?, "")
    }

    /// The host directory a hypervisor of this set sees as /var/lib/oneinfra.
    pub fn var_lib_oneinfra(&self, hypervisor: &str) -> PathBuf {
        Paths::default()
            .hypervisor(&self.name, hypervisor)
            .var_lib_oneinfra
    }

    /// The host directory a hypervisor of this set sees as /var/log/oneinfra (pod logs).
    pub fn var_log_oneinfra(&self, hypervisor: &str) -> PathBuf {
        Paths::default()
            .hypervisor(&self.name, hypervisor)
            .var_log_oneinfra
    }

    /// The host directory a hypervisor of this set sees as /etc/oneinfra.
    pub fn etc_oneinfra(&self, hypervisor: &str) -> PathBuf {
        Paths::default()
            .hypervisor(&self.name, hypervisor)
            .etc_oneinfra
    }

    /// Kills a hypervisor's containerd (SIGKILL: its containers keep running, as after a
    /// crash). Returns the PID it had.
    ///
    /// # Errors
    /// When the hypervisor or its PID is unknown, or `kill` fails.
    pub fn kill_containerd(&self, hypervisor: &str) -> Result<u32> {
        let pid = self
            .state()?
            .hypervisors
            .iter()
            .find(|h| h.name == hypervisor)
            .and_then(|h| h.containerd_pid)
            .with_context(|| format!("set {}: no containerd PID for {hypervisor}", self.name))?;
        run_command(Command::new("kill").args(["-KILL", &pid.to_string()]), "")?
            .ok(&format!("kill -KILL {pid}"))?;
        Ok(pid)
    }

    /// Loses a hypervisor altogether, as a machine that died: its containerd SIGKILLed (its
    /// containers keep running, cut off), then its link down. It stays lost until the
    /// returned guard is dropped, which brings it back so that the set can be destroyed.
    ///
    /// # Errors
    /// When the hypervisor is unknown, or `kill` or `ip` fail.
    pub fn lose(&self, hypervisor: &str) -> Result<LostHypervisor<'_>> {
        let veth = self
            .state()?
            .hypervisors
            .iter()
            .find(|h| h.name == hypervisor)
            .map(|h| h.host_veth.clone())
            .with_context(|| format!("set {} has no hypervisor {hypervisor}", self.name))?;
        // Owned from here on: whatever happens next is undone on drop.
        let lost = LostHypervisor {
            set: self,
            hypervisor: hypervisor.to_string(),
            veth: veth.clone(),
        };
        self.kill_containerd(hypervisor)?;
        run_command(Command::new("ip").args(["link", "set", &veth, "down"]), "")?
            .ok("ip link set down")?;
        Ok(lost)
    }

    /// Starts a hypervisor's containerd again the way `create` does, records its PID in the
    /// state file (so `destroy` stops it) and waits for its socket. The local set has no
    /// restart command of its own.
    ///
    /// # Errors
    /// When the hypervisor is unknown or containerd does not come up.
    pub fn restart_containerd(&self, hypervisor: &str) -> Result<u32> {
        let paths = Paths::default();
        let files = paths.hypervisor(&self.name, hypervisor);
        let mut state = self.state()?;
        let entry = state
            .hypervisors
            .iter_mut()
            .find(|h| h.name == hypervisor)
            .with_context(|| format!("set {} has no hypervisor {hypervisor}", self.name))?;
        // The hypervisor's name is also its network namespace's.
        let pid = RealSystem.start_containerd(hypervisor, &files)?;
        entry.containerd_pid = Some(pid);
        state.save(&paths)?;
        RealSystem.wait_containerd(hypervisor, pid, &files)?;
        // The socket accepts connections before containerd's CRI service has restored its
        // state ("server is not initialized yet"); `create` hides that behind image imports.
        eventually(Duration::from_secs(30), || {
            cri_version(hypervisor, &files.socket)
        })?;
        Ok(pid)
    }

    /// Every pod sandbox of the set's hypervisors (cluster pods and the fronts alike), as
    /// `(hypervisor, namespace/name)`, sorted.
    ///
    /// # Errors
    /// When the state cannot be read or a runtime does not answer.
    pub fn pods(&self) -> Result<Vec<(String, String)>> {
        let mut all = Vec::new();
        for h in self.state()?.hypervisors {
            for pod in self.pods_on(&h.name)? {
                all.push((h.name.clone(), pod));
            }
        }
        all.sort();
        Ok(all)
    }

    /// The pod sandboxes of one hypervisor of the set, as `namespace/name`, sorted.
    ///
    /// # Errors
    /// When the hypervisor is unknown or its runtime does not answer.
    pub fn pods_on(&self, hypervisor: &str) -> Result<Vec<String>> {
        let sandboxes = self.with_cri(hypervisor, |client| async move {
            Ok(client.list_sandboxes(None).await?)
        })?;
        let mut pods: Vec<String> = sandboxes
            .into_iter()
            .filter_map(|s| s.metadata)
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .collect();
        pods.sort();
        Ok(pods)
    }

    /// Stops and removes the pod sandbox named `pod` on `hypervisor` (its containers die with
    /// it), as a crashed or deleted pod would go.
    ///
    /// # Errors
    /// When the hypervisor is unknown, the pod is not there, or the CRI calls fail.
    pub fn remove_pod(&self, hypervisor: &str, pod: &str) -> Result<()> {
        self.with_cri(hypervisor, |client| async move {
            let sandboxes = client.list_sandboxes(None).await?;
            let found = sandboxes
                .iter()
                .find(|s| s.metadata.as_ref().is_some_and(|m| m.name == pod))
                .with_context(|| format!("no pod {pod} on {hypervisor}"))?;
            client.stop_and_remove_sandbox(&found.id).await?;
            Ok(())
        })
    }

    /// Every container named `name` (e.g. `kube-apiserver`) on the set's hypervisors, as
    /// `(hypervisor, container id, started at in ns)`, sorted: a container restarted or
    /// replaced shows as another id or start time.
    ///
    /// # Errors
    /// When the state cannot be read or a runtime does not answer.
    pub fn container_starts(&self, name: &str) -> Result<Vec<(String, String, i64)>> {
        let mut all = Vec::new();
        for h in self.state()?.hypervisors {
            let found = self.with_cri(&h.name, |client| async move {
                let mut out = Vec::new();
                for c in client.list_containers(None).await? {
                    if c.metadata.as_ref().is_some_and(|m| m.name == name) {
                        let status = client.container_status(&c.id).await?;
                        out.push((c.id.clone(), status.started_at));
                    }
                }
                Ok(out)
            })?;
            all.extend(found.into_iter().map(|(id, at)| (h.name.clone(), id, at)));
        }
        all.sort();
        Ok(all)
    }

    /// Runs `f` with a CRI client of `hypervisor` (its Unix socket), on a runtime of its own.
    fn with_cri<T, F, Fut>(&self, hypervisor: &str, f: F) -> Result<T>
    where
        F: FnOnce(oi_cri::CriClient) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let socket = self
            .state()?
            .hypervisors
            .iter()
            .find(|h| h.name == hypervisor)
            .map(|h| h.socket.clone())
            .with_context(|| format!("set {} has no hypervisor {hypervisor}", self.name))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a tokio runtime")?;
        runtime.block_on(async {
            let client = oi_cri::CriClient::connect(
                hypervisor,
                oi_cri::CriEndpoint::Unix(socket),
                oi_cri::ClientOptions::default(),
            )
            .await?;
            f(client).await
        })
    }

    /// The image of every container on `hypervisor` (its `ctr containers ls`, pod sandboxes
    /// included, the mutual-TLS front's left out).
    ///
    /// # Errors
    /// As [`LocalSet::containers`].
    pub fn container_images(&self, hypervisor: &str) -> Result<Vec<String>> {
        Ok(self
            .containers()?
            .into_iter()
            .filter(|(h, _)| h == hypervisor)
            .flat_map(|(_, listing)| {
                listing
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    /// Names of every container in the `k8s.io` namespace of each hypervisor's containerd,
    /// as `ctr containers ls` reports them (ids, images and runtimes), per hypervisor.
    ///
    /// # Errors
    /// When the state cannot be read or `ctr` fails.
    pub fn containers(&self) -> Result<Vec<(String, String)>> {
        let state = self.state()?;
        let mut all = Vec::new();
        for h in &state.hypervisors {
            let run = run_command(
                Command::new("ctr").arg("--address").arg(&h.socket).args([
                    "-n",
                    "k8s.io",
                    "containers",
                    "ls",
                ]),
                "",
            )?
            .ok(&format!("ctr containers ls on {}", h.name))?;
            // Without the mutual-TLS front's pod (`--tcp`): it is the hypervisor's, not a
            // cluster's.
            let front = front_ids(&h.name, &h.socket)?;
            let kept: Vec<&str> = run
                .stdout
                .lines()
                .filter(|l| {
                    l.split_whitespace()
                        .next()
                        .is_none_or(|id| !front.contains(id))
                })
                .collect();
            all.push((h.name.clone(), format!("{}\n", kept.join("\n"))));
        }
        Ok(all)
    }
}

/// The sandbox and container ids of a hypervisor's mutual-TLS front pod (none without one).
fn front_ids(hypervisor: &str, socket: &Path) -> Result<std::collections::BTreeSet<String>> {
    use oi_cri::HypervisorRuntime as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = oi_cri::CriClient::connect(
            hypervisor,
            oi_cri::CriEndpoint::Unix(socket.to_path_buf()),
            oi_cri::ClientOptions::default(),
        )
        .await?;
        let selector = [("oneinfra/role".to_string(), "cri-front".to_string())].into();
        let mut ids = std::collections::BTreeSet::new();
        for pod in client.list_pods(&selector).await? {
            ids.insert(pod.id.clone());
            ids.extend(pod.containers.iter().map(|c| c.id.clone()));
        }
        Ok(ids)
    })
}

/// `oi cluster apiserver-ca --cluster CLUSTER` over `world`, written to `path`: the CA a
/// worker is given to trust.
///
/// # Errors
/// As [`oi`], when the command fails or the file cannot be written.
pub fn write_apiserver_ca(world: &str, cluster: &str, path: &Path) -> Result<()> {
    let pem = oi(&["cluster", "apiserver-ca", "--cluster", cluster], world)?
        .ok(&format!("oi cluster apiserver-ca {cluster}"))?
        .stdout;
    std::fs::write(path, pem).with_context(|| path.display().to_string())
}

/// `dir/kubelet`: a link to the kube stand-in, which plays the kubelet under that name.
///
/// # Errors
/// When the stand-in is not built or the link cannot be made.
pub fn kubelet_standin(dir: &Path) -> Result<PathBuf> {
    let link = dir.join("kubelet");
    std::os::unix::fs::symlink(binary("kube-standin")?, &link)
        .with_context(|| link.display().to_string())?;
    Ok(link)
}

/// Where a worker finds the cluster it joins.
#[derive(Debug, Clone, Copy)]
pub struct JoinTarget<'a> {
    /// `status.apiServerEndpoint`.
    pub endpoint: &'a str,
    /// The API server CA (`oi cluster apiserver-ca`).
    pub ca: &'a Path,
    pub token: &'a str,
    /// The kubelet the printed command runs (the stand-in, under the name `kubelet`).
    pub kubelet: &'a Path,
}

/// A worker of a local set (`--workers`), as a platform engineer uses one: commands run in
/// its network namespace, behind its NAT. Its files go under `root` (`--root-dir`); its VPN
/// interface has a name unique on the machine (wireguard-go's sockets are machine-wide).
#[derive(Debug)]
pub struct Worker<'s> {
    pub set: &'s LocalSet,
    pub host: String,
    pub root: PathBuf,
    pub interface: String,
    /// Its containerd's CRI socket.
    pub socket: PathBuf,
}

impl<'s> Worker<'s> {
    /// Worker `n` (from 1) of `set`, its files under `dir`.
    ///
    /// # Errors
    /// When the set has no such worker.
    pub fn new(set: &'s LocalSet, n: usize, dir: &Path) -> Result<Self> {
        let state = set
            .workers()?
            .into_iter()
            .nth(n - 1)
            .with_context(|| format!("set {} has no worker {n}", set.name()))?;
        let root = dir.join(&state.name);
        std::fs::create_dir_all(&root).with_context(|| root.display().to_string())?;
        Ok(Worker {
            set,
            host: state.name,
            root,
            interface: format!("oi{}w{n}", std::process::id() % 1_000_000),
            socket: state.socket,
        })
    }

    /// `oi node join --nodename NODE ...` on this worker, output piped.
    ///
    /// # Errors
    /// When a binary is not built.
    pub fn join_command(&self, node: &str, to: &JoinTarget<'_>, timeout: &str) -> Result<Command> {
        let oi = binary("oi")?;
        let runtime = format!("unix://{}", self.socket.display());
        let (oi, ca, root, kubelet) = (
            oi.display().to_string(),
            to.ca.display().to_string(),
            self.root.display().to_string(),
            to.kubelet.display().to_string(),
        );
        let mut c = self.set.exec(
            &self.host,
            &[
                &oi,
                "node",
                "join",
                "--nodename",
                node,
                "--apiserver-endpoint",
                to.endpoint,
                "--apiserver-ca-cert-file",
                &ca,
                "--root-dir",
                &root,
                "--kubelet-binary",
                &kubelet,
                "--vpn-interface",
                &self.interface,
                "--container-runtime-endpoint",
                &runtime,
                "--timeout",
                timeout,
            ],
        )?;
        c.env("OI_JOIN_TOKEN", to.token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Ok(c)
    }

    /// Runs a join to its end: (success, stderr).
    ///
    /// # Errors
    /// When it cannot be run.
    pub fn join(&self, node: &str, to: &JoinTarget<'_>) -> Result<(bool, String)> {
        let out = self.join_command(node, to, "20s")?.output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Starts the kubelet command a join printed, on this worker (the stand-in reporting
    /// Kubernetes `version`); its log goes to `log`.
    ///
    /// # Errors
    /// When it cannot be started.
    pub fn start_kubelet(&self, command_line: &str, version: &str, log: &Path) -> Result<Kubelet> {
        let argv: Vec<&str> = command_line.split_whitespace().collect();
        let mut c = self.set.exec(&self.host, &argv)?;
        c.env("KUBE_STANDIN_VERSION", version)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).with_context(|| log.display().to_string())?);
        Ok(Kubelet(c.spawn().context("starting the kubelet")?))
    }

    /// Files under its root, relative, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut found: Vec<String> = files_under(&self.root)
            .iter()
            .filter_map(|p| p.strip_prefix(&self.root).ok())
            .map(|rel| rel.display().to_string())
            .collect();
        found.sort();
        found
    }
}

/// The kubelet command a successful join printed (the line after "start the kubelet with:").
pub fn kubelet_command_of(join_stderr: &str) -> Option<String> {
    join_stderr
        .lines()
        .skip_while(|l| !l.contains("start the kubelet with:"))
        .nth(1)
        .map(|l| l.trim().to_string())
}

/// A kubelet process, killed when dropped, also when the test panics.
#[derive(Debug)]
pub struct Kubelet(pub std::process::Child);

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// When a call was made and how it ended.
type Calls = std::sync::Arc<std::sync::Mutex<Vec<(Instant, std::result::Result<(), String>)>>>;

/// Calls a cluster's API (`GET /readyz`, as `kubectl get --raw`, or any kubectl command)
/// with a kubeconfig every 100 ms, on a thread of its own, until finished or dropped; records
/// when each call was made and how it ended, in the order made.
pub struct ApiCaller {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    calls: Calls,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ApiCaller {
    pub fn start(kubeconfig: &Path) -> ApiCaller {
        Self::start_with(kubeconfig, |_| {
            ["get", "--raw", "/readyz"].map(str::to_string).to_vec()
        })
    }

    /// Calls `kubectl --request-timeout=5s ARGS`, the arguments of call `i` (from 0) being
    /// `args(i)`.
    pub fn start_with(
        kubeconfig: &Path,
        args: impl Fn(usize) -> Vec<String> + Send + 'static,
    ) -> ApiCaller {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let calls: Calls = std::sync::Arc::default();
        let (s, c, k) = (
            std::sync::Arc::clone(&stop),
            std::sync::Arc::clone(&calls),
            kubeconfig.to_path_buf(),
        );
        let thread = std::thread::spawn(move || {
            let mut i = 0;
            while !s.load(Ordering::Relaxed) {
                let at = Instant::now();
                let mut call = vec!["--request-timeout=5s".to_string()];
                call.extend(args(i));
                i += 1;
                let call: Vec<&str> = call.iter().map(String::as_str).collect();
                let result = match kubectl(&k, &call) {
                    Ok(run) if run.success => Ok(()),
                    Ok(run) => Err(run.stderr.trim().to_string()),
                    Err(e) => Err(e.to_string()),
                };
                c.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((at, result));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        ApiCaller {
            stop,
            calls,
            thread: Some(thread),
        }
    }

    /// How many calls were made so far.
    pub fn made(&self) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Waits (at most `timeout`) until at least `n` calls were made.
    ///
    /// # Errors
    /// Fewer than `n` made by then.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self.made() < n {
            ensure!(
                Instant::now() < deadline,
                "{} of {n} calls made after {timeout:?}",
                self.made()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops calling; every call with when it was made and its failure, if it failed.
    pub fn finish_timed(mut self) -> Vec<(Instant, Option<String>)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls
            .iter()
            .map(|(at, r)| (*at, r.as_ref().err().cloned()))
            .collect()
    }

    /// Stops calling; (calls made, the failures' messages).
    pub fn finish(self) -> (usize, Vec<String>) {
        let calls = self.finish_timed();
        let failed = calls.iter().filter_map(|(_, e)| e.clone()).collect();
        (calls.len(), failed)
    }
}

impl Drop for ApiCaller {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `kubectl --kubeconfig K ARGS...`.
///
/// # Errors
/// When kubectl cannot be run (a non-zero exit is not an error: see [`Run::ok`]).
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<Run> {
    run_command(
        Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args),
        "",
    )
}

/// Asks a hypervisor's CRI service for its version.
///
/// # Errors
/// When it cannot be reached or does not answer.
pub fn cri_version(hypervisor: &str, socket: &Path) -> Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a tokio runtime")?;
    let version = runtime.block_on(async {
        let client = oi_cri::CriClient::connect(
            hypervisor,
            oi_cri::CriEndpoint::Unix(socket.to_path_buf()),
            oi_cri::ClientOptions::default(),
        )
        .await?;
        client.version().await
    })?;
    Ok(version.runtime_version)
}

/// A hypervisor lost by [`LocalSet::lose`]; dropping it brings the hypervisor back (its link
/// up, its containerd started), however the test ends.
pub struct LostHypervisor<'s> {
    set: &'s LocalSet,
    hypervisor: String,
    veth: String,
}

impl Drop for LostHypervisor<'_> {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "set", &self.veth, "up"])
            .status();
        if let Err(e) = self.set.restart_containerd(&self.hypervisor) {
            eprintln!("cannot restart containerd on {}: {e:#}", self.hypervisor);
        }
    }
}

impl Drop for LocalSet {
    /// Destroys the set; `destroy` converges, so a failed attempt (a mount or namespace still
    /// busy while the last processes exit) is retried twice. What still fails is printed
    /// (captured for a passing test: `scripts/test.sh` names and destroys what is left).
    fn drop(&mut self) {
        let destroy = || {
            binary("oi-local-hypervisor-set").and_then(|bin| {
                run_command(
                    Command::new(bin).args(["destroy", "--name", &self.name]),
                    "",
                )?
                .ok(&format!(
                    "oi-local-hypervisor-set destroy --name {}",
                    self.name
                ))
            })
        };
        let mut result = destroy();
        for attempt in 1..3 {
            if result.is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500 * attempt));
            result = destroy();
        }
        if let Err(e) = result {
            eprintln!(
                "warning: cannot destroy local hypervisor set {}: {e:#}",
                self.name
            );
        }
    }
}

/// The documents of a world, as printed by `oi`.
#[derive(Debug, Clone)]
pub struct World {
    pub text: String,
    pub documents: Vec<Value>,
}

impl World {
    /// Parses a multi-document YAML stream.
    ///
    /// # Errors
    /// When it is not YAML.
    pub fn parse(text: &str) -> Result<Self> {
        let mut documents = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let value = <Value as serde::Deserialize>::deserialize(doc)
                .context("the world is not a YAML stream")?;
            if !value.is_null() {
                documents.push(value);
            }
        }
        Ok(World {
            text: text.to_owned(),
            documents,
        })
    }

    /// The objects of a manager's store as `oi` would print them, for the same queries.
    ///
    /// # Errors
    /// When they do not print (they always should).
    pub fn of_store(store: &impl ObjectSource) -> Result<Self> {
        use oi_api::Resource as _;
        let mut world = oi_api::World::default();
        for h in store.hypervisors() {
            world.hypervisors.insert(h.key(), h);
        }
        for c in store.clusters() {
            world.clusters.insert(c.key(), c);
        }
        for c in store.components() {
            world.components.insert(c.key(), c);
        }
        World::parse(&world.to_yaml()?)
    }

    /// Documents of a kind.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.documents
            .iter()
            .filter(move |d| str_at(d, &["kind"]) == Some(kind))
    }

    /// The Cluster named `name`, if any.
    pub fn cluster(&self, name: &str) -> Option<&Value> {
        self.of_kind("Cluster")
            .find(|c| str_at(c, &["metadata", "name"]) == Some(name))
    }

    /// The Cluster named `name`.
    ///
    /// # Errors
    /// When there is none.
    pub fn require_cluster(&self, name: &str) -> Result<&Value> {
        self.cluster(name)
            .with_context(|| format!("no Cluster {name} in the world:\n{}", self.text))
    }

    /// The hypervisor component `name` is placed on, if it is.
    pub fn hypervisor_of(&self, name: &str) -> Option<&str> {
        self.of_kind("Component")
            .find(|c| str_at(c, &["metadata", "name"]) == Some(name))
            .and_then(|c| str_at(c, &["spec", "hypervisor"]))
    }

    /// The Components of cluster `name`.
    pub fn components_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.of_kind("Component")
            .filter(move |c| str_at(c, &["spec", "cluster"]) == Some(name))
    }

    /// A condition of cluster `name`: `(status, message)`.
    ///
    /// # Errors
    /// When the cluster or the condition is missing.
    pub fn condition(&self, name: &str, type_: &str) -> Result<(String, String)> {
        let cluster = self.require_cluster(name)?;
        let conditions = at(cluster, &["status", "conditions"])
            .and_then(Value::as_sequence)
            .with_context(|| format!("cluster {name} has no status.conditions"))?;
        let condition = conditions
            .iter()
            .find(|c| str_at(c, &["type"]) == Some(type_))
            .with_context(|| format!("cluster {name} has no {type_} condition: {conditions:?}"))?;
        Ok((
            str_at(condition, &["status"])
                .unwrap_or_default()
                .to_owned(),
            str_at(condition, &["message"])
                .unwrap_or_default()
                .to_owned(),
        ))
    }

    /// The cluster's `status.storageClientEndpoints`, sorted by member.
    ///
    /// # Errors
    /// When the cluster is missing or has none.
    pub fn storage_client_endpoints(&self, name: &str) -> Result<Vec<String>> {
        let cluster = self.require_cluster(name)?;
        let map = at(cluster, &["status", "storageClientEndpoints"])
            .and_then(Value::as_mapping)
            .with_context(|| format!("cluster {name} has no status.storageClientEndpoints"))?;
        let endpoints: Vec<String> = map
            .values()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        ensure!(
            !endpoints.is_empty(),
            "cluster {name}: status.storageClientEndpoints is empty"
        );
        Ok(endpoints)
    }

    /// Whether any Hypervisor's `status.allocatedPorts` names cluster `name`.
    pub fn hypervisor_ports_of(&self, name: &str) -> Vec<String> {
        self.of_kind("Hypervisor")
            .flat_map(|h| {
                let hypervisor = str_at(h, &["metadata", "name"]).unwrap_or_default();
                at(h, &["status", "allocatedPorts"])
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .filter(|p| str_at(p, &["cluster"]) == Some(name))
                    .map(move |p| format!("{hypervisor}: {p:?}"))
            })
            .collect()
    }
}

impl World {
    /// The world with cluster `name`'s `spec.controlPlaneReplicas` set to `replicas`, as YAML.
    ///
    /// # Errors
    /// When the cluster is missing or the documents cannot be written back.
    pub fn with_replicas(&self, name: &str, replicas: u32) -> Result<String> {
        self.with_spec_field(name, "controlPlaneReplicas", replicas.into())
    }

    /// The world with cluster `name`'s `spec.FIELD` set to `value`, as YAML.
    ///
    /// # Errors
    /// When the cluster is missing or the documents cannot be written back.
    pub fn with_spec_field(&self, name: &str, field: &str, value: Value) -> Result<String> {
        let mut documents = self.documents.clone();
        let cluster = documents
            .iter_mut()
            .find(|d| {
                str_at(d, &["kind"]) == Some("Cluster")
                    && str_at(d, &["metadata", "name"]) == Some(name)
            })
            .with_context(|| format!("no Cluster {name} in the world"))?;
        let spec = cluster
            .get_mut("spec")
            .and_then(Value::as_mapping_mut)
            .with_context(|| format!("cluster {name} has no spec"))?;
        spec.insert(field.into(), value);
        let mut text = String::new();
        for document in &documents {
            text.push_str("---\n");
            text.push_str(&serde_yaml_ng::to_string(document).context("cannot write YAML")?);
        }
        Ok(text)
    }
}

/// Runs `oi reconcile` over `world` until it reports every cluster ready, at most `runs`
/// times (membership changes may take more than one pass); returns the last run, its
/// summary and the number of runs.
///
/// # Errors
/// When `oi` cannot run, prints no summary, or is still not ready after `runs` runs.
pub fn reconcile_until_ready(world: &str, runs: usize) -> Result<(Run, Summary, usize)> {
    let mut input = world.to_owned();
    let mut last_stderr = String::new();
    for attempt in 1..=runs {
        let run = reconcile(&input, &[])?;
        let summary = run.summary()?;
        if run.success && summary.not_ready == 0 {
            return Ok((run, summary, attempt));
        }
        ensure!(
            !run.stdout.trim().is_empty(),
            "oi reconcile printed no world (exit {:?}):\n{}",
            run.code,
            run.stderr
        );
        // Shown with `--nocapture`: why a pass was not enough.
        eprintln!(
            "oi reconcile pass {attempt}/{runs} not ready:\n{}",
            run.stderr
        );
        input = run.stdout;
        last_stderr = run.stderr;
    }
    bail!("not every cluster is ready after {runs} reconciles; last stderr:\n{last_stderr}")
}

/// The value at a path of mapping keys.
pub fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

/// The string at a path of mapping keys.
pub fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str)
}

/// Writes a file readable by its owner only (private keys, kubeconfigs).
///
/// # Errors
/// When it cannot be created or written.
pub fn write_private(path: &Path, contents: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Writes the admin kubeconfig of `cluster` (`oi cluster admin-kubeconfig`) into `dir`.
///
/// # Errors
/// When `oi` fails or the file cannot be written.
pub fn admin_kubeconfig(world: &World, cluster: &str, dir: &Path) -> Result<PathBuf> {
    let run = oi(
        &["cluster", "admin-kubeconfig", "--cluster", cluster],
        &world.text,
    )?
    .ok("oi cluster admin-kubeconfig")?;
    let path = dir.join(format!("{cluster}.kubeconfig"));
    write_private(&path, &run.stdout)?;
    Ok(path)
}

/// `kubectl --kubeconfig K version -o json`, parsed.
///
/// # Errors
/// When kubectl fails or prints something else than JSON.
pub fn kubectl_version(kubeconfig: &Path) -> Result<serde_json::Value> {
    let run = run_command(
        Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--request-timeout", "10s", "version", "-o", "json"]),
        "",
    )?
    .ok("kubectl version")?;
    serde_json::from_str(&run.stdout)
        .with_context(|| format!("kubectl version printed no JSON:\n{}", run.stdout))
}

/// The server gitVersion kubectl reports through `kubeconfig`.
///
/// # Errors
/// As [`kubectl_version`], or when the answer has no serverVersion.gitVersion.
pub fn server_git_version(kubeconfig: &Path) -> Result<String> {
    let version = kubectl_version(kubeconfig)?;
    version
        .pointer("/serverVersion/gitVersion")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("no serverVersion.gitVersion in {version}"))
}

/// The version a cluster runs, as its `spec.kubernetesVersion` says, without a leading `v`.
///
/// # Errors
/// When the cluster or the field is missing.
pub fn cluster_version(world: &World, cluster: &str) -> Result<String> {
    let c = world.require_cluster(cluster)?;
    str_at(c, &["spec", "kubernetesVersion"])
        .map(|v| v.trim_start_matches('v').to_owned())
        .with_context(|| format!("cluster {cluster} has no spec.kubernetesVersion"))
}

/// etcdctl talking to one cluster's etcd with a client certificate freshly minted from the
/// cluster's etcd client CA, trusting its etcd server CA. Files live in a private tempdir.
#[derive(Debug)]
pub struct Etcdctl {
    dir: tempfile::TempDir,
    endpoints: String,
}

impl Etcdctl {
    /// Prepares the certificates of `cluster` and its endpoints from `status.storageClientEndpoints`.
    ///
    /// # Errors
    /// When the cluster lacks a CA or endpoints, or a file cannot be written.
    pub fn new(world: &World, cluster: &str) -> Result<Self> {
        let c = world.require_cluster(cluster)?;
        let field = |path: &[&str]| {
            str_at(c, path).with_context(|| format!("cluster {cluster} has no {}", path.join(".")))
        };
        let server_ca = field(&["spec", "etcdServer", "ca", "certificate"])?;
        let client_ca = oi_pki::CaKind::EtcdClient.load(
            field(&[
                "spec",
                "certificateAuthorities",
                "etcdClient",
                "certificate",
            ])?,
            field(&["spec", "certificateAuthorities", "etcdClient", "privateKey"])?,
        )?;
        let now = time::OffsetDateTime::now_utc();
        let leaf = client_ca.issue(
            &oi_pki::LeafSpec::client(oi_pki::CaKind::EtcdClient, "oi-e2e", &[]),
            now,
            time::Duration::hours(1),
        )?;
        let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
        std::fs::write(dir.path().join("ca.crt"), server_ca)
            .context("cannot write the etcd server CA")?;
        std::fs::write(dir.path().join("client.crt"), &leaf.certificate_pem)
            .context("cannot write the etcd client certificate")?;
        write_private(&dir.path().join("client.key"), &leaf.private_key_pem)?;
        Ok(Etcdctl {
            dir,
            endpoints: world.storage_client_endpoints(cluster)?.join(","),
        })
    }

    /// The same, asking `endpoint` alone.
    #[must_use]
    pub fn only(mut self, endpoint: &str) -> Self {
        self.endpoints = endpoint.to_string();
        self
    }

    /// Runs `etcdctl ARGS` against every endpoint.
    ///
    /// # Errors
    /// When etcdctl cannot run or fails.
    pub fn run(&self, args: &[&str]) -> Result<Run> {
        let dir = self.dir.path();
        run_command(
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={}", self.endpoints))
                .arg(format!("--cacert={}", dir.join("ca.crt").display()))
                .arg(format!("--cert={}", dir.join("client.crt").display()))
                .arg(format!("--key={}", dir.join("client.key").display()))
                .arg("--command-timeout=10s")
                .args(args),
            "",
        )?
        .ok(&format!("etcdctl {}", args.join(" ")))
    }

    /// The certificate (PEM) that the etcd member at `endpoint` (`https://host:port`) serves,
    /// as `openssl s_client` receives it when presenting this client certificate.
    ///
    /// # Errors
    /// When openssl cannot run or prints no certificate.
    pub fn served_certificate(&self, endpoint: &str) -> Result<String> {
        let dir = self.dir.path();
        let host_port = endpoint.trim_start_matches("https://");
        let run = run_command(
            Command::new("openssl")
                .args(["s_client", "-connect", host_port])
                .arg("-CAfile")
                .arg(dir.join("ca.crt"))
                .arg("-cert")
                .arg(dir.join("client.crt"))
                .arg("-key")
                .arg(dir.join("client.key")),
            "",
        )?;
        let begin = "-----BEGIN CERTIFICATE-----";
        let end = "-----END CERTIFICATE-----";
        let start = run
            .stdout
            .find(begin)
            .with_context(|| format!("{endpoint} served no certificate:\n{}", run.stderr))?;
        let stop = run.stdout[start..]
            .find(end)
            .map(|i| start + i + end.len())
            .with_context(|| format!("{endpoint}: truncated certificate"))?;
        Ok(run.stdout[start..stop].to_owned())
    }

    /// The name of the member that leads, as the members say (`endpoint status -w json`).
    ///
    /// # Errors
    /// As [`Etcdctl::run`], or when no member names a started member as leader.
    pub fn leader(&self) -> Result<String> {
        let status = self.run(&["endpoint", "status", "-w", "json"])?;
        let status: serde_json::Value = serde_json::from_str(&status.stdout)
            .with_context(|| format!("endpoint status printed no JSON:\n{}", status.stdout))?;
        let leader = status
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|s| s.pointer("/Status/leader")?.as_u64())
            .ok_or_else(|| anyhow!("no member names a leader: {status}"))?;
        let list = self.run(&["member", "list", "-w", "json"])?;
        let list: serde_json::Value = serde_json::from_str(&list.stdout)
            .with_context(|| format!("member list printed no JSON:\n{}", list.stdout))?;
        list.get("members")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .find(|m| m.get("ID").and_then(serde_json::Value::as_u64) == Some(leader))
            .and_then(|m| m.get("name")?.as_str())
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("leader {leader} is not a started member: {list}"))
    }

    /// `member list -w json`: `(name, is_learner)` of each member that has started (has a name).
    ///
    /// # Errors
    /// As [`Etcdctl::run`], or on unexpected JSON.
    pub fn started_members(&self) -> Result<Vec<(String, bool)>> {
        let run = self.run(&["member", "list", "-w", "json"])?;
        let list: serde_json::Value = serde_json::from_str(&run.stdout)
            .with_context(|| format!("member list printed no JSON:\n{}", run.stdout))?;
        let members = list
            .get("members")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| anyhow!("member list has no members: {list}"))?;
        let mut started: Vec<(String, bool)> = members
            .iter()
            .filter_map(|m| {
                let name = m.get("name")?.as_str().filter(|n| !n.is_empty())?;
                let learner = m
                    .get("isLearner")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false);
                Some((name.to_owned(), learner))
            })
            .collect();
        started.sort();
        Ok(started)
    }

    /// Waits up to `timeout` for exactly `count` started members, all voting; returns them.
    ///
    /// # Errors
    /// The last member list (or etcdctl's error) when time runs out.
    pub fn wait_voting_members(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<(String, bool)>> {
        eventually(timeout, || {
            let members = self.started_members()?;
            ensure!(
                members.len() == count && members.iter().all(|(_, learner)| !learner),
                "want {count} voting members, have: {members:?}"
            );
            Ok(members)
        })
    }
}

/// After the only cluster on `set` was deleted through a manager's `store`: each hypervisor's
/// ports released (and some freed), no file entry, no container and no pod log directory
/// left.
///
/// # Errors
/// Naming the first hypervisor with something left, or when `ctr` fails.
pub fn nothing_left(store: &impl ObjectSource, set: &LocalSet) -> Result<()> {
    for h in store.hypervisors() {
        let (name, status) = (&h.metadata.name, &h.status);
        ensure!(
            status.allocated_ports.is_empty(),
            "{name}: ports still allocated: {:?}",
            status.allocated_ports
        );
        ensure!(!status.freed_ports.is_empty(), "{name}: no port was freed");
        ensure!(
            status.files.is_empty(),
            "{name}: files left: {:?}",
            status.files
        );
    }
    for (hypervisor, ls) in set.containers()? {
        // Only the header line.
        ensure!(ls.lines().count() == 1, "{hypervisor} still runs:\n{ls}");
        // Nor a pod's log directory (the hypervisor's own CRI front, in its namespace, is
        // not a cluster's).
        let logs = set.var_log_oneinfra(&hypervisor).join("pods");
        let front = format!("{}_", oi_cri_front::FRONT_NAMESPACE);
        let left: Vec<String> = std::fs::read_dir(&logs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with(&front))
            .collect();
        ensure!(
            left.is_empty(),
            "{hypervisor}: pod log directories left in {}: {left:?}",
            logs.display()
        );
    }
    Ok(())
}

/// The `oi_manager_hypervisor_reachable` lines `/metrics` shows when every hypervisor in
/// `store` is reachable.
pub fn all_reachable_metrics(store: &impl ObjectSource) -> Vec<String> {
    store
        .hypervisors()
        .iter()
        .map(|h| {
            format!(
                "oi_manager_hypervisor_reachable{{hypervisor=\"{}\"}} 1",
                h.metadata.name
            )
        })
        .collect()
}

/// Retries `f` until it succeeds or `timeout` passes; returns the last error then.
///
/// # Errors
/// The last error of `f` when time runs out.
pub fn eventually<T>(timeout: Duration, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("still failing after {timeout:?}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The manager's context as the e2e scenarios run it: an in-process store, real hypervisors
/// (CRI, HTTPS), `--image-repository localhost/oneinfra`, short requeues and backoffs.
pub type ManagerCtx = oi_manager::controller::Context<
    oi_manager_testsupport::memory::MemoryStore,
    oi_engine::CriConnector,
    oi_engine::RealNetwork,
>;

/// A [`ManagerCtx`] over `store`.
pub fn manager_context(
    store: &std::sync::Arc<oi_manager_testsupport::memory::MemoryStore>,
) -> std::sync::Arc<ManagerCtx> {
    manager_context_with(store, |_| {})
}

/// [`manager_context`] with its options changed by `tune` first.
pub fn manager_context_with(
    store: &std::sync::Arc<oi_manager_testsupport::memory::MemoryStore>,
    tune: impl FnOnce(&mut oi_manager::controller::ManagerOptions),
) -> std::sync::Arc<ManagerCtx> {
    use oi_manager::controller::ManagerOptions;
    let repository = Some(IMAGE_REPOSITORY.to_string());
    let defaults = ManagerOptions::default();
    let options = ManagerOptions {
        plan: oi_planner::PlanOptions {
            render: oi_planner::render::RenderOptions {
                image_repository: repository.clone(),
            },
            ..defaults.plan.clone()
        },
        execute: oi_engine::ExecuteOptions {
            max_wait: Duration::from_secs(60),
            ..defaults.execute.clone()
        },
        requeue_not_ready: Duration::from_secs(1),
        backoff_min: Duration::from_millis(500),
        backoff_max: Duration::from_secs(5),
        ..defaults
    };
    let mut options = options;
    tune(&mut options);
    let connector = oi_engine::CriConnector {
        options: oi_cri::ClientOptions {
            toolbox_image: oi_api::versions::INFRA
                .toolbox
                .reference(repository.as_deref()),
            ..oi_cri::ClientOptions::default()
        },
    };
    std::sync::Arc::new(oi_manager::controller::Context::new(
        std::sync::Arc::clone(store),
        connector,
        oi_engine::RealNetwork::default(),
        options,
        std::sync::Arc::new(oi_manager::metrics::Metrics::new()),
    ))
}

/// The manager's in-process loop ([`oi_manager_testsupport::driver::Driver`]) until `done`
/// holds of the store, at most `timeout`.
///
/// # Panics
/// When `done` does not hold in time (the store's events are shown).
pub fn run_manager_until(
    runtime: &tokio::runtime::Runtime,
    ctx: &std::sync::Arc<ManagerCtx>,
    timeout: Duration,
    done: impl Fn(&oi_manager_testsupport::memory::MemoryStore) -> bool + Send + Sync,
) {
    let driver = oi_manager_testsupport::driver::Driver::new(std::sync::Arc::clone(ctx));
    if let Err(e) = runtime.block_on(driver.run_until(done, timeout)) {
        panic!("{e:#}\nevents: {:#?}", ctx.store.events());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn summary_round_trips() {
        let line = "reconciled 2 clusters: 1 ready, 1 not ready; pods created 3, replaced 0, \
                    unchanged 4, removed 1; files written 12; mutating CRI calls 40; \
                    cluster API writes 27";
        let s: Summary = line.parse().unwrap();
        assert_eq!(
            s,
            Summary {
                clusters: 2,
                ready: 1,
                not_ready: 1,
                pods_created: 3,
                pods_replaced: 0,
                pods_unchanged: 4,
                pods_removed: 1,
                files_written: 12,
                mutating_cri_calls: 40,
                cluster_api_writes: 27,
                orphan_pods: None,
            }
        );
        assert_eq!(s.to_string(), line);
    }

    #[test]
    fn summary_rejects_other_shapes() {
        let wrong = "reconciled 2 clusters: 1 ready, 1 not ready; pods created 3, replaced 0, \
                     unchanged 4, removed 1; files written 12; CRI calls 40";
        assert!(wrong.parse::<Summary>().is_err());
        assert!("reconciled 2 clusters".parse::<Summary>().is_err());
    }

    #[test]
    fn summary_found_on_stderr() {
        let run = Run {
            success: false,
            code: Some(1),
            stdout: String::new(),
            stderr: "warning: x\nreconciled 0 clusters: 0 ready, 0 not ready; pods created 0, \
                     replaced 0, unchanged 0, removed 0; files written 0; mutating CRI calls 0; \
                     cluster API writes 0\n"
                .into(),
            elapsed: Duration::ZERO,
        };
        assert_eq!(run.summary().unwrap().clusters, 0);
    }

    #[test]
    fn world_queries() {
        let world = World::parse(
            "---\nkind: Cluster\nmetadata: {name: c1}\nspec: {kubernetesVersion: 1.37.1}\n\
             status:\n  storageClientEndpoints: {c1-0: 'https://10.0.0.2:30000'}\n  \
             conditions: [{type: ReconcileSucceeded, status: 'True'}]\n---\n\
             kind: Hypervisor\nmetadata: {name: h1}\nstatus:\n  allocatedPorts:\n  \
             - {cluster: c1, component: c1-0, port: 30000}\n---\n\
             kind: Component\nmetadata: {name: c1-0}\nspec: {cluster: c1, role: control-plane}\n",
        )
        .unwrap();
        assert_eq!(
            world.condition("c1", "ReconcileSucceeded").unwrap().0,
            "True"
        );
        assert_eq!(
            world.storage_client_endpoints("c1").unwrap(),
            ["https://10.0.0.2:30000"]
        );
        assert_eq!(world.components_of("c1").count(), 1);
        assert_eq!(world.hypervisor_ports_of("c1").len(), 1);
        assert!(world.hypervisor_ports_of("c2").is_empty());
        assert_eq!(cluster_version(&world, "c1").unwrap(), "1.37.1");
        assert!(world.cluster("c2").is_none());

        let scaled = World::parse(&world.with_replicas("c1", 3).unwrap()).unwrap();
        assert_eq!(scaled.documents.len(), 3);
        assert_eq!(
            at(
                scaled.require_cluster("c1").unwrap(),
                &["spec", "controlPlaneReplicas"]
            )
            .and_then(Value::as_u64),
            Some(3)
        );
        assert!(world.with_replicas("c2", 1).is_err());
    }
}
