//! Watches of the API server stand-in (over memory), read raw off the wire: replay from a
//! resourceVersion, bookmarks, `sendInitialEvents`, selectors that objects enter and leave,
//! and `410 Gone` for a resourceVersion older than the history kept.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use oi_kube_standin::api::storage::MemoryStorage;
use oi_kube_standin::local::{LocalApiServer, LocalOptions};
use oi_kube_standin::{https, tls};
use serde_json::{Value, json};

struct Client {
    config: Arc<rustls::ClientConfig>,
    endpoint: https::Endpoint,
}

fn admin(server: &LocalApiServer) -> Client {
    let (cert, key) = server
        .identity("kubernetes-admin", &["system:masters"])
        .unwrap();
    let roots = tls::roots_from_pem(server.serving_ca.as_bytes(), "serving CA").unwrap();
    let identity = (
        tls::certs_from_pem(cert.as_bytes(), "cert").unwrap(),
        tls::key_from_pem(key.as_bytes(), "key").unwrap(),
    );
    Client {
        config: tls::client_config(roots, Some(identity), "admin").unwrap(),
        endpoint: https::Endpoint::parse(&server.url()).unwrap(),
    }
}

impl Client {
    fn call(
        &self,
        server: &LocalApiServer,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, String) {
        let response = server
            .block_on(https::request(
                &self.config,
                &self.endpoint,
                method,
                path,
                body.map(|b| b.to_string().into_bytes()),
                Duration::from_secs(20),
            ))
            .unwrap();
        (
            response.status.as_u16(),
            String::from_utf8_lossy(&response.body).into_owned(),
        )
    }

    fn json(
        &self,
        server: &LocalApiServer,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let (status, text) = self.call(server, method.clone(), path, body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {text}"
        );
        serde_json::from_str(&text).unwrap()
    }

    /// The events of a watch that the server ends (`timeoutSeconds`).
    fn watch(&self, server: &LocalApiServer, path: &str) -> Vec<Value> {
        let (status, text) = self.call(server, Method::GET, path, None);
        assert_eq!(status, 200, "{text}");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn summary(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}})
}

const CMS: &str = "/api/v1/namespaces/w/configmaps";

fn setup(options: LocalOptions) -> (LocalApiServer, Client) {
    let server = LocalApiServer::start(options).unwrap();
    let client = admin(&server);
    client.json(
        &server,
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "w"}})),
    );
    (server, client)
}

#[test]
fn a_watch_replays_from_a_version_then_sends_bookmarks() {
    let (server, client) = setup(LocalOptions {
        bookmark_interval: Duration::from_millis(300),
        ..LocalOptions::default()
    });
    let first = client.json(&server, Method::POST, CMS, Some(configmap("a", json!({}))));
    let from = rv(&first);
    let b = client.json(&server, Method::POST, CMS, Some(configmap("b", json!({}))));
    let mut a = first.clone();
    a["data"] = json!({"k": "v"});
    let a = client.json(&server, Method::PUT, &format!("{CMS}/a"), Some(a));
    let (status, _) = client.call(&server, Method::DELETE, &format!("{CMS}/b"), None);
    assert_eq!(status, 200);
    let events = client.watch(
        &server,
        &format!("{CMS}?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=2"),
    );
    let changes: Vec<&Value> = events.iter().filter(|e| e["type"] != "BOOKMARK").collect();
    assert_eq!(
        summary(&changes.iter().map(|v| (*v).clone()).collect::<Vec<_>>()),
        [
            ("ADDED".into(), "b".into()),
            ("MODIFIED".into(), "a".into()),
            ("DELETED".into(), "b".into())
        ]
    );
    assert_eq!(rv(&changes[0]["object"]), rv(&b));
    assert_eq!(rv(&changes[1]["object"]), rv(&a));
    assert!(
        rv(&changes[2]["object"]) > rv(&a),
        "a deletion carries its own version"
    );
    let bookmarks: Vec<&Value> = events.iter().filter(|e| e["type"] == "BOOKMARK").collect();
    assert!(
        bookmarks.len() >= 3,
        "a bookmark every 300 ms for 2 s: {events:?}"
    );
    for bookmark in bookmarks {
        assert_eq!(bookmark["object"]["kind"], "ConfigMap");
        assert_eq!(
            rv(&bookmark["object"]),
            rv(&changes[2]["object"]),
            "a bookmark names the last version sent"
        );
    }
}

