//! `podpass bench apiserver`: drives a real `podpass apiserver` (embedded store, or etcd
//! with `--etcd-servers`; HTTPS) with concurrent pod-bound TokenRequests and TokenReviews
//! and a pod-churn phase, and measures, in the same run, the physical limit: raw ES256
//! signs and verifies per second of aws-lc-rs, the library that signs podpass tokens, on
//! every core of this machine.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use podpass_apiserver::ApiServerConfig;
use podpass_apiserver::DEFAULT_TOKEN_SUCCESS_CACHE_TTL;
use serde_json::{Value, json};

use self::raw::{RawOp, raw_rate};

mod authz;
mod churn;
mod cluster;
mod containers;
mod credentials;
mod floor;
mod http;
mod images;
mod join;
mod node;
mod raw;
mod registry_auth;
mod workloads;
mod writes;

/// `podpass bench …`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// TokenRequest and TokenReview throughput of `podpass apiserver` against raw ES256.
    Apiserver(ApiserverBench),
    /// The control plane at scale by simulation: N hollow nodes, N×M pods in Deployments,
    /// upstream's scalability SLIs (pod startup, API latencies, memory per pod).
    Cluster(cluster::ClusterBench),
    /// Credential provider exec overhead, cache-hit latency and shared execs.
    Credentials(credentials::CredentialsBench),
    /// Pull manager at node scale: MustAttemptImagePull over 100 000 records, cold start-up,
    /// memory per record, durable record writes against raw fsync+rename.
    Images(images::ImagesBench),
    /// On a running `podpass up` cluster: machines joining with the printed command, to
    /// their Node Ready (p50 of 10), against the same node started again on its certificate.
    Join(join::JoinBench),
    /// The node agent: pod created to token file written (one at a time and 100 at once)
    /// against a bare TokenRequest round trip, memory per pod, wakeups of idle pods.
    Node(node::NodeBench),
    /// Token exchanges/s of `podpass registry-auth` over HTTPS with a warm JWKS against a
    /// raw ES256 verify + sign pair, p99 at 64 clients.
    RegistryAuth(registry_auth::RegistryAuthBench),
    /// On a running `podpass up --demo` cluster: a Deployment of 100 replicas created → all
    /// Running, against 100 bare pods at once (goal ≤ 1.3×), and a rolling update of 100;
    /// with `up --nodes 3`, how the replicas spread.
    Workloads(workloads::WorkloadsBench),
}

/// Flags of `podpass bench apiserver`.
#[derive(Debug, Args)]
pub struct ApiserverBench {
    /// Concurrent HTTPS clients, each with its own connection, one request at a time.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Seconds each measured phase runs.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Data directory of the server under test (default: a fresh temporary directory,
    /// removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Run only this phase (e.g. to profile it).
    #[arg(long, value_enum)]
    only: Option<Only>,
    /// Run the server on this etcd (`http://127.0.0.1:2379`, comma-separated) instead of
    /// the embedded store; TokenRequests are then measured on both, in the same run.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// With etcd: the server's `--watch-cache` (false: every read is an etcd round trip).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    watch_cache: bool,
    /// Pods per second the churn phase offers.
    #[arg(long, default_value_t = 600.0)]
    churn_rate: f64,
    /// Connections the churn phase spreads its cycles over.
    #[arg(long, default_value_t = 128)]
    churn_connections: usize,
}

/// A bench phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// Pod-bound TokenRequests.
    Requests,
    /// TokenReviews of pod-bound tokens.
    Reviews,
    /// Pod churn: create pod, TokenRequest bound to it, TokenReview, delete pod.
    Churn,
    /// RBAC: SelfSubjectAccessReviews with 10 and 10 000 RoleBindings.
    Authz,
    /// Writes: pod creates, merge patches, server-side applies; stored bytes per pod.
    Writes,
}

/// Runs a bench subcommand.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Apiserver(args) => apiserver(args),
        BenchCommand::Cluster(args) => cluster::run(args),
        BenchCommand::Credentials(args) => credentials::run(args),
        BenchCommand::Images(args) => images::run(args),
        BenchCommand::Join(args) => join::run(args),
        BenchCommand::Node(args) => node::run(args),
        BenchCommand::RegistryAuth(args) => registry_auth::run(args),
        BenchCommand::Workloads(args) => workloads::run(args),
    }
}

/// One phase's figures.
struct Phase {
    ops: usize,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        percentile_ms(&self.latencies_us, p)
    }
}

