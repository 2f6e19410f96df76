//! `oi reconcile` over Airship SIP's upstream samples: the hosts come back labelled, every
//! other field of theirs as it was; an unschedulable SIPCluster labels nothing and fails
//! after writing the manifests; `oi sipcluster delete` lets the hosts go.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oi_api::sip::{CLUSTER_NAME_LABEL, NODE_STATE_LABEL, NODE_TYPE_LABEL, SELECTION_LABELS};
use oi_api::{ObjectKey, World};
use pretty_assertions::assert_eq;
use serde::Deserialize as _;
use serde_yaml_ng::Value;

#[path = "support/oi.rs"]
mod support;
use support::*;

fn sip_samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/sip/samples")
}

/// Upstream's samples in one namespace (as its kustomization puts them), with the SSH keys
/// Secret its jump host names, each in a file of `dir`.
fn write_samples(dir: &Path) -> Vec<String> {
    let namespaced = |f: &str| {
        std::fs::read_to_string(sip_samples().join(f))
            .unwrap()
            .replace("metadata:\n", "metadata:\n  namespace: sipcluster-system\n")
    };
    let files = [
        (
            "sipcluster.yaml",
            std::fs::read_to_string(sip_samples().join("sipcluster.yaml")).unwrap(),
        ),
        ("bmh.yaml", namespaced("bmh.yaml")),
        ("bmh_secrets.yaml", namespaced("bmh_secrets.yaml")),
        (
            "keys.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: ssh-private-keys, namespace: sipcluster-system}\ndata: {key: RFVNTVlfREFUQQ==}\n".to_string(),
        ),
    ];
    files
        .iter()
        .map(|(name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_string()
        })
        .collect()
}

fn reconcile_args(files: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["reconcile", "--image-repository", "localhost/oneinfra"]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    for f in files {
        args.push("-f".into());
        args.push(f.clone());
    }
    args
}

fn run(args: &[String]) -> std::process::Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    oi(&args, b"")
}

/// Documents of a stream by (kind, name), SIP's labels taken off the hosts.
fn without_our_labels(text: &str) -> Vec<Value> {
    let mut docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null() && v["kind"] != "SIPCluster")
        .collect();
    for d in &mut docs {
        if let Some(Value::Mapping(labels)) =
            d.get_mut("metadata").and_then(|m| m.get_mut("labels"))
        {
            for l in SELECTION_LABELS {
                labels.remove(l);
            }
        }
    }
    docs.sort_by_key(|d| {
        (
            d["kind"].as_str().unwrap().to_string(),
            d["metadata"]["name"].as_str().unwrap().to_string(),
        )
    });
    docs
}

