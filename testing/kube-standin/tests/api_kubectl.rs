//! The API server stand-in (over memory, in process) with real `kubectl` as the client: what
//! a platform engineer types, and what our product will do inside a managed cluster. Real
//! etcd and the stand-in binary are in `api_etcd.rs`; through a real cluster's ingress in
//! the e2e tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/kubectl.rs"]
mod kubectl;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kubectl::{Kubectl, eventually};
use oi_kube_standin::local::{KubeconfigUser, LocalApiServer, LocalOptions, TestCa, kubeconfig};
use serde_json::Value;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              color: {type: string, default: blue}
          status:
            type: object
            properties:
              ready: {type: boolean}
"#;

fn widget(size: u32) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w1, namespace: team-a, labels: {{app: demo}}}}\nspec: {{size: {size}}}\n"
    )
}

struct Setup {
    server: LocalApiServer,
    admin: Kubectl,
}

fn setup(test: &str) -> Option<Setup> {
    if !kubectl::available(test) {
        return None;
    }
    let server = LocalApiServer::start(LocalOptions::default()).unwrap();
    let admin = Kubectl::new(server.dir(), "admin", &server.admin_kubeconfig().unwrap());
    Some(Setup { server, admin })
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn system_namespaces_discovery_and_tables() {
    let Some(Setup {
        admin,
        server: _server,
    }) = setup("kubectl: system namespaces")
    else {
        return;
    };
    let out = admin.ok(&["get", "ns"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATUS", "AGE"]
    );
    for ns in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(ns) && l.contains("Active")),
            "{out}"
        );
    }
    let resources = admin.ok(&["api-resources", "-o", "name"]);
    for r in [
        "namespaces",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "services",
        "endpoints",
        "nodes",
        "events",
        "leases.coordination.k8s.io",
        "roles.rbac.authorization.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "deployments.apps",
        "daemonsets.apps",
        "certificatesigningrequests.certificates.k8s.io",
        "events.events.k8s.io",
    ] {
        assert!(
            resources.lines().any(|l| l == r),
            "{r} missing from api-resources:\n{resources}"
        );
    }
    let versions = admin.ok(&["api-versions"]);
    assert!(
        versions.lines().any(|l| l == "coordination.k8s.io/v1"),
        "{versions}"
    );
    // The bootstrap policy is there, and the kubernetes Service has the range's first address.
    let roles = admin.ok(&["get", "clusterroles", "-o", "name"]);
    for r in [
        "cluster-admin",
        "system:basic-user",
        "system:node-bootstrapper",
        "system:kube-controller-manager",
    ] {
        assert!(
            roles.contains(&format!("clusterrole.rbac.authorization.k8s.io/{r}\n")),
            "{roles}"
        );
    }
    let svc = json(&admin.ok(&["get", "svc", "kubernetes", "-n", "default", "-o", "json"]));
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    // Health and version, as a client reads them.
    assert_eq!(admin.ok(&["get", "--raw", "/readyz"]), "ok");
    assert!(
        admin
            .ok(&["get", "--raw", "/readyz?verbose"])
            .contains("[+]poststarthook/rbac/bootstrap-roles ok")
    );
}

