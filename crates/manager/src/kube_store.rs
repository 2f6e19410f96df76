//! [`KubeStore`]: the [`Store`] over custom resources on a management Kubernetes cluster,
//! through kube-rs.
//!
//! ```text
//!   controller ──Store──▶ KubeStore ──Api<DynamicObject>──▶ API server
//!        our types ◀─serde_json─▶ DynamicObject (ApiResource from [`api_resource`])
//! ```
//!
//! Objects travel as [`DynamicObject`]s described by [`api_resource`] and are converted to and
//! from our types with serde_json, so the wire shape is exactly what our types write (the CRDs
//! of `oi_api::crd` accept it). Requests:
//!
//! | call            | request                                                    |
//! |-----------------|------------------------------------------------------------|
//! | `get`           | `GET .../<plural>/<name>` (404: `Ok(None)`)                |
//! | `list`          | from the [`WatchCache`] once synced, else `GET .../<plural>` |
//! | `create`        | `POST .../<plural>`                                        |
//! | `update`        | `PUT .../<plural>/<name>` with `metadata.resourceVersion`  |
//! | `update_status` | `PUT .../<plural>/<name>/status`                           |
//! | `delete`        | `DELETE .../<plural>/<name>` (404: `Ok(())`)               |
//! | `publish`       | `POST /apis/events.k8s.io/v1/namespaces/<ns>/events`       |
//!
//! API errors map to [`StoreError`] by HTTP code and `reason`: 404 NotFound, 409 AlreadyExists
//! or Conflict, 400/422 Invalid, anything else (and transport failures) Unavailable; a failed
//! list is always Unavailable (a 404 there means the CRD is not installed). Messages
//! that could echo field values (the API server's validation messages, serde's decode errors)
//! have their quoted values redacted: a rejected Cluster must not put its CA key in a log.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta as KubeObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use std::collections::{BTreeMap, BTreeSet};

use oi_api::{DEFAULT_NAMESPACE, Kind, ObjectKey, Secret};
use serde_json::Value;

use crate::cache::WatchCache;
use crate::keys;
use crate::store::{EventType, ObjectEvent, Result, Store, StoreError, Stored};

/// The longest event `note` the API server accepts (events.k8s.io/v1 validation: 1 KiB).
pub const MAX_EVENT_NOTE_BYTES: usize = 1024;

/// The [`Store`] on a management cluster: the CRDs of `oi_api::crd` must be installed.
#[derive(Clone)]
pub struct KubeStore {
    client: kube::Client,
    reporter: String,
    instance: String,
    /// Where lists are read once synced (see [`crate::cache`]); without it, every list is a
    /// LIST.
    cache: Option<Arc<WatchCache>>,
}

