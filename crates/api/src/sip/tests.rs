//! SIPCluster, BareMetalHost and Secret: upstream's samples load, foreign documents are kept
//! as read, validation names the document, field and reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_yaml_ng::Value;

use super::*;
use crate::manifest::parse_manifests;
use crate::meta::ObjectKey;
use crate::metal3::parse_bmc_address;
use crate::world::{LoadError, World};

fn sip_samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/sip/samples")
}

fn read_sample(name: &str) -> String {
    std::fs::read_to_string(sip_samples().join(name)).unwrap()
}

/// Upstream's samples, put in one namespace as its kustomization does.
fn samples_in_namespace() -> String {
    ["sipcluster.yaml", "bmh.yaml", "bmh_secrets.yaml"]
        .iter()
        .map(|f| {
            let text = read_sample(f);
            if *f == "sipcluster.yaml" {
                text
            } else {
                text.replace("metadata:\n", "metadata:\n  namespace: sipcluster-system\n")
            }
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

const ED25519: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIArVWJlb3e8kfeDpiih3fsk4esrjW7D5XRHgV1CAIzUu ops@example";
const RSA_1024: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC9Ei4G75fdayJojWGW7MlEC6gzo/LlGGeRaDxL3+sMyx2TxIRshjsvGsLFJ+6B60+j4BTob5kiPUHyK4U0qAgw5qJfJ8p+z48NlSVTfFoHcUUn3tPuaH1WSxSjYhEGzQGrX0hZWQbZFEUBetgxyymxrWQMdqZqVMyv1mh03bOgUQ== short";

#[test]
fn upstream_samples_load_and_validate() {
    let world = World::load(&samples_in_namespace(), "samples").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(world.sip_clusters.len(), 1);
    assert_eq!(world.bare_metal_hosts.len(), 6);
    assert_eq!(world.secrets.len(), 12);
    let sip = &world.sip_clusters[&ObjectKey::new("sipcluster-system", "sipcluster-system")];
    let cp = &sip.spec.nodes["ControlPlane"];
    assert_eq!(cp.topology_key, "vino.airshipit.org/rack");
    assert_eq!(
        cp.count,
        NodeCount {
            active: 1,
            standby: 1
        }
    );
    assert_eq!(
        cp.label_selector.match_labels,
        BTreeMap::from([("vino.airshipit.org/flavor".into(), "control-plane".into())])
    );
    let services = &sip.spec.services;
    assert_eq!(services.jump_host[0].ssh_authorized_keys.len(), 2);
    assert_eq!(
        services.jump_host[0].node_ssh_private_keys,
        "ssh-private-keys"
    );
    assert_eq!(services.load_balancer_control_plane[0].node_port, 30001);
    assert_eq!(
        services.load_balancer_worker[0].node_port_range,
        NodePortRange {
            start: 30002,
            end: 30011
        }
    );
    let host = &world.bare_metal_hosts[&ObjectKey::new("sipcluster-system", "rdm9r006o002")];
    assert_eq!(
        host.spec.bmc.address,
        "redfish+https://32.68.51.13/redfish/v1/Systems/System.Embedded.1"
    );
    assert_eq!(
        host.network_data_secret(),
        Some(ObjectKey::new(
            "sipcluster-system",
            "rdm9r006o002-networkdata"
        ))
    );
    let creds =
        &world.secrets[&ObjectKey::new("sipcluster-system", "rdm9r006o001-bmc-credentials")];
    assert_eq!(creds.value("username").unwrap().unwrap(), b"root");
}

#[test]
fn foreign_documents_are_written_back_as_read() {
    let text = samples_in_namespace();
    let world = World::load(&text, "samples").unwrap();
    let out = world.to_yaml().unwrap();
    let docs = |t: &str| -> BTreeMap<(String, String), Value> {
        serde_yaml_ng::Deserializer::from_str(t)
            .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .filter(|v| v["kind"] != "SIPCluster")
            .map(|v| {
                (
                    (
                        v["kind"].as_str().unwrap().to_string(),
                        v["metadata"]["name"].as_str().unwrap().to_string(),
                    ),
                    v,
                )
            })
            .collect()
    };
    let before = docs(&text);
    let after = docs(&out);
    assert_eq!(before.len(), 18);
    assert_eq!(before, after);
    // And a second pass writes the same bytes.
    assert_eq!(World::load(&out, "out").unwrap().to_yaml().unwrap(), out);
}

#[test]
fn unknown_fields_of_hosts_and_secrets_are_kept_and_ours_checked() {
    let text = r"
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: h1
  labels: {zone: a, rack: r1}
  someFutureMetadata: x
spec:
  online: true
  bmc: {address: 'redfish://10.0.0.1/redfish/v1/Systems/1', credentialsName: c1, newBmcField: 3}
  fancyNewField: {nested: [1, 2]}
status:
  operationalStatus: OK
  hardware: {cpu: {count: 4}}
";
    let mut world = World::load(text, "hosts.yaml").unwrap();
    let key = ObjectKey::new("default", "h1");
    let host = world.bare_metal_hosts.get_mut(&key).unwrap();
    host.metadata.labels.remove("zone");
    host.metadata.labels.insert("added".into(), "yes".into());
    let out: Value = serde_yaml_ng::from_str(&world.to_yaml().unwrap()).unwrap();
    let mut expected: Value = serde_yaml_ng::from_str(text).unwrap();
    expected["metadata"]["labels"] = serde_yaml_ng::from_str("{rack: r1, added: 'yes'}").unwrap();
    assert_eq!(out, expected);
    // Label order: kept ones first, in their order, then the new ones.
    let labels: Vec<&str> = out["metadata"]["labels"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(labels, ["rack", "added"]);

    // A field we use, of the wrong type, is refused with its path.
    let bad = text.replace("online: true", "online: [yes]");
    let e = World::load(&bad, "hosts.yaml").unwrap_err().to_string();
    assert!(
        e.contains("hosts.yaml: document 1: BareMetalHost (\"h1\"): field `spec.online`"),
        "{e}"
    );
    // So is an unknown metadata field's neighbour of the wrong type.
    let bad = text.replace("name: h1", "name: [h1]");
    let e = World::load(&bad, "hosts.yaml").unwrap_err().to_string();
    assert!(e.contains("field `metadata.name`"), "{e}");
}

#[test]
fn secrets_never_show_their_values() {
    let text = r"
apiVersion: v1
kind: Secret
metadata: {name: bmc, namespace: ns}
data: {username: cm9vdA==, password: c2VjcmV0LXZhbHVl}
stringData: {token: plain-secret-token}
";
    let world = World::load(text, "s.yaml").unwrap();
    let secret = &world.secrets[&ObjectKey::new("ns", "bmc")];
    let debug = format!("{secret:?} {world:?}");
    assert!(!debug.contains("c2VjcmV0LXZhbHVl"), "{debug}");
    assert!(!debug.contains("secret-value"), "{debug}");
    assert!(!debug.contains("plain-secret-token"), "{debug}");
    assert_eq!(secret.value("password").unwrap().unwrap(), b"secret-value");
    assert_eq!(
        secret.value("token").unwrap().unwrap(),
        b"plain-secret-token"
    );
    assert_eq!(secret.keys(), ["password", "token", "username"]);

    let bad = text.replace("c2VjcmV0LXZhbHVl", "not*base64");
    let e = World::load(&bad, "s.yaml").unwrap_err().to_string();
    assert!(
        e.contains("s.yaml: document 1: Secret ns/bmc: field `data.password`: not base64"),
        "{e}"
    );
    assert!(
        !e.contains("not*base64"),
        "the message repeats the value: {e}"
    );
}

fn sip_with(spec: &str) -> String {
    format!(
        "apiVersion: airship.airshipit.org/v1\nkind: SIPCluster\nmetadata: {{name: s1, namespace: ns}}\nspec:\n{spec}"
    )
}

fn invalid(text: &str) -> Vec<(String, String)> {
    match World::load(text, "sip.yaml") {
        Err(LoadError::Invalid(errors)) => errors
            .into_iter()
            .map(|e| (e.field, e.reason.to_string()))
            .collect(),
        other => panic!("expected validation errors, got {other:?}"),
    }
}

#[test]
fn sip_cluster_validation_names_each_bad_field() {
    let text = sip_with(
        r"  nodes:
    ControlPlane:
      labelSelector:
        matchLabels: {'bad key!': x}
        matchExpressions:
        - {key: a, operator: In}
        - {key: b, operator: Exists, values: [x]}
        - {key: c, operator: Near, values: [x]}
      topologyKey: 'not a key'
      count: {active: -1, standby: 1}
    Master:
      count: {active: 1}
  services:
    loadBalancerControlPlane:
    - {image: haproxy, nodePort: 70000}
    loadBalancerWorker:
    - {image: '', nodePortRange: {start: 30010, end: 30002}}
    jumpHost:
    - image: jump
      nodePort: 30000
      nodeSSHPrivateKeys: ''
      sshAuthorizedKeys: [garbage, 'ssh-rsa AAAA', 'from=\u{22}1.2.3.4\u{22} ssh-ed25519 AAAA']
    oidcProvider:
    - {image: oidc, nodePort: 30556, clientID: 'a b', usernameClaim: 'e,f', redirectURIs: ['localhost:8000', 'http://x/#f']}
    - {image: oidc, nodePort: 30557, usersSecret: Not_A_Name}
",
    );
    let errors = invalid(&text);
    let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
    for expected in [
        "spec.nodes.ControlPlane.count.active",
        "spec.nodes.ControlPlane.labelSelector.matchLabels.bad key!",
        "spec.nodes.ControlPlane.labelSelector.matchExpressions[0].values",
        "spec.nodes.ControlPlane.labelSelector.matchExpressions[1].values",
        "spec.nodes.ControlPlane.labelSelector.matchExpressions[2].operator",
        "spec.nodes.ControlPlane.topologyKey",
        "spec.nodes.Master",
        "spec.services.loadBalancerControlPlane[0].nodePort",
        "spec.services.loadBalancerWorker[0].image",
        "spec.services.loadBalancerWorker[0].nodePortRange",
        "spec.services.jumpHost[0].sshAuthorizedKeys[0]",
        "spec.services.jumpHost[0].sshAuthorizedKeys[1]",
        "spec.services.jumpHost[0].sshAuthorizedKeys[2]",
        "spec.services.jumpHost[0].nodeSSHPrivateKeys",
        "spec.services.oidcProvider[0].usersSecret",
        "spec.services.oidcProvider[0].clientID",
        "spec.services.oidcProvider[0].usernameClaim",
        "spec.services.oidcProvider[0].redirectURIs[0]",
        "spec.services.oidcProvider[0].redirectURIs[1]",
        "spec.services.oidcProvider[1].usersSecret",
    ] {
        assert!(fields.contains(&expected), "{expected} not in {errors:#?}");
    }
    let reason = |field: &str| {
        errors
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, r)| r.clone())
            .unwrap()
    };
    assert!(reason("spec.nodes.Master").contains("expected ControlPlane or Worker"));
    assert!(reason("spec.services.loadBalancerControlPlane[0].nodePort").contains("70000"));
    assert!(reason("spec.services.jumpHost[0].sshAuthorizedKeys[2]").contains("options"));
    // The whole message names the document too.
    let message = World::load(&text, "sip.yaml").unwrap_err().to_string();
    assert!(
        message.contains("sip.yaml: document 1: SIPCluster ns/s1: field `spec.nodes.Master`"),
        "{message}"
    );
}

#[test]
fn unknown_sip_cluster_fields_are_refused_with_their_path() {
    let text = sip_with("  services: {}\n  nodes: {Worker: {count: {active: 1}, spread: x}}\n");
    let e = World::load(&text, "sip.yaml").unwrap_err().to_string();
    assert!(e.contains("field `spec.nodes.Worker.spread`"), "{e}");
}

#[test]
fn authorized_keys_are_checked_for_what_sshd_would_refuse() {
    let sample = read_sample("sipcluster.yaml");
    let world = World::load(&sample, "sip").unwrap();
    let sip = world.sip_clusters.values().next().unwrap();
    for key in &sip.spec.services.jump_host[0].ssh_authorized_keys {
        let parsed = parse_authorized_key(key).unwrap();
        assert_eq!(parsed.algorithm, "ssh-rsa");
    }
    let ed = parse_authorized_key(ED25519).unwrap();
    assert_eq!(ed.comment, "ops@example");
    let short = parse_authorized_key(RSA_1024).unwrap_err();
    assert!(short.contains("1024 bits"), "{short}");
    // The blob says ed25519 under an RSA type.
    let swapped = ED25519.replace("ssh-ed25519", "ssh-rsa");
    assert!(
        parse_authorized_key(&swapped)
            .unwrap_err()
            .contains("\"ssh-ed25519\" key")
    );
    // Truncated blob.
    let truncated = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIArVWJlb3e8k";
    assert!(parse_authorized_key(truncated).is_err());
    assert!(parse_authorized_key("ssh-dss AAAAB3NzaC1kc3M=").is_err());
    assert!(parse_authorized_key("").is_err());
    // A second key hidden behind a line break in the comment.
    let smuggled = format!("{ED25519}\n{RSA_1024}");
    assert_eq!(
        parse_authorized_key(&smuggled).unwrap_err(),
        "a key is one line, without control characters"
    );
}

#[test]
fn selectors_match_as_kubernetes_does() {
    let labels: BTreeMap<String, String> =
        BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]);
    let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: values.iter().map(|v| (*v).to_string()).collect(),
    };
    let sel = |labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| LabelSelector {
        match_labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        match_expressions: exprs,
    };
    assert!(sel(&[], vec![]).matches(&labels));
    assert!(sel(&[("a", "1")], vec![]).matches(&labels));
    assert!(!sel(&[("a", "2")], vec![]).matches(&labels));
    assert!(sel(&[], vec![req("a", "In", &["0", "1"])]).matches(&labels));
    assert!(!sel(&[], vec![req("c", "In", &["1"])]).matches(&labels));
    assert!(sel(&[], vec![req("c", "NotIn", &["1"])]).matches(&labels));
    assert!(!sel(&[], vec![req("b", "NotIn", &["2"])]).matches(&labels));
    assert!(sel(&[], vec![req("b", "Exists", &[])]).matches(&labels));
    assert!(!sel(&[], vec![req("b", "DoesNotExist", &[])]).matches(&labels));
    assert!(!sel(&[("a", "1")], vec![req("b", "DoesNotExist", &[])]).matches(&labels));
    assert_eq!(
        sel(
            &[("a", "1")],
            vec![
                req("b", "NotIn", &["2", "3"]),
                req("c", "DoesNotExist", &[])
            ]
        )
        .describe(),
        "a=1,b notin (2,3),!c"
    );
}

