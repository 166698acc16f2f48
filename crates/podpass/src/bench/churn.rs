//! The pod-churn phase of `podpass bench apiserver`: pods created, given a bound token,
//! reviewed and deleted at a target rate, open loop (a new cycle starts on schedule whether
//! or not earlier ones are done, as pods arrive in a cluster), with the achieved rate and
//! each step's latency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};

use super::http::{self, Connection};
use super::{Api, REVIEW_PATH, percentile_ms};

/// Cycles in flight at most; beyond that a cycle is dropped (and counted) rather than
/// queued without bound.
const MAX_IN_FLIGHT: usize = 4096;

/// The steps of one cycle.
const STEPS: [&str; 4] = ["create pod", "TokenRequest", "TokenReview", "delete pod"];

/// What the phase measured.
pub(super) struct Churn {
    offered: usize,
    completed: usize,
    dropped: usize,
    elapsed: Duration,
    /// Per step, sorted microseconds.
    steps: [Vec<u64>; 4],
    /// Microseconds a cycle waited for a free connection.
    waits: Vec<u64>,
}

impl Churn {
    pub(super) fn print(&self, store: &str, rate: f64) {
        outln!(
            "pod churn ({store}): offered {rate:.0}/s, achieved {:.0} pods/s ({} of {} cycles done, {} dropped) in {:.1} s",
            self.completed as f64 / self.elapsed.as_secs_f64(),
            self.completed,
            self.offered,
            self.dropped,
            self.elapsed.as_secs_f64()
        );
        for (name, latencies) in STEPS.iter().zip(&self.steps) {
            outln!(
                "  {name:<13} p50 {:>7.2} ms  p99 {:>7.2} ms",
                percentile_ms(latencies, 0.50),
                percentile_ms(latencies, 0.99)
            );
        }
        outln!(
            "  (waiting for one of the load generator's connections: p50 {:.2} ms, p99 {:.2} ms)",
            percentile_ms(&self.waits, 0.50),
            percentile_ms(&self.waits, 0.99)
        );
    }
}

/// One cycle's step latencies and its wait, or the first error.
type CycleResult = Result<([u64; 4], u64, Instant)>;

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Sends `request` and checks the status; the decoded body when `decode`.
async fn step(conn: &mut Connection, what: &str, request: &[u8], status: u16, decode: bool) -> Result<Value> {
    let answer = conn.round_trip(request).await.with_context(|| what.to_owned())?;
    if answer.status != status {
        bail!("{what}: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
    }
    if !decode {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&answer.body).with_context(|| format!("{what}: decoding the answer"))
}

/// One cycle for pod `n` on `node`: create, TokenRequest bound to it, TokenReview, delete.
async fn cycle(api: &Api, conn: &mut Connection, n: usize, node: &str) -> Result<[u64; 4]> {
    let name = format!("churn-{n}");
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"serviceAccountName": "bench", "nodeName": node, "containers": [{"name": "app", "image": "registry.example/app:1"}]},
    });
    let mut out = [0u64; 4];
    let t = Instant::now();
    let created =
        step(conn, "create pod", &api.request("/api/v1/namespaces/bench/pods", &pod.to_string()), 201, true).await?;
    out[0] = micros(t);
    let uid = created.pointer("/metadata/uid").and_then(Value::as_str).context("pod without a uid")?;
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": ["registry.example"],
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid},
        },
    });
    let t = Instant::now();
    let answer = step(conn, "TokenRequest", &api.request(super::TOKEN_PATH, &body.to_string()), 201, true).await?;
    out[1] = micros(t);
    let token = answer.pointer("/status/token").and_then(Value::as_str).context("TokenRequest without a token")?;
    let review = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": ["registry.example"]},
    });
    let t = Instant::now();
    let reviewed = step(conn, "TokenReview", &api.request(REVIEW_PATH, &review.to_string()), 201, true).await?;
    out[2] = micros(t);
    if reviewed.pointer("/status/authenticated") != Some(&Value::Bool(true)) {
        bail!("TokenReview of a live pod's token: not authenticated: {reviewed}");
    }
    let t = Instant::now();
    let path = format!("/api/v1/namespaces/bench/pods/{name}?gracePeriodSeconds=0");
    step(conn, "delete pod", &http::delete(&api.host, &path, &api.token), 200, false).await?;
    out[3] = micros(t);
    Ok(out)
}

/// Runs cycles at `rate` per second for `phase`, over `connections` connections, then waits
/// (at most 30 s) for the cycles in flight.
pub(super) async fn churn_phase(
    api: Arc<Api>,
    rate: f64,
    phase: Duration,
    connections: usize,
    node: &str,
) -> Result<Churn> {
    let mut pool = Vec::with_capacity(connections);
    for _ in 0..connections {
        pool.push(api.connect().await?);
    }
    let pool = Arc::new(Mutex::new(pool));
    let free = Arc::new(Semaphore::new(connections));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let interval = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let (mut offered, mut dropped) = (0usize, 0usize);
    while started.elapsed() < phase {
        let due = started + interval.mul_f64(offered as f64);
        tokio::time::sleep_until(due.into()).await;
        offered += 1;
        let Ok(slot) = Arc::clone(&in_flight).try_acquire_owned() else {
            dropped += 1;
            continue;
        };
        let (api, pool, free, node) = (Arc::clone(&api), Arc::clone(&pool), Arc::clone(&free), node.to_owned());
        let n = offered;
        tasks.push(tokio::spawn(async move {
            let _slot = slot;
            let waiting = Instant::now();
            let permit = free.acquire().await.context("connection pool closed")?;
            let mut conn = pool.lock().await.pop().context("a permit without a connection")?;
            let waited = micros(waiting);
            let result = cycle(&api, &mut conn, n, &node).await;
            pool.lock().await.push(conn);
            drop(permit);
            result.map(|steps| (steps, waited, Instant::now()))
        }));
    }
    let mut steps: [Vec<u64>; 4] = Default::default();
    let mut waits = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut completed = 0;
    let mut first_error = None;
    let mut finished = started;
    for task in tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        let result: CycleResult = match tokio::time::timeout(left, task).await {
            Ok(joined) => joined.context("churn cycle panicked")?,
            Err(_) => bail!("pod churn: cycles still running 30 s after the phase"),
        };
        match result {
            Ok((latencies, waited, done)) => {
                completed += 1;
                for (all, one) in steps.iter_mut().zip(latencies) {
                    all.push(one);
                }
                waits.push(waited);
                finished = finished.max(done);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e.context("a pod-churn cycle failed"));
    }
    for s in &mut steps {
        s.sort_unstable();
    }
    waits.sort_unstable();
    Ok(Churn { offered, completed, dropped, elapsed: finished.duration_since(started), steps, waits })
}
