//! Snapshots of a running cluster's etcd, and the restore of a cluster from one (the steps
//! `oi_planner::snapshot` plans; see there for the order and why).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use oi_api::ObjectKey;
use oi_api::runtime::{ContainerSpec, HostFile, Mount};
use oi_cri::HypervisorRuntime;
use oi_planner::EtcdPlan;
use oi_planner::snapshot::{Restore, RestoreMember, check_etcd_snapshot};

use crate::error::{Step, StepError};
use crate::etcd::EtcdClient;
use crate::https::{Network, Tls};
use crate::progress::Counters;
use crate::{Executor, selector};

/// etcd's snapshot of a running cluster, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct Taken {
    /// The database and its SHA-256, as etcd streamed them.
    pub etcd: Vec<u8>,
    /// etcd's revision just before it was taken.
    pub revision: u64,
    /// The version of the member that gave it.
    pub version: String,
    /// The member that gave it.
    pub member: String,
}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taken")
            .field("bytes", &self.etcd.len())
            .field("revision", &self.revision)
            .field("version", &self.version)
            .field("member", &self.member)
            .finish()
    }
}

/// Takes a snapshot through the first member of `etcd` that gives a sound one (etcd's own
/// maintenance API; its checksum verified).
///
/// # Errors
/// Each member's failure, when none gave one.
pub async fn take_snapshot<N: Network>(network: &N, etcd: &EtcdPlan) -> Result<Taken, String> {
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
    for m in &etcd.members {
        let attempt = async {
            let status = client
                .status(&m.client_url)
                .await
                .map_err(|e| e.to_string())?;
            let mut bytes = Vec::new();
            client
                .snapshot(&m.client_url, &mut |chunk: &[u8]| {
                    bytes.extend_from_slice(chunk);
                    Ok(())
                })
                .await
                .map_err(|e| e.to_string())?;
            check_etcd_snapshot(&bytes)?;
            Ok::<_, String>(Taken {
                etcd: bytes,
                revision: status.revision,
                version: status.version,
                member: m.name.clone(),
            })
        };
        match attempt.await {
            Ok(taken) => return Ok(taken),
            Err(e) => failures.push(format!("{}: {e}", m.name)),
        }
    }
    if failures.is_empty() {
        return Err("the cluster has no etcd member to take a snapshot from".into());
    }
    Err(format!(
        "no etcd member gave a sound snapshot: {}",
        failures.join("; ")
    ))
}

/// The snapshot travels to a hypervisor as files of at most this many bytes: one file
/// writer each (their base64 stays under the writer's batch size and the kernel's limit on
/// a process's environment).
const PART_BYTES: usize = 700 * 1024;

/// The name of the job putting the restored data in place.
pub const SWAP_JOB: &str = "etcd data swap";

/// Bound on each restore job (joining the parts, `etcdutl snapshot restore`, the swap).
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// The script joining the parts: `$1` is the replica's data directory.
const JOIN_SCRIPT: &str = r#"set -eu
umask 077
d="$1"
rm -rf "$d/etcd.restore" "$d/restore/snapshot.db"
cat "$d"/restore/part-* > "$d/restore/snapshot.db"
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

/// The parts the snapshot travels in to a replica's hypervisor.
pub fn parts(m: &RestoreMember, etcd: &[u8]) -> Vec<HostFile> {
    etcd.chunks(PART_BYTES)
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
        for outcome in join_all(restore.members.iter().map(|m| self.stage(key, restore, m))).await {
            outcome?;
        }
        // Nothing was stopped until here: a failure above leaves the cluster running.
        let stopped = restore
            .members
            .iter()
            .map(|m| (&m.hypervisor, &m.component))
            .chain(restore.api_servers.iter().map(|(h, c)| (h, c)));
        for (hypervisor, component) in stopped {
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

    /// One replica's restored data, made beside its running etcd.
    async fn stage(&self, key: &ObjectKey, restore: &Restore, m: &RestoreMember) -> Step {
        let rt = self.runtime(&m.hypervisor)?;
        let files = parts(m, &restore.etcd);
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
