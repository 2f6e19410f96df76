//! [`Storage`] in a real etcd, over its gRPC API (the `etcd-client` crate, mutual TLS: one
//! client per endpoint). Every API server replica of a cluster stores its
//! objects here, so they all serve the same ones and a replaced replica loses nothing.
//!
//! ```text
//!  create  txn: if create_revision(key) == 0 then put          else Exists
//!  update  txn: if mod_revision(key) == expected then put      else range → NotFound | Conflict
//!  delete  txn: if mod_revision(key) == expected then delete   else range → NotFound | Conflict
//!  list    range [start, prefix end) limit n (at a revision)   more/count → remaining
//!  watch   watch prefix from after+1, prev_kv                  compact_revision → Compacted
//! ```
//!
//! Endpoints are tried in order, starting with the one that answered last: a call that gets
//! no connection, `Unavailable`, a proposal raft dropped (a leadership transfer under way) or
//! no answer within the store's timeout moves on to the next;
//! any other answer, a refusal included, is final. A read that every endpoint answered
//! `Unavailable` (no leader for a moment: an API server storing in its own member alone meets
//! it whenever leadership moves) goes round again for a few seconds, as etcd's Go client
//! retries reads; a write does not. (etcd-client's own balanced channel is
//! not used: tonic's lazy reconnect reports an endpoint that refuses connections as ready,
//! so its balancer kept sending calls to an etcd member a drain had removed —
//! grpc/grpc-rust#2839 — and with one endpoint that cannot be reached it waits instead of
//! failing.) A watch lives until its stream ends, the connection's keep-alive
//! finding a dead server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, EventType, GetOptions, GetResponse, KeyValue,
    Txn, TxnOp, WatchOptions,
};
use serde_json::Value;

use super::storage::{
    Change, ChangeStream, ListOptions, Listed, Result, Storage, StorageError, Stored,
};

/// etcd as [`Storage`].
pub struct EtcdStorage {
    /// Each endpoint's URL and its own client.
    endpoints: Vec<(String, Client)>,
    /// The endpoint that answered last; tried first.
    preferred: AtomicUsize,
    timeout: Duration,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage")
            .field(
                "endpoints",
                &self
                    .endpoints
                    .iter()
                    .map(|(url, _)| url)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

fn unavailable(message: impl Into<String>) -> StorageError {
    StorageError::Unavailable(message.into())
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

/// A revision of etcd's (an `i64` on the wire, never negative).
fn revision(r: i64) -> u64 {
    u64::try_from(r).unwrap_or(0)
}

/// A revision as etcd takes it.
fn wire(r: u64) -> i64 {
    i64::try_from(r).unwrap_or(i64::MAX)
}

/// What etcd answers (gRPC `Unknown`, no error code of its own) when raft dropped a
/// proposal: its leader is handing leadership over, or a follower knows no leader. The
/// proposal was not appended to the log, so the call may be made again.
const PROPOSAL_DROPPED: &str = "raft proposal dropped";

/// How long a call whose proposal was dropped waits before the next endpoint: a leadership
/// transfer takes a heartbeat or two.
const TRANSFER_PAUSE: Duration = Duration::from_millis(50);

/// How long a call every endpoint answered "between two leaders" is tried again: an election
/// (etcd's election timeout, 1 s, randomised up to 2 s).
const READ_RETRY_WINDOW: Duration = Duration::from_secs(3);

/// Whether a member answered `Unavailable`: up, but between two leaders (or stopping).
fn unavailable_status(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status) if status.code() == tonic::Code::Unavailable)
}

fn proposal_dropped(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status)
        if status.code() == tonic::Code::Unknown && status.message() == PROPOSAL_DROPPED)
}

/// Whether a call that failed with `e` may be made again on another endpoint: it got no
/// connection, or the member could not serve it (stopping, removed, without a leader, its
/// proposal dropped while leadership moved).
fn moves_on(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
            ) || proposal_dropped(e)
        }
        _ => false,
    }
}

/// What an etcd error means here: a compacted revision, or etcd not answering as asked.
fn storage_error(what: &str, e: &etcd_client::Error) -> StorageError {
    let text = e.to_string();
    if text.contains("required revision has been compacted") {
        return StorageError::Compacted {
            requested: 0,
            oldest: 0,
        };
    }
    unavailable(format!("etcd {what}: {text}"))
}

/// A key and value from etcd.
struct Kv {
    key: String,
    value: Value,
    mod_revision: u64,
}

