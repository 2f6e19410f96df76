//! Chains minted by oi-pki, checked by an independent implementation: `openssl verify`.
//! Gated on /usr/bin/openssl through `oi_testsupport::require`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::process::Command;

use oi_pki::{
    CaKind, CertificateAuthority, ClusterPki, Error, KeyAlgorithm, LeafSpec, Usage, kubeconfig,
};
use time::{Duration, OffsetDateTime};

const OPENSSL: &str = "/usr/bin/openssl";

fn have_openssl(test: &str) -> bool {
    oi_testsupport::require(test, "/usr/bin/openssl", Path::new(OPENSSL).is_file())
}

/// Runs `openssl verify -x509_strict -CAfile ca leaf` plus `extra` arguments; returns whether
/// it succeeded and what it said.
fn verify(ca_pem: &str, leaf_pem: &str, extra: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let leaf = dir.path().join("leaf.pem");
    fs::write(&ca, ca_pem).unwrap();
    fs::write(&leaf, leaf_pem).unwrap();
    let out = Command::new(OPENSSL)
        .arg("verify")
        .arg("-x509_strict")
        .arg("-CAfile")
        .arg(&ca)
        .args(extra)
        .arg(&leaf)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn purposes(usage: Usage) -> &'static [&'static str] {
    match usage {
        Usage::Server => &["sslserver"],
        Usage::Client => &["sslclient"],
        Usage::ServerAndClient => &["sslserver", "sslclient"],
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

const YEAR: Duration = Duration::days(365);

fn all_roles() -> Vec<(&'static str, LeafSpec)> {
    vec![
        (
            "kube-apiserver",
            LeafSpec::kube_apiserver(
                "cluster.local",
                "10.96.0.0/12",
                &["192.168.1.10", "ingress.example.com"],
                &["api.example.com"],
            )
            .unwrap(),
        ),
        (
            "apiserver-kubelet-client",
            LeafSpec::apiserver_kubelet_client(),
        ),
        ("apiserver-etcd-client", LeafSpec::apiserver_etcd_client()),
        ("controller-manager", LeafSpec::controller_manager()),
        ("scheduler", LeafSpec::scheduler()),
        ("admin", LeafSpec::admin()),
        (
            "etcd-server",
            LeafSpec::etcd_server("c1-etcd-0", &["10.0.0.2"]).unwrap(),
        ),
        (
            "etcd-peer",
            LeafSpec::etcd_peer("c1-etcd-0", &["10.0.0.2"]).unwrap(),
        ),
        (
            "kubelet-serving",
            LeafSpec::kubelet_serving("node-a", &["10.0.0.9"]).unwrap(),
        ),
        (
            "generic client",
            LeafSpec::client(
                CaKind::CertificateSigner,
                "system:node:node-a",
                &["system:nodes", "oneinfra:joined"],
            ),
        ),
    ]
}

#[test]
fn every_role_verifies_with_its_ca_and_only_with_it() {
    if !have_openssl("every_role_verifies_with_its_ca_and_only_with_it") {
        return;
    }
    let now = now();
    let pki = ClusterPki::generate("c1", KeyAlgorithm::EcdsaP256, now, 10 * YEAR).unwrap();
    // Same cluster name, hence CAs with the very same subjects, but other keys: only the
    // signature can tell them apart.
    let impostor = ClusterPki::generate("c1", KeyAlgorithm::EcdsaP256, now, 10 * YEAR).unwrap();

    for (role, spec) in all_roles() {
        let leaf = pki.issue(&spec, now, YEAR).unwrap();
        let ca = pki.ca(spec.issuer).certificate_pem();
        for purpose in purposes(spec.usage) {
            let (ok, out) = verify(ca, &leaf.certificate_pem, &["-purpose", purpose]);
            assert!(ok, "{role} ({purpose}) should verify: {out}");
        }
        let (ok, out) = verify(
            impostor.ca(spec.issuer).certificate_pem(),
            &leaf.certificate_pem,
            &[],
        );
        assert!(
            !ok,
            "{role} verified against another CA of the same name: {out}"
        );
        for other in CaKind::ALL.into_iter().filter(|k| *k != spec.issuer) {
            let (ok, out) = verify(pki.ca(other).certificate_pem(), &leaf.certificate_pem, &[]);
            assert!(!ok, "{role} verified against {other}: {out}");
        }
        // The extended key usage really restricts: a server-only certificate is no client.
        match spec.usage {
            Usage::Server => {
                let (ok, _) = verify(ca, &leaf.certificate_pem, &["-purpose", "sslclient"]);
                assert!(!ok, "{role} is server-only but verified as a client");
            }
            Usage::Client => {
                let (ok, _) = verify(ca, &leaf.certificate_pem, &["-purpose", "sslserver"]);
                assert!(!ok, "{role} is client-only but verified as a server");
            }
            Usage::ServerAndClient => {}
        }
    }
}

#[test]
fn every_key_algorithm_mints_a_verifiable_chain() {
    if !have_openssl("every_key_algorithm_mints_a_verifiable_chain") {
        return;
    }
    let now = now();
    let spec = LeafSpec::etcd_server("m0", &["10.0.0.3"]).unwrap();
    for algorithm in KeyAlgorithm::ALL {
        let ca = CertificateAuthority::generate("algo-ca", algorithm, now, YEAR).unwrap();
        assert_eq!(ca.algorithm(), algorithm);
        let leaf = ca.issue(&spec, now, YEAR).unwrap();
        let (ok, out) = verify(
            ca.certificate_pem(),
            &leaf.certificate_pem,
            &["-purpose", "sslserver", "-verify_ip", "10.0.0.3"],
        );
        assert!(ok, "{algorithm}: {out}");
        let leaf_key = oi_pki::KeyPairPem::from_private_key_pem("leaf", &leaf.private_key_pem)
            .unwrap()
            .algorithm()
            .unwrap();
        assert_eq!(leaf_key, algorithm, "the leaf key follows the CA");
    }
    // A leaf may ask for another algorithm than its CA's.
    let ca = CertificateAuthority::generate("rsa-ca", KeyAlgorithm::Rsa2048, now, YEAR).unwrap();
    let leaf = ca
        .issue(
            &LeafSpec::admin().with_key_algorithm(KeyAlgorithm::EcdsaP384),
            now,
            YEAR,
        )
        .unwrap();
    let (ok, out) = verify(
        ca.certificate_pem(),
        &leaf.certificate_pem,
        &["-purpose", "sslclient"],
    );
    assert!(ok, "{out}");
}

#[test]
fn apiserver_names_verify_including_defaults_next_to_extra_sans() {
    if !have_openssl("apiserver_names_verify_including_defaults_next_to_extra_sans") {
        return;
    }
    let now = now();
    let pki = ClusterPki::generate("c2", KeyAlgorithm::EcdsaP256, now, YEAR).unwrap();
    let spec = LeafSpec::kube_apiserver(
        "corp.internal",
        "172.20.0.0/16",
        &["192.168.50.4"],
        &["api.example.com", "203.0.113.7"],
    )
    .unwrap();
    let leaf = pki.issue(&spec, now, YEAR).unwrap();
    let ca = pki.api_server.certificate_pem();
    for name in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.corp.internal",
        "localhost",
        "api.example.com",
    ] {
        let (ok, out) = verify(ca, &leaf.certificate_pem, &["-verify_hostname", name]);
        assert!(ok, "{name}: {out}");
    }
    for ip in ["127.0.0.1", "172.20.0.1", "192.168.50.4", "203.0.113.7"] {
        let (ok, out) = verify(ca, &leaf.certificate_pem, &["-verify_ip", ip]);
        assert!(ok, "{ip}: {out}");
    }
    let (ok, _) = verify(
        ca,
        &leaf.certificate_pem,
        &["-verify_hostname", "evil.example.com"],
    );
    assert!(!ok, "a name outside the SANs verified");
    let (ok, _) = verify(ca, &leaf.certificate_pem, &["-verify_ip", "10.96.0.1"]);
    assert!(!ok, "the default service IP is not this cluster's");
}

#[test]
fn ca_loaded_from_pem_keeps_signing() {
    if !have_openssl("ca_loaded_from_pem_keeps_signing") {
        return;
    }
    let now = now();
    let original =
        CertificateAuthority::generate("stored-ca", KeyAlgorithm::EcdsaP384, now, YEAR).unwrap();
    let loaded = CaKind::EtcdPeer
        .load(original.certificate_pem(), original.private_key_pem())
        .unwrap();
    assert_eq!(loaded, original);
    let leaf = loaded
        .issue(
            &LeafSpec::etcd_peer("m1", &["10.0.0.4"]).unwrap(),
            now,
            YEAR,
        )
        .unwrap();
    let (ok, out) = verify(original.certificate_pem(), &leaf.certificate_pem, &[]);
    assert!(ok, "{out}");
}

/// A CA made by another tool, shaped like the original oneinfra's (PKCS#1 RSA key, a subject
/// with country, province, locality, street and postal code), and an EC one in PKCS#8, loads
/// and signs.
#[test]
fn ca_made_by_openssl_loads_and_signs() {
    if !have_openssl("ca_made_by_openssl_loads_and_signs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ca.cnf");
    fs::write(
        &config,
        "[req]\ndistinguished_name = dn\nx509_extensions = v3_ca\nprompt = no\n\
         [dn]\nC = ES\nST = Some Province\nL = Some Locality\n\
         street = Some StreetAddress\npostalCode = Some PostalCode\nO = Some Company\n\
         CN = foreign-ca\n\
         [v3_ca]\nbasicConstraints = critical,CA:TRUE\n\
         keyUsage = critical,keyCertSign,cRLSign,digitalSignature\n\
         subjectKeyIdentifier = hash\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(OPENSSL)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["genrsa", "-traditional", "-out", "rsa.key", "2048"]);
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "ec.key",
    ]);
    let now = now();
    for (key, expected) in [
        ("rsa.key", KeyAlgorithm::Rsa2048),
        ("ec.key", KeyAlgorithm::EcdsaP256),
    ] {
        run(&[
            "req", "-x509", "-new", "-config", "ca.cnf", "-key", key, "-days", "30", "-out",
            "ca.crt",
        ]);
        let key_pem = fs::read_to_string(dir.path().join(key)).unwrap();
        let cert_pem = fs::read_to_string(dir.path().join("ca.crt")).unwrap();
        if key == "rsa.key" {
            assert!(key_pem.contains("BEGIN RSA PRIVATE KEY"), "{key} is PKCS#1");
        }
        let ca = CaKind::ApiServer.load(&cert_pem, &key_pem).unwrap();
        assert_eq!(ca.algorithm(), expected);
        assert_eq!(ca.common_name(), "foreign-ca");
        let spec =
            LeafSpec::kube_apiserver("cluster.local", "10.96.0.0/12", &["10.1.1.1"], &[""; 0])
                .unwrap();
        let leaf = ca.issue(&spec, now, Duration::days(7)).unwrap();
        let (ok, out) = verify(&cert_pem, &leaf.certificate_pem, &["-purpose", "sslserver"]);
        assert!(ok, "{key}: {out}");
        assert!(oi_pki::is_signed_by(&leaf.certificate_pem, &cert_pem).unwrap());
    }
    // The certificate with the other key is refused, naming the field.
    let cert_pem = fs::read_to_string(dir.path().join("ca.crt")).unwrap();
    let rsa_pem = fs::read_to_string(dir.path().join("rsa.key")).unwrap();
    let err = CaKind::EtcdClient.load(&cert_pem, &rsa_pem).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.certificateAuthorities.etcdClient",
        "{err:?}"
    );
    assert!(
        matches!(&err, Error::Field { source, .. } if matches!(**source, Error::KeyMismatch { .. })),
        "{err:?}"
    );
}

