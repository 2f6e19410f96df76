//! A recording, in-memory [`HypervisorRuntime`] for unit tests of the code that drives
//! hypervisors (the engine). Pass it where a [`crate::CriClient`] would go; it keeps pods,
//! images and files in memory, records every mutating call, and follows the same rules as the
//! real client (same spec hash: no call; unchanged file hash: no call).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use oi_api::runtime::{HostFile, PodSpec, labels};

use crate::error::{Error, Result, Target};
use crate::requests::{check_host_path, file_writes};
use crate::runtime::{
    ContainerState, ContainerStatus, HypervisorRuntime, Outcome, PodDecision, PodState, PodStatus,
    pod_decision,
};

/// A mutating call the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    PullImage(String),
    CreatePod {
        namespace: String,
        name: String,
        spec_hash: String,
    },
    RemovePod {
        namespace: String,
        name: String,
    },
    WriteFiles(Vec<String>),
    RemoveHostPaths(Vec<String>),
    /// A command run in a running container.
    Exec {
        job: String,
        container_id: String,
        command: Vec<String>,
    },
    /// A one-off job: its name, image and command line (command then arguments).
    RunJob {
        job: String,
        image: String,
        command: Vec<String>,
    },
}

#[derive(Debug, Default)]
struct State {
    images: BTreeSet<String>,
    unpullable: BTreeSet<String>,
    failing_jobs: BTreeMap<String, String>,
    /// Jobs that ran, by name; never cleared.
    job_runs: BTreeMap<String, u64>,
    pods: BTreeMap<String, PodStatus>,
    files: BTreeMap<String, HostFile>,
    /// Directories the pods' processes keep data in: a container's writable mounts, from
    /// the time it is created until they are removed or lost.
    data_dirs: BTreeSet<String>,
    /// Log tails by container name ([`FakeRuntime::set_log`]).
    logs: BTreeMap<String, String>,
    /// The spec each pod was created from, by pod id.
    specs: BTreeMap<String, PodSpec>,
    /// Containers that exit as soon as they start, by name, with their exit code.
    exit_on_start: BTreeMap<String, i32>,
    /// haproxy's runtime API, by container id ([`FakeHaproxy`]).
    haproxy: BTreeMap<String, FakeHaproxy>,
    /// Connections servers keep through a drain, by server name: how many `show stat`
    /// answers still count one ([`FakeRuntime::hold_sessions`]).
    held_sessions: BTreeMap<String, u32>,
    calls: Vec<Call>,
    next_id: u64,
}

/// What a container's haproxy answers on its runtime API (commands sent with `sh -c
/// '... | nc 127.0.0.1 PORT' COMMANDS`): `show info` (its worker's Pid), `show stat` (the
/// servers it was told about, with their admin state), `set server B/S state|health ...`.
/// A reload (`kill -USR2 1`) starts another worker, which forgets every state, as haproxy
/// does.
#[derive(Debug, Default)]
struct FakeHaproxy {
    worker: u32,
    /// Servers by `backend/server`, with their admin state (`DRAIN`, `MAINT` or `UP`).
    servers: BTreeMap<String, String>,
    /// Servers (`backend/server`) it was told are up (`set server ... health up`).
    up: BTreeSet<String>,
}

