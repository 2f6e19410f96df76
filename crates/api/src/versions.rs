//! The versions table: which upstream images make up each supported Kubernetes release.
//!
//! Images are data. Each supported minor maps to the images of its newest patch release we
//! know of, on the upstream registries. An image-repository override (air-gapped mirrors, and
//! our own tests, which use the offline image set under `localhost/oneinfra`) replaces the
//! registry and path of every image and keeps its last path segment and tag, like kubeadm's
//! `imageRepository`:
//!
//! ```text
//! registry.k8s.io/kube-apiserver:v1.37.1  --override localhost/oneinfra-->  localhost/oneinfra/kube-apiserver:v1.37.1
//! docker.io/library/haproxy:2.6.12        --override mirror.corp/k8s  -->  mirror.corp/k8s/haproxy:2.6.12
//! ```
//!
//! Supported minors as of 2026-11-22 (kubernetes.io/releases): 1.35, 1.36, 1.37. 1.34 reached
//! end of life on 2026-10-27.

use std::fmt;

/// An image as the versions table names it: full upstream name and tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Image {
    /// Full upstream name without tag, e.g. `registry.k8s.io/etcd`.
    pub name: &'static str,
    pub tag: &'static str,
}

impl Image {
    /// The last path segment of the name, e.g. `etcd` for `registry.k8s.io/etcd`.
    pub fn short_name(&self) -> &'static str {
        self.name.rsplit('/').next().unwrap_or(self.name)
    }

    /// The reference to pull, with the repository override applied when given.
    pub fn reference(&self, repository_override: Option<&str>) -> String {
        match repository_override {
            Some(repo) => format!(
                "{}/{}:{}",
                repo.trim_end_matches('/'),
                self.short_name(),
                self.tag
            ),
            None => format!("{}:{}", self.name, self.tag),
        }
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)
    }
}

/// The images of one Kubernetes release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubernetesRelease {
    /// Full version without the leading `v`, e.g. `1.37.1`.
    pub version: &'static str,
    pub etcd: Image,
    pub kube_apiserver: Image,
    pub kube_controller_manager: Image,
    pub kube_scheduler: Image,
    /// The workers' kube-proxy (a DaemonSet inside the cluster; never run on hypervisors).
    pub kube_proxy: Image,
    /// The cluster's DNS (a Deployment inside the cluster; never run on hypervisors).
    pub coredns: Image,
}

impl KubernetesRelease {
    /// The release's minor as `(major, minor)`.
    pub fn minor(&self) -> (u32, u32) {
        let mut it = self
            .version
            .split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0));
        (it.next().unwrap_or(0), it.next().unwrap_or(0))
    }

    /// Every image this release's control plane needs on a hypervisor, in a stable order
    /// (kube-proxy and CoreDNS run on the cluster's workers, not here).
    pub fn images(&self) -> [Image; 4] {
        [
            self.etcd,
            self.kube_apiserver,
            self.kube_controller_manager,
            self.kube_scheduler,
        ]
    }
}

/// Images that do not depend on the Kubernetes version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InfraImages {
    /// The sandbox ("pause") image each hypervisor's CRI runtime uses for pods.
    pub pause: Image,
    /// haproxy for the control-plane ingress (TCP mode, TLS health checks).
    pub haproxy: Image,
    /// The file writer and tooling image: a POSIX shell with `base64`, `sha256sum`, `mkdir`,
    /// `chmod`, `rm` (busybox). Files reach hypervisors through it.
    pub toolbox: Image,
    /// The cluster VPN endpoint: `oi-vpn-endpoint` (this project's, crates/vpn) with
    /// userspace WireGuard (`wireguard-go`, `wg`), run on the ingress's public hypervisor.
    pub vpn_endpoint: Image,
}

const fn k8s(name: &'static str, tag: &'static str) -> Image {
    Image { name, tag }
}

