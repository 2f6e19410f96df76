//! A SIPCluster's support services, run by us on public hypervisors through CRI like a
//! cluster's ingress: where each runs, its host ports, its pod and files. Pure.
//!
//! ```text
//! SIPCluster spec.services + the hosts it holds (SipReport)
//!   │ per service entry (loadBalancerControlPlane[i], loadBalancerWorker[i], jumpHost[i]):
//!   │   the public hypervisor it is on (it stays unless that one is drained or lost), or
//!   │   one that matches its nodeLabels, has every port it asks free and in range and room
//!   │   in its capacity, chosen by the planner's rules (crate::schedule: spread by kind
//!   │   over hypervisors and zones, then beside its other services, then least loaded)
//!   │   ─► its ports claimed in that hypervisor's status, owned by `SIPCluster/<name>`
//!   │   ─► its pod and files rendered
//!   │ services no longer asked for: ports released, pods and directories to remove
//!   ▼ all or nothing per SIPCluster: one that cannot be placed changes no status
//! SipServices {services, hypervisors to sweep, directories leaving, notes, error}
//! ```
//!
//! Ports are held as a cluster's are, in the hypervisor's `allocatedPorts`, with the owner's
//! `cluster` set to `SIPCluster/<name>` (a `/` no Cluster name has, so a SIPCluster and a
//! Cluster of the same name never share an owner) and `component` to `<service>-<port name>`.
//! Files are recorded the same way in the hypervisor's `files`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use oi_api::runtime::{ContainerSpec, HostFile, Mount, PodSpec};
use oi_api::sip::{JumpHostService, LoadBalancerService, LoadBalancerWorkerService};
use oi_api::versions::{self, INFRA, Requests};
use oi_api::{Hypervisor, ObjectKey, SipCluster, World};

use super::{HostState, SipReport, jump_host_inventory};
use crate::PlanOptions;
use crate::ports::{PortAllocator, PortOwner};
use crate::record::Failure;
use crate::render::RenderOptions;
use crate::schedule::{Closed, Domain, Held, Room, Spread, ZONE_LABEL};
use crate::url_host;

/// What the `cluster` of a SIPCluster's port owners and file records starts with.
pub const OWNER_PREFIX: &str = "SIPCluster/";

/// The `cluster` of a SIPCluster's port owners and file records: `SIPCluster/<name>`.
pub fn owner_cluster(sip: &str) -> String {
    format!("{OWNER_PREFIX}{sip}")
}

/// Pod labels of SIP services (no `managed` label: cluster runs and their dry runs never
/// take these pods for their own).
pub mod labels {
    pub const SIP_CLUSTER_NAMESPACE: &str = "oneinfra.ereslibre.es/sipcluster-namespace";
    pub const SIP_CLUSTER: &str = "oneinfra.ereslibre.es/sipcluster";
    pub const SERVICE: &str = "oneinfra.ereslibre.es/sip-service";
}

/// Where a SIPCluster's service files are on its hypervisor (`_`: no namespace has it, so no
/// cluster's directory is ever this one).
pub const CONFIG_ROOT: &str = "/etc/oneinfra/_sip";
/// Where a service keeps what it makes itself (the jump host's SSH host key).
pub const STATE_ROOT: &str = "/var/lib/oneinfra/_sip";
/// The port the tenant's API servers listen on, behind the control plane load balancer (as
/// upstream SIP has it).
pub const APISERVER_PORT: u16 = 6443;
/// At most this many ports in a worker load balancer's `nodePortRange`.
pub const MAX_WORKER_PORTS: i64 = 4096;
/// The jump host's login user (upstream SIP's image has the same).
pub const JUMP_HOST_USER: &str = "ubuntu";

/// The kinds of support service we run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServiceKind {
    LoadBalancerControlPlane,
    LoadBalancerWorker,
    JumpHost,
    OidcProvider,
}

impl ServiceKind {
    /// Its list in `spec.services`.
    pub fn field(self) -> &'static str {
        match self {
            ServiceKind::LoadBalancerControlPlane => "loadBalancerControlPlane",
            ServiceKind::LoadBalancerWorker => "loadBalancerWorker",
            ServiceKind::JumpHost => "jumpHost",
            ServiceKind::OidcProvider => "oidcProvider",
        }
    }

    /// The start of its services' names: `<short>-<index>`.
    pub fn short(self) -> &'static str {
        match self {
            ServiceKind::LoadBalancerControlPlane => "lb-control-plane",
            ServiceKind::LoadBalancerWorker => "lb-worker",
            ServiceKind::JumpHost => "jump-host",
            ServiceKind::OidcProvider => "oidc-provider",
        }
    }

    /// What one service of this kind asks of its hypervisor (counted against its capacity
    /// like a component's requests).
    pub fn requests(self) -> Requests {
        match self {
            ServiceKind::LoadBalancerControlPlane | ServiceKind::LoadBalancerWorker => {
                versions::LOAD_BALANCER_REQUESTS
            }
            ServiceKind::JumpHost => versions::JUMP_HOST_REQUESTS,
            ServiceKind::OidcProvider => versions::OIDC_PROVIDER_REQUESTS,
        }
    }

    /// The kind of the service named `name` (`<short>-<index>`).
    pub fn of_service(name: &str) -> Option<ServiceKind> {
        let (short, index) = name.rsplit_once('-')?;
        index.parse::<usize>().ok()?;
        [
            ServiceKind::LoadBalancerControlPlane,
            ServiceKind::LoadBalancerWorker,
            ServiceKind::JumpHost,
            ServiceKind::OidcProvider,
        ]
        .into_iter()
        .find(|k| k.short() == short)
    }

    /// In words.
    pub fn describe(self) -> &'static str {
        match self {
            ServiceKind::LoadBalancerControlPlane => "control plane load balancer",
            ServiceKind::LoadBalancerWorker => "worker load balancer",
            ServiceKind::JumpHost => "jump host",
            ServiceKind::OidcProvider => "OIDC provider",
        }
    }
}

