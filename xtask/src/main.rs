//! `cargo xtask <task>`: project tasks (see the library docs).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use xtask::build::{self, BuildOptions, Outcome};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "oneinfra-rs project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build the offline image set: OCI image-layout tarballs, no registry, no Docker.
    Images(ImagesArgs),
    /// Check that no product crate (crates/) ships test support (testing/).
    CheckLayout,
    /// Check that every relative link of the README, HACKING.md and the docs book resolves.
    CheckLinks,
}

#[derive(clap::Args)]
struct ImagesArgs {
    /// Output directory [default: <workspace>/target/oi-images].
    #[arg(long, env = xtask::IMAGES_DIR_ENV)]
    out: Option<PathBuf>,
    /// Build only these images: short name (`etcd`), `name:tag`, or full reference. Repeatable.
    /// `oi-manager` (the manager's image, a release build of it) is built only when named.
    #[arg(long, num_args = 1..)]
    only: Vec<String>,
}

fn images(args: ImagesArgs) -> anyhow::Result<()> {
    let opts = BuildOptions {
        out_dir: args.out.unwrap_or_else(xtask::default_images_dir),
        only: args.only,
        workspace_root: xtask::workspace_root(),
    };
    let started = std::time::Instant::now();
    let reports = build::build_images(&opts, &mut std::io::stdout())
        .with_context(|| format!("building images into {}", opts.out_dir.display()))?;
    let count = |f: fn(&Outcome) -> bool| reports.iter().filter(|r| f(&r.outcome)).count();
    println!(
        "{} built, {} up to date, {} skipped in {:.1}s",
        count(|o| matches!(o, Outcome::Built { .. })),
        count(|o| matches!(o, Outcome::UpToDate { .. })),
        count(|o| matches!(o, Outcome::Skipped { .. })),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Images(args) => images(args),
        Task::CheckLayout => xtask::layout::check(&xtask::workspace_root()),
        Task::CheckLinks => xtask::links::check(&xtask::workspace_root()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
