//! The endpoint's life: sessions of wireguard-go in the cluster's own namespace, kept in
//! step with the configuration file, and the egress proxy in front of them.
//!
//! ```text
//! start ─► proxy: bind <ip>:<port> (retried while a replaced endpoint still holds it)
//!   │
//!   └► session: namespace ─► wireguard-go -f <interface> (host namespace: its UDP port is
//!      the hypervisor's) ─► key, port, peers (remembered endpoints) over its UAPI socket
//!      ─► interface moved into the namespace, addressed, up, forwarding
//!        every 500 ms: peers' endpoints saved when they changed; the file changed? sync
//!                      the device (only what differs)
//!        every 5 s:    sync anyway (repairs a hand-made change)
//!        wireguard-go gone: the session ends, a new one starts after a second
//! ```
//!
//! Peers come and go by the file alone, without a restart: a peer that stays keeps its
//! session. The endpoints saved under the state directory let a new session (a replaced
//! pod) reach workers behind NAT at once instead of waiting for them to rekey.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use ipnet::IpNet;
use sha2::{Digest as _, Sha256};
use tokio::net::TcpStream;

use crate::config::{self, Config, Key};
use crate::netns::{self, Namespace};
use crate::proxy::{DIAL_TIMEOUT, Destinations, Dial, Proxy, TlsFiles};
use crate::uapi::{self, Device};

/// Everything the endpoint is told.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The WireGuard interface's name (unique on the hypervisor while it is created there).
    pub interface: String,
    /// The configuration file ([`crate::config`]).
    pub config: PathBuf,
    /// The endpoint's address in the VPN, with the VPN's prefix (`10.0.0.1/16`).
    pub address: IpNet,
    /// Where peers' endpoints are remembered.
    pub state_dir: PathBuf,
    pub wireguard_go: PathBuf,
    pub proxy_listen: SocketAddr,
    pub proxy_tls: TlsFiles,
    /// How often the file is looked at.
    pub poll: Duration,
}

/// The name of the file of remembered endpoints under the state directory.
pub const ENDPOINTS_FILE: &str = "endpoints";

fn log(message: impl std::fmt::Display) {
    eprintln!("oi-vpn-endpoint: {message}");
}

/// The session running now, for the proxy's dials: its namespace and its peers' addresses.
#[derive(Default)]
struct Current(RwLock<Option<(Arc<Namespace>, Vec<IpNet>)>>);

impl Current {
    fn set(&self, value: Option<(Arc<Namespace>, Vec<IpNet>)>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = value;
    }
}

/// Every allowed IP of the file's peers: what the device routes to a peer.
fn routes(config: &Config) -> Vec<IpNet> {
    config
        .peers
        .values()
        .flat_map(|p| p.allowed_ips.iter().copied())
        .collect()
}

impl Dial for Current {
    fn dial(&self, to: SocketAddr) -> BoxFuture<'_, std::io::Result<TcpStream>> {
        let current = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        async move {
            match current {
                // No peer has the address: say so now rather than after the dial's timeout.
                Some((_, routes)) if !routes.iter().any(|n| n.contains(&to.ip())) => {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("no peer of the cluster VPN has the address {}", to.ip()),
                    ))
                }
                Some((ns, _)) => ns.dial(to, DIAL_TIMEOUT).await,
                None => Err(std::io::Error::other(
                    "the cluster VPN is starting (no WireGuard session yet)",
                )),
            }
        }
        .boxed()
    }
}

