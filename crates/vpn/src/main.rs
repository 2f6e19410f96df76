//! `oi-vpn-endpoint`: a cluster's WireGuard endpoint and its API servers' egress proxy (see
//! the `oi_vpn` crate). Runs in the cluster VPN pod on the ingress's public hypervisor.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;
use oi_vpn::endpoint::{Settings, run};
use oi_vpn::proxy::TlsFiles;

/// A cluster's WireGuard endpoint (wireguard-go in a network namespace of its own, peers
/// applied live from --config) and the HTTP CONNECT proxy its API servers reach kubelets
/// through.
#[derive(Debug, Parser)]
#[command(name = "oi-vpn-endpoint", version)]
struct Args {
    /// The WireGuard interface (unique on this host while it is created).
    #[arg(long, value_name = "NAME")]
    interface: String,
    /// The WireGuard configuration: [Interface] PrivateKey and ListenPort, a [Peer] per
    /// peer; read again whenever it changes.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// This endpoint's address in the VPN, with the VPN's prefix length.
    #[arg(long, value_name = "ADDRESS/PREFIX")]
    address: IpNet,
    /// Where peers' last endpoints are kept across restarts.
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// The userspace WireGuard implementation.
    #[arg(long, value_name = "PATH", default_value = "wireguard-go")]
    wireguard_go: PathBuf,
    /// Where the egress proxy listens.
    #[arg(long, value_name = "IP:PORT")]
    proxy_listen: SocketAddr,
    /// The proxy's serving certificate (PEM).
    #[arg(long, value_name = "FILE")]
    proxy_certificate: PathBuf,
    /// Its private key (PEM).
    #[arg(long, value_name = "FILE")]
    proxy_private_key: PathBuf,
    /// The CA whose client certificates the proxy serves (the kubelet client CA).
    #[arg(long, value_name = "FILE")]
    proxy_client_ca: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let settings = Settings {
        interface: args.interface,
        config: args.config,
        address: args.address,
        state_dir: args.state_dir,
        wireguard_go: args.wireguard_go,
        proxy_listen: args.proxy_listen,
        proxy_tls: TlsFiles {
            certificate: args.proxy_certificate,
            private_key: args.proxy_private_key,
            client_ca: args.proxy_client_ca,
        },
        poll: Duration::from_millis(500),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("oi-vpn-endpoint: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let stop = async {
            let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
            match term {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            eprintln!("oi-vpn-endpoint: stopping");
        };
        run(settings, stop).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oi-vpn-endpoint: {e}");
            ExitCode::FAILURE
        }
    }
}
