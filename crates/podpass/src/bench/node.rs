//! `podpass bench node`: a real `podpass apiserver` (in this process) and a real
//! `podpass node run` (a child process, so its memory and wakeups are its own), with a tiny
//! loopback registry serving one image. It measures how long a pod takes from its create to
//! its automounted token file on the node — one pod at a time, and 100 created at once —
//! against a bare pod-bound TokenRequest round trip measured in the same run at the same
//! concurrency, and for the burst against its own floor (the same creates and TokenRequests
//! at once, without an agent); the agent's resident memory per pod; and its wakeups
//! (context switches) per second while its pods are idle — with none, with the timed ones,
//! and with `--idle-pods`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};

use super::{Api, Phase, TOKEN_PATH, bound_token_body, containers, http, token_body};

/// Flags of `podpass bench node`.
#[derive(Debug, Args)]
pub struct NodeBench {
    /// Pods created at once in the burst phase.
    #[arg(long, default_value_t = 100)]
    burst: usize,
    /// Pods created one at a time in the sequential phase.
    #[arg(long, default_value_t = 20)]
    sequential: usize,
    /// Seconds of the idle wakeup measurement with every pod (at least one resync period,
    /// 60-87 s, so each pod's periodic re-read of its config maps is counted); the one with
    /// no pods lasts a quarter of it.
    #[arg(long, default_value_t = 90)]
    idle_seconds: u64,
    /// Pods on the node for the last idle measurement (more are created up to it once the
    /// timed ones are measured; 0 or fewer than the timed pods skips it).
    #[arg(long, default_value_t = 1000)]
    idle_pods: usize,
    /// Pods run one at a time on a containerd of the bench's own (as root), against raw CRI
    /// sandbox + container starts; 0 skips the phase.
    #[arg(long, default_value_t = 10)]
    containers: usize,
    /// Write the agent's logs (JSON lines; `RUST_LOG` filters) to this file.
    #[arg(long)]
    agent_log: Option<PathBuf>,
}

const NODE: &str = "bench-node";

/// Runs the bench.
pub fn run(args: NodeBench) -> Result<()> {
    if args.burst == 0 || args.sequential == 0 || args.idle_seconds == 0 {
        bail!("--burst, --sequential and --idle-seconds must be at least 1");
    }
    let dir = tempfile::tempdir().context("temporary directory")?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    runtime.block_on(drive(dir.path(), &args))
}

fn digest(data: &[u8]) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data);
    format!("sha256:{}", data_encoding::HEXLOWER.encode(d.as_ref()))
}

