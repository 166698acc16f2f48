//! The Node authorizer (plugin/pkg/auth/authorizer/node): a kubelet identity
//! `system:node:<name>` in `system:nodes` may read its Node and the pods bound to it, the
//! secrets, config maps and service accounts those pods reference, request tokens for
//! those service accounts, update its pods' status and create events. It never denies: it
//! has no opinion on the rest, so RBAC grants still apply.

use serde_json::Value;

use super::node_graph::NodeGraph;
use super::{Attributes, AuthorizationDecision};
use crate::field::Field;
use crate::store::{FieldSelector, ListOptions, ObjectKey, Store, StoreError};

/// The node name of a node identity.
pub fn node_name(user: &crate::server::User) -> Option<&str> {
    let name = user.name.strip_prefix("system:node:")?;
    (!name.is_empty() && user.groups.iter().any(|g| g == "system:nodes")).then_some(name)
}

fn no_relationship(node: &str) -> AuthorizationDecision {
    AuthorizationDecision::NoOpinion(format!("no relationship found between node '{node}' and this object"))
}

/// Pods bound to `node` in `namespace`.
async fn pods_on(store: &dyn Store, node: &str, namespace: &str) -> Result<Vec<Value>, StoreError> {
    let fields =
        FieldSelector::parse(&format!("spec.nodeName={node}")).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let options = ListOptions { fields, ..Default::default() };
    Ok(store.list("pods", Some(namespace), &options).await?.items)
}

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    v.field(path).and_then(Value::as_str).unwrap_or("")
}

fn each<'a>(v: &'a Value, path: &str) -> impl Iterator<Item = &'a Value> {
    v.field(path).and_then(Value::as_array).into_iter().flatten()
}

/// Visits every object `pod` references that its node may read (`secrets` | `configmaps` |
/// `serviceaccounts`, name) until `visit` returns true; whether it did.
fn any_ref(pod: &Value, mut visit: impl FnMut(&'static str, &str) -> bool) -> bool {
    let mut seen = |resource: &'static str, name: &str| !name.is_empty() && visit(resource, name);
    let sa = str_at(pod, "/spec/serviceAccountName");
    if seen("serviceaccounts", if sa.is_empty() { "default" } else { sa }) {
        return true;
    }
    if each(pod, "/spec/imagePullSecrets").any(|r| seen("secrets", str_at(r, "/name"))) {
        return true;
    }
    for v in each(pod, "/spec/volumes") {
        if seen("secrets", str_at(v, "/secret/secretName")) || seen("configmaps", str_at(v, "/configMap/name")) {
            return true;
        }
        for source in each(v, "/projected/sources") {
            if seen("secrets", str_at(source, "/secret/name")) || seen("configmaps", str_at(source, "/configMap/name"))
            {
                return true;
            }
        }
    }
    let containers = each(pod, "/spec/containers")
        .chain(each(pod, "/spec/initContainers"))
        .chain(each(pod, "/spec/ephemeralContainers"));
    for c in containers {
        for e in each(c, "/env") {
            if seen("secrets", str_at(e, "/valueFrom/secretKeyRef/name"))
                || seen("configmaps", str_at(e, "/valueFrom/configMapKeyRef/name"))
            {
                return true;
            }
        }
        for e in each(c, "/envFrom") {
            if seen("secrets", str_at(e, "/secretRef/name")) || seen("configmaps", str_at(e, "/configMapRef/name")) {
                return true;
            }
        }
    }
    false
}

/// Every object `pod` references that its node may read — the node authorizer graph's
/// edges from a pod.
pub fn pod_refs(pod: &Value) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    any_ref(pod, |resource, name| {
        out.push((resource, name.to_owned()));
        false
    });
    out
}

/// Whether `pod` references the object (`secrets`, `configmaps`, `serviceaccounts`); stops
/// at the first match and allocates nothing (the store scan's per-pod check).
pub fn pod_references(pod: &Value, resource: &str, name: &str) -> bool {
    any_ref(pod, |r, n| r == resource && n == name)
}

/// The object a field selector names when it is exactly `metadata.name=X` (or `==`), as
/// upstream's RequestInfoFactory reads a list or watch of one object.
fn single_name(selector: &str) -> Option<&str> {
    let value = selector.strip_prefix("metadata.name")?;
    let value = value.strip_prefix("==").or_else(|| value.strip_prefix('='))?;
    (!value.is_empty() && !value.contains([',', '=', '!'])).then_some(value)
}

