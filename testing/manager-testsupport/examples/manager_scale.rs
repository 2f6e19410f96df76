//! Manager scale: N Clusters (default 1,000, one replica each) as custom resources on the
//! management API server stand-in (over HTTPS on loopback, its objects in a real etcd), the
//! manager's own reconcile functions over `KubeStore` (kube-rs, with the watch caches the
//! binary uses), hypervisors simulated (oi-cri's `FakeRuntime`, oi-engine's `SimNetwork`:
//! pods, etcd and API servers answer in memory).
//!
//! It brings every cluster up (passes of every Cluster, Component and Hypervisor reconcile
//! until every Cluster is ready), then times a full resync with nothing to do (each of them
//! reconciled once, at the binary's default concurrency), which must write nothing, and
//! prints:
//! - the API requests of the resync by verb (GET of one object, LIST, WATCH, writes);
//! - its time;
//! - this process's memory (the manager's side and the stand-in's API; the objects are in
//!   etcd, whose memory is printed apart) and the growth per cluster.
//!
//! With `--list`, the resync LISTs what it lists from the API server, as the manager did
//! before its watch caches: the comparison of the two is the caches' effect.
//!
//! With `OI_BENCH_REQUESTS` set, every request of the resync is printed too (to stderr).
//!
//! Usage: cargo run --release -p oi-manager-testsupport --example manager_scale --
//! [N] [PRIVATE] [--list]
//! (PRIVATE private hypervisors, default N/10, and one public one per ten of them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use oi_api::common::{ConditionStatus, condition_types, find_condition};
use oi_api::{
    Cluster, ClusterSpec, Component, Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectKey,
    ObjectMeta, PortRange,
};
use oi_cri::fake::FakeRuntime;
use oi_engine::{ConnectError, Connector, ExecuteOptions};
use oi_engine_testsupport::sim;
use oi_manager::cache::{self, WatchCache};
use oi_manager::controller::{Context, ControllerKind, ManagerOptions, reconcile};
use oi_manager::kube_store::KubeStore;
use oi_manager::metrics::Metrics;
use oi_manager::store::{ObjectEvent, Result as StoreResult, Store, Stored};
use oi_manager_testsupport::apiserver_standin::{ApiServer, StandinOptions};

/// The binary's default `--concurrency`.
const CONCURRENCY: usize = 16;

struct FakeConnector(BTreeMap<String, Arc<FakeRuntime>>);

impl Connector for FakeConnector {
    type Runtime = FakeRuntime;

    async fn connect(&self, h: &Hypervisor) -> Result<Arc<FakeRuntime>, ConnectError> {
        let name = h.metadata.name.clone();
        self.0
            .get(&name)
            .cloned()
            .ok_or(ConnectError::NoEndpoint { hypervisor: name })
    }
}

/// The simulated network finds etcd members and API servers among the Components and
/// Hypervisors of the manager's watch cache.
struct CacheSource(Arc<WatchCache>);

impl sim::Source for CacheSource {
    fn find_component<T>(&self, f: impl FnMut(&Component) -> Option<T>) -> Option<T> {
        self.0.find_map(f)
    }
    fn find_hypervisor<T>(&self, f: impl FnMut(&Hypervisor) -> Option<T>) -> Option<T> {
        self.0.find_map(f)
    }
    fn with_component<T>(
        &self,
        key: &ObjectKey,
        f: impl FnOnce(&Component) -> Option<T>,
    ) -> Option<T> {
        self.0.with_object(key, f)
    }
}

/// `KubeStore` with its watch cache, whose reads can go to the API server again (`--list`:
/// every list a LIST, nothing known from the cache).
struct BenchStore {
    cached: KubeStore,
    uncached: KubeStore,
    list: std::sync::atomic::AtomicBool,
}

impl BenchStore {
    fn lists(&self) -> &KubeStore {
        if self.list.load(std::sync::atomic::Ordering::Relaxed) {
            &self.uncached
        } else {
            &self.cached
        }
    }
}

impl Store for BenchStore {
    async fn get<K: Stored>(&self, key: &ObjectKey) -> StoreResult<Option<K>> {
        self.cached.get(key).await
    }
    async fn list<K: Stored>(&self, namespace: Option<&str>) -> StoreResult<Vec<K>> {
        self.lists().list(namespace).await
    }
    async fn list_map<K: Stored, T: Send>(
        &self,
        namespace: Option<&str>,
        f: impl Fn(&K) -> T + Send,
    ) -> StoreResult<Vec<T>> {
        self.lists().list_map(namespace, f).await
    }
    fn cached<K: Stored, T>(&self, key: &ObjectKey, f: impl FnOnce(&K) -> T) -> Option<T> {
        self.lists().cached(key, f)
    }
    async fn create<K: Stored>(&self, object: &K) -> StoreResult<K> {
        self.cached.create(object).await
    }
    async fn update<K: Stored>(&self, object: &K) -> StoreResult<K> {
        self.cached.update(object).await
    }
    async fn update_status<K: Stored>(&self, object: &K) -> StoreResult<K> {
        self.cached.update_status(object).await
    }
    async fn delete<K: Stored>(&self, key: &ObjectKey) -> StoreResult<()> {
        self.cached.delete::<K>(key).await
    }
    async fn publish(&self, event: &ObjectEvent) -> StoreResult<()> {
        self.cached.publish(event).await
    }
}

