//! Real sets: network namespaces, containerd, haproxy. Gated on root, the host commands and
//! the offline image tarballs (`cargo xtask images`); see `oi_testsupport`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use oi_cri::{ClientOptions, CriClient, CriEndpoint};
use oi_local_hypervisor_set::state::SetState;
use oi_local_hypervisor_set::{Paths, procs};

const BIN: &str = env!("CARGO_BIN_EXE_oi-local-hypervisor-set");

fn prerequisites(test: &str) -> bool {
    if !oi_testsupport::require_root_and_commands(test, &oi_local_hypervisor_set::REQUIRED_COMMANDS)
    {
        return false;
    }
    let dir = oi_testsupport::images_dir();
    let has_pause = std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("pause_"))
    });
    oi_testsupport::require(
        test,
        &format!("image tarballs in {} (cargo xtask images)", dir.display()),
        has_pause,
    )
}

/// A set name unique to this test run and test, recorded as the run's (see
/// `oi_testsupport::record_test_set`).
fn set_name(tag: &str) -> String {
    let name = format!("t{tag}{}", std::process::id());
    oi_testsupport::record_test_set(&name);
    name
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("OI_IMAGES_DIR", oi_testsupport::images_dir())
        .output()
        .expect("run oi-local-hypervisor-set")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn create(name: &str, tcp: bool) -> Output {
    let mut args = vec![
        "create",
        "--name",
        name,
        "--size-private",
        "1",
        "--size-public",
        "1",
    ];
    if tcp {
        args.push("--tcp");
    }
    run(&args)
}

fn destroy(name: &str) -> Output {
    run(&["destroy", "--name", name])
}

/// Destroys the set when dropped, so a failing assertion does not leave it running (its
/// namespaces, containerd processes and mounts). Destroying twice is a no-op, so the tests'
/// own destroy steps stay as they are.
struct DestroyOnDrop(String);

impl Drop for DestroyOnDrop {
    fn drop(&mut self) {
        let out = destroy(&self.0);
        if !out.status.success() {
            eprintln!(
                "cleanup: destroying set {} failed: {}",
                self.0,
                text(&out.stderr)
            );
        }
    }
}

/// Kills a child process when dropped (a panicking test does not leave it running).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Already gone when the test killed it itself.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every trace of a set, recorded while it exists, to check its absence afterwards.
struct Traces {
    name: String,
    namespaces: Vec<String>,
    links: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Traces {
    fn of(name: &str) -> Traces {
        let paths = Paths::default();
        let state = SetState::load(&paths, name).unwrap().expect("state file");
        let mut links: Vec<String> = state
            .hypervisors
            .iter()
            .map(|h| h.host_veth.clone())
            .collect();
        links.push(state.bridge.clone());
        Traces {
            name: name.to_string(),
            namespaces: state.hypervisors.iter().map(|h| h.name.clone()).collect(),
            links,
            dirs: vec![paths.set_lib(name), paths.set_run(name)],
        }
    }

    fn assert_present(&self) {
        for ns in &self.namespaces {
            assert!(
                Path::new("/run/netns").join(ns).exists(),
                "netns {ns} missing"
            );
        }
        for link in &self.links {
            assert!(
                Path::new("/sys/class/net").join(link).exists(),
                "link {link} missing"
            );
        }
        assert!(!set_processes(&self.name).is_empty());
    }

    fn assert_gone(&self) {
        let procs = set_processes(&self.name);
        assert!(
            procs.is_empty(),
            "processes of {} left: {procs:?}",
            self.name
        );
        for ns in &self.namespaces {
            assert!(
                !Path::new("/run/netns").join(ns).exists(),
                "netns {ns} left"
            );
        }
        for link in &self.links {
            assert!(
                !Path::new("/sys/class/net").join(link).exists(),
                "link {link} left"
            );
        }
        for dir in &self.dirs {
            assert!(!dir.exists(), "{} left", dir.display());
        }
    }
}

/// Live processes whose command line names the set's directories (containerd, shims,
/// haproxy), as (pid, cmdline).
fn set_processes(name: &str) -> Vec<(u32, String)> {
    let marker = format!("/oi-local-hypervisor-set/{name}/");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = text(&raw).replace('\0', " ");
        if cmdline.contains(&marker) {
            found.push((pid, cmdline));
        }
    }
    found
}

fn load_hypervisors(yaml: &str) -> Vec<oi_api::Hypervisor> {
    let world = oi_api::World::load(yaml, "create output").expect("manifests load with oi-api");
    world.hypervisors.into_values().collect()
}

async fn version(name: &str, endpoint: CriEndpoint) -> Result<String, oi_cri::Error> {
    let client = CriClient::connect(name, endpoint, ClientOptions::default()).await?;
    Ok(client.version().await?.runtime_name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_set_lifecycle() {
    if !prerequisites("plain_set_lifecycle") {
        return;
    }
    let name = set_name("p");
    let _cleanup = DestroyOnDrop(name.clone());
    let out = create(&name, false);
    assert!(out.status.success(), "create failed: {}", text(&out.stderr));
    let traces = Traces::of(&name);
    traces.assert_present();

    let hypervisors = load_hypervisors(&text(&out.stdout));
    assert_eq!(hypervisors.len(), 2);
    assert_eq!(hypervisors.iter().filter(|h| h.spec.public).count(), 1);
    for h in &hypervisors {
        assert_eq!(h.api_version, "infra.oneinfra.ereslibre.es/v1alpha1");
        assert_eq!(
            (h.spec.port_range.low, h.spec.port_range.high),
            (30000, 32767)
        );
        let socket = &h
            .spec
            .local_cri_endpoint
            .as_ref()
            .unwrap()
            .cri_endpoint_path;
        let runtime = version(&h.metadata.name, CriEndpoint::Unix(socket.into()))
            .await
            .unwrap();
        assert_eq!(runtime, "containerd");
    }

    // Each containerd sees its own /var/lib/oneinfra.
    let paths = Paths::default();
    let state = SetState::load(&paths, &name).unwrap().unwrap();
    let [a, b] = &state.hypervisors[..] else {
        panic!("two hypervisors expected");
    };
    let marker = "written-for-a";
    std::fs::write(
        paths
            .hypervisor(&name, &a.name)
            .var_lib_oneinfra
            .join(marker),
        b"a",
    )
    .unwrap();
    let seen = |pid: Option<u32>| {
        Path::new(&format!(
            "/proc/{}/root/var/lib/oneinfra/{marker}",
            pid.unwrap()
        ))
        .exists()
    };
    assert!(seen(a.containerd_pid));
    assert!(!seen(b.containerd_pid));
    assert!(!Path::new("/var/lib/oneinfra").join(marker).exists());

    let again = create(&name, false);
    assert!(!again.status.success(), "second create succeeded");
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );
    traces.assert_present();

    let list = run(&["list"]);
    assert!(list.status.success());
    let listed = text(&list.stdout);
    for h in &state.hypervisors {
        let line = listed.lines().find(|l| l.contains(&h.name)).unwrap();
        assert!(
            line.contains(&h.ip.to_string()) && line.contains("running"),
            "{line}"
        );
    }

    // A pod on the first hypervisor: destroy must remove it through CRI, and nothing that
    // ran in the hypervisor's namespace (containerd, shim, pause) may survive.
    let client = CriClient::connect(
        &a.name,
        CriEndpoint::Unix(a.socket.clone()),
        ClientOptions::default(),
    )
    .await
    .unwrap();
    // Its container writes through a host-path mount of /var/lib/oneinfra: the file must
    // land in this hypervisor's own directory, not in the machine's /var/lib/oneinfra.
    let container = oi_api::runtime::ContainerSpec {
        name: "writer".into(),
        image: oi_api::versions::INFRA
            .toolbox
            .reference(Some("localhost/oneinfra")),
        command: vec!["sh".into()],
        args: vec![
            "-c".into(),
            "echo hello > /data/from-container && exec sleep 3600".into(),
        ],
        env: Default::default(),
        mounts: vec![oi_api::runtime::Mount {
            host_path: "/var/lib/oneinfra".into(),
            container_path: "/data".into(),
            readonly: false,
        }],
        privileged: false,
        resources: None,
    };
    let pod = oi_api::runtime::PodSpec {
        namespace: "lhs-test".into(),
        name: "sleeper".into(),
        labels: Default::default(),
        containers: vec![container.clone()],
    };
    let sandbox = oi_cri::requests::sandbox_config(&pod, "/var/log/oneinfra/pods");
    let sandbox_id = client.run_sandbox(&sandbox).await.unwrap();
    let container_id = client
        .create_container(&oi_cri::requests::create_container_request(
            &sandbox_id,
            &container,
            &sandbox,
        ))
        .await
        .unwrap();
    client.start_container(&container_id).await.unwrap();
    let written = paths
        .hypervisor(&name, &a.name)
        .var_lib_oneinfra
        .join("from-container");
    // `echo hello > f` creates the file before it writes to it: wait for the content, not for
    // the file, or the read can fall between the two and see it empty.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let read = || std::fs::read_to_string(&written).unwrap_or_default();
    while read() != "hello\n" && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(read(), "hello\n");
    assert!(!Path::new("/var/lib/oneinfra/from-container").exists());
    // Its log directory too is the hypervisor's own.
    let logs = paths
        .hypervisor(&name, &a.name)
        .var_log_oneinfra
        .join("pods");
    let entries: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        entries.iter().any(|e| e == "lhs-test_sleeper"),
        "{entries:?}"
    );
    drop(client);
    let in_namespace = procs::pids_in_netns(&Path::new("/run/netns").join(&a.name));
    // containerd, its shim, pause and the writer's sleep at least.
    assert!(in_namespace.len() >= 4, "{in_namespace:?}");

    let out = destroy(&name);
    assert!(
        out.status.success(),
        "destroy failed: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("removed 1 pods"),
        "{}",
        text(&out.stderr)
    );
    traces.assert_gone();
    let survivors: Vec<u32> = in_namespace
        .into_iter()
        .filter(|p| procs::alive(*p))
        .collect();
    assert!(survivors.is_empty(), "{survivors:?}");
    // What the host reaches stays reachable: its name servers (one sits inside the sets'
    // pool on these machines) are routed as before, never into the unreachable routes.
    for server in std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .map(str::trim)
        .filter(|a| a.parse::<std::net::Ipv4Addr>().is_ok())
    {
        let route = Command::new("ip")
            .args(["route", "get", server])
            .output()
            .unwrap();
        let said = format!("{}{}", text(&route.stdout), text(&route.stderr));
        assert!(
            !said.starts_with("unreachable") && route.status.success(),
            "name server {server} made unreachable: {said}"
        );
    }
    // A destroyed set's addresses go nowhere: the pool's unreachable routes answer at once,
    // never the default route.
    let route = Command::new("ip")
        .args(["route", "get", &a.ip.to_string()])
        .output()
        .unwrap();
    let said = format!("{}{}", text(&route.stdout), text(&route.stderr));
    assert!(
        said.starts_with("unreachable ") || said.contains("No route to host"),
        "ip route get {}: {said}",
        a.ip
    );
    let refused = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from((a.ip, 30000)),
        std::time::Duration::from_secs(5),
    )
    .unwrap_err();
    assert_ne!(refused.kind(), std::io::ErrorKind::TimedOut, "{refused}");
    let out = destroy(&name);
    assert!(
        out.status.success(),
        "second destroy failed: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("nothing to do"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_set_lifecycle() {
    if !prerequisites("tcp_set_lifecycle") {
        return;
    }
    let name = set_name("t");
    let _cleanup = DestroyOnDrop(name.clone());
    let out = create(&name, true);
    assert!(out.status.success(), "create failed: {}", text(&out.stderr));
    let traces = Traces::of(&name);
    traces.assert_present();
    let listed: Vec<_> = set_processes(&name);
    assert_eq!(
        listed
            .iter()
            .filter(|(_, c)| c.starts_with("haproxy"))
            .count(),
        2,
        "{listed:?}"
    );
    let key_file = Paths::default()
        .hypervisor(&name, &format!("{name}-public-1"))
        .tls
        .join("server.pem");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let now = time::OffsetDateTime::now_utc();
    let stranger_ca = oi_pki::CertificateAuthority::generate(
        "stranger",
        oi_pki::KeyAlgorithm::EcdsaP256,
        now,
        time::Duration::days(1),
    )
    .unwrap();
    let stranger = stranger_ca
        .issue(
            &oi_pki::LeafSpec::client(oi_pki::CaKind::ApiServerClient, "stranger", &[]),
            now,
            time::Duration::days(1),
        )
        .unwrap();

    for h in load_hypervisors(&text(&out.stdout)) {
        assert!(h.spec.local_cri_endpoint.is_none());
        let remote = h.spec.remote_cri_endpoint.clone().unwrap();
        assert_eq!(
            remote.cri_endpoint_uri,
            format!("tcp://{}:27000", h.spec.ip_address)
        );
        let client = remote.client_certificate.clone().unwrap();
        let endpoint = CriEndpoint::Tls {
            uri: remote.cri_endpoint_uri.clone(),
            ca_pem: remote.ca_certificate.clone(),
            cert_pem: client.certificate.clone(),
            key_pem: client.private_key.clone(),
        };
        assert_eq!(
            version(&h.metadata.name, endpoint).await.unwrap(),
            "containerd"
        );
        let wrong = CriEndpoint::Tls {
            uri: remote.cri_endpoint_uri.clone(),
            ca_pem: remote.ca_certificate.clone(),
            cert_pem: stranger.certificate_pem.clone(),
            key_pem: stranger.private_key_pem.clone(),
        };
        assert!(
            version(&h.metadata.name, wrong).await.is_err(),
            "front accepted a client certificate from another CA"
        );
    }

    let out = destroy(&name);
    assert!(
        out.status.success(),
        "destroy failed: {}",
        text(&out.stderr)
    );
    traces.assert_gone();
    assert!(destroy(&name).status.success());
}

#[test]
fn failed_create_cleans_up() {
    if !prerequisites("failed_create_cleans_up") {
        return;
    }
    // A directory whose only tarball is not an image: containerd starts, the import fails.
    let images = tempfile::tempdir().unwrap();
    std::fs::write(images.path().join("broken.tar"), b"not a tarball").unwrap();
    let name = set_name("f");
    let _cleanup = DestroyOnDrop(name.clone());
    let out = Command::new(BIN)
        .args([
            "create",
            "--name",
            &name,
            "--size-private",
            "1",
            "--size-public",
            "1",
        ])
        .arg("--images-dir")
        .arg(images.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("cleaning up") && stderr.contains("broken.tar"),
        "{stderr}"
    );
    let paths = Paths::default();
    assert!(!paths.set_lib(&name).exists() && !paths.set_run(&name).exists());
    assert!(set_processes(&name).is_empty());
    for ns in [format!("{name}-private-1"), format!("{name}-public-1")] {
        assert!(!Path::new("/run/netns").join(ns).exists());
    }
}

#[test]
fn destroying_an_unknown_set_is_a_no_op() {
    let out = destroy("never-created-0");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing to do"));
}

#[test]
fn invalid_names_are_refused_before_touching_anything() {
    let out = run(&["create", "--name", "Bad_Name", "--size-private", "1"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("invalid set name"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn destroy_converges_after_create_is_killed_halfway() {
    use std::io::{BufRead, BufReader};
    if !prerequisites("destroy_converges_after_create_is_killed_halfway") {
        return;
    }
    let name = set_name("k");
    let _cleanup = DestroyOnDrop(name.clone());
    let child = Command::new(BIN)
        .args([
            "create",
            "--name",
            &name,
            "--size-private",
            "2",
            "--size-public",
            "1",
        ])
        .arg("--images-dir")
        .arg(oi_testsupport::images_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Killed when the test ends, whatever happened, before the set is destroyed.
    let mut child = KillOnDrop(child);
    // Kill it once its containerds run and the image import has begun.
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let importing = line.contains("importing");
        seen.push(line);
        if importing {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.contains("importing")),
        "{seen:?}"
    );
    child.0.kill().unwrap();
    child.0.wait().unwrap();

    let traces = Traces::of(&name);
    traces.assert_present();
    let state = SetState::load(&Paths::default(), &name).unwrap().unwrap();
    assert_eq!(state.phase, oi_local_hypervisor_set::state::Phase::Creating);
    let list = run(&["list"]);
    assert!(text(&list.stdout).contains("creating"));

    let out = destroy(&name);
    assert!(
        out.status.success(),
        "destroy failed: {}",
        text(&out.stderr)
    );
    traces.assert_gone();
    // And the name is free again.
    let out = create(&name, false);
    assert!(
        out.status.success(),
        "re-create failed: {}",
        text(&out.stderr)
    );
    assert!(destroy(&name).status.success());
    traces.assert_gone();
}
