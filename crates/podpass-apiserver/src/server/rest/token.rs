//! `serviceaccounts/token` (TokenRequest), `tokenreviews` and `selfsubjectaccessreviews`
//! (pkg/registry/core/serviceaccount/storage/token.go and friends).

use crate::field::Field;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use podpass_token::claims::{EXPIRATION_EXTENSION_SECONDS, WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS};
use podpass_token::{ObjectRef, TokenRequest, now_unix};
use serde_json::{Value, json};

use super::super::status::ApiError;
use super::super::{AppState, StoreLookup};
use crate::store::{ObjectKey, StoreError};
use crate::time::format_rfc3339;

/// TokenRequest validation bounds.
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// API default of `spec.expirationSeconds`.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

fn invalid(name: &str, field: &str, value: &Value, detail: &str) -> ApiError {
    ApiError::invalid(format!(
        "TokenRequest.authentication.k8s.io {name:?} is invalid: {field}: Invalid value: {value}: {detail}"
    ))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

async fn get_object(state: &AppState, key: ObjectKey) -> Result<std::sync::Arc<crate::store::Stored>, ApiError> {
    Ok(state.store.get_shared(&key).await?)
}

/// `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`.
pub async fn create_token(
    state: &AppState,
    user: &crate::server::User,
    ns: &str,
    sa_name: &str,
    body: Value,
) -> Result<Response, ApiError> {
    // Admission runs before the handler, as upstream: nodes are restricted first.
    super::node_restriction::admit(state, user, ns, sa_name, &body).await?;
    // 1. name/namespace in the body, if set, must be the URL's.
    let body_name = str_at(&body, "/metadata/name");
    if !body_name.is_empty() && body_name != sa_name {
        return Err(invalid(
            body_name,
            "metadata.name",
            &json!(body_name),
            "must match the service account name if specified",
        ));
    }
    let body_ns = str_at(&body, "/metadata/namespace");
    if !body_ns.is_empty() && body_ns != ns {
        return Err(invalid(
            sa_name,
            "metadata.namespace",
            &json!(body_ns),
            "must match the service account namespace if specified",
        ));
    }
    // 2. the service account, and the request's UID guard.
    let sa_stored = get_object(state, ObjectKey::namespaced("serviceaccounts", ns, sa_name)).await?;
    let sa = &sa_stored.object;
    let sa_uid = str_at(sa, "/metadata/uid").to_owned();
    let req_uid = str_at(&body, "/metadata/uid").to_owned();
    let mut warnings = Vec::new();
    let mut annotations = crate::server::audit::Annotations::default();
    if !req_uid.is_empty() && req_uid != sa_uid {
        let mismatch = format!(
            "the UID in the token request ({req_uid}) does not match the UID of the service account ({sa_uid})"
        );
        if state.token_request_uid_validation {
            return Err(conflict(sa_name, &mismatch));
        }
        warnings.push(format!(
            "{mismatch} but TokenRequestServiceAccountUIDValidation is not enabled. In the future, this will return a conflict error"
        ));
        annotations.0.insert("authentication.k8s.io/token-request-uid-mismatch".into(), mismatch);
    }
    // As upstream: the answer carries the request's UID, else the service account's.
    let response_uid = if req_uid.is_empty() { sa_uid.clone() } else { req_uid };
    // 3-4. audiences and expiry, with defaults and bounds.
    let mut audiences: Vec<String> = body
        .field("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences = state.api_audiences.clone();
    }
    let mut expiration =
        body.field("/spec/expirationSeconds").and_then(Value::as_i64).unwrap_or(DEFAULT_EXPIRATION_SECONDS);
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
    // 6. --service-account-max-token-expiration clamps, with a warning to the client.
    if let Some(max) = state.max_token_expiration
        && expiration > max
    {
        warnings.push(format!("requested expiration of {expiration} seconds shortened to {max} seconds"));
        expiration = max;
    }
    // 5. the bound object.
    let mut request = TokenRequest {
        namespace: ns.to_owned(),
        service_account: ObjectRef::new(sa_name, sa_uid.clone()),
        audiences: audiences.clone(),
        expiration_seconds: expiration,
        ..TokenRequest::default()
    };
    let bound = body.field("/spec/boundObjectRef").cloned().filter(|b| b.is_object());
    if let Some(bound) = &bound {
        let (kind, api_version, name, uid) =
            (str_at(bound, "/kind"), str_at(bound, "/apiVersion"), str_at(bound, "/name"), str_at(bound, "/uid"));
        let uid_conflict = |_actual: &str| {
            conflict(
                name,
                &format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            )
        };
        match (api_version, kind) {
            ("v1", "Pod") => {
                let pod_stored = get_object(state, ObjectKey::namespaced("pods", ns, name)).await?;
                let pod = &pod_stored.object;
                if str_at(pod, "/spec/serviceAccountName") != sa_name {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount {sa_name:?} to pod running with different serviceaccount name."
                    )));
                }
                let pod_uid = str_at(pod, "/metadata/uid");
                if !uid.is_empty() && uid != pod_uid {
                    return Err(uid_conflict(pod_uid));
                }
                request.pod = Some(ObjectRef::new(name, pod_uid));
                let node_name = str_at(pod, "/spec/nodeName");
                if state.features.pod_node_info && !node_name.is_empty() {
                    request.node = match state.store.get(&ObjectKey::cluster("nodes", node_name)).await {
                        Ok(node) => Some(ObjectRef::new(node_name, str_at(&node.object, "/metadata/uid"))),
                        Err(StoreError::NotFound { .. }) => Some(ObjectRef::new(node_name, "")),
                        Err(e) => return Err(ApiError::internal(e)),
                    };
                }
            }
            ("v1", "Secret") => {
                let secret_stored = get_object(state, ObjectKey::namespaced("secrets", ns, name)).await?;
                let secret = &secret_stored.object;
                let secret_uid = str_at(secret, "/metadata/uid");
                if !uid.is_empty() && uid != secret_uid {
                    return Err(uid_conflict(secret_uid));
                }
                request.secret = Some(ObjectRef::new(name, secret_uid));
            }
            ("v1", "Node") => {
                if !state.features.node_binding {
                    return Err(ApiError::bad_request(
                        "cannot bind token to a Node object as the \"ServiceAccountTokenNodeBinding\" feature-gate is disabled",
                    ));
                }
                let node_stored = get_object(state, ObjectKey::cluster("nodes", name)).await?;
                let node = &node_stored.object;
                let node_uid = str_at(node, "/metadata/uid");
                if !uid.is_empty() && uid != node_uid {
                    return Err(uid_conflict(node_uid));
                }
                request.node = Some(ObjectRef::new(name, node_uid));
            }
            _ => {
                let gvk = if api_version.contains('/') {
                    format!("{api_version}, Kind={kind}")
                } else {
                    format!("/{api_version}, Kind={kind}")
                };
                return Err(ApiError::bad_request(format!("cannot bind token to object of type {gvk}")));
            }
        }
    }
    // 7. extended expiration of the automounted token (3607 s, API audiences only).
    if state.extend_expiration
        && request.pod.is_some()
        && expiration == WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS
        && audiences.iter().all(|a| state.api_audiences.contains(a))
    {
        request.expiration_seconds = EXPIRATION_EXTENSION_SECONDS.max(state.max_token_expiration.unwrap_or(0));
        request.warnafter_seconds = WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS;
    }
    let bound_kind = match (&request.pod, &request.secret, &request.node) {
        (Some(_), _, _) => "pod",
        (None, Some(_), _) => "secret",
        (None, None, Some(_)) => "node",
        _ => "none",
    };
    let now = now_unix();
    let minted = state.generator.mint(&request, &state.features, now).map_err(ApiError::internal)?;
    state
        .metrics
        .issued_tokens
        .get_or_create(&crate::server::metrics::IssuedLabels { bound_kind: bound_kind.into() })
        .inc();
    // 8. status: expiry as requested (not as extended), so clients refresh normally.
    let mut spec = json!({"audiences": audiences, "expirationSeconds": expiration});
    if let Some(b) = bound {
        spec["boundObjectRef"] = b;
    }
    let response = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": sa_name, "namespace": ns, "uid": response_uid, "creationTimestamp": format_rfc3339(now)},
        "spec": spec,
        "status": {"token": minted.token.clone(), "expirationTimestamp": format_rfc3339(now + expiration)},
    });
    let mut resp = (StatusCode::CREATED, Json(response)).into_response();
    if let Some(jti) = minted.jti {
        annotations.0.insert("authentication.k8s.io/issued-credential-id".into(), format!("JTI={jti}"));
    }
    resp.extensions_mut().insert(annotations);
    for w in warnings {
        if let Ok(value) = axum::http::HeaderValue::from_str(&format!("299 - {w:?}")) {
            resp.headers_mut().append("warning", value);
        }
    }
    Ok(resp)
}

