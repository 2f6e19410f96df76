//! etcd snapshots of a cluster, and restoring a cluster from one: the file format, the
//! checks that refuse a corrupt or foreign snapshot before anything is stopped, and the plan
//! of a restore.
//!
//! A snapshot file is a header, etcd's own snapshot as its maintenance API streams it (a
//! bbolt database followed by the SHA-256 of it, which `etcdctl snapshot restore` checks),
//! and a footer. It is written as etcd streams it ([`SnapshotWriter`]), never held whole:
//! what depends on all of etcd's bytes (their size and checksum) comes after them.
//!
//! ```text
//! oneinfra-etcd-snapshot/v2\n
//! {"cluster":{"namespace":..,"name":..},"takenAt":..,"revision":..,"etcdVersion":..,
//!  "kubernetesVersion":..,"member":..,"clusterManifest":"<YAML>"}\n
//! <N bytes: etcd's snapshot>
//! <footer, 48 bytes: SHA-256 of the N bytes (32), N (8, big endian), "oisnap2\n">
//! ```
//!
//! Files of the first version (`oneinfra-etcd-snapshot/v1`, with `size` and `sha256` in the
//! header and no footer) are still read.
//!
//! The manifest is the Cluster object as it was (its CAs and keys included: the snapshot is
//! as secret as the cluster's Secrets, which etcd holds anyway), so that a deleted cluster
//! comes back whole: the same CAs, so kubeconfigs and joined workers keep trusting it.
//!
//! A restore, once the snapshot passed every check ([`Snapshot::decode`], [`target`]):
//!
//! ```text
//! every control plane replica, together:
//!   the snapshot written to <data>/restore/ (in parts a file writer carries), joined,
//!   `etcdctl snapshot restore` into <data>/etcd.restore as a member of a new cluster of
//!   every replica (status.etcdMember: new, all of them)          nothing stopped yet
//! then every replica's etcd and control plane pod removed, and every API server alone's
//!   (the ingress stays),
//!   <data>/etcd replaced by <data>/etcd.restore
//! then the plan's usual steps: etcd's members start together, the control plane after
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use oi_api::versions::INFRA;
use oi_api::{
    Cluster, Component, ComponentRole, ComponentSpec, EtcdInitialClusterState, EtcdMemberStart,
    ObjectKey, ObjectMeta, World,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::plan::{ClusterPlan, Plan, PlanOptions, plan_prepared};
use crate::prepare::{control_plane_name, prepare_with, replica_order};
use crate::{ComponentPlan, url_host};

/// The first line of a snapshot file.
pub const MAGIC: &[u8] = b"oneinfra-etcd-snapshot/v2\n";

/// The first line of the first version's files (size and checksum in the header).
pub const MAGIC_V1: &[u8] = b"oneinfra-etcd-snapshot/v1\n";

/// The last bytes of a file: its footer's own mark.
const FOOTER_MARK: &[u8; 8] = b"oisnap2\n";

/// The footer's size: SHA-256, size, mark.
pub const FOOTER_BYTES: usize = 32 + 8 + FOOTER_MARK.len();

/// bbolt's magic number, in the meta page of every etcd database (little endian at offset
/// 16 of the file).
const BOLT_MAGIC: u32 = 0xED0C_DAED;

/// The cluster a snapshot is of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotOf {
    pub namespace: String,
    pub name: String,
}

/// What a snapshot file says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotHeader {
    pub cluster: SnapshotOf,
    #[serde(with = "time::serde::rfc3339")]
    pub taken_at: OffsetDateTime,
    /// etcd's revision when it was taken.
    pub revision: u64,
    /// Bytes of etcd's snapshot (in the header of version 1 files, in the footer since).
    #[serde(default, skip_serializing)]
    pub size: u64,
    /// Hex SHA-256 of etcd's snapshot (likewise).
    #[serde(default, skip_serializing)]
    pub sha256: String,
    /// The version of the member it was taken from.
    pub etcd_version: String,
    pub kubernetes_version: String,
    /// The member it was taken from.
    pub member: String,
    /// The Cluster object as it was (YAML).
    pub cluster_manifest: String,
}

