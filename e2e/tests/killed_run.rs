//! Scenario: a run killed at any point, then rerun, converges with nothing leaked.
//!
//! `oi reconcile -f world.yaml -o world.yaml` is SIGKILLed while a file writer pod runs (it is
//! left behind), or right after a chosen progress line (the first etcd pod of a new cluster
//! created, its founders short of a quorum; an etcd learner added while scaling 1 → 3; a
//! control plane pod created): world.yaml stays untouched (atomic output). Rerunning on the
//! same world.yaml converges
//! (at most 2 runs): ReconcileSucceeded True, exactly 3 started voting etcd members and no
//! stray one, `kubectl version` through the ingress, exactly the cluster's pods on each
//! hypervisor (no leftover throwaway file writer), and a final reconcile mutates nothing.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use oi_e2e::{
    Etcdctl, IMAGE_REPOSITORY, LocalSet, World, admin_kubeconfig, binary, cluster_version,
    eventually, inject_cluster, prerequisites, reconcile, server_git_version,
};

/// `oi reconcile ... -f world -o world` with a 120 s wait.
fn reconcile_file(world: &Path) -> Command {
    let mut command = Command::new(binary("oi").unwrap());
    command
        .args(["reconcile", "--image-repository", IMAGE_REPOSITORY])
        .args(["--max-wait", "120s", "-f"])
        .arg(world)
        .arg("-o")
        .arg(world)
        .env("OI_IMAGE_REPOSITORY", IMAGE_REPOSITORY);
    command
}

/// Runs `oi reconcile` on `world` and SIGKILLs it as soon as `kill_now` holds: it is asked
/// with each stderr line, and with `None` every 50 ms. Asserts the run was killed there and
/// left `world` untouched.
fn kill_when(
    test: &str,
    world: &Path,
    point: &str,
    mut kill_now: impl FnMut(Option<&str>) -> bool,
) {
    let before = std::fs::read(world).unwrap();
    let started = Instant::now();
    let mut child = reconcile_file(world)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, received) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut hit = false;
    let deadline = started + Duration::from_secs(120);
    while Instant::now() < deadline {
        let matched = match received.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                let matched = kill_now(Some(&line));
                seen.push(line);
                matched
            }
            Err(mpsc::RecvTimeoutError::Timeout) => kill_now(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if matched {
            // `Child::kill` sends SIGKILL.
            child.kill().unwrap();
            hit = true;
            break;
        }
    }
    if !hit {
        child.kill().ok();
    }
    let status = child.wait().unwrap();
    drop(received);
    reader.join().unwrap();
    assert!(
        hit,
        "{test}: kill point {point:?} never reached ({status}):\n{}",
        seen.join("\n")
    );
    eprintln!(
        "{test}: killed after {:.1?} at {point:?}: {}",
        started.elapsed(),
        seen.last().map_or("(no line yet)", String::as_str)
    );
    assert!(
        !status.success(),
        "{test}: the run was not killed: {status}"
    );
    assert_eq!(
        std::fs::read(world).unwrap(),
        before,
        "{test}: the killed run changed {}",
        world.display()
    );
    // A killed command cannot remove its lock file (`.world.yaml.lock`, empty but for its
    // holder's pid): the kernel released its lock, and the next command takes it and
    // removes it. Anything else left is a leak.
    let lock = oi_cli_io::Lock::path_for(world);
    let temporaries: Vec<_> = std::fs::read_dir(world.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path() != lock)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "world.yaml")
        .collect();
    assert!(
        temporaries.is_empty(),
        "{test}: the killed run left {temporaries:?}"
    );
}

/// Reruns `oi reconcile` on `world` until it reports the cluster ready, at most `runs` times.
fn rerun_until_ready(test: &str, world: &Path, runs: usize) {
    for attempt in 1..=runs {
        let run = oi_e2e::run_command(&mut reconcile_file(world), "").unwrap();
        let summary = run.summary().unwrap();
        eprintln!("{test}: rerun {attempt} {:.1?}: {summary}", run.elapsed);
        if run.success && summary.not_ready == 0 {
            // The lock file a killed run left is gone with the rerun that took it.
            assert!(
                !oi_cli_io::Lock::path_for(world).exists(),
                "{test}: a lock file is left after the rerun"
            );
            return;
        }
        eprintln!("{test}: rerun {attempt} not ready:\n{}", run.stderr);
    }
    panic!("{test}: not ready after {runs} reruns");
}

/// The pods (namespace/name) on each hypervisor of the set, through its CRI socket.
fn pods(set: &LocalSet) -> BTreeMap<String, Vec<String>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut all = BTreeMap::new();
    for h in set.state().unwrap().hypervisors {
        let names = runtime.block_on(async {
            let client = oi_cri::CriClient::connect(
                &h.name,
                oi_cri::CriEndpoint::Unix(h.socket.clone()),
                oi_cri::ClientOptions::default(),
            )
            .await
            .unwrap();
            oi_cri::HypervisorRuntime::list_pods(&client, &BTreeMap::new())
                .await
                .unwrap()
        });
        let mut names: Vec<String> = names
            .into_iter()
            .map(|p| format!("{}/{} {:?}", p.namespace, p.name, p.state))
            .collect();
        names.sort();
        all.insert(h.name.clone(), names);
    }
    all
}