/// The `p` quantile of sorted microsecond latencies, in milliseconds (0 when empty).
fn percentile_ms(sorted_us: &[u64], p: f64) -> f64 {
    let Some(last) = sorted_us.len().checked_sub(1) else { return 0.0 };
    let idx = (last as f64 * p).round() as usize;
    sorted_us[idx.min(last)] as f64 / 1000.0
}

fn apiserver(args: ApiserverBench) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients: must be at least 1");
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        bail!("--seconds: must be a positive number");
    }
    if !(args.churn_rate > 0.0 && args.churn_rate.is_finite()) {
        bail!("--churn-rate: must be a positive number");
    }
    if args.churn_connections == 0 {
        bail!("--churn-connections: must be at least 1");
    }
    let phase = Duration::from_secs_f64(args.seconds);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let (data_dir, temporary) = match args.data_dir {
        Some(d) => (d, false),
        None => (std::env::temp_dir().join(format!("podpass-bench-{}", std::process::id())), true),
    };
    if temporary && data_dir.exists() {
        std::fs::remove_dir_all(&data_dir).with_context(|| format!("clearing {}", data_dir.display()))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    let plan = Plan {
        clients: args.clients,
        phase,
        cores,
        only: args.only,
        store: Backing { etcd: args.etcd_servers, watch_cache: args.watch_cache },
        churn_rate: args.churn_rate,
        churn_connections: args.churn_connections,
    };
    let result = runtime.block_on(drive(&data_dir, &plan));
    if temporary {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    result
}

/// What `bench apiserver` runs.
struct Plan {
    clients: usize,
    phase: Duration,
    cores: usize,
    only: Option<Only>,
    store: Backing,
    churn_rate: f64,
    churn_connections: usize,
}

/// What the server under test stores its objects in.
#[derive(Debug, Clone, Default)]
pub(super) struct Backing {
    /// Empty: the embedded store.
    etcd: Vec<String>,
    /// With etcd: `--watch-cache`.
    watch_cache: bool,
}

impl Backing {
    fn embedded() -> Self {
        Self::default()
    }

    fn describe(&self) -> String {
        match (self.etcd.is_empty(), self.watch_cache) {
            (true, _) => "embedded store".into(),
            (false, true) => format!("etcd at {} with the watch cache", self.etcd.join(",")),
            (false, false) => format!("etcd at {} without the watch cache", self.etcd.join(",")),
        }
    }
}

/// Starts a server on `data_dir` (token success cache `ttl`; objects in `store`) and
/// creates the bench objects.
async fn start(
    data_dir: &std::path::Path,
    clients: usize,
    ttl: Duration,
    store: &Backing,
) -> Result<(Api, Vec<String>)> {
    start_with(data_dir, clients, ttl, "bench-node", "registry.example/app:1", store).await
}

/// [`start`] with the bench pods on Node `node`, running `image`.
async fn start_with(
    data_dir: &std::path::Path,
    clients: usize,
    ttl: Duration,
    node: &str,
    image: &str,
    backing: &Backing,
) -> Result<(Api, Vec<String>)> {
    let mut flags = vec!["--data-dir".to_owned(), data_dir.display().to_string(), "--secure-port=0".to_owned()];
    if !backing.etcd.is_empty() {
        flags.push(format!("--etcd-servers={}", backing.etcd.join(",")));
    }
    flags.push(format!("--watch-cache={}", backing.watch_cache));
    let mut config: ApiServerConfig = podpass_serve::parse_flags(flags).context("the bench server's flags")?;
    config.token_success_cache_ttl = ttl;
    // The server task lives as long as the runtime: the bench process ends with it.
    let prepared = config.prepare().map_err(|e| anyhow::anyhow!("preparing the server: {e}"))?;
    let running = prepared.bind().await.context("starting the server")?;
    let (local_addr, server) = (running.local_addr, running.serve(std::future::pending()));
    tokio::spawn(server);
    let ca = std::fs::read(data_dir.join("pki").join("ca.crt")).context("reading the generated CA")?;
    let api = Api {
        connector: http::connector(&ca)?,
        addr: local_addr,
        host: local_addr.to_string(),
        token: admin_token(&data_dir.join("tokens.csv"))?,
    };
    let pod_uids = setup(&api, clients, node, image, &String::from_utf8_lossy(&ca)).await?;
    Ok((api, pod_uids))
}

const TOKEN_PATH: &str = "/api/v1/namespaces/bench/serviceaccounts/bench/token";
const REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// A TokenRequest for a token bound to pod `i`.
fn token_body(i: usize, pod_uid: &str) -> String {
    bound_token_body(&format!("pod-{i}"), pod_uid)
}

/// A TokenRequest body bound to the pod `pod` with UID `pod_uid`.
fn bound_token_body(pod: &str, pod_uid: &str) -> String {
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": ["registry.example"],
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid},
        },
    })
    .to_string()
}

