//! Validation: what oneinfra's webhooks checked, and what it should have. Errors are values
//! (`PartialEq`) naming the document, the object, the field path and the reason.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::cluster::Cluster;
use crate::component::{Component, ComponentRole};
use crate::hypervisor::Hypervisor;
use crate::meta::{Kind, ObjectKey, ObjectMeta, Resource};
use crate::node_join_request::NodeJoinRequest;
use crate::versions;
use crate::world::{Document, Object};

mod sip;
pub use sip::{
    MAX_NODE_SET_HOSTS, check_label_key, check_label_value, validate_bare_metal_host,
    validate_secret, validate_sip_cluster,
};

/// Longest DNS-1123 label (namespaces, components).
pub const MAX_LABEL_LEN: usize = 63;
/// Longest DNS-1123 subdomain (hypervisors, node join requests).
pub const MAX_SUBDOMAIN_LEN: usize = 253;
/// Most control plane replicas a cluster may have: etcd's largest recommended cluster.
pub const MAX_CONTROL_PLANE_REPLICAS: u32 = 7;
/// Most ingresses of a cluster (`spec.ingress.replicas`), each on a public hypervisor of its
/// own.
pub const MAX_INGRESS_REPLICAS: u32 = 5;
/// Most API servers of a cluster (`spec.apiServerReplicas`): its ingress balances them all.
pub const MAX_API_SERVER_REPLICAS: u32 = 32;
/// Longest cluster name: component and pod names are derived from it, and must still fit
/// in a 63 character label (and label value) with a suffix of up to 31 characters.
pub const MAX_CLUSTER_NAME_LEN: usize = 32;

/// A naming rule a name broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// Lowercase alphanumerics and `-`, starting and ending alphanumeric, at most `max_len`.
    Dns1123Label { max_len: usize },
    /// Dot-separated DNS-1123 labels, at most 253 characters.
    Dns1123Subdomain,
}

impl fmt::Display for NameRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameRule::Dns1123Label { max_len } => write!(
                f,
                "a DNS-1123 label (lowercase alphanumerics and '-', starting and ending with an alphanumeric) of at most {max_len} characters"
            ),
            NameRule::Dns1123Subdomain => write!(
                f,
                "a DNS-1123 subdomain (dot-separated DNS-1123 labels) of at most {MAX_SUBDOMAIN_LEN} characters"
            ),
        }
    }
}

