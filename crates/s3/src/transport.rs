//! One HTTP/1.1 request over a connection of its own: plain TCP for `http://` endpoints
//! (a local store), rustls for `https://` (the system's roots and `AWS_CA_BUNDLE`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn tls_config(ca_bundle: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A system root rustls cannot use is left out, as every TLS client does.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_bundle {
        let pem =
            std::fs::read(path).map_err(|e| format!("AWS_CA_BUNDLE {}: {e}", path.display()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("AWS_CA_BUNDLE {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("AWS_CA_BUNDLE {}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn exchange<S>(
    stream: S,
    request: http::Request<Full<Bytes>>,
) -> Result<(u16, Vec<u8>), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        // The connection ends with the exchange; its error is the request's.
        let _ = connection.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body.to_vec()))
}

/// Sends `method target` to `base` (`http(s)://host[:port]`) with `headers` (signed, `host`
/// among them) and `body`; the status and the whole body back.
pub async fn send(
    base: &str,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    ca_bundle: Option<&Path>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let (tls, authority) = match base.split_once("://") {
        Some(("https", a)) => (true, a),
        Some(("http", a)) => (false, a),
        _ => return Err(format!("endpoint {base:?} is not http:// or https://")),
    };
    let authority = authority.trim_end_matches('/');
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse::<u16>() {
            Ok(p) => (h, p),
            Err(_) => (authority, if tls { 443 } else { 80 }),
        },
        _ => (authority, if tls { 443 } else { 80 }),
    };
    let host_only = host.trim_start_matches('[').trim_end_matches(']');
    let mut builder = http::Request::builder()
        .method(method)
        .uri(target)
        .header("content-length", body.len());
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let work = async {
        let tcp = TcpStream::connect((host_only, port))
            .await
            .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
        if tls {
            let name = ServerName::try_from(host_only.to_string())
                .map_err(|e| format!("{host_only}: {e}"))?;
            let stream = TlsConnector::from(tls_config(ca_bundle)?)
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS with {authority}: {e}"))?;
            exchange(stream, request).await
        } else {
            exchange(tcp, request).await
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}
