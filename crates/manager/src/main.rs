//! `oi-manager`: oneinfra's controllers on a management cluster (`run`), and the
//! CustomResourceDefinitions they need (`crds`).
//!
//! Exit codes: 0 when done (`run`: after SIGTERM or SIGINT, the Lease released), 1 on an
//! error (printed as `error: ...` on stderr; `run`: also when leadership is lost, so that the
//! Deployment restarts the pod as a candidate), 2 for a bad command line.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use anyhow::Context as _;
use oi_manager::args::{self, Cli, Command, RunArgs};
use oi_manager::run;

#[global_allocator]
static ALLOCATOR: oi_manager::Allocator = oi_manager::Allocator;

fn main() -> ExitCode {
    let cli = match args::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        // Usage errors exit 2; --help and --version print and exit 0.
        Err(e) => e.exit(),
    };
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crds => {
            let yaml = oi_api::crd::crds_yaml().context("cannot render the CRDs")?;
            print(yaml.as_bytes())
        }
        Command::Version => print(format!("oi-manager {}\n", env!("CARGO_PKG_VERSION")).as_bytes()),
        Command::Run(args) => run_manager(&args),
    }
}

/// Writes to stdout; a reader that went away (`oi-manager crds | head`) is not a failure.
fn print(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("cannot write to stdout"),
    }
}

fn run_manager(args: &RunArgs) -> anyhow::Result<()> {
    let settings = args.settings(&args::default_identity())?;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .with_context(|| format!("--log {:?} is not a log filter", args.log))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(oi_engine::RUNTIME_STACK_BYTES)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(run::run(settings));
    // Reconciles cut short must not hold the exit (a lost leader must stop writing now).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
