//! Public-key checks: service-account keys parse and the signing key's public half is among
//! the verification keys; a signing certificate matches its key.
//!
//! A public key is compared as the contents of its `subjectPublicKey` BIT STRING: the
//! PKCS#1 `RSAPublicKey` for RSA, the uncompressed point for ECDSA. That is what ring reports
//! for a key pair, so no re-encoding is needed.

use std::path::Path;

use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING};
use ring::signature::{EcdsaKeyPair, KeyPair};
use x509_parser::prelude::FromDer;

/// An error reading or matching keys. Key material never appears in a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A file without any PEM block the check understands.
    #[error("{path} holds no usable PEM block (found: {found:?})")]
    NoKey {
        /// The file.
        path: String,
        /// The PEM labels that were found.
        found: Vec<String>,
    },
    /// A PEM block whose contents do not parse.
    #[error("{path}: invalid {label}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// The PEM label.
        label: String,
        /// Why.
        reason: String,
    },
    /// A private key whose public half is in none of the expected places.
    #[error("the private key in {key} does not match {expected}")]
    Mismatch {
        /// The private key file.
        key: String,
        /// What it was compared with.
        expected: String,
    },
}

/// Result with [`KeyError`].
pub type Result<T, E = KeyError> = std::result::Result<T, E>;

fn read_blocks(path: &Path) -> Result<Vec<pem::Pem>> {
    let text = std::fs::read(path).map_err(|e| KeyError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    pem::parse_many(&text).map_err(|e| KeyError::Invalid {
        path: path.display().to_string(),
        label: "PEM".to_string(),
        reason: e.to_string(),
    })
}

/// The public keys a verification key file holds (`PUBLIC KEY`, `RSA PUBLIC KEY`,
/// `CERTIFICATE`, or private keys, whose public half is taken, as kube-apiserver does).
///
/// # Errors
/// An unreadable file, a block that does not parse, or no usable block at all.
pub fn public_keys(path: &Path) -> Result<Vec<Vec<u8>>> {
    let shown = path.display().to_string();
    let blocks = read_blocks(path)?;
    let mut keys = Vec::new();
    for block in &blocks {
        let invalid = |reason: String| KeyError::Invalid {
            path: shown.clone(),
            label: block.tag().to_string(),
            reason,
        };
        match block.tag() {
            "PUBLIC KEY" => {
                let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(block.contents())
                    .map_err(|e| invalid(e.to_string()))?;
                keys.push(spki.subject_public_key.data.to_vec());
            }
            "RSA PUBLIC KEY" => keys.push(block.contents().to_vec()),
            "CERTIFICATE" => {
                let (_, cert) = x509_parser::parse_x509_certificate(block.contents())
                    .map_err(|e| invalid(e.to_string()))?;
                keys.push(cert.public_key().subject_public_key.data.to_vec());
            }
            "RSA PRIVATE KEY" | "PRIVATE KEY" | "EC PRIVATE KEY" => {
                keys.push(private_to_public(block).map_err(invalid)?);
            }
            _ => {}
        }
    }
    if keys.is_empty() {
        return Err(KeyError::NoKey {
            path: shown,
            found: blocks.iter().map(|b| b.tag().to_string()).collect(),
        });
    }
    Ok(keys)
}

/// The public half of the first private key in a file.
///
/// # Errors
/// An unreadable file, a key that does not parse, or no private key.
pub fn private_key_public_half(path: &Path) -> Result<Vec<u8>> {
    let shown = path.display().to_string();
    let blocks = read_blocks(path)?;
    let block = blocks
        .iter()
        .find(|b| {
            matches!(
                b.tag(),
                "RSA PRIVATE KEY" | "PRIVATE KEY" | "EC PRIVATE KEY"
            )
        })
        .ok_or_else(|| KeyError::NoKey {
            path: shown.clone(),
            found: blocks.iter().map(|b| b.tag().to_string()).collect(),
        })?;
    private_to_public(block).map_err(|reason| KeyError::Invalid {
        path: shown,
        label: block.tag().to_string(),
        reason,
    })
}

/// Checks that the private key in `key_path` belongs to one of the public keys in
/// `public_paths` (service-account signing and verification keys, or a CA and its key).
///
/// # Errors
/// Any file that cannot be read or parsed, or [`KeyError::Mismatch`].
pub fn check_private_matches(key_path: &Path, public_paths: &[&Path]) -> Result<()> {
    let public = private_key_public_half(key_path)?;
    let mut candidates = Vec::new();
    for path in public_paths {
        candidates.extend(public_keys(path)?);
    }
    if candidates.contains(&public) {
        Ok(())
    } else {
        Err(KeyError::Mismatch {
            key: key_path.display().to_string(),
            expected: public_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

fn private_to_public(block: &pem::Pem) -> std::result::Result<Vec<u8>, String> {
    let der = block.contents();
    match block.tag() {
        "RSA PRIVATE KEY" => ring::rsa::KeyPair::from_der(der)
            .map(|k| k.public().as_ref().to_vec())
            .map_err(|e| format!("not a PKCS#1 RSA key: {e}")),
        "PRIVATE KEY" => {
            if let Ok(k) = ring::rsa::KeyPair::from_pkcs8(der) {
                return Ok(k.public().as_ref().to_vec());
            }
            let rng = ring::rand::SystemRandom::new();
            for alg in [
                &ECDSA_P256_SHA256_ASN1_SIGNING,
                &ECDSA_P384_SHA384_ASN1_SIGNING,
            ] {
                if let Ok(k) = EcdsaKeyPair::from_pkcs8(alg, der, &rng) {
                    return Ok(k.public_key().as_ref().to_vec());
                }
            }
            Err("not an RSA, ECDSA P-256 or ECDSA P-384 PKCS#8 key".to_string())
        }
        "EC PRIVATE KEY" => sec1_public_key(der)
            .ok_or_else(|| "SEC1 key without its public key, or malformed".to_string()),
        other => Err(format!("{other} is not a private key")),
    }
}

/// The optional `[1] publicKey BIT STRING` of a SEC1 `ECPrivateKey`.
fn sec1_public_key(der: &[u8]) -> Option<Vec<u8>> {
    let (tag, body, _) = tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let mut rest = body;
    while !rest.is_empty() {
        let (tag, value, next) = tlv(rest)?;
        if tag == 0xa1 {
            let (inner_tag, bits, _) = tlv(value)?;
            // The first content byte of a BIT STRING counts unused bits; a point has none.
            return match (inner_tag, bits.split_first()) {
                (0x03, Some((0, point))) => Some(point.to_vec()),
                _ => None,
            };
        }
        rest = next;
    }
    None
}

/// One DER tag-length-value: (tag, value, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tlv_reads_short_and_long_lengths() {
        assert_eq!(
            tlv(&[0x04, 0x01, 0xaa, 0xbb]),
            Some((0x04, &[0xaa][..], &[0xbb][..]))
        );
        let mut long = vec![0x04, 0x81, 0x80];
        long.extend([7u8; 0x80]);
        assert_eq!(tlv(&long).map(|(_, v, _)| v.len()), Some(0x80));
        assert_eq!(tlv(&[0x04, 0x05, 0x00]), None);
    }
}
