//! `oi get KIND [NAME...]`: the world's clusters, hypervisors, components, SIPClusters (with
//! the hosts they hold) and join tokens (by id) as kubectl-like tables, read from the
//! manifests alone (no hypervisor or API server is contacted, so it answers at once).
//!
//! ```text
//! $ oi get clusters -f world.yaml
//! NAMESPACE  NAME  VERSION  REPLICAS  STATUS  ENDPOINT
//! default    c1    1.37.1   3         Ready   https://10.0.0.4:30000
//! ```
//!
//! `-o wide` adds columns, `-o name` prints `kind/name` lines, `-o yaml` and `-o json` the
//! objects themselves with every private key, password and join token secret redacted (the
//! world file is where they live).

use std::io::{Read, Write};

use oi_api::{
    Cluster, Component, ComponentRole, Hypervisor, Object, ObjectKey, Resource as _, SipCluster,
    World,
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
    let items = if args.kind == GetKind::Nodes {
        // NAMEs are clusters: each must exist; a cluster no worker joined lists nothing.
        let clusters = select(
            items(&world, GetKind::Clusters),
            GetKind::Clusters,
            &args.names,
        )?;
        let wanted: Vec<&ObjectKey> = clusters.iter().map(|c| &c.key).collect();
        items(&world, GetKind::Nodes)
            .into_iter()
            .filter(|n| args.names.is_empty() || wanted.contains(&&n.key))
            .collect()
    } else {
        select(items(&world, args.kind), args.kind, &args.names)?
    };
    let text = match args.format.unwrap_or(GetFormat::Table) {
        GetFormat::Table => table(args.kind, &items, false),
        GetFormat::Wide => table(args.kind, &items, true),
        GetFormat::Name => items.iter().map(|i| format!("{}\n", i.name)).collect(),
        GetFormat::Yaml => {
            let mut docs = Vec::new();
            for i in &items {
                docs.push(serde_yaml_ng::to_string(&i.value()?)?);
            }
            docs.join("---\n")
        }
        GetFormat::Json => {
            let mut values = items
                .iter()
                .map(Item::value)
                .collect::<anyhow::Result<Vec<_>>>()?;
            let list = match values.len() {
                1 => values.remove(0),
                _ => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": values}),
            };
            let mut text = serde_json::to_string_pretty(&list)?;
            text.push('\n');
            text
        }
    };
    output.write_all(text.as_bytes())?;
    Ok(())
}

/// One thing `oi get` lists: what `NAME` arguments match, its `-o name` line, its table row
/// (narrow, then the wide columns) and what `-o yaml|json` print.
struct Item {
    key: ObjectKey,
    name: String,
    row: Vec<String>,
    wide: Vec<String>,
    shown: Shown,
}

/// What `-o yaml|json` print of an item, made only when asked for.
enum Shown {
    /// An object of the world, its secrets redacted when shown.
    Object(Box<Object>),
    /// What stands for something that is not an object (a join token).
    Plain(serde_json::Value),
}

impl Item {
    fn value(&self) -> anyhow::Result<serde_json::Value> {
        match &self.shown {
            Shown::Object(o) => {
                let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&o.to_yaml()?)?;
                let mut value = serde_json::to_value(yaml)?;
                redact(&mut value, None);
                Ok(value)
            }
            Shown::Plain(value) => Ok(value.clone()),
        }
    }
}

/// Every item of `kind` in `world`, sorted by namespace and name.
fn items(world: &World, kind: GetKind) -> Vec<Item> {
    let object = |o: Object, row: Vec<String>, wide: Vec<String>| {
        let key = o.key();
        let name = format!("{}/{}", o.kind().to_string().to_lowercase(), key.name);
        Item {
            key,
            name,
            row,
            wide,
            shown: Shown::Object(Box::new(o)),
        }
    };
    match kind {
        GetKind::Clusters => world
            .clusters
            .values()
            .map(|c| {
                let (row, wide) = cluster_row(world, c);
                object(Object::Cluster(c.clone()), row, wide)
            })
            .collect(),
        GetKind::Hypervisors => world
            .hypervisors
            .values()
            .map(|h| {
                let (row, wide) = hypervisor_row(world, h);
                object(Object::Hypervisor(h.clone()), row, wide)
            })
            .collect(),
        GetKind::Components => world
            .components
            .values()
            .map(|c| {
                let (row, wide) = component_row(c);
                object(Object::Component(c.clone()), row, wide)
            })
            .collect(),
        GetKind::Sipclusters => world
            .sip_clusters
            .values()
            .map(|c| {
                let (row, wide) = sip_cluster_row(world, c);
                object(Object::SipCluster(c.clone()), row, wide)
            })
            .collect(),
        GetKind::JoinTokens => join_tokens(world),
        GetKind::Nodes => nodes(world),
    }
}

