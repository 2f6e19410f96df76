//! The verbs on resources: get, list, create, update, patch, delete, deletecollection, and the
//! subresources (status, finalize, approval, token, proxy), with kube-apiserver's semantics:
//! resource versions and conflicts (a write without a resourceVersion is retried on a
//! conflict, one with it is refused), `generateName`, finalizers, the status subresource
//! owning `status`, `metadata.generation`, field ownership, dry runs and Table output.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use http::StatusCode;
use serde_json::{Value, json};

use super::apply::{self, Scope};
use super::authz::Attributes;
use super::kinds;
use super::meta;
use super::patch;
use super::registry::Served;
use super::request::ResourcePath;
use super::resources::Resource;
use super::schema;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult, Cause};
use super::storage::{ListOptions, StorageError, Stored};
use super::table::{self, Include};
use super::{Api, Call, Reply, events};

/// How many times a write without a resourceVersion is retried on a storage conflict.
const RETRIES: usize = 16;

/// The page size used to read storage while filtering a list.
const SCAN_PAGE: usize = 500;

/// What a request addresses, resolved.
pub(crate) struct Target<'a> {
    pub served: Served,
    pub path: &'a ResourcePath,
    pub namespace: Option<&'a str>,
}

impl Target<'_> {
    pub(crate) fn resource(&self) -> &Resource {
        &self.served.resource
    }

    pub(crate) fn name(&self) -> &str {
        self.path.name.as_deref().unwrap_or_default()
    }
}

/// Why an update attempt must start over.
enum Attempt {
    Done(Reply),
    /// The object changed underneath: read it again (or refuse, if the client named a
    /// resourceVersion).
    Retry,
}

