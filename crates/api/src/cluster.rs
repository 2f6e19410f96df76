//! `Cluster` (cluster.oneinfra.ereslibre.es/v1alpha1, namespaced): one managed Kubernetes
//! control plane. Its spec holds the version, replicas, every CA and key (so the object alone
//! is enough to rebuild it), VPN and networking settings; its status the endpoints and peers.
//! A cluster is being deleted when `metadata.deletionTimestamp` is set.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::common::{Certificate, Condition, KeyPair, redacted};
use crate::meta::{Kind, ObjectMeta, is_default, null_as_default, resource};

/// One managed Kubernetes control plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cluster {
    pub api_version: String,
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub spec: ClusterSpec,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub status: ClusterStatus,
}

resource!(Cluster, ClusterSpec, Kind::Cluster);

/// Control plane replicas when `controlPlaneReplicas` is absent.
pub const DEFAULT_CONTROL_PLANE_REPLICAS: u32 = 1;

impl Cluster {
    /// `spec.controlPlaneReplicas`, or its default.
    pub fn control_plane_replicas(&self) -> u32 {
        self.spec
            .control_plane_replicas
            .unwrap_or(DEFAULT_CONTROL_PLANE_REPLICAS)
    }

    /// API servers running alone, beside those of the control plane replicas
    /// (`spec.apiServerReplicas` beyond `spec.controlPlaneReplicas`).
    pub fn extra_api_servers(&self) -> u32 {
        self.spec
            .api_server_replicas
            .unwrap_or(0)
            .saturating_sub(self.control_plane_replicas())
    }

    /// `spec.ingress.replicas`, or one.
    pub fn ingress_replicas(&self) -> u32 {
        self.spec
            .ingress
            .as_ref()
            .and_then(|i| i.replicas)
            .unwrap_or(1)
    }

    /// The virtual address its ingresses share (`spec.ingress.virtualIP`), if set.
    pub fn ingress_virtual_ip(&self) -> Option<std::net::Ipv4Addr> {
        self.spec.ingress.as_ref()?.virtual_ip()
    }

    /// Whether the cluster is marked for deletion (`metadata.deletionTimestamp`).
    pub fn is_being_deleted(&self) -> bool {
        self.metadata.is_being_deleted()
    }
}

/// Desired state of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// `default`, empty, a full version (`1.37.1`, `v1.37.1`) or a minor (`1.37`); defaulting
    /// pins it to a full supported version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubernetes_version: String,
    /// One when absent; zero is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_replicas: Option<u32>,
    /// Ours, optional: API servers in all, at least `controlPlaneReplicas` (each replica runs
    /// one). Those beyond run alone on private hypervisors, behind the ingress, talking to the
    /// cluster's etcd (`<cluster>-apiserver-<i>` components). As many as the replicas when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_replicas: Option<u32>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub certificate_authorities: CertificateAuthorities,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub etcd_server: EtcdServer,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub api_server: KubeApiServer,
    /// Key pair join requests are encrypted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_key: Option<KeyPair>,
    /// Bootstrap tokens workers may join with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub join_tokens: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub vpn: Vpn,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub networking: ClusterNetworking,
    /// Ours, optional: several ingresses and the one address they share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<ClusterIngress>,
    /// Ours, optional: etcd snapshots oi-manager takes on a schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<SnapshotSchedule>,
}

/// How many snapshots a schedule keeps when `keep` is absent.
pub const DEFAULT_SNAPSHOTS_KEPT: u32 = 7;

/// Scheduled etcd snapshots of a cluster (ours): oi-manager takes one `every` so often while
/// the cluster is ready, writes it to `location` as `<namespace>-<name>-<time>.oisnap`, and
/// removes the oldest of the cluster's snapshots there beyond `keep`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotSchedule {
    /// How often: `30m`, `6h`, `1d` (at least a minute).
    pub every: String,
    /// How many of the cluster's snapshots the location keeps; 7 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u32>,
    /// `s3://bucket/prefix` (the manager's AWS_* settings) or `file:///directory`.
    pub location: String,
}

