//! Parsed documents and the `World` they describe.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use crate::cluster::Cluster;
use crate::component::Component;
use crate::hypervisor::Hypervisor;
use crate::manifest::{ManifestError, parse_manifests, resource_yaml};
use crate::meta::{Kind, ObjectKey, ObjectMeta, Resource};
use crate::metal3::{BareMetalHost, Secret};
use crate::node_join_request::NodeJoinRequest;
use crate::sip::SipCluster;
use crate::validation::{ValidationError, validate_documents};

/// One object of any kind.
// Objects are few and matched on everywhere; boxing the large variants would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Hypervisor(Hypervisor),
    Cluster(Cluster),
    Component(Component),
    NodeJoinRequest(NodeJoinRequest),
    SipCluster(SipCluster),
    BareMetalHost(BareMetalHost),
    Secret(Secret),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Hypervisor(_) => Kind::Hypervisor,
            Object::Cluster(_) => Kind::Cluster,
            Object::Component(_) => Kind::Component,
            Object::NodeJoinRequest(_) => Kind::NodeJoinRequest,
            Object::SipCluster(_) => Kind::SipCluster,
            Object::BareMetalHost(_) => Kind::BareMetalHost,
            Object::Secret(_) => Kind::Secret,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::Hypervisor(o) => o.metadata(),
            Object::Cluster(o) => o.metadata(),
            Object::Component(o) => o.metadata(),
            Object::NodeJoinRequest(o) => o.metadata(),
            Object::SipCluster(o) => o.metadata(),
            Object::BareMetalHost(o) => o.metadata(),
            Object::Secret(o) => o.metadata(),
        }
    }

    pub fn key(&self) -> ObjectKey {
        match self {
            Object::Hypervisor(o) => o.key(),
            Object::Cluster(o) => o.key(),
            Object::Component(o) => o.key(),
            Object::NodeJoinRequest(o) => o.key(),
            Object::SipCluster(o) => o.key(),
            Object::BareMetalHost(o) => o.key(),
            Object::Secret(o) => o.key(),
        }
    }
}

impl From<SipCluster> for Object {
    fn from(o: SipCluster) -> Self {
        Object::SipCluster(o)
    }
}

impl From<BareMetalHost> for Object {
    fn from(o: BareMetalHost) -> Self {
        Object::BareMetalHost(o)
    }
}

impl From<Secret> for Object {
    fn from(o: Secret) -> Self {
        Object::Secret(o)
    }
}

impl From<Hypervisor> for Object {
    fn from(o: Hypervisor) -> Self {
        Object::Hypervisor(o)
    }
}

impl From<Cluster> for Object {
    fn from(o: Cluster) -> Self {
        Object::Cluster(o)
    }
}

impl From<Component> for Object {
    fn from(o: Component) -> Self {
        Object::Component(o)
    }
}

impl From<NodeJoinRequest> for Object {
    fn from(o: NodeJoinRequest) -> Self {
        Object::NodeJoinRequest(o)
    }
}

/// An object and where it came from: the input's name and the 1-based position of its
/// document among all documents of that input (empty documents count; the items of a `List`
/// document share its position).
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub source_name: String,
    pub position: usize,
    pub object: Object,
}

/// Why manifests could not become a [`World`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Every validation error found, in document order.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<ValidationError>),
}

/// Every object, by kind, keyed by `(namespace, name)` (see [`ObjectKey`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct World {
    pub hypervisors: BTreeMap<ObjectKey, Hypervisor>,
    pub clusters: BTreeMap<ObjectKey, Cluster>,
    pub components: BTreeMap<ObjectKey, Component>,
    pub node_join_requests: BTreeMap<ObjectKey, NodeJoinRequest>,
    /// Airship SIP's objects: tenant clusters' host and service requests, the inventory of
    /// hosts, and the Secrets they reference.
    pub sip_clusters: BTreeMap<ObjectKey, SipCluster>,
    pub bare_metal_hosts: BTreeMap<ObjectKey, BareMetalHost>,
    pub secrets: BTreeMap<ObjectKey, Secret>,
    /// Whether the Clusters' and Components' private keys are written to Secrets, the
    /// objects referencing them ([`crate::keys`]): set when any key was read that way, so
    /// that a world is written back as it was read. In memory the keys are always inline.
    pub keys_in_secrets: bool,
}

impl World {
    /// Parses, validates and defaults one input: what the CLI does with a manifest.
    ///
    /// # Errors
    ///
    /// [`LoadError::Manifest`] for the first parse error, [`LoadError::Invalid`] with every
    /// validation error otherwise.
    pub fn load(text: &str, source_name: &str) -> Result<World, LoadError> {
        let documents = parse_manifests(text, source_name)?;
        let mut world = World::from_documents(documents).map_err(LoadError::Invalid)?;
        world.apply_defaults();
        Ok(world)
    }

    /// Validates documents (from one or several inputs) and collects them in a world, as they
    /// are (no defaults applied).
    ///
    /// # Errors
    ///
    /// Every validation error, duplicates included, in document order.
    pub fn from_documents(documents: Vec<Document>) -> Result<World, Vec<ValidationError>> {
        let errors = validate_documents(&documents);
        if !errors.is_empty() {
            return Err(errors);
        }
        let mut world = World::default();
        for document in documents {
            // Duplicates were rejected by validation, so nothing is replaced here.
            world.insert(document.object);
        }
        Ok(world)
    }

