//! `podpass node explain`: for each container image of a pod, what the kubelet's image
//! manager would decide and why — the pull policy, whether the image is present, its pull
//! record and the verification policy's verdict, the credentials in the order they would be
//! tried — in plain words as a tree, or as JSON. Read-only: it never pulls and never writes a
//! record (`--no-exec` also leaves the credential plugins unrun).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use podpass_api::Feature;
use podpass_node::credential::{
    CredentialSource, Lookup, PluginProvider, ProviderReport, ServiceAccountSource, lookup,
};
use podpass_node::images::{
    Backend, ImageService, PolicyEnforcer, PullManager, PullPolicy, PullVerdict, RecordStore, feature_gates,
    pod_credentials,
};
use serde_json::{Value, json};

/// Flags of `podpass node explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Kubeconfig for reading the pod, its pull secrets and service account (and, unless
    /// --no-exec, requesting the tokens the providers are fed).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Kubelet root dir: pull records, the embedded store, node-wide `config.json`.
    #[arg(long)]
    root_dir: PathBuf,
    /// CRI endpoint (`unix:///run/containerd/containerd.sock`); the embedded store when absent.
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    /// KubeletConfiguration file (verification policy, allowlist, feature gates).
    #[arg(long)]
    config: Option<PathBuf>,
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
    /// The pod, `NAMESPACE/NAME` (its containers' images, or `--image` for it).
    #[arg(long, required_unless_present = "image")]
    pod: Option<String>,
    /// One image to explain: for `--pod` (with its pull secrets and service account), or
    /// for a pull with no pod (what a node-level pull would use).
    #[arg(long)]
    image: Option<String>,
    /// `text` (a tree per container) or `json`.
    #[arg(short = 'o', long = "output", default_value = "text", value_parser = ["text", "json"])]
    output: String,
    /// Do not run credential plugins: matching providers are listed as not run.
    #[arg(long)]
    no_exec: bool,
    /// As the node's flag: the container runtime's pull is taken as proof of access.
    #[arg(long)]
    trust_runtime_pulls: bool,
}

