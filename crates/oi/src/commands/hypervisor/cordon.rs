//! `oi hypervisor cordon|uncordon --name N`: sets or clears `spec.unschedulable` (ours);
//! `uncordon` clears `spec.drain` too (what moved stays where it went). Pure: placement reads
//! them at the next `oi cluster inject` or `oi reconcile`; nothing that runs on the
//! hypervisor moves.

use std::io::{Read, Write};

use oi_api::ObjectKey;

use crate::args::HypervisorNameArgs;
use crate::manifests;

/// # Errors
/// When the manifests do not load or the hypervisor does not exist.
pub fn run(
    args: &HypervisorNameArgs,
    unschedulable: bool,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let mut world = manifests::load_unverified(&args.input, input)?;
    let key = ObjectKey::cluster_scoped(args.name.as_str());
    let hypervisor = world
        .hypervisors
        .get_mut(&key)
        .ok_or_else(|| anyhow::anyhow!("hypervisor {key} not found"))?;
    hypervisor.spec.unschedulable = unschedulable;
    if !unschedulable {
        hypervisor.spec.drain = false;
    }
    manifests::finish(&world, output)
}
