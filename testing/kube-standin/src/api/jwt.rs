//! Service-account tokens: JWTs signed with the service-account signing key (RS256 for RSA,
//! ES256/ES384 for ECDSA), verified against the verification keys, as kube-apiserver issues
//! (TokenRequest) and checks them. Key material never appears in an error.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use ring::rand::SystemRandom;
use ring::signature::{
    self, ECDSA_P256_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair,
    KeyPair as _, RsaKeyPair,
};
use serde_json::Value;
use x509_parser::prelude::FromDer as _;

/// An error reading keys or handling a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// A key file that cannot be used.
    #[error("{path}: {reason}")]
    Key { path: String, reason: String },
    /// A token that is not a well-formed JWT.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// A token whose signature no key verifies.
    #[error("token signature verification failed")]
    Signature,
    /// Signing failed.
    #[error("cannot sign: {0}")]
    Sign(String),
}

/// The algorithm of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Rs256,
    Es256,
    Es384,
}

impl Algorithm {
    /// The JWS name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
        }
    }
}

/// A verification key: the PKCS#1 `RSAPublicKey` or the uncompressed EC point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub algorithm: Algorithm,
    pub bytes: Vec<u8>,
}

impl PublicKey {
    /// The key id kube-apiserver would give it: a hash of the key (base64url SHA-256).
    pub fn key_id(&self) -> String {
        B64URL.encode(ring::digest::digest(&ring::digest::SHA256, &self.bytes).as_ref())
    }

    /// The JWK of the key (for `/openid/v1/jwks`).
    pub fn jwk(&self) -> Value {
        match self.algorithm {
            Algorithm::Rs256 => {
                let (n, e) = rsa_components(&self.bytes).unwrap_or_default();
                serde_json::json!({"use": "sig", "kty": "RSA", "kid": self.key_id(), "alg": "RS256",
                                   "n": B64URL.encode(n), "e": B64URL.encode(e)})
            }
            Algorithm::Es256 | Algorithm::Es384 => {
                let (crv, size) = if self.algorithm == Algorithm::Es256 {
                    ("P-256", 32)
                } else {
                    ("P-384", 48)
                };
                let point = self.bytes.get(1..).unwrap_or_default();
                let (x, y) = point.split_at(size.min(point.len()));
                serde_json::json!({"use": "sig", "kty": "EC", "kid": self.key_id(), "alg": self.algorithm.name(),
                                   "crv": crv, "x": B64URL.encode(x), "y": B64URL.encode(y)})
            }
        }
    }
}

/// (modulus, exponent) of a PKCS#1 RSAPublicKey, leading zeros trimmed.
fn rsa_components(der: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (tag, body, _) = tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let (t1, n, rest) = tlv(body)?;
    let (t2, e, _) = tlv(rest)?;
    if t1 != 2 || t2 != 2 {
        return None;
    }
    let trim = |v: &[u8]| {
        v.iter()
            .skip_while(|b| **b == 0)
            .copied()
            .collect::<Vec<u8>>()
    };
    Some((trim(n), trim(e)))
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

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .iter()
            .copied()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];

/// The curve OID of a SEC1 `ECPrivateKey`: its `[0] parameters`, or, when they are left out,
/// the curve whose keys have the private key's length.
fn sec1_curve(sec1: &[u8]) -> Option<Vec<u8>> {
    let (_, body, _) = tlv(sec1)?;
    let mut rest = body;
    let mut key_length = 0;
    while !rest.is_empty() {
        let (tag, value, next) = tlv(rest)?;
        match tag {
            0x04 => key_length = value.len(),
            0xa0 => {
                let (oid_tag, oid, _) = tlv(value)?;
                return (oid_tag == 0x06).then(|| oid.to_vec());
            }
            _ => {}
        }
        rest = next;
    }
    match key_length {
        32 => Some(OID_P256.to_vec()),
        48 => Some(OID_P384.to_vec()),
        _ => None,
    }
}

/// A SEC1 EC key wrapped as PKCS#8 (what ring reads).
fn sec1_to_pkcs8(sec1: &[u8]) -> Option<Vec<u8>> {
    let curve = sec1_curve(sec1)?;
    let mut algorithm = der(0x06, OID_EC_PUBLIC_KEY);
    algorithm.extend(der(0x06, &curve));
    let mut body = der(0x02, &[0]);
    body.extend(der(0x30, &algorithm));
    body.extend(der(0x04, sec1));
    Some(der(0x30, &body))
}

enum SigningKey {
    Rsa(RsaKeyPair),
    Ecdsa(EcdsaKeyPair),
}

/// The service-account signing key.
pub struct Signer {
    key: SigningKey,
    public: PublicKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("algorithm", &self.public.algorithm)
            .finish_non_exhaustive()
    }
}

