//! The lock beside a world file: commands that write the same file run one after the other.
//!
//! An advisory `flock` on `.NAME.lock` in the file's directory, held from before the inputs
//! are read until the output is written, so the second command reads what the first wrote.
//! The kernel releases it when its holder dies, however it dies. The holder removes the lock
//! file before it unlocks; a waiter that then gets a lock on a removed file finds the path
//! gone or naming another file, and starts again, so two commands never both hold it.

use std::fs;
use std::io::{self, Read as _, Seek as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use crate::{Error, Result};

/// A held lock; dropping it removes the lock file and releases the lock.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
    /// Open for the lock it holds (released when it closes).
    _file: fs::File,
}

impl Lock {
    /// The lock file for the file `target`: `.NAME.lock` in its directory.
    pub fn path_for(target: &Path) -> PathBuf {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        target.with_file_name(format!(".{name}.lock"))
    }

    /// Takes the lock of `target`, waiting as long as another command holds it; `waiting` is
    /// called once, with what the holder wrote into the lock file, before the wait. `holder`
    /// is what this process writes there (its pid and command).
    ///
    /// # Errors
    /// [`Error::Lock`] when the lock file cannot be opened or locked.
    pub fn acquire(target: &Path, holder: &str, mut waiting: impl FnMut(&str)) -> Result<Lock> {
        let path = Self::path_for(target);
        let error = |source: io::Error| Error::Lock {
            lock: path.clone(),
            source,
        };
        let mut told = false;
        loop {
            let mut file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(error)?;
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    if !told {
                        told = true;
                        let mut held_by = String::new();
                        // Best effort: the holder may be writing it right now.
                        let _ = file.read_to_string(&mut held_by);
                        waiting(held_by.trim());
                    }
                    rustix::fs::flock(&file, FlockOperation::LockExclusive)
                        .map_err(|e| error(e.into()))?;
                }
                Err(e) => return Err(error(e.into())),
            }
            // The holder before us may have removed the file we locked; then try again.
            let ours = file.metadata().map_err(error)?;
            match fs::metadata(&path) {
                Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() => {
                    file.set_len(0).map_err(error)?;
                    file.rewind().map_err(error)?;
                    file.write_all(format!("{holder}\n").as_bytes())
                        .map_err(error)?;
                    return Ok(Lock { path, _file: file });
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(error(e)),
            }
        }
    }

    /// Where the lock file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Removed while still locked (see the module documentation); the lock goes with the
        // descriptor right after. Failing to remove it only leaves an empty file behind.
        let _ = fs::remove_file(&self.path);
    }
}
