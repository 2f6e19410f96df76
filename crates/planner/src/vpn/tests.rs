#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use oi_api::VpnPeer;

use super::*;
use crate::testutil;

fn peer(name: &str, address: &str, public_key: &str) -> VpnPeer {
    VpnPeer {
        name: name.into(),
        address: address.into(),
        private_key: String::new(),
        public_key: public_key.into(),
    }
}

const K1: &str = "YAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
const K2: &str = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";

#[test]
fn the_endpoint_takes_the_first_address_and_workers_the_lowest_free_one() {
    let net: IpNet = "10.0.0.0/16".parse().unwrap();
    assert_eq!(endpoint_address(net).to_string(), "10.0.0.1/16");
    assert_eq!(free_address(net, &[]), Some("10.0.0.2".parse().unwrap()));
    let peers = [
        peer("worker-a", "10.0.0.2/16", K1),
        peer("worker-c", "10.0.0.4/16", K2),
    ];
    // 10.0.0.3 was handed back by a worker that left: the next one gets it.
    assert_eq!(free_address(net, &peers), Some("10.0.0.3".parse().unwrap()));
    let v6: IpNet = "fd00:1::/64".parse().unwrap();
    assert_eq!(endpoint_address(v6).to_string(), "fd00:1::1/64");
    assert_eq!(free_address(v6, &[]), Some("fd00:1::2".parse().unwrap()));
}

#[test]
fn a_full_cidr_has_no_free_address() {
    // /30: network, endpoint, one peer, broadcast.
    let net: IpNet = "10.9.0.0/30".parse().unwrap();
    let one = [peer("worker-a", "10.9.0.2/30", K1)];
    assert_eq!(free_address(net, &[]), Some("10.9.0.2".parse().unwrap()));
    assert_eq!(free_address(net, &one), None);
    let mut c = testutil::cluster("c", 1, true);
    c.spec.vpn.cidr = "10.9.0.0/31".into();
    assert!(cidr(&c).unwrap_err().contains("no room"));
    c.spec.vpn.cidr = "10.9.0.0/30".into();
    assert_eq!(cidr(&c).unwrap(), net);
    c.spec.vpn.cidr = "10.9.0.7/30".into();
    assert_eq!(cidr(&c).unwrap(), "10.9.0.4/30".parse::<IpNet>().unwrap());
}

#[test]
fn interface_names_are_short_distinct_and_stable() {
    let a = interface_name("default", "demo");
    assert_eq!(a.len(), 14);
    assert!(a.starts_with("wg"));
    assert_eq!(a, interface_name("default", "demo"));
    assert_ne!(a, interface_name("team-a", "demo"));
    assert_ne!(a, interface_name("default", "demo2"));
}

#[test]
fn the_configuration_lists_each_peer_by_name_with_its_address_alone() {
    let peers = [
        peer("worker-b", "10.0.0.3/16", K2),
        peer("worker-a", "10.0.0.2/16", K1),
        // No public key: not a peer the endpoint can have.
        peer("worker-c", "10.0.0.4/16", ""),
    ];
    let text = endpoint_config("PRIVATE", 30001, &peers);
    assert_eq!(
        text,
        format!(
            "# The WireGuard endpoint of a cluster VPN, written by oneinfra: changes apply live.\n[Interface]\nPrivateKey = PRIVATE\nListenPort = 30001\n\n[Peer]\n# worker-a\nPublicKey = {K1}\nAllowedIPs = 10.0.0.2/32\nPersistentKeepalive = 25\n\n[Peer]\n# worker-b\nPublicKey = {K2}\nAllowedIPs = 10.0.0.3/32\nPersistentKeepalive = 25\n"
        )
    );
}

#[test]
fn peers_and_their_nodes() {
    assert_eq!(peer_name("w1"), "worker-w1");
    assert_eq!(peer_node("worker-w1"), Some("w1"));
    assert_eq!(peer_node("w1"), None);
    assert_eq!(
        peer_ip(&peer("x", "10.0.0.2/16", "")),
        Some("10.0.0.2".parse().unwrap())
    );
    assert_eq!(
        peer_ip(&peer("x", "10.0.0.2", "")),
        Some("10.0.0.2".parse().unwrap())
    );
    assert_eq!(peer_ip(&peer("x", "nope", "")), None);
    assert!(is_wireguard_key(K1));
    assert!(!is_wireguard_key("abc"));
}
