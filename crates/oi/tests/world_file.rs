//! The world file is never lost, leaked or replaced by something else, and nothing broken is
//! deployed: the built `oi` against the ordinary mistakes a user makes, each target pre-filled
//! and checked byte for byte afterwards.

// Tests: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/oi.rs"]
mod support;

use std::fs;
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use oi_api::ObjectKey;
use pretty_assertions::assert_eq;
use support::*;

/// Where the child's stdin comes from.
enum Input<'a> {
    Bytes(&'a [u8]),
    /// A terminal (a pseudo-terminal the test opens), as when a user types the command.
    Terminal,
    /// A file (`oi ... < FILE`).
    File(&'a Path),
}

/// Starts `oi` in `dir` with `args` (plus `--now`).
fn start(dir: &Path, args: &[&str], input: &Input<'_>) -> (Child, Option<Pty>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_oi"));
    command
        .current_dir(dir)
        .args(args)
        .args(["--now", NOW])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let terminal = match input {
        Input::Bytes(_) => {
            command.stdin(Stdio::piped());
            None
        }
        Input::Terminal => {
            let pty = pty();
            let slave = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&pty.slave)
                .unwrap();
            command.stdin(Stdio::from(slave));
            Some(pty)
        }
        Input::File(path) => {
            command.stdin(Stdio::from(fs::File::open(path).unwrap()));
            None
        }
    };
    let mut child = command.spawn().unwrap();
    if let Input::Bytes(bytes) = input {
        // A command that fails early may not read its input: a broken pipe here is fine.
        let _ = std::io::Write::write_all(&mut child.stdin.take().unwrap(), bytes);
    }
    (child, terminal)
}

fn run(dir: &Path, args: &[&str], input: Input<'_>) -> Output {
    let (child, _pty) = start(dir, args, &input);
    child.wait_with_output().unwrap()
}

/// Expects a failure (exit 1) whose stderr is exactly `expected`.
fn fails(out: &Output, expected: &str) {
    assert_eq!(stderr(out), expected);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
}

/// A directory holding `world.yaml`: the fixture hypervisors and cluster c1.
fn world_dir() -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("world.yaml");
    let text = injected("c1", 1);
    fs::write(&world, &text).unwrap();
    (dir, world, text)
}

fn unchanged(path: &Path, before: &str) {
    assert_eq!(
        fs::read_to_string(path).unwrap(),
        before,
        "{} changed",
        path.display()
    );
}

use oi_testsupport::mknod;

#[test]
fn a_dry_run_or_a_kubeconfig_never_replaces_the_world_it_reads() {
    let (dir, world, before) = world_dir();
    let refused = "error: -o world.yaml: is also an input (world.yaml), and this command does not print manifests: its output would replace them\n";
    for args in [
        &[
            "reconcile",
            "--dry-run",
            "--image-repository",
            "localhost/oneinfra",
        ][..],
        &["cluster", "admin-kubeconfig"][..],
        &["cluster", "apiserver-ca"][..],
        &["cluster", "certificates"][..],
    ] {
        let mut args = args.to_vec();
        args.extend(["-f", "world.yaml", "-o", "world.yaml"]);
        fails(&run(dir.path(), &args, Input::Bytes(b"")), refused);
        unchanged(&world, &before);
    }
    // Through a symlink, and with the world on stdin.
    std::os::unix::fs::symlink("world.yaml", dir.path().join("link.yaml")).unwrap();
    fails(
        &run(
            dir.path(),
            &[
                "reconcile",
                "--dry-run",
                "-f",
                "world.yaml",
                "-o",
                "link.yaml",
            ],
            Input::Bytes(b""),
        ),
        "error: -o link.yaml: is also an input (world.yaml), and this command does not print manifests: its output would replace them\n",
    );
    fails(
        &run(
            dir.path(),
            &["cluster", "admin-kubeconfig", "-o", "world.yaml"],
            Input::File(&world),
        ),
        "error: -o world.yaml: is also an input (stdin), and this command does not print manifests: its output would replace them\n",
    );
    unchanged(&world, &before);
}

