//! WireGuard's cross-platform userspace API (the `wg` tool's own protocol to wireguard-go):
//! `get=1` and `set=1` operations of `key=value` lines over the device's unix socket
//! (`/var/run/wireguard/<interface>.sock`), answered with `errno=N`.
//!
//! [`sync`] is the pure part: what to send so that the device holds a [`Config`], touching
//! only what differs (as `wg syncconf`), so that peers that stay keep their sessions.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

use crate::config::{Config, Key};

/// Where wireguard-go puts the control socket of `interface`.
pub fn socket_path(interface: &str) -> PathBuf {
    Path::new("/var/run/wireguard").join(format!("{interface}.sock"))
}

/// One peer as the device reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerState {
    pub endpoint: Option<SocketAddr>,
    pub allowed_ips: Vec<IpNet>,
    pub persistent_keepalive: Option<u16>,
    /// Seconds since the epoch of the last handshake; `None` before the first.
    pub last_handshake: Option<u64>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// The device as `get=1` reports it. Its private key is not kept: only whether it is
/// the wanted one ([`DeviceState::private_key_hex`] compared in [`sync`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DeviceState {
    private_key_hex: Option<String>,
    pub listen_port: u16,
    pub peers: BTreeMap<Key, PeerState>,
}

impl std::fmt::Debug for DeviceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceState")
            .field("listen_port", &self.listen_port)
            .field("peers", &self.peers)
            .finish_non_exhaustive()
    }
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UapiError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: the device refused the operation (errno {errno}): {what}")]
    Refused {
        path: String,
        errno: i32,
        what: &'static str,
    },
    #[error("{path}: unexpected answer: {line:?}")]
    Malformed { path: String, line: String },
}

/// Reads a `get=1` answer (without its final `errno` line checked).
///
/// # Errors
/// A line that is not `key=value`, or a value that does not read.
pub fn parse_state(text: &str) -> Result<DeviceState, String> {
    let mut state = DeviceState::default();
    let mut current: Option<(Key, PeerState)> = None;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("not key=value: {line:?}"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{k}={v}: {e}"));
        match k {
            "private_key" => state.private_key_hex = Some(v.to_string()),
            "listen_port" => {
                state.listen_port = v.parse().map_err(|e| format!("{k}={v}: {e}"))?;
            }
            "public_key" => {
                if let Some((key, peer)) = current.take() {
                    state.peers.insert(key, peer);
                }
                current = Some((Key::from_hex(v)?, PeerState::default()));
            }
            "errno" | "fwmark" | "protocol_version" | "preshared_key" => {}
            _ => {
                let Some((_, peer)) = current.as_mut() else {
                    return Err(format!("{k} before any peer"));
                };
                match k {
                    "endpoint" => {
                        peer.endpoint = Some(v.parse().map_err(|e| format!("{k}={v}: {e}"))?);
                    }
                    "allowed_ip" => {
                        peer.allowed_ips
                            .push(v.parse().map_err(|e| format!("{k}={v}: {e}"))?);
                    }
                    "persistent_keepalive_interval" => {
                        let s = v.parse::<u16>().map_err(|e| format!("{k}={v}: {e}"))?;
                        peer.persistent_keepalive = (s != 0).then_some(s);
                    }
                    "last_handshake_time_sec" => {
                        let s = num(v)?;
                        peer.last_handshake = (s != 0).then_some(s);
                    }
                    "rx_bytes" => peer.rx_bytes = num(v)?,
                    "tx_bytes" => peer.tx_bytes = num(v)?,
                    // Other counters and settings we do not manage.
                    _ => {}
                }
            }
        }
    }
    if let Some((key, peer)) = current {
        state.peers.insert(key, peer);
    }
    Ok(state)
}

