//! Chaos on real containerd, etcd and haproxy: for `OI_CHAOS_SECONDS` (60 by default; the
//! benchmark `benches/chaos.sh` runs longer), faults are injected one after the other at
//! random (seed `OI_CHAOS_SEED`, printed) under a 3-replica cluster while a client writes an
//! object through the ingress every 100 ms:
//! - a control plane pod removed (an etcd member's or a replica's API server);
//! - a hypervisor's containerd killed (its containers keep running), then started again;
//! - a hypervisor's link down for a few seconds;
//! - `oi reconcile` killed at a random moment of its run (nothing written);
//! - once, a hypervisor lost for good, then removed (`oi hypervisor remove`).
//!
//! After each fault, `oi reconcile` brings the cluster back to full strength (ready, 3
//! voting etcd members); the time it took is recorded. The invariants: no acknowledged write
//! is lost, the cluster is back to full strength after each fault, and nothing is leaked
//! (no pod but those of the cluster's components, no throwaway pod, no port but theirs).
//! The figures (faults by kind, time back to full strength, failed writes) are printed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oi_e2e::{
    ApiCaller, Etcdctl, IMAGE_REPOSITORY, LocalSet, World, admin_kubeconfig, eventually, kubectl,
    oi, prerequisites, reconcile_until_ready, str_at,
};

/// A small deterministic generator (xorshift64*): the seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn replicas(world: &World) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = world
        .components_of("c1")
        .filter(|c| str_at(c, &["spec", "role"]) == Some("control-plane"))
        .filter_map(|c| {
            Some((
                str_at(c, &["metadata", "name"])?.to_string(),
                str_at(c, &["spec", "hypervisor"])?.to_string(),
            ))
        })
        .collect();
    out.sort();
    out
}

/// Reconciles until ready with 3 voting members; the world and how long it took.
fn back_to_full_strength(world: &str, since: Instant) -> (String, Duration) {
    let (run, _, _) = reconcile_until_ready(world, 4).unwrap();
    let parsed = World::parse(&run.stdout).unwrap();
    Etcdctl::new(&parsed, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(60))
        .unwrap();
    (run.stdout, since.elapsed())
}

/// Nothing leaked: every pod on the set is one of the world's components', no throwaway
/// pod is left, and every port allocation is a live component's.
fn nothing_leaked(set: &LocalSet, world: &str) {
    let parsed = World::parse(world).unwrap();
    let components: BTreeSet<String> = parsed
        .components_of("c1")
        .filter_map(|c| str_at(c, &["metadata", "name"]).map(str::to_string))
        .collect();
    // The hypervisors of the world (a removed one is gone from it, and does not answer).
    let hypervisors: Vec<String> = parsed
        .of_kind("Hypervisor")
        .filter_map(|h| str_at(h, &["metadata", "name"]).map(str::to_string))
        .collect();
    let pods: Vec<(String, String)> = hypervisors
        .iter()
        .flat_map(|h| {
            set.pods_on(h)
                .unwrap()
                .into_iter()
                .map(move |p| (h.clone(), p))
        })
        .collect();
    for (h, pod) in pods {
        let name = pod.trim_start_matches("default/");
        let owner = name
            .strip_suffix("-etcd")
            .or_else(|| name.strip_suffix("-vpn"))
            .unwrap_or(name);
        assert!(
            components.contains(owner),
            "pod {pod} on {h} belongs to no component of the world ({components:?})"
        );
    }
    for h in parsed.of_kind("Hypervisor") {
        for p in oi_e2e::at(h, &["status", "allocatedPorts"])
            .and_then(serde_yaml_ng::Value::as_sequence)
            .into_iter()
            .flatten()
        {
            let component = str_at(p, &["component"]).unwrap_or_default();
            assert!(
                components
                    .iter()
                    .any(|c| component.starts_with(&format!("{c}-"))),
                "port {p:?} of {:?} held for no live component",
                str_at(h, &["metadata", "name"])
            );
        }
    }
}

