//! `podpass bench cluster`: the control plane at scale, by simulation (upstream's kubemark
//! and its density and load tests). It starts the real API server (on the embedded store,
//! or on a real etcd), the controller manager and the scheduler, then N hollow nodes in
//! this process ([`podpass_node::hollow`]: the node agent's own TLS bootstrap,
//! registration, Leases, status, pod watch, volumes and tokens, on a simulated runtime that
//! starts nothing), creates Deployments totalling N×M pods, waits until every pod is
//! Running as its node reports it, rolls one Deployment, and deletes them all.
//!
//! It prints what upstream's scalability SLOs judge: pod startup (created → Running, both
//! as this bench's watch sees them), the API server's own request latencies (the worst
//! resource and verb's p99 of mutating calls, single-object reads and namespace LISTs,
//! from `apiserver_request_duration_seconds` over the measured phases), watch events
//! delivered per second, the API server's RSS and bytes per pod; then one
//! `cluster-scale:` line. A hollow node's reports are made up, so this measures the
//! control plane only, never correctness.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::up::api::Api;

mod metrics;
mod watch;

use metrics::{Histograms, Slis};
use watch::PodTimes;

/// Flags of `podpass bench cluster`.
#[derive(Debug, Args)]
pub struct ClusterBench {
    /// Hollow nodes.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Pods per node (the Deployments total nodes × this).
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// The API server's store.
    #[arg(long, value_enum, default_value = "embedded")]
    store: Store,
    /// Replicas of each Deployment (the last one takes what remains).
    #[arg(long, default_value_t = 100)]
    replicas_per_deployment: usize,
    /// Deployments per namespace.
    #[arg(long, default_value_t = 10)]
    deployments_per_namespace: usize,
    /// Where the API server's (and etcd's) data go; default a fresh directory under
    /// /var/tmp, removed afterwards (a real disk: the store's fsyncs are part of the cost).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where the hollow nodes' directories go; default a fresh directory in /dev/shm (their
    /// disks are simulated too), removed afterwards.
    #[arg(long)]
    nodes_dir: Option<PathBuf>,
    /// How long one phase may take before the bench gives up.
    #[arg(long, default_value_t = 1800)]
    timeout_seconds: u64,
}

/// The API server's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Store {
    /// podpass's embedded store.
    Embedded,
    /// A real etcd (the `etcd` on PATH), started for the run.
    Etcd,
}

/// A child process, killed on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr().context("finding a free port")?.port())
}

/// The process's resident set in bytes (`VmRSS`).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn log_file(dir: &Path, name: &str) -> Result<std::fs::File> {
    std::fs::File::create(dir.join(name)).with_context(|| format!("creating {}", dir.join(name).display()))
}

