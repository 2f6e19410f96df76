//! The plan of a run: everything the engine does, decided before it starts.
//!
//! ```text
//! World ──prepare (PKI, components, placement, ports, leaf certificates)──► prepared World
//!   │ per live cluster prepared, its steps in the order the engine takes them:
//!   │   1. files     every live component rendered (pods, files), with the hashes its
//!   │                hypervisor's status records (unchanged files are not written)
//!   │   2. retiring  components marked for deletion: etcd member, pods, directories
//!   │   3. etcd      members in replica order; founders of a new cluster; the engine's
//!   │                own client identity
//!   │   4. kube, 5. ingress   each component's pods, with the pods that restart because
//!   │                files they read change
//!   │   6. observe   etcd members, each API server's and the ingress's /readyz (URLs, CA)
//!   │   7. inside    objects the cluster holds, how join requests are answered, and with
//!   │                the VPN on, its peers and the endpoint's configuration file
//!   │ per cluster marked for deletion: the hypervisors and directories it leaves
//!   │ per cluster that could not be prepared or rendered: why (nothing is done)
//!   ▼
//! Plan {world, hypervisors to connect, clusters: key -> Unplannable | Teardown | Converge}
//! ```
//!
//! What the engine decides while running is only what it must observe first: whether etcd
//! answers (a running cluster keeps its quorum: members and pods change one at a time), and
//! whether a pod runs as rendered (`oi_cri`'s create, replace or keep).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use oi_api::hypervisor::Lost;
use oi_api::runtime::PodSpec;
use oi_api::{Cluster, Component, ComponentRole, EtcdInitialClusterState, ObjectKey, World};
use time::OffsetDateTime;

use crate::bootstrap::InCluster;
use crate::par::{parallel_map, parallel_map_owned};
use crate::ports::names;
use crate::prepare::{PrepareOptions, Prepared, prepare_with, replica_order};
use crate::record::Reason;
use crate::render::{RenderOptions, Rendered, render_component};
use crate::restarts::pods_reading_changed_files;
use crate::vpn::VpnPlan;
use crate::{Error, Result, url_host};

/// Settings of [`plan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOptions {
    pub prepare: PrepareOptions,
    pub render: RenderOptions,
}

/// Everything a run does: the prepared world and each cluster's steps.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The prepared world (PKI, components, placement, ports, leaf certificates).
    pub world: World,
    /// Every hypervisor the run talks to: those holding a component of a cluster of the
    /// world, and those a cluster being torn down left files on. The engine connects to them first and removes the
    /// throwaway pods a killed run left there.
    pub hypervisors: BTreeSet<String>,
    /// Every cluster of the world, by key.
    pub clusters: BTreeMap<ObjectKey, ClusterPlan>,
    /// The SIPClusters: their hosts, their services, and the trust of clusters they change.
    pub sip: SipPlan,
}

/// What a run does with the SIPClusters ([`crate::sip`]): the engine runs the services after
/// the clusters; [`crate::record::record_run`] records both and writes the trust changes.
#[derive(Debug, Clone, Default)]
pub struct SipPlan {
    /// Each SIPCluster's host selection (already applied to the plan's world: hosts are
    /// labels, written by the record like everything else).
    pub reports: Vec<crate::sip::SipReport>,
    /// Each one's services.
    pub services: Vec<crate::sip::services::SipServices>,
    /// Clusters whose `spec.apiServer.oidc` a SIPCluster's OIDC provider changes: this run's
    /// API servers are rendered with the change; the plan's world still has the spec as it
    /// was, and the record writes it.
    pub trust: Vec<crate::sip::services::oidc::TrustChange>,
}

/// What a run plans ([`plan_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// Everything the world holds: `oi`'s runs, the manager's Cluster controller over its
    /// sub-world.
    Everything,
    /// The SIPClusters only: the clusters of the world are read (a jump host's kubeconfig,
    /// an OIDC provider's `clusterRef`), not planned; their own runs do that (the manager's
    /// SIPCluster controller).
    SipClusters,
}

