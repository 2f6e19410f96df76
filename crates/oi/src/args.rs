//! Command line arguments: what the user can say, apart from what the commands do with it.
//!
//! Command and flag names follow oneinfra's `oi`, so that its documentation keeps working.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// oneinfra: Kubernetes control planes as a service, on machines you already own.
///
/// Commands read manifests from stdin or `-f FILE` and write the updated manifests to stdout
/// or `-o FILE`, so they compose with pipes. Manifests hold every private key of the clusters
/// and hypervisors: keep them in files written with `-o` (mode 0600 from their creation),
/// not in files a shell redirection creates.
///
/// Examples:
///
///   oi hypervisor inject -f /dev/null --name h1 --ip-address 192.0.2.10 \
///       --local-cri-endpoint /run/containerd/containerd.sock \
///     | oi hypervisor inject --name h2 --public --ip-address 192.0.2.11 \
///       --local-cri-endpoint /run/containerd/containerd.sock \
///     | oi cluster inject --name c1 -o world.yaml
///   oi reconcile -f world.yaml -o world.yaml
///   oi cluster admin-kubeconfig -f world.yaml -o c1.kubeconfig
#[derive(Debug, Parser)]
#[command(name = "oi", version, max_term_width = 100, verbatim_doc_comment)]
pub struct Cli {
    #[command(flatten)]
    pub globals: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command accepts.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Write the output to FILE instead of stdout, only if the command succeeds: a regular
    /// file is replaced atomically (a temporary file beside it, mode 0600 from its creation,
    /// fsync, rename; a symlink is followed and kept), a FIFO or a device is written through.
    /// FILE is checked before any work: a directory, a socket, a read-only file or an
    /// unwritable directory is refused. Commands writing the same FILE take turns (a lock
    /// beside it), and a FILE changed meanwhile by another program is not overwritten. FILE
    /// may be one of the inputs when the output is manifests.
    #[arg(short, long, global = true, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The current time, for reproducible output (tests).
    #[arg(long, global = true, hide = true, value_name = "RFC3339", value_parser = parse_rfc3339)]
    pub now: Option<OffsetDateTime>,

    /// Seed the random generator of join tokens, for reproducible output. Tokens generated
    /// from a known seed are known to anyone: use it for tests only. Keys always come from the
    /// operating system.
    #[arg(long, global = true, value_name = "N")]
    pub seed: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Cluster operations: inject a cluster, get its admin kubeconfig or API server CA.
    #[command(subcommand)]
    Cluster(ClusterCommand),

    /// Hypervisor operations: register a machine exposing a CRI endpoint.
    #[command(subcommand)]
    Hypervisor(HypervisorCommand),

    /// Bootstrap tokens that worker nodes join clusters with.
    #[command(subcommand)]
    JoinToken(JoinTokenCommand),

    /// Worker node operations: join a managed cluster (run on the worker).
    #[command(subcommand)]
    Node(NodeCommand),

    /// Where the Clusters' and Components' private keys are kept in the manifests: inline,
    /// or in Secrets the objects reference (as on a management cluster). Every command reads
    /// either, and writes a world back as it was read.
    #[command(subcommand)]
    Keys(KeysCommand),

    /// Airship SIP's tenant clusters (SIPCluster objects; `oi reconcile` selects their hosts).
    #[command(subcommand)]
    Sipcluster(SipClusterCommand),

    /// Versions of oi, of the supported Kubernetes releases and of component images.
    Version(VersionArgs),

    /// Print a shell completion script.
    Completion(CompletionArgs),

    /// List objects of the manifests as tables, like kubectl: clusters, hypervisors,
    /// components, sipclusters or join-tokens (read from the manifests alone; nothing is
    /// contacted). `-o` takes a format
    /// here: wide, yaml, json or name (yaml and json with every private key, password and
    /// join token secret redacted); any other value is a file to write the table to.
    ///
    /// Examples:
    ///
    ///   oi get clusters -f world.yaml
    ///   oi get hypervisors -o wide -f world.yaml
    ///   oi get cluster c1 -o yaml -f world.yaml
    #[command(verbatim_doc_comment)]
    Get(GetArgs),

    /// Show one cluster, hypervisor or SIPCluster in full, like kubectl describe (read from
    /// the manifests alone; nothing is contacted): a cluster's endpoints, conditions,
    /// components with their hypervisors, ports and state, the certificates expiring soonest,
    /// join tokens and VPN peers; a hypervisor's scheduling state, ports, capacity against
    /// use, and what runs there; a SIPCluster's node sets, the hosts it holds, its services
    /// and where they run, its OIDC providers.
    Describe(DescribeArgs),

    /// Apply the world to the hypervisors: bring clusters up, scale and delete them, and print
    /// the updated manifests (status, ports, certificates; private keys included: use -o).
    /// Progress and a summary go to stderr; exits non-zero (after writing the manifests) when
    /// a cluster is not ready.
    Reconcile(ReconcileArgs),
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// What to list.
    #[arg(value_enum)]
    pub kind: GetKind,

    /// Only these objects (`NAME` or `NAMESPACE/NAME`), in this order; one not found is an
    /// error.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,

