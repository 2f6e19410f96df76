//! Snapshots of a running cluster's etcd, and the restore of a cluster from one (the steps
//! `oi_planner::snapshot` plans; see there for the order and why).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::join_all;
use oi_api::ObjectKey;
use oi_api::runtime::{ContainerSpec, HostFile, Mount};
use oi_cri::HypervisorRuntime;
use oi_planner::EtcdPlan;
use oi_planner::snapshot::{Restore, RestoreMember, SnapshotWriter, snapshot_header};

use crate::error::{Step, StepError};
use crate::etcd::EtcdClient;
use crate::https::{Network, Tls};
use crate::progress::Counters;
use crate::{Executor, selector};

/// A snapshot file written ([`take_snapshot`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// etcd's revision just before it was taken.
    pub revision: u64,
    /// The version of the member that gave it.
    pub version: String,
    /// The member that gave it.
    pub member: String,
    /// Bytes of etcd's snapshot in it.
    pub etcd_bytes: u64,
    /// Bytes of the whole file, as its destination took them.
    pub written: u64,
}

/// The cluster a snapshot file is of, and when it is taken: what its header says.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotOf<'a> {
    pub key: &'a ObjectKey,
    pub cluster: &'a oi_api::Cluster,
    pub taken_at: time::OffsetDateTime,
}

/// A snapshot file's bytes as they are made: a failed item means the file is not sound and
/// must not be kept (its destination discards what it took).
pub type SnapshotStream = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;

/// Pieces of the file in flight between etcd and the destination, at most.
const IN_FLIGHT: usize = 8;

/// Why a transfer failed: the snapshot's side, or its destination.
enum Failed {
    Source(String),
    DestinationGone,
}

/// Takes a snapshot of the cluster into a snapshot file (`oi_planner::snapshot`'s format)
/// that `put` stores as it is made, never held whole: the first member whose status answers
/// streams etcd's snapshot; its bytes go to `put` as they arrive, checked on the way (etcd's
/// own checksum, bbolt's mark); the footer follows once they passed. When they do not, or
/// etcd's stream breaks, the stream `put` reads ends with an error, and `put` must then keep
/// nothing (`oi_s3::Store::put_stream` does so). A transfer that broke is not taken again
/// from another member: its destination took part of it; the caller runs it again.
///
/// # Errors
/// The member's failure, the snapshot's, or the destination's (`put`'s own error).
pub async fn take_snapshot<N, P, F>(
    network: &N,
    etcd: &EtcdPlan,
    of: SnapshotOf<'_>,
    put: P,
) -> Result<Taken, String>
where
    N: Network,
    P: FnOnce(SnapshotStream) -> F,
    F: Future<Output = Result<u64, String>>,
{
    let identity = etcd
        .client
        .as_ref()
        .map_err(|r| format!("etcd client identity: {r}"))?;
    let tls = Tls {
        ca_pem: identity.server_ca.clone(),
        identity: Some((identity.certificate.clone(), identity.private_key.clone())),
    };
    let client = EtcdClient { network, tls: &tls };
    let mut failures = Vec::new();
    let mut source = None;
    for m in &etcd.members {
        match client.status(&m.client_url).await {
            Ok(status) => {
                source = Some((m, status));
                break;
            }
            Err(e) => failures.push(format!("{}: {e}", m.name)),
        }
    }
    let Some((member, status)) = source else {
        if failures.is_empty() {
            return Err("the cluster has no etcd member to take a snapshot from".into());
        }
        return Err(format!("no etcd member answered: {}", failures.join("; ")));
    };
    let header = snapshot_header(
        of.key,
        of.cluster,
        status.revision,
        &status.version,
        &member.name,
        of.taken_at,
    )?;
    let (mut writer, head) = SnapshotWriter::new(&header);
    let (out, received) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(IN_FLIGHT);
    let (sink, mut from_etcd) = tokio::sync::mpsc::channel::<Bytes>(IN_FLIGHT);
    let streaming = async {
        let etcd_side = async {
            let result = client.snapshot(&member.client_url, &sink).await;
            drop(sink);
            result
        };
        let forwarding = async {
            out.send(Ok(Bytes::from(head)))
                .await
                .map_err(|_| Failed::DestinationGone)?;
            while let Some(piece) = from_etcd.recv().await {
                writer.update(&piece);
                out.send(Ok(piece))
                    .await
                    .map_err(|_| Failed::DestinationGone)?;
            }
            Ok(())
        };
        let (etcd_side, forwarding) = tokio::join!(etcd_side, forwarding);
        let outcome = match (etcd_side, forwarding) {
            (_, Err(gone)) => Err(gone),
            (Err(e), Ok(())) => Err(Failed::Source(format!("{}: {e}", member.name))),
            (Ok(_), Ok(())) => match writer.finish() {
                Ok((footer, size, _)) => match out.send(Ok(Bytes::from(footer))).await {
                    Ok(()) => Ok(size),
                    Err(_) => Err(Failed::DestinationGone),
                },
                Err(e) => Err(Failed::Source(format!(
                    "{}: the snapshot etcd gave is not sound: {e}",
                    member.name
                ))),
            },
        };
        if let Err(Failed::Source(reason)) = &outcome {
            // The destination keeps nothing of an unsound file.
            let _ = out.send(Err(std::io::Error::other(reason.clone()))).await;
        }
        drop(out);
        outcome
    };
    let stream = futures::stream::unfold(received, |mut received| async move {
        received.recv().await.map(|item| (item, received))
    })
    .boxed();
    let (streamed, stored) = tokio::join!(streaming, put(stream));
    match (streamed, stored) {
        (Ok(etcd_bytes), Ok(written)) => Ok(Taken {
            revision: status.revision,
            version: status.version,
            member: member.name.clone(),
            etcd_bytes,
            written,
        }),
        (Err(Failed::Source(reason)), _) => Err(reason),
        (_, Err(e)) => Err(e),
        (Err(Failed::DestinationGone), Ok(_)) => {
            Err("the snapshot's destination stopped taking it".into())
        }
    }
}

