//! The bootstrap RBAC policy kube-apiserver creates on start (plugin/pkg/auth/authorizer/rbac/
//! bootstrappolicy): the roles and bindings podpass's users rely on. Missing objects are
//! created on every start; existing ones are left as the admin edited them.

use serde_json::{Value, json};

use crate::server::AppState;
use crate::server::rest::objects::prepare_new;
use crate::server::rest::resources::find;
use crate::server::status::StatusError;
use crate::store::{ObjectKey, StoreError};

const RBAC: &str = "rbac.authorization.k8s.io";

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
           "rules": rules})
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups.iter().map(|g| json!({"apiGroup": RBAC, "kind": "Group", "name": g})).collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
           "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
           "subjects": subjects})
}

/// The bootstrap cluster roles and their bindings.
pub fn policy() -> Vec<(&'static str, Value)> {
    let everyone = ["system:authenticated", "system:unauthenticated"];
    vec![
        (
            "clusterroles",
            role(
                "cluster-admin",
                json!([
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:discovery",
                json!([
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
             "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:basic-user",
                json!([
            {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:public-info-viewer",
                json!([
            {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:service-account-issuer-discovery",
                json!([
            {"nonResourceURLs": ["/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/"],
             "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterroles",
            // As upstream: what a delegating authenticator (registry-auth's
            // --token-review-kubeconfig) is bound to; no binding of its own.
            role(
                "system:auth-delegator",
                json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]),
            ),
        ),
        ("clusterrolebindings", binding("cluster-admin", "cluster-admin", &["system:masters"])),
        ("clusterrolebindings", binding("system:discovery", "system:discovery", &["system:authenticated"])),
        ("clusterrolebindings", binding("system:basic-user", "system:basic-user", &["system:authenticated"])),
        ("clusterrolebindings", binding("system:public-info-viewer", "system:public-info-viewer", &everyone)),
        (
            "clusterrolebindings",
            // As upstream: service accounts only; an operator who wants anonymous discovery
            // binds the role to system:unauthenticated.
            binding(
                "system:service-account-issuer-discovery",
                "system:service-account-issuer-discovery",
                &["system:serviceaccounts"],
            ),
        ),
    ]
}

/// Creates whatever of the bootstrap policy is missing.
pub(crate) async fn ensure(state: &AppState) -> Result<(), StatusError> {
    for (resource, mut object) in policy() {
        let res = find(RBAC, resource).ok_or_else(StatusError::not_found_path)?;
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        prepare_new(res, None, &mut object, podpass_token::now_unix())?;
        match state.store.create(&ObjectKey::cluster(resource, &name), object).await {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
