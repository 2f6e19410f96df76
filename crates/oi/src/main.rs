//! `oi`: the oneinfra command line.
//!
//! Every command reads manifests (stdin, or `-f FILE`s), does its work in memory, and only
//! when it succeeded writes its whole output at once (stdout, or `-o FILE`; see `oi_cli_io`
//! for how an output cannot destroy what it replaces):
//!
//! ```text
//! -o FILE resolved and checked, locked ─► stdin / -f FILE... (bounded) ─► command (pure:
//!   (refused before any work)              args, now, seed) ─► buffer ─► stdout / -o FILE
//!                                                    │ error             (tempfile + fsync
//!                                                    ▼                    + rename)
//!                                  `error: ...` on stderr, exit 1, nothing written
//! ```

// Tests: a failed unwrap is a failed test.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod args;
mod commands;
mod manifests;
mod progress;

use std::io::{IsTerminal as _, Read};
use std::process::ExitCode;

use clap::Parser as _;
use oi_cli_io::Target;

use crate::args::Cli;

/// The same allocator as `oi-manager`'s (see `oi_manager::Allocator`): a run over many
/// clusters plans and checks them on several threads at once.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(mut cli: Cli) -> anyhow::Result<()> {
    let ctx = cli.globals.context();
    // `oi get -o wide|yaml|json|name`, as kubectl says it: a format, not a file.
    if let args::Command::Get(get) = &mut cli.command
        && let Some(format) = cli
            .globals
            .output
            .as_deref()
            .and_then(args::GetFormat::named)
    {
        get.format = Some(format);
        cli.globals.output = None;
    }
    let given = cli.globals.output.as_deref();
    // Before any work: an output that cannot be written, or must not be, fails now, not
    // after a reconcile has run on the hypervisors.
    let target = Target::resolve(given)?;
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    if let Some(input) = cli.command.input() {
        // Nobody types manifests: a terminal on stdin is a forgotten `-f`, never an empty
        // world (which `-o world.yaml` would then write over the real one).
        if terminal && input.reads_stdin() {
            return Err(oi_cli_io::Error::NoInput.into());
        }
    }
    // An output that is not manifests never replaces an input, nor a file of manifests.
    if let Some(given) = given
        && !cli.command.prints_manifests()
    {
        if let Some(input) = cli.command.input() {
            target.refuse_if_input(given, &manifests::input_ids(input))?;
        }
        target.refuse_if_manifests(given)?;
    }
    let shown = given.map(|p| p.display().to_string()).unwrap_or_default();
    let guard = target.lock(&holder(), |held_by| {
        eprintln!("oi: waiting for {shown}: another command is writing it ({held_by})");
    })?;
    let mut buffer = Vec::new();
    let input: Box<dyn Read> = if terminal {
        Box::new(std::io::empty())
    } else {
        Box::new(stdin.lock())
    };
    let note = match commands::dispatch(&cli.command, &ctx, input, &mut buffer) {
        Ok(note) => note,
        // A reconcile that did not converge still wrote its manifests to the buffer (ports,
        // certificates, status), a dry run that could not see everything its plan: write
        // them, so nothing is lost, then fail.
        Err(err) if err.is::<commands::OutputThenFail>() => {
            guard.write(&buffer)?;
            return Err(err);
        }
        Err(err) => return Err(err),
    };
    match guard.write(&buffer) {
        // Like ripgrep: a reader that went away (`oi ... | head`) is not our failure. Only
        // the final write to stdout may end this way; a broken pipe anywhere else is an error.
        Err(err) if *guard.target() == Target::Stdout && err.is_broken_pipe() => return Ok(()),
        result => result?,
    }
    if let Some(note) = note {
        eprintln!("{note}");
    }
    Ok(())
}

/// What this process writes into a lock it holds, for a command that has to wait for it.
fn holder() -> String {
    let words: Vec<String> = std::env::args().take(4).collect();
    format!("pid {}: {}", std::process::id(), words.join(" "))
}

#[cfg(test)]
mod reference {
    use clap::CommandFactory as _;

    /// The book's CLI reference is `oi --help` of every command, so it cannot drift.
    #[test]
    fn the_books_cli_reference_is_the_help_of_every_command() {
        let page = oi_testsupport::reference::cli_markdown(
            crate::args::Cli::command(),
            "`oi` runs clusters from a world file: every command reads manifests (`-f FILE`, or \
             stdin) and writes the world (`-o FILE`, or stdout) only when it succeeded.",
        );
        oi_testsupport::assert_golden(
            &oi_testsupport::workspace_root().join("docs/src/reference/oi.md"),
            &page,
            "cargo nextest run -p oi-cli the_books_cli_reference",
        );
    }
}