#[test]
fn validity_window_follows_now() {
    if !have_openssl("validity_window_follows_now") {
        return;
    }
    // Far from the real clock, so only `now` can explain the result.
    let now = time::macros::datetime!(2031-03-04 05:06:07 UTC);
    let ca = CertificateAuthority::generate("time-ca", KeyAlgorithm::EcdsaP256, now, YEAR).unwrap();
    let leaf = ca
        .issue(&LeafSpec::scheduler(), now, Duration::days(30))
        .unwrap();
    let at = |t: OffsetDateTime| t.unix_timestamp().to_string();
    let check = |t: OffsetDateTime| {
        verify(
            ca.certificate_pem(),
            &leaf.certificate_pem,
            &["-attime", &at(t)],
        )
        .0
    };
    assert!(check(now), "valid at now");
    assert!(
        check(now - Duration::minutes(4)),
        "valid a little before now (clock skew)"
    );
    assert!(
        !check(now - Duration::minutes(6)),
        "not valid well before now"
    );
    assert!(check(now + Duration::days(29)), "valid within its lifetime");
    assert!(
        !check(now + Duration::days(31)),
        "expired after its lifetime"
    );
    assert!(
        !check(OffsetDateTime::now_utc()),
        "not valid at the real current time"
    );
}

#[test]
fn kubeconfig_embeds_a_verifiable_client_certificate() {
    if !have_openssl("kubeconfig_embeds_a_verifiable_client_certificate") {
        return;
    }
    use base64::Engine as _;
    let now = now();
    let pki = ClusterPki::generate("c3", KeyAlgorithm::EcdsaP256, now, YEAR).unwrap();
    let admin = pki.issue(&LeafSpec::admin(), now, YEAR).unwrap();
    let rendered = kubeconfig(
        "c3",
        "https://127.0.0.1:30443",
        pki.api_server.certificate_pem(),
        "kubernetes-admin",
        &admin.certificate_pem,
        &admin.private_key_pem,
    )
    .unwrap();
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rendered).unwrap();
    let data = |v: &serde_yaml_ng::Value| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let ca = data(&doc["clusters"][0]["cluster"]["certificate-authority-data"]);
    let cert = data(&doc["users"][0]["user"]["client-certificate-data"]);
    let key = data(&doc["users"][0]["user"]["client-key-data"]);
    assert_eq!(ca, pki.api_server.certificate_pem());
    assert_eq!(key, admin.private_key_pem);
    // The client certificate is checked by the API server against the client CA.
    let (ok, out) = verify(
        pki.api_server_client.certificate_pem(),
        &cert,
        &["-purpose", "sslclient"],
    );
    assert!(ok, "{out}");
}