#[test]
fn namespaces_crds_and_custom_objects_through_kubectl() {
    let Some(Setup {
        admin,
        server: _server,
    }) = setup("kubectl: CRDs and custom objects")
    else {
        return;
    };
    assert_eq!(
        admin.ok(&["create", "ns", "team-a"]),
        "namespace/team-a created\n"
    );
    assert!(
        admin
            .fails(&["create", "ns", "team-a"])
            .contains("Error from server (AlreadyExists): namespaces \"team-a\" already exists")
    );
    assert_eq!(
        admin.ok_with(&["apply", "-f", "-"], CRD),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created\n"
    );
    let crd = json(&admin.ok(&["get", "crd", "widgets.example.com", "-o", "json"]));
    let established = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established, "{crd}");
    assert_eq!(
        admin.ok_with(&["apply", "-f", "-"], &widget(3)),
        "widget.example.com/w1 created\n"
    );
    assert_eq!(
        admin.ok_with(&["apply", "-f", "-"], &widget(3)),
        "widget.example.com/w1 unchanged\n"
    );
    assert_eq!(
        admin.ok_with(&["apply", "-f", "-"], &widget(4)),
        "widget.example.com/w1 configured\n"
    );
    let w = json(&admin.ok(&["get", "wd", "w1", "-n", "team-a", "-o", "json"]));
    assert_eq!(w["spec"]["size"], 4);
    assert_eq!(
        w["spec"]["color"], "blue",
        "the schema's default was applied"
    );
    assert_eq!(
        w["metadata"]["generation"], 2,
        "a spec change bumped the generation"
    );
    assert!(
        w["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    // Printer columns, across namespaces.
    let table = admin.ok(&["get", "widgets", "-A"]);
    assert_eq!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["team-a", "w1", "4"],
        "{table}"
    );
    // The schema is enforced: the message names the field.
    let bad = widget(0);
    let err = admin.run_with(&["apply", "-f", "-"], &bad);
    assert!(!err.status.success());
    let stderr = String::from_utf8_lossy(&err.stderr);
    assert!(
        stderr.contains(
            "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
        ),
        "{stderr}"
    );
    // Unknown fields are refused under kubectl's strict validation.
    let unknown = widget(2).replace("spec: {size: 2}", "spec: {size: 2, colour: red}");
    let stderr = admin.run_with(&["apply", "-f", "-"], &unknown).stderr;
    assert!(
        String::from_utf8_lossy(&stderr).contains("unknown field \"spec.colour\""),
        "{}",
        String::from_utf8_lossy(&stderr)
    );
    // A namespace that does not exist.
    let elsewhere = widget(2).replace("team-a", "nowhere");
    let stderr = String::from_utf8_lossy(&admin.run_with(&["apply", "-f", "-"], &elsewhere).stderr)
        .into_owned();
    assert!(
        stderr.contains("namespaces \"nowhere\" not found"),
        "{stderr}"
    );
    // Delete the object, then the namespace (kubectl waits until it is gone).
    assert_eq!(
        admin.ok(&["delete", "widget", "w1", "-n", "team-a"]),
        "widget.example.com \"w1\" deleted\n"
    );
    admin.ok(&[
        "create",
        "configmap",
        "left",
        "-n",
        "team-a",
        "--from-literal=a=b",
    ]);
    assert_eq!(
        admin.ok(&["delete", "ns", "team-a", "--timeout=30s"]),
        "namespace \"team-a\" deleted\n"
    );
    assert!(
        admin
            .fails(&["get", "ns", "team-a"])
            .contains("namespaces \"team-a\" not found")
    );
    // Deleting the CRD removes its resource.
    admin.ok(&["delete", "crd", "widgets.example.com", "--timeout=30s"]);
    assert!(
        admin
            .fails(&["get", "--raw", "/apis/example.com/v1/widgets"])
            .contains("NotFound")
    );
    // The system namespaces cannot go.
    assert!(
        admin
            .fails(&["delete", "ns", "kube-system"])
            .contains("namespaces \"kube-system\" is forbidden: this namespace may not be deleted")
    );
}

