//! `oi cluster trust-issuer` and `oi cluster distrust-issuer`: the OpenID Connect issuers a
//! cluster's API servers trust beside `spec.apiServer.oidc` (`spec.apiServer.oidcIssuers`).
//! Pure: the next `oi reconcile` rewrites the API servers' authentication configuration,
//! which they read again without a restart.

use std::io::{Read, Write};

use anyhow::Context as _;
use oi_api::{ApiServerOidc, Resource as _};

use crate::args::{ClusterDistrustIssuerArgs, ClusterTrustIssuerArgs};
use crate::manifests;

/// Adds the issuer (or replaces the entry of the same URL) and prints all manifests.
///
/// # Errors
/// The manifests do not load, no cluster (or several) matches `--cluster`, the CA file cannot be read, the
/// issuer is `spec.apiServer.oidc` already, or the cluster would be invalid (each problem
/// named by its field).
pub fn trust(
    args: &ClusterTrustIssuerArgs,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let ca = args
        .ca_file
        .as_ref()
        .map(|path| {
            std::fs::read_to_string(path).with_context(|| format!("--ca-file {}", path.display()))
        })
        .transpose()?
        .unwrap_or_default();
    let mut world = manifests::load_unverified(&args.input, input)?;
    let cluster = manifests::select_cluster_mut(&mut world, args.cluster.as_deref())?;
    let api_server = &mut cluster.spec.api_server;
    if api_server
        .oidc
        .as_ref()
        .is_some_and(|o| o.issuer_url == args.issuer_url)
    {
        anyhow::bail!(
            "cluster {}: {} is already trusted as spec.apiServer.oidc (a SIPCluster's \
             provider, or `oi cluster inject --oidc-*`)",
            cluster.key(),
            args.issuer_url
        );
    }
    let issuer = ApiServerOidc {
        issuer_url: args.issuer_url.clone(),
        client_id: args.client_id.clone(),
        audiences: args.audiences.clone(),
        username_claim: args.username_claim.clone().unwrap_or_default(),
        username_prefix: args.username_prefix.clone(),
        groups_claim: args.groups_claim.clone().unwrap_or_default(),
        groups_prefix: args.groups_prefix.clone(),
        signing_algs: Vec::new(),
        ca,
    };
    let replaced = match api_server
        .oidc_issuers
        .iter_mut()
        .find(|o| o.issuer_url == issuer.issuer_url)
    {
        Some(entry) => {
            *entry = issuer;
            true
        }
        None => {
            api_server.oidc_issuers.push(issuer);
            false
        }
    };
    manifests::validate_new(&oi_api::Object::Cluster(cluster.clone()))?;
    let note = format!(
        "cluster {}: {} {} (the next `oi reconcile` tells its API servers; none restarts)",
        cluster.key(),
        if replaced {
            "trusts, with new settings,"
        } else {
            "now trusts"
        },
        args.issuer_url
    );
    manifests::finish(&world, output)?;
    Ok(Some(note))
}

/// Removes the issuer and prints all manifests.
///
/// # Errors
/// The manifests do not load, or the cluster does not exist or does not trust the issuer.
pub fn distrust(
    args: &ClusterDistrustIssuerArgs,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    let mut world = manifests::load_unverified(&args.input, input)?;
    let cluster = manifests::select_cluster_mut(&mut world, args.cluster.as_deref())?;
    let key = cluster.key();
    let api_server = &mut cluster.spec.api_server;
    let before = api_server.oidc_issuers.len();
    api_server
        .oidc_issuers
        .retain(|o| o.issuer_url != args.issuer_url);
    let mut note = None;
    if api_server.oidc_issuers.len() == before {
        if api_server
            .oidc
            .as_ref()
            .is_some_and(|o| o.issuer_url == args.issuer_url)
        {
            api_server.oidc = None;
            note = Some(
                "it was spec.apiServer.oidc: a SIPCluster whose provider it is sets it again \
                 at the next `oi reconcile` (delete the SIPCluster's provider to let it go)",
            );
        } else {
            anyhow::bail!("cluster {key} does not trust {}", args.issuer_url);
        }
    }
    manifests::finish(&world, output)?;
    Ok(Some(format!(
        "cluster {key}: no longer trusts {} (the next `oi reconcile` tells its API servers; \
         none restarts){}",
        args.issuer_url,
        note.map(|n| format!("; {n}")).unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests;
