//! Where a command's output goes: decided and checked before the command does anything.

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::input::{FileId, file_id};
use crate::{Error, Lock, Refusal, Result};

/// The output of a command, resolved from `-o`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// No `-o`, `-o -`, `-o /dev/stdout`, `-o /dev/fd/1`.
    Stdout,
    /// `-o /dev/stderr`, `-o /dev/fd/2`.
    Stderr,
    /// A FIFO or a character device (`/dev/null`, a terminal): written through, as a shell
    /// redirection would.
    Through { path: PathBuf },
    /// A regular file, existing or new, replaced atomically. `path` is the file itself (a
    /// symlink given with `-o` is followed: the link stays, its target is replaced).
    Replace { path: PathBuf },
}

/// A file descriptor the path names by its spelling (`/dev/stdout`, `/dev/fd/N`,
/// `/proc/self/fd/N`): following those links would reach whatever the descriptor is open
/// on, a pipe or a file that the shell opened, which must be written through the descriptor.
fn descriptor(path: &Path) -> Option<String> {
    let s = path.to_str()?;
    match s {
        "/dev/stdin" => return Some("0".to_string()),
        "/dev/stdout" => return Some("1".to_string()),
        "/dev/stderr" => return Some("2".to_string()),
        _ => {}
    }
    ["/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"]
        .iter()
        .find_map(|prefix| s.strip_prefix(prefix))
        .map(str::to_string)
}

/// Whether the regular file at `path` holds Kubernetes manifests: within its first 64 KiB, a
/// line starting with `apiVersion:` and one starting with `kind:` (as every manifest has),
/// a kind other than `Config`: a kubeconfig (`kind: Config`, what `oi cluster
/// admin-kubeconfig` writes) is not manifests, so writing it again may replace it. A file
/// that cannot be read holds none.
pub fn holds_manifests(path: &Path) -> bool {
    use std::io::Read as _;
    let Ok(file) = fs::File::open(path) else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = Vec::new();
    if file.take(64 * 1024).read_to_end(&mut head).is_err() {
        return false;
    }
    let text = String::from_utf8_lossy(&head);
    let starts = |key: &str| {
        text.lines()
            .any(|l| l.trim_start_matches("- ").starts_with(key))
    };
    let kind_not_config = text.lines().any(|l| {
        l.trim_start_matches("- ")
            .strip_prefix("kind:")
            .is_some_and(|kind| kind.trim().trim_matches(['"', '\'']) != "Config")
    });
    starts("apiVersion:") && kind_not_config
}

/// The directory a file is (or would be) in.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

impl Target {
    /// Resolves `-o` (`None` is stdout) and checks, before the command does any work, that
    /// the output can be written there without destroying anything.
    ///
    /// # Errors
    /// [`Error::Refused`] for a directory, a socket, a block device, a dangling symlink, a
    /// read-only file, stdin or another file descriptor, a missing directory;
    /// [`Error::Unusable`] when its directory cannot be written.
    pub fn resolve(given: Option<&Path>) -> Result<Target> {
        let Some(given) = given else {
            return Ok(Target::Stdout);
        };
        let refused = |reason| Error::Refused {
            path: given.to_path_buf(),
            reason,
        };
        let unusable = |what: &str, source| Error::Unusable {
            path: given.to_path_buf(),
            what: what.to_string(),
            source,
        };
        if given == Path::new("-") {
            return Ok(Target::Stdout);
        }
        if let Some(fd) = descriptor(given) {
            return match fd.as_str() {
                "1" => Ok(Target::Stdout),
                "2" => Ok(Target::Stderr),
                "0" => Err(refused(Refusal::Stdin)),
                _ => Err(refused(Refusal::FileDescriptor { fd })),
            };
        }
        let (path, meta) = match fs::symlink_metadata(given) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let dir = directory_of(given);
                if !fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
                    return Err(refused(Refusal::NoDirectory {
                        dir: dir.to_path_buf(),
                    }));
                }
                probe_directory(given, dir)?;
                return Ok(Target::Replace {
                    path: given.to_path_buf(),
                });
            }
            Err(e) => return Err(unusable("cannot be inspected", e)),
            Ok(link) if link.file_type().is_symlink() => match fs::metadata(given) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(refused(Refusal::DanglingSymlink {
                        target: fs::read_link(given).unwrap_or_default(),
                    }));
                }
                Err(e) => return Err(unusable("cannot be inspected", e)),
                Ok(meta) => {
                    let real = fs::canonicalize(given)
                        .map_err(|e| unusable("its symlink cannot be resolved", e))?;
                    (real, meta)
                }
            },
            Ok(meta) => (given.to_path_buf(), meta),
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            return Err(refused(Refusal::Directory));
        }
        if kind.is_socket() {
            return Err(refused(Refusal::Socket));
        }
        if kind.is_block_device() {
            return Err(refused(Refusal::BlockDevice));
        }
        if kind.is_fifo() || kind.is_char_device() {
            return Ok(Target::Through { path });
        }
        let mode = meta.permissions().mode();
        if mode & 0o222 == 0 {
            return Err(refused(Refusal::ReadOnly {
                mode: mode & 0o7777,
            }));
        }
        probe_directory(given, directory_of(&path))?;
        Ok(Target::Replace { path })
    }

    /// The identity of the file written, when it exists now.
    pub fn file_id(&self) -> Option<FileId> {
        match self {
            Target::Through { path } | Target::Replace { path } => file_id(path),
            Target::Stdout | Target::Stderr => None,
        }
    }

    /// Refuses a target that is one of `inputs` (their names and identities), for commands
    /// whose output is not manifests: writing it there would replace the world.
    ///
    /// # Errors
    /// [`Error::Refused`] with [`Refusal::IsAnInput`].
    pub fn refuse_if_input(&self, given: &Path, inputs: &[(String, FileId)]) -> Result<()> {
        let Some(id) = self.file_id() else {
            return Ok(());
        };
        match inputs.iter().find(|(_, input)| *input == id) {
            Some((name, _)) => Err(Error::Refused {
                path: given.to_path_buf(),
                reason: Refusal::IsAnInput {
                    input: name.clone(),
                },
            }),
            None => Ok(()),
        }
    }

    /// Refuses a file that holds manifests ([`holds_manifests`]), for commands whose output
    /// is not manifests: writing there would replace a world.
    ///
    /// # Errors
    /// [`Error::Refused`] with [`Refusal::HoldsManifests`].
    pub fn refuse_if_manifests(&self, given: &Path) -> Result<()> {
        match self {
            Target::Replace { path } if holds_manifests(path) => Err(Error::Refused {
                path: given.to_path_buf(),
                reason: Refusal::HoldsManifests,
            }),
            _ => Ok(()),
        }
    }

    /// Takes the target's lock (a file replaced; nothing for the others) and notes what the
    /// file holds now, so that [`Guard::write`] can tell whether something else changed it.
    /// `holder` is written into the lock file for a command that has to wait; `waiting` is
    /// called with the current holder's words when this one has to.
    ///
    /// # Errors
    /// [`Error::Lock`]; [`Error::Unusable`] when the file cannot be read.
    pub fn lock(self, holder: &str, waiting: impl FnMut(&str)) -> Result<Guard> {
        let (lock, digest) = match &self {
            Target::Replace { path } => {
                let lock = Lock::acquire(path, holder, waiting)?;
                let digest = digest(path).map_err(|source| Error::Unusable {
                    path: path.clone(),
                    what: "cannot be read".to_string(),
                    source,
                })?;
                (Some(lock), digest)
            }
            _ => (None, None),
        };
        Ok(Guard {
            target: self,
            _lock: lock,
            digest,
        })
    }
}

