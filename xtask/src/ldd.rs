//! The shared libraries of a dynamic executable, as `ldd` resolves them on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result};

/// The absolute paths `ldd` resolves for `binary`, the dynamic loader included, in `ldd`'s
/// order. Empty for a static executable.
///
/// # Errors
/// When `ldd` cannot run, reports a library as not found, or prints a line we cannot read.
pub fn libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|source| Error::Spawn {
            program: "ldd".into(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if is_static(&stdout) || is_static(&stderr) {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        return Err(Error::CommandFailed {
            program: "ldd".into(),
            args: binary.display().to_string(),
            status: out.status,
            stderr: stderr.trim().to_string(),
        });
    }
    parse(binary, &stdout)
}

fn is_static(text: &str) -> bool {
    text.contains("not a dynamic executable") || text.contains("statically linked")
}

/// Parses `ldd` output. Lines look like:
///
/// ```text
///     linux-vdso.so.1 (0x00007ffd...)                       (kernel-provided: no file)
///     libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
///     /lib64/ld-linux-x86-64.so.2 (0x...)                   (the loader)
///     libfoo.so.1 => not found
/// ```
///
/// # Errors
/// On a `not found` library or a line of another shape.
pub fn parse(binary: &Path, output: &str) -> Result<Vec<PathBuf>> {
    let mut libs = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let without_addr = match line.rfind(" (0x") {
            Some(i) => &line[..i],
            None => line,
        };
        let path = match without_addr.split_once(" => ") {
            Some((name, target)) => {
                let target = target.trim();
                if target == "not found" {
                    return Err(Error::LibraryNotFound {
                        binary: binary.to_path_buf(),
                        library: name.trim().to_string(),
                    });
                }
                if target.is_empty() {
                    // `name => (0x...)`: a kernel-provided object with no file.
                    continue;
                }
                target
            }
            None if without_addr.starts_with('/') => without_addr,
            // The vDSO (`linux-vdso.so.1 (0x...)`) has no file.
            None if line.contains(" (0x") => continue,
            None => {
                return Err(Error::LddLine {
                    binary: binary.to_path_buf(),
                    line: line.to_string(),
                });
            }
        };
        if !path.starts_with('/') {
            return Err(Error::LddLine {
                binary: binary.to_path_buf(),
                line: line.to_string(),
            });
        }
        let path = PathBuf::from(path);
        if !libs.contains(&path) {
            libs.push(path);
        }
    }
    Ok(libs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_resolved_libraries_and_loader() {
        let out = "\tlinux-vdso.so.1 (0x00007ffc8a5f2000)\n\
                   \tlibcrypt.so.1 => /lib/x86_64-linux-gnu/libcrypt.so.1 (0x00007f0553e5a000)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f055314e000)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f0553ea9000)\n";
        let libs = parse(Path::new("/usr/sbin/haproxy"), out).unwrap();
        assert_eq!(
            libs,
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libcrypt.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn not_found_is_an_error_naming_the_library() {
        let out = "\tlibmissing.so.2 => not found\n";
        match parse(Path::new("/bin/x"), out) {
            Err(Error::LibraryNotFound { library, .. }) => assert_eq!(library, "libmissing.so.2"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn unknown_shape_is_an_error() {
        assert!(matches!(
            parse(Path::new("/bin/x"), "garbage here\n"),
            Err(Error::LddLine { .. })
        ));
    }

    #[test]
    fn real_ldd_on_a_dynamic_binary_includes_libc_and_loader() {
        let sh = Path::new("/bin/sh");
        if !oi_testsupport::require(
            "real_ldd_on_a_dynamic_binary_includes_libc_and_loader",
            "/bin/sh and ldd",
            sh.exists() && oi_testsupport::have_command("ldd"),
        ) {
            return;
        }
        let libs = libraries(sh).unwrap();
        assert!(libs.iter().any(|l| l.to_string_lossy().contains("libc.so")));
        assert!(
            libs.iter()
                .any(|l| l.to_string_lossy().contains("ld-linux"))
        );
    }
}
