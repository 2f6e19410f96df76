//! `oi describe cluster|hypervisor NAME`: one object in full, as kubectl describes, read from
//! the manifests alone (nothing is contacted):
//! - a cluster: version (and what runs, mid-upgrade), replicas, endpoints (ingress, VIP, VPN),
//!   snapshots, a CA rotation under way, conditions with reasons and times (the last run's
//!   result), components with hypervisor, ports and state, the certificates that expire
//!   soonest, join tokens, joined nodes and VPN peers;
//! - a hypervisor: address, CRI endpoint, labels, scheduling state, ports, declared capacity
//!   against what its components ask, conditions, and what runs there;
//! - a SIPCluster: its tenant cluster, node sets, the hosts it holds (role, state, BMC), its
//!   services and the hypervisor ports they hold, its OIDC providers' issuers, conditions.

use std::fmt::Write as _;
use std::io::{Read, Write};

use oi_api::{Cluster, Condition, Hypervisor, ObjectKey, Resource as _, SipCluster, World};
use oi_planner::schedule::Closed;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::args::{DescribeArgs, DescribeKind};
use crate::commands::Context;
use crate::commands::cluster::certificates::left;
use crate::commands::get::{closed, columns, cri_endpoint, join_token_states, or_none, ports};
use crate::manifests;

/// How many certificates a cluster's description lists (the soonest to expire).
const SOONEST: usize = 5;

/// # Errors
/// When the manifests do not load, or the name is not an object of that kind.
pub fn run(
    args: &DescribeArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let text = match args.kind {
        DescribeKind::Cluster => {
            let (key, cluster) = manifests::select_cluster(&world, Some(&args.name))?;
            cluster_text(&world, key, cluster, ctx.now)
        }
        DescribeKind::Hypervisor => {
            let hypervisor = world
                .hypervisors
                .values()
                .find(|h| h.metadata.name == args.name)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no hypervisor named {:?} in the manifests (`oi get hypervisors` lists them)",
                        args.name
                    )
                })?;
            hypervisor_text(&world, hypervisor)
        }
        DescribeKind::Sipcluster => {
            let found: Vec<&SipCluster> = world
                .sip_clusters
                .values()
                .filter(|c| match args.name.split_once('/') {
                    Some((ns, n)) => c.key().namespace == ns && c.metadata.name == n,
                    None => c.metadata.name == args.name,
                })
                .collect();
            match found.as_slice() {
                [one] => sip_cluster_text(&world, one),
                [] => anyhow::bail!(
                    "no sipcluster named {:?} in the manifests (`oi get sipclusters` lists them)",
                    args.name
                ),
                _ => anyhow::bail!(
                    "sipcluster {:?} is ambiguous: say NAMESPACE/NAME",
                    args.name
                ),
            }
        }
    };
    output.write_all(text.as_bytes())?;
    Ok(())
}

fn time(t: Option<OffsetDateTime>) -> String {
    t.and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "<none>".to_string())
}

/// `Label:` then the value, the values of a block lined up.
fn field(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{:<14}{value}", format!("{label}:"));
}

/// A titled table, indented by two; `<none>` when it has no rows.
fn section(out: &mut String, title: &str, rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "{title}:");
    if rows.len() <= 1 {
        out.push_str("  <none>\n");
        return;
    }
    for line in columns(&rows).lines() {
        let _ = writeln!(out, "  {line}");
    }
}

fn conditions(out: &mut String, conditions: &[Condition]) {
    let mut rows = vec![
        ["TYPE", "STATUS", "REASON", "LAST SET", "MESSAGE"]
            .map(String::from)
            .to_vec(),
    ];
    for c in conditions {
        rows.push(vec![
            c.type_.clone(),
            format!("{:?}", c.status),
            or_none(&c.reason),
            time(c.last_set_time),
            c.message.clone(),
        ]);
    }
    section(out, "Conditions", rows);
}

