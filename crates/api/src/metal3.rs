//! `BareMetalHost` (metal3.io/v1alpha1, namespaced) and the core `Secret` (v1): documents
//! written by metal3 and Kubernetes, not by us. The fields we use are read into typed views
//! and validated; the document itself is kept as read and written back unchanged but for
//! what we change (a host's labels), so no field of theirs is ever dropped or refused.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

use crate::meta::{Kind, ObjectMeta, Resource, null_as_default};

/// The `metadata` fields [`ObjectMeta`] reads; any other metadata field stays in the raw
/// document only.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The document's `metadata` restricted to the fields [`ObjectMeta`] knows.
pub(crate) fn known_metadata(document: &Value) -> Value {
    let mut out = Mapping::new();
    if let Some(Value::Mapping(meta)) = document.get("metadata") {
        for (k, v) in meta {
            if k.as_str().is_some_and(|k| OBJECT_META_FIELDS.contains(&k)) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Mapping(out)
}

/// An inventory host as metal3 describes it.
#[derive(Debug, Clone)]
pub struct BareMetalHost {
    pub metadata: ObjectMeta,
    pub spec: BareMetalHostSpec,
    pub status: BareMetalHostStatus,
    /// The document as read; [`BareMetalHost::to_value`] writes it with `metadata.labels`
    /// from [`Self::metadata`].
    raw: Mapping,
}

/// The typed view of a BareMetalHost: the fields we use (unknown ones ignored here, kept in
/// the raw document).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BareMetalHostView {
    #[serde(default, deserialize_with = "null_as_default")]
    pub spec: BareMetalHostSpec,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: BareMetalHostStatus,
}

/// What we read of a host's spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostSpec {
    #[serde(default)]
    pub online: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub bmc: BmcDetails,
    #[serde(default)]
    pub network_data: Option<SecretReference>,
}

/// How to reach the host's BMC.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BmcDetails {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub credentials_name: String,
    #[serde(default)]
    pub disable_certificate_verification: bool,
}

/// A Secret in any namespace (the host's when empty).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// What we read of a host's status.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    /// `OK`, `discovered`, `error` (or empty).
    #[serde(default)]
    pub operational_status: String,
    /// Set with `operationalStatus: error`.
    #[serde(default)]
    pub error_type: String,
    #[serde(default)]
    pub error_message: String,
}

impl BareMetalHost {
    /// A host from its whole document and the typed view read from it.
    pub(crate) fn from_parts(metadata: ObjectMeta, view: BareMetalHostView, raw: Mapping) -> Self {
        Self {
            metadata,
            spec: view.spec,
            status: view.status,
            raw,
        }
    }

    /// Why the host cannot be used, as metal3 reports it: its operational status is
    /// `error` (with the error type), or it is being deleted.
    pub fn failure(&self) -> Option<String> {
        if self.metadata.is_being_deleted() {
            return Some("being deleted".to_string());
        }
        if self.status.operational_status == "error" || !self.status.error_type.is_empty() {
            let what = if self.status.error_type.is_empty() {
                "error".to_string()
            } else {
                self.status.error_type.clone()
            };
            return Some(if self.status.error_message.is_empty() {
                format!("in {what}")
            } else {
                format!("in {what}: {}", self.status.error_message)
            });
        }
        None
    }

    /// The network data Secret's key: its namespace defaults to the host's.
    pub fn network_data_secret(&self) -> Option<crate::meta::ObjectKey> {
        let r = self.spec.network_data.as_ref()?;
        if r.name.is_empty() {
            return None;
        }
        let namespace = if r.namespace.is_empty() {
            self.metadata.namespace_or_default().to_string()
        } else {
            r.namespace.clone()
        };
        Some(crate::meta::ObjectKey::new(namespace, r.name.clone()))
    }

    /// The BMC credentials Secret's key (always in the host's namespace).
    pub fn bmc_credentials_secret(&self) -> crate::meta::ObjectKey {
        crate::meta::ObjectKey::new(
            self.metadata.namespace_or_default(),
            self.spec.bmc.credentials_name.clone(),
        )
    }

    /// The document as it is to be written: as read, with `metadata.labels` ours (labels
    /// kept in their order, removed ones dropped, new ones appended in name order).
    pub fn to_value(&self) -> Value {
        let mut raw = self.raw.clone();
        patch_metadata(&mut raw, &self.metadata);
        Value::Mapping(raw)
    }
}

