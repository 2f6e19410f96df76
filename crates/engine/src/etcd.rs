//! etcd cluster membership through the v3 JSON gateway that etcd (3.4 and later) serves on
//! its client port: `POST /v3/cluster/member/{list,add,promote,remove}`. 64-bit member IDs
//! travel as JSON strings (grpc-gateway's encoding of uint64); both forms are accepted.

use http::Method;
use serde::Deserialize;

use crate::https::{HttpsRequest, Network, Tls};

/// One member as etcd reports it. A member added but not started yet has no name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl Member {
    /// Whether the member process has started and joined (it has published its name).
    pub fn started(&self) -> bool {
        !self.name.is_empty()
    }
}

/// Why a membership call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd {endpoint} unreachable: {reason}")]
    Unreachable { endpoint: String, reason: String },
    #[error("etcd {endpoint} answered {operation} with HTTP {status}: {message}")]
    Status {
        endpoint: String,
        operation: &'static str,
        status: u16,
        message: String,
    },
    #[error("etcd {endpoint} answered {operation} with an unexpected body: {reason}")]
    Body {
        endpoint: String,
        operation: &'static str,
        reason: String,
    },
}

impl EtcdError {
    /// Whether etcd refused a membership change for a passing reason: the cluster looks
    /// unhealthy (a member just joined or was promoted), a learner is not in sync yet, or
    /// the endpoint did not answer.
    pub fn retryable(&self) -> bool {
        match self {
            EtcdError::Unreachable { .. } => true,
            EtcdError::Status {
                status, message, ..
            } => {
                *status == 503
                    || message.contains("unhealthy")
                    || message.contains("in sync")
                    || message.contains("too many learner")
            }
            EtcdError::Body { .. } => false,
        }
    }

    /// Whether etcd refused to promote a learner that has not caught up yet (retryable).
    pub fn not_in_sync(&self) -> bool {
        matches!(self, EtcdError::Status { message, .. } if message.contains("in sync"))
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Text(String),
    Number(u64),
}

impl Id {
    fn value(&self) -> Option<u64> {
        match self {
            Id::Text(s) => s.parse().ok(),
            Id::Number(n) => Some(*n),
        }
    }
}

#[derive(Deserialize)]
struct WireMember {
    #[serde(rename = "ID")]
    id: Id,
    #[serde(default)]
    name: String,
    #[serde(default, rename = "peerURLs")]
    peer_urls: Vec<String>,
    #[serde(default, rename = "clientURLs")]
    client_urls: Vec<String>,
    #[serde(default, rename = "isLearner")]
    is_learner: bool,
}

#[derive(Deserialize)]
struct MembersResponse {
    #[serde(default)]
    members: Vec<WireMember>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: String,
    #[serde(default)]
    message: String,
}

/// Membership calls against one cluster's etcd, with the engine's etcd client identity.
pub struct EtcdClient<'a, N> {
    pub network: &'a N,
    pub tls: &'a Tls,
}

