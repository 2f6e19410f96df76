//! The one haproxy configuration we render, for every load balancer we run: a cluster's
//! ingress in front of its API servers, and a SIPCluster's control plane and worker load
//! balancers. One set of defaults for all of them:
//!
//! - TCP mode; a connection that carries data may stay idle an hour (a watch: the API server
//!   ends watches sooner, `--min-request-timeout`, 30 to 60 minutes);
//! - `maxconn` from what haproxy's memory limit holds ([`maxconn`]);
//! - one address holds at most [`PER_SOURCE`] connections per frontend (workers behind one
//!   NAT share an address);
//! - in front of API servers, a connection that has not sent its TLS ClientHello within
//!   [`HELLO_TIMEOUT`] is closed: nobody holds the balancer without speaking TLS;
//! - `leastconn`; a refused connection is retried, each retry on another backend;
//! - a backend falls after 3 failed checks 5 s apart, and one down or in transition is checked
//!   every second or half second, so it rises within ~1.5 s of being ready.
//!
//! ```text
//! Frontend {name, port, tls_only, Check, servers} ...  ──► config(frontends) ──► haproxy.cfg
//! ```

use std::fmt::Write as _;

use oi_api::versions;

/// How long a connection to a TLS frontend may take to send its TLS ClientHello.
pub const HELLO_TIMEOUT: &str = "5s";
/// Connections one address may hold on one frontend at once: workers behind one NAT share
/// an address (a kubelet and kube-proxy hold a few each).
pub const PER_SOURCE: u32 = 1024;

/// The `maxconn` of every haproxy we run: what its memory limit holds (the versions table's,
/// `oi_api::versions::container_resources`), at about 48 KiB a connection (two 16 KiB
/// buffers and state), three quarters of it; at least 1,024.
pub fn maxconn() -> u64 {
    let limit = versions::container_resources("haproxy").map_or(0, |r| r.memory_bytes);
    (limit * 3 / 4 / (48 * 1024)).max(1024)
}

/// How a frontend's backends are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check<'a> {
    /// An API server: `GET /readyz` over TLS, answered 200. `ca_file`: the server's
    /// certificate verified against it; `None` when the CA is not ours to know (a
    /// SIPCluster's tenant: clients verify it end to end through the TCP stream, as upstream
    /// SIP does).
    ApiServer { ca_file: Option<&'a str> },
    /// A TCP connection opens.
    Connect,
}

/// One backend server.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Server {
    pub name: String,
    /// An address as haproxy reads it (IPv6 unbracketed is fine, the port follows the last
    /// colon).
    pub host: String,
    pub port: u16,
    /// Taken out (its API server about to restart): no new connection goes to it.
    pub disabled: bool,
}

impl Server {
    pub fn new(name: impl Into<String>, host: impl Into<String>, port: u16) -> Server {
        Server {
            name: name.into(),
            host: host.into(),
            port,
            disabled: false,
        }
    }
}

/// One listening port and the servers behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontend<'a> {
    /// The frontend's name, and its backend's (haproxy keeps the two apart: they may be
    /// the same).
    pub name: &'a str,
    pub backend: &'a str,
    pub port: u16,
    /// Only TLS clients: the ClientHello must come within [`HELLO_TIMEOUT`].
    pub tls_only: bool,
    pub check: Check<'a>,
    /// Rendered sorted by name, whatever their order here.
    pub servers: Vec<Server>,
}

