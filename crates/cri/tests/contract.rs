//! One contract, two runtimes: what the engine relies on from [`HypervisorRuntime`], checked
//! against the recording fake (always) and against a real containerd (root, containerd and
//! the offline images; see `oi_testsupport`). A fake that passes it behaves, for the engine,
//! as the real thing does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

#[path = "common/fixture.rs"]
mod fixture;

use std::collections::BTreeMap;

use fixture::{BUSYBOX, Fixture};
use oi_api::runtime::{ContainerSpec, HostFile, PodSpec, labels};
use oi_cri::fake::FakeRuntime;
use oi_cri::{Error, HypervisorRuntime, Outcome};

/// An image neither runtime has nor can pull (no registry is reachable).
const MISSING_IMAGE: &str = "localhost/oneinfra/nope:1.0";

fn pod(name: &str, arg: &str) -> PodSpec {
    let sleeper = |container: &str| ContainerSpec {
        name: container.to_string(),
        image: BUSYBOX.to_string(),
        command: vec!["sleep".into()],
        args: vec![arg.to_string()],
        env: BTreeMap::new(),
        mounts: vec![],
        privileged: false,
        resources: None,
    };
    PodSpec {
        namespace: "default".into(),
        name: name.into(),
        labels: BTreeMap::from([
            (labels::MANAGED.to_string(), "true".to_string()),
            (labels::CLUSTER.to_string(), "c1".to_string()),
            (labels::COMPONENT.to_string(), name.to_string()),
        ]),
        containers: vec![sleeper("a"), sleeper("b")],
    }
}

fn cluster(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(labels::CLUSTER.to_string(), name.to_string())])
}

/// Created, kept without a mutating call, replaced when the spec changes; listed by
/// selector, sorted; removed, and removed again without an error.
async fn pods_are_created_kept_replaced_listed_and_removed<R: HypervisorRuntime>(rt: &R) {
    assert_eq!(
        rt.ensure_pod(&pod("p2", "3600")).await.unwrap(),
        Outcome::Created
    );
    assert_eq!(
        rt.ensure_pod(&pod("p1", "3600")).await.unwrap(),
        Outcome::Created
    );
    let before = rt.mutating_calls();
    assert_eq!(
        rt.ensure_pod(&pod("p1", "3600")).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(
        rt.mutating_calls(),
        before,
        "an unchanged pod costs no mutating call"
    );
    assert_eq!(
        rt.ensure_pod(&pod("p1", "3601")).await.unwrap(),
        Outcome::Replaced
    );
    assert!(rt.mutating_calls() > before);

    let listed = rt.list_pods(&cluster("c1")).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["p1", "p2"], "sorted by namespace and name");
    assert!(listed[0].runs(&pod("p1", "3601")));
    assert!(!listed[0].runs(&pod("p1", "3600")));
    assert!(rt.list_pods(&cluster("other")).await.unwrap().is_empty());
    let one = BTreeMap::from([(labels::COMPONENT.to_string(), "p2".to_string())]);
    assert_eq!(rt.list_pods(&one).await.unwrap().len(), 1);

    for pod in &listed {
        rt.remove_pod(&pod.id).await.unwrap();
        rt.remove_pod(&pod.id).await.unwrap();
    }
    assert!(rt.list_pods(&cluster("c1")).await.unwrap().is_empty());
}

/// A pod whose image cannot be had is a clear error naming the image and the hypervisor, and
/// the pod running before is left as it was.
async fn a_missing_image_fails_clearly_and_keeps_the_running_pod<R: HypervisorRuntime>(rt: &R) {
    rt.ensure_pod(&pod("p", "3600")).await.unwrap();
    let mut next = pod("p", "3600");
    next.containers[0].image = MISSING_IMAGE.into();
    let err = rt.ensure_pod(&next).await.unwrap_err();
    assert!(matches!(err, Error::ImageUnavailable { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(MISSING_IMAGE) && text.contains(rt.hypervisor()),
        "{text}"
    );
    let pods = rt.list_pods(&cluster("c1")).await.unwrap();
    assert_eq!(pods.len(), 1);
    assert!(pods[0].runs(&pod("p", "3600")));
    rt.remove_pod(&pods[0].id).await.unwrap();
}

/// Files are written when their hash is not known, skipped (no mutating call) when it is;
/// the returned hashes are those of every file; paths are removed; the root directory and
/// relative paths are refused.
async fn files_are_written_when_changed_and_paths_removed<R: HypervisorRuntime>(
    rt: &R,
    base: &str,
) {
    let file = |name: &str, content: &[u8]| HostFile {
        path: format!("{base}/c1/{name}"),
        content: content.to_vec(),
        mode: 0o600,
    };
    let (a, b) = (file("a.key", b"a"), file("deep/b.cfg", b"b"));
    let known = rt
        .write_files(&[a.clone(), b.clone()], &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(
        known,
        BTreeMap::from([
            (a.path.clone(), a.content_hash()),
            (b.path.clone(), b.content_hash())
        ])
    );
    let before = rt.mutating_calls();
    assert_eq!(
        rt.write_files(&[a.clone(), b.clone()], &known)
            .await
            .unwrap(),
        known
    );
    assert_eq!(rt.mutating_calls(), before, "unchanged files cost no call");
    let a2 = file("a.key", b"changed");
    let again = rt
        .write_files(&[a2.clone(), b.clone()], &known)
        .await
        .unwrap();
    assert_eq!(again[&a2.path], a2.content_hash());
    assert!(rt.mutating_calls() > before);

    rt.remove_host_paths(&[format!("{base}/c1")]).await.unwrap();
    for bad in ["/", "relative/path", "/etc/../"] {
        let err = rt.remove_host_paths(&[bad.to_string()]).await.unwrap_err();
        assert!(matches!(err, Error::InvalidHostPath { .. }), "{bad}: {err}");
    }
    assert!(
        rt.list_pods(&BTreeMap::new())
            .await
            .unwrap()
            .iter()
            .all(|p| !p.labels.contains_key(oi_cri::requests::RUN_LABEL)),
        "no throwaway pod is left"
    );
}

async fn contract<R: HypervisorRuntime>(rt: &R, base: &str) {
    pods_are_created_kept_replaced_listed_and_removed(rt).await;
    a_missing_image_fails_clearly_and_keeps_the_running_pod(rt).await;
    files_are_written_when_changed_and_paths_removed(rt, base).await;
}

#[tokio::test]
async fn the_fake_runtime_meets_the_contract() {
    let rt = FakeRuntime::new("fake-hypervisor");
    rt.unpullable(MISSING_IMAGE);
    contract(&rt, "/etc/oneinfra").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_meets_the_contract() {
    let Some(fx) = Fixture::start("containerd_meets_the_contract").await else {
        return;
    };
    let base = fx.dir.path().join("host/etc/oneinfra");
    contract(&fx.client, &base.to_string_lossy()).await;
    assert!(!base.join("c1").exists(), "removed on the host too");
}
