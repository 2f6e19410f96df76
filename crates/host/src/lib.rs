//! Redfish power control of bare-metal hosts, as the SIP jump host's `host` tool
//! (`oi-host`) does it: each host's BMC from the jump host's inventory
//! ([`oi_api::JumpHostInventory`]), reached at its address with the system's path kept
//! (`redfish+http://bmc:8000/redfish/v1/Systems/<id>`: one emulator or chassis manager serves
//! many systems), HTTP basic authentication with the host's BMC credentials.
//!
//! ```text
//! status  GET  <system path>                      → PowerState, the Reset action's target
//! reboot  POST <Actions.#ComputerSystem.Reset.target> {"ResetType": "ForceRestart"}
//!         (an Off system: "On"), then GET until PowerState is On again
//! ```
//!
//! Errors name the host, the URL (never the credentials) and what the BMC answered.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use oi_api::{BmcAddress, InventoryHost, parse_bmc_address};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// What went wrong with a host's BMC.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("host {host}: BMC address {address:?}: {reason}")]
    Address {
        host: String,
        address: String,
        reason: String,
    },
    #[error("host {host}: {url}: {reason}")]
    Unreachable {
        host: String,
        url: String,
        reason: String,
    },
    #[error("host {host}: {method} {url} answered {status}: {message}")]
    Refused {
        host: String,
        method: String,
        url: String,
        status: u16,
        message: String,
    },
    #[error("host {host}: CA bundle {path}: {reason}")]
    Trust {
        host: String,
        path: String,
        reason: String,
    },
    #[error("host {host}: {url}: not a Redfish ComputerSystem: {reason}")]
    Malformed {
        host: String,
        url: String,
        reason: String,
    },
    #[error("host {host}: still {state} {waited:?} after {reset} (wanted On)")]
    NotBack {
        host: String,
        reset: String,
        state: String,
        waited: Duration,
    },
}

/// A host's BMC, ready to be asked.
pub struct Bmc {
    host: String,
    address: BmcAddress,
    authorization: String,
    /// Kept connections to the BMC, its TLS trust built once.
    http: oi_http::Client,
}

/// What a BMC says of its system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemStatus {
    /// `On`, `Off`, `PoweringOn`, `PoweringOff`, ...
    pub power_state: String,
    /// The Reset action's target path.
    pub reset_target: String,
    /// The reset types it allows (empty: not said).
    pub reset_types: Vec<String>,
}

/// How a reboot went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebooted {
    /// The power state before.
    pub was: String,
    /// The reset type asked.
    pub reset: String,
    /// From the request until the system reported On.
    pub took: Duration,
}

impl Bmc {
    /// The BMC of an inventory host. `ca_bundle`: extra trust for `https` BMCs.
    ///
    /// # Errors
    /// [`Error::Address`] when the address is not a Redfish one with a system path, or asks
    /// for certificate verification to be disabled (not done by this tool: give the BMC's CA
    /// instead).
    pub fn of(host: &InventoryHost, ca_bundle: Option<PathBuf>) -> Result<Bmc, Error> {
        let bad = |reason: String| Error::Address {
            host: host.name.clone(),
            address: host.bmc.address.clone(),
            reason,
        };
        let address = parse_bmc_address(&host.bmc.address).map_err(bad)?;
        if !address.is_redfish() {
            return Err(bad(format!(
                "driver {} is not Redfish (only Redfish BMCs are driven)",
                address.driver
            )));
        }
        if host.bmc.disable_certificate_verification && address.scheme == "https" {
            return Err(bad(
                "disableCertificateVerification is set: oi-host verifies BMC certificates \
                 (pass the BMC's CA with --ca-bundle and clear the flag)"
                    .to_string(),
            ));
        }
        let trust_error = |path: &std::path::Path, reason: String| Error::Trust {
            host: host.name.clone(),
            path: path.display().to_string(),
            reason,
        };
        let roots = match &ca_bundle {
            Some(path) => oi_http::Roots::SystemAnd(
                std::fs::read_to_string(path).map_err(|e| trust_error(path, e.to_string()))?,
            ),
            None => oi_http::Roots::System,
        };
        let http = oi_http::Client::new(oi_http::Options {
            roots,
            timeout: REQUEST_TIMEOUT,
            ..oi_http::Options::default()
        })
        .map_err(|e| {
            trust_error(
                ca_bundle.as_deref().unwrap_or(Path::new("-")),
                e.to_string(),
            )
        })?;
        let credentials = format!("{}:{}", host.bmc.username, host.bmc.password);
        Ok(Bmc {
            host: host.name.clone(),
            authorization: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(credentials)
            ),
            address,
            http,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address.base_url())
    }

