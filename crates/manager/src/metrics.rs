//! Prometheus metrics of the manager, served on `/metrics` in the text exposition format.
//!
//! - `oi_manager_reconciles_total{controller}`: reconciles run.
//! - `oi_manager_reconcile_errors_total{controller,reason}`: reconciles that failed, by reason.
//! - `oi_manager_reconcile_duration_seconds{controller}`: how long reconciles took.
//! - `oi_manager_hypervisor_reachable{hypervisor}`: 1 when its CRI endpoint answered the last
//!   probe, 0 when not.
//! - `oi_manager_leader`: 1 while this replica holds the leader Lease.
//! - `oi_manager_cluster_certificate_expiry_timestamp_seconds{namespace,cluster}`: when the
//!   first certificate of a cluster expires (its CAs, its client certificates, its
//!   components'), in seconds since the epoch; alert on `... - time() < 30 * 86400`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HypervisorLabels {
    hypervisor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    namespace: String,
    cluster: String,
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~82 s: unchanged clusters take milliseconds, a new one seconds.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.005, 2.0, 15,
    ))
}

/// The manager's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    reachable: Family<HypervisorLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    certificate_expiry: Family<ClusterLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("oi_manager");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations =
            Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        let reachable =
            Family::<HypervisorLabels, Gauge<i64, std::sync::atomic::AtomicI64>>::default();
        let leader = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
        let certificate_expiry =
            Family::<ClusterLabels, Gauge<i64, std::sync::atomic::AtomicI64>>::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by reason",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long reconciles took",
            durations.clone(),
        );
        registry.register(
            "hypervisor_reachable",
            "1 when the hypervisor's CRI endpoint answered the last probe",
            reachable.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            leader.clone(),
        );
        registry.register(
            "cluster_certificate_expiry_timestamp_seconds",
            "When the first certificate of a cluster expires, in seconds since the epoch",
            certificate_expiry.clone(),
        );
        Metrics {
            registry,
            reconciles,
            errors,
            durations,
            reachable,
            leader,
            certificate_expiry,
        }
    }

    /// Records one reconcile of `controller` (`cluster`, `component` or `hypervisor`) that
    /// took `duration` and failed with `error_reason`, if it failed.
    pub fn observe_reconcile(
        &self,
        controller: &str,
        duration: Duration,
        error_reason: Option<&str>,
    ) {
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
        if let Some(reason) = error_reason {
            self.errors
                .get_or_create(&ErrorLabels {
                    controller: controller.to_string(),
                    reason: reason.to_string(),
                })
                .inc();
        }
    }

    pub fn set_hypervisor_reachable(&self, hypervisor: &str, reachable: bool) {
        self.reachable
            .get_or_create(&HypervisorLabels {
                hypervisor: hypervisor.to_string(),
            })
            .set(i64::from(reachable));
    }

    /// Forgets a hypervisor that left the store.
    pub fn remove_hypervisor(&self, hypervisor: &str) {
        self.reachable.remove(&HypervisorLabels {
            hypervisor: hypervisor.to_string(),
        });
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Records when the first certificate of cluster `cluster` expires, `None` when the
    /// cluster is gone (or holds none yet).
    pub fn set_certificate_expiry(&self, cluster: &oi_api::ObjectKey, first: Option<i64>) {
        let labels = ClusterLabels {
            namespace: cluster.namespace.clone(),
            cluster: cluster.name.clone(),
        };
        match first {
            Some(seconds) => {
                self.certificate_expiry.get_or_create(&labels).set(seconds);
            }
            None => {
                self.certificate_expiry.remove(&labels);
            }
        }
    }

    /// The text exposition format (OpenMetrics), as served on `/metrics`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_what_was_recorded() {
        let m = Metrics::new();
        m.observe_reconcile("cluster", Duration::from_millis(30), None);
        m.observe_reconcile("cluster", Duration::from_millis(10), Some("Conflict"));
        m.set_hypervisor_reachable("h1", true);
        m.set_hypervisor_reachable("h2", false);
        m.set_leader(true);
        let text = m.encode();
        assert!(
            text.contains("oi_manager_reconciles_total{controller=\"cluster\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "oi_manager_reconcile_errors_total{controller=\"cluster\",reason=\"Conflict\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("oi_manager_reconcile_duration_seconds_count{controller=\"cluster\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("oi_manager_hypervisor_reachable{hypervisor=\"h1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("oi_manager_hypervisor_reachable{hypervisor=\"h2\"} 0"),
            "{text}"
        );
        assert!(text.contains("oi_manager_leader 1"), "{text}");
        m.remove_hypervisor("h2");
        assert!(!m.encode().contains("h2"));
        let c = oi_api::ObjectKey::new("team-a", "demo");
        m.set_certificate_expiry(&c, Some(2_000_000_000));
        assert!(
            m.encode().contains(
                "oi_manager_cluster_certificate_expiry_timestamp_seconds{namespace=\"team-a\",cluster=\"demo\"} 2000000000"
            ),
            "{}",
            m.encode()
        );
        m.set_certificate_expiry(&c, None);
        assert!(!m.encode().contains("demo"));
    }
}
