//! `oi get KIND [NAME...]`: the world's objects as kubectl-like tables, read from the
//! manifests alone (no hypervisor or API server is contacted, so it answers at once).
//!
//! ```text
//! $ oi get clusters -f world.yaml
//! NAMESPACE  NAME  VERSION  REPLICAS  SUCCEEDED  REASON              ENDPOINT
//! default    c1    1.37.1   3         True       ReconcileSucceeded  https://10.0.0.4:30000
//! ```
//!
//! `-o wide` adds columns, `-o name` prints `kind/name` lines, `-o yaml` and `-o json` the
//! objects themselves with every private key, password and join token secret redacted (the
//! world file is where they live).

use std::io::{Read, Write};

use oi_api::{
    Cluster, Component, ComponentRole, Hypervisor, Object, ObjectKey, Resource as _, World,
};

use crate::args::{GetArgs, GetFormat, GetKind};
use crate::commands::Context;
use crate::manifests;

/// What replaces a secret in `-o yaml|json`.
pub const REDACTED: &str = "<redacted>";

/// # Errors
/// When the manifests do not load, or a name given is not an object of that kind.
pub fn run(
    args: &GetArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let objects = select(&world, args.kind, &args.names)?;
    let text = match args.format.unwrap_or(GetFormat::Table) {
        GetFormat::Table => table(&world, &objects, false),
        GetFormat::Wide => table(&world, &objects, true),
        GetFormat::Name => objects
            .iter()
            .map(|o| format!("{}/{}\n", o.kind().to_string().to_lowercase(), o.key().name))
            .collect(),
        GetFormat::Yaml => yaml(&objects)?,
        GetFormat::Json => json(&objects)?,
    };
    output.write_all(text.as_bytes())?;
    Ok(())
}

/// The objects of `kind`, sorted by namespace and name; only those `names` names
/// (`NAME` or `NAMESPACE/NAME`) when given, in that order.
fn select(world: &World, kind: GetKind, names: &[String]) -> anyhow::Result<Vec<Object>> {
    let all: Vec<Object> = match kind {
        GetKind::Clusters => world
            .clusters
            .values()
            .cloned()
            .map(Object::Cluster)
            .collect(),
        GetKind::Hypervisors => world
            .hypervisors
            .values()
            .cloned()
            .map(Object::Hypervisor)
            .collect(),
        GetKind::Components => world
            .components
            .values()
            .cloned()
            .map(Object::Component)
            .collect(),
    };
    if names.is_empty() {
        return Ok(all);
    }
    let mut chosen = Vec::with_capacity(names.len());
    for name in names {
        let matching: Vec<&Object> = all
            .iter()
            .filter(|o| {
                let key = o.key();
                match name.split_once('/') {
                    Some((ns, n)) => key.namespace == ns && key.name == n,
                    None => key.name == *name,
                }
            })
            .collect();
        match matching.as_slice() {
            [one] => chosen.push((*one).clone()),
            [] => anyhow::bail!(
                "no {} named {name:?} in the manifests (`oi get {}` lists them)",
                kind.singular(),
                kind.plural()
            ),
            many => anyhow::bail!(
                "{} {name:?} is ambiguous: {} (say NAMESPACE/NAME)",
                kind.singular(),
                many.iter()
                    .map(|o| o.key().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    Ok(chosen)
}

/// Left-aligned columns two spaces apart, as kubectl prints them.
pub fn columns(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..width)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s.to_string()
    }
}

fn table(world: &World, objects: &[Object], wide: bool) -> String {
    let Some(first) = objects.first() else {
        return String::new();
    };
    let mut rows = vec![header(first, wide)];
    for o in objects {
        rows.push(match o {
            Object::Cluster(c) => cluster_row(world, c, wide),
            Object::Hypervisor(h) => hypervisor_row(world, h, wide),
            Object::Component(c) => component_row(c, wide),
            _ => Vec::new(),
        });
    }
    columns(&rows)
}

fn header(first: &Object, wide: bool) -> Vec<String> {
    let (narrow, more): (&[&str], &[&str]) = match first {
        Object::Cluster(_) => (
            &[
                "NAMESPACE",
                "NAME",
                "VERSION",
                "REPLICAS",
                "SUCCEEDED",
                "REASON",
                "ENDPOINT",
            ],
            &["API SERVERS", "VPN", "INGRESS", "LAST SNAPSHOT"],
        ),
        Object::Hypervisor(_) => (
            &[
                "NAME",
                "PUBLIC",
                "IP",
                "PORTS",
                "USED",
                "COMPONENTS",
                "STATUS",
            ],
            &["ZONE", "CAPACITY", "CRI ENDPOINT"],
        ),
        Object::Component(_) => (
            &["NAMESPACE", "NAME", "CLUSTER", "ROLE", "HYPERVISOR"],
            &["PORTS"],
        ),
        _ => (&[], &[]),
    };
    narrow
        .iter()
        .chain(if wide { more } else { &[] })
        .map(|s| (*s).to_string())
        .collect()
}

/// A condition's status and reason (the last run's, for `ReconcileSucceeded`), or `Unknown`
/// and `<none>` before any run.
fn condition(conditions: &[oi_api::Condition], type_: &str) -> (String, String) {
    oi_api::find_condition(conditions, type_).map_or_else(
        || ("Unknown".to_string(), "<none>".to_string()),
        |c| (format!("{:?}", c.status), or_none(&c.reason)),
    )
}

fn components_of<'w>(world: &'w World, cluster: &ObjectKey) -> Vec<&'w Component> {
    world
        .components
        .values()
        .filter(|c| {
            c.metadata
                .namespace
                .as_deref()
                .unwrap_or(oi_api::DEFAULT_NAMESPACE)
                == cluster.namespace
                && c.spec.cluster == cluster.name
        })
        .collect()
}

