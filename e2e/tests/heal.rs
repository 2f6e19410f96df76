//! Healing with real etcd, haproxy and containerd, while a client writes an object through
//! the ingress every 100 ms:
//! 1. a private hypervisor lost for good (its containerd killed, its link down, never back):
//!    `oi hypervisor remove` brings the cluster back to 3 voting members, none on it; no
//!    acknowledged write lost; the failed writes counted and printed, and the time back to
//!    full strength;
//! 2. `oi cluster recover` refused while the cluster has a quorum;
//! 3. two of the three hypervisors then lost for good: their removal refused, naming the
//!    members (the survivor alone cannot make a quorum);
//! 4. `oi cluster recover --from-member` the survivor: 3 voting members again, with every
//!    object the survivor held.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use oi_e2e::{
    ApiCaller, Etcdctl, IMAGE_REPOSITORY, LocalSet, World, admin_kubeconfig, eventually, kubectl,
    oi, prerequisites, reconcile_until_ready, str_at,
};

fn remove(world: &str, hypervisor: &str) -> oi_e2e::Run {
    oi(
        &[
            "hypervisor",
            "remove",
            "--name",
            hypervisor,
            "--max-wait",
            "90s",
            "--image-repository",
            IMAGE_REPOSITORY,
        ],
        world,
    )
    .unwrap()
}

fn recover(world: &str, member: &str) -> oi_e2e::Run {
    oi(
        &[
            "cluster",
            "recover",
            "--from-member",
            member,
            "--max-wait",
            "150s",
            "--image-repository",
            IMAGE_REPOSITORY,
        ],
        world,
    )
    .unwrap()
}

fn replicas(world: &World) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = world
        .components_of("c1")
        .filter(|c| str_at(c, &["spec", "role"]) == Some("control-plane"))
        .filter(|c| str_at(c, &["metadata", "deletionTimestamp"]).is_none())
        .filter_map(|c| {
            Some((
                str_at(c, &["metadata", "name"])?.to_string(),
                str_at(c, &["spec", "hypervisor"])?.to_string(),
            ))
        })
        .collect();
    out.sort();
    out
}