#[test]
fn reconcile_labels_upstream_hosts_and_keeps_everything_else() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_samples(dir.path());
    let out = run(&reconcile_args(&files));
    let err = stderr(&out);
    assert!(
        err.contains("sipcluster sipcluster-system/sipcluster-system: hosts ControlPlane: active "),
        "{err}"
    );
    // The sample asks for services and these manifests have no public hypervisor to run
    // them: the hosts are labelled and written, and the command fails saying why.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "error: sipcluster sipcluster-system/sipcluster-system is not ready: its support \
             services: cannot be placed: spec.services.loadBalancerControlPlane[0].nodePort: no \
             public hypervisor can run the control plane load balancer lb-control-plane-0 (there is none)"
        ),
        "{err}"
    );
    let text = stdout(&out);
    // `oi get` and `oi describe` show it (checked against the world rather than golden
    // files: upstream's samples stay out of the repository).
    let world = World::load(&text, "out").unwrap();
    let mut hosts: Vec<&str> = world
        .bare_metal_hosts
        .values()
        .filter(|h| h.metadata.labels.contains_key(CLUSTER_NAME_LABEL))
        .map(|h| h.metadata.name.as_str())
        .collect();
    hosts.sort_unstable();
    let table = ok(&["get", "sipclusters", "-o", "wide"], text.as_bytes());
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "REASON",
            "NODES",
            "HOSTS",
            "SERVICES",
            "CLUSTER",
            "HOSTS",
            "SELECTED"
        ]
    );
    assert_eq!(
        lines[1],
        [
            "sipcluster-system",
            "sipcluster-system",
            "False",
            "InfraServiceFailure",
            "ControlPlane=1+1,Worker=1+1",
            "4/4",
            "loadBalancerControlPlane=1,loadBalancerWorker=1,jumpHost=1",
            "<none>",
            &hosts.join(","),
        ]
    );
    // With a public hypervisor holding its jump host's port, as a run that could place it
    // leaves it.
    let with_jump_host = format!(
        "{text}---\n{}",
        "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata:\n  name: public-1\n\
         spec:\n  localCRIEndpoint:\n    criEndpointPath: /run/oneinfra/public-1/containerd.sock\n\
         \x20 public: true\n  ipAddress: 10.0.1.21\n  portRange:\n    low: 30000\n    high: 30999\n\
         status:\n  allocatedPorts:\n  - cluster: SIPCluster/sipcluster-system\n\
         \x20   clusterNamespace: sipcluster-system\n    component: jump-host-0-ssh\n    port: 30000\n"
    );
    let described = ok(
        &["describe", "sipcluster", "sipcluster-system"],
        with_jump_host.as_bytes(),
    );
    let rows: Vec<Vec<&str>> = described
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for h in world
        .bare_metal_hosts
        .values()
        .filter(|h| h.metadata.labels.contains_key(CLUSTER_NAME_LABEL))
    {
        let row = [
            h.metadata.name.as_str(),
            h.metadata.labels[NODE_TYPE_LABEL].as_str(),
            h.metadata.labels[NODE_STATE_LABEL].as_str(),
            h.spec.bmc.address.as_str(),
        ];
        assert!(rows.contains(&row.to_vec()), "{row:?} not in\n{described}");
    }
    for row in [
        &["Cluster:", "<none>"][..],
        &[
            "ControlPlane",
            "1",
            "1",
            "vino.airshipit.org/rack",
            "vino.airshipit.org/flavor=control-plane",
        ],
        &["jump-host-0", "public-1", "10.0.1.21", "30000"],
        &["OIDC", "providers:"],
        &["<none>"],
    ] {
        assert!(rows.contains(&row.to_vec()), "{row:?} not in\n{described}");
    }
    assert!(
        described.contains("Ready  False   InfraServiceFailure"),
        "{described}"
    );
    let held: Vec<(String, String, String)> = world
        .bare_metal_hosts
        .values()
        .filter(|h| h.metadata.labels.contains_key(CLUSTER_NAME_LABEL))
        .map(|h| {
            (
                h.metadata.labels["vino.airshipit.org/flavor"].clone(),
                h.metadata.labels[NODE_TYPE_LABEL].clone(),
                h.metadata.labels[NODE_STATE_LABEL].clone(),
            )
        })
        .collect();
    assert_eq!(held.len(), 4, "{held:?}");
    assert_eq!(
        held.iter()
            .filter(|h| h.0 == "control-plane" && h.1 == "ControlPlane")
            .count(),
        2
    );
    assert_eq!(
        held.iter()
            .filter(|h| h.0 == "worker" && h.1 == "Worker")
            .count(),
        2
    );
    assert_eq!(held.iter().filter(|h| h.2 == "standby").count(), 2);
    let sip = &world.sip_clusters[&ObjectKey::new("sipcluster-system", "sipcluster-system")];
    let ready = sip.condition("Ready").unwrap();
    assert_eq!(ready.reason, "InfraServiceFailure");

    // Everything but our labels is as the inputs had it.
    let inputs: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    assert_eq!(without_our_labels(&text), without_our_labels(&inputs));

    // A second run over the output changes nothing.
    let path = dir.path().join("world.yaml");
    std::fs::write(&path, &text).unwrap();
    let again = run(&reconcile_args(&[path.to_str().unwrap().to_string()]));
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert_eq!(stdout(&again), text);

    // Deleting it lets every host go; the hosts are what the inputs had.
    let deleted = ok(
        &[
            "sipcluster",
            "delete",
            "--name",
            "sipcluster-system",
            "--namespace",
            "sipcluster-system",
            "-f",
            path.to_str().unwrap(),
        ],
        b"",
    );
    std::fs::write(&path, &deleted).unwrap();
    let out = run(&reconcile_args(&[path.to_str().unwrap().to_string()]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("sipcluster sipcluster-system/sipcluster-system: deleted, 4 host(s) let go")
    );
    let after = World::load(&stdout(&out), "after").unwrap();
    assert!(after.sip_clusters.is_empty());
    let original = World::load(&inputs, "inputs").unwrap();
    assert_eq!(after.bare_metal_hosts, original.bare_metal_hosts);
    // Deleting one that does not exist is an error.
    let missing = oi(
        &[
            "sipcluster",
            "delete",
            "--name",
            "nope",
            "-f",
            path.to_str().unwrap(),
        ],
        b"",
    );
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("sipcluster default/nope not found"));
}

