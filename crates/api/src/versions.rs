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
    /// keepalived, moving the address several ingresses share (VRRP), with a POSIX shell,
    /// `ip`, `awk` and `sed` (its start finds the interface that holds the hypervisor's
    /// address).
    pub keepalived: Image,
    /// A SIP tenant's jump host: sshd and the ssh client (OpenSSH), `host` (`oi-host`, this
    /// project's Redfish power tool, crates/host) and a POSIX shell with `install`.
    pub jump_host: Image,
    /// A SIP tenant's OpenID Connect provider: `oi-oidc-provider` (this project's,
    /// crates/oidc).
    pub oidc_provider: Image,
}

impl InfraImages {
    /// The images only SIPClusters' support services run (on public hypervisors, where they
    /// are placed): never needed on a private hypervisor.
    pub fn sip_service_only(&self) -> [Image; 2] {
        [self.jump_host, self.oidc_provider]
    }
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

/// What a component asks of its hypervisor: CPU (millicores) and memory (bytes), the sum
/// of its containers' requests. Placement counts them against a hypervisor's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Requests {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl std::ops::Add for Requests {
    type Output = Requests;
    fn add(self, other: Requests) -> Requests {
        Requests {
            cpu_millis: self.cpu_millis + other.cpu_millis,
            memory_bytes: self.memory_bytes + other.memory_bytes,
        }
    }
}

const MI: u64 = 1 << 20;

/// A control plane replica's containers: etcd 100m/256Mi, kube-apiserver 250m/512Mi,
/// kube-controller-manager 200m/128Mi, kube-scheduler 100m/64Mi (CPU as kubeadm requests
/// it; memory from what each uses on a small cluster, with room).
pub const CONTROL_PLANE_REQUESTS: Requests = Requests {
    cpu_millis: 650,
    memory_bytes: 960 * MI,
};
/// An ingress's haproxy.
pub const INGRESS_REQUESTS: Requests = Requests {
    cpu_millis: 50,
    memory_bytes: 64 * MI,
};
/// The VPN endpoint beside a VPN cluster's ingress.
pub const VPN_ENDPOINT_REQUESTS: Requests = Requests {
    cpu_millis: 50,
    memory_bytes: 64 * MI,
};

/// An API server alone (`spec.apiServerReplicas`): kube-apiserver's share of a replica's.
pub const API_SERVER_REQUESTS: Requests = Requests {
    cpu_millis: 250,
    memory_bytes: 512 * MI,
};

/// A SIPCluster's load balancer (its haproxy), control plane or worker.
pub const LOAD_BALANCER_REQUESTS: Requests = INGRESS_REQUESTS;
/// A SIPCluster's jump host (sshd and the sessions it starts).
pub const JUMP_HOST_REQUESTS: Requests = Requests {
    cpu_millis: 50,
    memory_bytes: 64 * MI,
};
/// A SIPCluster's OIDC provider.
pub const OIDC_PROVIDER_REQUESTS: Requests = Requests {
    cpu_millis: 50,
    memory_bytes: 32 * MI,
};

/// A container's memory limit is this many times what it asks: placement counts the
/// requests; the limit leaves room for a busy moment while keeping one cluster's runaway
/// process from taking a hypervisor's memory from the others.
pub const MEMORY_LIMIT_FACTOR: u64 = 4;

/// What each container of a component asks, by container name (the figures the role
/// requests above add up): its CPU weight and memory limit come from it
/// ([`crate::runtime::ContainerResources`]). `None` for a name not rendered for a
/// component.
pub fn container_resources(container: &str) -> Option<crate::runtime::ContainerResources> {
    let (cpu_millis, memory_mi) = match container {
        "etcd" => (100, 256),
        "kube-apiserver" => (250, 512),
        "kube-controller-manager" => (200, 128),
        "kube-scheduler" => (100, 64),
        "haproxy" => (50, 64),
        "vpn-endpoint" => (50, 64),
        // keepalived (VRRP for a shared ingress address): its share of the ingress's.
        "keepalived" => (10, 16),
        // A SIP tenant's jump host (sshd, and the sessions it starts).
        "sshd" => (50, 64),
        // A SIP tenant's OIDC provider (logins hash passwords: short CPU bursts).
        "oidc-provider" => (50, 32),
        _ => return None,
    };
    Some(crate::runtime::ContainerResources {
        cpu_millis,
        memory_bytes: memory_mi * MI * MEMORY_LIMIT_FACTOR,
    })
}

