//! `oi-manager`'s command line: flags, their defaults and checks, and the settings of a run.
//! Defined as a library module so that tests parse the Deployment's arguments with the real
//! parser.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use oi_api::versions::INFRA;
use oi_planner::render::RenderOptions;

use crate::controller::ManagerOptions;
use crate::leader::LeaseConfig;

/// The default name of the leader Lease.
pub const DEFAULT_LEADER_ELECTION_ID: &str = "oi-manager.oneinfra.ereslibre.es";
/// The namespace of the Lease when neither the flag nor `POD_NAMESPACE` says.
pub const DEFAULT_LEADER_ELECTION_NAMESPACE: &str = "oneinfra-system";

/// oi-manager: oneinfra's controllers over Hypervisor, Cluster and Component custom
/// resources on a management Kubernetes cluster.
#[derive(Debug, Parser)]
#[command(
    name = "oi-manager",
    version,
    max_term_width = 100,
    after_help = "Examples:\n  oi-manager crds | kubectl apply -f -\n  \
                  oi-manager run --kubeconfig ~/.kube/config --leader-elect=false"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions of the four kinds (multi-document YAML), as
    /// committed under config/crd.
    Crds,

    /// Run the Cluster, Component and Hypervisor controllers against a management cluster.
    Run(Box<RunArgs>),

    /// Print the version of oi-manager.
    Version,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubeconfig of the management cluster. Without it: KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Watch Clusters and Components of this namespace only (Hypervisors are cluster
    /// scoped and always watched). Default: every namespace.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Elect a leader on a Lease, so that several replicas can run and one reconciles.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,

    /// Namespace of the leader Lease.
    #[arg(long, value_name = "NAMESPACE", env = "POD_NAMESPACE",
          default_value = DEFAULT_LEADER_ELECTION_NAMESPACE)]
    pub leader_election_namespace: String,

    /// Name of the leader Lease.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_LEADER_ELECTION_ID)]
    pub leader_election_id: String,

    /// This replica's identity in the Lease and in events. Default: the host name and the
    /// process id.
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub leader_election_identity: Option<String>,

    /// How long a Lease stays valid after its last renewal.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = oi_cli_io::parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// A leader that could not renew for this long steps down (and oi-manager exits).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = oi_cli_io::parse_duration)]
    pub leader_election_renew_deadline: Duration,

    /// Delay between attempts to acquire or renew the Lease.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = oi_cli_io::parse_duration)]
    pub leader_election_retry_period: Duration,

    /// Where /metrics is served.
    #[arg(long, value_name = "ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: SocketAddr,

    /// Where /healthz and /readyz are served.
    #[arg(long, value_name = "ADDRESS", default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: SocketAddr,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,

    /// How long one reconcile waits for a cluster to become ready before requeueing it.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: Duration,

    /// Next look at a ready cluster (drift check).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub requeue_ready: Duration,

    /// Next look at a cluster that is not ready yet.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = oi_cli_io::parse_duration)]
    pub requeue_not_ready: Duration,

    /// How often each hypervisor's CRI endpoint is probed.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = oi_cli_io::parse_duration)]
    pub hypervisor_probe_interval: Duration,

    /// Replace what runs on a hypervisor that has not answered for this long (probes every
    /// --hypervisor-probe-interval), as if it had been removed: a lost replica's etcd member
    /// removed (only while the members that stay keep a quorum) and a replacement joined
    /// elsewhere, one cluster at a time. Off by default: a machine that is only rebooting or
    /// cut off for a while would otherwise have its replicas moved, and a partition that
    /// hides many machines would move many clusters at once; set it (e.g. 10m) where
    /// machines that stop answering are gone. Deleting a Hypervisor replaces what runs on it
    /// at once either way.
    #[arg(long, value_name = "DURATION", value_parser = oi_cli_io::parse_duration)]
    pub replace_unreachable_after: Option<Duration>,

    /// First delay after a failed reconcile, doubled per consecutive failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = oi_cli_io::parse_duration)]
    pub backoff_min: Duration,

    /// Longest delay after failed reconciles.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub backoff_max: Duration,

    /// A `CertificateExpiring` event is raised this many days before a cluster's CA expires
    /// (CAs are replaced by a rotation, which someone starts).
    #[arg(long, value_name = "DAYS", default_value_t = 90)]
    pub ca_expiry_warning_days: u32,

    /// ... and this many days before any other certificate expires (those are renewed 30
    /// days ahead: one this close was not).
    #[arg(long, value_name = "DAYS", default_value_t = 7)]
    pub certificate_expiry_warning_days: u32,

    /// How many reconciles run at once (all controllers together).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub concurrency: usize,

    /// On SIGTERM, how long reconciles under way may take to finish before the process
    /// exits (then without releasing the Lease, which expires).
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = oi_cli_io::parse_duration)]
    pub shutdown_timeout: Duration,

    /// Log filter (tracing's EnvFilter syntax: `info`, `oi_manager=debug,kube=warn`).
    #[arg(long, value_name = "FILTER", env = "RUST_LOG", default_value = "info")]
    pub log: String,
}

/// Parses a command line (`args[0]` is the program name).
///
/// # Errors
/// clap's error for unknown flags and bad values; `.exit()` prints it with usage.
pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args)
}

