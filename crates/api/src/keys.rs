//! Private keys by reference: a Cluster's or a Component's private keys kept in Secrets of
//! its namespace instead of inline, each `privateKey` field replaced by a
//! `privateKeyRef: {name, key}` naming the Secret and its key.
//!
//! In memory a [`crate::World`] always holds its keys inline: [`resolve`] puts them back
//! while the inputs are still untyped documents (the Secrets may come in any input, after
//! the objects that reference them), and [`externalize`] moves them out again when a world
//! read that way is written ([`crate::World::keys_in_secrets`]). A reference that cannot be
//! resolved is an error naming the document and the field: a key is never taken as absent,
//! which would have a new CA made in its place.
//!
//! The Secrets are named `<object>-<field path>` (`c1-certificate-authorities-etcd-peer`,
//! `c1-join-key`), with Cluster API's names where they exist: `<cluster>-ca` (the API
//! server CA), `<cluster>-etcd` and `<cluster>-sa`. A key with its certificate is a
//! `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`); a key pair an `Opaque` one with the
//! public key as `tls.crt`, as Cluster API keeps its service-account keys. Each carries the
//! annotation [`KEYS_OF`] naming its object and, when the object has a uid, an owner
//! reference to it, so that it goes with it on a management cluster.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde_yaml_ng::{Mapping, Value};

use crate::manifest::{ManifestError, RawDocument};
use crate::meta::{DEFAULT_NAMESPACE, Kind};

/// The field of an inline private key.
pub const PRIVATE_KEY: &str = "privateKey";
/// The field of a private key kept in a Secret: `{name, key}`, a Secret of the object's
/// namespace.
pub const PRIVATE_KEY_REF: &str = "privateKeyRef";
/// The Secret key a private key is kept under.
pub const SECRET_KEY: &str = "tls.key";
/// The Secret key of the certificate (or public key) beside it.
pub const SECRET_CERTIFICATE: &str = "tls.crt";
/// The annotation of the Secrets [`externalize`] makes: `<Kind>/<name>` of the object whose
/// keys they hold.
pub const KEYS_OF: &str = "oneinfra.ereslibre.es/private-keys-of";
/// The label of the same Secrets: the kind of the object whose keys they hold, so that a
/// manager can watch them (and only them) by a label selector.
pub const KEYS_OF_KIND: &str = "oneinfra.ereslibre.es/private-keys-of-kind";

/// The Secrets of the inputs, by namespace and name: each key's value, `stringData` over
/// `data` (decoded).
type Secrets = BTreeMap<(String, String), BTreeMap<String, Result<String, String>>>;

/// Puts every referenced private key of `documents` back inline, from the Secrets among
/// them. Returns whether any key was referenced.
///
/// # Errors
/// The first reference that cannot be resolved (no such Secret among the inputs, no such
/// key in it, a value that is not base64 or not text, a field holding both a key and a
/// reference, a reference that is not `{name, key}`), naming its document and field.
pub fn resolve(documents: &mut [RawDocument]) -> Result<bool, ManifestError> {
    let secrets = secrets(documents);
    let mut referenced = false;
    for document in documents.iter_mut() {
        let (source_name, position) = (document.source_name.clone(), document.position);
        for (prefix, object) in objects_mut(&mut document.value) {
            let header = Header::of(object);
            if header.kind == Some(Kind::Secret) {
                continue;
            }
            let namespace = header.namespace.clone();
            let mut lookup = |name: &str, key: &str, _: Option<&str>| -> Result<String, String> {
                secrets
                    .get(&(namespace.clone(), name.to_string()))
                    .ok_or_else(|| {
                        format!(
                            "Secret {namespace}/{name} is not among the inputs (give its \
                             manifest with -f)"
                        )
                    })?
                    .get(key)
                    .ok_or_else(|| format!("Secret {namespace}/{name} has no key `{key}`"))?
                    .clone()
                    .map_err(|reason| format!("Secret {namespace}/{name} key `{key}`: {reason}"))
            };
            referenced |=
                resolve_object(object, &prefix, &mut lookup).map_err(|(path, message)| {
                    ManifestError::Field {
                        source_name: source_name.clone(),
                        position,
                        kind: header.kind,
                        name: header.name.clone(),
                        path,
                        message,
                    }
                })?;
        }
    }
    Ok(referenced)
}

