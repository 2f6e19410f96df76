//! Command-line parsing and validation: the library, and the built binary's exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use oi_kube_standin::Role;
use oi_kube_standin::config::{self, ConfigError};
use oi_kube_standin::flags::{FlagError, Flags, Parsed, parse, table};

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn run(role: Role, a: &[&str]) -> Result<Flags, FlagError> {
    match parse(role.command(), &table(role), &args(a))? {
        Parsed::Run(flags) => Ok(flags),
        other => panic!("expected flags, got {other:?}"),
    }
}

#[test]
fn equals_and_space_forms_are_the_same() {
    let a = run(Role::ApiServer, &["--secure-port=6443", "--etcd-prefix=/x"]).unwrap();
    let b = run(
        Role::ApiServer,
        &["--secure-port", "6443", "--etcd-prefix", "/x"],
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.get("secure-port"), Some("6443"));
    assert_eq!(a.get("etcd-prefix"), Some("/x"));
}

#[test]
fn booleans_take_a_value_only_after_equals() {
    let f = run(
        Role::ApiServer,
        &["--allow-privileged", "--anonymous-auth=false"],
    )
    .unwrap();
    assert!(f.bool_or("allow-privileged", false));
    assert!(!f.bool_or("anonymous-auth", true));
    // pflag reads `--anonymous-auth false` as `--anonymous-auth` and a positional `false`,
    // which the Kubernetes binaries refuse.
    let e = run(Role::ApiServer, &["--anonymous-auth", "false"]).unwrap_err();
    assert_eq!(
        e,
        FlagError::Positional {
            command: "kube-apiserver".into(),
            args: vec!["false".into()]
        }
    );
    assert_eq!(
        e.to_string(),
        r#""kube-apiserver" does not take any arguments, got ["false"]"#
    );
    let e = run(Role::ApiServer, &["--allow-privileged=yes"]).unwrap_err();
    assert!(matches!(e, FlagError::InvalidValue { ref name, .. } if name == "allow-privileged"));
}

#[test]
fn unknown_flags_are_refused_with_pflags_words() {
    let e = run(Role::ApiServer, &["--secure-port=1", "--foo=bar"]).unwrap_err();
    assert_eq!(e, FlagError::Unknown { name: "foo".into() });
    assert_eq!(e.to_string(), "unknown flag: --foo");
    // A controller-manager flag is not an API server flag, and the other way round.
    assert!(run(Role::ApiServer, &["--cluster-cidr=10.0.0.0/8"]).is_err());
    assert!(run(Role::Scheduler, &["--etcd-servers=https://x:1"]).is_err());
    assert!(run(Role::ControllerManager, &["--cluster-cidr=10.0.0.0/8"]).is_ok());
    let e = run(Role::ApiServer, &["-x"]).unwrap_err();
    assert_eq!(e.to_string(), "unknown shorthand flag: 'x' in -x");
}

#[test]
fn repeated_flags_append_lists_and_replace_scalars() {
    let f = run(
        Role::ApiServer,
        &[
            "--secure-port=1",
            "--secure-port=2",
            "--enable-admission-plugins=A,B",
            "--enable-admission-plugins",
            "C",
            "--service-account-key-file=/a",
            "--service-account-key-file=/b,c",
            "--feature-gates=X=true,Y=false",
        ],
    )
    .unwrap();
    assert_eq!(f.get("secure-port"), Some("2"));
    assert_eq!(f.items("enable-admission-plugins"), ["A", "B", "C"]);
    // stringArray: one item per occurrence, commas kept
    assert_eq!(f.items("service-account-key-file"), ["/a", "/b,c"]);
    assert_eq!(f.items("feature-gates"), ["X=true", "Y=false"]);
}