#[test]
fn outputs_that_are_not_manifests_never_replace_a_file_of_manifests() {
    let (dir, world, before) = world_dir();
    let refused = "error: -o world.yaml: holds manifests, and this command does not print manifests: its output would replace them (choose another file)\n";
    for args in [
        &["join-token", "generate"][..],
        &["version"][..],
        &["completion", "bash"][..],
        // The world read from elsewhere: the file is not an input, it still holds manifests.
        &["cluster", "admin-kubeconfig", "-f", "other.yaml"][..],
    ] {
        fs::write(dir.path().join("other.yaml"), &before).unwrap();
        let mut args = args.to_vec();
        args.extend(["-o", "world.yaml"]);
        fails(&run(dir.path(), &args, Input::Bytes(b"")), refused);
        unchanged(&world, &before);
    }
    // A file of anything else is theirs to replace.
    fs::write(dir.path().join("token.txt"), "old\n").unwrap();
    let out = run(
        dir.path(),
        &["join-token", "generate", "-o", "token.txt"],
        Input::Bytes(b""),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_ne!(
        fs::read_to_string(dir.path().join("token.txt")).unwrap(),
        "old\n"
    );
    // A kubeconfig (`kind: Config`) is not manifests: writing a new one over it works (a
    // second `scripts/demo.sh` does), and so does doing it again.
    for _ in 0..2 {
        let out = run(
            dir.path(),
            &[
                "cluster",
                "admin-kubeconfig",
                "-f",
                "world.yaml",
                "-o",
                "admin.kubeconfig",
            ],
            Input::Bytes(b""),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let written = fs::read_to_string(dir.path().join("admin.kubeconfig")).unwrap();
        assert!(written.contains("kind: Config"), "{written}");
    }
    unchanged(&world, &before);
}

#[test]
fn a_snapshot_never_replaces_the_world_or_another_file() {
    let (dir, world, before) = world_dir();
    // Refused before anything is asked of etcd (the fixture's hypervisors do not exist).
    fails(
        &run(
            dir.path(),
            &[
                "cluster",
                "snapshot",
                "-f",
                "world.yaml",
                "--to",
                "world.yaml",
            ],
            Input::Bytes(b""),
        ),
        "error: --to world.yaml is also an input (world.yaml): the snapshot would replace the manifests\n",
    );
    unchanged(&world, &before);
    fs::write(dir.path().join("copy.yaml"), &before).unwrap();
    fails(
        &run(
            dir.path(),
            &[
                "cluster",
                "snapshot",
                "-f",
                "world.yaml",
                "--to",
                "copy.yaml",
            ],
            Input::Bytes(b""),
        ),
        "error: --to copy.yaml holds manifests: the snapshot would replace them (choose another file)\n",
    );
    unchanged(&dir.path().join("copy.yaml"), &before);
    fs::write(dir.path().join("notes.txt"), "mine\n").unwrap();
    fails(
        &run(
            dir.path(),
            &[
                "cluster",
                "snapshot",
                "-f",
                "world.yaml",
                "--to",
                "notes.txt",
            ],
            Input::Bytes(b""),
        ),
        "error: --to notes.txt exists and is not a snapshot: it is left as it is (remove it, or choose another file)\n",
    );
    unchanged(&dir.path().join("notes.txt"), "mine\n");
}

#[test]
fn a_same_named_snapshot_from_another_world_is_not_restored() {
    use sha2::Digest as _;
    let (dir, world, before) = world_dir();
    // Staging's c1: another PKI, the same name.
    let staging = load(&injected("c1", 1));
    let key = ObjectKey::new("default", "c1");
    let mut db = vec![7u8; 8192];
    db[16..20].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
    let sum = sha2::Sha256::digest(&db);
    db.extend_from_slice(&sum);
    let snapshot = oi_planner::snapshot::Snapshot::new(
        &key,
        &staging.clusters[&key],
        db,
        99,
        "3.4.23",
        "c1-control-plane-0",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    fs::write(dir.path().join("staging.oisnap"), snapshot.encode()).unwrap();
    let out = run(
        dir.path(),
        &[
            "cluster",
            "restore",
            "--from",
            "staging.oisnap",
            "-f",
            "world.yaml",
            "-o",
            "world.yaml",
        ],
        Input::Bytes(b""),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(
            "error: staging.oisnap holds the data of another cluster named default/c1: none of \
             its CAs is one of default/c1's"
        ),
        "{}",
        stderr(&out)
    );
    unchanged(&world, &before);
}

#[test]
fn an_empty_or_malformed_target_is_refused_and_the_world_left_alone() {
    let (dir, world, before) = world_dir();
    for (args, expected) in [
        (
            &["cluster", "upgrade", "--to", ""][..],
            "error: --to is empty: name the version to reach (",
        ),
        (
            &["cluster", "rotate-ca", "--ca", "all,nonsense"][..],
            "error: --ca: unknown CA \"nonsense\"",
        ),
        (
            &["cluster", "rotate-ca", "--ca", "nonsense,all"][..],
            "error: --ca: unknown CA \"nonsense\"",
        ),
        (
            &["cluster", "rotate-ca", "--ca", ""][..],
            "error: --ca: no CA named",
        ),
    ] {
        let mut args = args.to_vec();
        args.extend(["-f", "world.yaml", "-o", "world.yaml"]);
        let out = run(dir.path(), &args, Input::Bytes(b""));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).starts_with(expected),
            "{args:?}: {}",
            stderr(&out)
        );
        unchanged(&world, &before);
    }
}

#[test]
fn a_terminal_on_stdin_is_no_input_never_an_empty_world() {
    let (dir, world, before) = world_dir();
    let no_input = "error: no manifests to read: stdin is a terminal and no -f FILE was given (pipe manifests in, or start from an empty world with -f /dev/null)\n";
    let hypervisor = [
        "hypervisor",
        "inject",
        "--name",
        "h9",
        "--local-cri-endpoint",
        "/run/h9.sock",
        "--ip-address",
        "10.0.0.99",
        "-o",
        "world.yaml",
    ];
    fails(
        &run(
            dir.path(),
            &["reconcile", "-o", "world.yaml"],
            Input::Terminal,
        ),
        no_input,
    );
    unchanged(&world, &before);
    fails(&run(dir.path(), &hypervisor, Input::Terminal), no_input);
    unchanged(&world, &before);
    // `-f -` reads the terminal too.
    fails(
        &run(
            dir.path(),
            &[
                "cluster",
                "delete",
                "--name",
                "c1",
                "-f",
                "-",
                "-o",
                "world.yaml",
            ],
            Input::Terminal,
        ),
        no_input,
    );
    unchanged(&world, &before);
    // Commands that read no manifests work from a terminal; a new world starts from
    // /dev/null.
    let out = run(dir.path(), &["version", "kubernetes"], Input::Terminal);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut new_world = hypervisor.to_vec();
    new_world[9] = "new.yaml";
    new_world.extend(["-f", "/dev/null"]);
    let out = run(dir.path(), &new_world, Input::Terminal);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        load(&fs::read_to_string(dir.path().join("new.yaml")).unwrap())
            .hypervisors
            .len(),
        1
    );
}

