//! Kubernetes' protobuf encoding, read into JSON, for the request bodies `kubectl` sends that
//! way: its `create` generators (namespaces, configmaps, secrets, service accounts, services,
//! RBAC objects), `create token`, `auth can-i`, `auth whoami` and `certificate approve`.
//!
//! A body is `k8s\0` then a `runtime.Unknown` (type meta, raw object). The object is decoded
//! with the field numbers of `k8s.io/api`'s `generated.proto` for the kinds below, into the
//! JSON the same object would have (zero values left out, as Go's `omitempty` leaves them
//! out). Responses are always JSON, which every client accepts. A kind not listed is refused
//! with `415 Unsupported Media Type`, naming it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

/// The media type.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// How a field is read.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    /// base64 in JSON.
    Bytes,
    Bool,
    Int,
    /// `metav1.Time` / `MicroTime`: `{seconds, nanos}` as RFC 3339.
    Time,
    /// `FieldsV1`: raw JSON.
    RawJson,
    /// `intstr.IntOrString`: `{type, intVal, strVal}`.
    IntOrString,
    Msg(&'static Msg),
    /// `map<string, string>`.
    StrMap,
    /// `map<string, bytes>`.
    BytesMap,
    /// `map<string, ExtraValue>` (`ExtraValue` is `{repeated string items = 1}`).
    ExtraMap,
}

struct Field {
    number: u32,
    name: &'static str,
    kind: Kind,
    repeated: bool,
}

