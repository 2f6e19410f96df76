//! Answers to NodeJoinRequests, as oneinfra's reconciler gave them (its
//! `ReconcileNodeJoinRequests`), computed without I/O: the engine lists a ready cluster's
//! requests and writes each answer to the request's status.
//!
//! ```text
//! spec.symmetricKey ──(join private key)──► symmetric key K
//! spec.apiServerEndpoint, spec.extraSANs ──(K)──► plain values   (oneinfra's `oi node join`
//!                                                                 seals them with K)
//! status, every field sealed with K:
//!   kubernetesVersion
//!   kubeConfig                  client certificate system:node:<name> (O system:nodes) of the
//!                               API server client CA; server: the request's endpoint or the
//!                               cluster's; the API server CA
//!   kubeletServerCertificate    kubelet CA, SANs: the node name and the request's extra SANs
//!   kubeletServerPrivateKey
//!   kubeletClientCACertificate  the CA of the API server's client certificate to kubelets
//!   kubeletConfig               KubeletConfiguration: cluster DNS and domain, TLS files,
//!                               x509 + webhook authentication, webhook authorization
//!   conditions                  Issued=True
//! ```
//!
//! A request whose key does not decrypt, or whose sealed fields do not open, gets
//! `Issued=False` with the reason, and nothing else. The VPN part of the answer comes with the
//! cluster VPN (not built yet).

use std::fmt;

use oi_api::common::{ConditionStatus, set_condition};
use oi_api::{Certificate, Cluster, NodeJoinRequest, NodeJoinRequestStatus};
use oi_pki::{CaKind, LeafSpec, SymmetricKey};
use time::OffsetDateTime;

use crate::bootstrap::{CLUSTER_DOMAIN, cluster_dns_address};

/// The condition type of an answered request.
pub const ISSUED: &str = "Issued";

/// Where the kubelet's files go on a joined node (oneinfra's paths).
pub mod paths {
    pub const KUBECONFIG: &str = "/etc/oneinfra/kubelet.conf";
    pub const SERVER_CERTIFICATE: &str = "/etc/oneinfra/kubelet.crt";
    pub const SERVER_PRIVATE_KEY: &str = "/etc/oneinfra/kubelet.key";
    pub const CLIENT_CA_CERTIFICATE: &str = "/etc/oneinfra/kubelet-client-ca.crt";
    pub const CONFIG: &str = "/var/lib/kubelet/config.yaml";
}

/// Why a request is refused (its `Issued=False` reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `spec.symmetricKey` does not decrypt with the cluster's join key.
    InvalidSymmetricKey,
    /// A sealed field of the spec does not open with the request's key.
    InvalidRequest,
    /// A Node of that name is registered already (another machine's name).
    NodeNameTaken,
    /// The cluster could not issue (a CA that does not load, a name that is no DNS name).
    IssueFailed,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::InvalidSymmetricKey => "InvalidSymmetricKey",
            Refusal::InvalidRequest => "InvalidRequest",
            Refusal::NodeNameTaken => "NodeNameTaken",
            Refusal::IssueFailed => "IssueFailed",
        }
    }
}

/// What a cluster answers join requests with. `Debug` never shows a key.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinAnswerer {
    pub cluster_name: String,
    pub kubernetes_version: String,
    /// The cluster's endpoint, for requests that name none.
    pub endpoint: String,
    pub apiserver_ca: String,
    join_private_key: String,
    client_ca: Certificate,
    kubelet_ca: Certificate,
    kubelet_client_ca: String,
    cluster_dns: String,
}

/// How long a joined node's certificates are valid (kubeadm's leaf lifetime). A node renews
/// them by joining again.
pub const KUBELET_CERTIFICATE_LIFETIME: time::Duration = time::Duration::days(365);

impl fmt::Debug for JoinAnswerer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinAnswerer")
            .field("cluster_name", &self.cluster_name)
            .field("kubernetes_version", &self.kubernetes_version)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// An answer: the status to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: NodeJoinRequestStatus,
    /// `None` when issued, else why not.
    pub refused: Option<Refusal>,
}

impl JoinAnswerer {
    /// What `cluster` answers with; `Err` names what it lacks.
    pub fn new(cluster: &Cluster) -> std::result::Result<JoinAnswerer, String> {
        let spec = &cluster.spec;
        let cas = &spec.certificate_authorities;
        let needed = |c: &Option<Certificate>, what: &str| {
            c.clone()
                .filter(|c| !c.certificate.is_empty())
                .ok_or_else(|| format!("the cluster has no {what}"))
        };
        let version = oi_api::versions::find_release(&spec.kubernetes_version)
            .ok_or_else(|| format!("unsupported version {:?}", spec.kubernetes_version))?
            .version;
        Ok(JoinAnswerer {
            cluster_name: cluster.metadata.name.clone(),
            kubernetes_version: version.to_string(),
            endpoint: cluster.status.api_server_endpoint.clone(),
            apiserver_ca: needed(&spec.api_server.ca, "API server CA")?.certificate,
            join_private_key: spec
                .join_key
                .as_ref()
                .map(|k| k.private_key.clone())
                .filter(|k| !k.is_empty())
                .ok_or("the cluster has no join key")?,
            client_ca: needed(&cas.api_server_client, "API server client CA")?,
            kubelet_ca: needed(&cas.kubelet, "kubelet CA")?,
            kubelet_client_ca: needed(&cas.kubelet_client, "kubelet client CA")?.certificate,
            cluster_dns: cluster_dns_address(&spec.networking.service_cidr)?,
        })
    }

