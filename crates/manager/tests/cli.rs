//! The built `oi-manager` binary, run as a user (or the Deployment) runs it: real processes,
//! real HTTP on loopback, exit codes and whole messages checked.
//!
//! `run` is exercised against a fake API server on 127.0.0.1 (no management cluster can run
//! on these machines): it answers `/version`, lists and watches of the three kinds (empty,
//! watches held open) and a Lease with the API server's create/replace semantics
//! (resourceVersion checked), which is all the manager asks of a quiet cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

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
    let printed: Vec<Value> = serde_yaml::Deserializer::from_str(&stdout)
        .map(|doc| {
            serde_json::to_value(
                <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap(),
            )
            .unwrap()
        })
        .collect();
    let generated: Vec<Value> = oi_api::Kind::ALL
        .into_iter()
        .map(oi_api::crd::custom_resource_definition)
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
    let (metrics, probes) = (free_port(), free_port());
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

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let port = free_port();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("https://127.0.0.1:{port}"));
    let started = Instant::now();
    let out = oi_manager()
        .args(["run", "--leader-elect=false", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(local_listeners(free_port(), free_port()))
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
// A fake API server
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Fake {
    /// Whether the CRDs are installed (lists of the three kinds answer).
    crds: bool,
    /// `(namespace, name) -> Lease`.
    leases: Mutex<BTreeMap<(String, String), Value>>,
    /// Every request: `METHOD path?query`.
    requests: Mutex<Vec<String>>,
    /// Objects of the three kinds: `(plural, namespace, name) -> object` (namespace empty
    /// for Hypervisors).
    objects: Mutex<BTreeMap<(String, String, String), Value>>,
    /// Events posted (events.k8s.io/v1).
    events: Mutex<Vec<Value>>,
    /// The bodies of Lease writes, in order.
    lease_writes: Mutex<Vec<(String, Value)>>,
    revision: Mutex<u64>,
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    json_response(
        StatusCode::from_u16(code).unwrap(),
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        }),
    )
}

const KINDS: [(&str, &str, &str); 3] = [
    ("cluster.oneinfra.ereslibre.es", "clusters", "Cluster"),
    ("cluster.oneinfra.ereslibre.es", "components", "Component"),
    ("infra.oneinfra.ereslibre.es", "hypervisors", "Hypervisor"),
];

