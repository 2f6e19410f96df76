//! The set of CAs and key pairs oneinfra keeps per cluster.

use std::fmt;

use time::{Duration, OffsetDateTime};

use crate::{
    CertificateAuthority, CertificatePem, Error, KeyAlgorithm, KeyPairPem, LeafSpec, Result,
};

/// One of a cluster's certificate authorities, named after the Cluster field that stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CaKind {
    /// `spec.apiServer.ca`: signs the kube-apiserver serving certificate.
    ApiServer,
    /// `spec.certificateAuthorities.apiServerClient`: signs client certificates the API
    /// server accepts (admin, controller-manager, scheduler).
    ApiServerClient,
    /// `spec.certificateAuthorities.certificateSigner`: the controller-manager's CSR signer.
    CertificateSigner,
    /// `spec.certificateAuthorities.kubelet`: signs kubelet serving certificates.
    Kubelet,
    /// `spec.certificateAuthorities.kubeletClient`: signs the API server's client
    /// certificate towards kubelets.
    KubeletClient,
    /// `spec.etcdServer.ca`: signs etcd serving certificates.
    EtcdServer,
    /// `spec.certificateAuthorities.etcdClient`: signs etcd client certificates.
    EtcdClient,
    /// `spec.certificateAuthorities.etcdPeer`: signs etcd peer certificates.
    EtcdPeer,
}

impl CaKind {
    /// Every CA of a cluster.
    pub const ALL: [CaKind; 8] = [
        CaKind::ApiServer,
        CaKind::ApiServerClient,
        CaKind::CertificateSigner,
        CaKind::Kubelet,
        CaKind::KubeletClient,
        CaKind::EtcdServer,
        CaKind::EtcdClient,
        CaKind::EtcdPeer,
    ];

    /// Where oneinfra's Cluster keeps this CA.
    pub fn manifest_field(self) -> &'static str {
        match self {
            CaKind::ApiServer => "spec.apiServer.ca",
            CaKind::ApiServerClient => "spec.certificateAuthorities.apiServerClient",
            CaKind::CertificateSigner => "spec.certificateAuthorities.certificateSigner",
            CaKind::Kubelet => "spec.certificateAuthorities.kubelet",
            CaKind::KubeletClient => "spec.certificateAuthorities.kubeletClient",
            CaKind::EtcdServer => "spec.etcdServer.ca",
            CaKind::EtcdClient => "spec.certificateAuthorities.etcdClient",
            CaKind::EtcdPeer => "spec.certificateAuthorities.etcdPeer",
        }
    }

    /// The CA certificate's common name is `<cluster>-<suffix>`.
    pub fn common_name_suffix(self) -> &'static str {
        match self {
            CaKind::ApiServer => "apiserver-ca",
            CaKind::ApiServerClient => "apiserver-client-ca",
            CaKind::CertificateSigner => "certificate-signer-ca",
            CaKind::Kubelet => "kubelet-ca",
            CaKind::KubeletClient => "kubelet-client-ca",
            CaKind::EtcdServer => "etcd-server-ca",
            CaKind::EtcdClient => "etcd-client-ca",
            CaKind::EtcdPeer => "etcd-peer-ca",
        }
    }

    /// Loads this CA from the PEM its manifest field holds; errors name the field.
    ///
    /// # Errors
    /// [`Error::Field`] around any error of [`CertificateAuthority::from_pem`].
    pub fn load(
        self,
        certificate_pem: &str,
        private_key_pem: &str,
    ) -> Result<CertificateAuthority> {
        CertificateAuthority::from_pem(certificate_pem, private_key_pem).map_err(|e| Error::Field {
            field: self.manifest_field(),
            source: Box::new(e),
        })
    }
}

impl fmt::Display for CaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.manifest_field())
    }
}

/// Where oneinfra's Cluster keeps the service-account key pair.
pub const SERVICE_ACCOUNT_FIELD: &str = "spec.apiServer.serviceAccount";
/// Where oneinfra's Cluster keeps the join key pair.
pub const JOIN_KEY_FIELD: &str = "spec.joinKey";