impl SnapshotSchedule {
    /// `keep`, or its default.
    pub fn kept(&self) -> u32 {
        self.keep.unwrap_or(DEFAULT_SNAPSHOTS_KEPT)
    }

    /// `every` as a duration.
    ///
    /// # Errors
    /// Why it is not one of at least a minute.
    pub fn interval(&self) -> Result<time::Duration, String> {
        parse_interval(&self.every)
    }
}

/// A duration of a schedule: a number and `s`, `m`, `h` or `d`; at least a minute.
///
/// # Errors
/// Why it is not.
pub fn parse_interval(s: &str) -> Result<time::Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: i64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 30m, 6h or 1d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?} is not a duration like 30m, 6h or 1d")),
    };
    let d = time::Duration::seconds(n.saturating_mul(seconds));
    if d < time::Duration::minutes(1) {
        return Err(format!("{s:?} is shorter than a minute"));
    }
    Ok(d)
}

/// The annotation that asks oi-manager for a CA rotation: `all`, or CA names separated by
/// commas (`apiServer,etcdPeer,serviceAccount`, ...); removed when the rotation is done.
pub const ROTATE_CA_ANNOTATION: &str = "cluster.oneinfra.ereslibre.es/rotate-ca";

/// A CA rotation under way (ours). Maps are keyed by the CA's manifest field
/// (`spec.apiServer.ca`, `spec.certificateAuthorities.etcdPeer`, ...).
///
/// - `trust`: the new CAs (`next`, the new service-account key) are trusted beside the
///   current ones everywhere; every certificate is still the current CAs'.
/// - `reissue`: the new CAs are the spec's and every certificate is reissued by them; the
///   old ones (`previous`) are still trusted, and the API server presents its new CA
///   cross-signed by the old one (`crossSigned`), so clients that trust only the old CA keep
///   working.
///
/// When the reissue phase is ready, the rotation ends: the old CAs leave every bundle.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaRotation {
    pub phase: String,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub started_at: String,
    /// The CAs rotated (manifest fields), and `spec.apiServer.serviceAccount` for the
    /// service-account key.
    #[serde(default)]
    pub cas: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next: BTreeMap<String, Certificate>,
    /// The old CA certificates (PEM), while the reissue phase lasts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub previous: BTreeMap<String, String>,
    /// New CA certificates signed by the old CA's key (PEM).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cross_signed: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_service_account: Option<KeyPair>,
    /// The old service-account public key (PEM), while the reissue phase lasts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub previous_service_account: String,
}

impl fmt::Debug for CaRotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaRotation")
            .field("phase", &self.phase)
            .field("started_at", &self.started_at)
            .field("cas", &self.cas)
            .field("next", &self.next.keys().collect::<Vec<_>>())
            .field("previous", &self.previous.keys().collect::<Vec<_>>())
            .field(
                "cross_signed",
                &self.cross_signed.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The last snapshot a schedule took (ours).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotRecord {
    /// RFC 3339.
    pub taken_at: String,
    pub location: String,
    /// etcd's revision when it was taken.
    #[serde(default)]
    pub revision: u64,
    /// Bytes of the snapshot file.
    #[serde(default)]
    pub size: u64,
}

/// The cluster's certificate authorities.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificateAuthorities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_client: Option<Certificate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_signer: Option<Certificate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Certificate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_client: Option<Certificate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_client: Option<Certificate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_peer: Option<Certificate>,
}

/// The etcd server settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdServer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<Certificate>,
}

