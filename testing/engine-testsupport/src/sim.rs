//! A simulated [`Network`] in which
//! the etcd members and API servers of the components answer once their pods run on their
//! fake hypervisors ([`oi_cri::fake::FakeRuntime`]). One simulation for every caller's tests:
//! the engine's, and the manager's over its in-process and its mock API server stores.
//!
//! etcd follows the rules the engine depends on:
//! - a cluster forms from the `status.etcdMember` of the members that found it (`new`): all
//!   of their initial cluster vote from the start, and no member answers before a quorum of
//!   them runs;
//! - `member add` takes learners only, one at a time (etcd's "too many learner members");
//!   a learner is promoted once its pod runs (before, etcd's "not in sync" refusal);
//!   `member remove` removes, and refuses a member that is not there ("member not found");
//! - it passes the contract real etcd passes ([`crate::etcd_contract`]).
//!
//! - a restore (the `etcd data swap` job having run on the fake hypervisors since the last
//!   request) replaces the data: the cluster is formed again by the founders;
//!
//! - status answers revision 100 + the snapshots taken, a snapshot streams [`sim_snapshot`]
//!   in two chunks;
//!
//! - a member whose running pod was started with `--force-new-cluster` makes the cluster one
//!   of itself alone (logged `force-new-cluster <name>`);
//!
//! - health answers `false` the first time it is asked of a member's pod (a member
//!   that just (re)started is catching up), then `true` while the member is a started voting
//!   member and a quorum of the voting members run.
//!
//! The cluster's own API (the in-cluster objects) answers at the ingress as a plain object
//! store keyed by path, one per API server CA: get, list by label, create (409 when present),
//! JSON merge patch, delete, the status subresource (PUT); NodeJoinRequests listed whole. Its
//! writes are logged apart ([`SimNetwork::api_writes`]).
//!
//! Every membership change is logged (`add <name> running=<bool>`, `promote <name>`,
//! `remove <name> running=<bool>`, `bootstrap <names>`), with whether the member's pod ran,
//! and so is every health answer (`health <name> <bool>`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use oi_api::{
    Component, EtcdInitialClusterState, EtcdMemberStart, Hypervisor, ObjectKey, Resource as _,
};
use oi_cri::fake::FakeRuntime;
use oi_planner::ports::names;

use oi_engine::etcd::{Code, Etcd, EtcdError, Member, MemberStatus, SnapshotSink};
use oi_engine::https::{HttpsError, HttpsRequest, HttpsResponse, Network, Tls};

/// Where the simulation reads the components and hypervisors as they stand. Both are
/// visitors over borrowed objects: the simulation looks an endpoint up on every request, and
/// copying every component each time made it quadratic in the number of clusters.
pub trait Source: Send + Sync {
    /// The first `Some` that `f` answers for a component.
    fn find_component<T>(&self, f: impl FnMut(&Component) -> Option<T>) -> Option<T>;
    /// The first `Some` that `f` answers for a hypervisor.
    fn find_hypervisor<T>(&self, f: impl FnMut(&Hypervisor) -> Option<T>) -> Option<T>;
    /// What `f` answers for the component `key`, if there is one. A source that indexes
    /// its components by key answers without visiting the others.
    fn with_component<T>(
        &self,
        key: &ObjectKey,
        f: impl FnOnce(&Component) -> Option<T>,
    ) -> Option<T> {
        let mut f = Some(f);
        self.find_component(|c| {
            if c.key() == *key {
                f.take().and_then(|f| f(c))
            } else {
                None
            }
        })
    }
}

/// What answers at a URL.
struct Endpoint {
    hypervisor: String,
    pod: String,
    member: String,
    start: Option<EtcdMemberStart>,
    /// A cluster's ingress (its haproxy), not an API server.
    ingress: bool,
}

#[derive(Default)]
struct EtcdState {
    members: Vec<Member>,
    next_id: u64,
}

impl EtcdState {
    /// A member not started yet: the process at `peer` publishes its name when it runs.
    fn add(&mut self, peer: &str, is_learner: bool) {
        self.next_id += 1;
        self.members.push(Member {
            id: self.next_id,
            name: String::new(),
            peer_urls: vec![peer.to_string()],
            client_urls: vec![],
            is_learner,
        });
    }
}

/// A scripted answer of a cluster's API: the next `times` `method` requests to `path` answer
/// `status` with a Status `message`.
struct Scripted {
    method: String,
    path: String,
    status: u16,
    message: String,
    times: usize,
}