/// Puts every referenced private key of one object back inline, each from what `lookup`
/// answers for the Secret's name and key (the Secret is the object's namespace's) and the
/// public part beside the reference (its `certificate` or `publicKey`, when set): the key,
/// or why it cannot be had. `prefix` starts the fields' paths in errors (`items[0].`).
/// Returns whether any key was referenced.
///
/// # Errors
/// The first reference that cannot be resolved, as `(field, reason)`.
pub fn resolve_object(
    object: &mut Value,
    prefix: &str,
    lookup: &mut Lookup<'_>,
) -> Result<bool, (String, String)> {
    let mut referenced = false;
    let mut path = prefix.to_string();
    walk(object, &mut path, &mut |mapping, at| {
        let Some(reference) = mapping.get(PRIVATE_KEY_REF) else {
            return Ok(());
        };
        let field = format!("{at}{PRIVATE_KEY_REF}");
        let (name, key) = reference_of(reference).ok_or_else(|| {
            (
                field.clone(),
                "expected `{name, key}`: the Secret's name and its key".to_string(),
            )
        })?;
        if mapping
            .get(PRIVATE_KEY)
            .and_then(Value::as_str)
            .is_some_and(|k| !k.is_empty())
        {
            return Err((
                field,
                format!("both `{PRIVATE_KEY}` and `{PRIVATE_KEY_REF}` are set: keep one"),
            ));
        }
        let public = ["certificate", "publicKey"]
            .iter()
            .find_map(|f| mapping.get(*f).and_then(Value::as_str))
            .filter(|p| !p.is_empty());
        let value = lookup(&name, &key, public).map_err(|reason| (field.clone(), reason))?;
        mapping.remove(PRIVATE_KEY_REF);
        mapping.insert(PRIVATE_KEY.into(), value.into());
        referenced = true;
        Ok(())
    })?;
    Ok(referenced)
}

/// What [`resolve_object`] asks for each reference: the key held in Secret `name` under
/// `key`, for the public part `public`.
pub type Lookup<'a> = dyn FnMut(&str, &str, Option<&str>) -> Result<String, String> + 'a;

/// Whether `object` holds any private key inline (a non-empty `privateKey`).
pub fn holds_inline_keys(object: &Value) -> bool {
    match object {
        Value::Mapping(mapping) => {
            mapping
                .get(PRIVATE_KEY)
                .and_then(Value::as_str)
                .is_some_and(|k| !k.is_empty())
                || mapping.values().any(holds_inline_keys)
        }
        Value::Sequence(items) => items.iter().any(holds_inline_keys),
        _ => false,
    }
}

/// The Secrets `object` references, by name.
pub fn referenced_secrets(object: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut object = object.clone();
    let _ = walk(&mut object, &mut String::new(), &mut |mapping, _| {
        if let Some((name, _)) = mapping.get(PRIVATE_KEY_REF).and_then(reference_of) {
            out.insert(name);
        }
        Ok(())
    });
    out
}

