//! The client against real HTTP and HTTPS servers on loopback that count their connections.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use http_body_util::StreamBody;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::*;

/// A server on 127.0.0.1 (TLS when given a configuration) keeping connections open. Paths:
/// `/silent` never answers; `/stall` sends its head and one piece, then nothing; any other
/// answers 200 with the method and the body's length.
struct Server {
    base: String,
    accepted: Arc<AtomicUsize>,
    /// Requests received (answered or not).
    requests: Arc<AtomicUsize>,
    /// Connections accepted before this many never answer again (a machine gone without
    /// closing them).
    silent_before: Arc<AtomicUsize>,
    /// The connections' tasks (aborting one closes it).
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        self.drop_connections();
    }
}

async fn answer(
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Body>, std::convert::Infallible> {
    match request.uri().path() {
        "/silent" => std::future::pending().await,
        "/stall" => {
            let pieces = futures_stream(vec![Bytes::from_static(b"first piece")]);
            Ok(http::Response::new(pieces))
        }
        _ => {
            let method = request.method().to_string();
            let length = request
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .len();
            Ok(http::Response::new(full(format!("{method} {length}"))))
        }
    }
}

/// A body of `pieces`, then never ending.
fn futures_stream(pieces: Vec<Bytes>) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
    tokio::spawn(async move {
        for p in pieces {
            let _ = tx.send(Ok(Frame::data(p))).await;
        }
        // Kept open: the body neither ends nor fails.
        std::future::pending::<()>().await;
        drop(tx);
    });
    let stream = tokio_stream_of(rx);
    http_body_util::BodyExt::boxed(StreamBody::new(stream))
}

fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, BoxError>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

impl Server {
    async fn start(tls: Option<rustls::ServerConfig>) -> Server {
        Server::start_speaking(tls, false).await
    }

