//! [`Storage`] in a real etcd, through its v3 JSON gateway (`/v3/kv/range`, `/v3/kv/txn`,
//! `/v3/watch`; keys and values base64, 64-bit numbers as strings), over mutual TLS, with
//! pooled keep-alive connections. Every API server replica of a cluster stores its objects
//! here, so they all serve the same ones and a replaced replica loses nothing.
//!
//! ```text
//!  create  txn: if create_revision(key) == 0 then put          else Exists
//!  update  txn: if mod_revision(key) == expected then put      else range → NotFound | Conflict
//!  delete  txn: if mod_revision(key) == expected then delete   else range → NotFound | Conflict
//!  list    range [start, prefix end) limit n (at a revision)   more/count → remaining
//!  watch   watch prefix from after+1, prev_kv                  compact_revision → Compacted
//! ```
//!
//! Endpoints are tried in order; a transport failure moves on to the next, an answer (even a
//! refusal) does not.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::ClientConfig;
use serde_json::{Value, json};

use super::storage::{
    Change, ChangeStream, ListOptions, Listed, Result, Storage, StorageError, Stored,
};
use crate::https::{Endpoint, HttpsError};

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// etcd as [`Storage`].
pub struct EtcdStorage {
    endpoints: Vec<Endpoint>,
    client: Client<Connector, Full<Bytes>>,
    timeout: Duration,
    /// The endpoint that answered last; tried first.
    preferred: AtomicUsize,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage")
            .field(
                "endpoints",
                &self.endpoints.iter().map(|e| &e.url).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

fn unavailable(message: impl Into<String>) -> StorageError {
    StorageError::Unavailable(message.into())
}

/// A 64-bit number of the gateway's JSON: a string, or a number, or absent (zero).
fn number(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The end of the range holding every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the key space.
    vec![0]
}

/// A key and value from the gateway.
struct Kv {
    key: String,
    value: Value,
    mod_revision: u64,
}

fn kv(raw: &Value) -> Result<Option<Kv>> {
    if raw.is_null() {
        return Ok(None);
    }
    let decode = |field: &str| -> Result<Vec<u8>> {
        B64.decode(raw[field].as_str().unwrap_or_default())
            .map_err(|e| unavailable(format!("etcd answered a {field} that is not base64: {e}")))
    };
    let key = String::from_utf8(decode("key")?)
        .map_err(|_| unavailable("etcd answered a key that is not UTF-8"))?;
    let bytes = decode("value")?;
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| unavailable(format!("the value at {key} is not JSON: {e}")))?
    };
    Ok(Some(Kv {
        key,
        value,
        mod_revision: number(&raw["mod_revision"]),
    }))
}

impl EtcdStorage {
    /// A store on `servers` (`https://` URLs) with `tls` (etcd's CA, a client certificate).
    ///
    /// # Errors
    /// A server that is not an `https://` URL.
    pub fn new(
        servers: &[String],
        tls: Arc<ClientConfig>,
        timeout: Duration,
    ) -> Result<EtcdStorage, HttpsError> {
        let endpoints = servers
            .iter()
            .map(|s| Endpoint::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut tls = (*tls).clone();
        // The connector sets ALPN itself (and refuses a configuration that has it).
        tls.alpn_protocols = Vec::new();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(EtcdStorage {
            endpoints,
            client,
            timeout,
            preferred: AtomicUsize::new(0),
        })
    }

    fn order(&self) -> impl Iterator<Item = (usize, &Endpoint)> {
        let first = self.preferred.load(Ordering::Relaxed) % self.endpoints.len().max(1);
        (0..self.endpoints.len()).map(move |i| {
            let index = (first + i) % self.endpoints.len();
            (index, &self.endpoints[index])
        })
    }

    fn request(endpoint: &Endpoint, path: &str, body: &Value) -> Result<Request<Full<Bytes>>> {
        Request::builder()
            .method(Method::POST)
            .uri(format!("{}{path}", endpoint.url))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| unavailable(format!("cannot build a request to {}: {e}", endpoint.url)))
    }

