use std::time::Instant;

use super::*;

/// What `oi`'s renderer writes for two issuers (the second with two audiences).
const TWO: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://a.example:8443/realms/ops
    audiences:
    - kubernetes
  claimMappings:
    username:
      claim: email
      prefix: ''
    groups:
      claim: groups
      prefix: 'oidc:'
- issuer:
    url: https://b.example
    audiences:
    - k8s
    - console
    audienceMatchPolicy: MatchAny
  claimValidationRules:
  - claim: hd
    requiredValue: example.com
  claimMappings:
    username:
      claim: sub
      prefix: 'https://b.example#'
";

fn one(url: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n\
         - issuer: {{url: '{url}', audiences: [k]}}\n  claimMappings: {{username: {{claim: sub, prefix: ''}}}}\n"
    )
}

#[test]
fn the_rendered_configuration_gives_each_issuer_its_audiences_claims_and_prefixes() {
    let issuers = parse(TWO, &[]).unwrap();
    assert_eq!(issuers.len(), 2);
    let a = &issuers[0].config;
    assert_eq!(a.issuer_url, "https://a.example:8443/realms/ops");
    assert_eq!(
        (a.client_id.as_str(), a.audiences.as_slice()),
        ("kubernetes", &[][..])
    );
    assert_eq!(a.username_claim, "email");
    assert_eq!(
        (a.username_prefix.as_deref(), a.exact_prefix),
        (Some(""), true)
    );
    assert_eq!(a.groups_claim.as_deref(), Some("groups"));
    assert_eq!(a.groups_prefix.as_deref(), Some("oidc:"));
    let b = &issuers[1].config;
    assert_eq!(b.client_id, "k8s");
    assert_eq!(b.audiences, ["console"]);
    assert_eq!(b.required_claims["hd"], "example.com");
    assert_eq!(b.groups_claim, None);
    // The prefix is used as it is: a user of b is `https://b.example#<sub>`, of a `<email>`.
    let now = 1_800_000_000.0;
    let tls = crate::tls::client_config(rustls::RootCertStore::empty(), None, "t").unwrap();
    let claims = serde_json::json!({"iss": "https://b.example", "aud": "console",
        "sub": "bob", "exp": now + 60.0, "hd": "example.com"});
    let user = Oidc::new(b.clone(), Arc::clone(&tls))
        .user(&claims, now)
        .unwrap();
    assert_eq!(user.name, "https://b.example#bob");
    let claims = serde_json::json!({"iss": "https://a.example:8443/realms/ops",
        "aud": ["x", "kubernetes"], "email": "al@example.com", "exp": now + 60.0,
        "groups": ["ops"]});
    let user = Oidc::new(a.clone(), tls).user(&claims, now).unwrap();
    assert_eq!(user.name, "al@example.com");
    assert_eq!(user.groups, ["oidc:ops"]);
    // None at all is a configuration too.
    assert!(
        parse(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt: []\n",
            &[]
        )
        .unwrap()
        .is_empty()
    );
}

