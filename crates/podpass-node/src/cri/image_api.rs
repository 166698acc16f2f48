//! The `runtime.v1.ImageService` messages the node sends and reads — the subset of
//! k8s.io/cri-api `api.proto` the node uses, with the upstream field numbers.

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

/// CRI `ImageFsInfoRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageFsInfoRequest {}

/// CRI `FilesystemIdentifier`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FilesystemIdentifier {
    /// Where the filesystem is mounted.
    #[prost(string, tag = "1")]
    pub mountpoint: String,
}

/// CRI `FilesystemUsage` as `ImageFsInfo` answers it (only the filesystem).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageFsUsage {
    /// The filesystem.
    #[prost(message, optional, tag = "2")]
    pub fs_id: Option<FilesystemIdentifier>,
}

/// CRI `ImageFsInfoResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageFsInfoResponse {
    /// The filesystems holding images.
    #[prost(message, repeated, tag = "1")]
    pub image_filesystems: Vec<ImageFsUsage>,
}
