//! One cluster's share of a Hypervisor's status, and how to write only that share.
//!
//! A Hypervisor's status is shared by every cluster placed on it: `allocatedPorts` (each
//! entry owned by a cluster), `freedPorts` (a pool), `files[namespace][cluster]`. The cluster
//! controller reconciles one cluster at a time and its engine run (phase 2) takes long, so
//! the copy of a hypervisor status it ends with is stale: other clusters allocated or freed
//! ports meanwhile. Writing that copy whole would lose their changes (or hand a port out
//! twice), so [`merge_share`] carries over only what this cluster changed, onto a fresh read.
//!
//! ```text
//!   before ──(this cluster's prepare / engine run)──► after
//!      │                                                │
//!      └────────── delta of the cluster's share ────────┘
//!                              │ applied onto
//!   fresh (read under the write lock) ─────────────────► merged ─► update_status
//! ```

use std::collections::BTreeSet;

use oi_api::hypervisor::{ComponentFileMap, FileMap};
use oi_api::{DEFAULT_NAMESPACE, HypervisorPortAllocation, HypervisorStatus, ObjectKey};

/// The cluster owning an allocation: `(clusterNamespace, cluster)`, an empty namespace
/// meaning `default` (oneinfra releases before namespaced clusters wrote none), as
/// `oi_planner::ports` reads it.
fn owner(a: &HypervisorPortAllocation) -> ObjectKey {
    let ns = if a.cluster_namespace.is_empty() {
        DEFAULT_NAMESPACE
    } else {
        &a.cluster_namespace
    };
    ObjectKey::new(ns, a.cluster.clone())
}

/// An allocation with its namespace spelled out, to compare entries however they were
/// written.
fn normalized(a: &HypervisorPortAllocation) -> (ObjectKey, String, u16) {
    (owner(a), a.component.clone(), a.port)
}

fn share(status: &HypervisorStatus, cluster: &ObjectKey) -> BTreeSet<(ObjectKey, String, u16)> {
    status
        .allocated_ports
        .iter()
        .filter(|a| owner(a) == *cluster)
        .map(normalized)
        .collect()
}

fn files_of<'a>(status: &'a HypervisorStatus, cluster: &ObjectKey) -> Option<&'a ComponentFileMap> {
    status.files.get(&cluster.namespace)?.get(&cluster.name)
}

