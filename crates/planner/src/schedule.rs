//! Placement of a cluster's components on hypervisors.
//!
//! The rules, in order of precedence, for each control plane replica still to be placed:
//!
//! 1. only hypervisors of the right kind (private for control planes, public for ingresses)
//!    with enough free ports in their range for the component are candidates;
//! 2. a hypervisor already holding fewer replicas of the same cluster wins, so replicas use
//!    distinct hypervisors before any is reused;
//! 3. then a failure domain already holding fewer replicas of the cluster wins; the domain is
//!    the hypervisor label [`ZONE_LABEL`], a hypervisor without it is a domain of its own;
//! 4. then the least loaded hypervisor (fewest components of any cluster);
//! 5. then name order.
//!
//! The choice is a pure function of its inputs. Components already placed never move.

use std::collections::BTreeMap;

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

/// What the scheduler needs to know about one hypervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub domain: Domain<'a>,
    /// Components of any cluster placed on it.
    pub load: usize,
    /// Ports of its range not allocated yet.
    pub free_ports: usize,
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

/// The best candidate for one more replica given the cluster's current `spread` and the
/// ports the component needs, or `None` when no candidate has room.
pub fn pick<'c, 'a>(
    candidates: &'c [Candidate<'a>],
    spread: &Spread<'_>,
    ports_needed: usize,
) -> Option<&'c Candidate<'a>> {
    best(candidates, spread, ports_needed).map(|i| &candidates[i])
}

fn best(candidates: &[Candidate<'_>], spread: &Spread<'_>, ports_needed: usize) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.free_ports >= ports_needed)
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
) -> Vec<&'a str> {
    let mut chosen = Vec::with_capacity(count);
    for _ in 0..count {
        let Some(index) = best(candidates, spread, ports_needed) else {
            break;
        };
        let c = &mut candidates[index];
        c.load += 1;
        c.free_ports -= ports_needed;
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

    fn cand<'a>(name: &'a str, zone: Option<&'a str>, load: usize) -> Candidate<'a> {
        Candidate {
            name,
            domain: Domain::of(name, zone),
            load,
            free_ports: 100,
        }
    }

    #[test]
    fn distinct_hypervisors_before_reuse() {
        let mut cs = vec![cand("a", None, 0), cand("b", None, 5), cand("c", None, 9)];
        let mut spread = Spread::default();
        let placed = place(&mut cs, &mut spread, 4, 3);
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
        let placed = place(&mut cs, &mut spread, 5, 3);
        assert_eq!(placed, vec!["a1", "b1", "c1", "a2", "a3"]);
    }

    #[test]
    fn unlabelled_hypervisor_is_its_own_domain_even_if_named_like_a_zone() {
        // `z1` the hypervisor is not in zone `z1`.
        let mut cs = vec![cand("h", Some("z1"), 0), cand("z1", None, 1)];
        let mut spread = Spread::default();
        assert_eq!(place(&mut cs, &mut spread, 2, 1), vec!["h", "z1"]);
    }

    #[test]
    fn least_loaded_then_name() {
        let cs = vec![cand("b", None, 1), cand("c", None, 1), cand("a", None, 2)];
        assert_eq!(pick(&cs, &Spread::default(), 1).map(|c| c.name), Some("b"));
    }

    #[test]
    fn existing_spread_is_respected() {
        let cs = vec![cand("a", None, 0), cand("b", None, 10)];
        let mut spread = Spread::default();
        spread.add("a", Domain::of("a", None));
        assert_eq!(pick(&cs, &spread, 1).map(|c| c.name), Some("b"));
    }

    #[test]
    fn candidates_without_room_are_skipped() {
        let mut cs = vec![cand("a", None, 0), cand("b", None, 0)];
        cs[0].free_ports = 2;
        cs[1].free_ports = 3;
        let mut spread = Spread::default();
        assert_eq!(place(&mut cs, &mut spread, 2, 3), vec!["b"]);
        assert_eq!(cs[1].free_ports, 0);
        assert_eq!(cs[1].load, 1);
        assert_eq!(pick(&cs, &Spread::default(), 1).map(|c| c.name), Some("a"));
    }

    #[test]
    fn no_candidates() {
        assert_eq!(pick(&[], &Spread::default(), 1), None);
    }
}