impl<N: Network> EtcdClient<'_, N> {
    /// One request to the member at `endpoint`, with the engine's client certificate.
    async fn request(
        &self,
        endpoint: &str,
        method: &Method,
        path: &str,
        body: Option<&str>,
    ) -> Result<crate::https::HttpsResponse, EtcdError> {
        self.network
            .request(HttpsRequest {
                base: endpoint,
                method,
                path,
                body,
                tls: self.tls,
                bearer: None,
            })
            .await
            .map_err(|e| EtcdError::Unreachable {
                endpoint: endpoint.to_string(),
                reason: e.reason,
            })
    }

    async fn call(
        &self,
        endpoint: &str,
        operation: &'static str,
        body: String,
    ) -> Result<Vec<u8>, EtcdError> {
        let path = format!("/v3/cluster/member/{operation}");
        self.post(endpoint, &path, operation, body).await
    }

    async fn post(
        &self,
        endpoint: &str,
        path: &str,
        operation: &'static str,
        body: String,
    ) -> Result<Vec<u8>, EtcdError> {
        let response = self
            .request(endpoint, &Method::POST, path, Some(&body))
            .await?;
        if !(200..300).contains(&response.status) {
            let message = match serde_json::from_slice::<ErrorBody>(&response.body) {
                Ok(b) if !b.error.is_empty() => b.error,
                Ok(b) if !b.message.is_empty() => b.message,
                _ => String::from_utf8_lossy(&response.body)
                    .chars()
                    .take(300)
                    .collect(),
            };
            return Err(EtcdError::Status {
                endpoint: endpoint.to_string(),
                operation,
                status: response.status,
                message,
            });
        }
        Ok(response.body)
    }

    /// The members, as `endpoint` sees them (sorted by name, then ID).
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn list(&self, endpoint: &str) -> Result<Vec<Member>, EtcdError> {
        let body = self.call(endpoint, "list", "{}".to_string()).await?;
        parse_members(endpoint, "list", &body)
    }

    /// Adds a learner with `peer_url`; returns the members after the change.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn add_learner(&self, endpoint: &str, peer_url: &str) -> Result<(), EtcdError> {
        let body = serde_json::json!({"peerURLs": [peer_url], "isLearner": true}).to_string();
        self.call(endpoint, "add", body).await.map(|_| ())
    }

    /// Promotes learner `id` to a voting member.
    ///
    /// # Errors
    /// Any [`EtcdError`]; [`EtcdError::not_in_sync`] tells when retrying makes sense.
    pub async fn promote(&self, endpoint: &str, id: u64) -> Result<(), EtcdError> {
        let body = serde_json::json!({"ID": id.to_string()}).to_string();
        self.call(endpoint, "promote", body).await.map(|_| ())
    }

    /// Whether the member at `endpoint` is healthy by etcd's own measure (`GET /health`:
    /// it has a leader and a quorum answers a linearizable read through it). `Ok(false)`
    /// when it answered that it is not, an error when it did not answer.
    ///
    /// # Errors
    /// [`EtcdError::Unreachable`], or [`EtcdError::Body`] for an answer that is not etcd's.
    pub async fn healthy(&self, endpoint: &str) -> Result<bool, EtcdError> {
        let response = self
            .request(endpoint, &Method::GET, "/health", None)
            .await?;
        #[derive(Deserialize)]
        struct Health {
            health: String,
        }
        match serde_json::from_slice::<Health>(&response.body) {
            Ok(h) => Ok(response.status == 200 && h.health == "true"),
            Err(e) => Err(EtcdError::Body {
                endpoint: endpoint.to_string(),
                operation: "health",
                reason: format!("HTTP {}: {e}", response.status),
            }),
        }
    }

    /// The status of the member at `endpoint` (`POST /v3/maintenance/status`).
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn status(&self, endpoint: &str) -> Result<MemberStatus, EtcdError> {
        let body = self
            .post(endpoint, "/v3/maintenance/status", "status", "{}".into())
            .await?;
        #[derive(Deserialize)]
        struct Header {
            #[serde(default)]
            revision: Option<Id>,
            #[serde(default)]
            member_id: Option<Id>,
            #[serde(default)]
            cluster_id: Option<Id>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            header: Header,
            #[serde(default)]
            version: String,
            #[serde(default)]
            db_size: Option<Id>,
            #[serde(default)]
            leader: Option<Id>,
        }
        let wire: Wire = serde_json::from_slice(&body).map_err(|e| EtcdError::Body {
            endpoint: endpoint.to_string(),
            operation: "status",
            reason: e.to_string(),
        })?;
        let id = |v: &Option<Id>| v.as_ref().and_then(Id::value).unwrap_or(0);
        Ok(MemberStatus {
            revision: id(&wire.header.revision),
            member_id: id(&wire.header.member_id),
            cluster_id: id(&wire.header.cluster_id),
            leader: id(&wire.leader),
            db_size: id(&wire.db_size),
            version: wire.version,
        })
    }

    /// A snapshot of the member at `endpoint` (`POST /v3/maintenance/snapshot`): the
    /// database and its SHA-256, as `etcdctl snapshot save` writes them (the caller checks
    /// the checksum).
    ///
    /// # Errors
    /// Any [`EtcdError`]; an error in the stream is [`EtcdError::Status`].
    pub async fn snapshot(&self, endpoint: &str) -> Result<Vec<u8>, EtcdError> {
        let body = self
            .post(
                endpoint,
                "/v3/maintenance/snapshot",
                "snapshot",
                "{}".into(),
            )
            .await?;
        parse_snapshot_stream(endpoint, &body)
    }

    /// Hands leadership to member `target` (`POST /v3/maintenance/transfer-leadership`);
    /// `endpoint` must be the leader's.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn transfer_leadership(&self, endpoint: &str, target: u64) -> Result<(), EtcdError> {
        let body = serde_json::json!({"targetID": target.to_string()}).to_string();
        self.post(
            endpoint,
            "/v3/maintenance/transfer-leadership",
            "transfer-leadership",
            body,
        )
        .await
        .map(|_| ())
    }

    /// Removes member `id`.
    ///
    /// # Errors
    /// Any [`EtcdError`].
    pub async fn remove(&self, endpoint: &str, id: u64) -> Result<(), EtcdError> {
        let body = serde_json::json!({"ID": id.to_string()}).to_string();
        self.call(endpoint, "remove", body).await.map(|_| ())
    }
}

