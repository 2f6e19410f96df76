//! Join crypto: oneinfra's NodeJoinRequest (see [`SymmetricKey`]), with the join key of the
//! cluster's algorithm. RSA join keys wrap with RSA-OAEP as oneinfra does; ECDSA join keys
//! wrap with ECIES (see [`encrypt_to_join_key`]).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use hkdf::Hkdf;
use p256::elliptic_curve::sec1::{FromEncodedPoint, ModulusSize, ToEncodedPoint};
use p256::elliptic_curve::zeroize::Zeroizing;
use p256::elliptic_curve::{
    AffinePoint, CurveArithmetic, FieldBytes, FieldBytesSize, PublicKey, SecretKey, ecdh,
};
use rand::RngCore as _;
use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use rsa::pkcs1::DecodeRsaPrivateKey as _;
use rsa::pkcs8::spki::SubjectPublicKeyInfoRef;
use rsa::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, ObjectIdentifier, PrivateKeyInfo};
use rsa::traits::PublicKeyParts as _;
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};
use sha2::Sha256;

use crate::{Error, Result};

/// The symmetric key a joining node chooses to receive its configuration, as in oneinfra's
/// NodeJoinRequest:
///
/// ```text
///  joining node                                   management side
///  ────────────                                   ───────────────
///  key = SymmetricKey::generate()
///  spec.symmetricKey = key.wrap(join public key) ─▶ SymmetricKey::unwrap_with(join private key, ..)
///                                                  status.kubeConfig = key.seal(kubeconfig), ...
///  key.open(status.kubeConfig)                   ◀─
/// ```
///
/// Wrapping follows the join key (see [`encrypt_to_join_key`]): RSA-OAEP for RSA join keys,
/// wire-compatible with oneinfra; ECIES for ECDSA join keys, which oneinfra itself does not
/// offer. Sealing is AES-GCM with a random 12-byte nonce written before the ciphertext and the
/// 16-byte tag after it. Both produce standard base64 without padding, as oneinfra does.
///
/// `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SymmetricKey(Vec<u8>);

impl fmt::Debug for SymmetricKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SymmetricKey({} bytes, [redacted])", self.0.len())
    }
}

impl SymmetricKey {
    /// A fresh 32-byte key (AES-256-GCM) from the operating system's CSPRNG.
    pub fn generate() -> Self {
        let mut bytes = vec![0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        SymmetricKey(bytes)
    }

    /// A key of 16 (AES-128) or 32 (AES-256) bytes.
    ///
    /// # Errors
    /// [`Error::InvalidSymmetricKey`] for any other length (AES-192 is not offered by ring).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        match bytes.len() {
            16 | 32 => Ok(SymmetricKey(bytes)),
            length => Err(Error::InvalidSymmetricKey { length }),
        }
    }

    /// The raw key. Never log it.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn aead_key(&self) -> Result<LessSafeKey> {
        let algorithm = match self.0.len() {
            16 => &AES_128_GCM,
            32 => &AES_256_GCM,
            length => return Err(Error::InvalidSymmetricKey { length }),
        };
        let key = UnboundKey::new(algorithm, &self.0).map_err(|_| Error::InvalidSymmetricKey {
            length: self.0.len(),
        })?;
        Ok(LessSafeKey::new(key))
    }

    /// Encrypts `plaintext`: base64(nonce ‖ ciphertext ‖ tag), unpadded.
    ///
    /// # Errors
    /// [`Error::Join`] when encryption fails.
    pub fn seal(&self, plaintext: &[u8]) -> Result<String> {
        let key = self.aead_key()?;
        let mut nonce = [0u8; NONCE_LEN];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut in_out = plaintext.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::empty(),
            &mut in_out,
        )
        .map_err(|_| Error::Join {
            operation: "seal",
            reason: "AES-GCM encryption failed".to_owned(),
        })?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&in_out);
        Ok(STANDARD_NO_PAD.encode(out))
    }

    /// Decrypts what [`SymmetricKey::seal`] (or oneinfra) produced.
    ///
    /// # Errors
    /// [`Error::Join`] when it is not base64, too short, or fails authentication.
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>> {
        let key = self.aead_key()?;
        let data = decode_base64("open", sealed)?;
        if data.len() < NONCE_LEN + key.algorithm().tag_len() {
            return Err(Error::Join {
                operation: "open",
                reason: format!("{} bytes is shorter than nonce and tag", data.len()),
            });
        }
        let (nonce, ciphertext) = data.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Error::Join {
            operation: "open",
            reason: "bad nonce".to_owned(),
        })?;
        let mut in_out = ciphertext.to_vec();
        let plaintext = key
            .open_in_place(nonce, Aad::empty(), &mut in_out)
            .map_err(|_| Error::Join {
                operation: "open",
                reason: "authentication failed (wrong key or altered data)".to_owned(),
            })?;
        Ok(plaintext.to_vec())
    }

    /// Encrypts this key to a cluster's join public key (`spec.symmetricKey`).
    ///
    /// # Errors
    /// As [`encrypt_to_join_key`].
    pub fn wrap(&self, join_public_key_pem: &str) -> Result<String> {
        encrypt_to_join_key(join_public_key_pem, &self.0)
    }

    /// Recovers a key wrapped with [`SymmetricKey::wrap`].
    ///
    /// # Errors
    /// As [`decrypt_with_join_key`], and [`Error::InvalidSymmetricKey`] for a bad length.
    pub fn unwrap_with(join_private_key_pem: &str, wrapped: &str) -> Result<Self> {
        Self::from_bytes(decrypt_with_join_key(join_private_key_pem, wrapped)?)
    }
}