impl fmt::Debug for KubeStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeStore")
            .field("reporter", &self.reporter)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl KubeStore {
    /// A store on `client`'s cluster. `reporter` is the events' `reportingController` (e.g.
    /// `oneinfra.ereslibre.es/oi-manager`), `instance` their `reportingInstance` (the pod
    /// name).
    pub fn new(
        client: kube::Client,
        reporter: impl Into<String>,
        instance: impl Into<String>,
    ) -> Self {
        KubeStore {
            client,
            reporter: reporter.into(),
            instance: instance.into(),
            cache: None,
        }
    }

    /// The same store, reading its lists from `cache` once it is synced, and writing its own
    /// writes through to it.
    #[must_use]
    pub fn with_cache(mut self, cache: Arc<WatchCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// A LIST of `K` from the API server, past the cache.
    async fn list_api<K: Stored>(&self, namespace: Option<&str>) -> Result<Vec<K>> {
        let list = self
            .api(K::KIND, namespace)
            .list(&ListParams::default())
            .await
            .map_err(|e| list_error(K::KIND, namespace, e))?;
        list.items.into_iter().map(from_dynamic).collect()
    }

    fn wrote<K: Stored>(&self, object: &K, created: bool) {
        if let Some(cache) = &self.cache {
            cache.wrote(object, created);
        }
    }

    /// The client, for watches and leader election on the same connection.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The Secrets of `namespace` named in `names`, as stored: from the cache where it holds
    /// them, else read. Those that do not exist are left out.
    async fn secrets_named(
        &self,
        namespace: &str,
        names: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, Secret>> {
        let mut out = BTreeMap::new();
        for name in names {
            let key = ObjectKey::new(namespace, name);
            let cached = self
                .cache
                .as_ref()
                .and_then(|c| c.with_object::<Secret, Secret>(&key, |s| Some(s.clone())));
            let secret = match cached {
                Some(secret) => Some(secret),
                None => self.get_plain::<Secret>(&key).await?,
            };
            if let Some(secret) = secret {
                out.insert(name.clone(), secret);
            }
        }
        Ok(out)
    }

    /// A GET of `key`, decoded as it comes (no key resolved).
    async fn get_raw(&self, kind: Kind, key: &ObjectKey) -> Result<Option<DynamicObject>> {
        match self.api_for(kind, key).get(&key.name).await {
            Ok(object) => Ok(Some(object)),
            Err(e) => match store_error(Op::Get, kind, key, e) {
                StoreError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn get_plain<K: Stored>(&self, key: &ObjectKey) -> Result<Option<K>> {
        self.get_raw(K::KIND, key)
            .await?
            .map(from_dynamic)
            .transpose()
    }

    /// `object` as `K`, every key it references read from its Secret (`written`: Secrets
    /// just written, which win over what the cache holds).
    async fn decode_keyed<K: Stored>(
        &self,
        object: DynamicObject,
        written: &BTreeMap<String, Secret>,
    ) -> Result<K> {
        let key = dynamic_key(K::KIND, &object);
        let value = dynamic_value::<K>(object)?;
        let missing: BTreeSet<String> = keys::referenced(&value)
            .into_iter()
            .filter(|n| !written.contains_key(n))
            .collect();
        let mut secrets = self.secrets_named(&key.namespace, &missing).await?;
        secrets.extend(written.iter().map(|(k, v)| (k.clone(), v.clone())));
        resolved(&key, value, &secrets)
    }

    /// Writes the Secrets `secrets` of `key`'s namespace (those [`keys::externalize`] made
    /// for the `kind` object at `key`) that do not hold what they must yet, and answers each
    /// as stored. The object as stored is read once, only when a Secret's key changes (see
    /// [`keys::to_write`]).
    async fn put_secrets(
        &self,
        kind: Kind,
        key: &ObjectKey,
        secrets: &[Value],
    ) -> Result<BTreeMap<String, Secret>> {
        let name_of = |s: &Value| {
            s.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let names: BTreeSet<String> = secrets.iter().map(name_of).collect();
        let held = self.secrets_named(&key.namespace, &names).await?;
        let mut stored_public: Option<BTreeMap<String, String>> = None;
        let mut out = BTreeMap::new();
        for wanted in secrets {
            let name = name_of(wanted);
            let held_secret = held.get(&name);
            let changes_key = held_secret.is_some_and(|h| keys::changes_key(wanted, h));
            if changes_key && stored_public.is_none() {
                let stored = self.get_raw(kind, key).await?;
                stored_public = Some(
                    stored
                        .and_then(|o| serde_json::to_value(o).ok())
                        .map(|v| keys::public_parts(&v))
                        .unwrap_or_default(),
                );
            }
            let public = stored_public
                .as_ref()
                .and_then(|p| p.get(&name))
                .map(String::as_str);
            let Some(body) = keys::to_write(wanted, held_secret, public) else {
                if let Some(h) = held_secret {
                    out.insert(name, h.clone());
                }
                continue;
            };
            let secret_key = ObjectKey::new(&key.namespace, &name);
            let body: DynamicObject = serde_json::from_value(body).map_err(|e| {
                StoreError::Unavailable(format!("cannot encode Secret {secret_key}: {e}"))
            })?;
            let api = self.api(Kind::Secret, Some(&key.namespace));
            let mut create = held_secret.is_none();
            let written = loop {
                let result = if create {
                    api.create(&PostParams::default(), &body).await
                } else {
                    api.replace(&name, &PostParams::default(), &body).await
                };
                match result.map_err(|e| {
                    store_error(
                        if create { Op::Create } else { Op::Update },
                        Kind::Secret,
                        &secret_key,
                        e,
                    )
                }) {
                    Ok(written) => break written,
                    // The cache did not hold it yet, or held it still.
                    Err(StoreError::AlreadyExists { .. }) if create => create = false,
                    Err(StoreError::NotFound { .. }) if !create => create = true,
                    Err(e) => return Err(e),
                }
            };
            let written: Secret = from_dynamic(written)?;
            self.wrote(&written, create);
            out.insert(name, written);
        }
        Ok(out)
    }

    /// Deletes the Secrets holding keys of `kind` `key` that are not in `keep`; `gone`: the
    /// object went, and every one of them goes (`keep` is then empty).
    async fn prune_secrets(
        &self,
        kind: Kind,
        key: &ObjectKey,
        keep: &BTreeSet<String>,
        gone: bool,
    ) -> Result<Vec<String>> {
        let of_object =
            |s: &Secret| keys::holds_keys_of(s, kind, &key.name).then(|| s.metadata.name.clone());
        let cached = self
            .cache
            .as_ref()
            .and_then(|c| c.list_map::<Secret, _>(Some(&key.namespace), of_object));
        let held: Vec<String> = match cached {
            Some(listed) => listed?.into_iter().flatten().collect(),
            // Without the cache, the Secrets of an object that stays are not listed on each
            // write: one a write left unreferenced stays until its object goes (or, on a
            // real cluster, with it through its owner reference).
            None if !gone => return Ok(Vec::new()),
            None => {
                let params =
                    ListParams::default().labels(&format!("{}={kind}", keys::KEYS_OF_KIND));
                let list = self
                    .api(Kind::Secret, Some(&key.namespace))
                    .list(&params)
                    .await
                    .map_err(|e| list_error(Kind::Secret, Some(&key.namespace), e))?;
                list.items
                    .into_iter()
                    .filter_map(|o| from_dynamic::<Secret>(o).ok())
                    .filter_map(|s| of_object(&s))
                    .collect()
            }
        };
        let mut deleted = Vec::new();
        for name in held.into_iter().filter(|n| !keep.contains(n)) {
            self.delete::<Secret>(&ObjectKey::new(&key.namespace, &name))
                .await?;
            deleted.push(name);
        }
        Ok(deleted)
    }

    /// Writes `object`, of a kind whose keys live in Secrets: the Secrets first, then the
    /// object holding references to them, then the Secrets it no longer references go (all
    /// of them when this write lets the object go: being deleted, no finalizer left).
    async fn write_keyed<K: Stored>(&self, op: Op, object: &K) -> Result<K> {
        let key = object.key();
        let value = serde_json::to_value(object).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot encode {} {key}: {}",
                K::KIND,
                redact_quoted(&e.to_string())
            ))
        })?;
        let (body, secrets) =
            keys::externalize(K::KIND, &value).map_err(|message| StoreError::Invalid {
                kind: K::KIND,
                key: key.clone(),
                message,
            })?;
        let written = self.put_secrets(K::KIND, &key, &secrets).await?;
        let mut keep = keys::referenced(&body);
        let body: DynamicObject = serde_json::from_value(body).map_err(|e| {
            StoreError::Unavailable(format!("cannot encode {} {key}: {e}", K::KIND))
        })?;
        let api = self.api_for(K::KIND, &key);
        let response = match op {
            Op::Create => api.create(&PostParams::default(), &body).await,
            Op::UpdateStatus => {
                api.replace_status(&key.name, &PostParams::default(), &body)
                    .await
            }
            _ => api.replace(&key.name, &PostParams::default(), &body).await,
        }
        .map_err(|e| store_error(op, K::KIND, &key, e))?;
        if let Ok(stored) = serde_json::to_value(&response) {
            keep.extend(keys::referenced(&stored));
        }
        let resolved: K = self.decode_keyed(response, &written).await?;
        // Each Secret that kept its previous pair through the write drops it now.
        if written
            .values()
            .any(|s| s.value(keys::PREVIOUS_KEY).is_some())
        {
            let value = serde_json::to_value(&resolved).unwrap_or_default();
            if let Ok((_, secrets)) = keys::externalize(K::KIND, &value) {
                self.put_secrets(K::KIND, &key, &secrets).await?;
            }
        }
        let metadata = resolved.metadata();
        let gone = metadata.deletion_timestamp.is_some() && metadata.finalizers.is_empty();
        if gone {
            keep.clear();
        }
        self.prune_secrets(K::KIND, &key, &keep, gone).await?;
        self.wrote(&resolved, op == Op::Create);
        Ok(resolved)
    }

    /// `object`, read with private keys inline (oneinfra's manifests), with them moved into
    /// Secrets: written with references (spec, then status), and an event says so.
    async fn move_inline_keys<K: Stored>(&self, object: DynamicObject) -> Result<K> {
        let typed: K = self.decode_keyed(object, &BTreeMap::new()).await?;
        let key = typed.key();
        let value = serde_json::to_value(&typed).unwrap_or_default();
        let in_status = value.get("status").is_some_and(keys::holds_inline_keys);
        let mut moved = self.write_keyed(Op::Update, &typed).await?;
        if in_status {
            moved = self.write_keyed(Op::UpdateStatus, &moved).await?;
        }
        let secrets = keys::externalize(K::KIND, &value)
            .map(|(_, s)| {
                s.iter()
                    .filter_map(|s| s.pointer("/metadata/name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let event = ObjectEvent {
            kind: K::KIND,
            key: key.clone(),
            uid: moved.metadata().uid.clone(),
            type_: EventType::Normal,
            reason: "PrivateKeysMoved".into(),
            action: "Reconcile".into(),
            note: format!(
                "moved {} inline private key(s) into Secrets of namespace {} ({}); the {} \
                 now references them",
                secrets.len(),
                key.namespace,
                secrets.join(", "),
                K::KIND
            ),
        };
        if let Err(e) = self.publish(&event).await {
            tracing::warn!(kind = %K::KIND, key = %key, error = %e, "cannot publish an event");
        }
        Ok(moved)
    }

    /// The API of `kind` for objects of `namespace` (ignored for cluster-scoped kinds; `None`:
    /// every namespace).
    fn api(&self, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = api_resource(kind);
        match namespace {
            Some(ns) if kind.namespaced() => {
                let ns = if ns.is_empty() { DEFAULT_NAMESPACE } else { ns };
                Api::namespaced_with(self.client.clone(), ns, &resource)
            }
            _ => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// The API for the object at `key`.
    fn api_for(&self, kind: Kind, key: &ObjectKey) -> Api<DynamicObject> {
        self.api(kind, Some(&key.namespace))
    }
}

/// The API resource of `kind`: group, version `v1alpha1`, kind and plural, as `oi_api::crd`
/// declares them.
pub fn api_resource(kind: Kind) -> ApiResource {
    let (group, version) = kind
        .api_version()
        .split_once('/')
        .unwrap_or(("", kind.api_version()));
    let gvk = GroupVersionKind::gvk(group, version, kind.as_str());
    ApiResource::from_gvk_with_plural(&gvk, plural(kind))
}

/// The plural resource name of `kind`.
pub fn plural(kind: Kind) -> &'static str {
    match kind {
        Kind::Hypervisor => "hypervisors",
        Kind::Cluster => "clusters",
        Kind::Component => "components",
        Kind::NodeJoinRequest => "nodejoinrequests",
        Kind::SipCluster => "sipclusters",
        Kind::BareMetalHost => "baremetalhosts",
        Kind::Secret => "secrets",
    }
}

/// One RBAC rule the manager needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    pub api_group: &'static str,
    /// A resource or `resource/subresource`.
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

const CLUSTER_GROUP: &str = "cluster.oneinfra.ereslibre.es";
const INFRA_GROUP: &str = "infra.oneinfra.ereslibre.es";

/// Every permission the manager needs, and no more (a test compares the RBAC manifest with
/// this list):
/// - the controllers watch Clusters, Components and Hypervisors (get, list, watch);
/// - the Cluster controller adds and removes its finalizer on Clusters (update), writes their
///   status, and creates, updates (finalizers) and deletes their Components;
/// - the Component controller writes Component status; the Hypervisor controller Hypervisor
///   status (reachability, port allocations);
/// - Components carry an ownerReference with `blockOwnerDeletion` to their Cluster, which the
///   OwnerReferencesPermissionEnforcement admission plugin only allows with update on
///   `clusters/finalizers`;
/// - events are only created ([`KubeStore`] never patches a series);
/// - leader election reads, creates and updates its Lease;
/// - the SIPCluster controller watches SIPClusters (adding and removing its finalizer, writing
///   their status) and BareMetalHosts (updating their labels), and reads the Secrets the
///   hosts reference, by name;
/// - Clusters' private keys live in Secrets of their namespace ([`crate::keys`]): the manager
///   watches those (by their label), writes them and deletes them. These rules are their own
///   ClusterRole (`oi-manager-secrets`), bound where the manager manages objects: in every
///   namespace by the default install (a ClusterRoleBinding), in its one namespace by a
///   RoleBinding when it runs with `--namespace`.
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        api_group: CLUSTER_GROUP,
        resource: "clusters",
        verbs: &["get", "list", "watch", "update"],
    },
    Permission {
        api_group: CLUSTER_GROUP,
        resource: "clusters/status",
        verbs: &["update"],
    },
    Permission {
        api_group: CLUSTER_GROUP,
        resource: "clusters/finalizers",
        verbs: &["update"],
    },
    Permission {
        api_group: CLUSTER_GROUP,
        resource: "components",
        verbs: &["get", "list", "watch", "create", "update", "delete"],
    },
    Permission {
        api_group: CLUSTER_GROUP,
        resource: "components/status",
        verbs: &["update"],
    },
    Permission {
        api_group: INFRA_GROUP,
        resource: "hypervisors",
        verbs: &["get", "list", "watch", "update"],
    },
    Permission {
        api_group: INFRA_GROUP,
        resource: "hypervisors/status",
        verbs: &["update"],
    },
    Permission {
        api_group: "events.k8s.io",
        resource: "events",
        verbs: &["create"],
    },
    Permission {
        api_group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "update"],
    },
    Permission {
        api_group: "airship.airshipit.org",
        resource: "sipclusters",
        verbs: &["get", "list", "watch", "update"],
    },
    Permission {
        api_group: "airship.airshipit.org",
        resource: "sipclusters/status",
        verbs: &["update"],
    },
    Permission {
        api_group: "metal3.io",
        resource: "baremetalhosts",
        verbs: &["get", "list", "watch", "update"],
    },
    Permission {
        api_group: "",
        resource: "secrets",
        verbs: &["get", "list", "watch", "create", "update", "delete"],
    },
];

/// What a store call was doing, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    Create,
    Update,
    UpdateStatus,
    Delete,
    Publish,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Create => "create",
            Op::Update => "update",
            Op::UpdateStatus => "update status of",
            Op::Delete => "delete",
            Op::Publish => "publish an event about",
        }
    }
}