/// Why a field is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("required")]
    Required,
    /// The value is a secret: the message never repeats it.
    #[error(
        "not a bootstrap token: the form is [a-z0-9]{{6}}.[a-z0-9]{{16}} (token ID, a dot, token secret)"
    )]
    InvalidJoinToken,
    #[error("the token ID {id:?} is already used by spec.joinTokens[{first}]")]
    DuplicateJoinTokenId { id: String, first: usize },
    #[error(
        "{value} leaves no room for the VPN's endpoint and a peer (at most /30 for IPv4, /126 for IPv6)"
    )]
    VpnCidrTooSmall { value: String },
    #[error("{value:?} is not an address of the VPN CIDR {cidr}")]
    NotInVpnCidr { value: String, cidr: String },
    #[error("{value} is the VPN CIDR's network address or its endpoint's")]
    ReservedVpnAddress { value: String },
    #[error("{what} {value:?} is already used by status.vpnPeers[{first}]")]
    DuplicateVpnPeer {
        what: &'static str,
        value: String,
        first: usize,
    },
    #[error("{value:?} is not {rule}")]
    InvalidName { value: String, rule: NameRule },
    #[error("cluster-scoped {kind} must not have a namespace (got {namespace:?})")]
    NamespaceNotAllowed { kind: Kind, namespace: String },
    #[error("exactly one of localCRIEndpoint and remoteCRIEndpoint must be set, both are")]
    BothCriEndpoints,
    #[error("exactly one of localCRIEndpoint and remoteCRIEndpoint must be set, neither is")]
    NoCriEndpoint,
    #[error("port {port} is outside 1..65535")]
    PortOutOfRange { port: u32 },
    #[error("low port {low} is above high port {high}")]
    PortRangeInverted { low: u32, high: u32 },
    #[error("{value:?} is not an absolute path")]
    NotAbsolutePath { value: String },
    #[error("{value:?} is not a CRI endpoint URI ([tcp|https|grpcs://]host:port)")]
    InvalidEndpointUri { value: String },
    #[error("{value:?} is not an IP address")]
    InvalidIp { value: String },
    #[error("{value:?} is not a CIDR (address/prefix)")]
    InvalidCidr { value: String },
    #[error("node CIDR mask size {size} must be between {min} and {max}")]
    InvalidMaskSize { size: u8, min: u8, max: u8 },
    #[error("does not name the component itself ({name:?})")]
    MissingSelf { name: String },
    #[error("only control plane replicas run an etcd member")]
    NotAControlPlaneReplica,
    #[error("{replicas} replicas; at least 1 is needed")]
    InvalidReplicas { replicas: u32 },
    #[error(
        "{replicas} replicas; at most {max} (each runs an etcd member, and etcd clusters of more than {max} members only get slower)"
    )]
    TooManyReplicas { replicas: u32, max: u32 },
    #[error(
        "{api_servers} API servers for {replicas} control plane replicas: each replica runs one, so at least {replicas}"
    )]
    FewerApiServersThanReplicas { api_servers: u32, replicas: u32 },
    #[error("{api_servers} API servers; at most {max}")]
    TooManyApiServers { api_servers: u32, max: u32 },
    #[error("{replicas} ingresses; from 1 to {max}")]
    IngressReplicas { replicas: u32, max: u32 },
    #[error(
        "{replicas} ingresses need the address they share (the cluster's address, moved between them by VRRP)"
    )]
    VirtualIpRequired { replicas: u32 },
    #[error("{value} is not an IPv4 address (the shared address is IPv4 only)")]
    VirtualIpNotIpv4 { value: String },
    #[error(
        "VRRP router ID 0 is not valid (1-255; the last byte of virtualIP when absent, so a virtualIP ending in .0 needs one)"
    )]
    RouterIdZero,
    #[error("{value} is not a unicast address")]
    NotUnicast { value: String },
    #[error(
        "{value} is also the address of hypervisor {other:?}: hypervisors share no address (host ports are allocated per hypervisor)"
    )]
    DuplicateAddress { value: String, other: String },
    #[error("port {port} is outside spec.portRange {low}-{high}")]
    PortOutsideRange { port: u16, low: u32, high: u32 },
    #[error("port {port} is also allocated to {holder}")]
    PortTaken { port: u16, holder: String },
    #[error(
        "{owner} holds port {port} in hypervisor {hypervisor}'s status, but this says {claimed}"
    )]
    PortDisagrees {
        owner: String,
        hypervisor: String,
        port: u16,
        claimed: u16,
    },
    /// Key material that does not parse, does not match or does not chain (the problem as
    /// the PKI crate words it).
    #[error("{problem}")]
    KeyMaterial { problem: String },
    #[error("unsupported Kubernetes version {version:?}; supported: {}", .supported.join(", "))]
    UnsupportedVersion {
        version: String,
        supported: Vec<String>,
    },
    #[error("{problem}")]
    InvalidSchedule { problem: String },
    /// Anything else wrong with a value, in words.
    #[error("{problem}")]
    Invalid { problem: String },
    #[error("duplicate: already defined by {first_source_name} document {first_position}")]
    Duplicate {
        first_source_name: String,
        first_position: usize,
    },
}

/// An invalid field of an object, before it is placed in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted wire path, e.g. `spec.portRange.low`.
    pub field: String,
    pub reason: Reason,
}

impl FieldError {
    fn new(field: impl Into<String>, reason: Reason) -> Self {
        Self {
            field: field.into(),
            reason,
        }
    }
}

/// An invalid field of an object in a document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: document {position}: {kind} {object}: field `{field}`: {reason}")]
pub struct ValidationError {
    pub source_name: String,
    pub position: usize,
    pub kind: Kind,
    pub object: ObjectKey,
    pub field: String,
    pub reason: Reason,
}

