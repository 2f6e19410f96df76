//! The API servers' way into the cluster VPN: an HTTP `CONNECT` proxy over mutual TLS, as
//! kube-apiserver's `--egress-selector-config-file` speaks to one (`proxyProtocol:
//! HTTPConnect`, `transport.tcp` with `tlsConfig`), which dials inside the cluster's network
//! namespace.
//!
//! ```text
//! kube-apiserver ──TLS (client certificate of the kubelet client CA)──► proxy <ip>:<port>
//!   CONNECT 10.0.0.2:10250 HTTP/1.1          only addresses of the VPN CIDR, not the endpoint's
//!   ◄── HTTP/1.1 200 Connection established   then bytes both ways (the API server's own TLS
//!                                             to the kubelet runs inside)
//! ```
//!
//! Only holders of a client certificate of the cluster's kubelet client CA are served: the
//! API servers' `--kubelet-client-certificate` is one, the identity the kubelets already
//! trust. The three TLS files are read again when they change (a renewed certificate is
//! taken without a restart, which would drop every tunnel of the cluster).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use ipnet::IpNet;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// The longest request head read (a `CONNECT` line and a few headers).
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to finish its TLS handshake and request.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a dial into the VPN may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// How the proxy opens connections into the VPN.
pub trait Dial: Send + Sync + 'static {
    fn dial(&self, to: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// The proxy's TLS files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub certificate: PathBuf,
    pub private_key: PathBuf,
    /// The CA whose client certificates are served.
    pub client_ca: PathBuf,
}

/// Which destinations are served.
#[derive(Debug, Clone, Copy)]
pub struct Destinations {
    /// The VPN CIDR.
    pub cidr: IpNet,
    /// The endpoint's own address in it (never a destination).
    pub own: IpAddr,
}

impl Destinations {
    /// `Err` with the reason when `to` is not served.
    pub fn check(&self, to: IpAddr) -> Result<(), String> {
        if !self.cidr.contains(&to) {
            return Err(format!(
                "{to} is not an address of the cluster VPN ({})",
                self.cidr
            ));
        }
        if to == self.own || to == self.cidr.network() {
            return Err(format!("{to} is not a peer of the cluster VPN"));
        }
        Ok(())
    }
}

/// The proxy: its TLS files, reloaded when they change, and its destinations.
pub struct Proxy {
    files: TlsFiles,
    destinations: Destinations,
    loaded: Mutex<Option<([u8; 32], TlsAcceptor)>>,
}

/// A `CONNECT` request's destination, or the status line and reason to refuse it with.
pub fn parse_head(head: &str) -> Result<SocketAddr, (&'static str, String)> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        return Err((
            "400 Bad Request",
            format!("not an HTTP request line: {line:?}"),
        ));
    };
    if !version.starts_with("HTTP/1.") {
        return Err((
            "400 Bad Request",
            format!("unsupported version {version:?}"),
        ));
    }
    if method != "CONNECT" {
        return Err((
            "405 Method Not Allowed",
            format!("only CONNECT is served, not {method}"),
        ));
    }
    target.parse::<SocketAddr>().map_err(|_| {
        (
            "403 Forbidden",
            format!("{target:?} is not an IP address and port of the cluster VPN"),
        )
    })
}

fn refusal(status: &str, reason: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reason}\n",
        reason.len() + 1
    )
    .into_bytes()
}

impl Proxy {
    pub fn new(files: TlsFiles, destinations: Destinations) -> Proxy {
        Proxy {
            files,
            destinations,
            loaded: Mutex::new(None),
        }
    }

    /// The TLS acceptor of the files as they are now (built again only when they changed).
    ///
    /// # Errors
    /// A file that cannot be read or does not hold what it should.
    pub fn acceptor(&self) -> Result<TlsAcceptor, String> {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let cert = read(&self.files.certificate)?;
        let key = read(&self.files.private_key)?;
        let ca = read(&self.files.client_ca)?;
        let mut h = Sha256::new();
        for part in [&cert, &key, &ca] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        let digest: [u8; 32] = h.finalize().into();
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((d, acceptor)) = loaded.as_ref()
            && *d == digest
        {
            return Ok(acceptor.clone());
        }
        let acceptor = build_acceptor(&self.files, &cert, &key, &ca)?;
        *loaded = Some((digest, acceptor.clone()));
        Ok(acceptor)
    }

    /// Serves `listener` until the process ends.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, dialer: Arc<dyn Dial>) {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    eprintln!("oi-vpn-endpoint: proxy: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let proxy = Arc::clone(&self);
            let dialer = Arc::clone(&dialer);
            tokio::spawn(async move {
                if let Err(e) = proxy.connection(stream, dialer.as_ref()).await {
                    eprintln!("oi-vpn-endpoint: proxy: {peer}: {e}");
                }
            });
        }
    }

    async fn connection(&self, stream: TcpStream, dialer: &dyn Dial) -> Result<(), String> {
        let acceptor = self.acceptor()?;
        let mut tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
            .await
            .map_err(|_| "no TLS handshake within 10s".to_string())?
            .map_err(|e| format!("TLS: {e}"))?;
        let (head, rest) = tokio::time::timeout(HANDSHAKE_TIMEOUT, read_head(&mut tls))
            .await
            .map_err(|_| "no request within 10s".to_string())??;
        let to = match parse_head(&head).and_then(|to| {
            self.destinations
                .check(to.ip())
                .map(|()| to)
                .map_err(|reason| ("403 Forbidden", reason))
        }) {
            Ok(to) => to,
            Err((status, reason)) => {
                let _ = tls.write_all(&refusal(status, &reason)).await;
                let _ = tls.shutdown().await;
                return Err(format!("refused ({status}): {reason}"));
            }
        };
        let mut upstream = match dialer.dial(to).await {
            Ok(s) => s,
            Err(e) => {
                let reason = format!("dialing {to} in the cluster VPN: {e}");
                let _ = tls.write_all(&refusal("502 Bad Gateway", &reason)).await;
                let _ = tls.shutdown().await;
                return Err(reason);
            }
        };
        let _ = upstream.set_nodelay(true);
        tls.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .map_err(|e| format!("answering: {e}"))?;
        if !rest.is_empty() {
            upstream
                .write_all(&rest)
                .await
                .map_err(|e| format!("to {to}: {e}"))?;
        }
        // Either side closing ends the tunnel; a reset is an ordinary end too.
        let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
        Ok(())
    }
}

/// Reads up to the end of the request head; returns it and whatever came after it.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
) -> Result<(String, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("request head longer than {MAX_HEAD} bytes"));
        }
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading: {e}"))?;
        if n == 0 {
            return Err("closed before a whole request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn build_acceptor(
    files: &TlsFiles,
    cert: &[u8],
    key: &[u8],
    ca: &[u8],
) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", files.certificate.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", files.certificate.display()));
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("{}: {e}", files.private_key.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca) {
        let c = c.map_err(|e| format!("{}: {e}", files.client_ca.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", files.client_ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| format!("{}: {e}", files.client_ca.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: {e}", files.certificate.display()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests;
