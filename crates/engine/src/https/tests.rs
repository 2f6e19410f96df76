//! The connection pool against a real TLS server on loopback that counts connections.

use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::service::service_fn;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject as _;

use super::*;

/// An HTTPS server on 127.0.0.1 answering 200 to everything, keeping connections open.
struct Server {
    base: String,
    ca: String,
    accepted: Arc<AtomicUsize>,
    /// Connections accepted before this many never answer again (a machine gone without
    /// closing them).
    silent_before: Arc<AtomicUsize>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.drop_connections();
    }
}

impl Server {
    async fn start() -> Server {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        let tls = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let silent_before = Arc::new(AtomicUsize::new(0));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (count, held) = (Arc::clone(&accepted), Arc::clone(&connections));
        let silent = Arc::clone(&silent_before);
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let number = count.fetch_add(1, Ordering::SeqCst);
                let tls = tls.clone();
                let silent = Arc::clone(&silent);
                let task = tokio::spawn(async move {
                    let Ok(stream) = tls.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |_| {
                        let silent = Arc::clone(&silent);
                        async move {
                            if number < silent.load(Ordering::SeqCst) {
                                std::future::pending::<()>().await;
                            }
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from_static(b"ok"),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                held.lock().unwrap().push(task);
            }
        });
        Server {
            base,
            ca: cert.pem(),
            accepted,
            silent_before,
            connections,
            acceptor,
        }
    }

    /// Closes every connection, as a server restarting or timing idle ones out does.
    fn drop_connections(&self) {
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn request(
    network: &RealNetwork,
    server: &Server,
    method: &Method,
    path: &str,
) -> HttpsResponse {
    let tls = Tls {
        ca_pem: server.ca.clone(),
        identity: None,
    };
    network
        .request(HttpsRequest {
            base: &server.base,
            method,
            path,
            body: (*method != Method::GET).then_some("{}"),
            tls: &tls,
            bearer: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn every_method_reuses_one_connection_and_closed_ones_are_replaced() {
    let server = Server::start().await;
    let network = RealNetwork::default();
    for _ in 0..5 {
        assert_eq!(
            request(&network, &server, &Method::GET, "/x").await.status,
            200
        );
    }
    assert_eq!(server.accepted(), 1, "five reads, one connection");
    assert_eq!(
        network.clients_kept(),
        1,
        "one TLS configuration, built once"
    );
    // Writes too (a write handed to a kept connection that closed before taking it goes to
    // a new one; one that may have gone out is never sent again).
    for path in ["/apis/x", "/x"] {
        assert_eq!(
            request(&network, &server, &Method::POST, path).await.status,
            200
        );
    }
    assert_eq!(server.accepted(), 1, "seven requests, one connection");
    // The server closes everything: the next read opens a new connection and succeeds.
    server.drop_connections();
    assert_eq!(
        request(&network, &server, &Method::GET, "/x").await.status,
        200
    );
    assert!(server.accepted() >= 2, "{}", server.accepted());
    let before = server.accepted();
    assert_eq!(
        request(&network, &server, &Method::GET, "/x").await.status,
        200
    );
    assert_eq!(server.accepted(), before, "kept open again");
    server.drop_connections();
    assert_eq!(
        request(&network, &server, &Method::GET, "/x").await.status,
        200
    );
    assert!(server.accepted() > before, "{}", server.accepted());
    // Another network (another run) shares nothing.
    let other = RealNetwork::default();
    let before = server.accepted();
    assert_eq!(
        request(&other, &server, &Method::GET, "/x").await.status,
        200
    );
    assert_eq!(server.accepted(), before + 1);
    // Another trust is another configuration.
    let tls = Tls {
        ca_pem: format!("{}{}", server.ca, server.ca),
        identity: None,
    };
    network.client(&tls).unwrap();
    assert_eq!(network.clients_kept(), 2);
}

#[tokio::test]
async fn a_kept_connection_that_answers_nothing_is_left_for_a_new_one() {
    let server = Server::start().await;
    let network = RealNetwork::default();
    assert_eq!(
        request(&network, &server, &Method::GET, "/x").await.status,
        200
    );
    // Its machine goes away without closing it: the read is asked again on a new
    // connection, well within the request's own timeout.
    server
        .silent_before
        .store(server.accepted(), Ordering::SeqCst);
    assert_eq!(
        request(&network, &server, &Method::GET, "/x").await.status,
        200
    );
    assert_eq!(server.accepted(), 2);
}
