//! Every certificate a cluster holds, with its expiry: what `oi cluster certificates` lists
//! and what the manager watches (its earliest expiry as a metric, an Event ahead of it).
//!
//! ```text
//! Cluster  spec: the eight CAs                      renewed by a CA rotation (not automatic)
//!          status.clientCertificates (admin)        renewed automatically
//! Component status.serverCertificates / clientCertificates
//!                                                   renewed automatically, `renew_before`
//!                                                   (30 days) ahead of their expiry
//! ```

use oi_api::{Certificate, Cluster, ObjectKey, World};
use oi_pki::CaKind;
use time::{Duration, OffsetDateTime};

use crate::certificates::ca_slot;

/// How a certificate is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Renewal {
    /// Reissued by a reconcile ahead of its expiry.
    Automatic,
    /// A CA: replaced by rotating it (`oi cluster rotate-ca`).
    Rotation,
}

impl Renewal {
    pub fn as_str(self) -> &'static str {
        match self {
            Renewal::Automatic => "automatic",
            Renewal::Rotation => "rotate-ca",
        }
    }
}

/// One certificate of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiry {
    /// `Cluster default/demo`, `Component default/demo-control-plane-0`.
    pub object: String,
    /// Where it is, e.g. `spec.apiServer.ca`, `status.serverCertificates.apiserver`.
    pub field: String,
    pub subject: String,
    pub issuer: String,
    pub not_after: OffsetDateTime,
    pub renewal: Renewal,
}

impl Expiry {
    /// Whether it needs a person's attention at `now`: a CA expiring within `ca_warning`, or
    /// a certificate renewed automatically that is within `leaf_warning` of its end (its
    /// renewal is not happening).
    pub fn needs_attention(
        &self,
        now: OffsetDateTime,
        ca_warning: Duration,
        leaf_warning: Duration,
    ) -> bool {
        let left = self.not_after - now;
        match self.renewal {
            Renewal::Rotation => left <= ca_warning,
            Renewal::Automatic => left <= leaf_warning,
        }
    }
}

fn entry(object: &str, field: String, c: &Certificate, renewal: Renewal) -> Option<Expiry> {
    let info = oi_pki::inspect_certificate(&c.certificate).ok()?;
    Some(Expiry {
        object: object.to_string(),
        field,
        subject: info.common_name.unwrap_or_default(),
        issuer: info.issuer_common_name.unwrap_or_default(),
        not_after: info.not_after,
        renewal,
    })
}

/// Every certificate of cluster `key` in `world`, by expiry (soonest first). Certificates
/// that do not parse are left out (verification reports them).
pub fn certificates(world: &World, key: &ObjectKey) -> Vec<Expiry> {
    let Some(cluster) = world.clusters.get(key) else {
        return Vec::new();
    };
    let mut out = cluster_certificates(key, cluster);
    for c in world.components_of(key) {
        let object = format!("Component {}/{}", key.namespace, c.metadata.name);
        for (field, map) in [
            ("serverCertificates", &c.status.server_certificates),
            ("clientCertificates", &c.status.client_certificates),
        ] {
            for (name, cert) in map {
                out.extend(entry(
                    &object,
                    format!("status.{field}.{name}"),
                    cert,
                    Renewal::Automatic,
                ));
            }
        }
    }
    out.sort_by(|a, b| (a.not_after, &a.object, &a.field).cmp(&(b.not_after, &b.object, &b.field)));
    out
}

/// The certificates a Cluster object holds itself: its CAs and client certificates.
pub fn cluster_certificates(key: &ObjectKey, cluster: &Cluster) -> Vec<Expiry> {
    let object = format!("Cluster {key}");
    let mut out = Vec::new();
    for kind in CaKind::ALL {
        if let Some(ca) = ca_slot(cluster, kind) {
            out.extend(entry(
                &object,
                kind.manifest_field().to_string(),
                ca,
                Renewal::Rotation,
            ));
        }
    }
    for (name, cert) in &cluster.status.client_certificates {
        out.extend(entry(
            &object,
            format!("status.clientCertificates.{name}"),
            cert,
            Renewal::Automatic,
        ));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::testutil::{basic, cluster, world};

    const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

    #[test]
    fn every_certificate_of_a_cluster_is_listed_soonest_first() {
        let w = crate::prepare(world(basic(), vec![cluster("c", 3, false)]), NOW).world;
        let key = ObjectKey::new("default", "c");
        let all = certificates(&w, &key);
        // 8 CAs, the admin's, and 7 leaves for each of 3 replicas.
        let cas = all
            .iter()
            .filter(|e| e.renewal == Renewal::Rotation)
            .count();
        assert_eq!(cas, 8);
        assert_eq!(all.len(), 8 + 1 + 3 * 7, "{all:#?}");
        assert!(all.windows(2).all(|w| w[0].not_after <= w[1].not_after));
        let api = all
            .iter()
            .find(|e| e.field == "status.serverCertificates.apiserver")
            .unwrap();
        assert_eq!(api.subject, "kube-apiserver");
        assert!(api.object.starts_with("Component default/c-control-plane-"));
        let ca = all.iter().find(|e| e.field == "spec.apiServer.ca").unwrap();
        assert_eq!(ca.object, "Cluster default/c");
        assert_eq!(ca.issuer, ca.subject, "a CA issues itself");
        // Attention: CAs ahead of time, automatic ones only once their renewal is late.
        let soon = Duration::days(90);
        assert!(!ca.needs_attention(NOW, soon, Duration::days(7)));
        assert!(ca.needs_attention(ca.not_after - Duration::days(30), soon, Duration::days(7)));
        assert!(!api.needs_attention(api.not_after - Duration::days(30), soon, Duration::days(7)));
        assert!(api.needs_attention(api.not_after - Duration::days(3), soon, Duration::days(7)));
        assert!(certificates(&w, &ObjectKey::new("default", "nope")).is_empty());
    }
}