/// The scheme byte that starts an ECIES ciphertext to a P-256 join key (version 1).
pub const ECIES_P256_V1: u8 = 0x01;
/// The scheme byte that starts an ECIES ciphertext to a P-384 join key (version 1).
pub const ECIES_P384_V1: u8 = 0x02;
/// The HKDF `info` of ECIES version 1.
pub const ECIES_INFO_V1: &[u8] = b"oneinfra join v1";

const TAG_LEN: usize = 16;

/// Encrypts `plaintext` to a join public key (PEM `PUBLIC KEY`, SubjectPublicKeyInfo);
/// standard base64 without padding. The scheme follows the key:
///
/// ```text
///  RSA (2048/3072/4096)  RSA-OAEP, SHA-256 for hash and MGF1, empty label (oneinfra's)
///                        wire: ciphertext (the modulus size)
///  EC P-256 / P-384      ECIES v1: ephemeral key pair e on the join key's curve,
///                        Z   = ECDH(e, join key), x-coordinate
///                        key = HKDF-SHA256(ikm Z, salt E || J, info "oneinfra join v1"), 32 bytes
///                        AES-256-GCM under key, random 12-byte nonce, empty associated data
///                        wire: scheme || E || nonce || ciphertext || 16-byte tag
/// ```
///
/// where E and J are the ephemeral and join public keys as SEC1 uncompressed points (65 bytes
/// on P-256, 97 on P-384) and the scheme byte is [`ECIES_P256_V1`] or [`ECIES_P384_V1`].
///
/// # Errors
/// [`Error::Join`] when the key is not an RSA, P-256 or P-384 public key, or the message is
/// too long for RSA-OAEP with it.
pub fn encrypt_to_join_key(join_public_key_pem: &str, plaintext: &[u8]) -> Result<String> {
    let ciphertext = match JoinPublicKey::from_pem(join_public_key_pem)? {
        JoinPublicKey::Rsa(public) => public
            .encrypt(&mut rand::rngs::OsRng, Oaep::new::<Sha256>(), plaintext)
            .map_err(|e| wrap_error(e.to_string()))?,
        JoinPublicKey::P256(public) => ecies_seal(ECIES_P256_V1, &public, plaintext)?,
        JoinPublicKey::P384(public) => ecies_seal(ECIES_P384_V1, &public, plaintext)?,
    };
    Ok(STANDARD_NO_PAD.encode(ciphertext))
}