#[test]
fn what_kube_apiserver_refuses_is_refused_naming_the_field() {
    let sa = ["https://kubernetes.default.svc.cluster.local".to_string()];
    let cases: Vec<(String, &str)> = vec![
        (
            TWO.replace("      prefix: ''\n", ""),
            "jwt[0].claimMappings.username.prefix: required when claim is set",
        ),
        (
            TWO.replace("    audienceMatchPolicy: MatchAny\n", ""),
            "jwt[1].issuer.audienceMatchPolicy: must be MatchAny with several audiences",
        ),
        (
            TWO.replace("https://b.example\n", "https://a.example:8443/realms/ops\n"),
            "jwt[1].issuer.url: \"https://a.example:8443/realms/ops\" duplicates jwt[0]",
        ),
        (
            one("https://kubernetes.default.svc.cluster.local"),
            "jwt[0].issuer.url: \"https://kubernetes.default.svc.cluster.local\" is a --service-account-issuer",
        ),
        (
            one("http://plain.example"),
            "jwt[0].issuer.url: \"http://plain.example\" is not an https URL without query or fragment",
        ),
        (
            one("https://a.example").replace("claim: sub, prefix: ''", "expression: claims.sub"),
            "jwt[0].claimMappings.username.expression: not implemented by the kube-apiserver stand-in (or unknown)",
        ),
        (
            one("https://a.example").replace("audiences: [k]", "audiences: []"),
            "jwt[0].issuer.audiences: at least one is required",
        ),
        (
            one("https://a.example").replace("/v1\n", "/v2\n"),
            "apiVersion: \"apiserver.config.k8s.io/v2\" is not apiserver.config.k8s.io/v1 (or v1beta1, v1alpha1)",
        ),
        (
            format!("{}anonymous: {{enabled: true}}\n", one("https://a.example")),
            "anonymous: not implemented by the kube-apiserver stand-in (or unknown)",
        ),
    ];
    for (text, why) in cases {
        assert_eq!(parse(&text, &sa).unwrap_err(), why, "{text}");
    }
    let many: String = (0..65)
        .map(|i| {
            format!(
                "- issuer: {{url: 'https://i{i}.example', audiences: [k]}}\n  claimMappings: {{username: {{claim: sub, prefix: ''}}}}\n"
            )
        })
        .collect();
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n{many}"
    );
    assert_eq!(
        parse(&text, &sa).unwrap_err(),
        "jwt: 65 authenticators, at most 64"
    );
}

/// Writes `text` at `path` the way `oi`'s writer does: a temporary file renamed over it.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Waits (bounded) until the issuers in force are `urls`.
async fn until_in_force(jwt: &JwtAuthenticators, urls: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now: Vec<String> = jwt
            .current()
            .iter()
            .map(|o| o.config().issuer_url.clone())
            .collect();
        if now == urls {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "in force: {now:?}, waited for {urls:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The file changes while the server runs: an issuer added is in force within a reload, one
/// removed is no longer, an issuer that did not change keeps its authenticator (and the
/// keys it fetched), and a file that no longer parses changes nothing.
#[tokio::test]
async fn a_changed_file_puts_its_issuers_in_force_and_a_refused_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authn.yaml");
    replace(&path, &one("https://a.example"));
    let loaded = load(&path, &std::fs::read(&path).unwrap(), &[], &[]).unwrap();
    let jwt = Arc::new(JwtAuthenticators::new(
        loaded.iter().map(|(_, o)| Arc::clone(o)).collect(),
    ));
    let first = Arc::clone(&loaded[0].1);
    let watching = tokio::spawn(watch(
        path.clone(),
        Vec::new(),
        Arc::clone(&jwt),
        loaded,
        std::fs::read(&path).unwrap(),
    ));
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _watching = Abort(watching);
    until_in_force(&jwt, &["https://a.example"]).await;

    let both = format!(
        "{}- issuer: {{url: 'https://b.example', audiences: [k]}}\n  claimMappings: {{username: {{claim: sub, prefix: 'b:'}}}}\n",
        one("https://a.example")
    );
    replace(&path, &both);
    until_in_force(&jwt, &["https://a.example", "https://b.example"]).await;
    assert!(
        Arc::ptr_eq(&jwt.current()[0], &first),
        "an unchanged issuer keeps its authenticator"
    );

    assert_eq!(jwt.reloads(), (1, 0));
    replace(
        &path,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: Nonsense\n",
    );
    // A refused file (counted as such) leaves what is in force as it was.
    let deadline = Instant::now() + Duration::from_secs(30);
    while jwt.reloads().1 == 0 {
        assert!(Instant::now() < deadline, "the refused file was never read");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(jwt.reloads(), (1, 1));
    until_in_force(&jwt, &["https://a.example", "https://b.example"]).await;
    replace(&path, &one("https://b.example"));
    until_in_force(&jwt, &["https://b.example"]).await;
}
