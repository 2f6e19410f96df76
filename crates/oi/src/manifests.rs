//! From input sources to a [`World`] and back: what every manifest-editing command shares.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use oi_api::{Cluster, Kind, LoadError, Object, ObjectKey, ValidationError, World};
use time::OffsetDateTime;

use crate::args::InputArgs;

/// Reads and parses every input into one world (defaulted and validated by the api crate),
/// then verifies everything verifiable at `now` ([`oi_planner::verify::verify_world`]: key
/// material, addresses, ports), so that nothing broken reaches a hypervisor.
///
/// # Errors
/// When an input cannot be read, a document does not parse, or the world is invalid
/// (duplicate names, bad fields, broken key material), every message naming the source and
/// document.
pub fn load(input: &InputArgs, stdin: impl Read, now: OffsetDateTime) -> anyhow::Result<World> {
    let (world, located) = load_located(input, stdin)?;
    let invalid: Vec<ValidationError> = oi_planner::verify::verify_world(&world, now)
        .into_iter()
        .map(|f| {
            let (source_name, position) = located
                .get(&(f.kind, f.object.clone()))
                .cloned()
                .unwrap_or_default();
            ValidationError {
                source_name,
                position,
                kind: f.kind,
                object: f.object,
                field: f.error.field,
                reason: f.error.reason,
            }
        })
        .collect();
    if !invalid.is_empty() {
        return Err(LoadError::Invalid(invalid).into());
    }
    Ok(world)
}

/// [`load`] without the verification: for marking a cluster deleted, which must work however
/// broken its key material is.
///
/// # Errors
/// As [`load`], but for the verification.
pub fn load_unverified(input: &InputArgs, stdin: impl Read) -> anyhow::Result<World> {
    Ok(load_located(input, stdin)?.0)
}

/// Where each object came from: its source's name and its document's position.
type Located = BTreeMap<(Kind, ObjectKey), (String, usize)>;

fn load_located(input: &InputArgs, stdin: impl Read) -> anyhow::Result<(World, Located)> {
    let sources = oi_cli_io::read_sources(&input.files, stdin, input.max_input_size)?;
    let mut raw = Vec::new();
    for source in &sources {
        raw.extend(oi_api::parse_raw(&source.text, &source.name)?);
    }
    // Keys kept in Secrets, in whichever input: inline again, and written back so.
    let keys_in_secrets = oi_api::keys::resolve(&mut raw)?;
    let documents = oi_api::parse_raw_documents(raw)?;
    let located: Located = documents
        .iter()
        .map(|d| {
            (
                (d.object.kind(), d.object.key()),
                (d.source_name.clone(), d.position),
            )
        })
        .collect();
    let mut world = World::from_documents(documents).map_err(LoadError::Invalid)?;
    world.keys_in_secrets = keys_in_secrets;
    world.apply_defaults();
    Ok((world, located))
}

/// Checks an object a command made from its flags, as if it came in a manifest (its key
/// material too).
///
/// # Errors
/// Every invalid field, one per line.
pub fn validate_new(object: &Object) -> anyhow::Result<()> {
    let mut errors = oi_api::validate_object(object);
    if let Object::Hypervisor(h) = object {
        errors.extend(oi_planner::verify::verify_hypervisor(h));
    }
    if errors.is_empty() {
        return Ok(());
    }
    let lines: Vec<_> = errors
        .iter()
        .map(|e| format!("field `{}`: {}", e.field, e.reason))
        .collect();
    anyhow::bail!(
        "invalid {} {}: {}",
        object.kind(),
        object.key(),
        lines.join("; ")
    )
}

/// The identities of the files a command reads (stdin too, when it is a file), with the
/// names they were given.
pub fn input_ids(input: &crate::args::InputArgs) -> Vec<(String, oi_cli_io::FileId)> {
    let mut ids: Vec<(String, oi_cli_io::FileId)> = input
        .files
        .iter()
        .filter(|f| f.as_os_str() != "-")
        .filter_map(|f| oi_cli_io::file_id(f).map(|id| (f.display().to_string(), id)))
        .collect();
    if input.reads_stdin()
        && let Some(id) = oi_cli_io::stdin_id()
    {
        ids.push(("stdin".to_string(), id));
    }
    ids
}

