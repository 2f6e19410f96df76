//! The controllers the kube-controller-manager stand-in runs while it leads, each as the
//! real controller behaves (each a pass every period over what the API lists, idempotent, so
//! a pass lost to a conflict is redone by the next):
//!
//! ```text
//!  tokencleaner           deletes bootstrap-token Secrets whose `expiration` has passed
//!  nodelifecycle          a Node whose Lease (kube-node-lease) is older than
//!                         --node-monitor-grace-period: conditions Unknown
//!                         ("Kubelet stopped posting node status."), unreachable taints;
//!                         taints removed once the kubelet reports Ready again
//!  serviceaccount         a `default` ServiceAccount in every namespace
//!  root-ca-cert-publisher a `kube-root-ca.crt` ConfigMap (--root-ca-file) in every namespace
//!  bootstrapsigner        signs kube-public/cluster-info with each signing bootstrap token
//! ```
//!
//! `--controllers` picks them as the real flag does (`*` is every default controller;
//! `tokencleaner` and `bootstrapsigner` are off unless named; `-name` turns one off). With
//! `--use-service-account-credentials` each controller acts as its ServiceAccount in
//! kube-system, with a token from the TokenRequest API. Controllers the stand-in does not have
//! (deployments, garbage collection, CSR signing, ...) are not run: it says which at start.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::api::meta;
use crate::client::{Client, ClientError};
use crate::config::ControllerManagerExtras;

/// The controllers the stand-in has, with their service accounts.
pub const IMPLEMENTED: &[(&str, &str)] = &[
    ("tokencleaner", "token-cleaner"),
    ("nodelifecycle", "node-controller"),
    ("serviceaccount", "service-account-controller"),
    ("root-ca-cert-publisher", "root-ca-cert-publisher"),
    ("bootstrapsigner", "bootstrap-signer"),
];

/// Off unless named, as in kube-controller-manager.
const DISABLED_BY_DEFAULT: &[&str] = &["tokencleaner", "bootstrapsigner"];

/// Whether `--controllers` turns `name` on.
pub fn enabled(controllers: &[String], name: &str) -> bool {
    if controllers.iter().any(|c| c == &format!("-{name}")) {
        return false;
    }
    if controllers.iter().any(|c| c == name) {
        return true;
    }
    controllers.iter().any(|c| c == "*") && !DISABLED_BY_DEFAULT.contains(&name)
}

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// A service-account token and when to get a new one.
struct Token {
    client: Client,
    refresh_at: Instant,
}

/// The controllers of one controller-manager.
pub struct Controllers {
    client: Client,
    extras: ControllerManagerExtras,
    root_ca: Option<String>,
    tokens: Mutex<BTreeMap<String, Token>>,
}

fn secret_data(secret: &Value, key: &str) -> Option<String> {
    let bytes = B64.decode(secret["data"][key].as_str()?).ok()?;
    String::from_utf8(bytes).ok()
}

fn expired(secret: &Value, now: time::OffsetDateTime) -> bool {
    secret_data(secret, "expiration")
        .and_then(|e| meta::parse_time(&e))
        .is_some_and(|t| t < now)
}

/// Whether a refusal is the NamespaceLifecycle one (the namespace is going away).
fn terminating(error: &ClientError) -> bool {
    matches!(error, ClientError::Status { code: 403, message, .. } if message.contains("because it is being terminated"))
}

/// A detached JWS (`header..signature`, HS256) of `content` with the bootstrap token
/// `id.secret`, as the bootstrap signer writes `jws-kubeconfig-<id>`.
pub fn detached_jws(content: &str, id: &str, secret: &str) -> String {
    let header = B64URL.encode(json!({"alg": "HS256", "kid": id}).to_string());
    let payload = B64URL.encode(content);
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, format!("{id}.{secret}").as_bytes());
    let signature = ring::hmac::sign(&key, format!("{header}.{payload}").as_bytes());
    format!("{header}..{}", B64URL.encode(signature.as_ref()))
}

impl Controllers {
    /// The controllers of `extras`, acting with `client` (the controller-manager's identity).
    pub fn new(
        client: Client,
        extras: ControllerManagerExtras,
        root_ca: Option<String>,
    ) -> Controllers {
        Controllers {
            client,
            extras,
            root_ca,
            tokens: Mutex::new(BTreeMap::new()),
        }
    }

