//! `create`: a set of hypervisors, each a network namespace with its own containerd (and,
//! with `--tcp`, a mutual-TLS front), printed as Hypervisor manifests.
//!
//! ```text
//! validate ─► lock ─► exists? ─► choose subnet [and the workers' LAN] ─► state.json
//!   ─► bridge ─► unlock ─► per hypervisor: netns + veth ─► [router, per worker: netns on
//!   its LAN] ─► containerd each (workers too) ─► socket ready ─► images (hypervisors) ─►
//!   [front] ─► state ready ─► manifests on stdout
//! any failure after state.json ─► destroy (what was made goes away) ─► the error
//! ```

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use oi_api::Hypervisor;

use crate::error::{Error, Result, io};
use crate::manifest::{self, Endpoint};
use crate::plan::{self, CRI_TLS_PORT};
use crate::state::{HypervisorState, Paths, Phase, SetState, write_atomically};
use crate::system::{RealSystem, System};
use crate::{containerd, host};

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateArgs {
    pub name: String,
    pub private: usize,
    pub public: usize,
    /// Front each containerd with a mutual-TLS TCP endpoint.
    pub tcp: bool,
    /// Every `*.tar` in it is imported into every hypervisor.
    pub images_dir: PathBuf,
    /// Workers behind a NAT router (their own namespace and containerd each; no images).
    pub workers: usize,
}

/// Creates a set and writes its Hypervisor manifests to `out` (progress to `progress`).
/// Returns the manifests.
///
/// # Errors
/// [`Error::AlreadyExists`] (nothing touched), validation errors (nothing touched), or the
/// first failure while creating (what was created is removed again).
pub fn create(
    paths: &Paths,
    args: &CreateArgs,
    out: &mut dyn Write,
    progress: &mut dyn Write,
) -> Result<Vec<Hypervisor>> {
    create_with(&RealSystem, paths, args, out, progress)
}