/// Maps a kube error of `op` on `kind` `key` to a [`StoreError`].
fn store_error(op: Op, kind: Kind, key: &ObjectKey, error: kube::Error) -> StoreError {
    match error {
        kube::Error::Api(status) => {
            let code = status.code;
            let reason = status.reason.as_str();
            match (code, reason) {
                (404, _) | (_, "NotFound") => StoreError::NotFound {
                    kind,
                    key: key.clone(),
                },
                (409, "AlreadyExists") | (_, "AlreadyExists") => StoreError::AlreadyExists {
                    kind,
                    key: key.clone(),
                },
                (409, _) | (_, "Conflict") => StoreError::Conflict {
                    kind,
                    key: key.clone(),
                    message: status.message.clone(),
                },
                (400 | 422, _) | (_, "Invalid" | "BadRequest") => StoreError::Invalid {
                    kind,
                    key: key.clone(),
                    message: redact_quoted(&status.message),
                },
                _ => StoreError::Unavailable(format!(
                    "{} {kind} {key}: the API server answered {code} {reason}: {}",
                    op.as_str(),
                    redact_quoted(&status.message)
                )),
            }
        }
        other => StoreError::Unavailable(format!(
            "{} {kind} {key}: {}",
            op.as_str(),
            redact_quoted(&other.to_string())
        )),
    }
}

