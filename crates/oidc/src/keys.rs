//! The provider's ES256 signing key: made once (PKCS#8 PEM, 0600 from its creation, written
//! atomically) and kept, so tokens stay valid across restarts; its public half as a JWK.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use sha2::{Digest as _, Sha256};

const PEM_LABEL: &str = "PRIVATE KEY";

/// The signing key and its key ID.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
    /// The JWK thumbprint's first 16 characters: names the key in tokens and the JWKS.
    pub kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey(ES256, kid={})", self.kid)
    }
}

impl SigningKey {
    /// Reads the key at `path`, or makes one there when there is none.
    ///
    /// # Errors
    /// The reason (never the key), naming the file.
    pub fn load_or_create(path: &Path) -> Result<SigningKey, String> {
        let rng = SystemRandom::new();
        let der = match std::fs::read_to_string(path) {
            Ok(text) => pem::parse(&text)
                .ok()
                .filter(|p| p.tag() == PEM_LABEL)
                .map(pem::Pem::into_contents)
                .ok_or_else(|| format!("{}: not a PKCS#8 PEM private key", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(|_| "cannot make a P-256 key".to_string())?;
                let text = pem::encode(&pem::Pem::new(PEM_LABEL, doc.as_ref()));
                // Atomically, 0600 from its creation.
                oi_cli_io::write_file(path, text.as_bytes(), 0o600)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                doc.as_ref().to_vec()
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng)
            .map_err(|_| format!("{}: not a P-256 private key", path.display()))?;
        let mut key = SigningKey {
            pair,
            rng,
            kid: String::new(),
        };
        key.kid = key.thumbprint()[..16].to_string();
        Ok(key)
    }

    fn coordinates(&self) -> (String, String) {
        // An uncompressed point: 0x04 || x || y.
        let point = self.pair.public_key().as_ref();
        (B64URL.encode(&point[1..33]), B64URL.encode(&point[33..65]))
    }

    /// RFC 7638's thumbprint.
    fn thumbprint(&self) -> String {
        let (x, y) = self.coordinates();
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        B64URL.encode(Sha256::digest(canonical.as_bytes()))
    }

    /// The JWKS document.
    pub fn jwks(&self) -> serde_json::Value {
        let (x, y) = self.coordinates();
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "x": x, "y": y,
            "use": "sig", "alg": "ES256", "kid": self.kid,
        }]})
    }

    /// A compact JWS of `claims`.
    ///
    /// # Errors
    /// When signing fails.
    pub fn sign(&self, claims: &serde_json::Value) -> Result<String, String> {
        let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        let input = format!(
            "{}.{}",
            B64URL.encode(header.to_string()),
            B64URL.encode(claims.to_string())
        );
        let sig = self
            .pair
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| "cannot sign".to_string())?;
        Ok(format!("{input}.{}", B64URL.encode(sig.as_ref())))
    }

    /// Whether `jws` was signed by this key (for tests and `/userinfo`-less checks).
    pub fn verify(&self, jws: &str) -> bool {
        let Some((input, sig)) = jws.rsplit_once('.') else {
            return false;
        };
        let Ok(sig) = B64URL.decode(sig) else {
            return false;
        };
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            self.pair.public_key().as_ref(),
        )
        .verify(input.as_bytes(), &sig)
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn the_key_is_made_once_0600_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/signing-key.pem");
        let a = SigningKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = SigningKey::load_or_create(&path).unwrap();
        assert_eq!(a.kid, b.kid);
        assert_eq!(a.jwks(), b.jwks());
        let token = a.sign(&serde_json::json!({"sub": "alice"})).unwrap();
        assert!(b.verify(&token));
        // Another key does not verify it; a changed payload does not verify.
        let other = SigningKey::load_or_create(&dir.path().join("other.pem")).unwrap();
        assert_ne!(other.kid, a.kid);
        assert!(!other.verify(&token));
        let parts: Vec<&str> = token.split('.').collect();
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            B64URL.encode(r#"{"sub":"mallory"}"#),
            parts[2]
        );
        assert!(!a.verify(&forged));
        assert!(!format!("{a:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_file_that_is_not_a_key_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        std::fs::write(&path, "garbage").unwrap();
        let e = SigningKey::load_or_create(&path).unwrap_err();
        assert!(e.contains("k.pem") && e.contains("not a PKCS#8"), "{e}");
    }
}
