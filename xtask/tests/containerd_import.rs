//! Imports every tarball of the offline image set into a throwaway containerd and runs each
//! image once: the proof that the set works where it is used. Needs root, containerd, ctr and
//! runc, and the tarballs (`cargo xtask images`, done by scripts/setup.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use oi_cri::containerd::{ContainerdConfig, SpawnOptions};
use xtask::catalog::{self, ImageDef, Kind};

const TEST: &str = "containerd_imports_and_runs_every_image";

/// A containerd of our own (oi-cri's launcher): root, state, socket and runc root in a
/// temporary directory, and the containers this test ran in it.
struct Containerd {
    containerd: oi_cri::containerd::Containerd,
    containers: Vec<String>,
    // Last: removed once containerd is gone.
    dir: tempfile::TempDir,
}

/// What a finished command printed.
struct Out {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Out {
    fn check(self, what: &str) -> Result<Self> {
        ensure!(
            self.success,
            "{what} failed\nstdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        Ok(self)
    }
}

impl Containerd {
    fn start(pause_reference: &str) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("oi-img-").tempdir()?;
        let config = ContainerdConfig::in_dir(dir.path(), pause_reference);
        let options = SpawnOptions::in_dir(dir.path());
        let containerd = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(oi_cri::containerd::Containerd::spawn(config, options))
            .context("start containerd")?;
        Ok(Self {
            containerd,
            containers: Vec::new(),
            dir,
        })
    }

    fn socket(&self) -> PathBuf {
        self.containerd.config().socket.clone()
    }

    fn log(&self) -> String {
        self.containerd.log_tail()
    }

    fn runc_root(&self) -> String {
        self.containerd.config().runc_root.display().to_string()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address")
            .arg(self.socket())
            .args(["-n", "k8s.io"])
            .args(args);
        cmd
    }

    /// Runs `ctr args...` with a timeout, output captured through files (no pipe to fill).
    fn ctr(&self, args: &[&str], timeout_secs: u64) -> Result<Out> {
        run_with_timeout(
            self.command(args),
            self.dir.path(),
            Duration::from_secs(timeout_secs),
        )
    }

    /// `ctr run --rm [flags] IMAGE ID args...`
    fn run(&mut self, image: &str, id: &str, flags: &[&str], args: &[&str]) -> Result<Out> {
        self.containers.push(id.to_string());
        let runc_root = self.runc_root();
        let mut all = vec!["run", "--rm", "--runc-root", &runc_root];
        all.extend_from_slice(flags);
        all.extend_from_slice(&[image, id]);
        all.extend_from_slice(args);
        self.ctr(&all, 60)
    }

    /// `ctr run -d [flags] IMAGE ID args...`: the container keeps running.
    fn run_detached(&mut self, image: &str, id: &str, flags: &[&str], args: &[&str]) -> Result<()> {
        self.containers.push(id.to_string());
        let runc_root = self.runc_root();
        let mut all = vec!["run", "-d", "--runc-root", &runc_root];
        all.extend_from_slice(flags);
        all.extend_from_slice(&[image, id]);
        all.extend_from_slice(args);
        self.ctr(&all, 60)?.check(&format!("start {id}"))?;
        Ok(())
    }

    /// The task's status as `ctr task ls` prints it (RUNNING, STOPPED), if listed.
    fn task_status(&self, id: &str) -> Result<Option<String>> {
        let out = self.ctr(&["task", "ls"], 10)?.check("ctr task ls")?;
        Ok(out.stdout.lines().find_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.first() == Some(&id)).then(|| cols.last().unwrap_or(&"").to_string())
        }))
    }

    fn remove(&self, id: &str) {
        // Cleanup is best effort: the container may already be gone.
        let _ = self.ctr(&["task", "kill", "-s", "SIGKILL", id], 10);
        let _ = self.ctr(&["task", "delete", "-f", id], 10);
        let _ = self.ctr(&["container", "delete", id], 10);
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Killing containerd would leave containers running: remove them first.
        for id in std::mem::take(&mut self.containers) {
            self.remove(&id);
        }
        self.containerd.kill();
    }
}

