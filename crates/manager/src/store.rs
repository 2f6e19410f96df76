//! The object store the controllers read and write: the contract between the reconcile logic
//! and where objects live. Two implementations share it: [`crate::memory::MemoryStore`]
//! (in-process, for tests and the local loop) and [`crate::kube_store::KubeStore`] (a
//! management Kubernetes cluster through kube-rs).
//!
//! Semantics are Kubernetes' own, so both behave alike:
//! - `update` writes metadata (labels, annotations, finalizers, owner references) and spec;
//!   `update_status` writes status only (the status subresource). Both carry
//!   `metadata.resourceVersion` and fail with [`StoreError::Conflict`] when it is stale.
//! - `delete` of an object with finalizers only sets `metadata.deletionTimestamp`; the object
//!   goes away once an `update` leaves its finalizers empty. Deleting a missing object is Ok.
//! - `create` fails with [`StoreError::AlreadyExists`]; the store sets uid,
//!   resourceVersion, generation and creationTimestamp.

use std::fmt;
use std::future::Future;

use oi_api::{
    BareMetalHost, Cluster, Component, Hypervisor, Kind, NodeJoinRequest, Object, ObjectKey,
    Resource, Secret, SipCluster,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What a store operation can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} {key} not found")]
    NotFound { kind: Kind, key: ObjectKey },
    #[error("{kind} {key} already exists")]
    AlreadyExists { kind: Kind, key: ObjectKey },
    /// The object changed since it was read (stale `resourceVersion`).
    #[error("{kind} {key} was modified concurrently: {message}")]
    Conflict {
        kind: Kind,
        key: ObjectKey,
        message: String,
    },
    /// The store refused the object (schema, immutable field, ...).
    #[error("{kind} {key} is invalid: {message}")]
    Invalid {
        kind: Kind,
        key: ObjectKey,
        message: String,
    },
    /// The store could not be reached or answered something unexpected.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// A short machine-friendly reason, for metrics labels and conditions.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "NotFound",
            StoreError::AlreadyExists { .. } => "AlreadyExists",
            StoreError::Conflict { .. } => "Conflict",
            StoreError::Invalid { .. } => "Invalid",
            StoreError::Unavailable(_) => "StoreUnavailable",
        }
    }
}

/// Result with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A kind the store holds: one of oneinfra's objects, convertible to and from [`Object`].
pub trait Stored:
    Resource + Clone + fmt::Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    fn into_object(self) -> Object;
    fn from_object(object: Object) -> Option<Self>;
    fn from_object_ref(object: &Object) -> Option<&Self>;
}

macro_rules! stored {
    ($ty:ident) => {
        impl Stored for $ty {
            fn into_object(self) -> Object {
                Object::$ty(self)
            }

            fn from_object(object: Object) -> Option<Self> {
                match object {
                    Object::$ty(o) => Some(o),
                    _ => None,
                }
            }

            fn from_object_ref(object: &Object) -> Option<&Self> {
                match object {
                    Object::$ty(o) => Some(o),
                    _ => None,
                }
            }
        }
    };
}
stored!(Hypervisor);
stored!(Cluster);
stored!(Component);
stored!(NodeJoinRequest);
stored!(SipCluster);
stored!(BareMetalHost);
stored!(Secret);

/// Normal or Warning, as Kubernetes Events have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A notable step, published as a Kubernetes Event (events.k8s.io/v1) about an object.
/// Never carries key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    /// The object the event is about.
    pub kind: Kind,
    pub key: ObjectKey,
    /// `metadata.uid` of that object, when known.
    pub uid: Option<String>,
    pub type_: EventType,
    /// UpperCamelCase, e.g. `ComponentCreated`.
    pub reason: String,
    /// What the controller did, UpperCamelCase, e.g. `Reconcile`.
    pub action: String,
    /// For a person.
    pub note: String,
}

/// Where objects live; see the module documentation for the shared semantics.
/// `namespace: None` lists every namespace (cluster-scoped kinds ignore it).
pub trait Store: Send + Sync + 'static {
    fn get<K: Stored>(&self, key: &ObjectKey) -> impl Future<Output = Result<Option<K>>> + Send;
    fn list<K: Stored>(
        &self,
        namespace: Option<&str>,
    ) -> impl Future<Output = Result<Vec<K>>> + Send;
    /// Every object of kind `K` (in `namespace`, or all) mapped through `f`: a store that
    /// holds its objects in memory maps them in place, without copying what `f` leaves out.
    fn list_map<K: Stored, T: Send>(
        &self,
        namespace: Option<&str>,
        f: impl Fn(&K) -> T + Send,
    ) -> impl Future<Output = Result<Vec<T>>> + Send {
        async move { Ok(self.list::<K>(namespace).await?.iter().map(f).collect()) }
    }
    /// What `f` answers for the object at `key` as a cache of the store holds it, without a
    /// request: `None` when nothing is cached (the default) or the cache does not hold it.
    /// A cached copy may be a moment old: only a decision to do nothing may rest on it, and
    /// anything else is read with [`Store::get`] first.
    fn cached<K: Stored, T>(&self, key: &ObjectKey, f: impl FnOnce(&K) -> T) -> Option<T> {
        let _ = (key, f);
        None
    }
    fn create<K: Stored>(&self, object: &K) -> impl Future<Output = Result<K>> + Send;
    fn update<K: Stored>(&self, object: &K) -> impl Future<Output = Result<K>> + Send;
    fn update_status<K: Stored>(&self, object: &K) -> impl Future<Output = Result<K>> + Send;
    fn delete<K: Stored>(&self, key: &ObjectKey) -> impl Future<Output = Result<()>> + Send;
    fn publish(&self, event: &ObjectEvent) -> impl Future<Output = Result<()>> + Send;
}
