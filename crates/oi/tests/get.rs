//! `oi get`: the world's objects as tables, compared whole with golden files
//! (`tests/golden/get-*.txt`; `OI_UPDATE_GOLDEN=1 cargo test -p oi-cli --test get` rewrites
//! them), and its other formats checked for what they must and must not hold.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use pretty_assertions::assert_eq;

#[path = "support/oi.rs"]
mod support;
use support::*;

/// The fixture's hypervisors, one of them given a zone and a capacity, and `private-3`
/// cordoned; a 3-replica cluster `c1` and a 1-replica `c2` with the VPN on.
fn world() -> String {
    let hypervisors = std::fs::read_to_string(hypervisors())
        .unwrap()
        .replacen(
            "metadata:\n  name: private-1\n",
            "metadata:\n  name: private-1\n  labels:\n    topology.kubernetes.io/zone: zone-a\n",
            1,
        )
        .replacen(
            "    high: 30999\n",
            "    high: 30999\n  capacity:\n    components: 6\n    cpu: \"4\"\n    memory: 8Gi\n",
            1,
        );
    let w = ok(
        &[
            "cluster",
            "inject",
            "--name",
            "c1",
            "--control-plane-replicas",
            "3",
        ],
        hypervisors.as_bytes(),
    );
    let w = ok(
        &["cluster", "inject", "--name", "c2", "--vpn-enabled"],
        w.as_bytes(),
    );
    ok(
        &["hypervisor", "cordon", "--name", "private-3"],
        w.as_bytes(),
    )
}

fn golden(name: &str, args: &[&str], world: &str) {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    let out = ok(&all, world.as_bytes());
    oi_testsupport::assert_golden(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/get-{name}.txt")),
        &out,
        "cargo test -p oi-cli --test get",
    );
}

#[test]
fn tables_of_clusters_hypervisors_and_components() {
    let w = world();
    golden("clusters", &["clusters"], &w);
    golden("clusters-wide", &["cluster", "-o", "wide"], &w);
    golden("hypervisors", &["hypervisors"], &w);
    golden("hypervisors-wide", &["hv", "-o", "wide"], &w);
    golden("components-wide", &["components", "-o", "wide"], &w);
    golden(
        "names",
        &[
            "comp",
            "c2-control-plane-0",
            "default/c1-ingress",
            "-o",
            "name",
        ],
        &w,
    );
}

#[test]
fn yaml_and_json_hold_the_objects_without_a_secret() {
    let w = world();
    let world = load(&w);
    let yaml = ok(&["get", "clusters", "c1", "-o", "yaml"], w.as_bytes());
    let json = ok(&["get", "clusters", "-o", "json"], w.as_bytes());
    for text in [&yaml, &json] {
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
    // Every join token's secret half is hidden; its id is kept.
    for token in &world.clusters.values().next().unwrap().spec.join_tokens {
        let (id, secret) = token.split_once('.').unwrap();
        assert!(!yaml.contains(secret) && !json.contains(secret));
        assert!(yaml.contains(&format!("{id}.<redacted>")), "{yaml}");
    }
    let one: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(one["metadata"]["name"].as_str(), Some("c1"));
    assert_eq!(
        one["spec"]["apiServer"]["ca"]["certificate"].as_str(),
        world
            .clusters
            .values()
            .next()
            .unwrap()
            .spec
            .api_server
            .ca
            .as_ref()
            .map(|c| c.certificate.as_str()),
        "public certificates are kept"
    );
    let list: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(list["kind"], "List");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c1", "c2"]);
}

#[test]
fn an_unknown_name_is_an_error_and_another_o_is_a_file() {
    let w = world();
    let out = oi(&["get", "cluster", "c1", "nope"], w.as_bytes());
    assert!(!out.status.success());
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        "error: no cluster named \"nope\" in the manifests (`oi get clusters` lists them)\n"
    );
    let out = oi(&["get", "widgets"], w.as_bytes());
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("invalid value 'widgets'"),
        "{}",
        stderr(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("table.txt");
    let printed = ok(&["get", "hypervisors"], w.as_bytes());
    assert_eq!(
        ok(&["get", "hypervisors", "-o", path_str(&file)], w.as_bytes()),
        ""
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), printed);
}

