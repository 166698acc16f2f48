//! containerd (or any CRI runtime) over the CRI `runtime.v1.ImageService` on a unix
//! socket. The messages are the subset of k8s.io/cri-api `api.proto` the node uses, with
//! the upstream field numbers; unknown fields the runtime sends are skipped by prost.

use std::path::PathBuf;
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use super::service::{ImageError, ImageService, PresentImage, PullAuth};

/// CRI `ImageSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    /// Image reference.
    #[prost(string, tag = "1")]
    pub image: String,
    /// Annotations.
    #[prost(map = "string, string", tag = "2")]
    pub annotations: std::collections::HashMap<String, String>,
}

/// CRI `AuthConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CriAuthConfig {
    /// User name.
    #[prost(string, tag = "1")]
    pub username: String,
    /// Password.
    #[prost(string, tag = "2")]
    pub password: String,
    /// base64(`user:password`).
    #[prost(string, tag = "3")]
    pub auth: String,
    /// Registry.
    #[prost(string, tag = "4")]
    pub server_address: String,
    /// OAuth refresh token.
    #[prost(string, tag = "5")]
    pub identity_token: String,
    /// Registry bearer token.
    #[prost(string, tag = "6")]
    pub registry_token: String,
}

/// CRI `Image`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    /// Image ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Repo tags.
    #[prost(string, repeated, tag = "2")]
    pub repo_tags: Vec<String>,
    /// Repo digests.
    #[prost(string, repeated, tag = "3")]
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    #[prost(uint64, tag = "4")]
    pub size: u64,
}

/// CRI `ImageFilter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageFilter {
    /// Image to match.
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
}

/// CRI `ListImagesRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListImagesRequest {
    /// Filter.
    #[prost(message, optional, tag = "1")]
    pub filter: Option<ImageFilter>,
}

/// CRI `ListImagesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListImagesResponse {
    /// Images.
    #[prost(message, repeated, tag = "1")]
    pub images: Vec<Image>,
}

/// CRI `ImageStatusRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageStatusRequest {
    /// Image.
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
    /// Verbose info.
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

/// CRI `ImageStatusResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageStatusResponse {
    /// The image, absent when the runtime does not have it.
    #[prost(message, optional, tag = "1")]
    pub image: Option<Image>,
}

/// CRI `PullImageRequest` (sandbox config, field 3, is not sent).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PullImageRequest {
    /// Image.
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
    /// Credentials.
    #[prost(message, optional, tag = "2")]
    pub auth: Option<CriAuthConfig>,
}

/// CRI `PullImageResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PullImageResponse {
    /// Image reference (ID).
    #[prost(string, tag = "1")]
    pub image_ref: String,
}

/// CRI `RemoveImageRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveImageRequest {
    /// Image.
    #[prost(message, optional, tag = "1")]
    pub image: Option<ImageSpec>,
}

/// CRI `RemoveImageResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveImageResponse {}

/// A CRI image service client on a unix socket.
#[derive(Debug, Clone)]
pub struct CriImageService {
    channel: Channel,
    endpoint: String,
}

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec { image: image.to_owned(), annotations: Default::default() })
}

/// A gRPC channel to a CRI runtime at `unix:///path` (or a bare path); both CRI services
/// share it. The error says why in words.
pub(crate) async fn cri_channel(endpoint: &str) -> Result<Channel, String> {
    let path = match endpoint.strip_prefix("unix://") {
        Some(p) => PathBuf::from(p),
        None if endpoint.starts_with('/') => PathBuf::from(endpoint),
        None => return Err("only unix:// endpoints are supported".into()),
    };
    Endpoint::from_static("http://cri.invalid")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| format!("{e}: {}", std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default()))
}

fn present(i: Image) -> PresentImage {
    PresentImage { id: i.id, repo_tags: i.repo_tags, repo_digests: i.repo_digests, size: i.size }
}

impl CriImageService {
    /// Connects to `unix:///path` (or a bare path), as the kubelet's
    /// `--container-runtime-endpoint`.
    pub async fn connect(endpoint: &str) -> Result<Self, ImageError> {
        let channel = cri_channel(endpoint)
            .await
            .map_err(|reason| ImageError::Connect { endpoint: endpoint.to_owned(), reason })?;
        Ok(Self { channel, endpoint: endpoint.to_owned() })
    }

    async fn call<Req, Resp>(&self, method: &'static str, request: Req, timeout: Duration) -> Result<Resp, ImageError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        cri_unary(&self.channel, method, request, timeout).await.map_err(|e| match e {
            CallError::Connect(reason) => ImageError::Connect { endpoint: self.endpoint.clone(), reason },
            CallError::Status(s) => {
                ImageError::Rpc { code: format!("{:?}", s.code()), message: s.message().to_owned() }
            }
        })
    }
}

/// Why a CRI call failed: the channel, or the runtime's answer.
pub(crate) enum CallError {
    /// The channel was not ready.
    Connect(String),
    /// The runtime answered an error.
    Status(tonic::Status),
}

/// One unary CRI call on `channel` (both services' clients make theirs here).
pub(crate) async fn cri_unary<Req, Resp>(
    channel: &Channel,
    method: &'static str,
    request: Req,
    timeout: Duration,
) -> Result<Resp, CallError>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.map_err(|e| CallError::Connect(e.to_string()))?;
    let mut req = tonic::Request::new(request);
    req.set_timeout(timeout);
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(req, PathAndQuery::from_static(method), codec)
        .await
        .map(tonic::Response::into_inner)
        .map_err(CallError::Status)
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