/// All of a cluster's CAs and key pairs. Fields map one to one to the Cluster manifest (see
/// [`CaKind::manifest_field`], [`SERVICE_ACCOUNT_FIELD`], [`JOIN_KEY_FIELD`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPki {
    /// `spec.apiServer.ca`.
    pub api_server: CertificateAuthority,
    /// `spec.certificateAuthorities.apiServerClient`.
    pub api_server_client: CertificateAuthority,
    /// `spec.certificateAuthorities.certificateSigner`.
    pub certificate_signer: CertificateAuthority,
    /// `spec.certificateAuthorities.kubelet`.
    pub kubelet: CertificateAuthority,
    /// `spec.certificateAuthorities.kubeletClient`.
    pub kubelet_client: CertificateAuthority,
    /// `spec.etcdServer.ca`.
    pub etcd_server: CertificateAuthority,
    /// `spec.certificateAuthorities.etcdClient`.
    pub etcd_client: CertificateAuthority,
    /// `spec.certificateAuthorities.etcdPeer`.
    pub etcd_peer: CertificateAuthority,
    /// `spec.apiServer.serviceAccount`: signs and verifies service-account tokens
    /// (kube-apiserver `--service-account-key-file`/`--service-account-signing-key-file`,
    /// controller-manager `--service-account-private-key-file`).
    pub service_account: KeyPairPem,
    /// `spec.joinKey`: joining nodes encrypt their symmetric key to its public half. Of the
    /// cluster's algorithm (see [`join_key_algorithm`] and [`crate::encrypt_to_join_key`]).
    pub join_key: KeyPairPem,
}

/// The algorithm of a cluster's join key: the cluster's own. RSA join keys wrap with
/// RSA-OAEP as oneinfra does; EC join keys wrap with ECIES on their curve, so an ECDSA
/// cluster never pays for RSA key generation (0.3-1 s for 2048 bits, against well under a
/// millisecond for a P-256 key). Kept as a function so that callers that mint the join key
/// themselves stay in step with [`ClusterPki::generate`].
pub fn join_key_algorithm(algorithm: KeyAlgorithm) -> KeyAlgorithm {
    algorithm
}

impl ClusterPki {
    /// Generates every CA (CN `<cluster_name>-<suffix>`, valid `lifetime` from `now`), the
    /// service-account key pair (of `algorithm`) and the join key pair.
    ///
    /// # Errors
    /// As [`CertificateAuthority::generate`] and [`KeyPairPem::generate`].
    pub fn generate(
        cluster_name: &str,
        algorithm: KeyAlgorithm,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<Self> {
        let ca = |kind: CaKind| {
            CertificateAuthority::generate(
                &format!("{cluster_name}-{}", kind.common_name_suffix()),
                algorithm,
                now,
                lifetime,
            )
        };
        Ok(ClusterPki {
            api_server: ca(CaKind::ApiServer)?,
            api_server_client: ca(CaKind::ApiServerClient)?,
            certificate_signer: ca(CaKind::CertificateSigner)?,
            kubelet: ca(CaKind::Kubelet)?,
            kubelet_client: ca(CaKind::KubeletClient)?,
            etcd_server: ca(CaKind::EtcdServer)?,
            etcd_client: ca(CaKind::EtcdClient)?,
            etcd_peer: ca(CaKind::EtcdPeer)?,
            service_account: KeyPairPem::generate(algorithm)?,
            join_key: KeyPairPem::generate(join_key_algorithm(algorithm))?,
        })
    }

    /// The CA of a kind.
    pub fn ca(&self, kind: CaKind) -> &CertificateAuthority {
        match kind {
            CaKind::ApiServer => &self.api_server,
            CaKind::ApiServerClient => &self.api_server_client,
            CaKind::CertificateSigner => &self.certificate_signer,
            CaKind::Kubelet => &self.kubelet,
            CaKind::KubeletClient => &self.kubelet_client,
            CaKind::EtcdServer => &self.etcd_server,
            CaKind::EtcdClient => &self.etcd_client,
            CaKind::EtcdPeer => &self.etcd_peer,
        }
    }

    /// Issues a leaf with the CA its spec names.
    ///
    /// # Errors
    /// As [`CertificateAuthority::issue`].
    pub fn issue(
        &self,
        spec: &LeafSpec,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<CertificatePem> {
        self.ca(spec.issuer).issue(spec, now, lifetime)
    }
}
