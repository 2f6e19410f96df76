//! Checking stored key material before it is used: what a manifest holds must parse, each
//! private key must be the one of its certificate or public key, a CA must be a CA and a leaf
//! must chain to the CA that should have signed it. A broken CA deployed to a hypervisor only
//! shows as a component that never becomes ready; here it is an error naming the field.

use rcgen::PublicKeyData as _;
use time::OffsetDateTime;
use x509_parser::prelude::X509Certificate;

use crate::ca::certificate_der;
use crate::inspect::{common_name, is_signed_by, parse};
use crate::key::load_key;
use crate::{CertificateAuthority, Error, Result};

fn is_ca(cert: &X509Certificate<'_>) -> bool {
    cert.basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca)
}

/// A CA as a Cluster stores it: the certificate parses, is a CA, its private key is its own,
/// and it has not expired at `now`.
///
/// # Errors
/// [`Error::InvalidCertificate`], [`Error::NotACa`], [`Error::InvalidPrivateKey`],
/// [`Error::UnsupportedKey`], [`Error::KeyMismatch`], [`Error::CaExpired`].
pub fn check_ca(certificate_pem: &str, private_key_pem: &str, now: OffsetDateTime) -> Result<()> {
    let ca = CertificateAuthority::from_pem(certificate_pem, private_key_pem)?;
    if ca.not_after() <= now {
        return Err(Error::CaExpired {
            common_name: ca.common_name().to_string(),
            not_after: ca.not_after(),
        });
    }
    Ok(())
}

/// A CA certificate alone (a hypervisor's `caCertificate`): it parses and is a CA.
///
/// # Errors
/// [`Error::InvalidCertificate`], [`Error::NotACa`].
pub fn check_ca_certificate(certificate_pem: &str) -> Result<()> {
    let der = certificate_der(certificate_pem)?;
    let cert = parse(&der)?;
    if !is_ca(&cert) {
        return Err(Error::NotACa {
            common_name: common_name(&cert).unwrap_or_default(),
        });
    }
    Ok(())
}

/// A leaf certificate and its key: the certificate parses and is not a CA, the key is its
/// own, and, when `ca_certificate_pem` is given, it is signed by that CA.
///
/// # Errors
/// [`Error::InvalidCertificate`], [`Error::LeafIsACa`], [`Error::InvalidPrivateKey`],
/// [`Error::KeyMismatch`], [`Error::NotSignedBy`].
pub fn check_leaf(
    certificate_pem: &str,
    private_key_pem: &str,
    ca_certificate_pem: Option<&str>,
) -> Result<()> {
    let der = certificate_der(certificate_pem)?;
    let cert = parse(&der)?;
    let name = common_name(&cert).unwrap_or_default();
    if is_ca(&cert) {
        return Err(Error::LeafIsACa { common_name: name });
    }
    let key = load_key(&format!("certificate {name:?}"), private_key_pem)?;
    if key.der_bytes() != cert.public_key().subject_public_key.data.as_ref() {
        return Err(Error::KeyMismatch { common_name: name });
    }
    if let Some(ca) = ca_certificate_pem
        && !is_signed_by(certificate_pem, ca)?
    {
        let ca_der = certificate_der(ca)?;
        let ca_cert = parse(&ca_der)?;
        return Err(Error::NotSignedBy {
            common_name: name,
            issuer: common_name(&ca_cert).unwrap_or_default(),
        });
    }
    Ok(())
}

/// A key pair as a Cluster stores it (`spec.joinKey`, `spec.apiServer.serviceAccount`): the
/// private key parses and the public key, when present, is its public half (`PUBLIC KEY`, or
/// `RSA PUBLIC KEY` as Go writes RSA keys).
///
/// # Errors
/// [`Error::InvalidPrivateKey`], [`Error::InvalidPublicKey`], [`Error::PublicKeyMismatch`].
pub fn check_key_pair(public_key_pem: &str, private_key_pem: &str) -> Result<()> {
    let key = load_key("key pair", private_key_pem)?;
    if public_key_pem.trim().is_empty() {
        return Ok(());
    }
    let block = pem::parse(public_key_pem).map_err(|e| Error::InvalidPublicKey {
        reason: e.to_string(),
    })?;
    let matches = match block.tag() {
        "PUBLIC KEY" => {
            let derived =
                pem::parse(key.public_key_pem()).map_err(|e| Error::InvalidPublicKey {
                    reason: e.to_string(),
                })?;
            derived.contents() == block.contents()
        }
        // PKCS#1: what rcgen's raw public key of an RSA key is.
        "RSA PUBLIC KEY" => key.der_bytes() == block.contents(),
        other => {
            return Err(Error::InvalidPublicKey {
                reason: format!(
                    "PEM block {other:?} instead of \"PUBLIC KEY\" or \"RSA PUBLIC KEY\""
                ),
            });
        }
    };
    if matches {
        Ok(())
    } else {
        Err(Error::PublicKeyMismatch)
    }
}

/// A WireGuard key pair as a Cluster stores it (`spec.vpn`): each key is standard base64 of
/// 32 bytes, and the public key, when both are present, is the private key's (X25519).
///
/// # Errors
/// [`Error::InvalidWireguardKey`] naming which key, [`Error::PublicKeyMismatch`].
pub fn check_wireguard_keys(private_key: &str, public_key: &str) -> Result<()> {
    use base64::Engine as _;
    let decode = |which: &'static str, key: &str| -> Result<[u8; 32]> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(key.trim())
            .map_err(|e| Error::InvalidWireguardKey {
                which,
                reason: e.to_string(),
            })?;
        <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| Error::InvalidWireguardKey {
            which,
            reason: format!("{} bytes instead of 32", bytes.len()),
        })
    };
    let private = (!private_key.is_empty())
        .then(|| decode("private", private_key))
        .transpose()?;
    let public = (!public_key.is_empty())
        .then(|| decode("public", public_key))
        .transpose()?;
    if let (Some(private), Some(public)) = (private, public) {
        let derived =
            x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(private)).to_bytes();
        if derived != public {
            return Err(Error::PublicKeyMismatch);
        }
    }
    Ok(())
}

/// A new WireGuard key pair, `(private, public)`, each standard base64 of 32 bytes as `wg
/// genkey | wg pubkey` prints them (the private key clamped as X25519 requires).
pub fn generate_wireguard_keys() -> (String, String) {
    use base64::Engine as _;
    use rand::RngCore as _;
    let mut private = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut private);
    private[0] &= 248;
    private[31] &= 127;
    private[31] |= 64;
    let public = x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(private));
    let b64 = base64::engine::general_purpose::STANDARD;
    (b64.encode(private), b64.encode(public.to_bytes()))
}

/// The public key (standard base64) of a WireGuard private key.
///
/// # Errors
/// [`Error::InvalidWireguardKey`] when it is not base64 of 32 bytes.
pub fn wireguard_public_key(private_key: &str) -> Result<String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let bytes = b64
        .decode(private_key.trim())
        .map_err(|e| Error::InvalidWireguardKey {
            which: "private",
            reason: e.to_string(),
        })?;
    let private =
        <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| Error::InvalidWireguardKey {
            which: "private",
            reason: format!("{} bytes instead of 32", bytes.len()),
        })?;
    Ok(b64.encode(
        x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(private)).to_bytes(),
    ))
}

#[cfg(test)]
mod tests;