/// A failed list: always [`StoreError::Unavailable`] (there is no object to be missing or in
/// conflict); a 404 means the kind's CRD is not installed.
fn list_error(kind: Kind, namespace: Option<&str>, error: kube::Error) -> StoreError {
    let what = match namespace {
        _ if !kind.namespaced() => format!("list {kind}s"),
        Some(ns) => format!("list {kind}s in namespace {ns}"),
        None => format!("list {kind}s in every namespace"),
    };
    match error {
        kube::Error::Api(status) if status.code == 404 => StoreError::Unavailable(format!(
            "{what}: the API server does not serve {} (is its CRD installed?)",
            api_resource(kind).plural
        )),
        kube::Error::Api(status) => StoreError::Unavailable(format!(
            "{what}: the API server answered {} {}: {}",
            status.code,
            status.reason,
            redact_quoted(&status.message)
        )),
        other => StoreError::Unavailable(format!("{what}: {}", redact_quoted(&other.to_string()))),
    }
}

/// `message` with the content of every double-quoted string replaced by `<redacted>`:
/// serde (`invalid type: string "..."`) and the API server (`Invalid value: "..."`) quote the
/// values they reject, and those may be key material. Field names (serde quotes them with
/// backticks, the API server writes paths bare) stay.
pub fn redact_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' {
            continue;
        }
        // Skip to the closing quote, honouring backslash escapes.
        let mut closed = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    closed = true;
                    break;
                }
                _ => {}
            }
        }
        out.push_str("<redacted>");
        if closed {
            out.push('"');
        }
    }
    out
}