/// What a component of `role` asks, its cluster's VPN on or off.
pub fn requests(role: crate::component::ComponentRole, vpn: bool) -> Requests {
    match role {
        crate::component::ComponentRole::ControlPlane => CONTROL_PLANE_REQUESTS,
        crate::component::ComponentRole::ControlPlaneIngress if vpn => {
            INGRESS_REQUESTS + VPN_ENDPOINT_REQUESTS
        }
        crate::component::ComponentRole::ControlPlaneIngress => INGRESS_REQUESTS,
        crate::component::ComponentRole::ApiServer => API_SERVER_REQUESTS,
    }
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
    keepalived: k8s("docker.io/osixia/keepalived", "2.0.20"),
    jump_host: k8s("ghcr.io/oneinfra-rs/jump-host", env!("CARGO_PKG_VERSION")),
    oidc_provider: k8s(
        "ghcr.io/oneinfra-rs/oidc-provider",
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

/// Why a cluster cannot go from one version to another in one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeRefusal {
    /// Either version is not supported.
    Unsupported { version: String },
    /// A lower version than the one running.
    Downgrade,
    /// More than one minor at once: the minors to go through, first to last.
    SkipsMinors { chain: Vec<String> },
}

impl fmt::Display for UpgradeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpgradeRefusal::Unsupported { version } => {
                write!(f, "{version} is not a supported version")
            }
            UpgradeRefusal::Downgrade => f.write_str(
                "a downgrade is not supported (etcd and the API's stored objects only go forward)",
            ),
            UpgradeRefusal::SkipsMinors { chain } => write!(
                f,
                "that skips a minor, which the version skew policy forbids: upgrade one minor at a time, {} (`oi cluster upgrade --to {}` walks them)",
                chain.join(" -> "),
                chain.last().map(String::as_str).unwrap_or_default()
            ),
        }
    }
}

/// Whether a control plane running `from` may go to `to` in one step: the same version, a
/// newer patch of its minor, or the next minor. Versions are given as `find_release` takes
/// them.
///
/// # Errors
/// Why not ([`UpgradeRefusal`]); for a jump over minors, the chain of minors to follow.
pub fn check_upgrade(from: &str, to: &str) -> Result<(), UpgradeRefusal> {
    let find = |v: &str| {
        find_release(v).ok_or_else(|| UpgradeRefusal::Unsupported {
            version: v.to_string(),
        })
    };
    let (from, to) = (find(from)?, find(to)?);
    let parse = |v: &str| -> Vec<u32> { v.split('.').filter_map(|p| p.parse().ok()).collect() };
    let (a, b) = (parse(from.version), parse(to.version));
    if b < a {
        return Err(UpgradeRefusal::Downgrade);
    }
    let ((major_a, minor_a), (major_b, minor_b)) = (from.minor(), to.minor());
    if major_a != major_b || minor_b > minor_a + 1 {
        return Err(UpgradeRefusal::SkipsMinors {
            chain: (minor_a..=minor_b)
                .map(|m| format!("{major_a}.{m}"))
                .collect(),
        });
    }
    Ok(())
}

/// The containers whose version steps are checked against what runs: kube-apiserver (the
/// version skew policy: one minor at a time, never back) and etcd (which refuses its data
/// across two minors, and a minor back).
pub const VERSIONED_CONTAINERS: [&str; 2] = ["kube-apiserver", "etcd"];

