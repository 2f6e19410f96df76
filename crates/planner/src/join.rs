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
//! `Issued=False` with the reason, and nothing else.
//!
//! With the cluster VPN on, the answer also carries, sealed, the VPN part: the CIDR, the
//! worker's address (the lowest free one, [`crate::vpn`]), the endpoint and its public key,
//! and, only when the request sent no `vpnPublicKey` (oneinfra's form), a private key made
//! for it. The worker becomes peer `worker-<node>` of the endpoint; its address is a SAN of
//! its serving certificate.
//!
//! [`join_step`] is a whole pass over a cluster's requests and Nodes:
//!
//! ```text
//! request without Issued      ─► answered (or NodeNameTaken when its Node exists)
//! Issued, its Node registered ─► NodeRegistered=True (once)
//! NodeRegistered, Node gone   ─► the request is deleted, its peer removed (kubectl delete
//!                                node frees the name and the address)
//! request gone                ─► its peer removed, its address free for the next worker
//! Issued, no peer recorded    ─► the peer rebuilt from the request (a world restored
//!                                from an older file loses no worker)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use oi_api::common::{ConditionStatus, find_condition, set_condition};
use oi_api::{
    Certificate, Cluster, NodeJoinRequest, NodeJoinRequestStatus, NodeJoinRequestVpn, VpnPeer,
};
use oi_pki::{CaKind, LeafSpec, SymmetricKey};
use time::OffsetDateTime;

use crate::bootstrap::{CLUSTER_DOMAIN, cluster_dns_address};
use crate::vpn::{self, VpnPlan};