/// `fresh` with the change `cluster` made from `before` to `after` applied, and nothing else:
///
/// - `allocatedPorts`: entries of `cluster` gone from `after` are removed, new ones added
///   (an entry whose port another owner holds in `fresh` is left out: the port stays with
///   its holder, and the next prepare gives the component another port);
/// - `freedPorts`: ports `after` freed are added, freed ports `after` took are removed, and
///   no port held in the result stays freed;
/// - `files[namespace][cluster]`: each component's entry as in `after`.
///
/// When the cluster changed nothing, the result is `fresh` exactly (no write follows).
pub fn merge_share(
    fresh: &HypervisorStatus,
    before: &HypervisorStatus,
    after: &HypervisorStatus,
    cluster: &ObjectKey,
) -> HypervisorStatus {
    let mut merged = fresh.clone();

    let (old, new) = (share(before, cluster), share(after, cluster));
    let removed: BTreeSet<_> = old.difference(&new).cloned().collect();
    let added: Vec<_> = new.difference(&old).cloned().collect();
    let before_freed: BTreeSet<u16> = before.freed_ports.iter().copied().collect();
    let after_freed: BTreeSet<u16> = after.freed_ports.iter().copied().collect();
    let freed: Vec<u16> = after_freed.difference(&before_freed).copied().collect();
    let taken: BTreeSet<u16> = before_freed.difference(&after_freed).copied().collect();

    if !removed.is_empty() || !added.is_empty() || !freed.is_empty() || !taken.is_empty() {
        merged
            .allocated_ports
            .retain(|a| !removed.contains(&normalized(a)));
        for (key, component, port) in added {
            let held = merged
                .allocated_ports
                .iter()
                .any(|a| a.port == port || (owner(a) == key && a.component == component));
            if held {
                continue;
            }
            merged.allocated_ports.push(HypervisorPortAllocation {
                cluster: key.name,
                cluster_namespace: key.namespace,
                component,
                port,
            });
        }
        merged.allocated_ports.sort_by_key(|a| a.port);
        let held: BTreeSet<u16> = merged.allocated_ports.iter().map(|a| a.port).collect();
        let mut pool: BTreeSet<u16> = merged.freed_ports.iter().copied().collect();
        pool.extend(freed);
        pool.retain(|p| !taken.contains(p) && !held.contains(p));
        merged.freed_ports = pool.into_iter().collect();
    }

    let (old_files, new_files) = (files_of(before, cluster), files_of(after, cluster));
    if old_files != new_files {
        let empty = ComponentFileMap::new();
        let (old_files, new_files) = (old_files.unwrap_or(&empty), new_files.unwrap_or(&empty));
        let names: BTreeSet<&String> = old_files.keys().chain(new_files.keys()).collect();
        let entry = merged
            .files
            .entry(cluster.namespace.clone())
            .or_default()
            .entry(cluster.name.clone())
            .or_default();
        for name in names {
            let (old, new): (Option<&FileMap>, Option<&FileMap>) =
                (old_files.get(name), new_files.get(name));
            if old == new {
                continue;
            }
            match new {
                Some(files) => {
                    entry.insert(name.clone(), files.clone());
                }
                None => {
                    entry.remove(name);
                }
            }
        }
        // Empty maps are dropped, as the engine leaves them.
        if let Some(clusters) = merged.files.get_mut(&cluster.namespace) {
            clusters.retain(|_, components| !components.is_empty());
            if clusters.is_empty() {
                merged.files.remove(&cluster.namespace);
            }
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use oi_api::{
        Cluster, ClusterSpec, Component, Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectMeta,
        PortRange, Resource as _, World,
    };
    use pretty_assertions::assert_eq;
    use time::macros::datetime;

    use super::*;

    fn alloc(ns: &str, cluster: &str, component: &str, port: u16) -> HypervisorPortAllocation {
        HypervisorPortAllocation {
            cluster: cluster.into(),
            cluster_namespace: ns.into(),
            component: component.into(),
            port,
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("default", name)
    }

    fn status(allocs: &[HypervisorPortAllocation], freed: &[u16]) -> HypervisorStatus {
        HypervisorStatus {
            allocated_ports: allocs.to_vec(),
            freed_ports: freed.to_vec(),
            files: BTreeMap::new(),
            conditions: Vec::new(),
        }
    }

    #[test]
    fn no_change_of_the_cluster_gives_fresh_exactly() {
        let before = status(&[alloc("default", "a", "a-0-apiserver", 30000)], &[]);
        // Fresh is unsorted and holds another cluster's change: kept as it is.
        let fresh = status(
            &[
                alloc("", "b", "b-0-apiserver", 30002),
                alloc("default", "a", "a-0-apiserver", 30000),
            ],
            &[30001],
        );
        assert_eq!(merge_share(&fresh, &before, &before, &key("a")), fresh);
    }

    #[test]
    fn allocations_and_releases_of_the_cluster_only() {
        let before = status(
            &[
                alloc("default", "a", "a-0-apiserver", 30000),
                alloc("default", "a", "a-1-apiserver", 30001),
            ],
            &[30005],
        );
        // a-1 removed (port 30001 freed), a-2 took freed 30005 and 30006.
        let after = status(
            &[
                alloc("default", "a", "a-0-apiserver", 30000),
                alloc("default", "a", "a-2-apiserver", 30005),
                alloc("default", "a", "a-2-etcd-peer", 30006),
            ],
            &[30001],
        );
        // Meanwhile b took 30007 and released 30003.
        let fresh = status(
            &[
                alloc("default", "a", "a-0-apiserver", 30000),
                alloc("default", "a", "a-1-apiserver", 30001),
                alloc("default", "b", "b-0-apiserver", 30007),
            ],
            &[30003, 30005],
        );
        assert_eq!(
            merge_share(&fresh, &before, &after, &key("a")),
            status(
                &[
                    alloc("default", "a", "a-0-apiserver", 30000),
                    alloc("default", "a", "a-2-apiserver", 30005),
                    alloc("default", "a", "a-2-etcd-peer", 30006),
                    alloc("default", "b", "b-0-apiserver", 30007),
                ],
                &[30001, 30003],
            )
        );
    }

    #[test]
    fn empty_namespace_means_default_and_other_namespaces_are_not_ours() {
        let before = status(
            &[
                alloc("", "a", "a-0-apiserver", 30000),
                alloc("other", "a", "a-0-apiserver", 30001),
            ],
            &[],
        );
        let after = status(&[alloc("other", "a", "a-0-apiserver", 30001)], &[30000]);
        let merged = merge_share(&before, &before, &after, &key("a"));
        assert_eq!(
            merged,
            status(&[alloc("other", "a", "a-0-apiserver", 30001)], &[30000])
        );
        // The cluster `a` of namespace `other` changes nothing of default/a.
        let merged = merge_share(
            &before,
            &before,
            &status(&[alloc("", "a", "a-0-apiserver", 30000)], &[30001]),
            &ObjectKey::new("other", "a"),
        );
        assert_eq!(
            merged,
            status(&[alloc("", "a", "a-0-apiserver", 30000)], &[30001])
        );
    }

    #[test]
    fn a_port_another_owner_holds_is_never_shared() {
        let before = status(&[], &[]);
        let after = status(&[alloc("default", "a", "a-0-apiserver", 30000)], &[]);
        let fresh = status(&[alloc("default", "b", "b-0-apiserver", 30000)], &[]);
        assert_eq!(merge_share(&fresh, &before, &after, &key("a")), fresh);
    }

    #[test]
    fn files_of_the_cluster_only() {
        let mut before = status(&[], &[]);
        let files = |h: &str| BTreeMap::from([("/etc/x".to_string(), h.to_string())]);
        before.files = BTreeMap::from([(
            "default".to_string(),
            BTreeMap::from([(
                "a".to_string(),
                BTreeMap::from([
                    ("a-0".to_string(), files("h0")),
                    ("a-1".to_string(), files("h1")),
                ]),
            )]),
        )]);
        let mut after = before.clone();
        let a = after
            .files
            .get_mut("default")
            .unwrap()
            .get_mut("a")
            .unwrap();
        a.remove("a-1");
        a.insert("a-0".into(), files("h0'"));
        let mut fresh = before.clone();
        fresh.files.get_mut("default").unwrap().insert(
            "b".into(),
            BTreeMap::from([("b-0".to_string(), files("hb"))]),
        );
        let merged = merge_share(&fresh, &before, &after, &key("a"));
        let mut want = after.clone();
        want.files.get_mut("default").unwrap().insert(
            "b".into(),
            BTreeMap::from([("b-0".to_string(), files("hb"))]),
        );
        assert_eq!(merged, want);

        // The cluster leaves: its map goes, b's stays; once b leaves too, nothing is left.
        let mut gone = after.clone();
        gone.files.clear();
        let merged2 = merge_share(&merged, &after, &gone, &key("a"));
        assert_eq!(
            merged2.files["default"].keys().collect::<Vec<_>>(),
            ["b"],
            "{merged2:?}"
        );
        let merged3 = merge_share(&merged2, &merged2, &HypervisorStatus::default(), &key("b"));
        assert_eq!(merged3, HypervisorStatus::default());
    }

    fn hypervisor() -> Hypervisor {
        Hypervisor::new(
            ObjectMeta::named("h"),
            HypervisorSpec {
                local_cri_endpoint: Some(LocalCriEndpoint {
                    cri_endpoint_path: "/run/h.sock".into(),
                }),
                remote_cri_endpoint: None,
                public: false,
                ip_address: "10.0.0.1".into(),
                port_range: PortRange {
                    low: 30000,
                    high: 30099,
                },
                capacity: None,
                unschedulable: false,
                drain: false,
            },
        )
    }

    fn public() -> Hypervisor {
        let mut h = hypervisor();
        h.metadata.name = "p".into();
        h.spec.public = true;
        h.spec.ip_address = "10.0.1.1".into();
        h
    }

    /// prepare of one cluster in a sub-world holding the given hypervisors: the hypervisors
    /// after it.
    fn prepare_one(
        hypervisors: &[Hypervisor],
        cluster: &str,
        components: &[Component],
    ) -> (World, World) {
        let mut w = World::default();
        for h in hypervisors {
            w.hypervisors.insert(h.key(), h.clone());
        }
        let c = Cluster::new(
            ObjectMeta::named(cluster),
            ClusterSpec {
                control_plane_replicas: Some(1),
                ..ClusterSpec::default()
            },
        );
        w.clusters.insert(c.key(), c);
        for c in components {
            w.components.insert(c.key(), c.clone());
        }
        let options = oi_planner::PrepareOptions {
            leaf_certificates: false,
            ..oi_planner::PrepareOptions::default()
        };
        let now = datetime!(2026-11-22 08:00 UTC);
        let prepared = oi_planner::prepare_with(w.clone(), now, &options);
        assert!(prepared.failures.is_empty(), "{:?}", prepared.failures);
        (w, prepared.world)
    }

    fn ports(s: &HypervisorStatus) -> Vec<(String, u16)> {
        s.allocated_ports
            .iter()
            .map(|a| (a.cluster.clone(), a.port))
            .collect()
    }

    #[test]
    fn two_clusters_allocating_in_turn_never_share_a_port() {
        let (h, p) = (hypervisor(), public());
        // a, then b (from the status a left), each merged onto the store's copy.
        let mut stored = vec![h.clone(), p.clone()];
        for cluster in ["a", "b"] {
            let (before, after) = prepare_one(&stored, cluster, &[]);
            for s in &mut stored {
                let k = s.key();
                s.status = merge_share(
                    &s.status,
                    &before.hypervisors[&k].status,
                    &after.hypervisors[&k].status,
                    &key(cluster),
                );
            }
        }
        assert_eq!(
            ports(&stored[0].status),
            [
                ("a".to_string(), 30000),
                ("a".to_string(), 30001),
                ("a".to_string(), 30002),
                ("b".to_string(), 30003),
                ("b".to_string(), 30004),
                ("b".to_string(), 30005),
            ]
        );
        assert_eq!(
            ports(&stored[1].status),
            [
                ("a".to_string(), 30000),
                ("a".to_string(), 30001),
                ("b".to_string(), 30002),
                ("b".to_string(), 30003)
            ]
        );
        let all: BTreeSet<u16> = stored[0]
            .status
            .allocated_ports
            .iter()
            .map(|a| a.port)
            .collect();
        assert_eq!(all.len(), stored[0].status.allocated_ports.len());
    }

    #[test]
    fn a_concurrent_allocation_survives_a_stale_phase_three_write() {
        let (h, p) = (hypervisor(), public());
        // a prepared (phase 1) and written.
        let (a_before, a_prepared) = prepare_one(&[h.clone(), p.clone()], "a", &[]);
        let hk = h.key();
        let mut stored = h.clone();
        stored.status = merge_share(
            &stored.status,
            &a_before.hypervisors[&hk].status,
            &a_prepared.hypervisors[&hk].status,
            &key("a"),
        );
        // While a's engine runs (phase 2), b is prepared from the store and written.
        let mut stored_p = p.clone();
        stored_p.status = a_prepared.hypervisors[&p.key()].status.clone();
        let (b_before, b_prepared) = prepare_one(&[stored.clone(), stored_p], "b", &[]);
        stored.status = merge_share(
            &stored.status,
            &b_before.hypervisors[&hk].status,
            &b_prepared.hypervisors[&hk].status,
            &key("a"),
        );
        // That was b's change with a's key: nothing of it is a's.
        assert_eq!(ports(&stored.status).len(), 3);
        stored.status = merge_share(
            &stored.status,
            &b_before.hypervisors[&hk].status,
            &b_prepared.hypervisors[&hk].status,
            &key("b"),
        );
        assert_eq!(ports(&stored.status).len(), 6);
        // a's engine ends (phase 3) with a stale copy: it wrote files and removed nothing.
        let mut a_report = a_prepared.hypervisors[&hk].status.clone();
        a_report.files = BTreeMap::from([(
            "default".to_string(),
            BTreeMap::from([(
                "a".to_string(),
                BTreeMap::from([("a-control-plane-0".to_string(), BTreeMap::new())]),
            )]),
        )]);
        let merged = merge_share(
            &stored.status,
            &a_prepared.hypervisors[&hk].status,
            &a_report,
            &key("a"),
        );
        assert_eq!(
            ports(&merged),
            ports(&stored.status),
            "b's ports survive a's write"
        );
        assert_eq!(merged.files["default"].keys().collect::<Vec<_>>(), ["a"]);

        // a scaled to nothing (removed): its ports freed, b's kept and not freed.
        let mut a_gone = a_report.clone();
        a_gone.allocated_ports.retain(|x| x.cluster != "a");
        a_gone.freed_ports = vec![30000, 30001, 30002];
        a_gone.files.clear();
        let merged = merge_share(&merged, &a_report, &a_gone, &key("a"));
        assert_eq!(
            ports(&merged),
            [
                ("b".to_string(), 30003),
                ("b".to_string(), 30004),
                ("b".to_string(), 30005)
            ]
        );
        assert_eq!(merged.freed_ports, [30000, 30001, 30002]);
        assert!(merged.files.is_empty());
    }

    #[test]
    fn components_of_a_sub_world_keep_their_ports_on_a_second_prepare() {
        let (h, p) = (hypervisor(), public());
        let (_, prepared) = prepare_one(&[h, p], "a", &[]);
        let comps: Vec<Component> = prepared.components.values().cloned().collect();
        let hs: Vec<Hypervisor> = prepared.hypervisors.values().cloned().collect();
        let (before, again) = prepare_one(&hs, "a", &comps);
        assert_eq!(before.hypervisors, again.hypervisors);
        assert_eq!(
            before
                .components
                .values()
                .map(|c| &c.status)
                .collect::<Vec<_>>(),
            again
                .components
                .values()
                .map(|c| &c.status)
                .collect::<Vec<_>>()
        );
    }
}
