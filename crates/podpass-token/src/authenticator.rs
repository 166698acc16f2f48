//! Verifying tokens: upstream's authenticator (pkg/serviceaccount/jwt.go
//! `AuthenticateToken`) followed by its validator (claims.go `validator.Validate`).
//!
//! Order, as upstream: "not mine" pre-check (shape and issuer, unverified) → JOSE parse →
//! key selection by `kid` → signature → issuer → audiences → times (60 s leeway) →
//! bound objects (service account, secret, pod, node) → `warnafter` staleness.
//! [`Authenticator::verify`] stops before the bound-object lookups (offline verification);
//! [`Authenticator::authenticate`] runs them through a [`BoundObjectLookup`].

use std::future::Future;

use serde::Deserialize;
use thiserror::Error;

use crate::claims::ObjectRef;
use crate::features::TokenFeatures;
use crate::jws;
use crate::keys::{Algorithm, SignatureError, VerificationKey};
use crate::user::{SERVICE_ACCOUNT_USERNAME_PREFIX, ServiceAccountInfo, UserInfo, make_username};
use crate::wire::{WireClaims, WireHeader, WireKubernetes, WireRef};

/// Tokens larger than this are refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;
/// go-jose `DefaultLeeway`, applied to `exp`, `nbf` and `iat`, and the deletion grace.
pub const LEEWAY_SECONDS: i64 = 60;

/// Audit annotation for tokens without an audience.
pub const LEGACY_TOKEN_ANNOTATION: &str = "authentication.k8s.io/legacy-token";
/// Audit annotation for tokens used after `warnafter`.
pub const STALE_TOKEN_ANNOTATION: &str = "authentication.k8s.io/stale-token";

/// Why a token is not one of this issuer's (upstream answers "not mine" without an error,
/// so another authenticator may claim it; the reason is kept for diagnostics).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum NotMine {
    /// Larger than [`MAX_TOKEN_BYTES`].
    #[error("token is larger than {MAX_TOKEN_BYTES} bytes")]
    TooLarge,
    /// JWS JSON serialisation, not compact.
    #[error("token is not in JWS compact form")]
    NotCompact,
    /// Not exactly three segments.
    #[error("token has {0} segments, a JWT has 3")]
    Segments(usize),
    /// Payload is not base64url JSON with a string `iss`.
    #[error("token payload is not base64url-encoded JSON")]
    Payload,
    /// `iss` is not an accepted issuer.
    #[error("token issuer {0:?} is not an accepted issuer")]
    Issuer(String),
    /// Header is not base64url JSON with an `alg`.
    #[error("token header is not base64url-encoded JSON with an alg")]
    Header,
    /// `alg` is not RS256/ES256/ES384/ES512 (this includes `none` and HS*).
    #[error("token algorithm {0:?} is not allowed (RS256, ES256, ES384, ES512)")]
    Algorithm(String),
    /// The header lists critical extensions.
    #[error("token header has critical extensions (crit), which are not supported")]
    Critical,
    /// Signature segment is not base64url.
    #[error("token signature is not base64url-encoded")]
    SignatureEncoding,
}

