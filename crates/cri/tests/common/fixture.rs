//! Shared fixture of the tests against real containerd: a private containerd instance in a
//! temporary directory with the offline pause and busybox images imported. Dropping the
//! fixture stops every pod and the daemon (also when the test panics).

#![allow(dead_code)] // each test crate uses a different part

use std::path::PathBuf;
use std::time::Duration;

use oi_cri::containerd::{Containerd, ContainerdConfig, SpawnOptions};
use oi_cri::{ClientOptions, CriClient};

pub const PAUSE: &str = "localhost/oneinfra/pause:3.10.1";
pub const BUSYBOX: &str = "localhost/oneinfra/busybox:1.36.1";

/// Where the offline image tarballs are: `OI_IMAGES_DIR` or `<workspace>/target/oi-images`.
pub fn images_dir() -> PathBuf {
    oi_testsupport::images_dir()
}

/// The tarballs the fixture imports, when root, the commands and the tarballs are there;
/// `None` (after a loud SKIPPED banner, or a panic under `OI_REQUIRE_REAL=1`) otherwise.
pub fn prerequisites(test: &str) -> Option<Vec<PathBuf>> {
    if !oi_testsupport::require_root_and_commands(test, &["containerd", "runc", "ctr"]) {
        return None;
    }
    let dir = images_dir();
    let files = vec![dir.join("pause_3.10.1.tar"), dir.join("busybox_1.36.1.tar")];
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !f.is_file())
        .map(|f| f.display().to_string())
        .collect();
    oi_testsupport::require(
        test,
        &format!(
            "image tarballs ({}; build them with `cargo xtask images`)",
            missing.join(", ")
        ),
        missing.is_empty(),
    )
    .then_some(files)
}

pub struct Fixture {
    // Fields drop in order: the daemon (and its pods) before the directory.
    pub containerd: Containerd,
    pub client: CriClient,
    pub options: ClientOptions,
    pub dir: tempfile::TempDir,
}

impl Fixture {
    /// Starts containerd and connects a client; `None` when prerequisites are missing.
    pub async fn start(test: &str) -> Option<Fixture> {
        let images = prerequisites(test)?;
        let dir = tempfile::Builder::new()
            .prefix("oi-cri-")
            .tempdir()
            .unwrap();
        let config = ContainerdConfig::in_dir(dir.path(), PAUSE);
        let containerd = Containerd::spawn(config, SpawnOptions::in_dir(dir.path()))
            .await
            .unwrap();
        containerd.import_images(&images).await.unwrap();
        let options = ClientOptions {
            connect_timeout: Duration::from_secs(3),
            call_timeout: Duration::from_secs(30),
            toolbox_image: BUSYBOX.to_string(),
            log_root: dir.path().join("logs").to_string_lossy().into_owned(),
            ..ClientOptions::default()
        };
        let client = CriClient::connect(test, containerd.endpoint(), options.clone())
            .await
            .unwrap();
        Some(Fixture {
            containerd,
            client,
            options,
            dir,
        })
    }
}
