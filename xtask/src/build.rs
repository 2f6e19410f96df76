//! The `images` task: builds the selected images into the output directory, skipping those
//! whose inputs did not change.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::catalog::{self, HelperBinaries, ImageDef};
use crate::{Error, Result, io_err, oci, rootfs};

/// Bumped whenever the way tarballs are laid out changes, so old outputs are rebuilt.
const FORMAT: &str = "oi-xtask-images/1";

/// The package and binary of the kube stand-in.
pub const STANDIN_PACKAGE: &str = "oi-kube-standin";
pub const STANDIN_BINARY: &str = "kube-standin";
/// The package and binary of the manager.
pub const MANAGER_PACKAGE: &str = "oi-manager";
pub const MANAGER_BINARY: &str = "oi-manager";
/// The package and binary of the VPN endpoint.
pub const VPN_PACKAGE: &str = "oi-vpn";
pub const VPN_BINARY: &str = "oi-vpn-endpoint";
pub const HOST_TOOL_PACKAGE: &str = "oi-host";
pub const HOST_TOOL_BINARY: &str = "oi-host";
/// The OIDC provider's package and binary.
pub const OIDC_PACKAGE: &str = "oi-oidc";
pub const OIDC_BINARY: &str = "oi-oidc-provider";

/// What to build, and where.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub out_dir: PathBuf,
    /// `--only` names; empty means every image.
    pub only: Vec<String>,
    pub workspace_root: PathBuf,
}

/// What happened to one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Built { path: PathBuf, size: u64 },
    UpToDate { path: PathBuf, size: u64 },
    Skipped { reason: String },
}

/// One image's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub reference: String,
    pub outcome: Outcome,
}

/// Builds the selected images, printing one line per image to `log`.
///
/// # Errors
/// On an unknown `--only` name, a missing host file, a failed helper build, or an I/O error.
pub fn build_images(opts: &BuildOptions, log: &mut dyn Write) -> Result<Vec<Report>> {
    let defs = catalog::select(&opts.only)?;
    fs::create_dir_all(&opts.out_dir).map_err(io_err("create directory", &opts.out_dir))?;
    let work = opts.out_dir.join(".build");
    fs::create_dir_all(&work).map_err(io_err("create directory", &work))?;
    let mut helpers = Helpers {
        workspace_root: &opts.workspace_root,
        work: &work,
        pause: None,
        standin: None,
        manager: None,
        vpn_endpoint: None,
        host_tool: None,
        oidc_provider: None,
    };
    let mut reports = Vec::new();
    let result = build_all(&defs, &opts.out_dir, &mut helpers, log, &mut reports);
    if let Some(p) = &helpers.pause {
        // Best effort: a leftover only costs disk space.
        let _ = fs::remove_file(p);
    }
    result.map(|()| reports)
}

/// The helper binaries, built at most once per run and only when an image needs them.
struct Helpers<'a> {
    workspace_root: &'a Path,
    work: &'a Path,
    pause: Option<PathBuf>,
    standin: Option<PathBuf>,
    manager: Option<PathBuf>,
    vpn_endpoint: Option<PathBuf>,
    host_tool: Option<PathBuf>,
    oidc_provider: Option<PathBuf>,
}

impl Helpers<'_> {
    fn standin_crate(&self) -> PathBuf {
        self.workspace_root.join("testing/kube-standin/Cargo.toml")
    }
}

impl HelperBinaries for Helpers<'_> {
    fn pause(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.pause {
            return Ok(p.clone());
        }
        let p = compile_pause(self.workspace_root, self.work)?;
        self.pause = Some(p.clone());
        Ok(p)
    }

    fn standin(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.standin {
            return Ok(p.clone());
        }
        let p = build_release(self.workspace_root, STANDIN_PACKAGE, STANDIN_BINARY)?;
        self.standin = Some(p.clone());
        Ok(p)
    }

    fn manager(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.manager {
            return Ok(p.clone());
        }
        let p = build_release(self.workspace_root, MANAGER_PACKAGE, MANAGER_BINARY)?;
        self.manager = Some(p.clone());
        Ok(p)
    }

    fn vpn_endpoint(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.vpn_endpoint {
            return Ok(p.clone());
        }
        let p = build_release(self.workspace_root, VPN_PACKAGE, VPN_BINARY)?;
        self.vpn_endpoint = Some(p.clone());
        Ok(p)
    }

    fn host_tool(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.host_tool {
            return Ok(p.clone());
        }
        let p = build_release(self.workspace_root, HOST_TOOL_PACKAGE, HOST_TOOL_BINARY)?;
        self.host_tool = Some(p.clone());
        Ok(p)
    }

    fn oidc_provider(&mut self) -> Result<PathBuf> {
        if let Some(p) = &self.oidc_provider {
            return Ok(p.clone());
        }
        let p = build_release(self.workspace_root, OIDC_PACKAGE, OIDC_BINARY)?;
        self.oidc_provider = Some(p.clone());
        Ok(p)
    }
}