#[test]
fn bmc_addresses_keep_the_system_path() {
    let a = parse_bmc_address("redfish+https://32.68.51.13/redfish/v1/Systems/System.Embedded.1")
        .unwrap();
    assert_eq!(a.driver, "redfish");
    assert_eq!(a.base_url(), "https://32.68.51.13");
    assert_eq!(a.path, "/redfish/v1/Systems/System.Embedded.1");
    let a = parse_bmc_address("redfish+http://127.0.0.1:8000/redfish/v1/Systems/abc").unwrap();
    assert_eq!(a.base_url(), "http://127.0.0.1:8000");
    assert!(a.is_redfish());
    let a = parse_bmc_address("redfish://[fd00::1]:443/redfish/v1/Systems/1").unwrap();
    assert_eq!(a.base_url(), "https://[fd00::1]:443");
    let a = parse_bmc_address("ipmi://10.0.0.1:623").unwrap();
    assert!(!a.is_redfish());
    // Written back with the transport explicit, and read again the same.
    for (given, written) in [
        (
            "redfish+http://127.0.0.1:8000/redfish/v1/Systems/abc",
            "redfish+http://127.0.0.1:8000/redfish/v1/Systems/abc",
        ),
        (
            "redfish://[fd00::1]:443/redfish/v1/Systems/1",
            "redfish+https://[fd00::1]:443/redfish/v1/Systems/1",
        ),
        ("ipmi://10.0.0.1:623", "ipmi://10.0.0.1:623"),
    ] {
        let a = parse_bmc_address(given).unwrap();
        assert_eq!(a.to_address(), written);
        assert_eq!(parse_bmc_address(written).unwrap(), a);
    }
    for bad in [
        "10.0.0.1",
        "redfish://10.0.0.1",
        "redfish+ftp://10.0.0.1/redfish/v1/Systems/1",
        "redfish://user@10.0.0.1/redfish/v1/Systems/1",
        "redfish://10.0.0.1:0/redfish/v1/Systems/1",
        "Redfish://10.0.0.1/x",
    ] {
        assert!(parse_bmc_address(bad).is_err(), "{bad}");
    }
    // A host whose address is refused names the field.
    let text = "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {name: h}\nspec: {online: true, bmc: {address: 'redfish://10.0.0.1', credentialsName: c}}\n";
    let e = World::load(text, "h.yaml").unwrap_err().to_string();
    assert!(e.contains("field `spec.bmc.address`: \"redfish://10.0.0.1\": a Redfish address names its system's path"), "{e}");
}

