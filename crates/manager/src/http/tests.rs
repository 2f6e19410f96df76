//! Real servers on 127.0.0.1:0, real HTTP/1.1 requests over TCP, exact answers.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::*;

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` with `Connection: close` and reads the whole answer.
async fn request(address: SocketAddr, method: &str, path: &str) -> Answer {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

async fn start(endpoints: Endpoints) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        serve(listener, endpoints).await.unwrap();
    });
    (address, task)
}

#[tokio::test]
async fn metrics_are_served_in_the_openmetrics_format() {
    let metrics = Arc::new(Metrics::new());
    metrics.observe_reconcile("cluster", Duration::from_millis(20), Some("Conflict"));
    metrics.set_leader(true);
    let (address, task) = start(Endpoints::metrics(metrics.clone())).await;

    let answer = request(address, "GET", METRICS_PATH).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert_eq!(answer.body, metrics.encode());
    assert!(
        answer.body.contains(
            "oi_manager_reconcile_errors_total{controller=\"cluster\",reason=\"Conflict\"} 1\n"
        ),
        "{}",
        answer.body
    );
    assert!(answer.body.ends_with("# EOF\n"), "{}", answer.body);

    // Later observations show up in the next scrape.
    metrics.observe_reconcile("component", Duration::from_millis(5), None);
    let answer = request(address, "GET", METRICS_PATH).await;
    assert!(
        answer
            .body
            .contains("oi_manager_reconciles_total{controller=\"component\"} 1\n"),
        "{}",
        answer.body
    );

    // The metrics listener does not answer the probes.
    let answer = request(address, "GET", HEALTHZ_PATH).await;
    assert_eq!((answer.status, answer.body.as_str()), (404, "not found\n"));
    task.abort();
}

#[tokio::test]
async fn readyz_follows_the_readiness_channel_and_healthz_is_always_ok() {
    let (tx, rx) = watch::channel(Readiness::not_ready("connecting to the API server"));
    let (address, task) = start(Endpoints::probes(rx)).await;

    let answer = request(address, "GET", HEALTHZ_PATH).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; charset=utf-8")
    );

    let answer = request(address, "GET", READYZ_PATH).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (503, "not ready: connecting to the API server\n")
    );

    tx.send(Readiness::Ready).unwrap();
    let answer = request(address, "GET", READYZ_PATH).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));

    tx.send(Readiness::not_ready(
        "waiting for the Component watch to sync",
    ))
    .unwrap();
    let answer = request(address, "GET", READYZ_PATH).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (503, "not ready: waiting for the Component watch to sync\n")
    );
    let answer = request(address, "GET", HEALTHZ_PATH).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));

    // The probe listener does not serve metrics.
    let answer = request(address, "GET", METRICS_PATH).await;
    assert_eq!(answer.status, 404);
    task.abort();
}

#[tokio::test]
async fn unknown_paths_and_methods() {
    let (_tx, rx) = watch::channel(Readiness::Ready);
    let endpoints = Endpoints {
        metrics: Some(Arc::new(Metrics::new())),
        probes: Some(rx),
    };
    let (address, task) = start(endpoints).await;

    let answer = request(address, "GET", "/").await;
    assert_eq!((answer.status, answer.body.as_str()), (404, "not found\n"));
    let answer = request(address, "GET", "/healthz/extra").await;
    assert_eq!(answer.status, 404);

    let answer = request(address, "POST", READYZ_PATH).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (405, "method not allowed\n")
    );
    assert_eq!(answer.header("allow"), Some("GET, HEAD"));

    // HEAD: the status and headers of GET, no body.
    let answer = request(address, "HEAD", HEALTHZ_PATH).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, ""));

    // One listener can serve everything (both bind addresses equal).
    let answer = request(address, "GET", METRICS_PATH).await;
    assert_eq!(answer.status, 200);
    let answer = request(address, "GET", READYZ_PATH).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
    task.abort();
}

#[tokio::test]
async fn a_client_that_goes_away_does_not_stop_the_server() {
    let (_tx, rx) = watch::channel(Readiness::Ready);
    let (address, task) = start(Endpoints::probes(rx)).await;
    // Half a request, then gone.
    {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /hea").await.unwrap();
    }
    // Garbage.
    {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"\x00\x01\x02 nonsense\r\n\r\n")
            .await
            .unwrap();
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw).await;
    }
    let answer = request(address, "GET", HEALTHZ_PATH).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
    assert!(!task.is_finished());
    task.abort();
}