    /// The names the stand-in runs.
    pub fn running(&self) -> Vec<&'static str> {
        IMPLEMENTED
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| enabled(&self.extras.controllers, name))
            .collect()
    }

    /// The client `controller` acts with: its ServiceAccount's token, or the manager's own
    /// identity without `--use-service-account-credentials`.
    async fn client_for(&self, controller: &str) -> Result<Client, ClientError> {
        if !self.extras.use_service_account_credentials {
            return Ok(self.client.clone());
        }
        let account = IMPLEMENTED
            .iter()
            .find(|(name, _)| *name == controller)
            .map_or(controller, |(_, account)| *account);
        {
            let tokens = self
                .tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(token) = tokens
                .get(account)
                .filter(|t| Instant::now() < t.refresh_at)
            {
                return Ok(token.client.clone());
            }
        }
        let accounts = "/api/v1/namespaces/kube-system/serviceaccounts";
        if self
            .client
            .get(&format!("{accounts}/{account}"))
            .await?
            .is_none()
        {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": "kube-system"}});
            match self.client.create(accounts, &sa).await {
                Ok(_) => {}
                Err(e) if e.code() == Some(409) => {}
                Err(e) => return Err(e),
            }
        }
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}});
        let answer = self
            .client
            .create(&format!("{accounts}/{account}/token"), &request)
            .await?;
        let token = answer["status"]["token"].as_str().unwrap_or_default();
        let client = self.client.with_token(token)?;
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                account.to_string(),
                Token {
                    client: client.clone(),
                    refresh_at: Instant::now() + Duration::from_secs(2880),
                },
            );
        Ok(client)
    }

    /// Deletes expired bootstrap tokens.
    async fn token_cleaner(&self) -> Result<(), ClientError> {
        let client = self.client_for("tokencleaner").await?;
        let now = time::OffsetDateTime::now_utc();
        // As the real controllers: reads through the manager's own (informer) identity,
        // writes as the controller's service account.
        let secrets = self
            .client
            .list("/api/v1/namespaces/kube-system/secrets?fieldSelector=type%3Dbootstrap.kubernetes.io%2Ftoken")
            .await?;
        for secret in secrets.iter().filter(|s| expired(s, now)) {
            let name = meta::name(secret);
            match client
                .delete(&format!("/api/v1/namespaces/kube-system/secrets/{name}"))
                .await
            {
                Ok(()) => {
                    tracing::info!("tokencleaner: deleted expired bootstrap token secret {name}")
                }
                Err(e) if e.code() == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Marks Nodes whose Lease went stale, and clears the marks of those back.
    async fn node_lifecycle(&self) -> Result<(), ClientError> {
        let client = self.client_for("nodelifecycle").await?;
        let nodes = self.client.list("/api/v1/nodes").await?;
        let leases: BTreeMap<String, Value> = self
            .client
            .list("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
            .await?
            .into_iter()
            .map(|l| (meta::name(&l).to_string(), l))
            .collect();
        let now = time::OffsetDateTime::now_utc();
        let grace = time::Duration::try_from(self.extras.node_monitor_grace_period)
            .unwrap_or(time::Duration::seconds(40));
        for node in nodes {
            let name = meta::name(&node).to_string();
            let renewed = leases
                .get(&name)
                .and_then(|l| l["spec"]["renewTime"].as_str().and_then(meta::parse_time))
                .or_else(|| {
                    node["metadata"]["creationTimestamp"]
                        .as_str()
                        .and_then(meta::parse_time)
                });
            let stale = renewed.is_none_or(|t| now - t > grace);
            let conditions: Vec<Value> = node["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let ready = conditions
                .iter()
                .find(|c| c["type"] == "Ready")
                .map(|c| c["status"].as_str().unwrap_or_default().to_string());
            let taints: Vec<Value> = node["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let tainted = taints.iter().any(|t| t["key"] == UNREACHABLE);
            let path = format!("/api/v1/nodes/{name}");
            if stale && ready.as_deref() != Some("Unknown") {
                let stamp = meta::now();
                let unknown: Vec<Value> = conditions
                    .iter()
                    .map(|c| {
                        let mut c = c.clone();
                        c["status"] = json!("Unknown");
                        c["reason"] = json!("NodeStatusUnknown");
                        c["message"] = json!("Kubelet stopped posting node status.");
                        c["lastTransitionTime"] = json!(stamp);
                        c
                    })
                    .collect();
                let unknown = if unknown.is_empty() {
                    vec![
                        json!({"type": "Ready", "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                                "message": "Kubelet never posted node status.", "lastTransitionTime": stamp, "lastHeartbeatTime": stamp}),
                    ]
                } else {
                    unknown
                };
                client
                    .merge_patch(
                        &format!("{path}/status"),
                        &json!({"status": {"conditions": unknown}}),
                    )
                    .await?;
                tracing::info!("nodelifecycle: node {name} stopped posting status: Ready Unknown");
                self.event(
                    &client,
                    &node,
                    "NodeNotReady",
                    &format!("Node {name} status is now: NodeNotReady"),
                )
                .await;
            }
            if stale && !tainted {
                let mut taints = taints.clone();
                taints.push(
                    json!({"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": meta::now()}),
                );
                taints.push(
                    json!({"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": meta::now()}),
                );
                client
                    .merge_patch(&path, &json!({"spec": {"taints": taints}}))
                    .await?;
            } else if !stale && ready.as_deref() == Some("True") && tainted {
                let kept: Vec<Value> = taints
                    .into_iter()
                    .filter(|t| t["key"] != UNREACHABLE)
                    .collect();
                let kept = if kept.is_empty() {
                    Value::Null
                } else {
                    json!(kept)
                };
                client
                    .merge_patch(&path, &json!({"spec": {"taints": kept}}))
                    .await?;
                tracing::info!("nodelifecycle: node {name} is back: unreachable taints removed");
            }
        }
        Ok(())
    }

    async fn event(&self, client: &Client, node: &Value, reason: &str, message: &str) {
        let name = meta::name(node);
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": name, "uid": node["metadata"]["uid"], "apiVersion": "v1"},
            "reason": reason, "message": message, "type": "Normal",
            "source": {"component": "node-controller"},
            "firstTimestamp": meta::now(), "lastTimestamp": meta::now(), "count": 1,
            "reportingComponent": "node-controller",
        });
        if let Err(e) = client
            .create("/api/v1/namespaces/default/events", &event)
            .await
        {
            tracing::debug!("event {reason}: {e}");
        }
    }

    async fn namespaces(&self) -> Result<Vec<String>, ClientError> {
        Ok(self
            .client
            .list("/api/v1/namespaces")
            .await?
            .into_iter()
            .filter(|n| !meta::deleting(n))
            .map(|n| meta::name(&n).to_string())
            .collect())
    }

    /// A `default` ServiceAccount in every namespace.
    async fn service_accounts(&self) -> Result<(), ClientError> {
        let client = self.client_for("serviceaccount").await?;
        for ns in self.namespaces().await? {
            let path = format!("/api/v1/namespaces/{ns}/serviceaccounts");
            if self.client.get(&format!("{path}/default")).await?.is_none() {
                let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
                match client.create(&path, &sa).await {
                    Ok(_) | Err(ClientError::Status { code: 409, .. }) => {}
                    Err(e) if terminating(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// `kube-root-ca.crt` in every namespace.
    async fn root_ca_publisher(&self) -> Result<(), ClientError> {
        let Some(ca) = &self.root_ca else {
            return Ok(());
        };
        let client = self.client_for("root-ca-cert-publisher").await?;
        for ns in self.namespaces().await? {
            let path = format!("/api/v1/namespaces/{ns}/configmaps");
            match self
                .client
                .get(&format!("{path}/{ROOT_CA_CONFIGMAP}"))
                .await?
            {
                None => {
                    let cm = json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": ns,
                                     "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                        "data": {"ca.crt": ca},
                    });
                    match client.create(&path, &cm).await {
                        Ok(_) | Err(ClientError::Status { code: 409, .. }) => {}
                        Err(e) if terminating(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                Some(mut cm) if cm["data"]["ca.crt"].as_str() != Some(ca.as_str()) => {
                    cm["data"] = json!({"ca.crt": ca});
                    client
                        .replace(&format!("{path}/{ROOT_CA_CONFIGMAP}"), &cm)
                        .await?;
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Signs `kube-public/cluster-info` with every valid signing bootstrap token.
    async fn bootstrap_signer(&self) -> Result<(), ClientError> {
        let client = self.client_for("bootstrapsigner").await?;
        let path = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
        let Some(mut info) = self.client.get(path).await? else {
            return Ok(());
        };
        let Some(kubeconfig) = info["data"]["kubeconfig"].as_str().map(str::to_string) else {
            return Ok(());
        };
        let now = time::OffsetDateTime::now_utc();
        let secrets = self
            .client
            .list("/api/v1/namespaces/kube-system/secrets?fieldSelector=type%3Dbootstrap.kubernetes.io%2Ftoken")
            .await?;
        let mut signatures = BTreeMap::new();
        for secret in secrets
            .iter()
            .filter(|s| !expired(s, now) && !meta::deleting(s))
        {
            if secret_data(secret, "usage-bootstrap-signing").as_deref() != Some("true") {
                continue;
            }
            if let (Some(id), Some(token_secret)) = (
                secret_data(secret, "token-id"),
                secret_data(secret, "token-secret"),
            ) {
                signatures.insert(
                    format!("jws-kubeconfig-{id}"),
                    detached_jws(&kubeconfig, &id, &token_secret),
                );
            }
        }
        let mut data: BTreeMap<String, String> = info["data"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| !k.starts_with("jws-kubeconfig-"))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        data.extend(signatures);
        let data = json!(data);
        if info["data"] != data {
            info["data"] = data;
            client.replace(path, &info).await?;
            tracing::info!("bootstrapsigner: signed cluster-info");
        }
        Ok(())
    }

    /// Runs the enabled controllers while `leading` says so, until `stop`.
    pub async fn run(self, mut leading: watch::Receiver<bool>, mut stop: watch::Receiver<bool>) {
        let running = self.running();
        let period = self.extras.node_monitor_period.min(Duration::from_secs(2));
        let mut failures: BTreeMap<&str, u32> = BTreeMap::new();
        // Without leader election nobody sends on `leading` (it says true for good).
        let mut elected = true;
        loop {
            if *leading.borrow() {
                for name in &running {
                    let result = match *name {
                        "tokencleaner" => self.token_cleaner().await,
                        "nodelifecycle" => self.node_lifecycle().await,
                        "serviceaccount" => self.service_accounts().await,
                        "root-ca-cert-publisher" => self.root_ca_publisher().await,
                        "bootstrapsigner" => self.bootstrap_signer().await,
                        _ => Ok(()),
                    };
                    let count = failures.entry(name).or_default();
                    match result {
                        Ok(()) => *count = 0,
                        Err(e) => {
                            if (*count).is_multiple_of(15) {
                                tracing::warn!("{name}: {e}");
                            }
                            *count += 1;
                        }
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                changed = leading.changed(), if elected => elected = changed.is_ok(),
                _ = crate::serve::stopped(&mut stop) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_flag_semantics() {
        let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(enabled(&c(&["*"]), "nodelifecycle"));
        assert!(!enabled(&c(&["*"]), "tokencleaner"), "off unless named");
        assert!(enabled(
            &c(&["*", "bootstrapsigner", "tokencleaner"]),
            "tokencleaner"
        ));
        assert!(!enabled(&c(&["*", "-nodelifecycle"]), "nodelifecycle"));
        assert!(!enabled(&c(&["tokencleaner"]), "serviceaccount"));
    }

    #[test]
    fn detached_signatures_are_hs256_over_the_kubeconfig() {
        let jws = detached_jws("apiVersion: v1\n", "abcdef", "0123456789abcdef");
        let (header, rest) = jws.split_once("..").unwrap();
        let header: Value = serde_json::from_slice(&B64URL.decode(header).unwrap()).unwrap();
        assert_eq!(header, json!({"alg": "HS256", "kid": "abcdef"}));
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"abcdef.0123456789abcdef");
        let input = format!(
            "{}.{}",
            B64URL.encode(json!({"alg": "HS256", "kid": "abcdef"}).to_string()),
            B64URL.encode("apiVersion: v1\n")
        );
        assert!(ring::hmac::verify(&key, input.as_bytes(), &B64URL.decode(rest).unwrap()).is_ok());
    }

    #[test]
    fn bootstrap_token_expiry_is_read_from_the_secret() {
        let secret = |e: &str| json!({"data": {"expiration": B64.encode(e)}});
        let now = time::OffsetDateTime::now_utc();
        assert!(expired(&secret("2001-01-01T00:00:00Z"), now));
        assert!(!expired(&secret("2999-01-01T00:00:00Z"), now));
        assert!(!expired(&json!({"data": {}}), now), "no expiration: never");
    }
}
