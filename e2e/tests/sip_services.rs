//! Airship SIP's support services on a local public hypervisor, against real parts: two
//! "bare-metal" hosts (network namespaces on the set's bridge running OpenSSH's sshd, one an
//! API server stand-in serving TLS `/readyz` with `openssl s_server`, the other a node port
//! with busybox httpd), their BMCs systems of a real Redfish emulator (sushy-tools, fake
//! driver, basic auth) listening on the set's bridge. `oi reconcile` labels the hosts and runs
//! the jump host, the control plane load balancer and the worker load balancer; then:
//! `ssh` with an authorized key logs into the jump host, an unlisted key and root are refused;
//! from the jump host `ssh cp-1` reaches that host with the node key; `host list` and
//! `host reboot cp-1` power-cycle that system and no other; the load balancers forward; a
//! second run changes nothing; deleting the SIPCluster removes its pods, ports and labels.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use oi_e2e::{LocalSet, World, oi, prerequisites};
use oi_local_hypervisor_set::state::SetState;
use oi_testsupport::redfish::RedfishEmulator;

const TEST: &str = "sip_services_run_on_a_public_hypervisor";
const NS: &str = "tenants";
const PASSWORD: &str = "bmc-pw-0815";
const CP: &str = "aaaaaaaa-0000-0000-0000-000000000001";
const WORKER: &str = "aaaaaaaa-0000-0000-0000-000000000002";
const JUMP_PORT: u16 = 30000;
const CP_LB_PORT: u16 = 30001;
const WORKER_PORTS: (u16, u16) = (30002, 30011);
/// The node port the worker host serves (inside the worker load balancer's range).
const NODE_PORT: u16 = 30005;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn run(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A "bare-metal host": a network namespace with a veth on the set's bridge, and the
/// processes the test runs in it. Dropping it kills them and deletes the namespace.
struct NodeHost {
    netns: String,
    host_veth: String,
    ip: Ipv4Addr,
    children: Vec<Child>,
}

impl Drop for NodeHost {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = run("ip", &["link", "del", &self.host_veth]);
        let _ = run("ip", &["netns", "del", &self.netns]);
    }
}

impl NodeHost {
    fn new(state: &SetState, n: u8) -> NodeHost {
        let tag = format!("{}n{n}", std::process::id());
        let octets = state.subnet.network().octets();
        let host = NodeHost {
            netns: format!("oi-sip-{tag}"),
            host_veth: format!("ohn{tag}"),
            ip: Ipv4Addr::new(octets[0], octets[1], octets[2], 100 + n),
            children: Vec::new(),
        };
        let inside = format!("ohi{tag}");
        ok("ip", &["netns", "add", &host.netns]);
        ok(
            "ip",
            &[
                "link",
                "add",
                &host.host_veth,
                "type",
                "veth",
                "peer",
                "name",
                &inside,
            ],
        );
        ok("ip", &["link", "set", &inside, "netns", &host.netns]);
        ok(
            "ip",
            &[
                "link",
                "set",
                &host.host_veth,
                "master",
                &state.bridge,
                "up",
            ],
        );
        let cidr = format!("{}/{}", host.ip, state.subnet.prefix_len());
        ok(
            "ip",
            &["-n", &host.netns, "addr", "add", &cidr, "dev", &inside],
        );
        ok("ip", &["-n", &host.netns, "link", "set", &inside, "up"]);
        ok("ip", &["-n", &host.netns, "link", "set", "lo", "up"]);
        host
    }

    /// Starts `args` in the namespace; it is killed when the host is dropped.
    fn spawn(&mut self, args: &[&str], log: &Path) {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    /// sshd on port 22 for the user `ubuntu` (a passwd entry bind-mounted in a mount
    /// namespace of its own: the machine's users are not touched), accepting `authorized`.
    fn start_sshd(&mut self, dir: &Path, authorized: &str) {
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        ok("chown", &["1000:1000", home.to_str().unwrap()]);
        let mut passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        passwd.push_str(&format!("ubuntu:x:1000:1000::{}:/bin/sh\n", home.display()));
        std::fs::write(dir.join("passwd"), passwd).unwrap();
        std::fs::write(dir.join("authorized_keys"), authorized).unwrap();
        let key = dir.join("host_key");
        ok(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", key.to_str().unwrap()],
        );
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port 22\nListenAddress {}\nHostKey {}\nPidFile none\nAuthorizedKeysFile {}\n\
                 StrictModes no\nUsePAM no\nPasswordAuthentication no\nPermitRootLogin no\n",
                self.ip,
                key.display(),
                dir.join("authorized_keys").display()
            ),
        )
        .unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let script = format!(
            "mount --bind {} /etc/passwd && exec /usr/sbin/sshd -D -e -f {}",
            dir.join("passwd").display(),
            config.display()
        );
        self.spawn(
            &[
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                &script,
            ],
            &dir.join("sshd.log"),
        );
        wait_port(self.ip, 22, &dir.join("sshd.log"));
    }
}

