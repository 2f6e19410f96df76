//! `oi-host` against a real Redfish emulator: sushy-tools' `sushy-emulator` (from the Python
//! package registry, installed by scripts/setup.sh into .tools/venv), fake driver, two
//! systems, HTTP basic authentication. Power changes land 1–11 s after they are asked, as
//! the fake driver has them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oi_api::{InventoryBmc, InventoryHost, JumpHostInventory};
use oi_host::Bmc;
use oi_testsupport::redfish::RedfishEmulator;

const NODE1: &str = "11111111-1111-1111-1111-111111111111";
const NODE2: &str = "22222222-2222-2222-2222-222222222222";
const PASSWORD: &str = "bmc-pw-4711";

fn host(emulator: &RedfishEmulator, name: &str, uuid: &str, password: &str) -> InventoryHost {
    InventoryHost {
        name: name.into(),
        ip: Some(format!("10.9.0.{}", &name[5..])),
        bmc: InventoryBmc {
            address: emulator.address(uuid),
            disable_certificate_verification: false,
            username: "admin".into(),
            password: password.into(),
        },
    }
}

/// Writes `inventory` as the jump host has it: 0600 from its creation.
fn write_inventory(dir: &Path, inventory: &JumpHostInventory) -> PathBuf {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join("hosts.json");
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    f.write_all(serde_json::to_string(inventory).unwrap().as_bytes())
        .unwrap();
    path
}

fn oi_host(inventory: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oi-host"))
        .arg("--inventory")
        .arg(inventory)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_power_cycles_that_system_on_a_real_redfish_emulator_and_no_other() {
    let Some(emulator) = RedfishEmulator::start(
        "reboot_power_cycles_that_system_on_a_real_redfish_emulator_and_no_other",
        &[(NODE1, "node-1"), (NODE2, "node-2")],
        PASSWORD,
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let inventory = JumpHostInventory {
        hosts: vec![
            host(&emulator, "node-1", NODE1, PASSWORD),
            host(&emulator, "node-2", NODE2, PASSWORD),
        ],
    };
    let path = write_inventory(dir.path(), &inventory);

    let list = oi_host(&path, &["list"]);
    assert!(list.status.success(), "{list:?}");
    let stdout = String::from_utf8_lossy(&list.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(
        (rows[0][0], rows[0][1], rows[0][3]),
        ("node-1", "10.9.0.1", "On")
    );
    assert_eq!(
        (rows[1][0], rows[1][1], rows[1][3]),
        ("node-2", "10.9.0.2", "On")
    );

    // Both systems' power states, as the emulator reports them, while node-1 reboots.
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
        let bmcs: Vec<(String, Bmc)> = inventory
            .hosts
            .iter()
            .map(|h| (h.name.clone(), Bmc::of(h, None).unwrap()))
            .collect();
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for (name, bmc) in &bmcs {
                    let state = bmc.status().await.unwrap().power_state;
                    seen.lock().unwrap().push((name.clone(), state));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let path2 = path.clone();
    let reboot = tokio::task::spawn_blocking(move || oi_host(&path2, &["reboot", "node-1"]))
        .await
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.await.unwrap();
    let stdout = String::from_utf8_lossy(&reboot.stdout);
    assert!(reboot.status.success(), "{reboot:?}");
    assert!(
        stdout.contains("node-1: ForceRestart accepted (was On); On after"),
        "{stdout}"
    );
    let seen = seen.lock().unwrap().clone();
    let states = |name: &str| -> Vec<String> {
        seen.iter()
            .filter(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .collect()
    };
    // One reset, of node-1's system, accepted (the fake driver turns it off at once and on
    // 1-11 s later: too short a window to be sure a poll sees it off).
    assert_eq!(
        emulator.wait_resets(1),
        [(NODE1.to_string(), "204".to_string())]
    );
    let node2 = states("node-2");
    assert!(
        !node2.is_empty() && node2.iter().all(|s| s == "On"),
        "node-2: {node2:?}"
    );
    let after = Bmc::of(&inventory.hosts[0], None)
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!(after.power_state, "On");

    // A host not in the inventory, and a wrong password: clear errors, nothing done.
    let unknown = oi_host(&path, &["reboot", "node-9"]);
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains(r#"no host "node-9""#) && stderr.contains("hosts: node-1, node-2"),
        "{stderr}"
    );
    let wrong = JumpHostInventory {
        hosts: vec![host(&emulator, "node-2", NODE2, "not-the-password")],
    };
    let path = write_inventory(dir.path(), &wrong);
    let refused = oi_host(&path, &["reboot", "node-2"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("host node-2: GET http://127.0.0.1:") && stderr.contains("answered 401"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"), "{stderr}");
    let states = Bmc::of(&inventory.hosts[1], None)
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!(states.power_state, "On");

    // An inventory others can read is refused before any BMC is asked.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = oi_host(&path, &["list"]);
    assert_eq!(open.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&open.stderr).contains("lets others read BMC passwords"),
        "{open:?}"
    );
}
