//! Reading manifests: every input whole, each within a size limit, before anything is written.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use crate::{Error, Result};

/// The default of `--max-input-size`: a world of a thousand 3-replica clusters with ECDSA keys
/// is about 60 MiB, and RSA-4096 keys triple that.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;

/// One input document stream: where it came from (for error messages) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// A file's identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// The identity of the file `path` names (symlinks followed), when it exists.
pub fn file_id(path: &Path) -> Option<FileId> {
    fs::metadata(path).ok().map(|m| FileId {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// The identity of the regular file on stdin (`oi ... < world.yaml`), if it is one.
pub fn stdin_id() -> Option<FileId> {
    let stat = rustix::fs::fstat(io::stdin()).ok()?;
    (rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile)
        .then_some(FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        })
}

/// Reads every input fully: the `-f` files in order (`-` is `stdin`), or `stdin` alone when
/// there are none, each at most `max_bytes`. Everything is read before anything is written,
/// which is what lets `-o` name one of the inputs.
///
/// # Errors
/// When a file or stdin cannot be read, holds more than `max_bytes` or is not UTF-8, or when
/// `-` is given twice.
pub fn read_sources(
    files: &[impl AsRef<Path>],
    mut stdin: impl Read,
    max_bytes: u64,
) -> Result<Vec<Source>> {
    if files.is_empty() {
        return Ok(vec![read_one("stdin", &mut stdin, max_bytes)?]);
    }
    let mut sources = Vec::with_capacity(files.len());
    let mut stdin_used = false;
    for file in files {
        let file = file.as_ref();
        if file == Path::new("-") {
            if stdin_used {
                return Err(Error::StdinTwice);
            }
            stdin_used = true;
            sources.push(read_one("stdin", &mut stdin, max_bytes)?);
            continue;
        }
        let name = file.display().to_string();
        let read_error = |source| Error::Read {
            name: name.clone(),
            source,
        };
        let mut opened = fs::File::open(file).map_err(read_error)?;
        // A regular file says its size: refuse it before reading a byte. Devices and pipes
        // (`-f /dev/zero`) are cut off by the bounded read.
        let meta = opened.metadata().map_err(read_error)?;
        if meta.is_dir() {
            return Err(read_error(io::Error::from(io::ErrorKind::IsADirectory)));
        }
        if meta.is_file() && meta.len() > max_bytes {
            return Err(Error::TooLarge {
                name,
                limit: max_bytes,
            });
        }
        sources.push(read_one(&name, &mut opened, max_bytes)?);
    }
    Ok(sources)
}

/// Reads one stream, at most `max_bytes` of it.
fn read_one(name: &str, reader: &mut dyn Read, max_bytes: u64) -> Result<Source> {
    let mut bytes = Vec::new();
    reader
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| Error::Read {
            name: name.to_string(),
            source,
        })?;
    if bytes.len() as u64 > max_bytes {
        return Err(Error::TooLarge {
            name: name.to_string(),
            limit: max_bytes,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| Error::NotUtf8 {
        name: name.to_string(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    Ok(Source {
        name: name.to_string(),
        text,
    })
}

/// A size: a number of bytes, or with a unit `KiB`, `MiB`, `GiB` (also `K`, `M`, `G`).
///
/// # Errors
/// A message saying what was expected.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("expected a size like 256MiB or 1048576, got {s:?}"))?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        other => return Err(format!("unknown unit {other:?} (use KiB, MiB or GiB)")),
    };
    match n.checked_mul(factor) {
        Some(0) => Err("a size of 0 reads nothing".to_string()),
        Some(bytes) => Ok(bytes),
        None => Err(format!("{s} is too large")),
    }
}

/// The longest duration a flag takes: a day.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A duration flag: `500ms`, `60s`, `2m`, `1h`, or plain seconds; at most [`MAX_DURATION`].
///
/// # Errors
/// A message saying what was expected, or that it is longer than a day.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    use std::time::Duration;
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let too_long = || format!("{s} is longer than the most allowed, 24h");
    let n: u64 = match number.parse() {
        Ok(n) => n,
        // Digits only, so the number can only be too large.
        Err(_) if !number.is_empty() => return Err(too_long()),
        Err(_) => return Err(format!("expected a duration like 60s or 2m, got {s:?}")),
    };
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unknown unit {unit:?} (use ms, s, m or h)")),
    };
    let duration = n
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(too_long)?;
    if duration > MAX_DURATION {
        return Err(too_long());
    }
    Ok(duration)
}
