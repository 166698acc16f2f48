//! The pull manager (pullmanager/image_pull_manager.go, revision B): pull intents with
//! refcounts, pulled records merged with the credentials that pulled, and
//! `MustAttemptImagePull` — may this pod use an image already on the node, or must its own
//! credentials be verified by pulling? Any doubt (a record that cannot be read) means
//! verify.
//!
//! Blocking (it reads and writes record files); async callers use `spawn_blocking`.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::mem_records::{CachedRecords, MAX_INTENTS, MAX_PULLED};
use super::policy::PolicyEnforcer;
use super::records::{
    API_VERSION, ImagePullCredentials, ImagePullSecret, ImagePullServiceAccount, ImagePulledRecord, RecordError,
    RecordStore,
};
use super::reference::normalized_name;

/// An image the runtime has (CRI `Image`): its ID, tags and digests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PresentImage {
    /// Image ID (the imageRef).
    pub id: String,
    /// `repoTags`.
    pub repo_tags: Vec<String>,
    /// `repoDigests`.
    pub repo_digests: Vec<String>,
    /// Size in bytes (compressed content, as the CRI reports it).
    pub size: u64,
}

/// A record keeps at most this many secrets before new ones stop being merged in.
pub const MAX_SECRETS_PER_IMAGE: usize = 100;

/// The credentials a pod would pull with (resolved lazily, only when needed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCredentials {
    /// Its pull secrets' credentials (coordinates and `AuthConfigHash`).
    pub secrets: Vec<ImagePullSecret>,
    /// Its service account, when a provider used its token.
    pub service_account: Option<ImagePullServiceAccount>,
}

/// `result` label of `kubelet_imagemanager_image_mustpull_checks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CheckLabels {
    /// `credentialPolicyAllowed|credentialRecordFound|mustAuthenticate|error`.
    pub result: CheckResult,
}

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, prometheus_client::encoding::EncodeLabelValue)]
pub enum CheckResult {
    /// The policy needs no verification.
    #[allow(non_camel_case_types)]
    credentialPolicyAllowed,
    /// The pod's credentials are on record.
    #[allow(non_camel_case_types)]
    credentialRecordFound,
    /// The pod must pull to prove access.
    #[allow(non_camel_case_types)]
    mustAuthenticate,
    /// Records could not be read (fail safe: pull).
    #[allow(non_camel_case_types)]
    error,
}

/// What MustAttemptImagePull concluded about a pod using an image: use it as it is, or
/// pull it (to prove access, or because it is not there), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullVerdict {
    /// Use it: the verification policy does not verify this image (preloaded or
    /// allowlisted) — `credentialPolicyAllowed`.
    PolicyAllowed,
    /// Use it: the pod's credentials (or access for every pod) are on the record —
    /// `credentialRecordFound`.
    RecordFound,
    /// Pull: the image is not on the node (no image ref); nothing was checked or counted.
    NotPresent,
    /// Pull: nothing on record proves this pod may use it — `mustAuthenticate`.
    MustAuthenticate,
    /// Pull, failing safe: the records could not be read, or the pod's credentials could not
    /// be resolved (the reason, when there is one the pod should see) — `error`.
    Error(Option<String>),
}

impl PullVerdict {
    /// Whether the pod must pull before it may use the image.
    pub fn must_pull(&self) -> bool {
        !matches!(self, Self::PolicyAllowed | Self::RecordFound)
    }

    /// The `result` label of `kubelet_imagemanager_image_pull_checks_total` (none when
    /// nothing was checked).
    pub fn check_result(&self) -> Option<CheckResult> {
        Some(match self {
            Self::PolicyAllowed => CheckResult::credentialPolicyAllowed,
            Self::RecordFound => CheckResult::credentialRecordFound,
            Self::NotPresent => return None,
            Self::MustAuthenticate => CheckResult::mustAuthenticate,
            Self::Error(_) => CheckResult::error,
        })
    }

    /// The error the pod should see, if the check failed with one.
    pub fn error(&self) -> Option<&str> {
        match self {
            Self::Error(e) => e.as_deref(),
            _ => None,
        }
    }
}

/// A pull intent or record could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PullRecordError {
    /// The intent file (kubelet: `failed to record image pull intent`).
    #[error("failed to record image pull intent: {0}")]
    Intent(RecordError),
    /// The image name does not parse.
    #[error(transparent)]
    Reference(#[from] super::reference::ReferenceError),
    /// The pulled record (or its lock).
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// Pull records and the policy.
pub struct PullManager {
    store: CachedRecords,
    policy: PolicyEnforcer,
    intents: Mutex<HashMap<String, usize>>,
    checks: Family<CheckLabels, Counter>,
    now: fn() -> String,
}

impl std::fmt::Debug for PullManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullManager").field("policy", &self.policy).finish_non_exhaustive()
    }
}

