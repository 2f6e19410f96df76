#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};

use oi_api::{ObjectKey, World};
use pretty_assertions::assert_eq;

use super::*;
use crate::sip::select_hosts;
use crate::sip::tests::{NOW, NS, b64, inventory, key, load, sip_doc};

const ALL: &str = "{jumpHost: [{image: jump, nodePort: 30000, nodeInterfaceId: oam-ipv4, nodeSSHPrivateKeys: keys, sshAuthorizedKeys: ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGFu4aD6Qg2jhyY5fba9gqFO5quRH/2GbGT/qO/VrDt5 ops@example']}], loadBalancerControlPlane: [{image: haproxy, nodePort: 30001, nodeInterfaceId: oam-ipv4}], loadBalancerWorker: [{image: haproxy, nodeInterfaceId: oam-ipv4, nodePortRange: {start: 30002, end: 30004}}]}";

fn hypervisor(name: &str, public: bool, ip: &str, range: (u32, u32)) -> String {
    format!(
        "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata: {{name: {name}, labels: {{site: a}}}}\nspec: {{localCRIEndpoint: {{criEndpointPath: /run/{name}.sock}}, public: {public}, ipAddress: {ip}, portRange: {{low: {}, high: {}}}}}\n",
        range.0, range.1
    )
}

fn keys() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: keys, namespace: {NS}}}\ndata: {{id_ed25519: {}, id_rsa: {}}}\n",
        b64("-----BEGIN OPENSSH PRIVATE KEY-----\nnode key one\n"),
        b64("-----BEGIN OPENSSH PRIVATE KEY-----\nnode key two\n"),
    )
}

fn world(services: &str, hypervisors: &[String]) -> World {
    let mut parts: Vec<String> = hypervisors.to_vec();
    parts.push(inventory());
    parts.push(sip_doc("s1", (1, 1, "rack"), (2, 0, "host"), services));
    parts.push(keys());
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    load(&refs)
}

fn options() -> PlanOptions {
    PlanOptions {
        render: RenderOptions {
            image_repository: Some("localhost/oneinfra".into()),
        },
        ..PlanOptions::default()
    }
}

/// Selection then services, as `oi reconcile` runs them.
fn plan(world: &mut World) -> (Vec<SipReport>, Vec<SipServices>) {
    let reports = select_hosts(world, NOW);
    let plans = plan_services(world, &reports, &options(), NOW);
    (reports, plans)
}

fn ports_of(world: &World, hypervisor: &str) -> Vec<(String, u16)> {
    world.hypervisors[&ObjectKey::cluster_scoped(hypervisor)]
        .status
        .allocated_ports
        .iter()
        .map(|a| {
            (
                format!("{}/{}/{}", a.cluster_namespace, a.cluster, a.component),
                a.port,
            )
        })
        .collect()
}

fn spec<'w>(w: &'w mut World, hypervisor: &str) -> &'w mut oi_api::HypervisorSpec {
    &mut w
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped(hypervisor))
        .unwrap()
        .spec
}

fn file<'a>(s: &'a ServicePlan, name: &str) -> &'a HostFile {
    s.files
        .iter()
        .find(|f| f.path.ends_with(&format!("/{name}")))
        .unwrap_or_else(|| panic!("{name} not in {:?}", s.files))
}

/// The result of a run in which every service of `plan` runs.
fn all_running(plan: &SipServices) -> Vec<SipServicesResult> {
    vec![SipServicesResult {
        key: plan.key.clone(),
        services: plan
            .services
            .iter()
            .map(|s| ServiceResult {
                name: s.name.clone(),
                hypervisor: s.hypervisor.clone(),
                failure: None,
                hashes: Some(BTreeMap::new()),
            })
            .collect(),
        sweep_error: None,
    }]
}

/// Every service of [`ALL`] placed on public-1, of two public hypervisors.
fn placed_on_public_1() -> World {
    let mut w = world(
        ALL,
        &[
            hypervisor("public-1", true, "10.1.0.2", (30000, 30100)),
            hypervisor("public-2", true, "10.1.0.3", (30000, 30100)),
        ],
    );
    let (_, plans) = plan(&mut w);
    assert!(plans[0].services.iter().all(|s| s.hypervisor == "public-1"));
    w
}

fn text(f: &HostFile) -> String {
    String::from_utf8(f.content.clone()).unwrap()
}

