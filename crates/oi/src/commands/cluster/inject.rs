//! `oi cluster inject --name N ...`: add a cluster to the world and prepare it (PKI, control
//! plane components and ingress, scheduling, ports, endpoints), then print every manifest.

use std::io::{Read, Write};

use anyhow::Context as _;
use oi_api::{
    Cluster, ClusterSpec, DEFAULT_NAMESPACE, KubeApiServer, Object, ObjectKey, ObjectMeta, Vpn,
};
use oi_pki::KeyAlgorithm;
use oi_planner::PrepareOptions;

use crate::args::ClusterInjectArgs;
use crate::commands::Context;
use crate::manifests;

/// Returns warnings about other clusters of the world that could not be prepared (they are
/// written back as they were).
///
/// # Errors
/// When the manifests do not load, the cluster exists, the flags are invalid, or the cluster
/// cannot be prepared (no suitable hypervisor, ports exhausted, ...).
pub fn run(
    args: &ClusterInjectArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let key = ObjectKey::new(
        args.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
        &args.name,
    );
    anyhow::ensure!(
        !world.clusters.contains_key(&key),
        "cluster {key} already exists"
    );
    let options = PrepareOptions {
        key_algorithm: match &args.key_algorithm {
            Some(algorithm) => algorithm
                .parse::<KeyAlgorithm>()
                .context("invalid --key-algorithm")?,
            None => KeyAlgorithm::default(),
        },
        ..PrepareOptions::default()
    };
    let oidc_ca = args
        .oidc_ca_file
        .as_ref()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("--oidc-ca-file {}", path.display()))
        })
        .transpose()?;
    let cluster = Object::Cluster(cluster(args, oidc_ca));
    manifests::validate_new(&cluster)?;
    world.insert(cluster);

    let mut prepared = oi_planner::prepare_with(world, ctx.now, &options);
    if let Some(error) = prepared.failures.remove(&key) {
        // The error names the cluster and why it could not be scheduled.
        return Err(error.into());
    }
    manifests::finish(&prepared.world, output)?;
    let mut notes = warnings(&prepared.failures);
    notes.extend(crate::commands::availability_warnings(
        &prepared.world,
        Some(&key),
    ));
    Ok(crate::commands::note(notes))
}

/// The Cluster the flags describe, before defaults and preparation; `oidc_ca` is the content
/// of `--oidc-ca-file`.
fn cluster(args: &ClusterInjectArgs, oidc_ca: Option<String>) -> Cluster {
    Cluster::new(
        match &args.namespace {
            Some(namespace) => ObjectMeta::namespaced(namespace, &args.name),
            None => ObjectMeta::named(&args.name),
        },
        ClusterSpec {
            kubernetes_version: args.kubernetes_version.clone(),
            control_plane_replicas: Some(args.control_plane_replicas),
            api_server_replicas: args.api_server_replicas,
            ingress: (args.ingress_replicas.is_some() || args.ingress_virtual_ip.is_some()).then(
                || oi_api::ClusterIngress {
                    replicas: args.ingress_replicas,
                    virtual_ip: args
                        .ingress_virtual_ip
                        .map(|ip| ip.to_string())
                        .unwrap_or_default(),
                    virtual_router_id: args.ingress_virtual_router_id,
                },
            ),
            api_server: KubeApiServer {
                extra_sans: args.apiserver_extra_sans.clone(),
                oidc: args
                    .oidc_issuer_url
                    .as_ref()
                    .map(|issuer_url| oi_api::ApiServerOidc {
                        issuer_url: issuer_url.clone(),
                        client_id: args.oidc_client_id.clone().unwrap_or_default(),
                        audiences: Vec::new(),
                        username_claim: args.oidc_username_claim.clone().unwrap_or_default(),
                        username_prefix: args.oidc_username_prefix.clone(),
                        groups_claim: args.oidc_groups_claim.clone().unwrap_or_default(),
                        groups_prefix: args.oidc_groups_prefix.clone(),
                        signing_algs: args.oidc_signing_algs.clone(),
                        ca: oidc_ca.unwrap_or_default(),
                    }),
                ..KubeApiServer::default()
            },
            vpn: Vpn {
                enabled: args.vpn_enabled,
                cidr: args.vpn_cidr.clone().unwrap_or_default(),
                ..Vpn::default()
            },
            ..ClusterSpec::default()
        },
    )
}

/// One `warning:` line per other cluster that could not be prepared.
fn warnings(failures: &std::collections::BTreeMap<ObjectKey, oi_planner::Error>) -> Vec<String> {
    failures
        .iter()
        .map(|(key, error)| format!("warning: cluster {key} left unprepared: {error}"))
        .collect()
}