/// Join-key wrapping is RSA-OAEP with SHA-256 for both the hash and MGF1, as Go's
/// `rsa.EncryptOAEP(sha256.New(), ..)` in oneinfra: openssl decrypts ours and we decrypt its.
#[test]
fn join_key_wrapping_interoperates_with_openssl_oaep_sha256() {
    if !have_openssl("join_key_wrapping_interoperates_with_openssl_oaep_sha256") {
        return;
    }
    use base64::Engine as _;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    let dir = tempfile::tempdir().unwrap();
    let join = oi_pki::KeyPairPem::generate(KeyAlgorithm::Rsa2048).unwrap();
    let key_path = dir.path().join("join.key");
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key_path)
        .unwrap()
        .write_all(join.private_key_pem.as_bytes())
        .unwrap();
    fs::write(dir.path().join("join.pub"), &join.public_key_pem).unwrap();
    let oaep = [
        "-pkeyopt",
        "rsa_padding_mode:oaep",
        "-pkeyopt",
        "rsa_oaep_md:sha256",
        "-pkeyopt",
        "rsa_mgf1_md:sha256",
    ];
    let pkeyutl = |args: &[&str]| {
        let out = Command::new(OPENSSL)
            .arg("pkeyutl")
            .args(args)
            .args(oaep)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl pkeyutl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    let symmetric = oi_pki::SymmetricKey::generate();
    let wrapped = symmetric.wrap(&join.public_key_pem).unwrap();
    fs::write(
        dir.path().join("wrapped.bin"),
        b64.decode(&wrapped).unwrap(),
    )
    .unwrap();
    pkeyutl(&[
        "-decrypt",
        "-inkey",
        "join.key",
        "-in",
        "wrapped.bin",
        "-out",
        "plain.bin",
    ]);
    assert_eq!(
        fs::read(dir.path().join("plain.bin")).unwrap(),
        symmetric.as_bytes()
    );

    fs::write(
        dir.path().join("message.bin"),
        b"0123456789abcdef0123456789abcdef",
    )
    .unwrap();
    pkeyutl(&[
        "-encrypt",
        "-pubin",
        "-inkey",
        "join.pub",
        "-in",
        "message.bin",
        "-out",
        "theirs.bin",
    ]);
    let theirs = b64.encode(fs::read(dir.path().join("theirs.bin")).unwrap());
    let unwrapped = oi_pki::SymmetricKey::unwrap_with(&join.private_key_pem, &theirs).unwrap();
    assert_eq!(unwrapped.as_bytes(), b"0123456789abcdef0123456789abcdef");
}

