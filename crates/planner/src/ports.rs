//! Host port allocation on one hypervisor, with its state in the Hypervisor status.
//!
//! Every component listens on host ports (host-network pods) taken from its hypervisor's
//! inclusive `portRange`. The state lives in the status, as oneinfra keeps it:
//! `allocatedPorts` (who holds which port) and `freedPorts` (ports released by deleted
//! components). An allocation is owned by `(clusterNamespace, cluster, component)` where, as
//! in oneinfra, `component` is `<component name>-<port name>`, e.g. `c1-control-plane-0-etcd-peer`.
//!
//! Allocation never hands out a port already held; it reuses freed ports first (lowest first),
//! otherwise takes the lowest port of the range never handed out. Releasing puts a port back
//! into `freedPorts`. Every change is journaled until [`PortAllocator::commit`], so that a
//! cluster that fails half way can be [`PortAllocator::rollback`]ed.

use std::collections::{BTreeMap, BTreeSet};

use oi_api::{DEFAULT_NAMESPACE, Hypervisor, HypervisorPortAllocation, HypervisorStatus};

use crate::{Error, Result};

/// Names of the host ports components need, as oneinfra names them.
pub mod names {
    /// etcd client URL of a control plane replica.
    pub const ETCD_CLIENT: &str = "etcd-client";
    /// etcd peer URL of a control plane replica.
    pub const ETCD_PEER: &str = "etcd-peer";
    /// kube-apiserver secure port of a control plane replica; haproxy frontend of an ingress.
    pub const APISERVER: &str = "apiserver";
    /// haproxy's runtime API of an ingress, on the hypervisor's loopback
    /// ([`crate::haproxy::RuntimeApi`]).
    pub const HAPROXY_RUNTIME: &str = "haproxy-runtime";
    /// WireGuard listen port of an ingress, when the cluster VPN is enabled.
    pub const WIREGUARD: &str = "wireguard";
    /// The egress proxy of an ingress (API servers to kubelets over the VPN), when the
    /// cluster VPN is enabled.
    pub const VPN_PROXY: &str = "vpn-proxy";
}

/// Who holds a port: oneinfra's `(clusterNamespace, cluster, component)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortOwner {
    pub cluster_namespace: String,
    pub cluster: String,
    /// `<component name>-<port name>`.
    pub component: String,
}

impl PortOwner {
    /// The owner of port `port_name` of component `component` of cluster
    /// `cluster_namespace/cluster`.
    pub fn new(cluster_namespace: &str, cluster: &str, component: &str, port_name: &str) -> Self {
        Self {
            cluster_namespace: cluster_namespace.to_string(),
            cluster: cluster.to_string(),
            component: format!("{component}-{port_name}"),
        }
    }

    pub(crate) fn from_status(a: &HypervisorPortAllocation) -> Self {
        // oneinfra releases before namespaced clusters wrote no namespace: `default`.
        let ns = if a.cluster_namespace.is_empty() {
            DEFAULT_NAMESPACE
        } else {
            &a.cluster_namespace
        };
        Self {
            cluster_namespace: ns.to_string(),
            cluster: a.cluster.clone(),
            component: a.component.clone(),
        }
    }
}

/// One journaled change, undone by [`PortAllocator::rollback`].
#[derive(Debug, Clone)]
enum Undo {
    Allocated {
        owner: PortOwner,
        port: u16,
        from_freed: bool,
        cursor: u32,
    },
    Released {
        owner: PortOwner,
        port: u16,
        to_freed: bool,
    },
}

/// The ports of one hypervisor.
#[derive(Debug, Clone)]
pub struct PortAllocator {
    hypervisor: String,
    low: u32,
    high: u32,
    valid: bool,
    by_owner: BTreeMap<PortOwner, u16>,
    by_port: BTreeMap<u16, PortOwner>,
    freed: BTreeSet<u16>,
    /// Every port of the range below the cursor is held or freed.
    cursor: u32,
    used_in_range: usize,
    journal: Vec<Undo>,
}

