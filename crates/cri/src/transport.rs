//! Building the gRPC channel: a Unix socket, or TCP with mutual TLS (rustls, ALPN h2).

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpStream, UnixStream};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::endpoint::{CriEndpoint, TcpAddress, parse_tcp_uri};
use crate::error::{Error, Result, Target};

/// A prepared way to reach one endpoint: parsed and with TLS material loaded, so that every
/// (re)connection is cheap and configuration errors surface once, at construction.
#[derive(Clone)]
pub(crate) enum Dialer {
    Unix(std::path::PathBuf),
    Tls {
        address: TcpAddress,
        server_name: ServerName<'static>,
        config: Arc<rustls::ClientConfig>,
    },
}

impl Dialer {
    pub(crate) fn new(target: &Target, endpoint: &CriEndpoint) -> Result<Self> {
        match endpoint {
            CriEndpoint::Unix(path) => Ok(Dialer::Unix(path.clone())),
            CriEndpoint::Tls {
                uri,
                ca_pem,
                cert_pem,
                key_pem,
            } => {
                let address = parse_tcp_uri(uri).map_err(|reason| Error::InvalidEndpoint {
                    target: target.clone(),
                    reason,
                })?;
                let server_name = match address.ip() {
                    Some(ip) => ServerName::IpAddress(ip.into()),
                    None => ServerName::try_from(address.host.clone()).map_err(|e| {
                        Error::InvalidEndpoint {
                            target: target.clone(),
                            reason: format!(
                                "host {:?} is not a valid server name: {e}",
                                address.host
                            ),
                        }
                    })?,
                };
                let config = tls_client_config(target, ca_pem, cert_pem, key_pem)?;
                Ok(Dialer::Tls {
                    address,
                    server_name,
                    config: Arc::new(config),
                })
            }
        }
    }

    /// Connects eagerly (bounded by `timeout`), pinging every [`KEEPALIVE_INTERVAL`] while
    /// idle; tonic re-dials lazily when the connection
    /// breaks later.
    pub(crate) async fn connect(&self, target: &Target, timeout: Duration) -> Result<Channel> {
        // The authority is never used for routing (the connector decides where to go); it is
        // only the :authority of the HTTP/2 requests.
        // HTTP/2 pings while idle: a mutual-TLS front closes a connection that says nothing
        // for a while (`oi_cri_front::FRONT_IDLE_TIMEOUT`), so that idle connections from
        // anybody cannot hold it.
        let endpoint = Endpoint::from_static("http://cri.invalid")
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_INTERVAL * 2)
            .keep_alive_while_idle(true);
        let connecting = async {
            match self.clone() {
                Dialer::Unix(path) => {
                    endpoint
                        .connect_with_connector(tower::service_fn(move |_: Uri| {
                            let path = path.clone();
                            async move { UnixStream::connect(path).await.map(TokioIo::new) }
                        }))
                        .await
                }
                Dialer::Tls {
                    address,
                    server_name,
                    config,
                } => {
                    endpoint
                        .connect_with_connector(tower::service_fn(move |_: Uri| {
                            let address = address.clone();
                            let server_name = server_name.clone();
                            let connector = tokio_rustls::TlsConnector::from(config.clone());
                            async move {
                                let tcp = TcpStream::connect((address.host.as_str(), address.port))
                                    .await?;
                                tcp.set_nodelay(true)?;
                                let tls = connector.connect(server_name, tcp).await?;
                                Ok::<_, std::io::Error>(TokioIo::new(tls))
                            }
                        }))
                        .await
                }
            }
        };
        match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(channel)) => Ok(channel),
            Ok(Err(e)) => Err(Error::Connect {
                target: target.clone(),
                reason: error_chain(&e),
            }),
            Err(_) => Err(Error::ConnectTimeout {
                target: target.clone(),
                timeout,
            }),
        }
    }
}

/// The rustls client configuration: trust only `ca_pem`, present `cert_pem` + `key_pem`,
/// speak HTTP/2.
fn tls_client_config(
    target: &Target,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<rustls::ClientConfig> {
    let material = |what: &'static str, reason: String| Error::TlsMaterial {
        target: target.clone(),
        what,
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    let cas = CertificateDer::pem_slice_iter(ca_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| material("caCertificate", e.to_string()))?;
    if cas.is_empty() {
        return Err(material("caCertificate", "no certificate in PEM".into()));
    }
    for ca in cas {
        roots
            .add(ca)
            .map_err(|e| material("caCertificate", e.to_string()))?;
    }
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| material("client certificate", e.to_string()))?;
    if chain.is_empty() {
        return Err(material(
            "client certificate",
            "no certificate in PEM".into(),
        ));
    }
    // The key's parse error never quotes the key itself.
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| material("client key", e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| material("protocol versions", e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| material("client certificate and key", e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// An error and all its sources, joined with `: `.
pub(crate) fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// How often an idle CRI connection pings its endpoint (HTTP/2 PING): well within the idle
/// timeout of a mutual-TLS front.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
