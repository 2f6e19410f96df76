use super::*;

#[test]
fn service_cidr_first_address() {
    let first = |c: &str| service_cidr_first_ip(c).unwrap().to_string();
    assert_eq!(first("10.96.0.0/12"), "10.96.0.1");
    assert_eq!(first("10.96.7.9/12"), "10.96.0.1");
    assert_eq!(first("172.16.0.0/30"), "172.16.0.1");
    assert_eq!(first("0.0.0.0/0"), "0.0.0.1");
    assert_eq!(first("fd00:10:96::/108"), "fd00:10:96::1");
    for bad in [
        "10.96.0.0",
        "10.96.0.0/31",
        "10.96.0.0/33",
        "x/12",
        "fd00::/127",
        "",
    ] {
        assert!(
            matches!(service_cidr_first_ip(bad), Err(Error::InvalidServiceCidr { ref value, .. }) if value == bad),
            "{bad}"
        );
    }
}

#[test]
fn apiserver_sans_keep_defaults_before_extras() {
    let sans = apiserver_sans(
        "cluster.local",
        "10.96.0.0/12",
        &["192.168.1.10", "ingress.example.com"],
        &["api.example.com", "10.0.0.5", "LOCALHOST", "[::1]"],
    )
    .unwrap();
    assert_eq!(
        sans,
        [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
            "127.0.0.1",
            "10.96.0.1",
            "192.168.1.10",
            "ingress.example.com",
            "api.example.com",
            "10.0.0.5",
            "::1",
        ]
    );
}

#[test]
fn sans_are_validated() {
    for bad in ["", "has space", "a..b", "ünïcode.example"] {
        assert!(
            matches!(San::parse(bad), Err(Error::InvalidSan { .. })),
            "{bad:?}"
        );
    }
    assert_eq!(
        San::parse("*.Example.COM").unwrap(),
        San::Dns("*.example.com".into())
    );
    assert_eq!(
        San::parse("0:0::1").unwrap(),
        San::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST))
    );
}

#[test]
fn role_subjects() {
    let admin = LeafSpec::admin();
    assert_eq!(
        (admin.common_name.as_str(), admin.organizations.as_slice()),
        ("kubernetes-admin", &[SYSTEM_MASTERS.to_owned()][..])
    );
    assert_eq!(admin.issuer, CaKind::ApiServerClient);
    assert_eq!(LeafSpec::apiserver_etcd_client().issuer, CaKind::EtcdClient);
    assert_eq!(
        LeafSpec::apiserver_kubelet_client().issuer,
        CaKind::KubeletClient
    );
    let server = LeafSpec::etcd_server("etcd-0", &["10.0.0.2"]).unwrap();
    assert_eq!(server.issuer, CaKind::EtcdServer);
    assert_eq!(
        server.usage,
        Usage::Server,
        "no clientAuth: no gateway dials etcd"
    );
    let peer = LeafSpec::etcd_peer("etcd-0", &["10.0.0.2"]).unwrap();
    assert_eq!(peer.issuer, CaKind::EtcdPeer);
    assert_eq!(peer.usage, Usage::ServerAndClient);
    assert_eq!(
        peer.sans,
        ["etcd-0", "localhost", "10.0.0.2", "127.0.0.1", "::1"]
    );
    let kubelet = LeafSpec::kubelet_serving("node-a", &["10.0.0.9"]).unwrap();
    assert_eq!(kubelet.common_name, "system:node:node-a");
    assert_eq!(kubelet.sans, ["node-a", "10.0.0.9"]);
}
