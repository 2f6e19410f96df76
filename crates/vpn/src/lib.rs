//! `oi-vpn`: the cluster VPN's endpoint, run on the public hypervisor of a cluster's ingress
//! (the `oi-vpn-endpoint` binary of the VPN endpoint image, in a privileged host-network pod).
//!
//! ```text
//!            public hypervisor (host network)                  cluster namespace
//! workers ─UDP─► wireguard-go :<vpn port> ═══ tun wgXXXXXXXXXXXX ═══► 10.0.0.1/16
//!   (behind NAT: they dial out,                                    forwarding: worker
//!    keepalive 20 s)                                                ⇄ worker
//! API servers ─TLS─► egress proxy :<proxy port> ── CONNECT 10.0.0.N:10250 ─► dialled in
//!   (--egress-selector-config-file)                                the namespace
//! ```
//!
//! Why a namespace per cluster: two clusters with the same VPN CIDR on one hypervisor would
//! otherwise share routes. Why wireguard-go's UDP socket stays in the host namespace: the
//! port is the hypervisor's, allocated from its range. Why an egress proxy rather than
//! WireGuard on every control plane replica: the replicas share their hypervisors' host
//! network with other clusters (the same collision), and one place holds the peers.
//!
//! [`config`] reads the file the planner renders, [`uapi`] drives wireguard-go, [`netns`]
//! holds the namespace, [`proxy`] serves `CONNECT`, [`endpoint`] runs it all.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
pub mod endpoint;
pub mod netns;
pub mod proxy;
pub mod uapi;
