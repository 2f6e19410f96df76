//! Real `kubectl` as a test's client: each instance has its own kubeconfig (0600) and
//! discovery cache; every run is bounded; a `kubectl get -w` is a child killed on drop.

#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one kubectl invocation may take.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Whether kubectl can be run; says so loudly when not (and fails under OI_REQUIRE_REAL).
pub fn available(test: &str) -> bool {
    oi_testsupport::require(
        test,
        "command `kubectl` on PATH",
        oi_testsupport::have_command("kubectl"),
    )
}

pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Kubectl {
    /// A kubectl using `kubeconfig` (written to `dir/<name>.kubeconfig`).
    pub fn new(dir: &Path, name: &str, kubeconfig: &str) -> Kubectl {
        let path = dir.join(format!("{name}.kubeconfig"));
        oi_kube_standin::local::write_private(&path, kubeconfig).unwrap();
        let cache = dir.join(format!("{name}.cache"));
        std::fs::create_dir_all(&cache).unwrap();
        Kubectl {
            kubeconfig: path,
            cache,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache.display()))
            .args(args)
            .env("HOME", &self.cache)
            .env_remove("KUBECONFIG");
        command
    }

    /// Runs kubectl with `stdin`, killing it after [`RUN_LIMIT`].
    pub fn run_with(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        {
            use std::io::Write as _;
            let mut input = child.stdin.take().unwrap();
            input.write_all(stdin.as_bytes()).unwrap();
        }
        let deadline = Instant::now() + RUN_LIMIT;
        loop {
            if child.try_wait().unwrap().is_some() {
                return child.wait_with_output().unwrap();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let output = child.wait_with_output().unwrap();
                panic!(
                    "kubectl {args:?} took longer than {RUN_LIMIT:?}: {}",
                    text(&output.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, "")
    }

    /// Runs kubectl, expecting success; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Runs kubectl with `stdin`, expecting success; its stdout.
    pub fn ok_with(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run_with(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Runs kubectl, expecting failure; its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded: {}",
            text(&out.stdout)
        );
        text(&out.stderr)
    }

    /// A `kubectl ... -w` (or any long-running kubectl) whose output lines are collected.
    pub fn watch(&self, args: &[&str]) -> Watch {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let collected = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                collected.lock().unwrap().push(line);
            }
        });
        Watch { child, lines }
    }
}

pub struct Watch {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (bounded) until a line satisfies `check`.
    pub fn until(&self, what: &str, check: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.lines().iter().any(|l| check(l)) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; output so far: {:?}",
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it holds, for at most 30 s.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
