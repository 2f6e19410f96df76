//! `oi hypervisor join`: run on a machine that has a CRI runtime (as root), it makes the
//! machine a hypervisor reachable over TCP with mutual TLS and prints its Hypervisor manifest.
//!
//! ```text
//! 1. the local runtime answers CRI Version at --cri-socket          else: fail, nothing done
//! 2. the front's PKI in --state-dir (0700; keys 0600): a server CA and a client CA, kept
//!    (a rerun reuses them, so manifests already given out stay good); the server
//!    certificate (SAN = --ip-address) and client certificate issued from them, again when
//!    missing, for another address, or within 30 days of expiry
//! 3. haproxy.cfg + server.pem + client-ca.crt written (atomically)
//! 4. the front: haproxy in TCP mode as a host-network pod *through the runtime itself*
//!    (`oneinfra-system/oneinfra-cri-front`): TLS with a client certificate required (ALPN
//!    h2), forwarding to the runtime's socket; ensured like every pod of ours (same spec:
//!    left running; another: replaced)
//! 5. the front answers CRI Version over mutual TLS with the client certificate
//! 6. the Hypervisor manifest printed: remoteCRIEndpoint tcp://IP:PORT, the server CA, the
//!    client certificate and key (a secret: use -o FILE, created 0600); or, with
//!    --management-endpoint, --management-ca-cert-file and --join-token (a hypervisor join
//!    token: a bootstrap token in the group config/rbac's joiner role binds, which may
//!    create Hypervisors and nothing else, not even read them), created there; one of that
//!    name already there is left as it is (the token cannot read it to compare)
//! ```
//!
//! Idempotent: a second run with the same flags changes nothing and prints the same manifest.
//! Steps 1 to 5 are `oi_cri_front::ensure_front`, which the local hypervisor set's `--tcp`
//! hypervisors use too.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context as _, bail};
use oi_api::{
    Certificate, Hypervisor, HypervisorSpec, ObjectMeta, PortRange, RemoteCriEndpoint, World,
};
use oi_cri_front::{FrontOptions, ensure_front};

use crate::args::HypervisorJoinArgs;
use crate::commands::Context;

/// Joins; returns the note for stderr (what was done).
///
/// # Errors
/// Each failure names what failed: the runtime, a file, the front, the registration.
pub fn run(
    args: &HypervisorJoinArgs,
    ctx: &Context,
    output: &mut impl Write,
) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(join(args, ctx.now, output))
}

async fn join(
    args: &HypervisorJoinArgs,
    now: time::OffsetDateTime,
    output: &mut impl Write,
) -> anyhow::Result<String> {
    let front = ensure_front(&FrontOptions {
        name: &args.name,
        ip: args.hypervisor.ip_address,
        port: args.listen_port,
        socket: &args.cri_socket,
        state_dir: &args.state_dir,
        image: oi_api::versions::INFRA
            .haproxy
            .reference(args.image_repository.as_deref()),
        now,
    })
    .await?;
    let mut notes = front.notes;
    let (low, high) = args.hypervisor.port_range;
    let mut meta = ObjectMeta::named(&args.name);
    for (k, v) in &args.labels {
        meta.labels.insert(k.clone(), v.clone());
    }
    let hypervisor = Hypervisor::new(
        meta,
        HypervisorSpec {
            local_cri_endpoint: None,
            remote_cri_endpoint: Some(RemoteCriEndpoint {
                cri_endpoint_uri: front.uri,
                ca_certificate: front.server_ca_pem,
                client_certificate: Some(Certificate {
                    certificate: front.client_cert_pem,
                    private_key: front.client_key_pem,
                }),
            }),
            public: args.hypervisor.public,
            ip_address: args.hypervisor.ip_address.to_string(),
            port_range: PortRange { low, high },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    );
    let object = oi_api::Object::Hypervisor(hypervisor.clone());
    crate::manifests::validate_new(&object)?;
    match (
        &args.management_endpoint,
        &args.management_ca_cert_file,
        &args.join_token,
    ) {
        (Some(endpoint), Some(ca), Some(token)) => {
            notes.push(register(&hypervisor, endpoint, ca, token).await?);
        }
        _ => {
            let mut world = World::default();
            world.insert(object);
            output.write_all(world.to_yaml()?.as_bytes())?;
        }
    }
    Ok(notes.join("\n"))
}

/// The management cluster's Hypervisors.
const HYPERVISORS: &str = "/apis/infra.oneinfra.ereslibre.es/v1alpha1/hypervisors";

/// Creates the Hypervisor on the management cluster with a hypervisor join token, which may
/// create Hypervisors and do nothing else: one of that name already there is left as it is
/// (the token cannot read it to compare; an administrator updates it).
async fn register(
    hypervisor: &Hypervisor,
    endpoint: &str,
    ca: &std::path::Path,
    token: &str,
) -> anyhow::Result<String> {
    if !oi_api::validation::is_bootstrap_token(token) {
        bail!("--join-token is not a bootstrap token ([a-z0-9]{{6}}.[a-z0-9]{{16}})");
    }
    let ca_pem = std::fs::read_to_string(ca)
        .with_context(|| format!("--management-ca-cert-file {}", ca.display()))?;
    let client = super::super::node::Client::new(endpoint, ca_pem, token, Duration::from_secs(20))?;
    let body = serde_json::to_string(hypervisor)?;
    let name = &hypervisor.metadata.name;
    let answer = client
        .call(&http::Method::POST, HYPERVISORS, Some(&body))
        .await?;
    match answer.status {
        200 | 201 => Ok(format!("hypervisor {name} registered at {endpoint}")),
        409 => Ok(format!(
            "hypervisor {name} is registered at {endpoint} already: left as it is (a join \
             token cannot change it; an administrator can, with the manifest this command \
             prints without --management-endpoint)"
        )),
        _ => Err(super::super::node::refusal(
            &format!("registering hypervisor {name}"),
            &answer,
        )),
    }
}
