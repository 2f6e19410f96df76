//! Healing over the fakes: a replica on a removed hypervisor replaced (its member removed
//! first, only while the members that stay keep a quorum), a member no component owns
//! removed, a member that lost its data joined again with fresh data.

use super::*;

/// The world of [`world`] with a fourth private hypervisor, room for a replacement.
fn world4(clusters: &[(&str, u32)]) -> World {
    let mut w = world(1, clusters);
    let h = hypervisor("private-4", false, "10.0.0.4");
    w.hypervisors.insert(h.key(), h);
    w
}

fn hypervisor_of(w: &World, component: &str) -> String {
    w.components[&ObjectKey::new("default", component)]
        .spec
        .hypervisor
        .clone()
        .unwrap()
}

fn condition(w: &World, type_: &str) -> Option<(String, String, String)> {
    let c = &w.clusters[&ObjectKey::new("default", "c")];
    find_condition(&c.status.conditions, type_)
        .map(|c| (c.status.to_string(), c.reason.clone(), c.message.clone()))
}

/// Loses hypervisor `h` for good: everything on it stops and it answers no more.
fn lose(harness: &Harness, h: &str) {
    harness.connector.runtimes[h].crash_all(137);
    harness.connector.down.lock().unwrap().insert(h.to_string());
}

/// Marks hypervisor `h` removed, as `oi hypervisor remove` does.
fn remove(w: &mut World, h: &str) {
    w.hypervisors
        .get_mut(&ObjectKey::cluster_scoped(h))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
}

fn position(log: &[String], line: &str) -> usize {
    log.iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("no {line:?} in {log:?}"))
}