/// The items `names` names (`NAME` or `NAMESPACE/NAME`; for join tokens, their cluster's),
/// in that order; all when none.
fn select(all: Vec<Item>, kind: GetKind, names: &[String]) -> anyhow::Result<Vec<Item>> {
    if names.is_empty() {
        return Ok(all);
    }
    let mut chosen = Vec::with_capacity(names.len());
    for name in names {
        let matching: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(_, i)| match name.split_once('/') {
                Some((ns, n)) => i.key.namespace == ns && i.key.name == n,
                None => i.key.name == *name,
            })
            .map(|(n, _)| n)
            .collect();
        match matching.as_slice() {
            // A cluster's join tokens: all of them.
            [_, ..] if kind == GetKind::JoinTokens => chosen.extend(matching.iter().copied()),
            [one] => chosen.push(*one),
            [] => anyhow::bail!(
                "no {} named {name:?} in the manifests (`oi get {}` lists them)",
                kind.singular(),
                kind.plural()
            ),
            many => anyhow::bail!(
                "{} {name:?} is ambiguous: {} (say NAMESPACE/NAME)",
                kind.singular(),
                many.iter()
                    .map(|n| all[*n].key.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    let mut all: Vec<Option<Item>> = all.into_iter().map(Some).collect();
    Ok(chosen.into_iter().filter_map(|n| all[n].take()).collect())
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

/// `s`, or `<none>` when empty.
pub fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s.to_string()
    }
}

fn table(kind: GetKind, items: &[Item], wide: bool) -> String {
    if items.is_empty() {
        return String::new();
    }
    let (narrow, more) = header(kind);
    let mut rows = vec![
        narrow
            .iter()
            .chain(if wide { more } else { &[] })
            .map(|s| (*s).to_string())
            .collect::<Vec<_>>(),
    ];
    for i in items {
        let mut row = i.row.clone();
        if wide {
            row.extend(i.wide.iter().cloned());
        }
        rows.push(row);
    }
    columns(&rows)
}

/// The columns of `kind`: always, and with `-o wide`.
fn header(kind: GetKind) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        GetKind::Clusters => (
            &[
                "NAMESPACE",
                "NAME",
                "VERSION",
                "REPLICAS",
                "STATUS",
                "ENDPOINT",
            ],
            &["API SERVERS", "VPN", "INGRESS", "LAST SNAPSHOT"],
        ),
        GetKind::Hypervisors => (
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
        GetKind::Components => (
            &["NAMESPACE", "NAME", "CLUSTER", "ROLE", "HYPERVISOR"],
            &["PORTS"],
        ),
        GetKind::Sipclusters => (
            &[
                "NAMESPACE",
                "NAME",
                "READY",
                "REASON",
                "NODES",
                "HOSTS",
                "SERVICES",
            ],
            &["CLUSTER", "HOSTS SELECTED"],
        ),
        GetKind::JoinTokens => (&["NAMESPACE", "CLUSTER", "TOKEN", "STATE"], &[]),
        GetKind::Nodes => (
            &["NAMESPACE", "CLUSTER", "NAME", "STATUS", "VPN ADDRESS"],
            &["JOINED"],
        ),
    }
}

/// A cluster's state in one word, as kubectl's STATUS column gives a pod's: `Deleting` once
/// marked for deletion, `Pending` before any run, `Ready` when the last run succeeded, else
/// the reason it failed (`IngressNotReady`, `EtcdNotReady`, ...).
pub fn cluster_status(c: &Cluster) -> String {
    if c.metadata.is_being_deleted() {
        return "Deleting".into();
    }
    match oi_api::find_condition(
        &c.status.conditions,
        oi_api::common::condition_types::RECONCILE_SUCCEEDED,
    ) {
        None => "Pending".into(),
        Some(c) if c.status == oi_api::ConditionStatus::True => "Ready".into(),
        Some(c) if c.reason.is_empty() => "NotReady".into(),
        Some(c) => c.reason.clone(),
    }
}

fn cluster_row(world: &World, c: &Cluster) -> (Vec<String>, Vec<String>) {
    let key = c.key();
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
    let row = vec![
        key.namespace.clone(),
        key.name.clone(),
        version,
        c.spec.control_plane_replicas.unwrap_or(1).to_string(),
        cluster_status(c),
        or_none(&c.status.api_server_endpoint),
    ];
    let wide = {
        let components: Vec<&Component> = world.components_of(&key).collect();
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
        vec![
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
        ]
    };
    (row, wide)
}

fn hypervisor_row(world: &World, h: &Hypervisor) -> (Vec<String>, Vec<String>) {
    let name = h.metadata.name.clone();
    let range = &h.spec.port_range;
    let size = (range.high.saturating_sub(range.low) + 1) as usize;
    let used = h.status.allocated_ports.len();
    let components = world
        .components
        .values()
        .filter(|c| c.spec.hypervisor.as_deref() == Some(name.as_str()))
        .count();
    let row = vec![
        name,
        h.spec.public.to_string(),
        h.spec.ip_address.clone(),
        format!("{}-{}", range.low, range.high),
        format!("{used}/{size}"),
        components.to_string(),
        scheduling(h).to_string(),
    ];
    let wide = {
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
        vec![
            h.metadata
                .labels
                .get("topology.kubernetes.io/zone")
                .cloned()
                .unwrap_or_else(|| "<none>".to_string()),
            capacity,
            cri_endpoint(h),
        ]
    };
    (row, wide)
}

fn component_row(c: &Component) -> (Vec<String>, Vec<String>) {
    let key = c.key();
    let row = vec![
        key.namespace.clone(),
        key.name.clone(),
        c.spec.cluster.clone(),
        c.spec.role.as_str().to_string(),
        c.spec
            .hypervisor
            .clone()
            .unwrap_or_else(|| "<unscheduled>".to_string()),
    ];
    (row, vec![ports(c)])
}

/// A component's host ports, `name=port` each, or `<none>`.
pub fn ports(c: &Component) -> String {
    let ports: Vec<String> = c
        .status
        .allocated_host_ports
        .iter()
        .map(|p| format!("{}={}", p.name, p.port))
        .collect();
    or_none(&ports.join(","))
}

/// Where a hypervisor's CRI answers: `unix://PATH`, or its remote URI.
pub fn cri_endpoint(h: &Hypervisor) -> String {
    match (&h.spec.local_cri_endpoint, &h.spec.remote_cri_endpoint) {
        (Some(l), _) => format!("unix://{}", l.cri_endpoint_path),
        (None, Some(r)) => or_none(&r.cri_endpoint_uri),
        (None, None) => "<none>".to_string(),
    }
}

/// Why a hypervisor takes no new components, by the scheduler's own rule (a hypervisor being
/// removed counts as lost), or `None` when it takes them.
pub fn closed(h: &Hypervisor) -> Option<oi_planner::schedule::Closed> {
    oi_planner::schedule::Closed::of(h, h.metadata.is_being_deleted())
}

/// [`closed`] as kubectl says it of nodes.
fn scheduling(h: &Hypervisor) -> &'static str {
    use oi_planner::schedule::Closed;
    match closed(h) {
        None => "Schedulable",
        Some(Closed::Cordoned) => "SchedulingDisabled",
        Some(Closed::Drained) => "Draining",
        Some(Closed::Lost) => "Removing",
    }
}

