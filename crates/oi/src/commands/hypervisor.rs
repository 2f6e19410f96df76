//! `oi hypervisor inject`: register a machine exposing a CRI endpoint; `join`: make this
//! machine one (a mutual-TLS front of its runtime) and print its manifest; `cordon` and
//! `uncordon`: take it out of placement and back; `drain`: move what runs there elsewhere;
//! `remove`: replace what ran on one gone for good, then forget it; `check`: is one ready.

pub mod check;
pub mod cordon;
pub mod drain;
pub mod inject;
pub mod join;
pub mod remove;
