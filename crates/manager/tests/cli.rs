//! The built `oi-manager` binary, run as a user (or the Deployment) runs it: real processes,
//! real HTTP on loopback, exit codes and whole messages checked.
//!
//! `run` is exercised against the API server stand-in (`oi_manager_testsupport::apiserver_standin`) on
//! 127.0.0.1, since no management cluster can run on these machines: lists and watches of the
//! oneinfra kinds, Leases with the API server's create/replace semantics (resourceVersion
//! checked), Events. The whole reconcile of a Cluster by the binary is e2e's
//! `manager_binary.rs`; here are the edges: leading, standing by, losing the Lease, signals,
//! missing CRDs, an unreachable server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use oi_api::Hypervisor;
use oi_manager_testsupport::apiserver_standin::{ApiServer, StandinOptions};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_oi-manager");

fn oi_manager() -> std::process::Command {
    let mut command = std::process::Command::new(BIN);
    // The test process's environment must not change the outcome.
    for var in [
        "KUBECONFIG",
        "POD_NAMESPACE",
        "POD_NAME",
        "OI_IMAGE_REPOSITORY",
        "RUST_LOG",
    ] {
        command.env_remove(var);
    }
    command
}

#[test]
fn crds_prints_every_crd() {
    let out = oi_manager().arg("crds").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stderr, b"");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout, oi_api::crd::crds_yaml().unwrap());
    let printed: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&stdout)
        .map(|doc| {
            serde_json::to_value(
                <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).unwrap(),
            )
            .unwrap()
        })
        .collect();
    let generated: Vec<Value> = oi_api::Kind::ALL
        .into_iter()
        .filter_map(oi_api::crd::custom_resource_definition)
        .collect();
    assert_eq!(printed, generated);
}

