//! Leaf certificates of prepared clusters, kept in the objects so that rendering is pure:
//! each live control plane replica's serving and client certificates in its Component status
//! (names in [`crate::render::certs`]), the cluster's `admin` client certificate in its status.
//!
//! The cluster's preparation lists the wanted certificates; afterwards, for all
//! clusters at once and spread over the cores, each is (re)issued when absent,
//! unreadable, for another subject, expiring within [`crate::PrepareOptions::renew_before`], or when
//! its SANs differ from the wanted ones (a hypervisor address or `apiServer.extraSANs`
//! changed).

use oi_api::{Certificate, Cluster, Component, ComponentRole, ObjectKey, World};
use oi_pki::{CaKind, CertificateAuthority, LeafSpec};
use time::OffsetDateTime;

use crate::render::certs;
use crate::{Error, PrepareOptions, Result};

/// Cluster status `clientCertificates` entry of the cluster administrator.
pub const ADMIN: &str = "admin";

/// Where an issued certificate goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Component status `serverCertificates`.
    Server(ObjectKey),
    /// Component status `clientCertificates`.
    Client(ObjectKey),
    /// Cluster status `clientCertificates`.
    Cluster,
}

/// One certificate the cluster needs.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub target: Target,
    pub name: &'static str,
    pub spec: LeafSpec,
}

fn pki_error(cluster: &ObjectKey, field: &'static str, e: &oi_pki::Error) -> Error {
    Error::Pki {
        cluster: cluster.clone(),
        field,
        message: e.to_string(),
    }
}

/// Whether `existing` must be issued again for `spec`.
/// `rotated_ca`: the current CA's certificate when its rotation is in the reissue phase
/// (a leaf it did not sign is issued again).
fn stale(
    existing: Option<&Certificate>,
    spec: &LeafSpec,
    now: OffsetDateTime,
    options: &PrepareOptions,
    rotated_ca: Option<&str>,
) -> bool {
    let Some(c) = existing.filter(|c| !c.certificate.is_empty() && !c.private_key.is_empty())
    else {
        return true;
    };
    if let Some(ca) = rotated_ca
        && !oi_pki::is_signed_by(&c.certificate, ca).unwrap_or(false)
    {
        return true;
    }
    match oi_pki::inspect_certificate(&c.certificate) {
        Ok(info) => {
            info.common_name.as_deref() != Some(spec.common_name.as_str())
                || !matches!(
                    oi_pki::renewal_reason(&info, &spec.sans, now, options.renew_before),
                    Ok(None)
                )
        }
        Err(_) => true,
    }
}

/// The certificates a prepared cluster needs. `ip_of` maps a hypervisor name to its address.
pub(crate) fn plan<'a>(
    key: &ObjectKey,
    cluster: &Cluster,
    components: &[Component],
    ip_of: impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<Job>> {
    let live = |role| {
        components
            .iter()
            .filter(move |c| c.spec.role == role && !c.metadata.is_being_deleted())
    };
    // Clients reach the API servers through every ingress's address, and the shared one.
    let virtual_ip = cluster.ingress_virtual_ip().map(|ip| ip.to_string());
    let mut ingress_ips: Vec<String> = live(ComponentRole::ControlPlaneIngress)
        .filter_map(|c| c.spec.hypervisor.as_deref().and_then(&ip_of))
        .map(str::to_string)
        .chain(virtual_ip.clone())
        .collect();
    ingress_ips.sort();
    ingress_ips.dedup();
    let spec = &cluster.spec;
    let mut jobs = Vec::new();
    // A replica's API server, etcd member, controller-manager and scheduler; an API server
    // alone's only what it uses.
    let api_servers = components
        .iter()
        .filter(|c| c.spec.role.serves_api() && !c.metadata.is_being_deleted());
    for c in api_servers {
        let Some(ip) = c.spec.hypervisor.as_deref().and_then(&ip_of) else {
            continue;
        };
        let whole = c.spec.role == ComponentRole::ControlPlane;
        let ck = c.metadata.name.as_str();
        let component_key = ObjectKey::new(key.namespace.clone(), ck.to_string());
        let mut addresses = vec![ip];
        addresses.extend(ingress_ips.iter().map(String::as_str));
        let apiserver = LeafSpec::kube_apiserver(
            "cluster.local",
            &spec.networking.service_cidr,
            &addresses,
            &spec.api_server.extra_sans,
        )
        .map_err(|e| pki_error(key, "status.serverCertificates.apiserver", &e))?;
        let etcd_server = LeafSpec::etcd_server(ck, &[ip])
            .map_err(|e| pki_error(key, "status.serverCertificates.etcd-server", &e))?;
        let etcd_peer = LeafSpec::etcd_peer(ck, &[ip])
            .map_err(|e| pki_error(key, "status.serverCertificates.etcd-peer", &e))?;
        let servers = [
            (certs::APISERVER, apiserver),
            (certs::ETCD_SERVER, etcd_server),
            (certs::ETCD_PEER, etcd_peer),
        ];
        for (name, leaf) in servers.into_iter().take(if whole { 3 } else { 1 }) {
            jobs.push(Job {
                target: Target::Server(component_key.clone()),
                name,
                spec: leaf,
            });
        }
        for (name, leaf) in [
            (
                certs::APISERVER_ETCD_CLIENT,
                LeafSpec::apiserver_etcd_client(),
            ),
            (
                certs::APISERVER_KUBELET_CLIENT,
                LeafSpec::apiserver_kubelet_client(),
            ),
            (certs::CONTROLLER_MANAGER, LeafSpec::controller_manager()),
            (certs::SCHEDULER, LeafSpec::scheduler()),
        ]
        .into_iter()
        .take(if whole { 4 } else { 2 })
        {
            jobs.push(Job {
                target: Target::Client(component_key.clone()),
                name,
                spec: leaf,
            });
        }
    }
    // The ingress's egress proxy into the VPN, reached by the API servers at its address.
    if spec.vpn.enabled {
        for c in live(ComponentRole::ControlPlaneIngress) {
            let Some(ip) = c.spec.hypervisor.as_deref().and_then(&ip_of) else {
                continue;
            };
            jobs.push(Job {
                target: Target::Server(ObjectKey::new(
                    key.namespace.clone(),
                    c.metadata.name.clone(),
                )),
                name: certs::VPN_PROXY,
                spec: LeafSpec::vpn_proxy(
                    &[Some(ip), virtual_ip.as_deref()]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>(),
                )
                .map_err(|e| pki_error(key, "status.serverCertificates.vpn-proxy", &e))?,
            });
        }
    }
    jobs.push(Job {
        target: Target::Cluster,
        name: ADMIN,
        spec: LeafSpec::admin(),
    });
    Ok(jobs)
}

