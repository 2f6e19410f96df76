//! `oi join-token generate`: print a new bootstrap token.

use std::io::Write;

use crate::commands::Context;

/// # Errors
/// When the output cannot be written.
pub fn run(ctx: &Context, output: &mut impl Write) -> anyhow::Result<()> {
    let token = super::generate_token(&mut ctx.rng());
    writeln!(output, "{token}")?;
    Ok(())
}
