//! Test support for oi-manager, apart from the product library a user links:
//!
//! - [`memory::MemoryStore`]: the [`oi_manager::store::Store`] in process, with Kubernetes
//!   semantics (resource versions, conflicts, finalizers, the status subresource), which the
//!   store contract suite checks against `KubeStore` over the API server stand-in;
//! - [`driver::Driver`]: the controllers run in process over a `MemoryStore`, as kube-runtime
//!   runs them over an API server;
//! - [`apiserver_standin::ApiServer`]: a management API server stand-in on loopback, its
//!   objects in memory or in a real etcd ([`etcd::EtcdProcess`]) (lists, resumable watches,
//!   Leases, Events), for tests of the binary and the manager-scale benchmark.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod apiserver_standin;
pub mod driver;
pub mod etcd;
pub mod memory;