#[test]
fn outputs_that_are_not_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let hv = hypervisors();
    let inject = |output: &str| -> Output {
        run(
            dir.path(),
            &[
                "cluster",
                "inject",
                "--name",
                "c2",
                "-f",
                path_str(&hv),
                "-o",
                output,
            ],
            Input::Bytes(b""),
        )
    };
    let previous = "previous content\n";

    // A symlink: followed, kept, its target replaced with mode 0600.
    fs::write(dir.path().join("real.yaml"), previous).unwrap();
    std::os::unix::fs::symlink("real.yaml", dir.path().join("link.yaml")).unwrap();
    let out = inject("link.yaml");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        fs::read_link(dir.path().join("link.yaml")).unwrap(),
        Path::new("real.yaml")
    );
    let real = fs::read_to_string(dir.path().join("real.yaml")).unwrap();
    assert_eq!(load(&real).clusters.len(), 1);
    let mode = fs::metadata(dir.path().join("real.yaml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // A dangling symlink: refused, nothing created.
    std::os::unix::fs::symlink("missing.yaml", dir.path().join("dangling.yaml")).unwrap();
    fails(
        &inject("dangling.yaml"),
        "error: -o dangling.yaml: is a symlink to missing.yaml, which does not exist (nothing is created through a dangling symlink)\n",
    );
    assert!(!dir.path().join("missing.yaml").exists());

    // A FIFO: written through to its reader, still a FIFO.
    let fifo = dir.path().join("fifo");
    mknod(&fifo, rustix::fs::FileType::Fifo, (0, 0));
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            fs::File::open(fifo)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text
        })
    };
    let out = inject("fifo");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(load(&reader.join().unwrap()).clusters.len(), 1);
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());

    // A character device made here (the null device): written through, still a device.
    let null = dir.path().join("null");
    mknod(&null, rustix::fs::FileType::CharacterDevice, (1, 3));
    let out = inject("null");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(fs::metadata(&null).unwrap().file_type().is_char_device());

    // /dev/stdout: the output on stdout, the system's /dev/stdout left alone.
    let out = inject("/dev/stdout");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(load(&stdout(&out)).clusters.len(), 1);
    assert!(
        fs::symlink_metadata("/dev/stdout")
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // Refused, and left as they were.
    let block = dir.path().join("block");
    mknod(&block, rustix::fs::FileType::BlockDevice, (7, 200));
    fails(&inject("block"), "error: -o block: is a block device\n");
    assert!(fs::metadata(&block).unwrap().file_type().is_block_device());
    fs::create_dir(dir.path().join("sub")).unwrap();
    fails(&inject("sub"), "error: -o sub: is a directory\n");
    let read_only = dir.path().join("ro.yaml");
    fs::write(&read_only, previous).unwrap();
    fs::set_permissions(&read_only, fs::Permissions::from_mode(0o444)).unwrap();
    fails(
        &inject("ro.yaml"),
        "error: -o ro.yaml: is read-only (mode 0444); make it writable or choose another file\n",
    );
    unchanged(&read_only, previous);
    fails(
        &inject("no/such/dir.yaml"),
        "error: -o no/such/dir.yaml: its directory no/such does not exist\n",
    );
    fails(
        &inject("/dev/fd/5"),
        "error: -o /dev/fd/5: names file descriptor 5; only 1 (stdout) and 2 (stderr) can be written to\n",
    );
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "block",
            "dangling.yaml",
            "fifo",
            "link.yaml",
            "null",
            "real.yaml",
            "ro.yaml",
            "sub"
        ],
        "no temporary or lock file left"
    );
}

