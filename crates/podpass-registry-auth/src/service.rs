//! The token decision, transport aside: who is asking (a service-account token of a
//! trusted issuer, or an exchange token of ours), from which node, what the policy grants
//! of what was asked, and the tokens answered. One audit line and one metric per decision.

use std::collections::BTreeMap;
use std::sync::Arc;

use podpass_serve::{AuditWriter, FairShare, InFlightPermit};
use podpass_token::user::{is_dns1123_label, is_dns1123_subdomain};
use podpass_token::{AuthError, JwsSigner, NotMine, ObjectRef, VerificationKey};
use serde::Deserialize;
use tracing::Instrument;

use crate::exchange_token::{self, ExchangeError};
use crate::identity::{Credential, Identity};
use crate::metrics::RegistryAuthMetrics;
use crate::node_binding::{self, NodeBinding, NodeCheck, NodeProof};
use crate::policy::{Policy, Subject};
use crate::registry_token::{RegistryToken, RegistryTokenSigner};
use crate::review::{ReviewError, TokenReviewer};
use crate::scope::Scope;
use crate::trust::{IssuerTrust, TrustError};

/// Annotations forwarded per request, at most.
pub const MAX_ANNOTATIONS: usize = 64;
/// Bytes of one forwarded annotation (key plus value), at most.
pub const MAX_ANNOTATION_BYTES: usize = 4096;
/// Exchanges one identity may have in flight at once: one service account once its
/// credential verified; before that, one client address (or one node's certificate).
pub const IN_FLIGHT_PER_IDENTITY: usize = 32;
/// Exchanges of tenants and anonymous clients in flight at once, all together. A node's
/// (requests over its client certificate) are held to their identity's share only, so no
/// flood of tenants or strangers ever starves the nodes' pulls.
pub const IN_FLIGHT_TOTAL: usize = 256;

/// How the client authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Basic auth or `grant_type=password`: the password is a service-account token or an
    /// exchange token.
    Password(String),
    /// `grant_type=refresh_token`: an exchange token.
    RefreshToken(String),
}

/// A parsed token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeRequest {
    /// The credential.
    pub grant: Grant,
    /// `service`, if given (it must be the registry's).
    pub service: Option<String>,
    /// The scopes asked.
    pub scopes: Vec<Scope>,
    /// `offline_token=true` / `access_type=offline`: answer a refresh (exchange) token.
    pub offline: bool,
    /// Service-account annotations the node forwards (honoured only when the request
    /// proves a node with its client certificate).
    pub annotations: BTreeMap<String, String>,
    /// The node a verified TLS client certificate names.
    pub peer_node: Option<String>,
    /// The client's address: its fair share of the work before its credential verifies.
    pub peer_addr: Option<std::net::IpAddr>,
    /// How the credential came, for the audit line: `basic` (GET), `password` or
    /// `refresh_token` (POST form).
    pub via: &'static str,
}

/// A granted answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenAnswer {
    /// The registry token.
    pub token: RegistryToken,
    /// The exchange token, when an offline token was asked.
    pub refresh_token: Option<String>,
    /// What was granted.
    pub granted: Vec<Scope>,
}

/// A request that gets no token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed (400 `invalid_request`).
    Invalid(String),
    /// The credential is not acceptable (401); `reason` is the metric label.
    Unauthorized {
        /// Closed-set reason label.
        reason: &'static str,
        /// What the client is told.
        message: String,
    },
    /// This identity (or all tenants together) has too many exchanges in flight (429,
    /// `Retry-After: 1`); `reason` is the metric label (`in_flight_identity`,
    /// `in_flight_total`).
    TooMany {
        /// Closed-set reason label.
        reason: &'static str,
        /// What the client is told.
        message: String,
    },
    /// Nothing can be decided now (503): the issuer's keys are unknown, the cluster's
    /// TokenReview does not answer, or signing failed.
    Unavailable {
        /// Closed-set reason label (`issuer_keys`, `token_review`, `signing`).
        reason: &'static str,
        /// What the client is told.
        message: String,
    },
}

