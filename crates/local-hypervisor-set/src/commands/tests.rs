//! `create` and `destroy` against a recording fake [`System`]: what they do to the machine,
//! in which order, and what they leave alone.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use ipnet::Ipv4Net;

use super::create::{CreateArgs, create_with};
use super::destroy::{DestroyOutcome, destroy_with};
use crate::error::{Error, Result};
use crate::front::FrontCredentials;
use crate::plan;
use crate::state::{HypervisorPaths, NatState, Paths, Phase, SetState, WorkerState};
use crate::system::System;

/// Records every mutating call; keeps just enough state (namespaces, links, live PIDs) for
/// the queries `create` and `destroy` make. `fail` makes the first call starting with it fail.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<String>>,
    imports: Mutex<Vec<String>>,
    fail: Option<&'static str>,
    netns: Mutex<BTreeSet<String>>,
    links: Mutex<BTreeSet<String>>,
    alive: Mutex<BTreeSet<u32>>,
    next_pid: Mutex<u32>,
    host_nets: Vec<Ipv4Net>,
}

impl Fake {
    fn record(&self, call: String) -> Result<()> {
        let failing = self.fail.is_some_and(|f| call.starts_with(f));
        self.calls.lock().unwrap().push(call.clone());
        if failing {
            return Err(Error::Io {
                path: PathBuf::from(call),
                source: std::io::Error::other("injected failure"),
            });
        }
        Ok(())
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn spawn(&self) -> u32 {
        let mut next = self.next_pid.lock().unwrap();
        *next += 1;
        let pid = 1000 + *next;
        self.alive.lock().unwrap().insert(pid);
        pid
    }
}

impl System for Fake {
    fn host_ipv4_networks(&self) -> Result<Vec<Ipv4Net>> {
        Ok(self.host_nets.clone())
    }

    fn host_links(&self) -> Result<Vec<String>> {
        Ok(self.links.lock().unwrap().iter().cloned().collect())
    }

    fn link_exists(&self, name: &str) -> bool {
        self.links.lock().unwrap().contains(name)
    }

    fn netns_names(&self) -> Result<Vec<String>> {
        Ok(self.netns.lock().unwrap().iter().cloned().collect())
    }

    fn create_bridge(&self, name: &str, gateway: Ipv4Addr, subnet: Ipv4Net) -> Result<()> {
        self.record(format!("bridge {name} {gateway} {subnet}"))?;
        self.links.lock().unwrap().insert(name.to_string());
        Ok(())
    }

    fn create_hypervisor_network(
        &self,
        netns: &str,
        host_veth: &str,
        bridge: &str,
        ip: Ipv4Addr,
        _subnet: Ipv4Net,
        _gateway: Ipv4Addr,
    ) -> Result<()> {
        self.record(format!("network {netns} {host_veth}@{bridge} {ip}"))?;
        self.netns.lock().unwrap().insert(netns.to_string());
        self.links.lock().unwrap().insert(host_veth.to_string());
        Ok(())
    }

    fn create_nat_router(&self, nat: &NatState, bridge: &str, _subnet: Ipv4Net) -> Result<()> {
        self.record(format!(
            "router {} {}@{bridge} {} lan {}",
            nat.router, nat.router_veth, nat.uplink_ip, nat.lan
        ))?;
        self.netns.lock().unwrap().insert(nat.router.clone());
        self.links.lock().unwrap().insert(nat.router_veth.clone());
        Ok(())
    }

    fn create_worker_network(&self, nat: &NatState, worker: &WorkerState) -> Result<()> {
        self.record(format!(
            "worker {} {}@{} {}",
            worker.name, worker.router_port, nat.router, worker.ip
        ))?;
        self.netns.lock().unwrap().insert(worker.name.clone());
        Ok(())
    }

    fn delete_netns(&self, name: &str) -> Result<()> {
        self.record(format!("delete netns {name}"))?;
        self.netns.lock().unwrap().remove(name);
        Ok(())
    }

    fn host_reached_addresses(&self) -> Result<Vec<Ipv4Addr>> {
        Ok(vec![Ipv4Addr::new(10, 255, 255, 53)])
    }

    fn ensure_unreachable(&self, routes: &[Ipv4Net]) -> Result<()> {
        self.record(format!("unreachable {} routes", routes.len()))
    }

    fn delete_link(&self, name: &str) -> Result<()> {
        self.record(format!("delete link {name}"))?;
        self.links.lock().unwrap().remove(name);
        Ok(())
    }

    fn start_containerd(&self, netns: &str, _paths: &HypervisorPaths) -> Result<u32> {
        self.record(format!("containerd {netns}"))?;
        Ok(self.spawn())
    }

