//! The kube-apiserver stand-in.
//!
//! ```text
//!  start: load serving cert/key + client CA, service-account keys, etcd client cert
//!         bind --bind-address:--secure-port
//!  every 1 s: put + range <etcd-prefix>/standin/<address>:<port> on every etcd ──► Health
//!  requests:
//!    /livez[/ping]               200 while the process runs
//!    /healthz /readyz [/etcd]    200 while some etcd endpoint answers, else 500 + reason
//!                                (`?verbose` lists the checks, as the real server does)
//!    /version                    {"major","minor","gitVersion",...}
//!      (these four are anonymous unless --anonymous-auth=false, as in the real server)
//!    /api /apis                  small discovery JSON     } a client certificate verified
//!    anything else               404 Status               } against --client-ca-file, else 401
//! ```
//!
//! `--authorization-mode` is validated but not enforced: any verified client certificate may
//! read what the stand-in serves.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use tokio::net::TcpListener;
use tokio::sync::watch;
use x509_parser::extensions::GeneralName;

use crate::config::ApiServerConfig;
use crate::etcd::Etcd;
use crate::https::{HttpsError, chain};
use crate::keys::{self, KeyError};
use crate::serve::{self, Handler};
use crate::tls::{self, Identity, TlsError};

/// How often etcd is written and read.
pub const ETCD_INTERVAL: Duration = Duration::from_secs(1);
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the API server stand-in could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// Certificates or keys for TLS.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Service-account keys.
    #[error("service-account keys")]
    ServiceAccount(#[source] KeyError),
    /// A certificate and a key given together that do not belong together, or do not parse.
    #[error("{what}")]
    KeyPair {
        /// The flags.
        what: String,
        /// Why.
        #[source]
        source: KeyError,
    },
    /// The etcd endpoints.
    #[error("--etcd-servers")]
    Etcd(#[source] HttpsError),
    /// The listening socket.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The signal handlers.
    #[error("cannot install signal handlers")]
    Signals(#[source] std::io::Error),
}

/// What the last etcd round found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Whether some endpoint took a write and returned it.
    pub ready: bool,
    /// Why not, when not.
    pub reason: String,
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// The key the stand-in writes: `<prefix>/standin/<address>:<port>`, where the address is the
/// advertise address, else a specific bind address, else the host name. Host names alone
/// would collide: hypervisors made of network namespaces share one.
pub fn etcd_key(config: &ApiServerConfig) -> String {
    let address = config
        .advertise_address
        .or(Some(config.bind_address).filter(|a| !a.is_unspecified()))
        .map(|a| a.to_string())
        .unwrap_or_else(hostname);
    format!(
        "{}/standin/{address}:{}",
        config.etcd_prefix, config.secure_port
    )
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Runs the API server stand-in until SIGTERM or SIGINT.
///
/// # Errors
/// Anything that prevents it from starting; see [`ApiServerError`].
pub async fn run(config: ApiServerConfig, version: String) -> Result<(), ApiServerError> {
    let termination = serve::termination();
    tokio::pin!(termination);

    let serving_what = shown(&config.tls_cert);
    let certs = tls::certs_from_pem(&tls::read(&config.tls_cert)?, &serving_what)?;
    let key = tls::key_from_pem(&tls::read(&config.tls_key)?, &shown(&config.tls_key))?;
    if let Some(leaf) = certs.first() {
        tracing::info!("serving certificate {serving_what}: {}", describe(leaf));
    }
    check_pair(
        "--tls-cert-file and --tls-private-key-file",
        &config.tls_cert,
        &config.tls_key,
    )?;
    for (flag, cert, key) in &config.client_pairs {
        tls::certs_from_pem(&tls::read(cert)?, &shown(cert))?;
        check_pair(&format!("--{flag} and its key"), cert, key)?;
        tracing::info!("--{flag} {} matches its key {}", shown(cert), shown(key));
    }
    let client_ca_what = shown(&config.client_ca);
    let client_roots = tls::roots_from_pem(&tls::read(&config.client_ca)?, &client_ca_what)?;
    let server_tls = tls::server_config(
        certs,
        key,
        Some((client_roots, &client_ca_what)),
        "--tls-cert-file and --tls-private-key-file",
    )?;
    tracing::info!("client certificates verified against {client_ca_what}");

    for file in &config.service_account_key_files {
        let found = keys::public_keys(file).map_err(ApiServerError::ServiceAccount)?;
        tracing::info!(
            "service-account verification keys: {} in {}",
            found.len(),
            shown(file)
        );
    }
    let key_files: Vec<&Path> = config
        .service_account_key_files
        .iter()
        .map(|p| p.as_path())
        .collect();
    keys::check_private_matches(&config.service_account_signing_key, &key_files)
        .map_err(ApiServerError::ServiceAccount)?;
    tracing::info!(
        "service-account signing key {} matches a verification key; issuers: {}",
        shown(&config.service_account_signing_key),
        config.service_account_issuers.join(", ")
    );

    let etcd_roots = tls::roots_from_pem(&tls::read(&config.etcd_ca)?, &shown(&config.etcd_ca))?;
    let etcd_certs =
        tls::certs_from_pem(&tls::read(&config.etcd_cert)?, &shown(&config.etcd_cert))?;
    let etcd_key_der = tls::key_from_pem(&tls::read(&config.etcd_key)?, &shown(&config.etcd_key))?;
    let etcd_tls = tls::client_config(
        etcd_roots,
        Some((etcd_certs, etcd_key_der)),
        "--etcd-certfile and --etcd-keyfile",
    )?;
    let etcd =
        Etcd::new(&config.etcd_servers, etcd_tls, ETCD_TIMEOUT).map_err(ApiServerError::Etcd)?;

    let address = SocketAddr::new(config.bind_address, config.secure_port);
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ApiServerError::Bind { address, source })?;
    tracing::info!(
        "serving securely on {address}; authorization modes {} (not enforced by the stand-in); anonymous health endpoints: {}",
        config.authorization_modes.join(","),
        config.anonymous_auth
    );

    let (health_tx, health_rx) = watch::channel(Health {
        ready: false,
        reason: "etcd not checked yet".to_string(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let key = etcd_key(&config);
    let checker = tokio::spawn(check_etcd(etcd, key, health_tx, stop_rx.clone()));
    let handler = handler(&config, version, health_rx);
    let server = tokio::spawn(serve::serve(listener, server_tls, handler, stop_rx));

    let signal = termination.await.map_err(ApiServerError::Signals)?;
    tracing::info!("{signal} received, shutting down");
    // Nobody else sends on this channel; a send error only means every receiver is gone.
    let _ = stop_tx.send(true);
    let _ = server.await;
    checker.abort();
    Ok(())
}

fn check_pair(what: &str, cert: &Path, key: &Path) -> Result<(), ApiServerError> {
    keys::check_private_matches(key, &[cert]).map_err(|source| ApiServerError::KeyPair {
        what: what.to_string(),
        source,
    })
}

/// A short description of a certificate for logs: subject and SANs, never key material.
fn describe(cert: &rustls::pki_types::CertificateDer<'_>) -> String {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
        return "unparsable".to_string();
    };
    let sans = parsed
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .map(|name| match name {
                    GeneralName::DNSName(dns) => format!("DNS:{dns}"),
                    GeneralName::IPAddress(bytes) => match bytes.len() {
                        4 => format!(
                            "IP:{}",
                            IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap_or_default())
                        ),
                        16 => format!(
                            "IP:{}",
                            IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap_or_default())
                        ),
                        _ => "IP:?".to_string(),
                    },
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    format!("subject {}, SANs [{sans}]", parsed.subject())
}

async fn check_etcd(
    etcd: Etcd,
    key: String,
    health: watch::Sender<Health>,
    mut stop: watch::Receiver<bool>,
) {
    tracing::info!(
        "checking etcd {} every {ETCD_INTERVAL:?} with key {key}",
        etcd.endpoints().collect::<Vec<_>>().join(",")
    );
    let mut interval = tokio::time::interval(ETCD_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut round: u64 = 0;
    let mut unchanged_failures: u64 = 0;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = serve::stopped(&mut stop) => return,
        }
        round += 1;
        let value = serde_json::json!({"standin": "kube-apiserver", "round": round}).to_string();
        let results = etcd.write_and_read(&key, &value).await;
        let ok: Vec<&str> = results
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(e, _)| e.as_str())
            .collect();
        let failures: Vec<String> = results
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().map(|e| chain(e)))
            .collect();
        let next = if ok.is_empty() {
            Health {
                ready: false,
                reason: failures.join("; "),
            }
        } else {
            Health {
                ready: true,
                reason: String::new(),
            }
        };
        let previous = health.borrow().clone();
        if next.ready && !previous.ready {
            tracing::info!("etcd ok: wrote and read back {key} on {}", ok.join(","));
        }
        if !next.ready {
            if previous.ready
                || previous.reason != next.reason
                || unchanged_failures.is_multiple_of(30)
            {
                tracing::warn!("etcd check failed: {}", next.reason);
            }
            unchanged_failures += 1;
        } else {
            unchanged_failures = 0;
            for failure in &failures {
                tracing::debug!("etcd endpoint failed: {failure}");
            }
        }
        health.send_replace(next);
    }
}

fn handler(config: &ApiServerConfig, version: String, health: watch::Receiver<Health>) -> Handler {
    let anonymous = config.anonymous_auth;
    let advertised = config
        .advertise_address
        .unwrap_or(match config.bind_address {
            a if a.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
            a => a,
        });
    let server_address = SocketAddr::new(advertised, config.secure_port).to_string();
    let version_json = crate::version_info(&version);
    let seen = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    Arc::new(move |request, who: Option<&Identity>| {
        let path = request.uri().path();
        if let Some(who) = who {
            note_user(&seen, who);
        }
        let public = path == "/version" || health_endpoint(path).is_some();
        if who.is_none() && !(public && anonymous) {
            return serve::status_json(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
        }
        if let Some((status, body)) = health_check(path, request.uri().query(), &health.borrow()) {
            return serve::text(status, body);
        }
        match path {
            "/version" => serve::json(StatusCode::OK, &version_json),
            "/api" => serve::json(
                StatusCode::OK,
                &serde_json::json!({
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address},
                    ],
                }),
            ),
            "/apis" => serve::json(
                StatusCode::OK,
                &serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}),
            ),
            other => serve::not_found(other),
        }
    })
}

