//! Hypervisor capacity through the CLI: `oi hypervisor inject --capacity-*`, placement that
//! never goes beyond it, and a cluster that does not fit refused with the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use oi_api::ComponentRole;

#[path = "support/oi.rs"]
mod support;
use support::*;

/// `oi cluster inject -f W -o W --name NAME --control-plane-replicas REPLICAS`.
fn inject_cluster(w: &str, name: &str, replicas: &str) -> std::process::Output {
    oi(
        &[
            "cluster",
            "inject",
            "-f",
            w,
            "-o",
            w,
            "--name",
            name,
            "--control-plane-replicas",
            replicas,
        ],
        b"",
    )
}

fn inject_hypervisors(dir: &std::path::Path) -> String {
    let world = dir.join("world.yaml");
    let w = world.to_str().unwrap();
    ok(
        &[
            "hypervisor",
            "inject",
            "-f",
            "/dev/null",
            "-o",
            w,
            "--name",
            "pub1",
            "--ip-address",
            "10.0.0.9",
            "--public",
            "--local-cri-endpoint",
            "/run/pub1.sock",
        ],
        b"",
    );
    for (i, name) in ["priv1", "priv2"].iter().enumerate() {
        let ip = format!("10.0.0.{}", i + 1);
        let sock = format!("/run/{name}.sock");
        ok(
            &[
                "hypervisor",
                "inject",
                "-f",
                w,
                "-o",
                w,
                "--name",
                name,
                "--ip-address",
                &ip,
                "--local-cri-endpoint",
                &sock,
                "--capacity-cpu",
                "1500m",
                "--capacity-memory",
                "4Gi",
                "--capacity-components",
                "5",
            ],
            b"",
        );
    }
    w.to_string()
}

#[test]
fn placement_stays_within_capacity_and_refuses_with_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let w = inject_hypervisors(dir.path());
    let world = load(&std::fs::read_to_string(&w).unwrap());
    let cap = world
        .hypervisors
        .values()
        .find(|h| h.metadata.name == "priv1")
        .unwrap();
    assert_eq!(
        cap.spec.capacity.as_ref().unwrap().cpu.as_deref(),
        Some("1500m")
    );

    // 1500m holds two replicas of 650m: three replicas go 2 + 1 (with a warning).
    let out = inject_cluster(&w, "c1", "3");
    assert!(out.status.success(), "{}", stderr(&out));
    // One more replica fits (priv2), a second does not: the cluster is refused whole.
    let out = inject_cluster(&w, "c2", "2");
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out).lines().last().unwrap(),
        "error: cluster default/c2 cannot be scheduled: 1 more control-plane component(s) fit on no private hypervisor (priv1: 200m CPU left, 650m needed; priv2: 200m CPU left, 650m needed)"
    );
    let world = load(&std::fs::read_to_string(&w).unwrap());
    assert!(
        world.clusters.keys().all(|k| k.name != "c2"),
        "the file was not changed"
    );
    for h in ["priv1", "priv2"] {
        let n = world
            .components
            .values()
            .filter(|c| {
                c.spec.role == ComponentRole::ControlPlane
                    && c.spec.hypervisor.as_deref() == Some(h)
            })
            .count();
        assert!(n <= 2, "{h} holds {n} replicas");
    }
    // A single replica still fits.
    let out = inject_cluster(&w, "c3", "1");
    assert!(out.status.success(), "{}", stderr(&out));

    // A capacity that is not a quantity is refused by the flag, and in a manifest.
    let out = oi(
        &[
            "hypervisor",
            "inject",
            "-f",
            &w,
            "--name",
            "x",
            "--ip-address",
            "10.0.0.7",
            "--local-cri-endpoint",
            "/run/x.sock",
            "--capacity-cpu",
            "2cores",
        ],
        b"",
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("\"2cores\" is not a CPU quantity"),
        "{}",
        stderr(&out)
    );
    let text = std::fs::read_to_string(&w)
        .unwrap()
        .replacen("memory: 4Gi", "memory: 4 GiB", 1);
    let out = oi(
        &["reconcile", "--image-repository", "localhost/oneinfra"],
        text.as_bytes(),
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "Hypervisor priv1: field `spec.capacity.memory`: \"4 GiB\" is not a memory quantity"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_cordoned_hypervisor_gets_nothing_new_and_keeps_what_runs() {
    let dir = tempfile::tempdir().unwrap();
    let w = inject_hypervisors(dir.path());
    let out = inject_cluster(&w, "c1", "2");
    assert!(out.status.success(), "{}", stderr(&out));
    ok(
        &[
            "hypervisor",
            "cordon",
            "--name",
            "priv1",
            "-f",
            &w,
            "-o",
            &w,
        ],
        b"",
    );
    let world = load(&std::fs::read_to_string(&w).unwrap());
    assert!(
        world
            .hypervisors
            .values()
            .find(|h| h.metadata.name == "priv1")
            .unwrap()
            .spec
            .unschedulable
    );
    let on = |world: &oi_api::World, h: &str| {
        world
            .components
            .values()
            .filter(|c| {
                c.spec.role == ComponentRole::ControlPlane
                    && c.spec.hypervisor.as_deref() == Some(h)
            })
            .count()
    };
    assert_eq!((on(&world, "priv1"), on(&world, "priv2")), (1, 1));
    // c2 fits only on priv2 (its CPU holds one more replica); c3 then fits nowhere, and the
    // message says priv1 is cordoned.
    ok(
        &["cluster", "inject", "-f", &w, "-o", &w, "--name", "c2"],
        b"",
    );
    let world = load(&std::fs::read_to_string(&w).unwrap());
    assert_eq!(
        (on(&world, "priv1"), on(&world, "priv2")),
        (1, 2),
        "c1's replica stays on priv1"
    );
    let out = oi(&["cluster", "inject", "-f", &w, "--name", "c3"], b"");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("(priv1: cordoned; priv2: 200m CPU left, 650m needed)"),
        "{}",
        stderr(&out)
    );
    // Uncordoned, it takes c3.
    ok(
        &[
            "hypervisor",
            "uncordon",
            "--name",
            "priv1",
            "-f",
            &w,
            "-o",
            &w,
        ],
        b"",
    );
    ok(
        &["cluster", "inject", "-f", &w, "-o", &w, "--name", "c3"],
        b"",
    );
    let world = load(&std::fs::read_to_string(&w).unwrap());
    assert_eq!(on(&world, "priv1"), 2);
    assert!(!world.hypervisors.values().any(|h| h.spec.unschedulable));
    // An unknown name is an error.
    let out = oi(&["hypervisor", "cordon", "--name", "nope", "-f", &w], b"");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("hypervisor nope not found"));
}

