//! Pure decisions about a set: its name, subnet, addresses, interface and namespace names.
//!
//! A set owns one /24 of [`SUBNET_POOL`]. Its slot (the /24's index in the pool) is derived
//! from the set name by a stable hash and probed linearly past subnets already present on the
//! host, so the same name gets the same subnet on a clean machine. Interface names derive
//! from the slot, which no other set holds, so they are unique machine-wide.
//!
//! ```text
//! set "demo", slot 0x1a2b ─► 10.154.43.0/24
//!   bridge ohs1a2b (10.154.43.1) ─┬─ ohs1a2bv1 ══ eth0 10.154.43.2  netns demo-private-1
//!                                 ├─ ohs1a2bv2 ══ eth0 10.154.43.3  netns demo-public-1
//!                                 └─ ohs1a2br  ══ eth0 10.154.43.254 netns demo-router
//!   with --workers: a LAN of its own (another slot's /24, e.g. 10.201.7.0/24) behind the
//!   router, which masquerades what leaves it and drops connections that would enter:
//!     demo-router: bridge lan 10.201.7.1 ─┬─ w1 ══ eth0 10.201.7.2  netns demo-worker-1
//!                                         └─ w2 ══ eth0 10.201.7.3  netns demo-worker-2
//!   No hypervisor (nor the host) has a route to the LAN: workers are behind NAT.
//! ```

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The private range sets take their /24 from (10.128.0.0/9: 32768 slots).
pub const SUBNET_POOL: Ipv4Net = match Ipv4Net::new(Ipv4Addr::new(10, 128, 0, 0), 9) {
    Ok(net) => net,
    Err(_) => panic!("9 is a valid IPv4 prefix length"),
};
const SLOTS: u32 = 1 << (24 - 9);

/// Longest accepted set name: keeps socket paths under the 108-byte `sun_path` limit.
pub const MAX_SET_NAME: usize = 20;
/// At most this many hypervisors per set (a /24 minus network, gateway and broadcast).
pub const MAX_HYPERVISORS: usize = 253;
/// At most this many workers per set (their LAN's /24 minus network, gateway, broadcast).
pub const MAX_WORKERS: usize = 253;
/// The port range every hypervisor advertises for components.
pub const PORT_RANGE: (u32, u32) = (30000, 32767);
/// The TCP port of the mutual-TLS CRI front (outside [`PORT_RANGE`]).
pub const CRI_TLS_PORT: u16 = 27000;

