//! `podpass bench workloads`: on a running `podpass up` cluster (its data dir), after
//! `podpass up --demo` pushed team-a's images `v1` and `v2`, a Deployment of N replicas
//! created → every pod Running, against N bare pods created at once → every pod Running on
//! the same cluster (the floor: the same pods without a controller; goal ≤ 1.3×), then a
//! rolling update of N to `v2` → rolled out. Every pod pulls and runs on its node's
//! containerd as team-a's own service account, as the demo's do. On a cluster of several
//! nodes (`podpass up --nodes 3`) it prints how the scheduler spread the replicas.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::up::api::Api;

/// Flags of `podpass bench workloads`.
#[derive(Debug, Args)]
pub struct WorkloadsBench {
    /// The data dir of the running `podpass up` cluster.
    #[arg(long, default_value = "./podpass-data")]
    data_dir: PathBuf,
    /// Replicas of the Deployment, and bare pods of the floor.
    #[arg(long, default_value_t = 100)]
    replicas: usize,
    /// The registry's `host:port` the demo pushed to.
    #[arg(long, default_value = "127.0.0.1:5000")]
    registry: String,
    /// How long a phase may take before the bench gives up.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
}

const NS: &str = "team-a";
const LABEL: &str = "podpass-bench";

fn pod_spec(image: &str) -> Value {
    json!({"serviceAccountName": "app", "terminationGracePeriodSeconds": 1,
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]})
}

/// The bench's pods of `kind` (`deployment` or `bare`), not being deleted.
async fn pods(api: &Api, kind: &str) -> Result<Vec<Value>> {
    let list = api.get_ok(&format!("/api/v1/namespaces/{NS}/pods?labelSelector={LABEL}%3D{kind}")).await?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    Ok(items.into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect())
}