/// Decrypts [`encrypt_to_join_key`]'s output with the join private key (PKCS#8, or PKCS#1
/// for RSA). The key's type picks the scheme.
///
/// # Errors
/// [`Error::Join`] when the key does not parse or decryption fails (wrong key, altered data),
/// and [`Error::JoinSchemeMismatch`] for a ciphertext made for another type of join key.
pub fn decrypt_with_join_key(join_private_key_pem: &str, ciphertext: &str) -> Result<Vec<u8>> {
    let private = JoinPrivateKey::from_pem(join_private_key_pem)?;
    let data = decode_base64("unwrap", ciphertext)?;
    match private {
        JoinPrivateKey::Rsa(private) => {
            let size = private.size();
            if data.len() != size {
                return Err(mismatch_or(
                    "an RSA key",
                    &data,
                    format!(
                        "{} bytes is not an RSA-OAEP ciphertext for a {}-bit key ({size} bytes)",
                        data.len(),
                        size * 8
                    ),
                ));
            }
            private
                .decrypt(Oaep::new::<Sha256>(), &data)
                .map_err(|_| unwrap_error("RSA-OAEP decryption failed (wrong key or altered data)"))
        }
        JoinPrivateKey::P256(secret) => {
            ecies_open(ECIES_P256_V1, "an EC P-256 key", &secret, &data)
        }
        JoinPrivateKey::P384(secret) => {
            ecies_open(ECIES_P384_V1, "an EC P-384 key", &secret, &data)
        }
    }
}

fn wrap_error(reason: String) -> Error {
    Error::Join {
        operation: "wrap",
        reason,
    }
}

fn unwrap_error(reason: impl Into<String>) -> Error {
    Error::Join {
        operation: "unwrap",
        reason: reason.into(),
    }
}

/// What a join ciphertext looks like, for errors.
fn describe_ciphertext(data: &[u8]) -> Option<&'static str> {
    let ecies_len = |point_len: usize| 1 + point_len + NONCE_LEN + TAG_LEN;
    // RSA first: an RSA ciphertext starts with any byte, ECIES ones of these exact lengths
    // would need plaintexts far longer than a symmetric key.
    match (data.len(), data.first()) {
        (256, _) => Some("an RSA-OAEP ciphertext for a 2048-bit key"),
        (384, _) => Some("an RSA-OAEP ciphertext for a 3072-bit key"),
        (512, _) => Some("an RSA-OAEP ciphertext for a 4096-bit key"),
        (len, Some(&ECIES_P256_V1)) if len >= ecies_len(65) => Some("an ECIES P-256 ciphertext"),
        (len, Some(&ECIES_P384_V1)) if len >= ecies_len(97) => Some("an ECIES P-384 ciphertext"),
        _ => None,
    }
}

/// A scheme mismatch when the ciphertext is recognisably of another scheme, else `otherwise`.
fn mismatch_or(key: &'static str, data: &[u8], otherwise: String) -> Error {
    match describe_ciphertext(data) {
        Some(ciphertext) => Error::JoinSchemeMismatch { key, ciphertext },
        None => unwrap_error(otherwise),
    }
}

/// A parsed join public key.
enum JoinPublicKey {
    Rsa(RsaPublicKey),
    P256(p256::PublicKey),
    P384(p384::PublicKey),
}

/// The key types a join key can be, from its algorithm identifier.
enum KeyType {
    Rsa,
    P256,
    P384,
}

impl KeyType {
    /// Reads an algorithm identifier (SPKI or PKCS#8).
    fn of(oid: ObjectIdentifier, curve: Option<ObjectIdentifier>) -> Result<Self, String> {
        use p256::elliptic_curve::pkcs8::AssociatedOid as _;
        if oid == rsa::pkcs1::ALGORITHM_OID {
            return Ok(KeyType::Rsa);
        }
        if oid != p256::elliptic_curve::ALGORITHM_OID {
            return Err(format!(
                "key algorithm {oid} (expected RSA, EC P-256 or EC P-384)"
            ));
        }
        match curve {
            Some(curve) if curve == p256::NistP256::OID => Ok(KeyType::P256),
            Some(curve) if curve == p384::NistP384::OID => Ok(KeyType::P384),
            Some(curve) => Err(format!("EC key on curve {curve} (expected P-256 or P-384)")),
            None => Err("EC key without a named curve".to_owned()),
        }
    }
}

/// The first PEM block of `text`.
fn pem_block(text: &str) -> Result<pem::Pem, String> {
    pem::parse(text).map_err(|e| format!("invalid PEM: {e}"))
}

