//! Object metadata: reading it, naming rules, and what the server sets (uid, timestamps,
//! generated names).

use rand::Rng as _;
use serde_json::{Map, Value, json};

/// `metadata.name`.
pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// `metadata.namespace`.
pub fn namespace(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// `metadata.labels`.
pub fn labels(object: &Value) -> Option<&Map<String, Value>> {
    object["metadata"]["labels"].as_object()
}

/// `metadata.resourceVersion`.
pub fn resource_version(object: &Value) -> &str {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn deleting(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

/// `metadata` as a mutable map, made an object if it was not one.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    match object.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        // Just made an object above.
        None => unreachable!("metadata is an object"),
    }
}

/// Sets `metadata.resourceVersion`.
pub fn set_resource_version(object: &mut Value, revision: u64) {
    if object.is_object() {
        metadata_mut(object).insert("resourceVersion".into(), json!(revision.to_string()));
    }
}

/// The current time as Kubernetes writes timestamps (RFC 3339, seconds, `Z`).
pub fn now() -> String {
    timestamp(time::OffsetDateTime::now_utc())
}

/// A time as Kubernetes writes timestamps.
pub fn timestamp(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The current time with microseconds (`MicroTime`, as Leases and events.k8s.io use).
pub fn now_micro() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// Parses an RFC 3339 timestamp.
pub fn parse_time(text: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}

/// A random version-4 UUID.
pub fn uid() -> String {
    let mut bytes: [u8; 16] = rand::thread_rng().r#gen();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The five random characters `generateName` gets (apimachinery's alphabet: no vowels, no
/// confusable digits).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::thread_rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
        .collect()
}

/// How a kind's names are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A lowercase RFC 1123 subdomain (most kinds).
    Subdomain,
    /// A lowercase RFC 1123 label (namespaces).
    Label,
    /// An RFC 1035 label (services).
    Label1035,
    /// Any path segment: not `.`, `..`, and no `/` or `%` (RBAC objects).
    PathSegment,
}

fn label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Whether `s` is a DNS-1123 subdomain.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(label_chars)
}

/// Why `name` breaks `rule`, worded as apimachinery's validation words it.
pub fn check_name(name: &str, rule: NameRule) -> Option<String> {
    match rule {
        NameRule::Subdomain => {
            if name.len() > 253 {
                Some("must be no more than 253 characters".to_string())
            } else if !is_dns_subdomain(name) {
                Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string())
            } else {
                None
            }
        }
        NameRule::Label => {
            if name.len() > 63 {
                Some("must be no more than 63 characters".to_string())
            } else if !label_chars(name) {
                Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_string())
            } else {
                None
            }
        }
        NameRule::Label1035 => {
            if name.len() > 63 {
                Some("must be no more than 63 characters".to_string())
            } else if !label_chars(name) || !name.as_bytes()[0].is_ascii_lowercase() {
                Some("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_string())
            } else {
                None
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                Some(format!("may not be '{name}'"))
            } else if name.contains('/') {
                Some("may not contain '/'".to_string())
            } else if name.contains('%') {
                Some("may not contain '%'".to_string())
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_their_kind_rule() {
        assert_eq!(check_name("a.b-c", NameRule::Subdomain), None);
        assert!(check_name("A", NameRule::Subdomain).is_some());
        assert!(check_name("a.b", NameRule::Label).is_some());
        assert!(check_name("1a", NameRule::Label1035).is_some());
        assert_eq!(check_name("system:node", NameRule::PathSegment), None);
        assert!(check_name("a/b", NameRule::PathSegment).is_some());
        assert!(check_name(&"a".repeat(64), NameRule::Label).is_some());
    }

    #[test]
    fn generated_values_have_their_shape() {
        let u = uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(uid(), u);
        let s = name_suffix();
        assert_eq!(s.len(), 5);
        assert!(
            s.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
        let t = timestamp(time::macros::datetime!(2026-01-02 03:04:05 UTC));
        assert_eq!(t, "2026-01-02T03:04:05Z");
        assert!(parse_time(&now()).is_some());
        assert!(parse_time(&now_micro()).is_some());
    }
}
