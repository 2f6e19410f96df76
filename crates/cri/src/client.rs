//! `CriClient`: a CRI v1 connection to one hypervisor, with bounded connects and calls, lazy
//! reconnection after the runtime restarts, and a counter of mutating calls.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::endpoint::{ClientOptions, CriEndpoint};
use crate::error::{Error, Result, Target};
use crate::transport::Dialer;

/// A CRI v1 client for one hypervisor. Cheap to clone (clones share the connection and the
/// mutating-call counter).
///
/// The connection is made by [`CriClient::connect`] (which also proves the peer speaks CRI
/// with a `Version` call). When the runtime goes away, the next read-only call reconnects and
/// retries once; a mutating call that fails on a broken connection is not retried (it may have
/// been applied) but drops the connection, so the call after it reconnects.
#[derive(Clone)]
pub struct CriClient {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    dialer: Dialer,
    options: ClientOptions,
    channel: tokio::sync::Mutex<Option<Channel>>,
    mutating: AtomicU64,
    /// The last look at every pod ([`CriClient::every_pod`]); held while one is taken, so
    /// that callers at once share it.
    look: tokio::sync::Mutex<Option<Look>>,
}

/// A look at every pod: when, and how many mutating calls had been made before it.
struct Look {
    mutating: u64,
    at: Instant,
    pods: Arc<Vec<crate::PodStatus>>,
}

/// How long a look at every pod answers [`CriClient::every_pod`] while no mutating call is
/// made: the pods a run ensures at once (each cluster's, on a shared hypervisor) share one
/// look instead of listing every pod each.
const LOOK_REUSE: Duration = Duration::from_millis(250);

impl std::fmt::Debug for CriClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriClient")
            .field("target", &self.inner.target)
            .finish_non_exhaustive()
    }
}

/// Whether a call changes the runtime's state (counted) or only reads it (retried once after a
/// reconnect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Mutate,
}

impl CriClient {
    /// Connects to `hypervisor`'s runtime at `endpoint` and checks it answers CRI `Version`,
    /// within `options.connect_timeout`.
    ///
    /// # Errors
    /// [`Error::InvalidEndpoint`] or [`Error::TlsMaterial`] for bad configuration,
    /// [`Error::Connect`] / [`Error::ConnectTimeout`] when the endpoint cannot be reached, and
    /// [`Error::Call`] when the peer refuses (for example our client certificate).
    pub async fn connect(
        hypervisor: impl Into<String>,
        endpoint: CriEndpoint,
        options: ClientOptions,
    ) -> Result<Self> {
        let target = Target {
            hypervisor: hypervisor.into(),
            endpoint: endpoint.to_string(),
        };
        let dialer = Dialer::new(&target, &endpoint)?;
        let client = CriClient {
            inner: Arc::new(Inner {
                target,
                dialer,
                options,
                channel: tokio::sync::Mutex::new(None),
                mutating: AtomicU64::new(0),
                look: tokio::sync::Mutex::new(None),
            }),
        };
        let timeout = client.inner.options.connect_timeout;
        let version = client.call_with_timeout("Version", Kind::Read, timeout, |ch| async move {
            RuntimeServiceClient::new(ch)
                .version(cri::VersionRequest {
                    version: "v1".to_string(),
                })
                .await
        });
        version.await?;
        Ok(client)
    }

    /// The hypervisor and endpoint this client talks to.
    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    /// The options the client was made with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// How many mutating CRI calls (run/stop/remove sandbox, create/start/stop/remove
    /// container, pull image, exec) this client and its clones have made.
    pub fn mutating_calls(&self) -> u64 {
        self.inner.mutating.load(Ordering::Relaxed)
    }

    /// Every pod with its containers' states (no exit codes): a look taken at most
    /// [`LOOK_REUSE`] ago with no mutating call made since (by this client and its clones),
    /// otherwise a look taken now with `look`. Callers at once wait for one look and share
    /// it.
    pub(crate) async fn every_pod<F, Fut>(&self, look: F) -> Result<Arc<Vec<crate::PodStatus>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<crate::PodStatus>>>,
    {
        let mut last = self.inner.look.lock().await;
        if let Some(l) = last.as_ref()
            && l.mutating == self.mutating_calls()
            && l.at.elapsed() <= LOOK_REUSE
        {
            return Ok(l.pods.clone());
        }
        let mutating = self.mutating_calls();
        let at = Instant::now();
        let pods = Arc::new(look().await?);
        *last = Some(Look {
            mutating,
            at,
            pods: pods.clone(),
        });
        Ok(pods)
    }