fn content_type(call: &Call<'_>) -> String {
    call.header("content-type")
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The request body as JSON (JSON, YAML, or for some kinds Kubernetes' protobuf).
fn body_value(call: &Call<'_>) -> ApiResult<Value> {
    let kind = content_type(call);
    let text = call.body.as_ref();
    if text.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    if super::protobuf::is_protobuf(&kind) {
        return super::protobuf::to_json(text).map_err(|e| match e {
            super::protobuf::ProtobufError::Unsupported { api_version, kind } => ApiError::unsupported_media_type(
                &format!("{} for {api_version} {kind} (the stand-in reads protobuf only for the kinds kubectl's generators send)", super::protobuf::CONTENT_TYPE),
                &["application/json", "application/yaml"],
            ),
            super::protobuf::ProtobufError::Malformed(why) => {
                ApiError::bad_request(format!("the body of the request could not be decoded as protobuf: {why}"))
            }
        });
    }
    let parsed: Result<Value, String> = if kind.contains("yaml") {
        serde_yaml_ng::from_slice(text).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice(text).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

fn bad_field(message: String) -> ApiError {
    ApiError::bad_request(message)
}

/// The field manager of a write: `fieldManager`, else the user agent's product.
fn manager(call: &Call<'_>) -> String {
    if let Some(m) = call.info.param("fieldManager").filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    call.header("user-agent")
        .map(|ua| ua.split('/').next().unwrap_or(ua).to_string())
        .filter(|m| !m.is_empty())
        .map(|m| m.chars().take(128).collect())
        .unwrap_or_else(|| "unknown".to_string())
}

fn dry_run(call: &Call<'_>) -> bool {
    call.info.query.get("dryRun").is_some_and(|v| v == "All")
}

/// `Table` output asked for by `Accept`.
fn table_include(call: &Call<'_>) -> Option<Include> {
    let accept = call.header("accept")?;
    let first = accept.split(',').next()?;
    (first.contains("as=Table") && first.contains("g=meta.k8s.io"))
        .then(|| Include::parse(call.info.param("includeObject")))
}

/// The continue token: the revision of the first page and the key to start from.
fn encode_continue(revision: u64, start: &str) -> String {
    B64URL.encode(json!({"v": "meta.k8s.io/v1", "rv": revision, "start": start}).to_string())
}

fn decode_continue(token: &str) -> ApiResult<(u64, String)> {
    let bad = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = B64URL
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad("not JSON"))?;
    if value["v"] != "meta.k8s.io/v1" {
        return Err(bad("server does not recognize this encoded key"));
    }
    let revision = value["rv"]
        .as_u64()
        .filter(|r| *r > 0)
        .ok_or_else(|| bad("incorrect encoded start resourceVersion"))?;
    let start = value["start"]
        .as_str()
        .ok_or_else(|| bad("no start key"))?
        .to_string();
    if start.contains("..") || start.starts_with('/') {
        return Err(bad("invalid start key"));
    }
    Ok((revision, start))
}

fn parse_rv(text: &str) -> ApiResult<u64> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {text:?}")))
}

impl Api {
    /// The resource whose storage holds `served`'s objects (events.k8s.io Events are core
    /// Events in storage).
    pub(crate) fn stored_as(&self, served: &Served) -> Resource {
        if served.resource.group == "events.k8s.io"
            && let Some(core) = self.registry.builtin("", "events")
        {
            return core;
        }
        served.resource.clone()
    }

    pub(crate) fn key(&self, served: &Served, namespace: Option<&str>, name: &str) -> String {
        self.stored_as(served)
            .key(&self.settings.root, namespace, name)
    }

    pub(crate) fn prefix(&self, served: &Served, namespace: Option<&str>) -> String {
        let prefix = self.stored_as(served).prefix(&self.settings.root);
        match namespace.filter(|_| served.resource.namespaced) {
            Some(ns) => format!("{prefix}{ns}/"),
            None => prefix,
        }
    }

    /// A stored object as `served` shows it, at `revision`.
    pub(crate) fn present(&self, served: &Served, mut value: Value, revision: u64) -> Value {
        if served.resource.group == "events.k8s.io" {
            value = events::to_events_group(&value);
        } else if value.is_object() {
            value["apiVersion"] = json!(served.resource.group_version());
            value["kind"] = json!(served.resource.kind);
        }
        meta::set_resource_version(&mut value, revision);
        value
    }

    /// An object as storage keeps it.
    fn to_storage(&self, served: &Served, value: &Value) -> Value {
        let mut stored = if served.resource.group == "events.k8s.io" {
            events::to_core(value)
        } else {
            value.clone()
        };
        if let Some(m) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("selfLink");
        }
        stored
    }

    fn storage_error(&self, served: &Served, name: &str, error: StorageError) -> ApiError {
        ApiError::from_storage(error, &served.resource.plural, &served.resource.group, name)
    }

    /// Reads one object, as served.
    pub(crate) async fn read(
        &self,
        served: &Served,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<(Value, u64)> {
        let stored = self
            .storage
            .get(&self.key(served, namespace, name))
            .await
            .map_err(|e| self.storage_error(served, name, e))?
            .ok_or_else(|| {
                ApiError::not_found(&served.resource.plural, &served.resource.group, name)
            })?;
        Ok((
            self.present(served, stored.value, stored.revision),
            stored.revision,
        ))
    }

    async fn read_stored(
        &self,
        served: &Served,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Option<Stored>> {
        self.storage
            .get(&self.key(served, namespace, name))
            .await
            .map_err(|e| self.storage_error(served, name, e))
    }

    /// Routes a resource request.
    pub(crate) async fn resource(self: &Arc<Self>, call: &Call<'_>) -> ApiResult<Reply> {
        let Some(path) = call.info.resource.as_ref() else {
            return Err(ApiError::no_route());
        };
        let served = self
            .registry
            .resolve(&*self.storage, &path.group, &path.version, &path.resource)
            .await
            .ok_or_else(ApiError::no_route)?;
        let verb = call.info.verb.as_str();
        if served.resource.namespaced
            && path.namespace.is_none()
            && !matches!(verb, "list" | "watch")
            && !served.resource.review
        {
            return Err(ApiError::no_route());
        }
        if !served.resource.namespaced && path.namespace.is_some() {
            return Err(ApiError::no_route());
        }
        let target = Target {
            namespace: path
                .namespace
                .as_deref()
                .filter(|_| served.resource.namespaced),
            served,
            path,
        };
        if target.resource().review {
            if verb != "create" || path.name.is_some() {
                return Err(ApiError::method_not_supported(
                    &target.resource().plural,
                    &target.resource().group,
                    verb,
                ));
            }
            return self.review(call, &target).await;
        }
        match path.subresource.as_deref() {
            None => match verb {
                "get" => {
                    let (object, _) = self
                        .read(&target.served, target.namespace, target.name())
                        .await?;
                    self.single(call, &target.served, object)
                }
                "list" => self.list(call, &target).await,
                "watch" => self.watch(call, &target).await,
                "create" => self.create(call, &target).await,
                "update" => self.update(call, &target, UpdateKind::Main).await,
                "patch" => self.patch(call, &target, UpdateKind::Main).await,
                "delete" => self.delete(call, &target).await,
                "deletecollection" => self.delete_collection(call, &target).await,
                other => Err(ApiError::method_not_supported(
                    &target.resource().plural,
                    &target.resource().group,
                    other,
                )),
            },
            Some(sub) => {
                let r = target.resource();
                let kind = match (sub, r.group.as_str(), r.plural.as_str()) {
                    ("status", _, _) if r.status => UpdateKind::Status,
                    ("finalize", "", "namespaces") => UpdateKind::Finalize,
                    ("approval", "certificates.k8s.io", _) => UpdateKind::Approval,
                    ("token", "", "serviceaccounts") => {
                        return if verb == "create" {
                            self.token_request(call, &target).await
                        } else {
                            Err(ApiError::method_not_supported(
                                "serviceaccounts/token",
                                "",
                                verb,
                            ))
                        };
                    }
                    ("proxy", "", "nodes") => return self.node_proxy(call, &target).await,
                    _ => return Err(ApiError::no_route()),
                };
                match verb {
                    "get" => {
                        let (object, _) = self
                            .read(&target.served, target.namespace, target.name())
                            .await?;
                        self.single(call, &target.served, object)
                    }
                    "update" => self.update(call, &target, kind).await,
                    "patch" if kind != UpdateKind::Finalize => {
                        self.patch(call, &target, kind).await
                    }
                    other => Err(ApiError::method_not_supported(
                        &format!("{}/{sub}", r.plural),
                        &r.group,
                        other,
                    )),
                }
            }
        }
    }

    /// One object, as JSON or as a one-row Table.
    fn single(&self, call: &Call<'_>, served: &Served, object: Value) -> ApiResult<Reply> {
        match table_include(call) {
            Some(include) => {
                let rv = json!({"resourceVersion": meta::resource_version(&object)});
                Ok(Reply::Object(
                    StatusCode::OK,
                    table::table(served, &[object], rv, include),
                ))
            }
            None => Ok(Reply::Object(StatusCode::OK, object)),
        }
    }

    // ------------------------------------------------------------------ list

    fn selectors(
        &self,
        call: &Call<'_>,
        served: &Served,
    ) -> ApiResult<(LabelSelector, FieldSelector)> {
        let labels = LabelSelector::parse(call.info.param("labelSelector").unwrap_or_default())
            .map_err(|e| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: {}",
                    e.0.trim_start_matches("unable to parse requirement: ")
                ))
            })?;
        let fields = FieldSelector::parse(call.info.param("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(e.0))?;
        for field in fields.fields() {
            if !kinds::field_supported(served, field) {
                return Err(bad_field(format!("field label not supported: {field}")));
            }
        }
        Ok((labels, fields))
    }

    pub(crate) fn selected(
        &self,
        served: &Served,
        object: &Value,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> bool {
        labels.matches(meta::labels(object))
            && (fields.is_empty() || fields.matches(&kinds::selectable_fields(served, object)))
    }

    async fn list(&self, call: &Call<'_>, target: &Target<'_>) -> ApiResult<Reply> {
        let served = &target.served;
        let (labels, fields) = self.selectors(call, served)?;
        let limit = match call.info.param("limit") {
            Some(l) if !l.is_empty() => l
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
            _ => 0,
        };
        let prefix = self.prefix(served, target.namespace);
        let rv_param = call.info.param("resourceVersion").unwrap_or_default();
        let (mut revision, mut start) = match call.info.param("continue").filter(|c| !c.is_empty())
        {
            Some(token) => {
                if !rv_param.is_empty() && rv_param != "0" {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, start) = decode_continue(token)?;
                (Some(rv), Some(format!("{prefix}{start}")))
            }
            None => {
                let exact = call.info.param("resourceVersionMatch") == Some("Exact");
                let rv = if exact {
                    Some(parse_rv(rv_param)?)
                } else {
                    None
                };
                (rv, None)
            }
        };
        let mut items = Vec::new();
        let mut more_after: Option<String> = None;
        let mut remaining = 0usize;
        loop {
            let options = ListOptions {
                start: start.clone(),
                limit: Some(if limit > 0 {
                    (limit - items.len()).max(1).max(SCAN_PAGE.min(limit))
                } else {
                    SCAN_PAGE
                }),
                revision,
            };
            let page = self.storage.list(&prefix, &options).await.map_err(|e| match e {
                StorageError::Compacted { .. } if call.info.param("continue").is_some() => ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ),
                StorageError::Compacted { requested, .. } => ApiError::gone(format!("too old resource version: {requested}")),
                other => self.storage_error(served, "", other),
            })?;
            revision = Some(page.revision);
            let scanned = page.items.len();
            let last_key = page.items.last().map(|(k, _)| k.clone());
            for (index, (key, stored)) in page.items.into_iter().enumerate() {
                let object = self.present(served, stored.value, stored.revision);
                if !self.selected(served, &object, &labels, &fields) {
                    continue;
                }
                items.push(object);
                if limit > 0 && items.len() >= limit {
                    let left_in_page = scanned - index - 1;
                    if left_in_page > 0 || page.remaining > 0 {
                        more_after = Some(key);
                        remaining = left_in_page + page.remaining;
                    }
                    break;
                }
            }
            if (limit > 0 && items.len() >= limit) || page.remaining == 0 {
                break;
            }
            start = last_key.map(|k| format!("{k}\u{0}"));
        }
        let revision = revision.unwrap_or_default();
        let mut list_meta = json!({"resourceVersion": revision.to_string()});
        if let Some(key) = more_after {
            let relative = key.strip_prefix(&prefix).unwrap_or(&key);
            list_meta["continue"] = json!(encode_continue(revision, &format!("{relative}\u{0}")));
            if labels.is_empty() && fields.is_empty() {
                list_meta["remainingItemCount"] = json!(remaining);
            }
        }
        if let Some(include) = table_include(call) {
            return Ok(Reply::Object(
                StatusCode::OK,
                table::table(served, &items, list_meta, include),
            ));
        }
        let r = &served.resource;
        Ok(Reply::Object(
            StatusCode::OK,
            json!({
                "kind": r.list_kind(),
                "apiVersion": r.group_version(),
                "metadata": list_meta,
                "items": items,
            }),
        ))
    }

    // ------------------------------------------------------------------ create

    fn check_type(&self, served: &Served, object: &Value) -> ApiResult<()> {
        let r = &served.resource;
        if let Some(api_version) = object["apiVersion"].as_str().filter(|v| !v.is_empty())
            && api_version != r.group_version()
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                r.group_version()
            )));
        }
        if let Some(kind) = object["kind"].as_str().filter(|k| !k.is_empty())
            && kind != r.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                r.kind
            )));
        }
        if !object.is_object() {
            return Err(ApiError::bad_request("the body must be an object"));
        }
        if !object["metadata"].is_null() && !object["metadata"].is_object() {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
        Ok(())
    }

    fn check_namespace(&self, target: &Target<'_>, object: &mut Value) -> ApiResult<()> {
        let body_ns = meta::namespace(object).to_string();
        match target.namespace {
            Some(ns) => {
                if !body_ns.is_empty() && body_ns != ns {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                meta::metadata_mut(object).insert("namespace".into(), json!(ns));
            }
            None => {
                if object["metadata"].is_object() {
                    meta::metadata_mut(object).remove("namespace");
                }
            }
        }
        Ok(())
    }

    /// NamespaceLifecycle: the namespace exists and is not being deleted.
    pub(crate) async fn namespace_accepts(
        &self,
        namespace: &str,
        resource: &str,
        name: &str,
    ) -> ApiResult<()> {
        let Some(ns_resource) = self.registry.builtin("", "namespaces") else {
            return Ok(());
        };
        let found = self
            .storage
            .get(&ns_resource.key(&self.settings.root, None, namespace))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        match found {
            None => Err(ApiError::not_found("namespaces", "", namespace)),
            Some(ns) if meta::deleting(&ns.value) => {
                let mut error = ApiError::forbidden(
                    resource,
                    "",
                    name,
                    &format!(
                        "unable to create new content in namespace {namespace} because it is being terminated"
                    ),
                );
                if let Some(d) = error.details.as_mut() {
                    d["causes"] = json!([{"reason": "NamespaceTerminating", "message": format!("namespace {namespace} is being terminated"), "field": "metadata.namespace"}]);
                }
                Err(error)
            }
            Some(_) => Ok(()),
        }
    }

    /// Defaults, schema handling and validation of an object about to be written; returns
    /// the warnings of `fieldValidation=Warn`.
    fn admit(
        &self,
        call: &Call<'_>,
        served: &Served,
        object: &mut Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<String>> {
        kinds::default_on_write(served, object);
        let mut warnings = Vec::new();
        if let Some(schema) = served.schema() {
            let unknown = schema::prune(schema, object);
            schema::apply_defaults(schema, object);
            if !unknown.is_empty() {
                match call.info.param("fieldValidation") {
                    Some("Strict") => {
                        let list: Vec<String> = unknown
                            .iter()
                            .map(|f| format!("unknown field {f:?}"))
                            .collect();
                        return Err(ApiError::bad_request(format!(
                            "{}.{} {:?} is invalid: strict decoding error: {}",
                            served.resource.kind,
                            served.resource.group,
                            meta::name(object),
                            list.join(", ")
                        )));
                    }
                    Some("Ignore") => {}
                    _ => warnings.extend(unknown.iter().map(|f| format!("unknown field {f:?}"))),
                }
            }
        }
        let causes = kinds::validate(served, object, old);
        if !causes.is_empty() {
            return Err(ApiError::invalid(
                &served.resource.kind,
                &served.resource.group,
                meta::name(object),
                causes,
            ));
        }
        Ok(warnings)
    }

    async fn create(self: &Arc<Self>, call: &Call<'_>, target: &Target<'_>) -> ApiResult<Reply> {
        let mut object = body_value(call)?;
        self.check_type(&target.served, &object)?;
        if target.path.name.is_some() {
            return Err(ApiError::method_not_supported(
                &target.resource().plural,
                &target.resource().group,
                "create",
            ));
        }
        self.create_object(call, target, &mut object, None).await
    }

    /// Creates `object` (a POST, or an apply of an absent object whose field ownership
    /// `applied_by` already recorded).
    async fn create_object(
        self: &Arc<Self>,
        call: &Call<'_>,
        target: &Target<'_>,
        object: &mut Value,
        applied_by: Option<()>,
    ) -> ApiResult<Reply> {
        let served = &target.served;
        let r = served.resource.clone();
        self.check_namespace(target, object)?;
        if !meta::resource_version(object).is_empty() {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        object["apiVersion"] = json!(r.group_version());
        object["kind"] = json!(r.kind);
        let generate = object["metadata"]["generateName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let explicit = meta::name(object).to_string();
        if explicit.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                &r.kind,
                &r.group,
                "",
                vec![Cause::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        if served.terminating() {
            return Err(ApiError {
                code: 405,
                reason: "MethodNotAllowed",
                message: "create not allowed while custom resource definition is terminating"
                    .to_string(),
                details: None,
            });
        }
        if let Some(ns) = target.namespace {
            let shown = if explicit.is_empty() {
                generate.as_str()
            } else {
                explicit.as_str()
            };
            self.namespace_accepts(ns, &r.plural, shown).await?;
        }
        {
            let m = meta::metadata_mut(object);
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.insert("uid".into(), json!(meta::uid()));
            m.insert("creationTimestamp".into(), json!(meta::now()));
            if kinds::tracks_generation(served) {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
        }
        kinds::default_on_create(served, object);
        self.on_create(call, served, target, object).await?;
        if applied_by.is_none() {
            apply::record_update(
                None,
                object,
                &manager(call),
                &r.group_version(),
                if r.status { Scope::Main } else { Scope::Whole },
            );
        }
        let mut attempts = 0;
        loop {
            if explicit.is_empty() {
                let prefix: String = generate.chars().take(58).collect();
                meta::metadata_mut(object).insert(
                    "name".into(),
                    json!(format!("{prefix}{}", meta::name_suffix())),
                );
            }
            let name = meta::name(object).to_string();
            if let Some(why) = meta::check_name(&name, kinds::name_rule(served)) {
                let field = if explicit.is_empty() {
                    "metadata.generateName"
                } else {
                    "metadata.name"
                };
                let shown = if explicit.is_empty() {
                    json!(generate)
                } else {
                    json!(name)
                };
                return Err(ApiError::invalid(
                    &r.kind,
                    &r.group,
                    &name,
                    vec![Cause::invalid(field, &shown, &why)],
                ));
            }
            let warnings = self.admit(call, served, object, None)?;
            self.admission(
                call.user,
                served,
                target.namespace,
                &name,
                "create",
                Some(object),
                None,
            )
            .await?;
            if dry_run(call) {
                return Ok(with_warnings(
                    Reply::Object(StatusCode::CREATED, object.clone()),
                    &warnings,
                ));
            }
            let key = self.key(served, target.namespace, &name);
            match self
                .storage
                .create(&key, &self.to_storage(served, object))
                .await
            {
                Ok(revision) => {
                    self.after_write(served);
                    let presented = self.present(served, self.to_storage(served, object), revision);
                    return Ok(with_warnings(
                        Reply::Object(StatusCode::CREATED, presented),
                        &warnings,
                    ));
                }
                Err(StorageError::Exists { .. }) if explicit.is_empty() && attempts < 8 => {
                    attempts += 1
                }
                Err(e) => return Err(self.storage_error(served, &name, e)),
            }
        }
    }

    /// What creating some kinds involves beyond defaults.
    async fn on_create(
        &self,
        call: &Call<'_>,
        served: &Served,
        target: &Target<'_>,
        object: &mut Value,
    ) -> ApiResult<()> {
        let r = &served.resource;
        match (r.group.as_str(), r.plural.as_str()) {
            ("certificates.k8s.io", _) => {
                let user = call.user;
                object["spec"]["username"] = json!(user.name);
                object["spec"]["groups"] = json!(user.groups);
                if user.uid.is_empty() {
                    if let Some(s) = object["spec"].as_object_mut() {
                        s.remove("uid");
                    }
                } else {
                    object["spec"]["uid"] = json!(user.uid);
                }
                if user.extra.is_empty() {
                    if let Some(s) = object["spec"].as_object_mut() {
                        s.remove("extra");
                    }
                } else {
                    object["spec"]["extra"] = json!(user.extra);
                }
            }
            ("", "services") => self.allocate_cluster_ip(target.namespace, object).await?,
            _ => {}
        }
        Ok(())
    }

    /// Caches that depend on what was written.
    fn after_write(&self, served: &Served) {
        let r = &served.resource;
        if r.group == "apiextensions.k8s.io" {
            self.registry.invalidate();
        }
        if r.group == "rbac.authorization.k8s.io" {
            self.authz.invalidate();
        }
    }

    // ------------------------------------------------------------------ update and patch

    async fn update(
        self: &Arc<Self>,
        call: &Call<'_>,
        target: &Target<'_>,
        kind: UpdateKind,
    ) -> ApiResult<Reply> {
        let body = body_value(call)?;
        self.check_type(&target.served, &body)?;
        let name = target.name();
        let body_name = meta::name(&body);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(ns) = target.namespace {
            let body_ns = meta::namespace(&body);
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let requested = meta::resource_version(&body).to_string();
        for _ in 0..RETRIES {
            let Some(current) = self
                .read_stored(&target.served, target.namespace, name)
                .await?
            else {
                return Err(ApiError::not_found(
                    &target.resource().plural,
                    &target.resource().group,
                    name,
                ));
            };
            if !requested.is_empty() && requested != current.revision.to_string() {
                return Err(ApiError::modified(
                    &target.resource().plural,
                    &target.resource().group,
                    name,
                ));
            }
            let old = self.present(&target.served, current.value.clone(), current.revision);
            let new = self.prepare(&target.served, &old, body.clone(), kind);
            match self
                .commit(call, target, &old, current.revision, new, kind, None)
                .await?
            {
                Attempt::Done(reply) => return Ok(reply),
                Attempt::Retry if requested.is_empty() => continue,
                Attempt::Retry => {
                    return Err(ApiError::modified(
                        &target.resource().plural,
                        &target.resource().group,
                        name,
                    ));
                }
            }
        }
        Err(ApiError::conflict(
            &target.resource().plural,
            &target.resource().group,
            name,
            "too many concurrent updates, try again",
        ))
    }

    /// The object an update writes: what the request may change from `old`, the rest kept.
    fn prepare(&self, served: &Served, old: &Value, body: Value, kind: UpdateKind) -> Value {
        match kind {
            UpdateKind::Main => {
                let mut new = body;
                new["apiVersion"] = old["apiVersion"].clone();
                new["kind"] = old["kind"].clone();
                let keep = [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ];
                let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
                let had_managed = new["metadata"].get("managedFields").is_some();
                let m = meta::metadata_mut(&mut new);
                for k in keep {
                    match old_meta.get(k) {
                        Some(v) => {
                            m.insert(k.to_string(), v.clone());
                        }
                        None => {
                            m.remove(k);
                        }
                    }
                }
                if !had_managed && let Some(mf) = old_meta.get("managedFields") {
                    m.insert("managedFields".into(), mf.clone());
                }
                if kinds::status_kept_on_update(served) {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(o) = new.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                if served.resource.group.is_empty() && served.resource.plural == "namespaces" {
                    new["spec"] = old["spec"].clone();
                    new["status"] = old["status"].clone();
                }
                new
            }
            UpdateKind::Status => {
                let mut new = old.clone();
                match body.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                new
            }
            UpdateKind::Finalize => {
                let mut new = old.clone();
                new["spec"]["finalizers"] = body["spec"]["finalizers"].clone();
                if new["spec"]["finalizers"].is_null()
                    && let Some(s) = new["spec"].as_object_mut()
                {
                    s.remove("finalizers");
                }
                new
            }
            UpdateKind::Approval => {
                let mut new = old.clone();
                new["status"]["conditions"] = body["status"]["conditions"].clone();
                new
            }
        }
    }

    /// Writes an update prepared from `old` (at `revision`). `applied`: the field ownership
    /// was set by server-side apply.
    #[allow(clippy::too_many_arguments)]
    async fn commit(
        self: &Arc<Self>,
        call: &Call<'_>,
        target: &Target<'_>,
        old: &Value,
        revision: u64,
        mut new: Value,
        kind: UpdateKind,
        applied: Option<()>,
    ) -> ApiResult<Attempt> {
        let served = &target.served;
        let r = &served.resource;
        let name = target.name();
        let warnings = self.admit(call, served, &mut new, Some(old))?;
        if kinds::tracks_generation(served) && kind == UpdateKind::Main {
            let before = kinds::generation_relevant(served, old);
            let after = kinds::generation_relevant(served, &new);
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0);
            let next = if before == after {
                generation
            } else {
                generation + 1
            };
            meta::metadata_mut(&mut new).insert("generation".into(), json!(next.max(1)));
        }
        let scope = match kind {
            UpdateKind::Status | UpdateKind::Approval => Scope::Status,
            _ if r.status => Scope::Main,
            _ => Scope::Whole,
        };
        if applied.is_none() {
            apply::record_update(
                Some(old),
                &mut new,
                &manager(call),
                &r.group_version(),
                scope,
            );
        }
        self.admission(
            call.user,
            served,
            target.namespace,
            name,
            "update",
            Some(&new),
            Some(old),
        )
        .await?;
        let mut unchanged_new = new.clone();
        let mut unchanged_old = old.clone();
        for o in [&mut unchanged_new, &mut unchanged_old] {
            if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
                m.remove("resourceVersion");
            }
        }
        if unchanged_new == unchanged_old {
            return Ok(Attempt::Done(with_warnings(
                Reply::Object(StatusCode::OK, old.clone()),
                &warnings,
            )));
        }
        if dry_run(call) {
            return Ok(Attempt::Done(with_warnings(
                Reply::Object(StatusCode::OK, new),
                &warnings,
            )));
        }
        let key = self.key(served, target.namespace, name);
        // A deleted object whose last finalizer went is removed.
        if meta::deleting(&new) && meta::finalizers(&new).is_empty() {
            return match self.storage.delete(&key, revision).await {
                Ok(deleted) => {
                    self.after_write(served);
                    let mut gone = new;
                    meta::set_resource_version(&mut gone, deleted);
                    Ok(Attempt::Done(Reply::Object(StatusCode::OK, gone)))
                }
                Err(StorageError::Conflict { .. } | StorageError::NotFound { .. }) => {
                    Ok(Attempt::Retry)
                }
                Err(e) => Err(self.storage_error(served, name, e)),
            };
        }
        match self
            .storage
            .update(&key, &self.to_storage(served, &new), revision)
            .await
        {
            Ok(written) => {
                self.after_write(served);
                let presented = self.present(served, self.to_storage(served, &new), written);
                Ok(Attempt::Done(with_warnings(
                    Reply::Object(StatusCode::OK, presented),
                    &warnings,
                )))
            }
            Err(StorageError::Conflict { .. } | StorageError::NotFound { .. }) => {
                Ok(Attempt::Retry)
            }
            Err(e) => Err(self.storage_error(served, name, e)),
        }
    }

    async fn patch(
        self: &Arc<Self>,
        call: &Call<'_>,
        target: &Target<'_>,
        kind: UpdateKind,
    ) -> ApiResult<Reply> {
        let r = target.resource().clone();
        let name = target.name().to_string();
        let content = content_type(call);
        let accepted = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ];
        if content == "application/apply-patch+yaml" {
            return self.apply(call, target, kind).await;
        }
        if !accepted.contains(&content.as_str())
            || (content == "application/strategic-merge-patch+json" && target.served.crd.is_some())
        {
            let list: Vec<&str> = accepted
                .iter()
                .copied()
                .filter(|a| target.served.crd.is_none() || !a.contains("strategic"))
                .collect();
            return Err(ApiError::unsupported_media_type(&content, &list));
        }
        let patch_body: Value = serde_json::from_slice(call.body).map_err(|e| {
            ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
        })?;
        for _ in 0..RETRIES {
            let Some(current) = self
                .read_stored(&target.served, target.namespace, &name)
                .await?
            else {
                return Err(ApiError::not_found(&r.plural, &r.group, &name));
            };
            let old = self.present(&target.served, current.value.clone(), current.revision);
            let patched = match content.as_str() {
                "application/json-patch+json" => patch::json_patch(&old, &patch_body),
                "application/merge-patch+json" => {
                    let mut doc = old.clone();
                    patch::merge_patch(&mut doc, &patch_body);
                    Ok(doc)
                }
                _ => patch::strategic_merge_patch(&old, &patch_body, &r.kind),
            }
            .map_err(|e| ApiError {
                code: 422,
                reason: "Invalid",
                message: format!(
                    "{} {name:?} is invalid: {}",
                    super::status::qualified(&r.kind, &r.group),
                    e.0
                ),
                details: None,
            })?;
            let requested = meta::resource_version(&patched).to_string();
            if !requested.is_empty() && requested != current.revision.to_string() {
                return Err(ApiError::modified(&r.plural, &r.group, &name));
            }
            if meta::name(&patched) != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta::name(&patched)
                )));
            }
            self.check_type(&target.served, &patched)?;
            let new = self.prepare(&target.served, &old, patched, kind);
            let pinned = patch_body.pointer("/metadata/resourceVersion").is_some();
            match self
                .commit(call, target, &old, current.revision, new, kind, None)
                .await?
            {
                Attempt::Done(reply) => return Ok(reply),
                Attempt::Retry if !pinned => continue,
                Attempt::Retry => return Err(ApiError::modified(&r.plural, &r.group, &name)),
            }
        }
        Err(ApiError::conflict(
            &r.plural,
            &r.group,
            &name,
            "too many concurrent updates, try again",
        ))
    }

    /// Server-side apply (see [`apply`] for what is approximated).
    async fn apply(
        self: &Arc<Self>,
        call: &Call<'_>,
        target: &Target<'_>,
        kind: UpdateKind,
    ) -> ApiResult<Reply> {
        let r = target.resource().clone();
        let name = target.name().to_string();
        let Some(manager) = call
            .info
            .param("fieldManager")
            .filter(|m| !m.is_empty())
            .map(str::to_string)
        else {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                vec![Cause::required(
                    "fieldManager",
                    "is required for apply patch",
                )],
            ));
        };
        let force = call.info.flag("force");
        let applied: Value = serde_yaml_ng::from_slice(call.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the applied configuration must be an object",
            ));
        }
        if applied["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
            || applied["kind"].as_str().unwrap_or_default().is_empty()
        {
            return Err(ApiError::bad_request("invalid object type: /, Kind="));
        }
        self.check_type(&target.served, &applied)?;
        let applied_name = meta::name(&applied);
        if applied_name.is_empty() {
            return Err(ApiError::invalid(
                &r.kind,
                &r.group,
                &name,
                vec![Cause::required("metadata.name", "name is required")],
            ));
        }
        if applied_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({applied_name}) does not match the name on the URL ({name})"
            )));
        }
        let scope = match kind {
            UpdateKind::Status | UpdateKind::Approval => Scope::Status,
            _ if r.status => Scope::Main,
            _ => Scope::Whole,
        };
        let conflict = |conflicts: Vec<apply::Conflict>| {
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {:?} using {}", c.manager, c.api_version), "field": c.field}))
                .collect();
            let lines: Vec<String> = conflicts
                .iter()
                .map(|c| format!("- {:?}: {}", c.manager, c.field))
                .collect();
            let mut error = ApiError::conflict(&r.plural, &r.group, &name, "");
            error.message = format!(
                "Apply failed with {} conflict{}: {}",
                conflicts.len(),
                if conflicts.len() == 1 { "" } else { "s" },
                if conflicts.len() == 1 {
                    format!(
                        "conflict with {:?} using {}: {}",
                        conflicts[0].manager, conflicts[0].api_version, conflicts[0].field
                    )
                } else {
                    format!("conflicts with:\n{}", lines.join("\n"))
                }
            );
            error.details =
                Some(json!({"name": name, "kind": r.plural, "group": r.group, "causes": causes}));
            error
        };
        for _ in 0..RETRIES {
            let current = self
                .read_stored(&target.served, target.namespace, &name)
                .await?;
            let Some(current) = current else {
                if kind != UpdateKind::Main {
                    return Err(ApiError::not_found(&r.plural, &r.group, &name));
                }
                let mut object =
                    apply::apply(None, &applied, &manager, &r.group_version(), scope, force)
                        .map_err(conflict)?;
                match self
                    .create_object(call, target, &mut object, Some(()))
                    .await
                {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    other => return other,
                }
            };
            let old = self.present(&target.served, current.value.clone(), current.revision);
            let merged = apply::apply(
                Some(&old),
                &applied,
                &manager,
                &r.group_version(),
                scope,
                force,
            )
            .map_err(conflict)?;
            let new = self.prepare(&target.served, &old, merged, kind);
            match self
                .commit(call, target, &old, current.revision, new, kind, Some(()))
                .await?
            {
                Attempt::Done(reply) => return Ok(reply),
                Attempt::Retry => continue,
            }
        }
        Err(ApiError::conflict(
            &r.plural,
            &r.group,
            &name,
            "too many concurrent updates, try again",
        ))
    }

    // ------------------------------------------------------------------ delete

    async fn delete(self: &Arc<Self>, call: &Call<'_>, target: &Target<'_>) -> ApiResult<Reply> {
        let options: Value = if call.body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(call.body).map_err(|e| {
                ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
            })?
        };
        let dry = dry_run(call)
            || options["dryRun"]
                .as_array()
                .is_some_and(|d| d.iter().any(|v| v == "All"));
        let name = target.name().to_string();
        let r = target.resource().clone();
        if r.group.is_empty()
            && r.plural == "namespaces"
            && super::policy::IMMORTAL_NAMESPACES.contains(&name.as_str())
        {
            return Err(ApiError::forbidden(
                "namespaces",
                "",
                &name,
                "this namespace may not be deleted",
            ));
        }
        self.admission(
            call.user,
            &target.served,
            target.namespace,
            &name,
            "delete",
            None,
            None,
        )
        .await?;
        for _ in 0..RETRIES {
            let Some(current) = self
                .read_stored(&target.served, target.namespace, &name)
                .await?
            else {
                return Err(ApiError::not_found(&r.plural, &r.group, &name));
            };
            let old = self.present(&target.served, current.value.clone(), current.revision);
            if let Some(uid) = options["preconditions"]["uid"].as_str() {
                let actual = old["metadata"]["uid"].as_str().unwrap_or_default();
                if uid != actual {
                    return Err(ApiError::conflict(
                        &r.plural,
                        &r.group,
                        &name,
                        &format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                        ),
                    ));
                }
            }
            if let Some(rv) = options["preconditions"]["resourceVersion"].as_str()
                && rv != current.revision.to_string()
            {
                return Err(ApiError::conflict(
                    &r.plural,
                    &r.group,
                    &name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        current.revision
                    ),
                ));
            }
            match self
                .delete_one(
                    &target.served,
                    target.namespace,
                    &name,
                    &old,
                    current.revision,
                    dry,
                )
                .await?
            {
                Some(reply) => return Ok(reply),
                None => continue,
            }
        }
        Err(ApiError::conflict(
            &r.plural,
            &r.group,
            &name,
            "too many concurrent updates, try again",
        ))
    }

    /// Deletes one object read at `revision`, or marks it for deletion when finalizers hold
    /// it; `None` when it changed underneath (retry).
    pub(crate) async fn delete_one(
        &self,
        served: &Served,
        namespace: Option<&str>,
        name: &str,
        old: &Value,
        revision: u64,
        dry: bool,
    ) -> ApiResult<Option<Reply>> {
        let r = &served.resource;
        let key = self.key(served, namespace, name);
        let namespace_object = r.group.is_empty() && r.plural == "namespaces";
        let finalizers = meta::finalizers(old);
        let spec_finalizers = namespace_object
            && old["spec"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
        if !finalizers.is_empty() || spec_finalizers {
            if meta::deleting(old) {
                return Ok(Some(Reply::Object(StatusCode::OK, old.clone())));
            }
            let mut marked = old.clone();
            {
                let m = meta::metadata_mut(&mut marked);
                m.insert("deletionTimestamp".into(), json!(meta::now()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                if let Some(g) = m.get("generation").and_then(Value::as_i64) {
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            if namespace_object {
                marked["status"]["phase"] = json!("Terminating");
            }
            if dry {
                return Ok(Some(Reply::Object(StatusCode::OK, marked)));
            }
            return match self
                .storage
                .update(&key, &self.to_storage(served, &marked), revision)
                .await
            {
                Ok(written) => {
                    self.after_write(served);
                    self.wake.notify_one();
                    let presented = self.present(served, self.to_storage(served, &marked), written);
                    Ok(Some(Reply::Object(StatusCode::OK, presented)))
                }
                Err(StorageError::Conflict { .. }) => Ok(None),
                Err(StorageError::NotFound { .. }) => {
                    Err(ApiError::not_found(&r.plural, &r.group, name))
                }
                Err(e) => Err(self.storage_error(served, name, e)),
            };
        }
        if dry {
            return Ok(Some(Reply::Object(StatusCode::OK, old.clone())));
        }
        match self.storage.delete(&key, revision).await {
            Ok(_) => {
                self.after_write(served);
                let body = if served.crd.is_some() || r.status {
                    old.clone()
                } else {
                    let mut details =
                        json!({"name": name, "kind": r.plural, "uid": old["metadata"]["uid"]});
                    if !r.group.is_empty() {
                        details["group"] = json!(r.group);
                    }
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
                };
                Ok(Some(Reply::Object(StatusCode::OK, body)))
            }
            Err(StorageError::Conflict { .. }) => Ok(None),
            Err(StorageError::NotFound { .. }) => {
                Err(ApiError::not_found(&r.plural, &r.group, name))
            }
            Err(e) => Err(self.storage_error(served, name, e)),
        }
    }

    async fn delete_collection(
        self: &Arc<Self>,
        call: &Call<'_>,
        target: &Target<'_>,
    ) -> ApiResult<Reply> {
        let served = &target.served;
        let (labels, fields) = self.selectors(call, served)?;
        let dry = dry_run(call);
        let prefix = self.prefix(served, target.namespace);
        let listed = self
            .storage
            .list(&prefix, &ListOptions::default())
            .await
            .map_err(|e| self.storage_error(served, "", e))?;
        let mut items = Vec::new();
        for (_, stored) in listed.items {
            let object = self.present(served, stored.value, stored.revision);
            if !self.selected(served, &object, &labels, &fields) {
                continue;
            }
            let name = meta::name(&object).to_string();
            let ns = meta::namespace(&object).to_string();
            let ns = (!ns.is_empty()).then_some(ns);
            self.admission(
                call.user,
                served,
                ns.as_deref(),
                &name,
                "delete",
                None,
                None,
            )
            .await?;
            if let Some(Reply::Object(_, body)) = self
                .delete_one(served, ns.as_deref(), &name, &object, stored.revision, dry)
                .await?
            {
                if body["kind"] != "Status" {
                    items.push(body);
                } else {
                    items.push(object);
                }
            }
        }
        let r = &served.resource;
        Ok(Reply::Object(
            StatusCode::OK,
            json!({
                "kind": r.list_kind(), "apiVersion": r.group_version(),
                "metadata": {"resourceVersion": listed.revision.to_string()}, "items": items,
            }),
        ))
    }

    // ------------------------------------------------------------------ reviews, tokens

    async fn review(&self, call: &Call<'_>, target: &Target<'_>) -> ApiResult<Reply> {
        let body = body_value(call)?;
        self.check_type(&target.served, &body)?;
        let r = target.resource();
        let mut answer = json!({
            "kind": r.kind, "apiVersion": r.group_version(),
            "metadata": {"creationTimestamp": null},
            "spec": body.get("spec").cloned().unwrap_or_else(|| json!({})),
        });
        match r.plural.as_str() {
            "selfsubjectreviews" => {
                answer["status"] = json!({"userInfo": call.user.to_user_info()});
            }
            "selfsubjectaccessreviews" | "subjectaccessreviews" => {
                let spec = answer["spec"].clone();
                let a = review_attributes(&spec).ok_or_else(|| {
                    ApiError::invalid(&r.kind, &r.group, "", vec![Cause::required("spec.resourceAttributes", "exactly one of nonResourceAttributes or resourceAttributes must be specified")])
                })?;
                // A SubjectAccessReview asks about the user in its spec; a self review, the caller.
                let subject = if r.plural == "subjectaccessreviews" {
                    let strings = |v: &Value| -> Vec<String> {
                        v.as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|s| s.as_str().map(str::to_string))
                            .collect()
                    };
                    let user = spec["user"].as_str().unwrap_or_default().to_string();
                    let groups = strings(&spec["groups"]);
                    if user.is_empty() && groups.is_empty() {
                        return Err(ApiError::invalid(
                            &r.kind,
                            &r.group,
                            "",
                            vec![Cause::required(
                                "spec.user",
                                "at least one of user or group must be specified",
                            )],
                        ));
                    }
                    let mut extra = std::collections::BTreeMap::new();
                    if let Some(map) = spec["extra"].as_object() {
                        for (k, v) in map {
                            extra.insert(k.clone(), strings(v));
                        }
                    }
                    super::authn::User {
                        name: user,
                        uid: spec["uid"].as_str().unwrap_or_default().to_string(),
                        groups,
                        extra,
                    }
                } else {
                    call.user.clone()
                };
                let decision = self
                    .authz
                    .authorize(&*self.storage, &self.registry, &subject, &a)
                    .await;
                let mut status = json!({"allowed": decision.allowed});
                if !decision.reason.is_empty() {
                    status["reason"] = json!(decision.reason);
                }
                answer["status"] = status;
            }
            "tokenreviews" => {
                let token = answer["spec"]["token"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let header = format!("Bearer {token}");
                let audiences = answer["spec"]["audiences"].clone();
                answer["status"] = match self
                    .authn
                    .authenticate(&*self.storage, &self.settings.root, &[], Some(&header))
                    .await
                {
                    Ok(user) if !token.is_empty() && user.name != "system:anonymous" => {
                        let mut status =
                            json!({"authenticated": true, "user": user.to_user_info()});
                        if audiences.is_array() {
                            status["audiences"] = audiences;
                        }
                        status
                    }
                    _ => json!({"authenticated": false, "error": "invalid bearer token"}),
                };
                // The token is not echoed back.
                if let Some(spec) = answer["spec"].as_object_mut() {
                    spec.remove("token");
                }
            }
            "selfsubjectrulesreviews" => {
                let namespace = answer["spec"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let (resource_rules, url_rules, incomplete) = self
                    .authz
                    .rules(&*self.storage, &self.registry, call.user, &namespace)
                    .await;
                answer["status"] = json!({"resourceRules": resource_rules, "nonResourceRules": url_rules, "incomplete": incomplete});
            }
            _ => return Err(ApiError::no_route()),
        }
        Ok(Reply::Object(StatusCode::CREATED, answer))
    }

    async fn token_request(&self, call: &Call<'_>, target: &Target<'_>) -> ApiResult<Reply> {
        let Some(issuer) = &self.tokens else {
            return Err(ApiError::no_route());
        };
        let namespace = target.namespace.unwrap_or_default();
        let name = target.name();
        let (sa, _) = self.read(&target.served, target.namespace, name).await?;
        let body = body_value(call)?;
        let spec = &body["spec"];
        let mut seconds = spec["expirationSeconds"].as_i64().unwrap_or(3600);
        if seconds < 600 {
            return Err(ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                vec![Cause::invalid(
                    "spec.expirationSeconds",
                    &spec["expirationSeconds"],
                    "may not specify a duration less than 10 minutes",
                )],
            ));
        }
        if seconds > 1 << 32 {
            return Err(ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                vec![Cause::invalid(
                    "spec.expirationSeconds",
                    &spec["expirationSeconds"],
                    "may not specify a duration larger than 2^32 seconds",
                )],
            ));
        }
        if let Some(max) = issuer.max_seconds {
            seconds = seconds.min(max);
        }
        let audiences: Vec<String> = match spec["audiences"].as_array() {
            Some(list) if !list.is_empty() => list
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect(),
            _ => issuer.audiences.clone(),
        };
        let bound = match spec["boundObjectRef"].as_object() {
            Some(reference) => {
                let kind = reference
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let bound_name = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let plural = match kind {
                    "Pod" => "pods",
                    "Secret" => "secrets",
                    other => {
                        return Err(ApiError::invalid(
                            "TokenRequest",
                            "authentication.k8s.io",
                            name,
                            vec![Cause::unsupported(
                                "spec.boundObjectRef.kind",
                                other,
                                &["Pod", "Secret"],
                            )],
                        ));
                    }
                };
                let resource = self
                    .registry
                    .builtin("", plural)
                    .ok_or_else(ApiError::no_route)?;
                let served = Served {
                    resource,
                    crd: None,
                };
                let (object, _) = self.read(&served, Some(namespace), bound_name).await?;
                let uid = object["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if let Some(expected) = reference.get("uid").and_then(Value::as_str)
                    && expected != uid
                {
                    return Err(ApiError::conflict(
                        plural,
                        "",
                        bound_name,
                        &format!(
                            "the UID in the bound object reference ({expected}) does not match the UID in record. The object might have been deleted and then recreated"
                        ),
                    ));
                }
                Some((kind.to_string(), bound_name.to_string(), uid))
            }
            None => None,
        };
        let claims = super::authn::service_account_claims(
            &issuer.issuer,
            &audiences,
            namespace,
            name,
            sa["metadata"]["uid"].as_str().unwrap_or_default(),
            seconds,
            bound
                .as_ref()
                .map(|(k, n, u)| (k.as_str(), n.as_str(), u.as_str())),
        );
        let token = issuer
            .signer
            .sign(&claims)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let expires =
            time::OffsetDateTime::from_unix_timestamp(claims["exp"].as_i64().unwrap_or_default())
                .map(meta::timestamp)
                .unwrap_or_default();
        let mut spec_out = json!({"audiences": audiences, "expirationSeconds": seconds});
        if let Some(reference) = spec.get("boundObjectRef").filter(|v| v.is_object()) {
            spec_out["boundObjectRef"] = reference.clone();
        }
        Ok(Reply::Object(
            StatusCode::CREATED,
            json!({
                "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
                "spec": spec_out,
                "status": {"token": token, "expirationTimestamp": expires},
            }),
        ))
    }

    /// Allocates `spec.clusterIP` from `--service-cluster-ip-range`, or checks the one given.
    async fn allocate_cluster_ip(
        &self,
        _namespace: Option<&str>,
        object: &mut Value,
    ) -> ApiResult<()> {
        let kind = object["spec"]["type"]
            .as_str()
            .unwrap_or("ClusterIP")
            .to_string();
        if kind == "ExternalName" {
            return Ok(());
        }
        let Some(range) = self.settings.service_cluster_ip_ranges.first().copied() else {
            return Ok(());
        };
        let requested = object["spec"]["clusterIP"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if requested == "None" {
            object["spec"]["clusterIPs"] = json!(["None"]);
            return Ok(());
        }
        let services = self
            .registry
            .builtin("", "services")
            .ok_or_else(ApiError::no_route)?;
        let listed = self
            .storage
            .list(
                &services.prefix(&self.settings.root),
                &ListOptions::default(),
            )
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let used: std::collections::BTreeSet<String> = listed
            .items
            .iter()
            .filter_map(|(_, s)| s.value["spec"]["clusterIP"].as_str().map(str::to_string))
            .collect();
        let ip = if requested.is_empty() {
            range
                .hosts()
                .skip(1)
                .map(|ip| ip.to_string())
                .find(|ip| !used.contains(ip))
                .ok_or_else(|| {
                    ApiError::internal(format!(
                        "failed to allocate a serviceIP: range is full ({range})"
                    ))
                })?
        } else {
            let parsed: std::net::IpAddr = requested.parse().map_err(|_| {
                ApiError::invalid(
                    "Service",
                    "",
                    meta::name(object),
                    vec![Cause::invalid(
                        "spec.clusterIPs[0]",
                        &json!(requested),
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    )],
                )
            })?;
            if !range.contains(&parsed) {
                return Err(ApiError::invalid(
                    "Service",
                    "",
                    meta::name(object),
                    vec![Cause::invalid(
                        "spec.clusterIPs",
                        &json!([requested]),
                        &format!(
                            "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {range}"
                        ),
                    )],
                ));
            }
            if used.contains(&requested) {
                return Err(ApiError::invalid(
                    "Service",
                    "",
                    meta::name(object),
                    vec![Cause::invalid(
                        "spec.clusterIPs",
                        &json!([requested]),
                        &format!(
                            "failed to allocate IP {requested}: provided IP is already allocated"
                        ),
                    )],
                ));
            }
            requested
        };
        object["spec"]["clusterIP"] = json!(ip);
        object["spec"]["clusterIPs"] = json!([ip]);
        let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
        object["spec"]["ipFamilies"] = json!([family]);
        object["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        object["spec"]["internalTrafficPolicy"] = json!("Cluster");
        Ok(())
    }
}

/// The attributes a (self) subject access review asks about.
fn review_attributes(spec: &Value) -> Option<Attributes> {
    if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        let field = |k: &str| ra[k].as_str().unwrap_or_default().to_string();
        return Some(Attributes {
            verb: field("verb"),
            resource_request: true,
            namespace: field("namespace"),
            group: field("group"),
            version: field("version"),
            resource: field("resource"),
            subresource: field("subresource"),
            name: field("name"),
            path: String::new(),
        });
    }
    let na = spec
        .get("nonResourceAttributes")
        .filter(|v| v.is_object())?;
    Some(Attributes {
        verb: na["verb"].as_str().unwrap_or_default().to_string(),
        resource_request: false,
        path: na["path"].as_str().unwrap_or_default().to_string(),
        ..Attributes::default()
    })
}

/// The part of an object an update covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateKind {
    /// The main resource.
    Main,
    /// `/status`.
    Status,
    /// A namespace's `/finalize`.
    Finalize,
    /// A CSR's `/approval`.
    Approval,
}

/// Adds `Warning` headers (as for unknown fields under `fieldValidation=Warn`).
fn with_warnings(reply: Reply, warnings: &[String]) -> Reply {
    if warnings.is_empty() {
        return reply;
    }
    match reply {
        Reply::Object(status, value) => {
            let mut response = http::Response::new(super::full(value.to_string()));
            *response.status_mut() = status;
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            for w in warnings {
                if let Ok(v) = http::HeaderValue::from_str(&format!("299 - {w:?}")) {
                    response.headers_mut().append("warning", v);
                }
            }
            Reply::Raw(response)
        }
        raw => raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_bad_ones_are_refused() {
        let token = encode_continue(42, "ns/name\u{0}");
        assert_eq!(
            decode_continue(&token).unwrap(),
            (42, "ns/name\u{0}".to_string())
        );
        assert!(decode_continue("garbage!").is_err());
        let evil =
            B64URL.encode(json!({"v": "meta.k8s.io/v1", "rv": 1, "start": "../x"}).to_string());
        assert!(decode_continue(&evil).is_err());
    }
}
