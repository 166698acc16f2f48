//! `podpass node ensure-image | images | records | gc`: the kubelet's image manager with
//! ensure-secret-pulled-images, on the embedded store or containerd over CRI.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use podpass_api::Feature;
use podpass_node::ServiceAccountRef;
use podpass_node::credential::read_node_config;
use podpass_node::credential::{
    CredentialSource, Keyring, Lookup, PluginProvider, PodIdentity, PullSecret, ServiceAccountSource, lookup,
};
use podpass_node::images;
use podpass_node::images::Backend;
use podpass_node::images::ImageService;
use podpass_node::images::PolicyEnforcer;
use podpass_node::images::PullManager;
use podpass_node::images::{ImagePulledRecord, RecordStore};
use podpass_node::images::{LazyLookup, LookupFuture, PullPolicy, pull_with_credentials};
use podpass_node::{KubeletConfig, read_kubelet_config};
use prometheus_client::registry::Registry;

use crate::pull_progress::{Printer, ProgressMode};

/// Where images live: the kubelet root dir and the runtime.
#[derive(Debug, Args)]
pub struct RuntimeFlags {
    /// Kubelet root dir: pull records under `image_manager/`, the embedded store under
    /// `images/`, node-wide credentials in `config.json`.
    #[arg(long)]
    root_dir: PathBuf,
    /// CRI endpoint (`unix:///run/containerd/containerd.sock`); the embedded store when absent.
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    /// Registries the embedded store may reach over plain HTTP (loopback ones always may).
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
}

impl RuntimeFlags {
    async fn backend(&self) -> Result<Backend> {
        Backend::open(&self.root_dir, self.container_runtime_endpoint.as_deref(), self.insecure_registries.clone())
            .await
            .context("image service")
    }

    /// The backend, drawing pull progress on stderr in `mode`.
    async fn backend_with_progress(&self, mode: ProgressMode) -> Result<Backend> {
        let backend = self.backend().await?;
        Ok(match mode.resolve() {
            Some(style) => backend.with_progress(Arc::new(Printer::stderr(style))),
            None => backend,
        })
    }
}

/// Flags of `podpass node ensure-image`.
#[derive(Debug, Args)]
pub struct EnsureImageArgs {
    #[command(flatten)]
    runtime: RuntimeFlags,
    /// Pull progress on stderr: `auto` (`tty` on a terminal, else `plain`), `tty`, `plain`
    /// (a line per layer and the totals) or `none`.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
    /// KubeletConfiguration file (policy, allowlist, pull parallelism, feature gates).
    #[arg(long)]
    config: Option<PathBuf>,
    /// How a container runtime's pull is proven (at the image's own registry unless
    /// `--trust-runtime-pulls`).
    #[command(flatten)]
    origin: podpass_node::images::OriginFlags,
    /// Feature gates on top of the config file's.
    #[arg(long, default_value = "")]
    feature_gates: String,
    /// CredentialProviderConfig file or directory.
    #[arg(long, requires = "image_credential_provider_bin_dir")]
    image_credential_provider_config: Option<PathBuf>,
    /// Directory holding the provider binaries.
    #[arg(long, requires = "image_credential_provider_config")]
    image_credential_provider_bin_dir: Option<PathBuf>,
    /// What provider NAME does when a pod's service account has not opted in to it:
    /// `NAME=skip|node|anonymous|fail`, as `podpass node run`'s flag. Repeatable.
    #[arg(long = "credential-provider-fallback")]
    credential_provider_fallbacks: Vec<String>,
    /// Kubeconfig for reading the pod, its pull secrets and service account, and tokens.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The pod (`NAMESPACE/NAME`), read from the API server.
    #[arg(long, requires = "kubeconfig", conflicts_with_all = ["pull_secrets", "service_account"])]
    pod: Option<String>,
    /// The pod's pull secrets, as `kubectl get secret -o yaml` prints them (repeatable).
    #[arg(long = "pull-secret")]
    pull_secrets: Vec<PathBuf>,
    /// The pod's service account, `NAMESPACE/NAME/UID`.
    #[arg(long)]
    service_account: Option<String>,
    /// `Always`, `IfNotPresent` or `Never`; when omitted, the API's default: `Always` for a
    /// `:latest` (or untagged) image, else `IfNotPresent`.
    #[arg(long)]
    pull_policy: Option<PullPolicy>,
    /// Write the node's metrics (OpenMetrics text) here before exiting.
    #[arg(long)]
    metrics_file: Option<PathBuf>,
    /// The container image.
    image: String,
}

