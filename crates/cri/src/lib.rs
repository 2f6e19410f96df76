//! `oi-cri`: how oneinfra drives a hypervisor's container runtime over CRI v1.
//!
//! ```text
//!  engine ──► HypervisorRuntime (trait) ──► CriClient ──gRPC──► containerd / CRI-O
//!                    │                         │  unix socket, or TCP + mutual TLS
//!                    └─ fake::FakeRuntime      └─ requests: CRI messages built as values
//!                       (unit tests)
//! ```
//!
//! - [`CriClient`] connects to a [`CriEndpoint`] (a Unix socket, or TCP with mutual TLS
//!   verified against the Hypervisor's CA only), bounds every connect and call, reconnects
//!   lazily after the runtime restarts and counts its mutating calls.
//! - [`HypervisorRuntime`] is the narrow interface the engine uses: ensure images and pods
//!   (a pod whose spec hash is unchanged and whose containers run costs no mutating call),
//!   list and remove pods, run a container to completion, write and remove host files through
//!   a short-lived toolbox container (unchanged files cost no call at all).
//! - [`requests`] builds every CRI request from `oi_api::runtime` specs without I/O.
//! - [`containerd`] renders an isolated containerd 1.6 configuration and runs the process
//!   (optionally in a network namespace and a private mount namespace), for local
//!   hypervisors and tests.
//!
//! Every pod is a host-network pod (`NamespaceMode::Node`): hypervisors need no CNI.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod client;
pub mod containerd;
mod endpoint;
mod error;
pub mod fake;
pub mod requests;
mod runtime;
mod transport;

pub use client::CriClient;
pub use endpoint::{ClientOptions, CriEndpoint, TcpAddress, parse_tcp_uri};
pub use error::{Error, Result, Target};
pub use runtime::{
    ContainerState, ContainerStatus, Exit, HypervisorRuntime, Outcome, PodDecision, PodState,
    PodStatus, pod_decision,
};

/// The CRI v1 protocol types, for callers that build or inspect raw requests.
pub use k8s_cri::v1 as cri;