#[test]
fn a_watch_sees_what_another_client_changes() {
    let Some(Setup { server, admin }) = setup("kubectl: watch") else {
        return;
    };
    admin.ok(&["create", "ns", "w"]);
    admin.ok(&[
        "create",
        "configmap",
        "first",
        "-n",
        "w",
        "--from-literal=a=1",
    ]);
    let watch = admin.watch(&[
        "get",
        "configmaps",
        "-n",
        "w",
        "-w",
        "--output-watch-events",
    ]);
    watch.until("the existing object", |l| {
        l.starts_with("ADDED") && l.contains("first")
    });
    let other = Kubectl::new(
        server.dir(),
        "other",
        &server.kubeconfig_for("bob", &["system:masters"]).unwrap(),
    );
    other.ok(&[
        "create",
        "configmap",
        "second",
        "-n",
        "w",
        "--from-literal=a=1",
    ]);
    watch.until("another client's create", |l| {
        l.starts_with("ADDED") && l.contains("second")
    });
    other.ok(&["label", "configmap", "first", "-n", "w", "x=y"]);
    watch.until("another client's change", |l| {
        l.starts_with("MODIFIED") && l.contains("first")
    });
    other.ok(&["delete", "configmap", "second", "-n", "w"]);
    watch.until("another client's delete", |l| {
        l.starts_with("DELETED") && l.contains("second")
    });
}