    #[command(flatten)]
    pub input: InputArgs,

    /// Taken from `-o` when it names a format.
    #[arg(skip)]
    pub format: Option<GetFormat>,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// What to describe.
    #[arg(value_enum)]
    pub kind: DescribeKind,

    /// Its name (a cluster's or SIPCluster's may be `NAMESPACE/NAME`).
    #[arg(value_name = "NAME")]
    pub name: String,

    #[command(flatten)]
    pub input: InputArgs,
}

/// The kinds `oi describe` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DescribeKind {
    #[value(alias = "clusters")]
    Cluster,
    #[value(alias = "hypervisors", alias = "hv")]
    Hypervisor,
    #[value(alias = "sipclusters", alias = "sip")]
    Sipcluster,
}

/// The kinds `oi get` lists, by their plural, singular and short names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GetKind {
    #[value(alias = "cluster")]
    Clusters,
    #[value(alias = "hypervisor", alias = "hv")]
    Hypervisors,
    #[value(alias = "component", alias = "comp")]
    Components,
    #[value(alias = "sipcluster", alias = "sip")]
    Sipclusters,
    /// Each cluster's join tokens, by id (never their secret).
    #[value(alias = "join-token", alias = "tokens")]
    JoinTokens,
    /// The workers that joined each cluster (`oi node join`), as the last run found them.
    #[value(alias = "node", alias = "no")]
    Nodes,
}

impl GetKind {
    pub fn singular(self) -> &'static str {
        match self {
            GetKind::Clusters => "cluster",
            GetKind::Hypervisors => "hypervisor",
            GetKind::Components => "component",
            GetKind::Sipclusters => "sipcluster",
            GetKind::JoinTokens => "cluster with join tokens",
            GetKind::Nodes => "cluster",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            GetKind::Clusters => "clusters",
            GetKind::Hypervisors => "hypervisors",
            GetKind::Components => "components",
            GetKind::Sipclusters => "sipclusters",
            GetKind::JoinTokens => "join-tokens",
            GetKind::Nodes => "nodes",
        }
    }
}

/// How `oi get` prints (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetFormat {
    Table,
    Wide,
    Yaml,
    Json,
    Name,
}

impl GetFormat {
    /// The format `-o VALUE` names, if it names one.
    pub fn named(value: &std::path::Path) -> Option<GetFormat> {
        match value.to_str()? {
            "wide" => Some(GetFormat::Wide),
            "yaml" => Some(GetFormat::Yaml),
            "json" => Some(GetFormat::Json),
            "name" => Some(GetFormat::Name),
            _ => None,
        }
    }
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Print only errors on stderr (no progress, no summary).
    #[arg(long, short)]
    pub quiet: bool,

    /// How long to wait for every cluster to become ready (e.g. 500ms, 60s, 2m; at most 24h).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: std::time::Duration,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,

    /// Print what would be done on each hypervisor (read-only calls only) and change nothing.
    /// Exits non-zero when a cluster cannot be planned or a hypervisor cannot be reached. Its
    /// output is the plan, not manifests: -o may not name one of the inputs.
    #[arg(long)]
    pub dry_run: bool,

    /// Remove orphans: pods (and their directories) of clusters or components these
    /// manifests do not hold, found on their hypervisors, and forget their ports and files.
    /// Without it they are named and left running (the manifests may hold a part of the
    /// clusters only). With --dry-run, lists them as removed.
    #[arg(long)]
    pub prune: bool,
}

/// Where manifests come from.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Read manifests from FILE instead of stdin. Repeatable; `-` is stdin. Without it, stdin
    /// must not be a terminal (to start from an empty world: -f /dev/null).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Refuse an input larger than SIZE (bytes, or with KiB, MiB, GiB).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = oi_cli_io::parse_size)]
    pub max_input_size: u64,
}

impl InputArgs {
    /// Whether stdin is read: no `-f`, or `-f -`.
    pub fn reads_stdin(&self) -> bool {
        self.files.is_empty() || self.files.iter().any(|f| f.as_os_str() == "-")
    }
}

