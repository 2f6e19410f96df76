//! The work queue's rules without a clock, then the loop with a recording fake of the
//! controllers over a real [`MemoryStore`].

use std::collections::VecDeque;
use std::sync::Mutex;

use oi_api::{
    ClusterSpec, ComponentRole, ComponentSpec, HypervisorSpec, LocalCriEndpoint, ObjectMeta,
    PortRange,
};
use pretty_assertions::assert_eq;

use super::*;
use oi_manager::store::{Store, StoreError};

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

#[test]
fn queue_runs_a_key_queued_many_times_once() {
    let t = Instant::now();
    let mut q = WorkQueue::<&str, &str>::new();
    q.add("a", "g", t);
    q.add("a", "g", t);
    q.add("a", "g", at(t, 5));
    assert_eq!(q.waiting(), 1);
    assert_eq!(q.pop_ready(at(t, 10)), Some(("a", "g")));
    assert_eq!(q.pop_ready(at(t, 10)), None);
    q.finish(&"a", &"g");
    assert_eq!(q.pop_ready(at(t, 10)), None);
    assert_eq!(q.next_due(), None);
}

#[test]
fn queue_waits_for_the_due_time_and_an_earlier_add_wins() {
    let t = Instant::now();
    let mut q = WorkQueue::<&str, &str>::new();
    q.add("a", "g", at(t, 100));
    assert_eq!(q.pop_ready(t), None);
    assert_eq!(q.next_due(), Some(at(t, 100)));
    // A later time does not delay it.
    q.add("a", "g", at(t, 500));
    assert_eq!(q.due(&"a"), Some(at(t, 100)));
    // A change (now) preempts the delay.
    q.add("a", "g", at(t, 1));
    assert_eq!(q.due(&"a"), Some(at(t, 1)));
    assert_eq!(q.pop_ready(at(t, 1)), Some(("a", "g")));
    assert!(!q.is_pending(&"a"));
}

#[test]
fn queue_never_runs_a_key_or_a_group_twice_at_once() {
    let t = Instant::now();
    let mut q = WorkQueue::<&str, &str>::new();
    q.add("c1", "cluster-1", t);
    q.add("k1", "cluster-1", t);
    q.add("c2", "cluster-2", t);
    assert_eq!(q.pop_ready(t), Some(("c1", "cluster-1")));
    // Queued again while running: waits for the run to finish.
    q.add("c1", "cluster-1", t);
    // k1 shares c1's group; c2 does not.
    assert_eq!(q.pop_ready(t), Some(("c2", "cluster-2")));
    assert_eq!(q.pop_ready(t), None);
    assert_eq!(q.next_due(), None);
    assert_eq!(q.running(), 2);
    q.finish(&"c1", &"cluster-1");
    assert_eq!(q.next_due(), Some(t));
    // Earliest first; ties in key order.
    assert_eq!(q.pop_ready(t), Some(("c1", "cluster-1")));
    q.finish(&"c1", &"cluster-1");
    assert_eq!(q.pop_ready(t), Some(("k1", "cluster-1")));
    assert_eq!(q.pop_ready(t), None);
    assert_eq!(q.waiting(), 0);
}

#[test]
fn queue_pops_the_earliest_due_first() {
    let t = Instant::now();
    let mut q = WorkQueue::<&str, &str>::new();
    q.add("a", "ga", at(t, 30));
    q.add("b", "gb", at(t, 10));
    q.add("c", "gc", at(t, 20));
    let order: Vec<_> = std::iter::from_fn(|| q.pop_ready(at(t, 30)).map(|(k, _)| k)).collect();
    assert_eq!(order, vec!["b", "c", "a"]);
}

// ---- the loop, with a fake of the three controllers ----

/// What the fake answers for a key, in order; `Await` once the script is used up.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Requeue(u64),
    Await,
    Fail,
    Panic,
}

#[derive(Default)]
struct Shared {
    script: BTreeMap<Job, VecDeque<Answer>>,
    /// Every reconcile started, in order, with when.
    calls: Vec<(Job, Instant)>,
    finished: Vec<Job>,
    running: Vec<(Job, ObjectKey)>,
    max_running: usize,
    overlaps: Vec<String>,
    backoffs: Vec<Job>,
}

