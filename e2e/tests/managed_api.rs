//! A managed cluster's API, as a platform engineer uses it: a 3-replica cluster reconciled on
//! real local hypervisors (containerd, etcd 3.4, haproxy, the kube stand-in image), reached
//! through its ingress with the admin kubeconfig by real kubectl and by kube-rs. Objects live
//! in the cluster's etcd: they survive the loss of an API server replica, and a replaced
//! replica serves them. Bootstrap tokens and certificates are checked as kube-apiserver
//! checks them; the controller-manager stand-ins elect a leader and run their controllers.

use std::path::Path;
use std::time::Duration;

use crate::kubectl::{self, Kubectl};
use base64::Engine as _;
use oi_e2e::{LocalSet, admin_kubeconfig, eventually, inject_cluster, prerequisites, reconcile};
use oi_kube_standin::local::{KubeconfigUser, TestCa, kubeconfig};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: tenants.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: tenants, singular: tenant, kind: Tenant}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Owner, type: string, jsonPath: .spec.owner}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {owner: {type: string}}}
"#;

fn tenant(owner: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Tenant\nmetadata: {{name: acme, namespace: team}}\nspec: {{owner: {owner}}}\n"
    )
}

/// The server URL, CA and a kubeconfig for another credential, from the admin kubeconfig.
fn with_credentials(admin: &Path, user: KubeconfigUser<'_>) -> String {
    let text = std::fs::read_to_string(admin).unwrap();
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let cluster = &value["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster["certificate-authority-data"].as_str().unwrap())
        .unwrap();
    kubeconfig(server, &String::from_utf8(ca).unwrap(), user)
}

fn bootstrap_secret(id: &str, expiration: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: bootstrap-token-{id}, namespace: kube-system}}\ntype: bootstrap.kubernetes.io/token\ndata:\n  token-id: {}\n  token-secret: {}\n  expiration: {}\n  usage-bootstrap-authentication: {}\n  auth-extra-groups: {}\n",
        b64(id),
        b64("0123456789abcdef"),
        b64(expiration),
        b64("true"),
        b64("system:bootstrappers:joiners"),
    )
}

