//! The flag names of the real binaries (Kubernetes 1.3x command-line references on
//! kubernetes.io), with the kind pflag parses each as. Flags the stand-in does not act on are
//! still accepted and type-checked, so a command line that the real binary would refuse is
//! refused here too, and one it would take is taken.

use super::{Kind, Spec};
use crate::Role;

use Kind::{Array, Bool, Duration as Dur, File, Float, Help, Int, Ip, List, Map, Str, Version};

const fn f(name: &'static str, kind: Kind) -> Spec {
    Spec {
        name,
        kind,
        shorthand: None,
    }
}

const fn short(name: &'static str, kind: Kind, shorthand: char) -> Spec {
    Spec {
        name,
        kind,
        shorthand: Some(shorthand),
    }
}

/// Global flags of every Kubernetes component: help, version, logging, feature gates, metrics.
const GLOBAL: &[Spec] = &[
    short("help", Help, 'h'),
    f("version", Version),
    short("v", Int, 'v'),
    f("vmodule", List),
    f("log-flush-frequency", Dur),
    f("logging-format", Str),
    f("log-json-info-buffer-size", Str),
    f("log-json-split-stream", Bool),
    f("log-text-info-buffer-size", Str),
    f("log-text-split-stream", Bool),
    f("feature-gates", Map),
    f("allow-metric-labels", Map),
    f("allow-metric-labels-manifest", File),
    f("disabled-metrics", List),
    f("show-hidden-metrics-for-version", Str),
    f("contention-profiling", Bool),
    f("profiling", Bool),
];

/// Secure serving, shared by the three binaries.
const SECURE_SERVING: &[Spec] = &[
    f("bind-address", Ip),
    f("cert-dir", Str),
    f("disable-http2-serving", Bool),
    f("http2-max-streams-per-connection", Int),
    f("permit-address-sharing", Bool),
    f("permit-port-sharing", Bool),
    f("secure-port", Int),
    f("tls-cert-file", File),
    f("tls-cipher-suites", List),
    f("tls-min-version", Str),
    f("tls-private-key-file", File),
    f("tls-sni-cert-key", Array),
];

/// Front-proxy (request header) authentication, shared by the three binaries.
const REQUEST_HEADER: &[Spec] = &[
    f("client-ca-file", File),
    f("requestheader-allowed-names", List),
    f("requestheader-client-ca-file", File),
    f("requestheader-extra-headers-prefix", List),
    f("requestheader-group-headers", List),
    f("requestheader-username-headers", List),
    f("requestheader-uid-headers", List),
];

/// Delegated authentication and authorization of the controller-manager and scheduler.
const DELEGATED_AUTH: &[Spec] = &[
    f("authentication-kubeconfig", File),
    f("authentication-skip-lookup", Bool),
    f("authentication-token-webhook-cache-ttl", Dur),
    f("authentication-tolerate-lookup-failure", Bool),
    f("authorization-always-allow-paths", List),
    f("authorization-kubeconfig", File),
    f("authorization-webhook-cache-authorized-ttl", Dur),
    f("authorization-webhook-cache-unauthorized-ttl", Dur),
];

/// Leader election and API client settings of the controller-manager and scheduler.
const CLIENT_AND_LEADER: &[Spec] = &[
    f("kubeconfig", File),
    f("master", Str),
    f("kube-api-burst", Int),
    f("kube-api-content-type", Str),
    f("kube-api-qps", Float),
    f("leader-elect", Bool),
    f("leader-elect-lease-duration", Dur),
    f("leader-elect-renew-deadline", Dur),
    f("leader-elect-resource-lock", Str),
    f("leader-elect-resource-name", Str),
    f("leader-elect-resource-namespace", Str),
    f("leader-elect-retry-period", Dur),
];

