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
//!                                 └─ ohs1a2bv2 ══ eth0 10.154.43.3  netns demo-public-1
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
    })
}

/// Whether `netns` names a hypervisor of set `set` (`<set>-private-<n>` or `<set>-public-<n>`).
/// Used to find leftovers of a set whose state file is gone.
pub fn is_hypervisor_of(set: &str, netns: &str) -> bool {
    let Some(rest) = netns.strip_prefix(set).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let Some(n) = rest
        .strip_prefix("private-")
        .or_else(|| rest.strip_prefix("public-"))
    else {
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
    fn leftover_namespaces_are_recognised() {
        assert!(is_hypervisor_of("a", "a-private-1"));
        assert!(is_hypervisor_of("a", "a-public-12"));
        assert!(!is_hypervisor_of("a", "a-private-private-1"));
        assert!(!is_hypervisor_of("a", "ab-private-1"));
        assert!(!is_hypervisor_of("a", "a-private-"));
        assert!(!is_hypervisor_of("a-private", "a-private-1"));
    }
}