    async fn channel(&self) -> Result<Channel> {
        let mut slot = self.inner.channel.lock().await;
        if let Some(channel) = slot.as_ref() {
            return Ok(channel.clone());
        }
        let channel = self
            .inner
            .dialer
            .connect(&self.inner.target, self.inner.options.connect_timeout)
            .await?;
        *slot = Some(channel.clone());
        Ok(channel)
    }

    async fn forget_channel(&self) {
        *self.inner.channel.lock().await = None;
    }

    /// Runs one call with the per-call timeout.
    pub(crate) async fn call<T, F, Fut>(&self, name: &'static str, kind: Kind, f: F) -> Result<T>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_with_timeout(name, kind, self.inner.options.call_timeout, f)
            .await
    }

    pub(crate) async fn call_with_timeout<T, F, Fut>(
        &self,
        name: &'static str,
        kind: Kind,
        timeout: Duration,
        f: F,
    ) -> Result<T>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let attempts = match kind {
            Kind::Read => 2,
            Kind::Mutate => 1,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let channel = self.channel().await?;
            if kind == Kind::Mutate {
                self.inner.mutating.fetch_add(1, Ordering::Relaxed);
            }
            let status = match tokio::time::timeout(timeout, f(channel)).await {
                Ok(Ok(response)) => return Ok(response.into_inner()),
                Ok(Err(status)) => status,
                Err(_) => {
                    // A hung peer: start afresh next time.
                    self.forget_channel().await;
                    return Err(Error::CallTimeout {
                        target: self.inner.target.clone(),
                        call: name,
                        timeout,
                    });
                }
            };
            if is_transport_failure(&status) {
                self.forget_channel().await;
                if attempt < attempts {
                    tracing::debug!(hypervisor = %self.inner.target.hypervisor, call = name, %status, "reconnecting");
                    continue;
                }
            }
            return Err(Error::Call {
                target: self.inner.target.clone(),
                call: name,
                status: Box::new(status),
            });
        }
    }

    pub(crate) fn runtime(ch: Channel) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(ch).max_decoding_message_size(64 * 1024 * 1024)
    }

    pub(crate) fn images(ch: Channel) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(ch)
    }

    /// CRI `Version`.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn version(&self) -> Result<cri::VersionResponse> {
        self.call("Version", Kind::Read, |ch| async move {
            Self::runtime(ch)
                .version(cri::VersionRequest {
                    version: "v1".to_string(),
                })
                .await
        })
        .await
    }

    /// CRI `ListPodSandbox` with an optional filter.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn list_sandboxes(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>> {
        let response = self
            .call("ListPodSandbox", Kind::Read, |ch| {
                let filter = filter.clone();
                async move {
                    Self::runtime(ch)
                        .list_pod_sandbox(cri::ListPodSandboxRequest { filter })
                        .await
                }
            })
            .await?;
        Ok(response.items)
    }

    /// CRI `ListContainers` with an optional filter.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>> {
        let response = self
            .call("ListContainers", Kind::Read, |ch| {
                let filter = filter.clone();
                async move {
                    Self::runtime(ch)
                        .list_containers(cri::ListContainersRequest { filter })
                        .await
                }
            })
            .await?;
        Ok(response.containers)
    }

    /// CRI `ContainerStatus`.
    ///
    /// # Errors
    /// When the call fails or times out, or the answer has no status.
    pub async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let response = self
            .call("ContainerStatus", Kind::Read, |ch| async move {
                Self::runtime(ch)
                    .container_status(cri::ContainerStatusRequest {
                        container_id: id.to_string(),
                        verbose: false,
                    })
                    .await
            })
            .await?;
        response.status.ok_or_else(|| Error::MissingField {
            target: self.inner.target.clone(),
            call: "ContainerStatus",
            field: "status",
        })
    }

    /// CRI `RunPodSandbox`; returns the sandbox id.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn run_sandbox(&self, config: &cri::PodSandboxConfig) -> Result<String> {
        let response = self
            .call("RunPodSandbox", Kind::Mutate, |ch| async move {
                Self::runtime(ch)
                    .run_pod_sandbox(cri::RunPodSandboxRequest {
                        config: Some(config.clone()),
                        runtime_handler: String::new(),
                    })
                    .await
            })
            .await?;
        Ok(response.pod_sandbox_id)
    }

    /// CRI `StopPodSandbox` then `RemovePodSandbox` (which also removes its containers). A
    /// sandbox that is already gone is not an error.
    ///
    /// A container whose `StartContainer` is still being carried out cannot be removed yet
    /// (containerd: "container is in starting state"). That happens when the client that asked
    /// for the start was killed (a killed `oi reconcile`): the runtime goes on starting it. The
    /// removal is then retried until the start has finished, within the call timeout.
    ///
    /// # Errors
    /// When a call fails (other than with `NotFound`) or times out, or a container is still
    /// starting after the call timeout.
    pub async fn stop_and_remove_sandbox(&self, id: &str) -> Result<()> {
        let deadline = Instant::now() + self.inner.options.call_timeout;
        let mut pause = Duration::from_millis(100);
        loop {
            match self.stop_and_remove_sandbox_once(id).await {
                Err(e) if e.is_container_starting() && Instant::now() + pause < deadline => {
                    tracing::info!(
                        hypervisor = %self.inner.target.hypervisor,
                        sandbox = id,
                        "a container of the sandbox is still starting; removing it again in {pause:?}"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    async fn stop_and_remove_sandbox_once(&self, id: &str) -> Result<()> {
        let stopped = self
            .call("StopPodSandbox", Kind::Mutate, |ch| async move {
                Self::runtime(ch)
                    .stop_pod_sandbox(cri::StopPodSandboxRequest {
                        pod_sandbox_id: id.to_string(),
                    })
                    .await
            })
            .await;
        match stopped {
            Err(e) if e.is_not_found() => return Ok(()),
            other => other?,
        };
        let removed = self
            .call("RemovePodSandbox", Kind::Mutate, |ch| async move {
                Self::runtime(ch)
                    .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                        pod_sandbox_id: id.to_string(),
                    })
                    .await
            })
            .await;
        match removed {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// CRI `CreateContainer`; returns the container id.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn create_container(&self, request: &cri::CreateContainerRequest) -> Result<String> {
        let response = self
            .call("CreateContainer", Kind::Mutate, |ch| async move {
                Self::runtime(ch).create_container(request.clone()).await
            })
            .await?;
        Ok(response.container_id)
    }

    /// CRI `StartContainer`.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        self.call("StartContainer", Kind::Mutate, |ch| async move {
            Self::runtime(ch)
                .start_container(cri::StartContainerRequest {
                    container_id: id.to_string(),
                })
                .await
        })
        .await
        .map(|_| ())
    }

    /// CRI `ExecSync` with a timeout in seconds; returns the exit code and stdout.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout_secs: i64,
    ) -> Result<cri::ExecSyncResponse> {
        self.call("ExecSync", Kind::Mutate, |ch| async move {
            Self::runtime(ch)
                .exec_sync(cri::ExecSyncRequest {
                    container_id: id.to_string(),
                    cmd: cmd.to_vec(),
                    timeout: timeout_secs,
                })
                .await
        })
        .await
    }

    /// Whether the image is present (CRI `ImageStatus`).
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn image_present(&self, image: &str) -> Result<bool> {
        let response = self
            .call("ImageStatus", Kind::Read, |ch| async move {
                Self::images(ch)
                    .image_status(cri::ImageStatusRequest {
                        image: Some(crate::requests::image_spec(image)),
                        verbose: false,
                    })
                    .await
            })
            .await?;
        Ok(response.image.is_some())
    }

    /// CRI `PullImage`, bounded by the pull timeout.
    ///
    /// # Errors
    /// When the call fails or times out.
    pub async fn pull_image(&self, image: &str) -> Result<String> {
        let timeout = self.inner.options.pull_timeout;
        let response = self
            .call_with_timeout("PullImage", Kind::Mutate, timeout, |ch| async move {
                Self::images(ch)
                    .pull_image(cri::PullImageRequest {
                        image: Some(crate::requests::image_spec(image)),
                        auth: None,
                        sandbox_config: None,
                    })
                    .await
            })
            .await?;
        Ok(response.image_ref)
    }
}

