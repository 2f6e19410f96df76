//! Planning at scale: `cargo bench -p oi-planner --bench plan [-- CLUSTERS]`.
//!
//! Prepares CLUSTERS (default 1000) clusters of 3 control plane replicas over 100 hypervisors
//! (90 private in 3 zones, 10 public), and prints wall time and peak RSS (`VmHWM`) for:
//!
//! - `pki excluded`: every cluster already holds its CAs and keys (copied from one generated
//!   set before timing) and leaf certificates are off (`PrepareOptions::leaf_certificates`), so only
//!   derivation, scheduling and port allocation are measured;
//! - `leaves`: the same with leaf certificates on: 22 leaves per cluster issued;
//! - `converged`: preparing that prepared world again (the steady state of every reconcile:
//!   nothing minted, every leaf certificate parsed and checked);
//! - `pki no join`: CLUSTERS clusters holding only their join key, so that preparation mints
//!   8 ECDSA P-256 CAs and a P-256 service-account key per cluster;
//! - `render+steps`: `plan_prepared` of the converged world: every pod and file of every
//!   hypervisor, the pods to restart, each cluster's etcd steps and the engine's etcd client
//!   identity (one P-256 certificate per cluster);
//! - `pki included`: RSA_CLUSTERS (default 20) clusters without any CA or key: the above plus
//!   a join key of the cluster's algorithm (P-256 here: oi-pki wraps with ECIES) per cluster; fewer
//!   clusters, since 1000 of them take minutes. Per cluster figures scale linearly.
//!
//! The peak is reset between runs (`/proc/self/clear_refs`), so each figure is its own.

use std::time::Instant;

use oi_api::{
    Certificate, Cluster, ClusterSpec, Hypervisor, HypervisorSpec, KeyPair, LocalCriEndpoint,
    ObjectMeta, PortRange, Resource, World,
};
use oi_pki::{ClusterPki, KeyAlgorithm};
use oi_planner::render::RenderOptions;
use oi_planner::{ClusterPlan, Prepared, plan_prepared};
use oi_planner::{PrepareOptions, prepare_with, schedule::ZONE_LABEL};
use time::{Duration, OffsetDateTime};

fn hypervisors() -> Vec<Hypervisor> {
    (0..100)
        .map(|i| {
            let public = i >= 90;
            let mut meta = ObjectMeta::named(format!("hv-{i:03}"));
            if !public {
                meta.labels
                    .insert(ZONE_LABEL.into(), format!("zone-{}", i % 3));
            }
            Hypervisor::new(
                meta,
                HypervisorSpec {
                    local_cri_endpoint: Some(LocalCriEndpoint {
                        cri_endpoint_path: format!("/run/hv-{i:03}/containerd.sock"),
                    }),
                    remote_cri_endpoint: None,
                    public,
                    ip_address: format!("10.{}.{}.1", i / 250, i % 250),
                    port_range: PortRange {
                        low: 30000,
                        high: 32767,
                    },
                    capacity: None,
                    unschedulable: false,
                    drain: false,
                },
            )
        })
        .collect()
}

fn world(clusters: usize, pki: Option<&ClusterPki>) -> World {
    let mut w = World::default();
    for h in hypervisors() {
        w.hypervisors.insert(h.key(), h);
    }
    for i in 0..clusters {
        let mut c = Cluster::new(
            ObjectMeta::namespaced(format!("team-{}", i % 10), format!("cluster-{i:04}")),
            ClusterSpec {
                control_plane_replicas: Some(3),
                ..ClusterSpec::default()
            },
        );
        if let Some(pki) = pki {
            let cert = |ca: &oi_pki::CertificateAuthority| {
                Some(Certificate {
                    certificate: ca.certificate_pem().to_string(),
                    private_key: ca.private_key_pem().to_string(),
                })
            };
            let s = &mut c.spec;
            s.api_server.ca = cert(&pki.api_server);
            s.etcd_server.ca = cert(&pki.etcd_server);
            let cas = &mut s.certificate_authorities;
            cas.api_server_client = cert(&pki.api_server_client);
            cas.certificate_signer = cert(&pki.certificate_signer);
            cas.kubelet = cert(&pki.kubelet);
            cas.kubelet_client = cert(&pki.kubelet_client);
            cas.etcd_client = cert(&pki.etcd_client);
            cas.etcd_peer = cert(&pki.etcd_peer);
            s.api_server.service_account = Some(KeyPair {
                public_key: pki.service_account.public_key_pem.clone(),
                private_key: pki.service_account.private_key_pem.clone(),
            });
            s.join_key = Some(KeyPair {
                public_key: pki.join_key.public_key_pem.clone(),
                private_key: pki.join_key.private_key_pem.clone(),
            });
        }
        w.clusters.insert(c.key(), c);
    }
    w
}

