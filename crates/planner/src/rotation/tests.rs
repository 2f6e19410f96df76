#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use oi_api::{ObjectKey, World};
use time::macros::datetime;

use super::*;
use crate::testutil::{basic, cluster, world};

const NOW: OffsetDateTime = datetime!(2026-11-22 03:00:00 UTC);

fn pems(text: &str) -> usize {
    text.matches("-----BEGIN").count()
}

fn key() -> ObjectKey {
    ObjectKey::new("default", "c")
}

/// The prepared world, and the files of replica 0 by name.
fn files(w: World) -> (World, std::collections::BTreeMap<String, String>) {
    let plan = crate::plan(w, NOW, &crate::PlanOptions::default());
    let crate::ClusterPlan::Converge(c) = &plan.clusters[&key()] else {
        panic!("{:?}", plan.clusters[&key()]);
    };
    let r = c.component("c-control-plane-0").unwrap();
    let files = r
        .rendered
        .files
        .iter()
        .map(|f| {
            (
                f.path.rsplit('/').next().unwrap().to_string(),
                String::from_utf8(f.content.clone()).unwrap(),
            )
        })
        .collect();
    (plan.world, files)
}

fn leaves(w: &World) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in w.components_of(&key()) {
        for (n, cert) in c
            .status
            .server_certificates
            .iter()
            .chain(&c.status.client_certificates)
        {
            out.push((format!("{}/{n}", c.metadata.name), cert.certificate.clone()));
        }
    }
    out
}

#[test]
fn names_select_what_rotates() {
    assert_eq!(Selection::parse("all").unwrap(), Selection::all());
    let s = Selection::parse("apiServer, etcdPeer,serviceAccount").unwrap();
    assert_eq!(s.cas, [CaKind::ApiServer, CaKind::EtcdPeer]);
    assert!(s.service_account);
    let e = Selection::parse("apiserver").unwrap_err();
    assert!(e.starts_with("unknown CA \"apiserver\"; known: all, apiServer, apiServerClient, certificateSigner, kubelet, kubeletClient, etcdServer, etcdClient, etcdPeer, serviceAccount"), "{e}");
    assert!(Selection::parse(" , ").is_err());
    // An unknown name is refused wherever it stands, `all` among others too.
    for bad in ["all,nonsense", "nonsense,all", "apiServer,nonsense"] {
        let e = Selection::parse(bad).unwrap_err();
        assert!(e.starts_with("unknown CA \"nonsense\""), "{bad}: {e}");
    }
    assert_eq!(
        Selection::parse("all,apiServer").unwrap_err(),
        "`all` stands alone (\"all,apiServer\" names more): name all, or the CAs to rotate"
    );
    assert!(
        Selection::parse("apiServer,,etcdPeer")
            .unwrap_err()
            .starts_with("an empty name in \"apiServer,,etcdPeer\"")
    );
    assert!(Selection::parse("").unwrap_err().starts_with("no CA named"));
    assert_eq!(
        next_name("c-apiserver-ca", NOW),
        "c-apiserver-ca-20261122030000"
    );
    assert_eq!(
        next_name("c-apiserver-ca-20200101000000", NOW),
        "c-apiserver-ca-20261122030000"
    );
}

