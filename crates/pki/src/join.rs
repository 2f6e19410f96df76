//! Join crypto, wire-compatible with oneinfra's NodeJoinRequest (see [`SymmetricKey`]).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use rand::RngCore as _;
use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use rsa::pkcs1::DecodeRsaPrivateKey as _;
use rsa::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};
use sha2::Sha256;

use crate::{Error, Result};

/// The symmetric key a joining node chooses to receive its configuration, wire-compatible
/// with oneinfra's NodeJoinRequest:
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
/// Wrapping is RSA-OAEP with SHA-256 (hash and MGF1) and an empty label; sealing is AES-GCM
/// with a random 12-byte nonce written before the ciphertext and the 16-byte tag after it.
/// Both produce standard base64 without padding, as oneinfra does.
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

/// RSA-OAEP(SHA-256) encryption to a join public key (PEM `PUBLIC KEY`), base64 unpadded.
///
/// # Errors
/// [`Error::Join`] when the key is not an RSA public key or the message is too long for it.
pub fn encrypt_to_join_key(join_public_key_pem: &str, plaintext: &[u8]) -> Result<String> {
    let public =
        RsaPublicKey::from_public_key_pem(join_public_key_pem).map_err(|e| Error::Join {
            operation: "wrap",
            reason: format!("join public key: {e}"),
        })?;
    let ciphertext = public
        .encrypt(&mut rand::rngs::OsRng, Oaep::new::<Sha256>(), plaintext)
        .map_err(|e| Error::Join {
            operation: "wrap",
            reason: e.to_string(),
        })?;
    Ok(STANDARD_NO_PAD.encode(ciphertext))
}

/// Decrypts [`encrypt_to_join_key`]'s output with the join private key (PKCS#8 or PKCS#1).
///
/// # Errors
/// [`Error::Join`] when the key does not parse or decryption fails.
pub fn decrypt_with_join_key(join_private_key_pem: &str, ciphertext: &str) -> Result<Vec<u8>> {
    let private = RsaPrivateKey::from_pkcs8_pem(join_private_key_pem)
        .or_else(|_| RsaPrivateKey::from_pkcs1_pem(join_private_key_pem))
        .map_err(|_| Error::Join {
            operation: "unwrap",
            reason: "join private key is neither a PKCS#8 nor a PKCS#1 RSA key".to_owned(),
        })?;
    let data = decode_base64("unwrap", ciphertext)?;
    private
        .decrypt(Oaep::new::<Sha256>(), &data)
        .map_err(|_| Error::Join {
            operation: "unwrap",
            reason: "RSA-OAEP decryption failed (wrong key or altered data)".to_owned(),
        })
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{KeyAlgorithm, KeyPairPem};

    #[test]
    fn seal_matches_the_gcm_known_answer() {
        // GCM specification, test case 14: AES-256, zero key, zero nonce, 16 zero bytes.
        let key = SymmetricKey::from_bytes(vec![0; 32]).unwrap();
        let mut sealed = vec![0u8; 12];
        sealed.extend(hex::decode("cea7403d4d606b6e074ec5d3baf39d18").unwrap());
        sealed.extend(hex::decode("d0d1c8a799996bf0265b98b5d48ab919").unwrap());
        let text = STANDARD_NO_PAD.encode(&sealed);
        assert_eq!(key.open(&text).unwrap(), vec![0u8; 16]);
        // Padded base64 is accepted too.
        let padded = base64::engine::general_purpose::STANDARD.encode(&sealed);
        assert_eq!(key.open(&padded).unwrap(), vec![0u8; 16]);
    }

    #[test]
    fn seal_round_trips_and_detects_tampering() {
        for len in [16, 32] {
            let key = SymmetricKey::from_bytes(vec![7; len]).unwrap();
            let sealed = key.seal(b"kubeconfig contents").unwrap();
            assert!(!sealed.ends_with('='));
            assert_eq!(key.open(&sealed).unwrap(), b"kubeconfig contents");
            assert_ne!(
                sealed,
                key.seal(b"kubeconfig contents").unwrap(),
                "random nonce"
            );

            let mut raw = STANDARD_NO_PAD.decode(&sealed).unwrap();
            let last = raw.len() - 1;
            raw[last] ^= 1;
            let tampered = STANDARD_NO_PAD.encode(raw);
            assert!(matches!(key.open(&tampered), Err(Error::Join { .. })));
            let other = SymmetricKey::generate();
            assert!(matches!(other.open(&sealed), Err(Error::Join { .. })));
        }
        assert!(matches!(
            SymmetricKey::from_bytes(vec![0; 24]),
            Err(Error::InvalidSymmetricKey { length: 24 })
        ));
        assert!(matches!(
            SymmetricKey::generate().open("AAAA"),
            Err(Error::Join { .. })
        ));
    }

    #[test]
    fn wrap_round_trips_with_the_join_key_only() {
        let join = KeyPairPem::generate(KeyAlgorithm::Rsa2048).unwrap();
        let other = KeyPairPem::generate(KeyAlgorithm::Rsa2048).unwrap();
        let key = SymmetricKey::generate();
        let wrapped = key.wrap(&join.public_key_pem).unwrap();
        assert_eq!(
            SymmetricKey::unwrap_with(&join.private_key_pem, &wrapped).unwrap(),
            key
        );
        assert!(SymmetricKey::unwrap_with(&other.private_key_pem, &wrapped).is_err());
        let ec = KeyPairPem::generate(KeyAlgorithm::EcdsaP256).unwrap();
        assert!(matches!(
            key.wrap(&ec.public_key_pem),
            Err(Error::Join {
                operation: "wrap",
                ..
            })
        ));
        assert!(!format!("{key:?}").contains(&hex::encode(key.as_bytes())));
    }
}
