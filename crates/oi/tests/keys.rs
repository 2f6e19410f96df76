//! `oi keys export|inline`: a world's private keys moved into Secrets and back, and every
//! command reading such a world (the Secrets in any input) and writing it back as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;

#[path = "support/oi.rs"]
mod support;
use support::*;

/// The documents of `world` (separated by `---` lines; PEM lines end in dashes too).
fn documents(world: &str) -> Vec<String> {
    world
        .split("\n---\n")
        .map(|d| format!("{}\n", d.trim_end_matches('\n')))
        .collect()
}

fn is_secret(doc: &str) -> bool {
    doc.contains("\nkind: Secret\n")
}

/// The documents of `world` that are Secrets, and the others.
fn split(world: &str) -> (String, String) {
    let (secrets, others): (Vec<String>, Vec<String>) =
        documents(world).into_iter().partition(|d| is_secret(d));
    (secrets.join("---\n"), others.join("---\n"))
}

#[test]
fn keys_move_into_secrets_and_back_and_commands_keep_them_there() {
    let world = injected("c1", 3);
    assert!(world.contains("privateKey:"));
    let exported = ok(&["keys", "export"], world.as_bytes());
    let (secrets, objects) = split(&exported);
    assert!(!objects.contains("privateKey:"), "{objects}");
    assert!(!objects.contains("PRIVATE KEY"), "{objects}");
    assert!(objects.contains("privateKeyRef:"));
    for name in ["c1-ca", "c1-etcd", "c1-sa", "c1-join-key"] {
        assert!(
            secrets.contains(&format!("  name: {name}\n")),
            "{name}: {secrets}"
        );
    }
    assert!(secrets.contains("type: kubernetes.io/tls"));
    // Back inline: the same bytes.
    assert_eq!(ok(&["keys", "inline"], exported.as_bytes()), world);

    // The Secrets in another input: the keys are the same ones (the API server CA is the
    // one the world had), and a command writing the world keeps them in Secrets.
    let dir = tempfile::tempdir().unwrap();
    let (objects_file, secrets_file) = (
        dir.path().join("objects.yaml"),
        dir.path().join("secrets.yaml"),
    );
    std::fs::write(&objects_file, &objects).unwrap();
    std::fs::write(&secrets_file, &secrets).unwrap();
    let files = ["-f", path_str(&objects_file), "-f", path_str(&secrets_file)];
    let ca = |args: &[&str], stdin: &str| {
        ok(
            &[&["cluster", "apiserver-ca"], args].concat(),
            stdin.as_bytes(),
        )
    };
    assert_eq!(ca(&files, ""), ca(&[], &world));
    let kubeconfig = ok(
        &[&["cluster", "admin-kubeconfig"][..], &files].concat(),
        b"",
    );
    assert!(kubeconfig.contains("client-key-data:"));
    let deleted = ok(
        &[&["cluster", "delete", "--name", "c1"][..], &files].concat(),
        b"",
    );
    let (secrets_after, objects_after) = split(&deleted);
    assert!(!objects_after.contains("privateKey:"), "{objects_after}");
    assert!(objects_after.contains("deletionTimestamp:"));
    assert_eq!(secrets_after, secrets);
}

#[test]
fn a_reference_without_its_secret_fails_naming_the_field() {
    let exported = ok(&["keys", "export"], injected("c1", 1).as_bytes());
    let without: Vec<String> = documents(&exported)
        .into_iter()
        .filter(|d| !(is_secret(d) && d.contains("\n  name: c1-etcd\n")))
        .collect();
    assert_eq!(without.len() + 1, documents(&exported).len());
    let out = oi(&["get", "clusters"], without.join("---\n").as_bytes());
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("spec.etcdServer.ca.privateKeyRef")
            && e.contains("Secret default/c1-etcd is not among the inputs"),
        "{e}"
    );
}
