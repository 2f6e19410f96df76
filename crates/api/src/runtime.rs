//! What a hypervisor should run, as plain data: the contract between the pure planner
//! (`oi-planner` renders these) and the CRI client (`oi-cri` executes them).
//!
//! Every pod is a host-network pod. Its identity is `(namespace, name)`; `labels` select pods
//! (by cluster, component); the content hash of the whole spec decides whether a running pod
//! is left alone or replaced, so the hash must be stable: every collection here is ordered.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Label keys put on every pod oneinfra runs.
/// The directories oneinfra keeps on a hypervisor: the one description of the host layout.
///
/// ```text
/// /etc/oneinfra/<namespace>/<cluster>/<component>/      files: certificates, keys,
///                                                        kubeconfigs, configurations
/// /var/lib/oneinfra/<namespace>/<cluster>/<component>/  state: the etcd data directory
/// /var/log/oneinfra/pods/                               container logs
/// ```
///
/// Files and state are mounted at the same paths inside containers, so arguments name host
/// paths.
pub mod paths {
    /// Root of every cluster's files.
    pub const CONFIG_ROOT: &str = "/etc/oneinfra";
    /// Root of every cluster's state.
    pub const DATA_ROOT: &str = "/var/lib/oneinfra";
    /// Root of the logs.
    pub const LOG_ROOT: &str = "/var/log/oneinfra";
    /// Where the runtime writes pod logs.
    pub const POD_LOG_DIR: &str = "/var/log/oneinfra/pods";
    /// The three roots a hypervisor provides (and a local hypervisor set mounts).
    pub const ROOTS: [&str; 3] = [DATA_ROOT, CONFIG_ROOT, LOG_ROOT];

    /// A cluster's files.
    pub fn cluster_config_dir(namespace: &str, cluster: &str) -> String {
        format!("{CONFIG_ROOT}/{namespace}/{cluster}")
    }

    /// A cluster's state.
    pub fn cluster_data_dir(namespace: &str, cluster: &str) -> String {
        format!("{DATA_ROOT}/{namespace}/{cluster}")
    }

    /// A component's files.
    pub fn component_config_dir(namespace: &str, cluster: &str, component: &str) -> String {
        format!("{}/{component}", cluster_config_dir(namespace, cluster))
    }

    /// A component's state.
    pub fn component_data_dir(namespace: &str, cluster: &str, component: &str) -> String {
        format!("{}/{component}", cluster_data_dir(namespace, cluster))
    }

    /// The etcd data directory of a control plane replica.
    pub fn etcd_data_dir(namespace: &str, cluster: &str, component: &str) -> String {
        format!("{}/etcd", component_data_dir(namespace, cluster, component))
    }
}

pub mod labels {
    /// Marks a pod as managed by oneinfra; value `true`.
    pub const MANAGED: &str = "oneinfra.ereslibre.es/managed";
    /// Namespace of the Cluster the pod belongs to.
    pub const CLUSTER_NAMESPACE: &str = "oneinfra.ereslibre.es/cluster-namespace";
    /// Name of the Cluster the pod belongs to.
    pub const CLUSTER: &str = "oneinfra.ereslibre.es/cluster";
    /// Name of the Component the pod belongs to.
    pub const COMPONENT: &str = "oneinfra.ereslibre.es/component";
    /// Annotation holding [`super::PodSpec::content_hash`] of the spec a pod was created from.
    pub const SPEC_HASH: &str = "oneinfra.ereslibre.es/spec-hash";
}

/// A host-network pod with its containers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodSpec {
    /// CRI sandbox namespace (the Cluster's namespace).
    pub namespace: String,
    /// CRI sandbox name, unique per hypervisor within `namespace`.
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub containers: Vec<ContainerSpec>,
}

/// One container of a pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerSpec {
    pub name: String,
    /// Fully qualified image reference (after any repository override).
    pub image: String,
    /// Replaces the image's entrypoint when non-empty.
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<Mount>,
    /// Run privileged (the VPN endpoint, for its tun device; keepalived, for VRRP and the
    /// address it moves).
    pub privileged: bool,
    /// What it may use: its CPU weight against the hypervisor's other containers, and a
    /// memory limit. `None`: no limit (throwaway jobs, tests).
    pub resources: Option<ContainerResources>,
}

