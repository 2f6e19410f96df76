//! Placement of a cluster's components on hypervisors.
//!
//! The rules, in order of precedence, for each control plane replica still to be placed:
//!
//! 1. only hypervisors of the right kind (private for control planes, public for ingresses)
//!    with enough free ports in their range for the component, and room in their declared
//!    capacity (components, CPU and memory against the component's requests) are
//!    candidates: a hypervisor is never overcommitted;
//! 2. a hypervisor already holding fewer replicas of the same cluster wins, so replicas use
//!    distinct hypervisors before any is reused;
//! 3. then a failure domain already holding fewer replicas of the cluster wins; the domain is
//!    the hypervisor label [`ZONE_LABEL`], a hypervisor without it is a domain of its own;
//! 4. then the least loaded hypervisor (fewest components of any cluster);
//! 5. then name order.
//!
//! A cordoned hypervisor (`spec.unschedulable`), a drained one and a lost one ([`Closed`])
//! are no candidates. The choice is a pure function of its inputs. Components already placed
//! never move.
//!
//! SIPClusters' support services ([`crate::sip::services`]) are placed by the same rules,
//! replicas of one service kind of one SIPCluster standing for a cluster's replicas, and they
//! count in a hypervisor's load and capacity like components ([`held`]).

use std::collections::BTreeMap;

use oi_api::versions::Requests;
use oi_api::{Component, Hypervisor, World};

/// Hypervisor label naming its failure domain (the Kubernetes well-known zone label).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A failure domain: a zone shared by the hypervisors labelled with it, or one unlabelled
/// hypervisor alone. Two variants so that a zone named like a hypervisor stays distinct.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Domain<'a> {
    Zone(&'a str),
    Hypervisor(&'a str),
}

impl<'a> Domain<'a> {
    /// The domain of a hypervisor named `name` with the zone label value `zone`, if any.
    pub fn of(name: &'a str, zone: Option<&'a str>) -> Self {
        match zone {
            Some(z) if !z.is_empty() => Domain::Zone(z),
            _ => Domain::Hypervisor(name),
        }
    }
}

/// Why nothing new may be placed on a hypervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Lost for good (removed, or unreachable longer than the grace period): what runs there
    /// is replaced elsewhere.
    Lost,
    /// Drained (`spec.drain`): what runs there moves elsewhere.
    Drained,
    /// Cordoned (`spec.unschedulable`): what runs there stays.
    Cordoned,
}

impl Closed {
    /// Whether hypervisor `h`, `lost` or not ([`Hypervisor::lost`]), takes nothing new.
    pub fn of(h: &Hypervisor, lost: bool) -> Option<Closed> {
        if lost {
            Some(Closed::Lost)
        } else if h.spec.drain {
            Some(Closed::Drained)
        } else if h.spec.unschedulable {
            Some(Closed::Cordoned)
        } else {
            None
        }
    }

    /// What runs there moves elsewhere: all but a cordon.
    pub fn moves(self) -> bool {
        self != Closed::Cordoned
    }

    /// In a word.
    pub fn describe(self) -> &'static str {
        match self {
            Closed::Lost => "lost",
            Closed::Drained => "drained",
            Closed::Cordoned => "cordoned",
        }
    }
}

/// What a hypervisor holds: its load (components of any cluster and services of any
/// SIPCluster) and what they ask together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    pub load: usize,
    pub used: Requests,
}

impl Held {
    /// One more thing asking `need`.
    pub fn add(&mut self, need: Requests) {
        self.load += 1;
        self.used = self.used + need;
    }
}

/// What each hypervisor of `world` holds, by name: every placed component, and every
/// SIPCluster service holding ports there.
pub fn held(world: &World) -> BTreeMap<String, Held> {
    let mut out: BTreeMap<String, Held> = BTreeMap::new();
    for c in world.components.values() {
        if let Some(h) = c.spec.hypervisor.as_deref() {
            out.entry(h.to_string())
                .or_default()
                .add(component_requests(world, c));
        }
    }
    for h in world.hypervisors.values() {
        let held = out.entry(h.metadata.name.clone()).or_default();
        for need in crate::sip::services::held_on(h) {
            held.add(need);
        }
    }
    out
}