/// Now as RFC 3339 seconds (`lastUpdatedTime`).
pub fn rfc3339_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn sort_key_secret(s: &ImagePullSecret) -> (String, String, String) {
    (s.namespace.clone(), s.name.clone(), s.uid.clone())
}

/// `pulledRecordMergeNewCreds` for one image entry; returns whether anything changed.
pub fn merge_credentials(
    mapping: &mut super::mapping::CredentialMapping,
    image: &str,
    new: &ImagePullCredentials,
) -> bool {
    if new.kubernetes_secrets.is_empty() && new.kubernetes_service_accounts.is_empty() && !new.node_pods_accessible {
        return false;
    }
    let Some(entry) = mapping.get_mut(image) else {
        mapping.insert(image.to_owned(), new.clone());
        return true;
    };
    if entry.node_pods_accessible {
        return false;
    }
    if new.node_pods_accessible {
        *entry = ImagePullCredentials { node_pods_accessible: true, ..Default::default() };
        return true;
    }
    if !new.kubernetes_secrets.is_empty() {
        let mut merged = entry.kubernetes_secrets.clone();
        for s in &new.kubernetes_secrets {
            match merged.iter_mut().find(|m| m.uid == s.uid && m.namespace == s.namespace && m.name == s.name) {
                Some(m) => m.credential_hash = s.credential_hash.clone(),
                None => merged.push(s.clone()),
            }
        }
        merged.sort_by_key(sort_key_secret);
        let mut before = entry.kubernetes_secrets.clone();
        before.sort_by_key(sort_key_secret);
        if merged == before {
            return false;
        }
        entry.kubernetes_secrets = merged;
        return true;
    }
    let mut merged = entry.kubernetes_service_accounts.clone();
    for sa in &new.kubernetes_service_accounts {
        if !merged.contains(sa) {
            merged.push(sa.clone());
        }
    }
    merged.sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
    if merged.len() == entry.kubernetes_service_accounts.len() {
        return false;
    }
    entry.kubernetes_service_accounts = merged;
    true
}

/// The pod's credentials could not be resolved for a record check: the check fails, with
/// this as the container's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialsUnavailable(pub String);

impl PullManager {
    /// A manager over `store` enforcing `policy`.
    pub fn new(store: RecordStore, policy: PolicyEnforcer) -> Self {
        let store = CachedRecords::new(store, MAX_INTENTS, MAX_PULLED);
        Self { store, policy, intents: Mutex::new(HashMap::new()), checks: Family::default(), now: rfc3339_now }
    }

    /// `kubelet_imagemanager_image_mustpull_checks_total`, to register.
    pub fn checks_metric(&self) -> Family<CheckLabels, Counter> {
        self.checks.clone()
    }