/// What a member says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub revision: u64,
    pub member_id: u64,
    /// The etcd cluster the member belongs to: a member started on another cluster's data
    /// (or its own, founded anew) names another.
    pub cluster_id: u64,
    pub leader: u64,
    pub db_size: u64,
    pub version: String,
}

/// The snapshot stream of etcd's gateway: one JSON message per line, each
/// `{"result":{"remaining_bytes":..,"blob":"<base64>"}}` or `{"error":{..}}`.
fn parse_snapshot_stream(endpoint: &str, body: &[u8]) -> Result<Vec<u8>, EtcdError> {
    use base64::Engine as _;
    #[derive(Deserialize)]
    struct Chunk {
        #[serde(default)]
        blob: String,
    }
    #[derive(Deserialize)]
    struct Message {
        #[serde(default)]
        result: Option<Chunk>,
        #[serde(default)]
        error: Option<serde_json::Value>,
    }
    let bad = |reason: String| EtcdError::Body {
        endpoint: endpoint.to_string(),
        operation: "snapshot",
        reason,
    };
    let mut out = Vec::new();
    for line in body.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let m: Message = serde_json::from_slice(line).map_err(|e| bad(e.to_string()))?;
        if let Some(error) = m.error {
            let message = error
                .get("message")
                .and_then(|v| v.as_str())
                .map_or_else(|| error.to_string(), str::to_string);
            return Err(EtcdError::Status {
                endpoint: endpoint.to_string(),
                operation: "snapshot",
                status: 200,
                message,
            });
        }
        let chunk = m
            .result
            .ok_or_else(|| bad("a message without result".into()))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(chunk.blob.as_bytes())
            .map_err(|e| bad(format!("a chunk is not base64: {e}")))?;
        out.extend_from_slice(&bytes);
    }
    if out.is_empty() {
        return Err(bad("an empty snapshot".into()));
    }
    Ok(out)
}

fn parse_members(
    endpoint: &str,
    operation: &'static str,
    body: &[u8],
) -> Result<Vec<Member>, EtcdError> {
    let bad = |reason: String| EtcdError::Body {
        endpoint: endpoint.to_string(),
        operation,
        reason,
    };
    let parsed: MembersResponse = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    let mut members = Vec::with_capacity(parsed.members.len());
    for m in parsed.members {
        let id =
            m.id.value()
                .ok_or_else(|| bad("a member ID is not a number".to_string()))?;
        members.push(Member {
            id,
            name: m.name,
            peer_urls: m.peer_urls,
            client_urls: m.client_urls,
            is_learner: m.is_learner,
        });
    }
    members.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_stream_is_its_chunks_joined() {
        let body = b"{\"result\":{\"remaining_bytes\":\"3\",\"blob\":\"AAEC\"}}\n{\"result\":{\"blob\":\"AwQ=\"}}\n";
        assert_eq!(
            parse_snapshot_stream("https://x", body).unwrap(),
            [0u8, 1, 2, 3, 4]
        );
        let failed = b"{\"result\":{\"blob\":\"AAEC\"}}\n{\"error\":{\"grpc_code\":14,\"message\":\"etcdserver: stopped\"}}\n";
        assert_eq!(
            parse_snapshot_stream("https://x", failed)
                .unwrap_err()
                .to_string(),
            "etcd https://x answered snapshot with HTTP 200: etcdserver: stopped"
        );
        assert!(parse_snapshot_stream("https://x", b"").is_err());
        assert!(parse_snapshot_stream("https://x", b"{\"result\":{\"blob\":\"!!\"}}").is_err());
    }

    #[test]
    fn members_parse_as_etcd_34_writes_them() {
        let body = br#"{"header":{"cluster_id":"1","member_id":"2","raft_term":"3"},
          "members":[{"ID":"12345678901234567890","name":"c-control-plane-0",
          "peerURLs":["https://10.0.0.2:30001"],"clientURLs":["https://10.0.0.2:30000"]},
          {"ID":"42","peerURLs":["https://10.0.0.3:30001"],"isLearner":true}]}"#;
        let members = parse_members("https://x", "list", body).unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].id, 42);
        assert!(!members[0].started() && members[0].is_learner);
        assert_eq!(members[1].id, 12_345_678_901_234_567_890);
        assert!(members[1].started() && !members[1].is_learner);
    }
}
