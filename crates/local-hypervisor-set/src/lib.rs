//! `oi-local-hypervisor-set`: real hypervisors on one machine, for demos and tests.
//!
//! A *set* is a few hypervisors sharing one /24. Each hypervisor is a network namespace
//! reached from the host through a veth pair on the set's bridge, running its own containerd
//! (own root, state, socket and runc root) in a private mount namespace where a directory of
//! its own is mounted over /var/lib/oneinfra, /etc/oneinfra (and /var/log/oneinfra, for pod
//! logs), so files oneinfra places on "the hypervisor" do not collide with another
//! hypervisor's on the same machine. With
//! `--tcp`, haproxy inside the namespace fronts the socket with mutual TLS. With `--workers`,
//! worker hosts (a namespace and a containerd each, no images) sit on a LAN of their own
//! behind a router namespace that masquerades their traffic and drops connections towards
//! them: they reach the hypervisors, nothing reaches them (see [`plan`]). `exec` runs a
//! command on any host of a set.
//!
//! ```text
//!   host ── bridge ohsXXXX (10.x.y.1/24)
//!              ├── veth ══ netns <set>-private-1 (10.x.y.2): containerd [+ haproxy :27000]
//!              ├── veth ══ netns <set>-public-1  (10.x.y.3): containerd [+ haproxy :27000]
//!              └── veth ══ netns <set>-router (10.x.y.254) ══ LAN 10.a.b.0/24, NAT
//!                                              └── netns <set>-worker-1 (10.a.b.2): containerd
//!   /var/lib/oi-local-hypervisor-set/<set>/state.json   what exists, written atomically
//! ```
//!
//! ```text
//! # oi-local-hypervisor-set create --name demo --size-private 1 --size-public 1 > hypervisors.yaml
//! set demo: subnet 10.164.197.0/24, bridge ohs24c5, 2 hypervisors
//! ...
//! set demo: ready in 3.9s
//! # oi-local-hypervisor-set list
//! SET   STATE  HOST            IP            KIND     ENDPOINT                                                          CONTAINERD
//! demo  ready  demo-private-1  10.164.197.2  private  unix:///run/oi-local-hypervisor-set/demo/demo-private-1/cri.sock  29249 running
//! demo  ready  demo-public-1   10.164.197.3  public   unix:///run/oi-local-hypervisor-set/demo/demo-public-1/cri.sock   29261 running
//! # oi-local-hypervisor-set destroy --name demo
//! ```
//!
//! Decisions (names, subnet, layout, configuration files, manifests) are pure functions in
//! [`plan`], [`containerd`], [`front`] and [`manifest`]; [`commands`] applies them through
//! the [`System`] trait ([`RealSystem`]: `ip`, `unshare`, `nsenter`, `containerd`, `ctr`,
//! `haproxy`, /proc and CRI; unit tests use a recording fake).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod commands;
pub mod containerd;
pub mod cri;
pub mod error;
pub mod front;
pub mod host;
pub mod manifest;
pub mod plan;
pub mod procs;
pub mod state;
pub mod system;

pub use error::{Error, Result};
pub use state::Paths;
pub use system::{RealSystem, System};

/// Host commands the crate needs, for prerequisite checks.
pub const REQUIRED_COMMANDS: [&str; 7] = [
    "ip",
    "nsenter",
    "unshare",
    "containerd",
    "runc",
    "ctr",
    "haproxy",
];

/// Compares generated text with a checked-in golden file under `tests/golden/`.
#[cfg(test)]
pub(crate) fn assert_golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    oi_testsupport::assert_golden(&path, actual, "cargo test -p oi-local-hypervisor-set");
}
