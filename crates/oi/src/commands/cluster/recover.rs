//! `oi cluster recover --from-member NAME`: a cluster that lost its etcd quorum started again
//! from a surviving member's data (`oi_planner::recover`), then grown back to its replicas.
//!
//! ```text
//! manifests ─► every member the cluster ran with asked (health, status, membership) ─►
//!   refused (nothing done, exit 1): a quorum answers; the member does not answer; a member
//!     that answers holds newer data; a replica's hypervisor does not answer and is not
//!     removed (the run would wait for it)
//!   ─► what may be lost said ─► plan_recover ─► engine: the member a cluster of one on its
//!   data ─► the others retire ─► replacements join ─► ready ─► manifests
//! ```
//!
//! Run again after a failure, it converges: a member that is a cluster of one already (a
//! recovery that ran before) is grown back without being forced again.

use std::io::{Read, Write};

use oi_api::{ObjectKey, World};
use oi_engine::RealNetwork;
use oi_engine::recover::{MemberState, observe_members};

use crate::args::ClusterRecoverArgs;
use crate::commands::reconcile::{Runner, not_ready, summary};
use crate::commands::{Context, OutputThenFail};
use crate::manifests;

/// # Errors
/// When the manifests do not load, the cluster or member is not found, or the recovery is
/// refused (see the module documentation; nothing is done then); [`OutputThenFail`] (after
/// the manifests were written) when the recovered cluster is not ready in time.
pub fn run(
    args: &ClusterRecoverArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let key = manifests::select_cluster(&world, args.cluster.as_deref())?
        .0
        .clone();
    let runner = Runner::new(args.image_repository.clone(), args.max_wait, args.quiet)?;
    let plan = oi_planner::plan(world.clone(), ctx.now, &runner.plan_options);
    let seen = runner
        .runtime
        .block_on(observe_members(
            &plan,
            &key,
            &runner.connector,
            &RealNetwork::default(),
        ))
        .map_err(|e| anyhow::anyhow!("cluster {key}: {e}"))?;
    drop(plan);
    let said = judge(&world, &key, &seen, &args.from_member)?;
    if !args.quiet {
        eprintln!("oi: {said}");
    }
    let plan = oi_planner::recover::plan_recover(
        world,
        &key,
        &args.from_member,
        ctx.now,
        &runner.plan_options,
    )?;
    runner
        .progress
        .set_step(format!("recover {key} from {}", args.from_member));
    let (mut world, executed) = runner.execute(plan, ctx.now);
    for h in oi_planner::forget_removed_hypervisors(&mut world) {
        if !args.quiet {
            eprintln!("oi: hypervisor {h} left the manifests: nothing is left on it");
        }
    }
    manifests::finish(&world, output)?;
    if !args.quiet {
        eprintln!("{}", summary(&executed));
    }
    if let Some(why) = not_ready(&executed) {
        return Err(OutputThenFail(format!(
            "{why}\nthe recovery goes on from where it is when run again"
        ))
        .into());
    }
    let replicas = oi_planner::recover::replicas(&world, &key);
    Ok(Some(format!(
        "oi: cluster {key} recovered from {}'s data: {} voting members ({})",
        args.from_member,
        replicas.len(),
        replicas.join(", ")
    )))
}

