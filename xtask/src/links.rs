//! `cargo xtask check-links`: every relative link a reader can follow resolves.
//!
//! Checked: every Markdown file of the repository (the README, HACKING.md, the crates' and
//! folders' READMEs, the docs book's sources), except what is built or fetched (`target*`,
//! `.tools`, the built book). A link to a web address is not followed. Any other link must:
//! - name a file or folder that exists;
//! - stay inside the repository: a clone has nothing beside it, so `../shared/...` is broken for
//!   everyone who clones it;
//! - from the book's sources (`docs/src`), stay inside them: the built book holds only those
//!   pages, so a link from it to `../../HACKING.md` works on GitHub and breaks in the book;
//! - when it ends in `#anchor` and names a Markdown file (or none, for the same page), match a
//!   heading of that page, with the anchors mdBook and GitHub both give (lower case, spaces as
//!   `-`, other punctuation dropped), or an `<a id>`/`<a name>` of the page.
//!
//! Links in code (fenced, indented or inline) are text, not links, and are not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use oi_testsupport::reference::anchor;
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The book's sources, relative to the repository root.
pub const BOOK_SOURCES: &str = "docs/src";

/// Folders never read: build output, tools fetched by setup, the built book.
const SKIPPED: [&str; 4] = [".git", ".tools", "node_modules", "book"];

/// A link found in a page.
#[derive(Debug, Clone)]
struct Link {
    line: usize,
    dest: String,
}

/// What one page offers and asks: its anchors and its links.
#[derive(Debug, Default)]
struct Page {
    anchors: BTreeSet<String>,
    links: Vec<Link>,
}

fn read_page(text: &str) -> Page {
    let mut page = Page::default();
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut heading: Option<String> = None;
    let mut repeated: BTreeMap<String, usize> = BTreeMap::new();
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_FOOTNOTES | Options::ENABLE_HEADING_ATTRIBUTES;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                if let Some(id) = id {
                    page.anchors.insert(id.to_string());
                }
                heading = Some(String::new());
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(text) = heading.take() {
                    let base = anchor(&text);
                    // A repeated heading gets `-1`, `-2`, ... as on GitHub and in mdBook.
                    let n = repeated.entry(base.clone()).or_insert(0);
                    page.anchors.insert(if *n == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{n}")
                    });
                    *n += 1;
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => {
                page.links.push(Link {
                    line: line_of(range.start),
                    dest: dest_url.to_string(),
                });
            }
            Event::Html(html) | Event::InlineHtml(html) => {
                for attr in ["id=\"", "name=\""] {
                    let mut rest = html.as_ref();
                    while let Some(at) = rest.find(attr) {
                        rest = &rest[at + attr.len()..];
                        if let Some(end) = rest.find('"') {
                            page.anchors.insert(rest[..end].to_string());
                        }
                    }
                }
                for attr in ["href=\"", "src=\""] {
                    let mut rest = html.as_ref();
                    while let Some(at) = rest.find(attr) {
                        rest = &rest[at + attr.len()..];
                        if let Some(end) = rest.find('"') {
                            page.links.push(Link {
                                line: line_of(range.start),
                                dest: rest[..end].to_string(),
                            });
                        }
                    }
                }
            }
            _ => {}
        }
    }
    page
}

/// `a/b/../c` as `a/c`, without touching the disk; `None` when it climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

fn markdown_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if entry.file_type()?.is_dir() {
            let skipped = SKIPPED.contains(&name.as_ref()) || name.starts_with("target");
            if !skipped {
                markdown_files(root, &path, out)?;
            }
        } else if name.ends_with(".md") {
            out.push(path.strip_prefix(root)?.to_path_buf());
        }
    }
    Ok(())
}

/// Every broken link under `root`, as `file:line: link: why`.
pub fn broken_links(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut files = Vec::new();
    markdown_files(root, root, &mut files)?;
    files.sort();
    let mut pages = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(root.join(file))
            .with_context(|| format!("reading {}", file.display()))?;
        pages.insert(file.clone(), read_page(&text));
    }
    let book = Path::new(BOOK_SOURCES);
    let mut found = Vec::new();
    for (file, page) in &pages {
        for link in &page.links {
            let dest = link.dest.as_str();
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            let (target, anchor) = match dest.split_once('#') {
                Some((t, a)) => (t, Some(a)),
                None => (dest, None),
            };
            let mut broken = |why: String| {
                found.push(format!("{}:{}: {dest}: {why}", file.display(), link.line));
            };
            let resolved = if target.is_empty() {
                Some(file.clone())
            } else if target.starts_with('/') {
                broken("an absolute path; link relative to this file".into());
                continue;
            } else {
                normalize(&file.parent().unwrap_or(Path::new("")).join(target))
            };
            let Some(resolved) = resolved else {
                broken("leaves the repository (a clone has nothing beside it)".into());
                continue;
            };
            if file.starts_with(book) && !resolved.starts_with(book) {
                broken(format!(
                    "leaves the book's sources ({BOOK_SOURCES}): it would be broken in the built book; \
                     name the repository's file as code instead"
                ));
                continue;
            }
            if !root.join(&resolved).exists() {
                broken(format!("{} does not exist", resolved.display()));
                continue;
            }
            if let Some(anchor) = anchor
                && let Some(target_page) = pages.get(&resolved)
                && !target_page.anchors.contains(anchor)
            {
                broken(format!(
                    "no heading of {} has the anchor #{anchor}",
                    resolved.display()
                ));
            }
        }
    }
    Ok(found)
}