/// The health endpoint a path names (`/healthz`, `/livez`, `/readyz`) and the single check
/// it asks for, if any (`/readyz/etcd`).
fn health_endpoint(path: &str) -> Option<(&str, Option<&str>)> {
    let trimmed = path.strip_prefix('/')?;
    let (endpoint, check) = match trimmed.split_once('/') {
        Some((endpoint, check)) => (endpoint, Some(check)),
        None => (trimmed, None),
    };
    matches!(endpoint, "healthz" | "livez" | "readyz").then_some((endpoint, check))
}

/// Answers a health endpoint like the real server's: checks `ping` and (except `/livez`)
/// `etcd`; `?verbose` lists them; `/<endpoint>/<check>` asks for one. `None`: not a health
/// path.
pub fn health_check(
    path: &str,
    query: Option<&str>,
    health: &Health,
) -> Option<(StatusCode, String)> {
    let (endpoint, only) = health_endpoint(path)?;
    let mut checks: Vec<(&str, Result<(), &str>)> = vec![("ping", Ok(()))];
    if endpoint != "livez" {
        let etcd = if health.ready {
            Ok(())
        } else {
            Err(health.reason.as_str())
        };
        checks.push(("etcd", etcd));
    }
    if let Some(only) = only {
        return Some(match checks.iter().find(|(name, _)| *name == only) {
            Some((_, Ok(()))) => (StatusCode::OK, "ok".to_string()),
            Some((name, Err(reason))) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {name} failed: {reason}\n"),
            ),
            None => (
                StatusCode::NOT_FOUND,
                format!("no such {endpoint} check: {only}\n"),
            ),
        });
    }
    let failed = checks.iter().any(|(_, r)| r.is_err());
    let verbose = query.is_some_and(|q| {
        q.split('&')
            .any(|p| p == "verbose" || p.starts_with("verbose="))
    });
    if !failed && !verbose {
        return Some((StatusCode::OK, "ok".to_string()));
    }
    let mut body = String::new();
    for (name, result) in &checks {
        match result {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(reason) => body.push_str(&format!("[-]{name} failed: {reason}\n")),
        }
    }
    if failed {
        body.push_str(&format!("{endpoint} check failed\n"));
        Some((StatusCode::INTERNAL_SERVER_ERROR, body))
    } else {
        body.push_str(&format!("{endpoint} check passed\n"));
        Some((StatusCode::OK, body))
    }
}

