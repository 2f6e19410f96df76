//! What a leaf certificate should say, per role, as kubeadm issues them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{CaKind, Error, KeyAlgorithm, Result};

/// The group that Kubernetes' default RBAC binds to cluster-admin.
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The group of node identities.
pub const SYSTEM_NODES: &str = "system:nodes";

/// The extended key usages of a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    /// serverAuth.
    Server,
    /// clientAuth.
    Client,
    /// serverAuth and clientAuth (etcd members are both).
    ServerAndClient,
}

/// Everything that distinguishes one leaf certificate from another. The role constructors
/// below fill it in; the SAN list is also what [`crate::renewal_reason`] compares against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeafSpec {
    /// Which of a cluster's CAs signs it (used by [`crate::ClusterPki::issue`]).
    pub issuer: CaKind,
    /// Subject CN (the user name for client certificates).
    pub common_name: String,
    /// Subject O values (the groups for client certificates); at most two.
    pub organizations: Vec<String>,
    /// Subject alternative names, normalized and deduplicated: IP literals become IP SANs,
    /// everything else DNS names.
    pub sans: Vec<String>,
    /// Extended key usages.
    pub usage: Usage,
    /// The key algorithm; `None` follows the signing CA's.
    pub key_algorithm: Option<KeyAlgorithm>,
}

impl LeafSpec {
    /// A client certificate of any identity (`CN` = user, `O` = groups).
    pub fn client(issuer: CaKind, common_name: &str, organizations: &[&str]) -> Self {
        LeafSpec {
            issuer,
            common_name: common_name.to_owned(),
            organizations: organizations.iter().map(|o| (*o).to_owned()).collect(),
            sans: Vec::new(),
            usage: Usage::Client,
            key_algorithm: None,
        }
    }

    /// The kube-apiserver serving certificate; SANs from [`apiserver_sans`].
    ///
    /// # Errors
    /// As [`apiserver_sans`].
    pub fn kube_apiserver(
        dns_domain: &str,
        service_cidr: &str,
        addresses: &[impl AsRef<str>],
        extra_sans: &[impl AsRef<str>],
    ) -> Result<Self> {
        Ok(LeafSpec {
            issuer: CaKind::ApiServer,
            common_name: "kube-apiserver".to_owned(),
            organizations: Vec::new(),
            sans: apiserver_sans(dns_domain, service_cidr, addresses, extra_sans)?,
            usage: Usage::Server,
            key_algorithm: None,
        })
    }

    /// kube-apiserver's client certificate towards kubelets (`--kubelet-client-certificate`),
    /// signed by the kubelet client CA that kubelets trust.
    pub fn apiserver_kubelet_client() -> Self {
        Self::client(
            CaKind::KubeletClient,
            "kube-apiserver-kubelet-client",
            &[SYSTEM_MASTERS],
        )
    }

    /// kube-apiserver's client certificate towards etcd (`--etcd-certfile`).
    pub fn apiserver_etcd_client() -> Self {
        Self::client(CaKind::EtcdClient, "kube-apiserver-etcd-client", &[])
    }

    /// kube-controller-manager's identity in its kubeconfig.
    pub fn controller_manager() -> Self {
        Self::client(
            CaKind::ApiServerClient,
            "system:kube-controller-manager",
            &[],
        )
    }

    /// kube-scheduler's identity in its kubeconfig.
    pub fn scheduler() -> Self {
        Self::client(CaKind::ApiServerClient, "system:kube-scheduler", &[])
    }

    /// The cluster administrator of the admin kubeconfig.
    pub fn admin() -> Self {
        Self::client(
            CaKind::ApiServerClient,
            "kubernetes-admin",
            &[SYSTEM_MASTERS],
        )
    }

    /// An etcd member's serving certificate (client URLs): serverAuth only (kubeadm's also
    /// has clientAuth, which etcd 3.4's JSON gateway needed to dial its own member; nothing
    /// here speaks the gateway).
    ///
    /// # Errors
    /// As [`etcd_sans`].
    pub fn etcd_server(member_name: &str, addresses: &[impl AsRef<str>]) -> Result<Self> {
        Ok(LeafSpec {
            issuer: CaKind::EtcdServer,
            common_name: member_name.to_owned(),
            organizations: Vec::new(),
            sans: etcd_sans(member_name, addresses)?,
            usage: Usage::Server,
            key_algorithm: None,
        })
    }

    /// An etcd member's peer certificate (peer URLs, both directions).
    ///
    /// # Errors
    /// As [`etcd_sans`].
    pub fn etcd_peer(member_name: &str, addresses: &[impl AsRef<str>]) -> Result<Self> {
        Ok(LeafSpec {
            issuer: CaKind::EtcdPeer,
            usage: Usage::ServerAndClient,
            ..Self::etcd_server(member_name, addresses)?
        })
    }

    /// A kubelet's serving certificate (`CN=system:node:<node>`, `O=system:nodes`), handed to
    /// nodes that join.
    ///
    /// # Errors
    /// [`Error::InvalidSan`] for an unusable node name or address.
    pub fn kubelet_serving(node_name: &str, addresses: &[impl AsRef<str>]) -> Result<Self> {
        Ok(LeafSpec {
            issuer: CaKind::Kubelet,
            common_name: format!("system:node:{node_name}"),
            organizations: vec![SYSTEM_NODES.to_owned()],
            sans: normalize_sans(
                std::iter::once(node_name).chain(addresses.iter().map(AsRef::as_ref)),
            )?,
            usage: Usage::Server,
            key_algorithm: None,
        })
    }