/// A snapshot file that passed every check.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub header: SnapshotHeader,
    /// etcd's snapshot: a bbolt database and its SHA-256.
    pub etcd: Arc<Vec<u8>>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("cluster", &self.header.cluster)
            .field("taken_at", &self.header.taken_at)
            .field("revision", &self.header.revision)
            .field("size", &self.etcd.len())
            .finish_non_exhaustive()
    }
}

/// Why a snapshot is refused. Every check runs before anything is stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "{source_name} is not a oneinfra snapshot (it does not start with {:?}){hint}",
        String::from_utf8_lossy(MAGIC).trim_end()
    )]
    NotASnapshot { source_name: String, hint: String },
    #[error("{source_name}: the snapshot header is unreadable: {reason}")]
    Header { source_name: String, reason: String },
    #[error(
        "{source_name} is truncated: it says it holds {expected} bytes of etcd snapshot, it holds {actual}"
    )]
    Truncated {
        source_name: String,
        expected: u64,
        actual: u64,
    },
    #[error(
        "{source_name} is truncated: it does not end with a snapshot's footer (a copy or upload cut short?)"
    )]
    Unfinished { source_name: String },
    #[error("{source_name} is corrupt: {reason}")]
    Corrupt { source_name: String, reason: String },
    #[error("{source_name} is a snapshot of cluster {of}, not of {target}{hint}")]
    Foreign {
        source_name: String,
        of: String,
        target: String,
        hint: String,
    },
    #[error(
        "{source_name} holds the data of another cluster named {target}: none of its CAs is one of {target}'s (it was taken in another world, or before {target} was made anew); nothing was stopped. To put that data into {target} all the same, pass --allow-other-cluster (so too if every CA of {target} was rotated since the snapshot was taken)"
    )]
    OtherCluster { source_name: String, target: String },
    #[error("cluster {cluster} is being deleted: let a reconcile finish deleting it, then restore")]
    BeingDeleted { cluster: String },
    #[error("{source_name}: the cluster manifest it holds is invalid: {reason}")]
    Manifest { source_name: String, reason: String },
    #[error("--hypervisor {hypervisor}: {reason}")]
    Hypervisor { hypervisor: String, reason: String },
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Checks etcd's own snapshot: a bbolt database (its magic number) followed by the SHA-256
/// of it.
///
/// # Errors
/// The reason, for [`SnapshotError::Corrupt`].
pub fn check_etcd_snapshot(etcd: &[u8]) -> Result<(), String> {
    let mut check = EtcdCheck::default();
    check.update(etcd);
    check.finish()
}

/// [`check_etcd_snapshot`] over bytes that arrive in pieces, holding none but the last 32.
#[derive(Default)]
struct EtcdCheck {
    /// Of every byte but the last 32 (etcd's database, whose SHA-256 etcd appends).
    database: Sha256,
    /// The last 32 bytes seen, not yet known to be part of the database.
    held: Vec<u8>,
    /// The first 20 bytes (bbolt's magic number is at 16).
    start: Vec<u8>,
    size: u64,
}

impl EtcdCheck {
    fn update(&mut self, chunk: &[u8]) {
        self.size += chunk.len() as u64;
        let missing = 20usize.saturating_sub(self.start.len());
        self.start
            .extend_from_slice(&chunk[..missing.min(chunk.len())]);
        // All but the last 32 bytes seen so far belong to the database.
        if chunk.len() >= 32 {
            let (database, last) = chunk.split_at(chunk.len() - 32);
            self.database.update(&self.held);
            self.database.update(database);
            self.held.clear();
            self.held.extend_from_slice(last);
        } else {
            self.held.extend_from_slice(chunk);
            if self.held.len() > 32 {
                let cut = self.held.len() - 32;
                self.database.update(&self.held[..cut]);
                self.held.drain(..cut);
            }
        }
    }

