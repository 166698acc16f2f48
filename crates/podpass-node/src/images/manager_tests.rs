//! Tests of the image manager, with a fake runtime (this module only).
use super::*;

#[test]
fn durations_print_as_go_truncated_to_ms() {
    assert_eq!(format_duration(Duration::from_micros(300)), "0s");
    assert_eq!(format_duration(Duration::from_millis(12)), "12ms");
    assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(format_duration(Duration::from_millis(2034)), "2.034s");
    assert_eq!(format_duration(Duration::from_millis(61_000)), "1m1s");
}

#[test]
fn default_pull_policy_follows_the_tag() {
    assert_eq!(PullPolicy::default_for("nginx"), PullPolicy::Always);
    assert_eq!(PullPolicy::default_for("nginx:latest"), PullPolicy::Always);
    assert_eq!(PullPolicy::default_for("nginx:1"), PullPolicy::IfNotPresent);
    let digest = format!("nginx@sha256:{}", "a".repeat(64));
    assert_eq!(PullPolicy::default_for(&digest), PullPolicy::IfNotPresent);
    assert_eq!(PullPolicy::default_for(&format!("nginx:latest@sha256:{}", "a".repeat(64))), PullPolicy::Always);
}

#[test]
fn pull_policies_parse_as_the_api_spells_them() {
    assert_eq!("IfNotPresent".parse::<PullPolicy>(), Ok(PullPolicy::IfNotPresent));
    assert!("ifnotpresent".parse::<PullPolicy>().is_err());
}

fn tracked(source: CredentialSource) -> TrackedAuth {
    TrackedAuth {
        username: "u".into(),
        password: "p".into(),
        email: String::new(),
        source,
        auth_config_hash: "h".into(),
    }
}

#[test]
fn what_is_recorded_for_each_source() {
    let secret = CredentialSource::Secret { namespace: "ns".into(), name: "s".into(), uid: "1".into() };
    let sa = CredentialSource::ServiceAccount {
        namespace: "ns".into(),
        name: "sa".into(),
        uid: "2".into(),
        credential_id: String::new(),
    };
    let r = credentials_to_record(Some(&tracked(secret.clone())));
    assert_eq!(r.kubernetes_secrets[0].credential_hash, "h");
    assert!(!r.node_pods_accessible);
    let r = credentials_to_record(Some(&tracked(sa.clone())));
    assert_eq!(r.kubernetes_service_accounts[0].name, "sa");
    assert!(credentials_to_record(Some(&tracked(CredentialSource::NodeWide))).node_pods_accessible);
    assert!(credentials_to_record(None).node_pods_accessible);
    // The pod's view: secrets, the first SA only, never node-wide.
    let lookup = Lookup {
        credentials: vec![
            tracked(CredentialSource::NodeWide),
            tracked(secret),
            tracked(sa),
            tracked(CredentialSource::ServiceAccount {
                namespace: "ns".into(),
                name: "x".into(),
                uid: "3".into(),
                credential_id: String::new(),
            }),
        ],
        providers: vec![],
        ..Default::default()
    };
    let p = pod_credentials(&lookup);
    assert_eq!(p.secrets.len(), 1);
    assert_eq!(p.service_account.map(|s| s.name), Some("sa".into()));
}