/// Checks a set name: lowercase DNS label characters, at most [`MAX_SET_NAME`] long.
///
/// # Errors
/// [`Error::InvalidSetName`] naming the rule broken.
pub fn validate_set_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_SET_NAME {
        Some("longer than 20 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some("only lowercase letters, digits and '-' are allowed")
    } else if name.starts_with('-') || name.ends_with('-') {
        Some("must start and end with a letter or digit")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidSetName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// 64-bit FNV-1a: stable across Rust releases, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The /24 of a slot.
pub fn subnet_of_slot(slot: u16) -> Ipv4Net {
    let base = u32::from(SUBNET_POOL.network()) + (u32::from(slot) % SLOTS) * 256;
    // A /24 prefix is always valid.
    Ipv4Net::new(Ipv4Addr::from(base), 24).unwrap_or(SUBNET_POOL)
}

/// A host network that an `unreachable` route for [`SUBNET_POOL`] would partly hide: one
/// that holds the whole pool and more (a route for `10.0.0.0/8` through some gateway, say),
/// other than the default route and the pool's own. `None`: the route is safe to add.
pub fn pool_route_conflict(host_nets: &[Ipv4Net]) -> Option<Ipv4Net> {
    host_nets
        .iter()
        .find(|n| {
            n.prefix_len() > 0
                && n.prefix_len() < SUBNET_POOL.prefix_len()
                && n.contains(&SUBNET_POOL)
        })
        .copied()
}

/// The /24s of the pool holding `addresses` the host reaches through its routes (its name
/// servers, its gateways): no set takes them, and no `unreachable` route covers them.
pub fn reserved_in_pool(addresses: &[Ipv4Addr]) -> Vec<Ipv4Net> {
    let mut out: Vec<Ipv4Net> = addresses
        .iter()
        .filter(|a| SUBNET_POOL.contains(*a))
        .filter_map(|a| Ipv4Net::new(*a, 24).ok().map(|n| n.trunc()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The pool without `reserved`, in the fewest prefixes: where `unreachable` routes go, so
/// that an address of the pool no set holds (a destroyed set's) fails on this machine
/// instead of leaving through the default route.
pub fn unreachable_routes(reserved: &[Ipv4Net]) -> Vec<Ipv4Net> {
    fn without(net: Ipv4Net, hole: &Ipv4Net) -> Vec<Ipv4Net> {
        if hole.contains(&net) {
            return Vec::new();
        }
        if !net.contains(hole) {
            return vec![net];
        }
        // The hole is strictly inside: split in halves and go on in the one that holds it.
        net.subnets(net.prefix_len() + 1)
            .map(|halves| halves.flat_map(|h| without(h, hole)).collect())
            .unwrap_or_default()
    }
    let mut routes = vec![SUBNET_POOL];
    for hole in reserved {
        routes = routes.into_iter().flat_map(|n| without(n, hole)).collect();
    }
    routes.sort();
    routes
}

/// Whether two networks share an address.
pub fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Picks the set's slot: the name's hash, then the next slots in order, skipping any slot
/// for which `taken` says yes (a subnet or interface already on the host, another set's).
///
/// # Errors
/// [`Error::NoFreeSubnet`] when every slot is taken.
pub fn choose_slot(name: &str, mut taken: impl FnMut(u16) -> bool) -> Result<u16> {
    // SLOTS fits in u16 and the modulo keeps every value below it.
    let start = (fnv1a(name.as_bytes()) % u64::from(SLOTS)) as u32;
    (0..SLOTS)
        .map(|i| ((start + i) % SLOTS) as u16)
        .find(|slot| !taken(*slot))
        .ok_or_else(|| Error::NoFreeSubnet {
            name: name.to_string(),
            pool: SUBNET_POOL,
        })
}

/// Whether a slot is free given the IPv4 networks present on the host and the interface
/// names present on the host.
pub fn slot_is_free(slot: u16, host_nets: &[Ipv4Net], host_links: &[String]) -> bool {
    let subnet = subnet_of_slot(slot);
    let prefix = link_prefix(slot);
    !host_nets.iter().any(|n| overlaps(n, &subnet))
        && !host_links.iter().any(|l| l.starts_with(&prefix))
}

fn link_prefix(slot: u16) -> String {
    format!("ohs{slot:04x}")
}

/// The kind of a hypervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    Private,
    Public,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Private => "private",
            Visibility::Public => "public",
        }
    }
}

/// One hypervisor of a set, as decided before anything is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HypervisorPlan {
    /// `<set>-private-<n>` or `<set>-public-<n>`; also its network namespace name.
    pub name: String,
    pub visibility: Visibility,
    pub ip: Ipv4Addr,
    /// Host end of its veth pair (the other end is `eth0` inside the namespace).
    pub host_veth: String,
}

/// A whole set, as decided before anything is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetPlan {
    pub name: String,
    pub slot: u16,
    pub subnet: Ipv4Net,
    /// The bridge's address, the hypervisors' default gateway.
    pub gateway: Ipv4Addr,
    pub bridge: String,
    pub hypervisors: Vec<HypervisorPlan>,
    /// Workers behind a NAT router, when asked for.
    pub nat: Option<NatPlan>,
}

/// The workers of a set and the router they reach the hypervisors through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatPlan {
    /// `<set>-router`: its network namespace.
    pub router: String,
    /// Host end of its veth pair on the set's bridge (`eth0` inside).
    pub router_veth: String,
    /// Its address on the set's subnet (the last one).
    pub uplink_ip: Ipv4Addr,
    /// The workers' LAN, another slot's /24.
    pub lan: Ipv4Net,
    /// The router's address on the LAN, the workers' default gateway.
    pub lan_gateway: Ipv4Addr,
    pub workers: Vec<WorkerPlan>,
}

