//! `serviceaccounts/token` (TokenRequest), `tokenreviews` and `selfsubjectaccessreviews`
//! (pkg/registry/core/serviceaccount/storage/token.go and friends).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use podpass_token::claims::{EXPIRATION_EXTENSION_SECONDS, WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS};
use podpass_token::{ObjectRef, TokenRequest as TokenRequestClaims, now_unix};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::status::StatusError;
use crate::store::{ObjectKey, ReadConsistency, StoreError};

/// TokenRequest validation bounds.
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// API default of `spec.expirationSeconds`.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

fn invalid(name: &str, field: &str, value: &Value, detail: &str) -> StatusError {
    StatusError::invalid(format!(
        "TokenRequest.authentication.k8s.io {name:?} is invalid: {field}: Invalid value: {value}: {detail}"
    ))
}

/// The string at `path` (object keys, outermost first), or "" (walked directly: a JSON
/// pointer would unescape each segment into a new string on every request).
fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, key| v.get(key)).and_then(Value::as_str).unwrap_or_default()
}

async fn get_object(
    state: &AppState,
    key: ObjectKey,
    at: ReadConsistency,
) -> Result<std::sync::Arc<crate::store::Stored>, StatusError> {
    Ok(state.store.get_with(&key, at).await?)
}

/// `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`
/// (pkg/registry/core/serviceaccount/storage/token.go `Create`), in upstream's order. A dry
/// run (`dryRun=All`) is checked as a real request (admission, the service account, the
/// bound object, audiences and expiration) and answered without a token: nothing is signed,
/// counted as issued or given a credential id.
pub async fn create_token(
    state: &AppState,
    user: &crate::server::User,
    ns: &str,
    sa_name: &str,
    body: super::typed_body::Body<super::typed_body::TokenRequestKind>,
    dry_run: bool,
) -> Result<Response, StatusError> {
    let request = TokenRequest { metadata: body.metadata, spec: body.spec, status: None };
    // Admission runs before the handler, as upstream: nodes are restricted first.
    let res = super::resources::find("", "serviceaccounts")
        .ok_or_else(|| StatusError::internal("serviceaccounts is not served"))?;
    let notes = super::admission::Notes::default();
    let attrs = super::admission::Attributes {
        user,
        res,
        subresource: "token",
        namespace: Some(ns),
        name: sa_name,
        operation: super::admission::Operation::Create,
        notes: &notes,
        dry_run,
    };
    let object = serde_json::to_value(&request).map_err(StatusError::internal)?;
    super::admission::validate(state, &attrs, Some(&object), None).await?;
    check_target(&request, ns, sa_name)?;
    // Upstream reads the service account and the bound object with consistent reads; one
    // consistency point serves them all.
    let at = state.store.consistent_point().await?;
    let sa = get_object(state, ObjectKey::namespaced("serviceaccounts", ns, sa_name), at).await?;
    let sa_uid = str_at(&sa.object, &["metadata", "uid"]).to_owned();
    let mut outcome = Outcome::default();
    let response_uid = check_request_uid(state, &request, sa_name, &sa_uid, &mut outcome)?;
    let (audiences, expiration) = audiences_and_expiration(state, &request, sa_name, &mut outcome)?;
    let mut claims = TokenRequestClaims {
        namespace: ns.to_owned(),
        service_account: ObjectRef::new(sa_name, sa_uid),
        audiences: audiences.clone(),
        expiration_seconds: expiration,
        ..TokenRequestClaims::default()
    };
    if let Some(bound) = &request.spec.bound_object_ref {
        bind(state, ns, sa_name, bound, &mut claims, at).await?;
    }
    extend_automounted(state, &mut claims);
    let now = now_unix();
    if dry_run {
        let answered = answer(request, ns, sa_name, response_uid, audiences, expiration, String::new(), now)?;
        return Ok(outcome.respond(answered));
    }
    let minted = state.generator.mint(&claims, &state.features, now).map_err(StatusError::internal)?;
    count_issued(state, &claims, minted.jti.is_some());
    if let Some(jti) = &minted.jti {
        outcome.annotations.0.insert("authentication.k8s.io/issued-credential-id".into(), format!("JTI={jti}"));
    }
    let answered = answer(request, ns, sa_name, response_uid, audiences, expiration, minted.token, now)?;
    Ok(outcome.respond(answered))
}

