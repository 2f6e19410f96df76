//! The proxy over real TLS on loopback; the "VPN" is 127.0.0.0/8 and the dialer records what
//! it was asked before dialing loopback for real.

use std::sync::Mutex;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio_rustls::TlsConnector;

use super::*;

struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    fn leaf(&self, name: &str, sans: &[&str], client: bool) -> (String, String) {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Dials loopback for real and remembers every destination asked for.
#[derive(Default)]
struct Recorder(Mutex<Vec<SocketAddr>>);

impl Dial for Recorder {
    fn dial(&self, to: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.0.lock().unwrap().push(to);
        Box::pin(TcpStream::connect(to))
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    files: TlsFiles,
    server_ca: Ca,
    client_ca: Ca,
    addr: SocketAddr,
    dialer: Arc<Recorder>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = Ca::new("apiserver-ca");
    let client_ca = Ca::new("kubelet-client-ca");
    let (cert, key) = server_ca.leaf("vpn-proxy", &["127.0.0.1"], false);
    let files = TlsFiles {
        certificate: dir.path().join("proxy.crt"),
        private_key: dir.path().join("proxy.key"),
        client_ca: dir.path().join("client-ca.crt"),
    };
    std::fs::write(&files.certificate, cert).unwrap();
    std::fs::write(&files.private_key, key).unwrap();
    std::fs::write(&files.client_ca, client_ca.0.pem()).unwrap();
    let proxy = Arc::new(Proxy::new(
        files.clone(),
        Destinations {
            cidr: "127.0.0.0/8".parse().unwrap(),
            own: "127.0.0.1".parse().unwrap(),
        },
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dialer = Arc::new(Recorder::default());
    let task = tokio::spawn(proxy.serve(listener, dialer.clone()));
    Fixture {
        _dir: dir,
        files,
        server_ca,
        client_ca,
        addr,
        dialer,
        task,
    }
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// A TLS connection to the proxy trusting `server_ca`, with a client certificate when given.
async fn connect(f: &Fixture, identity: Option<(String, String)>) -> io::Result<Tls> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(f.server_ca.0.pem().as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(f.addr).await?;
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await?;
    // TLS 1.3: a refused client certificate shows on the first read or write.
    tls.flush().await?;
    Ok(tls)
}

/// Sends a request head and reads the status line and the whole answer up to its end.
async fn ask(tls: &mut Tls, head: &str) -> io::Result<(String, String)> {
    tls.write_all(head.as_bytes()).await?;
    let mut reader = BufReader::new(tls);
    let mut status = String::new();
    reader.read_line(&mut status).await?;
    let mut rest = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 || line == "\r\n" {
            break;
        }
    }
    if !status.contains(" 200 ") {
        let mut body = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut reader, &mut body).await;
        rest = body;
    }
    Ok((status.trim_end().to_string(), rest))
}

#[tokio::test]
async fn a_connect_into_the_vpn_is_tunnelled_both_ways() {
    let f = fixture().await;
    // A "kubelet" on another loopback address: it greets, then echoes one line.
    let kubelet = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let to = kubelet.local_addr().unwrap();
    tokio::spawn(async move {
        let (s, _) = kubelet.accept().await.unwrap();
        let (r, mut w) = s.into_split();
        w.write_all(b"hello\n").await.unwrap();
        let mut line = String::new();
        BufReader::new(r).read_line(&mut line).await.unwrap();
        w.write_all(format!("echo {line}").as_bytes())
            .await
            .unwrap();
    });
    let client = f.client_ca.leaf("kube-apiserver-kubelet-client", &[], true);
    let mut tls = connect(&f, Some(client)).await.unwrap();
    let (status, _) = ask(
        &mut tls,
        &format!("CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n\r\n"),
    )
    .await
    .unwrap();
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    let mut reader = BufReader::new(tls);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert_eq!(line, "hello\n");
    reader.get_mut().write_all(b"ping\n").await.unwrap();
    line.clear();
    reader.read_line(&mut line).await.unwrap();
    assert_eq!(line, "echo ping\n");
    assert_eq!(*f.dialer.0.lock().unwrap(), vec![to]);
}

#[tokio::test]
async fn what_is_not_a_peer_of_the_vpn_is_refused_without_a_dial() {
    let f = fixture().await;
    let client = f.client_ca.leaf("kube-apiserver-kubelet-client", &[], true);
    for (head, want, reason) in [
        (
            "CONNECT 10.1.2.3:10250 HTTP/1.1\r\n\r\n",
            "HTTP/1.1 403 Forbidden",
            "10.1.2.3 is not an address of the cluster VPN (127.0.0.0/8)",
        ),
        (
            "CONNECT 127.0.0.1:10250 HTTP/1.1\r\n\r\n",
            "HTTP/1.1 403 Forbidden",
            "127.0.0.1 is not a peer of the cluster VPN",
        ),
        (
            "CONNECT worker-1:10250 HTTP/1.1\r\n\r\n",
            "HTTP/1.1 403 Forbidden",
            "\"worker-1:10250\" is not an IP address and port of the cluster VPN",
        ),
        (
            "GET /healthz HTTP/1.1\r\n\r\n",
            "HTTP/1.1 405 Method Not Allowed",
            "only CONNECT is served, not GET",
        ),
    ] {
        let mut tls = connect(&f, Some(client.clone())).await.unwrap();
        let (status, body) = ask(&mut tls, head).await.unwrap();
        assert_eq!(status, want, "{head:?}");
        assert_eq!(body.trim_end(), reason, "{head:?}");
    }
    assert!(f.dialer.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_destination_that_does_not_answer_is_a_bad_gateway() {
    let f = fixture().await;
    // A port just freed: nothing listens there.
    let to = TcpListener::bind("127.0.0.3:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let client = f.client_ca.leaf("kube-apiserver-kubelet-client", &[], true);
    let mut tls = connect(&f, Some(client)).await.unwrap();
    let (status, body) = ask(&mut tls, &format!("CONNECT {to} HTTP/1.1\r\n\r\n"))
        .await
        .unwrap();
    assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
    assert!(
        body.starts_with(&format!("dialing {to} in the cluster VPN: ")),
        "{body}"
    );
}

#[tokio::test]
async fn only_holders_of_a_client_certificate_of_the_client_ca_are_served() {
    let f = fixture().await;
    let refused =
        |r: io::Result<(String, String)>| r.is_err() || r.is_ok_and(|(s, _)| s.is_empty());
    // No certificate.
    let r = match connect(&f, None).await {
        Ok(mut tls) => ask(&mut tls, "CONNECT 127.0.0.2:1 HTTP/1.1\r\n\r\n").await,
        Err(e) => Err(e),
    };
    assert!(refused(r), "a client without a certificate was served");
    // A certificate of another CA.
    let other = Ca::new("another-ca").leaf("kube-apiserver-kubelet-client", &[], true);
    let r = match connect(&f, Some(other)).await {
        Ok(mut tls) => ask(&mut tls, "CONNECT 127.0.0.2:1 HTTP/1.1\r\n\r\n").await,
        Err(e) => Err(e),
    };
    assert!(refused(r), "a certificate of another CA was served");
    assert!(f.dialer.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn renewed_tls_files_are_taken_without_a_restart() {
    let f = fixture().await;
    let client = f.client_ca.leaf("kube-apiserver-kubelet-client", &[], true);
    connect(&f, Some(client.clone())).await.unwrap();
    // A new client CA: the old client certificate is refused from the next connection on,
    // one of the new CA is served.
    let new_ca = Ca::new("kubelet-client-ca-2");
    std::fs::write(&f.files.client_ca, new_ca.0.pem()).unwrap();
    let mut tls = connect(&f, Some(client)).await;
    let r = match tls.as_mut() {
        Ok(tls) => ask(tls, "CONNECT 127.0.0.9:1 HTTP/1.1\r\n\r\n").await,
        Err(_) => Err(io::Error::other("refused")),
    };
    assert!(
        r.is_err() || r.is_ok_and(|(s, _)| s.is_empty()),
        "the old client CA still served"
    );
    let mut tls = connect(&f, Some(new_ca.leaf("kube-apiserver", &[], true)))
        .await
        .unwrap();
    let (status, _) = ask(&mut tls, "CONNECT 10.0.0.1:1 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
}

#[test]
fn request_heads_parse_as_the_api_servers_send_them() {
    assert_eq!(
        parse_head("CONNECT 10.0.0.2:10250 HTTP/1.1\r\nHost: 10.0.0.2:10250\r\n\r\n"),
        Ok("10.0.0.2:10250".parse().unwrap())
    );
    assert_eq!(
        parse_head("CONNECT [fd00::2]:10250 HTTP/1.1\r\n\r\n"),
        Ok("[fd00::2]:10250".parse().unwrap())
    );
    assert_eq!(
        parse_head("CONNECT x HTTP/2\r\n").unwrap_err().0,
        "400 Bad Request"
    );
    assert_eq!(parse_head("nonsense").unwrap_err().0, "400 Bad Request");
}