/// The snapshot travels to a hypervisor as files of at most this many bytes: one file
/// writer each (their base64 stays under the writer's batch size and the kernel's limit on
/// a process's environment).
const PART_BYTES: usize = 700 * 1024;

/// The name of the job putting the restored data in place.
pub const SWAP_JOB: &str = "etcd data swap";

/// Bound on each restore job (joining the parts, `etcdutl snapshot restore`, the swap).
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// The script joining the parts and unpacking them (gzip, see [`pack`]): `$1` is the
/// replica's data directory. A part lost or damaged fails `gunzip` here, or `etcdutl`'s check
/// of the snapshot's SHA-256 after.
const JOIN_SCRIPT: &str = r#"set -eu
set -o pipefail
umask 077
d="$1"
rm -rf "$d/etcd.restore" "$d/restore/snapshot.db"
cat "$d"/restore/part-* | gunzip > "$d/restore/snapshot.db"
rm -f "$d"/restore/part-*
"#;

/// The script putting the restored data in place: `$1` is the replica's data directory.
const SWAP_SCRIPT: &str = r#"set -eu
d="$1"
test -d "$d/etcd.restore/member"
rm -rf "$d/etcd"
mv "$d/etcd.restore" "$d/etcd"
rm -rf "$d/restore"
"#;

fn data_mount(m: &RestoreMember) -> Mount {
    Mount {
        host_path: m.data_dir.clone(),
        container_path: m.data_dir.clone(),
        readonly: false,
    }
}

fn shell_job(name: &str, script: &str, m: &RestoreMember, image: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        image: image.to_string(),
        command: vec!["sh".into(), "-c".into(), script.into(), name.into()],
        args: vec![m.data_dir.clone()],
        env: BTreeMap::new(),
        mounts: vec![data_mount(m)],
        privileged: false,
        resources: None,
    }
}

/// The job restoring the snapshot into the replica's staging directory.
pub fn restore_job(m: &RestoreMember, image: &str) -> ContainerSpec {
    ContainerSpec {
        name: "oi-etcd-restore".to_string(),
        image: image.to_string(),
        command: vec!["etcdutl".into()],
        args: vec![
            "snapshot".into(),
            "restore".into(),
            format!("{}/snapshot.db", m.snapshot_dir()),
            format!("--data-dir={}", m.staging_dir()),
            format!("--name={}", m.name),
            format!("--initial-cluster={}", m.initial_cluster),
            format!("--initial-advertise-peer-urls={}", m.peer_url),
        ],
        env: BTreeMap::new(),
        mounts: vec![data_mount(m)],
        privileged: false,
        resources: None,
    }
}

