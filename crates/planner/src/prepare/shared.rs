//! The ingresses' shared addresses and VRRP router IDs, one cluster's each.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The ingresses' shared addresses and VRRP router IDs of a world's live clusters, and its
/// hypervisors' addresses: each shared address and router ID belongs to one cluster.
/// `oi-manager` plans each cluster in a world of its own: it builds this from every Cluster
/// and Hypervisor it stores ([`SharedAddresses::new`]) and checks each cluster against it.
#[derive(Debug, Clone, Default)]
pub struct SharedAddresses {
    addresses: BTreeMap<std::net::Ipv4Addr, Vec<ObjectKey>>,
    router_ids: BTreeMap<u8, Vec<ObjectKey>>,
    hypervisors: BTreeMap<String, String>,
}

impl SharedAddresses {
    pub(super) fn of(world: &World) -> Self {
        Self::new(
            world
                .clusters
                .iter()
                .filter(|(_, c)| !c.is_being_deleted())
                .filter_map(|(k, c)| Some((k.clone(), c.spec.ingress.clone()?))),
            world
                .hypervisors
                .values()
                .map(|h| (h.metadata.name.clone(), h.spec.ip_address.clone())),
        )
    }

    /// From the live clusters' ingress settings and the hypervisors' `(name, address)`.
    pub fn new(
        clusters: impl IntoIterator<Item = (ObjectKey, oi_api::ClusterIngress)>,
        hypervisors: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        let mut this = SharedAddresses {
            addresses: BTreeMap::new(),
            router_ids: BTreeMap::new(),
            hypervisors: hypervisors.into_iter().map(|(n, ip)| (ip, n)).collect(),
        };
        for (key, ingress) in clusters {
            if let Some(ip) = ingress.virtual_ip() {
                this.addresses.entry(ip).or_default().push(key.clone());
                if let Some(id) = ingress.router_id() {
                    this.router_ids.entry(id).or_default().push(key);
                }
            }
        }
        this
    }

    /// An error naming the other holder of the cluster's shared address or router ID: the
    /// first cluster by key keeps it, the others are refused.
    ///
    /// # Errors
    /// [`Error::IngressAddressTaken`] naming the field, its value and the other holder.
    pub fn check(&self, key: &ObjectKey, cluster: &Cluster) -> Result<()> {
        let Some(ingress) = &cluster.spec.ingress else {
            return Ok(());
        };
        let Some(ip) = ingress.virtual_ip() else {
            return Ok(());
        };
        let taken = |field: &'static str, value: String, other: String, why: &'static str| {
            Err(Error::IngressAddressTaken {
                cluster: key.clone(),
                what: format!("spec.ingress.{field} {value} is also {other}{why}"),
            })
        };
        if let Some(h) = self.hypervisors.get(&ip.to_string()) {
            return taken(
                "virtualIP",
                ip.to_string(),
                format!("the address of hypervisor {h}"),
                "",
            );
        }
        let other = |holders: Option<&Vec<ObjectKey>>| {
            holders
                .into_iter()
                .flatten()
                .find(|k| *k < key)
                .map(|k| format!("cluster {k}'s"))
        };
        if let Some(o) = other(self.addresses.get(&ip)) {
            return taken("virtualIP", ip.to_string(), o, "");
        }
        if let Some(id) = ingress.router_id()
            && let Some(o) = other(self.router_ids.get(&id))
        {
            return taken(
                "virtualRouterID",
                id.to_string(),
                o,
                " (the last byte of virtualIP when absent): set spec.ingress.virtualRouterID to one of its own",
            );
        }
        Ok(())
    }
}
