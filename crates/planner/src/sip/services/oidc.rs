//! The OIDC provider service (`spec.services.oidcProvider`): its PKI kept in the SIPCluster's
//! `status.oidcProviders`, its files and pod, and the `clusterRef` cluster's API servers
//! configured to trust it.
//!
//! ```text
//! placed provider (hypervisor address, port)
//!   ─► status.oidcProviders[service]: CA (made once, 10 years, renewed 30 days ahead),
//!      serving certificate for the address (1 year; again when it moves or nears its end)
//!   ─► files: config.json, users.yaml (0600, from usersSecret), tls.crt, tls.key (0600)
//!   ─► pod: oi-oidc-provider serve; its signing key made in the state directory
//!   ─► clusterRef cluster ours: a TrustChange of its spec.apiServer.oidc = {issuer, client,
//!      claims, ES256, CA}, which the plan carries and the record writes
//! ```

use std::collections::BTreeSet;

use oi_api::common::Certificate;
use oi_api::oidc::{
    DEFAULT_REDIRECT_URIS, DEFAULT_TOKEN_LIFETIME_SECONDS, ProviderClient, ProviderConfig,
    USERS_KEY, parse_users,
};
use oi_api::runtime::{ContainerSpec, HostFile};
use oi_api::sip::OidcProviderStatus;
use oi_api::{ApiServerOidc, ObjectKey, SipCluster, World};
use oi_pki::{CaKind, CertificateAuthority, KeyAlgorithm, LeafSpec, Usage};
use time::{Duration, OffsetDateTime};

use super::own_cluster;
use crate::url_host;

/// How long a provider's CA is valid.
pub const CA_LIFETIME: Duration = Duration::days(3650);
/// How long its serving certificate is valid.
pub const SERVING_LIFETIME: Duration = Duration::days(365);
/// Certificates are renewed this long before they end.
pub const RENEW_BEFORE: Duration = Duration::days(30);
/// The client ID when the service names none.
pub const DEFAULT_CLIENT_ID: &str = "kubernetes";
/// The groups claim when the service names none (the provider's tokens carry `groups`).
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";
/// The provider's signing algorithm (what the API servers are told to accept).
pub const SIGNING_ALG: &str = "ES256";
/// Where the binary is in its image.
const PROVIDER_PATH: &str = "/usr/local/bin/oi-oidc-provider";

/// The issuer URL of a provider at `address:port`.
pub fn issuer(address: &str, port: u16) -> String {
    format!("https://{}:{port}", url_host(address))
}

/// Keeps the PKI of SIPCluster `key`'s providers (`(hypervisor, service, port)` placed this run) in
/// its status, and drops the entries of services no longer wanted: returns their issuers.
pub(super) fn keep_pki(
    world: &mut World,
    key: &ObjectKey,
    providers: &[(String, String, u16)],
    wanted: &BTreeSet<&str>,
    now: OffsetDateTime,
) -> Result<Vec<String>, String> {
    let mut addresses = Vec::new();
    for (h, service, port) in providers {
        let hypervisor = world
            .hypervisors
            .get(&ObjectKey::cluster_scoped(h.clone()))
            .ok_or_else(|| format!("hypervisor {h} is gone"))?;
        addresses.push((service.clone(), hypervisor.spec.ip_address.clone(), *port));
    }
    let Some(sip) = world.sip_clusters.get_mut(key) else {
        return Ok(Vec::new());
    };
    let dropped = sip
        .status
        .oidc_providers
        .iter()
        .filter(|p| !wanted.contains(p.service.as_str()))
        .map(|p| p.issuer_url.clone())
        .collect();
    sip.status
        .oidc_providers
        .retain(|p| wanted.contains(p.service.as_str()));
    for (service, address, port) in addresses {
        let at = sip
            .status
            .oidc_providers
            .iter()
            .position(|p| p.service == service);
        let mut entry = at
            .map(|i| sip.status.oidc_providers[i].clone())
            .unwrap_or_else(|| OidcProviderStatus {
                service: service.clone(),
                ..OidcProviderStatus::default()
            });
        renew(&mut entry, key, &address, port, now)
            .map_err(|e| format!("{service}: its certificates: {e}"))?;
        match at {
            Some(i) => sip.status.oidc_providers[i] = entry,
            None => sip.status.oidc_providers.push(entry),
        }
    }
    sip.status
        .oidc_providers
        .sort_by(|a, b| a.service.cmp(&b.service));
    Ok(dropped)
}

