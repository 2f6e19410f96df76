//! Manifest I/O on strings: multi-document YAML in, typed [`Document`]s out, and back.
//!
//! Strict where oneinfra was lax: an unknown kind, apiVersion or field is an error naming the
//! source, the document position, the kind and name when known, and the field path.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::meta::{Kind, ObjectMeta, Resource};
use crate::metal3::{BareMetalHost, BareMetalHostView, Secret, SecretView, known_metadata};
use crate::world::{Document, Object};

/// Why manifests could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The text is not valid YAML.
    #[error(
        "{source_name}: document {position}: malformed yaml{}: {message}",
        at_location(*.line, *.column)
    )]
    Yaml {
        source_name: String,
        position: usize,
        /// 1-based line of the error in the whole input, when known.
        line: Option<usize>,
        /// 1-based column of the error, when known.
        column: Option<usize>,
        message: String,
    },
    /// Collections nested deeper than [`MAX_NESTING_DEPTH`].
    #[error(
        "{source_name}: document {position}: collections nested deeper than {limit} levels at line {line}, column {column}"
    )]
    TooDeep {
        source_name: String,
        position: usize,
        line: usize,
        column: usize,
        limit: usize,
    },
    /// A document is not a mapping.
    #[error(
        "{source_name}: document {position}: not an object (expected a mapping with apiVersion and kind)"
    )]
    NotAnObject {
        source_name: String,
        position: usize,
    },
    /// `apiVersion` or `kind` is missing or not a string.
    #[error("{source_name}: document {position}{}: missing or non-string `{field}`", named(.name))]
    MissingTypeField {
        source_name: String,
        position: usize,
        name: Option<String>,
        field: &'static str,
    },
    /// `kind` is none of ours.
    #[error(
        "{source_name}: document {position}{}: unknown kind {kind:?} (apiVersion {api_version:?}); expected Hypervisor, Cluster, Component, NodeJoinRequest, SIPCluster, BareMetalHost or Secret",
        named(.name)
    )]
    UnknownKind {
        source_name: String,
        position: usize,
        name: Option<String>,
        api_version: String,
        kind: String,
    },
    /// `kind` is ours but `apiVersion` is not the one it belongs to.
    #[error(
        "{source_name}: document {position}{}: unknown apiVersion {api_version:?} for kind {kind}; expected {}",
        named(.name),
        .kind.api_version()
    )]
    UnknownApiVersion {
        source_name: String,
        position: usize,
        name: Option<String>,
        kind: Kind,
        api_version: String,
    },
    /// A field is unknown, missing, or of the wrong type.
    #[error(
        "{source_name}: document {position}: {}{}: field `{path}`: {message}",
        .kind.map_or("List", Kind::as_str),
        named(.name)
    )]
    Field {
        source_name: String,
        position: usize,
        /// The object's kind; `None` for a field of a `List` document itself.
        kind: Option<Kind>,
        name: Option<String>,
        /// Dotted path of the offending field, e.g. `spec.portRange.lowest`.
        path: String,
        message: String,
    },
    /// An object could not be written as YAML.
    #[error("cannot serialize {kind} {name}: {message}")]
    Serialize {
        kind: Kind,
        name: String,
        message: String,
    },
}

fn named(name: &Option<String>) -> String {
    match name {
        Some(n) => format!(" ({n:?})"),
        None => String::new(),
    }
}

fn at_location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

/// How deeply collections (mappings, sequences) may nest in a manifest. Ours nest fewer than
/// ten levels. The bound is what keeps parsing linear: libyaml (behind serde_yaml_ng) spends
/// time proportional to the nesting depth on every token of a flow collection, so that
/// `a: [[[...]]]` of 400 KB took over a minute.
pub const MAX_NESTING_DEPTH: usize = 64;