#[tokio::test]
async fn a_replica_on_a_removed_hypervisor_is_replaced_its_member_removed_before_its_replacement_joins()
 {
    let h = Harness::new();
    let report = h.run(world4(&[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    let victim = hypervisor_of(&w, "c-control-plane-1");
    lose(&h, &victim);
    remove(&mut w, &victim);
    h.connector.clear();
    h.network.clear_log();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let log = h.network.log();
    let removed = position(&log, "remove c-control-plane-1 running=false");
    let added = position(&log, "add c-control-plane-3 running=false");
    let promoted = position(&log, "promote c-control-plane-3");
    assert!(removed < added && added < promoted, "{log:?}");
    assert_eq!(
        h.network.members(),
        [vec![
            "c-control-plane-0".to_string(),
            "c-control-plane-2".to_string(),
            "c-control-plane-3".to_string()
        ]]
    );
    // Out of the world; the replacement elsewhere; nothing asked of the lost hypervisor.
    let w = report.world;
    assert!(
        !w.components
            .contains_key(&ObjectKey::new("default", "c-control-plane-1"))
    );
    assert_eq!(hypervisor_of(&w, "c-control-plane-3"), "private-4");
    assert!(h.connector.runtimes[&victim].calls().is_empty());
    let events = h.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.contains(&format!(
            "left its pods and directories on removed hypervisor {victim}, which does not answer"
        ))),
        "{events:?}"
    );
    let (status, reason, _) = condition(&w, condition_types::HEALED).unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Replaced"));
    // Nothing holds the hypervisor any more: it can leave the world.
    let mut w = w;
    assert_eq!(oi_planner::forget_removed_hypervisors(&mut w), [victim]);
}

#[tokio::test]
async fn removing_two_of_three_is_refused_naming_the_members_and_nothing_is_removed() {
    let h = Harness::new();
    let report = h.run(world4(&[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    for replica in ["c-control-plane-0", "c-control-plane-1"] {
        let on = hypervisor_of(&w, replica);
        lose(&h, &on);
        remove(&mut w, &on);
    }
    h.network.clear_log();
    let report = h.run(w).await;
    let outcome = &report.clusters[&ObjectKey::new("default", "c")];
    assert!(!outcome.ready);
    assert_eq!(outcome.reason, Reason::EtcdNotReady);
    assert!(
        outcome.message.starts_with(
            "etcd member c-control-plane-0 is not removed: the 2 voting members that would stay \
             need 2 healthy and 0 are (not: c-control-plane-1 (etcd https://10.0.0.2:30001 \
             unreachable: connection refused), c-control-plane-2 (etcd reports it unhealthy))"
        ),
        "{}",
        outcome.message
    );
    assert!(
        outcome.message.contains(
            "start again from a survivor's data (`oi cluster recover --from-member NAME`)"
        ),
        "{}",
        outcome.message
    );
    // Nothing was removed: every member is still there, and so is every component.
    assert!(
        h.network.log().iter().all(|l| !l.starts_with("remove")),
        "{:?}",
        h.network.log()
    );
    assert_eq!(h.network.members()[0].len(), 3);
    for replica in ["c-control-plane-0", "c-control-plane-1"] {
        assert!(
            report
                .world
                .components
                .contains_key(&ObjectKey::new("default", replica))
        );
    }
}

#[tokio::test]
async fn a_member_no_component_owns_is_removed_before_the_replacement_joins() {
    let h = Harness::new();
    let report = h.run(world4(&[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    // Its machine died and someone cut its Component from the world (and cordoned the
    // machine): a replica of the same name is placed elsewhere.
    let cut = ObjectKey::new("default", "c-control-plane-2");
    let dead = hypervisor_of(&w, "c-control-plane-2");
    let old_peer = oi_planner::etcd_membership(&w, &ObjectKey::new("default", "c"))
        .members
        .into_iter()
        .find(|m| m.name == "c-control-plane-2")
        .unwrap()
        .peer_url;
    h.connector.runtimes[&dead].crash_all(137);
    w.components.remove(&cut);
    w.hypervisors
        .get_mut(&ObjectKey::cluster_scoped(dead.clone()))
        .unwrap()
        .spec
        .unschedulable = true;
    h.network.clear_log();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    assert_ne!(hypervisor_of(&report.world, "c-control-plane-2"), dead);
    let log = h.network.log();
    let removed = position(&log, "remove c-control-plane-2 running=false");
    let added = position(&log, "add c-control-plane-2 running=false");
    assert!(removed < added, "{log:?}");
    let events = h.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.ends_with(&format!(
            "removed etcd member c-control-plane-2 ({old_peer}): no component of the cluster owns it"
        ))),
        "{events:?}"
    );
    assert_eq!(h.network.members()[0].len(), 3);
}

#[tokio::test]
async fn an_orphan_member_that_cannot_go_without_breaking_quorum_is_named_and_stays() {
    let h = Harness::new();
    let report = h.run(world4(&[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    // Two members' machines died: one removed, the other's Component cut from the world.
    let removed = hypervisor_of(&w, "c-control-plane-1");
    lose(&h, &removed);
    remove(&mut w, &removed);
    let dead = hypervisor_of(&w, "c-control-plane-2");
    h.connector.runtimes[&dead].crash_all(137);
    w.components
        .remove(&ObjectKey::new("default", "c-control-plane-2"));
    w.hypervisors
        .get_mut(&ObjectKey::cluster_scoped(dead))
        .unwrap()
        .spec
        .unschedulable = true;
    let report = h.run(w).await;
    assert!(!report.all_ready());
    let events = h.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.contains(
            "is owned by no component of the cluster and stays: etcd member c-control-plane-2 is \
             not removed: the 2 voting members that would stay need 2 healthy and 0 are"
        )),
        "{events:?}"
    );
    assert!(h.network.log().iter().all(|l| !l.starts_with("remove")));
    let outcome = &report.clusters[&ObjectKey::new("default", "c")];
    assert!(
        outcome
            .message
            .starts_with("etcd member c-control-plane-1 is not removed"),
        "{}",
        outcome.message
    );
}

#[tokio::test]
async fn a_member_that_lost_its_data_joins_again_with_fresh_data_in_one_run() {
    let h = Harness::new();
    let report = h.run(world4(&[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let w = report.world.clone();
    let on = hypervisor_of(&w, "c-control-plane-1");
    let data = oi_api::runtime::paths::etcd_data_dir("default", "c", "c-control-plane-1");
    let rt = &h.connector.runtimes[&on];
    rt.lose_path(&data);
    rt.set_log(
        "etcd",
        "etcdmain: member 7a1b has already been bootstrapped\n",
    );
    assert!(rt.crash("default", "c-control-plane-1-etcd", "etcd", 1));
    h.network.clear_log();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let events = h.events.lock().unwrap().clone();
    let said = events
        .iter()
        .find(|e| e.contains("etcd member lost its data"))
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(
        said.contains(&format!(
            "its data directory {data} on {on} has no write-ahead log (member/wal); it exited \
             with code 1, its log ends: etcdmain: member 7a1b has already been bootstrapped"
        )),
        "{said}"
    );
    let log = h.network.log();
    let removed = position(&log, "remove c-control-plane-1 running=false");
    let added = position(&log, "add c-control-plane-1 running=false");
    let promoted = position(&log, "promote c-control-plane-1");
    assert!(removed < added && added < promoted, "{log:?}");
    // Its data directory was emptied before it started again.
    assert!(
        rt.calls()
            .contains(&Call::RemoveHostPaths(vec![data.clone()]))
    );
    // From now on it starts as the learner it joined as.
    let member = report.world.components[&ObjectKey::new("default", "c-control-plane-1")]
        .status
        .etcd_member
        .clone()
        .unwrap();
    assert_eq!(
        member.initial_cluster_state,
        EtcdInitialClusterState::Existing
    );
    assert_eq!(
        member.initial_cluster.keys().collect::<Vec<_>>(),
        [
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2"
        ]
    );
    // ... and the next run changes nothing.
    h.connector.clear();
    h.network.clear_log();
    let again = h.run(report.world.clone()).await;
    assert!(again.all_ready());
    assert_eq!(
        again.counts.mutating_calls,
        0,
        "{:?}",
        h.connector.all_calls()
    );
}

#[tokio::test]
async fn a_member_whose_etcd_exits_on_usable_data_fails_the_run_in_its_own_words() {
    let h = Harness::new();
    let report = h.run(world4(&[("c", 3)])).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let w = report.world.clone();
    let on = hypervisor_of(&w, "c-control-plane-1");
    let rt = &h.connector.runtimes[&on];
    // Its data is there, and it exits for a reason of its own: no repair, the reason said.
    rt.set_log(
        "etcd",
        "etcdmain: listen tcp 10.0.0.2:30001: bind: address already in use\n",
    );
    rt.exit_on_start("etcd", Some(1));
    assert!(rt.crash("default", "c-control-plane-1-etcd", "etcd", 1));
    h.network.clear_log();
    let report = h.run(w).await;
    let outcome = &report.clusters[&ObjectKey::new("default", "c")];
    assert!(!outcome.ready);
    assert_eq!(
        outcome.message,
        format!(
            "etcd member c-control-plane-1 on {on} exited with code 1; its log ends: etcdmain: \
             listen tcp 10.0.0.2:30001: bind: address already in use"
        )
    );
    let events = h.events.lock().unwrap().clone();
    assert!(
        events.iter().all(|e| !e.contains("lost its data")),
        "{events:?}"
    );
    assert!(h.network.log().iter().all(|l| !l.starts_with("remove")));
}

#[tokio::test]
async fn a_cluster_that_lost_two_of_three_is_recovered_from_the_survivor_and_grown_back() {
    let h = Harness::new();
    let mut w = world4(&[("c", 3)]);
    let five = hypervisor("private-5", false, "10.0.0.5");
    w.hypervisors.insert(five.key(), five);
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    let mut w = report.world.clone();
    for replica in ["c-control-plane-0", "c-control-plane-1"] {
        let on = hypervisor_of(&w, replica);
        lose(&h, &on);
        remove(&mut w, &on);
    }
    let key = ObjectKey::new("default", "c");
    // What is seen first: nobody healthy, the survivor answering with its data.
    let plan = oi_planner::plan(w.clone(), NOW, &PlanOptions::default());
    *h.network.source().0.lock().unwrap() = plan.world.clone();
    let seen = oi_engine::recover::observe_members(&plan, &key, &h.connector, &h.network)
        .await
        .unwrap();
    let names: Vec<&str> = seen.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2"
        ]
    );
    assert!(seen.iter().all(|m| m.healthy.as_ref().ok() != Some(&true)));
    let survivor = &seen[2];
    assert!(survivor.status.is_ok() && survivor.hypervisor_answers.is_ok());
    assert!(seen[0].hypervisor_answers.is_err() && seen[0].status.is_err());
    // The recovery.
    h.network.clear_log();
    h.connector.clear();
    let plan = oi_planner::recover::plan_recover(
        w,
        &key,
        "c-control-plane-2",
        NOW,
        &PlanOptions::default(),
    )
    .unwrap();
    *h.network.source().0.lock().unwrap() = plan.world.clone();
    let progress = |e: &Event| h.events.lock().unwrap().push(e.to_string());
    let executed = execute(&plan, &options(), &h.connector, &h.network, &progress).await;
    assert!(executed.all_ready(), "{:?}", executed.clusters);
    let log = h.network.log();
    let forced = position(&log, "force-new-cluster c-control-plane-2");
    let added = position(&log, "add c-control-plane-3 running=false");
    let again = position(&log, "add c-control-plane-4 running=false");
    assert!(forced < added && added < again, "{log:?}");
    assert_eq!(
        h.network.members(),
        [vec![
            "c-control-plane-2".to_string(),
            "c-control-plane-3".to_string(),
            "c-control-plane-4".to_string()
        ]]
    );
    let world = oi_planner::record(plan.world, &executed.clusters, NOW);
    let mut replicas: Vec<String> = world
        .components_of(&key)
        .filter(|c| c.spec.role == oi_api::ComponentRole::ControlPlane)
        .map(|c| c.metadata.name.clone())
        .collect();
    replicas.sort();
    assert_eq!(
        replicas,
        [
            "c-control-plane-2",
            "c-control-plane-3",
            "c-control-plane-4"
        ]
    );
    // The survivor runs as rendered (not forced) and the next run changes nothing.
    let rt = &h.connector.runtimes[&hypervisor_of(&world, "c-control-plane-2")];
    let spec = rt.running_pod_spec("c-control-plane-2-etcd").unwrap();
    assert!(
        spec.containers[0]
            .args
            .iter()
            .all(|a| a != "--force-new-cluster")
    );
    h.connector.clear();
    h.network.clear_log();
    let next = h.run(world).await;
    assert!(next.all_ready(), "{:?}", next.clusters);
    assert_eq!(
        next.counts.mutating_calls,
        0,
        "{:?}",
        h.connector.all_calls()
    );
}

#[tokio::test]
async fn a_two_minor_jump_hidden_by_an_edited_status_is_refused_from_what_runs() {
    let h = Harness::new();
    let key = ObjectKey::new("default", "c");
    let mut w = world(1, &[("c", 3)]);
    w.clusters.get_mut(&key).unwrap().spec.kubernetes_version = "1.35".into();
    let report = h.run(w).await;
    assert!(report.all_ready(), "{:?}", report.clusters);
    // `sed s/1.35.9/1.37.1/` over the world: spec and status alike.
    let mut w = report.world.clone();
    let c = w.clusters.get_mut(&key).unwrap();
    c.spec.kubernetes_version = "1.37.1".into();
    c.status.kubernetes_version = "1.37.1".into();
    h.connector.clear();
    let refused = h.run(w).await;
    let outcome = &refused.clusters[&key];
    assert!(!outcome.ready);
    assert_eq!(outcome.reason, Reason::VersionSkew);
    assert!(
        outcome.message.starts_with(
            "c-control-plane-0's kube-apiserver runs registry.k8s.io/kube-apiserver:v1.35.9 and \
             the plan would run registry.k8s.io/kube-apiserver:v1.37.1: 1.35 to 1.37 skips 1 \
             minor(s): one at a time; nothing was changed"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(
        refused.counts.mutating_calls,
        0,
        "{:?}",
        h.connector.all_calls()
    );
}
