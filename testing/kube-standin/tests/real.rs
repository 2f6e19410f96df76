//! The stand-ins against a real etcd (Debian's 3.4) with client mutual TLS, on loopback.
//!
//! Certificates are minted fresh with rcgen. Every child process is killed when its guard
//! drops, so a failing assertion leaves nothing running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;

use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use cluster::*;
use http::StatusCode;
use oi_kube_standin::https::Endpoint;
use oi_kube_standin::tls;
use rcgen::KeyPair;

// ---------------------------------------------------------------- tests

#[test]
fn apiserver_against_real_etcd_with_mutual_tls() {
    if !prerequisites("apiserver_against_real_etcd_with_mutual_tls") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = start_etcd(dir.path());
    let api = start_apiserver(dir.path(), &etcd);
    let rt = runtime();
    let anonymous = client(&api.serving_ca, None);
    let (admin_cert, admin_key) =
        api.client_ca
            .leaf("kubernetes-admin", &["system:masters"], &[], Usage::Client);
    let admin = client(&api.serving_ca, Some((admin_cert, admin_key)));
    let stranger_ca = Ca::new("somebody-else");
    let (stranger_cert, stranger_key) =
        stranger_ca.leaf("kubernetes-admin", &["system:masters"], &[], Usage::Client);
    let stranger = client(&api.serving_ca, Some((stranger_cert, stranger_key)));

    eventually(Duration::from_secs(30), "/readyz 200", || {
        status(&get(&rt, &anonymous, &api.endpoint, "/readyz")) == Some(StatusCode::OK)
    });
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/healthz")),
        Some(StatusCode::OK)
    );
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/livez")),
        Some(StatusCode::OK)
    );

    let version = get(&rt, &anonymous, &api.endpoint, "/version").unwrap();
    assert_eq!(version.status, StatusCode::OK);
    let version: serde_json::Value = serde_json::from_slice(&version.body).unwrap();
    assert_eq!(version["gitVersion"], VERSION);
    assert_eq!(version["major"], "1");
    assert_eq!(version["minor"], "37");

    // Without a client certificate: anonymous, and RBAC lets anonymous see health only.
    let refused = get(&rt, &anonymous, &api.endpoint, "/api").unwrap();
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let refusal: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(
        refusal["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    // With a certificate from the client CA: discovery, and objects stored in etcd.
    eventually(Duration::from_secs(30), "the bootstrap policy", || {
        status(&get(
            &rt,
            &admin,
            &api.endpoint,
            "/api/v1/namespaces/kube-system",
        )) == Some(StatusCode::OK)
    });
    let discovery = get(&rt, &admin, &api.endpoint, "/api").unwrap();
    assert_eq!(discovery.status, StatusCode::OK);
    let discovery: serde_json::Value = serde_json::from_slice(&discovery.body).unwrap();
    assert_eq!(discovery["kind"], "APIVersions");
    let namespaces = get(&rt, &admin, &api.endpoint, "/api/v1/namespaces").unwrap();
    let namespaces: serde_json::Value = serde_json::from_slice(&namespaces.body).unwrap();
    let names: Vec<&str> = namespaces["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    assert_eq!(
        status(&get(&rt, &admin, &api.endpoint, "/api/v1/nothings")),
        Some(StatusCode::NOT_FOUND)
    );
    // A certificate from another CA is no identity: 401 everywhere, health included (as
    // kube-apiserver answers a certificate its x509 authenticator refuses).
    for path in ["/api", "/healthz"] {
        assert_eq!(
            status(&get(&rt, &stranger, &api.endpoint, path)),
            Some(StatusCode::UNAUTHORIZED),
            "{path}"
        );
    }
    // The server certificate is checked by clients too: a client trusting another CA fails.
    let wrong_trust = client(
        &tls::roots_from_pem(stranger_ca.pem().as_bytes(), "other").unwrap(),
        None,
    );
    assert!(get(&rt, &wrong_trust, &api.endpoint, "/healthz").is_err());

    // The key the stand-in writes, and the objects it stores, are in etcd, as etcdctl sees it.
    let key = format!("/registry/standin/127.0.0.1:{}", api.port);
    if oi_testsupport::require(
        "apiserver_against_real_etcd_with_mutual_tls (etcdctl part)",
        "command `etcdctl` (Debian etcd-client)",
        oi_testsupport::have_command("etcdctl"),
    ) {
        let output = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", etcd.url))
            .arg(format!("--cacert={}", etcd.ca.display()))
            .arg(format!("--cert={}", etcd.client_cert.display()))
            .arg(format!("--key={}", etcd.client_key.display()))
            .args(["get", &key, "--print-value-only"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("\"standin\":\"kube-apiserver\""),
            "etcdctl get {key}: {:?} {stdout} {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let output = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", etcd.url))
            .arg(format!("--cacert={}", etcd.ca.display()))
            .arg(format!("--cert={}", etcd.client_cert.display()))
            .arg(format!("--key={}", etcd.client_key.display()))
            .args([
                "get",
                "/registry/core/namespaces/kube-system",
                "--print-value-only",
            ])
            .output()
            .unwrap();
        let stored: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        assert_eq!(
            stored["metadata"]["name"],
            "kube-system",
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let log = api.proc.log();
    assert!(
        log.contains("etcd ok"),
        "no etcd success in the log:\n{log}"
    );
    assert!(log.contains("bootstrap done"), "{log}");
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");

    // etcd gone: /readyz turns 500 and says why; /livez stays 200.
    etcd.proc.as_mut().unwrap().kill();
    eventually(
        Duration::from_secs(20),
        "/readyz 500 after etcd died",
        || {
            status(&get(&rt, &anonymous, &api.endpoint, "/readyz"))
                == Some(StatusCode::INTERNAL_SERVER_ERROR)
        },
    );
    let readyz = get(&rt, &anonymous, &api.endpoint, "/readyz").unwrap();
    let body = String::from_utf8_lossy(&readyz.body);
    assert!(body.contains("[-]etcd failed"), "{body}");
    assert_eq!(
        status(&get(&rt, &anonymous, &api.endpoint, "/livez")),
        Some(StatusCode::OK)
    );

    // SIGTERM: a clean exit.
    let mut api = api;
    terminate(&api.proc);
    let exited = api.proc.wait_exit(Duration::from_secs(10));
    assert!(
        exited.is_some_and(|s| s.success()),
        "SIGTERM did not end the API server cleanly: {exited:?}"
    );
}

fn terminate(proc: &Proc) {
    let status = Command::new("kill")
        .args(["-TERM", &proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn apiserver_refuses_anonymous_health_checks_when_anonymous_auth_is_off() {
    if !prerequisites("apiserver_refuses_anonymous_health_checks_when_anonymous_auth_is_off") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(dir.path());
    let port = oi_testsupport::free_loopback_port();
    let (args, client_ca, serving_ca_pem) = apiserver_args(dir.path(), &etcd, port);
    let mut command = standin_as(dir.path(), "kube-apiserver");
    command.args(&args).arg("--anonymous-auth=false");
    let _api = Proc::spawn("kube-apiserver", command, dir.path());
    let roots = tls::roots_from_pem(serving_ca_pem.as_bytes(), "serving CA").unwrap();
    let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{port}")).unwrap();
    let rt = runtime();
    let (cert, key) = client_ca.leaf("probe", &[], &[], Usage::Client);
    let admin = client(&roots, Some((cert, key)));
    eventually(
        Duration::from_secs(30),
        "/readyz 200 with a client cert",
        || status(&get(&rt, &admin, &endpoint, "/readyz")) == Some(StatusCode::OK),
    );
    let anonymous = client(&roots, None);
    for path in ["/healthz", "/readyz", "/livez", "/version"] {
        assert_eq!(
            status(&get(&rt, &anonymous, &endpoint, path)),
            Some(StatusCode::UNAUTHORIZED),
            "{path}"
        );
    }
}

fn kubeconfig(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: user\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: ctx\n  context:\n    cluster: cluster\n    user: user\ncurrent-context: ctx\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem)
    )
}

#[test]
fn controller_stand_ins_check_their_kubeconfig_credentials() {
    if !prerequisites("controller_stand_ins_check_their_kubeconfig_credentials") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = start_etcd(d);
    let port = oi_testsupport::free_loopback_port();
    let (args, client_ca, serving_ca_pem) = apiserver_args(d, &etcd, port);
    let mut command = standin_as(d, "kube-apiserver");
    command.args(&args);
    let _api = Proc::spawn("kube-apiserver", command, d);
    let server = format!("https://127.0.0.1:{port}");

    let (cm_cert, cm_key) =
        client_ca.leaf("system:kube-controller-manager", &[], &[], Usage::Client);
    let good = write(
        d,
        "controller-manager.kubeconfig",
        &kubeconfig(&server, &serving_ca_pem, &cm_cert, &cm_key),
    );
    let (sched_cert, sched_key) = client_ca.leaf("system:kube-scheduler", &[], &[], Usage::Client);
    let scheduler_kubeconfig = write(
        d,
        "scheduler.kubeconfig",
        &kubeconfig(&server, &serving_ca_pem, &sched_cert, &sched_key),
    );
    let other_ca = Ca::new("not-the-client-ca");
    let (bad_cert, bad_key) =
        other_ca.leaf("system:kube-controller-manager", &[], &[], Usage::Client);
    let bad = write(
        d,
        "bad.kubeconfig",
        &kubeconfig(&server, &serving_ca_pem, &bad_cert, &bad_key),
    );

    // Controller-manager files: a signing CA with its key, a root CA, a service-account key.
    let signing = Ca::new("cluster-signing-ca");
    let signing_key_pem = signing.issuer.key().serialize_pem();
    let signing_cert = write(d, "cluster-signing-ca.crt", &signing.pem());
    let signing_key = write(d, "cluster-signing-ca.key", &signing_key_pem);
    let sa = KeyPair::generate().unwrap();
    let sa_key = write(d, "sa-cm.key", &sa.serialize_pem());
    let root_ca = write(d, "root-ca.crt", &serving_ca_pem);
    let healthz_ca = Ca::new("healthz-ca");
    let (healthz_cert, healthz_key) = healthz_ca.leaf(
        "kube-controller-manager",
        &[],
        &["127.0.0.1"],
        Usage::Server,
    );
    let healthz_cert = write(d, "cm-serving.crt", &healthz_cert);
    let healthz_key = write(d, "cm-serving.key", &healthz_key);
    let cm_port = oi_testsupport::free_loopback_port();

    let mut command = standin_as(d, "kube-controller-manager");
    command.env("KUBE_STANDIN_GRACE_SECONDS", "30").args([
        "--kubeconfig".to_string(),
        good.display().to_string(),
        format!("--authentication-kubeconfig={}", good.display()),
        format!("--authorization-kubeconfig={}", good.display()),
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={cm_port}"),
        format!("--tls-cert-file={}", healthz_cert.display()),
        format!("--tls-private-key-file={}", healthz_key.display()),
        "--leader-elect=false".to_string(),
        "--controllers=*,bootstrapsigner,tokencleaner".to_string(),
        format!("--cluster-signing-cert-file={}", signing_cert.display()),
        format!("--cluster-signing-key-file={}", signing_key.display()),
        format!("--root-ca-file={}", root_ca.display()),
        format!("--service-account-private-key-file={}", sa_key.display()),
        "--use-service-account-credentials=true".to_string(),
        "--allocate-node-cidrs".to_string(),
        "--cluster-cidr=10.244.0.0/16".to_string(),
        "--service-cluster-ip-range=10.96.0.0/12".to_string(),
    ]);
    let mut controller_manager = Proc::spawn("kube-controller-manager", command, d);

    let mut command = standin_as(d, "kube-scheduler");
    command.env("KUBE_STANDIN_GRACE_SECONDS", "30").args([
        format!("--kubeconfig={}", scheduler_kubeconfig.display()),
        "--bind-address=127.0.0.1".to_string(),
        "--secure-port=0".to_string(),
        "--leader-elect".to_string(),
    ]);
    let mut scheduler = Proc::spawn("kube-scheduler", command, d);

    let mut command = standin_as(d, "kube-controller-manager");
    command.env("KUBE_STANDIN_GRACE_SECONDS", "3").args([
        format!("--kubeconfig={}", bad.display()),
        "--secure-port=0".to_string(),
    ]);
    let mut wrong_ca = Proc::spawn("kube-controller-manager-wrong-ca", command, d);

    // The one whose client certificate comes from the wrong CA gives up after its grace period.
    let exited = wrong_ca.wait_exit(Duration::from_secs(30));
    assert!(
        exited.is_some_and(|s| !s.success()),
        "the wrong-CA controller-manager did not exit non-zero: {exited:?}\n{}",
        wrong_ca.log()
    );
    assert!(
        wrong_ca
            .log()
            .contains("no successful check of the API server"),
        "{}",
        wrong_ca.log()
    );

    // The good ones reached the API server with their certificates and are still up.
    for proc in [&mut controller_manager, &mut scheduler] {
        let name = proc.name.clone();
        eventually(
            Duration::from_secs(30),
            "a successful API server check",
            || proc.log().contains("/version v1.37.1, /api ok"),
        );
        assert!(
            proc.child.try_wait().unwrap().is_none(),
            "{name} exited:\n{}",
            proc.log()
        );
    }
    let log = controller_manager.log();
    assert!(
        log.contains("cluster signing certificate") && log.contains("match"),
        "{log}"
    );

    // The controller-manager serves /healthz with the certificate it was given.
    let rt = runtime();
    let roots = tls::roots_from_pem(healthz_ca.pem().as_bytes(), "healthz CA").unwrap();
    let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{cm_port}")).unwrap();
    let healthz = get(&rt, &client(&roots, None), &endpoint, "/healthz").unwrap();
    assert_eq!(healthz.status, StatusCode::OK);

    // SIGTERM: a clean exit.
    terminate(&controller_manager);
    let exited = controller_manager.wait_exit(Duration::from_secs(10));
    assert!(
        exited.is_some_and(|s| s.success()),
        "SIGTERM did not end the controller-manager cleanly: {exited:?}"
    );
}

#[test]
fn apiserver_exits_1_when_a_key_does_not_match_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let etcd = etcd_client_files(d);
    let other = Ca::new("other");

    // The serving key replaced by another key.
    let (args, _, _) = apiserver_args(d, &etcd, oi_testsupport::free_loopback_port());
    let (_, wrong_key) = other.leaf("x", &[], &[], Usage::Server);
    write(d, "apiserver.key", &wrong_key);
    let output = standin_as(d, "kube-apiserver")
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--tls-cert-file and --tls-private-key-file")
            && stderr.contains("does not match"),
        "{stderr}"
    );

    // A proxy client certificate with somebody else's key.
    let (args, _, _) = apiserver_args(d, &etcd, oi_testsupport::free_loopback_port());
    let (proxy_cert, _) = other.leaf("front-proxy-client", &[], &[], Usage::Client);
    let (_, proxy_key) = other.leaf("front-proxy-client", &[], &[], Usage::Client);
    let proxy_cert = write(d, "front-proxy-client.crt", &proxy_cert);
    let proxy_key = write(d, "front-proxy-client.key", &proxy_key);
    let output = standin_as(d, "kube-apiserver")
        .args(&args)
        .arg(format!("--proxy-client-cert-file={}", proxy_cert.display()))
        .arg(format!("--proxy-client-key-file={}", proxy_key.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--proxy-client-cert-file and its key"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("PRIVATE KEY"),
        "key material in the output"
    );

    // Half a pair is refused by flag validation.
    let (args, _, _) = apiserver_args(d, &etcd, oi_testsupport::free_loopback_port());
    let output = standin_as(d, "kube-apiserver")
        .args(&args)
        .arg(format!(
            "--kubelet-client-certificate={}",
            proxy_cert.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("requires --kubelet-client-key"), "{stderr}");
}
