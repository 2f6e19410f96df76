//! Observation: etcd members, and each API server's and the ingress's `/readyz`.

use futures::future::join_all;
use http::Method;
use oi_api::{ComponentRole, ObjectKey};
use oi_cri::HypervisorRuntime;
use oi_planner::{ComponentPlan, Convergence};

use crate::Executor;
use crate::error::{Step, StepError};
use crate::etcd::{EtcdClient, Member};
use crate::https::{HttpsRequest, Network, Tls};

/// What one observation of a cluster found.
#[derive(Default)]
pub(crate) struct Observed {
    pub etcd_started: usize,
    pub etcd_voting: usize,
    pub apiservers_ready: usize,
    pub ingress_ready: bool,
    /// The first thing that is not ready, in the order etcd, API servers, ingress.
    pub failure: Option<StepError>,
}

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// `GET /readyz` of `base`, its certificate checked against `ca`.
    async fn readyz(&self, base: &str, ca: &str) -> Result<(), String> {
        let tls = Tls {
            ca_pem: ca.to_string(),
            identity: None,
        };
        let response = self
            .network
            .request(HttpsRequest {
                base,
                method: &Method::GET,
                path: "/readyz",
                body: None,
                tls: &tls,
                bearer: None,
            })
            .await
            .map_err(|e| e.reason)?;
        if response.status == 200 {
            Ok(())
        } else {
            Err(format!(
                "/readyz answered {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body).trim()
            ))
        }
    }

    /// Waits (until the deadline) for the API server of replica `c`, whose pod was just
    /// replaced, to answer `/readyz`.
    pub(crate) async fn apiserver_ready(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        ca: &str,
    ) -> Step {
        let Some(url) = c.apiserver_url.as_deref() else {
            return Ok(());
        };
        loop {
            match self.readyz(url, ca).await {
                Ok(()) => {
                    self.emit(
                        Some(&c.hypervisor),
                        key,
                        Some(c.name()),
                        "kube-apiserver ready".to_string(),
                    );
                    return Ok(());
                }
                Err(reason) if self.out_of_time() => {
                    return Err(StepError::ApiServerNotReadyAfterChange {
                        component: c.name().to_string(),
                        hypervisor: c.hypervisor.clone(),
                        url: url.to_string(),
                        reason,
                    });
                }
                Err(_) => self.pause().await,
            }
        }
    }

    /// One look at the cluster: its etcd membership, each API server and the ingress.
    pub(crate) async fn observe(&self, plan: &Convergence, etcd: &EtcdClient<'_, N>) -> Observed {
        let members = &plan.etcd.members;
        let mut o = Observed::default();
        let mut failures: Vec<StepError> = Vec::new();
        if !members.is_empty() {
            match self.first_answer(members, etcd).await {
                Err(last) => failures.push(StepError::EtcdUnanswered { last }),
                Ok((_, list)) => {
                    let wanted =
                        |m: &Member| members.iter().any(|w| m.peer_urls.contains(&w.peer_url));
                    o.etcd_started = list.iter().filter(|m| m.started() && wanted(m)).count();
                    o.etcd_voting = list
                        .iter()
                        .filter(|m| m.started() && !m.is_learner && wanted(m))
                        .count();
                    if o.etcd_voting != members.len() || list.len() != members.len() {
                        failures.push(StepError::EtcdNotVoting {
                            voting: o.etcd_voting,
                            members: members.len(),
                            started: o.etcd_started,
                            listed: list.len(),
                        });
                    }
                }
            }
        }
        let ca = plan.apiserver_ca.as_str();
        let checks = plan.components.iter().filter_map(|c| {
            c.apiserver_url
                .as_deref()
                .map(|url| async move { (c, url, self.readyz(url, ca).await) })
        });
        let mut apiserver_errors = Vec::new();
        let mut ingress_errors = Vec::new();
        let mut ingresses = 0;
        for (c, url, result) in join_all(checks).await {
            let is_ingress = c.role == ComponentRole::ControlPlaneIngress;
            ingresses += usize::from(is_ingress);
            match (result, is_ingress) {
                (Ok(()), false) => o.apiservers_ready += 1,
                (Ok(()), true) => o.ingress_ready = true,
                (Err(e), false) => apiserver_errors.push(format!(
                    "kube-apiserver {} on {} ({url}): {e}",
                    c.name(),
                    c.hypervisor
                )),
                (Err(e), true) => ingress_errors.push(format!(
                    "ingress {} on {} ({url}): {e}",
                    c.name(),
                    c.hypervisor
                )),
            }
        }
        if ingresses == 0 {
            o.ingress_ready = false;
            ingress_errors.push("the cluster has no ingress".to_string());
        }
        if !apiserver_errors.is_empty() {
            failures.push(StepError::ApiServersNotReady(apiserver_errors));
        }
        if !ingress_errors.is_empty() {
            failures.push(StepError::IngressNotReady(ingress_errors));
        }
        o.failure = failures.into_iter().next();
        o
    }
}
