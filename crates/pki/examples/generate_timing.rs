//! Times `ClusterPki::generate`: `cargo run -p oi-pki --release --example generate_timing
//! [-- RUNS [ALGORITHM...]]` (default 20 runs of ecdsa-p256). Prints the median, minimum and
//! maximum per algorithm, and the median of wrapping plus unwrapping a symmetric key with the
//! join key; nothing secret.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use oi_pki::{ClusterPki, KeyAlgorithm, SymmetricKey};
use time::OffsetDateTime;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = match args.first().map(|a| a.parse::<usize>()) {
        None => 20,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: generate_timing [RUNS [ALGORITHM...]]");
            return ExitCode::from(2);
        }
    };
    let algorithms: Result<Vec<KeyAlgorithm>, _> = if args.len() > 1 {
        args[1..].iter().map(|a| a.parse()).collect()
    } else {
        Ok(vec![KeyAlgorithm::EcdsaP256])
    };
    let algorithms = match algorithms {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for algorithm in algorithms {
        let mut times: Vec<Duration> = Vec::with_capacity(runs);
        let mut join_times: Vec<Duration> = Vec::with_capacity(runs);
        for _ in 0..runs {
            let started = Instant::now();
            let generated = ClusterPki::generate(
                "timing",
                algorithm,
                OffsetDateTime::now_utc(),
                time::Duration::days(3650),
            );
            times.push(started.elapsed());
            let pki = match generated {
                Ok(pki) => pki,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let key = SymmetricKey::generate();
            let started = Instant::now();
            let round_trip = key.wrap(&pki.join_key.public_key_pem).and_then(|wrapped| {
                SymmetricKey::unwrap_with(&pki.join_key.private_key_pem, &wrapped)
            });
            join_times.push(started.elapsed());
            match round_trip {
                Ok(unwrapped) if unwrapped == key => {}
                Ok(_) => {
                    eprintln!("error: the join key round trip changed the key");
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        times.sort();
        join_times.sort();
        println!(
            "ClusterPki::generate({algorithm}): median {:?}, min {:?}, max {:?} over {runs} runs",
            times[runs / 2],
            times[0],
            times[runs - 1]
        );
        println!(
            "join key wrap + unwrap ({algorithm}): median {:?}",
            join_times[runs / 2]
        );
    }
    ExitCode::SUCCESS
}
