//! Times the checks of stored key material: `cargo run -p oi-pki --release --example
//! check_timing [-- RUNS]` (default 2000). Prints the mean time of each part of
//! `check_leaf` (parse, key, signature) and of `check_ca`, for an ECDSA P-256 leaf.

use std::time::Instant;

use oi_pki::{CertificateAuthority, KeyAlgorithm, LeafSpec};
use time::{Duration, OffsetDateTime};

fn main() {
    let runs: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let now = OffsetDateTime::now_utc();
    let Ok(ca) =
        CertificateAuthority::generate("ca", KeyAlgorithm::EcdsaP256, now, Duration::days(10))
    else {
        eprintln!("cannot generate a CA");
        std::process::exit(1);
    };
    let Ok(leaf) = ca.issue(&LeafSpec::admin(), now, Duration::days(1)) else {
        eprintln!("cannot issue a leaf");
        std::process::exit(1);
    };
    let time = |label: &str, f: &dyn Fn() -> bool| {
        let start = Instant::now();
        for _ in 0..runs {
            assert!(f(), "{label} failed");
        }
        println!(
            "{label:<28} {:>8.1} µs",
            start.elapsed().as_secs_f64() * 1e6 / f64::from(runs)
        );
    };
    time("inspect_certificate", &|| {
        oi_pki::inspect_certificate(&leaf.certificate_pem).is_ok()
    });
    time("is_signed_by", &|| {
        oi_pki::is_signed_by(&leaf.certificate_pem, ca.certificate_pem()).unwrap_or(false)
    });
    time("check_leaf without CA", &|| {
        oi_pki::check_leaf(&leaf.certificate_pem, &leaf.private_key_pem, None).is_ok()
    });
    time("check_leaf with CA", &|| {
        oi_pki::check_leaf(
            &leaf.certificate_pem,
            &leaf.private_key_pem,
            Some(ca.certificate_pem()),
        )
        .is_ok()
    });
    time("check_ca", &|| {
        oi_pki::check_ca(ca.certificate_pem(), ca.private_key_pem(), now).is_ok()
    });
}
