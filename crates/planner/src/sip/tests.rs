#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test
//! SIP over the world: upstream's scenarios (hosts available, too few, anti-affinity per host
//! and per rack for both roles, addresses from JSON and YAML network data, missing or
//! malformed Secrets), growing, shrinking, failures and deletion; and properties over any
//! sequence of them.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use oi_api::sip::{
    CLUSTER_NAME_LABEL, CLUSTER_NAMESPACE_LABEL, NODE_STATE_LABEL, NODE_TYPE_LABEL,
    SELECTION_LABELS,
};
use oi_api::{ObjectKey, World};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use time::macros::datetime;

use super::*;

pub(crate) const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);
pub(crate) const NS: &str = "tenants";

pub(crate) fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// One host: its labels, and its Secrets (network data in JSON unless `yaml`).
struct Host<'a> {
    name: &'a str,
    flavor: &'a str,
    rack: &'a str,
    ip: &'a str,
    yaml: bool,
}

fn host_docs(h: &Host) -> String {
    let network_data = if h.yaml {
        format!(
            "links: [{{id: eno1, type: phy}}]\nnetworks:\n- id: oam-ipv4\n  type: ipv4\n  link: eno1\n  ip_address: {}\n  netmask: 255.255.255.0\n",
            h.ip
        )
    } else {
        format!(
            r#"{{"links": [{{"id": "eno1", "type": "phy"}}], "networks": [{{"id": "pxe-ipv4", "ip_address": "172.30.0.9"}}, {{"id": "oam-ipv4", "type": "ipv4", "link": "eno1", "ip_address": "{}", "netmask": "255.255.255.0"}}]}}"#,
            h.ip
        )
    };
    format!(
        r"apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: {name}
  namespace: {NS}
  labels:
    flavor: {flavor}
    rack: {rack}
    host: {name}
    owner: someone-else
spec:
  online: true
  bmc:
    address: redfish+http://127.0.0.1:8000/redfish/v1/Systems/{name}
    credentialsName: {name}-bmc
  networkData:
    name: {name}-networkdata
    namespace: {NS}
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}-bmc, namespace: {NS}}}
type: Opaque
data: {{username: {user}, password: {password}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}-networkdata, namespace: {NS}}}
type: Opaque
data: {{networkData: {nd}}}
",
        name = h.name,
        flavor = h.flavor,
        rack = h.rack,
        user = b64("admin"),
        password = b64("s3cret-bmc-password"),
        nd = b64(&network_data),
    )
}

pub(crate) fn sip_doc(
    name: &str,
    cp: (i64, i64, &str),
    worker: (i64, i64, &str),
    services: &str,
) -> String {
    format!(
        r"apiVersion: airship.airshipit.org/v1
kind: SIPCluster
metadata: {{name: {name}, namespace: {NS}}}
spec:
  nodes:
    ControlPlane:
      labelSelector: {{matchLabels: {{flavor: control-plane}}}}
      topologyKey: '{}'
      count: {{active: {}, standby: {}}}
    Worker:
      labelSelector:
        matchExpressions: [{{key: flavor, operator: In, values: [worker]}}]
      topologyKey: '{}'
      count: {{active: {}, standby: {}}}
  services: {services}
",
        cp.2, cp.0, cp.1, worker.2, worker.0, worker.1
    )
}

