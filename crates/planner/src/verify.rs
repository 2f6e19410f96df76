//! Verifying what the API crate cannot check alone, before anything is deployed: the key
//! material of clusters, components and hypervisors (it parses, each private key is its
//! certificate's, each CA is a CA, each leaf chains to its CA), and in a whole world the
//! hypervisors' addresses and the ports their and their components' status record.
//!
//! ```text
//! verify_hypervisor(h)           spec.remoteCRIEndpoint: caCertificate a CA, client
//!                                certificate and key a pair
//! verify_cluster(c, now)         the eight CAs, serviceAccount and joinKey pairs, VPN keys,
//!                                status.clientCertificates chained to their CA
//! verify_component(c, cluster)   status.{server,client}Certificates chained to their CA
//! verify_world(world, now)       all of the above, spread over the cores, and: hypervisor
//!                                addresses distinct; allocated ports inside the range, held
//!                                once, as the components' status records them
//! ```
//!
//! Preparation runs the per-object checks on what it is about to use (a cluster that fails
//! them is not prepared); `oi` runs [`verify_world`] on every world it loads, so that each
//! finding names its document. Ports are only checked there: the manager writes hypervisor
//! and component status in separate requests, and preparation repairs a disagreement left by
//! a request that failed between them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use oi_api::validation::{FieldError, Reason};
use oi_api::{
    Certificate, Cluster, Component, Hypervisor, KeyPair, Kind, ObjectKey, Resource as _, World,
};
use oi_pki::CaKind;
use time::OffsetDateTime;

use crate::certificates::{ca_slot, issuer_of};
use crate::par::parallel_map;
use crate::ports::PortOwner;

/// An invalid field of one object of a world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    pub object: ObjectKey,
    pub error: FieldError,
}

fn key_material(field: String, error: &oi_pki::Error) -> FieldError {
    FieldError {
        field,
        reason: Reason::KeyMaterial {
            problem: error.to_string(),
        },
    }
}

fn required(field: String) -> FieldError {
    FieldError {
        field,
        reason: Reason::Required,
    }
}

/// Which half of a certificate and key an error of the PKI crate is about.
fn half(error: &oi_pki::Error) -> &'static str {
    match error {
        oi_pki::Error::InvalidPrivateKey { .. }
        | oi_pki::Error::UnsupportedKey { .. }
        | oi_pki::Error::KeyMismatch { .. } => "privateKey",
        _ => "certificate",
    }
}

/// Checks a certificate and key stored at `field`: both empty is nothing to check (not
/// minted yet), one empty is missing.
fn check_pair(
    errors: &mut Vec<FieldError>,
    field: &str,
    stored: &Certificate,
    check: impl FnOnce(&Certificate) -> oi_pki::Result<()>,
) {
    match (
        stored.certificate.trim().is_empty(),
        stored.private_key.trim().is_empty(),
    ) {
        (true, true) => {}
        (true, false) => errors.push(required(format!("{field}.certificate"))),
        (false, true) => errors.push(required(format!("{field}.privateKey"))),
        (false, false) => {
            if let Err(e) = check(stored) {
                errors.push(key_material(format!("{field}.{}", half(&e)), &e));
            }
        }
    }
}

/// The certificate of the CA of `kind` of `cluster`, when it is there and itself a CA: a
/// leaf is checked against it (a broken CA is reported once, on its own field).
fn usable_ca(cluster: Option<&Cluster>, kind: CaKind) -> Option<&str> {
    let ca = ca_slot(cluster?, kind).as_ref()?;
    oi_pki::check_ca_certificate(&ca.certificate)
        .is_ok()
        .then_some(ca.certificate.as_str())
}