impl PortAllocator {
    /// The allocator of a hypervisor, from its spec's range and its status. Inconsistent
    /// status is repaired rather than trusted: a port held twice stays with its first holder,
    /// an owner holding two ports keeps the first, and freed ports that are held, repeated or
    /// outside the range are dropped.
    pub fn from_hypervisor(hypervisor: &Hypervisor) -> Self {
        let range = hypervisor.spec.port_range;
        let mut this = Self {
            hypervisor: hypervisor.metadata.name.clone(),
            low: range.low,
            high: range.high,
            valid: range.ports().is_some(),
            by_owner: BTreeMap::new(),
            by_port: BTreeMap::new(),
            freed: BTreeSet::new(),
            cursor: range.low,
            used_in_range: 0,
            journal: Vec::new(),
        };
        let mut second_ports = Vec::new();
        for a in &hypervisor.status.allocated_ports {
            let owner = PortOwner::from_status(a);
            if this.by_port.contains_key(&a.port) {
                continue;
            }
            if this.by_owner.contains_key(&owner) {
                second_ports.push(a.port);
                continue;
            }
            this.insert(owner, a.port);
        }
        for port in hypervisor
            .status
            .freed_ports
            .iter()
            .copied()
            .chain(second_ports)
        {
            if this.in_range(port) && !this.by_port.contains_key(&port) {
                this.freed.insert(port);
            }
        }
        this
    }

    /// Name of the hypervisor.
    pub fn hypervisor(&self) -> &str {
        &self.hypervisor
    }

    fn in_range(&self, port: u16) -> bool {
        self.valid && (self.low..=self.high).contains(&u32::from(port))
    }

    fn range_len(&self) -> usize {
        if self.valid {
            // valid implies low <= high <= 65535: the difference fits.
            (self.high - self.low + 1) as usize
        } else {
            0
        }
    }

    /// Ports of the range neither held nor ever handed out, plus freed ones.
    pub fn free_ports(&self) -> usize {
        self.range_len() - self.used_in_range
    }

    /// Whether `port` is in the range and held by no one.
    pub fn is_free(&self, port: u16) -> bool {
        self.in_range(port) && !self.by_port.contains_key(&port)
    }

    /// The range's lowest and highest port, `None` when it is not valid.
    pub fn range(&self) -> Option<(u32, u32)> {
        self.valid.then_some((self.low, self.high))
    }

    /// The port `owner` holds, if any.
    pub fn port_of(&self, owner: &PortOwner) -> Option<u16> {
        self.by_owner.get(owner).copied()
    }

    /// Who holds `port`, if anyone.
    pub fn owner_of(&self, port: u16) -> Option<&PortOwner> {
        self.by_port.get(&port)
    }

    fn insert(&mut self, owner: PortOwner, port: u16) {
        if self.in_range(port) {
            self.used_in_range += 1;
        }
        self.by_port.insert(port, owner.clone());
        self.by_owner.insert(owner, port);
    }

    fn remove(&mut self, owner: &PortOwner) -> Option<u16> {
        let port = self.by_owner.remove(owner)?;
        self.by_port.remove(&port);
        if self.in_range(port) {
            self.used_in_range -= 1;
        }
        Some(port)
    }

    /// The port `owner` holds, allocating one when it holds none: the lowest freed port, else
    /// the lowest port of the range never handed out.
    ///
    /// # Errors
    ///
    /// [`Error::PortRangeExhausted`] when no port is left, [`Error::InvalidPortRange`] when
    /// the hypervisor's range is not a valid port range.
    pub fn allocate(&mut self, owner: &PortOwner) -> Result<u16> {
        if let Some(port) = self.port_of(owner) {
            return Ok(port);
        }
        if !self.valid {
            return Err(Error::InvalidPortRange {
                hypervisor: self.hypervisor.clone(),
                low: self.low,
                high: self.high,
            });
        }
        let cursor = self.cursor;
        let (port, from_freed) = if let Some(port) = self.freed.pop_first() {
            (port, true)
        } else {
            let mut p = self.cursor;
            while p <= self.high {
                // valid range: p <= high <= 65535 fits in u16.
                let port = p as u16;
                if !self.by_port.contains_key(&port) && !self.freed.contains(&port) {
                    break;
                }
                p += 1;
            }
            if p > self.high {
                self.cursor = p;
                return Err(Error::PortRangeExhausted {
                    hypervisor: self.hypervisor.clone(),
                    low: self.low,
                    high: self.high,
                });
            }
            self.cursor = p + 1;
            (p as u16, false)
        };
        self.insert(owner.clone(), port);
        self.journal.push(Undo::Allocated {
            owner: owner.clone(),
            port,
            from_freed,
            cursor,
        });
        Ok(port)
    }