/// Six hosts as upstream's samples have them: control plane r006 x2, r007 x1; workers on
/// r007, r008, r009, each its own host.
pub(crate) fn inventory() -> String {
    [
        Host {
            name: "cp-r006-1",
            flavor: "control-plane",
            rack: "r006",
            ip: "10.0.0.1",
            yaml: false,
        },
        Host {
            name: "cp-r006-2",
            flavor: "control-plane",
            rack: "r006",
            ip: "10.0.0.2",
            yaml: true,
        },
        Host {
            name: "cp-r007-1",
            flavor: "control-plane",
            rack: "r007",
            ip: "10.0.0.3",
            yaml: false,
        },
        Host {
            name: "w-r007-1",
            flavor: "worker",
            rack: "r007",
            ip: "10.0.1.1",
            yaml: true,
        },
        Host {
            name: "w-r008-1",
            flavor: "worker",
            rack: "r008",
            ip: "10.0.1.2",
            yaml: false,
        },
        Host {
            name: "w-r009-1",
            flavor: "worker",
            rack: "r009",
            ip: "10.0.1.3",
            yaml: false,
        },
    ]
    .iter()
    .map(host_docs)
    .collect::<Vec<_>>()
    .join("---\n")
}

const JUMP_ONLY: &str = "{jumpHost: [{image: jump, nodePort: 30000, nodeInterfaceId: oam-ipv4, nodeSSHPrivateKeys: keys}]}";

pub(crate) fn load(parts: &[&str]) -> World {
    World::load(&parts.join("\n---\n"), "test").unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn key(name: &str) -> ObjectKey {
    ObjectKey::new(NS, name)
}

/// `(host, role, state)` of every host labelled for SIPCluster `sip`.
fn held(world: &World, sip: &str) -> Vec<(String, String, String)> {
    world
        .bare_metal_hosts
        .values()
        .filter(|h| held_by(&h.metadata.labels, &key(sip)))
        .map(|h| {
            (
                h.metadata.name.clone(),
                h.metadata.labels[NODE_TYPE_LABEL].clone(),
                h.metadata.labels[NODE_STATE_LABEL].clone(),
            )
        })
        .collect()
}

fn t(host: &str, role: &str, state: &str) -> (String, String, String) {
    (host.into(), role.into(), state.into())
}

#[test]
fn hosts_available_are_selected_one_per_rack_and_labelled_as_upstream_does() {
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (1, 1, "rack"), (2, 1, "host"), "{}"),
    ]);
    let reports = select_hosts(&mut world, NOW);
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert!(r.ready, "{}", r.message);
    assert_eq!(r.reason, "ReconciliationSucceeded");
    assert_eq!(
        held(&world, "s1"),
        [
            t("cp-r006-1", "ControlPlane", "active"),
            t("cp-r007-1", "ControlPlane", "standby"),
            t("w-r007-1", "Worker", "active"),
            t("w-r008-1", "Worker", "active"),
            t("w-r009-1", "Worker", "standby"),
        ]
    );
    let labels = &world.bare_metal_hosts[&key("cp-r006-1")].metadata.labels;
    assert_eq!(labels[CLUSTER_NAMESPACE_LABEL], NS);
    assert_eq!(labels[CLUSTER_NAME_LABEL], "s1");
    assert_eq!(labels["owner"], "someone-else");
    assert_eq!(
        r.message,
        "hosts ControlPlane: active cp-r006-1, standby cp-r007-1; Worker: active w-r007-1, w-r008-1, standby w-r009-1"
    );
    let sip = &world.sip_clusters[&key("s1")];
    let ready = sip.condition("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::True, "ReconciliationSucceeded")
    );

    // A second run changes nothing: no label, no condition.
    let before = world.clone();
    let again = select_hosts(&mut world, datetime!(2026-11-26 00:00 UTC));
    assert!(again[0].relabelled.is_empty());
    assert_eq!(world, before);
}

