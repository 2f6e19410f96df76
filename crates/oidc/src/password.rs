//! Password hashes: PBKDF2-HMAC-SHA256 in the PHC string format (parsed by
//! [`oi_api::oidc::parse_hash`]); verification is constant time (ring's).

use std::num::NonZeroU32;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use oi_api::oidc::{HASH_BYTES, HASH_PREFIX, HashParts, MIN_ITERATIONS};
use ring::pbkdf2;
use ring::rand::{SecureRandom, SystemRandom};

/// What [`hash`] uses (OWASP's 2023 figure for PBKDF2-HMAC-SHA256).
pub const DEFAULT_ITERATIONS: u32 = 600_000;
const SALT_BYTES: usize = 16;

/// Whether `password` is the one hashed in `parts`.
pub fn verify(parts: &HashParts, password: &str) -> bool {
    pbkdf2::verify(
        pbkdf2::PBKDF2_HMAC_SHA256,
        parts.iterations,
        &parts.salt,
        password.as_bytes(),
        &parts.hash,
    )
    .is_ok()
}

/// Hashes `password` with a fresh random salt and `iterations` (at least `MIN_ITERATIONS`).
///
/// # Errors
/// When the system's random source fails or `iterations` is too low.
pub fn hash(password: &str, iterations: u32) -> Result<String, String> {
    let n = NonZeroU32::new(iterations)
        .filter(|n| n.get() >= MIN_ITERATIONS)
        .ok_or_else(|| {
            format!("{iterations} iterations: at least {MIN_ITERATIONS} are required")
        })?;
    let mut salt = [0u8; SALT_BYTES];
    SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| "the system's random source failed".to_string())?;
    let mut out = [0u8; HASH_BYTES];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        n,
        &salt,
        password.as_bytes(),
        &mut out,
    );
    Ok(format!(
        "{HASH_PREFIX}i={iterations}${}${}",
        B64.encode(salt),
        B64.encode(out)
    ))
}

#[cfg(test)]
mod tests {
    use oi_api::oidc::parse_hash;

    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let h = hash("correct horse", MIN_ITERATIONS).unwrap();
        assert!(h.starts_with("$pbkdf2-sha256$i=10000$"));
        let parsed = parse_hash(&h).unwrap();
        assert!(verify(&parsed, "correct horse"));
        assert!(!verify(&parsed, "correct horsf"));
        assert!(!verify(&parsed, ""));
        // Two hashes of one password differ (fresh salt) and both verify.
        let again = hash("correct horse", MIN_ITERATIONS).unwrap();
        assert_ne!(h, again);
        assert!(verify(&parse_hash(&again).unwrap(), "correct horse"));
        assert!(hash("x", 5).is_err());
    }

    #[test]
    fn a_known_vector_verifies() {
        // Made with Python: hashlib.pbkdf2_hmac('sha256', b'password', b'saltsalt', 10000).
        let h = "$pbkdf2-sha256$i=10000$c2FsdHNhbHQ$8AsC4H/147lFlEEMCnL1JMziEIWaSGvXLB7jM4MIJaM";
        let parsed = parse_hash(h).unwrap();
        assert!(verify(&parsed, "password"));
        assert!(!verify(&parsed, "Password"));
    }
}
