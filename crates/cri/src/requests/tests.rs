use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use super::*;

fn container(name: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        image: "localhost/oneinfra/etcd:3.6.4-0".to_string(),
        command: vec!["etcd".into()],
        args: vec!["--name=a".into(), "--data-dir=/var/lib/etcd".into()],
        env: BTreeMap::from([
            ("B".to_string(), "2".to_string()),
            ("A".to_string(), "1".to_string()),
        ]),
        mounts: vec![Mount {
            host_path: "/var/lib/oneinfra/c1/etcd".into(),
            container_path: "/var/lib/etcd".into(),
            readonly: false,
        }],
        privileged: false,
        resources: None,
    }
}

fn pod() -> PodSpec {
    PodSpec {
        namespace: "default".into(),
        name: "c1-control-plane-0".into(),
        labels: BTreeMap::from([(labels::CLUSTER.to_string(), "c1".to_string())]),
        containers: vec![container("etcd")],
    }
}

const NODE: i32 = cri::NamespaceMode::Node as i32;

#[test]
fn sandbox_is_host_network_with_identity_labels_and_hash() {
    let p = pod();
    let c = sandbox_config(&p, "/var/log/oneinfra/pods/");
    let meta = c.metadata.clone().unwrap();
    assert_eq!(
        (meta.namespace.as_str(), meta.name.as_str(), meta.attempt),
        ("default", "c1-control-plane-0", 0)
    );
    assert_eq!(meta.uid, p.content_hash()[..16]);
    // One log directory per pod name, whatever its spec.
    assert_eq!(
        c.log_directory,
        "/var/log/oneinfra/pods/default_c1-control-plane-0"
    );
    assert_eq!(
        c.labels.get(labels::CLUSTER).map(String::as_str),
        Some("c1")
    );
    assert_eq!(
        c.annotations.get(labels::SPEC_HASH),
        Some(&p.content_hash())
    );
    let sc = c.linux.unwrap().security_context.unwrap();
    assert_eq!(sc.namespace_options.unwrap().network, NODE);
    assert!(!sc.privileged);

    let mut privileged = pod();
    privileged.containers.push(ContainerSpec {
        privileged: true,
        resources: None,
        ..container("wireguard")
    });
    let sc = sandbox_config(&privileged, "/l")
        .linux
        .unwrap()
        .security_context
        .unwrap();
    assert!(
        sc.privileged,
        "a privileged container needs a privileged sandbox"
    );
}

#[test]
fn a_changed_spec_gets_a_new_sandbox_uid() {
    let mut other = pod();
    other.containers[0].args.push("--x".into());
    assert_ne!(sandbox_uid(&pod()), sandbox_uid(&other));
}

#[test]
fn container_carries_command_args_env_mounts_and_host_network() {
    let c = container_config(&container("etcd"));
    assert_eq!(c.metadata.unwrap().name, "etcd");
    assert_eq!(c.image.unwrap().image, "localhost/oneinfra/etcd:3.6.4-0");
    assert_eq!(c.command, vec!["etcd"]);
    assert_eq!(c.args, vec!["--name=a", "--data-dir=/var/lib/etcd"]);
    let env: Vec<(String, String)> = c.envs.into_iter().map(|kv| (kv.key, kv.value)).collect();
    assert_eq!(
        env,
        vec![("A".into(), "1".into()), ("B".into(), "2".into())],
        "sorted"
    );
    assert_eq!(c.mounts.len(), 1);
    assert_eq!(c.mounts[0].host_path, "/var/lib/oneinfra/c1/etcd");
    assert_eq!(c.mounts[0].container_path, "/var/lib/etcd");
    assert!(!c.mounts[0].readonly);
    assert_eq!(c.log_path, "etcd.log");
    let sc = c.linux.unwrap().security_context.unwrap();
    assert_eq!(sc.namespace_options.unwrap().network, NODE);

    let req = create_container_request("sb1", &container("etcd"), &sandbox_config(&pod(), "/l"));
    assert_eq!(req.pod_sandbox_id, "sb1");
    assert!(req.sandbox_config.is_some());
}

