//! CustomResourceDefinitions for the four kinds, for `oi-manager`'s management cluster.
//!
//! Same groups, names, scopes and printer columns as oneinfra's, with schemas that follow our
//! types: every oneinfra property, the optional fields we add (e.g. `status.vpnServerEndpoint`),
//! enums and ranges where our types have them. A structural schema makes the API server drop
//! unknown fields, so a field missing here would be lost on write: tests check that every field
//! our types write is in these schemas. Golden file: `testdata/crds.yaml`.

use serde_json::{Map, Value, json};

use crate::manifest::ManifestError;
use crate::meta::Kind;

/// The CRD of one of the kinds oi-manager serves ([`Kind::ONEINFRA`] and SIPCluster, whose
/// schema is upstream SIP's with our optional fields), as a JSON value; `None` for the kinds
/// whose definitions are not ours to install (BareMetalHost's is metal3's, Secret is core).
pub fn custom_resource_definition(kind: Kind) -> Option<Value> {
    let (plural, spec, status, columns) = match kind {
        Kind::Hypervisor => (
            "hypervisors",
            hypervisor_spec(),
            hypervisor_status(),
            vec![
                column("Public", "boolean", ".spec.public"),
                column("IP Address", "string", ".spec.ipAddress"),
                column("Port Low", "integer", ".spec.portRange.low"),
                column("Port High", "integer", ".spec.portRange.high"),
            ],
        ),
        Kind::Cluster => (
            "clusters",
            cluster_spec(),
            cluster_status(),
            vec![
                column("Kubernetes version", "string", ".spec.kubernetesVersion"),
                column("API server endpoint", "string", ".status.apiServerEndpoint"),
                column("VPN", "boolean", ".spec.vpn.enabled"),
                column("VPN CIDR", "string", ".spec.vpn.CIDR"),
            ],
        ),
        Kind::Component => (
            "components",
            component_spec(),
            component_status(),
            vec![
                column("Cluster", "string", ".spec.cluster"),
                column("Role", "string", ".spec.role"),
                column("Hypervisor", "string", ".spec.hypervisor"),
            ],
        ),
        Kind::NodeJoinRequest => (
            "nodejoinrequests",
            node_join_request_spec(),
            node_join_request_status(),
            Vec::new(),
        ),
        Kind::SipCluster => (
            "sipclusters",
            sip_cluster_spec(),
            sip_cluster_status(),
            Vec::new(),
        ),
        Kind::BareMetalHost | Kind::Secret => return None,
    };
    Some(definition(kind, plural, spec, status, columns))
}

/// NodeJoinRequest's CRD (what each managed cluster gets).
pub fn node_join_request_crd() -> Value {
    definition(
        Kind::NodeJoinRequest,
        "nodejoinrequests",
        node_join_request_spec(),
        node_join_request_status(),
        Vec::new(),
    )
}

fn definition(kind: Kind, plural: &str, spec: Value, status: Value, columns: Vec<Value>) -> Value {
    let mut columns = columns;
    columns.push(column("Age", "date", ".metadata.creationTimestamp"));
    let (group, version) = kind
        .api_version()
        .split_once('/')
        .unwrap_or((kind.api_version(), ""));
    let mut root = object(&[
        ("apiVersion", string()),
        ("kind", string()),
        ("metadata", json!({"type": "object"})),
        ("spec", spec),
        ("status", status),
    ]);
    if matches!(kind, Kind::Hypervisor | Kind::Component) {
        root["required"] = json!(["spec"]);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": kind.as_str(),
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.as_str().to_lowercase(),
            },
            "scope": if kind.namespaced() { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": root},
                "subresources": {"status": {}},
            }],
        },
    })
}