/// What makes a device in `current` hold `desired`, or `None` when it does already. A peer
/// that leaves is removed; a new one is added with its allowed IPs and keepalive, and with
/// its last known endpoint from `endpoints` when there is one (a restarted endpoint finds
/// workers behind NAT again at once: turning the keepalive on sends one, which starts a
/// handshake); a peer that stays is touched only if its allowed IPs or keepalive differ,
/// and its endpoint never (the device follows roaming peers itself). The keepalive of a
/// peer whose endpoint is not known yet waits until it is (there is nowhere to send it).
pub fn sync(
    current: &DeviceState,
    desired: &Config,
    endpoints: &BTreeMap<Key, SocketAddr>,
) -> Option<String> {
    let mut body = String::new();
    let want_key = desired.private_key.0.to_hex();
    if current.private_key_hex.as_deref() != Some(want_key.as_str()) {
        let _ = writeln!(body, "private_key={want_key}");
    }
    if current.listen_port != desired.listen_port {
        let _ = writeln!(body, "listen_port={}", desired.listen_port);
    }
    for key in current.peers.keys() {
        if !desired.peers.contains_key(key) {
            let _ = writeln!(body, "public_key={}\nremove=true", key.to_hex());
        }
    }
    for (key, peer) in &desired.peers {
        let mut want_ips = peer.allowed_ips.clone();
        want_ips.sort();
        let endpoint_known = endpoints.contains_key(key)
            || current.peers.get(key).is_some_and(|p| p.endpoint.is_some());
        let mut keepalive = peer.persistent_keepalive.filter(|_| endpoint_known);
        match current.peers.get(key) {
            Some(have) => {
                let mut have_ips = have.allowed_ips.clone();
                have_ips.sort();
                if !endpoint_known {
                    keepalive = have.persistent_keepalive;
                }
                if have_ips == want_ips && have.persistent_keepalive == keepalive {
                    continue;
                }
                let _ = writeln!(body, "public_key={}", key.to_hex());
            }
            None => {
                let _ = writeln!(body, "public_key={}", key.to_hex());
                if let Some(endpoint) = endpoints.get(key) {
                    let _ = writeln!(body, "endpoint={endpoint}");
                }
            }
        }
        let _ = writeln!(body, "replace_allowed_ips=true");
        for ip in &want_ips {
            let _ = writeln!(body, "allowed_ip={ip}");
        }
        let _ = writeln!(
            body,
            "persistent_keepalive_interval={}",
            keepalive.unwrap_or(0)
        );
    }
    (!body.is_empty()).then_some(body)
}

/// A device's control socket.
#[derive(Debug, Clone)]
pub struct Device {
    pub path: PathBuf,
}

impl Device {
    pub fn new(interface: &str) -> Device {
        Device {
            path: socket_path(interface),
        }
    }

    fn io(&self, source: std::io::Error) -> UapiError {
        UapiError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    async fn exchange(&self, request: &str) -> Result<String, UapiError> {
        let mut s = UnixStream::connect(&self.path)
            .await
            .map_err(|e| self.io(e))?;
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| self.io(e))?;
        // The answer ends with an empty line after `errno=N`.
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.map_err(|e| self.io(e))?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
            if answer.ends_with(b"\n\n") {
                break;
            }
        }
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    fn errno(&self, answer: &str, what: &'static str) -> Result<(), UapiError> {
        let line = answer
            .lines()
            .rev()
            .find(|l| !l.is_empty())
            .unwrap_or_default();
        match line
            .strip_prefix("errno=")
            .and_then(|n| n.parse::<i32>().ok())
        {
            Some(0) => Ok(()),
            Some(errno) => Err(UapiError::Refused {
                path: self.path.display().to_string(),
                errno,
                what,
            }),
            None => Err(UapiError::Malformed {
                path: self.path.display().to_string(),
                line: line.to_string(),
            }),
        }
    }

    /// The device's state.
    ///
    /// # Errors
    /// The socket cannot be used, or the answer does not read.
    pub async fn get(&self) -> Result<DeviceState, UapiError> {
        let answer = self.exchange("get=1\n\n").await?;
        self.errno(&answer, "get")?;
        parse_state(&answer).map_err(|line| UapiError::Malformed {
            path: self.path.display().to_string(),
            line,
        })
    }

    /// Applies a `set=1` body (from [`sync`]).
    ///
    /// # Errors
    /// The socket cannot be used, or the device refused (a port in use: errno 98 or 48).
    pub async fn set(&self, body: &str) -> Result<(), UapiError> {
        let answer = self.exchange(&format!("set=1\n{body}\n")).await?;
        self.errno(&answer, "set")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Peer, PrivateKey};

    fn key(n: u8) -> Key {
        Key([n; 32])
    }

    fn desired(peers: &[(u8, &str)]) -> Config {
        Config {
            private_key: PrivateKey(key(1)),
            listen_port: 30001,
            peers: peers
                .iter()
                .map(|(n, ip)| {
                    (
                        key(*n),
                        Peer {
                            name: None,
                            allowed_ips: vec![ip.parse().unwrap()],
                            persistent_keepalive: Some(25),
                        },
                    )
                })
                .collect(),
        }
    }

    fn state_text(peers: &[(u8, &str, Option<&str>)]) -> String {
        let mut t = format!("private_key={}\nlisten_port=30001\n", key(1).to_hex());
        for (n, ip, endpoint) in peers {
            t.push_str(&format!("public_key={}\n", key(*n).to_hex()));
            if let Some(e) = endpoint {
                t.push_str(&format!("endpoint={e}\n"));
            }
            t.push_str(&format!(
                "last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=1\nrx_bytes=10\ntx_bytes=20\npersistent_keepalive_interval=25\nallowed_ip={ip}\nprotocol_version=1\n"
            ));
        }
        t.push_str("errno=0\n\n");
        t
    }

