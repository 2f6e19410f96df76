//! The kube-apiserver stand-in: the API of [`crate::api`] over the cluster's etcd.
//!
//! ```text
//!  start: load serving cert/key, client CA, service-account keys, etcd client cert,
//!         kubelet client cert, egress selector; refuse what the stand-in does not implement
//!         bind --bind-address:--secure-port (HTTPS, client certificates requested)
//!  every 1 s (0.1 s while it fails): put + range <etcd-prefix>/standin/<address>:<port>
//!         on every etcd ──► /readyz
//!  background: bootstrap (system namespaces, RBAC policy, the kubernetes Service and this
//!              server among its endpoints), finishing deleted namespaces and CRDs
//!  requests: crate::api (objects in etcd under --etcd-prefix, so every replica serves the
//!            same ones), authenticated and authorized as --anonymous-auth,
//!            --client-ca-file, --enable-bootstrap-token-auth, --service-account-key-file,
//!            --token-auth-file and --authorization-mode say
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use x509_parser::extensions::GeneralName;

use crate::api::authn::{AuthnConfig, ServiceAccountTokens, parse_token_file};
use crate::api::authz::Mode;
use crate::api::etcd_storage::EtcdStorage;
use crate::api::proxy::{Egress, KubeletClient, egress_from_file};
use crate::api::{Api, ApiConfig, Health, TokenIssuer, jwt};
use crate::config::ApiServerConfig;
use crate::etcd::Etcd;
use crate::https::chain;
use crate::keys::{self, KeyError};
use crate::serve;
use crate::tls::{self, TlsError};