#[test]
fn whoami_can_i_and_refusals_with_the_real_messages() {
    let Some(Setup { server, admin }) = setup("kubectl: whoami and can-i") else {
        return;
    };
    let me = admin.ok(&["auth", "whoami"]);
    assert!(me.contains("Username    kubernetes-admin"), "{me}");
    assert!(me.contains("[system:masters system:authenticated]"), "{me}");
    admin.ok(&["create", "ns", "x"]);
    admin.ok(&[
        "create",
        "role",
        "cm-reader",
        "-n",
        "x",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    admin.ok(&[
        "create",
        "rolebinding",
        "alice-reads",
        "-n",
        "x",
        "--role=cm-reader",
        "--user=alice",
    ]);
    admin.ok(&["create", "configmap", "c", "-n", "x", "--from-literal=a=b"]);
    let alice = Kubectl::new(
        server.dir(),
        "alice",
        &server.kubeconfig_for("alice", &["devs"]).unwrap(),
    );
    assert_eq!(
        alice.ok(&["auth", "can-i", "list", "configmaps", "-n", "x"]),
        "yes\n"
    );
    assert_eq!(
        alice
            .run(&["auth", "can-i", "list", "secrets", "-n", "x"])
            .stdout,
        b"no\n"
    );
    assert_eq!(
        alice
            .run(&["auth", "can-i", "list", "configmaps", "-n", "default"])
            .stdout,
        b"no\n"
    );
    // Impersonation (an administrator may) sees alice's rights.
    assert_eq!(
        admin
            .run(&["auth", "can-i", "list", "secrets", "-n", "x", "--as=alice"])
            .stdout,
        b"no\n"
    );
    assert_eq!(
        admin.ok(&[
            "auth",
            "can-i",
            "list",
            "configmaps",
            "-n",
            "x",
            "--as=alice"
        ]),
        "yes\n"
    );
    assert!(alice.ok(&["get", "cm", "-n", "x"]).contains("c "));
    let refused = alice.fails(&["get", "secrets", "-n", "x"]);
    assert_eq!(
        refused.trim(),
        "Error from server (Forbidden): secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"x\""
    );
    let refused = alice.fails(&["get", "ns"]);
    assert!(refused.contains("User \"alice\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"), "{refused}");
    // alice may not grant herself more than she holds.
    admin.ok(&[
        "create",
        "role",
        "role-writer",
        "-n",
        "x",
        "--verb=create",
        "--resource=roles.rbac.authorization.k8s.io",
    ]);
    admin.ok(&[
        "create",
        "rolebinding",
        "alice-writes-roles",
        "-n",
        "x",
        "--role=role-writer",
        "--user=alice",
    ]);
    let escalation = alice.fails(&[
        "create",
        "role",
        "more",
        "-n",
        "x",
        "--verb=get",
        "--resource=secrets",
    ]);
    assert!(
        escalation.contains("is attempting to grant RBAC permissions not currently held"),
        "{escalation}"
    );
    alice.ok(&[
        "create",
        "role",
        "same",
        "-n",
        "x",
        "--verb=get",
        "--resource=configmaps",
    ]);
    // Anonymous: health only (kubectl would prompt for a password; a plain HTTPS client).
    let (status, body) = anonymous_get(&server, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, body) = anonymous_get(&server, "/api/v1/namespaces");
    assert_eq!(status, 403);
    let status_object = json(&body);
    assert_eq!(status_object["reason"], "Forbidden");
    assert_eq!(
        status_object["message"],
        "namespaces is forbidden: User \"system:anonymous\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    // A certificate from another CA is no identity at all.
    let other_ca = TestCa::new("someone-else").unwrap();
    let (cert, key) = other_ca
        .leaf("kubernetes-admin", &["system:masters"], &[], false, true)
        .unwrap();
    let forged = Kubectl::new(
        server.dir(),
        "forged",
        &kubeconfig(
            &server.url(),
            &server.serving_ca,
            KubeconfigUser::Certificate {
                cert_pem: &cert,
                key_pem: &key,
            },
        ),
    );
    let refused = forged.fails(&["get", "ns"]);
    assert!(
        refused.contains("error: You must be logged in to the server"),
        "{refused}"
    );
    assert_eq!(
        anonymous_get_with(&server, "/api/v1/namespaces", Some((&cert, &key))).0,
        401
    );
}

/// `GET path` without credentials: status and body.
fn anonymous_get(server: &LocalApiServer, path: &str) -> (u16, String) {
    anonymous_get_with(server, path, None)
}

/// `GET path` with a client certificate or none: status and body.
fn anonymous_get_with(
    server: &LocalApiServer,
    path: &str,
    identity: Option<(&str, &str)>,
) -> (u16, String) {
    use oi_kube_standin::{https, tls};
    let roots = tls::roots_from_pem(server.serving_ca.as_bytes(), "serving CA").unwrap();
    let identity = identity.map(|(cert, key)| {
        (
            tls::certs_from_pem(cert.as_bytes(), "cert").unwrap(),
            tls::key_from_pem(key.as_bytes(), "key").unwrap(),
        )
    });
    let config = tls::client_config(roots, identity, "test client").unwrap();
    let endpoint = https::Endpoint::parse(&server.url()).unwrap();
    let response = server
        .block_on(https::request(
            &config,
            &endpoint,
            http::Method::GET,
            path,
            None,
            std::time::Duration::from_secs(10),
        ))
        .unwrap();
    (
        response.status.as_u16(),
        String::from_utf8_lossy(&response.body).into_owned(),
    )
}

fn bootstrap_token_secret(id: &str, secret: &str, expiration: Option<&str>, usage: bool) -> String {
    let mut data = format!(
        "  token-id: {}\n  token-secret: {}\n  usage-bootstrap-authentication: {}\n  auth-extra-groups: {}\n",
        B64.encode(id),
        B64.encode(secret),
        B64.encode(if usage { "true" } else { "false" }),
        B64.encode("system:bootstrappers:oneinfra"),
    );
    if let Some(expiration) = expiration {
        data.push_str(&format!("  expiration: {}\n", B64.encode(expiration)));
    }
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: bootstrap-token-{id}, namespace: kube-system}}\ntype: bootstrap.kubernetes.io/token\ndata:\n{data}"
    )
}