/// What a TokenRequest answer carries besides the object: warnings and audit annotations.
#[derive(Default)]
struct Outcome {
    warnings: Vec<String>,
    annotations: crate::server::audit::Annotations,
}

impl Outcome {
    fn respond(self, body: Vec<u8>) -> Response {
        let content_type = [(axum::http::header::CONTENT_TYPE, "application/json")];
        let mut resp = (StatusCode::CREATED, content_type, body).into_response();
        resp.extensions_mut().insert(self.annotations);
        super::with_warnings(resp, &self.warnings)
    }
}

/// Step 1: name/namespace in the body, if set, must be the URL's.
fn check_target(request: &TokenRequest, ns: &str, sa_name: &str) -> Result<(), StatusError> {
    let body_name = request.metadata.name.as_deref().unwrap_or_default();
    if !body_name.is_empty() && body_name != sa_name {
        return Err(invalid(
            body_name,
            "metadata.name",
            &json!(body_name),
            "must match the service account name if specified",
        ));
    }
    let body_ns = request.metadata.namespace.as_deref().unwrap_or_default();
    if !body_ns.is_empty() && body_ns != ns {
        return Err(invalid(
            sa_name,
            "metadata.namespace",
            &json!(body_ns),
            "must match the service account namespace if specified",
        ));
    }
    Ok(())
}

/// Step 2: the request's UID guard (TokenRequestServiceAccountUIDValidation): a `metadata.uid`
/// that is not the service account's is a 409, or with the gate off a warning and an audit
/// annotation. Returns the UID the answer carries (the request's, else the account's).
fn check_request_uid(
    state: &AppState,
    request: &TokenRequest,
    sa_name: &str,
    sa_uid: &str,
    outcome: &mut Outcome,
) -> Result<String, StatusError> {
    let req_uid = request.metadata.uid.clone().unwrap_or_default();
    if !req_uid.is_empty() && req_uid != sa_uid {
        let mismatch = format!(
            "the UID in the token request ({req_uid}) does not match the UID of the service account ({sa_uid})"
        );
        if state.token_request_uid_validation {
            return Err(conflict(sa_name, &mismatch));
        }
        outcome.warnings.push(format!(
            "{mismatch} but TokenRequestServiceAccountUIDValidation is not enabled. In the future, this will return a conflict error"
        ));
        outcome.annotations.0.insert("authentication.k8s.io/token-request-uid-mismatch".into(), mismatch);
    }
    Ok(if req_uid.is_empty() { sa_uid.to_owned() } else { req_uid })
}