    /// One unary call: the first endpoint that answers.
    async fn call(&self, path: &str, body: Value) -> Result<Value> {
        let mut failures = Vec::new();
        for (index, endpoint) in self.order() {
            let request = Self::request(endpoint, path, &body)?;
            let exchange = async {
                let response = self
                    .client
                    .request(request)
                    .await
                    .map_err(|e| format!("{}: {}", endpoint.url, crate::https::chain(&e)))?;
                let status = response.status();
                let bytes = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| format!("{}: {e}", endpoint.url))?
                    .to_bytes();
                Ok::<_, String>((status, bytes))
            };
            match tokio::time::timeout(self.timeout, exchange).await {
                Ok(Ok((status, bytes))) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
                        unavailable(format!(
                            "etcd {} answered {path} with HTTP {status} and a body that is not JSON: {e}",
                            endpoint.url
                        ))
                    })?;
                    if status != StatusCode::OK {
                        let message = value["message"]
                            .as_str()
                            .or(value["error"].as_str())
                            .unwrap_or("no message");
                        if message.contains("required revision has been compacted") {
                            return Err(StorageError::Compacted {
                                requested: 0,
                                oldest: 0,
                            });
                        }
                        return Err(unavailable(format!(
                            "etcd {} answered {path} with HTTP {status}: {message}",
                            endpoint.url
                        )));
                    }
                    return Ok(value);
                }
                Ok(Err(e)) => failures.push(e),
                Err(_) => failures.push(format!(
                    "{}: timed out after {:?}",
                    endpoint.url, self.timeout
                )),
            }
        }
        Err(unavailable(format!(
            "no etcd endpoint answered: {}",
            failures.join("; ")
        )))
    }

    async fn range_one(&self, key: &str) -> Result<Option<Kv>> {
        let answer = self
            .call("/v3/kv/range", json!({"key": b64(key.as_bytes())}))
            .await?;
        match answer["kvs"].as_array().and_then(|kvs| kvs.first()) {
            Some(raw) => kv(raw),
            None => Ok(None),
        }
    }

    /// Why a compare of `key` failed: it is absent, or at another revision.
    async fn refusal(&self, key: &str, expected: u64) -> StorageError {
        match self.range_one(key).await {
            Ok(None) => StorageError::NotFound {
                key: key.to_string(),
            },
            Ok(Some(current)) => StorageError::Conflict {
                key: key.to_string(),
                expected,
                current: current.mod_revision,
            },
            Err(e) => e,
        }
    }

    async fn guarded(&self, key: &str, expected: u64, operation: Value) -> Result<u64> {
        let answer = self
            .call(
                "/v3/kv/txn",
                json!({
                    "compare": [{
                        "key": b64(key.as_bytes()),
                        "target": "MOD",
                        "result": "EQUAL",
                        "mod_revision": expected.to_string(),
                    }],
                    "success": [operation],
                }),
            )
            .await?;
        if answer["succeeded"].as_bool() == Some(true) {
            Ok(number(&answer["header"]["revision"]))
        } else {
            Err(self.refusal(key, expected).await)
        }
    }

    /// Compacts etcd's history up to `revision` (for tests of `410 Gone`).
    ///
    /// # Errors
    /// etcd unreachable or refusing.
    pub async fn compact(&self, revision: u64) -> Result<()> {
        self.call(
            "/v3/kv/compaction",
            json!({"revision": revision.to_string(), "physical": true}),
        )
        .await
        .map(|_| ())
    }

    async fn open_watch(&self, prefix: &str, after: u64) -> Result<ChangeStream> {
        let body = json!({"create_request": {
            "key": b64(prefix.as_bytes()),
            "range_end": b64(&prefix_end(prefix)),
            "start_revision": (after + 1).to_string(),
            "prev_kv": true,
            "progress_notify": true,
        }});
        let mut failures = Vec::new();
        for (index, endpoint) in self.order() {
            let request = Self::request(endpoint, "/v3/watch", &body)?;
            let response =
                match tokio::time::timeout(self.timeout, self.client.request(request)).await {
                    Ok(Ok(response)) => response,
                    Ok(Err(e)) => {
                        failures.push(format!("{}: {}", endpoint.url, crate::https::chain(&e)));
                        continue;
                    }
                    Err(_) => {
                        failures.push(format!("{}: timed out", endpoint.url));
                        continue;
                    }
                };
            self.preferred.store(index, Ordering::Relaxed);
            if response.status() != StatusCode::OK {
                return Err(unavailable(format!(
                    "etcd {} refused a watch with HTTP {}",
                    endpoint.url,
                    response.status()
                )));
            }
            let mut body = response.into_body();
            let mut buffer = BytesMut::new();
            // The first message says whether the watch was created, or why not.
            let first = next_message(&mut body, &mut buffer).await.ok_or_else(|| {
                unavailable(format!("etcd {} ended the watch at once", endpoint.url))
            })??;
            let first_changes = changes(&first, after)?;
            let state = WatchState {
                body,
                buffer,
                pending: first_changes.into(),
                after,
            };
            let stream = futures::stream::unfold(Some(state), |state| async move {
                let mut state = state?;
                loop {
                    if let Some(change) = state.pending.pop_front() {
                        return Some((Ok(change), Some(state)));
                    }
                    match next_message(&mut state.body, &mut state.buffer).await {
                        None => return None,
                        Some(Err(e)) => return Some((Err(e), None)),
                        Some(Ok(message)) => match changes(&message, state.after) {
                            Ok(found) => state.pending.extend(found),
                            Err(e) => return Some((Err(e), None)),
                        },
                    }
                }
            });
            let stream: ChangeStream = Box::pin(stream);
            return Ok(stream);
        }
        Err(unavailable(format!(
            "no etcd endpoint took the watch: {}",
            failures.join("; ")
        )))
    }
}

