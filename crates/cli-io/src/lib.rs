//! How `oi` and `oi-local-hypervisor-set` read manifests and write their output, so that no
//! ordinary mistake loses, corrupts or leaks a world file: manifests hold every CA private key
//! of every cluster.
//!
//! ```text
//!  -o PATH ──Target::resolve──► Stdout | Stderr          (-, /dev/stdout, /dev/fd/1, ...)
//!   (before any work)           Through(PATH)            (a FIFO, a character device)
//!                               Replace(PATH)            (a regular file, or a new one; a
//!                                  │                      symlink is followed, never replaced)
//!                                  │ refused up front: a directory, a socket, a block device,
//!                                  │ a dangling symlink, a read-only file, a directory that
//!                                  │ cannot be written
//!                                  ▼
//!                      Target::lock: `.NAME.lock` beside PATH (flock; a second command waits,
//!                      told who holds it), and PATH's digest as it is now
//!  read_sources: -f FILE... or stdin, each at most --max-input-size
//!  the command runs, its output in a buffer
//!  Guard::write ──► Replace: PATH changed since the lock (an editor, not an oi command)?
//!                       refuse, the output kept in NAME.conflict; else a temporary file
//!                       (0600 from its creation, a unique name) + fsync + rename + fsync dir
//!                   Through: opened for writing (no create, no truncate), written
//! ```
//!
//! Nothing is written unless the command succeeded, and an existing file is then replaced
//! whole or not at all.

mod input;
mod lock;
mod output;

use std::fmt;
use std::io;
use std::path::PathBuf;

pub use input::{
    DEFAULT_MAX_INPUT_BYTES, FileId, MAX_DURATION, Source, file_id, parse_duration, parse_size,
    read_sources, stdin_id,
};
pub use lock::Lock;
pub use output::{Guard, Target, holds_manifests, write_file};

/// Why an `-o` target is refused before any work starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A directory.
    Directory,
    /// A socket.
    Socket,
    /// A block device (writing a world over a disk would destroy it).
    BlockDevice,
    /// A symlink whose target does not exist.
    DanglingSymlink { target: PathBuf },
    /// A regular file nobody may write (mode without any write bit).
    ReadOnly { mode: u32 },
    /// Standard input.
    Stdin,
    /// A file descriptor other than 1 and 2.
    FileDescriptor { fd: String },
    /// The directory it would be created in does not exist or is not a directory.
    NoDirectory { dir: PathBuf },
    /// It is one of the command's inputs, and the command does not print manifests.
    IsAnInput { input: String },
    /// It holds Kubernetes manifests, and the command does not print manifests.
    HoldsManifests,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Directory => f.write_str("is a directory"),
            Refusal::Socket => f.write_str("is a socket"),
            Refusal::BlockDevice => f.write_str("is a block device"),
            Refusal::DanglingSymlink { target } => write!(
                f,
                "is a symlink to {}, which does not exist (nothing is created through a dangling symlink)",
                target.display()
            ),
            Refusal::ReadOnly { mode } => write!(
                f,
                "is read-only (mode {mode:04o}); make it writable or choose another file"
            ),
            Refusal::Stdin => f.write_str("is standard input"),
            Refusal::FileDescriptor { fd } => write!(
                f,
                "names file descriptor {fd}; only 1 (stdout) and 2 (stderr) can be written to"
            ),
            Refusal::NoDirectory { dir } => {
                write!(f, "its directory {} does not exist", dir.display())
            }
            Refusal::IsAnInput { input } => write!(
                f,
                "is also an input ({input}), and this command does not print manifests: its output would replace them"
            ),
            Refusal::HoldsManifests => f.write_str(
                "holds manifests, and this command does not print manifests: its output would replace them (choose another file)",
            ),
        }
    }
}

/// Errors of reading inputs and writing outputs; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// stdin is a terminal and no `-f FILE` was given.
    #[error(
        "no manifests to read: stdin is a terminal and no -f FILE was given (pipe manifests in, or start from an empty world with -f /dev/null)"
    )]
    NoInput,
    /// `-f -` twice.
    #[error("`-f -` (stdin) given more than once")]
    StdinTwice,
    /// An input could not be read.
    #[error("cannot read manifests from {name}")]
    Read {
        name: String,
        #[source]
        source: io::Error,
    },
    /// An input is larger than the limit.
    #[error(
        "{name} holds more than {limit} bytes of manifests (--max-input-size {limit}); raise the limit if it really is a world this large"
    )]
    TooLarge { name: String, limit: u64 },
    /// An input is not UTF-8.
    #[error("{name} is not UTF-8 text (at byte {offset})")]
    NotUtf8 { name: String, offset: usize },
    /// The output target is refused.
    #[error("-o {}: {reason}", path.display())]
    Refused { path: PathBuf, reason: Refusal },
    /// The output target's metadata cannot be read, or its directory cannot be written.
    #[error("-o {}: {what}", path.display())]
    Unusable {
        path: PathBuf,
        what: String,
        #[source]
        source: io::Error,
    },
    /// The lock beside the output cannot be taken.
    #[error("cannot lock {}", lock.display())]
    Lock {
        lock: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The output file changed while the command ran, by a writer that did not take its lock.
    #[error(
        "{} changed while this command ran (another program wrote it without oi's lock); it was left as it is, and this command's output is in {}: look at both, then rerun the command",
        path.display(),
        kept.display()
    )]
    Changed { path: PathBuf, kept: PathBuf },
    /// The output could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