impl Refusal {
    fn unauthorized(reason: &'static str, message: impl Into<String>) -> Self {
        Self::Unauthorized { reason, message: message.into() }
    }

    fn unavailable(reason: &'static str, message: impl Into<String>) -> Self {
        Self::Unavailable { reason, message: message.into() }
    }
}

/// The registry token service.
pub struct TokenService {
    trusts: Vec<Arc<IssuerTrust>>,
    policy: Policy,
    registry: RegistryTokenSigner,
    exchange_signer: JwsSigner,
    own_keys: Vec<VerificationKey>,
    node_binding: NodeBinding,
    exchange_ttl_seconds: i64,
    metrics: Arc<RegistryAuthMetrics>,
    reviewers: Vec<Arc<TokenReviewer>>,
    audit: Option<AuditWriter>,
    in_flight: FairShare,
}

impl std::fmt::Debug for TokenService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenService").field("trusts", &self.trusts).finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct IssuerOnly {
    iss: String,
}

/// The unverified `iss` of a JWT, to pick the issuer whose keys verify it.
fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = data_encoding::BASE64URL_NOPAD.decode(payload.as_bytes()).ok()?;
    serde_json::from_slice::<IssuerOnly>(&bytes).ok().map(|c| c.iss)
}

/// Closed-set label of a verification failure.
fn auth_reason(e: &AuthError) -> &'static str {
    match e {
        AuthError::NotMine(NotMine::Issuer(_)) => "issuer",
        AuthError::NotMine(_) | AuthError::Malformed(_) => "malformed",
        AuthError::NoKeys | AuthError::Signature(_) => "signature",
        AuthError::Issuer(_) => "issuer",
        AuthError::Audience { .. } => "audience",
        AuthError::Expired => "expired",
        AuthError::NotValidYet | AuthError::IssuedInFuture => "not_yet_valid",
        _ => "invalid",
    }
}

/// Parts of a [`TokenService`].
pub struct ServiceParts {
    /// One trust per issuer.
    pub trusts: Vec<Arc<IssuerTrust>>,
    /// The policy.
    pub policy: Policy,
    /// Signs registry tokens.
    pub registry: RegistryTokenSigner,
    /// Signs exchange tokens (the same key; `kid` the key's id).
    pub exchange_signer: JwsSigner,
    /// `--node-binding`.
    pub node_binding: NodeBinding,
    /// Exchange tokens live at most this long (and never past their source token).
    pub exchange_ttl_seconds: i64,
    /// RegistryAuthMetrics.
    pub metrics: Arc<RegistryAuthMetrics>,
    /// TokenReview per issuer (`--token-review-kubeconfig`).
    pub reviewers: Vec<Arc<TokenReviewer>>,
    /// Where each decision's audit event goes (none: not audited).
    pub audit: Option<AuditWriter>,
}

/// A granted decision and what the audit line says about it.
struct Decided {
    answer: TokenAnswer,
    identity: Identity,
    credential: Credential,
    node: NodeCheck,
    /// Where the node proof came from (`none`, `certificate:<node>`).
    proof: NodeProof,
    /// `off` (no reviewer for the issuer, or an exchange token), `reviewed`, `cached`.
    review: &'static str,
}

impl TokenService {
    /// Assembles the service.
    pub fn new(parts: ServiceParts) -> Self {
        let own = parts.exchange_signer.key().public_key().clone();
        Self {
            trusts: parts.trusts,
            policy: parts.policy,
            registry: parts.registry,
            exchange_signer: parts.exchange_signer,
            own_keys: vec![own],
            node_binding: parts.node_binding,
            exchange_ttl_seconds: parts.exchange_ttl_seconds,
            metrics: parts.metrics,
            reviewers: parts.reviewers,
            audit: parts.audit,
            in_flight: FairShare::new(IN_FLIGHT_TOTAL, IN_FLIGHT_PER_IDENTITY),
        }
    }