/// The node authorizer's decision (NoOpinion for non-node users).
///
/// Allows come from the graph; what the graph does not allow is checked against the store
/// (a pod whose watch event has not arrived yet), so the graph only ever saves work.
pub async fn authorize(
    store: &dyn Store,
    graph: &NodeGraph,
    attrs: &Attributes,
) -> Result<AuthorizationDecision, StoreError> {
    let Some(node) = node_name(&attrs.user) else { return Ok(AuthorizationDecision::NoOpinion(String::new())) };
    if !attrs.resource_request {
        return Ok(AuthorizationDecision::NoOpinion(String::new()));
    }
    let verb = attrs.verb.as_str();
    let (group, resource, sub) = (attrs.api_group.as_str(), attrs.resource.as_str(), attrs.subresource.as_str());
    match (group, resource, sub) {
        ("", "nodes", _) => {
            // A create names no object in its path: allowed here as by upstream's node rules,
            // and NodeRestriction admission confines it to the node's own Node.
            let own = attrs.name == node
                || (attrs.name.is_empty() && verb == "create" && sub.is_empty())
                || (attrs.name.is_empty()
                    && matches!(verb, "list" | "watch")
                    && attrs.field_selector == format!("metadata.name={node}"));
            let allowed_verb = matches!(verb, "get" | "list" | "watch" | "create" | "update" | "patch");
            if own && allowed_verb {
                return Ok(AuthorizationDecision::Allow(String::new()));
            }
            Ok(AuthorizationDecision::NoOpinion(format!(
                "node '{node}' cannot read all nodes, only its own Node object"
            )))
        }
        ("", "pods", "") if matches!(verb, "list" | "watch") => {
            if attrs.field_selector == format!("spec.nodeName={node}") {
                return Ok(AuthorizationDecision::Allow(String::new()));
            }
            Ok(AuthorizationDecision::NoOpinion("can only list/watch pods with spec.nodeName field selector".into()))
        }
        ("", "pods", "" | "status") if !attrs.name.is_empty() => {
            let allowed_verb = if sub.is_empty() {
                matches!(verb, "get" | "delete")
            } else {
                matches!(verb, "get" | "update" | "patch")
            };
            if !allowed_verb {
                return Ok(no_relationship(node));
            }
            if graph.pod_on(node, &attrs.namespace, &attrs.name) {
                return Ok(AuthorizationDecision::Allow(String::new()));
            }
            let key = ObjectKey::namespaced("pods", &attrs.namespace, &attrs.name);
            match store.get_shared(&key).await {
                Ok(pod) if str_at(&pod.object, "/spec/nodeName") == node => {
                    Ok(AuthorizationDecision::Allow(String::new()))
                }
                Ok(_) | Err(StoreError::NotFound { .. }) => Ok(no_relationship(node)),
                Err(e) => Err(e),
            }
        }
        ("", "events", "") if verb == "create" || verb == "patch" => Ok(AuthorizationDecision::Allow(String::new())),
        // NodeRules: Services are read (the kubelet's service environment variables).
        ("", "services", "") if matches!(verb, "get" | "list" | "watch") => {
            Ok(AuthorizationDecision::Allow(String::new()))
        }
        // NodeRules: a node's heartbeat Lease; NodeRestriction confines it to its own.
        ("coordination.k8s.io", "leases", "") if matches!(verb, "get" | "create" | "update" | "patch" | "delete") => {
            Ok(AuthorizationDecision::Allow(String::new()))
        }
        ("events.k8s.io", "events", "") if verb == "create" || verb == "patch" => {
            Ok(AuthorizationDecision::Allow(String::new()))
        }
        // authorizeReadNamespacedObject, with upstream's reasons.
        ("", "secrets" | "configmaps" | "serviceaccounts", _) if sub != "token" => {
            if !matches!(verb, "get" | "list" | "watch") {
                return Ok(AuthorizationDecision::NoOpinion("can only read resources of this type".into()));
            }
            if !sub.is_empty() {
                return Ok(AuthorizationDecision::NoOpinion("cannot read subresource".into()));
            }
            if attrs.namespace.is_empty() {
                return Ok(AuthorizationDecision::NoOpinion("can only read namespaced object of this type".into()));
            }
            // A list or watch names its one object by a `metadata.name` field selector (the
            // kubelet's Watch strategy); upstream's RequestInfo takes the name from it.
            let name = match verb {
                "get" => attrs.name.as_str(),
                _ if attrs.name.is_empty() => single_name(&attrs.field_selector).unwrap_or_default(),
                _ => "",
            };
            if name.is_empty() {
                return Ok(AuthorizationDecision::NoOpinion("No Object name found".into()));
            }
            if graph.references(node, &attrs.namespace, resource, name) {
                return Ok(AuthorizationDecision::Allow(String::new()));
            }
            let pods = pods_on(store, node, &attrs.namespace).await?;
            if pods.iter().any(|p| pod_references(p, resource, name)) {
                return Ok(AuthorizationDecision::Allow(String::new()));
            }
            Ok(no_relationship(node))
        }
        // NodeRules: a node asks for and reads certificates (rotation's requests, as
        // itself; who approves them is the approver's SubjectAccessReview).
        ("certificates.k8s.io", "certificatesigningrequests", "")
            if matches!(verb, "create" | "get" | "list" | "watch") =>
        {
            Ok(AuthorizationDecision::Allow(String::new()))
        }
        // NodeRules: the node checks who may use its own API (webhook authentication and
        // authorization of requests to it); these creates change nothing.
        ("authentication.k8s.io", "tokenreviews", "")
        | ("authorization.k8s.io", "subjectaccessreviews" | "localsubjectaccessreviews", "")
            if verb == "create" =>
        {
            Ok(AuthorizationDecision::Allow(String::new()))
        }
        ("", "serviceaccounts", "token") if verb == "create" && !attrs.name.is_empty() => {
            if graph.references(node, &attrs.namespace, "serviceaccounts", &attrs.name) {
                return Ok(AuthorizationDecision::Allow(String::new()));
            }
            let pods = pods_on(store, node, &attrs.namespace).await?;
            if pods.iter().any(|p| pod_references(p, "serviceaccounts", &attrs.name)) {
                return Ok(AuthorizationDecision::Allow(String::new()));
            }
            Ok(no_relationship(node))
        }
        _ => Ok(AuthorizationDecision::NoOpinion(String::new())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_object_is_named_only_by_a_lone_metadata_name_selector() {
        assert_eq!(single_name("metadata.name=cm"), Some("cm"));
        assert_eq!(single_name("metadata.name==cm"), Some("cm"));
        for refused in ["", "metadata.name=", "metadata.name!=cm", "metadata.name=a,metadata.namespace=b", "spec.x=cm"]
        {
            assert_eq!(single_name(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn references_from_volumes_pull_secrets_env_and_service_account() {
        let pod = json!({"spec": {
            "serviceAccountName": "builder",
            "imagePullSecrets": [{"name": "regcred"}],
            "volumes": [{"name": "v", "secret": {"secretName": "vol-secret"}},
                        {"name": "p", "projected": {"sources": [{"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-secret"}}]}},
                        {"name": "c", "configMap": {"name": "vol-cm"}}],
            "containers": [{"name": "a", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}}],
                            "envFrom": [{"configMapRef": {"name": "envfrom-cm"}}]}],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-secret"}}]}]}});
        for s in ["regcred", "vol-secret", "proj-secret", "env-secret", "init-secret"] {
            assert!(pod_references(&pod, "secrets", s), "{s}");
        }
        for c in ["proj-cm", "vol-cm", "envfrom-cm"] {
            assert!(pod_references(&pod, "configmaps", c), "{c}");
        }
        assert!(!pod_references(&pod, "secrets", "vol-cm"));
        assert!(pod_references(&pod, "serviceaccounts", "builder"));
        assert!(pod_references(&json!({"spec": {}}), "serviceaccounts", "default"));
        // The graph's edges are exactly these references.
        let mut refs = pod_refs(&pod);
        refs.sort();
        let mut expected: Vec<(&str, String)> = ["regcred", "vol-secret", "proj-secret", "env-secret", "init-secret"]
            .map(|s| ("secrets", s.to_owned()))
            .into_iter()
            .chain(["proj-cm", "vol-cm", "envfrom-cm"].map(|c| ("configmaps", c.to_owned())))
            .chain([("serviceaccounts", "builder".to_owned())])
            .collect();
        expected.sort();
        assert_eq!(refs, expected);
    }
}
