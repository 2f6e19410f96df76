//! The end-to-end scenarios, one module per file (see ../README.md), in one test binary.
//! Run one with its module path, e.g. `cargo nextest run -p oi-e2e --test e2e heal::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../testing/kube-standin/tests/support/kubectl.rs"]
mod kubectl;

mod api_servers;
mod chaos;
mod delete;
mod drain;
mod flood;
mod ha_ingress;
mod heal;
mod hypervisor_down;
mod hypervisor_join;
mod in_cluster;
mod killed_run;
mod managed_api;
mod manager;
mod manager_binary;
mod node_join;
mod oidc;
mod orphans;
mod rolling;
mod rotation;
mod scale;
mod single_cluster;
mod sip_services;
mod snapshot;
mod two_versions;
mod upgrade;
mod vpn;