/// The condition type of an answered request.
pub const ISSUED: &str = "Issued";
/// The condition type set once the Node of an issued request has registered: its deletion
/// from then on means the node left.
pub const NODE_REGISTERED: &str = "NodeRegistered";

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
    /// The VPN CIDR has no free address left.
    NoVpnAddress,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::InvalidSymmetricKey => "InvalidSymmetricKey",
            Refusal::InvalidRequest => "InvalidRequest",
            Refusal::NodeNameTaken => "NodeNameTaken",
            Refusal::IssueFailed => "IssueFailed",
            Refusal::NoVpnAddress => "NoVPNAddress",
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
            apiserver_ca: {
                needed(&spec.api_server.ca, "API server CA")?;
                crate::rotation::trust_bundle(cluster, oi_pki::CaKind::ApiServer)
                    .unwrap_or_default()
            },
            join_private_key: spec
                .join_key
                .as_ref()
                .map(|k| k.private_key.clone())
                .filter(|k| !k.is_empty())
                .ok_or("the cluster has no join key")?,
            client_ca: needed(&cas.api_server_client, "API server client CA")?,
            kubelet_ca: needed(&cas.kubelet, "kubelet CA")?,
            kubelet_client_ca: {
                needed(&cas.kubelet_client, "kubelet client CA")?;
                crate::rotation::trust_bundle(cluster, oi_pki::CaKind::KubeletClient)
                    .unwrap_or_default()
            },
            cluster_dns: cluster_dns_address(&spec.networking.service_cidr)?,
        })
    }

    /// The answer to `request`, every field sealed with its symmetric key. With `vpn`, the
    /// worker becomes a peer of `peers` (added, or its entry reused).
    pub fn answer(
        &self,
        request: &NodeJoinRequest,
        vpn: Option<(&VpnPlan, &mut Vec<VpnPeer>)>,
        now: OffsetDateTime,
    ) -> Answer {
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
            let vpn_key = match request.spec.vpn_public_key.as_str() {
                "" => None,
                sealed => {
                    let k = open("spec.vpnPublicKey", sealed)?;
                    if !vpn::is_wireguard_key(&k) {
                        return Err("spec.vpnPublicKey is not a WireGuard public key".into());
                    }
                    Some(k)
                }
            };
            Ok::<_, String>((endpoint, sans, vpn_key))
        })();
        let (endpoint, mut sans, vpn_key) = match opened {
            Ok(v) => v,
            Err(message) => return refuse(Refusal::InvalidRequest, message),
        };
        let mut vpn = vpn;
        // What the peers were: a request refused after all leaves them as they were.
        let before = vpn.as_ref().map(|(_, peers)| (*peers).clone());
        let vpn_part = match vpn.as_mut() {
            None => None,
            Some((plan, peers)) => match join_vpn(plan, peers, name, vpn_key) {
                Ok(v) => Some(v),
                Err(message) => return refuse(Refusal::NoVpnAddress, message),
            },
        };
        if let Some((_, ip, _)) = &vpn_part {
            sans.push(ip.to_string());
        }
        let issued = self
            .issue(name, &endpoint, &sans, &key, now)
            .and_then(|mut status| {
                if let Some((plan, ip, private)) = &vpn_part {
                    status.vpn = Some(seal_vpn(&key, plan, *ip, private)?);
                }
                Ok(status)
            });
        match issued {
            Ok(status) => Answer {
                status,
                refused: None,
            },
            Err(message) => {
                if let (Some((_, peers)), Some(before)) = (vpn, before) {
                    *peers = before;
                }
                refuse(Refusal::IssueFailed, message)
            }
        }
    }

    /// The peer an issued request's answer made, read back from the request (its key
    /// unwrapped with the join key): for a peer the recorded status lost.
    pub fn recover_peer(&self, request: &NodeJoinRequest) -> Option<VpnPeer> {
        let key =
            SymmetricKey::unwrap_with(&self.join_private_key, &request.spec.symmetric_key).ok()?;
        let open = |sealed: &str| {
            key.open(sealed)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
        };
        let answered = request.status.vpn.as_ref()?;
        let address = open(&answered.address)?;
        let (public_key, private_key) = match request.spec.vpn_public_key.as_str() {
            "" => {
                let private = open(&answered.peer_private_key)?;
                (oi_pki::wireguard_public_key(&private).ok()?, private)
            }
            sealed => (open(sealed)?, String::new()),
        };
        Some(VpnPeer {
            name: vpn::peer_name(&request.metadata.name),
            address,
            private_key,
            public_key,
        })
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

/// The worker's peer in `peers` (its entry reused, or a new one at the lowest free
/// address): the plan, its address, and the private key to send (oneinfra's form only).
fn join_vpn<'p>(
    plan: &'p VpnPlan,
    peers: &mut Vec<VpnPeer>,
    node: &str,
    worker_key: Option<String>,
) -> std::result::Result<(&'p VpnPlan, std::net::IpAddr, String), String> {
    let name = vpn::peer_name(node);
    let existing = peers.iter().position(|p| p.name == name);
    let ip = match existing
        .and_then(|i| vpn::peer_ip(&peers[i]))
        .filter(|ip| plan.cidr.contains(ip))
    {
        Some(ip) => ip,
        None => {
            let others: Vec<VpnPeer> = peers.iter().filter(|p| p.name != name).cloned().collect();
            vpn::free_address(plan.cidr, &others)
                .ok_or_else(|| format!("the cluster VPN {} has no free address left", plan.cidr))?
        }
    };
    let (public_key, private_key) = match worker_key {
        Some(public) => (public, String::new()),
        // oneinfra's form: a key pair made here, kept while the peer is.
        None => match existing
            .map(|i| &peers[i])
            .filter(|p| !p.private_key.is_empty())
        {
            Some(p) => (p.public_key.clone(), p.private_key.clone()),
            None => {
                let (private, public) = oi_pki::generate_wireguard_keys();
                (public, private)
            }
        },
    };
    let peer = VpnPeer {
        name,
        address: plan.peer_address(ip),
        private_key: private_key.clone(),
        public_key,
    };
    match existing {
        Some(i) => peers[i] = peer,
        None => peers.push(peer),
    }
    Ok((plan, ip, private_key))
}

/// The VPN part of an answer, sealed.
fn seal_vpn(
    key: &SymmetricKey,
    plan: &VpnPlan,
    ip: std::net::IpAddr,
    private_key: &str,
) -> std::result::Result<NodeJoinRequestVpn, String> {
    let seal = |plain: &str| key.seal(plain.as_bytes()).map_err(|e| e.to_string());
    Ok(NodeJoinRequestVpn {
        cidr: seal(&plan.cidr.to_string())?,
        address: seal(&plan.peer_address(ip))?,
        endpoint: seal(&plan.endpoint)?,
        endpoint_public_key: seal(&plan.public_key)?,
        peer_private_key: if private_key.is_empty() {
            String::new()
        } else {
            seal(private_key)?
        },
    })
}

/// What one pass does with a cluster's join requests (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinStep {
    /// Requests answered now, by name.
    pub answers: Vec<(String, Answer)>,
    /// Issued requests whose Node has registered, to mark `NodeRegistered=True`.
    pub registered: Vec<String>,
    /// Requests whose registered Node is gone: deleted, their peers with them.
    pub forget: Vec<String>,
    /// The VPN peers after the pass, by name; `None` without the VPN.
    pub peers: Option<Vec<VpnPeer>>,
}

