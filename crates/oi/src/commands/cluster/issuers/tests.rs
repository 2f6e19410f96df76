use oi_api::{ObjectKey, World};

use super::*;
use crate::args::InputArgs;

const WORLD: &str = "apiVersion: cluster.oneinfra.ereslibre.es/v1alpha1\nkind: Cluster\nmetadata:\n  name: c1\nspec:\n  apiServer:\n    oidc: {issuerURL: 'https://sip.example', clientID: kubernetes}\n";

fn input() -> InputArgs {
    InputArgs {
        files: vec![],
        max_input_size: oi_cli_io::DEFAULT_MAX_INPUT_BYTES,
    }
}

fn trust_args(url: &str) -> ClusterTrustIssuerArgs {
    ClusterTrustIssuerArgs {
        input: input(),
        cluster: Some("c1".into()),
        issuer_url: url.into(),
        client_id: "k8s".into(),
        audiences: vec!["console".into()],
        username_claim: Some("email".into()),
        username_prefix: None,
        groups_claim: Some("groups".into()),
        groups_prefix: Some("org:".into()),
        ca_file: None,
    }
}

fn run_trust(args: &ClusterTrustIssuerArgs, world: &str) -> anyhow::Result<(String, String)> {
    let mut out = Vec::new();
    let note = trust(args, world.as_bytes(), &mut out)?;
    Ok((String::from_utf8(out)?, note.unwrap_or_default()))
}

fn run_distrust(url: &str, world: &str) -> anyhow::Result<(String, String)> {
    let args = ClusterDistrustIssuerArgs {
        input: input(),
        cluster: Some("c1".into()),
        issuer_url: url.into(),
    };
    let mut out = Vec::new();
    let note = distrust(&args, world.as_bytes(), &mut out)?;
    Ok((String::from_utf8(out)?, note.unwrap_or_default()))
}

fn issuers(world: &str) -> (Option<String>, Vec<ApiServerOidc>) {
    let w = World::load(world, "out.yaml").unwrap();
    let c = &w.clusters[&ObjectKey::new("default", "c1")];
    (
        c.spec
            .api_server
            .oidc
            .as_ref()
            .map(|o| o.issuer_url.clone()),
        c.spec.api_server.oidc_issuers.clone(),
    )
}

#[test]
fn an_issuer_is_trusted_beside_the_others_and_replaced_by_its_url() {
    let (world, note) = run_trust(&trust_args("https://org.example"), WORLD).unwrap();
    assert!(note.contains("now trusts https://org.example"), "{note}");
    let (oidc, more) = issuers(&world);
    assert_eq!(oidc.as_deref(), Some("https://sip.example"));
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].client_id, "k8s");
    assert_eq!(more[0].audiences, ["console"]);
    assert_eq!(more[0].groups_prefix.as_deref(), Some("org:"));
    // Again with other settings: the same entry, replaced.
    let mut again = trust_args("https://org.example");
    again.client_id = "kubectl".into();
    let (world, note) = run_trust(&again, &world).unwrap();
    assert!(note.contains("with new settings"), "{note}");
    let (_, more) = issuers(&world);
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].client_id, "kubectl");
}

#[test]
fn what_cannot_be_trusted_is_refused_naming_the_field() {
    let why = run_trust(&trust_args("https://sip.example"), WORLD)
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("already trusted as spec.apiServer.oidc"),
        "{why}"
    );
    let why = run_trust(&trust_args("http://plain.example"), WORLD)
        .unwrap_err()
        .to_string();
    assert!(
        why.contains("field `spec.apiServer.oidcIssuers[0].issuerURL`")
            && why.contains("is not an https:// URL"),
        "{why}"
    );
    let mut unknown = trust_args("https://org.example");
    unknown.cluster = Some("nope".into());
    let why = run_trust(&unknown, WORLD).unwrap_err().to_string();
    assert_eq!(why, "cluster \"nope\" not found");
    let mut missing = trust_args("https://org.example");
    missing.ca_file = Some("/nonexistent/ca.crt".into());
    let why = run_trust(&missing, WORLD).unwrap_err().to_string();
    assert!(why.starts_with("--ca-file /nonexistent/ca.crt"), "{why}");
}

#[test]
fn an_issuer_is_let_go_and_an_unknown_one_is_an_error() {
    let (world, _) = run_trust(&trust_args("https://org.example"), WORLD).unwrap();
    let (world, note) = run_distrust("https://org.example", &world).unwrap();
    assert!(
        note.contains("no longer trusts https://org.example"),
        "{note}"
    );
    assert_eq!(
        issuers(&world),
        (Some("https://sip.example".into()), vec![])
    );
    let why = run_distrust("https://org.example", &world)
        .unwrap_err()
        .to_string();
    assert_eq!(why, "cluster default/c1 does not trust https://org.example");
    // spec.apiServer.oidc goes too, with a word on who may set it again.
    let (world, note) = run_distrust("https://sip.example", &world).unwrap();
    assert!(note.contains("a SIPCluster whose provider it is"), "{note}");
    assert_eq!(issuers(&world), (None, vec![]));
}