/// Runs `node explain`: Ok(true) once the explanation is printed.
pub async fn explain(a: ExplainArgs) -> Result<bool> {
    let pod_name = a.pod.clone().unwrap_or_default();
    if a.pod.is_some() && !pod_name.contains('/') {
        bail!("--pod {pod_name:?}: must be NAMESPACE/NAME");
    }
    let (namespace, name) = pod_name.split_once('/').unwrap_or_default();
    let config = match &a.config {
        None => Default::default(),
        Some(p) => podpass_node::read_kubelet_config(p)
            .map_err(|errors| anyhow::anyhow!("invalid configuration: {}", errors.join(", ")))
            .with_context(|| format!("--config {}", p.display()))?,
    };
    let gates = feature_gates(&config, "")?;
    let client = podpass_node::client_from_kubeconfig(&a.kubeconfig).await?;
    let (identity, secrets, node_name, mut containers) = match &a.pod {
        Some(pod) => {
            let (identity, secrets) = crate::node::read_pod(&client, pod).await?;
            let (node_name, containers) = podpass_node::get_pod_containers(&client, namespace, name).await?;
            (Some(identity), secrets, node_name, containers)
        }
        None => (None, Vec::new(), None, Vec::new()),
    };
    if let Some(image) = &a.image {
        // The image as a container of the pod would name it (its pull policy the API's
        // default), or the pod's own container of that image when it has one.
        let own = containers.iter().find(|c| &c.image == image).cloned();
        containers = vec![own.unwrap_or_else(|| podpass_node::PodContainer {
            name: "(--image)".into(),
            image: image.clone(),
            image_pull_policy: None,
            init: false,
            state: None,
        })];
    }
    let accounts = podpass_node::KubeServiceAccounts::new(client.clone()) as Arc<dyn ServiceAccountSource>;
    let sa_feature = gates.enabled(Feature::KubeletServiceAccountTokenForCredentialProviders);
    let providers = match (&a.image_credential_provider_config, &a.image_credential_provider_bin_dir) {
        (Some(c), Some(b)) => {
            crate::node::register(c, b, sa_feature, Some(accounts), &a.credential_provider_fallbacks)?
        }
        _ => Vec::new(),
    };
    let node_config = podpass_node::credential::read_node_config(&a.root_dir).context("node-wide credentials")?;
    let backend = Backend::open(&a.root_dir, a.container_runtime_endpoint.as_deref(), Vec::new())
        .await
        .context("image service")?;
    let verify = gates.enabled(Feature::KubeletEnsureSecretPulledImages);
    let pull_manager = if verify {
        let policy = PolicyEnforcer::new(config.policy, &config.allowlist).map_err(|errors| {
            anyhow::anyhow!("--config: {}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
        })?;
        let store =
            RecordStore::open(&a.root_dir).with_context(|| format!("pull records under {}", a.root_dir.display()))?;
        Some(Arc::new(PullManager::new(store, policy)))
    } else {
        None
    };

    let mut reports = Vec::new();
    for c in &containers {
        let image = podpass_node::images::apply_default_tag(&c.image).unwrap_or_else(|_| c.image.clone());
        let (policy, policy_from) = match c.image_pull_policy.as_deref().map(str::parse::<PullPolicy>) {
            Some(Ok(p)) => (p, "set on the container"),
            _ => (PullPolicy::default_for(&c.image), "the API's default for this tag"),
        };
        let present = backend.image_status(&image).await.context("image status")?;
        let image_ref = present.as_ref().map(|p| p.id.clone()).unwrap_or_default();
        let found = if a.no_exec {
            lookup(&image, identity.as_ref(), &secrets, &[], &node_config).await
        } else {
            lookup(&image, identity.as_ref(), &secrets, &providers, &node_config).await
        };
        let mut provider_reports = found.providers.clone();
        if a.no_exec {
            provider_reports = providers.iter().map(|p| not_run(p, &image)).collect();
        }
        let record = match (&pull_manager, image_ref.is_empty()) {
            (Some(pm), false) => {
                let pm = pm.clone();
                let r = image_ref.clone();
                tokio::task::spawn_blocking(move || pm.pulled_record(&r)).await?.ok().flatten()
            }
            _ => None,
        };
        let check = match (&pull_manager, image_ref.is_empty()) {
            (Some(pm), false) => {
                let (pm, img, r, creds) = (pm.clone(), image.clone(), image_ref.clone(), pod_credentials(&found));
                Some(tokio::task::spawn_blocking(move || pm.explain_check(&img, &r, move || Ok(creds))).await?)
            }
            _ => None,
        };
        let (mut usable, mut decision) =
            decide(policy, present.is_some(), check.as_ref().map(PullVerdict::must_pull), &found);
        if let Some(refusal) = found.refusal.as_ref().filter(|_| !usable && decision.starts_with("pull")) {
            (usable, decision) = (false, format!("ErrImagePull: {refusal}"));
        }
        reports.push(json!({
            "container": c.name,
            "init": c.init,
            "image": image,
            "pullPolicy": {"value": policy.api_name(), "from": policy_from},
            "present": present.is_some(),
            "imageRef": image_ref,
            "record": record,
            "verification": {
                "policy": format!("{:?}", pull_manager.as_ref().map(|pm| pm.policy().policy()).unwrap_or_default()),
                "enabled": verify,
                "result": check.as_ref().and_then(PullVerdict::check_result).map(|r| format!("{r:?}")),
                "mustPull": check.as_ref().map(PullVerdict::must_pull),
                "why": check.as_ref().map(|v| {
                    let mut why = verdict(v, record.is_some());
                    if a.no_exec && v.must_pull() && providers.iter().any(|p| p.matches(&image)) {
                        why.push_str(" (--no-exec: what a provider would have answered is unknown, so this counts the pull secrets alone)");
                    }
                    why
                }),
            },
            "providers": provider_reports,
            "credentials": found.credentials.iter().map(|c| json!({"username": c.username, "password": "<redacted>", "source": c.source, "from": source(&c.source)})).collect::<Vec<_>>(),
            "decision": decision,
            "proof": proof(&image, backend.pulls_through_runtime(), a.trust_runtime_pulls),
            "usable": usable,
            "status": c.state.as_ref().map(|(reason, message)| json!({"reason": reason, "message": message})),
        }));
    }
    let pod = identity.as_ref().map(|identity| {
        json!({
            "namespace": identity.namespace, "name": identity.name, "uid": identity.uid,
            "serviceAccount": identity.service_account, "node": node_name,
        })
    });
    // Which node's records and images these are: its certificate in the root dir says.
    let looked_at = podpass_node::certificate_node_name(&a.root_dir);
    let elsewhere = match (&looked_at, &node_name) {
        (Some(here), Some(bound)) if here != bound => Some(bound.clone()),
        _ => None,
    };
    if a.output == "json" {
        let node = json!({"name": looked_at, "rootDir": a.root_dir, "podBoundElsewhere": elsewhere});
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"node": node, "pod": pod, "containers": reports, "noExec": a.no_exec})
            )?
        );
    } else {
        match &looked_at {
            Some(here) => outln!("node {here} (its records and images under {})", a.root_dir.display()),
            None => outln!("the node whose root dir is {} (no node certificate there names it)", a.root_dir.display()),
        }
        if let (Some(bound), Some(here)) = (&elsewhere, &looked_at) {
            outln!("note: the pod is bound to {bound}, not {here}: this is what {here} would decide");
        }
        print_text(&pod, &reports);
    }
    Ok(true)
}

