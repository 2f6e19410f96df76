//! The node proxy: `/api/v1/nodes/<node>/proxy/<path>` forwarded to the node's kubelet, as
//! kube-apiserver forwards it: to the address `--kubelet-preferred-address-types` picks from
//! the Node's status, on its kubelet port, over TLS with `--kubelet-client-certificate`,
//! verifying the kubelet with `--kubelet-certificate-authority` (without it, not verified, as
//! in Kubernetes), and through the `cluster` egress selection of
//! `--egress-selector-config-file` when one is given (`HTTPConnect` over TCP, TLS or a unix
//! socket, or `Direct`; konnectivity's `GRPC` is refused at start).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;

use super::registry::Served;
use super::rest::Target;
use super::status::{ApiError, ApiResult};
use super::{Api, BoxError, Call, Reply};

/// Where the `cluster` egress goes.
#[derive(Debug, Clone)]
pub enum Egress {
    /// Straight to the kubelet.
    Direct,
    /// `CONNECT host:port` to a proxy at a TCP URL (`http://` or `https://` with `tls`).
    HttpConnectTcp {
        host: String,
        port: u16,
        tls: Option<Arc<ClientConfig>>,
    },
    /// `CONNECT host:port` to a proxy on a unix socket.
    HttpConnectUds { path: PathBuf },
}

/// How the API server reaches kubelets.
#[derive(Clone)]
pub struct KubeletClient {
    /// Client certificate, and the kubelet CA or no verification.
    pub tls: Arc<ClientConfig>,
    /// `--kubelet-preferred-address-types`.
    pub preferred: Vec<String>,
    /// The port when a Node does not say (10250).
    pub default_port: u16,
    /// `--egress-selector-config-file`'s `cluster` selection.
    pub egress: Egress,
    /// `--kubelet-timeout`.
    pub timeout: Duration,
}

/// Reads an `EgressSelectorConfiguration` and returns its `cluster` selection.
///
/// # Errors
/// An unreadable or malformed file, a protocol the stand-in does not speak, unreadable TLS
/// files.
pub fn egress_from_file(path: &Path) -> Result<Egress, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let config: Value =
        serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let api_version = config["apiVersion"].as_str().unwrap_or_default();
    if ![
        "apiserver.k8s.io/v1beta1",
        "apiserver.k8s.io/v1alpha1",
        "apiserver.config.k8s.io/v1beta1",
        "apiserver.config.k8s.io/v1",
    ]
    .contains(&api_version)
        || config["kind"] != "EgressSelectorConfiguration"
    {
        return Err(format!(
            "{}: not an EgressSelectorConfiguration (apiVersion {api_version:?}, kind {})",
            path.display(),
            config["kind"]
        ));
    }
    let Some(cluster) = config["egressSelections"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == "cluster")
    else {
        return Ok(Egress::Direct);
    };
    let connection = &cluster["connection"];
    match connection["proxyProtocol"].as_str() {
        Some("Direct") => Ok(Egress::Direct),
        Some("HTTPConnect") => {
            let transport = &connection["transport"];
            if let Some(uds) = transport["uds"]["udsName"].as_str() {
                return Ok(Egress::HttpConnectUds {
                    path: PathBuf::from(uds),
                });
            }
            let url = transport["tcp"]["url"]
                .as_str()
                .ok_or_else(|| format!("{}: egressSelections[cluster]: HTTPConnect needs transport.tcp.url or transport.uds.udsName", path.display()))?;
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("{}: invalid url {url:?}: {e}", path.display()))?;
            let host = uri
                .host()
                .ok_or_else(|| format!("{}: url {url:?} has no host", path.display()))?
                .trim_matches(['[', ']'])
                .to_string();
            let tls = match uri.scheme_str() {
                Some("https") => {
                    let t = &transport["tcp"]["tlsConfig"];
                    let read = |field: &str| -> Result<Option<Vec<u8>>, String> {
                        match t[field].as_str().filter(|p| !p.is_empty()) {
                            Some(p) => std::fs::read(p)
                                .map(Some)
                                .map_err(|e| format!("tlsConfig.{field}: cannot read {p}: {e}")),
                            None => Ok(None),
                        }
                    };
                    let roots = match read("caBundle")? {
                        Some(pem) => crate::tls::roots_from_pem(&pem, "egress caBundle")
                            .map_err(|e| e.to_string())?,
                        None => {
                            return Err(format!(
                                "{}: an https egress proxy needs tlsConfig.caBundle",
                                path.display()
                            ));
                        }
                    };
                    let identity = match (read("clientCert")?, read("clientKey")?) {
                        (Some(c), Some(k)) => Some((
                            crate::tls::certs_from_pem(&c, "egress clientCert")
                                .map_err(|e| e.to_string())?,
                            crate::tls::key_from_pem(&k, "egress clientKey")
                                .map_err(|e| e.to_string())?,
                        )),
                        _ => None,
                    };
                    Some(
                        crate::tls::client_config(roots, identity, "egress proxy")
                            .map_err(|e| e.to_string())?,
                    )
                }
                Some("http") => None,
                other => {
                    return Err(format!(
                        "{}: url scheme {other:?} is not http or https",
                        path.display()
                    ));
                }
            };
            let port = uri
                .port_u16()
                .unwrap_or(if tls.is_some() { 443 } else { 80 });
            Ok(Egress::HttpConnectTcp { host, port, tls })
        }
        Some("GRPC") => Err(format!(
            "{}: proxyProtocol GRPC (konnectivity) is not spoken by the stand-in; use HTTPConnect or Direct",
            path.display()
        )),
        other => Err(format!(
            "{}: unknown proxyProtocol {other:?}",
            path.display()
        )),
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