impl FakeHaproxy {
    fn answer(&mut self, commands: &str, held: &mut BTreeMap<String, u32>) -> String {
        let mut out = String::new();
        for command in commands.split(';').map(str::trim) {
            let words: Vec<&str> = command.split_whitespace().collect();
            match words.as_slice() {
                ["show", "info"] => {
                    out.push_str(&format!("Name: HAProxy\nPid: {}\n\n", self.worker))
                }
                ["show", "stat"] => {
                    out.push_str("# pxname,svname,scur,status\n");
                    for (name, state) in &self.servers {
                        let (b, s) = name.split_once('/').unwrap_or((name, name));
                        let sessions = match held.get_mut(s) {
                            Some(n) if *n > 0 && state != "UP" => {
                                *n -= 1;
                                1
                            }
                            _ => 0,
                        };
                        out.push_str(&format!("{b},{s},{sessions},{state}\n"));
                    }
                    out.push('\n');
                }
                ["set", "server", name, "state", state] => {
                    let state = match *state {
                        "ready" => "UP",
                        "drain" => "DRAIN",
                        "maint" => "MAINT",
                        _ => {
                            out.push_str("'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n\n");
                            continue;
                        }
                    };
                    self.servers.insert((*name).to_string(), state.to_string());
                    out.push('\n');
                }
                ["set", "server", name, "health", health] => {
                    if *health == "up" {
                        self.up.insert((*name).to_string());
                    }
                    self.servers
                        .entry((*name).to_string())
                        .or_insert_with(|| "UP".to_string());
                    out.push('\n');
                }
                _ => out.push_str("Unknown command.\n\n"),
            }
        }
        out
    }
}

/// The recording fake. Every image can be pulled unless marked with
/// [`FakeRuntime::unpullable`].
#[derive(Debug)]
pub struct FakeRuntime {
    hypervisor: String,
    state: Mutex<State>,
}

impl FakeRuntime {
    pub fn new(hypervisor: impl Into<String>) -> Self {
        FakeRuntime {
            hypervisor: hypervisor.into(),
            state: Mutex::new(State::default()),
        }
    }

    /// The id of the first pod (by namespace, name and id, as `list_pods` orders them) named
    /// `name` whose every container runs, without copying the pods: the simulated network
    /// asks this on every request.
    pub fn running_pod_id(&self, name: &str) -> Option<String> {
        self.state()
            .pods
            .values()
            .filter(|p| {
                p.name == name
                    && p.containers
                        .iter()
                        .all(|c| c.state == ContainerState::Running)
            })
            .min_by(|a, b| (&a.namespace, &a.id).cmp(&(&b.namespace, &b.id)))
            .map(|p| p.id.clone())
    }