/// One service to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePlan {
    /// `<kind short>-<index>`, e.g. `jump-host-0`.
    pub name: String,
    pub kind: ServiceKind,
    pub index: usize,
    pub hypervisor: String,
    /// The hypervisor's address: where the service answers.
    pub address: String,
    /// Its host ports, ascending.
    pub ports: Vec<u16>,
    pub pod: PodSpec,
    pub files: Vec<HostFile>,
    /// The hashes of its files as its hypervisor's status records them.
    pub known_files: BTreeMap<String, String>,
    /// Files of those records it no longer has, inside its configuration directory (see
    /// [`crate::restarts::stale_files`]): removed once its pod runs as rendered.
    pub stale_files: Vec<String>,
}

impl ServicePlan {
    /// `address:port`, or `address:first-last` for a range.
    pub fn endpoint(&self) -> String {
        let host = url_host(&self.address);
        match (self.ports.first(), self.ports.last()) {
            (Some(a), Some(b)) if a != b => format!("{host}:{a}-{b}"),
            (Some(a), _) => format!("{host}:{a}"),
            _ => host,
        }
    }
}

/// What a run does with one SIPCluster's services.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SipServices {
    pub key: ObjectKey,
    /// The services to run, by name.
    pub services: Vec<ServicePlan>,
    /// Every hypervisor holding (or, before this plan, holding) something of it: its pods
    /// that are not planned are removed there.
    pub hypervisors: BTreeSet<String>,
    /// Directories of services that left, by hypervisor.
    pub leaving: BTreeMap<String, Vec<String>>,
    /// The SIPCluster is deleted: everything of it goes.
    pub deleted: bool,
    /// Services asked for that are not run by us, and why (the control plane's own ingress).
    pub notes: Vec<String>,
    /// What waits for the `clusterRef` cluster (its endpoint, made by the clusters' run): the
    /// SIPCluster is not ready until a later plan has it.
    pub waiting: Vec<String>,
    /// Why its services cannot be placed (nothing was changed for it).
    pub error: Option<String>,
}

/// What happened to one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceResult {
    pub name: String,
    pub hypervisor: String,
    /// Why its containers do not all run; `None` when they do.
    pub failure: Option<Failure>,
    /// The hashes of its files placed (what the hypervisor's status records), when written.
    pub hashes: Option<BTreeMap<String, String>>,
}

/// What happened to one SIPCluster's services.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SipServicesResult {
    pub key: oi_api::ObjectKey,
    pub services: Vec<ServiceResult>,
    /// Removing what is no longer wanted failed: why.
    pub sweep_error: Option<Failure>,
}

impl ServiceResult {
    /// Its containers all run.
    pub fn running(&self) -> bool {
        self.failure.is_none()
    }
}

impl SipServicesResult {
    /// Every planned service runs and nothing failed.
    pub fn all_running(&self) -> bool {
        self.sweep_error.is_none() && self.services.iter().all(ServiceResult::running)
    }
}

/// The config directory of service `service` of SIPCluster `key`.
pub fn config_dir(key: &ObjectKey, service: &str) -> String {
    format!("{CONFIG_ROOT}/{}/{}/{service}", key.namespace, key.name)
}

/// The state directory of service `service` of SIPCluster `key`.
pub fn state_dir(key: &ObjectKey, service: &str) -> String {
    format!("{STATE_ROOT}/{}/{}/{service}", key.namespace, key.name)
}

/// One SIPCluster's services placed (the first half of planning them, before the clusters'
/// run is planned): where each goes, its ports claimed, its OIDC providers' PKI kept, and the
/// change of the `clusterRef` cluster's trust its OIDC provider asks for. Rendered by
/// [`render_services`] once the clusters are prepared (a jump host's client certificate and
/// kubeconfig need the cluster's CA and endpoint).
#[derive(Debug, Clone)]
pub struct Placed {
    out: SipServices,
    chosen: Vec<(String, Wanted)>,
    /// The change of the `clusterRef` cluster's `spec.apiServer.oidc`, already applied to the
    /// world placing was given (the caller reverts it once the clusters are planned).
    pub trust: Option<oidc::TrustChange>,
}

/// Places the services of every SIPCluster of `reports` (see the module documentation),
/// claiming and releasing their ports in the world's hypervisors. A SIPCluster whose hosts
/// could not be selected gets no services; one that already runs services keeps them,
/// planned with the hosts it still holds (so a drain moves them and their certificates are
/// renewed), and keeps its `Unschedulable` condition.
///
/// An OIDC provider's CA and serving certificate are made (or renewed, [`RENEW_BEFORE`] ahead
/// of their end, or when the provider's address changes) in the SIPCluster's
/// `status.oidcProviders`. When `spec.clusterRef` names one of our Clusters that does not
/// trust the first provider yet (or trusts one that went), [`Placed::trust`] says how its
/// `spec.apiServer.oidc` changes; the change is applied to `world` so that the clusters'
/// plan that follows configures its API servers.
pub fn place_services(
    world: &mut World,
    reports: &[SipReport],
    options: &PlanOptions,
    now: time::OffsetDateTime,
) -> Vec<Placed> {
    let planned: Vec<&SipReport> = reports
        .iter()
        .filter(|r| r.deleted || r.selection.shortfalls.is_empty() || holds_ports(world, &r.key))
        .collect();
    planned
        .into_iter()
        .map(|r| {
            let placed = place_one(world, r, options, now);
            if let Some(t) = &placed.trust {
                t.apply(world);
            }
            placed
        })
        .collect()
}

/// Renders the services placed (the second half), over the world as the clusters' plan left
/// it: the jump hosts' client certificates kept (issued by the `clusterRef` cluster's CA),
/// then each service's pod and files. A jump host whose cluster has no PKI or endpoint yet
/// (it could not be prepared) waits ([`SipServices::waiting`]).
pub fn render_services(
    world: &mut World,
    reports: &[SipReport],
    placed: Vec<Placed>,
    options: &PlanOptions,
    now: time::OffsetDateTime,
) -> Vec<SipServices> {
    placed
        .into_iter()
        .map(|p| {
            let report = reports.iter().find(|r| r.key == p.out.key);
            match report {
                Some(r) => render_one(world, r, p, options, now),
                None => p.out,
            }
        })
        .collect()
}

