//! CA rotation without downtime (`status.caRotation`, ours), for any of the cluster's eight
//! CAs and its service-account key:
//!
//! ```text
//!            trust bundles         certificates      API server presents      the key that
//!                                                                             signs tokens
//! start ─► trust:   old + new       the old CA's      leaf (old CA)            old (old + new
//!                                                                             verify)
//!   advance ─► reissue: new + old   reissued by new   leaf + new CA cross-     new (new + old
//!                                                     signed by old            verify)
//!     advance ─► done:  new         the new CA's      leaf (new CA)            new
//! ```
//!
//! Each phase is a reconcile that must leave the cluster ready before the next: the files
//! change, and the engine restarts what reads them one replica at a time (etcd quorum kept,
//! each API server ready before the next). Until the last phase, clients of the old CA keep
//! working: they trust the old CA, which still signs (trust) or cross-signs the new one
//! (reissue); servers trust clients of either. The last phase drops the old CA: kubeconfigs
//! and workers that trust only it, or hold certificates only it signed, stop working then
//! ([`last_phase_note`] says so before it runs).

use oi_api::{CaRotation, Certificate, Cluster, KeyPair};
use oi_pki::{CaKind, CertificateAuthority, KeyPairPem};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::PrepareOptions;
use crate::certificates::ca_slot;

/// The first phase: new CAs trusted beside the old.
pub const TRUST: &str = "trust";
/// The second phase: certificates reissued by the new CAs, the old still trusted.
pub const REISSUE: &str = "reissue";
/// The entry of `status.caRotation.cas` for the service-account key.
pub const SERVICE_ACCOUNT: &str = "spec.apiServer.serviceAccount";

/// What to rotate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub cas: Vec<CaKind>,
    pub service_account: bool,
}

/// The short name of a CA, as `--ca` and the annotation take it: the last part of its
/// manifest field (`apiServer` for `spec.apiServer.ca`, `etcdServer`, `etcdPeer`, ...).
pub fn short_name(kind: CaKind) -> &'static str {
    match kind {
        CaKind::ApiServer => "apiServer",
        CaKind::EtcdServer => "etcdServer",
        other => other
            .manifest_field()
            .rsplit('.')
            .next()
            .unwrap_or_default(),
    }
}

impl Selection {
    /// Everything.
    pub fn all() -> Self {
        Selection {
            cas: CaKind::ALL.to_vec(),
            service_account: true,
        }
    }

    /// `all` alone, or short names separated by commas (`serviceAccount` for the key).
    ///
    /// # Errors
    /// An unknown or empty name (wherever it stands), or `all` beside other names.
    pub fn parse(s: &str) -> Result<Selection, String> {
        let known = || {
            let names: Vec<&str> = CaKind::ALL.into_iter().map(short_name).collect();
            format!("all, {}, serviceAccount", names.join(", "))
        };
        let names: Vec<&str> = s.split(',').map(str::trim).collect();
        if names.iter().all(|n| n.is_empty()) {
            return Err(format!("no CA named; name some ({})", known()));
        }
        let mut out = Selection::default();
        let mut all = false;
        for name in &names {
            match *name {
                "" => return Err(format!("an empty name in {s:?}; known: {}", known())),
                "all" => all = true,
                "serviceAccount" => out.service_account = true,
                name => {
                    let kind = CaKind::ALL
                        .into_iter()
                        .find(|k| short_name(*k) == name)
                        .ok_or_else(|| format!("unknown CA {name:?}; known: {}", known()))?;
                    if !out.cas.contains(&kind) {
                        out.cas.push(kind);
                    }
                }
            }
        }
        if all {
            if names.len() > 1 {
                return Err(format!(
                    "`all` stands alone ({s:?} names more): name all, or the CAs to rotate"
                ));
            }
            return Ok(Selection::all());
        }
        Ok(out)
    }
}

/// Why a rotation cannot start or go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RotationError {
    #[error("a rotation of {cas} is under way (phase {phase}): finish it first")]
    UnderWay { cas: String, phase: String },
    #[error("{field}: {reason}")]
    Material { field: String, reason: String },
    #[error("status.caRotation.phase {phase:?} is not trust or reissue")]
    Phase { phase: String },
}

fn slot_mut(cluster: &mut Cluster, kind: CaKind) -> &mut Option<Certificate> {
    let spec = &mut cluster.spec;
    let cas = &mut spec.certificate_authorities;
    match kind {
        CaKind::ApiServer => &mut spec.api_server.ca,
        CaKind::ApiServerClient => &mut cas.api_server_client,
        CaKind::CertificateSigner => &mut cas.certificate_signer,
        CaKind::Kubelet => &mut cas.kubelet,
        CaKind::KubeletClient => &mut cas.kubelet_client,
        CaKind::EtcdServer => &mut spec.etcd_server.ca,
        CaKind::EtcdClient => &mut cas.etcd_client,
        CaKind::EtcdPeer => &mut cas.etcd_peer,
    }
}

