//! The narrow interface the engine drives a hypervisor through, and its real implementation
//! on [`CriClient`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use oi_api::runtime::{ContainerSpec, HostFile, PodSpec, labels};

use crate::client::CriClient;
use crate::error::{Error, Result};
use crate::requests;

/// What [`HypervisorRuntime::ensure_pod`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// No pod with that namespace and name existed; it was created.
    Created,
    /// A pod existed with another spec hash, or not healthy; it was removed and created anew.
    Replaced,
    /// The pod runs the same spec and all its containers run: no mutating call was made.
    Unchanged,
}

/// State of a pod sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodState {
    Ready,
    NotReady,
}

/// State of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One container of an observed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    pub id: String,
    pub name: String,
    pub image: String,
    pub state: ContainerState,
    /// Set once the container exited.
    pub exit_code: Option<i32>,
}

/// An observed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodStatus {
    /// The runtime's sandbox id.
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub state: PodState,
    /// Sorted by name.
    pub containers: Vec<ContainerStatus>,
}

impl PodStatus {
    /// The spec hash the pod was created from, if it carries one.
    pub fn spec_hash(&self) -> Option<&str> {
        self.annotations.get(labels::SPEC_HASH).map(String::as_str)
    }

    /// Whether the sandbox is ready and runs exactly the containers of `spec`, all running,
    /// from the same spec hash: the condition under which `ensure_pod` changes nothing.
    pub fn runs(&self, spec: &PodSpec) -> bool {
        self.state == PodState::Ready
            && self.spec_hash() == Some(spec.content_hash().as_str())
            && self.containers.len() == spec.containers.len()
            && spec.containers.iter().all(|want| {
                self.containers
                    .iter()
                    .any(|c| c.name == want.name && c.state == ContainerState::Running)
            })
    }
}

/// What making a pod run as `spec` takes, given the pods that run now: the one rule the real
/// client, the fake and a dry run share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodDecision<'p> {
    /// No pod of that namespace and name runs: create it.
    Create,
    /// Exactly one runs, as `spec` says ([`PodStatus::runs`]): nothing to do.
    Keep,
    /// Some run, but not as `spec` says (or several do): remove them, then create it.
    Replace { existing: Vec<&'p PodStatus> },
}

/// Decides what `spec` needs among the pods `running` (of any namespace and name).
pub fn pod_decision<'p>(spec: &PodSpec, running: &'p [PodStatus]) -> PodDecision<'p> {
    let existing: Vec<&PodStatus> = running
        .iter()
        .filter(|p| p.namespace == spec.namespace && p.name == spec.name)
        .collect();
    match existing.as_slice() {
        [] => PodDecision::Create,
        [only] if only.runs(spec) => PodDecision::Keep,
        _ => PodDecision::Replace { existing },
    }
}

impl PodDecision<'_> {
    /// The [`Outcome`] of carrying it out.
    pub fn outcome(&self) -> Outcome {
        match self {
            PodDecision::Create => Outcome::Created,
            PodDecision::Keep => Outcome::Unchanged,
            PodDecision::Replace { .. } => Outcome::Replaced,
        }
    }
}

/// How a throwaway container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    /// The last bytes of its output (stdout and stderr), collected when `code` is not 0.
    pub log_tail: String,
}

/// What the engine needs from a hypervisor. The real implementation is [`CriClient`]; the
/// recording [`crate::fake::FakeRuntime`] stands in for it in unit tests.
///
/// Futures are `Send`, so hypervisors can be driven from spawned tasks in parallel. The
/// trait uses `impl Future` returns and is therefore not object safe: take it as a generic.
///
/// # Errors
/// Every method fails with an [`Error`] naming the hypervisor and its endpoint: transport
/// failures and timeouts, runtime refusals ([`Error::Call`]), images that cannot be had
/// ([`Error::ImageUnavailable`]), refused host paths ([`Error::InvalidHostPath`]), helper
/// containers that failed ([`Error::HelperFailed`], with their log tail) and throwaway
/// containers that did not exit in time ([`Error::RunTimeout`]).
///
/// Throwaway pods carry the label [`crate::requests::RUN_LABEL`]; one left behind by a
/// process that died mid-run can be found with `list_pods` on that label and removed.
pub trait HypervisorRuntime: Send + Sync {
    /// The hypervisor's name.
    fn hypervisor(&self) -> &str;

    /// How many mutating calls were made so far (create, start, stop, remove, pull, run, exec).
    fn mutating_calls(&self) -> u64;