    #[test]
    fn the_state_reads_as_wireguard_go_reports_it() {
        let s = parse_state(&state_text(&[
            (2, "10.0.0.2/32", Some("192.0.2.7:51000")),
            (3, "10.0.0.3/32", None),
        ]))
        .unwrap();
        assert_eq!(s.listen_port, 30001);
        let p = &s.peers[&key(2)];
        assert_eq!(p.endpoint, Some("192.0.2.7:51000".parse().unwrap()));
        assert_eq!(p.allowed_ips, vec!["10.0.0.2/32".parse::<IpNet>().unwrap()]);
        assert_eq!(p.last_handshake, Some(1_700_000_000));
        assert_eq!((p.rx_bytes, p.tx_bytes), (10, 20));
        assert_eq!(s.peers[&key(3)].endpoint, None);
        assert!(parse_state("endpoint=1.2.3.4:5\n").is_err());
        assert!(parse_state("listen_port=x\n").is_err());
    }

    #[test]
    fn a_converged_device_needs_nothing() {
        let current = parse_state(&state_text(&[(2, "10.0.0.2/32", None)])).unwrap();
        assert_eq!(
            sync(&current, &desired(&[(2, "10.0.0.2/32")]), &BTreeMap::new()),
            None
        );
    }

    #[test]
    fn only_what_differs_is_sent_and_staying_peers_are_untouched() {
        let current = parse_state(&state_text(&[
            (2, "10.0.0.2/32", Some("192.0.2.7:51000")),
            (3, "10.0.0.3/32", None),
        ]))
        .unwrap();
        // 3 leaves, 4 arrives with a remembered endpoint, 2 stays as it is.
        let endpoints = BTreeMap::from([
            (key(4), "198.51.100.9:40000".parse().unwrap()),
            (key(2), "203.0.113.1:1".parse().unwrap()),
        ]);
        let body = sync(
            &current,
            &desired(&[(2, "10.0.0.2/32"), (4, "10.0.0.3/32")]),
            &endpoints,
        )
        .unwrap();
        assert_eq!(
            body,
            format!(
                "public_key={}\nremove=true\npublic_key={}\nendpoint=198.51.100.9:40000\nreplace_allowed_ips=true\nallowed_ip=10.0.0.3/32\npersistent_keepalive_interval=25\n",
                key(3).to_hex(),
                key(4).to_hex()
            )
        );
        assert!(!body.contains(&key(2).to_hex()), "{body}");
    }

    #[test]
    fn the_keepalive_waits_for_an_endpoint() {
        // A new peer nobody has heard from: no keepalive yet.
        let body = sync(
            &DeviceState::default(),
            &desired(&[(2, "10.0.0.2/32")]),
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(
            body.ends_with("persistent_keepalive_interval=0\n"),
            "{body}"
        );
        // It connected: its keepalive goes on.
        let mut current = parse_state(&state_text(&[(2, "10.0.0.2/32", None)])).unwrap();
        current.peers.get_mut(&key(2)).unwrap().persistent_keepalive = None;
        assert_eq!(
            sync(&current, &desired(&[(2, "10.0.0.2/32")]), &BTreeMap::new()),
            None
        );
        current.peers.get_mut(&key(2)).unwrap().endpoint = Some("192.0.2.7:1".parse().unwrap());
        let body = sync(&current, &desired(&[(2, "10.0.0.2/32")]), &BTreeMap::new()).unwrap();
        assert!(
            body.ends_with("persistent_keepalive_interval=25\n"),
            "{body}"
        );
    }

    #[test]
    fn a_new_device_gets_its_key_port_and_peers() {
        let body = sync(
            &DeviceState::default(),
            &desired(&[(2, "10.0.0.2/32")]),
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(
            body.starts_with(&format!(
                "private_key={}\nlisten_port=30001\npublic_key=",
                key(1).to_hex()
            )),
            "{body}"
        );
        // A changed address of a staying peer replaces its allowed IPs.
        let current = parse_state(&state_text(&[(2, "10.0.0.9/32", None)])).unwrap();
        let body = sync(&current, &desired(&[(2, "10.0.0.2/32")]), &BTreeMap::new()).unwrap();
        assert!(body.contains("replace_allowed_ips=true\nallowed_ip=10.0.0.2/32\n"));
    }

    #[test]
    fn the_state_never_shows_the_private_key() {
        let s = parse_state(&state_text(&[])).unwrap();
        assert!(!format!("{s:?}").contains(&key(1).to_hex()));
    }
}
