#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::os::unix::fs::PermissionsExt as _;

use super::*;

#[test]
fn locations_parse_and_join() {
    assert_eq!(
        Location::parse("s3://snaps/team-a/demo").unwrap(),
        Location::S3 {
            bucket: "snaps".into(),
            key: "team-a/demo".into()
        }
    );
    assert_eq!(
        Location::parse("s3://snaps").unwrap().join("a.oisnap"),
        Location::S3 {
            bucket: "snaps".into(),
            key: "a.oisnap".into()
        }
    );
    assert_eq!(
        Location::parse("s3://snaps/p/")
            .unwrap()
            .join("a")
            .to_string(),
        "s3://snaps/p/a"
    );
    assert_eq!(
        Location::parse("s3://snaps/p")
            .unwrap()
            .join("a")
            .to_string(),
        "s3://snaps/p/a"
    );
    assert_eq!(
        Location::parse("file:///var/backups/x").unwrap(),
        Location::File("/var/backups/x".into())
    );
    assert_eq!(
        Location::parse("./x.oisnap").unwrap(),
        Location::File("./x.oisnap".into())
    );
    assert_eq!(Location::parse("s3://b/p/name").unwrap().name(), "name");
    for (bad, why) in [
        ("s3:///key", "no bucket"),
        ("s3://Bad_Bucket/k", "not a valid bucket name"),
        ("file://relative", "absolute path"),
        ("gs://b/k", "unknown scheme"),
        ("", "empty"),
    ] {
        let e = Location::parse(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn settings_come_from_the_aws_variables() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_string())
        }
    };
    let c = S3Config::from_vars(vars(&[
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
        ("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9001"),
        ("AWS_DEFAULT_REGION", "eu-west-1"),
        ("AWS_ACCESS_KEY_ID", "id"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
    ]));
    assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:9001"));
    assert_eq!(c.region, "eu-west-1");
    assert_eq!(c.credentials.unwrap().access_key_id, "id");
    let c = S3Config::from_vars(vars(&[("AWS_ACCESS_KEY_ID", "id")]));
    assert_eq!(c.credentials, None, "a key without its secret is no key");
    assert_eq!(c.region, "us-east-1");
}

#[tokio::test]
async fn a_directory_store_writes_whole_private_files_and_lists_them_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::default();
    let base = Location::File(dir.path().join("snaps"));
    assert_eq!(
        store.list(&base).await.unwrap(),
        [],
        "nothing yet, no error"
    );
    for name in ["b", "a", "c"] {
        store
            .put(&base.join(name), name.repeat(3).into_bytes())
            .await
            .unwrap();
    }
    let listed = store.list(&base).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|o| o.location.name()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(listed.iter().all(|o| o.size == 3));
    let mode = std::fs::metadata(dir.path().join("snaps/a"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(store.get(&base.join("b")).await.unwrap(), b"bbb");
    store.delete(&base.join("b")).await.unwrap();
    store.delete(&base.join("b")).await.unwrap();
    assert!(matches!(
        store.get(&base.join("b")).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(store.list(&base).await.unwrap().len(), 2);
}

#[tokio::test]
async fn s3_without_credentials_says_which_settings_are_missing() {
    let store = Store::default();
    let e = store
        .get(&Location::parse("s3://b/k").unwrap())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("s3://b/k: the S3 settings are incomplete: no credentials"),
        "{e}"
    );
}
