//! `NodeJoinRequest` (node.oneinfra.ereslibre.es/v1alpha1, cluster-scoped, created inside each
//! managed cluster): a worker's request to join, and oneinfra's answer, every answer field
//! encrypted with the request's symmetric key.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::common::{Condition, redacted};
use crate::meta::{Kind, ObjectMeta, is_default, null_as_default, resource};

/// A worker's join request and its encrypted answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeJoinRequest {
    pub api_version: String,
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub spec: NodeJoinRequestSpec,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_default"
    )]
    pub status: NodeJoinRequestStatus,
}

resource!(NodeJoinRequest, NodeJoinRequestSpec, Kind::NodeJoinRequest);

/// What the joining node asks for.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeJoinRequestSpec {
    /// Base64 symmetric key, encrypted with the cluster's join public key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub symmetric_key: String,
    /// API server endpoint for the kubelet's kubeconfig; the cluster's when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_server_endpoint: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_runtime_endpoint: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_service_endpoint: String,
    #[serde(rename = "extraSANs", default, skip_serializing_if = "Vec::is_empty")]
    pub extra_sans: Vec<String>,
    /// Ours, optional: the worker's own WireGuard public key (sealed like the fields above).
    /// With it the answer carries no private key: the worker's never leaves it. Without it
    /// (oneinfra's form) the cluster makes the key pair and sends the private key sealed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vpn_public_key: String,
}

impl fmt::Debug for NodeJoinRequestSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeJoinRequestSpec")
            .field("symmetric_key", &redacted(&self.symmetric_key))
            .field("api_server_endpoint", &self.api_server_endpoint)
            .field(
                "container_runtime_endpoint",
                &self.container_runtime_endpoint,
            )
            .field("image_service_endpoint", &self.image_service_endpoint)
            .field("extra_sans", &self.extra_sans)
            .field("vpn_public_key", &self.vpn_public_key)
            .finish()
    }
}

/// oneinfra's answer; every string is encrypted with the symmetric key and base64 encoded.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeJoinRequestStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubernetes_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpn: Option<NodeJoinRequestVpn>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kube_config: String,
    #[serde(
        rename = "kubeletClientCACertificate",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub kubelet_client_ca_certificate: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubelet_server_certificate: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubelet_server_private_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubelet_config: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl fmt::Debug for NodeJoinRequestStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeJoinRequestStatus")
            .field("kubernetes_version", &self.kubernetes_version)
            .field("vpn", &self.vpn)
            .field("kube_config", &redacted(&self.kube_config))
            .field(
                "kubelet_client_ca_certificate",
                &self.kubelet_client_ca_certificate,
            )
            .field(
                "kubelet_server_certificate",
                &self.kubelet_server_certificate,
            )
            .field(
                "kubelet_server_private_key",
                &redacted(&self.kubelet_server_private_key),
            )
            .field("kubelet_config", &self.kubelet_config)
            .field("conditions", &self.conditions)
            .finish()
    }
}

/// The VPN part of the answer, when the cluster's VPN is enabled.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeJoinRequestVpn {
    #[serde(rename = "CIDR", default, skip_serializing_if = "String::is_empty")]
    pub cidr: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint_public_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub peer_private_key: String,
}

impl fmt::Debug for NodeJoinRequestVpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeJoinRequestVpn")
            .field("cidr", &self.cidr)
            .field("address", &self.address)
            .field("endpoint", &self.endpoint)
            .field("endpoint_public_key", &self.endpoint_public_key)
            .field("peer_private_key", &redacted(&self.peer_private_key))
            .finish()
    }
}