/// Moves every private key of `object` (a serialized Cluster or Component) into Secrets:
/// each `privateKey` becomes a `privateKeyRef`. Returns the Secrets, as documents.
///
/// # Errors
/// When two fields would share a Secret name, or a name is not a valid Secret name (too
/// long), naming the object and the fields.
pub fn externalize(kind: Kind, object: &mut Value) -> Result<Vec<Value>, String> {
    let header = Header::of(object);
    let name = header.name.clone().unwrap_or_default();
    let uid = object
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut secrets: Vec<Value> = Vec::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut path = String::new();
    walk(object, &mut path, &mut |mapping, at| {
        let Some(key) = mapping
            .get(PRIVATE_KEY)
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
            .map(str::to_string)
        else {
            return Ok(());
        };
        let field = at.trim_end_matches('.');
        // An item of a list is named by its `name` where it has one (a VPN peer), so that
        // its Secret stays its own when the list changes.
        let named = match (
            field.rfind('['),
            mapping.get("name").and_then(Value::as_str),
        ) {
            (Some(i), Some(item)) if field.ends_with(']') && !item.is_empty() => {
                format!("{}.{item}", &field[..i])
            }
            _ => field.to_string(),
        };
        let secret = secret_name(kind, &name, &named);
        if let Some(other) = names.insert(secret.clone(), field.to_string()) {
            return Err((
                field.to_string(),
                format!("its Secret would be named {secret}, as the one of `{other}`"),
            ));
        }
        if !is_secret_name(&secret) {
            return Err((
                field.to_string(),
                format!("{secret:?} is not a valid Secret name (at most 253 characters)"),
            ));
        }
        let (type_, public) = match (
            mapping.get("certificate").and_then(Value::as_str),
            mapping.get("publicKey").and_then(Value::as_str),
        ) {
            (Some(certificate), _) => ("kubernetes.io/tls", Some(certificate)),
            (None, public) => ("Opaque", public),
        };
        let b64 = |s: &str| Value::from(base64::engine::general_purpose::STANDARD.encode(s));
        let mut data = Mapping::new();
        if let Some(public) = public.filter(|p| !p.is_empty()) {
            data.insert(SECRET_CERTIFICATE.into(), b64(public));
        } else if type_ == "kubernetes.io/tls" {
            // kubernetes.io/tls requires both keys.
            data.insert(SECRET_CERTIFICATE.into(), "".into());
        }
        data.insert(SECRET_KEY.into(), b64(&key));
        let mut metadata = Mapping::new();
        metadata.insert("name".into(), secret.clone().into());
        metadata.insert("namespace".into(), header.namespace.clone().into());
        let mut annotations = Mapping::new();
        annotations.insert(KEYS_OF.into(), format!("{kind}/{name}").into());
        metadata.insert("annotations".into(), Value::Mapping(annotations));
        let mut labels = Mapping::new();
        labels.insert(KEYS_OF_KIND.into(), kind.to_string().into());
        metadata.insert("labels".into(), Value::Mapping(labels));
        if let Some(uid) = &uid {
            let mut owner = Mapping::new();
            owner.insert("apiVersion".into(), kind.api_version().into());
            owner.insert("kind".into(), kind.to_string().into());
            owner.insert("name".into(), name.clone().into());
            owner.insert("uid".into(), uid.clone().into());
            owner.insert("controller".into(), true.into());
            owner.insert("blockOwnerDeletion".into(), true.into());
            metadata.insert(
                "ownerReferences".into(),
                Value::Sequence(vec![Value::Mapping(owner)]),
            );
        }
        let mut document = Mapping::new();
        document.insert("apiVersion".into(), "v1".into());
        document.insert("kind".into(), "Secret".into());
        document.insert("metadata".into(), Value::Mapping(metadata));
        document.insert("type".into(), type_.into());
        document.insert("data".into(), Value::Mapping(data));
        secrets.push(Value::Mapping(document));
        let mut reference = Mapping::new();
        reference.insert("name".into(), secret.into());
        reference.insert("key".into(), SECRET_KEY.into());
        mapping.remove(PRIVATE_KEY);
        mapping.insert(PRIVATE_KEY_REF.into(), Value::Mapping(reference));
        Ok(())
    })
    .map_err(|(field, reason)| format!("{kind} {name}: field `{field}`: {reason}"))?;
    Ok(secrets)
}

/// The name of the Secret holding the key at `field` (`spec.apiServer.ca`) of the object
/// `kind`/`name`: Cluster API's where it has one, otherwise `<name>-<field>` in kebab case
/// (without its leading `spec.` or `status.`).
pub fn secret_name(kind: Kind, name: &str, field: &str) -> String {
    if kind == Kind::Cluster {
        match field {
            "spec.apiServer.ca" => return format!("{name}-ca"),
            "spec.etcdServer.ca" => return format!("{name}-etcd"),
            "spec.apiServer.serviceAccount" => return format!("{name}-sa"),
            _ => {}
        }
    }
    let field = field
        .strip_prefix("spec.")
        .or_else(|| field.strip_prefix("status."))
        .unwrap_or(field);
    let mut out = format!("{name}-");
    for (i, segment) in field.split('.').enumerate() {
        if i > 0 {
            out.push('-');
        }
        for (j, c) in segment.chars().enumerate() {
            if c.is_ascii_uppercase() {
                if j > 0 {
                    out.push('-');
                }
                out.push(c.to_ascii_lowercase());
            } else if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                out.push(c);
            } else if c == ']' {
                // `peers[0]` is `peers-0`.
            } else {
                out.push('-');
            }
        }
    }
    out
}

