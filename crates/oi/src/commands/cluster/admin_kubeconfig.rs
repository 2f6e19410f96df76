//! `oi cluster admin-kubeconfig [--cluster N]`: a kubeconfig for the cluster administrator
//! (`CN=kubernetes-admin`, `O=system:masters`), pointing at the cluster's ingress. The client
//! certificate is minted on every call from the API server client CA held in the manifests;
//! nothing is written back, so the manifests need not change to hand out access.

use std::io::{Read, Write};

use anyhow::Context as _;
use oi_api::{Certificate, Cluster, ObjectKey};
use oi_pki::{CaKind, LeafSpec};
use time::Duration;

use crate::args::ClusterSelectArgs;
use crate::commands::Context;
use crate::manifests;

/// How long an admin certificate is valid, as kubeadm's `admin.conf`.
const ADMIN_CERTIFICATE_LIFETIME: Duration = Duration::days(365);

/// # Errors
/// When the manifests do not load, the cluster is not found, has no PKI or endpoint yet, or
/// the certificate cannot be minted.
pub fn run(
    args: &ClusterSelectArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let (key, cluster) = manifests::select_cluster(&world, args.cluster.as_deref())?;
    let kubeconfig = admin_kubeconfig(key, cluster, ctx)
        .with_context(|| format!("cannot make an admin kubeconfig for cluster {key}"))?;
    output.write_all(kubeconfig.as_bytes())?;
    Ok(())
}

fn admin_kubeconfig(key: &ObjectKey, cluster: &Cluster, ctx: &Context) -> anyhow::Result<String> {
    let server = &cluster.status.api_server_endpoint;
    anyhow::ensure!(
        !server.is_empty(),
        "status.apiServerEndpoint is not set (was the cluster injected with `oi cluster inject`?)"
    );
    let api_server_ca = present(cluster.spec.api_server.ca.as_ref(), CaKind::ApiServer)?;
    let client_ca = present(
        cluster
            .spec
            .certificate_authorities
            .api_server_client
            .as_ref(),
        CaKind::ApiServerClient,
    )?;
    let client_ca = CaKind::ApiServerClient.load(&client_ca.certificate, &client_ca.private_key)?;
    let admin = LeafSpec::admin();
    let minted = client_ca.issue(&admin, ctx.now, ADMIN_CERTIFICATE_LIFETIME)?;
    Ok(oi_pki::kubeconfig(
        &key.name,
        server,
        // During a CA rotation, both CAs: whichever a replica presents is trusted.
        &oi_planner::rotation::trust_bundle(cluster, CaKind::ApiServer)
            .unwrap_or_else(|| api_server_ca.certificate.clone()),
        &admin.common_name,
        &minted.certificate_pem,
        &minted.private_key_pem,
    )?)
}

/// The CA stored in the field of `kind`, when it is there.
fn present(ca: Option<&Certificate>, kind: CaKind) -> anyhow::Result<&Certificate> {
    ca.filter(|c| !c.certificate.is_empty())
        .with_context(|| format!("{} is not set", kind.manifest_field()))
}
