//! Rendered configurations run by the real programs: haproxy checks the ingress's and SIP's
//! load balancers' configurations, etcd serves mutual TLS with the certificates `prepare`
//! issued. Needs the `haproxy`, `etcd` and `etcdctl` binaries (skipped loudly without them,
//! failing under `OI_REQUIRE_REAL=1`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use oi_api::{
    Cluster, ClusterSpec, Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectKey, ObjectMeta,
    PortRange, Resource, World,
};
use oi_planner::render::{RenderOptions, Rendered, render_component};
use oi_testsupport::{have_command, require};
use time::OffsetDateTime;

/// A prepared world whose hypervisors are this machine (127.0.0.1), ports in ranges derived
/// from the process id so that concurrent runs rarely collide.
fn prepared() -> anyhow::Result<World> {
    let base = 21000 + (std::process::id() % 400) * 20;
    let mut w = World::default();
    for (name, public, low) in [
        ("local-private", false, base),
        ("local-public", true, base + 10),
    ] {
        let h = Hypervisor::new(
            ObjectMeta::named(name),
            HypervisorSpec {
                local_cri_endpoint: Some(LocalCriEndpoint {
                    cri_endpoint_path: "/run/containerd/containerd.sock".into(),
                }),
                remote_cri_endpoint: None,
                public,
                ip_address: "127.0.0.1".into(),
                port_range: PortRange { low, high: low + 9 },
                capacity: None,
                unschedulable: false,
                drain: false,
            },
        );
        w.hypervisors.insert(h.key(), h);
    }
    let c = Cluster::new(
        ObjectMeta::named("real"),
        ClusterSpec {
            control_plane_replicas: Some(1),
            ..ClusterSpec::default()
        },
    );
    w.clusters.insert(c.key(), c);
    let p = oi_planner::prepare(w, OffsetDateTime::now_utc());
    if !p.failures.is_empty() {
        bail!("prepare failed: {:?}", p.failures);
    }
    Ok(p.world)
}

/// Writes the rendered files under `root` (host paths re-rooted) and returns a function that
/// re-roots a path or argument the same way.
fn place(rendered: &Rendered, root: &Path) -> anyhow::Result<impl Fn(&str) -> String> {
    let root = root.display().to_string();
    let reroot = move |s: &str| {
        s.replace("/etc/oneinfra/", &format!("{root}/etc/"))
            .replace("/var/lib/oneinfra/", &format!("{root}/var/"))
    };
    for f in &rendered.files {
        let path = reroot(&f.path);
        let parent = Path::new(&path)
            .parent()
            .context("file path has a parent")?;
        std::fs::create_dir_all(parent)?;
        std::fs::write(&path, &f.content).with_context(|| format!("writing {path}"))?;
    }
    Ok(reroot)
}

#[test]
fn rendered_haproxy_configuration_is_valid() -> anyhow::Result<()> {
    if !require(
        "rendered_haproxy_configuration_is_valid",
        "haproxy binary",
        have_command("haproxy"),
    ) {
        return Ok(());
    }
    let w = prepared()?;
    let key = ObjectKey::new("default", "real-ingress");
    let r = render_component(&w, &key, &RenderOptions::default())?;
    let dir = tempfile::tempdir()?;
    let reroot = place(&r, dir.path())?;
    let cfg = r
        .files
        .iter()
        .find(|f| f.path.ends_with("/haproxy.cfg"))
        .context("haproxy.cfg rendered")?;
    let cfg_path = reroot(&cfg.path);
    // The configuration names its CA file by host path: re-root it too.
    let text = reroot(std::str::from_utf8(&cfg.content)?);
    std::fs::write(&cfg_path, text)?;
    let out = Command::new("haproxy")
        .args(["-c", "-f", &cfg_path])
        .output()?;
    assert!(
        out.status.success(),
        "haproxy -c: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn rendered_sip_load_balancer_configurations_are_valid() -> anyhow::Result<()> {
    if !require(
        "rendered_sip_load_balancer_configurations_are_valid",
        "haproxy binary",
        have_command("haproxy"),
    ) {
        return Ok(());
    }
    use oi_planner::sip::services::{control_plane_lb_config, worker_lb_config};
    let backends = [
        ("host-1".to_string(), "10.0.0.1".to_string()),
        ("host-2".to_string(), "fd00::2".to_string()),
    ];
    let dir = tempfile::tempdir()?;
    for (name, cfg) in [
        ("control-plane", control_plane_lb_config(30001, &backends)),
        (
            "worker",
            worker_lb_config(&[30002, 30003, 30004], &backends),
        ),
    ] {
        let path = dir.path().join(format!("{name}.cfg"));
        std::fs::write(&path, &cfg)?;
        let out = Command::new("haproxy")
            .arg("-c")
            .arg("-f")
            .arg(&path)
            .output()?;
        assert!(
            out.status.success(),
            "haproxy -c {name}: {}{}\n{cfg}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Kills the child on drop, so a failing assertion does not leave etcd running.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn etcdctl(
    endpoint: &str,
    ca: &str,
    cert: &str,
    key: &str,
) -> std::io::Result<std::process::Output> {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            &format!("--endpoints={endpoint}"),
            &format!("--cacert={ca}"),
            &format!("--cert={cert}"),
            &format!("--key={key}"),
            "--dial-timeout=2s",
            "--command-timeout=3s",
            "endpoint",
            "health",
        ])
        .output()
}

#[test]
fn rendered_etcd_serves_mutual_tls_with_issued_certificates() -> anyhow::Result<()> {
    if !require(
        "rendered_etcd_serves_mutual_tls_with_issued_certificates",
        "etcd and etcdctl binaries",
        have_command("etcd") && have_command("etcdctl"),
    ) {
        return Ok(());
    }
    let w = prepared()?;
    let key = ObjectKey::new("default", "real-control-plane-0");
    let r = render_component(&w, &key, &RenderOptions::default())?;
    let dir = tempfile::tempdir()?;
    let reroot = place(&r, dir.path())?;
    let etcd = r
        .pods
        .iter()
        .flat_map(|p| &p.containers)
        .find(|c| c.name == "etcd")
        .context("etcd container rendered")?;
    let args: Vec<String> = etcd.args.iter().map(|a| reroot(a)).collect();
    // Its output goes to a file: a pipe nobody reads would block a chatty etcd once full.
    let log_path = dir.path().join("etcd.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new("etcd")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let mut child = Killed(child);
    let port = w.components[&key]
        .status
        .host_port("etcd-client")
        .context("etcd client port")?;
    let endpoint = format!("https://127.0.0.1:{port}");
    let config = reroot("/etc/oneinfra/default/real/real-control-plane-0");
    let file = |name: &str| format!("{config}/{name}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = etcdctl(
            &endpoint,
            &file("etcd-server-ca.crt"),
            &file("apiserver-etcd-client.crt"),
            &file("apiserver-etcd-client.key"),
        )?;
        if out.status.success() {
            break;
        }
        if let Some(status) = child.0.try_wait()? {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("etcd exited with {status}: {log}");
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!(
                "etcd not healthy in time: {}\netcd's log:\n{log}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // A certificate from the peer CA is not a client certificate etcd accepts.
    let out = etcdctl(
        &endpoint,
        &file("etcd-server-ca.crt"),
        &file("etcd-peer.crt"),
        &file("etcd-peer.key"),
    )?;
    assert!(
        !out.status.success(),
        "etcd accepted a peer certificate as client"
    );
    Ok(())
}
