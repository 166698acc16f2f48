//! Credential providers executing real plugin processes: small Python plugins written into a
//! temporary bin dir (echo, fail, sleep past the timeout, wrong apiVersion, garbage output).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use podpass_api::GoDuration;
use podpass_api::credential_provider::{CredentialProvider, ExecEnvVar, wire::V1};
use podpass_node::credential::CredentialMetrics;
use podpass_node::credential::{PluginProvider, lookup};

/// The echo plugin: answers for `*.registry.example` with user `$PLUGIN_USER` and the
/// image as password, cache key type and duration from its args, and logs each run.
const ECHO: &str = r#"#!/usr/bin/env python3
import json, os, sys, time
req = json.load(sys.stdin)
with open(os.environ["RUN_LOG"], "a") as f:
    f.write(req["image"] + "\n")
time.sleep(float(os.environ.get("PLUGIN_DELAY", "0")))
resp = {"kind": "CredentialProviderResponse", "apiVersion": req["apiVersion"],
        "cacheKeyType": sys.argv[1],
        "auth": {"*.registry.example": {"username": os.environ.get("PLUGIN_USER", ""), "password": req["image"]}}}
if len(sys.argv) > 2:
    resp["cacheDuration"] = sys.argv[2]
print(json.dumps(resp))
"#;

const FAIL: &str = "#!/bin/sh\necho 'registry refused: bad credentials' >&2\necho 'second line' >&2\nexit 3\n";
const SLEEP: &str = "#!/bin/sh\nexec sleep 30\n";
const WRONG_VERSION: &str = "#!/bin/sh\ncat >/dev/null\necho '{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1beta1\",\"cacheKeyType\":\"Image\"}'\n";
const GARBAGE: &str = "#!/bin/sh\ncat >/dev/null\necho '{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Image\",\"auth\":{\"r\":{\"username\":\"u\",\"password\":\"hunter2\",\"unknown\":1}}}'\n";
/// Streams stdout without end (and stderr too), ignoring its input.
const FLOOD: &str = "#!/bin/sh\n(yes stderr-noise >&2 &)\nexec yes '{\"kind\":\"CredentialProviderResponse\"}'\n";
const BAD_KEY_TYPE: &str = "#!/bin/sh\ncat >/dev/null\necho '{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Pod\"}'\n";

fn install(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn provider(name: &str, args: &[&str], env: &[(&str, &str)], default_cache: i64) -> CredentialProvider {
    CredentialProvider {
        name: name.into(),
        match_images: vec!["*.registry.example".into()],
        default_cache_duration: Some(GoDuration::from_secs(default_cache)),
        api_version: V1.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: env.iter().map(|(n, v)| ExecEnvVar { name: (*n).into(), value: (*v).into() }).collect(),
        token_attributes: None,
    }
}

struct Bin {
    dir: tempfile::TempDir,
}

impl Bin {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in [
            ("echo", ECHO),
            ("fail", FAIL),
            ("sleep", SLEEP),
            ("wrong-version", WRONG_VERSION),
            ("garbage", GARBAGE),
            ("bad-key-type", BAD_KEY_TYPE),
            ("flood", FLOOD),
        ] {
            install(dir.path(), name, body);
        }
        Self { dir }
    }

    fn log(&self) -> String {
        self.dir.path().join("runs.log").to_str().unwrap().to_owned()
    }

    fn runs(&self) -> usize {
        std::fs::read_to_string(self.log()).unwrap_or_default().lines().count()
    }

    fn plugin(&self, config: CredentialProvider) -> PluginProvider {
        PluginProvider::new(config, self.dir.path().to_owned(), true, None, CredentialMetrics::default())
    }
}

#[tokio::test]
async fn registry_cache_serves_other_images_of_the_registry() {
    let bin = Bin::new();
    let log = bin.log();
    let p = bin.plugin(provider("echo", &["Registry"], &[("RUN_LOG", &log), ("PLUGIN_USER", "robot")], 300));
    let first = p.provide("a.registry.example/app:1", None).await;
    assert!(first.report.ran && !first.report.cache_hit);
    assert_eq!(first.config["*.registry.example"].username, "robot", "config env reaches the plugin");
    assert_eq!(first.report.cache_key_type.as_deref(), Some("Registry"));
    let second = p.provide("a.registry.example/other:2", None).await;
    assert!(second.report.cache_hit && !second.report.ran);
    assert_eq!(second.config["*.registry.example"].password, "a.registry.example/app:1", "the cached answer");
    let other_registry = p.provide("b.registry.example/app:1", None).await;
    assert!(other_registry.report.ran);
    assert_eq!(bin.runs(), 2);
    let unmatched = p.provide("quay.io/app", None).await;
    assert!(!unmatched.report.matched && !unmatched.report.ran);
}