/// ECDSA join keys wrap with ECIES (ECDH, HKDF-SHA256, AES-256-GCM). Everything but AES-GCM
/// is done by openssl here: it reads our PEM files, derives the same ECDH secret from either
/// side, and its HKDF gives the key that opens our ciphertexts and seals ones we open.
#[test]
fn ecies_join_keys_interoperate_with_openssl_ecdh_and_hkdf() {
    if !have_openssl("ecies_join_keys_interoperate_with_openssl_ecdh_and_hkdf") {
        return;
    }
    use base64::Engine as _;
    use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;

    for (algorithm, curve, point_len, scheme) in [
        (KeyAlgorithm::EcdsaP256, "P-256", 65, oi_pki::ECIES_P256_V1),
        (KeyAlgorithm::EcdsaP384, "P-384", 97, oi_pki::ECIES_P384_V1),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let openssl = |args: &[&str]| -> Vec<u8> {
            let out = Command::new(OPENSSL)
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        let derive = |private: &str, peer: &str| {
            openssl(&["pkeyutl", "-derive", "-inkey", private, "-peerkey", peer])
        };
        let hkdf = |secret: &[u8], salt: &[u8]| -> LessSafeKey {
            let okm = openssl(&[
                "kdf",
                "-keylen",
                "32",
                "-kdfopt",
                "digest:SHA256",
                "-kdfopt",
                &format!("hexkey:{}", hex::encode(secret)),
                "-kdfopt",
                &format!("hexsalt:{}", hex::encode(salt)),
                "-kdfopt",
                "info:oneinfra join v1",
                "-binary",
                "HKDF",
            ]);
            assert_eq!(okm.len(), 32);
            LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &okm).unwrap())
        };
        // SubjectPublicKeyInfo of an EC key ends with the uncompressed point.
        let point_of = |public_pem: &[u8]| -> Vec<u8> {
            let der = pem::parse(public_pem).unwrap().into_contents();
            let point = der[der.len() - point_len..].to_vec();
            assert_eq!(point[0], 0x04, "{curve}: uncompressed point");
            point
        };

        let join = oi_pki::KeyPairPem::generate(algorithm).unwrap();
        write_private(&path("join.key"), &join.private_key_pem);
        fs::write(path("join.pub"), &join.public_key_pem).unwrap();
        // openssl's own key pair plays the other side.
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            &format!("ec_paramgen_curve:{curve}"),
            "-out",
            "peer.key",
        ]);
        openssl(&["pkey", "-in", "peer.key", "-pubout", "-out", "peer.pub"]);
        let peer_pub = fs::read(path("peer.pub")).unwrap();
        let peer_point = point_of(&peer_pub);
        let join_point = point_of(join.public_key_pem.as_bytes());

        // Our private and public PEM files are standard: both ECDH directions agree.
        let shared = derive("join.key", "peer.pub");
        assert_eq!(shared.len(), (point_len - 1) / 2, "{curve}: x-coordinate");
        assert_eq!(shared, derive("peer.key", "join.pub"), "{curve}");

        // openssl as the sender (its key as the ephemeral one): we open.
        let key = hkdf(&shared, &[peer_point.as_slice(), &join_point].concat());
        let nonce = [7u8; 12];
        let mut sealed = b"symmetric key from openssl".to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::empty(),
            &mut sealed,
        )
        .unwrap();
        let ciphertext = [&[scheme][..], &peer_point, &nonce, &sealed].concat();
        assert_eq!(
            oi_pki::decrypt_with_join_key(&join.private_key_pem, &b64.encode(&ciphertext)).unwrap(),
            b"symmetric key from openssl",
            "{curve}"
        );

        // We as the sender to openssl's key: openssl derives the key that opens it.
        let peer_pub_pem = String::from_utf8(peer_pub.clone()).unwrap();
        let wrapped = oi_pki::encrypt_to_join_key(&peer_pub_pem, b"symmetric key from us").unwrap();
        let bytes = b64.decode(&wrapped).unwrap();
        assert_eq!(bytes[0], scheme, "{curve}");
        let (ephemeral_point, rest) = bytes[1..].split_at(point_len);
        let (nonce, sealed) = rest.split_at(12);
        // The ephemeral public key as a PEM file: openssl's SPKI with its point swapped.
        let mut spki = pem::parse(&peer_pub).unwrap().into_contents();
        let at = spki.len() - point_len;
        spki[at..].copy_from_slice(ephemeral_point);
        fs::write(
            path("ephemeral.pub"),
            pem::encode(&pem::Pem::new("PUBLIC KEY", spki)),
        )
        .unwrap();
        let shared = derive("peer.key", "ephemeral.pub");
        let key = hkdf(&shared, &[ephemeral_point, &peer_point].concat());
        let mut in_out = sealed.to_vec();
        let plaintext = key
            .open_in_place(
                Nonce::try_assume_unique_for_key(nonce).unwrap(),
                Aad::empty(),
                &mut in_out,
            )
            .unwrap();
        assert_eq!(plaintext, b"symmetric key from us", "{curve}");
    }
}