/// Measures TokenReviews of one pod-bound token per client.
async fn review_phase(api: &Api, pod_uids: &[String], phase: Duration, cores: usize) -> Result<(Phase, Raw)> {
    let mut tokens = Vec::with_capacity(pod_uids.len());
    let mut conn = api.connect().await?;
    for (i, uid) in pod_uids.iter().enumerate() {
        let answer = api.post(&mut conn, TOKEN_PATH, &token_body(i, uid)).await?;
        let token = answer.pointer("/status/token").and_then(Value::as_str).context("TokenRequest without a token")?;
        tokens.push(token.to_owned());
    }
    let verify = Raw::measure(cores, phase, RawOp::Verify)?;
    let reviews = run_phase(
        api,
        pod_uids.len(),
        phase,
        |i| {
            let body = json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": tokens[i], "audiences": ["registry.example"]},
            });
            (REVIEW_PATH, body.to_string())
        },
        b"\"authenticated\":true",
    )
    .await?;
    Ok((reviews, verify.and_after(Raw::measure(cores, phase, RawOp::Verify)?)))
}

async fn drive(data_dir: &std::path::Path, plan: &Plan) -> Result<()> {
    let (clients, phase, cores, only, store) = (plan.clients, plan.phase, plan.cores, plan.only, &plan.store);
    let etcd = &store.etcd;
    outln!(
        "podpass bench apiserver: {clients} clients, {:.1} s per phase, {cores} cores, {}",
        phase.as_secs_f64(),
        store.describe()
    );
    outln!("(server and load generator share the cores; raw rates are measured before and after each phase)");
    if only.is_none() || only == Some(Only::Requests) {
        let sign = Raw::measure(cores, phase, RawOp::Sign)?;
        let mut embedded_rate = None;
        if !etcd.is_empty() {
            // The same phase on the embedded store first: the reference the etcd figure is
            // a ratio of.
            let (api, pod_uids) = start(
                &data_dir.join("requests-embedded"),
                clients,
                DEFAULT_TOKEN_SUCCESS_CACHE_TTL,
                &Backing::embedded(),
            )
            .await?;
            let requests =
                run_phase(&api, clients, phase, |i| (TOKEN_PATH, token_body(i, &pod_uids[i])), b"\"token\":\"").await?;
            requests.print("TokenRequest (embedded)", "tokens", &sign, "sign");
            embedded_rate = Some(requests.rate());
        }
        let (api, pod_uids) =
            start(&data_dir.join("requests"), clients, DEFAULT_TOKEN_SUCCESS_CACHE_TTL, store).await?;
        let requests =
            run_phase(&api, clients, phase, |i| (TOKEN_PATH, token_body(i, &pod_uids[i])), b"\"token\":\"").await?;
        let sign = sign.and_after(Raw::measure(cores, phase, RawOp::Sign)?);
        // The same TLS and HTTP stack answering the same bytes with no work behind them.
        let floor_api = floor::start(&data_dir.join("requests"), &api, &pod_uids[0]).await?;
        let floor =
            run_phase(&floor_api, clients, phase, |i| (TOKEN_PATH, token_body(i, &pod_uids[i])), b"\"token\":\"")
                .await?;
        sign.print("sign");
        outln!(
            "HTTPS floor (same stack, fixed answer) {:>9.0} answers/s  p50 {:.2} ms  p99 {:.2} ms",
            floor.rate(),
            floor.percentile_ms(0.50),
            floor.percentile_ms(0.99)
        );
        let label = if etcd.is_empty() { "TokenRequest (pod-bound)" } else { "TokenRequest (etcd)" };
        requests.print(label, "tokens", &sign, "sign");
        let limit = floor.rate().min(sign.all);
        outln!(
            "TokenRequest against its limits: {:.2}x the HTTPS floor, {:.2}x min(raw sign, floor) (goals >= 0.7x the floor, >= 0.35x raw sign)",
            requests.rate() / floor.rate(),
            requests.rate() / limit
        );
        if let Some(embedded) = embedded_rate {
            outln!("TokenRequest on etcd / on the embedded store: {:.2}x", requests.rate() / embedded);
        }
    }
    if only.is_none() || only == Some(Only::Reviews) {
        // Every review verified: the success cache off, so each one checks the signature and
        // looks up the service account, pod and node.
        let (api, pod_uids) = start(&data_dir.join("reviews-uncached"), clients, Duration::ZERO, store).await?;
        let (reviews, verify) = review_phase(&api, &pod_uids, phase, cores).await?;
        verify.print("verify");
        reviews.print("TokenReview (verified)", "reviews", &verify, "verify");
        // As deployed: kube-apiserver's 10 s success cache answers repeated reviews of a token.
        let (api, pod_uids) =
            start(&data_dir.join("reviews-cached"), clients, DEFAULT_TOKEN_SUCCESS_CACHE_TTL, store).await?;
        let (reviews, verify) = review_phase(&api, &pod_uids, phase, cores).await?;
        reviews.print("TokenReview (10 s cache)", "reviews", &verify, "verify");
    }
    if only.is_none() || only == Some(Only::Authz) {
        authz::authz_phase(data_dir, clients, phase, store).await?;
    }
    if only.is_none() || only == Some(Only::Writes) {
        writes::writes_phase(data_dir, clients, phase, store).await?;
    }
    if only.is_none() || only == Some(Only::Churn) {
        let (api, _) = start(&data_dir.join("churn"), 0, DEFAULT_TOKEN_SUCCESS_CACHE_TTL, store).await?;
        let churn =
            churn::churn_phase(Arc::new(api), plan.churn_rate, phase, plan.churn_connections, "bench-node").await?;
        churn.print(&store.describe(), plan.churn_rate);
    }
    Ok(())
}

