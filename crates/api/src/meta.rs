//! Object identity and metadata shared by every kind: `ObjectMeta` (the standard Kubernetes
//! fields, so `kubectl get -o yaml` output loads), `ObjectKey` and the `Resource` trait.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// The namespace an object without `metadata.namespace` belongs to, for identity only: it is
/// never written back into output that did not have it.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The kinds we read: oneinfra v1alpha1's four, and the three of Airship SIP (its
/// `SIPCluster`, metal3's `BareMetalHost` and the core `Secret` they reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Hypervisor,
    Cluster,
    Component,
    NodeJoinRequest,
    SipCluster,
    BareMetalHost,
    Secret,
}

impl Kind {
    /// Every kind, in the order [`crate::World::to_yaml`] writes them.
    pub const ALL: [Kind; 7] = [
        Kind::Hypervisor,
        Kind::Cluster,
        Kind::Component,
        Kind::NodeJoinRequest,
        Kind::SipCluster,
        Kind::BareMetalHost,
        Kind::Secret,
    ];

    /// oneinfra's own kinds, those with CustomResourceDefinitions of ours.
    pub const ONEINFRA: [Kind; 4] = [
        Kind::Hypervisor,
        Kind::Cluster,
        Kind::Component,
        Kind::NodeJoinRequest,
    ];

    /// The `apiVersion` (group/version) objects of this kind carry.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Hypervisor => INFRA_API_VERSION,
            Kind::Cluster | Kind::Component => CLUSTER_API_VERSION,
            Kind::NodeJoinRequest => NODE_API_VERSION,
            Kind::SipCluster => SIP_API_VERSION,
            Kind::BareMetalHost => METAL3_API_VERSION,
            Kind::Secret => CORE_API_VERSION,
        }
    }

    /// The `kind` string on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Hypervisor => "Hypervisor",
            Kind::Cluster => "Cluster",
            Kind::Component => "Component",
            Kind::NodeJoinRequest => "NodeJoinRequest",
            Kind::SipCluster => "SIPCluster",
            Kind::BareMetalHost => "BareMetalHost",
            Kind::Secret => "Secret",
        }
    }

    /// Whether objects of this kind live in a namespace (all but Hypervisor and
    /// NodeJoinRequest).
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Hypervisor | Kind::NodeJoinRequest)
    }

    /// The kind for a wire `kind` string, whatever its apiVersion.
    pub fn from_kind_str(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `apiVersion` of Hypervisor.
pub const INFRA_API_VERSION: &str = "infra.oneinfra.ereslibre.es/v1alpha1";
/// `apiVersion` of Cluster and Component.
pub const CLUSTER_API_VERSION: &str = "cluster.oneinfra.ereslibre.es/v1alpha1";
/// `apiVersion` of NodeJoinRequest.
pub const NODE_API_VERSION: &str = "node.oneinfra.ereslibre.es/v1alpha1";
/// `apiVersion` of Airship SIP's SIPCluster.
pub const SIP_API_VERSION: &str = "airship.airshipit.org/v1";
/// `apiVersion` of metal3's BareMetalHost.
pub const METAL3_API_VERSION: &str = "metal3.io/v1alpha1";
/// `apiVersion` of the core kinds (Secret).
pub const CORE_API_VERSION: &str = "v1";

/// Identity of an object within its kind: `(namespace, name)`. Cluster-scoped kinds have an
/// empty namespace; namespaced objects without a namespace are in [`DEFAULT_NAMESPACE`].
/// Orders by namespace, then name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a cluster-scoped object.
    pub fn cluster_scoped(name: impl Into<String>) -> Self {
        Self::new(String::new(), name)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

impl From<(String, String)> for ObjectKey {
    fn from((namespace, name): (String, String)) -> Self {
        Self { namespace, name }
    }
}

impl From<(&str, &str)> for ObjectKey {
    fn from((namespace, name): (&str, &str)) -> Self {
        Self::new(namespace, name)
    }
}

/// Standard Kubernetes object metadata. `managedFields` is kept opaque.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    /// Absent means [`DEFAULT_NAMESPACE`] for namespaced kinds; kept absent on output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_link: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub creation_timestamp: Option<OffsetDateTime>,
    /// Set when the object is marked for deletion (a Cluster being deleted, for example).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub deletion_timestamp: Option<OffsetDateTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// Server-side apply bookkeeping, kept as is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_fields: Vec<serde_json::Value>,
}

impl ObjectMeta {
    /// Metadata with only a name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Metadata with a namespace and a name.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: Some(namespace.into()),
            ..Self::default()
        }
    }

    /// The namespace for identity: `metadata.namespace`, or [`DEFAULT_NAMESPACE`] when absent
    /// or empty.
    pub fn namespace_or_default(&self) -> &str {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns,
            _ => DEFAULT_NAMESPACE,
        }
    }

    /// Whether the object is marked for deletion (`deletionTimestamp` set).
    pub fn is_being_deleted(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

/// An owner reference, as Kubernetes writes it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// What every oneinfra object offers: its kind, metadata and identity.
pub trait Resource {
    const KIND: Kind;

    fn metadata(&self) -> &ObjectMeta;
    fn metadata_mut(&mut self) -> &mut ObjectMeta;

    /// `metadata.name`.
    fn name(&self) -> &str {
        &self.metadata().name
    }

    /// Identity within the kind: `(namespace, name)`, see [`ObjectKey`].
    fn key(&self) -> ObjectKey {
        let meta = self.metadata();
        if Self::KIND.namespaced() {
            ObjectKey::new(meta.namespace_or_default(), meta.name.clone())
        } else {
            ObjectKey::cluster_scoped(meta.name.clone())
        }
    }
}

/// Implements [`Resource`] and a constructor for an object struct with `api_version`, `kind`,
/// `metadata`, `spec` and `status` fields.
macro_rules! resource {
    ($ty:ident, $spec:ty, $kind:expr) => {
        impl $crate::meta::Resource for $ty {
            const KIND: $crate::meta::Kind = $kind;

            fn metadata(&self) -> &$crate::meta::ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut $crate::meta::ObjectMeta {
                &mut self.metadata
            }
        }

        impl $ty {
            /// A new object with the right `apiVersion` and `kind`, the given metadata and
            /// spec, and an empty status.
            pub fn new(metadata: $crate::meta::ObjectMeta, spec: $spec) -> Self {
                Self {
                    api_version: $kind.api_version().to_string(),
                    kind: $kind.as_str().to_string(),
                    metadata,
                    spec,
                    status: Default::default(),
                }
            }
        }
    };
}
pub(crate) use resource;

/// `skip_serializing_if` helper: omit values equal to their default.
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// `deserialize_with` helper: an explicit `null` (a YAML key with nothing under it, e.g. a
/// `spec:` whose children are commented out) reads as the default value.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
