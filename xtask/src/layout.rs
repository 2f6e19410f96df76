//! `cargo xtask check-layout`: no product crate depends on test support.
//!
//! The product is every package under `crates/`. Test support (the Kubernetes stand-in and the
//! `*testsupport` crates) lives under `testing/`. A product crate may use test support in its own
//! tests (a dev-dependency) but never in what it ships (a normal or build dependency), directly
//! or through another workspace crate. The check reads `cargo metadata`, so it sees exactly what
//! cargo builds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    workspace_root: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    manifest_path: PathBuf,
    dependencies: Vec<Dependency>,
}

#[derive(Debug, Deserialize)]
struct Dependency {
    name: String,
    /// `null` for a normal dependency, `"dev"` or `"build"`.
    kind: Option<String>,
    /// Set for a path dependency (every workspace crate).
    path: Option<PathBuf>,
}

/// Where a workspace package sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Product,
    Testing,
    Other,
}

fn place(root: &Path, manifest_or_dir: &Path) -> Place {
    match manifest_or_dir
        .strip_prefix(root)
        .ok()
        .and_then(|p| p.components().next())
    {
        Some(c) if c.as_os_str() == "crates" => Place::Product,
        Some(c) if c.as_os_str() == "testing" => Place::Testing,
        _ => Place::Other,
    }
}

/// Every product package that ships test support, with the chain that brings it in
/// (`oi-engine -> oi-foo -> oi-testsupport`). Empty when the layout holds; an error when the
/// metadata shows no product or no test support at all, since then nothing was checked.
pub fn violations(metadata_json: &str) -> anyhow::Result<Vec<String>> {
    let metadata: Metadata =
        serde_json::from_str(metadata_json).context("reading `cargo metadata` output")?;
    let root = metadata.workspace_root.as_path();
    // The workspace's path packages by name, with where each sits and what it ships with.
    let mut places = BTreeMap::new();
    let mut shipped: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for package in &metadata.packages {
        places.insert(package.name.as_str(), place(root, &package.manifest_path));
    }
    for package in &metadata.packages {
        let deps = package
            .dependencies
            .iter()
            .filter(|d| d.path.is_some() && d.kind.as_deref() != Some("dev"))
            .map(|d| d.name.as_str())
            .collect();
        shipped.insert(package.name.as_str(), deps);
    }
    for (wanted, dir) in [(Place::Product, "crates/"), (Place::Testing, "testing/")] {
        if !places.values().any(|&p| p == wanted) {
            bail!(
                "no workspace package under {dir} in {}: the layout check would check nothing",
                root.display()
            );
        }
    }
    let mut found = Vec::new();
    for (&name, &at) in &places {
        if at != Place::Product {
            continue;
        }
        // Breadth-first over shipped dependencies, keeping each crate's first path.
        let mut seen = BTreeSet::from([name]);
        let mut queue = vec![vec![name]];
        while !queue.is_empty() {
            let mut next = Vec::new();
            for chain in queue {
                let last = chain[chain.len() - 1];
                for &dep in shipped.get(last).map(Vec::as_slice).unwrap_or_default() {
                    if !seen.insert(dep) {
                        continue;
                    }
                    let mut longer = chain.clone();
                    longer.push(dep);
                    if places.get(dep) == Some(&Place::Testing) {
                        found.push(longer.join(" -> "));
                    } else {
                        next.push(longer);
                    }
                }
            }
            queue = next;
        }
    }
    Ok(found)
}

/// Runs `cargo metadata` on the workspace at `root` and fails naming every violation.
pub fn check(root: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let json = String::from_utf8(output.stdout).context("cargo metadata printed non-UTF-8")?;
    let found = violations(&json)?;
    if found.is_empty() {
        return Ok(());
    }
    bail!(
        "product crates (crates/) must not ship test support (testing/): move the dependency to \
         [dev-dependencies] or the code out of testing/:\n  {}",
        found.join("\n  ")
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn package(name: &str, dir: &str, deps: &[(&str, Option<&str>)]) -> serde_json::Value {
        json!({
            "name": name,
            "manifest_path": format!("/ws/{dir}/Cargo.toml"),
            "dependencies": deps.iter().map(|(d, kind)| json!({
                "name": d, "kind": kind, "path": format!("/ws/x/{d}"),
            })).collect::<Vec<_>>(),
        })
    }

    fn run(packages: Vec<serde_json::Value>) -> Vec<String> {
        let json = json!({ "packages": packages, "workspace_root": "/ws" }).to_string();
        violations(&json).unwrap()
    }

    #[test]
    fn a_dev_dependency_on_test_support_is_allowed() {
        let found = run(vec![
            package("oi-api", "crates/api", &[("oi-testsupport", Some("dev"))]),
            package("oi-testsupport", "testing/testsupport", &[]),
        ]);
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn a_normal_or_build_dependency_on_test_support_is_named() {
        let found = run(vec![
            package("oi-api", "crates/api", &[("oi-testsupport", None)]),
            package(
                "oi-pki",
                "crates/pki",
                &[("oi-kube-standin", Some("build"))],
            ),
            package("oi-testsupport", "testing/testsupport", &[]),
            package("oi-kube-standin", "testing/kube-standin", &[]),
        ]);
        assert_eq!(
            found,
            vec!["oi-api -> oi-testsupport", "oi-pki -> oi-kube-standin"]
        );
    }

    #[test]
    fn test_support_shipped_through_another_crate_is_named_with_its_chain() {
        let found = run(vec![
            package("oi-engine", "crates/engine", &[("oi-helper", None)]),
            package(
                "oi-helper",
                "xtask-like/helper",
                &[("oi-testsupport", None)],
            ),
            package("oi-testsupport", "testing/testsupport", &[]),
            // test support may use test support, and e2e (outside crates/) may too
            package("oi-e2e", "e2e", &[("oi-testsupport", None)]),
        ]);
        assert_eq!(found, vec!["oi-engine -> oi-helper -> oi-testsupport"]);
    }

    #[test]
    fn metadata_with_no_product_or_no_test_support_is_an_error_not_a_pass() {
        let json = json!({
            "packages": [package("oi-api", "elsewhere/api", &[])],
            "workspace_root": "/ws",
        });
        let err = violations(&json.to_string()).unwrap_err().to_string();
        assert!(err.contains("no workspace package under crates/"), "{err}");
        let json = json!({
            "packages": [package("oi-api", "crates/api", &[])],
            "workspace_root": "/ws",
        });
        let err = violations(&json.to_string()).unwrap_err().to_string();
        assert!(err.contains("no workspace package under testing/"), "{err}");
    }

    #[test]
    fn the_workspace_holds_its_layout() {
        check(&crate::workspace_root()).unwrap();
    }
}