/// The simulated network; see the module documentation.
pub struct SimNetwork<S> {
    source: S,
    runtimes: BTreeMap<String, Arc<FakeRuntime>>,
    /// One etcd cluster per etcd server CA.
    etcd: Mutex<BTreeMap<String, EtcdState>>,
    /// The etcd pods (`<hypervisor>/<sandbox id>`) whose health was asked already.
    health_asked: Mutex<std::collections::BTreeSet<String>>,
    log: Mutex<Vec<String>>,
    /// Each cluster's API objects (by API server CA), by path.
    api: Mutex<BTreeMap<String, BTreeMap<String, serde_json::Value>>>,
    api_writes: Mutex<Vec<String>>,
    /// The reads of the clusters' APIs (`GET <path with query>`).
    api_reads: Mutex<Vec<String>>,
    /// Scripted answers, used before the store.
    api_script: Mutex<Vec<Scripted>>,
    /// The data swaps of restores seen so far.
    swaps: Mutex<u64>,
    /// Snapshots taken so far.
    snapshots: Mutex<u64>,
    /// Whether snapshots come with a database that does not match etcd's checksum.
    corrupt_snapshots: std::sync::atomic::AtomicBool,
    /// The component last found serving each URL, checked again at every use: a lookup
    /// visits every component only when the one cached no longer serves it.
    endpoints: Mutex<std::collections::HashMap<String, ObjectKey>>,
    /// Whether an ingress answers only once its haproxy was told its servers are up
    /// ([`SimNetwork::ingress_checks_lag`]).
    ingress_checks_lag: std::sync::atomic::AtomicBool,
    /// How long each request takes ([`SimNetwork::set_round_trip`]).
    round_trip: Mutex<Option<std::time::Duration>>,
}

/// The `n`-th snapshot the simulation streams: a database page with bbolt's magic and `n`
/// in it, and the SHA-256 after it, as etcd streams one.
pub fn sim_snapshot(n: u64) -> Vec<u8> {
    use sha2::Digest as _;
    let mut db = vec![0u8; 8192];
    db[16..20].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
    db[64..72].copy_from_slice(&n.to_le_bytes());
    let sum = sha2::Sha256::digest(&db);
    db.extend_from_slice(&sum);
    db
}

impl<S: Source> SimNetwork<S> {
    /// `runtimes`: the fake runtime of each hypervisor, by name.
    pub fn new(source: S, runtimes: BTreeMap<String, Arc<FakeRuntime>>) -> Self {
        SimNetwork {
            source,
            runtimes,
            etcd: Mutex::new(BTreeMap::new()),
            health_asked: Mutex::new(std::collections::BTreeSet::new()),
            log: Mutex::new(Vec::new()),
            api: Mutex::new(BTreeMap::new()),
            api_writes: Mutex::new(Vec::new()),
            api_reads: Mutex::new(Vec::new()),
            api_script: Mutex::new(Vec::new()),
            swaps: Mutex::new(0),
            snapshots: Mutex::new(0),
            corrupt_snapshots: std::sync::atomic::AtomicBool::new(false),
            endpoints: Mutex::new(std::collections::HashMap::new()),
            ingress_checks_lag: std::sync::atomic::AtomicBool::new(false),
            round_trip: Mutex::new(None),
        }
    }

    /// A request's or an etcd call's wait: other tasks run meanwhile; one round trip when
    /// [`SimNetwork::set_round_trip`] set one.
    async fn wait(&self) {
        let round_trip = *self.round_trip.lock().unwrap_or_else(|e| e.into_inner());
        match round_trip {
            Some(d) => tokio::time::sleep(d).await,
            None => tokio::task::yield_now().await,
        }
    }

    /// Makes every request and etcd call take `round_trip` (on tokio's clock: a test with a paused clock
    /// counts a run's round trips by its duration) instead of only yielding.
    pub fn set_round_trip(&self, round_trip: Option<std::time::Duration>) {
        *self.round_trip.lock().unwrap_or_else(|e| e.into_inner()) = round_trip;
    }