#[test]
fn throwaway_pod_is_labelled_and_named_safely() {
    let p = throwaway_pod(&container("Write Files!"), "abc");
    assert_eq!(p.namespace, RUN_NAMESPACE);
    assert_eq!(p.name, "oi-run-write-files--abc");
    assert_eq!(p.labels.get(RUN_LABEL).map(String::as_str), Some("true"));
    assert_eq!(p.containers.len(), 1);
}

#[test]
fn host_paths_are_checked() {
    assert_eq!(check_host_path("/etc/oneinfra/a.crt"), Ok(()));
    assert_eq!(check_host_path("/"), Err("is the root directory"));
    assert_eq!(check_host_path("//"), Err("is the root directory"));
    assert_eq!(check_host_path("etc/x"), Err("not absolute"));
    assert_eq!(check_host_path(""), Err("not absolute"));
    assert_eq!(
        check_host_path("/etc/../x"),
        Err("contains . or .. components")
    );
    assert_eq!(
        check_host_path("/a/./b"),
        Err("contains . or .. components")
    );
    assert!(check_host_path("/a\nb").is_err());
}

fn file(path: &str, content: &[u8], mode: u32) -> HostFile {
    HostFile {
        path: path.to_string(),
        content: content.to_vec(),
        mode,
    }
}

#[test]
fn batches_stay_under_the_limit() {
    let small = file("/a", &[1; 1000], 0o644);
    let big = file("/b", &vec![2; WRITER_BATCH_BYTES], 0o644);
    let files = vec![small.clone(), small.clone(), big, small];
    let batches = writer_batches(&files);
    let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![2, 1, 1]);
    assert!(writer_batches(&[]).is_empty());
}

#[test]
fn writer_env_chunks_contents() {
    let big = file("/b", &vec![7; 100 * 1024], 0o600);
    let empty = file("/e", b"", 0o644);
    let w = writer_container(&[&big, &empty], "localhost/oneinfra/busybox:1.36.1");
    assert_eq!(w.image, "localhost/oneinfra/busybox:1.36.1");
    assert_eq!(w.env["OI_FILES"], "2");
    assert_eq!(w.env["OI_F0_PATH"], "/b");
    assert_eq!(w.env["OI_F0_MODE"], "600");
    assert_eq!(w.env["OI_F0_N"], "3", "136 KiB of base64 in 64 KiB chunks");
    assert!(w.env.values().all(|v| v.len() <= ENV_CHUNK));
    assert_eq!(w.env["OI_F1_N"], "0");
    assert_eq!(w.mounts[0].host_path, "/");
    assert_eq!(w.mounts[0].container_path, HOST_ROOT_MOUNT);
}

/// A throwaway pod's log directory under `root`, holding a log file as containerd leaves it:
/// returns `env` with [`OWN_LOG_DIR_ENV`] naming it (a host path) and its path under `root`.
fn with_own_log_dir(
    root: &std::path::Path,
    pod: &str,
    mut env: BTreeMap<String, String>,
) -> (BTreeMap<String, String>, std::path::PathBuf) {
    let host_path = format!("/var/log/oneinfra/pods/default_{pod}_0123456789abcdef");
    let dir = root.join(host_path.trim_start_matches('/'));
    std::fs::create_dir_all(dir.join("oi-helper")).unwrap();
    std::fs::write(
        dir.join("oi-helper/0.log"),
        b"2026-11-30T00:00:00Z stdout F x\n",
    )
    .unwrap();
    env.insert(OWN_LOG_DIR_ENV.to_string(), host_path);
    (env, dir)
}

/// Runs a script the way the toolbox container would, with the host root replaced by `root`.
fn run_script(
    script: &str,
    root: &std::path::Path,
    env: &BTreeMap<String, String>,
    args: &[String],
) -> std::process::Output {
    let script = script.replace("/host", &root.to_string_lossy());
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("test")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env)
        .output()
        .unwrap()
}