/// What a run does with one cluster.
#[derive(Debug, Clone)]
pub enum ClusterPlan {
    /// It could not be prepared or rendered: nothing is done on its hypervisors, and its
    /// condition says why ([`Error::reason`]).
    Unplannable(Error),
    /// It is marked for deletion: every pod and directory of it goes, then it leaves the
    /// world.
    Teardown(Teardown),
    /// It is brought to what the world describes.
    Converge(Box<Convergence>),
}

/// The teardown of a cluster marked for deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teardown {
    /// Hypervisors holding its components or its files, sorted.
    pub hypervisors: Vec<String>,
    /// Its directories on each of them.
    pub directories: Vec<String>,
}

/// The steps of a live cluster, in order (see the module documentation).
#[derive(Debug, Clone)]
pub struct Convergence {
    /// Every hypervisor its components are on: each must be reachable before anything is
    /// done.
    pub hypervisors: BTreeSet<String>,
    /// Its live components, by name.
    pub components: Vec<ComponentPlan>,
    /// Its components marked for deletion, by name.
    pub retiring: Vec<Retirement>,
    pub etcd: EtcdPlan,
    /// The CA certificate (PEM) its API servers' and ingress's `/readyz` answers are
    /// checked against.
    pub apiserver_ca: String,
    /// What it must hold inside once ready ([`crate::bootstrap`]), or why that cannot be
    /// planned (the engine reports it after the cluster is ready).
    pub in_cluster: std::result::Result<InCluster, String>,
    /// Its VPN, when on: the peers recorded and the endpoint's file they go to.
    pub vpn: Option<VpnPlan>,
    /// A restore from an etcd snapshot, run before the etcd step
    /// ([`crate::snapshot::plan_restore`]).
    pub restore: Option<crate::snapshot::Restore>,
    /// A recovery from a surviving member's data, run before the retiring step
    /// ([`crate::recover::plan_recover`]).
    pub recover: Option<crate::recover::Recover>,
}

impl Convergence {
    /// The live component named `name`.
    pub fn component(&self, name: &str) -> Option<&ComponentPlan> {
        self.components.iter().find(|c| c.name() == name)
    }
}

/// One live component: what it runs on its hypervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentPlan {
    pub key: ObjectKey,
    pub role: ComponentRole,
    pub hypervisor: String,
    /// Its pods and files.
    pub rendered: Rendered,
    /// The hashes of its files as its hypervisor's status records them.
    pub known_files: BTreeMap<String, String>,
    /// Files of those records it no longer renders, inside its configuration directory (see
    /// [`crate::restarts::stale_files`]): removed once its pods run as rendered.
    pub stale_files: Vec<String>,
    /// Its pods that restart because files they read change.
    pub restart: BTreeSet<String>,
    /// Its running pods told to reload, because files they reload changed.
    pub reload: Vec<crate::render::Reload>,
    /// `https://<ip>:<port>` of its API server (a replica) or frontend (the ingress).
    pub apiserver_url: Option<String>,
    /// During an upgrade, the control plane pod a replica goes through first: the new
    /// kube-apiserver beside the running version's controller-manager and scheduler (the
    /// version skew policy: every API server before any of them).
    pub staged: Option<PodSpec>,
    /// A replica's etcd member, should it have lost its data: how it joins the cluster again
    /// as a learner with fresh data (`existing`, with every live replica in the initial
    /// cluster) and its etcd pod started so. `None` for a cluster of one replica (nobody to
    /// join) and for other components. The engine uses it only when it finds the data gone
    /// (see `oi_engine`), and the run records how it started in `status.etcdMember`.
    pub etcd_rejoin: Option<EtcdRejoin>,
}

/// How a replica's etcd member joins its cluster again (see [`ComponentPlan::etcd_rejoin`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdRejoin {
    pub start: oi_api::EtcdMemberStart,
    pub pod: PodSpec,
}