/// A token was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// Not a token of this issuer.
    #[error("token not recognized: {0}")]
    NotMine(NotMine),
    /// No verification key has the token's `kid` (upstream message).
    #[error("invalid signature, no keys found")]
    NoKeys,
    /// No candidate key verified the signature; one error per key tried.
    #[error("{}", aggregate(.0))]
    Signature(Vec<SignatureError>),
    /// Verified payload's issuer is not accepted.
    #[error("token issuer {0:?} is invalid")]
    Issuer(String),
    /// No overlap between the token's and the target audiences.
    #[error("token audiences {} is invalid for the target audiences {}", go_list(.token), go_list(.target))]
    Audience {
        /// Token audiences (implicit audiences for a token without `aud`).
        token: Vec<String>,
        /// Audiences the caller accepts.
        target: Vec<String>,
    },
    /// `exp` passed more than the leeway ago.
    #[error("service account token has expired")]
    Expired,
    /// `nbf` is more than the leeway ahead.
    #[error("service account token is not valid yet")]
    NotValidYet,
    /// `iat` is more than the leeway ahead.
    #[error("service account token is issued in the future")]
    IssuedInFuture,
    /// The claims are not a service-account claim set.
    #[error("service account token claims are malformed: {0}")]
    Malformed(String),
    /// The service account lookup failed; passed on as is (upstream).
    #[error("{0}")]
    ServiceAccountLookup(LookupError),
    /// The service account was deleted more than the grace ago.
    #[error("service account {namespace}/{name} has been deleted")]
    ServiceAccountDeleted {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A bound object is missing, or deleted more than the grace ago.
    #[error("service account token has been invalidated")]
    Invalidated,
    /// A referenced object's UID differs from the claim.
    #[error("{} UID ({actual}) does not match {}claim ({claim})", .kind.noun(), .kind.claim_prefix())]
    UidMismatch {
        /// Which object.
        kind: BoundKind,
        /// UID in the store.
        actual: String,
        /// UID in the token.
        claim: String,
    },
    /// Node-bound token while node-binding validation is off (upstream message).
    #[error(
        "token is bound to a Node object but the ServiceAccountTokenNodeBindingValidation feature gate is disabled"
    )]
    NodeBindingValidationDisabled,
    /// The token's `jti` was revoked (beyond upstream: a `RevokedToken` names it).
    #[error("service account token has been revoked (credential id JTI={jti})")]
    Revoked {
        /// The revoked `jti`.
        jti: String,
    },
    /// A legacy (Secret-based) token was refused (see [`crate::legacy`]).
    #[error("{0}")]
    Legacy(Box<crate::legacy::LegacyError>),
}

impl AuthError {
    /// True when the token is simply not this issuer's (another authenticator may try).
    pub fn is_not_mine(&self) -> bool {
        matches!(self, Self::NotMine(_))
    }
}

/// The kinds of object a token refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundKind {
    /// The service account.
    ServiceAccount,
    /// A bound secret.
    Secret,
    /// A bound pod.
    Pod,
    /// A bound node.
    Node,
}

impl BoundKind {
    /// The object's `kind` (`ServiceAccount`, `Secret`, `Pod`, `Node`), as metric labels
    /// carry it.
    pub fn kind(self) -> &'static str {
        match self {
            Self::ServiceAccount => "ServiceAccount",
            Self::Secret => "Secret",
            Self::Pod => "Pod",
            Self::Node => "Node",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Self::ServiceAccount => "service account",
            Self::Secret => "secret",
            Self::Pod => "pod",
            Self::Node => "node",
        }
    }

    fn claim_prefix(self) -> &'static str {
        match self {
            Self::ServiceAccount => "",
            Self::Secret => "service account secret ref ",
            Self::Pod => "service account pod ref ",
            Self::Node => "service account node ref ",
        }
    }
}

/// What the validator needs to know of a bound object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundObject {
    /// The object's UID.
    pub uid: String,
    /// `metadata.deletionTimestamp` in seconds since the epoch, if set.
    pub deletion_timestamp: Option<i64>,
}

/// A bound-object lookup failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LookupError {
    /// The object does not exist (Kubernetes NotFound message).
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// Plural resource, e.g. `serviceaccounts`.
        resource: &'static str,
        /// Object name.
        name: String,
    },
    /// Any other failure.
    #[error("{0}")]
    Other(String),
}

/// Reads the objects tokens are bound to; the control plane implements it over its store.
pub trait BoundObjectLookup: Sync {
    /// The service account `namespace/name`.
    fn service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<BoundObject, LookupError>> + Send;
    /// The secret `namespace/name`.
    fn secret(&self, namespace: &str, name: &str) -> impl Future<Output = Result<BoundObject, LookupError>> + Send;
    /// The pod `namespace/name`.
    fn pod(&self, namespace: &str, name: &str) -> impl Future<Output = Result<BoundObject, LookupError>> + Send;
    /// The node `name`.
    fn node(&self, name: &str) -> impl Future<Output = Result<BoundObject, LookupError>> + Send;
}

