//! Validation of Airship SIP's objects: what upstream's CRD and webhook-less controller left
//! to chance (node set roles, selectors, ports, SSH keys), and of the fields we use in the
//! BareMetalHosts and Secrets that metal3 and Kubernetes write.

use base64::Engine as _;

use super::{FieldError, NameRule, Reason, check_claims, check_meta, check_name};
use crate::meta::{Kind, Resource};
use crate::metal3::{BareMetalHost, Secret, parse_bmc_address};
use crate::sip::{LabelSelector, ROLES, SipCluster, parse_authorized_key};

/// Most hosts one node set may ask for.
pub const MAX_NODE_SET_HOSTS: i64 = 1000;

fn invalid(errors: &mut Vec<FieldError>, field: impl Into<String>, problem: impl Into<String>) {
    errors.push(FieldError::new(
        field,
        Reason::Invalid {
            problem: problem.into(),
        },
    ));
}

/// Validates a SIPCluster: name, node sets (roles, counts, selectors, topology keys),
/// services (images, ports, SSH keys, Secret names), the Cluster it references.
pub fn validate_sip_cluster(sip: &SipCluster) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_meta(
        &mut errors,
        sip.metadata(),
        Kind::SipCluster,
        NameRule::Dns1123Subdomain,
    );
    for (role, set) in &sip.spec.nodes {
        let at = format!("spec.nodes.{role}");
        if !ROLES.contains(&role.as_str()) {
            invalid(
                &mut errors,
                &at,
                format!("unknown node set {role:?}; expected {}", ROLES.join(" or ")),
            );
        }
        for (field, n) in [("active", set.count.active), ("standby", set.count.standby)] {
            if !(0..=MAX_NODE_SET_HOSTS).contains(&n) {
                invalid(
                    &mut errors,
                    format!("{at}.count.{field}"),
                    format!("{n} is outside 0..{MAX_NODE_SET_HOSTS}"),
                );
            }
        }
        check_selector(
            &mut errors,
            &format!("{at}.labelSelector"),
            &set.label_selector,
        );
        if !set.topology_key.is_empty()
            && let Err(problem) = check_label_key(&set.topology_key)
        {
            invalid(&mut errors, format!("{at}.topologyKey"), problem);
        }
    }
    let services = &sip.spec.services;
    for (i, lb) in services.load_balancer_control_plane.iter().enumerate() {
        let at = format!("spec.services.loadBalancerControlPlane[{i}]");
        check_image(&mut errors, &at, &lb.image);
        check_node_port(&mut errors, &format!("{at}.nodePort"), lb.node_port);
        check_labels(&mut errors, &format!("{at}.nodeLabels"), &lb.node_labels);
    }
    for (i, lb) in services.load_balancer_worker.iter().enumerate() {
        let at = format!("spec.services.loadBalancerWorker[{i}]");
        check_image(&mut errors, &at, &lb.image);
        let range = lb.node_port_range;
        check_node_port(
            &mut errors,
            &format!("{at}.nodePortRange.start"),
            range.start,
        );
        check_node_port(&mut errors, &format!("{at}.nodePortRange.end"), range.end);
        if range.start > range.end {
            invalid(
                &mut errors,
                format!("{at}.nodePortRange"),
                format!("start {} is above end {}", range.start, range.end),
            );
        }
        check_labels(&mut errors, &format!("{at}.nodeLabels"), &lb.node_labels);
    }
    for (i, jump) in services.jump_host.iter().enumerate() {
        let at = format!("spec.services.jumpHost[{i}]");
        check_image(&mut errors, &at, &jump.image);
        check_node_port(&mut errors, &format!("{at}.nodePort"), jump.node_port);
        check_labels(&mut errors, &format!("{at}.nodeLabels"), &jump.node_labels);
        for (k, key) in jump.ssh_authorized_keys.iter().enumerate() {
            if let Err(problem) = parse_authorized_key(key) {
                invalid(&mut errors, format!("{at}.sshAuthorizedKeys[{k}]"), problem);
            }
        }
        if jump.node_ssh_private_keys.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.nodeSSHPrivateKeys"),
                Reason::Required,
            ));
        } else {
            check_name(
                &mut errors,
                &format!("{at}.nodeSSHPrivateKeys"),
                &jump.node_ssh_private_keys,
                NameRule::Dns1123Subdomain,
            );
        }
    }
    for (i, oidc) in services.oidc_provider.iter().enumerate() {
        let at = format!("spec.services.oidcProvider[{i}]");
        check_image(&mut errors, &at, &oidc.image);
        check_node_port(&mut errors, &format!("{at}.nodePort"), oidc.node_port);
        check_labels(&mut errors, &format!("{at}.nodeLabels"), &oidc.node_labels);
        if oidc.users_secret.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.usersSecret"),
                Reason::Required,
            ));
        } else {
            check_name(
                &mut errors,
                &format!("{at}.usersSecret"),
                &oidc.users_secret,
                NameRule::Dns1123Subdomain,
            );
        }
        if oidc.client_id.contains(char::is_whitespace) {
            invalid(
                &mut errors,
                format!("{at}.clientID"),
                format!("{:?} has blanks", oidc.client_id),
            );
        }
        check_claims(&mut errors, &at, &oidc.username_claim, &oidc.groups_claim);
        for (k, uri) in oidc.redirect_uris.iter().enumerate() {
            if let Err(problem) = crate::oidc::check_redirect_uri(uri) {
                invalid(&mut errors, format!("{at}.redirectURIs[{k}]"), problem);
            }
        }
    }
    if let Some(cluster) = &sip.spec.cluster_ref {
        check_name(
            &mut errors,
            "spec.clusterRef.name",
            &cluster.name,
            NameRule::Dns1123Label {
                max_len: super::MAX_CLUSTER_NAME_LEN,
            },
        );
    }
    errors
}

