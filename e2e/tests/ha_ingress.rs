//! HA ingress (`spec.ingress`, ours): a cluster with two ingresses on two public hypervisors
//! sharing one address (VRRP, real keepalived). The hypervisor holding the address loses its
//! containerd and its own address: its keepalived's health check fails, the shared address
//! moves to the other, and `kubectl` through the cluster's address works again. Then that one
//! is lost altogether (its link down): the address comes back to the first. The times are
//! printed (the README's figures), not asserted: a timed assertion would flake on a loaded
//! machine.

use std::time::{Duration, Instant};

use oi_e2e::{
    LocalSet, World, admin_kubeconfig, eventually, kubectl, prerequisites, reconcile_until_ready,
    str_at,
};

/// The public hypervisors whose network namespace holds `address`.
fn holders(set: &LocalSet, hypervisors: &[String], address: &str) -> Vec<String> {
    hypervisors
        .iter()
        .filter(|h| {
            set.run_on(h, &["ip", "-o", "-4", "addr", "show"])
                .ok()
                .is_some_and(|r| r.stdout.contains(&format!("inet {address}/32")))
        })
        .cloned()
        .collect()
}

/// The VRRP state keepalived on `hypervisor` last said it entered (its container log).
fn vrrp_state(set: &LocalSet, hypervisor: &str) -> Option<String> {
    let found = oi_e2e::files_under(&set.var_log_oneinfra(hypervisor));
    found
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "keepalived.log"))
        .find_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let line = text.lines().rev().find(|l| l.contains(") Entering "))?;
            let state = line
                .split(") Entering ")
                .nth(1)?
                .split_whitespace()
                .next()?;
            Some(state.to_string())
        })
}

/// The set's two public hypervisors, and an unused address of its network (`.200`) for the
/// ingresses to share.
fn publics_and_address(set: &LocalSet) -> (Vec<String>, String) {
    let state = set.state().unwrap();
    let publics: Vec<String> = state
        .hypervisors
        .iter()
        .filter(|h| h.name.contains("-public-"))
        .map(|h| h.name.clone())
        .collect();
    assert_eq!(publics.len(), 2, "{publics:?}");
    let mut octets = state.hypervisors[0].ip.octets();
    octets[3] = 200;
    (publics, std::net::Ipv4Addr::from(octets).to_string())
}

/// Brings a lost hypervisor back when the test ends, however it ends (its address, its
/// link, its containerd), so that the set can be destroyed.
struct Revive<'s> {
    set: &'s LocalSet,
    hypervisor: String,
    /// `ip addr add` arguments of its address (`A.B.C.D/N dev IFACE`), once removed.
    address: Option<Vec<String>>,
    veth: Option<String>,
}

impl Drop for Revive<'_> {
    fn drop(&mut self) {
        if let Some(veth) = &self.veth {
            let _ = std::process::Command::new("ip")
                .args(["link", "set", veth, "up"])
                .status();
        }
        if let Some(address) = &self.address {
            let mut args = vec!["ip", "addr", "add"];
            args.extend(address.iter().map(String::as_str));
            let _ = self.set.run_on(&self.hypervisor, &args);
        }
        if let Err(e) = self.set.restart_containerd(&self.hypervisor) {
            eprintln!("cannot restart containerd on {}: {e:#}", self.hypervisor);
        }
    }
}

/// Loses `hypervisor` altogether: its containerd killed, then its link down; it comes back
/// when the returned guard is dropped. Returns the guard and when its link went down.
fn lose_link<'s>(set: &'s LocalSet, hypervisor: &str) -> (Revive<'s>, Instant) {
    let veth = set
        .state()
        .unwrap()
        .hypervisors
        .iter()
        .find(|h| h.name == hypervisor)
        .unwrap()
        .host_veth
        .clone();
    let revive = Revive {
        set,
        hypervisor: hypervisor.to_string(),
        address: None,
        veth: Some(veth.clone()),
    };
    set.kill_containerd(hypervisor).unwrap();
    let lost = Instant::now();
    oi_e2e::run_command(
        std::process::Command::new("ip").args(["link", "set", &veth, "down"]),
        "",
    )
    .unwrap()
    .ok("ip link set down")
    .unwrap();
    (revive, lost)
}

/// Waits for `hypervisor` alone to hold `address`, then for `kubectl` through it; prints and
/// returns the times since `since`.
fn moved_to(
    set: &LocalSet,
    publics: &[String],
    hypervisor: &str,
    address: &str,
    readyz: &dyn Fn() -> anyhow::Result<oi_e2e::Run>,
    since: Instant,
) -> (Duration, Duration) {
    eventually(Duration::from_secs(30), || {
        let h = holders(set, publics, address);
        anyhow::ensure!(h == [hypervisor], "holders of {address}: {h:?}");
        Ok(())
    })
    .unwrap();
    let moved = since.elapsed();
    eventually(Duration::from_secs(30), readyz).unwrap();
    (moved, since.elapsed())
}

