//! oneinfra-rs PKI: the certificate authorities, keys, leaf certificates and kubeconfigs of a
//! managed cluster.
//!
//! Pure: no file or network I/O, and time is an input (`now`, `lifetime`). Randomness is
//! the one exception, on purpose: keys and serial numbers come from the operating system's
//! CSPRNG, never from a seed.
//!
//! Every cluster has eight CAs, stored in its Cluster manifest (see [`CaKind`]), plus two key
//! pairs. [`ClusterPki::generate`] makes them all; [`CaKind::load`] reads them back so they
//! keep signing. Each leaf role has a [`LeafSpec`] constructor that names its CA:
//!
//! ```text
//!  CA (Cluster field)                            signs (LeafSpec::...)          usage
//!  ───────────────────────────────────────────   ─────────────────────────────  ──────────────
//!  spec.apiServer.ca                             kube_apiserver                 server
//!  spec.certificateAuthorities.apiServerClient   admin, controller_manager,     client
//!                                                scheduler, client(..)
//!  spec.certificateAuthorities.certificateSigner (controller-manager CSR signing: node
//!                                                client certificates)
//!  spec.certificateAuthorities.kubelet           kubelet_serving                server
//!  spec.certificateAuthorities.kubeletClient     apiserver_kubelet_client       client
//!  spec.etcdServer.ca                            etcd_server                    server+client
//!  spec.certificateAuthorities.etcdClient        apiserver_etcd_client          client
//!  spec.certificateAuthorities.etcdPeer          etcd_peer                      server+client
//!
//!  spec.apiServer.serviceAccount   key pair: service-account token signing (cluster algorithm)
//!  spec.joinKey                    key pair: node join requests (cluster algorithm)
//!
//!  join key   wraps a node's SymmetricKey with        wire (standard base64, unpadded)
//!  ────────   ─────────────────────────────────────   ───────────────────────────────────
//!  RSA-n      RSA-OAEP, SHA-256 (oneinfra's)          ciphertext (n/8 bytes)
//!  EC P-256   ECIES v1: ECDH, HKDF-SHA256, AES-GCM    0x01 ‖ E (65) ‖ nonce (12) ‖ ct ‖ tag
//!  EC P-384   ECIES v1: ECDH, HKDF-SHA256, AES-GCM    0x02 ‖ E (97) ‖ nonce (12) ‖ ct ‖ tag
//! ```
//!
//! E is a fresh ephemeral public key (SEC1 uncompressed); [`encrypt_to_join_key`] gives the
//! derivation. ECIES is this crate's: oneinfra itself only has RSA join keys.
//!
//! CAs carry basicConstraints CA:TRUE and keyCertSign, cRLSign, digitalSignature. Leaves get
//! digitalSignature (plus keyEncipherment for RSA keys), CA:FALSE, a random 16-byte serial,
//! an authority key identifier, and a validity starting [`BACKDATE`] before `now` for clock
//! skew. A leaf's key follows its CA's algorithm unless its spec says otherwise.
//!
//! [`inspect_certificate`], [`is_signed_by`] and [`needs_renewal`] read certificates back for
//! the reconciler; [`kubeconfig`] renders the files components and users connect with;
//! [`SymmetricKey`] and the join key carry node join requests.

mod ca;
mod check;
mod cluster;
mod inspect;
mod join;
mod key;
mod kubeconfig;
mod leaf;