/// Sets the standard fields of a document's `metadata` to `metadata`'s, each in its place,
/// touching nothing else: labels keep their order (removed ones dropped, new ones appended),
/// a field left as it was is not rewritten, an empty map or list the typed view omits stays.
fn patch_metadata(raw: &mut Mapping, metadata: &ObjectMeta) {
    patch_labels(raw, &metadata.labels);
    let Ok(Value::Mapping(typed)) = serde_yaml_ng::to_value(metadata) else {
        return;
    };
    let Some(Value::Mapping(meta)) = raw.get_mut("metadata") else {
        if !typed.is_empty() {
            raw.insert("metadata".into(), Value::Mapping(typed));
        }
        return;
    };
    for field in OBJECT_META_FIELDS {
        if field == "labels" {
            continue;
        }
        match (typed.get(field), meta.get(field)) {
            (Some(new), Some(old)) if new == old => {}
            (Some(new), Some(_)) => {
                if let Some(slot) = meta.get_mut(field) {
                    *slot = new.clone();
                }
            }
            (Some(new), None) => {
                meta.insert(field.into(), new.clone());
            }
            (None, Some(old)) => {
                let empty = match old {
                    Value::Null => true,
                    Value::Mapping(m) => m.is_empty(),
                    Value::Sequence(s) => s.is_empty(),
                    Value::String(s) => s.is_empty(),
                    _ => false,
                };
                if !empty {
                    meta.remove(field);
                }
            }
            (None, None) => {}
        }
    }
}

