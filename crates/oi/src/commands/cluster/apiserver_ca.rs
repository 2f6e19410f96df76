//! `oi cluster apiserver-ca [--cluster N]`: the PEM certificate of the CA that signs the
//! cluster's API server certificate (what clients and joining nodes trust).

use std::io::{Read, Write};

use anyhow::Context as _;

use crate::args::ClusterSelectArgs;
use crate::commands::Context;
use crate::manifests;

/// # Errors
/// When the manifests do not load, the cluster is not found, or it has no PKI yet.
pub fn run(
    args: &ClusterSelectArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let (key, cluster) = manifests::select_cluster(&world, args.cluster.as_deref())?;
    let ca = cluster
        .spec
        .api_server
        .ca
        .as_ref()
        .filter(|ca| !ca.certificate.is_empty())
        .with_context(|| {
            format!(
                "cluster {key} has no API server CA yet (was it injected with `oi cluster inject`?)"
            )
        })?;
    output.write_all(ca.certificate.as_bytes())?;
    if !ca.certificate.ends_with('\n') {
        output.write_all(b"\n")?;
    }
    Ok(())
}
