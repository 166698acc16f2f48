//! `podpass bench registry-auth`: token exchanges over HTTPS against `podpass registry-auth`
//! with a warm JWKS — each one verifies a pod-bound ES256 token, applies the policy and
//! signs an ES256 registry token — next to the physical limit measured in the same run: a
//! raw aws-lc-rs ES256 verify + sign pair on the same cores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use podpass_registry_auth::Config;
use podpass_token::{Algorithm, SigningKey};
use serde_json::{Value, json};

use super::raw::RawOp;
use super::{Api, Raw, http, run_requests, start};

/// Flags of `podpass bench registry-auth`.
#[derive(Debug, Args)]
pub struct RegistryAuthBench {
    /// Concurrent HTTPS clients, each with its own connection, one request at a time.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Seconds the measured phase runs.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Tokens revoked one after another to measure how long a revocation takes to reach the
    /// API server and registry-auth (0: skip).
    #[arg(long, default_value_t = 50)]
    revocations: usize,
}

const AUDIENCE: &str = "registry-auth";
const SERVICE: &str = "bench-registry";

/// Runs the bench.
pub fn run(args: RegistryAuthBench) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients: must be at least 1");
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        bail!("--seconds: must be a positive number");
    }
    let dir = tempfile::tempdir().context("temporary directory")?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    runtime.block_on(async {
        drive(dir.path(), args.clients, Duration::from_secs_f64(args.seconds), cores, args.revocations).await
    })
}

/// The pair's rate from the two raw rates: one verify and one sign per exchange.
fn pair_rate(verify: f64, sign: f64) -> f64 {
    1.0 / (1.0 / verify + 1.0 / sign)
}

