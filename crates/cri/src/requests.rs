//! CRI requests built as values from our pod and file specs, with no I/O (like kube-core: the
//! client only sends what these functions return, and the tests assert on them).

use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use k8s_cri::v1 as cri;
use oi_api::runtime::{ContainerSpec, HostFile, Mount, PodSpec, labels};

/// Label put on throwaway pods (`run_to_completion`, file writers): value `true`.
pub const RUN_LABEL: &str = "oneinfra.ereslibre.es/run";
/// Namespace of throwaway pods.
pub const RUN_NAMESPACE: &str = "oneinfra-system";
/// Where the writer and remover containers see the hypervisor's root filesystem.
pub const HOST_ROOT_MOUNT: &str = "/host";
/// The environment variable telling a helper that cleans up after itself (file writer, path
/// remover) the host path of its own log directory, which it removes as its last act: nobody
/// reads a log after a success, and a failure (non-zero exit before that) keeps it for the
/// log tail of the error.
pub const OWN_LOG_DIR_ENV: &str = "OI_OWN_LOG_DIR";
/// Largest base64 value put in one environment variable (Linux caps one at 128 KiB).
const ENV_CHUNK: usize = 64 * 1024;
/// Largest base64 payload given to one writer container (the kernel caps the whole
/// environment plus arguments at a quarter of the stack limit, 2 MiB by default).
pub const WRITER_BATCH_BYTES: usize = 1024 * 1024;

/// The sandbox identity used as CRI `metadata.uid`: derived from the spec hash, so that a
/// replaced pod with a new spec never collides with the name containerd reserved for the old
/// one.
pub fn sandbox_uid(pod: &PodSpec) -> String {
    pod.content_hash()[..16].to_string()
}

/// Host directory holding the pod's container logs: one per pod name, so that a pod
/// replaced (a new spec) logs where the one before it did, after its lines, rather than
/// leaving a directory behind; it goes with its component's or cluster's directories.
pub fn log_directory(pod: &PodSpec, log_root: &str) -> String {
    pod_log_directory(&pod.namespace, &pod.name, log_root)
}

/// [`log_directory`] of the pod `namespace`/`name`.
pub fn pod_log_directory(namespace: &str, name: &str, log_root: &str) -> String {
    format!("{}/{namespace}_{name}", log_root.trim_end_matches('/'))
}

fn host_network(mode_pid: cri::NamespaceMode) -> cri::NamespaceOption {
    cri::NamespaceOption {
        network: cri::NamespaceMode::Node as i32,
        pid: mode_pid as i32,
        ipc: cri::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// The `RunPodSandbox` configuration of a host-network pod: metadata (namespace, name, uid),
/// the spec's labels, the spec hash annotation, node network namespace.
pub fn sandbox_config(pod: &PodSpec, log_root: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod.name.clone(),
            uid: sandbox_uid(pod),
            namespace: pod.namespace.clone(),
            attempt: 0,
        }),
        log_directory: log_directory(pod, log_root),
        labels: to_hash_map(&pod.labels),
        annotations: HashMap::from([(labels::SPEC_HASH.to_string(), pod.content_hash())]),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(host_network(cri::NamespaceMode::Container)),
                privileged: pod.containers.iter().any(|c| c.privileged),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The `CreateContainer` configuration of one container of a host-network pod. Its log goes
/// to `<container name>.log` in the sandbox's log directory.
pub fn container_config(container: &ContainerSpec) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt: 0,
        }),
        image: Some(image_spec(&container.image)),
        command: container.command.clone(),
        args: container.args.clone(),
        envs: container
            .env
            .iter()
            .map(|(key, value)| cri::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        mounts: container.mounts.iter().map(mount).collect(),
        log_path: format!("{}.log", container.name),
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(host_network(cri::NamespaceMode::Container)),
                privileged: container.privileged,
                ..Default::default()
            }),
            resources: container.resources.map(|r| cri::LinuxContainerResources {
                cpu_shares: r.cpu_shares(),
                memory_limit_in_bytes: i64::try_from(r.memory_bytes).unwrap_or(i64::MAX),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// The full `CreateContainer` request for `container` in the sandbox `sandbox_id`.
pub fn create_container_request(
    sandbox_id: &str,
    container: &ContainerSpec,
    sandbox: &cri::PodSandboxConfig,
) -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: sandbox_id.to_string(),
        config: Some(container_config(container)),
        sandbox_config: Some(sandbox.clone()),
    }
}

/// An image reference as CRI wants it.
pub fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

fn mount(m: &Mount) -> cri::Mount {
    cri::Mount {
        container_path: m.container_path.clone(),
        host_path: m.host_path.clone(),
        readonly: m.readonly,
        propagation: cri::MountPropagation::PropagationPrivate as i32,
        ..Default::default()
    }
}