/// One worker: a network namespace on the LAN.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPlan {
    /// `<set>-worker-<n>`: also its network namespace.
    pub name: String,
    pub ip: Ipv4Addr,
    /// The router's end of its veth pair (inside the router's namespace, on its LAN bridge).
    pub router_port: String,
}

/// The name of a set's router (its network namespace).
pub fn router_name(set: &str) -> String {
    format!("{set}-router")
}

/// Lays out `workers` behind a router on the LAN of `lan_slot`, the router on the last
/// address of the set's subnet.
///
/// # Errors
/// [`Error::InvalidSize`] when there are too many workers, or the LAN is the set's subnet.
pub fn plan_nat(set: &SetPlan, lan_slot: u16, workers: usize) -> Result<NatPlan> {
    let invalid = |reason| Error::InvalidSize {
        private: set.hypervisors.len(),
        public: workers,
        reason,
    };
    if workers == 0 || workers > MAX_WORKERS {
        return Err(invalid("workers: between 1 and 253"));
    }
    if set.hypervisors.len() > MAX_HYPERVISORS - 1 {
        return Err(invalid(
            "with workers, at most 252 hypervisors (the router takes an address)",
        ));
    }
    let lan = subnet_of_slot(lan_slot);
    if lan == set.subnet {
        return Err(invalid("the workers' LAN cannot be the set's subnet"));
    }
    let lan_base = u32::from(lan.network());
    let base = u32::from(set.subnet.network());
    Ok(NatPlan {
        router: router_name(&set.name),
        router_veth: format!("{}r", link_prefix(set.slot)),
        uplink_ip: Ipv4Addr::from(base + 254),
        lan,
        lan_gateway: Ipv4Addr::from(lan_base + 1),
        workers: (0..workers)
            .map(|i| WorkerPlan {
                name: format!("{}-worker-{}", set.name, i + 1),
                // i < 253: inside the /24, below its broadcast address.
                ip: Ipv4Addr::from(lan_base + 2 + i as u32),
                router_port: format!("w{}", i + 1),
            })
            .collect(),
    })
}

/// Lays a set out: private hypervisors first, then public ones, addresses from `.2` up.
///
/// # Errors
/// [`Error::InvalidSetName`], or [`Error::InvalidSize`] for an empty or oversized set.
pub fn plan_set(name: &str, slot: u16, private: usize, public: usize) -> Result<SetPlan> {
    validate_set_name(name)?;
    let total = private + public;
    let reason = if total == 0 {
        Some("a set needs at least one hypervisor")
    } else if total > MAX_HYPERVISORS {
        Some("more than 253 hypervisors do not fit in a /24")
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(Error::InvalidSize {
            private,
            public,
            reason,
        });
    }
    let subnet = subnet_of_slot(slot);
    let base = u32::from(subnet.network());
    let kinds = std::iter::repeat_n(Visibility::Private, private)
        .enumerate()
        .chain(std::iter::repeat_n(Visibility::Public, public).enumerate());
    let hypervisors = kinds
        .enumerate()
        .map(|(i, (n, visibility))| HypervisorPlan {
            name: format!("{name}-{}-{}", visibility.as_str(), n + 1),
            visibility,
            // i < 253, so the address stays inside the /24 below the broadcast address.
            ip: Ipv4Addr::from(base + 2 + i as u32),
            host_veth: format!("{}v{}", link_prefix(slot), i + 1),
        })
        .collect();
    Ok(SetPlan {
        name: name.to_string(),
        slot,
        subnet,
        gateway: Ipv4Addr::from(base + 1),
        bridge: link_prefix(slot),
        hypervisors,
        nat: None,
    })
}

/// Whether `netns` names a hypervisor of set `set` (`<set>-private-<n>` or `<set>-public-<n>`).
/// Used to find leftovers of a set whose state file is gone.
pub fn is_hypervisor_of(set: &str, netns: &str) -> bool {
    numbered(set, netns, &["private-", "public-"])
}