impl JoinPublicKey {
    fn from_pem(text: &str) -> Result<Self> {
        let invalid = |reason: String| wrap_error(format!("join public key: {reason}"));
        let block = pem_block(text).map_err(invalid)?;
        if block.tag() != "PUBLIC KEY" {
            return Err(invalid(format!(
                "PEM block {:?} (expected \"PUBLIC KEY\")",
                block.tag()
            )));
        }
        let der = block.contents();
        let info = SubjectPublicKeyInfoRef::try_from(der).map_err(|e| invalid(e.to_string()))?;
        let curve = info.algorithm.parameters_oid().ok();
        let key = match KeyType::of(info.algorithm.oid, curve).map_err(invalid)? {
            KeyType::Rsa => RsaPublicKey::from_public_key_der(der).map(JoinPublicKey::Rsa),
            KeyType::P256 => p256::PublicKey::from_public_key_der(der).map(JoinPublicKey::P256),
            KeyType::P384 => p384::PublicKey::from_public_key_der(der).map(JoinPublicKey::P384),
        };
        key.map_err(|e| invalid(e.to_string()))
    }
}

/// A parsed join private key. All three zeroize themselves on drop.
enum JoinPrivateKey {
    /// Boxed: an RSA key is many times the size of an EC one.
    Rsa(Box<RsaPrivateKey>),
    P256(p256::SecretKey),
    P384(p384::SecretKey),
}

impl JoinPrivateKey {
    /// PKCS#8 `PRIVATE KEY` of any join key type, or PKCS#1 `RSA PRIVATE KEY` (Go's RSA
    /// format). Errors never quote the key.
    fn from_pem(text: &str) -> Result<Self> {
        let invalid = |reason: String| unwrap_error(format!("join private key: {reason}"));
        let block = pem_block(text).map_err(invalid)?;
        let tag = block.tag().to_owned();
        let der = Zeroizing::new(block.into_contents());
        let der = der.as_slice();
        match tag.as_str() {
            "PRIVATE KEY" => {}
            "RSA PRIVATE KEY" => {
                return RsaPrivateKey::from_pkcs1_der(der)
                    .map(|key| JoinPrivateKey::Rsa(Box::new(key)))
                    .map_err(|_| invalid("not a PKCS#1 RSA private key".to_owned()));
            }
            other => {
                return Err(invalid(format!(
                    "PEM block {other:?} (expected \"PRIVATE KEY\" or \"RSA PRIVATE KEY\")"
                )));
            }
        }
        let info = PrivateKeyInfo::try_from(der)
            .map_err(|_| invalid("not a PKCS#8 private key".to_owned()))?;
        let curve = info.algorithm.parameters_oid().ok();
        let key = match KeyType::of(info.algorithm.oid, curve).map_err(invalid)? {
            KeyType::Rsa => RsaPrivateKey::from_pkcs8_der(der)
                .map(|key| JoinPrivateKey::Rsa(Box::new(key)))
                .map_err(|_| "RSA"),
            KeyType::P256 => p256::SecretKey::from_pkcs8_der(der)
                .map(JoinPrivateKey::P256)
                .map_err(|_| "EC P-256"),
            KeyType::P384 => p384::SecretKey::from_pkcs8_der(der)
                .map(JoinPrivateKey::P384)
                .map_err(|_| "EC P-384"),
        };
        key.map_err(|kind| invalid(format!("invalid PKCS#8 {kind} private key")))
    }
}

/// The AES-256-GCM key of ECIES v1 (see [`encrypt_to_join_key`]).
fn ecies_key(
    operation: &'static str,
    shared_secret: &[u8],
    ephemeral_public: &[u8],
    join_public: &[u8],
) -> Result<LessSafeKey> {
    let mut salt = Vec::with_capacity(ephemeral_public.len() + join_public.len());
    salt.extend_from_slice(ephemeral_public);
    salt.extend_from_slice(join_public);
    let mut okm = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(Some(&salt), shared_secret)
        .expand(ECIES_INFO_V1, okm.as_mut())
        .map_err(|_| Error::Join {
            operation,
            reason: "HKDF expansion failed".to_owned(),
        })?;
    let key = UnboundKey::new(&AES_256_GCM, okm.as_ref()).map_err(|_| Error::Join {
        operation,
        reason: "AES-256-GCM key setup failed".to_owned(),
    })?;
    Ok(LessSafeKey::new(key))
}