impl ComponentPlan {
    pub fn name(&self) -> &str {
        &self.key.name
    }

    /// Its pod named `name`.
    pub fn pod(&self, name: &str) -> Option<&PodSpec> {
        self.rendered.pods.iter().find(|p| p.name == name)
    }

    /// The pod named as the component: a replica's Kubernetes control plane, the ingress's
    /// haproxy.
    pub fn main_pod(&self) -> Option<&PodSpec> {
        self.pod(self.name())
    }

    /// A replica's etcd pod.
    pub fn etcd_pod(&self) -> Option<&PodSpec> {
        self.pod(&format!("{}-etcd", self.name()))
    }

    /// Its pods but an etcd member's: a replica's control plane, the ingress's haproxy and
    /// VPN endpoint.
    pub fn serving_pods(&self) -> impl Iterator<Item = &PodSpec> {
        let etcd = format!("{}-etcd", self.name());
        self.rendered.pods.iter().filter(move |p| p.name != etcd)
    }

    /// How many of its files differ from what the hypervisor has.
    pub fn changed_files(&self) -> usize {
        crate::restarts::changed_files(&self.rendered, &self.known_files).len()
    }
}

/// A component marked for deletion: its etcd member (if it is one) leaves first, then its
/// pods and directories go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retirement {
    pub key: ObjectKey,
    pub hypervisor: Option<String>,
    /// Its hypervisor is lost for good: its member leaves without it (while the members
    /// that stay keep a quorum), and its pods and directories go only if it answers. A
    /// removed hypervisor's component leaves the world either way; one unreachable past the
    /// grace period keeps it (and its ports) until the hypervisor answers again.
    pub lost: Option<Lost>,
    pub member: Option<EtcdMember>,
    pub directories: Vec<String>,
}

/// One etcd member.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EtcdMember {
    /// The member name: its component's name.
    pub name: String,
    pub peer_url: String,
    pub client_url: String,
}

/// The etcd members a cluster should have, and those retiring.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdMembership {
    /// Live replicas, in replica order.
    pub members: Vec<EtcdMember>,
    /// Replicas marked for deletion: removed from the membership before their pod goes.
    pub retiring: Vec<EtcdMember>,
}

/// A cluster's etcd steps.
#[derive(Debug, Clone)]
pub struct EtcdPlan {
    /// Its members, live replicas in replica order: asked for the membership, joined or
    /// restarted one at a time in this order when the cluster runs.
    pub members: Vec<EtcdMember>,
    /// The replicas whose member founds a new cluster (`status.etcdMember` says `new`):
    /// when etcd does not answer, their pods start together; the other replicas then join
    /// as learners, one at a time.
    pub founders: BTreeSet<String>,
    /// The identity the engine talks to etcd with, or why there is none.
    pub client: std::result::Result<EtcdClientIdentity, String>,
}

/// A short-lived client certificate of the cluster's etcd client CA, and the etcd server CA
/// it trusts. `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdClientIdentity {
    pub server_ca: String,
    pub certificate: String,
    pub private_key: String,
}

impl fmt::Debug for EtcdClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClientIdentity")
            .field("certificate", &self.certificate)
            .field("private_key", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// How long the engine's etcd client certificate is valid: one run.
const ENGINE_CLIENT_LIFETIME: time::Duration = time::Duration::hours(1);

impl Error {
    /// The reason of the condition of a cluster that could not be planned.
    pub fn reason(&self) -> Reason {
        match self {
            Error::Render { .. } => Reason::RenderFailed,
            _ => Reason::PrepareFailed,
        }
    }
}

/// A cluster's live components, each rendered or not.
type Renderings<'w> = Vec<(&'w ObjectKey, Result<Rendered>)>;

/// Plans everything `world` holds ([`plan_run`] with [`Runs::Everything`]).
pub fn plan(world: World, now: OffsetDateTime, options: &PlanOptions) -> Plan {
    plan_run(world, Runs::Everything, now, options)
}