/// Flags that parse but do not make sense together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("--{flag} must be longer than zero")]
    Zero { flag: &'static str },
    #[error("--backoff-min ({min:?}) must not be longer than --backoff-max ({max:?})")]
    Backoff { min: Duration, max: Duration },
    #[error(
        "--leader-election-lease-duration ({lease:?}) must be longer than \
         --leader-election-renew-deadline ({renew:?}), which must be longer than \
         --leader-election-retry-period ({retry:?})"
    )]
    Lease {
        lease: Duration,
        renew: Duration,
        retry: Duration,
    },
    #[error("--{flag} must not be empty")]
    Empty { flag: &'static str },
}

/// What `run` works with, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub kubeconfig: Option<PathBuf>,
    pub namespace: Option<String>,
    /// `None` without leader election.
    pub lease: Option<LeaseConfig>,
    pub identity: String,
    pub metrics_address: SocketAddr,
    pub probe_address: SocketAddr,
    pub options: ManagerOptions,
    pub toolbox_image: String,
    pub concurrency: usize,
    pub shutdown_timeout: Duration,
}

impl RunArgs {
    /// Checks the flags and builds the settings. `default_identity` is used when neither
    /// `--leader-election-identity` nor `POD_NAME` says.
    ///
    /// # Errors
    /// [`ArgsError`] for zero durations, a backoff or lease timing out of order, empty names.
    pub fn settings(&self, default_identity: &str) -> Result<Settings, ArgsError> {
        for (flag, value) in [
            ("max-wait", self.max_wait),
            ("requeue-ready", self.requeue_ready),
            ("requeue-not-ready", self.requeue_not_ready),
            ("hypervisor-probe-interval", self.hypervisor_probe_interval),
            ("backoff-min", self.backoff_min),
            (
                "leader-election-retry-period",
                self.leader_election_retry_period,
            ),
        ] {
            if value.is_zero() {
                return Err(ArgsError::Zero { flag });
            }
        }
        if self.concurrency == 0 {
            return Err(ArgsError::Zero {
                flag: "concurrency",
            });
        }
        if self.backoff_min > self.backoff_max {
            return Err(ArgsError::Backoff {
                min: self.backoff_min,
                max: self.backoff_max,
            });
        }
        if self.namespace.as_deref() == Some("") {
            return Err(ArgsError::Empty { flag: "namespace" });
        }
        let identity = match self.leader_election_identity.as_deref() {
            Some("") => {
                return Err(ArgsError::Empty {
                    flag: "leader-election-identity",
                });
            }
            Some(identity) => identity.to_string(),
            None => default_identity.to_string(),
        };
        let lease = if self.leader_elect {
            let (lease, renew, retry) = (
                self.leader_election_lease_duration,
                self.leader_election_renew_deadline,
                self.leader_election_retry_period,
            );
            if lease <= renew || renew <= retry {
                return Err(ArgsError::Lease {
                    lease,
                    renew,
                    retry,
                });
            }
            for (flag, value) in [
                ("leader-election-namespace", &self.leader_election_namespace),
                ("leader-election-id", &self.leader_election_id),
            ] {
                if value.is_empty() {
                    return Err(ArgsError::Empty { flag });
                }
            }
            Some(LeaseConfig {
                namespace: self.leader_election_namespace.clone(),
                name: self.leader_election_id.clone(),
                identity: identity.clone(),
                lease_duration: lease,
                renew_deadline: renew,
                retry_period: retry,
            })
        } else {
            None
        };
        let repository = self.image_repository.clone().filter(|r| !r.is_empty());
        let mut options = ManagerOptions::default();
        options.plan.render = RenderOptions {
            image_repository: repository.clone(),
        };
        options.execute.max_wait = self.max_wait;
        options.requeue_ready = self.requeue_ready;
        options.requeue_not_ready = self.requeue_not_ready;
        options.hypervisor_probe_interval = self.hypervisor_probe_interval;
        if let Some(after) = self.replace_unreachable_after {
            if after.is_zero() {
                return Err(ArgsError::Zero {
                    flag: "replace-unreachable-after",
                });
            }
            options.plan.prepare.replace_unreachable_after = time::Duration::try_from(after).ok();
        }
        options.backoff_min = self.backoff_min;
        options.backoff_max = self.backoff_max;
        options.snapshot_store = oi_s3::Store::new(oi_s3::S3Config::from_env());
        options.certificate_warning = crate::controller::CertificateWarning {
            ca: time::Duration::days(i64::from(self.ca_expiry_warning_days)),
            leaf: time::Duration::days(i64::from(self.certificate_expiry_warning_days)),
        };
        Ok(Settings {
            kubeconfig: self.kubeconfig.clone(),
            namespace: self.namespace.clone(),
            lease,
            identity,
            metrics_address: self.metrics_bind_address,
            probe_address: self.health_probe_bind_address,
            options,
            toolbox_image: INFRA.toolbox.reference(repository.as_deref()),
            concurrency: self.concurrency,
            shutdown_timeout: self.shutdown_timeout,
        })
    }
}

/// `HOST_PID`: unique among processes that run at once, which is what a Lease holder must
/// be (two processes with one identity would both think they lead).
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "oi-manager".to_string());
    format!("{host}_{}", std::process::id())
}

#[cfg(test)]
mod tests;
