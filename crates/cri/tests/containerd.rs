//! The CRI client and the runtime operations against a real containerd.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

#[path = "common/fixture.rs"]
mod fixture;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use fixture::{BUSYBOX, Fixture};

use oi_api::runtime::{ContainerSpec, HostFile, Mount, PodSpec, labels};
use oi_cri::{ContainerState, Error, HypervisorRuntime, Outcome, PodState};

fn sleeper(name: &str, arg: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        image: BUSYBOX.to_string(),
        command: vec!["sleep".into()],
        args: vec![arg.to_string()],
        env: BTreeMap::from([("OI_TEST".to_string(), "1".to_string())]),
        mounts: vec![],
        privileged: false,
        resources: None,
    }
}

fn pod(arg: &str) -> PodSpec {
    PodSpec {
        namespace: "default".into(),
        name: "c1-control-plane-0".into(),
        labels: BTreeMap::from([
            (labels::MANAGED.to_string(), "true".to_string()),
            (labels::CLUSTER.to_string(), "c1".to_string()),
        ]),
        containers: vec![sleeper("a", arg), sleeper("b", arg)],
    }
}

fn selector() -> BTreeMap<String, String> {
    BTreeMap::from([(labels::CLUSTER.to_string(), "c1".to_string())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_created_kept_and_replaced() {
    let Some(fx) = Fixture::start("pods_are_created_kept_and_replaced").await else {
        return;
    };
    let rt = &fx.client;
    assert_eq!(rt.ensure_pod(&pod("3600")).await.unwrap(), Outcome::Created);
    let pods = rt.list_pods(&selector()).await.unwrap();
    assert_eq!(pods.len(), 1, "{pods:?}");
    let first = &pods[0];
    assert_eq!(
        (first.namespace.as_str(), first.name.as_str()),
        ("default", "c1-control-plane-0")
    );
    assert_eq!(first.state, PodState::Ready);
    assert_eq!(first.spec_hash(), Some(pod("3600").content_hash().as_str()));
    let states: Vec<_> = first
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect();
    assert_eq!(
        states,
        [
            ("a", ContainerState::Running),
            ("b", ContainerState::Running)
        ]
    );

    // Same spec: not a single mutating call.
    let before = rt.mutating_calls();
    assert_eq!(
        rt.ensure_pod(&pod("3600")).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(
        rt.mutating_calls(),
        before,
        "unchanged pod must cost no mutating call"
    );

    // Changed spec: replaced.
    assert_eq!(
        rt.ensure_pod(&pod("3601")).await.unwrap(),
        Outcome::Replaced
    );
    let pods = rt.list_pods(&selector()).await.unwrap();
    assert_eq!(pods.len(), 1);
    assert_ne!(pods[0].id, first.id);
    assert!(pods[0].runs(&pod("3601")));
    // The replacement logs where its predecessor did: one log directory for the pod name,
    // the one the runtime names for its removal.
    let logs: Vec<String> = std::fs::read_dir(&fx.options.log_root)
        .unwrap()
        .map(|e| e.unwrap().path().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        logs,
        [rt.pod_log_directory("default", "c1-control-plane-0")],
        "{logs:?}"
    );

    // Other selectors do not see it; removal makes it go.
    let none = rt
        .list_pods(&BTreeMap::from([(
            labels::CLUSTER.to_string(),
            "other".to_string(),
        )]))
        .await
        .unwrap();
    assert!(none.is_empty());
    rt.remove_pod(&pods[0].id).await.unwrap();
    rt.remove_pod(&pods[0].id).await.unwrap();
    assert!(rt.list_pods(&selector()).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_container_gets_its_pod_replaced() {
    let Some(fx) = Fixture::start("a_crashed_container_gets_its_pod_replaced").await else {
        return;
    };
    let rt = &fx.client;
    let mut spec = pod("3600");
    spec.containers[1].command = vec!["sh".into(), "-c".into(), "exit 7".into()];
    spec.containers[1].args = vec![];
    assert_eq!(rt.ensure_pod(&spec).await.unwrap(), Outcome::Created);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pods = rt.list_pods(&selector()).await.unwrap();
        let b = pods[0]
            .containers
            .iter()
            .find(|c| c.name == "b")
            .unwrap()
            .clone();
        if b.state == ContainerState::Exited {
            assert_eq!(b.exit_code, Some(7));
            break;
        }
        assert!(Instant::now() < deadline, "container b never exited: {b:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rt.ensure_pod(&spec).await.unwrap(), Outcome::Replaced);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_to_completion_returns_exit_codes_and_cleans_up() {
    let Some(fx) = Fixture::start("run_to_completion_returns_exit_codes_and_cleans_up").await
    else {
        return;
    };
    let rt = &fx.client;
    let mut job = sleeper("job", "0");
    job.command = vec!["sh".into(), "-c".into(), "echo all good".into()];
    job.args = vec![];
    let exit = rt
        .run_to_completion(&job, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!((exit.code, exit.log_tail.as_str()), (0, ""));

    job.command = vec![
        "sh".into(),
        "-c".into(),
        "echo out; echo it broke >&2; exit 3".into(),
    ];
    let exit = rt
        .run_to_completion(&job, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(exit.code, 3);
    // stdout and stderr interleave in either order.
    let mut lines: Vec<&str> = exit.log_tail.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["it broke", "out"], "{exit:?}");

    job.command = vec!["sleep".into(), "30".into()];
    let started = Instant::now();
    let err = rt
        .run_to_completion(&job, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::RunTimeout { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    // Nothing is left behind: no pods, no log directories.
    assert!(rt.list_pods(&BTreeMap::new()).await.unwrap().is_empty());
    let logs: Vec<_> = std::fs::read_dir(&fx.options.log_root)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(logs.is_empty(), "log directories left: {logs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_land_with_content_and_mode_and_unchanged_ones_are_skipped() {
    let Some(fx) =
        Fixture::start("files_land_with_content_and_mode_and_unchanged_ones_are_skipped").await
    else {
        return;
    };
    let rt = &fx.client;
    let base = fx.dir.path().join("host/etc/oneinfra");
    let path = |name: &str| base.join(name).to_string_lossy().into_owned();
    let key = HostFile {
        path: path("c1/ca.key"),
        content: b"-----BEGIN PRIVATE KEY-----\nnot really\n".to_vec(),
        mode: 0o600,
    };
    let conf = HostFile {
        path: path("c1/deep/er/haproxy.cfg"),
        content: (0..=255u8).cycle().take(300 * 1024).collect(),
        mode: 0o644,
    };
    let known = rt
        .write_files(&[key.clone(), conf.clone()], &BTreeMap::new())
        .await
        .unwrap();
    for f in [&key, &conf] {
        assert_eq!(std::fs::read(&f.path).unwrap(), f.content, "{}", f.path);
        let mode = std::fs::metadata(&f.path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, f.mode, "{}", f.path);
        assert_eq!(known[&f.path], f.content_hash());
    }

    let before = rt.mutating_calls();
    let again = rt
        .write_files(&[key.clone(), conf.clone()], &known)
        .await
        .unwrap();
    assert_eq!(again, known);
    assert_eq!(
        rt.mutating_calls(),
        before,
        "unchanged files must cost no CRI call"
    );

    // Only the changed file is rewritten; a file edited behind our back but "known" stays.
    std::fs::write(&conf.path, b"edited").unwrap();
    let key2 = HostFile {
        content: b"new key".to_vec(),
        ..key.clone()
    };
    rt.write_files(&[key2.clone(), conf.clone()], &known)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&key.path).unwrap(), b"new key");
    assert_eq!(std::fs::read(&conf.path).unwrap(), b"edited");

    // Removal, and what is refused.
    rt.remove_host_paths(&[path("c1")]).await.unwrap();
    assert!(!base.join("c1").exists());
    assert!(base.exists());
    for bad in ["/", "relative/path", "/etc/../"] {
        let err = rt.remove_host_paths(&[bad.to_string()]).await.unwrap_err();
        assert!(matches!(err, Error::InvalidHostPath { .. }), "{bad}: {err}");
    }

    // A writer that fails says why (its log, read after it exited) and leaves nothing.
    std::fs::write(base.join("plain"), b"a file, not a directory").unwrap();
    let under_a_file = HostFile {
        path: path("plain/x.conf"),
        content: b"x".to_vec(),
        mode: 0o644,
    };
    let err = rt
        .write_files(&[under_a_file], &BTreeMap::new())
        .await
        .unwrap_err();
    let Error::HelperFailed { job, log_tail, .. } = &err else {
        panic!("not a helper failure: {err}");
    };
    assert_eq!(*job, "file writer");
    assert!(
        log_tail.contains("plain"),
        "the log tail says why: {log_tail:?}"
    );

    // Nothing is left behind: no pods, and no log directories (a writer or remover that
    // succeeded removed its own, a failed one's was read and removed).
    assert!(rt.list_pods(&BTreeMap::new()).await.unwrap().is_empty());
    let logs: Vec<_> = std::fs::read_dir(&fx.options.log_root)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(logs.is_empty(), "log directories left: {logs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_mount_host_paths() {
    let Some(fx) = Fixture::start("pods_mount_host_paths").await else {
        return;
    };
    let rt = &fx.client;
    let shared = fx.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let mut job = sleeper("writer", "0");
    job.command = vec![
        "sh".into(),
        "-c".into(),
        "echo \"$GREETING\" > /data/out".into(),
    ];
    job.args = vec![];
    job.env = BTreeMap::from([("GREETING".to_string(), "hello from a pod".to_string())]);
    job.mounts = vec![Mount {
        host_path: shared.to_string_lossy().into_owned(),
        container_path: "/data".into(),
        readonly: false,
    }];
    let exit = rt
        .run_to_completion(&job, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(exit.code, 0, "{exit:?}");
    assert_eq!(
        std::fs::read_to_string(shared.join("out")).unwrap(),
        "hello from a pod\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_is_a_clear_error() {
    let Some(fx) = Fixture::start("a_missing_image_is_a_clear_error").await else {
        return;
    };
    let mut spec = pod("3600");
    spec.containers[0].image = "localhost/oneinfra/nope:1.0".into();
    let err = fx.client.ensure_pod(&spec).await.unwrap_err();
    assert!(matches!(err, Error::ImageUnavailable { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("localhost/oneinfra/nope:1.0")
            && text.contains("a_missing_image_is_a_clear_error"),
        "{text}"
    );
    assert!(
        fx.client
            .list_pods(&BTreeMap::new())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_survive_a_containerd_restart_and_the_client_reconnects() {
    let Some(mut fx) =
        Fixture::start("pods_survive_a_containerd_restart_and_the_client_reconnects").await
    else {
        return;
    };
    assert_eq!(
        fx.client.ensure_pod(&pod("3600")).await.unwrap(),
        Outcome::Created
    );
    let old_pid = fx.containerd.kill();
    assert!(!fx.containerd.is_running());
    let err = fx.client.version().await.unwrap_err();
    assert!(
        matches!(err, Error::Connect { .. } | Error::Call { .. }),
        "{err}"
    );
    let new_pid = fx.containerd.restart().await.unwrap();
    assert_ne!(old_pid, new_pid);
    // The same client: reconnects lazily; the pod kept running, so nothing is changed.
    let before = fx.client.mutating_calls();
    assert_eq!(
        fx.client.ensure_pod(&pod("3600")).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(fx.client.mutating_calls(), before);
    let pods = fx.client.list_pods(&selector()).await.unwrap();
    assert!(pods[0].runs(&pod("3600")), "{pods:?}");

    // A second crash with no call while it was down: the first call after the restart is a
    // mutating one (not retried by the client), and it still works.
    let new_pid = fx.containerd.restart().await.unwrap();
    fx.client.remove_pod("no-such-sandbox").await.unwrap();
    fx.client.ensure_pod(&pod("3601")).await.unwrap();

    // stop() removes the pods first, then the daemon.
    let Fixture {
        containerd, dir, ..
    } = fx;
    let report = containerd.stop().await.unwrap();
    assert_eq!((report.pid, report.pods_removed), (new_pid, 1));
    drop(dir);
}

/// Whether any process runs with `needle` among its arguments.
fn process_with_arg(needle: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|cmdline| {
            cmdline
                .split(|b| *b == 0)
                .any(|arg| arg == needle.as_bytes())
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_test_still_stops_its_pods_and_containerd() {
    let test = "a_panicking_test_still_stops_its_pods_and_containerd";
    if fixture::prerequisites(test).is_none() {
        return;
    }
    let marker = format!("{}", 90_000 + std::process::id() % 9_000);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = {
        let marker = marker.clone();
        tokio::spawn(async move {
            let fx = Fixture::start(test).await.unwrap();
            let mut spec = pod("3600");
            spec.containers[0].args = vec![marker.clone()];
            fx.client.ensure_pod(&spec).await.unwrap();
            assert!(process_with_arg(&marker), "the pod's process should run");
            tx.send(fx.containerd.pid()).unwrap();
            panic!("deliberate panic with a running pod");
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    let pid = rx.await.unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "containerd {pid} still runs"
    );
    assert!(!process_with_arg(&marker), "the pod's container still runs");
}

/// A `StartContainer` left in flight by a killed client keeps its container "starting" in
/// containerd, which then refuses to remove it. Removing the pod waits for the start to finish
/// instead of failing (a rerun after a killed `oi reconcile` replaces such pods).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_pod_waits_for_a_container_still_starting() {
    let test = "removing_a_pod_waits_for_a_container_still_starting";
    let Some(fx) = Fixture::start(test).await else {
        return;
    };
    let rt = fx.client.clone();
    let spec = PodSpec {
        containers: vec![sleeper("a", "3600")],
        ..pod("3600")
    };
    let config = oi_cri::requests::sandbox_config(&spec, &fx.options.log_root);
    let sandbox = rt.run_sandbox(&config).await.unwrap();
    let request =
        oi_cri::requests::create_container_request(&sandbox, &spec.containers[0], &config);
    let container = rt.create_container(&request).await.unwrap();
    // containerd opens the container's log when it starts it: a FIFO there with no reader
    // blocks the start, holding the container in its starting state until a reader comes.
    std::fs::create_dir_all(&config.log_directory).unwrap();
    let log = std::path::Path::new(&config.log_directory).join("a.log");
    let made = std::process::Command::new("mkfifo")
        .arg(&log)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", log.display());
    // The client asking for the start goes away, as a killed `oi reconcile` does.
    let start = tokio::spawn({
        let rt = rt.clone();
        let container = container.clone();
        async move { rt.start_container(&container).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !start.is_finished(),
        "the start was not held by the log FIFO"
    );
    start.abort();

    // The start goes on once a reader opens the FIFO, 2 s from now.
    let unblocked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = std::thread::spawn({
        let unblocked = unblocked.clone();
        let log = log.clone();
        move || {
            std::thread::sleep(Duration::from_secs(2));
            unblocked.store(true, std::sync::atomic::Ordering::SeqCst);
            // Drains what the container writes until containerd closes its end.
            let mut fifo = std::fs::File::open(&log).unwrap();
            std::io::copy(&mut fifo, &mut std::io::sink()).unwrap();
        }
    });
    let removed = rt.stop_and_remove_sandbox(&sandbox).await;
    let done_after_unblock = unblocked.load(std::sync::atomic::Ordering::SeqCst);
    removed.unwrap();
    assert!(
        done_after_unblock,
        "{test}: the removal finished before the start could: it was never refused"
    );
    let left = rt.list_sandboxes(None).await.unwrap();
    assert!(left.is_empty(), "{test}: sandboxes left: {left:?}");
    reader.join().unwrap();
}
