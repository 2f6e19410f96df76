//! The commands, one module per subcommand. Each is a function of its arguments, the
//! [`Context`] (time and randomness, as inputs), stdin and an output buffer; none touches the
//! file system except through [`oi_cli_io`].

pub mod cluster;
pub mod completion;
pub mod describe;
pub mod get;
pub mod hypervisor;
pub mod join_token;
pub mod keys;
pub mod node;
pub mod reconcile;
pub mod sipcluster;
pub mod version;

use std::io::{Read, Write};

use rand::SeedableRng as _;
use rand_chacha::ChaCha20Rng;
use time::OffsetDateTime;

use crate::args::{
    ClusterCommand, Command, GlobalArgs, HypervisorCommand, JoinTokenCommand, KeysCommand,
    NodeCommand, SipClusterCommand,
};

/// What commands take from the world besides their arguments: the time and randomness.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    pub now: OffsetDateTime,
    /// `--seed`; `None` means fresh operating system randomness.
    pub seed: Option<u64>,
}

impl Context {
    /// A random generator: seeded with `--seed`, or from the operating system.
    pub fn rng(&self) -> ChaCha20Rng {
        match self.seed {
            Some(seed) => ChaCha20Rng::seed_from_u64(seed),
            None => ChaCha20Rng::from_entropy(),
        }
    }
}

impl GlobalArgs {
    /// The context the flags describe, the clock and the operating system filling the gaps.
    pub fn context(&self) -> Context {
        Context {
            now: self.now.unwrap_or_else(OffsetDateTime::now_utc),
            seed: self.seed,
        }
    }
}

/// Lines for stderr as one note, or none when there are none.
pub fn note(lines: Vec<String>) -> Option<String> {
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// One `warning:` line per live cluster of `world` (of `only`, when given) whose replicas
/// share a hypervisor so that losing it stops the control plane.
pub fn availability_warnings(
    world: &oi_api::World,
    only: Option<&oi_api::ObjectKey>,
) -> Vec<String> {
    oi_planner::schedule::not_highly_available(world)
        .into_iter()
        .filter(|n| only.is_none_or(|k| *k == n.cluster))
        .map(|n| {
            format!(
                "warning: cluster {} is not highly available: {} of its {} control plane \
                 replicas run on hypervisor {} (losing it loses etcd's quorum); give each \
                 replica a private hypervisor of its own",
                n.cluster, n.on_busiest, n.replicas, n.busiest
            )
        })
        .collect()
}

/// A command that failed after producing its output: the output is written (nothing is
/// lost: a reconcile's ports, certificates and status; a dry run's plan), then `oi` exits 1
/// with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OutputThenFail(pub String);

/// Runs a command, its output going to `output` (the caller writes it out only on success).
/// Returns a note for stderr, to be shown once the output is written.
///
/// # Errors
/// Whatever the command reports.
pub fn dispatch(
    command: &Command,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let no_note = |result: anyhow::Result<()>| result.map(|()| None);
    match command {
        Command::Cluster(ClusterCommand::Inject(args)) => {
            cluster::inject::run(args, ctx, input, output)
        }
        Command::Cluster(ClusterCommand::AdminKubeconfig(args)) => {
            no_note(cluster::admin_kubeconfig::run(args, ctx, input, output))
        }
        Command::Cluster(ClusterCommand::ApiserverCa(args)) => {
            no_note(cluster::apiserver_ca::run(args, ctx, input, output))
        }
        Command::Cluster(ClusterCommand::Delete(args)) => {
            no_note(cluster::delete::run(args, ctx, input, output))
        }
        Command::Cluster(ClusterCommand::TrustIssuer(args)) => {
            cluster::issuers::trust(args, input, output)
        }
        Command::Cluster(ClusterCommand::DistrustIssuer(args)) => {
            cluster::issuers::distrust(args, input, output)
        }
        Command::Cluster(ClusterCommand::Certificates(args)) => {
            no_note(cluster::certificates::run(args, ctx, input, output))
        }
        Command::Cluster(ClusterCommand::Snapshot(args)) => {
            cluster::snapshot::run(args, ctx, input, output)
        }
        Command::Cluster(ClusterCommand::Restore(args)) => {
            cluster::restore::run(args, ctx, input, output)
        }
        Command::Cluster(ClusterCommand::Recover(args)) => {
            cluster::recover::run(args, ctx, input, output)
        }
        Command::Cluster(ClusterCommand::RotateCa(args)) => {
            cluster::rotate_ca::run(args, ctx, input, output)
        }
        Command::Cluster(ClusterCommand::Upgrade(args)) => {
            cluster::upgrade::run(args, ctx, input, output)
        }
        Command::Hypervisor(HypervisorCommand::Inject(args)) => {
            no_note(hypervisor::inject::run(args, ctx, input, output))
        }
        Command::Hypervisor(HypervisorCommand::Join(args)) => {
            hypervisor::join::run(args, ctx, output).map(Some)
        }
        Command::Hypervisor(HypervisorCommand::Cordon(args)) => {
            no_note(hypervisor::cordon::run(args, true, input, output))
        }
        Command::Hypervisor(HypervisorCommand::Uncordon(args)) => {
            no_note(hypervisor::cordon::run(args, false, input, output))
        }
        Command::Hypervisor(HypervisorCommand::Drain(args)) => {
            hypervisor::drain::run(args, ctx, input, output)
        }
        Command::Hypervisor(HypervisorCommand::Remove(args)) => {
            hypervisor::remove::run(args, ctx, input, output)
        }
        Command::Hypervisor(HypervisorCommand::Check(args)) => {
            hypervisor::check::run(args, ctx, input, output)
        }
        Command::JoinToken(JoinTokenCommand::Inject(args)) => {
            join_token::inject::run(args, ctx, input, output).map(Some)
        }
        Command::JoinToken(JoinTokenCommand::Generate) => {
            no_note(join_token::generate::run(ctx, output))
        }
        Command::Node(NodeCommand::Join(args)) => node::run(args, output).map(Some),
        Command::Keys(KeysCommand::Export(args)) => {
            no_note(keys::run(args, true, ctx, input, output))
        }
        Command::Keys(KeysCommand::Inline(args)) => {
            no_note(keys::run(args, false, ctx, input, output))
        }
        Command::Sipcluster(SipClusterCommand::Delete(args)) => {
            no_note(sipcluster::delete(args, ctx, input, output))
        }
        Command::Sipcluster(SipClusterCommand::Inventory(args)) => {
            sipcluster::inventory(args, ctx, input, output).map(Some)
        }
        Command::Sipcluster(SipClusterCommand::HashPassword(args)) => {
            no_note(sipcluster::hash_password(args, input, output))
        }
        Command::Get(args) => no_note(get::run(args, ctx, input, output)),
        Command::Describe(args) => no_note(describe::run(args, ctx, input, output)),
        Command::Version(args) => no_note(version::run(args, output)),
        Command::Completion(args) => no_note(completion::run(args, output)),
        Command::Reconcile(args) => reconcile::run(args, ctx, input, output),
    }
}