#[test]
fn values_are_type_checked_and_names_normalized() {
    let e = run(Role::ApiServer, &["--bind-address=nope"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid argument "nope" for "--bind-address" flag: failed to parse IP: "nope""#
    );
    assert!(run(Role::ApiServer, &["--secure-port=six"]).is_err());
    assert!(run(Role::ApiServer, &["--event-ttl=1h"]).is_ok());
    assert!(run(Role::ApiServer, &["--event-ttl=1hour"]).is_err());
    assert!(run(Role::ApiServer, &["--feature-gates=NoEquals"]).is_err());
    let f = run(Role::ApiServer, &["--secure_port=7"]).unwrap();
    assert_eq!(f.get("secure-port"), Some("7"));
    let e = run(Role::ApiServer, &["--secure-port"]).unwrap_err();
    assert_eq!(e.to_string(), "flag needs an argument: --secure-port");
    let f = run(Role::ApiServer, &["-v", "4"]).unwrap();
    assert_eq!(f.get("v"), Some("4"));
    let f = run(Role::ApiServer, &["-v5"]).unwrap();
    assert_eq!(f.get("v"), Some("5"));
}

#[test]
fn help_and_version_short_circuit() {
    let parsed = |a: &[&str]| parse("kube-scheduler", &table(Role::Scheduler), &args(a)).unwrap();
    assert_eq!(parsed(&["--kubeconfig=x", "-h"]), Parsed::Help);
    assert_eq!(parsed(&["--version"]), Parsed::Version { raw: false });
    assert_eq!(parsed(&["--version=raw"]), Parsed::Version { raw: true });
}

#[test]
fn missing_required_flags_are_named() {
    let f = run(
        Role::ApiServer,
        &[
            "--secure-port=6443",
            "--etcd-servers=https://127.0.0.1:2379",
        ],
    )
    .unwrap();
    let ConfigError::Missing { names } = config::apiserver(&f).unwrap_err() else {
        panic!("expected missing flags");
    };
    assert_eq!(
        names,
        [
            "client-ca-file",
            "etcd-cafile",
            "etcd-certfile",
            "etcd-keyfile",
            "service-account-issuer",
            "service-account-key-file",
            "service-account-signing-key-file",
            "service-cluster-ip-range",
            "tls-cert-file",
            "tls-private-key-file",
        ]
    );
    let f = run(Role::ControllerManager, &["--leader-elect"]).unwrap();
    assert_eq!(
        config::controller(Role::ControllerManager, &f).unwrap_err(),
        ConfigError::Missing {
            names: vec!["kubeconfig".into()]
        }
    );
}

/// Every required API server flag, pointing at files in `dir`.
fn complete_apiserver(dir: &Path) -> Vec<String> {
    let file = |name: &str| {
        let path = dir.join(name);
        std::fs::write(&path, "x").unwrap();
        path.display().to_string()
    };
    vec![
        "--etcd-servers=https://127.0.0.1:2379".into(),
        format!("--etcd-cafile={}", file("ca")),
        format!("--etcd-certfile={}", file("cert")),
        format!("--etcd-keyfile={}", file("key")),
        format!("--tls-cert-file={}", file("tls.crt")),
        format!("--tls-private-key-file={}", file("tls.key")),
        format!("--client-ca-file={}", file("client-ca")),
        "--secure-port=6443".into(),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        format!("--service-account-key-file={}", file("sa.pub")),
        format!("--service-account-signing-key-file={}", file("sa.key")),
        "--service-cluster-ip-range=10.96.0.0/12,fd00::/108".into(),
    ]
}

fn apiserver_config(extra: &[&str], dir: &Path) -> Result<config::ApiServerConfig, ConfigError> {
    let mut a = complete_apiserver(dir);
    a.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    config::apiserver(&run(Role::ApiServer, &refs).unwrap())
}

#[test]
fn apiserver_values_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ok = apiserver_config(&["--authorization-mode=Node,RBAC"], d).unwrap();
    assert_eq!(ok.authorization_modes, ["Node", "RBAC"]);
    assert_eq!(ok.service_cluster_ip_ranges.len(), 2);
    assert_eq!(ok.etcd_prefix, "/registry");

    let invalid_flag = |extra: &[&str]| match apiserver_config(extra, d) {
        Err(ConfigError::Invalid { flag, .. }) => flag,
        other => panic!("{extra:?}: expected an invalid value, got {other:?}"),
    };
    assert_eq!(
        invalid_flag(&["--authorization-mode=Node,Magic"]),
        "authorization-mode"
    );
    assert_eq!(
        invalid_flag(&["--authorization-mode=RBAC,RBAC"]),
        "authorization-mode"
    );
    assert_eq!(
        invalid_flag(&["--authorization-mode=ABAC"]),
        "authorization-mode"
    );
    assert_eq!(invalid_flag(&["--secure-port=0"]), "secure-port");
    assert_eq!(invalid_flag(&["--secure-port=70000"]), "secure-port");
    assert_eq!(
        invalid_flag(&["--etcd-servers=http://127.0.0.1:2379"]),
        "etcd-servers"
    );
    assert_eq!(
        invalid_flag(&["--service-cluster-ip-range=10.96.0.0/12,10.97.0.0/16"]),
        "service-cluster-ip-range"
    );
    assert_eq!(
        invalid_flag(&["--service-cluster-ip-range=fd00::/64"]),
        "service-cluster-ip-range"
    );
    assert_eq!(
        invalid_flag(&["--service-node-port-range=lots"]),
        "service-node-port-range"
    );

    match apiserver_config(&["--audit-policy-file=/nonexistent/policy.yaml"], d) {
        Err(ConfigError::Unreadable { flag, path, .. }) => {
            assert_eq!(flag, "audit-policy-file");
            assert_eq!(path, "/nonexistent/policy.yaml");
        }
        other => panic!("expected an unreadable file, got {other:?}"),
    }
    match apiserver_config(&[&format!("--service-account-key-file={}", d.display())], d) {
        Err(ConfigError::Unreadable { flag, .. }) => assert_eq!(flag, "service-account-key-file"),
        other => panic!("a directory is not a key file, got {other:?}"),
    }
}