#[test]
fn addresses_come_from_json_and_yaml_network_data_and_the_bmc_keeps_its_path() {
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (2, 0, "rack"), (1, 0, "host"), JUMP_ONLY),
    ]);
    let r = select_hosts(&mut world, NOW).remove(0);
    // cp-r006-1 (JSON) and cp-r007-1 (JSON); the worker w-r007-1 has YAML network data.
    let ip = |h: &str| r.hosts[&key(h)].addresses["oam-ipv4"].to_string();
    assert_eq!(ip("cp-r006-1"), "10.0.0.1");
    assert_eq!(ip("w-r007-1"), "10.0.1.1");
    let data = &r.hosts[&key("cp-r007-1")];
    assert_eq!(data.bmc.base_url(), "http://127.0.0.1:8000");
    assert_eq!(data.bmc.path, "/redfish/v1/Systems/cp-r007-1");
    assert_eq!(data.bmc_username, "admin");
    assert_eq!(data.bmc_password, "s3cret-bmc-password");
    assert!(
        !format!("{data:?} {r:?}").contains("s3cret"),
        "the BMC password shows in Debug"
    );
    // The jump host's inventory: every held host by name, its address, its BMC.
    let jump = super::jump_host_inventory(&r, "oam-ipv4");
    let names: Vec<&str> = jump.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["cp-r006-1", "cp-r007-1", "w-r007-1"]);
    let cp = &jump.hosts[1];
    assert_eq!(cp.ip.as_deref(), Some("10.0.0.3"));
    assert_eq!(
        cp.bmc.address,
        "redfish+http://127.0.0.1:8000/redfish/v1/Systems/cp-r007-1"
    );
    assert_eq!(
        (cp.bmc.username.as_str(), cp.bmc.password.as_str()),
        ("admin", "s3cret-bmc-password")
    );
    assert!(!format!("{jump:?}").contains("s3cret"));
    let text = serde_json::to_string(&jump).unwrap();
    assert_eq!(
        serde_json::from_str::<oi_api::JumpHostInventory>(&text).unwrap(),
        jump
    );
    assert_eq!(
        super::jump_host_inventory(&r, "no-such-network").hosts[0].ip,
        None
    );
    // Services asked for: their run sets the condition, selection does not.
    assert!(!r.ready);
    assert_eq!(r.reason, "InfraServiceFailure");
    assert!(
        r.message.contains("support services asked for: jumpHost"),
        "{}",
        r.message
    );
    assert!(world.sip_clusters[&r.key].condition("Ready").is_none());
    // YAML network data on a control plane host too.
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (1, 0, "host"), (0, 0, ""), JUMP_ONLY),
    ]);
    world
        .bare_metal_hosts
        .get_mut(&key("cp-r006-1"))
        .unwrap()
        .status
        .operational_status = "error".into();
    let r = select_hosts(&mut world, NOW).remove(0);
    assert_eq!(
        r.hosts[&key("cp-r006-2")].addresses["oam-ipv4"].to_string(),
        "10.0.0.2"
    );
}

#[test]
fn too_few_control_plane_hosts_label_nothing_and_say_why_each_was_passed_over() {
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (3, 0, "rack"), (1, 0, "host"), "{}"),
    ]);
    let before = world.bare_metal_hosts.clone();
    let r = select_hosts(&mut world, NOW).remove(0);
    assert!(!r.ready);
    assert_eq!(r.reason, "Unschedulable");
    assert_eq!(
        world.bare_metal_hosts, before,
        "all or nothing: no host labelled"
    );
    assert_eq!(
        r.message,
        "unschedulable, no host labelled: node set ControlPlane lacks 1 host (1 active, 0 standby) matching flavor=control-plane, one per rack; passed over: cp-r006-2: its rack r006 already holds cp-r006-1 of node set ControlPlane"
    );
    let cond = world.sip_clusters[&key("s1")].condition("Ready").unwrap();
    assert_eq!(cond.reason, "Unschedulable");
    assert_eq!(cond.message, r.message);
}

#[test]
fn too_few_worker_hosts_label_nothing() {
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (1, 0, "rack"), (2, 2, "host"), "{}"),
    ]);
    let before = world.bare_metal_hosts.clone();
    let r = select_hosts(&mut world, NOW).remove(0);
    assert_eq!(r.reason, "Unschedulable");
    assert_eq!(world.bare_metal_hosts, before);
    assert!(
        r.message.contains("node set Worker lacks 1 host (0 active, 1 standby) matching flavor in (worker), one per host; no other host matches"),
        "{}",
        r.message
    );
}

