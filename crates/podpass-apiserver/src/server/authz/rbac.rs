//! The RBAC authorizer (plugin/pkg/auth/authorizer/rbac and rbac/validation): bindings
//! whose subjects cover the user, the rules of their roles, upstream matching of verbs,
//! groups, resources (`resource/subresource`, `*/subresource`), names and non-resource
//! URLs.

use serde_json::Value;

use super::rbac_index::RbacIndex;
use super::rules::{PolicyRule, rules_of};
use super::{Attributes, AuthorizationDecision};
use crate::field::Field;
use crate::server::User;
use crate::store::{ObjectKey, StoreError};

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
fn subject_applies(user: &User, subject: &Value, namespace: &str) -> bool {
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => user.name == name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let sa_ns = subject.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(namespace);
            !sa_ns.is_empty() && user.name == format!("system:serviceaccount:{sa_ns}:{name}")
        }
        _ => false,
    }
}

fn binding_applies(user: &User, binding: &Value, namespace: &str) -> Option<String> {
    binding
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| subject_applies(user, s, namespace))
        .map(|s| {
            format!(
                "{} {:?}",
                s.get("kind").and_then(Value::as_str).unwrap_or(""),
                s.get("name").and_then(Value::as_str).unwrap_or("")
            )
        })
}

/// The role a `roleRef` names, in a binding of `namespace` (empty: a ClusterRoleBinding).
/// `None` for references no binding can make (a Role from a ClusterRoleBinding).
pub fn role_ref_key(role_ref: &Value, namespace: &str) -> Option<ObjectKey> {
    let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "ClusterRole" => Some(ObjectKey::cluster("clusterroles", name)),
        "Role" if !namespace.is_empty() => Some(ObjectKey::namespaced("roles", namespace, name)),
        _ => None,
    }
}

/// `RulesFor`: every rule granted to `user` in `namespace` (empty: cluster-wide grants
/// only) — what the escalation check compares a new grant against.
pub fn rules_for(index: &RbacIndex, user: &User, namespace: &str) -> Result<Vec<PolicyRule>, StoreError> {
    let mut rules = Vec::new();
    for c in index.candidates(user, namespace)? {
        if binding_applies(user, &c.binding, &c.namespace).is_none() {
            continue;
        }
        if let Some(granted) = &c.rules {
            rules.extend(rules_of(&serde_json::json!({ "rules": granted.as_ref() })));
        }
    }
    Ok(rules)
}

/// Allow when a binding in scope grants a matching rule; otherwise no opinion. Only the
/// bindings naming the user, its groups or its service account are looked at (the index).
pub fn authorize(index: &RbacIndex, attrs: &Attributes) -> Result<AuthorizationDecision, StoreError> {
    let namespace = if attrs.resource_request { attrs.namespace.as_str() } else { "" };
    for c in index.candidates(&attrs.user, namespace)? {
        let Some(subject) = binding_applies(&attrs.user, &c.binding, &c.namespace) else { continue };
        let Some(rules) = &c.rules else { continue };
        if rules.as_array().into_iter().flatten().any(|r| rule_allows(attrs, r)) {
            let binding = c.binding.as_ref();
            let binding_name = binding.field("/metadata/name").and_then(Value::as_str).unwrap_or("");
            let role_kind = binding.field("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
            let role_name = binding.field("/roleRef/name").and_then(Value::as_str).unwrap_or("");
            let scope = if c.namespace.is_empty() { String::new() } else { format!(" in namespace {:?}", c.namespace) };
            return Ok(AuthorizationDecision::Allow(format!(
                "RBAC: allowed by {} {binding_name:?} of {role_kind} {role_name:?} to {subject}{scope}",
                c.kind
            )));
        }
    }
    Ok(AuthorizationDecision::NoOpinion(String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert!(subject_applies(&a.user, &json!({"kind": "ServiceAccount", "name": "sa"}), "ns"));
        assert!(!subject_applies(&a.user, &json!({"kind": "ServiceAccount", "name": "sa"}), ""));
        assert!(subject_applies(&a.user, &json!({"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}), ""));
        assert!(subject_applies(&a.user, &json!({"kind": "Group", "name": "team"}), ""));
        assert!(!subject_applies(&a.user, &json!({"kind": "User", "name": "team"}), ""));
    }
}