    fn finish(self) -> Result<(), String> {
        if self.size < 4096 + 32 {
            return Err(format!(
                "{} bytes are too few for an etcd database",
                self.size
            ));
        }
        let magic = u32::from_le_bytes([
            self.start[16],
            self.start[17],
            self.start[18],
            self.start[19],
        ]);
        if magic != BOLT_MAGIC {
            return Err("it is not an etcd (bbolt) database".to_string());
        }
        if self.database.finalize().as_slice() != self.held.as_slice() {
            return Err(
                "etcd's own checksum (the SHA-256 after the database) does not match".into(),
            );
        }
        Ok(())
    }
}

/// The header of a snapshot of `cluster` (as `world` holds it) taken from `member` at etcd
/// revision `revision`; its size and checksum are the writer's to fill in.
///
/// # Errors
/// When the cluster cannot be written as a manifest.
pub fn snapshot_header(
    key: &ObjectKey,
    cluster: &Cluster,
    revision: u64,
    etcd_version: &str,
    member: &str,
    taken_at: OffsetDateTime,
) -> Result<SnapshotHeader, String> {
    let mut only = World::default();
    let mut kept = cluster.clone();
    kept.status.conditions.clear();
    only.clusters.insert(key.clone(), kept);
    let manifest = only.to_yaml().map_err(|e| e.to_string())?;
    Ok(SnapshotHeader {
        cluster: SnapshotOf {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        },
        taken_at: taken_at.replace_nanosecond(0).unwrap_or(taken_at),
        revision,
        size: 0,
        sha256: String::new(),
        etcd_version: etcd_version.to_string(),
        kubernetes_version: cluster.spec.kubernetes_version.clone(),
        member: member.to_string(),
        cluster_manifest: manifest,
    })
}

/// Writes a snapshot file as etcd's snapshot streams through it, holding none of it:
/// [`SnapshotWriter::new`] gives the file's first bytes, [`SnapshotWriter::update`] takes
/// etcd's bytes in order (they go into the file as they are), and
/// [`SnapshotWriter::finish`] checks them as [`check_etcd_snapshot`] does and gives the
/// footer. A file whose etcd snapshot fails the check must not be kept: the caller ends the
/// write with an error instead of the footer.
pub struct SnapshotWriter {
    /// Of every byte (the footer's checksum).
    all: Sha256,
    etcd: EtcdCheck,
}

impl fmt::Debug for SnapshotWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotWriter")
            .field("size", &self.etcd.size)
            .finish_non_exhaustive()
    }
}

impl SnapshotWriter {
    /// A writer, and the file's first bytes: its mark and `header`'s line.
    pub fn new(header: &SnapshotHeader) -> (SnapshotWriter, Vec<u8>) {
        // A header of plain strings and numbers always serializes.
        let line = serde_json::to_vec(header).unwrap_or_default();
        let mut head = Vec::with_capacity(MAGIC.len() + line.len() + 1);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&line);
        head.push(b'\n');
        let writer = SnapshotWriter {
            all: Sha256::new(),
            etcd: EtcdCheck::default(),
        };
        (writer, head)
    }

    /// The next bytes of etcd's snapshot.
    pub fn update(&mut self, chunk: &[u8]) {
        self.all.update(chunk);
        self.etcd.update(chunk);
    }

    /// Bytes of etcd's snapshot so far.
    pub fn size(&self) -> u64 {
        self.etcd.size
    }

    /// The footer, once etcd's snapshot passed the check; its size and hex SHA-256 besides.
    ///
    /// # Errors
    /// Why etcd's snapshot is not sound (as [`check_etcd_snapshot`] says it).
    pub fn finish(self) -> Result<(Vec<u8>, u64, String), String> {
        let size = self.etcd.size;
        self.etcd.finish()?;
        let sum = self.all.finalize();
        let mut footer = Vec::with_capacity(FOOTER_BYTES);
        footer.extend_from_slice(&sum);
        footer.extend_from_slice(&size.to_be_bytes());
        footer.extend_from_slice(FOOTER_MARK);
        Ok((footer, size, hex::encode(sum)))
    }
}

