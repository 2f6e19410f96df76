//! Where a hypervisor's CRI runtime answers, and how to reach it.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use oi_api::versions::INFRA;

/// A hypervisor's CRI endpoint.
#[derive(Clone, PartialEq, Eq)]
pub enum CriEndpoint {
    /// A local Unix socket, e.g. `/run/containerd/containerd.sock`.
    Unix(PathBuf),
    /// A TCP endpoint behind mutual TLS. The server is verified against `ca_pem` only (the
    /// Hypervisor's `caCertificate`); `cert_pem` and `key_pem` are the client certificate and
    /// key we present. `uri` is `https://host:port`, `tcp://host:port` or `host:port`; the TLS
    /// server name is its host (a DNS name or an IP address).
    Tls {
        uri: String,
        ca_pem: String,
        cert_pem: String,
        key_pem: String,
    },
}

impl fmt::Display for CriEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CriEndpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            CriEndpoint::Tls { uri, .. } => f.write_str(uri),
        }
    }
}

// Hand-written so that the private key never reaches a log through `{:?}`.
impl fmt::Debug for CriEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CriEndpoint::Unix(path) => f.debug_tuple("Unix").field(path).finish(),
            CriEndpoint::Tls { uri, .. } => f
                .debug_struct("Tls")
                .field("uri", uri)
                .field("ca_pem", &"<pem>")
                .field("cert_pem", &"<pem>")
                .field("key_pem", &"<redacted>")
                .finish(),
        }
    }
}

/// Host and port of a TCP endpoint, parsed from its URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpAddress {
    /// DNS name or IP address, without IPv6 brackets.
    pub host: String,
    pub port: u16,
}

impl TcpAddress {
    /// The host as an IP address, when it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// Parses `https://host:port`, `tcp://host:port` or `host:port` (IPv6 in brackets).
///
/// # Errors
/// A reason string when the URI has another scheme, a path, no host or no port.
pub fn parse_tcp_uri(uri: &str) -> Result<TcpAddress, String> {
    let rest = match uri.split_once("://") {
        Some(("https" | "tcp" | "grpcs", rest)) => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "unsupported scheme {scheme:?} (expected https, tcp or grpcs)"
            ));
        }
        None => uri,
    };
    let authority = rest.trim_end_matches('/');
    if authority.contains('/') || authority.contains('@') {
        return Err("expected only host and port".to_string());
    }
    let (host, port) = if let Some(after) = authority.strip_prefix('[') {
        let (host, port) = after
            .split_once("]:")
            .ok_or_else(|| "IPv6 address needs the form [addr]:port".to_string())?;
        (host, port)
    } else {
        authority
            .rsplit_once(':')
            .ok_or_else(|| "missing port".to_string())?
    };
    if host.is_empty() {
        return Err("missing host".to_string());
    }
    let port: u16 = port.parse().map_err(|_| format!("invalid port {port:?}"))?;
    if port == 0 {
        return Err("port 0".to_string());
    }
    Ok(TcpAddress {
        host: host.to_string(),
        port,
    })
}

/// Timeouts and images the client uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Bound on establishing the transport (and the first `Version` call that proves it).
    pub connect_timeout: Duration,
    /// Bound on each CRI call except image pulls.
    pub call_timeout: Duration,
    /// Bound on one image pull.
    pub pull_timeout: Duration,
    /// Image of the file writer and log reader: a POSIX shell with `base64`, `tail`, `rm`.
    pub toolbox_image: String,
    /// Host directory under which pod logs are written (`<log_root>/<namespace>_<name>`).
    pub log_root: String,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(30),
            pull_timeout: Duration::from_secs(300),
            toolbox_image: INFRA.toolbox.reference(None),
            log_root: oi_api::runtime::paths::POD_LOG_DIR.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_uri_forms() {
        let a = |host: &str, port| TcpAddress {
            host: host.to_string(),
            port,
        };
        assert_eq!(
            parse_tcp_uri("https://10.0.0.1:2379"),
            Ok(a("10.0.0.1", 2379))
        );
        assert_eq!(
            parse_tcp_uri("tcp://hv1.example:443/"),
            Ok(a("hv1.example", 443))
        );
        assert_eq!(parse_tcp_uri("[::1]:8080"), Ok(a("::1", 8080)));
        assert_eq!(
            parse_tcp_uri("https://[fd00::2]:1").map(|t| t.ip()),
            Ok(Some("fd00::2".parse().unwrap()))
        );
        assert!(parse_tcp_uri("http://a:1").unwrap_err().contains("scheme"));
        assert!(parse_tcp_uri("https://a").unwrap_err().contains("port"));
        assert!(parse_tcp_uri("https://a:1/x").is_err());
        assert!(parse_tcp_uri("https://:1").is_err());
        assert!(parse_tcp_uri("a:0").is_err());
    }

    #[test]
    fn debug_hides_key() {
        let e = CriEndpoint::Tls {
            uri: "https://a:1".into(),
            ca_pem: "CA".into(),
            cert_pem: "CERT".into(),
            key_pem: "-----BEGIN PRIVATE KEY-----secret".into(),
        };
        let shown = format!("{e:?} {e}");
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(e.to_string(), "https://a:1");
        assert_eq!(
            CriEndpoint::Unix("/run/c.sock".into()).to_string(),
            "unix:///run/c.sock"
        );
    }
}