    fn wait_containerd(&self, hypervisor: &str, pid: u32, _: &HypervisorPaths) -> Result<()> {
        self.record(format!("wait {hypervisor} {pid}"))
    }

    fn import_images(&self, socket: &Path, tarballs: &[PathBuf]) -> Result<()> {
        let hv = socket
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.imports
            .lock()
            .unwrap()
            .push(format!("{hv} {}", tarballs.len()));
        self.record("import".to_string())
    }

    fn start_front(
        &self,
        hypervisor: &str,
        _paths: &HypervisorPaths,
        ip: Ipv4Addr,
        port: u16,
    ) -> Result<FrontCredentials> {
        self.record(format!("front {hypervisor} {ip}:{port}"))?;
        Ok(FrontCredentials {
            uri: format!("tcp://{ip}:{port}"),
            server_ca_pem: format!("server ca of {hypervisor}"),
            client_cert_pem: format!("client certificate of {hypervisor}"),
            client_key_pem: format!("client key of {hypervisor}"),
        })
    }

    fn remove_all_pods(&self, hypervisor: &str, _socket: &Path) -> Result<usize> {
        self.record(format!("remove pods {hypervisor}"))?;
        Ok(1)
    }

    fn alive_with(&self, pid: u32, _marker: &str) -> bool {
        self.alive.lock().unwrap().contains(&pid)
    }

    fn terminate(&self, pids: &[u32], _grace: Duration) -> Result<Vec<u32>> {
        self.record(format!("terminate {pids:?}"))?;
        let mut alive = self.alive.lock().unwrap();
        for pid in pids {
            alive.remove(pid);
        }
        Ok(Vec::new())
    }

    fn pids_mentioning(&self, _markers: &[String]) -> Vec<u32> {
        Vec::new()
    }

    fn pids_in_netns(&self, _netns: &str) -> Vec<u32> {
        Vec::new()
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    paths: Paths,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            lib: dir.path().join("lib"),
            run: dir.path().join("run"),
        };
        std::fs::create_dir_all(dir.path().join("images")).unwrap();
        for tar in ["a.tar", "b.tar"] {
            std::fs::write(dir.path().join("images").join(tar), b"").unwrap();
        }
        Fixture { dir, paths }
    }

    fn args(&self, tcp: bool) -> CreateArgs {
        CreateArgs {
            name: "demo".into(),
            private: 1,
            public: 1,
            tcp,
            images_dir: self.dir.path().join("images"),
            workers: 0,
        }
    }

    fn create(&self, sys: &Fake, tcp: bool) -> (Result<Vec<oi_api::Hypervisor>>, String) {
        let mut out = Vec::new();
        let result = create_with(sys, &self.paths, &self.args(tcp), &mut out, &mut Vec::new());
        (result, String::from_utf8(out).unwrap())
    }
}

fn slot_net() -> (String, Ipv4Net) {
    let slot = plan::choose_slot("demo", |_| false).unwrap();
    (format!("ohs{slot:04x}"), plan::subnet_of_slot(slot))
}

#[test]
fn create_then_destroy_in_order() {
    let fx = Fixture::new();
    let sys = Fake::default();
    let (result, out) = fx.create(&sys, false);
    let hypervisors = result.unwrap();
    assert_eq!(hypervisors.len(), 2);
    assert_eq!(
        oi_api::World::load(&out, "out").unwrap().hypervisors.len(),
        2
    );

    let (bridge, net) = slot_net();
    let ip = |n: u32| Ipv4Addr::from(u32::from(net.network()) + n);
    assert_eq!(
        sys.calls(),
        [
            "unreachable 15 routes".into(),
            format!("bridge {bridge} {} {net}", ip(1)),
            format!("network demo-private-1 {bridge}v1@{bridge} {}", ip(2)),
            format!("network demo-public-1 {bridge}v2@{bridge} {}", ip(3)),
            "containerd demo-private-1".into(),
            "containerd demo-public-1".into(),
            "wait demo-private-1 1001".into(),
            "wait demo-public-1 1002".into(),
            "import".into(),
            "import".into(),
        ]
    );
    let mut imports = sys.imports.lock().unwrap().clone();
    imports.sort();
    assert_eq!(imports, ["demo-private-1 2", "demo-public-1 2"]);
    let state = SetState::load(&fx.paths, "demo").unwrap().unwrap();
    assert_eq!(state.phase, Phase::Ready);
    assert_eq!(state.hypervisors[1].containerd_pid, Some(1002));

    sys.calls.lock().unwrap().clear();
    let outcome = destroy_with(&sys, &fx.paths, "demo", &mut Vec::new()).unwrap();
    assert_eq!(outcome, DestroyOutcome::Destroyed);
    assert_eq!(
        sys.calls(),
        [
            // Pods first, while containerd still runs; then the processes; then the network.
            "remove pods demo-private-1".to_string(),
            "remove pods demo-public-1".into(),
            "terminate [1001, 1002]".into(),
            "delete netns demo-private-1".into(),
            "delete netns demo-public-1".into(),
            format!("delete link {bridge}v1"),
            format!("delete link {bridge}v2"),
            format!("delete link {bridge}"),
        ]
    );
    assert!(!fx.paths.set_lib("demo").exists());
    assert!(!fx.paths.set_run("demo").exists());

    // Again: nothing left, nothing done.
    sys.calls.lock().unwrap().clear();
    let outcome = destroy_with(&sys, &fx.paths, "demo", &mut Vec::new()).unwrap();
    assert_eq!(outcome, DestroyOutcome::NothingToDo);
    assert!(sys.calls().is_empty());
}