/// Every CRD of ours as a multi-document YAML stream, in [`Kind::ALL`] order.
///
/// # Errors
///
/// [`ManifestError::Serialize`] if serde_yaml_ng refuses a value.
pub fn crds_yaml() -> Result<String, ManifestError> {
    let docs = Kind::ALL
        .into_iter()
        .filter_map(|kind| custom_resource_definition(kind).map(|crd| (kind, crd)))
        .map(|(kind, crd)| {
            serde_yaml_ng::to_string(&crd).map_err(|e| ManifestError::Serialize {
                kind,
                name: "CustomResourceDefinition".to_string(),
                message: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(docs.join("---\n"))
}

fn column(name: &str, type_: &str, path: &str) -> Value {
    json!({"name": name, "type": type_, "jsonPath": path})
}

fn object(properties: &[(&str, Value)]) -> Value {
    let props: Map<String, Value> = properties
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect();
    json!({"type": "object", "properties": props})
}

fn required(mut schema: Value, fields: &[&str]) -> Value {
    schema["required"] = json!(fields);
    schema
}

fn string() -> Value {
    json!({"type": "string"})
}

fn string_enum(values: &[&str]) -> Value {
    json!({"type": "string", "enum": values})
}

fn date_time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn integer(minimum: i64, maximum: i64) -> Value {
    json!({"type": "integer", "minimum": minimum, "maximum": maximum})
}

fn port() -> Value {
    integer(0, 65535)
}

fn boolean() -> Value {
    json!({"type": "boolean"})
}

fn array(items: Value) -> Value {
    json!({"type": "array", "items": items})
}

fn map(values: Value) -> Value {
    json!({"type": "object", "additionalProperties": values})
}

fn certificate() -> Value {
    object(&[
        ("certificate", string()),
        ("privateKey", string()),
        ("privateKeyRef", private_key_ref()),
    ])
}

/// A certificate and its key, held inline only: Hypervisors' CRI client keys and SIPClusters'
/// status keys are not kept in Secrets yet, and their schemas do not offer a reference.
fn inline_certificate() -> Value {
    object(&[("certificate", string()), ("privateKey", string())])
}

/// Where a private key is kept instead of inline (`crate::keys`): a Secret of the object's
/// namespace and its key.
fn private_key_ref() -> Value {
    required(
        object(&[("name", string()), ("key", string())]),
        &["name", "key"],
    )
}

/// An OpenID Connect issuer the API servers trust ([`crate::ApiServerOidc`]).
fn oidc_issuer() -> Value {
    object(&[
        ("issuerURL", string()),
        ("clientID", string()),
        ("audiences", array(string())),
        ("usernameClaim", string()),
        ("usernamePrefix", string()),
        ("groupsClaim", string()),
        ("groupsPrefix", string()),
        ("signingAlgs", array(string())),
        ("ca", string()),
    ])
}

fn key_pair() -> Value {
    object(&[
        ("publicKey", string()),
        ("privateKey", string()),
        ("privateKeyRef", private_key_ref()),
    ])
}

fn conditions() -> Value {
    array(required(
        object(&[
            ("type", string()),
            ("status", string_enum(&["True", "False", "Unknown"])),
            ("reason", string()),
            ("message", string()),
            ("lastSetTime", date_time()),
            ("lastTransitionTime", date_time()),
        ]),
        &["type", "status"],
    ))
}

fn hypervisor_spec() -> Value {
    required(
        object(&[
            ("localCRIEndpoint", object(&[("criEndpointPath", string())])),
            (
                "remoteCRIEndpoint",
                object(&[
                    ("criEndpointURI", string()),
                    ("caCertificate", string()),
                    ("clientCertificate", inline_certificate()),
                ]),
            ),
            ("public", boolean()),
            ("ipAddress", string()),
            (
                "portRange",
                object(&[("low", integer(1, 65535)), ("high", integer(1, 65535))]),
            ),
            ("unschedulable", boolean()),
            ("drain", boolean()),
            (
                "capacity",
                object(&[
                    ("components", integer(0, i64::from(u32::MAX))),
                    ("cpu", string()),
                    ("memory", string()),
                ]),
            ),
        ]),
        &["public"],
    )
}

fn hypervisor_status() -> Value {
    object(&[
        (
            "allocatedPorts",
            array(required(
                object(&[
                    ("cluster", string()),
                    ("clusterNamespace", string()),
                    ("component", string()),
                    ("port", port()),
                ]),
                &["port"],
            )),
        ),
        ("freedPorts", array(port())),
        ("files", map(map(map(map(string()))))),
        ("conditions", conditions()),
    ])
}

fn cluster_spec() -> Value {
    object(&[
        ("kubernetesVersion", string()),
        ("controlPlaneReplicas", integer(1, 4_294_967_295)),
        ("apiServerReplicas", integer(1, 4_294_967_295)),
        (
            "certificateAuthorities",
            object(&[
                ("apiServerClient", certificate()),
                ("certificateSigner", certificate()),
                ("kubelet", certificate()),
                ("kubeletClient", certificate()),
                ("etcdClient", certificate()),
                ("etcdPeer", certificate()),
            ]),
        ),
        ("etcdServer", object(&[("ca", certificate())])),
        (
            "apiServer",
            object(&[
                ("ca", certificate()),
                ("extraSANs", array(string())),
                ("serviceAccount", key_pair()),
                ("oidc", oidc_issuer()),
                ("oidcIssuers", array(oidc_issuer())),
            ]),
        ),
        ("joinKey", key_pair()),
        ("joinTokens", array(string())),
        (
            "vpn",
            object(&[
                ("enabled", boolean()),
                ("CIDR", string()),
                ("privateKey", string()),
                ("privateKeyRef", private_key_ref()),
                ("publicKey", string()),
            ]),
        ),
        (
            "networking",
            object(&[
                ("clusterCIDR", string()),
                ("serviceCIDR", string()),
                ("nodeCIDRMaskSize", integer(0, 128)),
                ("nodeCIDRMaskSizeIPv4", integer(0, 32)),
                ("nodeCIDRMaskSizeIPv6", integer(0, 128)),
            ]),
        ),
        (
            "ingress",
            object(&[
                ("replicas", integer(1, 5)),
                ("virtualIP", string()),
                ("virtualRouterID", integer(1, 255)),
            ]),
        ),
        (
            "snapshots",
            object(&[
                ("every", string()),
                ("keep", integer(1, 10_000)),
                ("location", string()),
            ]),
        ),
    ])
}

fn cluster_status() -> Value {
    object(&[
        ("apiServerEndpoint", string()),
        ("vpnServerEndpoint", string()),
        ("kubernetesVersion", string()),
        ("storageClientEndpoints", map(string())),
        ("storagePeerEndpoints", map(string())),
        ("clientCertificates", map(certificate())),
        ("joinTokens", array(string())),
        (
            "vpnPeers",
            array(object(&[
                ("name", string()),
                ("address", string()),
                ("privateKey", string()),
                ("privateKeyRef", private_key_ref()),
                ("publicKey", string()),
            ])),
        ),
        (
            "joinedNodes",
            array(object(&[
                ("name", string()),
                ("registered", boolean()),
                ("vpnAddress", string()),
                ("issuedAt", date_time()),
            ])),
        ),
        (
            "lastSnapshot",
            object(&[
                ("takenAt", string()),
                ("location", string()),
                ("revision", integer(0, i64::MAX)),
                ("size", integer(0, i64::MAX)),
            ]),
        ),
        (
            "caRotation",
            object(&[
                ("phase", string()),
                ("startedAt", string()),
                ("cas", array(string())),
                ("next", map(certificate())),
                ("previous", map(string())),
                ("crossSigned", map(string())),
                ("nextServiceAccount", key_pair()),
                ("previousServiceAccount", string()),
            ]),
        ),
        ("conditions", conditions()),
    ])
}

fn component_spec() -> Value {
    required(
        object(&[
            ("cluster", string()),
            (
                "role",
                string_enum(&[
                    "control-plane",
                    "control-plane-ingress",
                    "control-plane-apiserver",
                ]),
            ),
            ("hypervisor", string()),
        ]),
        &["role"],
    )
}

fn component_status() -> Value {
    object(&[
        (
            "allocatedHostPorts",
            array(required(
                object(&[("name", string()), ("port", port())]),
                &["port"],
            )),
        ),
        ("clientCertificates", map(certificate())),
        ("serverCertificates", map(certificate())),
        ("inputEndpoints", map(string())),
        ("outputEndpoints", map(string())),
        ("conditions", conditions()),
        (
            "etcdMember",
            required(
                object(&[
                    ("initialCluster", map(string())),
                    ("initialClusterState", string_enum(&["new", "existing"])),
                ]),
                &["initialClusterState"],
            ),
        ),
    ])
}

fn node_join_request_spec() -> Value {
    object(&[
        ("symmetricKey", string()),
        ("apiServerEndpoint", string()),
        ("containerRuntimeEndpoint", string()),
        ("imageServiceEndpoint", string()),
        ("extraSANs", array(string())),
        ("vpnPublicKey", string()),
    ])
}

fn node_join_request_status() -> Value {
    object(&[
        ("kubernetesVersion", string()),
        (
            "vpn",
            object(&[
                ("CIDR", string()),
                ("address", string()),
                ("endpoint", string()),
                ("endpointPublicKey", string()),
                ("peerPrivateKey", string()),
            ]),
        ),
        ("kubeConfig", string()),
        ("kubeletClientCACertificate", string()),
        ("kubeletServerCertificate", string()),
        ("kubeletServerPrivateKey", string()),
        ("kubeletConfig", string()),
        ("conditions", conditions()),
    ])
}

#[cfg(test)]
mod tests;

fn labels() -> Value {
    map(string())
}

fn label_selector() -> Value {
    object(&[
        ("matchLabels", labels()),
        (
            "matchExpressions",
            array(required(
                object(&[
                    ("key", string()),
                    ("operator", string()),
                    ("values", array(string())),
                ]),
                &["key", "operator"],
            )),
        ),
    ])
}

/// A service's common fields, with `extra` ones.
fn sip_service(extra: &[(&str, Value)], required_fields: &[&str]) -> Value {
    let mut props: Vec<(&str, Value)> = vec![
        ("image", string()),
        ("nodeLabels", labels()),
        ("nodeInterfaceId", string()),
        ("clusterIP", string()),
    ];
    props.extend(extra.iter().cloned());
    array(required(object(&props), required_fields))
}

fn sip_cluster_spec() -> Value {
    required(
        object(&[
            (
                "nodes",
                map(object(&[
                    ("labelSelector", label_selector()),
                    ("topologyKey", string()),
                    (
                        "count",
                        object(&[("active", integer(0, 1000)), ("standby", integer(0, 1000))]),
                    ),
                ])),
            ),
            (
                "services",
                object(&[
                    (
                        "loadBalancerControlPlane",
                        sip_service(&[("nodePort", port())], &["image", "nodePort"]),
                    ),
                    (
                        "loadBalancerWorker",
                        sip_service(
                            &[(
                                "nodePortRange",
                                required(
                                    object(&[("start", port()), ("end", port())]),
                                    &["start", "end"],
                                ),
                            )],
                            &["image", "nodePortRange"],
                        ),
                    ),
                    (
                        "jumpHost",
                        sip_service(
                            &[
                                ("nodePort", port()),
                                ("bmc", object(&[("proxy", boolean())])),
                                ("sshAuthorizedKeys", array(string())),
                                ("nodeSSHPrivateKeys", string()),
                            ],
                            &["image", "nodePort", "nodeSSHPrivateKeys"],
                        ),
                    ),
                    (
                        "oidcProvider",
                        sip_service(
                            &[
                                ("nodePort", port()),
                                ("clientID", string()),
                                ("usernameClaim", string()),
                                ("groupsClaim", string()),
                                ("usersSecret", string()),
                                ("redirectURIs", array(string())),
                                ("passwordGrant", boolean()),
                            ],
                            &["image", "nodePort", "usersSecret"],
                        ),
                    ),
                ]),
            ),
            (
                "clusterRef",
                required(object(&[("name", string())]), &["name"]),
            ),
        ]),
        &["services"],
    )
}

fn sip_cluster_status() -> Value {
    object(&[
        (
            "jumpHosts",
            array(object(&[
                ("service", string()),
                ("clientCertificate", inline_certificate()),
            ])),
        ),
        (
            "oidcProviders",
            array(object(&[
                ("service", string()),
                ("issuerURL", string()),
                ("certificateAuthority", inline_certificate()),
                ("servingCertificate", inline_certificate()),
            ])),
        ),
        (
            "conditions",
            array(required(
                object(&[
                    ("type", string()),
                    ("status", string_enum(&["True", "False", "Unknown"])),
                    ("observedGeneration", integer(0, i64::MAX)),
                    ("lastTransitionTime", date_time()),
                    ("reason", string()),
                    ("message", string()),
                ]),
                &["type", "status", "lastTransitionTime", "reason", "message"],
            )),
        ),
    ])
}
