//! The cluster VPN, end to end: a VPN-enabled 3-replica cluster on real hypervisors, workers
//! behind a masquerading router (no hypervisor can reach them) joining with `oi node join`,
//! real WireGuard (wireguard-go) between them and the ingress's endpoint, the API servers
//! reaching every kubelet through the endpoint's egress proxy and the tunnel.
//!
//! ```text
//! refusals: wrong, expired, deleted token; a name another machine holds; RBAC beyond joining
//!   ─► nothing written on the worker, no request in the cluster
//! two workers join at once ─► both Ready; node proxy to each through the tunnel; they ping
//!   each other's VPN address; a second reconcile writes nothing and keeps the endpoint
//!   (handshakes unchanged)
//! the endpoint's pod removed ─► the reconcile replaces it; tunnels back, workers untouched
//! a worker removed (its Node deleted) ─► its peer and request go; the next worker joining
//!   gets its address
//! a second cluster, same VPN CIDR, same public hypervisor ─► its worker gets the same
//!   address as one of the first's; both reached, each through its own tunnel
//! ```

use std::process::Child;
use std::time::{Duration, Instant};

use base64::Engine as _;
use oi_e2e::{
    JoinTarget, LocalSet, Worker, admin_kubeconfig, eventually, kubectl, kubelet_command_of,
    prerequisites, reconcile, reconcile_until_ready, str_at,
};

const VERSION: &str = "v1.37.1";

/// Runs `oi reconcile` until every child (a waiting `oi node join`) has exited; returns the
/// world and each child's (success, stderr).
fn answer_joins(world: &str, children: Vec<Child>) -> (String, Vec<(bool, String)>) {
    let mut world = world.to_string();
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while children
        .iter_mut()
        .any(|c| c.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none()))
    {
        assert!(Instant::now() < deadline, "oi node join did not finish");
        let run = reconcile(&world, &[])
            .unwrap()
            .ok("answering reconcile")
            .unwrap();
        // Shown when the test fails: what each pass did.
        eprintln!(
            "answering reconcile ({:?}):\n{}",
            std::time::SystemTime::now(),
            run.stderr
        );
        world = run.stdout;
    }
    let results = children
        .into_iter()
        .map(|c| {
            let out = c.unwrap().wait_with_output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect();
    (world, results)
}

fn bootstrap_secret(id: &str, expiration: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: bootstrap-token-{id}, namespace: kube-system}}\ntype: bootstrap.kubernetes.io/token\ndata:\n  token-id: {}\n  token-secret: {}\n  expiration: {}\n  usage-bootstrap-authentication: {}\n  auth-extra-groups: {}\n",
        b64(id),
        b64("0123456789abcdef"),
        b64(expiration),
        b64("true"),
        b64("system:bootstrappers:oneinfra"),
    )
}