fn condition_is(r: &NodeJoinRequest, type_: &str, status: ConditionStatus) -> bool {
    find_condition(&r.status.conditions, type_).is_some_and(|c| c.status == status)
}

/// One pass over `requests` with the Nodes `nodes` registered.
pub fn join_step(
    answerer: &JoinAnswerer,
    vpn: Option<&VpnPlan>,
    requests: &[NodeJoinRequest],
    nodes: &BTreeSet<String>,
    now: OffsetDateTime,
) -> JoinStep {
    let mut step = JoinStep::default();
    let by_name: BTreeMap<&str, &NodeJoinRequest> = requests
        .iter()
        .map(|r| (r.metadata.name.as_str(), r))
        .collect();
    for r in requests {
        let name = &r.metadata.name;
        let issued = condition_is(r, ISSUED, ConditionStatus::True);
        let registered = condition_is(r, NODE_REGISTERED, ConditionStatus::True);
        if registered && !nodes.contains(name) {
            step.forget.push(name.clone());
        } else if issued && !registered && nodes.contains(name) {
            step.registered.push(name.clone());
        }
    }
    let mut peers: Option<Vec<VpnPeer>> = vpn.map(|plan| {
        // A worker's peer stays while its request does (issued, or still to answer); peers
        // not named after a worker are someone else's and stay.
        let mut kept: Vec<VpnPeer> = plan
            .peers
            .iter()
            .filter(|p| match vpn::peer_node(&p.name) {
                None => true,
                Some(node) => by_name.get(node).is_some_and(|r| {
                    !step.forget.iter().any(|f| f == node)
                        && !condition_is(r, ISSUED, ConditionStatus::False)
                }),
            })
            .cloned()
            .collect();
        // Issued requests whose peer the recorded status lost.
        for r in requests {
            let name = vpn::peer_name(&r.metadata.name);
            if !condition_is(r, ISSUED, ConditionStatus::True)
                || step.forget.contains(&r.metadata.name)
                || kept.iter().any(|p| p.name == name)
            {
                continue;
            }
            if let Some(peer) = answerer.recover_peer(r)
                && vpn::peer_ip(&peer).is_some_and(|ip| {
                    plan.cidr.contains(&ip) && !kept.iter().any(|p| vpn::peer_ip(p) == Some(ip))
                })
            {
                kept.push(peer);
            }
        }
        kept
    });
    for r in requests {
        if find_condition(&r.status.conditions, ISSUED).is_some() {
            continue;
        }
        let answer = if nodes.contains(&r.metadata.name) {
            answerer.refuse_taken(r, now)
        } else {
            answerer.answer(r, vpn.zip(peers.as_mut()), now)
        };
        step.answers.push((r.metadata.name.clone(), answer));
    }
    if let Some(p) = peers.as_mut() {
        p.sort_by(|a, b| a.name.cmp(&b.name));
    }
    step.peers = peers;
    step
}

/// The workers joined once `step` is done over `requests`: every request answered
/// (`Issued=True`, before or in this pass) whose Node was not deleted, by name, with whether
/// its Node registered, its VPN address among `peers`, and when it was answered.
pub fn joined_nodes(
    requests: &[NodeJoinRequest],
    step: &JoinStep,
    peers: &[VpnPeer],
    now: OffsetDateTime,
) -> Vec<oi_api::JoinedNode> {
    let mut joined: Vec<oi_api::JoinedNode> = requests
        .iter()
        .filter(|r| !step.forget.contains(&r.metadata.name))
        .filter_map(|r| {
            let name = &r.metadata.name;
            let issued_at = if condition_is(r, ISSUED, ConditionStatus::True) {
                find_condition(&r.status.conditions, ISSUED)
                    .and_then(|c| c.last_transition_time.or(c.last_set_time))
            } else if step
                .answers
                .iter()
                .any(|(n, a)| n == name && a.refused.is_none())
            {
                Some(now)
            } else {
                return None;
            };
            Some(oi_api::JoinedNode {
                name: name.clone(),
                registered: condition_is(r, NODE_REGISTERED, ConditionStatus::True)
                    || step.registered.contains(name),
                vpn_address: peers
                    .iter()
                    .find(|p| vpn::peer_node(&p.name) == Some(name.as_str()))
                    .map(|p| p.address.clone())
                    .unwrap_or_default(),
                issued_at,
            })
        })
        .collect();
    joined.sort_by(|a, b| a.name.cmp(&b.name));
    joined
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