/// Raw rates on all cores and on one.
pub(super) struct Raw {
    all: f64,
    one: f64,
    cores: usize,
}

impl Raw {
    /// A quarter of the phase on all cores, then a quarter on one core.
    fn measure(cores: usize, phase: Duration, op: RawOp) -> Result<Self> {
        Ok(Self { all: raw_rate(cores, phase / 4, op)?, one: raw_rate(1, phase / 4, op)?, cores })
    }

    /// The mean of a measurement before and one after the phase.
    fn and_after(self, after: Self) -> Self {
        Self { all: (self.all + after.all) / 2.0, one: (self.one + after.one) / 2.0, cores: self.cores }
    }

    fn print(&self, op: &str) {
        outln!("raw ES256 {op:<6} (aws-lc-rs):  {:>9.0}/s on {} threads, {:.0}/s on 1", self.all, self.cores, self.one);
    }
}

impl Phase {
    fn print(&self, what: &str, unit: &str, raw: &Raw, op: &str) {
        outln!(
            "{what:<26} {:>9.0} {unit}/s  p50 {:.2} ms  p99 {:.2} ms  = {:.2}x raw {op} on {} cores ({:.2}x one core)",
            self.rate(),
            self.percentile_ms(0.50),
            self.percentile_ms(0.99),
            self.rate() / raw.all,
            raw.cores,
            self.rate() / raw.one,
        );
    }
}

/// The admin bearer token the server generated into its token file.
fn admin_token(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find(|l| l.contains(",admin,"))
        .and_then(|l| l.split(',').next())
        .map(str::to_owned)
        .context("no admin token in the generated token file")
}

/// Where and as whom the bench talks to the server.
pub(super) struct Api {
    connector: tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
    host: String,
    token: String,
}

impl Api {
    async fn connect(&self) -> Result<http::Connection> {
        http::Connection::open(&self.connector, self.addr).await
    }

    fn request(&self, path: &str, body: &str) -> Vec<u8> {
        http::post(&self.host, path, &self.token, body)
    }