async fn start_etcd(dir: &Path) -> Result<(Child, String)> {
    let (client, peer) = (free_port()?, free_port()?);
    let url = |p: u16| format!("http://127.0.0.1:{p}");
    let child = Command::new("etcd")
        .args(["--name", "bench", "--data-dir", &dir.join("etcd").display().to_string()])
        .args(["--listen-client-urls", &url(client), "--advertise-client-urls", &url(client)])
        .args(["--listen-peer-urls", &url(peer), "--initial-advertise-peer-urls", &url(peer)])
        .args(["--initial-cluster", &format!("bench={}", url(peer))])
        .args(["--quota-backend-bytes", &(8u64 << 30).to_string()])
        .stdout(Stdio::null())
        .stderr(log_file(dir, "etcd.log")?)
        .spawn()
        .context("starting etcd (is it on PATH? Debian: etcd-server)")?;
    let mut etcd = Child(child);
    let began = Instant::now();
    loop {
        let healthy = reqwest::get(format!("{}/health", url(client)))
            .await
            .ok()
            .map(|r| r.json::<Value>())
            .map(|f| async { f.await.ok() });
        let healthy = match healthy {
            Some(f) => f.await.is_some_and(|v| v["health"] == "true"),
            None => false,
        };
        if healthy {
            return Ok((etcd, url(client)));
        }
        if let Some(status) = etcd.0.try_wait().context("waiting for etcd")? {
            bail!("etcd exited ({status}); see {}", dir.join("etcd.log").display());
        }
        if began.elapsed() > Duration::from_secs(60) {
            bail!("etcd did not become healthy within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `podpass apiserver kubeconfig` for `user`, written to `<dir>/<file>`.
fn identity(podpass: &Path, dir: &Path, user: &str, file: &str) -> Result<PathBuf> {
    let out = Command::new(podpass)
        .args(["apiserver", "kubeconfig", "--data-dir", &dir.display().to_string(), "--user", user])
        .output()
        .context("podpass apiserver kubeconfig")?;
    if !out.status.success() {
        bail!("podpass apiserver kubeconfig --user {user}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let path = dir.join(file);
    std::fs::write(&path, out.stdout).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The control plane's processes.
struct ControlPlane {
    api: Api,
    apiserver_pid: u32,
    _children: Vec<Child>,
}

async fn control_plane(podpass: &Path, dir: &Path, store: Store) -> Result<ControlPlane> {
    let mut children = Vec::new();
    let mut flags = vec!["apiserver".to_owned(), "--data-dir".into(), dir.display().to_string()];
    // As kubeadm runs it (and `podpass up`): a joining node authenticates with a bootstrap
    // token, then with the client certificate the cluster's CA signed for it.
    flags.extend(["--secure-port".into(), "0".into(), "--enable-bootstrap-token-auth=true".into()]);
    flags.extend(["--client-ca-file".into(), dir.join("pki/ca.crt").display().to_string()]);
    if store == Store::Etcd {
        let (etcd, url) = start_etcd(dir).await?;
        children.push(etcd);
        flags.extend(["--etcd-servers".into(), url]);
    }
    let apiserver = Command::new(podpass)
        .args(&flags)
        .stdout(Stdio::null())
        .stderr(log_file(dir, "apiserver.log")?)
        .spawn()
        .context("starting podpass apiserver")?;
    let apiserver_pid = apiserver.id();
    children.push(Child(apiserver));
    let began = Instant::now();
    while !dir.join("server-url").exists() {
        if began.elapsed() > Duration::from_secs(60) {
            bail!("the API server did not start within 60 s; see {}", dir.join("apiserver.log").display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let manager = identity(podpass, dir, "system:kube-controller-manager", "controller-manager.kubeconfig")?;
    let scheduler = identity(podpass, dir, "system:kube-scheduler", "scheduler.kubeconfig")?;
    let path = |p: &str| dir.join(p).display().to_string();
    let manager = Command::new(podpass)
        .args(["controller-manager", "--kubeconfig", &manager.display().to_string()])
        .args(["--service-account-private-key-file", &path("sa.key"), "--root-ca-file", &path("pki/ca.crt")])
        .args(["--cluster-signing-cert-file", &path("pki/ca.crt"), "--cluster-signing-key-file", &path("pki/ca.key")])
        .stdout(Stdio::null())
        .stderr(log_file(dir, "controller-manager.log")?)
        .spawn()
        .context("starting podpass controller-manager")?;
    children.push(Child(manager));
    let scheduler = Command::new(podpass)
        .args(["scheduler", "--kubeconfig", &scheduler.display().to_string()])
        .stdout(Stdio::null())
        .stderr(log_file(dir, "scheduler.log")?)
        .spawn()
        .context("starting podpass scheduler")?;
    children.push(Child(scheduler));
    let api = Api::from_data_dir(dir)?;
    Ok(ControlPlane { api, apiserver_pid, _children: children })
}

/// Polls until `done` holds, for at most `limit`, saying how far it got every 10 s.
async fn until<F, Fut>(what: &str, limit: Duration, mut done: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(bool, String)>>,
{
    let began = Instant::now();
    let mut said = Instant::now();
    loop {
        let (ready, progress) = done().await?;
        if ready {
            return Ok(began.elapsed());
        }
        if said.elapsed() > Duration::from_secs(10) {
            eprintln!("cluster:   {what}: {progress} ({:.0} s)", began.elapsed().as_secs_f64());
            said = Instant::now();
        }
        if began.elapsed() > limit {
            bail!("{what}: not within {} s ({progress})", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Nodes Ready now, read a page at a time (a thousand Nodes are more than one answer).
async fn ready_nodes(api: &Api) -> Result<usize> {
    let (mut count, mut next) = (0, String::new());
    loop {
        let page = api.get_ok(&format!("/api/v1/nodes?limit=200&continue={next}")).await?;
        count += page["items"].as_array().into_iter().flatten().filter(|node| ready(node)).count();
        match page["metadata"]["continue"].as_str() {
            Some(token) if !token.is_empty() => {
                next = token.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D");
            }
            _ => return Ok(count),
        }
    }
}

/// The hollow nodes, stopped together.
struct Hollow {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: tokio::task::JoinSet<Result<(), podpass_node::hollow::HollowError>>,
}

impl Hollow {
    /// A node that stopped early: its error.
    fn failed(&mut self) -> Result<()> {
        match self.tasks.try_join_next() {
            None => Ok(()),
            Some(Ok(Err(e))) => bail!("{e}"),
            Some(Ok(Ok(()))) => bail!("a hollow node stopped"),
            Some(Err(e)) => bail!("a hollow node's task: {e}"),
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.send(true);
        let deadline = tokio::time::sleep(Duration::from_secs(30));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = self.tasks.join_next() => if next.is_none() { return },
                () = &mut deadline => return,
            }
        }
    }
}

async fn start_nodes(api: &Api, dir: &Path, nodes_dir: &Path, n: usize) -> Result<Hollow> {
    crate::up::node_bootstrap_bindings(api).await?;
    let (client, _) = podpass_component::client(&dir.join("admin.kubeconfig")).await?;
    let request = podpass_component::TokenCreate {
        token: None,
        ttl: Some(Duration::from_secs(24 * 3600)),
        description: Some("podpass bench cluster's hollow nodes".into()),
        usages: vec!["signing".into(), "authentication".into()],
        groups: vec![podpass_api::bootstrap_token::NODE_GROUP.into()],
    };
    let token = podpass_component::create_bootstrap_token(&client, &request).await?;
    let ca = std::fs::read_to_string(dir.join("pki/ca.crt")).context("reading pki/ca.crt")?;
    let bootstrap = nodes_dir.join("bootstrap.kubeconfig");
    std::fs::write(&bootstrap, podpass_node::join::bootstrap_kubeconfig(&api.url, &ca, &token))
        .context("writing the bootstrap kubeconfig")?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let name = format!("hollow-{i:04}");
        let node = podpass_node::hollow::HollowNode {
            dir: nodes_dir.join(&name),
            name,
            bootstrap_kubeconfig: bootstrap.clone(),
            subnet: u16::try_from(i).unwrap_or(u16::MAX),
        };
        let mut stopped = stopped.clone();
        tasks.spawn(async move {
            // Spread over a few seconds, as machines booting are.
            tokio::time::sleep(Duration::from_millis(5 * i as u64)).await;
            node.run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
        });
    }
    Ok(Hollow { stop, tasks })
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else { return 0.0 };
    sorted[((last as f64 * p).ceil() as usize).min(last)].as_secs_f64() * 1000.0
}

/// Namespaces and Deployments: `(namespace, name, replicas)`.
fn layout(args: &ClusterBench) -> Vec<(String, String, usize)> {
    let total = args.nodes * args.pods_per_node;
    let per = args.replicas_per_deployment.max(1);
    let count = total.div_ceil(per);
    (0..count)
        .map(|k| {
            let replicas = if k + 1 == count { total - per * k } else { per };
            (format!("bench-{}", k / args.deployments_per_namespace.max(1)), format!("d-{k}"), replicas)
        })
        .collect()
}

fn deployment(name: &str, replicas: usize, revision: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": {"bench.podpass.dev/revision": revision.to_string()}},
                "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": "registry.example/bench:1", "imagePullPolicy": "IfNotPresent",
                        "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}}}})
}

/// Descriptors each hollow node holds at most (its API connections, its runtime's socket
/// both ends, its watches), and the control plane's own share of each.
const FILES_PER_NODE: u64 = 16;

/// Raises this process's open-file limit (the control plane's children inherit it) to its
/// hard limit, which must hold `nodes`' worth.
fn raise_file_limit(nodes: usize) -> Result<()> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let needed = FILES_PER_NODE * nodes as u64 + 1024;
    if limit.maximum.is_some_and(|hard| hard < needed) {
        bail!(
            "--nodes {nodes} needs about {needed} open files and this process may have {} at most (ulimit -Hn)",
            limit.maximum.unwrap_or_default()
        );
    }
    limit.current = limit.maximum;
    setrlimit(Resource::Nofile, limit).context("raising the open-file limit to its maximum")?;
    Ok(())
}

/// Runs the bench.
pub fn run(args: ClusterBench) -> Result<()> {
    if args.nodes == 0 || args.pods_per_node == 0 {
        bail!("--nodes and --pods-per-node must be at least 1");
    }
    raise_file_limit(args.nodes)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    runtime.block_on(drive(&args))
}

async fn drive(args: &ClusterBench) -> Result<()> {
    let limit = Duration::from_secs(args.timeout_seconds);
    let podpass = std::env::current_exe().context("the podpass binary")?;
    let scratch = tempfile::Builder::new().prefix("podpass-bench-cluster").tempdir_in("/var/tmp")?;
    let dir = args.data_dir.clone().unwrap_or_else(|| scratch.path().join("control-plane"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let shm = Path::new("/dev/shm");
    let nodes_scratch = tempfile::Builder::new().prefix("podpass-bench-nodes").tempdir_in(if shm.is_dir() {
        shm
    } else {
        scratch.path()
    })?;
    let nodes_dir = args.nodes_dir.clone().unwrap_or_else(|| nodes_scratch.path().to_owned());
    std::fs::create_dir_all(&nodes_dir).with_context(|| format!("creating {}", nodes_dir.display()))?;
    let (n, total) = (args.nodes, args.nodes * args.pods_per_node);
    let store = match args.store {
        Store::Embedded => "embedded",
        Store::Etcd => "etcd",
    };

    eprintln!("cluster: [1/6] the control plane on the {store} store…");
    let cp = control_plane(&podpass, &dir, args.store).await?;
    let api = cp.api.clone();
    until("the API server ready", limit, || async {
        let (code, _) = api.get("/readyz").await.unwrap_or((0, Value::Null));
        Ok((code == 200, format!("/readyz {code}")))
    })
    .await?;

    eprintln!("cluster: [2/6] {n} hollow nodes joining (TLS bootstrap, registration)…");
    let mut hollow = start_nodes(&api, &dir, &nodes_dir, n).await?;
    let joined = until(&format!("{n} nodes Ready"), limit, || {
        let (failed, api) = (hollow.failed(), &api);
        async move {
            failed?;
            let ready_n = ready_nodes(api).await?;
            Ok((ready_n >= n, format!("{ready_n}/{n} Ready")))
        }
    })
    .await?;
    eprintln!("cluster:   {n} nodes Ready in {:.1} s", joined.as_secs_f64());

    let layout = layout(args);
    let mut namespaces: Vec<String> = layout.iter().map(|(ns, _, _)| ns.clone()).collect();
    namespaces.dedup();
    for ns in &namespaces {
        api.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .await?;
    }
    until("the namespaces' service accounts", limit, || async {
        let mut missing = 0;
        for ns in &namespaces {
            let (code, _) = api.get(&format!("/api/v1/namespaces/{ns}/serviceaccounts/default")).await?;
            missing += usize::from(code != 200);
        }
        Ok((missing == 0, format!("{missing} namespaces without their default account")))
    })
    .await?;

    // The measured phases: metrics from here on, the pods as a watch sees them.
    let before = Histograms::scrape(&api).await?;
    let rss_baseline = rss_bytes(cp.apiserver_pid);
    let rss_peak = Arc::new(std::sync::atomic::AtomicU64::new(rss_baseline));
    let sampler = {
        let (peak, pid) = (Arc::clone(&rss_peak), cp.apiserver_pid);
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let times = Arc::new(Mutex::new(HashMap::<String, PodTimes>::new()));
    let watcher = watch::spawn(&api, Arc::clone(&times)).await?;
    // Namespace LISTs while pods come and go, as upstream's load test issues them.
    let lister = {
        let (api, namespaces) = (api.clone(), namespaces.clone());
        tokio::spawn(async move {
            for ns in namespaces.iter().cycle() {
                let _ = api.get(&format!("/api/v1/namespaces/{ns}/pods")).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    eprintln!("cluster: [3/6] {} Deployments totalling {total} pods…", layout.len());
    let began = Instant::now();
    for (ns, name, replicas) in &layout {
        api.post(&format!("/apis/apps/v1/namespaces/{ns}/deployments"), &deployment(name, *replicas, 1)).await?;
    }
    let running_all = until(&format!("{total} pods Running"), limit, || {
        let (failed, counted) = (hollow.failed(), watch::counts(&times));
        async move {
            failed?;
            let (running, seen) = counted;
            Ok((running >= total, format!("{running} Running of {seen} created")))
        }
    })
    .await?;
    let rss_running = rss_bytes(cp.apiserver_pid);
    let mut startup: Vec<Duration> = times
        .lock()
        .map_err(|_| anyhow::anyhow!("pod times poisoned"))?
        .values()
        .filter_map(PodTimes::startup)
        .collect();
    startup.sort();
    eprintln!("cluster:   {total} pods Running in {:.1} s", running_all.as_secs_f64());

    eprintln!("cluster: [4/6] a rolling update of {}…", layout[0].1);
    let (ns0, d0, r0) = &layout[0];
    let path = format!("/apis/apps/v1/namespaces/{ns0}/deployments/{d0}");
    api.merge_patch(
        &path,
        &json!({"spec": {"template": {"metadata": {"annotations": {"bench.podpass.dev/revision": "2"}}}}}),
    )
    .await?;
    let rolled = until(&format!("{d0} rolled out"), limit, || async {
        let d = api.get_ok(&path).await?;
        let s = &d["status"];
        let want = json!(r0);
        let done = s["observedGeneration"].as_i64() >= d["metadata"]["generation"].as_i64()
            && s["updatedReplicas"] == want
            && s["availableReplicas"] == want
            && s["replicas"] == want;
        Ok((done, format!("{} updated, {} available", s["updatedReplicas"], s["availableReplicas"])))
    })
    .await?;

    eprintln!("cluster: [5/6] deleting every Deployment…");
    for (ns, name, _) in &layout {
        api.delete(&format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}")).await?;
    }
    let deleted = until("every pod gone", limit, || async {
        let left = watch::live(&times);
        Ok((left == 0, format!("{left} pods left")))
    })
    .await?;
    lister.abort();
    let after = Histograms::scrape(&api).await?;
    let watch_events = watcher.events();
    let measured = began.elapsed();
    watcher.stop();
    sampler.abort();

    eprintln!("cluster: [6/6] stopping the hollow nodes…");
    hollow.stop().await;

    let slis = Slis::of(&after.minus(&before));
    let (p50, p99) = (percentile_ms(&startup, 0.5), percentile_ms(&startup, 0.99));
    let peak = rss_peak.load(std::sync::atomic::Ordering::Relaxed);
    let per_pod = rss_running.saturating_sub(rss_baseline) / total as u64;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!("cluster: store={store} nodes={n} pods={total} nodes_ready_s={:.1}", joined.as_secs_f64());
    println!(
        "cluster: pod_startup_p50_ms={p50:.0} pod_startup_p99_ms={p99:.0} (goal <= 5000) all_running_s={:.1}",
        running_all.as_secs_f64()
    );
    for line in slis.lines() {
        println!("cluster: {line}");
    }
    println!(
        "cluster: watch_events_per_s={:.0} (this bench's own watch of every pod) rolling_update_s={:.1} delete_s={:.1}",
        watch_events as f64 / measured.as_secs_f64().max(f64::EPSILON),
        rolled.as_secs_f64(),
        deleted.as_secs_f64()
    );
    println!(
        "cluster: apiserver_rss_mib={:.0} (peak; {:.0} before the pods, {:.0} with them) bytes_per_pod={per_pod} (goal <= 65536) bench_process_rss_mib={:.0}",
        mib(peak),
        mib(rss_baseline),
        mib(rss_running),
        mib(rss_bytes(std::process::id()))
    );
    println!(
        "cluster-scale: nodes={n} pods={total} pod_startup_p99_ms={p99:.0} mutating_p99_ms={:.0} readonly_p99_ms={:.0} list_p99_ms={:.0} apiserver_rss_mib={:.0}",
        slis.mutating.p99_ms,
        slis.readonly.p99_ms,
        slis.list.p99_ms,
        mib(peak)
    );
    drop(cp);
    Ok(())
}