impl Command {
    /// The manifests the command reads, if it reads any.
    pub fn input(&self) -> Option<&InputArgs> {
        match self {
            Command::Cluster(ClusterCommand::Inject(a)) => Some(&a.input),
            Command::Cluster(
                ClusterCommand::AdminKubeconfig(a)
                | ClusterCommand::ApiserverCa(a)
                | ClusterCommand::Certificates(a),
            ) => Some(&a.input),
            Command::Cluster(ClusterCommand::Delete(a)) => Some(&a.input),
            Command::Cluster(ClusterCommand::TrustIssuer(a)) => Some(&a.input),
            Command::Cluster(ClusterCommand::DistrustIssuer(a)) => Some(&a.input),
            Command::Cluster(ClusterCommand::Upgrade(a)) => Some(&a.input),
            Command::Cluster(ClusterCommand::Snapshot(a)) => Some(&a.input),
            Command::Cluster(ClusterCommand::Restore(a)) => Some(&a.input),
            Command::Cluster(ClusterCommand::Recover(a)) => Some(&a.input),
            Command::Cluster(ClusterCommand::RotateCa(a)) => Some(&a.input),
            Command::Hypervisor(HypervisorCommand::Inject(a)) => Some(&a.input),
            Command::Hypervisor(HypervisorCommand::Cordon(a) | HypervisorCommand::Uncordon(a)) => {
                Some(&a.input)
            }
            Command::Hypervisor(HypervisorCommand::Drain(a) | HypervisorCommand::Remove(a)) => {
                Some(&a.input)
            }
            Command::Hypervisor(HypervisorCommand::Check(a)) => Some(&a.input),
            Command::JoinToken(JoinTokenCommand::Inject(a)) => Some(&a.input),
            Command::Keys(KeysCommand::Export(a) | KeysCommand::Inline(a)) => Some(&a.input),
            Command::Sipcluster(SipClusterCommand::Delete(a)) => Some(&a.input),
            Command::Sipcluster(SipClusterCommand::Inventory(a)) => Some(&a.input),
            Command::Sipcluster(SipClusterCommand::HashPassword(_)) => None,
            Command::Reconcile(a) => Some(&a.input),
            Command::Get(a) => Some(&a.input),
            Command::Describe(a) => Some(&a.input),
            Command::JoinToken(JoinTokenCommand::Generate)
            | Command::Hypervisor(HypervisorCommand::Join(_))
            | Command::Node(_)
            | Command::Version(_)
            | Command::Completion(_) => None,
        }
    }

    /// Whether the output is manifests (the world, updated), which may replace an input.
    pub fn prints_manifests(&self) -> bool {
        match self {
            Command::Cluster(
                ClusterCommand::Inject(_)
                | ClusterCommand::Delete(_)
                | ClusterCommand::TrustIssuer(_)
                | ClusterCommand::DistrustIssuer(_)
                | ClusterCommand::Upgrade(_)
                | ClusterCommand::Restore(_)
                | ClusterCommand::Recover(_)
                | ClusterCommand::RotateCa(_),
            )
            | Command::Hypervisor(
                HypervisorCommand::Inject(_)
                | HypervisorCommand::Cordon(_)
                | HypervisorCommand::Uncordon(_)
                | HypervisorCommand::Drain(_)
                | HypervisorCommand::Remove(_),
            )
            | Command::Sipcluster(SipClusterCommand::Delete(_))
            | Command::Keys(_)
            | Command::JoinToken(JoinTokenCommand::Inject(_)) => true,
            Command::Reconcile(a) => !a.dry_run,
            Command::Cluster(
                ClusterCommand::AdminKubeconfig(_)
                | ClusterCommand::ApiserverCa(_)
                | ClusterCommand::Certificates(_)
                | ClusterCommand::Snapshot(_),
            )
            | Command::JoinToken(JoinTokenCommand::Generate)
            | Command::Hypervisor(HypervisorCommand::Join(_) | HypervisorCommand::Check(_))
            | Command::Sipcluster(
                SipClusterCommand::Inventory(_) | SipClusterCommand::HashPassword(_),
            )
            | Command::Node(_)
            | Command::Get(_)
            | Command::Describe(_)
            | Command::Version(_)
            | Command::Completion(_) => false,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Add a cluster to the manifests, with its PKI, control plane components and ingress
    /// scheduled on the hypervisors, and print all manifests (private keys included: use -o).
    Inject(Box<ClusterInjectArgs>),

    /// Print a kubeconfig for the cluster's administrator (a new client certificate on
    /// every call; its private key is in the output: use -o FILE, created 0600).
    AdminKubeconfig(ClusterSelectArgs),

    /// Print the certificate (PEM) of the CA that signs the cluster's API server certificate.
    #[command(name = "apiserver-ca")]
    ApiserverCa(ClusterSelectArgs),

    /// Mark a cluster for deletion (metadata.deletionTimestamp) and print all manifests; the
    /// next `oi reconcile` removes its pods, files and ports.
    Delete(ClusterDeleteArgs),

    /// List every certificate of a cluster (its CAs, its client certificates, its
    /// components' certificates) with its expiry and how it is renewed, soonest first.
    Certificates(ClusterSelectArgs),

    /// Take a consistent snapshot of a running cluster's etcd (etcd's own snapshot API, its
    /// checksum verified) and write it, with the Cluster object it belongs to, to a file or
    /// an S3-compatible object store. The manifests are not changed.
    Snapshot(ClusterSnapshotArgs),

    /// Bring a cluster back from a snapshot, onto the hypervisors it is on or, for a cluster
    /// the manifests no longer hold, onto any (or the --hypervisor given): the snapshot is
    /// checked and put beside every replica's etcd before anything is stopped; then every
    /// replica's etcd and control plane restart on the snapshot's data (the ingress stays).
    /// Prints all manifests.
    Restore(ClusterRestoreArgs),

    /// Recover a cluster that lost its etcd quorum (a majority of its members gone for good)
    /// from a surviving member's data, usually newer than the last snapshot: that member's
    /// etcd restarts once as a new cluster of one on its data (`--force-new-cluster`), then
    /// the cluster grows back to its replicas (the others replaced, joining as learners).
    /// Refused while the cluster has a quorum. Says what may be lost before it starts.
    /// Remove the lost hypervisors first (`oi hypervisor remove`). Prints all manifests.
    Recover(ClusterRecoverArgs),

    /// Rotate a cluster's CAs (all, or those named) and its service-account key without
    /// downtime, in three reconciles, each ready before the next: the new CAs trusted beside
    /// the old; every certificate reissued by the new ones (the old still trusted, the API
    /// server's new CA cross-signed by the old); the old dropped. What stops working in the
    /// last phase is named before it runs. A rotation that stopped goes on where it was.
    /// Prints all manifests.
    #[command(name = "rotate-ca")]
    RotateCa(ClusterRotateCaArgs),

    /// Trust another OpenID Connect issuer's ID tokens (`spec.apiServer.oidcIssuers`;
    /// replaces the entry of the same issuer URL). The next `oi reconcile` rewrites the API
    /// servers' authentication configuration, which they read again: no restart. Prints all
    /// manifests.
    #[command(name = "trust-issuer")]
    TrustIssuer(ClusterTrustIssuerArgs),

    /// Stop trusting an issuer (from `spec.apiServer.oidcIssuers`, or `spec.apiServer.oidc`).
    /// The next `oi reconcile` rewrites the API servers' authentication configuration: its
    /// tokens are refused again, with no restart. Prints all manifests.
    #[command(name = "distrust-issuer")]
    DistrustIssuer(ClusterDistrustIssuerArgs),

    /// Upgrade a cluster to a Kubernetes version, one minor at a time: each minor is
    /// reconciled (every API server first, then the controller-managers and schedulers, one
    /// replica at a time) and must be ready before the next; stops at the first that is not.
    /// Prints all manifests, as far as it got.
    Upgrade(ClusterUpgradeArgs),
}

#[derive(Debug, Args)]
pub struct ClusterUpgradeArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`); may be omitted when there is only one.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// The version to reach (`1.37`, `1.37.1`, `default`).
    #[arg(long, value_name = "VERSION")]
    pub to: String,

    /// Print only errors on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// How long each minor may take to become ready (e.g. 60s, 2m; at most 24h).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: std::time::Duration,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,
}

#[derive(Debug, Args)]
pub struct ClusterSnapshotArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`); may be omitted when there is only one.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// Where the snapshot goes: a file, `file:///path`, or `s3://bucket/key` (S3 settings
    /// from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). A
    /// directory, or a location ending in `/`, gets `<namespace>-<name>-<time>.oisnap`.
    /// The file holds the cluster's CAs and etcd's data: it is created 0600.
    #[arg(long, value_name = "LOCATION")]
    pub to: String,