/// Checks a map of leaf certificates (`status.serverCertificates`, ...) at `field`.
fn check_leaves(
    errors: &mut Vec<FieldError>,
    field: &str,
    leaves: &BTreeMap<String, Certificate>,
    cluster: Option<&Cluster>,
) {
    for (name, leaf) in leaves {
        let kind = issuer_of(name);
        let ca = kind.and_then(|kind| usable_ca(cluster, kind));
        // During a rotation's reissue phase, the old CA's leaves are still good (each is
        // reissued by this very preparation).
        let previous: Vec<&str> = match (kind, cluster) {
            (Some(kind), Some(cluster)) => crate::rotation::accepted_issuers(cluster, kind)
                .into_iter()
                .skip(1)
                .collect(),
            _ => Vec::new(),
        };
        check_pair(errors, &format!("{field}.{name}"), leaf, |c| {
            let checked = oi_pki::check_leaf(&c.certificate, &c.private_key, ca);
            match checked {
                Err(oi_pki::Error::NotSignedBy { .. })
                    if previous.iter().any(|p| {
                        oi_pki::check_leaf(&c.certificate, &c.private_key, Some(p)).is_ok()
                    }) =>
                {
                    Ok(())
                }
                other => other,
            }
        });
    }
}

/// Checks a key pair at `field`: a private key is needed when a public key is there.
fn check_key_pair(errors: &mut Vec<FieldError>, field: &str, pair: &KeyPair) {
    if pair.private_key.trim().is_empty() {
        if !pair.public_key.trim().is_empty() {
            errors.push(required(format!("{field}.privateKey")));
        }
        return;
    }
    if let Err(e) = oi_pki::check_key_pair(&pair.public_key, &pair.private_key) {
        let which = match e {
            oi_pki::Error::InvalidPublicKey { .. } | oi_pki::Error::PublicKeyMismatch => {
                "publicKey"
            }
            _ => "privateKey",
        };
        errors.push(key_material(format!("{field}.{which}"), &e));
    }
}

/// Each `CERTIFICATE` block of a PEM bundle, as a PEM document of its own.
fn pem_certificates(bundle: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = bundle;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else {
            // An unterminated block: as it is, so that parsing it says what is wrong.
            out.push(rest[start..].to_string());
            break;
        };
        let end = start + len + END.len();
        out.push(format!("{}\n", &rest[start..end]));
        rest = &rest[end..];
    }
    out
}

/// The key material of a hypervisor's remote CRI endpoint.
pub fn verify_hypervisor(hypervisor: &Hypervisor) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(remote) = &hypervisor.spec.remote_cri_endpoint else {
        return errors;
    };
    let base = "spec.remoteCRIEndpoint";
    if !remote.ca_certificate.trim().is_empty()
        && let Err(e) = oi_pki::check_ca_certificate(&remote.ca_certificate)
    {
        errors.push(key_material(format!("{base}.caCertificate"), &e));
    }
    if let Some(client) = &remote.client_certificate {
        check_pair(
            &mut errors,
            &format!("{base}.clientCertificate"),
            client,
            |c| oi_pki::check_leaf(&c.certificate, &c.private_key, None),
        );
    }
    errors
}

