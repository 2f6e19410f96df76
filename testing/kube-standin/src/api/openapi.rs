//! OpenAPI v3 schemas of the built-in kinds the stand-in serves, as kube-apiserver publishes
//! them under `components.schemas` (`io.k8s.api.core.v1.ConfigMap`, ...) with their
//! `x-kubernetes-group-version-kind`: what `kubectl explain` reads. Each kind's top-level
//! fields and the fields of the objects the stand-in acts on are described; deeper parts of a
//! workload's spec are plain objects (`x-kubernetes-preserve-unknown-fields`). Descriptions are
//! ours, short, in the sense of the upstream API reference.

use serde_json::{Map, Value, json};

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn integer(description: &str) -> Value {
    json!({"type": "integer", "format": "int64", "description": description})
}

fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn time(description: &str) -> Value {
    json!({"type": "string", "format": "date-time", "description": description})
}

fn string_map(description: &str) -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}, "description": description})
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

/// An object whose inner fields are not described here.
fn opaque(description: &str) -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": description})
}

fn object(description: &str, fields: &[(&str, Value)]) -> Value {
    let properties: Map<String, Value> = fields
        .iter()
        .map(|(name, schema)| ((*name).to_string(), schema.clone()))
        .collect();
    json!({"type": "object", "description": description, "properties": properties})
}

fn array_of(description: &str, item: Value) -> Value {
    json!({"type": "array", "items": item, "description": description})
}

fn object_meta() -> Value {
    object(
        "Standard object's metadata.",
        &[
            ("name", string("Name must be unique within a namespace.")),
            (
                "generateName",
                string("A prefix the server uses to generate a unique name when name is empty."),
            ),
            (
                "namespace",
                string("The namespace of a namespaced object; empty for cluster-scoped objects."),
            ),
            (
                "uid",
                string(
                    "The unique identifier of this object in time and space, set by the server.",
                ),
            ),
            (
                "resourceVersion",
                string("An opaque version of this object, for optimistic concurrency and watches."),
            ),
            (
                "generation",
                integer("A sequence number of the desired state's changes, set by the server."),
            ),
            (
                "creationTimestamp",
                time("When this object was created, set by the server."),
            ),
            (
                "deletionTimestamp",
                time(
                    "When this object will be deleted, set by the server when deletion is requested.",
                ),
            ),
            (
                "labels",
                string_map("Map of string keys and values to organize and select objects."),
            ),
            (
                "annotations",
                string_map("Map of string keys and values to store non-identifying metadata."),
            ),
            (
                "finalizers",
                strings("Entries that must be removed before the object is deleted."),
            ),
            (
                "ownerReferences",
                array_of(
                    "Objects this object depends on; it is garbage collected when they are gone.",
                    object(
                        "A reference to an owner.",
                        &[
                            ("apiVersion", string("API version of the owner.")),
                            ("kind", string("Kind of the owner.")),
                            ("name", string("Name of the owner.")),
                            ("uid", string("UID of the owner.")),
                            (
                                "controller",
                                boolean("Whether the owner is the managing controller."),
                            ),
                            (
                                "blockOwnerDeletion",
                                boolean("Whether the owner's deletion waits for this object's."),
                            ),
                        ],
                    ),
                ),
            ),
            (
                "managedFields",
                array_of(
                    "Which field manager owns which fields.",
                    opaque("A managed fields entry."),
                ),
            ),
        ],
    )
}

fn rules() -> Value {
    array_of(
        "The PolicyRules of this role.",
        object(
            "Verbs a subject may perform on resources or non-resource URLs.",
            &[
                (
                    "apiGroups",
                    strings("The API groups of the resources; \"\" is the core group."),
                ),
                (
                    "resources",
                    strings("The resources the rule applies to; '*' is all."),
                ),
                (
                    "resourceNames",
                    strings("Names the rule is limited to; empty is every name."),
                ),
                ("verbs", strings("The verbs allowed; '*' is all.")),
                (
                    "nonResourceURLs",
                    strings("Non-resource URLs the rule applies to (cluster roles only)."),
                ),
            ],
        ),
    )
}

