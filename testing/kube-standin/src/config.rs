//! From parsed flags to a validated configuration per role. Checks are the cheap ones the
//! real binaries make (required flags, ports, IP ranges, authorization modes) plus the one
//! the stand-in exists for: every file flag that was given names a readable file.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;

use crate::Role;
use crate::flags::{Flags, Kind, parse_go_int, table};

pub mod kubelet;

pub use kubelet::{KubeletConfig, Taint, kubelet};

/// A configuration the real binary would refuse, or that the stand-in cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Required flags that were not given (cobra's wording).
    #[error("required flag(s) {} not set", quoted(.names))]
    Missing {
        /// Their long names.
        names: Vec<String>,
    },
    /// A file flag naming a file that cannot be read.
    #[error("--{flag}: cannot read {path}: {reason}")]
    Unreadable {
        /// The flag.
        flag: String,
        /// The path given.
        path: String,
        /// Why.
        reason: String,
    },
    /// A value that is well-formed for its kind but not acceptable.
    #[error("invalid value {value:?} for --{flag}: {reason}")]
    Invalid {
        /// The flag.
        flag: String,
        /// The value given.
        value: String,
        /// Why.
        reason: String,
    },
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Result with [`ConfigError`].
pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// Flags holding files that are only read, whatever their kind in the table.
const FILE_ARRAYS: &[&str] = &["service-account-key-file"];

/// The API server flags the stand-in requires (the real binary defaults or derives some).
pub const APISERVER_REQUIRED: &[&str] = &[
    "client-ca-file",
    "etcd-cafile",
    "etcd-certfile",
    "etcd-keyfile",
    "etcd-servers",
    "secure-port",
    "service-account-issuer",
    "service-account-key-file",
    "service-account-signing-key-file",
    "service-cluster-ip-range",
    "tls-cert-file",
    "tls-private-key-file",
];

/// The authorization modes kube-apiserver knows.
pub const AUTHORIZATION_MODES: &[&str] = &[
    "AlwaysAllow",
    "AlwaysDeny",
    "ABAC",
    "Webhook",
    "RBAC",
    "Node",
];

/// The validated kube-apiserver configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServerConfig {
    /// `--etcd-servers`, each an `https://` URL.
    pub etcd_servers: Vec<String>,
    /// `--etcd-cafile`.
    pub etcd_ca: PathBuf,
    /// `--etcd-certfile`.
    pub etcd_cert: PathBuf,
    /// `--etcd-keyfile`.
    pub etcd_key: PathBuf,
    /// `--etcd-prefix` (default `/registry`).
    pub etcd_prefix: String,
    /// `--tls-cert-file`.
    pub tls_cert: PathBuf,
    /// `--tls-private-key-file`.
    pub tls_key: PathBuf,
    /// `--client-ca-file`.
    pub client_ca: PathBuf,
    /// `--bind-address` (default 0.0.0.0).
    pub bind_address: IpAddr,
    /// `--secure-port`.
    pub secure_port: u16,
    /// `--advertise-address`.
    pub advertise_address: Option<IpAddr>,
    /// `--anonymous-auth` (default true).
    pub anonymous_auth: bool,
    /// `--authorization-mode` (default AlwaysAllow).
    pub authorization_modes: Vec<String>,
    /// `--service-account-issuer`, in order.
    pub service_account_issuers: Vec<String>,
    /// `--service-account-key-file`, in order.
    pub service_account_key_files: Vec<PathBuf>,
    /// `--service-account-signing-key-file`.
    pub service_account_signing_key: PathBuf,
    /// `--service-cluster-ip-range`: one range, or two of different families.
    pub service_cluster_ip_ranges: Vec<IpNet>,
    /// Client certificate and key pairs the real server loads at start, by their flags:
    /// `--proxy-client-cert-file`/`--proxy-client-key-file`, and
    /// `--kubelet-client-certificate`/`--kubelet-client-key`.
    pub client_pairs: Vec<(&'static str, PathBuf, PathBuf)>,
    /// `--enable-bootstrap-token-auth`.
    pub bootstrap_token_auth: bool,
    /// `--api-audiences` (default: the issuers).
    pub api_audiences: Vec<String>,
    /// `--token-auth-file`.
    pub token_auth_file: Option<PathBuf>,
    /// NodeRestriction among `--enable-admission-plugins` and not disabled.
    pub node_restriction: bool,
    /// `--kubelet-certificate-authority`.
    pub kubelet_ca: Option<PathBuf>,
    /// `--kubelet-port` (default 10250).
    pub kubelet_port: u16,
    /// `--kubelet-preferred-address-types`.
    pub kubelet_preferred_address_types: Vec<String>,
    /// `--kubelet-timeout` (default 5 s).
    pub kubelet_timeout: std::time::Duration,
    /// `--egress-selector-config-file`.
    pub egress_selector_config: Option<PathBuf>,
    /// `--service-account-max-token-expiration`.
    pub service_account_max_token_expiration: Option<std::time::Duration>,
    /// `--min-request-timeout` (default 1800 s): watches last between it and twice it.
    pub min_request_timeout: std::time::Duration,
    /// `--oidc-issuer-url` and the rest of `--oidc-*`.
    pub oidc: Option<crate::api::oidc::OidcConfig>,
    /// `--oidc-ca-file`.
    pub oidc_ca: Option<PathBuf>,
    /// `--authentication-config`: the structured authentication configuration (its JWT
    /// authenticators), read again when it changes. Exclusive with `--oidc-*`.
    pub authentication_config: Option<PathBuf>,
}