/// A message's fields.
pub struct Msg(&'static [Field]);

const fn f(number: u32, name: &'static str, kind: Kind) -> Field {
    Field {
        number,
        name,
        kind,
        repeated: false,
    }
}

const fn r(number: u32, name: &'static str, kind: Kind) -> Field {
    Field {
        number,
        name,
        kind,
        repeated: true,
    }
}

use Kind::{Bool, Bytes, BytesMap, ExtraMap, Int, IntOrString, RawJson, Str, StrMap, Time};

static FIELDS_V1: Msg = Msg(&[f(1, "Raw", RawJson)]);
static MANAGED_FIELDS: Msg = Msg(&[
    f(1, "manager", Str),
    f(2, "operation", Str),
    f(3, "apiVersion", Str),
    f(4, "time", Time),
    f(6, "fieldsType", Str),
    f(7, "fieldsV1", Kind::Msg(&FIELDS_V1)),
    f(8, "subresource", Str),
]);
static OWNER_REFERENCE: Msg = Msg(&[
    f(1, "kind", Str),
    f(3, "name", Str),
    f(4, "uid", Str),
    f(5, "apiVersion", Str),
    f(6, "controller", Bool),
    f(7, "blockOwnerDeletion", Bool),
]);
static OBJECT_META: Msg = Msg(&[
    f(1, "name", Str),
    f(2, "generateName", Str),
    f(3, "namespace", Str),
    f(4, "selfLink", Str),
    f(5, "uid", Str),
    f(6, "resourceVersion", Str),
    f(7, "generation", Int),
    f(8, "creationTimestamp", Time),
    f(9, "deletionTimestamp", Time),
    f(10, "deletionGracePeriodSeconds", Int),
    f(11, "labels", StrMap),
    f(12, "annotations", StrMap),
    r(13, "ownerReferences", Kind::Msg(&OWNER_REFERENCE)),
    r(14, "finalizers", Str),
    r(17, "managedFields", Kind::Msg(&MANAGED_FIELDS)),
]);
static LABEL_SELECTOR_REQUIREMENT: Msg =
    Msg(&[f(1, "key", Str), f(2, "operator", Str), r(3, "values", Str)]);
static LABEL_SELECTOR: Msg = Msg(&[
    f(1, "matchLabels", StrMap),
    r(
        2,
        "matchExpressions",
        Kind::Msg(&LABEL_SELECTOR_REQUIREMENT),
    ),
]);
static OBJECT_REFERENCE: Msg = Msg(&[
    f(1, "kind", Str),
    f(2, "namespace", Str),
    f(3, "name", Str),
    f(4, "uid", Str),
    f(5, "apiVersion", Str),
    f(6, "resourceVersion", Str),
    f(7, "fieldPath", Str),
]);
static LOCAL_OBJECT_REFERENCE: Msg = Msg(&[f(1, "name", Str)]);
static CONDITION: Msg = Msg(&[
    f(1, "type", Str),
    f(2, "status", Str),
    f(3, "observedGeneration", Int),
    f(4, "lastTransitionTime", Time),
    f(5, "reason", Str),
    f(6, "message", Str),
]);

static NAMESPACE_SPEC: Msg = Msg(&[r(1, "finalizers", Str)]);
static NAMESPACE_STATUS: Msg = Msg(&[
    f(1, "phase", Str),
    r(2, "conditions", Kind::Msg(&CONDITION)),
]);
static NAMESPACE: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "spec", Kind::Msg(&NAMESPACE_SPEC)),
    f(3, "status", Kind::Msg(&NAMESPACE_STATUS)),
]);
static CONFIG_MAP: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "data", StrMap),
    f(3, "binaryData", BytesMap),
    f(4, "immutable", Bool),
]);
static SECRET: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "data", BytesMap),
    f(3, "type", Str),
    f(4, "stringData", StrMap),
    f(5, "immutable", Bool),
]);
static SERVICE_ACCOUNT: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    r(2, "secrets", Kind::Msg(&OBJECT_REFERENCE)),
    r(3, "imagePullSecrets", Kind::Msg(&LOCAL_OBJECT_REFERENCE)),
    f(4, "automountServiceAccountToken", Bool),
]);
static SERVICE_PORT: Msg = Msg(&[
    f(1, "name", Str),
    f(2, "protocol", Str),
    f(3, "port", Int),
    f(4, "targetPort", IntOrString),
    f(5, "nodePort", Int),
    f(6, "appProtocol", Str),
]);
static SERVICE_SPEC: Msg = Msg(&[
    r(1, "ports", Kind::Msg(&SERVICE_PORT)),
    f(2, "selector", StrMap),
    f(3, "clusterIP", Str),
    f(4, "type", Str),
    r(5, "externalIPs", Str),
    f(7, "sessionAffinity", Str),
    f(8, "loadBalancerIP", Str),
    r(9, "loadBalancerSourceRanges", Str),
    f(10, "externalName", Str),
    f(11, "externalTrafficPolicy", Str),
    f(12, "healthCheckNodePort", Int),
    f(13, "publishNotReadyAddresses", Bool),
    r(18, "clusterIPs", Str),
    r(19, "ipFamilies", Str),
    f(17, "ipFamilyPolicy", Str),
    f(20, "allocateLoadBalancerNodePorts", Bool),
    f(21, "loadBalancerClass", Str),
    f(22, "internalTrafficPolicy", Str),
]);
static SERVICE: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "spec", Kind::Msg(&SERVICE_SPEC)),
]);
static POLICY_RULE: Msg = Msg(&[
    r(1, "verbs", Str),
    r(2, "apiGroups", Str),
    r(3, "resources", Str),
    r(4, "resourceNames", Str),
    r(5, "nonResourceURLs", Str),
]);
static AGGREGATION_RULE: Msg = Msg(&[r(1, "clusterRoleSelectors", Kind::Msg(&LABEL_SELECTOR))]);
static ROLE: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    r(2, "rules", Kind::Msg(&POLICY_RULE)),
]);
static CLUSTER_ROLE: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    r(2, "rules", Kind::Msg(&POLICY_RULE)),
    f(3, "aggregationRule", Kind::Msg(&AGGREGATION_RULE)),
]);
static SUBJECT: Msg = Msg(&[
    f(1, "kind", Str),
    f(2, "apiGroup", Str),
    f(3, "name", Str),
    f(4, "namespace", Str),
]);
static ROLE_REF: Msg = Msg(&[f(1, "apiGroup", Str), f(2, "kind", Str), f(3, "name", Str)]);
static BINDING: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    r(2, "subjects", Kind::Msg(&SUBJECT)),
    f(3, "roleRef", Kind::Msg(&ROLE_REF)),
]);
static FIELD_SELECTOR_ATTRIBUTES: Msg = Msg(&[f(1, "rawSelector", Str)]);
static LABEL_SELECTOR_ATTRIBUTES: Msg = Msg(&[f(1, "rawSelector", Str)]);
static RESOURCE_ATTRIBUTES: Msg = Msg(&[
    f(1, "namespace", Str),
    f(2, "verb", Str),
    f(3, "group", Str),
    f(4, "version", Str),
    f(5, "resource", Str),
    f(6, "subresource", Str),
    f(7, "name", Str),
    f(8, "fieldSelector", Kind::Msg(&FIELD_SELECTOR_ATTRIBUTES)),
    f(9, "labelSelector", Kind::Msg(&LABEL_SELECTOR_ATTRIBUTES)),
]);
static NON_RESOURCE_ATTRIBUTES: Msg = Msg(&[f(1, "path", Str), f(2, "verb", Str)]);
static SSAR_SPEC: Msg = Msg(&[
    f(1, "resourceAttributes", Kind::Msg(&RESOURCE_ATTRIBUTES)),
    f(
        2,
        "nonResourceAttributes",
        Kind::Msg(&NON_RESOURCE_ATTRIBUTES),
    ),
]);
static SELF_SUBJECT_ACCESS_REVIEW: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "spec", Kind::Msg(&SSAR_SPEC)),
]);
static SSRR_SPEC: Msg = Msg(&[f(1, "namespace", Str)]);
static SELF_SUBJECT_RULES_REVIEW: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "spec", Kind::Msg(&SSRR_SPEC)),
]);
static SELF_SUBJECT_REVIEW: Msg = Msg(&[f(1, "metadata", Kind::Msg(&OBJECT_META))]);
static BOUND_OBJECT_REFERENCE: Msg = Msg(&[
    f(1, "kind", Str),
    f(2, "apiVersion", Str),
    f(3, "name", Str),
    f(4, "uid", Str),
]);
static TOKEN_REQUEST_SPEC: Msg = Msg(&[
    r(1, "audiences", Str),
    f(4, "expirationSeconds", Int),
    f(3, "boundObjectRef", Kind::Msg(&BOUND_OBJECT_REFERENCE)),
]);
static TOKEN_REQUEST: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "spec", Kind::Msg(&TOKEN_REQUEST_SPEC)),
]);
static CSR_CONDITION: Msg = Msg(&[
    f(1, "type", Str),
    f(2, "reason", Str),
    f(3, "message", Str),
    f(4, "lastUpdateTime", Time),
    f(5, "lastTransitionTime", Time),
    f(6, "status", Str),
]);
static CSR_SPEC: Msg = Msg(&[
    f(1, "request", Bytes),
    f(2, "username", Str),
    f(3, "uid", Str),
    r(4, "groups", Str),
    f(5, "extra", ExtraMap),
    r(6, "usages", Str),
    f(7, "signerName", Str),
    f(8, "expirationSeconds", Int),
]);
static CSR_STATUS: Msg = Msg(&[
    r(1, "conditions", Kind::Msg(&CSR_CONDITION)),
    f(2, "certificate", Bytes),
]);
static CSR: Msg = Msg(&[
    f(1, "metadata", Kind::Msg(&OBJECT_META)),
    f(2, "spec", Kind::Msg(&CSR_SPEC)),
    f(3, "status", Kind::Msg(&CSR_STATUS)),
]);