#[test]
fn anti_affinity_per_rack_and_per_host_for_both_roles() {
    // Workers per rack: r007, r008, r009 are three racks.
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (2, 0, "rack"), (3, 0, "rack"), "{}"),
    ]);
    assert!(select_hosts(&mut world, NOW)[0].ready);
    // Control plane per host: three hosts, two on one rack.
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (3, 0, "host"), (3, 0, "host"), "{}"),
    ]);
    assert!(select_hosts(&mut world, NOW)[0].ready);
    assert_eq!(held(&world, "s1").len(), 6);
    // Workers per rack, one more than there are racks.
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (1, 0, "rack"), (3, 1, "rack"), "{}"),
    ]);
    let r = select_hosts(&mut world, NOW).remove(0);
    assert_eq!(r.reason, "Unschedulable");
    assert!(
        r.message.contains("node set Worker lacks 1 host"),
        "{}",
        r.message
    );
}

#[test]
fn missing_or_malformed_secrets_pass_hosts_over_naming_the_secret_and_key() {
    let inv = inventory()
        // cp-r006-1: no BMC credentials Secret.
        .replace("name: cp-r006-1-bmc,", "name: unrelated-bmc,")
        // cp-r007-1: network data without the interface the jump host needs.
        .replace(&b64(&format!(
            r#"{{"links": [{{"id": "eno1", "type": "phy"}}], "networks": [{{"id": "pxe-ipv4", "ip_address": "172.30.0.9"}}, {{"id": "oam-ipv4", "type": "ipv4", "link": "eno1", "ip_address": "{}", "netmask": "255.255.255.0"}}]}}"#,
            "10.0.0.3"
        )), &b64("{\"networks\": [{\"id\": \"pxe-ipv4\", \"ip_address\": \"172.30.0.9\"}]}"));
    // cp-r006-2: network data that is not network data.
    let inv = inv.replace(
        &b64("links: [{id: eno1, type: phy}]\nnetworks:\n- id: oam-ipv4\n  type: ipv4\n  link: eno1\n  ip_address: 10.0.0.2\n  netmask: 255.255.255.0\n"),
        &b64("networks: {oops"),
    );
    let mut world = load(&[
        &inv,
        &sip_doc("s1", (1, 0, "host"), (1, 0, "host"), JUMP_ONLY),
    ]);
    let r = select_hosts(&mut world, NOW).remove(0);
    assert_eq!(r.reason, "Unschedulable");
    let m = &r.message;
    assert!(
        m.contains("cp-r006-1: its BMC credentials Secret tenants/cp-r006-1-bmc is missing"),
        "{m}"
    );
    assert!(m.contains("cp-r006-2: its network data Secret tenants/cp-r006-2-networkdata key networkData is neither JSON nor YAML network data"), "{m}");
    assert!(m.contains("cp-r007-1: its network data Secret tenants/cp-r007-1-networkdata key networkData has no network \"oam-ipv4\" (spec.services.jumpHost[0].nodeInterfaceId)"), "{m}");
    assert!(!m.contains("s3cret"), "{m}");

    // A credentials Secret without a password.
    let inv = inventory().replace(
        &format!(
            "data: {{username: {}, password: {}}}",
            b64("admin"),
            b64("s3cret-bmc-password")
        ),
        &format!("data: {{username: {}}}", b64("admin")),
    );
    let mut world = load(&[
        &inv,
        &sip_doc("s1", (1, 0, "host"), (0, 0, "host"), JUMP_ONLY),
    ]);
    let r = select_hosts(&mut world, NOW).remove(0);
    assert!(
        r.message.contains(
            "cp-r006-1: its BMC credentials Secret tenants/cp-r006-1-bmc has no key password"
        ),
        "{}",
        r.message
    );
    // No network data reference at all.
    let inv = inventory().replace(
        "  networkData:\n    name: cp-r006-1-networkdata\n    namespace: tenants\n",
        "",
    );
    let mut world = load(&[&inv, &sip_doc("s1", (3, 0, "host"), (0, 0, "host"), "{}")]);
    let r = select_hosts(&mut world, NOW).remove(0);
    assert!(
        r.message.contains("cp-r006-1: has no spec.networkData"),
        "{}",
        r.message
    );
}