/// Checks the YAML syntax of `text` and the depth of its collections with saphyr's parser,
/// which is linear on any input, before libyaml sees it: a syntax error or a nesting deeper
/// than [`MAX_NESTING_DEPTH`] is reported with its document position, line and column.
fn check_structure(text: &str, source_name: &str) -> Result<(), ManifestError> {
    use saphyr_parser::{Event, Parser};
    let mut parser = Parser::new_from_str(text);
    let mut position = 0;
    let mut depth = 0;
    while let Some(next) = parser.next_event() {
        let (event, span) = match next {
            Ok(event) => event,
            // saphyr's scanner reads ahead; it refuses more than 255 open flow collections
            // before its parser reaches our limit.
            Err(e) if e.info() == "recursion limit exceeded" => {
                return Err(ManifestError::TooDeep {
                    source_name: source_name.to_string(),
                    position: position.max(1),
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                    limit: MAX_NESTING_DEPTH,
                });
            }
            Err(e) => {
                return Err(ManifestError::Yaml {
                    source_name: source_name.to_string(),
                    position: position.max(1),
                    line: Some(e.marker().line()),
                    column: Some(e.marker().col() + 1),
                    message: e.info().to_string(),
                });
            }
        };
        match event {
            Event::DocumentStart(_) => position += 1,
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_NESTING_DEPTH {
                    return Err(ManifestError::TooDeep {
                        source_name: source_name.to_string(),
                        position: position.max(1),
                        line: span.start.line(),
                        column: span.start.col() + 1,
                        limit: MAX_NESTING_DEPTH,
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Parses multi-document YAML. Empty documents are skipped but counted: a document's
/// position is its 1-based index among all documents of `text`. A `List` document (as
/// `kubectl get -o yaml` writes) yields each of its items, all at the list's position, with
/// field paths starting `items[i].`. `source_name` (a file name, `<stdin>`) only labels errors
/// and documents.
///
/// # Errors
///
/// The first malformed document, unknown kind or apiVersion, or unknown, missing or
/// mistyped field, as a [`ManifestError`].
pub fn parse_manifests(text: &str, source_name: &str) -> Result<Vec<Document>, ManifestError> {
    parse_raw_documents(parse_raw(text, source_name)?)
}

/// One YAML document of an input, read but not typed yet (`<<` merge keys resolved): what
/// [`crate::keys::resolve`] works on, across every input, before typing.
#[derive(Debug, Clone)]
pub struct RawDocument {
    pub source_name: String,
    /// 1-based position of the document in its input.
    pub position: usize,
    pub value: serde_yaml_ng::Value,
}

/// The first half of [`parse_manifests`]: the input's YAML documents.
///
/// # Errors
///
/// The first malformed document, as a [`ManifestError`].
pub fn parse_raw(text: &str, source_name: &str) -> Result<Vec<RawDocument>, ManifestError> {
    check_structure(text, source_name)?;
    let mut documents = Vec::new();
    for (index, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let position = index + 1;
        let mut value = serde_yaml_ng::Value::deserialize(de)
            .map_err(|e| yaml_error(&e, source_name, position))?;
        // Resolve `<<` merge keys, which serde_yaml_ng leaves as ordinary keys.
        value
            .apply_merge()
            .map_err(|e| yaml_error(&e, source_name, position))?;
        documents.push(RawDocument {
            source_name: source_name.to_string(),
            position,
            value,
        });
    }
    Ok(documents)
}

/// The second half of [`parse_manifests`]: each document's objects, typed.
///
/// # Errors
///
/// The first unknown kind or apiVersion, or unknown, missing or mistyped field, as a
/// [`ManifestError`].
pub fn parse_raw_documents(raw: Vec<RawDocument>) -> Result<Vec<Document>, ManifestError> {
    let mut documents = Vec::new();
    for RawDocument {
        source_name,
        position,
        value,
    } in raw
    {
        for object in parse_value(value, &source_name, position)? {
            documents.push(Document {
                source_name: source_name.clone(),
                position,
                object,
            });
        }
    }
    Ok(documents)
}

fn yaml_error(e: &serde_yaml_ng::Error, source_name: &str, position: usize) -> ManifestError {
    let location = e.location();
    ManifestError::Yaml {
        source_name: source_name.to_string(),
        position,
        line: location.as_ref().map(|l| l.line()),
        column: location.as_ref().map(|l| l.column()),
        message: strip_location(&e.to_string()),
    }
}

/// serde_yaml_ng appends " at line L column C" to its messages; the location has its own fields.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// One document's value to its objects: none for an empty document, several for a list.
fn parse_value(
    value: serde_yaml_ng::Value,
    source_name: &str,
    position: usize,
) -> Result<Vec<Object>, ManifestError> {
    if value.is_null() {
        return Ok(Vec::new());
    }
    let header = Header::read(&value, source_name, position)?;
    if !is_list(&header.api_version, &header.kind) {
        return Ok(vec![parse_object(
            value,
            header,
            source_name,
            position,
            "",
        )?]);
    }
    // `kubectl get <kind> -o yaml` writes `kind: List` with the objects under `items`.
    let serde_yaml_ng::Value::Mapping(mut mapping) = value else {
        // Header::read only succeeds on mappings.
        return Err(ManifestError::NotAnObject {
            source_name: source_name.to_string(),
            position,
        });
    };
    let field_error = |path: String, message: String| ManifestError::Field {
        source_name: source_name.to_string(),
        position,
        kind: None,
        name: None,
        path,
        message,
    };
    for key in mapping.keys() {
        match key.as_str() {
            Some("apiVersion" | "kind" | "metadata" | "items") => {}
            other => {
                let field = other.map_or_else(|| format!("{key:?}"), str::to_string);
                return Err(field_error(
                    field.clone(),
                    format!(
                        "unknown field `{field}`, expected one of `apiVersion`, `kind`, `metadata`, `items`"
                    ),
                ));
            }
        }
    }
    let items = match mapping.remove("items") {
        None | Some(serde_yaml_ng::Value::Null) => Vec::new(),
        Some(serde_yaml_ng::Value::Sequence(items)) => items,
        Some(_) => {
            return Err(field_error(
                "items".to_string(),
                "invalid type: expected a sequence".to_string(),
            ));
        }
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let prefix = format!("items[{i}].");
            let header = Header::read(&item, source_name, position).map_err(|e| match e {
                ManifestError::NotAnObject { .. } => field_error(
                    format!("items[{i}]"),
                    "invalid type: expected an object".to_string(),
                ),
                other => other,
            })?;
            parse_object(item, header, source_name, position, &prefix)
        })
        .collect()
}

fn is_list(api_version: &str, kind: &str) -> bool {
    (api_version == "v1" && kind == "List")
        || kind
            .strip_suffix("List")
            .and_then(Kind::from_kind_str)
            .is_some_and(|k| k.api_version() == api_version)
}

/// What identifies a document: `apiVersion`, `kind`, and `metadata.name` when present.
struct Header {
    api_version: String,
    kind: String,
    name: Option<String>,
}

impl Header {
    fn read(
        value: &serde_yaml_ng::Value,
        source_name: &str,
        position: usize,
    ) -> Result<Header, ManifestError> {
        let serde_yaml_ng::Value::Mapping(mapping) = value else {
            return Err(ManifestError::NotAnObject {
                source_name: source_name.to_string(),
                position,
            });
        };
        let name = mapping
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(serde_yaml_ng::Value::as_str)
            .map(str::to_string);
        let type_field = |field: &'static str| {
            mapping
                .get(field)
                .and_then(serde_yaml_ng::Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| ManifestError::MissingTypeField {
                    source_name: source_name.to_string(),
                    position,
                    name: name.clone(),
                    field,
                })
        };
        Ok(Header {
            api_version: type_field("apiVersion")?,
            kind: type_field("kind")?,
            name,
        })
    }
}

/// One object's value to its type; `prefix` is prepended to field paths (list items).
fn parse_object(
    value: serde_yaml_ng::Value,
    header: Header,
    source_name: &str,
    position: usize,
    prefix: &str,
) -> Result<Object, ManifestError> {
    let Header {
        api_version,
        kind: kind_str,
        name,
    } = header;
    let Some(kind) = Kind::from_kind_str(&kind_str) else {
        return Err(ManifestError::UnknownKind {
            source_name: source_name.to_string(),
            position,
            name,
            api_version,
            kind: kind_str,
        });
    };
    if api_version != kind.api_version() {
        return Err(ManifestError::UnknownApiVersion {
            source_name: source_name.to_string(),
            position,
            name,
            kind,
            api_version,
        });
    }
    let typed = Typed {
        source_name,
        position,
        kind,
        name: &name,
        prefix,
    };
    Ok(match kind {
        Kind::Hypervisor => Object::Hypervisor(typed.deserialize(value)?),
        Kind::Cluster => Object::Cluster(typed.deserialize(value)?),
        Kind::Component => Object::Component(typed.deserialize(value)?),
        Kind::NodeJoinRequest => Object::NodeJoinRequest(typed.deserialize(value)?),
        Kind::SipCluster => Object::SipCluster(typed.deserialize(value)?),
        Kind::BareMetalHost => {
            let metadata = typed.metadata(&value)?;
            let view: BareMetalHostView = typed.deserialize(value.clone())?;
            Object::BareMetalHost(BareMetalHost::from_parts(
                metadata,
                view,
                into_mapping(value),
            ))
        }
        Kind::Secret => {
            let metadata = typed.metadata(&value)?;
            let view: SecretView = typed.deserialize(value.clone())?;
            Object::Secret(Secret::from_parts(metadata, view, into_mapping(value)))
        }
    })
}

/// A document's mapping (documents are mappings: [`Header::read`] checked).
fn into_mapping(value: serde_yaml_ng::Value) -> serde_yaml_ng::Mapping {
    match value {
        serde_yaml_ng::Value::Mapping(m) => m,
        _ => serde_yaml_ng::Mapping::new(),
    }
}

/// Context for deserializing one object into its kind's type.
#[derive(Clone, Copy)]
struct Typed<'a> {
    source_name: &'a str,
    position: usize,
    kind: Kind,
    name: &'a Option<String>,
    prefix: &'a str,
}

impl Typed<'_> {
    /// The `metadata` of a document whose other fields are not ours (BareMetalHost,
    /// Secret): the standard fields read and checked, any other kept in the document only.
    fn metadata(&self, value: &serde_yaml_ng::Value) -> Result<ObjectMeta, ManifestError> {
        let prefix = format!("{}metadata.", self.prefix);
        Typed {
            prefix: &prefix,
            ..*self
        }
        .deserialize(known_metadata(value))
    }

    fn deserialize<T: DeserializeOwned>(
        &self,
        value: serde_yaml_ng::Value,
    ) -> Result<T, ManifestError> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let message = strip_location(&e.inner().to_string());
            ManifestError::Field {
                source_name: self.source_name.to_string(),
                position: self.position,
                kind: Some(self.kind),
                name: self.name.clone(),
                path: format!("{}{}", self.prefix, full_path(&path, &message)),
                message,
            }
        })
    }
}

