//! `oi completion SHELL`: a completion script for bash, zsh, fish (and the other shells
//! clap_complete knows).

use std::io::Write;

use clap::CommandFactory as _;

use crate::args::{Cli, CompletionArgs};

/// # Errors
/// When the output cannot be written.
pub fn run(args: &CompletionArgs, output: &mut impl Write) -> anyhow::Result<()> {
    // clap_complete panics on write errors; render into memory, which cannot fail, first.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "oi", &mut script);
    output.write_all(&script)?;
    Ok(())
}
