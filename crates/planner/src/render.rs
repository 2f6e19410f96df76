//! Rendering: the pods and files one prepared component needs on its hypervisor, as
//! `oi_api::runtime` values. Pure and deterministic: same prepared world, same bytes, so that
//! content hashes only change when something that matters changes.
//!
//! ```text
//! control plane replica                        ingress
//!   pod <component>-etcd:  etcd                  pod <component>: haproxy (TCP mode)
//!   pod <component>:       kube-apiserver,         frontend *:<apiserver port>
//!                          kube-controller-manager  one backend server per API server,
//!                          kube-scheduler           TLS health check GET /readyz
//!   with the VPN on: kube-apiserver's            with the VPN on, pod <component>-vpn:
//!   --egress-selector-config-file: kubelets        oi-vpn-endpoint (privileged): WireGuard
//!   through the ingress's egress proxy             on <wireguard port>, egress proxy on
//!                                                  <vpn-proxy port> (see oi_vpn)
//! ```
//!
//! haproxy is told to reload its configuration and CA bundle (SIGUSR2, [`Rendered::reloads`]):
//! a backend added or removed, a CA rotated, refuse no connection through the ingress.
//! The VPN pod reads its files again when they change ([`Rendered::reloaded`]): a worker
//! joining or leaving rewrites its configuration and restarts nothing.
//!
//! Host paths follow `oi_api::runtime::paths`: files (certificates, keys, kubeconfigs,
//! configs) in the component's config directory, state (the etcd data directory) in its data
//! directory; both are mounted at the same path inside the containers, so arguments name
//! host paths.
//!
//! Certificates come from the prepared objects: CAs and key pairs from the Cluster spec, leaf
//! certificates of a replica from its Component status ([`certs`] names them).
//!
//! etcd membership: `--initial-cluster` and `--initial-cluster-state` come from the
//! replica's `status.etcdMember`, recorded when it was planned and never changed (see
//! `prepare`): the replicas of a new cluster found it together (`new`); a replica added
//! later joins as the learner the engine added (`existing`). etcd ignores both flags once
//! its data directory exists. A replica's kube-apiserver names only its own member in
//! `--etcd-servers`, so no replica's flags change when another is added or removed; an API
//! server beyond the replicas names every member.

use std::collections::BTreeMap;

use oi_api::runtime::{ContainerSpec, HostFile, Mount, PodSpec, labels, paths};
use oi_api::versions::{self, INFRA};
use oi_api::{Cluster, Component, ComponentRole, ObjectKey, World};

use crate::ports::names;
use crate::prepare::replica_order;
use crate::{Error, Result, url_host};

mod control_plane;

/// Names of a control plane replica's leaf certificates in its Component status.
pub mod certs {
    /// `serverCertificates`: kube-apiserver serving certificate.
    pub const APISERVER: &str = "apiserver";
    /// `serverCertificates`: etcd serving (and client) certificate.
    pub const ETCD_SERVER: &str = "etcd-server";
    /// `serverCertificates`: etcd peer certificate.
    pub const ETCD_PEER: &str = "etcd-peer";
    /// `clientCertificates`: kube-apiserver towards etcd.
    pub const APISERVER_ETCD_CLIENT: &str = "apiserver-etcd-client";
    /// `clientCertificates`: kube-apiserver towards kubelets.
    pub const APISERVER_KUBELET_CLIENT: &str = "apiserver-kubelet-client";
    /// `clientCertificates`: kube-controller-manager towards kube-apiserver.
    pub const CONTROLLER_MANAGER: &str = "controller-manager";
    /// `clientCertificates`: kube-scheduler towards kube-apiserver.
    pub const SCHEDULER: &str = "scheduler";
    /// `serverCertificates` of an ingress: its egress proxy into the cluster VPN.
    pub const VPN_PROXY: &str = "vpn-proxy";
}

/// Settings of rendering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Image repository override (see `oi_api::versions`), e.g. `localhost/oneinfra`.
    pub image_repository: Option<String>,
}