#[test]
fn a_failed_active_host_is_replaced_by_a_standby_one_and_a_new_standby_chosen() {
    let inv = format!(
        "{}---\n{}",
        inventory(),
        host_docs(&Host {
            name: "cp-r008-1",
            flavor: "control-plane",
            rack: "r008",
            ip: "10.0.0.4",
            yaml: false
        })
    );
    let mut world = load(&[&inv, &sip_doc("s1", (1, 1, "rack"), (0, 0, ""), "{}")]);
    select_hosts(&mut world, NOW);
    assert_eq!(
        held(&world, "s1"),
        [
            t("cp-r006-1", "ControlPlane", "active"),
            t("cp-r007-1", "ControlPlane", "standby")
        ]
    );
    let host = world.bare_metal_hosts.get_mut(&key("cp-r006-1")).unwrap();
    host.status.operational_status = "error".into();
    host.status.error_type = "power management error".into();
    let r = select_hosts(&mut world, NOW).remove(0);
    assert!(r.ready, "{}", r.message);
    assert_eq!(r.selection.promoted, [key("cp-r007-1")]);
    assert_eq!(
        held(&world, "s1"),
        [
            t("cp-r006-2", "ControlPlane", "standby"),
            t("cp-r007-1", "ControlPlane", "active"),
        ]
    );
    assert_eq!(
        r.selection.released,
        [(key("cp-r006-1"), "in power management error".to_string())]
    );
    // The failed host carries none of our labels, and still its own.
    let labels = &world.bare_metal_hosts[&key("cp-r006-1")].metadata.labels;
    assert!(
        SELECTION_LABELS.iter().all(|l| !labels.contains_key(*l)),
        "{labels:?}"
    );
    assert_eq!(labels["owner"], "someone-else");

    // The active host disappears from the inventory: the standby takes over.
    world.bare_metal_hosts.remove(&key("cp-r007-1"));
    let r = select_hosts(&mut world, NOW).remove(0);
    assert!(r.ready, "{}", r.message);
    assert_eq!(
        held(&world, "s1"),
        [
            t("cp-r006-2", "ControlPlane", "active"),
            t("cp-r008-1", "ControlPlane", "standby")
        ]
    );
}

#[test]
fn growing_and_shrinking_keep_the_hosts_held_and_let_go_the_highest() {
    let mut world = load(&[
        &inventory(),
        &sip_doc("s1", (1, 0, "rack"), (1, 0, "host"), "{}"),
    ]);
    select_hosts(&mut world, NOW);
    assert_eq!(
        held(&world, "s1"),
        [
            t("cp-r006-1", "ControlPlane", "active"),
            t("w-r007-1", "Worker", "active")
        ]
    );
    // Grow the workers to 2 active + 1 standby.
    let grown = load(&[&sip_doc("s1", (1, 0, "rack"), (2, 1, "host"), "{}")]);
    world.sip_clusters = grown.sip_clusters;
    select_hosts(&mut world, NOW);
    assert_eq!(
        held(&world, "s1"),
        [
            t("cp-r006-1", "ControlPlane", "active"),
            t("w-r007-1", "Worker", "active"),
            t("w-r008-1", "Worker", "active"),
            t("w-r009-1", "Worker", "standby"),
        ]
    );
    // Shrink to 1 active, 0 standby: w-r008-1 becomes standby, then standbys beyond 0 go.
    let shrunk = load(&[&sip_doc("s1", (1, 0, "rack"), (1, 0, "host"), "{}")]);
    world.sip_clusters = shrunk.sip_clusters;
    let r = select_hosts(&mut world, NOW).remove(0);
    assert!(r.ready);
    assert_eq!(
        held(&world, "s1"),
        [
            t("cp-r006-1", "ControlPlane", "active"),
            t("w-r007-1", "Worker", "active")
        ]
    );
    assert_eq!(
        r.selection
            .released
            .iter()
            .map(|(k, _)| k.name.as_str())
            .collect::<Vec<_>>(),
        ["w-r008-1", "w-r009-1"]
    );
}