async fn drive(dir: &std::path::Path, clients: usize, phase: Duration, cores: usize, revocations: usize) -> Result<()> {
    outln!("podpass bench registry-auth: {clients} clients, {:.1} s, {cores} cores", phase.as_secs_f64());
    outln!(
        "(control plane, registry-auth and load generator share the cores; the audit goes to a file, off the terminal)"
    );
    let data = dir.join("api");
    let (api, pod_uids) =
        start(&data, clients, podpass_apiserver::DEFAULT_TOKEN_SUCCESS_CACHE_TTL, &super::Backing::embedded()).await?;
    let mut conn = api.connect().await?;
    // registry-auth reads discovery and the JWKS anonymously.
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "anonymous-discovery"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:service-account-issuer-discovery"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}]});
    api.post(&mut conn, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &binding.to_string()).await?;
    let discovery = conn
        .round_trip(&http::get(&api.host, "/.well-known/openid-configuration", &api.token))
        .await
        .context("discovery")?;
    let issuer = serde_json::from_slice::<Value>(&discovery.body)
        .ok()
        .and_then(|v| v["issuer"].as_str().map(str::to_owned))
        .context("discovery without an issuer")?;
    let mut tokens = Vec::with_capacity(clients);
    for (i, uid) in pod_uids.iter().enumerate() {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [AUDIENCE], "expirationSeconds": 3600,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": format!("pod-{i}"), "uid": uid}}});
        let answer =
            api.post(&mut conn, "/api/v1/namespaces/bench/serviceaccounts/bench/token", &body.to_string()).await?;
        tokens.push(answer.pointer("/status/token").and_then(Value::as_str).context("no token")?.to_owned());
    }

    // registry-auth over HTTPS with the control plane's serving certificate (127.0.0.1).
    let key = SigningKey::generate(Algorithm::ES256).context("signing key")?;
    std::fs::write(dir.join("signer.key"), key.to_pkcs8_pem().context("signing key PEM")?)
        .context("writing the key")?;
    std::fs::write(
        dir.join("policy.yaml"),
        "rules:\n- serviceAccount: {namespace: \"*\", name: \"*\"}\n  repositories: [\"{namespace}/*\"]\n  actions: [pull]\n",
    )
    .context("writing the policy")?;
    let audit_log = dir.join("audit.log");
    let audited = registry_auth(dir, &data, &issuer, &audit_log, &[]).await?;
    let auth = Api { connector: api.connector.clone(), addr: audited, host: audited.to_string(), token: String::new() };
    let requests: Vec<Vec<u8>> = tokens
        .iter()
        .map(|t| {
            let basic = data_encoding::BASE64.encode(format!("bench:{t}").as_bytes());
            format!(
                "GET /token?service={SERVICE}&scope=repository:bench/app:pull HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {basic}\r\n\r\n",
                auth.host
            )
            .into_bytes()
        })
        .collect();
    let verify = Raw::measure(cores, phase, RawOp::Verify)?;
    let sign = Raw::measure(cores, phase, RawOp::Sign)?;
    let cpu_before = super::writes::cpu_seconds();
    let exchanges =
        run_requests(&auth, clients, phase, |i| ("GET /token", requests[i].clone()), 200, b"\"token\":\"").await?;
    // The whole process's CPU (server, audit, control plane, load generator) per exchange.
    let cpu_per_exchange = cpu_before
        .zip(super::writes::cpu_seconds())
        .map(|(a, b)| (b - a) / (exchanges.rate() * phase.as_secs_f64()).max(1.0));
    let audit_cpu = audit_cpu_per_event(&audit_log, &dir.join("audit-cost.log"))?;
    let verify = verify.and_after(Raw::measure(cores, phase, RawOp::Verify)?);
    let sign = sign.and_after(Raw::measure(cores, phase, RawOp::Sign)?);
    verify.print("verify");
    sign.print("sign");
    let pair_all = pair_rate(verify.all, sign.all);
    let pair_one = pair_rate(verify.one, sign.one);
    outln!("raw ES256 verify+sign pair:  {pair_all:>9.0}/s on {cores} threads, {pair_one:.0}/s on 1");
    outln!(
        "{:<26} {:>9.0} exchanges/s  p50 {:.2} ms  p99 {:.2} ms  = {:.2}x raw pair on {cores} cores ({:.2}x one core)",
        "token exchange (GET)",
        exchanges.rate(),
        exchanges.percentile_ms(0.50),
        exchanges.percentile_ms(0.99),
        exchanges.rate() / pair_all,
        exchanges.rate() / pair_one,
    );
    match (cpu_per_exchange, audit_cpu) {
        (Some(exchange), Some(audit)) => outln!(
            "audit: {:.1} µs CPU per event (serialized, queued, written) against {:.1} µs CPU per exchange: the audit costs {:.1}% (goal <= 5%)",
            audit * 1e6,
            exchange * 1e6,
            100.0 * audit / exchange.max(f64::EPSILON)
        ),
        _ => outln!("audit: cost not measured (no /proc/self/stat, or no audit line written)"),
    }
    if revocations > 0 {
        propagation(dir, &data, &issuer, &api, &pod_uids, revocations).await?;
    }
    Ok(())
}

