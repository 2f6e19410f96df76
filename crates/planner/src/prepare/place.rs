//! Placement of a cluster's new components (by the rules of [`crate::schedule`]) and their
//! host ports.

#[allow(clippy::wildcard_imports)]
use super::*;

impl ClusterPrep<'_> {
    pub(super) fn new_component(&self, name: String, role: ComponentRole) -> Component {
        let mut meta = ObjectMeta::named(name);
        if self.key.namespace != oi_api::DEFAULT_NAMESPACE {
            meta.namespace = Some(self.key.namespace.clone());
        }
        Component::new(
            meta,
            ComponentSpec {
                cluster: self.key.name.clone(),
                role,
                hypervisor: None,
            },
        )
    }

    pub(super) fn hv(&self, component: &Component, hypervisor: &str) -> Result<usize> {
        self.index
            .get(hypervisor)
            .copied()
            .ok_or_else(|| Error::UnknownHypervisor {
                cluster: self.key.clone(),
                component: component.key(),
                hypervisor: hypervisor.to_string(),
            })
    }

    /// Places live unplaced components; placed ones stay.
    pub(super) fn schedule(&mut self, components: &mut [Component], vpn: bool) -> Result<()> {
        for role in [
            ComponentRole::ControlPlane,
            ComponentRole::ApiServer,
            ComponentRole::ControlPlaneIngress,
        ] {
            let public = role == ComponentRole::ControlPlaneIngress;
            let pending: Vec<usize> = (0..components.len())
                .filter(|&i| {
                    let c = &components[i];
                    c.spec.role == role
                        && !c.metadata.is_being_deleted()
                        && c.spec.hypervisor.is_none()
                })
                .collect();
            if pending.is_empty() {
                continue;
            }
            let chosen: Vec<String> = {
                let hvs: &[HypervisorState] = self.hvs;
                let mut spread = Spread::default();
                // API servers alone spread over the replicas' hypervisors too: all of them
                // serve the cluster's API.
                let spread_with = |other: ComponentRole| {
                    other == role || (role == ComponentRole::ApiServer && other.serves_api())
                };
                for c in components.iter() {
                    if !spread_with(c.spec.role) || c.metadata.is_being_deleted() {
                        continue;
                    }
                    if let Some(&i) = c.spec.hypervisor.as_ref().and_then(|h| self.index.get(h)) {
                        spread.add(&hvs[i].name, domain(&hvs[i]));
                    }
                }
                let mut candidates: Vec<Candidate<'_>> = hvs
                    .iter()
                    .filter(|h| h.public == public && h.valid)
                    .map(|h| Candidate {
                        name: &h.name,
                        domain: domain(h),
                        load: h.held.load,
                        free_ports: h.ports.free_ports(),
                        room: Room::of(h.capacity.as_ref(), h.held.load, h.held.used),
                        cordoned: h.cordoned,
                    })
                    .collect();
                if candidates.is_empty() {
                    return Err(if public {
                        Error::NoPublicHypervisor {
                            cluster: self.key.clone(),
                        }
                    } else {
                        Error::NoPrivateHypervisor {
                            cluster: self.key.clone(),
                        }
                    });
                }
                let ports_needed = required_ports(role, vpn).len();
                let need = requests(role, vpn);
                let chosen = place(
                    &mut candidates,
                    &mut spread,
                    pending.len(),
                    ports_needed,
                    need,
                );
                if chosen.len() < pending.len() {
                    // Each candidate's shortage, after the replicas that did fit.
                    let hypervisors = candidates
                        .iter()
                        .map(|c| {
                            let mut why = Vec::new();
                            let state = self.index.get(c.name).map(|&i| &hvs[i]);
                            if let Some(lost) = state.and_then(|h| h.lost.as_ref()) {
                                why.push(format!("lost ({lost})"));
                            } else if state.is_some_and(|h| h.draining) {
                                why.push("drained".to_string());
                            } else if c.cordoned {
                                why.push("cordoned".to_string());
                            }
                            if c.free_ports < ports_needed {
                                why.push(format!(
                                    "{} free ports, {ports_needed} needed",
                                    c.free_ports
                                ));
                            }
                            if let Some(s) = c.room.shortage(need) {
                                why.push(s);
                            }
                            format!("{}: {}", c.name, why.join(", "))
                        })
                        .collect::<Vec<_>>()
                        .join("; ");
                    return Err(Error::NoCapacity {
                        cluster: self.key.clone(),
                        role,
                        missing: pending.len() - chosen.len(),
                        hypervisors,
                    });
                }
                chosen.into_iter().map(str::to_string).collect()
            };
            for (i, hv) in pending.into_iter().zip(chosen) {
                components[i].spec.hypervisor = Some(hv);
            }
        }
        Ok(())
    }

    /// Several ingresses each on a public hypervisor of its own: losing one hypervisor must
    /// leave the others to take the shared address.
    pub(super) fn ingresses_apart(
        &self,
        cluster: &Cluster,
        components: &[Component],
    ) -> Result<()> {
        let placed: Vec<&str> = components
            .iter()
            .filter(|c| {
                c.spec.role == ComponentRole::ControlPlaneIngress && !c.metadata.is_being_deleted()
            })
            .filter_map(|c| c.spec.hypervisor.as_deref())
            .collect();
        let distinct: BTreeSet<&str> = placed.iter().copied().collect();
        if distinct.len() == placed.len() {
            return Ok(());
        }
        Err(Error::IngressesNotApart {
            cluster: self.key.clone(),
            replicas: cluster.ingress_replicas() as usize,
            available: self
                .hvs
                .iter()
                .filter(|h| h.public && h.valid && !h.cordoned)
                .count(),
        })
    }

    /// Gives a cluster's live ingresses, when it has several, the same port for each purpose
    /// on their hypervisors (the address they share, moved between them, keeps its ports):
    /// one some of them hold already if the others can take it, else the lowest free on all.
    pub(super) fn align_ingress_ports(
        &mut self,
        components: &[Component],
        vpn: bool,
    ) -> Result<()> {
        let ns = self.key.namespace.as_str();
        let cluster = self.key.name.as_str();
        let mut group: Vec<(PortOwner, usize, Option<u16>)> = Vec::new();
        let mut members: Vec<(&Component, usize)> = Vec::new();
        for c in components {
            if c.spec.role != ComponentRole::ControlPlaneIngress || c.metadata.is_being_deleted() {
                continue;
            }
            if let Some(h) = &c.spec.hypervisor {
                members.push((c, self.hv(c, h)?));
            }
        }
        if members.len() < 2 {
            return Ok(());
        }
        for &port_name in required_ports(ComponentRole::ControlPlaneIngress, vpn) {
            group.clear();
            for &(c, i) in &members {
                let owner = PortOwner::new(ns, cluster, &c.metadata.name, port_name);
                let held = self.hvs[i]
                    .ports
                    .port_of(&owner)
                    .or_else(|| c.status.host_port(port_name));
                group.push((owner, i, held));
            }
            let usable = |hvs: &[HypervisorState], port: u16| {
                group.iter().all(|(owner, i, _)| {
                    let ports = &hvs[*i].ports;
                    ports.port_of(owner) == Some(port) || ports.is_free(port)
                })
            };
            let held: Vec<u16> = group.iter().filter_map(|(_, _, p)| *p).collect();
            let mut chosen = held.iter().copied().find(|&p| usable(self.hvs, p));
            if chosen.is_none() {
                // The ranges' overlap (none when a range is not valid).
                let (low, high) = group.iter().fold((0u32, u32::MAX), |(lo, hi), (_, i, _)| {
                    match self.hvs[*i].ports.range() {
                        Some((l, h)) => (lo.max(l), hi.min(h)),
                        None => (1, 0),
                    }
                });
                chosen = (low..=high.min(u32::from(u16::MAX)))
                    .filter_map(|p| u16::try_from(p).ok())
                    .find(|&p| usable(self.hvs, p));
            }
            let Some(port) = chosen else {
                return Err(Error::NoCommonIngressPort {
                    cluster: self.key.clone(),
                    port: port_name.to_string(),
                    hypervisors: members
                        .iter()
                        .map(|(_, i)| self.hvs[*i].name.clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            for (owner, i, _) in &group {
                let ports = &mut self.hvs[*i].ports;
                if ports.port_of(owner) == Some(port) {
                    continue;
                }
                self.touched.insert(*i);
                self.holders.insert(*i);
                ports.release(owner);
                ports.claim(owner, port);
            }
        }
        Ok(())
    }

    /// Gives every live component exactly the ports it needs, and releases the cluster's
    /// other ports, except those of components marked for deletion.
    pub(super) fn allocate(&mut self, components: &mut [Component], vpn: bool) -> Result<()> {
        self.align_ingress_ports(components, vpn)?;
        let ns = self.key.namespace.as_str();
        let cluster = self.key.name.as_str();
        let mut keep: BTreeSet<PortOwner> = BTreeSet::new();
        for c in components.iter_mut() {
            let Some(hypervisor) = c.spec.hypervisor.clone() else {
                continue;
            };
            if c.metadata.is_being_deleted() {
                for p in &c.status.allocated_host_ports {
                    keep.insert(PortOwner::new(ns, cluster, &c.metadata.name, &p.name));
                }
                continue;
            }
            let i = self.hv(c, &hypervisor)?;
            self.holders.insert(i);
            let mut ports = Vec::new();
            for &port_name in required_ports(c.spec.role, vpn) {
                let owner = PortOwner::new(ns, cluster, &c.metadata.name, port_name);
                let alloc = &mut self.hvs[i].ports;
                let port = match alloc.port_of(&owner) {
                    Some(p) => p,
                    None => {
                        self.touched.insert(i);
                        match c.status.host_port(port_name) {
                            Some(p) if alloc.claim(&owner, p) => p,
                            _ => alloc.allocate(&owner)?,
                        }
                    }
                };
                ports.push(ComponentHostPortAllocation {
                    name: port_name.to_string(),
                    port,
                });
                keep.insert(owner);
            }
            c.status.allocated_host_ports = ports;
        }
        for &i in &self.holders {
            let stale: Vec<PortOwner> = self.hvs[i]
                .ports
                .cluster_owners(ns, cluster)
                .into_iter()
                .map(|(o, _)| o)
                .filter(|o| !keep.contains(o))
                .collect();
            for owner in stale {
                self.touched.insert(i);
                self.hvs[i].ports.release(&owner);
            }
        }
        Ok(())
    }
}