fn read_pem(path: &Path) -> Result<Vec<pem::Pem>, JwtError> {
    let bad = |reason: String| JwtError::Key {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    pem::parse_many(&text).map_err(|e| bad(e.to_string()))
}

impl Signer {
    /// The first private key in `path` (PKCS#1 or PKCS#8 RSA, PKCS#8 or SEC1 ECDSA P-256/P-384).
    ///
    /// # Errors
    /// An unreadable file or no usable key.
    pub fn from_file(path: &Path) -> Result<Signer, JwtError> {
        let blocks = read_pem(path)?;
        let block = blocks
            .iter()
            .find(|b| {
                matches!(
                    b.tag(),
                    "RSA PRIVATE KEY" | "PRIVATE KEY" | "EC PRIVATE KEY"
                )
            })
            .ok_or_else(|| JwtError::Key {
                path: path.display().to_string(),
                reason: "no private key".to_string(),
            })?;
        signer_from_block(block).ok_or_else(|| JwtError::Key {
            path: path.display().to_string(),
            reason: format!(
                "{}: not an RSA, ECDSA P-256 or ECDSA P-384 key",
                block.tag()
            ),
        })
    }

    /// Its public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// A signed JWT of `claims`.
    ///
    /// # Errors
    /// The signature could not be made.
    pub fn sign(&self, claims: &Value) -> Result<String, JwtError> {
        let header =
            serde_json::json!({"alg": self.public.algorithm.name(), "kid": self.public.key_id()});
        let input = format!(
            "{}.{}",
            B64URL.encode(header.to_string()),
            B64URL.encode(claims.to_string())
        );
        let rng = SystemRandom::new();
        let signature = match &self.key {
            SigningKey::Rsa(k) => {
                let mut out = vec![0; k.public().modulus_len()];
                k.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut out,
                )
                .map_err(|e| JwtError::Sign(e.to_string()))?;
                out
            }
            SigningKey::Ecdsa(k) => k
                .sign(&rng, input.as_bytes())
                .map_err(|e| JwtError::Sign(e.to_string()))?
                .as_ref()
                .to_vec(),
        };
        Ok(format!("{input}.{}", B64URL.encode(signature)))
    }
}

/// The verification keys in `path` (`PUBLIC KEY`, `RSA PUBLIC KEY`, `CERTIFICATE`, or private
/// keys, whose public half is taken).
///
/// # Errors
/// An unreadable file or a block that does not parse.
pub fn public_keys(path: &Path) -> Result<Vec<PublicKey>, JwtError> {
    let shown = path.display().to_string();
    let mut keys = Vec::new();
    for block in read_pem(path)? {
        let bad = |reason: String| JwtError::Key {
            path: shown.clone(),
            reason: format!("{}: {reason}", block.tag()),
        };
        match block.tag() {
            "PUBLIC KEY" => {
                let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(block.contents())
                    .map_err(|e| bad(e.to_string()))?;
                keys.push(
                    from_spki(&spki).ok_or_else(|| bad("not an RSA, P-256 or P-384 key".into()))?,
                );
            }
            "RSA PUBLIC KEY" => keys.push(PublicKey {
                algorithm: Algorithm::Rs256,
                bytes: block.contents().to_vec(),
            }),
            "CERTIFICATE" => {
                let (_, cert) = x509_parser::parse_x509_certificate(block.contents())
                    .map_err(|e| bad(e.to_string()))?;
                keys.push(
                    from_spki(cert.public_key())
                        .ok_or_else(|| bad("not an RSA, P-256 or P-384 key".into()))?,
                );
            }
            "RSA PRIVATE KEY" | "PRIVATE KEY" | "EC PRIVATE KEY" => {
                // The public half of a private key, as kube-apiserver accepts it.
                let signer = signer_from_block(&block)
                    .ok_or_else(|| bad("not a usable private key".into()))?;
                keys.push(signer.public);
            }
            _ => {}
        }
    }
    if keys.is_empty() {
        return Err(JwtError::Key {
            path: shown,
            reason: "no public key".to_string(),
        });
    }
    Ok(keys)
}

fn signer_from_block(block: &pem::Pem) -> Option<Signer> {
    let der = block.contents();
    let rng = SystemRandom::new();
    let ecdsa = |pkcs8: &[u8]| {
        [
            (&ECDSA_P256_SHA256_FIXED_SIGNING, Algorithm::Es256),
            (&ECDSA_P384_SHA384_FIXED_SIGNING, Algorithm::Es384),
        ]
        .into_iter()
        .find_map(|(alg, algorithm)| {
            let k = EcdsaKeyPair::from_pkcs8(alg, pkcs8, &rng).ok()?;
            let public = PublicKey {
                algorithm,
                bytes: k.public_key().as_ref().to_vec(),
            };
            Some(Signer {
                key: SigningKey::Ecdsa(k),
                public,
            })
        })
    };
    let rsa = |k: RsaKeyPair| {
        let public = PublicKey {
            algorithm: Algorithm::Rs256,
            bytes: k.public().as_ref().to_vec(),
        };
        Signer {
            key: SigningKey::Rsa(k),
            public,
        }
    };
    match block.tag() {
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(der).ok().map(rsa),
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(der)
            .ok()
            .map(rsa)
            .or_else(|| ecdsa(der)),
        "EC PRIVATE KEY" => ecdsa(&sec1_to_pkcs8(der)?),
        _ => None,
    }
}