struct Fake {
    store: Arc<MemoryStore>,
    metrics: Metrics,
    shared: Arc<Mutex<Shared>>,
    /// How long each reconcile takes.
    work: Duration,
    backoff: Duration,
    /// What the loop takes as [`Reconcilers::cluster_wakeups`]; the sender stays here.
    wakeups: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<ObjectKey>>>,
    wake: tokio::sync::mpsc::UnboundedSender<ObjectKey>,
}

impl Fake {
    fn new(store: &Arc<MemoryStore>) -> Arc<Self> {
        Self::with(store, Duration::ZERO, BTreeMap::new())
    }

    fn with(
        store: &Arc<MemoryStore>,
        work: Duration,
        script: BTreeMap<Job, VecDeque<Answer>>,
    ) -> Arc<Self> {
        let (wake, wakeups) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(Fake {
            wakeups: Mutex::new(Some(wakeups)),
            wake,
            store: Arc::clone(store),
            metrics: Metrics::new(),
            shared: Arc::new(Mutex::new(Shared {
                script,
                ..Shared::default()
            })),
            work,
            backoff: Duration::from_millis(30),
        })
    }

    fn calls(&self) -> Vec<Job> {
        self.shared
            .lock()
            .unwrap()
            .calls
            .iter()
            .map(|(j, _)| j.clone())
            .collect()
    }

    fn call_times(&self, job: &Job) -> Vec<Instant> {
        self.shared
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|(j, _)| j == job)
            .map(|(_, t)| *t)
            .collect()
    }
}

/// The group the driver should use: the cluster of a component, from the store.
fn group_of(store: &MemoryStore, job: &Job) -> ObjectKey {
    match job.0 {
        ControllerKind::Component => store
            .object::<Component>(&job.1)
            .map(|c| controller::cluster_of_component(&c))
            .unwrap_or_else(|| job.1.clone()),
        _ => job.1.clone(),
    }
}

impl Reconcilers for Fake {
    fn reconcile(
        &self,
        controller: ControllerKind,
        key: ObjectKey,
    ) -> impl Future<Output = Result<Action, ReconcileError>> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        let store = Arc::clone(&self.store);
        let work = self.work;
        async move {
            let job = (controller, key.clone());
            let group = group_of(&store, &job);
            let answer = {
                let mut s = shared.lock().unwrap();
                s.calls.push((job.clone(), Instant::now()));
                if let Some((other, _)) = s.running.iter().find(|(j, g)| *j == job || *g == group) {
                    let overlap = format!("{job:?} ran with {other:?}");
                    s.overlaps.push(overlap);
                }
                s.running.push((job.clone(), group.clone()));
                s.max_running = s.max_running.max(s.running.len());
                s.script
                    .get_mut(&job)
                    .and_then(VecDeque::pop_front)
                    .unwrap_or(Answer::Await)
            };
            tokio::time::sleep(work).await;
            let mut s = shared.lock().unwrap();
            s.running.retain(|(j, _)| *j != job);
            s.finished.push(job.clone());
            drop(s);
            match answer {
                Answer::Requeue(ms) => Ok(Action::Requeue(Duration::from_millis(ms))),
                Answer::Await => Ok(Action::AwaitChange),
                Answer::Fail => Err(ReconcileError::Store(StoreError::Unavailable(
                    "injected".into(),
                ))),
                Answer::Panic => panic!("injected panic"),
            }
        }
    }

    fn error_backoff(&self, controller: ControllerKind, key: &ObjectKey) -> Duration {
        self.shared
            .lock()
            .unwrap()
            .backoffs
            .push((controller, key.clone()));
        self.backoff
    }

    fn store(&self) -> &MemoryStore {
        &self.store
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn cluster_wakeups(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<ObjectKey>> {
        self.wakeups.lock().unwrap().take()
    }
}

fn cluster(name: &str) -> Cluster {
    Cluster::new(ObjectMeta::namespaced("ns", name), ClusterSpec::default())
}

fn component(name: &str, cluster: &str, hypervisor: Option<&str>) -> Component {
    Component::new(
        ObjectMeta::namespaced("ns", name),
        ComponentSpec {
            cluster: cluster.into(),
            role: ComponentRole::ControlPlane,
            hypervisor: hypervisor.map(str::to_string),
        },
    )
}

fn hypervisor(name: &str) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named(name),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: format!("/run/{name}.sock"),
            }),
            remote_cri_endpoint: None,
            public: false,
            ip_address: "10.0.0.1".into(),
            port_range: PortRange {
                low: 30000,
                high: 30010,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

fn job(kind: ControllerKind, name: &str) -> Job {
    let key = match kind {
        ControllerKind::Hypervisor => ObjectKey::cluster_scoped(name),
        _ => ObjectKey::new("ns", name),
    };
    (kind, key)
}

use ControllerKind::{Cluster as C, Component as K, Hypervisor as H};

fn seeded() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    store.insert(cluster("c1"));
    store.insert(cluster("c2"));
    store.insert(component("k1", "c1", Some("h1")));
    store.insert(component("k2", "c2", None));
    store.insert(hypervisor("h1"));
    store.insert(hypervisor("h2"));
    store
}