#[test]
fn a_rotation_trusts_both_then_reissues_then_drops_the_old() {
    let w = crate::prepare(world(basic(), vec![cluster("c", 3, false)]), NOW).world;
    let (w, before) = files(w);
    assert_eq!(pems(&before["apiserver-ca.crt"]), 1);
    assert_eq!(pems(&before["apiserver.crt"]), 1);
    let old_leaves = leaves(&w);
    let old_ca = w.clusters[&key()].spec.api_server.ca.clone().unwrap();
    let old_sa = w.clusters[&key()]
        .spec
        .api_server
        .service_account
        .clone()
        .unwrap();

    // Trust: both CAs trusted, every leaf still the old CA's, tokens still signed by the
    // old key, verified with both.
    let mut w = w;
    let c = w.clusters.get_mut(&key()).unwrap();
    start(c, &Selection::all(), NOW, &PrepareOptions::default()).unwrap();
    let refused = start(c, &Selection::all(), NOW, &PrepareOptions::default()).unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("a rotation of spec.apiServer.ca, "),
        "{refused}"
    );
    let (w, trust) = files(w);
    assert_eq!(leaves(&w), old_leaves, "no certificate reissued yet");
    for ca in [
        "apiserver-ca.crt",
        "apiserver-client-ca.crt",
        "etcd-server-ca.crt",
        "etcd-client-ca.crt",
        "etcd-peer-ca.crt",
    ] {
        assert_eq!(pems(&trust[ca]), 2, "{ca}");
    }
    assert!(
        !trust.contains_key("etcd-trusted-ca.crt"),
        "etcd's clients are trusted through the etcd client CA alone"
    );
    assert_eq!(pems(&trust["apiserver.crt"]), 1);
    assert_eq!(trust["sa.key"], old_sa.private_key);
    assert_eq!(pems(&trust["sa.pub"]), 2);
    assert_eq!(
        trust["controller-manager.kubeconfig"]
            .matches("certificate-authority-data")
            .count(),
        1
    );

    // Reissue: the new CAs sign every leaf, the old still trusted; the API server presents
    // its new CA cross-signed by the old.
    let mut w = w;
    let c = w.clusters.get_mut(&key()).unwrap();
    assert_eq!(advance(c, NOW).unwrap(), Some(REISSUE));
    let new_ca = c.spec.api_server.ca.clone().unwrap();
    assert_ne!(new_ca, old_ca);
    let rotation = c.status.ca_rotation.clone().unwrap();
    assert_eq!(rotation.previous["spec.apiServer.ca"], old_ca.certificate);
    let cross = &rotation.cross_signed["spec.apiServer.ca"];
    assert!(oi_pki::is_signed_by(cross, &old_ca.certificate).unwrap());
    assert_eq!(rotation.previous_service_account, old_sa.public_key);
    let (w, reissue) = files(w);
    assert!(
        verify_world_clean(&w),
        "the old leaves verified while reissued"
    );
    for (name, leaf) in leaves(&w) {
        assert!(
            !old_leaves.iter().any(|(_, old)| *old == leaf),
            "{name} not reissued"
        );
    }
    let apiserver_leaf = &w.components[&ObjectKey::new("default", "c-control-plane-0")]
        .status
        .server_certificates["apiserver"];
    assert!(oi_pki::is_signed_by(&apiserver_leaf.certificate, &new_ca.certificate).unwrap());
    assert_eq!(
        pems(&reissue["apiserver.crt"]),
        2,
        "leaf and cross-signed CA"
    );
    assert!(
        reissue["apiserver.crt"].ends_with(cross.as_str())
            || reissue["apiserver.crt"].contains(cross.trim_end())
    );
    assert_eq!(pems(&reissue["apiserver-ca.crt"]), 2);
    assert_ne!(reissue["sa.key"], old_sa.private_key);
    assert_eq!(pems(&reissue["sa.pub"]), 2);
    // The admin's certificate too.
    let admin = &w.clusters[&key()].status.client_certificates["admin"];
    let client_ca = w.clusters[&key()]
        .spec
        .certificate_authorities
        .api_server_client
        .clone()
        .unwrap();
    assert!(oi_pki::is_signed_by(&admin.certificate, &client_ca.certificate).unwrap());

    // Done: only the new CAs.
    let mut w = w;
    let c = w.clusters.get_mut(&key()).unwrap();
    assert_eq!(advance(c, NOW).unwrap(), None);
    assert_eq!(c.status.ca_rotation, None);
    let (w, done) = files(w);
    assert_eq!(done["apiserver-ca.crt"], new_ca.certificate);
    assert_eq!(pems(&done["apiserver.crt"]), 1);
    assert_eq!(pems(&done["sa.pub"]), 1);
    // A reissued leaf is kept from then on.
    let (w2, _) = files(w.clone());
    assert_eq!(leaves(&w2), leaves(&w));
}

fn verify_world_clean(w: &World) -> bool {
    let findings = crate::verify::verify_world(w, NOW);
    if !findings.is_empty() {
        eprintln!("{findings:#?}");
    }
    findings.is_empty()
}

#[test]
fn the_last_phase_says_what_stops_working() {
    let mut c = cluster("c", 1, false);
    start(
        &mut c,
        &Selection::parse("apiServer,apiServerClient,serviceAccount").unwrap(),
        NOW,
        &PrepareOptions::default(),
    )
    .unwrap();
    let note = last_phase_note(c.status.ca_rotation.as_ref().unwrap());
    assert!(
        note.contains("kubeconfigs and workers that trust only the old API server CA")
            && note.contains("old admin kubeconfigs")
            && note.contains("service-account tokens signed by the old key"),
        "{note}"
    );
}
