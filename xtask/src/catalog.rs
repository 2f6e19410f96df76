//! Which images the offline set holds, and what goes into each.
//!
//! Names and tags come from `oi_api::versions` (INFRA and every release), with the repository
//! override [`crate::REPOSITORY`], so the set carries exactly what the versions table names.

use std::path::{Path, PathBuf};
use std::process::Command;

use oi_api::versions::{self, Image};

use crate::oci::RunConfig;
use crate::rootfs::RootFs;
use crate::{Error, Result};

/// Host files the images are made of (Debian packages, see scripts/setup.sh).
pub const HOST_BUSYBOX: &str = "/bin/busybox";
pub const HOST_ETCD: &str = "/usr/bin/etcd";
pub const HOST_ETCDCTL: &str = "/usr/bin/etcdctl";

/// `etcdutl` of the local etcd image (see [`Kind::Etcd`]).
pub const ETCDUTL_SHIM: &str = "#!/bin/sh\n# etcd 3.4's etcdctl restores snapshots as etcd 3.6's etcdutl does.\nETCDCTL_API=3 exec /usr/local/bin/etcdctl \"$@\"\n";
pub const HOST_HAPROXY: &str = "/usr/sbin/haproxy";
pub const HOST_WIREGUARD_GO: &str = "/usr/bin/wireguard-go";
pub const HOST_WG: &str = "/usr/bin/wg";
pub const HOST_KEEPALIVED: &str = "/usr/sbin/keepalived";
pub const HOST_SSHD: &str = "/usr/sbin/sshd";
pub const HOST_SSH: &str = "/usr/bin/ssh";
pub const HOST_SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";
/// kubectl, for the jump host's tenant kubeconfig: found on `PATH` (not a Debian package:
/// machines of this kind come with it, scripts/setup.sh checks; a static binary).
pub const HOST_KUBECTL: &str = "kubectl";