/// How often etcd is written and read.
pub const ETCD_INTERVAL: Duration = Duration::from_secs(1);
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);
/// While etcd does not answer (a new cluster electing its first leader, a member
/// restarting): checked this often, each call first allowed [`FIRST_WAIT`], twice that after
/// each failure up to [`ETCD_TIMEOUT`]. So `/readyz` follows etcd within a fraction of a
/// second, as kube-apiserver's, which checks etcd when it is asked, does.
const NOT_READY_INTERVAL: Duration = Duration::from_millis(100);
const FIRST_WAIT: Duration = Duration::from_millis(250);
/// How often a failure that did not change is logged again.
const WARN_AGAIN: Duration = Duration::from_secs(30);
/// How long one storage request may take.
const STORAGE_TIMEOUT: Duration = Duration::from_secs(10);

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
    #[error("--etcd-servers: {0}")]
    Etcd(String),
    #[error("--etcd-servers: {0}")]
    Storage(crate::api::storage::StorageError),
    /// The listening socket.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `--authentication-config`.
    #[error("--authentication-config {0}")]
    AuthenticationConfig(String),
    /// The signal handlers.
    #[error("cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    /// Service-account tokens cannot be signed or checked.
    #[error("service-account tokens")]
    Tokens(#[source] jwt::JwtError),
    /// `--token-auth-file`.
    #[error("--token-auth-file {path}: {reason}")]
    TokenFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// `--egress-selector-config-file`.
    #[error("--egress-selector-config-file: {0}")]
    Egress(String),
    /// The API could not be set up.
    #[error(transparent)]
    Api(#[from] crate::api::ApiSetupError),
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
    let server_tls = tls::api_server_config(
        certs,
        key,
        Some(&client_roots),
        "--tls-cert-file and --tls-private-key-file",
    )?;
    tracing::info!("client certificates verified against {client_ca_what}");

    let mut verification_keys = Vec::new();
    for file in &config.service_account_key_files {
        let found = keys::public_keys(file).map_err(ApiServerError::ServiceAccount)?;
        tracing::info!(
            "service-account verification keys: {} in {}",
            found.len(),
            shown(file)
        );
        verification_keys.extend(jwt::public_keys(file).map_err(ApiServerError::Tokens)?);
    }
    let key_files: Vec<&Path> = config
        .service_account_key_files
        .iter()
        .map(|p| p.as_path())
        .collect();
    keys::check_private_matches(&config.service_account_signing_key, &key_files)
        .map_err(ApiServerError::ServiceAccount)?;
    let signer = jwt::Signer::from_file(&config.service_account_signing_key)
        .map_err(ApiServerError::Tokens)?;
    tracing::info!(
        "service-account signing key {} matches a verification key; issuers: {}",
        shown(&config.service_account_signing_key),
        config.service_account_issuers.join(", ")
    );
    let static_tokens = match &config.token_auth_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| ApiServerError::TokenFile {
                path: shown(path),
                reason: e.to_string(),
            })?;
            parse_token_file(&text).map_err(|reason| ApiServerError::TokenFile {
                path: shown(path),
                reason,
            })?
        }
        None => Vec::new(),
    };

    let etcd_ca_pem = tls::read(&config.etcd_ca)?;
    let etcd_cert_pem = tls::read(&config.etcd_cert)?;
    let etcd_key_pem = tls::read(&config.etcd_key)?;
    let etcd_roots = tls::roots_from_pem(&etcd_ca_pem, &shown(&config.etcd_ca))?;
    let etcd_certs = tls::certs_from_pem(&etcd_cert_pem, &shown(&config.etcd_cert))?;
    let etcd_key_der = tls::key_from_pem(&etcd_key_pem, &shown(&config.etcd_key))?;
    // The material checked as kube-apiserver does at start (a clear error naming the flags);
    // etcd's client takes the PEM itself.
    tls::client_config(
        etcd_roots,
        Some((etcd_certs, etcd_key_der)),
        "--etcd-certfile and --etcd-keyfile",
    )?;
    let etcd = Etcd::connect(
        &config.etcd_servers,
        &etcd_ca_pem,
        &etcd_cert_pem,
        &etcd_key_pem,
        ETCD_TIMEOUT,
    )
    .await
    .map_err(ApiServerError::Etcd)?;
    let storage = EtcdStorage::connect(
        &config.etcd_servers,
        &etcd_ca_pem,
        &etcd_cert_pem,
        &etcd_key_pem,
        STORAGE_TIMEOUT,
    )
    .await
    .map_err(ApiServerError::Storage)?;

    let kubelet = kubelet_client(&config)?;

    let address = SocketAddr::new(config.bind_address, config.secure_port);
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ApiServerError::Bind { address, source })?;
    tracing::info!(
        "serving securely on {address}; authorization modes {}; anonymous requests: {}",
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

    let advertised = config
        .advertise_address
        .unwrap_or(match config.bind_address {
            a if a.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
            a => a,
        });
    let audiences = if config.api_audiences.is_empty() {
        config.service_account_issuers.clone()
    } else {
        config.api_audiences.clone()
    };
    let modes = config
        .authorization_modes
        .iter()
        .filter_map(|m| Mode::parse(m))
        .collect();
    // As kube-apiserver: a watch lasts between --min-request-timeout and twice that.
    let spread = {
        use rand::Rng as _;
        rand::thread_rng().gen_range(1.0..2.0)
    };
    // The JWT authenticators: `--oidc-*`'s, or the structured configuration's, read again
    // while the server runs when its file changes.
    let jwt = Arc::new(crate::api::oidc::JwtAuthenticators::default());
    let mut reloader = None;
    if let Some(path) = &config.authentication_config {
        let text = tls::read(path)?;
        let loaded =
            crate::api::authn_config::load(path, &text, &config.service_account_issuers, &[])
                .map_err(ApiServerError::AuthenticationConfig)?;
        jwt.replace(loaded.iter().map(|(_, o)| Arc::clone(o)).collect());
        tracing::info!(
            issuers = ?loaded.iter().map(|(i, _)| i.config.issuer_url.as_str()).collect::<Vec<_>>(),
            "ID tokens of the authentication configuration's issuers accepted"
        );
        reloader = Some(tokio::spawn(crate::api::authn_config::watch(
            path.clone(),
            config.service_account_issuers.clone(),
            Arc::clone(&jwt),
            loaded,
            text,
        )));
    } else if let Some(oidc) = oidc_authenticator(&config)? {
        jwt.replace(vec![oidc]);
    }
    let api = Api::new(
        Arc::new(storage),
        ApiConfig {
            root: config.etcd_prefix.clone(),
            version: crate::version_info(&version),
            authn: AuthnConfig {
                client_ca: Some(client_roots),
                bootstrap_tokens: config.bootstrap_token_auth,
                service_accounts: Some(ServiceAccountTokens {
                    keys: verification_keys,
                    issuers: config.service_account_issuers.clone(),
                    audiences: audiences.clone(),
                }),
                static_tokens,
                anonymous: config.anonymous_auth,
                jwt: Arc::clone(&jwt),
            },
            modes,
            node_restriction: config.node_restriction,
            service_cluster_ip_ranges: config.service_cluster_ip_ranges.clone(),
            tokens: Some(TokenIssuer {
                signer,
                issuer: config
                    .service_account_issuers
                    .first()
                    .cloned()
                    .unwrap_or_default(),
                audiences,
                max_seconds: config
                    .service_account_max_token_expiration
                    .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            }),
            kubelet,
            watch_timeout: config.min_request_timeout.mul_f64(spread),
            advertise: Some((advertised, config.secure_port)),
            server_address: SocketAddr::new(advertised, config.secure_port).to_string(),
            health: Some(health_rx),
            ..ApiConfig::default()
        },
    )?;
    let maintenance = tokio::spawn(crate::api::maintenance::run(
        Arc::clone(&api),
        stop_rx.clone(),
    ));
    let server = tokio::spawn(crate::api::server::serve(
        listener, server_tls, api, stop_rx,
    ));

    let signal = termination.await.map_err(ApiServerError::Signals)?;
    tracing::info!("{signal} received, shutting down");
    // Nobody else sends on this channel; a send error only means every receiver is gone.
    let _ = stop_tx.send(true);
    let _ = server.await;
    checker.abort();
    maintenance.abort();
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    Ok(())
}