struct WatchState {
    body: hyper::body::Incoming,
    buffer: BytesMut,
    pending: std::collections::VecDeque<Change>,
    after: u64,
}

/// The next JSON message of a gateway stream; `None` at its end.
async fn next_message(
    body: &mut hyper::body::Incoming,
    buffer: &mut BytesMut,
) -> Option<Result<Value>> {
    loop {
        // A complete value at the start of the buffer?
        let mut values = serde_json::Deserializer::from_slice(buffer).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) => {
                let used = values.byte_offset();
                let _ = buffer.split_to(used);
                return Some(Ok(value));
            }
            Some(Err(e)) if !e.is_eof() => {
                return Some(Err(unavailable(format!(
                    "etcd's watch stream is not JSON: {e}"
                ))));
            }
            _ => {}
        }
        match body.frame().await {
            None => return None,
            Some(Err(e)) => return Some(Err(unavailable(format!("etcd's watch stream: {e}")))),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buffer.extend_from_slice(&data);
                }
            }
        }
    }
}

/// The changes of one watch message.
fn changes(message: &Value, after: u64) -> Result<Vec<Change>> {
    if let Some(error) = message.get("error") {
        return Err(unavailable(format!(
            "etcd's watch failed: {}",
            error["message"].as_str().unwrap_or("no message")
        )));
    }
    let result = &message["result"];
    let compacted = number(&result["compact_revision"]);
    if compacted > 0 {
        return Err(StorageError::Compacted {
            requested: after,
            oldest: compacted,
        });
    }
    if result["canceled"].as_bool() == Some(true) {
        return Err(unavailable(format!(
            "etcd canceled the watch: {}",
            result["cancel_reason"].as_str().unwrap_or("no reason")
        )));
    }
    let mut found = Vec::new();
    for event in result["events"].as_array().into_iter().flatten() {
        let Some(current) = kv(&event["kv"])? else {
            continue;
        };
        let previous = kv(&event["prev_kv"])?.map(|p| p.value);
        let deleted = event["type"].as_str() == Some("DELETE");
        found.push(Change {
            key: current.key,
            revision: current.mod_revision,
            value: (!deleted).then_some(current.value),
            previous,
        });
    }
    Ok(found)
}

