//! `kube-standin`: a TEST STAND-IN for kube-apiserver, kube-controller-manager,
//! kube-scheduler and the kubelet, not Kubernetes. See the library documentation.

use std::process::ExitCode;

use oi_kube_standin::flags::{self, Parsed};
use oi_kube_standin::{Role, apiserver, config, controller, https::chain, reported_version};

/// The allocator of oneinfra's own binaries: a host runs many stand-ins at once, each
/// copying its objects per request.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some((role, args)) = Role::from_argv(&argv) else {
        eprintln!(
            "kube-standin: a test stand-in for the Kubernetes control plane binaries, not Kubernetes.\n\
             Invoke it as kube-apiserver, kube-controller-manager, kube-scheduler or kubelet (a link\n\
             or copy with that name), or as `kube-standin <one of those names> [flags]`."
        );
        return ExitCode::FAILURE;
    };
    let command = role.command();
    let specs = flags::table(role);
    let flags = match flags::parse(command, &specs, args) {
        Ok(Parsed::Run(flags)) => flags,
        Ok(Parsed::Help) => {
            print!("{}", flags::help_text(command, &specs));
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version { raw }) => {
            let version = reported_version();
            if raw {
                println!("{:#}", oi_kube_standin::version_info(&version));
            } else {
                println!("Kubernetes {version}");
            }
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("Error: {e}");
            eprintln!("Run '{command} --help' for usage.");
            return ExitCode::FAILURE;
        }
    };

    // klog's -v: 4 and above is debug detail (per-endpoint etcd failures, connection ends).
    let verbosity = flags.get("v").and_then(flags::parse_go_int).unwrap_or(0);
    let level = if verbosity >= 4 {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    };
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .init();
    let version = reported_version();
    tracing::info!(
        "{command} {version}: kube-standin, a TEST STAND-IN, not Kubernetes; flags given: {}",
        flags.names().collect::<Vec<_>>().join(" ")
    );

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("Error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), String> = match role {
        Role::ApiServer => match config::apiserver(&flags) {
            Ok(config) => runtime
                .block_on(apiserver::run(config, version))
                .map_err(|e| chain(&e)),
            Err(e) => Err(e.to_string()),
        },
        Role::Kubelet => match config::kubelet(&flags) {
            Ok(config) => runtime
                .block_on(oi_kube_standin::kubelet::run(config, version))
                .map_err(|e| chain(&e)),
            Err(e) => Err(e.to_string()),
        },
        Role::ControllerManager | Role::Scheduler => {
            match (
                config::controller(role, &flags),
                controller::grace_from_env(),
            ) {
                (Ok(config), Ok(grace)) => runtime
                    .block_on(controller::run(config, grace))
                    .map_err(|e| chain(&e)),
                (Err(e), _) => Err(e.to_string()),
                (_, Err(e)) => Err(e),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{command} stand-in exiting: {e}");
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}