#[test]
fn services_run_on_a_public_hypervisor_with_the_ports_they_ask_for() {
    let mut w = world(
        ALL,
        &[
            hypervisor("private-1", false, "10.1.0.1", (30000, 30100)),
            hypervisor("public-1", true, "10.1.0.2", (30000, 30100)),
        ],
    );
    let (_, plans) = plan(&mut w);
    assert_eq!(plans.len(), 1);
    let p = &plans[0];
    assert_eq!(p.error, None);
    let placed: Vec<(&str, &str, String)> = p
        .services
        .iter()
        .map(|s| (s.name.as_str(), s.hypervisor.as_str(), s.endpoint()))
        .collect();
    assert_eq!(
        placed,
        [
            (
                "lb-control-plane-0",
                "public-1",
                "10.1.0.2:30001".to_string()
            ),
            (
                "lb-worker-0",
                "public-1",
                "10.1.0.2:30002-30004".to_string()
            ),
            ("jump-host-0", "public-1", "10.1.0.2:30000".to_string()),
        ]
    );
    let owner = "tenants/SIPCluster/s1";
    assert_eq!(
        ports_of(&w, "public-1"),
        [
            (format!("{owner}/jump-host-0-ssh"), 30000),
            (format!("{owner}/lb-control-plane-0-apiserver"), 30001),
            (format!("{owner}/lb-worker-0-30002"), 30002),
            (format!("{owner}/lb-worker-0-30003"), 30003),
            (format!("{owner}/lb-worker-0-30004"), 30004),
        ]
    );
    assert!(ports_of(&w, "private-1").is_empty());

    // The control plane load balancer: the active control plane host's API server, TLS
    // /readyz checks; the standby host is not a backend.
    let cp = text(file(&p.services[0], "haproxy.cfg"));
    assert!(cp.contains("bind :::30001 v4v6"), "{cp}");
    assert!(cp.contains("http-check send meth GET uri /readyz"), "{cp}");
    assert!(cp.contains("check check-ssl verify none"), "{cp}");
    let servers: Vec<&str> = cp
        .lines()
        .filter(|l| l.trim_start().starts_with("server "))
        .collect();
    assert_eq!(servers, ["  server cp-r006-1 10.0.0.1:6443"], "{cp}");
    // The worker load balancer: each port of the range to the same port of each worker.
    let wk = text(file(&p.services[1], "haproxy.cfg"));
    for port in 30002..=30004 {
        assert!(wk.contains(&format!("bind :::{port} v4v6")), "{wk}");
        for ip in ["10.0.1.1", "10.0.1.2"] {
            assert_eq!(wk.matches(&format!("{ip}:{port}\n")).count(), 1, "{wk}");
        }
    }
    assert_eq!(
        p.services[1].pod.containers[0].image,
        "localhost/oneinfra/haproxy:2.6.12"
    );

    // The jump host: the authorized keys, every node key (0600) offered to every held host
    // by name, the inventory with BMC passwords (0600), sshd refusing passwords and root.
    let jump = &p.services[2];
    assert_eq!(jump.pod.name, "s1-jump-host-0");
    assert_eq!(jump.pod.namespace, NS);
    assert_eq!(
        jump.pod.containers[0].image,
        "localhost/oneinfra/jump-host:0.1.0"
    );
    assert_eq!(
        text(file(jump, "authorized_keys")),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGFu4aD6Qg2jhyY5fba9gqFO5quRH/2GbGT/qO/VrDt5 ops@example\n"
    );
    for (name, content) in [("id_ed25519", "node key one"), ("id_rsa", "node key two")] {
        let f = file(jump, name);
        assert_eq!(f.mode, 0o600);
        assert!(text(f).contains(content));
        assert!(f.path.ends_with(&format!("/node-keys/{name}")));
    }
    let inventory = file(jump, "hosts.json");
    assert_eq!(inventory.mode, 0o600);
    assert!(text(inventory).contains("s3cret-bmc-password"));
    let ssh = text(file(jump, "ssh_config"));
    assert!(
        ssh.contains("IdentityFile ~/.ssh/keys/id_ed25519\n  IdentityFile ~/.ssh/keys/id_rsa\n"),
        "{ssh}"
    );
    // Held hosts only, standby included: three control plane hosts exist, two are held.
    for (host, ip) in [
        ("cp-r006-1", "10.0.0.1"),
        ("cp-r007-1", "10.0.0.3"),
        ("w-r007-1", "10.0.1.1"),
        ("w-r008-1", "10.0.1.2"),
    ] {
        assert!(
            ssh.contains(&format!("Host {host}\n  HostName {ip}\n")),
            "{ssh}"
        );
    }
    assert!(!ssh.contains("cp-r006-2"), "{ssh}");
    let sshd = text(file(jump, "sshd_config"));
    for line in [
        "Port 30000",
        "ListenAddress 10.1.0.2",
        "PasswordAuthentication no",
        "PermitRootLogin no",
        "AllowUsers ubuntu",
        "KbdInteractiveAuthentication no",
    ] {
        assert!(sshd.lines().any(|l| l == line), "{line} not in {sshd}");
    }
    // Nothing secret is ever in the pod spec (it is logged and hashed into annotations).
    assert!(!format!("{:?}", jump.pod).contains("node key"));
    assert!(!format!("{:?}", jump.pod).contains("s3cret"));

    // A second plan over the planned world changes nothing.
    let before = w.clone();
    let (_, again) = plan(&mut w);
    assert_eq!(w.hypervisors, before.hypervisors);
    assert_eq!(again[0].services, p.services);
}

#[test]
fn a_node_port_outside_every_range_or_taken_is_an_error_naming_it_and_nothing_is_claimed() {
    let mut w = world(
        ALL,
        &[
            hypervisor("public-1", true, "10.1.0.2", (31000, 31100)),
            hypervisor("private-1", false, "10.1.0.1", (30000, 30100)),
        ],
    );
    let before = w.hypervisors.clone();
    let (_, plans) = plan(&mut w);
    assert_eq!(
        plans[0].error.as_deref(),
        Some(
            "spec.services.loadBalancerControlPlane[0].nodePort: no public hypervisor can run the \
             control plane load balancer lb-control-plane-0 (public-1: \
             spec.services.loadBalancerControlPlane[0].nodePort: port 30001 is outside its port range 31000-31100)"
        )
    );
    assert!(plans[0].services.is_empty());
    assert_eq!(w.hypervisors, before);

    // Taken by a cluster's ingress: named; the services placed before it are not claimed
    // either (all or nothing).
    let mut w = world(
        ALL,
        &[hypervisor("public-1", true, "10.1.0.2", (30000, 30100))],
    );
    w.hypervisors
        .get_mut(&ObjectKey::cluster_scoped("public-1"))
        .unwrap()
        .status
        .allocated_ports
        .push(oi_api::HypervisorPortAllocation {
            cluster: "c1".into(),
            cluster_namespace: "default".into(),
            component: "c1-ingress-apiserver".into(),
            port: 30000,
        });
    let before = w.hypervisors.clone();
    let (_, plans) = plan(&mut w);
    let error = plans[0].error.clone().unwrap();
    assert!(
        error.ends_with(
            "(public-1: spec.services.jumpHost[0].nodePort: port 30000 is held by default/c1 (c1-ingress-apiserver))"
        ),
        "{error}"
    );
    assert_eq!(w.hypervisors, before);

    // A node key whose name could not be a file name, or a line of the ssh config.
    let mut w = world(
        ALL,
        &[hypervisor("public-1", true, "10.1.0.2", (30000, 30100))],
    );
    let secret = w.secrets.get_mut(&key("keys")).unwrap();
    let value = secret.data.remove("id_rsa").unwrap();
    secret.data.insert("id rsa\nHost *".into(), value);
    let before = w.hypervisors.clone();
    let (_, plans) = plan(&mut w);
    assert_eq!(
        plans[0].error.as_deref(),
        Some(
            "spec.services.jumpHost[0].nodeSSHPrivateKeys: Secret tenants/keys key \"id rsa\\nHost *\" \
             is not a file name ([-._a-zA-Z0-9], not starting with .)"
        )
    );
    assert_eq!(w.hypervisors, before);

    // No public hypervisor at all.
    let mut w = world(
        ALL,
        &[hypervisor("private-1", false, "10.1.0.1", (30000, 30100))],
    );
    let (_, plans) = plan(&mut w);
    assert!(
        plans[0]
            .error
            .as_deref()
            .unwrap()
            .ends_with("(there is none)")
    );
}