#[test]
fn conditions_move_their_transition_time_only_on_a_status_change() {
    let mut sip: SipCluster = match parse_manifests(&sip_with("  services: {}\n"), "s")
        .unwrap()
        .remove(0)
        .object
    {
        crate::world::Object::SipCluster(s) => s,
        other => panic!("{other:?}"),
    };
    let t0 = time::macros::datetime!(2026-01-01 00:00 UTC);
    let t1 = time::macros::datetime!(2026-01-02 00:00 UTC);
    use crate::common::ConditionStatus::{False, True};
    assert!(sip.set_condition(CONDITION_READY, False, REASON_PROGRESSING, "", t0));
    assert!(!sip.set_condition(CONDITION_READY, False, REASON_PROGRESSING, "", t1));
    assert!(sip.set_condition(CONDITION_READY, False, REASON_UNSCHEDULABLE, "short", t1));
    assert_eq!(
        sip.condition(CONDITION_READY).unwrap().last_transition_time,
        t0
    );
    assert!(sip.set_condition(
        CONDITION_READY,
        True,
        REASON_RECONCILIATION_SUCCEEDED,
        "",
        t1
    ));
    assert_eq!(
        sip.condition(CONDITION_READY).unwrap().last_transition_time,
        t1
    );
    // Written as metav1.Condition: message present even when empty, no lastSetTime.
    let yaml = crate::world::Object::SipCluster(sip).to_yaml().unwrap();
    assert!(yaml.contains("message: ''"), "{yaml}");
    assert!(!yaml.contains("lastSetTime"), "{yaml}");
}