fn to_hash_map(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The throwaway host-network pod that runs `container` once. `unique` makes its name unique
/// on the hypervisor (callers pass a counter or a timestamp).
pub fn throwaway_pod(container: &ContainerSpec, unique: &str) -> PodSpec {
    let base: String = container
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    PodSpec {
        namespace: RUN_NAMESPACE.to_string(),
        name: format!("oi-run-{base}-{unique}"),
        labels: BTreeMap::from([(RUN_LABEL.to_string(), "true".to_string())]),
        containers: vec![container.clone()],
    }
}

pub use oi_api::runtime::check_host_path;

/// The shell script of the writer container. For each file `i` (0..`$OI_FILES`) it reads
/// `$OI_F<i>_PATH`, `$OI_F<i>_MODE` and the base64 chunks `$OI_F<i>_D0..$OI_F<i>_D<n-1>`
/// (n = `$OI_F<i>_N`), writes them decoded to a temporary file beside the target (made by
/// `mktemp`: a name no other writer shares, even one running at once on the same hypervisor,
/// whose PID namespace gives every writer PID 1; mode 0600 and umask 077, so a key is never
/// readable by others, even briefly), sets the mode and renames it over the target. Only
/// variable names are `eval`ed, never file contents. Last, it removes its own log directory
/// ([`OWN_LOG_DIR_ENV`]).
pub const WRITER_SCRIPT: &str = r#"set -eu
umask 077
tmp=""
trap 'if [ -n "$tmp" ]; then rm -f "$tmp"; fi' EXIT
i=0
while [ "$i" -lt "$OI_FILES" ]; do
  eval "p=\$OI_F${i}_PATH; m=\$OI_F${i}_MODE; n=\$OI_F${i}_N"
  t="/host$p"
  d="${t%/*}"
  mkdir -p "$d"
  tmp=$(mktemp "$d/.oi-write.XXXXXXXX")
  j=0
  while [ "$j" -lt "$n" ]; do
    eval "printf '%s' \"\$OI_F${i}_D${j}\""
    j=$((j+1))
  done | base64 -d > "$tmp"
  chmod "$m" "$tmp"
  mv -f "$tmp" "$t"
  tmp=""
  i=$((i+1))
done
rm -rf "/host$OI_OWN_LOG_DIR"
"#;

/// The shell script of the remover container: `rm -rf /host<path>` for each argument, then
/// its own log directory ([`OWN_LOG_DIR_ENV`]).
pub const REMOVER_SCRIPT: &str = r#"set -eu
for p in "$@"; do
  rm -rf "/host$p"
done
rm -rf "/host$OI_OWN_LOG_DIR"
"#;

fn host_root_mount() -> Mount {
    Mount {
        host_path: "/".to_string(),
        container_path: HOST_ROOT_MOUNT.to_string(),
        readonly: false,
    }
}

/// What writing `files` over a hypervisor whose files hash as `known` must do: the files whose
/// [`HostFile::content_hash`] differs from `known[path]` (to be written), and `known` updated
/// with the hashes of all `files` (what the write returns). The real client and the fake both
/// use it, so they agree on what counts as unchanged.
pub fn file_writes<'a>(
    files: &'a [HostFile],
    known: &BTreeMap<String, String>,
) -> (Vec<&'a HostFile>, BTreeMap<String, String>) {
    let mut hashes = known.clone();
    let mut changed = Vec::new();
    for file in files {
        let hash = file.content_hash();
        if known.get(&file.path) != Some(&hash) {
            changed.push(file);
        }
        hashes.insert(file.path.clone(), hash);
    }
    (changed, hashes)
}

/// Splits files into batches whose base64 payload stays under [`WRITER_BATCH_BYTES`] (a file
/// larger than that gets a batch of its own). Most file sets make one batch.
pub fn writer_batches(files: &[HostFile]) -> Vec<Vec<&HostFile>> {
    let mut batches: Vec<Vec<&HostFile>> = Vec::new();
    let mut size = 0;
    for file in files {
        let encoded = file.content.len().div_ceil(3) * 4;
        match batches.last_mut() {
            Some(batch) if size + encoded <= WRITER_BATCH_BYTES => {
                batch.push(file);
                size += encoded;
            }
            _ => {
                batches.push(vec![file]);
                size = encoded;
            }
        }
    }
    batches
}

/// The writer container for one batch of files (paths must have passed [`check_host_path`]).
/// File contents travel base64-encoded in environment variables; the host root is mounted at
/// [`HOST_ROOT_MOUNT`].
pub fn writer_container(files: &[&HostFile], toolbox_image: &str) -> ContainerSpec {
    let mut env = BTreeMap::from([("OI_FILES".to_string(), files.len().to_string())]);
    for (i, file) in files.iter().enumerate() {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&file.content);
        let chunks: Vec<&str> = if encoded.is_empty() {
            Vec::new()
        } else {
            encoded
                .as_bytes()
                .chunks(ENV_CHUNK)
                // Base64 output is ASCII, so every byte boundary is a char boundary.
                .map(|c| std::str::from_utf8(c).unwrap_or_default())
                .collect()
        };
        env.insert(format!("OI_F{i}_PATH"), file.path.clone());
        env.insert(format!("OI_F{i}_MODE"), format!("{:o}", file.mode & 0o7777));
        env.insert(format!("OI_F{i}_N"), chunks.len().to_string());
        for (j, chunk) in chunks.iter().enumerate() {
            env.insert(format!("OI_F{i}_D{j}"), (*chunk).to_string());
        }
    }
    ContainerSpec {
        name: "oi-file-writer".to_string(),
        image: toolbox_image.to_string(),
        command: vec!["sh".into(), "-c".into(), WRITER_SCRIPT.into()],
        args: Vec::new(),
        env,
        mounts: vec![host_root_mount()],
        privileged: false,
        resources: None,
    }
}

