//! oneinfra-rs reconcile (being built)
