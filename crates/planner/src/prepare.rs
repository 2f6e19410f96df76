//! `prepare`: from the declared world to a world whose clusters are fully described:
//! PKI, components, placement, host ports and status endpoints.
//!
//! Each cluster is prepared all or nothing, in key order: a cluster that fails (invalid, no
//! hypervisor of a kind, no free port) keeps exactly its input state, ports included, and is
//! reported; the clusters after it proceed. Components are derived from
//! `controlPlaneReplicas`, named `<cluster>-control-plane-<i>` (lowest free index first) and
//! `<cluster>-ingress`. Scaling down marks replicas for deletion, those sharing a hypervisor
//! (then a zone) with another first, the highest index among equals
//! (`metadata.deletionTimestamp = now`): they keep their hypervisor and ports until the engine
//! has removed their etcd member and pod and calls [`remove_component`]. A cluster marked for
//! deletion is left as it is; the engine tears it down, then calls [`remove_cluster`].
//!
//! Components whose cluster is not in the world are left alone (a world may hold a subset of
//! the clusters), and so are the ports of clusters not in it.
//!
//! Leaf certificates are signed after every cluster is placed (see [`crate::certificates`]);
//! a CA that cannot sign (unreadable, expired) reports the cluster while its placement and
//! ports stand, and its certificates are left as they were.
//!
//! Preparing a prepared world changes nothing (idempotent), as long as `now` stays before
//! the renewal window of its certificates.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use oi_api::common::{
    ConditionStatus, condition_is_true, condition_types, find_condition, set_condition,
};
use oi_api::validation::{validate_cluster, validate_component, validate_hypervisor};
use oi_api::{
    Certificate, Cluster, Component, ComponentHostPortAllocation, ComponentRole, ComponentSpec,
    EtcdInitialClusterState, EtcdMemberBootstrap, KeyPair, ObjectKey, ObjectMeta, Resource, World,
};
use oi_pki::{CaKind, CertificateAuthority, KeyAlgorithm, KeyPairPem, join_key_algorithm};
use time::{Duration, OffsetDateTime};

use crate::certificates::{self, Job, Target};
use crate::par::parallel_map;
use crate::ports::{PortAllocator, PortOwner, names};
use crate::schedule::{Candidate, Closed, Domain, Held, Room, Spread, ZONE_LABEL, held, place};
use crate::verify::{verify_cluster, verify_component, verify_hypervisor};
use crate::{Error, Result, url_host as host};
use oi_api::versions::requests;

/// Settings of [`prepare_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Algorithm of CAs and the service-account key generated for new clusters.
    pub key_algorithm: KeyAlgorithm,
    /// Validity of generated CAs.
    pub ca_lifetime: Duration,
    /// Validity of issued leaf certificates.
    pub leaf_lifetime: Duration,
    /// Leaf certificates expiring within this are issued again.
    pub renew_before: Duration,
    /// Issue and renew leaf certificates (see [`crate::certificates`]). Off only for callers
    /// that plan placement and ports without rendering (dry runs, benchmarks).
    pub leaf_certificates: bool,
    /// A hypervisor whose `Reachable` condition has been `False` this long is lost, as one
    /// being deleted is: what runs there is replaced elsewhere (see
    /// [`oi_api::Hypervisor::lost`]). `None` (the default): only a removed hypervisor is.
    pub replace_unreachable_after: Option<Duration>,
}

impl Default for PrepareOptions {
    /// ECDSA P-256, CAs valid ten years and leaves one year (kubeadm's lifetimes), leaves
    /// renewed 30 days before they expire.
    fn default() -> Self {
        Self {
            key_algorithm: KeyAlgorithm::EcdsaP256,
            ca_lifetime: Duration::days(3650),
            leaf_lifetime: Duration::days(365),
            renew_before: Duration::days(30),
            leaf_certificates: true,
            replace_unreachable_after: None,
        }
    }
}

/// The prepared world and the clusters that could not be prepared (left as they were).
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub world: World,
    pub failures: BTreeMap<ObjectKey, Error>,
    /// The lost hypervisors, by name, and why (see [`oi_api::Hypervisor::lost`]).
    pub lost: BTreeMap<String, oi_api::hypervisor::Lost>,
}

/// The name of control plane replica `index` of `cluster`.
pub fn control_plane_name(cluster: &str, index: u32) -> String {
    format!("{cluster}-control-plane-{index}")
}

/// The name of the ingress of `cluster`.
pub fn ingress_name(cluster: &str) -> String {
    format!("{cluster}-ingress")
}

/// The name of API server `index` of `cluster`, beyond its replicas' (`spec.apiServerReplicas`).
pub fn api_server_name(cluster: &str, index: u32) -> String {
    format!("{cluster}-apiserver-{index}")
}

/// The index in a component name `<cluster><infix><index>`, `None` for other names.
fn name_index(cluster: &str, infix: &str, component: &str) -> Option<u32> {
    component
        .strip_prefix(cluster)?
        .strip_prefix(infix)?
        .parse()
        .ok()
}

/// The order of components named `<cluster><infix><index>`: by index, then names of other
/// forms, by name.
fn name_order(cluster: &str, infix: &str, component: &str) -> ((u8, u32), String) {
    (
        name_index(cluster, infix, component).map_or((1, 0), |x| (0, x)),
        component.to_string(),
    )
}

/// The order of a cluster's control plane replicas (see [`name_order`]).
pub(crate) fn replica_order(cluster: &str, component: &str) -> ((u8, u32), String) {
    name_order(cluster, "-control-plane-", component)
}

/// The order of a cluster's API servers alone (see [`name_order`]).
fn api_server_order(cluster: &str, component: &str) -> ((u8, u32), String) {
    name_order(cluster, "-apiserver-", component)
}

/// The positions of the live control plane replicas in `components`, in replica order.
fn live_replicas(cluster: &str, components: &[Component]) -> Vec<usize> {
    let mut replicas: Vec<usize> = (0..components.len())
        .filter(|&i| {
            let c = &components[i];
            c.spec.role == ComponentRole::ControlPlane && !c.metadata.is_being_deleted()
        })
        .collect();
    replicas.sort_by_key(|&i| replica_order(cluster, &components[i].metadata.name));
    replicas
}

/// Host ports a component needs, by name, sorted.
pub fn required_ports(role: ComponentRole, vpn_enabled: bool) -> &'static [&'static str] {
    match (role, vpn_enabled) {
        (ComponentRole::ControlPlane, _) => {
            &[names::APISERVER, names::ETCD_CLIENT, names::ETCD_PEER]
        }
        (ComponentRole::ControlPlaneIngress, false) | (ComponentRole::ApiServer, _) => {
            &[names::APISERVER]
        }
        (ComponentRole::ControlPlaneIngress, true) => {
            &[names::APISERVER, names::VPN_PROXY, names::WIREGUARD]
        }
    }
}

/// [`prepare_with`] with the default [`PrepareOptions`].
pub fn prepare(world: World, now: OffsetDateTime) -> Prepared {
    prepare_with(world, now, &PrepareOptions::default())
}