    /// Registers the pull manager's metrics (pullmanager/metrics.go): the must-pull checks
    /// and the on-disk record counts, counted now.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        use prometheus_client::metrics::gauge::Gauge;
        registry.register(
            "kubelet_imagemanager_image_mustpull_checks",
            "Counter for how many times kubelet checked whether credentials need to be re-verified to access an image",
            self.checks.clone(),
        );
        let (intents, pulled) = self.store.store().count_files();
        let g_intents: Gauge = Gauge::default();
        g_intents.set(i64::try_from(intents).unwrap_or(i64::MAX));
        let g_pulled: Gauge = Gauge::default();
        g_pulled.set(i64::try_from(pulled).unwrap_or(i64::MAX));
        registry.register(
            "kubelet_imagemanager_ondisk_pullintents",
            "Number of ImagePullIntents stored on disk.",
            g_intents,
        );
        let (intents_pct, pulled_pct) = self.store.usage_percent();
        let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        g.set(intents_pct);
        registry.register(
            "kubelet_imagemanager_inmemory_pullintents_usage_percent",
            "The ImagePullIntents in-memory cache usage in percent.",
            g,
        );
        let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        g.set(pulled_pct);
        registry.register(
            "kubelet_imagemanager_inmemory_pulledrecords_usage_percent",
            "The ImagePulledRecords in-memory cache usage in percent.",
            g,
        );
        registry.register(
            "kubelet_imagemanager_ondisk_pulledrecords",
            "Number of ImagePulledRecords stored on disk.",
            g_pulled,
        );
    }

    /// `RecordPullIntent`: on disk first, then the in-memory count.
    pub fn record_pull_intent(&self, image: &str) -> Result<(), PullRecordError> {
        let mut intents = self.intents.lock().unwrap_or_else(|p| p.into_inner());
        self.store.write_intent(image).map_err(PullRecordError::Intent)?;
        *intents.entry(image.to_owned()).or_default() += 1;
        Ok(())
    }

    fn decrement_intent(&self, image: &str) {
        let mut intents = self.intents.lock().unwrap_or_else(|p| p.into_inner());
        let count = intents.get(image).copied().unwrap_or(0);
        if count <= 1 {
            // The count goes only once the file is gone.
            if self.store.delete_intent(image).is_ok() {
                intents.remove(image);
            }
        } else {
            intents.insert(image.to_owned(), count - 1);
        }
    }

    /// `RecordImagePulled`: merges the credentials that pulled `image` into the record of
    /// `image_ref`; the intent is released only once the record is written.
    pub fn record_image_pulled(
        &self,
        image: &str,
        image_ref: &str,
        credentials: Option<&ImagePullCredentials>,
    ) -> Result<(), PullRecordError> {
        let name = normalized_name(image)?;
        let _lock = self.store.store().lock()?;
        // From disk: another node process may have merged into it. An unreadable record
        // counts as none and is replaced by a fresh one (kubelet: writePulledRecordIfChanged),
        // else it would stay corrupt and every later pod would have to pull again.
        let existing = match self.store.reread_pulled(image_ref) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(image_ref, error = %e, "unreadable pulled record, writing a fresh one");
                None
            }
        };
        let now = (self.now)();
        let (mut record, is_new) = match existing {
            Some(r) => (r, false),
            None => (
                ImagePulledRecord {
                    kind: "ImagePulledRecord".into(),
                    api_version: API_VERSION.into(),
                    last_updated_time: now.clone(),
                    image_ref: image_ref.into(),
                    credential_mapping: Default::default(),
                },
                true,
            ),
        };
        let changed = credentials.is_some_and(|c| merge_credentials(&mut record.credential_mapping, &name, c));
        if changed || is_new {
            record.last_updated_time = now;
            record.api_version = API_VERSION.into();
            self.store.write_pulled(&record)?;
        }
        self.decrement_intent(image);
        Ok(())
    }

    /// Start-up housekeeping (`initialize`): [`Self::start_up`], then [`Self::warm_up`].
    pub fn initialize(&self, images: &[PresentImage]) -> Vec<RecordError> {
        let mut errors = self.start_up(images);
        errors.extend(self.warm_up());
        errors
    }

    /// What must happen before the first decision (at most [`super::MAX_INTENTS`] files,
    /// whatever the record count): an intent whose image is now present (one of `images`'
    /// repo tags or digests) becomes a record with no credentials — so the image counts as
    /// node-pulled and must be verified — and the intent goes. Intents of absent images
    /// stay. Returns the listing errors (logged by the caller; the rest proceeds).
    pub fn start_up(&self, images: &[PresentImage]) -> Vec<RecordError> {
        let (intents, errors) = self.store.list_intents();
        for intent in intents {
            let present =
                images.iter().find(|i| i.repo_tags.contains(&intent.image) || i.repo_digests.contains(&intent.image));
            if let Some(image) = present {
                if let Err(e) = self.record_image_pulled(&intent.image, &image.id, None) {
                    tracing::warn!(image = %intent.image, error = %e, "failed to record a pulled image at start-up");
                    continue;
                }
                // record_image_pulled released an in-memory count that start-up never took.
                if let Err(e) = self.store.delete_intent(&intent.image) {
                    tracing::warn!(image = %intent.image, error = %e, "failed to remove a resolved pull intent");
                }
            } else if intent.api_version != API_VERSION
                && let Err(e) = self.store.write_intent(&intent.image)
            {
                tracing::warn!(image = %intent.image, error = %e, "failed to migrate a pull intent");
            }
        }
        errors
    }

    /// What may run beside decisions (it changes none): tmp files of interrupted writes
    /// removed, records of older versions rewritten (they read as they are meanwhile), and
    /// the in-memory layer warmed by a full listing (misses read the disk meanwhile).
    /// Returns the listing errors.
    pub fn warm_up(&self) -> Vec<RecordError> {
        // Beyond upstream (whose tmp name is fixed and so overwritten next time): tmp files
        // of writers killed mid-write are removed.
        let stale = self.store.store().remove_stale_tmp();
        if stale > 0 {
            tracing::info!(files = stale, "tmp files of interrupted record writes removed");
        }
        self.migrate_records()
    }

    /// Rewrites records of an older version (v1alpha1) as the current one, keeping their
    /// `lastUpdatedTime` (GC reads it). The listing also warms the in-memory layer.
    fn migrate_records(&self) -> Vec<RecordError> {
        let (records, errors) = self.store.list_pulled();
        let stale: Vec<ImagePulledRecord> = records.into_iter().filter(|r| r.api_version != API_VERSION).collect();
        if stale.is_empty() {
            return errors;
        }
        let Ok(_lock) = self.store.store().lock() else { return errors };
        for listed in stale {
            // Read again under the lock: a pull may have merged into it since the listing
            // (and rewritten it in the current version); that write must not be undone.
            let mut record = match self.store.reread_pulled(&listed.image_ref) {
                Ok(Some(r)) if r.api_version != API_VERSION => r,
                _ => continue,
            };
            record.api_version = API_VERSION.into();
            if let Err(e) = self.store.write_pulled(&record) {
                tracing::warn!(image_ref = %record.image_ref, error = %e, "failed to migrate a pulled record");
            }
        }
        errors
    }

    /// `PruneUnknownRecords`: deletes records last updated before `until` (RFC 3339) whose
    /// image ID the runtime no longer knows; returns how many went.
    pub fn prune_unknown_records(&self, known_ids: &[String], until: &str) -> usize {
        let _guard = self.intents.lock().unwrap_or_else(|p| p.into_inner());
        let (records, errors) = self.store.list_pulled();
        for e in errors {
            tracing::warn!(error = %e, "unreadable pulled record while pruning");
        }
        let mut pruned = 0;
        for r in records {
            if r.last_updated_time.as_str() < until
                && !known_ids.contains(&r.image_ref)
                && self.store.delete_pulled(&r.image_ref).is_ok()
            {
                pruned += 1;
            }
        }
        pruned
    }

    /// `RecordImagePullFailed`.
    pub fn record_image_pull_failed(&self, image: &str) {
        self.decrement_intent(image);
    }

    /// Takes the cross-process lock and re-reads the record for a merge; `None` (skip the
    /// merge) when either fails or the record is gone.
    fn relock(&self, image_ref: &str) -> Option<(std::fs::File, ImagePulledRecord)> {
        let lock = self.store.store().lock().ok()?;
        let record = self.store.reread_pulled(image_ref).ok()??;
        Some((lock, record))
    }

    fn pulled_by_node(
        &self,
        image: &str,
        image_ref: &str,
    ) -> Result<(bool, Option<std::sync::Arc<ImagePulledRecord>>), RecordError> {
        let record = self.store.get_pulled(image_ref)?;
        if record.is_some() {
            return Ok((true, record));
        }
        if self.intents.lock().unwrap_or_else(|p| p.into_inner()).get(image).is_some_and(|c| *c > 0) {
            return Ok((true, None));
        }
        Ok((self.store.intent_exists(image)?, None))
    }

    /// `MustAttemptImagePull`: whether the pod must pull `image` (present as `image_ref`,
    /// empty when absent) to prove it may use it. `pod_credentials` is called only when the
    /// records cannot decide alone; its error fails the check (and the container).
    pub fn must_attempt_image_pull(
        &self,
        image: &str,
        image_ref: &str,
        pod_credentials: impl FnOnce() -> Result<PodCredentials, CredentialsUnavailable>,
    ) -> PullVerdict {
        if image_ref.is_empty() {
            return PullVerdict::NotPresent;
        }
        let verdict = self.decide(image, image_ref, pod_credentials, true);
        if let Some(result) = verdict.check_result() {
            self.checks.get_or_create(&CheckLabels { result }).inc();
        }
        verdict
    }

    /// [`PullManager::must_attempt_image_pull`] for an explanation: the same decision and
    /// how it was reached, with nothing written (a matching secret's new hash is not
    /// remembered) and nothing counted. `image_ref` must not be empty.
    pub fn explain_check(
        &self,
        image: &str,
        image_ref: &str,
        pod_credentials: impl FnOnce() -> Result<PodCredentials, CredentialsUnavailable>,
    ) -> PullVerdict {
        self.decide(image, image_ref, pod_credentials, false)
    }

    /// The pulled record of `image_ref`, if any.
    pub fn pulled_record(&self, image_ref: &str) -> Result<Option<ImagePulledRecord>, RecordError> {
        Ok(self.store.get_pulled(image_ref)?.map(|r| (*r).clone()))
    }

    /// The verification policy in force.
    pub fn policy(&self) -> &PolicyEnforcer {
        &self.policy
    }

    fn decide(
        &self,
        image: &str,
        image_ref: &str,
        pod_credentials: impl FnOnce() -> Result<PodCredentials, CredentialsUnavailable>,
        update: bool,
    ) -> PullVerdict {
        let (pulled_by_node, record) = match self.pulled_by_node(image, image_ref) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(image, error = %e, "Unable to access cache records about image pulls");
                return PullVerdict::Error(None);
            }
        };
        if !self.policy.requires_verification(image, pulled_by_node) {
            return PullVerdict::PolicyAllowed;
        }
        let Some(record) = record else { return PullVerdict::MustAuthenticate };
        let Ok(name) = normalized_name(image) else { return PullVerdict::Error(None) };
        let Some(entry) = record.credential_mapping.get(&name) else {
            return PullVerdict::MustAuthenticate;
        };
        if entry.node_pods_accessible {
            return PullVerdict::RecordFound;
        }
        if entry.kubernetes_secrets.is_empty() && entry.kubernetes_service_accounts.is_empty() {
            return PullVerdict::MustAuthenticate;
        }
        let pod = match pod_credentials() {
            Ok(p) => p,
            Err(e) => return PullVerdict::Error(Some(e.to_string())),
        };
        let room = entry.kubernetes_secrets.len() < MAX_SECRETS_PER_IMAGE;
        for secret in &pod.secrets {
            for recorded in &entry.kubernetes_secrets {
                let hashes = !recorded.credential_hash.is_empty() && recorded.credential_hash == secret.credential_hash;
                let coords = recorded.uid == secret.uid
                    && recorded.namespace == secret.namespace
                    && recorded.name == secret.name;
                if hashes || (coords && room) {
                    if !coords || !hashes {
                        // Remember this secret (or its new hash) so the next check matches
                        // directly, while the record has room.
                        let add =
                            ImagePullCredentials { kubernetes_secrets: vec![secret.clone()], ..Default::default() };
                        if update
                            && room
                            && let Some((_lock, mut fresh)) = self.relock(image_ref)
                            && merge_credentials(&mut fresh.credential_mapping, &name, &add)
                        {
                            fresh.last_updated_time = (self.now)();
                            if let Err(e) = self.store.write_pulled(&fresh) {
                                tracing::warn!(image, error = %e, "failed to update the pulled record");
                            }
                        }
                    }
                    return PullVerdict::RecordFound;
                }
            }
        }
        if let Some(sa) = &pod.service_account
            && entry.kubernetes_service_accounts.contains(sa)
        {
            return PullVerdict::RecordFound;
        }
        PullVerdict::MustAuthenticate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::policy::VerificationPolicy;

    /// The tables below state (must pull, error shown) pairs.
    impl PartialEq<(bool, Option<String>)> for PullVerdict {
        fn eq(&self, (must, error): &(bool, Option<String>)) -> bool {
            self.must_pull() == *must && self.error() == error.as_deref()
        }
    }

    fn secret(name: &str, hash: &str) -> ImagePullSecret {
        ImagePullSecret {
            uid: format!("{name}-uid"),
            namespace: "ns".into(),
            name: name.into(),
            credential_hash: hash.into(),
        }
    }

    fn sa(name: &str, uid: &str) -> ImagePullServiceAccount {
        ImagePullServiceAccount { uid: uid.into(), namespace: "ns".into(), name: name.into() }
    }

    fn manager(policy: VerificationPolicy) -> (tempfile::TempDir, PullManager) {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path()).unwrap();
        let mut m = PullManager::new(store, PolicyEnforcer::new(policy, &[]).unwrap());
        m.now = || "2026-01-01T00:00:00Z".into();
        (dir, m)
    }

    fn creds(secrets: Vec<ImagePullSecret>, sas: Vec<ImagePullServiceAccount>) -> ImagePullCredentials {
        ImagePullCredentials {
            kubernetes_secrets: secrets,
            kubernetes_service_accounts: sas,
            node_pods_accessible: false,
        }
    }

    #[test]
    fn merge_rules() {
        let mut m = crate::images::mapping::CredentialMapping::new();
        assert!(!merge_credentials(&mut m, "i", &ImagePullCredentials::default()), "nothing to merge");
        assert!(merge_credentials(&mut m, "i", &creds(vec![secret("b", "h1")], vec![])));
        assert!(merge_credentials(&mut m, "i", &creds(vec![secret("a", "h2")], vec![])));
        assert_eq!(m["i"].kubernetes_secrets.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b"], "sorted");
        assert!(!merge_credentials(&mut m, "i", &creds(vec![secret("a", "h2")], vec![])), "unchanged");
        assert!(merge_credentials(&mut m, "i", &creds(vec![secret("a", "h3")], vec![])), "new hash wins");
        assert_eq!(m["i"].kubernetes_secrets[0].credential_hash, "h3");
        assert!(merge_credentials(&mut m, "j", &creds(vec![], vec![sa("x", "1")])));
        assert!(merge_credentials(&mut m, "j", &creds(vec![], vec![sa("x", "2")])), "same name, other uid: distinct");
        assert_eq!(m["j"].kubernetes_service_accounts.len(), 2);
        let open = ImagePullCredentials { node_pods_accessible: true, ..Default::default() };
        assert!(merge_credentials(&mut m, "i", &open));
        assert_eq!(m["i"], open, "node-accessible drops the lists");
        assert!(!merge_credentials(&mut m, "i", &creds(vec![secret("z", "h")], vec![])), "and never changes again");
    }

    #[test]
    fn must_attempt_follows_records_and_policy() {
        let (_dir, m) = manager(VerificationPolicy::NeverVerifyPreloadedImages);
        let never =
            || -> Result<PodCredentials, CredentialsUnavailable> { panic!("credentials resolved without need") };
        assert_eq!(m.must_attempt_image_pull("a.io/app:1", "", never), (true, None), "absent");
        assert_eq!(
            m.must_attempt_image_pull("a.io/app:1", "sha256:1", never),
            (false, None),
            "preloaded, not verified"
        );
        m.record_pull_intent("a.io/app:1").unwrap();
        assert_eq!(m.must_attempt_image_pull("a.io/app:1", "sha256:1", never), (true, None), "intent only");
        m.record_image_pulled(
            "a.io/app:1",
            "sha256:1",
            Some(&creds(vec![secret("s", "h")], vec![sa("builder", "u1")])),
        )
        .unwrap();
        assert!(!m.store.intent_exists("a.io/app:1").unwrap(), "intent released after the record");
        let pod = |secrets: Vec<ImagePullSecret>, account: Option<ImagePullServiceAccount>| {
            move || Ok(PodCredentials { secrets, service_account: account })
        };
        assert_eq!(
            m.must_attempt_image_pull("a.io/app:1", "sha256:1", pod(vec![secret("s", "h")], None)),
            (false, None)
        );
        assert_eq!(
            m.must_attempt_image_pull("a.io/app:1", "sha256:1", pod(vec![], Some(sa("builder", "u1")))),
            (false, None)
        );
        assert_eq!(
            m.must_attempt_image_pull("a.io/app:1", "sha256:1", pod(vec![], Some(sa("builder", "recreated")))),
            (true, None),
            "a recreated service account (new UID) must pull"
        );
        assert_eq!(
            m.must_attempt_image_pull("a.io/app:1", "sha256:1", pod(vec![secret("other", "x")], None)),
            (true, None)
        );
        // same credential (hash) under another secret: allowed, and remembered
        assert_eq!(
            m.must_attempt_image_pull("a.io/app:1", "sha256:1", pod(vec![secret("copy", "h")], None)),
            (false, None)
        );
        let record = m.store.get_pulled("sha256:1").unwrap().unwrap();
        assert_eq!(record.credential_mapping["a.io/app"].kubernetes_secrets.len(), 2);
        // another repo name for the same image ID has no entry: must pull
        assert_eq!(m.must_attempt_image_pull("b.io/app:1", "sha256:1", never), (true, None));
        // credential resolution errors fail the check
        let failing = || Err(CredentialsUnavailable("secret ns/s not found".to_owned()));
        assert_eq!(
            m.must_attempt_image_pull("a.io/app:1", "sha256:1", failing),
            (true, Some("secret ns/s not found".into()))
        );
    }

    /// Policy × record state for a pod with no credentials: (policy, preloaded?, expected
    /// must-pull for an allowlisted image, for another image).
    #[test]
    fn policy_by_record_state_matrix() {
        use VerificationPolicy::*;
        let allow = ["a.io/base/*".to_owned()];
        let cases = [
            // preloaded (no intent, no record): only AlwaysVerify and the non-allowlisted
            // image under NeverVerifyAllowlistedImages are verified.
            (NeverVerify, true, false, false),
            (NeverVerifyPreloadedImages, true, false, false),
            (NeverVerifyAllowlistedImages, true, false, true),
            (AlwaysVerify, true, true, true),
            // pulled by the node with a secret the pod does not have.
            (NeverVerify, false, false, false),
            (NeverVerifyPreloadedImages, false, true, true),
            (NeverVerifyAllowlistedImages, false, false, true),
            (AlwaysVerify, false, true, true),
        ];
        for (policy, preloaded, allowlisted_expect, other_expect) in cases {
            let dir = tempfile::tempdir().unwrap();
            let m =
                PullManager::new(RecordStore::open(dir.path()).unwrap(), PolicyEnforcer::new(policy, &allow).unwrap());
            for (image, image_ref, expect) in
                [("a.io/base/os:1", "sha256:base", allowlisted_expect), ("a.io/app:1", "sha256:app", other_expect)]
            {
                if !preloaded {
                    m.record_pull_intent(image).unwrap();
                    m.record_image_pulled(image, image_ref, Some(&creds(vec![secret("s", "h")], vec![]))).unwrap();
                }
                let nobody = || Ok(PodCredentials::default());
                assert_eq!(
                    m.must_attempt_image_pull(image, image_ref, nobody),
                    (expect, None),
                    "{policy:?} preloaded={preloaded} {image}"
                );
            }
        }
    }

    #[test]
    fn an_explanation_decides_as_the_check_but_writes_and_counts_nothing() {
        let (_dir, m) = manager(VerificationPolicy::AlwaysVerify);
        m.record_image_pulled("a.io/x:1", "sha256:x", Some(&creds(vec![secret("s", "h1")], vec![]))).unwrap();
        let before = m.pulled_record("sha256:x").unwrap().unwrap();
        let rotated = || Ok(PodCredentials { secrets: vec![secret("s", "h2")], service_account: None });
        // Same coordinates, new hash: allowed, and the real check would remember the hash.
        assert_eq!(m.explain_check("a.io/x:1", "sha256:x", rotated), PullVerdict::RecordFound);
        assert_eq!(m.pulled_record("sha256:x").unwrap().unwrap(), before, "explain wrote nothing");
        let result = CheckResult::credentialRecordFound;
        assert_eq!(m.checks.get_or_create(&CheckLabels { result }).get(), 0, "explain counted nothing");
        assert!(!m.must_attempt_image_pull("a.io/x:1", "sha256:x", rotated).must_pull());
        let after = m.pulled_record("sha256:x").unwrap().unwrap();
        assert_ne!(after, before, "the real check remembered the new hash");
        let verdict = m.explain_check("a.io/x:1", "sha256:x", || Ok(PodCredentials::default()));
        assert!(verdict.must_pull());
        assert_eq!(verdict.check_result(), Some(CheckResult::mustAuthenticate));
    }

    #[test]
    fn the_hundred_secret_rule_and_empty_hashes() {
        let (_dir, m) = manager(VerificationPolicy::AlwaysVerify);
        let pod = |secrets: Vec<ImagePullSecret>| move || Ok(PodCredentials { secrets, service_account: None });
        // A recorded secret whose hash is empty matches by coordinates only (and its hash is
        // then learned).
        m.record_pull_intent("a.io/x:1").unwrap();
        m.record_image_pulled("a.io/x:1", "sha256:x", Some(&creds(vec![secret("s", "")], vec![]))).unwrap();
        assert_eq!(m.must_attempt_image_pull("a.io/x:1", "sha256:x", pod(vec![secret("t", "")])), (true, None));
        assert_eq!(m.must_attempt_image_pull("a.io/x:1", "sha256:x", pod(vec![secret("s", "new")])), (false, None));
        let r = m.store.get_pulled("sha256:x").unwrap().unwrap();
        assert_eq!(r.credential_mapping["a.io/x"].kubernetes_secrets[0].credential_hash, "new", "rotated hash stored");

        // Fill a record to the limit: rotated secrets (same coordinates, new hash) no longer
        // match, new secrets with a known hash still do but are not added.
        let many: Vec<ImagePullSecret> =
            (0..MAX_SECRETS_PER_IMAGE).map(|i| secret(&format!("s{i:03}"), &format!("h{i}"))).collect();
        m.record_pull_intent("a.io/y:1").unwrap();
        m.record_image_pulled("a.io/y:1", "sha256:y", Some(&creds(many, vec![]))).unwrap();
        assert_eq!(
            m.must_attempt_image_pull("a.io/y:1", "sha256:y", pod(vec![secret("s007", "rotated")])),
            (true, None),
            "coordinates alone do not match a full record"
        );
        assert_eq!(m.must_attempt_image_pull("a.io/y:1", "sha256:y", pod(vec![secret("copy", "h7")])), (false, None));
        let r = m.store.get_pulled("sha256:y").unwrap().unwrap();
        assert_eq!(r.credential_mapping["a.io/y"].kubernetes_secrets.len(), MAX_SECRETS_PER_IMAGE, "nothing added");

        // An entry with neither secrets nor service accounts: verify.
        m.record_pull_intent("a.io/z:1").unwrap();
        m.record_image_pulled("a.io/z:1", "sha256:z", None).unwrap();
        let never = || -> Result<PodCredentials, CredentialsUnavailable> { panic!("not needed") };
        assert_eq!(m.must_attempt_image_pull("a.io/z:1", "sha256:z", never), (true, None));
    }

    #[test]
    fn start_up_resolves_intents_of_present_images_and_gc_prunes_unknown_records() {
        let (_dir, m) = manager(VerificationPolicy::NeverVerifyPreloadedImages);
        m.store.write_intent("a.io/app:1").unwrap();
        m.store.write_intent("a.io/gone:1").unwrap();
        let present = [PresentImage {
            id: "sha256:aa".into(),
            repo_tags: vec!["a.io/app:1".into()],
            repo_digests: vec![],
            size: 0,
        }];
        assert!(m.initialize(&present).is_empty());
        assert!(!m.store.intent_exists("a.io/app:1").unwrap());
        assert!(m.store.intent_exists("a.io/gone:1").unwrap(), "absent images keep their intent");
        let record = m.store.get_pulled("sha256:aa").unwrap().unwrap();
        assert!(record.credential_mapping.is_empty(), "no credentials on record: verification forced");
        let never = || -> Result<PodCredentials, CredentialsUnavailable> { panic!("not needed") };
        assert_eq!(m.must_attempt_image_pull("a.io/app:1", "sha256:aa", never), (true, None));
        // GC: only records older than `until` and unknown to the runtime go
        m.record_pull_intent("b.io/x").unwrap();
        m.record_image_pulled("b.io/x", "sha256:bb", None).unwrap();
        assert_eq!(m.prune_unknown_records(&["sha256:bb".into()], "2026-01-01T00:00:01Z"), 1);
        assert!(m.store.get_pulled("sha256:aa").unwrap().is_none());
        assert!(m.store.get_pulled("sha256:bb").unwrap().is_some());
        assert_eq!(m.prune_unknown_records(&[], "2026-01-01T00:00:00Z"), 0, "not strictly before");
    }

    /// A v1alpha1 record of `sha256:old` (`a.io/app`, node-accessible) under `root`, and
    /// `extra` files `(directory, key, content)`: the record's path and the extras' paths.
    fn old_version_files(
        root: &std::path::Path,
        extra: &[(&str, &str, &str)],
    ) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
        RecordStore::open(root).unwrap();
        let base = root.join("image_manager");
        let rec_path = base.join("pulled").join(super::super::records::file_name("sha256:old"));
        std::fs::write(&rec_path, OLD_RECORD).unwrap();
        let extras = extra
            .iter()
            .map(|(dir, key, content)| {
                let path = base.join(dir).join(super::super::records::file_name(key));
                std::fs::write(&path, content).unwrap();
                path
            })
            .collect();
        (rec_path, extras)
    }

    const OLD_RECORD: &str = r#"{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2025-05-01T10:00:00Z","imageRef":"sha256:old","credentialMapping":{"a.io/app":{"nodePodsAccessible":true}}}"#;

    fn always_verify(root: &std::path::Path) -> PullManager {
        PullManager::new(
            RecordStore::open(root).unwrap(),
            PolicyEnforcer::new(VerificationPolicy::AlwaysVerify, &[]).unwrap(),
        )
    }

    #[test]
    fn decisions_before_the_warm_up_read_records_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let (rec_path, _) = old_version_files(dir.path(), &[("pulled", "sha256:bad", "{trunc")]);
        let m = always_verify(dir.path());
        // Start-up reads no pulled record: the broken one is not even seen.
        assert!(m.start_up(&[]).is_empty());
        let never = || -> Result<PodCredentials, CredentialsUnavailable> { panic!("not needed") };
        assert_eq!(m.must_attempt_image_pull("a.io/app:1", "sha256:old", never), (false, None), "read on demand");
        assert!(std::fs::read_to_string(&rec_path).unwrap().contains("v1alpha1"), "not migrated yet");
        let errors = m.warm_up();
        assert_eq!(errors.len(), 1, "the warm-up lists every record: {errors:?}");
        assert_eq!(errors[0].file_kind(), "pulled record");
        assert!(std::fs::read_to_string(&rec_path).unwrap().contains("v1beta1"), "migrated");
        assert_eq!(m.must_attempt_image_pull("a.io/app:1", "sha256:old", never), (false, None), "same decision");
    }

    #[test]
    fn start_up_migrates_older_versions_keeping_their_time() {
        let dir = tempfile::tempdir().unwrap();
        let old_intent =
            r#"{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1alpha1","image":"a.io/app:2"}"#;
        let (rec_path, written) = old_version_files(dir.path(), &[("pulling", "a.io/app:2", old_intent)]);
        let intent_path = written[0].clone();
        let m = always_verify(dir.path());
        assert!(m.initialize(&[]).is_empty());
        assert_eq!(
            std::fs::read_to_string(&rec_path).unwrap(),
            OLD_RECORD.replace("v1alpha1", "v1beta1") + "\n",
            "same bytes but the version"
        );
        assert_eq!(std::fs::read_to_string(&intent_path).unwrap(), old_intent.replace("v1alpha1", "v1beta1") + "\n");
        let never = || -> Result<PodCredentials, CredentialsUnavailable> { panic!("not needed") };
        assert_eq!(m.must_attempt_image_pull("a.io/app:1", "sha256:old", never), (false, None));
    }

    #[test]
    fn node_accessible_pulls_and_unreadable_records_fail_safe() {
        let (dir, m) = manager(VerificationPolicy::AlwaysVerify);
        m.record_pull_intent("a.io/open").unwrap();
        let open = ImagePullCredentials { node_pods_accessible: true, ..Default::default() };
        m.record_image_pulled("a.io/open", "sha256:2", Some(&open)).unwrap();
        let never = || -> Result<PodCredentials, CredentialsUnavailable> { panic!("not needed") };
        assert_eq!(m.must_attempt_image_pull("a.io/open", "sha256:2", never), (false, None));
        std::fs::write(dir.path().join("image_manager/pulled").join(super::super::records::file_name("sha256:2")), "{")
            .unwrap();
        // The in-memory layer still holds the good record; a restarted node reads the file.
        assert_eq!(m.must_attempt_image_pull("a.io/open", "sha256:2", never), (false, None));
        let mut m = PullManager::new(
            RecordStore::open(dir.path()).unwrap(),
            PolicyEnforcer::new(VerificationPolicy::AlwaysVerify, &[]).unwrap(),
        );
        m.now = || "2026-01-01T00:00:00Z".into();
        assert_eq!(m.must_attempt_image_pull("a.io/open", "sha256:2", never), (true, None), "fail safe");
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("kubelet_imagemanager_image_mustpull_checks", "checks", m.checks_metric());
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("kubelet_imagemanager_image_mustpull_checks_total{result=\"error\"} 1"), "{text}");
    }
}
