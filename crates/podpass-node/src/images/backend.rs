//! The image service chosen at start-up: the embedded store, or containerd over CRI when
//! `--container-runtime-endpoint` is given.

use std::path::Path;

use super::cri::CriImageService;
use super::embedded::EmbeddedImageStore;
use super::progress::PullObserver;
use super::service::{ImageError, ImageService, PresentImage, PullAuth};

/// One of the two backends.
#[derive(Debug)]
pub enum Backend {
    /// `<root-dir>/images`.
    Embedded(EmbeddedImageStore),
    /// containerd (or any CRI runtime) at an endpoint.
    Cri(CriImageService),
}

impl Backend {
    /// The CRI runtime at `endpoint` (`unix:///…`) when given, else the embedded store.
    pub async fn open(
        root_dir: &Path,
        endpoint: Option<&str>,
        insecure_registries: Vec<String>,
    ) -> Result<Self, ImageError> {
        match endpoint {
            Some(ep) => Ok(Self::Cri(CriImageService::connect(ep).await?)),
            None => Ok(Self::Embedded(EmbeddedImageStore::open(root_dir, insecure_registries)?)),
        }
    }

    /// Trusts `pem`'s CA certificates for registries where the backend pulls itself (the
    /// embedded store; a CRI runtime trusts what its own configuration says).
    #[must_use]
    pub fn with_registry_ca(self, pem: Option<Vec<u8>>) -> Self {
        match (self, pem) {
            (Self::Embedded(s), Some(pem)) => Self::Embedded(s.with_registry_ca(pem)),
            (other, _) => other,
        }
    }

    /// Reports pull progress to `observer` where the backend can (the embedded store); a
    /// CRI runtime has no progress to report and is returned unchanged.
    #[must_use]
    pub fn with_progress(self, observer: std::sync::Arc<dyn PullObserver>) -> Self {
        match self {
            Self::Embedded(s) => Self::Embedded(s.with_progress(observer)),
            cri @ Self::Cri(_) => cri,
        }
    }

    /// Whether pulls go through a container runtime, which may take them from a mirror (its
    /// configuration, not the node's), rather than the node's own client.
    pub fn pulls_through_runtime(&self) -> bool {
        matches!(self, Self::Cri(_))
    }

    /// Whether pulls report per-blob progress (the embedded store) or only their result
    /// (CRI).
    pub fn reports_progress(&self) -> bool {
        matches!(self, Self::Embedded(_))
    }
}

impl ImageService for Backend {
    async fn image_status(&self, image: &str) -> Result<Option<PresentImage>, ImageError> {
        match self {
            Self::Embedded(s) => s.image_status(image).await,
            Self::Cri(s) => s.image_status(image).await,
        }
    }

    async fn pull_image(&self, image: &str, auth: Option<&PullAuth>) -> Result<String, ImageError> {
        match self {
            Self::Embedded(s) => s.pull_image(image, auth).await,
            Self::Cri(s) => s.pull_image(image, auth).await,
        }
    }

    async fn list_images(&self) -> Result<Vec<PresentImage>, ImageError> {
        match self {
            Self::Embedded(s) => s.list_images().await,
            Self::Cri(s) => s.list_images().await,
        }
    }

    async fn remove_image(&self, image: &str) -> Result<(), ImageError> {
        match self {
            Self::Embedded(s) => s.remove_image(image).await,
            Self::Cri(s) => s.remove_image(image).await,
        }
    }
}