/// Revocation propagation: `count` times, a fresh pod-bound token is used once at each hop
/// (a TokenReview, an exchange at a registry-auth that follows the cluster's revocations),
/// then its `jti` is revoked, and each hop is asked again until it refuses. Prints the time
/// from the revocation's 201 to each hop's first refusal, p50/p99, beside one round trip
/// of the same question (the finest any poller can see).
async fn propagation(
    dir: &std::path::Path,
    data: &std::path::Path,
    issuer: &str,
    api: &Api,
    pod_uids: &[String],
    count: usize,
) -> Result<()> {
    // A second registry-auth, reviewing through the admin's kubeconfig (which may list and
    // watch revokedtokens), so the exchange phase above measured the plain path.
    let review = format!("--token-review-kubeconfig={issuer}={}", data.join("admin.kubeconfig").display());
    let reviewed = registry_auth(dir, data, issuer, &dir.join("audit-revocation.log"), &[review]).await?;
    let auth =
        Api { connector: api.connector.clone(), addr: reviewed, host: reviewed.to_string(), token: String::new() };
    let (mut api_conn, mut auth_conn) = (api.connect().await?, auth.connect().await?);
    let (mut at_api, mut at_auth, mut round_trips) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..count {
        let slot = i % pod_uids.len();
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [AUDIENCE], "expirationSeconds": 3600,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": format!("pod-{slot}"), "uid": pod_uids[slot]}}});
        let answer = api.post(&mut api_conn, super::TOKEN_PATH, &body.to_string()).await?;
        let token = answer.pointer("/status/token").and_then(Value::as_str).context("no token")?.to_owned();
        let payload = token.split('.').nth(1).context("a token without a payload")?;
        let claims: Value = serde_json::from_slice(&data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes())?)?;
        let jti = claims["jti"].as_str().context("a token without a jti")?.to_owned();
        let until = jiff::Timestamp::from_second(claims["exp"].as_i64().context("a token without exp")?)?.to_string();
        let review = http::post(
            &api.host,
            super::REVIEW_PATH,
            &api.token,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": token, "audiences": [AUDIENCE]}})
            .to_string(),
        );
        let basic = data_encoding::BASE64.encode(format!("bench:{token}").as_bytes());
        let exchange = format!(
            "GET /token?service={SERVICE}&scope=repository:bench/app:pull HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {basic}\r\n\r\n",
            auth.host
        )
        .into_bytes();
        // Used once at each hop: both now hold it as a cached success.
        let started = Instant::now();
        let reviewed = api_conn.round_trip(&review).await?;
        round_trips.push(started.elapsed());
        if !String::from_utf8_lossy(&reviewed.body).contains("\"authenticated\":true") {
            bail!("the fresh token did not authenticate");
        }
        if auth_conn.round_trip(&exchange).await?.status != 200 {
            bail!("the fresh token was not exchanged");
        }
        let revocation = json!({"apiVersion": "revocation.podpass.dev/v1", "kind": "RevokedToken",
            "metadata": {"name": jti}, "spec": {"expirationTimestamp": until, "reason": "bench"}});
        api.post(&mut api_conn, "/apis/revocation.podpass.dev/v1/revokedtokens", &revocation.to_string()).await?;
        let revoked = Instant::now();
        let (mut api_done, mut auth_done) = (None, None);
        while api_done.is_none() || auth_done.is_none() {
            if revoked.elapsed() > Duration::from_secs(10) {
                bail!(
                    "revocation {i} not enforced within 10 s (API server: {api_done:?}, registry-auth: {auth_done:?})"
                );
            }
            if api_done.is_none() {
                let answer = api_conn.round_trip(&review).await?;
                if String::from_utf8_lossy(&answer.body).contains("\"authenticated\":false") {
                    api_done = Some(revoked.elapsed());
                }
            }
            if auth_done.is_none() && auth_conn.round_trip(&exchange).await?.status == 401 {
                auth_done = Some(revoked.elapsed());
            }
        }
        at_api.extend(api_done);
        at_auth.extend(auth_done);
    }
    let ms = |d: &[Duration], p: f64| {
        let mut us: Vec<u64> = d.iter().map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)).collect();
        us.sort_unstable();
        super::percentile_ms(&us, p)
    };
    outln!(
        "revocation by jti, {count} tokens, revocation stored -> refused (goal < 1000 ms), a poll is one round trip (p50 {:.2} ms):",
        ms(&round_trips, 0.50)
    );
    outln!("  {:<24} p50 {:>7.2} ms  p99 {:>7.2} ms", "API server (TokenReview)", ms(&at_api, 0.50), ms(&at_api, 0.99));
    outln!(
        "  {:<24} p50 {:>7.2} ms  p99 {:>7.2} ms",
        "registry-auth (exchange)",
        ms(&at_auth, 0.50),
        ms(&at_auth, 0.99)
    );
    Ok(())
}