#[test]
fn bootstrap_tokens_can_do_what_rbac_grants_and_nothing_else() {
    let Some(Setup { server, admin }) = setup("kubectl: bootstrap tokens") else {
        return;
    };
    let far = "2999-01-01T00:00:00Z";
    admin.ok_with(
        &["apply", "-f", "-"],
        &bootstrap_token_secret("abcdef", "0123456789abcdef", Some(far), true),
    );
    admin.ok(&["create", "ns", "oneinfra-system"]);
    admin.ok(&[
        "create",
        "configmap",
        "oneinfra-join",
        "-n",
        "oneinfra-system",
        "--from-literal=key=pub",
    ]);
    admin.ok(&[
        "create",
        "role",
        "join-reader",
        "-n",
        "oneinfra-system",
        "--verb=get",
        "--resource=configmaps",
        "--resource-name=oneinfra-join",
    ]);
    admin.ok(&[
        "create",
        "rolebinding",
        "joiners",
        "-n",
        "oneinfra-system",
        "--role=join-reader",
        "--group=system:bootstrappers:oneinfra",
    ]);
    let token = Kubectl::new(
        server.dir(),
        "token",
        &server.token_kubeconfig("abcdef.0123456789abcdef"),
    );
    let me = token.ok(&["auth", "whoami"]);
    assert!(me.contains("system:bootstrap:abcdef"), "{me}");
    assert!(
        me.contains("[system:bootstrappers system:bootstrappers:oneinfra system:authenticated]"),
        "{me}"
    );
    assert!(
        token
            .ok(&[
                "get",
                "cm",
                "oneinfra-join",
                "-n",
                "oneinfra-system",
                "-o",
                "name"
            ])
            .contains("configmap/oneinfra-join")
    );
    let refused = token.fails(&["get", "secrets", "-n", "kube-system"]);
    assert_eq!(
        refused.trim(),
        "Error from server (Forbidden): secrets is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    let refused = token.fails(&["get", "cm", "other", "-n", "oneinfra-system"]);
    assert!(refused.contains("configmaps \"other\" is forbidden: User \"system:bootstrap:abcdef\" cannot get resource \"configmaps\""), "{refused}");
    // A wrong secret, an expired token, one not for authentication, a deleted one: 401.
    let wrong = Kubectl::new(
        server.dir(),
        "wrong",
        &server.token_kubeconfig("abcdef.ffffffffffffffff"),
    );
    assert!(wrong.fails(&["auth", "whoami"]).contains("Unauthorized"));
    admin.ok_with(
        &["apply", "-f", "-"],
        &bootstrap_token_secret(
            "oldold",
            "0123456789abcdef",
            Some("2001-01-01T00:00:00Z"),
            true,
        ),
    );
    let expired = Kubectl::new(
        server.dir(),
        "expired",
        &server.token_kubeconfig("oldold.0123456789abcdef"),
    );
    let refused = expired.fails(&["get", "cm", "oneinfra-join", "-n", "oneinfra-system"]);
    assert!(
        refused.contains("error: You must be logged in to the server"),
        "{refused}"
    );
    admin.ok_with(
        &["apply", "-f", "-"],
        &bootstrap_token_secret("nouse1", "0123456789abcdef", None, false),
    );
    let unused = Kubectl::new(
        server.dir(),
        "unused",
        &server.token_kubeconfig("nouse1.0123456789abcdef"),
    );
    assert!(unused.fails(&["auth", "whoami"]).contains("Unauthorized"));
    admin.ok(&[
        "delete",
        "secret",
        "bootstrap-token-abcdef",
        "-n",
        "kube-system",
    ]);
    assert!(
        token
            .fails(&["get", "cm", "oneinfra-join", "-n", "oneinfra-system"])
            .contains("Unauthorized")
    );
}

#[test]
fn service_account_tokens_are_issued_and_checked() {
    let Some(Setup { server, admin }) = setup("kubectl: service-account tokens") else {
        return;
    };
    admin.ok(&["create", "ns", "apps"]);
    admin.ok(&["create", "sa", "robot", "-n", "apps"]);
    admin.ok(&[
        "create",
        "rolebinding",
        "robot-views",
        "-n",
        "apps",
        "--clusterrole=view",
        "--serviceaccount=apps:robot",
    ]);
    let issued = admin.ok(&["create", "token", "robot", "-n", "apps", "--duration=1h"]);
    let robot = Kubectl::new(
        server.dir(),
        "robot",
        &server.token_kubeconfig(issued.trim()),
    );
    let me = robot.ok(&["auth", "whoami"]);
    assert!(me.contains("system:serviceaccount:apps:robot"), "{me}");
    assert!(me.contains("system:serviceaccounts:apps"), "{me}");
    assert_eq!(
        robot.ok(&["auth", "can-i", "list", "pods", "-n", "apps"]),
        "yes\n"
    );
    assert_eq!(
        robot
            .run(&["auth", "can-i", "create", "pods", "-n", "apps"])
            .stdout,
        b"no\n"
    );
    // The issuer's keys are published.
    let jwks = json(&admin.ok(&["get", "--raw", "/openid/v1/jwks"]));
    assert_eq!(jwks["keys"][0]["kty"], "EC");
    // A deleted (or recreated) account's tokens stop working.
    admin.ok(&["delete", "sa", "robot", "-n", "apps"]);
    admin.ok(&["create", "sa", "robot", "-n", "apps"]);
    assert!(robot.fails(&["auth", "whoami"]).contains("Unauthorized"));
}

#[test]
fn patches_server_side_apply_and_the_status_subresource() {
    let Some(Setup { server, admin }) = setup("kubectl: patches and apply") else {
        return;
    };
    admin.ok(&["create", "ns", "p"]);
    admin.ok(&[
        "create",
        "configmap",
        "c",
        "-n",
        "p",
        "--from-literal=a=1",
        "--from-literal=b=2",
    ]);
    admin.ok(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "p",
        "--type=merge",
        "-p",
        r#"{"data":{"a":null,"c":"3"}}"#,
    ]);
    admin.ok(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "p",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/data/b","value":"20"}]"#,
    ]);
    let c = json(&admin.ok(&["get", "cm", "c", "-n", "p", "-o", "json"]));
    assert_eq!(c["data"], serde_json::json!({"b": "20", "c": "3"}));
    let failed = admin.fails(&[
        "patch",
        "configmap",
        "c",
        "-n",
        "p",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/data/b","value":"x"}]"#,
    ]);
    assert!(failed.contains("testing value /data/b failed"), "{failed}");
    // Strategic merge patch merges a Service's ports by port.
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: p}\nspec:\n  ports:\n  - {name: http, port: 80}\n  - {name: https, port: 443}\n";
    admin.ok_with(&["apply", "-f", "-"], svc);
    admin.ok(&[
        "patch",
        "svc",
        "s",
        "-n",
        "p",
        "-p",
        r#"{"spec":{"ports":[{"port":80,"name":"web"}]}}"#,
    ]);
    let s = json(&admin.ok(&["get", "svc", "s", "-n", "p", "-o", "json"]));
    let names: Vec<&str> = s["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web", "https"]);
    assert_eq!(
        s["spec"]["clusterIP"], "10.96.0.2",
        "the next free address of the range"
    );
    // Server-side apply: created, idempotent, a conflict with another manager, forced.
    let applied =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa, namespace: p}\ndata: {owner: oi}\n";
    assert_eq!(
        admin.ok_with(
            &["apply", "--server-side", "--field-manager=oi", "-f", "-"],
            applied
        ),
        "configmap/ssa serverside-applied\n"
    );
    let before = json(&admin.ok(&["get", "cm", "ssa", "-n", "p", "-o", "json"]));
    admin.ok_with(
        &["apply", "--server-side", "--field-manager=oi", "-f", "-"],
        applied,
    );
    let after = json(&admin.ok(&["get", "cm", "ssa", "-n", "p", "-o", "json"]));
    assert_eq!(
        before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"],
        "an unchanged apply writes nothing"
    );
    let other = applied.replace("owner: oi", "owner: someone");
    let conflict = String::from_utf8_lossy(
        &admin
            .run_with(
                &["apply", "--server-side", "--field-manager=other", "-f", "-"],
                &other,
            )
            .stderr,
    )
    .into_owned();
    assert!(conflict.contains("conflict with \"oi\""), "{conflict}");
    assert!(conflict.contains(".data.owner"), "{conflict}");
    admin.ok_with(
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &other,
    );
    let forced = json(&admin.ok(&[
        "get",
        "cm",
        "ssa",
        "-n",
        "p",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    assert_eq!(forced["data"]["owner"], "someone");
    // The status subresource: writes to the main resource keep status, and back.
    admin.ok_with(&["apply", "-f", "-"], CRD);
    let w = widget(3).replace("team-a", "p");
    admin.ok_with(&["apply", "-f", "-"], &w);
    admin.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "p",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":true},"spec":{"size":9}}"#,
    ]);
    admin.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "p",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":false},"spec":{"size":5}}"#,
    ]);
    let w = json(&admin.ok(&["get", "widget", "w1", "-n", "p", "-o", "json"]));
    assert_eq!(
        (w["spec"]["size"].as_i64(), w["status"]["ready"].as_bool()),
        (Some(5), Some(true)),
        "{w}"
    );
    // Finalizers hold a deletion until they are gone.
    admin.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "p",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    admin.ok(&["delete", "widget", "w1", "-n", "p", "--wait=false"]);
    let held = json(&admin.ok(&["get", "widget", "w1", "-n", "p", "-o", "json"]));
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    admin.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "p",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    assert!(
        admin
            .fails(&["get", "widget", "w1", "-n", "p"])
            .contains("not found")
    );
    drop(server);
}

