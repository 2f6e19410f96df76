//! Private keys on the management cluster: every private key of a Cluster (its CAs, the
//! service-account key, the join key, the WireGuard keys, the client certificates it issued)
//! and of a Component (its leaf certificates') lives in a Secret of its namespace, and the
//! object holds references to them
//! (`privateKeyRef: {name, key}`) beside its public certificates. The Secrets are those
//! `oi keys export` makes (`oi_api::keys`: Cluster API's names where they exist,
//! `kubernetes.io/tls` or Opaque, owned by the Cluster, labelled [`KEYS_OF_KIND`]), so a world
//! moved from `oi` to the manager keeps its keys.
//!
//! ```text
//!   controllers ── typed Cluster, keys inline (in memory only) ──┐
//!                                                               ▼
//!   KubeStore::get        GET Cluster ─► resolve each reference (watch cache, else GET Secret)
//!   KubeStore::update     Secrets first (only those that changed) ─► PUT Cluster with references
//!                         ─► delete the Secrets no longer referenced (all of them when the
//!                            update lets the Cluster go)
//!   a Cluster read with inline keys (oneinfra's manifests): moved at once, an event says so
//! ```
//!
//! **A key and its certificate never part.** A Secret and the Cluster cannot be written
//! together, and a write may be interrupted between the two. So a Secret whose key changes
//! keeps the pair it held under [`PREVIOUS_CERTIFICATE`] and [`PREVIOUS_KEY`], and a
//! reference resolves to the key whose certificate (or public key) is the one beside the
//! reference in the object: the stored Cluster always gets the key of the certificate it
//! holds, whether or not its own write went through. A Secret that holds neither is an error,
//! never an absent key (which would have a new CA made).

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use oi_api::keys::{KEYS_OF, SECRET_CERTIFICATE, SECRET_KEY};
use oi_api::{Kind, Secret};
use serde_json::Value;

pub use oi_api::keys::KEYS_OF_KIND;

/// The Secret key of the certificate (or public key) a Secret held before its last change.
pub const PREVIOUS_CERTIFICATE: &str = "previous.crt";
/// The Secret key of the private key a Secret held before its last change.
pub const PREVIOUS_KEY: &str = "previous.key";

/// Whether objects of `kind` keep their private keys in Secrets on the management cluster:
/// Clusters (their CAs, service-account, join and WireGuard keys, the client certificates
/// they issued) and Components (their leaf certificates' keys). (Hypervisors' CRI client keys
/// and SIPClusters' status keys are still held inline.)
pub fn keyed(kind: Kind) -> bool {
    matches!(kind, Kind::Cluster | Kind::Component)
}

/// `object` (a serialized `kind`) with every private key replaced by a reference, and the
/// Secrets (as JSON) that hold them.
///
/// # Errors
/// When two fields would share a Secret, or a name is not a valid Secret name.
pub fn externalize(kind: Kind, object: &Value) -> Result<(Value, Vec<Value>), String> {
    let mut yaml: serde_yaml_ng::Value =
        serde_yaml_ng::to_value(object).map_err(|e| e.to_string())?;
    let secrets = oi_api::keys::externalize(kind, &mut yaml)?;
    let body = serde_json::to_value(&yaml).map_err(|e| e.to_string())?;
    let secrets = secrets
        .iter()
        .map(|s| serde_json::to_value(s).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((body, secrets))
}

/// Whether `object` holds a private key inline.
pub fn holds_inline_keys(object: &Value) -> bool {
    serde_yaml_ng::to_value(object).is_ok_and(|v| oi_api::keys::holds_inline_keys(&v))
}

/// The Secrets `object` references, by name.
pub fn referenced(object: &Value) -> BTreeSet<String> {
    serde_yaml_ng::to_value(object)
        .map(|v| oi_api::keys::referenced_secrets(&v))
        .unwrap_or_default()
}

/// Puts every referenced key of `object` back inline from `secrets` (the object's namespace's
/// Secrets it references, by name).
///
/// # Errors
/// The first reference that cannot be resolved: `field: reason`.
pub fn resolve(object: &mut Value, secrets: &BTreeMap<String, Secret>) -> Result<(), String> {
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(oi_api::DEFAULT_NAMESPACE)
        .to_string();
    let mut yaml: serde_yaml_ng::Value =
        serde_yaml_ng::to_value(&*object).map_err(|e| e.to_string())?;
    oi_api::keys::resolve_object(&mut yaml, "", &mut |name, key, public| {
        let secret = secrets
            .get(name)
            .ok_or_else(|| format!("Secret {namespace}/{name} does not exist"))?;
        key_for(secret, key, public)
            .map_err(|reason| format!("Secret {namespace}/{name}: {reason}"))
    })
    .map_err(|(field, reason)| format!("{field}: {reason}"))?;
    *object = serde_json::to_value(&yaml).map_err(|e| e.to_string())?;
    Ok(())
}

/// The private key `secret` holds under `key` for the public part `public`: its current pair's
/// or, when the public part is its previous pair's, that one's (see the module
/// documentation).
///
/// # Errors
/// A key that is absent or not text, or a Secret holding the key of another public part.
pub fn key_for(secret: &Secret, key: &str, public: Option<&str>) -> Result<String, String> {
    let text = |k: &str| -> Option<Result<String, String>> {
        secret.value(k).map(|v| {
            v.map_err(|e| format!("key `{k}` is not base64: {e}"))
                .and_then(|b| String::from_utf8(b).map_err(|_| format!("key `{k}` is not text")))
        })
    };
    let current = text(key).ok_or_else(|| format!("it has no key `{key}`"))??;
    let Some(public) = public else {
        return Ok(current);
    };
    if key != SECRET_KEY {
        return Ok(current);
    }
    let same = |k: &str| {
        text(k)
            .and_then(Result::ok)
            .is_some_and(|p| p.trim() == public.trim())
    };
    if same(SECRET_CERTIFICATE) || secret.value(SECRET_CERTIFICATE).is_none() {
        return Ok(current);
    }
    if same(PREVIOUS_CERTIFICATE) {
        return text(PREVIOUS_KEY)
            .ok_or_else(|| format!("it has `{PREVIOUS_CERTIFICATE}` but no `{PREVIOUS_KEY}`"))?;
    }
    Err(format!(
        "it holds the key of another certificate than the object's (`{SECRET_CERTIFICATE}` \
         differs)"
    ))
}

/// Whether writing `wanted` (a Secret [`externalize`] made) where `held` is stored changes
/// its key, or `held` keeps a previous pair to drop: then [`to_write`] needs the public part
/// the stored object has.
pub fn changes_key(wanted: &Value, held: &Secret) -> bool {
    let wanted_key = wanted
        .pointer("/data/tls.key")
        .and_then(Value::as_str)
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok());
    held.value(SECRET_KEY).and_then(Result::ok) != wanted_key || held.value(PREVIOUS_KEY).is_some()
}