    /// Inserts or replaces an object; returns the one it replaced.
    pub fn insert(&mut self, object: Object) -> Option<Object> {
        match object {
            Object::Hypervisor(o) => self.hypervisors.insert(o.key(), o).map(Object::from),
            Object::Cluster(o) => self.clusters.insert(o.key(), o).map(Object::from),
            Object::Component(o) => self.components.insert(o.key(), o).map(Object::from),
            Object::NodeJoinRequest(o) => {
                self.node_join_requests.insert(o.key(), o).map(Object::from)
            }
            Object::SipCluster(o) => self.sip_clusters.insert(o.key(), o).map(Object::from),
            Object::BareMetalHost(o) => self.bare_metal_hosts.insert(o.key(), o).map(Object::from),
            Object::Secret(o) => self.secrets.insert(o.key(), o).map(Object::from),
        }
    }

    /// Inserts an object unless one of the same kind and key exists; returns whether it did.
    pub fn insert_new(&mut self, object: Object) -> bool {
        fn put<T: Resource>(map: &mut BTreeMap<ObjectKey, T>, o: T) -> bool {
            match map.entry(o.key()) {
                Entry::Vacant(v) => {
                    v.insert(o);
                    true
                }
                Entry::Occupied(_) => false,
            }
        }
        match object {
            Object::Hypervisor(o) => put(&mut self.hypervisors, o),
            Object::Cluster(o) => put(&mut self.clusters, o),
            Object::Component(o) => put(&mut self.components, o),
            Object::NodeJoinRequest(o) => put(&mut self.node_join_requests, o),
            Object::SipCluster(o) => put(&mut self.sip_clusters, o),
            Object::BareMetalHost(o) => put(&mut self.bare_metal_hosts, o),
            Object::Secret(o) => put(&mut self.secrets, o),
        }
    }

    /// The components of a cluster (same namespace, `spec.cluster` naming it), in key order.
    pub fn components_of<'a>(
        &'a self,
        cluster: &'a ObjectKey,
    ) -> impl Iterator<Item = &'a Component> + 'a {
        self.components.values().filter(move |c| {
            c.metadata.namespace_or_default() == cluster.namespace && c.spec.cluster == cluster.name
        })
    }

    /// The cluster a component belongs to, if it is in the world.
    pub fn cluster_of(&self, component: &Component) -> Option<&Cluster> {
        self.clusters.get(&component.cluster_key())
    }

    /// The hypervisor a component is scheduled on, if scheduled and in the world.
    pub fn hypervisor_of(&self, component: &Component) -> Option<&Hypervisor> {
        let name = component.spec.hypervisor.as_deref()?;
        self.hypervisors.get(&ObjectKey::cluster_scoped(name))
    }

    /// Applies oneinfra's defaults to every object (see [`crate::defaults`]).
    pub fn apply_defaults(&mut self) {
        for cluster in self.clusters.values_mut() {
            crate::defaults::default_cluster(cluster);
        }
    }

    /// Total number of objects.
    pub fn len(&self) -> usize {
        self.hypervisors.len()
            + self.clusters.len()
            + self.components.len()
            + self.node_join_requests.len()
            + self.sip_clusters.len()
            + self.bare_metal_hosts.len()
            + self.secrets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Deterministic multi-document YAML: hypervisors, clusters, components, node join
    /// requests, SIP clusters, bare metal hosts, secrets, each sorted by namespace then name, `---` between documents. Parsing the
    /// output and writing it again gives the same bytes.
    ///
    /// # Errors
    ///
    /// [`ManifestError::Serialize`] if serde_yaml_ng refuses a value.
    pub fn to_yaml(&self) -> Result<String, ManifestError> {
        let mut docs = Vec::with_capacity(self.len());
        for o in self.hypervisors.values() {
            docs.push(resource_yaml(o)?);
        }
        // With keys in Secrets: each object's keys out, its Secrets in place of those of the
        // same name read.
        let mut made: BTreeMap<ObjectKey, String> = BTreeMap::new();
        for o in self.clusters.values() {
            docs.push(self.keyed_yaml(o, &mut made)?);
        }
        for o in self.components.values() {
            docs.push(self.keyed_yaml(o, &mut made)?);
        }
        for o in self.node_join_requests.values() {
            docs.push(resource_yaml(o)?);
        }
        for o in self.sip_clusters.values() {
            docs.push(resource_yaml(o)?);
        }
        for o in self.bare_metal_hosts.values() {
            docs.push(resource_yaml(o)?);
        }
        let mut secrets: BTreeMap<ObjectKey, String> = BTreeMap::new();
        for (key, o) in &self.secrets {
            secrets.insert(key.clone(), resource_yaml(o)?);
        }
        secrets.extend(made);
        docs.extend(secrets.into_values());
        Ok(docs.join("---\n"))
    }

    /// One object as a YAML document: as it is, or, with [`World::keys_in_secrets`], with
    /// its private keys moved out ([`crate::keys::externalize`]) into `made`'s Secrets.
    fn keyed_yaml<T: serde::Serialize + Resource>(
        &self,
        object: &T,
        made: &mut BTreeMap<ObjectKey, String>,
    ) -> Result<String, ManifestError> {
        if !self.keys_in_secrets {
            return resource_yaml(object);
        }
        let serialize = |message: String| ManifestError::Serialize {
            kind: T::KIND,
            name: object.key().to_string(),
            message,
        };
        let mut value = serde_yaml_ng::to_value(object).map_err(|e| serialize(e.to_string()))?;
        for secret in crate::keys::externalize(T::KIND, &mut value).map_err(serialize)? {
            let meta = |f: &str| {
                secret["metadata"][f]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            };
            let text = serde_yaml_ng::to_string(&secret).map_err(|e| serialize(e.to_string()))?;
            made.insert(ObjectKey::new(meta("namespace"), meta("name")), text);
        }
        serde_yaml_ng::to_string(&value).map_err(|e| serialize(e.to_string()))
    }
}
