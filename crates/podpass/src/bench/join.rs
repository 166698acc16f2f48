//! `podpass bench join`: on a running `podpass up` cluster (its data dir), N machines join
//! one after another with the command `podpass up` prints (`podpass node join`, each from a
//! data dir of its own, preparing pods only): kubeadm's discovery (the signed cluster-info,
//! the CA pinned), the TLS bootstrap (a CSR approved and signed by the controller manager),
//! registration, until its Node is Ready. The floor, in the same run: the same node started
//! again on the certificate it got (no discovery, no CSR), from its Node deleted to Ready
//! again. It prints p50 and p99 of both and their ratio: what the bootstrap costs.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::up::api::Api;

/// Flags of `podpass bench join`.
#[derive(Debug, Args)]
pub struct JoinBench {
    /// The data dir of the running `podpass up` cluster.
    #[arg(long, default_value = "./podpass-data")]
    data_dir: PathBuf,
    /// How many joins.
    #[arg(long, default_value_t = 10)]
    joins: usize,
    /// How long one join may take before the bench gives up.
    #[arg(long, default_value_t = 120)]
    timeout_seconds: u64,
}

/// Runs the bench.
pub fn run(args: JoinBench) -> Result<()> {
    if args.joins == 0 {
        bail!("--joins must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    runtime.block_on(drive(&args))
}

/// A joined node's process, stopped on drop.
struct Joined(Child);

impl Drop for Joined {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ready(node: &serde_json::Value) -> bool {
    node["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Polls until Node `name` is Ready (or gone, with `gone`), for at most `limit`.
async fn until_node(api: &Api, name: &str, gone: bool, limit: Duration, child: &mut Child) -> Result<Duration> {
    let began = Instant::now();
    loop {
        let (code, node) = api.get(&format!("/api/v1/nodes/{name}")).await?;
        if (gone && code == 404) || (!gone && code == 200 && ready(&node)) {
            return Ok(began.elapsed());
        }
        if let Some(status) = child.try_wait().context("waiting for the joining node")? {
            bail!("{name}'s `podpass node join` exited ({status}) before its Node was Ready");
        }
        if began.elapsed() > limit {
            bail!("{name}: not {} within {} s", if gone { "gone" } else { "Ready" }, limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else { return 0.0 };
    sorted[((last as f64 * p).round() as usize).min(last)].as_secs_f64() * 1000.0
}

async fn drive(args: &JoinBench) -> Result<()> {
    let api = Api::from_data_dir(&args.data_dir)
        .with_context(|| format!("{}: is `podpass up` running on it?", args.data_dir.display()))?;
    let limit = Duration::from_secs(args.timeout_seconds);
    let line = crate::up::node::join_command(&args.data_dir, &api).await?;
    let words: Vec<String> = line.split_whitespace().skip(1).map(str::to_owned).collect();
    let podpass = std::env::current_exe().context("the podpass binary")?;
    let scratch = tempfile::tempdir().context("a scratch directory")?;
    let (mut joins, mut restarts) = (Vec::new(), Vec::new());
    for i in 0..args.joins {
        let name = format!("bench-join-{i}");
        let dir = scratch.path().join(&name);
        let start = || -> Result<Joined> {
            let child = Command::new(&podpass)
                .args(&words)
                .args(["--data-dir", &dir.display().to_string(), "--node-name", &name, "--"])
                .args(["--port", "0", "--healthz-port", "0", "--prepare-only"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting podpass node join")?;
            Ok(Joined(child))
        };
        let began = Instant::now();
        let mut joined = start()?;
        until_node(&api, &name, false, limit, &mut joined.0).await?;
        joins.push(began.elapsed());
        drop(joined);
        api.delete(&format!("/api/v1/nodes/{name}")).await?;
        // The floor: the same machine again, on its certificate.
        let began = Instant::now();
        let mut again = start()?;
        until_node(&api, &name, false, limit, &mut again.0).await?;
        restarts.push(began.elapsed());
        drop(again);
        api.delete(&format!("/api/v1/nodes/{name}")).await?;
        eprintln!(
            "join: {name}: joined in {:.0} ms, again in {:.0} ms",
            joins[i].as_secs_f64() * 1e3,
            restarts[i].as_secs_f64() * 1e3
        );
    }
    joins.sort();
    restarts.sort();
    let (p50, floor) = (percentile(&joins, 0.5), percentile(&restarts, 0.5));
    println!(
        "join: joins={} join_to_ready_p50_ms={p50:.0} p99_ms={:.0} restart_on_certificate_p50_ms={floor:.0} p99_ms={:.0} ratio={:.2}",
        args.joins,
        percentile(&joins, 0.99),
        percentile(&restarts, 0.99),
        p50 / floor.max(f64::EPSILON)
    );
    Ok(())
}
