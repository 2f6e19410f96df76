//! `oi node join` as a platform engineer runs it on a worker: refused fast, with nothing
//! written, for a wrong token, a CA that is not the cluster's, or an endpoint that does not
//! answer; then a join that waits for the cluster's answer (given by `oi reconcile`), writes
//! the kubelet's files (keys 0600) and unit, and prints the kubelet command; that command
//! (the kubelet stand-in) registers a Node that becomes Ready with the issued credentials. A
//! rerun converges; another machine asking for the same name is told so.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oi_e2e::{
    LocalSet, admin_kubeconfig, binary, eventually, inject_cluster, prerequisites, reconcile,
};

/// A kubelet process, killed when the test ends however it ends.
struct Kubelet(Child);

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    found
}

struct Join<'a> {
    endpoint: &'a str,
    ca: &'a Path,
    token: &'a str,
    root: &'a Path,
    kubelet: &'a Path,
}

impl Join<'_> {
    fn command(&self, node: &str, timeout: &str) -> Command {
        let mut command = Command::new(binary("oi").unwrap());
        command
            .args(["node", "join", "--nodename", node, "--apiserver-endpoint"])
            .arg(self.endpoint)
            .arg("--apiserver-ca-cert-file")
            .arg(self.ca)
            .args(["--extra-san", "worker.example", "--timeout", timeout])
            .arg("--root-dir")
            .arg(self.root)
            .arg("--kubelet-binary")
            .arg(self.kubelet)
            .env("OI_JOIN_TOKEN", self.token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs to the end; (success, stderr).
    fn run(&self, node: &str) -> (bool, String) {
        let out = self.command(node, "20s").output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }
}

#[test]
fn a_worker_joins_with_oi_node_join_and_its_kubelet_becomes_ready() {
    let test = "a_worker_joins_with_oi_node_join_and_its_kubelet_becomes_ready";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("join", 1, 1, false).unwrap();
    let world = inject_cluster(&set.manifests, "c1", 1).unwrap();
    let (world, token) = oi_e2e::inject_join_token(&world, "c1").unwrap();
    let world = reconcile(&world, &[])
        .unwrap()
        .ok("oi reconcile")
        .unwrap()
        .stdout;
    let parsed = oi_e2e::World::parse(&world).unwrap();
    let endpoint = oi_e2e::str_at(
        parsed.require_cluster("c1").unwrap(),
        &["status", "apiServerEndpoint"],
    )
    .unwrap()
    .to_string();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    oi_e2e::write_apiserver_ca(&world, "c1", &ca).unwrap();
    let kubelet_bin = oi_e2e::kubelet_standin(dir.path()).unwrap();
    let root = dir.path().join("worker-root");
    std::fs::create_dir(&root).unwrap();
    let join = Join {
        endpoint: &endpoint,
        ca: &ca,
        token: &token,
        root: &root,
        kubelet: &kubelet_bin,
    };

    // Refused fast, nothing written.
    let wrong = Join {
        token: "abcdef.0123456789abcdef",
        ..join
    };
    let (ok, stderr) = wrong.run("worker-1");
    assert!(!ok);
    assert!(
        stderr.contains(
            "the join token was refused (401 Unauthorized): it is wrong, expired or deleted"
        ),
        "{stderr}"
    );
    let other_ca = dir.path().join("other-ca.pem");
    let (other_pem, _) = oi_kube_standin::local::TestCa::new("not-the-cluster")
        .map(|ca| (ca.pem(), ()))
        .unwrap();
    std::fs::write(&other_ca, other_pem).unwrap();
    let (ok, stderr) = Join {
        ca: &other_ca,
        ..join
    }
    .run("worker-1");
    assert!(!ok);
    assert!(
        stderr.contains("not trusted by --apiserver-ca-cert-file"),
        "{stderr}"
    );
    let closed = format!("https://127.0.0.1:{}", free_port());
    let (ok, stderr) = Join {
        endpoint: &closed,
        ..join
    }
    .run("worker-1");
    assert!(!ok);
    assert!(
        stderr.contains(": unreachable: cannot connect: "),
        "{stderr}"
    );
    assert_eq!(files_under(&root), Vec::<String>::new());

    // The join waits for the answer, which the next reconcile gives.
    let mut child = join.command("worker-1", "60s").spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "oi node join did not finish");
        reconcile(&world, &[])
            .unwrap()
            .ok("answering reconcile")
            .unwrap();
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("oi: join request worker-1 created"),
        "{stderr}"
    );
    assert!(
        stderr.contains("node worker-1 joined the cluster (Kubernetes 1.37.1)"),
        "{stderr}"
    );
    assert_eq!(
        files_under(&root),
        [
            "etc/oneinfra/join.key",
            "etc/oneinfra/kubelet-client-ca.crt",
            "etc/oneinfra/kubelet.conf",
            "etc/oneinfra/kubelet.crt",
            "etc/oneinfra/kubelet.key",
            "etc/systemd/system/kubelet.service",
            "var/lib/kubelet/config.yaml",
        ]
    );
    for (file, mode) in [
        ("etc/oneinfra/join.key", 0o600),
        ("etc/oneinfra/kubelet.conf", 0o600),
        ("etc/oneinfra/kubelet.key", 0o600),
        ("etc/oneinfra/kubelet.crt", 0o644),
    ] {
        let m = std::fs::metadata(root.join(file))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(m, mode, "{file}");
    }
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/kubelet.service")).unwrap();
    let command_line = stderr
        .lines()
        .skip_while(|l| !l.contains("start the kubelet with:"))
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    assert!(
        unit.contains(&format!("\nExecStart={command_line}\n")),
        "{unit}"
    );

    // The printed command starts a kubelet (the stand-in) that registers and becomes Ready
    // with the issued kubeconfig; its ports are moved off the defaults (tests run together).
    let mut argv = command_line.split_whitespace();
    let mut kubelet = Command::new(argv.next().unwrap());
    kubelet
        .args(argv)
        .arg(format!("--port={}", free_port()))
        .arg(format!("--healthz-port={}", free_port()))
        .arg("--address=127.0.0.1")
        .env("KUBE_STANDIN_VERSION", "v1.37.1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("kubelet.log")).unwrap());
    let _kubelet = Kubelet(kubelet.spawn().unwrap());
    let kubeconfig = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    let ready = eventually(Duration::from_secs(30), || {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "node", "worker-1", "-o"])
            .arg("jsonpath={.status.conditions[?(@.type==\"Ready\")].status}")
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        anyhow::ensure!(
            text == "True",
            "not ready yet: {text:?} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(text)
    });
    if let Err(e) = ready {
        let log = std::fs::read_to_string(dir.path().join("kubelet.log")).unwrap_or_default();
        panic!("{e:#}\nkubelet:\n{log}");
    }

    // A rerun converges (the request exists, answered; the files are written again).
    let (ok, stderr) = join.run("worker-1");
    assert!(ok, "{stderr}");
    assert!(stderr.contains("exists already"), "{stderr}");

    // Another machine (its own key) asking for the same name is told so.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let (ok, stderr) = Join {
        root: &elsewhere,
        ..join
    }
    .run("worker-1");
    assert!(!ok);
    assert!(
        stderr.contains("join request worker-1 exists already and was not made from here"),
        "{stderr}"
    );
    assert_eq!(files_under(&elsewhere), Vec::<String>::new());
    // ... and one that kept a key of its own gets an answer it cannot open.
    std::fs::create_dir_all(elsewhere.join("etc/oneinfra")).unwrap();
    std::fs::write(elsewhere.join("etc/oneinfra/join.key"), [7u8; 32]).unwrap();
    let (ok, stderr) = Join {
        root: &elsewhere,
        ..join
    }
    .run("worker-1");
    assert!(!ok);
    assert!(stderr.contains("was made by another machine"), "{stderr}");
    assert_eq!(files_under(&elsewhere), ["etc/oneinfra/join.key"]);
    drop(set);
}