/// Whether a status means the connection itself failed (so a fresh connection may succeed),
/// rather than the runtime refusing the request.
fn is_transport_failure(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::Unavailable => true,
        // hyper reports a connection closed under a pending request as "canceled".
        tonic::Code::Cancelled => status.message().to_ascii_lowercase().contains("cancel"),
        tonic::Code::Unknown => {
            let m = status.message().to_ascii_lowercase();
            m.contains("transport") || m.contains("connection") || m.contains("broken pipe")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_failures_are_told_from_refusals() {
        let t = |code, msg: &str| is_transport_failure(&tonic::Status::new(code, msg));
        assert!(t(tonic::Code::Unavailable, "error trying to connect"));
        assert!(t(tonic::Code::Unknown, "transport error"));
        assert!(t(
            tonic::Code::Unknown,
            "Service was not ready: connection closed"
        ));
        assert!(t(tonic::Code::Cancelled, "operation was canceled"));
        assert!(!t(
            tonic::Code::NotFound,
            "an error occurred when try to find sandbox"
        ));
        assert!(!t(tonic::Code::Unknown, "failed to create containerd task"));
        assert!(!t(tonic::Code::InvalidArgument, "connection"));
    }

    /// A client of nothing: its calls are never made.
    fn unconnected() -> CriClient {
        let target = Target {
            hypervisor: "hv1".into(),
            endpoint: "unix:///nonexistent".into(),
        };
        let dialer = Dialer::new(&target, &CriEndpoint::Unix("/nonexistent".into())).unwrap();
        CriClient {
            inner: Arc::new(Inner {
                target,
                dialer,
                options: ClientOptions::default(),
                channel: tokio::sync::Mutex::new(None),
                mutating: AtomicU64::new(0),
                look: tokio::sync::Mutex::new(None),
            }),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_at_every_pod_is_shared_until_a_mutating_call_or_its_age() {
        let client = unconnected();
        let looks = std::sync::atomic::AtomicUsize::new(0);
        let look = || async {
            looks.fetch_add(1, Ordering::Relaxed);
            // A look takes a while: callers meanwhile wait for it.
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(Vec::new())
        };
        let looked = || looks.load(Ordering::Relaxed);
        // Callers at once: one look.
        let (a, b, c) = tokio::join!(
            client.every_pod(look),
            client.every_pod(look),
            client.every_pod(look)
        );
        assert!(a.is_ok() && b.is_ok() && c.is_ok());
        assert_eq!(looked(), 1);
        // Shortly after: the same look.
        tokio::time::advance(LOOK_REUSE / 2).await;
        client.clone().every_pod(look).await.unwrap();
        assert_eq!(looked(), 1);
        // A mutating call made since (by a clone too): a new look.
        client
            .clone()
            .inner
            .mutating
            .fetch_add(1, Ordering::Relaxed);
        client.every_pod(look).await.unwrap();
        assert_eq!(looked(), 2);
        // Too old: a new look.
        tokio::time::advance(LOOK_REUSE + Duration::from_millis(1)).await;
        client.every_pod(look).await.unwrap();
        assert_eq!(looked(), 3);
        // A failed look is not kept.
        client.inner.mutating.fetch_add(1, Ordering::Relaxed);
        let failed = client
            .every_pod(|| async {
                Err(Error::ConnectTimeout {
                    target: client.target().clone(),
                    timeout: Duration::from_secs(1),
                })
            })
            .await;
        assert!(failed.is_err());
        client.every_pod(look).await.unwrap();
        assert_eq!(looked(), 4);
    }

    #[test]
    fn errors_name_the_hypervisor_and_the_endpoint() {
        let target = Target {
            hypervisor: "hv1".into(),
            endpoint: "https://10.0.0.1:6443".into(),
        };
        let err = Error::Call {
            target: target.clone(),
            call: "RunPodSandbox",
            status: Box::new(tonic::Status::not_found("gone")),
        };
        assert!(err.is_not_found());
        assert_eq!(err.target(), &target);
        let text = err.to_string();
        assert!(
            text.starts_with("hypervisor \"hv1\" (CRI endpoint https://10.0.0.1:6443): CRI call RunPodSandbox failed"),
            "{text}"
        );
        let timeout = Error::ConnectTimeout {
            target,
            timeout: Duration::from_secs(2),
        };
        assert_eq!(
            timeout.to_string(),
            "hypervisor \"hv1\" (CRI endpoint https://10.0.0.1:6443): connect timed out after 2s"
        );
        assert_eq!(timeout.code(), None);
    }
}
