//! `--token-review-kubeconfig`: before granting, ask the cluster that issued a pod token
//! whether it still authenticates it. A signature only proves the token was issued; the
//! issuing API server's TokenReview also checks that the objects it is bound to (pod,
//! secret, node) still exist with the same UID (kube-apiserver: the service-account
//! authenticator's bound-object validation), so a token stolen from a deleted pod stops
//! working at once instead of at its expiry.
//!
//! Answers are cached for a short time per token (keyed by its SHA-256, never by the token
//! itself), concurrent reviews of one token are made once, the number of reviews in flight
//! is bounded, and every failure to get an answer fails closed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use thiserror::Error;
use tokio::sync::{OnceCell, Semaphore};

/// How long past its deletionTimestamp a pod still counts (kube-apiserver's leeway for the
/// object a token is bound to).
const DELETION_LEEWAY_SECONDS: i64 = 60;

/// How long an answer (authenticated or not) is reused.
pub const REVIEW_CACHE_TTL: Duration = Duration::from_secs(10);
/// How long past the review cache a deletion is remembered: an answer asked just before
/// the deletion may be cached a little after it.
const DELETION_MARGIN: Duration = Duration::from_secs(REVIEW_TIMEOUT.as_secs() + 1);
/// Cached answers, at most (the cache is emptied when full of fresh answers).
const MAX_CACHED: usize = 4096;
/// Reviews in flight to one cluster, at most.
const MAX_IN_FLIGHT: usize = 64;
/// One review, waiting for a slot included, takes at most this long.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// A watch that says nothing for this long is dead. It must be longer than the API
/// server's bookmark interval (upstream's cacher: about a minute, which kube's watcher asks
/// for), or every idle watch would be cut and re-watched on a back-off, with what it missed
/// meanwhile — a revocation — passing until it came back.
pub const WATCH_IDLE_TIMEOUT: Duration = Duration::from_secs(150);

/// A review that did not grant.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReviewError {
    /// The cluster answered: the token does not authenticate (any more), or as someone else.
    #[error("TokenReview: {0}")]
    Rejected(String),
    /// No answer (unreachable, timed out, not allowed to review): fail closed.
    #[error("TokenReview unavailable: {0}")]
    Unavailable(String),
}

/// The kubeconfig could not give a client.
#[derive(Debug, Error)]
#[error("--token-review-kubeconfig {path}: {reason}")]
pub struct ReviewConfigError {
    /// The kubeconfig.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

/// What the cluster said about one token.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Authenticated { username: String, uid: String, audiences: Vec<String> },
    NotAuthenticated(String),
}

#[derive(Debug)]
struct Cached {
    answer: Answer,
    at: Instant,
}

type Slot = Arc<OnceCell<Cached>>;

/// TokenReview against one issuer's cluster, through a kubeconfig.
pub struct TokenReviewer {
    issuer: String,
    audience: String,
    client: kube::Client,
    /// The client of the revocation and deletion watches: no 5 s read timeout (an idle
    /// watch is quiet for a bookmark interval), [`WATCH_IDLE_TIMEOUT`] instead.
    watch_client: kube::Client,
    cache: Mutex<HashMap<[u8; 32], Slot>>,
    in_flight: Semaphore,
    revoked: crate::revocations::Revocations,
    deleted: crate::revocations::Deletions,
}

impl std::fmt::Debug for TokenReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewer").field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

/// Reads and checks a kubeconfig without building a client (no runtime needed): the
/// current context must name a cluster and a user.
pub fn check_kubeconfig(path: &Path) -> Result<Kubeconfig, String> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let context_name = kubeconfig.current_context.clone().ok_or("current-context: not set")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| format!("current-context {context_name:?}: no such context"))?;
    if !kubeconfig.clusters.iter().any(|c| c.name == context.cluster) {
        return Err(format!("contexts[{context_name:?}].cluster {:?}: no such cluster", context.cluster));
    }
    if let Some(user) = &context.user
        && !kubeconfig.auth_infos.iter().any(|u| &u.name == user)
    {
        return Err(format!("contexts[{context_name:?}].user {user:?}: no such user"));
    }
    Ok(kubeconfig)
}

