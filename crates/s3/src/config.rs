//! The S3 settings and where the credentials come from, in the order every AWS tool reads
//! them:
//!
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
//! 2. the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//!    `~/.aws/credentials`), profile `AWS_PROFILE` or `default`;
//! 3. a web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`: a Kubernetes
//!    service account's projected token), then a container's credentials endpoint
//!    (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `_FULL_URI`), then the instance's
//!    metadata service: these object_store fetches and refreshes itself. The instance's
//!    metadata service is not asked when `AWS_EC2_METADATA_DISABLED=true`, as with the AWS
//!    SDKs.
//!
//! The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region` in the shared
//! config file (`AWS_CONFIG_FILE`, else `~/.aws/config`), else `us-east-1`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// An access key. `Debug` never shows the secret or the session token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// Where the credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// A key read now; `from` says where (the environment, or a file and its profile).
    Key {
        credentials: Credentials,
        from: String,
    },
    /// Fetched and refreshed by object_store: a web identity, a container's endpoint or the
    /// instance's metadata service; `settings` are the variables that say which (passed on
    /// as object_store's configuration keys).
    Provider { settings: Vec<(String, String)> },
    /// None anywhere (the instance's metadata service disabled): every S3 call says so.
    None,
}

/// Settings of the S3 API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `http(s)://host[:port]` of an S3-compatible store (path-style requests); AWS's
    /// regional endpoint when none.
    pub endpoint: Option<String>,
    pub region: String,
    pub credentials: CredentialSource,
    /// PEM CAs trusted besides the system's.
    pub ca_bundle: Option<PathBuf>,
    /// For each request's answer to begin, and then between two pieces of its body.
    pub timeout: Duration,
    /// How many times a failed request is sent again (with exponential backoff, for the
    /// failures that are safe to retry: no connection, 5xx, 429, a broken read).
    pub max_retries: usize,
    /// Objects up to this size go in one PUT; larger ones in parts of this size (S3's
    /// minimum part is 5 MiB).
    pub part_size: usize,
}

impl Default for S3Config {
    fn default() -> Self {
        S3Config {
            endpoint: None,
            region: "us-east-1".into(),
            credentials: CredentialSource::None,
            ca_bundle: None,
            timeout: Duration::from_secs(60),
            max_retries: 5,
            part_size: 16 * 1024 * 1024,
        }
    }
}

impl S3Config {
    /// From the process's environment and the AWS shared files (see the module's
    /// documentation).
    pub fn from_env() -> S3Config {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// [`S3Config::from_env`] over any source of variables (`HOME` included).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> S3Config {
        let profile = var("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let home = var("HOME").map(PathBuf::from);
        let shared = |explicit: &str, default: &str| {
            var(explicit)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(default)))
        };
        let credentials_file = shared("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
        let config_file = shared("AWS_CONFIG_FILE", ".aws/config");
        let credentials = match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(access_key_id), Some(secret_access_key)) => CredentialSource::Key {
                credentials: Credentials {
                    access_key_id,
                    secret_access_key,
                    session_token: var("AWS_SESSION_TOKEN"),
                },
                from: "the environment".into(),
            },
            _ => match credentials_file
                .as_deref()
                .and_then(|file| profile_key(file, &profile))
            {
                Some(key) => key,
                None => provider(&var),
            },
        };
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .or_else(|| {
                let file = config_file?;
                let section = if profile == "default" {
                    "default".to_string()
                } else {
                    format!("profile {profile}")
                };
                ini_value(&std::fs::read_to_string(file).ok()?, &section, "region")
            })
            .unwrap_or_else(|| "us-east-1".into());
        S3Config {
            endpoint: var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")),
            region,
            credentials,
            ca_bundle: var("AWS_CA_BUNDLE").map(PathBuf::from),
            ..S3Config::default()
        }
    }
}

/// The key of `profile` in a shared credentials file, if the file has one.
fn profile_key(file: &Path, profile: &str) -> Option<CredentialSource> {
    let text = std::fs::read_to_string(file).ok()?;
    let access_key_id = ini_value(&text, profile, "aws_access_key_id")?;
    let secret_access_key = ini_value(&text, profile, "aws_secret_access_key")?;
    Some(CredentialSource::Key {
        credentials: Credentials {
            access_key_id,
            secret_access_key,
            session_token: ini_value(&text, profile, "aws_session_token"),
        },
        from: format!("{} (profile {profile})", file.display()),
    })
}

/// A web identity, a container's endpoint, the instance's metadata service, or none.
fn provider(var: &impl Fn(&str) -> Option<String>) -> CredentialSource {
    let passed = [
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_ROLE_SESSION_NAME",
        "AWS_ENDPOINT_URL_STS",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "AWS_METADATA_ENDPOINT",
    ];
    let settings: Vec<(String, String)> = passed
        .iter()
        .filter_map(|name| var(name).map(|v| (name.to_ascii_lowercase(), v)))
        .collect();
    let web_identity =
        var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() && var("AWS_ROLE_ARN").is_some();
    let container = var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || var("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some();
    let metadata_disabled =
        var("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if web_identity || container || !metadata_disabled {
        CredentialSource::Provider { settings }
    } else {
        CredentialSource::None
    }
}

/// `key = value` in `[section]` of an INI text (the AWS shared files' format: `#` and `;`
/// start comments, keys and sections are compared as written).
fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            return Some(v.trim().to_string());
        }
    }
    None
}
