//! `oi-s3`: where etcd snapshots go. A [`Location`] is an object of an S3-compatible store
//! (`s3://bucket/key`) or a local file (`file:///path`, or a plain path); [`Store`] puts,
//! gets, lists and deletes at either, the same way.
//!
//! ```text
//! s3://bucket/prefix/name ─► PUT/GET/DELETE <endpoint>/<bucket>/<key>   (path style, with
//!                            GET <endpoint>/<bucket>?list-type=2&prefix=  AWS_ENDPOINT_URL)
//!                            or https://<bucket>.s3.<region>.amazonaws.com/<key>
//!                            signed with SigV4 (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
//!                            AWS_SESSION_TOKEN), region AWS_REGION (us-east-1)
//! file:///dir/name        ─► written to a temporary file (0600) then renamed; listed by
//!                            directory
//! ```
//!
//! The S3 settings come from the variables every AWS tool reads (see [`S3Config::from_env`]);
//! HTTPS trusts the system's roots, or `AWS_CA_BUNDLE`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod sigv4;
pub mod transport;
mod xml;

use std::path::{Path, PathBuf};
use std::time::Duration;

use time::OffsetDateTime;

pub use sigv4::Credentials;

/// Where an object is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    S3 { bucket: String, key: String },
    File(PathBuf),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            Location::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Location {
    /// `s3://bucket/key`, `file:///path`, or a path.
    ///
    /// # Errors
    /// A message saying what is wrong with `s`.
    pub fn parse(s: &str) -> Result<Location, String> {
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("{s:?}: no bucket (expected s3://bucket/key)"));
            }
            if !bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            {
                return Err(format!(
                    "{s:?}: bucket {bucket:?} is not a valid bucket name (lowercase letters, digits, '-' and '.')"
                ));
            }
            return Ok(Location::S3 {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        if let Some(path) = s.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(format!("{s:?}: a file:// location takes an absolute path"));
            }
            return Ok(Location::File(PathBuf::from(path)));
        }
        if s.contains("://") {
            return Err(format!(
                "{s:?}: unknown scheme (use s3://bucket/key, file:///path or a path)"
            ));
        }
        if s.is_empty() {
            return Err("an empty location".into());
        }
        Ok(Location::File(PathBuf::from(s)))
    }

    /// `name` under this location taken as a prefix (a directory, for files).
    pub fn join(&self, name: &str) -> Location {
        match self {
            Location::S3 { bucket, key } => Location::S3 {
                bucket: bucket.clone(),
                key: if key.is_empty() || key.ends_with('/') {
                    format!("{key}{name}")
                } else {
                    format!("{key}/{name}")
                },
            },
            Location::File(p) => Location::File(p.join(name)),
        }
    }

    /// The last part of its name.
    pub fn name(&self) -> &str {
        match self {
            Location::S3 { key, .. } => key.rsplit('/').next().unwrap_or(key),
            Location::File(p) => p.file_name().and_then(|n| n.to_str()).unwrap_or_default(),
        }
    }
}

/// An object found by [`Store::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub location: Location,
    pub size: u64,
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{location}: {source}")]
    Io {
        location: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{location}: not found")]
    NotFound { location: String },
    #[error(
        "{location}: the S3 settings are incomplete: {reason} (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and AWS_ENDPOINT_URL for a store other than AWS)"
    )]
    Settings { location: String, reason: String },
    #[error("{location}: {operation}: {reason}")]
    Transport {
        location: String,
        operation: &'static str,
        reason: String,
    },
    #[error("{location}: {operation}: HTTP {status} {code}: {message}")]
    Status {
        location: String,
        operation: &'static str,
        status: u16,
        code: String,
        message: String,
    },
}

/// Settings of the S3 API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `http(s)://host[:port]` of an S3-compatible store; AWS's regional endpoint when none.
    pub endpoint: Option<String>,
    pub region: String,
    pub credentials: Option<Credentials>,
    /// PEM CAs trusted besides the system's.
    pub ca_bundle: Option<PathBuf>,
    pub timeout: Duration,
}