/// Whether `name` is a valid Secret name: a DNS subdomain (RFC 1123) of at most 253
/// characters.
fn is_secret_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `secret` is annotated [`KEYS_OF`]: one [`externalize`] made.
pub fn made_by_externalize(secret: &crate::Secret) -> bool {
    secret.metadata.annotations.contains_key(KEYS_OF)
}

/// What a document says it is.
struct Header {
    kind: Option<Kind>,
    name: Option<String>,
    namespace: String,
}

impl Header {
    fn of(value: &Value) -> Header {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let kind = text(value.get("kind"))
            .and_then(|k| Kind::from_kind_str(&k))
            .filter(|k| text(value.get("apiVersion")).as_deref() == Some(k.api_version()));
        let metadata = value.get("metadata");
        Header {
            kind,
            name: text(metadata.and_then(|m| m.get("name"))),
            namespace: text(metadata.and_then(|m| m.get("namespace")))
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
        }
    }
}

/// The objects of a document, each with the prefix of its fields' paths: the document
/// itself, or a list's items (`items[i].`).
fn objects_mut(value: &mut Value) -> Vec<(String, &mut Value)> {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value.get("items").is_some();
    if !is_list {
        return vec![(String::new(), value)];
    }
    match value.get_mut("items") {
        Some(Value::Sequence(items)) => items
            .iter_mut()
            .enumerate()
            .map(|(i, item)| (format!("items[{i}]."), item))
            .collect(),
        _ => Vec::new(),
    }
}

/// Every Secret of `documents`: each key's value, or why it cannot be read as text.
fn secrets(documents: &mut [RawDocument]) -> Secrets {
    // (objects_mut lends each document's objects mutably; nothing is changed here.)
    let mut out = Secrets::new();
    for document in documents.iter_mut() {
        for (_, object) in objects_mut(&mut document.value) {
            let header = Header::of(object);
            if header.kind != Some(Kind::Secret) {
                continue;
            }
            let Some(name) = header.name else { continue };
            let mut values: BTreeMap<String, Result<String, String>> = BTreeMap::new();
            if let Some(Value::Mapping(data)) = object.get("data") {
                for (k, v) in data {
                    let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
                        continue;
                    };
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .map_err(|e| format!("not base64: {e}"))
                        .and_then(|b| {
                            String::from_utf8(b).map_err(|_| "not UTF-8 text".to_string())
                        });
                    values.insert(k.to_string(), decoded);
                }
            }
            if let Some(Value::Mapping(data)) = object.get("stringData") {
                for (k, v) in data {
                    if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                        values.insert(k.to_string(), Ok(v.to_string()));
                    }
                }
            }
            out.insert((header.namespace, name), values);
        }
    }
    out
}

/// `{name, key}` of a reference, when it is exactly that.
fn reference_of(value: &Value) -> Option<(String, String)> {
    let Value::Mapping(m) = value else {
        return None;
    };
    let fields: BTreeSet<&str> = m.keys().filter_map(Value::as_str).collect();
    if fields != BTreeSet::from(["name", "key"]) {
        return None;
    }
    let name = m.get("name")?.as_str().filter(|s| !s.is_empty())?;
    let key = m.get("key")?.as_str().filter(|s| !s.is_empty())?;
    Some((name.to_string(), key.to_string()))
}

/// Why a field failed: `(field, reason)`.
type FieldFailure = (String, String);

/// What [`walk`] calls on each mapping, with its path.
type Visit<'a> = dyn FnMut(&mut Mapping, &str) -> Result<(), FieldFailure> + 'a;

/// Calls `f` on every mapping under `value` with its path (`spec.apiServer.ca.`, ending
/// with a dot; empty at the top), depth first; stops at its first error, `(field, reason)`.
fn walk(value: &mut Value, path: &mut String, f: &mut Visit<'_>) -> Result<(), FieldFailure> {
    match value {
        Value::Mapping(mapping) => {
            f(mapping, path)?;
            for (k, v) in mapping.iter_mut() {
                let Some(k) = k.as_str() else { continue };
                let len = path.len();
                path.push_str(k);
                path.push('.');
                walk(v, path, f)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Sequence(items) => {
            let len = path.len();
            if path.ends_with('.') {
                path.pop();
            }
            let base = path.len();
            for (i, v) in items.iter_mut().enumerate() {
                path.truncate(base);
                path.push_str(&format!("[{i}]."));
                walk(v, path, f)?;
            }
            path.truncate(base);
            if len > base {
                path.push('.');
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