impl ApiServerConfig {
    /// `--kubelet-client-certificate` and `--kubelet-client-key`, if given.
    pub fn kubelet_client(&self) -> Option<(&PathBuf, &PathBuf)> {
        self.client_pairs
            .iter()
            .find(|(flag, _, _)| *flag == "kubelet-client-certificate")
            .map(|(_, cert, key)| (cert, key))
    }
}

/// kube-apiserver's `--kubelet-preferred-address-types` default.
pub const KUBELET_ADDRESS_TYPES: &[&str] = &[
    "Hostname",
    "InternalDNS",
    "InternalIP",
    "ExternalDNS",
    "ExternalIP",
];

/// Flags the stand-in takes (the real binary does) but whose feature it does not have: it
/// refuses them rather than run without them.
const UNSUPPORTED_APISERVER: &[(&str, &str)] = &[
    (
        "authentication-token-webhook-config-file",
        "webhook token authentication",
    ),
    (
        "authorization-config",
        "structured authorization configuration",
    ),
    (
        "admission-control-config-file",
        "admission plugin configuration",
    ),
];

/// The validated configuration of the controller-manager or scheduler stand-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// Which of the two.
    pub role: Role,
    /// `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// `--authentication-kubeconfig`.
    pub authentication_kubeconfig: Option<PathBuf>,
    /// `--authorization-kubeconfig`.
    pub authorization_kubeconfig: Option<PathBuf>,
    /// `--bind-address` (default 0.0.0.0).
    pub bind_address: IpAddr,
    /// `--secure-port` (default 10257 or 10259; 0 turns serving off).
    pub secure_port: u16,
    /// `--tls-cert-file` and `--tls-private-key-file`; self-signed when absent.
    pub serving: Option<(PathBuf, PathBuf)>,
    /// `--leader-elect` (default true).
    pub leader_elect: bool,
    /// How leader election is done.
    pub leader_election: LeaderElection,
    /// Controller-manager only.
    pub controller_manager: Option<ControllerManagerExtras>,
}