/// `(VmRSS, VmHWM)` of process `pid` (`self` for this one), in KiB.
fn rss(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ready(c: &Cluster) -> bool {
    find_condition(&c.status.conditions, condition_types::RECONCILE_SUCCEEDED)
        .is_some_and(|c| c.status == ConditionStatus::True)
}

/// The verb of a recorded request (`METHOD path?query`): a GET of one object, a LIST of a
/// collection, a WATCH, or the method of a write.
fn verb(request: &str) -> &'static str {
    let (method, target) = request.split_once(' ').unwrap_or((request, ""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
    {
        return "WATCH";
    }
    match method {
        "GET" => {
            // .../<plural> lists; .../<plural>/<name> (and subresources) get one object.
            let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
            let after_version = match segments.first() {
                Some(&"api") => 2,
                _ => 3,
            };
            let rest = &segments[after_version.min(segments.len())..];
            let rest = match rest {
                ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
                other => other,
            };
            if rest.len() <= 1 { "LIST" } else { "GET" }
        }
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        _ => "other",
    }
}

/// The manager binary's allocator.
#[global_allocator]
static ALLOCATOR: oi_manager::Allocator = oi_manager::Allocator;

fn main() -> anyhow::Result<()> {
    let mut list = false;
    let mut numbers = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--list" => list = true,
            n => numbers.push(
                n.parse::<usize>()
                    .with_context(|| format!("not a number: {n}"))?,
            ),
        }
    }
    let n = numbers.first().copied().unwrap_or(1000);
    let private = numbers.get(1).copied().unwrap_or((n / 10).max(1));
    let public = private.div_ceil(10).max(1);
    let server = ApiServer::start(StandinOptions {
        etcd: true,
        namespaces: Vec::new(),
        // Long enough that no watch ends during a measurement.
        watch_timeout: Duration::from_secs(1800),
        ..StandinOptions::default()
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
        .enable_all()
        .build()?;
    runtime.block_on(run(&server, n, private, public, list))
}

async fn run(
    server: &ApiServer,
    n: usize,
    private: usize,
    public: usize,
    list: bool,
) -> anyhow::Result<()> {
    let mut runtimes = BTreeMap::new();
    for (i, is_public) in (0..private)
        .map(|i| (i, false))
        .chain((0..public).map(|i| (i, true)))
    {
        let name = format!("{}-{i}", if is_public { "public" } else { "private" });
        server.create(&Hypervisor::new(
            ObjectMeta::named(&name),
            HypervisorSpec {
                local_cri_endpoint: Some(LocalCriEndpoint {
                    cri_endpoint_path: format!("/run/{name}.sock"),
                }),
                remote_cri_endpoint: None,
                public: is_public,
                ip_address: format!("10.{}.{}.{}", u8::from(is_public), i / 250, i % 250 + 1),
                port_range: PortRange {
                    low: 20000,
                    high: 60000,
                },
                unschedulable: false,
                drain: false,
                capacity: None,
            },
        ))?;
        runtimes.insert(name.clone(), Arc::new(FakeRuntime::new(&name)));
    }
    let client = server.client().await?;
    let cache = Arc::new(WatchCache::start(&client, None, &cache::CACHED_KINDS));
    tokio::time::timeout(Duration::from_secs(60), cache.synced())
        .await
        .context("the watch caches did not sync in 60 s")?;
    let store = Arc::new(BenchStore {
        cached: KubeStore::new(client.clone(), "bench", "bench").with_cache(Arc::clone(&cache)),
        uncached: KubeStore::new(client.clone(), "bench", "bench"),
        list: false.into(),
    });
    let network = sim::SimNetwork::new(CacheSource(Arc::clone(&cache)), runtimes.clone());
    let options = ManagerOptions {
        execute: ExecuteOptions {
            max_wait: Duration::from_secs(30),
            poll_interval: Duration::from_millis(5),
            ..ManagerOptions::default().execute
        },
        ..ManagerOptions::default()
    };
    let ctx = Arc::new(Context::new(
        Arc::clone(&store),
        FakeConnector(runtimes),
        network,
        options,
        Arc::new(Metrics::new()),
    ));
    let etcd_pid = server
        .etcd()
        .map(|e| e.pid().to_string())
        .context("the stand-in has no etcd")?;
    let (before, _) = rss("self");
    let (etcd_before, _) = rss(&etcd_pid);
    for i in 0..n {
        server.create(&Cluster::new(
            ObjectMeta::namespaced("default", format!("c{i}")),
            ClusterSpec {
                control_plane_replicas: Some(1),
                ..ClusterSpec::default()
            },
        ))?;
    }
    println!(
        "{n} clusters (1 replica) over {private} private and {public} public simulated hypervisors; the API server stand-in over HTTPS, objects in etcd; concurrency {CONCURRENCY}"
    );
    let start = Instant::now();
    let deadline = start + Duration::from_secs(3600);
    let mut passes = 0;
    loop {
        let (seen, not_ready) = cache
            .list_map::<Cluster, _>(None, ready)
            .context("the cache answers")??
            .into_iter()
            .fold((0, 0), |(seen, not), r| (seen + 1, not + usize::from(!r)));
        if seen == n && not_ready == 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{not_ready} of {n} clusters not ready after {passes} passes"
        );
        resync(&ctx, &cache).await;
        passes += 1;
    }
    let up = start.elapsed();
    let (after, peak) = rss("self");
    let (etcd_after, _) = rss(&etcd_pid);
    println!(
        "all ready after {:.1} s ({passes} passes of every reconcile)",
        up.as_secs_f64()
    );
    println!(
        "this process (manager side and the stand-in's API): RSS {:.1} MiB before the clusters, {:.1} MiB after ({:.1} KiB per cluster), peak {:.1} MiB; etcd {:.1} MiB before, {:.1} MiB after",
        mib(before),
        mib(after),
        after.saturating_sub(before) as f64 / n as f64,
        mib(peak),
        mib(etcd_before),
        mib(etcd_after),
    );

    // A full resync with nothing to do: every object reconciled once.
    store.list.store(list, std::sync::atomic::Ordering::Relaxed);
    server.local().api().clear_requests();
    let start = Instant::now();
    let (objects, failed) = resync(&ctx, &cache).await;
    let took = start.elapsed();
    let requests = server.requests();
    if std::env::var_os("OI_BENCH_REQUESTS").is_some() {
        for r in &requests {
            eprintln!("{r}");
        }
    }
    let mut verbs: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &requests {
        *verbs.entry(verb(r)).or_default() += 1;
    }
    let writes: usize = ["POST", "PUT", "PATCH", "DELETE"]
        .iter()
        .map(|v| verbs.get(v).copied().unwrap_or(0))
        .sum();
    let (_, peak) = rss("self");
    println!(
        "full resync with nothing to do ({objects} objects, lists from {}): {:.2} s, {failed} failed, {writes} writes; peak RSS {:.1} MiB",
        if list { "LISTs" } else { "the watch caches" },
        took.as_secs_f64(),
        mib(peak),
    );
    println!(
        "API requests of the resync: {} in all; {}",
        requests.len(),
        verbs
            .iter()
            .map(|(v, n)| format!("{v} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    anyhow::ensure!(failed == 0 && writes == 0, "the resync was not a no-op");
    Ok(())
}

/// Every Cluster, then every Component, then every Hypervisor reconciled once, each on a
/// task of its own (as `oi-manager run` runs them: on every worker thread), at most
/// [`CONCURRENCY`] at a time. Returns how many, and how many failed.
async fn resync<S: Store, C: Connector + 'static, N: oi_engine::https::Network + 'static>(
    ctx: &Arc<Context<S, C, N>>,
    cache: &WatchCache,
) -> (usize, usize) {
    let clusters = keys_of::<Cluster>(cache);
    let components = keys_of::<Component>(cache);
    let hypervisors = keys_of::<Hypervisor>(cache);
    let objects = clusters.len() + components.len() + hypervisors.len();
    let spawn = |kind: ControllerKind, key: ObjectKey| {
        let ctx = Arc::clone(ctx);
        async move {
            tokio::spawn(async move { reconcile(kind, &key, &ctx).await.is_ok() })
                .await
                .unwrap_or(false)
        }
    };
    let mut failed = 0;
    for (kind, keys) in [
        (ControllerKind::Cluster, clusters),
        (ControllerKind::Component, components),
        (ControllerKind::Hypervisor, hypervisors),
    ] {
        failed += futures::stream::iter(keys)
            .map(|k| spawn(kind, k))
            .buffer_unordered(CONCURRENCY)
            .filter(|ok| std::future::ready(!ok))
            .count()
            .await;
    }
    (objects, failed)
}

fn keys_of<K: Stored>(cache: &WatchCache) -> Vec<ObjectKey> {
    cache
        .list_map::<K, _>(None, |o| o.key())
        .and_then(Result::ok)
        .unwrap_or_default()
}
