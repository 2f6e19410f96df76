//! containerd started inside a network namespace and a private mount namespace, as the local
//! hypervisor set runs several hypervisors on one machine.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

#[path = "common/fixture.rs"]
mod fixture;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use fixture::{BUSYBOX, PAUSE};
use oi_api::runtime::{ContainerSpec, HostFile};
use oi_cri::containerd::{BindMount, Containerd, ContainerdConfig, SpawnOptions};
use oi_cri::{ClientOptions, CriClient, HypervisorRuntime};

/// A network namespace created for the test and deleted on drop.
struct Netns(String);

impl Netns {
    fn create(name: &str) -> Netns {
        let out = Command::new("ip")
            .args(["netns", "add", name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Netns(name.to_string())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_in_its_own_network_and_mount_namespaces() {
    let test = "containerd_in_its_own_network_and_mount_namespaces";
    let Some(images) = fixture::prerequisites(test) else {
        return;
    };
    if !oi_testsupport::require_root_and_commands(test, &["ip", "nsenter", "unshare", "mount"]) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("oi-cri-ns-")
        .tempdir()
        .unwrap();
    // Declared after `dir` and the netns so that it drops (stopping containerd) first.
    let netns = Netns::create(&format!("oi-cri-{}", std::process::id()));
    let private = dir.path().join("hv1-data");
    let view = dir.path().join("view");
    let options = SpawnOptions {
        netns: Some(netns.0.clone()),
        bind_mounts: vec![BindMount {
            source: private.clone(),
            target: view.clone(),
        }],
        ..SpawnOptions::in_dir(dir.path())
    };
    let containerd = Containerd::spawn(ContainerdConfig::in_dir(dir.path(), PAUSE), options)
        .await
        .unwrap();
    containerd.import_images(&images).await.unwrap();
    let client = CriClient::connect(
        "hv-ns",
        containerd.endpoint(),
        ClientOptions {
            toolbox_image: BUSYBOX.into(),
            log_root: dir.path().join("logs").to_string_lossy().into_owned(),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();

    // A file written at the bind-mount target lands in the private source directory, and
    // the target seen from the host stays empty.
    let file = HostFile {
        path: view.join("etc/config").to_string_lossy().into_owned(),
        content: b"per hypervisor".to_vec(),
        mode: 0o640,
    };
    client.write_files(&[file], &BTreeMap::new()).await.unwrap();
    assert_eq!(
        std::fs::read(private.join("etc/config")).unwrap(),
        b"per hypervisor"
    );
    assert!(
        !view.join("etc").exists(),
        "the bind mount leaked to the host"
    );

    // A host-network pod sees the namespace's interfaces (only lo), not the host's.
    let probe = ContainerSpec {
        name: "probe".into(),
        image: BUSYBOX.into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "n=$(tail -n +3 /proc/net/dev | wc -l); [ \"$n\" -eq 1 ] || { cat /proc/net/dev; exit 1; }"
                .into(),
        ],
        args: vec![],
        env: BTreeMap::new(),
        mounts: vec![],
        privileged: false,
        resources: None,
    };
    let exit = client
        .run_to_completion(&probe, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(exit.code, 0, "{exit:?}");

    let report = containerd.stop().await.unwrap();
    assert_eq!(report.pods_removed, 0);
    assert!(!report.killed, "containerd should stop on SIGTERM");
    drop(netns);
}