fn kind_of(field: &str) -> Option<CaKind> {
    CaKind::ALL
        .into_iter()
        .find(|k| k.manifest_field() == field)
}

fn load(cluster: &Cluster, kind: CaKind) -> Result<CertificateAuthority, RotationError> {
    let field = kind.manifest_field();
    let ca = ca_slot(cluster, kind)
        .as_ref()
        .ok_or_else(|| RotationError::Material {
            field: field.into(),
            reason: "absent".into(),
        })?;
    kind.load(&ca.certificate, &ca.private_key)
        .map_err(|e| RotationError::Material {
            field: field.into(),
            reason: e.to_string(),
        })
}

/// The common name of the CA that replaces one named `current`: its base name (without an
/// earlier rotation's time stamp) and the time.
fn next_name(current: &str, now: OffsetDateTime) -> String {
    let base = match current.rsplit_once('-') {
        Some((base, stamp)) if stamp.len() == 14 && stamp.bytes().all(|b| b.is_ascii_digit()) => {
            base
        }
        _ => current,
    };
    let stamp = now
        .to_offset(time::UtcOffset::UTC)
        .format(time::macros::format_description!(
            "[year][month][day][hour][minute][second]"
        ))
        .unwrap_or_default();
    format!("{base}-{stamp}")
}

/// Starts a rotation of `selection`: new CAs (and key) minted with the current ones'
/// algorithms, trusted beside them from the next reconcile on.
///
/// # Errors
/// [`RotationError::UnderWay`]; [`RotationError::Material`] when a current CA does not load
/// or a new one cannot be minted.
pub fn start(
    cluster: &mut Cluster,
    selection: &Selection,
    now: OffsetDateTime,
    options: &PrepareOptions,
) -> Result<(), RotationError> {
    if let Some(r) = &cluster.status.ca_rotation {
        return Err(RotationError::UnderWay {
            cas: r.cas.join(", "),
            phase: r.phase.clone(),
        });
    }
    let mut rotation = CaRotation {
        phase: TRUST.into(),
        started_at: now.format(&Rfc3339).unwrap_or_default(),
        ..CaRotation::default()
    };
    for &kind in &selection.cas {
        let current = load(cluster, kind)?;
        let field = kind.manifest_field();
        let new = CertificateAuthority::generate(
            &next_name(current.common_name(), now),
            current.algorithm(),
            now,
            options.ca_lifetime,
        )
        .map_err(|e| RotationError::Material {
            field: field.into(),
            reason: e.to_string(),
        })?;
        rotation.cas.push(field.into());
        rotation.next.insert(
            field.into(),
            Certificate {
                certificate: new.certificate_pem().into(),
                private_key: new.private_key_pem().into(),
            },
        );
    }
    if selection.service_account {
        let pair =
            KeyPairPem::generate(options.key_algorithm).map_err(|e| RotationError::Material {
                field: SERVICE_ACCOUNT.into(),
                reason: e.to_string(),
            })?;
        rotation.cas.push(SERVICE_ACCOUNT.into());
        rotation.next_service_account = Some(KeyPair {
            public_key: pair.public_key_pem,
            private_key: pair.private_key_pem,
        });
    }
    cluster.status.ca_rotation = Some(rotation);
    Ok(())
}

/// Moves a rotation on once its phase is ready: trust → reissue (the new CAs into the spec,
/// the old kept as `previous`, the API server's new CA cross-signed by the old), reissue →
/// done. Returns the new phase, `None` when the rotation is done (or there was none).
///
/// # Errors
/// [`RotationError::Phase`]; [`RotationError::Material`] when cross-signing fails.
pub fn advance(
    cluster: &mut Cluster,
    now: OffsetDateTime,
) -> Result<Option<&'static str>, RotationError> {
    let Some(mut rotation) = cluster.status.ca_rotation.take() else {
        return Ok(None);
    };
    match rotation.phase.as_str() {
        TRUST => {
            for (field, next) in std::mem::take(&mut rotation.next) {
                let Some(kind) = kind_of(&field) else {
                    continue;
                };
                let old = ca_slot(cluster, kind).clone();
                if kind == CaKind::ApiServer {
                    let old_ca = load(cluster, kind)?;
                    let new_ca = kind
                        .load(&next.certificate, &next.private_key)
                        .map_err(|e| RotationError::Material {
                            field: format!("status.caRotation.next.{field}"),
                            reason: e.to_string(),
                        })?;
                    let cross =
                        old_ca
                            .cross_sign(&new_ca, now)
                            .map_err(|e| RotationError::Material {
                                field: field.clone(),
                                reason: e.to_string(),
                            })?;
                    rotation.cross_signed.insert(field.clone(), cross);
                }
                if let Some(old) = old {
                    rotation.previous.insert(field.clone(), old.certificate);
                }
                *slot_mut(cluster, kind) = Some(next);
            }
            if let Some(next) = rotation.next_service_account.take() {
                if let Some(old) = cluster.spec.api_server.service_account.take() {
                    rotation.previous_service_account = old.public_key;
                }
                cluster.spec.api_server.service_account = Some(next);
            }
            rotation.phase = REISSUE.into();
            cluster.status.ca_rotation = Some(rotation);
            Ok(Some(REISSUE))
        }
        REISSUE => Ok(None),
        other => {
            let phase = other.to_string();
            cluster.status.ca_rotation = Some(rotation);
            Err(RotationError::Phase { phase })
        }
    }
}

