use super::*;
use oi_api::runtime::ContainerSpec;

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
            resources: None,
        }],
    }
}

// What the fake shares with the real runtime is checked by the contract suite
// (tests/contract.rs); here, what only the fake does.

#[tokio::test]
async fn a_crashed_container_makes_its_pod_replaced_and_calls_are_recorded() {
    let rt = FakeRuntime::new("hv1").with_images(["localhost/oneinfra/etcd:3.6.4-0"]);
    assert_eq!(rt.ensure_pod(&pod("a")).await.unwrap(), Outcome::Created);
    assert!(rt.crash("default", "c1-etcd", "etcd", 1));
    assert!(!rt.crash("default", "c1-etcd", "nope", 1));
    let pods = rt.list_pods(&BTreeMap::new()).await.unwrap();
    assert!(!pods[0].runs(&pod("a")));
    assert_eq!(rt.ensure_pod(&pod("a")).await.unwrap(), Outcome::Replaced);
    assert_eq!(
        rt.calls(),
        [
            Call::CreatePod {
                namespace: "default".into(),
                name: "c1-etcd".into(),
                spec_hash: pod("a").content_hash(),
            },
            Call::RemovePod {
                namespace: "default".into(),
                name: "c1-etcd".into()
            },
            Call::CreatePod {
                namespace: "default".into(),
                name: "c1-etcd".into(),
                spec_hash: pod("a").content_hash(),
            },
        ]
    );
}
