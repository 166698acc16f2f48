//! The image service the node pulls through (kubelet: `kubecontainer.ImageService` over the
//! CRI `runtime.v1.ImageService`): one trait, two backends — the embedded OCI store
//! ([`super::embedded::EmbeddedImageStore`]) and containerd over CRI ([`super::cri::CriImageService`]).

use std::future::Future;

use thiserror::Error;

pub use super::pull_manager::PresentImage;

/// Credentials for one pull (CRI `AuthConfig`; the kubelet fills username and password).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PullAuth {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

impl std::fmt::Debug for PullAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullAuth").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

/// What the image service reports.
#[derive(Debug, Error)]
pub enum ImageError {
    /// The reference does not parse.
    #[error("{0}")]
    Reference(#[from] super::reference::ReferenceError),
    /// The registry refused the credentials (or wanted some).
    #[error("failed to authorize: {0}")]
    Unauthorized(String),
    /// The registry has no such image.
    #[error("{0}: not found")]
    NotFound(String),
    /// Content did not match its digest or size.
    #[error("{what}: digest mismatch: expected {expected}, got {actual}")]
    Digest {
        /// What was fetched.
        what: String,
        /// Wanted.
        expected: String,
        /// Got.
        actual: String,
    },
    /// The registry answered something this store cannot use.
    #[error("{0}")]
    Unsupported(String),
    /// Talking to the registry failed.
    #[error("{0}")]
    Registry(String),
    /// The runtime (CRI) failed.
    #[error("rpc error: code = {code} desc = {message}")]
    Rpc {
        /// gRPC status code name.
        code: String,
        /// Its message.
        message: String,
    },
    /// Connecting to the runtime failed.
    #[error("connecting to the container runtime at {endpoint}: {reason}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// Local storage failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Local state does not decode.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
}

/// The runtime's image operations the node needs.
pub trait ImageService: Send + Sync {
    /// CRI `ImageStatus`: the image `image` names (a tag, a digest reference or an image
    /// ID), or `None` when the runtime does not have it.
    fn image_status(&self, image: &str) -> impl Future<Output = Result<Option<PresentImage>, ImageError>> + Send;
    /// CRI `PullImage`: always goes to the registry; returns the image reference (ID).
    fn pull_image(
        &self,
        image: &str,
        auth: Option<&PullAuth>,
    ) -> impl Future<Output = Result<String, ImageError>> + Send;
    /// CRI `ListImages`.
    fn list_images(&self) -> impl Future<Output = Result<Vec<PresentImage>, ImageError>> + Send;
    /// CRI `RemoveImage` (absent is not an error).
    fn remove_image(&self, image: &str) -> impl Future<Output = Result<(), ImageError>> + Send;
}
