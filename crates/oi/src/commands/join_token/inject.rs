//! `oi join-token inject --cluster N`: add a new bootstrap token to the cluster's
//! `spec.joinTokens` and print all manifests. The token also goes to stderr, once the
//! manifests are written, so that it can be handed to the joining node.

use std::io::{Read, Write};

use crate::args::JoinTokenInjectArgs;
use crate::commands::Context;
use crate::manifests;

/// Returns the new token.
///
/// # Errors
/// When the manifests do not load or the cluster is not found.
pub fn run(
    args: &JoinTokenInjectArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<String> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let cluster = manifests::select_cluster_mut(&mut world, Some(&args.cluster))?;
    let token = super::generate_token(&mut ctx.rng());
    cluster.spec.join_tokens.push(token.clone());
    manifests::finish(&world, output)?;
    Ok(token)
}