/// `--dry-run` over upstream's samples: the hosts it would choose, and that its services
/// cannot be placed (no public hypervisor), said on stdout; exit 1; no file touched.
#[test]
fn a_dry_run_shows_the_hosts_a_sip_cluster_would_get_and_why_its_services_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_samples(dir.path());
    let before: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let mut args = reconcile_args(&files);
    args.push("--dry-run".into());
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let plan = stdout(&out);
    let lines: Vec<&str> = plan.lines().collect();
    assert_eq!(lines.len(), 2, "{plan}");
    assert!(
        lines[0].starts_with(
            "sipcluster sipcluster-system/sipcluster-system: hosts ControlPlane: active "
        ) && lines[0].contains("; newly chosen: "),
        "{plan}"
    );
    assert_eq!(
        lines[1],
        "sipcluster sipcluster-system/sipcluster-system cannot be planned: \
         spec.services.loadBalancerControlPlane[0].nodePort: no public hypervisor can run the \
         control plane load balancer lb-control-plane-0 (there is none)"
    );
    assert_eq!(
        stderr(&out),
        "error: the dry run is incomplete: 1 SIPClusters cannot be planned \
         (sipcluster-system/sipcluster-system)\n"
    );
    for (f, text) in files.iter().zip(&before) {
        assert_eq!(&std::fs::read_to_string(f).unwrap(), text, "{f}");
    }

    // Unschedulable: what lacks is said, and the dry run is incomplete.
    let sip = before[0].replacen("active: 1", "active: 3", 1);
    std::fs::write(&files[0], sip).unwrap();
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let plan = stdout(&out);
    assert!(
        plan.starts_with("sipcluster sipcluster-system/sipcluster-system: unschedulable, no host labelled: node set ControlPlane lacks 2 hosts"),
        "{plan}"
    );
    assert!(
        plan.contains(
            "sipcluster sipcluster-system/sipcluster-system cannot be planned: unschedulable"
        ),
        "{plan}"
    );
}

#[test]
fn an_unschedulable_sip_cluster_labels_nothing_and_fails_after_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = write_samples(dir.path());
    let sip = std::fs::read_to_string(&files[0])
        .unwrap()
        .replacen("active: 1", "active: 3", 1);
    std::fs::write(&files[0], sip).unwrap();
    let out_path = dir.path().join("out.yaml");
    let mut args = reconcile_args(&files);
    args.extend(["-o".to_string(), out_path.to_str().unwrap().to_string()]);
    let out = run(&args);
    assert!(!out.status.success());
    let err = stderr(&out);
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: sipcluster sipcluster-system/sipcluster-system is not ready: unschedulable, no host labelled: node set ControlPlane lacks 2 hosts (1 active, 1 standby)"),
        "{err}"
    );
    let written = std::fs::read_to_string(&out_path).unwrap();
    let world = World::load(&written, "out").unwrap();
    assert!(
        world
            .bare_metal_hosts
            .values()
            .all(|h| !h.metadata.labels.contains_key(CLUSTER_NAME_LABEL))
    );
    assert_eq!(
        world
            .sip_clusters
            .values()
            .next()
            .unwrap()
            .condition("Ready")
            .unwrap()
            .reason,
        "Unschedulable"
    );
    files.clear();
}