/// How a token with `warnafter` stands (feeds `serviceaccount_{stale,valid}_tokens_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The token has no `warnafter`.
    NotTracked,
    /// Before `warnafter`.
    Valid,
    /// Used this many seconds after `warnafter`.
    Stale(i64),
}

/// A token whose signature, issuer, audiences, times and claim shape checked out, with
/// what it claims (not yet checked against the store: see [`Authenticator::validate_bound`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    /// Who the token speaks for: service account, bound pod, node (pod-bound tokens carry
    /// their node only with `ServiceAccountTokenPodNodeInfo`), credential id.
    pub info: ServiceAccountInfo,
    /// The bound pod claim.
    pub pod: Option<ObjectRef>,
    /// The bound secret claim.
    pub secret: Option<ObjectRef>,
    /// The node claim of a node-bound token (a node claim without a pod claim).
    pub bound_node: Option<ObjectRef>,
    /// `exp`.
    pub expires_at: Option<i64>,
    /// `iat`.
    pub issued_at: Option<i64>,
    /// `warnafter`.
    pub warn_after: Option<i64>,
    /// Audiences both the token and the caller accept.
    pub audiences: Vec<String>,
    /// The token had no `aud` (legacy): counted by `serviceaccount_legacy_tokens_total`.
    pub legacy: bool,
}

/// A fully authenticated token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// Who the token speaks for.
    pub info: ServiceAccountInfo,
    /// The user info of [`Self::info`].
    pub user: UserInfo,
    /// Audiences both the token and the caller accept.
    pub audiences: Vec<String>,
    /// Audit annotations to add to the request's audit event.
    pub audit_annotations: Vec<(String, String)>,
    /// Staleness, for metrics.
    pub freshness: Freshness,
    /// The token had no `aud`.
    pub legacy: bool,
    /// The token's `exp` (legacy tokens have none): callers caching the result must not
    /// keep it past this.
    pub expires_at: Option<i64>,
    /// The bound object looked up and verified (a secret, a pod, or a node-bound token's
    /// node), for `serviceaccount_authentication_bound_object_verified_total`.
    pub verified_bound: Option<BoundKind>,
    /// A pod-bound token whose node reference was taken into the user info, for
    /// `serviceaccount_authentication_pod_node_ref_verified_total`.
    pub pod_node_ref: bool,
    /// The UID of the Secret the token is bound to (a secret-bound token), or that holds it
    /// (a legacy token); empty for others. A cache of results forgets the token when that
    /// Secret goes.
    pub secret_uid: String,
}

/// Verifies service-account tokens of a set of issuers against a set of keys.
#[derive(Debug, Clone)]
pub struct Authenticator {
    issuers: Vec<String>,
    keys: Vec<VerificationKey>,
    implicit_audiences: Vec<String>,
    features: TokenFeatures,
}

#[derive(Deserialize)]
struct IssuerOnly {
    // WARNING: read before the signature is checked; used only to decide "not mine".
    iss: String,
}

impl Authenticator {
    /// An authenticator accepting tokens from `issuers`, verified by `keys` (rotation:
    /// several keys may be valid at once), for `implicit_audiences` (`--api-audiences`).
    pub fn new(
        issuers: Vec<String>,
        keys: Vec<VerificationKey>,
        implicit_audiences: Vec<String>,
        features: TokenFeatures,
    ) -> Self {
        Self { issuers, keys, implicit_audiences, features }
    }

    /// The verification keys.
    pub fn keys(&self) -> &[VerificationKey] {
        &self.keys
    }

    /// The feature gates in force.
    pub fn features(&self) -> &TokenFeatures {
        &self.features
    }

