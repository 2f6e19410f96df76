//! The cluster VPN, decided without I/O: addresses, the endpoint's configuration, and what
//! the engine needs to keep it in step with the workers that join.
//!
//! ```text
//! spec.vpn {CIDR 10.0.0.0/16, keys}     the endpoint (ingress, public hypervisor):
//!                                         10.0.0.1/16, UDP <wireguard port>, interface
//!                                         wg<12 hex of sha256(namespace/cluster)>
//! status.vpnPeers [{worker-<node>,       one [Peer] each in its configuration file
//!   10.0.0.N/16, public key,              (AllowedIPs 10.0.0.N/32), applied live: a peer
//!   private key only for oneinfra's        that comes or goes restarts nothing
//!   old form}]
//! ```
//!
//! Addresses: the first of the CIDR is the endpoint's; workers get the lowest free one after
//! it (a worker that leaves hands its address to the next). The API servers reach kubelets
//! through the endpoint's egress proxy ([`crate::render`]), not as peers: their hypervisors'
//! host network is shared with other clusters, whose VPN CIDR may be the same.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use base64::Engine as _;
use ipnet::IpNet;
use oi_api::runtime::HostFile;
use oi_api::{Cluster, VpnPeer};

/// How often the endpoint sends a keepalive to each peer (and, turned on, sends one at
/// once: a restarted endpoint finds workers behind NAT again at their last endpoint).
pub const ENDPOINT_KEEPALIVE: u16 = 25;
/// How often a worker sends one to the endpoint (oneinfra's 20 s), keeping its NAT mapping.
pub const WORKER_KEEPALIVE: u16 = 20;
/// The name of a worker's peer (oneinfra's).
pub fn peer_name(node: &str) -> String {
    format!("worker-{node}")
}

/// The node of a peer named by [`peer_name`].
pub fn peer_node(peer: &str) -> Option<&str> {
    peer.strip_prefix("worker-")
}

/// The endpoint's WireGuard interface: unique per cluster on a hypervisor (it is created in
/// the host's namespace before it moves into the cluster's), at most 15 characters.
pub fn interface_name(namespace: &str, cluster: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{namespace}/{cluster}").as_bytes());
    format!("wg{}", &hex::encode(digest)[..12])
}

/// The cluster's VPN CIDR, as a network.
///
/// # Errors
/// It does not parse, or leaves no room for the endpoint and one peer.
pub fn cidr(cluster: &Cluster) -> Result<IpNet, String> {
    let text = &cluster.spec.vpn.cidr;
    let net: IpNet = text
        .parse()
        .map_err(|_| format!("spec.vpn.CIDR {text:?} is not a CIDR"))?;
    let net = net.trunc();
    // The network address, the endpoint, one peer, and (IPv4) the broadcast address.
    let spare = u32::from(net.max_prefix_len() - net.prefix_len());
    if spare < 2 {
        return Err(format!(
            "spec.vpn.CIDR {text} leaves no room for the endpoint and a peer"
        ));
    }
    Ok(net)
}

/// The endpoint's address: the first host address, with the CIDR's prefix.
pub fn endpoint_address(cidr: IpNet) -> IpNet {
    let first = nth(cidr, 1);
    // The prefix length is the CIDR's own: valid for the address family.
    IpNet::new(first, cidr.prefix_len()).unwrap_or(cidr)
}

/// The `n`th address of `cidr` (0 is the network address).
fn nth(cidr: IpNet, n: u128) -> IpAddr {
    match cidr.network() {
        IpAddr::V4(a) => IpAddr::V4(std::net::Ipv4Addr::from(
            u32::from(a).wrapping_add(n as u32),
        )),
        IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(a).wrapping_add(n))),
    }
}

/// The address of a peer (`10.0.0.2/16` as oneinfra writes it, or a bare address).
pub fn peer_ip(peer: &VpnPeer) -> Option<IpAddr> {
    let a = peer.address.as_str();
    a.parse::<IpNet>()
        .map(|n| n.addr())
        .or_else(|_| a.parse::<IpAddr>())
        .ok()
}

/// The lowest address of `cidr` after the endpoint's that no peer of `peers` holds.
pub fn free_address(cidr: IpNet, peers: &[VpnPeer]) -> Option<IpAddr> {
    let taken: BTreeSet<IpAddr> = peers.iter().filter_map(peer_ip).collect();
    let last = nth(cidr, 0);
    let broadcast = cidr.broadcast();
    let v4 = matches!(cidr, IpNet::V4(_));
    (2u128..)
        .map(|n| nth(cidr, n))
        .take_while(|a| cidr.contains(a) && *a != last)
        .filter(|a| !(v4 && *a == broadcast))
        .find(|a| !taken.contains(a))
}

