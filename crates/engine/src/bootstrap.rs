//! Step 7 of a ready cluster: what it must hold inside ([`oi_planner::bootstrap`]), written
//! through its own API at its endpoint with the plan's short-lived `system:masters` identity,
//! then its join requests ([`oi_planner::join::join_step`]): with the VPN on, the endpoint's
//! peers rewritten on the ingress's hypervisor first, then answers, registered Nodes marked,
//! requests of deleted Nodes deleted.
//! Each object is read first: absent, it is created; present and holding every desired field,
//! it is left alone (a converged cluster gets no write); otherwise the desired fields are
//! written as a JSON merge patch. Then the join token Secrets of ours that left the Cluster
//! are deleted. Failures the API server may outgrow (no answer, 5xx, 429, a namespace or CRD
//! not served yet, a conflict) are retried until the deadline; any other answer fails the
//! step at once, naming the object and the API server's message.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use http::Method;
use oi_api::common::{ConditionStatus, set_condition};
use oi_api::{NodeJoinRequest, ObjectKey, VpnPeer};
use oi_cri::HypervisorRuntime;
use oi_planner::bootstrap::{ClusterObject, IN_CLUSTER_LABEL, InCluster, Prune, holds};
use oi_planner::join::NODE_REGISTERED;
use oi_planner::vpn::VpnPlan;
use oi_planner::{ClusterResult, Convergence, PlacedFiles};
use serde_json::Value;

use crate::Executor;
use crate::error::{Step, StepError};
use crate::https::{HttpsRequest, HttpsResponse, Network, Tls};
use crate::progress::Counters;

/// How many reads of one cluster's objects are in flight at once: over HTTP/2, which API
/// servers speak, all on one connection; over HTTP/1.1 each on a connection of its own.
const READS_AT_ONCE: usize = 16;

/// The cluster's NodeJoinRequests.
const REQUESTS: &str = "/apis/node.oneinfra.ereslibre.es/v1alpha1/nodejoinrequests";
/// [`REQUESTS`], in messages.
const REQUESTS_WHAT: &str = "NodeJoinRequests";

/// The reads of a cluster's objects before any write ([`Executor::read_all`]).
pub(crate) struct Reads {
    /// Each collection holding several of the objects: the objects of ours it holds.
    listed: Result<BTreeMap<String, BTreeMap<String, Value>>, Failure>,
    /// Each object alone in its collection, by path.
    singles: BTreeMap<String, Result<HttpsResponse, String>>,
    /// Each prune's LIST.
    prunes: Vec<Result<Value, Failure>>,
    /// The NodeJoinRequests.
    requests: Result<Value, Failure>,
}

impl Reads {
    /// Whether every read answered with what was asked (an object's absence included).
    fn answered(&self) -> bool {
        self.listed.is_ok()
            && self
                .singles
                .values()
                .all(|r| r.as_ref().is_ok_and(|r| r.status == 200 || r.status == 404))
            && self.prunes.iter().all(Result::is_ok)
            && self.requests.is_ok()
    }
}

/// The plan's in-cluster part and the TLS settings of its identity.
fn in_cluster_tls(plan: &Convergence) -> Step<(&InCluster, Tls)> {
    let failed = |endpoint: &str, reason: String| StepError::ClusterBootstrap {
        endpoint: endpoint.to_string(),
        object: String::new(),
        reason,
    };
    let in_cluster = plan
        .in_cluster
        .as_ref()
        .map_err(|reason| failed("not planned", reason.clone()))?;
    let identity = in_cluster
        .client
        .as_ref()
        .map_err(|reason| failed(&in_cluster.endpoint, format!("client identity: {reason}")))?;
    let tls = Tls {
        ca_pem: identity.server_ca.clone(),
        identity: Some((identity.certificate.clone(), identity.private_key.clone())),
    };
    Ok((in_cluster, tls))
}