fn unreachable_service(message: String) -> ApiError {
    ApiError::unavailable(format!("error trying to reach service: {message}"))
}

/// `CONNECT target` on an open proxy connection.
async fn connect_through(mut stream: Box<dyn Io>, target: &str) -> Result<Box<dyn Io>, String> {
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: kube-apiserver-standin\r\n\r\n").as_bytes())
        .await
        .map_err(|e| format!("proxy: {e}"))?;
    // Read the response head byte by byte, so nothing of the tunnel is consumed.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = stream
            .read(&mut byte)
            .await
            .map_err(|e| format!("proxy: {e}"))?;
        if n == 0 {
            return Err("proxy closed the connection".to_string());
        }
        head.push(byte[0]);
        if head.len() > 16 * 1024 {
            return Err("proxy answered a head too large".to_string());
        }
    }
    let text = String::from_utf8_lossy(&head);
    let status = text.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        return Err(format!(
            "proxy refused CONNECT {target}: {}",
            text.lines().next().unwrap_or_default()
        ));
    }
    Ok(stream)
}

impl KubeletClient {
    async fn dial(&self, host: &str, port: u16) -> Result<Box<dyn Io>, String> {
        let target = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        match &self.egress {
            Egress::Direct => TcpStream::connect(&target)
                .await
                .map(|s| Box::new(s) as Box<dyn Io>)
                .map_err(|e| format!("dial tcp {target}: connect: {e}")),
            Egress::HttpConnectUds { path } => {
                let stream = UnixStream::connect(path)
                    .await
                    .map_err(|e| format!("dial unix {}: {e}", path.display()))?;
                connect_through(Box::new(stream), &target).await
            }
            Egress::HttpConnectTcp {
                host: proxy,
                port: proxy_port,
                tls,
            } => {
                let address = if proxy.contains(':') {
                    format!("[{proxy}]:{proxy_port}")
                } else {
                    format!("{proxy}:{proxy_port}")
                };
                let tcp = TcpStream::connect(&address)
                    .await
                    .map_err(|e| format!("dial tcp {address} (egress proxy): {e}"))?;
                let stream: Box<dyn Io> = match tls {
                    Some(config) => {
                        let name =
                            ServerName::try_from(proxy.clone()).map_err(|e| e.to_string())?;
                        Box::new(
                            TlsConnector::from(Arc::clone(config))
                                .connect(name, tcp)
                                .await
                                .map_err(|e| format!("TLS with the egress proxy {address}: {e}"))?,
                        )
                    }
                    None => Box::new(tcp),
                };
                connect_through(stream, &target).await
            }
        }
    }
}

/// `node`, `node:port` or `scheme:node:port` of a proxy path's name.
fn parse_node(name: &str) -> (Option<&str>, &str, Option<u16>) {
    let parts: Vec<&str> = name.split(':').collect();
    match parts.as_slice() {
        [node] => (None, node, None),
        [node, port] => (None, node, port.parse().ok()),
        [scheme, node, port] => (Some(scheme), node, port.parse().ok()),
        _ => (None, name, None),
    }
}

