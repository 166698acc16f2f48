//! `SelfSubjectRulesReview` (`kubectl auth can-i --list`) and `LocalSubjectAccessReview`,
//! as kube-apiserver serves them: the rules come from each authorizer's `RulesFor`, in the
//! `--authorization-mode` order — RBAC's bindings in scope, the Node authorizer's note that
//! it cannot enumerate a node's rules (`incomplete`), AlwaysAllow's everything.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::server::authz::{self, AuthorizationMode, rules::PolicyRule};
use crate::server::status::StatusError;
use crate::server::{AppState, User};

/// `POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews`: what the requesting (or
/// impersonated) user may do in `spec.namespace`.
pub async fn self_subject_rules_review(state: &AppState, user: &User, body: &Value) -> Result<Response, StatusError> {
    let namespace = body.pointer("/spec/namespace").and_then(Value::as_str).unwrap_or("").to_owned();
    let (rules, incomplete, errors) = rules_for(state, user, &namespace)?;
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    // RBAC's RulesFor: a rule with resources is a resource rule, one with non-resource URLs a
    // non-resource rule (a rule with both is both).
    for rule in rules {
        if !rule.resources.is_empty() {
            let mut r = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups, "resources": rule.resources});
            if !rule.resource_names.is_empty() {
                r["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(r);
        }
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules.push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    let mut status =
        json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": incomplete});
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    let response = json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null}, "spec": {"namespace": namespace}, "status": status});
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// Every authorizer's rules for `user` in `namespace`, whether they are incomplete, and
/// the authorizers' evaluation errors.
fn rules_for(
    state: &AppState,
    user: &User,
    namespace: &str,
) -> Result<(Vec<PolicyRule>, bool, Vec<String>), StatusError> {
    let mut rules = Vec::new();
    let (mut incomplete, mut errors) = (false, Vec::new());
    for mode in &state.authorization_modes {
        match mode {
            AuthorizationMode::Node => {
                if authz::node::node_name(user).is_some() {
                    incomplete = true;
                    errors.push("node authorizer does not support user rule resolution".to_owned());
                }
            }
            AuthorizationMode::Rbac => rules.extend(authz::rbac::rules_for(state.authz().rbac, user, namespace)?),
            AuthorizationMode::AlwaysAllow => rules.extend(authz::rules::full_authority()),
            AuthorizationMode::AlwaysDeny => {}
        }
    }
    Ok((rules, incomplete, errors))
}

/// `POST /apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews`: a
/// SubjectAccessReview confined to `ns` (ValidateLocalSubjectAccessReview).
pub async fn local_subject_access_review(state: &AppState, ns: &str, mut body: Value) -> Result<Response, StatusError> {
    let invalid = |field: &str, value: &Value, detail: &str| {
        StatusError::invalid(format!(
            "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: {field}: Invalid value: {value}: {detail}"
        ))
    };
    match body.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(given) if !given.is_empty() && given != ns => {
            return Err(StatusError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        _ => {}
    }
    if let Some(meta) =
        body.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({}))).and_then(Value::as_object_mut)
    {
        meta.insert("namespace".into(), json!(ns));
    }
    if let Some(attrs) = body.pointer("/spec/resourceAttributes") {
        let given = attrs.get("namespace").cloned().unwrap_or(json!(""));
        if given.as_str() != Some(ns) {
            return Err(invalid("spec.resourceAttributes.namespace", &given, "must match metadata.namespace"));
        }
    }
    if let Some(non) = body.pointer("/spec/nonResourceAttributes").filter(|n| !n.is_null()) {
        let shown = serde_json::to_string(non).unwrap_or_default();
        return Err(invalid("spec.nonResourceAttributes", &json!(shown), "disallowed on this kind of request"));
    }
    super::token::subject_access_review_as(state, "LocalSubjectAccessReview", body).await
}