/// One hypervisor, as preparation sees it.
struct HypervisorState {
    name: String,
    public: bool,
    valid: bool,
    zone: Option<String>,
    ip: String,
    ports: PortAllocator,
    /// What it holds: components, and SIPClusters' services ([`held`]).
    held: Held,
    capacity: Option<oi_api::HypervisorCapacity>,
    cordoned: bool,
    /// Drained: cordoned, and what runs there moves elsewhere.
    draining: bool,
    /// Lost for good: cordoned, and what runs there is replaced elsewhere without it.
    lost: Option<oi_api::hypervisor::Lost>,
}

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
enum Drain {
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
    fn record(&self, cluster: &mut Cluster, components: &[Component], now: OffsetDateTime) {
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
struct OnLost {
    component: String,
    hypervisor: String,
    why: oi_api::hypervisor::Lost,
    /// Marked for deletion in this pass (live until now).
    newly: bool,
}

/// The reason and message of a `Healed=True` condition.
pub(crate) const HEALED_REASON: &str = "Replaced";
pub(crate) const HEALED_MESSAGE: &str = "what ran on lost hypervisors is replaced";

/// Sets the cluster's `Healed` condition: `False` (`Replacing`) when components of it on
/// lost hypervisors are marked for deletion, naming them and the replacements placed; `True`
/// once nothing of it is on a lost hypervisor (the run that replaced them sets it sooner,
/// see [`crate::record`]: a component whose pods wait on an unreachable hypervisor does not
/// keep it `False`); a cluster that never lost a hypervisor has none.
fn record_healed(
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

/// Defaults the world, then prepares every cluster not marked for deletion; see the module
/// documentation. Never fails as a whole: per cluster failures are in [`Prepared::failures`].
pub fn prepare_with(mut world: World, now: OffsetDateTime, options: &PrepareOptions) -> Prepared {
    world.apply_defaults();
    let mut holdings = held(&world);
    let mut hvs: Vec<HypervisorState> = world
        .hypervisors
        .values()
        .map(|h| {
            let lost = h.lost(now, options.replace_unreachable_after);
            HypervisorState {
                name: h.metadata.name.clone(),
                public: h.spec.public,
                valid: validate_hypervisor(h).is_empty() && verify_hypervisor(h).is_empty(),
                zone: h.metadata.labels.get(ZONE_LABEL).cloned(),
                ip: h.spec.ip_address.clone(),
                ports: PortAllocator::from_hypervisor(h),
                held: holdings.remove(&h.metadata.name).unwrap_or_default(),
                capacity: h.spec.capacity.clone(),
                cordoned: Closed::of(h, lost.is_some()).is_some(),
                draining: h.spec.drain,
                lost,
            }
        })
        .collect();
    let index: HashMap<String, usize> = hvs
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name.clone(), i))
        .collect();
    let mut by_cluster: BTreeMap<ObjectKey, Vec<ObjectKey>> = BTreeMap::new();
    for (key, c) in &world.components {
        by_cluster
            .entry(ObjectKey::new(
                key.namespace.clone(),
                c.spec.cluster.clone(),
            ))
            .or_default()
            .push(key.clone());
    }

    // Hypervisors holding ports of each cluster, so that releasing stale ports does not
    // visit every hypervisor for every cluster.
    let mut holders: HashMap<ObjectKey, BTreeSet<usize>> = HashMap::new();
    for (i, h) in hvs.iter().enumerate() {
        for (o, _) in h.ports.owners() {
            let k = ObjectKey::new(o.cluster_namespace.clone(), o.cluster.clone());
            holders.entry(k).or_default().insert(i);
        }
    }

    let mut failures = BTreeMap::new();
    let mut pending: Vec<(ObjectKey, Vec<Job>)> = Vec::new();
    let live: Vec<(&ObjectKey, &Cluster)> = world
        .clusters
        .iter()
        .filter(|(_, c)| !c.is_being_deleted())
        .collect();
    // Validation and verification of each cluster and its components, and the PKI it lacks:
    // independent per cluster, so on every core.
    let ready: Vec<(ObjectKey, Result<Cluster>)> = parallel_map(&live, |(key, cluster)| {
        let components: Vec<&Component> = by_cluster
            .get(*key)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| world.components.get(k))
                    .collect()
            })
            .unwrap_or_default();
        (
            (*key).clone(),
            validate_and_init_pki(key, cluster, now, options)
                .and_then(|cluster| validate_components(&cluster, &components).map(|()| cluster)),
        )
    });
    let shared = SharedAddresses::of(&world);
    for (key, cluster) in ready {
        let cluster = match cluster.and_then(|c| shared.check(&key, &c).map(|()| c)) {
            Ok(c) => c,
            Err(e) => {
                failures.insert(key, e);
                continue;
            }
        };
        let components: Vec<&Component> = by_cluster
            .get(&key)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| world.components.get(k))
                    .collect()
            })
            .unwrap_or_default();
        let mut cx = ClusterPrep {
            key: &key,
            now,
            hvs: &mut hvs,
            index: &index,
            all_components: &world.components,
            holders: holders.remove(&key).unwrap_or_default(),
            touched: BTreeSet::new(),
        };
        let result = cx.run(cluster, &components);
        let touched = std::mem::take(&mut cx.touched);
        match result {
            Ok((cluster, components, jobs)) => {
                if options.leaf_certificates && !jobs.is_empty() {
                    pending.push((key.clone(), jobs));
                }
                for i in touched {
                    hvs[i].ports.commit();
                }
                for c in components {
                    let old_hv = world
                        .components
                        .get(&c.key())
                        .and_then(|o| o.spec.hypervisor.clone());
                    if old_hv.is_none()
                        && let Some(&i) = c.spec.hypervisor.as_ref().and_then(|h| index.get(h))
                    {
                        hvs[i]
                            .held
                            .add(requests(c.spec.role, cluster_vpn(&cluster)));
                    }
                    world.components.insert(c.key(), c);
                }
                world.clusters.insert(key.clone(), cluster);
            }
            Err(e) => {
                for i in touched {
                    hvs[i].ports.rollback();
                }
                failures.insert(key.clone(), e);
            }
        }
    }
    for h in world.hypervisors.values_mut() {
        if let Some(&i) = index.get(&h.metadata.name) {
            hvs[i].ports.write_status(&mut h.status);
        }
    }
    // Signing, for every cluster at once. A failure here (a CA that does not load) leaves
    // the cluster prepared but without the certificates, and reported.
    let issued = parallel_map(&pending, |(key, jobs)| {
        certificates::issue(&world, key, jobs, now, options)
    });
    for ((key, jobs), result) in pending.into_iter().zip(issued) {
        match result {
            Ok(certs) => {
                for (job, cert) in jobs.into_iter().zip(certs) {
                    let Some(cert) = cert else {
                        continue;
                    };
                    let slot = match &job.target {
                        Target::Server(k) => world
                            .components
                            .get_mut(k)
                            .map(|c| &mut c.status.server_certificates),
                        Target::Client(k) => world
                            .components
                            .get_mut(k)
                            .map(|c| &mut c.status.client_certificates),
                        Target::Cluster => world
                            .clusters
                            .get_mut(&key)
                            .map(|c| &mut c.status.client_certificates),
                    };
                    if let Some(map) = slot {
                        map.insert(job.name.to_string(), cert);
                    }
                }
            }
            Err(e) => {
                failures.insert(key, e);
            }
        }
    }
    let lost = hvs
        .into_iter()
        .filter_map(|h| Some((h.name, h.lost?)))
        .collect();
    Prepared {
        world,
        failures,
        lost,
    }
}

