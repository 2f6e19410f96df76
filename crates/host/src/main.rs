//! `oi-host`: the SIP jump host's `host` tool. Lists the tenant cluster's hosts with the
//! power state their BMC reports, and power-cycles one by name through Redfish; see
//! [`oi_host`].
//!
//! ```text
//! oi-host [--inventory FILE] list            NAME  IP  BMC  POWER, one host per line
//! oi-host [--inventory FILE] reboot NAME     ForceRestart (On when off), waits until On
//! ```
//!
//! The inventory (`/etc/oneinfra/sip/hosts.json` on the jump host, or `OI_HOST_INVENTORY`)
//! is the JSON [`oi_api::JumpHostInventory`] the SIP planner renders: it holds BMC passwords,
//! so it must not be readable by others (refused otherwise).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use oi_api::JumpHostInventory;
use oi_host::Bmc;

#[derive(Parser)]
#[command(
    name = "oi-host",
    about = "The hosts of a SIP tenant cluster: list them, power-cycle one through its BMC (Redfish)"
)]
struct Cli {
    /// The jump host's inventory of hosts (JSON, 0600).
    #[arg(
        long,
        env = "OI_HOST_INVENTORY",
        default_value = "/etc/oneinfra/sip/hosts.json"
    )]
    inventory: PathBuf,
    /// PEM CA certificates trusted for `https` BMCs, beside the system's.
    #[arg(long)]
    ca_bundle: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every host: name, address, BMC, power state (asked of each BMC).
    List,
    /// Power-cycles one host (ForceRestart; On when it is off) and waits until it is On.
    Reboot {
        /// The host's name (its BareMetalHost's).
        name: String,
        /// How long to wait for the host to be On again, in seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the inventory, refusing one others can read (it holds BMC passwords).
fn inventory(path: &Path) -> anyhow::Result<JumpHostInventory> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).with_context(|| format!("inventory {}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "inventory {}: mode {mode:o} lets others read BMC passwords (chmod 600 it)",
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("inventory {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("inventory {}", path.display()))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let inventory = inventory(&cli.inventory)?;
    match cli.command {
        Command::List => {
            let mut lines = vec![["NAME", "IP", "BMC", "POWER"].map(str::to_string)];
            let mut failed = 0;
            for host in &inventory.hosts {
                let power = match Bmc::of(host, cli.ca_bundle.clone()) {
                    Ok(bmc) => match bmc.status().await {
                        Ok(s) => s.power_state,
                        Err(e) => {
                            failed += 1;
                            eprintln!("warning: {e}");
                            "unknown".to_string()
                        }
                    },
                    Err(e) => {
                        failed += 1;
                        eprintln!("warning: {e}");
                        "unknown".to_string()
                    }
                };
                lines.push([
                    host.name.clone(),
                    host.ip.clone().unwrap_or_else(|| "-".to_string()),
                    host.bmc.address.clone(),
                    power,
                ]);
            }
            let width = |i: usize| lines.iter().map(|l| l[i].len()).max().unwrap_or(0);
            let (w0, w1, w2) = (width(0), width(1), width(2));
            for l in &lines {
                println!("{:w0$}  {:w1$}  {:w2$}  {}", l[0], l[1], l[2], l[3]);
            }
            if failed > 0 {
                bail!("{failed} of {} BMCs did not answer", inventory.hosts.len());
            }
            Ok(())
        }
        Command::Reboot { name, timeout } => {
            let Some(host) = inventory.hosts.iter().find(|h| h.name == name) else {
                let known: Vec<&str> = inventory.hosts.iter().map(|h| h.name.as_str()).collect();
                bail!(
                    "no host {name:?} in {} (hosts: {})",
                    cli.inventory.display(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
            };
            let bmc = Bmc::of(host, cli.ca_bundle.clone())?;
            println!("{name}: power-cycling through {}", host.bmc.address);
            let done = bmc
                .reboot(Duration::from_secs(timeout), Duration::from_millis(500))
                .await?;
            println!(
                "{name}: {} accepted (was {}); On after {:.1} s",
                done.reset,
                done.was,
                done.took.as_secs_f64()
            );
            Ok(())
        }
    }
}