    /// The spec the running pod named `name` was created from (see
    /// [`FakeRuntime::running_pod_id`]).
    pub fn running_pod_spec(&self, name: &str) -> Option<PodSpec> {
        let id = self.running_pod_id(name)?;
        self.state().specs.get(&id).cloned()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A test that panicked while holding the lock already failed; keep reading its state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn target(&self) -> Target {
        Target {
            hypervisor: self.hypervisor.clone(),
            endpoint: "fake://".to_string(),
        }
    }

    /// Marks images as already present.
    pub fn with_images<I: IntoIterator<Item = S>, S: Into<String>>(self, images: I) -> Self {
        self.state()
            .images
            .extend(images.into_iter().map(Into::into));
        self
    }

    /// Makes pulling `image` fail, like a missing image with no registry.
    pub fn unpullable(&self, image: &str) {
        self.state().unpullable.insert(image.to_string());
    }

    /// Makes the jobs named `job` ([`HypervisorRuntime::run_job`]) exit 1 with `log` as
    /// their log tail.
    pub fn fail_job(&self, job: &str, log: &str) {
        self.state()
            .failing_jobs
            .insert(job.to_string(), log.to_string());
    }

    /// How many jobs named `job` ran to success (kept by [`FakeRuntime::clear_calls`]).
    pub fn job_runs(&self, job: &str) -> u64 {
        self.state().job_runs.get(job).copied().unwrap_or(0)
    }

    /// Simulates a crash: the container of pod `(namespace, name)` exits with `code`.
    /// Returns whether such a container existed.
    pub fn crash(&self, namespace: &str, name: &str, container: &str, code: i32) -> bool {
        let mut state = self.state();
        let Some(pod) = state
            .pods
            .values_mut()
            .find(|p| p.namespace == namespace && p.name == name)
        else {
            return false;
        };
        match pod.containers.iter_mut().find(|c| c.name == container) {
            Some(c) => {
                c.state = ContainerState::Exited;
                c.exit_code = Some(code);
                true
            }
            None => false,
        }
    }

    /// Loses a directory, as a disk that failed would: it and everything under it are gone
    /// (until a container that mounts it is created again, which makes it anew).
    pub fn lose_path(&self, path: &str) {
        let mut state = self.state();
        let prefix = format!("{}/", path.trim_end_matches('/'));
        state
            .data_dirs
            .retain(|d| d != path && !d.starts_with(&prefix));
        state
            .files
            .retain(|p, _| p != path && !p.starts_with(&prefix));
    }

    /// Makes every container named `container` created from now on exit at once with
    /// `code` (`None`: run again).
    pub fn exit_on_start(&self, container: &str, code: Option<i32>) {
        let mut state = self.state();
        match code {
            Some(code) => state.exit_on_start.insert(container.to_string(), code),
            None => state.exit_on_start.remove(container),
        };
    }

    /// A server taken out of a haproxy (by name, in any backend) still counts a connection in
    /// the next `polls` answers of `show stat`.
    pub fn hold_sessions(&self, server: &str, polls: u32) {
        self.state().held_sessions.insert(server.to_string(), polls);
    }

    /// Sets `backend/server`'s admin state (`DRAIN`, `MAINT`, `UP`) in every haproxy here
    /// that answered its runtime API, as a run stopped between taking a server out and
    /// putting it back leaves it.
    pub fn set_haproxy_server_state(&self, server: &str, admin_state: &str) {
        for h in self.state().haproxy.values_mut() {
            h.servers
                .insert(server.to_string(), admin_state.to_string());
        }
    }

    /// The admin state of `backend/server` in each haproxy here that knows it.
    pub fn haproxy_server_states(&self, server: &str) -> Vec<String> {
        self.state()
            .haproxy
            .values()
            .filter_map(|h| h.servers.get(server).cloned())
            .collect()
    }

    /// The servers (`backend/server`) any haproxy here was told are up since it last
    /// reloaded.
    pub fn haproxy_servers_up(&self) -> BTreeSet<String> {
        self.state()
            .haproxy
            .values()
            .flat_map(|h| h.up.iter().cloned())
            .collect()
    }

    /// What [`HypervisorRuntime::log_tail`] answers for containers named `container`.
    pub fn set_log(&self, container: &str, log: &str) {
        self.state()
            .logs
            .insert(container.to_string(), log.to_string());
    }

    /// Simulates a machine that went away with everything on it: every container of every
    /// pod exits with `code`.
    pub fn crash_all(&self, code: i32) {
        for pod in self.state().pods.values_mut() {
            for c in &mut pod.containers {
                c.state = ContainerState::Exited;
                c.exit_code = Some(code);
            }
        }
    }

    /// Every mutating call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Forgets the recorded calls (the counter of [`HypervisorRuntime::mutating_calls`] too).
    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }

    /// The files on the fake hypervisor, by path.
    pub fn files(&self) -> BTreeMap<String, HostFile> {
        self.state().files.clone()
    }

    fn check_paths<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Result<()> {
        for path in paths {
            check_host_path(path).map_err(|reason| Error::InvalidHostPath {
                target: self.target(),
                path: path.to_string(),
                reason,
            })?;
        }
        Ok(())
    }

    fn ensure_image_now(&self, image: &str) -> Result<()> {
        let mut state = self.state();
        if state.images.contains(image) {
            return Ok(());
        }
        state.calls.push(Call::PullImage(image.to_string()));
        if state.unpullable.contains(image) {
            return Err(Error::ImageUnavailable {
                target: self.target(),
                image: image.to_string(),
                status: Box::new(tonic::Status::not_found(format!(
                    "failed to resolve reference {image:?}"
                ))),
            });
        }
        state.images.insert(image.to_string());
        Ok(())
    }

