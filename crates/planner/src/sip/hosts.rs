//! What the support services need of each selected host, read from its BareMetalHost and the
//! Secrets it references: its addresses (network data, `networks[].id` matched against the
//! services' `nodeInterfaceId`) and its BMC (address with the system's path, credentials).
//! A missing or malformed piece is a problem naming the host, the Secret and the key.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use oi_api::{BareMetalHost, BmcAddress, ObjectKey, Secret, parse_bmc_address};
use serde::Deserialize;

/// The Secret key holding network data (metal3's, as upstream SIP reads it).
pub const NETWORK_DATA_KEY: &str = "networkData";
/// The BMC credentials Secret's keys.
pub const BMC_USERNAME_KEY: &str = "username";
pub const BMC_PASSWORD_KEY: &str = "password";

/// A host's data for the support services.
#[derive(Clone, PartialEq, Eq)]
pub struct HostData {
    pub key: ObjectKey,
    /// Address of each interface the services use, by network id.
    pub addresses: BTreeMap<String, IpAddr>,
    pub bmc: BmcAddress,
    pub bmc_insecure: bool,
    pub bmc_username: String,
    /// Never shown by `Debug`.
    pub bmc_password: String,
}

impl fmt::Debug for HostData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostData")
            .field("key", &self.key)
            .field("addresses", &self.addresses)
            .field("bmc", &self.bmc)
            .field("bmc_insecure", &self.bmc_insecure)
            .field("bmc_username", &self.bmc_username)
            .finish_non_exhaustive()
    }
}

/// OpenStack network data as metal3 passes it to config drive: what we read of it.
#[derive(Debug, Deserialize)]
struct NetworkData {
    #[serde(default)]
    networks: Vec<Network>,
}

#[derive(Debug, Deserialize)]
struct Network {
    #[serde(default)]
    id: String,
    #[serde(default)]
    ip_address: Option<String>,
}

/// Reads a host's data. `interfaces`: every `(service field path, nodeInterfaceId)` the
/// SIPCluster's services use.
///
/// # Errors
///
/// The first problem, in words naming the Secret and key (never a secret value).
pub fn host_data(
    host: &BareMetalHost,
    secrets: &BTreeMap<ObjectKey, Secret>,
    interfaces: &[(String, &str)],
) -> Result<HostData, String> {
    // The network data.
    let Some(nd_key) = host.network_data_secret() else {
        return Err("has no spec.networkData (the Secret of its addresses)".to_string());
    };
    let nd_secret = secrets
        .get(&nd_key)
        .ok_or_else(|| format!("its network data Secret {nd_key} is missing"))?;
    let raw = match nd_secret.value(NETWORK_DATA_KEY) {
        None => {
            return Err(format!(
                "its network data Secret {nd_key} has no key {NETWORK_DATA_KEY}"
            ));
        }
        Some(Err(_)) => {
            return Err(format!(
                "its network data Secret {nd_key} key {NETWORK_DATA_KEY} is not base64"
            ));
        }
        Some(Ok(raw)) => raw,
    };
    // YAML is a superset of JSON: one parser reads both forms.
    let data: NetworkData = serde_yaml_ng::from_slice(&raw).map_err(|e| {
        format!(
            "its network data Secret {nd_key} key {NETWORK_DATA_KEY} is neither JSON nor YAML network data: {}",
            first_line(&e.to_string())
        )
    })?;
    let mut addresses = BTreeMap::new();
    for (service, id) in interfaces {
        if addresses.contains_key(*id) {
            continue;
        }
        let Some(network) = data.networks.iter().find(|n| n.id == *id) else {
            return Err(format!(
                "its network data Secret {nd_key} key {NETWORK_DATA_KEY} has no network {id:?} ({service}.nodeInterfaceId)"
            ));
        };
        let Some(ip) = network.ip_address.as_deref() else {
            return Err(format!(
                "its network data Secret {nd_key} key {NETWORK_DATA_KEY}: network {id:?} has no ip_address"
            ));
        };
        let ip: IpAddr = ip.parse().map_err(|_| {
            format!(
                "its network data Secret {nd_key} key {NETWORK_DATA_KEY}: network {id:?} ip_address {ip:?} is not an IP address"
            )
        })?;
        addresses.insert((*id).to_string(), ip);
    }

    // The BMC.
    if host.spec.bmc.address.is_empty() {
        return Err("has no spec.bmc.address".to_string());
    }
    let bmc =
        parse_bmc_address(&host.spec.bmc.address).map_err(|e| format!("spec.bmc.address: {e}"))?;
    if host.spec.bmc.credentials_name.is_empty() {
        return Err("has no spec.bmc.credentialsName".to_string());
    }
    let creds_key = host.bmc_credentials_secret();
    let creds = secrets
        .get(&creds_key)
        .ok_or_else(|| format!("its BMC credentials Secret {creds_key} is missing"))?;
    let read = |key: &str| -> Result<String, String> {
        match creds.value(key) {
            None => Err(format!(
                "its BMC credentials Secret {creds_key} has no key {key}"
            )),
            Some(Err(_)) => Err(format!(
                "its BMC credentials Secret {creds_key} key {key} is not base64"
            )),
            Some(Ok(v)) => {
                let v = String::from_utf8(v).map_err(|_| {
                    format!("its BMC credentials Secret {creds_key} key {key} is not UTF-8")
                })?;
                if v.is_empty() {
                    Err(format!(
                        "its BMC credentials Secret {creds_key} key {key} is empty"
                    ))
                } else {
                    Ok(v)
                }
            }
        }
    };
    let bmc_username = read(BMC_USERNAME_KEY)?;
    let bmc_password = read(BMC_PASSWORD_KEY)?;
    Ok(HostData {
        key: ObjectKey::new(
            host.metadata.namespace_or_default(),
            host.metadata.name.clone(),
        ),
        addresses,
        bmc,
        bmc_insecure: host.spec.bmc.disable_certificate_verification,
        bmc_username,
        bmc_password,
    })
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