fn cluster_row(world: &World, c: &Cluster, wide: bool) -> Vec<String> {
    let key = c.key();
    let (ready, reason) = condition(
        &c.status.conditions,
        oi_api::common::condition_types::RECONCILE_SUCCEEDED,
    );
    let version = if c.status.kubernetes_version.is_empty()
        || c.status.kubernetes_version == c.spec.kubernetes_version
    {
        or_none(&c.spec.kubernetes_version)
    } else {
        format!(
            "{} -> {}",
            c.status.kubernetes_version, c.spec.kubernetes_version
        )
    };
    let mut row = vec![
        key.namespace.clone(),
        key.name.clone(),
        version,
        c.spec.control_plane_replicas.unwrap_or(1).to_string(),
        ready,
        reason,
        or_none(&c.status.api_server_endpoint),
    ];
    if wide {
        let components = components_of(world, &key);
        let apiservers = components
            .iter()
            .filter(|k| k.spec.role != ComponentRole::ControlPlaneIngress)
            .count();
        let ingress: Vec<String> = components
            .iter()
            .filter(|k| k.spec.role == ComponentRole::ControlPlaneIngress)
            .map(|k| {
                k.spec
                    .hypervisor
                    .clone()
                    .unwrap_or_else(|| "<unscheduled>".into())
            })
            .collect();
        let vip = c
            .spec
            .ingress
            .as_ref()
            .map(|i| i.virtual_ip.clone())
            .filter(|v| !v.is_empty())
            .map(|v| format!(" (VIP {v})"))
            .unwrap_or_default();
        row.extend([
            apiservers.to_string(),
            if c.spec.vpn.enabled {
                or_none(&c.status.vpn_server_endpoint)
            } else {
                "off".to_string()
            },
            if ingress.is_empty() {
                "<none>".to_string()
            } else {
                format!("{}{vip}", ingress.join(","))
            },
            c.status
                .last_snapshot
                .as_ref()
                .map_or_else(|| "<none>".to_string(), |s| or_none(&s.taken_at)),
        ]);
    }
    row
}

fn hypervisor_row(world: &World, h: &Hypervisor, wide: bool) -> Vec<String> {
    let name = h.metadata.name.clone();
    let range = &h.spec.port_range;
    let size = (range.high.saturating_sub(range.low) + 1) as usize;
    let used = h.status.allocated_ports.len();
    let components = world
        .components
        .values()
        .filter(|c| c.spec.hypervisor.as_deref() == Some(name.as_str()))
        .count();
    let status = if h.spec.drain {
        "Draining"
    } else if h.spec.unschedulable {
        "SchedulingDisabled"
    } else {
        "Schedulable"
    };
    let mut row = vec![
        name,
        h.spec.public.to_string(),
        h.spec.ip_address.clone(),
        format!("{}-{}", range.low, range.high),
        format!("{used}/{size}"),
        components.to_string(),
        status.to_string(),
    ];
    if wide {
        let capacity = h.spec.capacity.as_ref().map_or_else(
            || "<none>".to_string(),
            |c| {
                let mut parts = Vec::new();
                if let Some(n) = c.components {
                    parts.push(format!("components={n}"));
                }
                if let Some(cpu) = &c.cpu {
                    parts.push(format!("cpu={cpu}"));
                }
                if let Some(m) = &c.memory {
                    parts.push(format!("memory={m}"));
                }
                or_none(&parts.join(","))
            },
        );
        let cri = match (&h.spec.local_cri_endpoint, &h.spec.remote_cri_endpoint) {
            (Some(l), _) => format!("unix://{}", l.cri_endpoint_path),
            (None, Some(r)) => or_none(&r.cri_endpoint_uri),
            (None, None) => "<none>".to_string(),
        };
        row.extend([
            h.metadata
                .labels
                .get("topology.kubernetes.io/zone")
                .cloned()
                .unwrap_or_else(|| "<none>".to_string()),
            capacity,
            cri,
        ]);
    }
    row
}

