//! `oi-s3`: where etcd snapshots go. A [`Location`] is an object of an S3-compatible store
//! (`s3://bucket/key`) or a local file (`file:///path`, or a plain path); [`Store`] puts,
//! gets, lists and deletes at either, the same way, streaming.
//!
//! ```text
//! s3://bucket/prefix/name ─► object_store's S3 client (SigV4, retries with backoff,
//!                            multipart uploads past S3Config::part_size, parts aborted on
//!                            failure), path-style at AWS_ENDPOINT_URL or AWS's regional
//!                            endpoint; its requests go over oi-http (connections pooled,
//!                            the system's roots and AWS_CA_BUNDLE loaded once per store)
//! file:///dir/name        ─► written to a temporary file (0600) then renamed; listed by
//!                            directory
//! ```
//!
//! Why object_store: it is the Apache Arrow project's object store client, kept up to date
//! for S3, S3-compatible stores (MinIO, Ceph, moto) and more, with multipart uploads,
//! retries and the credential providers (web identity, container, instance metadata); it
//! lets the HTTP transport and the crypto provider be ours, so the ring-based rustls of the
//! rest of the project serves it (the AWS SDK would bring aws-lc and its C build).
//!
//! The settings and the credential chain are in [`S3Config::from_env`].
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod config;
mod connector;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use object_store::ObjectStore as _;
use object_store::ObjectStoreExt as _;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

pub use config::{CredentialSource, Credentials, S3Config};

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
            if !key.is_empty() {
                object_store::path::Path::parse(key.trim_end_matches('/'))
                    .map_err(|e| format!("{s:?}: the key cannot be stored: {e}"))?;
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
        "{location}: the S3 settings are incomplete: {reason} (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile in ~/.aws/credentials or a web identity; and AWS_ENDPOINT_URL for a store other than AWS)"
    )]
    Settings { location: String, reason: String },
    /// The store refused or could not be reached (after the retries): its words.
    #[error("{location}: {operation}: {reason}")]
    Store {
        location: String,
        operation: &'static str,
        reason: String,
    },
    /// What was to be written failed to come (the snapshot's source): nothing was stored.
    #[error("{location}: {operation}: the data to store failed: {reason}")]
    Source {
        location: String,
        operation: &'static str,
        reason: String,
    },
}

/// Puts, gets, lists and deletes objects at [`Location`]s. Clones share the S3 clients
/// (one per bucket) and their connections.
#[derive(Debug, Clone, Default)]
pub struct Store {
    s3: S3Config,
    clients: Arc<Mutex<Clients>>,
}

#[derive(Debug, Default)]
struct Clients {
    http: Option<oi_http::Client>,
    buckets: HashMap<String, Arc<AmazonS3>>,
}

/// A stream of an object's bytes.
pub type ByteStream = BoxStream<'static, Result<Bytes, Error>>;

/// How much of a file is read at once.
const FILE_CHUNK: usize = 1024 * 1024;

impl Store {
    pub fn new(s3: S3Config) -> Self {
        Store {
            s3,
            clients: Arc::default(),
        }
    }

    /// Its S3 settings.
    pub fn config(&self) -> &S3Config {
        &self.s3
    }