    /// One request; the status and the body as JSON (`Null` when empty).
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, Error> {
        let url = self.url(path);
        let mut request = http::Request::builder()
            .method(method)
            .uri(&url)
            .header(http::header::AUTHORIZATION, &self.authorization)
            .header(http::header::ACCEPT, "application/json");
        let bytes = match &body {
            Some(b) => {
                request = request.header(http::header::CONTENT_TYPE, "application/json");
                b.to_string().into_bytes()
            }
            None => Vec::new(),
        };
        let unreachable = |reason: String| Error::Unreachable {
            host: self.host.clone(),
            url: url.clone(),
            reason,
        };
        let request = request
            .body(oi_http::full(bytes))
            .map_err(|e| unreachable(e.to_string()))?;
        let (parts, answer) = self
            .http
            .call(request)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = parts.status.as_u16();
        let json: serde_json::Value = if answer.iter().all(u8::is_ascii_whitespace) {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&answer).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(&answer).into_owned())
            })
        };
        if !(200..300).contains(&status) {
            return Err(Error::Refused {
                host: self.host.clone(),
                method: method.to_string(),
                url,
                status,
                message: redfish_message(&json),
            });
        }
        Ok(json)
    }

    /// The system's power state and reset action.
    ///
    /// # Errors
    /// When the BMC cannot be reached, refuses, or answers something else than a system.
    pub async fn status(&self) -> Result<SystemStatus, Error> {
        let path = &self.address.path;
        let system = self.call("GET", path, None).await?;
        let malformed = |reason: &str| Error::Malformed {
            host: self.host.clone(),
            url: self.url(path),
            reason: reason.to_string(),
        };
        let power_state = system["PowerState"]
            .as_str()
            .ok_or_else(|| malformed("no PowerState"))?
            .to_string();
        let action = &system["Actions"]["#ComputerSystem.Reset"];
        let reset_target = action["target"]
            .as_str()
            .ok_or_else(|| malformed("no #ComputerSystem.Reset action"))?
            .to_string();
        let reset_types = action["ResetType@Redfish.AllowableValues"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|t| t.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Ok(SystemStatus {
            power_state,
            reset_target,
            reset_types,
        })
    }

    /// Power-cycles the system (`ForceRestart`; `On` when it is off), then waits until it
    /// reports On again, polling every `poll`, for at most `timeout`.
    ///
    /// # Errors
    /// As [`Bmc::status`]; [`Error::NotBack`] when it is not On in time.
    pub async fn reboot(&self, timeout: Duration, poll: Duration) -> Result<Rebooted, Error> {
        let before = self.status().await?;
        let reset = if before.power_state == "Off" {
            "On"
        } else {
            "ForceRestart"
        };
        let allowed =
            before.reset_types.is_empty() || before.reset_types.iter().any(|t| t == reset);
        if !allowed {
            return Err(Error::Refused {
                host: self.host.clone(),
                method: "POST".to_string(),
                url: self.url(&before.reset_target),
                status: 0,
                message: format!(
                    "the BMC does not offer ResetType {reset} (it offers {})",
                    before.reset_types.join(", ")
                ),
            });
        }
        let start = Instant::now();
        self.call(
            "POST",
            &before.reset_target,
            Some(serde_json::json!({ "ResetType": reset })),
        )
        .await?;
        // A BMC may report On before the restart shows: the restart is asked; what follows
        // only waits for the system to be On.
        loop {
            let now = self.status().await?;
            if now.power_state == "On" {
                return Ok(Rebooted {
                    was: before.power_state,
                    reset: reset.to_string(),
                    took: start.elapsed(),
                });
            }
            if start.elapsed() >= timeout {
                return Err(Error::NotBack {
                    host: self.host.clone(),
                    reset: reset.to_string(),
                    state: now.power_state,
                    waited: start.elapsed(),
                });
            }
            tokio::time::sleep(poll).await;
        }
    }
}

/// A Redfish error's message: `error.message`, with the first extended message.
fn redfish_message(json: &serde_json::Value) -> String {
    let error = &json["error"];
    let mut parts = Vec::new();
    if let Some(m) = error["message"].as_str() {
        parts.push(m.to_string());
    }
    if let Some(m) = error["@Message.ExtendedInfo"][0]["Message"].as_str() {
        parts.push(m.to_string());
    }
    if parts.is_empty() {
        match json {
            serde_json::Value::String(s) => s.chars().take(200).collect(),
            serde_json::Value::Null => "(no body)".to_string(),
            other => other.to_string().chars().take(200).collect(),
        }
    } else {
        parts.join(": ")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use oi_api::InventoryBmc;

    fn host(address: &str, insecure: bool) -> InventoryHost {
        InventoryHost {
            name: "node-1".into(),
            ip: None,
            bmc: InventoryBmc {
                address: address.into(),
                disable_certificate_verification: insecure,
                username: "admin".into(),
                password: "pw".into(),
            },
        }
    }

    #[test]
    fn only_redfish_bmcs_with_verified_certificates_are_driven() {
        let ok = Bmc::of(
            &host("redfish+http://127.0.0.1:8000/redfish/v1/Systems/a", false),
            None,
        )
        .unwrap();
        assert_eq!(
            ok.url(&ok.address.path),
            "http://127.0.0.1:8000/redfish/v1/Systems/a"
        );
        assert_eq!(ok.authorization, "Basic YWRtaW46cHc=");
        for (address, insecure, why) in [
            ("ipmi://10.0.0.1:623", false, "not Redfish"),
            ("redfish://10.0.0.1", false, "path"),
            (
                "redfish+https://10.0.0.1/redfish/v1/Systems/1",
                true,
                "--ca-bundle",
            ),
        ] {
            let e = Bmc::of(&host(address, insecure), None)
                .err()
                .unwrap()
                .to_string();
            assert!(e.starts_with("host node-1: BMC address"), "{e}");
            assert!(e.contains(why), "{e}");
            assert!(!e.contains("pw"), "{e}");
        }
        // Without TLS, the flag changes nothing.
        assert!(
            Bmc::of(
                &host("redfish+http://127.0.0.1:8000/redfish/v1/Systems/a", true),
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn redfish_errors_are_read_out() {
        let e = serde_json::json!({"error": {"code": "Base.1.0.GeneralError",
            "message": "A general error has occurred.",
            "@Message.ExtendedInfo": [{"Message": "Invalid credentials"}]}});
        assert_eq!(
            redfish_message(&e),
            "A general error has occurred.: Invalid credentials"
        );
        assert_eq!(redfish_message(&serde_json::Value::Null), "(no body)");
        assert_eq!(
            redfish_message(&serde_json::Value::String("Unauthorized".into())),
            "Unauthorized"
        );
    }
}
