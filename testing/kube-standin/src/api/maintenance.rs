//! What the API server does in the background: create the system namespaces, the bootstrap
//! RBAC policy and the `kubernetes` Service at start (each object only if absent, so replicas
//! starting together and an administrator's changes are both fine), and finish deletions
//! that finalizers hold: a namespace's contents, then the namespace; a CRD's objects, then
//! the CRD. Every pass is idempotent, so replicas doing it at once only meet conflicts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::Api;
use super::kinds::{self, CRD_CLEANUP_FINALIZER};
use super::meta;
use super::policy;
use super::registry::Served;
use super::resources::{self, Resource};
use super::storage::{ListOptions, StorageError};

/// How often deletions are looked at when nothing wakes the loop.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How soon a bootstrap that failed (etcd not answering yet) is tried again.
const BOOTSTRAP_RETRY: Duration = Duration::from_millis(100);

impl Api {
    /// Creates `object` of `resource` at its key if nothing is there (server-side: no
    /// authorization, no admission).
    async fn ensure(&self, resource: &Resource, mut object: Value) -> Result<(), StorageError> {
        let served = Served {
            resource: resource.clone(),
            crd: None,
        };
        let namespace = meta::namespace(&object).to_string();
        let namespace = (!namespace.is_empty()).then_some(namespace);
        let key = resource.key(
            &self.settings.root,
            namespace.as_deref(),
            meta::name(&object),
        );
        if self.storage.get(&key).await?.is_some() {
            return Ok(());
        }
        {
            let m = meta::metadata_mut(&mut object);
            m.insert("uid".into(), json!(meta::uid()));
            m.insert("creationTimestamp".into(), json!(meta::now()));
        }
        kinds::default_on_create(&served, &mut object);
        super::apply::record_update(
            None,
            &mut object,
            "kube-apiserver",
            &resource.group_version(),
            super::apply::Scope::Whole,
        );
        match self.storage.create(&key, &object).await {
            Ok(_) | Err(StorageError::Exists { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn builtin(&self, group: &str, plural: &str) -> Resource {
        self.registry
            .builtin(group, plural)
            .unwrap_or_else(|| unreachable!("{group}/{plural} is built in"))
    }

    /// The system namespaces, the bootstrap policy, the `kubernetes` Service and this
    /// server's address among its endpoints.
    ///
    /// # Errors
    /// Storage failures (the caller tries again).
    pub async fn bootstrap(&self) -> Result<(), StorageError> {
        let namespaces = self.builtin("", "namespaces");
        for name in policy::SYSTEM_NAMESPACES {
            self.ensure(&namespaces, policy::namespace(name)).await?;
        }
        // The policy's objects at once: etcd takes concurrent writes in one proposal.
        let policy = policy::bootstrap_policy().into_iter().map(|object| {
            let plural = match object["kind"].as_str() {
                Some("ClusterRole") => "clusterroles",
                Some("ClusterRoleBinding") => "clusterrolebindings",
                Some("Role") => "roles",
                _ => "rolebindings",
            };
            let resource = self.builtin("rbac.authorization.k8s.io", plural);
            async move { self.ensure(&resource, object).await }
        });
        for ensured in futures::future::join_all(policy).await {
            ensured?;
        }
        if let Some(range) = self.settings.service_cluster_ip_ranges.first() {
            let ip = range
                .hosts()
                .next()
                .map(|ip| ip.to_string())
                .unwrap_or_default();
            let port = self.settings.advertise.map_or(6443, |(_, p)| p);
            self.ensure(&self.builtin("", "services"), json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                         "ipFamilies": [if ip.contains(':') { "IPv6" } else { "IPv4" }], "ipFamilyPolicy": "SingleStack",
                         "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                         "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]},
            }))
            .await?;
        }
        if let Some((address, port)) = self.settings.advertise {
            self.add_endpoint(address.to_string(), port).await?;
        }
        self.authz.invalidate();
        self.set_bootstrapped();
        Ok(())
    }

