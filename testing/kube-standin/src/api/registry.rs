//! Which resources are served: the built-in ones, and those of every established
//! CustomResourceDefinition in storage. CRDs are read through a short-lived cache, refreshed
//! on a miss, so that a CRD created through any API server replica is served by every replica
//! as soon as it is stored.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::resources::{self, APIEXTENSIONS, Resource};
use super::storage::{ListOptions, Storage};

/// How long the CRD list is trusted before it is read again.
const CRD_CACHE: Duration = Duration::from_secs(1);

/// A resource as served: its definition, and its CRD for custom resources.
#[derive(Debug, Clone)]
pub struct Served {
    pub resource: Resource,
    /// The CustomResourceDefinition (for schemas, printer columns, selectable fields).
    pub crd: Option<Arc<Value>>,
}

impl Served {
    /// The CRD's entry for this version.
    pub fn crd_version(&self) -> Option<&Value> {
        let crd = self.crd.as_deref()?;
        crd["spec"]["versions"]
            .as_array()?
            .iter()
            .find(|v| v["name"].as_str() == Some(self.resource.version.as_str()))
    }

    /// The CRD's OpenAPI v3 schema for this version.
    pub fn schema(&self) -> Option<&Value> {
        self.crd_version()
            .map(|v| &v["schema"]["openAPIV3Schema"])
            .filter(|s| s.is_object())
    }

    /// Whether the CRD is being deleted (its resources take no new objects).
    pub fn terminating(&self) -> bool {
        self.crd
            .as_deref()
            .is_some_and(|c| c["metadata"]["deletionTimestamp"].is_string())
    }
}

#[derive(Default)]
struct Cache {
    served: Vec<Served>,
    fetched: Option<Instant>,
}

/// The served resources.
pub struct Registry {
    root: String,
    builtins: Vec<Resource>,
    crds: Mutex<Cache>,
}

/// The built-in groups: no CRD may claim one.
pub fn builtin_group(group: &str) -> bool {
    resources::builtins().iter().any(|r| r.group == group)
}

impl Registry {
    /// A registry whose storage keys start with `root`.
    pub fn new(root: &str) -> Registry {
        Registry {
            root: root.to_string(),
            builtins: resources::builtins(),
            crds: Mutex::new(Cache::default()),
        }
    }

    /// The storage root.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The CustomResourceDefinition resource.
    pub fn crd_resource(&self) -> Resource {
        self.builtins
            .iter()
            .find(|r| r.group == APIEXTENSIONS && r.plural == "customresourcedefinitions")
            .cloned()
            .unwrap_or_else(|| unreachable!("the CRD resource is built in"))
    }

    /// A built-in resource by group and plural (its first version).
    pub fn builtin(&self, group: &str, plural: &str) -> Option<Resource> {
        self.builtins
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .cloned()
    }

    async fn refresh(&self, storage: &dyn Storage) -> Vec<Served> {
        let prefix = self.crd_resource().prefix(&self.root);
        let listed = storage.list(&prefix, &ListOptions::default()).await;
        let mut served = Vec::new();
        if let Ok(listed) = listed {
            for (_, stored) in listed.items {
                let crd = Arc::new(stored.value);
                for resource in resources::from_crd(&crd) {
                    if builtin_group(&resource.group) {
                        continue;
                    }
                    served.push(Served {
                        resource,
                        crd: Some(Arc::clone(&crd)),
                    });
                }
            }
        }
        let mut cache = self.crds.lock().unwrap_or_else(PoisonError::into_inner);
        cache.served = served.clone();
        cache.fetched = Some(Instant::now());
        served
    }

    async fn custom(&self, storage: &dyn Storage, fresh: bool) -> Vec<Served> {
        {
            let cache = self.crds.lock().unwrap_or_else(PoisonError::into_inner);
            let recent = cache.fetched.is_some_and(|t| t.elapsed() < CRD_CACHE);
            if recent && !fresh {
                return cache.served.clone();
            }
        }
        self.refresh(storage).await
    }

    /// Forgets the cached CRDs (after a CRD is written through this server).
    pub fn invalidate(&self) {
        self.crds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fetched = None;
    }

    /// The resource at `group/version/plural`, reading CRDs again on a miss.
    pub async fn resolve(
        &self,
        storage: &dyn Storage,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Served> {
        if let Some(resource) = self
            .builtins
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
        {
            return Some(Served {
                resource: resource.clone(),
                crd: None,
            });
        }
        let matches = |s: &Served| {
            s.resource.group == group
                && s.resource.version == version
                && s.resource.plural == plural
        };
        if let Some(found) = self.custom(storage, false).await.into_iter().find(matches) {
            return Some(found);
        }
        self.custom(storage, true).await.into_iter().find(matches)
    }

    /// The resource of `group` (any served version) named by `plural`, or by its kind.
    pub async fn by_kind(&self, storage: &dyn Storage, group: &str, kind: &str) -> Option<Served> {
        self.all(storage)
            .await
            .into_iter()
            .find(|s| s.resource.group == group && s.resource.kind == kind)
    }

    /// Every served resource: built-in first, then custom.
    pub async fn all(&self, storage: &dyn Storage) -> Vec<Served> {
        let mut all: Vec<Served> = self
            .builtins
            .iter()
            .map(|r| Served {
                resource: r.clone(),
                crd: None,
            })
            .collect();
        all.extend(self.custom(storage, false).await);
        all
    }

    /// Every served resource, with the CRDs read from storage now (discovery: a client that
    /// just created a CRD through another replica must find it at once).
    pub async fn all_fresh(&self, storage: &dyn Storage) -> Vec<Served> {
        let mut all: Vec<Served> = self
            .builtins
            .iter()
            .map(|r| Served {
                resource: r.clone(),
                crd: None,
            })
            .collect();
        all.extend(self.custom(storage, true).await);
        all
    }

    /// Whether `group_version` is served.
    pub async fn serves_group_version(&self, storage: &dyn Storage, group_version: &str) -> bool {
        self.all(storage)
            .await
            .iter()
            .any(|s| s.resource.group_version() == group_version)
    }
}