fn kv(raw: &KeyValue) -> Result<Kv> {
    let key = String::from_utf8(raw.key().to_vec())
        .map_err(|_| unavailable("etcd answered a key that is not UTF-8"))?;
    let value = if raw.value().is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(raw.value())
            .map_err(|e| unavailable(format!("the value at {key} is not JSON: {e}")))?
    };
    Ok(Kv {
        key,
        value,
        mod_revision: revision(raw.mod_revision()),
    })
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> u64 {
    header.map_or(0, |h| revision(h.revision()))
}

impl EtcdStorage {
    /// A store on `servers` (`https://` URLs), trusting `ca_pem`, presenting `cert_pem` and
    /// `key_pem`; each unary call bounded by `timeout`. Connects when first used.
    ///
    /// # Errors
    /// A server that is not an `https://` URL, or material the TLS stack refuses.
    pub async fn connect(
        servers: &[String],
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
        timeout: Duration,
    ) -> Result<EtcdStorage> {
        if let Some(bad) = servers.iter().find(|s| !s.starts_with("https://")) {
            return Err(unavailable(format!(
                "etcd server {bad} is not an https:// URL"
            )));
        }
        if servers.is_empty() {
            return Err(unavailable("no etcd server to store objects in"));
        }
        let mut endpoints = Vec::with_capacity(servers.len());
        for server in servers {
            let client = crate::etcd::client_of(server, ca_pem, cert_pem, key_pem, timeout)
                .await
                .map_err(unavailable)?;
            endpoints.push((server.clone(), client));
        }
        Ok(EtcdStorage {
            endpoints,
            preferred: AtomicUsize::new(0),
            timeout,
        })
    }

    /// `call` on the first endpoint that answers it, starting with the one that answered
    /// last, each attempt bounded by the store's timeout. A `repeatable` call (a read) that
    /// every endpoint answered `Unavailable` (between two leaders: "leader changed", "no
    /// leader") goes round them again after a pause, for at most [`READ_RETRY_WINDOW`], as
    /// etcd's Go client retries reads; a write only when its proposal was dropped (it never
    /// reached the log), never after an answer that leaves its outcome unknown.
    async fn call<T, F, Fut>(&self, what: &str, repeatable: bool, call: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let count = self.endpoints.len();
        let started = tokio::time::Instant::now();
        let mut failures = Vec::new();
        loop {
            let first = self.preferred.load(Ordering::Relaxed) % count;
            let mut between_leaders = true;
            for index in (0..count).map(|i| (first + i) % count) {
                let (url, client) = &self.endpoints[index];
                match tokio::time::timeout(self.timeout, call(client.clone())).await {
                    Ok(Ok(t)) => {
                        self.preferred.store(index, Ordering::Relaxed);
                        return Ok(t);
                    }
                    Ok(Err(e)) if moves_on(&e) => {
                        // A leadership transfer drops proposals for a moment: let it end.
                        if proposal_dropped(&e) {
                            tokio::time::sleep(TRANSFER_PAUSE).await;
                        }
                        // A dropped proposal never reached the log: safe to make again,
                        // a write too. Any other `Unavailable`, for a read only.
                        between_leaders &=
                            proposal_dropped(&e) || (repeatable && unavailable_status(&e));
                        failures.push(format!("{url}: {e}"));
                    }
                    Ok(Err(e)) => return Err(storage_error(what, &e)),
                    Err(_) => {
                        between_leaders = false;
                        failures.push(format!("{url}: no answer within {:?}", self.timeout));
                    }
                }
            }
            if !(between_leaders && started.elapsed() < READ_RETRY_WINDOW) {
                break;
            }
            tokio::time::sleep(TRANSFER_PAUSE).await;
        }
        Err(unavailable(format!(
            "etcd {what}: no endpoint answered: {}",
            failures.join("; ")
        )))
    }