/// `program` on `PATH`, its symlinks resolved.
fn on_path(program: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Io {
            op: "find on PATH",
            path: PathBuf::from(program),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
        .and_then(|p| std::fs::canonicalize(&p).map_err(crate::io_err("resolve", p)))
}
/// Where the jump host's `host` tool is in its image (`host` runs it with the inventory).
pub const HOST_TOOL_PATH: &str = "/usr/local/bin/oi-host";
/// The jump host's login user, as upstream SIP's image has it.
pub const JUMP_HOST_USER: &str = "ubuntu";
/// `host list`, `host reboot <name>`: the tool over the inventory the jump host's start puts
/// in the user's home.
const HOST_WRAPPER: &str =
    "#!/bin/sh\nexec /usr/local/bin/oi-host --inventory \"$HOME/hosts.json\" \"$@\"\n";
/// Where the OIDC provider's binary is in its image.
pub const OIDC_PROVIDER_PATH: &str = "/usr/local/bin/oi-oidc-provider";
/// Where the VPN endpoint's binary is in its image.
pub const VPN_ENDPOINT_PATH: &str = "/usr/local/bin/oi-vpn-endpoint";

/// The environment variable the kube stand-in reads to report its version.
pub const STANDIN_VERSION_ENV: &str = "KUBE_STANDIN_VERSION";

/// The binaries built from this repository that go into images.
pub trait HelperBinaries {
    /// The static pause program (images/pause/pause.c), compiled.
    ///
    /// # Errors
    /// When compiling fails.
    fn pause(&mut self) -> Result<PathBuf>;

    /// The kube stand-in executable, built.
    ///
    /// # Errors
    /// When building fails or yields no executable.
    fn standin(&mut self) -> Result<PathBuf>;

    /// The `oi-manager` executable, built.
    ///
    /// # Errors
    /// When building fails or yields no executable.
    fn manager(&mut self) -> Result<PathBuf>;

    /// The `oi-vpn-endpoint` executable, built.
    ///
    /// # Errors
    /// When building fails or yields no executable.
    fn vpn_endpoint(&mut self) -> Result<PathBuf>;

    /// The `oi-host` executable (the jump host's `host` tool), built.
    ///
    /// # Errors
    /// When building fails or yields no executable.
    fn host_tool(&mut self) -> Result<PathBuf>;

    /// The `oi-oidc-provider` executable, built.
    ///
    /// # Errors
    /// When building fails or yields no executable.
    fn oidc_provider(&mut self) -> Result<PathBuf>;
}

/// The manager's image, `localhost/oneinfra/oi-manager:<workspace version>` (what
/// config/manager/deployment.yaml runs). Not in [`catalog`]: hypervisors never pull it, and
/// it needs a release build of the manager, so it is built on request
/// (`cargo xtask images --only oi-manager`).
pub const MANAGER: Image = Image {
    name: "oneinfra/oi-manager",
    tag: env!("CARGO_PKG_VERSION"),
};

/// Where the manager's binary is in its image.
pub const MANAGER_PATH: &str = "/usr/local/bin/oi-manager";

/// The manager image's definition.
pub fn manager() -> ImageDef {
    ImageDef {
        image: MANAGER,
        kind: Kind::Manager,
    }
}

/// The name the kube stand-in answers to as the kubelet.
pub const KUBELET_LINK_NAME: &str = "kubelet";

/// What an image is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pause,
    Busybox,
    Etcd,
    Haproxy,
    /// `oi-vpn-endpoint` with wireguard-go, wg and busybox.
    VpnEndpoint,
    /// keepalived with busybox (its start script's shell, `ip`, `awk`, `sed`).
    Keepalived,
    /// A SIP jump host: sshd, ssh, ssh-keygen, kubectl, `oi-host` (as `host`), busybox, and
    /// the login user `ubuntu` (uid 1000) with no password.
    JumpHost,
    /// A SIP tenant's OIDC provider: `oi-oidc-provider` alone (no shell).
    OidcProvider,
    /// The kube stand-in installed as `component` (its role comes from argv\[0\]), reporting
    /// Kubernetes `version` (without the `v`).
    Kube {
        component: &'static str,
        version: &'static str,
    },
    /// `oi-manager`, run as `oi-manager run` by default.
    Manager,
}

impl Kind {
    /// Whether building it needs the kube stand-in binary.
    pub fn needs_standin(&self) -> bool {
        matches!(self, Kind::Kube { .. })
    }
}

/// One image of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageDef {
    pub image: Image,
    pub kind: Kind,
}

impl ImageDef {
    /// The fully qualified reference, e.g. `localhost/oneinfra/pause:3.10.1`.
    pub fn reference(&self) -> String {
        self.image.reference(Some(crate::REPOSITORY))
    }

    /// The tarball's file name, `<short-name>_<tag>.tar`.
    pub fn file_name(&self) -> String {
        format!("{}_{}.tar", self.image.short_name(), self.image.tag)
    }

    /// Whether `--only name` selects it: the short name (`etcd`), `short:tag`, or the reference.
    pub fn matches(&self, name: &str) -> bool {
        let short = self.image.short_name();
        name == short
            || name == format!("{short}:{}", self.image.tag)
            || name == self.reference()
            || name == self.image.to_string()
    }