/// A hypervisor whose CRI socket is a listener of the test: any connection to it is seen.
fn watched_hypervisor(dir: &Path) -> (std::os::unix::net::UnixListener, String) {
    let socket = dir.join("cri.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let manifests = format!(
        "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata:\n  name: private-1\nspec:\n  localCRIEndpoint:\n    criEndpointPath: {}\n  public: false\n  ipAddress: 10.0.0.11\n  portRange:\n    low: 30000\n    high: 30999\n---\napiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata:\n  name: public-1\nspec:\n  localCRIEndpoint:\n    criEndpointPath: {}\n  public: true\n  ipAddress: 10.0.1.21\n  portRange:\n    low: 30000\n    high: 30999\n",
        socket.display(),
        socket.display()
    );
    (listener, manifests)
}

#[test]
fn an_unwritable_output_is_refused_before_any_hypervisor_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let (listener, hypervisors) = watched_hypervisor(dir.path());
    let world = dir.path().join("world.yaml");
    let injected = ok(
        &["cluster", "inject", "--name", "c1"],
        hypervisors.as_bytes(),
    );
    fs::write(&world, &injected).unwrap();
    fs::create_dir(dir.path().join("out")).unwrap();
    for (output, expected) in [
        ("out", "error: -o out: is a directory\n"),
        (
            "missing/world.yaml",
            "error: -o missing/world.yaml: its directory missing does not exist\n",
        ),
    ] {
        fails(
            &run(
                dir.path(),
                &[
                    "reconcile",
                    "--image-repository",
                    "localhost/oneinfra",
                    "-f",
                    "world.yaml",
                    "-o",
                    output,
                ],
                Input::Bytes(b""),
            ),
            expected,
        );
        assert_eq!(
            listener.accept().map(|_| ()).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::WouldBlock),
            "-o {output}: a hypervisor was contacted"
        );
    }
    unchanged(&world, &injected);
}