/// Checks that files can be created in `dir` by creating one and removing it: permissions,
/// a read-only file system, a full inode table all show here, before the command's work.
fn probe_directory(given: &Path, dir: &Path) -> Result<()> {
    tempfile::Builder::new()
        .prefix(".oi-probe-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|source| Error::Unusable {
            path: given.to_path_buf(),
            what: format!("cannot create files in its directory {}", dir.display()),
            source,
        })
}

/// The SHA-256 of a file's contents, `None` when it does not exist.
fn digest(path: &Path) -> io::Result<Option<[u8; 32]>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(Sha256::digest(&bytes).into())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A resolved target, locked when it is a file to replace.
#[derive(Debug)]
pub struct Guard {
    target: Target,
    /// Held until the guard is dropped.
    _lock: Option<Lock>,
    digest: Option<[u8; 32]>,
}

impl Guard {
    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Writes the command's whole output (see [`Target`]). A file to replace that changed
    /// since [`Target::lock`] is left alone, and the output goes to `NAME.conflict` beside it.
    ///
    /// # Errors
    /// [`Error::Changed`]; [`Error::Write`], the file then left as it was.
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        let write_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Write { path, source }
        };
        match &self.target {
            Target::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(bytes)
                    .and_then(|()| out.flush())
                    .map_err(write_error(Path::new("stdout")))
            }
            Target::Stderr => {
                let mut out = io::stderr().lock();
                out.write_all(bytes)
                    .and_then(|()| out.flush())
                    .map_err(write_error(Path::new("stderr")))
            }
            Target::Through { path } => fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|mut f| f.write_all(bytes).and_then(|()| f.flush()))
                .map_err(write_error(path)),
            Target::Replace { path } => {
                let now = digest(path).map_err(write_error(path))?;
                if now != self.digest {
                    let name = path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let kept = path.with_file_name(format!("{name}.conflict"));
                    write_atomically(&kept, bytes).map_err(write_error(&kept))?;
                    return Err(Error::Changed {
                        path: path.clone(),
                        kept,
                    });
                }
                write_atomically(path, bytes).map_err(write_error(path))
            }
        }
    }
}

/// Replaces `path` with `contents` (mode 0600: manifests hold private keys); see
/// [`write_file`].
fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    replace(path, contents, 0o600)
}

/// Replaces `path` with `contents` so that readers see either the old file or the whole new
/// one, never a part, with `mode` from the file's creation (a key is never readable by others,
/// not even for a moment), its directory made when missing. For files of the machine a
/// command sets up (keys, certificates, configuration), not for `-o` (see [`Target`]).
///
/// # Errors
/// The I/O error of the first step that failed.
pub fn write_file(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    fs::create_dir_all(directory_of(path))?;
    replace(path, contents, mode)
}

/// A temporary file in the same directory (same file system, so the rename is atomic; a
/// unique random name, so concurrent writers never share one; `mode` from its creation),
/// fsync, rename over `path`, fsync the directory.
fn replace(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let dir = directory_of(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(".oi-")
        .suffix(".tmp")
        .permissions(fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself is durable only once the directory is synced.
    fs::File::open(dir)?.sync_all()
}

impl Error {
    /// Whether this is a write to a reader that went away (`oi ... | head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Write { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
    }
}
