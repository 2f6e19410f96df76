//! `oi hypervisor join` on a fresh local hypervisor (a network namespace with only
//! containerd): the mutual-TLS front runs as a pod through that containerd, the printed
//! manifest works with `oi reconcile` (a cluster placed on the joined hypervisor comes up
//! through the front), a second run changes nothing and prints the same manifest, and the
//! front refuses a client certificate it did not issue.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use oi_e2e::{IMAGE_REPOSITORY, LocalSet, World, binary, inject_cluster, prerequisites, reconcile};

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
    let join = || {
        set.run_on(
            &private.name,
            &[
                &oi,
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
            ],
        )
        .unwrap()
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
    drop(set);
}