/// The snapshot as it travels to the hypervisors: gzip at its fastest level. Every byte goes
/// through writer containers, base64 in their environment, a megabyte at a time; etcd's
/// database keeps free pages and repeated keys, which pack well.
///
/// # Errors
/// Only an I/O error of the in-memory encoder, which does not happen.
pub fn pack(etcd: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(etcd.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(etcd)?;
    encoder.finish()
}

/// The parts the packed snapshot ([`pack`]) travels in to a replica's hypervisor.
pub fn parts(m: &RestoreMember, packed: &[u8]) -> Vec<HostFile> {
    packed
        .chunks(PART_BYTES)
        .enumerate()
        .map(|(i, chunk)| HostFile {
            path: format!("{}/part-{i:05}", m.snapshot_dir()),
            content: chunk.to_vec(),
            mode: 0o600,
        })
        .collect()
}

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// Restores the cluster's etcd from the plan's snapshot: every replica's data prepared
    /// beside the running one, then every replica's pods stopped (and every API server
    /// alone's; the ingress's stay) and
    /// its data replaced. The etcd step that follows starts the members together.
    pub(crate) async fn restore(&self, key: &ObjectKey, restore: &Restore) -> Step {
        if restore.members.is_empty() {
            return Ok(());
        }
        let etcd = Arc::clone(&restore.etcd);
        let packed = match tokio::task::spawn_blocking(move || pack(&etcd)).await {
            Ok(Ok(packed)) => packed,
            Ok(Err(e)) => return Err(StepError::SnapshotPack(e.to_string())),
            Err(e) => return Err(StepError::SnapshotPack(e.to_string())),
        };
        for outcome in join_all(
            restore
                .members
                .iter()
                .map(|m| self.stage(key, restore, m, &packed)),
        )
        .await
        {
            outcome?;
        }
        // Nothing was stopped until here: a failure above leaves the cluster running.
        let stopped = restore
            .members
            .iter()
            .map(|m| (&m.hypervisor, &m.component))
            .chain(restore.api_servers.iter().map(|(h, c)| (h, c)));
        // Each replica's on its own hypervisor, all at once.
        for outcome in join_all(stopped.map(|(hypervisor, component)| async move {
            let rt = self.runtime(hypervisor)?;
            let pods = rt.list_pods(&selector(key, Some(component))).await?;
            for pod in &pods {
                rt.remove_pod(&pod.id).await?;
                Counters::add(&self.counters.removed, 1);
            }
            if !pods.is_empty() {
                self.emit(
                    Some(hypervisor),
                    key,
                    Some(component),
                    format!("stopped {} pods for the restore", pods.len()),
                );
            }
            Ok::<_, StepError>(())
        }))
        .await
        {
            outcome?;
        }
        for outcome in join_all(restore.members.iter().map(|m| async move {
            let rt = self.runtime(&m.hypervisor)?;
            rt.run_job(
                SWAP_JOB,
                &shell_job("oi-etcd-swap", SWAP_SCRIPT, m, &restore.toolbox_image),
                JOB_TIMEOUT,
            )
            .await?;
            self.emit(
                Some(&m.hypervisor),
                key,
                Some(&m.component),
                "etcd data restored".to_string(),
            );
            Ok::<_, StepError>(())
        }))
        .await
        {
            outcome?;
        }
        Ok(())
    }

    /// One replica's restored data, made beside its running etcd, from the packed snapshot.
    async fn stage(
        &self,
        key: &ObjectKey,
        restore: &Restore,
        m: &RestoreMember,
        packed: &[u8],
    ) -> Step {
        let rt = self.runtime(&m.hypervisor)?;
        let files = parts(m, packed);
        rt.write_files(&files, &BTreeMap::new()).await?;
        Counters::add(&self.counters.files, files.len() as u64);
        rt.run_job(
            "snapshot join",
            &shell_job("oi-snapshot-join", JOIN_SCRIPT, m, &restore.toolbox_image),
            JOB_TIMEOUT,
        )
        .await?;
        rt.run_job(
            "etcd snapshot restore",
            &restore_job(m, &restore.etcd_image),
            JOB_TIMEOUT,
        )
        .await?;
        self.emit(
            Some(&m.hypervisor),
            key,
            Some(&m.component),
            format!(
                "snapshot restored beside the running data ({} bytes)",
                restore.etcd.len()
            ),
        );
        Ok(())
    }
}
