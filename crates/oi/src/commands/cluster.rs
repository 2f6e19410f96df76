//! `oi cluster ...`: inject a cluster, print its admin kubeconfig or its API server CA.

pub mod admin_kubeconfig;
pub mod apiserver_ca;
pub mod inject;
// `delete` joins these with the engine that executes plans.