/// `podpass node images …`.
#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// Put an image into the store outside the pull manager, as `ctr images pull` or a node
    /// image bake does (a "preloaded" image); prints its image ID.
    Load(LoadArgs),
    /// List the runtime's images.
    List(ListArgs),
    /// Remove an image from the runtime (CRI `RemoveImage`; absent is not an error). Its pull
    /// records stay until `podpass node gc`.
    Remove(RemoveArgs),
}

/// Flags of `podpass node images remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    runtime: RuntimeFlags,
    /// The image (tag, digest reference or image ID).
    image: String,
}

/// Flags of `podpass node images load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    runtime: RuntimeFlags,
    /// Pull progress on stderr: `auto` (`tty` on a terminal, else `plain`), `tty`, `plain`
    /// (a line per layer and the totals) or `none`.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
    /// Pull secret manifests whose credentials may pull it (tried in keyring order).
    #[arg(long = "pull-secret")]
    pull_secrets: Vec<PathBuf>,
    /// The image.
    image: String,
}

/// Flags of `podpass node images list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    runtime: RuntimeFlags,
}

/// `podpass node records …`.
#[derive(Debug, Subcommand)]
pub enum RecordsCommand {
    /// A table of pulled records (image ref, repository, who may use it) and pull intents.
    List(RecordsArgs),
    /// The records as the kubelet stores them (JSON), all or those of the given image refs.
    Show(ShowArgs),
}

/// Flags of `podpass node records list`.
#[derive(Debug, Args)]
pub struct RecordsArgs {
    /// Kubelet root dir.
    #[arg(long)]
    root_dir: PathBuf,
}

/// Flags of `podpass node records show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Kubelet root dir.
    #[arg(long)]
    root_dir: PathBuf,
    /// Image refs (IDs); all records when none.
    image_refs: Vec<String>,
}

/// Flags of `podpass node gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    runtime: RuntimeFlags,
}

fn open_records(root_dir: &Path) -> Result<RecordStore> {
    RecordStore::open(root_dir).with_context(|| format!("pull records under {}", root_dir.display()))
}

fn kubelet_config(path: Option<&Path>) -> Result<KubeletConfig> {
    match path {
        None => Ok(KubeletConfig::default()),
        Some(p) => read_kubelet_config(p)
            .map_err(|errors| anyhow::anyhow!("invalid configuration: {}", errors.join(", ")))
            .with_context(|| format!("--config {}", p.display())),
    }
}

/// The pod the image is for: identity, pull secrets, and where tokens come from.
struct PodContext {
    identity: Option<PodIdentity>,
    secrets: Vec<PullSecret>,
    source: Option<Arc<dyn ServiceAccountSource>>,
}

async fn pod_context(a: &EnsureImageArgs) -> Result<PodContext> {
    let mut secrets = crate::node::read_pull_secrets(&a.pull_secrets)?;
    let client = match &a.kubeconfig {
        Some(path) => Some(podpass_node::client_from_kubeconfig(path).await?),
        None => None,
    };
    let source = client.clone().map(|c| podpass_node::KubeServiceAccounts::new(c) as Arc<dyn ServiceAccountSource>);
    let mut identity = None;
    if let Some(pod) = &a.pod {
        let client = client.as_ref().context("--pod needs --kubeconfig")?;
        let (pod_identity, pod_secrets) = crate::node::read_pod(client, pod).await?;
        secrets.extend(pod_secrets);
        identity = Some(pod_identity);
    }
    Ok(PodContext { identity, secrets, source })
}

/// The pod's keyring lookup (pull secrets, providers, node-wide `config.json`). With
/// `--service-account` and no API server, the CLI stands in for the kubelet running the
/// providers with that service account's token: what the providers return is attributed to
/// it (never the node-wide file's credentials).
fn make_lookup(
    image: String,
    ctx: PodContext,
    providers: Arc<Vec<PluginProvider>>,
    node_config: podpass_node::credential::DockerConfig,
    sa: Option<ServiceAccountRef>,
) -> Arc<LazyLookup> {
    // One lookup per process: its providers' caches start empty, so nothing cached can be
    // refused and the lookup is never asked again.
    let once = std::sync::Mutex::new(Some((image, ctx, providers, node_config, sa)));
    LazyLookup::new(move |_again| -> LookupFuture {
        let taken = once.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        Box::pin(async move {
            let Some((image, ctx, providers, node_config, sa)) = taken else { return Lookup::default() };
            let mut found: Lookup =
                lookup(&image, ctx.identity.as_ref(), &ctx.secrets, &providers, &Default::default()).await;
            for p in found.providers.iter().filter(|p| p.skip_reason.is_some()) {
                eprintln!(
                    "provider {} matched {image} but yielded no credentials: {}",
                    p.name,
                    p.skip_reason.as_deref().unwrap_or_default()
                );
            }
            if let Some(sa) = sa {
                for c in &mut found.credentials {
                    if c.source == CredentialSource::NodeWide {
                        c.source = CredentialSource::ServiceAccount {
                            namespace: sa.namespace.clone(),
                            name: sa.name.clone(),
                            uid: sa.uid.clone(),
                            credential_id: String::new(),
                        };
                    }
                }
            }
            let mut node = Keyring::new();
            node.add(&node_config, &CredentialSource::NodeWide);
            found.credentials.extend(node.lookup(&image));
            drop(ctx.source);
            found
        })
    })
}

