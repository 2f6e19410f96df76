//! The deployment under `config/` (a kustomize base) against the code it deploys:
//! - the CRDs under config/crd are what `oi-manager crds` prints (drift check);
//! - every resource a kustomization lists exists, parses, and is one of the expected objects;
//! - the RBAC rules are exactly `kube_store::PERMISSIONS`;
//! - the Deployment's probes and ports are what `http.rs` serves, and its arguments parse
//!   with the real command line parser.
//!
//! Regenerate config/crd: `OI_UPDATE_GOLDEN=1 cargo test -p oi-manager --test config`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use oi_api::Kind;
use oi_manager::args::{Command, parse_args};
use oi_manager::http::{DEFAULT_METRICS_PORT, DEFAULT_PROBE_PORT, HEALTHZ_PATH, READYZ_PATH};
use oi_manager::kube_store::PERMISSIONS;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const NAMESPACE: &str = "oneinfra-system";
const SERVICE_ACCOUNT: &str = "oi-manager";

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config")
}

/// Every YAML document of a file, as JSON values.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            let value: serde_yaml_ng::Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
            serde_json::to_value(value).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// The only document of a file.
fn document(path: &Path) -> Value {
    let mut docs = documents(path);
    assert_eq!(docs.len(), 1, "{} must hold one document", path.display());
    docs.remove(0)
}

/// The file of a kind's CRD: `<group>_<plural>.yaml`, as kubebuilder names them.
fn crd_file_name(crd: &Value) -> String {
    let name = crd["metadata"]["name"].as_str().unwrap();
    let (plural, group) = name.split_once('.').unwrap();
    format!("{group}_{plural}.yaml")
}

#[test]
fn crds_are_what_oi_manager_crds_prints() {
    let dir = config_dir().join("crd");
    let generated: Vec<(String, Value)> = Kind::ALL
        .into_iter()
        .filter_map(oi_api::crd::custom_resource_definition)
        .map(|crd| (crd_file_name(&crd), crd))
        .collect();
    // `oi-manager crds` prints these, in this order.
    let printed: Vec<Value> =
        serde_yaml_ng::Deserializer::from_str(&oi_api::crd::crds_yaml().unwrap())
            .map(|doc| {
                serde_json::to_value(
                    <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).unwrap(),
                )
                .unwrap()
            })
            .collect();
    assert_eq!(
        printed,
        generated.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>()
    );

    let how = "config/crd is out of date: regenerate it with \
               `OI_UPDATE_GOLDEN=1 cargo test -p oi-manager --test config`, or run \
               `oi-manager crds` and split its documents (separated by `---`) into \
               config/crd/<group>_<plural>.yaml, one per kind, listed in \
               config/crd/kustomization.yaml";
    for (file, crd) in &generated {
        let path = dir.join(file);
        oi_testsupport::assert_golden(
            &path,
            &serde_yaml_ng::to_string(crd).unwrap(),
            "cargo test -p oi-manager --test config",
        );
        assert!(
            document(&path) == *crd,
            "{} differs from the generated CRD; {how}",
            path.display()
        );
    }
    // Nothing else in the directory: a kind that was removed leaves no stale CRD behind.
    let mut on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(on_disk.remove("kustomization.yaml"));
    let expected: BTreeSet<String> = generated.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(on_disk, expected, "{how}");
    assert_eq!(
        kustomization_resources(&dir),
        generated.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>(),
        "{how}"
    );
}

fn kustomization_resources(dir: &Path) -> Vec<String> {
    let k = document(&dir.join("kustomization.yaml"));
    assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1beta1");
    assert_eq!(k["kind"], "Kustomization");
    k["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no resources", dir.display()))
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// Every object the kustomize base holds, by file, following each kustomization's resources
/// (directories are kustomizations themselves).
fn objects(dir: &Path, out: &mut Vec<(PathBuf, Value)>, files: &mut BTreeSet<PathBuf>) {
    files.insert(dir.join("kustomization.yaml"));
    for resource in kustomization_resources(dir) {
        let path = dir.join(&resource);
        assert!(
            path.exists(),
            "{} lists {resource}, which does not exist",
            dir.join("kustomization.yaml").display()
        );
        if path.is_dir() {
            objects(&path, out, files);
        } else {
            files.insert(path.clone());
            for doc in documents(&path) {
                assert!(doc["apiVersion"].is_string(), "{}", path.display());
                assert!(doc["kind"].is_string(), "{}", path.display());
                assert!(doc["metadata"]["name"].is_string(), "{}", path.display());
                out.push((path.clone(), doc));
            }
        }
    }
}

/// The whole base: `(kind, name) -> object`.
fn base() -> BTreeMap<(String, String), Value> {
    let root = config_dir();
    let mut found = Vec::new();
    let mut files = BTreeSet::new();
    objects(&root, &mut found, &mut files);
    let mut all_yaml = BTreeSet::new();
    yaml_files(&root, &mut all_yaml);
    assert_eq!(
        all_yaml, files,
        "every YAML file under config/ is listed by a kustomization"
    );
    let mut by_name = BTreeMap::new();
    for (path, doc) in found {
        let key = (
            doc["kind"].as_str().unwrap().to_string(),
            doc["metadata"]["name"].as_str().unwrap().to_string(),
        );
        assert!(
            by_name.insert(key.clone(), doc).is_none(),
            "{key:?} twice ({})",
            path.display()
        );
    }
    by_name
}