    fn ensure_pod_now(&self, spec: &PodSpec) -> Result<Outcome> {
        let running: Vec<PodStatus> = self.state().pods.values().cloned().collect();
        let decision = pod_decision(spec, &running);
        let existing: Vec<PodStatus> = match &decision {
            PodDecision::Keep => return Ok(Outcome::Unchanged),
            PodDecision::Create => Vec::new(),
            PodDecision::Replace { existing } => existing.iter().map(|p| (*p).clone()).collect(),
        };
        for c in &spec.containers {
            self.ensure_image_now(&c.image)?;
        }
        let mut state = self.state();
        for pod in &existing {
            state.pods.remove(&pod.id);
            state.calls.push(Call::RemovePod {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
            });
        }
        state.next_id += 1;
        let id = format!("fake-{}", state.next_id);
        let hash = spec.content_hash();
        let mut containers: Vec<ContainerStatus> = spec
            .containers
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let exit = state.exit_on_start.get(&c.name).copied();
                ContainerStatus {
                    id: format!("{id}-{i}"),
                    name: c.name.clone(),
                    image: c.image.clone(),
                    state: if exit.is_some() {
                        ContainerState::Exited
                    } else {
                        ContainerState::Running
                    },
                    exit_code: exit,
                }
            })
            .collect();
        containers.sort_by(|a, b| a.name.cmp(&b.name));
        for m in spec.containers.iter().flat_map(|c| &c.mounts) {
            if !m.readonly {
                state.data_dirs.insert(m.host_path.clone());
            }
        }
        state.specs.insert(id.clone(), spec.clone());
        state.pods.insert(
            id.clone(),
            PodStatus {
                id,
                namespace: spec.namespace.clone(),
                name: spec.name.clone(),
                labels: spec.labels.clone(),
                annotations: BTreeMap::from([(labels::SPEC_HASH.to_string(), hash.clone())]),
                state: PodState::Ready,
                containers,
            },
        );
        state.calls.push(Call::CreatePod {
            namespace: spec.namespace.clone(),
            name: spec.name.clone(),
            spec_hash: hash,
        });
        Ok(if existing.is_empty() {
            Outcome::Created
        } else {
            Outcome::Replaced
        })
    }
}

impl HypervisorRuntime for FakeRuntime {
    fn hypervisor(&self) -> &str {
        &self.hypervisor
    }

    fn mutating_calls(&self) -> u64 {
        self.state().calls.len() as u64
    }

    async fn ensure_pod(&self, spec: &PodSpec) -> Result<Outcome> {
        self.ensure_pod_now(spec)
    }

