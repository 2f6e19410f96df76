#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use time::macros::datetime;

use super::*;
use crate::testutil::{basic, cluster, hypervisor, world};

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

/// An etcd snapshot as etcd streams one: a database page with bbolt's magic, a body, and the
/// SHA-256 of both.
fn etcd_snapshot(fill: u8) -> Vec<u8> {
    let mut db = vec![fill; 8192];
    db[16..20].copy_from_slice(&BOLT_MAGIC.to_le_bytes());
    let sum = Sha256::digest(&db);
    db.extend_from_slice(&sum);
    db
}

fn snapshot_of(w: &World, name: &str) -> Snapshot {
    let key = ObjectKey::new("default", name);
    Snapshot::new(
        &key,
        &w.clusters[&key],
        etcd_snapshot(7),
        1234,
        "3.4.23",
        &format!("{name}-control-plane-0"),
        NOW,
    )
    .unwrap()
}

/// A file holding `etcd` as it is, sound or not (the writer would refuse an unsound one).
fn file_with(header: &SnapshotHeader, etcd: &[u8]) -> Vec<u8> {
    let (_, mut out) = SnapshotWriter::new(header);
    out.extend_from_slice(etcd);
    out.extend_from_slice(&Sha256::digest(etcd));
    out.extend_from_slice(&(etcd.len() as u64).to_be_bytes());
    out.extend_from_slice(b"oisnap2\n");
    out
}

/// A file of the first version: size and checksum in the header, no footer.
fn v1_file(s: &Snapshot) -> Vec<u8> {
    let mut header = serde_json::to_value(&s.header).unwrap();
    header["size"] = serde_json::json!(s.header.size);
    header["sha256"] = serde_json::json!(s.header.sha256);
    let mut out = MAGIC_V1.to_vec();
    out.extend_from_slice(&serde_json::to_vec(&header).unwrap());
    out.push(b'\n');
    out.extend_from_slice(&s.etcd);
    out
}

fn refused(bytes: &[u8]) -> SnapshotError {
    Snapshot::decode(bytes, "snap.oisnap").unwrap_err()
}

#[test]
fn a_snapshot_reads_back_as_written() {
    let w = world(basic(), vec![cluster("c", 3, false)]);
    let s = snapshot_of(&w, "c");
    let bytes = s.encode();
    assert!(bytes.starts_with(MAGIC));
    let back = Snapshot::decode(&bytes, "snap.oisnap").unwrap();
    assert_eq!(back, s);
    assert_eq!(back.header.size, 8192 + 32);
    assert_eq!(back.header.revision, 1234);
    assert_eq!(back.cluster_key(), ObjectKey::new("default", "c"));
    let c = back.cluster("snap.oisnap").unwrap();
    assert_eq!(
        c.spec.api_server.ca,
        w.clusters[&back.cluster_key()].spec.api_server.ca
    );
}

#[test]
fn a_snapshot_written_as_etcd_streams_it_is_the_one_encoded_and_an_unsound_one_is_not_finished() {
    let w = world(basic(), vec![cluster("c", 3, false)]);
    let s = snapshot_of(&w, "c");
    let (mut writer, mut out) = SnapshotWriter::new(&s.header);
    // Pieces of every size, the boundary of etcd's checksum inside one of them.
    let mut at = 0;
    for size in [1usize, 7, 19, 33, 4000, 4100, 31, 2].iter().cycle() {
        if at == s.etcd.len() {
            break;
        }
        let piece = &s.etcd[at..(at + size).min(s.etcd.len())];
        writer.update(piece);
        out.extend_from_slice(piece);
        at += piece.len();
    }
    assert_eq!(writer.size(), 8192 + 32);
    let (footer, size, sha256) = writer.finish().unwrap();
    out.extend_from_slice(&footer);
    assert_eq!(
        (size, sha256.as_str()),
        (8192 + 32, s.header.sha256.as_str())
    );
    assert_eq!(out, s.encode());

    // etcd's checksum not matching, not bbolt, too short: no footer.
    let mut bad = etcd_snapshot(7);
    bad[100] ^= 1;
    let (mut writer, _) = SnapshotWriter::new(&s.header);
    writer.update(&bad);
    assert!(writer.finish().unwrap_err().contains("etcd's own checksum"));
    let (mut writer, _) = SnapshotWriter::new(&s.header);
    writer.update(&[0; 5000]);
    assert!(
        writer
            .finish()
            .unwrap_err()
            .contains("not an etcd (bbolt) database")
    );
    let (writer, _) = SnapshotWriter::new(&s.header);
    assert!(writer.finish().unwrap_err().contains("too few"));
}

