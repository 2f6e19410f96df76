//! Version upgrades: a 3-replica cluster on 1.36 upgraded to 1.37 by `oi reconcile` while a
//! client calls its API every 100 ms (every API server first, then the rest, one replica at a
//! time: no call fails); a downgrade and a jump over a minor refused with nothing
//! changed, the jump with the chain to follow; `oi cluster upgrade --to 1.37` walking a 1.35
//! cluster through 1.36 to 1.37.

use std::time::Duration;

use oi_e2e::{
    ApiCaller as Caller, Etcdctl, LocalSet, World, admin_kubeconfig, eventually, oi, prerequisites,
    reconcile, reconcile_until_ready, server_git_version,
};

fn with_version(world: &str, cluster: &str, version: &str) -> String {
    World::parse(world)
        .unwrap()
        .with_spec_field(cluster, "kubernetesVersion", version.into())
        .unwrap()
}

fn running_version(world: &str, cluster: &str) -> Option<String> {
    let parsed = World::parse(world).unwrap();
    oi_e2e::str_at(
        parsed.require_cluster(cluster).unwrap(),
        &["status", "kubernetesVersion"],
    )
    .map(str::to_string)
}

#[test]
fn upgrades_go_one_minor_at_a_time_with_the_api_up() {
    let test = "upgrades_go_one_minor_at_a_time_with_the_api_up";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("upg", 3, 1, false).unwrap();
    let injected = oi_e2e::inject_cluster_with(
        &set.manifests,
        "c1",
        &[
            "--control-plane-replicas",
            "3",
            "--kubernetes-version",
            "1.36",
        ],
    )
    .unwrap();
    let injected =
        oi_e2e::inject_cluster_with(&injected, "c2", &["--kubernetes-version", "1.35"]).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 3).unwrap();
    let world = run.stdout;
    assert_eq!(running_version(&world, "c1").as_deref(), Some("1.36.4"));
    assert_eq!(running_version(&world, "c2").as_deref(), Some("1.35.9"));
    let dir = tempfile::tempdir().unwrap();
    let parsed = World::parse(&world).unwrap();
    let c1 = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    let c2 = admin_kubeconfig(&parsed, "c2", dir.path()).unwrap();
    assert_eq!(
        eventually(Duration::from_secs(20), || server_git_version(&c1)).unwrap(),
        "v1.36.4"
    );

    // 1.36 -> 1.37 by `oi reconcile`, a client calling every 100 ms all along.
    let caller = Caller::start(&c1);
    // A few calls before, and at least 10 in all with 3 after the upgrade.
    caller.wait_for(3, Duration::from_secs(30)).unwrap();
    let run = reconcile(&with_version(&world, "c1", "1.37"), &[])
        .unwrap()
        .ok("upgrading reconcile")
        .unwrap();
    caller
        .wait_for((caller.made() + 3).max(10), Duration::from_secs(60))
        .unwrap();
    let (calls, failed) = caller.finish();
    eprintln!(
        "1.36 -> 1.37 in {:.1?}: {calls} calls, {} failed",
        run.elapsed,
        failed.len()
    );
    assert!(calls >= 10, "only {calls} calls made");
    assert!(
        failed.is_empty(),
        "{} of {calls} calls failed: {failed:#?}",
        failed.len()
    );
    let upgraded: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("upgraded the API server of pod"))
        .collect();
    assert_eq!(upgraded.len(), 3, "{}", run.stderr);
    // Every API server before any whole replica.
    let first_whole = run
        .stderr
        .lines()
        .position(|l| l.contains("replaced pod c1-control-plane-") && !l.contains("-etcd"))
        .unwrap();
    let lines: Vec<&str> = run.stderr.lines().collect();
    let last_api = lines
        .iter()
        .rposition(|l| l.contains("upgraded the API server of pod"))
        .unwrap();
    assert!(last_api < first_whole, "{}", run.stderr);
    let world = run.stdout;
    assert_eq!(running_version(&world, "c1").as_deref(), Some("1.37.1"));
    assert_eq!(
        eventually(Duration::from_secs(20), || server_git_version(&c1)).unwrap(),
        "v1.37.1"
    );
    Etcdctl::new(&World::parse(&world).unwrap(), "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();

    // Down again, or 1.35 -> 1.37 at once: refused, nothing changed on the hypervisors.
    let refused = reconcile(&with_version(&world, "c1", "1.36"), &[]).unwrap();
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("a downgrade is not supported"),
        "{}",
        refused.stderr
    );
    assert_eq!(refused.summary().unwrap().mutating_cri_calls, 0);
    let jump = reconcile(&with_version(&world, "c2", "1.37"), &[]).unwrap();
    assert!(!jump.success);
    assert!(
        jump.stderr
            .contains("upgrade one minor at a time, 1.35 -> 1.36 -> 1.37 (`oi cluster upgrade --to 1.37` walks them)"),
        "{}",
        jump.stderr
    );
    assert_eq!(jump.summary().unwrap().mutating_cri_calls, 0);
    assert_eq!(
        running_version(&jump.stdout, "c2").as_deref(),
        Some("1.35.9")
    );
    let downgrade = oi(
        &["cluster", "upgrade", "--cluster", "c1", "--to", "1.35"],
        &world,
    )
    .unwrap();
    assert!(!downgrade.success);
    assert!(
        downgrade
            .stderr
            .contains("runs Kubernetes 1.37.1 and --to 1.35.9 is older"),
        "{}",
        downgrade.stderr
    );

    // The chain walked for the user.
    let walked = oi(
        &["cluster", "upgrade", "--cluster", "c2", "--to", "1.37"],
        &world,
    )
    .unwrap()
    .ok("oi cluster upgrade")
    .unwrap();
    assert!(
        walked
            .stderr
            .contains("cluster default/c2: Kubernetes 1.35.9 -> 1.36.4")
            && walked
                .stderr
                .contains("cluster default/c2: Kubernetes 1.36.4 -> 1.37.1")
            && walked
                .stderr
                .contains("oi: cluster default/c2 runs Kubernetes 1.37.1"),
        "{}",
        walked.stderr
    );
    assert_eq!(
        running_version(&walked.stdout, "c2").as_deref(),
        Some("1.37.1")
    );
    assert_eq!(
        eventually(Duration::from_secs(20), || server_git_version(&c2)).unwrap(),
        "v1.37.1"
    );
    drop(set);
}