/// What a placed component asks of its hypervisor.
pub fn component_requests(world: &World, component: &Component) -> Requests {
    // A cluster not in the world (the manager plans one at a time): count its VPN endpoint
    // too, so that what is unknown never overcommits.
    let vpn = world
        .cluster_of(component)
        .is_none_or(|c| c.spec.vpn.enabled);
    oi_api::versions::requests(component.spec.role, vpn)
}

/// What the scheduler needs to know about one hypervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub domain: Domain<'a>,
    /// Components of any cluster placed on it.
    pub load: usize,
    /// Ports of its range not allocated yet.
    pub free_ports: usize,
    /// What its declared capacity has left (unlimited where it declares nothing).
    pub room: Room,
    /// Cordoned (`spec.unschedulable`): nothing new goes there.
    pub cordoned: bool,
}

/// What a hypervisor's capacity has left: `None` where it declares no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Room {
    pub components: Option<u64>,
    pub cpu_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
}

impl Room {
    /// Room of a hypervisor declaring `capacity` (parsed; validation refuses what does not
    /// parse) and already holding `components` components asking `used` together. Negative
    /// room (a capacity lowered below what runs) is no room.
    pub fn of(
        capacity: Option<&oi_api::HypervisorCapacity>,
        components: usize,
        used: Requests,
    ) -> Room {
        let Some(c) = capacity else {
            return Room::default();
        };
        Room {
            components: c
                .components
                .map(|n| u64::from(n).saturating_sub(components as u64)),
            cpu_millis: c
                .cpu
                .as_deref()
                .and_then(|q| oi_api::quantity::parse_cpu_millis(q).ok())
                .map(|n| n.saturating_sub(used.cpu_millis)),
            memory_bytes: c
                .memory
                .as_deref()
                .and_then(|q| oi_api::quantity::parse_memory_bytes(q).ok())
                .map(|n| n.saturating_sub(used.memory_bytes)),
        }
    }

    /// Whether one more component asking `need` fits.
    pub fn fits(&self, need: Requests) -> bool {
        self.components.is_none_or(|n| n >= 1)
            && self.cpu_millis.is_none_or(|n| n >= need.cpu_millis)
            && self.memory_bytes.is_none_or(|n| n >= need.memory_bytes)
    }

    fn take(&mut self, need: Requests) {
        if let Some(n) = &mut self.components {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = &mut self.cpu_millis {
            *n = n.saturating_sub(need.cpu_millis);
        }
        if let Some(n) = &mut self.memory_bytes {
            *n = n.saturating_sub(need.memory_bytes);
        }
    }

    /// Why one more component asking `need` does not fit, in words; `None` when it fits.
    pub fn shortage(&self, need: Requests) -> Option<String> {
        use oi_api::quantity::{format_cpu, format_memory};
        let mut why = Vec::new();
        if self.components == Some(0) {
            why.push("no room for another component".to_string());
        }
        if let Some(n) = self.cpu_millis
            && n < need.cpu_millis
        {
            why.push(format!(
                "{} CPU left, {} needed",
                format_cpu(n),
                format_cpu(need.cpu_millis)
            ));
        }
        if let Some(n) = self.memory_bytes
            && n < need.memory_bytes
        {
            why.push(format!(
                "{} memory left, {} needed",
                format_memory(n),
                format_memory(need.memory_bytes)
            ));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }
}

/// Replicas of one cluster per hypervisor and per failure domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spread<'a> {
    hypervisors: BTreeMap<&'a str, usize>,
    domains: BTreeMap<Domain<'a>, usize>,
}

impl<'a> Spread<'a> {
    /// Records one more replica on `hypervisor`, in `domain`.
    pub fn add(&mut self, hypervisor: &'a str, domain: Domain<'a>) {
        *self.hypervisors.entry(hypervisor).or_default() += 1;
        *self.domains.entry(domain).or_default() += 1;
    }

    /// Replicas on `hypervisor`.
    pub fn on_hypervisor(&self, hypervisor: &str) -> usize {
        self.hypervisors.get(hypervisor).copied().unwrap_or(0)
    }

