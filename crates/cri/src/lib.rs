//! oneinfra-rs cri (being built)