/// Our object as the [`DynamicObject`] kube sends.
fn to_dynamic<K: Stored>(object: &K) -> Result<DynamicObject> {
    let encode = |e: serde_json::Error| {
        StoreError::Unavailable(format!(
            "cannot encode {} {}: {}",
            K::KIND,
            object.key(),
            redact_quoted(&e.to_string())
        ))
    };
    let value = serde_json::to_value(object).map_err(encode)?;
    serde_json::from_value(value).map_err(encode)
}

/// A [`DynamicObject`] from the API server as our type. List items may come without
/// `apiVersion` and `kind`; they are filled in from `kind`.
pub(crate) fn from_dynamic<K: Stored>(object: DynamicObject) -> Result<K> {
    let key = dynamic_key(K::KIND, &object);
    let value = dynamic_value::<K>(object)?;
    serde_json::from_value(value).map_err(|e| undecodable(K::KIND, &key, &e))
}

/// `value`, the object `key` of kind `K` from the API server, as `K` with every key it
/// references put back from `secrets` (the Secrets of its namespace, by name).
pub(crate) fn resolved<K: Stored>(
    key: &ObjectKey,
    mut value: Value,
    secrets: &BTreeMap<String, Secret>,
) -> Result<K> {
    keys::resolve(&mut value, secrets).map_err(|e| {
        StoreError::Unavailable(format!(
            "{} {key}: a private key cannot be read: {e}",
            K::KIND
        ))
    })?;
    serde_json::from_value(value).map_err(|e| undecodable(K::KIND, key, &e))
}

