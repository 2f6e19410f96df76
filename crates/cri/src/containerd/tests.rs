use super::*;

fn config() -> ContainerdConfig {
    ContainerdConfig::in_dir(
        Path::new("/tmp/hv \"1\""),
        "localhost/oneinfra/pause:3.10.1",
    )
}

#[test]
fn config_isolates_the_instance() {
    let text = config().render();
    for want in [
        "version = 2\n",
        r#"root = "/tmp/hv \"1\"/root""#,
        r#"state = "/tmp/hv \"1\"/state""#,
        r#"address = "/tmp/hv \"1\"/containerd.sock""#,
        r#"address = "/tmp/hv \"1\"/containerd.sock.ttrpc""#,
        r#"sandbox_image = "localhost/oneinfra/pause:3.10.1""#,
        "restrict_oom_score_adj = true",
        "disable_apparmor = true",
        "SystemdCgroup = false",
        r#"Root = "/tmp/hv \"1\"/runc""#,
        r#"stream_server_port = "0""#,
        r#"conf_dir = "/tmp/hv \"1\"/root/cni/net.d""#,
        r#"[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]"#,
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert_eq!(
        config().endpoint(),
        CriEndpoint::Unix(PathBuf::from("/tmp/hv \"1\"/containerd.sock"))
    );
}

#[test]
fn plain_command_line() {
    let opts = SpawnOptions::in_dir(Path::new("/d"));
    assert_eq!(
        command_line(Path::new("/d/config.toml"), &opts),
        vec!["containerd", "--config", "/d/config.toml"]
    );
}

#[test]
fn namespaced_command_line_enters_netns_then_private_mounts() {
    let opts = SpawnOptions {
        netns: Some("oi-hv1".into()),
        bind_mounts: vec![
            BindMount {
                source: "/tmp/hv1/oneinfra".into(),
                target: "/var/lib/oneinfra".into(),
            },
            BindMount {
                source: "/tmp/hv1/etc".into(),
                target: "/etc/oneinfra".into(),
            },
        ],
        containerd: "/usr/bin/containerd".into(),
        ..SpawnOptions::in_dir(Path::new("/d"))
    };
    let argv = command_line(Path::new("/d/config.toml"), &opts);
    assert_eq!(
        argv[..9],
        [
            "nsenter",
            "--net=/run/netns/oi-hv1",
            "--",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh"
        ]
    );
    assert_eq!(argv[10], MOUNT_SCRIPT);
    assert_eq!(
        argv[11..],
        [
            "oi-mounts",
            "/tmp/hv1/oneinfra",
            "/var/lib/oneinfra",
            "/tmp/hv1/etc",
            "/etc/oneinfra",
            "--",
            "/usr/bin/containerd",
            "--config",
            "/d/config.toml"
        ]
    );
    assert!(!argv.iter().any(|a| a == "ip"), "never `ip netns exec`");
}

#[test]
fn mount_script_execs_the_rest() {
    // Without mount privileges we can still check the argument walking: no pairs, then exec.
    let out = std::process::Command::new("sh")
        .args(["-c", MOUNT_SCRIPT, "oi-mounts", "--", "echo", "a b"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a b\n");
}

#[tokio::test]
async fn socket_path_too_long_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("x".repeat(120));
    let cfg = ContainerdConfig::in_dir(&long, "p");
    let err = Containerd::spawn(cfg, SpawnOptions::in_dir(dir.path()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ContainerdError::SocketPathTooLong { .. }),
        "{err}"
    );
    assert!(!long.exists());
}
