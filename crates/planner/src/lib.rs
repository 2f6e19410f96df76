//! oi-planner: from the world to the plan of a run, and from what the run saw back to the
//! world. Pure and deterministic: no I/O; `now` is an input; the output is a function of the
//! input, except for freshly generated keys (the PKI crate takes randomness from the OS on
//! purpose).
//!
//! ```text
//! World {hypervisors, clusters, components}
//!    │ prepare(world, now)                                            (prepare)
//!    │   validate and verify, mint missing CAs/keys ─ all clusters, in parallel
//!    │   per cluster, in key order, all or nothing:
//!    │     derive components from controlPlaneReplicas ─► schedule new ones
//!    │     ─► allocate host ports ─► status endpoints ─► list wanted leaf certificates
//!    │   (re)issue stale leaf certificates ─ all clusters, in parallel   (certificates)
//!    ▼
//! Prepared {world, failures: cluster -> Error}
//!    │ plan_prepared: render every live component (pods, files)      (plan, render)
//!    │   pods to restart for changed files, etcd members and founders,  (restarts)
//!    │   components retiring, clusters torn down
//!    ▼
//! Plan {world, clusters: Unplannable | Teardown | Converge}  ──► oi-engine executes it
//!                                                                  │ ClusterResult per cluster
//! World ◄── record(plan.world, results, now) ◄───────────────────────┘   (record)
//! ```
//!
//! Scheduling ([`schedule`]): control plane replicas go on private hypervisors, the ingress on
//! a public one. A cluster's replicas use distinct hypervisors before any is reused, and
//! distinct failure domains before any domain is reused. The failure domain of a hypervisor
//! is the value of its label `topology.kubernetes.io/zone` ([`schedule::ZONE_LABEL`]); a
//! hypervisor without the label is a domain of its own. Among equals the least loaded
//! hypervisor (fewest components) wins, then name order. Placed components never move.
//!
//! Ports ([`ports`]): each hypervisor hands out ports of its range, freed ones first, with
//! the state in its status (`allocatedPorts`, `freedPorts`), as oneinfra does.
//!
//! A cluster whose preparation fails is left exactly as it was and reported in
//! [`Prepared::failures`]; the others proceed. Preparing a prepared world changes nothing.

pub mod bootstrap;
pub mod certificates;
pub mod expiry;
pub mod haproxy;
pub mod join;
mod par;
pub mod plan;
pub mod ports;
pub mod prepare;
pub mod record;
pub mod recover;
pub mod render;
pub mod restarts;
pub mod rotation;
pub mod schedule;
pub mod sip;
pub mod snapshot;
#[cfg(test)]
mod testutil;
pub mod verify;
pub mod vpn;

pub use plan::{
    ClusterPlan, ComponentPlan, Convergence, EtcdClientIdentity, EtcdMember, EtcdMembership,
    EtcdPlan, EtcdRejoin, Plan, PlanOptions, Retirement, Runs, SipPlan, Teardown, etcd_membership,
    plan, plan_prepared, plan_run,
};
pub use prepare::{
    PrepareOptions, Prepared, SharedAddresses, control_plane_name, forget_orphans,
    forget_removed_hypervisors, ingress_name, prepare, prepare_with, remove_cluster,
    remove_component, required_ports,
};
pub use record::{
    ClusterOutcome, ClusterResult, PlacedFiles, Reason, Recorded, record, record_run,
};

use oi_api::validation::FieldError;
use oi_api::{ComponentRole, ObjectKey};

/// An IP address as the host part of a URL: IPv6 in brackets.
pub(crate) fn url_host(ip: &str) -> String {
    if ip.contains(':') && !ip.starts_with('[') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    }
}

/// Why a cluster could not be prepared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster} cannot be scheduled: there is no public hypervisor for its ingress")]
    NoPublicHypervisor { cluster: ObjectKey },
    #[error(
        "cluster {cluster} cannot be scheduled: there is no private hypervisor for its control plane"
    )]
    NoPrivateHypervisor { cluster: ObjectKey },
    #[error(
        "cluster {cluster} cannot be scheduled: {missing} more {role} component(s) fit on no {} hypervisor ({hypervisors})",
        hypervisor_kind(*role)
    )]
    NoCapacity {
        cluster: ObjectKey,
        role: ComponentRole,
        /// Components that found no room.
        missing: usize,
        /// Each candidate hypervisor and what it lacks.
        hypervisors: String,
    },
    #[error(
        "cluster {cluster} cannot be scheduled: its ingresses share an address, so their {port} ports must be the same, and no port is free on all of {hypervisors}"
    )]
    NoCommonIngressPort {
        cluster: ObjectKey,
        port: String,
        hypervisors: String,
    },
    #[error(
        "cluster {cluster} cannot be scheduled: its {replicas} ingresses need a public hypervisor each, and only {available} can take one"
    )]
    IngressesNotApart {
        cluster: ObjectKey,
        replicas: usize,
        available: usize,
    },
    #[error("cluster {cluster}: {what}")]
    IngressAddressTaken {
        cluster: ObjectKey,
        /// The field, its value and who else has it.
        what: String,
    },
    #[error("port range {low}-{high} of hypervisor {hypervisor} is exhausted")]
    PortRangeExhausted {
        hypervisor: String,
        low: u32,
        high: u32,
    },
    #[error("hypervisor {hypervisor} has no valid port range ({low}-{high})")]
    InvalidPortRange {
        hypervisor: String,
        low: u32,
        high: u32,
    },
    #[error(
        "component {component} of cluster {cluster} is on hypervisor {hypervisor}, which does not exist (to replace what ran on a hypervisor gone for good, keep its document and run `oi hypervisor remove --name {hypervisor}`)"
    )]
    UnknownHypervisor {
        cluster: ObjectKey,
        component: ObjectKey,
        hypervisor: String,
    },
    #[error("{object} is invalid: {}", describe(errors))]
    Invalid {
        object: ObjectKey,
        errors: Vec<FieldError>,
    },
    #[error(
        "cluster {cluster} runs Kubernetes {from} and cannot go to {to} (spec.kubernetesVersion): {reason}; nothing was changed"
    )]
    UpgradeRefused {
        cluster: ObjectKey,
        from: String,
        to: String,
        reason: String,
    },
    #[error("cannot render component {component}: missing {missing}")]
    Render {
        component: ObjectKey,
        /// What the prepared world lacks.
        missing: String,
    },
    #[error("cluster {cluster}: generating {field}: {message}")]
    Pki {
        cluster: ObjectKey,
        /// The Cluster field that was to hold the generated CA or key pair.
        field: &'static str,
        /// The PKI error, as text (it holds no secret).
        message: String,
    },
}

fn hypervisor_kind(role: ComponentRole) -> &'static str {
    match role {
        ComponentRole::ControlPlane | ComponentRole::ApiServer => "private",
        ComponentRole::ControlPlaneIngress => "public",
    }
}

fn describe(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("field `{}`: {}", e.field, e.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
