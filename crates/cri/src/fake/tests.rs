use super::*;

fn pod(arg: &str) -> PodSpec {
    PodSpec {
        namespace: "default".into(),
        name: "c1-etcd".into(),
        labels: BTreeMap::from([(labels::CLUSTER.to_string(), "c1".to_string())]),
        containers: vec![ContainerSpec {
            name: "etcd".into(),
            image: "localhost/oneinfra/etcd:3.6.4-0".into(),
            command: vec![],
            args: vec![arg.to_string()],
            env: BTreeMap::new(),
            mounts: vec![],
            privileged: false,
        }],
    }
}

#[tokio::test]
async fn ensure_pod_is_idempotent_and_replaces_on_change_or_crash() {
    let rt = FakeRuntime::new("hv1").with_images(["localhost/oneinfra/etcd:3.6.4-0"]);
    assert_eq!(rt.ensure_pod(&pod("a")).await.unwrap(), Outcome::Created);
    assert_eq!(rt.mutating_calls(), 1);
    assert_eq!(rt.ensure_pod(&pod("a")).await.unwrap(), Outcome::Unchanged);
    assert_eq!(rt.mutating_calls(), 1, "unchanged spec: no call");
    assert_eq!(rt.ensure_pod(&pod("b")).await.unwrap(), Outcome::Replaced);
    assert!(rt.crash("default", "c1-etcd", "etcd", 1));
    assert_eq!(rt.ensure_pod(&pod("b")).await.unwrap(), Outcome::Replaced);
    let pods = rt
        .list_pods(&BTreeMap::from([(
            labels::CLUSTER.to_string(),
            "c1".to_string(),
        )]))
        .await
        .unwrap();
    assert_eq!(pods.len(), 1);
    assert!(pods[0].runs(&pod("b")));
    assert!(
        rt.list_pods(&BTreeMap::from([("x".into(), "y".into())]))
            .await
            .unwrap()
            .is_empty()
    );
    rt.remove_pod(&pods[0].id).await.unwrap();
    assert!(rt.list_pods(&BTreeMap::new()).await.unwrap().is_empty());
    assert_eq!(
        rt.calls().last(),
        Some(&Call::RemovePod {
            namespace: "default".into(),
            name: "c1-etcd".into()
        })
    );
}

#[tokio::test]
async fn missing_image_names_image_and_hypervisor_and_keeps_the_old_pod() {
    let rt = FakeRuntime::new("hv1").with_images(["localhost/oneinfra/etcd:3.6.4-0"]);
    rt.ensure_pod(&pod("a")).await.unwrap();
    let mut next = pod("a");
    next.containers[0].image = "localhost/oneinfra/etcd:9".into();
    rt.unpullable("localhost/oneinfra/etcd:9");
    let err = rt.ensure_pod(&next).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("localhost/oneinfra/etcd:9") && text.contains("hv1"),
        "{text}"
    );
    assert!(rt.list_pods(&BTreeMap::new()).await.unwrap()[0].runs(&pod("a")));
}

#[tokio::test]
async fn files_are_written_only_when_changed() {
    let rt = FakeRuntime::new("hv1");
    let a = HostFile {
        path: "/etc/oneinfra/a".into(),
        content: b"a".to_vec(),
        mode: 0o600,
    };
    let known = rt
        .write_files(std::slice::from_ref(&a), &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(known.get("/etc/oneinfra/a"), Some(&a.content_hash()));
    assert_eq!(rt.mutating_calls(), 1);
    let again = rt
        .write_files(std::slice::from_ref(&a), &known)
        .await
        .unwrap();
    assert_eq!(again, known);
    assert_eq!(rt.mutating_calls(), 1, "unchanged file: no call");
    assert_eq!(rt.files()["/etc/oneinfra/a"].content, b"a");
    rt.remove_host_paths(&["/etc/oneinfra".into()])
        .await
        .unwrap();
    assert!(rt.files().is_empty());
    let err = rt.remove_host_paths(&["/".into()]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidHostPath { .. }), "{err}");
}

#[tokio::test]
async fn run_reports_the_configured_exit_code() {
    let rt = FakeRuntime::new("hv1");
    rt.set_exit_code("job", 3);
    let c = ContainerSpec {
        name: "job".into(),
        ..pod("a").containers[0].clone()
    };
    assert_eq!(
        rt.run_to_completion(&c, Duration::from_secs(1))
            .await
            .unwrap()
            .code,
        3
    );
}