/// Whether `key` is a WireGuard key's form (base64 of 32 bytes).
pub fn is_wireguard_key(key: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .is_ok_and(|b| b.len() == 32)
}

/// The endpoint's configuration file (WireGuard's format, what `oi-vpn-endpoint` reads):
/// its key and port, and one `[Peer]` per peer with a public key, by name.
pub fn endpoint_config(private_key: &str, listen_port: u16, peers: &[VpnPeer]) -> String {
    let mut out = format!(
        "# The WireGuard endpoint of a cluster VPN, written by oneinfra: changes apply live.\n[Interface]\nPrivateKey = {private_key}\nListenPort = {listen_port}\n"
    );
    let mut sorted: Vec<&VpnPeer> = peers
        .iter()
        .filter(|p| is_wireguard_key(&p.public_key))
        .collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for p in sorted {
        let Some(ip) = peer_ip(p) else {
            continue;
        };
        let host = IpNet::from(ip);
        out.push_str(&format!(
            "\n[Peer]\n# {}\nPublicKey = {}\nAllowedIPs = {host}\nPersistentKeepalive = {ENDPOINT_KEEPALIVE}\n",
            p.name, p.public_key
        ));
    }
    out
}

/// What the engine needs to keep a VPN cluster's endpoint in step with its workers: the
/// peers recorded, how to answer with the VPN part, and the endpoint's configuration file on
/// the ingress. `Debug` never shows a key.
#[derive(Clone, PartialEq, Eq)]
pub struct VpnPlan {
    pub cidr: IpNet,
    /// `host:port` workers reach the endpoint at (`status.vpnServerEndpoint`).
    pub endpoint: String,
    /// The endpoint's public key.
    pub public_key: String,
    /// `status.vpnPeers` as planned.
    pub peers: Vec<VpnPeer>,
    /// The ingress's hypervisor and name.
    pub hypervisor: String,
    pub component: String,
    /// The configuration file's path on that hypervisor.
    pub path: String,
    private_key: String,
    listen_port: u16,
}

impl fmt::Debug for VpnPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VpnPlan")
            .field("cidr", &self.cidr)
            .field("endpoint", &self.endpoint)
            .field("peers", &self.peers.len())
            .field("hypervisor", &self.hypervisor)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The mode of the endpoint's configuration file (it holds the private key).
pub const CONFIG_MODE: u32 = 0o600;

impl VpnPlan {
    /// The plan of `cluster`'s VPN with its endpoint on `hypervisor` as component
    /// `component`, its file at `path`, listening on `listen_port`.
    ///
    /// # Errors
    /// The CIDR does not do, or the keys are missing.
    pub fn new(
        cluster: &Cluster,
        hypervisor: &str,
        component: &str,
        path: String,
        listen_port: u16,
    ) -> Result<VpnPlan, String> {
        let vpn = &cluster.spec.vpn;
        if vpn.private_key.is_empty() || vpn.public_key.is_empty() {
            return Err("the cluster VPN has no keys".into());
        }
        let mut peers = cluster.status.vpn_peers.clone();
        peers.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(VpnPlan {
            cidr: cidr(cluster)?,
            endpoint: cluster.status.vpn_server_endpoint.clone(),
            public_key: vpn.public_key.clone(),
            peers,
            hypervisor: hypervisor.to_string(),
            component: component.to_string(),
            path,
            private_key: vpn.private_key.clone(),
            listen_port,
        })
    }

    /// The endpoint's configuration file holding `peers`.
    pub fn file(&self, peers: &[VpnPeer]) -> HostFile {
        HostFile {
            path: self.path.clone(),
            content: endpoint_config(&self.private_key, self.listen_port, peers).into_bytes(),
            mode: CONFIG_MODE,
        }
    }

    /// A peer's address as the answer gives it: with the CIDR's prefix.
    pub fn peer_address(&self, ip: IpAddr) -> String {
        IpNet::new(ip, self.cidr.prefix_len())
            .map(|n| n.to_string())
            .unwrap_or_else(|_| ip.to_string())
    }
}

#[cfg(test)]
mod tests;