#[test]
fn a_snapshot_of_the_first_version_still_reads() {
    let w = world(basic(), vec![cluster("c", 3, false)]);
    let s = snapshot_of(&w, "c");
    let back = Snapshot::decode(&v1_file(&s), "old.oisnap").unwrap();
    assert_eq!(back, s);
}

#[test]
fn a_truncated_corrupt_or_bare_snapshot_is_refused_saying_why() {
    let w = world(basic(), vec![cluster("c", 1, false)]);
    let bytes = snapshot_of(&w, "c").encode();

    let e = refused(&bytes[..bytes.len() - 100]);
    assert_eq!(
        e.to_string(),
        "snap.oisnap is truncated: it does not end with a snapshot's footer (a copy or upload cut short?)"
    );
    // Cut where its footer's mark happens to be whole: the footer's size disagrees.
    let mut cut = bytes[..bytes.len() - 148].to_vec();
    cut.extend_from_slice(&bytes[bytes.len() - 48..]);
    let e = refused(&cut);
    assert_eq!(
        e.to_string(),
        "snap.oisnap is truncated: it says it holds 8224 bytes of etcd snapshot, it holds 8124"
    );
    // A file of the first version, cut short.
    let v1 = v1_file(&snapshot_of(&w, "c"));
    let e = refused(&v1[..v1.len() - 100]);
    assert_eq!(
        e.to_string(),
        "snap.oisnap is truncated: it says it holds 8224 bytes of etcd snapshot, it holds 8124"
    );
    // A header cut short.
    let e = refused(&bytes[..MAGIC.len() + 10]);
    assert!(
        matches!(e, SnapshotError::Header { .. }) && e.to_string().contains("truncated?"),
        "{e}"
    );

    // A flipped byte in the database: our checksum.
    let mut flipped = bytes.clone();
    let at = flipped.len() - 500;
    flipped[at] ^= 0xff;
    let e = refused(&flipped);
    assert!(
        matches!(e, SnapshotError::Corrupt { .. }) && e.to_string().contains("its SHA-256 is"),
        "{e}"
    );

    // A header that agrees with a body etcd's own checksum does not.
    let mut s = snapshot_of(&w, "c");
    let mut bad = etcd_snapshot(7);
    bad[100] = 1;
    s.header.sha256 = sha256_hex(&bad);
    let e = refused(&file_with(&s.header, &bad));
    assert_eq!(
        e.to_string(),
        "snap.oisnap is corrupt: etcd's own checksum (the SHA-256 after the database) does not match"
    );

    // Not an etcd database at all.
    let mut s = snapshot_of(&w, "c");
    let mut other = vec![0u8; 8192 + 32];
    let sum = Sha256::digest(&other[..8192]);
    other[8192..].copy_from_slice(&sum);
    s.header.sha256 = sha256_hex(&other);
    assert!(
        refused(&file_with(&s.header, &other))
            .to_string()
            .contains("it is not an etcd (bbolt) database")
    );

    // etcdctl's own snapshot, and other files.
    let e = refused(&etcd_snapshot(1));
    assert!(
        e.to_string().starts_with(
            "snap.oisnap is not a oneinfra snapshot (it does not start with \"oneinfra-etcd-snapshot/v2\"); it looks like a bare etcd snapshot"
        ),
        "{e}"
    );
    assert_eq!(
        refused(b"").to_string(),
        "snap.oisnap is not a oneinfra snapshot (it does not start with \"oneinfra-etcd-snapshot/v2\"); it is empty"
    );
    assert!(matches!(
        refused(b"apiVersion: v1\n"),
        SnapshotError::NotASnapshot { .. }
    ));
    // A snapshot can only be made of an etcd snapshot that passes.
    let key = ObjectKey::new("default", "c");
    assert!(Snapshot::new(&key, &w.clusters[&key], vec![0; 10], 1, "3.4", "m", NOW).is_err());
}

