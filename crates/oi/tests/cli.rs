//! Runs the built `oi` on real inputs and compares whole outputs (diff on failure).
//!
//! Inputs: `tests/fixtures/hypervisors.yaml` (three private hypervisors and one public) and
//! oneinfra's own sample manifests (`../../../shared/conformance/oneinfra/samples`).

// Tests: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use oi_api::{ComponentRole, ObjectKey, versions};
use pretty_assertions::assert_eq;

#[path = "support/oi.rs"]
mod support;
use support::*;

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/oneinfra/samples")
}

/// The output with every secret or random value replaced: PEM bodies (keys, certificates
/// and their serials), and single-line key values (WireGuard keys).
fn mask_key_material(text: &str) -> String {
    let mut out = String::new();
    let mut in_pem = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("-----BEGIN ") {
            in_pem = true;
            out.push_str(line);
        } else if trimmed.starts_with("-----END ") {
            in_pem = false;
            out.push_str(line);
        } else if in_pem {
            continue;
        } else if let Some((key, value)) = line.split_once(": ")
            && (key.trim_end().ends_with("privateKey") || key.trim_end().ends_with("publicKey"))
            && value != "|"
        {
            out.push_str(key);
            out.push_str(": <masked>");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// oneinfra's samples

fn samples() -> Vec<PathBuf> {
    let mut samples: Vec<_> = fs::read_dir(samples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    samples.sort();
    assert_eq!(samples.len(), 5, "oneinfra ships five samples");
    samples
}

/// Runs `oi join-token inject` on `world` and checks that the output is `world` byte for byte
/// but for the one new token, right after the previous last token of that cluster. Returns
/// the output.
fn second_pass_adds_only_a_token(world: &str, cluster: &ObjectKey, previous_token: &str) -> String {
    let selector = cluster.to_string();
    let out = oi(
        &[
            "join-token",
            "inject",
            "--cluster",
            &selector,
            "--seed",
            "2",
        ],
        world.as_bytes(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stderr(&out).trim_end().to_string();
    let anchor = format!("- {previous_token}\n");
    let at = world
        .find(&anchor)
        .expect("the first token is in the output");
    let indent_start = world[..at].rfind('\n').map_or(0, |i| i + 1);
    let indent = &world[indent_start..at];
    let mut expected = world.to_string();
    expected.insert_str(at + anchor.len(), &format!("{indent}- {token}\n"));
    assert_eq!(stdout(&out), expected);
    stdout(&out)
}

/// Every sample loads, and writing what was read is a fixed point: a second pass over the
/// output reproduces it byte for byte (but for the token the pass adds).
#[test]
fn samples_load_and_a_second_pass_is_byte_identical() {
    for sample in samples() {
        let text = fs::read_to_string(&sample).unwrap();
        let declared = load(&text);
        assert!(!declared.clusters.is_empty(), "{}", sample.display());
        let (cluster, _) = declared.clusters.first_key_value().unwrap();
        let selector = cluster.to_string();

        let first = oi(
            &[
                "join-token",
                "inject",
                "--cluster",
                &selector,
                "--seed",
                "1",
                "-f",
                path_str(&sample),
            ],
            b"",
        );
        assert!(
            first.status.success(),
            "{}: {}",
            sample.display(),
            stderr(&first)
        );
        let first_token = stderr(&first).trim_end().to_string();
        let world = stdout(&first);
        let loaded = load(&world);
        assert_eq!(
            loaded.clusters.keys().collect::<Vec<_>>(),
            declared.clusters.keys().collect::<Vec<_>>(),
            "{}",
            sample.display()
        );
        assert_eq!(
            loaded.clusters[cluster].spec.join_tokens,
            std::slice::from_ref(&first_token)
        );
        second_pass_adds_only_a_token(&world, cluster, &first_token);
    }
}

/// The samples' clusters, prepared on the fixture hypervisors (PKI, components, ports), also
/// survive a second pass byte for byte.
#[test]
fn prepared_samples_survive_a_second_pass() {
    for sample in samples() {
        let world = ok(
            &[
                "cluster",
                "inject",
                "--name",
                "probe",
                "-f",
                path_str(&hypervisors()),
                "-f",
                path_str(&sample),
            ],
            b"",
        );
        let loaded = load(&world);
        let declared = load(&fs::read_to_string(&sample).unwrap());
        assert_eq!(loaded.clusters.len(), declared.clusters.len() + 1);
        for (key, cluster) in &loaded.clusters {
            assert!(
                cluster
                    .status
                    .api_server_endpoint
                    .starts_with("https://10.0.1.21:"),
                "{}: {key} was not prepared",
                sample.display()
            );
        }
        let probe = ObjectKey::new("default", "probe");
        let with_token = second_pass_adds_only_a_token_fresh(&world, &probe);
        assert!(with_token.len() > world.len());
    }
}

/// Like [`second_pass_adds_only_a_token`] for a cluster without tokens yet: the pass adds the
/// `joinTokens` list itself, and nothing else changes.
fn second_pass_adds_only_a_token_fresh(world: &str, cluster: &ObjectKey) -> String {
    let selector = cluster.to_string();
    let out = oi(
        &[
            "join-token",
            "inject",
            "--cluster",
            &selector,
            "--seed",
            "3",
        ],
        world.as_bytes(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stderr(&out).trim_end().to_string();
    let output = stdout(&out);
    // Removing the two added lines must give the input back, byte for byte.
    let added = format!("  joinTokens:\n  - {token}\n");
    assert_eq!(output.matches(&added).count(), 1, "{output}");
    assert_eq!(output.replacen(&added, "", 1), world);
    output
}

// ---------------------------------------------------------------------------------------------
// cluster inject

#[test]
fn cluster_inject_derives_replicas_and_an_ingress() {
    for replicas in [1, 3] {
        let world = load(&injected("c1", replicas));
        assert_eq!(world.hypervisors.len(), 4);
        assert_eq!(world.clusters.len(), 1);
        let cluster = &world.clusters[&ObjectKey::new("default", "c1")];
        assert_eq!(cluster.spec.control_plane_replicas, Some(replicas));
        assert_eq!(
            cluster.spec.kubernetes_version,
            versions::default_release().version
        );
        assert_eq!(
            cluster.status.api_server_endpoint,
            "https://10.0.1.21:30000"
        );

        let mut placement: Vec<(String, ComponentRole, String)> = world
            .components
            .values()
            .map(|c| {
                (
                    c.metadata.name.clone(),
                    c.spec.role,
                    c.spec.hypervisor.clone().unwrap(),
                )
            })
            .collect();
        placement.sort();
        let mut expected: Vec<_> = (0..replicas)
            .map(|i| {
                (
                    format!("c1-control-plane-{i}"),
                    ComponentRole::ControlPlane,
                    format!("private-{}", i + 1),
                )
            })
            .collect();
        expected.push((
            "c1-ingress".to_string(),
            ComponentRole::ControlPlaneIngress,
            "public-1".to_string(),
        ));
        assert_eq!(placement, expected, "{replicas} replicas");
    }
}

#[test]
fn cluster_inject_is_reproducible_but_for_key_material() {
    let hypervisors = hypervisors();
    let args = [
        "cluster",
        "inject",
        "--name",
        "c1",
        "--control-plane-replicas",
        "3",
        "--vpn-enabled",
        "--apiserver-extra-sans",
        "api.example.com,192.0.2.1",
        "--seed",
        "42",
        "-f",
        path_str(&hypervisors),
    ];
    let inject = || {
        let out = oi(&args, b"");
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stderr(&out), "");
        stdout(&out)
    };
    let first = inject();
    let second = inject();
    assert_ne!(first, second, "keys are fresh on every run");
    assert_eq!(mask_key_material(&first), mask_key_material(&second));
    assert!(mask_key_material(&first).len() < first.len() / 2);
    let world = load(&first);
    let cluster = &world.clusters[&ObjectKey::new("default", "c1")];
    assert_eq!(
        cluster.spec.api_server.extra_sans,
        ["api.example.com", "192.0.2.1"]
    );
    assert_eq!(cluster.spec.vpn.cidr, "10.0.0.0/16");
    // apiserver 30000, haproxy-runtime 30001, vpn-proxy 30002, wireguard 30003.
    assert!(
        cluster.status.vpn_server_endpoint.ends_with(":30003"),
        "{}",
        cluster.status.vpn_server_endpoint
    );
}

#[test]
fn cluster_inject_in_a_namespace_with_rsa_keys() {
    let world = ok(
        &[
            "cluster",
            "inject",
            "--name",
            "c1",
            "--namespace",
            "team-a",
            "--key-algorithm",
            "rsa-2048",
            "--kubernetes-version",
            "1.36",
            "-f",
            path_str(&hypervisors()),
        ],
        b"",
    );
    let world = load(&world);
    let cluster = &world.clusters[&ObjectKey::new("team-a", "c1")];
    assert_eq!(cluster.spec.kubernetes_version, "1.36.4");
    let ca = cluster.spec.api_server.ca.as_ref().unwrap();
    assert!(ca.private_key.contains("-----BEGIN PRIVATE KEY-----"));
    let key = oi_pki::KeyPairPem::from_private_key_pem("ca", &ca.private_key).unwrap();
    assert_eq!(key.algorithm().unwrap(), oi_pki::KeyAlgorithm::Rsa2048);
}

// ---------------------------------------------------------------------------------------------
// admin kubeconfig and CA

/// Decodes a kubeconfig `*-data` field.
fn kubeconfig_data(kubeconfig: &serde_yaml_ng::Value, section: &str, field: &str) -> String {
    let entry = &kubeconfig[section][0][&section[..section.len() - 1]][field];
    let b64 = entry
        .as_str()
        .unwrap_or_else(|| panic!("{section}.{field}"));
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
    )
    .unwrap()
}

fn openssl(args: &[&str]) -> Output {
    Command::new("openssl").args(args).output().unwrap()
}

#[test]
fn admin_kubeconfig_client_certificate_chains_to_the_client_ca() {
    if !oi_testsupport::require(
        "admin_kubeconfig_client_certificate_chains_to_the_client_ca",
        "command `openssl` on PATH",
        oi_testsupport::have_command("openssl"),
    ) {
        return;
    }
    let world_text = injected("c1", 1);
    let kubeconfig_text = ok(&["cluster", "admin-kubeconfig"], world_text.as_bytes());
    let again = ok(
        &["cluster", "admin-kubeconfig", "--cluster", "c1"],
        world_text.as_bytes(),
    );
    assert_ne!(kubeconfig_text, again, "a new certificate on every call");

    let world = load(&world_text);
    let cluster = &world.clusters[&ObjectKey::new("default", "c1")];
    let kubeconfig: serde_yaml_ng::Value = serde_yaml_ng::from_str(&kubeconfig_text).unwrap();
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["server"].as_str(),
        Some("https://10.0.1.21:30000")
    );
    assert_eq!(
        kubeconfig["current-context"].as_str(),
        Some("kubernetes-admin@c1")
    );
    let api_server_ca = &cluster.spec.api_server.ca.as_ref().unwrap().certificate;
    assert_eq!(
        &kubeconfig_data(&kubeconfig, "clusters", "certificate-authority-data"),
        api_server_ca
    );

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let client_ca = write(
        "client-ca.pem",
        &cluster
            .spec
            .certificate_authorities
            .api_server_client
            .as_ref()
            .unwrap()
            .certificate,
    );
    let server_ca = write("server-ca.pem", api_server_ca);
    let cert = write(
        "admin.crt",
        &kubeconfig_data(&kubeconfig, "users", "client-certificate-data"),
    );
    let key = write(
        "admin.key",
        &kubeconfig_data(&kubeconfig, "users", "client-key-data"),
    );

    let verified = openssl(&["verify", "-CAfile", &client_ca, &cert]);
    assert_eq!(
        String::from_utf8_lossy(&verified.stdout),
        format!("{cert}: OK\n")
    );
    assert!(verified.status.success());
    // The test can fail: the same certificate does not chain to the API server (serving) CA.
    assert!(
        !openssl(&["verify", "-CAfile", &server_ca, &cert])
            .status
            .success()
    );

    let subject = openssl(&[
        "x509", "-in", &cert, "-noout", "-subject", "-nameopt", "RFC2253",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&subject.stdout),
        "subject=CN=kubernetes-admin,O=system:masters\n"
    );
    let cert_public = openssl(&["x509", "-in", &cert, "-noout", "-pubkey"]);
    let key_public = openssl(&["pkey", "-in", &key, "-pubout"]);
    assert!(key_public.status.success());
    assert_eq!(
        cert_public.stdout, key_public.stdout,
        "the key is the certificate's"
    );
}

#[test]
fn apiserver_ca_prints_the_ca_certificate() {
    let world_text = injected("c1", 1);
    let out = ok(
        &["cluster", "apiserver-ca", "--cluster", "default/c1"],
        world_text.as_bytes(),
    );
    let world = load(&world_text);
    let ca = &world.clusters[&ObjectKey::new("default", "c1")]
        .spec
        .api_server
        .ca
        .as_ref()
        .unwrap()
        .certificate;
    assert_eq!(&out, ca);
    assert!(out.starts_with("-----BEGIN CERTIFICATE-----\n"));
}

#[test]
fn certificates_lists_every_certificate_soonest_first() {
    let world_text = injected("c1", 3);
    let out = ok(
        &["cluster", "certificates", "--cluster", "c1"],
        world_text.as_bytes(),
    );
    let lines: Vec<&str> = out.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "OBJECT",
            "CERTIFICATE",
            "SUBJECT",
            "NOT",
            "AFTER",
            "EXPIRES",
            "IN",
            "RENEWAL"
        ]
    );
    let rows: Vec<Vec<&str>> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // 8 CAs and the admin's on the Cluster, 7 certificates on each of 3 replicas.
    assert_eq!(rows.len(), 8 + 1 + 3 * 7, "{out}");
    let world = load(&world_text);
    let key = ObjectKey::new("default", "c1");
    let ca = oi_pki::inspect_certificate(
        &world.clusters[&key]
            .spec
            .api_server
            .ca
            .as_ref()
            .unwrap()
            .certificate,
    )
    .unwrap();
    let ca_row = rows
        .iter()
        .find(|r| r[2] == "spec.apiServer.ca")
        .expect("the API server CA is listed");
    assert_eq!(ca_row[..2], ["Cluster", "default/c1"]);
    assert_eq!(ca_row[3], "c1-apiserver-ca");
    assert_eq!(
        ca_row[4],
        ca.not_after
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    );
    assert_eq!(ca_row[6], "rotate-ca");
    let rotations = rows
        .iter()
        .filter(|r| r.last() == Some(&"rotate-ca"))
        .count();
    assert_eq!(rotations, 8);
    let mut expiries: Vec<&str> = rows.iter().map(|r| r[4]).collect();
    let listed = expiries.clone();
    expiries.sort_unstable();
    assert_eq!(listed, expiries, "soonest first");
    for replica in 0..3 {
        let object = format!("default/c1-control-plane-{replica}");
        assert_eq!(
            rows.iter().filter(|r| r[1] == object).count(),
            7,
            "{object}: {out}"
        );
    }
    // A cluster that is not there.
    let out = oi(
        &["cluster", "certificates", "--cluster", "c9"],
        world_text.as_bytes(),
    );
    assert_eq!(stderr(&out), "error: cluster \"c9\" not found\n");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn cluster_must_be_chosen_among_several() {
    let one = injected("c1", 1);
    let two = ok(&["cluster", "inject", "--name", "c2"], one.as_bytes());
    let out = oi(&["cluster", "admin-kubeconfig"], two.as_bytes());
    assert_eq!(
        stderr(&out),
        "error: several clusters in the manifests (default/c1, default/c2): choose one with --cluster\n"
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    let out = oi(
        &["cluster", "apiserver-ca", "--cluster", "c3"],
        two.as_bytes(),
    );
    assert_eq!(stderr(&out), "error: cluster \"c3\" not found\n");
    let out = oi(&["cluster", "apiserver-ca"], b"");
    assert_eq!(stderr(&out), "error: no cluster in the manifests\n");
}

// ---------------------------------------------------------------------------------------------
// hypervisor inject, join tokens, versions, completion

/// The PEM files of a mutual-TLS front, as `oi hypervisor inject` reads them: `ca.crt` (a CA),
/// `client.crt` and `client.key` (a client certificate it signed, and its key).
struct Front {
    ca: String,
    client: String,
    client_key: String,
}

fn front_certificates(dir: &Path) -> Front {
    let now = time::macros::datetime!(2026-11-22 00:00:00 UTC);
    let ca = oi_pki::CertificateAuthority::generate(
        "front-ca",
        oi_pki::KeyAlgorithm::EcdsaP256,
        now,
        time::Duration::days(365),
    )
    .unwrap();
    let client = ca
        .issue(
            &oi_pki::LeafSpec::client(oi_pki::CaKind::ApiServerClient, "oi", &[]),
            now,
            time::Duration::days(365),
        )
        .unwrap();
    let front = Front {
        ca: ca.certificate_pem().to_string(),
        client: client.certificate_pem,
        client_key: client.private_key_pem,
    };
    fs::write(dir.join("ca.crt"), &front.ca).unwrap();
    fs::write(dir.join("client.crt"), &front.client).unwrap();
    fs::write(dir.join("client.key"), &front.client_key).unwrap();
    front
}

#[test]
fn hypervisor_inject_builds_a_world_clusters_can_be_injected_into() {
    let dir = tempfile::tempdir().unwrap();
    let front = front_certificates(dir.path());
    let file = |n: &str| dir.path().join(n).to_str().unwrap().to_string();

    let world = ok(
        &[
            "hypervisor",
            "inject",
            "--name",
            "private-1",
            "--local-cri-endpoint",
            "/run/containerd/containerd.sock",
            "--ip-address",
            "10.0.0.11",
            "--port-range",
            "31000-31010",
        ],
        b"",
    );
    let world = ok(
        &[
            "hypervisor",
            "inject",
            "--name",
            "public-1",
            "--remote-cri-endpoint",
            "tcp://10.0.1.21:27000",
            "--ca-certificate",
            &file("ca.crt"),
            "--client-certificate",
            &file("client.crt"),
            "--client-key",
            &file("client.key"),
            "--ip-address",
            "10.0.1.21",
            "--public",
        ],
        world.as_bytes(),
    );
    let expected_public = "\
apiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: Hypervisor
metadata:
  name: public-1
spec:
  remoteCRIEndpoint:
    criEndpointURI: tcp://10.0.1.21:27000
    caCertificate: |
{}    clientCertificate:
      certificate: |
{}      privateKey: |
{}  public: true
  ipAddress: 10.0.1.21
  portRange:
    low: 30000
    high: 65000
";
    let indent = |pem: &str, n: usize| -> String {
        pem.lines()
            .map(|l| format!("{}{l}\n", " ".repeat(n)))
            .collect()
    };
    let expected_public = expected_public.replacen("{}", &indent(&front.ca, 6), 1);
    let expected_public = expected_public.replacen("{}", &indent(&front.client, 8), 1);
    let expected_public = expected_public.replacen("{}", &indent(&front.client_key, 8), 1);
    let expected = format!(
        "\
apiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: Hypervisor
metadata:
  name: private-1
spec:
  localCRIEndpoint:
    criEndpointPath: /run/containerd/containerd.sock
  public: false
  ipAddress: 10.0.0.11
  portRange:
    low: 31000
    high: 31010
---
{expected_public}"
    );
    assert_eq!(world, expected);
    let world = load(&ok(
        &["cluster", "inject", "--name", "c1"],
        world.as_bytes(),
    ));
    assert_eq!(world.components.len(), 2);
}

#[test]
fn join_token_generate_prints_a_bootstrap_token() {
    let token = ok(&["join-token", "generate"], b"");
    let (id, secret) = token.trim_end().split_once('.').unwrap();
    let charset = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    assert_eq!((id.len(), secret.len()), (6, 16), "{token}");
    assert!(charset(id) && charset(secret), "{token}");
    assert_ne!(token, ok(&["join-token", "generate"], b""));
    assert_eq!(
        ok(&["join-token", "generate", "--seed", "9"], b""),
        ok(&["join-token", "generate", "--seed", "9"], b"")
    );
}

#[test]
fn version_commands() {
    assert_eq!(
        ok(&["version"], b""),
        format!("oi {}\n", env!("CARGO_PKG_VERSION"))
    );
    let mut expected = format!(
        "default: {}\nsupported:\n",
        versions::default_release().version
    );
    for v in versions::supported_versions() {
        expected.push_str(&format!("- {v}\n"));
    }
    assert_eq!(ok(&["version", "kubernetes"], b""), expected);
    let release = versions::find_release("1.36").unwrap();
    assert_eq!(
        ok(
            &[
                "version",
                "component",
                "--component",
                "kube-apiserver",
                "--kubernetes-version",
                "1.36"
            ],
            b""
        ),
        format!("{}\n", release.kube_apiserver)
    );
    assert_eq!(
        ok(&["version", "component", "--component", "haproxy"], b""),
        format!("{}\n", versions::INFRA.haproxy)
    );
    let out = oi(
        &[
            "version",
            "component",
            "--component",
            "etcd",
            "--kubernetes-version",
            "1.20",
        ],
        b"",
    );
    assert_eq!(
        stderr(&out),
        format!(
            "error: unsupported Kubernetes version \"1.20\" (supported: default, {})\n",
            versions::supported_versions().join(", ")
        )
    );
}

#[test]
fn completion_scripts() {
    for (shell, marker) in [
        ("bash", "complete -F _oi"),
        ("zsh", "#compdef oi"),
        ("fish", "complete -c oi"),
    ] {
        let script = ok(&["completion", shell], b"");
        assert!(script.contains(marker), "{shell}");
        assert!(script.contains("admin-kubeconfig"), "{shell}");
    }
}

// ---------------------------------------------------------------------------------------------
// output handling

#[test]
fn output_file_may_be_an_input_and_is_replaced_atomically_with_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let world = dir.path().join("world.yaml");
    fs::write(&world, injected("c1", 1)).unwrap();
    fs::set_permissions(&world, fs::Permissions::from_mode(0o644)).unwrap();
    let before = fs::read_to_string(&world).unwrap();
    let out = oi(
        &[
            "join-token",
            "inject",
            "--cluster",
            "c1",
            "-f",
            path_str(&world),
            "-o",
            path_str(&world),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let token = stderr(&out).trim_end().to_string();
    let after = fs::read_to_string(&world).unwrap();
    assert_eq!(
        after.replacen(&format!("  joinTokens:\n  - {token}\n"), "", 1),
        before
    );
    assert_eq!(
        fs::metadata(&world).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let entries: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["world.yaml"], "no temporary file left behind");
}

#[test]
fn closed_stdout_is_not_an_error() {
    // Large enough (many certificates) not to fit in a pipe buffer.
    let world = ok(
        &[
            "cluster",
            "inject",
            "--name",
            "probe",
            "-f",
            path_str(&hypervisors()),
            "-f",
            path_str(&samples_dir().join("10-simple-clusters.yaml")),
        ],
        b"",
    );
    assert!(world.len() > 128 * 1024, "{} bytes", world.len());
    let mut child = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["join-token", "inject", "--cluster", "probe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(world.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stderr(&out), "");
    assert!(out.status.success(), "{:?}", out.status);
}

// ---------------------------------------------------------------------------------------------
// bad input: exact message, non-zero exit, the -o file untouched

struct BadInput {
    name: &'static str,
    args: Vec<String>,
    stdin: String,
    stderr: String,
    exit_code: i32,
}

fn bad(name: &'static str, args: &[&str], stdin: &str, stderr: &str) -> BadInput {
    BadInput {
        name,
        args: args.iter().map(|a| (*a).to_string()).collect(),
        stdin: stdin.to_string(),
        stderr: stderr.to_string(),
        exit_code: 1,
    }
}

const HYPERVISOR_HEAD: &str = "\
apiVersion: infra.oneinfra.ereslibre.es/v1alpha1
kind: Hypervisor
metadata:
  name: h1
spec:
  public: true
  ipAddress: 10.0.0.1
";

#[test]
fn bad_input_is_reported_exactly_and_writes_nothing() {
    let hypervisors = path_str(&hypervisors()).to_string();
    let private_only = fs::read_to_string(hypervisors.as_str())
        .unwrap()
        .split("---\n")
        .filter(|doc| !doc.contains("public: true"))
        .collect::<Vec<_>>()
        .join("---\n");
    let injected = injected("c1", 1);
    let inject = ["cluster", "inject", "--name", "c1"];
    let cases = vec![
        bad(
            "malformed yaml",
            &inject,
            "kind: Hypervisor\nspec: [\n",
            "error: stdin: document 1: malformed yaml at line 3, column 1: while parsing a node, did not find expected node content\n",
        ),
        bad(
            "unknown kind",
            &inject,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            "error: stdin: document 1 (\"x\"): unknown kind \"ConfigMap\" (apiVersion \"v1\"); expected Hypervisor, Cluster, Component, NodeJoinRequest, SIPCluster, BareMetalHost or Secret\n",
        ),
        bad(
            "unknown field",
            &inject,
            &format!("{HYPERVISOR_HEAD}  localCRIEndpoint:\n    criEndpointPath: /run/c.sock\n  portRange:\n    low: 1\n    hihg: 2\n"),
            "error: stdin: document 1: Hypervisor (\"h1\"): field `spec.portRange.hihg`: unknown field `hihg`, expected `low` or `high`\n",
        ),
        bad(
            "both CRI endpoints",
            &inject,
            &format!("{HYPERVISOR_HEAD}  localCRIEndpoint:\n    criEndpointPath: /run/c.sock\n  remoteCRIEndpoint:\n    criEndpointURI: tcp://10.0.0.1:27000\n  portRange:\n    low: 30000\n    high: 30100\n"),
            "error: stdin: document 1: Hypervisor h1: field `spec`: exactly one of localCRIEndpoint and remoteCRIEndpoint must be set, both are\n",
        ),
        bad(
            "inverted port range",
            &inject,
            &format!("{HYPERVISOR_HEAD}  localCRIEndpoint:\n    criEndpointPath: /run/c.sock\n  portRange:\n    low: 30100\n    high: 30000\n"),
            "error: stdin: document 1: Hypervisor h1: field `spec.portRange`: low port 30100 is above high port 30000\n",
        ),
        bad(
            "inverted port range flag",
            &["hypervisor", "inject", "--name", "h1", "--local-cri-endpoint", "/run/c.sock", "--ip-address", "10.0.0.1", "--port-range", "30100-30000"],
            "",
            "error: invalid Hypervisor h1: field `spec.portRange`: low port 30100 is above high port 30000\n",
        ),
        bad(
            "bad vpn cidr flag",
            &["cluster", "inject", "--name", "c1", "--vpn-enabled", "--vpn-cidr", "10.0.0.0/33", "-f", &hypervisors],
            "",
            "error: invalid Cluster default/c1: field `spec.vpn.CIDR`: \"10.0.0.0/33\" is not a CIDR (address/prefix)\n",
        ),
        bad(
            "bad cidr in a manifest",
            &inject,
            "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata:\n  name: c0\nspec:\n  networking:\n    serviceCIDR: 10.96.0.0\n",
            "error: stdin: document 1: Cluster default/c0: field `spec.networking.serviceCIDR`: \"10.96.0.0\" is not a CIDR (address/prefix)\n",
        ),
        bad(
            "duplicate names",
            &["cluster", "inject", "--name", "c1", "-f", &hypervisors, "-f", "-"],
            fs::read_to_string(hypervisors.as_str()).unwrap().split("---\n").next().unwrap(),
            &format!("error: stdin: document 1: Hypervisor private-1: field `metadata.name`: duplicate: already defined by {hypervisors} document 1\n"),
        ),
        bad(
            "no public hypervisor",
            &inject,
            &private_only,
            "error: cluster default/c1 cannot be scheduled: there is no public hypervisor for its ingress\n",
        ),
        bad(
            "existing cluster",
            &inject,
            &injected,
            "error: cluster default/c1 already exists\n",
        ),
        bad(
            "unknown key algorithm",
            &["cluster", "inject", "--name", "c2", "--key-algorithm", "dsa"],
            &injected,
            "error: invalid --key-algorithm: unknown key algorithm \"dsa\" (expected one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096)\n",
        ),
        bad(
            "unreadable input file",
            &["cluster", "inject", "--name", "c2", "-f", "/nonexistent/world.yaml"],
            "",
            "error: cannot read manifests from /nonexistent/world.yaml: No such file or directory (os error 2)\n",
        ),
        BadInput {
            exit_code: 2,
            ..bad(
                "both CRI endpoint flags",
                &["hypervisor", "inject", "--name", "h1", "--local-cri-endpoint", "/run/c.sock", "--remote-cri-endpoint", "tcp://10.0.0.1:27000", "--ip-address", "10.0.0.1"],
                "",
                "\
error: the argument '--local-cri-endpoint <PATH>' cannot be used with '--remote-cri-endpoint <URI>'

Usage: oi hypervisor inject --name <NAME> --ip-address <IP> --output <FILE> <--local-cri-endpoint <PATH>|--remote-cri-endpoint <URI>>

For more information, try '--help'.
",
            )
        },
    ];

    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.yaml");
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    for case in cases {
        fs::write(&target, "previous content\n").unwrap();
        fs::File::options()
            .write(true)
            .open(&target)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let mut args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        args.extend(["-o", path_str(&target)]);
        let out = oi(&args, case.stdin.as_bytes());
        assert_eq!(stderr(&out), case.stderr, "{}", case.name);
        assert_eq!(out.status.code(), Some(case.exit_code), "{}", case.name);
        assert_eq!(stdout(&out), "", "{}", case.name);
        assert_eq!(
            fs::read_to_string(&target).unwrap(),
            "previous content\n",
            "{}",
            case.name
        );
        assert_eq!(
            fs::metadata(&target).unwrap().modified().unwrap(),
            old,
            "{}",
            case.name
        );
        let entries = fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(entries, 1, "{}: no temporary file left behind", case.name);
    }
}

/// Other clusters that cannot be prepared are written back as they were, with a warning; the
/// injected cluster still gets its place.
#[test]
fn other_unprepared_clusters_are_warned_about() {
    let hypervisor = |name: &str, public: bool, high: u32| {
        let ip = if public { "10.0.0.2" } else { "10.0.0.1" };
        format!(
            "apiVersion: infra.oneinfra.ereslibre.es/v1alpha1\nkind: Hypervisor\nmetadata:\n  name: {name}\nspec:\n  localCRIEndpoint:\n    criEndpointPath: /run/{name}.sock\n  public: {public}\n  ipAddress: {ip}\n  portRange:\n    low: 30000\n    high: {high}\n---\n"
        )
    };
    // One private hypervisor with room for one control plane replica (three ports).
    let world = format!(
        "{}{}apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata:\n  name: a\nspec:\n  controlPlaneReplicas: 2\n",
        hypervisor("private-1", false, 30002),
        hypervisor("public-1", true, 30009),
    );
    let out = oi(&["cluster", "inject", "--name", "b"], world.as_bytes());
    assert_eq!(
        stderr(&out),
        "warning: cluster default/a left unprepared: cluster default/a cannot be scheduled: 1 more control-plane component(s) fit on no private hypervisor (private-1: 0 free ports, 3 needed)\n"
    );
    assert!(out.status.success());
    let world = load(&stdout(&out));
    assert_eq!(
        world.clusters[&ObjectKey::new("default", "a")]
            .status
            .api_server_endpoint,
        ""
    );
    assert_eq!(
        world.clusters[&ObjectKey::new("default", "b")]
            .status
            .api_server_endpoint,
        "https://10.0.0.2:30000"
    );
}

/// `oi hypervisor check` on a hypervisor whose runtime does not answer: the report names
/// what failed and what to do, what needs the runtime is not checked, the exit code is 1;
/// an unknown name is an error. (A ready hypervisor, a taken port and missing images, with
/// a real runtime: e2e `hypervisor_join`.)
#[test]
fn hypervisor_check_names_each_failure_and_exits_1() {
    let world = ok(
        &[
            "hypervisor",
            "inject",
            "-f",
            "/dev/null",
            "--name",
            "h1",
            "--ip-address",
            "127.0.0.1",
            "--local-cri-endpoint",
            "/nonexistent/cri.sock",
            "--port-range",
            "1-2",
        ],
        b"",
    );
    let out = oi(&["hypervisor", "check", "--name", "h1"], world.as_bytes());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = stdout(&out);
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines[0], "CHECK     RESULT  DETAIL", "{report}");
    assert!(
        lines[1].starts_with("cri       FAIL    the CRI runtime does not answer: "),
        "{report}"
    );
    assert!(
        lines[1].contains("unix:///nonexistent/cri.sock"),
        "{report}"
    );
    assert!(lines[2].contains("-> start the runtime"), "{report}");
    assert_eq!(
        lines[3], "tls       ok      a local unix socket: no TLS",
        "{report}"
    );
    assert!(
        lines[4].starts_with("images    FAIL    not checked"),
        "{report}"
    );
    assert!(
        lines[6].starts_with("ports     ok      1-2 (2 ports)"),
        "{report}"
    );
    assert!(
        lines[7].starts_with("capacity  warn    none declared"),
        "{report}"
    );
    assert!(
        lines[9].starts_with("kvm       FAIL    not checked"),
        "{report}"
    );
    assert_eq!(
        stderr(&out).trim(),
        "error: hypervisor h1 is not ready: cri, images, kvm failed"
    );
    let out = oi(&["hypervisor", "check", "--name", "h2"], world.as_bytes());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "error: hypervisor h2 not found in the manifests"
    );
}

/// A CRI endpoint that takes connections and never answers: a run over it waits for the
/// connect timeout (5 s), long enough for a live display to draw. Stops when dropped.
struct SilentSocket {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentSocket {
    fn bind(path: &Path) -> SilentSocket {
        let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        SilentSocket {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SilentSocket {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `oi reconcile` with stderr on a terminal shows a live line (the step, clusters done of the
/// run's, the elapsed time), cleared at the end; off a terminal, the plain lines alone, and
/// with `--quiet` nothing but errors.
#[test]
fn a_long_command_shows_a_live_line_on_a_terminal_and_plain_lines_off_one() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cri.sock");
    let _silent = SilentSocket::bind(&socket);
    let socket_text = path_str(&socket);
    let world = ok(
        &[
            "hypervisor",
            "inject",
            "-f",
            "/dev/null",
            "--name",
            "p1",
            "--ip-address",
            "127.0.0.1",
            "--local-cri-endpoint",
            socket_text,
            "--port-range",
            "30000-30010",
        ],
        b"",
    );
    let world = ok(
        &[
            "hypervisor",
            "inject",
            "--name",
            "i1",
            "--public",
            "--ip-address",
            "127.0.0.2",
            "--local-cri-endpoint",
            socket_text,
            "--port-range",
            "30000-30010",
        ],
        world.as_bytes(),
    );
    let world = ok(&["cluster", "inject", "--name", "c1"], world.as_bytes());
    let input = dir.path().join("world.yaml");
    fs::write(&input, &world).unwrap();
    fs::set_permissions(&input, fs::Permissions::from_mode(0o600)).unwrap();
    let args = |out: &str| -> Vec<String> {
        [
            "reconcile",
            "--image-repository",
            "localhost/oneinfra",
            "--max-wait",
            "10s",
            "-f",
            path_str(&input),
            "-o",
            out,
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect()
    };

    // On a terminal (a pseudo-terminal of 120 columns).
    let pty = pty();
    rustix::termios::tcsetwinsize(
        &pty.master,
        rustix::termios::Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .unwrap();
    let slave = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&pty.slave)
        .unwrap();
    let out_path = dir.path().join("out-terminal.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(args(path_str(&out_path)))
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut master = fs::File::from(pty.master.try_clone().unwrap());
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // Ends with EIO once the child, the last holder of the terminal, is gone.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("oi reconcile did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(pty);
    let shown = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("reconcile  0/1 clusters  [00:00:0"),
        "no live line: {shown:?}"
    );
    assert!(shown.contains('\u{1b}'), "no terminal control: {shown:?}");
    assert!(
        shown.contains("reconciled 1 clusters: 0 ready, 1 not ready"),
        "{shown:?}"
    );

    // Off a terminal: the lines only, no control sequences, no live line. (A runtime that
    // is not there at all: the run ends at once.)
    fs::write(&input, world.replace(socket_text, "/nonexistent/cri.sock")).unwrap();
    let out_path = dir.path().join("out-pipe.yaml");
    let args_pipe = args(path_str(&out_path));
    let args_pipe: Vec<&str> = args_pipe.iter().map(String::as_str).collect();
    let piped = oi(&args_pipe, b"");
    assert_eq!(piped.status.code(), Some(1));
    let lines = stderr(&piped);
    assert!(!lines.contains('\u{1b}'), "{lines:?}");
    assert!(!lines.contains("clusters  ["), "{lines:?}");
    assert!(
        lines.contains("reconciled 1 clusters: 0 ready, 1 not ready"),
        "{lines}"
    );

    // Quiet: the error alone.
    let out_path = dir.path().join("out-quiet.yaml");
    let mut args_quiet = args(path_str(&out_path));
    args_quiet.push("--quiet".into());
    let args_quiet: Vec<&str> = args_quiet.iter().map(String::as_str).collect();
    let quiet = oi(&args_quiet, b"");
    assert_eq!(quiet.status.code(), Some(1));
    assert!(!stderr(&quiet).contains("reconciled"), "{}", stderr(&quiet));
}
