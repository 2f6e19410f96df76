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
    store.create_bucket("snaps").await.unwrap();
    store.create_bucket("snaps").await.unwrap();
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