/// The length of a SEC1 uncompressed point on curve `C`.
fn uncompressed_point_len<C: CurveArithmetic>() -> usize {
    1 + 2 * FieldBytes::<C>::default().len()
}

fn ecies_seal<C>(scheme: u8, join_public: &PublicKey<C>, plaintext: &[u8]) -> Result<Vec<u8>>
where
    C: CurveArithmetic,
    AffinePoint<C>: FromEncodedPoint<C> + ToEncodedPoint<C>,
    FieldBytesSize<C>: ModulusSize,
{
    let ephemeral = ecdh::EphemeralSecret::<C>::random(&mut rand::rngs::OsRng);
    let ephemeral_point = ephemeral.public_key().to_encoded_point(false);
    let join_point = join_public.to_encoded_point(false);
    let shared = ephemeral.diffie_hellman(join_public);
    let key = ecies_key(
        "wrap",
        shared.raw_secret_bytes(),
        ephemeral_point.as_bytes(),
        join_point.as_bytes(),
    )?;
    let mut nonce = [0u8; NONCE_LEN];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let mut in_out = plaintext.to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::empty(),
        &mut in_out,
    )
    .map_err(|_| wrap_error("AES-GCM encryption failed".to_owned()))?;
    let mut out = Vec::with_capacity(1 + ephemeral_point.len() + NONCE_LEN + in_out.len());
    out.push(scheme);
    out.extend_from_slice(ephemeral_point.as_bytes());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&in_out);
    Ok(out)
}

fn ecies_open<C>(
    scheme: u8,
    key_type: &'static str,
    join_secret: &SecretKey<C>,
    data: &[u8],
) -> Result<Vec<u8>>
where
    C: CurveArithmetic,
    AffinePoint<C>: FromEncodedPoint<C> + ToEncodedPoint<C>,
    FieldBytesSize<C>: ModulusSize,
{
    let point_len = uncompressed_point_len::<C>();
    if data.first() != Some(&scheme) {
        let found = data.first().map_or_else(
            || "empty".to_owned(),
            |byte| format!("scheme byte {byte:#04x}, expected {scheme:#04x}"),
        );
        return Err(mismatch_or(
            key_type,
            data,
            format!("not an ECIES ciphertext ({found})"),
        ));
    }
    if data.len() < 1 + point_len + NONCE_LEN + TAG_LEN {
        return Err(unwrap_error(format!(
            "{} bytes is shorter than an ECIES header and tag ({} bytes)",
            data.len(),
            1 + point_len + NONCE_LEN + TAG_LEN
        )));
    }
    let (ephemeral_point, rest) = data[1..].split_at(point_len);
    let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
    // v1 writes uncompressed points only. A bad point after a matching scheme byte is most
    // likely another scheme's ciphertext that starts with that byte by chance.
    let ephemeral = match ephemeral_point.first() {
        Some(0x04) => PublicKey::<C>::from_sec1_bytes(ephemeral_point).ok(),
        _ => None,
    }
    .ok_or_else(|| {
        mismatch_or(
            key_type,
            data,
            "ephemeral public key is not an uncompressed point of the join key's curve".to_owned(),
        )
    })?;
    let shared = ecdh::diffie_hellman(join_secret.to_nonzero_scalar(), ephemeral.as_affine());
    let join_point = join_secret.public_key().to_encoded_point(false);
    let key = ecies_key(
        "unwrap",
        shared.raw_secret_bytes(),
        ephemeral_point,
        join_point.as_bytes(),
    )?;
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| unwrap_error("bad nonce"))?;
    let mut in_out = ciphertext.to_vec();
    let plaintext = key
        .open_in_place(nonce, Aad::empty(), &mut in_out)
        .map_err(|_| unwrap_error("ECIES authentication failed (wrong key or altered data)"))?;
    Ok(plaintext.to_vec())
}

/// Decodes standard base64, with or without padding (oneinfra writes it without).
fn decode_base64(operation: &'static str, text: &str) -> Result<Vec<u8>> {
    STANDARD_NO_PAD
        .decode(text.trim().trim_end_matches('='))
        .map_err(|e| Error::Join {
            operation,
            reason: format!("invalid base64: {e}"),
        })
}

#[cfg(test)]
mod tests;
