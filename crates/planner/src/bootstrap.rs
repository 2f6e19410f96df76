//! What a ready cluster must hold inside, written through its own API by the engine after the
//! cluster is ready (`oi reconcile` and `oi-manager` alike), as oneinfra's reconciler did and in
//! its order:
//!
//! ```text
//! 1. the NodeJoinRequest CRD            nodejoinrequests.node.oneinfra.ereslibre.es
//! 2. the namespace                      oneinfra-system
//! 3. RBAC                               join tokens (group system:bootstrappers:oneinfra) may
//!                                       create and get NodeJoinRequests and get the
//!                                       oneinfra-join ConfigMap, nothing else; the group
//!                                       oneinfra:kubelet-proxier may use the kubelet API
//! 4. join tokens                        one bootstrap-token Secret per spec.joinTokens entry,
//!                                       labelled ours; ours not in the spec are deleted
//! 5. kube-proxy                         ServiceAccount, ClusterRoleBinding, ConfigMap, DaemonSet
//! 6. CoreDNS                            ServiceAccount, ClusterRole, ClusterRoleBinding,
//!                                       ConfigMap, Deployment, Service at the cluster DNS address
//! 7. the join public key                ConfigMap oneinfra-system/oneinfra-join (last: a worker
//!                                       that can read it finds everything else in place)
//! ```
//!
//! Each object is a whole desired body. The engine creates it when absent and, when present,
//! writes it only if some desired field differs from what the API server holds (fields the
//! server or others added are left alone), so a converged cluster gets no write. Join token
//! Secrets carry the token secret: [`ClusterObject`]'s `Debug` never shows a body.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use base64::Engine as _;
use oi_api::{Cluster, Kind};
use serde_json::{Value, json};
use time::OffsetDateTime;

/// The namespace of oneinfra's objects inside a managed cluster.
pub const NAMESPACE: &str = "oneinfra-system";
/// The ConfigMap workers read the join public key from.
pub const JOIN_CONFIG_MAP: &str = "oneinfra-join";
/// Its key holding the PEM public key.
pub const JOIN_CONFIG_MAP_KEY: &str = "joinKey";
/// Ours, beside oneinfra's: the cluster VPN's CIDR, present when the VPN is on, so that a
/// worker checks it can bring WireGuard up before it asks to join.
pub const JOIN_CONFIG_MAP_VPN_KEY: &str = "vpnCIDR";
/// The group join tokens authenticate in (`auth-extra-groups`).
pub const JOIN_TOKEN_GROUP: &str = "system:bootstrappers:oneinfra";
/// The group allowed to use every kubelet's API (logs, exec, the node proxy).
pub const KUBELET_PROXIER_GROUP: &str = "oneinfra:kubelet-proxier";
/// The ClusterRole, Role and their bindings of join tokens.
pub const JOIN_REQUESTER: &str = "oneinfra:node:join-requester";
/// The label marking the bootstrap-token Secrets that oneinfra keeps: only those are deleted
/// when their token leaves the Cluster (tokens made by others are never touched).
pub const JOIN_TOKEN_LABEL: &str = "node.oneinfra.ereslibre.es/join-token";
/// The description of the join token Secrets (oneinfra's wording).
pub const JOIN_TOKEN_DESCRIPTION: &str = "oneinfra node join token";
/// The cluster's DNS domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The label every object oneinfra keeps in a cluster carries (`"true"`): a run reads each
/// collection's with one LIST ([`ClusterObject::collection`]).
pub const IN_CLUSTER_LABEL: &str = "oneinfra.ereslibre.es/in-cluster";

/// One object the cluster must hold.
#[derive(Clone, PartialEq)]
pub struct ClusterObject {
    /// The path of its collection, e.g. `/api/v1/namespaces/kube-system/secrets`.
    pub collection: String,
    pub name: String,
    /// Kind and name, for messages: `Secret kube-system/bootstrap-token-abcdef`.
    pub describe: String,
    /// The desired object, whole (apiVersion, kind, metadata, ...).
    pub body: Value,
}

impl ClusterObject {
    /// The object's own path.
    pub fn path(&self) -> String {
        format!("{}/{}", self.collection, self.name)
    }
}

// Bodies may hold secrets (join tokens): never shown.
impl fmt::Debug for ClusterObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterObject")
            .field("describe", &self.describe)
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

/// Objects of a collection to delete: those matching a label selector whose name is not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prune {
    pub collection: String,
    pub label_selector: String,
    /// The kind, for messages.
    pub kind: &'static str,
    pub keep: BTreeSet<String>,
}