/// The kube-apiserver settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeApiServer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<Certificate>,
    #[serde(rename = "extraSANs", default, skip_serializing_if = "Vec::is_empty")]
    pub extra_sans: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<KeyPair>,
    /// Ours, optional: an OpenID Connect issuer whose ID tokens the API servers accept. A
    /// SIPCluster's provider is wired here (the plan says so, the record writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<ApiServerOidc>,
    /// Ours, optional: more issuers trusted beside `oidc` (an organisation's identity
    /// provider, the console's), each with its own audiences, claims and prefixes. All of
    /// them, `oidc` first, are the JWT authenticators of the API servers' structured
    /// authentication file (`--authentication-config`), which they read again when it
    /// changes: adding, changing or removing an issuer restarts no API server. At most
    /// [`MAX_JWT_ISSUERS`] in all, each issuer URL once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oidc_issuers: Vec<ApiServerOidc>,
}

/// How many JWT issuers the API servers may trust (kube-apiserver's limit).
pub const MAX_JWT_ISSUERS: usize = 64;

impl KubeApiServer {
    /// Every issuer the API servers trust, with the field it is at: `oidc` first, then
    /// `oidcIssuers` in order.
    pub fn jwt_issuers(&self) -> impl Iterator<Item = (String, &ApiServerOidc)> {
        self.oidc
            .iter()
            .map(|o| ("spec.apiServer.oidc".to_string(), o))
            .chain(
                self.oidc_issuers
                    .iter()
                    .enumerate()
                    .map(|(i, o)| (format!("spec.apiServer.oidcIssuers[{i}]"), o)),
            )
    }
}

/// The claim a user's name comes from when `usernameClaim` is absent (kube-apiserver's).
pub const DEFAULT_OIDC_USERNAME_CLAIM: &str = "sub";

/// An OpenID Connect issuer the API servers trust (ours), one JWT authenticator of their
/// structured authentication configuration: ID tokens signed by the issuer's keys (found
/// through its discovery document), issued by `issuerURL`, for `clientID` (or one of
/// `audiences`), unexpired, are accepted as the user their `usernameClaim` names, in the
/// groups their `groupsClaim` lists. (Its fields are those of kube-apiserver's former
/// `--oidc-*` flags, so oneinfra-era manifests keep working.)
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiServerOidc {
    /// `https://...`, exactly the tokens' `iss`.
    #[serde(rename = "issuerURL", default)]
    pub issuer_url: String,
    /// Tokens must name it in `aud`.
    #[serde(rename = "clientID", default)]
    pub client_id: String,
    /// More audiences accepted besides `clientID` (a token naming any one of them is).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    /// `sub` when absent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username_claim: String,
    /// Put before every user name; absent: `<issuerURL>#` unless the claim is `email`; `-`:
    /// nothing (kube-apiserver's rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_prefix: Option<String>,
    /// The claim listing the user's groups; none when absent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub groups_claim: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups_prefix: Option<String>,
    /// Kept for manifests written for `--oidc-signing-algs`: checked, but the structured
    /// configuration has no such setting (kube-apiserver accepts the asymmetric algorithms
    /// RS, ES and PS 256/384/512 of the issuer's keys).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signing_algs: Vec<String>,
    /// PEM certificates the issuer's TLS certificate is checked against (the API servers'
    /// system trust when absent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca: String,
}

/// VPN CIDR when the VPN is enabled and no CIDR is given.
pub const DEFAULT_VPN_CIDR: &str = "10.0.0.0/16";

/// The cluster's ingresses (ours): `replicas` of them, each on a public hypervisor of its
/// own, with the same host ports, and one address, `virtualIP`, held by one of them at a
/// time and moved by VRRP (keepalived, unicast between the ingresses' hypervisors) when it
/// fails. The cluster's API server and VPN endpoints are at that address.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterIngress {
    /// Ingresses (1 when absent); more than one needs `virtualIP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// An IPv4 address on the public hypervisors' network that nothing else uses.
    #[serde(
        rename = "virtualIP",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub virtual_ip: String,
    /// The VRRP router ID (1-255), distinct from other clusters'; the last byte of
    /// `virtualIP` when absent.
    #[serde(
        rename = "virtualRouterID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub virtual_router_id: Option<u8>,
}

impl ClusterIngress {
    /// The virtual address, if one is set and valid IPv4.
    pub fn virtual_ip(&self) -> Option<std::net::Ipv4Addr> {
        self.virtual_ip.parse().ok()
    }