fn yaml_files(dir: &Path, out: &mut BTreeSet<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.insert(path);
        }
    }
}

fn object<'a>(base: &'a BTreeMap<(String, String), Value>, kind: &str, name: &str) -> &'a Value {
    base.get(&(kind.to_string(), name.to_string()))
        .unwrap_or_else(|| panic!("no {kind} {name} in config/"))
}

#[test]
fn the_base_holds_exactly_the_expected_objects() {
    let root = document(&config_dir().join("kustomization.yaml"));
    assert_eq!(root["namespace"], NAMESPACE);
    let base = base();
    let mut expected: BTreeSet<(String, String)> = Kind::ALL
        .into_iter()
        .filter_map(oi_api::crd::custom_resource_definition)
        .map(|crd| {
            (
                "CustomResourceDefinition".to_string(),
                crd["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (kind, name) in [
        ("Namespace", NAMESPACE),
        ("ServiceAccount", SERVICE_ACCOUNT),
        ("ClusterRole", "oi-manager"),
        ("ClusterRoleBinding", "oi-manager"),
        ("ClusterRole", "oi-manager-secrets"),
        ("ClusterRoleBinding", "oi-manager-secrets"),
        ("Role", "oi-manager-leader-election"),
        ("RoleBinding", "oi-manager-leader-election"),
        ("ClusterRole", "oneinfra-hypervisor-joiner"),
        ("ClusterRoleBinding", "oneinfra-hypervisor-joiner"),
        ("Deployment", "oi-manager"),
        ("Service", "oi-manager-metrics"),
    ] {
        expected.insert((kind.to_string(), name.to_string()));
    }
    assert_eq!(base.keys().cloned().collect::<BTreeSet<_>>(), expected);
    // Namespaced objects say their namespace (kustomize would set it; `kubectl apply -f`
    // of one file would not).
    for ((kind, name), doc) in &base {
        let namespaced = !matches!(
            kind.as_str(),
            "CustomResourceDefinition" | "Namespace" | "ClusterRole" | "ClusterRoleBinding"
        );
        if namespaced {
            assert_eq!(doc["metadata"]["namespace"], NAMESPACE, "{kind} {name}");
        } else {
            assert!(doc["metadata"]["namespace"].is_null(), "{kind} {name}");
        }
    }
}

/// `(apiGroup, resource) -> verbs` of a role's rules; one rule per pair at most.
fn rules(role: &Value) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for rule in role["rules"].as_array().unwrap() {
        let rule = rule.as_object().unwrap();
        let keys: BTreeSet<&str> = rule.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["apiGroups", "resources", "verbs"]),
            "no resourceNames or nonResourceURLs: {rule:?}"
        );
        let strings = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        let verbs: BTreeSet<String> = strings("verbs").into_iter().collect();
        assert!(!verbs.contains("*"), "no wildcard verbs: {rule:?}");
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                assert!(
                    group != "*" && !resource.contains('*'),
                    "no wildcards: {rule:?}"
                );
                assert!(
                    out.insert((group.clone(), resource), verbs.clone())
                        .is_none(),
                    "one rule per resource: {rule:?}"
                );
            }
        }
    }
    out
}