/// Asserts the converged state of cluster c1 in `world`.
fn assert_converged(test: &str, set: &LocalSet, world: &Path) {
    let world = World::parse(&std::fs::read_to_string(world).unwrap()).unwrap();
    let (status, message) = world.condition("c1", "ReconcileSucceeded").unwrap();
    assert_eq!(status, "True", "{test}: {message}");

    let etcd = Etcdctl::new(&world, "c1").unwrap();
    let members = eventually(Duration::from_secs(20), || {
        let started = etcd.started_members()?;
        let list: serde_json::Value =
            serde_json::from_str(&etcd.run(&["member", "list", "-w", "json"])?.stdout)?;
        let all = list["members"].as_array().map_or(0, Vec::len);
        anyhow::ensure!(
            all == 3 && started.len() == 3 && started.iter().all(|(_, learner)| !learner),
            "{all} members, started: {started:?}"
        );
        Ok(started)
    })
    .unwrap();
    let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "c1-control-plane-0",
            "c1-control-plane-1",
            "c1-control-plane-2"
        ],
        "{test}"
    );

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let git_version =
        eventually(Duration::from_secs(20), || server_git_version(&kubeconfig)).unwrap();
    assert_eq!(
        git_version.trim_start_matches('v'),
        cluster_version(&world, "c1").unwrap()
    );

    // Exactly the cluster's pods, where the world placed them: nothing else on any hypervisor.
    let namespace = oi_e2e::str_at(
        world.require_cluster("c1").unwrap(),
        &["metadata", "namespace"],
    )
    .unwrap_or("default");
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for component in world.components_of("c1") {
        let name = oi_e2e::str_at(component, &["metadata", "name"]).unwrap();
        let hypervisor = oi_e2e::str_at(component, &["spec", "hypervisor"]).unwrap();
        let pods = expected.entry(hypervisor.to_owned()).or_default();
        pods.push(format!("{namespace}/{name} Ready"));
        if name != "c1-ingress" {
            pods.push(format!("{namespace}/{name}-etcd Ready"));
        }
    }
    for pods in expected.values_mut() {
        pods.sort();
    }
    let found = pods(set);
    assert_eq!(found, expected, "{test}: pods per hypervisor");
    let sizes: Vec<usize> = found.values().map(Vec::len).collect();
    assert_eq!(sizes, [2, 2, 2, 1], "{test}: {found:?}");

    let last = reconcile(&world.text, &[]).unwrap();
    let summary = last.summary().unwrap();
    assert!(last.success, "{test}: {}", last.stderr);
    assert_eq!(summary.mutating_cri_calls, 0, "{test}: {summary}");
    assert_eq!(summary.cluster_api_writes, 0, "{test}: {summary}");
    assert_eq!(
        (summary.ready, summary.not_ready),
        (1, 0),
        "{test}: {summary}"
    );
}

/// A set of 3 private + 1 public hypervisors with cluster c1 (`replicas` replicas) injected
/// into `dir/world.yaml`.
fn set_with_world(tag: &str, dir: &Path, replicas: u32) -> (LocalSet, std::path::PathBuf) {
    let set = LocalSet::create(tag, 3, 1, false).unwrap();
    let injected = inject_cluster(&set.manifests, "c1", replicas).unwrap();
    let world = dir.join("world.yaml");
    std::fs::write(&world, injected).unwrap();
    (set, world)
}

/// Runs `oi reconcile` on `world` and SIGKILLs it right after the first stderr progress
/// line containing `message` for which `also` holds.
fn kill_after(test: &str, world: &Path, message: &str, also: impl Fn(&str) -> bool) {
    kill_when(test, world, message, |line| {
        line.is_some_and(|l| l.starts_with('[') && l.contains(message) && also(l))
    });
}

/// The throwaway pods (file writers, path removers) on the set's hypervisors.
fn throwaway_pods(set: &LocalSet) -> Vec<String> {
    pods(set)
        .into_iter()
        .flat_map(|(h, pods)| pods.into_iter().map(move |p| format!("{h}: {p}")))
        .filter(|p| p.contains(oi_cri::requests::RUN_NAMESPACE))
        .collect()
}

#[test]
fn killed_while_writing_files_then_while_founding_etcd_converges() {
    let test = "killed_while_writing_files_then_while_founding_etcd_converges";
    if !prerequisites(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (set, world) = set_with_world("kw", dir.path(), 3);
    // While a file writer runs: its throwaway pod is left behind.
    kill_when(test, &world, "file writer running", |_| {
        !throwaway_pods(&set).is_empty()
    });
    let left = throwaway_pods(&set);
    assert!(!left.is_empty(), "{test}: no throwaway pod left");
    eprintln!("{test}: left behind {left:?}");
    // A second run gets as far as the first etcd pod of the three that found the cluster:
    // it runs without a quorum until the rerun starts the others.
    kill_after(test, &world, ": created pod c1-control-plane-", |l| {
        l.ends_with("-etcd")
    });
    rerun_until_ready(test, &world, 2);
    assert_converged(test, &set, &world);
    drop(set);
}

#[test]
fn killed_after_learner_added_then_during_control_plane_converges() {
    let test = "killed_after_learner_added_then_during_control_plane_converges";
    if !prerequisites(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (set, world) = set_with_world("kl", dir.path(), 1);
    rerun_until_ready(test, &world, 1);
    // Scaled to 3: the new replicas join the running cluster as learners.
    let scaled = World::parse(&std::fs::read_to_string(&world).unwrap())
        .unwrap()
        .with_replicas("c1", 3)
        .unwrap();
    std::fs::write(&world, scaled).unwrap();
    // Member added as a learner, its pod not created yet.
    kill_after(test, &world, ": added etcd member as learner", |_| true);
    // The first Kubernetes control plane pod is up, the others and the ingress not yet.
    kill_after(test, &world, " pod c1-control-plane-", |l| {
        !l.ends_with("-etcd")
    });
    rerun_until_ready(test, &world, 2);
    assert_converged(test, &set, &world);
    drop(set);
}