#[test]
fn node_labels_and_cordons_choose_among_public_hypervisors() {
    let services = "{jumpHost: [{image: jump, nodePort: 30000, nodeInterfaceId: oam-ipv4, nodeSSHPrivateKeys: keys, nodeLabels: {site: b}}]}";
    let mut b = hypervisor("public-b", true, "10.1.0.3", (30000, 30100));
    b = b.replace("site: a", "site: b");
    let mut w = world(
        services,
        &[
            hypervisor("public-a", true, "10.1.0.2", (30000, 30100)),
            b.clone(),
        ],
    );
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].services[0].hypervisor, "public-b");
    // Cordoned: not chosen, and said so.
    let cordoned = b.replace("public: true", "public: true, unschedulable: true");
    let mut w = world(
        services,
        &[
            hypervisor("public-a", true, "10.1.0.2", (30000, 30100)),
            cordoned,
        ],
    );
    let (_, plans) = plan(&mut w);
    assert_eq!(
        plans[0].error.as_deref(),
        Some(
            "spec.services.jumpHost[0].nodePort: no public hypervisor can run the jump host \
             jump-host-0 (public-a: no label site=b; public-b: cordoned)"
        )
    );
}

#[test]
fn placed_services_stay_and_services_no_longer_asked_for_let_their_ports_go() {
    let mut w = world(
        ALL,
        &[hypervisor("public-1", true, "10.1.0.2", (30000, 30100))],
    );
    plan(&mut w);
    // A less loaded public hypervisor appears: nothing moves.
    let public2 = load(&[&hypervisor("public-2", true, "10.1.0.3", (30000, 30100))]);
    w.hypervisors.extend(public2.hypervisors);
    let (_, plans) = plan(&mut w);
    assert!(plans[0].services.iter().all(|s| s.hypervisor == "public-1"));
    assert!(plans[0].leaving.is_empty());
    // Cordoned: the services stay; drained: they move to the other public hypervisor.
    spec(&mut w, "public-1").unschedulable = true;
    let (_, plans) = plan(&mut w);
    assert!(plans[0].services.iter().all(|s| s.hypervisor == "public-1"));
    spec(&mut w, "public-1").drain = true;
    let (_, plans) = plan(&mut w);
    assert!(
        plans[0].services.iter().all(|s| s.hypervisor == "public-2"),
        "{:?}",
        plans[0].error
    );
    assert!(ports_of(&w, "public-1").is_empty());
    // What they left there goes: pods (public-1 is swept) and directories.
    assert!(plans[0].hypervisors.contains("public-1"));
    assert_eq!(plans[0].leaving["public-1"].len(), 6);
    assert!(
        plans[0].leaving["public-1"]
            .contains(&"/etc/oneinfra/_sip/tenants/s1/jump-host-0".to_string())
    );
    spec(&mut w, "public-1").drain = false;
    spec(&mut w, "public-1").unschedulable = false;
    let (_, plans) = plan(&mut w);
    assert!(plans[0].services.iter().all(|s| s.hypervisor == "public-2"));
    // The jump host's port changes: the same hypervisor, the new port, the old one freed.
    let moved = ALL.replace("nodePort: 30000", "nodePort: 30050");
    w.sip_clusters.get_mut(&key("s1")).unwrap().spec =
        world(&moved, &[]).sip_clusters[&key("s1")].spec.clone();
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].services[2].endpoint(), "10.1.0.3:30050");
    let h2 = &w.hypervisors[&ObjectKey::cluster_scoped("public-2")].status;
    assert!(h2.freed_ports.contains(&30000));
    // The worker load balancer is no longer asked for: its ports go, its directories too.
    let fewer = moved.replace(
        ", loadBalancerWorker: [{image: haproxy, nodeInterfaceId: oam-ipv4, nodePortRange: {start: 30002, end: 30004}}]",
        "",
    );
    w.sip_clusters.get_mut(&key("s1")).unwrap().spec =
        world(&fewer, &[]).sip_clusters[&key("s1")].spec.clone();
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].services.len(), 2);
    assert_eq!(
        plans[0].leaving,
        BTreeMap::from([(
            "public-2".to_string(),
            vec![
                "/etc/oneinfra/_sip/tenants/s1/lb-worker-0".to_string(),
                "/var/lib/oneinfra/_sip/tenants/s1/lb-worker-0".to_string()
            ]
        )])
    );
    assert!(
        !ports_of(&w, "public-1")
            .iter()
            .any(|(o, _)| o.contains("lb-worker"))
    );
    // Deleted: its pods and whole directories are to go; its ports stay held until they
    // are gone, so that a sweep that fails knows where to look next time.
    w.sip_clusters
        .get_mut(&key("s1"))
        .unwrap()
        .metadata
        .deletion_timestamp = Some(NOW);
    let held = ports_of(&w, "public-2");
    let (reports, plans) = plan(&mut w);
    assert!(plans[0].deleted);
    assert!(plans[0].services.is_empty());
    assert_eq!(
        plans[0].hypervisors,
        BTreeSet::from(["public-2".to_string()])
    );
    assert_eq!(
        plans[0].leaving["public-2"],
        [
            "/etc/oneinfra/_sip/tenants/s1",
            "/var/lib/oneinfra/_sip/tenants/s1"
        ]
    );
    assert_eq!(ports_of(&w, "public-2"), held);
    // The sweep failed: everything stays, the SIPCluster with it; the next plan sweeps the
    // same hypervisor.
    let failed = vec![SipServicesResult {
        key: key("s1"),
        services: Vec::new(),
        sweep_error: Some(crate::record::Failure::new(
            crate::record::Reason::HypervisorUnreachable,
            "hypervisor public-2 cannot be reached",
        )),
    }];
    assert!(record_services(&mut w, &reports, &plans, &failed, NOW).is_empty());
    assert!(w.sip_clusters.contains_key(&key("s1")));
    assert_eq!(ports_of(&w, "public-2"), held);
    let (reports, plans) = plan(&mut w);
    assert_eq!(
        plans[0].hypervisors,
        BTreeSet::from(["public-2".to_string()])
    );
    // Swept: its ports and file records go, and it leaves the world.
    let swept = vec![SipServicesResult {
        key: key("s1"),
        services: Vec::new(),
        sweep_error: None,
    }];
    record_services(&mut w, &reports, &plans, &swept, NOW);
    assert!(!w.sip_clusters.contains_key(&key("s1")));
    assert!(ports_of(&w, "public-2").is_empty());
    assert!(!w.hypervisors.values().any(|h| {
        h.status
            .files
            .get(NS)
            .is_some_and(|c| c.contains_key("SIPCluster/s1"))
    }));
}

