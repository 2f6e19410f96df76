//! oneinfra-rs pki (being built)