impl Fake {
    fn next_revision(&self) -> String {
        let mut r = self.revision.lock().unwrap();
        *r += 1;
        r.to_string()
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.leases
            .lock()
            .unwrap()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Another replica takes the Lease (as after this one failed to renew in time).
    fn steal(&self, namespace: &str, name: &str, holder: &str) {
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let revision = self.next_revision();
        let mut leases = self.leases.lock().unwrap();
        let lease = leases
            .get_mut(&(namespace.to_string(), name.to_string()))
            .unwrap();
        lease["spec"]["holderIdentity"] = json!(holder);
        lease["spec"]["renewTime"] = json!(now);
        lease["spec"]["leaseDurationSeconds"] = json!(3600);
        lease["metadata"]["resourceVersion"] = json!(revision);
    }

    async fn answer(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        self.requests
            .lock()
            .unwrap()
            .push(format!("{method} {path}?{query}"));
        let body: Value = {
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            }
        };
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        if path == "/version" {
            return json_response(
                StatusCode::OK,
                &json!({
                    "major": "1", "minor": "33", "gitVersion": "v1.33.0", "gitCommit": "fake",
                    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64",
                }),
            );
        }
        if let [
            "apis",
            "coordination.k8s.io",
            "v1",
            "namespaces",
            ns,
            "leases",
            rest @ ..,
        ] = segments.as_slice()
        {
            return self.lease_request(&method, ns, rest.first().copied(), body);
        }
        if let ["apis", "events.k8s.io", "v1", "namespaces", _, "events"] = segments.as_slice()
            && method == Method::POST
        {
            self.events.lock().unwrap().push(body.clone());
            return json_response(StatusCode::CREATED, &body);
        }
        for (group, plural, kind) in KINDS {
            let one = match segments.as_slice() {
                ["apis", g, "v1alpha1", p, name] if *g == group && *p == plural => {
                    Some((String::new(), (*name).to_string()))
                }
                ["apis", g, "v1alpha1", "namespaces", ns, p, name]
                    if *g == group && *p == plural =>
                {
                    Some(((*ns).to_string(), (*name).to_string()))
                }
                _ => None,
            };
            if let Some((ns, name)) = one
                && method == Method::GET
            {
                return match self.objects.lock().unwrap().get(&(
                    plural.to_string(),
                    ns,
                    name.clone(),
                )) {
                    Some(object) => json_response(StatusCode::OK, object),
                    None => status(404, "NotFound", &format!("{plural} \"{name}\" not found")),
                };
            }
            let listed = match segments.as_slice() {
                ["apis", g, "v1alpha1", p] => *g == group && *p == plural,
                ["apis", g, "v1alpha1", "namespaces", _, p] => *g == group && *p == plural,
                _ => false,
            };
            if !listed || method != Method::GET {
                continue;
            }
            if !self.crds {
                return status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                );
            }
            if query
                .split('&')
                .any(|p| p == "watch=true" || p == "watch=1")
            {
                // A quiet cluster: the watch stays open and nothing happens.
                let mut response = Response::new(
                    StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, Infallible>>())
                        .boxed(),
                );
                response.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                return response;
            }
            return json_response(
                StatusCode::OK,
                &json!({
                    "apiVersion": format!("{group}/v1alpha1"), "kind": format!("{kind}List"),
                    "metadata": {"resourceVersion": "1"},
                    "items": self.objects.lock().unwrap().iter()
                        .filter(|((p, _, _), _)| p == plural)
                        .map(|(_, o)| o.clone())
                        .collect::<Vec<_>>(),
                }),
            );
        }
        status(404, "NotFound", "not served by the fake")
    }

    fn lease_request(
        &self,
        method: &Method,
        namespace: &str,
        name: Option<&str>,
        body: Value,
    ) -> Response<Body> {
        let key = |name: &str| (namespace.to_string(), name.to_string());
        match (method.clone(), name) {
            (Method::GET, Some(name)) => match self.lease(namespace, name) {
                Some(lease) => json_response(StatusCode::OK, &lease),
                None => status(404, "NotFound", &format!("leases \"{name}\" not found")),
            },
            (Method::POST, None) => {
                let mut lease = body;
                let name = lease["metadata"]["name"].as_str().unwrap().to_string();
                if self.lease(namespace, &name).is_some() {
                    return status(409, "AlreadyExists", "already exists");
                }
                lease["metadata"]["resourceVersion"] = json!(self.next_revision());
                lease["metadata"]["namespace"] = json!(namespace);
                self.lease_writes
                    .lock()
                    .unwrap()
                    .push(("create".to_string(), lease.clone()));
                self.leases
                    .lock()
                    .unwrap()
                    .insert(key(&name), lease.clone());
                json_response(StatusCode::CREATED, &lease)
            }
            (Method::PUT, Some(name)) => {
                let Some(current) = self.lease(namespace, name) else {
                    return status(404, "NotFound", "not found");
                };
                if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                    return status(409, "Conflict", "the object has been modified");
                }
                let mut lease = body;
                lease["metadata"]["resourceVersion"] = json!(self.next_revision());
                self.lease_writes
                    .lock()
                    .unwrap()
                    .push(("replace".to_string(), lease.clone()));
                self.leases.lock().unwrap().insert(key(name), lease.clone());
                json_response(StatusCode::OK, &lease)
            }
            _ => status(405, "MethodNotAllowed", "not served by the fake"),
        }
    }
}