const HASH: &str = "$pbkdf2-sha256$i=10000$c2FsdHNhbHQ$8AsC4H/147lFlEEMCnL1JMziEIWaSGvXLB7jM4MIJaM";

fn users_secret(users: &str) -> World {
    load(&[&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: users, namespace: {NS}}}\ndata: {{users.yaml: {}}}\n",
        b64(users)
    )])
}

/// The SIPCluster s1 of `w`.
fn s1(w: &mut World) -> &mut oi_api::SipCluster {
    w.sip_clusters.get_mut(&key("s1")).unwrap()
}

/// ALL with an OIDC provider, a cluster c1 of ours named by clusterRef, the users Secret.
fn own_cluster_world() -> World {
    let services = ALL.replacen(
        "{jumpHost",
        "{oidcProvider: [{image: dex, nodePort: 30090, nodeInterfaceId: oam-ipv4, usersSecret: users, clientID: kubectl, usernameClaim: email}], jumpHost",
        1,
    );
    let mut w = world(
        &services,
        &[hypervisor("public-1", true, "10.1.0.2", (30000, 30100))],
    );
    let cluster = format!(
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {{name: c1, namespace: {NS}}}\nspec: {{}}\n"
    );
    w.clusters.extend(
        load(&[&cluster])
            .clusters
            .into_iter()
            .map(|(k, c)| (k, crate::testutil::with_pki(c))),
    );
    w.clusters
        .get_mut(&ObjectKey::new(NS, "c1"))
        .unwrap()
        .status
        .api_server_endpoint = "https://10.1.0.2:30050".into();
    w.secrets.extend(
        users_secret(&format!(
            "- username: alice\n  email: alice@example.com\n  passwordHash: '{HASH}'\n"
        ))
        .secrets,
    );
    w.sip_clusters.get_mut(&key("s1")).unwrap().spec.cluster_ref =
        Some(oi_api::sip::LocalObjectReference { name: "c1".into() });
    w
}

#[test]
fn the_control_plane_of_a_cluster_of_ours_is_its_ingress_and_its_api_servers_trust_the_oidc_provider()
 {
    let mut w = own_cluster_world();
    let (reports, plans) = plan(&mut w);
    let p = &plans[0];
    assert_eq!(p.error, None);
    assert!(
        p.services
            .iter()
            .all(|s| s.kind != ServiceKind::LoadBalancerControlPlane)
    );
    assert_eq!(
        p.notes,
        [
            "spec.services.loadBalancerControlPlane[0]: the control plane is cluster tenants/c1's, behind its own ingress (https://10.1.0.2:30050)",
            "spec.services.oidcProvider[0]: cluster tenants/c1's API servers trust it (https://10.1.0.2:30090)",
        ]
    );
    // Its port is held like the others'.
    assert!(
        ports_of(&w, "public-1").contains(&(
            "tenants/SIPCluster/s1/oidc-provider-0-https".to_string(),
            30090
        )),
        "{:?}",
        ports_of(&w, "public-1")
    );
    // Its PKI is kept in the status: a CA, and a serving certificate for the address.
    let status = w.sip_clusters[&key("s1")].status.oidc_providers.clone();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].service, "oidc-provider-0");
    assert_eq!(status[0].issuer_url, "https://10.1.0.2:30090");
    let ca = &status[0].certificate_authority.certificate;
    let serving = &status[0].serving_certificate.certificate;
    assert!(oi_pki::is_signed_by(serving, ca).unwrap());
    let info = oi_pki::inspect_certificate(serving).unwrap();
    assert_eq!(info.sans, ["10.1.0.2"]);
    // The cluster's API servers are told to trust it.
    let oidc = w.clusters[&ObjectKey::new(NS, "c1")]
        .spec
        .api_server
        .oidc
        .clone()
        .unwrap();
    assert_eq!(
        oidc,
        oi_api::ApiServerOidc {
            issuer_url: "https://10.1.0.2:30090".into(),
            client_id: "kubectl".into(),
            audiences: Vec::new(),
            username_claim: "email".into(),
            username_prefix: None,
            groups_claim: "groups".into(),
            groups_prefix: None,
            signing_algs: vec!["ES256".into()],
            ca: ca.clone(),
        }
    );
    // The provider's files: its configuration, users (0600), TLS chain and key (0600).
    let s = p
        .services
        .iter()
        .find(|s| s.kind == ServiceKind::OidcProvider)
        .unwrap();
    assert_eq!(
        s.pod.containers[0].image,
        "localhost/oneinfra/oidc-provider:0.1.0"
    );
    let config: oi_api::oidc::ProviderConfig =
        serde_json::from_str(&text(file(s, "config.json"))).unwrap();
    assert_eq!(config.issuer, "https://10.1.0.2:30090");
    assert_eq!(config.listen.to_string(), "10.1.0.2:30090");
    assert_eq!(config.clients[0].id, "kubectl");
    assert_eq!(
        config.clients[0].redirect_uris,
        ["http://localhost:8000", "http://localhost:18000"]
    );
    assert!(!config.password_grant);
    assert!(
        config
            .signing_key
            .starts_with("/var/lib/oneinfra/_sip/tenants/s1/oidc-provider-0/")
    );
    assert_eq!(file(s, "users.yaml").mode, 0o600);
    assert_eq!(file(s, "tls.key").mode, 0o600);
    assert_eq!(text(file(s, "tls.crt")), format!("{serving}{ca}"));

    // Every service runs: ready.
    let results = all_running(p);
    let outcomes = record_services(&mut w, &reports, &plans, &results, NOW);
    assert!(outcomes[0].ready, "{:?}", outcomes[0]);
    assert!(
        outcomes[0]
            .message
            .contains("OIDC provider oidc-provider-0 at 10.1.0.2:30090")
    );

    // A second run keeps every certificate and file as they are.
    let before = w.clone();
    let (_, again) = plan(&mut w);
    assert_eq!(w.sip_clusters[&key("s1")].status.oidc_providers, status);
    assert_eq!(w.clusters, before.clusters);
    let s2 = again[0]
        .services
        .iter()
        .find(|s| s.kind == ServiceKind::OidcProvider)
        .unwrap();
    assert_eq!(s2.files, s.files);
}