    async fn range(&self, key: Vec<u8>, options: GetOptions) -> Result<GetResponse> {
        self.call("range", true, |client| {
            let (key, options) = (key.clone(), options.clone());
            async move { client.kv_client().get(key, Some(options)).await }
        })
        .await
    }

    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        self.call("txn", false, |client| {
            let txn = txn.clone();
            async move { client.kv_client().txn(txn).await }
        })
        .await
    }

    async fn range_one(&self, key: &str) -> Result<Option<Kv>> {
        let answer = self
            .range(key.as_bytes().to_vec(), GetOptions::new())
            .await?;
        answer.kvs().first().map(kv).transpose()
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

    async fn guarded(&self, key: &str, expected: u64, operation: TxnOp) -> Result<u64> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, wire(expected))])
            .and_then([operation]);
        let answer = self.txn(txn).await?;
        if answer.succeeded() {
            Ok(header_revision(answer.header()))
        } else {
            Err(self.refusal(key, expected).await)
        }
    }

    /// Compacts etcd's history up to `revision` (for tests of `410 Gone`).
    ///
    /// # Errors
    /// etcd unreachable or refusing.
    pub async fn compact(&self, revision: u64) -> Result<()> {
        self.call("compaction", false, |client| async move {
            client
                .kv_client()
                .compact(
                    wire(revision),
                    Some(CompactionOptions::new().with_physical()),
                )
                .await
        })
        .await
        .map(|_| ())
    }

    async fn open_watch(&self, prefix: &str, after: u64) -> Result<ChangeStream> {
        let options = WatchOptions::new()
            .with_range(prefix_end(prefix))
            .with_start_revision(wire(after + 1))
            .with_prev_key()
            .with_progress_notify();
        let stream = self
            .call("watch", true, |client| {
                let options = options.clone();
                async move {
                    client
                        .watch_client()
                        .watch(prefix.as_bytes().to_vec(), Some(options))
                        .await
                }
            })
            .await?;
        let state = WatchState {
            stream,
            pending: std::collections::VecDeque::new(),
            after,
        };
        let stream = futures::stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            loop {
                if let Some(change) = state.pending.pop_front() {
                    return Some((Ok(change), Some(state)));
                }
                match state.stream.message().await {
                    Ok(None) => return None,
                    Err(e) => {
                        let e = match storage_error("watch", &e) {
                            StorageError::Compacted { .. } => StorageError::Compacted {
                                requested: state.after,
                                oldest: 0,
                            },
                            other => other,
                        };
                        return Some((Err(e), None));
                    }
                    Ok(Some(message)) => match changes(&message, state.after) {
                        Ok(found) => state.pending.extend(found),
                        Err(e) => return Some((Err(e), None)),
                    },
                }
            }
        });
        let stream: ChangeStream = Box::pin(stream);
        Ok(stream)
    }
}

struct WatchState {
    /// Its requests' sender and its answers: dropping it ends the watch.
    stream: etcd_client::WatchStream,
    pending: std::collections::VecDeque<Change>,
    after: u64,
}