#[test]
fn hosts_and_secrets_go_through_json_as_a_store_keeps_them() {
    let text = r"
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: h1
  namespace: inv
  resourceVersion: '7'
  labels: {rack: r1}
  annotations: {}
  someFutureMetadata: x
spec:
  online: true
  bmc: {address: 'redfish://10.0.0.1/redfish/v1/Systems/1', credentialsName: c1}
  image: {url: 'http://x/y.img', checksum: abc}
status: {operationalStatus: OK, poweredOn: true}
";
    let world = World::load(text, "h.yaml").unwrap();
    let host = world.bare_metal_hosts.values().next().unwrap().clone();
    let json = serde_json::to_value(&host).unwrap();
    let back: crate::BareMetalHost = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, host);
    assert_eq!(json["spec"]["image"]["checksum"], "abc");
    assert_eq!(json["metadata"]["someFutureMetadata"], "x");
    // Typed metadata edits reach the document; the empty annotations map stays.
    let mut edited = back;
    edited.metadata.resource_version = Some("8".into());
    edited.metadata.finalizers.push("example.com/f".into());
    let json = serde_json::to_value(&edited).unwrap();
    assert_eq!(json["metadata"]["resourceVersion"], "8");
    assert_eq!(json["metadata"]["finalizers"][0], "example.com/f");
    assert_eq!(json["metadata"]["annotations"], serde_json::json!({}));
    // A field we read, of the wrong type, is an error from a store too.
    let mut bad = json.clone();
    bad["spec"]["online"] = serde_json::json!("yes");
    assert!(serde_json::from_value::<crate::BareMetalHost>(bad).is_err());

    let secret_text = "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: inv}\ntype: Opaque\ndata: {password: cGFzcw==}\n";
    let world = World::load(secret_text, "s.yaml").unwrap();
    let secret = world.secrets.values().next().unwrap().clone();
    let back: crate::Secret =
        serde_json::from_value(serde_json::to_value(&secret).unwrap()).unwrap();
    assert_eq!(back, secret);
    assert_eq!(back.value("password").unwrap().unwrap(), b"pass");
}