#[test]
fn a_second_sip_cluster_gets_other_hosts_and_deletion_removes_only_our_labels() {
    let mut world = load(&[
        &inventory(),
        &sip_doc("a", (1, 0, "rack"), (1, 0, "host"), "{}"),
        &sip_doc("b", (2, 0, "host"), (2, 0, "host"), "{}"),
    ]);
    let original = world.bare_metal_hosts.clone();
    let reports = select_hosts(&mut world, NOW);
    assert!(reports[0].ready);
    assert_eq!(
        held(&world, "a"),
        [
            t("cp-r006-1", "ControlPlane", "active"),
            t("w-r007-1", "Worker", "active")
        ]
    );
    assert_eq!(
        held(&world, "b"),
        [
            t("cp-r006-2", "ControlPlane", "active"),
            t("cp-r007-1", "ControlPlane", "active"),
            t("w-r008-1", "Worker", "active"),
            t("w-r009-1", "Worker", "active"),
        ]
    );
    // A third cannot have any: each candidate is named as held.
    let third = load(&[&sip_doc("c", (1, 0, "host"), (0, 0, "host"), "{}")]);
    world.sip_clusters.extend(third.sip_clusters);
    let r = select_hosts(&mut world, NOW).remove(2);
    assert!(
        r.message
            .contains("cp-r006-1: held by SIPCluster tenants/a"),
        "{}",
        r.message
    );
    world.sip_clusters.remove(&key("c"));

    // Deleting a: its hosts get back exactly the labels they had.
    world
        .sip_clusters
        .get_mut(&key("a"))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    let reports = select_hosts(&mut world, NOW);
    assert!(reports[0].deleted);
    // It stays until its services are gone (services::record_services drops it).
    assert!(world.sip_clusters.contains_key(&key("a")));
    for h in ["cp-r006-1", "w-r007-1"] {
        assert_eq!(world.bare_metal_hosts[&key(h)], original[&key(h)], "{h}");
    }
    assert_eq!(held(&world, "b").len(), 4);
    // b's hosts are untouched by a's deletion; orphans are found, not released.
    world.sip_clusters.remove(&key("b"));
    let orphans = orphaned_hosts(&world);
    assert_eq!(orphans.len(), 4);
    assert!(orphans.iter().all(|(_, sip)| sip == "tenants/b"));
}