pub use ca::{BACKDATE, CertificateAuthority, CertificatePem};
pub use check::{
    check_ca, check_ca_certificate, check_key_pair, check_leaf, check_wireguard_keys,
    generate_wireguard_keys, wireguard_public_key,
};
pub use cluster::{CaKind, ClusterPki, JOIN_KEY_FIELD, SERVICE_ACCOUNT_FIELD, join_key_algorithm};
pub use inspect::{
    CertificateInfo, KeyUsages, RenewalReason, inspect_certificate, is_signed_by, needs_renewal,
    renewal_reason,
};
pub use join::{
    ECIES_INFO_V1, ECIES_P256_V1, ECIES_P384_V1, SymmetricKey, decrypt_with_join_key,
    encrypt_to_join_key,
};
pub use key::{KeyAlgorithm, KeyPairPem};
pub use kubeconfig::kubeconfig;
pub use leaf::{
    LeafSpec, SYSTEM_MASTERS, SYSTEM_NODES, Usage, apiserver_sans, etcd_sans, service_cidr_first_ip,
};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A key algorithm flag that [`KeyAlgorithm`] does not know.
    #[error(
        "unknown key algorithm {value:?} (expected one of ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072, rsa-4096)"
    )]
    UnknownKeyAlgorithm {
        /// The value given.
        value: String,
    },
    /// Generating a key failed.
    #[error("generating a {algorithm} key")]
    KeyGeneration {
        /// The algorithm asked for.
        algorithm: KeyAlgorithm,
        /// The underlying failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A private key PEM that does not parse.
    #[error("invalid private key of {what}: {reason}")]
    InvalidPrivateKey {
        /// Whose key (a CA's common name, a manifest field).
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// A key of an algorithm or size [`KeyAlgorithm`] does not list.
    #[error("unsupported key of {what}: {detail}")]
    UnsupportedKey {
        /// Whose key.
        what: String,
        /// What it is.
        detail: String,
    },
    /// A certificate PEM that does not parse.
    #[error("invalid certificate: {reason}")]
    InvalidCertificate {
        /// Why it was refused.
        reason: String,
    },
    /// A certificate loaded as a CA that is not one.
    #[error("certificate {common_name:?} is not a CA (no basicConstraints CA:TRUE)")]
    NotACa {
        /// Its subject CN.
        common_name: String,
    },
    /// A private key that is not the one of its certificate.
    #[error("the private key is not the one of certificate {common_name:?}")]
    KeyMismatch {
        /// The certificate's subject CN.
        common_name: String,
    },
    /// A leaf certificate that is a CA.
    #[error("certificate {common_name:?} is a CA (basicConstraints CA:TRUE), not a leaf")]
    LeafIsACa {
        /// Its subject CN.
        common_name: String,
    },
    /// A leaf not signed by the CA that should have signed it.
    #[error("certificate {common_name:?} is not signed by CA {issuer:?}")]
    NotSignedBy {
        /// The leaf's subject CN.
        common_name: String,
        /// The CA's subject CN.
        issuer: String,
    },
    /// A public key PEM that does not parse.
    #[error("invalid public key: {reason}")]
    InvalidPublicKey {
        /// Why it was refused.
        reason: String,
    },
    /// A WireGuard key that is not base64 of 32 bytes.
    #[error("invalid WireGuard {which} key: {reason}")]
    InvalidWireguardKey {
        /// `private` or `public`.
        which: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// A public key that is not the public half of its private key.
    #[error("the public key is not the one of the private key")]
    PublicKeyMismatch,
    /// A CA asked to sign after its own expiry.
    #[error("CA {common_name:?} expired at {not_after}")]
    CaExpired {
        /// The CA's subject CN.
        common_name: String,
        /// When it expired.
        not_after: time::OffsetDateTime,
    },
    /// A zero, negative or overflowing lifetime.
    #[error("invalid lifetime {lifetime} for certificate {common_name:?}")]
    InvalidLifetime {
        /// The certificate's subject CN.
        common_name: String,
        /// The lifetime given.
        lifetime: time::Duration,
    },
    /// An empty subject common name or organization.
    #[error("invalid subject name value {value:?}")]
    InvalidName {
        /// The value given.
        value: String,
    },
    /// More subject organizations than can be encoded.
    #[error("certificate {common_name:?} has {count} organizations, at most 2 are supported")]
    TooManyOrganizations {
        /// The certificate's subject CN.
        common_name: String,
        /// How many were asked for.
        count: usize,
    },
    /// A subject alternative name that is neither an IP address nor a DNS name.
    #[error("invalid subject alternative name {value:?}: {reason}")]
    InvalidSan {
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// A service CIDR without a first host address.
    #[error("invalid service CIDR {value:?}: {reason}")]
    InvalidServiceCidr {
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// rcgen refused to sign.
    #[error("signing certificate {common_name:?}")]
    Signing {
        /// The subject CN of the certificate being signed.
        common_name: String,
        /// The underlying failure.
        #[source]
        source: rcgen::Error,
    },
    /// Rendering a kubeconfig failed.
    #[error("rendering the kubeconfig of user {user_name:?} for cluster {cluster_name:?}")]
    Kubeconfig {
        /// The cluster.
        cluster_name: String,
        /// The user.
        user_name: String,
        /// The underlying failure.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A symmetric key of a length AES-GCM here does not take.
    #[error("symmetric key of {length} bytes (expected 16 or 32)")]
    InvalidSymmetricKey {
        /// The length given.
        length: usize,
    },
    /// Join crypto failed.
    #[error("join crypto {operation}: {reason}")]
    Join {
        /// `wrap`, `unwrap`, `seal` or `open`.
        operation: &'static str,
        /// Why.
        reason: String,
    },
    /// A join ciphertext made for another type of join key than the one given.
    #[error("join crypto unwrap: the join key is {key}, but the ciphertext is {ciphertext}")]
    JoinSchemeMismatch {
        /// The join private key's type, for example `an EC P-256 key`.
        key: &'static str,
        /// What the ciphertext looks like, for example `an ECIES P-384 ciphertext`.
        ciphertext: &'static str,
    },
    /// An error about the value of one manifest field.
    #[error("{field}")]
    Field {
        /// The field, for example `spec.certificateAuthorities.etcdPeer`.
        field: &'static str,
        /// What is wrong with it.
        #[source]
        source: Box<Error>,
    },
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