    /// Offline verification at `now`: everything except the bound-object lookups.
    /// `requested` are the audiences the caller accepts (`None` = the implicit ones).
    pub fn verify(&self, token: &str, requested: Option<&[String]>, now: i64) -> Result<VerifiedToken, AuthError> {
        let not_mine = AuthError::NotMine;
        let parts = crate::precheck::compact(token)?;
        // Typical payloads (under 1.5 KiB) decode on the stack; larger ones on the heap.
        let mut payload_buf = [0u8; 1536];
        let payload_vec;
        let payload = match jws::decode_segment_into(parts.payload, &mut payload_buf) {
            Some(bytes) => bytes,
            None => {
                payload_vec = jws::decode_segment(parts.payload).ok_or(not_mine(NotMine::Payload))?;
                &payload_vec[..]
            }
        };
        // One parse on the hot path, into borrowed strings: the full claim set also yields
        // the (unverified) issuer. Only when it does not decode is the payload re-read for
        // `iss` alone, so that a signed payload of the wrong shape is still reported after
        // the signature check, as upstream does.
        // Validating UTF-8 once over the payload lets the parser skip it per string.
        let payload_text = std::str::from_utf8(payload).map_err(|_| not_mine(NotMine::Payload))?;
        let parsed: Result<WireClaims<'_>, serde_json::Error> = serde_json::from_str(payload_text);
        match &parsed {
            Ok(claims) if self.accepts_issuer(claims.iss.as_str()) => {}
            Ok(claims) => return Err(not_mine(NotMine::Issuer(claims.iss.as_str().to_owned()))),
            Err(_) => {
                let unverified: IssuerOnly = serde_json::from_slice(payload).map_err(|_| not_mine(NotMine::Payload))?;
                if !self.accepts_issuer(&unverified.iss) {
                    return Err(not_mine(NotMine::Issuer(unverified.iss)));
                }
            }
        }

        // Headers are small; decode on the stack unless one carries e.g. a certificate chain.
        let mut header_buf = [0u8; 384];
        let header_vec;
        let header_bytes = match jws::decode_segment_into(parts.header, &mut header_buf) {
            Some(bytes) => bytes,
            None => {
                header_vec = jws::decode_segment(parts.header).ok_or(not_mine(NotMine::Header))?;
                &header_vec[..]
            }
        };
        let header: WireHeader<'_> = serde_json::from_slice(header_bytes).map_err(|_| not_mine(NotMine::Header))?;
        let alg = Algorithm::from_name(header.alg.as_str())
            .ok_or_else(|| not_mine(NotMine::Algorithm(header.alg.as_str().to_owned())))?;
        if header.crit.is_some() {
            return Err(not_mine(NotMine::Critical));
        }
        // RSA-8192 signatures are the largest: 1024 bytes. Decode on the stack.
        let mut sig_buf = [0u8; 1024];
        let signature =
            jws::decode_segment_into(parts.signature, &mut sig_buf).ok_or(not_mine(NotMine::SignatureEncoding))?;

        let kid = header.kid.as_ref().map(|k| k.as_str()).filter(|k| !k.is_empty());
        let mut errors = Vec::new();
        let mut verified = false;
        for key in self.keys.iter().filter(|k| kid.is_none_or(|kid| k.key_id() == kid)) {
            match key.verify(alg, parts.signing_input.as_bytes(), signature) {
                Ok(()) => {
                    verified = true;
                    break;
                }
                Err(e) => errors.push(e),
            }
        }
        if !verified {
            return Err(if errors.is_empty() { AuthError::NoKeys } else { AuthError::Signature(errors) });
        }

        let claims = parsed.map_err(|e| AuthError::Malformed(format!("claims do not decode: {e}")))?;
        if !self.accepts_issuer(claims.iss.as_str()) {
            return Err(AuthError::Issuer(claims.iss.as_str().to_owned()));
        }

        let legacy = claims.aud.is_empty();
        let token_audiences: Vec<&str> = claims.aud.iter().map(|a| a.as_str()).collect();
        let audiences =
            crate::precheck::audiences((!legacy).then_some(&token_audiences[..]), requested, &self.implicit_audiences)?;

        check_times(claims.nbf, claims.exp, claims.iat, now)?;
        let k8s = check_shape(&claims)?;
        Ok(self.verified(&claims, k8s, audiences, legacy))
    }

    fn accepts_issuer(&self, iss: &str) -> bool {
        self.issuers.iter().any(|i| i == iss)
    }

