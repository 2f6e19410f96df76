//! The `oi-manager` binary, two replicas, against a management API server on loopback (the
//! stand-in `oi_manager_testsupport::apiserver_standin`: no Kubernetes API server can run here), on real local
//! hypervisors behind mutual-TLS CRI fronts: one replica leads on the Lease and brings a
//! 3-replica Cluster up (kube-runtime watches, Components created with owner references,
//! status through the status subresource, Events, metrics); the leader is SIGKILLed, the
//! standby takes the Lease over and scales the cluster 3 → 1; the Cluster is deleted and
//! nothing is left; SIGTERM releases the Lease and exits 0.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use oi_api::common::{ConditionStatus, condition_types, find_condition};
use oi_api::{Cluster, ClusterSpec, Component, ObjectKey, ObjectMeta};
use oi_e2e::{
    Etcdctl, IMAGE_REPOSITORY, LocalSet, World, admin_kubeconfig, all_reachable_metrics, binary,
    eventually, inject_cluster_with, kubectl_version, nothing_left, oi, prerequisites,
};
use oi_manager_testsupport::apiserver_standin::{ApiServer, StandinOptions};

use oi_manager::args::{
    DEFAULT_LEADER_ELECTION_ID as LEASE, DEFAULT_LEADER_ELECTION_NAMESPACE as LEASE_NAMESPACE,
};

/// `GET path` on 127.0.0.1:`port`: status code and body.
fn get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP answer: {raw:?}"))?;
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// One `oi-manager run` replica.
struct Manager {
    identity: String,
    child: Child,
    log: PathBuf,
    metrics: u16,
    probes: u16,
}