/// The key material of a cluster: its CAs (valid at `now`), key pairs, VPN keys and its own
/// client certificates.
pub fn verify_cluster(cluster: &Cluster, now: OffsetDateTime) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for kind in CaKind::ALL {
        if let Some(ca) = ca_slot(cluster, kind) {
            check_pair(&mut errors, kind.manifest_field(), ca, |c| {
                oi_pki::check_ca(&c.certificate, &c.private_key, now)
            });
        }
    }
    let spec = &cluster.spec;
    if let Some(pair) = &spec.api_server.service_account {
        check_key_pair(&mut errors, oi_pki::SERVICE_ACCOUNT_FIELD, pair);
    }
    if let Some(pair) = &spec.join_key {
        check_key_pair(&mut errors, oi_pki::JOIN_KEY_FIELD, pair);
    }
    // Each OIDC issuer's CA bundle: every certificate of it parses.
    for (at, oidc) in spec.api_server.jwt_issuers() {
        for block in pem_certificates(&oidc.ca) {
            if let Err(e) = oi_pki::inspect_certificate(&block) {
                errors.push(key_material(format!("{at}.ca"), &e));
            }
        }
    }
    let wireguard = |errors: &mut Vec<FieldError>, at: &str, private: &str, public: &str| {
        if let Err(e) = oi_pki::check_wireguard_keys(private, public) {
            let which = match e {
                oi_pki::Error::InvalidWireguardKey {
                    which: "private", ..
                } => "privateKey",
                _ => "publicKey",
            };
            errors.push(key_material(format!("{at}.{which}"), &e));
        }
    };
    wireguard(
        &mut errors,
        "spec.vpn",
        &spec.vpn.private_key,
        &spec.vpn.public_key,
    );
    // The VPN's peers: a public key each; the private key of oneinfra's form, its pair.
    for (i, peer) in cluster.status.vpn_peers.iter().enumerate() {
        let at = format!("status.vpnPeers[{i}]");
        if peer.public_key.is_empty() {
            errors.push(required(format!("{at}.publicKey")));
        }
        wireguard(&mut errors, &at, &peer.private_key, &peer.public_key);
    }
    check_leaves(
        &mut errors,
        "status.clientCertificates",
        &cluster.status.client_certificates,
        Some(cluster),
    );
    errors
}

/// The leaf certificates in a component's status, each chained to its CA in `cluster`.
pub fn verify_component(component: &Component, cluster: Option<&Cluster>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let status = &component.status;
    check_leaves(
        &mut errors,
        "status.serverCertificates",
        &status.server_certificates,
        cluster,
    );
    check_leaves(
        &mut errors,
        "status.clientCertificates",
        &status.client_certificates,
        cluster,
    );
    errors
}

/// Everything of a world: each object's key material (spread over the cores), hypervisor
/// addresses, and ports. Findings come by kind (hypervisors, clusters, components), then key.
/// A cluster marked for deletion, and its components, are left out: they are only torn down,
/// which uses none of their key material, however broken it is.
pub fn verify_world(world: &World, now: OffsetDateTime) -> Vec<Finding> {
    let deleting = |key: &ObjectKey| {
        world
            .clusters
            .get(key)
            .is_some_and(Cluster::is_being_deleted)
    };
    let hypervisors: Vec<&Hypervisor> = world.hypervisors.values().collect();
    let clusters: Vec<&Cluster> = world
        .clusters
        .values()
        .filter(|c| !c.is_being_deleted())
        .collect();
    let components: Vec<&Component> = world
        .components
        .values()
        .filter(|c| !deleting(&c.cluster_key()))
        .collect();
    let finding = |kind, object: ObjectKey| {
        move |error| Finding {
            kind,
            object: object.clone(),
            error,
        }
    };
    let mut findings: Vec<Finding> = Vec::new();
    for (h, errors) in hypervisors
        .iter()
        .zip(parallel_map(&hypervisors, |h| verify_hypervisor(h)))
    {
        findings.extend(errors.into_iter().map(finding(Kind::Hypervisor, h.key())));
    }
    findings.extend(addresses(world));
    for h in &hypervisors {
        findings.extend(
            hypervisor_ports(h)
                .into_iter()
                .map(finding(Kind::Hypervisor, h.key())),
        );
    }
    for (c, errors) in clusters
        .iter()
        .zip(parallel_map(&clusters, |c| verify_cluster(c, now)))
    {
        findings.extend(errors.into_iter().map(finding(Kind::Cluster, c.key())));
    }
    let checked = parallel_map(&components, |c| {
        let mut errors = verify_component(c, world.clusters.get(&c.cluster_key()));
        errors.extend(component_ports(world, c));
        errors
    });
    for (c, errors) in components.iter().zip(checked) {
        findings.extend(errors.into_iter().map(finding(Kind::Component, c.key())));
    }
    findings
}