/// The one run order, what `oi` and `oi-manager` both plan with; the engine executes the plan
/// in the same order and [`crate::record::record_run`] records it:
///
/// ```text
/// SIPClusters' hosts selected (sip::select_hosts)
///  ─► their services placed: fixed ports claimed before any cluster's ports are handed out,
///     OIDC PKI kept, clusterRef trust changes applied to this run's copy
///  ─► clusters prepared and planned (prepare, plan_prepared)        [Runs::Everything]
///  ─► services rendered over the prepared world (a jump host's kubeconfig needs its
///     cluster's CA and endpoint, made for a new cluster just before)
///  ─► trust changes carried by the plan (SipPlan::trust), the spec as it was in its world
/// ```
pub fn plan_run(mut world: World, runs: Runs, now: OffsetDateTime, options: &PlanOptions) -> Plan {
    use crate::sip::services::{place_services, render_services};
    let reports = crate::sip::select_hosts(&mut world, now);
    let placed = place_services(&mut world, &reports, options, now);
    let trust: Vec<_> = placed.iter().filter_map(|p| p.trust.clone()).collect();
    let mut plan = match runs {
        Runs::Everything => plan_prepared(
            prepare_with(world, now, &options.prepare),
            now,
            &options.render,
        ),
        Runs::SipClusters => Plan {
            world,
            hypervisors: BTreeSet::new(),
            clusters: BTreeMap::new(),
            sip: SipPlan::default(),
        },
    };
    let services = render_services(&mut plan.world, &reports, placed, options, now);
    // Later changes of one cluster were made over earlier ones: undone last first.
    for t in trust.iter().rev() {
        t.revert(&mut plan.world);
    }
    plan.sip = SipPlan {
        reports,
        services,
        trust,
    };
    plan
}

/// Plans every cluster of a prepared world: its failures are unplannable clusters.
pub fn plan_prepared(prepared: Prepared, now: OffsetDateTime, options: &RenderOptions) -> Plan {
    let Prepared {
        world,
        failures,
        lost,
    } = prepared;
    // Every live component of every live cluster that was prepared, rendered on every core.
    let live: Vec<&ObjectKey> = world
        .components
        .iter()
        .filter(|(_, c)| {
            !c.metadata.is_being_deleted()
                && c.spec.hypervisor.is_some()
                && !failures.contains_key(&c.cluster_key())
                && world.cluster_of(c).is_some_and(|cl| !cl.is_being_deleted())
        })
        .map(|(k, _)| k)
        .collect();
    let rendered = parallel_map(&live, |key| render_component(&world, key, options));
    let mut by_cluster: BTreeMap<ObjectKey, Vec<(&ObjectKey, Result<Rendered>)>> = BTreeMap::new();
    for (key, result) in live.iter().zip(rendered) {
        if let Some(c) = world.components.get(*key) {
            by_cluster
                .entry(c.cluster_key())
                .or_default()
                .push((key, result));
        }
    }
    let mut clusters = BTreeMap::new();
    // Components of clusters not in the world (a sub-world holds every component, for
    // placement) are nobody's business in this run.
    let mut hypervisors: BTreeSet<String> = world
        .components
        .values()
        .filter(|c| world.clusters.contains_key(&c.cluster_key()))
        .filter_map(|c| c.spec.hypervisor.clone())
        .filter(|h| {
            world
                .hypervisors
                .contains_key(&ObjectKey::cluster_scoped(h.clone()))
        })
        .collect();
    // Each cluster's steps, independent of the others: on every core.
    let work: Vec<(&ObjectKey, &Cluster, Renderings)> = world
        .clusters
        .iter()
        .map(|(key, cluster)| (key, cluster, by_cluster.remove(key).unwrap_or_default()))
        .collect();
    let planned = parallel_map_owned(work, |(key, cluster, rendered)| {
        let plan = if let Some(error) = failures.get(key) {
            ClusterPlan::Unplannable(error.clone())
        } else if cluster.is_being_deleted() {
            ClusterPlan::Teardown(teardown(&world, key))
        } else {
            match convergence(&world, key, cluster, rendered, &lost, now, options) {
                Ok(c) => ClusterPlan::Converge(Box::new(c)),
                Err(e) => ClusterPlan::Unplannable(e),
            }
        };
        (key.clone(), plan)
    });
    for (key, plan) in planned {
        if let ClusterPlan::Teardown(t) = &plan {
            hypervisors.extend(t.hypervisors.iter().cloned());
        }
        clusters.insert(key, plan);
    }
    Plan {
        world,
        hypervisors,
        clusters,
        sip: SipPlan::default(),
    }
}