    /// POSTs and decodes a 2xx JSON answer; anything else is an error with the body.
    async fn post(&self, conn: &mut http::Connection, path: &str, body: &str) -> Result<Value> {
        let answer = conn.round_trip(&self.request(path, body)).await.with_context(|| format!("POST {path}"))?;
        if !(200..300).contains(&answer.status) {
            bail!("POST {path}: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
        }
        serde_json::from_slice(&answer.body).with_context(|| format!("POST {path}: decoding the answer"))
    }

    /// Another server at `addr` with the same trust and user.
    fn at(&self, addr: std::net::SocketAddr) -> Api {
        Api { connector: self.connector.clone(), addr, host: addr.to_string(), token: self.token.clone() }
    }

    /// The same server, as the user of `token`.
    fn as_user(&self, token: &str) -> Api {
        Api { connector: self.connector.clone(), addr: self.addr, host: self.host.clone(), token: token.to_owned() }
    }

    /// Creates `object` under `path`, or reads the one of that name that exists.
    async fn ensure(&self, conn: &mut http::Connection, path: &str, object: &Value) -> Result<Value> {
        let answer =
            conn.round_trip(&self.request(path, &object.to_string())).await.with_context(|| format!("POST {path}"))?;
        let answer = if answer.status == 409 {
            let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            let item = format!("{path}/{name}");
            conn.round_trip(&http::get(&self.host, &item, &self.token)).await.with_context(|| format!("GET {item}"))?
        } else {
            answer
        };
        if !(200..300).contains(&answer.status) {
            bail!("POST {path}: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
        }
        serde_json::from_slice(&answer.body).with_context(|| format!("POST {path}: decoding the answer"))
    }
}

/// Namespace `bench`, ServiceAccount `bench`, the namespace's `kube-root-ca.crt` with `ca`
/// (the controller manager's root CA publisher would write it: the bench runs none), Node
/// `node` and one pod per client on it; returns the pods' UIDs. Objects that exist already
/// (an earlier phase on the same etcd) are used as they are.
async fn setup(api: &Api, clients: usize, node: &str, image: &str, ca: &str) -> Result<Vec<String>> {
    let mut conn = api.connect().await?;
    let objects = [
        ("/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})),
        (
            "/api/v1/namespaces/bench/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bench"}}),
        ),
        (
            "/api/v1/namespaces/bench/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": ca}}),
        ),
        ("/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})),
    ];
    for (path, object) in objects {
        api.ensure(&mut conn, path, &object).await?;
    }
    let mut uids = Vec::with_capacity(clients);
    for i in 0..clients {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": format!("pod-{i}")},
            "spec": {
                "serviceAccountName": "bench",
                "nodeName": node,
                "containers": [{"name": "app", "image": image}],
            },
        });
        let created = api.ensure(&mut conn, "/api/v1/namespaces/bench/pods", &pod).await?;
        let uid = created.pointer("/metadata/uid").and_then(Value::as_str).context("pod without a uid")?;
        uids.push(uid.to_owned());
    }
    Ok(uids)
}

/// Runs `clients` connections of sequential POSTs for `phase` after a short warm-up. Every
/// answer must be 201 and contain `expect`: a fast error is not a result.
async fn run_phase(
    api: &Api,
    clients: usize,
    phase: Duration,
    request: impl Fn(usize) -> (&'static str, String),
    expect: &'static [u8],
) -> Result<Phase> {
    run_requests(
        api,
        clients,
        phase,
        |i| {
            let (path, body) = request(i);
            (path, api.request(path, &body))
        },
        201,
        expect,
    )
    .await
}

/// Runs `clients` connections, each sending its pre-serialised request (`request(i)`:
/// a label and the bytes) for `phase` after a short warm-up. Every answer must have
/// `status` and contain `expect`: a fast error is not a result.
async fn run_requests(
    api: &Api,
    clients: usize,
    phase: Duration,
    request: impl Fn(usize) -> (&'static str, Vec<u8>),
    status: u16,
    expect: &'static [u8],
) -> Result<Phase> {
    let warmup = Duration::from_millis(500).min(phase);
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(clients);
    for i in 0..clients {
        let (path, bytes) = request(i);
        let mut conn = api.connect().await?;
        let (stop, measuring) = (stop.clone(), measuring.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let answer = conn.round_trip(&bytes).await.with_context(|| format!("POST {path}"))?;
                if answer.status != status || !answer.body.windows(expect.len()).any(|w| w == expect) {
                    bail!("{path}: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
                }
                if measuring.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                    latencies.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
            }
            Ok(latencies)
        }));
    }
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(phase).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let mut latencies_us = Vec::new();
    for task in tasks {
        latencies_us.extend(task.await.context("bench client panicked")??);
    }
    latencies_us.sort_unstable();
    Ok(Phase { ops: latencies_us.len(), elapsed, latencies_us })
}
