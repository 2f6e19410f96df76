//! `oi-oidc-provider`: a SIPCluster's OpenID Connect provider (see the `oi_oidc` crate).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "oi-oidc-provider",
    version,
    about = "A SIPCluster's OpenID Connect provider"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serves the provider described by a configuration file (JSON).
    Serve {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Reads a password on stdin (its first line) and prints its hash for a users list.
    HashPassword {
        #[arg(long, default_value_t = oi_oidc::password::DEFAULT_ITERATIONS)]
        iterations: u32,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Serve { config } => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the async runtime: {e}"))
            .and_then(|rt| rt.block_on(oi_oidc::run(&config))),
        Command::HashPassword { iterations } => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .map_err(|e| format!("cannot read stdin: {e}"))
                .and_then(|_| {
                    let password = input.lines().next().unwrap_or_default();
                    if password.is_empty() {
                        return Err("no password on stdin".to_string());
                    }
                    oi_oidc::password::hash(password, iterations)
                })
                .map(|h| println!("{h}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oi-oidc-provider: {e}");
            ExitCode::FAILURE
        }
    }
}