/// A cached answer the registry refused is dropped and the plugin asked again; the lookup
/// that served it from the cache names it, one that ran the plugin names nothing.
#[tokio::test]
async fn a_refused_cached_answer_is_dropped_and_the_plugin_asked_again() {
    let bin = Bin::new();
    let log = bin.log();
    let p = [bin.plugin(provider("echo", &["Registry"], &[("RUN_LOG", &log)], 300))];
    let none = podpass_node::credential::DockerConfig::new();
    let first = lookup("a.registry.example/app:1", None, &[], &p, &none).await;
    assert!(first.cached.is_empty(), "the plugin ran: nothing cached was used");
    let hit = lookup("a.registry.example/app:2", None, &[], &p, &none).await;
    assert_eq!(hit.cached.len(), 1, "served from the cache");
    assert_eq!(hit.credentials[0].password, "a.registry.example/app:1", "the cached answer");
    hit.forget_cached(&p);
    let again = lookup("a.registry.example/app:2", None, &[], &p, &none).await;
    assert!(again.providers[0].ran && again.cached.is_empty(), "{:?}", again.providers);
    assert_eq!(again.credentials[0].password, "a.registry.example/app:2", "a fresh answer");
    assert_eq!(bin.runs(), 2);
    // A second refusal of the same stale answer drops nothing: its replacement stays.
    hit.forget_cached(&p);
    let stale_again = lookup("a.registry.example/app:3", None, &[], &p, &none).await;
    assert!(stale_again.providers[0].cache_hit, "{:?}", stale_again.providers);
    assert_eq!(stale_again.credentials[0].password, "a.registry.example/app:2");
    assert_eq!(bin.runs(), 2);
}

#[tokio::test]
async fn durations_zero_never_caches_and_response_overrides_default() {
    let bin = Bin::new();
    let log = bin.log();
    let env = [("RUN_LOG", log.as_str())];
    // default 0, no duration in the response: never cached
    let p = bin.plugin(provider("echo", &["Image"], &env, 0));
    p.provide("a.registry.example/x", None).await;
    p.provide("a.registry.example/x", None).await;
    assert_eq!(p.exec_count(), 2);
    // default 0 but the response says 1h: cached
    let p = bin.plugin(provider("echo", &["Image", "1h"], &env, 0));
    p.provide("a.registry.example/x", None).await;
    assert!(p.provide("a.registry.example/x", None).await.report.cache_hit);
    // default 1h but the response says 0s: not cached
    let p = bin.plugin(provider("echo", &["Image", "0s"], &env, 3600));
    p.provide("a.registry.example/x", None).await;
    assert!(!p.provide("a.registry.example/x", None).await.report.cache_hit);
    // Image keys are exact: another tag runs again
    let p = bin.plugin(provider("echo", &["Image"], &env, 3600));
    p.provide("a.registry.example/x:1", None).await;
    assert!(p.provide("a.registry.example/x:2", None).await.report.ran);
}

#[tokio::test]
async fn concurrent_identical_lookups_share_one_exec() {
    let bin = Bin::new();
    let log = bin.log();
    let p = Arc::new(bin.plugin(provider("echo", &["Global"], &[("RUN_LOG", &log), ("PLUGIN_DELAY", "0.3")], 0)));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let p = Arc::clone(&p);
            tokio::spawn(async move { p.provide("a.registry.example/app", None).await })
        })
        .collect();
    let mut ran = 0;
    for t in tasks {
        let got = t.await.unwrap();
        assert_eq!(got.config.len(), 1, "every caller gets the shared answer");
        ran += usize::from(got.report.ran);
    }
    assert_eq!(ran, 1);
    assert_eq!(bin.runs(), 1);
}

