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
    /// `GET path` of `base` with `tls`: `Ok` when it answered one of `expected`, otherwise
    /// why not (no answer, or the status and body it answered).
    async fn get(&self, base: &str, path: &str, tls: &Tls, expected: &[u16]) -> Result<(), String> {
        let response = self
            .network
            .request(HttpsRequest {
                base,
                method: &Method::GET,
                path,
                body: None,
                tls,
                bearer: None,
            })
            .await
            .map_err(|e| e.reason)?;
        if expected.contains(&response.status) {
            Ok(())
        } else {
            Err(format!(
                "{path} answered {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body).trim()
            ))
        }
    }

    /// `GET /readyz` of `base`, its certificate checked against `ca`.
    async fn readyz(&self, base: &str, ca: &str) -> Result<(), String> {
        let tls = Tls {
            ca_pem: ca.to_string(),
            identity: None,
        };
        self.get(base, "/readyz", &tls, &[200]).await
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

    /// Waits (until the deadline) for replica `c`'s API server to answer a read from its
    /// storage after the etcd member it stores in restarted: a GET of the `default`
    /// Namespace with the run's identity, which kube-apiserver serves with a quorum read
    /// from etcd (an answer of 200 or 404 came from storage). Its `/readyz` may still say
    /// ready from before the restart. `true` once it answered; `false` when its API server
    /// does not run (the control plane step and haproxy's checks see to it then).
    pub(crate) async fn apiserver_serves(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        plan: &Convergence,
    ) -> Step<bool> {
        let Some(url) = c.apiserver_url.as_deref() else {
            return Ok(false);
        };
        let runs = self
            .container_of(key, c, c.name(), "kube-apiserver")
            .await?
            .is_some_and(|k| k.state == oi_cri::ContainerState::Running);
        if !runs {
            return Ok(false);
        }
        let Some(identity) = plan
            .in_cluster
            .as_ref()
            .ok()
            .and_then(|i| i.client.as_ref().ok())
        else {
            // No identity to read with (its planning failed, and says so later): ready is
            // all that can be asked.
            self.apiserver_ready(key, c, &plan.apiserver_ca).await?;
            return Ok(true);
        };
        let tls = Tls {
            ca_pem: plan.apiserver_ca.clone(),
            identity: Some((identity.certificate.clone(), identity.private_key.clone())),
        };
        loop {
            // 404 too: the absence of the Namespace was read from etcd all the same.
            let reason = match self
                .get(url, "/api/v1/namespaces/default", &tls, &[200, 404])
                .await
            {
                Ok(()) => {
                    self.emit(
                        Some(&c.hypervisor),
                        key,
                        Some(c.name()),
                        "kube-apiserver reads from its etcd member again".to_string(),
                    );
                    return Ok(true);
                }
                Err(reason) => reason,
            };
            if self.out_of_time() {
                return Err(StepError::ApiServerNotReadyAfterChange {
                    component: c.name().to_string(),
                    hypervisor: c.hypervisor.clone(),
                    url: url.to_string(),
                    reason,
                });
            }
            self.pause().await;
        }
    }

    /// One look at the cluster: its etcd membership, each API server and the ingress.
    pub(crate) async fn observe(&self, plan: &Convergence, etcd: &EtcdClient<'_, N>) -> Observed {
        let members = &plan.etcd.members;
        let mut o = Observed::default();
        let mut failures: Vec<StepError> = Vec::new();
        // etcd's members and every `/readyz` at once.
        let ca = plan.apiserver_ca.as_str();
        let checks = plan.components.iter().filter_map(|c| {
            c.apiserver_url
                .as_deref()
                .map(|url| async move { (c, url, self.readyz(url, ca).await) })
        });
        let etcd_members = async {
            if members.is_empty() {
                None
            } else {
                Some(self.first_answer(members, etcd).await)
            }
        };
        let (answered, readyz) = futures::join!(etcd_members, join_all(checks));
        match answered {
            None => {}
            Some(Err(last)) => failures.push(StepError::EtcdUnanswered { last }),
            Some(Ok((_, list))) => {
                let wanted = |m: &Member| members.iter().any(|w| m.peer_urls.contains(&w.peer_url));
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
        let mut apiserver_errors = Vec::new();
        let mut ingress_errors = Vec::new();
        let mut ingresses = 0;
        for (c, url, result) in readyz {
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