/// One image served over plain HTTP on loopback (the embedded store may use plain HTTP there).
async fn registry() -> Result<String> {
    use axum::http::header;
    use axum::response::IntoResponse;
    let layer: Vec<u8> = b"podpass bench layer".to_vec();
    let layer_digest = digest(&layer);
    let config = json!({"architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]}, "config": {}})
    .to_string()
    .into_bytes();
    let config_digest = digest(&config);
    let manifest = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer.len()}]})
    .to_string()
    .into_bytes();
    let manifest_digest = digest(&manifest);
    let blobs: HashMap<String, Vec<u8>> = [(layer_digest, layer), (config_digest, config)].into_iter().collect();
    let blobs = std::sync::Arc::new(blobs);
    let app = axum::Router::new()
        .route("/v2/", axum::routing::get(|| async { "{}" }))
        .route(
            "/v2/bench/idle/manifests/{reference}",
            axum::routing::get(move || {
                let (manifest, digest) = (manifest.clone(), manifest_digest.clone());
                async move {
                    (
                        [
                            (header::CONTENT_TYPE, "application/vnd.oci.image.manifest.v1+json".to_owned()),
                            (header::HeaderName::from_static("docker-content-digest"), digest),
                        ],
                        manifest,
                    )
                        .into_response()
                }
            }),
        )
        .route(
            "/v2/bench/idle/blobs/{digest}",
            axum::routing::get(move |axum::extract::Path(digest): axum::extract::Path<String>| {
                let blobs = blobs.clone();
                async move {
                    match blobs.get(&digest) {
                        Some(b) => b.clone().into_response(),
                        None => axum::http::StatusCode::NOT_FOUND.into_response(),
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("registry listener")?;
    let addr = listener.local_addr().context("registry address")?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("{addr}/bench/idle:1"))
}

/// The agent child, killed on drop.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Agent {
    /// Resident set size in KiB (`VmRSS`).
    fn rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).context("agent status")?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("no VmRSS")
    }

    /// Context switches of each thread so far, by thread ID: each is a wakeup.
    fn switches(&self) -> Result<HashMap<String, u64>> {
        let mut out = HashMap::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.0.id())).context("agent threads")? {
            let Ok(task) = task else { continue };
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
            let total: u64 = status
                .lines()
                .filter_map(|line| {
                    line.strip_prefix("voluntary_ctxt_switches:")
                        .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                })
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum();
            out.insert(task.file_name().to_string_lossy().into_owned(), total);
        }
        Ok(out)
    }

    /// Wakeups per second over `window`, summed over the threads alive at its end (a
    /// thread that ended in between takes its count with it).
    async fn wakeups_per_second(&self, window: Duration) -> Result<f64> {
        let before = self.switches()?;
        tokio::time::sleep(window).await;
        let after = self.switches()?;
        let woken: u64 = after.iter().map(|(tid, n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0))).sum();
        Ok(woken as f64 / window.as_secs_f64())
    }
}

/// CPU time process `pid` has run so far, in nanoseconds: the sum of its threads'
/// `schedstat` run times (a thread that exits inside a window drops out of it; the agent's
/// and the server's threads outlive the bench's windows).
fn cpu_ns(pid: u32) -> Result<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("threads of {pid}"))? {
        let Ok(task) = task else { continue };
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else { continue };
        total += stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok(total)
}

/// CPU of the agent and of this process (the control plane and the load generator) over
/// one window, in milliseconds.
#[derive(Default)]
struct CpuWindow {
    agent_ms: f64,
    server_ms: f64,
}

/// CPU clocks read at the start of a window.
struct CpuMark {
    agent: Option<u32>,
    agent_ns: u64,
    own_ns: u64,
}

impl CpuMark {
    /// Now, for `agent` (if any) and this process.
    fn now(agent: Option<u32>) -> Result<Self> {
        Ok(Self { agent, agent_ns: agent.map(cpu_ns).transpose()?.unwrap_or(0), own_ns: cpu_ns(std::process::id())? })
    }

    /// The CPU used since the mark.
    fn window(&self) -> Result<CpuWindow> {
        let agent_ns = self.agent.map(cpu_ns).transpose()?.unwrap_or(0);
        let own_ns = cpu_ns(std::process::id())?;
        let ms = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e6;
        Ok(CpuWindow { agent_ms: ms(agent_ns, self.agent_ns), server_ms: ms(own_ns, self.own_ns) })
    }
}

fn pod(name: &str, image: &str) -> String {
    pod_on(name, image, NODE)
}

fn pod_on(name: &str, image: &str, node: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"serviceAccountName": "bench", "nodeName": node,
                 "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent"}]}})
    .to_string()
}

/// Whether a pod's automounted token file exists under the agent's root.
fn token_written(root: &Path, uid: &str) -> bool {
    let dir = root.join("pods").join(uid).join("volumes/kubernetes.io~projected");
    std::fs::read_dir(dir).into_iter().flatten().flatten().any(|v| v.path().join("token").exists())
}

/// `n` connections, each open before any request goes, and the barrier that releases
/// their requests together.
async fn released_together(
    api: &Api,
    n: usize,
) -> Result<(Vec<http::Connection>, std::sync::Arc<tokio::sync::Barrier>)> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(api.connect().await?);
    }
    Ok((conns, std::sync::Arc::new(tokio::sync::Barrier::new(n))))
}