    /// With `http2`, each connection is served in the protocol the client opens it with
    /// (HTTP/2 after ALPN `h2`, else HTTP/1.1).
    async fn start_speaking(tls: Option<rustls::ServerConfig>, http2: bool) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{}", listener.local_addr().unwrap());
        let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let silent_before = Arc::new(AtomicUsize::new(0));
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (count, held) = (Arc::clone(&accepted), Arc::clone(&connections));
        let (asked, silent) = (Arc::clone(&requests), Arc::clone(&silent_before));
        let main = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let number = count.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let (asked, silent) = (Arc::clone(&asked), Arc::clone(&silent));
                let service = service_fn(move |request| {
                    let (asked, silent) = (Arc::clone(&asked), Arc::clone(&silent));
                    async move {
                        asked.fetch_add(1, Ordering::SeqCst);
                        if number < silent.load(Ordering::SeqCst) {
                            std::future::pending::<()>().await;
                        }
                        answer(request).await
                    }
                });
                let task = tokio::spawn(async move {
                    if http2 {
                        let builder = hyper_util::server::conn::auto::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        if let Some(a) = acceptor
                            && let Ok(stream) = a.accept(tcp).await
                        {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                        return;
                    }
                    let builder = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(a) => {
                            if let Ok(stream) = a.accept(tcp).await {
                                let _ = builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
                held.lock().unwrap().push(task);
            }
        });
        tasks.lock().unwrap().push(main);
        Server {
            base,
            accepted,
            requests,
            silent_before,
            connections,
            tasks,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Closes every connection, as a server restarting or timing idle ones out does.
    fn drop_connections(&self) {
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

fn request(method: &str, url: &str, body: &'static [u8]) -> http::Request<Body> {
    http::Request::builder()
        .method(method)
        .uri(url)
        .body(full(Bytes::from_static(body)))
        .unwrap()
}

fn quick() -> Options {
    Options {
        timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_secs(2),
        ..Options::default()
    }
}

/// A CA, and a server configuration whose certificate (for 127.0.0.1) it signed; with
/// `client_ca`, the server asks for a client certificate signed by it.
struct Pki {
    ca_pem: String,
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Pki {
            ca_pem: cert.pem(),
            ca: rcgen::Issuer::new(params, key),
        }
    }

    fn leaf(&self, name: &str) -> (rustls::pki_types::CertificateDer<'static>, String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.der().clone(), cert.pem(), key.serialize_pem())
    }

    fn server(&self, client_ca: Option<&Pki>) -> rustls::ServerConfig {
        let (der, _, key) = self.leaf("127.0.0.1");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_slice(ca.ca_pem.as_bytes()).unwrap())
                    .unwrap();
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        builder
            .with_single_cert(
                vec![der],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap()
    }
}

#[tokio::test]
async fn every_method_reuses_the_kept_connection() {
    let server = Server::start(None).await;
    let client = Client::new(quick()).unwrap();
    for (method, body) in [
        ("GET", &b""[..]),
        ("POST", b"created"),
        ("PUT", b"replaced!"),
        ("PATCH", b"p"),
        ("DELETE", b""),
        ("GET", b""),
    ] {
        let (parts, bytes) = client
            .call(request(method, &format!("{}/x", server.base), body))
            .await
            .unwrap();
        assert_eq!(parts.status, 200);
        assert_eq!(bytes, format!("{method} {}", body.len()));
    }
    assert_eq!(server.accepted(), 1, "one connection for every request");
    // A clone shares the pool.
    client
        .clone()
        .call(request("POST", &format!("{}/y", server.base), b"z"))
        .await
        .unwrap();
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn https_trusts_only_what_it_is_told_and_presents_its_identity() {
    let server_pki = Pki::new("server CA");
    let client_pki = Pki::new("client CA");
    let server = Server::start(Some(server_pki.server(Some(&client_pki)))).await;
    let url = format!("{}/x", server.base);
    let (_, cert, key) = client_pki.leaf("a client");
    let trusted = Options {
        roots: Roots::Only(server_pki.ca_pem.clone()),
        identity: Some(Identity {
            certificate_pem: cert,
            key_pem: key,
        }),
        ..quick()
    };
    let client = Client::new(trusted.clone()).unwrap();
    for _ in 0..3 {
        let (parts, _) = client.call(request("POST", &url, b"x")).await.unwrap();
        assert_eq!(parts.status, 200);
    }
    assert_eq!(server.accepted(), 1, "one handshake for all of them");

    // The system's roots do not vouch for our CA: refused before anything is sent.
    let e = Client::new(Options {
        roots: Roots::System,
        ..trusted.clone()
    })
    .unwrap()
    .call(request("POST", &url, b"x"))
    .await
    .unwrap_err();
    assert!(e.not_sent(), "{e}");
    assert!(e.to_string().contains("certificate"), "{e}");

    // Without an identity the server ends the handshake: no answer.
    let e = Client::new(Options {
        identity: None,
        ..trusted
    })
    .unwrap()
    .call(request("GET", &url, b""))
    .await
    .unwrap_err();
    assert!(!e.to_string().is_empty());
}

#[tokio::test]
async fn settings_that_do_not_parse_are_named_and_the_key_never_shown() {
    let e = Client::new(Options {
        roots: Roots::Only("not a certificate".into()),
        ..quick()
    })
    .unwrap_err();
    assert!(e.to_string().contains("CA certificates"), "{e}");
    let pki = Pki::new("ca");
    let (_, cert, _) = pki.leaf("x");
    let secret =
        "-----BEGIN PRIVATE KEY-----\nU0VDUkVUS0VZTUFURVJJQUw=\n-----END PRIVATE KEY-----\n";
    let options = Options {
        roots: Roots::Only(pki.ca_pem.clone()),
        identity: Some(Identity {
            certificate_pem: cert,
            key_pem: secret.into(),
        }),
        ..quick()
    };
    let shown = format!("{options:?}");
    assert!(!shown.contains("U0VDUkVU"), "{shown}");
    let e = Client::new(options).unwrap_err().to_string();
    assert!(e.contains("client"), "{e}");
    assert!(!e.contains("U0VDUkVU"), "{e}");
}

#[tokio::test]
async fn a_refused_connection_is_known_unsent_and_silence_is_bounded() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let client = Client::new(quick()).unwrap();
    let e = client
        .call(request("POST", &format!("http://127.0.0.1:{port}/x"), b"x"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Connect(_)), "{e}");
    assert!(e.not_sent());

    let server = Server::start(None).await;
    let e = client
        .call(request("GET", &format!("{}/silent", server.base), b""))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert!(!e.not_sent(), "it left: the server may have acted on it");

    // A body that stops coming fails; what came before is not taken for the whole.
    let response = client
        .send(request("GET", &format!("{}/stall", server.base), b""))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "first piece");
    let e = body.frame().await.unwrap().unwrap_err();
    assert!(e.to_string().contains("nothing more came"), "{e}");
}

/// Waits (bounded) until `client` has noticed that its kept connections closed.
async fn until_no_idle(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.idle_connections() > 0 {
        assert!(
            Instant::now() < deadline,
            "the closed connections are still idle"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_closed_connection_is_replaced_for_any_method() {
    let server = Server::start(None).await;
    let client = Client::new(quick()).unwrap();
    let url = format!("{}/x", server.base);
    client.call(request("GET", &url, b"")).await.unwrap();
    assert_eq!(client.idle_connections(), 1);
    server.drop_connections();
    until_no_idle(&client).await;
    let (parts, bytes) = client.call(request("POST", &url, b"once")).await.unwrap();
    assert_eq!((parts.status.as_u16(), &bytes[..]), (200, &b"POST 4"[..]));
    assert_eq!(server.accepted(), 2);
    assert_eq!(server.requests(), 2, "the write went out once");
}

#[tokio::test]
async fn a_kept_connection_that_answers_nothing_is_left_for_reads_and_never_resends_a_write() {
    let server = Server::start(None).await;
    let client = Client::new(Options {
        timeout: Duration::from_secs(5),
        ..quick()
    })
    .unwrap();
    let url = format!("{}/x", server.base);
    client.call(request("GET", &url, b"")).await.unwrap();
    // Its machine goes away without closing it: a read is asked again on a new connection,
    // well within the request's own timeout.
    server
        .silent_before
        .store(server.accepted(), Ordering::SeqCst);
    let (parts, _) = client.call(request("GET", &url, b"")).await.unwrap();
    assert_eq!(parts.status, 200);
    assert_eq!((server.accepted(), server.requests()), (2, 3));
    // A write on a kept connection that answers nothing is not sent again: it may have
    // been done. It fails at the request's timeout.
    server
        .silent_before
        .store(server.accepted(), Ordering::SeqCst);
    let e = client.call(request("POST", &url, b"x")).await.unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert_eq!((server.accepted(), server.requests()), (2, 4));
}

/// A TLS server offering HTTP/2 (ALPN `h2`, then `http/1.1`), and a client of its CA.
async fn http2_server(client_http2: bool) -> (Server, Client) {
    let pki = Pki::new("server CA");
    let mut config = pki.server(None);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let server = Server::start_speaking(Some(config), true).await;
    let client = Client::new(Options {
        roots: Roots::Only(pki.ca_pem.clone()),
        http2: client_http2,
        ..quick()
    })
    .unwrap();
    (server, client)
}

#[tokio::test]
async fn over_http2_every_request_at_once_shares_one_connection() {
    let (server, client) = http2_server(true).await;
    let url = format!("{}/x", server.base);
    let answers = futures::future::join_all((0..20).map(|i| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let (method, body): (&str, &'static [u8]) = if i % 2 == 0 {
                ("GET", b"")
            } else {
                ("POST", b"abc")
            };
            let (parts, bytes) = client.call(request(method, &url, body)).await.unwrap();
            assert_eq!(parts.version, http::Version::HTTP_2);
            (parts.status.as_u16(), bytes)
        }
    }))
    .await;
    for (i, (status, bytes)) in answers.iter().enumerate() {
        let expected = if i % 2 == 0 { "GET 0" } else { "POST 3" };
        assert_eq!((*status, &bytes[..]), (200, expected.as_bytes()), "{i}");
    }
    assert_eq!(
        (server.accepted(), server.requests()),
        (1, 20),
        "one connection, dialed once while the others waited"
    );
    assert_eq!(client.idle_connections(), 1);
}

#[tokio::test]
async fn http2_is_offered_only_when_asked_and_a_server_without_it_gets_http1() {
    // Not asked: HTTP/1.1, whatever the server offers.
    let (server, client) = http2_server(false).await;
    let (parts, _) = client
        .call(request("GET", &format!("{}/x", server.base), b""))
        .await
        .unwrap();
    assert_eq!(parts.version, http::Version::HTTP_11);

    // Asked, from a server that speaks only HTTP/1.1 (no ALPN): HTTP/1.1 connections, the
    // one that found it out kept for the next request.
    let pki = Pki::new("server CA");
    let server = Server::start(Some(pki.server(None))).await;
    let client = Client::new(Options {
        roots: Roots::Only(pki.ca_pem.clone()),
        http2: true,
        ..quick()
    })
    .unwrap();
    let url = format!("{}/x", server.base);
    for _ in 0..3 {
        let (parts, bytes) = client.call(request("POST", &url, b"xy")).await.unwrap();
        assert_eq!(
            (parts.version, &bytes[..]),
            (http::Version::HTTP_11, &b"POST 2"[..])
        );
    }
    assert_eq!(server.accepted(), 1);
    // At once: each on a connection of its own.
    let answers =
        futures::future::join_all((0..3).map(|_| client.call(request("GET", &url, b"")))).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(server.accepted(), 3);
}

#[tokio::test]
async fn a_closed_http2_connection_is_replaced_and_a_write_goes_out_once() {
    let (server, client) = http2_server(true).await;
    let url = format!("{}/x", server.base);
    client.call(request("GET", &url, b"")).await.unwrap();
    server.drop_connections();
    until_no_idle(&client).await;
    let (parts, bytes) = client.call(request("POST", &url, b"once")).await.unwrap();
    assert_eq!((parts.status.as_u16(), &bytes[..]), (200, &b"POST 4"[..]));
    assert_eq!((server.accepted(), server.requests()), (2, 2));
}

#[tokio::test]
async fn a_silent_http2_connection_is_left_for_reads_and_never_resends_a_write() {
    let (server, client) = http2_server(true).await;
    let client = Client::new(Options {
        timeout: Duration::from_secs(5),
        ..client.options().clone()
    })
    .unwrap();
    let url = format!("{}/x", server.base);
    client.call(request("GET", &url, b"")).await.unwrap();
    server
        .silent_before
        .store(server.accepted(), Ordering::SeqCst);
    let (parts, _) = client.call(request("GET", &url, b"")).await.unwrap();
    assert_eq!(parts.status, 200);
    assert_eq!((server.accepted(), server.requests()), (2, 3));
    server
        .silent_before
        .store(server.accepted(), Ordering::SeqCst);
    let e = client.call(request("POST", &url, b"x")).await.unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert_eq!((server.accepted(), server.requests()), (2, 4));
}
