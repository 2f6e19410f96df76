//! etcd snapshots and restore, for real: a 3-replica cluster holding 1,000 objects written
//! through its API is snapshotted to an S3-compatible server (moto) and to a file; a
//! truncated snapshot and another cluster's are refused with nothing stopped; the cluster is
//! deleted and restored from S3 onto three other hypervisors with every object back; then
//! restored in place, the objects written since gone.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use oi_e2e::{
    Etcdctl, LocalSet, Run, World, admin_kubeconfig, binary, eventually, kubectl, oi,
    prerequisites, reconcile, reconcile_until_ready, run_command, str_at,
};
use oi_testsupport::S3Server;

const OBJECTS: usize = 1000;

/// `oi ARGS` over `stdin` with the S3 server's settings and the offline images.
fn oi_s3(server: &S3Server, args: &[&str], stdin: &str) -> Run {
    let mut command = Command::new(binary("oi").unwrap());
    command
        .args(args)
        .env("OI_IMAGE_REPOSITORY", "localhost/oneinfra");
    for (k, v) in server.env() {
        command.env(k, v);
    }
    run_command(&mut command, stdin).unwrap()
}

/// A `List` of `n` ConfigMaps named `<prefix>-<i>`, labelled `oi-e2e=<label>`.
fn config_maps(prefix: &str, label: &str, n: usize) -> String {
    let items: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("{prefix}-{i}"), "namespace": "default",
                             "labels": {"oi-e2e": label}},
                "data": {"i": i.to_string(), "payload": "x".repeat(200)},
            })
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

fn create(kubeconfig: &Path, list: &str, dir: &Path, name: &str) {
    let file = dir.join(name);
    std::fs::write(&file, list).unwrap();
    kubectl(
        kubeconfig,
        &[
            "--request-timeout=60s",
            "create",
            "--validate=false",
            "-f",
            file.to_str().unwrap(),
        ],
    )
    .unwrap()
    .ok("kubectl create")
    .unwrap();
}

/// The names of the ConfigMaps labelled `oi-e2e=<label>`.
fn labelled(kubeconfig: &Path, label: &str) -> anyhow::Result<Vec<String>> {
    let run = kubectl(
        kubeconfig,
        &[
            "--request-timeout=10s",
            "get",
            "configmaps",
            "-n",
            "default",
            "-l",
            &format!("oi-e2e={label}"),
            "-o",
            "name",
        ],
    )?
    .ok("kubectl get configmaps")?;
    Ok(run.stdout.lines().map(str::to_string).collect())
}

/// Each replica's hypervisor, in replica order.
fn placement(world: &World, cluster: &str) -> Vec<String> {
    let mut replicas: Vec<(String, String)> = world
        .components_of(cluster)
        .filter(|c| str_at(c, &["spec", "role"]) == Some("control-plane"))
        .map(|c| {
            (
                str_at(c, &["metadata", "name"]).unwrap().to_string(),
                str_at(c, &["spec", "hypervisor"]).unwrap().to_string(),
            )
        })
        .collect();
    replicas.sort();
    replicas.into_iter().map(|(_, h)| h).collect()
}

