//! Objects the store tests create: the same fixtures for the contract and MemoryStore's own
//! tests.

// Each test file uses some of them.
#![allow(dead_code)]

use oi_api::{
    Cluster, ClusterSpec, Component, ComponentRole, ComponentSpec, Hypervisor, HypervisorSpec,
    LocalCriEndpoint, ObjectKey, ObjectMeta, PortRange,
};

/// A Cluster, in `namespace` or none (then `default`).
pub fn cluster(namespace: Option<&str>, name: &str) -> Cluster {
    let metadata = match namespace {
        Some(ns) => ObjectMeta::namespaced(ns, name),
        None => ObjectMeta::named(name),
    };
    Cluster::new(
        metadata,
        ClusterSpec {
            kubernetes_version: "1.37.1".to_string(),
            ..ClusterSpec::default()
        },
    )
}

/// A control plane Component of `cluster`.
pub fn component(namespace: &str, name: &str, cluster: &str) -> Component {
    Component::new(
        ObjectMeta::namespaced(namespace, name),
        ComponentSpec {
            cluster: cluster.to_string(),
            role: ComponentRole::ControlPlane,
            hypervisor: None,
        },
    )
}

/// A private Hypervisor with a local endpoint.
pub fn hypervisor(name: &str) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named(name),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: "/run/containerd/containerd.sock".to_string(),
            }),
            remote_cri_endpoint: None,
            public: false,
            ip_address: "10.0.0.1".to_string(),
            port_range: PortRange {
                low: 30000,
                high: 30100,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

pub fn key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey::new(namespace, name)
}