/// An object from the API server that does not decode, without the values it held.
pub(crate) fn undecodable(kind: Kind, key: &ObjectKey, e: &serde_json::Error) -> StoreError {
    StoreError::Unavailable(format!(
        "{kind} {key} from the API server does not decode: {}",
        redact_quoted(&e.to_string())
    ))
}

/// A [`DynamicObject`] of kind `K` as JSON, with `apiVersion` and `kind` filled in where a
/// list left them out.
pub(crate) fn dynamic_value<K: Stored>(object: DynamicObject) -> Result<Value> {
    let key = dynamic_key(K::KIND, &object);
    let mut value = serde_json::to_value(&object).map_err(|e| undecodable(K::KIND, &key, &e))?;
    if let Value::Object(map) = &mut value {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(K::KIND.api_version().to_string()));
        map.entry("kind")
            .or_insert_with(|| Value::String(K::KIND.as_str().to_string()));
    }
    Ok(value)
}

pub(crate) fn dynamic_key(kind: Kind, object: &DynamicObject) -> ObjectKey {
    let name = object.metadata.name.clone().unwrap_or_default();
    if kind.namespaced() {
        let ns = object
            .metadata
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        ObjectKey::new(ns, name)
    } else {
        ObjectKey::cluster_scoped(name)
    }
}

/// `note` cut to at most [`MAX_EVENT_NOTE_BYTES`] bytes, on a character boundary.
fn truncate_note(note: &str) -> String {
    if note.len() <= MAX_EVENT_NOTE_BYTES {
        return note.to_string();
    }
    let mut end = MAX_EVENT_NOTE_BYTES;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note[..end].to_string()
}

