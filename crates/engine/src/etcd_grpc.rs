//! [`Etcd`] over etcd's gRPC API for [`RealNetwork`]: the `etcd-client` crate, mutual TLS,
//! one client per endpoint and identity, kept (tonic keeps its HTTP/2 connection open, so a
//! converged cluster's membership and health polls cost no new handshake). Each call is
//! bounded by the network's timeout; a snapshot's every message is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::etcd::{Code, Etcd, EtcdError, Member, MemberStatus, SnapshotSink};
use crate::https::{RealNetwork, Tls};

/// Clients by endpoint and the SHA-256 of their CA, certificate and key (the key never kept
/// as such).
pub(crate) type Clients = Arc<Mutex<HashMap<(String, [u8; 32]), Client>>>;

/// At most this many clients are kept (each cluster has a few members; rotated identities
/// are left behind): past it, the cache starts again.
const CLIENTS_KEPT: usize = 1024;

/// How long a health read may take: etcd's own `/health` gives a linearizable read about
/// this long before it reports the member unhealthy.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

fn code(status: &tonic::Status) -> Code {
    match status.code() {
        tonic::Code::Unavailable => Code::Unavailable,
        tonic::Code::DeadlineExceeded => Code::DeadlineExceeded,
        tonic::Code::FailedPrecondition => Code::FailedPrecondition,
        tonic::Code::NotFound => Code::NotFound,
        tonic::Code::InvalidArgument => Code::InvalidArgument,
        tonic::Code::PermissionDenied => Code::PermissionDenied,
        other => Code::Other(other as i32),
    }
}

/// What an etcd-client error means: no connection, or etcd's refusal with its code.
fn error(endpoint: &str, operation: &'static str, e: etcd_client::Error) -> EtcdError {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            // tonic reports a connection it could not make as `Unavailable` with the
            // transport's words; etcd's own refusals carry etcd's descriptions.
            let message = status.message().to_string();
            if status.code() == tonic::Code::Unavailable && !message.starts_with("etcdserver:") {
                EtcdError::Unreachable {
                    endpoint: endpoint.to_string(),
                    reason: message,
                }
            } else {
                EtcdError::Refused {
                    endpoint: endpoint.to_string(),
                    operation,
                    code: code(&status),
                    message,
                }
            }
        }
        etcd_client::Error::TransportError(e) => EtcdError::Unreachable {
            endpoint: endpoint.to_string(),
            reason: chain(&e),
        },
        etcd_client::Error::IoError(e) => EtcdError::Unreachable {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        },
        other => EtcdError::Body {
            endpoint: endpoint.to_string(),
            operation,
            reason: other.to_string(),
        },
    }
}

/// An error and its sources, joined (tonic's transport error says little on its own).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl RealNetwork {
    /// The client of `endpoint` with `tls`, made the first time it is asked for (it
    /// connects when first used).
    async fn etcd_client(&self, endpoint: &str, tls: &Tls) -> Result<Client, EtcdError> {
        let key = (endpoint.to_string(), tls.fingerprint());
        if let Some(client) = self.etcd_clients().get(&key) {
            return Ok(client.clone());
        }
        let unreachable = |reason: String| EtcdError::Unreachable {
            endpoint: endpoint.to_string(),
            reason,
        };
        if !endpoint.starts_with("https://") {
            return Err(unreachable("not an https:// URL".into()));
        }
        // A plain channel, not etcd-client's balanced one: a call on an endpoint that
        // cannot be reached fails at once (the balancer waits for an endpoint to become
        // ready), and each endpoint is asked on its own anyway.
        let mut options = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
        if let Some((cert, key)) = &tls.identity {
            options = options.identity(Identity::from_pem(cert, key));
        }
        let channel = Endpoint::from_shared(endpoint.to_string())
            .and_then(|e| e.tls_config(options))
            .map_err(|e| unreachable(format!("cannot set up its client: {}", chain(&e))))?
            .connect_timeout(self.timeout)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(self.timeout)
            .keep_alive_while_idle(true)
            .connect_lazy();
        let client = Client::from_channel(etcd_client::Channel::Tonic(channel), None)
            .await
            .map_err(|e| unreachable(format!("cannot set up its client: {e}")))?;
        let mut clients = self.etcd_clients();
        if clients.len() >= CLIENTS_KEPT {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    fn etcd_clients(&self) -> std::sync::MutexGuard<'_, HashMap<(String, [u8; 32]), Client>> {
        self.etcd.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `call` on the client of `endpoint`, bounded by `timeout`.
    async fn etcd_call<T, F, Fut>(
        &self,
        endpoint: &str,
        tls: &Tls,
        operation: &'static str,
        timeout: Duration,
        call: F,
    ) -> Result<T, EtcdError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let client = self.etcd_client(endpoint, tls).await?;
        match tokio::time::timeout(timeout, call(client)).await {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(error(endpoint, operation, e)),
            Err(_) => Err(EtcdError::Unreachable {
                endpoint: endpoint.to_string(),
                reason: format!("no answer to {operation} within {timeout:?}"),
            }),
        }
    }
}

