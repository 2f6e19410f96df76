//! Names of a cluster's components and their order, and the host ports each role needs.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The name of control plane replica `index` of `cluster`.
pub fn control_plane_name(cluster: &str, index: u32) -> String {
    format!("{cluster}-control-plane-{index}")
}

/// The name of the ingress of `cluster`.
pub fn ingress_name(cluster: &str) -> String {
    format!("{cluster}-ingress")
}

/// The name of API server `index` of `cluster`, beyond its replicas' (`spec.apiServerReplicas`).
pub fn api_server_name(cluster: &str, index: u32) -> String {
    format!("{cluster}-apiserver-{index}")
}

/// The index in a component name `<cluster><infix><index>`, `None` for other names.
pub(super) fn name_index(cluster: &str, infix: &str, component: &str) -> Option<u32> {
    component
        .strip_prefix(cluster)?
        .strip_prefix(infix)?
        .parse()
        .ok()
}

/// The order of components named `<cluster><infix><index>`: by index, then names of other
/// forms, by name.
pub(super) fn name_order(cluster: &str, infix: &str, component: &str) -> ((u8, u32), String) {
    (
        name_index(cluster, infix, component).map_or((1, 0), |x| (0, x)),
        component.to_string(),
    )
}

/// The order of a cluster's control plane replicas (see [`name_order`]).
pub(crate) fn replica_order(cluster: &str, component: &str) -> ((u8, u32), String) {
    name_order(cluster, "-control-plane-", component)
}

/// The order of a cluster's API servers alone (see [`name_order`]).
pub(super) fn api_server_order(cluster: &str, component: &str) -> ((u8, u32), String) {
    name_order(cluster, "-apiserver-", component)
}

/// The positions of the live control plane replicas in `components`, in replica order.
pub(super) fn live_replicas(cluster: &str, components: &[Component]) -> Vec<usize> {
    let mut replicas: Vec<usize> = (0..components.len())
        .filter(|&i| {
            let c = &components[i];
            c.spec.role == ComponentRole::ControlPlane && !c.metadata.is_being_deleted()
        })
        .collect();
    replicas.sort_by_key(|&i| replica_order(cluster, &components[i].metadata.name));
    replicas
}

/// Host ports a component needs, by name, sorted.
pub fn required_ports(role: ComponentRole, vpn_enabled: bool) -> &'static [&'static str] {
    match (role, vpn_enabled) {
        (ComponentRole::ControlPlane, _) => {
            &[names::APISERVER, names::ETCD_CLIENT, names::ETCD_PEER]
        }
        (ComponentRole::ApiServer, _) => &[names::APISERVER],
        (ComponentRole::ControlPlaneIngress, false) => &[names::APISERVER, names::HAPROXY_RUNTIME],
        (ComponentRole::ControlPlaneIngress, true) => &[
            names::APISERVER,
            names::HAPROXY_RUNTIME,
            names::VPN_PROXY,
            names::WIREGUARD,
        ],
    }
}