    /// Adds this server to the `kubernetes` Endpoints.
    async fn add_endpoint(&self, address: String, port: u16) -> Result<(), StorageError> {
        let endpoints = self.builtin("", "endpoints");
        let key = endpoints.key(&self.settings.root, Some("default"), "kubernetes");
        loop {
            match self.storage.get(&key).await? {
                None => {
                    let object = json!({
                        "apiVersion": "v1", "kind": "Endpoints",
                        "metadata": {"name": "kubernetes", "namespace": "default",
                                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                        "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
                    });
                    self.ensure(&endpoints, object).await?;
                    if self
                        .storage
                        .get(&key)
                        .await?
                        .is_some_and(|s| has_address(&s.value, &address))
                    {
                        return Ok(());
                    }
                }
                Some(stored) if has_address(&stored.value, &address) => return Ok(()),
                Some(stored) => {
                    let mut object = stored.value;
                    if !object["subsets"][0]["addresses"].is_array() {
                        object["subsets"] = json!([{"addresses": [], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]);
                    }
                    if let Some(list) = object["subsets"][0]["addresses"].as_array_mut() {
                        list.push(json!({"ip": address}));
                        list.sort_by(|a, b| a["ip"].as_str().cmp(&b["ip"].as_str()));
                    }
                    match self.storage.update(&key, &object, stored.revision).await {
                        Ok(_) => return Ok(()),
                        Err(StorageError::Conflict { .. } | StorageError::NotFound { .. }) => {
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    /// One pass over deletions held by finalizers.
    async fn finish_deletions(&self) -> Result<(), StorageError> {
        let namespaces = Served {
            resource: self.builtin("", "namespaces"),
            crd: None,
        };
        let listed = self
            .storage
            .list(
                &namespaces.resource.prefix(&self.settings.root),
                &ListOptions::default(),
            )
            .await?;
        for (_, stored) in listed
            .items
            .into_iter()
            .filter(|(_, s)| meta::deleting(&s.value))
        {
            self.finish_namespace(&namespaces, stored.value, stored.revision)
                .await?;
        }
        let crds = Served {
            resource: self.registry.crd_resource(),
            crd: None,
        };
        let listed = self
            .storage
            .list(
                &crds.resource.prefix(&self.settings.root),
                &ListOptions::default(),
            )
            .await?;
        for (_, stored) in listed
            .items
            .into_iter()
            .filter(|(_, s)| meta::deleting(&s.value))
        {
            self.finish_crd(&crds, stored.value, stored.revision)
                .await?;
        }
        Ok(())
    }

    /// Deletes (or marks) every object under `prefix`; whether none is left.
    async fn empty(&self, served: &Served, prefix: &str) -> Result<bool, StorageError> {
        let listed = self.storage.list(prefix, &ListOptions::default()).await?;
        let mut left = false;
        for (_, stored) in listed.items {
            left = true;
            if meta::deleting(&stored.value) {
                continue;
            }
            let name = meta::name(&stored.value).to_string();
            let namespace = meta::namespace(&stored.value).to_string();
            let namespace = (!namespace.is_empty()).then_some(namespace);
            let object = self.present(served, stored.value, stored.revision);
            // Conflicts and races with clients: the next pass tries again.
            let _ = self
                .delete_one(
                    served,
                    namespace.as_deref(),
                    &name,
                    &object,
                    stored.revision,
                    false,
                )
                .await;
        }
        if !left {
            return Ok(true);
        }
        Ok(self
            .storage
            .list(prefix, &ListOptions::default())
            .await?
            .items
            .is_empty())
    }

    async fn finish_namespace(
        &self,
        served: &Served,
        object: Value,
        revision: u64,
    ) -> Result<(), StorageError> {
        let name = meta::name(&object).to_string();
        let mut all_empty = true;
        for s in self.registry.all(&*self.storage).await {
            if !s.resource.namespaced || s.resource.review || s.resource.group == "events.k8s.io" {
                continue;
            }
            let prefix = format!("{}{name}/", self.stored_as(&s).prefix(&self.settings.root));
            all_empty &= self.empty(&s, &prefix).await?;
        }
        if !all_empty {
            return Ok(());
        }
        let key = served.resource.key(&self.settings.root, None, &name);
        let mut finished = object;
        if let Some(list) = finished["spec"]["finalizers"].as_array_mut() {
            list.retain(|f| f != "kubernetes");
        }
        let spec_done = finished["spec"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if spec_done && meta::finalizers(&finished).is_empty() {
            match self.storage.delete(&key, revision).await {
                Ok(_) | Err(StorageError::Conflict { .. } | StorageError::NotFound { .. }) => {
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else {
            match self.storage.update(&key, &finished, revision).await {
                Ok(_) | Err(StorageError::Conflict { .. } | StorageError::NotFound { .. }) => {
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    }

    async fn finish_crd(
        &self,
        served: &Served,
        crd: Value,
        revision: u64,
    ) -> Result<(), StorageError> {
        let name = meta::name(&crd).to_string();
        if !meta::finalizers(&crd)
            .iter()
            .any(|f| f == CRD_CLEANUP_FINALIZER)
        {
            return Ok(());
        }
        let crd_arc = Arc::new(crd.clone());
        let mut all_empty = true;
        if let Some(resource) = resources::from_crd(&crd).into_iter().next() {
            let instances = Served {
                resource: resource.clone(),
                crd: Some(crd_arc),
            };
            let prefix = resource.prefix(&self.settings.root);
            all_empty = self.empty(&instances, &prefix).await?;
        }
        if !all_empty {
            return Ok(());
        }
        let key = served.resource.key(&self.settings.root, None, &name);
        let mut finished = crd;
        if let Some(list) = finished["metadata"]["finalizers"].as_array_mut() {
            list.retain(|f| f != CRD_CLEANUP_FINALIZER);
        }
        let result = if meta::finalizers(&finished).is_empty() {
            self.storage.delete(&key, revision).await.map(|_| ())
        } else {
            self.storage
                .update(&key, &finished, revision)
                .await
                .map(|_| ())
        };
        self.registry.invalidate();
        match result {
            Ok(()) | Err(StorageError::Conflict { .. } | StorageError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn has_address(endpoints: &Value, address: &str) -> bool {
    endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["addresses"].as_array().into_iter().flatten())
        .any(|a| a["ip"] == address)
}

/// Bootstraps (tried again every [`BOOTSTRAP_RETRY`] until it succeeds), then finishes
/// deletions every [`INTERVAL`] or when woken, until `stop`.
pub async fn run(api: Arc<Api>, mut stop: watch::Receiver<bool>) {
    let mut failures = 0u32;
    loop {
        if !api.bootstrapped() {
            match api.bootstrap().await {
                Ok(()) => tracing::info!(
                    "bootstrap done: system namespaces, RBAC policy, kubernetes Service"
                ),
                Err(e) => {
                    if failures.is_multiple_of(30) {
                        tracing::warn!("bootstrap failed (will retry): {e}");
                    }
                    failures += 1;
                }
            }
        }
        if api.bootstrapped()
            && let Err(e) = api.finish_deletions().await
        {
            tracing::debug!("finishing deletions: {e}");
        }
        let wait = if api.bootstrapped() {
            INTERVAL
        } else {
            BOOTSTRAP_RETRY
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = api.wake.notified() => {}
            _ = crate::serve::stopped(&mut stop) => return,
        }
    }
}