/// The engine's identity towards the cluster's API: a short-lived client certificate of the
/// API server client CA in `system:masters`, and the API server CA it trusts. `Debug` never
/// shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiClientIdentity {
    pub server_ca: String,
    pub certificate: String,
    pub private_key: String,
}

impl fmt::Debug for ApiClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiClientIdentity")
            .field("certificate", &self.certificate)
            .field("private_key", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// What the engine ensures inside a ready cluster, in order. `Debug` shows no token.
#[derive(Clone, PartialEq)]
pub struct InCluster {
    /// Where the API is reached: the cluster's endpoint (its ingress).
    pub endpoint: String,
    pub client: Result<ApiClientIdentity, String>,
    pub objects: Vec<ClusterObject>,
    /// Deleted after every object is in place.
    pub prune: Vec<Prune>,
    /// The join tokens in force once it is done (`status.joinTokens`).
    pub join_tokens: Vec<String>,
    /// How its NodeJoinRequests are answered, or why they cannot be.
    pub join: std::result::Result<crate::join::JoinAnswerer, String>,
}

impl fmt::Debug for InCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InCluster")
            .field("endpoint", &self.endpoint)
            .field("client", &self.client)
            .field("objects", &self.objects)
            .field("prune", &self.prune)
            .field(
                "join_tokens",
                &format_args!("[{} redacted]", self.join_tokens.len()),
            )
            .field("join", &self.join)
            .finish()
    }
}

/// How long the engine's API client certificate is valid: one run.
const CLIENT_LIFETIME: time::Duration = time::Duration::hours(1);

/// The in-cluster objects of a prepared cluster; `Err` names what is missing.
pub fn in_cluster(
    cluster: &Cluster,
    now: OffsetDateTime,
) -> std::result::Result<InCluster, String> {
    let endpoint = cluster.status.api_server_endpoint.clone();
    if endpoint.is_empty() {
        return Err("the cluster has no API server endpoint yet".into());
    }
    let release = oi_api::versions::find_release(&cluster.spec.kubernetes_version)
        .ok_or_else(|| format!("unsupported version {:?}", cluster.spec.kubernetes_version))?;
    let join_public_key = cluster
        .spec
        .join_key
        .as_ref()
        .map(|k| k.public_key.clone())
        .filter(|k| !k.is_empty())
        .ok_or("the cluster has no join key")?;
    let dns = cluster_dns_address(&cluster.spec.networking.service_cidr)?;
    let mut objects = vec![node_join_request_crd(), namespace(NAMESPACE)];
    objects.extend(join_rbac());
    let tokens: Vec<ClusterObject> = cluster
        .spec
        .join_tokens
        .iter()
        .filter_map(|t| join_token_secret(t))
        .collect();
    let keep = tokens.iter().map(|t| t.name.clone()).collect();
    objects.extend(tokens);
    let image = |i: oi_api::versions::Image| i.reference(None);
    objects.extend(kube_proxy(
        &image(release.kube_proxy),
        &endpoint,
        &cluster.spec.networking.cluster_cidr,
    )?);
    objects.extend(coredns(&image(release.coredns), &endpoint, &dns)?);
    let mut join_data = json!({ JOIN_CONFIG_MAP_KEY: join_public_key });
    if cluster.spec.vpn.enabled {
        join_data[JOIN_CONFIG_MAP_VPN_KEY] = cluster.spec.vpn.cidr.clone().into();
    }
    objects.push(config_map(NAMESPACE, JOIN_CONFIG_MAP, join_data));
    Ok(InCluster {
        endpoint,
        client: client_identity(cluster, now),
        objects,
        prune: vec![Prune {
            collection: "/api/v1/namespaces/kube-system/secrets".into(),
            label_selector: format!("{JOIN_TOKEN_LABEL}=true"),
            kind: "Secret",
            keep,
        }],
        join_tokens: cluster.spec.join_tokens.clone(),
        join: crate::join::JoinAnswerer::new(cluster),
    })
}

/// The images of in-cluster workloads with an image-repository override applied.
pub fn override_images(objects: &mut [ClusterObject], repository: Option<&str>) {
    let Some(repository) = repository else {
        return;
    };
    for o in objects {
        for path in [
            "/spec/template/spec/containers",
            "/spec/template/spec/initContainers",
        ] {
            if let Some(Value::Array(containers)) = o.body.pointer_mut(path) {
                for c in containers {
                    if let Some(Value::String(image)) = c.get_mut("image") {
                        *image = override_reference(image, repository);
                    }
                }
            }
        }
    }
}

/// `registry/path/name:tag` with registry and path replaced (kubeadm's `imageRepository`).
fn override_reference(image: &str, repository: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    format!("{}/{last}", repository.trim_end_matches('/'))
}