/// The hypervisors and directories a cluster marked for deletion leaves.
fn teardown(world: &World, key: &ObjectKey) -> Teardown {
    let mut hypervisors: Vec<String> = world
        .components_of(key)
        .filter_map(|c| c.spec.hypervisor.clone())
        .collect();
    for h in world.hypervisors.values() {
        if h.status
            .files
            .get(&key.namespace)
            .is_some_and(|m| m.contains_key(&key.name))
        {
            hypervisors.push(h.metadata.name.clone());
        }
    }
    hypervisors.sort_unstable();
    hypervisors.dedup();
    Teardown {
        hypervisors,
        directories: vec![
            oi_api::runtime::paths::cluster_config_dir(&key.namespace, &key.name),
            oi_api::runtime::paths::cluster_data_dir(&key.namespace, &key.name),
        ],
    }
}

/// The steps of a live cluster whose components rendered as `rendered`.
fn convergence(
    world: &World,
    key: &ObjectKey,
    cluster: &Cluster,
    rendered: Renderings<'_>,
    lost: &BTreeMap<String, Lost>,
    now: OffsetDateTime,
    options: &RenderOptions,
) -> Result<Convergence> {
    // The first component that did not render makes the cluster unplannable.
    let mut rendered: BTreeMap<&ObjectKey, Rendered> = rendered
        .into_iter()
        .map(|(k, r)| r.map(|r| (k, r)))
        .collect::<Result<_>>()?;
    let all: Vec<&Component> = world.components_of(key).collect();
    let membership = etcd_membership(world, key);
    // An upgrade under way: the release the control plane runs, when it is another.
    let running = (!cluster.status.kubernetes_version.is_empty()
        && cluster.status.kubernetes_version != cluster.spec.kubernetes_version)
        .then(|| oi_api::versions::find_release(&cluster.status.kubernetes_version))
        .flatten();
    let mut components = Vec::new();
    let mut retiring = Vec::new();
    for c in &all {
        let ck = ObjectKey::new(key.namespace.clone(), c.metadata.name.clone());
        if c.metadata.is_being_deleted() {
            retiring.push(Retirement {
                lost: c
                    .spec
                    .hypervisor
                    .as_ref()
                    .and_then(|h| lost.get(h))
                    .cloned(),
                member: membership
                    .retiring
                    .iter()
                    .find(|m| m.name == c.metadata.name)
                    .cloned(),
                hypervisor: c.spec.hypervisor.clone(),
                directories: vec![
                    oi_api::runtime::paths::component_config_dir(
                        &key.namespace,
                        &key.name,
                        &c.metadata.name,
                    ),
                    oi_api::runtime::paths::component_data_dir(
                        &key.namespace,
                        &key.name,
                        &c.metadata.name,
                    ),
                ],
                key: ck,
            });
            continue;
        }
        let (Some(hypervisor), Some(r)) = (c.spec.hypervisor.clone(), rendered.remove(&ck)) else {
            continue;
        };
        let known_files = world_files(world, &hypervisor, key, &c.metadata.name);
        let staged = match (c.spec.role, &running) {
            (ComponentRole::ControlPlane | ComponentRole::ApiServer, Some(running)) => r
                .pods
                .iter()
                .find(|p| p.name == c.metadata.name)
                .map(|main| staged_pod(main, running, options.image_repository.as_deref())),
            _ => None,
        };
        let changed: BTreeSet<&str> = crate::restarts::changed_files(&r, &known_files)
            .into_iter()
            .map(|f| f.path.as_str())
            .collect();
        let reload = r
            .reloads
            .iter()
            .filter(|l| l.files.iter().any(|f| changed.contains(f.as_str())))
            .cloned()
            .collect();
        let stale_files = crate::restarts::stale_files(
            &r.files,
            &known_files,
            &oi_api::runtime::paths::component_config_dir(
                &key.namespace,
                &key.name,
                &c.metadata.name,
            ),
        );
        components.push(ComponentPlan {
            etcd_rejoin: None,
            reload,
            staged,
            stale_files,
            restart: pods_reading_changed_files(&r, &known_files),
            apiserver_url: url(world, c, names::APISERVER),
            role: c.spec.role,
            key: ck,
            hypervisor,
            rendered: r,
            known_files,
        });
    }
    // Every replica can join again while another member runs.
    if membership.members.len() > 1 {
        let start = oi_api::EtcdMemberStart {
            initial_cluster: membership
                .members
                .iter()
                .map(|m| (m.name.clone(), m.peer_url.clone()))
                .collect(),
            initial_cluster_state: EtcdInitialClusterState::Existing,
        };
        for c in &mut components {
            if let Some(pod) = c.etcd_pod() {
                c.etcd_rejoin = Some(EtcdRejoin {
                    pod: crate::render::etcd_pod_with(pod, &start),
                    start: start.clone(),
                });
            }
        }
    }
    let founders = all
        .iter()
        .filter(|c| !c.metadata.is_being_deleted())
        .filter(|c| {
            c.status
                .etcd_member
                .as_ref()
                .map(|m| m.initial_cluster_state)
                == Some(EtcdInitialClusterState::New)
        })
        .map(|c| c.metadata.name.clone())
        .collect();
    Ok(Convergence {
        // A lost hypervisor is not waited for: what ran there is replaced without it.
        hypervisors: all
            .iter()
            .filter_map(|c| c.spec.hypervisor.clone())
            .filter(|h| !lost.contains_key(h))
            .collect(),
        components,
        retiring,
        etcd: EtcdPlan {
            members: membership.members,
            founders,
            client: etcd_client_identity(cluster, now),
        },
        apiserver_ca: crate::rotation::trust_bundle(cluster, oi_pki::CaKind::ApiServer)
            .unwrap_or_default(),
        in_cluster: crate::bootstrap::in_cluster(cluster, now).map(|mut i| {
            crate::bootstrap::override_images(&mut i.objects, options.image_repository.as_deref());
            i
        }),
        vpn: vpn_plan(world, key, cluster),
        restore: None,
        recover: None,
    })
}