/// Reads a child's stderr line by line into a channel, so a test can wait for a line.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn a_second_command_on_the_same_world_waits_and_reads_what_the_first_wrote() {
    let (dir, world, _) = world_dir();
    // This test is the first command: it holds the lock and adds cluster c3.
    let lock = oi_cli_io::Lock::acquire(&world, "pid 0: the test", |_| panic!("free")).unwrap();
    let (mut child, _) = start(
        dir.path(),
        &[
            "cluster",
            "inject",
            "--name",
            "c2",
            "-f",
            "world.yaml",
            "-o",
            "world.yaml",
        ],
        &Input::Bytes(b""),
    );
    let lines = stderr_lines(&mut child);
    let waiting = lines.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(
        waiting,
        "oi: waiting for world.yaml: another command is writing it (pid 0: the test)"
    );
    let with_c3 = ok(
        &["cluster", "inject", "--name", "c3", "-f", path_str(&world)],
        b"",
    );
    fs::write(&world, &with_c3).unwrap();
    drop(lock);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        lines.recv_timeout(Duration::from_secs(5)).is_err(),
        "nothing else on stderr"
    );
    let clusters: Vec<String> = load(&fs::read_to_string(&world).unwrap())
        .clusters
        .keys()
        .map(ToString::to_string)
        .collect();
    assert_eq!(clusters, ["default/c1", "default/c2", "default/c3"]);
}

#[test]
fn inject_and_reconcile_at_once_lose_no_cluster() {
    let dir = tempfile::tempdir().unwrap();
    // Hypervisors nobody answers on: the reconcile fails (the manifests are still written).
    let (_listener, hypervisors) = watched_hypervisor(dir.path());
    drop(_listener);
    let world = dir.path().join("world.yaml");
    for round in 0..5 {
        let first = ok(
            &["cluster", "inject", "--name", "c1"],
            hypervisors.as_bytes(),
        );
        fs::write(&world, &first).unwrap();
        let (reconcile, _) = start(
            dir.path(),
            &[
                "reconcile",
                "--max-wait",
                "1s",
                "--image-repository",
                "localhost/oneinfra",
                "-f",
                "world.yaml",
                "-o",
                "world.yaml",
            ],
            &Input::Bytes(b""),
        );
        let (inject, _) = start(
            dir.path(),
            &[
                "cluster",
                "inject",
                "--name",
                "c2",
                "-f",
                "world.yaml",
                "-o",
                "world.yaml",
            ],
            &Input::Bytes(b""),
        );
        let reconciled = reconcile.wait_with_output().unwrap();
        let injected = inject.wait_with_output().unwrap();
        assert!(
            injected.status.success(),
            "round {round}: {}",
            stderr(&injected)
        );
        assert!(
            stderr(&reconciled).contains("HypervisorUnreachable"),
            "round {round}: {}",
            stderr(&reconciled)
        );
        let after = load(&fs::read_to_string(&world).unwrap());
        assert!(
            after
                .clusters
                .contains_key(&ObjectKey::new("default", "c1"))
                && after
                    .clusters
                    .contains_key(&ObjectKey::new("default", "c2")),
            "round {round}: {:?}",
            after.clusters.keys().collect::<Vec<_>>()
        );
    }
}

/// The world with one edit of cluster c1's manifest (`from` → `to`, first occurrence).
fn edited(world: &str, from: &str, to: &str) -> String {
    assert!(world.contains(from), "{from:?} not in the world");
    world.replacen(from, to, 1)
}

/// The PEM block of `field` (`    field: |` then indented lines) in `world`.
fn pem_of(world: &str, field: &str) -> String {
    let start = world.find(&format!("{field}: |\n")).unwrap() + field.len() + 4;
    let end = world[start..].find("-----END").unwrap() + start;
    let end = world[end..].find('\n').unwrap() + end + 1;
    world[start..end].to_string()
}