fn note_user(seen: &Mutex<BTreeSet<String>>, who: &Identity) {
    // A poisoned lock only means another request panicked mid-insert; the set is still usable.
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    if seen.insert(who.user.clone()) {
        tracing::info!(
            "first authenticated request from user {:?} groups {:?}",
            who.user,
            who.groups
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(ready: bool) -> Health {
        Health {
            ready,
            reason: if ready {
                String::new()
            } else {
                "connection refused".to_string()
            },
        }
    }

    #[test]
    fn health_endpoints_report_etcd_like_the_real_server() {
        let up = health(true);
        let down = health(false);
        assert_eq!(
            health_check("/readyz", None, &up),
            Some((StatusCode::OK, "ok".into()))
        );
        assert_eq!(
            health_check("/readyz", Some("verbose"), &up),
            Some((
                StatusCode::OK,
                "[+]ping ok\n[+]etcd ok\nreadyz check passed\n".into()
            ))
        );
        assert_eq!(
            health_check("/healthz", None, &down),
            Some((
                StatusCode::INTERNAL_SERVER_ERROR,
                "[+]ping ok\n[-]etcd failed: connection refused\nhealthz check failed\n".into()
            ))
        );
        assert_eq!(
            health_check("/livez", None, &down),
            Some((StatusCode::OK, "ok".into()))
        );
        assert_eq!(
            health_check("/readyz/etcd", None, &down).map(|(s, _)| s),
            Some(StatusCode::INTERNAL_SERVER_ERROR)
        );
        assert_eq!(
            health_check("/livez/ping", None, &down),
            Some((StatusCode::OK, "ok".into()))
        );
        assert_eq!(
            health_check("/livez/etcd", None, &up).map(|(s, _)| s),
            Some(StatusCode::NOT_FOUND)
        );
        assert_eq!(health_check("/api", None, &up), None);
        assert_eq!(health_check("/readyzz", None, &up), None);
    }

    #[test]
    fn etcd_key_prefers_advertised_then_bound_address() {
        let mut config = ApiServerConfig {
            etcd_servers: vec![],
            etcd_ca: Default::default(),
            etcd_cert: Default::default(),
            etcd_key: Default::default(),
            etcd_prefix: "/registry".into(),
            tls_cert: Default::default(),
            tls_key: Default::default(),
            client_ca: Default::default(),
            bind_address: IpAddr::from([10, 0, 0, 2]),
            secure_port: 30001,
            advertise_address: Some(IpAddr::from([10, 0, 0, 1])),
            anonymous_auth: true,
            authorization_modes: vec![],
            service_account_issuers: vec![],
            service_account_key_files: vec![],
            service_account_signing_key: Default::default(),
            service_cluster_ip_ranges: vec![],
            client_pairs: vec![],
        };
        assert_eq!(etcd_key(&config), "/registry/standin/10.0.0.1:30001");
        config.advertise_address = None;
        assert_eq!(etcd_key(&config), "/registry/standin/10.0.0.2:30001");
    }
}
