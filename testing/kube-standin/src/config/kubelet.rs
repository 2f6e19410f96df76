//! The kubelet's configuration: its flags and its `KubeletConfiguration` file
//! (`kubelet.config.k8s.io/v1beta1`), decoded strictly (an unknown field is an error, as the
//! real kubelet's strict decoding makes it), flags taking precedence over the file.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{ConfigError, Result, invalid, missing, path};
use crate::flags::{Flags, parse_go_duration, parse_go_int};

/// The fields of `KubeletConfiguration` v1beta1 (Kubernetes 1.3x).
const FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "enableServer",
    "staticPodPath",
    "podLogsDir",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupRoot",
    "cgroupsPerQOS",
    "cgroupDriver",
    "cpuManagerPolicy",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "runtimeRequestTimeout",
    "hairpinMode",
    "maxPods",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "memoryThrottlingFactor",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "localStorageCapacityIsolation",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
];

/// The nested objects decoded strictly too, and their fields.
const NESTED: &[(&str, &[&str])] = &[
    ("authentication", &["x509", "webhook", "anonymous"]),
    ("authentication.x509", &["clientCAFile"]),
    ("authentication.webhook", &["enabled", "cacheTTL"]),
    ("authentication.anonymous", &["enabled"]),
    ("authorization", &["mode", "webhook"]),
    (
        "authorization.webhook",
        &["cacheAuthorizedTTL", "cacheUnauthorizedTTL"],
    ),
    (
        "logging",
        &[
            "format",
            "flushFrequency",
            "verbosity",
            "vmodule",
            "options",
        ],
    ),
    ("memorySwap", &["swapBehavior"]),
];

/// A taint to register the Node with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// The validated kubelet configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    /// `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// `--hostname-override`, else the host name, lowercased.
    pub node_name: String,
    /// The serving address (`address`, 0.0.0.0).
    pub address: IpAddr,
    /// The serving port (`port`, 10250).
    pub port: u16,
    /// `/healthz` over plain HTTP (`healthzBindAddress`:`healthzPort`); `None` when 0.
    pub healthz: Option<(IpAddr, u16)>,
    /// The serving certificate and key (`tlsCertFile`/`tlsPrivateKeyFile`); self-signed in
    /// `cert_dir` when absent.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    /// `authentication.x509.clientCAFile`.
    pub client_ca: Option<PathBuf>,
    /// `authentication.anonymous.enabled`.
    pub anonymous: bool,
    /// `authentication.webhook.enabled` (bearer tokens checked with TokenReviews).
    pub webhook_authentication: bool,
    /// `authorization.mode`: `AlwaysAllow` or `Webhook` (SubjectAccessReviews).
    pub authorization_mode: String,
    /// `--node-ip`.
    pub node_ips: Vec<IpAddr>,
    /// `--node-labels`.
    pub labels: BTreeMap<String, String>,
    /// `registerWithTaints` / `--register-with-taints`.
    pub taints: Vec<Taint>,
    /// `registerNode`.
    pub register_node: bool,
    /// `--register-schedulable`.
    pub register_schedulable: bool,
    /// `podCIDR`.
    pub pod_cidr: Option<String>,
    /// `maxPods` (110).
    pub max_pods: i64,
    /// `nodeStatusUpdateFrequency` (10 s).
    pub node_status_update_frequency: Duration,
    /// `nodeLeaseDurationSeconds` (40).
    pub node_lease_duration_seconds: i64,
    /// `clusterDNS`.
    pub cluster_dns: Vec<String>,
    /// `clusterDomain`.
    pub cluster_domain: String,
    /// `containerRuntimeEndpoint`.
    pub container_runtime_endpoint: String,
    /// `providerID`.
    pub provider_id: Option<String>,
    /// The configuration as `/configz` shows it.
    pub effective: Value,
}

fn field_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn check_fields(file: &Path, value: &Value) -> Result<()> {
    let strict = |location: &str, object: &Value, known: &[&str]| -> Result<()> {
        if let Some(map) = object.as_object() {
            for key in map.keys() {
                if !known.contains(&key.as_str()) {
                    return Err(invalid(
                        "config",
                        &file.display().to_string(),
                        format!(
                            "strict decoding error: unknown field {:?}",
                            field_path(location, key)
                        ),
                    ));
                }
            }
        }
        Ok(())
    };
    strict("", value, FIELDS)?;
    for (location, known) in NESTED {
        let mut current = value;
        for part in location.split('.') {
            current = &current[part];
        }
        strict(location, current, known)?;
    }
    Ok(())
}