/// The VPN plan of a cluster with the VPN on and its ingress placed.
fn vpn_plan(world: &World, key: &ObjectKey, cluster: &Cluster) -> Option<VpnPlan> {
    if !cluster.spec.vpn.enabled {
        return None;
    }
    let ingress = world.components_of(key).find(|c| {
        c.spec.role == ComponentRole::ControlPlaneIngress && !c.metadata.is_being_deleted()
    })?;
    let hypervisor = ingress.spec.hypervisor.clone()?;
    let path = format!(
        "{}/{}",
        oi_api::runtime::paths::component_config_dir(
            &key.namespace,
            &key.name,
            &ingress.metadata.name
        ),
        crate::render::VPN_CONFIG
    );
    VpnPlan::new(
        cluster,
        &hypervisor,
        &ingress.metadata.name,
        path,
        ingress.status.host_port(names::WIREGUARD)?,
    )
    .ok()
}

/// The control plane pod `main` with its controller-manager and scheduler still on the
/// `running` release's images.
fn staged_pod(
    main: &PodSpec,
    running: &oi_api::versions::KubernetesRelease,
    repository: Option<&str>,
) -> PodSpec {
    let mut staged = main.clone();
    for c in &mut staged.containers {
        let image = match c.name.as_str() {
            "kube-controller-manager" => running.kube_controller_manager,
            "kube-scheduler" => running.kube_scheduler,
            _ => continue,
        };
        c.image = image.reference(repository);
    }
    staged
}