/// Runs `ensure-image`; the exit code says whether the pod may use the image.
pub async fn ensure_image(a: EnsureImageArgs) -> Result<bool> {
    let config = kubelet_config(a.config.as_deref())?;
    let gates = images::feature_gates(&config, &a.feature_gates)?;
    let sa =
        a.service_account.as_deref().map(str::parse::<ServiceAccountRef>).transpose().context("--service-account")?;
    let backend = a.runtime.backend_with_progress(a.progress).await?;
    let identity = a.origin.client_identity().map_err(|errors| {
        let text: Vec<String> = errors.into_iter().map(|(flag, m)| format!("{flag}: {m}")).collect();
        anyhow::anyhow!("{}", text.join("; "))
    })?;
    let settings = podpass_node::images::OriginSettings {
        registry_ca: None,
        client_identity: identity,
        insecure_registries: a.runtime.insecure_registries.clone(),
    };
    let origin = images::origin_check(&backend, &a.origin, &settings)?;
    let (manager, pull_manager, warnings) =
        images::image_manager(&a.runtime.root_dir, Arc::new(backend), &config, &gates, images::WarmUp::Foreground)
            .await?;
    let manager = manager.with_origin_check(origin);
    for e in warnings {
        eprintln!("warning: unreadable {}: {e}", e.file_kind());
    }
    let ctx = pod_context(&a).await?;
    let sa_feature = gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders);
    let providers = match (&a.image_credential_provider_config, &a.image_credential_provider_bin_dir) {
        (Some(c), Some(b)) => {
            crate::node::register(c, b, sa_feature, ctx.source.clone(), &a.credential_provider_fallbacks)?
        }
        _ => Vec::new(),
    };
    let node_config = read_node_config(&a.runtime.root_dir).context("node-wide credentials")?;
    let credentials = make_lookup(a.image.clone(), ctx, Arc::new(providers), node_config, sa);
    let policy = a.pull_policy.unwrap_or_else(|| PullPolicy::default_for(&a.image));
    let decision = manager.ensure_image_exists(&a.image, policy, credentials).await;
    for e in &decision.events {
        eprintln!("{} {} {}", e.event_type, e.reason, e.message);
    }
    outln!("{}", serde_json::to_string_pretty(&decision)?);
    if let Some(path) = &a.metrics_file {
        let mut registry = Registry::default();
        registry.register(
            "kubelet_image_manager_ensure_image_requests",
            "Number of ensure-image requests processed by the kubelet.",
            manager.requests_metric(),
        );
        if let Some(pm) = &pull_manager {
            pm.register_metrics(&mut registry);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        std::fs::write(path, text).with_context(|| format!("--metrics-file {}", path.display()))?;
    }
    Ok(decision.allowed())
}

/// Runs `images load`.
pub async fn load(a: LoadArgs) -> Result<()> {
    let backend = a.runtime.backend_with_progress(a.progress).await?;
    let secrets = crate::node::read_pull_secrets(&a.pull_secrets)?;
    let found = lookup(&a.image, None, &secrets, &[], &Default::default()).await;
    let image = podpass_node::images::apply_default_tag(&a.image)?;
    // CRI's PullImage reports nothing until it is done: say so, then the totals.
    let cri_totals = a.progress.resolve().is_some() && !backend.reports_progress();
    if cri_totals {
        eprintln!("pulling {image} through the container runtime (CRI reports no per-layer progress)");
    }
    let started = std::time::Instant::now();
    match pull_with_credentials(&backend, &image, &found.credentials).await {
        Ok((id, _)) => {
            if cri_totals {
                let size = backend.image_status(&id).await.ok().flatten().map_or(0, |i| i.size);
                eprintln!(
                    "pulled {image}: {} in {:.1} s",
                    crate::pull_progress::bytes(size),
                    started.elapsed().as_secs_f64()
                );
            }
            outln!("{id}");
            Ok(())
        }
        Err(e) => bail!("failed to load {image}: {e}"),
    }
}