/// The tenth address of the service CIDR, as kubeadm picks the cluster DNS address.
pub fn cluster_dns_address(service_cidr: &str) -> std::result::Result<String, String> {
    let net: ipnet::IpNet = service_cidr
        .parse()
        .map_err(|_| format!("service CIDR {service_cidr:?} does not parse"))?;
    let address = match net.network() {
        IpAddr::V4(v4) => u32::from(v4).checked_add(10).map(|a| IpAddr::V4(a.into())),
        IpAddr::V6(v6) => u128::from(v6).checked_add(10).map(|a| IpAddr::V6(a.into())),
    };
    match address {
        Some(a) if net.contains(&a) => Ok(a.to_string()),
        _ => Err(format!(
            "service CIDR {service_cidr} is too small for a cluster DNS address (its 10th)"
        )),
    }
}

/// The engine's short-lived `system:masters` client certificate (P-256: it never leaves the
/// run) and the API server CA.
fn client_identity(
    cluster: &Cluster,
    now: OffsetDateTime,
) -> std::result::Result<ApiClientIdentity, String> {
    let client_ca = cluster
        .spec
        .certificate_authorities
        .api_server_client
        .as_ref()
        .ok_or("no API server client CA")?;
    let server_ca = cluster
        .spec
        .api_server
        .ca
        .as_ref()
        .ok_or("no API server CA")?;
    let ca = oi_pki::CaKind::ApiServerClient
        .load(&client_ca.certificate, &client_ca.private_key)
        .map_err(|e| e.to_string())?;
    let mut spec = oi_pki::LeafSpec::client(
        oi_pki::CaKind::ApiServerClient,
        "oneinfra-engine",
        &["system:masters"],
    );
    spec.key_algorithm = Some(oi_pki::KeyAlgorithm::EcdsaP256);
    let leaf = ca
        .issue(&spec, now, CLIENT_LIFETIME)
        .map_err(|e| e.to_string())?;
    Ok(ApiClientIdentity {
        server_ca: crate::rotation::trust_bundle(cluster, oi_pki::CaKind::ApiServer)
            .unwrap_or_else(|| server_ca.certificate.clone()),
        certificate: leaf.certificate_pem,
        private_key: leaf.private_key_pem,
    })
}

fn object(
    collection: String,
    kind: &str,
    namespace: Option<&str>,
    mut body: Value,
) -> ClusterObject {
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(IN_CLUSTER_LABEL.to_string(), "true".into());
        }
    }
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let describe = match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    };
    ClusterObject {
        collection,
        name,
        describe,
        body,
    }
}

fn core(namespace: &str, resource: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/{resource}")
}

fn rbac(namespace: Option<&str>, resource: &str) -> String {
    match namespace {
        Some(ns) => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{resource}"),
        None => format!("/apis/rbac.authorization.k8s.io/v1/{resource}"),
    }
}

fn node_join_request_crd() -> ClusterObject {
    // The management cluster's CRD, with what oneinfra's in-cluster one adds: short names
    // and the SANs column.
    let mut body = oi_api::crd::node_join_request_crd();
    body["spec"]["names"]["shortNames"] = json!(["njr", "njrs"]);
    body["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
        {"name": "SANs", "type": "string", "jsonPath": ".spec.extraSANs"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    object(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into(),
        "CustomResourceDefinition",
        None,
        body,
    )
}

fn namespace(name: &str) -> ClusterObject {
    object(
        "/api/v1/namespaces".into(),
        "Namespace",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
}

fn config_map(namespace: &str, name: &str, data: Value) -> ClusterObject {
    object(
        core(namespace, "configmaps"),
        "ConfigMap",
        Some(namespace),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": namespace}, "data": data}),
    )
}

fn service_account(namespace: &str, name: &str) -> ClusterObject {
    object(
        core(namespace, "serviceaccounts"),
        "ServiceAccount",
        Some(namespace),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": namespace}}),
    )
}

fn cluster_role(name: &str, rules: Value) -> ClusterObject {
    object(
        rbac(None, "clusterroles"),
        "ClusterRole",
        None,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules}),
    )
}

/// A binding of `subjects` to a ClusterRole, or in `namespace` to a Role of the same name.
fn binding(namespace: Option<&str>, name: &str, role: &str, subjects: Value) -> ClusterObject {
    let (kind, role_kind, metadata) = match namespace {
        Some(ns) => (
            "RoleBinding",
            "Role",
            json!({"name": name, "namespace": ns}),
        ),
        None => ("ClusterRoleBinding", "ClusterRole", json!({"name": name})),
    };
    object(
        rbac(
            namespace,
            if namespace.is_some() {
                "rolebindings"
            } else {
                "clusterrolebindings"
            },
        ),
        kind,
        namespace,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
               "subjects": subjects}),
    )
}

