#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn refusal(given: &Path) -> Refusal {
    match Target::resolve(Some(given)) {
        Err(Error::Refused { path, reason }) => {
            assert_eq!(path, given);
            reason
        }
        other => panic!("{given:?}: {other:?}"),
    }
}

use oi_testsupport::mknod;

#[test]
fn descriptors_by_their_spelling() {
    for stdout in ["-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"] {
        assert_eq!(
            Target::resolve(Some(Path::new(stdout))).unwrap(),
            Target::Stdout,
            "{stdout}"
        );
    }
    assert_eq!(Target::resolve(None).unwrap(), Target::Stdout);
    for stderr in ["/dev/stderr", "/dev/fd/2", "/proc/thread-self/fd/2"] {
        assert_eq!(
            Target::resolve(Some(Path::new(stderr))).unwrap(),
            Target::Stderr
        );
    }
    assert_eq!(refusal(Path::new("/dev/stdin")), Refusal::Stdin);
    assert_eq!(
        refusal(Path::new("/dev/fd/7")),
        Refusal::FileDescriptor { fd: "7".into() }
    );
}

#[test]
fn regular_and_new_files_are_replaced_atomically_with_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.yaml");
    fs::write(&out, "old").unwrap();
    fs::set_permissions(&out, fs::Permissions::from_mode(0o644)).unwrap();
    let target = Target::resolve(Some(&out)).unwrap();
    assert_eq!(target, Target::Replace { path: out.clone() });
    let guard = target
        .lock("pid 1: test", |_| panic!("nobody holds it"))
        .unwrap();
    assert_eq!(
        entries(dir.path()),
        [".out.yaml.lock", "out.yaml"],
        "the lock sits beside the file while held"
    );
    guard.write(b"new\n").unwrap();
    drop(guard);
    assert_eq!(fs::read_to_string(&out).unwrap(), "new\n");
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(entries(dir.path()), ["out.yaml"], "no temporary, no lock");

    let new = dir.path().join("new.yaml");
    let guard = Target::resolve(Some(&new))
        .unwrap()
        .lock("t", |_| {})
        .unwrap();
    guard.write(b"x").unwrap();
    assert_eq!(fs::read_to_string(&new).unwrap(), "x");
}

#[test]
fn a_symlink_is_followed_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.yaml");
    let link = dir.path().join("link.yaml");
    fs::write(&real, "old").unwrap();
    std::os::unix::fs::symlink("real.yaml", &link).unwrap();
    let target = Target::resolve(Some(&link)).unwrap();
    assert_eq!(
        target,
        Target::Replace {
            path: fs::canonicalize(&real).unwrap()
        }
    );
    target.lock("t", |_| {}).unwrap().write(b"new").unwrap();
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_link(&link).unwrap(), Path::new("real.yaml"));
    assert_eq!(fs::read_to_string(&real).unwrap(), "new");

    let dangling = dir.path().join("dangling.yaml");
    std::os::unix::fs::symlink("missing.yaml", &dangling).unwrap();
    assert_eq!(
        refusal(&dangling),
        Refusal::DanglingSymlink {
            target: PathBuf::from("missing.yaml")
        }
    );
    assert!(!dir.path().join("missing.yaml").exists());
}

#[test]
fn directories_sockets_block_devices_and_read_only_files_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(refusal(dir.path()), Refusal::Directory);

    let socket = dir.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    assert_eq!(refusal(&socket), Refusal::Socket);

    let block = dir.path().join("block");
    mknod(&block, rustix::fs::FileType::BlockDevice, (7, 200));
    assert_eq!(refusal(&block), Refusal::BlockDevice);
    assert!(fs::metadata(&block).unwrap().file_type().is_block_device());

    let read_only = dir.path().join("ro.yaml");
    fs::write(&read_only, "kept").unwrap();
    fs::set_permissions(&read_only, fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(refusal(&read_only), Refusal::ReadOnly { mode: 0o400 });
    assert_eq!(fs::read_to_string(&read_only).unwrap(), "kept");

    assert_eq!(
        refusal(&dir.path().join("missing/out.yaml")),
        Refusal::NoDirectory {
            dir: dir.path().join("missing")
        }
    );
}

#[test]
fn fifos_and_character_devices_are_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let null = dir.path().join("null");
    mknod(&null, rustix::fs::FileType::CharacterDevice, (1, 3));
    let target = Target::resolve(Some(&null)).unwrap();
    assert_eq!(target, Target::Through { path: null.clone() });
    target.lock("t", |_| {}).unwrap().write(b"gone").unwrap();
    assert!(fs::metadata(&null).unwrap().file_type().is_char_device());
    assert_eq!(entries(dir.path()), ["null"]);

    let fifo = dir.path().join("fifo");
    mknod(&fifo, rustix::fs::FileType::Fifo, (0, 0));
    let target = Target::resolve(Some(&fifo)).unwrap();
    assert_eq!(target, Target::Through { path: fifo.clone() });
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
    target.lock("t", |_| {}).unwrap().write(b"through").unwrap();
    assert_eq!(reader.join().unwrap(), "through");
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn an_output_that_is_an_input_is_refused_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("world.yaml");
    let other = dir.path().join("other.yaml");
    fs::write(&world, "w").unwrap();
    fs::write(&other, "o").unwrap();
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(&world, &link).unwrap();
    let inputs = vec![("world.yaml".to_string(), file_id(&world).unwrap())];
    let target = Target::resolve(Some(&link)).unwrap();
    match target.refuse_if_input(&link, &inputs) {
        Err(Error::Refused {
            reason: Refusal::IsAnInput { input },
            ..
        }) => assert_eq!(input, "world.yaml"),
        other => panic!("{other:?}"),
    }
    let other_target = Target::resolve(Some(&other)).unwrap();
    other_target.refuse_if_input(&other, &inputs).unwrap();
    Target::Stdout.refuse_if_input(&other, &inputs).unwrap();
}