/// The configuration of one haproxy serving `frontends`, in their order.
pub fn config(frontends: &[Frontend<'_>]) -> String {
    let maxconn = maxconn();
    let mut out = format!("global\n  maxconn {maxconn}\n\n");
    out.push_str(concat!(
        "defaults\n",
        "  mode tcp\n",
        "  timeout connect 5s\n",
        "  timeout client 1h\n",
        "  timeout server 1h\n",
        "  timeout check 5s\n",
        "  retries 3\n",
        "  option redispatch 1\n",
    ));
    for f in frontends {
        frontend(&mut out, f, maxconn);
    }
    out
}

fn frontend(out: &mut String, f: &Frontend<'_>, maxconn: u64) {
    let _ = write!(
        out,
        "\nfrontend {name}\n  bind :::{port} v4v6\n  maxconn {maxconn}\n\
         \x20 stick-table type ipv6 size 100k expire 60s store conn_cur\n\
         \x20 tcp-request connection track-sc0 src\n\
         \x20 tcp-request connection reject if {{ sc0_conn_cur gt {PER_SOURCE} }}\n",
        name = f.name,
        port = f.port,
    );
    if f.tls_only {
        let _ = write!(
            out,
            "  tcp-request inspect-delay {HELLO_TIMEOUT}\n\
             \x20 tcp-request content accept if {{ req.ssl_hello_type 1 }}\n\
             \x20 tcp-request content reject\n"
        );
    }
    let _ = write!(
        out,
        "  default_backend {backend}\n\nbackend {backend}\n  balance leastconn\n",
        backend = f.backend
    );
    let timing = "inter 5s fastinter 500ms downinter 1s fall 3 rise 2";
    match f.check {
        Check::ApiServer { ca_file } => {
            out.push_str(concat!(
                "  option httpchk\n",
                "  http-check send meth GET uri /readyz\n",
                "  http-check expect status 200\n",
            ));
            let verify = match ca_file {
                Some(ca) => format!("verify required ca-file {ca}"),
                None => "verify none".to_string(),
            };
            let _ = writeln!(out, "  default-server check check-ssl {verify} {timing}");
        }
        Check::Connect => {
            let _ = writeln!(out, "  default-server check {timing}");
        }
    }
    let mut servers: Vec<&Server> = f.servers.iter().collect();
    servers.sort();
    for s in servers {
        let off = if s.disabled { " disabled" } else { "" };
        let _ = writeln!(out, "  server {} {}:{}{off}", s.name, s.host, s.port);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn every_frontend_has_the_same_defaults_and_limits() {
        let cfg = config(&[
            Frontend {
                name: "apiserver",
                backend: "apiservers",
                port: 30001,
                tls_only: true,
                check: Check::ApiServer { ca_file: None },
                servers: vec![Server::new("cp", "10.0.0.1", 6443)],
            },
            Frontend {
                name: "port-30002",
                backend: "port-30002",
                port: 30002,
                tls_only: false,
                check: Check::Connect,
                servers: vec![Server::new("w", "10.0.1.1", 30002)],
            },
        ]);
        // One global and defaults section, every frontend bounded alike.
        assert_eq!(cfg.matches("\ndefaults\n").count(), 1, "{cfg}");
        assert_eq!(cfg.matches("timeout client 1h").count(), 1, "{cfg}");
        assert_eq!(cfg.matches("balance leastconn").count(), 2, "{cfg}");
        assert_eq!(cfg.matches("fall 3 rise 2").count(), 2, "{cfg}");
        assert_eq!(
            cfg.matches(&format!("sc0_conn_cur gt {PER_SOURCE}"))
                .count(),
            2,
            "{cfg}"
        );
        assert_eq!(cfg.matches(&format!("maxconn {}", maxconn())).count(), 3);
        // The ClientHello rule only where clients speak TLS.
        assert_eq!(cfg.matches("req.ssl_hello_type 1").count(), 1, "{cfg}");
        let (api, worker) = cfg.split_once("frontend port-30002").unwrap();
        assert!(api.contains("req.ssl_hello_type 1"), "{cfg}");
        assert!(api.contains("check check-ssl verify none"), "{cfg}");
        assert!(!worker.contains("httpchk"), "{cfg}");
        assert!(worker.contains("default-server check inter 5s"), "{cfg}");
        assert!(worker.contains("  server w 10.0.1.1:30002\n"), "{cfg}");
    }

    #[test]
    fn maxconn_follows_the_memory_limit() {
        let limit = versions::container_resources("haproxy")
            .expect("haproxy has resources")
            .memory_bytes;
        let m = maxconn();
        assert!(m >= 1024);
        assert!(
            m * 48 * 1024 <= limit,
            "{m} connections of 48 KiB exceed {limit}"
        );
    }
}
