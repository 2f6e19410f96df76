//! Draining a private hypervisor under a 3-replica cluster with `oi hypervisor drain`, while a
//! client writes an object through the ingress every 100 ms: no write lost, none
//! failed, etcd back to 3 voting members, nothing of the cluster left on the hypervisor; then
//! the public one (the ingress moves, and the cluster's address with it); and a drain with no
//! room elsewhere refused with everything left running.

use std::collections::BTreeSet;
use std::time::Duration;

use oi_e2e::{
    ApiCaller, Etcdctl, IMAGE_REPOSITORY, LocalSet, World, admin_kubeconfig, eventually, kubectl,
    oi, prerequisites, reconcile_until_ready, str_at,
};

fn hypervisor_of(world: &World, component: &str) -> String {
    world
        .hypervisor_of(component)
        .unwrap_or_else(|| panic!("no placed component {component}"))
        .to_string()
}

fn drain(world: &str, hypervisor: &str) -> oi_e2e::Run {
    oi(
        &[
            "hypervisor",
            "drain",
            "--name",
            hypervisor,
            "--image-repository",
            IMAGE_REPOSITORY,
        ],
        world,
    )
    .unwrap()
}

#[test]
fn draining_hypervisors_moves_replicas_and_ingress_with_no_write_lost() {
    let test = "draining_hypervisors_moves_replicas_and_ingress_with_no_write_lost";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("drn", 4, 2, false).unwrap();
    let injected = oi_e2e::inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    // The hypervisor of etcd's leader: it hands leadership over before it leaves.
    let leader = eventually(Duration::from_secs(20), || {
        Etcdctl::new(&world, "c1")?.leader()
    })
    .unwrap();
    let drained = hypervisor_of(&world, &leader);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    eventually(Duration::from_secs(20), || {
        kubectl(&kubeconfig, &["get", "--raw", "/readyz"])?.ok("readyz")
    })
    .unwrap();

    // A write every 100 ms through the ingress, all along the drain.
    let writer = ApiCaller::start_with(&kubeconfig, |i| {
        vec![
            "create".into(),
            "configmap".into(),
            format!("drain-{i}"),
            format!("--from-literal=i={i}"),
        ]
    });
    // A few writes before, and at least 10 in all with 3 after the drain.
    writer.wait_for(3, Duration::from_secs(30)).unwrap();
    let run = drain(&run.stdout, &drained)
        .ok("oi hypervisor drain")
        .unwrap();
    writer
        .wait_for((writer.made() + 3).max(10), Duration::from_secs(60))
        .unwrap();
    let calls = writer.finish_timed();
    let failed: Vec<(usize, &String)> = calls
        .iter()
        .enumerate()
        .filter_map(|(i, (_, e))| e.as_ref().map(|e| (i, e)))
        .collect();
    eprintln!(
        "drain of {drained} in {:.1?}: {} writes, {} failed",
        run.elapsed,
        calls.len(),
        failed.len()
    );
    eprintln!("failed writes: {failed:#?}");
    assert!(calls.len() >= 10, "only {} writes made", calls.len());
    assert!(
        failed.is_empty(),
        "{} writes failed: {failed:#?}",
        failed.len()
    );
    assert!(
        run.stderr
            .contains(&format!("oi: hypervisor {drained} is drained")),
        "{}",
        run.stderr
    );
    // The replacement joined before the replica left.
    let position = |line: &str| {
        run.stderr
            .find(line)
            .unwrap_or_else(|| panic!("no {line:?} in:\n{}", run.stderr))
    };
    let joined = position("c1/c1-control-plane-3: promoted etcd member");
    let out = position("c1/c1-ingress: retiring replicas taken out of the ingress");
    let handed = position(&format!("c1/{leader}: handed etcd leadership to"));
    let left = position(&format!("c1/{leader}: removed pod"));
    assert!(
        joined < out && out < handed && handed < left,
        "{}",
        run.stderr
    );
    assert!(joined < left, "{}", run.stderr);

    // No write lost.
    let listed = kubectl(&kubeconfig, &["get", "configmaps", "-o", "name"])
        .unwrap()
        .ok("kubectl get configmaps")
        .unwrap()
        .stdout;
    let listed: BTreeSet<&str> = listed.lines().collect();
    for (i, (_, e)) in calls.iter().enumerate() {
        if e.is_none() {
            let name = format!("configmap/drain-{i}");
            assert!(
                listed.contains(name.as_str()),
                "{name} was written and is gone"
            );
        }
    }
    // etcd: 3 voting members, the drained replica not among them.
    let world = World::parse(&run.stdout).unwrap();
    let members = Etcdctl::new(&world, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();
    assert!(
        members.iter().all(|(name, _)| *name != leader),
        "{members:?}"
    );
    // Nothing left there: no component, no container, no port.
    assert!(
        world
            .of_kind("Component")
            .all(|c| str_at(c, &["spec", "hypervisor"]) != Some(drained.as_str()))
    );
    assert_eq!(
        set.container_images(&drained).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(world.condition("c1", "Drained").unwrap().0, "True");

    // The public hypervisor: the ingress moves, and the cluster's address with it.
    let public = hypervisor_of(&world, "c1-ingress");
    let run = drain(&run.stdout, &public)
        .ok("oi hypervisor drain")
        .unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let moved_to = hypervisor_of(&world, "c1-ingress-1");
    assert_ne!(moved_to, public);
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let got = eventually(Duration::from_secs(20), || {
        kubectl(&kubeconfig, &["get", "configmap", "drain-0", "-o", "name"])?.ok("get")
    })
    .unwrap();
    assert_eq!(got.stdout.trim(), "configmap/drain-0");
    assert_eq!(set.container_images(&public).unwrap(), Vec::<String>::new());
    assert_eq!(world.condition("c1", "Drained").unwrap().0, "True");

    // No room elsewhere: the replicas stay where they are, and the reason is named.
    let mut staying: Vec<String> = world
        .components_of("c1")
        .filter(|c| str_at(c, &["spec", "role"]) == Some("control-plane"))
        .filter_map(|c| str_at(c, &["metadata", "name"]).map(str::to_string))
        .collect();
    staying.sort();
    assert_eq!(staying.len(), 3, "{staying:?}");
    let on_private: Vec<String> = staying.iter().map(|c| hypervisor_of(&world, c)).collect();
    let mut refused = oi(&["hypervisor", "cordon", "--name", &drained], &run.stdout)
        .unwrap()
        .ok("cordon")
        .unwrap()
        .stdout;
    for h in &on_private[1..] {
        refused = oi(&["hypervisor", "cordon", "--name", h], &refused)
            .unwrap()
            .ok("cordon")
            .unwrap()
            .stdout;
    }
    let before = set.containers().unwrap();
    let blocked = drain(&refused, &on_private[0]);
    assert!(!blocked.success, "{}", blocked.stderr);
    assert!(
        blocked.stderr.contains(&format!(
            "hypervisor {} cannot be drained:\ncluster default/c1: {} cannot leave drained \
             hypervisor {} and keeps running there",
            on_private[0], staying[0], on_private[0]
        )),
        "{}",
        blocked.stderr
    );
    assert_eq!(set.containers().unwrap(), before);
    let world = World::parse(&blocked.stdout).unwrap();
    assert_eq!(hypervisor_of(&world, &staying[0]), on_private[0]);
    drop(set);
}
