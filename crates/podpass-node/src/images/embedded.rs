//! The embedded image store: images pulled with `oci-client` into a content-addressed
//! store under `<root-dir>/images`, shaped like containerd's as the CRI shows it: the image
//! ID is the config digest, repo tags are fully-qualified (`docker.io/library/nginx:1`),
//! repo digests are `name@<manifest digest>`.
//!
//! Layout: `blobs/sha256/<hex>` (manifest, config, layers; each verified by digest and
//! size before it is renamed into place), `ingest/` (downloads in progress) and
//! `images.json` (the image list; written tmp + fsync + rename + directory fsync).
//!
//! Every pull builds a fresh registry client: a bearer token fetched with one pod's
//! credentials must never serve another pod's pull.

use std::net::IpAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use aws_lc_rs::digest;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;

use super::manifest_fetch;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::progress::{BlobInfo, BlobKind, PullObserver, PullProgress};
use super::reference::{self, ImageReference};
use super::service::{ImageError, ImageService, PresentImage, PullAuth};

/// Distinguishes concurrent downloads of one blob within a process.
static INGEST_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// An image in the store (`images.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredImage {
    id: String,
    repo_tags: Vec<String>,
    repo_digests: Vec<String>,
    manifest_digest: String,
    size: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    images: Vec<StoredImage>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// The embedded, content-addressed image store.
#[derive(Debug)]
pub struct EmbeddedImageStore {
    root: PathBuf,
    insecure_registries: Vec<String>,
    /// A PEM CA bundle trusted for registries beside the system's; with one, loopback
    /// registries are reached over HTTPS too (only `insecure_registries` over HTTP).
    registry_ca: Option<Vec<u8>>,
    // Serialises changes to images.json; blobs are written without it (content-addressed).
    state_lock: tokio::sync::Mutex<()>,
    progress: Option<std::sync::Arc<dyn PullObserver>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io { path: path.to_owned(), source }
}

fn sha256_hex(data: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(digest::digest(&digest::SHA256, data).as_ref())
}

/// Whether `registry` (`host[:port]`) may be reached over plain HTTP: loopback hosts
/// (containerd's localhost fallback) and registries named by `--insecure-registry`.
pub fn plain_http_allowed(registry: &str, insecure: &[String]) -> bool {
    if insecure.iter().any(|r| r == registry) {
        return true;
    }
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        registry.rsplit_once(':').map_or(registry, |(h, _)| h)
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The hex of a `sha256:<hex>` digest, refusing anything else (it becomes a file name).
fn digest_hex(d: &str) -> Result<&str, ImageError> {
    match d.strip_prefix("sha256:") {
        Some(hex) if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => Ok(hex),
        _ => Err(ImageError::Unsupported(format!("unsupported digest {d:?}"))),
    }
}

pub(crate) fn map_oci(what: &str, e: OciDistributionError) -> ImageError {
    match e {
        OciDistributionError::AuthenticationFailure(m) => ImageError::Unauthorized(m.trim().to_owned()),
        OciDistributionError::UnauthorizedError { url } => {
            ImageError::Unauthorized(format!("unexpected status from GET request to {url}: 401 Unauthorized"))
        }
        OciDistributionError::ImageManifestNotFoundError(_) => ImageError::NotFound(what.to_owned()),
        OciDistributionError::RegistryError { envelope, url } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            let messages: Vec<&str> = envelope.errors.iter().map(|e| e.message.as_str()).collect();
            if codes.iter().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                ImageError::Unauthorized(format!("{url}: {}", messages.join("; ")))
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                ImageError::NotFound(what.to_owned())
            } else {
                ImageError::Registry(format!("{url}: {}", messages.join("; ")))
            }
        }
        OciDistributionError::DigestError(d) => ImageError::Registry(format!("{what}: {d}")),
        other => ImageError::Registry(format!("{what}: {other}")),
    }
}