/// The ingresses' shared addresses and VRRP router IDs of a world's live clusters, and its
/// hypervisors' addresses: each shared address and router ID belongs to one cluster.
/// `oi-manager` plans each cluster in a world of its own: it builds this from every Cluster
/// and Hypervisor it stores ([`SharedAddresses::new`]) and checks each cluster against it.
#[derive(Debug, Clone, Default)]
pub struct SharedAddresses {
    addresses: BTreeMap<std::net::Ipv4Addr, Vec<ObjectKey>>,
    router_ids: BTreeMap<u8, Vec<ObjectKey>>,
    hypervisors: BTreeMap<String, String>,
}

impl SharedAddresses {
    fn of(world: &World) -> Self {
        Self::new(
            world
                .clusters
                .iter()
                .filter(|(_, c)| !c.is_being_deleted())
                .filter_map(|(k, c)| Some((k.clone(), c.spec.ingress.clone()?))),
            world
                .hypervisors
                .values()
                .map(|h| (h.metadata.name.clone(), h.spec.ip_address.clone())),
        )
    }

    /// From the live clusters' ingress settings and the hypervisors' `(name, address)`.
    pub fn new(
        clusters: impl IntoIterator<Item = (ObjectKey, oi_api::ClusterIngress)>,
        hypervisors: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        let mut this = SharedAddresses {
            addresses: BTreeMap::new(),
            router_ids: BTreeMap::new(),
            hypervisors: hypervisors.into_iter().map(|(n, ip)| (ip, n)).collect(),
        };
        for (key, ingress) in clusters {
            if let Some(ip) = ingress.virtual_ip() {
                this.addresses.entry(ip).or_default().push(key.clone());
                if let Some(id) = ingress.router_id() {
                    this.router_ids.entry(id).or_default().push(key);
                }
            }
        }
        this
    }

    /// An error naming the other holder of the cluster's shared address or router ID: the
    /// first cluster by key keeps it, the others are refused.
    ///
    /// # Errors
    /// [`Error::IngressAddressTaken`] naming the field, its value and the other holder.
    pub fn check(&self, key: &ObjectKey, cluster: &Cluster) -> Result<()> {
        let Some(ingress) = &cluster.spec.ingress else {
            return Ok(());
        };
        let Some(ip) = ingress.virtual_ip() else {
            return Ok(());
        };
        let taken = |field: &'static str, value: String, other: String, why: &'static str| {
            Err(Error::IngressAddressTaken {
                cluster: key.clone(),
                what: format!("spec.ingress.{field} {value} is also {other}{why}"),
            })
        };
        if let Some(h) = self.hypervisors.get(&ip.to_string()) {
            return taken(
                "virtualIP",
                ip.to_string(),
                format!("the address of hypervisor {h}"),
                "",
            );
        }
        let other = |holders: Option<&Vec<ObjectKey>>| {
            holders
                .into_iter()
                .flatten()
                .find(|k| *k < key)
                .map(|k| format!("cluster {k}'s"))
        };
        if let Some(o) = other(self.addresses.get(&ip)) {
            return taken("virtualIP", ip.to_string(), o, "");
        }
        if let Some(id) = ingress.router_id()
            && let Some(o) = other(self.router_ids.get(&id))
        {
            return taken(
                "virtualRouterID",
                id.to_string(),
                o,
                " (the last byte of virtualIP when absent): set spec.ingress.virtualRouterID to one of its own",
            );
        }
        Ok(())
    }
}

struct ClusterPrep<'w> {
    key: &'w ObjectKey,
    now: OffsetDateTime,
    hvs: &'w mut Vec<HypervisorState>,
    index: &'w HashMap<String, usize>,
    all_components: &'w BTreeMap<ObjectKey, Component>,
    /// Hypervisors that held ports of the cluster before this pass.
    holders: BTreeSet<usize>,
    touched: BTreeSet<usize>,
}