/// What one component needs on its hypervisor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Pods, by name.
    pub pods: Vec<PodSpec>,
    /// Files, by path.
    pub files: Vec<HostFile>,
    /// Paths of files whose reader takes a change by itself, or is told to
    /// ([`Rendered::reloads`]): writing them restarts nothing.
    pub reloaded: std::collections::BTreeSet<String>,
    /// How running pods are told to read some of their files again.
    pub reloads: Vec<Reload>,
    /// The ingress: haproxy's runtime API, through which a replica's API server is taken
    /// out while it restarts.
    pub runtime_api: Option<crate::haproxy::RuntimeApi>,
}

/// How a running pod is told to read some of its files again instead of restarting: a
/// command run in one of its containers when one of `files` changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reload {
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    pub files: std::collections::BTreeSet<String>,
}

/// Renders a prepared component: a control plane replica or an ingress.
///
/// # Errors
///
/// [`Error::Render`] naming the component and what is missing (the component, its cluster,
/// hypervisor, a host port, a CA or a certificate) when the world is not prepared.
pub fn render_component(
    world: &World,
    component: &ObjectKey,
    options: &RenderOptions,
) -> Result<Rendered> {
    let missing = |what: &str| Error::Render {
        component: component.clone(),
        missing: what.to_string(),
    };
    let c = world
        .components
        .get(component)
        .ok_or_else(|| missing("component"))?;
    let cluster = world.cluster_of(c).ok_or_else(|| missing("cluster"))?;
    let hypervisor = world
        .hypervisor_of(c)
        .ok_or_else(|| missing("hypervisor"))?;
    let cx = ComponentRenderer {
        world,
        key: component,
        component: c,
        cluster,
        ip: hypervisor.spec.ip_address.as_str(),
        config: paths::component_config_dir(
            &component.namespace,
            &c.spec.cluster,
            &c.metadata.name,
        ),
        data: paths::component_data_dir(&component.namespace, &c.spec.cluster, &c.metadata.name),
        options,
    };
    let mut rendered = match c.spec.role {
        ComponentRole::ControlPlane => cx.control_plane(true)?,
        ComponentRole::ApiServer => cx.control_plane(false)?,
        ComponentRole::ControlPlaneIngress => cx.ingress()?,
    };
    // Every container's CPU weight and memory limit, from the versions table.
    for c in rendered.pods.iter_mut().flat_map(|p| &mut p.containers) {
        c.resources = versions::container_resources(&c.name);
    }
    rendered.pods.sort_by(|a, b| a.name.cmp(&b.name));
    rendered.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(rendered)
}

struct ComponentRenderer<'a> {
    world: &'a World,
    key: &'a ObjectKey,
    component: &'a Component,
    cluster: &'a Cluster,
    ip: &'a str,
    config: String,
    data: String,
    options: &'a RenderOptions,
}

