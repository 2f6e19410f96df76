use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn dynamic(
    kind: Kind,
    namespace: Option<&str>,
    name: &str,
    data: serde_json::Value,
) -> DynamicObject {
    let mut object = DynamicObject::new(name, &api_resource(kind)).data(data);
    object.metadata.namespace = namespace.map(str::to_string);
    object
}

#[test]
fn keys_and_cluster_groups() {
    let cluster = dynamic(Kind::Cluster, Some("team"), "c1", json!({"spec": {}}));
    assert_eq!(object_key(&cluster), ObjectKey::new("team", "c1"));
    assert_eq!(
        cluster_group(ControllerKind::Cluster, &cluster),
        Some(ObjectKey::new("team", "c1"))
    );

    let component = dynamic(
        Kind::Component,
        Some("team"),
        "c1-etcd-0",
        json!({"spec": {"cluster": "c1", "role": "control-plane"}}),
    );
    assert_eq!(object_key(&component), ObjectKey::new("team", "c1-etcd-0"));
    assert_eq!(
        cluster_group(ControllerKind::Component, &component),
        Some(ObjectKey::new("team", "c1"))
    );
    // A component without a cluster is its own group.
    let lonely = dynamic(Kind::Component, Some("team"), "x", json!({"spec": {}}));
    assert_eq!(
        cluster_group(ControllerKind::Component, &lonely),
        Some(ObjectKey::new("team", "x"))
    );

    let hypervisor = dynamic(Kind::Hypervisor, None, "h1", json!({"spec": {}}));
    assert_eq!(object_key(&hypervisor), ObjectKey::cluster_scoped("h1"));
    assert_eq!(cluster_group(ControllerKind::Hypervisor, &hypervisor), None);
}

#[test]
fn actions_convert() {
    assert_eq!(
        kube_action(Action::Requeue(Duration::from_secs(7))),
        kube_controller::Action::requeue(Duration::from_secs(7))
    );
    assert_eq!(
        kube_action(Action::AwaitChange),
        kube_controller::Action::await_change()
    );
}

fn component_object(
    namespace: &str,
    name: &str,
    cluster: &str,
    hypervisor: &str,
) -> Arc<DynamicObject> {
    Arc::new(dynamic(
        Kind::Component,
        Some(namespace),
        name,
        json!({"spec": {"cluster": cluster, "role": "control-plane", "hypervisor": hypervisor}}),
    ))
}

#[test]
fn a_hypervisor_maps_to_the_clusters_placed_on_it() {
    let cached = vec![
        component_object("a", "c1-0", "c1", "h1"),
        component_object("a", "c1-1", "c1", "h2"),
        component_object("b", "c2-0", "c2", "h1"),
        component_object("b", "c3-0", "c3", "h3"),
    ];
    let resource = api_resource(Kind::Cluster);
    let refs = clusters_on_hypervisor(&cached, "h1", &resource);
    assert_eq!(
        refs,
        vec![
            ObjectRef::new_with("c1", resource.clone()).within("a"),
            ObjectRef::new_with("c2", resource.clone()).within("b"),
        ]
    );
    assert_eq!(
        clusters_on_hypervisor(&cached, "h2", &resource),
        vec![ObjectRef::new_with("c1", resource.clone()).within("a")]
    );
    assert_eq!(clusters_on_hypervisor(&cached, "h9", &resource), vec![]);
}

#[tokio::test]
async fn one_reconcile_per_cluster_at_a_time() {
    let groups = Arc::new(Groups::default());
    let c1 = ObjectKey::new("a", "c1");
    let c2 = ObjectKey::new("a", "c2");
    let first = groups.lock(&c1).await;
    // Another cluster is not held up.
    let other = tokio::time::timeout(Duration::from_secs(1), groups.lock(&c2))
        .await
        .unwrap();
    groups.release(&c2, other);
    // The same cluster waits until the first is released.
    let waiter = tokio::spawn({
        let groups = Arc::clone(&groups);
        let c1 = c1.clone();
        async move {
            let guard = groups.lock(&c1).await;
            groups.release(&c1, guard);
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    groups.release(&c1, first);
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .unwrap()
        .unwrap();
    // Nobody holds or waits: nothing is kept.
    assert!(groups.0.lock().unwrap().is_empty());
}

#[test]
fn only_hypervisor_changes_that_concern_clusters_pass() {
    let spec = |high: u16| {
        json!({"spec": {"localCRIEndpoint": {"criEndpointPath": "/run/h1.sock"},
            "public": false, "ipAddress": "10.0.0.1",
            "portRange": {"low": 30000, "high": high}}})
    };
    let h = |data: serde_json::Value| dynamic(Kind::Hypervisor, None, "h1", data);
    let with_status = |mut data: serde_json::Value, port: u16| {
        data["status"] = json!({"allocatedPorts": [
            {"cluster": "c1", "component": "c1-ingress-apiserver", "port": port}]});
        data
    };
    let mut filter = HypervisorChanges::default();
    let mut pass = |event| {
        filter
            .pass(Ok(event))
            .and_then(|r| r.unwrap().metadata.name)
    };
    let h1 = || Some("h1".to_string());
    assert_eq!(pass(watcher::Event::Init), None);
    assert_eq!(
        pass(watcher::Event::InitApply(h(spec(30010)))),
        h1(),
        "first seen"
    );
    assert_eq!(pass(watcher::Event::InitDone), None);
    // Status only (a cluster's reconcile wrote its ports): nobody woken.
    assert_eq!(
        pass(watcher::Event::Apply(h(with_status(spec(30010), 30001)))),
        None
    );
    // A relist that finds it as it was: nobody woken.
    assert_eq!(pass(watcher::Event::InitApply(h(spec(30010)))), None);
    // Its spec or labels changed: its clusters are.
    assert_eq!(
        pass(watcher::Event::Apply(h(spec(30020)))),
        h1(),
        "port range"
    );
    let mut labelled = h(spec(30020));
    labelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert("topology.kubernetes.io/zone".into(), "z1".into());
    assert_eq!(pass(watcher::Event::Apply(labelled)), h1(), "zone");
    // Gone: its clusters are, and it is forgotten.
    assert_eq!(
        pass(watcher::Event::Delete(h(spec(30020)))),
        h1(),
        "deleted"
    );
    assert_eq!(pass(watcher::Event::Apply(h(spec(30020)))), h1(), "back");
}