    /// The serving certificate of an ingress's egress proxy into the cluster VPN, signed by
    /// the API server CA that the API servers' egress configuration trusts.
    ///
    /// # Errors
    /// [`Error::InvalidSan`] for an unusable address.
    pub fn vpn_proxy(addresses: &[impl AsRef<str>]) -> Result<Self> {
        Ok(LeafSpec {
            issuer: CaKind::ApiServer,
            common_name: "oneinfra-vpn-proxy".to_owned(),
            organizations: Vec::new(),
            sans: normalize_sans(addresses.iter().map(AsRef::as_ref))?,
            usage: Usage::Server,
            key_algorithm: None,
        })
    }

    /// The same spec with its key algorithm fixed rather than following the CA's.
    pub fn with_key_algorithm(mut self, algorithm: KeyAlgorithm) -> Self {
        self.key_algorithm = Some(algorithm);
        self
    }
}

/// The kube-apiserver serving SANs: `kubernetes`, `kubernetes.default`,
/// `kubernetes.default.svc`, `kubernetes.default.svc.<dns_domain>`, `localhost`, `127.0.0.1`,
/// the first address of the service CIDR (the `kubernetes` Service's ClusterIP), then
/// `addresses` (hypervisor and ingress addresses or names), then `extra_sans`. Extra SANs
/// are added to the defaults, never in their place.
///
/// # Errors
/// [`Error::InvalidServiceCidr`] or [`Error::InvalidSan`].
pub fn apiserver_sans(
    dns_domain: &str,
    service_cidr: &str,
    addresses: &[impl AsRef<str>],
    extra_sans: &[impl AsRef<str>],
) -> Result<Vec<String>> {
    let domain = dns_domain.trim().trim_end_matches('.');
    let service_ip = service_cidr_first_ip(service_cidr)?.to_string();
    let fixed = [
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        format!("kubernetes.default.svc.{domain}"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        service_ip,
    ];
    normalize_sans(
        fixed
            .iter()
            .map(String::as_str)
            .chain(addresses.iter().map(AsRef::as_ref))
            .chain(extra_sans.iter().map(AsRef::as_ref)),
    )
}

/// etcd member SANs, as kubeadm: the member name, `localhost`, the given addresses,
/// `127.0.0.1` and `::1`.
///
/// # Errors
/// [`Error::InvalidSan`] for an unusable member name or address.
pub fn etcd_sans(member_name: &str, addresses: &[impl AsRef<str>]) -> Result<Vec<String>> {
    normalize_sans(
        [member_name, "localhost"]
            .into_iter()
            .chain(addresses.iter().map(AsRef::as_ref))
            .chain(["127.0.0.1", "::1"]),
    )
}

/// The first host address of a service CIDR (`10.96.0.0/12` gives `10.96.0.1`): the
/// ClusterIP of the `kubernetes` Service.
///
/// # Errors
/// [`Error::InvalidServiceCidr`] when the CIDR does not parse or holds no such address.
pub fn service_cidr_first_ip(service_cidr: &str) -> Result<IpAddr> {
    let invalid = |reason: &str| Error::InvalidServiceCidr {
        value: service_cidr.to_owned(),
        reason: reason.to_owned(),
    };
    let (address, prefix) = service_cidr
        .trim()
        .split_once('/')
        .ok_or_else(|| invalid("missing /prefix"))?;
    let address: IpAddr = address.parse().map_err(|_| invalid("invalid address"))?;
    let prefix: u32 = prefix.parse().map_err(|_| invalid("invalid prefix"))?;
    match address {
        IpAddr::V4(v4) => {
            if prefix > 30 {
                return Err(invalid("prefix longer than /30 leaves no service address"));
            }
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            Ok(IpAddr::V4(Ipv4Addr::from((u32::from(v4) & mask) + 1)))
        }
        IpAddr::V6(v6) => {
            if prefix > 126 {
                return Err(invalid("prefix longer than /126 leaves no service address"));
            }
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            Ok(IpAddr::V6(Ipv6Addr::from((u128::from(v6) & mask) + 1)))
        }
    }
}

/// One subject alternative name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum San {
    Ip(IpAddr),
    Dns(String),
}

impl San {
    /// Parses a SAN string: an IP literal (brackets around IPv6 allowed) or a DNS name,
    /// lowercased (DNS names compare case-insensitively).
    pub(crate) fn parse(value: &str) -> Result<San> {
        let trimmed = value.trim();
        let unbracketed = trimmed
            .strip_prefix('[')
            .and_then(|v| v.strip_suffix(']'))
            .unwrap_or(trimmed);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Ok(San::Ip(ip));
        }
        let invalid = |reason: &str| Error::InvalidSan {
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        if trimmed.is_empty() {
            return Err(invalid("empty"));
        }
        if trimmed.len() > 253 {
            return Err(invalid("longer than 253 characters"));
        }
        let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '*');
        if !trimmed.chars().all(valid_char) {
            return Err(invalid(
                "a DNS name holds only letters, digits, '-', '.', '_' and '*'",
            ));
        }
        if trimmed.split('.').any(str::is_empty) {
            return Err(invalid("empty DNS label"));
        }
        Ok(San::Dns(trimmed.to_ascii_lowercase()))
    }

    pub(crate) fn render(&self) -> String {
        match self {
            San::Ip(ip) => ip.to_string(),
            San::Dns(name) => name.clone(),
        }
    }
}

/// Parses, normalizes and deduplicates SANs, keeping first-seen order.
pub(crate) fn normalize_sans<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut sans = Vec::new();
    for value in values {
        let san = San::parse(value)?;
        if seen.insert(san.clone()) {
            sans.push(san.render());
        }
    }
    Ok(sans)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
