//! Scenario 1: the etcd serving and peer certificates of a running 3-replica cluster are
//! reissued (as a renewal does; here by dropping them from the Components' status). etcd reads
//! them from disk again for each new connection, so `oi reconcile` writes the files and
//! restarts nothing. Afterwards every member serves its new certificate (real etcd, read over
//! TLS), the membership is the same (same member IDs) and a key written before is read.
//!
//! Scenario 2, on the same cluster: the API serving certificates are reissued. The control
//! plane pods are replaced one at a time, each API server answering `/readyz` before the next;
//! etcd is untouched and `kubectl version` answers through the ingress afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use oi_e2e::{
    Etcdctl, LocalSet, World, admin_kubeconfig, eventually, inject_cluster, prerequisites,
    reconcile_until_ready, server_git_version, str_at,
};
use serde_yaml_ng::Value;

/// The member IDs and names, as etcdctl lists them.
fn member_ids(etcd: &Etcdctl) -> Vec<(String, String)> {
    let list: serde_json::Value =
        serde_json::from_str(&etcd.run(&["member", "list", "-w", "json"]).unwrap().stdout).unwrap();
    let mut ids: Vec<(String, String)> = list["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("").to_owned(),
                m["ID"].to_string(),
            )
        })
        .collect();
    ids.sort();
    ids
}

/// `world` without the `certificate` server certificate of cluster c1's control plane
/// Components.
fn without_server_certificates(world: &World, certificate: &str) -> (String, usize) {
    let mut dropped = 0;
    let mut text = String::new();
    for document in &world.documents {
        let mut document = document.clone();
        let ours = str_at(&document, &["kind"]) == Some("Component")
            && str_at(&document, &["spec", "cluster"]) == Some("c1")
            && str_at(&document, &["spec", "role"]) == Some("control-plane");
        if ours
            && let Some(certificates) = document
                .get_mut("status")
                .and_then(|s| s.get_mut("serverCertificates"))
                .and_then(Value::as_mapping_mut)
            && certificates.remove(certificate).is_some()
        {
            dropped += 1;
        }
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(&document).unwrap());
    }
    (text, dropped)
}

/// The etcd-server certificate of each control plane Component of c1, by its client endpoint.
fn etcd_server_certificates(world: &World) -> Vec<(String, String)> {
    let cluster = world.require_cluster("c1").unwrap();
    let mut found = Vec::new();
    for component in world.components_of("c1") {
        let name = str_at(component, &["metadata", "name"]).unwrap();
        let Some(endpoint) = str_at(cluster, &["status", "storageClientEndpoints", name]) else {
            continue;
        };
        let pem = str_at(
            component,
            &["status", "serverCertificates", "etcd-server", "certificate"],
        )
        .unwrap();
        found.push((endpoint.to_owned(), pem.trim().to_owned()));
    }
    found.sort();
    found
}

/// Asserts a rolling run: 3 pods replaced (one per replica), the 4 others unchanged, the 2
/// files (certificate, key) of each replica written, and the progress lines (without the
/// hypervisor) for which `step` holds exactly `expected`, in that order.
fn assert_rolled(
    test: &str,
    run: &oi_e2e::Run,
    summary: &oi_e2e::Summary,
    step: impl Fn(&str) -> bool,
    expected: [&str; 6],
) {
    assert_eq!(
        (
            summary.pods_replaced,
            summary.pods_unchanged,
            summary.files_written
        ),
        (3, 4, 6),
        "{test}: {summary}"
    );
    let steps: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with('[') && step(l))
        .filter_map(|l| l.split("] ").nth(1))
        .collect();
    assert_eq!(steps, expected, "{test}: {}", run.stderr);
}

