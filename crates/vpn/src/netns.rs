//! The cluster's own network namespace: where the WireGuard interface lives, so that clusters
//! with the same VPN CIDR on one hypervisor never share an address, route or interface.
//!
//! ```text
//! host network namespace (the hypervisor's)      the cluster's namespace (this module)
//!   wireguard-go: UDP <ip>:<port> ──── tun ────►   wgXXXXXXXXXXXX 10.0.0.1/16, forwarding on
//!   egress proxy: TCP <ip>:<port>   ── dial ──►    one thread lives here: it dials kubelets
//! ```
//!
//! A thread unshares its network namespace and stays in it; its file descriptor keeps the
//! namespace alive, lets links be moved into it, and goes with the [`Namespace`]. Nothing
//! is named under `/var/run/netns`: a killed endpoint leaves nothing behind. Sockets the
//! thread opens belong to the namespace wherever they are used afterwards.

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd as _, RawFd};
use std::time::Duration;

use futures::TryStreamExt as _;
use ipnet::IpNet;
use nix::sched::CloneFlags;
use rtnetlink::LinkUnspec;
use tokio::sync::{mpsc, oneshot};

enum Job {
    Configure {
        link: String,
        address: IpNet,
        reply: oneshot::Sender<Result<(), String>>,
    },
    Dial {
        to: SocketAddr,
        timeout: Duration,
        reply: oneshot::Sender<io::Result<std::net::TcpStream>>,
    },
}

/// A network namespace of this process's own, and the thread that lives in it.
pub struct Namespace {
    fd: File,
    jobs: mpsc::UnboundedSender<Job>,
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

impl Namespace {
    /// A new, empty network namespace (only a loopback, down).
    ///
    /// # Errors
    /// `unshare(CLONE_NEWNET)` refused (no CAP_SYS_ADMIN), or the thread could not start.
    pub fn create() -> io::Result<Namespace> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<File>>();
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        std::thread::Builder::new()
            .name("oi-vpn-netns".into())
            .spawn(move || {
                let fd = nix::sched::unshare(CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from)
                    .and_then(|()| File::open("/proc/thread-self/ns/net"));
                let ok = fd.is_ok();
                if ready_tx.send(fd).is_err() || !ok {
                    return;
                }
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(_) => return,
                };
                runtime.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        match job {
                            Job::Dial { to, timeout, reply } => {
                                tokio::spawn(async move {
                                    let result = tokio::time::timeout(
                                        timeout,
                                        tokio::net::TcpStream::connect(to),
                                    )
                                    .await
                                    .unwrap_or_else(|_| {
                                        Err(io::Error::new(
                                            io::ErrorKind::TimedOut,
                                            format!("no answer within {timeout:?}"),
                                        ))
                                    })
                                    .and_then(tokio::net::TcpStream::into_std);
                                    let _ = reply.send(result);
                                });
                            }
                            Job::Configure {
                                link,
                                address,
                                reply,
                            } => {
                                let _ = reply.send(configure_here(&link, address).await);
                            }
                        }
                    }
                });
            })?;
        let fd = ready_rx
            .recv()
            .map_err(|_| io::Error::other("the namespace thread ended before it started"))??;
        Ok(Namespace { fd, jobs })
    }

    /// The namespace's file descriptor (to move a link into it).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Inside the namespace: loopback up; `link` (moved in already) given `address` and up;
    /// forwarding on, so that peers reach each other through this endpoint, without ICMP
    /// redirects (in and out are the same interface).
    ///
    /// # Errors
    /// What netlink or `/proc/sys` refused, named.
    pub async fn configure(&self, link: &str, address: IpNet) -> Result<(), String> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job::Configure {
                link: link.to_string(),
                address,
                reply,
            })
            .map_err(|_| "the namespace thread is gone".to_string())?;
        rx.await
            .map_err(|_| "the namespace thread is gone".to_string())?
    }

    /// A TCP connection to `to`, made inside the namespace.
    ///
    /// # Errors
    /// Refused, unreachable, no answer within `timeout`.
    pub async fn dial(
        &self,
        to: SocketAddr,
        timeout: Duration,
    ) -> io::Result<tokio::net::TcpStream> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job::Dial { to, timeout, reply })
            .map_err(|_| io::Error::other("the namespace thread is gone"))?;
        let stream = rx
            .await
            .map_err(|_| io::Error::other("the namespace thread is gone"))??;
        tokio::net::TcpStream::from_std(stream)
    }
}

async fn link_index(handle: &rtnetlink::Handle, name: &str) -> Result<u32, String> {
    handle
        .link()
        .get()
        .match_name(name.to_string())
        .execute()
        .try_next()
        .await
        .map_err(|e| format!("link {name}: {e}"))?
        .map(|l| l.header.index)
        .ok_or_else(|| format!("link {name}: not found"))
}

fn sysctl(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("{path}: {e}"))
}

/// [`Namespace::configure`], on the namespace's own thread.
async fn configure_here(link: &str, address: IpNet) -> Result<(), String> {
    let (connection, handle, _) =
        rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    let task = tokio::spawn(connection);
    let result = async {
        let lo = link_index(&handle, "lo").await?;
        handle
            .link()
            .change(LinkUnspec::new_with_index(lo).up().build())
            .execute()
            .await
            .map_err(|e| format!("lo up: {e}"))?;
        let index = link_index(&handle, link).await?;
        let present = handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| format!("addresses of {link}: {e}"))?;
        if present.is_empty() {
            handle
                .address()
                .add(index, address.addr(), address.prefix_len())
                .execute()
                .await
                .map_err(|e| format!("address {address} on {link}: {e}"))?;
        }
        handle
            .link()
            .change(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(|e| format!("{link} up: {e}"))?;
        match address.addr() {
            IpAddr::V4(_) => {
                sysctl("/proc/sys/net/ipv4/conf/all/send_redirects", "0")?;
                sysctl("/proc/sys/net/ipv4/ip_forward", "1")
            }
            IpAddr::V6(_) => sysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1"),
        }
    }
    .await;
    task.abort();
    result
}

/// Moves the link named `name` of the caller's network namespace into `into`.
///
/// # Errors
/// The link does not exist, or the kernel refused.
pub async fn move_link(name: &str, into: &Namespace) -> Result<(), String> {
    let (connection, handle, _) =
        rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    let task = tokio::spawn(connection);
    let result = handle
        .link()
        .change(
            LinkUnspec::new_with_name(name)
                .setns_by_fd(into.raw_fd())
                .build(),
        )
        .execute()
        .await
        .map_err(|e| format!("moving {name} into the cluster's network namespace: {e}"));
    task.abort();
    result
}