    /// Writes `bytes` at `location`, whole or not at all (a file 0600).
    ///
    /// # Errors
    /// [`Error`].
    pub async fn put(&self, location: &Location, bytes: Vec<u8>) -> Result<(), Error> {
        let once =
            futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(bytes)) });
        self.put_stream(location, once).await.map(|_| ())
    }

    /// Writes what `source` yields at `location` as it comes, never holding it whole: a file
    /// through a temporary file beside it (0600 from its creation) renamed over it once
    /// complete; an S3 object in one PUT up to [`S3Config::part_size`], else in parts of that
    /// size (a failed upload's parts are aborted). Either way the object appears whole or
    /// not at all. The number of bytes written back.
    ///
    /// # Errors
    /// [`Error::Source`] when `source` fails, or another [`Error`].
    pub async fn put_stream<S>(&self, location: &Location, source: S) -> Result<u64, Error>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send,
    {
        let mut source = std::pin::pin!(source);
        let shown = location.to_string();
        let source_failed = |e: std::io::Error| Error::Source {
            location: shown.clone(),
            operation: "put",
            reason: e.to_string(),
        };
        match location {
            Location::File(path) => {
                let io = |source| Error::Io {
                    location: shown.clone(),
                    source,
                };
                let (tmp, mut file) = temporary_beside(path).await.map_err(io)?;
                let written = async {
                    let mut written = 0u64;
                    while let Some(chunk) = source.next().await {
                        let chunk = chunk.map_err(source_failed)?;
                        file.write_all(&chunk).await.map_err(io)?;
                        written += chunk.len() as u64;
                    }
                    file.sync_all().await.map_err(io)?;
                    drop(file);
                    tokio::fs::rename(&tmp, path).await.map_err(io)?;
                    Ok(written)
                }
                .await;
                if written.is_err() {
                    let _ = tokio::fs::remove_file(&tmp).await;
                }
                written
            }
            Location::S3 { bucket, key } => {
                let client = self.bucket(bucket, &shown)?;
                let path = object_path(key, &shown)?;
                let failed = |e: object_store::Error| store_error("put", &shown, e);
                let mut writer = object_store::buffered::BufWriter::with_capacity(
                    client,
                    path,
                    self.s3.part_size,
                );
                let mut written = 0u64;
                let sent = async {
                    while let Some(chunk) = source.next().await {
                        let chunk = chunk.map_err(source_failed)?;
                        written += chunk.len() as u64;
                        writer.put(chunk).await.map_err(failed)?;
                    }
                    Ok(())
                }
                .await;
                if let Err(e) = sent {
                    // The parts already sent are not left behind (to be billed).
                    let _ = writer.abort().await;
                    return Err(e);
                }
                // The last part and the completion (or the one PUT); a multipart upload
                // that fails here is aborted by object_store.
                writer.shutdown().await.map_err(|e| Error::Store {
                    location: shown.clone(),
                    operation: "put",
                    reason: oi_http::error_chain(&e),
                })?;
                Ok(written)
            }
        }
    }

    /// The bytes at `location`, whole.
    ///
    /// # Errors
    /// [`Error::NotFound`], or another [`Error`].
    pub async fn get(&self, location: &Location) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let mut stream = self.get_stream(location).await?;
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    /// The bytes at `location`, as they are read.
    ///
    /// # Errors
    /// [`Error::NotFound`], or another [`Error`]; the stream then yields its own.
    pub async fn get_stream(&self, location: &Location) -> Result<ByteStream, Error> {
        let shown = location.to_string();
        match location {
            Location::File(path) => {
                let file = tokio::fs::File::open(path)
                    .await
                    .map_err(|source| io_error(&shown, source))?;
                let stream = futures::stream::try_unfold(file, move |mut file| {
                    let shown = shown.clone();
                    async move {
                        let mut buf = Vec::with_capacity(FILE_CHUNK);
                        let n = (&mut file)
                            .take(FILE_CHUNK as u64)
                            .read_to_end(&mut buf)
                            .await
                            .map_err(|source| io_error(&shown, source))?;
                        Ok((n > 0).then(|| (Bytes::from(buf), file)))
                    }
                });
                Ok(stream.boxed())
            }
            Location::S3 { bucket, key } => {
                let client = self.bucket(bucket, &shown)?;
                let path = object_path(key, &shown)?;
                let got = client
                    .get(&path)
                    .await
                    .map_err(|e| store_error("get", &shown, e))?;
                Ok(got
                    .into_stream()
                    .map_err(move |e| store_error("get", &shown, e))
                    .boxed())
            }
        }
    }

    /// Removes the object at `location`; one already gone is not an error.
    ///
    /// # Errors
    /// [`Error`].
    pub async fn delete(&self, location: &Location) -> Result<(), Error> {
        let shown = location.to_string();
        match location {
            Location::File(path) => match tokio::fs::remove_file(path).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(Error::Io {
                    location: shown,
                    source,
                }),
            },
            Location::S3 { bucket, key } => {
                let client = self.bucket(bucket, &shown)?;
                match client.delete(&object_path(key, &shown)?).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(store_error("delete", &shown, e)),
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
        let shown = prefix.to_string();
        let mut out = match prefix {
            Location::File(dir) => list_dir(dir).map_err(|source| Error::Io {
                location: shown,
                source,
            })?,
            Location::S3 { bucket, key } => {
                let client = self.bucket(bucket, &shown)?;
                let path = object_path(key.trim_end_matches('/'), &shown)?;
                let listed = client
                    .list_with_delimiter(Some(&path))
                    .await
                    .map_err(|e| store_error("list", &shown, e))?;
                listed
                    .objects
                    .into_iter()
                    .map(|meta| Object {
                        location: Location::S3 {
                            bucket: bucket.clone(),
                            key: meta.location.to_string(),
                        },
                        size: meta.size,
                    })
                    .collect()
            }
        };
        out.sort_by(|a, b| a.location.name().cmp(b.location.name()));
        Ok(out)
    }

    /// The S3 client of `bucket`, made the first time it is asked for.
    fn bucket(&self, bucket: &str, location: &str) -> Result<Arc<AmazonS3>, Error> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.buckets.get(bucket) {
            return Ok(Arc::clone(client));
        }
        let settings = |reason: String| Error::Settings {
            location: location.to_string(),
            reason,
        };
        let http = match &clients.http {
            Some(http) => http.clone(),
            None => {
                let roots = match &self.s3.ca_bundle {
                    Some(path) => {
                        oi_http::Roots::SystemAnd(std::fs::read_to_string(path).map_err(|e| {
                            settings(format!("AWS_CA_BUNDLE {}: {e}", path.display()))
                        })?)
                    }
                    None => oi_http::Roots::System,
                };
                let http = oi_http::Client::new(oi_http::Options {
                    roots,
                    timeout: self.s3.timeout,
                    ..oi_http::Options::default()
                })
                .map_err(|e| settings(format!("AWS_CA_BUNDLE: {e}")))?;
                clients.http = Some(http.clone());
                http
            }
        };
        let retry = object_store::RetryConfig {
            max_retries: self.s3.max_retries,
            ..object_store::RetryConfig::default()
        };
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(&self.s3.region)
            .with_retry(retry)
            .with_http_connector(connector::Connector(http));
        if let Some(endpoint) = &self.s3.endpoint {
            builder = builder
                .with_endpoint(endpoint.trim_end_matches('/'))
                .with_allow_http(endpoint.starts_with("http://"));
        }
        builder = match &self.s3.credentials {
            CredentialSource::Key { credentials, .. } => {
                let mut b = builder
                    .with_access_key_id(&credentials.access_key_id)
                    .with_secret_access_key(&credentials.secret_access_key);
                if let Some(token) = &credentials.session_token {
                    b = b.with_token(token);
                }
                b
            }
            CredentialSource::Provider { settings: passed } => {
                passed.iter().fold(builder, |b, (name, value)| {
                    match name.parse::<AmazonS3ConfigKey>() {
                        Ok(key) => b.with_config(key, value),
                        Err(_) => b,
                    }
                })
            }
            CredentialSource::None => {
                return Err(settings(
                    "no credentials (none in the environment or the shared credentials file, and AWS_EC2_METADATA_DISABLED=true)"
                        .into(),
                ));
            }
        };
        let client = Arc::new(builder.build().map_err(|e| settings(e.to_string()))?);
        clients
            .buckets
            .insert(bucket.to_string(), Arc::clone(&client));
        Ok(client)
    }
}

fn io_error(location: &str, source: std::io::Error) -> Error {
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
}

fn store_error(operation: &'static str, location: &str, e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { .. } => Error::NotFound {
            location: location.to_string(),
        },
        other => Error::Store {
            location: location.to_string(),
            operation,
            reason: oi_http::error_chain(&other),
        },
    }
}

/// The object_store path of an S3 key (checked by [`Location::parse`] already).
fn object_path(key: &str, location: &str) -> Result<object_store::path::Path, Error> {
    object_store::path::Path::parse(key).map_err(|e| Error::Settings {
        location: location.to_string(),
        reason: format!("the key cannot be stored: {e}"),
    })
}

/// A new file beside `path` (its directory made if needed), 0600 from its creation.
async fn temporary_beside(path: &Path) -> std::io::Result<(PathBuf, tokio::fs::File)> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(dir).await?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("snapshot");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .await?;
    Ok((tmp, file))
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
