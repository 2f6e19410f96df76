//! `oi-manager`: oneinfra's second front end. The same reconciliation as `oi reconcile`
//! (oi-planner's plan and oi-engine's steps, no second implementation of any step) run by
//! controllers over Hypervisor, Cluster and Component objects held in a [`store::Store`]:
//! custom resources on a management Kubernetes cluster ([`kube_store::KubeStore`]). Its test
//! doubles (an in-process store, an in-process controller loop, an API server stand-in) are
//! in `oi-manager-testsupport`, not here.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod args;
pub mod cache;
pub mod controller;
pub mod http;
pub mod joins;
pub mod keys;
pub mod kube_store;
pub mod leader;
pub mod metrics;
pub mod run;
pub mod store;
pub mod wiring;

/// The allocator `oi-manager` runs with (and the manager-scale benchmark, which stands for
/// it): under several threads, glibc's malloc spent about half of the manager's CPU of a
/// 1,000-cluster resync in its own locks and consolidation (see docs/src/benchmarks.md).
pub use mimalloc::MiMalloc as Allocator;
