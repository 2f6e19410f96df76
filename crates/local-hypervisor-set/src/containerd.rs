//! One containerd per hypervisor, configured and launched by `oi_cri::containerd` rules
//! (isolated configuration, `nsenter --net` rather than `ip netns exec`, private mount
//! namespace with bind mounts), but detached: the process outlives `create` and `destroy`
//! stops it by PID.
//!
//! ```text
//! nsenter --net=/run/netns/<hv> --
//!   unshare --mount --propagation private -- sh -c 'mount --bind ... ; exec "$@"'
//!     <hv>/host/var/lib/oneinfra -> /var/lib/oneinfra
//!     <hv>/host/etc/oneinfra     -> /etc/oneinfra
//!     <hv>/host/var/log/oneinfra -> /var/log/oneinfra
//!     -- containerd --config <hv>/containerd/config.toml
//! ```
//!
//! Other sets' namespace handles copied into this private mount namespace do not keep those
//! namespaces alive: unlinking a mount point (what `ip netns delete` does) detaches it in
//! every mount namespace (Linux >= 3.18).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oi_cri::containerd::{BindMount, ContainerdConfig, SpawnOptions, command_line};

use crate::error::{Error, Result, io};
use crate::state::HypervisorPaths;

/// Where oneinfra places files on a hypervisor, and where pod logs go (`oi_cri`'s default
/// log root is under /var/log/oneinfra): each hypervisor of a set sees its own, so two
/// hypervisors running a pod of the same name do not share a log directory either.
pub const HYPERVISOR_DIRS: [&str; 3] = oi_api::runtime::paths::ROOTS;

/// The repository prefix of the offline image set (see HACKING.md).
pub const OFFLINE_REPOSITORY: &str = "localhost/oneinfra";

/// How long a fresh containerd gets to open its socket.
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(20);

/// The sandbox image every hypervisor uses: the offline set's pause image.
pub fn sandbox_image() -> String {
    oi_api::versions::INFRA
        .pause
        .reference(Some(OFFLINE_REPOSITORY))
}

/// The containerd configuration of a hypervisor.
pub fn config(paths: &HypervisorPaths) -> ContainerdConfig {
    ContainerdConfig {
        root: paths.containerd_root.clone(),
        state: paths.containerd_state.clone(),
        socket: paths.socket.clone(),
        runc_root: paths.runc_root.clone(),
        sandbox_image: sandbox_image(),
        config_path: paths.containerd_config.clone(),
    }
}

/// The command line starting a hypervisor's containerd (see the module docs).
pub fn command(netns: &str, paths: &HypervisorPaths) -> Vec<String> {
    let mut options = SpawnOptions::in_dir(&paths.lib);
    options.netns = Some(netns.to_string());
    options.log_file = paths.containerd_log.clone();
    options.bind_mounts = vec![
        BindMount {
            source: paths.var_lib_oneinfra.clone(),
            target: PathBuf::from(HYPERVISOR_DIRS[0]),
        },
        BindMount {
            source: paths.etc_oneinfra.clone(),
            target: PathBuf::from(HYPERVISOR_DIRS[1]),
        },
        BindMount {
            source: paths.var_log_oneinfra.clone(),
            target: PathBuf::from(HYPERVISOR_DIRS[2]),
        },
    ];
    command_line(&paths.containerd_config, &options)
}

/// Spawns a detached long-running process (own process group, stdin closed, output to `log`)
/// and returns its PID. `unshare`, `nsenter` and `sh` all exec, so the PID is the final
/// program's.
///
/// # Errors
/// [`Error::Io`] for the log, [`Error::Spawn`] when the program cannot start.
pub fn spawn_detached(mut cmd: Command, log: &Path) -> Result<u32> {
    use std::os::unix::process::CommandExt;
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let out = File::create(log).map_err(io(log))?;
    let err = out.try_clone().map_err(io(log))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: a ^C on `create` does not take the hypervisors down.
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    // The child outlives us on purpose; `destroy` stops it by PID.
    Ok(child.id())
}