/// Reads a `KubeletConfiguration` file.
///
/// # Errors
/// Unreadable, not YAML, not a `KubeletConfiguration`, or an unknown field.
pub fn read_file(file: &Path) -> Result<Value> {
    let shown = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError::Unreadable {
        flag: "config".to_string(),
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let value: Value = serde_yaml_ng::from_str(&text)
        .map_err(|e| invalid("config", &shown, format!("not YAML: {e}")))?;
    if !value.is_object() {
        return Err(invalid(
            "config",
            &shown,
            "not a KubeletConfiguration object",
        ));
    }
    if value["kind"] != "KubeletConfiguration"
        || value["apiVersion"] != "kubelet.config.k8s.io/v1beta1"
    {
        return Err(invalid(
            "config",
            &shown,
            format!(
                "no kind \"KubeletConfiguration\" of apiVersion \"kubelet.config.k8s.io/v1beta1\" (found kind {} apiVersion {})",
                value["kind"], value["apiVersion"]
            ),
        ));
    }
    check_fields(file, &value)?;
    Ok(value)
}

fn duration_field(value: &Value, field: &str, default: Duration) -> Result<Duration> {
    match value[field].as_str() {
        None => Ok(default),
        Some(text) => parse_go_duration(text)
            .ok_or_else(|| invalid("config", text, format!("{field}: not a duration"))),
    }
}

fn parse_taint(text: &str) -> Result<Taint> {
    let bad = || {
        invalid(
            "register-with-taints",
            text,
            "a taint is key[=value]:Effect, the effect NoSchedule, PreferNoSchedule or NoExecute",
        )
    };
    let (kv, effect) = text.rsplit_once(':').ok_or_else(bad)?;
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        return Err(bad());
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(bad());
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.to_string(),
        effect: effect.to_string(),
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_ascii_lowercase())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// Validates the kubelet's flags and configuration file.
///
/// # Errors
/// The first problem found.
pub fn kubelet(flags: &Flags) -> Result<KubeletConfig> {
    missing(flags, &["kubeconfig"])?;
    super::check_files(crate::Role::Kubelet, flags)?;
    let kubeconfig = path(flags, "kubeconfig").unwrap_or_default();
    if !kubeconfig.is_file() {
        let bootstrap = flags.is_set("bootstrap-kubeconfig");
        return Err(ConfigError::Unreadable {
            flag: "kubeconfig".to_string(),
            path: kubeconfig.display().to_string(),
            reason: if bootstrap {
                "no such file; TLS bootstrapping (--bootstrap-kubeconfig) is not done by the kubelet stand-in: give it a kubeconfig".to_string()
            } else {
                "no such file".to_string()
            },
        });
    }
    let file = match path(flags, "config") {
        Some(p) => read_file(&p)?,
        None => Value::Object(Default::default()),
    };
    let from_file = !file.as_object().is_some_and(|m| m.is_empty());
    // Flags win over the file; the file's defaults are v1beta1's.
    let flag_or = |flag: &str, field: &Value| -> Option<String> {
        flags.get(flag).map(str::to_string).or_else(|| match field {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        })
    };
    let address: IpAddr = flag_or("address", &file["address"])
        .unwrap_or_else(|| "0.0.0.0".to_string())
        .parse()
        .map_err(|_| {
            invalid(
                "address",
                &flag_or("address", &file["address"]).unwrap_or_default(),
                "not an IP address",
            )
        })?;
    let int = |flag: &str, field: &str, default: i64| -> Result<i64> {
        match flag_or(flag, &file[field]) {
            None => Ok(default),
            Some(v) => parse_go_int(&v).ok_or_else(|| invalid(flag, &v, "not an integer")),
        }
    };
    let port = int("port", "port", 10250)?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| invalid("port", &port.to_string(), "must be between 1 and 65535"))?;
    let healthz_port = int("healthz-port", "healthzPort", 10248)?;
    let healthz_address: IpAddr = flag_or("healthz-bind-address", &file["healthzBindAddress"])
        .unwrap_or_else(|| "127.0.0.1".to_string())
        .parse()
        .map_err(|_| invalid("healthz-bind-address", "", "not an IP address"))?;
    let healthz = u16::try_from(healthz_port)
        .ok()
        .filter(|p| *p > 0)
        .map(|p| (healthz_address, p));
    let tls = match (
        flag_or("tls-cert-file", &file["tlsCertFile"]),
        flag_or("tls-private-key-file", &file["tlsPrivateKeyFile"]),
    ) {
        (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
        (None, None) => None,
        _ => {
            return Err(invalid(
                "tls-cert-file",
                "",
                "tlsCertFile and tlsPrivateKeyFile go together",
            ));
        }
    };
    let auth = &file["authentication"];
    let bool_or = |flag: &str, field: &Value, default: bool| -> bool {
        match flags.get(flag) {
            Some(v) => crate::flags::parse_go_bool(v).unwrap_or(default),
            None => field.as_bool().unwrap_or(default),
        }
    };
    // v1beta1 defaults for a configuration file; the legacy flag defaults without one.
    let anonymous = bool_or("anonymous-auth", &auth["anonymous"]["enabled"], !from_file);
    let webhook_authentication = bool_or(
        "authentication-token-webhook",
        &auth["webhook"]["enabled"],
        from_file,
    );
    let authorization_mode = flag_or("authorization-mode", &file["authorization"]["mode"])
        .unwrap_or_else(|| {
            if from_file {
                "Webhook".to_string()
            } else {
                "AlwaysAllow".to_string()
            }
        });
    if !["AlwaysAllow", "Webhook"].contains(&authorization_mode.as_str()) {
        return Err(invalid(
            "authorization-mode",
            &authorization_mode,
            "must be AlwaysAllow or Webhook",
        ));
    }
    let client_ca = flag_or("client-ca-file", &auth["x509"]["clientCAFile"]).map(PathBuf::from);
    let node_ips = match flags.get("node-ip") {
        Some(v) if !v.is_empty() => v
            .split(',')
            .map(|ip| {
                ip.trim().parse::<IpAddr>().map_err(|_| {
                    invalid("node-ip", v, "not a comma-separated list of IP addresses")
                })
            })
            .collect::<Result<Vec<_>>>()?,
        _ => Vec::new(),
    };
    let labels: BTreeMap<String, String> = flags
        .items("node-labels")
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let mut taints = Vec::new();
    for t in flags
        .items("register-with-taints")
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|t| !t.is_empty())
    {
        taints.push(parse_taint(t)?);
    }
    for t in file["registerWithTaints"].as_array().into_iter().flatten() {
        taints.push(Taint {
            key: t["key"].as_str().unwrap_or_default().to_string(),
            value: t["value"].as_str().unwrap_or_default().to_string(),
            effect: t["effect"].as_str().unwrap_or_default().to_string(),
        });
    }
    let node_status_update_frequency = match flags.get("node-status-update-frequency") {
        Some(v) => parse_go_duration(v)
            .ok_or_else(|| invalid("node-status-update-frequency", v, "not a duration"))?,
        None => duration_field(&file, "nodeStatusUpdateFrequency", Duration::from_secs(10))?,
    };
    let node_lease_duration_seconds = file["nodeLeaseDurationSeconds"].as_i64().unwrap_or(40);
    if node_lease_duration_seconds <= 0 {
        return Err(invalid(
            "config",
            &node_lease_duration_seconds.to_string(),
            "nodeLeaseDurationSeconds must be greater than 0",
        ));
    }
    let cluster_dns: Vec<String> = if flags.is_set("cluster-dns") {
        flags
            .items("cluster-dns")
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::to_string)
            .collect()
    } else {
        file["clusterDNS"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    for dns in &cluster_dns {
        dns.parse::<IpAddr>()
            .map_err(|_| invalid("cluster-dns", dns, "not an IP address"))?;
    }
    let mut effective = file.clone();
    if let Some(map) = effective.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    Ok(KubeletConfig {
        kubeconfig,
        node_name: flags
            .get("hostname-override")
            .map_or_else(hostname, |h| h.trim().to_ascii_lowercase()),
        address,
        port,
        healthz,
        tls,
        cert_dir: path(flags, "cert-dir").unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/pki")),
        client_ca,
        anonymous,
        webhook_authentication,
        authorization_mode,
        node_ips,
        labels,
        taints,
        register_node: bool_or("register-node", &file["registerNode"], true),
        register_schedulable: flags.bool_or("register-schedulable", true),
        pod_cidr: flag_or("pod-cidr", &file["podCIDR"]),
        max_pods: int("max-pods", "maxPods", 110)?,
        node_status_update_frequency,
        node_lease_duration_seconds,
        cluster_dns,
        cluster_domain: flag_or("cluster-domain", &file["clusterDomain"]).unwrap_or_default(),
        container_runtime_endpoint: flag_or(
            "container-runtime-endpoint",
            &file["containerRuntimeEndpoint"],
        )
        .unwrap_or_else(|| "unix:///run/containerd/containerd.sock".to_string()),
        provider_id: flag_or("provider-id", &file["providerID"]),
        effective,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse_as_the_kubelet_reads_them() {
        assert_eq!(
            parse_taint("a=b:NoSchedule").unwrap(),
            Taint {
                key: "a".into(),
                value: "b".into(),
                effect: "NoSchedule".into()
            }
        );
        assert_eq!(
            parse_taint("node-role.kubernetes.io/edge:NoExecute")
                .unwrap()
                .value,
            ""
        );
        assert!(parse_taint("a=b").is_err());
        assert!(parse_taint("a=b:Sometimes").is_err());
    }

    #[test]
    fn unknown_fields_are_refused_strictly_also_nested() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            let p = dir.path().join("config.yaml");
            std::fs::write(&p, text).unwrap();
            p
        };
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        assert!(read_file(&write(&format!("{head}clusterDomain: cluster.local\nauthentication:\n  anonymous:\n    enabled: false\n"))).is_ok());
        let e = read_file(&write(&format!("{head}clusterDomainz: x\n"))).unwrap_err();
        assert!(
            e.to_string()
                .contains("strict decoding error: unknown field \"clusterDomainz\""),
            "{e}"
        );
        let e = read_file(&write(&format!(
            "{head}authentication:\n  x509:\n    clientCaFile: /x\n"
        )))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown field \"authentication.x509.clientCaFile\""),
            "{e}"
        );
        let e = read_file(&write("apiVersion: v1\nkind: ConfigMap\n")).unwrap_err();
        assert!(
            e.to_string().contains("no kind \"KubeletConfiguration\""),
            "{e}"
        );
    }
}