#[test]
fn the_clusters_address_survives_the_loss_of_a_public_hypervisor() {
    let test = "the_clusters_address_survives_the_loss_of_a_public_hypervisor";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("hai", 1, 2, false).unwrap();
    let state = set.state().unwrap();
    let (publics, vip) = publics_and_address(&set);
    let injected = oi_e2e::inject_cluster_with(
        &set.manifests,
        "c1",
        &["--ingress-replicas", "2", "--ingress-virtual-ip", &vip],
    )
    .unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let endpoint = str_at(
        world.require_cluster("c1").unwrap(),
        &["status", "apiServerEndpoint"],
    )
    .unwrap()
    .to_string();
    assert!(
        endpoint.starts_with(&format!("https://{vip}:")),
        "{endpoint}"
    );
    let ingresses: Vec<String> = world
        .components_of("c1")
        .filter(|c| str_at(c, &["spec", "role"]) == Some("control-plane-ingress"))
        .filter_map(|c| str_at(c, &["spec", "hypervisor"]).map(str::to_string))
        .collect();
    let mut sorted = ingresses.clone();
    sorted.sort();
    assert_eq!(sorted, publics, "one ingress on each public hypervisor");

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let readyz = || {
        kubectl(
            &kubeconfig,
            &["--request-timeout=2s", "get", "--raw", "/readyz"],
        )?
        .ok("readyz")
    };
    eventually(Duration::from_secs(30), readyz).unwrap();
    // Exactly one holds the address.
    let holder = eventually(Duration::from_secs(20), || {
        let h = holders(&set, &publics, &vip);
        anyhow::ensure!(h.len() == 1, "holders of {vip}: {h:?}");
        Ok(h[0].clone())
    })
    .unwrap();
    let other = publics.iter().find(|h| **h != holder).unwrap().clone();

    // The holder loses its runtime and its address: its health check fails.
    let line = set
        .run_on(&holder, &["ip", "-o", "-4", "addr", "show"])
        .unwrap()
        .stdout;
    let own_ip = &state
        .hypervisors
        .iter()
        .find(|h| h.name == holder)
        .unwrap()
        .ip;
    let fields: Vec<&str> = line
        .lines()
        .find(|l| l.contains(&format!("inet {own_ip}/")))
        .unwrap_or_else(|| panic!("{holder} has no {own_ip}:\n{line}"))
        .split_whitespace()
        .collect();
    let (iface, cidr) = (fields[1].to_string(), fields[3].to_string());
    let mut first = Revive {
        set: &set,
        hypervisor: holder.clone(),
        address: None,
        veth: None,
    };
    set.kill_containerd(&holder).unwrap();
    let lost = Instant::now();
    set.run_on(&holder, &["ip", "addr", "del", &cidr, "dev", &iface])
        .unwrap()
        .ok("ip addr del")
        .unwrap();
    first.address = Some(vec![cidr.clone(), "dev".into(), iface.clone()]);
    let (moved, answered) = moved_to(&set, &publics, &other, &vip, &readyz, lost);
    eprintln!(
        "{holder} lost its runtime and address: {vip} on {other} after {moved:.1?}, kubectl \
         through it answered after {answered:.1?}"
    );
    // Its address back: it stays a backup (nopreempt).
    drop(first);
    eventually(Duration::from_secs(30), readyz).unwrap();

    // Now the other is lost altogether (its link down): back to the first.
    // The first's health checks pass again (out of FAULT) before it is asked to take over.
    eventually(Duration::from_secs(30), || {
        let state = vrrp_state(&set, &holder);
        anyhow::ensure!(
            state.as_deref() == Some("BACKUP"),
            "{holder}'s keepalived is in {state:?}"
        );
        Ok(())
    })
    .unwrap();
    let (_second, lost) = lose_link(&set, &other);
    let (moved, answered) = moved_to(&set, &publics, &holder, &vip, &readyz, lost);
    eprintln!(
        "{other} lost (link down): {vip} on {holder} after {moved:.1?}, kubectl through it \
         answered after {answered:.1?}"
    );
    // `_second` then `set` are dropped: the hypervisor back, then the set destroyed.
}

