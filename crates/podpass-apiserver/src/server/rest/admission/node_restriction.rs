//! NodeRestriction admission for TokenRequests by nodes
//! (plugin/pkg/admission/noderestriction `admitServiceAccount` and the
//! ServiceAccountNodeAudienceRestriction check): a node may only request tokens bound to a
//! pod scheduled on it, and only for an audience the pod's projected token volumes name or
//! RBAC grants with verb `request-serviceaccounts-token-audience`.

use k8s_openapi::api::authentication::v1::TokenRequest;
use serde_json::Value;

use crate::field::Field;
use crate::server::authz::{self, Attributes, AuthorizationDecision};
use crate::server::status::StatusError;
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
pub(super) async fn admit_token_request(
    state: &AppState,
    user: &User,
    namespace: &str,
    sa_name: &str,
    request: &serde_json::Value,
) -> Result<(), StatusError> {
    let Some(_) = authz::node::node_name(user) else { return Ok(()) };
    // The request as the handler decoded it (it reached admission decoded).
    let request: TokenRequest = serde_json::from_value(request.clone()).map_err(StatusError::internal)?;
    admit(state, user, namespace, sa_name, &request).await
}

async fn admit(
    state: &AppState,
    user: &User,
    namespace: &str,
    sa_name: &str,
    request: &TokenRequest,
) -> Result<(), StatusError> {
    let Some(node) = authz::node::node_name(user) else { return Ok(()) };
    let forbidden =
        |msg: String| StatusError::forbidden_raw(format!("serviceaccounts {sa_name:?} is forbidden: {msg}"));
    let Some(bound) = request.spec.bound_object_ref.as_ref() else {
        return Err(forbidden("node requested token not bound to a pod".into()));
    };
    let field = |v: &Option<String>| v.as_deref().unwrap_or_default().to_owned();
    let (api_version, kind, name, uid) =
        (field(&bound.api_version), field(&bound.kind), field(&bound.name), field(&bound.uid));
    let (api_version, kind, name, uid) = (api_version.as_str(), kind.as_str(), name.as_str(), uid.as_str());
    if api_version != "v1" || kind != "Pod" || name.is_empty() {
        return Err(forbidden("node requested token not bound to a pod".into()));
    }
    if uid.is_empty() {
        return Err(forbidden("node requested token with a pod binding without a uid".into()));
    }
    let pod = match state.store.get_shared(&ObjectKey::namespaced("pods", namespace, name)).await {
        Ok(p) => p,
        Err(StoreError::NotFound { .. }) => return Err(StatusError::not_found("pods", name)),
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
    let audiences: Vec<&str> = request.spec.audiences.iter().map(String::as_str).collect();
    if audiences.len() > 1 {
        return Err(forbidden("node may only request 0 or 1 audiences".into()));
    }
    let audience = audiences.first().copied().unwrap_or("");
    if pod_names_audience(pod, audience) {
        return Ok(());
    }
    let attrs = Attributes::resource(user, "request-serviceaccounts-token-audience", "", audience, namespace, sa_name);
    match authz::authorize(state.authz(), &state.authorization_modes, &attrs).await {
        Ok(AuthorizationDecision::Allow(_)) => Ok(()),
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

/// Labels a kubelet may set on its own Node (kubelet apis `kubeletLabels`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "kubernetes.io/os",
    "kubernetes.io/arch",
];

fn label_namespace(label: &str) -> &str {
    label.split_once('/').map_or("", |(ns, _)| ns)
}

fn in_domain(namespace: &str, domain: &str) -> bool {
    namespace == domain || namespace.strip_suffix(domain).is_some_and(|p| p.ends_with('.'))
}

/// `IsKubeletLabel`.
fn is_kubelet_label(label: &str) -> bool {
    let ns = label_namespace(label);
    KUBELET_LABELS.contains(&label) || in_domain(ns, "kubelet.kubernetes.io") || in_domain(ns, "node.kubernetes.io")
}

/// `getForbiddenLabels`: the node-restriction domain, and kubernetes.io / k8s.io labels that
/// are not kubelet labels.
pub fn forbidden_node_labels<'a>(modified: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = modified
        .filter(|label| {
            let ns = label_namespace(label);
            let restricted = in_domain(ns, "node-restriction.kubernetes.io");
            let kubernetes = in_domain(ns, "kubernetes.io") || in_domain(ns, "k8s.io");
            restricted || (kubernetes && !is_kubelet_label(label))
        })
        .map(str::to_owned)
        .collect();
    out.sort();
    out.dedup();
    out
}

fn labels(node: &Value) -> serde_json::Map<String, Value> {
    node.field("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default()
}

/// NodeRestriction `admitNode`: a node writes only its own Node object, may not give it
/// labels that steer privileged workloads (node-restriction.kubernetes.io, unknown
/// kubernetes.io/k8s.io labels) and may not change its taints.
pub fn admit_node_write(user: &User, name: &str, new: &Value, old: Option<&Value>) -> Result<(), StatusError> {
    let Some(node) = authz::node::node_name(user) else { return Ok(()) };
    let forbidden = |msg: String| StatusError::forbidden_raw(format!("nodes {name:?} is forbidden: {msg}"));
    if node != name {
        return Err(forbidden(format!("node {node:?} is not allowed to modify node {name:?}")));
    }
    let new_labels = labels(new);
    match old {
        None => {
            let bad = forbidden_node_labels(new_labels.keys().map(String::as_str));
            if !bad.is_empty() {
                return Err(forbidden(format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    bad.join(", ")
                )));
            }
        }
        Some(old) => {
            let old_labels = labels(old);
            // getModifiedLabels: added, removed or changed
            let modified = new_labels
                .iter()
                .filter(|(k, v)| old_labels.get(*k) != Some(v))
                .map(|(k, _)| k.as_str())
                .chain(old_labels.keys().filter(|k| !new_labels.contains_key(*k)).map(String::as_str));
            let bad = forbidden_node_labels(modified);
            if !bad.is_empty() {
                return Err(forbidden(format!("is not allowed to modify labels: {}", bad.join(", "))));
            }
            let taints = |v: &Value| v.field("/spec/taints").filter(|t| !t.is_null()).cloned();
            if taints(new) != taints(old) {
                return Err(forbidden(format!("node {node:?} is not allowed to modify taints")));
            }
        }
    }
    Ok(())
}

/// The namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// NodeRestriction `admitLease`: a node writes (creates, changes, deletes) only the Lease
/// named after it in `kube-node-lease`.
pub fn admit_lease_write(user: &User, namespace: &str, name: &str) -> Result<(), StatusError> {
    let Some(node) = authz::node::node_name(user) else { return Ok(()) };
    let forbidden =
        |msg: &str| StatusError::forbidden_raw(format!("leases.coordination.k8s.io {name:?} is forbidden: {msg}"));
    if namespace != NODE_LEASE_NAMESPACE {
        return Err(forbidden(&format!("can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace")));
    }
    if name != node {
        return Err(forbidden("can only access node lease with the same name as the requesting node"));
    }
    Ok(())
}

#[cfg(test)]
mod node_write_tests {
    use super::*;
    use serde_json::json;

    fn node_user(name: &str) -> User {
        User {
            name: format!("system:node:{name}"),
            uid: String::new(),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            extra: Default::default(),
        }
    }

    fn node(labels: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}})
    }

    #[test]
    fn a_node_writes_only_its_own_lease() {
        let u = node_user("n1");
        assert_eq!(admit_lease_write(&u, "kube-node-lease", "n1"), Ok(()));
        assert_eq!(
            admit_lease_write(&u, "kube-node-lease", "n2").unwrap_err().message,
            r#"leases.coordination.k8s.io "n2" is forbidden: can only access node lease with the same name as the requesting node"#
        );
        assert_eq!(
            admit_lease_write(&u, "default", "n1").unwrap_err().message,
            r#"leases.coordination.k8s.io "n1" is forbidden: can only access leases in the "kube-node-lease" system namespace"#
        );
        let admin = User { name: "admin".into(), uid: String::new(), groups: vec![], extra: Default::default() };
        assert_eq!(admit_lease_write(&admin, "default", "x"), Ok(()));
    }

    #[test]
    fn a_node_may_not_label_itself_into_restricted_domains() {
        let u = node_user("n1");
        let ok = node(
            json!({"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "node.kubernetes.io/exclude-from-external-load-balancers": "", "example.com/x": "y"}),
        );
        assert_eq!(admit_node_write(&u, "n1", &ok, None), Ok(()));
        let bad = node(
            json!({"node-restriction.kubernetes.io/trusted": "true", "a.node-restriction.kubernetes.io/b": "1", "kubernetes.io/role": "master"}),
        );
        assert_eq!(
            admit_node_write(&u, "n1", &bad, None).unwrap_err().message,
            r#"nodes "n1" is forbidden: node "n1" is not allowed to set the following labels: a.node-restriction.kubernetes.io/b, kubernetes.io/role, node-restriction.kubernetes.io/trusted"#
        );
        let with_restricted = node(json!({"node-restriction.kubernetes.io/trusted": "true"}));
        // an admin set it; the node keeping it is fine, changing or removing it is not
        assert_eq!(admit_node_write(&u, "n1", &with_restricted, Some(&with_restricted)), Ok(()));
        assert_eq!(
            admit_node_write(&u, "n1", &node(json!({})), Some(&with_restricted)).unwrap_err().message,
            r#"nodes "n1" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/trusted"#
        );
        assert!(
            admit_node_write(&u, "n2", &ok, None)
                .unwrap_err()
                .message
                .contains(r#"node "n1" is not allowed to modify node "n2""#)
        );
        let mut tainted = ok.clone();
        tainted["spec"] = json!({"taints": [{"key": "k", "effect": "NoSchedule"}]});
        assert!(
            admit_node_write(&u, "n1", &ok, Some(&tainted))
                .unwrap_err()
                .message
                .ends_with("is not allowed to modify taints")
        );
        // not a node: not this plugin's business
        let admin = User { name: "admin".into(), uid: String::new(), groups: vec![], extra: Default::default() };
        assert_eq!(admit_node_write(&admin, "n1", &bad, None), Ok(()));
    }
}