/// The changes of one watch message.
fn changes(message: &etcd_client::WatchResponse, after: u64) -> Result<Vec<Change>> {
    let compacted = revision(message.compact_revision());
    if compacted > 0 {
        return Err(StorageError::Compacted {
            requested: after,
            oldest: compacted,
        });
    }
    if message.canceled() {
        return Err(unavailable(format!(
            "etcd canceled the watch: {}",
            if message.cancel_reason().is_empty() {
                "no reason"
            } else {
                message.cancel_reason()
            }
        )));
    }
    let mut found = Vec::new();
    for event in message.events() {
        let Some(current) = event.kv().map(kv).transpose()? else {
            continue;
        };
        let previous = event.prev_kv().map(kv).transpose()?.map(|p| p.value);
        let deleted = event.event_type() == EventType::Delete;
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
    fn get<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, Result<Option<Stored>>> {
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
    ) -> futures::future::BoxFuture<'a, Result<Listed>> {
        Box::pin(async move {
            let start = options
                .start
                .as_deref()
                .filter(|s| *s > prefix)
                .unwrap_or(prefix);
            let mut get = GetOptions::new().with_range(prefix_end(prefix));
            if let Some(limit) = options.limit {
                get = get.with_limit(i64::try_from(limit.max(1)).unwrap_or(i64::MAX));
            }
            if let Some(r) = options.revision.filter(|r| *r > 0) {
                get = get.with_revision(wire(r));
            }
            let answer = match self.range(start.as_bytes().to_vec(), get).await {
                Err(StorageError::Compacted { .. }) => {
                    return Err(StorageError::Compacted {
                        requested: options.revision.unwrap_or(0),
                        oldest: 0,
                    });
                }
                other => other?,
            };
            let mut items = Vec::new();
            for raw in answer.kvs() {
                let kv = kv(raw)?;
                items.push((
                    kv.key,
                    Stored {
                        value: kv.value,
                        revision: kv.mod_revision,
                    },
                ));
            }
            let count = usize::try_from(answer.count()).unwrap_or(usize::MAX);
            let revision = options
                .revision
                .filter(|r| *r > 0)
                .unwrap_or_else(|| header_revision(answer.header()));
            Ok(Listed {
                remaining: count.saturating_sub(items.len()),
                items,
                revision,
            })
        })
    }

    fn create<'a>(
        &'a self,
        key: &'a str,
        value: &'a Value,
    ) -> futures::future::BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, value.to_string(), None)]);
            let answer = self.txn(txn).await?;
            if answer.succeeded() {
                Ok(header_revision(answer.header()))
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
    ) -> futures::future::BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            self.guarded(key, expected, TxnOp::put(key, value.to_string(), None))
                .await
        })
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: u64,
    ) -> futures::future::BoxFuture<'a, Result<u64>> {
        Box::pin(async move { self.guarded(key, expected, TxnOp::delete(key, None)).await })
    }

    fn watch<'a>(
        &'a self,
        prefix: &'a str,
        after: u64,
    ) -> futures::future::BoxFuture<'a, Result<ChangeStream>> {
        Box::pin(self.open_watch(prefix, after))
    }

    fn revision(&self) -> futures::future::BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            let answer = self
                .range(b"\0".to_vec(), GetOptions::new().with_count_only())
                .await?;
            Ok(header_revision(answer.header()))
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
        assert_eq!(prefix_end("\u{ff}"), b"\xc3\xc0".to_vec());
    }

    #[test]
    fn a_dropped_proposal_and_an_unavailable_member_move_on_a_refusal_does_not() {
        let status = |code, message: &str| {
            etcd_client::Error::GRpcStatus(tonic::Status::new(code, message.to_string()))
        };
        assert!(moves_on(&status(
            tonic::Code::Unknown,
            "raft proposal dropped"
        )));
        assert!(proposal_dropped(&status(
            tonic::Code::Unknown,
            "raft proposal dropped"
        )));
        assert!(moves_on(&status(
            tonic::Code::Unavailable,
            "etcdserver: no leader"
        )));
        assert!(!moves_on(&status(tonic::Code::Unknown, "something else")));
        assert!(!moves_on(&status(
            tonic::Code::InvalidArgument,
            "etcdserver: duplicate key given in txn request"
        )));
        assert!(!proposal_dropped(&status(
            tonic::Code::Unavailable,
            "raft proposal dropped"
        )));
    }

    /// A store on one endpoint that is never dialled: the calls below answer by themselves.
    async fn store() -> EtcdStorage {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let pem = cert.pem();
        EtcdStorage::connect(
            &["https://127.0.0.1:1".to_string()],
            pem.as_bytes(),
            pem.as_bytes(),
            key.serialize_pem().as_bytes(),
            Duration::from_secs(1),
        )
        .await
        .unwrap()
    }

    fn between_leaders() -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::unavailable("etcdserver: leader changed"))
    }

    /// An API server storing in its own member alone meets "leader changed" whenever
    /// leadership moves: a read goes round again until the member answers (for a few seconds
    /// at most); a write is made once, unless its proposal was dropped.
    #[tokio::test]
    async fn a_read_between_two_leaders_is_made_again_a_write_is_not() {
        let store = store().await;
        let calls = AtomicUsize::new(0);
        let read = store
            .call("range", true, |_| {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move { if n < 2 { Err(between_leaders()) } else { Ok(n) } }
            })
            .await;
        assert_eq!(read.unwrap(), 2, "answered on the third attempt");

        calls.store(0, Ordering::SeqCst);
        let write: Result<()> = store
            .call("txn", false, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(between_leaders()) }
            })
            .await;
        assert!(write.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "a write is made once");

        // A write whose proposal was dropped (leadership moving) never reached the log: made
        // again.
        calls.store(0, Ordering::SeqCst);
        let dropped = store
            .call("txn", false, |_| {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == 0 {
                        Err(etcd_client::Error::GRpcStatus(tonic::Status::unknown(
                            PROPOSAL_DROPPED,
                        )))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(dropped.unwrap(), 1);

        calls.store(0, Ordering::SeqCst);
        let started = std::time::Instant::now();
        let never: Result<()> = store
            .call("range", true, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(between_leaders()) }
            })
            .await;
        let why = never.unwrap_err().to_string();
        assert!(why.contains("leader changed"), "{why}");
        assert!(calls.load(Ordering::SeqCst) > 2);
        assert!(started.elapsed() >= READ_RETRY_WINDOW, "gave up early");
    }

    #[test]
    fn revisions_are_never_negative_and_saturate_on_the_wire() {
        assert_eq!(revision(-3), 0);
        assert_eq!(revision(42), 42);
        assert_eq!(wire(u64::MAX), i64::MAX);
    }
}