#[test]
fn the_jump_host_gets_a_kubeconfig_of_our_cluster_with_a_credential_of_its_own() {
    let mut w = own_cluster_world();
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].waiting, Vec::<String>::new());
    let jump = plans[0]
        .services
        .iter()
        .find(|s| s.kind == ServiceKind::JumpHost)
        .unwrap();
    let kubeconfig = file(jump, "kubeconfig");
    assert_eq!(kubeconfig.mode, 0o600);
    let config: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&kubeconfig.content).unwrap();
    assert_eq!(
        config["clusters"][0]["cluster"]["server"],
        "https://10.1.0.2:30050"
    );
    let user = "oneinfra:sipcluster:tenants:s1:jump-host-0";
    assert_eq!(config["users"][0]["name"], user);
    // Its certificate: from the cluster's API server client CA, that user, in system:masters.
    let kept = w.sip_clusters[&key("s1")].status.jump_hosts.clone();
    assert_eq!(kept.len(), 1);
    let cert = &kept[0].client_certificate.certificate;
    let ca = crate::testutil::shared_pki()
        .api_server_client
        .certificate_pem();
    assert!(oi_pki::is_signed_by(cert, ca).unwrap());
    let info = oi_pki::inspect_certificate(cert).unwrap();
    assert_eq!(info.common_name.as_deref(), Some(user));
    assert_eq!(info.organizations, ["system:masters"]);
    assert!(jump.pod.containers[0].command[2].contains("/.kube/config"));
    // Kept as it is on the next run.
    let (_, again) = plan(&mut w);
    assert_eq!(w.sip_clusters[&key("s1")].status.jump_hosts, kept);
    let jump2 = again[0]
        .services
        .iter()
        .find(|s| s.kind == ServiceKind::JumpHost)
        .unwrap();
    assert_eq!(file(jump2, "kubeconfig"), kubeconfig);
    // Near its end: a new one.
    let later = NOW + SERVING_LIFETIME - RENEW_BEFORE + time::Duration::days(1);
    let reports = select_hosts(&mut w, later);
    plan_services(&mut w, &reports, &options(), later);
    assert_ne!(w.sip_clusters[&key("s1")].status.jump_hosts, kept);
    // Without a cluster of ours: no kubeconfig, no credential.
    w.sip_clusters.get_mut(&key("s1")).unwrap().spec.cluster_ref = None;
    let (_, plans) = plan(&mut w);
    let jump = plans[0]
        .services
        .iter()
        .find(|s| s.kind == ServiceKind::JumpHost)
        .unwrap();
    assert!(!jump.files.iter().any(|f| f.path.ends_with("/kubeconfig")));
    assert!(w.sip_clusters[&key("s1")].status.jump_hosts.is_empty());
}

#[test]
fn a_jump_host_whose_cluster_has_no_endpoint_waits_and_is_not_ready() {
    let mut w = own_cluster_world();
    let c1 = ObjectKey::new(NS, "c1");
    w.clusters
        .get_mut(&c1)
        .unwrap()
        .status
        .api_server_endpoint
        .clear();
    let (reports, plans) = plan(&mut w);
    assert_eq!(
        plans[0].waiting,
        [
            "jump-host-0: the kubeconfig of cluster tenants/c1 waits for its PKI and API server endpoint"
        ]
    );
    let jump = plans[0]
        .services
        .iter()
        .find(|s| s.kind == ServiceKind::JumpHost)
        .unwrap();
    assert!(!jump.files.iter().any(|f| f.path.ends_with("/kubeconfig")));
    // Recorded as is, it is not ready, saying why.
    let outcome = record_services(&mut w.clone(), &reports, &plans, &[], NOW);
    assert!(!outcome[0].ready);
    assert!(
        outcome[0]
            .failing
            .iter()
            .any(|f| f.contains("waits for its PKI"))
    );
}