/// Sets `metadata.labels` of a document to `labels`, touching nothing else.
fn patch_labels(raw: &mut Mapping, labels: &BTreeMap<String, String>) {
    let meta = raw
        .entry(Value::from("metadata"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if !meta.is_mapping() {
        *meta = Value::Mapping(Mapping::new());
    }
    let Value::Mapping(meta) = meta else {
        return;
    };
    let existing = meta.get("labels").and_then(Value::as_mapping).cloned();
    let had_labels = meta.contains_key("labels");
    let mut out = Mapping::new();
    if let Some(existing) = &existing {
        for (k, _) in existing {
            if let Some(v) = k.as_str().and_then(|k| labels.get(k)) {
                out.insert(k.clone(), Value::from(v.as_str()));
            }
        }
    }
    for (k, v) in labels {
        if !out.contains_key(k.as_str()) {
            out.insert(Value::from(k.as_str()), Value::from(v.as_str()));
        }
    }
    if out.is_empty() && !had_labels {
        return;
    }
    // Keep the labels' own place among the metadata fields.
    if existing.as_ref() == Some(&out) {
        return;
    }
    if had_labels {
        if let Some(slot) = meta.get_mut("labels") {
            *slot = Value::Mapping(out);
        }
    } else {
        meta.insert(Value::from("labels"), Value::Mapping(out));
    }
}

/// A document's mapping (an object that is not a mapping becomes an empty one).
fn into_mapping(value: Value) -> Mapping {
    match value {
        Value::Mapping(m) => m,
        _ => Mapping::new(),
    }
}

impl BareMetalHost {
    /// A host from a whole document (as a store returns it).
    ///
    /// # Errors
    ///
    /// A field we read has the wrong type.
    pub fn from_document(value: Value) -> Result<Self, String> {
        let metadata: ObjectMeta = serde_yaml_ng::from_value(known_metadata(&value))
            .map_err(|e| format!("metadata: {e}"))?;
        let view: BareMetalHostView =
            serde_yaml_ng::from_value(value.clone()).map_err(|e| e.to_string())?;
        Ok(Self::from_parts(metadata, view, into_mapping(value)))
    }
}

impl<'de> Deserialize<'de> for BareMetalHost {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        BareMetalHost::from_document(value).map_err(serde::de::Error::custom)
    }
}

impl Secret {
    /// A Secret from a whole document (as a store returns it).
    ///
    /// # Errors
    ///
    /// A field we read has the wrong type.
    pub fn from_document(value: Value) -> Result<Self, String> {
        let metadata: ObjectMeta = serde_yaml_ng::from_value(known_metadata(&value))
            .map_err(|e| format!("metadata: {e}"))?;
        let view: SecretView =
            serde_yaml_ng::from_value(value.clone()).map_err(|e| e.to_string())?;
        Ok(Self::from_parts(metadata, view, into_mapping(value)))
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Secret::from_document(value).map_err(serde::de::Error::custom)
    }
}

impl PartialEq for BareMetalHost {
    fn eq(&self, other: &Self) -> bool {
        self.metadata == other.metadata && self.to_value() == other.to_value()
    }
}

impl Serialize for BareMetalHost {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl Resource for BareMetalHost {
    const KIND: Kind = Kind::BareMetalHost;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A Kubernetes Secret: BMC credentials, network data, SSH keys. Its values never appear in
/// `Debug` output.
#[derive(Clone)]
pub struct Secret {
    pub metadata: ObjectMeta,
    pub type_: String,
    /// `data`: base64 values (validated).
    pub data: BTreeMap<String, String>,
    /// `stringData`: plain values, which win over `data` (as the API server merges them).
    pub string_data: BTreeMap<String, String>,
    raw: Mapping,
}

/// The typed view of a Secret.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecretView {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub data: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub string_data: BTreeMap<String, String>,
}

impl Secret {
    pub(crate) fn from_parts(metadata: ObjectMeta, view: SecretView, raw: Mapping) -> Self {
        Self {
            metadata,
            type_: view.type_,
            data: view.data,
            string_data: view.string_data,
            raw,
        }
    }

    /// The value of a key: `stringData` first, then `data` decoded. `None` when absent;
    /// `Some(Err)` when `data` holds something that is not base64 (validation refuses that).
    pub fn value(&self, key: &str) -> Option<Result<Vec<u8>, base64::DecodeError>> {
        if let Some(v) = self.string_data.get(key) {
            return Some(Ok(v.as_bytes().to_vec()));
        }
        self.data
            .get(key)
            .map(|v| base64::engine::general_purpose::STANDARD.decode(v.trim()))
    }

    /// Every key, `data`'s and `stringData`'s, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self
            .data
            .keys()
            .chain(self.string_data.keys())
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The document as read, with the standard metadata fields from [`Self::metadata`].
    pub fn to_value(&self) -> Value {
        let mut raw = self.raw.clone();
        patch_metadata(&mut raw, &self.metadata);
        Value::Mapping(raw)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("metadata", &self.metadata)
            .field("type_", &self.type_)
            .field("keys", &self.keys())
            .finish_non_exhaustive()
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.metadata == other.metadata && self.to_value() == other.to_value()
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl Resource for Secret {
    const KIND: Kind = Kind::Secret;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A BMC address split as a Redfish client needs it. metal3 writes them
/// `<driver>[+<http|https>]://<host>[:<port>][/<path>]` (e.g.
/// `redfish+https://10.0.0.5/redfish/v1/Systems/1`); the path names the system and is kept
/// (one emulator serves many systems).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcAddress {
    /// `redfish`, `idrac-redfish`, `ipmi`, ...
    pub driver: String,
    /// `https` unless the address says `+http` (Redfish drivers); `ipmi` has none.
    pub scheme: String,
    /// Host, or `[v6]`, with the port when given.
    pub authority: String,
    /// The system's path, from the first `/` on (empty when none).
    pub path: String,
}

impl BmcAddress {
    /// Whether the driver speaks Redfish (what the jump host's `host` tool drives).
    pub fn is_redfish(&self) -> bool {
        self.driver.contains("redfish")
    }

    /// The address as metal3 writes it, the transport explicit:
    /// `redfish+https://host:port/redfish/v1/Systems/1`, `ipmi://host:623`.
    pub fn to_address(&self) -> String {
        if self.scheme.is_empty() {
            format!("{}://{}{}", self.driver, self.authority, self.path)
        } else {
            format!(
                "{}+{}://{}{}",
                self.driver, self.scheme, self.authority, self.path
            )
        }
    }

    /// The base URL of the Redfish service (`https://host:port`).
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }
}

/// Parses a BMC address.
///
/// # Errors
///
/// What is wrong with it, in words.
pub fn parse_bmc_address(address: &str) -> Result<BmcAddress, String> {
    let Some((scheme, rest)) = address.split_once("://") else {
        return Err(format!(
            "{address:?} is not a BMC address (<driver>[+http|+https]://<host>[:<port>][/<path>])"
        ));
    };
    let (driver, transport) = match scheme.split_once('+') {
        Some((d, t)) => (d, Some(t)),
        None => (scheme, None),
    };
    let valid_driver = !driver.is_empty()
        && driver
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_driver {
        return Err(format!("{address:?}: {driver:?} is not a BMC driver name"));
    }
    let scheme = match transport {
        None if driver.contains("redfish") => "https",
        None => "",
        Some("http") => "http",
        Some("https") => "https",
        Some(other) => {
            return Err(format!(
                "{address:?}: transport {other:?} is neither http nor https"
            ));
        }
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains(['@', ' ', '?', '#']) {
        return Err(format!("{address:?}: {authority:?} is not a host[:port]"));
    }
    if let Some((host, port)) = authority.rsplit_once(':')
        && !host.ends_with(']')
        && host.contains(':')
    {
        return Err(format!(
            "{address:?}: an IPv6 address goes in brackets ([{host}]:{port})"
        ));
    }
    if let Some((_, port)) = authority.rsplit_once(':')
        && !authority.ends_with(']')
        && port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(format!("{address:?}: port {port:?} is not a port"));
    }
    if driver.contains("redfish") && path.trim_end_matches('/').is_empty() {
        return Err(format!(
            "{address:?}: a Redfish address names its system's path (/redfish/v1/Systems/<id>)"
        ));
    }
    Ok(BmcAddress {
        driver: driver.to_string(),
        scheme: scheme.to_string(),
        authority: authority.to_string(),
        path: path.to_string(),
    })
}
