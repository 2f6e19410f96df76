//! The mutual-TLS CRI front of a `--tcp` hypervisor, made as `oi hypervisor join` makes one
//! (`oi_cri_front::ensure_front`): haproxy in TCP mode as a host-network pod through the
//! hypervisor's own containerd, terminating TLS (client certificate required) and forwarding
//! the raw HTTP/2 stream to containerd's unix socket. Its CAs, certificates and keys live in
//! the hypervisor's `tls` directory (keys 0600).
//!
//! ```text
//! CRI client ──TLS (client cert, ALPN h2)──► haproxy pod IP:27000 ──h2c──► unix cri.sock ──► containerd
//! ```

use std::net::Ipv4Addr;

use time::OffsetDateTime;

use crate::error::{Error, Result};
use crate::state::HypervisorPaths;

/// The image repository the set imports its images under.
pub const IMAGE_REPOSITORY: &str = "localhost/oneinfra";

/// What a client needs to reach a front. `Debug` is not derived: it holds the client key.
pub struct FrontCredentials {
    /// `tcp://IP:PORT`.
    pub uri: String,
    /// Verifies the front's server certificate (the manifest's `caCertificate`).
    pub server_ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

/// Ensures a hypervisor's front and waits until it answers CRI over mutual TLS.
///
/// # Errors
/// [`Error::Front`] naming what failed.
pub fn start(
    hypervisor: &str,
    paths: &HypervisorPaths,
    ip: Ipv4Addr,
    port: u16,
) -> Result<FrontCredentials> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::AsyncRuntime)?;
    let front = runtime
        .block_on(oi_cri_front::ensure_front(&oi_cri_front::FrontOptions {
            name: hypervisor,
            ip: ip.into(),
            port,
            socket: &paths.socket,
            state_dir: &paths.tls,
            image: oi_api::versions::INFRA
                .haproxy
                .reference(Some(IMAGE_REPOSITORY)),
            now: OffsetDateTime::now_utc(),
        }))
        .map_err(|e| Error::Front {
            hypervisor: hypervisor.to_string(),
            message: format!("{e:#}"),
        })?;
    Ok(FrontCredentials {
        uri: front.uri,
        server_ca_pem: front.server_ca_pem,
        client_cert_pem: front.client_cert_pem,
        client_key_pem: front.client_key_pem,
    })
}
