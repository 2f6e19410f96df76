//! `SIPCluster` (airship.airshipit.org/v1, namespaced): Airship SIP's per-tenant-cluster
//! request for hosts out of an inventory of `BareMetalHost`s (node sets keyed `ControlPlane`
//! and `Worker`) and for support services. Wire compatible with airshipit/sip's CRD; the
//! fields we add are optional (`spec.clusterRef`, `spec.services.oidcProvider`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::meta::{Kind, ObjectMeta, is_default, null_as_default, resource};

/// Label SIP writes on every host it selects: the SIPCluster's namespace.
pub const CLUSTER_NAMESPACE_LABEL: &str = "sip.airshipit.org/cluster-namespace";
/// Label SIP writes on every host it selects: the SIPCluster's name.
pub const CLUSTER_NAME_LABEL: &str = "sip.airshipit.org/cluster-name";
/// Label SIP writes on every host it selects: the node set's role (`ControlPlane`, `Worker`).
pub const NODE_TYPE_LABEL: &str = "sip.airshipit.org/node-type";
/// Ours: whether a selected host is one of its node set's active hosts or a standby one
/// (values [`NODE_STATE_ACTIVE`], [`NODE_STATE_STANDBY`]).
pub const NODE_STATE_LABEL: &str = "sip.oneinfra.ereslibre.es/node-state";
pub const NODE_STATE_ACTIVE: &str = "active";
pub const NODE_STATE_STANDBY: &str = "standby";
/// Every label selection writes, and deletion removes.
pub const SELECTION_LABELS: [&str; 4] = [
    CLUSTER_NAMESPACE_LABEL,
    CLUSTER_NAME_LABEL,
    NODE_TYPE_LABEL,
    NODE_STATE_LABEL,
];
/// The finalizer upstream's samples carry (and its controller adds).
pub const SIP_FINALIZER: &str = "sip.airship.airshipit.org/finalizer";

/// `status.conditions[].type` upstream sets.
pub const CONDITION_READY: &str = "Ready";
/// Upstream's reasons for the `Ready` condition.
pub const REASON_PROGRESSING: &str = "Progressing";
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
pub const REASON_INFRA_SERVICE_FAILURE: &str = "InfraServiceFailure";
pub const REASON_UNABLE_TO_APPLY_LABELS: &str = "UnableToApplyLabels";
pub const REASON_UNABLE_TO_DECOMMISSION: &str = "UnableToDecommission";
pub const REASON_RECONCILIATION_SUCCEEDED: &str = "ReconciliationSucceeded";

/// The node set roles upstream knows, in the order we select them.
pub const ROLE_CONTROL_PLANE: &str = "ControlPlane";
pub const ROLE_WORKER: &str = "Worker";
pub const ROLES: [&str; 2] = [ROLE_CONTROL_PLANE, ROLE_WORKER];

/// One tenant cluster's hosts and support services.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SipCluster {
    pub api_version: String,
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "null_as_default")]
    pub spec: SipClusterSpec,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub status: SipClusterStatus,
}

resource!(SipCluster, SipClusterSpec, Kind::SipCluster);

/// What the tenant cluster needs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SipClusterSpec {
    /// Node sets by role (`ControlPlane`, `Worker`).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub nodes: BTreeMap<String, NodeSet>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub services: SipClusterServices,
    /// Ours, optional: the Cluster (same namespace) hosting the tenant's control plane, when
    /// it is one of ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<LocalObjectReference>,
}

/// A reference to an object of the same namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalObjectReference {
    pub name: String,
}

/// One role's hosts: which (label selector), spread how (topology key), how many.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSet {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub label_selector: LabelSelector,
    /// Hosts with the same value of this label are in one topology domain: at most one of
    /// them is selected for the node set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub topology_key: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub count: NodeCount,
}

/// How many hosts a node set has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeCount {
    #[serde(default)]
    pub active: i64,
    #[serde(default)]
    pub standby: i64,
}

