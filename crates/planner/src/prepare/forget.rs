//! What leaves the world after a run: components, clusters, removed hypervisors, orphans.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Removes a component from the world and releases its ports on its hypervisor: what the
/// engine calls once the component's pod (and etcd member) is gone. Returns the component.
pub fn remove_component(world: &mut World, key: &ObjectKey) -> Option<Component> {
    let component = world.components.remove(key)?;
    if let Some(h) = component.spec.hypervisor.as_ref().and_then(|name| {
        world
            .hypervisors
            .get_mut(&ObjectKey::cluster_scoped(name.clone()))
    }) {
        let mut ports = PortAllocator::from_hypervisor(h);
        for p in &component.status.allocated_host_ports {
            ports.release(&PortOwner::new(
                &key.namespace,
                &component.spec.cluster,
                &component.metadata.name,
                &p.name,
            ));
        }
        ports.write_status(&mut h.status);
    }
    Some(component)
}

/// Removes a cluster, its components and every port it holds on any hypervisor: what the
/// engine calls once a cluster marked for deletion is torn down. Returns whether the cluster
/// existed.
pub fn remove_cluster(world: &mut World, key: &ObjectKey) -> bool {
    let existed = world.clusters.remove(key).is_some();
    world
        .components
        .retain(|ck, c| !(ck.namespace == key.namespace && c.spec.cluster == key.name));
    for h in world.hypervisors.values_mut() {
        let mut ports = PortAllocator::from_hypervisor(h);
        if !ports.release_cluster(&key.namespace, &key.name).is_empty() {
            ports.write_status(&mut h.status);
        }
    }
    existed
}

/// Removes from a whole world the hypervisors being deleted that nothing holds any more: no
/// component of any cluster names them and no port of theirs is allocated (a SIPCluster's
/// support services hold theirs). Returns their names. Only for a world that holds every
/// cluster (`oi`): a sub-world would not see what other clusters keep there.
pub fn forget_removed_hypervisors(world: &mut World) -> Vec<String> {
    let held: BTreeSet<&str> = world
        .components
        .values()
        .filter_map(|c| c.spec.hypervisor.as_deref())
        .collect();
    let gone: Vec<String> = world
        .hypervisors
        .values()
        .filter(|h| {
            h.metadata.is_being_deleted()
                && !held.contains(h.metadata.name.as_str())
                && h.status.allocated_ports.is_empty()
        })
        .map(|h| h.metadata.name.clone())
        .collect();
    for name in &gone {
        world
            .hypervisors
            .remove(&ObjectKey::cluster_scoped(name.clone()));
    }
    gone
}

/// Forgets, in a whole world, what its hypervisors' statuses hold for clusters the world
/// does not: their ports (freed) and file records (and the file records of components a live
/// cluster no longer has).
/// A SIPCluster's share is kept. What `oi reconcile --prune` writes once their pods are gone.
/// Returns how many ports were freed.
pub fn forget_orphans(world: &mut World) -> usize {
    let sip = crate::sip::services::OWNER_PREFIX;
    let live_cluster = |ns: &str, name: &str| {
        world
            .clusters
            .contains_key(&ObjectKey::new(ns.to_string(), name.to_string()))
    };
    let live_component = |ns: &str, name: &str| {
        world
            .components
            .contains_key(&ObjectKey::new(ns.to_string(), name.to_string()))
    };
    let mut orphaned: Vec<(String, PortOwner)> = Vec::new();
    let mut stale_files: Vec<(String, String, String, Option<String>)> = Vec::new();
    for h in world.hypervisors.values() {
        // A live cluster's ports of components it no longer has are released by preparing.
        for a in &h.status.allocated_ports {
            let owner = PortOwner::from_status(a);
            if a.cluster.starts_with(sip) || live_cluster(&owner.cluster_namespace, &a.cluster) {
                continue;
            }
            orphaned.push((h.metadata.name.clone(), owner));
        }
        for (ns, clusters) in &h.status.files {
            for (cluster, components) in clusters {
                if cluster.starts_with(sip) {
                    continue;
                }
                if !live_cluster(ns, cluster) {
                    stale_files.push((h.metadata.name.clone(), ns.clone(), cluster.clone(), None));
                    continue;
                }
                for component in components.keys() {
                    if !live_component(ns, component) {
                        stale_files.push((
                            h.metadata.name.clone(),
                            ns.clone(),
                            cluster.clone(),
                            Some(component.clone()),
                        ));
                    }
                }
            }
        }
    }
    let freed = orphaned.len();
    for (h, owner) in orphaned {
        if let Some(h) = world.hypervisors.get_mut(&ObjectKey::cluster_scoped(h)) {
            let mut ports = PortAllocator::from_hypervisor(h);
            ports.release(&owner);
            ports.write_status(&mut h.status);
        }
    }
    for (h, ns, cluster, component) in stale_files {
        let Some(h) = world.hypervisors.get_mut(&ObjectKey::cluster_scoped(h)) else {
            continue;
        };
        let Some(clusters) = h.status.files.get_mut(&ns) else {
            continue;
        };
        match component {
            None => {
                clusters.remove(&cluster);
            }
            Some(c) => {
                if let Some(components) = clusters.get_mut(&cluster) {
                    components.remove(&c);
                    if components.is_empty() {
                        clusters.remove(&cluster);
                    }
                }
            }
        }
        if clusters.is_empty() {
            h.status.files.remove(&ns);
        }
    }
    freed
}
