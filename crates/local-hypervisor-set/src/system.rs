//! The narrow boundary between the commands and the machine: every network, process and
//! runtime effect `create` and `destroy` have goes through [`System`]. [`RealSystem`] drives
//! `ip`, /proc, signals, containerd, `ctr`, haproxy and CRI; unit tests pass a recording fake
//! instead (see `commands/tests.rs`). Files under the set's directories are not part of it:
//! tests point [`crate::Paths`] at a temporary directory.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::Ipv4Net;

use crate::error::Result;
use crate::front::FrontCredentials;
use crate::state::{HypervisorPaths, NatState, WorkerState};
use crate::{containerd, cri, front, host, procs};

/// What the commands need from the machine.
pub trait System: Sync {
    /// IPv4 networks on the host (addresses and routes).
    fn host_ipv4_networks(&self) -> Result<Vec<Ipv4Net>>;
    /// Network interface names on the host.
    fn host_links(&self) -> Result<Vec<String>>;
    fn link_exists(&self, name: &str) -> bool;
    /// Names of the network namespaces under /run/netns.
    fn netns_names(&self) -> Result<Vec<String>>;
    fn create_bridge(&self, name: &str, gateway: Ipv4Addr, subnet: Ipv4Net) -> Result<()>;
    fn create_hypervisor_network(
        &self,
        netns: &str,
        host_veth: &str,
        bridge: &str,
        ip: Ipv4Addr,
        subnet: Ipv4Net,
        gateway: Ipv4Addr,
    ) -> Result<()>;
    /// The set's NAT router and its LAN (see [`host::create_nat_router`]).
    fn create_nat_router(&self, nat: &NatState, bridge: &str, subnet: Ipv4Net) -> Result<()>;
    /// A worker's namespace on the router's LAN.
    fn create_worker_network(&self, nat: &NatState, worker: &WorkerState) -> Result<()>;
    /// The addresses the host reaches through its routes that matter to it: its name
    /// servers (/etc/resolv.conf) and its gateways.
    fn host_reached_addresses(&self) -> Result<Vec<Ipv4Addr>>;
    /// Makes the host's `unreachable` routes inside the sets' pool exactly `routes` (added,
    /// and others of the pool removed), so that traffic to a destroyed set's address fails
    /// here instead of going out through the default route. Idempotent.
    fn ensure_unreachable(&self, routes: &[Ipv4Net]) -> Result<()>;
    fn delete_netns(&self, name: &str) -> Result<()>;
    fn delete_link(&self, name: &str) -> Result<()>;
    /// Starts a hypervisor's containerd, detached; its PID.
    fn start_containerd(&self, netns: &str, paths: &HypervisorPaths) -> Result<u32>;
    /// Waits until a started containerd's socket accepts connections.
    fn wait_containerd(&self, hypervisor: &str, pid: u32, paths: &HypervisorPaths) -> Result<()>;
    fn import_images(&self, socket: &Path, tarballs: &[PathBuf]) -> Result<()>;
    /// Ensures a hypervisor's mutual-TLS front (a pod through its containerd) and waits
    /// until it answers; what a client needs to reach it.
    fn start_front(
        &self,
        hypervisor: &str,
        paths: &HypervisorPaths,
        ip: Ipv4Addr,
        port: u16,
    ) -> Result<FrontCredentials>;
    /// Stops and removes every pod through CRI; how many there were.
    fn remove_all_pods(&self, hypervisor: &str, socket: &Path) -> Result<usize>;
    /// Whether `pid` is alive and its command line contains `marker`.
    fn alive_with(&self, pid: u32, marker: &str) -> bool;
    /// SIGTERM, `grace`, SIGKILL; the PIDs that survived.
    fn terminate(&self, pids: &[u32], grace: Duration) -> Result<Vec<u32>>;
    /// Live processes whose command line contains one of `markers`.
    fn pids_mentioning(&self, markers: &[String]) -> Vec<u32>;
    /// Live processes inside network namespace `netns`.
    fn pids_in_netns(&self, netns: &str) -> Vec<u32>;
}

/// This machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealSystem;

impl System for RealSystem {
    fn host_ipv4_networks(&self) -> Result<Vec<Ipv4Net>> {
        host::host_ipv4_networks()
    }

    fn host_links(&self) -> Result<Vec<String>> {
        host::host_links()
    }

    fn host_reached_addresses(&self) -> Result<Vec<Ipv4Addr>> {
        host::host_reached_addresses()
    }

    fn ensure_unreachable(&self, routes: &[Ipv4Net]) -> Result<()> {
        host::ensure_unreachable(routes)
    }

    fn link_exists(&self, name: &str) -> bool {
        host::link_exists(name)
    }

    fn netns_names(&self) -> Result<Vec<String>> {
        host::netns_names()
    }

    fn create_bridge(&self, name: &str, gateway: Ipv4Addr, subnet: Ipv4Net) -> Result<()> {
        host::create_bridge(name, gateway, subnet)
    }

    fn create_hypervisor_network(
        &self,
        netns: &str,
        host_veth: &str,
        bridge: &str,
        ip: Ipv4Addr,
        subnet: Ipv4Net,
        gateway: Ipv4Addr,
    ) -> Result<()> {
        host::create_hypervisor_network(netns, host_veth, bridge, ip, subnet, gateway)
    }

    fn create_nat_router(&self, nat: &NatState, bridge: &str, subnet: Ipv4Net) -> Result<()> {
        host::create_nat_router(
            &nat.router,
            &nat.router_veth,
            bridge,
            nat.uplink_ip,
            subnet,
            nat.lan,
            nat.lan_gateway,
        )
    }

    fn create_worker_network(&self, nat: &NatState, worker: &WorkerState) -> Result<()> {
        host::create_worker_network(
            &worker.name,
            &nat.router,
            &worker.router_port,
            worker.ip,
            nat.lan,
            nat.lan_gateway,
        )
    }

    fn delete_netns(&self, name: &str) -> Result<()> {
        host::delete_netns(name)
    }

    fn delete_link(&self, name: &str) -> Result<()> {
        host::delete_link(name)
    }

    fn start_containerd(&self, netns: &str, paths: &HypervisorPaths) -> Result<u32> {
        containerd::start(netns, paths)
    }

    fn wait_containerd(&self, hypervisor: &str, pid: u32, paths: &HypervisorPaths) -> Result<()> {
        containerd::wait_socket(
            "containerd",
            hypervisor,
            pid,
            &paths.socket,
            &paths.containerd_log,
            containerd::SOCKET_TIMEOUT,
        )
    }

    fn import_images(&self, socket: &Path, tarballs: &[PathBuf]) -> Result<()> {
        containerd::import_images(socket, tarballs)
    }

    fn start_front(
        &self,
        hypervisor: &str,
        paths: &HypervisorPaths,
        ip: Ipv4Addr,
        port: u16,
    ) -> Result<FrontCredentials> {
        front::start(hypervisor, paths, ip, port)
    }

    fn remove_all_pods(&self, hypervisor: &str, socket: &Path) -> Result<usize> {
        cri::remove_all_pods(hypervisor, socket)
    }

    fn alive_with(&self, pid: u32, marker: &str) -> bool {
        procs::alive_with(pid, marker)
    }

    fn terminate(&self, pids: &[u32], grace: Duration) -> Result<Vec<u32>> {
        procs::terminate(pids, grace)
    }

    fn pids_mentioning(&self, markers: &[String]) -> Vec<u32> {
        procs::pids_mentioning(markers)
    }

    fn pids_in_netns(&self, netns: &str) -> Vec<u32> {
        procs::pids_in_netns(&host::netns_path(netns))
    }
}