/// The controller-manager's own flags the stand-in checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControllerManagerExtras {
    /// `--cluster-signing-cert-file` and `--cluster-signing-key-file`.
    pub cluster_signing: Option<(PathBuf, PathBuf)>,
    /// `--root-ca-file`.
    pub root_ca: Option<PathBuf>,
    /// `--service-account-private-key-file`.
    pub service_account_private_key: Option<PathBuf>,
    /// `--cluster-cidr`.
    pub cluster_cidrs: Vec<IpNet>,
    /// `--service-cluster-ip-range`.
    pub service_cluster_ip_ranges: Vec<IpNet>,
    /// `--allocate-node-cidrs`.
    pub allocate_node_cidrs: bool,
    /// `--controllers` (default `*`).
    pub controllers: Vec<String>,
    /// `--use-service-account-credentials`.
    pub use_service_account_credentials: bool,
    /// `--node-monitor-grace-period` (40 s): a Lease older than this marks its Node unknown.
    pub node_monitor_grace_period: std::time::Duration,
    /// `--node-monitor-period` (5 s).
    pub node_monitor_period: std::time::Duration,
}

/// Leader election, as `--leader-elect-*` configure it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// `--leader-elect-lease-duration` (15 s).
    pub lease_duration: std::time::Duration,
    /// `--leader-elect-renew-deadline` (10 s).
    pub renew_deadline: std::time::Duration,
    /// `--leader-elect-retry-period` (2 s).
    pub retry_period: std::time::Duration,
    /// `--leader-elect-resource-name`.
    pub name: String,
    /// `--leader-elect-resource-namespace` (kube-system).
    pub namespace: String,
}

/// Checks that every file flag given names a readable regular file.
///
/// # Errors
/// [`ConfigError::Unreadable`] for the first that does not.
pub fn check_files(role: Role, flags: &Flags) -> Result<()> {
    for spec in table(role) {
        let paths: &[String] = match spec.kind {
            Kind::File => flags.items(spec.name),
            _ if FILE_ARRAYS.contains(&spec.name) => flags.items(spec.name),
            _ => &[],
        };
        for path in paths {
            readable(spec.name, path)?;
        }
    }
    Ok(())
}

fn readable(flag: &str, path: &str) -> Result<()> {
    let unreadable = |reason: String| ConfigError::Unreadable {
        flag: flag.to_string(),
        path: path.to_string(),
        reason,
    };
    if path.is_empty() {
        return Err(unreadable("empty path".to_string()));
    }
    let file = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
    let meta = file.metadata().map_err(|e| unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unreadable("not a regular file".to_string()));
    }
    Ok(())
}

fn missing(flags: &Flags, required: &[&str]) -> Result<()> {
    let names: Vec<String> = required
        .iter()
        .filter(|n| !flags.is_set(n) || flags.items(n).iter().all(|v| v.is_empty()))
        .map(|n| n.to_string())
        .collect();
    if names.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Missing { names })
    }
}

