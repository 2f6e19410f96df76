//! Host selection for one SIPCluster: which BareMetalHosts its node sets hold, pure and
//! deterministic (hosts in key order, node sets `ControlPlane` then `Worker`).
//!
//! Each run starts from the hosts already labelled for the SIPCluster and repairs before it
//! grows:
//! 1. a host that failed (its BareMetalHost in error or being deleted), whose data is
//!    unusable, that no longer matches its node set's selector or lost its topology label,
//!    or that shares a topology domain with a host kept before it, is released;
//! 2. standby hosts are promoted while active ones are missing; on a shrink, extra active
//!    hosts become standby and extra standby hosts are released (highest names first);
//! 3. the hosts still missing are chosen among the free ones matching the selector, at most
//!    one per topology domain, counting the hosts the node set keeps. All or nothing: when a
//!    node set cannot get every host it lacks, no new host is chosen for any node set, and
//!    each shortfall says how many hosts and why each candidate was passed over.
//!
//! A host is free when it carries no `sip.airshipit.org/cluster-name` label (upstream's
//! rule: one SIPCluster per host) and was not chosen for another node set in this run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use oi_api::ObjectKey;
use oi_api::sip::{
    CLUSTER_NAME_LABEL, CLUSTER_NAMESPACE_LABEL, NODE_STATE_ACTIVE, NODE_STATE_LABEL,
    NODE_STATE_STANDBY, NODE_TYPE_LABEL, NodeSet, ROLES,
};

/// What selection needs to know of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub key: ObjectKey,
    pub labels: BTreeMap<String, String>,
    /// Why the host cannot be used (failed, or its data unusable), if it cannot.
    pub unusable: Option<String>,
}

/// A node set's host state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostState {
    Active,
    Standby,
}

impl HostState {
    pub fn label(self) -> &'static str {
        match self {
            HostState::Active => NODE_STATE_ACTIVE,
            HostState::Standby => NODE_STATE_STANDBY,
        }
    }
}

/// A host of the SIPCluster: its node set role and state.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Assignment {
    pub role: String,
    pub state: HostState,
}

/// A node set that could not get all its hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub role: String,
    pub missing_active: usize,
    pub missing_standby: usize,
    pub selector: String,
    pub topology_key: String,
    /// Every host matching the selector that was not chosen, and why.
    pub passed_over: Vec<(ObjectKey, String)>,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let missing = self.missing_active + self.missing_standby;
        write!(
            f,
            "node set {} lacks {missing} host{} ({} active, {} standby) matching {}",
            self.role,
            if missing == 1 { "" } else { "s" },
            self.missing_active,
            self.missing_standby,
            self.selector,
        )?;
        if !self.topology_key.is_empty() {
            write!(f, ", one per {}", self.topology_key)?;
        }
        if self.passed_over.is_empty() {
            write!(f, "; no other host matches")
        } else {
            let reasons: Vec<String> = self
                .passed_over
                .iter()
                .map(|(k, why)| format!("{}: {why}", k.name))
                .collect();
            write!(f, "; passed over: {}", reasons.join("; "))
        }
    }
}

/// The outcome of selection for one SIPCluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Every host the SIPCluster holds after this run.
    pub hosts: BTreeMap<ObjectKey, Assignment>,
    /// Hosts it held and lets go, and why.
    pub released: Vec<(ObjectKey, String)>,
    /// Standby hosts made active.
    pub promoted: Vec<ObjectKey>,
    /// Hosts newly chosen.
    pub chosen: Vec<ObjectKey>,
    /// Node sets short of hosts (nothing new chosen when any is).
    pub shortfalls: Vec<Shortfall>,
}

impl Selection {
    /// The hosts of a role in a state, in key order.
    pub fn of(&self, role: &str, state: HostState) -> Vec<&ObjectKey> {
        self.hosts
            .iter()
            .filter(|(_, a)| a.role == role && a.state == state)
            .map(|(k, _)| k)
            .collect()
    }
}

/// Whether a host carries labels of the SIPCluster `sip`.
pub fn held_by(labels: &BTreeMap<String, String>, sip: &ObjectKey) -> bool {
    labels.get(CLUSTER_NAMESPACE_LABEL) == Some(&sip.namespace)
        && labels.get(CLUSTER_NAME_LABEL) == Some(&sip.name)
}