    /// What the claims say: pod and (gated) node of pod-bound tokens, the node of
    /// node-bound tokens, the credential id (gated).
    fn verified(
        &self,
        claims: &WireClaims<'_>,
        k8s: &WireKubernetes<'_>,
        audiences: Vec<String>,
        legacy: bool,
    ) -> VerifiedToken {
        let mut info = ServiceAccountInfo {
            namespace: k8s.namespace.as_str().to_owned(),
            name: k8s.serviceaccount.name.as_str().to_owned(),
            uid: k8s.serviceaccount.uid.as_str().to_owned(),
            ..ServiceAccountInfo::default()
        };
        let pod = k8s.pod.as_ref().map(WireRef::to_owned_ref);
        let mut bound_node = None;
        if let Some(p) = &pod {
            info.pod_name.clone_from(&p.name);
            info.pod_uid.clone_from(&p.uid);
            if self.features.pod_node_info
                && let Some(node) = &k8s.node
            {
                info.node_name = node.name.as_str().to_owned();
                info.node_uid = node.uid.as_str().to_owned();
            }
        } else if let Some(node) = &k8s.node {
            info.node_name = node.name.as_str().to_owned();
            info.node_uid = node.uid.as_str().to_owned();
            bound_node = Some(node.to_owned_ref());
        }
        if self.features.jti
            && let Some(jti) = claims.jti.as_ref().filter(|j| !j.is_empty())
        {
            info.credential_id = format!("JTI={}", jti.as_str());
        }
        VerifiedToken {
            info,
            pod,
            secret: k8s.secret.as_ref().map(WireRef::to_owned_ref),
            bound_node,
            expires_at: claims.exp,
            issued_at: claims.iat,
            warn_after: k8s.warnafter,
            audiences,
            legacy,
        }
    }

    /// Full authentication at `now`: [`Self::verify`], then the bound objects through
    /// `lookup`, then `warnafter`.
    pub async fn authenticate<L: BoundObjectLookup>(
        &self,
        token: &str,
        requested: Option<&[String]>,
        lookup: &L,
        now: i64,
    ) -> Result<Authenticated, AuthError> {
        let verified = self.verify(token, requested, now)?;
        self.validate_bound(verified, lookup, now).await
    }

    /// The bound-object half of validation (claims.go, after the time checks).
    pub async fn validate_bound<L: BoundObjectLookup>(
        &self,
        verified: VerifiedToken,
        lookup: &L,
        now: i64,
    ) -> Result<Authenticated, AuthError> {
        let VerifiedToken { info, pod, secret, bound_node, warn_after, audiences, legacy, expires_at, .. } = verified;
        let deleted = |o: &BoundObject| o.deletion_timestamp.is_some_and(|t| t < now - LEEWAY_SECONDS);
        let ns = info.namespace.as_str();
        let mut verified_bound = None;

        let sa = lookup.service_account(ns, &info.name).await.map_err(AuthError::ServiceAccountLookup)?;
        if sa.uid != info.uid {
            return Err(AuthError::UidMismatch {
                kind: BoundKind::ServiceAccount,
                actual: sa.uid,
                claim: info.uid.clone(),
            });
        }
        if deleted(&sa) {
            return Err(AuthError::ServiceAccountDeleted { namespace: ns.into(), name: info.name.clone() });
        }

        let mut secret_uid = String::new();
        if let Some(secret_ref) = &secret {
            let secret = lookup.secret(ns, &secret_ref.name).await.map_err(|_| AuthError::Invalidated)?;
            check_bound(BoundKind::Secret, &secret, &secret_ref.uid, deleted(&secret))?;
            verified_bound = Some(BoundKind::Secret);
            secret_uid = secret.uid;
        }

        if let Some(pod_ref) = &pod {
            let pod = lookup.pod(ns, &pod_ref.name).await.map_err(|_| AuthError::Invalidated)?;
            check_bound(BoundKind::Pod, &pod, &pod_ref.uid, deleted(&pod))?;
            verified_bound = Some(BoundKind::Pod);
        } else if let Some(node_ref) = &bound_node {
            if !self.features.node_binding_validation {
                return Err(AuthError::NodeBindingValidationDisabled);
            }
            let node = lookup.node(&node_ref.name).await.map_err(|_| AuthError::Invalidated)?;
            check_bound(BoundKind::Node, &node, &node_ref.uid, deleted(&node))?;
            verified_bound = Some(BoundKind::Node);
        }
        let pod_node_ref = pod.is_some() && !info.node_name.is_empty();

        let user = info.user_info();
        let mut audit_annotations = Vec::new();
        if legacy {
            audit_annotations.push((LEGACY_TOKEN_ANNOTATION.to_owned(), user.username.clone()));
        }
        let freshness = match warn_after {
            Some(w) if w != 0 && now > w => {
                audit_annotations.push((
                    STALE_TOKEN_ANNOTATION.to_owned(),
                    format!("subject: {}, seconds after warning threshold: {}", user.username, now - w),
                ));
                Freshness::Stale(now - w)
            }
            Some(w) if w != 0 => Freshness::Valid,
            _ => Freshness::NotTracked,
        };
        Ok(Authenticated {
            user,
            info,
            audiences,
            audit_annotations,
            freshness,
            legacy,
            expires_at,
            verified_bound,
            pod_node_ref,
            secret_uid,
        })
    }
}