/// Whether `netns` is one of set `set`'s: a hypervisor's, a worker's (`<set>-worker-<n>`) or
/// its router's.
pub fn is_namespace_of(set: &str, netns: &str) -> bool {
    numbered(set, netns, &["private-", "public-", "worker-"]) || netns == router_name(set)
}

fn numbered(set: &str, netns: &str, kinds: &[&str]) -> bool {
    let Some(rest) = netns.strip_prefix(set).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let Some(n) = kinds.iter().find_map(|k| rest.strip_prefix(k)) else {
        return false;
    };
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_names() {
        assert!(validate_set_name("demo-1").is_ok());
        for bad in [
            "",
            "-a",
            "a-",
            "Demo",
            "a_b",
            "a.b",
            "abcdefghijklmnopqrstu",
        ] {
            assert!(validate_set_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn layout() {
        let plan = plan_set("demo", 0x1a2b, 2, 1).unwrap();
        assert_eq!(plan.subnet, "10.154.43.0/24".parse::<Ipv4Net>().unwrap());
        assert_eq!(plan.gateway, Ipv4Addr::new(10, 154, 43, 1));
        assert_eq!(plan.bridge, "ohs1a2b");
        let got: Vec<_> = plan
            .hypervisors
            .iter()
            .map(|h| {
                (
                    h.name.as_str(),
                    h.visibility,
                    h.ip.to_string(),
                    h.host_veth.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "demo-private-1",
                    Visibility::Private,
                    "10.154.43.2".into(),
                    "ohs1a2bv1"
                ),
                (
                    "demo-private-2",
                    Visibility::Private,
                    "10.154.43.3".into(),
                    "ohs1a2bv2"
                ),
                (
                    "demo-public-1",
                    Visibility::Public,
                    "10.154.43.4".into(),
                    "ohs1a2bv3"
                ),
            ]
        );
    }

    #[test]
    fn interface_names_fit_and_are_unique() {
        let plan = plan_set("abcdefghijklmnopqrst", 0x7fff, 200, 53).unwrap();
        let mut names: Vec<_> = plan
            .hypervisors
            .iter()
            .map(|h| h.host_veth.clone())
            .collect();
        names.push(plan.bridge.clone());
        assert!(names.iter().all(|n| n.len() <= 15), "{names:?}");
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count);
        assert_eq!(
            plan.hypervisors.last().unwrap().ip,
            Ipv4Addr::new(10, 255, 255, 254)
        );
    }

    #[test]
    fn sizes() {
        assert!(matches!(
            plan_set("a", 0, 0, 0),
            Err(Error::InvalidSize { .. })
        ));
        assert!(matches!(
            plan_set("a", 0, 200, 54),
            Err(Error::InvalidSize { .. })
        ));
    }

    #[test]
    fn the_pools_unreachable_routes_never_hide_what_the_host_reaches() {
        let net = |s: &str| s.parse::<Ipv4Net>().unwrap();
        // The sets' own networks, others inside the pool and elsewhere: safe.
        assert_eq!(
            pool_route_conflict(&[
                net("10.211.150.0/24"),
                net("192.168.1.0/24"),
                net("10.0.2.0/24")
            ]),
            None
        );
        // A route holding the whole pool and more would be partly hidden.
        assert_eq!(
            pool_route_conflict(&[net("10.0.0.0/8")]),
            Some(net("10.0.0.0/8"))
        );
        assert_eq!(pool_route_conflict(&[net("10.128.0.0/9")]), None);
        // A name server inside the pool (these machines have one at 10.255.255.53): its
        // /24 is reserved, and the routes cover the rest of the pool exactly.
        let reserved = reserved_in_pool(&[
            "10.255.255.53".parse().unwrap(),
            "192.0.2.1".parse().unwrap(),
        ]);
        assert_eq!(reserved, [net("10.255.255.0/24")]);
        let routes = unreachable_routes(&reserved);
        assert_eq!(routes.len(), 15);
        let dns: Ipv4Addr = "10.255.255.53".parse().unwrap();
        assert!(routes.iter().all(|r| !r.contains(&dns)));
        let covered: u64 = routes.iter().map(|r| 1u64 << (32 - r.prefix_len())).sum();
        assert_eq!(covered, (1 << 23) - 256);
        for probe in ["10.128.0.1", "10.211.150.2", "10.255.254.9"] {
            let a: Ipv4Addr = probe.parse().unwrap();
            assert!(routes.iter().any(|r| r.contains(&a)), "{probe}");
        }
        assert_eq!(unreachable_routes(&[]), [SUBNET_POOL]);
    }

    #[test]
    fn slot_is_deterministic_and_skips_taken_subnets() {
        let first = choose_slot("demo", |_| false).unwrap();
        assert_eq!(choose_slot("demo", |_| false).unwrap(), first);
        let host = [subnet_of_slot(first)];
        let second = choose_slot("demo", |s| !slot_is_free(s, &host, &[])).unwrap();
        assert_eq!(u32::from(second), (u32::from(first) + 1) % SLOTS);
        // A wider host network covering the pool leaves nothing.
        let wide = ["10.0.0.0/8".parse().unwrap()];
        assert!(matches!(
            choose_slot("demo", |s| !slot_is_free(s, &wide, &[])),
            Err(Error::NoFreeSubnet { .. })
        ));
        // A link with the slot's prefix makes the slot taken too.
        let links = [format!("ohs{first:04x}v1")];
        assert!(!slot_is_free(first, &[], &links));
    }

    #[test]
    fn workers_sit_on_a_lan_of_their_own_behind_the_router() {
        let set = plan_set("demo", 0x1a2b, 2, 1).unwrap();
        let nat = plan_nat(&set, 0x1a2c, 2).unwrap();
        assert_eq!(nat.router, "demo-router");
        assert_eq!(nat.router_veth, "ohs1a2br");
        assert_eq!(nat.uplink_ip, Ipv4Addr::new(10, 154, 43, 254));
        assert_eq!(nat.lan, "10.154.44.0/24".parse::<Ipv4Net>().unwrap());
        assert_eq!(nat.lan_gateway, Ipv4Addr::new(10, 154, 44, 1));
        let workers: Vec<(&str, String, &str)> = nat
            .workers
            .iter()
            .map(|w| (w.name.as_str(), w.ip.to_string(), w.router_port.as_str()))
            .collect();
        assert_eq!(
            workers,
            [
                ("demo-worker-1", "10.154.44.2".into(), "w1"),
                ("demo-worker-2", "10.154.44.3".into(), "w2"),
            ]
        );
        // The router's uplink is not a hypervisor's address.
        assert!(set.hypervisors.iter().all(|h| h.ip != nat.uplink_ip));
        assert!(
            plan_nat(&set, 0x1a2b, 1).is_err(),
            "the LAN is the set's subnet"
        );
        assert!(plan_nat(&set, 0x1a2c, 0).is_err());
        assert!(plan_nat(&set, 0x1a2c, 254).is_err());
        let full = plan_set("full", 1, 253, 0).unwrap();
        assert!(
            plan_nat(&full, 2, 1).is_err(),
            "the router has no address left"
        );
        assert!(is_namespace_of("demo", "demo-worker-2"));
        assert!(is_namespace_of("demo", "demo-router"));
        assert!(is_namespace_of("demo", "demo-public-1"));
        assert!(!is_namespace_of("demo", "demo-worker-"));
        assert!(!is_hypervisor_of("demo", "demo-worker-1"));
    }

    #[test]
    fn leftover_namespaces_are_recognised() {
        assert!(is_hypervisor_of("a", "a-private-1"));
        assert!(is_hypervisor_of("a", "a-public-12"));
        assert!(!is_hypervisor_of("a", "a-private-private-1"));
        assert!(!is_hypervisor_of("a", "ab-private-1"));
        assert!(!is_hypervisor_of("a", "a-private-"));
        assert!(!is_hypervisor_of("a-private", "a-private-1"));
    }
}