    /// Counts one exchange of `identity` in flight, or refuses it: a node's certificate
    /// holds it to its own share only, anyone else to its share and to the tenants' total.
    fn admit(&self, identity: &str, node_proven: bool) -> Result<InFlightPermit, Refusal> {
        self.in_flight.admit(identity, !node_proven).map_err(|e| {
            let reason = match e {
                podpass_serve::InFlightRefusal::Identity => "in_flight_identity",
                podpass_serve::InFlightRefusal::Total => "in_flight_total",
            };
            Refusal::TooMany { reason, message: format!("{e}; retry in a second") }
        })
    }

    /// Writes one decision's audit event, stamped with the time.
    fn audit(&self, mut event: serde_json::Value) {
        if let Some(audit) = &self.audit {
            if let Some(fields) = event.as_object_mut() {
                fields.insert("time".into(), jiff::Timestamp::now().to_string().into());
            }
            audit.record(&event);
        }
    }

    /// The issuers trusted.
    pub fn trusts(&self) -> &[Arc<IssuerTrust>] {
        &self.trusts
    }

    /// The registry token signer.
    pub fn registry(&self) -> &RegistryTokenSigner {
        &self.registry
    }

    /// RegistryAuthMetrics.
    pub fn metrics(&self) -> &RegistryAuthMetrics {
        &self.metrics
    }

    fn trust_of(&self, issuer: &str) -> Option<&Arc<IssuerTrust>> {
        self.trusts.iter().find(|t| t.issuer() == issuer)
    }

    /// Decides `request` at `now`. Every outcome is counted and audited.
    pub async fn decide(&self, request: ExchangeRequest, now: i64) -> Result<TokenAnswer, Refusal> {
        let scope_asked: Vec<String> = request.scopes.iter().map(ToString::to_string).collect();
        let actions_asked: usize = request.scopes.iter().map(|s| s.actions.len()).sum();
        let via = request.via;
        // Lines logged while deciding carry the exchange: how it came, what it asked, and
        // (once the credential verified) whose it is.
        let span = tracing::info_span!(
            "exchange",
            via,
            scope = %scope_asked.join(" "),
            issuer = tracing::field::Empty,
            service_account = tracing::field::Empty,
        );
        let result = self.decide_inner(request, now).instrument(span.clone()).await;
        let _in_span = span.enter();
        match &result {
            Ok(Decided { answer, identity, credential, node, proof, review }) => {
                let granted_actions: usize = answer.granted.iter().map(|s| s.actions.len()).sum();
                let outcome = if granted_actions == actions_asked {
                    "granted"
                } else if answer.granted.is_empty() {
                    "denied"
                } else {
                    "partial"
                };
                self.metrics.decision(outcome, if outcome == "granted" { "ok" } else { "policy" });
                let granted: Vec<String> = answer.granted.iter().map(ToString::to_string).collect();
                self.audit(serde_json::json!({
                    "decision": outcome,
                    "issuer": identity.issuer,
                    "service_account": format!("{}/{}", identity.namespace, identity.service_account.name),
                    "service_account_uid": identity.service_account.uid,
                    "pod": identity.pod.as_ref().map(|p| format!("{}/{}", identity.namespace, p.name)).unwrap_or_default(),
                    "pod_uid": identity.pod.as_ref().map(|p| p.uid.clone()).unwrap_or_default(),
                    "node": identity.node.as_ref().map(|n| n.name.clone()).unwrap_or_default(),
                    "node_check": node.as_str(),
                    "node_proof": proof.audit_label(),
                    "annotations": identity.annotations.keys().map(String::as_str).collect::<Vec<_>>().join(","),
                    "token_review": *review,
                    "jti": identity.jti.clone().unwrap_or_default(),
                    "credential": credential.as_str(),
                    "via": via,
                    "scope_asked": scope_asked.join(" "),
                    "scope_granted": granted.join(" "),
                    "token_jti": answer.token.jti,
                    "offline": answer.refresh_token.is_some(),
                }));
                // The audit event is the record; this line (debug: one per exchange would flood
                // an operator's log) carries the exchange's span for tracing a request.
                tracing::debug!(decision = outcome, scope_granted = %granted.join(" "), "token granted");
            }
            Err(refusal) => {
                let (outcome, reason, message) = match refusal {
                    Refusal::Invalid(m) => ("invalid", "malformed_request", m.as_str()),
                    Refusal::Unauthorized { reason, message } => ("refused", *reason, message.as_str()),
                    Refusal::TooMany { reason, message } => ("throttled", *reason, message.as_str()),
                    Refusal::Unavailable { reason, message } => ("unavailable", *reason, message.as_str()),
                };
                self.metrics.decision(outcome, reason);
                self.audit(serde_json::json!({
                    "decision": outcome,
                    "reason": reason,
                    "why": message,
                    "via": via,
                    "scope_asked": scope_asked.join(" "),
                }));
                tracing::debug!(decision = outcome, reason, why = message, "token refused");
            }
        }
        result.map(|d| d.answer)
    }

