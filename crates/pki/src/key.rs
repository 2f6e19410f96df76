//! Key algorithms and key pairs, always exchanged as PEM (PKCS#8 private keys, SPKI public keys).

use std::fmt;
use std::str::FromStr;

use rcgen::PublicKeyData as _;
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_RSA_SHA256};
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::EncodePrivateKey;

use crate::{Error, Result};

/// The algorithm of a generated key. ECDSA P-256 is the default: it is fast to mint and
/// accepted by every Kubernetes component.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyAlgorithm {
    /// ECDSA on NIST P-256, signing with SHA-256.
    #[default]
    EcdsaP256,
    /// ECDSA on NIST P-384, signing with SHA-384.
    EcdsaP384,
    /// RSA, 2048-bit modulus, PKCS#1 v1.5 signatures with SHA-256.
    Rsa2048,
    /// RSA, 3072-bit modulus.
    Rsa3072,
    /// RSA, 4096-bit modulus.
    Rsa4096,
}

impl KeyAlgorithm {
    /// Every algorithm, in the order the CLI lists them.
    pub const ALL: [KeyAlgorithm; 5] = [
        KeyAlgorithm::EcdsaP256,
        KeyAlgorithm::EcdsaP384,
        KeyAlgorithm::Rsa2048,
        KeyAlgorithm::Rsa3072,
        KeyAlgorithm::Rsa4096,
    ];

    /// The flag spelling: `ecdsa-p256`, `ecdsa-p384`, `rsa-2048`, `rsa-3072`, `rsa-4096`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyAlgorithm::EcdsaP256 => "ecdsa-p256",
            KeyAlgorithm::EcdsaP384 => "ecdsa-p384",
            KeyAlgorithm::Rsa2048 => "rsa-2048",
            KeyAlgorithm::Rsa3072 => "rsa-3072",
            KeyAlgorithm::Rsa4096 => "rsa-4096",
        }
    }

    /// Whether keys of this algorithm are RSA keys (whose leaf certificates also get the
    /// keyEncipherment key usage).
    pub fn is_rsa(self) -> bool {
        self.rsa_bits().is_some()
    }

    /// The modulus size for RSA algorithms.
    pub fn rsa_bits(self) -> Option<usize> {
        match self {
            KeyAlgorithm::EcdsaP256 | KeyAlgorithm::EcdsaP384 => None,
            KeyAlgorithm::Rsa2048 => Some(2048),
            KeyAlgorithm::Rsa3072 => Some(3072),
            KeyAlgorithm::Rsa4096 => Some(4096),
        }
    }

    pub(crate) fn from_rsa_bits(bits: usize) -> Option<Self> {
        match bits {
            2048 => Some(KeyAlgorithm::Rsa2048),
            3072 => Some(KeyAlgorithm::Rsa3072),
            4096 => Some(KeyAlgorithm::Rsa4096),
            _ => None,
        }
    }

    pub(crate) fn signature_algorithm(self) -> &'static rcgen::SignatureAlgorithm {
        match self {
            KeyAlgorithm::EcdsaP256 => &PKCS_ECDSA_P256_SHA256,
            KeyAlgorithm::EcdsaP384 => &PKCS_ECDSA_P384_SHA384,
            KeyAlgorithm::Rsa2048 | KeyAlgorithm::Rsa3072 | KeyAlgorithm::Rsa4096 => {
                &PKCS_RSA_SHA256
            }
        }
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyAlgorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim().to_ascii_lowercase();
        KeyAlgorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == wanted)
            .ok_or_else(|| Error::UnknownKeyAlgorithm {
                value: s.to_owned(),
            })
    }
}

/// A key pair as PEM: the private key in PKCS#8 (`PRIVATE KEY`), the public key as
/// SubjectPublicKeyInfo (`PUBLIC KEY`). This is oneinfra's `KeyPair` (`spec.joinKey`,
/// `spec.apiServer.serviceAccount`). `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPairPem {
    /// PEM `PUBLIC KEY`.
    pub public_key_pem: String,
    /// PEM `PRIVATE KEY` (PKCS#8).
    pub private_key_pem: String,
}