/// `--initial-cluster`'s value: `name=peerURL`, comma separated.
fn initial_cluster(start: &oi_api::EtcdMemberStart) -> String {
    start
        .initial_cluster
        .iter()
        .map(|(name, url)| format!("{name}={url}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A replica's etcd pod as rendered, started with `start` instead: what a member that
/// lost its data joins again with (see [`crate::ComponentPlan::etcd_rejoin`]). The same
/// pod [`render_component`] renders once `status.etcdMember` is `start`.
pub fn etcd_pod_with(pod: &PodSpec, start: &oi_api::EtcdMemberStart) -> PodSpec {
    let mut pod = pod.clone();
    for c in pod.containers.iter_mut().filter(|c| c.name == "etcd") {
        for arg in &mut c.args {
            if arg.starts_with("--initial-cluster=") {
                *arg = format!("--initial-cluster={}", initial_cluster(start));
            } else if arg.starts_with("--initial-cluster-state=") {
                *arg = format!(
                    "--initial-cluster-state={}",
                    start.initial_cluster_state.as_str()
                );
            }
        }
    }
    pod
}

/// `--name=value` arguments from a map: sorted by flag name, one value each.
fn flags(map: BTreeMap<&str, String>) -> Vec<String> {
    map.into_iter().map(|(k, v)| format!("--{k}={v}")).collect()
}

impl ComponentRenderer<'_> {
    fn missing(&self, what: impl Into<String>) -> Error {
        Error::Render {
            component: self.key.clone(),
            missing: what.into(),
        }
    }

    fn port(&self, c: &Component, name: &str) -> Result<u16> {
        c.status
            .host_port(name)
            .ok_or_else(|| self.missing(format!("host port {name} of {}", c.metadata.name)))
    }

    fn path(&self, file: &str) -> String {
        format!("{}/{file}", self.config)
    }

    fn image(&self, image: versions::Image) -> String {
        image.reference(self.options.image_repository.as_deref())
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::MANAGED.to_string(), "true".to_string()),
            (
                labels::CLUSTER_NAMESPACE.to_string(),
                self.key.namespace.clone(),
            ),
            (
                labels::CLUSTER.to_string(),
                self.component.spec.cluster.clone(),
            ),
            (
                labels::COMPONENT.to_string(),
                self.component.metadata.name.clone(),
            ),
        ])
    }

    fn config_mount(&self) -> Mount {
        Mount {
            host_path: self.config.clone(),
            container_path: self.config.clone(),
            readonly: true,
        }
    }

    fn pod(&self, name: String, containers: Vec<ContainerSpec>) -> PodSpec {
        PodSpec {
            namespace: self.key.namespace.clone(),
            name,
            labels: self.labels(),
            containers,
        }
    }

    fn file(&self, name: &str, content: &str, mode: u32) -> HostFile {
        HostFile {
            path: self.path(name),
            content: content.as_bytes().to_vec(),
            mode,
        }
    }

    /// The certificates to trust for the CA at `field` of the cluster spec: its certificate,
    /// and during a rotation the other one ([`crate::rotation::trust_bundle`]).
    fn ca_cert(&self, ca: Option<&oi_api::Certificate>, field: &str) -> Result<String> {
        let kind = oi_pki::CaKind::ALL
            .into_iter()
            .find(|k| k.manifest_field() == field);
        match kind {
            Some(kind) => crate::rotation::trust_bundle(self.cluster, kind),
            None => ca
                .filter(|c| !c.certificate.is_empty())
                .map(|c| c.certificate.clone()),
        }
        .ok_or_else(|| self.missing(format!("cluster CA {field}")))
    }

    /// The live components of the cluster in `role`, by name.
    fn live(&self, role: ComponentRole) -> impl Iterator<Item = &Component> {
        self.world.components.values().filter(move |c| {
            c.metadata.namespace_or_default() == self.key.namespace
                && c.spec.cluster == self.component.spec.cluster
                && c.spec.role == role
                && !c.metadata.is_being_deleted()
        })
    }

    /// The live control plane replicas of the cluster, by replica index then name.
    fn replicas(&self) -> Vec<&Component> {
        let mut replicas: Vec<&Component> = self.live(ComponentRole::ControlPlane).collect();
        replicas.sort_by_key(|c| replica_order(&self.component.spec.cluster, &c.metadata.name));
        replicas
    }

    fn ip_of(&self, c: &Component) -> Result<String> {
        self.world
            .hypervisor_of(c)
            .map(|h| url_host(&h.spec.ip_address))
            .ok_or_else(|| self.missing(format!("hypervisor of {}", c.metadata.name)))
    }

    fn ingress(&self) -> Result<Rendered> {
        let port = self.port(self.component, names::APISERVER)?;
        let ca = self.ca_cert(
            self.cluster.spec.api_server.ca.as_ref(),
            "spec.apiServer.ca",
        )?;
        let mut backends = Vec::new();
        for r in self
            .replicas()
            .into_iter()
            .chain(self.live(ComponentRole::ApiServer))
        {
            if r.spec.hypervisor.is_none() {
                continue;
            }
            backends.push((
                r.metadata.name.clone(),
                self.ip_of(r)?,
                self.port(r, names::APISERVER)?,
            ));
        }
        let runtime_port = self.port(self.component, names::HAPROXY_RUNTIME)?;
        let haproxy_cfg = haproxy_config(
            port,
            &self.path("apiserver-ca.crt"),
            &backends,
            runtime_port,
        );
        let mut files = vec![
            self.file("apiserver-ca.crt", &ca, 0o644),
            self.file("haproxy.cfg", &haproxy_cfg, 0o644),
        ];
        let haproxy = ContainerSpec {
            name: "haproxy".into(),
            image: self.image(INFRA.haproxy),
            command: vec!["haproxy".into()],
            args: vec![
                "-W".into(),
                "-db".into(),
                "-f".into(),
                self.path("haproxy.cfg"),
            ],
            env: BTreeMap::new(),
            mounts: vec![self.config_mount()],
            privileged: false,
            resources: None,
        };
        let mut pods = vec![self.pod(self.component.metadata.name.clone(), vec![haproxy])];
        // haproxy in master-worker mode (-W) reloads on SIGUSR2, its listening sockets handed
        // to the new worker: a new backend or CA bundle refuses no connection.
        let haproxy_files: std::collections::BTreeSet<String> =
            files.iter().map(|f| f.path.clone()).collect();
        let mut reloaded = haproxy_files.clone();
        let reloads = vec![Reload {
            pod: self.component.metadata.name.clone(),
            container: "haproxy".into(),
            command: vec!["sh".into(), "-c".into(), "kill -USR2 1".into()],
            files: haproxy_files,
        }];
        if let Some((pod, file)) = self.vrrp()? {
            pods.push(pod);
            files.push(file);
        }
        if self.cluster.spec.vpn.enabled {
            let (pod, vpn_files) = self.vpn_endpoint()?;
            pods.push(pod);
            for f in vpn_files {
                reloaded.insert(f.path.clone());
                files.push(f);
            }
        }
        Ok(Rendered {
            pods,
            files,
            reloaded,
            reloads,
            runtime_api: Some(crate::haproxy::RuntimeApi {
                pod: self.component.metadata.name.clone(),
                container: "haproxy".into(),
                port: runtime_port,
                backend: INGRESS_BACKEND.into(),
            }),
        })
    }

    /// With a shared address (`spec.ingress.virtualIP`), the ingress's VRRP pod: keepalived,
    /// holding the address while this ingress is the master, and its configuration (unicast to
    /// the other ingresses' hypervisors; the interface, found by the hypervisor's address when
    /// it starts). A changed configuration restarts it (the address moves meanwhile).
    fn vrrp(&self) -> Result<Option<(PodSpec, HostFile)>> {
        let Some(ingress) = &self.cluster.spec.ingress else {
            return Ok(None);
        };
        let (Some(vip), Some(router_id)) = (ingress.virtual_ip(), ingress.router_id()) else {
            return Ok(None);
        };
        let ingresses: Vec<&Component> = self
            .live(ComponentRole::ControlPlaneIngress)
            .filter(|i| i.spec.hypervisor.is_some())
            .collect();
        let me = ingresses
            .iter()
            .position(|i| i.metadata.name == self.component.metadata.name)
            .unwrap_or(0);
        let mut peers = Vec::new();
        for i in &ingresses {
            if i.metadata.name != self.component.metadata.name {
                peers.push(self.ip_of(i)?);
            }
        }
        let config = keepalived_config(&KeepalivedConfig {
            router_name: &self.component.metadata.name,
            router_id,
            // The first ingress by name first; all start as backups and none takes the
            // address back once another holds it (nopreempt).
            priority: 150u8.saturating_sub(u8::try_from(me * 10).unwrap_or(u8::MAX)),
            source: self.ip,
            peers: &peers,
            address: vip,
        });
        let file = self.file(KEEPALIVED_CONFIG, &config, 0o644);
        let container = ContainerSpec {
            name: "keepalived".into(),
            image: self.image(INFRA.keepalived),
            command: vec!["sh".into(), "-c".into(), KEEPALIVED_START.into()],
            args: vec![
                "keepalived".into(),
                self.path(KEEPALIVED_CONFIG),
                self.ip.to_string(),
                self.port(self.component, names::APISERVER)?.to_string(),
            ],
            env: BTreeMap::new(),
            mounts: vec![self.config_mount()],
            // VRRP's raw sockets and the address it adds and removes.
            privileged: true,
            resources: None,
        };
        let pod = self.pod(
            format!("{}-vrrp", self.component.metadata.name),
            vec![container],
        );
        Ok(Some((pod, file)))
    }

    /// The cluster VPN's endpoint pod and its files (see [`crate::vpn`] and `oi_vpn`).
    fn vpn_endpoint(&self) -> Result<(PodSpec, Vec<HostFile>)> {
        let c = self.component;
        let vpn = &self.cluster.spec.vpn;
        let cidr = crate::vpn::cidr(self.cluster).map_err(|e| self.missing(e))?;
        if vpn.private_key.is_empty() {
            return Err(self.missing("key spec.vpn.privateKey"));
        }
        let listen = self.port(c, names::WIREGUARD)?;
        let proxy_port = self.port(c, names::VPN_PROXY)?;
        let (cert, key) = self.leaf(
            &c.status.server_certificates,
            "serverCertificates",
            certs::VPN_PROXY,
        )?;
        let client_ca = self.ca_cert(
            self.cluster
                .spec
                .certificate_authorities
                .kubelet_client
                .as_ref(),
            "spec.certificateAuthorities.kubeletClient",
        )?;
        let config =
            crate::vpn::endpoint_config(&vpn.private_key, listen, &self.cluster.status.vpn_peers);
        let files = vec![
            HostFile {
                path: self.path(VPN_CONFIG),
                content: config.into_bytes(),
                mode: crate::vpn::CONFIG_MODE,
            },
            self.file("vpn-proxy.crt", &cert, 0o644),
            self.file("vpn-proxy.key", &key, 0o600),
            self.file("vpn-proxy-client-ca.crt", &client_ca, 0o644),
        ];
        let state = format!("{}/vpn", self.data);
        let args = flags(BTreeMap::from([
            ("address", crate::vpn::endpoint_address(cidr).to_string()),
            ("config", self.path(VPN_CONFIG)),
            (
                "interface",
                crate::vpn::interface_name(&self.key.namespace, &c.spec.cluster),
            ),
            ("proxy-certificate", self.path("vpn-proxy.crt")),
            ("proxy-client-ca", self.path("vpn-proxy-client-ca.crt")),
            (
                "proxy-listen",
                // Behind a shared address, on every address of the hypervisor: the shared one
                // too, while this ingress holds it.
                if self.cluster.ingress_virtual_ip().is_some() {
                    format!("0.0.0.0:{proxy_port}")
                } else {
                    format!("{}:{proxy_port}", url_host(self.ip))
                },
            ),
            ("proxy-private-key", self.path("vpn-proxy.key")),
            ("state-dir", state),
        ]));
        let container = ContainerSpec {
            name: "vpn-endpoint".into(),
            image: self.image(INFRA.vpn_endpoint),
            command: vec!["oi-vpn-endpoint".into()],
            args,
            env: BTreeMap::new(),
            mounts: vec![
                self.config_mount(),
                Mount {
                    host_path: self.data.clone(),
                    container_path: self.data.clone(),
                    readonly: false,
                },
            ],
            // A tun device, a network namespace of its own, links moved into it.
            privileged: true,
            resources: None,
        };
        Ok((
            self.pod(format!("{}-vpn", c.metadata.name), vec![container]),
            files,
        ))
    }

    /// `https://<ip>:<port>` of the cluster's egress proxy into its VPN, with the VPN on.
    fn egress_proxy_url(&self) -> Result<Option<String>> {
        if !self.cluster.spec.vpn.enabled {
            return Ok(None);
        }
        let ingress = self
            .live(ComponentRole::ControlPlaneIngress)
            .next()
            .ok_or_else(|| self.missing("the cluster's ingress (its VPN endpoint)"))?;
        // The shared address when the ingresses have one: it follows the VPN endpoint.
        let host = match self.cluster.ingress_virtual_ip() {
            Some(ip) => ip.to_string(),
            None => self.ip_of(ingress)?,
        };
        Ok(Some(format!(
            "https://{host}:{}",
            self.port(ingress, names::VPN_PROXY)?
        )))
    }

    fn leaf(
        &self,
        map: &BTreeMap<String, oi_api::Certificate>,
        status_field: &str,
        name: &str,
    ) -> Result<(String, String)> {
        map.get(name)
            .filter(|c| !c.certificate.is_empty() && !c.private_key.is_empty())
            .map(|c| (c.certificate.clone(), c.private_key.clone()))
            .ok_or_else(|| self.missing(format!("certificate status.{status_field}.{name}")))
    }
}

