//! The write phase of `podpass bench apiserver`: what every create and patch costs, now
//! that each one records managedFields (server-side apply's field tracking runs on every
//! write, as upstream's field manager does). Closed loop over `clients` connections:
//! creates of a pod shaped like a Deployment's, merge patches of those pods' labels,
//! server-side applies of a ConfigMap per client; then the bytes a stored pod takes and
//! how many of them are managedFields.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{Api, Backing, Phase, http, start};

/// A pod as a Deployment's ReplicaSet creates it: labels, an owner, one container with
/// ports, env, resources and a mount, a config-map volume.
fn pod(name: &str) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "web", "pod-template-hash": "5d4f8c7b9"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f8c7b9",
                "uid": "6d0c2a8e-1111-4d5e-9f00-000000000001", "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "serviceAccountName": "bench",
            "nodeName": "bench-node",
            "containers": [{
                "name": "web",
                "image": "registry.example/web:1.4.2",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}, {"name": "PORT", "value": "8080"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}],
            }],
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
        },
    })
    .to_string()
}

/// A ConfigMap applied server-side, revision `rev`.
fn applied_config_map(name: &str, rev: usize) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "data": {"rev": rev.to_string(), "mode": "production", "port": "8080", "level": "info"},
    })
    .to_string()
}

/// One step of a client's loop: the request for its `seq`-th operation and the statuses
/// that count as success.
type Request<'a> = dyn Fn(&Api, usize, usize) -> (Vec<u8>, &'static [u16]) + Send + Sync + 'a;

/// Runs `clients` connections, each sending `request(api, client, seq)` for seq = 0, 1, …
/// for `phase` after a short warm-up; per client, how many it sent in all (the warm-up
/// included) and the measured latencies. `None` when the server refuses the operation with
/// 415 (a server without it).
async fn closed_loop(
    api: &Arc<Api>,
    clients: usize,
    phase: Duration,
    what: &'static str,
    request: Arc<Request<'static>>,
) -> Result<Option<(Measured, Vec<usize>)>> {
    let warmup = Duration::from_millis(500).min(phase);
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let mut conn = api.connect().await?;
        let (stop, measuring, api, request) = (stop.clone(), measuring.clone(), api.clone(), request.clone());
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut seq) = (Vec::new(), 0);
            while !stop.load(Ordering::Relaxed) {
                let (bytes, ok) = request(&api, client, seq);
                let started = Instant::now();
                let answer = conn.round_trip(&bytes).await.with_context(|| what.to_owned())?;
                if answer.status == 415 {
                    return Ok(None);
                }
                if !ok.contains(&answer.status) {
                    bail!("{what}: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
                }
                seq += 1;
                if measuring.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                    latencies.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
            }
            Ok(Some((latencies, seq)))
        }));
    }
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let (started, cpu_before) = (Instant::now(), cpu_seconds());
    tokio::time::sleep(phase).await;
    stop.store(true, Ordering::Relaxed);
    let (elapsed, cpu) = (started.elapsed(), cpu_seconds().zip(cpu_before).map(|(after, before)| after - before));
    let (mut latencies_us, mut sent, mut refused) = (Vec::new(), Vec::with_capacity(clients), false);
    for task in tasks {
        match task.await.context("bench client panicked")?? {
            Some((latencies, seq)) => {
                latencies_us.extend(latencies);
                sent.push(seq);
            }
            None => refused = true,
        }
    }
    if refused {
        return Ok(None);
    }
    latencies_us.sort_unstable();
    let cpu_us_per_op = cpu.map(|c| c * 1e6 / latencies_us.len().max(1) as f64);
    Ok(Some((Measured { phase: Phase { ops: latencies_us.len(), elapsed, latencies_us }, cpu_us_per_op }, sent)))
}

/// A write phase's figures.
struct Measured {
    phase: Phase,
    /// CPU time of this process (server and load generator) per operation: steadier than
    /// the rate when the disk's fsync sets the pace.
    cpu_us_per_op: Option<f64>,
}

/// User plus system CPU seconds of this process so far (`/proc/self/stat`, in USER_HZ
/// ticks of 1/100 s).
pub(super) fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) end with ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn print(what: &str, m: &Measured) {
    let cpu = m.cpu_us_per_op.map_or_else(String::new, |c| format!("  CPU {c:.0} µs/op"));
    outln!(
        "{what:<26} {:>9.0} /s  p50 {:.2} ms  p99 {:.2} ms{cpu}",
        m.phase.rate(),
        m.phase.percentile_ms(0.50),
        m.phase.percentile_ms(0.99)
    );
}

/// Runs the write phase on a fresh server in `data_dir`.
pub(super) async fn writes_phase(
    data_dir: &std::path::Path,
    clients: usize,
    phase: Duration,
    store: &Backing,
) -> Result<()> {
    let (api, _) = start(&data_dir.join("writes"), 0, super::DEFAULT_TOKEN_SUCCESS_CACHE_TTL, store).await?;
    let api = Arc::new(api);
    outln!("writes ({}), {clients} clients:", store.describe());
    let create: Arc<Request<'static>> = Arc::new(|api, client, seq| {
        (api.request("/api/v1/namespaces/bench/pods", &pod(&format!("w-{client}-{seq}"))), &[201])
    });
    let Some((creates, created)) = closed_loop(&api, clients, phase, "create pod", create).await? else {
        bail!("create pod: refused with 415");
    };
    print("  create pod", &creates);
    let created = Arc::new(created);
    let patch: Arc<Request<'static>> = Arc::new(move |api, client, seq| {
        let name = format!("w-{client}-{}", seq % created[client].max(1));
        let body = json!({"metadata": {"labels": {"rev": seq.to_string()}}}).to_string();
        let path = format!("/api/v1/namespaces/bench/pods/{name}");
        (http::patch(&api.host, &path, &api.token, "application/merge-patch+json", &body), &[200])
    });
    let Some((patches, _)) = closed_loop(&api, clients, phase, "merge patch pod", patch).await? else {
        bail!("merge patch: refused with 415");
    };
    print("  merge patch pod labels", &patches);
    let apply: Arc<Request<'static>> = Arc::new(|api, client, seq| {
        let name = format!("applied-{client}");
        let path = format!("/api/v1/namespaces/bench/configmaps/{name}?fieldManager=bench");
        let body = applied_config_map(&name, seq);
        (http::patch(&api.host, &path, &api.token, "application/apply-patch+yaml", &body), &[200, 201])
    });
    match closed_loop(&api, clients, phase, "apply configmap", apply).await? {
        Some((applies, _)) => print("  apply configmap (SSA)", &applies),
        None => outln!("  apply configmap (SSA)      not served (415)"),
    }
    let mut conn = api.connect().await?;
    let path = "/api/v1/namespaces/bench/pods/w-0-0";
    let answer = conn.round_trip(&http::get(&api.host, path, &api.token)).await.context("GET a bench pod")?;
    if answer.status != 200 {
        bail!("GET {path}: {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
    }
    let mut object: Value = serde_json::from_slice(&answer.body).context("decoding a bench pod")?;
    let whole = serde_json::to_vec(&object).map_or(0, |v| v.len());
    let managed = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("managedFields"))
        .map_or(0, |m| serde_json::to_vec(&m).map_or(0, |v| v.len()));
    outln!(
        "  stored pod (created, patched): {whole} bytes of JSON, managedFields {managed} of them ({:.0}%)",
        100.0 * managed as f64 / whole.max(1) as f64
    );
    Ok(())
}