/// Polls until `done` holds, for at most `limit`.
async fn until<F, Fut>(what: &str, limit: Duration, mut done: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let began = Instant::now();
    loop {
        if done().await? {
            return Ok(began.elapsed());
        }
        if began.elapsed() > limit {
            bail!("{what}: not within {} s", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Exactly `n` of the bench's pods of `kind` are active, and all of them Running. Pods
/// the node refused (`OutOfpods` when a surge passes its maxPods: Failed, as upstream's)
/// are not active; their controller replaces them.
async fn running(api: &Api, kind: &str, n: usize) -> Result<bool> {
    let pods = pods(api, kind).await?;
    let finished = |p: &Value| p["status"]["phase"] == "Failed" || p["status"]["phase"] == "Succeeded";
    let active: Vec<&Value> = pods.iter().filter(|p| !finished(p)).collect();
    Ok(active.len() == n && active.iter().all(|p| p["status"]["phase"] == "Running"))
}

async fn gone(api: &Api, kind: &str) -> Result<bool> {
    let list = api.get_ok(&format!("/api/v1/namespaces/{NS}/pods?labelSelector={LABEL}%3D{kind}")).await?;
    Ok(list["items"].as_array().is_none_or(Vec::is_empty))
}

/// Runs the bench.
pub fn run(args: WorkloadsBench) -> Result<()> {
    if args.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    runtime.block_on(drive(&args))
}

async fn drive(args: &WorkloadsBench) -> Result<()> {
    let api = Api::from_data_dir(&args.data_dir)
        .with_context(|| format!("{}: is `podpass up` running on it?", args.data_dir.display()))?;
    let limit = Duration::from_secs(args.timeout_seconds);
    let n = args.replicas;
    let v1 = format!("{}/team-a/app:v1", args.registry);
    let v2 = format!("{}/team-a/app:v2", args.registry);
    let deployments = format!("/apis/apps/v1/namespaces/{NS}/deployments");
    let (code, _) = api.get(&format!("/api/v1/namespaces/{NS}/serviceaccounts/app")).await?;
    if code != 200 {
        bail!("no service account {NS}/app: run `podpass up --demo --keep` first (it pushes team-a's v1 and v2)");
    }
    // An earlier run's leftovers.
    api.delete(&format!("{deployments}/bench")).await?;
    for kind in ["deployment", "bare"] {
        until("an earlier run's pods gone", limit, || gone(&api, kind)).await?;
    }

    // A warm-up pod per node, so the image is on every node before anything is timed.
    let nodes = api.get_ok("/api/v1/nodes").await?;
    let names: Vec<String> = nodes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    if names.is_empty() {
        bail!("no Ready node");
    }
    for (i, node) in names.iter().enumerate() {
        let mut spec = pod_spec(&v1);
        spec["nodeName"] = json!(node);
        let warm = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("bench-warm-up-{i}"), "labels": {LABEL: "bare"}}, "spec": spec});
        api.post(&format!("/api/v1/namespaces/{NS}/pods"), &warm).await?;
    }
    until("the warm-up pods Running", limit, || running(&api, "bare", names.len())).await?;
    for i in 0..names.len() {
        api.delete(&format!("/api/v1/namespaces/{NS}/pods/bench-warm-up-{i}")).await?;
    }
    until("the warm-up pods gone", limit, || gone(&api, "bare")).await?;

    eprintln!("workloads: a Deployment of {n} replicas…");
    let deployment = |image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bench"},
            "spec": {"replicas": n, "selector": {"matchLabels": {LABEL: "deployment"}},
                     "template": {"metadata": {"labels": {LABEL: "deployment"}}, "spec": pod_spec(image)}}})
    };
    let began = Instant::now();
    api.post(&deployments, &deployment(&v1)).await?;
    until("the Deployment's pods Running", limit, || running(&api, "deployment", n)).await?;
    let deployed = began.elapsed();
    // How the scheduler spread them: pods per node.
    let mut per_node: std::collections::BTreeMap<String, usize> = names.iter().map(|n| (n.clone(), 0)).collect();
    for pod in pods(&api, "deployment").await? {
        *per_node.entry(pod["spec"]["nodeName"].as_str().unwrap_or("none").to_owned()).or_default() += 1;
    }
    let spread: Vec<String> = per_node.values().map(usize::to_string).collect();

    eprintln!("workloads: a rolling update of {n} to v2…");
    let began = Instant::now();
    api.merge_patch(&format!("{deployments}/bench"), &json!({"spec": {"template": {"spec": pod_spec(&v2)}}})).await?;
    until("the rolling update", limit, || async {
        let d = api.get_ok(&format!("{deployments}/bench")).await?;
        let s = &d["status"];
        let want = json!(n);
        let done = s["observedGeneration"].as_i64() >= d["metadata"]["generation"].as_i64()
            && s["updatedReplicas"] == want
            && s["availableReplicas"] == want
            && s["replicas"] == want;
        Ok(done && running(&api, "deployment", n).await?)
    })
    .await?;
    let rolled = began.elapsed();
    api.delete(&format!("{deployments}/bench")).await?;
    until("the Deployment's pods gone", limit, || gone(&api, "deployment")).await?;

    eprintln!("workloads: {n} bare pods at once…");
    let began = Instant::now();
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..n {
        let api = api.clone();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("bench-bare-{i}"), "labels": {LABEL: "bare"}}, "spec": pod_spec(&v1)});
        creates.spawn(async move { api.post(&format!("/api/v1/namespaces/{NS}/pods"), &pod).await });
    }
    while let Some(created) = creates.join_next().await {
        created.context("a create task")??;
    }
    until("the bare pods Running", limit, || running(&api, "bare", n)).await?;
    let bare = began.elapsed();
    for i in 0..n {
        api.delete(&format!("/api/v1/namespaces/{NS}/pods/bench-bare-{i}")).await?;
    }
    until("the bare pods gone", limit, || gone(&api, "bare")).await?;

    let ratio = deployed.as_secs_f64() / bare.as_secs_f64().max(f64::EPSILON);
    println!(
        "workloads: nodes={} replicas={n} spread={} deployment_running_s={:.2} bare_pods_running_s={:.2} ratio={ratio:.2} (goal <= 1.30) rolling_update_s={:.2}",
        names.len(),
        spread.join("/"),
        deployed.as_secs_f64(),
        bare.as_secs_f64(),
        rolled.as_secs_f64()
    );
    Ok(())
}