fn member(m: &etcd_client::Member) -> Member {
    Member {
        id: m.id(),
        name: m.name().to_string(),
        peer_urls: m.peer_urls().to_vec(),
        client_urls: m.client_urls().to_vec(),
        is_learner: m.is_learner(),
    }
}

impl Etcd for RealNetwork {
    async fn members(&self, endpoint: &str, tls: &Tls) -> Result<Vec<Member>, EtcdError> {
        let answer = self
            .etcd_call(endpoint, tls, "member list", self.timeout, |c| async move {
                c.cluster_client().member_list().await
            })
            .await?;
        Ok(answer.members().iter().map(member).collect())
    }

    async fn add_learner(
        &self,
        endpoint: &str,
        tls: &Tls,
        peer_url: &str,
    ) -> Result<(), EtcdError> {
        let urls = vec![peer_url.to_string()];
        self.etcd_call(endpoint, tls, "member add", self.timeout, |c| async move {
            c.cluster_client()
                .member_add(
                    urls,
                    Some(etcd_client::MemberAddOptions::new().with_is_learner()),
                )
                .await
        })
        .await
        .map(|_| ())
    }

    async fn promote(&self, endpoint: &str, tls: &Tls, id: u64) -> Result<(), EtcdError> {
        self.etcd_call(
            endpoint,
            tls,
            "member promote",
            self.timeout,
            |c| async move { c.cluster_client().member_promote(id).await },
        )
        .await
        .map(|_| ())
    }

    async fn remove(&self, endpoint: &str, tls: &Tls, id: u64) -> Result<(), EtcdError> {
        self.etcd_call(
            endpoint,
            tls,
            "member remove",
            self.timeout,
            |c| async move { c.cluster_client().member_remove(id).await },
        )
        .await
        .map(|_| ())
    }

    async fn healthy(&self, endpoint: &str, tls: &Tls) -> Result<bool, EtcdError> {
        // As `etcdctl endpoint health`: a linearizable read of the key "health"; a refusal
        // of permission still proves a quorum answered.
        let timeout = HEALTH_TIMEOUT.min(self.timeout);
        let read = self
            .etcd_call(endpoint, tls, "health read", timeout, |c| async move {
                c.kv_client()
                    .get("health", Some(GetOptions::new().with_count_only()))
                    .await
            })
            .await;
        match read {
            Ok(_) => Ok(true),
            Err(EtcdError::Refused {
                code: Code::PermissionDenied,
                ..
            }) => Ok(true),
            Err(EtcdError::Refused { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn status(&self, endpoint: &str, tls: &Tls) -> Result<MemberStatus, EtcdError> {
        let answer = self
            .etcd_call(endpoint, tls, "status", self.timeout, |c| async move {
                c.maintenance_client().status().await
            })
            .await?;
        let header = answer.header();
        Ok(MemberStatus {
            revision: header.map_or(0, |h| u64::try_from(h.revision()).unwrap_or(0)),
            member_id: header.map_or(0, etcd_client::ResponseHeader::member_id),
            cluster_id: header.map_or(0, etcd_client::ResponseHeader::cluster_id),
            leader: answer.leader(),
            db_size: u64::try_from(answer.db_size()).unwrap_or(0),
            version: answer.version().to_string(),
        })
    }

    async fn transfer_leadership(
        &self,
        endpoint: &str,
        tls: &Tls,
        target: u64,
    ) -> Result<(), EtcdError> {
        self.etcd_call(endpoint, tls, "move leader", self.timeout, |c| async move {
            c.maintenance_client().move_leader(target).await
        })
        .await
        .map(|_| ())
    }

    async fn snapshot(
        &self,
        endpoint: &str,
        tls: &Tls,
        sink: &SnapshotSink,
    ) -> Result<u64, EtcdError> {
        let mut stream = self
            .etcd_call(endpoint, tls, "snapshot", self.timeout, |c| async move {
                c.maintenance_client().snapshot().await
            })
            .await?;
        let mut size = 0u64;
        loop {
            let message = match tokio::time::timeout(self.timeout, stream.message()).await {
                Ok(Ok(Some(m))) => m,
                Ok(Ok(None)) => return Ok(size),
                Ok(Err(e)) => return Err(error(endpoint, "snapshot", e)),
                Err(_) => {
                    return Err(EtcdError::Unreachable {
                        endpoint: endpoint.to_string(),
                        reason: format!(
                            "the snapshot stopped arriving (no data within {:?})",
                            self.timeout
                        ),
                    });
                }
            };
            let piece = bytes::Bytes::copy_from_slice(message.blob());
            size += piece.len() as u64;
            if piece.is_empty() {
                continue;
            }
            sink.send(piece)
                .await
                .map_err(|_| crate::etcd::sink_closed(endpoint))?;
        }
    }
}