/// `(major, minor)` of an image reference's tag (`…/kube-apiserver:v1.37.1` is `(1, 37)`,
/// `…/etcd:3.6.4-0` is `(3, 6)`), `None` when it has none.
pub fn image_minor(image: &str) -> Option<(u32, u32)> {
    let (_, tag) = image.rsplit_once(':')?;
    // A digest (`@sha256:…`) is no version.
    if tag.contains('/') || image.contains('@') {
        return None;
    }
    let mut parts = tag.trim_start_matches('v').split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Why container `container` may not go from the image it runs (`running`) to the one
/// planned (`planned`), if it may not: another major, a minor back, or more than one minor
/// forward. `None` for other containers and for tags without a version.
pub fn version_step_refusal(container: &str, running: &str, planned: &str) -> Option<String> {
    if !VERSIONED_CONTAINERS.contains(&container) {
        return None;
    }
    let ((a_major, a_minor), (b_major, b_minor)) = (image_minor(running)?, image_minor(planned)?);
    if a_major != b_major {
        return Some(format!(
            "{a_major}.{a_minor} to {b_major}.{b_minor} changes the major version"
        ));
    }
    if b_minor < a_minor {
        return Some(format!(
            "{a_major}.{a_minor} to {b_major}.{b_minor} goes a minor back"
        ));
    }
    if b_minor > a_minor + 1 {
        return Some(format!(
            "{a_major}.{a_minor} to {b_major}.{b_minor} skips {} minor(s): one at a time",
            b_minor - a_minor - 1
        ));
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
    fn what_each_pod_asks_is_what_its_containers_ask() {
        let of = |names: &[&str]| {
            names.iter().fold(Requests::default(), |sum, n| {
                let r = container_resources(n).unwrap_or_else(|| panic!("{n} has resources"));
                sum + Requests {
                    cpu_millis: r.cpu_millis,
                    memory_bytes: r.memory_bytes / MEMORY_LIMIT_FACTOR,
                }
            })
        };
        let control_plane = [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ];
        assert_eq!(of(&control_plane), CONTROL_PLANE_REQUESTS);
        assert_eq!(of(&["haproxy"]), INGRESS_REQUESTS);
        assert_eq!(of(&["vpn-endpoint"]), VPN_ENDPOINT_REQUESTS);
        assert_eq!(of(&["kube-apiserver"]), API_SERVER_REQUESTS);
        assert_eq!(of(&["haproxy"]), LOAD_BALANCER_REQUESTS);
        assert_eq!(of(&["sshd"]), JUMP_HOST_REQUESTS);
        assert_eq!(of(&["oidc-provider"]), OIDC_PROVIDER_REQUESTS);
    }

    #[test]
    fn a_version_step_of_more_than_one_minor_or_back_is_refused_from_the_images() {
        let api = |v: &str| format!("localhost/oneinfra/kube-apiserver:v{v}");
        let etcd = |v: &str| format!("registry.k8s.io/etcd:{v}");
        assert_eq!(image_minor(&api("1.37.1")), Some((1, 37)));
        assert_eq!(image_minor(&etcd("3.6.4-0")), Some((3, 6)));
        assert_eq!(image_minor("registry.k8s.io/etcd@sha256:abc"), None);
        assert_eq!(image_minor("localhost:5000/etcd"), None);
        assert_eq!(
            version_step_refusal("kube-apiserver", &api("1.35.9"), &api("1.36.4")),
            None
        );
        assert_eq!(
            version_step_refusal("kube-apiserver", &api("1.35.9"), &api("1.35.9")),
            None
        );
        assert_eq!(
            version_step_refusal("kube-apiserver", &api("1.35.9"), &api("1.37.1")).as_deref(),
            Some("1.35 to 1.37 skips 1 minor(s): one at a time")
        );
        assert_eq!(
            version_step_refusal("kube-apiserver", &api("1.37.1"), &api("1.36.4")).as_deref(),
            Some("1.37 to 1.36 goes a minor back")
        );
        assert_eq!(
            version_step_refusal("etcd", &etcd("3.4.23-0"), &etcd("3.6.4-0")).as_deref(),
            Some("3.4 to 3.6 skips 1 minor(s): one at a time")
        );
        // Other containers are not checked.
        assert_eq!(
            version_step_refusal("kube-scheduler", &api("1.35.9"), &api("1.37.1")),
            None
        );
    }

    #[test]
    fn upgrades_go_one_minor_at_a_time_and_never_down() {
        assert_eq!(check_upgrade("1.36.4", "1.37.1"), Ok(()));
        assert_eq!(check_upgrade("1.37.1", "1.37.1"), Ok(()));
        assert_eq!(check_upgrade("1.37", "default"), Ok(()));
        assert_eq!(
            check_upgrade("1.35.9", "1.37.1"),
            Err(UpgradeRefusal::SkipsMinors {
                chain: vec!["1.35".into(), "1.36".into(), "1.37".into()]
            })
        );
        assert_eq!(
            check_upgrade("1.35.9", "1.37.1").unwrap_err().to_string(),
            "that skips a minor, which the version skew policy forbids: upgrade one minor at a time, 1.35 -> 1.36 -> 1.37 (`oi cluster upgrade --to 1.37` walks them)"
        );
        assert_eq!(
            check_upgrade("1.37.1", "1.36.4"),
            Err(UpgradeRefusal::Downgrade)
        );
        assert_eq!(
            check_upgrade("1.20.0", "1.37.1"),
            Err(UpgradeRefusal::Unsupported {
                version: "1.20.0".into()
            })
        );
    }

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
