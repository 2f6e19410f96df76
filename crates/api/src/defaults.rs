//! oneinfra's defaults, as pure functions. Applying them twice changes nothing.

use crate::cluster::{
    Cluster, DEFAULT_CLUSTER_CIDR, DEFAULT_CONTROL_PLANE_REPLICAS, DEFAULT_NODE_CIDR_MASK_SIZE,
    DEFAULT_SERVICE_CIDR, DEFAULT_VPN_CIDR,
};
use crate::versions;

/// Fills a cluster's unset settings:
///
/// - `kubernetesVersion`: `default`, empty or any supported form (`v1.37`, `1.37`) is pinned
///   to the full version it resolves to now, so a later versions table does not upgrade the
///   cluster behind its owner's back; unsupported versions are left for validation to report;
/// - `controlPlaneReplicas`: 1;
/// - `vpn.CIDR`: 10.0.0.0/16 when the VPN is enabled (it is disabled by default);
/// - `networking`: clusterCIDR 10.244.0.0/16, serviceCIDR 10.96.0.0/12, nodeCIDRMaskSize 24.
pub fn default_cluster(cluster: &mut Cluster) {
    let spec = &mut cluster.spec;
    if let Some(release) = versions::find_release(&spec.kubernetes_version)
        && spec.kubernetes_version != release.version
    {
        spec.kubernetes_version = release.version.to_string();
    }
    if spec.control_plane_replicas.is_none() {
        spec.control_plane_replicas = Some(DEFAULT_CONTROL_PLANE_REPLICAS);
    }
    if spec.vpn.enabled && spec.vpn.cidr.is_empty() {
        spec.vpn.cidr = DEFAULT_VPN_CIDR.to_string();
    }
    let networking = &mut spec.networking;
    if networking.cluster_cidr.is_empty() {
        networking.cluster_cidr = DEFAULT_CLUSTER_CIDR.to_string();
    }
    if networking.service_cidr.is_empty() {
        networking.service_cidr = DEFAULT_SERVICE_CIDR.to_string();
    }
    if networking.node_cidr_mask_size.is_none() {
        networking.node_cidr_mask_size = Some(DEFAULT_NODE_CIDR_MASK_SIZE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterSpec, Vpn};
    use crate::meta::ObjectMeta;

    #[test]
    fn empty_cluster_gets_oneinfra_defaults() {
        let mut c = Cluster::new(ObjectMeta::named("c"), ClusterSpec::default());
        default_cluster(&mut c);
        assert_eq!(
            c.spec.kubernetes_version,
            versions::default_release().version
        );
        assert_eq!(c.spec.control_plane_replicas, Some(1));
        assert_eq!(c.spec.vpn, Vpn::default());
        assert_eq!(c.spec.networking.cluster_cidr, "10.244.0.0/16");
        assert_eq!(c.spec.networking.service_cidr, "10.96.0.0/12");
        assert_eq!(c.spec.networking.node_cidr_mask_size, Some(24));
        let once = c.clone();
        default_cluster(&mut c);
        assert_eq!(c, once);
    }

    #[test]
    fn explicit_values_are_kept_and_versions_pinned() {
        let mut c = Cluster::new(
            ObjectMeta::named("c"),
            ClusterSpec {
                kubernetes_version: "v1.35".into(),
                control_plane_replicas: Some(3),
                vpn: Vpn {
                    enabled: true,
                    ..Vpn::default()
                },
                ..ClusterSpec::default()
            },
        );
        c.spec.networking.service_cidr = "10.100.0.0/16".into();
        default_cluster(&mut c);
        assert_eq!(c.spec.kubernetes_version, "1.35.9");
        assert_eq!(c.spec.control_plane_replicas, Some(3));
        assert_eq!(c.spec.vpn.cidr, "10.0.0.0/16");
        assert_eq!(c.spec.networking.service_cidr, "10.100.0.0/16");
    }

    #[test]
    fn unsupported_version_left_for_validation() {
        let mut c = Cluster::new(
            ObjectMeta::named("c"),
            ClusterSpec {
                kubernetes_version: "1.20.0".into(),
                ..ClusterSpec::default()
            },
        );
        default_cluster(&mut c);
        assert_eq!(c.spec.kubernetes_version, "1.20.0");
    }
}
