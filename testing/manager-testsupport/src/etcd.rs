//! A real etcd for the management API server stand-in to store its objects in: one member on
//! loopback, client mutual TLS with a freshly minted CA, its data in a temporary directory.
//! Stopped (killed and reaped) when dropped, also when a test panics.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use oi_kube_standin::local::{EtcdConnection, TestCa};

/// How long etcd may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running etcd; killed when dropped.
pub struct EtcdProcess {
    child: Child,
    /// What the API server needs to reach it.
    pub connection: EtcdConnection,
    dir: tempfile::TempDir,
}

impl EtcdProcess {
    /// Starts etcd (`etcd` on PATH, as `scripts/setup.sh` installs it) and waits until its
    /// client port accepts connections.
    ///
    /// # Errors
    /// When etcd is missing, cannot start, or does not listen within 30 s (its log is in the
    /// message).
    pub fn start() -> Result<EtcdProcess> {
        let dir = tempfile::tempdir().context("a directory for etcd")?;
        let ca = TestCa::new("etcd-ca")?;
        let (server_cert, server_key) =
            ca.leaf("etcd", &[], &["127.0.0.1", "localhost"], true, false)?;
        let (client_cert, client_key) = ca.leaf(
            "kube-apiserver-etcd-client",
            &["system:masters"],
            &[],
            false,
            true,
        )?;
        let write = |name: &str, text: &str| -> Result<std::path::PathBuf> {
            let path = dir.path().join(name);
            oi_kube_standin::local::write_private(&path, text)
                .with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        let ca_path = write("etcd-ca.crt", &ca.pem())?;
        let cert = write("etcd-server.crt", &server_cert)?;
        let key = write("etcd-server.key", &server_key)?;
        let client_port = oi_testsupport::free_loopback_port();
        let peer_port = oi_testsupport::free_loopback_port();
        let url = format!("https://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new("etcd")
            .arg("--name=standin")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=standin={peer}"))
            .arg(format!("--cert-file={}", cert.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--trusted-ca-file={}", ca_path.display()))
            .arg("--client-cert-auth")
            // Room for the manager-scale benchmark's objects and their revisions between the
            // stand-in's compactions (etcd's default quota is 2 GiB).
            .arg("--quota-backend-bytes=8589934592")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting etcd (is it installed? scripts/setup.sh installs it)")?;
        let mut etcd = EtcdProcess {
            child,
            connection: EtcdConnection {
                servers: vec![url],
                ca_pem: ca.pem().into_bytes(),
                cert_pem: client_cert.into_bytes(),
                key_pem: client_key.into_bytes(),
            },
            dir,
        };
        etcd.wait_listening(client_port)?;
        Ok(etcd)
    }

    fn wait_listening(&mut self, port: u16) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("etcd exited with {status}: {}", self.log());
            }
            if Instant::now() > deadline {
                bail!("etcd did not listen in {START_TIMEOUT:?}: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its process id (to read its memory).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