fn binding_fields() -> [(&'static str, Value); 2] {
    [
        (
            "roleRef",
            object(
                "The role this binding grants.",
                &[
                    ("apiGroup", string("The group of the referenced role.")),
                    ("kind", string("Role or ClusterRole.")),
                    ("name", string("The name of the role.")),
                ],
            ),
        ),
        (
            "subjects",
            array_of(
                "Who the role is granted to.",
                object(
                    "A user, group or service account.",
                    &[
                        ("kind", string("User, Group or ServiceAccount.")),
                        ("name", string("The name of the subject.")),
                        ("namespace", string("The namespace of a service account.")),
                        (
                            "apiGroup",
                            string("rbac.authorization.k8s.io for users and groups."),
                        ),
                    ],
                ),
            ),
        ),
    ]
}

/// The fields of a kind, past `apiVersion`, `kind` and `metadata`, and its description.
fn kind_fields(group: &str, kind: &str) -> Option<(&'static str, Vec<(&'static str, Value)>)> {
    let spec = |d: &str| opaque(d);
    let status = |d: &str| opaque(d);
    Some(match (group, kind) {
        ("", "Namespace") => (
            "Namespace provides a scope for names.",
            vec![
                (
                    "spec",
                    object(
                        "The behavior of the namespace.",
                        &[(
                            "finalizers",
                            strings("Must be empty before the namespace is removed."),
                        )],
                    ),
                ),
                (
                    "status",
                    object(
                        "The current status of the namespace.",
                        &[("phase", string("Active or Terminating."))],
                    ),
                ),
            ],
        ),
        ("", "ConfigMap") => (
            "ConfigMap holds configuration data for pods to consume.",
            vec![
                (
                    "data",
                    string_map(
                        "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 bytes must use the BinaryData field.",
                    ),
                ),
                (
                    "binaryData",
                    string_map(
                        "BinaryData contains the binary data, base64-encoded. Its keys may not also be in Data.",
                    ),
                ),
                (
                    "immutable",
                    boolean("If true, the data cannot be updated; only the metadata can."),
                ),
            ],
        ),
        ("", "Secret") => (
            "Secret holds secret data of a certain type.",
            vec![
                (
                    "data",
                    string_map("The secret data, base64-encoded values."),
                ),
                (
                    "stringData",
                    string_map("Write-only convenience: values merged into data as plain strings."),
                ),
                (
                    "type",
                    string(
                        "Used to facilitate programmatic handling of secret data, e.g. kubernetes.io/tls.",
                    ),
                ),
                (
                    "immutable",
                    boolean("If true, the data cannot be updated; only the metadata can."),
                ),
            ],
        ),
        ("", "ServiceAccount") => (
            "ServiceAccount binds together a name, understood by users and systems, and secrets.",
            vec![
                (
                    "secrets",
                    array_of(
                        "Secrets pods of this service account may use.",
                        opaque("An object reference."),
                    ),
                ),
                (
                    "imagePullSecrets",
                    array_of(
                        "Secrets for pulling images.",
                        opaque("A local object reference."),
                    ),
                ),
                (
                    "automountServiceAccountToken",
                    boolean("Whether pods mount a token of this account by default."),
                ),
            ],
        ),
        ("", "Service") => (
            "Service is a named abstraction of software service consisting of a port and a selector.",
            vec![
                ("spec", spec("The behavior of the service.")),
                (
                    "status",
                    status("The most recently observed status of the service."),
                ),
            ],
        ),
        ("", "Endpoints") => (
            "Endpoints is the set of addresses implementing a service.",
            vec![(
                "subsets",
                array_of(
                    "Sets of addresses and ports.",
                    opaque("An endpoint subset."),
                ),
            )],
        ),
        ("", "Node") => (
            "Node is a worker node in Kubernetes.",
            vec![
                ("spec", spec("The behavior of the node.")),
                (
                    "status",
                    status("The most recently observed status of the node."),
                ),
            ],
        ),
        ("", "Pod") => (
            "Pod is a collection of containers that can run on a host.",
            vec![
                ("spec", spec("The desired behavior of the pod.")),
                (
                    "status",
                    status("The most recently observed status of the pod."),
                ),
            ],
        ),
        ("" | "events.k8s.io", "Event") => (
            "Event is a report of an event somewhere in the cluster.",
            vec![
                (
                    "reason",
                    string("A short, machine-understandable reason for the event."),
                ),
                (
                    "message",
                    string("A human-readable description of the event."),
                ),
                ("type", string("Normal or Warning.")),
                ("involvedObject", opaque("The object this event is about.")),
                (
                    "regarding",
                    opaque("The object this event is about (events.k8s.io)."),
                ),
                ("count", integer("How many times this event has occurred.")),
                ("firstTimestamp", time("When the event was first recorded.")),
                ("lastTimestamp", time("When the event was last recorded.")),
                ("source", opaque("The component reporting this event.")),
            ],
        ),
        ("coordination.k8s.io", "Lease") => (
            "Lease defines a lease concept.",
            vec![(
                "spec",
                object(
                    "The specification of the lease.",
                    &[
                        (
                            "holderIdentity",
                            string("The identity of the holder of the lease."),
                        ),
                        (
                            "leaseDurationSeconds",
                            integer("How long candidates wait to force acquire the lease."),
                        ),
                        ("acquireTime", time("When the current lease was acquired.")),
                        ("renewTime", time("When the holder last updated the lease.")),
                        (
                            "leaseTransitions",
                            integer("How many times the lease changed holders."),
                        ),
                    ],
                ),
            )],
        ),
        ("rbac.authorization.k8s.io", "Role") => (
            "Role is a namespaced set of PolicyRules.",
            vec![("rules", rules())],
        ),
        ("rbac.authorization.k8s.io", "ClusterRole") => (
            "ClusterRole is a cluster-wide set of PolicyRules.",
            vec![
                ("rules", rules()),
                (
                    "aggregationRule",
                    opaque("How to build the rules from other cluster roles."),
                ),
            ],
        ),
        ("rbac.authorization.k8s.io", "RoleBinding") => (
            "RoleBinding grants the permissions of a role within a namespace.",
            binding_fields().into_iter().collect(),
        ),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => (
            "ClusterRoleBinding grants the permissions of a cluster role across the cluster.",
            binding_fields().into_iter().collect(),
        ),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => (
            "CustomResourceDefinition represents a resource that should be exposed on the API server.",
            vec![
                (
                    "spec",
                    spec("The resource's group, names, scope and versions."),
                ),
                ("status", status("The conditions and accepted names.")),
            ],
        ),
        ("apps", "Deployment") => (
            "Deployment enables declarative updates for Pods and ReplicaSets.",
            vec![
                ("spec", spec("The desired behavior of the Deployment.")),
                (
                    "status",
                    status("The most recently observed status of the Deployment."),
                ),
            ],
        ),
        ("apps", "DaemonSet") => (
            "DaemonSet represents the configuration of a daemon set.",
            vec![
                ("spec", spec("The desired behavior of this daemon set.")),
                ("status", status("The current status of this daemon set.")),
            ],
        ),
        ("certificates.k8s.io", "CertificateSigningRequest") => (
            "CertificateSigningRequest objects provide a mechanism to obtain x509 certificates by submitting a request and having it asynchronously approved and issued.",
            vec![
                ("spec", spec("The certificate request and its signer.")),
                (
                    "status",
                    status("The approval conditions and the issued certificate."),
                ),
            ],
        ),
        _ => return None,
    })
}

