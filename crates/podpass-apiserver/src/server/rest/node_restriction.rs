//! NodeRestriction admission for TokenRequests by nodes
//! (plugin/pkg/admission/noderestriction `admitServiceAccount` and the
//! ServiceAccountNodeAudienceRestriction check): a node may only request tokens bound to a
//! pod scheduled on it, and only for an audience the pod's projected token volumes name or
//! RBAC grants with verb `request-serviceaccounts-token-audience`.

use serde_json::Value;

use crate::field::Field;
use crate::server::authz::{self, Attributes, Decision};
use crate::server::status::ApiError;
use crate::server::{AppState, User};
use crate::store::{ObjectKey, StoreError};

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    v.field(path).and_then(Value::as_str).unwrap_or("")
}

/// Whether a projected `serviceAccountToken` source of the pod names `audience` (a source
/// without an audience names `""`, the API server's).
pub fn pod_names_audience(pod: &Value, audience: &str) -> bool {
    pod.field("/spec/volumes").and_then(Value::as_array).into_iter().flatten().any(|volume| {
        volume
            .field("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|source| source.get("serviceAccountToken").is_some_and(|t| str_at(t, "/audience") == audience))
    })
}

/// Admits (or refuses) a TokenRequest for `namespace/sa_name` by `user`.
pub async fn admit(
    state: &AppState,
    user: &User,
    namespace: &str,
    sa_name: &str,
    body: &Value,
) -> Result<(), ApiError> {
    let Some(node) = authz::node::node_name(user) else { return Ok(()) };
    let forbidden = |msg: String| ApiError::forbidden_raw(format!("serviceaccounts {sa_name:?} is forbidden: {msg}"));
    let bound = body.field("/spec/boundObjectRef").filter(|b| b.is_object());
    let Some(bound) = bound else { return Err(forbidden("node requested token not bound to a pod".into())) };
    let (api_version, kind, name, uid) =
        (str_at(bound, "/apiVersion"), str_at(bound, "/kind"), str_at(bound, "/name"), str_at(bound, "/uid"));
    if api_version != "v1" || kind != "Pod" || name.is_empty() {
        return Err(forbidden("node requested token not bound to a pod".into()));
    }
    if uid.is_empty() {
        return Err(forbidden("node requested token with a pod binding without a uid".into()));
    }
    let pod = match state.store.get_shared(&ObjectKey::namespaced("pods", namespace, name)).await {
        Ok(p) => p,
        Err(StoreError::NotFound { .. }) => return Err(ApiError::not_found("pods", name)),
        Err(e) => return Err(forbidden(e.to_string())),
    };
    let pod = &pod.object;
    if str_at(pod, "/metadata/uid") != uid {
        return Err(forbidden(format!(
            "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
        )));
    }
    if str_at(pod, "/spec/nodeName") != node {
        return Err(forbidden("node requested token bound to a pod scheduled on a different node".into()));
    }
    if !state.node_audience_restriction {
        return Ok(());
    }
    let audiences: Vec<&str> = body
        .field("/spec/audiences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if audiences.len() > 1 {
        return Err(forbidden("node may only request 0 or 1 audiences".into()));
    }
    let audience = audiences.first().copied().unwrap_or("");
    if pod_names_audience(pod, audience) {
        return Ok(());
    }
    let attrs = Attributes {
        user: user.clone(),
        verb: "request-serviceaccounts-token-audience".into(),
        namespace: namespace.into(),
        api_group: String::new(),
        resource: audience.into(),
        subresource: String::new(),
        name: sa_name.into(),
        resource_request: true,
        path: String::new(),
        field_selector: String::new(),
    };
    match authz::authorize(state.store.as_ref(), &state.authorization_modes, &attrs).await {
        Ok(Decision::Allow(_)) => Ok(()),
        Ok(_) => Err(forbidden(format!(
            "audience {audience:?} not found in pod spec volume, system:node:{node} is not authorized to request tokens for this audience"
        ))),
        Err(e) => Err(forbidden(format!(
            "audience {audience:?} not found in pod spec volume, error authorizing system:node:{node} to request tokens for this audience: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn projected_sources_name_audiences() {
        let pod = json!({"spec": {"volumes": [
            {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}},
            {"name": "reg", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "registry.example"}}]}},
            {"name": "s", "secret": {"secretName": "x"}}]}});
        assert!(pod_names_audience(&pod, ""), "the automounted volume names the API server audience");
        assert!(pod_names_audience(&pod, "registry.example"));
        assert!(!pod_names_audience(&pod, "other"));
        assert!(!pod_names_audience(&json!({"spec": {}}), ""));
    }
}