fn check_bound(kind: BoundKind, object: &BoundObject, claim_uid: &str, deleted: bool) -> Result<(), AuthError> {
    // Newest upstream order: UID first, then deletion (as for the service account).
    if object.uid != claim_uid {
        return Err(AuthError::UidMismatch { kind, actual: object.uid.clone(), claim: claim_uid.to_owned() });
    }
    if deleted {
        return Err(AuthError::Invalidated);
    }
    Ok(())
}

/// go-jose `Claims.ValidateWithLeeway` with the default leeway, in its order.
fn check_times(nbf: Option<i64>, exp: Option<i64>, iat: Option<i64>, now: i64) -> Result<(), AuthError> {
    if nbf.is_some_and(|nbf| now + LEEWAY_SECONDS < nbf) {
        return Err(AuthError::NotValidYet);
    }
    if exp.is_some_and(|exp| now - LEEWAY_SECONDS > exp) {
        return Err(AuthError::Expired);
    }
    if iat.is_some_and(|iat| now + LEEWAY_SECONDS < iat) {
        return Err(AuthError::IssuedInFuture);
    }
    Ok(())
}

/// The private claims must name a service account, and `sub` must be that account.
/// Upstream derives the user from the private claims alone; a `sub` that disagrees is
/// refused here so that no consumer of `sub` can be told a different identity.
fn check_shape<'c, 'a>(claims: &'c WireClaims<'a>) -> Result<&'c WireKubernetes<'a>, AuthError> {
    let k8s = claims.kubernetes.as_ref().ok_or_else(|| AuthError::Malformed("missing kubernetes.io".into()))?;
    if k8s.namespace.is_empty() {
        return Err(AuthError::Malformed("missing kubernetes.io.namespace".into()));
    }
    if k8s.serviceaccount.name.is_empty() || k8s.serviceaccount.uid.is_empty() {
        return Err(AuthError::Malformed("missing kubernetes.io.serviceaccount name or uid".into()));
    }
    let matches = claims
        .sub
        .as_str()
        .strip_prefix(SERVICE_ACCOUNT_USERNAME_PREFIX)
        .and_then(|rest| rest.strip_prefix(k8s.namespace.as_str()))
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|name| name == k8s.serviceaccount.name.as_str());
    if !matches {
        let expected = make_username(k8s.namespace.as_str(), k8s.serviceaccount.name.as_str());
        return Err(AuthError::Malformed(format!(
            "sub {:?} does not match kubernetes.io claims ({expected:?})",
            claims.sub.as_str()
        )));
    }
    Ok(k8s)
}

/// Kubernetes' error aggregate text: one message alone, several as `[a, b]` (duplicates once).
fn aggregate(errors: &[SignatureError]) -> String {
    let mut msgs: Vec<String> = Vec::new();
    for e in errors {
        let m = e.to_string();
        if !msgs.contains(&m) {
            msgs.push(m);
        }
    }
    match msgs.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", msgs.join(", ")),
    }
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Seconds since the Unix epoch, from the system clock.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
