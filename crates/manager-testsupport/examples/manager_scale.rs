//! Manager scale: N Clusters (default 1,000, one replica each) in the in-process store, the
//! manager's own controllers run by the in-process driver, hypervisors simulated (oi-cri's
//! `FakeRuntime`, oi-engine's `SimNetwork`: pods, etcd and API servers answer in memory).
//! Prints the time until every cluster is ready, the process's peak RSS and the memory per
//! cluster, and the time of a full resync with nothing to do (every Cluster, Component and
//! Hypervisor reconciled once, at the driver's concurrency), which must write nothing.
//!
//! Usage: cargo run --release -p oi-manager-testsupport --example manager_scale -- [N] [PRIVATE]
//! (PRIVATE private hypervisors, default 100, and one public one per ten of them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use oi_api::common::{ConditionStatus, condition_types, find_condition};
use oi_api::{
    Cluster, ClusterSpec, Component, Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectMeta,
    PortRange, Resource as _,
};
use oi_cri::fake::FakeRuntime;
use oi_engine::{ConnectError, Connector, ExecuteOptions};
use oi_engine_testsupport::sim;
use oi_manager::controller::{
    Context, ManagerOptions, reconcile_cluster, reconcile_component, reconcile_hypervisor,
};
use oi_manager::metrics::Metrics;
use oi_manager_testsupport::driver::{CONCURRENCY, Driver};
use oi_manager_testsupport::memory::{MemoryStore, StoreSource};

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

/// `VmRSS` and `VmHWM` (peak) of this process, in KiB.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
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

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let private: usize = args.next().map_or(Ok(100), |a| a.parse())?;
    let public = private.div_ceil(10).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
        .enable_all()
        .build()?;
    runtime.block_on(run(n, private, public))
}

async fn run(n: usize, private: usize, public: usize) -> anyhow::Result<()> {
    let store = Arc::new(MemoryStore::default());
    let mut runtimes = BTreeMap::new();
    for (i, is_public) in (0..private)
        .map(|i| (i, false))
        .chain((0..public).map(|i| (i, true)))
    {
        let name = format!("{}-{i}", if is_public { "public" } else { "private" });
        store.insert(Hypervisor::new(
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
        ));
        runtimes.insert(name.clone(), Arc::new(FakeRuntime::new(&name)));
    }
    let network = sim::SimNetwork::new(StoreSource(Arc::clone(&store)), runtimes.clone());
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
    let (before, _) = rss();
    for i in 0..n {
        store.insert(Cluster::new(
            ObjectMeta::namespaced("default", format!("c{i}")),
            ClusterSpec {
                control_plane_replicas: Some(1),
                ..ClusterSpec::default()
            },
        ));
    }
    println!(
        "{n} clusters (1 replica) over {private} private and {public} public simulated hypervisors; concurrency {CONCURRENCY}"
    );
    let start = Instant::now();
    Driver::new(Arc::clone(&ctx))
        .run_until(
            |s| {
                // Without copying every cluster at each change.
                let mut seen = 0;
                s.find_map::<Cluster, ()>(|c| {
                    seen += 1;
                    (!ready(c)).then_some(())
                })
                .is_none()
                    && seen == n
            },
            Duration::from_secs(3600),
        )
        .await?;
    let up = start.elapsed();
    let (after, peak) = rss();
    println!("all ready after {:.1} s", up.as_secs_f64());
    println!(
        "RSS {:.1} MiB before the clusters, {:.1} MiB after ({:.1} KiB per cluster: its objects, caches and certificates); peak {:.1} MiB",
        mib(before),
        mib(after),
        (after.saturating_sub(before)) as f64 / n as f64,
        mib(peak)
    );

    // A full resync with nothing to do: every object reconciled once.
    store.clear_writes();
    let clusters: Vec<_> = store.objects::<Cluster>().iter().map(|c| c.key()).collect();
    let components: Vec<_> = store
        .objects::<Component>()
        .iter()
        .map(|c| c.key())
        .collect();
    let hypervisors: Vec<_> = store
        .objects::<Hypervisor>()
        .iter()
        .map(|h| h.key())
        .collect();
    let start = Instant::now();
    let failed = futures::stream::iter(clusters.iter())
        .map(|k| reconcile_cluster(k, &ctx))
        .buffer_unordered(CONCURRENCY)
        .chain(
            futures::stream::iter(components.iter())
                .map(|k| reconcile_component(k, &ctx))
                .buffer_unordered(CONCURRENCY),
        )
        .chain(
            futures::stream::iter(hypervisors.iter())
                .map(|k| reconcile_hypervisor(k, &ctx))
                .buffer_unordered(CONCURRENCY),
        )
        .filter(|r| std::future::ready(r.is_err()))
        .count()
        .await;
    let resync = start.elapsed();
    let writes = store.writes().len();
    println!(
        "full resync with nothing to do ({} clusters, {} components, {} hypervisors): {:.2} s, {failed} failed, {writes} writes",
        clusters.len(),
        components.len(),
        hypervisors.len(),
        resync.as_secs_f64()
    );
    anyhow::ensure!(failed == 0 && writes == 0, "the resync was not a no-op");
    Ok(())
}