#[test]
fn initial_events_end_with_a_bookmark_and_selectors_are_entered_and_left() {
    let (server, client) = setup(LocalOptions::default());
    client.json(
        &server,
        Method::POST,
        CMS,
        Some(configmap("x", json!({"app": "web"}))),
    );
    client.json(
        &server,
        Method::POST,
        CMS,
        Some(configmap("y", json!({"app": "db"}))),
    );
    let events = client.watch(&server, &format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&labelSelector=app%3Dweb&timeoutSeconds=1"));
    assert_eq!(summary(&events[..1]), [("ADDED".into(), "x".into())]);
    assert_eq!(events[1]["type"], "BOOKMARK");
    assert_eq!(
        events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // Without bookmarks allowed, sendInitialEvents is refused as the real server refuses it.
    let (status, text) = client.call(
        &server,
        Method::GET,
        &format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
        None,
    );
    assert_eq!(status, 422, "{text}");

    // y enters the selection (ADDED), x leaves it (DELETED), y is deleted (DELETED).
    let from = rv(&client.json(&server, Method::GET, CMS, None));
    let patch = |name: &str, app: &str| {
        let (status, text) = server.block_on(async {
            let (s, v) = server
                .api()
                .loopback(
                    Method::PATCH,
                    &format!("{CMS}/{name}"),
                    Some(&json!({"metadata": {"labels": {"app": app}}})),
                )
                .await;
            (s.as_u16(), v.to_string())
        });
        assert_eq!(status, 200, "{text}");
    };
    patch("y", "web");
    patch("x", "db");
    client.call(&server, Method::DELETE, &format!("{CMS}/y"), None);
    let events = client.watch(
        &server,
        &format!("{CMS}?watch=1&resourceVersion={from}&labelSelector=app%3Dweb&timeoutSeconds=1"),
    );
    assert_eq!(
        summary(&events),
        [
            ("ADDED".into(), "y".into()),
            ("DELETED".into(), "x".into()),
            ("DELETED".into(), "y".into())
        ]
    );
    // A field selector on the name, as `kubectl get -w NAME` uses.
    let events = client.watch(
        &server,
        &format!("{CMS}?watch=1&fieldSelector=metadata.name%3Dx&timeoutSeconds=1"),
    );
    assert_eq!(summary(&events), [("ADDED".into(), "x".into())]);
}

#[test]
fn a_version_older_than_the_history_is_gone() {
    // The store keeps the last 100 changes; 150 follow the first object.
    let storage = Arc::new(MemoryStorage::with_history(100));
    let (server, client) = setup(LocalOptions {
        storage: Some(storage),
        ..LocalOptions::default()
    });
    let first = client.json(
        &server,
        Method::POST,
        CMS,
        Some(configmap("first", json!({}))),
    );
    for i in 0..150 {
        client.json(
            &server,
            Method::POST,
            CMS,
            Some(configmap(&format!("c{i}"), json!({}))),
        );
    }
    let events = client.watch(
        &server,
        &format!(
            "{CMS}?watch=1&resourceVersion={}&timeoutSeconds=5",
            rv(&first)
        ),
    );
    assert_eq!(events.len(), 1, "{:?}", summary(&events));
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
    assert!(
        events[0]["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version: ")
    );
    // A list at that version is gone too; the current one is not.
    let (status, _) = client.call(
        &server,
        Method::GET,
        &format!(
            "{CMS}?resourceVersion={}&resourceVersionMatch=Exact",
            rv(&first)
        ),
        None,
    );
    assert_eq!(status, 410);
    let list = client.json(&server, Method::GET, CMS, None);
    assert_eq!(list["items"].as_array().unwrap().len(), 151);
}