#[test]
fn broken_key_material_is_named_by_document_and_field_before_anything_is_deployed() {
    let (dir, world, before) = world_dir();
    let position = |text: &str| {
        // The Cluster document of the world (documents are hypervisors, then clusters).
        text.split("\n---\n")
            .position(|d| d.contains("kind: Cluster"))
            .unwrap()
            + 1
    };
    let doc = position(&before);
    let etcd_peer_ca = pem_of(&before, "    etcdPeer:\n      certificate");
    let api_client_key = {
        let from = before.find("    apiServerClient:").unwrap();
        pem_of(&before[from..], "      privateKey")
    };
    let join_key = {
        let from = before.find("  joinKey:").unwrap();
        pem_of(&before[from..], "    privateKey")
    };
    let etcd_server_leaf = {
        let from = before.find("    etcd-server:").unwrap();
        pem_of(&before[from..], "      certificate")
    };
    let cases = [
        (
            "a CA that is not PEM",
            edited(&before, &etcd_peer_ca, "        not a pem\n"),
            format!(
                "error: world.yaml: document {doc}: Cluster default/c1: field `spec.certificateAuthorities.etcdPeer.certificate`: invalid certificate: "
            ),
        ),
        (
            "a CA key of another CA",
            {
                let from = before.find("    etcdPeer:").unwrap();
                let peer_key = pem_of(&before[from..], "      privateKey");
                edited(&before, &api_client_key, &peer_key)
            },
            format!(
                "error: world.yaml: document {doc}: Cluster default/c1: field `spec.certificateAuthorities.apiServerClient.privateKey`: the private key is not the one of certificate \"c1-apiserver-client-ca\"\n"
            ),
        ),
        (
            "a join key xx",
            edited(&before, &join_key, "      xx\n"),
            format!(
                "error: world.yaml: document {doc}: Cluster default/c1: field `spec.joinKey.privateKey`: invalid private key of key pair: "
            ),
        ),
        (
            "a leaf that is garbage",
            edited(&before, &etcd_server_leaf, "          garbage\n"),
            "error: world.yaml: document ".to_string(),
        ),
    ];
    for (name, text, expected) in cases {
        fs::write(&world, &text).unwrap();
        let commands: [&[&str]; 3] = [
            &[
                "cluster",
                "inject",
                "--name",
                "c2",
                "-f",
                "world.yaml",
                "-o",
                "world.yaml",
            ],
            &[
                "reconcile",
                "--dry-run",
                "--image-repository",
                "localhost/oneinfra",
                "-f",
                "world.yaml",
            ],
            &[
                "reconcile",
                "--image-repository",
                "localhost/oneinfra",
                "-f",
                "world.yaml",
                "-o",
                "world.yaml",
            ],
        ];
        for args in commands {
            let out = run(dir.path(), args, Input::Bytes(b""));
            let err = stderr(&out);
            assert!(err.starts_with(&expected), "{name}, oi {args:?}:\n{err}");
            assert_eq!(err.lines().count(), 1, "{name}: one finding: {err}");
            assert_eq!(out.status.code(), Some(1), "{name}");
            unchanged(&world, &text);
        }
    }
    // The leaf names its component and field.
    let text = edited(&before, &etcd_server_leaf, "          garbage\n");
    fs::write(&world, &text).unwrap();
    let err = stderr(&run(
        dir.path(),
        &["cluster", "inject", "--name", "c2", "-f", "world.yaml"],
        Input::Bytes(b""),
    ));
    assert!(
        err.contains(": Component default/c1-control-plane-0: field `status.serverCertificates.etcd-server.certificate`: invalid certificate: "),
        "{err}"
    );
}