fn sip_cluster_row(world: &World, c: &SipCluster) -> (Vec<String>, Vec<String>) {
    let key = c.key();
    let (ready, reason) = c
        .status
        .conditions
        .iter()
        .find(|m| m.type_ == oi_api::sip::CONDITION_READY)
        .map_or_else(
            || ("Unknown".to_string(), "<none>".to_string()),
            |c| (format!("{:?}", c.status), or_none(&c.reason)),
        );
    let nodes: Vec<String> = c
        .spec
        .nodes
        .iter()
        .map(|(role, set)| format!("{role}={}+{}", set.count.active, set.count.standby))
        .collect();
    let hosts: Vec<String> = world
        .bare_metal_hosts
        .values()
        .filter(|h| oi_planner::sip::select::held_by(&h.metadata.labels, &key))
        .map(|h| h.metadata.name.clone())
        .collect();
    let wanted: i64 = c
        .spec
        .nodes
        .values()
        .map(|s| s.count.active + s.count.standby)
        .sum();
    let s = &c.spec.services;
    let services: Vec<String> = [
        (
            "loadBalancerControlPlane",
            s.load_balancer_control_plane.len(),
        ),
        ("loadBalancerWorker", s.load_balancer_worker.len()),
        ("jumpHost", s.jump_host.len()),
        ("oidcProvider", s.oidc_provider.len()),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(name, n)| format!("{name}={n}"))
    .collect();
    (
        vec![
            key.namespace.clone(),
            key.name.clone(),
            ready,
            reason,
            or_none(&nodes.join(",")),
            format!("{}/{wanted}", hosts.len()),
            or_none(&services.join(",")),
        ],
        vec![
            c.spec
                .cluster_ref
                .as_ref()
                .map_or_else(|| "<none>".to_string(), |r| r.name.clone()),
            or_none(&hosts.join(",")),
        ],
    )
}