/// [`place_services`] then [`render_services`] over the same world, the trust changes left
/// applied: what planning the services alone is (tests; a run plans them around the
/// clusters, [`crate::plan`]).
pub fn plan_services(
    world: &mut World,
    reports: &[SipReport],
    options: &PlanOptions,
    now: time::OffsetDateTime,
) -> Vec<SipServices> {
    let placed = place_services(world, reports, options, now);
    render_services(world, reports, placed, options, now)
}

/// What the SIPClusters' services holding ports on hypervisor `h` ask, one entry per
/// service (a service of an unknown kind counts as the largest, so that what is unknown never
/// overcommits).
pub fn held_on(h: &Hypervisor) -> Vec<Requests> {
    let services: BTreeSet<(&str, &str, &str)> = h
        .status
        .allocated_ports
        .iter()
        .filter(|a| a.cluster.starts_with(OWNER_PREFIX))
        .map(|a| {
            (
                a.cluster_namespace.as_str(),
                a.cluster.as_str(),
                service_of(&a.component),
            )
        })
        .collect();
    services
        .into_iter()
        .map(|(_, _, s)| {
            ServiceKind::of_service(s).map_or(versions::JUMP_HOST_REQUESTS, ServiceKind::requests)
        })
        .collect()
}

/// Whether SIPCluster `key` holds ports on some hypervisor: it runs services.
fn holds_ports(world: &World, key: &ObjectKey) -> bool {
    let owner = owner_cluster(&key.name);
    world.hypervisors.values().any(|h| {
        h.status
            .allocated_ports
            .iter()
            .any(|a| a.cluster_namespace == key.namespace && a.cluster == owner)
    })
}

/// A port a service asks for: its name in the owner, the port, the field asking for it.
#[derive(Debug, Clone)]
struct Wanted {
    name: String,
    kind: ServiceKind,
    index: usize,
    node_labels: BTreeMap<String, String>,
    /// `(port name, port, field)`.
    ports: Vec<(String, u16, String)>,
}

/// Where one service runs: its directories on its hypervisor, the hypervisor's address and
/// the service's ports (ascending).
struct Site {
    config: String,
    state: String,
    address: String,
    ports: Vec<u16>,
}

impl Site {
    /// A file of its configuration directory.
    fn file(&self, name: &str, content: Vec<u8>, mode: u32) -> HostFile {
        HostFile {
            path: format!("{}/{name}", self.config),
            content,
            mode,
        }
    }

    /// Its configuration directory (read-only) and its state directory, mounted where they
    /// are on the hypervisor.
    fn mounts(&self) -> [Mount; 2] {
        [
            Mount {
                host_path: self.config.clone(),
                container_path: self.config.clone(),
                readonly: true,
            },
            Mount {
                host_path: self.state.clone(),
                container_path: self.state.clone(),
                readonly: false,
            },
        ]
    }
}

/// The service of a port owner's `component` (`<service>-<port name>`).
pub fn service_of(component: &str) -> &str {
    component.rsplit_once('-').map_or(component, |(s, _)| s)
}

fn place_one(
    world: &mut World,
    report: &SipReport,
    options: &PlanOptions,
    now: time::OffsetDateTime,
) -> Placed {
    let key = &report.key;
    let owner_name = owner_cluster(&key.name);
    let mut out = SipServices {
        key: key.clone(),
        deleted: report.deleted,
        ..SipServices::default()
    };
    let failed = |out: SipServices| Placed {
        out,
        chosen: Vec::new(),
        trust: None,
    };
    let mut placing = Placing {
        allocators: world
            .hypervisors
            .values()
            .map(|h| (h.metadata.name.clone(), PortAllocator::from_hypervisor(h)))
            .collect(),
        held: crate::schedule::held(world),
        lost: world
            .hypervisors
            .values()
            .filter(|h| {
                h.lost(now, options.prepare.replace_unreachable_after)
                    .is_some()
            })
            .map(|h| h.metadata.name.clone())
            .collect(),
    };
    let allocators = &mut placing.allocators;
    // Where each service of it is now: the hypervisor holding its ports.
    let mut placed: BTreeMap<String, String> = BTreeMap::new();
    for (h, ports) in allocators.iter() {
        for (o, _) in ports.cluster_owners(&key.namespace, &owner_name) {
            out.hypervisors.insert(h.clone());
            placed
                .entry(service_of(&o.component).to_string())
                .or_insert_with(|| h.clone());
        }
    }
    let wanted = match world.sip_clusters.get(key) {
        Some(sip) if !report.deleted => wanted_services(world, sip, &mut out),
        _ => Ok(Vec::new()),
    };
    let wanted = match wanted {
        Ok(w) => w,
        Err(e) => {
            out.error = Some(e);
            return failed(out);
        }
    };
    let wanted_names: BTreeSet<&str> = wanted.iter().map(|w| w.name.as_str()).collect();
    // Services no longer asked for let their ports go. A deleted SIPCluster's stay held
    // until its pods are gone ([`record_services`] releases them then): a sweep that fails
    // must still know where to look next time.
    for (h, ports) in allocators.iter_mut() {
        for (o, _) in ports.cluster_owners(&key.namespace, &owner_name) {
            let service = service_of(&o.component).to_string();
            if !wanted_names.contains(service.as_str()) {
                if !report.deleted {
                    ports.release(&o);
                }
                leave(&mut out.leaving, h, key, &service);
            }
        }
    }
    if report.deleted {
        for dirs in out.leaving.values_mut() {
            *dirs = vec![
                format!("{CONFIG_ROOT}/{}/{}", key.namespace, key.name),
                format!("{STATE_ROOT}/{}/{}", key.namespace, key.name),
            ];
        }
    }
    let mut chosen: Vec<(String, &Wanted)> = Vec::new();
    for w in &wanted {
        match place(
            world,
            &mut placing,
            key,
            &owner_name,
            w,
            placed.get(&w.name),
            &chosen,
        ) {
            Ok(h) => {
                // Moved (its hypervisor drained or gone): its directories there go too.
                if let Some(old) = placed.get(&w.name).filter(|old| **old != h) {
                    leave(&mut out.leaving, old, key, &w.name);
                }
                chosen.push((h, w));
            }
            Err(e) => {
                out.error = Some(e);
                return failed(out);
            }
        }
    }
    let providers: Vec<(String, String, u16)> = chosen
        .iter()
        .filter(|(_, w)| w.kind == ServiceKind::OidcProvider)
        .filter_map(|(h, w)| Some((h.clone(), w.name.clone(), w.ports.first()?.1)))
        .collect();
    let dropped = match oidc::keep_pki(world, key, &providers, &wanted_names, now) {
        Ok(d) => d,
        Err(e) => {
            out.error = Some(e);
            return failed(out);
        }
    };
    let (note, trust) = oidc::wire_cluster(world, report, &dropped);
    out.notes.extend(note);
    // All or nothing: a service that cannot be rendered (a Secret missing, a field wrong)
    // leaves every status as it was. What it renders to is made again once the clusters
    // are prepared ([`render_one`]).
    if let Some(sip) = world.sip_clusters.get(key) {
        for (h, w) in &chosen {
            if let Some(hypervisor) = world.hypervisors.get(&ObjectKey::cluster_scoped(h.clone()))
                && let Err(e) = render(world, report, sip, hypervisor, w, &options.render)
            {
                out.error = Some(e);
                return failed(out);
            }
        }
    }
    write_back(world, &placing.allocators);
    let chosen = chosen.into_iter().map(|(h, w)| (h, w.clone())).collect();
    Placed { out, chosen, trust }
}