fn from_spki(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Option<PublicKey> {
    let oid = spki.algorithm.algorithm.as_bytes();
    let bytes = spki.subject_public_key.data.to_vec();
    if oid == [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01] {
        return Some(PublicKey {
            algorithm: Algorithm::Rs256,
            bytes,
        });
    }
    if oid == OID_EC_PUBLIC_KEY {
        let curve = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
        let algorithm = match curve.as_bytes() {
            c if c == OID_P256 => Algorithm::Es256,
            c if c == OID_P384 => Algorithm::Es384,
            _ => return None,
        };
        return Some(PublicKey { algorithm, bytes });
    }
    None
}

/// A verification key from a JWK (`kty` `RSA` with `n` and `e`, or `EC` on `P-256`/`P-384`
/// with `x` and `y`), as an issuer's JWKS lists them; `None` for any other key or a key not
/// meant for signatures (`use` other than `sig`).
pub fn from_jwk(jwk: &Value) -> Option<PublicKey> {
    if jwk["use"].as_str().is_some_and(|u| u != "sig") {
        return None;
    }
    let field = |name: &str| {
        B64URL
            .decode(jwk[name].as_str()?.trim_end_matches('='))
            .ok()
    };
    // A positive DER INTEGER: a leading zero when the high bit is set.
    let integer = |bytes: Vec<u8>| {
        let mut v: Vec<u8> = bytes.into_iter().skip_while(|b| *b == 0).collect();
        if v.first().is_none_or(|b| b & 0x80 != 0) {
            v.insert(0, 0);
        }
        der(0x02, &v)
    };
    match jwk["kty"].as_str()? {
        "RSA" => {
            let mut body = integer(field("n")?);
            body.extend(integer(field("e")?));
            Some(PublicKey {
                algorithm: Algorithm::Rs256,
                bytes: der(0x30, &body),
            })
        }
        "EC" => {
            let (algorithm, size) = match jwk["crv"].as_str()? {
                "P-256" => (Algorithm::Es256, 32),
                "P-384" => (Algorithm::Es384, 48),
                _ => return None,
            };
            let (x, y) = (field("x")?, field("y")?);
            if x.len() != size || y.len() != size {
                return None;
            }
            let mut bytes = vec![0x04];
            bytes.extend(x);
            bytes.extend(y);
            Some(PublicKey { algorithm, bytes })
        }
        _ => None,
    }
}

/// The header and claims of `token`, not verified.
pub fn unverified(token: &str) -> Option<(Value, Value)> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let decode = |part: &str| -> Option<Value> {
        let bytes = B64URL.decode(part.trim_end_matches('=')).ok()?;
        serde_json::from_slice(&bytes).ok()
    };
    Some((decode(header)?, decode(payload)?))
}

/// The claims of `token` if one of `keys` verifies its signature (nothing else is checked).
///
/// # Errors
/// A malformed token, an unsupported algorithm, or no key verifying it.
pub fn verify(token: &str, keys: &[PublicKey]) -> Result<Value, JwtError> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed("not three dot-separated parts".into()));
    };
    let decode = |part: &str| {
        B64URL
            .decode(part.trim_end_matches('='))
            .map_err(|e| JwtError::Malformed(e.to_string()))
    };
    let header: Value =
        serde_json::from_slice(&decode(header)?).map_err(|e| JwtError::Malformed(e.to_string()))?;
    let claims: Value = serde_json::from_slice(&decode(payload)?)
        .map_err(|e| JwtError::Malformed(e.to_string()))?;
    let signature = decode(sig)?;
    let algorithm = match header["alg"].as_str() {
        Some("RS256") => Algorithm::Rs256,
        Some("ES256") => Algorithm::Es256,
        Some("ES384") => Algorithm::Es384,
        other => {
            return Err(JwtError::Malformed(format!(
                "unsupported algorithm {other:?}"
            )));
        }
    };
    let input = &token[..token.rfind('.').unwrap_or(0)];
    for key in keys.iter().filter(|k| k.algorithm == algorithm) {
        let verifier: &dyn signature::VerificationAlgorithm = match algorithm {
            Algorithm::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            Algorithm::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
            Algorithm::Es384 => &signature::ECDSA_P384_SHA384_FIXED,
        };
        if signature::UnparsedPublicKey::new(verifier, &key.bytes)
            .verify(input.as_bytes(), &signature)
            .is_ok()
        {
            return Ok(claims);
        }
    }
    Err(JwtError::Signature)
}

#[cfg(test)]
mod tests;
