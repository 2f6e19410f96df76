//! Kubeconfig rendering with embedded certificate data.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use crate::{Error, Result};

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    clusters: [NamedCluster<'a>; 1],
    contexts: [NamedContext<'a>; 1],
    current_context: &'a str,
    preferences: Preferences,
    users: [NamedUser<'a>; 1],
}

#[derive(Serialize)]
struct NamedCluster<'a> {
    name: &'a str,
    cluster: Cluster<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster<'a> {
    certificate_authority_data: String,
    server: &'a str,
}

#[derive(Serialize)]
struct NamedContext<'a> {
    name: &'a str,
    context: Context<'a>,
}

#[derive(Serialize)]
struct Context<'a> {
    cluster: &'a str,
    user: &'a str,
}

#[derive(Serialize)]
struct Preferences {}

#[derive(Serialize)]
struct NamedUser<'a> {
    name: &'a str,
    user: User,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate_data: String,
    client_key_data: String,
}

/// Renders a kubeconfig with one cluster, one user and one context `<user>@<cluster>` (the
/// current one). Certificates and the key are embedded base64 (`*-data`), so the file stands
/// alone. The output depends only on the arguments. It holds a private key: write it 0600.
///
/// # Errors
/// [`Error::Kubeconfig`] when YAML serialization fails.
pub fn kubeconfig(
    cluster_name: &str,
    server_url: &str,
    ca_certificate_pem: &str,
    user_name: &str,
    client_certificate_pem: &str,
    client_key_pem: &str,
) -> Result<String> {
    let context = format!("{user_name}@{cluster_name}");
    let config = Kubeconfig {
        api_version: "v1",
        kind: "Config",
        clusters: [NamedCluster {
            name: cluster_name,
            cluster: Cluster {
                certificate_authority_data: STANDARD.encode(ca_certificate_pem),
                server: server_url,
            },
        }],
        contexts: [NamedContext {
            name: &context,
            context: Context {
                cluster: cluster_name,
                user: user_name,
            },
        }],
        current_context: &context,
        preferences: Preferences {},
        users: [NamedUser {
            name: user_name,
            user: User {
                client_certificate_data: STANDARD.encode(client_certificate_pem),
                client_key_data: STANDARD.encode(client_key_pem),
            },
        }],
    };
    serde_yaml_ng::to_string(&config).map_err(|source| Error::Kubeconfig {
        cluster_name: cluster_name.to_owned(),
        user_name: user_name.to_owned(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn renders_exact_yaml() {
        let rendered = kubeconfig(
            "prod",
            "https://10.0.0.1:30000",
            "CA",
            "kubernetes-admin",
            "CERT",
            "KEY",
        )
        .unwrap();
        let expected = "\
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    certificate-authority-data: Q0E=
    server: https://10.0.0.1:30000
contexts:
- name: kubernetes-admin@prod
  context:
    cluster: prod
    user: kubernetes-admin
current-context: kubernetes-admin@prod
preferences: {}
users:
- name: kubernetes-admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
";
        assert_eq!(rendered, expected);
    }

    #[test]
    fn names_needing_quotes_stay_strings() {
        let rendered = kubeconfig(
            "yes",
            "https://[::1]:6443",
            "a",
            "system:kube-scheduler",
            "b",
            "c",
        )
        .unwrap();
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rendered).unwrap();
        assert_eq!(parsed["clusters"][0]["name"].as_str(), Some("yes"));
        assert_eq!(
            parsed["users"][0]["name"].as_str(),
            Some("system:kube-scheduler")
        );
        assert_eq!(
            parsed["clusters"][0]["cluster"]["server"].as_str(),
            Some("https://[::1]:6443")
        );
    }
}
