//! Test support: a management cluster for tests of the `oi-manager` binary. It is the API
//! server stand-in the managed clusters run (`oi_kube_standin::api`, one implementation of
//! the API's semantics), over memory, on loopback, with TLS, client certificates and RBAC:
//! `oi-manager` reaches it with an administrator's kubeconfig, as it would a real cluster.
//!
//! ```text
//!  oi-manager run ──HTTPS──► oi_kube_standin::api (in process, MemoryStorage)
//!    (kube-rs, kube-runtime)     the oneinfra CRDs installed at start (StandinOptions::crds)
//!  the test ─────────────────► the same API through its loopback client (system:apiserver)
//!                               typed helpers below: objects, Leases, Events, requests
//! ```
//!
//! What the API serves and approximates is listed in `oi_kube_standin::api`. Namespaces must
//! exist before objects go in them, as in Kubernetes: [`StandinOptions::namespaces`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use http::{Method, StatusCode};
use oi_api::{Cluster, Component, Hypervisor, Kind, ObjectKey};
use oi_kube_standin::local::{LocalApiServer, LocalOptions};
use oi_manager::kube_store::{api_resource, plural};
use oi_manager::store::Stored;
use serde_json::{Value, json};

use crate::etcd::EtcdProcess;

/// How the stand-in is set up.
#[derive(Debug, Clone)]
pub struct StandinOptions {
    /// Every watch ends after this long at the latest (kube-runtime then resumes it from the
    /// last resourceVersion it saw), so that resuming is exercised too.
    pub watch_timeout: Duration,
    /// Whether the oneinfra CRDs are installed; without them their paths answer 404.
    pub crds: bool,
    /// Namespaces created at start (the manager's, and those objects go in).
    pub namespaces: Vec<String>,
    /// Objects stored in a real etcd started for the server ([`EtcdProcess`]) instead of
    /// memory.
    pub etcd: bool,
}

impl Default for StandinOptions {
    fn default() -> Self {
        StandinOptions {
            watch_timeout: Duration::from_secs(30),
            crds: true,
            namespaces: ["oneinfra-system", "ops", "tenants", "team-a"]
                .iter()
                .map(|s| (*s).to_string())
                .collect(),
            etcd: false,
        }
    }
}

/// The management API server; it stops when dropped.
pub struct ApiServer {
    /// Where it listens (HTTPS).
    pub address: SocketAddr,
    local: LocalApiServer,
    /// Dropped after the server that uses it.
    etcd: Option<EtcdProcess>,
}

fn collection(kind: Kind, namespace: Option<&str>) -> String {
    let resource = api_resource(kind);
    let base = format!("/apis/{}/{}", resource.group, resource.version);
    match namespace.filter(|_| kind.namespaced()) {
        Some(ns) => format!("{base}/namespaces/{ns}/{}", plural(kind)),
        None => format!("{base}/{}", plural(kind)),
    }
}

fn item(kind: Kind, key: &ObjectKey) -> String {
    format!(
        "{}/{}",
        collection(kind, Some(key.namespace.as_str()).filter(|n| !n.is_empty())),
        key.name
    )
}

impl ApiServer {
    /// Starts serving on `127.0.0.1:0`, with the CRDs and namespaces `options` names.
    ///
    /// # Errors
    /// When the server cannot start or its setup is refused.
    pub fn start(options: StandinOptions) -> Result<ApiServer> {
        let etcd = options.etcd.then(EtcdProcess::start).transpose()?;
        let local = LocalApiServer::start(LocalOptions {
            watch_timeout: options.watch_timeout,
            record_requests: true,
            etcd: etcd.as_ref().map(|e| e.connection.clone()),
            ..LocalOptions::default()
        })?;
        let server = ApiServer {
            address: local.address,
            local,
            etcd,
        };
        for ns in &options.namespaces {
            server.call(
                Method::POST,
                "/api/v1/namespaces",
                Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
            )?;
        }
        if options.crds {
            let crds = oi_api::crd::crds_yaml().context("the oneinfra CRDs")?;
            for doc in serde_yaml_ng::Deserializer::from_str(&crds) {
                let crd = <Value as serde::Deserialize>::deserialize(doc)?;
                server.call(
                    Method::POST,
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    Some(&crd),
                )?;
            }
        }
        server.local.api().clear_requests();
        Ok(server)
    }

