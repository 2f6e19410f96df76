//! Project tasks. `cargo xtask images` builds the offline image set: OCI image-layout tarballs
//! made from this machine's Debian binaries, with no registry and no Docker engine.
//!
//! ```text
//! catalog (oi_api::versions)  ->  RootFs (files, dirs, symlinks; ldd libraries)
//!                             ->  one deterministic layer tar (sorted, mtime 0, uid/gid 0), gzip
//!                             ->  config + manifest + index.json + oci-layout
//!                             ->  DIR/<short>_<tag>.tar (temp file + rename), DIR/<..>.tar.inputs
//! ```
//!
//! Identical inputs give identical bytes, hence identical digests; an image whose recorded
//! inputs digest is unchanged is not rebuilt.

pub mod build;
pub mod catalog;
pub mod layout;
pub mod ldd;
pub mod links;
pub mod oci;
pub mod rootfs;

use std::path::PathBuf;

/// The repository every offline image lives under: the versions table's override.
pub const REPOSITORY: &str = "localhost/oneinfra";

/// The environment variable naming the output directory of the image tarballs.
pub use oi_testsupport::IMAGES_DIR_ENV;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    oi_testsupport::workspace_root()
}

/// Where the tarballs go: `$OI_IMAGES_DIR`, else `<workspace>/target/oi-images`; the
/// directory every test that imports images reads (`oi_testsupport::images_dir`).
pub fn default_images_dir() -> PathBuf {
    oi_testsupport::images_dir()
}

/// Errors of the image build.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} {args} failed ({status}): {stderr}")]
    CommandFailed {
        program: String,
        args: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("ldd {binary}: library {library} not found")]
    LibraryNotFound { binary: PathBuf, library: String },
    #[error("ldd {binary}: cannot parse line {line:?}")]
    LddLine { binary: PathBuf, line: String },
    #[error("image {image}: path {path} is already taken by a different entry")]
    PathConflict { image: String, path: String },
    #[error("image {image}: invalid path {path:?} (absolute paths without `..` only)")]
    InvalidPath { image: String, path: String },
    #[error("image {image}: required host file {path} is missing (run scripts/setup.sh)")]
    MissingHostFile { image: String, path: PathBuf },
    #[error("no image matches --only {name:?}; known: {known}")]
    UnknownImage { name: String, known: String },
    #[error("cargo build of {package} produced no executable {binary}")]
    NoArtifact { package: String, binary: String },
    #[error("serialize {what}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { op, path, source }
}
