//! `oi join-token inject` and `oi join-token generate`: Kubernetes bootstrap tokens
//! (`[a-z0-9]{6}.[a-z0-9]{16}`, token id and secret), which worker nodes join clusters with.

pub mod generate;
pub mod inject;

use rand::Rng;

const TOKEN_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
const TOKEN_ID_LEN: usize = 6;
const TOKEN_SECRET_LEN: usize = 16;

/// A new bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`, each character uniformly drawn.
pub fn generate_token(rng: &mut impl Rng) -> String {
    let mut pick = |n: usize| -> String {
        (0..n)
            .map(|_| char::from(TOKEN_ALPHABET[rng.gen_range(0..TOKEN_ALPHABET.len())]))
            .collect()
    };
    let id = pick(TOKEN_ID_LEN);
    let secret = pick(TOKEN_SECRET_LEN);
    format!("{id}.{secret}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng as _;
    use rand_chacha::ChaCha20Rng;

    fn is_bootstrap_token(t: &str) -> bool {
        let ok = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        t.split_once('.')
            .is_some_and(|(id, secret)| ok(id, 6) && ok(secret, 16))
    }

    #[test]
    fn tokens_have_the_bootstrap_shape_and_differ() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let tokens: Vec<_> = (0..100).map(|_| generate_token(&mut rng)).collect();
        for t in &tokens {
            assert!(is_bootstrap_token(t), "{t}");
        }
        let mut unique = tokens.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), tokens.len());
    }

    #[test]
    fn same_seed_same_token() {
        let a = generate_token(&mut ChaCha20Rng::seed_from_u64(1));
        let b = generate_token(&mut ChaCha20Rng::seed_from_u64(1));
        let c = generate_token(&mut ChaCha20Rng::seed_from_u64(2));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