    /// A request of the server's loopback client (an all-powerful administrator).
    ///
    /// # Errors
    /// A failure status, with the server's message.
    pub fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let (status, value) = self.loopback(method.clone(), path, body);
        if !status.is_success() {
            bail!(
                "{method} {path}: {status}: {}",
                value["message"].as_str().unwrap_or(&value.to_string())
            );
        }
        Ok(value)
    }

    /// A request of the loopback client, answered from any thread, also an async test's.
    fn loopback(&self, method: Method, path: &str, body: Option<&Value>) -> (StatusCode, Value) {
        let api = std::sync::Arc::clone(self.local.api());
        if self.etcd.is_none() {
            // In-memory storage needs no reactor: this completes without one.
            return futures::executor::block_on(api.loopback(method, path, body));
        }
        // etcd's client does: on the server's runtime, from a thread of its own.
        let handle = self.local.handle();
        std::thread::scope(|scope| {
            scope
                .spawn(|| handle.block_on(api.loopback(method, path, body)))
                .join()
                .unwrap_or_else(|_| {
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        json!({"message": "the request panicked"}),
                    )
                })
        })
    }

    /// The etcd the objects are stored in ([`StandinOptions::etcd`]).
    pub fn etcd(&self) -> Option<&EtcdProcess> {
        self.etcd.as_ref()
    }

    fn try_get(&self, path: &str) -> Result<Option<Value>> {
        let (status, value) = self.loopback(Method::GET, path, None);
        match status {
            StatusCode::OK => Ok(Some(value)),
            StatusCode::NOT_FOUND => Ok(None),
            other => bail!("GET {path}: {other}: {value}"),
        }
    }

    /// The in-process server (its PKI, kubeconfigs for other identities, its API).
    pub fn local(&self) -> &LocalApiServer {
        &self.local
    }

    /// Runs `future` on the server's runtime (for kube-rs clients in synchronous tests).
    ///
    /// # Panics
    /// When called from an async context (as any `block_on`).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.local.block_on(future)
    }

    /// A kube-rs client with the administrator's identity; make it inside the runtime that
    /// uses it.
    ///
    /// # Errors
    /// When the kubeconfig does not load.
    pub async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.local.admin_kubeconfig()?)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Writes an administrator's kubeconfig for this server to `dir/kubeconfig` (0600).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, dir: &Path) -> Result<PathBuf> {
        self.local.write_admin_kubeconfig(dir)
    }

    // ---------------------------------------------------------- the oneinfra objects

    /// Every object of `K`, as stored now.
    ///
    /// # Panics
    /// When the API refuses the list or returns something that is not a `K`: a broken test.
    pub fn objects<K: Stored>(&self) -> Vec<K> {
        let list = self
            .call(Method::GET, &collection(K::KIND, None), None)
            .unwrap_or_else(|e| panic!("listing {}: {e:#}", K::KIND));
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| {
                self.typed(item.clone()).unwrap_or_else(|e| {
                    panic!("a stored {} does not read back: {e:#}: {item}", K::KIND)
                })
            })
            .collect()
    }

    /// The object of `K` at `key`.
    ///
    /// # Panics
    /// As [`ApiServer::objects`].
    pub fn object<K: Stored>(&self, key: &ObjectKey) -> Option<K> {
        self.try_get(&item(K::KIND, key))
            .unwrap_or_else(|e| panic!("reading {} {key}: {e:#}", K::KIND))
            .map(|v| {
                self.typed(v)
                    .unwrap_or_else(|e| panic!("{} {key} does not read back: {e:#}", K::KIND))
            })
    }

    /// A stored object as `K`, with the private keys it references (a Cluster's, in Secrets
    /// of its namespace: `oi_manager::keys`) read back inline, as the manager reads it.
    ///
    /// # Errors
    /// A referenced Secret that cannot be read, or an object that is not a `K`.
    pub fn typed<K: Stored>(&self, mut value: Value) -> Result<K> {
        if oi_manager::keys::keyed(K::KIND) {
            let namespace = value["metadata"]["namespace"]
                .as_str()
                .unwrap_or(oi_api::DEFAULT_NAMESPACE)
                .to_string();
            let mut secrets = std::collections::BTreeMap::new();
            for name in oi_manager::keys::referenced(&value) {
                let path = format!("/api/v1/namespaces/{namespace}/secrets/{name}");
                if let Some(secret) = self.try_get(&path)? {
                    secrets.insert(name, serde_json::from_value(secret)?);
                }
            }
            oi_manager::keys::resolve(&mut value, &secrets).map_err(anyhow::Error::msg)?;
        }
        Ok(serde_json::from_value(value)?)
    }

    /// The Secrets of `namespace` holding private keys of objects (labelled
    /// `oi_manager::keys::KEYS_OF_KIND`), as stored.
    ///
    /// # Panics
    /// When the API refuses the list: a broken test.
    pub fn key_secrets(&self, namespace: &str) -> Vec<Value> {
        let path = format!(
            "/api/v1/namespaces/{namespace}/secrets?labelSelector={}",
            oi_manager::keys::KEYS_OF_KIND
        );
        let list = self
            .call(Method::GET, &path, None)
            .unwrap_or_else(|e| panic!("listing Secrets of {namespace}: {e:#}"));
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Creates `object` as an administrator would; returns it as stored.
    ///
    /// # Errors
    /// The API's refusal.
    pub fn create<K: Stored>(&self, object: &K) -> Result<K> {
        let key = object.key();
        let value = self.call(
            Method::POST,
            &collection(
                K::KIND,
                Some(key.namespace.as_str()).filter(|n| !n.is_empty()),
            ),
            Some(&serde_json::to_value(object)?),
        )?;
        self.typed(value)
    }

    /// Replaces `object` (at its resourceVersion, when it has one). Its private keys go
    /// inline, as in oneinfra's manifests (the manager moves them into Secrets again).
    ///
    /// # Errors
    /// The API's refusal (a conflict, among others).
    pub fn update<K: Stored>(&self, object: &K) -> Result<K> {
        let value = self.call(
            Method::PUT,
            &item(K::KIND, &object.key()),
            Some(&serde_json::to_value(object)?),
        )?;
        self.typed(value)
    }

    /// Replaces `object`'s status through the status subresource.
    ///
    /// # Errors
    /// The API's refusal.
    pub fn update_status<K: Stored>(&self, object: &K) -> Result<K> {
        let path = format!("{}/status", item(K::KIND, &object.key()));
        let value = self.call(Method::PUT, &path, Some(&serde_json::to_value(object)?))?;
        self.typed(value)
    }

    /// Deletes the object of `K` at `key`.
    ///
    /// # Errors
    /// The API's refusal (not found, among others).
    pub fn delete<K: Stored>(&self, key: &ObjectKey) -> Result<()> {
        self.call(Method::DELETE, &item(K::KIND, key), None)
            .map(drop)
    }

    // ---------------------------------------------------------- Leases, Events, requests

    /// The Lease `namespace/name`, as stored.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.try_get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        ))
        .unwrap_or_else(|e| panic!("reading Lease {namespace}/{name}: {e:#}"))
    }

    /// Another replica takes (or creates) the Lease `namespace/name`: `holder` renewed it just
    /// now, for `duration_seconds`.
    ///
    /// # Panics
    /// When the API refuses: a broken test.
    pub fn put_lease(&self, namespace: &str, name: &str, holder: &str, duration_seconds: i64) {
        let now = oi_kube_standin::api::meta::now_micro();
        let spec = json!({
            "holderIdentity": holder, "leaseDurationSeconds": duration_seconds,
            "acquireTime": now, "renewTime": now,
        });
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases");
        let written = match self.lease(namespace, name) {
            Some(mut lease) => {
                lease["spec"] = spec;
                self.call(Method::PUT, &format!("{path}/{name}"), Some(&lease))
            }
            None => self.call(
                Method::POST,
                &path,
                Some(
                    &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": name, "namespace": namespace}, "spec": spec}),
                ),
            ),
        };
        written.unwrap_or_else(|e| panic!("writing Lease {namespace}/{name}: {e:#}"));
    }

    /// The holder of the Lease `namespace/name`, if it exists and is held.
    pub fn lease_holder(&self, namespace: &str, name: &str) -> Option<String> {
        self.lease(namespace, name)?
            .pointer("/spec/holderIdentity")?
            .as_str()
            .map(str::to_string)
    }

    /// The Events created so far (as events.k8s.io/v1 shows them), oldest first.
    ///
    /// # Panics
    /// When the API refuses the list: a broken test.
    pub fn events(&self) -> Vec<Value> {
        let list = self
            .call(Method::GET, "/apis/events.k8s.io/v1/events", None)
            .unwrap_or_else(|e| panic!("listing Events: {e:#}"));
        let mut events: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
        let created = |e: &Value| {
            e["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_default()
        };
        events.sort_by_key(created);
        events
    }

    /// `METHOD path?query` of every request of the clients under test so far, in order (not
    /// the test's own calls through the loopback client).
    pub fn requests(&self) -> Vec<String> {
        self.local.api().requests()
    }
}

/// Where the e2e helpers read the oneinfra objects from: this stand-in, or the in-process
/// [`crate::memory::MemoryStore`].
pub trait ObjectSource {
    /// Every Hypervisor.
    fn hypervisors(&self) -> Vec<Hypervisor>;
    /// Every Cluster.
    fn clusters(&self) -> Vec<Cluster>;
    /// Every Component.
    fn components(&self) -> Vec<Component>;
}

impl ObjectSource for ApiServer {
    fn hypervisors(&self) -> Vec<Hypervisor> {
        self.objects()
    }
    fn clusters(&self) -> Vec<Cluster> {
        self.objects()
    }
    fn components(&self) -> Vec<Component> {
        self.objects()
    }
}

impl ObjectSource for crate::memory::MemoryStore {
    fn hypervisors(&self) -> Vec<Hypervisor> {
        self.objects()
    }
    fn clusters(&self) -> Vec<Cluster> {
        self.objects()
    }
    fn components(&self) -> Vec<Component> {
        self.objects()
    }
}