/// The file name of keepalived's configuration in the ingress's directory.
pub const KEEPALIVED_CONFIG: &str = "keepalived.conf";

/// How the VRRP container starts (`sh -c`, `$1` the configuration, `$2` the hypervisor's
/// address, `$3` the ingress's port): the interface holding that address put in the
/// configuration, the health check written (the hypervisor still holds its address, and
/// haproxy listens: a socket in LISTEN on the port, read from /proc, connecting to nothing),
/// keepalived run in the foreground.
const KEEPALIVED_START: &str = r#"set -eu
ifc=$(ip -o -4 addr show | awk -v ip="$2" '{split($4, a, "/"); if (a[1] == ip) {print $2; exit}}')
if [ -z "$ifc" ]; then echo "no interface holds $2" >&2; exit 1; fi
mkdir -p /run/keepalived
sed "s/@INTERFACE@/$ifc/g" "$1" > /run/keepalived/keepalived.conf
port=$(printf '%04X' "$3")
printf '#!/bin/sh\nip -o -4 addr show | grep -q "inet %s/" || exit 1\ngrep -q ":%s [0-9A-F]*:[0-9A-F]* 0A " /proc/net/tcp6 /proc/net/tcp\n' "$2" "$port" > /run/keepalived/healthy
chmod 0755 /run/keepalived/healthy
exec keepalived -n -l -D -f /run/keepalived/keepalived.conf -p /run/keepalived/keepalived.pid -r /run/keepalived/vrrp.pid"#;

