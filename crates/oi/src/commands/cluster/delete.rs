//! `oi cluster delete --name N [--namespace NS]`: marks the cluster for deletion
//! (`metadata.deletionTimestamp`). Pure: the next `oi reconcile` removes its pods, files and
//! ports, then the cluster itself.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use oi_api::{DEFAULT_NAMESPACE, ObjectKey, Resource};
use time::OffsetDateTime;

use crate::args::ClusterDeleteArgs;
use crate::commands::Context;
use crate::manifests;

/// # Errors
/// When the manifests do not load or the cluster does not exist.
pub fn run(
    args: &ClusterDeleteArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let mut world = manifests::load_unverified(&args.input, input)?;
    mark_deleted(&mut world.clusters, args, "cluster", ctx.now)?;
    manifests::finish(&world, output)
}

/// Marks the object `args` names (`--name`, `--namespace`, `default` when absent) among
/// `objects` for deletion (`metadata.deletionTimestamp`); `what` names the kind in the error.
/// Marking twice keeps the first time.
///
/// # Errors
/// When there is no such object.
pub fn mark_deleted<T: Resource>(
    objects: &mut BTreeMap<ObjectKey, T>,
    args: &ClusterDeleteArgs,
    what: &str,
    now: OffsetDateTime,
) -> anyhow::Result<()> {
    let key = ObjectKey::new(
        args.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
        args.name.as_str(),
    );
    let object = objects
        .get_mut(&key)
        .ok_or_else(|| anyhow::anyhow!("{what} {key} not found"))?;
    object.metadata_mut().deletion_timestamp.get_or_insert(now);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::InputArgs;
    use time::macros::datetime;

    const WORLD: &str = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata:\n  name: c1\nspec: {}\n";

    fn delete(name: &str, world: &str, now: time::OffsetDateTime) -> anyhow::Result<String> {
        let args = ClusterDeleteArgs {
            input: InputArgs {
                files: vec![],
                max_input_size: oi_cli_io::DEFAULT_MAX_INPUT_BYTES,
            },
            name: name.into(),
            namespace: None,
        };
        let mut out = Vec::new();
        run(
            &args,
            &Context { now, seed: None },
            world.as_bytes(),
            &mut out,
        )?;
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn marks_once_and_refuses_unknown_clusters() {
        let first = delete("c1", WORLD, datetime!(2026-11-22 04:00:00 UTC)).unwrap();
        assert!(
            first.contains("deletionTimestamp: 2026-11-22T04:00:00Z"),
            "{first}"
        );
        let again = delete("c1", &first, datetime!(2026-11-22 05:00:00 UTC)).unwrap();
        assert_eq!(first, again);
        let err = delete("nope", WORLD, datetime!(2026-11-22 04:00:00 UTC)).unwrap_err();
        assert_eq!(err.to_string(), "cluster default/nope not found");
    }
}
