//! Certificates, keys and rustls configurations.
//!
//! Key material is read, parsed and handed to rustls; it is never formatted into a message or
//! a log line. Errors say which file or kubeconfig field was at fault.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// An error loading certificates or keys, or building a TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// PEM that does not parse.
    #[error("invalid PEM in {what}")]
    Pem {
        /// Where the PEM came from.
        what: String,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// No certificate where one was expected.
    #[error("no certificate in {what}")]
    NoCertificate {
        /// Where the PEM came from.
        what: String,
    },
    /// No private key where one was expected.
    #[error("no private key in {what}")]
    NoKey {
        /// Where the PEM came from.
        what: String,
    },
    /// A CA certificate rustls refused.
    #[error("invalid CA certificate in {what}")]
    Ca {
        /// Where the certificate came from.
        what: String,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// A certificate that does not parse as X.509.
    #[error("invalid certificate in {what}: {reason}")]
    X509 {
        /// Where the certificate came from.
        what: String,
        /// Why.
        reason: String,
    },
    /// A client-certificate verifier that cannot be built.
    #[error("cannot build the client certificate verifier for {what}")]
    Verifier {
        /// Where the CA came from.
        what: String,
        /// Why.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// A TLS configuration rustls refused (e.g. a key that does not match its certificate).
    #[error("cannot build the TLS configuration for {what}")]
    Config {
        /// Which configuration.
        what: String,
        /// Why.
        #[source]
        source: rustls::Error,
    },
}

/// Result with [`TlsError`].
pub type Result<T, E = TlsError> = std::result::Result<T, E>;

/// The crypto provider every configuration uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a file, naming it on failure.
///
/// # Errors
/// [`TlsError::Read`].
pub fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Every certificate of a PEM bundle; at least one.
///
/// # Errors
/// [`TlsError::Pem`] or [`TlsError::NoCertificate`].
pub fn certs_from_pem(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what: what.to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what: what.to_string(),
        });
    }
    for cert in &certs {
        x509_parser::parse_x509_certificate(cert).map_err(|e| TlsError::X509 {
            what: what.to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#1, PKCS#8 or SEC1).
///
/// # Errors
/// [`TlsError::NoKey`] or [`TlsError::Pem`].
pub fn key_from_pem(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|source| match source {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            what: what.to_string(),
        },
        source => TlsError::Pem {
            what: what.to_string(),
            source,
        },
    })
}

/// A root store holding every certificate of a PEM bundle.
///
/// # Errors
/// Unreadable PEM, no certificate, or a certificate rustls refuses as a trust anchor.
pub fn roots_from_pem(pem: &[u8], what: &str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(pem, what)? {
        roots.add(cert).map_err(|source| TlsError::Ca {
            what: what.to_string(),
            source,
        })?;
    }
    Ok(roots)
}

/// A server configuration serving `certs`/`key`, offering h2 and http/1.1. With `client_ca`,
/// client certificates are verified against it but optional (Go's `VerifyClientCertIfGiven`,
/// which the API server uses): a client without one gets through the handshake, a client
/// with a certificate from another CA does not.
///
/// # Errors
/// A verifier or configuration rustls refuses, e.g. a key that does not match the certificate.
pub fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<(RootCertStore, &str)>,
    what: &str,
) -> Result<Arc<ServerConfig>> {
    let config_error = |source| TlsError::Config {
        what: what.to_string(),
        source,
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?;
    let builder = match client_ca {
        Some((roots, ca_what)) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|source| TlsError::Verifier {
                    what: ca_what.to_string(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(config_error)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration trusting `roots`, presenting `identity` when given, speaking
/// http/1.1.
///
/// # Errors
/// A configuration rustls refuses, e.g. a key that does not match the certificate.
pub fn client_config(
    roots: RootCertStore,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    what: &str,
) -> Result<Arc<ClientConfig>> {
    let config_error = |source| TlsError::Config {
        what: what.to_string(),
        source,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(config_error)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Who a verified client certificate says it is, as the API server reads it: the common name
/// is the user, the organizations are the groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The subject's common name.
    pub user: String,
    /// The subject's organizations.
    pub groups: Vec<String>,
}

/// The identity in a DER certificate, if it parses.
pub fn identity(cert: &CertificateDer<'_>) -> Option<Identity> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let subject = parsed.subject();
    let user = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some(Identity { user, groups })
}

/// A client-certificate verifier that asks for a certificate and checks that the client holds
/// its key, but leaves the chain to the API's authentication (as kube-apiserver's
/// `RequestClientCert` does): a certificate from another CA then gets `401`, not a failed
/// handshake. The client CA's subjects are sent as hints, as the real server sends them.
#[derive(Debug)]
pub struct RequestClientCert {
    hints: Vec<rustls::DistinguishedName>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl RequestClientCert {
    /// Asks for certificates, hinting `roots`' subjects.
    pub fn new(roots: Option<&RootCertStore>) -> Arc<RequestClientCert> {
        Arc::new(RequestClientCert {
            hints: roots.map(RootCertStore::subjects).unwrap_or_default(),
            provider: provider(),
        })
    }
}

impl rustls::server::danger::ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        // The chain is verified by authentication, per request.
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A server configuration serving `certs`/`key` that requests client certificates without
/// verifying their chain (see [`RequestClientCert`]), offering h2 and http/1.1.
///
/// # Errors
/// A key that does not match the certificate.
pub fn api_server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<&RootCertStore>,
    what: &str,
) -> Result<Arc<ServerConfig>> {
    let config_error = |source| TlsError::Config {
        what: what.to_string(),
        source,
    };
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_client_cert_verifier(RequestClientCert::new(client_ca))
        .with_single_cert(certs, key)
        .map_err(config_error)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A server-certificate verifier that accepts any certificate (but still checks handshake
/// signatures): what kube-apiserver does towards kubelets without
/// `--kubelet-certificate-authority`.
#[derive(Debug)]
pub struct AcceptAnyServer {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client configuration presenting `identity` that does not verify the server (see
/// [`AcceptAnyServer`]).
///
/// # Errors
/// A key that does not match its certificate.
pub fn unverified_client_config(
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    what: &str,
) -> Result<Arc<ClientConfig>> {
    let config_error = |source| TlsError::Config {
        what: what.to_string(),
        source,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyServer {
            provider: provider(),
        }));
    let mut config = match identity {
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(config_error)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
