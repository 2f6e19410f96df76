//! oneinfra v1alpha1 API: types, defaults, validation, manifests (no I/O).
//!
//! The model: `Hypervisor`s (machines with a CRI endpoint, cluster-scoped) host the
//! `Component`s (a control plane replica, or the ingress) of each `Cluster` (namespaced);
//! `NodeJoinRequest`s are workers asking to join a managed cluster. All state lives in these
//! objects, wire compatible with oneinfra's CRDs, strict about unknown kinds and fields.
//!
//! ```text
//! manifest text ──parse_manifests──► Vec<Document> ──World::from_documents──► World
//!   (strict: unknown kind, apiVersion     (validate_documents: fields,        │ apply_defaults
//!    or field names its path)              names, duplicates)                 │ (pins versions)
//!                                                                             ▼
//!                      manifest text ◄──to_yaml (sorted, stable bytes)── World {hypervisors,
//!                                                                          clusters, components,
//!                                                                          node_join_requests}
//! ```
//!
//! `World::load` chains parse, validation and defaults for one input.
//!
//! Objects are identified by [`ObjectKey`] `(namespace, name)`: cluster-scoped kinds have an
//! empty namespace, namespaced objects without one are in `default` (never written back).

// Tests state their expectations with unwrap: a panic is the failure report.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod cluster;
pub mod common;
pub mod component;
pub mod crd;
pub mod defaults;
pub mod hypervisor;
pub mod keys;
pub mod manifest;
pub mod meta;
pub mod metal3;
pub mod node_join_request;
pub mod oidc;
pub mod quantity;
pub mod runtime;
pub mod sip;
pub mod validation;
pub mod versions;
pub mod world;

pub use cluster::{
    ApiServerOidc, CaRotation, CertificateAuthorities, Cluster, ClusterIngress, ClusterNetworking,
    ClusterSpec, ClusterStatus, EtcdServer, JoinedNode, KubeApiServer, ROTATE_CA_ANNOTATION,
    SnapshotRecord, SnapshotSchedule, Vpn, VpnPeer,
};
pub use common::{
    Certificate, Condition, ConditionStatus, KeyPair, condition_is_true, condition_types,
    find_condition, set_condition,
};
pub use component::{
    Component, ComponentHostPortAllocation, ComponentRole, ComponentSpec, ComponentStatus,
    EtcdInitialClusterState, EtcdMemberStart,
};
pub use hypervisor::{
    CriEndpoint, Hypervisor, HypervisorCapacity, HypervisorPortAllocation, HypervisorSpec,
    HypervisorStatus, LocalCriEndpoint, PortRange, RemoteCriEndpoint,
};
pub use manifest::{ManifestError, RawDocument, parse_manifests, parse_raw, parse_raw_documents};
pub use meta::{DEFAULT_NAMESPACE, Kind, ObjectKey, ObjectMeta, OwnerReference, Resource};
pub use metal3::{BareMetalHost, BmcAddress, Secret, parse_bmc_address};
pub use node_join_request::{
    NodeJoinRequest, NodeJoinRequestSpec, NodeJoinRequestStatus, NodeJoinRequestVpn,
};
pub use sip::{
    InventoryBmc, InventoryHost, JumpHostInventory, LabelSelector, NodeSet, SipCluster,
    SipClusterServices, SipClusterSpec,
};
pub use validation::{
    FieldError, NameRule, Reason, ValidationError, validate_documents, validate_object,
};
pub use world::{Document, LoadError, Object, World};
