//! Watches, as kube-apiserver streams them: newline-separated `{"type", "object"}` events.
//!
//! ```text
//!  resourceVersion unset or "0"   ADDED for every object now, then changes after the list
//!  sendInitialEvents=true         the same, then a BOOKMARK annotated k8s.io/initial-events-end
//!  resourceVersion=N              changes after N; N compacted → one ERROR event (410 Expired)
//!  selectors                      an object entering the selection is ADDED, leaving it DELETED
//!  allowWatchBookmarks            a BOOKMARK with the last resourceVersion every interval
//!  timeoutSeconds                 the watch ends then (at most the server's limit)
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http::StatusCode;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::meta;
use super::registry::Served;
use super::rest::Target;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult};
use super::storage::{Change, ListOptions, StorageError};
use super::table::{self, Include};
use super::{Api, BoxError, Call, Reply};

/// How many events may wait for a slow client before the watch ends (it then resumes from
/// the last resourceVersion it saw, as against a real server).
const BUFFER: usize = 256;

fn line(event: &Value) -> Bytes {
    let mut text = event.to_string();
    text.push('\n');
    Bytes::from(text)
}

fn expired(message: String) -> Value {
    json!({"type": "ERROR", "object": ApiError::gone(message).to_status()})
}

/// What a change is to a watcher with selectors: `(type, object)`, or nothing.
fn classify(
    api: &Api,
    served: &Served,
    change: &Change,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Option<(&'static str, Value)> {
    let new = change
        .value
        .clone()
        .map(|v| api.present(served, v, change.revision));
    let old = change
        .previous
        .clone()
        .map(|v| api.present(served, v, change.revision));
    let matches = |o: &Option<Value>| {
        o.as_ref()
            .is_some_and(|o| api.selected(served, o, labels, fields))
    };
    match (matches(&old), matches(&new)) {
        (false, true) => new.map(|n| ("ADDED", n)),
        (true, true) => new.map(|n| ("MODIFIED", n)),
        (true, false) => old.map(|o| ("DELETED", o)),
        (false, false) => None,
    }
}

impl Api {
    pub(crate) async fn watch(
        self: &Arc<Self>,
        call: &Call<'_>,
        target: &Target<'_>,
    ) -> ApiResult<Reply> {
        let served = target.served.clone();
        let labels = LabelSelector::parse(call.info.param("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(e.0))?;
        let fields = FieldSelector::parse(call.info.param("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(e.0))?;
        for field in fields.fields() {
            if !super::kinds::field_supported(&served, field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
        }
        let bookmarks = call.info.flag("allowWatchBookmarks");
        let initial_events = call.info.flag("sendInitialEvents");
        if initial_events {
            if call.info.param("resourceVersionMatch") != Some("NotOlderThan") {
                return Err(ApiError::invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    vec![super::status::Cause::forbidden(
                        "resourceVersionMatch",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )],
                ));
            }
            if !bookmarks {
                return Err(ApiError::invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    vec![super::status::Cause::forbidden(
                        "allowWatchBookmarks",
                        "sendInitialEvents requires setting allowWatchBookmarks to true",
                    )],
                ));
            }
        }
        let rv = call.info.param("resourceVersion").unwrap_or_default();
        let timeout = call
            .info
            .param("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .map(Duration::from_secs)
            .map_or(self.settings.watch_timeout, |t| {
                t.min(self.settings.watch_timeout)
            });
        let include = table_include(call);
        let prefix = self.prefix(&served, target.namespace);

        // The starting point, and the objects to announce first.
        let (after, initial) = if rv.is_empty() || rv == "0" || initial_events {
            let listed = self
                .storage
                .list(&prefix, &ListOptions::default())
                .await
                .map_err(|e| {
                    ApiError::from_storage(e, &served.resource.plural, &served.resource.group, "")
                })?;
            let objects: Vec<Value> = listed
                .items
                .into_iter()
                .map(|(_, s)| self.present(&served, s.value, s.revision))
                .filter(|o| self.selected(&served, o, &labels, &fields))
                .collect();
            (listed.revision, objects)
        } else {
            let n: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?;
            (n, Vec::new())
        };

        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(BUFFER);
        let changes = self.storage.watch(&prefix, after).await;
        let api = Arc::clone(self);
        let bookmark_interval = self.settings.bookmark_interval;
        let wrap = move |served: &Served, kind: &str, object: Value| -> Value {
            match include {
                Some(include) => {
                    let rv = json!({"resourceVersion": meta::resource_version(&object)});
                    json!({"type": kind, "object": table::table(served, &[object], rv, include)})
                }
                None => json!({"type": kind, "object": object}),
            }
        };
        tokio::spawn(async move {
            let send = |value: Value| {
                let tx = tx.clone();
                async move { tx.send(Ok(Frame::data(line(&value)))).await.is_ok() }
            };
            let mut changes = match changes {
                Ok(stream) => stream,
                Err(StorageError::Compacted { requested, oldest }) => {
                    let _ = send(expired(format!(
                        "too old resource version: {requested} ({oldest})"
                    )))
                    .await;
                    return;
                }
                Err(e) => {
                    let _ = send(json!({"type": "ERROR", "object": ApiError::internal(e.to_string()).to_status()})).await;
                    return;
                }
            };
            for object in initial {
                if !send(wrap(&served, "ADDED", object)).await {
                    return;
                }
            }
            let mut last = after;
            let bookmark = |rv: u64, end: bool| {
                let mut metadata = json!({"resourceVersion": rv.to_string()});
                if end {
                    metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                json!({"type": "BOOKMARK", "object": {
                    "kind": served.resource.kind, "apiVersion": served.resource.group_version(), "metadata": metadata,
                }})
            };
            if initial_events && !send(bookmark(last, true)).await {
                return;
            }
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let mut ticker = tokio::time::interval(bookmark_interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = &mut deadline => return,
                    _ = tx.closed() => return,
                    _ = ticker.tick(), if bookmarks => {
                        if !send(bookmark(last, false)).await {
                            return;
                        }
                    }
                    next = changes.next() => match next {
                        None => return,
                        Some(Ok(change)) => {
                            last = last.max(change.revision);
                            if let Some((kind, object)) = classify(&api, &served, &change, &labels, &fields)
                                && !send(wrap(&served, kind, object)).await {
                                    return;
                                }
                        }
                        Some(Err(StorageError::Compacted { requested, oldest })) => {
                            let _ = send(expired(format!("too old resource version: {requested} ({oldest})"))).await;
                            return;
                        }
                        Some(Err(e)) => {
                            let _ = send(json!({"type": "ERROR", "object": ApiError::internal(e.to_string()).to_status()})).await;
                            return;
                        }
                    }
                }
            }
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let body = StreamBody::new(stream).boxed_unsync();
        let mut response = http::Response::new(body);
        *response.status_mut() = StatusCode::OK;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        response.headers_mut().insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-cache, private"),
        );
        Ok(Reply::Raw(response))
    }
}

fn table_include(call: &Call<'_>) -> Option<Include> {
    let accept = call.header("accept")?;
    let first = accept.split(',').next()?;
    (first.contains("as=Table") && first.contains("g=meta.k8s.io"))
        .then(|| Include::parse(call.info.param("includeObject")))
}