fn cluster_text(world: &World, key: &ObjectKey, c: &Cluster, now: OffsetDateTime) -> String {
    let mut out = String::new();
    let spec = &c.spec;
    let status = &c.status;
    field(&mut out, "Name", &key.name);
    field(&mut out, "Namespace", &key.namespace);
    let running = &status.kubernetes_version;
    field(
        &mut out,
        "Version",
        if running.is_empty() || *running == spec.kubernetes_version {
            spec.kubernetes_version.clone()
        } else {
            format!("{} (running {running})", spec.kubernetes_version)
        },
    );
    field(
        &mut out,
        "Replicas",
        format!(
            "{} control plane, {} API servers alone",
            spec.control_plane_replicas.unwrap_or(1),
            spec.api_server_replicas.unwrap_or(0)
        ),
    );
    field(&mut out, "Endpoint", or_none(&status.api_server_endpoint));
    let ingress = spec.ingress.as_ref();
    field(
        &mut out,
        "VIP",
        ingress
            .map(|i| i.virtual_ip.as_str())
            .filter(|v| !v.is_empty())
            .unwrap_or("<none>"),
    );
    field(
        &mut out,
        "VPN",
        if spec.vpn.enabled {
            format!(
                "{} ({})",
                or_none(&status.vpn_server_endpoint),
                or_none(&spec.vpn.cidr)
            )
        } else {
            "off".to_string()
        },
    );
    field(
        &mut out,
        "Snapshots",
        match (&spec.snapshots, &status.last_snapshot) {
            (None, None) => "<none>".to_string(),
            (schedule, last) => {
                let mut parts = Vec::new();
                if let Some(s) = schedule {
                    parts.push(format!("every {} to {}", s.every, s.location));
                }
                if let Some(l) = last {
                    parts.push(format!("last {}", or_none(&l.taken_at)));
                }
                parts.join("; ")
            }
        },
    );
    field(
        &mut out,
        "CA rotation",
        status.ca_rotation.as_ref().map_or_else(
            || "<none>".to_string(),
            |r| {
                format!(
                    "phase {} since {} ({})",
                    r.phase,
                    or_none(&r.started_at),
                    r.cas.join(", ")
                )
            },
        ),
    );
    conditions(&mut out, &status.conditions);

    let mut rows = vec![
        ["NAME", "ROLE", "HYPERVISOR", "PORTS", "STATE"]
            .map(String::from)
            .to_vec(),
    ];
    for k in world.components_of(key) {
        let role = k.spec.role.as_str();
        let state = if k.metadata.deletion_timestamp.is_some() {
            "Deleting".to_string()
        } else {
            oi_api::find_condition(
                &k.status.conditions,
                oi_api::common::condition_types::JOINED,
            )
            .map_or_else(
                || "Pending".to_string(),
                |c| match c.status {
                    oi_api::ConditionStatus::True => "Joined".to_string(),
                    _ => format!("NotJoined ({})", or_none(&c.reason)),
                },
            )
        };
        rows.push(vec![
            k.metadata.name.clone(),
            role.to_string(),
            k.spec
                .hypervisor
                .clone()
                .unwrap_or_else(|| "<unscheduled>".into()),
            ports(k),
            state,
        ]);
    }
    section(&mut out, "Components", rows);

    // Soonest first.
    let certificates = oi_planner::expiry::certificates(world, key);
    let total = certificates.len();
    let mut rows = vec![
        ["OBJECT", "CERTIFICATE", "EXPIRES IN", "RENEWAL"]
            .map(String::from)
            .to_vec(),
    ];
    for e in certificates.iter().take(SOONEST) {
        rows.push(vec![
            e.object.clone(),
            e.field.clone(),
            left(now, e.not_after),
            e.renewal.as_str().to_string(),
        ]);
    }
    section(
        &mut out,
        &format!(
            "Certificates (the {} of {total} expiring soonest; `oi cluster certificates` lists all)",
            SOONEST.min(total)
        ),
        rows,
    );

    field(
        &mut out,
        "Join tokens",
        format!(
            "{} ({} in the cluster; `oi get join-tokens {}`)",
            spec.join_tokens.len(),
            join_token_states(c)
                .values()
                .filter(|s| **s == "InCluster")
                .count(),
            key.name
        ),
    );
    let mut rows = vec![
        ["NAME", "STATUS", "VPN ADDRESS", "JOINED"]
            .map(String::from)
            .to_vec(),
    ];
    for n in &status.joined_nodes {
        rows.push(vec![
            n.name.clone(),
            crate::commands::get::node_status(n).to_string(),
            or_none(&n.vpn_address),
            time(n.issued_at),
        ]);
    }
    section(&mut out, "Joined nodes", rows);
    let mut rows = vec![["NAME", "ADDRESS"].map(String::from).to_vec()];
    for p in &status.vpn_peers {
        rows.push(vec![p.name.clone(), p.address.clone()]);
    }
    section(&mut out, "VPN peers", rows);
    out
}