/// Runs until `stop` completes; then wireguard-go is stopped and the namespace goes.
///
/// # Errors
/// Only what makes running impossible from the start (an address outside any CIDR).
pub async fn run(
    settings: Settings,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let destinations = Destinations {
        cidr: settings.address.trunc(),
        own: settings.address.addr(),
    };
    let current = Arc::new(Current::default());
    let proxy = Arc::new(Proxy::new(settings.proxy_tls.clone(), destinations));
    if let Err(e) = proxy.acceptor() {
        // Not fatal: the files may be written after the pod starts; each connection reads
        // them again.
        log(format!("proxy: TLS files not usable yet: {e}"));
    }
    let listen = settings.proxy_listen;
    let dialer: Arc<dyn Dial> = current.clone();
    let proxy_task = tokio::spawn(async move {
        let mut said = false;
        let listener = loop {
            match tokio::net::TcpListener::bind(listen).await {
                Ok(l) => break l,
                Err(e) => {
                    if !said {
                        log(format!("proxy: binding {listen}: {e} (retrying)"));
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        log(format!("proxy: serving CONNECT on {listen}"));
        proxy.serve(listener, dialer).await;
    });
    let stop = stop.boxed_local().shared();
    let mut backoff = Duration::from_millis(200);
    loop {
        let started = tokio::select! {
            s = Session::start(&settings) => s,
            () = stop.clone() => break,
        };
        match started {
            Ok(mut session) => {
                backoff = Duration::from_millis(200);
                current.set(Some((
                    Arc::clone(&session.namespace),
                    session.routes.clone(),
                )));
                log(format!(
                    "{}: up, {} peers, listening on UDP {}",
                    settings.interface, session.peers, session.port
                ));
                let ended = tokio::select! {
                    why = session.run(&settings, &current) => Some(why),
                    () = stop.clone() => None,
                };
                current.set(None);
                session.stop().await;
                match ended {
                    Some(why) => log(format!(
                        "{}: session ended: {why}; starting again",
                        settings.interface
                    )),
                    None => break,
                }
            }
            Err(e) => {
                log(format!("{}: cannot start: {e}", settings.interface));
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.clone() => break,
        }
    }
    proxy_task.abort();
    Ok(())
}

struct Session {
    namespace: Arc<Namespace>,
    child: tokio::process::Child,
    device: Device,
    /// The digest of the file as last applied.
    applied: [u8; 32],
    peers: usize,
    routes: Vec<IpNet>,
    port: u16,
    endpoints: BTreeMap<Key, SocketAddr>,
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn read_config(path: &Path) -> Result<(Vec<u8>, Config), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| format!("{}: not text", path.display()))?;
    let config = config::parse(text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((bytes, config))
}

/// The remembered endpoints (a missing or damaged file is an empty memory).
pub fn load_endpoints(state_dir: &Path) -> BTreeMap<Key, SocketAddr> {
    let text = std::fs::read_to_string(state_dir.join(ENDPOINTS_FILE)).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (k, e) = l.split_once(' ')?;
            Some((Key::from_base64(k).ok()?, e.trim().parse().ok()?))
        })
        .collect()
}

/// Saves the endpoints, atomically.
///
/// # Errors
/// The directory or file cannot be written.
pub fn save_endpoints(
    state_dir: &Path,
    endpoints: &BTreeMap<Key, SocketAddr>,
) -> Result<(), String> {
    std::fs::create_dir_all(state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let text: String = endpoints
        .iter()
        .map(|(k, e)| format!("{k} {e}\n"))
        .collect();
    let tmp = state_dir.join(format!(".{ENDPOINTS_FILE}.tmp"));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, state_dir.join(ENDPOINTS_FILE))
        .map_err(|e| format!("{}: {e}", state_dir.display()))
}

impl Session {
    async fn start(settings: &Settings) -> Result<Session, String> {
        let (bytes, config) = read_config(&settings.config)?;
        let namespace = Arc::new(
            Namespace::create().map_err(|e| format!("a network namespace of its own: {e}"))?,
        );
        let device = Device::new(&settings.interface);
        // A socket left by a wireguard-go killed with its pod's mount namespace cannot be
        // here (the path is the container's); one of an earlier session is gone with it.
        let _ = std::fs::remove_file(&device.path);
        let mut child = tokio::process::Command::new(&settings.wireguard_go)
            .arg("-f")
            .arg(&settings.interface)
            .env("WG_PROCESS_FOREGROUND", "1")
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", settings.wireguard_go.display()))?;
        let waited = Instant::now();
        while !device.path.exists() {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("wireguard-go exited at start ({status})"));
            }
            if waited.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "{} did not appear within 10s",
                    device.path.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let endpoints = load_endpoints(&settings.state_dir);
        let state = device.get().await.map_err(|e| e.to_string())?;
        if let Some(body) = uapi::sync(&state, &config, &endpoints) {
            device.set(&body).await.map_err(|e| e.to_string())?;
        }
        netns::move_link(&settings.interface, &namespace).await?;
        namespace
            .configure(&settings.interface, settings.address)
            .await?;
        Ok(Session {
            namespace,
            child,
            device,
            applied: digest(&bytes),
            peers: config.peers.len(),
            routes: routes(&config),
            port: config.listen_port,
            endpoints,
        })
    }

    /// Keeps the device in step until wireguard-go ends; returns why it ended. Every tick
    /// the peers' endpoints are read and saved when they changed (a replaced endpoint must
    /// find a worker that connected a second ago); the file is applied when it changed, and
    /// every 5 s anyway.
    async fn run(&mut self, settings: &Settings, current: &Current) -> String {
        let mut last_full = Instant::now();
        let mut said: Option<String> = None;
        loop {
            tokio::time::sleep(settings.poll).await;
            match self.child.try_wait() {
                Ok(Some(status)) => return format!("wireguard-go exited ({status})"),
                Ok(None) => {}
                Err(e) => return format!("wireguard-go: {e}"),
            }
            let changed = match std::fs::read(&settings.config) {
                Ok(bytes) => digest(&bytes) != self.applied,
                Err(_) => false,
            };
            let full = last_full.elapsed() >= Duration::from_secs(5);
            if full {
                last_full = Instant::now();
            }
            let done = self.tick(settings, changed || full).await;
            current.set(Some((Arc::clone(&self.namespace), self.routes.clone())));
            match done {
                Ok(Some(note)) => {
                    log(note);
                    said = None;
                }
                Ok(None) => said = None,
                Err(e) => {
                    // Said once until it changes: a bad file is not logged twice a second.
                    if said.as_deref() != Some(e.as_str()) {
                        log(format!(
                            "{}: {e} (the device keeps its last configuration)",
                            settings.interface
                        ));
                        said = Some(e);
                    }
                }
            }
        }
    }

    /// One tick: the peers' endpoints saved when they changed; with `apply`, the file as it
    /// is now applied (`Some` says what changed).
    async fn tick(&mut self, settings: &Settings, apply: bool) -> Result<Option<String>, String> {
        let state = self.device.get().await.map_err(|e| e.to_string())?;
        // Endpoints of peers that left are forgotten; those seen now replace older ones.
        let seen: BTreeMap<Key, SocketAddr> = state
            .peers
            .iter()
            .filter_map(|(k, p)| p.endpoint.map(|e| (*k, e)))
            .collect();
        let mut remembered: BTreeMap<Key, SocketAddr> = self
            .endpoints
            .iter()
            .filter(|(k, _)| state.peers.contains_key(*k))
            .map(|(k, e)| (*k, *e))
            .collect();
        remembered.extend(seen);
        if remembered != self.endpoints {
            save_endpoints(&settings.state_dir, &remembered)?;
            self.endpoints = remembered;
        }
        if !apply {
            return Ok(None);
        }
        let (bytes, config) = read_config(&settings.config)?;
        let note = match uapi::sync(&state, &config, &self.endpoints) {
            Some(body) => {
                self.device.set(&body).await.map_err(|e| e.to_string())?;
                let added = config
                    .peers
                    .keys()
                    .filter(|k| !state.peers.contains_key(*k))
                    .count();
                let removed = state
                    .peers
                    .keys()
                    .filter(|k| !config.peers.contains_key(*k))
                    .count();
                (added + removed > 0).then(|| {
                    format!(
                        "{}: configuration applied ({added} peers added, {removed} removed, {} in all)",
                        settings.interface,
                        config.peers.len()
                    )
                })
            }
            None => None,
        };
        self.applied = digest(&bytes);
        self.peers = config.peers.len();
        self.routes = routes(&config);
        Ok(note)
    }

    /// Stops wireguard-go as its own signal handling expects (it removes its socket and
    /// interface), killing it if it takes more than two seconds.
    async fn stop(mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id.cast_signed()))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}