/// A 409 as `errors.NewConflict` words it for TokenRequest.
fn conflict(name: &str, detail: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "Conflict",
        format!("Operation cannot be fulfilled on TokenRequest.authentication.k8s.io {name:?}: {detail}"),
    )
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`.
pub async fn review(state: &AppState, body: Value) -> Result<Response, ApiError> {
    let token = str_at(&body, "/spec/token").to_owned();
    let requested: Option<Vec<String>> = body
        .field("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .filter(|a: &Vec<String>| !a.is_empty());
    let lookup = StoreLookup { store: state.store.as_ref() };
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
        let cached = state.token_cache.get(&token, requested.as_deref());
        let now = now_unix();
        let result = match cached {
            Some(a) => Ok(a),
            None => state.authenticator.authenticate(&token, requested.as_deref(), &lookup, now).await.map(|a| {
                state.count_token_use(&a);
                state.token_cache.insert(&token, requested.as_deref(), a, now)
            }),
        };
        match result {
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
    let mut response = json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null}, "spec": body.get("spec").cloned().unwrap_or(json!({})), "status": status});
    if let Some(a) = requested
        && response["status"]["authenticated"] == json!(true)
    {
        response["spec"]["audiences"] = json!(a);
    }
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// The attributes an access review asks about (`resourceAttributes` or
/// `nonResourceAttributes`).
fn review_attributes(spec: &Value, user: crate::server::User) -> Result<crate::server::authz::Attributes, ApiError> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut attrs = crate::server::authz::Attributes {
        user,
        verb: String::new(),
        namespace: String::new(),
        api_group: String::new(),
        resource: String::new(),
        subresource: String::new(),
        name: String::new(),
        resource_request: false,
        path: String::new(),
        field_selector: String::new(),
    };
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
        return Err(ApiError::invalid(
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
) -> Result<Response, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let attrs = review_attributes(&spec, user)?;
    let decision = crate::server::authz::authorize(state.store.as_ref(), &state.authorization_modes, &attrs).await?;
    let status = match decision {
        crate::server::authz::Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        crate::server::authz::Decision::Deny(reason) => json!({"allowed": false, "denied": true, "reason": reason}),
        crate::server::authz::Decision::NoOpinion(reason) => json!({"allowed": false, "reason": reason}),
    };
    let response = json!({"kind": kind, "apiVersion": "authorization.k8s.io/v1", "metadata": {"creationTimestamp": null},
        "spec": spec, "status": status});
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: may the requesting (or
/// impersonated) user do this?
pub async fn self_subject_access_review(
    state: &AppState,
    user: &crate::server::User,
    body: Value,
) -> Result<Response, ApiError> {
    access_review(state, "SelfSubjectAccessReview", &body, user.clone()).await
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: may `spec.user`/`spec.groups`?
pub async fn subject_access_review(state: &AppState, body: Value) -> Result<Response, ApiError> {
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
        return Err(ApiError::invalid(
            "spec.user: Invalid value: \"\": at least one of user or group must be specified".to_owned(),
        ));
    }
    let extra = spec
        .get("extra")
        .and_then(|e| serde_json::from_value::<std::collections::BTreeMap<String, Vec<String>>>(e.clone()).ok())
        .unwrap_or_default();
    let user =
        crate::server::User { name, uid: spec.get("uid").and_then(Value::as_str).unwrap_or("").into(), groups, extra };
    access_review(state, "SubjectAccessReview", &body, user).await
}