/// Every cluster's join tokens by id (the secret half never shown): `InCluster` when the
/// cluster holds it, `Pending` until a run writes it, `Revoking` when it left the spec but
/// not yet the cluster.
fn join_tokens(world: &World) -> Vec<Item> {
    let mut items = Vec::new();
    for c in world.clusters.values() {
        let key = c.key();
        for (token, state) in join_token_states(c) {
            items.push(Item {
                key: key.clone(),
                name: format!("jointoken/{}/{token}", key.name),
                row: vec![
                    key.namespace.clone(),
                    key.name.clone(),
                    token.clone(),
                    state.to_string(),
                ],
                wide: Vec::new(),
                shown: Shown::Plain(serde_json::json!({
                    "namespace": key.namespace,
                    "cluster": key.name,
                    "token": format!("{token}.{REDACTED}"),
                    "state": state,
                })),
            });
        }
    }
    items
}

/// The workers that joined each cluster: `Registered` once their Node registered, `Joined`
/// before; recorded by the last run that reached the cluster's API (`status.joinedNodes`).
fn nodes(world: &World) -> Vec<Item> {
    let mut items = Vec::new();
    for c in world.clusters.values() {
        let key = c.key();
        for n in &c.status.joined_nodes {
            let status = node_status(n);
            let joined = n.issued_at.map_or_else(
                || "<unknown>".to_string(),
                |t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .unwrap_or_default()
                },
            );
            items.push(Item {
                key: key.clone(),
                name: format!("node/{}/{}", key.name, n.name),
                row: vec![
                    key.namespace.clone(),
                    key.name.clone(),
                    n.name.clone(),
                    status.to_string(),
                    or_none(&n.vpn_address),
                ],
                wide: vec![joined.clone()],
                shown: Shown::Plain(serde_json::json!({
                    "namespace": key.namespace,
                    "cluster": key.name,
                    "name": n.name,
                    "status": status,
                    "vpnAddress": n.vpn_address,
                    "joined": joined,
                })),
            });
        }
    }
    items
}

/// A joined worker's state in one word.
pub fn node_status(n: &oi_api::JoinedNode) -> &'static str {
    if n.registered { "Registered" } else { "Joined" }
}

/// Cluster `c`'s join tokens by id: `InCluster`, `Pending` or `Revoking` (see
/// [`join_tokens`]).
pub fn join_token_states(c: &Cluster) -> std::collections::BTreeMap<String, &'static str> {
    let id = |t: &str| t.split('.').next().unwrap_or_default().to_string();
    let mut states: std::collections::BTreeMap<String, &str> = c
        .spec
        .join_tokens
        .iter()
        .map(|t| {
            let state = if c.status.join_tokens.iter().any(|s| id(s) == id(t)) {
                "InCluster"
            } else {
                "Pending"
            };
            (id(t), state)
        })
        .collect();
    for t in &c.status.join_tokens {
        states.entry(id(t)).or_insert("Revoking");
    }
    states
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
    fn a_clusters_status_is_ready_pending_deleting_or_why_it_is_not_ready() {
        use oi_api::ConditionStatus;
        let at = time::macros::datetime!(2026-11-22 00:00:00 UTC);
        let mut c = Cluster::new(oi_api::ObjectMeta::default(), Default::default());
        assert_eq!(cluster_status(&c), "Pending");
        let set = |c: &mut Cluster, status, reason: &str| {
            oi_api::common::set_condition(
                &mut c.status.conditions,
                oi_api::common::condition_types::RECONCILE_SUCCEEDED,
                status,
                reason,
                "",
                at,
            );
        };
        set(&mut c, ConditionStatus::True, "ReconcileSucceeded");
        assert_eq!(cluster_status(&c), "Ready");
        set(&mut c, ConditionStatus::False, "IngressNotReady");
        assert_eq!(cluster_status(&c), "IngressNotReady");
        set(&mut c, ConditionStatus::Unknown, "");
        assert_eq!(cluster_status(&c), "NotReady");
        c.metadata.deletion_timestamp = Some(at);
        assert_eq!(cluster_status(&c), "Deleting");
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