/// Runs `images remove`.
pub async fn remove(a: RemoveArgs) -> Result<()> {
    let backend = a.runtime.backend().await?;
    backend.remove_image(&a.image).await.with_context(|| format!("removing {}", a.image))?;
    Ok(())
}

/// Runs `images list`.
pub async fn list(a: ListArgs) -> Result<()> {
    let backend = a.runtime.backend().await?;
    let images = backend.list_images().await?;
    outln!("{:<73} {:>10}  TAGS / DIGESTS", "IMAGE ID", "SIZE");
    for i in images {
        let names: Vec<&str> = i.repo_tags.iter().chain(&i.repo_digests).map(String::as_str).collect();
        outln!("{:<73} {:>10}  {}", i.id, i.size, names.join(" "));
    }
    Ok(())
}

fn who(c: &podpass_node::images::ImagePullCredentials) -> String {
    if c.node_pods_accessible {
        return "every pod on the node".into();
    }
    let mut out: Vec<String> = c
        .kubernetes_secrets
        .iter()
        .map(|s| format!("secret {}/{} (uid {}, hash {:.12})", s.namespace, s.name, s.uid, s.credential_hash))
        .collect();
    out.extend(
        c.kubernetes_service_accounts
            .iter()
            .map(|s| format!("serviceaccount {}/{} (uid {})", s.namespace, s.name, s.uid)),
    );
    if out.is_empty() { "nobody without verification".into() } else { out.join(", ") }
}

/// Runs `records list`.
pub fn records_list(a: &RecordsArgs) -> Result<bool> {
    let store = open_records(&a.root_dir)?;
    let (records, errors) = store.list_pulled();
    let (intents, intent_errors) = store.list_intents();
    outln!("{:<73} {:<20} {:<40} MAY USE", "IMAGE REF", "UPDATED", "REPOSITORY");
    for r in &records {
        if r.credential_mapping.is_empty() {
            outln!("{:<73} {:<20} {:<40} nobody without verification", r.image_ref, r.last_updated_time, "-");
        }
        for (repo, creds) in &r.credential_mapping {
            outln!("{:<73} {:<20} {:<40} {}", r.image_ref, r.last_updated_time, repo, who(creds));
        }
    }
    outln!();
    outln!("PULL INTENTS (pulls in progress or interrupted)");
    for i in &intents {
        outln!("{}", i.image);
    }
    for e in errors.iter().chain(&intent_errors) {
        eprintln!("unreadable: {e}");
    }
    Ok(errors.is_empty() && intent_errors.is_empty())
}

/// Runs `records show`.
pub fn records_show(a: &ShowArgs) -> Result<bool> {
    let store = open_records(&a.root_dir)?;
    let (records, errors): (Vec<ImagePulledRecord>, _) = if a.image_refs.is_empty() {
        store.list_pulled()
    } else {
        let mut found = Vec::new();
        let mut errors = Vec::new();
        for r in &a.image_refs {
            match store.get_pulled(r) {
                Ok(Some(rec)) => found.push(rec),
                Ok(None) => bail!("no pulled record for {r}"),
                Err(e) => errors.push(e),
            }
        }
        (found, errors)
    };
    let (intents, intent_errors) = store.list_intents();
    outln!("{}", serde_json::to_string_pretty(&serde_json::json!({"pulled": records, "pulling": intents}))?);
    for e in errors.iter().chain(&intent_errors) {
        eprintln!("unreadable: {e}");
    }
    Ok(errors.is_empty())
}

/// Runs `gc`: prunes records of images the runtime no longer has.
pub async fn gc(a: GcArgs) -> Result<()> {
    let backend = a.runtime.backend().await?;
    let ids: Vec<String> = backend.list_images().await?.into_iter().map(|i| i.id).collect();
    let store = open_records(&a.runtime.root_dir)?;
    let pm = PullManager::new(store, PolicyEnforcer::new(Default::default(), &[]).unwrap_or_default());
    let until = podpass_node::images::rfc3339_now();
    let pruned = tokio::task::spawn_blocking(move || pm.prune_unknown_records(&ids, &until)).await?;
    outln!("pruned {pruned} records");
    Ok(())
}