/// Validates documents, from one or several inputs: each object, and that no two share a
/// kind and key. Errors come in document order.
pub fn validate_documents(documents: &[Document]) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    let mut seen: BTreeMap<(Kind, ObjectKey), &Document> = BTreeMap::new();
    for document in documents {
        let kind = document.object.kind();
        let key = document.object.key();
        let at = |field: String, reason: Reason| ValidationError {
            source_name: document.source_name.clone(),
            position: document.position,
            kind,
            object: key.clone(),
            field,
            reason,
        };
        errors.extend(
            validate_object(&document.object)
                .into_iter()
                .map(|e| at(e.field, e.reason)),
        );
        match seen.get(&(kind, key.clone())) {
            Some(first) => errors.push(at(
                "metadata.name".to_string(),
                Reason::Duplicate {
                    first_source_name: first.source_name.clone(),
                    first_position: first.position,
                },
            )),
            None => {
                seen.insert((kind, key.clone()), document);
            }
        }
    }
    errors
}

/// Validates one object of any kind.
pub fn validate_object(object: &Object) -> Vec<FieldError> {
    match object {
        Object::Hypervisor(o) => validate_hypervisor(o),
        Object::Cluster(o) => validate_cluster(o),
        Object::Component(o) => validate_component(o),
        Object::NodeJoinRequest(o) => validate_node_join_request(o),
        Object::SipCluster(o) => validate_sip_cluster(o),
        Object::BareMetalHost(o) => validate_bare_metal_host(o),
        Object::Secret(o) => validate_secret(o),
    }
}

/// Validates a hypervisor: name, exactly one complete CRI endpoint, IP address, port range.
pub fn validate_hypervisor(hypervisor: &Hypervisor) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_meta(
        &mut errors,
        hypervisor.metadata(),
        Hypervisor::KIND,
        NameRule::Dns1123Subdomain,
    );
    let spec = &hypervisor.spec;
    if let Some(capacity) = &spec.capacity {
        if let Some(cpu) = &capacity.cpu
            && let Err(problem) = crate::quantity::parse_cpu_millis(cpu)
        {
            errors.push(FieldError::new(
                "spec.capacity.cpu",
                Reason::Invalid { problem },
            ));
        }
        if let Some(memory) = &capacity.memory
            && let Err(problem) = crate::quantity::parse_memory_bytes(memory)
        {
            errors.push(FieldError::new(
                "spec.capacity.memory",
                Reason::Invalid { problem },
            ));
        }
    }
    match (&spec.local_cri_endpoint, &spec.remote_cri_endpoint) {
        (Some(_), Some(_)) => errors.push(FieldError::new("spec", Reason::BothCriEndpoints)),
        (None, None) => errors.push(FieldError::new("spec", Reason::NoCriEndpoint)),
        (Some(local), None) => {
            let path = &local.cri_endpoint_path;
            let field = "spec.localCRIEndpoint.criEndpointPath";
            if path.trim().is_empty() {
                errors.push(FieldError::new(field, Reason::Required));
            } else if !path.starts_with('/') {
                errors.push(FieldError::new(
                    field,
                    Reason::NotAbsolutePath {
                        value: path.clone(),
                    },
                ));
            }
        }
        (None, Some(remote)) => {
            let base = "spec.remoteCRIEndpoint";
            if remote.cri_endpoint_uri.trim().is_empty() {
                errors.push(FieldError::new(
                    format!("{base}.criEndpointURI"),
                    Reason::Required,
                ));
            } else if !is_endpoint_uri(&remote.cri_endpoint_uri) {
                errors.push(FieldError::new(
                    format!("{base}.criEndpointURI"),
                    Reason::InvalidEndpointUri {
                        value: remote.cri_endpoint_uri.clone(),
                    },
                ));
            }
            if remote.ca_certificate.trim().is_empty() {
                errors.push(FieldError::new(
                    format!("{base}.caCertificate"),
                    Reason::Required,
                ));
            }
            match &remote.client_certificate {
                None => errors.push(FieldError::new(
                    format!("{base}.clientCertificate"),
                    Reason::Required,
                )),
                Some(cert) => {
                    if cert.certificate.trim().is_empty() {
                        errors.push(FieldError::new(
                            format!("{base}.clientCertificate.certificate"),
                            Reason::Required,
                        ));
                    }
                    if cert.private_key.trim().is_empty() {
                        errors.push(FieldError::new(
                            format!("{base}.clientCertificate.privateKey"),
                            Reason::Required,
                        ));
                    }
                }
            }
        }
    }
    if spec.ip_address.is_empty() {
        errors.push(FieldError::new("spec.ipAddress", Reason::Required));
    } else {
        match spec.ip_address.parse::<IpAddr>() {
            Err(_) => errors.push(FieldError::new(
                "spec.ipAddress",
                Reason::InvalidIp {
                    value: spec.ip_address.clone(),
                },
            )),
            Ok(ip) if !is_unicast(ip) => errors.push(FieldError::new(
                "spec.ipAddress",
                Reason::NotUnicast {
                    value: spec.ip_address.clone(),
                },
            )),
            Ok(_) => {}
        }
    }
    let range = spec.port_range;
    let mut ports_ok = true;
    for (field, port) in [
        ("spec.portRange.low", range.low),
        ("spec.portRange.high", range.high),
    ] {
        if !(1..=u32::from(u16::MAX)).contains(&port) {
            ports_ok = false;
            errors.push(FieldError::new(field, Reason::PortOutOfRange { port }));
        }
    }
    if ports_ok && range.low > range.high {
        errors.push(FieldError::new(
            "spec.portRange",
            Reason::PortRangeInverted {
                low: range.low,
                high: range.high,
            },
        ));
    }
    errors
}