impl fmt::Debug for KeyPairPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPairPem")
            .field("public_key_pem", &self.public_key_pem)
            .field("private_key_pem", &"[redacted]")
            .finish()
    }
}

impl KeyPairPem {
    /// Generates a fresh key pair.
    ///
    /// # Errors
    /// [`Error::KeyGeneration`] when the system random source or the key encoding fails.
    pub fn generate(algorithm: KeyAlgorithm) -> Result<Self> {
        let key = generate_key(algorithm)?;
        Ok(KeyPairPem {
            public_key_pem: key.public_key_pem(),
            private_key_pem: key.serialize_pem(),
        })
    }

    /// Parses a private key PEM and derives the public half from it.
    ///
    /// # Errors
    /// [`Error::InvalidPrivateKey`] when the PEM is not a supported private key.
    pub fn from_private_key_pem(what: &str, private_key_pem: &str) -> Result<Self> {
        let key = load_key(what, private_key_pem)?;
        Ok(KeyPairPem {
            public_key_pem: key.public_key_pem(),
            private_key_pem: key.serialize_pem(),
        })
    }

    /// The algorithm of this key pair.
    ///
    /// # Errors
    /// [`Error::InvalidPrivateKey`] or [`Error::UnsupportedKey`] when the private key does not
    /// parse or is of an algorithm or size [`KeyAlgorithm`] does not list.
    pub fn algorithm(&self) -> Result<KeyAlgorithm> {
        let key = load_key("key pair", &self.private_key_pem)?;
        key_algorithm("key pair", &key)
    }
}

/// Generates an rcgen key pair. ring cannot generate RSA keys, so those come from the `rsa`
/// crate and are handed to rcgen as PKCS#8.
pub(crate) fn generate_key(algorithm: KeyAlgorithm) -> Result<KeyPair> {
    let keygen_error = |source: Box<dyn std::error::Error + Send + Sync>| Error::KeyGeneration {
        algorithm,
        source,
    };
    match algorithm.rsa_bits() {
        None => KeyPair::generate_for(algorithm.signature_algorithm())
            .map_err(|e| keygen_error(Box::new(e))),
        Some(bits) => {
            // Key material comes from the operating system's CSPRNG on purpose: a seeded RNG
            // would make keys predictable, so randomness is the one input PKI does not take.
            let private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, bits)
                .map_err(|e| keygen_error(Box::new(e)))?;
            let der = private
                .to_pkcs8_der()
                .map_err(|e| keygen_error(Box::new(e)))?;
            KeyPair::try_from(der.as_bytes()).map_err(|e| keygen_error(Box::new(e)))
        }
    }
}

/// Loads a private key from PEM: PKCS#8 (`PRIVATE KEY`), or PKCS#1 (`RSA PRIVATE KEY`, as Go
/// programs such as the original oneinfra write them), converted to PKCS#8 first.
pub(crate) fn load_key(what: &str, private_key_pem: &str) -> Result<KeyPair> {
    let invalid = |reason: String| Error::InvalidPrivateKey {
        what: what.to_owned(),
        reason,
    };
    let block = pem::parse(private_key_pem).map_err(|e| invalid(e.to_string()))?;
    match block.tag() {
        "PRIVATE KEY" => KeyPair::try_from(block.contents()).map_err(|e| invalid(e.to_string())),
        "RSA PRIVATE KEY" => {
            let private = rsa::RsaPrivateKey::from_pkcs1_der(block.contents())
                .map_err(|e| invalid(e.to_string()))?;
            let der = private.to_pkcs8_der().map_err(|e| invalid(e.to_string()))?;
            KeyPair::try_from(der.as_bytes()).map_err(|e| invalid(e.to_string()))
        }
        other => Err(invalid(format!(
            "unsupported PEM block {other:?} (expected \"PRIVATE KEY\" or \"RSA PRIVATE KEY\")"
        ))),
    }
}

