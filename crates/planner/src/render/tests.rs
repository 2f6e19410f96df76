#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;

use std::path::PathBuf;

use oi_api::{
    ClusterSpec, Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectMeta, PortRange, Resource,
};
use pretty_assertions::assert_eq;
use time::macros::datetime;

use crate::prepare;

/// Compares `actual` with the golden file `testdata/golden/<name>`.
fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/golden")
        .join(name);
    oi_testsupport::assert_golden(&path, actual, "cargo test -p oi-planner render");
}

fn hypervisor(name: &str, public: bool, ip: &str) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named(name),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: "/run/containerd/containerd.sock".into(),
            }),
            remote_cri_endpoint: None,
            public,
            ip_address: ip.into(),
            port_range: PortRange {
                low: 30000,
                high: 30099,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

/// A prepared world: cluster `team-a/c1`, three replicas, leaf certificates filled in.
fn prepared() -> World {
    prepared_with(false)
}

/// The same, with the cluster VPN on when `vpn`.
fn prepared_with(vpn: bool) -> World {
    let mut w = World::default();
    for h in [
        hypervisor("private-1", false, "10.0.0.1"),
        hypervisor("private-2", false, "10.0.0.2"),
        hypervisor("private-3", false, "10.0.0.3"),
        hypervisor("public-1", true, "192.0.2.1"),
    ] {
        w.hypervisors.insert(h.key(), h);
    }
    let c = Cluster::new(
        ObjectMeta::namespaced("team-a", "c1"),
        ClusterSpec {
            control_plane_replicas: Some(3),
            kubernetes_version: "1.37.1".into(),
            vpn: oi_api::Vpn {
                enabled: vpn,
                ..oi_api::Vpn::default()
            },
            ..ClusterSpec::default()
        },
    );
    let c = crate::testutil::with_pki(c);
    w.clusters.insert(c.key(), c);
    let p = prepare(w, datetime!(2026-11-22 03:00:00 UTC));
    assert!(p.failures.is_empty(), "{:?}", p.failures);
    p.world
}

fn describe(r: &Rendered) -> String {
    let mut out = String::new();
    for f in &r.files {
        let reloaded = if r.reloaded.contains(&f.path) {
            " (reloaded)"
        } else {
            ""
        };
        out.push_str(&format!("file {} {:o}{reloaded}\n", f.path, f.mode));
    }
    for p in &r.pods {
        out.push_str(&format!("pod {}/{}\n", p.namespace, p.name));
        for (k, v) in &p.labels {
            out.push_str(&format!("  label {k}={v}\n"));
        }
        for c in &p.containers {
            let privileged = if c.privileged { " privileged" } else { "" };
            out.push_str(&format!("  container {} {}{privileged}\n", c.name, c.image));
            out.push_str(&format!("    command {}\n", c.command.join(" ")));
            if let Some(r) = &c.resources {
                out.push_str(&format!(
                    "    resources cpu {}m ({} shares), memory limit {} MiB\n",
                    r.cpu_millis,
                    r.cpu_shares(),
                    r.memory_bytes >> 20
                ));
            }
            for a in &c.args {
                out.push_str(&format!("    {a}\n"));
            }
            for m in &c.mounts {
                let ro = if m.readonly { "ro" } else { "rw" };
                out.push_str(&format!(
                    "    mount {} -> {} {ro}\n",
                    m.host_path, m.container_path
                ));
            }
        }
    }
    for l in &r.reloads {
        out.push_str(&format!(
            "reload pod {} container {}: {:?} when {} change\n",
            l.pod,
            l.container,
            l.command,
            l.files.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    out
}

fn options() -> RenderOptions {
    RenderOptions {
        image_repository: Some("localhost/oneinfra".into()),
    }
}

#[test]
fn ingress_haproxy_config_and_pod() {
    let w = prepared();
    let r = render_component(&w, &ObjectKey::new("team-a", "c1-ingress"), &options()).unwrap();
    let cfg = r
        .files
        .iter()
        .find(|f| f.path.ends_with("/haproxy.cfg"))
        .unwrap();
    golden(
        "ingress-haproxy.cfg",
        std::str::from_utf8(&cfg.content).unwrap(),
    );
    golden("ingress.txt", &describe(&r));
}

#[test]
fn control_plane_replica_arguments_and_files() {
    let w = prepared();
    for i in [0, 1] {
        let key = ObjectKey::new("team-a", format!("c1-control-plane-{i}"));
        let r = render_component(&w, &key, &options()).unwrap();
        golden(&format!("control-plane-{i}.txt"), &describe(&r));
        // Deterministic: rendering again gives the same hashes.
        let again = render_component(&w, &key, &options()).unwrap();
        assert_eq!(
            r.pods.iter().map(PodSpec::content_hash).collect::<Vec<_>>(),
            again
                .pods
                .iter()
                .map(PodSpec::content_hash)
                .collect::<Vec<_>>()
        );
        assert!(
            r.files
                .iter()
                .filter(|f| f.path.ends_with(".key"))
                .all(|f| f.mode == 0o600)
        );
    }
}

#[test]
fn arguments_are_sorted_flags() {
    let w = prepared();
    let key = ObjectKey::new("team-a", "c1-control-plane-2");
    let r = render_component(&w, &key, &options()).unwrap();
    for c in r.pods.iter().flat_map(|p| &p.containers) {
        let names: Vec<&str> = c
            .args
            .iter()
            .map(|a| a.split('=').next().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "{}", c.name);
    }
}

#[test]
fn missing_certificate_is_named() {
    let mut w = prepared();
    let key = ObjectKey::new("team-a", "c1-control-plane-0");
    w.components
        .get_mut(&key)
        .unwrap()
        .status
        .server_certificates
        .remove(certs::ETCD_PEER);
    assert_eq!(
        render_component(&w, &key, &options()),
        Err(Error::Render {
            component: key.clone(),
            missing: "certificate status.serverCertificates.etcd-peer".into()
        })
    );
}

#[test]
fn a_replica_without_its_etcd_record_is_not_rendered() {
    let mut w = prepared();
    let key = ObjectKey::new("team-a", "c1-control-plane-1");
    w.components.get_mut(&key).unwrap().status.etcd_member = None;
    assert_eq!(
        render_component(&w, &key, &options()),
        Err(Error::Render {
            component: key.clone(),
            missing: "status.etcdMember (set when the replica is planned)".into()
        })
    );
}

#[test]
fn unknown_component_is_an_error() {
    let key = ObjectKey::new("team-a", "nope");
    assert_eq!(
        render_component(&prepared(), &key, &options()),
        Err(Error::Render {
            component: key.clone(),
            missing: "component".into()
        })
    );
}

#[test]
fn haproxy_backends_sorted_whatever_the_input_order() {
    let a = haproxy_config(
        40000,
        "/ca.crt",
        &[
            ("b".into(), "10.0.0.2".into(), 30000),
            ("a".into(), "10.0.0.1".into(), 30000),
        ],
        30001,
    );
    let b = haproxy_config(
        40000,
        "/ca.crt",
        &[
            ("a".into(), "10.0.0.1".into(), 30000),
            ("b".into(), "10.0.0.2".into(), 30000),
        ],
        30001,
    );
    assert_eq!(a, b);
    assert!(a.contains("  server a 10.0.0.1:30000\n  server b 10.0.0.2:30000\n"));
    assert!(a.contains("  stats socket ipv4@127.0.0.1:30001 level admin\n"));
}

#[test]
fn with_the_vpn_the_ingress_runs_the_endpoint_and_api_servers_egress_through_it() {
    let mut w = prepared_with(true);
    let key = ObjectKey::new("team-a", "c1");
    let (_, public) = oi_pki::generate_wireguard_keys();
    w.clusters.get_mut(&key).unwrap().status.vpn_peers = vec![oi_api::VpnPeer {
        name: "worker-w1".into(),
        address: "10.0.0.2/16".into(),
        private_key: String::new(),
        public_key: public.clone(),
    }];
    let ingress =
        render_component(&w, &ObjectKey::new("team-a", "c1-ingress"), &options()).unwrap();
    golden("ingress-vpn.txt", &describe(&ingress));
    let conf = ingress
        .files
        .iter()
        .find(|f| f.path.ends_with("/vpn.conf"))
        .unwrap();
    let text = std::str::from_utf8(&conf.content).unwrap();
    let cluster = &w.clusters[&key];
    assert!(text.contains(&format!("PrivateKey = {}\n", cluster.spec.vpn.private_key)));
    let port = w.components[&ObjectKey::new("team-a", "c1-ingress")]
        .status
        .host_port(crate::ports::names::WIREGUARD)
        .unwrap();
    assert!(text.contains(&format!("ListenPort = {port}\n")));
    assert!(text.contains(&format!(
        "[Peer]\n# worker-w1\nPublicKey = {public}\nAllowedIPs = 10.0.0.2/32\n"
    )));
    // The proxy's certificate: the API server CA's, for the ingress's address.
    let cert = ingress
        .files
        .iter()
        .find(|f| f.path.ends_with("/vpn-proxy.crt"))
        .unwrap();
    let info = oi_pki::inspect_certificate(std::str::from_utf8(&cert.content).unwrap()).unwrap();
    assert_eq!(info.sans, ["192.0.2.1"]);
    let key_file = ingress
        .files
        .iter()
        .find(|f| f.path.ends_with("/vpn-proxy.key"))
        .unwrap();
    assert_eq!(key_file.mode, 0o600);
    oi_pki::check_leaf(
        std::str::from_utf8(&cert.content).unwrap(),
        std::str::from_utf8(&key_file.content).unwrap(),
        Some(&cluster.spec.api_server.ca.as_ref().unwrap().certificate),
    )
    .unwrap();

    let replica = render_component(
        &w,
        &ObjectKey::new("team-a", "c1-control-plane-0"),
        &options(),
    )
    .unwrap();
    let egress = replica
        .files
        .iter()
        .find(|f| f.path.ends_with("/egress-selector.yaml"))
        .unwrap();
    golden(
        "egress-selector.yaml",
        std::str::from_utf8(&egress.content).unwrap(),
    );
    let apiserver = &replica
        .pods
        .iter()
        .find(|p| p.name == "c1-control-plane-0")
        .unwrap()
        .containers[0];
    assert!(
        apiserver
            .args
            .contains(&format!("--egress-selector-config-file={}", egress.path))
    );
    let mut sorted = apiserver.args.clone();
    sorted.sort();
    assert_eq!(sorted, apiserver.args);
    // Without the VPN: no egress, no VPN pod.
    let w = prepared();
    let replica = render_component(
        &w,
        &ObjectKey::new("team-a", "c1-control-plane-0"),
        &options(),
    )
    .unwrap();
    assert!(
        !replica
            .files
            .iter()
            .any(|f| f.path.ends_with("/egress-selector.yaml"))
    );
}

/// The API servers' structured authentication configuration: one JWT authenticator per
/// issuer (`oidc` first, then `oidcIssuers`), with what `--oidc-*` used to say; its file
/// changes restart nothing (the API server reads it again), and no `--oidc-*` flag is
/// rendered beside it (kube-apiserver exits when both are given).
#[test]
fn the_api_servers_trust_every_issuer_through_their_authentication_configuration() {
    let mut w = prepared();
    let key = ObjectKey::new("team-a", "c1");
    let ca = w.clusters[&key]
        .spec
        .api_server
        .ca
        .clone()
        .unwrap()
        .certificate;
    let component = ObjectKey::new("team-a", "c1-control-plane-0");
    let plain = render_component(&w, &component, &options()).unwrap();
    let api_server = &mut w.clusters.get_mut(&key).unwrap().spec.api_server;
    api_server.oidc = Some(oi_api::ApiServerOidc {
        issuer_url: "https://idp.example:8443/realms/ops".into(),
        client_id: "kubernetes".into(),
        username_claim: "email".into(),
        groups_claim: "groups".into(),
        groups_prefix: Some("oidc:".into()),
        signing_algs: vec!["ES256".into(), "RS256".into()],
        ca: ca.clone(),
        ..oi_api::ApiServerOidc::default()
    });
    api_server.oidc_issuers = vec![oi_api::ApiServerOidc {
        issuer_url: "https://login.example.org".into(),
        client_id: "k8s".into(),
        audiences: vec!["console".into()],
        ..oi_api::ApiServerOidc::default()
    }];
    let replica = render_component(&w, &component, &options()).unwrap();
    let config_of = |r: &crate::render::Rendered| {
        let file = r
            .files
            .iter()
            .find(|f| f.path.ends_with("/authentication-config.yaml"))
            .unwrap()
            .clone();
        let value: serde_json::Value = serde_yaml_ng::from_slice(&file.content).unwrap();
        (file, value)
    };
    let (file, config) = config_of(&replica);
    assert_eq!(file.mode, 0o644);
    assert_eq!(config["apiVersion"], "apiserver.config.k8s.io/v1");
    assert_eq!(config["kind"], "AuthenticationConfiguration");
    assert_eq!(
        config["jwt"],
        serde_json::json!([
            {
                "issuer": {
                    "url": "https://idp.example:8443/realms/ops",
                    "audiences": ["kubernetes"],
                    "certificateAuthority": ca,
                },
                "claimMappings": {
                    "username": { "claim": "email", "prefix": "" },
                    "groups": { "claim": "groups", "prefix": "oidc:" },
                },
            },
            {
                "issuer": {
                    "url": "https://login.example.org",
                    "audiences": ["k8s", "console"],
                    "audienceMatchPolicy": "MatchAny",
                },
                "claimMappings": {
                    "username": { "claim": "sub", "prefix": "https://login.example.org#" },
                },
            },
        ])
    );
    let apiserver = &replica
        .pods
        .iter()
        .find(|p| p.name == "c1-control-plane-0")
        .unwrap()
        .containers[0];
    assert!(
        apiserver
            .args
            .contains(&format!("--authentication-config={}", file.path))
    );
    assert!(!apiserver.args.iter().any(|a| a.starts_with("--oidc-")));
    // Trusting an issuer more or less changes the file only, which restarts nothing.
    let (before, none) = config_of(&plain);
    assert_eq!(none["jwt"], serde_json::json!([]));
    assert_eq!(
        plain.pods, replica.pods,
        "the pods do not change with the issuers"
    );
    let known = plain
        .files
        .iter()
        .map(|f| (f.path.clone(), f.content_hash()))
        .collect();
    assert_ne!(before.content, file.content);
    assert!(replica.reloaded.contains(&file.path));
    let restarted = crate::restarts::pods_reading_changed_files(&replica, &known);
    assert!(restarted.is_empty(), "{restarted:?}");
    assert!(plain.reloaded.contains(&before.path));
}