const APISERVER: &[Spec] = &[
    // generic
    f("advertise-address", Ip),
    f("aggregator-reject-forwarding-redirect", Bool),
    f("cloud-config", File),
    f("cloud-provider", Str),
    f("cloud-provider-gce-l7lb-src-cidrs", List),
    f("cloud-provider-gce-lb-src-cidrs", List),
    f("cors-allowed-origins", List),
    f("default-not-ready-toleration-seconds", Int),
    f("default-unreachable-toleration-seconds", Int),
    f("emulated-version", List),
    f("enable-priority-and-fairness", Bool),
    f("external-hostname", Str),
    f("goaway-chance", Float),
    f("livez-grace-period", Dur),
    f("max-mutating-requests-inflight", Int),
    f("max-requests-inflight", Int),
    f("min-request-timeout", Int),
    f("request-timeout", Dur),
    f("shutdown-delay-duration", Dur),
    f("shutdown-send-retry-after", Bool),
    f("shutdown-watch-termination-grace-period", Dur),
    f("storage-initialization-timeout", Dur),
    f("strict-transport-security-directives", List),
    // etcd
    f("delete-collection-workers", Int),
    f("enable-garbage-collector", Bool),
    f("encryption-provider-config", File),
    f("encryption-provider-config-automatic-reload", Bool),
    f("etcd-cafile", File),
    f("etcd-certfile", File),
    f("etcd-compaction-interval", Dur),
    f("etcd-count-metric-poll-period", Dur),
    f("etcd-db-metric-poll-interval", Dur),
    f("etcd-healthcheck-timeout", Dur),
    f("etcd-keyfile", File),
    f("etcd-prefix", Str),
    f("etcd-readycheck-timeout", Dur),
    f("etcd-servers", List),
    f("etcd-servers-overrides", List),
    f("lease-reuse-duration-seconds", Int),
    f("storage-backend", Str),
    f("storage-media-type", Str),
    f("watch-cache", Bool),
    f("watch-cache-sizes", List),
    f("default-watch-cache-size", Int),
    // auditing
    f("audit-log-batch-buffer-size", Int),
    f("audit-log-batch-max-size", Int),
    f("audit-log-batch-max-wait", Dur),
    f("audit-log-batch-throttle-burst", Int),
    f("audit-log-batch-throttle-enable", Bool),
    f("audit-log-batch-throttle-qps", Float),
    f("audit-log-compress", Bool),
    f("audit-log-format", Str),
    f("audit-log-maxage", Int),
    f("audit-log-maxbackup", Int),
    f("audit-log-maxsize", Int),
    f("audit-log-mode", Str),
    f("audit-log-path", Str),
    f("audit-log-truncate-enabled", Bool),
    f("audit-log-truncate-max-batch-size", Int),
    f("audit-log-truncate-max-event-size", Int),
    f("audit-log-version", Str),
    f("audit-policy-file", File),
    f("audit-webhook-batch-buffer-size", Int),
    f("audit-webhook-batch-initial-backoff", Dur),
    f("audit-webhook-batch-max-size", Int),
    f("audit-webhook-batch-max-wait", Dur),
    f("audit-webhook-batch-throttle-burst", Int),
    f("audit-webhook-batch-throttle-enable", Bool),
    f("audit-webhook-batch-throttle-qps", Float),
    f("audit-webhook-config-file", File),
    f("audit-webhook-initial-backoff", Dur),
    f("audit-webhook-mode", Str),
    f("audit-webhook-truncate-enabled", Bool),
    f("audit-webhook-truncate-max-batch-size", Int),
    f("audit-webhook-truncate-max-event-size", Int),
    f("audit-webhook-version", Str),
    f("debug-socket-path", Str),
    // authentication
    f("anonymous-auth", Bool),
    f("api-audiences", List),
    f("authentication-config", File),
    f("authentication-token-webhook-cache-ttl", Dur),
    f("authentication-token-webhook-config-file", File),
    f("authentication-token-webhook-version", Str),
    f("enable-bootstrap-token-auth", Bool),
    f("oidc-ca-file", File),
    f("oidc-client-id", Str),
    f("oidc-groups-claim", Str),
    f("oidc-groups-prefix", Str),
    f("oidc-issuer-url", Str),
    f("oidc-required-claim", Map),
    f("oidc-signing-algs", List),
    f("oidc-username-claim", Str),
    f("oidc-username-prefix", Str),
    f("service-account-extend-token-expiration", Bool),
    f("service-account-issuer", Array),
    f("service-account-jwks-uri", Str),
    f("service-account-key-file", Array),
    f("service-account-lookup", Bool),
    f("service-account-max-token-expiration", Dur),
    f("service-account-signing-endpoint", Str),
    f("token-auth-file", File),
    // authorization
    f("authorization-config", File),
    f("authorization-mode", List),
    f("authorization-policy-file", File),
    f("authorization-webhook-cache-authorized-ttl", Dur),
    f("authorization-webhook-cache-unauthorized-ttl", Dur),
    f("authorization-webhook-config-file", File),
    f("authorization-webhook-version", Str),
    // api enablement, admission, egress, tracing
    f("runtime-config", Map),
    f("admission-control", List),
    f("admission-control-config-file", File),
    f("disable-admission-plugins", List),
    f("enable-admission-plugins", List),
    f("egress-selector-config-file", File),
    f("tracing-config-file", File),
    // misc
    f("allow-privileged", Bool),
    f("apiserver-count", Int),
    f("enable-aggregator-routing", Bool),
    f("enable-logs-handler", Bool),
    f("endpoint-reconciler-type", Str),
    f("event-ttl", Dur),
    f("kubelet-certificate-authority", File),
    f("kubelet-client-certificate", File),
    f("kubelet-client-key", File),
    f("kubelet-port", Int),
    f("kubelet-preferred-address-types", List),
    f("kubelet-read-only-port", Int),
    f("kubelet-timeout", Dur),
    f("kubernetes-service-node-port", Int),
    f("max-connection-bytes-per-sec", Int),
    f("peer-advertise-ip", Str),
    f("peer-advertise-port", Str),
    f("peer-ca-file", File),
    f("proxy-client-cert-file", File),
    f("proxy-client-key-file", File),
    f("service-account-signing-key-file", File),
    f("service-cluster-ip-range", Str),
    f("service-node-port-range", Str),
];

