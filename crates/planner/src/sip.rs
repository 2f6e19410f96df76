//! Airship SIP over the world: for each SIPCluster, one at a time in key order (each seeing
//! the labels the ones before it wrote), the hosts it holds are selected ([`select`]), each
//! selected host's addresses and BMC read ([`hosts`]), the BareMetalHosts' labels written,
//! and the SIPCluster's `Ready` condition set with upstream's reasons. A SIPCluster marked
//! for deletion lets every host go (our labels removed, nothing else touched) and leaves.
//! Pure: the world in, the world out.

pub mod hosts;
pub mod select;
pub mod services;

use std::collections::BTreeMap;

use oi_api::common::ConditionStatus;
use oi_api::sip::{
    CONDITION_READY, REASON_INFRA_SERVICE_FAILURE, REASON_RECONCILIATION_SUCCEEDED,
    REASON_UNSCHEDULABLE, ROLES,
};
use oi_api::{ObjectKey, Resource, SipCluster, World};
use time::OffsetDateTime;

pub use hosts::{HostData, host_data};
pub use select::{
    Assignment, Candidate, HostState, Selection, Shortfall, held_by, labels_for, select,
};

/// What happened to one SIPCluster.
#[derive(Debug, Clone, PartialEq)]
pub struct SipReport {
    pub key: ObjectKey,
    /// It was marked for deletion: its hosts were let go and it left the world.
    pub deleted: bool,
    pub selection: Selection,
    /// Data of the hosts it holds (for the support services).
    pub hosts: BTreeMap<ObjectKey, HostData>,
    /// Hosts whose labels changed.
    pub relabelled: Vec<ObjectKey>,
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

impl SipReport {
    /// One line for people: what it holds, or why not.
    pub fn summary(&self) -> String {
        if self.deleted {
            return format!(
                "sipcluster {}: deleted, {} host(s) let go",
                self.key,
                self.relabelled.len()
            );
        }
        let mut line = format!("sipcluster {}: {}", self.key, self.message);
        let names = |keys: &[ObjectKey]| {
            keys.iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.selection.released.is_empty() {
            let released: Vec<String> = self
                .selection
                .released
                .iter()
                .map(|(k, why)| format!("{} ({why})", k.name))
                .collect();
            line.push_str(&format!("; let go: {}", released.join(", ")));
        }
        if !self.selection.promoted.is_empty() {
            line.push_str(&format!(
                "; promoted to active: {}",
                names(&self.selection.promoted)
            ));
        }
        if !self.selection.chosen.is_empty() {
            line.push_str(&format!(
                "; newly chosen: {}",
                names(&self.selection.chosen)
            ));
        }
        line
    }
}

/// The node sets' hosts in words: `ControlPlane: active a, b; standby c; Worker: ...`.
pub fn describe_hosts(selection: &Selection) -> String {
    let mut roles: Vec<&str> = ROLES.to_vec();
    for a in selection.hosts.values() {
        if !roles.contains(&a.role.as_str()) {
            roles.push(&a.role);
        }
    }
    let mut parts = Vec::new();
    for role in roles {
        let names = |state| {
            selection
                .of(role, state)
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (active, standby) = (names(HostState::Active), names(HostState::Standby));
        if active.is_empty() && standby.is_empty() {
            continue;
        }
        let mut s = format!(
            "{role}: active {}",
            if active.is_empty() { "none" } else { &active }
        );
        if !standby.is_empty() {
            s.push_str(&format!(", standby {standby}"));
        }
        parts.push(s);
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join("; ")
    }
}

/// Candidates for one SIPCluster: every host of the world, unusable when failed or when its
/// data (for this SIPCluster's services) cannot be read.
fn candidates(world: &World, sip: &SipCluster) -> (Vec<Candidate>, BTreeMap<ObjectKey, HostData>) {
    let interfaces = sip.spec.services.node_interfaces();
    let mut data = BTreeMap::new();
    let candidates = world
        .bare_metal_hosts
        .iter()
        .map(|(key, host)| {
            let unusable = match host.failure() {
                Some(f) => Some(f),
                None => match host_data(host, &world.secrets, &interfaces) {
                    Ok(d) => {
                        data.insert(key.clone(), d);
                        None
                    }
                    Err(problem) => Some(problem),
                },
            };
            Candidate {
                key: key.clone(),
                labels: host.metadata.labels.clone(),
                unusable,
            }
        })
        .collect();
    (candidates, data)
}

/// Processes every SIPCluster of the world (see the module documentation), in name order.
/// One that cannot get its hosts may get them from one after it that let hosts go in the
/// same pass: those are processed again, until a pass lets nothing go (so that a second run
/// changes nothing). Each pass that goes on let a host go: bounded by the SIPClusters' count.
pub fn select_hosts(world: &mut World, now: OffsetDateTime) -> Vec<SipReport> {
    let keys: Vec<ObjectKey> = world.sip_clusters.keys().cloned().collect();
    let mut reports: Vec<SipReport> = keys
        .iter()
        .filter_map(|key| reconcile_one(world, key, now))
        .collect();
    let mut freed = reports.iter().any(|r| !r.selection.released.is_empty());
    for _ in 0..keys.len() {
        if !freed {
            break;
        }
        freed = false;
        for report in reports
            .iter_mut()
            .filter(|r| !r.deleted && !r.selection.shortfalls.is_empty())
        {
            let Some(mut again) = reconcile_one(world, &report.key, now) else {
                continue;
            };
            freed |= !again.selection.released.is_empty();
            // What the earlier pass did to its hosts stays said.
            for k in &report.relabelled {
                if !again.relabelled.contains(k) {
                    again.relabelled.push(k.clone());
                }
            }
            for r in &report.selection.released {
                if !again.selection.released.contains(r) {
                    again.selection.released.push(r.clone());
                }
            }
            *report = again;
        }
    }
    reports
}

/// One pass over SIPCluster `key`: its hosts selected and labelled, its condition set.
fn reconcile_one(world: &mut World, key: &ObjectKey, now: OffsetDateTime) -> Option<SipReport> {
    let key = key.clone();
    let sip = world.sip_clusters.get(&key).cloned()?;
    let (candidates, mut data) = candidates(world, &sip);
    let deleted = sip.metadata().is_being_deleted();
    let selection = if deleted {
        Selection {
            released: select::held_hosts(&key, &candidates)
                .into_iter()
                .map(|k| (k, "its SIPCluster is deleted".to_string()))
                .collect(),
            ..Selection::default()
        }
    } else {
        select(&key, &sip.spec.nodes, &candidates)
    };
    let mut relabelled = Vec::new();
    for c in &candidates {
        let labels = labels_for(&c.labels, &key, selection.hosts.get(&c.key));
        if labels != c.labels
            && let Some(host) = world.bare_metal_hosts.get_mut(&c.key)
        {
            host.metadata.labels = labels;
            relabelled.push(c.key.clone());
        }
    }
    data.retain(|k, _| selection.hosts.contains_key(k));
    if deleted {
        // It stays in the world until its services are gone
        // ([`services::record_services`] drops it then).
        return Some(SipReport {
            key,
            deleted: true,
            selection,
            hosts: data,
            relabelled,
            ready: false,
            reason: String::new(),
            message: String::new(),
        });
    }
    let held = describe_hosts(&selection);
    let (ready, reason, message) = if !selection.shortfalls.is_empty() {
        let shortfalls: Vec<String> = selection
            .shortfalls
            .iter()
            .map(ToString::to_string)
            .collect();
        (
            false,
            REASON_UNSCHEDULABLE,
            format!("unschedulable, no host labelled: {}", shortfalls.join("; ")),
        )
    } else if !sip.spec.services.is_empty() {
        // Its services' run sets the condition once they are placed and running
        // (`services::record_services`).
        (
            false,
            REASON_INFRA_SERVICE_FAILURE,
            format!(
                "hosts {held}; support services asked for: {}",
                requested_services(&sip).join(", ")
            ),
        )
    } else {
        (
            true,
            REASON_RECONCILIATION_SUCCEEDED,
            format!("hosts {held}"),
        )
    };
    // With services asked for and the hosts selected, the services' run decides
    // (`services::record_services`): setting it here too would flip it at every run.
    let services_decide = selection.shortfalls.is_empty() && !sip.spec.services.is_empty();
    if !services_decide && let Some(s) = world.sip_clusters.get_mut(&key) {
        let status = if ready {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        s.set_condition(CONDITION_READY, status, reason, &message, now);
    }
    Some(SipReport {
        key,
        deleted: false,
        selection,
        hosts: data,
        relabelled,
        ready,
        reason: reason.to_string(),
        message,
    })
}

fn requested_services(sip: &SipCluster) -> Vec<&'static str> {
    let s = &sip.spec.services;
    let mut out = Vec::new();
    if !s.load_balancer_control_plane.is_empty() {
        out.push("loadBalancerControlPlane");
    }
    if !s.load_balancer_worker.is_empty() {
        out.push("loadBalancerWorker");
    }
    if !s.jump_host.is_empty() {
        out.push("jumpHost");
    }
    if !s.oidc_provider.is_empty() {
        out.push("oidcProvider");
    }
    out
}

/// Hosts labelled for SIPClusters the world does not hold (left as they are: the manifests
/// may be split), as `(host, "namespace/name")`.
pub fn orphaned_hosts(world: &World) -> Vec<(ObjectKey, String)> {
    use oi_api::sip::{CLUSTER_NAME_LABEL, CLUSTER_NAMESPACE_LABEL};
    world
        .bare_metal_hosts
        .iter()
        .filter_map(|(key, host)| {
            let labels = &host.metadata.labels;
            let name = labels.get(CLUSTER_NAME_LABEL)?;
            let namespace = labels
                .get(CLUSTER_NAMESPACE_LABEL)
                .cloned()
                .unwrap_or_default();
            let sip = ObjectKey::new(namespace.clone(), name.clone());
            (!world.sip_clusters.contains_key(&sip))
                .then(|| (key.clone(), format!("{namespace}/{name}")))
        })
        .collect()
}

#[cfg(test)]
mod tests;

/// The jump host's inventory of what `report`'s SIPCluster holds: every held host (active
/// and standby) by name, its address on the `node_interface` network, its BMC address (the
/// system's path kept) and credentials.
pub fn jump_host_inventory(report: &SipReport, node_interface: &str) -> oi_api::JumpHostInventory {
    oi_api::JumpHostInventory {
        hosts: report
            .hosts
            .values()
            .map(|h| oi_api::InventoryHost {
                name: h.key.name.clone(),
                ip: h.addresses.get(node_interface).map(ToString::to_string),
                bmc: oi_api::InventoryBmc {
                    address: h.bmc.to_address(),
                    disable_certificate_verification: h.bmc_insecure,
                    username: h.bmc_username.clone(),
                    password: h.bmc_password.clone(),
                },
            })
            .collect(),
    }
}