#[test]
fn a_snapshot_restores_its_own_cluster_only() {
    let mut w = world(
        basic(),
        vec![cluster("c", 3, false), cluster("d", 1, false)],
    );
    let s = snapshot_of(&w, "c");
    let c = ObjectKey::new("default", "c");
    let d = ObjectKey::new("default", "d");
    assert_eq!(target(&mut w, &s, None, &[], "f", false).unwrap(), c);
    assert_eq!(target(&mut w, &s, Some(&c), &[], "f", false).unwrap(), c);
    assert_eq!(
        target(&mut w, &s, Some(&d), &[], "f", false)
            .unwrap_err()
            .to_string(),
        "f is a snapshot of cluster default/c, not of default/d"
    );
    // Replicas that exist stay where they are.
    assert!(matches!(
        target(&mut w, &s, None, &["private-1".into()], "f", false).unwrap_err(),
        SnapshotError::Hypervisor { .. }
    ));
    w.clusters.get_mut(&c).unwrap().metadata.deletion_timestamp = Some(NOW);
    assert_eq!(
        target(&mut w, &s, None, &[], "f", false)
            .unwrap_err()
            .to_string(),
        "cluster default/c is being deleted: let a reconcile finish deleting it, then restore"
    );
}

#[test]
fn a_snapshot_of_a_same_named_cluster_from_another_world_is_refused_unless_asked() {
    // Each with a PKI of its own (the tests' shared one taken away).
    let fresh = || {
        let mut c = cluster("c", 1, false);
        c.spec = oi_api::ClusterSpec {
            control_plane_replicas: Some(1),
            ..oi_api::ClusterSpec::default()
        };
        crate::prepare(world(basic(), vec![c]), NOW).world
    };
    let staging = fresh();
    let mut production = fresh();
    let s = snapshot_of(&staging, "c");
    let e = target(&mut production, &s, None, &[], "staging.oisnap", false).unwrap_err();
    assert_eq!(
        e,
        SnapshotError::OtherCluster {
            source_name: "staging.oisnap".into(),
            target: "default/c".into()
        }
    );
    assert!(
        e.to_string().starts_with(
            "staging.oisnap holds the data of another cluster named default/c: none of its CAs \
             is one of default/c's"
        ),
        "{e}"
    );
    // Its own snapshot passes; another's only when asked.
    let own = snapshot_of(&production, "c");
    let key = ObjectKey::new("default", "c");
    assert_eq!(
        target(&mut production, &own, None, &[], "f", false).unwrap(),
        key
    );
    assert_eq!(
        target(&mut production, &s, None, &[], "f", true).unwrap(),
        key
    );
}

#[test]
fn a_deleted_cluster_comes_back_from_its_snapshot_where_asked() {
    let before = world(basic(), vec![cluster("c", 2, false)]);
    let s = snapshot_of(&before, "c");
    let mut w = world(
        vec![
            hypervisor("private-1", false, "10.0.0.1", None, (30000, 30099)),
            hypervisor("private-9", false, "10.0.0.9", None, (30000, 30099)),
            hypervisor("private-8", false, "10.0.0.8", None, (30000, 30099)),
            hypervisor("public-1", true, "192.0.2.1", None, (40000, 40099)),
        ],
        vec![],
    );
    for (h, why) in [
        ("public-1", "--hypervisor public-1: is public"),
        ("nope", "--hypervisor nope: not in the manifests"),
    ] {
        let e = target(&mut w, &s, None, &[h.into()], "f", false).unwrap_err();
        assert!(e.to_string().starts_with(why), "{e}");
    }
    let three: Vec<String> = ["private-9", "private-8", "private-1"]
        .map(String::from)
        .to_vec();
    assert!(
        target(&mut w, &s, None, &three, "f", false)
            .unwrap_err()
            .to_string()
            .contains("3 hypervisors for 2 control plane replicas")
    );
    let key = target(&mut w, &s, None, &three[..2], "f", false).unwrap();
    assert_eq!(
        w.clusters[&key].spec.api_server.ca, before.clusters[&key].spec.api_server.ca,
        "the same CAs"
    );
    let plan = plan_restore(w, &key, &s, NOW, &PlanOptions::default());
    let ClusterPlan::Converge(c) = &plan.clusters[&key] else {
        panic!("{:?}", plan.clusters[&key]);
    };
    let restore = c.restore.as_ref().unwrap();
    let placed: Vec<(&str, &str)> = restore
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.hypervisor.as_str()))
        .collect();
    assert_eq!(
        placed,
        [
            ("c-control-plane-0", "private-9"),
            ("c-control-plane-1", "private-8")
        ]
    );
    assert_eq!(restore.etcd, s.etcd);
}

