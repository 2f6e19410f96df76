//! A loopback TLS-terminating proxy for tests: requires a client certificate from a given CA,
//! presents a given server certificate, and forwards each connection to a Unix socket (the
//! containerd CRI socket). Only a test fixture: the product's mTLS front is haproxy, built by
//! the local hypervisor set. Dropping it stops the listener and every connection.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, UnixStream};
use tokio::task::JoinSet;

/// A CA minted for one test.
pub struct Ca {
    pub issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf certificate and key (PEM) for `sans`, for server or client use, valid from
    /// `not_before` to `not_after`.
    pub fn leaf(
        &self,
        name: &str,
        sans: &[&str],
        client: bool,
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> (String, String) {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A leaf valid from an hour ago for a day.
    pub fn valid_leaf(&self, name: &str, sans: &[&str], client: bool) -> (String, String) {
        let now = time::OffsetDateTime::now_utc();
        self.leaf(
            name,
            sans,
            client,
            now - time::Duration::hours(1),
            now + time::Duration::days(1),
        )
    }
}

pub struct TlsProxy {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TlsProxy {
    /// Listens on 127.0.0.1 (ephemeral port): presents `server_cert_pem`/`server_key_pem`,
    /// requires a client certificate chaining to `client_ca_pem`, forwards to `backend`.
    pub async fn start(
        server_cert_pem: &str,
        server_key_pem: &str,
        client_ca_pem: &str,
        backend: PathBuf,
    ) -> TlsProxy {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
            roots.add(ca.unwrap()).unwrap();
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(server_cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(server_key_pem.as_bytes()).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            // Dropping the set (when the task is aborted) aborts every connection.
            let mut connections = JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let backend = backend.clone();
                connections.spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut unix) = UnixStream::connect(&backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut unix).await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        TlsProxy { addr, task }
    }

    pub fn uri(&self) -> String {
        format!("https://{}", self.addr)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
