//! The CRI client over TCP with mutual TLS (through a loopback TLS-terminating proxy in front
//! of a real containerd), and bounded failures for unreachable endpoints.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/tls_proxy.rs"]
mod tls_proxy;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixture::{BUSYBOX, Fixture};
use oi_api::runtime::{ContainerSpec, PodSpec};
use oi_cri::{ClientOptions, CriClient, CriEndpoint, Error, HypervisorRuntime, Outcome};
use tls_proxy::{Ca, TlsProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Everything one mTLS scenario needs: the hypervisor CA (signs the proxy's server
/// certificate) and the client CA the proxy trusts.
struct Pki {
    hypervisor_ca: Ca,
    client_ca: Ca,
}

impl Pki {
    fn new() -> Pki {
        Pki {
            hypervisor_ca: Ca::new("hypervisor-ca"),
            client_ca: Ca::new("client-ca"),
        }
    }

    async fn proxy(&self, fx: &Fixture, server_ca: &Ca) -> TlsProxy {
        let (cert, key) = server_ca.valid_leaf("hv1", &["127.0.0.1", "localhost"], false);
        TlsProxy::start(
            &cert,
            &key,
            &self.client_ca.pem(),
            fx.containerd.config().socket.clone(),
        )
        .await
    }

    fn endpoint(&self, uri: &str, client: (String, String)) -> CriEndpoint {
        CriEndpoint::Tls {
            uri: uri.to_string(),
            ca_pem: self.hypervisor_ca.pem(),
            cert_pem: client.0,
            key_pem: client.1,
        }
    }
}

fn options(fx: &Fixture) -> ClientOptions {
    ClientOptions {
        connect_timeout: Duration::from_secs(3),
        ..fx.options.clone()
    }
}

/// Connection refused by either side: the error names the hypervisor and the endpoint.
fn assert_refused(err: &Error, uri: &str) {
    eprintln!("refused as expected: {err}");
    assert!(
        matches!(err, Error::Connect { .. } | Error::Call { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("hv-tls") && text.contains(uri), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_client_certificate_works_end_to_end() {
    let Some(fx) = Fixture::start("right_client_certificate_works_end_to_end").await else {
        return;
    };
    let pki = Pki::new();
    let proxy = pki.proxy(&fx, &pki.hypervisor_ca).await;
    let client_cert = pki.client_ca.valid_leaf("oneinfra", &[], true);
    let client = CriClient::connect(
        "hv-tls",
        pki.endpoint(&proxy.uri(), client_cert),
        options(&fx),
    )
    .await
    .unwrap();
    assert_eq!(client.version().await.unwrap().runtime_name, "containerd");
    let pod = PodSpec {
        namespace: "default".into(),
        name: "over-tls".into(),
        labels: BTreeMap::new(),
        containers: vec![ContainerSpec {
            name: "sleep".into(),
            image: BUSYBOX.into(),
            command: vec!["sleep".into(), "3600".into()],
            args: vec![],
            env: BTreeMap::new(),
            mounts: vec![],
            privileged: false,
            resources: None,
        }],
    };
    assert_eq!(client.ensure_pod(&pod).await.unwrap(), Outcome::Created);
    let before = client.mutating_calls();
    assert_eq!(client.ensure_pod(&pod).await.unwrap(), Outcome::Unchanged);
    assert_eq!(client.mutating_calls(), before);
    // The same pod is visible through the local socket: one runtime, two transports.
    let local = fx.client.list_pods(&BTreeMap::new()).await.unwrap();
    assert_eq!(local.len(), 1);
    assert_eq!(local[0].name, "over-tls");

    // "localhost" as server name works too (a DNS name in the certificate).
    let uri = format!("https://localhost:{}", proxy.addr.port());
    let client_cert = pki.client_ca.valid_leaf("oneinfra", &[], true);
    CriClient::connect("hv-tls", pki.endpoint(&uri, client_cert), options(&fx))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_from_another_ca_is_refused() {
    let Some(fx) = Fixture::start("client_certificate_from_another_ca_is_refused").await else {
        return;
    };
    let pki = Pki::new();
    let proxy = pki.proxy(&fx, &pki.hypervisor_ca).await;
    let rogue = Ca::new("rogue-ca").valid_leaf("oneinfra", &[], true);
    let err = CriClient::connect("hv-tls", pki.endpoint(&proxy.uri(), rogue), options(&fx))
        .await
        .unwrap_err();
    assert_refused(&err, &proxy.uri());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_client_certificate_is_refused() {
    let Some(fx) = Fixture::start("expired_client_certificate_is_refused").await else {
        return;
    };
    let pki = Pki::new();
    let proxy = pki.proxy(&fx, &pki.hypervisor_ca).await;
    let now = time::OffsetDateTime::now_utc();
    let expired = pki.client_ca.leaf(
        "oneinfra",
        &[],
        true,
        now - time::Duration::days(2),
        now - time::Duration::days(1),
    );
    let err = CriClient::connect("hv-tls", pki.endpoint(&proxy.uri(), expired), options(&fx))
        .await
        .unwrap_err();
    assert_refused(&err, &proxy.uri());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_certificate_is_refused() {
    let Some(fx) = Fixture::start("no_client_certificate_is_refused").await else {
        return;
    };
    let pki = Pki::new();
    let proxy = pki.proxy(&fx, &pki.hypervisor_ca).await;
    // Our client always presents a certificate, so speak TLS by hand without one.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.hypervisor_ca.issuer.der().clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let server_name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let refused = match connector.connect(server_name, tcp).await {
        Err(_) => true,
        Ok(mut tls) => {
            // TLS 1.3: the server checks the (missing) certificate after our handshake ends.
            let _ = tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
                .await
                .expect("the proxy neither answered nor closed");
            matches!(read, Err(_) | Ok(0))
        }
    };
    assert!(refused, "a client without a certificate got an answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_certificate_from_another_ca_is_refused_by_the_client() {
    let Some(fx) =
        Fixture::start("server_certificate_from_another_ca_is_refused_by_the_client").await
    else {
        return;
    };
    let pki = Pki::new();
    let impostor = Ca::new("impostor-ca");
    let proxy = pki.proxy(&fx, &impostor).await;
    let client_cert = pki.client_ca.valid_leaf("oneinfra", &[], true);
    let err = CriClient::connect(
        "hv-tls",
        pki.endpoint(&proxy.uri(), client_cert),
        options(&fx),
    )
    .await
    .unwrap_err();
    assert_refused(&err, &proxy.uri());
    let text = err.to_string();
    assert!(text.contains("certificate"), "{text}");
}

#[tokio::test]
async fn wrong_socket_path_fails_fast_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("no-such.sock");
    let started = Instant::now();
    let err = CriClient::connect(
        "hv-unix",
        CriEndpoint::Unix(socket.clone()),
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("hv-unix") && text.contains(&socket.display().to_string()),
        "{text}"
    );
}

/// A client certificate the unreachable-endpoint tests can present (nobody checks it).
fn throwaway_tls(uri: &str) -> CriEndpoint {
    let ca = Ca::new("ca");
    let (cert_pem, key_pem) = ca.valid_leaf("oneinfra", &[], true);
    CriEndpoint::Tls {
        uri: uri.to_string(),
        ca_pem: ca.pem(),
        cert_pem,
        key_pem,
    }
}

#[tokio::test]
async fn closed_tcp_port_fails_fast_with_a_clear_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let uri = format!("https://127.0.0.1:{port}");
    let started = Instant::now();
    let err = CriClient::connect(
        "hv-tcp",
        throwaway_tls(&uri),
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("hv-tcp") && text.contains(&uri), "{text}");
}

#[tokio::test]
async fn silent_peer_hits_the_connect_timeout() {
    // Accepts TCP but never speaks TLS.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("https://{}", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let started = Instant::now();
    let err = CriClient::connect(
        "hv-silent",
        throwaway_tls(&uri),
        ClientOptions {
            connect_timeout: Duration::from_millis(500),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap_err();
    hold.abort();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(
        matches!(err, Error::ConnectTimeout { .. } | Error::Connect { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("hv-silent"), "{err}");
}

#[tokio::test]
async fn bad_tls_material_is_refused_before_connecting() {
    let ca = Ca::new("ca");
    let (cert_pem, key_pem) = ca.valid_leaf("oneinfra", &[], true);
    let endpoint = |ca_pem: &str, cert: &str, key: &str, uri: &str| CriEndpoint::Tls {
        uri: uri.to_string(),
        ca_pem: ca_pem.to_string(),
        cert_pem: cert.to_string(),
        key_pem: key.to_string(),
    };
    let o = ClientOptions::default();
    let cases = [
        (
            endpoint("", &cert_pem, &key_pem, "https://127.0.0.1:1"),
            "caCertificate",
        ),
        (
            endpoint(&ca.pem(), "", &key_pem, "https://127.0.0.1:1"),
            "client certificate",
        ),
        (
            endpoint(&ca.pem(), &cert_pem, "nope", "https://127.0.0.1:1"),
            "client key",
        ),
        (
            endpoint(&ca.pem(), &cert_pem, &key_pem, "http://127.0.0.1:1"),
            "scheme",
        ),
    ];
    for (e, want) in cases {
        let err = CriClient::connect("hv", e, o.clone()).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains(want), "{want}: {text}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
}