/// `<at>.usernameClaim` and `<at>.groupsClaim`: claim names, without blanks or commas (they
/// become kube-apiserver flag values).
fn check_claims(errors: &mut Vec<FieldError>, at: &str, username: &str, groups: &str) {
    for (field, claim) in [("usernameClaim", username), ("groupsClaim", groups)] {
        if claim.contains(char::is_whitespace) || claim.contains(',') {
            errors.push(FieldError::new(
                format!("{at}.{field}"),
                Reason::Invalid {
                    problem: format!("{claim:?} is not a claim name"),
                },
            ));
        }
    }
}

/// `spec.apiServer.oidc`: an `https` issuer URL without query or fragment (kube-apiserver
/// refuses others), a client ID, claims without blanks, a CA of PEM certificates.
fn check_oidc(errors: &mut Vec<FieldError>, at: &str, oidc: &crate::cluster::ApiServerOidc) {
    let problem = |field: &str, problem: String| {
        FieldError::new(format!("{at}.{field}"), Reason::Invalid { problem })
    };
    let url = &oidc.issuer_url;
    if url.is_empty() {
        errors.push(FieldError::new(format!("{at}.issuerURL"), Reason::Required));
    } else {
        let rest = url.strip_prefix("https://");
        let host = rest.map(|r| r.split(['/', ':']).next().unwrap_or_default());
        if rest.is_none() || host.is_none_or(str::is_empty) {
            errors.push(problem(
                "issuerURL",
                format!("{url:?} is not an https:// URL"),
            ));
        } else if url.contains(['?', '#']) || url.contains(char::is_whitespace) {
            errors.push(problem(
                "issuerURL",
                format!("{url:?} has a query, a fragment or blanks"),
            ));
        }
    }
    if oidc.client_id.is_empty() {
        errors.push(FieldError::new(format!("{at}.clientID"), Reason::Required));
    } else if oidc.client_id.contains(char::is_whitespace) {
        errors.push(problem(
            "clientID",
            format!("{:?} has blanks", oidc.client_id),
        ));
    }
    for (i, audience) in oidc.audiences.iter().enumerate() {
        if audience.is_empty() || audience.contains(char::is_whitespace) {
            errors.push(problem(
                &format!("audiences[{i}]"),
                format!("{audience:?} is empty or has blanks"),
            ));
        } else if *audience == oidc.client_id || oidc.audiences[..i].contains(audience) {
            errors.push(problem(
                &format!("audiences[{i}]"),
                format!("{audience:?} is listed twice (clientID is an audience too)"),
            ));
        }
    }
    check_claims(errors, at, &oidc.username_claim, &oidc.groups_claim);
    // kube-apiserver's list (its `--oidc-signing-algs` refuses others).
    const ALGS: [&str; 9] = [
        "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512",
    ];
    for alg in &oidc.signing_algs {
        if !ALGS.contains(&alg.as_str()) {
            errors.push(problem(
                "signingAlgs",
                format!("{alg:?} is not one of {}", ALGS.join(", ")),
            ));
        }
    }
    if !oidc.ca.is_empty() && !oidc.ca.contains("-----BEGIN CERTIFICATE-----") {
        errors.push(problem("ca", "holds no PEM certificate".to_string()));
    }
}