/// Writes the world as manifests.
///
/// # Errors
/// When the world cannot be serialized.
pub fn finish(world: &World, output: &mut impl Write) -> anyhow::Result<()> {
    output.write_all(world.to_yaml()?.as_bytes())?;
    Ok(())
}

/// The cluster `selector` names: `NAME` (in whatever namespace, if only one has it) or
/// `NAMESPACE/NAME`; with no selector, the only cluster there is.
///
/// # Errors
/// When no cluster matches, or several do (naming them).
pub fn select_cluster<'w>(
    world: &'w World,
    selector: Option<&str>,
) -> anyhow::Result<(&'w ObjectKey, &'w Cluster)> {
    select(world, selector)
}

/// Like [`select_cluster`], for changing the cluster.
///
/// # Errors
/// As [`select_cluster`].
pub fn select_cluster_mut<'w>(
    world: &'w mut World,
    selector: Option<&str>,
) -> anyhow::Result<&'w mut Cluster> {
    let key = select(world, selector)?.0.clone();
    // `select` just found this key in the same map.
    world
        .clusters
        .get_mut(&key)
        .ok_or_else(|| anyhow::anyhow!("cluster {key} not found"))
}

fn select<'w>(
    world: &'w World,
    selector: Option<&str>,
) -> anyhow::Result<(&'w ObjectKey, &'w Cluster)> {
    let matches: Vec<_> = match selector {
        None => world.clusters.iter().collect(),
        Some(s) => match s.split_once('/') {
            Some((namespace, name)) => world
                .clusters
                .get_key_value(&ObjectKey::new(namespace, name))
                .into_iter()
                .collect(),
            None => world.clusters.iter().filter(|(k, _)| k.name == s).collect(),
        },
    };
    let names = || {
        matches
            .iter()
            .map(|(k, _)| k.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (matches.as_slice(), selector) {
        ([only], _) => Ok(*only),
        ([], None) => anyhow::bail!("no cluster in the manifests"),
        ([], Some(s)) => anyhow::bail!("cluster {s:?} not found"),
        (_, None) => anyhow::bail!(
            "several clusters in the manifests ({}): choose one with --cluster",
            names()
        ),
        (_, Some(s)) => anyhow::bail!(
            "several clusters are named {s:?} ({}): use --cluster NAMESPACE/NAME",
            names()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oi_api::{ClusterSpec, ObjectMeta};

    fn world(keys: &[(&str, &str)]) -> World {
        let mut world = World::default();
        for (namespace, name) in keys {
            world.insert(Object::Cluster(Cluster::new(
                ObjectMeta::namespaced(*namespace, *name),
                ClusterSpec::default(),
            )));
        }
        world
    }

    fn selected(world: &World, selector: Option<&str>) -> Result<String, String> {
        select_cluster(world, selector)
            .map(|(key, _)| key.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn selection_by_name_namespace_or_uniqueness() {
        let w = world(&[("default", "a"), ("team", "a"), ("team", "b")]);
        assert_eq!(selected(&w, Some("b")), Ok("team/b".into()));
        assert_eq!(selected(&w, Some("team/a")), Ok("team/a".into()));
        assert_eq!(
            selected(&w, Some("a")),
            Err(
                "several clusters are named \"a\" (default/a, team/a): use --cluster NAMESPACE/NAME"
                    .into()
            )
        );
        assert_eq!(
            selected(&w, None),
            Err(
                "several clusters in the manifests (default/a, team/a, team/b): choose one with --cluster"
                    .into()
            )
        );
        assert_eq!(
            selected(&w, Some("other/a")),
            Err("cluster \"other/a\" not found".into())
        );
        let single = world(&[("team", "b")]);
        assert_eq!(selected(&single, None), Ok("team/b".into()));
        assert_eq!(
            selected(&World::default(), None),
            Err("no cluster in the manifests".into())
        );
    }

    #[test]
    fn cluster_can_be_changed_through_its_selector() {
        let mut w = world(&[("team", "b")]);
        select_cluster_mut(&mut w, Some("b"))
            .unwrap()
            .spec
            .join_tokens
            .push("t".into());
        assert_eq!(
            w.clusters[&ObjectKey::new("team", "b")].spec.join_tokens,
            ["t"]
        );
    }
}