/// Where a pull's proof of access comes from on this node.
fn proof(image: &str, through_runtime: bool, trust_runtime_pulls: bool) -> Value {
    let registry = podpass_node::images::parse_reference(image).map(|r| r.domain).unwrap_or_default();
    let (at, says) = match (through_runtime, trust_runtime_pulls) {
        (false, _) => ("store", format!("the node's own pull from {registry} with the pod's credentials")),
        (true, false) => (
            "origin",
            format!(
                "{registry} itself, asked for the manifest by digest with the credential after the container runtime pulled (never the runtime's pull, which a mirror may serve)"
            ),
        ),
        (true, true) => (
            "runtime",
            "the container runtime's pull (--trust-runtime-pulls): a mirror that asks no credentials proves access for anyone".to_owned(),
        ),
    };
    json!({"at": at, "registry": registry, "says": says})
}

/// A provider's report when plugins are not run.
fn not_run(p: &PluginProvider, image: &str) -> ProviderReport {
    let matched = p.matches(image);
    ProviderReport {
        name: p.name().to_owned(),
        matched,
        skip_reason: matched.then(|| "not run (--no-exec)".to_owned()),
        ..Default::default()
    }
}

/// The verification's outcome in words.
fn verdict(verdict: &PullVerdict, has_record: bool) -> String {
    match verdict {
        PullVerdict::PolicyAllowed => {
            "the policy needs no verification for this image (preloaded or allowlisted)".into()
        }
        PullVerdict::RecordFound => {
            "this pod's credentials are on the record (or it is usable by every pod): no pull needed".into()
        }
        PullVerdict::Error(_) => "the records could not be read: fail safe, the pod must pull".into(),
        PullVerdict::NotPresent => "the image is not on the node: the pod must pull".into(),
        PullVerdict::MustAuthenticate if !has_record => {
            "no pull record of this image: the pod must pull to prove access".into()
        }
        PullVerdict::MustAuthenticate => {
            "the record does not name this pod's credentials: the pod must pull to prove access".into()
        }
    }
}

/// The kubelet's decision (`EnsureImageExists`): whether the pod may use the image without
/// a pull, and what happens.
fn decide(policy: PullPolicy, present: bool, must_pull: Option<bool>, found: &Lookup) -> (bool, String) {
    let with = if found.credentials.is_empty() {
        "anonymously (no credentials found)".to_owned()
    } else {
        format!(
            "trying {} credential(s) in order, first from {}",
            found.credentials.len(),
            source(&found.credentials[0].source)
        )
    };
    match policy {
        PullPolicy::Never if present && must_pull != Some(true) => (true, "use the present image (Never pulls)".into()),
        PullPolicy::Never if present => (
            false,
            "ErrImageNeverPull: the image is present but this pod must prove access, and the policy is Never".into(),
        ),
        PullPolicy::Never => (false, "ErrImageNeverPull: the image is absent and the policy is Never".into()),
        PullPolicy::Always => (false, format!("pull (Always), {with}; the pod uses the image only if it succeeds")),
        PullPolicy::IfNotPresent if !present => {
            (false, format!("pull (absent), {with}; the pod uses the image only if it succeeds"))
        }
        PullPolicy::IfNotPresent => match must_pull {
            Some(true) => (false, format!("pull to prove access, {with}; the pod uses the image only if it succeeds")),
            _ => (true, "use the present image without pulling".into()),
        },
    }
}

fn source(s: &CredentialSource) -> String {
    match s {
        CredentialSource::Secret { namespace, name, .. } => format!("pull secret {namespace}/{name}"),
        CredentialSource::ServiceAccount { namespace, name, .. } => {
            format!("a provider with service account {namespace}/{name}'s token")
        }
        CredentialSource::NodeWide => "node-wide credentials".to_owned(),
    }
}

