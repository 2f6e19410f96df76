//! `oi-local-hypervisor-set`: create, destroy and list sets of local hypervisors.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use oi_local_hypervisor_set::Paths;
use oi_local_hypervisor_set::commands::{self, CreateArgs};

/// Real hypervisors (network namespace + containerd each) on this machine, for demos and tests.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a set and print its Hypervisor manifests on stdout, or write them to -o FILE.
    /// With --tcp they hold each front's client private key (full control of the
    /// hypervisor): use -o, which creates FILE with mode 0600, rather than a redirection.
    Create {
        /// Write the manifests to FILE (atomically, mode 0600 from its creation; checked
        /// before the set is created) instead of stdout.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Set name (lowercase letters, digits and '-', at most 20 characters).
        #[arg(long)]
        name: String,
        /// Number of private hypervisors (control planes).
        #[arg(long, default_value_t = 1)]
        size_private: usize,
        /// Number of public hypervisors (ingresses).
        #[arg(long, default_value_t = 1)]
        size_public: usize,
        /// Expose each CRI endpoint over TCP with mutual TLS instead of a local socket.
        #[arg(long)]
        tcp: bool,
        /// Number of workers: hosts with their own network namespace and containerd on a LAN
        /// of their own, reaching the hypervisors only through a masquerading router (no
        /// hypervisor can reach them). Run commands on them with `exec`.
        #[arg(long, default_value_t = 0)]
        workers: usize,
        /// Directory of image tarballs to import into every hypervisor.
        #[arg(long, env = "OI_IMAGES_DIR", default_value = "target/oi-images")]
        images_dir: PathBuf,
    },
    /// Stop and remove everything of a set.
    Destroy {
        #[arg(long)]
        name: String,
    },
    /// List sets and their hypervisors, workers and router.
    List,
    /// Run a command on a host of a set (a hypervisor, a worker or the router): in its network
    /// namespace, with stdin, stdout and stderr passed through; exits as the command does.
    Exec {
        #[arg(long)]
        name: String,
        /// The host, e.g. demo-worker-1.
        host: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let paths = Paths::default();
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr();
    match cli.command {
        Command::Create {
            output,
            name,
            size_private,
            size_public,
            tcp,
            workers,
            images_dir,
        } => {
            // Checked before anything is created: a set made for an output that cannot be
            // written would be running with its keys lost.
            let target = oi_cli_io::Target::resolve(output.as_deref())?;
            let holder = format!("pid {}: oi-local-hypervisor-set create", std::process::id());
            let shown = output
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let guard = target.lock(&holder, |held_by| {
                eprintln!("oi-local-hypervisor-set: waiting for {shown}: another command is writing it ({held_by})");
            })?;
            let args = CreateArgs {
                name,
                private: size_private,
                public: size_public,
                tcp,
                images_dir,
                workers,
            };
            let mut manifests = Vec::new();
            commands::create(&paths, &args, &mut manifests, &mut stderr)
                .with_context(|| format!("cannot create set {}", args.name))?;
            guard.write(&manifests)?;
        }
        Command::Destroy { name } => {
            // "Nothing to do" is a success too: destroy converges.
            commands::destroy(&paths, &name, &mut stderr)
                .with_context(|| format!("cannot destroy set {name}"))?;
        }
        Command::List => commands::list(&paths, &mut stdout).context("cannot list sets")?,
        Command::Exec {
            name,
            host,
            command,
        } => {
            let err = commands::exec(&paths, &name, &host, &command);
            return Err(anyhow::Error::from(err).context(format!("cannot run on {host}")));
        }
    }
    stdout.flush().context("cannot write to stdout")
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed stdout (`| head`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                    || c.downcast_ref::<oi_cli_io::Error>()
                        .is_some_and(oi_cli_io::Error::is_broken_pipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod reference {
    use clap::CommandFactory as _;

    /// The book's reference is `oi-local-hypervisor-set --help` of every command.
    #[test]
    fn the_books_cli_reference_is_the_help_of_every_command() {
        let page = oi_testsupport::reference::cli_markdown(
            super::Cli::command().name("oi-local-hypervisor-set"),
            "`oi-local-hypervisor-set` makes real hypervisors on this machine (a network \
             namespace and a containerd each) for the demo, the benchmarks and the tests.",
        );
        oi_testsupport::assert_golden(
            &oi_testsupport::workspace_root().join("docs/src/reference/oi-local-hypervisor-set.md"),
            &page,
            "cargo nextest run -p oi-local-hypervisor-set the_books_cli_reference",
        );
    }
}