#[test]
fn reissued_etcd_certificates_restart_nothing_then_api_servers_roll_one_at_a_time() {
    let test = "reissued_etcd_certificates_restart_nothing_then_api_servers_roll_one_at_a_time";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("roll", 3, 1, false).unwrap();
    let injected = inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 1).unwrap();
    let world = World::parse(&run.stdout).unwrap();
    let etcd = Etcdctl::new(&world, "c1").unwrap();
    eventually(Duration::from_secs(30), || {
        etcd.run(&["put", "/oi-e2e/kept", "across-restarts"])
    })
    .unwrap();
    let members_before = member_ids(&etcd);
    assert_eq!(members_before.len(), 3, "{members_before:?}");
    let before = etcd_server_certificates(&world);
    assert_eq!(before.len(), 3, "{before:?}");

    let (edited, dropped) = without_server_certificates(&world, "etcd-server");
    assert_eq!(dropped, 3);
    let edited = World::parse(&edited).unwrap();
    let (edited, dropped) = without_server_certificates(&edited, "etcd-peer");
    assert_eq!(dropped, 3);
    let (run, summary, _) = reconcile_until_ready(&edited, 1).unwrap();
    eprintln!("{test}: {summary}\n{}", run.stderr);
    // Four files per replica (two certificates, two keys), and no pod touched: etcd takes
    // them on its next connection.
    assert_eq!(
        (
            summary.pods_replaced,
            summary.pods_unchanged,
            summary.files_written
        ),
        (0, 7, 12),
        "{test}: {summary}\n{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("etcd member healthy"),
        "{test}: no member went down\n{}",
        run.stderr
    );

    // Every member serves its new certificate; same members; the data is there.
    let world = World::parse(&run.stdout).unwrap();
    let after = etcd_server_certificates(&world);
    for ((endpoint, old), (_, new)) in before.iter().zip(&after) {
        assert_ne!(old, new, "{endpoint}: the certificate was not reissued");
        let served = etcd.served_certificate(endpoint).unwrap();
        assert_eq!(
            served.split_whitespace().collect::<String>(),
            new.split_whitespace().collect::<String>(),
            "{endpoint} does not serve its reissued certificate"
        );
    }
    assert_eq!(member_ids(&etcd), members_before);
    let got = etcd
        .run(&["get", "/oi-e2e/kept", "--print-value-only"])
        .unwrap()
        .stdout;
    assert_eq!(got.trim_end(), "across-restarts");

    // The API serving certificates reissued: the control plane pods restart one at a time,
    // each API server ready before the next; etcd is untouched. `kubectl version` runs through
    // the ingress meanwhile (figures printed, not asserted: a request in flight on a server
    // that stops fails).
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    server_git_version(&kubeconfig).unwrap();
    let (edited, dropped) = without_server_certificates(&world, "apiserver");
    assert_eq!(dropped, 3);
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let prober = std::thread::spawn({
        let (stop, ok, failed, kubeconfig) =
            (stop.clone(), ok.clone(), failed.clone(), kubeconfig.clone());
        move || {
            while !stop.load(Ordering::SeqCst) {
                match server_git_version(&kubeconfig) {
                    Ok(_) => ok.fetch_add(1, Ordering::SeqCst),
                    Err(_) => failed.fetch_add(1, Ordering::SeqCst),
                };
            }
        }
    });
    let rolled = reconcile_until_ready(&edited, 1);
    stop.store(true, Ordering::SeqCst);
    prober.join().unwrap();
    let (run, summary, _) = rolled.unwrap();
    eprintln!(
        "{test}: {summary}; kubectl version through the ingress meanwhile: {} answered, {} failed\n{}",
        ok.load(Ordering::SeqCst),
        failed.load(Ordering::SeqCst),
        run.stderr
    );
    assert_rolled(
        test,
        &run,
        &summary,
        |l| l.contains(" pod ") || l.contains("ready"),
        [
            "c1/c1-control-plane-0: replaced pod c1-control-plane-0",
            "c1/c1-control-plane-0: kube-apiserver ready",
            "c1/c1-control-plane-1: replaced pod c1-control-plane-1",
            "c1/c1-control-plane-1: kube-apiserver ready",
            "c1/c1-control-plane-2: replaced pod c1-control-plane-2",
            "c1/c1-control-plane-2: kube-apiserver ready",
        ],
    );
    let world = World::parse(&run.stdout).unwrap();
    let kubeconfig = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    server_git_version(&kubeconfig).unwrap();
    assert_eq!(member_ids(&etcd), members_before);
    drop(set);
}