/// serde_path_to_error stops at the mapping that holds an unknown field; the field itself is
/// only named in serde's message (``unknown field `x`, expected ...``). Append it so that the
/// path names the offending field.
fn full_path(path: &str, message: &str) -> String {
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next());
    match (unknown, path) {
        (Some(field), "." | "") => field.to_string(),
        (Some(field), p) if !p.ends_with(field) => format!("{p}.{field}"),
        _ => path.to_string(),
    }
}

impl Serialize for Object {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Object::Hypervisor(o) => o.serialize(serializer),
            Object::Cluster(o) => o.serialize(serializer),
            Object::Component(o) => o.serialize(serializer),
            Object::NodeJoinRequest(o) => o.serialize(serializer),
            Object::SipCluster(o) => o.serialize(serializer),
            Object::BareMetalHost(o) => o.serialize(serializer),
            Object::Secret(o) => o.serialize(serializer),
        }
    }
}

/// One object as a YAML document (no `---` separator).
pub(crate) fn resource_yaml<T: Serialize + Resource>(object: &T) -> Result<String, ManifestError> {
    serde_yaml_ng::to_string(object).map_err(|e| ManifestError::Serialize {
        kind: T::KIND,
        name: object.key().to_string(),
        message: e.to_string(),
    })
}

impl Object {
    /// The object as one YAML document (no `---` separator).
    ///
    /// # Errors
    ///
    /// [`ManifestError::Serialize`] if serde_yaml_ng refuses a value.
    pub fn to_yaml(&self) -> Result<String, ManifestError> {
        match self {
            Object::Hypervisor(o) => resource_yaml(o),
            Object::Cluster(o) => resource_yaml(o),
            Object::Component(o) => resource_yaml(o),
            Object::NodeJoinRequest(o) => resource_yaml(o),
            Object::SipCluster(o) => resource_yaml(o),
            Object::BareMetalHost(o) => resource_yaml(o),
            Object::Secret(o) => resource_yaml(o),
        }
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind(), self.key())
    }
}

#[cfg(test)]
pub(crate) mod tests;