fn reset_peak() {
    // "5" resets the peak RSS counter (Linux >= 4.0); without it the figures are cumulative.
    if std::fs::write("/proc/self/clear_refs", "5").is_err() {
        eprintln!("note: could not reset VmHWM; peaks are cumulative");
    }
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn run(label: &str, input: World, now: OffsetDateTime, options: &PrepareOptions) -> World {
    let clusters = input.clusters.len();
    reset_peak();
    let start = Instant::now();
    let prepared = prepare_with(input, now, options);
    let elapsed = start.elapsed();
    let peak = peak_rss_mib();
    let ports: usize = prepared
        .world
        .hypervisors
        .values()
        .map(|h| h.status.allocated_ports.len())
        .sum();
    println!(
        "{label:<13} clusters={clusters:<5} components={:<5} ports={ports:<6} failures={} wall={:>9.3} ms  peak_rss={:.1} MiB",
        prepared.world.components.len(),
        prepared.failures.len(),
        elapsed.as_secs_f64() * 1e3,
        peak,
    );
    prepared.world
}

fn main() {
    // `cargo bench` passes `--bench`; numbers are positional.
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let clusters = numbers.first().copied().unwrap_or(1000);
    let now = OffsetDateTime::now_utc();

    let pki =
        match ClusterPki::generate("bench", KeyAlgorithm::EcdsaP256, now, Duration::days(3650)) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("generating the shared bench PKI: {e}");
                std::process::exit(1);
            }
        };
    let full = PrepareOptions::default();
    let planning_only = PrepareOptions {
        leaf_certificates: false,
        ..PrepareOptions::default()
    };
    let planned = run(
        "pki excluded",
        world(clusters, Some(&pki)),
        now,
        &planning_only,
    );
    let again = run("plan again", planned.clone(), now, &planning_only);
    if again != planned {
        eprintln!("planning a planned world changed it");
        std::process::exit(1);
    }
    drop((planned, again));
    let prepared = run("leaves", world(clusters, Some(&pki)), now, &full);
    let again = run("converged", prepared.clone(), now, &full);
    if again != prepared {
        eprintln!("preparing a prepared world changed it");
        std::process::exit(1);
    }
    drop(prepared);
    reset_peak();
    let start = Instant::now();
    let hypervisors = again.hypervisors.len();
    let planned = plan_prepared(
        Prepared {
            world: again,
            failures: Default::default(),
            lost: Default::default(),
        },
        now,
        &RenderOptions::default(),
    );
    let elapsed = start.elapsed();
    let (mut pods, mut files, mut failures) = (0, 0, 0);
    for cluster in planned.clusters.values() {
        match cluster {
            ClusterPlan::Converge(c) => {
                pods += c
                    .components
                    .iter()
                    .map(|c| c.rendered.pods.len())
                    .sum::<usize>();
                files += c
                    .components
                    .iter()
                    .map(|c| c.rendered.files.len())
                    .sum::<usize>();
            }
            ClusterPlan::Unplannable(e) => {
                failures += 1;
                eprintln!("planning failed: {e}");
            }
            ClusterPlan::Teardown(_) => {}
        }
    }
    println!(
        "{:<13} hypervisors={hypervisors:<3} pods={pods:<5} files={files:<6} failures={failures} wall={:>9.3} ms  peak_rss={:.1} MiB",
        "render+steps",
        elapsed.as_secs_f64() * 1e3,
        peak_rss_mib(),
    );
    if failures > 0 {
        std::process::exit(1);
    }
    drop(planned);
    let fresh = run("pki included", world(clusters, None), now, &full);
    let generated = fresh
        .clusters
        .values()
        .filter(|c| c.spec.join_key.is_some() && c.spec.etcd_server.ca.is_some())
        .count();
    if generated != clusters {
        eprintln!("only {generated} of {clusters} clusters got their PKI");
        std::process::exit(1);
    }
}