#[test]
fn tcp_sets_get_a_front_per_hypervisor_and_destroy_removes_it() {
    let fx = Fixture::new();
    let sys = Fake::default();
    let (result, _) = fx.create(&sys, true);
    let hypervisors = result.unwrap();
    let (_, net) = slot_net();
    let ip = |n: u32| Ipv4Addr::from(u32::from(net.network()) + n);
    let calls = sys.calls();
    // The fronts start together, last, in no particular order.
    let mut fronts = calls[calls.len() - 2..].to_vec();
    fronts.sort();
    assert_eq!(
        fronts,
        [
            format!("front demo-private-1 {}:27000", ip(2)),
            format!("front demo-public-1 {}:27000", ip(3)),
        ]
    );
    for h in &hypervisors {
        let remote = h.spec.remote_cri_endpoint.as_ref().unwrap();
        assert_eq!(
            remote.cri_endpoint_uri,
            format!("tcp://{}:27000", h.spec.ip_address)
        );
        // The manifest carries what the front gave (its PKI: oi_cri_front's tests).
        let name = &h.metadata.name;
        let client = remote.client_certificate.as_ref().unwrap();
        assert_eq!(remote.ca_certificate, format!("server ca of {name}"));
        assert_eq!(client.certificate, format!("client certificate of {name}"));
        assert_eq!(client.private_key, format!("client key of {name}"));
    }
    // The manifests kept beside the state hold client keys: owner only.
    let kept = fx.paths.set_lib("demo").join("hypervisors.yaml");
    let mode = std::os::unix::fs::PermissionsExt::mode(&kept.metadata().unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    sys.calls.lock().unwrap().clear();
    destroy_with(&sys, &fx.paths, "demo", &mut Vec::new()).unwrap();
    // The fronts are pods (removed through CRI with the others): only the containerds are
    // terminated.
    assert!(
        sys.calls()
            .contains(&"remove pods demo-private-1".to_string()),
        "{:?}",
        sys.calls()
    );
    assert!(
        sys.calls().contains(&"terminate [1001, 1002]".to_string()),
        "{:?}",
        sys.calls()
    );
}

#[test]
fn failure_halfway_removes_what_was_created() {
    let fx = Fixture::new();
    let sys = Fake {
        fail: Some("import"),
        ..Fake::default()
    };
    let (result, out) = fx.create(&sys, false);
    assert!(matches!(result, Err(Error::Io { .. })), "{result:?}");
    assert!(out.is_empty());
    let calls = sys.calls();
    let (bridge, _) = slot_net();
    let tail: Vec<_> = calls
        .iter()
        .skip_while(|c| !c.starts_with("remove pods"))
        .cloned()
        .collect();
    assert_eq!(
        tail,
        [
            "remove pods demo-private-1".to_string(),
            "remove pods demo-public-1".into(),
            "terminate [1001, 1002]".into(),
            "delete netns demo-private-1".into(),
            "delete netns demo-public-1".into(),
            format!("delete link {bridge}v1"),
            format!("delete link {bridge}v2"),
            format!("delete link {bridge}"),
        ]
    );
    assert!(sys.netns.lock().unwrap().is_empty());
    assert!(sys.links.lock().unwrap().is_empty());
    assert!(!fx.paths.set_lib("demo").exists());
}

#[test]
fn existing_sets_are_left_untouched() {
    let fx = Fixture::new();
    let sys = Fake::default();
    fx.create(&sys, false).0.unwrap();
    let before = SetState::load(&fx.paths, "demo").unwrap();
    sys.calls.lock().unwrap().clear();
    let (result, out) = fx.create(&sys, false);
    assert!(
        matches!(result, Err(Error::AlreadyExists { .. })),
        "{result:?}"
    );
    assert!(out.is_empty());
    assert!(sys.calls().is_empty());
    assert_eq!(SetState::load(&fx.paths, "demo").unwrap(), before);

    // A namespace of the set without any state counts too.
    let fx = Fixture::new();
    let sys = Fake::default();
    sys.netns.lock().unwrap().insert("demo-public-1".into());
    let (result, _) = fx.create(&sys, false);
    assert!(
        matches!(result, Err(Error::AlreadyExists { .. })),
        "{result:?}"
    );
    assert!(sys.calls().is_empty());
}

#[test]
fn subnet_already_on_the_host_is_skipped() {
    let fx = Fixture::new();
    let (bridge, net) = slot_net();
    let sys = Fake {
        host_nets: vec![net],
        ..Fake::default()
    };
    fx.create(&sys, false).0.unwrap();
    let state = SetState::load(&fx.paths, "demo").unwrap().unwrap();
    assert_ne!(state.subnet, net);
    assert_ne!(state.bridge, bridge);
}

#[test]
fn destroy_skips_cri_for_a_dead_containerd_and_removes_leftover_namespaces() {
    let fx = Fixture::new();
    let sys = Fake::default();
    fx.create(&sys, false).0.unwrap();
    // containerd died on its own; and an unrecorded namespace of the set exists.
    sys.alive.lock().unwrap().clear();
    sys.netns.lock().unwrap().insert("demo-private-7".into());
    sys.netns.lock().unwrap().insert("demo-privateer-1".into());
    sys.calls.lock().unwrap().clear();
    destroy_with(&sys, &fx.paths, "demo", &mut Vec::new()).unwrap();
    let calls = sys.calls();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("remove pods") || c.starts_with("terminate"))
    );
    assert!(calls.contains(&"delete netns demo-private-7".to_string()));
    assert_eq!(
        sys.netns.lock().unwrap().iter().collect::<Vec<_>>(),
        ["demo-privateer-1"]
    );
}

