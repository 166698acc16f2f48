//! The node's own certificates, as the kubelet's `pkg/kubelet/certificate` and client-go's
//! certificate manager keep them: the TLS bootstrap from a bootstrap token
//! ([`load_client_cert`]), certificates asked of the cluster as CertificateSigningRequests,
//! the serving certificate of `serverTLSBootstrap` ([`ServingIdentity`]), and the
//! `kubelet-client-current.pem` / `kubelet-server-current.pem` file layout.

mod bootstrap;
mod client;
mod manager;
mod request;
mod serving;
mod store;

use std::path::PathBuf;

use thiserror::Error;

pub use bootstrap::{
    BOOTSTRAP_TIMEOUT, BootstrapPaths, Bootstrapped, client_config_still_valid, kubeconfig_client_pair,
    load_client_cert,
};
pub use client::{RotatingIdentity, client_with_identity};
pub use manager::{ShowsCertificate, issue_with_retry, rotate_certificate, rotate_client_certificate};
pub use request::Template;
pub use serving::{ServingIdentity, still_serves};
pub use store::{CLIENT_PREFIX, CertificateStore, SERVER_PREFIX, StoredPair};

/// A PEM text holding a certificate chain and its one key, read as a stored pair.
pub fn parse_stored_pair(text: &str) -> Result<StoredPair, CertificateError> {
    store::parse_pair(text).map_err(|e| CertificateError::Issued { reason: e.to_string() })
}

/// A certificate could not be had or kept.
#[derive(Debug, Error)]
pub enum CertificateError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// Which.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A stored certificate file is not a certificate and its key.
    #[error("{}: {reason}", path.display())]
    Stored {
        /// Which.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The bootstrap kubeconfig is unusable.
    #[error("--bootstrap-kubeconfig {}: {reason}", path.display())]
    BootstrapKubeconfig {
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The node's kubeconfig is unusable.
    #[error("--kubeconfig {}: {reason}", path.display())]
    Kubeconfig {
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A key could not be made or read, or a request encoded.
    #[error("private key: {0}")]
    Key(String),
    /// The API refused or could not be reached.
    #[error("{object}: {}", crate::api::RequestError::from(source))]
    Request {
        /// What was asked for.
        object: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A request of the node's name exists and asks something else.
    #[error("certificatesigningrequest {name} exists and does not match this node's request: {reason}")]
    Conflict {
        /// The request's name.
        name: String,
        /// How it differs.
        reason: String,
    },
    /// The request was denied.
    #[error("certificatesigningrequest {name} was denied ({reason}): {message}")]
    Denied {
        /// The request's name.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// The request failed.
    #[error("certificatesigningrequest {name} failed ({reason}): {message}")]
    Failed {
        /// The request's name.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// No certificate came in time.
    #[error(
        "certificatesigningrequest {name} was not issued within {seconds}s: is it approved (kubectl certificate approve {name}), and is a controller manager signing?"
    )]
    Timeout {
        /// The request's name.
        name: String,
        /// How long it was waited for.
        seconds: u64,
    },
    /// The issued certificate cannot be used.
    #[error("the issued certificate is unusable: {reason}")]
    Issued {
        /// Why.
        reason: String,
    },
}

impl CertificateError {
    fn request(object: String, source: kube::Error) -> Self {
        Self::Request { object, source }
    }
}
