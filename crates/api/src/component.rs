//! `Component` (cluster.oneinfra.ereslibre.es/v1alpha1, namespaced): one schedulable unit of
//! a cluster, a control plane replica or the cluster's ingress, placed on one hypervisor.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::common::{Certificate, Condition};
use crate::meta::{Kind, ObjectKey, ObjectMeta, is_default, null_as_default, resource};

/// One schedulable unit of a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    pub api_version: String,
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    pub spec: ComponentSpec,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub status: ComponentStatus,
}

resource!(Component, ComponentSpec, Kind::Component);

impl Component {
    /// Key of the Cluster this component belongs to (same namespace, `spec.cluster`).
    pub fn cluster_key(&self) -> ObjectKey {
        ObjectKey::new(
            self.metadata.namespace_or_default(),
            self.spec.cluster.clone(),
        )
    }

    /// Whether it belongs to the Cluster at `cluster`: [`Component::cluster_key`] compared
    /// without building it (a manager asks this of every component at each reconcile).
    pub fn belongs_to(&self, cluster: &ObjectKey) -> bool {
        self.spec.cluster == cluster.name
            && self.metadata.namespace_or_default() == cluster.namespace
    }
}

/// What a component is and where it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentSpec {
    /// Name of the Cluster, in the component's namespace.
    #[serde(default)]
    pub cluster: String,
    pub role: ComponentRole,
    /// Name of the hypervisor it is scheduled on; `None` until scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypervisor: Option<String>,
}

/// The role of a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ComponentRole {
    /// etcd member, kube-apiserver, kube-controller-manager, kube-scheduler; on a private
    /// hypervisor.
    #[serde(rename = "control-plane")]
    ControlPlane,
    /// haproxy in front of the API servers (and the VPN endpoint); on a public hypervisor.
    #[serde(rename = "control-plane-ingress")]
    ControlPlaneIngress,
    /// Ours: a kube-apiserver alone, beyond those of the control plane replicas
    /// (`spec.apiServerReplicas`); on a private hypervisor, behind the ingress.
    #[serde(rename = "control-plane-apiserver")]
    ApiServer,
}

impl ComponentRole {
    /// Whether it runs an API server behind the ingress (a control plane replica, or an API
    /// server alone).
    pub fn serves_api(self) -> bool {
        matches!(self, ComponentRole::ControlPlane | ComponentRole::ApiServer)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ComponentRole::ControlPlane => "control-plane",
            ComponentRole::ControlPlaneIngress => "control-plane-ingress",
            ComponentRole::ApiServer => "control-plane-apiserver",
        }
    }
}

impl fmt::Display for ComponentRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Observed state of a component.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentStatus {
    /// Host ports allocated to this component, by purpose (e.g. `apiserver`, `etcd-peer`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocated_host_ports: Vec<ComponentHostPortAllocation>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub client_certificates: BTreeMap<String, Certificate>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_certificates: BTreeMap<String, Certificate>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_endpoints: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub output_endpoints: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// How this control plane replica's etcd member is started (our addition): set when
    /// the replica is first planned, then kept, so the rendered etcd flags never change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_member: Option<EtcdMemberStart>,
}

/// The `--initial-cluster` and `--initial-cluster-state` an etcd member is started with
/// (etcd ignores both once its data directory exists).
///
/// The replicas of a new cluster found it together (`new`, all of them in `initialCluster`);
/// a replica added later joins the running cluster as a learner (`existing`, the members at
/// the time it joins and itself).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdMemberStart {
    /// Member name → peer URL.
    #[serde(default)]
    pub initial_cluster: BTreeMap<String, String>,
    pub initial_cluster_state: EtcdInitialClusterState,
}

/// etcd's `--initial-cluster-state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EtcdInitialClusterState {
    /// Founds a new cluster with the other members of `initialCluster`.
    #[default]
    #[serde(rename = "new")]
    New,
    /// Joins a running cluster (as the learner the engine added).
    #[serde(rename = "existing")]
    Existing,
}

impl EtcdInitialClusterState {
    pub fn as_str(self) -> &'static str {
        match self {
            EtcdInitialClusterState::New => "new",
            EtcdInitialClusterState::Existing => "existing",
        }
    }
}

impl ComponentStatus {
    /// The host port allocated for a purpose, if any.
    pub fn host_port(&self, name: &str) -> Option<u16> {
        self.allocated_host_ports
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.port)
    }
}

/// A host port allocated to a component for one purpose.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentHostPortAllocation {
    #[serde(default)]
    pub name: String,
    pub port: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn belongs_to_is_cluster_key_compared() {
        let component = |namespace: Option<&str>, cluster: &str| -> Component {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
                "kind": "Component",
                "metadata": {"name": "x", "namespace": namespace},
                "spec": {"cluster": cluster, "role": "control-plane"},
            }))
            .expect("a component")
        };
        for (c, key, belongs) in [
            (component(None, "c1"), ObjectKey::new("default", "c1"), true),
            (
                component(Some(""), "c1"),
                ObjectKey::new("default", "c1"),
                true,
            ),
            (
                component(Some("team"), "c1"),
                ObjectKey::new("team", "c1"),
                true,
            ),
            (
                component(Some("team"), "c1"),
                ObjectKey::new("default", "c1"),
                false,
            ),
            (
                component(None, "c1"),
                ObjectKey::new("default", "c2"),
                false,
            ),
        ] {
            assert_eq!(c.belongs_to(&key), belongs, "{key}");
            assert_eq!(c.cluster_key() == key, belongs, "{key}");
        }
    }
}