fn render_one(
    world: &mut World,
    report: &SipReport,
    placed: Placed,
    options: &PlanOptions,
    now: time::OffsetDateTime,
) -> SipServices {
    let Placed {
        mut out, chosen, ..
    } = placed;
    // The jump hosts' client certificates, issued by the cluster's CA as preparing left it
    // (made in this run for a new cluster; rotated).
    let jump_hosts: BTreeSet<String> = chosen
        .iter()
        .filter(|(_, w)| w.kind == ServiceKind::JumpHost)
        .map(|(_, w)| w.name.clone())
        .collect();
    if let Err(e) = jump::keep_credentials(world, &report.key, &jump_hosts, now) {
        out.error = Some(e);
        return out;
    }
    let world = &*world;
    let Some(sip) = world.sip_clusters.get(&report.key) else {
        return out;
    };
    for (_, w) in &chosen {
        if w.kind == ServiceKind::JumpHost
            && let Err(why) = jump::kubeconfig(world, sip, &w.name)
        {
            out.waiting.push(why);
        }
    }
    let mut services = Vec::new();
    for (h, w) in &chosen {
        let Some(hypervisor) = world.hypervisors.get(&ObjectKey::cluster_scoped(h.clone())) else {
            continue;
        };
        match render(world, report, sip, hypervisor, w, &options.render) {
            Ok(s) => services.push(s),
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        }
    }
    for s in &services {
        out.hypervisors.insert(s.hypervisor.clone());
    }
    out.services = services;
    out
}

/// Service `service`'s directories to remove from `hypervisor`, once each.
fn leave(
    leaving: &mut BTreeMap<String, Vec<String>>,
    hypervisor: &str,
    key: &ObjectKey,
    service: &str,
) {
    let dirs = leaving.entry(hypervisor.to_string()).or_default();
    for d in [config_dir(key, service), state_dir(key, service)] {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
}

fn write_back(world: &mut World, allocators: &BTreeMap<String, PortAllocator>) {
    for h in world.hypervisors.values_mut() {
        if let Some(a) = allocators.get(&h.metadata.name) {
            a.write_status(&mut h.status);
        }
    }
}

/// The cluster `spec.clusterRef` names when it is one of ours.
fn own_cluster<'w>(world: &'w World, sip: &SipCluster) -> Option<(ObjectKey, &'w oi_api::Cluster)> {
    let r = sip.spec.cluster_ref.as_ref()?;
    let key = ObjectKey::new(sip.metadata.namespace_or_default(), r.name.clone());
    world.clusters.get(&key).map(|c| (key, c))
}

/// The services `sip` asks for that we run, with their ports; the others go into the notes.
fn wanted_services(
    world: &World,
    sip: &SipCluster,
    out: &mut SipServices,
) -> Result<Vec<Wanted>, String> {
    let s = &sip.spec.services;
    let mut wanted = Vec::new();
    let own_cluster = own_cluster(world, sip);
    for (i, lb) in s.load_balancer_control_plane.iter().enumerate() {
        let field = format!("spec.services.loadBalancerControlPlane[{i}]");
        if let Some((key, cluster)) = &own_cluster {
            let endpoint = cluster.status.api_server_endpoint.clone();
            out.notes.push(format!(
                "{field}: the control plane is cluster {key}'s, behind its own ingress{}",
                if endpoint.is_empty() {
                    String::new()
                } else {
                    format!(" ({endpoint})")
                }
            ));
            continue;
        }
        let LoadBalancerService {
            node_port,
            node_labels,
            ..
        } = lb;
        wanted.push(single_port(
            ServiceKind::LoadBalancerControlPlane,
            i,
            node_labels,
            "apiserver",
            *node_port,
        )?);
    }
    for (i, lb) in s.load_balancer_worker.iter().enumerate() {
        let field = format!("spec.services.loadBalancerWorker[{i}]");
        let LoadBalancerWorkerService {
            node_port_range,
            node_labels,
            ..
        } = lb;
        let (start, end) = (node_port_range.start, node_port_range.end);
        let count = end - start + 1;
        if !(1..=MAX_WORKER_PORTS).contains(&count) {
            return Err(format!(
                "{field}.nodePortRange: {start}-{end} holds {count} ports; at least 1 and at most {MAX_WORKER_PORTS}"
            ));
        }
        let mut ports = Vec::new();
        for p in start..=end {
            let p = port_number(&format!("{field}.nodePortRange"), p)?;
            ports.push((p.to_string(), p, format!("{field}.nodePortRange")));
        }
        wanted.push(Wanted {
            name: format!("{}-{i}", ServiceKind::LoadBalancerWorker.short()),
            kind: ServiceKind::LoadBalancerWorker,
            index: i,
            node_labels: node_labels.clone(),
            ports,
        });
    }
    for (i, jump) in s.jump_host.iter().enumerate() {
        let JumpHostService {
            node_port,
            node_labels,
            ..
        } = jump;
        wanted.push(single_port(
            ServiceKind::JumpHost,
            i,
            node_labels,
            "ssh",
            *node_port,
        )?);
    }
    for (i, oidc) in s.oidc_provider.iter().enumerate() {
        wanted.push(single_port(
            ServiceKind::OidcProvider,
            i,
            &oidc.node_labels,
            "https",
            oidc.node_port,
        )?);
    }
    Ok(wanted)
}

