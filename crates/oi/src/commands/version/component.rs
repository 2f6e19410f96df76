//! `oi version component --component X [--kubernetes-version V]`: the image a component runs.

use std::io::Write;

use anyhow::Context as _;
use oi_api::versions::{self, Image};

use crate::args::{ComponentName, VersionComponentArgs};

/// # Errors
/// For an unsupported Kubernetes version, or when the output cannot be written.
pub fn run(args: &VersionComponentArgs, output: &mut impl Write) -> anyhow::Result<()> {
    let image = image(args.component, &args.kubernetes_version)?;
    writeln!(output, "{image}")?;
    Ok(())
}

/// The image of `component` in the release `kubernetes_version` resolves to.
pub fn image(component: ComponentName, kubernetes_version: &str) -> anyhow::Result<Image> {
    let release = versions::find_release(kubernetes_version).with_context(|| {
        format!(
            "unsupported Kubernetes version {kubernetes_version:?} (supported: default, {})",
            versions::supported_versions().join(", ")
        )
    })?;
    Ok(match component {
        ComponentName::Etcd => release.etcd,
        ComponentName::KubeApiserver => release.kube_apiserver,
        ComponentName::KubeControllerManager => release.kube_controller_manager,
        ComponentName::KubeScheduler => release.kube_scheduler,
        ComponentName::Haproxy => versions::INFRA.haproxy,
        ComponentName::Pause => versions::INFRA.pause,
        ComponentName::Toolbox => versions::INFRA.toolbox,
        ComponentName::VpnEndpoint => versions::INFRA.vpn_endpoint,
    })
}