impl Default for S3Config {
    fn default() -> Self {
        S3Config {
            endpoint: None,
            region: "us-east-1".into(),
            credentials: None,
            ca_bundle: None,
            timeout: Duration::from_secs(300),
        }
    }
}

impl S3Config {
    /// From the variables AWS tools read: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_CA_BUNDLE`.
    pub fn from_env() -> S3Config {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// [`S3Config::from_env`] over any source of variables.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> S3Config {
        let credentials = match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(access_key_id), Some(secret_access_key)) => Some(Credentials {
                access_key_id,
                secret_access_key,
                session_token: var("AWS_SESSION_TOKEN"),
            }),
            _ => None,
        };
        S3Config {
            endpoint: var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")),
            region: var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".into()),
            credentials,
            ca_bundle: var("AWS_CA_BUNDLE").map(PathBuf::from),
            ..S3Config::default()
        }
    }
}

/// Puts, gets, lists and deletes objects at [`Location`]s.
#[derive(Debug, Clone, Default)]
pub struct Store {
    pub s3: S3Config,
}

impl Store {
    pub fn new(s3: S3Config) -> Self {
        Store { s3 }
    }

    /// Writes `bytes` at `location`; a file is written whole or not at all (0600).
    ///
    /// # Errors
    /// [`Error`].
    pub async fn put(&self, location: &Location, bytes: Vec<u8>) -> Result<(), Error> {
        match location {
            Location::File(path) => {
                let path = path.clone();
                let shown = location.to_string();
                tokio::task::spawn_blocking(move || write_file(&path, &bytes))
                    .await
                    .map_err(|e| Error::Io {
                        location: shown.clone(),
                        source: std::io::Error::other(e.to_string()),
                    })?
                    .map_err(|source| Error::Io {
                        location: shown,
                        source,
                    })
            }
            Location::S3 { bucket, key } => self
                .s3_call("put", bucket, key, "PUT", &[], bytes)
                .await
                .map(|_| ()),
        }
    }