/// The Secret to write so that it holds `wanted` (a Secret [`externalize`] made), given the
/// one stored (`held`) and the public part the stored object has beside its reference to it
/// (`stored_public`): `None` when `held` holds exactly that already.
///
/// When the key changes, the pair of `held` (current or previous) that the stored object
/// uses is kept as the previous one, so that the stored object still resolves if its own
/// write does not go through; once it did, the same call (with the new public part stored)
/// drops the previous pair.
pub fn to_write(
    wanted: &Value,
    held: Option<&Secret>,
    stored_public: Option<&str>,
) -> Option<Value> {
    let Some(held) = held else {
        return Some(wanted.clone());
    };
    let wanted_text = |k: &str| {
        wanted
            .pointer(&format!("/data/{k}"))
            .and_then(Value::as_str)
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
            .and_then(|b| String::from_utf8(b).ok())
    };
    let held_text = |k: &str| {
        held.value(k)
            .and_then(Result::ok)
            .and_then(|b| String::from_utf8(b).ok())
    };
    let same_pair = [SECRET_CERTIFICATE, SECRET_KEY]
        .iter()
        .all(|k| wanted_text(k) == held_text(k));
    // The pair the stored object uses, when it is not the one wanted.
    let previous = [
        (SECRET_CERTIFICATE, SECRET_KEY),
        (PREVIOUS_CERTIFICATE, PREVIOUS_KEY),
    ]
    .into_iter()
    .find_map(|(c, k)| {
        let certificate = held_text(c)?;
        let key = held_text(k)?;
        let used = stored_public.is_some_and(|p| p.trim() == certificate.trim());
        (used && Some(&certificate) != wanted_text(SECRET_CERTIFICATE).as_ref())
            .then_some((certificate, key))
    });
    let held_owners = serde_json::to_value(&held.metadata.owner_references).unwrap_or_default();
    let wanted_owners = wanted
        .pointer("/metadata/ownerReferences")
        .cloned()
        .unwrap_or_else(|| Value::Array(Vec::new()));
    let labelled = held.metadata.labels.contains_key(KEYS_OF_KIND)
        && held.metadata.annotations.contains_key(KEYS_OF);
    let type_ = wanted
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let held_previous = held_text(PREVIOUS_CERTIFICATE);
    let unchanged = same_pair
        && owners_match(&held_owners, &wanted_owners)
        && labelled
        && held.type_ == type_
        && held_previous == previous.as_ref().map(|(c, _)| c.clone());
    if unchanged {
        return None;
    }
    let mut out = wanted.clone();
    if let Some((certificate, key)) = previous
        && let Some(Value::Object(map)) = out.get_mut("data")
    {
        let b64 = |s: &str| Value::from(base64::engine::general_purpose::STANDARD.encode(s));
        map.insert(PREVIOUS_CERTIFICATE.into(), b64(&certificate));
        map.insert(PREVIOUS_KEY.into(), b64(&key));
    }
    Some(out)
}

/// The public part beside each reference of `object` (a stored object), by Secret name.
pub fn public_parts(object: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(value: &Value, out: &mut BTreeMap<String, String>) {
        match value {
            Value::Object(map) => {
                if let Some(name) = map
                    .get(oi_api::keys::PRIVATE_KEY_REF)
                    .and_then(|r| r.get("name"))
                    .and_then(Value::as_str)
                    && let Some(public) = ["certificate", "publicKey"]
                        .iter()
                        .find_map(|f| map.get(*f).and_then(Value::as_str))
                {
                    out.insert(name.to_string(), public.to_string());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(object, &mut out);
    out
}

/// Whether two `ownerReferences` lists name the same owners (by uid, kind and name).
fn owners_match(a: &Value, b: &Value) -> bool {
    let ids = |v: &Value| -> BTreeSet<(String, String, String)> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                let s = |f: &str| {
                    o.get(f)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                (s("uid"), s("kind"), s("name"))
            })
            .collect()
    };
    ids(a) == ids(b)
}

/// Whether `secret` holds keys of the object `kind`/`name` (its [`KEYS_OF`] annotation).
pub fn holds_keys_of(secret: &Secret, kind: Kind, name: &str) -> bool {
    secret.metadata.annotations.get(KEYS_OF).map(String::as_str) == Some(&format!("{kind}/{name}"))
}

#[cfg(test)]
mod tests;
