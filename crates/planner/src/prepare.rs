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
//!
//! Here: the pass over the world and one cluster's run through it. Its jobs, one file each:
//! `pki` (CAs and key pairs made, objects validated and verified), `derive` (components
//! from the spec: scaling, drains, lost hypervisors), `drain` (a drain's step, `Healed`),
//! `place` (new components placed, host ports), `shared` (ingresses' shared addresses),
//! `naming` (component names and order), `forget` (what leaves the world after a run).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use oi_api::common::{
    ConditionStatus, condition_is_true, condition_types, find_condition, set_condition,
};
use oi_api::validation::{validate_cluster, validate_component, validate_hypervisor};
use oi_api::{
    Certificate, Cluster, Component, ComponentHostPortAllocation, ComponentRole, ComponentSpec,
    EtcdInitialClusterState, EtcdMemberStart, KeyPair, ObjectKey, ObjectMeta, Resource, World,
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

mod derive;
mod drain;
mod forget;
mod naming;
mod pki;
mod place;
mod shared;

use self::drain::*;
pub(crate) use self::drain::{
    DRAINED_MESSAGE, DRAINED_REASON, HEALED_MESSAGE, HEALED_REASON, on_drained_hypervisors,
};
pub use self::forget::{
    forget_orphans, forget_removed_hypervisors, remove_cluster, remove_component,
};
pub(crate) use self::naming::replica_order;
use self::naming::*;
pub use self::naming::{api_server_name, control_plane_name, ingress_name, required_ports};
use self::pki::*;
pub use self::shared::SharedAddresses;

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
        self.plan_etcd_starts(&mut components, &planned_before);
        self.set_status(&mut cluster, &components);
        drain.record(&mut cluster, &components, self.now);
        record_healed(&mut cluster, &lost, &components, self.now);
        let hvs: &[HypervisorState] = self.hvs;
        let jobs = certificates::plan(self.key, &cluster, &components, |name| {
            self.index.get(name).map(|&i| hvs[i].ip.as_str())
        })?;
        Ok((cluster, components, jobs))
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
    fn plan_etcd_starts(&self, components: &mut [Component], planned_before: &BTreeSet<String>) {
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
                    components[i].status.etcd_member = Some(EtcdMemberStart {
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
            components[i].status.etcd_member = Some(EtcdMemberStart {
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

fn domain(h: &HypervisorState) -> Domain<'_> {
    Domain::of(&h.name, h.zone.as_deref())
}

#[cfg(test)]
mod tests;

/// Whether a cluster runs the VPN (its ingress then carries the VPN endpoint).
fn cluster_vpn(cluster: &Cluster) -> bool {
    cluster.spec.vpn.enabled
}
