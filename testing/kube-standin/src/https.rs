//! A minimal HTTPS client: one connection per request (the stand-ins make a few requests a
//! second at most), HTTP/1.1 over rustls, an overall timeout.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// An error reaching an HTTPS endpoint.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    /// A URL that is not `https://host[:port][/path]`.
    #[error("invalid URL {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The host name does not resolve.
    #[error("cannot resolve {host}")]
    Resolve {
        /// host:port
        host: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No address of the host accepts a TCP connection.
    #[error("cannot connect to {host}")]
    Connect {
        /// host:port
        host: String,
        /// Why (the last address's error).
        #[source]
        source: std::io::Error,
    },
    /// The TLS handshake failed (bad certificate on either side, among others).
    #[error("TLS handshake with {host} failed")]
    Handshake {
        /// host:port
        host: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("HTTP request to {url} failed")]
    Http {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: hyper::Error,
    },
    /// The request could not be built.
    #[error("cannot build the request to {url}")]
    Request {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: http::Error,
    },
    /// The whole exchange took too long.
    #[error("request to {url} timed out after {timeout:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The limit.
        timeout: Duration,
    },
}

/// Result with [`HttpsError`].
pub type Result<T, E = HttpsError> = std::result::Result<T, E>;

/// Where a base URL points: `https://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as given, without a trailing slash.
    pub url: String,
    /// The host name or IP address, without brackets.
    pub host: String,
    /// The port (443 by default).
    pub port: u16,
    /// A path prefix ("" when none).
    pub prefix: String,
}

impl Endpoint {
    /// Parses an `https://` base URL.
    ///
    /// # Errors
    /// [`HttpsError::Url`].
    pub fn parse(url: &str) -> Result<Endpoint> {
        let bad = |reason: &str| HttpsError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: http::Uri = url.parse().map_err(|_| bad("does not parse"))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad("the scheme must be https"));
        }
        let host = uri
            .host()
            .ok_or_else(|| bad("no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Ok(Endpoint {
            url: url.trim_end_matches('/').to_string(),
            host,
            port: uri.port_u16().unwrap_or(443),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A response: status and whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: StatusCode,
    /// The body.
    pub body: Bytes,
}

/// Sends one request to `endpoint` + `path` over a fresh TLS connection made with `tls`.
///
/// # Errors
/// Any [`HttpsError`]; a non-2xx status is not an error.
pub async fn request(
    tls: &Arc<ClientConfig>,
    endpoint: &Endpoint,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Response> {
    let outgoing = Outgoing {
        method,
        path,
        body,
        content_type: "application/json",
        bearer: None,
    };
    send(tls, endpoint, outgoing, timeout).await
}

/// One request with what [`request`] does not set.
#[derive(Debug, Clone)]
pub struct Outgoing<'a> {
    /// The method.
    pub method: Method,
    /// Path and query.
    pub path: &'a str,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
    /// The body's media type.
    pub content_type: &'a str,
    /// A bearer token for `Authorization`.
    pub bearer: Option<&'a str>,
}

/// Sends `outgoing` to `endpoint` over a fresh TLS connection made with `tls`.
///
/// # Errors
/// Any [`HttpsError`]; a non-2xx status is not an error.
pub async fn send(
    tls: &Arc<ClientConfig>,
    endpoint: &Endpoint,
    outgoing: Outgoing<'_>,
    timeout: Duration,
) -> Result<Response> {
    let url = format!("{}{}", endpoint.url, outgoing.path);
    match tokio::time::timeout(timeout, exchange(tls, endpoint, outgoing, &url)).await {
        Ok(result) => result,
        Err(_) => Err(HttpsError::Timeout { url, timeout }),
    }
}

async fn exchange(
    tls: &Arc<ClientConfig>,
    endpoint: &Endpoint,
    outgoing: Outgoing<'_>,
    url: &str,
) -> Result<Response> {
    let Outgoing {
        method,
        path,
        body,
        content_type,
        bearer,
    } = outgoing;
    let authority = endpoint.authority();
    let addrs: Vec<_> = tokio::net::lookup_host((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|source| HttpsError::Resolve {
            host: authority.clone(),
            source,
        })?
        .collect();
    let mut last_error =
        std::io::Error::new(std::io::ErrorKind::NotFound, "no address for the host");
    let mut tcp = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                tcp = Some(stream);
                break;
            }
            Err(e) => last_error = e,
        }
    }
    let tcp = tcp.ok_or(HttpsError::Connect {
        host: authority.clone(),
        source: last_error,
    })?;
    let server_name = ServerName::try_from(endpoint.host.clone()).map_err(|e| HttpsError::Url {
        url: url.to_string(),
        reason: format!("invalid server name: {e}"),
    })?;
    let stream = TlsConnector::from(Arc::clone(tls))
        .connect(server_name, tcp)
        .await
        .map_err(|source| HttpsError::Handshake {
            host: authority.clone(),
            source,
        })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| HttpsError::Http {
            url: url.to_string(),
            source,
        })?;
    let driver = tokio::spawn(async move {
        // The connection's own error also surfaces through `send_request` below.
        let _ = connection.await;
    });
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("{}{path}", endpoint.prefix))
        .header(http::header::HOST, authority)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "kube-standin");
    if body.is_some() {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    if let Some(token) = bearer {
        builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = builder
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|source| HttpsError::Request {
            url: url.to_string(),
            source,
        })?;
    let result = async {
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, hyper::Error>(Response { status, body })
    }
    .await;
    driver.abort();
    result.map_err(|source| HttpsError::Http {
        url: url.to_string(),
        source,
    })
}

/// An error with its whole chain of causes, for logs.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("https://127.0.0.1:2379").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("127.0.0.1", 2379, "")
        );
        let e = Endpoint::parse("https://[::1]:6443/prefix/").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("::1", 6443, "/prefix")
        );
        assert_eq!(e.authority(), "[::1]:6443");
        assert_eq!(Endpoint::parse("https://example.test").unwrap().port, 443);
        assert!(Endpoint::parse("http://127.0.0.1:2379").is_err());
    }
}