/// `port` of `field` as a host port: 1..65535.
fn port_number(field: &str, port: i64) -> Result<u16, String> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{field}: port {port} is outside 1..65535"))
}

/// Entry `index` of `kind`'s list: a service on one port, `nodePort`, named `port_name` in
/// its owner.
fn single_port(
    kind: ServiceKind,
    index: usize,
    node_labels: &BTreeMap<String, String>,
    port_name: &str,
    node_port: i64,
) -> Result<Wanted, String> {
    let field = format!("spec.services.{}[{index}].nodePort", kind.field());
    let port = port_number(&field, node_port)?;
    Ok(Wanted {
        name: format!("{}-{index}", kind.short()),
        kind,
        index,
        node_labels: node_labels.clone(),
        ports: vec![(port_name.to_string(), port, field)],
    })
}

/// What placing one SIPCluster's services works with: every hypervisor's ports, what each
/// holds (components and services, [`crate::schedule::held`]), and those lost for good.
struct Placing {
    allocators: BTreeMap<String, PortAllocator>,
    held: BTreeMap<String, Held>,
    lost: BTreeSet<String>,
}

/// Why hypervisor `h` cannot take service `w`, or `None` when it can. `placed`: `w` is on
/// `h` already; by the planner's rules ([`Closed`]) a cordon keeps new services off a
/// hypervisor and leaves those on it (as it does a cluster's components), a drain or a loss
/// moves them; a new service must fit in what the hypervisor's declared capacity has left.
fn unfit(
    h: &Hypervisor,
    placing: &Placing,
    namespace: &str,
    owner_name: &str,
    w: &Wanted,
    placed: bool,
) -> Option<String> {
    let name = h.metadata.name.as_str();
    if !h.spec.public {
        return Some("not public".into());
    }
    if let Some(closed) = Closed::of(h, placing.lost.contains(name))
        && (closed.moves() || !placed)
    {
        return Some(closed.describe().into());
    }
    for (k, v) in &w.node_labels {
        if h.metadata.labels.get(k) != Some(v) {
            return Some(format!("no label {k}={v}"));
        }
    }
    let ports = placing.allocators.get(name)?;
    for (port_name, port, field) in &w.ports {
        let owner = PortOwner::new(namespace, owner_name, &w.name, port_name);
        match ports.owner_of(*port) {
            Some(o) if *o == owner => {}
            Some(o) => {
                return Some(format!(
                    "{field}: port {port} is held by {}/{} ({})",
                    o.cluster_namespace, o.cluster, o.component
                ));
            }
            None if !ports.is_free(*port) => {
                let range = ports
                    .range()
                    .map_or("none".to_string(), |(a, b)| format!("{a}-{b}"));
                return Some(format!(
                    "{field}: port {port} is outside its port range {range}"
                ));
            }
            None => {}
        }
    }
    if !placed {
        let held = placing.held.get(name).copied().unwrap_or_default();
        let room = Room::of(h.spec.capacity.as_ref(), held.load, held.used);
        if let Some(short) = room.shortage(w.kind.requests()) {
            return Some(format!("capacity: {short}"));
        }
    }
    None
}

/// Chooses the hypervisor of `w` and claims its ports there, by the planner's rules
/// ([`crate::schedule`]): a placed service stays while its hypervisor can hold it; a new one
/// goes where fewest services of its kind of this SIPCluster are, then to the failure domain
/// with fewest of them, then beside the SIPCluster's other services (one address for the
/// tenant), then to the least loaded hypervisor, then by name.
fn place(
    world: &World,
    placing: &mut Placing,
    key: &ObjectKey,
    owner_name: &str,
    w: &Wanted,
    placed: Option<&String>,
    chosen: &[(String, &Wanted)],
) -> Result<String, String> {
    let ns = key.namespace.as_str();
    let get = |name: &str| world.hypervisors.get(&ObjectKey::cluster_scoped(name));
    fn domain(h: &Hypervisor) -> Domain<'_> {
        Domain::of(
            h.metadata.name.as_str(),
            h.metadata.labels.get(ZONE_LABEL).map(String::as_str),
        )
    }
    let mut spread = Spread::default();
    for (name, other) in chosen {
        if other.kind == w.kind
            && let Some(h) = get(name)
        {
            spread.add(h.metadata.name.as_str(), domain(h));
        }
    }
    let beside = |h: &Hypervisor| chosen.iter().any(|(n, _)| *n == h.metadata.name);
    let mut order: Vec<&Hypervisor> = Vec::new();
    if let Some(h) = placed.and_then(|p| get(p)) {
        order.push(h);
    }
    let mut rest: Vec<&Hypervisor> = world
        .hypervisors
        .values()
        .filter(|h| Some(&h.metadata.name) != placed)
        .collect();
    rest.sort_by_key(|h| {
        (
            spread.on_hypervisor(&h.metadata.name),
            spread.in_domain(&domain(h)),
            !beside(h),
            placing
                .held
                .get(&h.metadata.name)
                .map_or(0, |held| held.load),
            h.metadata.name.clone(),
        )
    });
    order.extend(rest);
    let mut why = Vec::new();
    for h in order {
        let name = h.metadata.name.clone();
        if !placing.allocators.contains_key(&name) {
            continue;
        }
        let here = placed.is_some_and(|p| *p == name);
        if let Some(reason) = unfit(h, placing, ns, owner_name, w, here) {
            if h.spec.public {
                why.push(format!("{name}: {reason}"));
            }
            continue;
        }
        // Its ports elsewhere (a hypervisor it had to leave) and ports it no longer asks
        // for go first.
        let keep: BTreeSet<PortOwner> = w
            .ports
            .iter()
            .map(|(n, _, _)| PortOwner::new(ns, owner_name, &w.name, n))
            .collect();
        for (other, a) in placing.allocators.iter_mut() {
            for (o, _) in a.cluster_owners(ns, owner_name) {
                if service_of(&o.component) == w.name && (other != &name || !keep.contains(&o)) {
                    a.release(&o);
                }
            }
        }
        let Some(ports) = placing.allocators.get_mut(&name) else {
            continue;
        };
        for (n, port, field) in &w.ports {
            let owner = PortOwner::new(ns, owner_name, &w.name, n);
            if ports.port_of(&owner) == Some(*port) {
                continue;
            }
            ports.release(&owner);
            if !ports.claim(&owner, *port) {
                return Err(format!("{field}: port {port} cannot be held on {name}"));
            }
        }
        if !here {
            placing
                .held
                .entry(name.clone())
                .or_default()
                .add(w.kind.requests());
        }
        return Ok(name);
    }
    let field = w.ports.first().map_or(
        format!("spec.services.{}[{}]", w.kind.field(), w.index),
        |(_, _, f)| f.clone(),
    );
    Err(format!(
        "{field}: no public hypervisor can run the {} {} ({})",
        w.kind.describe(),
        w.name,
        if why.is_empty() {
            "there is none".to_string()
        } else {
            why.join("; ")
        }
    ))
}