    /// How long etcd may take to stream the snapshot.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub timeout: std::time::Duration,
}

#[derive(Debug, Args)]
pub struct ClusterRestoreArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The snapshot: a file, `file:///path`, or `s3://bucket/key` (see `oi cluster snapshot`).
    #[arg(long, value_name = "LOCATION")]
    pub from: String,

    /// The cluster to restore (`NAME` or `NAMESPACE/NAME`): must be the snapshot's; its
    /// cluster when omitted.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// For a cluster the manifests no longer hold: the private hypervisor of each control
    /// plane replica, in replica order (repeatable; the replicas not named are placed as
    /// usual).
    #[arg(long = "hypervisor", value_name = "NAME")]
    pub hypervisors: Vec<String>,

    /// Restore the snapshot even though it holds the data of another cluster of the same
    /// name (no CA in common with the one in the manifests): refused without it.
    #[arg(long)]
    pub allow_other_cluster: bool,

    /// Print only errors on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// How long the restore and the cluster's start may take (e.g. 120s, 5m; at most 24h).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: std::time::Duration,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,
}

#[derive(Debug, Args)]
pub struct ClusterRecoverArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`); may be omitted when there is only one.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// The surviving member (a control plane replica's name) whose data the cluster starts
    /// again from.
    #[arg(long, value_name = "NAME")]
    pub from_member: String,

    /// Print only errors on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// How long the recovery and the cluster's growth may take (e.g. 120s, 5m; at most 24h).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: std::time::Duration,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,
}

#[derive(Debug, Args)]
pub struct ClusterRotateCaArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`); may be omitted when there is only one.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// What to rotate: `all`, or names separated by commas: apiServer, apiServerClient,
    /// certificateSigner, kubelet, kubeletClient, etcdServer, etcdClient, etcdPeer,
    /// serviceAccount.
    #[arg(long, value_name = "NAMES", default_value = "all")]
    pub ca: String,

    /// Print only errors on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// How long each phase may take to become ready (e.g. 60s, 2m; at most 24h).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: std::time::Duration,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Print all manifests with every private key of the Clusters and Components moved into
    /// Secrets (`kubernetes.io/tls`, Cluster API's names where it has them: `<cluster>-ca`,
    /// `-etcd`, `-sa`), each `privateKey` replaced by a `privateKeyRef` naming its Secret:
    /// what a management cluster keeps. Secrets included: use -o (created 0600).
    ///
    /// Examples:
    ///
    ///   oi keys export -f world.yaml -o world-with-secrets.yaml
    ///   oi reconcile -f world-with-secrets.yaml -o world-with-secrets.yaml
    #[command(verbatim_doc_comment)]
    Export(KeysArgs),

    /// Print all manifests with every private key back inline, without the Secrets that
    /// held them (those `oi keys export` made).
    Inline(KeysArgs),
}