impl Manager {
    fn start(identity: &str, kubeconfig: &Path, dir: &Path) -> Manager {
        let (metrics, probes) = (
            oi_testsupport::free_loopback_port(),
            oi_testsupport::free_loopback_port(),
        );
        let log = dir.join(format!("{identity}.log"));
        let child = Command::new(binary("oi-manager").unwrap())
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                &format!("--leader-election-identity={identity}"),
                &format!("--leader-election-namespace={LEASE_NAMESPACE}"),
                "--leader-election-lease-duration=3s",
                "--leader-election-renew-deadline=2s",
                "--leader-election-retry-period=500ms",
                &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
                &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
                &format!("--image-repository={IMAGE_REPOSITORY}"),
                "--max-wait=30s",
                "--requeue-not-ready=1s",
                "--backoff-min=500ms",
                "--backoff-max=5s",
                "--hypervisor-probe-interval=5s",
                "--log=info,oi_manager=debug",
            ])
            .env_remove("KUBECONFIG")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .env_remove("OI_IMAGE_REPOSITORY")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Manager {
            identity: identity.to_string(),
            child,
            log,
            metrics,
            probes,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn metrics(&self) -> anyhow::Result<String> {
        let (code, body) = get(self.metrics, "/metrics")?;
        anyhow::ensure!(code == 200, "/metrics answered {code}: {body}");
        Ok(body)
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {within:?}:\n{}",
                self.identity,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ready(server: &ApiServer, key: &ObjectKey) -> anyhow::Result<Cluster> {
    let cluster: Cluster = server
        .object(key)
        .ok_or_else(|| anyhow::anyhow!("cluster {key} is gone"))?;
    let condition = find_condition(
        &cluster.status.conditions,
        condition_types::RECONCILE_SUCCEEDED,
    );
    anyhow::ensure!(
        condition.is_some_and(|c| c.status == ConditionStatus::True),
        "not ready: {condition:?}"
    );
    Ok(cluster)
}

fn components(server: &ApiServer, cluster: &str) -> Vec<Component> {
    server
        .objects::<Component>()
        .into_iter()
        .filter(|c| c.spec.cluster == cluster)
        .collect()
}

fn voting_members(server: &ApiServer, replicas: usize) {
    Etcdctl::new(&World::of_store(server).unwrap(), "c1")
        .unwrap()
        .wait_voting_members(replicas, Duration::from_secs(30))
        .unwrap();
}

/// team-a/c1 as stored: references, not keys, where its keys live in Secrets.
fn stored_c1(server: &ApiServer) -> serde_json::Value {
    server
        .call(
            http::Method::GET,
            "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/team-a/clusters/c1",
            None,
        )
        .unwrap()
}

/// The reasons of the Events the API server received, in order.
fn event_reasons(server: &ApiServer) -> Vec<String> {
    server
        .events()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

/// Panics with everything a failure needs: both logs and the Events.
fn failed(what: &str, error: &anyhow::Error, managers: &[&Manager], server: &ApiServer) -> ! {
    let logs: Vec<String> = managers
        .iter()
        .map(|m| {
            let log = m.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            format!(
                "--- {} (last 60 lines)\n{}",
                m.identity,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect();
    panic!(
        "{what}: {error:#}\nevents: {:?}\n{}",
        event_reasons(server),
        logs.join("\n")
    );
}

#[test]
fn two_manager_replicas_bring_up_fail_over_scale_and_delete_a_cluster() {
    let test = "two_manager_replicas_bring_up_fail_over_scale_and_delete_a_cluster";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("mb", 3, 1, true).unwrap();
    // Watches end every 20 s, as an API server ends them now and then: the replicas resume.
    let server = ApiServer::start(StandinOptions {
        watch_timeout: Duration::from_secs(20),
        ..StandinOptions::default()
    })
    .unwrap();
    // The administrator registers the hypervisors (remote, mutual-TLS CRI endpoints).
    let hypervisors = oi_api::World::load(&set.manifests, "oi-local-hypervisor-set")
        .unwrap()
        .hypervisors;
    assert_eq!(hypervisors.len(), 4);
    for h in hypervisors.into_values() {
        assert!(h.spec.remote_cri_endpoint.is_some(), "{h:?}");
        server.create(&h).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.write_kubeconfig(dir.path()).unwrap();
    let a = Manager::start("replica-a", &kubeconfig, dir.path());
    let b = Manager::start("replica-b", &kubeconfig, dir.path());

    // One leads; both are ready (the standby can take over).
    let leader = eventually(Duration::from_secs(30), || {
        server
            .lease_holder(LEASE_NAMESPACE, LEASE)
            .ok_or_else(|| anyhow::anyhow!("no holder yet"))
    })
    .unwrap_or_else(|e| failed("leader election", &e, &[&a, &b], &server));
    let (mut leader, mut standby) = if leader == a.identity {
        (a, b)
    } else {
        assert_eq!(leader, b.identity);
        (b, a)
    };
    for m in [&leader, &standby] {
        eventually(Duration::from_secs(30), || {
            let answer = get(m.probes, "/readyz")?;
            anyhow::ensure!(answer == (200, "ok\n".to_string()), "{answer:?}");
            Ok(())
        })
        .unwrap_or_else(|e| failed("/readyz", &e, &[&leader, &standby], &server));
    }

    // A 3-replica Cluster, declared as an administrator would.
    let key = ObjectKey::new("team-a", "c1");
    server
        .create(&Cluster::new(
            ObjectMeta::namespaced("team-a", "c1"),
            ClusterSpec {
                control_plane_replicas: Some(3),
                ..ClusterSpec::default()
            },
        ))
        .unwrap();
    let started = Instant::now();
    let cluster = eventually(Duration::from_secs(240), || ready(&server, &key))
        .unwrap_or_else(|e| failed("c1 ready", &e, &[&leader, &standby], &server));
    eprintln!(
        "{test}: c1 ready after {:.1?} (leader {})",
        started.elapsed(),
        leader.identity
    );
    let uid = cluster.metadata.uid.clone().unwrap();
    let created = components(&server, "c1");
    assert_eq!(created.len(), 4, "{created:?}");
    for c in &created {
        let owner = &c.metadata.owner_references;
        assert!(
            owner.len() == 1 && owner[0].uid == uid && owner[0].kind == "Cluster",
            "{}: {owner:?}",
            c.metadata.name
        );
        assert_eq!(
            c.metadata.finalizers,
            [oi_manager::controller::FINALIZER],
            "{}",
            c.metadata.name
        );
    }
    assert_eq!(
        cluster.metadata.finalizers,
        [oi_manager::controller::FINALIZER]
    );
    voting_members(&server, 3);
    // Its private keys are in Secrets of its namespace, owned by it; the stored Cluster holds
    // references and certificates only. (The admin kubeconfig below is made from the keys
    // read back from those Secrets.)
    let stored = stored_c1(&server);
    let text = stored.to_string();
    assert!(
        !text.contains("PRIVATE KEY"),
        "a key in the stored Cluster: {text}"
    );
    assert!(text.contains("privateKeyRef"), "{text}");
    let components_stored = server
        .call(
            http::Method::GET,
            "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/team-a/components",
            None,
        )
        .unwrap()
        .to_string();
    assert!(
        !components_stored.contains("PRIVATE KEY"),
        "a key in a stored Component: {components_stored}"
    );
    let secrets = server.key_secrets("team-a");
    let names: Vec<&str> = secrets
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    for name in [
        "c1-ca",
        "c1-etcd",
        "c1-sa",
        "c1-control-plane-0-server-certificates-etcd-server",
    ] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    for secret in &secrets {
        // Owned by the object whose keys it holds: the Cluster or one of its Components.
        let owner = &secret["metadata"]["ownerReferences"][0];
        let of = secret["metadata"]["annotations"]["oneinfra.ereslibre.es/private-keys-of"]
            .as_str()
            .unwrap();
        assert_eq!(
            format!(
                "{}/{}",
                owner["kind"].as_str().unwrap(),
                owner["name"].as_str().unwrap()
            ),
            of
        );
        if of == "Cluster/c1" {
            assert_eq!(owner["uid"], uid.as_str(), "{}", secret["metadata"]["name"]);
        }
    }
    let kubeconfig_c1 =
        admin_kubeconfig(&World::of_store(&server).unwrap(), "c1", dir.path()).unwrap();
    let version = eventually(Duration::from_secs(30), || kubectl_version(&kubeconfig_c1)).unwrap();
    assert!(
        version.pointer("/serverVersion/gitVersion").is_some(),
        "{version}"
    );
    // What went over the wire: Components created under the Cluster's namespace, the
    // Cluster's status written through its status subresource.
    let requests = server.requests();
    let base = "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/team-a";
    let posts = requests
        .iter()
        .filter(|r| r.starts_with(&format!("POST {base}/components?")))
        .count();
    assert_eq!(posts, 4, "{requests:#?}");
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with(&format!("PUT {base}/clusters/c1/status?"))),
        "{requests:#?}"
    );
    let reasons = event_reasons(&server);
    assert_eq!(
        reasons.iter().filter(|r| *r == "ComponentCreated").count(),
        4,
        "{reasons:?}"
    );
    assert!(reasons.contains(&"ClusterReady".to_string()), "{reasons:?}");
    // The leader's metrics: leading, every hypervisor reachable, reconciles counted.
    let metrics = leader.metrics().unwrap();
    assert!(metrics.contains("\noi_manager_leader 1\n"), "{metrics}");
    for reachable in all_reachable_metrics(&server) {
        assert!(metrics.contains(&reachable), "{metrics}");
    }
    assert!(
        metrics.contains("oi_manager_reconciles_total{controller=\"cluster\"}"),
        "{metrics}"
    );
    let standby_metrics = standby.metrics().unwrap();
    assert!(
        standby_metrics.contains("\noi_manager_leader 0\n"),
        "{standby_metrics}"
    );

    // The leader dies without a word: the standby takes the Lease once it expires.
    leader.signal("-KILL");
    leader.exit(Duration::from_secs(10));
    let killed = Instant::now();
    eventually(Duration::from_secs(30), || {
        let holder = server.lease_holder(LEASE_NAMESPACE, LEASE);
        anyhow::ensure!(
            holder.as_deref() == Some(standby.identity.as_str()),
            "held by {holder:?}"
        );
        Ok(())
    })
    .unwrap_or_else(|e| failed("takeover", &e, &[&standby], &server));
    eprintln!(
        "{test}: {} took over {:.1?} after the leader was killed",
        standby.identity,
        killed.elapsed()
    );

    // Scaled 3 → 1 under the new leader: two replicas leave etcd and go.
    let mut cluster: Cluster = server.object(&key).unwrap();
    cluster.spec.control_plane_replicas = Some(1);
    server.update(&cluster).unwrap();
    eventually(Duration::from_secs(180), || {
        let names: Vec<String> = components(&server, "c1")
            .into_iter()
            .map(|c| c.metadata.name)
            .collect();
        anyhow::ensure!(
            names == ["c1-control-plane-0", "c1-ingress"],
            "components: {names:?}"
        );
        ready(&server, &key).map(drop)
    })
    .unwrap_or_else(|e| failed("scale 3 -> 1", &e, &[&standby], &server));
    voting_members(&server, 1);
    let version = eventually(Duration::from_secs(30), || kubectl_version(&kubeconfig_c1)).unwrap();
    assert!(version.pointer("/serverVersion/gitVersion").is_some());
    let reasons = event_reasons(&server);
    assert_eq!(
        reasons.iter().filter(|r| *r == "ComponentDeleted").count(),
        2,
        "{reasons:?}"
    );
    // The scale above was written as oneinfra's manifests are, with the keys inline: the
    // manager moved them into their Secrets again, and said so.
    assert!(
        reasons.contains(&"PrivateKeysMoved".to_string()),
        "{reasons:?}"
    );
    let stored = stored_c1(&server);
    assert!(!stored.to_string().contains("PRIVATE KEY"), "{stored}");

    // Deleted: nothing left in the API, on the hypervisors or in their port allocations.
    server.delete::<Cluster>(&key).unwrap();
    eventually(Duration::from_secs(120), || {
        anyhow::ensure!(
            server.object::<Cluster>(&key).is_none(),
            "the Cluster is still there"
        );
        let left = components(&server, "c1").len();
        anyhow::ensure!(left == 0, "{left} components left");
        Ok(())
    })
    .unwrap_or_else(|e| failed("deletion", &e, &[&standby], &server));
    nothing_left(&server, &set).unwrap();
    assert_eq!(
        server.key_secrets("team-a"),
        Vec::<serde_json::Value>::new(),
        "the Cluster's Secrets went with it"
    );
    assert!(
        event_reasons(&server).contains(&"ClusterDeleted".to_string()),
        "{:?}",
        event_reasons(&server)
    );

    // SIGTERM: the leader finishes, releases the Lease and exits 0.
    standby.signal("-TERM");
    let status = standby.exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", standby.log());
    assert_eq!(server.lease_holder(LEASE_NAMESPACE, LEASE), None);
    drop(set);
}

/// A world made with `oi` and handed to a management cluster with `oi keys export`: the
/// manager reads its keys from the Secrets, and its CAs are the world's, so an admin
/// kubeconfig made from the world before the manager ever ran reaches the cluster it brings up.
#[test]
fn a_world_exported_to_secrets_keeps_its_cas_under_the_manager() {
    let test = "a_world_exported_to_secrets_keeps_its_cas_under_the_manager";
    if !prerequisites(test) {
        return;
    }
    let set = LocalSet::create("mk", 1, 1, true).unwrap();
    let server = ApiServer::start(StandinOptions::default()).unwrap();
    let hypervisors = oi_api::World::load(&set.manifests, "oi-local-hypervisor-set")
        .unwrap()
        .hypervisors;
    for h in hypervisors.into_values() {
        server.create(&h).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();

    // The world, its admin kubeconfig, and its keys exported, all by `oi`.
    let world = inject_cluster_with(
        &set.manifests,
        "c1",
        &["--namespace", "team-a", "--control-plane-replicas", "1"],
    )
    .unwrap();
    let before = oi(
        &["cluster", "admin-kubeconfig", "--cluster", "team-a/c1"],
        &world,
    )
    .unwrap()
    .ok("oi cluster admin-kubeconfig")
    .unwrap()
    .stdout;
    let exported = oi(&["keys", "export"], &world)
        .unwrap()
        .ok("oi keys export")
        .unwrap()
        .stdout;
    // (The Hypervisors' CRI client keys stay inline: those are not moved yet.)
    assert!(exported.contains("privateKeyRef"), "{exported}");
    // What a `kubectl apply` of it would create here: its Secrets and the Cluster (the manager
    // makes the Components and places them itself).
    let mut ca = String::new();
    for document in serde_yaml_ng::Deserializer::from_str(&exported) {
        let value = serde_json::to_value(
            <serde_yaml_ng::Value as serde::Deserialize>::deserialize(document).unwrap(),
        )
        .unwrap();
        let of = value["metadata"]["annotations"]["oneinfra.ereslibre.es/private-keys-of"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let path = match value["kind"].as_str() {
            // The Cluster's Secrets (the Components' go with the Components the world placed).
            Some("Secret") if of == "Cluster/c1" => "/api/v1/namespaces/team-a/secrets".to_string(),
            Some("Cluster") => {
                assert!(!value.to_string().contains("PRIVATE KEY"), "{value}");
                ca = value["spec"]["apiServer"]["ca"]["certificate"]
                    .as_str()
                    .unwrap()
                    .to_string();
                "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/team-a/clusters"
                    .to_string()
            }
            _ => continue,
        };
        server
            .call(http::Method::POST, &path, Some(&value))
            .unwrap();
    }
    assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");

    let kubeconfig = server.write_kubeconfig(dir.path()).unwrap();
    let manager = Manager::start("replica-a", &kubeconfig, dir.path());
    let key = ObjectKey::new("team-a", "c1");
    let cluster = eventually(Duration::from_secs(240), || ready(&server, &key))
        .unwrap_or_else(|e| failed("c1 ready", &e, &[&manager], &server));
    assert_eq!(
        cluster.spec.api_server.ca.as_ref().unwrap().certificate,
        ca,
        "the API server CA is the world's"
    );

    // The kubeconfig made before, pointed at where the manager placed the cluster's ingress.
    let endpoint = &cluster.status.api_server_endpoint;
    let server_line = before
        .lines()
        .find(|l| l.trim_start().starts_with("server: "))
        .unwrap()
        .to_string();
    let indent = &server_line[..server_line.len() - server_line.trim_start().len()];
    let moved = before.replace(&server_line, &format!("{indent}server: {endpoint}"));
    let path = dir.path().join("before.kubeconfig");
    oi_e2e::write_private(&path, &moved).unwrap();
    let version =
        eventually(Duration::from_secs(30), || kubectl_version(&path)).unwrap_or_else(|e| {
            failed(
                "kubectl with the kubeconfig made before",
                &e,
                &[&manager],
                &server,
            )
        });
    assert!(
        version.pointer("/serverVersion/gitVersion").is_some(),
        "{version}"
    );

    // A CA rotation over the referenced keys, asked as an administrator would: the API server
    // CA becomes a new one, its Secret holds the new pair alone once done, and a kubeconfig
    // made now (the keys read back from the Secrets) reaches the cluster.
    let path_c1 = "/apis/cluster.oneinfra.ereslibre.es/v1alpha1/namespaces/team-a/clusters/c1";
    eventually(Duration::from_secs(30), || {
        let mut stored = server.call(http::Method::GET, path_c1, None)?;
        stored["metadata"]["annotations"]["cluster.oneinfra.ereslibre.es/rotate-ca"] =
            "apiServer".into();
        server
            .call(http::Method::PUT, path_c1, Some(&stored))
            .map(drop)
    })
    .unwrap();
    let rotated = eventually(Duration::from_secs(300), || {
        let c = ready(&server, &key)?;
        anyhow::ensure!(
            c.status.ca_rotation.is_none()
                && !c
                    .metadata
                    .annotations
                    .contains_key("cluster.oneinfra.ereslibre.es/rotate-ca"),
            "rotation under way: {:?}",
            c.status.ca_rotation.as_ref().map(|r| format!("{r:?}"))
        );
        let now = c.spec.api_server.ca.as_ref().unwrap().certificate.clone();
        anyhow::ensure!(now != ca, "the API server CA is still the world's");
        Ok(c)
    })
    .unwrap_or_else(|e| failed("rotation", &e, &[&manager], &server));
    let secret = server
        .key_secrets("team-a")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "c1-ca")
        .unwrap();
    let crt = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        secret["data"]["tls.crt"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(crt).unwrap(),
        rotated.spec.api_server.ca.as_ref().unwrap().certificate
    );
    assert!(secret["data"].get("previous.key").is_none(), "{secret}");
    let after = oi(
        &["cluster", "admin-kubeconfig", "--cluster", "team-a/c1"],
        &World::of_store(&server).unwrap().text,
    )
    .unwrap()
    .ok("oi cluster admin-kubeconfig")
    .unwrap()
    .stdout;
    let path = dir.path().join("after.kubeconfig");
    oi_e2e::write_private(&path, &after).unwrap();
    eventually(Duration::from_secs(30), || kubectl_version(&path))
        .unwrap_or_else(|e| failed("kubectl after the rotation", &e, &[&manager], &server));

    server.delete::<Cluster>(&key).unwrap();
    eventually(Duration::from_secs(120), || {
        anyhow::ensure!(
            server.object::<Cluster>(&key).is_none(),
            "the Cluster is still there"
        );
        Ok(())
    })
    .unwrap_or_else(|e| failed("deletion", &e, &[&manager], &server));
    nothing_left(&server, &set).unwrap();
    assert_eq!(
        server.key_secrets("team-a"),
        Vec::<serde_json::Value>::new()
    );
}
