//! Pod start latency: `ensure_pod` (list + image checks + RunPodSandbox + CreateContainer +
//! StartContainer) against the raw three CRI calls, on a private containerd; plus the no-op
//! `ensure_pod` and a `run_to_completion`. Prints the median and range of N runs.
//!
//! ```text
//! cargo run --release -p oi-cri --example pod_latency -- 20
//! ```
//! Needs root, containerd, runc, ctr and the offline images (`cargo xtask images`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed measurement aborts the run

#[path = "../tests/common/fixture.rs"]
mod fixture;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fixture::{BUSYBOX, Fixture};
use oi_api::runtime::{ContainerSpec, PodSpec};
use oi_cri::{HypervisorRuntime, Outcome, requests};

fn pod(i: usize, kind: &str) -> PodSpec {
    PodSpec {
        namespace: "bench".into(),
        name: format!("{kind}-{i}"),
        labels: BTreeMap::new(),
        containers: vec![ContainerSpec {
            name: "sleep".into(),
            image: BUSYBOX.into(),
            command: vec!["sleep".into(), "3600".into()],
            args: vec![],
            env: BTreeMap::new(),
            mounts: vec![],
            privileged: false,
            resources: None,
        }],
    }
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<32} median {:>7.1} ms   min {:>7.1} ms   max {:>7.1} ms   (n={})",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().context("N must be a number")?,
        None => 20,
    };
    if n == 0 {
        bail!("N must be at least 1");
    }
    let Some(fx) = Fixture::start("pod_latency").await else {
        bail!("prerequisites missing (see the SKIPPED banner)");
    };
    let client = &fx.client;
    let (mut ensure, mut raw, mut noop, mut run) = (vec![], vec![], vec![], vec![]);
    for i in 0..n {
        // ensure_pod, creating a new pod.
        let spec = pod(i, "ensure");
        let t = Instant::now();
        let outcome = client.ensure_pod(&spec).await?;
        ensure.push(t.elapsed());
        assert_eq!(outcome, Outcome::Created);

        // The same spec again: observation only.
        let t = Instant::now();
        assert_eq!(client.ensure_pod(&spec).await?, Outcome::Unchanged);
        noop.push(t.elapsed());

        // The three raw calls with the same requests.
        let spec = pod(i, "raw");
        let config = requests::sandbox_config(&spec, &fx.options.log_root);
        let t = Instant::now();
        let id = client.run_sandbox(&config).await?;
        let request = requests::create_container_request(&id, &spec.containers[0], &config);
        let cid = client.create_container(&request).await?;
        client.start_container(&cid).await?;
        raw.push(t.elapsed());

        let mut job = spec.containers[0].clone();
        job.command = vec!["true".into()];
        let t = Instant::now();
        let exit = client
            .run_to_completion(&job, Duration::from_secs(30))
            .await?;
        run.push(t.elapsed());
        assert_eq!(exit.code, 0);

        for p in client.list_pods(&BTreeMap::new()).await? {
            client.remove_pod(&p.id).await?;
        }
    }
    report("raw RunPodSandbox+Create+Start", raw);
    report("ensure_pod (created)", ensure);
    report("ensure_pod (unchanged, no-op)", noop);
    report("run_to_completion (`true`)", run);
    Ok(())
}
