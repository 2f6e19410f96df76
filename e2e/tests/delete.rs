//! Scenario 4: `oi cluster delete` then `oi reconcile` removes the cluster, its components,
//! its ports, its pods and its host directories.

use oi_e2e::{LocalSet, World, inject_cluster, oi, prerequisites, reconcile_until_ready, str_at};

#[test]
fn deleted_cluster_leaves_nothing_behind() {
    if !prerequisites("deleted_cluster_leaves_nothing_behind") {
        return;
    }
    let set = LocalSet::create("del", 3, 1, false).unwrap();
    let injected = inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 3).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let namespace = str_at(
        world.require_cluster("c1").unwrap(),
        &["metadata", "namespace"],
    )
    .unwrap_or("default")
    .to_owned();
    let state = set.state().unwrap();
    let dirs: Vec<_> = state
        .hypervisors
        .iter()
        .flat_map(|h| {
            [
                set.var_lib_oneinfra(&h.name).join(&namespace).join("c1"),
                set.etc_oneinfra(&h.name).join(&namespace).join("c1"),
            ]
        })
        .collect();
    assert!(
        dirs.iter().any(|d| d.exists()),
        "the cluster placed no host directory: {dirs:?}"
    );
    assert!(
        set.containers()
            .unwrap()
            .iter()
            .any(|(_, ls)| ls.lines().count() > 1)
    );

    let marked = oi(&["cluster", "delete", "--name", "c1"], &run.stdout)
        .unwrap()
        .ok("oi cluster delete")
        .unwrap();
    let (run, summary, _) = reconcile_until_ready(&marked.stdout, 3).unwrap();
    eprintln!("delete: {summary}");
    assert!(summary.pods_removed > 0, "{summary}");
    let world = World::parse(&run.stdout).unwrap();
    assert!(world.cluster("c1").is_none(), "{}", world.text);
    assert_eq!(world.components_of("c1").count(), 0, "{}", world.text);
    assert_eq!(world.hypervisor_ports_of("c1"), Vec::<String>::new());
    for (hypervisor, ls) in set.containers().unwrap() {
        // Only the header: c1 was the only cluster, so no container (nor sandbox) may remain.
        assert_eq!(ls.lines().count(), 1, "{hypervisor} still runs:\n{ls}");
    }
    let left: Vec<_> = dirs.iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "host directories left behind: {left:?}");

    let again = oi_e2e::reconcile(&run.stdout, &[]).unwrap();
    let summary = again.summary().unwrap();
    assert!(again.success, "{}", again.stderr);
    assert_eq!(summary.mutating_cri_calls, 0, "{summary}");
    drop(set);
}