/// Whether recovering cluster `key` from `member` is right, given what its members said
/// (`seen`): what may be lost, for a person, or why it is refused.
///
/// # Errors
/// The refusals of the module documentation, each naming the members.
fn judge(
    world: &World,
    key: &ObjectKey,
    seen: &[MemberState],
    member: &str,
) -> anyhow::Result<String> {
    let names = || {
        seen.iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(survivor) = seen.iter().find(|m| m.name == member) else {
        anyhow::bail!(
            "{member} is not a member cluster {key} ran with (its members: {})",
            names()
        );
    };
    let healthy: Vec<&str> = seen
        .iter()
        .filter(|m| matches!(m.healthy, Ok(true)))
        .map(|m| m.name.as_str())
        .collect();
    let alone = survivor
        .members
        .as_ref()
        .is_some_and(|list| list.len() == 1 && list[0] == member);
    if alone && healthy == [member] {
        return Ok(format!(
            "cluster {key}: member {member} is a cluster of one already (a recovery ran \
             before): growing it back to its replicas"
        ));
    }
    if !healthy.is_empty() {
        anyhow::bail!(
            "cluster {key} has a quorum (healthy: {}): there is nothing to recover. A replica \
             on a hypervisor gone for good is replaced with `oi hypervisor remove --name H`; a \
             member that lost its data is repaired by `oi reconcile`",
            healthy.join(", ")
        );
    }
    let revision = |m: &MemberState| m.status.as_ref().ok().map(|s| s.revision);
    let answering = || {
        seen.iter()
            .filter_map(|m| revision(m).map(|r| format!("{} (revision {r})", m.name)))
            .collect::<Vec<_>>()
    };
    let Some(mine) = revision(survivor) else {
        let why = survivor.status.as_ref().err().cloned().unwrap_or_default();
        let others = answering();
        anyhow::bail!(
            "member {member} of cluster {key} does not answer ({why}): its data cannot be \
             used. {}",
            if others.is_empty() {
                "No member answers: restore a snapshot instead (`oi cluster restore`)".to_string()
            } else {
                format!("Members that answer with their data: {}", others.join(", "))
            }
        );
    };
    if let Some(newer) = seen
        .iter()
        .filter(|m| m.name != member)
        .find(|m| revision(m).is_some_and(|r| r > mine))
    {
        anyhow::bail!(
            "member {} of cluster {key} holds newer data than {member} (revision {} against \
             {mine}): recover from it instead (`--from-member {}`)",
            newer.name,
            revision(newer).unwrap_or_default(),
            newer.name
        );
    }
    let removed = |h: &str| {
        world
            .hypervisors
            .get(&ObjectKey::cluster_scoped(h))
            .is_some_and(|h| h.metadata.is_being_deleted())
    };
    let waiting: Vec<String> = seen
        .iter()
        .filter(|m| m.name != member && m.hypervisor_answers.is_err() && !removed(&m.hypervisor))
        .map(|m| format!("{} on {}", m.name, m.hypervisor))
        .collect();
    if !waiting.is_empty() {
        anyhow::bail!(
            "cluster {key}: replicas on hypervisors that do not answer and are not removed: \
             {}. Bring them back, or remove them first (`oi hypervisor remove --name H`; it \
             stops at the quorum, and leaves them marked removed)",
            waiting.join(", ")
        );
    }
    let discarded: Vec<&str> = seen
        .iter()
        .filter(|m| m.name != member)
        .map(|m| m.name.as_str())
        .collect();
    Ok(format!(
        "cluster {key} has no quorum: recovering it from member {member}'s data (revision \
         {mine}). Writes the cluster acknowledged that {member} had not received when it lost \
         its leader are lost; the data of {} is discarded, and new replicas join {member}",
        if discarded.is_empty() {
            "no other member".to_string()
        } else {
            discarded.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oi_api::Resource as _;
    use oi_engine::etcd::MemberStatus;

    fn member(name: &str, healthy: Result<bool, &str>, revision: Option<u64>) -> MemberState {
        MemberState {
            name: name.into(),
            hypervisor: format!("h-{name}"),
            hypervisor_answers: if revision.is_some() {
                Ok(())
            } else {
                Err("connection refused".into())
            },
            healthy: healthy.map_err(str::to_string),
            status: revision
                .map(|revision| MemberStatus {
                    revision,
                    member_id: 1,
                    cluster_id: 2,
                    leader: 0,
                    db_size: 0,
                    version: "3.4.23".into(),
                })
                .ok_or_else(|| "unreachable".to_string()),
            members: revision.map(|_| vec!["a".into(), "b".into(), "c".into()]),
        }
    }

    fn world(removed: &[&str]) -> World {
        let mut w = World::default();
        for name in ["a", "b", "c"] {
            let mut h = oi_api::Hypervisor::new(
                oi_api::ObjectMeta::named(format!("h-{name}")),
                oi_api::HypervisorSpec {
                    local_cri_endpoint: None,
                    remote_cri_endpoint: None,
                    public: false,
                    ip_address: String::new(),
                    port_range: oi_api::PortRange::default(),
                    unschedulable: false,
                    drain: false,
                    capacity: None,
                },
            );
            if removed.contains(&name) {
                h.metadata.deletion_timestamp = Some(time::OffsetDateTime::UNIX_EPOCH);
            }
            w.hypervisors.insert(h.key(), h);
        }
        w
    }

    fn key() -> ObjectKey {
        ObjectKey::new("default", "c1")
    }

    #[test]
    fn a_cluster_with_a_quorum_is_refused_naming_the_healthy_members() {
        let seen = [
            member("a", Err("unreachable"), None),
            member("b", Ok(true), Some(10)),
            member("c", Ok(true), Some(10)),
        ];
        let e = judge(&world(&["a"]), &key(), &seen, "c").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "cluster default/c1 has a quorum (healthy: b, c): there is nothing to recover"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_survivor_that_does_not_answer_or_holds_older_data_is_refused() {
        let seen = [
            member("a", Err("unreachable"), None),
            member("b", Ok(false), Some(12)),
            member("c", Ok(false), Some(10)),
        ];
        let e = judge(&world(&["a"]), &key(), &seen, "a").unwrap_err();
        assert_eq!(
            e.to_string(),
            "member a of cluster default/c1 does not answer (unreachable): its data cannot be \
             used. Members that answer with their data: b (revision 12), c (revision 10)"
        );
        let e = judge(&world(&["a"]), &key(), &seen, "c").unwrap_err();
        assert_eq!(
            e.to_string(),
            "member b of cluster default/c1 holds newer data than c (revision 12 against 10): \
             recover from it instead (`--from-member b`)"
        );
        let e = judge(&world(&[]), &key(), &seen, "x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "x is not a member cluster default/c1 ran with (its members: a, b, c)"
        );
    }

    #[test]
    fn a_replica_on_a_hypervisor_neither_answering_nor_removed_is_named() {
        let seen = [
            member("a", Err("unreachable"), None),
            member("b", Err("unreachable"), None),
            member("c", Ok(false), Some(10)),
        ];
        let e = judge(&world(&["a"]), &key(), &seen, "c").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "cluster default/c1: replicas on hypervisors that do not answer and are not \
                 removed: b on h-b."
            ),
            "{e}"
        );
        let said = judge(&world(&["a", "b"]), &key(), &seen, "c").unwrap();
        assert_eq!(
            said,
            "cluster default/c1 has no quorum: recovering it from member c's data (revision \
             10). Writes the cluster acknowledged that c had not received when it lost its \
             leader are lost; the data of a, b is discarded, and new replicas join c"
        );
    }

    #[test]
    fn a_survivor_alone_already_is_grown_back_without_being_forced_again() {
        let mut c = member("c", Ok(true), Some(10));
        c.members = Some(vec!["c".into()]);
        let seen = [
            member("a", Err("unreachable"), None),
            member("b", Err("unreachable"), None),
            c,
        ];
        let said = judge(&world(&["a", "b"]), &key(), &seen, "c").unwrap();
        assert!(said.contains("is a cluster of one already"), "{said}");
    }
}