impl TokenReviewer {
    /// A reviewer for `issuer`'s tokens with `audience`, through the kubeconfig at `path`
    /// (its current context). Needs a tokio runtime.
    pub async fn from_kubeconfig(issuer: &str, audience: &str, path: &Path) -> Result<Self, ReviewConfigError> {
        let err = |reason: String| ReviewConfigError { path: path.display().to_string(), reason };
        let kubeconfig = check_kubeconfig(path).map_err(err)?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| err(e.to_string()))?;
        config.connect_timeout = Some(REVIEW_TIMEOUT);
        config.write_timeout = Some(REVIEW_TIMEOUT);
        let mut watch_config = config.clone();
        watch_config.read_timeout = Some(WATCH_IDLE_TIMEOUT);
        config.read_timeout = Some(REVIEW_TIMEOUT);
        let client = kube::Client::try_from(config).map_err(|e| err(e.to_string()))?;
        let watch_client = kube::Client::try_from(watch_config).map_err(|e| err(e.to_string()))?;
        Ok(Self {
            issuer: issuer.into(),
            audience: audience.into(),
            client,
            watch_client,
            cache: Mutex::new(HashMap::new()),
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
            revoked: Default::default(),
            deleted: Default::default(),
        })
    }

    /// The issuer whose tokens this reviews.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Whether the issuing cluster revoked `jti` (as far as its watch has told).
    pub fn is_revoked(&self, jti: &str) -> bool {
        self.revoked.contains(jti)
    }

    /// Whether any of `uids` (a credential's pod, service account, node) was deleted while
    /// a review of it could still be cached.
    pub fn names_deleted<'a>(&self, uids: impl IntoIterator<Item = &'a str>) -> bool {
        self.deleted.any_deleted(uids, REVIEW_CACHE_TTL + DELETION_MARGIN)
    }

    /// Whether the issuing cluster is known to have no node named `name` (its node watch
    /// listed the nodes and `name` is not, or no longer, among them).
    pub fn node_absent(&self, name: &str) -> bool {
        self.deleted.node_absent(name)
    }

    /// Follows the issuing cluster's revocations and deletions until the task is dropped.
    /// The kubeconfig's user needs `list` and `watch` on `revokedtokens.revocation.podpass.dev`,
    /// and on pods, service accounts and nodes for deletions to be pushed.
    pub async fn follow_revocations(self: std::sync::Arc<Self>) {
        let window = REVIEW_CACHE_TTL + DELETION_MARGIN;
        tokio::join!(
            self.revoked.follow(self.watch_client.clone(), &self.issuer),
            self.deleted.follow(self.watch_client.clone(), &self.issuer, window)
        );
    }

    /// Whether the cluster authenticates `token` as `username` with `uid` for this
    /// reviewer's audience. `Ok(true)` when the answer came from the cache; with `cached`
    /// false the cluster is always asked (and the answer not kept).
    pub async fn review(&self, token: &str, username: &str, uid: &str, cached: bool) -> Result<bool, ReviewError> {
        if !cached {
            let answer = tokio::time::timeout(REVIEW_TIMEOUT, self.ask(token))
                .await
                .map_err(|_| ReviewError::Unavailable(format!("no answer within {REVIEW_TIMEOUT:?}")))??;
            return self.compare(&answer, username, uid).map(|()| false);
        }
        self.decide(token.as_bytes(), || self.ask(token), username, uid).await
    }

    /// Whether the service account `namespace/name` still exists with `uid` (an exchange
    /// token is bound to the service account and its UID, as a pod token is to its pod:
    /// deleting or re-creating the service account ends it). `Ok(true)` when the answer
    /// came from the cache. The kubeconfig's user needs `get` on `serviceaccounts`.
    pub async fn check_service_account(&self, namespace: &str, name: &str, uid: &str) -> Result<bool, ReviewError> {
        let username = format!("system:serviceaccount:{namespace}:{name}");
        // A key space of its own: no token is `\0serviceaccount\0…`.
        let key = format!("\0serviceaccount\0{namespace}\0{name}");
        self.decide(key.as_bytes(), || self.ask_service_account(namespace, name), &username, uid).await
    }

    /// Whether the pod `namespace/name` still exists with `uid` and is not past its deletion
    /// (as kube-apiserver judges the pod a token is bound to: a deletionTimestamp more than
    /// 60 s old ends it). An exchange token made from a pod's token dies with the pod within
    /// the same cache window as the pod's token. `Ok(true)` when the answer came from the
    /// cache. The kubeconfig's user needs `get` on `pods`.
    pub async fn check_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<bool, ReviewError> {
        let who = format!("pod {namespace}/{name}");
        // A key space of its own, as for service accounts.
        let key = format!("\0pod\0{namespace}\0{name}");
        self.decide(key.as_bytes(), || self.ask_pod(namespace, name), &who, uid).await
    }

    /// The cached (or asked) answer under `key`, compared with the identity expected.
    async fn decide<F, Fut>(&self, key: &[u8], ask: F, username: &str, uid: &str) -> Result<bool, ReviewError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Cached, ReviewError>>,
    {
        let key: [u8; 32] = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key)
            .as_ref()
            .try_into()
            .map_err(|_| ReviewError::Unavailable("digest".into()))?;
        let slot = self.slot(key);
        let cached = slot.initialized();
        let answer = tokio::time::timeout(REVIEW_TIMEOUT, slot.get_or_try_init(ask))
            .await
            .map_err(|_| ReviewError::Unavailable(format!("no answer within {REVIEW_TIMEOUT:?}")))??;
        self.compare(answer, username, uid).map(|()| cached)
    }

    /// The cluster's answer compared with the identity expected.
    fn compare(&self, answer: &Cached, username: &str, uid: &str) -> Result<(), ReviewError> {
        match &answer.answer {
            Answer::NotAuthenticated(why) => Err(ReviewError::Rejected(why.clone())),
            Answer::Authenticated { username: u, uid: i, audiences } => {
                if u != username || (!i.is_empty() && i != uid) {
                    return Err(ReviewError::Rejected(format!(
                        "the cluster authenticates this token as {u:?} (uid {i:?}), not {username:?} (uid {uid:?})"
                    )));
                }
                if !audiences.is_empty() && !audiences.contains(&self.audience) {
                    return Err(ReviewError::Rejected(format!(
                        "the cluster authenticates this token for {audiences:?}, not {:?}",
                        self.audience
                    )));
                }
                Ok(())
            }
        }
    }

    /// The cache slot of `key`: the fresh (or in-flight) one, else a new one.
    fn slot(&self, key: [u8; 32]) -> Slot {
        let now = Instant::now();
        let fresh = |slot: &Slot| slot.get().is_none_or(|c| now.duration_since(c.at) < REVIEW_CACHE_TTL);
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = cache.get(&key).filter(|s| fresh(s)) {
            return Arc::clone(slot);
        }
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, s| fresh(s));
            if cache.len() >= MAX_CACHED {
                // Full of fresh answers: forgetting them costs only extra reviews.
                cache.clear();
            }
        }
        let slot = Slot::default();
        cache.insert(key, Arc::clone(&slot));
        slot
    }

    /// One GET of a service account: its UID, or why it is not there.
    async fn ask_service_account(&self, namespace: &str, name: &str) -> Result<Cached, ReviewError> {
        let _permit = self.in_flight.acquire().await.map_err(|e| ReviewError::Unavailable(e.to_string()))?;
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let found =
            api.get_opt(name).await.map_err(|e| unavailable(e, "get on serviceaccounts to check exchange tokens"))?;
        let answer = match found {
            Some(sa) if sa.metadata.deletion_timestamp.is_none() => Answer::Authenticated {
                username: format!("system:serviceaccount:{namespace}:{name}"),
                uid: sa.metadata.uid.unwrap_or_default(),
                audiences: Vec::new(),
            },
            _ => Answer::NotAuthenticated(format!("service account {namespace}/{name} no longer exists")),
        };
        Ok(Cached { answer, at: Instant::now() })
    }

    /// One GET of a pod: its UID, or why it no longer counts.
    async fn ask_pod(&self, namespace: &str, name: &str) -> Result<Cached, ReviewError> {
        let _permit = self.in_flight.acquire().await.map_err(|e| ReviewError::Unavailable(e.to_string()))?;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await.map_err(|e| unavailable(e, "get on pods to check exchange tokens"))?;
        let now = jiff::Timestamp::now().as_second();
        let past_deletion = |pod: &Pod| {
            pod.metadata.deletion_timestamp.as_ref().is_some_and(|t| t.0.as_second() < now - DELETION_LEEWAY_SECONDS)
        };
        let answer = match found {
            Some(pod) if !past_deletion(&pod) => Answer::Authenticated {
                username: format!("pod {namespace}/{name}"),
                uid: pod.metadata.uid.unwrap_or_default(),
                audiences: Vec::new(),
            },
            _ => Answer::NotAuthenticated(format!("pod {namespace}/{name} no longer exists")),
        };
        Ok(Cached { answer, at: Instant::now() })
    }

    /// Delegated authorization of a non-resource request (kube-scheduler's and
    /// kube-controller-manager's `/metrics`): the cluster's TokenReview authenticates
    /// `token` for the API server's own audiences, then its SubjectAccessReview says whether
    /// that user may `get` `path`. `Ok(None)`: not authenticated; `Ok(Some(allowed))`.
    pub async fn authorize_path(&self, token: &str, path: &str) -> Result<Option<bool>, ReviewError> {
        let _permit = self.in_flight.acquire().await.map_err(|e| ReviewError::Unavailable(e.to_string()))?;
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), audiences: None },
            ..TokenReview::default()
        };
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review),
        )
        .await
        .map_err(|_| ReviewError::Unavailable(format!("no answer within {REVIEW_TIMEOUT:?}")))?
        .map_err(|e| unavailable(e, "create on tokenreviews, e.g. the system:auth-delegator ClusterRole"))?;
        let status = answer.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else { return Ok(None) };
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &sar),
        )
        .await
        .map_err(|_| ReviewError::Unavailable(format!("no answer within {REVIEW_TIMEOUT:?}")))?
        .map_err(|e| unavailable(e, "create on subjectaccessreviews, e.g. the system:auth-delegator ClusterRole"))?;
        Ok(Some(answer.status.is_some_and(|s| s.allowed)))
    }

    /// One TokenReview round trip.
    async fn ask(&self, token: &str) -> Result<Cached, ReviewError> {
        let _permit = self.in_flight.acquire().await.map_err(|e| ReviewError::Unavailable(e.to_string()))?;
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), audiences: Some(vec![self.audience.clone()]) },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| unavailable(e, "create on tokenreviews, e.g. the system:auth-delegator ClusterRole"))?;
        let status = answer.status.unwrap_or_default();
        let answer = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Answer::Authenticated {
                username: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                audiences: status.audiences.unwrap_or_default(),
            },
            _ => Answer::NotAuthenticated(
                status.error.filter(|e| !e.is_empty()).unwrap_or_else(|| "the token is not authenticated".into()),
            ),
        };
        Ok(Cached { answer, at: Instant::now() })
    }
}

/// A call to the cluster that gave no answer; a refusal of the reviewer itself says what its
/// kubeconfig's user `needs`.
fn unavailable(e: kube::Error, needs: &str) -> ReviewError {
    ReviewError::Unavailable(match e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => {
            format!("HTTP {}: {} (the kubeconfig's user needs {needs})", s.code, s.message)
        }
        kube::Error::Api(s) => format!("HTTP {}: {}", s.code, s.message),
        other => other.to_string(),
    })
}
