//! **kube-standin: test stand-ins for kube-apiserver, kube-controller-manager,
//! kube-scheduler and the kubelet. It is not Kubernetes.**
//!
//! The Kubernetes binaries cannot be had on the machines that run oneinfra-rs' end-to-end
//! tests, so the offline image set ships this binary under their names. It takes the real
//! binaries' command lines (pflag semantics, the real flag names, refusing unknown ones) and
//! behaves as they do for everything our product and `kubectl` touch, so that a test passing
//! against it means something:
//!
//! ```text
//!  kube-apiserver stand-in (apiserver.rs, the API in api.rs)         the cluster's etcd
//!  ├─ HTTPS on --bind-address:--secure-port, client certificates ──► objects under
//!  │    requested and verified against --client-ca-file                --etcd-prefix
//!  ├─ the REST API: namespaces, configmaps, secrets, serviceaccounts,    (v3 JSON gateway,
//!  │    services, endpoints, nodes, events, leases, RBAC, CRDs and       mutual TLS), so
//!  │    their objects, deployments, daemonsets, CSRs, reviews;           every replica
//!  │    watches, patches, server-side apply, discovery, OpenAPI v3       serves the same
//!  ├─ authentication: certificates, bootstrap tokens, service-account tokens,
//!  │    --token-auth-file, anonymous; authorization: RBAC, Node; NodeRestriction
//!  └─ the node proxy to kubelets (--kubelet-client-certificate, egress selector)
//!
//!  kube-controller-manager stand-in (controller.rs, leader.rs, controllers.rs)
//!  ├─ leader election over a Lease; while leading: token cleaner, node lifecycle,
//!  │    service accounts, root CA publisher, bootstrap signer (as their service accounts)
//!  kube-scheduler stand-in: checks its kubeconfig against the API server; schedules nothing
//!  both: every 2 s GET /healthz, /version, /api; failing for longer than
//!        KUBE_STANDIN_GRACE_SECONDS (60 s) exits 1; /healthz on --secure-port
//!
//!  kubelet stand-in (kubelet.rs): registers its Node, keeps it Ready, renews its Lease,
//!  serves :10250 over TLS (x509 and webhook authentication, SubjectAccessReviews); runs no pods
//! ```
//!
//! What the API approximates or does not do is listed in [`api`]. The role comes from the
//! program name (`kube-apiserver`, `kube-controller-manager`, `kube-scheduler`, `kubelet`)
//! or, when invoked as `kube-standin`, from the first argument. [`local`] runs the same API in
//! a test's process, over memory, for tests of a management cluster.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod apiserver;
pub mod client;
pub mod config;
pub mod controller;
pub mod controllers;
pub mod etcd;
pub mod flags;
pub mod https;
pub mod keys;
pub mod kubeconfig;
pub mod kubelet;
pub mod leader;
pub mod local;
pub mod serve;
pub mod tls;

/// The environment variable holding the Kubernetes version the stand-in reports.
pub const VERSION_ENV: &str = "KUBE_STANDIN_VERSION";
/// The version reported when [`VERSION_ENV`] is not set.
pub const DEFAULT_VERSION: &str = "v0.0.0-standin";
/// The environment variable holding the controller stand-ins' grace period, in seconds.
pub const GRACE_ENV: &str = "KUBE_STANDIN_GRACE_SECONDS";

/// Which binary the stand-in plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// kube-apiserver
    ApiServer,
    /// kube-controller-manager
    ControllerManager,
    /// kube-scheduler
    Scheduler,
    /// kubelet
    Kubelet,
}

impl Role {
    /// The real binary's name.
    pub fn command(self) -> &'static str {
        match self {
            Role::ApiServer => "kube-apiserver",
            Role::ControllerManager => "kube-controller-manager",
            Role::Scheduler => "kube-scheduler",
            Role::Kubelet => "kubelet",
        }
    }

    /// The role named exactly `name`.
    pub fn from_command(name: &str) -> Option<Role> {
        [
            Role::ApiServer,
            Role::ControllerManager,
            Role::Scheduler,
            Role::Kubelet,
        ]
        .into_iter()
        .find(|r| r.command() == name)
    }

    /// Picks the role from `argv`: the basename of `argv[0]`, or, when that is not a role
    /// name, the first argument. Returns the role and the remaining arguments.
    pub fn from_argv(argv: &[String]) -> Option<(Role, &[String])> {
        let program = argv.first()?;
        let base = std::path::Path::new(program)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(program);
        if let Some(role) = Role::from_command(base) {
            return Some((role, &argv[1..]));
        }
        let role = Role::from_command(argv.get(1)?)?;
        Some((role, &argv[2..]))
    }
}

/// The version the stand-in reports, from [`VERSION_ENV`].
pub fn reported_version() -> String {
    std::env::var(VERSION_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_VERSION.to_string())
}

/// `/version`'s JSON for `git_version`, shaped like the real `version.Info`.
pub fn version_info(git_version: &str) -> serde_json::Value {
    let trimmed = git_version.trim_start_matches('v');
    let mut parts = trimmed.split(['.', '-', '+']);
    let major = parts.next().unwrap_or("0").to_string();
    let minor = parts.next().unwrap_or("0").to_string();
    serde_json::json!({
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "kube-standin",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn role_from_program_name_or_first_argument() {
        let a = argv(&["/usr/local/bin/kube-apiserver", "--v=2"]);
        assert_eq!(Role::from_argv(&a), Some((Role::ApiServer, &a[1..])));
        let a = argv(&["kube-standin", "kube-scheduler", "--kubeconfig=x"]);
        assert_eq!(Role::from_argv(&a), Some((Role::Scheduler, &a[2..])));
        assert_eq!(Role::from_argv(&argv(&["kube-standin", "--v=2"])), None);
        assert_eq!(Role::from_argv(&argv(&["kube-standin"])), None);
    }

    #[test]
    fn version_info_splits_major_and_minor() {
        let v = version_info("v1.37.1");
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "37");
        assert_eq!(v["gitVersion"], "v1.37.1");
        assert_eq!(version_info(DEFAULT_VERSION)["minor"], "0");
    }
}