/// `https://<ip>:<port>` of port `port` of a component.
fn url(world: &World, c: &Component, port: &str) -> Option<String> {
    let ip = &world.hypervisor_of(c)?.spec.ip_address;
    let port = c.status.host_port(port)?;
    Some(format!("https://{}:{port}", url_host(ip)))
}

/// The hashes of a component's files that its hypervisor's status records.
fn world_files(
    world: &World,
    hypervisor: &str,
    cluster: &ObjectKey,
    component: &str,
) -> BTreeMap<String, String> {
    world
        .hypervisors
        .get(&ObjectKey::cluster_scoped(hypervisor))
        .and_then(|h| h.status.files.get(&cluster.namespace))
        .and_then(|m| m.get(&cluster.name))
        .and_then(|m| m.get(component))
        .cloned()
        .unwrap_or_default()
}

/// The engine's etcd client identity: a short-lived certificate from the cluster's etcd
/// client CA (a P-256 key, whatever the cluster's algorithm: it never leaves the run),
/// trusting the etcd server CA.
fn etcd_client_identity(
    cluster: &Cluster,
    now: OffsetDateTime,
) -> std::result::Result<EtcdClientIdentity, String> {
    let client_ca = cluster
        .spec
        .certificate_authorities
        .etcd_client
        .as_ref()
        .ok_or("no etcd client CA")?;
    let server_ca = cluster
        .spec
        .etcd_server
        .ca
        .as_ref()
        .ok_or("no etcd server CA")?;
    let ca = oi_pki::CaKind::EtcdClient
        .load(&client_ca.certificate, &client_ca.private_key)
        .map_err(|e| e.to_string())?;
    let mut spec = oi_pki::LeafSpec::client(oi_pki::CaKind::EtcdClient, "oneinfra-engine", &[]);
    spec.key_algorithm = Some(oi_pki::KeyAlgorithm::EcdsaP256);
    let leaf = ca
        .issue(&spec, now, ENGINE_CLIENT_LIFETIME)
        .map_err(|e| e.to_string())?;
    Ok(EtcdClientIdentity {
        server_ca: crate::rotation::trust_bundle(cluster, oi_pki::CaKind::EtcdServer)
            .unwrap_or_else(|| server_ca.certificate.clone()),
        certificate: leaf.certificate_pem,
        private_key: leaf.private_key_pem,
    })
}

/// The etcd members a cluster should have (see [`EtcdMembership`]): its control plane
/// replicas placed and given their ports, in replica order.
pub fn etcd_membership(world: &World, cluster: &ObjectKey) -> EtcdMembership {
    let mut replicas: Vec<&Component> = world
        .components_of(cluster)
        .filter(|c| c.spec.role == ComponentRole::ControlPlane)
        .collect();
    replicas.sort_by_key(|c| replica_order(&cluster.name, &c.metadata.name));
    let mut membership = EtcdMembership::default();
    for c in replicas {
        let Some(ip) = world.hypervisor_of(c).map(|h| url_host(&h.spec.ip_address)) else {
            continue;
        };
        let (Some(peer), Some(client)) = (
            c.status.host_port(names::ETCD_PEER),
            c.status.host_port(names::ETCD_CLIENT),
        ) else {
            continue;
        };
        let member = EtcdMember {
            name: c.metadata.name.clone(),
            peer_url: format!("https://{ip}:{peer}"),
            client_url: format!("https://{ip}:{client}"),
        };
        if c.metadata.is_being_deleted() {
            membership.retiring.push(member);
        } else {
            membership.members.push(member);
        }
    }
    membership
}

#[cfg(test)]
mod tests;