fn group(name: &str) -> Value {
    json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}])
}

fn service_account_subject(namespace: &str, name: &str) -> Value {
    json!([{"kind": "ServiceAccount", "name": name, "namespace": namespace}])
}

/// The NodeJoinRequest API group.
fn node_group() -> &'static str {
    let version = Kind::NodeJoinRequest.api_version();
    version.split_once('/').map_or(version, |(group, _)| group)
}

/// What a join token may do: create a NodeJoinRequest and read it back (to wait for its
/// answer), read the join public key; nothing else.
fn join_rbac() -> Vec<ClusterObject> {
    vec![
        cluster_role(
            JOIN_REQUESTER,
            json!([{"apiGroups": [node_group()],
                    "resources": ["nodejoinrequests"], "verbs": ["create", "get"]}]),
        ),
        binding(
            None,
            JOIN_REQUESTER,
            JOIN_REQUESTER,
            group(JOIN_TOKEN_GROUP),
        ),
        object(
            rbac(Some(NAMESPACE), "roles"),
            "Role",
            Some(NAMESPACE),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": JOIN_REQUESTER, "namespace": NAMESPACE},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": [JOIN_CONFIG_MAP], "verbs": ["get"]}]}),
        ),
        binding(
            Some(NAMESPACE),
            JOIN_REQUESTER,
            JOIN_REQUESTER,
            group(JOIN_TOKEN_GROUP),
        ),
        binding(
            None,
            "oneinfra:kubelet-proxier",
            "system:kubelet-api-admin",
            group(KUBELET_PROXIER_GROUP),
        ),
    ]
}

/// A join token's bootstrap-token Secret; `None` for a value that is not a bootstrap token
/// (validation refuses those before a plan).
fn join_token_secret(token: &str) -> Option<ClusterObject> {
    if !oi_api::validation::is_bootstrap_token(token) {
        return None;
    }
    let (id, secret) = token.split_once('.')?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    Some(object(
        core("kube-system", "secrets"),
        "Secret",
        Some("kube-system"),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
               "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system",
                            "labels": {JOIN_TOKEN_LABEL: "true"}},
               "data": {"description": b64(JOIN_TOKEN_DESCRIPTION), "token-id": b64(id),
                        "token-secret": b64(secret),
                        "usage-bootstrap-authentication": b64("true"),
                        "auth-extra-groups": b64(JOIN_TOKEN_GROUP)}}),
    ))
}

/// `(host, port)` of an `https://host:port` endpoint.
fn split_endpoint(endpoint: &str) -> std::result::Result<(String, String), String> {
    let rest = endpoint
        .strip_prefix("https://")
        .ok_or_else(|| format!("API server endpoint {endpoint:?} is not https://host:port"))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("API server endpoint {endpoint:?} has no port"))?;
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port.to_string(),
    ))
}

/// The environment that makes in-cluster clients (client-go's in-cluster config) reach the
/// API through the cluster's endpoint: workers behind NAT cannot reach the API servers'
/// own addresses that the `kubernetes` Service points at.
fn api_env(endpoint: &str) -> std::result::Result<Value, String> {
    let (host, port) = split_endpoint(endpoint)?;
    Ok(json!([
        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": port},
        {"name": "KUBERNETES_SERVICE_PORT_HTTPS", "value": port},
    ]))
}

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// kube-proxy as kubeadm deploys it, its kubeconfig pointing at the cluster's endpoint.
fn kube_proxy(
    image: &str,
    endpoint: &str,
    cluster_cidr: &str,
) -> std::result::Result<Vec<ClusterObject>, String> {
    let config = format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection:\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\nclusterCIDR: {cluster_cidr}\nmode: \"\"\n"
    );
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: {SA_DIR}/ca.crt\n    server: {endpoint}\n  name: default\ncontexts:\n- context:\n    cluster: default\n    namespace: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n  user:\n    tokenFile: {SA_DIR}/token\n"
    );
    let mut env = api_env(endpoint)?;
    if let Value::Array(list) = &mut env {
        list.push(json!({"name": "NODE_NAME",
                         "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}));
    }
    let labels = json!({"k8s-app": "kube-proxy"});
    Ok(vec![
        service_account("kube-system", "kube-proxy"),
        binding(
            None,
            "oneinfra:node-proxier",
            "system:node-proxier",
            service_account_subject("kube-system", "kube-proxy"),
        ),
        config_map(
            "kube-system",
            "kube-proxy",
            json!({"config.conf": config, "kubeconfig.conf": kubeconfig}),
        ),
        object(
            "/apis/apps/v1/namespaces/kube-system/daemonsets".into(),
            "DaemonSet",
            Some("kube-system"),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": labels},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "priorityClassName": "system-node-critical",
                            "serviceAccountName": "kube-proxy",
                            "hostNetwork": true,
                            "nodeSelector": {"kubernetes.io/os": "linux"},
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [{
                                "name": "kube-proxy",
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "command": ["/usr/local/bin/kube-proxy",
                                            "--config=/var/lib/kube-proxy/config.conf",
                                            "--hostname-override=$(NODE_NAME)"],
                                "env": env,
                                "securityContext": {"privileged": true},
                                "volumeMounts": [
                                    {"name": "kube-proxy", "mountPath": "/var/lib/kube-proxy"},
                                    {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                                    {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": true}
                                ]
                            }],
                            "volumes": [
                                {"name": "kube-proxy", "configMap": {"name": "kube-proxy"}},
                                {"name": "xtables-lock",
                                 "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                                {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}}
                            ]
                        }
                    }
                }
            }),
        ),
    ])
}

