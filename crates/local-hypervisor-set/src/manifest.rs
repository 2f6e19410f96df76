//! The Hypervisor manifests of a set, as `oi` reads them.

use oi_api::{
    Certificate, Hypervisor, HypervisorSpec, LocalCriEndpoint, ObjectMeta, PortRange,
    RemoteCriEndpoint,
};

use crate::error::{Error, Result};
use crate::plan::{PORT_RANGE, Visibility};
use crate::state::HypervisorState;

/// How `oi` reaches a hypervisor's CRI endpoint.
pub enum Endpoint<'a> {
    /// The containerd socket, directly.
    Local,
    /// The mutual-TLS front: `tcp://IP:PORT`, the server CA, the client certificate and key.
    Remote {
        uri: &'a str,
        ca_pem: &'a str,
        client_cert_pem: &'a str,
        client_key_pem: &'a str,
    },
}

/// The Hypervisor object of one hypervisor of a set.
pub fn hypervisor(state: &HypervisorState, endpoint: Endpoint<'_>) -> Hypervisor {
    let (local, remote) = match endpoint {
        Endpoint::Local => (
            Some(LocalCriEndpoint {
                cri_endpoint_path: state.socket.display().to_string(),
            }),
            None,
        ),
        Endpoint::Remote {
            uri,
            ca_pem,
            client_cert_pem,
            client_key_pem,
        } => (
            None,
            Some(RemoteCriEndpoint {
                cri_endpoint_uri: uri.to_string(),
                ca_certificate: ca_pem.to_string(),
                client_certificate: Some(Certificate {
                    certificate: client_cert_pem.to_string(),
                    private_key: client_key_pem.to_string(),
                }),
            }),
        ),
    };
    Hypervisor::new(
        ObjectMeta::named(&state.name),
        HypervisorSpec {
            local_cri_endpoint: local,
            remote_cri_endpoint: remote,
            public: state.visibility == Visibility::Public,
            ip_address: state.ip.to_string(),
            port_range: PortRange {
                low: PORT_RANGE.0,
                high: PORT_RANGE.1,
            },
            capacity: None,
            unschedulable: false,
            drain: false,
        },
    )
}

/// Multi-document YAML, in the given order.
///
/// # Errors
/// [`Error::Manifest`] if serde_yaml_ng refuses a value.
pub fn to_yaml(hypervisors: &[Hypervisor]) -> Result<String> {
    let docs = hypervisors
        .iter()
        .map(serde_yaml_ng::to_string)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::Manifest)?;
    Ok(docs.join("---\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Paths;

    fn state(name: &str, visibility: Visibility, ip: [u8; 4]) -> HypervisorState {
        HypervisorState {
            name: name.into(),
            visibility,
            ip: ip.into(),
            host_veth: "ohs0001v1".into(),
            socket: Paths::default().hypervisor("demo", name).socket,
            containerd_pid: None,
            haproxy_pid: None,
            cri_endpoint_uri: None,
        }
    }

    #[test]
    fn local_manifests_match_golden_and_load() {
        let hvs = [
            hypervisor(
                &state("demo-private-1", Visibility::Private, [10, 154, 43, 2]),
                Endpoint::Local,
            ),
            hypervisor(
                &state("demo-public-1", Visibility::Public, [10, 154, 43, 3]),
                Endpoint::Local,
            ),
        ];
        let yaml = to_yaml(&hvs).unwrap();
        crate::assert_golden("hypervisors-local.yaml", &yaml);
        let world = oi_api::World::load(&yaml, "stdin").unwrap();
        assert_eq!(world.hypervisors.len(), 2);
    }

    #[test]
    fn remote_manifest_carries_ca_and_client_certificate() {
        let h = hypervisor(
            &state("demo-public-1", Visibility::Public, [10, 154, 43, 3]),
            Endpoint::Remote {
                uri: "tcp://10.154.43.3:27000",
                ca_pem: "CA",
                client_cert_pem: "CERT",
                client_key_pem: "KEY",
            },
        );
        let yaml = to_yaml(&[h]).unwrap();
        let back: Hypervisor = serde_yaml_ng::from_str(&yaml).unwrap();
        let remote = back.spec.remote_cri_endpoint.unwrap();
        assert_eq!(remote.cri_endpoint_uri, "tcp://10.154.43.3:27000");
        assert_eq!(remote.ca_certificate, "CA");
        let client = remote.client_certificate.unwrap();
        assert_eq!(
            (client.certificate.as_str(), client.private_key.as_str()),
            ("CERT", "KEY")
        );
        assert!(back.spec.local_cri_endpoint.is_none());
        assert!(back.spec.public);
    }
}