fn component_row(c: &Component, wide: bool) -> Vec<String> {
    let key = c.key();
    let role = match c.spec.role {
        ComponentRole::ControlPlane => "control-plane",
        ComponentRole::ControlPlaneIngress => "control-plane-ingress",
        ComponentRole::ApiServer => "control-plane-apiserver",
    };
    let mut row = vec![
        key.namespace.clone(),
        key.name.clone(),
        c.spec.cluster.clone(),
        role.to_string(),
        c.spec
            .hypervisor
            .clone()
            .unwrap_or_else(|| "<unscheduled>".to_string()),
    ];
    if wide {
        let ports: Vec<String> = c
            .status
            .allocated_host_ports
            .iter()
            .map(|p| format!("{}={}", p.name, p.port))
            .collect();
        row.push(or_none(&ports.join(",")));
    }
    row
}

/// Each object as JSON, its secrets redacted.
fn redacted_values(objects: &[Object]) -> anyhow::Result<Vec<serde_json::Value>> {
    objects
        .iter()
        .map(|o| {
            let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&o.to_yaml()?)?;
            let mut value = serde_json::to_value(yaml)?;
            redact(&mut value, None);
            Ok(value)
        })
        .collect()
}

/// Replaces in `value` every private key and password, and the secret half of every join
/// token (`id.secret`).
pub fn redact(value: &mut serde_json::Value, field: Option<&str>) {
    use serde_json::Value;
    let secret = |name: &str| {
        let lower = name.to_ascii_lowercase();
        lower.contains("privatekey") || lower.contains("password")
    };
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if secret(k) && (v.is_string() || v.is_array()) {
                    *v = Value::String(REDACTED.to_string());
                } else {
                    redact(v, Some(k));
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                if field == Some("joinTokens")
                    && let Value::String(token) = item
                {
                    let id = token.split('.').next().unwrap_or_default().to_string();
                    *token = format!("{id}.{REDACTED}");
                } else {
                    redact(item, field);
                }
            }
        }
        _ => {}
    }
}

fn yaml(objects: &[Object]) -> anyhow::Result<String> {
    let mut docs = Vec::new();
    for v in redacted_values(objects)? {
        docs.push(serde_yaml_ng::to_string(&v)?);
    }
    Ok(docs.join("---\n"))
}

fn json(objects: &[Object]) -> anyhow::Result<String> {
    let items = redacted_values(objects)?;
    let list = if items.len() == 1 {
        items.into_iter().next().unwrap_or_default()
    } else {
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
    };
    let mut text = serde_json::to_string_pretty(&list)?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_private_key_password_and_token_secret_is_redacted() {
        let mut v = serde_json::json!({
            "spec": {
                "joinTokens": ["abcdef.0123456789abcdef"],
                "apiServer": {"ca": {"certificate": "CERT", "privateKey": "KEY1"}},
                "joinKey": {"publicKey": "PUB", "privateKey": "KEY2"},
            },
            "status": {
                "vpnPeers": [{"name": "p", "privateKey": "KEY3", "publicKey": "PUB"}],
                "oidc": {"tlsPrivateKey": "KEY4", "users": [{"passwordHash": "H"}]},
                "nodeSshPrivateKeys": "KEY5",
            },
        });
        redact(&mut v, None);
        let text = v.to_string();
        for secret in [
            "KEY1",
            "KEY2",
            "KEY3",
            "KEY4",
            "KEY5",
            "0123456789abcdef",
            "\"H\"",
        ] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        for kept in ["CERT", "PUB", "abcdef.<redacted>"] {
            assert!(text.contains(kept), "{kept} missing from {text}");
        }
    }

    #[test]
    fn columns_line_up_and_trailing_spaces_go() {
        let rows = vec![
            vec!["NAME".to_string(), "X".to_string()],
            vec!["a-long-name".to_string(), String::new()],
        ];
        assert_eq!(columns(&rows), "NAME         X\na-long-name\n");
    }
}
