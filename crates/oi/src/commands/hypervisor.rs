//! `oi hypervisor inject`: register a machine exposing a CRI endpoint.

pub mod inject;