/// A Kubernetes label selector (`metav1.LabelSelector`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub match_labels: BTreeMap<String, String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether labels satisfy every requirement (an empty selector matches everything, as
    /// Kubernetes' `LabelSelectorAsSelector` makes it). Operators are validated beforehand;
    /// an unknown one matches nothing.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }

    /// The selector in Kubernetes' string form (`a=b,c in (d,e),!f`), for messages.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.match_expressions {
            parts.push(match r.operator.as_str() {
                "In" => format!("{} in ({})", r.key, r.values.join(",")),
                "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
                "Exists" => r.key.clone(),
                "DoesNotExist" => format!("!{}", r.key),
                other => format!("{} {other} ({})", r.key, r.values.join(",")),
            });
        }
        if parts.is_empty() {
            "everything".to_string()
        } else {
            parts.join(",")
        }
    }
}

/// The support services of the tenant cluster; each kind is a list, as upstream has it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SipClusterServices {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub load_balancer_control_plane: Vec<LoadBalancerService>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub load_balancer_worker: Vec<LoadBalancerWorkerService>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub jump_host: Vec<JumpHostService>,
    /// Ours, optional: an OIDC provider the tenant cluster's API servers trust.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub oidc_provider: Vec<OidcProviderService>,
}

impl SipClusterServices {
    /// Every service's `nodeInterfaceId` (the network data interface whose address the
    /// service uses on each host), with the service's field path, in spec order.
    pub fn node_interfaces(&self) -> Vec<(String, &str)> {
        let mut out = Vec::new();
        for (i, s) in self.load_balancer_control_plane.iter().enumerate() {
            out.push((
                format!("spec.services.loadBalancerControlPlane[{i}]"),
                s.node_interface_id.as_str(),
            ));
        }
        for (i, s) in self.load_balancer_worker.iter().enumerate() {
            out.push((
                format!("spec.services.loadBalancerWorker[{i}]"),
                s.node_interface_id.as_str(),
            ));
        }
        for (i, s) in self.jump_host.iter().enumerate() {
            out.push((
                format!("spec.services.jumpHost[{i}]"),
                s.node_interface_id.as_str(),
            ));
        }
        for (i, s) in self.oidc_provider.iter().enumerate() {
            out.push((
                format!("spec.services.oidcProvider[{i}]"),
                s.node_interface_id.as_str(),
            ));
        }
        out.retain(|(_, id)| !id.is_empty());
        out
    }

    pub fn is_empty(&self) -> bool {
        self.load_balancer_control_plane.is_empty()
            && self.load_balancer_worker.is_empty()
            && self.jump_host.is_empty()
            && self.oidc_provider.is_empty()
    }
}

/// A load balancer in front of the control plane hosts' API servers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancerService {
    #[serde(default)]
    pub image: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub node_port: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_interface_id: String,
    #[serde(
        rename = "clusterIP",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_ip: String,
}

/// A load balancer forwarding a range of node ports to the worker hosts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancerWorkerService {
    #[serde(default)]
    pub image: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_interface_id: String,
    #[serde(
        rename = "clusterIP",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_ip: String,
    #[serde(default)]
    pub node_port_range: NodePortRange,
}

/// An inclusive range of ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePortRange {
    pub start: i64,
    pub end: i64,
}

/// A jump host: SSH into it, then to every host; BMC power control.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JumpHostService {
    #[serde(default)]
    pub image: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub node_port: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_interface_id: String,
    #[serde(
        rename = "clusterIP",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_ip: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<JumpHostBmc>,
    /// OpenSSH public keys allowed to log in.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ssh_authorized_keys: Vec<String>,
    /// A Secret of the SIPCluster's namespace: each key a file name, each value an SSH
    /// private key reaching the hosts.
    #[serde(rename = "nodeSSHPrivateKeys", default)]
    pub node_ssh_private_keys: String,
}

/// The jump host's BMC access.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JumpHostBmc {
    #[serde(default)]
    pub proxy: bool,
}

/// Ours: an OIDC provider for the tenant cluster's users.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcProviderService {
    #[serde(default)]
    pub image: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub node_port: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_interface_id: String,
    #[serde(
        rename = "clusterIP",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_ip: String,
    /// The audience of the tokens it issues for the cluster (`--oidc-client-id`).
    #[serde(rename = "clientID", default, skip_serializing_if = "String::is_empty")]
    pub client_id: String,
    /// The claim naming the user (`--oidc-username-claim`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username_claim: String,
    /// The claim listing the user's groups (`--oidc-groups-claim`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub groups_claim: String,
    /// The Secret (in the SIPCluster's namespace) whose key `users.yaml` lists the users
    /// (see [`crate::oidc`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub users_secret: String,
    /// Where the provider may send users back after logging in (exact matches); kubelogin's
    /// `http://localhost:8000` and `http://localhost:18000` when empty.
    #[serde(
        rename = "redirectURIs",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub redirect_uris: Vec<String>,
    /// Allow the resource owner password grant (`kubectl oidc-login --grant-type=password`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub password_grant: bool,
}