    /// The answer to `request`, every field sealed with its symmetric key.
    pub fn answer(&self, request: &NodeJoinRequest, now: OffsetDateTime) -> Answer {
        let refuse = |refusal: Refusal, message: String| {
            let mut status = NodeJoinRequestStatus::default();
            set_condition(
                &mut status.conditions,
                ISSUED,
                ConditionStatus::False,
                refusal.reason(),
                &message,
                now,
            );
            Answer {
                status,
                refused: Some(refusal),
            }
        };
        let name = request.metadata.name.as_str();
        let Ok(key) =
            SymmetricKey::unwrap_with(&self.join_private_key, &request.spec.symmetric_key)
        else {
            return refuse(
                Refusal::InvalidSymmetricKey,
                "spec.symmetricKey does not decrypt with this cluster's join key: the request was made for another cluster, or altered".into(),
            );
        };
        let open = |field: &str, sealed: &str| {
            key.open(sealed)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| format!("{field} does not open with the request's key"))
        };
        let opened = (|| {
            let endpoint = match request.spec.api_server_endpoint.as_str() {
                "" => self.endpoint.clone(),
                sealed => open("spec.apiServerEndpoint", sealed)?,
            };
            let sans = request
                .spec
                .extra_sans
                .iter()
                .enumerate()
                .map(|(i, s)| open(&format!("spec.extraSANs[{i}]"), s))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok::<_, String>((endpoint, sans))
        })();
        let (endpoint, sans) = match opened {
            Ok(v) => v,
            Err(message) => return refuse(Refusal::InvalidRequest, message),
        };
        match self.issue(name, &endpoint, &sans, &key, now) {
            Ok(status) => Answer {
                status,
                refused: None,
            },
            Err(message) => refuse(Refusal::IssueFailed, message),
        }
    }

    /// A refusal for a name a registered Node holds.
    pub fn refuse_taken(&self, request: &NodeJoinRequest, now: OffsetDateTime) -> Answer {
        let mut status = NodeJoinRequestStatus::default();
        set_condition(
            &mut status.conditions,
            ISSUED,
            ConditionStatus::False,
            Refusal::NodeNameTaken.reason(),
            &format!(
                "a Node named {:?} is registered already; delete that Node first if this machine replaces it",
                request.metadata.name
            ),
            now,
        );
        Answer {
            status,
            refused: Some(Refusal::NodeNameTaken),
        }
    }

    fn issue(
        &self,
        name: &str,
        endpoint: &str,
        sans: &[String],
        key: &SymmetricKey,
        now: OffsetDateTime,
    ) -> std::result::Result<NodeJoinRequestStatus, String> {
        let seal = |plain: &str| key.seal(plain.as_bytes()).map_err(|e| e.to_string());
        let client_ca = CaKind::ApiServerClient
            .load(&self.client_ca.certificate, &self.client_ca.private_key)
            .map_err(|e| format!("API server client CA: {e}"))?;
        let user = format!("system:node:{name}");
        let client = client_ca
            .issue(
                &LeafSpec::client(CaKind::ApiServerClient, &user, &["system:nodes"]),
                now,
                KUBELET_CERTIFICATE_LIFETIME,
            )
            .map_err(|e| format!("kubelet client certificate: {e}"))?;
        let kubeconfig = oi_pki::kubeconfig(
            &self.cluster_name,
            endpoint,
            &self.apiserver_ca,
            &user,
            &client.certificate_pem,
            &client.private_key_pem,
        )
        .map_err(|e| e.to_string())?;
        let kubelet_ca = CaKind::Kubelet
            .load(&self.kubelet_ca.certificate, &self.kubelet_ca.private_key)
            .map_err(|e| format!("kubelet CA: {e}"))?;
        let serving_spec = LeafSpec::kubelet_serving(name, sans)
            .map_err(|e| format!("kubelet serving certificate: {e}"))?;
        let serving = kubelet_ca
            .issue(&serving_spec, now, KUBELET_CERTIFICATE_LIFETIME)
            .map_err(|e| format!("kubelet serving certificate: {e}"))?;
        let mut status = NodeJoinRequestStatus {
            kubernetes_version: seal(&self.kubernetes_version)?,
            vpn: None,
            kube_config: seal(&kubeconfig)?,
            kubelet_client_ca_certificate: seal(&self.kubelet_client_ca)?,
            kubelet_server_certificate: seal(&serving.certificate_pem)?,
            kubelet_server_private_key: seal(&serving.private_key_pem)?,
            kubelet_config: seal(&kubelet_config(&self.cluster_dns))?,
            conditions: Vec::new(),
        };
        set_condition(
            &mut status.conditions,
            ISSUED,
            ConditionStatus::True,
            ISSUED,
            "",
            now,
        );
        Ok(status)
    }
}

/// The kubelet's configuration on a joined node: oneinfra's, with authentication and
/// authorization stated (no anonymous requests; the API server decides who may use the
/// kubelet's API) and certificate rotation off (its certificates come from this answer).
pub fn kubelet_config(cluster_dns: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n  x509:\n    clientCAFile: {ca}\n\
         authorization:\n  mode: Webhook\n\
         clusterDNS:\n- {cluster_dns}\n\
         clusterDomain: {CLUSTER_DOMAIN}\n\
         rotateCertificates: false\n\
         serverTLSBootstrap: false\n\
         tlsCertFile: {cert}\n\
         tlsPrivateKeyFile: {key}\n",
        ca = paths::CLIENT_CA_CERTIFICATE,
        cert = paths::SERVER_CERTIFICATE,
        key = paths::SERVER_PRIVATE_KEY,
    )
}

#[cfg(test)]
mod tests;
