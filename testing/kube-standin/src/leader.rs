//! Leader election over a `coordination.k8s.io` Lease, as client-go's leaderelection does it
//! for kube-controller-manager: acquire when the Lease is free or its holder has not renewed
//! it for a lease duration (measured on this replica's clock, from when the record last
//! changed, so clocks need not agree), renew every retry period, lose leadership when no
//! renewal succeeded within the renew deadline, release on shutdown.
//!
//! Unlike kube-controller-manager, which exits when it loses leadership, the stand-in goes
//! back to being a candidate.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::Client;
use crate::config::LeaderElection;

/// One replica's elector.
pub struct Elector {
    client: Client,
    config: LeaderElection,
    identity: String,
}

impl Elector {
    /// An elector for `identity` (unique per replica).
    pub fn new(client: Client, config: LeaderElection, identity: String) -> Elector {
        Elector {
            client,
            config,
            identity,
        }
    }

    fn path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
            self.config.namespace, self.config.name
        )
    }

    fn spec(&self, acquire: Option<&str>, transitions: i64) -> Value {
        let now = crate::api::meta::now_micro();
        json!({
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.config.lease_duration.as_secs().max(1),
            "acquireTime": acquire.map_or_else(|| now.clone(), str::to_string),
            "renewTime": now,
            "leaseTransitions": transitions,
        })
    }

    /// One attempt to acquire or renew; whether this replica holds the Lease after it.
    async fn try_acquire(&self, observed: &mut Option<(Value, Instant)>) -> Result<bool, String> {
        let path = self.path();
        let Some(mut lease) = self.client.get(&path).await.map_err(|e| e.to_string())? else {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": self.spec(None, 0),
            });
            let collection = format!(
                "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
                self.config.namespace
            );
            return match self.client.create(&collection, &lease).await {
                Ok(_) => Ok(true),
                Err(e) if e.code() == Some(409) => Ok(false),
                Err(e) => Err(e.to_string()),
            };
        };
        let spec = lease["spec"].clone();
        let holder = spec["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // When did the record last change, as seen from here?
        let record = json!([
            spec["holderIdentity"],
            spec["renewTime"],
            spec["acquireTime"]
        ]);
        match observed {
            Some((seen, _)) if *seen == record => {}
            _ => *observed = Some((record, Instant::now())),
        }
        let duration = spec["leaseDurationSeconds"]
            .as_u64()
            .map_or(self.config.lease_duration, Duration::from_secs);
        let expired = observed
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() > duration);
        let transitions = spec["leaseTransitions"].as_i64().unwrap_or(0);
        let new_spec = if holder == self.identity {
            self.spec(spec["acquireTime"].as_str(), transitions)
        } else if holder.is_empty() || expired {
            self.spec(None, transitions + 1)
        } else {
            return Ok(false);
        };
        lease["spec"] = new_spec;
        match self.client.replace(&path, &lease).await {
            Ok(_) => {
                *observed = None;
                Ok(true)
            }
            Err(e) if e.code() == Some(409) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Gives the Lease up (holder cleared, a one-second duration).
    async fn release(&self) {
        let path = self.path();
        if let Ok(Some(mut lease)) = self.client.get(&path).await
            && lease["spec"]["holderIdentity"] == self.identity.as_str()
        {
            lease["spec"]["holderIdentity"] = Value::Null;
            lease["spec"]["leaseDurationSeconds"] = json!(1);
            if self.client.replace(&path, &lease).await.is_ok() {
                tracing::info!(
                    "released the leader Lease {}/{}",
                    self.config.namespace,
                    self.config.name
                );
            }
        }
    }

    /// Campaigns until `stop`, telling `leading` whether this replica leads.
    pub async fn run(self, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut observed = None;
        let mut last_renewal = Instant::now();
        loop {
            let is_leader = *leading.borrow();
            match self.try_acquire(&mut observed).await {
                Ok(true) => {
                    last_renewal = Instant::now();
                    if !is_leader {
                        tracing::info!(
                            "{} acquired the leader Lease {}/{}",
                            self.identity,
                            self.config.namespace,
                            self.config.name
                        );
                        leading.send_replace(true);
                    }
                }
                Ok(false) => {
                    if is_leader {
                        tracing::warn!("another replica took the leader Lease: leading no more");
                        leading.send_replace(false);
                    }
                }
                Err(e) => {
                    tracing::warn!("leader election: {e}");
                    if is_leader && last_renewal.elapsed() > self.config.renew_deadline {
                        tracing::warn!(
                            "no renewal within the renew deadline {:?}: leading no more",
                            self.config.renew_deadline
                        );
                        leading.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                _ = crate::serve::stopped(&mut stop) => {
                    if *leading.borrow() {
                        self.release().await;
                    }
                    leading.send_replace(false);
                    return;
                }
            }
        }
    }
}
