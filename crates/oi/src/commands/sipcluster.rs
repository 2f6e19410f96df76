//! `oi sipcluster delete --name N [--namespace NS]`: marks a SIPCluster for deletion
//! (`metadata.deletionTimestamp`). Pure: the next `oi reconcile` takes our labels off its
//! hosts and removes it.

use std::io::{Read, Write};

use crate::args::ClusterDeleteArgs;
use crate::commands::Context;
use crate::commands::cluster::delete::mark_deleted;
use crate::manifests;

/// # Errors
/// When the manifests do not load or the SIPCluster does not exist.
pub fn delete(
    args: &ClusterDeleteArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let mut world = manifests::load_unverified(&args.input, input)?;
    mark_deleted(&mut world.sip_clusters, args, "sipcluster", ctx.now)?;
    manifests::finish(&world, output)
}