fn render(
    world: &World,
    report: &SipReport,
    sip: &SipCluster,
    hypervisor: &Hypervisor,
    w: &Wanted,
    options: &RenderOptions,
) -> Result<ServicePlan, String> {
    let key = &report.key;
    let site = Site {
        config: config_dir(key, &w.name),
        state: state_dir(key, &w.name),
        address: hypervisor.spec.ip_address.clone(),
        ports: {
            let mut p: Vec<u16> = w.ports.iter().map(|(_, p, _)| *p).collect();
            p.sort_unstable();
            p
        },
    };
    let (config, state, ports) = (&site.config, &site.state, &site.ports);
    let file = |name: &str, content: Vec<u8>, mode: u32| site.file(name, content, mode);
    let image = |i: oi_api::versions::Image| i.reference(options.image_repository.as_deref());
    let [config_mount, state_mount] = site.mounts();
    // The active hosts of a node set with their address on `interface`.
    let hosts = |role: &str, interface: &str| -> Vec<(String, String)> {
        report
            .selection
            .of(role, HostState::Active)
            .into_iter()
            .filter_map(|k| {
                let ip = report.hosts.get(k)?.addresses.get(interface)?;
                Some((k.name.clone(), url_host(&ip.to_string())))
            })
            .collect()
    };
    let s = &sip.spec.services;
    let (container, files) = match w.kind {
        ServiceKind::LoadBalancerControlPlane => {
            let lb = &s.load_balancer_control_plane[w.index];
            let backends = hosts("ControlPlane", &lb.node_interface_id);
            let cfg = control_plane_lb_config(ports[0], &backends);
            (
                haproxy_container(image(INFRA.haproxy), config, config_mount),
                vec![file("haproxy.cfg", cfg.into_bytes(), 0o644)],
            )
        }
        ServiceKind::LoadBalancerWorker => {
            let lb = &s.load_balancer_worker[w.index];
            let backends = hosts("Worker", &lb.node_interface_id);
            let cfg = worker_lb_config(ports, &backends);
            (
                haproxy_container(image(INFRA.haproxy), config, config_mount),
                vec![file("haproxy.cfg", cfg.into_bytes(), 0o644)],
            )
        }
        ServiceKind::JumpHost => {
            let jump = &s.jump_host[w.index];
            let secret_key =
                ObjectKey::new(key.namespace.clone(), jump.node_ssh_private_keys.clone());
            let at = format!("spec.services.jumpHost[{}].nodeSSHPrivateKeys", w.index);
            let secret = world
                .secrets
                .get(&secret_key)
                .ok_or_else(|| format!("{at}: Secret {secret_key} does not exist"))?;
            let mut files = Vec::new();
            let mut identities = Vec::new();
            let names: BTreeSet<&String> = secret
                .data
                .keys()
                .chain(secret.string_data.keys())
                .collect();
            for name in names {
                // A Secret key as Kubernetes allows them (`[-._a-zA-Z0-9]+`), and not `.`
                // or `..`: it becomes a file name and a line of the ssh config.
                let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
                if name.is_empty() || !name.chars().all(allowed) || name.starts_with('.') {
                    return Err(format!(
                        "{at}: Secret {secret_key} key {name:?} is not a file name ([-._a-zA-Z0-9], not starting with .)"
                    ));
                }
                let value = match secret.value(name) {
                    Some(Ok(v)) => v,
                    _ => {
                        return Err(format!("{at}: Secret {secret_key} key {name}: not base64"));
                    }
                };
                identities.push(name.clone());
                files.push(file(&format!("node-keys/{name}"), value, 0o600));
            }
            if identities.is_empty() {
                return Err(format!("{at}: Secret {secret_key} holds no key"));
            }
            let inventory = jump_host_inventory(report, &jump.node_interface_id);
            let host_names: Vec<(String, String)> = inventory
                .hosts
                .iter()
                .filter_map(|h| Some((h.name.clone(), h.ip.clone()?)))
                .collect();
            let inventory = serde_json::to_string_pretty(&inventory)
                .map_err(|e| format!("the jump host's inventory: {e}"))?;
            files.push(file("hosts.json", inventory.into_bytes(), 0o600));
            files.push(file(
                "authorized_keys",
                authorized_keys(&jump.ssh_authorized_keys).into_bytes(),
                0o644,
            ));
            files.push(file(
                "ssh_config",
                ssh_config(&identities, &host_names).into_bytes(),
                0o644,
            ));
            files.push(file(
                "sshd_config",
                sshd_config(&site.address, ports[0], state).into_bytes(),
                0o644,
            ));
            // Waiting for the cluster's endpoint is in the plan's `waiting`.
            if let Ok(Some(kubeconfig)) = jump::kubeconfig(world, sip, &w.name) {
                files.push(file("kubeconfig", kubeconfig.into_bytes(), 0o600));
            }
            let container = ContainerSpec {
                name: "sshd".into(),
                image: image(INFRA.jump_host),
                command: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    jump_host_start(config, state),
                ],
                args: Vec::new(),
                env: BTreeMap::new(),
                mounts: vec![config_mount, state_mount],
                privileged: false,
                resources: oi_api::versions::container_resources("sshd"),
            };
            (container, files)
        }
        ServiceKind::OidcProvider => {
            oidc::render(world, sip, w, &site, image(INFRA.oidc_provider))?
        }
    };
    let mut files = files;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let pod = PodSpec {
        namespace: key.namespace.clone(),
        name: format!("{}-{}", key.name, w.name),
        labels: BTreeMap::from([
            (
                labels::SIP_CLUSTER_NAMESPACE.to_string(),
                key.namespace.clone(),
            ),
            (labels::SIP_CLUSTER.to_string(), key.name.clone()),
            (labels::SERVICE.to_string(), w.name.clone()),
        ]),
        containers: vec![container],
    };
    let known_files = hypervisor
        .status
        .files
        .get(&key.namespace)
        .and_then(|c| c.get(&owner_cluster(&key.name)))
        .and_then(|c| c.get(&w.name))
        .cloned()
        .unwrap_or_default();
    let stale_files = crate::restarts::stale_files(&files, &known_files, &site.config);
    Ok(ServicePlan {
        stale_files,
        name: w.name.clone(),
        kind: w.kind,
        index: w.index,
        hypervisor: hypervisor.metadata.name.clone(),
        address: site.address,
        ports: site.ports,
        pod,
        files,
        known_files,
    })
}