/// A new cluster (no PKI, no endpoint) and a SIPCluster whose `clusterRef` names it, planned
/// in one run ([`crate::plan`]): the services' fixed ports are claimed before the cluster's
/// are handed out, the cluster's API servers are rendered trusting the OIDC provider while
/// its spec in the plan's world is untouched (the plan carries the change, the record writes
/// it), and the jump host has its kubeconfig in the same plan, issued by the CA just made.
#[test]
fn one_run_plans_a_new_cluster_and_the_sip_cluster_that_names_it() {
    let mut w = own_cluster_world();
    let c1 = ObjectKey::new(NS, "c1");
    let cluster = format!(
        "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata: {{name: c1, namespace: {NS}}}\nspec: {{}}\n"
    );
    w.clusters = load(&[&cluster]).clusters;
    w.hypervisors
        .extend(load(&[&hypervisor("private-1", false, "10.1.0.9", (31000, 31100))]).hypervisors);
    let plan = crate::plan(w.clone(), NOW, &options());
    let Some(crate::ClusterPlan::Converge(c)) = plan.clusters.get(&c1) else {
        panic!("c1 is not converged: {:?}", plan.clusters.get(&c1));
    };
    // The services' ports are theirs; the cluster's ingress got others of the same range.
    let ingress_ports: Vec<u16> = plan
        .world
        .components
        .values()
        .filter(|c| c.spec.role == oi_api::ComponentRole::ControlPlaneIngress)
        .flat_map(|c| c.status.allocated_host_ports.iter().map(|a| a.port))
        .collect();
    assert!(!ingress_ports.is_empty());
    // (30001, the control plane load balancer's, is not run: the cluster is ours.)
    let sip_ports: Vec<u16> = plan.world.hypervisors[&ObjectKey::cluster_scoped("public-1")]
        .status
        .allocated_ports
        .iter()
        .filter(|a| a.cluster == owner_cluster("s1"))
        .map(|a| a.port)
        .collect();
    assert_eq!(sip_ports, [30000, 30002, 30003, 30004, 30090]);
    for p in &sip_ports {
        assert!(
            !ingress_ports.contains(p),
            "the ingress took port {p}: {ingress_ports:?}"
        );
    }
    // The trust change: in the plan, in the API servers' authentication configuration, not
    // in the plan's world.
    let [change] = plan.sip.trust.as_slice() else {
        panic!("trust changes: {:?}", plan.sip.trust);
    };
    assert_eq!(change.cluster, c1);
    assert_eq!(change.sip_cluster, key("s1"));
    assert_eq!(change.from, None);
    let issuer = change.to.as_ref().unwrap().issuer_url.clone();
    assert_eq!(issuer, "https://10.1.0.2:30090");
    assert_eq!(plan.world.clusters[&c1].spec.api_server.oidc, None);
    let configs: Vec<serde_json::Value> = c
        .components
        .iter()
        .flat_map(|p| &p.rendered.files)
        .filter(|f| f.path.ends_with("/authentication-config.yaml"))
        .map(|f| serde_yaml_ng::from_slice(&f.content).unwrap())
        .collect();
    assert!(!configs.is_empty());
    for config in &configs {
        assert_eq!(
            config["jwt"][0]["issuer"]["url"],
            issuer.as_str(),
            "{config}"
        );
    }
    // The jump host's kubeconfig, in this plan: the cluster's new endpoint, a client
    // certificate from its new client CA.
    let services = &plan.sip.services[0];
    assert_eq!(services.waiting, Vec::<String>::new());
    assert_eq!(services.error, None);
    let jump = services
        .services
        .iter()
        .find(|s| s.kind == ServiceKind::JumpHost)
        .unwrap();
    let kubeconfig = String::from_utf8(file(jump, "kubeconfig").content.clone()).unwrap();
    let endpoint = &plan.world.clusters[&c1].status.api_server_endpoint;
    assert!(!endpoint.is_empty());
    assert!(kubeconfig.contains(endpoint.as_str()), "{kubeconfig}");
    let ca = plan.world.clusters[&c1]
        .spec
        .certificate_authorities
        .api_server_client
        .clone()
        .unwrap();
    let credential = &plan.world.sip_clusters[&key("s1")].status.jump_hosts[0];
    assert_eq!(
        oi_pki::needs_renewal(
            &credential.client_certificate.certificate,
            &ca.certificate,
            &[] as &[&str],
            NOW,
            RENEW_BEFORE
        )
        .unwrap(),
        None
    );
    // Recorded: the change is written into the cluster's spec.
    let recorded = crate::record_run(plan.world.clone(), &plan.sip, &BTreeMap::new(), &[], NOW);
    assert_eq!(recorded.world.clusters[&c1].spec.api_server.oidc, change.to);
    // The next plan over the recorded world changes no trust.
    let again = crate::plan(recorded.world, NOW, &options());
    assert_eq!(again.sip.trust, Vec::new());
}

#[test]
fn the_oidc_provider_renews_its_certificates_when_it_moves_or_nears_their_end() {
    let mut w = own_cluster_world();
    w.hypervisors
        .extend(load(&[&hypervisor("public-2", true, "10.1.0.3", (30000, 30100))]).hypervisors);
    plan(&mut w);
    let first = w.sip_clusters[&key("s1")].status.oidc_providers[0].clone();
    // Drained: it moves, gets a serving certificate for its new address, the same CA.
    let placed = if ports_of(&w, "public-1")
        .iter()
        .any(|(o, _)| o.contains("oidc"))
    {
        "public-1"
    } else {
        "public-2"
    };
    spec(&mut w, placed).drain = true;
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].error, None);
    let moved = w.sip_clusters[&key("s1")].status.oidc_providers[0].clone();
    assert_ne!(moved.issuer_url, first.issuer_url);
    assert_eq!(moved.certificate_authority, first.certificate_authority);
    assert_ne!(moved.serving_certificate, first.serving_certificate);
    let c1 = ObjectKey::new(NS, "c1");
    assert_eq!(
        w.clusters[&c1]
            .spec
            .api_server
            .oidc
            .as_ref()
            .unwrap()
            .issuer_url,
        moved.issuer_url
    );
    // Near the serving certificate's end: a new one, the same CA.
    let later = NOW + SERVING_LIFETIME - RENEW_BEFORE + time::Duration::days(1);
    let reports = select_hosts(&mut w, later);
    plan_services(&mut w, &reports, &options(), later);
    let renewed = w.sip_clusters[&key("s1")].status.oidc_providers[0].clone();
    assert_eq!(renewed.certificate_authority, first.certificate_authority);
    assert_ne!(renewed.serving_certificate, moved.serving_certificate);
    // Near the CA's end: a new CA, which the API servers are told.
    let much_later = NOW + CA_LIFETIME - RENEW_BEFORE + time::Duration::days(1);
    let reports = select_hosts(&mut w, much_later);
    plan_services(&mut w, &reports, &options(), much_later);
    let new_ca = w.sip_clusters[&key("s1")].status.oidc_providers[0].clone();
    assert_ne!(new_ca.certificate_authority, first.certificate_authority);
    assert_eq!(
        w.clusters[&c1].spec.api_server.oidc.as_ref().unwrap().ca,
        new_ca.certificate_authority.certificate
    );
}

#[test]
fn removing_the_oidc_provider_takes_back_what_it_set_and_only_that() {
    let mut w = own_cluster_world();
    plan(&mut w);
    let c1 = ObjectKey::new(NS, "c1");
    assert!(w.clusters[&c1].spec.api_server.oidc.is_some());
    s1(&mut w).spec.services.oidc_provider.clear();
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].error, None);
    assert_eq!(w.clusters[&c1].spec.api_server.oidc, None);
    assert!(w.sip_clusters[&key("s1")].status.oidc_providers.is_empty());
    assert!(
        !ports_of(&w, "public-1")
            .iter()
            .any(|(o, _)| o.contains("oidc"))
    );

    // The SIPCluster deleted: the same.
    let mut w = own_cluster_world();
    plan(&mut w);
    s1(&mut w).metadata.deletion_timestamp = Some(NOW);
    let (_, plans) = plan(&mut w);
    assert!(plans[0].deleted);
    assert_eq!(w.clusters[&c1].spec.api_server.oidc, None);

    // An issuer someone else set is left alone when a provider goes.
    let mut w = own_cluster_world();
    plan(&mut w);
    let theirs = oi_api::ApiServerOidc {
        issuer_url: "https://idp.example".into(),
        client_id: "k".into(),
        ..oi_api::ApiServerOidc::default()
    };
    w.clusters.get_mut(&c1).unwrap().spec.api_server.oidc = Some(theirs.clone());
    s1(&mut w).spec.services.oidc_provider.clear();
    plan(&mut w);
    assert_eq!(w.clusters[&c1].spec.api_server.oidc, Some(theirs));
}