fn print_text(pod: &Option<Value>, reports: &[Value]) {
    match pod {
        Some(pod) => {
            let ns = pod["namespace"].as_str().unwrap_or_default();
            outln!(
                "pod {ns}/{} (service account {ns}/{}, node {})",
                pod["name"].as_str().unwrap_or_default(),
                pod["serviceAccount"].as_str().unwrap_or_default(),
                pod["node"].as_str().unwrap_or("none"),
            );
        }
        None => outln!("no pod: a node-level pull (no pull secrets, no service account)"),
    }
    for r in reports {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let headline = if r["usable"] == true { "usable" } else { "NOT usable without a pull" };
        outln!(
            "{}container {}: {} — {headline}",
            if r["init"] == true { "init " } else { "" },
            s(&r["container"]),
            s(&r["image"])
        );
        outln!("  decision: {}", s(&r["decision"]));
        if let Some(why) = r["verification"]["why"].as_str() {
            outln!("  why: {why}");
        }
        if r["status"].is_object() {
            outln!("  status now: {}: {}", s(&r["status"]["reason"]), s(&r["status"]["message"]));
        }
        outln!("  ├─ pull policy: {} ({})", s(&r["pullPolicy"]["value"]), s(&r["pullPolicy"]["from"]));
        outln!("  ├─ proof of access by a pull: {}", s(&r["proof"]["says"]));
        if r["present"] == true {
            outln!("  ├─ present: yes, {}", s(&r["imageRef"]));
        } else {
            outln!("  ├─ present: no");
        }
        if r["verification"]["enabled"] == true {
            outln!("  ├─ verification policy: {}", s(&r["verification"]["policy"]));
        } else {
            outln!("  ├─ verification: off (KubeletEnsureSecretPulledImages disabled)");
        }
        match r["record"]["credentialMapping"].as_object() {
            Some(mapping) => {
                outln!("  ├─ pull record:");
                for (repo, who) in mapping {
                    outln!("  │  └─ {repo}: {}", record_who(who));
                }
            }
            None if r["present"] == true => outln!("  ├─ pull record: none"),
            None => {}
        }
        outln!("  └─ credentials, in the order they would be tried:");
        let creds = r["credentials"].as_array().cloned().unwrap_or_default();
        let providers = r["providers"].as_array().cloned().unwrap_or_default();
        for p in &providers {
            let fallback = p["fallback"].as_str().map(|f| {
                let meaning = match f {
                    "node" => "the plugin ran as for the node, no token",
                    "anonymous" => "no node-wide credentials either",
                    _ => "the pull is refused",
                };
                format!("; the service account has not opted in, fallback {f}: {meaning}")
            });
            let what = if p["matched"] != true {
                "does not match this image".to_owned()
            } else if let Some(f) = &fallback {
                format!("matched{}{f}", p["skipReason"].as_str().map(|w| format!(", {w}")).unwrap_or_default())
            } else if let Some(why) = p["skipReason"].as_str() {
                format!("matched, skipped: {why}")
            } else if p["cacheHit"] == true {
                "matched, answered from its cache".to_owned()
            } else {
                format!(
                    "matched, ran{}",
                    p["serviceAccount"]
                        .as_str()
                        .map(|sa| format!(" with service account {sa}'s token"))
                        .unwrap_or_default()
                )
            };
            outln!("     ├─ provider {}: {what}", s(&p["name"]));
        }
        if creds.is_empty() {
            outln!("     └─ none: the pull would be anonymous");
        }
        for (i, c) in creds.iter().enumerate() {
            let last = if i + 1 == creds.len() { "└" } else { "├" };
            outln!("     {last}─ {}. user {:?} from {}", i + 1, s(&c["username"]), s(&c["from"]));
        }
    }
}

/// Who a record's mapping lets use the image.
fn record_who(who: &Value) -> String {
    if who["nodePodsAccessible"] == true {
        return "every pod on the node (pulled with node-wide or no credentials)".into();
    }
    let mut out = Vec::new();
    for s in who["kubernetesSecrets"].as_array().into_iter().flatten() {
        out.push(format!("pull secret {}/{}", s["namespace"].as_str().unwrap_or(""), s["name"].as_str().unwrap_or("")));
    }
    for s in who["kubernetesServiceAccounts"].as_array().into_iter().flatten() {
        out.push(format!(
            "service account {}/{} (uid {})",
            s["namespace"].as_str().unwrap_or(""),
            s["name"].as_str().unwrap_or(""),
            s["uid"].as_str().unwrap_or("")
        ));
    }
    if out.is_empty() { "nobody without verification".into() } else { out.join(", ") }
}