/// CoreDNS as kubeadm deploys it, answering at the cluster DNS address.
fn coredns(
    image: &str,
    endpoint: &str,
    dns: &str,
) -> std::result::Result<Vec<ClusterObject>, String> {
    let corefile = format!(
        ".:53 {{\n    errors\n    health {{\n       lameduck 5s\n    }}\n    ready\n    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }}\n    prometheus :9153\n    forward . /etc/resolv.conf {{\n       max_concurrent 1000\n    }}\n    cache 30 {{\n       disable success {CLUSTER_DOMAIN}\n       disable denial {CLUSTER_DOMAIN}\n    }}\n    loop\n    reload\n    loadbalance\n}}\n"
    );
    let labels = json!({"k8s-app": "kube-dns"});
    let ports = json!([
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
        {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
    ]);
    Ok(vec![
        service_account("kube-system", "coredns"),
        cluster_role(
            "system:coredns",
            json!([
                {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                 "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                 "verbs": ["list", "watch"]},
            ]),
        ),
        binding(
            None,
            "system:coredns",
            "system:coredns",
            service_account_subject("kube-system", "coredns"),
        ),
        config_map("kube-system", "coredns", json!({"Corefile": corefile})),
        object(
            "/apis/apps/v1/namespaces/kube-system/deployments".into(),
            "Deployment",
            Some("kube-system"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "priorityClassName": "system-cluster-critical",
                            "serviceAccountName": "coredns",
                            "dnsPolicy": "Default",
                            "nodeSelector": {"kubernetes.io/os": "linux"},
                            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                            "containers": [{
                                "name": "coredns",
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "env": api_env(endpoint)?,
                                "resources": {"limits": {"memory": "170Mi"},
                                              "requests": {"cpu": "100m", "memory": "70Mi"}},
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                    {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}
                                ],
                                "securityContext": {"allowPrivilegeEscalation": false,
                                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                    "readOnlyRootFilesystem": true},
                                "livenessProbe": {"httpGet": {"path": "/health", "port": 8080,
                                    "scheme": "HTTP"}, "initialDelaySeconds": 60,
                                    "timeoutSeconds": 5, "successThreshold": 1, "failureThreshold": 5},
                                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181,
                                    "scheme": "HTTP"}},
                                "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns",
                                                  "readOnly": true}]
                            }],
                            "volumes": [{"name": "config-volume", "configMap": {"name": "coredns",
                                "items": [{"key": "Corefile", "path": "Corefile"}]}}]
                        }
                    }
                }
            }),
        ),
        object(
            core("kube-system", "services"),
            "Service",
            Some("kube-system"),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kube-dns", "namespace": "kube-system",
                    "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true",
                               "kubernetes.io/name": "CoreDNS"},
                    "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
                "spec": {"clusterIP": dns, "selector": labels, "ports": ports}}),
        ),
    ])
}

/// Whether `actual` holds every field of `desired` with the same value: objects by key
/// (extra keys in `actual` are fine: defaults, server fields, others' fields), lists element
/// by element with the same length, anything else equal.
pub fn holds(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| a.get(k).is_some_and(|av| holds(av, dv))),
        (Value::Array(a), Value::Array(d)) => {
            a.len() == d.len() && a.iter().zip(d).all(|(av, dv)| holds(av, dv))
        }
        _ => actual == desired,
    }
}

#[cfg(test)]
mod tests;
