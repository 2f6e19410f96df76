//! The crate's error type: every variant names the hypervisor and the CRI endpoint it concerns.

use std::fmt;
use std::time::Duration;

/// Which hypervisor and which CRI endpoint an error concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The Hypervisor object's name.
    pub hypervisor: String,
    /// The endpoint as configured: `unix:///path` or the TCP URI.
    pub endpoint: String,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hypervisor {:?} (CRI endpoint {})",
            self.hypervisor, self.endpoint
        )
    }
}

/// Errors of the CRI client and the runtime operations built on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint cannot be used as given (bad URI, unsupported scheme, no host or port).
    #[error("{target}: invalid endpoint: {reason}")]
    InvalidEndpoint { target: Target, reason: String },

    /// A certificate, key or CA bundle could not be parsed or used.
    #[error("{target}: invalid TLS material ({what}): {reason}")]
    TlsMaterial {
        target: Target,
        what: &'static str,
        reason: String,
    },

    /// The transport could not be established (socket missing, connection refused, TLS
    /// handshake refused).
    #[error("{target}: cannot connect: {reason}")]
    Connect { target: Target, reason: String },

    /// Connecting did not finish within the connect timeout.
    #[error("{target}: connect timed out after {timeout:?}")]
    ConnectTimeout { target: Target, timeout: Duration },

    /// The runtime answered a call with an error status (or the transport broke mid-call).
    #[error("{target}: CRI call {call} failed: {status}")]
    Call {
        target: Target,
        call: &'static str,
        status: Box<tonic::Status>,
    },

    /// A call did not finish within the per-call timeout.
    #[error("{target}: CRI call {call} timed out after {timeout:?}")]
    CallTimeout {
        target: Target,
        call: &'static str,
        timeout: Duration,
    },

    /// The runtime answered without a field the CRI contract promises.
    #[error("{target}: CRI call {call} answered without {field}")]
    MissingField {
        target: Target,
        call: &'static str,
        field: &'static str,
    },

    /// An image is not present on the hypervisor and could not be pulled.
    #[error("{target}: image {image} is missing and could not be pulled: {status}")]
    ImageUnavailable {
        target: Target,
        image: String,
        status: Box<tonic::Status>,
    },

    /// A throwaway container did not exit within its timeout (it was removed).
    #[error(
        "{target}: container {container} did not exit within {timeout:?}; log tail: {log_tail}"
    )]
    RunTimeout {
        target: Target,
        container: String,
        timeout: Duration,
        log_tail: String,
    },

    /// The file writer (or remover) container exited with a non-zero code.
    #[error("{target}: {job} container exited with code {exit_code}; log tail: {log_tail}")]
    HelperFailed {
        target: Target,
        job: &'static str,
        exit_code: i32,
        log_tail: String,
    },

    /// A host path given to write or remove is not acceptable.
    #[error("{target}: refusing host path {path:?}: {reason}")]
    InvalidHostPath {
        target: Target,
        path: String,
        reason: &'static str,
    },
}

impl Error {
    /// The hypervisor and endpoint the error concerns.
    pub fn target(&self) -> &Target {
        match self {
            Error::InvalidEndpoint { target, .. }
            | Error::TlsMaterial { target, .. }
            | Error::Connect { target, .. }
            | Error::ConnectTimeout { target, .. }
            | Error::Call { target, .. }
            | Error::CallTimeout { target, .. }
            | Error::MissingField { target, .. }
            | Error::ImageUnavailable { target, .. }
            | Error::RunTimeout { target, .. }
            | Error::HelperFailed { target, .. }
            | Error::InvalidHostPath { target, .. } => target,
        }
    }

    /// The gRPC status code when the runtime answered with an error.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Call { status, .. } | Error::ImageUnavailable { status, .. } => {
                Some(status.code())
            }
            _ => None,
        }
    }

    /// Whether the runtime answered that it is not initialized yet (containerd's CRI plugin
    /// in the moments after a restart): worth asking again shortly.
    pub fn not_initialized(&self) -> bool {
        matches!(self, Error::Call { status, .. } if status.message().contains("not initialized"))
    }

    /// Whether the error says the object does not exist (already gone).
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }

    /// Whether the runtime refused to remove a container because a `StartContainer` of it is
    /// still being carried out (containerd's words: "container is in starting state, can't be
    /// removed"): transient, it ends when the start does.
    pub fn is_container_starting(&self) -> bool {
        match self {
            Error::Call { status, .. } => {
                status.code() == tonic::Code::Unknown
                    && status.message().contains("container is in starting state")
            }
            _ => false,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn call(code: tonic::Code, message: &str) -> Error {
        Error::Call {
            target: Target {
                hypervisor: "h".into(),
                endpoint: "unix:///run/h.sock".into(),
            },
            call: "RemovePodSandbox",
            status: Box::new(tonic::Status::new(code, message)),
        }
    }

    #[test]
    fn only_containerds_starting_refusal_is_a_starting_container() {
        // containerd 1.6's words when RemovePodSandbox meets a container being started.
        let starting = call(
            tonic::Code::Unknown,
            "failed to remove container \"2eb3\": failed to set removing state for container \"2eb3\": container is in starting state, can't be removed",
        );
        assert!(starting.is_container_starting());
        assert!(!starting.is_not_found());
        assert!(
            !call(tonic::Code::Unknown, "container is in removing state").is_container_starting()
        );
        assert!(
            !call(
                tonic::Code::NotFound,
                "container is in starting state, can't be removed"
            )
            .is_container_starting()
        );
        let timeout = Error::CallTimeout {
            target: starting.target().clone(),
            call: "RemovePodSandbox",
            timeout: Duration::from_secs(1),
        };
        assert!(!timeout.is_container_starting());
    }
}