#[test]
fn a_drain_that_cannot_run_stops_with_the_world_written_and_uncordon_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let w = inject_hypervisors(dir.path());
    let out = inject_cluster(&w, "c1", "2");
    assert!(out.status.success(), "{}", stderr(&out));
    let before = std::fs::read_to_string(&w).unwrap();
    let after = dir.path().join("after.yaml");
    let after = after.to_str().unwrap();
    // The hypervisors' runtimes do not answer here: the first run is not ready, and the drain
    // stops there, saying so, the world written with the hypervisor marked.
    let out = oi(
        &[
            "hypervisor",
            "drain",
            "--name",
            "priv1",
            "--max-wait",
            "1s",
            "--image-repository",
            "localhost/oneinfra",
            "-f",
            &w,
            "-o",
            after,
        ],
        b"",
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "the drain of hypervisor priv1 stopped; what did not move runs where it was (run it \
             again to go on)"
        ),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("HypervisorUnreachable"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&w).unwrap(),
        before,
        "input untouched"
    );
    let world = load(&std::fs::read_to_string(after).unwrap());
    let priv1 = |world: &oi_api::World| {
        world
            .hypervisors
            .values()
            .find(|h| h.metadata.name == "priv1")
            .unwrap()
            .spec
            .clone()
    };
    assert!(priv1(&world).drain && priv1(&world).unschedulable);
    // Uncordoned: neither drained nor cordoned any more.
    ok(
        &[
            "hypervisor",
            "uncordon",
            "--name",
            "priv1",
            "-f",
            after,
            "-o",
            after,
        ],
        b"",
    );
    let world = load(&std::fs::read_to_string(after).unwrap());
    assert!(!priv1(&world).drain && !priv1(&world).unschedulable);
    // An unknown name is an error, before anything runs.
    let out = oi(&["hypervisor", "drain", "--name", "nope", "-f", &w], b"");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("hypervisor nope not found"),
        "{}",
        stderr(&out)
    );
}