#[test]
fn a_missing_or_bad_users_secret_fails_the_sipcluster_naming_it() {
    for (users, want) in [
        (
            None,
            "spec.services.oidcProvider[0].usersSecret: Secret tenants/users does not exist",
        ),
        (
            Some("- username: a\n  passwordHash: plain\n"),
            "spec.services.oidcProvider[0].usersSecret: Secret tenants/users key users.yaml: users[0] (a).passwordHash: not a $pbkdf2-sha256$",
        ),
    ] {
        let mut w = own_cluster_world();
        w.secrets.remove(&ObjectKey::new(NS, "users"));
        if let Some(u) = users {
            w.secrets.extend(users_secret(u).secrets);
        }
        let (_, plans) = plan(&mut w);
        let e = plans[0].error.clone().unwrap();
        assert!(e.starts_with(want), "{e}");
    }
}

#[test]
fn records_set_ready_from_the_services_and_keep_the_transition_time() {
    let mut w = world(
        ALL,
        &[hypervisor("public-1", true, "10.1.0.2", (30000, 30100))],
    );
    let (reports, plans) = plan(&mut w);
    let result = |running: bool| {
        vec![SipServicesResult {
            key: key("s1"),
            services: plans[0]
                .services
                .iter()
                .map(|s| ServiceResult {
                    name: s.name.clone(),
                    hypervisor: s.hypervisor.clone(),
                    failure: (!running && s.kind == ServiceKind::JumpHost).then(|| {
                        crate::record::Failure::new(
                            crate::record::Reason::ServiceNotRunning,
                            "pod s1-jump-host-0 on public-1: container sshd exited with code 255",
                        )
                    }),
                    hashes: Some(
                        s.files
                            .iter()
                            .map(|f| (f.path.clone(), f.content_hash()))
                            .collect(),
                    ),
                })
                .collect(),
            sweep_error: None,
        }]
    };
    let outcomes = record_services(&mut w, &reports, &plans, &result(false), NOW);
    assert_eq!(outcomes[0].key, key("s1"));
    assert!(!outcomes[0].ready);
    let ready = w.sip_clusters[&key("s1")]
        .condition("Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.status, oi_api::common::ConditionStatus::False);
    assert!(ready.message.ends_with("; failing: jump-host-0: pod s1-jump-host-0 on public-1: container sshd exited with code 255 (ServiceNotRunning)"), "{}", ready.message);

    let later = NOW + time::Duration::minutes(1);
    let outcomes = record_services(&mut w, &reports, &plans, &result(true), later);
    assert!(outcomes[0].ready);
    assert!(outcomes[0].failing.is_empty());
    let ready = w.sip_clusters[&key("s1")]
        .condition("Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.status, oi_api::common::ConditionStatus::True);
    assert_eq!(ready.reason, "ReconciliationSucceeded");
    assert_eq!(ready.last_transition_time, later);
    // Files placed are recorded under the SIPCluster's owner, per service.
    let files = &w.hypervisors[&ObjectKey::cluster_scoped("public-1")]
        .status
        .files[NS]["SIPCluster/s1"];
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["jump-host-0", "lb-control-plane-0", "lb-worker-0"]
    );
    // The next run: known files are the recorded ones, the condition keeps its time.
    let (reports, plans) = plan(&mut w);
    assert!(
        plans[0]
            .services
            .iter()
            .all(|s| s.known_files.len() == s.files.len())
    );
    record_services(
        &mut w,
        &reports,
        &plans,
        &result(true),
        later + time::Duration::minutes(1),
    );
    let again = w.sip_clusters[&key("s1")].condition("Ready").unwrap();
    assert_eq!(again.last_transition_time, later);
}

#[test]
fn an_unschedulable_sip_cluster_keeps_its_services_which_a_drain_moves() {
    let mut w = placed_on_public_1();
    // It asks for more control plane hosts than the inventory has: unschedulable, its hosts
    // and services kept, planned with the hosts it holds.
    s1(&mut w)
        .spec
        .nodes
        .get_mut("ControlPlane")
        .unwrap()
        .count
        .active = 5;
    let (reports, plans) = plan(&mut w);
    assert!(
        !reports[0].selection.shortfalls.is_empty(),
        "{}",
        reports[0].message
    );
    assert_eq!(plans.len(), 1, "its services are still planned");
    assert!(plans[0].error.is_none(), "{:?}", plans[0].error);
    assert!(plans[0].services.iter().all(|s| s.hypervisor == "public-1"));
    let backends = text(file(
        plans[0]
            .services
            .iter()
            .find(|s| s.kind == ServiceKind::LoadBalancerControlPlane)
            .unwrap(),
        "haproxy.cfg",
    ));
    assert!(backends.contains(":6443"), "{backends}");
    // Drained: they move, and the SIPCluster stays unschedulable whatever its services do.
    spec(&mut w, "public-1").drain = true;
    let (reports, plans) = plan(&mut w);
    assert!(plans[0].services.iter().all(|s| s.hypervisor == "public-2"));
    assert!(ports_of(&w, "public-1").is_empty());
    let results = all_running(&plans[0]);
    let outcomes = record_services(&mut w, &reports, &plans, &results, NOW);
    assert!(outcomes[0].ready, "{:?}", outcomes[0]);
    let ready = s1(&mut w).condition("Ready").unwrap().clone();
    assert_eq!(ready.status, oi_api::common::ConditionStatus::False);
    assert_eq!(ready.reason, "Unschedulable", "{}", ready.message);

    // One that never ran services gets none while unschedulable.
    let mut fresh = world(
        ALL,
        &[hypervisor("public-1", true, "10.1.0.2", (30000, 30100))],
    );
    s1(&mut fresh)
        .spec
        .nodes
        .get_mut("ControlPlane")
        .unwrap()
        .count
        .active = 5;
    let (_, plans) = plan(&mut fresh);
    assert!(plans.is_empty(), "{plans:?}");
    assert!(ports_of(&fresh, "public-1").is_empty());
}

#[test]
fn services_are_placed_by_the_planners_rules_capacity_zones_and_loss() {
    // Capacity: a hypervisor with room for one more component takes one service, and the
    // next goes elsewhere; with no room anywhere the error gives the numbers.
    let tight = |name: &str, ip: &str, components: u32| {
        hypervisor(name, true, ip, (30000, 30100)).replace(
            "public: true",
            &format!("public: true, capacity: {{components: {components}}}"),
        )
    };
    let mut w = world(
        ALL,
        &[
            tight("public-a", "10.1.0.2", 1),
            tight("public-b", "10.1.0.3", 2),
        ],
    );
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].error, None);
    let on = |p: &SipServices| -> Vec<(String, String)> {
        p.services
            .iter()
            .map(|s| (s.name.clone(), s.hypervisor.clone()))
            .collect()
    };
    let placed = on(&plans[0]);
    for h in ["public-a", "public-b"] {
        let here = placed.iter().filter(|(_, on)| on == h).count();
        let room = if h == "public-a" { 1 } else { 2 };
        assert_eq!(here, room, "{h} holds what its capacity allows: {placed:?}");
    }
    let mut full = world(
        ALL,
        &[
            tight("public-a", "10.1.0.2", 1),
            tight("public-b", "10.1.0.3", 1),
        ],
    );
    let (_, plans) = plan(&mut full);
    let e = plans[0].error.as_deref().unwrap_or_default();
    assert!(
        e.contains("public-a: capacity: no room for another component")
            && e.contains("public-b: capacity: no room for another component"),
        "{e}"
    );
    assert!(ports_of(&full, "public-a").is_empty(), "nothing claimed");
    assert!(ports_of(&full, "public-b").is_empty(), "nothing claimed");

    // Zones: two control plane load balancers of one SIPCluster go to distinct failure
    // domains even when another hypervisor of the first's zone is emptier.
    let two_lbs = "{loadBalancerControlPlane: [{image: haproxy, nodePort: 30001, nodeInterfaceId: oam-ipv4}, {image: haproxy, nodePort: 30005, nodeInterfaceId: oam-ipv4}]}";
    let zoned = |name: &str, ip: &str, zone: &str| {
        hypervisor(name, true, ip, (30000, 30100)).replace(
            "labels: {site: a}",
            &format!("labels: {{site: a, topology.kubernetes.io/zone: {zone}}}"),
        )
    };
    let mut w = world(
        two_lbs,
        &[
            zoned("a-1", "10.1.0.2", "za"),
            zoned("a-2", "10.1.0.3", "za"),
            zoned("b-1", "10.1.0.4", "zb"),
        ],
    );
    let (_, plans) = plan(&mut w);
    assert_eq!(plans[0].error, None);
    assert_eq!(
        on(&plans[0]),
        [
            ("lb-control-plane-0".to_string(), "a-1".to_string()),
            ("lb-control-plane-1".to_string(), "b-1".to_string()),
        ]
    );

    // Loss: a hypervisor unreachable longer than the grace period the manager allows
    // (`--replace-unreachable-after`) loses its services to another, as a cluster's
    // replicas are; without a grace period they stay.
    let mut w = placed_on_public_1();
    let h1 = w
        .hypervisors
        .get_mut(&ObjectKey::cluster_scoped("public-1"))
        .unwrap();
    h1.status.conditions.push(oi_api::common::Condition {
        type_: oi_api::common::condition_types::REACHABLE.into(),
        status: oi_api::common::ConditionStatus::False,
        reason: "Unreachable".into(),
        message: "connection refused".into(),
        last_set_time: Some(NOW - time::Duration::minutes(10)),
        last_transition_time: Some(NOW - time::Duration::minutes(10)),
    });
    let reports = select_hosts(&mut w, NOW);
    let stays = plan_services(&mut w.clone(), &reports, &options(), NOW);
    assert!(stays[0].services.iter().all(|s| s.hypervisor == "public-1"));
    let graceful = PlanOptions {
        prepare: crate::prepare::PrepareOptions {
            replace_unreachable_after: Some(time::Duration::minutes(5)),
            ..crate::prepare::PrepareOptions::default()
        },
        ..options()
    };
    let moved = plan_services(&mut w, &reports, &graceful, NOW);
    assert_eq!(moved[0].error, None);
    assert!(
        moved[0].services.iter().all(|s| s.hypervisor == "public-2"),
        "{:?}",
        on(&moved[0])
    );
    assert!(ports_of(&w, "public-1").is_empty());
}

