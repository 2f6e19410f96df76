//! Times `create --size-private 3 --size-public 1` and `destroy` of a real set, three times,
//! and prints the medians. Needs root, the host commands and the offline images:
//!
//! ```text
//! cargo run --release -p oi-local-hypervisor-set --example create_destroy [-- --tcp]
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use oi_local_hypervisor_set::Paths;
use oi_local_hypervisor_set::commands::{self, CreateArgs};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let tcp = std::env::args().any(|a| a == "--tcp");
    let images_dir = std::env::var_os("OI_IMAGES_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/oi-images"),
        PathBuf::from,
    );
    let paths = Paths::default();
    let (mut creates, mut destroys) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let args = CreateArgs {
            name: format!("bench{}-{round}", std::process::id() % 100_000),
            private: 3,
            public: 1,
            tcp,
            images_dir: images_dir.clone(),
            workers: 0,
        };
        let started = Instant::now();
        commands::create(&paths, &args, &mut std::io::sink(), &mut std::io::sink())
            .with_context(|| format!("create {}", args.name))?;
        let created = started.elapsed();
        let started = Instant::now();
        commands::destroy(&paths, &args.name, &mut std::io::sink())
            .with_context(|| format!("destroy {}", args.name))?;
        let destroyed = started.elapsed();
        eprintln!(
            "round {round}: create {:.2}s, destroy {:.2}s",
            created.as_secs_f64(),
            destroyed.as_secs_f64()
        );
        creates.push(created);
        destroys.push(destroyed);
    }
    println!(
        "3 private + 1 public{}: create median {:.2}s, destroy median {:.2}s (3 rounds)",
        if tcp { " (--tcp)" } else { "" },
        median(creates).as_secs_f64(),
        median(destroys).as_secs_f64()
    );
    Ok(())
}