    /// The file tree and run configuration. The helper binaries (pause program, kube
    /// stand-in) are asked for only by the images that contain them.
    ///
    /// # Errors
    /// When a host file is missing, `ldd` fails, or a helper binary cannot be built.
    pub fn contents(&self, helpers: &mut dyn HelperBinaries) -> Result<(RootFs, RunConfig)> {
        let mut fs = RootFs::new(self.reference());
        fs.base()?;
        let strings = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let run = match self.kind {
            Kind::Pause => {
                fs.host_file("/pause", 0o755, &helpers.pause()?)?;
                RunConfig {
                    entrypoint: strings(&["/pause"]),
                    ..RunConfig::default()
                }
            }
            Kind::Busybox => {
                add_busybox(&mut fs)?;
                RunConfig {
                    cmd: strings(&["sh"]),
                    ..RunConfig::default()
                }
            }
            Kind::Etcd => {
                fs.binary_with_libs("/usr/local/bin/etcd", Path::new(HOST_ETCD))?;
                fs.binary_with_libs("/usr/local/bin/etcdctl", Path::new(HOST_ETCDCTL))?;
                // Upstream etcd 3.6 restores snapshots with `etcdutl snapshot restore` (its
                // etcdctl no longer does); Debian's etcd 3.4 has no etcdutl, and its etcdctl
                // takes the same command and flags: a shim, so the restore job runs the
                // upstream command against either image.
                add_busybox(&mut fs)?;
                fs.bytes("/usr/local/bin/etcdutl", 0o755, ETCDUTL_SHIM)?;
                fs.dir("/var/lib/etcd", 0o700)?;
                RunConfig {
                    cmd: strings(&["/usr/local/bin/etcd"]),
                    ..RunConfig::default()
                }
            }
            Kind::Haproxy => {
                fs.binary_with_libs("/usr/local/sbin/haproxy", Path::new(HOST_HAPROXY))?;
                fs.binary_with_libs("/usr/sbin/haproxy", Path::new(HOST_HAPROXY))?;
                // `sh -c "kill -USR2 1"`: how the engine tells haproxy to reload (the
                // upstream image is Debian's, with a shell).
                add_busybox(&mut fs)?;
                fs.dir("/run", 0o755)?;
                fs.dir("/var/lib/haproxy", 0o755)?;
                fs.dir("/usr/local/etc/haproxy", 0o755)?;
                RunConfig {
                    cmd: strings(&["haproxy", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]),
                    ..RunConfig::default()
                }
            }
            Kind::VpnEndpoint => {
                fs.binary_with_libs(VPN_ENDPOINT_PATH, &helpers.vpn_endpoint()?)?;
                fs.binary_with_libs("/usr/bin/wireguard-go", Path::new(HOST_WIREGUARD_GO))?;
                fs.binary_with_libs("/usr/bin/wg", Path::new(HOST_WG))?;
                add_busybox(&mut fs)?;
                fs.dir("/run", 0o755)?;
                fs.symlink("/var/run", "/run")?;
                RunConfig {
                    entrypoint: strings(&[VPN_ENDPOINT_PATH]),
                    ..RunConfig::default()
                }
            }
            Kind::Keepalived => {
                fs.binary_with_libs("/usr/sbin/keepalived", Path::new(HOST_KEEPALIVED))?;
                add_busybox(&mut fs)?;
                fs.dir("/run", 0o755)?;
                fs.dir("/etc/keepalived", 0o755)?;
                RunConfig {
                    entrypoint: strings(&["/usr/sbin/keepalived"]),
                    cmd: strings(&["-n", "-l", "-D"]),
                    ..RunConfig::default()
                }
            }
            Kind::JumpHost => {
                fs.binary_with_libs("/usr/sbin/sshd", Path::new(HOST_SSHD))?;
                fs.binary_with_libs("/usr/bin/ssh", Path::new(HOST_SSH))?;
                fs.binary_with_libs("/usr/bin/ssh-keygen", Path::new(HOST_SSH_KEYGEN))?;
                fs.binary_with_libs("/usr/local/bin/kubectl", &on_path(HOST_KUBECTL)?)?;
                fs.binary_with_libs(HOST_TOOL_PATH, &helpers.host_tool()?)?;
                fs.bytes("/usr/local/bin/host", 0o755, HOST_WRAPPER)?;
                add_busybox(&mut fs)?;
                // The login user: no password (`*`: key only, and not locked for sshd).
                fs.replace_bytes(
                    "/etc/passwd",
                    0o644,
                    format!(
                        "root:x:0:0:root:/root:/bin/sh\n\
                         sshd:x:101:65534::/run/sshd:/usr/sbin/nologin\n\
                         {JUMP_HOST_USER}:x:1000:1000:{JUMP_HOST_USER}:/home/{JUMP_HOST_USER}:/bin/sh\n\
                         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                    ),
                )?;
                fs.replace_bytes(
                    "/etc/group",
                    0o644,
                    format!("root:x:0:\n{JUMP_HOST_USER}:x:1000:\nnogroup:x:65534:\n"),
                )?;
                fs.bytes(
                    "/etc/shadow",
                    0o640,
                    format!(
                        "root:*:19000::::::\nsshd:*:19000::::::\n{JUMP_HOST_USER}:*:19000::::::\n"
                    ),
                )?;
                fs.bytes(
                    "/etc/nsswitch.conf",
                    0o644,
                    "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
                )?;
                fs.dir(&format!("/home/{JUMP_HOST_USER}"), 0o755)?;
                fs.dir("/run", 0o755)?;
                fs.dir("/run/sshd", 0o755)?;
                fs.dir("/etc/ssh", 0o755)?;
                RunConfig {
                    entrypoint: strings(&["/usr/sbin/sshd"]),
                    cmd: strings(&["-D", "-e"]),
                    ..RunConfig::default()
                }
            }
            Kind::OidcProvider => {
                fs.binary_with_libs(OIDC_PROVIDER_PATH, &helpers.oidc_provider()?)?;
                fs.dir("/tmp", 0o1777)?;
                RunConfig {
                    entrypoint: strings(&[OIDC_PROVIDER_PATH]),
                    cmd: strings(&["serve", "--config", "/etc/oidc/config.json"]),
                    ..RunConfig::default()
                }
            }
            Kind::Kube { component, version } => {
                let path = format!("/usr/local/bin/{component}");
                fs.binary_with_libs(&path, &helpers.standin()?)?;
                // The same binary plays the kubelet when invoked by that name.
                if component != KUBELET_LINK_NAME {
                    fs.symlink(&format!("/usr/local/bin/{KUBELET_LINK_NAME}"), component)?;
                }
                RunConfig {
                    entrypoint: Some(vec![path]),
                    env: vec![format!("{STANDIN_VERSION_ENV}=v{version}")],
                    ..RunConfig::default()
                }
            }
            Kind::Manager => {
                fs.binary_with_libs(MANAGER_PATH, &helpers.manager()?)?;
                RunConfig {
                    entrypoint: strings(&[MANAGER_PATH]),
                    cmd: strings(&["run"]),
                    ..RunConfig::default()
                }
            }
        };
        Ok((fs, run))
    }
}

/// `/bin/busybox` (static) and a symlink to it for every applet it lists.
fn add_busybox(fs: &mut RootFs) -> Result<()> {
    let host = Path::new(HOST_BUSYBOX);
    fs.host_file("/bin/busybox", 0o755, host)?;
    let out = Command::new(host)
        .arg("--list-full")
        .output()
        .map_err(|source| Error::Spawn {
            program: HOST_BUSYBOX.into(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::CommandFailed {
            program: HOST_BUSYBOX.into(),
            args: "--list-full".into(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    for applet in String::from_utf8_lossy(&out.stdout).lines() {
        let path = format!("/{}", applet.trim().trim_start_matches('/'));
        if path == "/bin/busybox" || path == "/" {
            continue;
        }
        // A real binary already at that path (e.g. another tool of the image) wins.
        if fs.get(&path).is_none() {
            fs.symlink(&path, "/bin/busybox")?;
        }
    }
    Ok(())
}

/// Every image of the set: INFRA first, then each release's images, without duplicates (the
/// releases share one etcd tag).
pub fn catalog() -> Vec<ImageDef> {
    let infra = versions::INFRA;
    let mut defs = vec![
        ImageDef {
            image: infra.pause,
            kind: Kind::Pause,
        },
        ImageDef {
            image: infra.toolbox,
            kind: Kind::Busybox,
        },
        ImageDef {
            image: infra.haproxy,
            kind: Kind::Haproxy,
        },
        ImageDef {
            image: infra.vpn_endpoint,
            kind: Kind::VpnEndpoint,
        },
        ImageDef {
            image: infra.keepalived,
            kind: Kind::Keepalived,
        },
        ImageDef {
            image: infra.jump_host,
            kind: Kind::JumpHost,
        },
        ImageDef {
            image: infra.oidc_provider,
            kind: Kind::OidcProvider,
        },
    ];
    for release in versions::RELEASES {
        let kube = |image: Image| ImageDef {
            image,
            kind: Kind::Kube {
                component: image.short_name(),
                version: release.version,
            },
        };
        let mut add = |def: ImageDef| {
            if !defs.iter().any(|d| d.reference() == def.reference()) {
                defs.push(def);
            }
        };
        add(ImageDef {
            image: release.etcd,
            kind: Kind::Etcd,
        });
        add(kube(release.kube_apiserver));
        add(kube(release.kube_controller_manager));
        add(kube(release.kube_scheduler));
    }
    defs
}

/// The images `--only` names select: the [`catalog`] when `only` is empty; the names may also
/// select the [`manager`] image.
///
/// # Errors
/// When a name matches no image.
pub fn select(only: &[String]) -> Result<Vec<ImageDef>> {
    let mut all = catalog();
    if only.is_empty() {
        return Ok(all);
    }
    all.push(manager());
    for name in only {
        if !all.iter().any(|d| d.matches(name)) {
            let mut known: Vec<&str> = Vec::new();
            for short in all.iter().map(|d| d.image.short_name()) {
                if !known.contains(&short) {
                    known.push(short);
                }
            }
            return Err(Error::UnknownImage {
                name: name.clone(),
                known: known.join(", "),
            });
        }
    }
    Ok(all
        .into_iter()
        .filter(|d| only.iter().any(|n| d.matches(n)))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn catalog_covers_the_versions_table_once() {
        let defs = catalog();
        let refs: Vec<String> = defs.iter().map(ImageDef::reference).collect();
        let mut expected: Vec<String> = vec![
            versions::INFRA.pause,
            versions::INFRA.toolbox,
            versions::INFRA.haproxy,
            versions::INFRA.vpn_endpoint,
            versions::INFRA.keepalived,
            versions::INFRA.jump_host,
            versions::INFRA.oidc_provider,
        ]
        .into_iter()
        .chain(versions::RELEASES.iter().flat_map(|r| r.images()))
        .map(|i| i.reference(Some("localhost/oneinfra")))
        .collect();
        expected.sort();
        expected.dedup();
        let mut sorted = refs.clone();
        sorted.sort();
        assert_eq!(sorted, expected);
        assert!(refs.contains(&"localhost/oneinfra/pause:3.10.1".to_string()));
        assert!(refs.contains(&"localhost/oneinfra/kube-scheduler:v1.37.1".to_string()));
    }

    #[test]
    fn file_names_are_short_name_and_tag() {
        let pause = catalog()[0];
        assert_eq!(pause.file_name(), "pause_3.10.1.tar");
    }

    #[test]
    fn select_by_short_name_tag_or_reference() {
        let apis = select(&["kube-apiserver".into()]).unwrap();
        assert_eq!(apis.len(), versions::RELEASES.len());
        let one = select(&["kube-apiserver:v1.36.4".into()]).unwrap();
        assert_eq!(one.len(), 1);
        let by_ref = select(&["localhost/oneinfra/busybox:1.36.1".into()]).unwrap();
        assert_eq!(by_ref[0].kind, Kind::Busybox);
        match select(&["nginx".into()]) {
            Err(Error::UnknownImage { name, known }) => {
                assert_eq!(name, "nginx");
                assert_eq!(known.matches("kube-apiserver").count(), 1);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(select(&[]).unwrap().len(), catalog().len());
    }

    #[test]
    fn the_manager_image_is_built_on_request_only() {
        assert!(!catalog().iter().any(|d| d.kind == Kind::Manager));
        assert!(!select(&[]).unwrap().iter().any(|d| d.kind == Kind::Manager));
        for name in [
            "oi-manager",
            "oi-manager:0.1.0",
            "localhost/oneinfra/oi-manager:0.1.0",
        ] {
            assert_eq!(select(&[name.into()]).unwrap(), vec![manager()], "{name}");
        }
        // The reference config/manager/deployment.yaml runs.
        assert_eq!(manager().reference(), "localhost/oneinfra/oi-manager:0.1.0");
        assert_eq!(manager().file_name(), "oi-manager_0.1.0.tar");
        match select(&["nginx".into()]) {
            Err(Error::UnknownImage { known, .. }) => assert!(known.ends_with(", oi-manager")),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Helper binaries that are host programs, so that contents are built without cargo.
    struct HostHelpers;

    impl HelperBinaries for HostHelpers {
        fn pause(&mut self) -> Result<PathBuf> {
            panic!("not asked for")
        }
        fn standin(&mut self) -> Result<PathBuf> {
            panic!("not asked for")
        }
        fn manager(&mut self) -> Result<PathBuf> {
            Ok(PathBuf::from("/bin/sh"))
        }
        fn vpn_endpoint(&mut self) -> Result<PathBuf> {
            panic!("not asked for")
        }
        fn host_tool(&mut self) -> Result<PathBuf> {
            Ok(PathBuf::from("/bin/sh"))
        }
        fn oidc_provider(&mut self) -> Result<PathBuf> {
            Ok(PathBuf::from("/bin/sh"))
        }
    }

    #[test]
    fn the_jump_host_image_has_sshd_ssh_the_host_tool_and_a_user_without_password() {
        let def = catalog()
            .into_iter()
            .find(|d| d.kind == Kind::JumpHost)
            .unwrap();
        let (fs, _) = def.contents(&mut HostHelpers).unwrap();
        for path in [
            "/usr/sbin/sshd",
            "/usr/bin/ssh",
            "/usr/bin/ssh-keygen",
            "/usr/local/bin/kubectl",
            HOST_TOOL_PATH,
            "/usr/local/bin/host",
            "/bin/chown",
            "/run/sshd",
        ] {
            assert!(fs.get(path).is_some(), "{path}");
        }
        let text = |path: &str| match fs.get(path) {
            Some(crate::rootfs::Node::File {
                content: crate::rootfs::Content::Bytes(data),
                ..
            }) => String::from_utf8(data.clone()).unwrap(),
            other => panic!("{path}: {other:?}"),
        };
        assert!(text("/etc/passwd").contains("ubuntu:x:1000:1000:"));
        // `*`: no password can match; not `!`, which sshd takes as a locked account.
        assert!(text("/etc/shadow").contains("ubuntu:*:"));
        assert!(text("/usr/local/bin/host").contains("oi-host --inventory"));
    }

    #[test]
    fn the_oidc_provider_image_runs_the_provider_alone() {
        let def = catalog()
            .into_iter()
            .find(|d| d.kind == Kind::OidcProvider)
            .unwrap();
        let (fs, run) = def.contents(&mut HostHelpers).unwrap();
        assert!(fs.get(OIDC_PROVIDER_PATH).is_some());
        assert!(fs.get("/bin/busybox").is_none());
        assert_eq!(run.entrypoint, Some(vec![OIDC_PROVIDER_PATH.to_string()]));
    }

    #[test]
    fn the_manager_image_runs_oi_manager_run() {
        let (fs, run) = manager().contents(&mut HostHelpers).unwrap();
        assert!(fs.get(MANAGER_PATH).is_some());
        assert!(fs.get("/tmp").is_some());
        assert_eq!(
            run,
            RunConfig {
                entrypoint: Some(vec!["/usr/local/bin/oi-manager".to_string()]),
                cmd: Some(vec!["run".to_string()]),
                env: Vec::new(),
            }
        );
    }
}
