//! `oi hypervisor join` on a fresh local hypervisor (a network namespace with only
//! containerd): the mutual-TLS front runs as a pod through that containerd, the printed
//! manifest works with `oi reconcile` (a cluster placed on the joined hypervisor comes up
//! through the front), a second run changes nothing and prints the same manifest, and the
//! front refuses a client certificate it did not issue.

use http::Method;
use oi_api::Hypervisor;
use oi_e2e::{IMAGE_REPOSITORY, LocalSet, World, binary, inject_cluster, prerequisites, reconcile};
use oi_manager_testsupport::apiserver_standin::{ApiServer, StandinOptions};

#[test]
fn a_joined_hypervisor_runs_a_cluster_through_its_mutual_tls_front() {
    let test = "a_joined_hypervisor_runs_a_cluster_through_its_mutual_tls_front";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("hj", 1, 1, false).unwrap();
    let state = set.state().unwrap();
    let private = state
        .hypervisors
        .iter()
        .find(|h| h.name.contains("private"))
        .unwrap()
        .clone();
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("front");
    let oi = binary("oi").unwrap().display().to_string();
    let ip = private.ip.to_string();
    let socket = private.socket.display().to_string();
    let state_text = state_dir.display().to_string();
    // `oi hypervisor join` with the flags every run here gives, then `extra`.
    let join_args = |extra: &[&str]| -> Vec<String> {
        [
            "hypervisor",
            "join",
            "--name",
            "joined-1",
            "--ip-address",
            &ip,
            "--port-range",
            "31000-32000",
            "--cri-socket",
            &socket,
            "--state-dir",
            &state_text,
            "--image-repository",
            IMAGE_REPOSITORY,
            "--label",
            "topology.kubernetes.io/zone=z1",
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_string())
        .collect()
    };
    // Inside the hypervisor's network namespace, as on the machine itself.
    let join = || {
        let mut args = vec![oi.clone()];
        args.extend(join_args(&[]));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        set.run_on(&private.name, &args).unwrap()
    };
    let first = join();
    assert!(first.success, "{first:?}");
    assert!(
        first
            .stderr
            .contains("the front runs: pod oneinfra-system/oneinfra-cri-front"),
        "{}",
        first.stderr
    );
    let manifest = World::parse(&first.stdout).unwrap();
    let hv = &manifest.documents[0];
    assert_eq!(hv["kind"], "Hypervisor");
    assert_eq!(
        hv["spec"]["remoteCRIEndpoint"]["criEndpointURI"],
        format!("tcp://{ip}:27000")
    );
    assert_eq!(
        hv["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "z1"
    );
    // Keys 0600 from their creation, in a 0700 directory.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state_dir), 0o700);
    for key in [
        "server.key",
        "client.key",
        "server-ca.key",
        "client-ca.key",
        "server.pem",
    ] {
        assert_eq!(mode(&state_dir.join(key)), 0o600, "{key}");
    }

    // Again: nothing changes, the same manifest.
    let second = join();
    assert!(second.success, "{second:?}");
    assert_eq!(second.stdout, first.stdout);
    assert!(
        second.stderr.contains("the front runs already, unchanged"),
        "{}",
        second.stderr
    );

    // `oi hypervisor check` on the joined hypervisor, through its front: ready.
    let check = |manifest: &str, extra: &[&str]| {
        let mut args = vec!["hypervisor", "check", "--name", "joined-1"];
        args.extend(extra);
        oi_e2e::oi(&args, manifest).unwrap()
    };
    let ready = check(&first.stdout, &["--image-repository", IMAGE_REPOSITORY]);
    assert!(ready.success, "{ready:?}");
    let line = |report: &str, name: &str| -> String {
        report
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in {report}"))
            .to_string()
    };
    assert!(
        line(&ready.stdout, "cri").contains("ok      containerd"),
        "{}",
        ready.stdout
    );
    assert!(
        line(&ready.stdout, "tls").contains("server CA until"),
        "{}",
        ready.stdout
    );
    assert!(
        line(&ready.stdout, "images").contains("ok      all 6 present"),
        "{}",
        ready.stdout
    );
    assert!(
        line(&ready.stdout, "ports")
            .contains("31000-32000 (1001 ports): 0 held by components, none taken"),
        "{}",
        ready.stdout
    );
    assert!(
        line(&ready.stdout, "capacity").contains("warn"),
        "{}",
        ready.stdout
    );
    // This machine's /dev/kvm, seen through the hypervisor's runtime (TCG machines have none).
    let kvm = if std::path::Path::new("/dev/kvm").exists() {
        "/dev/kvm present"
    } else {
        "/dev/kvm absent"
    };
    assert!(line(&ready.stdout, "kvm").contains(kvm), "{}", ready.stdout);
    // Images of another repository are missing, and a range holding the front's own port
    // (another program, for the components) is taken: both named, exit 1 after the report.
    let taken = first
        .stdout
        .replace("low: 31000", "low: 26990")
        .replace("high: 32000", "high: 27010");
    assert_ne!(
        taken, first.stdout,
        "the manifest's port range was not found"
    );
    let not_ready = check(&taken, &["--image-repository", "localhost/nowhere"]);
    assert_eq!(not_ready.code, Some(1), "{not_ready:?}");
    assert!(
        line(&not_ready.stdout, "images").contains("FAIL    missing 6 of 6: localhost/nowhere/"),
        "{}",
        not_ready.stdout
    );
    assert!(
        line(&not_ready.stdout, "ports").contains("1 taken by another program: 27000"),
        "{}",
        not_ready.stdout
    );
    assert!(
        not_ready.stdout.contains("-> free those ports"),
        "{}",
        not_ready.stdout
    );
    assert!(
        not_ready
            .stderr
            .contains("hypervisor joined-1 is not ready: images, ports, kvm failed"),
        "{}",
        not_ready.stderr
    );

    // The joined hypervisor and the set's public one: a cluster comes up through the front.
    let public = set
        .manifests
        .split("---\n")
        .find(|d| d.contains("kind: Hypervisor") && d.contains("-public-"))
        .unwrap();
    let world = format!("{}---\n{public}", first.stdout);
    let injected = inject_cluster(&world, "c1", 1).unwrap();
    let run = reconcile(&injected, &[]).unwrap();
    let summary = run.summary().unwrap();
    let run = run.ok("oi reconcile").unwrap();
    assert_eq!((summary.ready, summary.not_ready), (1, 0), "{summary}");
    let after = World::parse(&run.stdout).unwrap();
    let placed: Vec<String> = after
        .documents
        .iter()
        .filter(|d| d["kind"] == "Component" && d["spec"]["role"] == "control-plane")
        .map(|d| d["spec"]["hypervisor"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(placed, ["joined-1"]);

    // A client certificate the front did not issue is refused.
    let other = oi_pki::CertificateAuthority::generate(
        "someone else",
        oi_pki::KeyAlgorithm::EcdsaP256,
        time::OffsetDateTime::now_utc(),
        time::Duration::days(1),
    )
    .unwrap();
    let stranger = other
        .issue(
            &oi_pki::LeafSpec::client(oi_pki::CaKind::ApiServerClient, "stranger", &[]),
            time::OffsetDateTime::now_utc(),
            time::Duration::days(1),
        )
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refused = runtime.block_on(oi_cri::CriClient::connect(
        "joined-1",
        oi_cri::CriEndpoint::Tls {
            uri: format!("tcp://{ip}:27000"),
            ca_pem: std::fs::read_to_string(state_dir.join("server-ca.crt")).unwrap(),
            cert_pem: stranger.certificate_pem,
            key_pem: stranger.private_key_pem,
        },
        oi_cri::ClientOptions {
            connect_timeout: std::time::Duration::from_secs(5),
            ..oi_cri::ClientOptions::default()
        },
    ));
    assert!(refused.is_err(), "a stranger's certificate was accepted");

    // Registration on a management cluster (the API stand-in) with a hypervisor join token:
    // our joiner role (config/rbac) lets it create Hypervisors and nothing else. Run from
    // the host this time (the runtime's socket and the front's address are reachable from
    // here), with the same state directory: the front stays as it is.
    let api = ApiServer::start(StandinOptions::default()).unwrap();
    let config = oi_testsupport::workspace_root().join("config/rbac");
    for (file, path) in [
        (
            "hypervisor_joiner_role.yaml",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        ),
        (
            "hypervisor_joiner_role_binding.yaml",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        ),
    ] {
        let text = std::fs::read_to_string(config.join(file)).unwrap();
        let doc: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        api.call(Method::POST, path, Some(&doc)).unwrap();
    }
    let token = "hvjoin.0123456789abcdef";
    let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    api.call(
        Method::POST,
        "/api/v1/namespaces/kube-system/secrets",
        Some(&serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bootstrap-token-hvjoin", "namespace": "kube-system"},
            "type": "bootstrap.kubernetes.io/token",
            "data": {
                "token-id": b64("hvjoin"),
                "token-secret": b64("0123456789abcdef"),
                "usage-bootstrap-authentication": b64("true"),
                "auth-extra-groups": b64("system:bootstrappers:oneinfra:hypervisors"),
            }
        })),
    )
    .unwrap();
    let ca_file = dir.path().join("management-ca.crt");
    std::fs::write(&ca_file, &api.local().serving_ca).unwrap();
    let endpoint = api.local().url();
    let ca_text = ca_file.display().to_string();
    let register = |token: &str| {
        let args = join_args(&[
            "--management-endpoint",
            &endpoint,
            "--management-ca-cert-file",
            &ca_text,
            "--join-token",
            token,
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        oi_e2e::oi(&args, "").unwrap()
    };
    let registered = register(token);
    assert!(registered.success, "{registered:?}");
    assert_eq!(registered.stdout, "", "nothing printed when registering");
    assert!(
        registered
            .stderr
            .contains(&format!("hypervisor joined-1 registered at {endpoint}")),
        "{}",
        registered.stderr
    );
    assert!(
        registered
            .stderr
            .contains("the front runs already, unchanged")
    );
    let stored: Hypervisor = api
        .object(&oi_api::ObjectKey::cluster_scoped("joined-1"))
        .unwrap();
    let printed: Hypervisor = serde_yaml_ng::from_str(&first.stdout).unwrap();
    assert_eq!(stored.spec, printed.spec);
    assert_eq!(stored.metadata.labels, printed.metadata.labels);
    // Again: it is there already, left as it is.
    let again = register(token);
    assert!(again.success, "{again:?}");
    assert!(
        again.stderr.contains("is registered at"),
        "{}",
        again.stderr
    );
    // A wrong token: refused, said so.
    let wrong = register("hvjoin.ffffffffffffffff");
    assert_eq!(wrong.code, Some(1), "{wrong:?}");
    assert!(wrong.stderr.contains("401"), "{}", wrong.stderr);
    // The token can do nothing else: not read Hypervisors (their specs hold client keys),
    // not list Clusters, not delete what it created.
    let network = oi_engine::RealNetwork::new(std::time::Duration::from_secs(10));
    let tls = oi_engine::Tls {
        ca_pem: api.local().serving_ca.clone(),
        identity: None,
    };
    for (method, path) in [
        (
            Method::GET,
            "/apis/infra.oneinfra.ereslibre.es/v1alpha1/hypervisors/joined-1",
        ),
        (
            Method::GET,
            "/apis/infra.oneinfra.ereslibre.es/v1alpha1/hypervisors",
        ),
        (
            Method::GET,
            "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/clusters",
        ),
        (
            Method::DELETE,
            "/apis/infra.oneinfra.ereslibre.es/v1alpha1/hypervisors/joined-1",
        ),
        (Method::GET, "/api/v1/namespaces/kube-system/secrets"),
    ] {
        let answer = runtime
            .block_on(oi_engine::Network::request(
                &network,
                oi_engine::HttpsRequest {
                    base: &endpoint,
                    method: &method,
                    path,
                    body: None,
                    tls: &tls,
                    bearer: Some(token),
                },
            ))
            .unwrap();
        assert_eq!(answer.status, 403, "{method} {path}");
    }
    drop(set);
}