    /// Makes the pod `(namespace, name)` run exactly `spec`; see [`Outcome`]. Images are
    /// ensured before an existing pod is touched.
    fn ensure_pod(&self, spec: &PodSpec) -> impl Future<Output = Result<Outcome>> + Send;

    /// Pods whose labels include every pair of `selector` (all pods when empty), sorted by
    /// namespace and name.
    fn list_pods(
        &self,
        selector: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodStatus>>> + Send;

    /// Stops and removes a pod by its id; a pod already gone is not an error.
    fn remove_pod(&self, id: &str) -> impl Future<Output = Result<()>> + Send;

    /// Writes `files` whose hash differs from `known[path]`, through one writer container;
    /// returns `known` updated with the hashes of all `files`. Makes no CRI call when nothing
    /// changed.
    fn write_files(
        &self,
        files: &[HostFile],
        known: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<BTreeMap<String, String>>> + Send;

    /// Removes host paths recursively (`rm -rf`) through one container. Refuses `/` and
    /// relative paths. Makes no CRI call when `paths` is empty.
    fn remove_host_paths(&self, paths: &[String]) -> impl Future<Output = Result<()>> + Send;

    /// The host directory holding the logs of the pod `namespace`/`name`, which outlives the
    /// pod: removed with [`HypervisorRuntime::remove_host_paths`] once the pod is gone for
    /// good.
    fn pod_log_directory(&self, namespace: &str, name: &str) -> String;

    /// Runs `container` once in a throwaway pod (its image ensured first) and waits for it
    /// to exit, at most `timeout`: a one-off job such as restoring an etcd snapshot into a
    /// data directory. The host paths it mounts are checked like written ones.
    ///
    /// # Errors
    /// [`Error::HelperFailed`] (named `job`, with its log tail) when it exits non-zero;
    /// [`Error::RunTimeout`]; runtime and transport errors.
    fn run_job(
        &self,
        job: &'static str,
        container: &ContainerSpec,
        timeout: Duration,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Which of `paths` exist on the hypervisor, through one read-only container; makes no
    /// CRI call when `paths` is empty. Refuses `/` and relative paths.
    fn host_paths_present(
        &self,
        paths: &[String],
    ) -> impl Future<Output = Result<BTreeSet<String>>> + Send;

    /// The last bytes (at most [`LOG_TAIL_BYTES`]) of what the container `container_id`
    /// printed, as plain text, through one read-only container: why a component exited, in
    /// its own words.
    fn log_tail(&self, container_id: &str) -> impl Future<Output = Result<String>> + Send;

    /// Runs `command` in the running container `container_id` (CRI `ExecSync`, at most 30 s):
    /// telling a process to reload its files, for instance.
    ///
    /// # Errors
    /// [`Error::HelperFailed`] (named `job`, with its output) when it exits non-zero; runtime
    /// and transport errors.
    fn exec(
        &self,
        job: &'static str,
        container_id: &str,
        command: &[String],
    ) -> impl Future<Output = Result<()>> + Send {
        async move {
            self.exec_output(job, container_id, command).await?;
            Ok(())
        }
    }

    /// [`HypervisorRuntime::exec`], returning what the command printed on its standard
    /// output: asking a process's admin interface, for instance.
    ///
    /// # Errors
    /// As [`HypervisorRuntime::exec`].
    fn exec_output(
        &self,
        job: &'static str,
        container_id: &str,
        command: &[String],
    ) -> impl Future<Output = Result<String>> + Send;
}

/// What becomes of a throwaway container's log once it exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logs {
    /// Read whatever the exit code (a reader's answer), then removed.
    Always,
    /// Read for the error when it failed, then removed.
    OnFailure,
    /// Its script removes its own log directory as its last act (writers, removers): a
    /// success leaves nothing to read or remove; a failure is read, then removed.
    RemovedByItself,
}

/// How long a log tail is, in bytes.
pub const LOG_TAIL_BYTES: usize = 2048;
/// How often a throwaway container's state is polled.
const POLL: Duration = Duration::from_millis(50);
/// Bound on writer and remover containers.
const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

fn pod_state(state: i32) -> PodState {
    if state == cri::PodSandboxState::SandboxReady as i32 {
        PodState::Ready
    } else {
        PodState::NotReady
    }
}

fn container_state(state: i32) -> ContainerState {
    match cri::ContainerState::try_from(state) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn sorted(m: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    m.into_iter().collect()
}

/// A name suffix unique within this process and very likely across processes.
fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:x}{:x}", nanos & 0xffff_ffff_ffff, n)
}

impl CriClient {
    /// Pods matching `selector` with their containers' states.
    /// Exit codes of exited containers cost one call each: only fetched when `exit_codes`.
    async fn observe(
        &self,
        selector: &BTreeMap<String, String>,
        exit_codes: bool,
    ) -> Result<Vec<PodStatus>> {
        let filter = (!selector.is_empty()).then(|| cri::PodSandboxFilter {
            label_selector: selector
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..Default::default()
        });
        let sandboxes = self.list_sandboxes(filter).await?;
        if sandboxes.is_empty() {
            return Ok(Vec::new());
        }
        let containers = self.list_containers(None).await?;
        let mut pods: Vec<PodStatus> = sandboxes
            .into_iter()
            .map(|s| {
                let metadata = s.metadata.unwrap_or_default();
                let mut containers: Vec<ContainerStatus> = containers
                    .iter()
                    .filter(|c| c.pod_sandbox_id == s.id)
                    .map(|c| ContainerStatus {
                        id: c.id.clone(),
                        name: c
                            .metadata
                            .as_ref()
                            .map(|m| m.name.clone())
                            .unwrap_or_default(),
                        image: c
                            .image
                            .as_ref()
                            .map(|i| i.image.clone())
                            .unwrap_or_default(),
                        state: container_state(c.state),
                        exit_code: None,
                    })
                    .collect();
                containers.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
                PodStatus {
                    id: s.id,
                    namespace: metadata.namespace,
                    name: metadata.name,
                    labels: sorted(s.labels),
                    annotations: sorted(s.annotations),
                    state: pod_state(s.state),
                    containers,
                }
            })
            .collect();
        // Exit codes are only in ContainerStatus; ask for the exited ones.
        for pod in pods.iter_mut().filter(|_| exit_codes) {
            for c in &mut pod.containers {
                if c.state == ContainerState::Exited {
                    match self.container_status(&c.id).await {
                        Ok(status) => c.exit_code = Some(status.exit_code),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        pods.sort_by(|a, b| (&a.namespace, &a.name, &a.id).cmp(&(&b.namespace, &b.name, &b.id)));
        Ok(pods)
    }

    /// Creates the sandbox and starts every container; returns the sandbox id. On failure the
    /// half-made sandbox stays (the next `ensure_pod` sees it unhealthy and replaces it) and
    /// the error is returned.
    async fn create_pod(&self, spec: &PodSpec) -> Result<(String, cri::PodSandboxConfig)> {
        let config = requests::sandbox_config(spec, &self.options().log_root);
        let id = self.run_sandbox(&config).await?;
        for container in &spec.containers {
            let request = requests::create_container_request(&id, container, &config);
            let cid = self.create_container(&request).await?;
            self.start_container(&cid).await?;
        }
        Ok((id, config))
    }

    /// Best effort: the tail of a throwaway pod's container log (when `tail`), and removal of
    /// the pod's log directory, through a log reader container in the same sandbox.
    async fn collect_log(
        &self,
        sandbox_id: &str,
        config: &cri::PodSandboxConfig,
        pod: &PodSpec,
        container: &str,
        tail: bool,
    ) -> String {
        let log_root = self.options().log_root.clone();
        let reader = requests::log_reader_container(&self.options().toolbox_image, &log_root);
        let dir_name = requests::log_directory(pod, "")
            .trim_start_matches('/')
            .to_string();
        let attempt = async {
            self.ensure_image(&reader.image).await?;
            let mut request = requests::create_container_request(sandbox_id, &reader, config);
            if let Some(c) = request.config.as_mut() {
                // The reader's own output is not interesting.
                c.log_path = String::new();
            }
            let id = self.create_container(&request).await?;
            self.start_container(&id).await?;
            let command = requests::log_reader_command(&dir_name, container, LOG_TAIL_BYTES, tail);
            self.exec_sync(&id, &command, 10).await
        };
        match attempt.await {
            Ok(out) => requests::strip_cri_log(&String::from_utf8_lossy(&out.stdout)),
            Err(e) => {
                tracing::warn!(hypervisor = %self.target().hypervisor, error = %e, "cannot read the log of a throwaway container");
                format!("(log unavailable: {e})")
            }
        }
    }

    /// Runs a read-only helper and returns what it printed.
    async fn run_reader(&self, job: &'static str, container: &ContainerSpec) -> Result<String> {
        let exit = self
            .run_collecting(container, HELPER_TIMEOUT, Logs::Always)
            .await?;
        if exit.code != 0 {
            return Err(Error::HelperFailed {
                target: self.target().clone(),
                job,
                exit_code: exit.code,
                log_tail: exit.log_tail,
            });
        }
        Ok(exit.log_tail)
    }

    /// Runs a writer or remover: a helper whose script removes its own log directory as its
    /// last act ([`requests::OWN_LOG_DIR_ENV`]), so a success needs no log reader after it.
    async fn run_helper(&self, job: &'static str, container: &ContainerSpec) -> Result<()> {
        self.run_bounded(job, container, HELPER_TIMEOUT, Logs::RemovedByItself)
            .await
    }

    /// Runs `container` once, at most `timeout`; anything but exit code 0 is an error
    /// naming `job`, with its log tail.
    async fn run_bounded(
        &self,
        job: &'static str,
        container: &ContainerSpec,
        timeout: Duration,
        logs: Logs,
    ) -> Result<()> {
        let exit = self.run_collecting(container, timeout, logs).await?;
        if exit.code != 0 {
            return Err(Error::HelperFailed {
                target: self.target().clone(),
                job,
                exit_code: exit.code,
                log_tail: exit.log_tail,
            });
        }
        Ok(())
    }

    fn check_paths<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Result<()> {
        for path in paths {
            requests::check_host_path(path).map_err(|reason| Error::InvalidHostPath {
                target: self.target().clone(),
                path: path.to_string(),
                reason,
            })?;
        }
        Ok(())
    }
}

impl CriClient {
    /// Makes sure an image is present: pulled only when missing.
    ///
    /// # Errors
    /// [`Error::ImageUnavailable`] when it is missing and cannot be pulled; transport errors.
    pub async fn ensure_image(&self, image: &str) -> Result<()> {
        if self.image_present(image).await? {
            return Ok(());
        }
        match self.pull_image(image).await {
            Ok(_) => Ok(()),
            Err(Error::Call { target, status, .. }) => Err(Error::ImageUnavailable {
                target,
                image: image.to_string(),
                status,
            }),
            Err(e) => Err(e),
        }
    }

    /// Runs `container` once in a throwaway host-network pod, waits for it to exit (at most
    /// `timeout`) and removes the pod whatever happened.
    ///
    /// # Errors
    /// [`Error::RunTimeout`] when it does not exit in time; runtime and transport errors.
    pub async fn run_to_completion(
        &self,
        container: &ContainerSpec,
        timeout: Duration,
    ) -> Result<Exit> {
        self.run_collecting(container, timeout, Logs::OnFailure)
            .await
    }

    /// [`Self::run_to_completion`], its output collected as `logs` says.
    async fn run_collecting(
        &self,
        container: &ContainerSpec,
        timeout: Duration,
        logs: Logs,
    ) -> Result<Exit> {
        self.ensure_image(&container.image).await?;
        let pod = requests::throwaway_pod(container, &unique_suffix());
        let config = requests::sandbox_config(&pod, &self.options().log_root);
        let mut container = std::borrow::Cow::Borrowed(container);
        if logs == Logs::RemovedByItself {
            let own = requests::log_directory(&pod, &self.options().log_root);
            self.check_paths([own.as_str()])?;
            container
                .to_mut()
                .env
                .insert(requests::OWN_LOG_DIR_ENV.to_string(), own);
        }
        let sandbox_id = self.run_sandbox(&config).await?;
        let waited = async {
            let request = requests::create_container_request(&sandbox_id, &container, &config);
            let id = self.create_container(&request).await?;
            self.start_container(&id).await?;
            let deadline = Instant::now() + timeout;
            loop {
                let status = self.container_status(&id).await?;
                if container_state(status.state) == ContainerState::Exited {
                    return Ok(Some(status.exit_code));
                }
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                tokio::time::sleep(POLL).await;
            }
        }
        .await;
        let outcome = match waited {
            // A helper that succeeded has removed its own log directory: no reader needed.
            Ok(Some(0)) if logs == Logs::RemovedByItself => Ok(Exit {
                code: 0,
                log_tail: String::new(),
            }),
            Ok(Some(code)) => {
                let tail = logs == Logs::Always || code != 0;
                let log_tail = self
                    .collect_log(&sandbox_id, &config, &pod, &container.name, tail)
                    .await;
                Ok(Exit {
                    code,
                    log_tail: if tail { log_tail } else { String::new() },
                })
            }
            Ok(None) => {
                let log_tail = self
                    .collect_log(&sandbox_id, &config, &pod, &container.name, true)
                    .await;
                Err(Error::RunTimeout {
                    target: self.target().clone(),
                    container: container.name.clone(),
                    timeout,
                    log_tail,
                })
            }
            Err(e) => {
                let _ = self
                    .collect_log(&sandbox_id, &config, &pod, &container.name, false)
                    .await;
                Err(e)
            }
        };
        // Always clean up; a cleanup failure is reported unless the run already failed.
        let removed = self.stop_and_remove_sandbox(&sandbox_id).await;
        match (outcome, removed) {
            (Ok(exit), Ok(())) => Ok(exit),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), Ok(())) => Err(e),
            (Err(e), Err(cleanup)) => {
                tracing::warn!(hypervisor = %self.target().hypervisor, error = %cleanup, "cannot remove a throwaway pod");
                Err(e)
            }
        }
    }
}

impl HypervisorRuntime for CriClient {
    fn hypervisor(&self) -> &str {
        &self.target().hypervisor
    }

    fn mutating_calls(&self) -> u64 {
        CriClient::mutating_calls(self)
    }

    async fn ensure_pod(&self, spec: &PodSpec) -> Result<Outcome> {
        let every = BTreeMap::new();
        let running = self.every_pod(|| self.observe(&every, false)).await?;
        let decision = pod_decision(spec, &running);
        if decision == PodDecision::Keep {
            return Ok(Outcome::Unchanged);
        }
        let mut images: Vec<&str> = spec.containers.iter().map(|c| c.image.as_str()).collect();
        images.sort_unstable();
        images.dedup();
        for image in images {
            self.ensure_image(image).await?;
        }
        if let PodDecision::Replace { existing } = &decision {
            for pod in existing {
                self.stop_and_remove_sandbox(&pod.id).await?;
            }
        }
        self.create_pod(spec).await?;
        Ok(decision.outcome())
    }

    async fn list_pods(&self, selector: &BTreeMap<String, String>) -> Result<Vec<PodStatus>> {
        self.observe(selector, true).await
    }

    async fn remove_pod(&self, id: &str) -> Result<()> {
        self.stop_and_remove_sandbox(id).await
    }

    async fn write_files(
        &self,
        files: &[HostFile],
        known: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>> {
        self.check_paths(files.iter().map(|f| f.path.as_str()))?;
        let (changed, hashes) = requests::file_writes(files, known);
        let changed: Vec<HostFile> = changed.into_iter().cloned().collect();
        for batch in requests::writer_batches(&changed) {
            let writer = requests::writer_container(&batch, &self.options().toolbox_image);
            self.run_helper("file writer", &writer).await?;
        }
        Ok(hashes)
    }

    fn pod_log_directory(&self, namespace: &str, name: &str) -> String {
        requests::pod_log_directory(namespace, name, &self.options().log_root)
    }

    async fn remove_host_paths(&self, paths: &[String]) -> Result<()> {
        self.check_paths(paths.iter().map(String::as_str))?;
        if paths.is_empty() {
            return Ok(());
        }
        let remover = requests::remover_container(paths, &self.options().toolbox_image);
        self.run_helper("path remover", &remover).await
    }

    async fn run_job(
        &self,
        job: &'static str,
        container: &ContainerSpec,
        timeout: Duration,
    ) -> Result<()> {
        self.check_paths(container.mounts.iter().map(|m| m.host_path.as_str()))?;
        self.run_bounded(job, container, timeout, Logs::OnFailure)
            .await
    }

    async fn host_paths_present(&self, paths: &[String]) -> Result<BTreeSet<String>> {
        self.check_paths(paths.iter().map(String::as_str))?;
        if paths.is_empty() {
            return Ok(BTreeSet::new());
        }
        let prober = requests::prober_container(paths, &self.options().toolbox_image);
        let exit = self.run_reader("path prober", &prober).await?;
        Ok(exit
            .lines()
            .filter(|l| paths.iter().any(|p| p == l))
            .map(str::to_string)
            .collect())
    }

    async fn log_tail(&self, container_id: &str) -> Result<String> {
        let status = self.container_status(container_id).await?;
        if status.log_path.is_empty() {
            return Ok(String::new());
        }
        self.check_paths([status.log_path.as_str()])?;
        let reader = requests::log_tail_container(
            &status.log_path,
            LOG_TAIL_BYTES,
            &self.options().toolbox_image,
        );
        let raw = self.run_reader("log tail reader", &reader).await?;
        Ok(requests::strip_cri_log(&raw))
    }

    async fn exec_output(
        &self,
        job: &'static str,
        container_id: &str,
        command: &[String],
    ) -> Result<String> {
        let out = self.exec_sync(container_id, command, 30).await?;
        if out.exit_code != 0 {
            let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
            log.push_str(&String::from_utf8_lossy(&out.stderr));
            return Err(Error::HelperFailed {
                target: self.target().clone(),
                job,
                exit_code: out.exit_code,
                log_tail: log,
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