    /// Gives `owner` exactly `port` when it is free and in the range (a port a component
    /// status records but the hypervisor status lost). Returns whether `owner` now holds
    /// `port`; `false` when it holds another port or `port` is taken or out of range.
    pub fn claim(&mut self, owner: &PortOwner, port: u16) -> bool {
        if let Some(held) = self.port_of(owner) {
            return held == port;
        }
        if !self.in_range(port) || self.by_port.contains_key(&port) {
            return false;
        }
        let from_freed = self.freed.remove(&port);
        self.insert(owner.clone(), port);
        self.journal.push(Undo::Allocated {
            owner: owner.clone(),
            port,
            from_freed,
            cursor: self.cursor,
        });
        true
    }

    /// Releases the port `owner` holds, if any, into the freed ports (unless it lies outside
    /// the range, then it is simply forgotten). Returns the released port.
    pub fn release(&mut self, owner: &PortOwner) -> Option<u16> {
        let port = self.remove(owner)?;
        let to_freed = self.in_range(port) && self.freed.insert(port);
        self.journal.push(Undo::Released {
            owner: owner.clone(),
            port,
            to_freed,
        });
        Some(port)
    }

    /// Every allocation, by owner.
    pub fn owners(&self) -> impl Iterator<Item = (&PortOwner, u16)> {
        self.by_owner.iter().map(|(o, p)| (o, *p))
    }

    /// Every allocation of cluster `namespace/cluster`, by owner.
    pub fn cluster_owners(&self, namespace: &str, cluster: &str) -> Vec<(PortOwner, u16)> {
        let start = PortOwner {
            cluster_namespace: namespace.to_string(),
            cluster: cluster.to_string(),
            component: String::new(),
        };
        self.by_owner
            .range(start..)
            .take_while(|(o, _)| o.cluster_namespace == namespace && o.cluster == cluster)
            .map(|(o, p)| (o.clone(), *p))
            .collect()
    }

    /// Releases every port of cluster `namespace/cluster`; returns them, lowest first.
    pub fn release_cluster(&mut self, namespace: &str, cluster: &str) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .cluster_owners(namespace, cluster)
            .iter()
            .filter_map(|(o, _)| self.release(o))
            .collect();
        ports.sort_unstable();
        ports
    }

    /// Forgets the journal: changes so far can no longer be rolled back.
    pub fn commit(&mut self) {
        self.journal.clear();
    }

    /// Undoes every change since the last [`commit`](Self::commit) (or since loading).
    pub fn rollback(&mut self) {
        while let Some(undo) = self.journal.pop() {
            match undo {
                Undo::Allocated {
                    owner,
                    port,
                    from_freed,
                    cursor,
                } => {
                    self.remove(&owner);
                    if from_freed {
                        self.freed.insert(port);
                    }
                    self.cursor = cursor;
                }
                Undo::Released {
                    owner,
                    port,
                    to_freed,
                } => {
                    if to_freed {
                        self.freed.remove(&port);
                    }
                    self.insert(owner, port);
                }
            }
        }
    }

    /// Whether changes are pending in the journal.
    pub fn is_dirty(&self) -> bool {
        !self.journal.is_empty()
    }

    /// Writes the state into a status: allocations by port, freed ports ascending.
    pub fn write_status(&self, status: &mut HypervisorStatus) {
        status.allocated_ports = self
            .by_port
            .iter()
            .map(|(port, o)| HypervisorPortAllocation {
                cluster_namespace: o.cluster_namespace.clone(),
                cluster: o.cluster.clone(),
                component: o.component.clone(),
                port: *port,
            })
            .collect();
        status.freed_ports = self.freed.iter().copied().collect();
    }
}

#[cfg(test)]
mod tests;