const CONTROLLER_MANAGER: &[Spec] = &[
    f("allocate-node-cidrs", Bool),
    f("attach-detach-reconcile-sync-period", Dur),
    f("cidr-allocator-type", Str),
    f("cloud-config", File),
    f("cloud-provider", Str),
    f("cloud-provider-gce-lb-src-cidrs", List),
    f("cluster-cidr", Str),
    f("cluster-name", Str),
    f("cluster-signing-cert-file", File),
    f("cluster-signing-duration", Dur),
    f("cluster-signing-key-file", File),
    f("cluster-signing-kube-apiserver-client-cert-file", File),
    f("cluster-signing-kube-apiserver-client-key-file", File),
    f("cluster-signing-kubelet-client-cert-file", File),
    f("cluster-signing-kubelet-client-key-file", File),
    f("cluster-signing-kubelet-serving-cert-file", File),
    f("cluster-signing-kubelet-serving-key-file", File),
    f("cluster-signing-legacy-unknown-cert-file", File),
    f("cluster-signing-legacy-unknown-key-file", File),
    f("concurrent-cron-job-syncs", Int),
    f("concurrent-daemonset-syncs", Int),
    f("concurrent-deployment-syncs", Int),
    f("concurrent-endpoint-syncs", Int),
    f("concurrent-ephemeralvolume-syncs", Int),
    f("concurrent-gc-syncs", Int),
    f("concurrent-horizontal-pod-autoscaler-syncs", Int),
    f("concurrent-job-syncs", Int),
    f("concurrent-namespace-syncs", Int),
    f("concurrent-rc-syncs", Int),
    f("concurrent-replicaset-syncs", Int),
    f("concurrent-resource-quota-syncs", Int),
    f("concurrent-service-endpoint-syncs", Int),
    f("concurrent-service-syncs", Int),
    f("concurrent-serviceaccount-token-syncs", Int),
    f("concurrent-statefulset-syncs", Int),
    f("concurrent-ttl-after-finished-syncs", Int),
    f("concurrent-validating-admission-policy-status-syncs", Int),
    f("configure-cloud-routes", Bool),
    f("controller-start-interval", Dur),
    f("controllers", List),
    f("disable-attach-detach-reconcile-sync", Bool),
    f("disable-force-detach-on-timeout", Bool),
    f("enable-dynamic-provisioning", Bool),
    f("enable-garbage-collector", Bool),
    f("enable-hostpath-provisioner", Bool),
    f("enable-leader-migration", Bool),
    f("endpoint-updates-batch-period", Dur),
    f("endpointslice-updates-batch-period", Dur),
    f("external-cloud-volume-plugin", Str),
    f("flex-volume-plugin-dir", Str),
    f("horizontal-pod-autoscaler-cpu-initialization-period", Dur),
    f("horizontal-pod-autoscaler-downscale-stabilization", Dur),
    f("horizontal-pod-autoscaler-initial-readiness-delay", Dur),
    f("horizontal-pod-autoscaler-sync-period", Dur),
    f("horizontal-pod-autoscaler-tolerance", Float),
    f("large-cluster-size-threshold", Int),
    f("leader-migration-config", File),
    f("legacy-service-account-token-clean-up-period", Dur),
    f("max-endpoints-per-slice", Int),
    f("min-resync-period", Dur),
    f("mirroring-concurrent-service-endpoint-syncs", Int),
    f("mirroring-endpointslice-updates-batch-period", Dur),
    f("mirroring-max-endpoints-per-subset", Int),
    f("namespace-sync-period", Dur),
    f("node-cidr-mask-size", Int),
    f("node-cidr-mask-size-ipv4", Int),
    f("node-cidr-mask-size-ipv6", Int),
    f("node-eviction-rate", Float),
    f("node-monitor-grace-period", Dur),
    f("node-monitor-period", Dur),
    f("node-startup-grace-period", Dur),
    f("pv-recycler-increment-timeout-nfs", Int),
    f("pv-recycler-minimum-timeout-hostpath", Int),
    f("pv-recycler-minimum-timeout-nfs", Int),
    f("pv-recycler-pod-template-filepath-hostpath", Str),
    f("pv-recycler-pod-template-filepath-nfs", Str),
    f("pv-recycler-timeout-increment-hostpath", Int),
    f("pvclaimbinder-sync-period", Dur),
    f("resource-quota-sync-period", Dur),
    f("root-ca-file", File),
    f("route-reconciliation-period", Dur),
    f("secondary-node-eviction-rate", Float),
    f("service-account-private-key-file", File),
    f("service-cluster-ip-range", Str),
    f("terminated-pod-gc-threshold", Int),
    f("unhealthy-zone-threshold", Float),
    f("use-service-account-credentials", Bool),
    f("volume-host-allow-local-loopback", Bool),
    f("volume-host-cidr-denylist", List),
];

