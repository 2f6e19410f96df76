//! Retries with backoff, against a store on loopback that fails on purpose.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::BodyExt as _;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use oi_s3::{CredentialSource, Credentials, Error, Location, S3Config, Store};

/// A store answering `503 SlowDown` to the first `failures` requests, then 200 to all.
struct Flaky {
    endpoint: String,
    seen: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Flaky {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn flaky(failures: usize) -> Flaky {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    let server = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let count = Arc::clone(&count);
                    async move {
                        let _ = request.into_body().collect().await;
                        let n = count.fetch_add(1, Ordering::SeqCst);
                        let (status, body) = if n < failures {
                            (
                                503,
                                "<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>",
                            )
                        } else {
                            (200, "")
                        };
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .status(status)
                                .header("etag", "\"abc\"")
                                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    Flaky {
        endpoint,
        seen,
        server,
    }
}

fn store(endpoint: &str, max_retries: usize) -> Store {
    Store::new(S3Config {
        endpoint: Some(endpoint.to_string()),
        credentials: CredentialSource::Key {
            credentials: Credentials {
                access_key_id: "test".into(),
                secret_access_key: "test-secret".into(),
                session_token: None,
            },
            from: "the test".into(),
        },
        max_retries,
        ..S3Config::default()
    })
}

#[tokio::test]
async fn a_store_that_asks_to_slow_down_is_asked_again() {
    let flaky = flaky(2).await;
    let at = Location::parse("s3://snaps/a.oisnap").unwrap();
    store(&flaky.endpoint, 5)
        .put(&at, b"snapshot".to_vec())
        .await
        .unwrap();
    assert_eq!(
        flaky.seen.load(Ordering::SeqCst),
        3,
        "two refusals, then stored"
    );
}

#[tokio::test]
async fn without_retries_the_refusal_is_told_in_the_stores_words() {
    let flaky = flaky(1).await;
    let at = Location::parse("s3://snaps/a.oisnap").unwrap();
    let e = store(&flaky.endpoint, 0)
        .put(&at, b"snapshot".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Store { .. }), "{e}");
    let text = e.to_string();
    assert!(text.starts_with("s3://snaps/a.oisnap: put: "), "{text}");
    assert!(text.contains("503"), "{text}");
    assert_eq!(flaky.seen.load(Ordering::SeqCst), 1);
}
