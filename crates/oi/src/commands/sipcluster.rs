//! `oi sipcluster delete --name N [--namespace NS]`: marks a SIPCluster for deletion
//! (`metadata.deletionTimestamp`). Pure: the next `oi reconcile` takes our labels off its
//! hosts and removes it.

use std::io::{Read, Write};

use oi_api::{DEFAULT_NAMESPACE, ObjectKey};

use crate::args::ClusterDeleteArgs;
use crate::commands::Context;
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
    let key = ObjectKey::new(
        args.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
        args.name.as_str(),
    );
    let sip = world
        .sip_clusters
        .get_mut(&key)
        .ok_or_else(|| anyhow::anyhow!("sipcluster {key} not found"))?;
    // Marking twice keeps the first time.
    sip.metadata.deletion_timestamp.get_or_insert(ctx.now);
    manifests::finish(&world, output)
}