fn configmaps(kubeconfig: &std::path::Path) -> BTreeSet<String> {
    eventually(Duration::from_secs(30), || {
        kubectl(kubeconfig, &["get", "configmaps", "-o", "name"])?.ok("kubectl get configmaps")
    })
    .unwrap()
    .stdout
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
fn lost_hypervisors_are_replaced_and_a_lost_quorum_recovered_with_no_acknowledged_write_lost() {
    let test =
        "lost_hypervisors_are_replaced_and_a_lost_quorum_recovered_with_no_acknowledged_write_lost";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("heal", 6, 1, false).unwrap();
    let injected = oi_e2e::inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    eventually(Duration::from_secs(20), || {
        kubectl(&kubeconfig, &["get", "--raw", "/readyz"])?.ok("readyz")
    })
    .unwrap();
    // etcd's leader's machine is the one lost: the hardest case.
    let leader = eventually(Duration::from_secs(20), || {
        Etcdctl::new(&world, "c1")?.leader()
    })
    .unwrap();
    let victim = world.hypervisor_of(&leader).unwrap().to_string();

    // 1. Lost for good, then removed, while a client writes.
    let writer = ApiCaller::start_with(&kubeconfig, |i| {
        vec![
            "create".into(),
            "configmap".into(),
            format!("heal-{i}"),
            format!("--from-literal=i={i}"),
        ]
    });
    // A few writes before the loss, and at least 10 in all with 3 after the removal.
    writer.wait_for(3, Duration::from_secs(30)).unwrap();
    let lost_at = Instant::now();
    let _first = set.lose(&victim).unwrap();
    let run = remove(&run.stdout, &victim)
        .ok("oi hypervisor remove")
        .unwrap();
    let back = lost_at.elapsed();
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
        "hypervisor {victim} (etcd leader {leader}) lost: back to 3 voting members in {back:.1?} \
         (oi hypervisor remove took {:.1?}); {} writes, {} failed",
        run.elapsed,
        calls.len(),
        failed.len()
    );
    eprintln!("failed writes: {failed:#?}");
    assert!(calls.len() >= 10, "only {} writes made", calls.len());
    assert!(
        run.stderr
            .contains(&format!("oi: hypervisor {victim} is removed")),
        "{}",
        run.stderr
    );
    let world = World::parse(&run.stdout).unwrap();
    assert!(
        world
            .of_kind("Hypervisor")
            .all(|h| str_at(h, &["metadata", "name"]) != Some(victim.as_str())),
        "the removed hypervisor is still in the manifests"
    );
    let now = replicas(&world);
    assert_eq!(now.len(), 3, "{now:?}");
    assert!(now.iter().all(|(_, h)| *h != victim), "{now:?}");
    let members = Etcdctl::new(&world, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();
    assert!(members.iter().all(|(n, _)| *n != leader), "{members:?}");
    // No acknowledged write lost.
    let listed = configmaps(&kubeconfig);
    for (i, (_, e)) in calls.iter().enumerate() {
        if e.is_none() {
            let name = format!("configmap/heal-{i}");
            assert!(
                listed.contains(&name),
                "{name} was acknowledged and is gone"
            );
        }
    }
    assert_eq!(world.condition("c1", "Healed").unwrap().0, "True");

    // 2. Recovering a cluster that has a quorum is refused, and changes nothing.
    let refused = recover(&run.stdout, &now[0].0);
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("has a quorum (healthy: "),
        "{}",
        refused.stderr
    );
    assert_eq!(refused.stdout, "");

    // 3. Two of the three lost for good: removing them is refused, naming the members.
    let survivor = now[2].clone();
    let (a, b) = (now[0].1.clone(), now[1].1.clone());
    let _second = set.lose(&a).unwrap();
    let _third = set.lose(&b).unwrap();
    // The first cannot be removed while the second neither answers nor is removed...
    let refused = remove(&run.stdout, &a);
    assert!(!refused.success, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains(&format!("hypervisor {b} is unreachable: "))
            && refused.stderr.contains(&format!(
                "if it is gone for good, remove it (`oi hypervisor remove --name {b}`"
            )),
        "{}",
        refused.stderr
    );
    // ... and with both removed, removing their members would leave no quorum.
    let refused = remove(&refused.stdout, &b);
    assert!(!refused.success, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(
            "is not removed: the 2 voting members that would stay need 2 healthy and 0 are (not: "
        ) && refused
            .stderr
            .contains("oi cluster recover --from-member NAME"),
        "{}",
        refused.stderr
    );
    // Nothing was removed: the survivor still lists three members.
    let stuck = World::parse(&refused.stdout).unwrap();
    let endpoint = str_at(
        stuck.require_cluster("c1").unwrap(),
        &["status", "storageClientEndpoints", &survivor.0],
    )
    .unwrap()
    .to_string();
    let listed = Etcdctl::new(&stuck, "c1")
        .unwrap()
        .only(&endpoint)
        .run(&["member", "list"])
        .unwrap()
        .stdout;
    assert_eq!(listed.lines().count(), 3, "{listed}");

    // 4. Recovered from the survivor's data, and grown back.
    let run = recover(&refused.stdout, &survivor.0)
        .ok("oi cluster recover")
        .unwrap();
    eprintln!("recovered from {} in {:.1?}", survivor.0, run.elapsed);
    assert!(
        run.stderr.contains(&format!(
            "has no quorum: recovering it from member {}'s data",
            survivor.0
        )),
        "{}",
        run.stderr
    );
    let world = World::parse(&run.stdout).unwrap();
    let after = replicas(&world);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(after.contains(&survivor), "{after:?}");
    assert!(after.iter().all(|(_, h)| *h != a && *h != b), "{after:?}");
    let members = Etcdctl::new(&world, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();
    assert!(members.iter().any(|(n, _)| *n == survivor.0), "{members:?}");
    // Every object the survivor held: all the writes acknowledged in part 1.
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let recovered = configmaps(&kubeconfig);
    for (i, (_, e)) in calls.iter().enumerate() {
        if e.is_none() {
            let name = format!("configmap/heal-{i}");
            assert!(
                recovered.contains(&name),
                "{name} is gone after the recovery"
            );
        }
    }
}

#[test]
fn a_member_whose_data_directory_is_deleted_is_brought_back_with_the_clusters_data() {
    let test = "a_member_whose_data_directory_is_deleted_is_brought_back_with_the_clusters_data";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("lose", 3, 1, false).unwrap();
    let injected = oi_e2e::inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    for i in 0..5 {
        eventually(Duration::from_secs(20), || {
            kubectl(
                &kubeconfig,
                &[
                    "create",
                    "configmap",
                    &format!("kept-{i}"),
                    "--from-literal=k=v",
                ],
            )?
            .ok("create")
        })
        .unwrap();
    }
    // A member that does not lead loses its data directory while it runs.
    let etcdctl = Etcdctl::new(&world, "c1").unwrap();
    let leader = eventually(Duration::from_secs(20), || etcdctl.leader()).unwrap();
    let (member, hypervisor) = replicas(&world)
        .into_iter()
        .find(|(n, _)| *n != leader)
        .unwrap();
    let endpoint = str_at(
        world.require_cluster("c1").unwrap(),
        &["status", "storageClientEndpoints", &member],
    )
    .unwrap()
    .to_string();
    let data = set
        .var_lib_oneinfra(&hypervisor)
        .join(format!("default/c1/{member}/etcd"));
    assert!(data.join("member/wal").is_dir(), "{}", data.display());
    std::fs::remove_dir_all(&data).unwrap();
    // etcd notices when it next writes; if it does not within a while, the machine restarts.
    let member_only = Etcdctl::new(&world, "c1").unwrap().only(&endpoint);
    let died = eventually(Duration::from_secs(30), || {
        anyhow::ensure!(
            member_only.run(&["endpoint", "health"]).is_err(),
            "{member} still answers"
        );
        Ok(())
    });
    if died.is_err() {
        eprintln!("{member} kept running without its data directory: its pod is stopped");
        set.remove_pod(&hypervisor, &format!("{member}-etcd"))
            .unwrap();
    } else {
        eprintln!("{member} stopped once its data directory was gone");
    }
    // The next reconcile says why, and brings it back with the cluster's data.
    let run = oi_e2e::reconcile(&run.stdout, &["--max-wait", "90s"]).unwrap();
    eprintln!("{}", run.stderr);
    assert!(run.success, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "c1/{member}: etcd member lost its data: its data directory \
             /var/lib/oneinfra/default/c1/{member}/etcd on {hypervisor} has no write-ahead log"
        )),
        "{}",
        run.stderr
    );
    let world = World::parse(&run.stdout).unwrap();
    let members = Etcdctl::new(&world, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();
    assert!(members.iter().any(|(n, _)| *n == member), "{members:?}");
    // Its own copy of the data (a serializable read answers from the member alone).
    let count = |endpoint: &str| {
        eventually(Duration::from_secs(30), || {
            let keys = Etcdctl::new(&world, "c1")?
                .only(endpoint)
                .run(&["get", "", "--prefix", "--keys-only", "--consistency=s"])?
                .stdout;
            Ok(keys
                .lines()
                .filter(|l| l.contains("configmaps") && l.contains("kept-"))
                .count())
        })
        .unwrap()
    };
    assert_eq!(count(&endpoint), 5);
    // Its start is recorded: the next run changes nothing.
    let again = oi_e2e::reconcile(&run.stdout, &[]).unwrap();
    assert!(again.success, "{}", again.stderr);
    let summary = again.summary().unwrap();
    assert_eq!(summary.mutating_cri_calls, 0, "{summary}");
}