/// The issuer the API servers' own service-account tokens carry (`--service-account-issuer`):
/// no JWT authenticator may claim it.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// `spec.apiServer.oidc` and `spec.apiServer.oidcIssuers`: each issuer valid, each issuer URL
/// once and not the service-account issuer, at most [`crate::cluster::MAX_JWT_ISSUERS`].
fn check_issuers(errors: &mut Vec<FieldError>, api_server: &crate::cluster::KubeApiServer) {
    let mut seen: Vec<(&str, String)> = Vec::new();
    for (at, oidc) in api_server.jwt_issuers() {
        check_oidc(errors, &at, oidc);
        let url = oidc.issuer_url.as_str();
        if url == SERVICE_ACCOUNT_ISSUER {
            errors.push(FieldError::new(
                format!("{at}.issuerURL"),
                Reason::Invalid {
                    problem: format!("{url:?} is the API servers' own service-account issuer"),
                },
            ));
        }
        if let Some((_, first)) = seen.iter().find(|(u, _)| !url.is_empty() && *u == url) {
            errors.push(FieldError::new(
                format!("{at}.issuerURL"),
                Reason::Invalid {
                    problem: format!("{url:?} is already trusted at {first}"),
                },
            ));
        }
        seen.push((url, at));
    }
    let count = seen.len();
    if count > crate::cluster::MAX_JWT_ISSUERS {
        errors.push(FieldError::new(
            "spec.apiServer.oidcIssuers",
            Reason::Invalid {
                problem: format!(
                    "{count} issuers in all with spec.apiServer.oidc; at most {} are trusted",
                    crate::cluster::MAX_JWT_ISSUERS
                ),
            },
        ));
    }
}

/// Validates a cluster: name, Kubernetes version, replicas, CIDRs, its OIDC issuers.
pub fn validate_cluster(cluster: &Cluster) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_meta(
        &mut errors,
        cluster.metadata(),
        Cluster::KIND,
        NameRule::Dns1123Label {
            max_len: MAX_CLUSTER_NAME_LEN,
        },
    );
    let spec = &cluster.spec;
    if versions::find_release(&spec.kubernetes_version).is_none() {
        errors.push(FieldError::new(
            "spec.kubernetesVersion",
            Reason::UnsupportedVersion {
                version: spec.kubernetes_version.clone(),
                supported: versions::supported_versions()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            },
        ));
    }
    match spec.control_plane_replicas {
        Some(replicas @ 0) => errors.push(FieldError::new(
            "spec.controlPlaneReplicas",
            Reason::InvalidReplicas { replicas },
        )),
        Some(replicas) if replicas > MAX_CONTROL_PLANE_REPLICAS => errors.push(FieldError::new(
            "spec.controlPlaneReplicas",
            Reason::TooManyReplicas {
                replicas,
                max: MAX_CONTROL_PLANE_REPLICAS,
            },
        )),
        _ => {}
    }
    if let Some(api_servers) = spec.api_server_replicas {
        let replicas = spec
            .control_plane_replicas
            .unwrap_or(crate::cluster::DEFAULT_CONTROL_PLANE_REPLICAS);
        if api_servers < replicas {
            errors.push(FieldError::new(
                "spec.apiServerReplicas",
                Reason::FewerApiServersThanReplicas {
                    api_servers,
                    replicas,
                },
            ));
        } else if api_servers > MAX_API_SERVER_REPLICAS {
            errors.push(FieldError::new(
                "spec.apiServerReplicas",
                Reason::TooManyApiServers {
                    api_servers,
                    max: MAX_API_SERVER_REPLICAS,
                },
            ));
        }
    }
    if let Some(ingress) = &spec.ingress {
        check_ingress(&mut errors, ingress);
    }
    check_issuers(&mut errors, &spec.api_server);
    let cluster_cidr = check_cidr(
        &mut errors,
        "spec.networking.clusterCIDR",
        &spec.networking.cluster_cidr,
    );
    check_cidr(
        &mut errors,
        "spec.networking.serviceCIDR",
        &spec.networking.service_cidr,
    );
    let vpn_cidr = check_cidr(&mut errors, "spec.vpn.CIDR", &spec.vpn.cidr);
    check_vpn(&mut errors, cluster, vpn_cidr);
    check_join_tokens(&mut errors, &spec.join_tokens);
    if let Some(schedule) = &spec.snapshots {
        check_snapshots(&mut errors, schedule);
    }
    if let Some(size) = spec.networking.node_cidr_mask_size {
        // Without a cluster CIDR (not defaulted yet) only the address family's bound applies;
        // IPv4 is what the default cluster CIDR is.
        let (min, max) = match cluster_cidr {
            Some(net) => (net.prefix_len(), net.max_prefix_len()),
            None => (0, 32),
        };
        check_mask(
            &mut errors,
            "spec.networking.nodeCIDRMaskSize",
            size,
            min,
            max,
        );
    }
    if let Some(size) = spec.networking.node_cidr_mask_size_ipv4 {
        check_mask(
            &mut errors,
            "spec.networking.nodeCIDRMaskSizeIPv4",
            size,
            0,
            32,
        );
    }
    if let Some(size) = spec.networking.node_cidr_mask_size_ipv6 {
        check_mask(
            &mut errors,
            "spec.networking.nodeCIDRMaskSizeIPv6",
            size,
            0,
            128,
        );
    }
    errors
}

