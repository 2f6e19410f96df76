use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};

use super::*;

/// PBKDF2 rounds of the test user's hash: several times the default, so its check lasts long
/// enough to be seen running (about a second here).
const SLOW_ITERATIONS: u32 = 5_000_000;
const WITHIN: Duration = Duration::from_secs(60);

/// The provider served on a loopback port by a runtime with **one** async worker, on its own
/// thread (stopped with the test's process): the port, the provider and the serving
/// certificate.
fn served(dir: &std::path::Path) -> (u16, Arc<Provider>, CertificateDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    let tls = tls_config(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
    let provider = Arc::new(crate::provider::tests::provider_with(
        dir,
        true,
        SLOW_ITERATIONS,
        Box::new(ring::rand::SystemRandom::new()),
    ));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = Arc::clone(&provider);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            serve(listener, tls, serving).await;
        });
    });
    (port, provider, cert.der().clone())
}

/// One HTTPS request to the provider, trusting `cert`: the status.
fn request(port: u16, cert: &CertificateDer<'static>, head_and_body: &str) -> u16 {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(WITHIN)).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    tls.write_all(head_and_body.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = tls.read_to_string(&mut response);
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {response:?}"))
}

/// While one login's password is being checked (PBKDF2, on purpose slow), the provider's
/// only async worker still answers other requests: the check runs on a blocking thread.
#[test]
fn a_password_check_does_not_hold_up_other_requests() {
    let dir = tempfile::tempdir().unwrap();
    let (port, provider, cert) = served(dir.path());
    assert_eq!(
        request(
            port,
            &cert,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        ),
        200
    );
    let body = "grant_type=password&client_id=kubernetes&username=alice&password=s3cret";
    let login = format!(
        "POST /token HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let logging_in = {
        let cert = cert.clone();
        std::thread::spawn(move || request(port, &cert, &login))
    };
    let deadline = Instant::now() + WITHIN;
    while provider.password_checks().0 == 0 {
        assert!(Instant::now() < deadline, "the login's check never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let healthz = request(
        port,
        &cert,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let (running, done) = provider.password_checks();
    assert_eq!(healthz, 200);
    assert_eq!(
        (running, done),
        (1, 0),
        "/healthz was answered only once the password check had finished: it ran on the \
         async worker"
    );
    assert_eq!(logging_in.join().unwrap(), 200, "the login itself succeeds");
    assert_eq!(provider.password_checks(), (0, 1));
}