#[test]
fn lists_page_and_select() {
    let Some(Setup {
        admin,
        server: _server,
    }) = setup("kubectl: lists")
    else {
        return;
    };
    admin.ok(&["create", "ns", "l"]);
    for i in 0..7 {
        admin.ok(&[
            "create",
            "configmap",
            &format!("c{i}"),
            "-n",
            "l",
            "--from-literal=a=b",
        ]);
        admin.ok(&[
            "label",
            "configmap",
            &format!("c{i}"),
            "-n",
            "l",
            &format!("parity={}", if i % 2 == 0 { "even" } else { "odd" }),
        ]);
    }
    let all = admin.ok(&["get", "cm", "-n", "l", "--chunk-size=2", "-o", "name"]);
    assert_eq!(all.lines().count(), 7, "{all}");
    let odd = admin.ok(&["get", "cm", "-n", "l", "-l", "parity=odd", "-o", "name"]);
    assert_eq!(odd, "configmap/c1\nconfigmap/c3\nconfigmap/c5\n");
    let by_name = admin.ok(&[
        "get",
        "cm",
        "-n",
        "l",
        "--field-selector=metadata.name=c4",
        "-o",
        "name",
    ]);
    assert_eq!(by_name, "configmap/c4\n");
    let bad = admin.fails(&["get", "cm", "-n", "l", "--field-selector=spec.nothing=x"]);
    assert!(
        bad.contains("field label not supported: spec.nothing"),
        "{bad}"
    );
    // limit and continue, as the raw API answers them.
    let page = json(&admin.ok(&["get", "--raw", "/api/v1/namespaces/l/configmaps?limit=3"]));
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    assert_eq!(page["metadata"]["remainingItemCount"], 4);
    let token = page["metadata"]["continue"].as_str().unwrap();
    let next = json(&admin.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/l/configmaps?limit=10&continue={token}"),
    ]));
    let names: Vec<&str> = next["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c3", "c4", "c5", "c6"]);
    assert!(next["metadata"]["continue"].is_null());
    // Objects created between pages do not show in a continued list (it is a snapshot).
    admin.ok(&["create", "configmap", "c9", "-n", "l", "--from-literal=a=b"]);
    let again = json(&admin.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/l/configmaps?limit=10&continue={token}"),
    ]));
    assert_eq!(again["items"].as_array().unwrap().len(), 4);
    eventually("a deletecollection", || {
        admin.ok(&["delete", "cm", "-n", "l", "-l", "parity=even"]);
        admin
            .ok(&["get", "cm", "-n", "l", "-o", "name"])
            .lines()
            .count()
            == 4
    });
}