#[test]
fn hypervisor_inject_verifies_the_front_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let now = time::macros::datetime!(2026-11-22 00:00:00 UTC);
    let ca = oi_pki::CertificateAuthority::generate(
        "front-ca",
        oi_pki::KeyAlgorithm::EcdsaP256,
        now,
        time::Duration::days(365),
    )
    .unwrap();
    let issue = |cn: &str| {
        ca.issue(
            &oi_pki::LeafSpec::client(oi_pki::CaKind::ApiServerClient, cn, &[]),
            now,
            time::Duration::days(365),
        )
        .unwrap()
    };
    let client = issue("oi");
    let other = issue("other");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let ca_file = write("ca.crt", ca.certificate_pem());
    let leaf_as_ca = write("leaf.crt", &client.certificate_pem);
    let cert = write("client.crt", &client.certificate_pem);
    let key = write("client.key", &client.private_key_pem);
    let wrong_key = write("other.key", &other.private_key_pem);
    let inject = |ca: &str, key: &str| {
        run(
            dir.path(),
            &[
                "hypervisor",
                "inject",
                "-f",
                "/dev/null",
                "--name",
                "h1",
                "--remote-cri-endpoint",
                "tcp://10.0.0.1:27000",
                "--ca-certificate",
                ca,
                "--client-certificate",
                &cert,
                "--client-key",
                key,
                "--ip-address",
                "10.0.0.1",
            ],
            Input::Bytes(b""),
        )
    };
    assert!(inject(&ca_file, &key).status.success());
    fails(
        &inject(&leaf_as_ca, &key),
        "error: invalid Hypervisor h1: field `spec.remoteCRIEndpoint.caCertificate`: certificate \"oi\" is not a CA (no basicConstraints CA:TRUE)\n",
    );
    fails(
        &inject(&ca_file, &wrong_key),
        "error: invalid Hypervisor h1: field `spec.remoteCRIEndpoint.clientCertificate.privateKey`: the private key is not the one of certificate \"oi\"\n",
    );
}

#[test]
fn hostile_and_unbounded_input_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let timed = |args: &[&str]| {
        let started = Instant::now();
        let out = run(dir.path(), args, Input::Bytes(b""));
        println!("oi {args:?}: {:?}", started.elapsed());
        out
    };
    fails(
        &timed(&[
            "cluster",
            "inject",
            "--name",
            "c",
            "-f",
            "/dev/zero",
            "--max-input-size",
            "1MiB",
        ]),
        "error: /dev/zero holds more than 1048576 bytes of manifests (--max-input-size 1048576); raise the limit if it really is a world this large\n",
    );
    // The default limit stops it too.
    let out = timed(&["cluster", "inject", "--name", "c", "-f", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error: /dev/zero holds more than 268435456 bytes"));

    let nested = dir.path().join("nested.yaml");
    fs::write(
        &nested,
        format!("a: {}{}\n", "[".repeat(200_000), "]".repeat(200_000)),
    )
    .unwrap();
    fails(
        &timed(&["cluster", "inject", "--name", "c", "-f", "nested.yaml"]),
        "error: nested.yaml: document 1: collections nested deeper than 64 levels at line 1, column 259\n",
    );

    let out = timed(&[
        "reconcile",
        "--max-wait",
        "99999999999999999h",
        "-f",
        "/dev/null",
    ]);
    assert_eq!(out.status.code(), Some(2), "a usage error, not a panic");
    assert!(
        stderr(&out).contains("99999999999999999h is longer than the most allowed, 24h"),
        "{}",
        stderr(&out)
    );
    fails(
        &timed(&[
            "cluster",
            "inject",
            "--name",
            "c",
            "--control-plane-replicas",
            "1000",
            "-f",
            path_str(&hypervisors()),
        ]),
        "error: invalid Cluster default/c: field `spec.controlPlaneReplicas`: 1000 replicas; at most 7 (each runs an etcd member, and etcd clusters of more than 7 members only get slower)\n",
    );
}

#[test]
fn replicas_sharing_one_hypervisor_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let (_listener, hypervisors) = watched_hypervisor(dir.path());
    let out = oi(
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
    assert!(out.status.success());
    assert_eq!(
        stderr(&out),
        "warning: cluster default/c1 is not highly available: 3 of its 3 control plane replicas run on hypervisor private-1 (losing it loses etcd's quorum); give each replica a private hypervisor of its own\n"
    );
}

#[test]
fn a_dry_run_that_cannot_reach_a_hypervisor_fails_after_printing_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (listener, hypervisors) = watched_hypervisor(dir.path());
    drop(listener);
    let world = ok(
        &["cluster", "inject", "--name", "c1"],
        hypervisors.as_bytes(),
    );
    let out = run(
        dir.path(),
        &[
            "reconcile",
            "--dry-run",
            "--image-repository",
            "localhost/oneinfra",
        ],
        Input::Bytes(world.as_bytes()),
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: the dry run is incomplete: 2 hypervisors cannot be reached (private-1, public-1)\n"
    );
    assert!(
        stdout(&out).starts_with("hypervisor private-1: unreachable: "),
        "{}",
        stdout(&out)
    );
}