/// Polls until `cond` holds, for at most 5 seconds.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(5), "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn sorted(mut jobs: Vec<Job>) -> Vec<Job> {
    jobs.sort();
    jobs
}

#[tokio::test]
async fn every_object_is_reconciled_once_at_start() {
    let store = seeded();
    let fake = Fake::new(&store);
    // Nothing asks for more: the loop idles until the timeout, which reports what it saw.
    let error = run_until(&fake, |_| false, Duration::from_millis(300))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        sorted(fake.calls()),
        vec![
            job(C, "c1"),
            job(C, "c2"),
            job(K, "k1"),
            job(K, "k2"),
            job(H, "h1"),
            job(H, "h2"),
        ]
    );
    assert!(error.contains("within 300ms"), "{error}");
    assert!(error.contains("\n  cluster ns/c1: await change"), "{error}");
    assert!(error.contains("\n  hypervisor h2: await change"), "{error}");
    let metrics = fake.metrics.encode();
    assert!(
        metrics.contains("oi_manager_reconciles_total{controller=\"component\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn changes_are_mapped_to_the_controllers_that_care() {
    let store = seeded();
    let fake = Fake::new(&store);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let script = async {
        eventually("the first round", || fake.calls().len() == 6).await;
        let mut seen = 6;
        let mut next = |expected: usize| {
            let calls = fake.calls();
            let new = sorted(calls[seen..].to_vec());
            assert_eq!(new.len(), expected, "{new:?}");
            seen = calls.len();
            new
        };

        // A Cluster: that cluster.
        let mut c2: Cluster = store.object(&ObjectKey::new("ns", "c2")).unwrap();
        c2.metadata.labels.insert("x".into(), "y".into());
        store.update(&c2).await.unwrap();
        eventually("c2", || fake.calls().len() == 7).await;
        assert_eq!(next(1), vec![job(C, "c2")]);

        // A Component: it and its cluster.
        let mut k2: Component = store.object(&ObjectKey::new("ns", "k2")).unwrap();
        k2.spec.hypervisor = Some("h2".into());
        store.update(&k2).await.unwrap();
        eventually("k2", || fake.calls().len() == 9).await;
        assert_eq!(next(2), vec![job(C, "c2"), job(K, "k2")]);

        // A Hypervisor's spec: it and the clusters with a component on it.
        let mut h2: Hypervisor = store.object(&ObjectKey::cluster_scoped("h2")).unwrap();
        h2.spec.port_range.high -= 1;
        store.update(&h2).await.unwrap();
        eventually("h2", || fake.calls().len() == 11).await;
        assert_eq!(next(2), vec![job(C, "c2"), job(H, "h2")]);

        // Its status only (ports and files, which clusters' reconciles write): itself only.
        let mut h2: Hypervisor = store.object(&ObjectKey::cluster_scoped("h2")).unwrap();
        h2.status.freed_ports = vec![30001];
        store.update_status(&h2).await.unwrap();
        eventually("h2 status", || fake.calls().len() == 12).await;
        assert_eq!(next(1), vec![job(H, "h2")]);

        // A removed Component still names its cluster.
        store
            .delete::<Component>(&ObjectKey::new("ns", "k1"))
            .await
            .unwrap();
        eventually("k1", || fake.calls().len() == 14).await;
        assert_eq!(next(2), vec![job(C, "c1"), job(K, "k1")]);

        // h1 now has no component: only itself.
        store
            .delete::<Hypervisor>(&ObjectKey::cluster_scoped("h1"))
            .await
            .unwrap();
        eventually("h1", || fake.calls().len() == 15).await;
        assert_eq!(next(1), vec![job(H, "h1")]);

        // Nothing else comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(next(0), vec![]);
        stop.send(()).unwrap();
    };
    let never = |_: &MemoryStore| false;
    let driver = drive(
        &fake,
        async {
            let _ = stopped.await;
        },
        &never,
        true,
    );
    let (end, ()) = tokio::join!(driver, script);
    assert!(!end.done);
    assert_eq!(fake.shared.lock().unwrap().overlaps, Vec::<String>::new());
}

#[tokio::test]
async fn a_woken_cluster_is_reconciled_at_once_despite_a_later_requeue() {
    let store = seeded();
    let c1 = job(C, "c1");
    let script = BTreeMap::from([(c1.clone(), VecDeque::from([Answer::Requeue(60_000)]))]);
    let fake = Fake::with(&store, Duration::ZERO, script);
    let wake = async {
        eventually("the first round", || fake.calls().len() == 6).await;
        fake.wake.send(c1.1.clone()).unwrap();
    };
    let done_fake = Arc::clone(&fake);
    let (result, ()) = tokio::join!(
        run_until(
            &fake,
            move |_| done_fake.calls().len() == 7,
            Duration::from_secs(5)
        ),
        wake
    );
    result.unwrap();
    // Only the woken cluster ran again, long before its requeue.
    assert_eq!(fake.calls()[6], c1);
    let times = fake.call_times(&c1);
    assert!(times[1] - times[0] < Duration::from_secs(5));
}

#[tokio::test]
async fn requeues_after_the_delay_and_backs_off_on_errors() {
    let store = Arc::new(MemoryStore::new());
    store.insert(cluster("c1"));
    let c1 = job(C, "c1");
    let script = BTreeMap::from([(
        c1.clone(),
        VecDeque::from([
            Answer::Requeue(80),
            Answer::Fail,
            Answer::Panic,
            Answer::Await,
        ]),
    )]);
    let fake = Fake::with(&store, Duration::ZERO, script);
    let done_fake = Arc::clone(&fake);
    run_until(
        &fake,
        move |_| done_fake.shared.lock().unwrap().finished.len() == 4,
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let times = fake.call_times(&c1);
    assert_eq!(times.len(), 4);
    assert!(times[1] - times[0] >= Duration::from_millis(80));
    // The error and the panic waited for the backoff (30 ms).
    assert!(times[2] - times[1] >= Duration::from_millis(30));
    assert!(times[3] - times[2] >= Duration::from_millis(30));
    assert_eq!(fake.shared.lock().unwrap().backoffs, vec![c1.clone(), c1]);
    let metrics = fake.metrics.encode();
    for line in [
        "oi_manager_reconciles_total{controller=\"cluster\"} 4",
        "oi_manager_reconcile_errors_total{controller=\"cluster\",reason=\"StoreUnavailable\"} 1",
        "oi_manager_reconcile_errors_total{controller=\"cluster\",reason=\"Panic\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    // AwaitChange: nothing more.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fake.calls().len(), 4);
}

#[tokio::test]
async fn a_change_preempts_a_later_requeue() {
    let store = Arc::new(MemoryStore::new());
    store.insert(cluster("c1"));
    let c1 = job(C, "c1");
    let script = BTreeMap::from([(c1.clone(), VecDeque::from([Answer::Requeue(60_000)]))]);
    let fake = Fake::with(&store, Duration::ZERO, script);
    let edit = async {
        eventually("the first run", || fake.calls().len() == 1).await;
        let mut c: Cluster = store.object(&c1.1).unwrap();
        c.spec.control_plane_replicas = Some(3);
        store.update(&c).await.unwrap();
    };
    let done_fake = Arc::clone(&fake);
    let (result, ()) = tokio::join!(
        run_until(
            &fake,
            move |_| done_fake.calls().len() == 2,
            Duration::from_secs(5)
        ),
        edit
    );
    result.unwrap();
    let times = fake.call_times(&c1);
    assert!(times[1] - times[0] < Duration::from_secs(5));
}

#[tokio::test]
async fn runs_four_at_once_never_a_key_or_cluster_twice() {
    let store = Arc::new(MemoryStore::new());
    for i in 0..8 {
        store.insert(cluster(&format!("c{i}")));
    }
    // Three components of c0: they and c0 run one at a time.
    for i in 0..3 {
        store.insert(component(&format!("k{i}"), "c0", None));
    }
    let fake = Fake::with(&store, Duration::from_millis(60), BTreeMap::new());
    let done_fake = Arc::clone(&fake);
    run_until(
        &fake,
        move |_| done_fake.shared.lock().unwrap().finished.len() == 11,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let shared = fake.shared.lock().unwrap();
    assert_eq!(shared.max_running, CONCURRENCY);
    assert_eq!(shared.overlaps, Vec::<String>::new());
    assert_eq!(shared.calls.len(), 11);
}

#[tokio::test]
async fn run_until_returns_when_the_store_is_as_expected() {
    let store = Arc::new(MemoryStore::new());
    store.insert(cluster("c1"));
    store.insert(cluster("c2"));
    let fake = Fake::new(&store);
    // Someone else (a test, a user) writes meanwhile; the driver notices after a reconcile.
    // The write may land while c2's first reconcile is still finishing, so "as expected"
    // is: labelled, and reconciled once more since (else the test races the driver).
    let labelled = |s: &MemoryStore| {
        s.object::<Cluster>(&ObjectKey::new("ns", "c2"))
            .is_some_and(|c| c.metadata.labels.contains_key("seen"))
            && fake.shared.lock().unwrap().finished.len() == 3
    };
    let writer = async {
        eventually("the first round", || fake.calls().len() == 2).await;
        let mut c: Cluster = store.object(&ObjectKey::new("ns", "c2")).unwrap();
        c.metadata.labels.insert("seen".into(), "yes".into());
        store.update(&c).await.unwrap();
    };
    let (result, ()) = tokio::join!(run_until(&fake, labelled, Duration::from_secs(5)), writer);
    result.unwrap();
    assert_eq!(fake.calls(), vec![job(C, "c1"), job(C, "c2"), job(C, "c2")]);
}

#[tokio::test]
async fn shutdown_waits_for_the_reconciles_under_way() {
    let store = Arc::new(MemoryStore::new());
    store.insert(cluster("c1"));
    let fake = Fake::with(&store, Duration::from_millis(150), BTreeMap::new());
    let never = |_: &MemoryStore| false;
    let end = drive(
        &fake,
        tokio::time::sleep(Duration::from_millis(20)),
        &never,
        true,
    )
    .await;
    assert!(!end.done);
    assert_eq!(fake.shared.lock().unwrap().finished, vec![job(C, "c1")]);
    assert_eq!(
        end.last,
        BTreeMap::from([(job(C, "c1"), Outcome::Ok(Action::AwaitChange))])
    );

    // Without grace (run_until's timeout) they are aborted.
    let fake = Fake::with(&store, Duration::from_millis(150), BTreeMap::new());
    let end = drive(
        &fake,
        tokio::time::sleep(Duration::from_millis(20)),
        &never,
        false,
    )
    .await;
    assert_eq!(fake.shared.lock().unwrap().finished, Vec::<Job>::new());
    assert_eq!(end.last, BTreeMap::new());
}

#[tokio::test]
async fn falling_behind_the_changes_lists_everything_again() {
    let store = Arc::new(MemoryStore::new());
    store.insert(cluster("c1"));
    store.insert(cluster("c2"));
    let fake = Fake::new(&store);
    let flood = async {
        eventually("the first round", || fake.calls().len() == 2).await;
        // More changes than the channel holds, without yielding to the driver.
        let mut c: Cluster = store.object(&ObjectKey::new("ns", "c1")).unwrap();
        for i in 0..crate::memory::CHANGE_CAPACITY + 10 {
            c.metadata.labels.insert("i".into(), i.to_string());
            c.metadata.resource_version = None;
            store.update(&c).await.unwrap();
        }
    };
    let done_fake = Arc::clone(&fake);
    let (result, ()) = tokio::join!(
        run_until(
            &fake,
            move |_| done_fake.calls().len() == 4,
            Duration::from_secs(5)
        ),
        flood
    );
    result.unwrap();
    // c2 did not change, yet it is reconciled again: the driver listed everything.
    assert_eq!(
        sorted(fake.calls()),
        vec![job(C, "c1"), job(C, "c1"), job(C, "c2"), job(C, "c2")]
    );
}

// ---- the driver with the real controllers, fake hypervisors and a simulated network ----

mod real {
    use oi_api::common::{ConditionStatus, condition_types, find_condition};
    use oi_cri::HypervisorRuntime as _;
    use oi_cri::fake::FakeRuntime;
    use oi_engine::{HttpsError, HttpsRequest, HttpsResponse};
    use oi_planner::ports::names;
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::memory::Write;
    use oi_manager::controller::{FINALIZER, ManagerOptions};

    struct Runtimes(BTreeMap<String, Arc<FakeRuntime>>);

    impl Connector for Runtimes {
        type Runtime = FakeRuntime;

        async fn connect(
            &self,
            h: &Hypervisor,
        ) -> Result<Arc<FakeRuntime>, oi_engine::ConnectError> {
            self.0.get(&h.metadata.name).cloned().ok_or_else(|| {
                oi_engine::ConnectError::NoEndpoint {
                    hypervisor: h.metadata.name.clone(),
                }
            })
        }
    }

    /// A one-member etcd per cluster (answering once its pod runs) and API servers that
    /// answer, at the endpoints the store's Components and Hypervisors name; the cluster's
    /// own API keeps objects by path and counts its writes.
    struct OneMemberEtcd {
        store: Arc<MemoryStore>,
        runtimes: BTreeMap<String, Arc<FakeRuntime>>,
        api: Arc<std::sync::Mutex<BTreeMap<String, serde_json::Value>>>,
        api_writes: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl OneMemberEtcd {
        fn new(store: Arc<MemoryStore>, runtimes: BTreeMap<String, Arc<FakeRuntime>>) -> Self {
            OneMemberEtcd {
                store,
                runtimes,
                api: Arc::new(std::sync::Mutex::new(BTreeMap::new())),
                api_writes: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            }
        }

        /// The cluster's API: get (a list for a label selector), create, delete.
        fn api(&self, r: &HttpsRequest<'_>) -> HttpsResponse {
            let mut objects = self.api.lock().unwrap();
            let answer = |status: u16, body: &serde_json::Value| HttpsResponse {
                status,
                body: body.to_string().into_bytes(),
            };
            let (path, query) = r.path.split_once('?').unwrap_or((r.path, ""));
            if r.method != http::Method::GET {
                self.api_writes
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            match (r.method.as_str(), query.is_empty()) {
                ("GET", false) => answer(200, &serde_json::json!({"items": []})),
                ("GET", true) if path.ends_with("/nodejoinrequests") => {
                    answer(200, &serde_json::json!({"items": []}))
                }
                ("GET", true) => objects
                    .get(path)
                    .map_or_else(|| answer(404, &serde_json::json!({})), |o| answer(200, o)),
                ("POST", _) => {
                    let body: serde_json::Value = serde_json::from_str(r.body.unwrap()).unwrap();
                    let name = body["metadata"]["name"].as_str().unwrap();
                    objects.insert(format!("{path}/{name}"), body.clone());
                    answer(201, &body)
                }
                (method, _) => panic!("unexpected {method} {path}"),
            }
        }

        /// (member name, peer URL) of the etcd whose client URL is `base`, when its pod runs.
        fn member(&self, base: &str) -> Option<(String, String)> {
            self.store.objects::<Component>().into_iter().find_map(|c| {
                let h: Hypervisor = self
                    .store
                    .object(&ObjectKey::cluster_scoped(c.spec.hypervisor.clone()?))?;
                let url = |port: &str| {
                    c.status
                        .host_port(port)
                        .map(|p| format!("https://{}:{p}", h.spec.ip_address))
                };
                let runs = self
                    .runtimes
                    .get(&h.metadata.name)?
                    .running_pod_id(&format!("{}-etcd", c.metadata.name))
                    .is_some();
                (runs && url(names::ETCD_CLIENT)? == base)
                    .then(|| Some((c.metadata.name.clone(), url(names::ETCD_PEER)?)))?
            })
        }
    }

    impl Network for OneMemberEtcd {
        async fn request(&self, r: HttpsRequest<'_>) -> Result<HttpsResponse, HttpsError> {
            tokio::task::yield_now().await;
            if r.path == "/readyz" {
                return Ok(HttpsResponse {
                    status: 200,
                    body: b"ok".to_vec(),
                });
            }
            if r.path.starts_with("/api") {
                return Ok(self.api(&r));
            }
            panic!("unexpected request {} {}", r.base, r.path)
        }

        fn dialable(&self) -> bool {
            false
        }
    }

    impl oi_engine::etcd::Etcd for OneMemberEtcd {
        async fn members(
            &self,
            endpoint: &str,
            _tls: &oi_engine::https::Tls,
        ) -> Result<Vec<oi_engine::Member>, oi_engine::EtcdError> {
            tokio::task::yield_now().await;
            let (name, peer) = self.member(endpoint).ok_or_else(|| refused(endpoint))?;
            Ok(vec![oi_engine::Member {
                id: 1,
                name,
                peer_urls: vec![peer],
                client_urls: vec![endpoint.to_string()],
                is_learner: false,
            }])
        }

        async fn add_learner(
            &self,
            _: &str,
            _: &oi_engine::https::Tls,
            _: &str,
        ) -> Result<(), oi_engine::EtcdError> {
            panic!("one member only")
        }

        async fn promote(
            &self,
            _: &str,
            _: &oi_engine::https::Tls,
            _: u64,
        ) -> Result<(), oi_engine::EtcdError> {
            panic!("one member only")
        }

        async fn remove(
            &self,
            _: &str,
            _: &oi_engine::https::Tls,
            _: u64,
        ) -> Result<(), oi_engine::EtcdError> {
            panic!("one member only")
        }

        async fn healthy(
            &self,
            endpoint: &str,
            _tls: &oi_engine::https::Tls,
        ) -> Result<bool, oi_engine::EtcdError> {
            tokio::task::yield_now().await;
            self.member(endpoint).ok_or_else(|| refused(endpoint))?;
            Ok(true)
        }

        async fn status(
            &self,
            _: &str,
            _: &oi_engine::https::Tls,
        ) -> Result<oi_engine::etcd::MemberStatus, oi_engine::EtcdError> {
            panic!("no status asked in these tests")
        }

        async fn transfer_leadership(
            &self,
            _: &str,
            _: &oi_engine::https::Tls,
            _: u64,
        ) -> Result<(), oi_engine::EtcdError> {
            panic!("one member only")
        }

        async fn snapshot(
            &self,
            _: &str,
            _: &oi_engine::https::Tls,
            _: &oi_engine::etcd::SnapshotSink,
        ) -> Result<u64, oi_engine::EtcdError> {
            panic!("no snapshot taken in these tests")
        }
    }

    fn refused(endpoint: &str) -> oi_engine::EtcdError {
        oi_engine::EtcdError::Unreachable {
            endpoint: endpoint.to_string(),
            reason: "connection refused".into(),
        }
    }

    fn hypervisor(name: &str, public: bool, ip: &str) -> Hypervisor {
        let mut h = super::hypervisor(name);
        h.spec.public = public;
        h.spec.ip_address = ip.into();
        h.spec.port_range = PortRange {
            low: 30000,
            high: 30099,
        };
        h
    }

    fn ready(store: &MemoryStore) -> bool {
        store
            .object::<Cluster>(&ObjectKey::new("ns", "c"))
            .and_then(|c| {
                find_condition(&c.status.conditions, condition_types::RECONCILE_SUCCEEDED)
                    .map(|s| s.status == ConditionStatus::True)
            })
            .unwrap_or(false)
    }

    fn pods(runtimes: &BTreeMap<String, Arc<FakeRuntime>>) -> Vec<String> {
        runtimes
            .iter()
            .flat_map(|(h, rt)| {
                futures::executor::block_on(rt.list_pods(&BTreeMap::new()))
                    .unwrap()
                    .into_iter()
                    .map(move |p| format!("{h}/{}", p.name))
            })
            .collect()
    }

    #[tokio::test]
    async fn a_cluster_comes_up_stays_quiet_and_goes_away() {
        let store = Arc::new(MemoryStore::new());
        store.insert(hypervisor("private-1", false, "10.0.0.1"));
        store.insert(hypervisor("public-1", true, "10.0.1.1"));
        let mut c = cluster("c");
        c.spec.control_plane_replicas = Some(1);
        store.insert(c);
        let runtimes: BTreeMap<String, Arc<FakeRuntime>> = ["private-1", "public-1"]
            .into_iter()
            .map(|h| (h.to_string(), Arc::new(FakeRuntime::new(h))))
            .collect();
        let mut options = ManagerOptions::default();
        options.execute.max_wait = Duration::from_secs(2);
        options.execute.poll_interval = Duration::from_millis(5);
        let metrics = Arc::new(Metrics::new());
        let network = OneMemberEtcd::new(Arc::clone(&store), runtimes.clone());
        let api_writes = Arc::clone(&network.api_writes);
        let api_objects = Arc::clone(&network.api);
        let ctx = Arc::new(Context::new(
            Arc::clone(&store),
            Runtimes(runtimes.clone()),
            network,
            options,
            Arc::clone(&metrics),
        ));
        let driver = Driver::new(Arc::clone(&ctx));

        driver
            .run_until(ready, Duration::from_secs(20))
            .await
            .unwrap();
        let components = store.objects::<Component>();
        assert_eq!(
            components
                .iter()
                .map(|c| (c.metadata.name.as_str(), c.metadata.finalizers.clone()))
                .collect::<Vec<_>>(),
            vec![
                ("c-control-plane-0", vec![FINALIZER.to_string()]),
                ("c-ingress", vec![FINALIZER.to_string()]),
            ]
        );
        let running = pods(&runtimes);
        assert!(
            running
                .iter()
                .any(|p| p.starts_with("private-1/c-control-plane-0"))
                && running.iter().any(|p| p.starts_with("public-1/c-ingress")),
            "{running:?}"
        );
        let text = metrics.encode();
        for line in [
            "oi_manager_hypervisor_reachable{hypervisor=\"private-1\"} 1",
            "oi_manager_hypervisor_reachable{hypervisor=\"public-1\"} 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            !text.contains("oi_manager_reconcile_errors_total{"),
            "no reconcile failed: {text}"
        );

        // The cluster's objects were written inside it.
        let written = api_writes.load(std::sync::atomic::Ordering::SeqCst);
        let inside: Vec<String> = api_objects.lock().unwrap().keys().cloned().collect();
        assert_eq!(written, inside.len(), "{inside:?}");
        assert!(
            inside.contains(&"/api/v1/namespaces/oneinfra-system/configmaps/oneinfra-join".into()),
            "{inside:?}"
        );

        // Converged: another run reconciles everything once more and writes nothing, in
        // the store or inside the cluster.
        store.clear_writes();
        let quiet = driver
            .run_until(|_| false, Duration::from_millis(500))
            .await
            .unwrap_err()
            .to_string();
        assert!(quiet.contains("cluster ns/c: requeue in 300s"), "{quiet}");
        assert_eq!(store.writes(), Vec::<Write>::new());
        assert_eq!(
            api_writes.load(std::sync::atomic::Ordering::SeqCst),
            written
        );

        // Deleted: torn down, released, gone.
        store
            .delete::<Cluster>(&ObjectKey::new("ns", "c"))
            .await
            .unwrap();
        let rt = runtimes.clone();
        driver
            .run_until(
                move |s| {
                    s.objects::<Cluster>().is_empty()
                        && s.objects::<Component>().is_empty()
                        && pods(&rt).is_empty()
                },
                Duration::from_secs(20),
            )
            .await
            .unwrap();
        for h in store.objects::<Hypervisor>() {
            assert_eq!(h.status.allocated_ports, vec![], "{}", h.metadata.name);
        }
    }
}
