//! Orphans on real containerd: a cluster whose documents were cut from the manifests leaves
//! its pods running. The dry run and the run agree: both name them and leave them (the run
//! with a warning and in its summary, their ports held); `--prune` removes them, their
//! directories and ports, and the dry run with `--prune` says so first.

use oi_api::{ObjectKey, World as ApiWorld};
use oi_e2e::{IMAGE_REPOSITORY, LocalSet, oi, prerequisites, reconcile_until_ready};

fn cut(world: &str, cluster: &str) -> String {
    let mut w = ApiWorld::load(world, "world").unwrap();
    let key = ObjectKey::new("default", cluster);
    w.clusters.remove(&key);
    w.components.retain(|_, c| c.cluster_key() != key);
    w.to_yaml().unwrap()
}

fn reconcile(world: &str, extra: &[&str]) -> oi_e2e::Run {
    let mut args = vec!["reconcile", "--image-repository", IMAGE_REPOSITORY];
    args.extend(extra);
    oi(&args, world).unwrap()
}

/// The pods of `cluster` on the set, as `hypervisor namespace/name`.
fn containers_of(set: &LocalSet, cluster: &str) -> Vec<String> {
    set.pods()
        .unwrap()
        .into_iter()
        .filter(|(_, pod)| pod.starts_with(&format!("default/{cluster}-")))
        .map(|(h, pod)| format!("{h} {pod}"))
        .collect()
}

#[test]
fn orphans_are_named_and_left_by_the_run_and_the_dry_run_and_removed_only_when_pruned() {
    if !prerequisites(
        "orphans_are_named_and_left_by_the_run_and_the_dry_run_and_removed_only_when_pruned",
    ) {
        return;
    }
    let set = LocalSet::create("orph", 2, 1, false).unwrap();
    let mut world = set.manifests.clone();
    for c in ["c1", "c2"] {
        world = oi_e2e::inject_cluster(&world, c, 1).unwrap();
    }
    let (run, _, _) = reconcile_until_ready(&world, 1).unwrap();
    let before = containers_of(&set, "c2");
    assert!(!before.is_empty());
    let cut = cut(&run.stdout, "c2");

    // The dry run names them and would leave them.
    let dry = reconcile(&cut, &["--dry-run"]);
    assert!(dry.success, "{}", dry.stderr);
    assert!(
        dry.stdout
            .contains("leave orphan pod default/c2-control-plane-0 (its cluster or component is not in the manifests; --prune removes it)"),
        "{}",
        dry.stdout
    );
    assert!(
        !dry.stdout.contains("remove pod default/c2-"),
        "{}",
        dry.stdout
    );

    // So does the run: a warning, the summary, the pods left running, their ports held.
    let left = reconcile(&cut, &[]).ok("oi reconcile").unwrap();
    assert!(
        left.stderr.contains("warning: 3 pods of clusters or components the manifests do not hold (cluster default/c2 on "),
        "{}",
        left.stderr
    );
    let summary = left.summary().unwrap();
    assert_eq!(summary.orphan_pods, Some((3, false)), "{summary}");
    assert_eq!(containers_of(&set, "c2"), before);
    let held = oi_e2e::World::parse(&left.stdout)
        .unwrap()
        .hypervisor_ports_of("c2");
    assert!(!held.is_empty());

    // With --prune: the dry run says they go, then the run removes them.
    let dry = reconcile(&left.stdout, &["--dry-run", "--prune"]);
    assert!(dry.success, "{}", dry.stderr);
    assert!(
        dry.stdout.contains("remove pod default/c2-control-plane-0"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains("remove directory /var/lib/oneinfra/default/c2"),
        "{}",
        dry.stdout
    );
    let pruned = reconcile(&left.stdout, &["--prune"])
        .ok("oi reconcile --prune")
        .unwrap();
    assert_eq!(pruned.summary().unwrap().orphan_pods, Some((3, true)));
    assert_eq!(containers_of(&set, "c2"), Vec::<String>::new());
    let world = oi_e2e::World::parse(&pruned.stdout).unwrap();
    assert_eq!(world.hypervisor_ports_of("c2"), Vec::<String>::new());
    // c1 untouched, and nothing left to prune.
    assert!(!containers_of(&set, "c1").is_empty());
    let again = reconcile(&pruned.stdout, &["--prune"]).ok("again").unwrap();
    assert_eq!(again.summary().unwrap().orphan_pods, None);
    for h in ["private-1", "private-2", "public-1"] {
        let dir = set
            .var_lib_oneinfra(&format!("{}-{h}", set.name()))
            .join("default/c2");
        assert!(!dir.exists(), "{} is still there", dir.display());
    }
}