/// `kubectl explain` finds the built-in kinds' schemas in OpenAPI v3, and `kubectl get all`
/// finds the resources of the `all` category in discovery, as against kube-apiserver.
#[test]
fn explain_and_get_all() {
    let Some(Setup {
        admin,
        server: _server,
    }) = setup("kubectl: explain and get all")
    else {
        return;
    };
    let out = admin.ok(&["explain", "configmap.data"]);
    assert!(out.contains("KIND:") && out.contains("ConfigMap"), "{out}");
    assert!(out.contains("FIELD:") && out.contains("data"), "{out}");
    assert!(out.contains("map[string]string"), "{out}");
    assert!(out.contains("configuration data"), "{out}");
    let out = admin.ok(&["explain", "secret"]);
    for field in ["stringData", "immutable", "metadata"] {
        assert!(out.contains(field), "{field}: {out}");
    }
    let out = admin.ok(&["explain", "deployment.metadata.labels"]);
    assert!(out.contains("map[string]string"), "{out}");
    // a field that does not exist is refused, as kubectl refuses it against a real server
    let err = admin.fails(&["explain", "configmap.nosuchfield"]);
    assert!(err.contains("nosuchfield"), "{err}");

    admin.ok(&["create", "namespace", "app"]);
    admin.ok_with(
        &["-n", "app", "apply", "-f", "-"],
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: localhost/oneinfra/pause:3.10}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n",
    );
    admin.ok(&[
        "-n",
        "app",
        "create",
        "configmap",
        "settings",
        "--from-literal=a=b",
    ]);
    let out = admin.ok(&["-n", "app", "get", "all", "-o", "name"]);
    let names: Vec<&str> = out.lines().collect();
    assert!(names.contains(&"service/web"), "{out}");
    assert!(names.contains(&"deployment.apps/web"), "{out}");
    assert!(
        !names.iter().any(|n| n.starts_with("configmap/")),
        "not in `all`: {out}"
    );
}

