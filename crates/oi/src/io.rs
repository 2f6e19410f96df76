//! Reading manifests and writing output: the only file system access of `oi`.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use anyhow::Context as _;

/// One input document stream: where it came from (for error messages) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// Reads every input fully: the `-f` files in order (`-` is `stdin`), or `stdin` alone when
/// there are none. Everything is read before anything is written, which is what lets `-o`
/// name one of the inputs.
///
/// # Errors
/// When a file or stdin cannot be read or is not UTF-8, or when `-` is given twice.
pub fn read_sources(
    files: &[impl AsRef<Path>],
    mut stdin: impl Read,
) -> anyhow::Result<Vec<Source>> {
    let read_stdin = |stdin: &mut dyn Read| -> anyhow::Result<Source> {
        let mut text = String::new();
        stdin
            .read_to_string(&mut text)
            .context("cannot read manifests from stdin")?;
        Ok(Source {
            name: "stdin".to_string(),
            text,
        })
    };
    if files.is_empty() {
        return Ok(vec![read_stdin(&mut stdin)?]);
    }
    let mut sources = Vec::with_capacity(files.len());
    let mut stdin_used = false;
    for file in files {
        let file = file.as_ref();
        if file == Path::new("-") {
            anyhow::ensure!(!stdin_used, "`-f -` (stdin) given more than once");
            stdin_used = true;
            sources.push(read_stdin(&mut stdin)?);
        } else {
            let text = fs::read_to_string(file)
                .with_context(|| format!("cannot read manifests from {}", file.display()))?;
            sources.push(Source {
                name: file.display().to_string(),
                text,
            });
        }
    }
    Ok(sources)
}

/// Writes a command's whole output: to stdout, or atomically to `path`.
///
/// # Errors
/// When stdout or the file cannot be written; an existing file is then left as it was.
pub fn emit(output: &[u8], path: Option<&Path>) -> anyhow::Result<()> {
    match path {
        None => {
            let mut stdout = io::stdout().lock();
            stdout.write_all(output)?;
            stdout.flush()?;
            Ok(())
        }
        Some(path) => write_atomically(path, output)
            .with_context(|| format!("cannot write {}", path.display())),
    }
}

/// Replaces `path` with `contents` so that readers see either the old file or the whole new
/// one, never a part: a temporary file in the same directory (same file system, so the
/// rename is atomic), fsync, rename over `path`, fsync the directory. The file is created
/// with mode 0600 because manifests hold private keys.
fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // tempfile creates its files with mode 0600 on unix.
    let mut tmp = tempfile::Builder::new()
        .prefix(".oi-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself is durable only once the directory is synced.
    fs::File::open(dir)?.sync_all()
}

/// Whether an error comes from writing to a closed pipe.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn stdin_when_no_files() {
        let files: [&str; 0] = [];
        let sources = read_sources(&files, "kind: X\n".as_bytes()).unwrap();
        assert_eq!(
            sources,
            vec![Source {
                name: "stdin".into(),
                text: "kind: X\n".into()
            }]
        );
    }

    #[test]
    fn files_in_order_with_dash_as_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.yaml");
        fs::write(&a, "a: 1\n").unwrap();
        let files = [a.clone(), "-".into()];
        let sources = read_sources(&files, "b: 2\n".as_bytes()).unwrap();
        let names: Vec<_> = sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [a.display().to_string().as_str(), "stdin"]);
        assert_eq!(sources[1].text, "b: 2\n");

        let twice = read_sources(&["-", "-"], "".as_bytes()).unwrap_err();
        assert_eq!(twice.to_string(), "`-f -` (stdin) given more than once");
    }

    #[test]
    fn missing_file_is_named() {
        let err = read_sources(&["/nonexistent/x.yaml"], io::empty()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read manifests from /nonexistent/x.yaml"
        );
    }

    #[test]
    fn atomic_write_replaces_with_mode_0600_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.yaml");
        fs::write(&out, "old").unwrap();
        fs::set_permissions(&out, fs::Permissions::from_mode(0o644)).unwrap();
        emit(b"new\n", Some(&out)).unwrap();
        assert_eq!(fs::read_to_string(&out).unwrap(), "new\n");
        let mode = fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let entries: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(entries.len(), 1);
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let err = emit(b"x", Some(Path::new("/nonexistent-dir/out.yaml"))).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot write /nonexistent-dir/out.yaml")
        );
    }

    #[test]
    fn broken_pipe_is_recognised_through_context() {
        let err = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("writing output");
        assert!(is_broken_pipe(&err));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