/// Starts registry-auth over HTTPS with the control plane's serving certificate
/// (127.0.0.1), its audit to `audit_log`, and waits until it knows the issuer's keys;
/// returns its address.
async fn registry_auth(
    dir: &std::path::Path,
    data: &std::path::Path,
    issuer: &str,
    audit_log: &std::path::Path,
    extra: &[String],
) -> Result<std::net::SocketAddr> {
    let path = |p: &std::path::Path| p.display().to_string();
    let config: Config = podpass_serve::parse_flags(extra.iter().cloned().chain([
        "--listen=127.0.0.1:0".to_owned(),
        format!("--issuer={issuer}"),
        format!("--audience={AUDIENCE}"),
        format!("--policy={}", path(&dir.join("policy.yaml"))),
        format!("--signing-key={}", path(&dir.join("signer.key"))),
        format!("--registry-service={SERVICE}"),
        format!("--issuer-ca={}", path(&data.join("pki/ca.crt"))),
        format!("--tls-cert-file={}", path(&data.join("pki/apiserver.crt"))),
        format!("--tls-private-key-file={}", path(&data.join("pki/apiserver.key"))),
        // The audit costs what it costs in production, but off the terminal.
        format!("--audit-log-path={}", path(audit_log)),
    ]))
    .context("registry-auth's flags")?;
    let prepared = config.prepare().map_err(|e| anyhow::anyhow!("registry-auth: {e}"))?;
    let bound = prepared.bind().await.context("binding registry-auth")?;
    let service = Arc::clone(bound.service());
    let addr = bound.local_addr().context("registry-auth address")?;
    tokio::spawn(bound.serve(std::future::pending()));
    // Warm: every issuer's keys known before measuring.
    let deadline = Instant::now() + Duration::from_secs(30);
    while service.trusts().iter().any(|t| t.status().0 == 0) {
        if Instant::now() > deadline {
            bail!("registry-auth did not fetch the issuer's keys");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(addr)
}

/// Events recorded to measure the audit's cost (fewer than the writer's queue holds, so none is dropped).
const AUDIT_EVENTS: u32 = 50_000;

/// The audit's own CPU per event, in seconds: a granted decision's event as the measured
/// phase wrote it (the first line of `written`), rebuilt with a fresh time as the service
/// stamps each, recorded `AUDIT_EVENTS` times through the same writer to `to`, counted
/// until the writer thread has written the last (`None`: no line to copy or no CPU clock).
fn audit_cpu_per_event(written: &std::path::Path, to: &std::path::Path) -> Result<Option<f64>> {
    let text = std::fs::read_to_string(written).context("reading the audit log")?;
    let Some(event) = text.lines().find(|l| l.contains("\"granted\"")) else { return Ok(None) };
    let event: Value = serde_json::from_str(event).context("an audit line")?;
    let writer = podpass_serve::AuditWriter::open(podpass_serve::AuditTarget::File {
        path: to.to_owned(),
        max_bytes: 0,
        max_backups: 0,
    })
    .context("opening the cost measurement's audit file")?;
    let Some(before) = super::writes::cpu_seconds() else { return Ok(None) };
    for _ in 0..AUDIT_EVENTS {
        let mut e = event.clone();
        if let Some(fields) = e.as_object_mut() {
            fields.insert("time".into(), jiff::Timestamp::now().to_string().into());
        }
        writer.record(&e);
    }
    drop(writer);
    // Written once the file stops growing for 100 ms (the writer gathers for 2 ms at most);
    // the line count below proves it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut size, mut still) = (0, Instant::now());
    loop {
        let now = std::fs::metadata(to).map_or(0, |m| m.len());
        if now != size {
            (size, still) = (now, Instant::now());
        } else if size > 0 && still.elapsed() > Duration::from_millis(100) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the audit writer did not finish writing within 60 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let after = super::writes::cpu_seconds();
    let lines = std::fs::read(to).context("reading the cost measurement's audit file")?;
    let written = lines.iter().filter(|b| **b == b'\n').count();
    if written != AUDIT_EVENTS as usize {
        bail!("the audit writer wrote {written} of {AUDIT_EVENTS} events (its queue holds 65 536)");
    }
    Ok(after.map(|after| (after - before) / f64::from(AUDIT_EVENTS)))
}