impl Snapshot {
    /// A snapshot of `cluster` (as `world` holds it) from etcd's snapshot `etcd`, which must
    /// pass [`check_etcd_snapshot`].
    ///
    /// # Errors
    /// When etcd's snapshot does not pass, or the cluster cannot be written as a manifest.
    pub fn new(
        key: &ObjectKey,
        cluster: &Cluster,
        etcd: Vec<u8>,
        revision: u64,
        etcd_version: &str,
        member: &str,
        taken_at: OffsetDateTime,
    ) -> Result<Snapshot, String> {
        check_etcd_snapshot(&etcd)?;
        let mut header = snapshot_header(key, cluster, revision, etcd_version, member, taken_at)?;
        header.size = etcd.len() as u64;
        header.sha256 = sha256_hex(&etcd);
        Ok(Snapshot {
            header,
            etcd: Arc::new(etcd),
        })
    }

    /// The file's bytes, as [`SnapshotWriter`] writes them.
    pub fn encode(&self) -> Vec<u8> {
        let (mut writer, mut out) = SnapshotWriter::new(&self.header);
        writer.update(&self.etcd);
        out.extend_from_slice(&self.etcd);
        match writer.finish() {
            Ok((footer, _, _)) => out.extend_from_slice(&footer),
            // Only a sound snapshot is ever made (new, decode): this writes none.
            Err(_) => out.clear(),
        }
        out
    }

    /// Reads and checks a snapshot file (`source_name` names it in errors), of either
    /// version: its header, its size, its checksum, and etcd's own.
    ///
    /// # Errors
    /// [`SnapshotError`] naming the file and what is wrong.
    pub fn decode(bytes: &[u8], source_name: &str) -> Result<Snapshot, SnapshotError> {
        let (rest, v1) = match (bytes.strip_prefix(MAGIC), bytes.strip_prefix(MAGIC_V1)) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => {
                let hint = if bytes.len() >= 20
                    && u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]])
                        == BOLT_MAGIC
                {
                    "; it looks like a bare etcd snapshot (etcdctl snapshot save): restore takes \
                     the snapshots oi cluster snapshot writes, which name their cluster"
                        .to_string()
                } else if bytes.is_empty() {
                    "; it is empty".to_string()
                } else {
                    String::new()
                };
                return Err(SnapshotError::NotASnapshot {
                    source_name: source_name.to_string(),
                    hint,
                });
            }
        };
        let header_error = |reason: String| SnapshotError::Header {
            source_name: source_name.to_string(),
            reason,
        };
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| header_error("no end of header line (truncated?)".into()))?;
        let mut header: SnapshotHeader =
            serde_json::from_slice(&rest[..end]).map_err(|e| header_error(e.to_string()))?;
        let mut etcd = &rest[end + 1..];
        let truncated = |expected: u64, actual: u64| SnapshotError::Truncated {
            source_name: source_name.to_string(),
            expected,
            actual,
        };
        if !v1 {
            let Some(body) = etcd.strip_suffix(FOOTER_MARK.as_slice()) else {
                return Err(SnapshotError::Unfinished {
                    source_name: source_name.to_string(),
                });
            };
            let Some(split) = body.len().checked_sub(40) else {
                return Err(SnapshotError::Unfinished {
                    source_name: source_name.to_string(),
                });
            };
            let (data, footer) = body.split_at(split);
            let mut size = [0u8; 8];
            size.copy_from_slice(&footer[32..40]);
            header.size = u64::from_be_bytes(size);
            header.sha256 = hex::encode(&footer[..32]);
            etcd = data;
        }
        if etcd.len() as u64 != header.size {
            return Err(truncated(header.size, etcd.len() as u64));
        }
        let corrupt = |reason: String| SnapshotError::Corrupt {
            source_name: source_name.to_string(),
            reason,
        };
        if sha256_hex(etcd) != header.sha256 {
            return Err(corrupt(format!(
                "its SHA-256 is {}, the file says {}",
                sha256_hex(etcd),
                header.sha256
            )));
        }
        check_etcd_snapshot(etcd).map_err(corrupt)?;
        Ok(Snapshot {
            header,
            etcd: Arc::new(etcd.to_vec()),
        })
    }

    /// The key of the cluster it is of.
    pub fn cluster_key(&self) -> ObjectKey {
        ObjectKey::new(
            self.header.cluster.namespace.clone(),
            self.header.cluster.name.clone(),
        )
    }

    /// The Cluster object it holds.
    ///
    /// # Errors
    /// [`SnapshotError::Manifest`] when it is not one valid Cluster of the snapshot's name.
    pub fn cluster(&self, source_name: &str) -> Result<Cluster, SnapshotError> {
        let error = |reason: String| SnapshotError::Manifest {
            source_name: source_name.to_string(),
            reason,
        };
        let world = World::load(&self.header.cluster_manifest, source_name)
            .map_err(|e| error(e.to_string()))?;
        let key = self.cluster_key();
        match (world.clusters.len(), world.clusters.get(&key)) {
            (1, Some(c)) if world.components.is_empty() && world.hypervisors.is_empty() => {
                Ok(c.clone())
            }
            _ => Err(error(format!(
                "it must hold the one Cluster {key} and nothing else"
            ))),
        }
    }
}

