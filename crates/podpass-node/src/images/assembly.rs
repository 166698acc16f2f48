//! One assembly of the node's image side, shared by the daemon and the one-shot commands:
//! feature gates from the KubeletConfiguration then the flag, the pull manager with its
//! start-up housekeeping (kubelet: `NewImagePullManager` + `initialize`), the image manager,
//! and a pod's keyring lookup (kubelet: `makeLookupPullCredentialsFunc`).

use std::sync::Arc;

use podpass_api::{Feature, FeatureGateError, FeatureGates};
use thiserror::Error;

use super::backend::Backend;
use super::manager::{ImageManager, LazyLookup, LookupFuture};
use super::origin::{OriginCheck, OriginFlags, OriginSettings};
use super::policy::PolicyEnforcer;
use super::pull_manager::PullManager;
use super::records::{RecordError, RecordStore};
use super::service::{ImageError, ImageService};
use crate::credential::{DockerConfig, Lookup, PluginProvider, PodIdentity, PullSecret, lookup};
use crate::kubelet_config::KubeletConfig;

/// The image side could not be assembled.
#[derive(Debug, Error)]
pub enum AssemblyError {
    /// `--feature-gates` does not parse.
    #[error("--feature-gates: {0}")]
    FeatureGates(#[from] FeatureGateError),
    /// `preloadedImagesVerificationAllowlist` has invalid entries.
    #[error("preloadedImagesVerificationAllowlist: {}", .0.join(", "))]
    Allowlist(Vec<String>),
    /// The pull records directory cannot be used.
    #[error("pull records: {0}")]
    Records(#[from] RecordError),
    /// The runtime could not list its images for start-up housekeeping.
    #[error("listing images for start-up housekeeping: {0}")]
    ListImages(#[from] ImageError),
    /// The client that verifies pulls at the image's registry could not be built.
    #[error("verifying pulls at the image's registry: {0}")]
    Origin(#[from] super::origin::OriginClientError),
}

/// The origin check `backend`'s pulls need: none for the embedded store (its own pull from
/// the image's registry, with the pod's credentials, is the proof) or when the flags say to
/// trust the runtime's pulls; otherwise every runtime pull is proven at the image's registry.
pub fn origin_check(
    backend: &Backend,
    flags: &OriginFlags,
    settings: &OriginSettings,
) -> Result<Option<OriginCheck>, AssemblyError> {
    if !backend.pulls_through_runtime() || flags.trust_runtime_pulls {
        return Ok(None);
    }
    OriginCheck::new(settings).map(Some).map_err(AssemblyError::Origin)
}

/// Feature gates: the KubeletConfiguration's `featureGates`, then `flag` on top. Gates this
/// node does not implement are the kubelet's business and are ignored.
pub fn feature_gates(config: &KubeletConfig, flag: &str) -> Result<FeatureGates, AssemblyError> {
    let mut gates = FeatureGates::default();
    for (name, enabled) in &config.feature_gates {
        if let Some(f) = Feature::ALL.into_iter().find(|f| f.name() == name) {
            gates.set(f, *enabled);
        }
    }
    gates.apply(flag)?;
    Ok(gates)
}

/// When the records' warm-up (listing, migration) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmUp {
    /// Before returning, its errors among the warnings (one-shot commands).
    Foreground,
    /// In the background, its errors logged (the node agent: the first decision must not
    /// wait for a listing of every record).
    Background,
}

/// The image manager over `service` with records under `root_dir` when the
/// KubeletEnsureSecretPulledImages gate is on. Start-up housekeeping runs first (intents of
/// images now present become records), the warm-up as `warm` says; unreadable record files
/// are returned as warnings.
pub async fn image_manager<S: ImageService + 'static>(
    root_dir: &std::path::Path,
    service: Arc<S>,
    config: &KubeletConfig,
    gates: &FeatureGates,
    warm: WarmUp,
) -> Result<(ImageManager<S>, Option<Arc<PullManager>>, Vec<RecordError>), AssemblyError> {
    let mut warnings = Vec::new();
    let pull_manager = if gates.enabled(Feature::KubeletEnsureSecretPulledImages) {
        let policy = PolicyEnforcer::new(config.policy, &config.allowlist)
            .map_err(|errors| AssemblyError::Allowlist(errors.iter().map(ToString::to_string).collect()))?;
        let pm = Arc::new(PullManager::new(RecordStore::open(root_dir)?, policy));
        let images = service.list_images().await?;
        let pm2 = pm.clone();
        warnings = tokio::task::spawn_blocking(move || {
            let mut errors = pm2.start_up(&images);
            if warm == WarmUp::Foreground {
                errors.extend(pm2.warm_up());
            }
            errors
        })
        .await
        .unwrap_or_default();
        if warm == WarmUp::Background {
            let pm2 = pm.clone();
            tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                for e in pm2.warm_up() {
                    tracing::warn!(file = e.file_kind(), error = %e, "unreadable image record");
                }
                let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                tracing::info!(took_ms, "image records warmed up");
            });
        }
        Some(pm)
    } else {
        None
    };
    let manager =
        ImageManager::new(service, pull_manager.clone(), config.serialize_image_pulls, config.max_parallel_image_pulls);
    Ok((manager, pull_manager, warnings))
}

/// The keyring lookup for one container image of a pod: its pull secrets first, then each
/// provider (with the pod's service-account token where configured), then the node-wide
/// docker config — run at most once, and only when the image manager needs it; run once
/// more, without the cached answers the registry refused, when the pull fails on them.
pub fn pod_lookup(
    image: String,
    pod: Option<PodIdentity>,
    pull_secrets: Arc<Vec<PullSecret>>,
    providers: Arc<Vec<PluginProvider>>,
    node_config: Arc<DockerConfig>,
) -> Arc<LazyLookup> {
    LazyLookup::new(move |previous: Option<Lookup>| -> LookupFuture {
        let (image, pod) = (image.clone(), pod.clone());
        let (pull_secrets, providers, node_config) = (pull_secrets.clone(), providers.clone(), node_config.clone());
        Box::pin(async move {
            if let Some(previous) = &previous {
                previous.forget_cached(&providers);
            }
            let found = lookup(&image, pod.as_ref(), &pull_secrets, &providers, &node_config).await;
            for p in found.providers.iter().filter(|p| p.skip_reason.is_some()) {
                tracing::info!(
                    provider = %p.name,
                    image,
                    reason = p.skip_reason.as_deref().unwrap_or_default(),
                    "credential provider matched the image but yielded no credentials"
                );
            }
            found
        })
    })
}