/// The VPN addresses the world records, by peer name.
fn peers(world: &str) -> Vec<(String, String)> {
    let parsed = oi_e2e::World::parse(world).unwrap();
    let cluster = parsed.require_cluster("c1").unwrap();
    oi_e2e::at(cluster, &["status", "vpnPeers"])
        .and_then(|p| p.as_sequence())
        .map(|s| {
            s.iter()
                .map(|p| {
                    (
                        str_at(p, &["name"]).unwrap().to_string(),
                        str_at(p, &["address"]).unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `wg show <interface> latest-handshakes` on a worker: the endpoint's handshake time.
fn handshake(worker: &Worker<'_>) -> String {
    let run = worker
        .set
        .run_on(
            &worker.host,
            &["wg", "show", &worker.interface, "latest-handshakes"],
        )
        .unwrap()
        .ok("wg show")
        .unwrap();
    run.stdout
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string()
}

/// What the VPN looks like from each side, for a failure's message: the workers' WireGuard
/// and the endpoint's log.
fn diagnose(set: &LocalSet, public: &str, workers: &[&Worker<'_>]) -> String {
    let mut out = String::new();
    for w in workers {
        let shown = set
            .run_on(&w.host, &["wg", "show", &w.interface])
            .map(|r| format!("{}{}", r.stdout, r.stderr))
            .unwrap_or_else(|e| e.to_string());
        out.push_str(&format!("--- {} wg show:\n{shown}\n", w.host));
    }
    let ps = std::process::Command::new("sh")
        .args([
            "-c",
            "ps -eo pid,ppid,lstart,args | grep -e oi-vpn-endpoin[t] -e wireguard-g[o]",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.push_str(&format!("--- processes:\n{ps}\n"));
    let log = oi_local_hypervisor_set::Paths::default()
        .hypervisor(set.name(), public)
        .containerd_log;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.contains("vpn")
                || l.contains("StopPodSandbox")
                || l.contains("RemovePodSandbox")
                || l.contains("exit")
        })
        .collect();
    out.push_str(&format!(
        "--- containerd of {public}:\n{}\n",
        tail.join("\n")
    ));
    let logs = set.var_log_oneinfra(public).join("pods");
    out.push_str(&format!(
        "--- pods logged in {}: {:?}\n",
        logs.display(),
        std::fs::read_dir(&logs)
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .map_err(|e| e.to_string())
    ));
    for entry in std::fs::read_dir(&logs).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().ends_with("-vpn") {
            for log in std::fs::read_dir(entry.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let text = std::fs::read_to_string(log.path()).unwrap_or_default();
                out.push_str(&format!("--- {}:\n{text}\n", log.path().display()));
            }
        }
    }
    out
}

#[test]
fn workers_behind_nat_join_a_vpn_cluster_and_are_reached_through_the_tunnel() {
    let test = "workers_behind_nat_join_a_vpn_cluster_and_are_reached_through_the_tunnel";
    if !prerequisites(test)
        || !oi_testsupport::require_root_and_commands(test, &["wg", "wireguard-go", "iptables"])
    {
        return;
    }
    let set = LocalSet::create_with_workers("vpn", 3, 1, false, 4).unwrap();
    let mut world = oi_e2e::inject_cluster_with(
        &set.manifests,
        "c1",
        &["--control-plane-replicas", "3", "--vpn-enabled"],
    )
    .unwrap();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let (injected, token) = oi_e2e::inject_join_token(&world, "c1").unwrap();
        tokens.push(token);
        world = injected;
    }
    let (run, _, _) = reconcile_until_ready(&world, 3).unwrap();
    let world = run.stdout;
    let parsed = oi_e2e::World::parse(&world).unwrap();
    let cluster = parsed.require_cluster("c1").unwrap();
    let endpoint = str_at(cluster, &["status", "apiServerEndpoint"])
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    oi_e2e::write_apiserver_ca(&world, "c1", &ca).unwrap();
    let admin = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    let kubelet_bin = oi_e2e::kubelet_standin(dir.path()).unwrap();
    let target = JoinTarget {
        endpoint: &endpoint,
        ca: &ca,
        token: &tokens[0],
        kubelet: &kubelet_bin,
    };
    let w1 = Worker::new(&set, 1, dir.path()).unwrap();
    let w2 = Worker::new(&set, 2, dir.path()).unwrap();
    let w3 = Worker::new(&set, 3, dir.path()).unwrap();
    let requests = || {
        kubectl(&admin, &["get", "nodejoinrequests", "-o", "name"])
            .unwrap()
            .ok("kubectl get nodejoinrequests")
            .unwrap()
            .stdout
    };

    // Refusals, each with its message, nothing written on the worker, nothing in the cluster.
    let wrong = JoinTarget {
        token: "abcdef.0123456789abcdef",
        ..target
    };
    let (ok, stderr) = w1.join("w1", &wrong).unwrap();
    assert!(!ok);
    assert!(
        stderr.contains("the join token was refused (401 Unauthorized)"),
        "{stderr}"
    );
    let applied = oi_e2e::run_command(
        std::process::Command::new(oi_e2e::KUBECTL)
            .arg("--kubeconfig")
            .arg(&admin)
            .args(["apply", "-f", "-"]),
        &bootstrap_secret("old001", "2001-01-01T00:00:00Z"),
    )
    .unwrap();
    assert!(applied.success, "{}", applied.stderr);
    let expired = JoinTarget {
        token: "old001.0123456789abcdef",
        ..target
    };
    let (ok, stderr) = w1.join("w1", &expired).unwrap();
    assert!(!ok);
    assert!(stderr.contains("401 Unauthorized"), "{stderr}");
    // The second token leaves the Cluster: the reconcile revokes it in the cluster.
    let world = oi_e2e::World::parse(&world)
        .unwrap()
        .with_spec_field("c1", "joinTokens", vec![tokens[0].clone()].into())
        .unwrap();
    let world = reconcile(&world, &[])
        .unwrap()
        .ok("reconcile revoking a token")
        .unwrap()
        .stdout;
    let deleted = JoinTarget {
        token: &tokens[1],
        ..target
    };
    let (ok, stderr) = w1.join("w1", &deleted).unwrap();
    assert!(!ok);
    assert!(stderr.contains("401 Unauthorized"), "{stderr}");
    // A join token may do nothing but join.
    let empty = dir.path().join("empty.kubeconfig");
    std::fs::write(&empty, "").unwrap();
    let beyond = kubectl(
        &empty,
        &[
            "--server",
            &endpoint,
            "--certificate-authority",
            ca.to_str().unwrap(),
            "--token",
            &tokens[0],
            "get",
            "secrets",
            "-n",
            "kube-system",
        ],
    )
    .unwrap();
    assert!(!beyond.success);
    assert!(
        beyond.stderr.contains("Forbidden")
            && beyond.stderr.contains("cannot list resource \"secrets\""),
        "{}",
        beyond.stderr
    );
    assert_eq!(w1.files(), Vec::<String>::new());
    assert_eq!(requests(), "");

    // Two workers behind NAT join at once.
    let children = vec![
        w1.join_command("w1", &target, "90s")
            .unwrap()
            .spawn()
            .unwrap(),
        w2.join_command("w2", &target, "90s")
            .unwrap()
            .spawn()
            .unwrap(),
    ];
    let (world, results) = answer_joins(&world, children);
    for (ok, stderr) in &results {
        assert!(ok, "{stderr}");
    }
    let addresses = peers(&world);
    assert_eq!(addresses.len(), 2, "{addresses:?}");
    for (w, node) in [(&w1, "w1"), (&w2, "w2")] {
        let files = w.files();
        for f in [
            "etc/oneinfra/wireguard.key".to_string(),
            format!("etc/oneinfra/{}.conf", w.interface),
            format!("etc/systemd/system/{}.service", w.interface),
        ] {
            assert!(files.contains(&f), "{f} missing: {files:?}");
        }
        use std::os::unix::fs::PermissionsExt as _;
        for key in [
            "etc/oneinfra/wireguard.key".to_string(),
            format!("etc/oneinfra/{}.conf", w.interface),
        ] {
            let mode = std::fs::metadata(w.root.join(&key))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600, "{key}");
        }
        let (_, address) = addresses
            .iter()
            .find(|(name, _)| name == &format!("worker-{node}"))
            .unwrap();
        let stderr = &results[if node == "w1" { 0 } else { 1 }].1;
        assert!(
            stderr.contains(&format!("VPN {} {address}", w.interface)),
            "{stderr}"
        );
    }
    let ip = |node: &str| -> String {
        addresses
            .iter()
            .find(|(name, _)| name == &format!("worker-{node}"))
            .unwrap()
            .1
            .split('/')
            .next()
            .unwrap()
            .to_string()
    };
    let _k1 = w1
        .start_kubelet(
            &kubelet_command_of(&results[0].1).unwrap(),
            VERSION,
            &dir.path().join("k1.log"),
        )
        .unwrap();
    let _k2 = w2
        .start_kubelet(
            &kubelet_command_of(&results[1].1).unwrap(),
            VERSION,
            &dir.path().join("k2.log"),
        )
        .unwrap();
    let ready = |node: &str| {
        eventually(Duration::from_secs(60), || {
            let run = kubectl(
                &admin,
                &[
                    "get",
                    "node",
                    node,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.status.addresses[?(@.type==\"InternalIP\")].address}",
                ],
            )?;
            anyhow::ensure!(
                run.stdout == format!("True {}", ip(node)),
                "{node}: {:?} {}",
                run.stdout,
                run.stderr
            );
            Ok(())
        })
    };
    for node in ["w1", "w2"] {
        if let Err(e) = ready(node) {
            let log = std::fs::read_to_string(dir.path().join(format!("k{}.log", &node[1..])))
                .unwrap_or_default();
            panic!("{e:#}\nkubelet:\n{log}");
        }
    }
    // The API servers reach each kubelet through the egress proxy and the tunnel.
    let public = set
        .state()
        .unwrap()
        .hypervisors
        .last()
        .unwrap()
        .name
        .clone();
    let proxied = |node: &str| {
        let reached = eventually(Duration::from_secs(30), || {
            let run = kubectl(
                &admin,
                &[
                    "get",
                    "--raw",
                    &format!("/api/v1/nodes/{node}/proxy/healthz"),
                ],
            )?;
            anyhow::ensure!(
                run.success && run.stdout == "ok",
                "{node}: {:?} {}",
                run.stdout,
                run.stderr
            );
            Ok(())
        });
        if let Err(e) = reached {
            let kubelets: String = ["k1", "k2", "k3"]
                .iter()
                .map(|k| {
                    let log = std::fs::read_to_string(dir.path().join(format!("{k}.log")))
                        .unwrap_or_default();
                    format!("--- kubelet {k}:\n{log}\n")
                })
                .collect();
            panic!(
                "{e:#}\n{}{kubelets}",
                diagnose(&set, &public, &[&w1, &w2, &w3])
            );
        }
    };
    proxied("w1");
    proxied("w2");
    // Workers reach each other over the tunnel; nothing on the set reaches them otherwise.
    set.run_on(
        &w1.host,
        &["busybox", "ping", "-c", "1", "-W", "5", &ip("w2")],
    )
    .unwrap()
    .ok("w1 pings w2 over the VPN")
    .unwrap();
    let lan = set.workers().unwrap()[0].ip.to_string();
    let public = set
        .state()
        .unwrap()
        .hypervisors
        .last()
        .unwrap()
        .name
        .clone();
    let direct = set
        .run_on(&public, &["busybox", "ping", "-c", "1", "-W", "1", &lan])
        .unwrap();
    assert!(!direct.success, "a hypervisor reached a worker behind NAT");

    // Converged: the next reconcile notes the registered Nodes; the one after writes nothing
    // and keeps the endpoint (the workers' handshakes stay as they were).
    let world = reconcile(&world, &[])
        .unwrap()
        .ok("reconcile")
        .unwrap()
        .stdout;
    let before = (handshake(&w1), handshake(&w2));
    assert!(!before.0.is_empty() && before.0 != "0", "{before:?}");
    let run = reconcile(&world, &[])
        .unwrap()
        .ok("converged reconcile")
        .unwrap();
    let summary = run.summary().unwrap();
    assert_eq!(summary.cluster_api_writes, 0, "{}", run.stderr);
    assert_eq!(summary.mutating_cri_calls, 0, "{}", run.stderr);
    assert_eq!(summary.pods_unchanged, 8);
    assert_eq!((handshake(&w1), handshake(&w2)), before);
    let world = run.stdout;
    // `oi get nodes` shows both workers registered, at their VPN addresses, from the world.
    let nodes = oi_e2e::oi(&["get", "nodes", "c1"], &world)
        .unwrap()
        .ok("oi get nodes")
        .unwrap()
        .stdout;
    let rows: Vec<Vec<&str>> = nodes
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{nodes}");
    for (row, name) in rows.iter().zip(["w1", "w2"]) {
        assert_eq!(&row[..4], ["default", "c1", name, "Registered"], "{nodes}");
        assert!(
            row[4].starts_with("10.") && row[4].ends_with("/16"),
            "{nodes}"
        );
    }

    // The endpoint's pod goes: the reconcile replaces it and the tunnels come back with
    // nothing done on the workers.
    set.remove_pod(&public, "c1-ingress-vpn").unwrap();
    let run = reconcile(&world, &[])
        .unwrap()
        .ok("reconcile after losing the endpoint")
        .unwrap();
    assert_eq!(
        run.summary().unwrap().pods_replaced + run.summary().unwrap().pods_created,
        1,
        "{}",
        run.stderr
    );
    let world = run.stdout;
    proxied("w1");
    proxied("w2");

    // Worker 1 leaves: its Node is deleted; the next reconcile removes its request and peer,
    // and worker 3 joining gets its address.
    drop(_k1);
    kubectl(&admin, &["delete", "node", "w1"])
        .unwrap()
        .ok("kubectl delete node")
        .unwrap();
    let run = reconcile(&world, &[])
        .unwrap()
        .ok("reconcile after w1 left")
        .unwrap();
    assert!(
        run.stderr.contains("VPN peers removed worker-w1"),
        "{}",
        run.stderr
    );
    let world = run.stdout;
    assert!(
        !requests().contains("nodejoinrequest.node.oneinfra.ereslibre.es/w1"),
        "{}",
        requests()
    );
    let freed = ip("w1");
    assert_eq!(peers(&world).len(), 1);
    // A third machine asking for w2's name is refused, with nothing written there.
    let (ok, stderr) = w3.join("w2", &target).unwrap();
    assert!(!ok);
    assert!(
        stderr.contains("join request w2 exists already and was not made from here"),
        "{stderr}"
    );
    assert_eq!(w3.files(), Vec::<String>::new());
    let child = w3
        .join_command("w3", &target, "90s")
        .unwrap()
        .spawn()
        .unwrap();
    let (world, results) = answer_joins(&world, vec![child]);
    assert!(results[0].0, "{}", results[0].1);
    assert!(
        peers(&world).contains(&("worker-w3".to_string(), format!("{freed}/16"))),
        "{:?}",
        peers(&world)
    );
    let _k3 = w3
        .start_kubelet(
            &kubelet_command_of(&results[0].1).unwrap(),
            VERSION,
            &dir.path().join("k3.log"),
        )
        .unwrap();
    proxied("w3");

    // A second cluster with the same VPN CIDR, its endpoint on the same public hypervisor:
    // its worker gets the address w3 has in the first one, and both are reached, each
    // through its own cluster's tunnel.
    let injected = oi_e2e::inject_cluster_with(&world, "c2", &["--vpn-enabled"]).unwrap();
    let (injected, c2_token) = oi_e2e::inject_join_token(&injected, "c2").unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 3).unwrap();
    let world = run.stdout;
    let parsed = oi_e2e::World::parse(&world).unwrap();
    let c2 = parsed.require_cluster("c2").unwrap();
    assert_eq!(str_at(c2, &["spec", "vpn", "CIDR"]), Some("10.0.0.0/16"));
    let c2_endpoint = str_at(c2, &["status", "apiServerEndpoint"])
        .unwrap()
        .to_string();
    let c2_ca = dir.path().join("c2-ca.pem");
    oi_e2e::write_apiserver_ca(&world, "c2", &c2_ca).unwrap();
    let c2_admin = admin_kubeconfig(&parsed, "c2", dir.path()).unwrap();
    let w4 = Worker::new(&set, 4, dir.path()).unwrap();
    let c2_target = JoinTarget {
        endpoint: &c2_endpoint,
        ca: &c2_ca,
        token: &c2_token,
        kubelet: &kubelet_bin,
    };
    let child = w4
        .join_command("x1", &c2_target, "90s")
        .unwrap()
        .spawn()
        .unwrap();
    let (_, results) = answer_joins(&world, vec![child]);
    assert!(results[0].0, "{}", results[0].1);
    assert!(
        results[0]
            .1
            .contains(&format!("VPN {} 10.0.0.2/16", w4.interface)),
        "{}",
        results[0].1
    );
    assert!(
        peers(&world).contains(&("worker-w3".to_string(), "10.0.0.2/16".to_string())),
        "{:?}",
        peers(&world)
    );
    let _k4 = w4
        .start_kubelet(
            &kubelet_command_of(&results[0].1).unwrap(),
            VERSION,
            &dir.path().join("k4.log"),
        )
        .unwrap();
    eventually(Duration::from_secs(60), || {
        let run = kubectl(
            &c2_admin,
            &["get", "--raw", "/api/v1/nodes/x1/proxy/healthz"],
        )?;
        anyhow::ensure!(
            run.success && run.stdout == "ok",
            "x1: {:?} {}",
            run.stdout,
            run.stderr
        );
        Ok(())
    })
    .unwrap();
    proxied("w3");
    drop(set);
}
