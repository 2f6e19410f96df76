//! `Hypervisor` (infra.oneinfra.ereslibre.es/v1alpha1, cluster-scoped): a machine exposing a
//! CRI endpoint, where oneinfra schedules components.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::common::{Certificate, Condition, ConditionStatus, condition_types, find_condition};
use crate::meta::{Kind, ObjectMeta, is_default, null_as_default, resource};

/// A machine exposing a CRI endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hypervisor {
    pub api_version: String,
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    pub spec: HypervisorSpec,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub status: HypervisorStatus,
}

resource!(Hypervisor, HypervisorSpec, Kind::Hypervisor);

/// Desired state of a hypervisor. Exactly one of `local_cri_endpoint` and
/// `remote_cri_endpoint` is set (see validation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HypervisorSpec {
    /// Unix socket of a CRI endpoint on this machine (development and tests).
    #[serde(
        rename = "localCRIEndpoint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub local_cri_endpoint: Option<LocalCriEndpoint>,
    /// A CRI endpoint reached over TCP with mutual TLS.
    #[serde(
        rename = "remoteCRIEndpoint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub remote_cri_endpoint: Option<RemoteCriEndpoint>,
    /// Public hypervisors run cluster ingresses; private ones run control planes.
    pub public: bool,
    /// Address components on this hypervisor are reached at.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_address: String,
    /// Ports allocated to components are taken from this range.
    #[serde(default, deserialize_with = "null_as_default")]
    pub port_range: PortRange,
    /// Ours, optional: cordoned. Placement puts no new component on it; what runs there
    /// stays (as Kubernetes' `node.spec.unschedulable`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,
    /// Ours, optional: drained. Placement puts nothing new on it (as when cordoned), and
    /// what runs there moves elsewhere, one control plane replica of a cluster at a time: its
    /// replacement joins (etcd learner, promoted, its API server ready) before it leaves. An
    /// ingress moves too, and with it the cluster's address.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain: bool,
    /// Ours, optional: what the hypervisor can hold. Placement never goes beyond it; without
    /// it, only the port range limits what is placed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<HypervisorCapacity>,
}

/// What a hypervisor can hold: a number of components, and CPU and memory against each
/// component's requests (`crate::versions::requests`). Any limit may be left out.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HypervisorCapacity {
    /// Components (control plane replicas and ingresses) of any cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<u32>,
    /// CPU, as a Kubernetes quantity (`4`, `3500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory, as a Kubernetes quantity (`8Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

/// A CRI endpoint on a unix socket.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalCriEndpoint {
    #[serde(rename = "criEndpointPath", default)]
    pub cri_endpoint_path: String,
}

/// A CRI endpoint over TCP, authenticated with mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteCriEndpoint {
    /// e.g. `tcp://192.0.2.10:27000`.
    #[serde(rename = "criEndpointURI", default)]
    pub cri_endpoint_uri: String,
    /// PEM CA certificate the endpoint's server certificate is checked against.
    #[serde(
        rename = "caCertificate",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub ca_certificate: String,
    /// Client certificate and key presented to the endpoint.
    #[serde(
        rename = "clientCertificate",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_certificate: Option<Certificate>,
}

/// An inclusive port range. Kept wider than `u16` so that out of range values are reported
/// by validation rather than by the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRange {
    #[serde(default)]
    pub low: u32,
    #[serde(default)]
    pub high: u32,
}

impl PortRange {
    /// The range as ports, `None` unless `1 <= low <= high <= 65535`.
    pub fn ports(&self) -> Option<std::ops::RangeInclusive<u16>> {
        let low = u16::try_from(self.low).ok()?;
        let high = u16::try_from(self.high).ok()?;
        (low >= 1 && low <= high).then_some(low..=high)
    }

    /// Whether `port` lies in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.low..=self.high).contains(&u32::from(port))
    }
}

/// Path -> content hash of files placed for one component.
pub type FileMap = BTreeMap<String, String>;
/// Component name -> its files.
pub type ComponentFileMap = BTreeMap<String, FileMap>;
/// Cluster name -> its components' files.
pub type ClusterFileMap = BTreeMap<String, ComponentFileMap>;
/// Cluster namespace -> its clusters' files.
pub type NamespacedClusterFileMap = BTreeMap<String, ClusterFileMap>;

/// Observed state of a hypervisor: its port allocations and the files placed on it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HypervisorStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocated_ports: Vec<HypervisorPortAllocation>,
    /// Ports released by deleted components, reused before new ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freed_ports: Vec<u16>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: NamespacedClusterFileMap,
    /// Ours, optional: `Reachable` (see [`condition_types::REACHABLE`]), kept by
    /// `oi-manager`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A port of a hypervisor allocated to a component of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HypervisorPortAllocation {
    #[serde(default)]
    pub cluster: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_namespace: String,
    #[serde(default)]
    pub component: String,
    pub port: u16,
}

/// A hypervisor's CRI endpoint, whichever kind it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriEndpoint<'a> {
    /// Unix socket path.
    Local(&'a str),
    Remote(&'a RemoteCriEndpoint),
}

impl HypervisorSpec {
    /// The CRI endpoint; `None` unless exactly one of local and remote is set (which
    /// validation guarantees).
    pub fn cri_endpoint(&self) -> Option<CriEndpoint<'_>> {
        match (&self.local_cri_endpoint, &self.remote_cri_endpoint) {
            (Some(local), None) => Some(CriEndpoint::Local(&local.cri_endpoint_path)),
            (None, Some(remote)) => Some(CriEndpoint::Remote(remote)),
            _ => None,
        }
    }
}

/// Why a hypervisor is lost for good: what runs there is replaced elsewhere, without it (see
/// [`Hypervisor::lost`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// It is being deleted (`oi hypervisor remove`, or `kubectl delete hypervisor`).
    Removed,
    /// It has not answered since `since`, longer than the grace period allowed.
    Unreachable { since: time::OffsetDateTime },
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Removed => f.write_str("removed"),
            Lost::Unreachable { since } => {
                let since = since
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_else(|_| since.to_string());
                write!(f, "unreachable since {since}")
            }
        }
    }
}

impl Hypervisor {
    /// Whether the hypervisor is lost for good, and why: it is being deleted, or (with
    /// `unreachable_after` set) its `Reachable` condition has been `False` for longer than
    /// that at `now`. A lost hypervisor gets nothing new, and what runs there is replaced
    /// elsewhere without waiting for it.
    pub fn lost(
        &self,
        now: time::OffsetDateTime,
        unreachable_after: Option<time::Duration>,
    ) -> Option<Lost> {
        if self.metadata.is_being_deleted() {
            return Some(Lost::Removed);
        }
        let grace = unreachable_after?;
        let c = find_condition(&self.status.conditions, condition_types::REACHABLE)?;
        let since = c.last_transition_time?;
        (c.status == ConditionStatus::False && now - since >= grace)
            .then_some(Lost::Unreachable { since })
    }
}
