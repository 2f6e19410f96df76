//! `oi-host` against a real Redfish emulator: sushy-tools' `sushy-emulator` (from the Python
//! package registry, installed by scripts/setup.sh into .tools/venv), fake driver, two
//! systems, HTTP basic authentication. Power changes land 1–11 s after they are asked, as
//! the fake driver has them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oi_api::{InventoryBmc, InventoryHost, JumpHostInventory};
use oi_redfish::Bmc;

const NODE1: &str = "11111111-1111-1111-1111-111111111111";
const NODE2: &str = "22222222-2222-2222-2222-222222222222";
const PASSWORD: &str = "bmc-pw-4711";

fn emulator_path() -> PathBuf {
    oi_testsupport::workspace_root().join(".tools/venv/bin/sushy-emulator")
}

/// The emulator, killed when dropped (a failing test leaves no server behind).
struct Emulator {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Emulator {
    fn start() -> Emulator {
        let dir = tempfile::tempdir().unwrap();
        let python = oi_testsupport::workspace_root().join(".tools/venv/bin/python");
        // bcrypt is the only digest the emulator takes; 4 rounds keep each request cheap.
        let hash = Command::new(&python)
            .args([
                "-c",
                &format!(
                    "import bcrypt; print(bcrypt.hashpw(b'{PASSWORD}', bcrypt.gensalt(4)).decode())"
                ),
            ])
            .output()
            .unwrap();
        assert!(hash.status.success(), "{hash:?}");
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(
            &htpasswd,
            format!("admin:{}", String::from_utf8(hash.stdout).unwrap()),
        )
        .unwrap();
        let port = oi_testsupport::free_loopback_port();
        let config = dir.path().join("emulator.py");
        let system = |uuid: &str, name: &str, n: u8| {
            format!(
                "{{'uuid': '{uuid}', 'name': '{name}', 'power_state': 'On', \
                 'nics': [{{'mac': '00:5c:52:31:3a:0{n}', 'ip': '10.9.0.{n}'}}]}}"
            )
        };
        std::fs::write(
            &config,
            format!(
                "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n\
                 SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
                 SUSHY_EMULATOR_FAKE_DRIVER = True\n\
                 SUSHY_EMULATOR_STATE_DIR = '{state}'\n\
                 SUSHY_EMULATOR_AUTH_FILE = '{auth}'\n\
                 SUSHY_EMULATOR_FAKE_SYSTEMS = [{one}, {two}]\n",
                state = dir.path().join("state").display(),
                auth = htpasswd.display(),
                one = system(NODE1, "node-1", 1),
                two = system(NODE2, "node-2", 2),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let child = Command::new(emulator_path())
            .arg("--config")
            .arg(&config)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let emulator = Emulator {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sushy-emulator did not answer on port {port} within 60 s: {}",
                std::fs::read_to_string(emulator._dir.path().join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        emulator
    }

    /// The Reset actions the emulator answered, as its request log has them:
    /// `(system id, status)`.
    fn resets(&self) -> Vec<(String, String)> {
        let raw = std::fs::read_to_string(self._dir.path().join("log")).unwrap_or_default();
        // Without the terminal colours werkzeug puts around requests.
        let mut log = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                log.push(c);
            }
        }
        log.lines()
            .filter_map(|l| {
                let request = l.split('"').nth(1)?;
                let status = l.split('"').nth(2)?.split_whitespace().next()?;
                let path = request.strip_prefix("POST /redfish/v1/Systems/")?;
                let system = path.strip_suffix("/Actions/ComputerSystem.Reset HTTP/1.1")?;
                Some((system.to_string(), status.to_string()))
            })
            .collect()
    }

    fn host(&self, name: &str, uuid: &str, password: &str) -> InventoryHost {
        InventoryHost {
            name: name.into(),
            ip: Some(format!("10.9.0.{}", &name[5..])),
            bmc: InventoryBmc {
                address: format!(
                    "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{uuid}",
                    self.port
                ),
                disable_certificate_verification: false,
                username: "admin".into(),
                password: password.into(),
            },
        }
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
    let test = "reboot_power_cycles_that_system_on_a_real_redfish_emulator_and_no_other";
    if !oi_testsupport::require(
        test,
        &format!(
            "a Redfish emulator: {} (scripts/setup.sh installs sushy-tools there)",
            emulator_path().display()
        ),
        emulator_path().is_file(),
    ) {
        return;
    }
    let emulator = Emulator::start();
    let dir = tempfile::tempdir().unwrap();
    let inventory = JumpHostInventory {
        hosts: vec![
            emulator.host("node-1", NODE1, PASSWORD),
            emulator.host("node-2", NODE2, PASSWORD),
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
    // (The request log is written after the answer: polled, for at most 10 s.)
    let deadline = Instant::now() + Duration::from_secs(10);
    while emulator.resets().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(emulator.resets(), [(NODE1.to_string(), "204".to_string())]);
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
        hosts: vec![emulator.host("node-2", NODE2, "not-the-password")],
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