/// Prepares a hypervisor's directories and configuration, then starts its containerd.
/// Returns the PID.
///
/// # Errors
/// [`Error::Io`] or [`Error::Spawn`].
pub fn start(netns: &str, paths: &HypervisorPaths) -> Result<u32> {
    for dir in [
        &paths.containerd_root,
        &paths.containerd_state,
        &paths.runc_root,
        &paths.var_lib_oneinfra,
        &paths.etc_oneinfra,
        &paths.var_log_oneinfra,
    ] {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    crate::state::write_atomically(
        &paths.containerd_config,
        config(paths).render().as_bytes(),
        0o644,
    )?;
    let argv = command(netns, paths);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    spawn_detached(cmd, &paths.containerd_log)
}

/// Waits until a process's unix socket accepts connections.
///
/// # Errors
/// [`Error::DiedEarly`] when the process exits first, [`Error::NotReady`] on timeout.
pub fn wait_socket(
    what: &'static str,
    hypervisor: &str,
    pid: u32,
    socket: &Path,
    log: &Path,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Ok(());
        }
        if !crate::procs::alive(pid) {
            return Err(Error::DiedEarly {
                what,
                hypervisor: hypervisor.to_string(),
                log: log.to_path_buf(),
            });
        }
        if Instant::now() >= deadline {
            return Err(Error::NotReady {
                what,
                hypervisor: hypervisor.to_string(),
                timeout,
                log: log.to_path_buf(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The image tarballs of a directory (`*.tar`), sorted.
///
/// # Errors
/// [`Error::Io`], or [`Error::NoImages`] when there is none.
pub fn image_tarballs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut tars = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().is_some_and(|e| e == "tar") && path.is_file() {
            tars.push(path);
        }
    }
    tars.sort();
    if tars.is_empty() {
        return Err(Error::NoImages {
            dir: dir.to_path_buf(),
        });
    }
    Ok(tars)
}

/// The tarballs a hypervisor of `visibility` imports: all of them on a public one; a private
/// one skips the images only SIPClusters' support services run
/// ([`oi_api::versions::InfraImages::sip_service_only`], tarballs `<image>_<tag>.tar` as
/// `cargo xtask images` names them), which are placed on public hypervisors only (the jump
/// host's image carries kubectl: 17 MiB a hypervisor saved).
pub fn tarballs_for(visibility: crate::plan::Visibility, tarballs: &[PathBuf]) -> Vec<PathBuf> {
    let public_only: Vec<String> = oi_api::versions::INFRA
        .sip_service_only()
        .iter()
        .map(|i| format!("{}_", i.short_name()))
        .collect();
    tarballs
        .iter()
        .filter(|t| {
            visibility == crate::plan::Visibility::Public
                || !t
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| public_only.iter().any(|p| n.starts_with(p.as_str())))
        })
        .cloned()
        .collect()
}

/// Imports image tarballs into a containerd's `k8s.io` namespace (the one CRI uses), without
/// unpacking them: CRI unpacks an image into a snapshot the first time a sandbox or container
/// uses it, so only the images a hypervisor runs pay for it (the import is then ~2.5x
/// faster: 4.7 s instead of 11.5 s for the 14 offline tarballs, measured here).
///
/// # Errors
/// When `ctr` fails.
pub fn import_images(socket: &Path, tarballs: &[PathBuf]) -> Result<()> {
    for tar in tarballs {
        crate::host::run(
            Command::new("ctr")
                .arg("--address")
                .arg(socket)
                .args(["--namespace", "k8s.io", "images", "import", "--no-unpack"])
                .arg(tar),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Paths;

    #[test]
    fn sip_service_images_go_to_public_hypervisors_only() {
        use crate::plan::Visibility;
        let all: Vec<PathBuf> = [
            "etcd_3.6.4-0.tar",
            "haproxy_2.6.12.tar",
            "jump-host_0.1.0.tar",
            "oidc-provider_0.1.0.tar",
        ]
        .iter()
        .map(|n| PathBuf::from("/images").join(n))
        .collect();
        assert_eq!(tarballs_for(Visibility::Public, &all), all);
        assert_eq!(tarballs_for(Visibility::Private, &all), all[..2].to_vec());
    }

    #[test]
    fn config_is_isolated_per_hypervisor() {
        let a = config(&Paths::default().hypervisor("demo", "demo-private-1")).render();
        let b = config(&Paths::default().hypervisor("demo", "demo-public-1")).render();
        assert!(a.contains("/run/oi-local-hypervisor-set/demo/demo-private-1/cri.sock"));
        assert!(a.contains("/run/oi-local-hypervisor-set/demo/demo-private-1/runc"));
        assert!(a.contains("/var/lib/oi-local-hypervisor-set/demo/demo-private-1/containerd/root"));
        assert!(a.contains("localhost/oneinfra/pause:3.10.1"));
        // Every path-bearing line differs between two hypervisors.
        let mut path_lines = 0;
        for (la, lb) in a.lines().zip(b.lines()) {
            if la.contains("oi-local-hypervisor-set/") {
                path_lines += 1;
                assert_ne!(la, lb);
            }
        }
        assert!(path_lines >= 6, "{a}");
    }

    #[test]
    fn sandbox_image_is_the_offline_pause() {
        assert_eq!(sandbox_image(), "localhost/oneinfra/pause:3.10.1");
    }

    #[test]
    fn command_enters_the_namespace_with_nsenter_and_binds_hypervisor_dirs() {
        let paths = Paths::default().hypervisor("demo", "demo-private-1");
        let argv = command("demo-private-1", &paths);
        assert_eq!(
            argv[..3],
            ["nsenter", "--net=/run/netns/demo-private-1", "--"]
        );
        assert!(!argv.iter().any(|a| a == "netns"), "{argv:?}");
        assert!(argv.iter().any(|a| a == "unshare"));
        let lib = "/var/lib/oi-local-hypervisor-set/demo/demo-private-1";
        for (source, target) in [
            (format!("{lib}/host/var/lib/oneinfra"), "/var/lib/oneinfra"),
            (format!("{lib}/host/etc/oneinfra"), "/etc/oneinfra"),
            (format!("{lib}/host/var/log/oneinfra"), "/var/log/oneinfra"),
        ] {
            let i = argv.iter().position(|a| *a == source).unwrap();
            assert_eq!(argv[i + 1], target);
        }
        assert_eq!(
            argv[argv.len() - 3..],
            [
                "containerd",
                "--config",
                &format!("{lib}/containerd/config.toml")
            ]
        );
    }

    #[test]
    fn tarballs_are_listed_sorted() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            image_tarballs(dir.path()),
            Err(Error::NoImages { .. })
        ));
        for name in ["b.tar", "a.tar", "c.txt"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let got = image_tarballs(dir.path()).unwrap();
        assert_eq!(got, [dir.path().join("a.tar"), dir.path().join("b.tar")]);
    }
}