/// The OIDC authenticator of `--oidc-*`: its issuer reached over TLS trusting `--oidc-ca-file`
/// (else the system's bundle, if there is one). Its keys are fetched at the first token.
fn oidc_authenticator(
    config: &ApiServerConfig,
) -> Result<Option<Arc<crate::api::oidc::Oidc>>, ApiServerError> {
    let Some(oidc) = &config.oidc else {
        return Ok(None);
    };
    let client = match &config.oidc_ca {
        Some(path) => crate::api::oidc::issuer_tls(Some(&tls::read(path)?), &shown(path))?,
        None => crate::api::oidc::issuer_tls(None, "--oidc-ca-file")?,
    };
    tracing::info!(
        issuer = %oidc.issuer_url,
        client = %oidc.client_id,
        "ID tokens of an OIDC issuer accepted"
    );
    Ok(Some(Arc::new(crate::api::oidc::Oidc::new(
        oidc.clone(),
        client,
    ))))
}

/// How the node proxy reaches kubelets, from the `--kubelet-*` flags and the egress
/// selector; `None` without a kubelet client certificate.
fn kubelet_client(config: &ApiServerConfig) -> Result<Option<KubeletClient>, ApiServerError> {
    let Some((cert, key)) = config.kubelet_client() else {
        return Ok(None);
    };
    let identity = (
        tls::certs_from_pem(&tls::read(cert)?, &shown(cert))?,
        tls::key_from_pem(&tls::read(key)?, &shown(key))?,
    );
    let what = "--kubelet-client-certificate and --kubelet-client-key";
    let tls_config = match &config.kubelet_ca {
        Some(ca) => {
            let roots = tls::roots_from_pem(&tls::read(ca)?, &shown(ca))?;
            tracing::info!(
                "kubelets verified against --kubelet-certificate-authority {}",
                shown(ca)
            );
            tls::client_config(roots, Some(identity), what)?
        }
        None => {
            tracing::info!(
                "no --kubelet-certificate-authority: kubelet serving certificates are not verified (as in Kubernetes)"
            );
            tls::unverified_client_config(Some(identity), what)?
        }
    };
    let egress = match &config.egress_selector_config {
        Some(path) => egress_from_file(path).map_err(ApiServerError::Egress)?,
        None => Egress::Direct,
    };
    tracing::info!(
        "node proxy: {egress:?}, address types {}",
        config.kubelet_preferred_address_types.join(",")
    );
    Ok(Some(KubeletClient {
        tls: tls_config,
        preferred: config.kubelet_preferred_address_types.clone(),
        default_port: config.kubelet_port,
        egress,
        timeout: config.kubelet_timeout,
    }))
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

/// After a check: how long until the next, and what each of its calls is allowed while
/// etcd does not answer (`within`, that of the check that just failed).
fn next_check(ready: bool, within: Duration) -> (Duration, Duration) {
    if ready {
        (ETCD_INTERVAL, FIRST_WAIT)
    } else {
        (NOT_READY_INTERVAL, (within * 2).min(ETCD_TIMEOUT))
    }
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
    let mut round: u64 = 0;
    // When an unchanged failure was last logged: again only after WARN_AGAIN.
    let mut warned: Option<std::time::Instant> = None;
    let mut wait = Duration::ZERO;
    let mut within = FIRST_WAIT;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = serve::stopped(&mut stop) => return,
        }
        round += 1;
        let value = serde_json::json!({"standin": "kube-apiserver", "round": round}).to_string();
        let previous = health.borrow().clone();
        let allowed = if previous.ready { ETCD_TIMEOUT } else { within };
        let results = etcd.write_and_read(&key, &value, allowed).await;
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
        if next.ready && !previous.ready {
            tracing::info!("etcd ok: wrote and read back {key} on {}", ok.join(","));
        }
        if !next.ready {
            if previous.ready
                || previous.reason != next.reason
                || warned.is_none_or(|at| at.elapsed() >= WARN_AGAIN)
            {
                tracing::warn!("etcd check failed: {}", next.reason);
                warned = Some(std::time::Instant::now());
            }
        } else {
            warned = None;
            for failure in &failures {
                tracing::debug!("etcd endpoint failed: {failure}");
            }
        }
        (wait, within) = next_check(next.ready, within);
        health.send_replace(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_is_checked_often_while_it_fails_each_call_allowed_longer_each_time() {
        let mut within = FIRST_WAIT;
        let mut allowed = Vec::new();
        for _ in 0..5 {
            let (wait, next) = next_check(false, within);
            assert_eq!(wait, NOT_READY_INTERVAL);
            allowed.push(next.as_millis());
            within = next;
        }
        assert_eq!(allowed, [500, 1000, 2000, 2000, 2000]);
        assert_eq!(next_check(true, within), (ETCD_INTERVAL, FIRST_WAIT));
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
            oidc: None,
            oidc_ca: None,
            authentication_config: None,
            service_account_key_files: vec![],
            service_account_signing_key: Default::default(),
            service_cluster_ip_ranges: vec![],
            client_pairs: vec![],
            bootstrap_token_auth: false,
            api_audiences: vec![],
            token_auth_file: None,
            node_restriction: false,
            kubelet_ca: None,
            kubelet_port: 10250,
            kubelet_preferred_address_types: vec![],
            kubelet_timeout: Duration::from_secs(5),
            egress_selector_config: None,
            service_account_max_token_expiration: None,
            min_request_timeout: Duration::from_secs(1800),
        };
        assert_eq!(etcd_key(&config), "/registry/standin/10.0.0.1:30001");
        config.advertise_address = None;
        assert_eq!(etcd_key(&config), "/registry/standin/10.0.0.2:30001");
    }
}