#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(flatten)]
    pub input: InputArgs,
}

#[derive(Debug, Subcommand)]
pub enum SipClusterCommand {
    /// Mark a SIPCluster for deletion and print all manifests: the next `oi reconcile` takes
    /// our labels off its hosts (nothing else of theirs) and removes it.
    Delete(ClusterDeleteArgs),

    /// Print the jump host's inventory of a SIPCluster's hosts (JSON: names, addresses, BMC
    /// addresses and credentials; what `oi-host` reads): BMC passwords included, use -o
    /// (created 0600).
    Inventory(SipInventoryArgs),

    /// Hash a password for an OIDC provider's users list (`passwordHash` in its
    /// `usersSecret`): the password is the first line of stdin, never an argument.
    HashPassword(HashPasswordArgs),
}

#[derive(Debug, Args)]
pub struct HashPasswordArgs {
    /// PBKDF2-HMAC-SHA256 iterations (at least 10000).
    #[arg(long, default_value_t = 600_000)]
    pub iterations: u32,
}

#[derive(Debug, Args)]
pub struct SipInventoryArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Name of the SIPCluster.
    #[arg(long)]
    pub name: String,

    /// Namespace of the SIPCluster.
    #[arg(long, default_value = oi_api::DEFAULT_NAMESPACE)]
    pub namespace: String,

    /// The network whose address each host is listed with (a `networks[].id` of its network
    /// data); the first jump host's `nodeInterfaceId` when not given.
    #[arg(long, value_name = "ID")]
    pub node_interface: Option<String>,
}

#[derive(Debug, Args)]
pub struct ClusterDeleteArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Name of the cluster.
    #[arg(long)]
    pub name: String,

    /// Namespace of the cluster.
    #[arg(long)]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct ClusterTrustIssuerArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`); may be omitted when there is only one.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// The issuer's https URL, exactly its tokens' `iss`.
    #[arg(long, value_name = "URL")]
    pub issuer_url: String,

    /// The client ID its tokens must name in `aud`.
    #[arg(long, value_name = "ID")]
    pub client_id: String,

    /// Another audience accepted besides the client ID (repeatable).
    #[arg(long = "audience", value_name = "AUDIENCE")]
    pub audiences: Vec<String>,

    /// The claim a user's name comes from (default `sub`).
    #[arg(long, value_name = "CLAIM")]
    pub username_claim: Option<String>,

    /// Put before every user name (default `<issuer>#` unless the claim is `email`; `-`:
    /// nothing).
    #[arg(long, value_name = "PREFIX")]
    pub username_prefix: Option<String>,

    /// The claim listing a user's groups.
    #[arg(long, value_name = "CLAIM")]
    pub groups_claim: Option<String>,

    /// Put before every group name.
    #[arg(long, value_name = "PREFIX")]
    pub groups_prefix: Option<String>,

    /// PEM certificates the issuer's TLS certificate is checked against (the API servers'
    /// system trust otherwise).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct ClusterDistrustIssuerArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`); may be omitted when there is only one.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// The issuer's URL.
    #[arg(long, value_name = "URL")]
    pub issuer_url: String,
}