/// The steps `support/python_client.py` takes, each printed as `ok <step>` once it passed.
const PYTHON_STEPS: [&str; 7] = [
    "create",
    "label selectors",
    "pagination",
    "strategic merge patch",
    "watch from a resourceVersion",
    "409 on a stale update",
    "delete and 404",
];

/// The official Python client (PyPI `kubernetes`, installed by scripts/setup.sh into
/// `.tools/venv-k8s`), a client we did not write, against the stand-in: create, label
/// selectors, pagination, strategic merge patch, a watch from a resourceVersion (it sends
/// `watch=True`), a 409 on a stale update, delete and 404.
#[test]
fn the_official_python_client_works_as_against_kube_apiserver() {
    let test = "the official Python client";
    let python = oi_testsupport::workspace_root().join(".tools/venv-k8s/bin/python");
    if !oi_testsupport::require(
        test,
        "the kubernetes Python client in .tools/venv-k8s (scripts/setup.sh)",
        python.is_file(),
    ) {
        return;
    }
    let server = LocalApiServer::start(LocalOptions::default()).unwrap();
    let kubeconfig = server.dir().join("python.kubeconfig");
    oi_kube_standin::local::write_private(&kubeconfig, &server.admin_kubeconfig().unwrap())
        .unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/python_client.py");
    let mut child = std::process::Command::new(&python)
        .arg(&script)
        .arg(&kubeconfig)
        .arg("python-client")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a watch the server never answers must fail the test, not hang it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{test}: the script did not end within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(status.success(), "{test}: {status}\n{stdout}\n{stderr}");
    let done: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect();
    assert_eq!(done, PYTHON_STEPS, "{stdout}\n{stderr}");
}
