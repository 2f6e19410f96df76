//! OCI image layout: config, manifest, `index.json` and `oci-layout`, packed in one tar that
//! `ctr images import` reads. The JSON is serialized from structs (fixed key order), so equal
//! inputs give equal digests whatever serde_json features the workspace enables.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{Error, Result, io_err};

pub const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// The annotation containerd's importer takes the image name from.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// The `PATH` of every image (the usual Docker default).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What runs by default, and with which environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunConfig {
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// `KEY=value` entries after `PATH`.
    pub env: Vec<String>,
}

#[derive(Serialize)]
struct ImageConfig<'a> {
    architecture: &'static str,
    os: &'static str,
    config: ContainerConfig<'a>,
    rootfs: RootFsConfig,
    history: Vec<History>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ContainerConfig<'a> {
    env: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    entrypoint: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cmd: Option<&'a [String]>,
    working_dir: &'static str,
}

#[derive(Serialize)]
struct RootFsConfig {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: Vec<String>,
}

#[derive(Serialize)]
struct History {
    created_by: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: &'static str,
    digest: String,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<&'static str, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform: Option<Platform>,
}

#[derive(Serialize)]
struct Platform {
    architecture: &'static str,
    os: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: &'static str,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    schema_version: u32,
    media_type: &'static str,
    manifests: Vec<Descriptor>,
}

/// `sha256:<hex>` of `data`.
pub fn digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// The blobs and index of one single-layer image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
    pub index: Vec<u8>,
    /// The manifest digest, what containerd reports as the image's digest.
    pub manifest_digest: String,
}

fn to_json<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|source| Error::Json { what, source })
}

/// Builds config, manifest and index for an image named `reference` (fully qualified, with
/// `tag`) whose single layer is `layer_uncompressed`, stored as `layer_gzip`.
///
/// # Errors
/// Only if serialization fails.
pub fn layout(
    reference: &str,
    tag: &str,
    run: &RunConfig,
    layer_uncompressed: &[u8],
    layer_gzip: &[u8],
) -> Result<Layout> {
    let env: Vec<&str> = std::iter::once(DEFAULT_PATH)
        .chain(run.env.iter().map(String::as_str))
        .collect();
    let config = to_json(
        "image config",
        &ImageConfig {
            architecture: "amd64",
            os: "linux",
            config: ContainerConfig {
                env,
                entrypoint: run.entrypoint.as_deref(),
                cmd: run.cmd.as_deref(),
                working_dir: "/",
            },
            rootfs: RootFsConfig {
                kind: "layers",
                diff_ids: vec![digest(layer_uncompressed)],
            },
            history: vec![History {
                created_by: "cargo xtask images (oneinfra-rs offline image set)".into(),
            }],
        },
    )?;
    let manifest = to_json(
        "image manifest",
        &Manifest {
            schema_version: 2,
            media_type: MEDIA_MANIFEST,
            config: Descriptor {
                media_type: MEDIA_CONFIG,
                digest: digest(&config),
                size: config.len() as u64,
                annotations: None,
                platform: None,
            },
            layers: vec![Descriptor {
                media_type: MEDIA_LAYER_GZIP,
                digest: digest(layer_gzip),
                size: layer_gzip.len() as u64,
                annotations: None,
                platform: None,
            }],
        },
    )?;
    let manifest_digest = digest(&manifest);
    let annotations = BTreeMap::from([
        (ANNOTATION_CONTAINERD_NAME, reference.to_string()),
        (ANNOTATION_REF_NAME, tag.to_string()),
    ]);
    let index = to_json(
        "image index",
        &Index {
            schema_version: 2,
            media_type: MEDIA_INDEX,
            manifests: vec![Descriptor {
                media_type: MEDIA_MANIFEST,
                digest: manifest_digest.clone(),
                size: manifest.len() as u64,
                annotations: Some(annotations),
                platform: Some(Platform {
                    architecture: "amd64",
                    os: "linux",
                }),
            }],
        },
    )?;
    Ok(Layout {
        config,
        manifest,
        index,
        manifest_digest,
    })
}

