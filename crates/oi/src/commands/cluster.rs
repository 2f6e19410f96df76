//! `oi cluster ...`: inject, upgrade or delete a cluster, print its admin kubeconfig or its
//! API server CA, snapshot, restore or recover it.

pub mod admin_kubeconfig;
pub mod apiserver_ca;
pub mod certificates;
pub mod delete;
pub mod inject;
pub mod issuers;
pub mod recover;
pub mod restore;
pub mod rotate_ca;
pub mod snapshot;
pub mod upgrade;