fn haproxy_container(image: String, config: &str, mount: Mount) -> ContainerSpec {
    ContainerSpec {
        name: "haproxy".into(),
        image,
        command: vec!["haproxy".into()],
        args: vec![
            "-W".into(),
            "-db".into(),
            "-f".into(),
            format!("{config}/haproxy.cfg"),
        ],
        env: BTreeMap::new(),
        mounts: vec![mount],
        privileged: false,
        resources: oi_api::versions::container_resources("haproxy"),
    }
}

/// The control plane load balancer ([`crate::haproxy`]) on `port` in front of the control
/// plane hosts' API servers (`:6443`), each checked with `GET /readyz` over TLS. The check
/// does not verify the API server's certificate (the tenant's CA is not ours to know;
/// upstream SIP does the same): clients verify it end to end through the TCP stream.
pub fn control_plane_lb_config(port: u16, backends: &[(String, String)]) -> String {
    crate::haproxy::config(
        &[crate::haproxy::Frontend {
            name: "apiserver",
            backend: "apiservers",
            port,
            tls_only: true,
            check: crate::haproxy::Check::ApiServer { ca_file: None },
            servers: backends
                .iter()
                .map(|(name, ip)| crate::haproxy::Server::new(name, ip, APISERVER_PORT))
                .collect(),
        }],
        None,
    )
}

/// The worker load balancer ([`crate::haproxy`]): every port of the range forwarded to the
/// same port of every worker host, each checked by connecting. Not only TLS goes through it
/// (a tenant's node ports), so no ClientHello is asked for.
pub fn worker_lb_config(ports: &[u16], backends: &[(String, String)]) -> String {
    let names: Vec<String> = ports.iter().map(|p| format!("port-{p}")).collect();
    let frontends: Vec<crate::haproxy::Frontend<'_>> = ports
        .iter()
        .zip(&names)
        .map(|(port, name)| crate::haproxy::Frontend {
            name,
            backend: name,
            port: *port,
            tls_only: false,
            check: crate::haproxy::Check::Connect,
            servers: backends
                .iter()
                .map(|(server, ip)| crate::haproxy::Server::new(server, ip, *port))
                .collect(),
        })
        .collect();
    crate::haproxy::config(&frontends, None)
}

/// `authorized_keys`: the SIPCluster's keys (validated as sshd parses them), one per line.
pub fn authorized_keys(keys: &[String]) -> String {
    keys.iter().map(|k| format!("{}\n", k.trim())).collect()
}

/// The jump host user's ssh configuration: every node key offered to every host, each held
/// host reachable by its name; a host's key is trusted on first use and then pinned.
pub fn ssh_config(identities: &[String], hosts: &[(String, String)]) -> String {
    let mut out = String::from("Host *\n");
    for id in identities {
        let _ = writeln!(out, "  IdentityFile ~/.ssh/keys/{id}");
    }
    out.push_str(
        "  IdentitiesOnly yes\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile ~/.ssh/known_hosts\n",
    );
    for (name, ip) in hosts {
        let ip = ip.trim_start_matches('[').trim_end_matches(']');
        let _ = write!(out, "\nHost {name}\n  HostName {ip}\n");
    }
    out
}

/// sshd's configuration: the user's keys only, no password, no root.
pub fn sshd_config(address: &str, port: u16, state: &str) -> String {
    format!(
        "Port {port}\n\
         ListenAddress {address}\n\
         HostKey {state}/ssh_host_ed25519_key\n\
         PidFile none\n\
         AuthorizedKeysFile .ssh/authorized_keys\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PermitEmptyPasswords no\n\
         PermitRootLogin no\n\
         AllowUsers {JUMP_HOST_USER}\n\
         UsePAM no\n\
         StrictModes yes\n\
         X11Forwarding no\n\
         PermitTunnel no\n\
         LogLevel INFO\n"
    )
}

