//! Certificate authorities: generation, loading from PEM, and signing leaf certificates.

use std::fmt;

use rand::RngCore as _;
use rcgen::PublicKeyData as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::{FromDer as _, X509Certificate};

use crate::key::{generate_key, key_algorithm, load_key};
use crate::leaf::{LeafSpec, San, Usage};
use crate::{Error, KeyAlgorithm, Result};

/// How far before `now` a certificate's validity starts, so that a peer whose clock runs a
/// little behind still accepts it.
pub const BACKDATE: Duration = Duration::minutes(5);

/// A certificate and its private key, both PEM: oneinfra's `Certificate`
/// (`certificate`, `privateKey`). `Debug` never shows the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct CertificatePem {
    /// PEM `CERTIFICATE`.
    pub certificate_pem: String,
    /// PEM `PRIVATE KEY` (PKCS#8).
    pub private_key_pem: String,
}

impl fmt::Debug for CertificatePem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificatePem")
            .field("certificate_pem", &self.certificate_pem)
            .field("private_key_pem", &"[redacted]")
            .finish()
    }
}

/// A certificate authority that can sign leaf certificates. It keeps only PEM text and a few
/// facts read from it, so it can be cloned, compared and stored back into a manifest as is.
#[derive(Clone, PartialEq, Eq)]
pub struct CertificateAuthority {
    pem: CertificatePem,
    algorithm: KeyAlgorithm,
    common_name: String,
    not_after: OffsetDateTime,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("common_name", &self.common_name)
            .field("algorithm", &self.algorithm)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Generates a self-signed CA valid from `now - BACKDATE` to `now + lifetime`, with
    /// basicConstraints CA:TRUE and key usages keyCertSign, cRLSign and digitalSignature.
    ///
    /// # Errors
    /// [`Error::InvalidLifetime`] for a non-positive lifetime, [`Error::InvalidName`] for an
    /// empty common name, [`Error::KeyGeneration`] or [`Error::Signing`] when minting fails.
    pub fn generate(
        common_name: &str,
        algorithm: KeyAlgorithm,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<Self> {
        let (not_before, not_after) = validity(common_name, now, lifetime)?;
        let key = generate_key(algorithm)?;
        let mut params = CertificateParams::default();
        params.not_before = not_before;
        params.not_after = not_after;
        params.serial_number = Some(random_serial());
        params.distinguished_name = distinguished_name(common_name, &[])?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let certificate = params.self_signed(&key).map_err(|source| Error::Signing {
            common_name: common_name.to_owned(),
            source,
        })?;
        Ok(CertificateAuthority {
            pem: CertificatePem {
                certificate_pem: certificate.pem(),
                private_key_pem: key.serialize_pem(),
            },
            algorithm,
            common_name: common_name.to_owned(),
            not_after,
        })
    }

    /// Loads a CA kept elsewhere (for instance in a Cluster manifest) so it keeps signing.
    /// The private key may be PKCS#8 or PKCS#1 (RSA); it is kept as PKCS#8.
    ///
    /// # Errors
    /// [`Error::InvalidCertificate`] when the certificate does not parse, [`Error::NotACa`]
    /// when it lacks basicConstraints CA:TRUE, [`Error::InvalidPrivateKey`] or
    /// [`Error::UnsupportedKey`] for the key, and [`Error::KeyMismatch`] when the key is not
    /// the certificate's.
    pub fn from_pem(certificate_pem: &str, private_key_pem: &str) -> Result<Self> {
        let der = certificate_der(certificate_pem)?;
        let (_, cert) = X509Certificate::from_der(&der).map_err(|e| Error::InvalidCertificate {
            reason: e.to_string(),
        })?;
        let common_name = crate::inspect::common_name(&cert).unwrap_or_default();
        let is_ca = cert
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|bc| bc.value.ca);
        if !is_ca {
            return Err(Error::NotACa { common_name });
        }
        let key = load_key(&common_name, private_key_pem)?;
        if key.der_bytes() != cert.public_key().subject_public_key.data.as_ref() {
            return Err(Error::KeyMismatch { common_name });
        }
        let algorithm = key_algorithm(&common_name, &key)?;
        // Fail now, not at the first signature, if rcgen cannot re-encode the issuer name.
        let issuer = Issuer::from_ca_cert_der(&der.as_slice().into(), key).map_err(|source| {
            Error::Signing {
                common_name: common_name.clone(),
                source,
            }
        })?;
        let not_after = OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp())
            .map_err(|e| Error::InvalidCertificate {
                reason: e.to_string(),
            })?;
        Ok(CertificateAuthority {
            pem: CertificatePem {
                certificate_pem: pem::encode_config(
                    &pem::Pem::new("CERTIFICATE", der.clone()),
                    pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
                ),
                private_key_pem: issuer.key().serialize_pem(),
            },
            algorithm,
            common_name,
            not_after,
        })
    }

    /// The certificate, PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.pem.certificate_pem
    }

    /// The private key, PEM (PKCS#8). Never log it.
    pub fn private_key_pem(&self) -> &str {
        &self.pem.private_key_pem
    }

    /// Certificate and key, as oneinfra stores them.
    pub fn to_pem(&self) -> CertificatePem {
        self.pem.clone()
    }

    /// The CA key's algorithm, which leaves follow unless their spec names another.
    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }

    /// The subject common name.
    pub fn common_name(&self) -> &str {
        &self.common_name
    }

    /// The end of the CA's validity.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Mints a fresh key (of `spec.key_algorithm`, or this CA's algorithm) and a certificate
    /// for it signed by this CA, valid from `now - BACKDATE` to `now + lifetime`, cut at the
    /// CA's own expiry (a certificate cannot be trusted longer than its issuer anyway).
    /// `spec.issuer` is not consulted: this CA signs.
    ///
    /// # Errors
    /// [`Error::InvalidLifetime`], [`Error::CaExpired`] when the CA ends before `now`,
    /// [`Error::InvalidName`] / [`Error::TooManyOrganizations`] for a bad subject,
    /// [`Error::KeyGeneration`] or [`Error::Signing`] when minting fails.
    pub fn issue(
        &self,
        spec: &LeafSpec,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<CertificatePem> {
        let (not_before, not_after) = validity(&spec.common_name, now, lifetime)?;
        if self.not_after <= now {
            return Err(Error::CaExpired {
                common_name: self.common_name.clone(),
                not_after: self.not_after,
            });
        }
        let algorithm = spec.key_algorithm.unwrap_or(self.algorithm);
        let key = generate_key(algorithm)?;

        let mut params = CertificateParams::default();
        params.not_before = not_before;
        params.not_after = not_after.min(self.not_after);
        params.serial_number = Some(random_serial());
        params.distinguished_name = distinguished_name(&spec.common_name, &spec.organizations)?;
        params.subject_alt_names = spec
            .sans
            .iter()
            .map(|s| {
                San::parse(s).and_then(|san| match san {
                    San::Ip(ip) => Ok(SanType::IpAddress(ip)),
                    San::Dns(name) => name.clone().try_into().map(SanType::DnsName).map_err(|_| {
                        Error::InvalidSan {
                            value: name,
                            reason: "not an IA5 string".to_owned(),
                        }
                    }),
                })
            })
            .collect::<Result<_>>()?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = if algorithm.is_rsa() {
            vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ]
        } else {
            vec![KeyUsagePurpose::DigitalSignature]
        };
        params.extended_key_usages = match spec.usage {
            Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::ServerAndClient => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        params.use_authority_key_identifier_extension = true;

        let signer = self.issuer()?;
        let certificate = params
            .signed_by(&key, &signer)
            .map_err(|source| Error::Signing {
                common_name: spec.common_name.clone(),
                source,
            })?;
        Ok(CertificatePem {
            certificate_pem: certificate.pem(),
            private_key_pem: key.serialize_pem(),
        })
    }

    /// `other`'s certificate issued again by this CA: the same subject, public key,
    /// key identifier and CA extensions, valid until the earlier of both ends. A server that
    /// presents it after a leaf of `other` is trusted by clients that know only this CA:
    /// what lets a CA be replaced without those clients failing at once.
    ///
    /// # Errors
    /// [`Error::InvalidCertificate`], [`Error::CaExpired`], [`Error::Signing`].
    pub fn cross_sign(&self, other: &CertificateAuthority, now: OffsetDateTime) -> Result<String> {
        if self.not_after <= now {
            return Err(Error::CaExpired {
                common_name: self.common_name.clone(),
                not_after: self.not_after,
            });
        }
        // As `generate` made `other`: the same subject, bytes for bytes, and the same key
        // identifier (derived from the key), so paths through either certificate build.
        let mut params = CertificateParams::default();
        params.not_before = now - BACKDATE;
        params.not_after = other.not_after.min(self.not_after);
        params.serial_number = Some(random_serial());
        params.distinguished_name = distinguished_name(&other.common_name, &[])?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = load_key(&other.common_name, other.private_key_pem())?;
        let signer = self.issuer()?;
        let certificate = params
            .signed_by(&key, &signer)
            .map_err(|source| Error::Signing {
                common_name: other.common_name.clone(),
                source,
            })?;
        Ok(certificate.pem())
    }

    fn issuer(&self) -> Result<Issuer<'static, KeyPair>> {
        let key = load_key(&self.common_name, &self.pem.private_key_pem)?;
        Issuer::from_ca_cert_pem(&self.pem.certificate_pem, key).map_err(|source| Error::Signing {
            common_name: self.common_name.clone(),
            source,
        })
    }
}