fn check_snapshots(errors: &mut Vec<FieldError>, schedule: &crate::cluster::SnapshotSchedule) {
    if let Err(problem) = schedule.interval() {
        errors.push(FieldError::new(
            "spec.snapshots.every",
            Reason::InvalidSchedule { problem },
        ));
    }
    if schedule.keep == Some(0) {
        errors.push(FieldError::new(
            "spec.snapshots.keep",
            Reason::InvalidSchedule {
                problem: "0 keeps nothing: at least 1".into(),
            },
        ));
    }
    let location = &schedule.location;
    let fine = match (
        location.strip_prefix("s3://"),
        location.strip_prefix("file://"),
    ) {
        (Some(rest), _) => !rest.is_empty() && !rest.starts_with('/'),
        (_, Some(path)) => path.starts_with('/'),
        _ => false,
    };
    if !fine {
        errors.push(FieldError::new(
            "spec.snapshots.location",
            Reason::InvalidSchedule {
                problem: format!("{location:?} is not s3://bucket[/prefix] or file:///directory"),
            },
        ));
    }
}

/// Whether `token` has a bootstrap token's form: `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn is_bootstrap_token(token: &str) -> bool {
    let valid = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    token
        .split_once('.')
        .is_some_and(|(id, secret)| valid(id, 6) && valid(secret, 16))
}