const SCHEDULER: &[Spec] = &[
    f("config", File),
    f("pod-max-in-unschedulable-pods-duration", Dur),
    f("write-config-to", Str),
];

/// Every flag of `role`'s real binary, sorted by name.
pub fn table(role: Role) -> Vec<Spec> {
    let parts: &[&[Spec]] = match role {
        Role::ApiServer => &[GLOBAL, SECURE_SERVING, REQUEST_HEADER, APISERVER],
        Role::ControllerManager => &[
            GLOBAL,
            SECURE_SERVING,
            REQUEST_HEADER,
            DELEGATED_AUTH,
            CLIENT_AND_LEADER,
            CONTROLLER_MANAGER,
        ],
        Role::Scheduler => &[
            GLOBAL,
            SECURE_SERVING,
            REQUEST_HEADER,
            DELEGATED_AUTH,
            CLIENT_AND_LEADER,
            SCHEDULER,
        ],
    };
    let mut specs: Vec<Spec> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    specs.sort_by_key(|s| s.name);
    specs.dedup_by_key(|s| s.name);
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_no_conflicting_duplicates() {
        for role in [Role::ApiServer, Role::ControllerManager, Role::Scheduler] {
            let parts: Vec<Spec> = match role {
                Role::ApiServer => [GLOBAL, SECURE_SERVING, REQUEST_HEADER, APISERVER].concat(),
                Role::ControllerManager => [
                    GLOBAL,
                    SECURE_SERVING,
                    REQUEST_HEADER,
                    DELEGATED_AUTH,
                    CLIENT_AND_LEADER,
                    CONTROLLER_MANAGER,
                ]
                .concat(),
                Role::Scheduler => [
                    GLOBAL,
                    SECURE_SERVING,
                    REQUEST_HEADER,
                    DELEGATED_AUTH,
                    CLIENT_AND_LEADER,
                    SCHEDULER,
                ]
                .concat(),
            };
            let mut names: Vec<&str> = parts.iter().map(|s| s.name).collect();
            let total = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), total, "{role:?} declares a flag twice");
            assert!(table(role).iter().all(|s| !s.name.contains('_')));
        }
    }
}