/// What one ingress's keepalived is told.
pub struct KeepalivedConfig<'a> {
    /// This ingress's name (keepalived's router name, in its logs).
    pub router_name: &'a str,
    pub router_id: u8,
    pub priority: u8,
    /// This hypervisor's address: VRRP advertisements come from it.
    pub source: &'a str,
    /// The other ingresses' hypervisors' addresses: advertisements go to them (unicast).
    pub peers: &'a [String],
    /// The shared address.
    pub address: std::net::Ipv4Addr,
}

/// keepalived's configuration: one VRRP instance, every router a backup at start that does
/// not take the address back (`nopreempt`), advertisements every second unicast to the
/// peers, the address as a /32 on the interface `@INTERFACE@` (filled in at start): a /32
/// is no secondary of the hypervisor's subnet, so it never outlives the hypervisor's own
/// address as that subnet's primary. Two failed health checks in a row (the hypervisor lost
/// its address, or haproxy does not listen) put the router in FAULT: it lets the address go.
pub fn keepalived_config(c: &KeepalivedConfig<'_>) -> String {
    let mut peers = String::new();
    for p in c.peers {
        peers.push_str(&format!("    {p}\n"));
    }
    format!(
        "global_defs {{\n  router_id {name}\n  enable_script_security\n  script_user root\n}}\n\n\
         vrrp_script healthy {{\n  \
           script \"/run/keepalived/healthy\"\n  \
           interval 1\n  \
           fall 2\n  \
           rise 2\n\
         }}\n\n\
         vrrp_instance ingress {{\n  \
           state BACKUP\n  \
           interface @INTERFACE@\n  \
           virtual_router_id {id}\n  \
           priority {priority}\n  \
           advert_int 1\n  \
           nopreempt\n  \
           unicast_src_ip {source}\n  \
           unicast_peer {{\n{peers}  }}\n  \
           virtual_ipaddress {{\n    {address}/32 dev @INTERFACE@\n  }}\n  \
           track_script {{\n    healthy\n  }}\n\
         }}\n",
        name = c.router_name,
        id = c.router_id,
        priority = c.priority,
        source = c.source,
        address = c.address,
    )
}