fn check_image(errors: &mut Vec<FieldError>, at: &str, image: &str) {
    if image.is_empty() {
        errors.push(FieldError::new(format!("{at}.image"), Reason::Required));
    } else if image.contains(char::is_whitespace) {
        invalid(
            errors,
            format!("{at}.image"),
            format!("{image:?} is not an image reference"),
        );
    }
}

fn check_node_port(errors: &mut Vec<FieldError>, field: &str, port: i64) {
    if !(1..=65535).contains(&port) {
        if port == 0 {
            errors.push(FieldError::new(field, Reason::Required));
        } else {
            invalid(errors, field, format!("port {port} is outside 1..65535"));
        }
    }
}

fn check_labels(
    errors: &mut Vec<FieldError>,
    at: &str,
    labels: &std::collections::BTreeMap<String, String>,
) {
    for (k, v) in labels {
        if let Err(problem) = check_label_key(k) {
            invalid(errors, format!("{at}.{k}"), problem);
        }
        if let Err(problem) = check_label_value(v) {
            invalid(errors, format!("{at}.{k}"), problem);
        }
    }
}

fn check_selector(errors: &mut Vec<FieldError>, at: &str, selector: &LabelSelector) {
    check_labels(errors, &format!("{at}.matchLabels"), &selector.match_labels);
    for (i, r) in selector.match_expressions.iter().enumerate() {
        let here = format!("{at}.matchExpressions[{i}]");
        if let Err(problem) = check_label_key(&r.key) {
            invalid(errors, format!("{here}.key"), problem);
        }
        match r.operator.as_str() {
            "In" | "NotIn" => {
                if r.values.is_empty() {
                    invalid(
                        errors,
                        format!("{here}.values"),
                        format!("operator {} needs at least one value", r.operator),
                    );
                }
                for (j, v) in r.values.iter().enumerate() {
                    if let Err(problem) = check_label_value(v) {
                        invalid(errors, format!("{here}.values[{j}]"), problem);
                    }
                }
            }
            "Exists" | "DoesNotExist" => {
                if !r.values.is_empty() {
                    invalid(
                        errors,
                        format!("{here}.values"),
                        format!("operator {} takes no values", r.operator),
                    );
                }
            }
            other => invalid(
                errors,
                format!("{here}.operator"),
                format!("{other:?} is not In, NotIn, Exists or DoesNotExist"),
            ),
        }
    }
}

/// `[prefix/]name`: the prefix a DNS-1123 subdomain, the name 1-63 characters of
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty()
            || prefix.len() > super::MAX_SUBDOMAIN_LEN
            || !prefix.split('.').all(super::is_dns1123_label))
    {
        return Err(format!(
            "label key {key:?}: its prefix {prefix:?} is not a DNS-1123 subdomain"
        ));
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(format!(
            "label key {key:?}: {name:?} is not 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ));
    }
    Ok(())
}

/// Empty, or what a label key's name part may be.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "label value {value:?} is not at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ))
    }
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            b.len() <= 63
                && f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Validates the fields of a BareMetalHost we use: name, labels, the BMC address and
/// credentials Secret name, the network data Secret reference.
pub fn validate_bare_metal_host(host: &BareMetalHost) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_meta(
        &mut errors,
        host.metadata(),
        Kind::BareMetalHost,
        NameRule::Dns1123Subdomain,
    );
    check_labels(&mut errors, "metadata.labels", &host.metadata.labels);
    let bmc = &host.spec.bmc;
    if !bmc.address.is_empty()
        && let Err(problem) = parse_bmc_address(&bmc.address)
    {
        invalid(&mut errors, "spec.bmc.address", problem);
    }
    if !bmc.credentials_name.is_empty() {
        check_name(
            &mut errors,
            "spec.bmc.credentialsName",
            &bmc.credentials_name,
            NameRule::Dns1123Subdomain,
        );
    }
    if let Some(nd) = &host.spec.network_data {
        if !nd.name.is_empty() {
            check_name(
                &mut errors,
                "spec.networkData.name",
                &nd.name,
                NameRule::Dns1123Subdomain,
            );
        }
        if !nd.namespace.is_empty() {
            check_name(
                &mut errors,
                "spec.networkData.namespace",
                &nd.namespace,
                NameRule::Dns1123Label {
                    max_len: super::MAX_LABEL_LEN,
                },
            );
        }
    }
    errors
}

/// Validates a Secret: name, keys, `data` values base64 (never repeated in messages).
pub fn validate_secret(secret: &Secret) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_meta(
        &mut errors,
        secret.metadata(),
        Kind::Secret,
        NameRule::Dns1123Subdomain,
    );
    let key_ok = |k: &str| {
        !k.is_empty()
            && k.len() <= super::MAX_SUBDOMAIN_LEN
            && k.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    };
    for (k, v) in &secret.data {
        if !key_ok(k) {
            invalid(
                &mut errors,
                format!("data.{k}"),
                "a key is alphanumerics, '-', '_' or '.'",
            );
        } else if base64::engine::general_purpose::STANDARD
            .decode(v.trim())
            .is_err()
        {
            invalid(
                &mut errors,
                format!("data.{k}"),
                "not base64 (data values are base64; plain values go in stringData)",
            );
        }
    }
    for k in secret.string_data.keys() {
        if !key_ok(k) {
            invalid(
                &mut errors,
                format!("stringData.{k}"),
                "a key is alphanumerics, '-', '_' or '.'",
            );
        }
    }
    errors
}