/// Two hypervisors with one address would hand out the same host ports twice.
fn addresses(world: &World) -> Vec<Finding> {
    let mut first: BTreeMap<IpAddr, &str> = BTreeMap::new();
    let mut findings = Vec::new();
    for h in world.hypervisors.values() {
        let Ok(ip) = h.spec.ip_address.parse::<IpAddr>() else {
            continue;
        };
        match first.get(&ip) {
            Some(other) => findings.push(Finding {
                kind: Kind::Hypervisor,
                object: h.key(),
                error: FieldError {
                    field: "spec.ipAddress".to_string(),
                    reason: Reason::DuplicateAddress {
                        value: h.spec.ip_address.clone(),
                        other: (*other).to_string(),
                    },
                },
            }),
            None => {
                first.insert(ip, &h.metadata.name);
            }
        }
    }
    findings
}

fn describe(owner: &PortOwner) -> String {
    format!(
        "{}/{} component {}",
        owner.cluster_namespace, owner.cluster, owner.component
    )
}

/// A hypervisor's `allocatedPorts` inside its range and each held once; its `freedPorts`
/// inside the range and not held.
fn hypervisor_ports(hypervisor: &Hypervisor) -> Vec<FieldError> {
    let range = hypervisor.spec.port_range;
    let outside = |port: u16| range.ports().is_some() && !range.contains(port);
    let outside_error = |field: String, port: u16| FieldError {
        field,
        reason: Reason::PortOutsideRange {
            port,
            low: range.low,
            high: range.high,
        },
    };
    let mut errors = Vec::new();
    let mut holders: BTreeMap<u16, PortOwner> = BTreeMap::new();
    for (i, a) in hypervisor.status.allocated_ports.iter().enumerate() {
        let field = format!("status.allocatedPorts[{i}].port");
        let owner = PortOwner::from_status(a);
        if outside(a.port) {
            errors.push(outside_error(field, a.port));
        } else if let Some(holder) = holders.get(&a.port) {
            errors.push(FieldError {
                field,
                reason: Reason::PortTaken {
                    port: a.port,
                    holder: describe(holder),
                },
            });
        } else {
            holders.insert(a.port, owner);
        }
    }
    for (i, &port) in hypervisor.status.freed_ports.iter().enumerate() {
        let field = format!("status.freedPorts[{i}]");
        if outside(port) {
            errors.push(outside_error(field, port));
        } else if let Some(holder) = holders.get(&port) {
            errors.push(FieldError {
                field,
                reason: Reason::PortTaken {
                    port,
                    holder: describe(holder),
                },
            });
        }
    }
    errors
}

/// A component's `allocatedHostPorts` as its hypervisor's status records them.
fn component_ports(world: &World, component: &Component) -> Vec<FieldError> {
    let Some(hypervisor) = component
        .spec
        .hypervisor
        .as_ref()
        .and_then(|h| world.hypervisors.get(&ObjectKey::cluster_scoped(h.clone())))
    else {
        return Vec::new();
    };
    let namespace = component
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(oi_api::DEFAULT_NAMESPACE);
    let allocations: Vec<(PortOwner, u16)> = hypervisor
        .status
        .allocated_ports
        .iter()
        .map(|a| (PortOwner::from_status(a), a.port))
        .collect();
    let mut errors = Vec::new();
    for (i, p) in component.status.allocated_host_ports.iter().enumerate() {
        let field = format!("status.allocatedHostPorts[{i}].port");
        let owner = PortOwner::new(
            namespace,
            &component.spec.cluster,
            &component.metadata.name,
            &p.name,
        );
        if let Some((_, held)) = allocations.iter().find(|(o, _)| *o == owner) {
            if *held != p.port {
                errors.push(FieldError {
                    field,
                    reason: Reason::PortDisagrees {
                        owner: describe(&owner),
                        hypervisor: hypervisor.metadata.name.clone(),
                        port: *held,
                        claimed: p.port,
                    },
                });
            }
        } else if let Some((holder, _)) = allocations.iter().find(|(_, port)| *port == p.port) {
            errors.push(FieldError {
                field,
                reason: Reason::PortTaken {
                    port: p.port,
                    holder: describe(holder),
                },
            });
        }
    }
    errors
}

#[cfg(test)]
mod tests;
