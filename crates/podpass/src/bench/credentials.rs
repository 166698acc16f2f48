//! `podpass bench credentials`: credential provider costs against their physical limits
//! measured in the same run — a bare spawn+wait of the same plugin binary for exec overhead;
//! cache hits in microseconds; 1000 concurrent identical lookups sharing one exec.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use podpass_api::GoDuration;
use podpass_api::credential_provider::{CredentialProvider, ExecEnvVar, wire::V1};
use podpass_node::credential::CredentialMetrics;
use podpass_node::credential::PluginProvider;

/// Flags of `podpass bench credentials`.
#[derive(Debug, Args)]
pub struct CredentialsBench {
    /// Plugin executions timed each way.
    #[arg(long, default_value_t = 200)]
    execs: usize,
    /// Cache hits timed.
    #[arg(long, default_value_t = 200_000)]
    hits: usize,
    /// Concurrent identical lookups.
    #[arg(long, default_value_t = 1000)]
    concurrent: usize,
}

/// A minimal plugin: reads its request, answers for every image; sleeps `$DELAY` first.
const PLUGIN: &str = "#!/bin/sh\ncat >/dev/null\n[ -n \"$DELAY\" ] && sleep \"$DELAY\"\necho '{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Global\",\"auth\":{\"*.registry.example\":{\"username\":\"u\",\"password\":\"p\"}}}'\n";

fn provider(bin: &std::path::Path, cache_seconds: i64, delay: Option<&str>) -> PluginProvider {
    let config = CredentialProvider {
        name: "bench-plugin".into(),
        match_images: vec!["*.registry.example".into()],
        default_cache_duration: Some(GoDuration::from_secs(cache_seconds)),
        api_version: V1.into(),
        env: delay.map(|d| vec![ExecEnvVar { name: "DELAY".into(), value: d.into() }]).unwrap_or_default(),
        ..Default::default()
    };
    PluginProvider::new(config, bin.to_owned(), true, None, CredentialMetrics::default())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

/// Runs the credentials bench.
pub fn run(args: CredentialsBench) -> Result<()> {
    if args.execs == 0 || args.hits == 0 || args.concurrent == 0 {
        bail!("--execs, --hits and --concurrent must be at least 1");
    }
    let dir = tempfile::tempdir().context("temporary plugin directory")?;
    let path = dir.path().join("bench-plugin");
    std::fs::write(&path, PLUGIN).context("writing the bench plugin")?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).context("chmod")?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    runtime.block_on(async {
        outln!("podpass bench credentials: plugin {}", path.display());
        // Exec overhead: alternate bare spawn+wait and a provider lookup that always execs.
        let uncached = provider(dir.path(), 0, None);
        let (mut bare, mut through) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..args.execs {
            let started = Instant::now();
            let status = tokio::process::Command::new(&path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await
                .context("bare spawn")?;
            if !status.success() {
                bail!("the bench plugin failed: {status}");
            }
            bare += started.elapsed();
            let started = Instant::now();
            let got = uncached.provide("a.registry.example/app", None).await;
            through += started.elapsed();
            if got.config.is_empty() {
                bail!("the provider yielded nothing: {:?}", got.report.skip_reason);
            }
        }
        let n = args.execs as f64;
        let (bare_ms, through_ms) = (bare.as_secs_f64() * 1e3 / n, through.as_secs_f64() * 1e3 / n);
        outln!(
            "plugin exec: {through_ms:.2} ms per lookup vs {bare_ms:.2} ms bare spawn+wait = {:.2}x",
            through_ms / bare_ms
        );

        // Cache hits.
        let cached = provider(dir.path(), 3600, None);
        cached.provide("a.registry.example/app", None).await;
        let mut samples = Vec::with_capacity(args.hits.min(100_000));
        let started = Instant::now();
        for i in 0..args.hits {
            let t = Instant::now();
            let got = cached.provide("a.registry.example/app", None).await;
            if i < 100_000 {
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
            if !got.report.cache_hit {
                bail!("expected a cache hit");
            }
        }
        let mean_us = started.elapsed().as_secs_f64() * 1e6 / args.hits as f64;
        samples.sort_by(f64::total_cmp);
        outln!(
            "cache hit: mean {mean_us:.2} µs, p50 {:.2} µs, p99 {:.2} µs",
            percentile(&samples, 0.5),
            percentile(&samples, 0.99)
        );

        // Concurrent identical lookups share one exec.
        let shared = Arc::new(provider(dir.path(), 0, Some("0.5")));
        let started = Instant::now();
        let tasks: Vec<_> = (0..args.concurrent)
            .map(|_| {
                let p = Arc::clone(&shared);
                tokio::spawn(async move { p.provide("a.registry.example/app", None).await })
            })
            .collect();
        let mut answered = 0;
        for t in tasks {
            answered += usize::from(!t.await.context("lookup task")?.config.is_empty());
        }
        outln!(
            "{} concurrent identical lookups: {} exec(s), {answered} answered, {:.0} ms",
            args.concurrent,
            shared.exec_count(),
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    })
}