impl ClusterPrep<'_> {
    /// Prepares a cluster already validated, holding its PKI, whose components are valid (see
    /// [`validate_and_init_pki`], [`validate_components`]).
    fn run(
        &mut self,
        cluster: Cluster,
        existing: &[&Component],
    ) -> Result<(Cluster, Vec<Component>, Vec<Job>)> {
        let mut cluster = cluster;
        let vpn = cluster.spec.vpn.enabled;
        let mut components: Vec<Component> = existing.iter().map(|c| (*c).clone()).collect();
        components.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let planned_before: BTreeSet<String> = components
            .iter()
            .filter(|c| c.status.host_port(names::ETCD_PEER).is_some())
            .map(|c| c.metadata.name.clone())
            .collect();
        let lost = self.mark_lost(&mut components);
        let mut drain = self.derive(&cluster, &mut components);
        match self.schedule(&mut components, vpn) {
            Err(e @ Error::NoCapacity { .. }) if matches!(drain, Drain::Replacing { .. }) => {
                drain = Self::unreplace(&mut components, drain, e.to_string());
                self.schedule(&mut components, vpn)?;
            }
            r => r?,
        }
        self.ingresses_apart(&cluster, &components)?;
        self.allocate(&mut components, vpn)?;
        self.bootstrap_etcd(&mut components, &planned_before);
        self.set_status(&mut cluster, &components);
        drain.record(&mut cluster, &components, self.now);
        record_healed(&mut cluster, &lost, &components, self.now);
        let hvs: &[HypervisorState] = self.hvs;
        let jobs = certificates::plan(self.key, &cluster, &components, |name| {
            self.index.get(name).map(|&i| hvs[i].ip.as_str())
        })?;
        Ok((cluster, components, jobs))
    }

    /// Marks every live component on a lost hypervisor for deletion: [`Self::derive`] then
    /// gives the cluster replacements elsewhere, and the engine removes the etcd member of a
    /// replica there (while the members left keep a quorum) without waiting for the
    /// hypervisor. Returns every component still on a lost hypervisor, live until now or
    /// retiring already.
    fn mark_lost(&self, components: &mut [Component]) -> Vec<OnLost> {
        let mut on_lost = Vec::new();
        for c in components.iter_mut() {
            let Some(h) = c.spec.hypervisor.as_ref() else {
                continue;
            };
            let Some(why) = self.index.get(h).and_then(|&i| self.hvs[i].lost.clone()) else {
                continue;
            };
            let newly = !c.metadata.is_being_deleted();
            if newly {
                c.metadata.deletion_timestamp = Some(self.now);
            }
            on_lost.push(OnLost {
                component: c.metadata.name.clone(),
                hypervisor: h.clone(),
                why,
                newly,
            });
        }
        on_lost
    }

    /// Whether `c` is placed on a hypervisor being drained.
    fn on_drained(&self, c: &Component) -> Option<String> {
        let h = c.spec.hypervisor.as_ref()?;
        let &i = self.index.get(h)?;
        self.hvs[i].draining.then(|| h.clone())
    }

    /// Which `count` of the replicas `staying` (indexes into `components`, in replica order)
    /// go when scaling down: one at a time, the replica sharing its hypervisor with the most
    /// others of them, then its zone, the highest in replica order among equals.
    fn surplus(&self, components: &[Component], staying: &[usize], count: usize) -> Vec<usize> {
        let domain = |i: usize| {
            let h = components[i].spec.hypervisor.as_deref().unwrap_or_default();
            let zone = self.index.get(h).and_then(|&x| self.hvs[x].zone.as_deref());
            (h, crate::schedule::Domain::of(h, zone))
        };
        let mut left: Vec<usize> = staying.to_vec();
        let mut victims = Vec::new();
        for _ in 0..count {
            let crowding = |i: usize| {
                let (h, d) = domain(i);
                let same_hypervisor = left.iter().filter(|&&j| domain(j).0 == h).count();
                let same_domain = left.iter().filter(|&&j| domain(j).1 == d).count();
                (same_hypervisor, same_domain)
            };
            // The last of the most crowded (`left` is in replica order; `max_by_key` gives
            // the last of equal maxima).
            let Some(pos) = (0..left.len()).max_by_key(|&p| crowding(left[p])) else {
                break;
            };
            victims.push(left.remove(pos));
        }
        victims
    }

    /// Creates missing replicas and the ingress; marks surplus ones for deletion; takes the
    /// next step of moving what runs on a drained hypervisor (see [`Drain`]).
    fn derive(&self, cluster: &Cluster, components: &mut Vec<Component>) -> Drain {
        let name = &self.key.name;
        let ns = &self.key.namespace;
        let live = |c: &Component, role| c.spec.role == role && !c.metadata.is_being_deleted();
        let taken = |components: &[Component], candidate: &str| {
            self.all_components
                .contains_key(&ObjectKey::new(ns.clone(), candidate.to_string()))
                || components.iter().any(|c| c.metadata.name == candidate)
        };
        let joined =
            |c: &Component| condition_is_true(&c.status.conditions, condition_types::JOINED);
        let cluster_ready = condition_is_true(
            &cluster.status.conditions,
            condition_types::RECONCILE_SUCCEEDED,
        );
        let mut drain = Drain::None;

        // Control plane: in replica order. Surplus replicas go, those on a drained
        // hypervisor first, then those sharing a hypervisor (then a zone) with another
        // replica, the highest first (the replicas left stay as spread as they can be). One
        // on a drained hypervisor only goes once the cluster was ready with every replica
        // that stays joined (its replacement among them): within a run the engine retires
        // before it joins.
        let replicas = live_replicas(name, components);
        let desired = cluster.control_plane_replicas() as usize;
        let (leaving, staying): (Vec<usize>, Vec<usize>) = replicas
            .iter()
            .partition(|&&i| self.on_drained(&components[i]).is_some());
        let excess = replicas.len().saturating_sub(desired);
        let leaving_victims: Vec<usize> = leaving.iter().rev().take(excess).copied().collect();
        let staying_victims = self.surplus(components, &staying, excess - leaving_victims.len());
        for &i in &staying_victims {
            components[i].metadata.deletion_timestamp = Some(self.now);
        }
        let settled = |components: &[Component], but: &[usize]| {
            cluster_ready
                && replicas
                    .iter()
                    .filter(|i| !but.contains(i) && !staying_victims.contains(i))
                    .all(|&i| joined(&components[i]))
        };
        if !leaving_victims.is_empty() {
            let i = leaving_victims[0];
            let from = self.on_drained(&components[i]).unwrap_or_default();
            if settled(components, &leaving_victims) {
                for &i in &leaving_victims {
                    components[i].metadata.deletion_timestamp = Some(self.now);
                }
                drain = Drain::Retiring {
                    component: components[i].metadata.name.clone(),
                    from,
                };
            } else {
                drain = Drain::Waiting {
                    component: components[i].metadata.name.clone(),
                    from,
                };
            }
        }
        let mut next = 0u32;
        for _ in replicas.len()..desired {
            while taken(components, &control_plane_name(name, next)) {
                next += 1;
            }
            components.push(
                self.new_component(control_plane_name(name, next), ComponentRole::ControlPlane),
            );
        }
        // Every replica in place and none going: the first one on a drained hypervisor gets
        // a replacement, once the cluster is ready with all of them joined.
        if excess == 0 && replicas.len() == desired && !leaving.is_empty() {
            let i = leaving[0];
            let component = components[i].metadata.name.clone();
            let from = self.on_drained(&components[i]).unwrap_or_default();
            drain = if settled(components, &[]) {
                while taken(components, &control_plane_name(name, next)) {
                    next += 1;
                }
                components.push(
                    self.new_component(control_plane_name(name, next), ComponentRole::ControlPlane),
                );
                Drain::Replacing {
                    component,
                    from,
                    replacement: components.len() - 1,
                }
            } else {
                Drain::Waiting { component, from }
            };
        }

        if matches!(drain, Drain::None)
            && let Some(&i) = leaving.first()
        {
            drain = Drain::Waiting {
                component: components[i].metadata.name.clone(),
                from: self.on_drained(&components[i]).unwrap_or_default(),
            };
        }

        // API servers alone (`spec.apiServerReplicas`): in their order, the highest go first.
        // Stateless behind the ingress, one on a drained hypervisor goes in the run its
        // replacement starts elsewhere, once the replicas have nothing left to move.
        let mut api_servers: Vec<usize> = (0..components.len())
            .filter(|&i| live(&components[i], ComponentRole::ApiServer))
            .collect();
        api_servers.sort_by_key(|&i| api_server_order(name, &components[i].metadata.name));
        let wanted = cluster.extra_api_servers() as usize;
        for &i in api_servers.iter().skip(wanted) {
            components[i].metadata.deletion_timestamp = Some(self.now);
        }
        api_servers.truncate(wanted);
        let mut next = 0u32;
        let mut new_api_server = |components: &mut Vec<Component>| {
            while taken(components, &api_server_name(name, next)) {
                next += 1;
            }
            components
                .push(self.new_component(api_server_name(name, next), ComponentRole::ApiServer));
            components.len() - 1
        };
        for _ in api_servers.len()..wanted {
            new_api_server(components);
        }
        if matches!(drain, Drain::None) {
            drain = self.replace_drained(components, &api_servers, true, new_api_server);
        }

        // Ingresses: `spec.ingress.replicas` live, placed ones kept over unplaced ones, then
        // by name.
        let mut ingresses: Vec<usize> = (0..components.len())
            .filter(|&i| live(&components[i], ComponentRole::ControlPlaneIngress))
            .collect();
        ingresses.sort_by_key(|&i| {
            (
                components[i].spec.hypervisor.is_none(),
                components[i].metadata.name.clone(),
            )
        });
        let wanted = cluster.ingress_replicas() as usize;
        for &i in ingresses.iter().skip(wanted) {
            components[i].metadata.deletion_timestamp = Some(self.now);
        }
        ingresses.truncate(wanted);
        let new_ingress = |components: &mut Vec<Component>| {
            let mut candidate = ingress_name(name);
            let mut n = 1;
            while taken(components, &candidate) {
                candidate = format!("{}-{n}", ingress_name(name));
                n += 1;
            }
            components.push(self.new_component(candidate, ComponentRole::ControlPlaneIngress));
            components.len() - 1
        };
        for _ in ingresses.len()..wanted {
            new_ingress(components);
        }
        // An ingress on a drained hypervisor moves once the control plane has nothing left
        // there: it goes and its replacement starts elsewhere in the same run. Without a
        // virtual address the cluster's address changes with it.
        if matches!(drain, Drain::None) {
            drain = self.replace_drained(components, &ingresses, cluster_ready, new_ingress);
        }
        drain
    }

    /// The first of `group` on a drained hypervisor goes in this run and a replacement
    /// (`new` pushes it) starts elsewhere; with `ready` false it waits instead. What the
    /// drain does, or [`Drain::None`] when none of `group` is on a drained hypervisor.
    fn replace_drained(
        &self,
        components: &mut Vec<Component>,
        group: &[usize],
        ready: bool,
        new: impl FnOnce(&mut Vec<Component>) -> usize,
    ) -> Drain {
        let Some((i, from)) = group
            .iter()
            .find_map(|&i| Some((i, self.on_drained(&components[i])?)))
        else {
            return Drain::None;
        };
        let component = components[i].metadata.name.clone();
        if !ready {
            return Drain::Waiting { component, from };
        }
        components[i].metadata.deletion_timestamp = Some(self.now);
        Drain::Replacing {
            component,
            from,
            replacement: new(components),
        }
    }

    /// Takes back a replacement that found no room: the component it was to replace stays
    /// (live again, if it was marked), and the drain is blocked for the reason given.
    fn unreplace(components: &mut Vec<Component>, drain: Drain, reason: String) -> Drain {
        let Drain::Replacing {
            component,
            from,
            replacement,
        } = drain
        else {
            return drain;
        };
        components.remove(replacement);
        if let Some(c) = components.iter_mut().find(|c| c.metadata.name == component) {
            c.metadata.deletion_timestamp = None;
        }
        Drain::Blocked {
            component,
            from,
            reason,
        }
    }

    fn new_component(&self, name: String, role: ComponentRole) -> Component {
        let mut meta = ObjectMeta::named(name);
        if self.key.namespace != oi_api::DEFAULT_NAMESPACE {
            meta.namespace = Some(self.key.namespace.clone());
        }
        Component::new(
            meta,
            ComponentSpec {
                cluster: self.key.name.clone(),
                role,
                hypervisor: None,
            },
        )
    }

    fn hv(&self, component: &Component, hypervisor: &str) -> Result<usize> {
        self.index
            .get(hypervisor)
            .copied()
            .ok_or_else(|| Error::UnknownHypervisor {
                cluster: self.key.clone(),
                component: component.key(),
                hypervisor: hypervisor.to_string(),
            })
    }

    /// Places live unplaced components; placed ones stay.
    fn schedule(&mut self, components: &mut [Component], vpn: bool) -> Result<()> {
        for role in [
            ComponentRole::ControlPlane,
            ComponentRole::ApiServer,
            ComponentRole::ControlPlaneIngress,
        ] {
            let public = role == ComponentRole::ControlPlaneIngress;
            let pending: Vec<usize> = (0..components.len())
                .filter(|&i| {
                    let c = &components[i];
                    c.spec.role == role
                        && !c.metadata.is_being_deleted()
                        && c.spec.hypervisor.is_none()
                })
                .collect();
            if pending.is_empty() {
                continue;
            }
            let chosen: Vec<String> = {
                let hvs: &[HypervisorState] = self.hvs;
                let mut spread = Spread::default();
                // API servers alone spread over the replicas' hypervisors too: all of them
                // serve the cluster's API.
                let spread_with = |other: ComponentRole| {
                    other == role || (role == ComponentRole::ApiServer && other.serves_api())
                };
                for c in components.iter() {
                    if !spread_with(c.spec.role) || c.metadata.is_being_deleted() {
                        continue;
                    }
                    if let Some(&i) = c.spec.hypervisor.as_ref().and_then(|h| self.index.get(h)) {
                        spread.add(&hvs[i].name, domain(&hvs[i]));
                    }
                }
                let mut candidates: Vec<Candidate<'_>> = hvs
                    .iter()
                    .filter(|h| h.public == public && h.valid)
                    .map(|h| Candidate {
                        name: &h.name,
                        domain: domain(h),
                        load: h.held.load,
                        free_ports: h.ports.free_ports(),
                        room: Room::of(h.capacity.as_ref(), h.held.load, h.held.used),
                        cordoned: h.cordoned,
                    })
                    .collect();
                if candidates.is_empty() {
                    return Err(if public {
                        Error::NoPublicHypervisor {
                            cluster: self.key.clone(),
                        }
                    } else {
                        Error::NoPrivateHypervisor {
                            cluster: self.key.clone(),
                        }
                    });
                }
                let ports_needed = required_ports(role, vpn).len();
                let need = requests(role, vpn);
                let chosen = place(
                    &mut candidates,
                    &mut spread,
                    pending.len(),
                    ports_needed,
                    need,
                );
                if chosen.len() < pending.len() {
                    // Each candidate's shortage, after the replicas that did fit.
                    let hypervisors = candidates
                        .iter()
                        .map(|c| {
                            let mut why = Vec::new();
                            let state = self.index.get(c.name).map(|&i| &hvs[i]);
                            if let Some(lost) = state.and_then(|h| h.lost.as_ref()) {
                                why.push(format!("lost ({lost})"));
                            } else if state.is_some_and(|h| h.draining) {
                                why.push("drained".to_string());
                            } else if c.cordoned {
                                why.push("cordoned".to_string());
                            }
                            if c.free_ports < ports_needed {
                                why.push(format!(
                                    "{} free ports, {ports_needed} needed",
                                    c.free_ports
                                ));
                            }
                            if let Some(s) = c.room.shortage(need) {
                                why.push(s);
                            }
                            format!("{}: {}", c.name, why.join(", "))
                        })
                        .collect::<Vec<_>>()
                        .join("; ");
                    return Err(Error::NoCapacity {
                        cluster: self.key.clone(),
                        role,
                        missing: pending.len() - chosen.len(),
                        hypervisors,
                    });
                }
                chosen.into_iter().map(str::to_string).collect()
            };
            for (i, hv) in pending.into_iter().zip(chosen) {
                components[i].spec.hypervisor = Some(hv);
            }
        }
        Ok(())
    }

    /// Several ingresses each on a public hypervisor of its own: losing one hypervisor must
    /// leave the others to take the shared address.
    fn ingresses_apart(&self, cluster: &Cluster, components: &[Component]) -> Result<()> {
        let placed: Vec<&str> = components
            .iter()
            .filter(|c| {
                c.spec.role == ComponentRole::ControlPlaneIngress && !c.metadata.is_being_deleted()
            })
            .filter_map(|c| c.spec.hypervisor.as_deref())
            .collect();
        let distinct: BTreeSet<&str> = placed.iter().copied().collect();
        if distinct.len() == placed.len() {
            return Ok(());
        }
        Err(Error::IngressesNotApart {
            cluster: self.key.clone(),
            replicas: cluster.ingress_replicas() as usize,
            available: self
                .hvs
                .iter()
                .filter(|h| h.public && h.valid && !h.cordoned)
                .count(),
        })
    }

    /// Gives a cluster's live ingresses, when it has several, the same port for each purpose
    /// on their hypervisors (the address they share, moved between them, keeps its ports):
    /// one some of them hold already if the others can take it, else the lowest free on all.
    fn align_ingress_ports(&mut self, components: &[Component], vpn: bool) -> Result<()> {
        let ns = self.key.namespace.as_str();
        let cluster = self.key.name.as_str();
        let mut group: Vec<(PortOwner, usize, Option<u16>)> = Vec::new();
        let mut members: Vec<(&Component, usize)> = Vec::new();
        for c in components {
            if c.spec.role != ComponentRole::ControlPlaneIngress || c.metadata.is_being_deleted() {
                continue;
            }
            if let Some(h) = &c.spec.hypervisor {
                members.push((c, self.hv(c, h)?));
            }
        }
        if members.len() < 2 {
            return Ok(());
        }
        for &port_name in required_ports(ComponentRole::ControlPlaneIngress, vpn) {
            group.clear();
            for &(c, i) in &members {
                let owner = PortOwner::new(ns, cluster, &c.metadata.name, port_name);
                let held = self.hvs[i]
                    .ports
                    .port_of(&owner)
                    .or_else(|| c.status.host_port(port_name));
                group.push((owner, i, held));
            }
            let usable = |hvs: &[HypervisorState], port: u16| {
                group.iter().all(|(owner, i, _)| {
                    let ports = &hvs[*i].ports;
                    ports.port_of(owner) == Some(port) || ports.is_free(port)
                })
            };
            let held: Vec<u16> = group.iter().filter_map(|(_, _, p)| *p).collect();
            let mut chosen = held.iter().copied().find(|&p| usable(self.hvs, p));
            if chosen.is_none() {
                // The ranges' overlap (none when a range is not valid).
                let (low, high) = group.iter().fold((0u32, u32::MAX), |(lo, hi), (_, i, _)| {
                    match self.hvs[*i].ports.range() {
                        Some((l, h)) => (lo.max(l), hi.min(h)),
                        None => (1, 0),
                    }
                });
                chosen = (low..=high.min(u32::from(u16::MAX)))
                    .filter_map(|p| u16::try_from(p).ok())
                    .find(|&p| usable(self.hvs, p));
            }
            let Some(port) = chosen else {
                return Err(Error::NoCommonIngressPort {
                    cluster: self.key.clone(),
                    port: port_name.to_string(),
                    hypervisors: members
                        .iter()
                        .map(|(_, i)| self.hvs[*i].name.clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            for (owner, i, _) in &group {
                let ports = &mut self.hvs[*i].ports;
                if ports.port_of(owner) == Some(port) {
                    continue;
                }
                self.touched.insert(*i);
                self.holders.insert(*i);
                ports.release(owner);
                ports.claim(owner, port);
            }
        }
        Ok(())
    }

    /// Gives every live component exactly the ports it needs, and releases the cluster's
    /// other ports, except those of components marked for deletion.
    fn allocate(&mut self, components: &mut [Component], vpn: bool) -> Result<()> {
        self.align_ingress_ports(components, vpn)?;
        let ns = self.key.namespace.as_str();
        let cluster = self.key.name.as_str();
        let mut keep: BTreeSet<PortOwner> = BTreeSet::new();
        for c in components.iter_mut() {
            let Some(hypervisor) = c.spec.hypervisor.clone() else {
                continue;
            };
            if c.metadata.is_being_deleted() {
                for p in &c.status.allocated_host_ports {
                    keep.insert(PortOwner::new(ns, cluster, &c.metadata.name, &p.name));
                }
                continue;
            }
            let i = self.hv(c, &hypervisor)?;
            self.holders.insert(i);
            let mut ports = Vec::new();
            for &port_name in required_ports(c.spec.role, vpn) {
                let owner = PortOwner::new(ns, cluster, &c.metadata.name, port_name);
                let alloc = &mut self.hvs[i].ports;
                let port = match alloc.port_of(&owner) {
                    Some(p) => p,
                    None => {
                        self.touched.insert(i);
                        match c.status.host_port(port_name) {
                            Some(p) if alloc.claim(&owner, p) => p,
                            _ => alloc.allocate(&owner)?,
                        }
                    }
                };
                ports.push(ComponentHostPortAllocation {
                    name: port_name.to_string(),
                    port,
                });
                keep.insert(owner);
            }
            c.status.allocated_host_ports = ports;
        }
        for &i in &self.holders {
            let stale: Vec<PortOwner> = self.hvs[i]
                .ports
                .cluster_owners(ns, cluster)
                .into_iter()
                .map(|(o, _)| o)
                .filter(|o| !keep.contains(o))
                .collect();
            for owner in stale {
                self.touched.insert(i);
                self.hvs[i].ports.release(&owner);
            }
        }
        Ok(())
    }

    /// Gives every live control plane replica without one its etcd start parameters
    /// (`status.etcdMember`), kept from then on.
    ///
    /// The replicas of a cluster whose etcd was never planned (no replica recorded, none
    /// held ports before this pass) found it together: `new`, all of them in the initial
    /// cluster, started at once, with no learner step and none of etcd's waits between
    /// membership changes. Any other replica joins the running cluster, in replica order,
    /// as the learner the engine adds: `existing`, with the members at that time (recorded
    /// live ones, the ones joining before it) and itself. A replica planned before these
    /// records existed gets what it was started with: the lowest founds alone (`new`), each
    /// further one joins the ones below it.
    fn bootstrap_etcd(&self, components: &mut [Component], planned_before: &BTreeSet<String>) {
        let replicas = live_replicas(&self.key.name, components);
        let peer_url = |c: &Component| {
            let ip = c
                .spec
                .hypervisor
                .as_ref()
                .and_then(|h| self.index.get(h))
                .map(|&i| host(&self.hvs[i].ip))?;
            let port = c.status.host_port(names::ETCD_PEER)?;
            Some((c.metadata.name.clone(), format!("https://{ip}:{port}")))
        };
        let founding = replicas.iter().all(|&i| {
            components[i].status.etcd_member.is_none()
                && !planned_before.contains(&components[i].metadata.name)
        });
        if founding {
            let initial: BTreeMap<String, String> = replicas
                .iter()
                .filter_map(|&i| peer_url(&components[i]))
                .collect();
            for &i in &replicas {
                if initial.contains_key(&components[i].metadata.name) {
                    components[i].status.etcd_member = Some(EtcdMemberBootstrap {
                        initial_cluster: initial.clone(),
                        initial_cluster_state: EtcdInitialClusterState::New,
                    });
                }
            }
            return;
        }
        let mut members: BTreeMap<String, String> = replicas
            .iter()
            .filter(|&&i| components[i].status.etcd_member.is_some())
            .filter_map(|&i| peer_url(&components[i]))
            .collect();
        for &i in &replicas {
            if components[i].status.etcd_member.is_some() {
                continue;
            }
            let Some((name, url)) = peer_url(&components[i]) else {
                continue;
            };
            members.insert(name, url);
            components[i].status.etcd_member = Some(EtcdMemberBootstrap {
                initial_cluster: members.clone(),
                initial_cluster_state: if members.len() == 1 {
                    EtcdInitialClusterState::New
                } else {
                    EtcdInitialClusterState::Existing
                },
            });
        }
    }

    /// Endpoints of the cluster: API server behind the ingress, etcd members, VPN.
    fn set_status(&self, cluster: &mut Cluster, components: &[Component]) {
        let virtual_ip = cluster.ingress_virtual_ip().map(|ip| ip.to_string());
        let status = &mut cluster.status;
        status.api_server_endpoint.clear();
        status.vpn_server_endpoint.clear();
        status.storage_client_endpoints.clear();
        status.storage_peer_endpoints.clear();
        for c in components {
            if c.metadata.is_being_deleted() {
                continue;
            }
            let Some(ip) = c
                .spec
                .hypervisor
                .as_ref()
                .and_then(|h| self.index.get(h))
                .map(|&i| host(&self.hvs[i].ip))
            else {
                continue;
            };
            let port = |name| c.status.host_port(name);
            match c.spec.role {
                ComponentRole::ControlPlane => {
                    if let Some(p) = port(names::ETCD_CLIENT) {
                        status
                            .storage_client_endpoints
                            .insert(c.metadata.name.clone(), format!("https://{ip}:{p}"));
                    }
                    if let Some(p) = port(names::ETCD_PEER) {
                        status
                            .storage_peer_endpoints
                            .insert(c.metadata.name.clone(), format!("https://{ip}:{p}"));
                    }
                }
                ComponentRole::ApiServer => {}
                ComponentRole::ControlPlaneIngress => {
                    // The shared address when there is one, the ingress's otherwise.
                    let ip = virtual_ip.clone().unwrap_or(ip);
                    if let Some(p) = port(names::APISERVER) {
                        status.api_server_endpoint = format!("https://{ip}:{p}");
                    }
                    if let Some(p) = port(names::WIREGUARD) {
                        status.vpn_server_endpoint = format!("{ip}:{p}");
                    }
                }
            }
        }
    }
}

/// Generates the CAs and key pairs the cluster lacks; existing ones are kept.
fn init_pki(
    key: &ObjectKey,
    cluster: &mut Cluster,
    now: OffsetDateTime,
    options: &PrepareOptions,
) -> Result<()> {
    let name = cluster.metadata.name.clone();
    let algorithm = options.key_algorithm;
    let spec = &mut cluster.spec;
    let slots: [(CaKind, &mut Option<Certificate>); 8] = [
        (CaKind::ApiServer, &mut spec.api_server.ca),
        (
            CaKind::ApiServerClient,
            &mut spec.certificate_authorities.api_server_client,
        ),
        (
            CaKind::CertificateSigner,
            &mut spec.certificate_authorities.certificate_signer,
        ),
        (CaKind::Kubelet, &mut spec.certificate_authorities.kubelet),
        (
            CaKind::KubeletClient,
            &mut spec.certificate_authorities.kubelet_client,
        ),
        (CaKind::EtcdServer, &mut spec.etcd_server.ca),
        (
            CaKind::EtcdClient,
            &mut spec.certificate_authorities.etcd_client,
        ),
        (
            CaKind::EtcdPeer,
            &mut spec.certificate_authorities.etcd_peer,
        ),
    ];
    for (kind, slot) in slots {
        if slot.as_ref().is_some_and(|c| !c.certificate.is_empty()) {
            continue;
        }
        let ca = CertificateAuthority::generate(
            &format!("{name}-{}", kind.common_name_suffix()),
            algorithm,
            now,
            options.ca_lifetime,
        )
        .map_err(|e| pki_error(key, kind.manifest_field(), &e))?;
        *slot = Some(Certificate {
            certificate: ca.certificate_pem().to_string(),
            private_key: ca.private_key_pem().to_string(),
        });
    }
    let key_pairs: [(&'static str, KeyAlgorithm, &mut Option<KeyPair>); 2] = [
        (
            oi_pki::SERVICE_ACCOUNT_FIELD,
            algorithm,
            &mut spec.api_server.service_account,
        ),
        (
            oi_pki::JOIN_KEY_FIELD,
            join_key_algorithm(algorithm),
            &mut spec.join_key,
        ),
    ];
    for (field, algorithm, slot) in key_pairs {
        if slot.as_ref().is_some_and(|k| !k.private_key.is_empty()) {
            continue;
        }
        let pair = KeyPairPem::generate(algorithm).map_err(|e| pki_error(key, field, &e))?;
        *slot = Some(KeyPair {
            public_key: pair.public_key_pem,
            private_key: pair.private_key_pem,
        });
    }
    // The VPN endpoint's WireGuard keys, when the VPN is on (a given private key is kept and
    // its public key derived).
    let vpn = &mut spec.vpn;
    if vpn.enabled {
        if vpn.private_key.is_empty() {
            (vpn.private_key, vpn.public_key) = oi_pki::generate_wireguard_keys();
        } else if vpn.public_key.is_empty() {
            vpn.public_key = oi_pki::wireguard_public_key(&vpn.private_key)
                .map_err(|e| pki_error(key, "spec.vpn.privateKey", &e))?;
        }
    }
    Ok(())
}

fn pki_error(key: &ObjectKey, field: &'static str, e: &oi_pki::Error) -> Error {
    Error::Pki {
        cluster: key.clone(),
        field,
        message: e.to_string(),
    }
}

/// Validates a cluster and returns it with its missing PKI generated.
fn validate_and_init_pki(
    key: &ObjectKey,
    cluster: &Cluster,
    now: OffsetDateTime,
    options: &PrepareOptions,
) -> Result<Cluster> {
    let mut errors = validate_cluster(cluster);
    errors.extend(verify_cluster(cluster, now));
    if !errors.is_empty() {
        return Err(Error::Invalid {
            object: key.clone(),
            errors,
        });
    }
    // A version change is an upgrade from what runs: one minor at a time, never down.
    let running = &cluster.status.kubernetes_version;
    if !running.is_empty()
        && let Err(refusal) =
            oi_api::versions::check_upgrade(running, &cluster.spec.kubernetes_version)
    {
        return Err(Error::UpgradeRefused {
            cluster: key.clone(),
            from: running.clone(),
            to: cluster.spec.kubernetes_version.clone(),
            reason: refusal.to_string(),
        });
    }
    let mut cluster = cluster.clone();
    init_pki(key, &mut cluster, now, options)?;
    Ok(cluster)
}

/// Validates and verifies a cluster's existing components against it (its PKI included):
/// the first invalid one fails the cluster.
fn validate_components(cluster: &Cluster, components: &[&Component]) -> Result<()> {
    for c in components {
        let mut errors = validate_component(c);
        errors.extend(verify_component(c, Some(cluster)));
        if !errors.is_empty() {
            return Err(Error::Invalid {
                object: c.key(),
                errors,
            });
        }
    }
    Ok(())
}

fn domain(h: &HypervisorState) -> Domain<'_> {
    Domain::of(&h.name, h.zone.as_deref())
}

/// Removes a component from the world and releases its ports on its hypervisor: what the
/// engine calls once the component's pod (and etcd member) is gone. Returns the component.
pub fn remove_component(world: &mut World, key: &ObjectKey) -> Option<Component> {
    let component = world.components.remove(key)?;
    if let Some(h) = component.spec.hypervisor.as_ref().and_then(|name| {
        world
            .hypervisors
            .get_mut(&ObjectKey::cluster_scoped(name.clone()))
    }) {
        let mut ports = PortAllocator::from_hypervisor(h);
        for p in &component.status.allocated_host_ports {
            ports.release(&PortOwner::new(
                &key.namespace,
                &component.spec.cluster,
                &component.metadata.name,
                &p.name,
            ));
        }
        ports.write_status(&mut h.status);
    }
    Some(component)
}

/// Removes a cluster, its components and every port it holds on any hypervisor: what the
/// engine calls once a cluster marked for deletion is torn down. Returns whether the cluster
/// existed.
pub fn remove_cluster(world: &mut World, key: &ObjectKey) -> bool {
    let existed = world.clusters.remove(key).is_some();
    world
        .components
        .retain(|ck, c| !(ck.namespace == key.namespace && c.spec.cluster == key.name));
    for h in world.hypervisors.values_mut() {
        let mut ports = PortAllocator::from_hypervisor(h);
        if !ports.release_cluster(&key.namespace, &key.name).is_empty() {
            ports.write_status(&mut h.status);
        }
    }
    existed
}

/// Removes from a whole world the hypervisors being deleted that nothing holds any more: no
/// component of any cluster names them and no port of theirs is allocated (a SIPCluster's
/// support services hold theirs). Returns their names. Only for a world that holds every
/// cluster (`oi`): a sub-world would not see what other clusters keep there.
pub fn forget_removed_hypervisors(world: &mut World) -> Vec<String> {
    let held: BTreeSet<&str> = world
        .components
        .values()
        .filter_map(|c| c.spec.hypervisor.as_deref())
        .collect();
    let gone: Vec<String> = world
        .hypervisors
        .values()
        .filter(|h| {
            h.metadata.is_being_deleted()
                && !held.contains(h.metadata.name.as_str())
                && h.status.allocated_ports.is_empty()
        })
        .map(|h| h.metadata.name.clone())
        .collect();
    for name in &gone {
        world
            .hypervisors
            .remove(&ObjectKey::cluster_scoped(name.clone()));
    }
    gone
}

/// Forgets, in a whole world, what its hypervisors' statuses hold for clusters the world
/// does not: their ports (freed) and file records (and the file records of components a live
/// cluster no longer has).
/// A SIPCluster's share is kept. What `oi reconcile --prune` writes once their pods are gone.
/// Returns how many ports were freed.
pub fn forget_orphans(world: &mut World) -> usize {
    let sip = crate::sip::services::OWNER_PREFIX;
    let live_cluster = |ns: &str, name: &str| {
        world
            .clusters
            .contains_key(&ObjectKey::new(ns.to_string(), name.to_string()))
    };
    let live_component = |ns: &str, name: &str| {
        world
            .components
            .contains_key(&ObjectKey::new(ns.to_string(), name.to_string()))
    };
    let mut orphaned: Vec<(String, PortOwner)> = Vec::new();
    let mut stale_files: Vec<(String, String, String, Option<String>)> = Vec::new();
    for h in world.hypervisors.values() {
        // A live cluster's ports of components it no longer has are released by preparing.
        for a in &h.status.allocated_ports {
            let owner = PortOwner::from_status(a);
            if a.cluster.starts_with(sip) || live_cluster(&owner.cluster_namespace, &a.cluster) {
                continue;
            }
            orphaned.push((h.metadata.name.clone(), owner));
        }
        for (ns, clusters) in &h.status.files {
            for (cluster, components) in clusters {
                if cluster.starts_with(sip) {
                    continue;
                }
                if !live_cluster(ns, cluster) {
                    stale_files.push((h.metadata.name.clone(), ns.clone(), cluster.clone(), None));
                    continue;
                }
                for component in components.keys() {
                    if !live_component(ns, component) {
                        stale_files.push((
                            h.metadata.name.clone(),
                            ns.clone(),
                            cluster.clone(),
                            Some(component.clone()),
                        ));
                    }
                }
            }
        }
    }
    let freed = orphaned.len();
    for (h, owner) in orphaned {
        if let Some(h) = world.hypervisors.get_mut(&ObjectKey::cluster_scoped(h)) {
            let mut ports = PortAllocator::from_hypervisor(h);
            ports.release(&owner);
            ports.write_status(&mut h.status);
        }
    }
    for (h, ns, cluster, component) in stale_files {
        let Some(h) = world.hypervisors.get_mut(&ObjectKey::cluster_scoped(h)) else {
            continue;
        };
        let Some(clusters) = h.status.files.get_mut(&ns) else {
            continue;
        };
        match component {
            None => {
                clusters.remove(&cluster);
            }
            Some(c) => {
                if let Some(components) = clusters.get_mut(&cluster) {
                    components.remove(&c);
                    if components.is_empty() {
                        clusters.remove(&cluster);
                    }
                }
            }
        }
        if clusters.is_empty() {
            h.status.files.remove(&ns);
        }
    }
    freed
}

#[cfg(test)]
mod tests;

/// Whether a cluster runs the VPN (its ingress then carries the VPN endpoint).
fn cluster_vpn(cluster: &Cluster) -> bool {
    cluster.spec.vpn.enabled
}
