//! HA ingress (`spec.ingress`, ours): a cluster with two ingresses on two public hypervisors
//! sharing one address (VRRP, real keepalived). The hypervisor holding the address is lost
//! (its containerd killed, its link down): the address moves to the other, and `kubectl`
//! through the cluster's address works again. The time it took is printed (the README's
//! figure), not asserted: a timed assertion would flake on a loaded machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use oi_e2e::{
    LocalSet, World, admin_kubeconfig, eventually, kubectl, oi, prerequisites,
    reconcile_until_ready, str_at,
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

/// Brings a lost hypervisor back (link up, containerd restarted) when the test ends, however
/// it ends, so that the set can be destroyed.
struct Revive<'s> {
    set: &'s LocalSet,
    hypervisor: String,
    veth: String,
}

impl Drop for Revive<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "set", &self.veth, "up"])
            .status();
        if let Err(e) = self.set.restart_containerd(&self.hypervisor) {
            eprintln!("cannot restart containerd on {}: {e:#}", self.hypervisor);
        }
    }
}

#[test]
fn the_clusters_address_survives_the_loss_of_a_public_hypervisor() {
    let test = "the_clusters_address_survives_the_loss_of_a_public_hypervisor";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("hai", 1, 2, false).unwrap();
    let state = set.state().unwrap();
    let publics: Vec<String> = state
        .hypervisors
        .iter()
        .filter(|h| h.name.contains("-public-"))
        .map(|h| h.name.clone())
        .collect();
    assert_eq!(publics.len(), 2);
    // An unused address of the set's network.
    let mut octets = state.hypervisors[0].ip.octets();
    octets[3] = 200;
    let vip = std::net::Ipv4Addr::from(octets).to_string();
    let injected = oi(
        &[
            "cluster",
            "inject",
            "--name",
            "c1",
            "--ingress-replicas",
            "2",
            "--ingress-virtual-ip",
            &vip,
        ],
        &set.manifests,
    )
    .unwrap()
    .ok("oi cluster inject")
    .unwrap()
    .stdout;
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

    // The holder is lost: its runtime killed, its link down.
    let veth = state
        .hypervisors
        .iter()
        .find(|h| h.name == holder)
        .unwrap()
        .host_veth
        .clone();
    let _revive = Revive {
        set: &set,
        hypervisor: holder.clone(),
        veth: veth.clone(),
    };
    set.kill_containerd(&holder).unwrap();
    let lost = Instant::now();
    oi_e2e::run_command(
        std::process::Command::new("ip").args(["link", "set", &veth, "down"]),
        "",
    )
    .unwrap()
    .ok("ip link set down")
    .unwrap();
    eventually(Duration::from_secs(30), || {
        anyhow::ensure!(
            holders(&set, std::slice::from_ref(&other), &vip).len() == 1,
            "{other} does not hold {vip} yet"
        );
        Ok(())
    })
    .unwrap();
    let moved = lost.elapsed();
    eventually(Duration::from_secs(30), readyz).unwrap();
    let answered = lost.elapsed();
    eprintln!(
        "{holder} lost: {vip} on {other} after {moved:.1?}, kubectl through it answered after {answered:.1?}"
    );
    // `_revive` then `set` are dropped: the hypervisor back, then the set destroyed.
}
