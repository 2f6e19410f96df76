//! `oi hypervisor inject`: add a validated Hypervisor to the manifests and print them all.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::Context as _;
use oi_api::{
    Certificate, Hypervisor, HypervisorSpec, LocalCriEndpoint, Object, ObjectKey, ObjectMeta,
    PortRange, RemoteCriEndpoint,
};

use crate::args::HypervisorInjectArgs;
use crate::commands::Context;
use crate::manifests;

/// # Errors
/// When the manifests do not load, a hypervisor of that name exists, a PEM file cannot be
/// read, or the new hypervisor is invalid (its key material too: the CA must be a CA, the
/// client key the client certificate's).
pub fn run(
    args: &HypervisorInjectArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let mut world = manifests::load(&args.input, input, ctx.now)?;
    let hypervisor = hypervisor(args)?;
    let key = ObjectKey::cluster_scoped(&args.name);
    anyhow::ensure!(
        !world.hypervisors.contains_key(&key),
        "hypervisor {:?} already exists",
        args.name
    );
    let hypervisor = Object::Hypervisor(hypervisor);
    manifests::validate_new(&hypervisor)?;
    world.insert(hypervisor);
    manifests::finish(&world, output)
}

/// The Hypervisor the flags describe, certificates and key read from their files.
fn hypervisor(args: &HypervisorInjectArgs) -> anyhow::Result<Hypervisor> {
    let local_cri_endpoint = args
        .local_cri_endpoint
        .as_ref()
        .map(|path| LocalCriEndpoint {
            cri_endpoint_path: path.display().to_string(),
        });
    let remote_cri_endpoint = match &args.remote_cri_endpoint {
        None => None,
        Some(uri) => Some(RemoteCriEndpoint {
            cri_endpoint_uri: uri.clone(),
            ca_certificate: read_pem(args.ca_certificate.as_deref(), "--ca-certificate")?,
            client_certificate: Some(Certificate {
                certificate: read_pem(args.client_certificate.as_deref(), "--client-certificate")?,
                private_key: read_pem(args.client_key.as_deref(), "--client-key")?,
            }),
        }),
    };
    let (low, high) = args.hypervisor.port_range;
    Ok(Hypervisor::new(
        ObjectMeta::named(&args.name),
        HypervisorSpec {
            local_cri_endpoint,
            remote_cri_endpoint,
            public: args.hypervisor.public,
            ip_address: args.hypervisor.ip_address.to_string(),
            port_range: PortRange { low, high },
            capacity: (args.capacity_components.is_some()
                || args.capacity_cpu.is_some()
                || args.capacity_memory.is_some())
            .then(|| oi_api::HypervisorCapacity {
                components: args.capacity_components,
                cpu: args.capacity_cpu.clone(),
                memory: args.capacity_memory.clone(),
            }),
            unschedulable: false,
            drain: false,
        },
    ))
}

/// The largest PEM file read: a certificate chain or an RSA-4096 key is a few KiB.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Reads a PEM file a flag names; clap makes the flag required with `--remote-cri-endpoint`.
fn read_pem(path: Option<&Path>, flag: &str) -> anyhow::Result<String> {
    let path = path.with_context(|| format!("{flag} is required with --remote-cri-endpoint"))?;
    let text = oi_cli_io::read_sources(&[path], std::io::empty(), MAX_PEM_BYTES)
        .with_context(|| format!("cannot read {flag} {}", path.display()))?
        .remove(0)
        .text;
    anyhow::ensure!(
        text.contains("-----BEGIN "),
        "{flag} {} is not a PEM file",
        path.display()
    );
    Ok(text)
}