/// The kinds read from protobuf, by `apiVersion` and `kind`.
fn schema(api_version: &str, kind: &str) -> Option<&'static Msg> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => &NAMESPACE,
        ("v1", "ConfigMap") => &CONFIG_MAP,
        ("v1", "Secret") => &SECRET,
        ("v1", "ServiceAccount") => &SERVICE_ACCOUNT,
        ("v1", "Service") => &SERVICE,
        ("rbac.authorization.k8s.io/v1", "Role") => &ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => &CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => &BINDING,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => &SELF_SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => &SELF_SUBJECT_RULES_REVIEW,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => &SELF_SUBJECT_REVIEW,
        ("authentication.k8s.io/v1", "TokenRequest") => &TOKEN_REQUEST,
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => &CSR,
        _ => return None,
    })
}

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtobufError {
    /// Not the encoding at all, or truncated.
    Malformed(String),
    /// A kind the stand-in does not read from protobuf.
    Unsupported { api_version: String, kind: String },
}

fn malformed(what: impl Into<String>) -> ProtobufError {
    ProtobufError::Malformed(what.into())
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self
                .bytes
                .split_first()
                .ok_or_else(|| malformed("truncated varint"))?;
            self.bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if self.bytes.len() < n {
            return Err(malformed("truncated field"));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    /// The next field: number, and its varint value or length-delimited bytes.
    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>, ProtobufError> {
        if self.bytes.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| malformed("field number too large"))?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let n =
                    usize::try_from(self.varint()?).map_err(|_| malformed("length too large"))?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return Err(malformed(format!("unsupported wire type {other}"))),
        };
        Ok(Some((number, wire)))
    }
}