/// How an object was read in the first wave: found (or not) in its collection's LIST, or
/// read alone with a GET.
enum ReadOf<'a> {
    Listed(Option<&'a Value>),
    Read(Result<HttpsResponse, String>),
}

/// How many of the cluster's objects each collection holds: one holding several is read
/// with a LIST, the others' objects each with a GET.
fn collection_sizes(in_cluster: &InCluster) -> BTreeMap<&str, usize> {
    let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &in_cluster.objects {
        *sizes.entry(o.collection.as_str()).or_default() += 1;
    }
    sizes
}

/// Why one request did not do what was asked; `retry` when a later attempt may succeed.
struct Failure {
    object: String,
    reason: String,
    retry: bool,
}

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// Ensures the cluster's in-cluster objects, until done or out of time. `early`: the
    /// cluster's reads made while it was observed ([`Executor::early_reads`]), used by the
    /// first attempt instead of reading again.
    pub(crate) async fn bootstrap(
        &self,
        key: &ObjectKey,
        plan: &Convergence,
        result: &mut ClusterResult,
        mut early: Option<Reads>,
    ) -> Step {
        let (in_cluster, tls) = in_cluster_tls(plan)?;
        loop {
            let reads = match early.take() {
                Some(reads) => reads,
                None => self.read_all(in_cluster, &tls).await,
            };
            match self
                .ensure_all(key, in_cluster, plan.vpn.as_ref(), &tls, result, reads)
                .await
            {
                Ok(()) => {
                    result.join_tokens = Some(in_cluster.join_tokens.clone());
                    return Ok(());
                }
                Err(f) if !f.retry || self.out_of_time() => {
                    return Err(StepError::ClusterBootstrap {
                        endpoint: in_cluster.endpoint.clone(),
                        object: f.object,
                        reason: f.reason,
                    });
                }
                Err(_) => self.pause().await,
            }
        }
    }

    /// The cluster's first reads ([`Executor::read_all`]), made while it is observed so that
    /// a converged cluster's reads cost no round of their own: `None` when the cluster's
    /// objects cannot be read yet (not planned, or an answer other than an object, its
    /// absence or a list), as the reads are then made again once it is ready.
    pub(crate) async fn early_reads(&self, plan: &Convergence) -> Option<Reads> {
        let (in_cluster, tls) = in_cluster_tls(plan).ok()?;
        let reads = self.read_all(in_cluster, &tls).await;
        reads.answered().then_some(reads)
    }

    /// Every read of the cluster's objects, in one wave over kept connections
    /// ([`READS_AT_ONCE`] at a time each): each collection holding several of the objects
    /// with one LIST of those carrying our label, each other object with a GET, each
    /// prune's LIST and the NodeJoinRequests' LIST.
    async fn read_all(&self, in_cluster: &InCluster, tls: &Tls) -> Reads {
        let prunes = async {
            let mut lists = Vec::with_capacity(in_cluster.prune.len());
            for some in in_cluster.prune.chunks(READS_AT_ONCE) {
                lists.extend(
                    join_all(some.iter().map(|p| self.prune_list(in_cluster, p, tls))).await,
                );
            }
            lists
        };
        let (listed, singles, prunes, requests) = futures::join!(
            self.list_collections(in_cluster, tls),
            self.read_singles(in_cluster, tls),
            prunes,
            self.list(in_cluster, tls, REQUESTS, REQUESTS_WHAT),
        );
        Reads {
            listed,
            singles,
            prunes,
            requests,
        }
    }

    async fn ensure_all(
        &self,
        key: &ObjectKey,
        in_cluster: &InCluster,
        vpn: Option<&VpnPlan>,
        tls: &Tls,
        result: &mut ClusterResult,
        reads: Reads,
    ) -> Result<(), Failure> {
        // The reads first ([`Executor::read_all`]); an object a LIST did not return (absent,
        // or not labelled yet) is read with a GET after. Then the writes a difference calls
        // for, one after the other in the objects' order (a namespace before what it
        // holds); after a write the prunes' and the requests' LISTs are read again, as the
        // write may have made their collection (the NodeJoinRequest CRD). A converged
        // cluster costs one round of reads, all at once, and no write.
        let Reads {
            listed,
            mut singles,
            prunes: prune_lists,
            requests,
        } = reads;
        let listed = listed?;
        let mut reads = Vec::with_capacity(in_cluster.objects.len());
        for some in in_cluster.objects.chunks(READS_AT_ONCE) {
            let mut got = Vec::with_capacity(some.len());
            for object in some {
                got.push(match listed.get(&object.collection) {
                    Some(items) => ReadOf::Listed(items.get(&object.name)),
                    None => match singles.remove(&object.path()) {
                        Some(answer) => ReadOf::Read(answer),
                        None => ReadOf::Listed(None),
                    },
                });
            }
            reads.extend(
                join_all(
                    some.iter()
                        .zip(got)
                        .map(|(object, got)| self.read_object(in_cluster, tls, object, got)),
                )
                .await,
            );
        }
        let mut wrote = false;
        for (object, got) in in_cluster.objects.iter().zip(reads) {
            wrote |= self.ensure(key, in_cluster, object, got, tls).await?;
        }
        for (prune, list) in in_cluster.prune.iter().zip(prune_lists) {
            let list = if wrote {
                self.prune_list(in_cluster, prune, tls).await
            } else {
                list
            };
            self.prune(key, in_cluster, prune, list?, tls).await?;
        }
        let requests = if wrote {
            self.list(in_cluster, tls, REQUESTS, REQUESTS_WHAT).await
        } else {
            requests
        };
        self.join_requests(key, in_cluster, vpn, tls, result, requests?)
            .await
    }

    /// One pass over the cluster's NodeJoinRequests ([`oi_planner::join::join_step`]):
    /// with the VPN on, the endpoint's peers first (a worker is a peer before it reads its
    /// answer), then the answers, the requests whose Node registered marked so, and the
    /// requests of Nodes deleted since deleted.
    async fn join_requests(
        &self,
        key: &ObjectKey,
        in_cluster: &InCluster,
        vpn: Option<&VpnPlan>,
        tls: &Tls,
        result: &mut ClusterResult,
        list: Value,
    ) -> Result<(), Failure> {
        let what = REQUESTS_WHAT;
        let mut items: BTreeMap<String, Value> = BTreeMap::new();
        let mut requests = Vec::new();
        for item in list["items"].as_array().into_iter().flatten() {
            // An object the CRD's schema let through but our type does not read is not ours
            // to answer.
            if let Ok(r) = serde_json::from_value::<NodeJoinRequest>(item.clone()) {
                items.insert(r.metadata.name.clone(), item.clone());
                requests.push(r);
            }
        }
        result.joined = Some(
            requests
                .iter()
                .filter(|r| {
                    oi_api::find_condition(&r.status.conditions, oi_planner::join::ISSUED)
                        .is_some_and(|c| c.status == oi_api::ConditionStatus::True)
                })
                .map(|r| r.metadata.name.clone())
                .collect(),
        );
        let worker_peers = vpn.is_some_and(|v| {
            v.peers
                .iter()
                .any(|p| oi_planner::vpn::peer_node(&p.name).is_some())
        });
        if requests.is_empty() && !worker_peers {
            result.joined_nodes = Some(Vec::new());
            return Ok(());
        }
        let answerer = match &in_cluster.join {
            Ok(a) => a,
            Err(reason) => {
                return Err(Failure {
                    object: what.into(),
                    reason: format!("cannot answer: {reason}"),
                    retry: false,
                });
            }
        };
        let nodes: BTreeSet<String> = if requests.is_empty() {
            BTreeSet::new()
        } else {
            let list = self.list(in_cluster, tls, "/api/v1/nodes", "Nodes").await?;
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        };
        let now = time::OffsetDateTime::now_utc();
        let step = oi_planner::join::join_step(answerer, vpn, &requests, &nodes, now);
        let peers = step
            .peers
            .as_deref()
            .or_else(|| vpn.map(|v| v.peers.as_slice()))
            .unwrap_or_default();
        result.joined_nodes = Some(oi_planner::join::joined_nodes(&requests, &step, peers, now));

        // 1. The endpoint's peers.
        if let (Some(vpn), Some(peers)) = (vpn, &step.peers) {
            if *peers != vpn.peers {
                self.write_vpn_peers(key, vpn, peers, result)
                    .await
                    .map_err(|reason| Failure {
                        object: format!("the VPN endpoint's peers on {}", vpn.hypervisor),
                        reason,
                        retry: true,
                    })?;
            }
            result.vpn_peers = Some(peers.clone());
        }
        // 2. The answers.
        for (name, answer) in &step.answers {
            let describe = format!("NodeJoinRequest {name}");
            let Some(mut item) = items.get(name).cloned() else {
                continue;
            };
            item["status"] = serde_json::to_value(&answer.status).map_err(|e| Failure {
                object: describe.clone(),
                reason: e.to_string(),
                retry: false,
            })?;
            if self
                .put_status(in_cluster, tls, name, &item, &describe)
                .await?
            {
                match answer.refused {
                    None => self.wrote(key, "issued", &describe),
                    Some(refusal) => self.wrote(
                        key,
                        "refused",
                        &format!("{describe} ({})", refusal.reason()),
                    ),
                }
            }
        }
        // 3. Requests whose Node registered.
        for name in &step.registered {
            let describe = format!("NodeJoinRequest {name}");
            let (Some(mut item), Some(request)) = (
                items.get(name).cloned(),
                requests.iter().find(|r| &r.metadata.name == name),
            ) else {
                continue;
            };
            let mut status = request.status.clone();
            set_condition(
                &mut status.conditions,
                NODE_REGISTERED,
                ConditionStatus::True,
                NODE_REGISTERED,
                &format!("Node {name} registered"),
                now,
            );
            item["status"] = serde_json::to_value(&status).map_err(|e| Failure {
                object: describe.clone(),
                reason: e.to_string(),
                retry: false,
            })?;
            if self
                .put_status(in_cluster, tls, name, &item, &describe)
                .await?
            {
                self.wrote(key, &format!("noted Node {name} registered in"), &describe);
            }
        }
        // 4. Requests of Nodes deleted: the name is free again, the peer went in step 1.
        for name in &step.forget {
            let describe = format!("NodeJoinRequest {name} (its Node was deleted)");
            match self
                .api(
                    in_cluster,
                    tls,
                    &Method::DELETE,
                    &format!("{REQUESTS}/{name}"),
                    None,
                )
                .await
            {
                Ok(r) if r.status == 200 || r.status == 202 => {
                    self.wrote(key, "deleted", &describe);
                }
                Ok(r) if r.status == 404 => {}
                other => return Err(failure_named(&describe, "delete", other)),
            }
        }
        Ok(())
    }

    /// Writes the VPN endpoint's configuration with `peers` to the ingress's hypervisor (its
    /// endpoint applies it without a restart) and records the file's hash.
    async fn write_vpn_peers(
        &self,
        key: &ObjectKey,
        vpn: &VpnPlan,
        peers: &[VpnPeer],
        result: &mut ClusterResult,
    ) -> Result<(), String> {
        let rt = self.runtime(&vpn.hypervisor).map_err(|e| e.to_string())?;
        let file = vpn.file(peers);
        let placed = result
            .files
            .iter_mut()
            .find(|p| p.hypervisor == vpn.hypervisor && p.component == vpn.component);
        let known = placed
            .as_ref()
            .map(|p| p.hashes.clone())
            .unwrap_or_default();
        let hashes = rt
            .write_files(std::slice::from_ref(&file), &known)
            .await
            .map_err(|e| e.to_string())?;
        let hash = hashes.get(&file.path).cloned().unwrap_or_default();
        match placed {
            Some(p) => {
                p.hashes.insert(file.path.clone(), hash);
            }
            None => result.files.push(PlacedFiles {
                hypervisor: vpn.hypervisor.clone(),
                component: vpn.component.clone(),
                hashes: BTreeMap::from([(file.path.clone(), hash)]),
            }),
        }
        Counters::add(&self.counters.files, 1);
        let before: BTreeSet<&str> = vpn.peers.iter().map(|p| p.name.as_str()).collect();
        let after: BTreeSet<&str> = peers.iter().map(|p| p.name.as_str()).collect();
        let mut change = Vec::new();
        let added: Vec<&str> = after.difference(&before).copied().collect();
        let removed: Vec<&str> = before.difference(&after).copied().collect();
        if !added.is_empty() {
            change.push(format!("added {}", added.join(", ")));
        }
        if !removed.is_empty() {
            change.push(format!("removed {}", removed.join(", ")));
        }
        if change.is_empty() {
            change.push("changed".into());
        }
        self.emit(
            Some(&vpn.hypervisor),
            key,
            Some(&vpn.component),
            format!("VPN peers {} ({} in all)", change.join("; "), peers.len()),
        );
        Ok(())
    }

    /// Writes a request's status; `false` when it was deleted meanwhile.
    async fn put_status(
        &self,
        in_cluster: &InCluster,
        tls: &Tls,
        name: &str,
        item: &Value,
        describe: &str,
    ) -> Result<bool, Failure> {
        let body = item.to_string();
        let written = self
            .api(
                in_cluster,
                tls,
                &Method::PUT,
                &format!("{REQUESTS}/{name}/status"),
                Some(&body),
            )
            .await;
        match written {
            Ok(r) if r.status == 200 => Ok(true),
            Ok(r) if r.status == 404 => Ok(false),
            other => Err(failure_named(describe, "write its status", other)),
        }
    }

    /// The objects carrying [`IN_CLUSTER_LABEL`] of each collection that holds more than one
    /// of the cluster's objects, by collection and name. A collection the API server does
    /// not serve yet (a CRD's) is left out: its objects are read one by one.
    async fn list_collections(
        &self,
        in_cluster: &InCluster,
        tls: &Tls,
    ) -> Result<BTreeMap<String, BTreeMap<String, Value>>, Failure> {
        let collections: Vec<&str> = collection_sizes(in_cluster)
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(c, _)| c)
            .collect();
        let mut answers = Vec::with_capacity(collections.len());
        for some in collections.chunks(READS_AT_ONCE) {
            let paths: Vec<String> = some
                .iter()
                .map(|collection| {
                    format!(
                        "{collection}?labelSelector={}",
                        query_escape(&format!("{IN_CLUSTER_LABEL}=true"))
                    )
                })
                .collect();
            let got = join_all(
                paths
                    .iter()
                    .map(|path| self.api(in_cluster, tls, &Method::GET, path, None)),
            )
            .await;
            answers.extend(some.iter().copied().zip(got));
        }
        let mut listed = BTreeMap::new();
        for (collection, answer) in answers {
            let what = format!("the objects of {collection}");
            let list = match answer {
                Ok(r) if r.status == 404 => continue,
                Ok(r) if r.status == 200 => {
                    serde_json::from_slice::<Value>(&r.body).map_err(|e| Failure {
                        object: what.clone(),
                        reason: format!("list: the answer is not JSON: {e}"),
                        retry: false,
                    })?
                }
                other => return Err(failure_named(&what, "list", other)),
            };
            let items: BTreeMap<String, Value> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| Some((i["metadata"]["name"].as_str()?.to_string(), i.clone())))
                .collect();
            listed.insert(collection.to_string(), items);
        }
        Ok(listed)
    }

    /// The objects alone in their collection, each with a GET, by path.
    async fn read_singles(
        &self,
        in_cluster: &InCluster,
        tls: &Tls,
    ) -> BTreeMap<String, Result<HttpsResponse, String>> {
        let sizes = collection_sizes(in_cluster);
        let paths: Vec<String> = in_cluster
            .objects
            .iter()
            .filter(|o| sizes.get(o.collection.as_str()) == Some(&1))
            .map(ClusterObject::path)
            .collect();
        let mut got = BTreeMap::new();
        for some in paths.chunks(READS_AT_ONCE) {
            let answers = join_all(
                some.iter()
                    .map(|path| self.api(in_cluster, tls, &Method::GET, path, None)),
            )
            .await;
            got.extend(some.iter().cloned().zip(answers));
        }
        got
    }

    /// One object as read: from its collection's LIST when that had it, as its GET
    /// answered, otherwise with a GET now.
    async fn read_object(
        &self,
        in_cluster: &InCluster,
        tls: &Tls,
        object: &ClusterObject,
        got: ReadOf<'_>,
    ) -> Result<HttpsResponse, String> {
        match got {
            ReadOf::Listed(Some(item)) => Ok(HttpsResponse {
                status: 200,
                body: serde_json::to_vec(&item_of(item, &object.body)).unwrap_or_default(),
            }),
            ReadOf::Read(answer) => answer,
            ReadOf::Listed(None) => {
                self.api(in_cluster, tls, &Method::GET, &object.path(), None)
                    .await
            }
        }
    }

    /// A list's JSON.
    async fn list(
        &self,
        in_cluster: &InCluster,
        tls: &Tls,
        path: &str,
        what: &str,
    ) -> Result<Value, Failure> {
        match self.api(in_cluster, tls, &Method::GET, path, None).await {
            Ok(r) if r.status == 200 => serde_json::from_slice(&r.body).map_err(|e| Failure {
                object: what.into(),
                reason: format!("list: the answer is not JSON: {e}"),
                retry: false,
            }),
            other => Err(failure_named(what, "list", other)),
        }
    }

    async fn api(
        &self,
        in_cluster: &InCluster,
        tls: &Tls,
        method: &Method,
        path: &str,
        body: Option<&str>,
    ) -> Result<HttpsResponse, String> {
        self.network
            .request(HttpsRequest {
                base: &in_cluster.endpoint,
                method,
                path,
                body,
                tls,
                bearer: None,
            })
            .await
            .map_err(|e| e.reason)
    }

    /// One object, as `got` read it: created when absent, patched when a desired field
    /// differs.
    async fn ensure(
        &self,
        key: &ObjectKey,
        in_cluster: &InCluster,
        object: &ClusterObject,
        got: Result<HttpsResponse, String>,
        tls: &Tls,
    ) -> Result<bool, Failure> {
        let fail = |verb: &str, r: Result<HttpsResponse, String>| failure(object, verb, r);
        let path = object.path();
        let body = object.body.to_string();
        match got {
            Ok(r) if r.status == 404 => {
                let created = self
                    .api(
                        in_cluster,
                        tls,
                        &Method::POST,
                        &object.collection,
                        Some(&body),
                    )
                    .await;
                match created {
                    Ok(r) if r.status == 201 || r.status == 200 => {
                        self.wrote(key, "created", &object.describe);
                        Ok(true)
                    }
                    other => Err(fail("create", other)),
                }
            }
            Ok(r) if r.status == 200 => {
                let actual: Value = serde_json::from_slice(&r.body).map_err(|e| Failure {
                    object: object.describe.clone(),
                    reason: format!("read: the answer is not JSON: {e}"),
                    retry: false,
                })?;
                if holds(&actual, &object.body) {
                    return Ok(false);
                }
                let patched = self
                    .api(in_cluster, tls, &Method::PATCH, &path, Some(&body))
                    .await;
                match patched {
                    Ok(r) if r.status == 200 => {
                        self.wrote(key, "updated", &object.describe);
                        Ok(true)
                    }
                    other => Err(fail("update", other)),
                }
            }
            other => Err(fail("read", other)),
        }
    }

    /// The objects a prune selects, as its LIST answered.
    async fn prune_list(
        &self,
        in_cluster: &InCluster,
        prune: &Prune,
        tls: &Tls,
    ) -> Result<Value, Failure> {
        let list_path = format!(
            "{}?labelSelector={}",
            prune.collection,
            query_escape(&prune.label_selector)
        );
        let what = format!("{}s selected by {}", prune.kind, prune.label_selector);
        self.list(in_cluster, tls, &list_path, &what).await
    }

    /// Deletes the objects of `list` (what `prune` selects) it does not keep.
    async fn prune(
        &self,
        key: &ObjectKey,
        in_cluster: &InCluster,
        prune: &Prune,
        list: Value,
        tls: &Tls,
    ) -> Result<(), Failure> {
        let names = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str());
        for name in names.filter(|n| !prune.keep.contains(*n)) {
            let path = format!("{}/{name}", prune.collection);
            let describe = format!("{} {}", prune.kind, path_name(&prune.collection, name));
            match self
                .api(in_cluster, tls, &Method::DELETE, &path, None)
                .await
            {
                Ok(r) if r.status == 200 || r.status == 202 => {
                    self.wrote(key, "deleted", &describe);
                }
                Ok(r) if r.status == 404 => {}
                other => return Err(failure_named(&describe, "delete", other)),
            }
        }
        Ok(())
    }

    fn wrote(&self, key: &ObjectKey, verb: &str, describe: &str) {
        Counters::add(&self.counters.cluster_writes, 1);
        self.emit(None, key, None, format!("{verb} {describe}"));
    }
}