macro_rules! release {
    ($version:literal, $tag:literal, $etcd:literal, $coredns:literal) => {
        KubernetesRelease {
            version: $version,
            etcd: k8s("registry.k8s.io/etcd", $etcd),
            kube_apiserver: k8s("registry.k8s.io/kube-apiserver", $tag),
            kube_controller_manager: k8s("registry.k8s.io/kube-controller-manager", $tag),
            kube_scheduler: k8s("registry.k8s.io/kube-scheduler", $tag),
            kube_proxy: k8s("registry.k8s.io/kube-proxy", $tag),
            coredns: k8s("registry.k8s.io/coredns/coredns", $coredns),
        }
    };
}

/// Supported releases, oldest first. The last one is what `"default"` resolves to.
pub const RELEASES: &[KubernetesRelease] = &[
    release!("1.35.9", "v1.35.9", "3.6.4-0", "v1.12.1"),
    release!("1.36.4", "v1.36.4", "3.6.4-0", "v1.12.1"),
    release!("1.37.1", "v1.37.1", "3.6.4-0", "v1.12.1"),
];

/// Version-independent images.
pub const INFRA: InfraImages = InfraImages {
    pause: k8s("registry.k8s.io/pause", "3.10.1"),
    haproxy: k8s("docker.io/library/haproxy", "2.6.12"),
    toolbox: k8s("docker.io/library/busybox", "1.36.1"),
    vpn_endpoint: k8s(
        "ghcr.io/oneinfra-rs/vpn-endpoint",
        env!("CARGO_PKG_VERSION"),
    ),
};

/// The version `"default"` (or an empty version) resolves to: the newest supported release.
pub fn default_release() -> &'static KubernetesRelease {
    // RELEASES is a non-empty constant: the index exists.
    &RELEASES[RELEASES.len() - 1]
}

/// Looks a version up: `"default"`, `""`, `"1.37.1"`, `"v1.37.1"`, or a minor such as
/// `"1.37"` (its newest known patch). `None` when unsupported.
pub fn find_release(version: &str) -> Option<&'static KubernetesRelease> {
    let v = version.trim().trim_start_matches('v');
    if v.is_empty() || v == "default" {
        return Some(default_release());
    }
    if let Some(r) = RELEASES.iter().find(|r| r.version == v) {
        return Some(r);
    }
    // A bare minor (`1.37`) picks that minor's release.
    if v.matches('.').count() == 1 {
        return RELEASES
            .iter()
            .rev()
            .find(|r| r.version.starts_with(&format!("{v}.")));
    }
    None
}

/// The supported versions, oldest first, for error messages and `oi version kubernetes`.
pub fn supported_versions() -> Vec<&'static str> {
    RELEASES.iter().map(|r| r.version).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_newest() {
        assert_eq!(find_release("default").map(|r| r.version), Some("1.37.1"));
        assert_eq!(find_release("").map(|r| r.version), Some("1.37.1"));
    }

    #[test]
    fn lookup_forms() {
        assert_eq!(find_release("v1.36.4").map(|r| r.version), Some("1.36.4"));
        assert_eq!(find_release("1.35").map(|r| r.version), Some("1.35.9"));
        assert_eq!(find_release("1.34.0"), None);
        assert_eq!(find_release("1.3"), None);
    }

    #[test]
    fn override_keeps_short_name_and_tag() {
        let r = find_release("1.37.1").map(|r| r.kube_apiserver);
        assert_eq!(
            r.map(|i| i.reference(Some("localhost/oneinfra/"))),
            Some("localhost/oneinfra/kube-apiserver:v1.37.1".to_string())
        );
        assert_eq!(
            INFRA.haproxy.reference(None),
            "docker.io/library/haproxy:2.6.12"
        );
    }

    #[test]
    fn releases_sorted_oldest_first() {
        let minors: Vec<_> = RELEASES.iter().map(|r| r.minor()).collect();
        let mut sorted = minors.clone();
        sorted.sort();
        assert_eq!(minors, sorted);
    }
}