/// Polls until `ip:port` accepts a connection (at most 30 s).
fn wait_port(ip: Ipv4Addr, port: u16, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect_timeout(&(ip, port).into(), Duration::from_secs(1)).is_err()
    {
        assert!(
            Instant::now() < deadline,
            "{ip}:{port} not listening within 30 s: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `check` until it gives a value (at most 30 s).
fn poll<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match check() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what} within 30 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// The real parts and OpenSSH's client tools, or the test says why it cannot run.
fn ssh_prerequisites(test: &str) -> bool {
    prerequisites(test)
        && oi_testsupport::require(
            test,
            "OpenSSH's ssh and ssh-keygen (scripts/setup.sh installs them)",
            ["/usr/bin/ssh", "/usr/bin/ssh-keygen"]
                .iter()
                .all(|p| Path::new(p).is_file()),
        )
}

fn keygen(path: &Path) -> String {
    ok(
        "ssh-keygen",
        &[
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "e2e",
            "-f",
            path.to_str().unwrap(),
        ],
    );
    std::fs::read_to_string(path.with_extension("pub")).unwrap()
}

/// `ssh` from this machine to `user@ip -p port` with `key`, running `command`.
fn ssh(key: &Path, user: &str, ip: Ipv4Addr, port: u16, command: &str) -> std::process::Output {
    let port = port.to_string();
    let target = format!("{user}@{ip}");
    run(
        "ssh",
        &[
            "-F",
            "/dev/null",
            "-i",
            key.to_str().unwrap(),
            "-p",
            &port,
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            &target,
            command,
        ],
    )
}

/// A BareMetalHost with its BMC credentials and network data Secrets.
fn host(name: &str, flavor: &str, ip: Ipv4Addr, bmc: &str) -> String {
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

fn sip_cluster(authorized: &str, node_key: &str) -> String {
    format!(
        "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: t1, namespace: {NS}}}\nspec:\n  nodes:\n    ControlPlane:\n      labelSelector: {{matchLabels: {{flavor: control-plane}}}}\n      topologyKey: rack\n      count: {{active: 1, standby: 0}}\n    Worker:\n      labelSelector: {{matchLabels: {{flavor: worker}}}}\n      topologyKey: rack\n      count: {{active: 1, standby: 0}}\n  services:\n    jumpHost:\n    - image: quay.io/airshipit/jump-host:latest\n      nodePort: {JUMP_PORT}\n      nodeInterfaceId: oam-ipv4\n      nodeSSHPrivateKeys: node-keys\n      sshAuthorizedKeys: ['{authorized}']\n    loadBalancerControlPlane:\n    - {{image: 'haproxy:2.3.2', nodePort: {CP_LB_PORT}, nodeInterfaceId: oam-ipv4}}\n    loadBalancerWorker:\n    - image: haproxy:2.3.2\n      nodeInterfaceId: oam-ipv4\n      nodePortRange: {{start: {}, end: {}}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: node-keys, namespace: {NS}}}\ndata: {{id_ed25519: {key}}}\n",
        WORKER_PORTS.0,
        WORKER_PORTS.1,
        authorized = authorized.trim(),
        key = b64(node_key),
    )
}

fn reconcile(world: &str) -> oi_e2e::Run {
    oi(
        &[
            "reconcile",
            "--image-repository",
            "localhost/oneinfra",
            "--max-wait",
            "60s",
        ],
        world,
    )
    .unwrap()
}

/// What `oi reconcile --dry-run` prints for `world` (it must succeed).
fn dry_run(world: &str) -> String {
    oi(
        &[
            "reconcile",
            "--dry-run",
            "--image-repository",
            "localhost/oneinfra",
        ],
        world,
    )
    .unwrap()
    .ok("oi reconcile --dry-run")
    .unwrap()
    .stdout
}

/// An HTTP GET of `path` on `ip:port`, its whole answer.
fn http_get(ip: Ipv4Addr, port: u16, path: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&(ip, port).into(), Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer)
}

#[test]
fn sip_services_run_on_a_public_hypervisor() {
    if !prerequisites(TEST)
        || !oi_testsupport::require(
            TEST,
            "OpenSSH's sshd, ssh and ssh-keygen, openssl and curl (scripts/setup.sh installs them)",
            [
                "/usr/sbin/sshd",
                "/usr/bin/ssh",
                "/usr/bin/ssh-keygen",
                "/usr/bin/openssl",
                "/usr/bin/curl",
            ]
            .iter()
            .all(|p| Path::new(p).is_file()),
        )
    {
        return;
    }
    let set = LocalSet::create("sip", 0, 2, false).unwrap();
    let mut state = set.state().unwrap();
    // Both public and empty: the services go to the first by name.
    state.hypervisors.sort_by(|a, b| a.name.cmp(&b.name));
    let public_ip = state.hypervisors[0].ip;
    let Some(emulator) = RedfishEmulator::start_on(
        TEST,
        &state.gateway.to_string(),
        &[(CP, "cp-1"), (WORKER, "w-1")],
        PASSWORD,
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The node hosts' user reads files here.
    ok("chmod", &["0755", dir.path().to_str().unwrap()]);
    let d = |p: &str| -> PathBuf { dir.path().join(p) };
    let user_pub = keygen(&d("user"));
    keygen(&d("stranger"));
    let node_pub = keygen(&d("node"));
    let node_key = std::fs::read_to_string(d("node")).unwrap();

    let mut cp = NodeHost::new(&state, 1);
    let mut worker = NodeHost::new(&state, 2);
    for (h, name) in [(&mut cp, "cp-1"), (&mut worker, "w-1")] {
        let hd = d(name);
        std::fs::create_dir_all(&hd).unwrap();
        std::fs::write(hd.join("marker"), format!("this is {name}\n")).unwrap();
        ok("chmod", &["0755", hd.to_str().unwrap()]);
        h.start_sshd(&hd, &node_pub);
    }
    // cp-1: an API server's /readyz over TLS on 6443; w-1: a node port.
    let www = d("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("readyz"), "ok").unwrap();
    ok(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=cp-1",
            "-keyout",
            d("tls.key").to_str().unwrap(),
            "-out",
            d("tls.crt").to_str().unwrap(),
        ],
    );
    let serve = format!(
        "cd {} && exec openssl s_server -quiet -accept {}:6443 -cert {} -key {} -WWW",
        www.display(),
        cp.ip,
        d("tls.crt").display(),
        d("tls.key").display()
    );
    cp.spawn(&["sh", "-c", &serve], &d("s_server.log"));
    wait_port(cp.ip, 6443, &d("s_server.log"));
    let node_port = format!("{}:{NODE_PORT}", worker.ip);
    let worker_www = d("w-1");
    worker.spawn(
        &[
            "busybox",
            "httpd",
            "-f",
            "-p",
            &node_port,
            "-h",
            worker_www.to_str().unwrap(),
        ],
        &d("httpd.log"),
    );
    wait_port(worker.ip, NODE_PORT, &d("httpd.log"));

    let manifests = [
        set.manifests.clone(),
        sip_cluster(&user_pub, &node_key),
        host("cp-1", "control-plane", cp.ip, &emulator.address(CP)),
        host("w-1", "worker", worker.ip, &emulator.address(WORKER)),
    ]
    .join("---\n");
    // What a run would do, first: the hosts it chooses, the services' pods and files on the
    // first public hypervisor.
    let planned = dry_run(&manifests);
    assert!(
        planned.starts_with(&format!(
            "sipcluster {NS}/t1: hosts ControlPlane: active cp-1; Worker: active w-1"
        )),
        "{planned}"
    );
    let on_public = planned
        .split(&format!("hypervisor {}:\n", state.hypervisors[0].name))
        .nth(1)
        .unwrap_or_else(|| panic!("{planned}"));
    for service in ["jump-host-0", "lb-control-plane-0", "lb-worker-0"] {
        assert!(
            on_public.contains(&format!("  create pod {NS}/t1-{service}\n")),
            "{planned}"
        );
    }
    assert!(
        on_public.contains("/jump-host-0/sshd_config\n"),
        "{planned}"
    );
    let first = reconcile(&manifests).ok("oi reconcile").unwrap();
    let endpoints = format!(
        "services: control plane load balancer lb-control-plane-0 at {public_ip}:{CP_LB_PORT}, \
         worker load balancer lb-worker-0 at {public_ip}:{}-{}, jump host jump-host-0 at {public_ip}:{JUMP_PORT}",
        WORKER_PORTS.0, WORKER_PORTS.1
    );
    assert!(first.stderr.contains(&endpoints), "{}", first.stderr);
    let world = World::parse(&first.stdout).unwrap();
    let sip = world
        .of_kind("SIPCluster")
        .next()
        .unwrap()
        .get("status")
        .cloned()
        .unwrap();
    let ready = &sip["conditions"][0];
    assert_eq!(ready["type"], "Ready");
    assert_eq!(ready["status"], "True", "{ready:?}");
    assert_eq!(ready["reason"], "ReconciliationSucceeded");

    // The jump host: the authorized key logs in as ubuntu; an unlisted key, and root, are
    // refused. Its container runs once the run ends; sshd may still be starting to listen.
    wait_port(public_ip, JUMP_PORT, &d("no-log"));
    let hello = ssh(
        &d("user"),
        "ubuntu",
        public_ip,
        JUMP_PORT,
        "echo hello from $(id -un)",
    );
    assert!(hello.status.success(), "{hello:?}");
    assert_eq!(
        String::from_utf8_lossy(&hello.stdout),
        "hello from ubuntu\n"
    );
    let stranger = ssh(&d("stranger"), "ubuntu", public_ip, JUMP_PORT, "true");
    assert_eq!(stranger.status.code(), Some(255), "{stranger:?}");
    assert!(
        String::from_utf8_lossy(&stranger.stderr).contains("Permission denied"),
        "{stranger:?}"
    );
    let root = ssh(&d("user"), "root", public_ip, JUMP_PORT, "true");
    assert_eq!(root.status.code(), Some(255), "{root:?}");

    // From the jump host, each held host by name, with the node key.
    for name in ["cp-1", "w-1"] {
        let command = format!("ssh {name} cat {}", d(name).join("marker").display());
        let out = ssh(&d("user"), "ubuntu", public_ip, JUMP_PORT, &command);
        assert!(out.status.success(), "{command}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("this is {name}\n")
        );
    }

    // `host list` and `host reboot cp-1`: that system, and no other, power-cycled.
    let list = ssh(&d("user"), "ubuntu", public_ip, JUMP_PORT, "host list");
    assert!(list.status.success(), "{list:?}");
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    let rows: Vec<Vec<&str>> = list
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let (cp_ip, w_ip) = (cp.ip.to_string(), worker.ip.to_string());
    assert_eq!(
        rows.iter().map(|r| (r[0], r[1], r[3])).collect::<Vec<_>>(),
        [("cp-1", cp_ip.as_str(), "On"), ("w-1", w_ip.as_str(), "On")],
        "{list}"
    );
    let reboot = ssh(
        &d("user"),
        "ubuntu",
        public_ip,
        JUMP_PORT,
        "host reboot cp-1",
    );
    assert!(reboot.status.success(), "{reboot:?}");
    assert!(
        String::from_utf8_lossy(&reboot.stdout).contains("cp-1: ForceRestart accepted (was On)"),
        "{reboot:?}"
    );
    assert_eq!(
        emulator.wait_resets(1),
        [(CP.to_string(), "204".to_string())]
    );

    // The worker load balancer forwards the node port to the worker host.
    let answer = poll("the node port through the worker load balancer", || {
        http_get(public_ip, NODE_PORT, "/marker").and_then(|a| {
            if a.contains("this is w-1") {
                Ok(a)
            } else {
                Err(a)
            }
        })
    });
    assert!(answer.starts_with("HTTP/1."), "{answer}");
    // A port of the range nobody serves: the connection is closed, nothing answers.
    assert!(http_get(public_ip, NODE_PORT + 1, "/").map_or(true, |a| a.is_empty()));
    // The control plane load balancer: TLS passes through to cp-1's /readyz.
    let url = format!("https://{public_ip}:{CP_LB_PORT}/readyz");
    poll("/readyz through the control plane load balancer", || {
        let out = run("curl", &["-sk", "--max-time", "5", &url]);
        let body = String::from_utf8_lossy(&out.stdout).into_owned();
        if body == "ok" {
            Ok(())
        } else {
            Err(format!("{out:?}"))
        }
    });

    // A second run over the output changes nothing.
    let second = reconcile(&first.stdout).ok("second oi reconcile").unwrap();
    for verb in ["created pod", "replaced pod", "wrote"] {
        assert!(!second.stderr.contains(verb), "{}", second.stderr);
    }
    assert_eq!(second.stdout, first.stdout);
    let planned = dry_run(&first.stdout);
    for service in ["jump-host-0", "lb-control-plane-0", "lb-worker-0"] {
        assert!(
            planned.contains(&format!("  keep pod {NS}/t1-{service}\n")),
            "{planned}"
        );
    }
    for verb in ["create pod", "replace pod", "remove", "write file"] {
        assert!(!planned.contains(verb), "{planned}");
    }

    // Draining the public hypervisor the services run on moves them all to the other one,
    // ports, pods and directories.
    let (from, to) = (&state.hypervisors[0], &state.hypervisors[1]);
    let drained = oi(
        &[
            "hypervisor",
            "drain",
            "--name",
            &from.name,
            "--image-repository",
            "localhost/oneinfra",
        ],
        &first.stdout,
    )
    .unwrap()
    .ok("oi hypervisor drain")
    .unwrap();
    assert!(drained.stderr.contains("is drained"), "{}", drained.stderr);
    assert!(
        drained
            .stderr
            .contains(&format!("jump host jump-host-0 at {}:{JUMP_PORT}", to.ip)),
        "{}",
        drained.stderr
    );
    wait_port(to.ip, JUMP_PORT, &d("no-log"));
    let moved = ssh(&d("user"), "ubuntu", to.ip, JUMP_PORT, "host list");
    assert!(moved.status.success(), "{moved:?}");
    assert!(
        String::from_utf8_lossy(&moved.stdout).contains("cp-1"),
        "{moved:?}"
    );
    poll(
        "the node port through the moved worker load balancer",
        || {
            http_get(to.ip, NODE_PORT, "/marker").and_then(|a| {
                if a.contains("this is w-1") {
                    Ok(a)
                } else {
                    Err(a)
                }
            })
        },
    );
    let on_from: Vec<(String, String)> = set
        .containers()
        .unwrap()
        .into_iter()
        .filter(|(h, listing)| *h == from.name && listing.lines().count() > 1)
        .collect();
    assert!(on_from.is_empty(), "{on_from:?}");
    assert!(
        !set.etc_oneinfra(&from.name)
            .join("_sip")
            .join(NS)
            .join("t1")
            .join("jump-host-0")
            .exists()
    );

    // Deleted: its pods, ports and labels go.
    let deleted = oi(
        &["sipcluster", "delete", "--name", "t1", "--namespace", NS],
        &drained.stdout,
    )
    .unwrap()
    .ok("oi sipcluster delete")
    .unwrap();
    let planned = dry_run(&deleted.stdout);
    assert!(
        planned.contains(&format!("  remove pod {NS}/t1-jump-host-0\n"))
            && planned.contains(&format!("  remove directory /etc/oneinfra/_sip/{NS}/t1\n")),
        "{planned}"
    );
    let gone = reconcile(&deleted.stdout)
        .ok("oi reconcile after delete")
        .unwrap();
    assert!(
        gone.stderr.contains("removed pod t1-jump-host-0"),
        "{}",
        gone.stderr
    );
    assert!(!gone.stdout.contains("SIPCluster/t1"), "{}", gone.stdout);
    assert!(
        !gone.stdout.contains("sip.airshipit.org/cluster-name"),
        "{}",
        gone.stdout
    );
    // No cluster here: nothing at all is left in the hypervisor's containerd.
    let left = set.containers().unwrap();
    assert!(
        left.iter().all(|(_, listing)| listing.lines().count() == 1),
        "{left:?}"
    );
    assert!(
        !set.etc_oneinfra(&state.hypervisors[1].name)
            .join("_sip")
            .join(NS)
            .join("t1")
            .exists()
    );
}

/// `oi-manager`'s SIPCluster controller (its in-process loop over a memory store) on a real
/// public hypervisor: the hosts labelled, the services run (the jump host answering ssh with
/// the authorized key only, the worker load balancer listening), `Ready=True`; the SIPCluster
/// deleted: its finalizer holds until its pods, ports and labels are gone.
#[test]
fn the_manager_runs_a_sip_clusters_services_and_tears_them_down() {
    const TEST: &str = "the_manager_runs_a_sip_clusters_services_and_tears_them_down";
    use oi_manager::store::Store as _;
    use oi_manager_testsupport::memory::MemoryStore;
    use std::sync::Arc;
    if !ssh_prerequisites(TEST) {
        return;
    }
    let set = LocalSet::create("sipm", 0, 1, false).unwrap();
    let state = set.state().unwrap();
    let public_ip = state.hypervisors[0].ip;
    let octets = state.subnet.network().octets();
    let ip = |n: u8| Ipv4Addr::new(octets[0], octets[1], octets[2], n);
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| -> PathBuf { dir.path().join(p) };
    let user_pub = keygen(&d("user"));
    keygen(&d("stranger"));
    keygen(&d("node"));
    let node_key = std::fs::read_to_string(d("node")).unwrap();
    // The hosts' BMCs are never called here: an address nothing listens on.
    let bmc = |uuid: &str| {
        format!(
            "redfish+http://{}:9/redfish/v1/Systems/{uuid}",
            state.gateway
        )
    };
    let manifests = [
        set.manifests.clone(),
        sip_cluster(&user_pub, &node_key),
        host("cp-1", "control-plane", ip(101), &bmc(CP)),
        host("w-1", "worker", ip(102), &bmc(WORKER)),
    ]
    .join("---\n");
    let world = oi_api::World::load(&manifests, "test").unwrap();
    let store = Arc::new(MemoryStore::default());
    for h in world.hypervisors.into_values() {
        store.insert(h);
    }
    for h in world.bare_metal_hosts.into_values() {
        store.insert(h);
    }
    for s in world.secrets.into_values() {
        store.insert(s);
    }
    for s in world.sip_clusters.into_values() {
        store.insert(s);
    }
    let key = oi_api::ObjectKey::new(NS, "t1");
    let ctx = oi_e2e::manager_context(&store);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    let ready = |s: &MemoryStore| {
        s.object::<oi_api::SipCluster>(&key).is_some_and(|sip| {
            sip.condition("Ready")
                .is_some_and(|c| c.status == oi_api::common::ConditionStatus::True)
        })
    };
    oi_e2e::run_manager_until(&runtime, &ctx, Duration::from_secs(120), ready);
    let sip: oi_api::SipCluster = store.object(&key).unwrap();
    let message = &sip.condition("Ready").unwrap().message;
    assert!(
        message.contains(&format!("jump host jump-host-0 at {public_ip}:{JUMP_PORT}")),
        "{message}"
    );
    let labelled: Vec<String> = store
        .objects::<oi_api::BareMetalHost>()
        .into_iter()
        .filter(|h| {
            h.metadata
                .labels
                .contains_key(oi_api::sip::CLUSTER_NAME_LABEL)
        })
        .map(|h| h.metadata.name)
        .collect();
    assert_eq!(labelled, ["cp-1", "w-1"]);

    wait_port(public_ip, JUMP_PORT, &d("no-log"));
    let hello = ssh(&d("user"), "ubuntu", public_ip, JUMP_PORT, "id -un");
    assert!(hello.status.success(), "{hello:?}");
    assert_eq!(String::from_utf8_lossy(&hello.stdout), "ubuntu\n");
    let stranger = ssh(&d("stranger"), "ubuntu", public_ip, JUMP_PORT, "true");
    assert_eq!(stranger.status.code(), Some(255), "{stranger:?}");
    wait_port(public_ip, WORKER_PORTS.0, &d("no-log"));
    let sip_ports = |s: &MemoryStore| -> usize {
        s.objects::<oi_api::Hypervisor>()
            .iter()
            .flat_map(|h| h.status.allocated_ports.iter())
            .filter(|a| a.cluster == "SIPCluster/t1")
            .count()
    };
    // The jump host, the control plane load balancer, ten worker ports.
    assert_eq!(sip_ports(&store), 12);

    runtime
        .block_on(store.delete::<oi_api::SipCluster>(&key))
        .unwrap();
    oi_e2e::run_manager_until(&runtime, &ctx, Duration::from_secs(120), |s| {
        s.object::<oi_api::SipCluster>(&key).is_none()
    });
    assert_eq!(sip_ports(&store), 0);
    assert!(store.objects::<oi_api::BareMetalHost>().iter().all(|h| {
        !h.metadata
            .labels
            .contains_key(oi_api::sip::CLUSTER_NAME_LABEL)
    }));
    let left = set.containers().unwrap();
    assert!(
        left.iter().all(|(_, listing)| listing.lines().count() == 1),
        "{left:?}"
    );
}

/// The jump host's port beside a cluster of ours (whose ingress holds the range's first ports
/// from `oi cluster inject` on).
const OWN_JUMP_PORT: u16 = 30400;

/// A SIPCluster whose `clusterRef` names one of our clusters: its jump host holds a
/// kubeconfig of that cluster (a client certificate of its own, kept in the SIPCluster's
/// status), so after `ssh` into it `kubectl` reaches the cluster through its ingress, as that
/// identity. The whole comes up in one `oi reconcile` (the jump host planned again once the
/// cluster's first run gave it its endpoint).
#[test]
fn the_jump_host_reaches_our_cluster_with_kubectl() {
    const TEST: &str = "the_jump_host_reaches_our_cluster_with_kubectl";
    if !ssh_prerequisites(TEST) {
        return;
    }
    let set = LocalSet::create("sipkube", 1, 1, false).unwrap();
    let public_ip = set.public_ip().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ops = dir.path().join("ops");
    let authorized = keygen(&ops);
    keygen(&dir.path().join("nodes"));
    let node_key = std::fs::read_to_string(dir.path().join("nodes")).unwrap();
    let sip = format!(
        "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: t1, namespace: default}}\nspec:\n  clusterRef: {{name: c1}}\n  nodes: {{}}\n  services:\n    jumpHost:\n    - image: quay.io/airshipit/jump-host:latest\n      nodePort: {port}\n      nodeInterfaceId: oam-ipv4\n      nodeSSHPrivateKeys: node-keys\n      sshAuthorizedKeys: ['{}']\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: node-keys, namespace: default}}\ndata: {{id_ed25519: {}}}\n",
        authorized.trim(),
        b64(&node_key),
        port = OWN_JUMP_PORT,
    );
    let manifests = format!(
        "{}---\n{sip}",
        oi_e2e::inject_cluster(&set.manifests, "c1", 1).unwrap()
    );
    // One run: the cluster comes up and the jump host gets its kubeconfig.
    let first = reconcile(&manifests).ok("oi reconcile").unwrap();
    assert!(
        first.stderr.contains("services: jump host jump-host-0"),
        "{}",
        first.stderr
    );
    let world = World::parse(&first.stdout).unwrap();
    let sip = world.of_kind("SIPCluster").next().unwrap();
    let kept = oi_e2e::at(sip, &["status", "jumpHosts"]).unwrap();
    assert_eq!(kept[0]["service"].as_str(), Some("jump-host-0"));

    let out = poll("kubectl in the jump host", || {
        let out = ssh(
            &ops,
            "ubuntu",
            public_ip,
            OWN_JUMP_PORT,
            "ls -l .kube/config && kubectl auth whoami -o jsonpath='{.status.userInfo.username} {.status.userInfo.groups}' && echo && kubectl get namespace kube-system -o name",
        );
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("{out:?}"))
        }
    });
    assert!(out.contains("-rw-------"), "{out}");
    assert!(
        out.contains("oneinfra:sipcluster:default:t1:jump-host-0 [\"system:masters\",\"system:authenticated\"]"),
        "{out}"
    );
    assert!(out.contains("namespace/kube-system"), "{out}");

    // Converged: a second run writes nothing.
    let second = reconcile(&first.stdout).ok("oi reconcile again").unwrap();
    assert!(
        second.stderr.contains("files written 0") && !second.stderr.contains("wrote"),
        "{}",
        second.stderr
    );
    drop(set);
}