/// A container's share of its hypervisor (as the kubelet sets a container's cgroup from its
/// requests and limits): `cpu_millis` becomes its CPU weight (`cpu.shares` = millis × 1024 /
/// 1000: under contention each container gets CPU in proportion, none is starved, none is
/// throttled while the CPU is idle), `memory_bytes` a hard memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerResources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl ContainerResources {
    /// The CFS weight of `cpu_millis` (at least 2, the kernel's minimum), as the kubelet
    /// computes it.
    pub fn cpu_shares(&self) -> i64 {
        i64::try_from((self.cpu_millis * 1024 / 1000).max(2)).unwrap_or(i64::MAX)
    }
}

/// A host path bind-mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    pub readonly: bool,
}

/// Why a host path is refused for writing or removal, if it is (the CRI client checks
/// every path it writes or removes; the planner removes no file that fails it).
pub fn check_host_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("not absolute");
    }
    if path.contains('\0') || path.contains('\n') {
        return Err("contains a NUL or newline character");
    }
    let mut components = 0;
    for part in path.split('/') {
        match part {
            "" => {}
            "." | ".." => return Err("contains . or .. components"),
            _ => components += 1,
        }
    }
    if components == 0 {
        return Err("is the root directory");
    }
    Ok(())
}

/// A file to place on a hypervisor's filesystem.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostFile {
    /// Absolute path on the hypervisor.
    pub path: String,
    pub content: Vec<u8>,
    /// Unix permission bits, e.g. `0o600` for private keys.
    pub mode: u32,
}

impl HostFile {
    /// Hex SHA-256 of content and mode: a file whose hash is unchanged is not rewritten.
    pub fn content_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.mode.to_be_bytes());
        h.update(&self.content);
        hex::encode(h.finalize())
    }
}

impl PodSpec {
    /// Hex SHA-256 over a canonical encoding of the whole spec. Two specs that would run the
    /// same pod hash equal; any difference (image, argument, mount, label) changes the hash.
    pub fn content_hash(&self) -> String {
        let mut h = Sha256::new();
        let mut field = |tag: &str, value: &str| {
            // Length-prefixed, so that no two different specs encode to the same bytes.
            h.update((tag.len() as u64).to_be_bytes());
            h.update(tag.as_bytes());
            h.update((value.len() as u64).to_be_bytes());
            h.update(value.as_bytes());
        };
        field("namespace", &self.namespace);
        field("name", &self.name);
        for (k, v) in &self.labels {
            field("label", k);
            field("value", v);
        }
        for c in &self.containers {
            field("container", &c.name);
            field("image", &c.image);
            for a in &c.command {
                field("command", a);
            }
            for a in &c.args {
                field("arg", a);
            }
            for (k, v) in &c.env {
                field("env", k);
                field("value", v);
            }
            for m in &c.mounts {
                field("mount", &m.host_path);
                field("at", &m.container_path);
                field("ro", if m.readonly { "1" } else { "0" });
            }
            field("privileged", if c.privileged { "1" } else { "0" });
            if let Some(r) = &c.resources {
                field("cpu", &r.cpu_millis.to_string());
                field("memory", &r.memory_bytes.to_string());
            }
        }
        hex::encode(h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodSpec {
        PodSpec {
            namespace: "default".into(),
            name: "c1-control-plane-0".into(),
            labels: BTreeMap::from([(labels::CLUSTER.to_string(), "c1".to_string())]),
            containers: vec![ContainerSpec {
                name: "etcd".into(),
                image: "localhost/oneinfra/etcd:3.6.4-0".into(),
                command: vec!["etcd".into()],
                args: vec!["--name=a".into()],
                env: BTreeMap::new(),
                mounts: vec![],
                privileged: false,
                resources: None,
            }],
        }
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = pod();
        assert_eq!(a.content_hash(), pod().content_hash());
        let mut b = pod();
        b.containers[0].args[0] = "--name=b".into();
        assert_ne!(a.content_hash(), b.content_hash());
        // Moving a value between fields must change the hash (length-prefixed encoding).
        let mut c = pod();
        c.containers[0].command = vec![];
        c.containers[0].args = vec!["etcd".into(), "--name=a".into()];
        assert_ne!(a.content_hash(), c.content_hash());
    }

    #[test]
    fn file_hash_covers_mode() {
        let f = HostFile {
            path: "/a".into(),
            content: b"x".to_vec(),
            mode: 0o600,
        };
        let g = HostFile {
            mode: 0o644,
            ..f.clone()
        };
        assert_ne!(f.content_hash(), g.content_hash());
    }
}
