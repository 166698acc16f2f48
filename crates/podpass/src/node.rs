//! `podpass node …`: the node agent's tools.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use podpass_api::credential_provider::{read_config, validate};
use podpass_api::{Feature, FeatureGates};
use podpass_node::credential::CredentialMetrics;
use podpass_node::credential::{PluginProvider, PodIdentity, PullSecret, ServiceAccountSource, lookup};
use podpass_node::credential::{parse_pull_secret, read_node_config};
use serde_json::{Value, json};

/// `podpass node …`.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Read and validate a CredentialProviderConfig exactly as the kubelet does; prints
    /// `ok <hash>` or the kubelet's errors (exit 1).
    CheckConfig(CheckConfigArgs),
    /// Look up the credentials the kubelet would use to pull each image for each pod, running
    /// the credential provider plugins (with the pod's service-account token where configured).
    Credentials(CredentialsArgs),
    /// The kubelet's EnsureImageExists with ensure-secret-pulled-images: may this pod use the
    /// image, pulling it with the pod's credentials when it must. Prints the events and a
    /// JSON decision; exit 0 when the pod may use the image, 1 otherwise.
    EnsureImage(Box<crate::node_images::EnsureImageArgs>),
    /// The image store: load (preload), list and remove images.
    #[command(subcommand)]
    Images(crate::node_images::ImagesCommand),
    /// Pull records (`<root-dir>/image_manager`): who may use which image.
    #[command(subcommand)]
    Records(crate::node_images::RecordsCommand),
    /// Explain, for each container image of a pod, what the kubelet would decide and why:
    /// pull policy, presence, pull record and verification verdict, the credentials in the
    /// order they would be tried. Read-only: never pulls (`--no-exec`: no plugin runs).
    Explain(Box<crate::node_explain::ExplainArgs>),
    /// Prune pull records of images the runtime no longer has (image GC's `PruneUnknownRecords`).
    Gc(crate::node_images::GcArgs),
    /// The node agent daemon: registers the Node and keeps its heartbeat Lease renewed; for
    /// each pod bound to the node writes its projected volumes (rotating tokens), ensures its
    /// images with its own credentials, and posts Events and pod status. SIGTERM or Ctrl-C
    /// stops it.
    Run(Box<podpass_node::AgentConfig>),
    /// Join a cluster as kubeadm's `join`: discover it with a bootstrap token (the signed
    /// cluster-info, the CA pinned), then run the node agent, which asks the cluster for its
    /// own certificate and registers the Node.
    Join(Box<crate::node_join::JoinArgs>),
}

/// Flags of `podpass node credentials`.
#[derive(Debug, Args)]
pub struct CredentialsArgs {
    /// What provider NAME does when a pod's service account has not opted in to it:
    /// `NAME=skip|node|anonymous|fail`, as `podpass node run`'s flag. Repeatable.
    #[arg(long = "credential-provider-fallback")]
    credential_provider_fallbacks: Vec<String>,
    /// CredentialProviderConfig file or directory.
    #[arg(long)]
    image_credential_provider_config: PathBuf,
    /// Directory holding the provider binaries.
    #[arg(long)]
    image_credential_provider_bin_dir: PathBuf,
    /// Kubelet root dir: node-wide credentials are read from `<root-dir>/config.json`.
    #[arg(long)]
    root_dir: Option<PathBuf>,
    /// Kubeconfig for reading pods, secrets and service accounts and requesting tokens.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Pods to look up for (`NAMESPACE/NAME`, repeatable); none: a lookup without a pod.
    #[arg(long = "pod")]
    pods: Vec<String>,
    /// Pull secret manifests (YAML or JSON, as `kubectl get secret -o yaml` prints them).
    #[arg(long = "pull-secret")]
    pull_secrets: Vec<PathBuf>,
    /// Print passwords instead of `<redacted>`.
    #[arg(long)]
    show_secrets: bool,
    /// Feature gates, e.g. `KubeletServiceAccountTokenForCredentialProviders=false`.
    #[arg(long, default_value = "")]
    feature_gates: FeatureGates,
    /// Images, looked up in order.
    #[arg(required = true)]
    images: Vec<String>,
}

