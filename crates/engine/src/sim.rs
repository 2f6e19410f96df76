//! Test support (feature `sim`, and this crate's own tests): a simulated [`Network`] in which
//! the etcd members and API servers of the components answer once their pods run on their
//! fake hypervisors ([`oi_cri::fake::FakeRuntime`]). One simulation for every caller's tests:
//! the engine's, and the manager's over its in-process and its mock API server stores.
//!
//! etcd follows the rules the engine depends on:
//! - a cluster forms from the `status.etcdMember` of the members that found it (`new`): all
//!   of their initial cluster vote from the start, and no member answers before a quorum of
//!   them runs;
//! - `member add` takes learners only; a learner is promoted once its pod runs (before, etcd's
//!   "not in sync" refusal); `member remove` removes.
//!
//! - `GET /health` answers `false` the first time it is asked of a member's pod (a member
//!   that just (re)started is catching up), then `true` while the member is a started voting
//!   member and a quorum of the voting members run.
//!
//! Every membership change is logged (`add <name> running=<bool>`, `promote <name>`,
//! `remove <name> running=<bool>`, `bootstrap <names>`), with whether the member's pod ran,
//! and so is every health answer (`health <name> <bool>`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use oi_api::{Component, EtcdInitialClusterState, EtcdMemberBootstrap, Hypervisor};
use oi_cri::ContainerState;
use oi_cri::HypervisorRuntime as _;
use oi_cri::fake::FakeRuntime;
use oi_planner::ports::names;

use crate::etcd::Member;
use crate::https::{HttpsError, HttpsRequest, HttpsResponse, Network};

/// Where the simulation reads the components and hypervisors as they stand.
pub trait Source: Send + Sync {
    fn components(&self) -> Vec<Component>;
    fn hypervisors(&self) -> Vec<Hypervisor>;
}