/// A host's labels once the SIPCluster holds it as `wanted` (or lets it go: `None`, which
/// removes our labels only if they are this SIPCluster's).
pub fn labels_for(
    labels: &BTreeMap<String, String>,
    sip: &ObjectKey,
    wanted: Option<&Assignment>,
) -> BTreeMap<String, String> {
    let mut out = labels.clone();
    match wanted {
        Some(a) => {
            out.insert(CLUSTER_NAMESPACE_LABEL.into(), sip.namespace.clone());
            out.insert(CLUSTER_NAME_LABEL.into(), sip.name.clone());
            out.insert(NODE_TYPE_LABEL.into(), a.role.clone());
            out.insert(NODE_STATE_LABEL.into(), a.state.label().into());
        }
        None if held_by(labels, sip) => {
            for l in oi_api::sip::SELECTION_LABELS {
                out.remove(l);
            }
        }
        None => {}
    }
    out
}

/// Labels as the user wrote them: ours removed, so that a selector or topology key never
/// sees what selection wrote.
fn user_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = labels.clone();
    for l in oi_api::sip::SELECTION_LABELS {
        out.remove(l);
    }
    out
}

fn count(n: i64) -> usize {
    usize::try_from(n.max(0)).unwrap_or(0)
}

/// Selects the hosts of SIPCluster `sip` with node sets `nodes` among `candidates` (every
/// host of the inventory, in any order).
pub fn select(
    sip: &ObjectKey,
    nodes: &BTreeMap<String, NodeSet>,
    candidates: &[Candidate],
) -> Selection {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut selection = Selection::default();
    let mut taken: BTreeSet<ObjectKey> = BTreeSet::new();
    let mut new_picks: BTreeMap<ObjectKey, Assignment> = BTreeMap::new();

    // Held hosts of roles no node set has any more go.
    for c in &sorted {
        if held_by(&c.labels, sip) {
            let role = c.labels.get(NODE_TYPE_LABEL).cloned().unwrap_or_default();
            if !nodes.contains_key(&role) {
                selection
                    .released
                    .push((c.key.clone(), format!("no node set {role:?} any more")));
            }
        }
    }

    let roles: Vec<&String> = ROLES
        .iter()
        .filter_map(|r| nodes.get_key_value(*r).map(|(k, _)| k))
        .chain(nodes.keys().filter(|k| !ROLES.contains(&k.as_str())))
        .collect();
    for role in roles {
        let set = &nodes[role];
        let want_active = count(set.count.active);
        let want_standby = count(set.count.standby);
        let domain = |c: &Candidate| -> Option<String> {
            if set.topology_key.is_empty() {
                Some(c.key.name.clone())
            } else {
                c.labels.get(&set.topology_key).cloned()
            }
        };

        // 1. What the node set holds, repaired.
        let mut held: Vec<(&Candidate, HostState)> = sorted
            .iter()
            .filter(|c| held_by(&c.labels, sip) && c.labels.get(NODE_TYPE_LABEL) == Some(role))
            .map(|c| {
                let state = match c.labels.get(NODE_STATE_LABEL).map(String::as_str) {
                    Some(NODE_STATE_STANDBY) => HostState::Standby,
                    _ => HostState::Active,
                };
                (*c, state)
            })
            .collect();
        // Actives claim their domains before standbys.
        held.sort_by(|a, b| (a.1, &a.0.key).cmp(&(b.1, &b.0.key)));
        let mut domains: BTreeMap<String, ObjectKey> = BTreeMap::new();
        let mut active: Vec<ObjectKey> = Vec::new();
        let mut standby: Vec<ObjectKey> = Vec::new();
        for (c, state) in held {
            let why = if let Some(problem) = &c.unusable {
                Some(problem.clone())
            } else if !set.label_selector.matches(&user_labels(&c.labels)) {
                Some(format!(
                    "no longer matches {}",
                    set.label_selector.describe()
                ))
            } else {
                match domain(c) {
                    None => Some(format!("has no label {}", set.topology_key)),
                    Some(d) => domains.get(&d).map(|other| {
                        format!(
                            "its {} {d} already holds {} of node set {role}",
                            set.topology_key, other.name
                        )
                    }),
                }
            };
            if let Some(why) = why {
                selection.released.push((c.key.clone(), why));
                continue;
            }
            if let Some(d) = domain(c) {
                domains.insert(d, c.key.clone());
            }
            taken.insert(c.key.clone());
            match state {
                HostState::Active => active.push(c.key.clone()),
                HostState::Standby => standby.push(c.key.clone()),
            }
        }

        // 2. Promotions and shrinking.
        while active.len() < want_active && !standby.is_empty() {
            let k = standby.remove(0);
            selection.promoted.push(k.clone());
            active.push(k);
        }
        active.sort();
        while active.len() > want_active {
            if let Some(k) = active.pop() {
                standby.push(k);
            }
        }
        standby.sort();
        while standby.len() > want_standby {
            if let Some(k) = standby.pop() {
                selection
                    .released
                    .push((k.clone(), format!("node set {role} shrank")));
                taken.remove(&k);
                domains.retain(|_, v| *v != k);
            }
        }
        for k in &active {
            selection.hosts.insert(
                k.clone(),
                Assignment {
                    role: role.clone(),
                    state: HostState::Active,
                },
            );
        }
        for k in &standby {
            selection.hosts.insert(
                k.clone(),
                Assignment {
                    role: role.clone(),
                    state: HostState::Standby,
                },
            );
        }

        // 3. New hosts.
        let mut need_active = want_active - active.len();
        let mut need_standby = want_standby.saturating_sub(standby.len());
        let mut passed_over: Vec<(ObjectKey, String)> = Vec::new();
        let released_now: BTreeSet<&ObjectKey> =
            selection.released.iter().map(|(k, _)| k).collect();
        for c in &sorted {
            if need_active + need_standby == 0 {
                break;
            }
            if taken.contains(&c.key) || selection.hosts.contains_key(&c.key) {
                continue;
            }
            let labels = user_labels(&c.labels);
            if !set.label_selector.matches(&labels) {
                continue;
            }
            let why = if new_picks.contains_key(&c.key) {
                Some(format!("chosen for node set {}", new_picks[&c.key].role))
            } else if released_now.contains(&c.key) {
                Some("released in this run".to_string())
            } else if let (Some(ns), Some(name)) = (
                c.labels.get(CLUSTER_NAMESPACE_LABEL),
                c.labels.get(CLUSTER_NAME_LABEL),
            ) {
                Some(format!("held by SIPCluster {ns}/{name}"))
            } else if let Some(name) = c.labels.get(CLUSTER_NAME_LABEL) {
                Some(format!("held by SIPCluster {name}"))
            } else if let Some(problem) = &c.unusable {
                Some(problem.clone())
            } else {
                match domain(c) {
                    None => Some(format!("has no label {}", set.topology_key)),
                    Some(d) => domains.get(&d).map(|other| {
                        format!(
                            "its {} {d} already holds {} of node set {role}",
                            set.topology_key, other.name
                        )
                    }),
                }
            };
            if let Some(why) = why {
                passed_over.push((c.key.clone(), why));
                continue;
            }
            if let Some(d) = domain(c) {
                domains.insert(d, c.key.clone());
            }
            let state = if need_active > 0 {
                need_active -= 1;
                HostState::Active
            } else {
                need_standby -= 1;
                HostState::Standby
            };
            new_picks.insert(
                c.key.clone(),
                Assignment {
                    role: role.clone(),
                    state,
                },
            );
        }
        if need_active + need_standby > 0 {
            // Every remaining matching host, to say why none could be used.
            selection.shortfalls.push(Shortfall {
                role: role.clone(),
                missing_active: need_active,
                missing_standby: need_standby,
                selector: set.label_selector.describe(),
                topology_key: set.topology_key.clone(),
                passed_over,
            });
        }
    }
    if selection.shortfalls.is_empty() {
        selection.chosen = new_picks.keys().cloned().collect();
        selection.hosts.extend(new_picks);
    }
    selection.released.sort();
    selection.released.dedup_by(|a, b| a.0 == b.0);
    selection
}

/// Every host a SIPCluster holds, to release on its deletion.
pub fn held_hosts(sip: &ObjectKey, candidates: &[Candidate]) -> Vec<ObjectKey> {
    let mut out: Vec<ObjectKey> = candidates
        .iter()
        .filter(|c| held_by(&c.labels, sip))
        .map(|c| c.key.clone())
        .collect();
    out.sort();
    out
}
