//! `oi keys export|inline`: where the Clusters' and Components' private keys are kept in the
//! manifests ([`oi_api::keys`]). Pure: the keys are moved, never made or changed.

use std::io::{Read, Write};

use crate::args::KeysArgs;
use crate::commands::Context;
use crate::manifests;

/// Prints the manifests with the keys in Secrets (`to_secrets`) or inline, without the
/// Secrets that held them.
///
/// # Errors
/// When the manifests do not load (a reference that cannot be resolved among them), or a
/// key's Secret name would be invalid or taken twice.
pub fn run(
    args: &KeysArgs,
    to_secrets: bool,
    _ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    // As they are: moving keys must work whatever they hold (an expired CA included).
    let mut world = manifests::load_unverified(&args.input, input)?;
    world.keys_in_secrets = to_secrets;
    if !to_secrets {
        world
            .secrets
            .retain(|_, s| !oi_api::keys::made_by_externalize(s));
    }
    manifests::finish(&world, output)
}