    /// Replicas in `domain`.
    pub fn in_domain(&self, domain: &Domain<'_>) -> usize {
        self.domains.get(domain).copied().unwrap_or(0)
    }
}

/// The best candidate for one more replica given the cluster's current `spread`, the ports
/// the component needs and what it asks, or `None` when no candidate has room.
pub fn pick<'c, 'a>(
    candidates: &'c [Candidate<'a>],
    spread: &Spread<'_>,
    ports_needed: usize,
    need: Requests,
) -> Option<&'c Candidate<'a>> {
    best(candidates, spread, ports_needed, need).map(|i| &candidates[i])
}

fn best(
    candidates: &[Candidate<'_>],
    spread: &Spread<'_>,
    ports_needed: usize,
    need: Requests,
) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.cordoned && c.free_ports >= ports_needed && c.room.fits(need))
        .min_by_key(|(_, c)| {
            (
                spread.on_hypervisor(c.name),
                spread.in_domain(&c.domain),
                c.load,
                c.name,
            )
        })
        .map(|(i, _)| i)
}

/// Places `count` replicas one after the other, each by [`pick`], starting from `spread`
/// (the cluster's replicas already placed). Returns the chosen hypervisor names in order;
/// stops early, with fewer names, when no candidate has room. Loads and free ports of the
/// candidates are updated as replicas are placed.
pub fn place<'a>(
    candidates: &mut [Candidate<'a>],
    spread: &mut Spread<'a>,
    count: usize,
    ports_needed: usize,
    need: Requests,
) -> Vec<&'a str> {
    let mut chosen = Vec::with_capacity(count);
    for _ in 0..count {
        let Some(index) = best(candidates, spread, ports_needed, need) else {
            break;
        };
        let c = &mut candidates[index];
        c.load += 1;
        c.free_ports -= ports_needed;
        c.room.take(need);
        spread.add(c.name, c.domain);
        chosen.push(c.name);
    }
    chosen
}

/// A cluster whose control plane does not survive the loss of one hypervisor because its
/// replicas share one: more of them run on `busiest` than etcd's quorum can lose. (An even
/// number of replicas on distinct hypervisors is the user's choice, not reported.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotHighlyAvailable {
    pub cluster: oi_api::ObjectKey,
    /// Live control plane replicas placed.
    pub replicas: usize,
    /// The hypervisor holding the most of them (the first by name among equals).
    pub busiest: String,
    /// How many it holds.
    pub on_busiest: usize,
}

