//! `oi version`: the version of oi; `oi version kubernetes`: the supported Kubernetes
//! versions; `oi version component`: the image of a component.

pub mod component;
pub mod kubernetes;

use std::io::Write;

use crate::args::{VersionArgs, VersionCommand};

/// # Errors
/// When the output cannot be written, or for an unsupported Kubernetes version.
pub fn run(args: &VersionArgs, output: &mut impl Write) -> anyhow::Result<()> {
    match &args.command {
        None => {
            writeln!(output, "oi {}", env!("CARGO_PKG_VERSION"))?;
            Ok(())
        }
        Some(VersionCommand::Kubernetes) => kubernetes::run(output),
        Some(VersionCommand::Component(args)) => component::run(args, output),
    }
}
