//! A cluster's components derived from its spec: replicas added, or marked for deletion by
//! scaling, by a drain and by lost hypervisors.

#[allow(clippy::wildcard_imports)]
use super::*;

impl ClusterPrep<'_> {
    /// Marks every live component on a lost hypervisor for deletion: [`Self::derive`] then
    /// gives the cluster replacements elsewhere, and the engine removes the etcd member of a
    /// replica there (while the members left keep a quorum) without waiting for the
    /// hypervisor. Returns every component still on a lost hypervisor, live until now or
    /// retiring already.
    pub(super) fn mark_lost(&self, components: &mut [Component]) -> Vec<OnLost> {
        let mut on_lost = Vec::new();
        for c in components.iter_mut() {
            let Some(h) = c.spec.hypervisor.as_ref() else {
                continue;
            };
            let Some(why) = self.index.get(h).and_then(|&i| self.hvs[i].lost.clone()) else {
                continue;
            };
            let newly = !c.metadata.is_being_deleted();
            if newly {
                c.metadata.deletion_timestamp = Some(self.now);
            }
            on_lost.push(OnLost {
                component: c.metadata.name.clone(),
                hypervisor: h.clone(),
                why,
                newly,
            });
        }
        on_lost
    }

    /// Whether `c` is placed on a hypervisor being drained.
    pub(super) fn on_drained(&self, c: &Component) -> Option<String> {
        let h = c.spec.hypervisor.as_ref()?;
        let &i = self.index.get(h)?;
        self.hvs[i].draining.then(|| h.clone())
    }

    /// Which `count` of the replicas `staying` (indexes into `components`, in replica order)
    /// go when scaling down: one at a time, the replica sharing its hypervisor with the most
    /// others of them, then its zone, the highest in replica order among equals.
    pub(super) fn surplus(
        &self,
        components: &[Component],
        staying: &[usize],
        count: usize,
    ) -> Vec<usize> {
        let domain = |i: usize| {
            let h = components[i].spec.hypervisor.as_deref().unwrap_or_default();
            let zone = self.index.get(h).and_then(|&x| self.hvs[x].zone.as_deref());
            (h, crate::schedule::Domain::of(h, zone))
        };
        let mut left: Vec<usize> = staying.to_vec();
        let mut victims = Vec::new();
        for _ in 0..count {
            let crowding = |i: usize| {
                let (h, d) = domain(i);
                let same_hypervisor = left.iter().filter(|&&j| domain(j).0 == h).count();
                let same_domain = left.iter().filter(|&&j| domain(j).1 == d).count();
                (same_hypervisor, same_domain)
            };
            // The last of the most crowded (`left` is in replica order; `max_by_key` gives
            // the last of equal maxima).
            let Some(pos) = (0..left.len()).max_by_key(|&p| crowding(left[p])) else {
                break;
            };
            victims.push(left.remove(pos));
        }
        victims
    }

    /// Creates missing replicas and the ingress; marks surplus ones for deletion; takes the
    /// next step of moving what runs on a drained hypervisor (see [`Drain`]).
    pub(super) fn derive(&self, cluster: &Cluster, components: &mut Vec<Component>) -> Drain {
        let name = &self.key.name;
        let ns = &self.key.namespace;
        let live = |c: &Component, role| c.spec.role == role && !c.metadata.is_being_deleted();
        let taken = |components: &[Component], candidate: &str| {
            self.all_components
                .contains_key(&ObjectKey::new(ns.clone(), candidate.to_string()))
                || components.iter().any(|c| c.metadata.name == candidate)
        };
        let joined =
            |c: &Component| condition_is_true(&c.status.conditions, condition_types::JOINED);
        let cluster_ready = condition_is_true(
            &cluster.status.conditions,
            condition_types::RECONCILE_SUCCEEDED,
        );
        let mut drain = Drain::None;

        // Control plane: in replica order. Surplus replicas go, those on a drained
        // hypervisor first, then those sharing a hypervisor (then a zone) with another
        // replica, the highest first (the replicas left stay as spread as they can be). One
        // on a drained hypervisor only goes once the cluster was ready with every replica
        // that stays joined (its replacement among them): within a run the engine retires
        // before it joins.
        let replicas = live_replicas(name, components);
        let desired = cluster.control_plane_replicas() as usize;
        let (leaving, staying): (Vec<usize>, Vec<usize>) = replicas
            .iter()
            .partition(|&&i| self.on_drained(&components[i]).is_some());
        let excess = replicas.len().saturating_sub(desired);
        let leaving_victims: Vec<usize> = leaving.iter().rev().take(excess).copied().collect();
        let staying_victims = self.surplus(components, &staying, excess - leaving_victims.len());
        for &i in &staying_victims {
            components[i].metadata.deletion_timestamp = Some(self.now);
        }
        let settled = |components: &[Component], but: &[usize]| {
            cluster_ready
                && replicas
                    .iter()
                    .filter(|i| !but.contains(i) && !staying_victims.contains(i))
                    .all(|&i| joined(&components[i]))
        };
        if !leaving_victims.is_empty() {
            let i = leaving_victims[0];
            let from = self.on_drained(&components[i]).unwrap_or_default();
            if settled(components, &leaving_victims) {
                for &i in &leaving_victims {
                    components[i].metadata.deletion_timestamp = Some(self.now);
                }
                drain = Drain::Retiring {
                    component: components[i].metadata.name.clone(),
                    from,
                };
            } else {
                drain = Drain::Waiting {
                    component: components[i].metadata.name.clone(),
                    from,
                };
            }
        }
        let mut next = 0u32;
        for _ in replicas.len()..desired {
            while taken(components, &control_plane_name(name, next)) {
                next += 1;
            }
            components.push(
                self.new_component(control_plane_name(name, next), ComponentRole::ControlPlane),
            );
        }
        // Every replica in place and none going: the first one on a drained hypervisor gets
        // a replacement, once the cluster is ready with all of them joined.
        if excess == 0 && replicas.len() == desired && !leaving.is_empty() {
            let i = leaving[0];
            let component = components[i].metadata.name.clone();
            let from = self.on_drained(&components[i]).unwrap_or_default();
            drain = if settled(components, &[]) {
                while taken(components, &control_plane_name(name, next)) {
                    next += 1;
                }
                components.push(
                    self.new_component(control_plane_name(name, next), ComponentRole::ControlPlane),
                );
                Drain::Replacing {
                    component,
                    from,
                    replacement: components.len() - 1,
                }
            } else {
                Drain::Waiting { component, from }
            };
        }

        if matches!(drain, Drain::None)
            && let Some(&i) = leaving.first()
        {
            drain = Drain::Waiting {
                component: components[i].metadata.name.clone(),
                from: self.on_drained(&components[i]).unwrap_or_default(),
            };
        }

        // API servers alone (`spec.apiServerReplicas`): in their order, the highest go first.
        // Stateless behind the ingress, one on a drained hypervisor goes in the run its
        // replacement starts elsewhere, once the replicas have nothing left to move.
        let mut api_servers: Vec<usize> = (0..components.len())
            .filter(|&i| live(&components[i], ComponentRole::ApiServer))
            .collect();
        api_servers.sort_by_key(|&i| api_server_order(name, &components[i].metadata.name));
        let wanted = cluster.extra_api_servers() as usize;
        for &i in api_servers.iter().skip(wanted) {
            components[i].metadata.deletion_timestamp = Some(self.now);
        }
        api_servers.truncate(wanted);
        let mut next = 0u32;
        let mut new_api_server = |components: &mut Vec<Component>| {
            while taken(components, &api_server_name(name, next)) {
                next += 1;
            }
            components
                .push(self.new_component(api_server_name(name, next), ComponentRole::ApiServer));
            components.len() - 1
        };
        for _ in api_servers.len()..wanted {
            new_api_server(components);
        }
        if matches!(drain, Drain::None) {
            drain = self.replace_drained(components, &api_servers, true, new_api_server);
        }

        // Ingresses: `spec.ingress.replicas` live, placed ones kept over unplaced ones, then
        // by name.
        let mut ingresses: Vec<usize> = (0..components.len())
            .filter(|&i| live(&components[i], ComponentRole::ControlPlaneIngress))
            .collect();
        ingresses.sort_by_key(|&i| {
            (
                components[i].spec.hypervisor.is_none(),
                components[i].metadata.name.clone(),
            )
        });
        let wanted = cluster.ingress_replicas() as usize;
        for &i in ingresses.iter().skip(wanted) {
            components[i].metadata.deletion_timestamp = Some(self.now);
        }
        ingresses.truncate(wanted);
        let new_ingress = |components: &mut Vec<Component>| {
            let mut candidate = ingress_name(name);
            let mut n = 1;
            while taken(components, &candidate) {
                candidate = format!("{}-{n}", ingress_name(name));
                n += 1;
            }
            components.push(self.new_component(candidate, ComponentRole::ControlPlaneIngress));
            components.len() - 1
        };
        for _ in ingresses.len()..wanted {
            new_ingress(components);
        }
        // An ingress on a drained hypervisor moves once the control plane has nothing left
        // there: it goes and its replacement starts elsewhere in the same run. Without a
        // virtual address the cluster's address changes with it.
        if matches!(drain, Drain::None) {
            drain = self.replace_drained(components, &ingresses, cluster_ready, new_ingress);
        }
        drain
    }

    /// The first of `group` on a drained hypervisor goes in this run and a replacement
    /// (`new` pushes it) starts elsewhere; with `ready` false it waits instead. What the
    /// drain does, or [`Drain::None`] when none of `group` is on a drained hypervisor.
    pub(super) fn replace_drained(
        &self,
        components: &mut Vec<Component>,
        group: &[usize],
        ready: bool,
        new: impl FnOnce(&mut Vec<Component>) -> usize,
    ) -> Drain {
        let Some((i, from)) = group
            .iter()
            .find_map(|&i| Some((i, self.on_drained(&components[i])?)))
        else {
            return Drain::None;
        };
        let component = components[i].metadata.name.clone();
        if !ready {
            return Drain::Waiting { component, from };
        }
        components[i].metadata.deletion_timestamp = Some(self.now);
        Drain::Replacing {
            component,
            from,
            replacement: new(components),
        }
    }

    /// Takes back a replacement that found no room: the component it was to replace stays
    /// (live again, if it was marked), and the drain is blocked for the reason given.
    pub(super) fn unreplace(
        components: &mut Vec<Component>,
        drain: Drain,
        reason: String,
    ) -> Drain {
        let Drain::Replacing {
            component,
            from,
            replacement,
        } = drain
        else {
            return drain;
        };
        components.remove(replacement);
        if let Some(c) = components.iter_mut().find(|c| c.metadata.name == component) {
            c.metadata.deletion_timestamp = None;
        }
        Drain::Blocked {
            component,
            from,
            reason,
        }
    }
}