/// The name of a snapshot of `key` taken at `at` (`oi cluster snapshot` into a directory, and
/// oi-manager's schedules): `<namespace>-<name>-<UTC time>.oisnap`, which sorts by time.
pub fn snapshot_name(key: &ObjectKey, at: OffsetDateTime) -> String {
    let stamp = at
        .to_offset(time::UtcOffset::UTC)
        .format(time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .unwrap_or_default();
    format!("{}-{}-{stamp}.oisnap", key.namespace, key.name)
}

/// Whether `name` is one of [`snapshot_name`]'s for `key`.
pub fn is_snapshot_of(key: &ObjectKey, name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(&format!("{}-{}-", key.namespace, key.name))
        .and_then(|r| r.strip_suffix("Z.oisnap"))
    else {
        return false;
    };
    let b = rest.as_bytes();
    b.len() == 15
        && b[8] == b'T'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 8 || c.is_ascii_digit())
}

/// Of the cluster's snapshots `names` (any order), those beyond the `keep` newest.
pub fn beyond_retention<'a>(key: &ObjectKey, names: &[&'a str], keep: u32) -> Vec<&'a str> {
    let mut ours: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| is_snapshot_of(key, n))
        .collect();
    // The time stamp sorts as the time.
    ours.sort_unstable();
    let surplus = ours.len().saturating_sub(keep as usize);
    ours.truncate(surplus);
    ours
}