/// An item of a LIST as a GET of it answers: a list's items may leave out their
/// `apiVersion` and `kind` (the list's own name them), which are the desired object's.
fn item_of(item: &Value, desired: &Value) -> Value {
    let mut item = item.clone();
    if let Some(map) = item.as_object_mut() {
        for field in ["apiVersion", "kind"] {
            if !map.contains_key(field)
                && let Some(v) = desired.get(field)
            {
                map.insert(field.to_string(), v.clone());
            }
        }
    }
    item
}

/// `namespace/name` from a namespaced collection path, else `name`.
fn path_name(collection: &str, name: &str) -> String {
    let mut parts = collection.split('/');
    match parts.position(|p| p == "namespaces") {
        Some(_) => match parts.next() {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        },
        None => name.to_string(),
    }
}

fn failure(object: &ClusterObject, verb: &str, r: Result<HttpsResponse, String>) -> Failure {
    failure_named(&object.describe, verb, r)
}

/// What an unexpected answer (or no answer) to `verb` of `what` means.
fn failure_named(what: &str, verb: &str, r: Result<HttpsResponse, String>) -> Failure {
    match r {
        Err(reason) => Failure {
            object: what.to_string(),
            reason: format!("{verb}: {reason}"),
            retry: true,
        },
        Ok(r) => {
            let status: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            let message = status["message"].as_str().map_or_else(
                || String::from_utf8_lossy(&r.body).trim().to_string(),
                str::to_string,
            );
            // 404 on create: the namespace or the CRD's resource is not served yet. 409: a
            // conflict with another writer. 429 and 5xx: the API server is busy or catching up.
            let retry = matches!(r.status, 404 | 409 | 429) || r.status >= 500;
            Failure {
                object: what.to_string(),
                reason: format!("{verb} answered {}: {message}", r.status),
                retry,
            }
        }
    }
}

/// Percent-encodes a query value (label selectors: `=`, `,`, `!` and the like).
fn query_escape(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