/// Ours: what we keep for an OIDC provider we run: its CA (which the tenant's API servers
/// trust) and serving certificate. Made by the planner the first time, kept after.
/// `Debug` never shows a private key.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcProviderStatus {
    /// The service: `oidc-provider-<index>`.
    pub service: String,
    /// Its issuer: `https://<hypervisor address>:<nodePort>`.
    #[serde(rename = "issuerURL")]
    pub issuer_url: String,
    pub certificate_authority: crate::common::Certificate,
    pub serving_certificate: crate::common::Certificate,
}

/// What SIP observed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SipClusterStatus {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub conditions: Vec<MetaCondition>,
    /// Ours: the OIDC providers we run for it.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub oidc_providers: Vec<OidcProviderStatus>,
    /// Ours: the client certificates of the jump hosts' tenant kubeconfigs (when
    /// `spec.clusterRef` names one of our Clusters).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub jump_hosts: Vec<JumpHostStatus>,
}

/// Ours: what a jump host's kubeconfig for the `clusterRef` cluster authenticates with: a
/// client certificate from that cluster's API server client CA, made by the planner and kept
/// (renewed ahead of its end, or when that CA changes). `Debug` never shows its key.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JumpHostStatus {
    /// The service: `jump-host-<index>`.
    pub service: String,
    pub client_certificate: crate::common::Certificate,
}

/// A condition as `metav1.Condition` has it (what upstream's CRD requires).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetaCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: crate::common::ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(with = "time::serde::rfc3339")]
    pub last_transition_time: OffsetDateTime,
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl SipCluster {
    /// Sets a condition as `apimeta.SetStatusCondition` does: the transition time moves only
    /// when the status changes. Returns whether anything changed.
    pub fn set_condition(
        &mut self,
        type_: &str,
        status: crate::common::ConditionStatus,
        reason: &str,
        message: &str,
        now: OffsetDateTime,
    ) -> bool {
        let generation = self.metadata.generation;
        let conditions = &mut self.status.conditions;
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status == status
                    && c.reason == reason
                    && c.message == message
                    && c.observed_generation == generation
                {
                    return false;
                }
                if c.status != status {
                    c.last_transition_time = now;
                }
                c.status = status;
                c.reason = reason.to_string();
                c.message = message.to_string();
                c.observed_generation = generation;
                true
            }
            None => {
                conditions.push(MetaCondition {
                    type_: type_.to_string(),
                    status,
                    observed_generation: generation,
                    last_transition_time: now,
                    reason: reason.to_string(),
                    message: message.to_string(),
                });
                true
            }
        }
    }

    /// The condition of a type, if set.
    pub fn condition(&self, type_: &str) -> Option<&MetaCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// An OpenSSH public key as `authorized_keys` holds it, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizedKey {
    /// `ssh-ed25519`, `ssh-rsa`, `ecdsa-sha2-nistp256`, ...
    pub algorithm: String,
    /// The base64 key blob.
    pub blob: String,
    pub comment: String,
}

/// Key types accepted for the jump host (what current OpenSSH accepts by default; DSA is
/// gone from it).
pub const SSH_KEY_TYPES: [&str; 6] = [
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
];

/// Smallest RSA modulus accepted.
pub const MIN_RSA_BITS: usize = 2048;

