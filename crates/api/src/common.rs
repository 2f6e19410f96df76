//! Value types shared by several kinds: certificates, key pairs and conditions.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// A PEM encoded certificate and its PEM encoded private key. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Certificate {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub certificate: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub private_key: String,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("certificate", &self.certificate)
            .field("private_key", &redacted(&self.private_key))
            .finish()
    }
}

/// A PEM encoded public/private key pair. `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyPair {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub private_key: String,
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair")
            .field("public_key", &self.public_key)
            .field("private_key", &redacted(&self.private_key))
            .finish()
    }
}

/// What `Debug` shows in place of a secret: whether it is set, never its value.
pub(crate) fn redacted(secret: &str) -> &'static str {
    if secret.is_empty() {
        "<empty>"
    } else {
        "<redacted>"
    }
}

/// Condition types oneinfra sets.
pub mod condition_types {
    /// A Cluster or Component reconciliation started.
    pub const RECONCILE_STARTED: &str = "ReconcileStarted";
    /// A Cluster or Component reconciled successfully (status `True`) or not (`False`).
    pub const RECONCILE_SUCCEEDED: &str = "ReconcileSucceeded";
    /// A NodeJoinRequest has every answer filled in its status.
    pub const ISSUED: &str = "Issued";
    /// Ours: a Component took part in a run that ended with its cluster ready (its etcd
    /// member voting, its API server or ingress answering).
    pub const JOINED: &str = "Joined";
    /// Ours: a Cluster has nothing left on a drained hypervisor (`True`), or not yet
    /// (`False`: `Moving`, `Waiting` or `NoCapacity`). Only clusters a drain touched have it.
    pub const DRAINED: &str = "Drained";
    /// Ours: a Cluster has nothing left on a lost hypervisor (`True`, reason `Replaced`), or
    /// not yet (`False`: `Replacing`). Only clusters that lost a hypervisor have it.
    pub const HEALED: &str = "Healed";
    /// Ours: a Hypervisor answered the manager's last probe (`True`), or not (`False`, since
    /// `lastTransitionTime`). Written by `oi-manager`'s Hypervisor controller.
    pub const REACHABLE: &str = "Reachable";
}

/// Status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

// YAML 1.2 reads an unquoted `True` as a boolean: accept booleans as well as the strings
// Kubernetes writes.
impl<'de> Deserialize<'de> for ConditionStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl serde::de::Visitor<'_> for Visitor {
            type Value = ConditionStatus;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`True`, `False` or `Unknown`")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(if v {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                })
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "True" => Ok(ConditionStatus::True),
                    "False" => Ok(ConditionStatus::False),
                    "Unknown" => Ok(ConditionStatus::Unknown),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        })
    }
}

/// A condition of a Cluster, Component or NodeJoinRequest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When status, reason or message last changed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub last_set_time: Option<OffsetDateTime>,
    /// When status last changed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub last_transition_time: Option<OffsetDateTime>,
}

impl Condition {
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// The condition of a type, if set.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of a type is set with status `True`.
pub fn condition_is_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(Condition::is_true)
}

/// Sets a condition, appending it when its type is new. `lastTransitionTime` changes only when
/// the status changes; `lastSetTime` only when status, reason or message change, so that
/// setting the same condition again leaves the object, and its written manifest, unchanged.
/// Returns whether anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: OffsetDateTime,
) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status == status && c.reason == reason && c.message == message {
                return false;
            }
            if c.status != status || c.last_transition_time.is_none() {
                c.last_transition_time = Some(now);
            }
            c.status = status;
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.last_set_time = Some(now);
            true
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.to_string(),
                message: message.to_string(),
                last_set_time: Some(now),
                last_transition_time: Some(now),
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let t0 = datetime!(2026-01-01 00:00:00 UTC);
        let t1 = datetime!(2026-01-01 00:01:00 UTC);
        let t2 = datetime!(2026-01-01 00:02:00 UTC);
        let mut cs = Vec::new();
        assert!(set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::False,
            "Starting",
            "",
            t0
        ));
        assert!(!set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::False,
            "Starting",
            "",
            t1
        ));
        assert_eq!(cs[0].last_set_time, Some(t0));
        assert!(set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::False,
            "Waiting",
            "etcd",
            t1
        ));
        assert_eq!(cs[0].last_set_time, Some(t1));
        assert_eq!(cs[0].last_transition_time, Some(t0));
        assert!(set_condition(
            &mut cs,
            "Ready",
            ConditionStatus::True,
            "Up",
            "",
            t2
        ));
        assert_eq!(cs[0].last_transition_time, Some(t2));
        assert!(condition_is_true(&cs, "Ready"));
        assert!(!condition_is_true(&cs, "Other"));
        assert_eq!(cs.len(), 1);
    }

    #[test]
    fn debug_hides_private_keys() {
        let c = Certificate {
            certificate: "CERT".into(),
            private_key: "SECRET".into(),
        };
        let k = KeyPair {
            public_key: "PUB".into(),
            private_key: "SECRET".into(),
        };
        let shown = format!("{c:?} {k:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("CERT") && shown.contains("PUB"), "{shown}");
    }
}
