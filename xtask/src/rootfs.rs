//! An image's file tree, described before anything is read, and its deterministic layer tar.
//!
//! Entries are kept sorted by path, so the tar lists parents before children and the same tree
//! always gives the same bytes: mtime 0, uid/gid 0, no user or group names.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Error, Result, io_err};

/// Where a regular file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A file on this machine, read (following symlinks) when the image is built.
    Host(PathBuf),
    Bytes(Vec<u8>),
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir { mode: u32 },
    File { mode: u32, content: Content },
    Symlink { target: String },
}

/// A file tree keyed by relative path (`bin/sh`, no leading or trailing slash).
#[derive(Debug, Clone)]
pub struct RootFs {
    image: String,
    entries: BTreeMap<String, Node>,
}

const DIR_MODE: u32 = 0o755;

impl RootFs {
    /// An empty tree; `image` names the image in errors.
    pub fn new(image: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            entries: BTreeMap::new(),
        }
    }

    pub fn entries(&self) -> &BTreeMap<String, Node> {
        &self.entries
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        self.entries.get(path.trim_start_matches('/'))
    }

    fn key(&self, path: &str) -> Result<String> {
        let rel = path.trim_start_matches('/').trim_end_matches('/');
        let bad = !path.starts_with('/')
            || rel.is_empty()
            || rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..");
        if bad {
            return Err(Error::InvalidPath {
                image: self.image.clone(),
                path: path.to_string(),
            });
        }
        Ok(rel.to_string())
    }

    /// Inserts `node` at `path` after its parent directories (mode 0755 unless already there).
    /// Inserting the same node twice is fine; a different node at a taken path is an error.
    fn insert(&mut self, path: &str, node: Node) -> Result<()> {
        let key = self.key(path)?;
        let mut parent = String::new();
        let components: Vec<&str> = key.split('/').collect();
        for c in &components[..components.len() - 1] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(c);
            match self.entries.get(&parent) {
                None => {
                    self.entries
                        .insert(parent.clone(), Node::Dir { mode: DIR_MODE });
                }
                Some(Node::Dir { .. }) => {}
                Some(_) => {
                    return Err(Error::PathConflict {
                        image: self.image.clone(),
                        path: format!("/{parent}"),
                    });
                }
            }
        }
        match self.entries.get(&key) {
            None => {
                self.entries.insert(key, node);
                Ok(())
            }
            Some(existing) if *existing == node => Ok(()),
            // An implied parent directory takes the explicit mode.
            Some(Node::Dir { .. }) if matches!(node, Node::Dir { .. }) => {
                self.entries.insert(key, node);
                Ok(())
            }
            Some(_) => Err(Error::PathConflict {
                image: self.image.clone(),
                path: path.to_string(),
            }),
        }
    }

    /// A directory with `mode` (e.g. 0o1777 for /tmp).
    ///
    /// # Errors
    /// On an invalid path or a non-directory already at `path`.
    pub fn dir(&mut self, path: &str, mode: u32) -> Result<()> {
        self.insert(path, Node::Dir { mode })
    }

    /// A regular file with literal bytes.
    ///
    /// # Errors
    /// On an invalid or taken path.
    pub fn bytes(&mut self, path: &str, mode: u32, data: impl Into<Vec<u8>>) -> Result<()> {
        self.insert(
            path,
            Node::File {
                mode,
                content: Content::Bytes(data.into()),
            },
        )
    }

    /// A regular file with literal bytes in place of the one at `path` (e.g. an image's own
    /// `/etc/passwd` instead of [`RootFs::base`]'s).
    ///
    /// # Errors
    /// On an invalid path, or a directory or symlink at `path`.
    pub fn replace_bytes(&mut self, path: &str, mode: u32, data: impl Into<Vec<u8>>) -> Result<()> {
        let key = self.key(path)?;
        if matches!(self.entries.get(&key), Some(Node::File { .. })) {
            self.entries.remove(&key);
        }
        self.bytes(path, mode, data)
    }

    /// A regular file copied from this machine (symlinks followed).
    ///
    /// # Errors
    /// When the host file is missing, or on an invalid or taken path.
    pub fn host_file(&mut self, path: &str, mode: u32, host: &Path) -> Result<()> {
        if !host.is_file() {
            return Err(Error::MissingHostFile {
                image: self.image.clone(),
                path: host.to_path_buf(),
            });
        }
        self.insert(
            path,
            Node::File {
                mode,
                content: Content::Host(host.to_path_buf()),
            },
        )
    }

    /// A symbolic link to `target`.
    ///
    /// # Errors
    /// On an invalid or taken path.
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<()> {
        self.insert(
            path,
            Node::Symlink {
                target: target.to_string(),
            },
        )
    }

    /// An executable at `path` copied from `host`, plus every shared library `ldd` resolves for
    /// it, each a regular file at the path `ldd` printed (the dynamic loader included), so the
    /// loader finds them in its default directories without an `ld.so.cache`.
    ///
    /// # Errors
    /// When the host file is missing or `ldd` fails.
    pub fn binary_with_libs(&mut self, path: &str, host: &Path) -> Result<()> {
        self.host_file(path, 0o755, host)?;
        for lib in crate::ldd::libraries(host)? {
            let dest = lib.to_string_lossy().into_owned();
            self.host_file(&dest, 0o755, &lib)?;
        }
        Ok(())
    }

    /// Adds the files every image has: `/etc/passwd` and `/etc/group` with root and nobody, and
    /// a world-writable sticky `/tmp`.
    ///
    /// # Errors
    /// When one of these paths is already taken by something else.
    pub fn base(&mut self) -> Result<()> {
        self.bytes(
            "/etc/passwd",
            0o644,
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        )?;
        self.bytes("/etc/group", 0o644, "root:x:0:\nnogroup:x:65534:\n")?;
        self.dir("/tmp", 0o1777)?;
        self.dir("/root", 0o700)
    }

    /// The uncompressed layer tar.
    ///
    /// # Errors
    /// When a host file cannot be read.
    pub fn layer_tar(&self) -> Result<Vec<u8>> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, node) in &self.entries {
            let mut header = tar::Header::new_ustar();
            header.set_mtime(0);
            header.set_uid(0);
            header.set_gid(0);
            let res = match node {
                Node::Dir { mode } => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(*mode);
                    header.set_size(0);
                    builder.append_data(&mut header, format!("{path}/"), std::io::empty())
                }
                Node::Symlink { target } => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(0o777);
                    header.set_size(0);
                    builder.append_link(&mut header, path, target)
                }
                Node::File { mode, content } => {
                    let data = read_content(content)?;
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(*mode);
                    header.set_size(data.len() as u64);
                    builder.append_data(&mut header, path, data.as_slice())
                }
            };
            res.map_err(io_err("append to layer", format!("{}:/{path}", self.image)))?;
        }
        builder
            .into_inner()
            .map_err(io_err("finish layer", self.image.clone()))
    }
}