/// Fails naming every broken link under `root`.
pub fn check(root: &Path) -> anyhow::Result<()> {
    let found = broken_links(root)?;
    if found.is_empty() {
        return Ok(());
    }
    bail!("{} broken link(s):\n  {}", found.len(), found.join("\n  "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn good_links_of_every_kind_pass() {
        let dir = tree(&[
            (
                "README.md",
                "# Top\n\nSee [the guide](docs/src/guide.md#day-two-upgrades), [hacking](HACKING.md), \
                 [a folder](testing/), [below](#top), [the web](https://example.invalid/x) and \
                 <a href=\"HACKING.md\">html</a>.\n",
            ),
            ("HACKING.md", "# Hacking\n"),
            ("testing/README.md", "# Testing\n"),
            (
                "docs/src/guide.md",
                "# Guide\n\n## Day two: upgrades\n\n[ref](reference/cli.md#oi-get)\n",
            ),
            ("docs/src/reference/cli.md", "# CLI\n\n## `oi get`\n"),
        ]);
        assert_eq!(broken_links(dir.path()).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn every_kind_of_broken_link_is_named_with_its_file_and_line() {
        let dir = tree(&[
            (
                "README.md",
                "# Top\n\n[gone](MISSING.md)\n[outside](../shared/DESIGN.md)\n[bad anchor](HACKING.md#nowhere)\n\
                 [abs](/etc/passwd)\n",
            ),
            ("HACKING.md", "# Hacking\n"),
            (
                "docs/src/intro.md",
                "# Intro\n\n[out of the book](../../HACKING.md)\n",
            ),
        ]);
        let found = broken_links(dir.path()).unwrap();
        assert_eq!(found.len(), 5, "{found:#?}");
        assert!(
            found[0].starts_with("README.md:3: MISSING.md: MISSING.md does not exist"),
            "{found:#?}"
        );
        assert!(
            found[1].starts_with("README.md:4: ../shared/DESIGN.md: leaves the repository"),
            "{found:#?}"
        );
        assert!(
            found[2].contains(
                "README.md:5: HACKING.md#nowhere: no heading of HACKING.md has the anchor #nowhere"
            ),
            "{found:#?}"
        );
        assert!(
            found[3].contains("README.md:6: /etc/passwd: an absolute path"),
            "{found:#?}"
        );
        assert!(
            found[4]
                .starts_with("docs/src/intro.md:3: ../../HACKING.md: leaves the book's sources"),
            "{found:#?}"
        );
        assert!(
            check(dir.path())
                .unwrap_err()
                .to_string()
                .starts_with("5 broken link(s):")
        );
    }

    #[test]
    fn links_in_code_are_text_and_built_folders_are_not_read() {
        let dir = tree(&[
            (
                "README.md",
                "# Top\n\n```text\n[x](MISSING.md)\n```\n\n`[y](MISSING.md)`\n",
            ),
            ("target/doc/README.md", "[x](MISSING.md)\n"),
            (".tools/npm/README.md", "[x](MISSING.md)\n"),
            ("docs/book/index.md", "[x](MISSING.md)\n"),
        ]);
        assert_eq!(broken_links(dir.path()).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn repeated_headings_and_explicit_anchors_are_anchors() {
        let page = read_page(
            "# A\n\n## Usage\n\n## Usage\n\n<a id=\"here\"></a>\n\n## `oi get` and -o {#custom}\n",
        );
        for anchor in ["a", "usage", "usage-1", "here", "custom"] {
            assert!(
                page.anchors.contains(anchor),
                "{anchor}: {:?}",
                page.anchors
            );
        }
        assert_eq!(anchor("`oi get` and -o"), "oi-get-and--o");
    }

    #[test]
    fn the_repository_has_no_broken_link() {
        check(&crate::workspace_root()).unwrap();
    }
}