#[test]
fn workers_sit_behind_a_router_get_a_containerd_and_no_images_and_all_goes_on_destroy() {
    let fx = Fixture::new();
    let sys = Fake::default();
    let args = CreateArgs {
        workers: 2,
        ..fx.args(false)
    };
    let mut out = Vec::new();
    let hypervisors = create_with(&sys, &fx.paths, &args, &mut out, &mut Vec::new()).unwrap();
    // Workers are not hypervisors: the manifests hold the two hypervisors only.
    assert_eq!(hypervisors.len(), 2);
    let state = SetState::load(&fx.paths, "demo").unwrap().unwrap();
    let nat = state.nat.clone().unwrap();
    assert_ne!(nat.lan, state.subnet);
    let (bridge, net) = slot_net();
    let ip = |n: u32| Ipv4Addr::from(u32::from(net.network()) + n);
    let lan = |n: u32| Ipv4Addr::from(u32::from(nat.lan.network()) + n);
    assert_eq!(
        sys.calls()[1..11],
        [
            format!("bridge {bridge} {} {net}", ip(1)),
            format!("network demo-private-1 {bridge}v1@{bridge} {}", ip(2)),
            format!("network demo-public-1 {bridge}v2@{bridge} {}", ip(3)),
            format!(
                "router demo-router {bridge}r@{bridge} {} lan {}",
                ip(254),
                nat.lan
            ),
            format!("worker demo-worker-1 w1@demo-router {}", lan(2)),
            format!("worker demo-worker-2 w2@demo-router {}", lan(3)),
            "containerd demo-private-1".into(),
            "containerd demo-public-1".into(),
            "containerd demo-worker-1".into(),
            "containerd demo-worker-2".into(),
        ]
    );
    assert_eq!(nat.workers[1].containerd_pid, Some(1004));
    assert_eq!(
        nat.workers[0].socket,
        fx.paths.run.join("demo/demo-worker-1/cri.sock")
    );
    // Images go to hypervisors only.
    let mut imports = sys.imports.lock().unwrap().clone();
    imports.sort();
    assert_eq!(imports, ["demo-private-1 2", "demo-public-1 2"]);

    sys.calls.lock().unwrap().clear();
    destroy_with(&sys, &fx.paths, "demo", &mut Vec::new()).unwrap();
    let calls = sys.calls();
    assert!(
        calls.contains(&"terminate [1001, 1002, 1003, 1004]".to_string()),
        "{calls:?}"
    );
    for gone in [
        "delete netns demo-worker-1".to_string(),
        "delete netns demo-worker-2".into(),
        "delete netns demo-router".into(),
        format!("delete link {bridge}r"),
    ] {
        assert!(calls.contains(&gone), "{gone} missing: {calls:?}");
    }
    assert!(sys.netns.lock().unwrap().is_empty());
    assert!(sys.links.lock().unwrap().is_empty());
}