    async fn list_pods(&self, selector: &BTreeMap<String, String>) -> Result<Vec<PodStatus>> {
        let mut pods: Vec<PodStatus> = self
            .state()
            .pods
            .values()
            .filter(|p| selector.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
            .cloned()
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name, &a.id).cmp(&(&b.namespace, &b.name, &b.id)));
        Ok(pods)
    }

    async fn remove_pod(&self, id: &str) -> Result<()> {
        let mut state = self.state();
        if let Some(pod) = state.pods.remove(id) {
            state.calls.push(Call::RemovePod {
                namespace: pod.namespace,
                name: pod.name,
            });
        }
        Ok(())
    }

    async fn write_files(
        &self,
        files: &[HostFile],
        known: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>> {
        self.check_paths(files.iter().map(|f| f.path.as_str()))?;
        let (changed, hashes) = file_writes(files, known);
        let mut state = self.state();
        if !changed.is_empty() {
            state.calls.push(Call::WriteFiles(
                changed.iter().map(|f| f.path.clone()).collect(),
            ));
            for f in changed {
                state.files.insert(f.path.clone(), f.clone());
            }
        }
        Ok(hashes)
    }

    fn pod_log_directory(&self, namespace: &str, name: &str) -> String {
        crate::requests::pod_log_directory(namespace, name, oi_api::runtime::paths::POD_LOG_DIR)
    }

    async fn remove_host_paths(&self, paths: &[String]) -> Result<()> {
        self.check_paths(paths.iter().map(String::as_str))?;
        if paths.is_empty() {
            return Ok(());
        }
        self.state()
            .calls
            .push(Call::RemoveHostPaths(paths.to_vec()));
        for p in paths {
            self.lose_path(p);
        }
        Ok(())
    }

    /// A path is present when a file was written there or under it, or it lies in a data
    /// directory (whatever a process keeps there).
    async fn host_paths_present(&self, paths: &[String]) -> Result<BTreeSet<String>> {
        self.check_paths(paths.iter().map(String::as_str))?;
        let state = self.state();
        let under = |p: &str, dir: &str| {
            p == dir || p.starts_with(&format!("{}/", dir.trim_end_matches('/')))
        };
        Ok(paths
            .iter()
            .filter(|p| {
                state.files.keys().any(|f| under(f, p))
                    || state.data_dirs.iter().any(|d| under(p, d))
            })
            .cloned()
            .collect())
    }

    async fn log_tail(&self, container_id: &str) -> Result<String> {
        let state = self.state();
        let name = state
            .pods
            .values()
            .flat_map(|p| &p.containers)
            .find(|c| c.id == container_id)
            .map(|c| c.name.clone());
        Ok(name
            .and_then(|n| state.logs.get(&n).cloned())
            .unwrap_or_default())
    }

    async fn exec_output(
        &self,
        job: &'static str,
        container_id: &str,
        command: &[String],
    ) -> Result<String> {
        let mut state = self.state();
        let running = state.pods.values().any(|p| {
            p.containers
                .iter()
                .any(|c| c.id == container_id && c.state == ContainerState::Running)
        });
        if !running {
            return Err(Error::HelperFailed {
                target: self.target(),
                job,
                exit_code: 126,
                log_tail: format!("fake: no running container {container_id}"),
            });
        }
        state.calls.push(Call::Exec {
            job: job.to_string(),
            container_id: container_id.to_string(),
            command: command.to_vec(),
        });
        let state = &mut *state;
        let haproxy = state.haproxy.entry(container_id.to_string()).or_default();
        match command {
            [sh, c, script] if sh == "sh" && c == "-c" && script == "kill -USR2 1" => {
                haproxy.worker += 1;
                haproxy.servers.clear();
                haproxy.up.clear();
                Ok(String::new())
            }
            [sh, c, script, commands]
                if sh == "sh" && c == "-c" && script.contains("| nc 127.0.0.1 ") =>
            {
                Ok(haproxy.answer(commands, &mut state.held_sessions))
            }
            _ => Ok(String::new()),
        }
    }

    async fn run_job(
        &self,
        job: &'static str,
        container: &oi_api::runtime::ContainerSpec,
        _timeout: std::time::Duration,
    ) -> Result<()> {
        self.check_paths(container.mounts.iter().map(|m| m.host_path.as_str()))?;
        let mut state = self.state();
        if state.unpullable.contains(&container.image) && !state.images.contains(&container.image) {
            return Err(Error::ImageUnavailable {
                target: self.target(),
                image: container.image.clone(),
                status: Box::new(tonic::Status::not_found("fake: image cannot be pulled")),
            });
        }
        state.calls.push(Call::RunJob {
            job: job.to_string(),
            image: container.image.clone(),
            command: container
                .command
                .iter()
                .chain(&container.args)
                .cloned()
                .collect(),
        });
        if let Some(log) = state.failing_jobs.get(job) {
            let log = log.clone();
            return Err(Error::HelperFailed {
                target: self.target(),
                job,
                exit_code: 1,
                log_tail: log,
            });
        }
        *state.job_runs.entry(job.to_string()).or_default() += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