/// The schema's name in `components.schemas`, as kube-apiserver names it.
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let package = match group {
        "" => "io.k8s.api.core".to_string(),
        "apiextensions.k8s.io" => {
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_string()
        }
        g => format!(
            "io.k8s.api.{}",
            g.trim_end_matches(".k8s.io").split('.').next().unwrap_or(g)
        ),
    };
    format!("{package}.{version}.{kind}")
}

/// The schema of a built-in kind, with its group-version-kind; `None` for kinds not described.
pub fn builtin_schema(group: &str, version: &str, kind: &str) -> Option<Value> {
    let (description, fields) = kind_fields(group, kind)?;
    let mut all = vec![
        (
            "apiVersion",
            string("APIVersion defines the versioned schema of this representation of an object."),
        ),
        (
            "kind",
            string("Kind is a string value representing the REST resource this object represents."),
        ),
        ("metadata", object_meta()),
    ];
    all.extend(fields);
    let mut schema = object(description, &all);
    schema["x-kubernetes-group-version-kind"] =
        json!([{"group": group, "version": version, "kind": kind}]);
    Some(schema)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_builtin_kind_has_its_fields_and_its_group_version_kind() {
        let cm = builtin_schema("", "v1", "ConfigMap").unwrap();
        assert_eq!(
            cm["properties"]["data"]["additionalProperties"]["type"],
            "string"
        );
        assert_eq!(
            cm["properties"]["metadata"]["properties"]["labels"]["type"],
            "object"
        );
        assert_eq!(
            cm["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "ConfigMap"}])
        );
        assert!(builtin_schema("example.com", "v1", "Widget").is_none());
    }

    #[test]
    fn schema_names_are_kube_apiservers() {
        assert_eq!(
            schema_name("", "v1", "ConfigMap"),
            "io.k8s.api.core.v1.ConfigMap"
        );
        assert_eq!(
            schema_name("apps", "v1", "Deployment"),
            "io.k8s.api.apps.v1.Deployment"
        );
        assert_eq!(
            schema_name("rbac.authorization.k8s.io", "v1", "Role"),
            "io.k8s.api.rbac.v1.Role"
        );
        assert_eq!(
            schema_name("coordination.k8s.io", "v1", "Lease"),
            "io.k8s.api.coordination.v1.Lease"
        );
        assert_eq!(
            schema_name("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
        );
    }
}