#[test]
fn an_invalid_ssh_key_is_refused_naming_the_document_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_samples(dir.path());
    let sip = std::fs::read_to_string(&files[0]).unwrap().replacen(
        "- ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAACAQ",
        "- ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAACAQ!",
        1,
    );
    std::fs::write(&files[0], sip).unwrap();
    let out = run(&reconcile_args(&files));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("sipcluster.yaml: document 1: SIPCluster sipcluster-system/sipcluster-system: field `spec.services.jumpHost[0].sshAuthorizedKeys[0]`: the ssh-rsa key is not base64"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn the_jump_host_inventory_lists_the_held_hosts_with_their_bmcs() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_samples(dir.path());
    let world = dir.path().join("world.yaml");
    let mut args = reconcile_args(&files);
    args.extend(["-o".to_string(), world.to_str().unwrap().to_string()]);
    let out = run(&args);
    // Its services have no public hypervisor here (exit 1); the hosts are labelled.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(world.is_file());
    let inventory = dir.path().join("hosts.json");
    let out = run(&[
        "sipcluster".into(),
        "inventory".into(),
        "--name".into(),
        "sipcluster-system".into(),
        "--namespace".into(),
        "sipcluster-system".into(),
        "-f".into(),
        world.to_str().unwrap().into(),
        "-o".into(),
        inventory.to_str().unwrap().into(),
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("sipcluster sipcluster-system/sipcluster-system: 4 host(s), addresses on network oam-ipv4"),
        "{err}"
    );
    // BMC passwords inside: owner only, from its creation.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&inventory).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let parsed: oi_api::JumpHostInventory =
        serde_json::from_str(&std::fs::read_to_string(&inventory).unwrap()).unwrap();
    // The hosts the world holds for it, each with its oam-ipv4 address and its BMC.
    let world = World::load(&std::fs::read_to_string(&world).unwrap(), "world").unwrap();
    let mut held: Vec<String> = world
        .bare_metal_hosts
        .values()
        .filter(|h| h.metadata.labels.contains_key(CLUSTER_NAME_LABEL))
        .map(|h| h.metadata.name.clone())
        .collect();
    held.sort();
    let names: Vec<String> = parsed.hosts.iter().map(|h| h.name.clone()).collect();
    assert_eq!(names, held);
    for h in &parsed.hosts {
        let ip: std::net::IpAddr = h.ip.as_deref().unwrap().parse().unwrap();
        assert!(ip.is_ipv4(), "{h:?}");
        assert!(
            h.bmc.address.contains("/redfish/v1/Systems/"),
            "{}",
            h.bmc.address
        );
        assert!(!h.bmc.username.is_empty() && !h.bmc.password.is_empty());
    }
    // An unknown SIPCluster: said, exit 1.
    let out = run(&[
        "sipcluster".into(),
        "inventory".into(),
        "--name".into(),
        "nope".into(),
        "-f".into(),
        files[0].clone(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no sipcluster default/nope in the manifests"),
        "{}",
        stderr(&out)
    );
}

/// Runs `oi sipcluster hash-password --iterations 10000` with a terminal on stdin, typing
/// `typed` (one line per prompt, each after its prompt shows): its output and what the
/// terminal showed.
fn hash_on_terminal(typed: [&str; 2]) -> (std::process::Output, String) {
    use std::io::{Read as _, Write as _};
    let pty = pty();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&pty.slave)
        .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["sipcluster", "hash-password", "--iterations", "10000"])
        .stdin(std::process::Stdio::from(slave))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Whatever happens, the child is gone within 30 s (then the reads below end).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (done, pid) = (std::sync::Arc::clone(&done), child.id());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if Instant::now() > deadline {
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status();
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut stderr = child.stderr.take().unwrap();
    let mut master = std::fs::File::from(pty.master.try_clone().unwrap());
    let mut shown_prompts = String::new();
    for (prompt, line) in ["Password: ", "Again: "].into_iter().zip(typed) {
        // The prompt shows once echo is off (what is typed before is discarded): wait for it.
        while !shown_prompts.ends_with(prompt) {
            let mut byte = [0u8; 1];
            assert_eq!(stderr.read(&mut byte).unwrap(), 1, "{shown_prompts}");
            shown_prompts.push(byte[0] as char);
        }
        master.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let mut out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    watchdog.join().unwrap();
    out.stderr = format!("{shown_prompts}{rest}").into_bytes();
    // The child is gone and the test holds no slave: the master reads what was shown, then
    // fails (EIO) at the end.
    drop(pty.slave);
    let mut shown = Vec::new();
    let _ = master.read_to_end(&mut shown);
    (out, String::from_utf8_lossy(&shown).into_owned())
}

#[test]
fn hash_password_asks_twice_on_a_terminal_without_echo() {
    let (out, shown) = hash_on_terminal(["correct horse", "correct horse"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "Password: Again: ");
    let hash = stdout(&out);
    let parts = oi_api::oidc::parse_hash(hash.trim()).unwrap();
    assert!(oi_oidc::password::verify(&parts, "correct horse"));
    assert!(!shown.contains("correct"), "echoed: {shown:?}");

    let (out, shown) = hash_on_terminal(["one", "two"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the two passwords typed differ"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty());
    assert!(
        !shown.contains("one") && !shown.contains("two"),
        "{shown:?}"
    );
}

#[test]
fn hash_password_reads_the_first_line_of_a_pipe_and_refuses_none() {
    let out = oi(
        &["sipcluster", "hash-password", "--iterations", "10000"],
        b"s3cret\nignored\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let parts = oi_api::oidc::parse_hash(stdout(&out).trim()).unwrap();
    assert!(oi_oidc::password::verify(&parts, "s3cret"));
    let out = oi(&["sipcluster", "hash-password"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no password on stdin"),
        "{}",
        stderr(&out)
    );
    let out = oi(
        &["sipcluster", "hash-password", "--iterations", "100"],
        b"x\n",
    );
    assert!(stderr(&out).contains("at least 10000"), "{}", stderr(&out));
}
