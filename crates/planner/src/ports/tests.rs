#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;

use oi_api::{HypervisorSpec, LocalCriEndpoint, ObjectMeta, PortRange};
use proptest::prelude::*;

fn hypervisor(low: u32, high: u32) -> Hypervisor {
    Hypervisor::new(
        ObjectMeta::named("h1"),
        HypervisorSpec {
            local_cri_endpoint: Some(LocalCriEndpoint {
                cri_endpoint_path: "/run/containerd/containerd.sock".into(),
            }),
            remote_cri_endpoint: None,
            public: false,
            ip_address: "10.0.0.1".into(),
            port_range: PortRange { low, high },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

fn owner(component: &str, port: &str) -> PortOwner {
    PortOwner::new("default", "c1", component, port)
}

fn alloc(cluster_namespace: &str, component: &str, port: u16) -> HypervisorPortAllocation {
    HypervisorPortAllocation {
        cluster_namespace: cluster_namespace.into(),
        cluster: "c1".into(),
        component: component.into(),
        port,
    }
}

#[test]
fn owner_follows_oneinfra_naming() {
    assert_eq!(
        owner("c1-control-plane-0", names::ETCD_PEER).component,
        "c1-control-plane-0-etcd-peer"
    );
}

#[test]
fn lowest_first_and_idempotent_per_owner() {
    let mut p = PortAllocator::from_hypervisor(&hypervisor(30000, 30010));
    assert_eq!(p.allocate(&owner("a", "x")), Ok(30000));
    assert_eq!(p.allocate(&owner("a", "y")), Ok(30001));
    assert_eq!(p.allocate(&owner("a", "x")), Ok(30000));
    assert_eq!(p.free_ports(), 9);
}

#[test]
fn freed_ports_are_reused_first_lowest_first() {
    let mut p = PortAllocator::from_hypervisor(&hypervisor(30000, 30010));
    for name in ["a", "b", "c", "d"] {
        p.allocate(&owner(name, "x")).unwrap();
    }
    assert_eq!(p.release(&owner("c", "x")), Some(30002));
    assert_eq!(p.release(&owner("b", "x")), Some(30001));
    assert_eq!(p.release(&owner("b", "x")), None);
    assert_eq!(p.allocate(&owner("e", "x")), Ok(30001));
    assert_eq!(p.allocate(&owner("f", "x")), Ok(30002));
    assert_eq!(p.allocate(&owner("g", "x")), Ok(30004));
    let mut status = HypervisorStatus::default();
    p.write_status(&mut status);
    assert_eq!(
        status
            .allocated_ports
            .iter()
            .map(|a| (a.component.as_str(), a.port))
            .collect::<Vec<_>>(),
        vec![
            ("a-x", 30000),
            ("e-x", 30001),
            ("f-x", 30002),
            ("d-x", 30003),
            ("g-x", 30004)
        ]
    );
    assert!(status.freed_ports.is_empty());
}

#[test]
fn exhausted_range_names_hypervisor_and_range() {
    let mut p = PortAllocator::from_hypervisor(&hypervisor(30000, 30001));
    p.allocate(&owner("a", "x")).unwrap();
    p.allocate(&owner("a", "y")).unwrap();
    assert_eq!(
        p.allocate(&owner("a", "z")),
        Err(Error::PortRangeExhausted {
            hypervisor: "h1".into(),
            low: 30000,
            high: 30001
        })
    );
    // Releasing makes room again.
    p.release(&owner("a", "x"));
    assert_eq!(p.allocate(&owner("a", "z")), Ok(30000));
}

#[test]
fn invalid_range_is_an_error() {
    let mut p = PortAllocator::from_hypervisor(&hypervisor(0, 0));
    assert_eq!(p.free_ports(), 0);
    assert_eq!(
        p.allocate(&owner("a", "x")),
        Err(Error::InvalidPortRange {
            hypervisor: "h1".into(),
            low: 0,
            high: 0
        })
    );
}

#[test]
fn inconsistent_status_is_repaired() {
    let mut h = hypervisor(30000, 30005);
    h.status.allocated_ports = vec![
        alloc("default", "a-x", 30001),
        // Same port again: the first holder keeps it.
        alloc("default", "b-x", 30001),
        // Same owner again (empty namespace is `default`): its first port stays.
        alloc("", "a-x", 30002),
        // Outside the range (the range shrank): still held.
        alloc("default", "c-x", 40000),
    ];
    h.status.freed_ports = vec![30001, 30004, 30004, 50000];
    let p = PortAllocator::from_hypervisor(&h);
    assert_eq!(p.port_of(&owner("a", "x")), Some(30001));
    assert_eq!(p.port_of(&owner("b", "x")), None);
    assert_eq!(p.port_of(&owner("c", "x")), Some(40000));
    let mut status = HypervisorStatus::default();
    p.write_status(&mut status);
    assert_eq!(status.freed_ports, vec![30002, 30004]);
    assert_eq!(status.allocated_ports.len(), 2);
    assert_eq!(p.free_ports(), 5);
}

#[test]
fn claim_takes_only_free_ports() {
    let mut p = PortAllocator::from_hypervisor(&hypervisor(30000, 30005));
    p.allocate(&owner("a", "x")).unwrap();
    assert!(!p.claim(&owner("b", "x"), 30000));
    assert!(!p.claim(&owner("b", "x"), 29999));
    assert!(p.claim(&owner("b", "x"), 30003));
    assert!(p.claim(&owner("b", "x"), 30003));
    assert!(!p.claim(&owner("b", "x"), 30004));
    // The lowest never handed out port is still 30001.
    assert_eq!(p.allocate(&owner("c", "x")), Ok(30001));
}

#[test]
fn rollback_restores_everything() {
    let mut h = hypervisor(30000, 30005);
    h.status.allocated_ports = vec![alloc("default", "a-x", 30000)];
    h.status.freed_ports = vec![30002];
    let mut p = PortAllocator::from_hypervisor(&h);
    let mut before = HypervisorStatus::default();
    p.write_status(&mut before);
    p.allocate(&owner("b", "x")).unwrap();
    p.allocate(&owner("c", "x")).unwrap();
    p.release(&owner("a", "x"));
    p.claim(&owner("d", "x"), 30005);
    assert!(p.is_dirty());
    p.rollback();
    let mut after = HypervisorStatus::default();
    p.write_status(&mut after);
    assert_eq!(before, after);
    assert_eq!(p.free_ports(), 5);
    // And allocation continues as if nothing happened.
    assert_eq!(p.allocate(&owner("b", "x")), Ok(30002));
    assert_eq!(p.allocate(&owner("c", "x")), Ok(30001));
}

#[test]
fn release_cluster_frees_only_that_cluster() {
    let mut p = PortAllocator::from_hypervisor(&hypervisor(30000, 30010));
    p.allocate(&PortOwner::new("ns", "c1", "c1-ingress", "apiserver"))
        .unwrap();
    p.allocate(&PortOwner::new("ns", "c10", "c10-ingress", "apiserver"))
        .unwrap();
    p.allocate(&PortOwner::new("ns", "c1", "c1-ingress", "wireguard"))
        .unwrap();
    p.allocate(&PortOwner::new("other", "c1", "c1-ingress", "apiserver"))
        .unwrap();
    assert_eq!(p.release_cluster("ns", "c1"), vec![30000, 30002]);
    assert_eq!(p.cluster_owners("ns", "c10").len(), 1);
    assert_eq!(p.cluster_owners("other", "c1").len(), 1);
    assert_eq!(p.free_ports(), 9);
}

#[derive(Debug, Clone)]
enum Op {
    Allocate(u8),
    Release(u8),
    Claim(u8, u16),
    Rollback,
    Commit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(|o| Op::Allocate(o % 24)),
        2 => any::<u8>().prop_map(|o| Op::Release(o % 24)),
        1 => (any::<u8>(), 29995u16..30025).prop_map(|(o, p)| Op::Claim(o % 24, p)),
        1 => Just(Op::Rollback),
        1 => Just(Op::Commit),
    ]
}

proptest! {
    #[test]
    fn never_twice_always_in_range(
        low in 30000u32..30010,
        len in 1u32..20,
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let high = low + len - 1;
        let mut p = PortAllocator::from_hypervisor(&hypervisor(low, high));
        for op in ops {
            match op {
                Op::Allocate(o) => match p.allocate(&owner(&o.to_string(), "x")) {
                    Ok(port) => prop_assert!((low..=high).contains(&u32::from(port))),
                    Err(e) => {
                        prop_assert_eq!(p.free_ports(), 0);
                        prop_assert_eq!(e, Error::PortRangeExhausted { hypervisor: "h1".into(), low, high });
                    }
                },
                Op::Release(o) => { p.release(&owner(&o.to_string(), "x")); }
                Op::Claim(o, port) => { p.claim(&owner(&o.to_string(), "x"), port); }
                Op::Rollback => p.rollback(),
                Op::Commit => p.commit(),
            }
            let mut status = HypervisorStatus::default();
            p.write_status(&mut status);
            let held: Vec<u16> = status.allocated_ports.iter().map(|a| a.port).collect();
            let unique: BTreeSet<u16> = held.iter().copied().collect();
            prop_assert_eq!(unique.len(), held.len(), "a port is held twice");
            let owners: BTreeSet<&str> = status.allocated_ports.iter().map(|a| a.component.as_str()).collect();
            prop_assert_eq!(owners.len(), held.len(), "an owner holds two ports");
            for port in held.iter().chain(&status.freed_ports) {
                prop_assert!((low..=high).contains(&u32::from(*port)));
            }
            prop_assert!(status.freed_ports.iter().all(|f| !unique.contains(f)), "a freed port is held");
            prop_assert_eq!(p.free_ports(), (len as usize) - held.len());
            // Reloading from the written status gives the same state.
            let mut h = hypervisor(low, high);
            h.status = status.clone();
            let mut again = HypervisorStatus::default();
            PortAllocator::from_hypervisor(&h).write_status(&mut again);
            prop_assert_eq!(again, status);
        }
    }
}
