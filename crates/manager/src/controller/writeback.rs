//! Writing a desired object back to the store only where it differs from the stored one,
//! keeping the returned resourceVersion so that successive writes do not conflict with
//! each other. Objects compare as the store keeps them (JSON values), so a round trip
//! through an API server (which may drop empty fields) does not look like a change.

use oi_api::{Cluster, Component, Hypervisor, HypervisorStatus, ObjectKey};
use serde::Serialize;
use serde_json::{Value, json};

use super::{FINALIZER, share::merge_share};
use crate::store::{Store, StoreError, Stored};

/// How many times a hypervisor status write is retried on a conflict (someone else wrote
/// the hypervisor, its spec for example) before the reconcile fails.
const CONFLICT_RETRIES: usize = 5;

/// The spec and status of an object kind, for write-back.
pub(super) trait Parts: Stored {
    fn copy_spec(&mut self, from: &Self);
    fn copy_status(&mut self, from: &Self);
}

macro_rules! parts {
    ($ty:ty) => {
        impl Parts for $ty {
            fn copy_spec(&mut self, from: &Self) {
                self.spec = from.spec.clone();
            }

            fn copy_status(&mut self, from: &Self) {
                self.status = from.status.clone();
            }
        }
    };
}
parts!(Cluster);
parts!(Component);
parts!(Hypervisor);

fn value<T: Serialize>(v: &T) -> Value {
    // These types serialize to JSON whatever their content (string keys, no floats).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// What `update` writes: labels, annotations, finalizers, owner references and spec.
fn meta_spec<K: Stored>(o: &K) -> Value {
    let m = o.metadata();
    let whole = value(o);
    json!({
        "labels": m.labels,
        "annotations": m.annotations,
        "finalizers": m.finalizers,
        "ownerReferences": m.owner_references,
        "spec": whole.get("spec"),
    })
}

/// What `update_status` writes.
fn status<K: Stored>(o: &K) -> Value {
    value(o).get("status").cloned().unwrap_or(Value::Null)
}

/// Whether `update` would change `stored` into `desired`.
pub(super) fn meta_spec_differs<K: Stored>(stored: &K, desired: &K) -> bool {
    meta_spec(stored) != meta_spec(desired)
}

/// Whether `update_status` would change `stored` into `desired`.
pub(super) fn status_differs<K: Stored>(stored: &K, desired: &K) -> bool {
    status(stored) != status(desired)
}

/// Writes `desired`'s labels, annotations, finalizers, owner references and spec over
/// `stored` when they differ; `stored` becomes what the store returned. Returns whether it
/// wrote.
pub(super) async fn sync_meta_spec<S: Store, K: Parts>(
    store: &S,
    stored: &mut K,
    desired: &K,
) -> Result<bool, StoreError> {
    if !meta_spec_differs(stored, desired) {
        return Ok(false);
    }
    let mut object = stored.clone();
    {
        let (to, from) = (object.metadata_mut(), desired.metadata());
        to.labels = from.labels.clone();
        to.annotations = from.annotations.clone();
        to.finalizers = from.finalizers.clone();
        to.owner_references = from.owner_references.clone();
    }
    object.copy_spec(desired);
    *stored = store.update(&object).await?;
    Ok(true)
}

/// Writes `desired`'s status over `stored` when it differs; `stored` becomes what the store
/// returned. Returns whether it wrote.
pub(super) async fn sync_status<S: Store, K: Parts>(
    store: &S,
    stored: &mut K,
    desired: &K,
) -> Result<bool, StoreError> {
    if !status_differs(stored, desired) {
        return Ok(false);
    }
    let mut object = stored.clone();
    object.copy_status(desired);
    *stored = store.update_status(&object).await?;
    Ok(true)
}

/// Applies `cluster`'s share of the change from `before` to `after` onto the hypervisor as
/// stored now ([`merge_share`]), retrying on conflicts with a fresh read. Returns whether
/// it wrote. A hypervisor gone from the store is left alone.
pub(super) async fn write_share<S: Store>(
    store: &S,
    hypervisor: &ObjectKey,
    before: &HypervisorStatus,
    after: &HypervisorStatus,
    cluster: &ObjectKey,
) -> Result<bool, StoreError> {
    if before == after {
        return Ok(false);
    }
    let mut attempt = 0;
    loop {
        let Some(mut fresh) = store.get::<Hypervisor>(hypervisor).await? else {
            return Ok(false);
        };
        let merged = merge_share(&fresh.status, before, after, cluster);
        if merged == fresh.status {
            return Ok(false);
        }
        fresh.status = merged;
        match store.update_status(&fresh).await {
            Ok(_) => return Ok(true),
            Err(StoreError::Conflict { .. }) if attempt + 1 < CONFLICT_RETRIES => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Marks a component for deletion if it is not yet, then removes the manager's finalizer:
/// what follows its teardown. Returns whether the component existed.
pub(super) async fn release_component<S: Store>(
    store: &S,
    key: &ObjectKey,
) -> Result<bool, StoreError> {
    let Some(mut component) = store.get::<Component>(key).await? else {
        return Ok(false);
    };
    if !component.metadata.is_being_deleted() {
        store.delete::<Component>(key).await?;
        match store.get::<Component>(key).await? {
            Some(c) => component = c,
            // It had no finalizer: gone already.
            None => return Ok(true),
        }
    }
    remove_finalizer(store, &mut component).await?;
    Ok(true)
}

/// Removes the manager's finalizer from `object`, if it has it.
pub(super) async fn remove_finalizer<S: Store, K: Stored>(
    store: &S,
    object: &mut K,
) -> Result<(), StoreError> {
    if !has_finalizer(object) {
        return Ok(());
    }
    let mut without = object.clone();
    without.metadata_mut().finalizers.retain(|f| f != FINALIZER);
    *object = store.update(&without).await?;
    Ok(())
}

pub(super) fn has_finalizer<K: Stored>(object: &K) -> bool {
    object.metadata().finalizers.iter().any(|f| f == FINALIZER)
}