/// The file name of the VPN endpoint's configuration in the ingress's directory.
pub const VPN_CONFIG: &str = "vpn.conf";
/// The file name of kube-apiserver's egress selector configuration, with the VPN on.
pub const EGRESS_SELECTOR: &str = "egress-selector.yaml";
/// The file name of kube-apiserver's structured authentication configuration
/// ([`authentication_config`]), which it reads again when it changes.
pub const AUTHENTICATION_CONFIG: &str = "authentication-config.yaml";

/// kube-apiserver's `AuthenticationConfiguration` (`apiserver.config.k8s.io/v1`, GA and
/// locked on since Kubernetes 1.34): one JWT authenticator per issuer the cluster trusts
/// ([`oi_api::KubeApiServer::jwt_issuers`]), none when it trusts none. Each carries what
/// `--oidc-*` used to: the issuer URL, its audiences (`clientID` first; any one of several
/// is enough), its CA inline, the username claim (`sub` when unset) and prefix (unset:
/// `<issuerURL>#`, or nothing for `email`; `-`: nothing), the groups claim and prefix.
pub fn authentication_config(api_server: &oi_api::KubeApiServer) -> String {
    let jwt: Vec<serde_json::Value> = api_server
        .jwt_issuers()
        .map(|(_, o)| {
            let mut audiences = vec![o.client_id.clone()];
            audiences.extend(o.audiences.iter().cloned());
            let mut issuer = serde_json::json!({ "url": o.issuer_url, "audiences": audiences });
            if !o.audiences.is_empty() {
                issuer["audienceMatchPolicy"] = "MatchAny".into();
            }
            if !o.ca.is_empty() {
                issuer["certificateAuthority"] = o.ca.clone().into();
            }
            let claim = if o.username_claim.is_empty() {
                oi_api::cluster::DEFAULT_OIDC_USERNAME_CLAIM
            } else {
                o.username_claim.as_str()
            };
            let prefix = match o.username_prefix.as_deref() {
                Some("-") => String::new(),
                Some(p) => p.to_string(),
                None if claim == "email" => String::new(),
                None => format!("{}#", o.issuer_url),
            };
            let mut mappings =
                serde_json::json!({ "username": { "claim": claim, "prefix": prefix } });
            if !o.groups_claim.is_empty() {
                mappings["groups"] = serde_json::json!({
                    "claim": o.groups_claim,
                    "prefix": o.groups_prefix.clone().unwrap_or_default(),
                });
            }
            serde_json::json!({ "issuer": issuer, "claimMappings": mappings })
        })
        .collect();
    let config = serde_json::json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": jwt,
    });
    serde_yaml_ng::to_string(&config).unwrap_or_default()
}

