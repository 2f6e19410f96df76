//! CA rotation without downtime, for real: the API server CA of a 3-replica cluster rotated
//! while a client calls the API every 100 ms with a kubeconfig of the old CA (no failed call
//! until the last phase, then it is refused and a new kubeconfig works; etcd keeps 3 voting
//! members throughout); then every CA and the service-account key at once.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oi_e2e::{
    ApiCaller, Etcdctl, LocalSet, World, admin_kubeconfig, binary, eventually, kubectl, oi,
    prerequisites, reconcile, reconcile_until_ready, str_at,
};

/// `oi cluster rotate-ca ARGS` over `world`, its stderr lines timed as they come.
fn rotate_timed(world: &str, args: &[&str]) -> (bool, String, Vec<(Instant, String)>) {
    let mut child = Command::new(binary("oi").unwrap())
        .args(["cluster", "rotate-ca"])
        .args(args)
        .env("OI_IMAGE_REPOSITORY", "localhost/oneinfra")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = world.to_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let stderr = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .map(|l| (Instant::now(), l))
            .collect::<Vec<_>>()
    });
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let status = child.wait().unwrap();
    writer.join().unwrap();
    (status.success(), stdout, lines.join().unwrap())
}

/// Polls etcd's membership every 200 ms until stopped; records each answer's voting count.
struct MemberWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Result<usize, String>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MemberWatch {
    fn start(etcdctl: Etcdctl) -> MemberWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, v) = (Arc::clone(&stop), Arc::clone(&seen));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let answer = etcdctl
                    .started_members()
                    .map(|m| m.iter().filter(|(_, learner)| !learner).count())
                    .map_err(|e| e.to_string());
                v.lock().unwrap().push(answer);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        MemberWatch {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<Result<usize, String>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for MemberWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn service_account_key(world: &str) -> String {
    let parsed = World::parse(world).unwrap();
    str_at(
        parsed.require_cluster("c1").unwrap(),
        &["spec", "apiServer", "serviceAccount", "publicKey"],
    )
    .unwrap()
    .to_string()
}

#[test]
fn cas_rotate_with_the_api_up_until_the_last_phase() {
    let test = "cas_rotate_with_the_api_up_until_the_last_phase";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("rot", 3, 1, false).unwrap();
    let injected = oi_e2e::inject_cluster(&set.manifests, "c1", 3).unwrap();
    let (run, _, _) = reconcile_until_ready(&injected, 3).unwrap();
    let world = run.stdout;
    let parsed = World::parse(&world).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let old = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    let old_kept = dir.path().join("old.kubeconfig");
    std::fs::copy(&old, &old_kept).unwrap();
    kubectl(&old_kept, &["get", "--raw", "/readyz"])
        .unwrap()
        .ok("the old kubeconfig before")
        .unwrap();

    // The API server CA, a client of the old one calling all along, etcd watched.
    let members = MemberWatch::start(Etcdctl::new(&parsed, "c1").unwrap());
    let caller = ApiCaller::start(&old_kept);
    caller.wait_for(3, Duration::from_secs(30)).unwrap();
    let (ok, rotated, lines) = rotate_timed(&world, &["--ca", "apiServer"]);
    let ended = Instant::now();
    caller
        .wait_for(caller.made() + 3, Duration::from_secs(60))
        .unwrap();
    let calls = caller.finish_timed();
    let seen = members.finish();
    let text: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    eprintln!("{}", text.join("\n"));
    assert!(ok, "rotate-ca failed");
    let last = lines
        .iter()
        .find(|(_, l)| l.contains("phase 3 of 3, the last:"))
        .map(|(at, _)| *at)
        .expect("the last phase is named before it runs");
    assert!(
        text.iter().any(|l| l.contains(
            "kubeconfigs and workers that trust only the old API server CA stop working"
        )),
        "{text:?}"
    );
    let before: Vec<&(Instant, Option<String>)> =
        calls.iter().filter(|(at, _)| *at < last).collect();
    let failed: Vec<&String> = before.iter().filter_map(|(_, e)| e.as_ref()).collect();
    eprintln!(
        "{} calls before the last phase, {} failed; {} after",
        before.len(),
        failed.len(),
        calls.len() - before.len()
    );
    assert!(before.len() >= 10, "only {} calls", before.len());
    assert!(
        failed.is_empty(),
        "calls failed before the last phase: {failed:#?}"
    );
    let after_end: Vec<&(Instant, Option<String>)> =
        calls.iter().filter(|(at, _)| *at > ended).collect();
    assert!(
        after_end.iter().all(|(_, e)| e.is_some()),
        "the old kubeconfig still works after the rotation: {after_end:?}"
    );
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|s| s.as_ref().is_ok_and(|n| *n == 3)),
        "etcd did not keep 3 voting members: {seen:?}"
    );
    // The old kubeconfig is refused; a new one works.
    let refused = kubectl(
        &old_kept,
        &["--request-timeout=5s", "get", "--raw", "/readyz"],
    )
    .unwrap();
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("certificate") || refused.stderr.contains("x509"),
        "{}",
        refused.stderr
    );
    let parsed = World::parse(&rotated).unwrap();
    assert!(
        str_at(
            parsed.require_cluster("c1").unwrap(),
            &["status", "caRotation", "phase"]
        )
        .is_none(),
        "the rotation is over"
    );
    let new = dir.path().join("second.kubeconfig");
    std::fs::copy(admin_kubeconfig(&parsed, "c1", dir.path()).unwrap(), &new).unwrap();
    eventually(Duration::from_secs(10), || {
        kubectl(&new, &["--request-timeout=5s", "get", "--raw", "/readyz"])?.ok("new kubeconfig")
    })
    .unwrap();
    // Converged: nothing more to do.
    let again = reconcile(&rotated, &[])
        .unwrap()
        .ok("reconcile after")
        .unwrap();
    assert_eq!(
        again.summary().unwrap().mutating_cri_calls,
        0,
        "{}",
        again.stderr
    );

    // Every CA and the service-account key at once.
    let sa_before = service_account_key(&rotated);
    let all = oi(&["cluster", "rotate-ca"], &rotated)
        .unwrap()
        .ok("oi cluster rotate-ca (all)")
        .unwrap();
    assert!(
        all.stderr
            .contains("rotating spec.apiServer.ca, spec.certificateAuthorities.apiServerClient")
            && all.stderr.contains("spec.apiServer.serviceAccount")
            && all
                .stderr
                .contains("oi: cluster default/c1: CA rotation done"),
        "{}",
        all.stderr
    );
    assert_ne!(service_account_key(&all.stdout), sa_before);
    let parsed = World::parse(&all.stdout).unwrap();
    let newest = admin_kubeconfig(&parsed, "c1", dir.path()).unwrap();
    eventually(Duration::from_secs(10), || {
        kubectl(
            &newest,
            &["--request-timeout=5s", "get", "--raw", "/readyz"],
        )?
        .ok("newest")
    })
    .unwrap();
    // The kubeconfig of the first rotation trusts the API server CA it replaced, and holds
    // a certificate of the client CA that was replaced: refused.
    assert!(
        !kubectl(&new, &["--request-timeout=5s", "get", "--raw", "/readyz"])
            .unwrap()
            .success
    );
    Etcdctl::new(&parsed, "c1")
        .unwrap()
        .wait_voting_members(3, Duration::from_secs(30))
        .unwrap();
}