#[test]
fn join_tokens_by_id_and_state_never_their_secret() {
    let w = world();
    // The command shows the new token on stderr.
    let inject = |w: &str, seed: &str| {
        let out = oi(
            &["join-token", "inject", "--cluster", "c1", "--seed", seed],
            w.as_bytes(),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let w = inject(&w, "7");
    let w = inject(&w, "8");
    // A run wrote the first into the cluster; a third, since removed from the spec, is
    // still there.
    let mut world = load(&w);
    let c1 = world.clusters.values_mut().next().unwrap();
    assert_eq!(c1.spec.join_tokens.len(), 2);
    let first = c1.spec.join_tokens[0].clone();
    c1.status.join_tokens = vec![first, "zzzzzz.0000000000000000".to_string()];
    let w = world.to_yaml().unwrap();
    golden("join-tokens", &["join-tokens"], &w);
    let json = ok(&["get", "tokens", "c1", "-o", "json"], w.as_bytes());
    for token in &load(&w).clusters.values().next().unwrap().spec.join_tokens {
        let (id, secret) = token.split_once('.').unwrap();
        assert!(json.contains(id) && !json.contains(secret), "{json}");
    }
}

#[test]
fn describe_a_cluster_and_a_hypervisor() {
    let w = world();
    let out = oi(
        &["join-token", "inject", "--cluster", "c2", "--seed", "3"],
        w.as_bytes(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // As a run leaves it: conditions, a worker's VPN peer, the token in the cluster.
    let mut world = load(&stdout(&out));
    let key = oi_api::ObjectKey::new("default", "c2");
    let c2 = world.clusters.get_mut(&key).unwrap();
    c2.status.join_tokens = c2.spec.join_tokens.clone();
    let at = time::macros::datetime!(2026-11-22 00:00:00 UTC);
    oi_api::common::set_condition(
        &mut c2.status.conditions,
        "ReconcileSucceeded",
        oi_api::ConditionStatus::False,
        "IngressNotReady",
        "haproxy answered 503",
        at,
    );
    let (private_key, public_key) = oi_pki::generate_wireguard_keys();
    c2.status.vpn_peers.push(oi_api::VpnPeer {
        name: "worker-1".into(),
        address: "10.0.0.9".into(),
        private_key,
        public_key,
    });
    for (name, registered, address) in [("worker-1", true, "10.0.0.9/16"), ("worker-2", false, "")]
    {
        c2.status.joined_nodes.push(oi_api::JoinedNode {
            name: name.into(),
            registered,
            vpn_address: address.into(),
            issued_at: Some(at),
        });
    }
    let w = world.to_yaml().unwrap();
    for (name, args) in [
        ("describe-cluster", &["describe", "cluster", "c2"][..]),
        ("describe-hypervisor", &["describe", "hv", "private-1"][..]),
        ("nodes", &["get", "nodes"][..]),
        ("nodes-wide", &["get", "nodes", "c2", "-o", "wide"][..]),
    ] {
        let out = ok(args, w.as_bytes());
        oi_testsupport::assert_golden(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/get-{name}.txt")),
            &out,
            "cargo test -p oi-cli --test get",
        );
    }
    // A cluster no worker joined lists none; an unknown cluster is an error.
    assert_eq!(ok(&["get", "nodes", "c1"], w.as_bytes()), "");
    let out = oi(&["get", "nodes", "nope"], w.as_bytes());
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no cluster named \"nope\" in the manifests"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        ok(&["get", "nodes", "-o", "name"], w.as_bytes()),
        "node/c2/worker-1\nnode/c2/worker-2\n"
    );
    let out = oi(&["describe", "cluster", "nope"], w.as_bytes());
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
}

#[test]
fn a_hypervisor_being_removed_is_shown_so_by_the_schedulers_rule() {
    let mut world = load(&world());
    let key = oi_api::ObjectKey::cluster_scoped("private-2");
    world
        .hypervisors
        .get_mut(&key)
        .unwrap()
        .metadata
        .deletion_timestamp = Some(time::macros::datetime!(2026-11-22 00:00:00 UTC));
    let w = world.to_yaml().unwrap();
    let table = ok(&["get", "hv", "private-2", "private-3"], w.as_bytes());
    let states: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(states, ["Removing", "SchedulingDisabled"], "{table}");
    let described = ok(&["describe", "hv", "private-2"], w.as_bytes());
    assert!(
        described.contains("Scheduling:   being removed: what ran here is replaced elsewhere"),
        "{described}"
    );
}