/// Sends one pod create on `conn`: when it was sent, when it was answered, and the pod's UID.
async fn create_pod(conn: &mut http::Connection, request: &[u8]) -> Result<(Instant, Instant, String)> {
    let sent = Instant::now();
    let answer = conn.round_trip(request).await?;
    let answered = Instant::now();
    if answer.status != 201 {
        bail!("creating a pod: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
    }
    let created: Value = serde_json::from_slice(&answer.body).context("decoding the pod")?;
    let uid = created.pointer("/metadata/uid").and_then(Value::as_str).context("pod without uid")?;
    Ok((sent, answered, uid.to_owned()))
}

/// What a set of pods created at once took.
struct Timed {
    /// Each pod's latency from its create's answer to its token file, in microseconds,
    /// sorted.
    latencies: Vec<u64>,
    /// From the creates' release to the last token file.
    makespan: Duration,
    /// The CPU spent from the release (every connection already open) until the last
    /// token file was seen.
    cpu: CpuWindow,
}

/// Creates pods `names` at once, each on its own connection, and times them to their token
/// files (polled every 0.1 ms while at most four are pending, every 5 ms otherwise).
async fn create_and_time(api: &Api, root: &Path, names: &[String], image: &str, agent: Option<u32>) -> Result<Timed> {
    let (conns, start) = released_together(api, names.len()).await?;
    let mark = CpuMark::now(agent)?;
    let mut tasks = Vec::new();
    for (name, mut conn) in names.iter().zip(conns) {
        let request = api.request("/api/v1/namespaces/bench/pods", &pod(name, image));
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            // The clock starts when the pod exists: its create answered.
            create_pod(&mut conn, &request).await
        }));
    }
    let mut pending = Vec::new();
    let mut released: Option<Instant> = None;
    for t in tasks {
        let (at, started, uid) = t.await.context("create task")??;
        released = Some(released.map_or(at, |r| r.min(at)));
        pending.push((started, uid));
    }
    let released = released.unwrap_or_else(Instant::now);
    // Polled from a blocking thread: the runtime's timer ticks in whole milliseconds, more
    // than a token file takes now that the volume is in memory.
    let root = root.to_owned();
    let (mut latencies, last) = tokio::task::spawn_blocking(move || -> Result<(Vec<u64>, Instant)> {
        let mut last = released;
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut latencies = Vec::with_capacity(pending.len());
        while !pending.is_empty() {
            if Instant::now() > deadline {
                bail!("{} token files not written within 120 s", pending.len());
            }
            let now = Instant::now();
            pending.retain(|(started, uid)| {
                if token_written(&root, uid) {
                    latencies.push(u64::try_from(now.duration_since(*started).as_micros()).unwrap_or(u64::MAX));
                    last = now;
                    false
                } else {
                    true
                }
            });
            // 0.1 ms resolution for a few pods; coarser for many, so polling does not take
            // the CPU the agent is measured with.
            std::thread::sleep(Duration::from_micros(if pending.len() <= 4 { 100 } else { 5000 }));
        }
        Ok((latencies, last))
    })
    .await
    .context("polling task")??;
    let cpu = mark.window()?;
    latencies.sort_unstable();
    Ok(Timed { latencies, makespan: last.duration_since(released), cpu })
}

/// Pod-bound TokenRequests for the pods `uids` (named `pod-<i>`), `concurrent` at a time,
/// each on its own connection; latencies in microseconds.
async fn token_requests(api: &Api, uids: &[String], concurrent: bool) -> Result<Vec<u64>> {
    let mut latencies = Vec::with_capacity(uids.len());
    if concurrent {
        // Every connection first, then all requests released together.
        let (conns, start) = released_together(api, uids.len()).await?;
        let mut tasks = Vec::new();
        for ((i, uid), mut conn) in uids.iter().enumerate().zip(conns) {
            let request = api.request(TOKEN_PATH, &token_body(i, uid));
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let started = Instant::now();
                let answer = conn.round_trip(&request).await?;
                if answer.status != 201 {
                    bail!("TokenRequest: {}", answer.status);
                }
                Ok(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))
            }));
        }
        for t in tasks {
            latencies.push(t.await.context("TokenRequest task")??);
        }
    } else {
        let mut conn = api.connect().await?;
        for (i, uid) in uids.iter().enumerate() {
            let request = api.request(TOKEN_PATH, &token_body(i, uid));
            let started = Instant::now();
            let answer = conn.round_trip(&request).await?;
            if answer.status != 201 {
                bail!("TokenRequest: {}", answer.status);
            }
            latencies.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        }
    }
    latencies.sort_unstable();
    Ok(latencies)
}