#[test]
fn a_clusters_placement_counts_the_services_a_hypervisor_holds() {
    // public-1 (room for 3) runs the SIPCluster's three services; a cluster's ingress
    // then goes to public-2, though public-1 comes first by name.
    let capped = hypervisor("public-1", true, "10.1.0.2", (30000, 30100))
        .replace("public: true", "public: true, capacity: {components: 3}");
    let mut w = world(
        ALL,
        &[
            capped,
            hypervisor("public-2", true, "10.1.0.3", (30000, 30100)),
            hypervisor("private-1", false, "10.1.0.4", (30000, 30100)),
        ],
    );
    let (_, plans) = plan(&mut w);
    assert!(plans[0].services.iter().all(|s| s.hypervisor == "public-1"));
    let held = crate::schedule::held(&w);
    assert_eq!(held["public-1"].load, 3);
    assert_eq!(
        held["public-1"].used,
        versions::LOAD_BALANCER_REQUESTS
            + versions::LOAD_BALANCER_REQUESTS
            + versions::JUMP_HOST_REQUESTS
    );
    let c = oi_api::Cluster::new(
        oi_api::ObjectMeta::namespaced(NS, "c1"),
        oi_api::ClusterSpec {
            control_plane_replicas: Some(1),
            ..oi_api::ClusterSpec::default()
        },
    );
    w.clusters.insert(oi_api::Resource::key(&c), c);
    let prepared = crate::prepare(w, NOW);
    assert!(prepared.failures.is_empty(), "{:?}", prepared.failures);
    let ingress = &prepared.world.components[&ObjectKey::new(NS, "c1-ingress")];
    assert_eq!(ingress.spec.hypervisor.as_deref(), Some("public-2"));
}
