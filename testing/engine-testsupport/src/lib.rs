//! Test support for the engine and its callers (never a dependency of a product crate's
//! build): [`sim`], a network in which etcd members and API servers answer in memory once
//! their pods run on fake runtimes, and [`etcd_contract`], the behaviour of etcd's API the
//! engine relies on, which real etcd (`crates/engine/tests/etcd.rs`) and the simulation
//! (`crates/engine/tests/engine.rs`) both pass.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failed unwrap fails the test

pub mod etcd_contract;
pub mod sim;