/// The burst's floor: `names.len()` clients at once each create a pod on a node no agent
/// serves and, from its create's answer, request a token bound to it — the control plane's
/// share of what the agent's burst asks of it, under the same concurrency. Latencies are
/// create answered → token answered; the makespan runs from the release to the last token.
async fn burst_floor(api: &Api, names: &[String], image: &str, agent: u32) -> Result<Timed> {
    let (conns, start) = released_together(api, names.len()).await?;
    let mark = CpuMark::now(Some(agent))?;
    let mut tasks = Vec::new();
    for (name, mut conn) in names.iter().zip(conns) {
        let create = api.request("/api/v1/namespaces/bench/pods", &pod_on(name, image, "bench-floor"));
        let (host, token, name, start) = (api.host.clone(), api.token.clone(), name.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let (released, started, uid) = create_pod(&mut conn, &create).await?;
            let answer =
                conn.round_trip(&http::post(&host, TOKEN_PATH, &token, &bound_token_body(&name, &uid))).await?;
            if answer.status != 201 {
                bail!("TokenRequest: {}", answer.status);
            }
            Ok((released, Instant::now(), u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)))
        }));
    }
    let mut latencies = Vec::with_capacity(names.len());
    let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
    for t in tasks {
        let (released, done, latency) = t.await.context("floor task")??;
        first = Some(first.map_or(released, |f| f.min(released)));
        last = Some(last.map_or(done, |l| l.max(done)));
        latencies.push(latency);
    }
    let cpu = mark.window()?;
    latencies.sort_unstable();
    let makespan = match (first, last) {
        (Some(first), Some(last)) => last.duration_since(first),
        _ => Duration::ZERO,
    };
    Ok(Timed { latencies, makespan, cpu })
}

/// Waits until `expected` pods of the node are prepared.
async fn wait_prepared(api: &Api, expected: usize, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !all_prepared(api, expected).await? {
        if Instant::now() > deadline {
            bail!("the agent did not prepare all {expected} pods within {} s", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

fn phase(latencies_us: Vec<u64>) -> Phase {
    Phase { ops: latencies_us.len(), elapsed: Duration::from_secs(1), latencies_us }
}

async fn all_prepared(api: &Api, expected: usize) -> Result<bool> {
    let mut conn = api.connect().await?;
    let path = format!("/api/v1/namespaces/bench/pods?fieldSelector=spec.nodeName%3D{NODE}");
    let answer = conn.round_trip(&http::get(&api.host, &path, &api.token)).await?;
    let list: Value = serde_json::from_slice(&answer.body).context("decoding the pod list")?;
    let items = list["items"].as_array().map_or(&[][..], Vec::as_slice);
    let prepared = items
        .iter()
        .filter(|p| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| c["type"] == podpass_node::PREPARED_CONDITION && c["status"] == "True")
            })
        })
        .count();
    Ok(prepared >= expected)
}

