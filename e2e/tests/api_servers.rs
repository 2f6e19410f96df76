//! API servers scaled apart (`spec.apiServerReplicas`, ours): a cluster of one control plane
//! replica and three API servers. The two beyond the replica run alone (kube-apiserver and
//! nothing else) on the other private hypervisors, behind the ingress, on the replica's etcd:
//! an object written through one is read through another, and the ingress balances all three.
//! Every container runs with the CPU weight and memory limit the versions table gives it.
//! Fewer again: the API servers alone leave, nothing of them left on their hypervisors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use oi_e2e::{
    LocalSet, World, admin_kubeconfig, eventually, kubectl, prerequisites, reconcile_until_ready,
    str_at,
};

/// The component's hypervisor and its API server's `https://ip:port`.
fn served_at(world: &World, set: &LocalSet, component: &str) -> (String, String) {
    let c = world
        .of_kind("Component")
        .find(|c| str_at(c, &["metadata", "name"]) == Some(component))
        .unwrap_or_else(|| panic!("no component {component}"));
    let hypervisor = world.hypervisor_of(component).unwrap().to_string();
    let port = oi_e2e::at(c, &["status", "allocatedHostPorts"])
        .and_then(|p| p.as_sequence())
        .into_iter()
        .flatten()
        .find(|p| str_at(p, &["name"]) == Some("apiserver"))
        .and_then(|p| oi_e2e::at(p, &["port"]))
        .and_then(serde_yaml_ng::Value::as_u64)
        .unwrap();
    let ip = set
        .state()
        .unwrap()
        .hypervisors
        .iter()
        .find(|h| h.name == hypervisor)
        .map(|h| h.ip)
        .unwrap();
    (hypervisor, format!("https://{ip}:{port}"))
}

/// A copy of `kubeconfig` that talks to `server` instead of the ingress.
fn straight_to(kubeconfig: &Path, server: &str, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("server:") {
                format!("    server: {server}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = kubeconfig.with_file_name(name);
    oi_e2e::write_private(&path, &text).unwrap();
    path
}

/// The containers' images on `hypervisor`, pod sandboxes (`pause`) left out.
fn images_on(set: &LocalSet, hypervisor: &str) -> Vec<String> {
    let mut images = set.container_images(hypervisor).unwrap();
    images.retain(|image| !image.contains("/pause:"));
    images
}

/// The CPU weight and memory limit (`cpu.shares`, `memory.limit_in_bytes`) of the cgroup of
/// the container on `hypervisor` whose image names `image`, as the kernel holds them.
fn cgroup_limits(set: &LocalSet, hypervisor: &str, image: &str) -> (u64, u64) {
    let state = set.state().unwrap();
    let socket = &state
        .hypervisors
        .iter()
        .find(|h| h.name == hypervisor)
        .unwrap()
        .socket;
    let ctr = |args: &[&str]| {
        oi_e2e::run_command(
            std::process::Command::new("ctr")
                .arg("--address")
                .arg(socket)
                .args(["-n", "k8s.io"])
                .args(args),
            "",
        )
        .unwrap()
        .ok("ctr")
        .unwrap()
        .stdout
    };
    let containers = ctr(&["containers", "ls"]);
    let id = containers
        .lines()
        .find(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|i| i.contains(image))
        })
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {image} container on {hypervisor}:\n{containers}"))
        .to_string();
    let tasks = ctr(&["tasks", "ls"]);
    let pid = tasks
        .lines()
        .find(|l| l.starts_with(&id))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no task {id}:\n{tasks}"))
        .to_string();
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path_of = |controller: &str| {
        cgroups
            .lines()
            .find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then(|| path.to_string())
            })
            .unwrap_or_else(|| panic!("no {controller} cgroup in\n{cgroups}"))
    };
    let read = |file: String| -> u64 {
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .trim()
            .parse()
            .unwrap()
    };
    (
        read(format!("/sys/fs/cgroup/cpu{}/cpu.shares", path_of("cpu"))),
        read(format!(
            "/sys/fs/cgroup/memory{}/memory.limit_in_bytes",
            path_of("memory")
        )),
    )
}