/// A fake runtime for this module's tests: a fixed set of present images, pulls that
/// succeed only with the given password, and a count of concurrent pulls.
#[derive(Default)]
struct FakeRuntime {
    present: Mutex<Vec<super::super::service::PresentImage>>,
    password: String,
    inspect_fails: bool,
    pulls: Mutex<Vec<Option<String>>>,
    /// Images on these registries (prefixes) never answer.
    hang: Vec<&'static str>,
    active: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

impl ImageService for FakeRuntime {
    async fn image_status(
        &self,
        image: &str,
    ) -> Result<Option<super::super::service::PresentImage>, super::super::service::ImageError> {
        if self.inspect_fails {
            return Err(super::super::service::ImageError::Registry("runtime is down".into()));
        }
        Ok(self
            .present
            .lock()
            .unwrap()
            .iter()
            .find(|i| i.repo_tags.iter().any(|t| t == image) || i.id == image)
            .cloned())
    }
    async fn pull_image(
        &self,
        image: &str,
        auth: Option<&PullAuth>,
    ) -> Result<String, super::super::service::ImageError> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.hang.iter().any(|h| image.starts_with(h)) {
            std::future::pending::<()>().await;
        }
        let now = self.active.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(now, SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.active.fetch_sub(1, SeqCst);
        self.pulls.lock().unwrap().push(auth.map(|a| a.password.clone()));
        if auth.map(|a| a.password.as_str()) != Some(self.password.as_str()) {
            return Err(super::super::service::ImageError::Unauthorized(format!("wrong password for {image}")));
        }
        self.present.lock().unwrap().push(super::super::service::PresentImage {
            id: "sha256:img".into(),
            repo_tags: vec![image.to_owned()],
            repo_digests: vec![],
            size: 42,
        });
        Ok("sha256:img".into())
    }
    async fn list_images(&self) -> Result<Vec<super::super::service::PresentImage>, super::super::service::ImageError> {
        Ok(self.present.lock().unwrap().clone())
    }
    async fn remove_image(&self, _: &str) -> Result<(), super::super::service::ImageError> {
        Ok(())
    }
}

fn secret_cred(name: &str, password: &str) -> TrackedAuth {
    TrackedAuth {
        username: "u".into(),
        password: password.into(),
        email: String::new(),
        source: CredentialSource::Secret { namespace: "ns".into(), name: name.into(), uid: format!("{name}-uid") },
        auth_config_hash: format!("hash-{password}"),
    }
}

fn creds(list: Vec<TrackedAuth>) -> Arc<LazyLookup> {
    LazyLookup::ready(Lookup { credentials: list, ..Default::default() })
}

fn with_manager(
    runtime: FakeRuntime,
    policy: super::super::policy::VerificationPolicy,
    gate: bool,
) -> (tempfile::TempDir, ImageManager<FakeRuntime>) {
    let dir = tempfile::tempdir().unwrap();
    let pm = gate.then(|| {
        Arc::new(PullManager::new(
            super::super::records::RecordStore::open(dir.path()).unwrap(),
            super::super::policy::PolicyEnforcer::new(policy, &[]).unwrap(),
        ))
    });
    (dir, ImageManager::new(Arc::new(runtime), pm, true, None))
}

fn metric_text(m: &ImageManager<FakeRuntime>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("kubelet_image_manager_ensure_image_requests", "h", m.requests_metric());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

#[tokio::test]
async fn decision_paths() {
    use super::super::policy::VerificationPolicy::{AlwaysVerify, NeverVerifyPreloadedImages};
    let runtime = FakeRuntime { password: "good".into(), ..Default::default() };
    let (_d, m) = with_manager(runtime, NeverVerifyPreloadedImages, true);

    // Invalid name: InspectFailed, nothing looked up.
    let lookup = creds(vec![]);
    let d = m.ensure_image_exists("UPPER/Case", PullPolicy::IfNotPresent, lookup.clone()).await;
    assert_eq!(d.error, Some(EnsureError::InvalidImageName));
    assert_eq!(d.events[0].reason, "InspectFailed");
    assert!(!lookup.ran());

    // Absent + Never: ErrImageNeverPull; the default tag is applied textually.
    let d = m.ensure_image_exists("a.io/app", PullPolicy::Never, creds(vec![])).await;
    assert_eq!(d.image, "a.io/app:latest");
    assert_eq!(d.error, Some(EnsureError::ErrImageNeverPull));
    assert_eq!(d.events[0].message, "Container image \"a.io/app\" is not present with pull policy of Never");

    // Credentials tried in order; the aggregate error lists every failure.
    let d = m
        .ensure_image_exists(
            "a.io/app:1",
            PullPolicy::IfNotPresent,
            creds(vec![secret_cred("x", "bad1"), secret_cred("y", "bad2")]),
        )
        .await;
    assert_eq!(d.error, Some(EnsureError::ErrImagePull));
    assert_eq!(
        d.message.as_deref(),
        Some(
            "[failed to authorize: wrong password for a.io/app:1, failed to authorize: wrong password for a.io/app:1]"
        )
    );
    let d = m
        .ensure_image_exists(
            "a.io/app:1",
            PullPolicy::IfNotPresent,
            creds(vec![secret_cred("x", "bad"), secret_cred("y", "good")]),
        )
        .await;
    assert!(d.allowed(), "{d:?}");
    assert_eq!(d.credential_used.as_ref().unwrap()["name"], "y");
    assert_eq!(
        d.events.last().unwrap().message.split(" in ").next().unwrap(),
        "Successfully pulled image \"a.io/app:1\""
    );
    assert!(d.events.last().unwrap().message.ends_with("Image size: 42 bytes."));

    // Present; the pod's credentials are looked up only when the record needs them.
    let lookup = creds(vec![secret_cred("y", "good")]);
    let d = m.ensure_image_exists("a.io/app:1", PullPolicy::IfNotPresent, lookup.clone()).await;
    assert!(d.allowed());
    assert!(!d.pulled);
    assert!(lookup.ran(), "a secret on record is matched against the pod's");
    // A pod whose credentials are not on record must pull; Never hides presence.
    let d = m.ensure_image_exists("a.io/app:1", PullPolicy::Never, creds(vec![])).await;
    assert_eq!(d.error, Some(EnsureError::ErrImageNeverPull));
    assert!(d.present && d.must_pull);

    let text = metric_text(&m);
    for line in [
        r#"{pull_policy="ifnotpresent",present_locally="unknown",pull_required="unknown"} 1"#,
        r#"{pull_policy="never",present_locally="false",pull_required="false"} 1"#,
        r#"{pull_policy="ifnotpresent",present_locally="false",pull_required="true"} 2"#,
        r#"{pull_policy="ifnotpresent",present_locally="true",pull_required="false"} 1"#,
        r#"{pull_policy="never",present_locally="true",pull_required="true"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }

    // Always: treated as absent, pulls every time.
    let d = m.ensure_image_exists("a.io/app:1", PullPolicy::Always, creds(vec![secret_cred("y", "good")])).await;
    assert!(d.pulled && !d.present);

    // Runtime inspect failure: ImageInspectError.
    let broken = FakeRuntime { inspect_fails: true, ..Default::default() };
    let (_d2, m2) = with_manager(broken, AlwaysVerify, true);
    let d = m2.ensure_image_exists("a.io/app:1", PullPolicy::IfNotPresent, creds(vec![])).await;
    assert_eq!(d.error, Some(EnsureError::ImageInspectError));
    assert!(d.events[0].message.starts_with("Failed to inspect image \"a.io/app:1\": "));
}

#[tokio::test]
async fn a_preloaded_image_needs_no_lookup_and_the_gate_off_trusts_presence() {
    use super::super::policy::VerificationPolicy::NeverVerifyPreloadedImages;
    let preloaded = || FakeRuntime {
        present: Mutex::new(vec![super::super::service::PresentImage {
            id: "sha256:pre".into(),
            repo_tags: vec!["a.io/base:1".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    let (_d, m) = with_manager(preloaded(), NeverVerifyPreloadedImages, true);
    let lookup = creds(vec![]);
    let d = m.ensure_image_exists("a.io/base:1", PullPolicy::IfNotPresent, lookup.clone()).await;
    assert!(d.allowed());
    assert!(!lookup.ran(), "no plugin exec when the policy needs no verification");
    let (_d, off) = with_manager(preloaded(), NeverVerifyPreloadedImages, false);
    let d = off.ensure_image_exists("a.io/base:1", PullPolicy::Never, creds(vec![])).await;
    assert_eq!(d.events[0].message, "Container image \"a.io/base:1\" already present on machine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_are_serialised_or_bounded_as_configured() {
    // Four images on four registries, then on one (which may hold half the slots).
    for (serialize, max, registries, expected) in [(true, None, 4, 1), (false, Some(2), 4, 2), (false, Some(4), 1, 2)] {
        let runtime = Arc::new(FakeRuntime { password: "good".into(), ..Default::default() });
        let m = Arc::new(ImageManager::new(runtime.clone(), None, serialize, max));
        let mut tasks = Vec::new();
        for i in 0..4 {
            let m = m.clone();
            tasks.push(tokio::spawn(async move {
                m.ensure_image_exists(
                    &format!("r{}.io/app{i}:1", i % registries),
                    PullPolicy::Always,
                    creds(vec![secret_cred("s", "good")]),
                )
                .await
            }));
        }
        for t in tasks {
            assert!(t.await.unwrap().allowed());
        }
        assert_eq!(
            runtime.peak.load(std::sync::atomic::Ordering::SeqCst),
            expected,
            "serialize={serialize} max={max:?} registries={registries}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_pull_backs_off_per_pod_and_repeats_its_error() {
    use super::super::policy::VerificationPolicy::NeverVerifyPreloadedImages;
    let runtime = FakeRuntime { password: "good".into(), ..Default::default() };
    let (_d, m) = with_manager(runtime, NeverVerifyPreloadedImages, true);
    let d = m.ensure_image_for_pod("ns", "uid-1", "a.io/app:1", PullPolicy::IfNotPresent, creds(vec![])).await;
    assert_eq!(d.error, Some(EnsureError::ErrImagePull));
    assert_eq!(d.error.map(EnsureError::reason), Some("ErrImagePull"));
    let pulls = m.service().pulls.lock().unwrap().len();

    // Within the 10 s back-off: no pull, BackOff event, the previous error repeated.
    tokio::time::advance(Duration::from_secs(5)).await;
    let d = m.ensure_image_for_pod("ns", "uid-1", "a.io/app:1", PullPolicy::IfNotPresent, creds(vec![])).await;
    assert_eq!(d.error, Some(EnsureError::ImagePullBackOff));
    assert_eq!(d.error.map(EnsureError::reason), Some("ImagePullBackOff"));
    assert_eq!(
        d.message.as_deref(),
        Some("Back-off pulling image \"a.io/app:1\": ErrImagePull: failed to authorize: wrong password for a.io/app:1")
    );
    assert_eq!((d.events[0].event_type, d.events[0].reason), ("Normal", "BackOff"));
    assert_eq!(d.events[0].message, "Back-off pulling image \"a.io/app:1\"");
    assert_eq!(m.service().pulls.lock().unwrap().len(), pulls, "no pull during back-off");
    // Another pod is not held back by this one's failures; the one-shot path never is.
    let d = m.ensure_image_for_pod("ns", "uid-2", "a.io/app:1", PullPolicy::IfNotPresent, creds(vec![])).await;
    assert_eq!(d.error, Some(EnsureError::ErrImagePull));
    assert!(m.backoff_until("uid-1", "a.io/app:1").is_some());

    // After it: a new attempt; now with a credential added later it succeeds.
    tokio::time::advance(Duration::from_secs(6)).await;
    assert!(m.backoff_until("uid-1", "a.io/app:1").is_none());
    let d = m
        .ensure_image_for_pod(
            "ns",
            "uid-1",
            "a.io/app:1",
            PullPolicy::IfNotPresent,
            creds(vec![secret_cred("s", "good")]),
        )
        .await;
    assert!(d.allowed(), "{d:?}");
    m.forget_pod("uid-2");
    assert!(m.backoff_until("uid-2", "a.io/app:1").is_none());
}

/// A provider falling back to `fail` refuses the pull before the runtime is asked.
#[tokio::test]
async fn a_lookup_refused_by_a_provider_fallback_pulls_nothing() {
    let runtime = FakeRuntime { password: "good".into(), ..Default::default() };
    let (_dir, m) = with_manager(runtime, super::super::policy::VerificationPolicy::AlwaysVerify, true);
    let refused = LazyLookup::ready(Lookup {
        credentials: vec![secret_cred("s", "good")],
        refusal: Some("credential provider p: required annotation a not found (its fallback is fail)".into()),
        ..Default::default()
    });
    let d = m.ensure_image_exists("r.example/app:1", PullPolicy::IfNotPresent, refused).await;
    assert_eq!(d.error, Some(EnsureError::ErrImagePull));
    assert!(d.message.as_deref().unwrap_or_default().ends_with("(its fallback is fail)"), "{d:?}");
    assert!(m.service().pulls.lock().unwrap().is_empty(), "the runtime was never asked");
}

/// A pull that fails on a provider's cached answer asks again once, without the cache, and
/// pulls with the fresh answer; one whose credentials came from no cache fails at once.
#[tokio::test]
async fn a_pull_refused_on_cached_credentials_looks_up_again_once() {
    let runtime = FakeRuntime { password: "good".into(), ..Default::default() };
    let (_dir, m) = with_manager(runtime, super::super::policy::VerificationPolicy::AlwaysVerify, true);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let asked2 = asked.clone();
    let lookup = LazyLookup::new(move |previous: Option<Lookup>| -> LookupFuture {
        asked2.lock().unwrap().push(previous.is_some());
        let fresh = previous.is_some();
        Box::pin(async move {
            let (password, cached) = if fresh {
                ("good", vec![])
            } else {
                ("stale", vec![(0, crate::credential::CachedAnswer::for_tests())])
            };
            Lookup { credentials: vec![secret_cred("s", password)], cached, ..Default::default() }
        })
    });
    let d = m.ensure_image_for_pod("ns", "uid-1", "r.example/app:1", PullPolicy::Always, lookup).await;
    assert!(d.allowed(), "{d:?}");
    assert_eq!(*asked.lock().unwrap(), [false, true], "looked up again once");
    assert_eq!(*m.service().pulls.lock().unwrap(), [Some("stale".to_owned()), Some("good".to_owned())]);

    // Nothing cached: the refusal stands, the lookup is not asked again.
    let uncached = LazyLookup::ready(Lookup { credentials: vec![secret_cred("s", "wrong")], ..Default::default() });
    let d = m.ensure_image_for_pod("ns", "uid-2", "r.example/app:2", PullPolicy::Always, uncached.clone()).await;
    assert_eq!(d.error, Some(EnsureError::ErrImagePull), "{d:?}");
    assert!(uncached.again().await.is_none());
    assert_eq!(m.service().pulls.lock().unwrap().len(), 3, "one pull for the uncached credentials");

    // Still refused after the fresh lookup: one retry, then the failure.
    let refused = LazyLookup::new(|_| -> LookupFuture {
        Box::pin(async {
            Lookup {
                credentials: vec![secret_cred("s", "revoked")],
                cached: vec![(0, crate::credential::CachedAnswer::for_tests())],
                ..Default::default()
            }
        })
    });
    let d = m.ensure_image_for_pod("ns", "uid-3", "r.example/app:3", PullPolicy::Always, refused).await;
    assert_eq!(d.error, Some(EnsureError::ErrImagePull), "{d:?}");
    assert_eq!(m.service().pulls.lock().unwrap().len(), 5, "the first pull and one retry");
}

/// Pulls from a registry that never answers hold at most half the node's slots: another
/// tenant's pull from another registry goes through while they hang.
#[tokio::test]
async fn a_hanging_registry_holds_only_its_share_of_the_pulls() {
    let runtime = FakeRuntime { password: "good".into(), hang: vec!["hang.example/"], ..Default::default() };
    let m = Arc::new(ImageManager::new(Arc::new(runtime), None, false, Some(4)));
    let mut hung = Vec::new();
    for i in 0..6 {
        let m = m.clone();
        hung.push(tokio::spawn(async move {
            let image = format!("hang.example/app:{i}");
            m.ensure_image_for_pod("team-b", &format!("b-{i}"), &image, PullPolicy::Always, creds(vec![])).await
        }));
    }
    // Wait until the hanging registry holds what it may.
    tokio::time::timeout(Duration::from_secs(30), async {
        while m.slots_in_use() < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the hanging pulls took their share");
    let other = tokio::time::timeout(
        Duration::from_secs(30),
        m.ensure_image_for_pod(
            "team-a",
            "a-1",
            "r.example/app:1",
            PullPolicy::Always,
            creds(vec![secret_cred("s", "good")]),
        ),
    )
    .await
    .expect("team-a's pull was held by team-b's hanging registry");
    assert!(other.allowed(), "{other:?}");
    assert_eq!(m.slots_in_use(), 2, "the hanging registry never held more than half of the 4 slots");
    for h in hung {
        h.abort();
    }
}

/// A pull that never finishes is cancelled at the pull timeout, failing with ErrImagePull
/// that says so.
#[tokio::test(start_paused = true)]
async fn a_pull_that_never_finishes_is_cancelled_at_the_timeout() {
    let runtime = FakeRuntime { hang: vec!["hang.example/"], ..Default::default() };
    let m = ImageManager::new(Arc::new(runtime), None, true, None).with_pull_timeout(Duration::from_secs(120));
    let d = m.ensure_image_for_pod("team-b", "b-1", "hang.example/app:1", PullPolicy::Always, creds(vec![])).await;
    assert_eq!(d.error, Some(EnsureError::ErrImagePull), "{d:?}");
    let message = d.message.unwrap_or_default();
    assert!(message.contains("did not finish within 2m0s: cancelled"), "{message}");
    // Its slot is free again: the next pull is not held.
    assert_eq!(m.slots_in_use(), 0);
}