/// The DER of the first `CERTIFICATE` block of a PEM text.
pub(crate) fn certificate_der(certificate_pem: &str) -> Result<Vec<u8>> {
    let block = pem::parse(certificate_pem).map_err(|e| Error::InvalidCertificate {
        reason: e.to_string(),
    })?;
    if block.tag() != "CERTIFICATE" {
        return Err(Error::InvalidCertificate {
            reason: format!("PEM block {:?} instead of \"CERTIFICATE\"", block.tag()),
        });
    }
    Ok(block.into_contents())
}

/// `(not_before, not_after)` for a certificate minted at `now`, whole seconds (X.509 times
/// carry no fractions, and a certificate must not claim more than it encodes).
fn validity(
    common_name: &str,
    now: OffsetDateTime,
    lifetime: Duration,
) -> Result<(OffsetDateTime, OffsetDateTime)> {
    if !lifetime.is_positive() {
        return Err(Error::InvalidLifetime {
            common_name: common_name.to_owned(),
            lifetime,
        });
    }
    let now = now
        .replace_nanosecond(0)
        .map_err(|_| Error::InvalidLifetime {
            common_name: common_name.to_owned(),
            lifetime,
        })?;
    let not_after = now
        .checked_add(lifetime)
        .ok_or_else(|| Error::InvalidLifetime {
            common_name: common_name.to_owned(),
            lifetime,
        })?;
    Ok((now - BACKDATE, not_after))
}

/// A subject of one common name and up to two organizations. rcgen keeps one value per
/// attribute type, so the second organization is written under the same OID (2.5.4.10)
/// through a custom attribute type; a third cannot be expressed.
fn distinguished_name(common_name: &str, organizations: &[String]) -> Result<DistinguishedName> {
    if common_name.trim().is_empty() {
        return Err(Error::InvalidName {
            value: common_name.to_owned(),
        });
    }
    let mut dn = DistinguishedName::new();
    let organization_types = [
        DnType::OrganizationName,
        DnType::CustomDnType(vec![2, 5, 4, 10]),
    ];
    if organizations.len() > organization_types.len() {
        return Err(Error::TooManyOrganizations {
            common_name: common_name.to_owned(),
            count: organizations.len(),
        });
    }
    for (ty, organization) in organization_types.into_iter().zip(organizations) {
        if organization.trim().is_empty() {
            return Err(Error::InvalidName {
                value: organization.clone(),
            });
        }
        dn.push(ty, organization.as_str());
    }
    dn.push(DnType::CommonName, common_name);
    Ok(dn)
}

/// A random positive serial of 16 bytes (RFC 5280 allows up to 20).
fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    // Positive and of full length, so the DER integer is always 16 bytes.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}