/// The live clusters of `world` whose placed replicas share a hypervisor so that losing it
/// loses etcd's quorum.
pub fn not_highly_available(world: &oi_api::World) -> Vec<NotHighlyAvailable> {
    let mut per_cluster: BTreeMap<oi_api::ObjectKey, BTreeMap<&str, usize>> = BTreeMap::new();
    for c in world.components.values() {
        if c.spec.role != oi_api::ComponentRole::ControlPlane || c.metadata.is_being_deleted() {
            continue;
        }
        if let Some(h) = c.spec.hypervisor.as_deref() {
            *per_cluster
                .entry(c.cluster_key())
                .or_default()
                .entry(h)
                .or_default() += 1;
        }
    }
    per_cluster
        .into_iter()
        .filter(|(key, _)| {
            world
                .clusters
                .get(key)
                .is_some_and(|c| !c.is_being_deleted())
        })
        .filter_map(|(cluster, counts)| {
            let replicas: usize = counts.values().sum();
            let (busiest, on_busiest) =
                counts.iter().fold(
                    ("", 0),
                    |best, (h, n)| if *n > best.1 { (*h, *n) } else { best },
                );
            // etcd keeps a quorum of `replicas / 2 + 1`: it can lose `(replicas - 1) / 2`.
            (on_busiest >= 2 && on_busiest > (replicas - 1) / 2).then(|| NotHighlyAvailable {
                cluster,
                replicas,
                busiest: busiest.to_string(),
                on_busiest,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NEED: Requests = oi_api::versions::CONTROL_PLANE_REQUESTS;

    fn cand<'a>(name: &'a str, zone: Option<&'a str>, load: usize) -> Candidate<'a> {
        Candidate {
            name,
            domain: Domain::of(name, zone),
            load,
            free_ports: 100,
            room: Room::default(),
            cordoned: false,
        }
    }

    #[test]
    fn distinct_hypervisors_before_reuse() {
        let mut cs = vec![cand("a", None, 0), cand("b", None, 5), cand("c", None, 9)];
        let mut spread = Spread::default();
        let placed = place(&mut cs, &mut spread, 4, 3, NEED);
        // Loads matter only among hypervisors holding equally many replicas of the cluster.
        assert_eq!(placed, vec!["a", "b", "c", "a"]);
    }

    #[test]
    fn zones_before_reuse_of_a_zone() {
        let mut cs = vec![
            cand("a1", Some("z1"), 0),
            cand("a2", Some("z1"), 0),
            cand("a3", Some("z1"), 0),
            cand("b1", Some("z2"), 3),
            cand("c1", None, 7),
        ];
        let mut spread = Spread::default();
        let placed = place(&mut cs, &mut spread, 5, 3, NEED);
        assert_eq!(placed, vec!["a1", "b1", "c1", "a2", "a3"]);
    }

    #[test]
    fn unlabelled_hypervisor_is_its_own_domain_even_if_named_like_a_zone() {
        // `z1` the hypervisor is not in zone `z1`.
        let mut cs = vec![cand("h", Some("z1"), 0), cand("z1", None, 1)];
        let mut spread = Spread::default();
        assert_eq!(place(&mut cs, &mut spread, 2, 1, NEED), vec!["h", "z1"]);
    }

    #[test]
    fn least_loaded_then_name() {
        let cs = vec![cand("b", None, 1), cand("c", None, 1), cand("a", None, 2)];
        assert_eq!(
            pick(&cs, &Spread::default(), 1, NEED).map(|c| c.name),
            Some("b")
        );
    }

    #[test]
    fn existing_spread_is_respected() {
        let cs = vec![cand("a", None, 0), cand("b", None, 10)];
        let mut spread = Spread::default();
        spread.add("a", Domain::of("a", None));
        assert_eq!(pick(&cs, &spread, 1, NEED).map(|c| c.name), Some("b"));
    }

    #[test]
    fn candidates_without_room_are_skipped() {
        let mut cs = vec![cand("a", None, 0), cand("b", None, 0)];
        cs[0].free_ports = 2;
        cs[1].free_ports = 3;
        let mut spread = Spread::default();
        assert_eq!(place(&mut cs, &mut spread, 2, 3, NEED), vec!["b"]);
        assert_eq!(cs[1].free_ports, 0);
        assert_eq!(cs[1].load, 1);
        assert_eq!(
            pick(&cs, &Spread::default(), 1, NEED).map(|c| c.name),
            Some("a")
        );
    }

    #[test]
    fn cordoned_hypervisors_get_nothing_new() {
        let mut cs = vec![cand("a", None, 0), cand("b", None, 5)];
        cs[0].cordoned = true;
        let mut spread = Spread::default();
        assert_eq!(place(&mut cs, &mut spread, 2, 1, NEED), vec!["b", "b"]);
        cs[1].cordoned = true;
        assert_eq!(pick(&cs, &Spread::default(), 1, NEED), None);
    }

    #[test]
    fn no_candidates() {
        assert_eq!(pick(&[], &Spread::default(), 1, NEED), None);
    }

    fn capacity(
        components: Option<u32>,
        cpu: Option<&str>,
        memory: Option<&str>,
    ) -> oi_api::HypervisorCapacity {
        oi_api::HypervisorCapacity {
            components,
            cpu: cpu.map(str::to_string),
            memory: memory.map(str::to_string),
        }
    }

    #[test]
    fn declared_capacity_is_never_exceeded_and_says_what_is_short() {
        // a: 2 components at most; b: CPU for 1 more replica (1.5 CPUs, 0.65 used); c: memory
        // for 2 (2Gi, 960Mi each).
        let mut cs = vec![cand("a", None, 0), cand("b", None, 1), cand("c", None, 0)];
        cs[0].room = Room::of(Some(&capacity(Some(2), None, None)), 0, Requests::default());
        cs[1].room = Room::of(Some(&capacity(None, Some("1.5"), None)), 1, NEED);
        cs[2].room = Room::of(
            Some(&capacity(None, None, Some("2Gi"))),
            0,
            Requests::default(),
        );
        let mut spread = Spread::default();
        let placed = place(&mut cs, &mut spread, 10, 1, NEED);
        assert_eq!(placed, vec!["a", "c", "b", "a", "c"]);
        assert_eq!(
            cs[0].room.shortage(NEED).as_deref(),
            Some("no room for another component")
        );
        assert_eq!(
            cs[1].room.shortage(NEED).as_deref(),
            Some("200m CPU left, 650m needed")
        );
        assert_eq!(
            cs[2].room.shortage(NEED).as_deref(),
            Some("128Mi memory left, 960Mi needed")
        );
        // Without a capacity, nothing but ports limits.
        assert_eq!(Room::of(None, 99, NEED).shortage(NEED), None);
        // A capacity lowered below what runs is no room, not an underflow.
        let over = Room::of(
            Some(&capacity(Some(1), Some("500m"), Some("1Gi"))),
            3,
            NEED + NEED,
        );
        assert_eq!(
            over.shortage(NEED).as_deref(),
            Some(
                "no room for another component, 0 CPU left, 650m needed, 0 memory left, 960Mi needed"
            )
        );
    }

    /// A generated hypervisor: load, components, CPU (millicores) and memory (bytes)
    /// capacities, free ports.
    type Generated = (usize, Option<u32>, Option<u64>, Option<u64>, usize);

    fn candidates() -> impl Strategy<Value = Vec<Generated>> {
        proptest::collection::vec(
            (
                0usize..6,
                proptest::option::of(0u32..5),
                proptest::option::of(0u64..4000),
                proptest::option::of(0u64..(4u64 << 30)),
                0usize..12,
            ),
            0..7,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Placement never overcommits a hypervisor (components, CPU, memory, ports), is
        /// deterministic, and places on the least loaded among the hypervisors the cluster
        /// uses least.
        #[test]
        fn placement_never_overcommits_spreads_and_is_deterministic(
            hvs in candidates(),
            count in 0usize..12,
            ports in 1usize..4,
        ) {
            let names: Vec<String> = (0..hvs.len()).map(|i| format!("h{i}")).collect();
            let build = || -> Vec<Candidate<'_>> {
                hvs.iter().zip(&names).map(|((load, comps, cpu, mem, free_ports), name)| {
                    let cap = oi_api::HypervisorCapacity {
                        components: *comps,
                        cpu: cpu.map(|m| format!("{m}m")),
                        memory: mem.map(|b| b.to_string()),
                    };
                    Candidate {
                        name,
                        domain: Domain::of(name, None),
                        load: *load,
                        free_ports: *free_ports,
                        room: Room::of(Some(&cap), 0, Requests::default()),
                        cordoned: false,
                    }
                }).collect()
            };
            let mut cs = build();
            let mut spread = Spread::default();
            let placed = place(&mut cs, &mut spread, count, ports, NEED);
            // Deterministic.
            let mut again = build();
            prop_assert_eq!(&placed, &place(&mut again, &mut Spread::default(), count, ports, NEED));
            // Never overcommitted.
            for ((_, comps, cpu, mem, free_ports), name) in hvs.iter().zip(&names) {
                let n = placed.iter().filter(|p| **p == name.as_str()).count() as u64;
                prop_assert!(comps.is_none_or(|c| n <= u64::from(c)), "{name}: {n} components");
                prop_assert!(cpu.is_none_or(|c| n * NEED.cpu_millis <= c), "{name}: cpu");
                prop_assert!(mem.is_none_or(|m| n * NEED.memory_bytes <= m), "{name}: memory");
                prop_assert!(n as usize * ports <= *free_ports, "{name}: ports");
            }
            // Fewer placed than asked only when nothing fits any more.
            if placed.len() < count {
                prop_assert!(cs.iter().all(|c| c.cordoned || c.free_ports < ports || !c.room.fits(NEED)));
            }
            // Spread: a hypervisor got a second replica only when every other one that still
            // fits had at least one when it was chosen (checked at the end: none that fits
            // holds fewer than the busiest minus one).
            let per: Vec<usize> = names.iter().map(|n| placed.iter().filter(|p| **p == n.as_str()).count()).collect();
            let busiest = per.iter().copied().max().unwrap_or(0);
            for (i, c) in cs.iter().enumerate() {
                if c.free_ports >= ports && c.room.fits(NEED) {
                    prop_assert!(per[i] + 1 >= busiest, "{} holds {} while another holds {}", c.name, per[i], busiest);
                }
            }
        }
    }
}
