//! A control plane replica's rendering: its files (CAs, keys, leaf certificates,
//! kubeconfigs), the flags of each of its programs, and its two pods (etcd; kube-apiserver,
//! controller-manager and scheduler). An API server alone (`spec.apiServerReplicas`) is the
//! same API server with only the files it reads.

use std::collections::BTreeMap;

use super::certs;
use oi_api::runtime::{ContainerSpec, HostFile, Mount, PodSpec, paths};
use oi_api::versions::{self, KubernetesRelease};
use oi_api::{Certificate, Component};

use super::{
    AUTHENTICATION_CONFIG, ComponentRenderer, EGRESS_SELECTOR, Rendered, authentication_config,
    egress_selector_config,
};
use super::{flags, initial_cluster};
use crate::ports::names;
use crate::{Result, url_host};

/// A leaf certificate of a component's status: its map, the status field's name, its name.
type Leaf<'a> = (
    &'a BTreeMap<String, Certificate>,
    &'static str,
    &'static str,
);

impl ComponentRenderer<'_> {
    /// A control plane replica (`whole`: etcd member, kube-apiserver, controller-manager,
    /// scheduler), or an API server alone (`spec.apiServerReplicas`): the same API server,
    /// with only the files it reads.
    pub(super) fn control_plane(&self, whole: bool) -> Result<Rendered> {
        let spec = &self.cluster.spec;
        let c = self.component;
        let release = versions::find_release(&spec.kubernetes_version).ok_or_else(|| {
            self.missing(format!(
                "supported kubernetes version (cluster has {:?})",
                spec.kubernetes_version
            ))
        })?;
        // etcd membership (see the module documentation of `render`).
        let replicas = self.replicas();
        if whole && !replicas.iter().any(|r| r.metadata.name == c.metadata.name) {
            return Err(self.missing("live control plane replica (it is being deleted)"));
        }
        let mut files = self.control_plane_files(whole)?;
        // A replica's API server stores in its own etcd member only (kubeadm's stacked
        // layout), so a replica added or removed restarts no other API server; the engine
        // takes it out of the ingress while that member restarts. An API server alone uses
        // every replica's member.
        let mut etcd_servers = Vec::new();
        for r in replicas
            .iter()
            .filter(|r| !whole || r.metadata.name == c.metadata.name)
        {
            etcd_servers.push(format!(
                "https://{}:{}",
                self.ip_of(r)?,
                self.port(r, names::ETCD_CLIENT)?
            ));
        }
        etcd_servers.sort();
        let apiserver = self.container(
            "kube-apiserver",
            release.kube_apiserver,
            self.apiserver_args(&etcd_servers, &mut files)?,
            vec![self.config_mount()],
        );
        if !whole {
            return Ok(Rendered {
                pods: vec![self.pod(c.metadata.name.clone(), vec![apiserver])],
                files,
                reloaded: [self.path(AUTHENTICATION_CONFIG)].into(),
                reloads: Vec::new(),
                runtime_api: None,
            });
        }
        let kube_pod = self.pod(
            c.metadata.name.clone(),
            vec![
                apiserver,
                self.container(
                    "kube-controller-manager",
                    release.kube_controller_manager,
                    self.controller_manager_args(),
                    vec![self.config_mount()],
                ),
                self.container(
                    "kube-scheduler",
                    release.kube_scheduler,
                    self.scheduler_args(),
                    vec![self.config_mount()],
                ),
            ],
        );
        // etcd reads its own serving and peer certificates from disk again for every new
        // connection (since 3.2, etcd-io/etcd#7784): a reissued one restarts nothing. Its
        // trusted CA files it reads only at start (etcd-io/etcd#11555): those restart it.
        // kube-apiserver reads its authentication configuration again when it changes.
        let reloaded = [
            "etcd-server.crt",
            "etcd-server.key",
            "etcd-peer.crt",
            "etcd-peer.key",
            AUTHENTICATION_CONFIG,
        ]
        .into_iter()
        .map(|f| self.path(f))
        .collect();
        Ok(Rendered {
            pods: vec![self.etcd_pod(release)?, kube_pod],
            files,
            reloaded,
            reloads: Vec::new(),
            runtime_api: None,
        })
    }

    /// One container of the control plane: `name` is its command too.
    fn container(
        &self,
        name: &str,
        image: versions::Image,
        args: Vec<String>,
        mounts: Vec<Mount>,
    ) -> ContainerSpec {
        ContainerSpec {
            name: name.to_string(),
            image: self.image(image),
            command: vec![name.to_string()],
            args,
            env: BTreeMap::new(),
            mounts,
            privileged: false,
            resources: None,
        }
    }

    /// The files a replica (`whole`) or an API server alone reads: CA certificates, the
    /// cluster signer and service-account keys, its leaf certificates, and (a replica) the
    /// controller-manager's and scheduler's kubeconfigs.
    fn control_plane_files(&self, whole: bool) -> Result<Vec<HostFile>> {
        let spec = &self.cluster.spec;
        let c = self.component;
        let cas = &spec.certificate_authorities;
        let mut files = Vec::new();
        let mut add = |name: &str, content: &str, mode: u32| {
            files.push(self.file(name, content, mode));
        };
        let ca_files = [
            (
                "apiserver-ca.crt",
                spec.api_server.ca.as_ref(),
                "spec.apiServer.ca",
            ),
            (
                "apiserver-client-ca.crt",
                cas.api_server_client.as_ref(),
                "spec.certificateAuthorities.apiServerClient",
            ),
            (
                "etcd-server-ca.crt",
                spec.etcd_server.ca.as_ref(),
                "spec.etcdServer.ca",
            ),
            (
                "etcd-client-ca.crt",
                cas.etcd_client.as_ref(),
                "spec.certificateAuthorities.etcdClient",
            ),
            (
                "etcd-peer-ca.crt",
                cas.etcd_peer.as_ref(),
                "spec.certificateAuthorities.etcdPeer",
            ),
        ];
        for (file, ca, field) in ca_files {
            if whole || !file.starts_with("etcd-") || file == "etcd-server-ca.crt" {
                add(file, &self.ca_cert(ca, field)?, 0o644);
            }
        }
        if whole {
            let signer = cas
                .certificate_signer
                .as_ref()
                .filter(|s| !s.certificate.is_empty() && !s.private_key.is_empty())
                .ok_or_else(|| {
                    self.missing("cluster CA spec.certificateAuthorities.certificateSigner")
                })?;
            add("cluster-signing-ca.crt", &signer.certificate, 0o644);
            add("cluster-signing-ca.key", &signer.private_key, 0o600);
        }
        let sa = spec
            .api_server
            .service_account
            .as_ref()
            .filter(|k| !k.private_key.is_empty() && !k.public_key.is_empty())
            .ok_or_else(|| self.missing("key pair spec.apiServer.serviceAccount"))?;
        let verification = crate::rotation::service_account_keys(self.cluster)
            .unwrap_or_else(|| sa.public_key.clone());
        add("sa.pub", &verification, 0o644);
        add("sa.key", &sa.private_key, 0o600);
        let server = &c.status.server_certificates;
        let client = &c.status.client_certificates;
        let etcd_leaves: &[Leaf] = if whole {
            &[
                (server, "serverCertificates", certs::ETCD_SERVER),
                (server, "serverCertificates", certs::ETCD_PEER),
            ]
        } else {
            &[]
        };
        let leaves: [Leaf; 3] = [
            (server, "serverCertificates", certs::APISERVER),
            (client, "clientCertificates", certs::APISERVER_ETCD_CLIENT),
            (
                client,
                "clientCertificates",
                certs::APISERVER_KUBELET_CLIENT,
            ),
        ];
        for &(map, field, name) in leaves.iter().chain(etcd_leaves) {
            let (cert, key) = self.leaf(map, field, name)?;
            let cert = if name == certs::APISERVER {
                crate::rotation::served_chain(self.cluster, &cert)
            } else {
                cert
            };
            add(&format!("{name}.crt"), &cert, 0o644);
            add(&format!("{name}.key"), &key, 0o600);
        }
        if whole {
            let apiserver_ca = self.ca_cert(spec.api_server.ca.as_ref(), "spec.apiServer.ca")?;
            let local_apiserver = format!(
                "https://{}:{}",
                url_host(self.ip),
                self.port(c, names::APISERVER)?
            );
            for name in [certs::CONTROLLER_MANAGER, certs::SCHEDULER] {
                let (cert, key) = self.leaf(client, "clientCertificates", name)?;
                let user = format!("system:kube-{name}");
                let kubeconfig = oi_pki::kubeconfig(
                    &c.spec.cluster,
                    &local_apiserver,
                    &apiserver_ca,
                    &user,
                    &cert,
                    &key,
                )
                .map_err(|e| self.missing(format!("renderable kubeconfig for {name}: {e}")))?;
                add(&format!("{name}.kubeconfig"), &kubeconfig, 0o600);
            }
        }
        Ok(files)
    }

    /// kube-apiserver's flags, over `etcd_servers`; the files its OIDC issuer and egress
    /// selector need are added to `files`.
    fn apiserver_args(
        &self,
        etcd_servers: &[String],
        files: &mut Vec<HostFile>,
    ) -> Result<Vec<String>> {
        let spec = &self.cluster.spec;
        let apiserver_port = self.port(self.component, names::APISERVER)?;
        let mut apiserver_flags = BTreeMap::from([
            ("advertise-address", self.ip.to_string()),
            ("allow-privileged", "true".into()),
            ("authorization-mode", "Node,RBAC".into()),
            ("client-ca-file", self.path("apiserver-client-ca.crt")),
            ("enable-admission-plugins", "NodeRestriction".into()),
            ("enable-bootstrap-token-auth", "true".into()),
            ("etcd-cafile", self.path("etcd-server-ca.crt")),
            ("etcd-certfile", self.path("apiserver-etcd-client.crt")),
            ("etcd-keyfile", self.path("apiserver-etcd-client.key")),
            ("etcd-servers", etcd_servers.join(",")),
            (
                "kubelet-client-certificate",
                self.path("apiserver-kubelet-client.crt"),
            ),
            (
                "kubelet-client-key",
                self.path("apiserver-kubelet-client.key"),
            ),
            (
                "kubelet-preferred-address-types",
                "InternalIP,ExternalIP,Hostname".into(),
            ),
            ("secure-port", apiserver_port.to_string()),
            (
                "service-account-issuer",
                oi_api::validation::SERVICE_ACCOUNT_ISSUER.into(),
            ),
            ("service-account-key-file", self.path("sa.pub")),
            ("service-account-signing-key-file", self.path("sa.key")),
            (
                "service-cluster-ip-range",
                spec.networking.service_cidr.clone(),
            ),
            ("tls-cert-file", self.path("apiserver.crt")),
            ("tls-private-key-file", self.path("apiserver.key")),
        ]);
        // Every issuer the cluster trusts, in a file the API server reads again when it
        // changes: adding or removing one restarts nothing (see `reloaded`).
        files.push(self.file(
            AUTHENTICATION_CONFIG,
            &authentication_config(&spec.api_server),
            0o644,
        ));
        apiserver_flags.insert("authentication-config", self.path(AUTHENTICATION_CONFIG));
        if let Some(url) = self.egress_proxy_url()? {
            let egress = egress_selector_config(
                &url,
                &self.path("apiserver-ca.crt"),
                &self.path("apiserver-kubelet-client.crt"),
                &self.path("apiserver-kubelet-client.key"),
            );
            files.push(self.file(EGRESS_SELECTOR, &egress, 0o644));
            apiserver_flags.insert("egress-selector-config-file", self.path(EGRESS_SELECTOR));
        }
        Ok(flags(apiserver_flags))
    }

    /// kube-controller-manager's flags.
    fn controller_manager_args(&self) -> Vec<String> {
        let spec = &self.cluster.spec;
        let kubeconfig = self.path("controller-manager.kubeconfig");
        let mut kcm = BTreeMap::from([
            ("allocate-node-cidrs", "true".to_string()),
            ("authentication-kubeconfig", kubeconfig.clone()),
            ("authorization-kubeconfig", kubeconfig.clone()),
            ("cluster-cidr", spec.networking.cluster_cidr.clone()),
            ("cluster-name", self.component.spec.cluster.clone()),
            (
                "cluster-signing-cert-file",
                self.path("cluster-signing-ca.crt"),
            ),
            (
                "cluster-signing-key-file",
                self.path("cluster-signing-ca.key"),
            ),
            ("controllers", "*,bootstrapsigner,tokencleaner".into()),
            ("kubeconfig", kubeconfig),
            ("leader-elect", "true".into()),
            ("root-ca-file", self.path("apiserver-ca.crt")),
            // Several clusters share a hypervisor's network: no fixed serving port.
            ("secure-port", "0".into()),
            ("service-account-private-key-file", self.path("sa.key")),
            (
                "service-cluster-ip-range",
                spec.networking.service_cidr.clone(),
            ),
            ("use-service-account-credentials", "true".into()),
        ]);
        if let Some(size) = spec.networking.node_cidr_mask_size {
            kcm.insert("node-cidr-mask-size", size.to_string());
        }
        flags(kcm)
    }

    /// kube-scheduler's flags.
    fn scheduler_args(&self) -> Vec<String> {
        let kubeconfig = self.path("scheduler.kubeconfig");
        flags(BTreeMap::from([
            ("authentication-kubeconfig", kubeconfig.clone()),
            ("authorization-kubeconfig", kubeconfig.clone()),
            ("kubeconfig", kubeconfig),
            ("leader-elect", "true".into()),
            ("secure-port", "0".into()),
        ]))
    }

    /// The replica's etcd member pod, started with the membership its status records.
    fn etcd_pod(&self, release: &KubernetesRelease) -> Result<PodSpec> {
        let c: &Component = self.component;
        let ip = url_host(self.ip);
        let start =
            c.status.etcd_member.as_ref().ok_or_else(|| {
                self.missing("status.etcdMember (set when the replica is planned)")
            })?;
        let client_port = self.port(c, names::ETCD_CLIENT)?;
        let peer_port = self.port(c, names::ETCD_PEER)?;
        let etcd_data =
            paths::etcd_data_dir(&self.key.namespace, &c.spec.cluster, &c.metadata.name);
        let etcd_args = flags(BTreeMap::from([
            (
                "advertise-client-urls",
                format!("https://{ip}:{client_port}"),
            ),
            ("cert-file", self.path("etcd-server.crt")),
            ("client-cert-auth", "true".into()),
            ("data-dir", etcd_data.clone()),
            (
                "initial-advertise-peer-urls",
                format!("https://{ip}:{peer_port}"),
            ),
            ("initial-cluster", initial_cluster(start)),
            (
                "initial-cluster-state",
                start.initial_cluster_state.as_str().into(),
            ),
            ("key-file", self.path("etcd-server.key")),
            ("listen-client-urls", format!("https://{ip}:{client_port}")),
            ("listen-peer-urls", format!("https://{ip}:{peer_port}")),
            ("name", c.metadata.name.clone()),
            ("peer-cert-file", self.path("etcd-peer.crt")),
            ("peer-client-cert-auth", "true".into()),
            ("peer-key-file", self.path("etcd-peer.key")),
            ("peer-trusted-ca-file", self.path("etcd-peer-ca.crt")),
            ("trusted-ca-file", self.path("etcd-client-ca.crt")),
        ]));
        Ok(self.pod(
            format!("{}-etcd", c.metadata.name),
            vec![self.container(
                "etcd",
                release.etcd,
                etcd_args,
                vec![
                    self.config_mount(),
                    Mount {
                        host_path: etcd_data.clone(),
                        container_path: etcd_data,
                        readonly: false,
                    },
                ],
            )],
        ))
    }
}