enum Wire<'a> {
    Varint(u64),
    Fixed,
    Bytes(&'a [u8]),
}

fn text(bytes: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| malformed("a string that is not UTF-8"))
}

fn time(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut reader = Reader { bytes };
    let mut seconds: i64 = 0;
    while let Some((number, wire)) = reader.field()? {
        if let (1, Wire::Varint(v)) = (number, wire) {
            seconds = v as i64;
        }
    }
    if seconds == 0 {
        return Ok(Value::Null);
    }
    let t =
        time::OffsetDateTime::from_unix_timestamp(seconds).map_err(|e| malformed(e.to_string()))?;
    Ok(json!(super::meta::timestamp(t)))
}

fn int_or_string(bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut reader = Reader { bytes };
    let (mut kind, mut int, mut string) = (0u64, 0i64, String::new());
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => kind = v,
            (2, Wire::Varint(v)) => int = i64::from(v as i32),
            (3, Wire::Bytes(b)) => string = text(b)?,
            _ => {}
        }
    }
    Ok(if kind == 1 { json!(string) } else { json!(int) })
}

/// A map entry: `(key, value bytes or string)`.
fn entry(bytes: &[u8]) -> Result<(String, &[u8]), ProtobufError> {
    let mut reader = Reader { bytes };
    let (mut key, mut value): (String, &[u8]) = (String::new(), &[]);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => key = text(b)?,
            (2, Wire::Bytes(b)) => value = b,
            _ => {}
        }
    }
    Ok((key, value))
}

fn value(kind: Kind, wire: Wire<'_>) -> Result<Value, ProtobufError> {
    Ok(match (kind, wire) {
        (Str, Wire::Bytes(b)) => json!(text(b)?),
        (Bytes, Wire::Bytes(b)) => json!(B64.encode(b)),
        (Bool, Wire::Varint(v)) => json!(v != 0),
        (Int, Wire::Varint(v)) => json!(v as i64),
        (Time, Wire::Bytes(b)) => time(b)?,
        (RawJson, Wire::Bytes(b)) => serde_json::from_slice(b)
            .map_err(|e| malformed(format!("FieldsV1 is not JSON: {e}")))?,
        (IntOrString, Wire::Bytes(b)) => int_or_string(b)?,
        (Kind::Msg(schema), Wire::Bytes(b)) => decode(schema, b)?,
        _ => return Err(malformed("a field of the wrong wire type")),
    })
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Bool(_) => false,
    }
}