/// Writes a private key file readable by its owner only.
fn write_private(path: &Path, pem_text: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap()
        .write_all(pem_text.as_bytes())
        .unwrap();
}

#[test]
fn a_cross_signed_ca_lets_clients_of_the_old_ca_trust_the_new_ones_leaves() {
    if !have_openssl("a_cross_signed_ca_lets_clients_of_the_old_ca_trust_the_new_ones_leaves") {
        return;
    }
    for algorithm in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::Rsa2048] {
        let old = CertificateAuthority::generate("c-apiserver-ca", algorithm, now(), YEAR).unwrap();
        let new = CertificateAuthority::generate("c-apiserver-ca-2", algorithm, now(), YEAR * 10)
            .unwrap();
        let cross = old.cross_sign(&new, now()).unwrap();
        let leaf = new
            .issue(
                &LeafSpec::kube_apiserver(
                    "cluster.local",
                    "10.96.0.0/12",
                    &["10.0.0.1"],
                    &[] as &[&str],
                )
                .unwrap(),
                now(),
                YEAR,
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let chain = dir.path().join("chain.pem");
        fs::write(&chain, &cross).unwrap();
        let chain = chain.to_str().unwrap();
        // A client of the old CA, given the chain the server presents.
        let (ok, said) = verify(
            old.certificate_pem(),
            &leaf.certificate_pem,
            &["-untrusted", chain, "-purpose", "sslserver"],
        );
        assert!(ok, "{algorithm:?}: {said}");
        // Without the cross-signed certificate it cannot.
        let (ok, _) = verify(old.certificate_pem(), &leaf.certificate_pem, &[]);
        assert!(!ok);
        // A client of the new CA, with or without it.
        for extra in [&["-untrusted", chain][..], &[][..]] {
            let (ok, said) = verify(new.certificate_pem(), &leaf.certificate_pem, extra);
            assert!(ok, "{algorithm:?}: {said}");
        }
        // The cross-signed certificate is the new CA's name and key, issued by the old one.
        assert!(oi_pki::is_signed_by(&cross, old.certificate_pem()).unwrap());
        let info = oi_pki::inspect_certificate(&cross).unwrap();
        assert!(info.is_ca);
        assert_eq!(info.common_name.as_deref(), Some("c-apiserver-ca-2"));
        assert!(info.not_after <= old.not_after());
    }
}