/// The script of the path prober: prints each of its arguments that exists under the host
/// root, one a line. Read-only.
pub const PROBER_SCRIPT: &str = r#"for p in "$@"; do
  if [ -e "/host$p" ]; then echo "$p"; fi
done
"#;

/// The host root, read-only.
fn host_root_read_only() -> Mount {
    Mount {
        readonly: true,
        ..host_root_mount()
    }
}

/// The path prober container (paths must have passed [`check_host_path`]): prints those of
/// `paths` that exist.
pub fn prober_container(paths: &[String], toolbox_image: &str) -> ContainerSpec {
    ContainerSpec {
        name: "oi-path-prober".to_string(),
        image: toolbox_image.to_string(),
        command: vec![
            "sh".into(),
            "-c".into(),
            PROBER_SCRIPT.into(),
            "oi-probe".into(),
        ],
        args: paths.to_vec(),
        env: BTreeMap::new(),
        mounts: vec![host_root_read_only()],
        privileged: false,
        resources: None,
    }
}

/// The log tail reader: prints the last `bytes` of the container log at `log_path` (an
/// absolute host path, as the runtime reports it). Read-only.
pub fn log_tail_container(log_path: &str, bytes: usize, toolbox_image: &str) -> ContainerSpec {
    ContainerSpec {
        name: "oi-log-tail".to_string(),
        image: toolbox_image.to_string(),
        command: vec![
            "sh".into(),
            "-c".into(),
            r#"tail -c "$1" "/host$2" 2>/dev/null; exit 0"#.into(),
            "oi-log-tail".into(),
        ],
        args: vec![bytes.to_string(), log_path.to_string()],
        env: BTreeMap::new(),
        mounts: vec![host_root_read_only()],
        privileged: false,
        resources: None,
    }
}

/// The remover container (paths must have passed [`check_host_path`]).
pub fn remover_container(paths: &[String], toolbox_image: &str) -> ContainerSpec {
    ContainerSpec {
        name: "oi-path-remover".to_string(),
        image: toolbox_image.to_string(),
        command: vec![
            "sh".into(),
            "-c".into(),
            REMOVER_SCRIPT.into(),
            "oi-remove".into(),
        ],
        args: paths.to_vec(),
        env: BTreeMap::new(),
        mounts: vec![host_root_mount()],
        privileged: false,
        resources: None,
    }
}

/// The log reader started in a throwaway pod after its container exited: it sleeps while we
/// `ExecSync` a `tail` of the log and then remove the pod's log directory. The pod's log
/// directory's parent (`log_root`) is mounted at `/oi-logs`.
pub fn log_reader_container(toolbox_image: &str, log_root: &str) -> ContainerSpec {
    ContainerSpec {
        name: "oi-log-reader".to_string(),
        image: toolbox_image.to_string(),
        command: vec!["sleep".into(), "3600".into()],
        args: Vec::new(),
        env: BTreeMap::new(),
        mounts: vec![Mount {
            host_path: log_root.to_string(),
            container_path: "/oi-logs".to_string(),
            readonly: false,
        }],
        privileged: false,
        resources: None,
    }
}

/// The `ExecSync` command run in the log reader: print the last `bytes` of the container's
/// log when `tail` is set, then remove the pod's log directory (`dir_name` under the root).
pub fn log_reader_command(
    dir_name: &str,
    container: &str,
    bytes: usize,
    tail: bool,
) -> Vec<String> {
    let script = if tail {
        r#"tail -c "$1" "/oi-logs/$2/$3.log" 2>/dev/null; rm -rf "/oi-logs/$2""#
    } else {
        r#"rm -rf "/oi-logs/$2""#
    };
    vec![
        "sh".into(),
        "-c".into(),
        script.into(),
        "oi-log".into(),
        bytes.to_string(),
        dir_name.to_string(),
        container.to_string(),
    ]
}

/// Turns the CRI log format (`<time> <stream> <tag> <text>` per line) into plain text.
pub fn strip_cri_log(raw: &str) -> String {
    raw.lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(_), Some("stdout" | "stderr"), Some(tag), Some(text)) => {
                    if tag.contains('P') {
                        text.to_string()
                    } else {
                        format!("{text}\n")
                    }
                }
                _ => format!("{line}\n"),
            }
        })
        .collect::<String>()
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests;