/// Flags of `podpass node check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// A config file, or a directory of `.json`/`.yaml`/`.yml` files merged in name order.
    #[arg(long)]
    image_credential_provider_config: PathBuf,
    /// Feature gates, e.g. `KubeletServiceAccountTokenForCredentialProviders=false`.
    #[arg(long, default_value = "")]
    feature_gates: FeatureGates,
}

/// Runs a node subcommand.
pub fn run(cmd: NodeCommand) -> ExitCode {
    use crate::node_images as ni;
    match cmd {
        NodeCommand::CheckConfig(a) => check_config(&a),
        NodeCommand::Credentials(a) => block_on(async { credentials(a).await.map(|()| true) }),
        NodeCommand::EnsureImage(a) => block_on(ni::ensure_image(*a)),
        NodeCommand::Images(ni::ImagesCommand::Load(a)) => block_on(async { ni::load(a).await.map(|()| true) }),
        NodeCommand::Images(ni::ImagesCommand::List(a)) => block_on(async { ni::list(a).await.map(|()| true) }),
        NodeCommand::Images(ni::ImagesCommand::Remove(a)) => block_on(async { ni::remove(a).await.map(|()| true) }),
        NodeCommand::Records(ni::RecordsCommand::List(a)) => exit(ni::records_list(&a)),
        NodeCommand::Records(ni::RecordsCommand::Show(a)) => exit(ni::records_show(&a)),
        NodeCommand::Explain(a) => block_on(crate::node_explain::explain(*a)),
        NodeCommand::Gc(a) => block_on(async { ni::gc(a).await.map(|()| true) }),
        NodeCommand::Run(a) => run_agent(*a),
        NodeCommand::Join(a) => crate::node_join::join(*a),
    }
}

/// `podpass node run`: exit 64 with every configuration problem before connecting, 0 after
/// a clean stop, 1 when the agent fails.
fn run_agent(mut config: podpass_node::AgentConfig) -> ExitCode {
    config.version = format!("v1.{}.0-podpass.{}", podpass_apiserver::KUBE_MINOR, env!("CARGO_PKG_VERSION"));
    let prepared = match config.prepare() {
        Ok(p) => p,
        Err(e) => return crate::config_problems(&e),
    };
    let runtime = match crate::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let served = match prepared.bind().await {
            Ok(bound) => bound.serve(crate::shutdown_signal()).await,
            Err(e) => Err(e),
        };
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        }
    })
}

/// Ok(true) → 0, Ok(false) → 1 (refused), Err → 64 with the error chain.
fn exit(r: Result<bool>) -> ExitCode {
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(crate::EXIT_USAGE)
        }
    }
}

fn block_on(f: impl std::future::Future<Output = Result<bool>>) -> ExitCode {
    match crate::runtime() {
        Ok(r) => exit(r.block_on(f)),
        Err(code) => code,
    }
}

fn check_config(a: &CheckConfigArgs) -> ExitCode {
    let (config, hash) = match read_config(&a.image_credential_provider_config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let errors = validate(&config, a.feature_gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders));
    if !errors.is_empty() {
        eprintln!("failed to validate credential provider config: {errors}");
        return ExitCode::from(1);
    }
    outln!("ok {hash}");
    ExitCode::SUCCESS
}

/// Registers the providers (podpass-node's one assembly, used by every node command).
pub(crate) fn register(
    config_path: &std::path::Path,
    bin_dir: &std::path::Path,
    sa_token_feature: bool,
    source: Option<std::sync::Arc<dyn ServiceAccountSource>>,
    fallbacks: &[String],
) -> Result<Vec<PluginProvider>> {
    let fallbacks = podpass_node::credential::Fallbacks::parse(fallbacks)
        .map_err(|errors| anyhow::anyhow!("--credential-provider-fallback {}", errors.join("; ")))?;
    Ok(podpass_node::credential::register_providers(
        config_path,
        bin_dir,
        sa_token_feature,
        source,
        &fallbacks,
        &CredentialMetrics::default(),
    )?)
}