/// The write the agent makes for a pod's token, alone: the automounted volume's three files
/// (`ca.crt`, `namespace`, `token`, of the sizes the agent writes) published by the
/// kubelet's atomic writer into a fresh pod directory on the medium the agent uses (a tmpfs
/// mounted for it where this process may mount, as the agent does, else the agent's own
/// file system), from a blocking thread as the agent does, `n` times one at a time.
async fn volume_writes(root: &Path, n: usize) -> Result<(Phase, &'static str)> {
    use podpass_node::{AtomicWriter, FileProjection};
    let file = |size: usize, mode: u32| FileProjection { data: vec![b'x'; size], mode, owner: None, group: None };
    let payload: std::collections::BTreeMap<String, FileProjection> = [
        ("ca.crt".to_owned(), file(558, 0o644)),
        ("namespace".to_owned(), file(5, 0o644)),
        ("token".to_owned(), file(828, 0o644)),
    ]
    .into();
    let payload = std::sync::Arc::new(payload);
    let mut latencies = Vec::with_capacity(n);
    let mut medium = "tmpfs mounted + atomic writer, as the agent does";
    for i in 0..n {
        let dir = root.join(format!("pods/write-floor-{i}/volumes/kubernetes.io~projected/kube-api-access-floor"));
        let payload = payload.clone();
        let started = Instant::now();
        let on_disk = tokio::task::spawn_blocking(move || -> Result<bool> {
            let set_up = podpass_node::set_up_tmpfs(&dir, None)?;
            AtomicWriter::new(&dir)?.write(&payload)?;
            Ok(matches!(set_up, podpass_node::TmpfsSetUp::NotPermitted(_)))
        })
        .await
        .context("writer task")?
        .context("the floor's volume write")?;
        latencies.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        if on_disk {
            medium = "atomic writer on disk: no right to mount, as the agent";
        }
    }
    latencies.sort_unstable();
    Ok((phase(latencies), medium))
}

/// A node identity: a static token in the server's token file (re-read on change), and a
/// kubeconfig with it.
fn node_identity(dir: &Path, api: &Api, node: &str, file: &str) -> Result<PathBuf> {
    let node_token = podpass_apiserver::random_token().context("node token")?;
    let tokens = dir.join("api/tokens.csv");
    let mut text = std::fs::read_to_string(&tokens).context("token file")?;
    text.push_str(&format!("{node_token},system:node:{node},{node}-uid,\"system:nodes\"\n"));
    std::fs::write(&tokens, text).context("token file")?;
    let ca = std::fs::read_to_string(dir.join("api/pki/ca.crt")).context("CA")?;
    let kubeconfig = dir.join(file);
    let url = format!("https://{}", api.addr);
    std::fs::write(&kubeconfig, podpass_apiserver::kubeconfig(&url, &ca, &format!("system:node:{node}"), &node_token))
        .context("kubeconfig")?;
    Ok(kubeconfig)
}