/// `--authentication-config` names the structured configuration; beside any `--oidc-*`
/// flag kube-apiserver refuses to start, and so does the stand-in.
#[test]
fn the_authentication_config_excludes_oidc_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join("authn.yaml");
    std::fs::write(
        &file,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt: []\n",
    )
    .unwrap();
    let flag = format!("--authentication-config={}", file.display());
    let config = apiserver_config(&[&flag], d).unwrap();
    assert_eq!(
        config.authentication_config.as_deref(),
        Some(file.as_path())
    );
    assert_eq!(config.oidc, None);
    match apiserver_config(
        &[
            &flag,
            "--oidc-issuer-url=https://idp.example",
            "--oidc-client-id=k",
        ],
        d,
    ) {
        Err(ConfigError::Invalid { flag, reason, .. }) => {
            assert_eq!(flag, "authentication-config");
            assert!(
                reason
                    .contains("authentication-config file and oidc-* flags are mutually exclusive"),
                "{reason}"
            );
        }
        other => panic!("expected the two refused together, got {other:?}"),
    }
}

#[test]
fn oidc_flags_are_read_and_checked_as_kube_apiserver_checks_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(apiserver_config(&[], d).unwrap().oidc, None);
    let ok = apiserver_config(
        &[
            "--oidc-issuer-url=https://idp.example/realms/ops",
            "--oidc-client-id=kubernetes",
            "--oidc-username-claim=email",
            "--oidc-groups-claim=groups",
            "--oidc-groups-prefix=oidc:",
            "--oidc-required-claim=hd=example.com",
            "--oidc-signing-algs=RS256,ES256",
        ],
        d,
    )
    .unwrap()
    .oidc
    .unwrap();
    assert_eq!(ok.issuer_url, "https://idp.example/realms/ops");
    assert_eq!(ok.username_claim, "email");
    assert_eq!(ok.username_prefix, None);
    assert_eq!(ok.groups_claim.as_deref(), Some("groups"));
    assert_eq!(ok.groups_prefix.as_deref(), Some("oidc:"));
    assert_eq!(ok.required_claims["hd"], "example.com");
    assert_eq!(ok.signing_algs, ["RS256", "ES256"]);
    let defaults = apiserver_config(
        &[
            "--oidc-issuer-url=https://idp.example",
            "--oidc-client-id=k",
        ],
        d,
    )
    .unwrap()
    .oidc
    .unwrap();
    assert_eq!(defaults.username_claim, "sub");
    let invalid_flag = |extra: &[&str]| match apiserver_config(extra, d) {
        Err(ConfigError::Invalid { flag, .. }) => flag,
        other => panic!("{extra:?}: expected an invalid value, got {other:?}"),
    };
    assert_eq!(
        invalid_flag(&["--oidc-issuer-url=http://idp.example", "--oidc-client-id=k"]),
        "oidc-issuer-url"
    );
    assert_eq!(
        invalid_flag(&["--oidc-issuer-url=https://idp.example"]),
        "oidc-client-id"
    );
    assert_eq!(invalid_flag(&["--oidc-client-id=k"]), "oidc-client-id");
    assert_eq!(
        invalid_flag(&[
            "--oidc-issuer-url=https://idp.example",
            "--oidc-client-id=k",
            "--oidc-signing-algs=none"
        ]),
        "oidc-signing-algs"
    );
}