#[test]
fn writer_script_writes_contents_and_modes_atomically() {
    let root = tempfile::tempdir().unwrap();
    let binary: Vec<u8> = (0..=255u8).cycle().take(200 * 1024).collect();
    let files = [
        file(
            "/etc/oneinfra/c1/ca.key",
            b"-----BEGIN PRIVATE KEY-----\nx\n",
            0o600,
        ),
        file("/etc/oneinfra/c1/big.bin", &binary, 0o644),
        file("/var/lib/oneinfra/empty", b"", 0o640),
        file(
            "/etc/oneinfra/it's \"quoted\" $(x).txt",
            b"$(touch /tmp/pwned)\n`x`",
            0o644,
        ),
    ];
    std::fs::create_dir_all(root.path().join("etc/oneinfra/c1")).unwrap();
    std::fs::write(root.path().join("etc/oneinfra/c1/ca.key"), b"old").unwrap();
    let refs: Vec<&HostFile> = files.iter().collect();
    let w = writer_container(&refs, "toolbox");
    let (env, log_dir) = with_own_log_dir(root.path(), "writer", w.env);
    let out = run_script(WRITER_SCRIPT, root.path(), &env, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!log_dir.exists(), "its own log directory is removed last");
    assert!(log_dir.parent().unwrap().exists(), "only its own");
    for f in &files {
        let on_disk = root.path().join(f.path.trim_start_matches('/'));
        assert_eq!(std::fs::read(&on_disk).unwrap(), f.content, "{}", f.path);
        let mode = std::fs::metadata(&on_disk).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, f.mode, "{}", f.path);
    }
    let leftovers: Vec<_> = std::fs::read_dir(root.path().join("etc/oneinfra/c1"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".oi-write"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// Two writers at once on one hypervisor, each in its own PID namespace (as containers are:
/// both are PID 1), writing the same file: each has its own temporary file, both succeed,
/// and the file is whole, one or the other.
#[test]
fn concurrent_writers_share_no_temporary_file() {
    if !oi_testsupport::require_root_and_commands(
        "concurrent_writers_share_no_temporary_file",
        &["unshare"],
    ) {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc/oneinfra")).unwrap();
    let contents: Vec<Vec<u8>> = (0..2u8).map(|i| vec![b'a' + i; 512 << 10]).collect();
    for round in 0..5 {
        let children: Vec<_> = contents
            .iter()
            .enumerate()
            .map(|(i, content)| {
                let f = file("/etc/oneinfra/same.bin", content, 0o600);
                let w = writer_container(&[&f], "toolbox");
                let (env, _) = with_own_log_dir(root.path(), &format!("w{round}-{i}"), w.env);
                let script = WRITER_SCRIPT.replace("/host", &root.path().to_string_lossy());
                Command::new("unshare")
                    .args(["--pid", "--fork", "sh", "-c", &script, "writer"])
                    .env_clear()
                    .env("PATH", "/usr/bin:/bin")
                    .envs(&env)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let written = std::fs::read(root.path().join("etc/oneinfra/same.bin")).unwrap();
        assert!(
            contents.contains(&written),
            "round {round}: the file is neither writer's content ({} bytes)",
            written.len()
        );
    }
    let left: Vec<_> = std::fs::read_dir(root.path().join("etc/oneinfra"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "temporary files left: {left:?}");
    let logs: Vec<_> = std::fs::read_dir(root.path().join("var/log/oneinfra/pods"))
        .unwrap()
        .collect();
    assert!(logs.is_empty(), "log directories left: {logs:?}");
}

#[test]
fn writer_script_fails_on_bad_data() {
    let root = tempfile::tempdir().unwrap();
    let env = BTreeMap::from([
        ("OI_FILES".to_string(), "1".to_string()),
        ("OI_F0_PATH".to_string(), "/x".to_string()),
        ("OI_F0_MODE".to_string(), "644".to_string()),
        ("OI_F0_N".to_string(), "1".to_string()),
        ("OI_F0_D0".to_string(), "!!!not base64!!!".to_string()),
    ]);
    let (env, log_dir) = with_own_log_dir(root.path(), "writer", env);
    let out = run_script(WRITER_SCRIPT, root.path(), &env, &[]);
    assert!(!out.status.success());
    assert!(
        !root.path().join("x").exists(),
        "no partial file at the target"
    );
    let left: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n != "var")
        .collect();
    assert!(left.is_empty(), "temporary file left: {left:?}");
    assert!(
        log_dir.join("oi-helper/0.log").exists(),
        "a failed writer keeps its log for the error's tail"
    );
}

#[test]
fn remover_script_removes_trees_and_files() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("a/b/c")).unwrap();
    std::fs::write(root.path().join("a/b/c/f"), b"x").unwrap();
    std::fs::write(root.path().join("keep"), b"x").unwrap();
    std::fs::write(root.path().join("gone"), b"x").unwrap();
    let r = remover_container(
        &[
            "/a".to_string(),
            "/gone".to_string(),
            "/missing".to_string(),
        ],
        "t",
    );
    assert_eq!(r.args, vec!["/a", "/gone", "/missing"]);
    // The container runs command + args: the script, $0, then the paths.
    assert_eq!(r.command.last().map(String::as_str), Some("oi-remove"));
    let (env, log_dir) = with_own_log_dir(root.path(), "remover", BTreeMap::new());
    let out = run_script(REMOVER_SCRIPT, root.path(), &env, &r.args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!log_dir.exists(), "its own log directory is removed last");
    assert!(!root.path().join("a").exists());
    assert!(!root.path().join("gone").exists());
    assert!(root.path().join("keep").exists());
}

#[test]
fn cri_log_lines_become_text() {
    let raw = "tion: partial first line\n2026-11-22T02:00:00.1Z stdout F hello\n2026-11-22T02:00:00.2Z stderr P par\n2026-11-22T02:00:00.3Z stderr F tial\n";
    assert_eq!(
        strip_cri_log(raw),
        "tion: partial first line\nhello\npartial"
    );
    let cmd = log_reader_command("ns_pod_uid", "c", 2048, true);
    assert_eq!(&cmd[4..], ["2048", "ns_pod_uid", "c"]);
    assert!(cmd[2].contains("tail") && cmd[2].contains("rm -rf"));
    assert!(!log_reader_command("d", "c", 1, false)[2].contains("tail"));
}

#[test]
fn file_writes_selects_changed_files_and_returns_all_hashes() {
    let file = |path: &str, content: &[u8], mode: u32| HostFile {
        path: path.into(),
        content: content.to_vec(),
        mode,
    };
    let same = file("/etc/oneinfra/a", b"a", 0o644);
    let new_content = file("/etc/oneinfra/b", b"b2", 0o644);
    let new_mode = file("/etc/oneinfra/c", b"c", 0o600);
    let unknown = file("/etc/oneinfra/d", b"d", 0o644);
    let known = BTreeMap::from([
        (same.path.clone(), same.content_hash()),
        (
            new_content.path.clone(),
            file("/etc/oneinfra/b", b"b1", 0o644).content_hash(),
        ),
        (
            new_mode.path.clone(),
            file("/etc/oneinfra/c", b"c", 0o644).content_hash(),
        ),
        ("/etc/oneinfra/other".to_string(), "kept".to_string()),
    ]);
    let files = [
        same.clone(),
        new_content.clone(),
        new_mode.clone(),
        unknown.clone(),
    ];
    let (changed, hashes) = file_writes(&files, &known);
    let changed: Vec<&str> = changed.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        changed,
        ["/etc/oneinfra/b", "/etc/oneinfra/c", "/etc/oneinfra/d"]
    );
    assert_eq!(hashes.len(), 5);
    for f in &files {
        assert_eq!(hashes[&f.path], f.content_hash());
    }
    assert_eq!(hashes["/etc/oneinfra/other"], "kept");
    let (again, _) = file_writes(&files, &hashes);
    assert!(
        again.is_empty(),
        "a second write with the returned hashes writes nothing"
    );
}