    /// The bytes at `location`.
    ///
    /// # Errors
    /// [`Error::NotFound`], or another [`Error`].
    pub async fn get(&self, location: &Location) -> Result<Vec<u8>, Error> {
        match location {
            Location::File(path) => tokio::fs::read(path).await.map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    Error::NotFound {
                        location: location.to_string(),
                    }
                } else {
                    Error::Io {
                        location: location.to_string(),
                        source,
                    }
                }
            }),
            Location::S3 { bucket, key } => {
                self.s3_call("get", bucket, key, "GET", &[], Vec::new())
                    .await
            }
        }
    }

    /// Removes the object at `location`; one already gone is not an error.
    ///
    /// # Errors
    /// [`Error`].
    pub async fn delete(&self, location: &Location) -> Result<(), Error> {
        match location {
            Location::File(path) => match tokio::fs::remove_file(path).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(Error::Io {
                    location: location.to_string(),
                    source,
                }),
            },
            Location::S3 { bucket, key } => {
                match self
                    .s3_call("delete", bucket, key, "DELETE", &[], Vec::new())
                    .await
                {
                    Ok(_) | Err(Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// The objects directly under `prefix` taken as a directory (S3: keys starting with
    /// `<key>/`, not further down), sorted by name.
    ///
    /// # Errors
    /// [`Error`]; a directory that does not exist holds nothing.
    pub async fn list(&self, prefix: &Location) -> Result<Vec<Object>, Error> {
        let mut out = match prefix {
            Location::File(dir) => list_dir(dir).map_err(|source| Error::Io {
                location: prefix.to_string(),
                source,
            })?,
            Location::S3 { bucket, key } => {
                let mut key_prefix = key.clone();
                if !key_prefix.is_empty() && !key_prefix.ends_with('/') {
                    key_prefix.push('/');
                }
                let mut out = Vec::new();
                let mut token: Option<String> = None;
                loop {
                    let mut query = vec![
                        ("list-type".to_string(), "2".to_string()),
                        ("prefix".to_string(), key_prefix.clone()),
                        ("delimiter".to_string(), "/".to_string()),
                    ];
                    if let Some(t) = &token {
                        query.push(("continuation-token".to_string(), t.clone()));
                    }
                    let body = self
                        .s3_call("list", bucket, "", "GET", &query, Vec::new())
                        .await?;
                    let page = xml::parse_list(&String::from_utf8_lossy(&body));
                    for (key, size) in page.objects {
                        out.push(Object {
                            location: Location::S3 {
                                bucket: bucket.clone(),
                                key,
                            },
                            size,
                        });
                    }
                    match page.next {
                        Some(t) if page.truncated => token = Some(t),
                        _ => break,
                    }
                }
                out
            }
        };
        out.sort_by(|a, b| a.location.name().cmp(b.location.name()));
        Ok(out)
    }

    /// Creates bucket `bucket` (S3 only); one that is already there and ours is fine.
    ///
    /// # Errors
    /// [`Error`].
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), Error> {
        match self
            .s3_call("create bucket", bucket, "", "PUT", &[], Vec::new())
            .await
        {
            Ok(_) => Ok(()),
            Err(Error::Status { code, .. }) if code == "BucketAlreadyOwnedByYou" => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn s3_call(
        &self,
        operation: &'static str,
        bucket: &str,
        key: &str,
        method: &str,
        query: &[(String, String)],
        body: Vec<u8>,
    ) -> Result<Vec<u8>, Error> {
        let location = format!("s3://{bucket}/{key}");
        let credentials = self
            .s3
            .credentials
            .as_ref()
            .ok_or_else(|| Error::Settings {
                location: location.clone(),
                reason: "no credentials".into(),
            })?;
        let (base, host, path) = match &self.s3.endpoint {
            Some(endpoint) => {
                let base = endpoint.trim_end_matches('/').to_string();
                let host = base
                    .split_once("://")
                    .map(|(_, h)| h)
                    .unwrap_or(&base)
                    .to_string();
                let path = if key.is_empty() {
                    format!("/{}", sigv4::uri_encode(bucket, false))
                } else {
                    format!(
                        "/{}/{}",
                        sigv4::uri_encode(bucket, false),
                        sigv4::uri_encode(key, true)
                    )
                };
                (base, host, path)
            }
            None => {
                let host = format!("{bucket}.s3.{}.amazonaws.com", self.s3.region);
                (
                    format!("https://{host}"),
                    host,
                    format!("/{}", sigv4::uri_encode(key, true)),
                )
            }
        };
        let payload_sha256 = sigv4::sha256_hex(&body);
        let headers = sigv4::sign(
            &sigv4::Request {
                method,
                path: &path,
                query,
                headers: &[("host".to_string(), host)],
                payload_sha256: &payload_sha256,
            },
            credentials,
            &self.s3.region,
            OffsetDateTime::now_utc(),
        );
        let query_string = sigv4::canonical_query(query);
        let target = if query_string.is_empty() {
            path
        } else {
            format!("{path}?{query_string}")
        };
        let response = transport::send(
            &base,
            method,
            &target,
            &headers,
            body,
            self.s3.ca_bundle.as_deref(),
            self.s3.timeout,
        )
        .await
        .map_err(|reason| Error::Transport {
            location: location.clone(),
            operation,
            reason,
        })?;
        if (200..300).contains(&response.0) {
            return Ok(response.1);
        }
        let text = String::from_utf8_lossy(&response.1);
        let (code, message) = xml::parse_error(&text);
        if response.0 == 404 && (code == "NoSuchKey" || code.is_empty()) {
            return Err(Error::NotFound { location });
        }
        Err(Error::Status {
            location,
            operation,
            status: response.0,
            code,
            message,
        })
    }
}

/// Writes `bytes` to `path` through a temporary file beside it (0600 from its creation),
/// renamed over it once complete.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("snapshot");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn list_dir(dir: &Path) -> std::io::Result<Vec<Object>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let meta = entry.metadata()?;
        let name = entry.file_name();
        let hidden = name.to_str().is_none_or(|n| n.starts_with('.'));
        if meta.is_file() && !hidden {
            out.push(Object {
                location: Location::File(entry.path()),
                size: meta.len(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
