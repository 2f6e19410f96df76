//! Reading certificates back: what they say, who signed them, and whether to renew them.

use std::collections::BTreeSet;

use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer as _, X509Certificate};

use crate::ca::certificate_der;
use crate::leaf::San;
use crate::{Error, Result, Usage};

/// The key usage bits oneinfra cares about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyUsages {
    /// digitalSignature.
    pub digital_signature: bool,
    /// keyEncipherment.
    pub key_encipherment: bool,
    /// keyCertSign.
    pub key_cert_sign: bool,
    /// cRLSign.
    pub crl_sign: bool,
}

/// What a certificate says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateInfo {
    /// Subject CN.
    pub common_name: Option<String>,
    /// Subject O values, in order.
    pub organizations: Vec<String>,
    /// Issuer CN.
    pub issuer_common_name: Option<String>,
    /// Serial number, lowercase hex.
    pub serial_hex: String,
    /// Start of validity.
    pub not_before: OffsetDateTime,
    /// End of validity.
    pub not_after: OffsetDateTime,
    /// SANs, normalized as [`crate::LeafSpec::sans`] (IPs canonical, DNS names lowercase).
    pub sans: Vec<String>,
    /// basicConstraints CA:TRUE.
    pub is_ca: bool,
    /// Key usage bits (all false when the extension is absent).
    pub key_usages: KeyUsages,
    /// Extended key usage, when it is one of the combinations oneinfra issues.
    pub usage: Option<Usage>,
}

/// Parses a PEM certificate.
///
/// # Errors
/// [`Error::InvalidCertificate`] when it is not a parseable X.509 certificate.
pub fn inspect_certificate(certificate_pem: &str) -> Result<CertificateInfo> {
    let der = certificate_der(certificate_pem)?;
    let cert = parse(&der)?;
    let invalid = |reason: String| Error::InvalidCertificate { reason };
    let time = |t: &x509_parser::time::ASN1Time| {
        OffsetDateTime::from_unix_timestamp(t.timestamp()).map_err(|e| invalid(e.to_string()))
    };
    let mut sans = Vec::new();
    if let Some(ext) = cert
        .subject_alternative_name()
        .map_err(|e| invalid(e.to_string()))?
    {
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(dns) => sans.push(San::Dns(dns.to_ascii_lowercase()).render()),
                GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).map(std::net::IpAddr::from).ok(),
                        16 => <[u8; 16]>::try_from(*bytes)
                            .map(std::net::IpAddr::from)
                            .ok(),
                        _ => None,
                    };
                    let ip =
                        ip.ok_or_else(|| invalid(format!("IP SAN of {} bytes", bytes.len())))?;
                    sans.push(San::Ip(ip).render());
                }
                // oneinfra issues no other kinds; keep them visible so a comparison fails.
                other => sans.push(other.to_string()),
            }
        }
    }
    let key_usages = cert
        .key_usage()
        .map_err(|e| invalid(e.to_string()))?
        .map(|ku| KeyUsages {
            digital_signature: ku.value.digital_signature(),
            key_encipherment: ku.value.key_encipherment(),
            key_cert_sign: ku.value.key_cert_sign(),
            crl_sign: ku.value.crl_sign(),
        })
        .unwrap_or_default();
    let usage = cert
        .extended_key_usage()
        .map_err(|e| invalid(e.to_string()))?
        .and_then(|eku| match (eku.value.server_auth, eku.value.client_auth) {
            (true, true) => Some(Usage::ServerAndClient),
            (true, false) => Some(Usage::Server),
            (false, true) => Some(Usage::Client),
            (false, false) => None,
        });
    Ok(CertificateInfo {
        common_name: common_name(&cert),
        organizations: cert
            .subject()
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_owned))
            .collect(),
        issuer_common_name: cert
            .issuer()
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok().map(str::to_owned)),
        serial_hex: hex::encode(cert.raw_serial()),
        not_before: time(&cert.validity().not_before)?,
        not_after: time(&cert.validity().not_after)?,
        sans,
        is_ca: cert
            .basic_constraints()
            .map_err(|e| invalid(e.to_string()))?
            .is_some_and(|bc| bc.value.ca),
        key_usages,
        usage,
    })
}