async fn start_fake(crds: bool) -> (Arc<Fake>, SocketAddr) {
    let fake = Arc::new(Fake {
        crds,
        ..Fake::default()
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let served = Arc::clone(&fake);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let fake = Arc::clone(&served);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let fake = Arc::clone(&fake);
                    async move { Ok::<_, Infallible>(fake.answer(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (fake, address)
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
    fn start(api: SocketAddr, extra: &[&str]) -> Manager {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = write_kubeconfig(dir.path(), &format!("http://{api}"));
        let stderr = dir.path().join("stderr");
        let (metrics, probes) = (free_port(), free_port());
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
    let (_fake, api) = start_fake(false).await;
    let mut manager = Manager::start(api, &["--leader-elect=false"]);
    let status = manager.exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(1));
    let log = manager.log();
    assert_eq!(
        log.lines().last().unwrap(),
        format!(
            "error: the API server at http://{api}/ does not serve Clusters: install the \
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
async fn lead(fake: &Arc<Fake>, manager: &Manager) {
    eventually("the Lease to be created", || async {
        fake.lease("ops", "oi-lease").is_some()
    })
    .await;
    let lease = fake.lease("ops", "oi-lease").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 3);
    eventually("oi_manager_leader 1 on /metrics", || async {
        get(manager.metrics, "/metrics")
            .await
            .is_some_and(|(code, body)| code == 200 && body.contains("\noi_manager_leader 1\n"))
    })
    .await;
    eventually("the three watches", || async {
        let requests = fake.requests();
        KINDS.iter().all(|(group, plural, _)| {
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
    let (fake, api) = start_fake(true).await;
    let mut manager = Manager::start(api, &LEASE_FLAGS);
    lead(&fake, &manager).await;
    // Renewals go on while leading.
    let writes = fake.lease_writes.lock().unwrap().len();
    eventually("a renewal", || async {
        fake.lease_writes.lock().unwrap().len() > writes
    })
    .await;

    manager.signal("-TERM");
    let status = manager.exit(Duration::from_secs(15)).await;
    let log = manager.log();
    assert_eq!(status.code(), Some(0), "{log}");
    // Released: no holder, so another replica takes over at once.
    let lease = fake.lease("ops", "oi-lease").unwrap();
    assert!(lease["spec"].get("holderIdentity").is_none(), "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(fake.lease_writes.lock().unwrap()[0].0, "create");
    // A quiet cluster: nothing was reconciled, so nothing but Leases was written.
    let writes: Vec<String> = fake
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
    let (fake, api) = start_fake(true).await;
    let mut manager = Manager::start(api, &LEASE_FLAGS);
    lead(&fake, &manager).await;

    fake.steal("ops", "oi-lease", "pod-b");
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
        fake.lease("ops", "oi-lease").unwrap()["spec"]["holderIdentity"],
        "pod-b"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_replica_is_ready_and_stops_on_sigterm() {
    let (fake, api) = start_fake(true).await;
    // Another replica holds the Lease.
    fake.leases.lock().unwrap().insert(
        ("ops".to_string(), "oi-lease".to_string()),
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "oi-lease", "namespace": "ops", "resourceVersion": "100"},
            "spec": {
                "holderIdentity": "pod-b", "leaseDurationSeconds": 3600,
                "renewTime": time::OffsetDateTime::now_utc()
                    .format(&time::format_description::well_known::Rfc3339).unwrap(),
            },
        }),
    );
    let mut manager = Manager::start(api, &LEASE_FLAGS);
    eventually("/readyz 200 on the standby", || async {
        get(manager.probes, "/readyz").await == Some((200, "ok\n".to_string()))
    })
    .await;
    eventually("a few attempts at the Lease", || async {
        fake.requests()
            .iter()
            .filter(|r| {
                r.starts_with("GET /apis/coordination.k8s.io/v1/namespaces/ops/leases/oi-lease?")
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
        !fake.requests().iter().any(|r| r.contains("watch=true")),
        "{:?}",
        fake.requests()
    );
    manager.signal("-TERM");
    let status = manager.exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "{}", manager.log());
    assert_eq!(
        fake.lease("ops", "oi-lease").unwrap()["spec"]["holderIdentity"],
        "pod-b"
    );
    assert!(fake.lease_writes.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_reconciles_what_it_watches() {
    let (fake, api) = start_fake(true).await;
    // A hypervisor whose CRI socket does not exist: the Hypervisor controller probes it,
    // finds it unreachable, says so in the metrics and in an Event.
    fake.objects.lock().unwrap().insert(
        ("hypervisors".to_string(), String::new(), "h1".to_string()),
        json!({
            "apiVersion": "infra.oneinfra.ereslibre.es/v1alpha1", "kind": "Hypervisor",
            "metadata": {"name": "h1", "uid": "uid-h1", "resourceVersion": "7"},
            "spec": {
                "public": false, "ipAddress": "192.0.2.10",
                "portRange": {"low": 30000, "high": 30099},
                "localCRIEndpoint": {"criEndpointPath": "/nonexistent/oi-test/containerd.sock"},
            },
        }),
    );
    let mut manager = Manager::start(api, &LEASE_FLAGS);
    lead(&fake, &manager).await;
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
        !fake.events.lock().unwrap().is_empty()
    })
    .await;
    let event = fake.events.lock().unwrap()[0].clone();
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["reason"], "HypervisorUnreachable", "{event}");
    assert_eq!(
        event["reportingController"],
        "oneinfra.ereslibre.es/oi-manager"
    );
    assert_eq!(event["reportingInstance"], "pod-a");
    assert_eq!(event["regarding"]["kind"], "Hypervisor");
    assert_eq!(event["regarding"]["name"], "h1");
    assert_eq!(event["regarding"]["uid"], "uid-h1");
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
    let (fake, api) = start_fake(true).await;
    let mut manager = Manager::start(api, &["--leader-elect=false", "--namespace=tenants"]);
    eventually("/readyz 200 and oi_manager_leader 1", || async {
        get(manager.probes, "/readyz").await == Some((200, "ok\n".to_string()))
            && get(manager.metrics, "/metrics")
                .await
                .is_some_and(|(_, body)| body.contains("\noi_manager_leader 1\n"))
    })
    .await;
    eventually("the watches", || async {
        fake.requests()
            .iter()
            .filter(|r| r.contains("watch=true"))
            .count()
            >= 3
    })
    .await;
    let requests = fake.requests();
    let watched: std::collections::BTreeSet<&str> = requests
        .iter()
        .filter(|r| r.contains("watch=true"))
        .map(|r| r.split('?').next().unwrap())
        .collect();
    assert_eq!(
        watched,
        std::collections::BTreeSet::from([
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
