//! Parsed documents and the `World` they describe.

use std::collections::BTreeMap;

use crate::cluster::Cluster;
use crate::component::Component;
use crate::hypervisor::Hypervisor;
use crate::meta::{Kind, ObjectKey, ObjectMeta, Resource};
use crate::node_join_request::NodeJoinRequest;

/// One object of any kind.
// Objects are few and matched on everywhere; boxing the large variants would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Hypervisor(Hypervisor),
    Cluster(Cluster),
    Component(Component),
    NodeJoinRequest(NodeJoinRequest),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Hypervisor(_) => Kind::Hypervisor,
            Object::Cluster(_) => Kind::Cluster,
            Object::Component(_) => Kind::Component,
            Object::NodeJoinRequest(_) => Kind::NodeJoinRequest,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::Hypervisor(o) => o.metadata(),
            Object::Cluster(o) => o.metadata(),
            Object::Component(o) => o.metadata(),
            Object::NodeJoinRequest(o) => o.metadata(),
        }
    }

    pub fn key(&self) -> ObjectKey {
        match self {
            Object::Hypervisor(o) => o.key(),
            Object::Cluster(o) => o.key(),
            Object::Component(o) => o.key(),
            Object::NodeJoinRequest(o) => o.key(),
        }
    }
}

/// An object and where it came from: its 1-based position among the non-empty documents
/// of its input.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub position: usize,
    pub object: Object,
}

/// Every object, by kind, keyed by `(namespace, name)`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct World {
    pub hypervisors: BTreeMap<ObjectKey, Hypervisor>,
    pub clusters: BTreeMap<ObjectKey, Cluster>,
    pub components: BTreeMap<ObjectKey, Component>,
    pub node_join_requests: BTreeMap<ObjectKey, NodeJoinRequest>,
}
