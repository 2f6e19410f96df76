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
//! A cluster's ingress also opens haproxy's runtime API ([`RuntimeApi`]) on the hypervisor's
//! loopback: the engine takes an API server out with it while that server restarts, and
//! waits on haproxy's own count of the connections it still holds, without a reload.
//!
//! ```text
//! Frontend {name, port, tls_only, Check, servers} ...  ──► config(frontends, api) ──► haproxy.cfg
//! RuntimeApi::command("set server ...; show stat")      ──► run in the haproxy container
//! parse_stat / parse_pid                                ◄── its answer
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
}

impl Server {
    pub fn new(name: impl Into<String>, host: impl Into<String>, port: u16) -> Server {
        Server {
            name: name.into(),
            host: host.into(),
            port,
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

/// The configuration of one haproxy serving `frontends`, in their order; with `runtime_api`,
/// its runtime API on `127.0.0.1:<port>` (see [`RuntimeApi`]).
pub fn config(frontends: &[Frontend<'_>], runtime_api: Option<u16>) -> String {
    let maxconn = maxconn();
    let mut out = format!("global\n  maxconn {maxconn}\n");
    if let Some(port) = runtime_api {
        let _ = writeln!(out, "  stats socket ipv4@127.0.0.1:{port} level admin");
    }
    out.push('\n');
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
        let _ = writeln!(out, "  server {} {}:{}", s.name, s.host, s.port);
    }
}

/// haproxy's runtime API (its stats socket, admin level) on the hypervisor's loopback: the
/// ingress's pods share the host's network, so only processes on the hypervisor reach it,
/// and the engine asks it through the haproxy container ([`RuntimeApi::command`]).
///
/// haproxy forgets what it was told there when it reloads: a server taken out is back in
/// with the next worker. The engine puts it back itself once its API server is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeApi {
    /// The pod and container haproxy runs in.
    pub pod: String,
    pub container: String,
    /// The loopback port it listens on.
    pub port: u16,
    /// The backend whose servers are the API servers (each named after its component).
    pub backend: String,
}

impl RuntimeApi {
    /// The command that sends `commands` (haproxy's, `;`-separated) to the runtime API and
    /// prints the answer: `nc` in the haproxy image (busybox's in ours).
    pub fn command(&self, commands: &str) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            format!("printf '%s\\n' \"$0\" | nc 127.0.0.1 {}", self.port),
            commands.into(),
        ]
    }
}

/// One server's line of `show stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStat {
    pub backend: String,
    pub server: String,
    /// Connections it holds (`scur`).
    pub sessions: u64,
    /// `UP`, `DOWN`, `DRAIN`, `MAINT`, `UP 1/2`, ... (`status`).
    pub status: String,
}

impl ServerStat {
    /// Whether an administrator (a `set server ... state`) holds it out: drained or in
    /// maintenance, whatever its health checks say.
    pub fn held_out(&self) -> bool {
        self.status.contains("DRAIN") || self.status.contains("MAINT")
    }
}

/// The servers' lines of a `show stat` answer (frontend and backend totals left out), its
/// columns found by the header's names. Any line before the header is a command's refusal
/// ("No such server."), returned as the error.
///
/// # Errors
/// The refusal, or what is missing from the answer.
pub fn parse_stat(answer: &str) -> Result<Vec<ServerStat>, String> {
    let mut lines = answer.lines();
    let header = loop {
        match lines.next() {
            Some(l) if l.starts_with("# ") => break l.trim_start_matches("# "),
            Some(l) if l.trim().is_empty() => {}
            Some(l) => return Err(l.trim().to_string()),
            None => return Err("haproxy's runtime API gave no statistics".to_string()),
        }
    };
    let columns: Vec<&str> = header.split(',').collect();
    let at = |name: &str| {
        columns
            .iter()
            .position(|c| *c == name)
            .ok_or_else(|| format!("haproxy's statistics have no column {name}"))
    };
    let (px, sv, scur, status) = (at("pxname")?, at("svname")?, at("scur")?, at("status")?);
    let mut servers = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').collect();
        let field = |i: usize| fields.get(i).copied().unwrap_or_default();
        if matches!(field(sv), "FRONTEND" | "BACKEND") {
            continue;
        }
        servers.push(ServerStat {
            backend: field(px).to_string(),
            server: field(sv).to_string(),
            sessions: field(scur).parse().unwrap_or(0),
            status: field(status).to_string(),
        });
    }
    Ok(servers)
}

/// The process id in a `show info` answer: which worker answered (a reload starts another).
pub fn parse_pid(answer: &str) -> Option<u32> {
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Pid: "))
        .and_then(|p| p.trim().parse().ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn every_frontend_has_the_same_defaults_and_limits() {
        let cfg = config(
            &[
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
            ],
            None,
        );
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
        // No runtime API unless asked for.
        assert!(!cfg.contains("stats socket"), "{cfg}");
    }

    #[test]
    fn the_runtime_api_listens_on_loopback_only() {
        let cfg = config(&[], Some(30005));
        assert!(
            cfg.starts_with(&format!(
                "global\n  maxconn {}\n  stats socket ipv4@127.0.0.1:30005 level admin\n\n",
                maxconn()
            )),
            "{cfg}"
        );
        let api = RuntimeApi {
            pod: "p".into(),
            container: "haproxy".into(),
            port: 30005,
            backend: "apiservers".into(),
        };
        // The commands travel as the shell's $0, never spliced into the script.
        assert_eq!(
            api.command("set server apiservers/a state drain; show stat"),
            [
                "sh",
                "-c",
                "printf '%s\\n' \"$0\" | nc 127.0.0.1 30005",
                "set server apiservers/a state drain; show stat"
            ]
        );
    }

    #[test]
    fn stat_answers_are_read_by_their_header() {
        // An answer of haproxy 2.6.12 (columns cut after status), after a set command.
        let answer = "\n# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status\n\
             apiserver,FRONTEND,,,2,3,3276,9,0,0,0,0,0,,,,,OPEN\n\
             apiservers,a,0,0,0,1,,4,0,0,,0,,0,0,0,0,DRAIN\n\
             apiservers,b,0,0,2,2,,5,0,0,,0,,0,0,0,0,UP\n\
             apiservers,BACKEND,0,0,2,3,328,9,0,0,0,0,,0,0,0,0,UP\n\n";
        assert_eq!(
            parse_stat(answer).unwrap(),
            [
                ServerStat {
                    backend: "apiservers".into(),
                    server: "a".into(),
                    sessions: 0,
                    status: "DRAIN".into()
                },
                ServerStat {
                    backend: "apiservers".into(),
                    server: "b".into(),
                    sessions: 2,
                    status: "UP".into()
                },
            ]
        );
        // A refused command comes back as the error.
        assert_eq!(
            parse_stat("No such server.\n\n# pxname,svname,scur,status\n"),
            Err("No such server.".to_string())
        );
        assert!(parse_stat("").unwrap_err().contains("no statistics"));
        assert!(
            parse_stat("# pxname,svname,status\n")
                .unwrap_err()
                .contains("no column scur")
        );
        assert_eq!(
            parse_pid("Name: HAProxy\nPid: 12810\nUptime: 0d\n"),
            Some(12810)
        );
        assert_eq!(parse_pid("No such command.\n"), None);
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