impl Api {
    pub(crate) async fn node_proxy(
        &self,
        call: &Call<'_>,
        target: &Target<'_>,
    ) -> ApiResult<Reply> {
        let Some(client) = &self.kubelet else {
            return Err(ApiError::unavailable(
                "the node proxy is not configured (no --kubelet-client-certificate)",
            ));
        };
        let (scheme, node, port) = parse_node(target.name());
        if scheme.is_some_and(|s| s != "https") {
            return Err(ApiError::bad_request(format!(
                "the node proxy speaks https only, not {scheme:?}"
            )));
        }
        let nodes = Served {
            resource: target.served.resource.clone(),
            crd: None,
        };
        let (object, _) = self.read(&nodes, None, node).await?;
        let addresses: Vec<(&str, &str)> = object["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| Some((a["type"].as_str()?, a["address"].as_str()?)))
            .collect();
        let host = client
            .preferred
            .iter()
            .find_map(|kind| addresses.iter().find(|(t, _)| t == kind).map(|(_, a)| *a))
            .ok_or_else(|| {
                unreachable_service(format!(
                    "no preferred addresses found; known addresses: {addresses:?}"
                ))
            })?
            .to_string();
        let port = port
            .or_else(|| {
                object["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
            })
            .filter(|p| *p > 0)
            .unwrap_or(client.default_port);
        let mut path = if target.path.rest.is_empty() {
            "/".to_string()
        } else {
            target.path.rest.clone()
        };
        let query: Vec<String> = call
            .info
            .query
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    form_urlencoded::byte_serialize(k.as_bytes()).collect::<String>(),
                    form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
                )
            })
            .collect();
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let exchange = async {
            let stream = client.dial(&host, port).await?;
            let name = ServerName::try_from(host.clone())
                .map_err(|e| format!("invalid kubelet address {host}: {e}"))?;
            let tls = TlsConnector::from(Arc::clone(&client.tls))
                .connect(name, stream)
                .await
                .map_err(|e| format!("TLS with the kubelet at {host}:{port}: {e}"))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let mut request = Request::builder()
                .method(call.method.clone())
                .uri(&path)
                .header(http::header::HOST, format!("{host}:{port}"));
            for header in [
                http::header::ACCEPT,
                http::header::CONTENT_TYPE,
                http::header::USER_AGENT,
            ] {
                if let Some(v) = call.headers.get(&header) {
                    request = request.header(header, v);
                }
            }
            let request = request
                .body(Full::new(call.body.clone()))
                .map_err(|e| e.to_string())?;
            sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())
        };
        let response = tokio::time::timeout(client.timeout, exchange)
            .await
            .map_err(|_| {
                unreachable_service(format!(
                    "dial {host}:{port}: timed out after {:?}",
                    client.timeout
                ))
            })?
            .map_err(unreachable_service)?;
        let (parts, body) = response.into_parts();
        let body = body.map_err(|e| Box::new(e) as BoxError).boxed_unsync();
        let mut out = http::Response::new(body);
        *out.status_mut() = parts.status;
        for header in [http::header::CONTENT_TYPE, http::header::CONTENT_LENGTH] {
            if let Some(v) = parts.headers.get(&header) {
                out.headers_mut().insert(header, v.clone());
            }
        }
        Ok(Reply::Raw(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_names_carry_an_optional_scheme_and_port() {
        assert_eq!(parse_node("w1"), (None, "w1", None));
        assert_eq!(parse_node("w1:10255"), (None, "w1", Some(10255)));
        assert_eq!(
            parse_node("https:w1:10250"),
            (Some("https"), "w1", Some(10250))
        );
    }

    #[test]
    fn egress_configurations_are_read_or_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            let p = dir.path().join("egress.yaml");
            std::fs::write(&p, text).unwrap();
            p
        };
        let uds = write(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: /run/proxy.sock\n",
        );
        assert!(
            matches!(egress_from_file(&uds), Ok(Egress::HttpConnectUds { path }) if path == Path::new("/run/proxy.sock"))
        );
        let tcp = write(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      tcp:\n        url: http://127.0.0.1:8131\n",
        );
        assert!(matches!(
            egress_from_file(&tcp),
            Ok(Egress::HttpConnectTcp {
                port: 8131,
                tls: None,
                ..
            })
        ));
        let grpc = write(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: GRPC\n",
        );
        assert!(egress_from_file(&grpc).unwrap_err().contains("GRPC"));
        let none = write(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: etcd\n  connection:\n    proxyProtocol: Direct\n",
        );
        assert!(matches!(egress_from_file(&none), Ok(Egress::Direct)));
        let wrong = write("kind: Something\n");
        assert!(egress_from_file(&wrong).is_err());
    }
}