    /// The VRRP router ID: as set, or the last byte of the virtual address.
    pub fn router_id(&self) -> Option<u8> {
        self.virtual_router_id
            .or_else(|| self.virtual_ip().map(|ip| ip.octets()[3]))
    }
}

/// The cluster VPN (WireGuard). Disabled by default. `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Vpn {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
    #[serde(rename = "CIDR", default, skip_serializing_if = "String::is_empty")]
    pub cidr: String,
    /// The VPN ingress private key (WireGuard, base64).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub private_key: String,
    /// The VPN ingress public key (WireGuard, base64).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_key: String,
}

impl fmt::Debug for Vpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vpn")
            .field("enabled", &self.enabled)
            .field("cidr", &self.cidr)
            .field("private_key", &redacted(&self.private_key))
            .field("public_key", &self.public_key)
            .finish()
    }
}

/// Pod network when none is given.
pub const DEFAULT_CLUSTER_CIDR: &str = "10.244.0.0/16";
/// Service network when none is given.
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
/// Per-node pod CIDR mask size when none is given.
pub const DEFAULT_NODE_CIDR_MASK_SIZE: u8 = 24;

/// The cluster networking settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNetworking {
    #[serde(
        rename = "clusterCIDR",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_cidr: String,
    #[serde(
        rename = "serviceCIDR",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub service_cidr: String,
    #[serde(
        rename = "nodeCIDRMaskSize",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_cidr_mask_size: Option<u8>,
    #[serde(
        rename = "nodeCIDRMaskSizeIPv4",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_cidr_mask_size_ipv4: Option<u8>,
    #[serde(
        rename = "nodeCIDRMaskSizeIPv6",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_cidr_mask_size_ipv6: Option<u8>,
}

/// Observed state of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterStatus {
    /// `https://host:port` of the cluster's ingress.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_server_endpoint: String,
    /// `host:port` of the cluster's WireGuard endpoint, when the VPN is enabled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vpn_server_endpoint: String,
    /// Ours, optional: the Kubernetes version the whole control plane runs, set when a run
    /// leaves the cluster ready. A `spec.kubernetesVersion` that differs is an upgrade under
    /// way (one minor at a time, never down).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubernetes_version: String,
    /// etcd member name -> client URL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage_client_endpoints: BTreeMap<String, String>,
    /// etcd member name -> peer URL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage_peer_endpoints: BTreeMap<String, String>,
    /// Client certificates issued for users of the cluster (e.g. `admin`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_certificates: BTreeMap<String, Certificate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub join_tokens: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vpn_peers: Vec<VpnPeer>,
    /// Ours, optional: the workers that joined through a NodeJoinRequest, as the last run
    /// that reached the cluster's API found them (`oi get nodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joined_nodes: Vec<JoinedNode>,
    /// Ours, optional: the last snapshot `spec.snapshots` took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_snapshot: Option<SnapshotRecord>,
    /// Ours, optional: a CA rotation under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_rotation: Option<CaRotation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A worker that joined the cluster: its NodeJoinRequest was answered (`Issued=True`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinedNode {
    /// The Node's name (and its request's).
    #[serde(default)]
    pub name: String,
    /// Whether its Node has registered with the API servers.
    #[serde(default)]
    pub registered: bool,
    /// Its address inside the cluster VPN, with prefix; empty without the VPN.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vpn_address: String,
    /// When its request was answered.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub issued_at: Option<OffsetDateTime>,
}

/// A VPN peer of the cluster. `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VpnPeer {
    #[serde(default)]
    pub name: String,
    /// Address inside the VPN CIDR, with prefix (e.g. `10.0.0.2/32`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub private_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_key: String,
}

impl fmt::Debug for VpnPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VpnPeer")
            .field("name", &self.name)
            .field("address", &self.address)
            .field("private_key", &redacted(&self.private_key))
            .field("public_key", &self.public_key)
            .finish()
    }
}