/// What answers at a URL.
struct Endpoint {
    hypervisor: String,
    pod: String,
    member: String,
    start: Option<EtcdMemberBootstrap>,
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

/// The simulated network; see the module documentation.
pub struct SimNetwork<S> {
    source: S,
    runtimes: BTreeMap<String, Arc<FakeRuntime>>,
    /// One etcd cluster per etcd server CA.
    etcd: Mutex<BTreeMap<String, EtcdState>>,
    /// The etcd pods (`<hypervisor>/<sandbox id>`) whose health was asked already.
    health_asked: Mutex<std::collections::BTreeSet<String>>,
    log: Mutex<Vec<String>>,
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
        }
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
        let ips: BTreeMap<String, String> = self
            .source
            .hypervisors()
            .into_iter()
            .map(|h| (h.metadata.name, h.spec.ip_address))
            .collect();
        self.source.components().into_iter().find_map(|c| {
            let hypervisor = c.spec.hypervisor.clone()?;
            let ip = ips.get(&hypervisor)?;
            let name = c.metadata.name.clone();
            let pod = [
                (names::ETCD_CLIENT, format!("{name}-etcd")),
                (names::ETCD_PEER, format!("{name}-etcd")),
                (names::APISERVER, name.clone()),
            ]
            .into_iter()
            .find(|(port, _)| {
                c.status
                    .host_port(port)
                    .is_some_and(|p| format!("https://{ip}:{p}") == url)
            })
            .map(|(_, pod)| pod)?;
            Some(Endpoint {
                hypervisor,
                pod,
                member: name,
                start: c.status.etcd_member,
            })
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
        let pods = futures::executor::block_on(rt.list_pods(&BTreeMap::new())).unwrap_or_default();
        pods.into_iter()
            .find(|p| {
                p.name == e.pod
                    && p.containers
                        .iter()
                        .all(|c| c.state == ContainerState::Running)
            })
            .map(|p| format!("{}/{}", e.hypervisor, p.id))
    }

    /// `GET /health` of the etcd member at `r.base` (its pod runs).
    fn health(&self, r: &HttpsRequest<'_>) -> HttpsResponse {
        let name = self.member_name(r.base);
        let pod = self.running_pod(r.base).unwrap_or_default();
        let first = self
            .health_asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pod);
        let healthy = !first && {
            let all = self.lock_etcd();
            all.get(&r.tls.ca_pem).is_some_and(|state| {
                let voting: Vec<&Member> = state.members.iter().filter(|m| !m.is_learner).collect();
                let running = voting.iter().filter(|m| self.runs(&m.peer_urls[0])).count();
                voting.iter().any(|m| m.started() && m.name == name) && running > voting.len() / 2
            })
        };
        self.lock_log().push(format!("health {name} {healthy}"));
        HttpsResponse {
            status: if healthy { 200 } else { 503 },
            body: format!(r#"{{"health":"{healthy}","reason":""}}"#).into_bytes(),
        }
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

    fn etcd(&self, r: &HttpsRequest<'_>) -> Result<HttpsResponse, HttpsError> {
        let mut all = self.lock_etcd();
        let state = all.entry(r.tls.ca_pem.clone()).or_default();
        if state.members.is_empty() {
            let me = self.endpoint(r.base).map(|e| (e.member, e.start));
            let Some((me, Some(start))) = me else {
                panic!("{} answers etcd without a status.etcdMember", r.base);
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
                return Err(Self::refused(r.base, " (no quorum yet)"));
            }
            for peer in start.initial_cluster.values() {
                state.add(peer, false);
            }
            let names: Vec<&str> = start.initial_cluster.keys().map(String::as_str).collect();
            self.lock_log()
                .push(format!("bootstrap {}", names.join(",")));
        }
        // Members whose pod runs have started.
        for m in state.members.iter_mut() {
            if !m.started() && self.runs(&m.peer_urls[0]) {
                m.name = self.member_name(&m.peer_urls[0]);
            }
        }
        let body: serde_json::Value =
            serde_json::from_str(r.body.unwrap_or("{}")).unwrap_or_default();
        let id = || {
            body["ID"]
                .as_str()
                .and_then(|i| i.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{} without an ID: {body}", r.path))
        };
        match r.path {
            "/v3/cluster/member/list" => {}
            "/v3/cluster/member/add" => {
                let peer = body["peerURLs"][0].as_str().unwrap_or_default().to_string();
                assert_eq!(body["isLearner"], true, "members join as learners");
                state.add(&peer, true);
                let running = self.runs(&peer);
                self.lock_log()
                    .push(format!("add {} running={running}", self.member_name(&peer)));
            }
            "/v3/cluster/member/promote" => {
                let id = id();
                let Some(m) = state.members.iter_mut().find(|m| m.id == id) else {
                    panic!("promote of unknown member {id}");
                };
                if !m.started() {
                    return Ok(HttpsResponse {
                        status: 500,
                        body: br#"{"error":"etcdserver: can only promote a learner member which is in sync with leader","code":9}"#.to_vec(),
                    });
                }
                m.is_learner = false;
                let line = format!("promote {}", m.name);
                self.lock_log().push(line);
            }
            "/v3/cluster/member/remove" => {
                let id = id();
                let Some(m) = state.members.iter().find(|m| m.id == id).cloned() else {
                    panic!("remove of unknown member {id}");
                };
                let running = self.runs(&m.peer_urls[0]);
                state.members.retain(|m| m.id != id);
                self.lock_log()
                    .push(format!("remove {} running={running}", m.name));
            }
            other => panic!("unexpected etcd path {other}"),
        }
        let members: Vec<serde_json::Value> = state
            .members
            .iter()
            .map(|m| {
                serde_json::json!({"ID": m.id.to_string(), "name": m.name,
                    "peerURLs": m.peer_urls, "clientURLs": m.client_urls,
                    "isLearner": m.is_learner})
            })
            .collect();
        Ok(HttpsResponse {
            status: 200,
            body: serde_json::json!({ "members": members })
                .to_string()
                .into_bytes(),
        })
    }
}

impl<S: Source> Network for SimNetwork<S> {
    async fn request(&self, r: HttpsRequest<'_>) -> Result<HttpsResponse, HttpsError> {
        // A real request waits: other tasks run meanwhile.
        tokio::task::yield_now().await;
        if !self.runs(r.base) {
            return Err(Self::refused(r.base, ""));
        }
        if r.path == "/health" {
            assert!(
                r.tls.identity.is_some(),
                "etcd calls present a client certificate"
            );
            return Ok(self.health(&r));
        }
        if r.path.starts_with("/v3/") {
            assert!(
                r.tls.identity.is_some(),
                "etcd calls present a client certificate"
            );
            return self.etcd(&r);
        }
        assert_eq!(r.path, "/readyz", "unexpected request to {}", r.base);
        Ok(HttpsResponse {
            status: 200,
            body: b"ok".to_vec(),
        })
    }
}
