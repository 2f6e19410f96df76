use super::*;

#[test]
fn finds_the_executable_among_cargo_messages() {
    let msgs = r#"{"reason":"compiler-artifact","target":{"name":"tokio","kind":["lib"]},"executable":null}
{"reason":"compiler-artifact","target":{"name":"kube-standin","kind":["bin"]},"executable":"/t/release/kube-standin"}
{"reason":"build-finished","success":true}"#;
    assert_eq!(
        executable_from_messages(msgs, "kube-standin"),
        Some(PathBuf::from("/t/release/kube-standin"))
    );
    assert_eq!(executable_from_messages(msgs, "other"), None);
}

#[test]
fn kube_images_are_skipped_while_the_standin_crate_is_missing() {
    let root = tempfile::tempdir().unwrap();
    let opts = BuildOptions {
        out_dir: root.path().join("out"),
        only: vec!["kube-scheduler".into()],
        workspace_root: root.path().to_path_buf(),
    };
    let mut log = Vec::new();
    let reports = build_images(&opts, &mut log).unwrap();
    assert_eq!(reports.len(), oi_api::versions::RELEASES.len());
    assert!(
        reports
            .iter()
            .all(|r| matches!(r.outcome, Outcome::Skipped { .. }))
    );
    assert!(String::from_utf8(log).unwrap().contains("SKIPPED"));
}

#[test]
fn second_build_is_up_to_date_and_a_fresh_one_is_identical() {
    if !oi_testsupport::require(
        "second_build_is_up_to_date_and_a_fresh_one_is_identical",
        "busybox-static (/bin/busybox)",
        Path::new(catalog::HOST_BUSYBOX).is_file(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = |out: &str| BuildOptions {
        out_dir: dir.path().join(out),
        only: vec!["busybox".into()],
        workspace_root: crate::workspace_root(),
    };
    let first = build_images(&opts("a"), &mut std::io::sink()).unwrap();
    assert!(matches!(first[0].outcome, Outcome::Built { .. }));
    let again = build_images(&opts("a"), &mut std::io::sink()).unwrap();
    assert!(matches!(again[0].outcome, Outcome::UpToDate { .. }));
    build_images(&opts("b"), &mut std::io::sink()).unwrap();
    let name = "busybox_1.36.1.tar";
    let a = fs::read(dir.path().join("a").join(name)).unwrap();
    assert_eq!(a, fs::read(dir.path().join("b").join(name)).unwrap());
    // A changed record means changed inputs: the image is rebuilt.
    fs::write(dir.path().join("a").join(format!("{name}.inputs")), "x\n").unwrap();
    let rebuilt = build_images(&opts("a"), &mut std::io::sink()).unwrap();
    assert!(matches!(rebuilt[0].outcome, Outcome::Built { .. }));
    // The layout names the image for containerd.
    let mut archive = tar::Archive::new(a.as_slice());
    let index = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.path().unwrap().to_str() == Some("index.json"))
        .map(|mut e| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            s
        })
        .unwrap();
    assert!(index.contains("\"io.containerd.image.name\":\"localhost/oneinfra/busybox:1.36.1\""));
}

#[test]
fn atomic_write_replaces_and_leaves_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tar");
    write_atomically(&p, |w| w.write_all(b"one").map_err(io_err("w", "x"))).unwrap();
    write_atomically(&p, |w| w.write_all(b"two").map_err(io_err("w", "x"))).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"two");
    let failed = write_atomically(&p, |_| {
        Err(Error::NoArtifact {
            package: "p".into(),
            binary: "b".into(),
        })
    });
    assert!(failed.is_err());
    assert_eq!(fs::read(&p).unwrap(), b"two");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}