async fn drive(dir: &Path, args: &NodeBench) -> Result<()> {
    // The agents' volume mounts (and the floor's) are detached before the caller removes
    // `dir`, after the agents are gone.
    let _mounts = podpass_node::UnmountOnDrop(dir.to_owned());
    let image = registry().await?;
    // Baseline pods live on another node: the agent starts with none.
    let (api, baseline_uids) = super::start_with(
        &dir.join("api"),
        args.burst,
        super::DEFAULT_TOKEN_SUCCESS_CACHE_TTL,
        "bench-baseline",
        &image,
        &super::Backing::embedded(),
    )
    .await?;
    let kubeconfig = node_identity(dir, &api, NODE, "node.kubeconfig")?;
    let containers_kubeconfig = node_identity(dir, &api, containers::NODE, "node-containers.kubeconfig")?;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // The bare round trip, at the same concurrencies, before the agent runs.
    let sequential_rtt = phase(token_requests(&api, &baseline_uids[..args.sequential.min(args.burst)], false).await?);
    let burst_rtt = phase(token_requests(&api, &baseline_uids, true).await?);
    // Beside the agent's root, on the same file system.
    let (writes, write_medium) = volume_writes(&dir.join("write-floor"), args.sequential.max(1)).await?;

    let root: PathBuf = dir.join("node");
    let exe = std::env::current_exe().context("own executable")?;
    let stderr = match &args.agent_log {
        Some(path) => {
            Stdio::from(std::fs::File::create(path).with_context(|| format!("--agent-log {}", path.display()))?)
        }
        None => Stdio::null(),
    };
    // Every pod the bench creates stays on the node: maxPods (110 by default, as the
    // kubelet's) is raised to hold them, as a dense node would configure it.
    let kubelet_config = dir.join("kubelet.yaml");
    let max_pods = (args.sequential + args.burst + 1).max(args.idle_pods).max(110);
    std::fs::write(
        &kubelet_config,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: {max_pods}\n"),
    )
    .with_context(|| format!("writing {}", kubelet_config.display()))?;
    let agent = Agent(
        Command::new(exe)
            .args(["--log-format", "json", "node", "run", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--config")
            .arg(&kubelet_config)
            .args(["--node-name", NODE, "--root-dir"])
            .arg(&root)
            .args(["--healthz-port", "0", "--port", "0"])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("starting the agent")?,
    );
    // Registered and idle with no pods: the baseline for memory and wakeups.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_before = agent.rss_kib()?;
    let idle_empty = agent.wakeups_per_second(Duration::from_secs(args.idle_seconds.div_ceil(4))).await?;
    // One pod first, so the image is pulled before anything is timed.
    create_and_time(&api, &root, &["warm-up".to_owned()], &image, None).await?;
    wait_prepared(&api, 1, Duration::from_secs(60)).await?;

    let mut sequential = Vec::new();
    for i in 0..args.sequential {
        sequential.extend(create_and_time(&api, &root, &[format!("seq-{i}")], &image, None).await?.latencies);
    }
    sequential.sort_unstable();
    let sequential = phase(sequential);
    let names: Vec<String> = (0..args.burst).map(|i| format!("burst-{i}")).collect();
    let burst = create_and_time(&api, &root, &names, &image, Some(agent.0.id())).await?;
    let burst_cpu = burst.cpu;
    let burst_makespan = burst.makespan;
    let burst = phase(burst.latencies);
    let total = 1 + args.sequential + args.burst;
    wait_prepared(&api, total, Duration::from_secs(120)).await?;
    // The burst's floor, with the agent's pods idle: the same creates and TokenRequests at
    // once against the same control plane, on a node no agent serves.
    let floor_names: Vec<String> = (0..args.burst).map(|i| format!("floor-{i}")).collect();
    let floor = burst_floor(&api, &floor_names, &image, agent.0.id()).await?;
    let floor_cpu = floor.cpu;
    let floor_makespan = floor.makespan;
    let burst_floor = phase(floor.latencies);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = agent.rss_kib()?;
    let idle = agent.wakeups_per_second(Duration::from_secs(args.idle_seconds)).await?;
    // Up to --idle-pods, created a hundred at a time, then idle again.
    let mut many = None;
    if args.idle_pods > total {
        let names: Vec<String> = (total..args.idle_pods).map(|i| format!("idle-{i}")).collect();
        for chunk in names.chunks(100) {
            create_and_time(&api, &root, chunk, &image, None).await?;
        }
        wait_prepared(&api, args.idle_pods, Duration::from_secs(600)).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = agent.rss_kib()?;
        many = Some((rss, agent.wakeups_per_second(Duration::from_secs(args.idle_seconds)).await?));
    }

    outln!("podpass bench node: agent as {NODE}, image {image}");
    let ratio = |a: &Phase, b: &Phase| a.percentile_ms(0.5) / b.percentile_ms(0.5).max(f64::EPSILON);
    outln!(
        "TokenRequest round trip, one at a time:    p50 {:.2} ms  p99 {:.2} ms",
        sequential_rtt.percentile_ms(0.5),
        sequential_rtt.percentile_ms(0.99)
    );
    outln!(
        "the token volume's write alone ({write_medium}): p50 {:.2} ms  p99 {:.2} ms",
        writes.percentile_ms(0.5),
        writes.percentile_ms(0.99)
    );
    let path_floor = sequential_rtt.percentile_ms(0.5) + writes.percentile_ms(0.5);
    outln!(
        "pod created -> token file, one at a time:  p50 {:.2} ms  p99 {:.2} ms  = {:.2}x the round trip at p50 (goal <= 2x), {:.2}x round trip + write ({path_floor:.2} ms)",
        sequential.percentile_ms(0.5),
        sequential.percentile_ms(0.99),
        ratio(&sequential, &sequential_rtt),
        sequential.percentile_ms(0.5) / path_floor.max(f64::EPSILON)
    );
    outln!(
        "TokenRequest round trip, {} at once:      p50 {:.2} ms  p99 {:.2} ms",
        args.burst,
        burst_rtt.percentile_ms(0.5),
        burst_rtt.percentile_ms(0.99)
    );
    outln!(
        "pod created -> token file, {} at once:    p50 {:.2} ms  p99 {:.2} ms  = {:.2}x the round trip at p50",
        args.burst,
        burst.percentile_ms(0.5),
        burst.percentile_ms(0.99),
        ratio(&burst, &burst_rtt),
    );
    outln!(
        "burst floor: {} pod creates + bound TokenRequests at once (no agent): all done in {:.2} ms; create answered -> token answered p50 {:.2} ms  p99 {:.2} ms",
        args.burst,
        floor_makespan.as_secs_f64() * 1000.0,
        burst_floor.percentile_ms(0.5),
        burst_floor.percentile_ms(0.99)
    );
    outln!(
        "the agent's burst: all {} token files in {:.2} ms = {:.2}x the burst floor (goal <= 3x)",
        args.burst,
        burst_makespan.as_secs_f64() * 1000.0,
        burst_makespan.as_secs_f64() / floor_makespan.as_secs_f64().max(f64::EPSILON)
    );
    // Where the gap to the floor goes: both run on the same cores, so CPU is what a
    // burst spends; the floor asks the control plane for less than the agent does (no
    // status patch, no event, no watch).
    outln!(
        "CPU in the burst: control plane + load generator {:.1} ms, agent {:.1} ms ({:.0} us per pod); in the floor: control plane + load generator {:.1} ms, agent {:.1} ms",
        burst_cpu.server_ms,
        burst_cpu.agent_ms,
        burst_cpu.agent_ms * 1000.0 / args.burst as f64,
        floor_cpu.server_ms,
        floor_cpu.agent_ms
    );
    outln!(
        "agent resident memory: {} KiB with no pods, {} KiB with {total}: {:.1} KiB per pod",
        rss_before,
        rss_after,
        (rss_after.saturating_sub(rss_before)) as f64 / total as f64
    );
    outln!(
        "agent wakeups (context switches): {idle_empty:.1}/s with no pods over {} s, {idle:.1}/s with {total} idle pods over {} s (goal <= 5/s)",
        args.idle_seconds.div_ceil(4),
        args.idle_seconds
    );
    if let Some((rss, wakeups)) = many {
        outln!(
            "with {} idle pods: {rss} KiB resident ({:.1} KiB per pod), {wakeups:.1} wakeups/s over {} s",
            args.idle_pods,
            (rss.saturating_sub(rss_before)) as f64 / args.idle_pods as f64,
            args.idle_seconds
        );
    }
    drop(agent);

    if args.containers == 0 {
        return Ok(());
    }
    let tools = match crate::up::container_tools("podpass bench node", "or pass --containers 0") {
        Ok(tools) => tools,
        Err(why) => {
            outln!("pod created -> container running: skipped ({why})");
            return Ok(());
        }
    };
    let c = containers::measure(&tools, dir, &api, &containers_kubeconfig, args.containers).await?;
    outln!(
        "containerd RunPodSandbox+CreateContainer+StartContainer, one at a time: p50 {:.2} ms  p99 {:.2} ms",
        c.raw.percentile_ms(0.5),
        c.raw.percentile_ms(0.99)
    );
    outln!(
        "pod created -> container running, one at a time:  p50 {:.2} ms  p99 {:.2} ms  = {:.2}x the raw CRI sequence at p50 (goal <= 1.5x)",
        c.pods.percentile_ms(0.5),
        c.pods.percentile_ms(0.99),
        ratio(&c.pods, &c.raw)
    );
    Ok(())
}