/// Parses one `authorized_keys` line (`<type> <base64> [comment]`, no options): the type is
/// one of [`SSH_KEY_TYPES`], the blob is base64 and names the same type, an RSA modulus has
/// at least [`MIN_RSA_BITS`] bits.
///
/// # Errors
///
/// What is wrong, in words.
pub fn parse_authorized_key(line: &str) -> Result<AuthorizedKey, String> {
    use base64::Engine as _;
    let line = line.trim();
    // One key, one line: a line break in a comment would slip another, unchecked, key into
    // `authorized_keys`.
    if line.contains(char::is_control) {
        return Err("a key is one line, without control characters".to_string());
    }
    let mut parts = line.splitn(3, char::is_whitespace);
    let algorithm = parts.next().unwrap_or_default();
    let blob = parts.next().unwrap_or_default().trim();
    let comment = parts.next().unwrap_or_default().trim();
    if !SSH_KEY_TYPES.contains(&algorithm) {
        return Err(if algorithm.is_empty() {
            "empty: an OpenSSH public key is `<type> <base64> [comment]`".to_string()
        } else {
            format!(
                "not an OpenSSH public key of a supported type ({}; options before the key are not accepted)",
                SSH_KEY_TYPES.join(", ")
            )
        });
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .map_err(|_| format!("the {algorithm} key is not base64"))?;
    let mut reader = SshReader(&bytes);
    let inner = reader
        .string()
        .ok_or_else(|| format!("the {algorithm} key blob is truncated"))?;
    if inner != algorithm.as_bytes() {
        return Err(format!(
            "the key blob is a {:?} key, not {algorithm}",
            String::from_utf8_lossy(inner)
        ));
    }
    match algorithm {
        "ssh-rsa" => {
            let _e = reader
                .string()
                .ok_or("the ssh-rsa key blob is truncated (exponent)")?;
            let n = reader
                .string()
                .ok_or("the ssh-rsa key blob is truncated (modulus)")?;
            let n = n.iter().skip_while(|b| **b == 0).collect::<Vec<_>>();
            let bits = match n.first() {
                Some(first) => (n.len() - 1) * 8 + (8 - first.leading_zeros() as usize),
                None => 0,
            };
            if bits < MIN_RSA_BITS {
                return Err(format!(
                    "an RSA key of {bits} bits; at least {MIN_RSA_BITS} are needed"
                ));
            }
        }
        "ssh-ed25519" => {
            let key = reader
                .string()
                .ok_or("the ssh-ed25519 key blob is truncated")?;
            if key.len() != 32 {
                return Err(format!(
                    "an ssh-ed25519 key is 32 bytes, this one {}",
                    key.len()
                ));
            }
        }
        _ => {
            reader
                .string()
                .ok_or_else(|| format!("the {algorithm} key blob is truncated"))?;
        }
    }
    Ok(AuthorizedKey {
        algorithm: algorithm.to_string(),
        blob: blob.to_string(),
        comment: comment.to_string(),
    })
}

/// Reads SSH wire strings (a u32 big-endian length, then the bytes).
struct SshReader<'a>(&'a [u8]);

impl<'a> SshReader<'a> {
    fn string(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_be_bytes(self.0.get(..4)?.try_into().ok()?) as usize;
        let s = self.0.get(4..4 + len)?;
        self.0 = &self.0[4 + len..];
        Some(s)
    }
}

#[cfg(test)]
mod tests;

/// The jump host's inventory of a SIPCluster's hosts (ours): what its `host` tool reads to
/// reach each host's BMC, and its ssh configuration each host's address. It holds BMC
/// passwords: the file is 0600 and `Debug` never shows them.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JumpHostInventory {
    #[serde(default)]
    pub hosts: Vec<InventoryHost>,
}

/// One host of a [`JumpHostInventory`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InventoryHost {
    /// The BareMetalHost's name: what `host reboot <name>` and `ssh <name>` take.
    pub name: String,
    /// Its address on the jump host's `nodeInterfaceId` network, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    pub bmc: InventoryBmc,
}

/// A host's BMC: metal3's address (`redfish+http://host:port/redfish/v1/Systems/<id>`) and
/// the credentials from its Secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InventoryBmc {
    pub address: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub disable_certificate_verification: bool,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for JumpHostInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JumpHostInventory")
            .field("hosts", &self.hosts)
            .finish()
    }
}

impl std::fmt::Debug for InventoryHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InventoryHost")
            .field("name", &self.name)
            .field("ip", &self.ip)
            .field("bmc", &self.bmc)
            .finish()
    }
}

impl std::fmt::Debug for InventoryBmc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InventoryBmc")
            .field("address", &self.address)
            .field(
                "disable_certificate_verification",
                &self.disable_certificate_verification,
            )
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}