/// `oi reconcile` over `world` until `join` (a waiting `oi node join`) has exited; the world
/// and the join's (success, stderr).
fn answer_join(world: &str, mut join: std::process::Child) -> (String, bool, String) {
    let mut world = world.to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    while join.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "oi node join did not finish");
        world = oi_e2e::reconcile(&world, &[])
            .unwrap()
            .ok("answering reconcile")
            .unwrap()
            .stdout;
    }
    let out = join.wait_with_output().unwrap();
    (
        world,
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_vpn_endpoint_follows_the_shared_address() {
    let test = "the_vpn_endpoint_follows_the_shared_address";
    if !prerequisites(test)
        || !oi_testsupport::require_root_and_commands(test, &["wg", "wireguard-go", "iptables"])
    {
        return;
    }
    let set = LocalSet::create_with_workers("hav", 1, 2, false, 1).unwrap();
    let (publics, vip) = publics_and_address(&set);
    let world = oi_e2e::inject_cluster_with(
        &set.manifests,
        "c1",
        &[
            "--vpn-enabled",
            "--ingress-replicas",
            "2",
            "--ingress-virtual-ip",
            &vip,
        ],
    )
    .unwrap();
    let (world, token) = oi_e2e::inject_join_token(&world, "c1").unwrap();
    let (run, _, _) = reconcile_until_ready(&world, 3).unwrap();
    let world = run.stdout;
    let parsed = World::parse(&world).unwrap();
    let cluster = parsed.require_cluster("c1").unwrap();
    let endpoint = str_at(cluster, &["status", "apiServerEndpoint"])
        .unwrap()
        .to_string();
    assert!(
        endpoint.starts_with(&format!("https://{vip}:")),
        "{endpoint}"
    );
    let vpn_endpoint = str_at(cluster, &["status", "vpnServerEndpoint"]).unwrap();
    assert!(
        vpn_endpoint.starts_with(&format!("{vip}:")),
        "{vpn_endpoint}"
    );

    // A worker behind NAT joins through the shared address; its kubelet is reached through
    // the egress proxy and the tunnel.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    oi_e2e::write_apiserver_ca(&world, "c1", &ca).unwrap();
    let admin = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    let kubelet_bin = oi_e2e::kubelet_standin(dir.path()).unwrap();
    let target = oi_e2e::JoinTarget {
        endpoint: &endpoint,
        ca: &ca,
        token: &token,
        kubelet: &kubelet_bin,
    };
    let w1 = oi_e2e::Worker::new(&set, 1, dir.path()).unwrap();
    let join = w1
        .join_command("w1", &target, "90s")
        .unwrap()
        .spawn()
        .unwrap();
    let (_world, ok, stderr) = answer_join(&world, join);
    assert!(ok, "{stderr}");
    let _kubelet = w1
        .start_kubelet(
            &oi_e2e::kubelet_command_of(&stderr).unwrap(),
            "v1.37.1",
            &dir.path().join("k1.log"),
        )
        .unwrap();
    let proxied = || {
        let run = kubectl(
            &admin,
            &[
                "--request-timeout=5s",
                "get",
                "--raw",
                "/api/v1/nodes/w1/proxy/healthz",
            ],
        )?;
        anyhow::ensure!(
            run.success && run.stdout == "ok",
            "{:?} {}",
            run.stdout,
            run.stderr
        );
        Ok(())
    };
    if let Err(e) = eventually(Duration::from_secs(90), proxied) {
        let log = std::fs::read_to_string(dir.path().join("k1.log")).unwrap_or_default();
        panic!("{e:#}\nkubelet:\n{log}");
    }

    // The address's holder is lost (its link down): the other's VPN endpoint takes the
    // worker's tunnel over once the worker handshakes again with the same address. WireGuard
    // does so 15 s after it sent data that got no answer (or at its 2-minute rekey when it
    // sends only keepalives): the worker pings the endpoint's VPN address meanwhile, as a
    // worker with traffic into the VPN would. Then the kubelet is reached again.
    let cidr = str_at(cluster, &["spec", "vpn", "CIDR"]).unwrap();
    let network: std::net::Ipv4Addr = cidr.split('/').next().unwrap().parse().unwrap();
    let mut endpoint_vpn = network.octets();
    endpoint_vpn[3] += 1;
    let endpoint_vpn = std::net::Ipv4Addr::from(endpoint_vpn).to_string();
    let w1_host = w1.host.clone();
    let set_ref = &set;
    let traffic_then_proxied = || {
        let _ = set_ref.run_on(
            &w1_host,
            &["busybox", "ping", "-c", "1", "-W", "1", &endpoint_vpn],
        );
        proxied()
    };
    let holder = eventually(Duration::from_secs(20), || {
        let h = holders(&set, &publics, &vip);
        anyhow::ensure!(h.len() == 1, "holders of {vip}: {h:?}");
        Ok(h[0].clone())
    })
    .unwrap();
    let (_revive, lost) = lose_link(&set, &holder);
    if let Err(e) = eventually(Duration::from_secs(120), traffic_then_proxied) {
        let log = std::fs::read_to_string(dir.path().join("k1.log")).unwrap_or_default();
        let states: Vec<(String, Option<String>)> = publics
            .iter()
            .map(|h| (h.clone(), vrrp_state(&set, h)))
            .collect();
        panic!(
            "{e:#}\nholders of {vip}: {:?}; keepalived states: {states:?}\nkubelet:\n{log}",
            holders(&set, &publics, &vip)
        );
    }
    eprintln!(
        "{holder} lost: the worker's kubelet reached through the other ingress's VPN endpoint \
         after {:.1?}",
        lost.elapsed()
    );
}