#[test]
fn chaos_leaves_no_acknowledged_write_lost_and_the_cluster_back_to_full_strength() {
    let test = "chaos_leaves_no_acknowledged_write_lost_and_the_cluster_back_to_full_strength";
    if !prerequisites(test) {
        return;
    }
    let seconds: u64 = std::env::var("OI_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("OI_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("chaos: {seconds} s, seed {seed} (OI_CHAOS_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let set = LocalSet::create("chaos", 5, 1, false).unwrap();
    let injected = oi_e2e::inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let mut world = run.stdout;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&World::parse(&world).unwrap(), "c1", dir.path()).unwrap();
    eventually(Duration::from_secs(30), || {
        kubectl(&kubeconfig, &["get", "--raw", "/readyz"])?.ok("readyz")
    })
    .unwrap();
    let writer = ApiCaller::start_with(&kubeconfig, |i| {
        vec![
            "create".into(),
            "configmap".into(),
            format!("chaos-{i}"),
            format!("--from-literal=i={i}"),
        ]
    });
    let oi_bin = oi_e2e::binary("oi").unwrap();
    let started = Instant::now();
    let mut times: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    let mut lost_one = false;
    let mut _lost = None;
    while started.elapsed() < Duration::from_secs(seconds) {
        let now = replicas(&World::parse(&world).unwrap());
        let (replica, hypervisor) = now[rng.below(now.len() as u64) as usize].clone();
        let kind = match rng.below(if lost_one { 4 } else { 5 }) {
            0 => "pod removed",
            1 => "containerd killed",
            2 => "link down",
            3 => "oi reconcile killed",
            _ => "hypervisor lost for good",
        };
        let since = Instant::now();
        match kind {
            "pod removed" => {
                let pod = if rng.below(2) == 0 {
                    format!("{replica}-etcd")
                } else {
                    replica.clone()
                };
                set.remove_pod(&hypervisor, &pod).unwrap();
                eprintln!("chaos: removed pod {pod} on {hypervisor}");
            }
            "containerd killed" => {
                set.kill_containerd(&hypervisor).unwrap();
                std::thread::sleep(Duration::from_millis(200 + rng.below(2000)));
                set.restart_containerd(&hypervisor).unwrap();
                eprintln!("chaos: killed and restarted containerd on {hypervisor}");
            }
            "link down" => {
                let veth = set
                    .state()
                    .unwrap()
                    .hypervisors
                    .iter()
                    .find(|h| h.name == hypervisor)
                    .unwrap()
                    .host_veth
                    .clone();
                let link = |state: &str| {
                    oi_e2e::run_command(Command::new("ip").args(["link", "set", &veth, state]), "")
                        .unwrap()
                        .ok("ip link set")
                        .unwrap();
                };
                link("down");
                std::thread::sleep(Duration::from_millis(1000 + rng.below(4000)));
                link("up");
                eprintln!("chaos: link of {hypervisor} down and up again");
            }
            "oi reconcile killed" => {
                let mut child = Command::new(&oi_bin)
                    .args(["reconcile", "--image-repository", IMAGE_REPOSITORY])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(world.as_bytes())
                    .unwrap();
                let after = Duration::from_millis(100 + rng.below(2000));
                std::thread::sleep(after);
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("chaos: oi reconcile killed after {after:?}");
            }
            _ => {
                lost_one = true;
                _lost = Some(set.lose(&hypervisor).unwrap());
                let removed = oi(
                    &[
                        "hypervisor",
                        "remove",
                        "--name",
                        &hypervisor,
                        "--image-repository",
                        IMAGE_REPOSITORY,
                    ],
                    &world,
                )
                .unwrap()
                .ok("oi hypervisor remove")
                .unwrap();
                world = removed.stdout;
                eprintln!("chaos: {hypervisor} lost for good and removed");
            }
        }
        let (after, took) = back_to_full_strength(&world, since);
        world = after;
        eprintln!("chaos: {kind}: back to full strength in {took:.1?}");
        times.entry(kind).or_default().push(took);
        nothing_leaked(&set, &world);
    }
    std::thread::sleep(Duration::from_millis(500));
    let calls = writer.finish_timed();
    let failed = calls.iter().filter(|(_, e)| e.is_some()).count();
    let listed: BTreeSet<String> = eventually(Duration::from_secs(30), || {
        kubectl(&kubeconfig, &["get", "configmaps", "-o", "name"])?.ok("get configmaps")
    })
    .unwrap()
    .stdout
    .lines()
    .map(str::to_string)
    .collect();
    for (i, (_, e)) in calls.iter().enumerate() {
        if e.is_none() {
            let name = format!("configmap/chaos-{i}");
            assert!(
                listed.contains(&name),
                "{name} was acknowledged and is gone"
            );
        }
    }
    let faults: usize = times.values().map(Vec::len).sum();
    assert!(faults > 0, "no fault was injected in {seconds} s");
    eprintln!(
        "chaos figures (seed {seed}, {:.0?}): {faults} faults, {} writes, {failed} failed, none \
         lost",
        started.elapsed(),
        calls.len()
    );
    for (kind, mut t) in times {
        t.sort();
        eprintln!(
            "chaos figures: {kind}: {} times, back to full strength in median {:.1?}, max {:.1?}",
            t.len(),
            t[t.len() / 2],
            t[t.len() - 1]
        );
    }
}