/// Makes what is missing, expiring or for another address; keeps the rest as it is.
fn renew(
    entry: &mut OidcProviderStatus,
    key: &ObjectKey,
    address: &str,
    port: u16,
    now: OffsetDateTime,
) -> Result<(), String> {
    let ca_pem = &entry.certificate_authority;
    let ca = CertificateAuthority::from_pem(&ca_pem.certificate, &ca_pem.private_key)
        .ok()
        .filter(|ca| ca.not_after() > now + RENEW_BEFORE);
    let (ca, new_ca) = match ca {
        Some(ca) => (ca, false),
        None => {
            let name = format!("oneinfra SIPCluster {key} {} CA", entry.service);
            let ca =
                CertificateAuthority::generate(&name, KeyAlgorithm::EcdsaP256, now, CA_LIFETIME)
                    .map_err(|e| e.to_string())?;
            entry.certificate_authority = Certificate {
                certificate: ca.certificate_pem().to_string(),
                private_key: ca.private_key_pem().to_string(),
            };
            (ca, true)
        }
    };
    let sans = [address.to_string()];
    let serving = &entry.serving_certificate;
    let renewal = new_ca
        || serving.certificate.is_empty()
        || serving.private_key.is_empty()
        || !matches!(
            oi_pki::needs_renewal(
                &serving.certificate,
                ca.certificate_pem(),
                &sans,
                now,
                RENEW_BEFORE
            ),
            Ok(None)
        );
    if renewal {
        let spec = LeafSpec {
            issuer: CaKind::ApiServer,
            common_name: format!("oneinfra-oidc-provider {key} {}", entry.service),
            organizations: Vec::new(),
            sans: sans.to_vec(),
            usage: Usage::Server,
            key_algorithm: None,
        };
        let pem = ca
            .issue(&spec, now, SERVING_LIFETIME)
            .map_err(|e| e.to_string())?;
        entry.serving_certificate = Certificate {
            certificate: pem.certificate_pem,
            private_key: pem.private_key_pem,
        };
    }
    entry.issuer_url = issuer(address, port);
    Ok(())
}

/// What the API servers of the `clusterRef` cluster are told about provider 0, when run.
fn wanted_oidc(sip: &SipCluster) -> Option<ApiServerOidc> {
    let service = sip.spec.services.oidc_provider.first()?;
    let status = sip
        .status
        .oidc_providers
        .iter()
        .find(|p| p.service == format!("{}-0", super::ServiceKind::OidcProvider.short()))?;
    Some(ApiServerOidc {
        issuer_url: status.issuer_url.clone(),
        client_id: or(&service.client_id, DEFAULT_CLIENT_ID),
        audiences: Vec::new(),
        username_claim: service.username_claim.clone(),
        username_prefix: None,
        groups_claim: or(&service.groups_claim, DEFAULT_GROUPS_CLAIM),
        groups_prefix: None,
        signing_algs: vec![SIGNING_ALG.to_string()],
        ca: status.certificate_authority.certificate.clone(),
    })
}

fn or(value: &str, default: &str) -> String {
    if value.is_empty() { default } else { value }.to_string()
}

/// A change to a Cluster's `spec.apiServer.oidc` that a SIPCluster's OIDC provider asks for:
/// the plan says so ([`crate::Plan::sip`]), this run's API servers are rendered with it, and
/// the record writes it ([`crate::record::record_run`]). Planning never edits another
/// object's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustChange {
    /// The `clusterRef` cluster.
    pub cluster: ObjectKey,
    /// The SIPCluster asking.
    pub sip_cluster: ObjectKey,
    /// What the cluster's spec says now.
    pub from: Option<ApiServerOidc>,
    /// What it is to say: provider 0 while it runs; `None` when the provider or the
    /// SIPCluster goes.
    pub to: Option<ApiServerOidc>,
}

impl TrustChange {
    /// The cluster's spec as the change leaves it (`to`).
    pub fn apply(&self, world: &mut World) {
        if let Some(c) = world.clusters.get_mut(&self.cluster) {
            c.spec.api_server.oidc.clone_from(&self.to);
        }
    }

    /// The cluster's spec as it was (`from`).
    pub fn revert(&self, world: &mut World) {
        if let Some(c) = world.clusters.get_mut(&self.cluster) {
            c.spec.api_server.oidc.clone_from(&self.from);
        }
    }

    /// One line for people (a dry run's plan).
    pub fn describe(&self) -> String {
        match &self.to {
            Some(to) => format!(
                "cluster {}: spec.apiServer.oidc set to trust SIPCluster {}'s provider ({})",
                self.cluster, self.sip_cluster, to.issuer_url
            ),
            None => format!(
                "cluster {}: spec.apiServer.oidc cleared (SIPCluster {}'s provider went)",
                self.cluster, self.sip_cluster
            ),
        }
    }
}