/// The VPN: a CIDR with room for its endpoint and a peer; each recorded peer named once, at an
/// address of the CIDR held once and not reserved (the network's, the endpoint's: the first
/// two). Its keys are verified with the rest of the key material (`oi_planner::verify`).
fn check_vpn(errors: &mut Vec<FieldError>, cluster: &Cluster, cidr: Option<IpNet>) {
    let vpn = &cluster.spec.vpn;
    let cidr = cidr.map(|n| n.trunc());
    if vpn.enabled
        && let Some(net) = cidr
        && net.max_prefix_len() - net.prefix_len() < 2
    {
        errors.push(FieldError::new(
            "spec.vpn.CIDR",
            Reason::VpnCidrTooSmall {
                value: vpn.cidr.clone(),
            },
        ));
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut addresses: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for (i, peer) in cluster.status.vpn_peers.iter().enumerate() {
        let field = |f: &str| format!("status.vpnPeers[{i}].{f}");
        match names.get(peer.name.as_str()) {
            Some(&first) => errors.push(FieldError::new(
                field("name"),
                Reason::DuplicateVpnPeer {
                    what: "the name",
                    value: peer.name.clone(),
                    first,
                },
            )),
            None => {
                names.insert(peer.name.as_str(), i);
            }
        }
        let ip = peer
            .address
            .parse::<IpNet>()
            .map(|n| n.addr())
            .or_else(|_| peer.address.parse::<IpAddr>());
        let Ok(ip) = ip else {
            errors.push(FieldError::new(
                field("address"),
                Reason::InvalidIp {
                    value: peer.address.clone(),
                },
            ));
            continue;
        };
        if let Some(net) = cidr {
            if !net.contains(&ip) {
                errors.push(FieldError::new(
                    field("address"),
                    Reason::NotInVpnCidr {
                        value: peer.address.clone(),
                        cidr: net.to_string(),
                    },
                ));
                continue;
            }
            let endpoint = match net.network() {
                IpAddr::V4(a) => IpAddr::V4(std::net::Ipv4Addr::from(u32::from(a).wrapping_add(1))),
                IpAddr::V6(a) => {
                    IpAddr::V6(std::net::Ipv6Addr::from(u128::from(a).wrapping_add(1)))
                }
            };
            if ip == net.network() || ip == endpoint {
                errors.push(FieldError::new(
                    field("address"),
                    Reason::ReservedVpnAddress {
                        value: peer.address.clone(),
                    },
                ));
                continue;
            }
        }
        match addresses.get(&ip) {
            Some(&first) => errors.push(FieldError::new(
                field("address"),
                Reason::DuplicateVpnPeer {
                    what: "the address",
                    value: peer.address.clone(),
                    first,
                },
            )),
            None => {
                addresses.insert(ip, i);
            }
        }
    }
}

/// Join tokens are bootstrap tokens, one per token ID (the ID names its Secret).
fn check_join_tokens(errors: &mut Vec<FieldError>, tokens: &[String]) {
    let mut ids: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for (i, token) in tokens.iter().enumerate() {
        let field = format!("spec.joinTokens[{i}]");
        if !is_bootstrap_token(token) {
            errors.push(FieldError::new(field, Reason::InvalidJoinToken));
            continue;
        }
        let id = token.split_once('.').map_or("", |(id, _)| id);
        if let Some(first) = ids.get(id) {
            errors.push(FieldError::new(
                field,
                Reason::DuplicateJoinTokenId {
                    id: id.to_string(),
                    first: *first,
                },
            ));
        } else {
            ids.insert(id, i);
        }
    }
}

/// Validates a component: name, cluster reference, hypervisor reference.
pub fn validate_component(component: &Component) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_meta(
        &mut errors,
        component.metadata(),
        Component::KIND,
        NameRule::Dns1123Label {
            max_len: MAX_LABEL_LEN,
        },
    );
    let spec = &component.spec;
    if spec.cluster.is_empty() {
        errors.push(FieldError::new("spec.cluster", Reason::Required));
    } else {
        check_name(
            &mut errors,
            "spec.cluster",
            &spec.cluster,
            NameRule::Dns1123Label {
                max_len: MAX_CLUSTER_NAME_LEN,
            },
        );
    }
    if let Some(hypervisor) = &spec.hypervisor {
        check_name(
            &mut errors,
            "spec.hypervisor",
            hypervisor,
            NameRule::Dns1123Subdomain,
        );
    }
    if let Some(etcd) = &component.status.etcd_member {
        if spec.role != ComponentRole::ControlPlane {
            errors.push(FieldError::new(
                "status.etcdMember",
                Reason::NotAControlPlaneReplica,
            ));
        } else if !etcd.initial_cluster.contains_key(&component.metadata.name) {
            errors.push(FieldError::new(
                "status.etcdMember.initialCluster",
                Reason::MissingSelf {
                    name: component.metadata.name.clone(),
                },
            ));
        }
    }
    errors
}

/// Validates a node join request: its name.
pub fn validate_node_join_request(request: &NodeJoinRequest) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_meta(
        &mut errors,
        request.metadata(),
        NodeJoinRequest::KIND,
        NameRule::Dns1123Subdomain,
    );
    errors
}

fn check_meta(errors: &mut Vec<FieldError>, meta: &ObjectMeta, kind: Kind, rule: NameRule) {
    if meta.name.is_empty() {
        errors.push(FieldError::new("metadata.name", Reason::Required));
    } else {
        check_name(errors, "metadata.name", &meta.name, rule);
    }
    match meta.namespace.as_deref() {
        None | Some("") => {}
        Some(namespace) if kind.namespaced() => check_name(
            errors,
            "metadata.namespace",
            namespace,
            NameRule::Dns1123Label {
                max_len: MAX_LABEL_LEN,
            },
        ),
        Some(namespace) => errors.push(FieldError::new(
            "metadata.namespace",
            Reason::NamespaceNotAllowed {
                kind,
                namespace: namespace.to_string(),
            },
        )),
    }
}

