//! Airship SIP from the inventory to a power cycle: two BareMetalHosts whose BMCs are systems
//! of a real Redfish emulator (sushy-tools), a SIPCluster holding them; `oi reconcile` labels
//! them, `oi sipcluster inventory` writes the jump host's inventory, and `oi-host reboot`
//! power-cycles the chosen control plane host's system and no other.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use oi_e2e::{binary, oi};
use oi_testsupport::redfish::RedfishEmulator;

const NS: &str = "tenants";
const PASSWORD: &str = "bmc-pw-0815";
const CP: &str = "aaaaaaaa-0000-0000-0000-000000000001";
const WORKER: &str = "aaaaaaaa-0000-0000-0000-000000000002";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A BareMetalHost with its BMC credentials and network data Secrets.
fn host(name: &str, flavor: &str, ip: &str, bmc: &str) -> String {
    let network_data = format!(
        r#"{{"links": [{{"id": "eno1", "type": "phy"}}], "networks": [{{"id": "oam-ipv4", "type": "ipv4", "link": "eno1", "ip_address": "{ip}", "netmask": "255.255.255.0"}}]}}"#
    );
    format!(
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: {name}\n  namespace: {NS}\n  labels: {{flavor: {flavor}, rack: r-{name}}}\nspec:\n  online: true\n  bmc: {{address: '{bmc}', credentialsName: {name}-bmc}}\n  networkData: {{name: {name}-nd, namespace: {NS}}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-bmc, namespace: {NS}}}\ntype: Opaque\ndata: {{username: {user}, password: {password}}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-nd, namespace: {NS}}}\ntype: Opaque\ndata: {{networkData: {nd}}}\n",
        user = b64("admin"),
        password = b64(PASSWORD),
        nd = b64(&network_data),
    )
}

fn sip_cluster() -> String {
    format!(
        "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: t1, namespace: {NS}}}\nspec:\n  nodes:\n    ControlPlane:\n      labelSelector: {{matchLabels: {{flavor: control-plane}}}}\n      topologyKey: rack\n      count: {{active: 1, standby: 0}}\n    Worker:\n      labelSelector: {{matchLabels: {{flavor: worker}}}}\n      topologyKey: rack\n      count: {{active: 1, standby: 0}}\n  services:\n    jumpHost: [{{image: jump, nodePort: 30000, nodeInterfaceId: oam-ipv4, nodeSSHPrivateKeys: keys}}]\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: keys, namespace: {NS}}}\ndata: {{key: {key}}}\n",
        key = b64("not a real key"),
    )
}

#[test]
fn a_sip_clusters_host_is_power_cycled_from_its_inventory() {
    let Some(emulator) = RedfishEmulator::start(
        "a_sip_clusters_host_is_power_cycled_from_its_inventory",
        &[(CP, "cp-1"), (WORKER, "w-1")],
        PASSWORD,
    ) else {
        return;
    };
    let manifests = [
        sip_cluster(),
        host("cp-1", "control-plane", "10.9.0.1", &emulator.address(CP)),
        host("w-1", "worker", "10.9.0.2", &emulator.address(WORKER)),
    ]
    .join("---\n");
    let reconciled = oi(
        &["reconcile", "--image-repository", "localhost/oneinfra"],
        &manifests,
    )
    .unwrap()
    .ok("oi reconcile")
    .unwrap();
    assert!(
        reconciled
            .stderr
            .contains("sipcluster tenants/t1: hosts ControlPlane: active cp-1"),
        "{}",
        reconciled.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("hosts.json");
    let inventory_text = inventory.display().to_string();
    let written = oi(
        &[
            "sipcluster",
            "inventory",
            "--name",
            "t1",
            "--namespace",
            NS,
            "-o",
            &inventory_text,
        ],
        &reconciled.stdout,
    )
    .unwrap()
    .ok("oi sipcluster inventory")
    .unwrap();
    assert!(written.stderr.contains("2 host(s)"), "{}", written.stderr);

    let host_tool = binary("oi-host").unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&host_tool)
            .arg("--inventory")
            .arg(&inventory)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "oi-host {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let list = run(&["list"]);
    let rows: Vec<Vec<&str>> = list
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.iter().map(|r| (r[0], r[1], r[3])).collect::<Vec<_>>(),
        [("cp-1", "10.9.0.1", "On"), ("w-1", "10.9.0.2", "On")],
        "{list}"
    );
    let rebooted = run(&["reboot", "cp-1"]);
    assert!(
        rebooted.contains("cp-1: ForceRestart accepted (was On); On after"),
        "{rebooted}"
    );
    assert_eq!(
        emulator.wait_resets(1),
        [(CP.to_string(), "204".to_string())]
    );
}