/// The events.k8s.io/v1 Event [`KubeStore::publish`] creates for `event` at `now`.
pub fn kube_event(
    event: &ObjectEvent,
    reporter: &str,
    instance: &str,
    now: k8s_openapi::jiff::Timestamp,
) -> Event {
    let namespace = if event.kind.namespaced() && !event.key.namespace.is_empty() {
        event.key.namespace.clone()
    } else {
        DEFAULT_NAMESPACE.to_string()
    };
    Event {
        metadata: KubeObjectMeta {
            generate_name: Some(format!("{}.", event.key.name)),
            namespace: Some(namespace.clone()),
            ..KubeObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(reporter.to_string()),
        reporting_instance: Some(instance.to_string()),
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: Some(truncate_note(&event.note)),
        type_: Some(event.type_.as_str().to_string()),
        regarding: Some(ObjectReference {
            api_version: Some(event.kind.api_version().to_string()),
            kind: Some(event.kind.as_str().to_string()),
            name: Some(event.key.name.clone()),
            namespace: event.kind.namespaced().then_some(namespace),
            uid: event.uid.clone(),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

impl Store for KubeStore {
    async fn get<K: Stored>(&self, key: &ObjectKey) -> Result<Option<K>> {
        let Some(object) = self.get_raw(K::KIND, key).await? else {
            return Ok(None);
        };
        if !keys::keyed(K::KIND) {
            return from_dynamic(object).map(Some);
        }
        let inline = serde_json::to_value(&object).is_ok_and(|v| keys::holds_inline_keys(&v));
        if inline {
            return self.move_inline_keys(object).await.map(Some);
        }
        self.decode_keyed(object, &BTreeMap::new()).await.map(Some)
    }

    async fn list<K: Stored>(&self, namespace: Option<&str>) -> Result<Vec<K>> {
        match self
            .cache
            .as_ref()
            .and_then(|c| c.list_map::<K, K>(namespace, K::clone))
        {
            Some(listed) => listed,
            None => self.list_api(namespace).await,
        }
    }

    async fn list_map<K: Stored, T: Send>(
        &self,
        namespace: Option<&str>,
        f: impl Fn(&K) -> T + Send,
    ) -> Result<Vec<T>> {
        if let Some(listed) = self
            .cache
            .as_ref()
            .and_then(|c| c.list_map::<K, T>(namespace, &f))
        {
            return listed;
        }
        Ok(self.list_api::<K>(namespace).await?.iter().map(f).collect())
    }

    fn cached<K: Stored, T>(&self, key: &ObjectKey, f: impl FnOnce(&K) -> T) -> Option<T> {
        let key = match K::KIND.namespaced() {
            true if key.namespace.is_empty() => ObjectKey::new(DEFAULT_NAMESPACE, &key.name),
            true => key.clone(),
            false => ObjectKey::cluster_scoped(&key.name),
        };
        self.cache
            .as_ref()?
            .with_object::<K, T>(&key, |object| Some(f(object)))
    }

    async fn create<K: Stored>(&self, object: &K) -> Result<K> {
        let key = object.key();
        let mut object = object.clone();
        // The API server refuses a create that carries a resourceVersion.
        object.metadata_mut().resource_version = None;
        if keys::keyed(K::KIND) {
            return self.write_keyed(Op::Create, &object).await;
        }
        let body = to_dynamic(&object)?;
        let created = self
            .api_for(K::KIND, &key)
            .create(&PostParams::default(), &body)
            .await
            .map_err(|e| store_error(Op::Create, K::KIND, &key, e))?;
        let created: K = from_dynamic(created)?;
        self.wrote(&created, true);
        Ok(created)
    }

    async fn update<K: Stored>(&self, object: &K) -> Result<K> {
        if keys::keyed(K::KIND) {
            return self.write_keyed(Op::Update, object).await;
        }
        let key = object.key();
        let body = to_dynamic(object)?;
        let updated = self
            .api_for(K::KIND, &key)
            .replace(&key.name, &PostParams::default(), &body)
            .await
            .map_err(|e| store_error(Op::Update, K::KIND, &key, e))?;
        let updated: K = from_dynamic(updated)?;
        self.wrote(&updated, false);
        Ok(updated)
    }

    async fn update_status<K: Stored>(&self, object: &K) -> Result<K> {
        if keys::keyed(K::KIND) {
            return self.write_keyed(Op::UpdateStatus, object).await;
        }
        let key = object.key();
        let body = to_dynamic(object)?;
        let updated = self
            .api_for(K::KIND, &key)
            .replace_status(&key.name, &PostParams::default(), &body)
            .await
            .map_err(|e| store_error(Op::UpdateStatus, K::KIND, &key, e))?;
        let updated: K = from_dynamic(updated)?;
        self.wrote(&updated, false);
        Ok(updated)
    }

    async fn delete<K: Stored>(&self, key: &ObjectKey) -> Result<()> {
        match self
            .api_for(K::KIND, key)
            .delete(&key.name, &DeleteParams::default())
            .await
        {
            Ok(deleted) => {
                if let Some(cache) = &self.cache {
                    match deleted.left().map(from_dynamic::<K>) {
                        // Finalizers hold it: marked for deletion.
                        Some(Ok(marked))
                            if marked.metadata().deletion_timestamp.is_some()
                                && !marked.metadata().finalizers.is_empty() =>
                        {
                            cache.wrote(&marked, false);
                        }
                        _ => cache.deleted(K::KIND, key),
                    }
                }
                Ok(())
            }
            Err(e) => match store_error(Op::Delete, K::KIND, key, e) {
                StoreError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn publish(&self, event: &ObjectEvent) -> Result<()> {
        let body = kube_event(
            event,
            &self.reporter,
            &self.instance,
            k8s_openapi::jiff::Timestamp::now(),
        );
        let namespace = body
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &body)
            .await
            .map_err(|e| store_error(Op::Publish, event.kind, &event.key, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventType;

    #[test]
    fn api_resources_match_the_crds() {
        for kind in Kind::ONEINFRA {
            let crd = oi_api::crd::custom_resource_definition(kind).unwrap();
            let resource = api_resource(kind);
            assert_eq!(resource.group, crd["spec"]["group"], "{kind}");
            assert_eq!(resource.plural, crd["spec"]["names"]["plural"], "{kind}");
            assert_eq!(resource.kind, crd["spec"]["names"]["kind"], "{kind}");
            assert_eq!(
                resource.version, crd["spec"]["versions"][0]["name"],
                "{kind}"
            );
            assert_eq!(resource.version, "v1alpha1");
            assert_eq!(resource.api_version, kind.api_version());
        }
    }

    #[test]
    fn permissions_cover_status_subresources_of_written_kinds() {
        let find = |group: &str, resource: &str| {
            PERMISSIONS
                .iter()
                .find(|p| p.api_group == group && p.resource == resource)
                .map(|p| p.verbs.to_vec())
        };
        assert_eq!(find(CLUSTER_GROUP, "clusters/status"), Some(vec!["update"]));
        assert_eq!(
            find("coordination.k8s.io", "leases"),
            Some(vec!["get", "create", "update"])
        );
        // No rule twice.
        for (i, p) in PERMISSIONS.iter().enumerate() {
            assert!(
                PERMISSIONS[i + 1..]
                    .iter()
                    .all(|q| (q.api_group, q.resource) != (p.api_group, p.resource)),
                "{p:?} twice"
            );
        }
    }

    #[test]
    fn redaction_hides_quoted_values_and_keeps_the_rest() {
        assert_eq!(
            redact_quoted(r#"invalid type: string "-----BEGIN \"EC\" KEY-----", expected u16"#),
            r#"invalid type: string "<redacted>", expected u16"#
        );
        assert_eq!(
            redact_quoted("unknown field `foo`, expected `bar`"),
            "unknown field `foo`, expected `bar`"
        );
        assert_eq!(redact_quoted(r#"open "abc"#), r#"open "<redacted>"#);
    }

    #[test]
    fn store_errors_by_code_and_reason() {
        let key = ObjectKey::new("ns", "c");
        let api = |code: u16, reason: &str, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(
            store_error(Op::Get, Kind::Cluster, &key, api(404, "NotFound", "x")),
            StoreError::NotFound {
                kind: Kind::Cluster,
                key: key.clone()
            }
        );
        assert_eq!(
            store_error(
                Op::Create,
                Kind::Cluster,
                &key,
                api(409, "AlreadyExists", "x")
            ),
            StoreError::AlreadyExists {
                kind: Kind::Cluster,
                key: key.clone()
            }
        );
        assert_eq!(
            store_error(
                Op::Update,
                Kind::Cluster,
                &key,
                api(409, "Conflict", "modified")
            ),
            StoreError::Conflict {
                kind: Kind::Cluster,
                key: key.clone(),
                message: "modified".to_string()
            }
        );
        assert_eq!(
            store_error(
                Op::Update,
                Kind::Cluster,
                &key,
                api(422, "Invalid", r#"spec.x: Invalid value: "secret": bad"#)
            ),
            StoreError::Invalid {
                kind: Kind::Cluster,
                key: key.clone(),
                message: r#"spec.x: Invalid value: "<redacted>": bad"#.to_string()
            }
        );
        assert_eq!(
            store_error(
                Op::Delete,
                Kind::Cluster,
                &key,
                api(500, "InternalError", "boom")
            ),
            StoreError::Unavailable(
                "delete Cluster ns/c: the API server answered 500 InternalError: boom".to_string()
            )
        );
    }

    #[test]
    fn list_errors_say_what_was_listed() {
        let api = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure("m", reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(
            list_error(Kind::Component, Some("ns"), api(404, "NotFound")),
            StoreError::Unavailable(
                "list Components in namespace ns: the API server does not serve components (is its CRD installed?)"
                    .into()
            )
        );
        assert_eq!(
            list_error(Kind::Cluster, None, api(403, "Forbidden")),
            StoreError::Unavailable(
                "list Clusters in every namespace: the API server answered 403 Forbidden: m".into()
            )
        );
        assert_eq!(
            list_error(Kind::Hypervisor, Some("ns"), api(500, "InternalError")),
            StoreError::Unavailable(
                "list Hypervisors: the API server answered 500 InternalError: m".into()
            )
        );
    }

    #[test]
    fn decode_errors_name_kind_and_key_and_hide_values() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.oneinfra.ereslibre.es/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"certificateAuthorities": {"apiServerClient": "PRIVATE KEY"}},
        }))
        .unwrap();
        let err = from_dynamic::<oi_api::Cluster>(object).unwrap_err();
        let StoreError::Unavailable(message) = &err else {
            panic!("{err:?}");
        };
        assert!(
            message.starts_with("Cluster ns/c from the API server does not decode: "),
            "{message}"
        );
        assert!(!message.contains("PRIVATE KEY"), "{message}");
    }

    #[test]
    fn list_items_without_type_fields_decode() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "h1", "resourceVersion": "7"},
            "spec": {
                "localCRIEndpoint": {"criEndpointPath": "/run/containerd.sock"},
                "public": false,
                "portRange": {"low": 30000, "high": 30100},
            },
        }))
        .unwrap();
        let h: oi_api::Hypervisor = from_dynamic(object).unwrap();
        assert_eq!(h.kind, "Hypervisor");
        assert_eq!(h.api_version, "infra.oneinfra.ereslibre.es/v1alpha1");
        assert_eq!(h.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn events_carry_every_field_and_a_short_note() {
        let event = ObjectEvent {
            kind: Kind::Hypervisor,
            key: ObjectKey::cluster_scoped("h1"),
            uid: Some("u1".to_string()),
            type_: EventType::Warning,
            reason: "Unreachable".to_string(),
            action: "Probe".to_string(),
            note: "é".repeat(600),
        };
        let now: k8s_openapi::jiff::Timestamp = "2026-01-02T03:04:05.123456Z".parse().unwrap();
        let ev = kube_event(&event, "rep", "pod-1", now);
        let value = serde_json::to_value(&ev).unwrap();
        let note = ev.note.clone().unwrap();
        assert_eq!(note.len(), 1024);
        assert_eq!(
            value,
            serde_json::json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"generateName": "h1.", "namespace": "default"},
                "eventTime": "2026-01-02T03:04:05.123456Z",
                "reportingController": "rep",
                "reportingInstance": "pod-1",
                "action": "Probe",
                "reason": "Unreachable",
                "note": note,
                "type": "Warning",
                "regarding": {
                    "apiVersion": "infra.oneinfra.ereslibre.es/v1alpha1",
                    "kind": "Hypervisor",
                    "name": "h1",
                    "uid": "u1",
                },
            })
        );
    }
}
