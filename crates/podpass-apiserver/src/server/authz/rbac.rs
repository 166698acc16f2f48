//! The RBAC authorizer (plugin/pkg/auth/authorizer/rbac and rbac/validation): bindings
//! whose subjects cover the user, the rules of their roles, upstream matching of verbs,
//! groups, resources (`resource/subresource`, `*/subresource`), names and non-resource
//! URLs.

use serde_json::Value;

use super::{Attributes, Decision};
use crate::field::Field;
use crate::store::{ListOptions, ObjectKey, Store, StoreError};

fn strings<'a>(rule: &'a Value, field: &str) -> impl Iterator<Item = &'a str> {
    rule.get(field).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
}

fn has(rule: &Value, field: &str, wanted: &str) -> bool {
    strings(rule, field).any(|s| s == wanted)
}

/// `RuleAllows`.
pub fn rule_allows(attrs: &Attributes, rule: &Value) -> bool {
    if !(has(rule, "verbs", "*") || has(rule, "verbs", &attrs.verb)) {
        return false;
    }
    if !attrs.resource_request {
        // NonResourceURLMatches: `*`, exact, or a `prefix*`.
        return strings(rule, "nonResourceURLs").any(|u| {
            u == "*" || u == attrs.path || u.strip_suffix('*').is_some_and(|prefix| attrs.path.starts_with(prefix))
        });
    }
    if !(has(rule, "apiGroups", "*") || has(rule, "apiGroups", &attrs.api_group)) {
        return false;
    }
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let resource_ok = strings(rule, "resources").any(|r| {
        r == "*" || r == combined || (!attrs.subresource.is_empty() && r == format!("*/{}", attrs.subresource))
    });
    if !resource_ok {
        return false;
    }
    let mut names = strings(rule, "resourceNames").peekable();
    names.peek().is_none() || names.any(|n| n == attrs.name)
}

/// `appliesToUser` for one subject; `namespace` is the binding's (empty for cluster scope).
fn subject_applies(attrs: &Attributes, subject: &Value, namespace: &str) -> bool {
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => attrs.user.name == name,
        "Group" => attrs.user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let sa_ns = subject.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(namespace);
            !sa_ns.is_empty() && attrs.user.name == format!("system:serviceaccount:{sa_ns}:{name}")
        }
        _ => false,
    }
}

fn binding_applies(attrs: &Attributes, binding: &Value, namespace: &str) -> Option<String> {
    binding
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| subject_applies(attrs, s, namespace))
        .map(|s| {
            format!(
                "{} {:?}",
                s.get("kind").and_then(Value::as_str).unwrap_or(""),
                s.get("name").and_then(Value::as_str).unwrap_or("")
            )
        })
}

