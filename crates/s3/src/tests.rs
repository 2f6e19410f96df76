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

/// Variables from pairs.
fn vars(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    }
}

fn key_of(c: &S3Config) -> (&Credentials, &str) {
    match &c.credentials {
        CredentialSource::Key { credentials, from } => (credentials, from.as_str()),
        other => panic!("no key: {other:?}"),
    }
}

#[test]
fn settings_come_from_the_aws_variables() {
    let c = S3Config::from_vars(vars(vec![
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000".into()),
        ("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9001".into()),
        ("AWS_DEFAULT_REGION", "eu-west-1".into()),
        ("AWS_ACCESS_KEY_ID", "id".into()),
        ("AWS_SECRET_ACCESS_KEY", "secret".into()),
    ]));
    assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:9001"));
    assert_eq!(c.region, "eu-west-1");
    let (key, from) = key_of(&c);
    assert_eq!(
        (key.access_key_id.as_str(), from),
        ("id", "the environment")
    );
    assert!(!format!("{c:?}").contains("secret\""), "{c:?}");
    let c = S3Config::from_vars(vars(vec![
        ("AWS_ACCESS_KEY_ID", "id".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]));
    assert_eq!(
        c.credentials,
        CredentialSource::None,
        "a key without its secret is no key"
    );
    assert_eq!(c.region, "us-east-1");
}

#[test]
fn the_credential_chain_goes_environment_shared_file_then_providers() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".aws")).unwrap();
    std::fs::write(
        home.path().join(".aws/credentials"),
        "# ours\n[default]\naws_access_key_id = from-default\naws_secret_access_key = s1\n\n\
         [backup]\naws_access_key_id=from-backup\naws_secret_access_key=s2\naws_session_token = t2\n",
    )
    .unwrap();
    std::fs::write(
        home.path().join(".aws/config"),
        "[default]\nregion = eu-central-1\n[profile backup]\nregion = ap-south-1\n",
    )
    .unwrap();
    let home_var = || ("HOME", home.path().display().to_string());

    // The environment comes first.
    let c = S3Config::from_vars(vars(vec![
        home_var(),
        ("AWS_ACCESS_KEY_ID", "env".into()),
        ("AWS_SECRET_ACCESS_KEY", "s".into()),
    ]));
    assert_eq!(key_of(&c).0.access_key_id, "env");
    assert_eq!(c.region, "eu-central-1", "the profile's region");

    // Then the shared file's profile, default or named.
    let c = S3Config::from_vars(vars(vec![home_var()]));
    let (key, from) = key_of(&c);
    assert_eq!(key.access_key_id, "from-default");
    assert!(
        from.ends_with(".aws/credentials (profile default)"),
        "{from}"
    );
    let c = S3Config::from_vars(vars(vec![home_var(), ("AWS_PROFILE", "backup".into())]));
    let (key, _) = key_of(&c);
    assert_eq!(key.access_key_id, "from-backup");
    assert_eq!(key.session_token.as_deref(), Some("t2"));
    assert_eq!(c.region, "ap-south-1");
    let c = S3Config::from_vars(vars(vec![
        home_var(),
        ("AWS_PROFILE", "backup".into()),
        ("AWS_REGION", "us-west-2".into()),
    ]));
    assert_eq!(c.region, "us-west-2", "the variable over the file");

    // Then a web identity (a service account's token), passed on to object_store.
    let c = S3Config::from_vars(vars(vec![
        (
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "/var/run/secrets/token".into(),
        ),
        ("AWS_ROLE_ARN", "arn:aws:iam::1:role/snapshots".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]));
    let CredentialSource::Provider { settings } = &c.credentials else {
        panic!("{c:?}");
    };
    assert!(settings.contains(&(
        "aws_web_identity_token_file".to_string(),
        "/var/run/secrets/token".to_string()
    )));
    // Nothing at all: the instance's metadata service, unless disabled.
    let c = S3Config::from_vars(vars(vec![]));
    assert!(matches!(c.credentials, CredentialSource::Provider { .. }));
    let c = S3Config::from_vars(vars(vec![("AWS_EC2_METADATA_DISABLED", "TRUE".into())]));
    assert_eq!(c.credentials, CredentialSource::None);
}

#[test]
fn keys_that_cannot_be_stored_as_written_are_refused() {
    for bad in ["s3://b/a//b", "s3://b/a/../b"] {
        let e = Location::parse(bad).unwrap_err();
        assert!(e.contains("the key cannot be stored"), "{bad}: {e}");
    }
    assert!(Location::parse("s3://b/ok/name with spaces+plus").is_ok());
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
    let store = Store::new(S3Config::from_vars(vars(vec![(
        "AWS_EC2_METADATA_DISABLED",
        "true".into(),
    )])));
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