#[test]
fn the_manager_replaces_a_replica_on_a_hypervisor_unreachable_past_the_grace_period() {
    use oi_api::common::{ConditionStatus, condition_types, find_condition};
    use oi_api::{Cluster, ClusterSpec, Component, ObjectKey, ObjectMeta};
    use oi_manager_testsupport::memory::MemoryStore;
    use std::sync::Arc;

    let test = "the_manager_replaces_a_replica_on_a_hypervisor_unreachable_past_the_grace_period";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("mheal", 4, 1, false).unwrap();
    let store = Arc::new(MemoryStore::default());
    for h in oi_api::World::load(&set.manifests, "oi-local-hypervisor-set")
        .unwrap()
        .hypervisors
        .into_values()
    {
        store.insert(h);
    }
    let key = ObjectKey::new("default", "c1");
    store.insert(Cluster::new(
        ObjectMeta::namespaced("default", "c1"),
        ClusterSpec {
            control_plane_replicas: Some(3),
            ..ClusterSpec::default()
        },
    ));
    let grace = Duration::from_secs(5);
    let ctx = oi_e2e::manager_context_with(&store, |o| {
        o.plan.prepare.replace_unreachable_after = time::Duration::try_from(grace).ok();
        o.hypervisor_probe_interval = Duration::from_secs(1);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    let condition = |s: &MemoryStore, type_: &str| {
        s.object::<Cluster>(&key).and_then(|c| {
            find_condition(&c.status.conditions, type_).map(|c| c.status == ConditionStatus::True)
        })
    };
    oi_e2e::run_manager_until(&runtime, &ctx, Duration::from_secs(300), |s| {
        condition(s, condition_types::RECONCILE_SUCCEEDED) == Some(true)
    });
    let world = World::of_store(&*store).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    eventually(Duration::from_secs(20), || {
        kubectl(&kubeconfig, &["get", "--raw", "/readyz"])?.ok("readyz")
    })
    .unwrap();
    let victim = world
        .hypervisor_of("c1-control-plane-0")
        .unwrap()
        .to_string();
    let writer = ApiCaller::start_with(&kubeconfig, |i| {
        vec![
            "create".into(),
            "configmap".into(),
            format!("mgr-{i}"),
            format!("--from-literal=i={i}"),
        ]
    });
    writer.wait_for(3, Duration::from_secs(30)).unwrap();
    let lost_at = Instant::now();
    let _lost = set.lose(&victim).unwrap();
    let on_victim = |s: &MemoryStore| {
        s.objects::<Component>()
            .iter()
            .any(|c| c.spec.hypervisor.as_deref() == Some(victim.as_str()))
    };
    oi_e2e::run_manager_until(&runtime, &ctx, Duration::from_secs(240), |s| {
        condition(s, condition_types::HEALED) == Some(true)
            && condition(s, condition_types::RECONCILE_SUCCEEDED) == Some(true)
    });
    let back = lost_at.elapsed();
    writer
        .wait_for(writer.made() + 3, Duration::from_secs(60))
        .unwrap();
    let calls = writer.finish_timed();
    let failed = calls.iter().filter(|(_, e)| e.is_some()).count();
    eprintln!(
        "hypervisor {victim} lost: the manager had 3 voting members again {back:.1?} later \
         (grace period {grace:?}); {} writes, {failed} failed",
        calls.len()
    );
    let world = World::of_store(&*store).unwrap();
    let members = Etcdctl::new(&world, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();
    assert!(
        members.iter().all(|(n, _)| n != "c1-control-plane-0"),
        "{members:?}"
    );
    // Its component stays, retiring, until the hypervisor answers again (its pods are still
    // there); nothing live is on it.
    assert!(
        store
            .objects::<Component>()
            .iter()
            .filter(|c| c.spec.hypervisor.as_deref() == Some(victim.as_str()))
            .all(|c| c.metadata.is_being_deleted())
    );
    assert!(on_victim(&store));
    let listed = configmaps(&kubeconfig);
    for (i, (_, e)) in calls.iter().enumerate() {
        if e.is_none() {
            let name = format!("configmap/mgr-{i}");
            assert!(
                listed.contains(&name),
                "{name} was acknowledged and is gone"
            );
        }
    }
    let reasons: Vec<String> = store.events().into_iter().map(|e| e.reason).collect();
    for reason in ["HypervisorLost", "ReplacingLostReplicas", "Healed"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
}
