#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::BTreeMap;

use oi_api::runtime::{HostFile, PodSpec};

use super::*;

fn container(name: &str, args: &[&str]) -> oi_api::runtime::ContainerSpec {
    oi_api::runtime::ContainerSpec {
        name: name.into(),
        image: "busybox".into(),
        command: vec![name.into()],
        args: args.iter().map(|a| (*a).to_string()).collect(),
        env: BTreeMap::new(),
        mounts: vec![],
        privileged: false,
        resources: None,
    }
}

fn host_file(path: &str, content: &str) -> HostFile {
    HostFile {
        path: path.into(),
        content: content.as_bytes().to_vec(),
        mode: 0o600,
    }
}

#[test]
fn only_the_pods_that_read_a_changed_file_restart() {
    let pod = |name: &str, args: &[&str]| PodSpec {
        namespace: "ns".into(),
        name: name.into(),
        labels: BTreeMap::new(),
        containers: vec![container(name, args)],
    };
    let rendered = Rendered {
        reloads: Vec::new(),
        runtime_api: None,
        pods: vec![
            pod("etcd", &["--cert-file=/d/etcd.crt"]),
            pod("apiserver", &["--tls-cert-file=/d/api.crt"]),
            pod("scheduler", &["--kubeconfig=/d/scheduler.kubeconfig"]),
            pod("vpn", &["--config=/d/vpn.conf"]),
        ],
        files: vec![
            host_file("/d/etcd.crt", "e"),
            host_file("/d/api.crt", "a"),
            host_file(
                "/d/scheduler.kubeconfig",
                "client-certificate: /d/sched.crt",
            ),
            host_file("/d/sched.crt", "s"),
            host_file("/d/unnamed", "u"),
            host_file("/d/vpn.conf", "v"),
        ],
        reloaded: ["/d/vpn.conf".to_string()].into(),
    };
    let hashes = |changed: &[&str]| -> BTreeMap<String, String> {
        rendered
            .files
            .iter()
            .map(|f| {
                let hash = if changed.contains(&f.path.as_str()) {
                    "old".to_string()
                } else {
                    f.content_hash()
                };
                (f.path.clone(), hash)
            })
            .collect()
    };
    let restart = |changed: &[&str]| -> Vec<String> {
        pods_reading_changed_files(&rendered, &hashes(changed))
            .into_iter()
            .collect()
    };
    assert!(restart(&[]).is_empty());
    assert_eq!(restart(&["/d/etcd.crt"]), ["etcd"]);
    assert_eq!(
        restart(&["/d/api.crt", "/d/etcd.crt"]),
        ["apiserver", "etcd"]
    );
    // Named by a file the pod names.
    assert_eq!(restart(&["/d/sched.crt"]), ["scheduler"]);
    assert_eq!(restart(&["/d/scheduler.kubeconfig"]), ["scheduler"]);
    // Named by no pod: nothing tells which one reads it, so all restart.
    assert_eq!(
        restart(&["/d/unnamed"]),
        ["apiserver", "etcd", "scheduler", "vpn"]
    );
    // Its reader takes a change by itself: nothing restarts, not even the pod naming it.
    assert!(restart(&["/d/vpn.conf"]).is_empty());
    assert_eq!(restart(&["/d/vpn.conf", "/d/etcd.crt"]), ["etcd"]);
    // A file never written before (no known hash) counts as changed.
    let mut known = hashes(&[]);
    known.remove("/d/api.crt");
    let fresh: Vec<String> = pods_reading_changed_files(&rendered, &known)
        .into_iter()
        .collect();
    assert_eq!(fresh, ["apiserver"]);
}

#[test]
fn stale_files_are_the_records_of_files_no_longer_planned_inside_the_directory() {
    let planned = HostFile {
        path: "/etc/oneinfra/ns/c/c-ingress/haproxy.cfg".into(),
        content: b"x".to_vec(),
        mode: 0o644,
    };
    let known = BTreeMap::from(
        [
            "/etc/oneinfra/ns/c/c-ingress/haproxy.cfg",
            "/etc/oneinfra/ns/c/c-ingress/vpn-proxy.key",
            "/etc/oneinfra/ns/c/c-ingress/sub/old.crt",
            // Outside the directory, beside it, or not a clean path: never acted upon.
            "/etc/oneinfra/ns/c/c-ingress-2/vpn-proxy.key",
            "/etc/passwd",
            "/etc/oneinfra/ns/c/c-ingress/../../../../passwd",
            "/etc/oneinfra/ns/c/c-ingress",
        ]
        .map(|p| (p.to_string(), "h".to_string())),
    );
    assert_eq!(
        stale_files(
            std::slice::from_ref(&planned),
            &known,
            "/etc/oneinfra/ns/c/c-ingress"
        ),
        [
            "/etc/oneinfra/ns/c/c-ingress/sub/old.crt",
            "/etc/oneinfra/ns/c/c-ingress/vpn-proxy.key"
        ]
    );
    assert_eq!(
        stale_files(&[planned], &known, "/etc/oneinfra/ns/c/c-ingress/"),
        stale_files(
            &[],
            &BTreeMap::from([
                (
                    "/etc/oneinfra/ns/c/c-ingress/sub/old.crt".to_string(),
                    String::new()
                ),
                (
                    "/etc/oneinfra/ns/c/c-ingress/vpn-proxy.key".to_string(),
                    String::new()
                ),
            ]),
            "/etc/oneinfra/ns/c/c-ingress"
        )
    );
    assert!(stale_files(&[], &BTreeMap::new(), "/etc/oneinfra/ns/c/c-ingress").is_empty());
}