fn hypervisor_text(world: &World, h: &Hypervisor) -> String {
    let mut out = String::new();
    let name = &h.metadata.name;
    field(&mut out, "Name", name);
    field(
        &mut out,
        "Role",
        if h.spec.public {
            "public (ingresses, SIP load balancers)"
        } else {
            "private (control planes)"
        },
    );
    field(&mut out, "IP", &h.spec.ip_address);
    field(
        &mut out,
        "CRI endpoint",
        if h.spec.local_cri_endpoint.is_none() && h.spec.remote_cri_endpoint.is_some() {
            format!("{} (mutual TLS)", cri_endpoint(h))
        } else {
            cri_endpoint(h)
        },
    );
    let labels: Vec<String> = h
        .metadata
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    field(&mut out, "Labels", or_none(&labels.join(",")));
    field(
        &mut out,
        "Scheduling",
        match closed(h) {
            None => "schedulable",
            Some(Closed::Cordoned) => "cordoned: nothing new is placed here",
            Some(Closed::Drained) => {
                "draining: what runs here moves away (`oi hypervisor uncordon` ends it)"
            }
            Some(Closed::Lost) => "being removed: what ran here is replaced elsewhere",
        },
    );
    let range = &h.spec.port_range;
    field(
        &mut out,
        "Ports",
        format!(
            "{}-{}: {} of {} allocated",
            range.low,
            range.high,
            h.status.allocated_ports.len(),
            range.high.saturating_sub(range.low) + 1
        ),
    );
    let held = oi_planner::schedule::held(world)
        .remove(name)
        .unwrap_or_default();
    let capacity = h.spec.capacity.as_ref();
    let of = |declared: Option<&String>| declared.map_or("undeclared".to_string(), |d| d.clone());
    field(
        &mut out,
        "Load",
        format!(
            "{} components or services of {}",
            held.load,
            capacity
                .and_then(|c| c.components)
                .map_or("any number".to_string(), |n| n.to_string())
        ),
    );
    field(
        &mut out,
        "CPU",
        format!(
            "{}m requested of {}",
            held.used.cpu_millis,
            of(capacity.and_then(|c| c.cpu.as_ref()))
        ),
    );
    field(
        &mut out,
        "Memory",
        format!(
            "{}Mi requested of {}",
            held.used.memory_bytes / (1024 * 1024),
            of(capacity.and_then(|c| c.memory.as_ref()))
        ),
    );
    conditions(&mut out, &h.status.conditions);
    let mut rows = vec![
        ["NAMESPACE", "CLUSTER", "COMPONENT", "ROLE", "PORTS"]
            .map(String::from)
            .to_vec(),
    ];
    for k in world
        .components
        .values()
        .filter(|k| k.spec.hypervisor.as_deref() == Some(name.as_str()))
    {
        rows.push(vec![
            k.metadata.namespace_or_default().to_string(),
            k.spec.cluster.clone(),
            k.metadata.name.clone(),
            k.spec.role.as_str().to_string(),
            ports(k),
        ]);
    }
    section(&mut out, "Components", rows);
    out
}

fn sip_cluster_text(world: &World, c: &SipCluster) -> String {
    use oi_api::sip::{NODE_STATE_LABEL, NODE_TYPE_LABEL};
    let mut out = String::new();
    let key = c.key();
    field(&mut out, "Name", &key.name);
    field(&mut out, "Namespace", &key.namespace);
    field(
        &mut out,
        "Cluster",
        c.spec
            .cluster_ref
            .as_ref()
            .map_or("<none>", |r| r.name.as_str()),
    );
    let mut rows = vec![
        ["ROLE", "ACTIVE", "STANDBY", "TOPOLOGY KEY", "SELECTOR"]
            .map(String::from)
            .to_vec(),
    ];
    for (role, set) in &c.spec.nodes {
        let selector: Vec<String> = set
            .label_selector
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        rows.push(vec![
            role.clone(),
            set.count.active.to_string(),
            set.count.standby.to_string(),
            or_none(&set.topology_key),
            or_none(&selector.join(",")),
        ]);
    }
    section(&mut out, "Node sets", rows);
    let mut rows = vec![["HOST", "ROLE", "STATE", "BMC"].map(String::from).to_vec()];
    for h in world
        .bare_metal_hosts
        .values()
        .filter(|h| oi_planner::sip::select::held_by(&h.metadata.labels, &key))
    {
        let label = |l: &str| {
            h.metadata
                .labels
                .get(l)
                .cloned()
                .unwrap_or_else(|| "<none>".to_string())
        };
        rows.push(vec![
            h.metadata.name.clone(),
            label(NODE_TYPE_LABEL),
            label(NODE_STATE_LABEL),
            or_none(&h.spec.bmc.address),
        ]);
    }
    section(&mut out, "Hosts", rows);
    let owner = oi_planner::sip::services::owner_cluster(&key.name);
    let mut rows = vec![
        ["SERVICE", "HYPERVISOR", "ADDRESS", "PORTS"]
            .map(String::from)
            .to_vec(),
    ];
    for h in world.hypervisors.values() {
        let mut by_service: std::collections::BTreeMap<&str, Vec<String>> =
            std::collections::BTreeMap::new();
        for a in h
            .status
            .allocated_ports
            .iter()
            .filter(|a| a.cluster_namespace == key.namespace && a.cluster == owner)
        {
            by_service
                .entry(oi_planner::sip::services::service_of(&a.component))
                .or_default()
                .push(a.port.to_string());
        }
        for (service, ports) in by_service {
            rows.push(vec![
                service.to_string(),
                h.metadata.name.clone(),
                h.spec.ip_address.clone(),
                ports.join(","),
            ]);
        }
    }
    section(&mut out, "Services", rows);
    let mut rows = vec![["SERVICE", "ISSUER"].map(String::from).to_vec()];
    for p in &c.status.oidc_providers {
        rows.push(vec![p.service.clone(), or_none(&p.issuer_url)]);
    }
    section(&mut out, "OIDC providers", rows);
    let mut rows = vec![
        ["TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"]
            .map(String::from)
            .to_vec(),
    ];
    for m in &c.status.conditions {
        rows.push(vec![
            m.type_.clone(),
            format!("{:?}", m.status),
            or_none(&m.reason),
            time(Some(m.last_transition_time)),
            m.message.clone(),
        ]);
    }
    section(&mut out, "Conditions", rows);
    out
}