/// Pull secret manifests named by `--pull-secret`.
pub(crate) fn read_pull_secrets(paths: &[PathBuf]) -> Result<Vec<PullSecret>> {
    paths
        .iter()
        .map(|p| {
            let data = std::fs::read(p).with_context(|| format!("--pull-secret {}", p.display()))?;
            parse_pull_secret(&data).with_context(|| format!("--pull-secret {}", p.display()))
        })
        .collect()
}

/// The pod `NAMESPACE/NAME` from the API server: its identity and its image pull secrets.
/// As the kubelet, a pull secret that cannot be read is skipped with a warning.
pub(crate) async fn read_pod(client: &podpass_node::Client, pod: &str) -> Result<(PodIdentity, Vec<PullSecret>)> {
    let Some((namespace, name)) = pod.split_once('/') else {
        bail!("--pod {pod:?}: must be NAMESPACE/NAME");
    };
    let info = podpass_node::get_pod(client, namespace, name).await?;
    let (secrets, skipped) = podpass_node::pull_secrets(client, namespace, &info.pull_secrets).await;
    for (secret, e) in skipped {
        eprintln!("warning: pod {pod}: image pull secret {secret}: {e}");
    }
    Ok((info.identity, secrets))
}

async fn credentials(a: CredentialsArgs) -> Result<()> {
    let sa_token_feature = a.feature_gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders);
    let client = match &a.kubeconfig {
        Some(path) => Some(podpass_node::client_from_kubeconfig(path).await?),
        None => None,
    };
    let source: Option<std::sync::Arc<dyn ServiceAccountSource>> =
        client.clone().map(|c| podpass_node::KubeServiceAccounts::new(c) as std::sync::Arc<dyn ServiceAccountSource>);
    let providers = register(
        &a.image_credential_provider_config,
        &a.image_credential_provider_bin_dir,
        sa_token_feature,
        source,
        &a.credential_provider_fallbacks,
    )?;
    let node_config = match &a.root_dir {
        Some(dir) => read_node_config(dir).context("node-wide credentials")?,
        None => Default::default(),
    };
    let secrets = read_pull_secrets(&a.pull_secrets)?;
    // Each pod with its own pull secrets (read from the API), or one pod-less lookup.
    let mut targets: Vec<(Option<PodIdentity>, Vec<PullSecret>)> = Vec::new();
    if a.pods.is_empty() {
        targets.push((None, secrets.clone()));
    }
    for pod in &a.pods {
        let client = client.as_ref().context("--pod needs --kubeconfig to read the pod")?;
        let (identity, mut pod_secrets) = read_pod(client, pod).await?;
        pod_secrets.splice(0..0, secrets.iter().cloned());
        targets.push((Some(identity), pod_secrets));
    }
    let mut lookups = Vec::new();
    for (pod, pod_secrets) in &targets {
        for image in &a.images {
            let found = lookup(image, pod.as_ref(), pod_secrets, &providers, &node_config).await;
            for p in found.providers.iter().filter(|p| p.skip_reason.is_some()) {
                eprintln!(
                    "provider {} matched {image} but yielded no credentials: {}",
                    p.name,
                    p.skip_reason.as_deref().unwrap_or_default()
                );
            }
            let credentials: Vec<Value> = found
                .credentials
                .iter()
                .map(|c| {
                    json!({
                        "username": c.username,
                        "password": if a.show_secrets { c.password.clone() } else { "<redacted>".to_owned() },
                        "source": c.source,
                    })
                })
                .collect();
            lookups.push(json!({
                "pod": pod.as_ref().map(|p| format!("{}/{}", p.namespace, p.name)),
                "image": image,
                "providers": found.providers,
                "credentials": credentials,
                "refusal": found.refusal,
            }));
        }
    }
    let execs: serde_json::Map<String, Value> =
        providers.iter().map(|p| (p.name().to_owned(), json!(p.exec_count()))).collect();
    outln!("{}", serde_json::to_string_pretty(&json!({"lookups": lookups, "execs": execs}))?);
    Ok(())
}