fn read_content(content: &Content) -> Result<Vec<u8>> {
    match content {
        Content::Bytes(b) => Ok(b.clone()),
        Content::Host(p) => std::fs::read(p).map_err(io_err("read", p)),
    }
}

/// Gzips `data` deterministically (no file name, mtime 0).
///
/// # Errors
/// Only if the in-memory encoder fails.
pub fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    enc.write_all(data)
        .and_then(|()| enc.finish())
        .map_err(io_err("gzip", "layer"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn sample() -> RootFs {
        let mut fs = RootFs::new("test");
        fs.base().unwrap();
        fs.bytes("/usr/local/bin/tool", 0o755, b"#!/bin/sh\n".to_vec())
            .unwrap();
        fs.symlink("/bin/sh", "/bin/busybox").unwrap();
        fs
    }

    #[test]
    fn parents_are_implied_and_sorted_before_children() {
        let fs = sample();
        let keys: Vec<&str> = fs.entries().keys().map(String::as_str).collect();
        let pos = |k: &str| keys.iter().position(|x| *x == k).unwrap();
        assert!(pos("usr") < pos("usr/local") && pos("usr/local") < pos("usr/local/bin"));
        assert!(pos("usr/local/bin") < pos("usr/local/bin/tool"));
        assert_eq!(fs.get("/tmp"), Some(&Node::Dir { mode: 0o1777 }));
        assert_eq!(fs.get("/usr/local"), Some(&Node::Dir { mode: 0o755 }));
    }

    #[test]
    fn layer_is_deterministic_and_normalized() {
        let a = sample().layer_tar().unwrap();
        let b = sample().layer_tar().unwrap();
        assert_eq!(a, b);
        assert_eq!(gzip(&a).unwrap(), gzip(&b).unwrap());
        let mut archive = tar::Archive::new(a.as_slice());
        let mut names = Vec::new();
        for e in archive.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!(h.mtime().unwrap(), 0);
            assert_eq!(h.uid().unwrap(), 0);
            assert_eq!(h.gid().unwrap(), 0);
            names.push(e.path().unwrap().to_string_lossy().into_owned());
        }
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(names.contains(&"tmp/".to_string()));
        assert!(names.contains(&"bin/sh".to_string()));
    }

    #[test]
    fn conflicts_and_bad_paths_are_refused() {
        let mut fs = sample();
        assert!(matches!(
            fs.symlink("/usr/local/bin/tool", "/x"),
            Err(Error::PathConflict { .. })
        ));
        assert!(matches!(
            fs.bytes("/bin/sh/x", 0o644, Vec::new()),
            Err(Error::PathConflict { .. })
        ));
        assert!(matches!(
            fs.dir("relative", 0o755),
            Err(Error::InvalidPath { .. })
        ));
        assert!(matches!(
            fs.dir("/a/../b", 0o755),
            Err(Error::InvalidPath { .. })
        ));
        // The same entry twice is not a conflict.
        fs.symlink("/bin/sh", "/bin/busybox").unwrap();
    }
}