/// The [`KeyAlgorithm`] of a loaded key.
pub(crate) fn key_algorithm(what: &str, key: &KeyPair) -> Result<KeyAlgorithm> {
    let alg = key.algorithm();
    if alg == &PKCS_ECDSA_P256_SHA256 {
        return Ok(KeyAlgorithm::EcdsaP256);
    }
    if alg == &PKCS_ECDSA_P384_SHA384 {
        return Ok(KeyAlgorithm::EcdsaP384);
    }
    if alg == &PKCS_RSA_SHA256 {
        let bits = rsa_modulus_bits(key.der_bytes()).ok_or_else(|| Error::UnsupportedKey {
            what: what.to_owned(),
            detail: "unreadable RSA public key".to_owned(),
        })?;
        return KeyAlgorithm::from_rsa_bits(bits).ok_or_else(|| Error::UnsupportedKey {
            what: what.to_owned(),
            detail: format!("RSA modulus of {bits} bits (expected 2048, 3072 or 4096)"),
        });
    }
    Err(Error::UnsupportedKey {
        what: what.to_owned(),
        detail: format!("signature algorithm {alg:?}"),
    })
}

/// The modulus size of a DER `RSAPublicKey`.
fn rsa_modulus_bits(rsa_public_key_der: &[u8]) -> Option<usize> {
    use rsa::pkcs1::DecodeRsaPublicKey;
    use rsa::traits::PublicKeyParts;
    let public = rsa::RsaPublicKey::from_pkcs1_der(rsa_public_key_der).ok()?;
    Some(public.n().bits())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip() {
        for alg in KeyAlgorithm::ALL {
            assert_eq!(alg.as_str().parse::<KeyAlgorithm>().unwrap(), alg);
            assert_eq!(alg.to_string(), alg.as_str());
        }
        assert_eq!(
            " RSA-2048 ".parse::<KeyAlgorithm>().unwrap(),
            KeyAlgorithm::Rsa2048
        );
        assert!(matches!(
            "rsa-1024".parse::<KeyAlgorithm>(),
            Err(Error::UnknownKeyAlgorithm { value }) if value == "rsa-1024"
        ));
        assert_eq!(KeyAlgorithm::default(), KeyAlgorithm::EcdsaP256);
    }

    #[test]
    fn generated_keys_report_their_algorithm() {
        for alg in [
            KeyAlgorithm::EcdsaP256,
            KeyAlgorithm::EcdsaP384,
            KeyAlgorithm::Rsa2048,
        ] {
            let pair = KeyPairPem::generate(alg).unwrap();
            assert!(
                pair.private_key_pem
                    .starts_with("-----BEGIN PRIVATE KEY-----")
            );
            assert!(
                pair.public_key_pem
                    .starts_with("-----BEGIN PUBLIC KEY-----")
            );
            assert_eq!(pair.algorithm().unwrap(), alg);
            let reloaded = KeyPairPem::from_private_key_pem("test", &pair.private_key_pem).unwrap();
            assert_eq!(reloaded.public_key_pem, pair.public_key_pem);
        }
    }

    #[test]
    fn pkcs1_rsa_keys_load() {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        let private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048).unwrap();
        let pkcs1 = private
            .to_pkcs1_pem(rsa::pkcs1::LineEnding::LF)
            .unwrap()
            .to_string();
        let pair = KeyPairPem::from_private_key_pem("pkcs1", &pkcs1).unwrap();
        assert_eq!(pair.algorithm().unwrap(), KeyAlgorithm::Rsa2048);
        assert!(
            pair.private_key_pem
                .starts_with("-----BEGIN PRIVATE KEY-----")
        );
    }

    #[test]
    fn debug_hides_private_key() {
        let pair = KeyPairPem::generate(KeyAlgorithm::EcdsaP256).unwrap();
        let shown = format!("{pair:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("[redacted]"));
    }

    #[test]
    fn garbage_keys_are_rejected_with_context() {
        let err = load_key("spec.joinKey", "not a pem").unwrap_err();
        assert!(
            matches!(&err, Error::InvalidPrivateKey { what, .. } if what == "spec.joinKey"),
            "{err:?}"
        );
        let cert_block = pem::encode(&pem::Pem::new("CERTIFICATE", vec![1, 2, 3]));
        let err = load_key("x", &cert_block).unwrap_err();
        assert!(err.to_string().contains("CERTIFICATE"), "{err}");
    }
}