fn run_with_timeout(mut cmd: Command, dir: &Path, timeout: Duration) -> Result<Out> {
    let out_path = tempfile::NamedTempFile::new_in(dir)?;
    let err_path = tempfile::NamedTempFile::new_in(dir)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out_path.reopen()?)
        .stderr(err_path.reopen()?)
        .spawn()
        .with_context(|| format!("spawn {cmd:?}"))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Out {
        success: status.success(),
        stdout: std::fs::read_to_string(out_path.path())?,
        stderr: std::fs::read_to_string(err_path.path())?,
    })
}

fn contains(out: &Out, needle: &str, what: &str) -> Result<()> {
    ensure!(
        out.stdout.contains(needle) || out.stderr.contains(needle),
        "{what}: expected {needle:?} in output\nstdout: {}\nstderr: {}",
        out.stdout,
        out.stderr
    );
    Ok(())
}

fn check_pause(c: &mut Containerd, image: &str) -> Result<()> {
    let out = c
        .run(image, "pause-v", &[], &["/pause", "-v"])?
        .check("pause -v")?;
    contains(&out, "pause", "pause -v")?;
    // The default entrypoint waits for a signal and exits cleanly on SIGTERM.
    c.run_detached(image, "pause-wait", &[], &[])?;
    std::thread::sleep(Duration::from_millis(500));
    ensure!(
        c.task_status("pause-wait")?.as_deref() == Some("RUNNING"),
        "pause exited by itself"
    );
    c.ctr(&["task", "kill", "-s", "SIGTERM", "pause-wait"], 10)?
        .check("kill pause")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.task_status("pause-wait")?.as_deref() == Some("RUNNING") {
        ensure!(Instant::now() < deadline, "pause ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let deleted = c
        .ctr(&["task", "delete", "pause-wait"], 10)?
        .check("task delete")?;
    // `ctr task delete` prints nothing on status 0; a non-zero exit status is printed.
    ensure!(
        !deleted.stdout.contains("status"),
        "pause exit: {}",
        deleted.stdout
    );
    Ok(())
}

fn check_busybox(c: &mut Containerd, image: &str, id: &str) -> Result<()> {
    let script = "set -e; echo aGkK | base64 -d; echo hi | sha256sum; \
                  mkdir -p /tmp/a/b; echo x > /tmp/a/b/f; chmod 600 /tmp/a/b/f; \
                  cat /tmp/a/b/f; rm -r /tmp/a; test ! -e /tmp/a; ip link show lo; sleep 0; \
                  grep -c '^root:' /etc/passwd";
    let out = c
        .run(image, id, &[], &["sh", "-c", script])?
        .check("busybox script")?;
    let expected = "hi\n98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4  -\nx\n";
    ensure!(
        out.stdout.starts_with(expected),
        "busybox output: {}",
        out.stdout
    );
    contains(&out, "lo:", "ip link show lo")?;
    Ok(())
}

fn check_etcd(c: &mut Containerd, image: &str) -> Result<()> {
    let out = c
        .run(image, "etcd-v", &[], &["etcd", "--version"])?
        .check("etcd --version")?;
    contains(&out, "etcd Version:", "etcd --version")?;
    let out = c
        .run(image, "etcdctl-v", &[], &["etcdctl", "version"])?
        .check("etcdctl version")?;
    contains(&out, "etcdctl version:", "etcdctl version")?;
    // The restore job's command (a shim onto etcdctl 3.4 here).
    let out = c
        .run(
            image,
            "etcdutl-help",
            &[],
            &["etcdutl", "snapshot", "restore", "--help"],
        )?
        .check("etcdutl snapshot restore --help")?;
    contains(&out, "--initial-cluster", "etcdutl snapshot restore --help")?;
    // A real member in the container's own network namespace, data in /var/lib/etcd.
    c.run_detached(
        image,
        "etcd-run",
        &[],
        &[
            "etcd",
            "--name=oi-test",
            "--data-dir=/var/lib/etcd",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=oi-test=http://127.0.0.1:2380",
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in 0.. {
        let exec_id = format!("health-{n}");
        let out = c.ctr(
            &[
                "task",
                "exec",
                "--exec-id",
                &exec_id,
                "etcd-run",
                "etcdctl",
                "--endpoints=http://127.0.0.1:2379",
                "endpoint",
                "health",
            ],
            15,
        )?;
        if out.success && (out.stdout + &out.stderr).contains("is healthy") {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "etcd not healthy within 30 s: {}",
            out.stderr
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(())
}

fn check_jump_host(c: &mut Containerd, image: &str) -> Result<()> {
    let out = c
        .run(image, "jump-host-v", &[], &["sshd", "-V"])?
        .check("sshd -V")?;
    contains(&out, "OpenSSH", "sshd -V")?;
    let out = c
        .run(image, "jump-host-tool", &[], &["host", "--help"])?
        .check("host --help")?;
    contains(&out, "reboot", "host --help")?;
    let out = c
        .run(
            image,
            "jump-host-kubectl",
            &[],
            &["kubectl", "version", "--client"],
        )?
        .check("kubectl version --client")?;
    contains(&out, "Client Version", "kubectl version --client")?;
    Ok(())
}

fn check_oidc_provider(c: &mut Containerd, image: &str) -> Result<()> {
    let out = c
        .run(
            image,
            "oidc-provider-help",
            &[],
            &["/usr/local/bin/oi-oidc-provider", "--help"],
        )?
        .check("oi-oidc-provider --help")?;
    contains(&out, "hash-password", "oi-oidc-provider --help")?;
    Ok(())
}

fn check_keepalived(c: &mut Containerd, image: &str) -> Result<()> {
    let out = c
        .run(image, "keepalived-v", &[], &["keepalived", "--version"])?
        .check("keepalived --version")?;
    contains(&out, "Keepalived v", "keepalived --version")?;
    // What its start script uses to find the interface and write the configuration.
    c.run(
        image,
        "keepalived-sh",
        &[],
        &[
            "sh",
            "-c",
            "ip -o -4 addr show | awk '{print $2}' && echo x | sed s/x/y/ && mkdir -p /run/keepalived",
        ],
    )?
    .check("sh -c 'ip | awk; sed; mkdir'")?;
    Ok(())
}

fn check_haproxy(c: &mut Containerd, image: &str) -> Result<()> {
    let out = c
        .run(image, "haproxy-v", &[], &["haproxy", "-v"])?
        .check("haproxy -v")?;
    contains(&out, "HAProxy version", "haproxy -v")?;
    // How the engine tells it to reload.
    c.run(image, "haproxy-sh", &[], &["sh", "-c", "command -v kill"])?
        .check("sh -c 'command -v kill'")?;
    let out = c.run(image, "haproxy-sbin", &[], &["/usr/sbin/haproxy", "-v"])?;
    contains(
        &out.check("/usr/sbin/haproxy -v")?,
        "HAProxy version",
        "/usr/sbin/haproxy",
    )?;

    let cfg_dir = c.dir.path().join("haproxy");
    std::fs::create_dir_all(&cfg_dir)?;
    std::fs::write(
        cfg_dir.join("haproxy.cfg"),
        "global\n  log stdout format raw local0\n\
         defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n\
         frontend apiserver\n  bind 127.0.0.1:6443\n  default_backend apiservers\n\
         backend apiservers\n  server a 127.0.0.1:16443 check\n",
    )?;
    let mount = format!(
        "type=bind,src={},dst=/usr/local/etc/haproxy,options=rbind:ro",
        cfg_dir.display()
    );
    let flags = ["--mount", mount.as_str()];
    let out = c.run(
        image,
        "haproxy-c",
        &flags,
        &["haproxy", "-c", "-f", "/usr/local/etc/haproxy/haproxy.cfg"],
    )?;
    contains(&out.check("haproxy -c")?, "valid", "haproxy -c")?;
    // The image's default command: haproxy -f /usr/local/etc/haproxy/haproxy.cfg, as root.
    c.run_detached(image, "haproxy-run", &flags, &[])?;
    std::thread::sleep(Duration::from_millis(1500));
    ensure!(
        c.task_status("haproxy-run")?.as_deref() == Some("RUNNING"),
        "haproxy stopped; containerd log:\n{}",
        c.log()
    );
    Ok(())
}

fn check_wireguard(c: &mut Containerd, image: &str) -> Result<()> {
    let out = c
        .run(
            image,
            "vpn-endpoint-v",
            &[],
            &["oi-vpn-endpoint", "--version"],
        )?
        .check("oi-vpn-endpoint --version")?;
    contains(&out, "oi-vpn-endpoint", "oi-vpn-endpoint --version")?;
    let out = c
        .run(image, "wg-v", &[], &["wg", "--version"])?
        .check("wg --version")?;
    contains(&out, "wireguard-tools", "wg --version")?;
    let out = c.run(image, "wggo-v", &[], &["wireguard-go", "--version"])?;
    contains(
        &out.check("wireguard-go --version")?,
        "wireguard-go",
        "wireguard-go",
    )?;
    // A real userspace interface in the container's own network namespace (needs /dev/net/tun).
    let script = "set -e; wireguard-go oiimgtest0; wg show oiimgtest0; ip link show oiimgtest0";
    let out = c.run(image, "wg-up", &["--privileged"], &["sh", "-c", script])?;
    contains(
        &out.check("wireguard-go up")?,
        "oiimgtest0",
        "wireguard-go up",
    )?;
    Ok(())
}

fn check_kube(c: &mut Containerd, def: &ImageDef, component: &str, version: &str) -> Result<()> {
    let id = format!("{component}-{}", version.replace('.', "-"));
    let out = c.run(&def.reference(), &id, &[], &[component, "--version"])?;
    contains(
        &out.check(&format!("{component} --version"))?,
        &format!("v{version}"),
        component,
    )?;
    Ok(())
}

#[test]
fn containerd_imports_and_runs_every_image() -> Result<()> {
    if !oi_testsupport::require_root_and_commands(TEST, &["containerd", "ctr", "runc"]) {
        return Ok(());
    }
    let dir = xtask::default_images_dir();
    let defs = catalog::catalog();
    let missing: Vec<String> = defs
        .iter()
        .map(|d| dir.join(d.file_name()))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !oi_testsupport::require(
        TEST,
        &format!(
            "image tarballs (cargo xtask images): {}",
            missing.join(", ")
        ),
        missing.is_empty(),
    ) {
        return Ok(());
    }

    let pause = defs
        .iter()
        .find(|d| d.kind == Kind::Pause)
        .context("no pause image in the catalog")?
        .reference();
    let mut c = Containerd::start(&pause)?;
    for def in &defs {
        let file = dir.join(def.file_name());
        let out = c
            .ctr(&["images", "import", &file.display().to_string()], 120)?
            .check(&format!("import {}", file.display()))?;
        contains(&out, &def.reference(), "ctr images import")?;
    }
    let listed = c.ctr(&["images", "ls", "-q"], 10)?.check("images ls")?;
    for def in &defs {
        ensure!(
            listed.stdout.lines().any(|l| l == def.reference()),
            "{} not listed after import:\n{}",
            def.reference(),
            listed.stdout
        );
    }

    for def in &defs {
        let image = def.reference();
        let result = match def.kind {
            Kind::Pause => check_pause(&mut c, &image),
            Kind::Busybox => check_busybox(&mut c, &image, "busybox"),
            Kind::Etcd => check_etcd(&mut c, &image),
            Kind::Haproxy => check_haproxy(&mut c, &image),
            Kind::Keepalived => check_keepalived(&mut c, &image),
            Kind::JumpHost => check_jump_host(&mut c, &image),
            Kind::OidcProvider => check_oidc_provider(&mut c, &image),
            Kind::VpnEndpoint => check_busybox(&mut c, &image, "wg-busybox")
                .and_then(|()| check_wireguard(&mut c, &image)),
            Kind::Kube { component, version } => check_kube(&mut c, def, component, version),
            Kind::Manager => Err(anyhow::anyhow!("the manager image is not in the catalog")),
        };
        result.with_context(|| format!("image {image}"))?;
        eprintln!("ok {image}");
    }
    Ok(())
}
