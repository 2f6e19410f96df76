//! The S3 client against a real S3-compatible server (moto, from the Python package
//! registry, installed by `scripts/setup.sh`), on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use oi_s3::{Error, Location, S3Config, Store};
use oi_testsupport::S3Server;

fn store(server: &S3Server) -> Store {
    let env = server.env();
    Store::new(S3Config::from_vars(|name| {
        env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
    }))
}

#[tokio::test]
async fn objects_are_put_listed_read_and_deleted_on_a_real_s3_server() {
    let Some(server) =
        S3Server::start("objects_are_put_listed_read_and_deleted_on_a_real_s3_server")
    else {
        return;
    };
    let store = store(&server);
    server.create_bucket("snaps");
    let prefix = Location::parse("s3://snaps/default/demo").unwrap();
    assert_eq!(store.list(&prefix).await.unwrap(), []);
    // A name that needs encoding, and a payload of several megabytes.
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i % 253) as u8).collect();
    store
        .put(&prefix.join("b c+d.oisnap"), big.clone())
        .await
        .unwrap();
    store
        .put(&prefix.join("a.oisnap"), b"one".to_vec())
        .await
        .unwrap();
    // Deeper keys and other prefixes are not listed.
    store
        .put(&prefix.join("deeper/x"), b"x".to_vec())
        .await
        .unwrap();
    store
        .put(
            &Location::parse("s3://snaps/default/demo2/y").unwrap(),
            b"y".to_vec(),
        )
        .await
        .unwrap();
    let listed = store.list(&prefix).await.unwrap();
    let names: Vec<(&str, u64)> = listed.iter().map(|o| (o.location.name(), o.size)).collect();
    assert_eq!(names, [("a.oisnap", 3), ("b c+d.oisnap", 5_000_000)]);
    assert_eq!(store.get(&prefix.join("b c+d.oisnap")).await.unwrap(), big);
    store.delete(&prefix.join("a.oisnap")).await.unwrap();
    store.delete(&prefix.join("a.oisnap")).await.unwrap();
    assert!(matches!(
        store.get(&prefix.join("a.oisnap")).await,
        Err(Error::NotFound { .. })
    ));
    // A bucket that is not there is named in the error.
    let e = store
        .put(&Location::parse("s3://nobucket/k").unwrap(), b"z".to_vec())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("NoSuchBucket"), "{e}");
    // A wrong secret is refused... (moto accepts any key: the signature is checked by real
    // stores; the documentation examples in sigv4's tests pin it down).
}

/// A store of `server` with bucket `snaps`, sending objects past 5 MiB (S3's smallest part)
/// in parts.
fn parts_of_5_mib(server: &S3Server) -> Store {
    server.create_bucket("snaps");
    let mut config = store(server).config().clone();
    config.part_size = 5 * 1024 * 1024;
    Store::new(config)
}

/// `n` bytes of a pattern, in pieces of `piece`.
fn pieces(n: usize, piece: usize) -> Vec<bytes::Bytes> {
    let all: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    all.chunks(piece)
        .map(bytes::Bytes::copy_from_slice)
        .collect()
}

#[tokio::test]
async fn a_large_object_is_streamed_up_in_parts_and_down_again() {
    let Some(server) = S3Server::start("a_large_object_is_streamed_up_in_parts_and_down_again")
    else {
        return;
    };
    let store = parts_of_5_mib(&server);
    let at = Location::parse("s3://snaps/big.oisnap").unwrap();
    let sent = pieces(12 * 1024 * 1024 + 7, 1024 * 1024);
    let written = store
        .put_stream(
            &at,
            futures::stream::iter(sent.clone().into_iter().map(Ok::<_, std::io::Error>)),
        )
        .await
        .unwrap();
    assert_eq!(written, 12 * 1024 * 1024 + 7);
    // S3 names a multipart object's ETag by its number of parts.
    let head = server.raw("HEAD", "/snaps/big.oisnap");
    let etag = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("etag:")
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no ETag: {head}"));
    assert!(
        etag.trim().trim_matches('"').ends_with("-3"),
        "3 parts: {etag}"
    );
    // Read back as a stream, whole and in order.
    let mut got = Vec::new();
    let mut stream = store.get_stream(&at).await.unwrap();
    while let Some(piece) = futures::StreamExt::next(&mut stream).await {
        got.extend_from_slice(&piece.unwrap());
    }
    assert_eq!(got, sent.concat());
}

#[tokio::test]
async fn a_source_that_fails_midway_stores_nothing_and_leaves_no_parts() {
    let Some(server) =
        S3Server::start("a_source_that_fails_midway_stores_nothing_and_leaves_no_parts")
    else {
        return;
    };
    let store = parts_of_5_mib(&server);
    let at = Location::parse("s3://snaps/broken.oisnap").unwrap();
    // Two parts' worth go up, then the source breaks.
    let mut items: Vec<Result<bytes::Bytes, std::io::Error>> =
        pieces(11 * 1024 * 1024, 1024 * 1024)
            .into_iter()
            .map(Ok)
            .collect();
    items.push(Err(std::io::Error::other("etcd went away")));
    let e = store
        .put_stream(&at, futures::stream::iter(items))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Source { .. }), "{e}");
    assert!(e.to_string().contains("etcd went away"), "{e}");
    assert!(matches!(store.get(&at).await, Err(Error::NotFound { .. })));
    let uploads = server.raw("GET", "/snaps?uploads");
    assert!(
        !uploads.contains("<UploadId>"),
        "the started upload was aborted: {uploads}"
    );
}