#[test]
fn a_managed_clusters_api_through_its_ingress() {
    let test = "a_managed_clusters_api_through_its_ingress";
    if !prerequisites(test) || !kubectl::available(test) {
        return;
    }
    let set = LocalSet::create("api", 3, 1, false).unwrap();
    let injected = inject_cluster(&set.manifests, "c1", 3).unwrap();
    let first = reconcile(&injected, &[])
        .unwrap()
        .ok("oi reconcile")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let world = oi_e2e::World::parse(&first.stdout).unwrap();
    let admin_path = admin_kubeconfig(&world, "c1", dir.path()).unwrap();
    let admin = Kubectl::new(
        dir.path(),
        "admin",
        &std::fs::read_to_string(&admin_path).unwrap(),
    );
    eventually(Duration::from_secs(60), || {
        anyhow::ensure!(
            admin.run(&["get", "ns", "kube-system"]).status.success(),
            "not serving yet"
        );
        Ok(())
    })
    .unwrap();

    // Namespaces, a CRD and an object of it, as kubectl makes them.
    assert_eq!(
        admin.ok(&["create", "ns", "team"]),
        "namespace/team created\n"
    );
    admin.ok_with(&["apply", "-f", "-"], CRD);
    assert_eq!(
        admin.ok_with(&["apply", "-f", "-"], &tenant("alice")),
        "tenant.example.com/acme created\n"
    );
    let yaml = admin.ok(&["get", "tenant", "acme", "-n", "team", "-o", "yaml"]);
    assert!(
        yaml.contains("owner: alice") && yaml.contains("kind: Tenant"),
        "{yaml}"
    );
    let table = admin.ok(&["get", "tenants", "-n", "team"]);
    assert_eq!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["acme", "alice"],
        "{table}"
    );

    // A watch sees what another client changes.
    let watch = admin.watch(&[
        "get",
        "tenants",
        "-n",
        "team",
        "-w",
        "--output-watch-events",
    ]);
    watch.until("the tenant", |l| {
        l.starts_with("ADDED") && l.contains("acme")
    });
    let bob = Kubectl::new(
        dir.path(),
        "bob",
        &std::fs::read_to_string(&admin_path).unwrap(),
    );
    bob.ok_with(&["apply", "-f", "-"], &tenant("bob"));
    watch.until("bob's change", |l| {
        l.starts_with("MODIFIED") && l.contains("bob")
    });
    drop(watch);

    // Who am I, what may I do.
    let me = admin.ok(&["auth", "whoami"]);
    assert!(me.contains("system:masters"), "{me}");
    assert_eq!(admin.ok(&["auth", "can-i", "delete", "nodes"]), "yes\n");

    // A bootstrap token: what RBAC grants, nothing else; expired or deleted: 401.
    admin.ok_with(
        &["apply", "-f", "-"],
        &bootstrap_secret("join01", "2999-01-01T00:00:00Z"),
    );
    admin.ok(&[
        "create",
        "configmap",
        "join-info",
        "-n",
        "team",
        "--from-literal=k=v",
    ]);
    admin.ok(&[
        "create",
        "role",
        "join-reader",
        "-n",
        "team",
        "--verb=get",
        "--resource=configmaps",
        "--resource-name=join-info",
    ]);
    admin.ok(&[
        "create",
        "rolebinding",
        "joiners",
        "-n",
        "team",
        "--role=join-reader",
        "--group=system:bootstrappers:joiners",
    ]);
    let token = Kubectl::new(
        dir.path(),
        "token",
        &with_credentials(
            &admin_path,
            KubeconfigUser::Token("join01.0123456789abcdef"),
        ),
    );
    assert!(
        token
            .ok(&["auth", "whoami"])
            .contains("system:bootstrap:join01")
    );
    assert!(
        token
            .ok(&["get", "cm", "join-info", "-n", "team", "-o", "name"])
            .contains("configmap/join-info")
    );
    let refused = token.fails(&["get", "secrets", "-n", "kube-system"]);
    assert_eq!(
        refused.trim(),
        "Error from server (Forbidden): secrets is forbidden: User \"system:bootstrap:join01\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    admin.ok_with(
        &["apply", "-f", "-"],
        &bootstrap_secret("old001", "2001-01-01T00:00:00Z"),
    );
    let expired = Kubectl::new(
        dir.path(),
        "expired",
        &with_credentials(
            &admin_path,
            KubeconfigUser::Token("old001.0123456789abcdef"),
        ),
    );
    assert!(
        expired
            .fails(&["get", "cm", "join-info", "-n", "team"])
            .contains("You must be logged in to the server")
    );
    admin.ok(&[
        "delete",
        "secret",
        "bootstrap-token-join01",
        "-n",
        "kube-system",
    ]);
    assert!(
        token
            .fails(&["get", "cm", "join-info", "-n", "team"])
            .contains("You must be logged in to the server")
    );
    // A client certificate from another CA: 401.
    let other = TestCa::new("not-the-cluster").unwrap();
    let (cert, key) = other
        .leaf("kubernetes-admin", &["system:masters"], &[], false, true)
        .unwrap();
    let forged = Kubectl::new(
        dir.path(),
        "forged",
        &with_credentials(
            &admin_path,
            KubeconfigUser::Certificate {
                cert_pem: &cert,
                key_pem: &key,
            },
        ),
    );
    assert!(
        forged
            .fails(&["get", "ns"])
            .contains("You must be logged in to the server")
    );

    // kube-rs, the product's client.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let names = rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&admin_path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect::<Vec<_>>()
    });
    assert!(names.contains(&"team".to_string()), "{names:?}");

    // The controller-manager stand-ins: one leads; the default ServiceAccount appears.
    eventually(Duration::from_secs(60), || {
        anyhow::ensure!(
            admin
                .run(&["get", "sa", "default", "-n", "team"])
                .status
                .success(),
            "no default ServiceAccount yet"
        );
        Ok(())
    })
    .unwrap();
    let holder = admin.ok(&[
        "get",
        "lease",
        "kube-controller-manager",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert!(!holder.is_empty());

    // Replica 0's pod goes: the others serve everything through the ingress.
    let typed = oi_api::World::load(&first.stdout, "oi reconcile").unwrap();
    let replica = typed
        .components
        .values()
        .find(|c| c.metadata.name == "c1-control-plane-0")
        .unwrap()
        .clone();
    let hypervisor = typed.hypervisor_of(&replica).unwrap().clone();
    set.remove_pod(&hypervisor.metadata.name, "c1-control-plane-0")
        .unwrap();
    for _ in 0..5 {
        assert_eq!(
            admin.ok(&[
                "get",
                "tenant",
                "acme",
                "-n",
                "team",
                "-o",
                "jsonpath={.spec.owner}"
            ]),
            "bob"
        );
    }
    // A reconcile replaces it; the new replica, asked directly, serves the same objects.
    let second = reconcile(&first.stdout, &[])
        .unwrap()
        .ok("second oi reconcile")
        .unwrap();
    let summary = second.summary().unwrap();
    assert!(summary.pods_created >= 1, "{summary}");
    let port = replica.status.host_port("apiserver").unwrap();
    let direct_text = std::fs::read_to_string(&admin_path)
        .unwrap()
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("server:") {
                format!("    server: https://{}:{port}", hypervisor.spec.ip_address)
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let direct = Kubectl::new(dir.path(), "direct", &direct_text);
    eventually(Duration::from_secs(60), || {
        let out = direct.run(&[
            "get",
            "tenant",
            "acme",
            "-n",
            "team",
            "-o",
            "jsonpath={.spec.owner}",
        ]);
        anyhow::ensure!(
            out.stdout == b"bob",
            "replica 0: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    })
    .unwrap();
    // Deleting works through any replica.
    direct.ok(&["delete", "tenant", "acme", "-n", "team"]);
    assert!(
        admin
            .fails(&["get", "tenant", "acme", "-n", "team"])
            .contains("not found")
    );
    drop(set);
}