#[test]
fn controller_manager_values_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "x").unwrap();
    let with = |extra: &[&str]| {
        let mut a = vec![format!("--kubeconfig={}", kubeconfig.display())];
        a.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        config::controller(
            Role::ControllerManager,
            &run(Role::ControllerManager, &refs).unwrap(),
        )
    };
    let ok = with(&[]).unwrap();
    assert_eq!(ok.secure_port, 10257);
    assert!(ok.leader_elect);
    assert_eq!(ok.controller_manager.unwrap().controllers, ["*"]);
    assert!(matches!(
        with(&["--allocate-node-cidrs"]),
        Err(ConfigError::Invalid { .. })
    ));
    assert!(with(&["--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16"]).is_ok());
    assert!(matches!(
        with(&["--cluster-signing-cert-file=/nonexistent"]),
        Err(ConfigError::Unreadable { .. })
    ));
    assert!(matches!(
        with(&[&format!(
            "--cluster-signing-cert-file={}",
            kubeconfig.display()
        )]),
        Err(ConfigError::Invalid { .. })
    ));
    assert!(matches!(
        with(&["--controllers=*,Bad_Name"]),
        Err(ConfigError::Invalid { .. })
    ));
    let scheduler = config::controller(
        Role::Scheduler,
        &run(
            Role::Scheduler,
            &[&format!("--kubeconfig={}", kubeconfig.display())],
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(scheduler.secure_port, 10259);
    assert!(scheduler.controller_manager.is_none());
}

// ---------------------------------------------------------------- the built binary

fn binary_as(dir: &Path, name: &str) -> Command {
    let link = dir.join(name);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kube-standin"), &link).unwrap();
    Command::new(link)
}

#[test]
fn binary_exits_1_on_an_unknown_flag() {
    let dir = tempfile::tempdir().unwrap();
    let output = binary_as(dir.path(), "kube-apiserver")
        .arg("--foo")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown flag: --foo"), "{stderr}");
}

#[test]
fn binary_exits_1_naming_missing_required_flags() {
    let dir = tempfile::tempdir().unwrap();
    let output = binary_as(dir.path(), "kube-apiserver")
        .arg("--secure-port=6443")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"required flag(s) "client-ca-file", "etcd-cafile""#),
        "{stderr}"
    );
}

#[test]
fn binary_takes_its_role_from_the_first_argument_and_says_it_is_a_stand_in() {
    let output = Command::new(env!("CARGO_BIN_EXE_kube-standin"))
        .args(["kube-controller-manager", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("THIS IS A TEST STAND-IN, NOT KUBERNETES"),
        "{stdout}"
    );
    assert!(stdout.contains("--cluster-signing-cert-file"), "{stdout}");

    let output = Command::new(env!("CARGO_BIN_EXE_kube-standin"))
        .args(["kube-scheduler", "--version"])
        .env("KUBE_STANDIN_VERSION", "v1.37.1")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "Kubernetes v1.37.1\n"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_kube-standin"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
}