#[test]
fn a_file_changed_by_another_writer_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("world.yaml");
    fs::write(&world, "before").unwrap();
    let guard = Target::resolve(Some(&world))
        .unwrap()
        .lock("t", |_| {})
        .unwrap();
    fs::write(&world, "edited meanwhile").unwrap();
    match guard.write(b"ours") {
        Err(Error::Changed { path, kept }) => {
            assert_eq!(path, world);
            assert_eq!(kept, dir.path().join("world.yaml.conflict"));
            assert_eq!(fs::read_to_string(&kept).unwrap(), "ours");
            assert_eq!(
                fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read_to_string(&world).unwrap(), "edited meanwhile");
}

#[test]
fn a_second_locker_waits_for_the_first_and_is_told_who_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("world.yaml");
    let first = Target::resolve(Some(&world))
        .unwrap()
        .lock("pid 1: oi reconcile", |_| panic!("free"))
        .unwrap();
    let (told_tx, told_rx) = mpsc::channel();
    let (got_tx, got_rx) = mpsc::channel();
    let second = {
        let world = world.clone();
        std::thread::spawn(move || {
            let guard = Target::resolve(Some(&world))
                .unwrap()
                .lock("pid 2: oi cluster inject", |holder| {
                    told_tx.send(holder.to_string()).unwrap();
                })
                .unwrap();
            got_tx.send(()).unwrap();
            guard.write(b"second").unwrap();
        })
    };
    assert_eq!(
        told_rx.recv_timeout(Duration::from_secs(30)).unwrap(),
        "pid 1: oi reconcile"
    );
    // It is waiting: it has not got the lock while the first holds it.
    assert!(got_rx.try_recv().is_err());
    first.write(b"first").unwrap();
    drop(first);
    got_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    second.join().unwrap();
    assert_eq!(fs::read_to_string(&world).unwrap(), "second");
    assert_eq!(entries(dir.path()), ["world.yaml"]);
}

#[test]
fn inputs_are_bounded_and_text() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    fs::write(&big, "a: 1\n".repeat(100)).unwrap();
    let too_large = |e: Error| match e {
        Error::TooLarge { name, limit } => (name, limit),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        too_large(read_sources(&[&big], io::empty(), 499).unwrap_err()),
        (big.display().to_string(), 499)
    );
    assert_eq!(
        read_sources(&[&big], io::empty(), 500).unwrap()[0]
            .text
            .len(),
        500
    );
    // A device says no size: the bounded read stops it.
    assert_eq!(
        too_large(read_sources(&["/dev/zero"], io::empty(), 1 << 20).unwrap_err()),
        ("/dev/zero".to_string(), 1 << 20)
    );
    let files: [&str; 0] = [];
    assert_eq!(
        too_large(read_sources(&files, "x".repeat(11).as_bytes(), 10).unwrap_err()),
        ("stdin".to_string(), 10)
    );
    match read_sources(&files, &b"ok\xff"[..], 10).unwrap_err() {
        Error::NotUtf8 { name, offset } => assert_eq!((name.as_str(), offset), ("stdin", 2)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        read_sources(&["-", "-"], io::empty(), 10).unwrap_err(),
        Error::StdinTwice
    ));
    assert!(matches!(
        read_sources(&[dir.path()], io::empty(), 10).unwrap_err(),
        Error::Read { .. }
    ));
    let sources =
        read_sources(&[big.as_path(), Path::new("-")], "b: 2\n".as_bytes(), 1000).unwrap();
    assert_eq!(
        sources[1],
        Source {
            name: "stdin".into(),
            text: "b: 2\n".into()
        }
    );
}

#[test]
fn sizes() {
    assert_eq!(parse_size("256MiB"), Ok(256 << 20));
    assert_eq!(parse_size("1G"), Ok(1 << 30));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("0").is_err());
    assert!(parse_size("lots").is_err());
    assert!(parse_size("5TiB").is_err());
    assert!(parse_size("99999999999999999999GiB").is_err());
    assert!(parse_size("18446744073709551615GiB").is_err());
}

#[test]
fn durations() {
    use std::time::Duration;
    assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
    assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(
        parse_duration("soon"),
        Err("expected a duration like 60s or 2m, got \"soon\"".to_string())
    );
    assert_eq!(
        parse_duration("5d"),
        Err("unknown unit \"d\" (use ms, s, m or h)".to_string())
    );
    let too_long = |s: &str| Err(format!("{s} is longer than the most allowed, 24h"));
    assert_eq!(parse_duration("25h"), too_long("25h"));
    assert_eq!(
        parse_duration("99999999999999999h"),
        too_long("99999999999999999h")
    );
    assert_eq!(
        parse_duration("99999999999999999999999"),
        too_long("99999999999999999999999")
    );
}
