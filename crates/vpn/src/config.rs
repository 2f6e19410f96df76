//! The endpoint's configuration file: WireGuard's own format (`wg(8)`, the part `wg setconf`
//! reads), as oneinfra's planner renders it into the ingress's files:
//!
//! ```text
//! [Interface]
//! PrivateKey = <base64>
//! ListenPort = 30001
//!
//! [Peer]
//! # worker-w1
//! PublicKey = <base64>
//! AllowedIPs = 10.0.0.2/32
//! PersistentKeepalive = 25
//! ```
//!
//! Keys are compared as the 32 bytes they encode. A line this reader does not know is an
//! error naming it: a file that says more than is applied must not be taken as applied.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use ipnet::IpNet;

/// A WireGuard key (Curve25519, 32 bytes). `Debug` shows the public form only for public
/// keys; private keys are held in [`PrivateKey`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// A key from its base64 form (44 characters, as `wg genkey` prints it).
    ///
    /// # Errors
    /// Not base64, or not 32 bytes.
    pub fn from_base64(text: &str) -> Result<Key, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| format!("not base64: {e}"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("{} bytes, a key has 32", b.len()))?;
        Ok(Key(bytes))
    }

    /// A key from its hex form (64 characters, as the UAPI carries it).
    ///
    /// # Errors
    /// Not hex, or not 32 bytes.
    pub fn from_hex(text: &str) -> Result<Key, String> {
        let bytes = hex::decode(text.trim()).map_err(|e| format!("not hex: {e}"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("{} bytes, a key has 32", b.len()))?;
        Ok(Key(bytes))
    }

    pub fn to_base64(self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    pub fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.to_base64())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

/// A private key: never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey(pub Key);

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey([redacted])")
    }
}

/// One peer as the file declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The comment line right above its section (the peer's name), if any.
    pub name: Option<String>,
    pub allowed_ips: Vec<IpNet>,
    /// Seconds; `None` when off.
    pub persistent_keepalive: Option<u16>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub private_key: PrivateKey,
    pub listen_port: u16,
    /// By public key.
    pub peers: BTreeMap<Key, Peer>,
}

/// Why a file does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

enum Section {
    None,
    Interface,
    Peer(Option<Key>, Peer),
}