    async fn decide_inner(&self, request: ExchangeRequest, now: i64) -> Result<Decided, Refusal> {
        if let Some(service) = request.service.as_deref()
            && service != self.registry.service()
        {
            return Err(Refusal::Invalid(format!(
                "service {service:?} is not served here (tokens are issued for {:?})",
                self.registry.service()
            )));
        }
        // Before the credential verifies, the client's share is its address's (or its
        // node's, when it showed a node's certificate); once it does, its service account's.
        let node_proven = request.peer_node.is_some();
        let client = match (&request.peer_node, request.peer_addr) {
            (Some(node), _) => format!("node:{node}"),
            (None, Some(addr)) => format!("address:{addr}"),
            (None, None) => "address:unknown".to_owned(),
        };
        let verifying = self.admit(&client, node_proven)?;
        let (mut identity, credential, not_after) = self.identify(&request.grant, now).await?;
        drop(verifying);
        let _in_flight = self.admit(&format!("user:{}:{}", identity.issuer, identity.username()), node_proven)?;
        let span = tracing::Span::current();
        span.record("issuer", identity.issuer.as_str());
        span.record("service_account", format!("{}/{}", identity.namespace, identity.service_account.name).as_str());
        // A revoked jti ends the token and every exchange token made from it, whatever a
        // review would say or its cache remembers.
        if let Some(jti) = identity.jti.as_deref()
            && self.reviewers.iter().any(|r| r.issuer() == identity.issuer && r.is_revoked(jti))
        {
            return Err(Refusal::unauthorized("revoked", format!("token has been revoked (credential id JTI={jti})")));
        }
        // So does the deletion of what it speaks for, pushed by watch: a cached review
        // answered before it says nothing.
        let bound = [Some(&identity.service_account), identity.pod.as_ref(), identity.node.as_ref()];
        if self
            .reviewers
            .iter()
            .any(|r| r.issuer() == identity.issuer && r.names_deleted(bound.iter().flatten().map(|o| o.uid.as_str())))
        {
            return Err(Refusal::unauthorized(
                "token_review",
                "TokenReview: the token's pod, service account or node has been deleted".to_owned(),
            ));
        }
        let proof = request.peer_node.clone().map_or(NodeProof::None, NodeProof::Certificate);
        // A node's certificate outlives the node: a proof of a node the cluster deleted
        // (decommissioned, or taken over) proves nothing any more.
        if let NodeProof::Certificate(node) = &proof
            && self.reviewers.iter().any(|r| r.issuer() == identity.issuer && r.node_absent(node))
        {
            return Err(Refusal::unauthorized(
                "node_deleted",
                format!("the client certificate proves node {node:?}, which no longer exists in the token's cluster"),
            ));
        }
        let node = node_binding::check(self.node_binding, identity.node.as_ref(), &proof)
            .map_err(|e| Refusal::unauthorized(node_reason(&e), e.to_string()))?;
        // Last of the checks on the credential: the only one that costs a round trip.
        let review = match (&request.grant, credential) {
            (Grant::Password(token), Credential::ServiceAccountToken) => self.review(token, &identity).await?,
            _ => self.review_exchange(&identity).await?,
        };
        if credential == Credential::ServiceAccountToken {
            // Annotations are the node's word: honoured only from a node that proved itself
            // with its certificate. An exchange token carries what was honoured when it was
            // issued, nothing more.
            identity.annotations =
                if proof != NodeProof::None { bounded(request.annotations)? } else { BTreeMap::new() };
        }
        let subject = Subject {
            issuer: &identity.issuer,
            namespace: &identity.namespace,
            name: &identity.service_account.name,
            annotations: &identity.annotations,
        };
        let granted = self.policy.grant(&subject, &request.scopes);
        let token = self
            .registry
            .sign(&identity.username(), &granted, now, not_after)
            .map_err(|e| Refusal::unavailable("signing", e.to_string()))?;
        if request.offline && identity.secret.is_some() {
            // An exchange token could not end with the Secret: registry-auth does not see it.
            return Err(Refusal::Invalid(
                "no exchange token (offline) from a token bound to a Secret: it could not end when the Secret is deleted; ask without offline".into(),
            ));
        }
        let refresh_token = if request.offline {
            let expires_at = not_after.min(now + self.exchange_ttl_seconds);
            let t = exchange_token::sign(&self.exchange_signer, self.registry.issuer(), &identity, now, expires_at)
                .map_err(|e| Refusal::unavailable("signing", e.to_string()))?;
            Some(t.token)
        } else {
            None
        };
        Ok(Decided { answer: TokenAnswer { token, refresh_token, granted }, identity, credential, node, proof, review })
    }