#[test]
fn a_cluster_comes_back_from_its_snapshot_on_other_hypervisors_and_in_place() {
    let test = "a_cluster_comes_back_from_its_snapshot_on_other_hypervisors_and_in_place";
    if !prerequisites(test) {
        return;
    }
    let Some(s3) = S3Server::start(test) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = oi_s3::Store::new(oi_s3::S3Config::from_vars(|name| {
        s3.env()
            .into_iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }));
    s3.create_bucket("snaps");

    let set = LocalSet::create("snp", 6, 1, false).unwrap();
    let injected = oi_e2e::inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 3).unwrap();
    let world = run.stdout;
    let parsed = World::parse(&world).unwrap();
    let before = placement(&parsed, "c1");
    assert_eq!(before.len(), 3);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    create(
        &kubeconfig,
        &config_maps("kept", "kept", OBJECTS),
        dir.path(),
        "kept.json",
    );
    assert_eq!(labelled(&kubeconfig, "kept").unwrap().len(), OBJECTS);

    // Snapshots: to S3 (a name of its own under the prefix) and to a file.
    let taken = oi_s3(
        &s3,
        &["cluster", "snapshot", "--to", "s3://snaps/prod/"],
        &world,
    );
    let taken = taken.ok("oi cluster snapshot to S3").unwrap();
    assert_eq!(taken.stdout, "", "the manifests are not printed");
    eprintln!("{}", taken.stderr.trim());
    let listed = runtime
        .block_on(store.list(&oi_s3::Location::parse("s3://snaps/prod").unwrap()))
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let in_s3 = listed[0].location.to_string();
    assert!(
        in_s3.starts_with("s3://snaps/prod/default-c1-") && in_s3.ends_with(".oisnap"),
        "{in_s3}"
    );
    assert!(
        taken.stderr.contains(&format!("written to {in_s3}")),
        "{}",
        taken.stderr
    );
    let file = dir.path().join("c1.oisnap");
    oi(
        &["cluster", "snapshot", "--to", file.to_str().unwrap()],
        &world,
    )
    .unwrap()
    .ok("oi cluster snapshot to a file")
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(meta.len() > 100_000, "{} bytes", meta.len());
    }

    // Written after the snapshot: gone once restored.
    create(
        &kubeconfig,
        &config_maps("later", "later", 3),
        dir.path(),
        "later.json",
    );

    // A truncated snapshot, and one restored as another cluster: refused, nothing stopped.
    let containers = set.containers().unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let truncated = dir.path().join("truncated.oisnap");
    std::fs::write(&truncated, &bytes[..bytes.len() - 4096]).unwrap();
    let refused = oi(
        &["cluster", "restore", "--from", truncated.to_str().unwrap()],
        &world,
    )
    .unwrap();
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("is truncated"),
        "{}",
        refused.stderr
    );
    assert_eq!(refused.stdout, "");
    let foreign = oi(
        &[
            "cluster",
            "restore",
            "--from",
            file.to_str().unwrap(),
            "--cluster",
            "c9",
        ],
        &world,
    )
    .unwrap();
    assert!(!foreign.success);
    assert!(
        foreign
            .stderr
            .contains("is a snapshot of cluster default/c1, not of default/c9"),
        "{}",
        foreign.stderr
    );
    assert_eq!(set.containers().unwrap(), containers, "nothing was stopped");
    assert_eq!(labelled(&kubeconfig, "later").unwrap().len(), 3);

    // The cluster deleted, then brought back from S3 onto the three other hypervisors.
    let deleted = oi(&["cluster", "delete", "--name", "c1"], &world)
        .unwrap()
        .ok("oi cluster delete")
        .unwrap()
        .stdout;
    let gone = reconcile(&deleted, &[])
        .unwrap()
        .ok("deleting reconcile")
        .unwrap()
        .stdout;
    assert!(World::parse(&gone).unwrap().cluster("c1").is_none());
    let others: Vec<String> = World::parse(&gone)
        .unwrap()
        .of_kind("Hypervisor")
        .filter(|h| at_bool(h, &["spec", "public"]) != Some(true))
        .map(|h| str_at(h, &["metadata", "name"]).unwrap().to_string())
        .filter(|h| !before.contains(h))
        .collect();
    assert_eq!(others.len(), 3, "{others:?}");
    let mut args = vec!["cluster", "restore", "--from", &in_s3, "--max-wait", "3m"];
    for h in &others {
        args.extend(["--hypervisor", h.as_str()]);
    }
    let restored = oi_s3(&s3, &args, &gone);
    eprintln!("restore onto other hypervisors:\n{}", restored.stderr);
    let restored = restored.ok("oi cluster restore from S3").unwrap();
    assert!(
        restored
            .stderr
            .contains("the cluster itself from the snapshot")
            && restored
                .stderr
                .contains("oi: cluster default/c1 restored to etcd revision"),
        "{}",
        restored.stderr
    );
    let world = restored.stdout;
    let parsed = World::parse(&world).unwrap();
    assert_eq!(placement(&parsed, "c1"), others);
    let kubeconfig = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    let kept = eventually(Duration::from_secs(30), || labelled(&kubeconfig, "kept")).unwrap();
    assert_eq!(kept.len(), OBJECTS);
    assert_eq!(
        labelled(&kubeconfig, "later").unwrap(),
        Vec::<String>::new()
    );
    Etcdctl::new(&parsed, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();
    // A reconcile after it changes nothing.
    let again = reconcile(&world, &[])
        .unwrap()
        .ok("reconcile after restore")
        .unwrap();
    assert_eq!(
        again.summary().unwrap().mutating_cri_calls,
        0,
        "{}",
        again.stderr
    );

    // In place, from the file: what was written since is gone again.
    create(
        &kubeconfig,
        &config_maps("later", "later", 2),
        dir.path(),
        "later2.json",
    );
    let in_place = oi(
        &[
            "cluster",
            "restore",
            "--from",
            file.to_str().unwrap(),
            "--max-wait",
            "3m",
        ],
        &world,
    )
    .unwrap();
    eprintln!("restore in place:\n{}", in_place.stderr);
    let in_place = in_place.ok("oi cluster restore in place").unwrap();
    assert!(
        !in_place
            .stderr
            .contains("the cluster itself from the snapshot"),
        "{}",
        in_place.stderr
    );
    let parsed = World::parse(&in_place.stdout).unwrap();
    assert_eq!(
        placement(&parsed, "c1"),
        others,
        "the replicas stay where they are"
    );
    let kept = eventually(Duration::from_secs(30), || labelled(&kubeconfig, "kept")).unwrap();
    assert_eq!(kept.len(), OBJECTS);
    assert_eq!(
        labelled(&kubeconfig, "later").unwrap(),
        Vec::<String>::new()
    );
}

fn at_bool(value: &serde_yaml_ng::Value, path: &[&str]) -> Option<bool> {
    oi_e2e::at(value, path).and_then(serde_yaml_ng::Value::as_bool)
}
