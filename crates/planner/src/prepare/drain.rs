//! Drains and lost hypervisors: the step a cluster's drain takes in a pass, and the
//! `Healed` condition.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The reason and message of a `Drained=True` condition.
pub(crate) const DRAINED_REASON: &str = "Moved";
pub(crate) const DRAINED_MESSAGE: &str = "nothing of the cluster runs on a drained hypervisor";

/// Whether a live component of cluster `key` runs on a hypervisor being drained.
pub(crate) fn on_drained_hypervisors(
    components: &BTreeMap<ObjectKey, Component>,
    hypervisors: &BTreeMap<ObjectKey, oi_api::Hypervisor>,
    key: &ObjectKey,
) -> bool {
    components
        .range(ObjectKey::new(key.namespace.clone(), String::new())..)
        .take_while(|(k, _)| k.namespace == key.namespace)
        .filter(|(_, c)| c.spec.cluster == key.name && !c.metadata.is_being_deleted())
        .filter_map(|(_, c)| c.spec.hypervisor.as_deref())
        .any(|h| {
            hypervisors
                .get(&ObjectKey::cluster_scoped(h))
                .is_some_and(|h| h.spec.drain)
        })
}

/// The step a cluster's drain takes in this pass (see [`ClusterPrep::derive`]).
#[derive(Debug)]
pub(super) enum Drain {
    /// Nothing of the cluster needs to move.
    None,
    /// `component` (on drained hypervisor `from`) waits for the cluster to be ready with
    /// every replica joined.
    Waiting { component: String, from: String },
    /// `component` gets a replacement, at `replacement` among the components: a control
    /// plane replica leaves once it has joined; an ingress leaves in the same run.
    Replacing {
        component: String,
        from: String,
        replacement: usize,
    },
    /// `component`'s replacement joined: it leaves now.
    Retiring { component: String, from: String },
    /// `component` cannot leave: its replacement found no room.
    Blocked {
        component: String,
        from: String,
        reason: String,
    },
}

impl Drain {
    /// Sets the cluster's `Drained` condition: `False` while something of it runs on a
    /// drained hypervisor (reason `Moving`, `Waiting` or `NoCapacity`), `True` once nothing
    /// does; a cluster never drained has none.
    pub(super) fn record(
        &self,
        cluster: &mut Cluster,
        components: &[Component],
        now: OffsetDateTime,
    ) {
        let shared_address = cluster.ingress_virtual_ip().is_some();
        let conditions = &mut cluster.status.conditions;
        let (status, reason, message) = match self {
            Drain::None => {
                if find_condition(conditions, condition_types::DRAINED).is_none() {
                    return;
                }
                (
                    ConditionStatus::True,
                    DRAINED_REASON,
                    DRAINED_MESSAGE.to_string(),
                )
            }
            Drain::Waiting { component, from } => (
                ConditionStatus::False,
                "Waiting",
                format!(
                    "{component} leaves drained hypervisor {from} once the cluster is ready \
                     with every replica joined"
                ),
            ),
            Drain::Replacing {
                component,
                from,
                replacement,
            } => {
                let new = &components[*replacement];
                let to = new.spec.hypervisor.as_deref().unwrap_or_default();
                let message = if new.spec.role == ComponentRole::ControlPlane {
                    format!(
                        "{component} leaves drained hypervisor {from} once its replacement {} \
                         on {to} has joined",
                        new.metadata.name
                    )
                } else if new.spec.role == ComponentRole::ApiServer {
                    format!(
                        "{component} leaves drained hypervisor {from}; {} replaces it on {to}",
                        new.metadata.name
                    )
                } else {
                    let address = if shared_address { "stays" } else { "becomes" };
                    format!(
                        "{component} leaves drained hypervisor {from}; {} replaces it on {to}, \
                         and the cluster's address {address} {}",
                        new.metadata.name, cluster.status.api_server_endpoint
                    )
                };
                (ConditionStatus::False, "Moving", message)
            }
            Drain::Retiring { component, from } => (
                ConditionStatus::False,
                "Moving",
                format!("{component} leaves drained hypervisor {from}: its replacement joined"),
            ),
            Drain::Blocked {
                component,
                from,
                reason,
            } => (
                ConditionStatus::False,
                "NoCapacity",
                format!(
                    "{component} cannot leave drained hypervisor {from} and keeps running \
                     there: {reason}"
                ),
            ),
        };
        set_condition(
            conditions,
            condition_types::DRAINED,
            status,
            reason,
            &message,
            now,
        );
    }
}

/// A component on a lost hypervisor (see [`ClusterPrep::mark_lost`]).
#[derive(Debug)]
pub(super) struct OnLost {
    pub(super) component: String,
    pub(super) hypervisor: String,
    pub(super) why: oi_api::hypervisor::Lost,
    /// Marked for deletion in this pass (live until now).
    pub(super) newly: bool,
}

/// The reason and message of a `Healed=True` condition.
pub(crate) const HEALED_REASON: &str = "Replaced";
pub(crate) const HEALED_MESSAGE: &str = "what ran on lost hypervisors is replaced";

/// Sets the cluster's `Healed` condition: `False` (`Replacing`) when components of it on
/// lost hypervisors are marked for deletion, naming them and the replacements placed; `True`
/// once nothing of it is on a lost hypervisor (the run that replaced them sets it sooner,
/// see [`crate::record`]: a component whose pods wait on an unreachable hypervisor does not
/// keep it `False`); a cluster that never lost a hypervisor has none.
pub(super) fn record_healed(
    cluster: &mut Cluster,
    on_lost: &[OnLost],
    components: &[Component],
    now: OffsetDateTime,
) {
    let conditions = &mut cluster.status.conditions;
    if !on_lost.is_empty() && !on_lost.iter().any(|l| l.newly) {
        return;
    }
    if on_lost.is_empty() {
        if find_condition(conditions, condition_types::HEALED).is_some() {
            set_condition(
                conditions,
                condition_types::HEALED,
                ConditionStatus::True,
                HEALED_REASON,
                HEALED_MESSAGE,
                now,
            );
        }
        return;
    }
    let lost: Vec<String> = on_lost
        .iter()
        .map(|l| format!("{} on {} ({})", l.component, l.hypervisor, l.why))
        .collect();
    let lost_names: BTreeSet<&str> = on_lost.iter().map(|l| l.hypervisor.as_str()).collect();
    // Live components not on a lost hypervisor that have not joined a ready run yet: the
    // replacements under way.
    let replacements: Vec<String> = components
        .iter()
        .filter(|c| !c.metadata.is_being_deleted())
        .filter(|c| !condition_is_true(&c.status.conditions, condition_types::JOINED))
        .filter_map(|c| {
            let h = c.spec.hypervisor.as_deref()?;
            (!lost_names.contains(h)).then(|| format!("{} on {h}", c.metadata.name))
        })
        .collect();
    let message = if replacements.is_empty() {
        format!("lost: {}", lost.join(", "))
    } else {
        format!(
            "lost: {}; replaced by: {}",
            lost.join(", "),
            replacements.join(", ")
        )
    };
    set_condition(
        conditions,
        condition_types::HEALED,
        ConditionStatus::False,
        "Replacing",
        &message,
        now,
    );
}