#[tokio::test]
async fn failures_yield_nothing_and_say_why() {
    let bin = Bin::new();
    let metrics = CredentialMetrics::default();
    let fail = PluginProvider::new(provider("fail", &[], &[], 60), bin.dir.path().into(), true, None, metrics.clone());
    let got = fail.provide("a.registry.example/app", None).await;
    assert!(got.config.is_empty());
    assert_eq!(
        got.report.skip_reason.as_deref(),
        Some("plugin failed: exit code 3: registry refused: bad credentials")
    );
    let errors =
        metrics.errors.get_or_create(&podpass_node::credential::PluginLabels { plugin_name: "fail".into() }).get();
    assert_eq!(errors, 1);
    assert!(!fail.provide("a.registry.example/app", None).await.report.cache_hit, "failures are not cached");

    let slow = bin.plugin(provider("sleep", &[], &[], 60)).with_timeout(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let got = slow.provide("a.registry.example/app", None).await;
    assert!(started.elapsed() < Duration::from_secs(10), "killed at the timeout");
    assert_eq!(got.report.skip_reason.as_deref(), Some("plugin failed: timed out or killed"));

    let wrong = bin.plugin(provider("wrong-version", &[], &[], 60));
    assert_eq!(
        wrong.provide("a.registry.example/app", None).await.report.skip_reason.as_deref(),
        Some(
            "response rejected: apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1"
        )
    );
    let garbage = bin.plugin(provider("garbage", &[], &[], 60));
    let reason = garbage.provide("a.registry.example/app", None).await.report.skip_reason.unwrap();
    assert_eq!(reason, "response rejected: error decoding credential provider plugin response from stdout");
    let bad_key = bin.plugin(provider("bad-key-type", &[], &[], 60));
    assert_eq!(
        bad_key.provide("a.registry.example/app", None).await.report.skip_reason.as_deref(),
        Some("response rejected: invalid cacheKeyType \"Pod\"")
    );
    // a plugin flooding stdout is cut off at the cap (not at the timeout) and killed
    let flood = bin.plugin(provider("flood", &[], &[], 60)).with_timeout(Duration::from_secs(30));
    let started = std::time::Instant::now();
    let reason = flood.provide("a.registry.example/app", None).await.report.skip_reason.unwrap();
    assert_eq!(reason, "response rejected: credential provider plugin wrote more than 1048576 bytes to stdout");
    assert!(started.elapsed() < Duration::from_secs(20), "stopped at the cap, not the timeout");
    let missing = bin.plugin(provider("not-installed", &[], &[], 60));
    assert!(
        missing.provide("a.registry.example/app", None).await.report.skip_reason.unwrap().starts_with("plugin failed")
    );
}

#[tokio::test]
async fn keyring_orders_secrets_then_providers_then_node_config() {
    let bin = Bin::new();
    let log = bin.log();
    let p = bin.plugin(provider("echo", &["Image"], &[("RUN_LOG", &log), ("PLUGIN_USER", "from-plugin")], 60));
    let secret = podpass_node::credential::PullSecret {
        namespace: "team".into(),
        name: "regcred".into(),
        uid: "s-uid".into(),
        config: [(
            "a.registry.example".to_owned(),
            podpass_node::credential::DockerConfigEntry {
                username: "from-secret".into(),
                password: "p".into(),
                email: String::new(),
            },
        )]
        .into(),
    };
    let node: podpass_node::credential::DockerConfig = [(
        "*.registry.example".to_owned(),
        podpass_node::credential::DockerConfigEntry {
            username: "node".into(),
            password: "p".into(),
            email: String::new(),
        },
    )]
    .into();
    let found = lookup("a.registry.example/app", None, &[secret], &[p], &node).await;
    let users: Vec<_> = found.credentials.iter().map(|c| c.username.as_str()).collect();
    assert_eq!(users, ["from-secret", "from-plugin", "node"]);
    assert_eq!(
        serde_json::to_value(&found.credentials[0].source).unwrap(),
        serde_json::json!({"type": "secret", "namespace": "team", "name": "regcred", "uid": "s-uid"})
    );
    assert_eq!(serde_json::to_value(&found.credentials[1].source).unwrap(), serde_json::json!({"type": "nodeWide"}));
    assert_eq!(found.providers.len(), 1);
}

#[tokio::test]
async fn service_account_mode_without_a_pod_follows_require_service_account() {
    let bin = Bin::new();
    let log = bin.log();
    let attributes = |require: bool| podpass_api::credential_provider::ServiceAccountTokenAttributes {
        service_account_token_audience: "registry.example".into(),
        cache_type: podpass_api::credential_provider::TokenCacheType::ServiceAccount,
        require_service_account: Some(require),
        ..Default::default()
    };
    let mut required = provider("echo", &["Image"], &[("RUN_LOG", &log)], 60);
    required.token_attributes = Some(attributes(true));
    let got = bin.plugin(required).provide("a.registry.example/app", None).await;
    assert!(!got.report.ran);
    assert_eq!(
        got.report.skip_reason.as_deref(),
        Some("the pod has no service account and the provider requires one (requireServiceAccount)")
    );
    // requireServiceAccount false (static pods): runs without a token, no SA coordinates
    let mut optional = provider("echo", &["Image"], &[("RUN_LOG", &log)], 60);
    optional.token_attributes = Some(attributes(false));
    let got = bin.plugin(optional).provide("a.registry.example/app", None).await;
    assert!(got.report.ran && got.report.skip_reason.is_none());
    assert_eq!(got.service_account, None);
    assert_eq!(got.report.service_account, None);
    // a pod with a service account but no API access: says so instead of failing silently
    let mut with_pod = provider("echo", &["Image"], &[("RUN_LOG", &log)], 60);
    with_pod.token_attributes = Some(attributes(true));
    let pod = podpass_node::credential::PodIdentity {
        namespace: "ns".into(),
        name: "p".into(),
        uid: "u".into(),
        service_account: "sa".into(),
    };
    let got = bin.plugin(with_pod).provide("a.registry.example/app", Some(&pod)).await;
    assert!(got.report.skip_reason.unwrap().contains("--kubeconfig"));
    // the gate off: tokenAttributes are ignored and the plugin runs as a plain provider
    let mut gated = provider("echo", &["Image"], &[("RUN_LOG", &log)], 60);
    gated.token_attributes = Some(attributes(true));
    let p = PluginProvider::new(gated, bin.dir.path().to_owned(), false, None, CredentialMetrics::default());
    assert!(p.provide("a.registry.example/app", Some(&pod)).await.report.ran);
}