#[test]
fn version_prints_the_version() {
    let out = oi_manager().arg("version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("oi-manager {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn a_bad_flag_is_a_usage_error() {
    let out = oi_manager().args(["run", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(out.stdout, b"");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        "error: unexpected argument '--bogus' found\n\n\
         Usage: oi-manager run [OPTIONS]\n\n\
         For more information, try '--help'.\n"
    );

    let out = oi_manager()
        .args(["run", "--max-wait", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with(
            "error: invalid value 'soon' for '--max-wait <DURATION>': expected a duration like \
             60s or 2m, got \"soon\"\n"
        ),
        "{stderr}"
    );

    let out = oi_manager().output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn inconsistent_flags_fail_before_connecting() {
    let out = oi_manager()
        .args(["run", "--backoff-min", "10s", "--backoff-max", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: --backoff-min (10s) must not be longer than --backoff-max (1s)\n"
    );
}

#[test]
fn a_missing_kubeconfig_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.kubeconfig");
    let (metrics, probes) = (
        oi_testsupport::free_loopback_port(),
        oi_testsupport::free_loopback_port(),
    );
    let out = oi_manager()
        .args(["run", "--kubeconfig"])
        .arg(&missing)
        .args(local_listeners(metrics, probes))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.lines().last().unwrap(),
        format!(
            "error: cannot read the kubeconfig {0}: failed to read kubeconfig from '\"{0}\"': \
             No such file or directory (os error 2)",
            missing.display()
        ),
        "{stderr}"
    );
}

fn local_listeners(metrics: u16, probes: u16) -> Vec<String> {
    vec![
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        format!("--health-probe-bind-address=127.0.0.1:{probes}"),
    ]
}

fn write_kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: management\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n\
             users:\n\
             - name: admin\n  user:\n    token: not-a-secret\n\
             contexts:\n\
             - name: management\n  context:\n    cluster: management\n    user: admin\n\
             current-context: management\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn an_unreachable_api_server_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let port = oi_testsupport::free_loopback_port();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("https://127.0.0.1:{port}"));
    let started = Instant::now();
    let out = oi_manager()
        .args(["run", "--leader-elect=false", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(local_listeners(
            oi_testsupport::free_loopback_port(),
            oi_testsupport::free_loopback_port(),
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let last = stderr.lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "error: cannot reach the API server at https://127.0.0.1:{port}/: "
        )),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a refused connection fails at once"
    );
}

// ---------------------------------------------------------------------------------------
// Against the API server stand-in
// ---------------------------------------------------------------------------------------

const KINDS: [(&str, &str); 3] = [
    ("cluster.oneinfra.ereslibre.es", "clusters"),
    ("cluster.oneinfra.ereslibre.es", "components"),
    ("infra.oneinfra.ereslibre.es", "hypervisors"),
];

fn start_api(crds: bool) -> ApiServer {
    ApiServer::start(StandinOptions {
        crds,
        ..StandinOptions::default()
    })
    .unwrap()
}

/// The Lease writes (`POST` creates, `PUT` replaces), in order.
fn lease_writes(server: &ApiServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET ") && r.contains("/leases"))
        .collect()
}

/// `GET path` on loopback: status and body, or `None` while nothing listens.
async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// Polls until `check` holds, or panics with `what` after 30 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Manager {
    child: tokio::process::Child,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
    metrics: u16,
    probes: u16,
}

impl Manager {
    fn start(server: &ApiServer, extra: &[&str]) -> Manager {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = server.write_kubeconfig(dir.path()).unwrap();
        let stderr = dir.path().join("stderr");
        let (metrics, probes) = (
            oi_testsupport::free_loopback_port(),
            oi_testsupport::free_loopback_port(),
        );
        let child = tokio::process::Command::from({
            let mut c = oi_manager();
            c.arg("run")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(local_listeners(metrics, probes))
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr).unwrap());
            c
        })
        .kill_on_drop(true)
        .spawn()
        .unwrap();
        Manager {
            child,
            stderr,
            _dir: dir,
            metrics,
            probes,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap()
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().unwrap();
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    async fn exit(&mut self, within: Duration) -> ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!("oi-manager did not exit within {within:?}:\n{}", self.log()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_crds_are_named_with_the_fix() {
    let server = start_api(false);
    let api = server.address;
    let mut manager = Manager::start(&server, &["--leader-elect=false"]);
    let status = manager.exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(1));
    let log = manager.log();
    assert_eq!(
        log.lines().last().unwrap(),
        format!(
            "error: the API server at https://{api}/ does not serve Clusters: install the \
             CustomResourceDefinitions (`oi-manager crds | kubectl apply -f -`, or \
             `kubectl apply -k config`)"
        ),
        "{log}"
    );
}

const LEASE_FLAGS: [&str; 10] = [
    "--leader-election-namespace=ops",
    "--leader-election-id=oi-lease",
    "--leader-election-identity=pod-a",
    "--leader-election-lease-duration=3s",
    "--leader-election-renew-deadline=2s",
    "--leader-election-retry-period=200ms",
    "--log=info",
    "--shutdown-timeout=5s",
    "--max-wait=1s",
    "--concurrency=2",
];

/// Leads, reports it, watches the three kinds, and waits to be told to stop.
async fn lead(server: &ApiServer, manager: &Manager) {
    eventually("the Lease to be created", || async {
        server.lease("ops", "oi-lease").is_some()
    })
    .await;
    let lease = server.lease("ops", "oi-lease").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 3);
    eventually("oi_manager_leader 1 on /metrics", || async {
        get(manager.metrics, "/metrics")
            .await
            .is_some_and(|(code, body)| code == 200 && body.contains("\noi_manager_leader 1\n"))
    })
    .await;
    eventually("the three watches", || async {
        let requests = server.requests();
        KINDS.iter().all(|(group, plural)| {
            requests.iter().any(|r| {
                r.starts_with(&format!("GET /apis/{group}/v1alpha1/{plural}?"))
                    && r.contains("watch=true")
            })
        })
    })
    .await;
    eventually("/readyz 200 once the watches synced", || async {
        get(manager.probes, "/readyz").await == Some((200, "ok\n".to_string()))
    })
    .await;
    assert_eq!(
        get(manager.probes, "/healthz").await,
        Some((200, "ok\n".to_string()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_leads_then_releases_the_lease_on_sigterm() {
    let server = start_api(true);
    let mut manager = Manager::start(&server, &LEASE_FLAGS);
    lead(&server, &manager).await;
    // Renewals go on while leading.
    let writes = lease_writes(&server).len();
    eventually("a renewal", || async {
        lease_writes(&server).len() > writes
    })
    .await;

    manager.signal("-TERM");
    let status = manager.exit(Duration::from_secs(15)).await;
    let log = manager.log();
    assert_eq!(status.code(), Some(0), "{log}");
    // Released: no holder, so another replica takes over at once.
    let lease = server.lease("ops", "oi-lease").unwrap();
    assert!(lease["spec"].get("holderIdentity").is_none(), "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
    let writes = lease_writes(&server);
    assert!(
        writes[0].starts_with("POST /apis/coordination.k8s.io/v1/namespaces/ops/leases?"),
        "{writes:?}"
    );
    assert!(
        writes[1..]
            .iter()
            .all(|w| w
                .starts_with("PUT /apis/coordination.k8s.io/v1/namespaces/ops/leases/oi-lease?")),
        "{writes:?}"
    );
    // A quiet cluster: nothing was reconciled, so nothing but Leases was written.
    let writes: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET "))
        .filter(|r| !r.contains("/leases"))
        .collect();
    assert_eq!(writes, Vec::<String>::new());
    assert!(log.contains("released the leader Lease"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_exits_non_zero() {
    let server = start_api(true);
    let mut manager = Manager::start(&server, &LEASE_FLAGS);
    lead(&server, &manager).await;

    // Another replica took the Lease (as after this one failed to renew in time).
    server.put_lease("ops", "oi-lease", "pod-b", 3600);
    let status = manager.exit(Duration::from_secs(15)).await;
    let log = manager.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert_eq!(
        log.lines().last().unwrap(),
        "error: lost leadership of Lease ops/oi-lease: exiting, so that this replica restarts \
         as a candidate",
        "{log}"
    );
    // The other replica's Lease is left alone.
    assert_eq!(
        server.lease_holder("ops", "oi-lease").as_deref(),
        Some("pod-b")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_replica_is_ready_and_stops_on_sigterm() {
    let server = start_api(true);
    // Another replica holds the Lease.
    server.put_lease("ops", "oi-lease", "pod-b", 3600);
    let writes = lease_writes(&server);
    let mut manager = Manager::start(&server, &LEASE_FLAGS);
    eventually("/readyz 200 on the standby", || async {
        get(manager.probes, "/readyz").await == Some((200, "ok\n".to_string()))
    })
    .await;
    eventually("a few attempts at the Lease", || async {
        server
            .requests()
            .iter()
            .filter(|r| {
                let lease = "GET /apis/coordination.k8s.io/v1/namespaces/ops/leases/oi-lease";
                *r == lease || r.starts_with(&format!("{lease}?"))
            })
            .count()
            >= 3
    })
    .await;
    let metrics = get(manager.metrics, "/metrics").await.unwrap();
    assert!(
        metrics.1.contains("\noi_manager_leader 0\n"),
        "{}",
        metrics.1
    );
    // No controller runs: no watch was opened.
    assert!(
        !server.requests().iter().any(|r| r.contains("watch=true")),
        "{:?}",
        server.requests()
    );
    manager.signal("-TERM");
    let status = manager.exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "{}", manager.log());
    assert_eq!(
        server.lease_holder("ops", "oi-lease").as_deref(),
        Some("pod-b")
    );
    assert_eq!(lease_writes(&server), writes, "the standby wrote no Lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_reconciles_what_it_watches() {
    let server = start_api(true);
    // A hypervisor whose CRI socket does not exist: the Hypervisor controller probes it,
    // finds it unreachable, says so in the metrics and in an Event.
    let h1: Hypervisor = serde_json::from_value(json!({
        "apiVersion": "infra.oneinfra.ereslibre.es/v1alpha1", "kind": "Hypervisor",
        "metadata": {"name": "h1"},
        "spec": {
            "public": false, "ipAddress": "192.0.2.10",
            "portRange": {"low": 30000, "high": 30099},
            "localCRIEndpoint": {"criEndpointPath": "/nonexistent/oi-test/containerd.sock"},
        },
    }))
    .unwrap();
    let uid = server.create(&h1).unwrap().metadata.uid.unwrap();
    let mut manager = Manager::start(&server, &LEASE_FLAGS);
    lead(&server, &manager).await;
    eventually("the hypervisor reconciled", || async {
        get(manager.metrics, "/metrics")
            .await
            .is_some_and(|(_, body)| {
                body.contains("\noi_manager_reconciles_total{controller=\"hypervisor\"} 1\n")
                    && body.contains("\noi_manager_hypervisor_reachable{hypervisor=\"h1\"} 0\n")
            })
    })
    .await;
    eventually("the HypervisorUnreachable event", || async {
        !server.events().is_empty()
    })
    .await;
    let event = server.events()[0].clone();
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["reason"], "HypervisorUnreachable", "{event}");
    assert_eq!(
        event["reportingController"],
        "oneinfra.ereslibre.es/oi-manager"
    );
    assert_eq!(event["reportingInstance"], "pod-a");
    assert_eq!(event["regarding"]["kind"], "Hypervisor");
    assert_eq!(event["regarding"]["name"], "h1");
    assert_eq!(event["regarding"]["uid"], uid.as_str());
    // The probe failing is no reconcile error.
    let (_, metrics) = get(manager.metrics, "/metrics").await.unwrap();
    assert!(
        !metrics.contains("oi_manager_reconcile_errors_total{"),
        "{metrics}"
    );

    manager.signal("-TERM");
    let status = manager.exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "{}", manager.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leader_election_it_leads_at_once_in_its_namespace() {
    let server = start_api(true);
    let mut manager = Manager::start(&server, &["--leader-elect=false", "--namespace=tenants"]);
    eventually("/readyz 200 and oi_manager_leader 1", || async {
        get(manager.probes, "/readyz").await == Some((200, "ok\n".to_string()))
            && get(manager.metrics, "/metrics")
                .await
                .is_some_and(|(_, body)| body.contains("\noi_manager_leader 1\n"))
    })
    .await;
    eventually("the watches", || async {
        server
            .requests()
            .iter()
            .filter(|r| r.contains("watch=true"))
            .count()
            >= 4
    })
    .await;
    let requests = server.requests();
    // Secrets are watched in the manager's namespace alone, and only those holding keys.
    let secrets_watch = requests
        .iter()
        .find(|r| r.contains("watch=true") && r.contains("/secrets"))
        .unwrap();
    assert!(
        secrets_watch.contains("labelSelector=oneinfra.ereslibre.es%2Fprivate-keys-of-kind")
            || secrets_watch.contains("labelSelector=oneinfra.ereslibre.es/private-keys-of-kind"),
        "{secrets_watch}"
    );
    let watched: std::collections::BTreeSet<&str> = requests
        .iter()
        .filter(|r| r.contains("watch=true"))
        .map(|r| r.split('?').next().unwrap())
        .collect();
    assert_eq!(
        watched,
        std::collections::BTreeSet::from([
            "GET /api/v1/namespaces/tenants/secrets",
            "GET /apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/tenants/clusters",
            "GET /apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/tenants/components",
            // Hypervisors are cluster scoped.
            "GET /apis/infra.oneinfra.ereslibre.es/v1alpha1/hypervisors",
        ])
    );
    assert!(
        !requests.iter().any(|r| r.contains("/leases")),
        "{requests:?}"
    );
    manager.signal("-INT");
    let status = manager.exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "{}", manager.log());
}

/// The book's reference of `oi-manager` is its `--help` of every command, so it cannot drift.
#[test]
fn the_books_cli_reference_is_the_help_of_every_command() {
    use clap::CommandFactory as _;
    let page = oi_testsupport::reference::cli_markdown(
        oi_manager::args::Cli::command(),
        "`oi-manager` runs the controllers over custom resources on a management cluster.",
    );
    oi_testsupport::assert_golden(
        &oi_testsupport::workspace_root().join("docs/src/reference/oi-manager.md"),
        &page,
        "cargo nextest run -p oi-manager the_books_cli_reference",
    );
}
