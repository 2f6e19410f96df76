//! The connector against a CRI endpoint that is not initialized yet, as containerd's CRI
//! plugin answers in the moments after a restart: a gRPC server on a unix socket of the test
//! that answers `server is not initialized yet` a number of times, then answers `Version`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use oi_api::{Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectMeta, PortRange};
use prost::Message as _;

use super::*;

type Body = StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

/// A gRPC answer: `message` framed (when given), then the status in trailers.
fn grpc(message: Option<Vec<u8>>, status: u32, text: &str) -> http::Response<Body> {
    let mut frames = Vec::new();
    if let Some(m) = message {
        let mut framed = vec![0u8];
        framed.extend_from_slice(&u32::try_from(m.len()).unwrap().to_be_bytes());
        framed.extend_from_slice(&m);
        frames.push(Ok(Frame::data(Bytes::from(framed))));
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", status.to_string().parse().unwrap());
    trailers.insert("grpc-message", text.parse().unwrap());
    frames.push(Ok(Frame::trailers(trailers)));
    http::Response::builder()
        .header("content-type", "application/grpc")
        .body(StreamBody::new(futures::stream::iter(frames)))
        .unwrap()
}

/// Serves `socket`: the first `refusals` calls (any of them) get status 2 "server is not
/// initialized yet", the later ones a `VersionResponse`. Returns the number of calls so far.
fn serve(socket: &std::path::Path, refusals: usize) -> Arc<AtomicUsize> {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let calls = Arc::clone(&counted);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request| {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    let response = if n < refusals {
                        grpc(None, 2, "server is not initialized yet")
                    } else {
                        let version = k8s_cri::v1::VersionResponse {
                            version: "0.1.0".into(),
                            runtime_name: "containerd".into(),
                            runtime_version: "1.6.20".into(),
                            runtime_api_version: "v1".into(),
                        };
                        grpc(Some(version.encode_to_vec()), 0, "")
                    };
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    calls
}

fn hypervisor(socket: &std::path::Path) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named("h1"),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: socket.display().to_string(),
            }),
            remote_cri_endpoint: None,
            public: false,
            ip_address: "10.0.0.1".into(),
            port_range: PortRange {
                low: 30000,
                high: 30099,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

#[tokio::test]
async fn a_runtime_not_initialized_yet_is_asked_again_until_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cri.sock");
    let calls = serve(&socket, 3);
    let client = CriConnector::default()
        .connect(&hypervisor(&socket))
        .await
        .unwrap();
    assert_eq!(client.hypervisor(), "h1");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "three refusals, then Version"
    );
}

#[tokio::test]
async fn a_runtime_that_stays_uninitialized_is_unreachable_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cri.sock");
    let calls = serve(&socket, usize::MAX);
    let started = std::time::Instant::now();
    let err = CriConnector::default()
        .connect(&hypervisor(&socket))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ConnectError::Cri(e) if e.not_initialized()),
        "{err}"
    );
    assert!(err.to_string().contains("not initialized"), "{err}");
    assert!(started.elapsed() >= NOT_INITIALIZED_GRACE);
    assert!(calls.load(Ordering::SeqCst) > 1);
}