fn invalid(flag: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        flag: flag.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn path(flags: &Flags, name: &str) -> Option<PathBuf> {
    flags.get(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn ip(flags: &Flags, name: &str) -> Option<IpAddr> {
    // The value was checked as an IP at parse time; an empty value means unset, as in pflag.
    flags.get(name).and_then(|v| v.parse().ok())
}

fn port(flags: &Flags, name: &str, default: u16, allow_zero: bool) -> Result<u16> {
    let Some(value) = flags.get(name) else {
        return Ok(default);
    };
    let number = parse_go_int(value).unwrap_or(-1);
    let lowest = if allow_zero { 0 } else { 1 };
    match u16::try_from(number) {
        Ok(p) if i64::from(p) >= lowest => Ok(p),
        _ => Err(invalid(
            name,
            value,
            if allow_zero {
                "must be between 0 and 65535, inclusive (0 turns serving off)"
            } else {
                "must be between 1 and 65535, inclusive; it cannot be turned off"
            },
        )),
    }
}

/// One CIDR, or two of different IP families, comma-separated.
fn cidrs(flag: &str, value: &str) -> Result<Vec<IpNet>> {
    let nets = value
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<IpNet>()
                .map_err(|e| invalid(flag, value, format!("{s:?}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    match nets.as_slice() {
        [_] => Ok(nets),
        [a, b] if a.addr().is_ipv4() != b.addr().is_ipv4() => Ok(nets),
        [_, _] => Err(invalid(
            flag,
            value,
            "two ranges must be of different IP families",
        )),
        _ => Err(invalid(
            flag,
            value,
            "at most two ranges, one per IP family",
        )),
    }
}

/// Validates the kube-apiserver flags.
///
/// # Errors
/// The first problem found, required flags first.
pub fn apiserver(flags: &Flags) -> Result<ApiServerConfig> {
    missing(flags, APISERVER_REQUIRED)?;
    check_files(Role::ApiServer, flags)?;
    let required_path = |name: &str| path(flags, name).unwrap_or_default();

    let etcd_servers = flags.items("etcd-servers").to_vec();
    for server in &etcd_servers {
        let uri: http::Uri = server
            .parse()
            .map_err(|e| invalid("etcd-servers", server, format!("not a URL: {e}")))?;
        if uri.scheme_str() != Some("https") || uri.host().is_none() {
            return Err(invalid(
                "etcd-servers",
                server,
                "the stand-in reaches etcd over mutual TLS only: https://host:port",
            ));
        }
    }

    let secure_port = port(flags, "secure-port", 6443, false)?;

    let authorization_modes = if flags.is_set("authorization-mode") {
        flags.items("authorization-mode").to_vec()
    } else {
        vec!["AlwaysAllow".to_string()]
    };
    if flags.is_set("authorization-mode") && flags.is_set("authorization-config") {
        return Err(invalid(
            "authorization-mode",
            &authorization_modes.join(","),
            "cannot be combined with --authorization-config",
        ));
    }
    for (i, mode) in authorization_modes.iter().enumerate() {
        if !AUTHORIZATION_MODES.contains(&mode.as_str()) {
            return Err(invalid(
                "authorization-mode",
                mode,
                format!("not a valid mode; valid: {}", AUTHORIZATION_MODES.join(",")),
            ));
        }
        if authorization_modes[..i].contains(mode) {
            return Err(invalid(
                "authorization-mode",
                mode,
                "specified more than once",
            ));
        }
    }
    for (mode, needs) in [
        ("ABAC", "authorization-policy-file"),
        ("Webhook", "authorization-webhook-config-file"),
    ] {
        if authorization_modes.iter().any(|m| m == mode) && !flags.is_set(needs) {
            return Err(invalid(
                "authorization-mode",
                mode,
                format!("{mode} authorization mode requires --{needs}"),
            ));
        }
    }

    let service_account_issuers = flags.items("service-account-issuer").to_vec();
    for issuer in &service_account_issuers {
        if issuer.is_empty() {
            return Err(invalid(
                "service-account-issuer",
                issuer,
                "must not be empty",
            ));
        }
        if issuer.contains(':') {
            let uri: std::result::Result<http::Uri, _> = issuer.parse();
            if uri.map(|u| u.scheme().is_none()).unwrap_or(true) {
                return Err(invalid(
                    "service-account-issuer",
                    issuer,
                    "an issuer containing ':' must be a valid URL",
                ));
            }
        }
    }

    let range = flags.get("service-cluster-ip-range").unwrap_or_default();
    let service_cluster_ip_ranges = cidrs("service-cluster-ip-range", range)?;
    for net in &service_cluster_ip_ranges {
        if net.addr().is_ipv6() && net.prefix_len() < 108 {
            return Err(invalid(
                "service-cluster-ip-range",
                range,
                "too large; for 128-bit addresses the mask must be >= 108",
            ));
        }
    }

    if let Some(range) = flags.get("service-node-port-range") {
        let ok = range
            .split_once(['-', '+'])
            .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)))
            .is_some();
        if !ok {
            return Err(invalid(
                "service-node-port-range",
                range,
                "expected a port range like 30000-32767",
            ));
        }
    }

    for (flag, feature) in UNSUPPORTED_APISERVER {
        if flags.is_set(flag) {
            return Err(invalid(
                flag,
                flags.get(flag).unwrap_or_default(),
                format!("{feature} is not implemented by the kube-apiserver stand-in"),
            ));
        }
    }
    for mode in ["ABAC", "Webhook"] {
        if authorization_modes.iter().any(|m| m == mode) {
            return Err(invalid(
                "authorization-mode",
                mode,
                "the kube-apiserver stand-in implements AlwaysAllow, AlwaysDeny, Node and RBAC",
            ));
        }
    }
    let listed = |flag: &str| -> Vec<String> {
        flags
            .items(flag)
            .iter()
            .flat_map(|v| v.split(','))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect()
    };
    let node_restriction = listed("enable-admission-plugins")
        .iter()
        .any(|p| p == "NodeRestriction")
        && !listed("disable-admission-plugins")
            .iter()
            .any(|p| p == "NodeRestriction");
    let duration = |flag: &str, default: std::time::Duration| -> Result<std::time::Duration> {
        match flags.get(flag) {
            None => Ok(default),
            Some(v) => {
                crate::flags::parse_go_duration(v).ok_or_else(|| invalid(flag, v, "not a duration"))
            }
        }
    };
    let kubelet_timeout = duration("kubelet-timeout", std::time::Duration::from_secs(5))?;
    let service_account_max_token_expiration =
        match flags.get("service-account-max-token-expiration") {
            None => None,
            Some(v) => Some(crate::flags::parse_go_duration(v).ok_or_else(|| {
                invalid("service-account-max-token-expiration", v, "not a duration")
            })?),
        };
    let min_request_timeout = match flags.get("min-request-timeout") {
        None => std::time::Duration::from_secs(1800),
        Some(v) => match parse_go_int(v).and_then(|n| u64::try_from(n).ok()) {
            Some(n) if n > 0 => std::time::Duration::from_secs(n),
            _ => {
                return Err(invalid(
                    "min-request-timeout",
                    v,
                    "must be a positive number of seconds",
                ));
            }
        },
    };
    let kubelet_preferred_address_types = if flags.is_set("kubelet-preferred-address-types") {
        listed("kubelet-preferred-address-types")
    } else {
        KUBELET_ADDRESS_TYPES
            .iter()
            .map(|s| (*s).to_string())
            .collect()
    };
    for kind in &kubelet_preferred_address_types {
        if !KUBELET_ADDRESS_TYPES.contains(&kind.as_str()) {
            return Err(invalid(
                "kubelet-preferred-address-types",
                kind,
                format!(
                    "not a node address type; valid: {}",
                    KUBELET_ADDRESS_TYPES.join(",")
                ),
            ));
        }
    }

    let mut client_pairs = Vec::new();
    for (cert_flag, key_flag) in [
        ("proxy-client-cert-file", "proxy-client-key-file"),
        ("kubelet-client-certificate", "kubelet-client-key"),
    ] {
        if let Some((cert, key)) = pair(flags, cert_flag, key_flag)? {
            client_pairs.push((cert_flag, cert, key));
        }
    }

    Ok(ApiServerConfig {
        client_pairs,
        etcd_servers,
        etcd_ca: required_path("etcd-cafile"),
        etcd_cert: required_path("etcd-certfile"),
        etcd_key: required_path("etcd-keyfile"),
        etcd_prefix: flags
            .get("etcd-prefix")
            .unwrap_or("/registry")
            .trim_end_matches('/')
            .to_string(),
        tls_cert: required_path("tls-cert-file"),
        tls_key: required_path("tls-private-key-file"),
        client_ca: required_path("client-ca-file"),
        bind_address: ip(flags, "bind-address").unwrap_or(IpAddr::from([0, 0, 0, 0])),
        secure_port,
        advertise_address: ip(flags, "advertise-address"),
        anonymous_auth: flags.bool_or("anonymous-auth", true),
        authorization_modes,
        service_account_issuers,
        service_account_key_files: flags
            .items("service-account-key-file")
            .iter()
            .map(PathBuf::from)
            .collect(),
        service_account_signing_key: required_path("service-account-signing-key-file"),
        service_cluster_ip_ranges,
        bootstrap_token_auth: flags.bool_or("enable-bootstrap-token-auth", false),
        api_audiences: listed("api-audiences"),
        token_auth_file: path(flags, "token-auth-file"),
        node_restriction,
        kubelet_ca: path(flags, "kubelet-certificate-authority"),
        kubelet_port: port(flags, "kubelet-port", 10250, false)?,
        kubelet_preferred_address_types,
        kubelet_timeout,
        egress_selector_config: path(flags, "egress-selector-config-file"),
        service_account_max_token_expiration,
        min_request_timeout,
        oidc: oidc_config(flags)?,
        oidc_ca: path(flags, "oidc-ca-file"),
        authentication_config: authentication_config(flags)?,
    })
}

/// `--authentication-config`, which kube-apiserver refuses beside any `--oidc-*` flag (it
/// exits: "authentication-config file and oidc-* flags are mutually exclusive").
fn authentication_config(flags: &Flags) -> Result<Option<PathBuf>> {
    let Some(file) = path(flags, "authentication-config") else {
        return Ok(None);
    };
    if let Some(oidc) = flags.names().find(|n| n.starts_with("oidc-")) {
        return Err(invalid(
            "authentication-config",
            &file.display().to_string(),
            format!(
                "authentication-config file and oidc-* flags are mutually exclusive (--{oidc} is set)"
            ),
        ));
    }
    Ok(Some(file))
}

/// `--oidc-*`, checked as kube-apiserver checks them: an `https` issuer and a client ID
/// together; `none` is no signing algorithm.
fn oidc_config(flags: &Flags) -> Result<Option<crate::api::oidc::OidcConfig>> {
    let Some(issuer) = flags.get("oidc-issuer-url").filter(|v| !v.is_empty()) else {
        if let Some(client) = flags.get("oidc-client-id").filter(|v| !v.is_empty()) {
            return Err(invalid(
                "oidc-client-id",
                client,
                "--oidc-issuer-url must be set with it",
            ));
        }
        return Ok(None);
    };
    if !issuer.starts_with("https://") {
        return Err(invalid("oidc-issuer-url", issuer, "must be an https URL"));
    }
    let client_id = flags.get("oidc-client-id").unwrap_or_default();
    if client_id.is_empty() {
        return Err(invalid(
            "oidc-client-id",
            client_id,
            "must be set with --oidc-issuer-url",
        ));
    }
    let signing_algs: Vec<String> = flags.items("oidc-signing-algs").to_vec();
    if let Some(alg) = signing_algs
        .iter()
        .find(|a| !["RS256", "ES256", "ES384"].contains(&a.as_str()))
    {
        return Err(invalid(
            "oidc-signing-algs",
            alg,
            "the kube-apiserver stand-in verifies RS256, ES256 and ES384",
        ));
    }
    let required_claims = flags
        .items("oidc-required-claim")
        .iter()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(Some(crate::api::oidc::OidcConfig {
        issuer_url: issuer.to_string(),
        client_id: client_id.to_string(),
        username_claim: flags
            .get("oidc-username-claim")
            .unwrap_or("sub")
            .to_string(),
        username_prefix: flags.get("oidc-username-prefix").map(str::to_string),
        groups_claim: flags
            .get("oidc-groups-claim")
            .filter(|v| !v.is_empty())
            .map(str::to_string),
        groups_prefix: flags.get("oidc-groups-prefix").map(str::to_string),
        required_claims,
        signing_algs,
        ..crate::api::oidc::OidcConfig::default()
    }))
}

/// Validates the kube-controller-manager or kube-scheduler flags.
///
/// # Errors
/// The first problem found, required flags first.
pub fn controller(role: Role, flags: &Flags) -> Result<ControllerConfig> {
    missing(flags, &["kubeconfig"])?;
    check_files(role, flags)?;
    let default_port = if role == Role::Scheduler {
        10259
    } else {
        10257
    };
    let secure_port = port(flags, "secure-port", default_port, true)?;
    let serving = pair(flags, "tls-cert-file", "tls-private-key-file")?;
    let controller_manager = if role == Role::ControllerManager {
        Some(controller_manager_extras(flags)?)
    } else {
        None
    };
    Ok(ControllerConfig {
        role,
        kubeconfig: path(flags, "kubeconfig").unwrap_or_default(),
        authentication_kubeconfig: path(flags, "authentication-kubeconfig"),
        authorization_kubeconfig: path(flags, "authorization-kubeconfig"),
        bind_address: ip(flags, "bind-address").unwrap_or(IpAddr::from([0, 0, 0, 0])),
        secure_port,
        serving,
        leader_elect: flags.bool_or("leader-elect", true),
        leader_election: LeaderElection {
            lease_duration: go_duration(flags, "leader-elect-lease-duration", 15)?,
            renew_deadline: go_duration(flags, "leader-elect-renew-deadline", 10)?,
            retry_period: go_duration(flags, "leader-elect-retry-period", 2)?,
            name: flags
                .get("leader-elect-resource-name")
                .filter(|n| !n.is_empty())
                .unwrap_or(role.command())
                .to_string(),
            namespace: flags
                .get("leader-elect-resource-namespace")
                .filter(|n| !n.is_empty())
                .unwrap_or("kube-system")
                .to_string(),
        },
        controller_manager,
    })
}

/// Two flags that go together: both or neither.
fn pair(flags: &Flags, first: &str, second: &str) -> Result<Option<(PathBuf, PathBuf)>> {
    match (path(flags, first), path(flags, second)) {
        (Some(a), Some(b)) => Ok(Some((a, b))),
        (None, None) => Ok(None),
        (Some(a), None) => Err(invalid(
            first,
            &a.display().to_string(),
            format!("requires --{second}"),
        )),
        (None, Some(b)) => Err(invalid(
            second,
            &b.display().to_string(),
            format!("requires --{first}"),
        )),
    }
}

fn controller_manager_extras(flags: &Flags) -> Result<ControllerManagerExtras> {
    let cluster_cidrs = match flags.get("cluster-cidr").filter(|v| !v.is_empty()) {
        Some(v) => cidrs("cluster-cidr", v)?,
        None => Vec::new(),
    };
    let service_cluster_ip_ranges = match flags
        .get("service-cluster-ip-range")
        .filter(|v| !v.is_empty())
    {
        Some(v) => cidrs("service-cluster-ip-range", v)?,
        None => Vec::new(),
    };
    let allocate_node_cidrs = flags.bool_or("allocate-node-cidrs", false);
    if allocate_node_cidrs && cluster_cidrs.is_empty() {
        return Err(invalid(
            "allocate-node-cidrs",
            "true",
            "requires --cluster-cidr",
        ));
    }
    let controllers = if flags.is_set("controllers") {
        flags.items("controllers").to_vec()
    } else {
        vec!["*".to_string()]
    };
    for name in &controllers {
        let bare = name.strip_prefix('-').unwrap_or(name);
        let well_formed = name == "*"
            || (!bare.is_empty()
                && bare
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        if !well_formed {
            return Err(invalid(
                "controllers",
                name,
                "expected '*', a controller name, or '-' and a controller name",
            ));
        }
    }
    Ok(ControllerManagerExtras {
        cluster_signing: pair(
            flags,
            "cluster-signing-cert-file",
            "cluster-signing-key-file",
        )?,
        root_ca: path(flags, "root-ca-file"),
        service_account_private_key: path(flags, "service-account-private-key-file"),
        cluster_cidrs,
        service_cluster_ip_ranges,
        allocate_node_cidrs,
        controllers,
        use_service_account_credentials: flags.bool_or("use-service-account-credentials", false),
        node_monitor_grace_period: go_duration(flags, "node-monitor-grace-period", 40)?,
        node_monitor_period: go_duration(flags, "node-monitor-period", 5)?,
    })
}

/// A duration flag, `default_seconds` when absent.
fn go_duration(flags: &Flags, name: &str, default_seconds: u64) -> Result<std::time::Duration> {
    match flags.get(name) {
        None => Ok(std::time::Duration::from_secs(default_seconds)),
        Some(v) => crate::flags::parse_go_duration(v)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| invalid(name, v, "must be a positive duration")),
    }
}