/// The field of the cluster spec that holds the CA of `kind` ([`CaKind::manifest_field`]).
pub fn ca_slot(cluster: &Cluster, kind: CaKind) -> &Option<Certificate> {
    let spec = &cluster.spec;
    let cas = &spec.certificate_authorities;
    match kind {
        CaKind::ApiServer => &spec.api_server.ca,
        CaKind::ApiServerClient => &cas.api_server_client,
        CaKind::CertificateSigner => &cas.certificate_signer,
        CaKind::Kubelet => &cas.kubelet,
        CaKind::KubeletClient => &cas.kubelet_client,
        CaKind::EtcdServer => &spec.etcd_server.ca,
        CaKind::EtcdClient => &cas.etcd_client,
        CaKind::EtcdPeer => &cas.etcd_peer,
    }
}

/// The CA that signs the leaf certificate stored under `name` (a component's
/// `serverCertificates`/`clientCertificates`, the cluster's `clientCertificates`), as
/// [`plan`] issues them; `None` for a name it does not issue.
pub fn issuer_of(name: &str) -> Option<CaKind> {
    Some(match name {
        certs::APISERVER => CaKind::ApiServer,
        certs::ETCD_SERVER => CaKind::EtcdServer,
        certs::ETCD_PEER => CaKind::EtcdPeer,
        certs::APISERVER_ETCD_CLIENT => LeafSpec::apiserver_etcd_client().issuer,
        certs::APISERVER_KUBELET_CLIENT => LeafSpec::apiserver_kubelet_client().issuer,
        certs::CONTROLLER_MANAGER => LeafSpec::controller_manager().issuer,
        certs::SCHEDULER => LeafSpec::scheduler().issuer,
        certs::VPN_PROXY => CaKind::ApiServer,
        ADMIN => LeafSpec::admin().issuer,
        _ => return None,
    })
}

/// The CA of a kind from the cluster spec.
fn load_ca(key: &ObjectKey, cluster: &Cluster, kind: CaKind) -> Result<CertificateAuthority> {
    let ca = ca_slot(cluster, kind).as_ref().ok_or_else(|| Error::Pki {
        cluster: key.clone(),
        field: kind.manifest_field(),
        message: "absent".into(),
    })?;
    kind.load(&ca.certificate, &ca.private_key)
        .map_err(|e| pki_error(key, kind.manifest_field(), &e))
}

/// For each job of one cluster, in order, a new certificate when the one `world` holds is
/// stale (see the module documentation), else `None`.
pub(crate) fn issue(
    world: &World,
    key: &ObjectKey,
    jobs: &[Job],
    now: OffsetDateTime,
    options: &PrepareOptions,
) -> Result<Vec<Option<Certificate>>> {
    let Some(cluster) = world.clusters.get(key) else {
        return Ok(vec![None; jobs.len()]);
    };
    let mut loaded: Vec<(CaKind, CertificateAuthority)> = Vec::new();
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        let existing = match &job.target {
            Target::Server(k) => world
                .components
                .get(k)
                .and_then(|c| c.status.server_certificates.get(job.name)),
            Target::Client(k) => world
                .components
                .get(k)
                .and_then(|c| c.status.client_certificates.get(job.name)),
            Target::Cluster => cluster.status.client_certificates.get(job.name),
        };
        let rotated_ca = cluster
            .status
            .ca_rotation
            .as_ref()
            .filter(|r| r.phase == crate::rotation::REISSUE)
            .filter(|r| r.previous.contains_key(job.spec.issuer.manifest_field()))
            .and_then(|_| ca_slot(cluster, job.spec.issuer).as_ref())
            .map(|c| c.certificate.as_str());
        if !stale(existing, &job.spec, now, options, rotated_ca) {
            out.push(None);
            continue;
        }
        let kind = job.spec.issuer;
        let index = match loaded.iter().position(|(k, _)| *k == kind) {
            Some(i) => i,
            None => {
                loaded.push((kind, load_ca(key, cluster, kind)?));
                loaded.len() - 1
            }
        };
        let pem = loaded[index]
            .1
            .issue(&job.spec, now, options.leaf_lifetime)
            .map_err(|e| pki_error(key, kind.manifest_field(), &e))?;
        out.push(Some(Certificate {
            certificate: pem.certificate_pem,
            private_key: pem.private_key_pem,
        }));
    }
    Ok(out)
}
