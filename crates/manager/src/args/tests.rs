use clap::CommandFactory as _;
use pretty_assertions::assert_eq;

use super::*;

#[test]
fn definition_is_consistent() {
    Cli::command().debug_assert();
}

fn run_args(args: &[&str]) -> RunArgs {
    let mut argv = vec!["oi-manager", "run"];
    argv.extend_from_slice(args);
    match parse_args(argv).unwrap().command {
        Command::Run(args) => *args,
        other => panic!("not run: {other:?}"),
    }
}

#[test]
fn defaults_map_onto_the_manager_options() {
    let mut args = run_args(&[]);
    // The environment of the test process must not decide the outcome.
    args.leader_election_namespace = DEFAULT_LEADER_ELECTION_NAMESPACE.to_string();
    args.leader_election_identity = None;
    args.image_repository = None;
    let settings = args.settings("host_42").unwrap();
    assert_eq!(settings.kubeconfig, None);
    assert_eq!(settings.namespace, None);
    assert_eq!(
        settings.lease,
        Some(LeaseConfig {
            namespace: "oneinfra-system".to_string(),
            name: "oi-manager.oneinfra.ereslibre.es".to_string(),
            identity: "host_42".to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        })
    );
    assert_eq!(settings.identity, "host_42");
    assert_eq!(settings.metrics_address, "0.0.0.0:8080".parse().unwrap());
    assert_eq!(settings.probe_address, "0.0.0.0:8081".parse().unwrap());
    let defaults = ManagerOptions::default();
    let o = &settings.options;
    assert_eq!(o.execute.max_wait, defaults.execute.max_wait);
    assert_eq!(o.plan.render.image_repository, None);
    assert_eq!(
        o.execute.remove_leftover_throwaway_pods,
        defaults.execute.remove_leftover_throwaway_pods
    );
    assert_eq!(o.requeue_ready, defaults.requeue_ready);
    assert_eq!(o.requeue_not_ready, defaults.requeue_not_ready);
    assert_eq!(
        o.hypervisor_probe_interval,
        defaults.hypervisor_probe_interval
    );
    assert_eq!(o.backoff_min, defaults.backoff_min);
    assert_eq!(o.backoff_max, defaults.backoff_max);
    assert_eq!(o.certificate_warning.ca, time::Duration::days(90));
    assert_eq!(o.certificate_warning.leaf, time::Duration::days(7));
    assert_eq!(settings.toolbox_image, INFRA.toolbox.reference(None));
    assert_eq!(settings.concurrency, 4);
    assert_eq!(settings.shutdown_timeout, Duration::from_secs(20));
}

#[test]
fn flags_map_onto_the_settings() {
    let settings = run_args(&[
        "--kubeconfig",
        "/k/config",
        "--namespace",
        "tenants",
        "--leader-election-namespace",
        "ops",
        "--leader-election-id",
        "lease-1",
        "--leader-election-identity",
        "pod-a",
        "--leader-election-lease-duration",
        "30s",
        "--leader-election-renew-deadline",
        "20s",
        "--leader-election-retry-period",
        "500ms",
        "--metrics-bind-address",
        "127.0.0.1:9090",
        "--health-probe-bind-address",
        "[::1]:9091",
        "--image-repository",
        "mirror.example/oi",
        "--max-wait",
        "1m",
        "--requeue-ready",
        "10m",
        "--requeue-not-ready",
        "3s",
        "--hypervisor-probe-interval",
        "1m",
        "--backoff-min",
        "2s",
        "--backoff-max",
        "1h",
        "--concurrency",
        "8",
        "--ca-expiry-warning-days",
        "180",
        "--certificate-expiry-warning-days",
        "14",
        "--shutdown-timeout",
        "5s",
    ])
    .settings("unused")
    .unwrap();
    assert_eq!(settings.kubeconfig, Some(PathBuf::from("/k/config")));
    assert_eq!(settings.namespace.as_deref(), Some("tenants"));
    assert_eq!(
        settings.lease,
        Some(LeaseConfig {
            namespace: "ops".to_string(),
            name: "lease-1".to_string(),
            identity: "pod-a".to_string(),
            lease_duration: Duration::from_secs(30),
            renew_deadline: Duration::from_secs(20),
            retry_period: Duration::from_millis(500),
        })
    );
    assert_eq!(settings.identity, "pod-a");
    assert_eq!(settings.metrics_address, "127.0.0.1:9090".parse().unwrap());
    assert_eq!(settings.probe_address, "[::1]:9091".parse().unwrap());
    let o = &settings.options;
    assert_eq!(
        o.plan.render.image_repository.as_deref(),
        Some("mirror.example/oi")
    );
    assert_eq!(o.execute.max_wait, Duration::from_secs(60));
    assert_eq!(o.requeue_ready, Duration::from_secs(600));
    assert_eq!(o.requeue_not_ready, Duration::from_secs(3));
    assert_eq!(o.hypervisor_probe_interval, Duration::from_secs(60));
    assert_eq!(o.backoff_min, Duration::from_secs(2));
    assert_eq!(o.backoff_max, Duration::from_secs(3600));
    assert_eq!(o.certificate_warning.ca, time::Duration::days(180));
    assert_eq!(o.certificate_warning.leaf, time::Duration::days(14));
    assert_eq!(
        settings.toolbox_image,
        INFRA.toolbox.reference(Some("mirror.example/oi"))
    );
    assert_eq!(settings.concurrency, 8);
    assert_eq!(settings.shutdown_timeout, Duration::from_secs(5));
}