fn check_name(errors: &mut Vec<FieldError>, field: &str, value: &str, rule: NameRule) {
    let ok = match rule {
        NameRule::Dns1123Label { max_len } => value.len() <= max_len && is_dns1123_label(value),
        NameRule::Dns1123Subdomain => {
            value.len() <= MAX_SUBDOMAIN_LEN && value.split('.').all(is_dns1123_label)
        }
    };
    if !ok {
        errors.push(FieldError::new(
            field,
            Reason::InvalidName {
                value: value.to_string(),
                rule,
            },
        ));
    }
}

/// An address one host can be reached at: not unspecified (`0.0.0.0`, `::`), multicast or
/// the IPv4 broadcast address.
/// `spec.ingress`: 1 to [`MAX_INGRESS_REPLICAS`] ingresses, a unicast IPv4 virtual address
/// for more than one, a router ID from 1.
fn check_ingress(errors: &mut Vec<FieldError>, ingress: &crate::ClusterIngress) {
    let replicas = ingress.replicas.unwrap_or(1);
    if replicas == 0 || replicas > MAX_INGRESS_REPLICAS {
        errors.push(FieldError::new(
            "spec.ingress.replicas",
            Reason::IngressReplicas {
                replicas,
                max: MAX_INGRESS_REPLICAS,
            },
        ));
    }
    if ingress.virtual_ip.is_empty() {
        if replicas > 1 {
            errors.push(FieldError::new(
                "spec.ingress.virtualIP",
                Reason::VirtualIpRequired { replicas },
            ));
        }
    } else {
        match ingress.virtual_ip.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) if is_unicast(IpAddr::V4(ip)) && !ip.is_loopback() => {}
            Ok(IpAddr::V4(_)) => errors.push(FieldError::new(
                "spec.ingress.virtualIP",
                Reason::NotUnicast {
                    value: ingress.virtual_ip.clone(),
                },
            )),
            _ => errors.push(FieldError::new(
                "spec.ingress.virtualIP",
                Reason::VirtualIpNotIpv4 {
                    value: ingress.virtual_ip.clone(),
                },
            )),
        }
    }
    if ingress.router_id() == Some(0) {
        errors.push(FieldError::new(
            "spec.ingress.virtualRouterID",
            Reason::RouterIdZero,
        ));
    }
}

pub fn is_unicast(ip: IpAddr) -> bool {
    !ip.is_unspecified() && !ip.is_multicast() && ip != IpAddr::V4(std::net::Ipv4Addr::BROADCAST)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= MAX_LABEL_LEN
                && alnum(first)
                && alnum(last)
                && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// `[scheme://]host:port[/]` with scheme `tcp`, `https` or `grpcs`, an IPv6 host in brackets
/// and a port in 1..65535: the forms the CRI client dials.
pub fn is_endpoint_uri(uri: &str) -> bool {
    let rest = match uri.split_once("://") {
        Some(("tcp" | "https" | "grpcs", rest)) => rest,
        Some(_) => return false,
        None => uri,
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '@', ' ']) {
        return false;
    }
    let split = match authority.strip_prefix('[') {
        Some(after) => after
            .split_once("]:")
            .filter(|(host, _)| host.parse::<std::net::Ipv6Addr>().is_ok()),
        None => authority
            .rsplit_once(':')
            .filter(|(host, _)| !host.contains(':')),
    };
    match split {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0),
        None => false,
    }
}

/// Parses a non-empty CIDR, recording an error when it does not parse.
fn check_cidr(errors: &mut Vec<FieldError>, field: &str, value: &str) -> Option<IpNet> {
    if value.is_empty() {
        return None;
    }
    match value.parse::<IpNet>() {
        Ok(net) => Some(net),
        Err(_) => {
            errors.push(FieldError::new(
                field,
                Reason::InvalidCidr {
                    value: value.to_string(),
                },
            ));
            None
        }
    }
}

fn check_mask(errors: &mut Vec<FieldError>, field: &str, size: u8, min: u8, max: u8) {
    if size < min || size > max {
        errors.push(FieldError::new(
            field,
            Reason::InvalidMaskSize { size, min, max },
        ));
    }
}

#[cfg(test)]
mod tests;