    /// With `lag`, an ingress's haproxy holds its API servers down, as after checks that
    /// failed while they started: it closes every connection until its runtime API was told
    /// a server is up (`set server ... health up`).
    pub fn ingress_checks_lag(&self, lag: bool) {
        self.ingress_checks_lag
            .store(lag, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes the next `times` `method` requests to `path` (without query) answer `status`
    /// with a Status `message`, as a refusing or not yet ready API server would.
    pub fn script_api(&self, method: &str, path: &str, status: u16, message: &str, times: usize) {
        self.api_script
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Scripted {
                method: method.into(),
                path: path.into(),
                status,
                message: message.into(),
                times,
            });
    }

    /// The writes to the clusters' APIs (`POST <path>`, `PATCH <path>`, `DELETE <path>`)
    /// since the log was cleared.
    pub fn api_writes(&self) -> Vec<String> {
        self.api_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The reads of the clusters' APIs (`GET <path with query>`) since the log was cleared.
    pub fn api_reads(&self) -> Vec<String> {
        self.api_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every object path of every cluster's API.
    pub fn api_paths(&self) -> Vec<String> {
        self.lock_api()
            .values()
            .flat_map(|objects| objects.keys().cloned())
            .collect()
    }

    /// The object at `path` in any cluster's API.
    pub fn api_object(&self, path: &str) -> Option<serde_json::Value> {
        self.lock_api()
            .values()
            .find_map(|objects| objects.get(path).cloned())
    }

    /// Changes (`Some`) or removes (`None`) the object at `path` in every cluster's API that
    /// has it, as another client would.
    pub fn set_api_object(&self, path: &str, value: Option<serde_json::Value>) {
        for objects in self.lock_api().values_mut() {
            if objects.contains_key(path) {
                match &value {
                    Some(v) => objects.insert(path.to_string(), v.clone()),
                    None => objects.remove(path),
                };
            }
        }
    }

    fn lock_api(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeMap<String, serde_json::Value>>> {
        self.api.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request to a cluster's API.
    fn api_request(&self, r: &HttpsRequest<'_>) -> HttpsResponse {
        use serde_json::{Value, json};
        let answer = |status: u16, body: Value| HttpsResponse {
            status,
            body: body.to_string().into_bytes(),
        };
        let not_found = || answer(404, json!({"kind": "Status", "message": "not found"}));
        let mut all = self.lock_api();
        let objects = all.entry(r.tls.ca_pem.clone()).or_default();
        let (path, query) = r.path.split_once('?').unwrap_or((r.path, ""));
        let body: Value = match r.body.map(serde_json::from_str).transpose() {
            Ok(body) => body.unwrap_or_default(),
            Err(e) => panic!("a request body that is not JSON: {e}"),
        };
        if *r.method == http::Method::GET {
            self.api_reads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("GET {}", r.path));
        } else {
            self.api_writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{} {path}", r.method));
        }
        {
            let mut script = self.api_script.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(entry) = script
                .iter_mut()
                .find(|e| e.method == r.method.as_str() && e.path == path && e.times > 0)
            {
                entry.times -= 1;
                return answer(
                    entry.status,
                    json!({"kind": "Status", "message": entry.message}),
                );
            }
        }
        match r.method.as_str() {
            "GET" if query.starts_with("labelSelector=") => {
                let selector = query
                    .trim_start_matches("labelSelector=")
                    .replace("%3D", "=");
                let (k, v) = selector.split_once('=').unwrap_or((&selector, ""));
                let prefix = format!("{path}/");
                let items: Vec<Value> = objects
                    .iter()
                    .filter(|(p, o)| {
                        p.strip_prefix(&prefix)
                            .is_some_and(|rest| !rest.contains('/'))
                            && o["metadata"]["labels"][k] == v
                    })
                    // As kube-apiserver lists them: the list names their kind.
                    .map(|(_, o)| {
                        let mut o = o.clone();
                        if let Some(m) = o.as_object_mut() {
                            m.remove("apiVersion");
                            m.remove("kind");
                        }
                        o
                    })
                    .collect();
                answer(200, json!({"items": items}))
            }
            // The collections the engine lists whole.
            "GET" if path.ends_with("/nodejoinrequests") || path == "/api/v1/nodes" => {
                let prefix = format!("{path}/");
                let items: Vec<Value> = objects
                    .iter()
                    .filter(|(p, _)| {
                        p.strip_prefix(&prefix)
                            .is_some_and(|rest| !rest.contains('/'))
                    })
                    .map(|(_, o)| o.clone())
                    .collect();
                answer(200, json!({"items": items}))
            }
            "GET" => objects
                .get(path)
                .map_or_else(not_found, |o| answer(200, o.clone())),
            "PUT" => match path
                .strip_suffix("/status")
                .and_then(|p| objects.get_mut(p))
            {
                Some(o) => {
                    o["status"] = body["status"].clone();
                    answer(200, o.clone())
                }
                None => not_found(),
            },
            "POST" => {
                let name = body["metadata"]["name"].as_str().unwrap_or_default();
                let path = format!("{path}/{name}");
                if objects.contains_key(&path) {
                    return answer(409, json!({"kind": "Status", "message": "already exists"}));
                }
                objects.insert(path, body.clone());
                answer(201, body)
            }
            "PATCH" => match objects.get_mut(path) {
                Some(o) => {
                    merge_patch(o, &body);
                    answer(200, o.clone())
                }
                None => not_found(),
            },
            "DELETE" => objects
                .remove(path)
                .map_or_else(not_found, |o| answer(200, o)),
            other => panic!("unexpected method {other}"),
        }
    }

    /// How many snapshots were streamed so far.
    /// Makes the snapshots streamed from now on unsound (a byte of the database changed
    /// after etcd's checksum was taken), or sound again.
    pub fn corrupt_snapshots(&self, corrupt: bool) {
        self.corrupt_snapshots
            .store(corrupt, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn snapshots_taken(&self) -> u64 {
        *self.snapshots.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// The membership changes since the log was cleared.
    pub fn log(&self) -> Vec<String> {
        self.lock_log().clone()
    }

    pub fn clear_log(&self) {
        self.lock_log().clear();
        self.api_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The members of every simulated etcd cluster, by name ("" for one not started).
    pub fn members(&self) -> Vec<Vec<String>> {
        self.lock_etcd()
            .values()
            .map(|s| s.members.iter().map(|m| m.name.clone()).collect())
            .collect()
    }

    fn lock_log(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_etcd(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, EtcdState>> {
        self.etcd.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn endpoint(&self, url: &str) -> Option<Endpoint> {
        let (ip, port) = url.strip_prefix("https://")?.rsplit_once(':')?;
        let ip = ip.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port.parse().ok()?;
        let on_ip = |e: &Endpoint| {
            self.source
                .find_hypervisor(|h| {
                    (h.metadata.name == e.hypervisor).then_some(h.spec.ip_address == ip)
                })
                .unwrap_or(false)
        };
        let cached = self
            .endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
            .cloned();
        if let Some(key) = cached
            && let Some(e) = self
                .source
                .with_component(&key, |c| Self::serving(c, port))
                .filter(|e| on_ip(e))
        {
            return Some(e);
        }
        // The components serving this port on any hypervisor, then the one on `ip` (two
        // passes: a source may hold one lock for both kinds).
        let mut candidates = Vec::new();
        self.source.find_component(|c| {
            if let Some(e) = Self::serving(c, port) {
                candidates.push((c.key(), e));
            }
            None::<()>
        });
        let (key, found) = candidates.into_iter().find(|(_, e)| on_ip(e))?;
        self.endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(url.to_string(), key);
        Some(found)
    }

    /// What `c` serves at `port` of its hypervisor: its etcd member (client and peer ports)
    /// or its API server.
    fn serving(c: &Component, port: u16) -> Option<Endpoint> {
        let hypervisor = c.spec.hypervisor.as_deref()?;
        let serves = [names::ETCD_CLIENT, names::ETCD_PEER, names::APISERVER]
            .into_iter()
            .find(|p| c.status.host_port(p) == Some(port))?;
        let name = &c.metadata.name;
        Some(Endpoint {
            hypervisor: hypervisor.to_string(),
            pod: if serves == names::APISERVER {
                name.clone()
            } else {
                format!("{name}-etcd")
            },
            member: name.clone(),
            start: c.status.etcd_member.clone(),
            ingress: c.spec.role == oi_api::ComponentRole::ControlPlaneIngress,
        })
    }

    /// Whether every container of the pod behind `url` runs.
    fn runs(&self, url: &str) -> bool {
        self.running_pod(url).is_some()
    }

    /// `<hypervisor>/<sandbox id>` of the pod behind `url` when every container of it runs.
    fn running_pod(&self, url: &str) -> Option<String> {
        let e = self.endpoint(url)?;
        let rt = self.runtimes.get(&e.hypervisor)?;
        rt.running_pod_id(&e.pod)
            .map(|id| format!("{}/{id}", e.hypervisor))
    }

    /// The health of the etcd member at `base` (its pod runs).
    fn health(&self, base: &str, tls: &Tls) -> bool {
        let name = self.member_name(base);
        let pod = self.running_pod(base).unwrap_or_default();
        let first = self
            .health_asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pod);
        let healthy = !first && {
            let all = self.lock_etcd();
            all.get(&tls.ca_pem).is_some_and(|state| {
                let voting: Vec<&Member> = state.members.iter().filter(|m| !m.is_learner).collect();
                let running = voting.iter().filter(|m| self.runs(&m.peer_urls[0])).count();
                voting.iter().any(|m| m.started() && m.name == name) && running > voting.len() / 2
            })
        };
        self.lock_log().push(format!("health {name} {healthy}"));
        healthy
    }

    /// The client URL the member at peer URL `peer` publishes when it starts.
    fn client_url(&self, peer: &str) -> Option<String> {
        let e = self.endpoint(peer)?;
        let ip = self.source.find_hypervisor(|h| {
            (h.metadata.name == e.hypervisor).then(|| h.spec.ip_address.clone())
        })?;
        let port = self.source.find_component(|c| {
            (c.metadata.name == e.member && c.spec.hypervisor.as_deref() == Some(&e.hypervisor))
                .then(|| c.status.host_port(names::ETCD_CLIENT))
                .flatten()
        })?;
        Some(format!("https://{ip}:{port}"))
    }

    fn member_name(&self, url: &str) -> String {
        self.endpoint(url).map(|e| e.member).unwrap_or_default()
    }

    fn refused(url: &str, why: &str) -> HttpsError {
        HttpsError {
            url: url.to_string(),
            reason: format!("connection refused{why}"),
        }
    }

    /// An etcd call of `base`: refused unless the member's pod runs, with the engine's
    /// client identity.
    /// Whether the etcd member at `base` answers: refused unless its pod runs; every call
    /// presents the engine's client identity.
    async fn answering(&self, base: &str, tls: &Tls) -> Result<(), EtcdError> {
        self.wait().await;
        if !self.runs(base) {
            return Err(EtcdError::Unreachable {
                endpoint: base.to_string(),
                reason: "connection refused".into(),
            });
        }
        assert!(
            tls.identity.is_some(),
            "etcd calls present a client certificate"
        );
        Ok(())
    }

    /// An etcd call of `base`, once it answers.
    async fn etcd_call(&self, base: &str, tls: &Tls, call: Call) -> Result<Answer, EtcdError> {
        self.answering(base, tls).await?;
        self.etcd(base, tls, call)
    }

    fn etcd(&self, base: &str, tls: &Tls, call: Call) -> Result<Answer, EtcdError> {
        let swaps: u64 = self
            .runtimes
            .values()
            .map(|rt| rt.job_runs(oi_engine::restore::SWAP_JOB))
            .sum();
        {
            let mut seen = self.swaps.lock().unwrap_or_else(|e| e.into_inner());
            if swaps > *seen {
                *seen = swaps;
                // A restore replaced the data of the cluster's members.
                self.lock_etcd().remove(&tls.ca_pem);
            }
        }
        let mut all = self.lock_etcd();
        let state = all.entry(tls.ca_pem.clone()).or_default();
        if state.members.is_empty() {
            let me = self.endpoint(base).map(|e| (e.member, e.start));
            let Some((me, Some(start))) = me else {
                panic!("{base} answers etcd without a status.etcdMember");
            };
            assert_eq!(
                start.initial_cluster_state,
                EtcdInitialClusterState::New,
                "{me} answers before any cluster exists, so it must found one"
            );
            let running = start
                .initial_cluster
                .values()
                .filter(|peer| self.runs(peer))
                .count();
            if running <= start.initial_cluster.len() / 2 {
                return Err(EtcdError::Refused {
                    endpoint: base.to_string(),
                    operation: call.operation(),
                    code: Code::Unavailable,
                    message: "etcdserver: no leader".into(),
                });
            }
            for peer in start.initial_cluster.values() {
                state.add(peer, false);
            }
            let names: Vec<&str> = start.initial_cluster.keys().map(String::as_str).collect();
            self.lock_log()
                .push(format!("bootstrap {}", names.join(",")));
        }
        // A member started with `--force-new-cluster`: a cluster of one on its data.
        if let Some(e) = self.endpoint(base)
            && let Some(spec) = self
                .runtimes
                .get(&e.hypervisor)
                .and_then(|rt| rt.running_pod_spec(&e.pod))
            && spec
                .containers
                .iter()
                .any(|c| c.args.iter().any(|a| a == "--force-new-cluster"))
        {
            let before = state.members.len();
            state.members.retain(|m| {
                self.endpoint(&m.peer_urls[0])
                    .is_some_and(|x| x.member == e.member && x.hypervisor == e.hypervisor)
            });
            for m in &mut state.members {
                m.is_learner = false;
            }
            if state.members.len() != before {
                self.lock_log()
                    .push(format!("force-new-cluster {}", e.member));
            }
        }
        // Members whose pod runs have started.
        for m in state.members.iter_mut() {
            if !m.started() && self.runs(&m.peer_urls[0]) {
                m.name = self.member_name(&m.peer_urls[0]);
                m.client_urls = self.client_url(&m.peer_urls[0]).into_iter().collect();
            }
        }
        match call {
            Call::Status => {
                let revision = self.snapshots_taken() + 100;
                let me = state
                    .members
                    .iter()
                    .find(|m| m.client_urls.iter().any(|u| u == base))
                    .map_or(0, |m| m.id);
                let leader = state
                    .members
                    .iter()
                    .find(|m| m.started() && !m.is_learner)
                    .map_or(0, |m| m.id);
                return Ok(Answer::Status(MemberStatus {
                    revision,
                    member_id: me,
                    cluster_id: 1,
                    leader,
                    db_size: 8192,
                    version: "3.4.23".into(),
                }));
            }
            Call::TransferLeadership => return Ok(Answer::Done),
            Call::Snapshot => {
                let n = {
                    let mut taken = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
                    *taken += 1;
                    *taken
                };
                let mut db = sim_snapshot(n);
                if self
                    .corrupt_snapshots
                    .load(std::sync::atomic::Ordering::SeqCst)
                {
                    db[100] ^= 0xff;
                }
                return Ok(Answer::Snapshot(db));
            }
            Call::List => {}
            Call::Add(peer) => {
                if state.members.iter().any(|m| m.is_learner) {
                    return Err(EtcdError::Refused {
                        endpoint: base.to_string(),
                        operation: "member add",
                        code: Code::FailedPrecondition,
                        message: oi_engine::etcd::refusals::TOO_MANY_LEARNERS.into(),
                    });
                }
                state.add(&peer, true);
                let running = self.runs(&peer);
                self.lock_log()
                    .push(format!("add {} running={running}", self.member_name(&peer)));
            }
            Call::Promote(id) => {
                let Some(m) = state.members.iter_mut().find(|m| m.id == id) else {
                    return Err(EtcdError::Refused {
                        endpoint: base.to_string(),
                        operation: "member promote",
                        code: Code::NotFound,
                        message: "etcdserver: member not found".into(),
                    });
                };
                if !m.started() {
                    return Err(EtcdError::Refused {
                        endpoint: base.to_string(),
                        operation: "member promote",
                        code: Code::FailedPrecondition,
                        message: oi_engine::etcd::refusals::LEARNER_NOT_READY.into(),
                    });
                }
                m.is_learner = false;
                let line = format!("promote {}", m.name);
                self.lock_log().push(line);
            }
            Call::Remove(id) => {
                let Some(m) = state.members.iter().find(|m| m.id == id).cloned() else {
                    return Err(EtcdError::Refused {
                        endpoint: base.to_string(),
                        operation: "member remove",
                        code: Code::NotFound,
                        message: "etcdserver: member not found".into(),
                    });
                };
                let running = self.runs(&m.peer_urls[0]);
                state.members.retain(|m| m.id != id);
                self.lock_log()
                    .push(format!("remove {} running={running}", m.name));
            }
        }
        Ok(Answer::Members(state.members.clone()))
    }
}

/// An etcd call, as the simulation takes it.
enum Call {
    List,
    Add(String),
    Promote(u64),
    Remove(u64),
    Status,
    TransferLeadership,
    Snapshot,
}

impl Call {
    fn operation(&self) -> &'static str {
        match self {
            Call::List => "member list",
            Call::Add(_) => "member add",
            Call::Promote(_) => "member promote",
            Call::Remove(_) => "member remove",
            Call::Status => "status",
            Call::TransferLeadership => "move leader",
            Call::Snapshot => "snapshot",
        }
    }
}

/// The simulation's answer to a [`Call`].
enum Answer {
    Members(Vec<Member>),
    Done,
    Status(MemberStatus),
    Snapshot(Vec<u8>),
}

fn unexpected(endpoint: &str, operation: &'static str) -> EtcdError {
    EtcdError::Body {
        endpoint: endpoint.to_string(),
        operation,
        reason: "the simulation answered another call".into(),
    }
}

impl<S: Source> Etcd for SimNetwork<S> {
    async fn members(&self, endpoint: &str, tls: &Tls) -> Result<Vec<Member>, EtcdError> {
        match self.etcd_call(endpoint, tls, Call::List).await? {
            Answer::Members(m) => Ok(m),
            _ => Err(unexpected(endpoint, "member list")),
        }
    }

    async fn add_learner(
        &self,
        endpoint: &str,
        tls: &Tls,
        peer_url: &str,
    ) -> Result<(), EtcdError> {
        self.etcd_call(endpoint, tls, Call::Add(peer_url.to_string()))
            .await
            .map(|_| ())
    }

    async fn promote(&self, endpoint: &str, tls: &Tls, id: u64) -> Result<(), EtcdError> {
        self.etcd_call(endpoint, tls, Call::Promote(id))
            .await
            .map(|_| ())
    }

    async fn remove(&self, endpoint: &str, tls: &Tls, id: u64) -> Result<(), EtcdError> {
        self.etcd_call(endpoint, tls, Call::Remove(id))
            .await
            .map(|_| ())
    }

    async fn healthy(&self, endpoint: &str, tls: &Tls) -> Result<bool, EtcdError> {
        self.answering(endpoint, tls).await?;
        Ok(self.health(endpoint, tls))
    }

    async fn status(&self, endpoint: &str, tls: &Tls) -> Result<MemberStatus, EtcdError> {
        match self.etcd_call(endpoint, tls, Call::Status).await? {
            Answer::Status(s) => Ok(s),
            _ => Err(unexpected(endpoint, "status")),
        }
    }

    async fn transfer_leadership(
        &self,
        endpoint: &str,
        tls: &Tls,
        _target: u64,
    ) -> Result<(), EtcdError> {
        self.etcd_call(endpoint, tls, Call::TransferLeadership)
            .await
            .map(|_| ())
    }

    /// Streams [`sim_snapshot`] in two chunks.
    async fn snapshot(
        &self,
        endpoint: &str,
        tls: &Tls,
        sink: &SnapshotSink,
    ) -> Result<u64, EtcdError> {
        let Answer::Snapshot(db) = self.etcd_call(endpoint, tls, Call::Snapshot).await? else {
            return Err(unexpected(endpoint, "snapshot"));
        };
        let (a, b) = db.split_at(db.len() / 2);
        for chunk in [a, b] {
            sink.send(bytes::Bytes::copy_from_slice(chunk))
                .await
                .map_err(|_| oi_engine::etcd::sink_closed(endpoint))?;
        }
        Ok(db.len() as u64)
    }
}

impl<S: Source> Network for SimNetwork<S> {
    async fn request(&self, r: HttpsRequest<'_>) -> Result<HttpsResponse, HttpsError> {
        self.wait().await;
        if !self.runs(r.base) {
            return Err(Self::refused(r.base, ""));
        }
        if self
            .ingress_checks_lag
            .load(std::sync::atomic::Ordering::Relaxed)
            && let Some(e) = self.endpoint(r.base).filter(|e| e.ingress)
            && self
                .runtimes
                .get(&e.hypervisor)
                .is_none_or(|rt| rt.haproxy_servers_up().is_empty())
        {
            return Err(Self::refused(r.base, ": tls handshake eof"));
        }
        if r.path != "/readyz" {
            assert!(
                r.tls.identity.is_some(),
                "cluster API calls present a client certificate"
            );
            return Ok(self.api_request(&r));
        }
        Ok(HttpsResponse {
            status: 200,
            body: b"ok".to_vec(),
        })
    }

    /// Made-up addresses, answered in memory: nothing may dial them.
    fn dialable(&self) -> bool {
        false
    }
}

/// RFC 7386: objects merged key by key, `null` removes, anything else replaces.
fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    use serde_json::Value;
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in patch {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}
