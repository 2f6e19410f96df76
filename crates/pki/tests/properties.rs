//! Invariants of the pure SAN and CIDR helpers.
#![allow(clippy::unwrap_used)]

use std::net::Ipv4Addr;

use oi_pki::{apiserver_sans, service_cidr_first_ip};
use proptest::prelude::*;

fn san() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9]([a-zA-Z0-9-]{0,10}[a-zA-Z0-9])?(\\.[a-z]{2,5}){0,2}",
        any::<[u8; 4]>().prop_map(|o| Ipv4Addr::from(o).to_string()),
        Just("kubernetes".to_owned()),
        Just("LOCALHOST".to_owned()),
        Just("127.0.0.1".to_owned()),
    ]
}

proptest! {
    #[test]
    fn extra_sans_keep_the_defaults_first_and_names_unique(
        addresses in proptest::collection::vec(san(), 0..5),
        extra in proptest::collection::vec(san(), 0..8),
    ) {
        let sans = apiserver_sans("cluster.local", "10.96.0.0/12", &addresses, &extra).unwrap();
        prop_assert_eq!(
            &sans[..7],
            &[
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "localhost",
                "127.0.0.1",
                "10.96.0.1",
            ][..]
        );
        let unique: std::collections::BTreeSet<_> = sans.iter().collect();
        prop_assert_eq!(unique.len(), sans.len());
        for wanted in addresses.iter().chain(&extra) {
            prop_assert!(sans.contains(&wanted.to_ascii_lowercase()), "{} missing", wanted);
        }
        // Normalizing again changes nothing.
        let again = apiserver_sans("cluster.local", "10.96.0.0/12", &sans, &[""; 0]).unwrap();
        prop_assert_eq!(again, sans);
    }

    #[test]
    fn first_service_ip_is_network_plus_one(octets in any::<[u8; 4]>(), prefix in 0u32..=30) {
        let ip = u32::from(Ipv4Addr::from(octets));
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        let first = service_cidr_first_ip(&format!("{}/{prefix}", Ipv4Addr::from(ip))).unwrap();
        prop_assert_eq!(first, std::net::IpAddr::V4(Ipv4Addr::from((ip & mask) + 1)));
    }
}
