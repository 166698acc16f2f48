//! containerd (or any CRI runtime) over the CRI `runtime.v1.ImageService`, through the
//! node's one CRI connection ([`crate::cri`]).

use std::time::Duration;

use tonic::transport::Channel;

use super::service::{ImageError, ImageService, PresentImage, PullAuth};
use crate::cri::{
    CallError, CriAuthConfig, Image, ImageSpec, ImageStatusRequest, ImageStatusResponse, ListImagesRequest,
    ListImagesResponse, PullImageRequest, PullImageResponse, RemoveImageRequest, RemoveImageResponse,
};

/// A CRI image service client on a unix socket.
#[derive(Debug, Clone)]
pub struct CriImageService {
    channel: Channel,
    endpoint: String,
}

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec { image: image.to_owned(), annotations: Default::default() })
}

fn present(i: Image) -> PresentImage {
    PresentImage { id: i.id, repo_tags: i.repo_tags, repo_digests: i.repo_digests, size: i.size }
}

impl CriImageService {
    /// Connects to `unix:///path` (or a bare path), as the kubelet's
    /// `--container-runtime-endpoint`.
    pub async fn connect(endpoint: &str) -> Result<Self, ImageError> {
        let channel = crate::cri::connect(endpoint)
            .await
            .map_err(|e| ImageError::Connect { endpoint: endpoint.to_owned(), reason: e.to_string() })?;
        Ok(Self { channel, endpoint: endpoint.to_owned() })
    }

    async fn call<Req, Resp>(&self, method: &'static str, request: Req, timeout: Duration) -> Result<Resp, ImageError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        crate::cri::unary(&self.channel, method, request, timeout).await.map_err(|e| match e {
            CallError::Connect(reason) => ImageError::Connect { endpoint: self.endpoint.clone(), reason },
            CallError::Status(s) => {
                ImageError::Rpc { code: format!("{:?}", s.code()), message: s.message().to_owned() }
            }
        })
    }
}

impl ImageService for CriImageService {
    async fn image_status(&self, image: &str) -> Result<Option<PresentImage>, ImageError> {
        let r: ImageStatusResponse = self
            .call(
                "/runtime.v1.ImageService/ImageStatus",
                ImageStatusRequest { image: spec(image), verbose: false },
                Duration::from_secs(120),
            )
            .await?;
        Ok(r.image.map(present))
    }

    async fn pull_image(&self, image: &str, auth: Option<&PullAuth>) -> Result<String, ImageError> {
        let auth = auth.map(|a| CriAuthConfig {
            username: a.username.clone(),
            password: a.password.clone(),
            ..Default::default()
        });
        // The kubelet's CRI client gives pulls no deadline of their own; bound it anyway.
        let r: PullImageResponse = self
            .call(
                "/runtime.v1.ImageService/PullImage",
                PullImageRequest { image: spec(image), auth },
                Duration::from_secs(600),
            )
            .await?;
        Ok(r.image_ref)
    }

    async fn list_images(&self) -> Result<Vec<PresentImage>, ImageError> {
        let r: ListImagesResponse = self
            .call("/runtime.v1.ImageService/ListImages", ListImagesRequest { filter: None }, Duration::from_secs(120))
            .await?;
        Ok(r.images.into_iter().map(present).collect())
    }

    async fn remove_image(&self, image: &str) -> Result<(), ImageError> {
        let _: RemoveImageResponse = self
            .call(
                "/runtime.v1.ImageService/RemoveImage",
                RemoveImageRequest { image: spec(image) },
                Duration::from_secs(120),
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn wire_layout_matches_cri_field_numbers() {
        let req = PullImageRequest {
            image: spec("a"),
            auth: Some(CriAuthConfig { username: "u".into(), password: "p".into(), ..Default::default() }),
        };
        // field 1 (ImageSpec{field 1 "a"}), field 2 (AuthConfig{1 "u", 2 "p"}).
        assert_eq!(req.encode_to_vec(), [0x0a, 3, 0x0a, 1, b'a', 0x12, 6, 0x0a, 1, b'u', 0x12, 1, b'p']);
        // An Image with fields this client does not know (uid = 5, spec = 7, pinned = 8).
        let mut wire =
            Image { id: "sha256:x".into(), repo_tags: vec!["t".into()], repo_digests: vec![], size: 7 }.encode_to_vec();
        wire.extend([0x40, 1]);
        let back = Image::decode(wire.as_slice()).unwrap();
        assert_eq!((back.id.as_str(), back.size), ("sha256:x", 7));
    }
}