/// kube-apiserver's `EgressSelectorConfiguration` with the VPN on: traffic to the cluster
/// (kubelets: logs, exec, the node proxy) through the ingress's egress proxy, HTTP
/// `CONNECT` over TLS, the proxy verified against the API server CA, the API server
/// presenting its kubelet client certificate.
pub fn egress_selector_config(url: &str, ca: &str, cert: &str, key: &str) -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\n\
         kind: EgressSelectorConfiguration\n\
         egressSelections:\n\
         - name: cluster\n  \
           connection:\n    \
             proxyProtocol: HTTPConnect\n    \
             transport:\n      \
               tcp:\n        \
                 url: {url}\n        \
                 tlsConfig:\n          \
                   caBundle: {ca}\n          \
                   clientCert: {cert}\n          \
                   clientKey: {key}\n"
    )
}

/// The ingress's haproxy backend: its servers are the API servers, named after their
/// components.
pub const INGRESS_BACKEND: &str = "apiservers";

/// haproxy in TCP mode in front of the API servers ([`crate::haproxy`]), each health-checked
/// over TLS (verified against the API server CA) on `GET /readyz`, with its runtime API on
/// loopback port `runtime_port`.
pub fn haproxy_config(
    port: u16,
    ca_file: &str,
    backends: &[(String, String, u16)],
    runtime_port: u16,
) -> String {
    crate::haproxy::config(
        &[crate::haproxy::Frontend {
            name: "apiserver",
            backend: INGRESS_BACKEND,
            port,
            tls_only: true,
            check: crate::haproxy::Check::ApiServer {
                ca_file: Some(ca_file),
            },
            servers: backends
                .iter()
                .map(|(name, host, port)| crate::haproxy::Server::new(name, host, *port))
                .collect(),
        }],
        Some(runtime_port),
    )
}

#[cfg(test)]
mod tests;
