//! The engine against a real local hypervisor set: network namespaces, containerd, etcd 3.4,
//! haproxy and the kube stand-in. Gated on root, the host commands and the offline images
//! (`cargo xtask images`); see `oi_testsupport`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use http::Method;
use oi_api::common::{condition_is_true, condition_types};
use oi_api::versions::INFRA;
use oi_api::{Cluster, ClusterSpec, ObjectKey, ObjectMeta, World};
use oi_cri::ClientOptions;
use oi_engine::{
    CriConnector, EtcdClient, Event, ExecuteOptions, Executed, HttpsRequest, Network as _,
    RealNetwork, Tls,
};
use oi_local_hypervisor_set::Paths;
use oi_local_hypervisor_set::commands::{CreateArgs, create, destroy};
use oi_planner::ports::names;
use oi_planner::render::{RenderOptions, certs};
use oi_planner::{PlanOptions, etcd_membership};
use time::OffsetDateTime;

const REPOSITORY: &str = "localhost/oneinfra";

fn prerequisites(test: &str) -> bool {
    let mut commands = oi_local_hypervisor_set::REQUIRED_COMMANDS.to_vec();
    commands.extend(["containerd", "runc", "ctr", "haproxy"]);
    if !oi_testsupport::require_root_and_commands(test, &commands) {
        return false;
    }
    let dir = oi_testsupport::images_dir();
    let has = |prefix: &str| {
        std::fs::read_dir(&dir).is_ok_and(|entries| {
            entries
                .filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
        })
    };
    oi_testsupport::require(
        test,
        &format!("image tarballs in {} (cargo xtask images)", dir.display()),
        ["pause_", "etcd_", "haproxy_", "kube-apiserver_", "busybox_"]
            .into_iter()
            .all(has),
    )
}

/// Destroys the set when the test ends, whatever happened.
struct Set(String);

impl Drop for Set {
    fn drop(&mut self) {
        let mut progress = Vec::new();
        if let Err(e) = destroy(&Paths::default(), &self.0, &mut progress) {
            eprintln!("destroying set {}: {e}", self.0);
        }
    }
}

#[test]
fn three_replicas_come_up_and_a_second_run_changes_nothing() {
    if !prerequisites("engine real: three replicas") {
        return;
    }
    let name = format!("eng{}", std::process::id());
    let args = CreateArgs {
        name: name.clone(),
        private: 3,
        public: 1,
        tcp: false,
        images_dir: oi_testsupport::images_dir(),
        workers: 0,
    };
    let mut manifests = Vec::new();
    let hypervisors = create(
        &Paths::default(),
        &args,
        &mut manifests,
        &mut std::io::stderr(),
    )
    .expect("create the hypervisor set");
    let _set = Set(name);

    let mut world = World::default();
    for h in hypervisors {
        world
            .hypervisors
            .insert(ObjectKey::cluster_scoped(h.metadata.name.clone()), h);
    }
    let cluster = Cluster::new(
        ObjectMeta::named("c"),
        ClusterSpec {
            control_plane_replicas: Some(3),
            ..ClusterSpec::default()
        },
    );
    world
        .clusters
        .insert(ObjectKey::new("default", "c"), cluster);

    let plan_options = PlanOptions {
        render: RenderOptions {
            image_repository: Some(REPOSITORY.to_string()),
        },
        ..PlanOptions::default()
    };
    let options = ExecuteOptions {
        max_wait: Duration::from_secs(90),
        ..ExecuteOptions::default()
    };
    let connector = CriConnector {
        options: ClientOptions {
            toolbox_image: INFRA.toolbox.reference(Some(REPOSITORY)),
            ..ClientOptions::default()
        },
    };
    let network = RealNetwork::default();
    let progress = |e: &Event| eprintln!("{e}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let now = OffsetDateTime::now_utc();

    let started = Instant::now();
    // A whole run, as `oi reconcile` makes it: plan, execute, record.
    let run = |world: World| -> (World, Executed) {
        let plan = oi_planner::plan(world, now, &plan_options);
        let executed = rt.block_on(oi_engine::execute(
            &plan, &options, &connector, &network, &progress,
        ));
        (
            oi_planner::record(plan.world, &executed.clusters, now),
            executed,
        )
    };
    let (report_world, report) = run(world);
    let first = started.elapsed();
    let key = ObjectKey::new("default", "c");
    let outcome = &report.clusters[&key].outcome;
    assert!(outcome.ready, "{outcome:?}");
    assert_eq!((outcome.etcd_voting, outcome.apiservers_ready), (3, 3));
    assert!(outcome.ingress_ready);
    let cluster = &report_world.clusters[&key];
    assert!(condition_is_true(
        &cluster.status.conditions,
        condition_types::RECONCILE_SUCCEEDED
    ));

    // Independently of the engine's own observation: 3 voting members, ingress /readyz 200.
    let w = &report_world;
    let membership = etcd_membership(w, &key);
    let replica = &w.components[&ObjectKey::new("default", "c-control-plane-0")];
    let client = &replica.status.client_certificates[certs::APISERVER_ETCD_CLIENT];
    let tls = Tls {
        ca_pem: cluster
            .spec
            .etcd_server
            .ca
            .as_ref()
            .unwrap()
            .certificate
            .clone(),
        identity: Some((client.certificate.clone(), client.private_key.clone())),
    };
    let etcd = EtcdClient {
        network: &network,
        tls: &tls,
    };
    let members = rt
        .block_on(etcd.list(&membership.members[0].client_url))
        .unwrap();
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(members.iter().all(|m| m.started() && !m.is_learner));
    let ingress = &w.components[&ObjectKey::new("default", "c-ingress")];
    let ip = &w.hypervisor_of(ingress).unwrap().spec.ip_address;
    let base = format!(
        "https://{ip}:{}",
        ingress.status.host_port(names::APISERVER).unwrap()
    );
    let ca = Tls {
        ca_pem: cluster
            .spec
            .api_server
            .ca
            .as_ref()
            .unwrap()
            .certificate
            .clone(),
        identity: None,
    };
    let readyz = rt
        .block_on(network.request(HttpsRequest {
            base: &base,
            method: &Method::GET,
            path: "/readyz",
            body: None,
            tls: &ca,
            bearer: None,
        }))
        .unwrap();
    assert_eq!(readyz.status, 200);

    let started = Instant::now();
    let (second_world, second) = run(report_world.clone());
    let noop = started.elapsed();
    assert!(second.all_ready(), "{:?}", second.clusters);
    assert_eq!(second.counts.mutating_calls, 0, "{:?}", second.counts);
    assert_eq!(second.counts.pods_unchanged, 7);
    assert_eq!(
        second_world.to_yaml().unwrap(),
        report_world.to_yaml().unwrap()
    );
    eprintln!(
        "engine real: 3 replicas ready in {first:.2?} ({:?}); no-op reconcile {noop:.2?}",
        report.counts
    );
}