/// Reads a configuration file's text.
///
/// # Errors
/// The first line that does not read, or a missing `PrivateKey`/`ListenPort`/`PublicKey`, or
/// a public key declared twice.
pub fn parse(text: &str) -> Result<Config, ParseError> {
    let mut private_key = None;
    let mut listen_port = None;
    let mut peers = BTreeMap::new();
    let mut section = Section::None;
    let mut comment: Option<String> = None;
    let mut section_line = 0;
    let close =
        |section: Section, at: usize, peers: &mut BTreeMap<Key, Peer>| -> Result<(), ParseError> {
            if let Section::Peer(key, peer) = section {
                let key = key.ok_or_else(|| ParseError {
                    line: at,
                    message: "[Peer] without PublicKey".into(),
                })?;
                if peers.insert(key, peer).is_some() {
                    return Err(ParseError {
                        line: at,
                        message: format!("peer {key} declared twice"),
                    });
                }
            }
            Ok(())
        };
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            // A peer's name: the comment heading its section, or the first one inside it.
            match &mut section {
                Section::Peer(_, peer) if peer.name.is_none() => {
                    peer.name = Some(c.trim().to_string());
                }
                _ => comment = Some(c.trim().to_string()),
            }
            continue;
        }
        let err = |message: String| ParseError { line: n, message };
        if line.starts_with('[') {
            close(
                std::mem::replace(&mut section, Section::None),
                section_line,
                &mut peers,
            )?;
            section_line = n;
            section = match line.to_ascii_lowercase().as_str() {
                "[interface]" => Section::Interface,
                "[peer]" => Section::Peer(
                    None,
                    Peer {
                        name: comment.take(),
                        allowed_ips: Vec::new(),
                        persistent_keepalive: None,
                    },
                ),
                _ => return Err(err(format!("unknown section {line}"))),
            };
            comment = None;
            continue;
        }
        comment = None;
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| err(format!("not `Key = value`: {line:?}")))?;
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        match (&mut section, k.as_str()) {
            (Section::Interface, "privatekey") => {
                private_key = Some(PrivateKey(
                    Key::from_base64(v).map_err(|e| err(format!("PrivateKey: {e}")))?,
                ));
            }
            (Section::Interface, "listenport") => {
                listen_port = Some(
                    v.parse::<u16>()
                        .map_err(|e| err(format!("ListenPort {v:?}: {e}")))?,
                );
            }
            (Section::Peer(key, _), "publickey") => {
                *key = Some(Key::from_base64(v).map_err(|e| err(format!("PublicKey: {e}")))?);
            }
            (Section::Peer(_, peer), "allowedips") => {
                for ip in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    peer.allowed_ips.push(
                        ip.parse::<IpNet>()
                            .map_err(|e| err(format!("AllowedIPs {ip:?}: {e}")))?
                            .trunc(),
                    );
                }
            }
            (Section::Peer(_, peer), "persistentkeepalive") => {
                peer.persistent_keepalive = match v {
                    "off" | "0" => None,
                    v => Some(
                        v.parse::<u16>()
                            .map_err(|e| err(format!("PersistentKeepalive {v:?}: {e}")))?,
                    ),
                };
            }
            (Section::None, _) => {
                return Err(err(format!("{k} outside [Interface] or [Peer]")));
            }
            _ => return Err(err(format!("unknown or misplaced setting {k:?}"))),
        }
    }
    close(section, section_line, &mut peers)?;
    let missing = |what: &str| ParseError {
        line: 0,
        message: format!("[Interface] has no {what}"),
    };
    Ok(Config {
        private_key: private_key.ok_or_else(|| missing("PrivateKey"))?,
        listen_port: listen_port.ok_or_else(|| missing("ListenPort"))?,
        peers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "YAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    const B: &str = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";

    #[test]
    fn a_rendered_file_reads_back() {
        let text = format!(
            "# the cluster VPN\n[Interface]\nPrivateKey = {A}\nListenPort = 30001\n\n[Peer]\n# worker-w1\nPublicKey = {B}\nAllowedIPs = 10.0.0.2/32, fd00::2/128\nPersistentKeepalive = 25\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.listen_port, 30001);
        assert_eq!(c.private_key.0, Key::from_base64(A).unwrap());
        let peer = &c.peers[&Key::from_base64(B).unwrap()];
        assert_eq!(peer.name.as_deref(), Some("worker-w1"));
        assert_eq!(
            peer.allowed_ips,
            vec![
                "10.0.0.2/32".parse::<IpNet>().unwrap(),
                "fd00::2/128".parse().unwrap()
            ]
        );
        assert_eq!(peer.persistent_keepalive, Some(25));
    }

    #[test]
    fn what_does_not_read_is_named_by_line() {
        let bad = |text: &str| parse(text).unwrap_err();
        assert_eq!(
            bad(&format!("[Interface]\nPrivateKey = {A}\nListenPort = x\n")).line,
            3
        );
        let e = bad(&format!(
            "[Interface]\nPrivateKey = {A}\nListenPort = 1\n[Peer]\nEndpoint = 1.2.3.4:5\n"
        ));
        assert_eq!(e.line, 5);
        assert!(e.message.contains("endpoint"), "{e}");
        assert!(
            bad(&format!(
                "[Interface]\nPrivateKey = {A}\nListenPort = 1\n[Peer]\nAllowedIPs = 10.0.0.2/32\n"
            ))
            .message
            .contains("without PublicKey")
        );
        assert!(
            bad(&format!(
                "[Interface]\nPrivateKey = {A}\nListenPort = 1\n[Peer]\nPublicKey = {B}\n[Peer]\nPublicKey = {B}\n"
            ))
            .message
            .contains("twice")
        );
        assert!(
            bad("[Interface]\nListenPort = 1\n")
                .message
                .contains("PrivateKey")
        );
        assert!(
            bad(&format!("[Interface]\nPrivateKey = {A}\n"))
                .message
                .contains("ListenPort")
        );
        assert!(bad("PrivateKey = x\n").message.contains("outside"));
        assert!(
            bad(&format!(
                "[Interface]\nPrivateKey = {}\nListenPort = 1\n",
                &A[..20]
            ))
            .message
            .contains("PrivateKey")
        );
    }

    #[test]
    fn keys_convert_between_base64_and_hex() {
        let k = Key::from_base64(A).unwrap();
        assert_eq!(Key::from_hex(&k.to_hex()).unwrap(), k);
        assert_eq!(k.to_base64(), A);
        assert!(Key::from_hex("abcd").is_err());
        assert_eq!(
            format!("{:?}", PrivateKey(k)),
            "PrivateKey([redacted])",
            "a private key is never shown"
        );
    }
}
