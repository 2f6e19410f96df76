//! `oi-manager`: oneinfra's second front end. The same reconciliation as `oi reconcile`
//! (oi-planner's plan and oi-engine's steps, no second implementation of any step) run by
//! controllers over Hypervisor, Cluster and Component objects held in a [`store::Store`]:
//! custom resources on a management Kubernetes cluster ([`kube_store::KubeStore`]) or an
//! in-process store ([`memory::MemoryStore`]).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(any(test, feature = "standin"))]
pub mod apiserver_standin;
pub mod controller;
pub mod driver;
pub mod http;
pub mod kube_store;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod run;
pub mod store;