#[test]
fn rbac_is_exactly_the_permissions_the_store_needs() {
    let base = base();
    let granted_cluster_wide = rules(object(&base, "ClusterRole", "oi-manager"));
    let granted_secrets = rules(object(&base, "ClusterRole", "oi-manager-secrets"));
    let granted_in_namespace = rules(object(&base, "Role", "oi-manager-leader-election"));

    let needed = |resource: Option<&str>| -> BTreeMap<(String, String), BTreeSet<String>> {
        PERMISSIONS
            .iter()
            .filter(|p| match resource {
                Some(r) => p.resource == r,
                None => !["leases", "secrets"].contains(&p.resource),
            })
            .map(|p| {
                (
                    (p.api_group.to_string(), p.resource.to_string()),
                    p.verbs.iter().map(|v| (*v).to_string()).collect(),
                )
            })
            .collect()
    };
    // The leader Lease lives in the manager's namespace: a Role there, not a ClusterRole.
    assert_eq!(
        granted_in_namespace,
        needed(Some("leases")),
        "config/rbac/leader_election_role.yaml must grant exactly the Lease permissions of \
         kube_store::PERMISSIONS"
    );
    assert_eq!(
        granted_cluster_wide,
        needed(None),
        "config/rbac/cluster_role.yaml must grant exactly kube_store::PERMISSIONS (Leases \
         and Secrets aside)"
    );
    // Secrets have a ClusterRole of their own, so that a manager confined to a namespace
    // is bound to it there alone (see config/rbac/secrets_role.yaml).
    assert_eq!(
        granted_secrets,
        needed(Some("secrets")),
        "config/rbac/secrets_role.yaml must grant exactly the Secret permissions of \
         kube_store::PERMISSIONS"
    );
    let secrets_binding = object(&base, "ClusterRoleBinding", "oi-manager-secrets");
    assert_eq!(secrets_binding["roleRef"]["name"], "oi-manager-secrets");

    // A hypervisor join token creates Hypervisors and nothing else (not even reads them:
    // their specs hold CRI client keys).
    assert_eq!(
        rules(object(&base, "ClusterRole", "oneinfra-hypervisor-joiner")),
        BTreeMap::from([(
            (
                "infra.oneinfra.ereslibre.es".to_string(),
                "hypervisors".to_string()
            ),
            BTreeSet::from(["create".to_string()])
        )])
    );
    let joiners = object(&base, "ClusterRoleBinding", "oneinfra-hypervisor-joiner");
    assert_eq!(joiners["roleRef"]["name"], "oneinfra-hypervisor-joiner");
    assert_eq!(
        joiners["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
            "name": "system:bootstrappers:oneinfra:hypervisors"}])
    );

    let subject =
        json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]);
    let binding = object(&base, "ClusterRoleBinding", "oi-manager");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "oi-manager"})
    );
    assert_eq!(binding["subjects"], subject);
    assert_eq!(secrets_binding["subjects"], subject);
    let binding = object(&base, "RoleBinding", "oi-manager-leader-election");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "oi-manager-leader-election"})
    );
    assert_eq!(binding["subjects"], subject);
    let deployment = object(&base, "Deployment", "oi-manager");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        SERVICE_ACCOUNT
    );
}

fn container(base: &BTreeMap<(String, String), Value>) -> &Value {
    let pod = &object(base, "Deployment", "oi-manager")["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    &containers[0]
}

fn port_of(address: std::net::SocketAddr) -> u64 {
    u64::from(address.port())
}

#[test]
fn the_deployment_runs_what_the_binary_serves() {
    let base = base();
    let deployment = object(&base, "Deployment", "oi-manager");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[k], v, "the selector selects the pods");
    }
    let c = container(&base);
    assert_eq!(c["image"], "localhost/oneinfra/oi-manager:0.1.0");
    assert_eq!(c["command"], json!(["/usr/local/bin/oi-manager"]));

    // The arguments parse with the real parser, into settings that check.
    let mut argv = vec!["oi-manager".to_string()];
    argv.extend(
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    let cli = parse_args(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let Command::Run(args) = cli.command else {
        panic!("the Deployment does not run `oi-manager run`: {argv:?}");
    };
    assert!(args.leader_elect, "leader election is on with 2 replicas");
    let settings = args.settings("pod").unwrap();
    assert!(settings.lease.is_some());

    // Probes: the paths and port http.rs serves them on, the port the args bind.
    assert_eq!(
        port_of(settings.probe_address),
        u64::from(DEFAULT_PROBE_PORT)
    );
    assert_eq!(
        port_of(settings.metrics_address),
        u64::from(DEFAULT_METRICS_PORT)
    );
    assert_ne!(settings.probe_address, settings.metrics_address);
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": HEALTHZ_PATH, "port": DEFAULT_PROBE_PORT})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": READYZ_PATH, "port": DEFAULT_PROBE_PORT})
    );
    assert_eq!(
        c["ports"],
        json!([
            {"name": "metrics", "containerPort": port_of(settings.metrics_address), "protocol": "TCP"},
            {"name": "probes", "containerPort": port_of(settings.probe_address), "protocol": "TCP"},
        ])
    );
    let service = object(&base, "Service", "oi-manager-metrics");
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "metrics", "port": DEFAULT_METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}])
    );
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    // The Lease's namespace and the replica's identity come from the downward API.
    assert_eq!(
        c["env"],
        json!([
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ])
    );

    // Restricted pod security.
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(
        c["securityContext"],
        json!({
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]},
        })
    );
    for bound in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                c["resources"][bound][resource].is_string(),
                "resources.{bound}.{resource}"
            );
        }
    }
}

/// kustomize itself (kubectl's, as `kubectl apply -k config` runs it) builds the base into
/// exactly the objects read above, none changed.
#[test]
fn kubectl_kustomize_builds_the_base_unchanged() {
    let test = "kubectl_kustomize_builds_the_base_unchanged";
    if !oi_testsupport::require(
        test,
        "command `kubectl` on PATH",
        oi_testsupport::have_command("kubectl"),
    ) {
        return;
    }
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(config_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built: BTreeMap<(String, String), Value> =
        serde_yaml_ng::Deserializer::from_str(&String::from_utf8(out.stdout).unwrap())
            .map(|doc| {
                let value: serde_yaml_ng::Value = serde::Deserialize::deserialize(doc).unwrap();
                let value = serde_json::to_value(value).unwrap();
                (
                    (
                        value["kind"].as_str().unwrap().to_string(),
                        value["metadata"]["name"].as_str().unwrap().to_string(),
                    ),
                    value,
                )
            })
            .collect();
    assert_eq!(built, base());
}