#[derive(Debug, Args)]
pub struct ClusterInjectArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Name of the new cluster.
    #[arg(long)]
    pub name: String,

    /// Namespace of the new cluster.
    #[arg(long)]
    pub namespace: Option<String>,

    /// Kubernetes version (`default`, `1.37`, `1.37.1`; see `oi version kubernetes`).
    #[arg(long, value_name = "VERSION", default_value = "default")]
    pub kubernetes_version: String,

    /// Number of control plane replicas (each an etcd member and API server).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub control_plane_replicas: u32,

    /// API servers in all (ours), at least the replicas: those beyond run alone on private
    /// hypervisors, behind the ingress, talking to the replicas' etcd.
    #[arg(long, value_name = "N")]
    pub api_server_replicas: Option<u32>,

    /// Ingresses (ours), each on a public hypervisor of its own, sharing the address
    /// --ingress-virtual-ip (moved between them by VRRP); more than one needs it.
    #[arg(long, value_name = "N")]
    pub ingress_replicas: Option<u32>,

    /// The cluster's address (ours): an IPv4 address on the public hypervisors' network that
    /// nothing else uses, held by one ingress at a time.
    #[arg(long, value_name = "IP")]
    pub ingress_virtual_ip: Option<std::net::Ipv4Addr>,

    /// VRRP router ID of the ingresses (1-255; by default the last byte of the virtual IP).
    #[arg(long, value_name = "ID", requires = "ingress_virtual_ip")]
    pub ingress_virtual_router_id: Option<u8>,

    /// Enable the cluster's WireGuard VPN.
    #[arg(long)]
    pub vpn_enabled: bool,

    /// Address range of the cluster's VPN (with --vpn-enabled).
    #[arg(long, value_name = "CIDR", requires = "vpn_enabled")]
    pub vpn_cidr: Option<String>,

    /// Extra subject alternative names of the API server certificate (comma separated).
    #[arg(long, value_name = "SAN,...", value_delimiter = ',')]
    pub apiserver_extra_sans: Vec<String>,

    /// Algorithm of the cluster's keys: ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096.
    #[arg(long, value_name = "ALGORITHM")]
    pub key_algorithm: Option<String>,

    /// An OpenID Connect issuer whose ID tokens the API servers accept (ours;
    /// `spec.apiServer.oidc`): its https URL, exactly the tokens' `iss`.
    #[arg(long, value_name = "URL", requires = "oidc_client_id")]
    pub oidc_issuer_url: Option<String>,

    /// The client ID the issuer's tokens must name in `aud`.
    #[arg(long, value_name = "ID", requires = "oidc_issuer_url")]
    pub oidc_client_id: Option<String>,

    /// The claim a user's name comes from (default `sub`).
    #[arg(long, value_name = "CLAIM", requires = "oidc_issuer_url")]
    pub oidc_username_claim: Option<String>,

    /// Put before every user name (default `<issuer>#` unless the claim is `email`; `-`:
    /// nothing).
    #[arg(long, value_name = "PREFIX", requires = "oidc_issuer_url")]
    pub oidc_username_prefix: Option<String>,

    /// The claim listing a user's groups.
    #[arg(long, value_name = "CLAIM", requires = "oidc_issuer_url")]
    pub oidc_groups_claim: Option<String>,

    /// Put before every group name.
    #[arg(long, value_name = "PREFIX", requires = "oidc_issuer_url")]
    pub oidc_groups_prefix: Option<String>,

    /// JWS algorithms accepted, comma separated (kube-apiserver's default: RS256).
    #[arg(
        long,
        value_name = "ALG,...",
        value_delimiter = ',',
        requires = "oidc_issuer_url"
    )]
    pub oidc_signing_algs: Vec<String>,

    /// PEM certificates the issuer's TLS certificate is checked against (the API servers'
    /// system trust otherwise).
    #[arg(long, value_name = "FILE", requires = "oidc_issuer_url")]
    pub oidc_ca_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct ClusterSelectArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`); may be omitted when there is only one.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum HypervisorCommand {
    /// Add a hypervisor to the manifests and print all manifests (private keys included: use
    /// -o).
    Inject(HypervisorInjectArgs),

    /// Make this machine a hypervisor (run on it, as root): start a mutual-TLS front of its CRI
    /// runtime through that runtime, and print its Hypervisor manifest (the client key
    /// included: use -o). Idempotent; a rerun renews certificates close to expiry.
    Join(HypervisorJoinArgs),

    /// Mark a hypervisor unschedulable (ours): nothing new is placed on it, what runs there
    /// stays. Prints all manifests.
    Cordon(HypervisorNameArgs),

    /// Make a cordoned (or drained) hypervisor schedulable again. Prints all manifests.
    Uncordon(HypervisorNameArgs),

    /// Drain a hypervisor (ours): cordon it, then move what runs there elsewhere, one
    /// control plane replica of a cluster at a time (its replacement joins before it leaves),
    /// its ingresses too (their address changes); reconciles until nothing is left there.
    /// Prints all manifests, as far as it got.
    Drain(HypervisorDrainArgs),

    /// Remove a hypervisor gone for good (ours): what ran there is replaced elsewhere without
    /// it (a lost control plane replica's etcd member removed while the members that stay
    /// keep a quorum, its replacement joined as a learner and promoted; ingresses and API
    /// servers placed anew), then the hypervisor leaves the manifests. For a machine that
    /// still answers, `drain` moves things with no downtime instead. Prints all manifests,
    /// as far as it got.
    Remove(HypervisorDrainArgs),

    /// Check that a registered hypervisor is ready before anything is placed on it (ours):
    /// its CRI runtime answers (and its version), the mutual-TLS certificates of its manifest
    /// are in force, the images of the Kubernetes versions in use are present, no other
    /// program holds a port of its range, its capacity is declared, and whether it has
    /// /dev/kvm (ViNO's virtual machines). Read-only. Prints a report; exits 1 when a check
    /// failed (a warning does not), each failure saying what to do.
    Check(HypervisorCheckArgs),
}

#[derive(Debug, Args)]
pub struct HypervisorCheckArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Name of the hypervisor.
    #[arg(long)]
    pub name: String,

    /// Image repository override for every component image (air-gapped mirrors, tests):
    /// the images looked for, and the toolbox image the /dev/kvm probe runs.
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,
}

#[derive(Debug, Args)]
pub struct HypervisorDrainArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Name of the hypervisor.
    #[arg(long)]
    pub name: String,

    /// Print only errors on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// How long each run may take to become ready (e.g. 60s, 2m; at most 24h).
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = oi_cli_io::parse_duration)]
    pub max_wait: std::time::Duration,

    /// Image repository override for every component image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,
}

#[derive(Debug, Args)]
pub struct HypervisorNameArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Name of the hypervisor.
    #[arg(long)]
    pub name: String,
}

/// What `hypervisor inject` and `hypervisor join` both say of the hypervisor.
#[derive(Debug, Args)]
pub struct HypervisorSpecArgs {
    /// Address components on this hypervisor are reached at (`join`: its front listens there).
    #[arg(long, value_name = "IP")]
    pub ip_address: IpAddr,

    /// A public hypervisor runs cluster ingresses; a private one runs control planes.
    #[arg(long)]
    pub public: bool,

    /// Ports allocated to components on this hypervisor.
    #[arg(long, value_name = "LOW-HIGH", default_value = "30000-65000", value_parser = parse_port_range)]
    pub port_range: (u32, u32),
}

#[derive(Debug, Args)]
pub struct HypervisorJoinArgs {
    /// Name of the hypervisor.
    #[arg(long)]
    pub name: String,

    #[command(flatten)]
    pub hypervisor: HypervisorSpecArgs,

    /// A label of the hypervisor (KEY=VALUE; repeatable), e.g. topology.kubernetes.io/zone=z1.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,

    /// The local CRI runtime's socket.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/run/containerd/containerd.sock"
    )]
    pub cri_socket: PathBuf,

    /// The port the front listens on (outside the port range).
    #[arg(long, value_name = "PORT", default_value_t = 27000)]
    pub listen_port: u16,

    /// Where the front's CAs, certificates, keys and configuration are kept (0700).
    #[arg(long, value_name = "DIR", default_value = "/etc/oneinfra/hypervisor")]
    pub state_dir: PathBuf,

    /// Image repository override for the front's haproxy image (air-gapped mirrors, tests).
    #[arg(long, value_name = "REPO", env = "OI_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,

    /// Register the hypervisor on the management cluster at this API server
    /// (https://host:port) instead of printing its manifest.
    #[arg(
        long,
        value_name = "URL",
        requires_all = ["management_ca_cert_file", "join_token"]
    )]
    pub management_endpoint: Option<String>,

    /// PEM CA the management API server's certificate is checked against.
    #[arg(long, value_name = "FILE", requires = "management_endpoint")]
    pub management_ca_cert_file: Option<PathBuf>,

    /// A hypervisor join token (a bootstrap token whose group may create Hypervisors only).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "OI_HYPERVISOR_JOIN_TOKEN",
        hide_env_values = true,
        requires = "management_endpoint"
    )]
    pub join_token: Option<String>,
}

fn parse_label(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{value:?} is not KEY=VALUE")),
    }
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("cri").required(true).args(["local_cri_endpoint", "remote_cri_endpoint"]))]
pub struct HypervisorInjectArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Name of the hypervisor.
    #[arg(long)]
    pub name: String,

    /// Unix socket path of a CRI endpoint on this machine.
    #[arg(long, value_name = "PATH")]
    pub local_cri_endpoint: Option<PathBuf>,

    /// CRI endpoint reached over TCP with mutual TLS, e.g. tcp://192.0.2.10:27000.
    #[arg(
        long,
        value_name = "URI",
        requires_all = ["ca_certificate", "client_certificate", "client_key"]
    )]
    pub remote_cri_endpoint: Option<String>,

    /// PEM file of the CA the remote endpoint's certificate is checked against.
    #[arg(long, value_name = "FILE", requires = "remote_cri_endpoint")]
    pub ca_certificate: Option<PathBuf>,

    /// PEM file of the client certificate presented to the remote endpoint.
    #[arg(long, value_name = "FILE", requires = "remote_cri_endpoint")]
    pub client_certificate: Option<PathBuf>,

    /// PEM file of the client certificate's private key.
    #[arg(long, value_name = "FILE", requires = "remote_cri_endpoint")]
    pub client_key: Option<PathBuf>,

    #[command(flatten)]
    pub hypervisor: HypervisorSpecArgs,

    /// Most components (control plane replicas and ingresses) it may hold (ours).
    #[arg(long, value_name = "N")]
    pub capacity_components: Option<u32>,

    /// CPU it offers components, as a Kubernetes quantity (4, 3500m) (ours).
    #[arg(long, value_name = "QUANTITY", value_parser = parse_cpu)]
    pub capacity_cpu: Option<String>,

    /// Memory it offers components, as a Kubernetes quantity (8Gi) (ours).
    #[arg(long, value_name = "QUANTITY", value_parser = parse_memory)]
    pub capacity_memory: Option<String>,
}

fn parse_cpu(value: &str) -> Result<String, String> {
    oi_api::quantity::parse_cpu_millis(value).map(|_| value.to_string())
}

fn parse_memory(value: &str) -> Result<String, String> {
    oi_api::quantity::parse_memory_bytes(value).map(|_| value.to_string())
}

#[derive(Debug, Subcommand)]
pub enum JoinTokenCommand {
    /// Add a new bootstrap token to a cluster and print all manifests (private keys included:
    /// use -o; the token, a secret too, on stderr).
    Inject(JoinTokenInjectArgs),

    /// Print a new bootstrap token (a secret: whoever has it can ask to join).
    Generate,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Join this machine to a managed cluster as a worker: ask with a join token, wait for the
    /// answer, write the kubelet's files (keys 0600) and its systemd unit, start it where
    /// systemd runs (else print the command that starts it). Rerun after a failure to go on.
    Join(NodeJoinArgs),
}

#[derive(Debug, Args)]
pub struct NodeJoinArgs {
    /// The node's name (a DNS label): the Node and its NodeJoinRequest are named so.
    #[arg(long, value_name = "NAME")]
    pub nodename: String,

    /// The cluster's API endpoint, https://HOST:PORT (`status.apiServerEndpoint`).
    #[arg(long, value_name = "URL")]
    pub apiserver_endpoint: String,

    /// The CA the API server's certificate must chain to (`oi cluster apiserver-ca`).
    #[arg(long, value_name = "FILE")]
    pub apiserver_ca_cert_file: PathBuf,

    /// A join token of the cluster (`oi join-token inject`). Also read from OI_JOIN_TOKEN,
    /// which keeps it out of the process list.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "OI_JOIN_TOKEN",
        hide_env_values = true
    )]
    pub join_token: String,

    /// The CRI endpoint of this node's container runtime, for the kubelet.
    #[arg(
        long,
        value_name = "URL",
        default_value = "unix:///run/containerd/containerd.sock"
    )]
    pub container_runtime_endpoint: String,

    /// The CRI image service endpoint (default: the container runtime endpoint).
    #[arg(long, value_name = "URL")]
    pub image_service_endpoint: Option<String>,

    /// An extra subject alternative name of the kubelet's serving certificate (repeatable).
    #[arg(long, value_name = "SAN")]
    pub extra_san: Vec<String>,

    /// How long to wait for the cluster's answer (e.g. 30s, 5m; at most 24h).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = oi_cli_io::parse_duration)]
    pub timeout: std::time::Duration,

    /// The kubelet binary the unit runs (air-gapped nodes: where you put it).
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/kubelet")]
    pub kubelet_binary: PathBuf,

    /// Write every file under this directory instead of / (containers, tests); the kubelet is
    /// then not started, its command is printed. The VPN interface is still brought up, in
    /// this network namespace.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root_dir: PathBuf,

    /// The WireGuard interface of the cluster VPN, when the cluster has one.
    #[arg(long, value_name = "NAME", default_value = "oi-wg", value_parser = parse_interface)]
    pub vpn_interface: String,

    /// The userspace WireGuard the VPN falls back to where the kernel has no WireGuard.
    #[arg(long, value_name = "PATH", default_value = "wireguard-go")]
    pub wireguard_go: PathBuf,
}

/// A network interface name: 1 to 15 characters, no `/`, whitespace or `:`.
fn parse_interface(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(s.to_string())
    } else {
        Err("an interface name is 1 to 15 letters, digits, '-', '_' or '.'".into())
    }
}

#[derive(Debug, Args)]
pub struct JoinTokenInjectArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The cluster (`NAME` or `NAMESPACE/NAME`).
    #[arg(long, value_name = "NAME")]
    pub cluster: String,
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    #[command(subcommand)]
    pub command: Option<VersionCommand>,
}

#[derive(Debug, Subcommand)]
pub enum VersionCommand {
    /// The default and the supported Kubernetes versions.
    Kubernetes,

    /// The image of a component for a Kubernetes version.
    Component(VersionComponentArgs),
}

#[derive(Debug, Args)]
pub struct VersionComponentArgs {
    /// The component.
    #[arg(long, value_enum)]
    pub component: ComponentName,

    /// Kubernetes version (`default`, `1.37`, `1.37.1`).
    #[arg(long, value_name = "VERSION", default_value = "default")]
    pub kubernetes_version: String,
}

/// Components whose image `oi version component` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ComponentName {
    Etcd,
    KubeApiserver,
    KubeControllerManager,
    KubeScheduler,
    Haproxy,
    Pause,
    Toolbox,
    /// The cluster VPN endpoint (WireGuard); `wireguard` names it too.
    #[value(alias = "wireguard")]
    VpnEndpoint,
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

fn parse_rfc3339(s: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|e| format!("not an RFC 3339 time: {e}"))
}

/// `LOW-HIGH`, both ports. Order is checked by hypervisor validation, like in manifests.
fn parse_port_range(s: &str) -> Result<(u32, u32), String> {
    let (low, high) = s
        .split_once('-')
        .ok_or_else(|| format!("expected LOW-HIGH, got {s:?}"))?;
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .map(u32::from)
            .map_err(|_| format!("{p:?} is not a port (1-65535)"))
    };
    Ok((port(low)?, port(high)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn port_range_forms() {
        assert_eq!(parse_port_range("30000-30100"), Ok((30000, 30100)));
        assert_eq!(parse_port_range("200-100"), Ok((200, 100)));
        assert_eq!(
            parse_port_range("30000"),
            Err("expected LOW-HIGH, got \"30000\"".to_string())
        );
        assert_eq!(
            parse_port_range("1-70000"),
            Err("\"70000\" is not a port (1-65535)".to_string())
        );
    }

    #[test]
    fn now_is_rfc3339() {
        assert!(parse_rfc3339("2026-11-22T00:00:00Z").is_ok());
        assert!(parse_rfc3339("yesterday").is_err());
    }
}