#[test]
fn api_servers_beyond_the_replicas_serve_alone_behind_the_ingress() {
    let test = "api_servers_beyond_the_replicas_serve_alone_behind_the_ingress";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("aps", 3, 1, false).unwrap();
    let injected = oi_e2e::inject_cluster_with(
        &set.manifests,
        "c1",
        &[
            "--control-plane-replicas",
            "1",
            "--api-server-replicas",
            "3",
        ],
    )
    .unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let roles: Vec<(String, String)> = world
        .components_of("c1")
        .map(|c| {
            (
                str_at(c, &["metadata", "name"]).unwrap().to_string(),
                str_at(c, &["spec", "role"]).unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("c1-apiserver-0".into(), "control-plane-apiserver".into()),
            ("c1-apiserver-1".into(), "control-plane-apiserver".into()),
            ("c1-control-plane-0".into(), "control-plane".into()),
            ("c1-ingress".into(), "control-plane-ingress".into()),
        ]
    );
    let (replica_host, _) = served_at(&world, &set, "c1-control-plane-0");
    let (host0, url0) = served_at(&world, &set, "c1-apiserver-0");
    let (host1, url1) = served_at(&world, &set, "c1-apiserver-1");
    let mut hosts = vec![replica_host.clone(), host0.clone(), host1.clone()];
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "one API server per private hypervisor");
    // kube-apiserver alone there.
    for h in [&host0, &host1] {
        let images = images_on(&set, h);
        assert_eq!(images.len(), 1, "{h}: {images:?}");
        assert!(images[0].contains("kube-apiserver"), "{h}: {images:?}");
    }
    // Its CPU weight and memory limit, and the replica's etcd's, as the kernel holds them:
    // what the versions table asks (250m: 256 shares; 512 MiB, four times over).
    assert_eq!(
        cgroup_limits(&set, &host0, "kube-apiserver"),
        (256, 2048 << 20)
    );
    assert_eq!(
        cgroup_limits(&set, &replica_host, "/etcd:"),
        (102, 1024 << 20)
    );

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let via0 = straight_to(&kubeconfig, &url0, "via0");
    let via1 = straight_to(&kubeconfig, &url1, "via1");
    for k in [&kubeconfig, &via0, &via1] {
        eventually(Duration::from_secs(20), || {
            kubectl(k, &["get", "--raw", "/readyz"])?.ok("readyz")
        })
        .unwrap();
    }
    // One etcd behind all of them.
    kubectl(
        &via0,
        &["create", "configmap", "apart", "--from-literal=k=v"],
    )
    .unwrap()
    .ok("create through c1-apiserver-0")
    .unwrap();
    let got = kubectl(
        &via1,
        &["get", "configmap", "apart", "-o", "jsonpath={.data.k}"],
    )
    .unwrap()
    .ok("get through c1-apiserver-1")
    .unwrap();
    assert_eq!(got.stdout, "v");
    // The ingress balances the three.
    let cfg = std::fs::read_to_string(
        set.etc_oneinfra(&served_at(&world, &set, "c1-ingress").0)
            .join("default/c1/c1-ingress/haproxy.cfg"),
    )
    .unwrap();
    for name in ["c1-apiserver-0", "c1-apiserver-1", "c1-control-plane-0"] {
        assert!(cfg.contains(&format!("server {name} ")), "{name}:\n{cfg}");
    }

    // As many as the replicas: the API servers alone leave.
    let fewer = world
        .with_spec_field("c1", "apiServerReplicas", 1.into())
        .unwrap();
    let (run, _, _) = reconcile_until_ready(&fewer, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    assert_eq!(world.components_of("c1").count(), 2);
    for h in [&host0, &host1] {
        assert_eq!(images_on(&set, h), Vec::<String>::new(), "{h}");
    }
    let got = kubectl(
        &kubeconfig,
        &["get", "configmap", "apart", "-o", "jsonpath={.data.k}"],
    )
    .unwrap()
    .ok("get through the ingress")
    .unwrap();
    assert_eq!(got.stdout, "v");
    drop(set);
}