fn build_all(
    defs: &[ImageDef],
    out_dir: &Path,
    helpers: &mut Helpers<'_>,
    log: &mut dyn Write,
    reports: &mut Vec<Report>,
) -> Result<()> {
    for def in defs {
        let reference = def.reference();
        let standin_crate = helpers.standin_crate();
        let outcome = if def.kind.needs_standin() && !standin_crate.is_file() {
            Outcome::Skipped {
                reason: format!(
                    "the kube stand-in ({STANDIN_PACKAGE}) is not in this workspace yet ({} missing)",
                    standin_crate.display()
                ),
            }
        } else {
            build_one(def, out_dir, helpers)?
        };
        let line = match &outcome {
            Outcome::Built { path, size } => format!(
                "built      {reference} -> {} ({})",
                path.display(),
                human(*size)
            ),
            Outcome::UpToDate { path, size } => format!(
                "up to date {reference} -> {} ({})",
                path.display(),
                human(*size)
            ),
            Outcome::Skipped { reason } => format!("SKIPPED {reference}: {reason}"),
        };
        // A log write failure must not stop the build; the report still carries the outcome.
        let _ = writeln!(log, "{line}");
        reports.push(Report { reference, outcome });
    }
    Ok(())
}

fn human(size: u64) -> String {
    if size >= 1 << 20 {
        format!("{:.1} MiB", size as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", size as f64 / 1024.0)
    }
}

/// Builds one image unless its recorded inputs digest matches.
fn build_one(def: &ImageDef, out_dir: &Path, helpers: &mut Helpers<'_>) -> Result<Outcome> {
    let reference = def.reference();
    let (tree, run) = def.contents(helpers)?;
    // Every host file is read exactly once, into the layer, and the inputs digest covers the
    // layer's bytes: a binary rewritten meanwhile (a concurrent cargo build) can never leave a
    // record that disagrees with the tarball. Gzip, the expensive part, is what gets skipped.
    let layer = tree.layer_tar()?;
    let mut hasher = Sha256::new();
    hasher.update(format!("{FORMAT}\n{reference}\n{run:?}\n"));
    hasher.update(&layer);
    let inputs = hex::encode(hasher.finalize());

    let path = out_dir.join(def.file_name());
    let record = out_dir.join(format!("{}.inputs", def.file_name()));
    if let (Ok(meta), Ok(recorded)) = (fs::metadata(&path), fs::read_to_string(&record))
        && recorded.trim() == inputs
    {
        return Ok(Outcome::UpToDate {
            path,
            size: meta.len(),
        });
    }

    let layer_gz = rootfs::gzip(&layer)?;
    let layout = oci::layout(&reference, def.image.tag, &run, &layer, &layer_gz)?;
    write_atomically(&path, |w| {
        oci::write_layout_tar(w, &layout, &layer_gz).map(|_| ())
    })?;
    write_atomically(&record, |w| {
        writeln!(w, "{inputs}").map_err(io_err("write", &record))
    })?;
    let size = fs::metadata(&path).map_err(io_err("stat", &path))?.len();
    Ok(Outcome::Built { path, size })
}

/// Writes `path` through a temporary file in the same directory and a rename, so readers see
/// the old file or the whole new one.
fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<fs::File>) -> Result<()>,
) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let file = fs::File::create(&tmp).map_err(io_err("create", &tmp))?;
        let mut w = BufWriter::new(file);
        fill(&mut w)?;
        let file = w
            .into_inner()
            .map_err(|e| io_err("write", &tmp)(e.into_error()))?;
        file.sync_all().map_err(io_err("sync", &tmp))?;
        fs::rename(&tmp, path).map_err(io_err("rename into place", path))
    })();
    if result.is_err() {
        // Best effort: the temporary file is garbage either way.
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn run(cmd: &mut Command, program: &str) -> Result<std::process::Output> {
    let out = cmd.output().map_err(|source| Error::Spawn {
        program: program.to_string(),
        source,
    })?;
    if !out.status.success() {
        let args = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        return Err(Error::CommandFailed {
            program: program.to_string(),
            args,
            status: out.status,
            stderr: match String::from_utf8_lossy(&out.stderr).trim() {
                // Inherited stderr (cargo): the diagnostics are already on the terminal.
                "" => "see its output above".to_string(),
                text => text.to_string(),
            },
        });
    }
    Ok(out)
}

/// Compiles images/pause/pause.c statically into `work/pause.<pid>` (per process: a concurrent
/// run must not rewrite the file while this one reads it).
fn compile_pause(workspace_root: &Path, work: &Path) -> Result<PathBuf> {
    let src_dir = workspace_root.join("images/pause");
    let out = work.join(format!("pause.{}", std::process::id()));
    // Relative source name and stripped output: nothing machine-specific lands in the binary.
    run(
        Command::new("gcc")
            .current_dir(&src_dir)
            .args(["-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&out)
            .arg("pause.c"),
        "gcc",
    )?;
    Ok(out)
}

/// Builds `package` in release mode and returns the path of its executable `binary`, as cargo
/// reports it (so a `CARGO_TARGET_DIR` is honoured).
fn build_release(workspace_root: &Path, package: &str, binary: &str) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = run(
        Command::new(&cargo)
            .current_dir(workspace_root)
            .args([
                "build",
                "--locked",
                "--release",
                "--message-format=json-render-diagnostics",
                "-p",
                package,
            ])
            .stderr(Stdio::inherit()),
        "cargo",
    )?;
    executable_from_messages(&String::from_utf8_lossy(&out.stdout), binary).ok_or_else(|| {
        Error::NoArtifact {
            package: package.into(),
            binary: binary.into(),
        }
    })
}

/// The `executable` of the `compiler-artifact` message for binary target `binary`.
fn executable_from_messages(stdout: &str, binary: &str) -> Option<PathBuf> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == binary)
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