/// Step 3-4, 6: audiences (default: the API's) and expiry (default 1 h, 10 min … 2^32 s,
/// then shortened to `--service-account-max-token-expiration` with a warning).
fn audiences_and_expiration(
    state: &AppState,
    request: &TokenRequest,
    sa_name: &str,
    outcome: &mut Outcome,
) -> Result<(Vec<String>, i64), StatusError> {
    let audiences =
        if request.spec.audiences.is_empty() { state.api_audiences.clone() } else { request.spec.audiences.clone() };
    let mut expiration = request.spec.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    if expiration < MIN_EXPIRATION_SECONDS {
        return Err(invalid(
            sa_name,
            "spec.expirationSeconds",
            &json!(expiration),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration > MAX_EXPIRATION_SECONDS {
        return Err(invalid(
            sa_name,
            "spec.expirationSeconds",
            &json!(expiration),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if let Some(max) = state.max_token_expiration
        && expiration > max
    {
        outcome.warnings.push(format!("requested expiration of {expiration} seconds shortened to {max} seconds"));
        expiration = max;
    }
    Ok((audiences, expiration))
}

/// Step 5: the bound object: a Pod (of this service account; its node too with
/// ServiceAccountTokenPodNodeInfo), a Secret, or a Node (ServiceAccountTokenNodeBinding),
/// each with a matching UID when one is given.
async fn bind(
    state: &AppState,
    ns: &str,
    sa_name: &str,
    bound: &BoundObjectReference,
    claims: &mut TokenRequestClaims,
    at: ReadConsistency,
) -> Result<(), StatusError> {
    let field = |v: &Option<String>| v.clone().unwrap_or_default();
    let (kind, api_version, name, uid) =
        (field(&bound.kind), field(&bound.api_version), field(&bound.name), field(&bound.uid));
    let check_uid = |actual: &str| {
        if uid.is_empty() || uid == actual {
            return Ok(());
        }
        Err(conflict(
            &name,
            &format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ))
    };
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Pod") => {
            let pod = get_object(state, ObjectKey::namespaced("pods", ns, &name), at).await?;
            let pod = &pod.object;
            if str_at(pod, &["spec", "serviceAccountName"]) != sa_name {
                return Err(StatusError::bad_request(format!(
                    "cannot bind token for serviceaccount {sa_name:?} to pod running with different serviceaccount name."
                )));
            }
            let pod_uid = str_at(pod, &["metadata", "uid"]);
            check_uid(pod_uid)?;
            claims.pod = Some(ObjectRef::new(&name, pod_uid));
            let node_name = str_at(pod, &["spec", "nodeName"]);
            if state.features.pod_node_info && !node_name.is_empty() {
                claims.node = match state.store.get_with(&ObjectKey::cluster("nodes", node_name), at).await {
                    Ok(node) => Some(ObjectRef::new(node_name, str_at(&node.object, &["metadata", "uid"]))),
                    Err(StoreError::NotFound { .. }) => Some(ObjectRef::new(node_name, "")),
                    Err(e) => return Err(StatusError::internal(e)),
                };
            }
        }
        ("v1", "Secret") => {
            let secret = get_object(state, ObjectKey::namespaced("secrets", ns, &name), at).await?;
            let secret_uid = str_at(&secret.object, &["metadata", "uid"]);
            check_uid(secret_uid)?;
            claims.secret = Some(ObjectRef::new(&name, secret_uid));
        }
        ("v1", "Node") => {
            if !state.features.node_binding {
                return Err(StatusError::bad_request(
                    "cannot bind token to a Node object as the \"ServiceAccountTokenNodeBinding\" feature-gate is disabled",
                ));
            }
            let node = get_object(state, ObjectKey::cluster("nodes", &name), at).await?;
            let node_uid = str_at(&node.object, &["metadata", "uid"]);
            check_uid(node_uid)?;
            claims.node = Some(ObjectRef::new(&name, node_uid));
        }
        _ => {
            let gvk = if api_version.contains('/') {
                format!("{api_version}, Kind={kind}")
            } else {
                format!("/{api_version}, Kind={kind}")
            };
            return Err(StatusError::bad_request(format!("cannot bind token to object of type {gvk}")));
        }
    }
    Ok(())
}

/// Step 7: the automounted token (3607 s, pod-bound, API audiences only) is issued for a year
/// with `warnafter` at 3607 s (`--service-account-extend-token-expiration`).
fn extend_automounted(state: &AppState, claims: &mut TokenRequestClaims) {
    if state.extend_expiration
        && claims.pod.is_some()
        && claims.expiration_seconds == WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS
        && claims.audiences.iter().all(|a| state.api_audiences.contains(a))
    {
        claims.expiration_seconds = EXPIRATION_EXTENSION_SECONDS.max(state.max_token_expiration.unwrap_or(0));
        claims.warnafter_seconds = WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS;
    }
}

/// The bound-object kind label of the issued-token counter.
/// KEP-4193's issuance counters.
fn count_issued(state: &AppState, claims: &TokenRequestClaims, with_jti: bool) {
    let kind = match (&claims.pod, &claims.secret, &claims.node) {
        (Some(_), _, _) => Some("Pod"),
        (None, Some(_), _) => Some("Secret"),
        (None, None, Some(_)) => Some("Node"),
        _ => None,
    };
    let m = &state.metrics;
    if let Some(kind) = kind {
        m.bound_tokens_issued
            .get_or_create(&crate::server::metrics::BoundObjectLabels { bound_object_kind: kind.into() })
            .inc();
    }
    if claims.pod.is_some() && claims.node.is_some() {
        m.pod_with_node_tokens_issued.inc();
    }
    if with_jti {
        m.tokens_issued_with_identifier.inc();
    }
}

/// Step 8: the answer: the request with its spec completed and a status whose expiry is the
/// requested one (not the extended), so clients refresh normally.
#[allow(clippy::too_many_arguments)]
fn answer(
    mut request: TokenRequest,
    ns: &str,
    sa_name: &str,
    uid: String,
    audiences: Vec<String>,
    expiration: i64,
    token: String,
    now: i64,
) -> Result<Vec<u8>, StatusError> {
    let time = |secs: i64| {
        k8s_openapi::jiff::Timestamp::from_second(secs)
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
            .map_err(StatusError::internal)
    };
    request.metadata = ObjectMeta {
        name: Some(sa_name.to_owned()),
        namespace: Some(ns.to_owned()),
        uid: Some(uid),
        creation_timestamp: Some(time(now)?),
        ..ObjectMeta::default()
    };
    request.spec.audiences = audiences;
    request.spec.expiration_seconds = Some(expiration);
    request.status = Some(TokenRequestStatus { token, expiration_timestamp: time(now + expiration)? });
    // Serialized straight from the typed object: no intermediate JSON tree on the hot path.
    serde_json::to_vec(&request).map_err(StatusError::internal)
}

/// A 409 as `errors.NewConflict` words it for TokenRequest.
fn conflict(name: &str, detail: &str) -> StatusError {
    StatusError::new(
        StatusCode::CONFLICT,
        "Conflict",
        format!("Operation cannot be fulfilled on TokenRequest.authentication.k8s.io {name:?}: {detail}"),
    )
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`.
pub async fn review(
    state: &AppState,
    spec: k8s_openapi::api::authentication::v1::TokenReviewSpec,
) -> Result<Response, StatusError> {
    let token = spec.token.clone().unwrap_or_default();
    let requested: Option<Vec<String>> = spec.audiences.clone().filter(|a| !a.is_empty());
    // Static tokens are audience-agnostic only for the API server's own audiences
    // (authenticator.WrapAudienceAgnosticToken): a review for another audience does not
    // authenticate them, and the answer's audiences are the intersection.
    let api_audiences = &state.api_audiences;
    let static_audiences: Vec<String> = match &requested {
        None => api_audiences.clone(),
        Some(r) => r.iter().filter(|a| api_audiences.contains(a)).cloned().collect(),
    };
    let static_user = state.token_file.lookup(&token).filter(|_| !static_audiences.is_empty());
    let status = if token.is_empty() {
        json!({"authenticated": false, "error": "token must not be empty"})
    } else if let Some(user) = static_user {
        let user = crate::server::User::from(user);
        json!({"authenticated": true, "user": {"username": user.name, "uid": user.uid, "groups": user.groups},
               "audiences": static_audiences})
    } else {
        match state.authenticate_cached(&token, requested.as_deref()).await {
            Ok(a) => {
                // The authenticated group is added to every user, as upstream's group adder does.
                let mut user = a.user.clone();
                if !user.groups.iter().any(|g| g == "system:authenticated") {
                    user.groups.push("system:authenticated".into());
                }
                json!({"authenticated": true, "user": user, "audiences": a.audiences})
            }
            Err(e) if e.is_not_mine() => json!({"authenticated": false, "error": "invalid bearer token"}),
            Err(e) => json!({"authenticated": false, "error": format!("[invalid bearer token, {e}]")}),
        }
    };
    let mut response = json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null}, "spec": spec, "status": status});
    if let Some(a) = requested
        && response["status"]["authenticated"] == json!(true)
    {
        response["spec"]["audiences"] = json!(a);
    }
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// The attributes an access review asks about (`resourceAttributes` or
/// `nonResourceAttributes`).
fn review_attributes(spec: &Value, user: crate::server::User) -> Result<crate::server::authz::Attributes, StatusError> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut attrs = crate::server::authz::Attributes::non_resource(user, "", "");
    if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        attrs.resource_request = true;
        attrs.verb = s(r, "verb");
        attrs.namespace = s(r, "namespace");
        attrs.api_group = s(r, "group");
        attrs.resource = s(r, "resource");
        attrs.subresource = s(r, "subresource");
        attrs.name = s(r, "name");
        if let Some(f) = r.get("fieldSelector").and_then(|f| f.get("rawSelector")).and_then(Value::as_str) {
            attrs.field_selector = f.to_owned();
        }
    } else if let Some(n) = spec.get("nonResourceAttributes").filter(|n| n.is_object()) {
        attrs.verb = s(n, "verb");
        attrs.path = s(n, "path");
    } else {
        return Err(StatusError::invalid(
            "spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".to_owned(),
        ));
    }
    Ok(attrs)
}

async fn access_review(
    state: &AppState,
    kind: &str,
    body: &Value,
    user: crate::server::User,
) -> Result<Response, StatusError> {
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let attrs = review_attributes(&spec, user)?;
    let decision = crate::server::authz::authorize(state.authz(), &state.authorization_modes, &attrs).await?;
    let status = match decision {
        crate::server::authz::AuthorizationDecision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        crate::server::authz::AuthorizationDecision::Deny(reason) => {
            json!({"allowed": false, "denied": true, "reason": reason})
        }
        crate::server::authz::AuthorizationDecision::NoOpinion(reason) => json!({"allowed": false, "reason": reason}),
    };
    let response = json!({"kind": kind, "apiVersion": "authorization.k8s.io/v1", "metadata": {"creationTimestamp": null},
        "spec": spec, "status": status});
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews` (`kubectl auth whoami`): the
/// requesting user's attributes as authentication saw them; `uid` and `extra` only when
/// set, as upstream.
pub fn self_subject_review(user: &crate::server::User, body: &Value) -> Result<Response, StatusError> {
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && kind != "SelfSubjectReview"
    {
        return Err(StatusError::bad_request(format!("expected a SelfSubjectReview, got {kind:?}")));
    }
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    let response = json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null}, "status": {"userInfo": info}});
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: may the requesting (or
/// impersonated) user do this?
pub async fn self_subject_access_review(
    state: &AppState,
    user: &crate::server::User,
    body: Value,
) -> Result<Response, StatusError> {
    access_review(state, "SelfSubjectAccessReview", &body, user.clone()).await
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: may `spec.user`/`spec.groups`?
pub async fn subject_access_review(state: &AppState, body: Value) -> Result<Response, StatusError> {
    subject_access_review_as(state, "SubjectAccessReview", body).await
}

/// A (Local)SubjectAccessReview of `spec.user`/`spec.groups`, answered as `kind`.
pub async fn subject_access_review_as(state: &AppState, kind: &str, body: Value) -> Result<Response, StatusError> {
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let name = spec.get("user").and_then(Value::as_str).unwrap_or("").to_owned();
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if name.is_empty() && groups.is_empty() {
        return Err(StatusError::invalid(
            "spec.user: Invalid value: \"\": at least one of user or group must be specified".to_owned(),
        ));
    }
    let extra = spec
        .get("extra")
        .and_then(|e| serde_json::from_value::<std::collections::BTreeMap<String, Vec<String>>>(e.clone()).ok())
        .unwrap_or_default();
    let user =
        crate::server::User { name, uid: spec.get("uid").and_then(Value::as_str).unwrap_or("").into(), groups, extra };
    access_review(state, kind, &body, user).await
}

#[cfg(test)]
mod create_token_tests {
    use super::*;
    use serde::Deserialize;

    fn request(v: Value) -> TokenRequest {
        TokenRequest::deserialize(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_body_may_only_name_the_urls_account() {
        assert!(check_target(&request(json!({"metadata": {"name": "sa", "namespace": "ns"}})), "ns", "sa").is_ok());
        let other = check_target(&request(json!({"metadata": {"name": "admin"}})), "ns", "sa").unwrap_err();
        assert!(
            other
                .message
                .ends_with("metadata.name: Invalid value: \"admin\": must match the service account name if specified"),
            "{}",
            other.message
        );
        assert!(check_target(&request(json!({"metadata": {"namespace": "kube-system"}})), "ns", "sa").is_err());
    }

    #[test]
    fn answers_carry_the_requested_expiry_and_the_bound_reference() {
        let r =
            request(json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"}}}));
        let a = answer(r, "ns", "sa", "uid-1".into(), vec!["aud".into()], 600, "tok".into(), 1_700_000_000).unwrap();
        let a: Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(a["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(a["kind"], "TokenRequest");
        assert_eq!(
            a["metadata"],
            json!({"name": "sa", "namespace": "ns", "uid": "uid-1", "creationTimestamp": "2023-11-14T22:13:20Z"})
        );
        assert_eq!(
            a["spec"],
            json!({"audiences": ["aud"], "expirationSeconds": 600,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"}})
        );
        assert_eq!(a["status"], json!({"token": "tok", "expirationTimestamp": "2023-11-14T22:23:20Z"}));
    }
}
