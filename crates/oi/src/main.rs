//! `oi`: the oneinfra command line.
//!
//! Every command reads manifests (stdin, or `-f FILE`s), does its work in memory, and only
//! when it succeeded writes its whole output at once (stdout, or `-o FILE` atomically):
//!
//! ```text
//! stdin / -f FILE... ──► command (pure: args, now, seed) ──► buffer ──► stdout / -o FILE
//!                                   │ error                               (tempfile+fsync+rename)
//!                                   ▼
//!                        `error: ...` on stderr, exit 1, nothing written
//! ```

// Tests: a failed unwrap is a failed test.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod args;
mod commands;
mod io;
mod manifests;

use std::io::{IsTerminal as _, Read};
use std::process::ExitCode;

use clap::Parser as _;

use crate::args::Cli;

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

fn run(cli: Cli) -> anyhow::Result<()> {
    let ctx = cli.globals.context();
    let mut buffer = Vec::new();
    let stdin = std::io::stdin();
    // Nobody types manifests: a terminal on stdin means "no input", so that the first
    // `oi hypervisor inject` of a world does not wait for an end of file.
    let input: Box<dyn Read> = if stdin.is_terminal() {
        Box::new(std::io::empty())
    } else {
        Box::new(stdin.lock())
    };
    let note = match commands::dispatch(&cli.command, &ctx, input, &mut buffer) {
        Ok(note) => note,
        // A reconcile that did not converge still wrote its manifests to the buffer (ports,
        // certificates, status): write them, so nothing is lost, then fail.
        Err(err) if err.is::<commands::reconcile::NotReady>() => {
            io::emit(&buffer, cli.globals.output.as_deref())?;
            return Err(err);
        }
        Err(err) => return Err(err),
    };
    match io::emit(&buffer, cli.globals.output.as_deref()) {
        // Like ripgrep: a reader that went away (`oi ... | head`) is not our failure. Only
        // the final write to stdout may end this way; a broken pipe anywhere else is an error.
        Err(err) if cli.globals.output.is_none() && io::is_broken_pipe(&err) => return Ok(()),
        result => result?,
    }
    if let Some(note) = note {
        eprintln!("{note}");
    }
    Ok(())
}