    /// Verifies the credential: (identity, how it came, when it expires).
    async fn identify(&self, grant: &Grant, now: i64) -> Result<(Identity, Credential, i64), Refusal> {
        let (token, refresh) = match grant {
            Grant::Password(t) => (t.as_str(), false),
            Grant::RefreshToken(t) => (t.as_str(), true),
        };
        if token.is_empty() {
            return Err(Refusal::unauthorized("no_credentials", "no token given as password"));
        }
        if refresh || exchange_token::looks_like_exchange(token) {
            let (identity, exp) =
                exchange_token::verify(token, &self.own_keys, self.registry.issuer(), now).map_err(|e| {
                    let reason = if e == ExchangeError::Expired { "expired" } else { "exchange_token" };
                    Refusal::unauthorized(reason, e.to_string())
                })?;
            return Ok((identity, Credential::ExchangeToken, exp));
        }
        let Some(issuer) = unverified_issuer(token) else {
            return Err(Refusal::unauthorized("malformed", "the password is not a service-account token"));
        };
        let Some(trust) = self.trust_of(&issuer) else {
            return Err(Refusal::unauthorized("issuer", format!("token issuer {issuer:?} is not trusted")));
        };
        let verified = trust.verify(token, now).await.map_err(|e| match e {
            TrustError::Unavailable { .. } => Refusal::unavailable("issuer_keys", e.to_string()),
            TrustError::Refused(a) => Refusal::unauthorized(auth_reason(&a), a.to_string()),
        })?;
        if verified.legacy {
            return Err(Refusal::unauthorized("audience", "tokens without an audience are not accepted"));
        }
        let Some(exp) = verified.expires_at else {
            return Err(Refusal::unauthorized("malformed", "tokens without an expiry are not accepted"));
        };
        let secret = verified.secret.clone();
        let info = verified.info;
        // The names are substituted into repository patterns and matched by globs: only
        // what Kubernetes itself would name (a namespace is a DNS label, a service account
        // a DNS subdomain), whatever a trusted issuer signed.
        if !is_dns1123_label(&info.namespace) || !is_dns1123_subdomain(&info.name) {
            return Err(Refusal::unauthorized(
                "identity",
                format!(
                    "the token's service account {:?}/{:?} is not a valid name (namespace: a DNS-1123 label, name: a DNS-1123 subdomain)",
                    info.namespace, info.name
                ),
            ));
        }
        let object = |name: &str, uid: &str| (!name.is_empty()).then(|| ObjectRef::new(name, uid));
        let identity = Identity {
            issuer,
            pod: object(&info.pod_name, &info.pod_uid),
            node: object(&info.node_name, &info.node_uid),
            service_account: ObjectRef::new(info.name.as_str(), info.uid.as_str()),
            namespace: info.namespace,
            annotations: BTreeMap::new(),
            jti: info.credential_id.strip_prefix("JTI=").map(str::to_owned),
            secret,
        };
        Ok((identity, Credential::ServiceAccountToken, exp))
    }

