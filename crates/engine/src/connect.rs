//! Reaching hypervisors: a [`Connector`] yields each one's runtime; a run connects to every
//! hypervisor of its plan at once, before anything else, and removes the throwaway pods a
//! killed run left there.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use oi_api::hypervisor::CriEndpoint as ApiEndpoint;
use oi_api::{Hypervisor, ObjectKey, World};
use oi_cri::{ClientOptions, CriClient, CriEndpoint, HypervisorRuntime};

/// Why a hypervisor could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("hypervisor {hypervisor} has no usable CRI endpoint")]
    NoEndpoint { hypervisor: String },
    #[error("hypervisor {hypervisor} is unreachable: {reason}")]
    Unreachable { hypervisor: String, reason: String },
    #[error(transparent)]
    Cri(#[from] oi_cri::Error),
}

/// Yields the runtime of a hypervisor.
pub trait Connector: Send + Sync {
    type Runtime: HypervisorRuntime + 'static;

    /// Connects to `hypervisor`'s runtime.
    ///
    /// # Errors
    /// [`ConnectError`] when the endpoint is missing, invalid or does not answer.
    fn connect(
        &self,
        hypervisor: &Hypervisor,
    ) -> impl Future<Output = Result<Arc<Self::Runtime>, ConnectError>> + Send;
}

/// Connects [`CriClient`]s from the Hypervisor spec: a local socket or mutual TLS.
#[derive(Debug, Clone, Default)]
pub struct CriConnector {
    pub options: ClientOptions,
}

/// How long a runtime that answers "not initialized yet" (containerd's CRI plugin in the
/// moments after a restart) is given before it counts as unreachable.
const NOT_INITIALIZED_GRACE: Duration = Duration::from_secs(5);
/// Pause between two attempts while it is not initialized.
const NOT_INITIALIZED_RETRY: Duration = Duration::from_millis(100);

impl Connector for CriConnector {
    type Runtime = CriClient;

    async fn connect(&self, hypervisor: &Hypervisor) -> Result<Arc<CriClient>, ConnectError> {
        let name = hypervisor.metadata.name.clone();
        let endpoint = match hypervisor.spec.cri_endpoint() {
            Some(ApiEndpoint::Local(path)) => CriEndpoint::Unix(path.into()),
            Some(ApiEndpoint::Remote(remote)) => {
                let Some(client) = remote.client_certificate.as_ref() else {
                    return Err(ConnectError::NoEndpoint { hypervisor: name });
                };
                CriEndpoint::Tls {
                    uri: remote.cri_endpoint_uri.clone(),
                    ca_pem: remote.ca_certificate.clone(),
                    cert_pem: client.certificate.clone(),
                    key_pem: client.private_key.clone(),
                }
            }
            None => return Err(ConnectError::NoEndpoint { hypervisor: name }),
        };
        let deadline = tokio::time::Instant::now() + NOT_INITIALIZED_GRACE;
        loop {
            match CriClient::connect(name.clone(), endpoint.clone(), self.options.clone()).await {
                Err(e) if e.not_initialized() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(NOT_INITIALIZED_RETRY).await;
                }
                result => return Ok(Arc::new(result?)),
            }
        }
    }
}

/// The runtime of each hypervisor a run talks to, or why it could not be reached.
pub(crate) type Runtimes<R> = BTreeMap<String, Result<Arc<R>, Arc<ConnectError>>>;

/// The runtime of `hypervisor` among `runtimes`, or why it cannot be had.
pub(crate) fn runtime<'r, R>(
    runtimes: &'r Runtimes<R>,
    hypervisor: &str,
) -> crate::error::Step<&'r Arc<R>> {
    match runtimes.get(hypervisor) {
        Some(Ok(rt)) => Ok(rt),
        Some(Err(e)) => Err(crate::error::StepError::Unreachable {
            hypervisor: hypervisor.to_string(),
            source: Arc::clone(e),
        }),
        None => Err(crate::error::StepError::UnknownHypervisor {
            hypervisor: hypervisor.to_string(),
        }),
    }
}

/// Connects to the hypervisors named (those of `world` that exist), concurrently.
pub(crate) async fn connect_all<C: Connector>(
    world: &World,
    names: &BTreeSet<String>,
    connector: &C,
) -> Runtimes<C::Runtime> {
    let hypervisors: Vec<&Hypervisor> = names
        .iter()
        .filter_map(|n| world.hypervisors.get(&ObjectKey::cluster_scoped(n.clone())))
        .collect();
    let results = join_all(hypervisors.iter().map(|h| connector.connect(h))).await;
    hypervisors
        .into_iter()
        .zip(results)
        .map(|(h, r)| (h.metadata.name.clone(), r.map_err(Arc::new)))
        .collect()
}

/// Removes the throwaway pods (file writers, path removers) a run killed mid-step left on
/// the connected hypervisors: a run removes its own before it returns, so any found before
/// the clusters are driven is a leftover. Best effort: a hypervisor that fails here fails its
/// clusters' steps anyway, and the next run tries again.
pub(crate) async fn remove_leftover_throwaway_pods<R: HypervisorRuntime>(runtimes: &Runtimes<R>) {
    join_all(
        runtimes
            .values()
            .filter_map(|r| r.as_ref().ok())
            .map(|rt| remove_throwaway_pods(rt.as_ref())),
    )
    .await;
}

/// Removes every throwaway pod (file writer, path remover) on one hypervisor; returns how
/// many it removed. Best effort: listing or removal errors count as nothing removed.
pub async fn remove_throwaway_pods<R: HypervisorRuntime>(rt: &R) -> usize {
    let selector = BTreeMap::from([(oi_cri::requests::RUN_LABEL.to_string(), "true".to_string())]);
    let mut removed = 0;
    for pod in rt.list_pods(&selector).await.unwrap_or_default() {
        if rt.remove_pod(&pod.id).await.is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests;