#[test]
fn upstream_samples_select_one_control_plane_per_rack_and_one_worker_per_host() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/sip/samples");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let namespaced =
        |t: String| t.replace("metadata:\n", "metadata:\n  namespace: sipcluster-system\n");
    let keys = "apiVersion: v1\nkind: Secret\nmetadata: {name: ssh-private-keys, namespace: sipcluster-system}\ndata: {key: RFVNTVlfREFUQQ==}\n";
    let mut world = load(&[
        &read("sipcluster.yaml"),
        &namespaced(read("bmh.yaml")),
        &namespaced(read("bmh_secrets.yaml")),
        keys,
    ]);
    let r = select_hosts(&mut world, NOW).remove(0);
    let sip = ObjectKey::new("sipcluster-system", "sipcluster-system");
    assert!(r.selection.shortfalls.is_empty(), "{}", r.message);
    let by_role = |role: &str| -> Vec<String> {
        world
            .bare_metal_hosts
            .values()
            .filter(|h| {
                held_by(&h.metadata.labels, &sip) && h.metadata.labels[NODE_TYPE_LABEL] == role
            })
            .map(|h| h.metadata.labels["vino.airshipit.org/rack"].clone())
            .collect()
    };
    let racks: BTreeSet<String> = by_role("ControlPlane").into_iter().collect();
    assert_eq!(racks.len(), 2, "one control plane host per rack");
    assert_eq!(by_role("Worker").len(), 2);
    // Every selected host's oam-ipv4 address came from its network data.
    for (k, d) in &r.hosts {
        assert!(
            d.addresses["oam-ipv4"].to_string().starts_with("32.68.51."),
            "{k}"
        );
        assert_eq!(d.bmc.path, "/redfish/v1/Systems/System.Embedded.1");
    }
}

// Properties: any sequence of grow, shrink, failure, recovery and removal.

#[derive(Debug, Clone)]
enum Op {
    Counts { cp: (i64, i64), worker: (i64, i64) },
    Fail(usize),
    Recover(usize),
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        ((0i64..4, 0i64..3), (0i64..5, 0i64..3)).prop_map(|(cp, worker)| Op::Counts { cp, worker }),
        (0usize..14).prop_map(Op::Fail),
        (0usize..14).prop_map(Op::Recover),
        (0usize..14).prop_map(Op::Remove),
    ]
}