/// What the `clusterRef` cluster's `spec.apiServer.oidc` is to be: provider 0 while it runs;
/// cleared when the provider or the SIPCluster goes (`dropped`: the issuers of the providers
/// that went), if it still names one of them (what someone else set stays). Returns a note
/// for the SIPCluster's condition, and the change when the spec does not say so yet.
pub(super) fn wire_cluster(
    world: &World,
    report: &crate::sip::SipReport,
    dropped: &[String],
) -> (Option<String>, Option<TrustChange>) {
    let Some(sip) = world.sip_clusters.get(&report.key) else {
        return (None, None);
    };
    let Some((cluster_key, cluster)) = own_cluster(world, sip) else {
        return (None, None);
    };
    let wanted = if report.deleted {
        None
    } else {
        wanted_oidc(sip)
    };
    let extra = sip.spec.services.oidc_provider.len().saturating_sub(1);
    let current = &cluster.spec.api_server.oidc;
    let change = |to: Option<ApiServerOidc>| TrustChange {
        cluster: cluster_key.clone(),
        sip_cluster: report.key.clone(),
        from: current.clone(),
        to,
    };
    match wanted {
        Some(w) => {
            let note = format!(
                "spec.services.oidcProvider[0]: cluster {cluster_key}'s API servers trust it ({}){}",
                w.issuer_url,
                if extra > 0 {
                    "; the others are not wired (API servers trust one issuer)"
                } else {
                    ""
                }
            );
            let change = (current.as_ref() != Some(&w)).then(|| change(Some(w)));
            (Some(note), change)
        }
        None => {
            let change = current
                .as_ref()
                .is_some_and(|c| dropped.contains(&c.issuer_url))
                .then(|| change(None));
            (None, change)
        }
    }
}

/// The provider's files and container.
#[allow(clippy::too_many_arguments)]
pub(super) fn render(
    world: &World,
    sip: &SipCluster,
    w: &super::Wanted,
    site: &super::Site,
    image: String,
) -> Result<(ContainerSpec, Vec<HostFile>), String> {
    let (index, name, config, state) = (w.index, &w.name, &site.config, &site.state);
    let service = &sip.spec.services.oidc_provider[index];
    let at = format!("spec.services.oidcProvider[{index}]");
    let ns = sip.metadata.namespace_or_default();
    let secret_key = ObjectKey::new(ns, service.users_secret.clone());
    let secret = world
        .secrets
        .get(&secret_key)
        .ok_or_else(|| format!("{at}.usersSecret: Secret {secret_key} does not exist"))?;
    let users = match secret.value(USERS_KEY) {
        Some(Ok(v)) => String::from_utf8(v).map_err(|_| {
            format!("{at}.usersSecret: Secret {secret_key} key {USERS_KEY}: not UTF-8")
        })?,
        Some(Err(_)) => {
            return Err(format!(
                "{at}.usersSecret: Secret {secret_key} key {USERS_KEY}: not base64"
            ));
        }
        None => {
            return Err(format!(
                "{at}.usersSecret: Secret {secret_key} has no key {USERS_KEY}"
            ));
        }
    };
    parse_users(&users)
        .map_err(|e| format!("{at}.usersSecret: Secret {secret_key} key {USERS_KEY}: users{e}"))?;
    let status = sip
        .status
        .oidc_providers
        .iter()
        .find(|p| &p.service == name)
        .ok_or_else(|| format!("{at}: its certificates were not made"))?;
    let redirect_uris = if service.redirect_uris.is_empty() {
        DEFAULT_REDIRECT_URIS
            .iter()
            .map(ToString::to_string)
            .collect()
    } else {
        service.redirect_uris.clone()
    };
    let address = &site.address;
    let port = site.ports.first().copied().unwrap_or_default();
    let listen = format!("{}:{port}", url_host(address))
        .parse()
        .map_err(|_| format!("{at}: {address} is not an IP address to listen on"))?;
    let provider = ProviderConfig {
        issuer: status.issuer_url.clone(),
        listen,
        tls_certificate: format!("{config}/tls.crt"),
        tls_private_key: format!("{config}/tls.key"),
        signing_key: format!("{state}/signing-key.pem"),
        users: format!("{config}/{USERS_KEY}"),
        clients: vec![ProviderClient {
            id: or(&service.client_id, DEFAULT_CLIENT_ID),
            redirect_uris,
        }],
        password_grant: service.password_grant,
        token_lifetime_seconds: DEFAULT_TOKEN_LIFETIME_SECONDS,
    };
    let provider_json = serde_json::to_string_pretty(&provider)
        .map_err(|e| format!("{at}: its configuration: {e}"))?;
    let file = |n: &str, content: Vec<u8>, mode: u32| site.file(n, content, mode);
    let files = vec![
        file("config.json", provider_json.into_bytes(), 0o644),
        file(USERS_KEY, users.into_bytes(), 0o600),
        file(
            "tls.crt",
            format!(
                "{}{}",
                status.serving_certificate.certificate, status.certificate_authority.certificate
            )
            .into_bytes(),
            0o644,
        ),
        file(
            "tls.key",
            status.serving_certificate.private_key.clone().into_bytes(),
            0o600,
        ),
    ];
    let container = ContainerSpec {
        name: "oidc-provider".into(),
        image,
        command: vec![
            PROVIDER_PATH.into(),
            "serve".into(),
            "--config".into(),
            format!("{config}/config.json"),
        ],
        args: Vec::new(),
        env: std::collections::BTreeMap::new(),
        mounts: site.mounts().to_vec(),
        privileged: false,
        resources: oi_api::versions::container_resources("oidc-provider"),
    };
    Ok((container, files))
}