/// The jump host's start: a host key made once (kept in the state directory), the user's
/// home filled from the read-only configuration (owned by the user, keys 0600), then sshd.
pub fn jump_host_start(config: &str, state: &str) -> String {
    let home = format!("/home/{JUMP_HOST_USER}");
    format!(
        "set -eu\n\
         umask 077\n\
         [ -s {state}/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -C '' -f {state}/ssh_host_ed25519_key\n\
         mkdir -p {home}/.ssh/keys\n\
         cp {config}/authorized_keys {home}/.ssh/authorized_keys\n\
         cp {config}/ssh_config {home}/.ssh/config\n\
         cp {config}/node-keys/* {home}/.ssh/keys/\n\
         cp {config}/hosts.json {home}/hosts.json\n\
         if [ -f {config}/kubeconfig ]; then mkdir -p {home}/.kube; cp {config}/kubeconfig {home}/.kube/config; fi\n\
         chown -R 1000:1000 {home}\n\
         chmod 0755 {home}\n\
         mkdir -p /run/sshd\n\
         chmod 0755 /run/sshd\n\
         exec /usr/sbin/sshd -D -e -f {config}/sshd_config\n"
    )
}

mod jump;
pub mod oidc;
pub use jump::user as jump_host_user;
pub use oidc::{CA_LIFETIME, DEFAULT_CLIENT_ID, RENEW_BEFORE, SERVING_LIFETIME, issuer};

#[cfg(test)]
mod tests;

/// How a live SIPCluster's services ended a run: what its `Ready` condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicesOutcome {
    pub key: ObjectKey,
    /// The condition's message: its hosts, its services' addresses, what fails.
    pub message: String,
    pub ready: bool,
    /// What fails (empty when ready).
    pub failing: Vec<String>,
}

impl ServicesOutcome {
    /// One line for people.
    pub fn line(&self) -> String {
        format!("sipcluster {}: {}", self.key, self.message)
    }
}

/// Records what a run did with the SIPClusters' services: each service's file hashes in its
/// hypervisor's status (those of services that left dropped), and each SIPCluster's `Ready`
/// condition (upstream's reasons). Returns the outcome of every SIPCluster not deleted.
pub fn record_services(
    world: &mut World,
    reports: &[SipReport],
    plans: &[SipServices],
    results: &[SipServicesResult],
    now: time::OffsetDateTime,
) -> Vec<ServicesOutcome> {
    use oi_api::common::ConditionStatus;
    use oi_api::sip::{
        CONDITION_READY, REASON_INFRA_SERVICE_FAILURE, REASON_RECONCILIATION_SUCCEEDED,
    };
    let mut outcomes = Vec::new();
    for plan in plans {
        let key = &plan.key;
        let owner = owner_cluster(&key.name);
        let result = results.iter().find(|r| &r.key == key);
        if plan.deleted {
            // Gone only once its pods are: then its ports go, its file records below (no
            // service is planned), and it leaves the world. Otherwise everything stays for
            // the next try.
            if result.is_none_or(|r| r.sweep_error.is_some()) {
                continue;
            }
            for h in world.hypervisors.values_mut() {
                let mut ports = PortAllocator::from_hypervisor(h);
                let held = ports.cluster_owners(&key.namespace, &owner);
                if !held.is_empty() {
                    for (o, _) in held {
                        ports.release(&o);
                    }
                    ports.write_status(&mut h.status);
                }
            }
            world.sip_clusters.remove(key);
        }
        if plan.error.is_none() {
            for h in world.hypervisors.values_mut() {
                let name = h.metadata.name.clone();
                let Some(clusters) = h.status.files.get_mut(&key.namespace) else {
                    continue;
                };
                if let Some(services) = clusters.get_mut(&owner) {
                    services.retain(|s, _| {
                        plan.services
                            .iter()
                            .any(|p| &p.name == s && p.hypervisor == name)
                    });
                    if services.is_empty() {
                        clusters.remove(&owner);
                    }
                }
                if clusters.is_empty() {
                    h.status.files.remove(&key.namespace);
                }
            }
            for s in result.map(|r| r.services.as_slice()).unwrap_or_default() {
                let Some(hashes) = &s.hashes else { continue };
                if let Some(h) = world
                    .hypervisors
                    .get_mut(&ObjectKey::cluster_scoped(s.hypervisor.clone()))
                {
                    h.status
                        .files
                        .entry(key.namespace.clone())
                        .or_default()
                        .entry(owner.clone())
                        .or_default()
                        .insert(s.name.clone(), hashes.clone());
                }
            }
        }
        if plan.deleted {
            continue;
        }
        let report = reports.iter().find(|r| &r.key == key);
        let held = report
            .map(|r| super::describe_hosts(&r.selection))
            .unwrap_or_default();
        let running: Vec<String> = plan
            .services
            .iter()
            .map(|s| format!("{} {} at {}", s.kind.describe(), s.name, s.endpoint()))
            .collect();
        let mut failing: Vec<String> = Vec::new();
        if let Some(e) = &plan.error {
            failing.push(format!("cannot be placed: {e}"));
        }
        failing.extend(plan.waiting.iter().cloned());
        if let Some(r) = result {
            if let Some(e) = &r.sweep_error {
                failing.push(format!("removing what left: {e}"));
            }
            for s in &r.services {
                if let Some(f) = &s.failure {
                    failing.push(format!("{}: {f}", s.name));
                }
            }
        } else if plan.error.is_none() && !plan.services.is_empty() {
            failing.push("not run".into());
        }
        let mut message = format!("hosts {held}");
        if !running.is_empty() && plan.error.is_none() {
            message.push_str(&format!("; services: {}", running.join(", ")));
        }
        for note in &plan.notes {
            message.push_str(&format!("; {note}"));
        }
        let ready = failing.is_empty();
        if !ready {
            message.push_str(&format!("; failing: {}", failing.join("; ")));
        }
        let (status, reason) = if ready {
            (ConditionStatus::True, REASON_RECONCILIATION_SUCCEEDED)
        } else {
            (ConditionStatus::False, REASON_INFRA_SERVICE_FAILURE)
        };
        // An unschedulable one keeps the condition its selection set.
        let unschedulable = report.is_some_and(|r| !r.selection.shortfalls.is_empty());
        if !unschedulable && let Some(sip) = world.sip_clusters.get_mut(key) {
            sip.set_condition(CONDITION_READY, status, reason, &message, now);
        }
        outcomes.push(ServicesOutcome {
            key: key.clone(),
            message,
            ready,
            failing,
        });
    }
    outcomes
}
