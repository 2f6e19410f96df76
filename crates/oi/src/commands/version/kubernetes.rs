//! `oi version kubernetes`: the default and the supported Kubernetes versions, as YAML.

use std::io::Write;

use oi_api::versions;

/// # Errors
/// When the output cannot be written.
pub fn run(output: &mut impl Write) -> anyhow::Result<()> {
    writeln!(output, "default: {}", versions::default_release().version)?;
    writeln!(output, "supported:")?;
    for version in versions::supported_versions() {
        writeln!(output, "- {version}")?;
    }
    Ok(())
}