/// Writes the image-layout tar: `oci-layout`, `index.json`, `blobs/sha256/*`, sorted, with
/// mtime 0 and uid/gid 0.
///
/// # Errors
/// When writing to `out` fails.
pub fn write_layout_tar<W: Write>(out: W, layout: &Layout, layer_gzip: &[u8]) -> Result<W> {
    let blob = |data: &[u8]| format!("blobs/sha256/{}", hex::encode(Sha256::digest(data)));
    let mut files: Vec<(String, &[u8])> = vec![
        ("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#),
        ("index.json".into(), &layout.index),
        (blob(&layout.config), &layout.config),
        (blob(&layout.manifest), &layout.manifest),
        (blob(layer_gzip), layer_gzip),
    ];
    files.sort();
    files.dedup_by(|a, b| a.0 == b.0);
    let mut builder = tar::Builder::new(out);
    let mut dirs = vec!["blobs/", "blobs/sha256/"];
    dirs.sort();
    for dir in dirs {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_mtime(0);
        h.set_size(0);
        builder
            .append_data(&mut h, dir, std::io::empty())
            .map_err(io_err("write layout entry", dir))?;
    }
    for (name, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        builder
            .append_data(&mut h, &name, data)
            .map_err(io_err("write layout entry", name.clone()))?;
    }
    builder
        .into_inner()
        .map_err(io_err("finish layout tar", "image"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn sample() -> (Layout, Vec<u8>) {
        let layer = b"pretend layer".to_vec();
        let gz = crate::rootfs::gzip(&layer).unwrap();
        let run = RunConfig {
            entrypoint: Some(vec!["/pause".into()]),
            cmd: None,
            env: vec!["A=b".into()],
        };
        let l = layout(
            "localhost/oneinfra/pause:3.10.1",
            "3.10.1",
            &run,
            &layer,
            &gz,
        )
        .unwrap();
        (l, gz)
    }

    #[test]
    fn documents_link_by_digest_and_name_the_image() {
        let (l, gz) = sample();
        let index: serde_json::Value = serde_json::from_slice(&l.index).unwrap();
        let m = &index["manifests"][0];
        assert_eq!(m["digest"], digest(&l.manifest).as_str());
        assert_eq!(
            m["annotations"][ANNOTATION_CONTAINERD_NAME],
            "localhost/oneinfra/pause:3.10.1"
        );
        assert_eq!(m["annotations"][ANNOTATION_REF_NAME], "3.10.1");
        let manifest: serde_json::Value = serde_json::from_slice(&l.manifest).unwrap();
        assert_eq!(manifest["config"]["digest"], digest(&l.config).as_str());
        assert_eq!(manifest["layers"][0]["digest"], digest(&gz).as_str());
        assert_eq!(manifest["layers"][0]["size"], gz.len() as u64);
        let config: serde_json::Value = serde_json::from_slice(&l.config).unwrap();
        assert_eq!(config["architecture"], "amd64");
        assert_eq!(config["config"]["Env"][0], DEFAULT_PATH);
        assert_eq!(config["config"]["Env"][1], "A=b");
        assert_eq!(config["config"]["Entrypoint"][0], "/pause");
        assert!(config["config"].get("Cmd").is_none());
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            digest(b"pretend layer").as_str()
        );
    }

    #[test]
    fn layout_tar_is_deterministic_and_complete() {
        let (l, gz) = sample();
        let a = write_layout_tar(Vec::new(), &l, &gz).unwrap();
        let b = write_layout_tar(Vec::new(), &sample().0, &gz).unwrap();
        assert_eq!(a, b);
        let mut names = Vec::new();
        for e in tar::Archive::new(a.as_slice()).entries().unwrap() {
            names.push(e.unwrap().path().unwrap().to_string_lossy().into_owned());
        }
        assert!(names.contains(&"oci-layout".to_string()));
        assert!(names.contains(&"index.json".to_string()));
        let blobs = names
            .iter()
            .filter(|n| n.starts_with("blobs/sha256/") && n.len() > 13);
        assert_eq!(blobs.count(), 3);
    }
}