impl Storage for EtcdStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Stored>>> {
        Box::pin(async move {
            Ok(self.range_one(key).await?.map(|kv| Stored {
                value: kv.value,
                revision: kv.mod_revision,
            }))
        })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        options: &'a ListOptions,
    ) -> BoxFuture<'a, Result<Listed>> {
        Box::pin(async move {
            let start = options
                .start
                .as_deref()
                .filter(|s| *s > prefix)
                .unwrap_or(prefix);
            let mut request = json!({
                "key": b64(start.as_bytes()),
                "range_end": b64(&prefix_end(prefix)),
            });
            if let Some(limit) = options.limit {
                request["limit"] = json!(limit.max(1).to_string());
            }
            if let Some(revision) = options.revision.filter(|r| *r > 0) {
                request["revision"] = json!(revision.to_string());
            }
            let answer = match self.call("/v3/kv/range", request).await {
                Err(StorageError::Compacted { .. }) => {
                    return Err(StorageError::Compacted {
                        requested: options.revision.unwrap_or(0),
                        oldest: 0,
                    });
                }
                other => other?,
            };
            let mut items = Vec::new();
            for raw in answer["kvs"].as_array().into_iter().flatten() {
                if let Some(kv) = kv(raw)? {
                    items.push((
                        kv.key,
                        Stored {
                            value: kv.value,
                            revision: kv.mod_revision,
                        },
                    ));
                }
            }
            let count = usize::try_from(number(&answer["count"])).unwrap_or(usize::MAX);
            let revision = options
                .revision
                .filter(|r| *r > 0)
                .unwrap_or_else(|| number(&answer["header"]["revision"]));
            Ok(Listed {
                remaining: count.saturating_sub(items.len()),
                items,
                revision,
            })
        })
    }

    fn create<'a>(&'a self, key: &'a str, value: &'a Value) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let answer = self
                .call(
                    "/v3/kv/txn",
                    json!({
                        "compare": [{
                            "key": b64(key.as_bytes()),
                            "target": "CREATE",
                            "result": "EQUAL",
                            "create_revision": "0",
                        }],
                        "success": [{"request_put": {
                            "key": b64(key.as_bytes()),
                            "value": b64(value.to_string().as_bytes()),
                        }}],
                    }),
                )
                .await?;
            if answer["succeeded"].as_bool() == Some(true) {
                Ok(number(&answer["header"]["revision"]))
            } else {
                Err(StorageError::Exists {
                    key: key.to_string(),
                })
            }
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        value: &'a Value,
        expected: u64,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let put = json!({"request_put": {
                "key": b64(key.as_bytes()),
                "value": b64(value.to_string().as_bytes()),
            }});
            self.guarded(key, expected, put).await
        })
    }

    fn delete<'a>(&'a self, key: &'a str, expected: u64) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let delete = json!({"request_delete_range": {"key": b64(key.as_bytes())}});
            self.guarded(key, expected, delete).await
        })
    }

    fn watch<'a>(&'a self, prefix: &'a str, after: u64) -> BoxFuture<'a, Result<ChangeStream>> {
        Box::pin(self.open_watch(prefix, after))
    }

    fn revision(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            let answer = self
                .call(
                    "/v3/kv/range",
                    json!({"key": b64(b"\0"), "count_only": true}),
                )
                .await?;
            Ok(number(&answer["header"]["revision"]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_are_the_next_key_after_every_key_with_the_prefix() {
        assert_eq!(prefix_end("/registry/"), b"/registry0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }

    #[test]
    fn gateway_numbers_come_as_strings_or_numbers() {
        assert_eq!(number(&json!("42")), 42);
        assert_eq!(number(&json!(7)), 7);
        assert_eq!(number(&Value::Null), 0);
    }

    #[test]
    fn watch_messages_become_changes_or_errors() {
        let put = json!({"result": {"events": [
            {"kv": {"key": b64(b"/r/a"), "mod_revision": "5", "value": b64(b"{\"n\":1}")}},
            {"type": "DELETE", "kv": {"key": b64(b"/r/b"), "mod_revision": "6"},
             "prev_kv": {"key": b64(b"/r/b"), "mod_revision": "3", "value": b64(b"2")}},
        ]}});
        let found = changes(&put, 4).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(
            (
                found[0].revision,
                found[0].value.clone(),
                found[0].previous.clone()
            ),
            (5, Some(json!({"n": 1})), None)
        );
        assert_eq!(
            (
                found[1].key.as_str(),
                found[1].value.clone(),
                found[1].previous.clone()
            ),
            ("/r/b", None, Some(json!(2)))
        );
        let compacted = json!({"result": {"compact_revision": "9", "canceled": true}});
        assert_eq!(
            changes(&compacted, 4),
            Err(StorageError::Compacted {
                requested: 4,
                oldest: 9
            })
        );
    }
}
