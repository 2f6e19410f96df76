//! oneinfra v1alpha1 API: types, defaults, validation, manifests (no I/O).

pub mod runtime;
pub mod versions;