    /// The issuing cluster's TokenReview of a service-account token, when configured.
    async fn review(&self, token: &str, identity: &Identity) -> Result<&'static str, Refusal> {
        let Some(reviewer) = self.reviewers.iter().find(|r| r.issuer() == identity.issuer) else { return Ok("off") };
        // A Secret's deletion is not watched here (registry-auth may not read Secrets): a
        // token bound to one is reviewed every time, so it ends when the API server says so.
        let cached = identity.secret.is_none();
        review_outcome(reviewer.review(token, &identity.username(), &identity.service_account.uid, cached).await)
    }

    /// An exchange token's service account, checked against the issuing cluster when a
    /// reviewer is configured for it: still there, with the UID the token was bound to.
    /// An exchange token holds while its service account exists with its UID and, when it
    /// was made from a pod's token, while that pod does (same UID, not past its deletion):
    /// an exchange token dies with its pod, as the pod's own token does.
    async fn review_exchange(&self, identity: &Identity) -> Result<&'static str, Refusal> {
        let Some(reviewer) = self.reviewers.iter().find(|r| r.issuer() == identity.issuer) else { return Ok("off") };
        let sa = &identity.service_account;
        let account = review_outcome(reviewer.check_service_account(&identity.namespace, &sa.name, &sa.uid).await)?;
        let Some(pod) = &identity.pod else { return Ok(account) };
        let pod = review_outcome(reviewer.check_pod(&identity.namespace, &pod.name, &pod.uid).await)?;
        Ok(if account == "cached" && pod == "cached" { "cached" } else { "reviewed" })
    }
}

/// The audit label of a review, or the refusal it makes.
fn review_outcome(result: Result<bool, ReviewError>) -> Result<&'static str, Refusal> {
    match result {
        Ok(true) => Ok("cached"),
        Ok(false) => Ok("reviewed"),
        Err(e @ ReviewError::Rejected(_)) => Err(Refusal::unauthorized("token_review", e.to_string())),
        Err(e @ ReviewError::Unavailable(_)) => Err(Refusal::unavailable("token_review", e.to_string())),
    }
}

fn node_reason(e: &node_binding::NodeBindingError) -> &'static str {
    match e {
        node_binding::NodeBindingError::Unproven { .. } => "node_unproven",
        node_binding::NodeBindingError::Mismatch { .. } => "node_mismatch",
    }
}

fn bounded(annotations: BTreeMap<String, String>) -> Result<BTreeMap<String, String>, Refusal> {
    if annotations.len() > MAX_ANNOTATIONS || annotations.iter().any(|(k, v)| k.len() + v.len() > MAX_ANNOTATION_BYTES)
    {
        return Err(Refusal::Invalid(format!(
            "annotations: at most {MAX_ANNOTATIONS}, each at most {MAX_ANNOTATION_BYTES} bytes"
        )));
    }
    Ok(annotations)
}