#[test]
fn leader_elect_takes_a_boolean_value() {
    assert!(run_args(&[]).leader_elect);
    assert!(run_args(&["--leader-elect"]).leader_elect);
    assert!(run_args(&["--leader-elect=true"]).leader_elect);
    let args = run_args(&["--leader-elect=false"]);
    assert!(!args.leader_elect);
    assert_eq!(args.settings("h").unwrap().lease, None);
    assert!(parse_args(["oi-manager", "run", "--leader-elect=maybe"]).is_err());
}

#[test]
fn bad_flags_are_usage_errors() {
    for argv in [
        vec!["oi-manager", "run", "--no-such-flag"],
        vec!["oi-manager", "run", "--metrics-bind-address", "8080"],
        vec!["oi-manager", "run", "--max-wait", "soon"],
        vec!["oi-manager", "run", "--max-wait", "5d"],
        vec!["oi-manager", "run", "--concurrency", "-1"],
        vec!["oi-manager", "nothing"],
        vec!["oi-manager"],
    ] {
        let err = parse_args(&argv).unwrap_err();
        assert_ne!(err.exit_code(), 0, "{argv:?}");
        assert!(err.use_stderr(), "{argv:?}: {err}");
    }
}

#[test]
fn inconsistent_flags_are_refused() {
    assert_eq!(
        run_args(&["--backoff-min", "10s", "--backoff-max", "5s"])
            .settings("h")
            .unwrap_err(),
        ArgsError::Backoff {
            min: Duration::from_secs(10),
            max: Duration::from_secs(5)
        }
    );
    assert_eq!(
        run_args(&["--max-wait", "0s"]).settings("h").unwrap_err(),
        ArgsError::Zero { flag: "max-wait" }
    );
    assert_eq!(
        run_args(&["--concurrency", "0"]).settings("h").unwrap_err(),
        ArgsError::Zero {
            flag: "concurrency"
        }
    );
    assert_eq!(
        run_args(&["--leader-election-renew-deadline", "15s"])
            .settings("h")
            .unwrap_err(),
        ArgsError::Lease {
            lease: Duration::from_secs(15),
            renew: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        }
    );
    assert_eq!(
        run_args(&["--leader-election-retry-period", "10s"])
            .settings("h")
            .unwrap_err()
            .to_string(),
        "--leader-election-lease-duration (15s) must be longer than \
         --leader-election-renew-deadline (10s), which must be longer than \
         --leader-election-retry-period (10s)"
    );
    // Lease timing does not matter without leader election.
    assert!(
        run_args(&[
            "--leader-elect=false",
            "--leader-election-renew-deadline",
            "1m"
        ])
        .settings("h")
        .is_ok()
    );
    assert_eq!(
        run_args(&["--namespace", ""]).settings("h").unwrap_err(),
        ArgsError::Empty { flag: "namespace" }
    );
    assert_eq!(
        run_args(&["--leader-election-identity", ""])
            .settings("h")
            .unwrap_err(),
        ArgsError::Empty {
            flag: "leader-election-identity"
        }
    );
}

#[test]
fn default_identity_is_host_and_pid() {
    let identity = default_identity();
    let (host, pid) = identity.rsplit_once('_').unwrap();
    assert!(!host.is_empty());
    assert_eq!(pid, std::process::id().to_string());
}