#[test]
fn a_restore_makes_every_replica_a_founder_of_one_new_etcd_cluster() {
    let w = crate::prepare(world(basic(), vec![cluster("c", 3, false)]), NOW).world;
    // Replicas that joined one by one, as a scaled-up cluster's did.
    let mut w = w;
    for c in w.components.values_mut() {
        if let Some(m) = c.status.etcd_member.as_mut() {
            m.initial_cluster_state = EtcdInitialClusterState::Existing;
        }
    }
    let s = snapshot_of(&w, "c");
    let key = ObjectKey::new("default", "c");
    let options = PlanOptions {
        render: crate::render::RenderOptions {
            image_repository: Some("localhost/oneinfra".into()),
        },
        ..PlanOptions::default()
    };
    let plan = plan_restore(w, &key, &s, NOW, &options);
    let ClusterPlan::Converge(c) = &plan.clusters[&key] else {
        panic!("not converged");
    };
    assert_eq!(c.etcd.founders.len(), 3, "every replica founds");
    let restore = c.restore.as_ref().unwrap();
    let names: Vec<&str> = restore.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "c-control-plane-0",
            "c-control-plane-1",
            "c-control-plane-2"
        ]
    );
    let initial = &restore.members[0].initial_cluster;
    assert_eq!(initial.matches("=https://").count(), 3, "{initial}");
    for m in &restore.members {
        assert_eq!(&m.initial_cluster, initial);
        assert!(initial.contains(&format!("{}={}", m.name, m.peer_url)));
        let component = &plan.world.components[&ObjectKey::new("default", m.component.clone())];
        let bootstrap = component.status.etcd_member.as_ref().unwrap();
        assert_eq!(
            bootstrap.initial_cluster_state,
            EtcdInitialClusterState::New
        );
        assert_eq!(bootstrap.initial_cluster.len(), 3);
        // The etcd pod is rendered with what it is restored as.
        let rendered = c.component(&m.component).unwrap().etcd_pod().unwrap();
        let args = &rendered.containers[0].args;
        assert!(
            args.contains(&format!("--initial-cluster={initial}")),
            "{args:?}"
        );
        assert!(args.contains(&"--initial-cluster-state=new".to_string()));
        assert!(
            args.contains(&format!("--data-dir={}", m.etcd_dir())),
            "{args:?}"
        );
    }
    assert!(
        restore.etcd_image.starts_with("localhost/oneinfra/etcd:"),
        "{}",
        restore.etcd_image
    );
    assert!(
        restore.toolbox_image.starts_with("localhost/oneinfra/"),
        "{}",
        restore.toolbox_image
    );
    assert!(
        !format!("{restore:?}").contains("BEGIN"),
        "no key material in Debug"
    );
}

#[test]
fn retention_counts_and_removes_only_the_clusters_own_snapshots() {
    let key = ObjectKey::new("default", "demo");
    let at = datetime!(2026-11-25 21:03:04 UTC);
    let name = snapshot_name(&key, at);
    assert_eq!(name, "default-demo-20261125T210304Z.oisnap");
    assert!(is_snapshot_of(&key, &name));
    for other in [
        "default-demo-2-20261125T210304Z.oisnap",
        "team-demo-20261125T210304Z.oisnap",
        "default-demo-20261125T210304Z.oisnap.tmp",
        "default-demo-latest.oisnap",
        "notes.txt",
    ] {
        assert!(!is_snapshot_of(&key, other), "{other}");
    }
    let names = [
        "default-demo-20261125T000000Z.oisnap",
        "default-demo-2-20200101T000000Z.oisnap",
        "default-demo-20261123T000000Z.oisnap",
        "notes.txt",
        "default-demo-20261124T000000Z.oisnap",
    ];
    assert_eq!(
        beyond_retention(&key, &names, 2),
        ["default-demo-20261123T000000Z.oisnap"]
    );
    assert_eq!(beyond_retention(&key, &names, 5), Vec::<&str>::new());
}