/// Every CA certificate a cluster trusts (each current one, and the next or previous one of
/// a rotation under way), whitespace aside: what tells one cluster from another of the same
/// name.
pub fn ca_certificates(cluster: &oi_api::Cluster) -> std::collections::BTreeSet<String> {
    let end = "-----END CERTIFICATE-----";
    oi_pki::CaKind::ALL
        .into_iter()
        .filter_map(|kind| crate::rotation::trust_bundle(cluster, kind))
        .flat_map(|bundle| {
            bundle
                .split_inclusive(end)
                .filter(|pem| pem.ends_with(end))
                .map(|pem| pem.split_whitespace().collect::<String>())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The cluster of `world` a restore of `snapshot` acts on, checked: `cluster` (the
/// `--cluster` the user named, else the snapshot's) must be the snapshot's, not being
/// deleted, and, when the world holds it, the same cluster (a CA in common) unless
/// `allow_other`. When the world does not hold it, it is added from the snapshot, its control
/// plane replicas pinned to `hypervisors` when given (in replica order; the others placed as
/// usual).
///
/// # Errors
/// [`SnapshotError::Foreign`], [`SnapshotError::OtherCluster`],
/// [`SnapshotError::BeingDeleted`], [`SnapshotError::Manifest`], [`SnapshotError::Hypervisor`].
pub fn target(
    world: &mut World,
    snapshot: &Snapshot,
    cluster: Option<&ObjectKey>,
    hypervisors: &[String],
    source_name: &str,
    allow_other: bool,
) -> Result<ObjectKey, SnapshotError> {
    let of = snapshot.cluster_key();
    if let Some(wanted) = cluster
        && *wanted != of
    {
        return Err(SnapshotError::Foreign {
            source_name: source_name.to_string(),
            of: of.to_string(),
            target: wanted.to_string(),
            hint: String::new(),
        });
    }
    for h in hypervisors {
        match world.hypervisors.get(&ObjectKey::cluster_scoped(h.clone())) {
            None => {
                return Err(SnapshotError::Hypervisor {
                    hypervisor: h.clone(),
                    reason: "not in the manifests".into(),
                });
            }
            Some(hv) if hv.spec.public => {
                return Err(SnapshotError::Hypervisor {
                    hypervisor: h.clone(),
                    reason: "is public; control plane replicas go on private hypervisors".into(),
                });
            }
            Some(_) => {}
        }
    }
    if let Some(existing) = world.clusters.get(&of) {
        if existing.is_being_deleted() {
            return Err(SnapshotError::BeingDeleted {
                cluster: of.to_string(),
            });
        }
        // The same name is not the same cluster: its CAs are.
        if !allow_other {
            let theirs = ca_certificates(&snapshot.cluster(source_name)?);
            let ours = ca_certificates(existing);
            if !theirs.is_empty() && !ours.is_empty() && theirs.is_disjoint(&ours) {
                return Err(SnapshotError::OtherCluster {
                    source_name: source_name.to_string(),
                    target: of.to_string(),
                });
            }
        }
        if !hypervisors.is_empty() {
            return Err(SnapshotError::Hypervisor {
                hypervisor: hypervisors.join(","),
                reason: format!(
                    "cluster {of} exists and its replicas stay where they are; \
                     --hypervisor places the replicas of a cluster the restore brings back"
                ),
            });
        }
        return Ok(of);
    }
    let cluster = snapshot.cluster(source_name)?;
    if !hypervisors.is_empty() {
        let replicas = cluster.control_plane_replicas() as usize;
        if hypervisors.len() > replicas {
            return Err(SnapshotError::Hypervisor {
                hypervisor: hypervisors.join(","),
                reason: format!(
                    "{} hypervisors for {replicas} control plane replicas",
                    hypervisors.len()
                ),
            });
        }
        for (i, h) in hypervisors.iter().enumerate() {
            let mut meta = ObjectMeta::named(control_plane_name(&of.name, i as u32));
            if of.namespace != oi_api::DEFAULT_NAMESPACE {
                meta.namespace = Some(of.namespace.clone());
            }
            let c = Component::new(
                meta,
                ComponentSpec {
                    cluster: of.name.clone(),
                    role: ComponentRole::ControlPlane,
                    hypervisor: Some(h.clone()),
                },
            );
            world.components.insert(
                ObjectKey::new(of.namespace.clone(), c.metadata.name.clone()),
                c,
            );
        }
    }
    world.clusters.insert(of.clone(), cluster);
    Ok(of)
}

/// One replica's part of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreMember {
    pub component: String,
    pub hypervisor: String,
    /// The replica's data directory: etcd's is `<data_dir>/etcd`.
    pub data_dir: String,
    /// The member name, peer URL and initial cluster (`name=url,...`) it is restored as.
    pub name: String,
    pub peer_url: String,
    pub initial_cluster: String,
}

impl RestoreMember {
    pub fn etcd_dir(&self) -> String {
        format!("{}/etcd", self.data_dir)
    }

    /// Where the restored data directory is made before it replaces etcd's.
    pub fn staging_dir(&self) -> String {
        format!("{}/etcd.restore", self.data_dir)
    }

    /// Where the snapshot is put while it is restored.
    pub fn snapshot_dir(&self) -> String {
        format!("{}/restore", self.data_dir)
    }
}

/// A restore, attached to the cluster's [`crate::Convergence`]: the engine runs it before
/// the etcd step.
#[derive(Clone, PartialEq, Eq)]
pub struct Restore {
    /// etcd's snapshot (a bbolt database and its SHA-256).
    pub etcd: Arc<Vec<u8>>,
    /// Every live control plane replica, in replica order.
    pub members: Vec<RestoreMember>,
    /// The API servers alone (`spec.apiServerReplicas`), as `(hypervisor, component)`:
    /// stopped with the replicas, so that none serves from its cache of the replaced data.
    pub api_servers: Vec<(String, String)>,
    /// The image whose `etcdctl` restores (the cluster's etcd), and the one whose shell
    /// joins and moves files (the toolbox).
    pub etcd_image: String,
    pub toolbox_image: String,
}

impl fmt::Debug for Restore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Restore")
            .field("snapshot_bytes", &self.etcd.len())
            .field("members", &self.members)
            .field("etcd_image", &self.etcd_image)
            .finish_non_exhaustive()
    }
}

/// The plan of restoring cluster `key` of `world` (see [`target`]) from `snapshot`: the
/// world prepared as usual, then every live replica of the cluster made a founder of a new
/// etcd cluster of all of them (`status.etcdMember`), and the restore attached to the
/// cluster's convergence. The other clusters of the world are planned as usual.
pub fn plan_restore(
    world: World,
    key: &ObjectKey,
    snapshot: &Snapshot,
    now: OffsetDateTime,
    options: &PlanOptions,
) -> Plan {
    let mut prepared = prepare_with(world, now, &options.prepare);
    let mut members = Vec::new();
    if !prepared.failures.contains_key(key) {
        members = refound(&mut prepared.world, key);
    }
    let mut plan = plan_prepared(prepared, now, &options.render);
    let repository = options.render.image_repository.as_deref();
    let etcd_image = plan
        .world
        .clusters
        .get(key)
        .and_then(|c| oi_api::versions::find_release(&c.spec.kubernetes_version))
        .map(|r| r.etcd.reference(repository))
        .unwrap_or_default();
    if let Some(ClusterPlan::Converge(c)) = plan.clusters.get_mut(key) {
        let members = members
            .into_iter()
            .filter(|m| c.component(&m.component).is_some())
            .collect();
        let api_servers = c
            .components
            .iter()
            .filter(|p| p.role == ComponentRole::ApiServer)
            .map(|p| (p.hypervisor.clone(), p.name().to_string()))
            .collect();
        c.restore = Some(Restore {
            etcd: Arc::clone(&snapshot.etcd),
            members,
            api_servers,
            etcd_image,
            toolbox_image: INFRA.toolbox.reference(repository),
        });
    }
    plan
}

/// Makes every live, placed replica of `key` with its ports a founder of a new etcd cluster
/// of all of them; returns their restore parts.
fn refound(world: &mut World, key: &ObjectKey) -> Vec<RestoreMember> {
    let mut replicas: Vec<(String, String, String)> = Vec::new();
    for c in world.components_of(key) {
        if c.spec.role != ComponentRole::ControlPlane || c.metadata.is_being_deleted() {
            continue;
        }
        let (Some(h), Some(port)) = (
            world.hypervisor_of(c),
            c.status.host_port(crate::ports::names::ETCD_PEER),
        ) else {
            continue;
        };
        replicas.push((
            c.metadata.name.clone(),
            h.metadata.name.clone(),
            format!("https://{}:{port}", url_host(&h.spec.ip_address)),
        ));
    }
    replicas.sort_by_key(|(name, _, _)| replica_order(&key.name, name));
    let initial: BTreeMap<String, String> = replicas
        .iter()
        .map(|(n, _, url)| (n.clone(), url.clone()))
        .collect();
    let initial_flag = initial
        .iter()
        .map(|(n, u)| format!("{n}={u}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut out = Vec::new();
    for (name, hypervisor, peer_url) in replicas {
        let ck = ObjectKey::new(key.namespace.clone(), name.clone());
        if let Some(c) = world.components.get_mut(&ck) {
            c.status.etcd_member = Some(EtcdMemberStart {
                initial_cluster: initial.clone(),
                initial_cluster_state: EtcdInitialClusterState::New,
            });
        }
        out.push(RestoreMember {
            data_dir: oi_api::runtime::paths::component_data_dir(&key.namespace, &key.name, &name),
            component: name.clone(),
            hypervisor,
            name,
            peer_url,
            initial_cluster: initial_flag.clone(),
        });
    }
    out
}

/// The replicas a restore stops: every live control plane replica of the plan.
pub fn replicas(c: &crate::Convergence) -> impl Iterator<Item = &ComponentPlan> {
    c.components
        .iter()
        .filter(|c| c.role == ComponentRole::ControlPlane)
}

#[cfg(test)]
mod tests;