fn join_pem(parts: &[&str]) -> String {
    let mut out = String::new();
    for p in parts.iter().filter(|p| !p.trim().is_empty()) {
        out.push_str(p.trim_end());
        out.push('\n');
    }
    out
}

/// The certificates to trust for CA `kind` (PEM): the current one, and during a rotation the
/// other (the next in the trust phase, the previous in the reissue phase). `None` without a
/// current CA.
pub fn trust_bundle(cluster: &Cluster, kind: CaKind) -> Option<String> {
    let current = ca_slot(cluster, kind)
        .as_ref()
        .filter(|c| !c.certificate.is_empty())?;
    let field = kind.manifest_field();
    let other = cluster.status.ca_rotation.as_ref().and_then(|r| {
        r.next
            .get(field)
            .map(|c| c.certificate.as_str())
            .or_else(|| r.previous.get(field).map(String::as_str))
    });
    Some(match other {
        Some(other) => join_pem(&[&current.certificate, other]),
        None => current.certificate.clone(),
    })
}

/// The CA certificates a leaf of `kind` may be signed by: the current one, and the previous
/// during the reissue phase (until each leaf is reissued).
pub fn accepted_issuers(cluster: &Cluster, kind: CaKind) -> Vec<&str> {
    let mut out = Vec::new();
    if let Some(c) = ca_slot(cluster, kind).as_ref() {
        out.push(c.certificate.as_str());
    }
    if let Some(previous) = cluster
        .status
        .ca_rotation
        .as_ref()
        .and_then(|r| r.previous.get(kind.manifest_field()))
    {
        out.push(previous.as_str());
    }
    out
}

/// What the API server presents: its certificate, and during the reissue phase of a
/// rotation of its CA the new CA cross-signed by the old.
pub fn served_chain(cluster: &Cluster, leaf: &str) -> String {
    match cluster
        .status
        .ca_rotation
        .as_ref()
        .and_then(|r| r.cross_signed.get(CaKind::ApiServer.manifest_field()))
    {
        Some(cross) => join_pem(&[leaf, cross]),
        None => leaf.to_string(),
    }
}

/// The service-account public keys tokens are verified with (PEM): the current, and the
/// other one during a rotation.
pub fn service_account_keys(cluster: &Cluster) -> Option<String> {
    let current = cluster
        .spec
        .api_server
        .service_account
        .as_ref()
        .filter(|k| !k.public_key.is_empty())?;
    let other = cluster.status.ca_rotation.as_ref().and_then(|r| {
        r.next_service_account
            .as_ref()
            .map(|k| k.public_key.as_str())
            .or(Some(r.previous_service_account.as_str()).filter(|p| !p.is_empty()))
    });
    Some(match other {
        Some(other) => join_pem(&[&current.public_key, other]),
        None => current.public_key.clone(),
    })
}

/// What stops working when the rotation's last phase runs.
pub fn last_phase_note(rotation: &CaRotation) -> String {
    let mut lost = Vec::new();
    for field in &rotation.cas {
        let what = match kind_of(field) {
            Some(CaKind::ApiServer) => {
                "kubeconfigs and workers that trust only the old API server CA".to_string()
            }
            Some(CaKind::ApiServerClient) => {
                "client certificates the old API server client CA signed (old admin kubeconfigs)"
                    .to_string()
            }
            Some(kind) => format!("certificates and trust of the old {}", short_name(kind)),
            None => "service-account tokens signed by the old key".to_string(),
        };
        lost.push(what);
    }
    format!(
        "the old CAs leave every trust bundle now: {} stop working (oi cluster admin-kubeconfig gives a new kubeconfig; joined workers need the new CA: join them again)",
        lost.join("; ")
    )
}

#[cfg(test)]
mod tests;