/// Whether `certificate_pem` was signed by the CA `ca_certificate_pem`: its issuer name is
/// the CA's subject and its signature verifies with the CA's public key.
///
/// # Errors
/// [`Error::InvalidCertificate`] when either does not parse.
pub fn is_signed_by(certificate_pem: &str, ca_certificate_pem: &str) -> Result<bool> {
    let der = certificate_der(certificate_pem)?;
    let ca_der = certificate_der(ca_certificate_pem)?;
    let cert = parse(&der)?;
    let ca = parse(&ca_der)?;
    let same_name = cert.issuer().as_raw() == ca.subject().as_raw()
        || cert.issuer().to_string() == ca.subject().to_string();
    Ok(same_name && cert.verify_signature(Some(ca.public_key())).is_ok())
}

/// Why a certificate should be issued again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewalReason {
    /// Not signed by the CA that should have signed it (the CA was replaced).
    IssuerChanged,
    /// Expired, or expires within the renewal threshold.
    Expiring {
        /// When it expires.
        not_after: OffsetDateTime,
    },
    /// Its SANs are not the wanted ones.
    SansDiffer {
        /// Wanted but absent.
        missing: Vec<String>,
        /// Present but not wanted.
        unexpected: Vec<String>,
    },
}

/// Pure renewal decision on a parsed certificate: [`RenewalReason::Expiring`] when it ends
/// before `now + threshold`, else [`RenewalReason::SansDiffer`] when its SANs are not
/// `wanted_sans` (compared as normalized sets), else `None`.
///
/// # Errors
/// [`Error::InvalidSan`] when a wanted SAN does not parse.
pub fn renewal_reason(
    info: &CertificateInfo,
    wanted_sans: &[impl AsRef<str>],
    now: OffsetDateTime,
    threshold: Duration,
) -> Result<Option<RenewalReason>> {
    if info.not_after <= now.saturating_add(threshold) {
        return Ok(Some(RenewalReason::Expiring {
            not_after: info.not_after,
        }));
    }
    let wanted = wanted_sans
        .iter()
        .map(|s| San::parse(s.as_ref()).map(|san| san.render()))
        .collect::<Result<BTreeSet<_>>>()?;
    let have: BTreeSet<String> = info.sans.iter().cloned().collect();
    if wanted != have {
        return Ok(Some(RenewalReason::SansDiffer {
            missing: wanted.difference(&have).cloned().collect(),
            unexpected: have.difference(&wanted).cloned().collect(),
        }));
    }
    Ok(None)
}

/// [`renewal_reason`] on PEM, checking first that `ca_certificate_pem` signed it
/// ([`RenewalReason::IssuerChanged`] otherwise).
///
/// # Errors
/// As [`inspect_certificate`], [`is_signed_by`] and [`renewal_reason`].
pub fn needs_renewal(
    certificate_pem: &str,
    ca_certificate_pem: &str,
    wanted_sans: &[impl AsRef<str>],
    now: OffsetDateTime,
    threshold: Duration,
) -> Result<Option<RenewalReason>> {
    if !is_signed_by(certificate_pem, ca_certificate_pem)? {
        return Ok(Some(RenewalReason::IssuerChanged));
    }
    let info = inspect_certificate(certificate_pem)?;
    renewal_reason(&info, wanted_sans, now, threshold)
}

pub(crate) fn parse(der: &[u8]) -> Result<X509Certificate<'_>> {
    let (rest, cert) = X509Certificate::from_der(der).map_err(|e| Error::InvalidCertificate {
        reason: e.to_string(),
    })?;
    if !rest.is_empty() {
        return Err(Error::InvalidCertificate {
            reason: format!("{} trailing bytes after the certificate", rest.len()),
        });
    }
    Ok(cert)
}

pub(crate) fn common_name(cert: &X509Certificate<'_>) -> Option<String> {
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok().map(str::to_owned))
}
