//! Failures as kube-apiserver reports them: a `Status` object whose code, reason, message and
//! details are worded as the real server words them, because clients (kubectl, client-go,
//! kube-rs) and people read them.

use http::StatusCode;
use serde_json::{Value, json};

use super::storage::StorageError;

/// One cause of an `Invalid` failure: `field: type: detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The field path, as `spec.names.plural`.
    pub field: String,
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// The message of the cause (with the field path).
    pub message: String,
}

impl Cause {
    /// `field: Invalid value: "value": detail`.
    pub fn invalid(field: &str, value: &Value, detail: &str) -> Cause {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        Cause {
            field: field.to_string(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {shown}: {detail}"),
        }
    }

    /// `field: Required value[: detail]`.
    pub fn required(field: &str, detail: &str) -> Cause {
        Cause {
            field: field.to_string(),
            reason: "FieldValueRequired",
            message: if detail.is_empty() {
                "Required value".to_string()
            } else {
                format!("Required value: {detail}")
            },
        }
    }

    /// `field: Forbidden: detail`.
    pub fn forbidden(field: &str, detail: &str) -> Cause {
        Cause {
            field: field.to_string(),
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
        }
    }

    /// `field: Unsupported value: "v": supported values: "a", "b"`.
    pub fn unsupported(field: &str, value: &str, supported: &[&str]) -> Cause {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause {
            field: field.to_string(),
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
        }
    }

    /// `field: Invalid value: "type": detail` for a value of the wrong JSON type.
    pub fn type_invalid(field: &str, found: &Value, expected: &str) -> Cause {
        Cause {
            field: field.to_string(),
            reason: "FieldValueTypeInvalid",
            message: format!(
                "Invalid value: \"{}\": {field} in body must be of type {expected}: \"{}\"",
                json_type(found),
                json_type(found)
            ),
        }
    }

    /// `field: Duplicate value: v`.
    pub fn duplicate(field: &str, value: &Value) -> Cause {
        Cause {
            field: field.to_string(),
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: {value}"),
        }
    }

    fn text(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// The JSON type name of a value, as OpenAPI names it.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A failure to answer with.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, ...; empty for a bare `BadRequest`.
    pub reason: &'static str,
    pub message: String,
    /// `Status.details`, when the real server gives some.
    pub details: Option<Value>,
}

/// A result of the API.
pub type ApiResult<T> = std::result::Result<T, ApiError>;

/// `resource.group`, or `resource` in the core group: how messages name a resource.
pub fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(group: &str, kind: &str, name: &str) -> Value {
    let mut d = json!({"kind": kind});
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// 400 with reason `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 404 for an object: `configmaps "x" not found`.
    pub fn not_found(resource: &str, group: &str, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", qualified(resource, group)),
        )
        .with_details(details(group, resource, name))
    }

    /// 404 for a path nobody serves.
    pub fn no_route() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 405.
    pub fn method_not_supported(resource: &str, group: &str, action: &str) -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind {:?}",
                qualified(resource, group)
            ),
        )
        .with_details(details(group, resource, ""))
    }

    /// 409 for a create of an existing object.
    pub fn already_exists(resource: &str, group: &str, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", qualified(resource, group)),
        )
        .with_details(details(group, resource, name))
    }

    /// 409 for a write at an old resourceVersion.
    pub fn conflict(resource: &str, group: &str, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                qualified(resource, group)
            ),
        )
        .with_details(details(group, resource, name))
    }

    /// The conflict of an update at a resourceVersion that is not the object's.
    pub fn modified(resource: &str, group: &str, name: &str) -> ApiError {
        ApiError::conflict(
            resource,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422: `Kind.group "name" is invalid: [causes]`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let texts: Vec<String> = causes.iter().map(Cause::text).collect();
        let list = if texts.len() == 1 {
            texts[0].clone()
        } else {
            format!("[{}]", texts.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let mut d = details(group, kind, name);
        d["causes"] = json!(causes);
        ApiError::new(
            422,
            "Invalid",
            format!("{} {name:?} is invalid: {list}", qualified(kind, group)),
        )
        .with_details(d)
    }

    /// 403 for an object or a collection.
    pub fn forbidden(resource: &str, group: &str, name: &str, why: &str) -> ApiError {
        let message = if resource.is_empty() {
            format!("forbidden: {why}")
        } else if name.is_empty() {
            format!("{} is forbidden: {why}", qualified(resource, group))
        } else {
            format!(
                "{} {name:?} is forbidden: {why}",
                qualified(resource, group)
            )
        };
        ApiError::new(403, "Forbidden", message).with_details(details(group, resource, name))
    }

    /// 401.
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 410 for a watch or list from a compacted resourceVersion.
    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// 415.
    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": content_type}]}))
    }

    /// 413.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    /// 503.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(503, "ServiceUnavailable", message)
    }

    /// 504 for a request that did not finish in time.
    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(504, "Timeout", message)
    }

    /// The HTTP status.
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(o) = status.as_object_mut()
        {
            o.remove("reason");
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }

    /// A storage failure on `resource` `name`.
    pub fn from_storage(error: StorageError, resource: &str, group: &str, name: &str) -> ApiError {
        match error {
            StorageError::Exists { .. } => ApiError::already_exists(resource, group, name),
            StorageError::NotFound { .. } => ApiError::not_found(resource, group, name),
            StorageError::Conflict { .. } => ApiError::modified(resource, group, name),
            StorageError::Compacted { requested, .. } => ApiError::gone(format!(
                "The resourceVersion for the provided watch is too old (resourceVersion {requested} was compacted)"
            )),
            StorageError::Unavailable(message) => ApiError::internal(message),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_worded_as_the_real_servers() {
        assert_eq!(
            ApiError::not_found("configmaps", "", "x").message,
            "configmaps \"x\" not found"
        );
        assert_eq!(
            ApiError::not_found("leases", "coordination.k8s.io", "l").message,
            "leases.coordination.k8s.io \"l\" not found"
        );
        assert_eq!(
            ApiError::modified("configmaps", "", "x").message,
            "Operation cannot be fulfilled on configmaps \"x\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let forbidden = ApiError::forbidden(
            "namespaces",
            "",
            "",
            "User \"u\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope",
        );
        assert_eq!(
            forbidden.to_status(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "namespaces is forbidden: User \"u\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope",
                "reason": "Forbidden", "details": {"kind": "namespaces"}, "code": 403,
            })
        );
        let invalid = ApiError::invalid(
            "ConfigMap",
            "",
            "x",
            vec![
                Cause::required("metadata.name", "name or generateName is required"),
                Cause::invalid("data", &json!("a"), "bad"),
            ],
        );
        assert_eq!(
            invalid.message,
            "ConfigMap \"x\" is invalid: [metadata.name: Required value: name or generateName is required, data: Invalid value: \"a\": bad]"
        );
        assert_eq!(
            invalid.to_status()["details"]["causes"][0]["field"],
            "metadata.name"
        );
    }
}