/// [`create`] against any [`System`].
///
/// # Errors
/// As [`create`].
pub fn create_with(
    sys: &dyn System,
    paths: &Paths,
    args: &CreateArgs,
    out: &mut dyn Write,
    progress: &mut dyn Write,
) -> Result<Vec<Hypervisor>> {
    // Everything that can be checked without touching the host, first.
    plan::plan_set(&args.name, 0, args.private, args.public)?;
    let tarballs = containerd::image_tarballs(&args.images_dir)?;
    let started = Instant::now();

    for dir in [&paths.lib, &paths.run] {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let lock_path = paths.lock_file();
    let lock = File::create(&lock_path).map_err(io(&lock_path))?;
    // Concurrent creates must not pick the same subnet: choosing it and making the bridge
    // that claims it happen under one machine-wide lock.
    lock.lock().map_err(io(&lock_path))?;

    if paths.state_file(&args.name).exists() || paths.set_lib(&args.name).exists() {
        return Err(Error::AlreadyExists {
            name: args.name.clone(),
            path: paths.set_lib(&args.name),
        });
    }
    if let Some(ns) = sys
        .netns_names()?
        .into_iter()
        .find(|ns| plan::is_hypervisor_of(&args.name, ns))
    {
        return Err(Error::AlreadyExists {
            name: args.name.clone(),
            path: host::netns_path(&ns),
        });
    }

    let mut host_nets = sys.host_ipv4_networks()?;
    // What the host reaches in the pool (a name server there, as on these machines) no set
    // takes, and stays reachable; any other address of the pool no set holds (a destroyed
    // set's) goes nowhere: never out through the default route.
    let reserved = plan::reserved_in_pool(&sys.host_reached_addresses()?);
    match plan::pool_route_conflict(&host_nets) {
        None => sys.ensure_unreachable(&plan::unreachable_routes(&reserved))?,
        Some(wider) => {
            let _ = writeln!(
                progress,
                "warning: the host routes {wider}, which holds the sets' pool {}: no unreachable \
                 route is added for the pool (it would hide part of {wider}); traffic to a \
                 destroyed set's address follows {wider}",
                plan::SUBNET_POOL
            );
        }
    }
    host_nets.extend(reserved);
    let mut host_links = sys.host_links()?;
    for other in SetState::list_names(paths)? {
        // A set being created or destroyed may not have its bridge (yet, or any more).
        if let Ok(Some(state)) = SetState::load(paths, &other) {
            host_nets.push(state.subnet);
            host_nets.extend(state.nat.as_ref().map(|n| n.lan));
            host_links.push(state.bridge);
        }
    }
    let slot = plan::choose_slot(&args.name, |s| {
        !plan::slot_is_free(s, &host_nets, &host_links)
    })?;
    let mut plan = plan::plan_set(&args.name, slot, args.private, args.public)?;
    if args.workers > 0 {
        let set_subnet = plan.subnet;
        host_nets.push(set_subnet);
        let lan_slot = plan::choose_slot(&format!("{}.lan", args.name), |s| {
            s == slot || !plan::slot_is_free(s, &host_nets, &host_links)
        })?;
        plan.nat = Some(plan::plan_nat(&plan, lan_slot, args.workers)?);
    }
    let mut state = SetState::from_plan(&plan, args.tcp, paths);
    state.save(paths)?;
    let _ = writeln!(
        progress,
        "set {}: subnet {}, bridge {}, {} hypervisors",
        plan.name,
        plan.subnet,
        plan.bridge,
        plan.hypervisors.len()
    );
    if let Some(nat) = &plan.nat {
        let n = nat.workers.len();
        let _ = writeln!(
            progress,
            "set {}: {n} {} on {} behind NAT router {} ({})",
            plan.name,
            if n == 1 { "worker" } else { "workers" },
            nat.lan,
            nat.router,
            nat.uplink_ip
        );
    }

    let result = sys
        .create_bridge(&plan.bridge, plan.gateway, plan.subnet)
        .and_then(|()| {
            drop(lock);
            build(sys, paths, &mut state, &tarballs, progress)
        });
    match result {
        Ok(hypervisors) => {
            let yaml = manifest::to_yaml(&hypervisors)?;
            // Holds client keys with --tcp: owner only.
            write_atomically(
                &paths.set_lib(&args.name).join("hypervisors.yaml"),
                yaml.as_bytes(),
                0o600,
            )?;
            out.write_all(yaml.as_bytes()).map_err(io("<stdout>"))?;
            let _ = writeln!(
                progress,
                "set {}: ready in {:.1}s",
                args.name,
                started.elapsed().as_secs_f64()
            );
            Ok(hypervisors)
        }
        Err(e) => {
            let _ = writeln!(progress, "set {}: creation failed, cleaning up", args.name);
            if let Err(cleanup) =
                crate::commands::destroy::destroy_with(sys, paths, &args.name, progress)
            {
                let _ = writeln!(
                    progress,
                    "set {}: cleanup failed too ({cleanup}); run destroy again",
                    args.name
                );
            }
            Err(e)
        }
    }
}

/// Everything after the bridge: namespaces, containerds, images, fronts. Saves the state
/// after each step that started something.
fn build(
    sys: &dyn System,
    paths: &Paths,
    state: &mut SetState,
    tarballs: &[PathBuf],
    progress: &mut dyn Write,
) -> Result<Vec<Hypervisor>> {
    let set = state.name.clone();
    for hv in &state.hypervisors {
        sys.create_hypervisor_network(
            &hv.name,
            &hv.host_veth,
            &state.bridge,
            hv.ip,
            state.subnet,
            state.gateway,
        )?;
        let _ = writeln!(progress, "{}: network namespace, {}", hv.name, hv.ip);
    }

    if let Some(nat) = &state.nat {
        sys.create_nat_router(nat, &state.bridge, state.subnet)?;
        let _ = writeln!(
            progress,
            "{}: NAT router, {} on the set, {} on the LAN",
            nat.router, nat.uplink_ip, nat.lan_gateway
        );
        for w in &nat.workers {
            sys.create_worker_network(nat, w)?;
            let _ = writeln!(
                progress,
                "{}: network namespace, {} behind NAT",
                w.name, w.ip
            );
        }
    }

    for i in 0..state.hypervisors.len() {
        let name = state.hypervisors[i].name.clone();
        let hp = paths.hypervisor(&set, &name);
        let pid = sys.start_containerd(&name, &hp)?;
        state.hypervisors[i].containerd_pid = Some(pid);
        state.save(paths)?;
    }
    let workers = state.nat.as_ref().map_or(0, |n| n.workers.len());
    for i in 0..workers {
        let Some(nat) = state.nat.as_mut() else {
            break;
        };
        let name = nat.workers[i].name.clone();
        let pid = sys.start_containerd(&name, &paths.hypervisor(&set, &name))?;
        nat.workers[i].containerd_pid = Some(pid);
        state.save(paths)?;
    }
    let started: Vec<(String, Option<u32>)> = state
        .hypervisors
        .iter()
        .map(|h| (h.name.clone(), h.containerd_pid))
        .chain(
            state
                .nat
                .iter()
                .flat_map(|n| &n.workers)
                .map(|w| (w.name.clone(), w.containerd_pid)),
        )
        .collect();
    for (name, pid) in started {
        let hp = paths.hypervisor(&set, &name);
        // Set just above; `start` returned it.
        let pid = pid.unwrap_or_default();
        sys.wait_containerd(&name, pid, &hp)?;
        let _ = writeln!(progress, "{name}: containerd {pid} ready");
    }

    let private = containerd::tarballs_for(crate::plan::Visibility::Private, tarballs);
    let _ = writeln!(
        progress,
        "set {set}: importing {} images into each public hypervisor, {} into each private one",
        tarballs.len(),
        private.len()
    );
    std::thread::scope(|scope| {
        let handles: Vec<_> = state
            .hypervisors
            .iter()
            .map(|hv| {
                let wanted = containerd::tarballs_for(hv.visibility, tarballs);
                scope.spawn(move || sys.import_images(&hv.socket, &wanted))
            })
            .collect();
        handles
            .into_iter()
            // An import thread only panics if `ctr`'s handling panics: pass that on.
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Result<Vec<()>>>()
    })?;

    // With --tcp, every hypervisor's front as `oi hypervisor join` makes it (a pod through
    // the hypervisor's containerd), all at once.
    let fronts: Vec<Option<crate::front::FrontCredentials>> = if state.tcp {
        std::thread::scope(|scope| {
            let handles: Vec<_> = state
                .hypervisors
                .iter()
                .map(|hv| {
                    let hp = paths.hypervisor(&set, &hv.name);
                    scope.spawn(move || sys.start_front(&hv.name, &hp, hv.ip, CRI_TLS_PORT))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .map(|r| r.map(Some))
                .collect::<Result<Vec<_>>>()
        })?
    } else {
        state.hypervisors.iter().map(|_| None).collect()
    };
    let mut hypervisors = Vec::with_capacity(state.hypervisors.len());
    for (i, front) in fronts.into_iter().enumerate() {
        let hv = state.hypervisors[i].clone();
        let Some(front) = front else {
            hypervisors.push(manifest::hypervisor(&hv, Endpoint::Local));
            continue;
        };
        let uri = front.uri.clone();
        let _ = writeln!(progress, "{}: mutual-TLS front (pod) on {uri}", hv.name);
        state.hypervisors[i] = HypervisorState {
            haproxy_pid: None,
            cri_endpoint_uri: Some(uri.clone()),
            ..hv
        };
        state.save(paths)?;
        hypervisors.push(manifest::hypervisor(
            &state.hypervisors[i],
            Endpoint::Remote {
                uri: &uri,
                ca_pem: &front.server_ca_pem,
                client_cert_pem: &front.client_cert_pem,
                client_key_pem: &front.client_key_pem,
            },
        ));
    }
    state.phase = Phase::Ready;
    state.save(paths)?;
    Ok(hypervisors)
}
