//! What the tests that run the built `oi` share: running it, reading its output, the
//! fixtures. Included by each test file with `#[path]` (files under `tests/support/` are not
//! test targets of their own).

// Each test file uses some of these helpers only.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use oi_api::World;
use pretty_assertions::assert_eq;

/// The fixed clock of every test run.
pub const NOW: &str = "2026-11-22T00:00:00Z";

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn hypervisors() -> PathBuf {
    fixture("hypervisors.yaml")
}

/// Runs `oi` with `args` (plus `--now`), feeding `stdin`.
pub fn oi(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(args)
        .args(["--now", NOW])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that fails early may not read its input: a broken pipe here is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// Runs `oi` and expects success with nothing on stderr; returns stdout.
pub fn ok(args: &[&str], stdin: &[u8]) -> String {
    let out = oi(args, stdin);
    assert_eq!(stderr(&out), "", "oi {args:?} wrote to stderr");
    assert!(out.status.success(), "oi {args:?}: {:?}", out.status);
    stdout(&out)
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A world of the fixture hypervisors with one cluster injected.
pub fn injected(name: &str, replicas: u32) -> String {
    ok(
        &[
            "cluster",
            "inject",
            "--name",
            name,
            "--control-plane-replicas",
            &replicas.to_string(),
            "-f",
            path_str(&hypervisors()),
        ],
        b"",
    )
}

pub fn load(text: &str) -> World {
    World::load(text, "test output").unwrap()
}

/// A pseudo-terminal: the master stays open while the child runs (a test may write what a
/// user types to it, and read what the terminal shows).
pub struct Pty {
    pub master: std::os::fd::OwnedFd,
    pub slave: PathBuf,
}

pub fn pty() -> Pty {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    Pty {
        master,
        slave: PathBuf::from(name.to_str().unwrap()),
    }
}
