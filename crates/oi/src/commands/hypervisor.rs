//! `oi hypervisor inject`: register a machine exposing a CRI endpoint; `cordon` and
//! `uncordon`: take it out of placement and back.

pub mod cordon;
pub mod inject;