/// 14 hosts over 5 racks, flavors alternating.
fn prop_inventory() -> String {
    let names: Vec<String> = (0..14).map(|i| format!("h{i:02}")).collect();
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let rack = format!("r{}", i % 5);
            let ip = format!("10.1.0.{}", i + 1);
            host_docs(&Host {
                name: n,
                flavor: if i % 2 == 0 {
                    "control-plane"
                } else {
                    "worker"
                },
                rack: &rack,
                ip: &ip,
                yaml: i % 3 == 0,
            })
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn check_invariants(world: &World, reports: &[SipReport]) {
    let topology = [("ControlPlane", "rack"), ("Worker", "host")];
    for sip in ["a", "b"] {
        let Some(spec) = world.sip_clusters.get(&key(sip)) else {
            continue;
        };
        for (role, tk) in topology {
            let hosts: Vec<_> = world
                .bare_metal_hosts
                .values()
                .filter(|h| {
                    held_by(&h.metadata.labels, &key(sip))
                        && h.metadata.labels[NODE_TYPE_LABEL] == role
                })
                .collect();
            let domains: BTreeSet<&String> = hosts.iter().map(|h| &h.metadata.labels[tk]).collect();
            assert_eq!(
                domains.len(),
                hosts.len(),
                "{sip}/{role}: two hosts in one {tk}"
            );
            for h in &hosts {
                assert!(
                    h.failure().is_none(),
                    "{sip}: failed host {} held",
                    h.metadata.name
                );
            }
            let set = &spec.spec.nodes[role];
            let active = hosts
                .iter()
                .filter(|h| h.metadata.labels[NODE_STATE_LABEL] == "active")
                .count();
            let standby = hosts.len() - active;
            assert!(active as i64 <= set.count.active && standby as i64 <= set.count.standby);
            let report = reports.iter().find(|r| r.key == key(sip)).unwrap();
            if report.selection.shortfalls.is_empty() {
                assert_eq!(
                    (active as i64, standby as i64),
                    (set.count.active, set.count.standby),
                    "{sip}/{role}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn selection_keeps_anti_affinity_and_is_idempotent_and_deterministic(
        ops in proptest::collection::vec(op(), 1..10)
    ) {
        let mut world = load(&[
            &prop_inventory(),
            &sip_doc("a", (1, 1, "rack"), (1, 1, "host"), "{}"),
            &sip_doc("b", (1, 0, "rack"), (2, 0, "host"), "{}"),
        ]);
        let mut removed: BTreeMap<ObjectKey, oi_api::BareMetalHost> = BTreeMap::new();
        for op in ops {
            let name = |i: usize| key(&format!("h{i:02}"));
            match op {
                Op::Counts { cp, worker } => {
                    let s = load(&[&sip_doc("a", (cp.0, cp.1, "rack"), (worker.0, worker.1, "host"), "{}")]);
                    let new = s.sip_clusters[&key("a")].spec.clone();
                    world.sip_clusters.get_mut(&key("a")).unwrap().spec = new;
                }
                Op::Fail(i) => {
                    if let Some(h) = world.bare_metal_hosts.get_mut(&name(i)) {
                        h.status.operational_status = "error".into();
                    }
                }
                Op::Recover(i) => {
                    if let Some(h) = removed.remove(&name(i)) {
                        world.bare_metal_hosts.insert(name(i), h);
                    }
                    if let Some(h) = world.bare_metal_hosts.get_mut(&name(i)) {
                        h.status.operational_status = "OK".into();
                    }
                }
                Op::Remove(i) => {
                    if let Some(h) = world.bare_metal_hosts.remove(&name(i)) {
                        removed.insert(name(i), h);
                    }
                }
            }
            let mut copy = world.clone();
            let reports = select_hosts(&mut world, NOW);
            // Deterministic: the same input gives the same output.
            let reports_copy = select_hosts(&mut copy, NOW);
            prop_assert_eq!(&world, &copy);
            prop_assert_eq!(&reports, &reports_copy);
            check_invariants(&world, &reports);
            // Idempotent: a second run changes no label.
            let before = world.bare_metal_hosts.clone();
            let again = select_hosts(&mut world, NOW);
            prop_assert_eq!(&world.bare_metal_hosts, &before);
            prop_assert!(again.iter().all(|r| r.relabelled.is_empty()));
        }
    }
}

#[test]
fn hosts_one_sip_cluster_lets_go_reach_an_earlier_one_in_the_same_run() {
    // b holds h05 and h07 (its two workers), a (processed first) wants five workers of the
    // seven, held nothing of b's. h05 leaves and comes back still labelled for b, which then
    // holds three and lets h09 go: a, short of one before, gets its five in the same run.
    let mut world = load(&[
        &prop_inventory(),
        &sip_doc("a", (0, 0, "rack"), (3, 2, "host"), "{}"),
        &sip_doc("b", (1, 0, "rack"), (2, 0, "host"), "{}"),
    ]);
    for (h, sip) in [
        ("h05", "b"),
        ("h07", "b"),
        ("h09", "b"),
        ("h01", "a"),
        ("h03", "a"),
    ] {
        let labels = &mut world
            .bare_metal_hosts
            .get_mut(&key(h))
            .unwrap()
            .metadata
            .labels;
        labels.insert(CLUSTER_NAME_LABEL.into(), sip.into());
        labels.insert(CLUSTER_NAMESPACE_LABEL.into(), NS.into());
        labels.insert(NODE_TYPE_LABEL.into(), "Worker".into());
        labels.insert(NODE_STATE_LABEL.into(), "active".into());
    }
    let reports = select_hosts(&mut world, NOW);
    let a = reports.iter().find(|r| r.key == key("a")).unwrap();
    assert!(a.selection.shortfalls.is_empty(), "{}", a.summary());
    assert_eq!(held(&world, "a").len(), 5);
    let b = reports.iter().find(|r| r.key == key("b")).unwrap();
    assert_eq!(b.selection.released.len(), 1, "{}", b.summary());
    // A second run changes nothing.
    let before = world.bare_metal_hosts.clone();
    let again = select_hosts(&mut world, NOW);
    assert_eq!(world.bare_metal_hosts, before);
    assert!(again.iter().all(|r| r.relabelled.is_empty()));
}