/// Removes downloads left in `ingest/` by processes that are gone (a crash or kill mid-pull).
/// Ingest names are `<hex>.<pid>.<seq>`: a live process's downloads are left alone, since
/// several processes may share the store.
fn clean_ingest(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let pid = name.split('.').nth(1).and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(podpass_serve::durable::writer_alive);
        if !alive {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The HTTP client for manifest GETs (same timeouts and trust as the registry client).
fn http_client(registry_ca: Option<&[u8]>) -> Result<reqwest::Client, ImageError> {
    let mut builder = reqwest::Client::builder();
    if let Some(pem) = registry_ca {
        for cert in reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| ImageError::Registry(format!("registry CA bundle: {e}")))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .connect_timeout(std::time::Duration::from_secs(10))
        .read_timeout(std::time::Duration::from_secs(60))
        .user_agent(concat!("podpass/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ImageError::Registry(format!("HTTP client: {e}")))
}

impl EmbeddedImageStore {
    /// Opens (creating) the store under `<root_dir>/images`. `insecure_registries` may be
    /// reached over plain HTTP in addition to loopback ones.
    pub fn open(root_dir: &Path, insecure_registries: Vec<String>) -> Result<Self, ImageError> {
        let root = root_dir.join("images");
        for dir in [root.join("blobs").join("sha256"), root.join("ingest")] {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(io(&dir))?;
        }
        // Left by processes killed mid-pull: partial downloads, and tmp files of blobs and of
        // the image list (`durable::replace`). At open, so one-shot commands clean up too.
        clean_ingest(&root.join("ingest"));
        let stale = podpass_serve::durable::remove_stale_tmp(&root.join("blobs").join("sha256"))
            + podpass_serve::durable::remove_stale_tmp(&root);
        if stale > 0 {
            tracing::info!(files = stale, "tmp files of interrupted image store writes removed");
        }
        Ok(Self {
            root,
            insecure_registries,
            registry_ca: None,
            state_lock: tokio::sync::Mutex::new(()),
            progress: None,
        })
    }

    /// Reports every pull's progress (blobs resolved, bytes, each blob done) to `observer`.
    #[must_use]
    pub fn with_progress(mut self, observer: std::sync::Arc<dyn PullObserver>) -> Self {
        self.progress = Some(observer);
        self
    }

    /// Trusts the CA certificates of `pem` for registries, and reaches loopback registries
    /// over HTTPS (a cluster whose registry serves TLS from its own CA): no credential
    /// crosses loopback in clear.
    #[must_use]
    pub fn with_registry_ca(mut self, pem: Vec<u8>) -> Self {
        self.registry_ca = Some(pem);
        self
    }

    /// Whether `registry` is reached over plain HTTP.
    fn plain_http(&self, registry: &str) -> bool {
        match self.registry_ca {
            Some(_) => self.insecure_registries.iter().any(|r| r == registry),
            None => plain_http_allowed(registry, &self.insecure_registries),
        }
    }

    fn report(&self, event: &PullProgress<'_>) {
        if let Some(o) = &self.progress {
            o.observe(event);
        }
    }

    fn blob_path(&self, hex: &str) -> PathBuf {
        self.root.join("blobs").join("sha256").join(hex)
    }

    fn state_path(&self) -> PathBuf {
        self.root.join("images.json")
    }

    async fn read_state(&self) -> Result<State, ImageError> {
        let path = self.state_path();
        match tokio::fs::read(&path).await {
            Ok(data) => serde_json::from_slice(&data)
                .map_err(|e| ImageError::Corrupt { path: path.clone(), reason: e.to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    async fn write_state(&self, state: &State) -> Result<(), ImageError> {
        let path = self.state_path();
        let data = serde_json::to_vec_pretty(state)
            .map_err(|e| ImageError::Corrupt { path: path.clone(), reason: e.to_string() })?;
        tokio::task::spawn_blocking(move || write_durably(&path, &data))
            .await
            .map_err(|e| ImageError::Registry(format!("store writer: {e}")))?
    }

    /// Reads a blob, checking it against its digest.
    async fn read_blob(&self, d: &str) -> Result<Vec<u8>, ImageError> {
        let path = self.blob_path(digest_hex(d)?);
        let data = tokio::fs::read(&path).await.map_err(io(&path))?;
        let actual = format!("sha256:{}", sha256_hex(&data));
        if actual != d {
            return Err(ImageError::Digest { what: path.display().to_string(), expected: d.to_owned(), actual });
        }
        Ok(data)
    }

    /// Stores `data` as the blob `expected` (verified).
    async fn put_blob(&self, expected: &str, data: &[u8], fresh: &mut Vec<String>) -> Result<(), ImageError> {
        let hex = digest_hex(expected)?.to_owned();
        let actual = sha256_hex(data);
        if actual != hex {
            return Err(ImageError::Digest {
                what: "manifest".into(),
                expected: expected.to_owned(),
                actual: format!("sha256:{actual}"),
            });
        }
        let path = self.blob_path(&hex);
        if tokio::fs::metadata(&path).await.is_err() {
            fresh.push(expected.to_owned());
        }
        let data = data.to_vec();
        tokio::task::spawn_blocking(move || write_durably(&path, &data))
            .await
            .map_err(|e| ImageError::Registry(format!("store writer: {e}")))?
    }

    /// Downloads a blob unless the store has it, verifying digest and size before it is
    /// renamed into place.
    async fn fetch_blob(
        &self,
        image: &str,
        client: &Client,
        reference: &Reference,
        d: &Descriptor,
        fresh: &mut Vec<String>,
    ) -> Result<(), ImageError> {
        let hex = digest_hex(&d.digest)?.to_owned();
        let path = self.blob_path(&hex);
        let size = u64::try_from(d.size).unwrap_or(0);
        if tokio::fs::metadata(&path).await.is_ok_and(|m| i64::try_from(m.len()).ok() == Some(d.size)) {
            self.report(&PullProgress::BlobDone { image, digest: &d.digest, size, already_present: true });
            return Ok(());
        }
        let seq = INGEST_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ingest = self.root.join("ingest").join(format!("{hex}.{}.{seq}", std::process::id()));
        let result = async {
            // The owner's only (a pod's private image), whatever the umask.
            let mut file = tokio::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&ingest)
                .await
                .map_err(io(&ingest))?;
            let descriptor = OciDescriptor {
                media_type: d.media_type.clone(),
                digest: d.digest.clone(),
                size: d.size,
                ..Default::default()
            };
            let mut verifying = Verifying {
                inner: &mut file,
                left: size,
                written: 0,
                hash: digest::Context::new(&digest::SHA256),
                progress: self.progress.as_deref().map(|o| (o, image, d.digest.as_str())),
            };
            client.pull_blob(reference, &descriptor, &mut verifying).await.map_err(|e| map_oci(&d.digest, e))?;
            let (len, actual) = verifying.finish();
            file.flush().await.map_err(io(&ingest))?;
            file.sync_all().await.map_err(io(&ingest))?;
            drop(file);
            if actual != d.digest {
                return Err(ImageError::Digest { what: d.digest.clone(), expected: d.digest.clone(), actual });
            }
            if i64::try_from(len).ok() != Some(d.size) {
                return Err(ImageError::Unsupported(format!(
                    "{}: size mismatch: expected {}, got {len}",
                    d.digest, d.size
                )));
            }
            tokio::fs::rename(&ingest, &path).await.map_err(io(&path))?;
            fresh.push(d.digest.clone());
            self.report(&PullProgress::BlobDone { image, digest: &d.digest, size, already_present: false });
            Ok(())
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&ingest).await;
        }
        result
    }

    fn client_for(&self, registry: &str) -> Client {
        let protocol = if self.plain_http(registry) { ClientProtocol::Http } else { ClientProtocol::Https };
        Client::new(ClientConfig {
            protocol,
            platform_resolver: None,
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            user_agent: concat!("podpass/", env!("CARGO_PKG_VERSION")),
            extra_root_certificates: self
                .registry_ca
                .iter()
                .map(|pem| oci_client::client::Certificate {
                    encoding: oci_client::client::CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            ..Default::default()
        })
    }

    async fn pull(&self, image: &str, auth: Option<&PullAuth>) -> Result<String, ImageError> {
        let mut fresh = Vec::new();
        let result = self.pull_into_store(image, auth, &mut fresh).await;
        if result.is_err() {
            self.discard_unreferenced(&fresh).await;
        }
        result
    }

    /// After a failed pull: the blobs it wrote that no image uses are removed, so a failed
    /// pull leaves nothing behind.
    async fn discard_unreferenced(&self, fresh: &[String]) {
        if fresh.is_empty() {
            return;
        }
        let _guard = self.state_lock.lock().await;
        let Ok(_file_lock) = self.lock_state().await else { return };
        let Ok(state) = self.read_state().await else { return };
        let mut keep = Vec::new();
        for image in &state.images {
            keep.extend(self.blobs_of(image).await);
        }
        for d in fresh {
            if !keep.contains(d)
                && let Ok(hex) = digest_hex(d)
            {
                let _ = tokio::fs::remove_file(self.blob_path(hex)).await;
            }
        }
    }

    async fn pull_into_store(
        &self,
        image: &str,
        auth: Option<&PullAuth>,
        fresh: &mut Vec<String>,
    ) -> Result<String, ImageError> {
        let r = reference::parse(image)?;
        let mut oci_ref = match (&r.tag, &r.digest) {
            (_, Some(d)) => Reference::with_digest(r.domain.clone(), r.path.clone(), d.clone()),
            (Some(t), None) => Reference::with_tag(r.domain.clone(), r.path.clone(), t.clone()),
            (None, None) => Reference::with_tag(r.domain.clone(), r.path.clone(), "latest".into()),
        };
        let client = self.client_for(&r.domain);
        let plain_http = self.plain_http(&r.domain);
        let http = http_client(self.registry_ca.as_deref())?;
        let mut bytes =
            manifest_fetch::fetch_manifest(&client, &http, plain_http, &oci_ref, auth, &MANIFEST_TYPES).await?;
        let mut manifest_digest = format!("sha256:{}", sha256_hex(&bytes));
        if let Some(d) = &r.digest
            && *d != manifest_digest
        {
            return Err(ImageError::Digest { what: image.into(), expected: d.clone(), actual: manifest_digest });
        }
        let mut manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| ImageError::Unsupported(format!("{image}: manifest: {e}")))?;
        // An index: the entry for this platform (as containerd's default platform matcher).
        if let Some(entries) = manifest.manifests.take() {
            let (os, arch) = current_platform();
            let entry = entries
                .iter()
                .find(|m| m.platform.as_ref().is_some_and(|p| p.os == os && p.architecture == arch))
                .ok_or_else(|| {
                    ImageError::NotFound(format!("{image}: no match for platform {os}/{arch} in manifest"))
                })?;
            oci_ref = Reference::with_digest(r.domain.clone(), r.path.clone(), entry.digest.clone());
            self.put_blob(&manifest_digest, &bytes, fresh).await?;
            let platform_bytes =
                manifest_fetch::fetch_manifest(&client, &http, plain_http, &oci_ref, auth, &MANIFEST_TYPES[..2])
                    .await?;
            let actual = format!("sha256:{}", sha256_hex(&platform_bytes));
            if actual != entry.digest {
                return Err(ImageError::Digest { what: image.into(), expected: entry.digest.clone(), actual });
            }
            bytes = platform_bytes;
            manifest = serde_json::from_slice(&bytes)
                .map_err(|e| ImageError::Unsupported(format!("{image}: manifest: {e}")))?;
            // The repo digest stays the index's digest, as containerd records it.
            self.put_blob(&entry.digest, &bytes, fresh).await?;
        } else {
            self.put_blob(&manifest_digest, &bytes, fresh).await?;
        }
        let config =
            manifest.config.ok_or_else(|| ImageError::Unsupported(format!("{image}: manifest has no config")))?;
        if !(0..=manifest_fetch::MAX_CONFIG_BYTES).contains(&config.size) {
            return Err(ImageError::Unsupported(format!(
                "{image}: config size {} is outside 0..={}",
                config.size,
                manifest_fetch::MAX_CONFIG_BYTES
            )));
        }
        if self.progress.is_some() {
            let blobs: Vec<BlobInfo> = std::iter::once((&config, BlobKind::Config))
                .chain(manifest.layers.iter().map(|l| (l, BlobKind::Layer)))
                .map(|(d, kind)| BlobInfo { digest: d.digest.clone(), size: u64::try_from(d.size).unwrap_or(0), kind })
                .collect();
            self.report(&PullProgress::Resolved { image, blobs: &blobs });
        }
        self.fetch_blob(image, &client, &oci_ref, &config, fresh).await?;
        let mut size = u64::try_from(config.size).unwrap_or(0);
        let mut content = vec![config.digest.clone()];
        for layer in &manifest.layers {
            self.fetch_blob(image, &client, &oci_ref, layer, fresh).await?;
            size += u64::try_from(layer.size).unwrap_or(0);
            content.push(layer.digest.clone());
        }
        if r.digest.is_some() {
            manifest_digest = r.digest.clone().unwrap_or(manifest_digest);
        }
        content.push(manifest_digest.clone());
        self.add_image(&r, &config.digest, &manifest_digest, size, &content).await?;
        self.report(&PullProgress::Finished { image, id: &config.digest });
        Ok(config.digest)
    }

    /// Locks `images.json` against other node processes (flock on `images/.lock`), for a
    /// read-modify-write; released when the file is dropped.
    async fn lock_state(&self) -> Result<std::fs::File, ImageError> {
        let path = self.root.join(".lock");
        tokio::task::spawn_blocking(move || {
            let f =
                std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io(&path))?;
            f.lock().map_err(io(&path))?;
            Ok(f)
        })
        .await
        .map_err(|e| ImageError::Registry(format!("store lock: {e}")))?
    }

    async fn add_image(
        &self,
        r: &ImageReference,
        id: &str,
        manifest_digest: &str,
        size: u64,
        content: &[String],
    ) -> Result<(), ImageError> {
        let _guard = self.state_lock.lock().await;
        let _file_lock = self.lock_state().await?;
        // Under the lock, so a removal by another process cannot interleave: every blob this
        // image needs is still there (a concurrent removal of an image sharing them may have
        // taken one after it was fetched).
        for d in content {
            let path = self.blob_path(digest_hex(d)?);
            if tokio::fs::metadata(&path).await.is_err() {
                return Err(ImageError::Registry(format!(
                    "{d}: content removed while the image was being pulled; pull again"
                )));
            }
        }
        let mut state = self.read_state().await?;
        let name = r.name();
        let tag = match (&r.tag, &r.digest) {
            (Some(t), _) => Some(format!("{name}:{t}")),
            (None, None) => Some(format!("{name}:latest")),
            (None, Some(_)) => None,
        };
        let repo_digest = format!("{name}@{manifest_digest}");
        // A tag names one image: it moves off whichever image had it.
        if let Some(tag) = &tag {
            for other in state.images.iter_mut().filter(|i| i.id != id) {
                other.repo_tags.retain(|t| t != tag);
            }
        }
        let entry = match state.images.iter_mut().find(|i| i.id == id) {
            Some(e) => e,
            None => {
                state.images.push(StoredImage {
                    id: id.to_owned(),
                    repo_tags: Vec::new(),
                    repo_digests: Vec::new(),
                    manifest_digest: manifest_digest.to_owned(),
                    size,
                });
                let last = state.images.len() - 1;
                &mut state.images[last]
            }
        };
        if let Some(tag) = tag
            && !entry.repo_tags.contains(&tag)
        {
            entry.repo_tags.push(tag);
        }
        if !entry.repo_digests.contains(&repo_digest) {
            entry.repo_digests.push(repo_digest);
        }
        self.write_state(&state).await
    }

    fn find<'a>(state: &'a State, image: &str) -> Result<Option<&'a StoredImage>, ImageError> {
        // An image ID, full (`sha256:<hex>`) or bare hex.
        let as_id = if image.len() == 64 { format!("sha256:{image}") } else { image.to_owned() };
        if as_id.starts_with("sha256:")
            && let Some(found) = state.images.iter().find(|i| i.id == as_id)
        {
            return Ok(Some(found));
        }
        let r = reference::parse(image)?;
        let name = r.name();
        Ok(match (&r.tag, &r.digest) {
            (_, Some(d)) => {
                let wanted = format!("{name}@{d}");
                state.images.iter().find(|i| i.repo_digests.contains(&wanted))
            }
            (tag, None) => {
                let wanted = format!("{name}:{}", tag.as_deref().unwrap_or("latest"));
                state.images.iter().find(|i| i.repo_tags.contains(&wanted))
            }
        })
    }

    /// The blobs an image uses (index, manifest, config, layers), for removal.
    async fn blobs_of(&self, image: &StoredImage) -> Vec<String> {
        let mut out = vec![image.manifest_digest.clone(), image.id.clone()];
        let mut manifests = vec![image.manifest_digest.clone()];
        if let Ok(data) = self.read_blob(&image.manifest_digest).await
            && let Ok(m) = serde_json::from_slice::<Manifest>(&data)
            && let Some(entries) = m.manifests
        {
            // An index: the platform manifests this store holds, and their content.
            manifests = entries.into_iter().map(|d| d.digest).collect();
            out.extend(manifests.iter().cloned());
        }
        for digest in manifests {
            if let Ok(data) = self.read_blob(&digest).await
                && let Ok(m) = serde_json::from_slice::<Manifest>(&data)
            {
                out.extend(m.config.map(|c| c.digest));
                out.extend(m.layers.into_iter().map(|d| d.digest));
            }
        }
        out
    }
}

/// A writer that hashes what it writes (no second read of the blob) and refuses more bytes
/// than the descriptor announced: a registry cannot fill the disk by streaming past a blob's
/// size.
struct Verifying<'a, W> {
    inner: &'a mut W,
    left: u64,
    written: u64,
    hash: digest::Context,
    /// Where each chunk is reported: the observer, the image and the blob's digest.
    progress: Option<(&'a dyn PullObserver, &'a str, &'a str)>,
}

impl<W> Verifying<'_, W> {
    /// Bytes written and their `sha256:` digest.
    fn finish(self) -> (u64, String) {
        let d = self.hash.finish();
        (self.written, format!("sha256:{}", data_encoding::HEXLOWER.encode(d.as_ref())))
    }
}

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Verifying<'_, W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if u64::try_from(buf.len()).unwrap_or(u64::MAX) > self.left {
            return std::task::Poll::Ready(Err(std::io::Error::other("blob is larger than its descriptor's size")));
        }
        let this = &mut *self;
        let poll = std::pin::Pin::new(&mut *this.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &poll {
            this.hash.update(&buf[..*n]);
            let n = u64::try_from(*n).unwrap_or(0);
            this.left -= n;
            this.written += n;
            if let Some((observer, image, digest)) = this.progress {
                observer.observe(&PullProgress::Downloading {
                    image,
                    digest,
                    done: this.written,
                    size: this.written + this.left,
                });
            }
        }
        poll
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

fn current_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    ("linux", arch)
}

/// Content and the image list: atomic and durable (`durable::replace`), the owner's only:
/// private images are pulled here with a pod's credentials.
fn write_durably(path: &Path, data: &[u8]) -> Result<(), ImageError> {
    podpass_serve::durable::replace(path, data, 0o600).map_err(io(path))
}

fn present(i: &StoredImage) -> PresentImage {
    PresentImage {
        id: i.id.clone(),
        repo_tags: i.repo_tags.clone(),
        repo_digests: i.repo_digests.clone(),
        size: i.size,
    }
}

impl ImageService for EmbeddedImageStore {
    async fn image_status(&self, image: &str) -> Result<Option<PresentImage>, ImageError> {
        let state = self.read_state().await?;
        let found = Self::find(&state, image)?;
        // An image whose content is gone is not present (it would not run).
        match found {
            Some(i) if self.read_blob(&i.id).await.is_ok() => Ok(Some(present(i))),
            _ => Ok(None),
        }
    }

    async fn pull_image(&self, image: &str, auth: Option<&PullAuth>) -> Result<String, ImageError> {
        self.pull(image, auth).await
    }

    async fn list_images(&self) -> Result<Vec<PresentImage>, ImageError> {
        Ok(self.read_state().await?.images.iter().map(present).collect())
    }

    async fn remove_image(&self, image: &str) -> Result<(), ImageError> {
        let _guard = self.state_lock.lock().await;
        let _file_lock = self.lock_state().await?;
        let mut state = self.read_state().await?;
        let Some(found) = Self::find(&state, image)?.cloned() else { return Ok(()) };
        state.images.retain(|i| i.id != found.id);
        self.write_state(&state).await?;
        // Blobs still used by another image stay.
        let mut keep = Vec::new();
        for other in &state.images {
            keep.extend(self.blobs_of(other).await);
        }
        for d in self.blobs_of(&found).await {
            if !keep.contains(&d)
                && let Ok(hex) = digest_hex(&d)
            {
                let _ = tokio::fs::remove_file(self.blob_path(hex)).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_the_store_removes_what_killed_writers_left() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let blobs = dir.path().join("images/blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap_or_else(|e| panic!("{e}"));
        // pid 4194305 is above Linux's pid_max: a dead writer
        let dead = blobs.join("ab12.4194305.3.tmp");
        let live = blobs.join(format!("cd34.{}.1.tmp", std::process::id()));
        let list = dir.path().join("images/images.json.4194305.0.tmp");
        for f in [&dead, &live, &list] {
            std::fs::write(f, b"half").unwrap_or_else(|e| panic!("{e}"));
        }
        EmbeddedImageStore::open(dir.path(), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!dead.exists() && !list.exists(), "a dead writer's tmp files are removed at open");
        assert!(live.exists(), "a live writer's are kept");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("images/ingest")).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.unwrap_or(0), 0o700);
    }

    #[test]
    fn plain_http_only_for_loopback_or_named() {
        assert!(plain_http_allowed("127.0.0.1:5000", &[]));
        assert!(plain_http_allowed("localhost:5000", &[]));
        assert!(plain_http_allowed("localhost", &[]));
        assert!(plain_http_allowed("[::1]:5000", &[]));
        assert!(plain_http_allowed("127.3.4.5", &[]));
        assert!(!plain_http_allowed("10.0.0.1:5000", &[]));
        assert!(!plain_http_allowed("registry.example:5000", &[]));
        assert!(!plain_http_allowed("localhost.example.com", &[]));
        assert!(plain_http_allowed("registry.example:5000", &["registry.example:5000".into()]));
        assert!(!plain_http_allowed("registry.example", &["registry.example:5000".into()]));
    }

    #[tokio::test]
    async fn a_blob_cannot_outgrow_its_descriptor() {
        use tokio::io::AsyncWriteExt as _;
        let mut sink = Vec::new();
        let mut w = Verifying {
            inner: &mut sink,
            left: 4,
            written: 0,
            hash: digest::Context::new(&digest::SHA256),
            progress: None,
        };
        w.write_all(b"abcd").await.unwrap();
        let err = w.write_all(b"e").await.unwrap_err();
        assert_eq!(err.to_string(), "blob is larger than its descriptor's size");
        assert_eq!(w.finish(), (4, format!("sha256:{}", sha256_hex(b"abcd"))));
        assert_eq!(sink, b"abcd");
    }

    #[test]
    fn digests_that_are_not_file_names_are_refused() {
        assert!(digest_hex(&format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(digest_hex("sha256:../../etc/passwd").is_err());
        assert!(digest_hex(&format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(digest_hex(&format!("sha512:{}", "a".repeat(128))).is_err());
    }

    #[tokio::test]
    async fn find_by_tag_digest_and_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedImageStore::open(dir.path(), vec![]).unwrap();
        let id = format!("sha256:{}", "1".repeat(64));
        let md = format!("sha256:{}", "2".repeat(64));
        let r = reference::parse("127.0.0.1:5000/tiny/hello:v1").unwrap();
        store.add_image(&r, &id, &md, 10, &[]).await.unwrap();
        let state = store.read_state().await.unwrap();
        let by = |s: &str| EmbeddedImageStore::find(&state, s).unwrap().map(|i| i.id.clone());
        assert_eq!(by("127.0.0.1:5000/tiny/hello:v1"), Some(id.clone()));
        assert_eq!(by(&format!("127.0.0.1:5000/tiny/hello@{md}")), Some(id.clone()));
        assert_eq!(by(&id), Some(id.clone()));
        assert_eq!(by(&"1".repeat(64)), Some(id.clone()));
        assert_eq!(by("127.0.0.1:5000/tiny/hello:v2"), None);
        assert_eq!(by("127.0.0.1:5000/tiny/hello"), None);
        // A tag moves to the image that was pulled last.
        let id2 = format!("sha256:{}", "3".repeat(64));
        store.add_image(&r, &id2, &format!("sha256:{}", "4".repeat(64)), 10, &[]).await.unwrap();
        let state = store.read_state().await.unwrap();
        assert_eq!(
            EmbeddedImageStore::find(&state, "127.0.0.1:5000/tiny/hello:v1").unwrap().map(|i| i.id.clone()),
            Some(id2)
        );
        let old = state.images.iter().find(|i| i.id == id).unwrap();
        assert!(old.repo_tags.is_empty());
        assert_eq!(old.repo_digests, vec![format!("127.0.0.1:5000/tiny/hello@{md}")]);
    }

    #[tokio::test]
    async fn image_without_content_is_not_present_and_corrupt_state_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedImageStore::open(dir.path(), vec![]).unwrap();
        let config = b"{}".to_vec();
        let id = format!("sha256:{}", sha256_hex(&config));
        let r = reference::parse("localhost:5000/x:1").unwrap();
        // Content missing: refused.
        assert!(
            store
                .add_image(&r, &id, &format!("sha256:{}", "2".repeat(64)), 2, std::slice::from_ref(&id))
                .await
                .is_err()
        );
        store.add_image(&r, &id, &format!("sha256:{}", "2".repeat(64)), 2, &[]).await.unwrap();
        assert_eq!(store.image_status("localhost:5000/x:1").await.unwrap(), None);
        store.put_blob(&id, &config, &mut Vec::new()).await.unwrap();
        assert_eq!(store.image_status("localhost:5000/x:1").await.unwrap().map(|i| i.id), Some(id.clone()));
        // Tampered content: not present (so the node pulls again).
        std::fs::write(store.blob_path(digest_hex(&id).unwrap()), b"{ }").unwrap();
        assert_eq!(store.image_status("localhost:5000/x:1").await.unwrap(), None);
        std::fs::write(store.state_path(), b"{\"images\":[").unwrap();
        assert!(matches!(store.image_status("localhost:5000/x:1").await, Err(ImageError::Corrupt { .. })));
    }
}