fn decode(schema: &Msg, bytes: &[u8]) -> Result<Value, ProtobufError> {
    let mut out = Map::new();
    let mut reader = Reader { bytes };
    while let Some((number, wire)) = reader.field()? {
        let Some(field) = schema.0.iter().find(|f| f.number == number) else {
            continue;
        };
        match field.kind {
            StrMap | BytesMap | ExtraMap => {
                let Wire::Bytes(b) = wire else {
                    return Err(malformed(format!(
                        "{}: a map entry of the wrong wire type",
                        field.name
                    )));
                };
                let (key, raw) = entry(b)?;
                let v = match field.kind {
                    StrMap => json!(text(raw)?),
                    BytesMap => json!(B64.encode(raw)),
                    _ => {
                        let mut items = Vec::new();
                        let mut reader = Reader { bytes: raw };
                        while let Some((n, w)) = reader.field()? {
                            if let (1, Wire::Bytes(s)) = (n, w) {
                                items.push(json!(text(s)?));
                            }
                        }
                        json!(items)
                    }
                };
                let map = out.entry(field.name).or_insert_with(|| json!({}));
                if let Some(m) = map.as_object_mut() {
                    m.insert(key, v);
                }
            }
            _ if field.repeated => {
                let v = value(field.kind, wire)?;
                let list = out.entry(field.name).or_insert_with(|| json!([]));
                if let Some(l) = list.as_array_mut() {
                    l.push(v);
                }
            }
            _ => {
                let v = value(field.kind, wire)?;
                if !is_zero(&v) {
                    out.insert(field.name.to_string(), v);
                }
            }
        }
    }
    // FieldsV1's raw JSON is the whole value.
    if schema.0.len() == 1 && schema.0[0].name == "Raw" {
        return Ok(out.remove("Raw").unwrap_or(Value::Null));
    }
    Ok(Value::Object(out))
}

/// Whether `content_type` is the protobuf media type.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim() == CONTENT_TYPE)
}

/// The JSON object a protobuf body encodes.
///
/// # Errors
/// A malformed body, or a kind not read from protobuf.
pub fn to_json(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed("no k8s protobuf magic"))?;
    let mut reader = Reader { bytes: rest };
    let (mut api_version, mut kind, mut raw): (String, String, &[u8]) =
        (String::new(), String::new(), &[]);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(type_meta)) => {
                let mut t = Reader { bytes: type_meta };
                while let Some((n, w)) = t.field()? {
                    match (n, w) {
                        (1, Wire::Bytes(b)) => api_version = text(b)?,
                        (2, Wire::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let schema = schema(&api_version, &kind).ok_or_else(|| ProtobufError::Unsupported {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let mut object = decode(schema, raw)?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn bytes_field(n: u32, b: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(n << 3 | 2), out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    #[test]
    fn kubectls_namespace_body_decodes() {
        // What `kubectl create ns x` sends (captured with -v=8).
        let body: Vec<u8> = vec![
            0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61,
            0x6d, 0x65, 0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x19, 0x0a, 0x11, 0x0a, 0x01, 0x78,
            0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00,
            0x12, 0x00, 0x1a, 0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00,
        ];
        let object = to_json(&body).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
        );
    }

    #[test]
    fn secrets_maps_and_repeated_messages_decode() {
        let mut meta = Vec::new();
        bytes_field(1, b"s", &mut meta);
        let mut label = Vec::new();
        bytes_field(1, b"app", &mut label);
        bytes_field(2, b"web", &mut label);
        bytes_field(11, &label, &mut meta);
        let mut secret = Vec::new();
        bytes_field(1, &meta, &mut secret);
        let mut data = Vec::new();
        bytes_field(1, b"k", &mut data);
        bytes_field(2, &[0, 1, 2], &mut data);
        bytes_field(2, &data, &mut secret);
        bytes_field(3, b"Opaque", &mut secret);
        let mut type_meta = Vec::new();
        bytes_field(1, b"v1", &mut type_meta);
        bytes_field(2, b"Secret", &mut type_meta);
        let mut body = MAGIC.to_vec();
        bytes_field(1, &type_meta, &mut body);
        bytes_field(2, &secret, &mut body);
        assert_eq!(
            to_json(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "s", "labels": {"app": "web"}}, "data": {"k": "AAEC"}})
        );
    }

    #[test]
    fn unknown_kinds_and_garbage_are_refused() {
        let mut type_meta = Vec::new();
        bytes_field(1, b"batch/v1", &mut type_meta);
        bytes_field(2, b"Job", &mut type_meta);
        let mut body = MAGIC.to_vec();
        bytes_field(1, &type_meta, &mut body);
        assert_eq!(
            to_json(&body),
            Err(ProtobufError::Unsupported {
                api_version: "batch/v1".into(),
                kind: "Job".into()
            })
        );
        assert!(matches!(to_json(b"{}"), Err(ProtobufError::Malformed(_))));
        assert!(matches!(
            to_json(b"k8s\0\x0a\xff"),
            Err(ProtobufError::Malformed(_))
        ));
    }
}