async fn role_rules(store: &dyn Store, binding: &Value, namespace: &str) -> Result<Option<Value>, StoreError> {
    let kind = binding.field("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
    let name = binding.field("/roleRef/name").and_then(Value::as_str).unwrap_or("");
    let key = match kind {
        "ClusterRole" => ObjectKey::cluster("clusterroles", name),
        "Role" if !namespace.is_empty() => ObjectKey::namespaced("roles", namespace, name),
        _ => return Ok(None),
    };
    match store.get_shared(&key).await {
        Ok(stored) => Ok(stored.object.get("rules").cloned()),
        // A binding to a missing role grants nothing.
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Allow when a binding in scope grants a matching rule; otherwise no opinion.
pub async fn authorize(store: &dyn Store, attrs: &Attributes) -> Result<Decision, StoreError> {
    let cluster = store.list("clusterrolebindings", None, &ListOptions::default()).await?;
    let mut scopes: Vec<(Value, String, &str)> =
        cluster.items.into_iter().map(|b| (b, String::new(), "ClusterRoleBinding")).collect();
    if attrs.resource_request && !attrs.namespace.is_empty() {
        let local = store.list("rolebindings", Some(&attrs.namespace), &ListOptions::default()).await?;
        scopes.extend(local.items.into_iter().map(|b| (b, attrs.namespace.clone(), "RoleBinding")));
    }
    for (binding, namespace, binding_kind) in &scopes {
        let Some(subject) = binding_applies(attrs, binding, namespace) else { continue };
        let Some(rules) = role_rules(store, binding, namespace).await? else { continue };
        if rules.as_array().into_iter().flatten().any(|r| rule_allows(attrs, r)) {
            let binding_name = binding.field("/metadata/name").and_then(Value::as_str).unwrap_or("");
            let role_kind = binding.field("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
            let role_name = binding.field("/roleRef/name").and_then(Value::as_str).unwrap_or("");
            let scope = if namespace.is_empty() { String::new() } else { format!(" in namespace {namespace:?}") };
            return Ok(Decision::Allow(format!(
                "RBAC: allowed by {binding_kind} {binding_name:?} of {role_kind} {role_name:?} to {subject}{scope}"
            )));
        }
    }
    Ok(Decision::NoOpinion(String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::User;
    use serde_json::json;

    fn attrs(verb: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            user: User { name: "u".into(), uid: String::new(), groups: vec![], extra: Default::default() },
            verb: verb.into(),
            namespace: "ns".into(),
            api_group: String::new(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            resource_request: true,
            path: String::new(),
            field_selector: String::new(),
        }
    }

    #[test]
    fn rule_shapes_for_token_audiences() {
        let a = attrs("request-serviceaccounts-token-audience", "registry.example", "", "builder");
        let rule = |v: Value| rule_allows(&a, &v);
        assert!(rule(
            json!({"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": ["*"]})
        ));
        assert!(rule(
            json!({"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": ["registry.example"]})
        ));
        assert!(rule(
            json!({"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": ["registry.example"], "resourceNames": ["builder"]})
        ));
        assert!(rule(
            json!({"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": ["*"], "resourceNames": ["builder"]})
        ));
        assert!(!rule(
            json!({"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": ["*"], "resourceNames": ["other"]})
        ));
        assert!(!rule(
            json!({"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": ["other.example"]})
        ));
        assert!(!rule(json!({"verbs": ["create"], "apiGroups": [""], "resources": ["*"]})));
        let api_server = attrs("request-serviceaccounts-token-audience", "", "", "builder");
        assert!(rule_allows(
            &api_server,
            &json!({"verbs": ["request-serviceaccounts-token-audience"], "apiGroups": [""], "resources": [""]})
        ));
        assert!(rule_allows(&api_server, &json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})));
    }

    #[test]
    fn subresources_and_non_resource_urls() {
        let token = attrs("create", "serviceaccounts", "token", "sa");
        assert!(rule_allows(
            &token,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["serviceaccounts/token"]})
        ));
        assert!(rule_allows(&token, &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["*/token"]})));
        assert!(!rule_allows(
            &token,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["serviceaccounts"]})
        ));
        let mut path = attrs("get", "", "", "");
        path.resource_request = false;
        path.path = "/apis/rbac.authorization.k8s.io".into();
        assert!(rule_allows(&path, &json!({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]})));
        assert!(rule_allows(&path, &json!({"verbs": ["get"], "nonResourceURLs": ["*"]})));
        assert!(!rule_allows(&path, &json!({"verbs": ["get"], "nonResourceURLs": ["/api"]})));
    }

    #[test]
    fn subjects() {
        let mut a = attrs("get", "pods", "", "");
        a.user.name = "system:serviceaccount:ns:sa".into();
        a.user.groups = vec!["team".into()];
        assert!(subject_applies(&a, &json!({"kind": "ServiceAccount", "name": "sa"}), "ns"));
        assert!(!subject_applies(&a, &json!({"kind": "ServiceAccount", "name": "sa"}), ""));
        assert!(subject_applies(&a, &json!({"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}), ""));
        assert!(subject_applies(&a, &json!({"kind": "Group", "name": "team"}), ""));
        assert!(!subject_applies(&a, &json!({"kind": "User", "name": "team"}), ""));
    }
}
