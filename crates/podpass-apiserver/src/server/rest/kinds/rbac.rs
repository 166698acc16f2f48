//! RBAC objects on their way in: upstream's defaults (`SetDefaults_*Binding`,
//! `SetDefaults_Subject`) and validation (pkg/apis/rbac/validation) with its messages. The
//! escalation check runs after these, on an object known to be well formed.

use podpass_api::validation::{FieldError, FieldErrors, quote};
use serde_json::{Value, json};

use super::super::table::{age, age_column, column, name_column, text};
use super::{AfterWrite, Printer, Strategy};
use crate::server::AppState;
use crate::server::authz::escalation::RBAC_GROUP;
use crate::server::status::StatusError;
use crate::store::BoxFuture;

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    match v {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(|s| s.as_str().map(str::to_owned)).collect(),
        Some(_) => None,
    }
}

/// Go's `%#v` of a `[]string`, as `field.Invalid` renders list values.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// `NotSupported` with the supported values in upstream's order.
fn not_supported(path: &str, value: &str, supported: &[&str]) -> FieldError {
    let mut e = FieldError::not_supported(path, value, supported);
    let listed: Vec<String> = supported.iter().map(|s| quote(s)).collect();
    e.detail = format!("supported values: {}", listed.join(", "));
    e
}

/// `ValidateRBACName` (path.IsValidPathSegmentName) plus no control characters: names end
/// up in URL paths and log lines.
pub fn rbac_name_problem(name: &str) -> Option<String> {
    match name {
        "." | ".." => Some(format!("may not be '{name}'")),
        _ if name.contains('/') => Some("may not contain '/'".to_owned()),
        _ if name.contains('%') => Some("may not contain '%'".to_owned()),
        _ if name.chars().any(char::is_control) => Some("may not contain control characters".to_owned()),
        _ => None,
    }
}

/// `ValidatePolicyRule` for `rules[i]`.
fn validate_rule(rule: &Value, namespaced: bool, path: &str, errors: &mut Vec<FieldError>) {
    let Some(obj) = rule.as_object() else {
        errors.push(FieldError::invalid_rendered(path, rule.to_string(), "must be an object"));
        return;
    };
    let mut field = |name: &str| match strings(obj.get(name)) {
        Some(v) => v,
        None => {
            errors.push(FieldError::invalid_rendered(
                &format!("{path}.{name}"),
                obj[name].to_string(),
                "must be a list of strings",
            ));
            Vec::new()
        }
    };
    let (verbs, groups, resources, names, urls) =
        (field("verbs"), field("apiGroups"), field("resources"), field("resourceNames"), field("nonResourceURLs"));
    if verbs.is_empty() {
        errors.push(FieldError::required(&format!("{path}.verbs"), "verbs must contain at least one value"));
    }
    if !urls.is_empty() {
        let p = format!("{path}.nonResourceURLs");
        if namespaced {
            errors.push(FieldError::invalid_rendered(
                &p,
                go_string_slice(&urls),
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !groups.is_empty() || !resources.is_empty() || !names.is_empty() {
            errors.push(FieldError::invalid_rendered(
                &p,
                go_string_slice(&urls),
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if groups.is_empty() {
        errors.push(FieldError::required(
            &format!("{path}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if resources.is_empty() {
        errors.push(FieldError::required(
            &format!("{path}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

fn validate_role(namespaced: bool, object: &Value, errors: &mut Vec<FieldError>) {
    match object.get("rules") {
        None | Some(Value::Null) => {}
        Some(Value::Array(rules)) => {
            for (i, rule) in rules.iter().enumerate() {
                validate_rule(rule, namespaced, &format!("rules[{i}]"), errors);
            }
        }
        Some(other) => errors.push(FieldError::invalid_rendered("rules", other.to_string(), "must be a list")),
    }
    if namespaced {
        return;
    }
    let Some(agg) = object.get("aggregationRule").filter(|a| !a.is_null()) else { return };
    let selectors = agg.get("clusterRoleSelectors").and_then(Value::as_array).cloned().unwrap_or_default();
    if selectors.is_empty() {
        errors.push(FieldError::required(
            "aggregationRule.clusterRoleSelectors",
            "at least one clusterRoleSelector required if aggregationRule is non-nil",
        ));
    }
    let empty = serde_json::Map::new();
    for (i, selector) in selectors.iter().enumerate() {
        if podpass_api::rbac_aggregation::selector_matches(selector, &empty).is_none() {
            errors.push(FieldError::invalid_rendered(
                &format!("aggregationRule.clusterRoleSelectors[{i}]"),
                selector.to_string(),
                "invalid label selector.",
            ));
        }
    }
}

fn validate_subject(subject: &Value, namespaced: bool, path: &str, errors: &mut Vec<FieldError>) {
    let s = |k: &str| subject.get(k).and_then(Value::as_str).unwrap_or("");
    let (kind, name, group) = (s("kind"), s("name"), s("apiGroup"));
    if name.is_empty() {
        errors.push(FieldError::required(&format!("{path}.name"), ""));
    }
    match kind {
        "ServiceAccount" => {
            if !name.is_empty() && !podpass_token::user::is_dns1123_subdomain(name) {
                errors.push(FieldError::invalid(
                    &format!("{path}.name"),
                    name,
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                ));
            }
            if !group.is_empty() {
                errors.push(not_supported(&format!("{path}.apiGroup"), group, &[""]));
            }
            if !namespaced && s("namespace").is_empty() {
                errors.push(FieldError::required(&format!("{path}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if group != RBAC_GROUP {
                errors.push(not_supported(&format!("{path}.apiGroup"), group, &[RBAC_GROUP]));
            }
        }
        other => errors.push(not_supported(&format!("{path}.kind"), other, &["ServiceAccount", "User", "Group"])),
    }
}

fn role_ref_text(role_ref: &Value) -> String {
    let s = |k: &str| quote(role_ref.get(k).and_then(Value::as_str).unwrap_or(""));
    format!("rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}", s("apiGroup"), s("kind"), s("name"))
}

fn validate_binding(namespaced: bool, object: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    let role_ref = object.get("roleRef").cloned().unwrap_or(Value::Null);
    let s = |k: &str| role_ref.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    if s("apiGroup") != RBAC_GROUP {
        errors.push(not_supported("roleRef.apiGroup", &s("apiGroup"), &[RBAC_GROUP]));
    }
    let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    if !kinds.contains(&s("kind").as_str()) {
        errors.push(not_supported("roleRef.kind", &s("kind"), kinds));
    }
    let name = s("name");
    if name.is_empty() {
        errors.push(FieldError::required("roleRef.name", ""));
    } else if let Some(problem) = rbac_name_problem(&name) {
        errors.push(FieldError::invalid("roleRef.name", &name, problem));
    }
    match object.get("subjects") {
        None | Some(Value::Null) => {}
        Some(Value::Array(subjects)) => {
            for (i, subject) in subjects.iter().enumerate() {
                validate_subject(subject, namespaced, &format!("subjects[{i}]"), errors);
            }
        }
        Some(other) => errors.push(FieldError::invalid_rendered("subjects", other.to_string(), "must be a list")),
    }
    if let Some(old) = old
        && old.get("roleRef") != object.get("roleRef")
    {
        errors.push(FieldError::invalid_rendered("roleRef", role_ref_text(&role_ref), "cannot change roleRef"));
    }
}

/// Applies upstream's defaults to a binding: `roleRef.apiGroup` and the `apiGroup` of User
/// and Group subjects default to the RBAC group.
pub fn default_binding(object: &mut Value) {
    if let Some(role_ref) = object.get_mut("roleRef").and_then(Value::as_object_mut) {
        let empty = role_ref.get("apiGroup").and_then(Value::as_str).is_none_or(str::is_empty);
        if empty {
            role_ref.insert("apiGroup".into(), json!(RBAC_GROUP));
        }
    }
    for subject in object.get_mut("subjects").and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(subject) = subject.as_object_mut() else { continue };
        let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
        let empty = subject.get("apiGroup").and_then(Value::as_str).is_none_or(str::is_empty);
        if empty && matches!(kind, "User" | "Group") {
            subject.insert("apiGroup".into(), json!(RBAC_GROUP));
        }
    }
}

/// An RBAC kind: roles hold rules, bindings a role reference and subjects; the namespaced
/// ones live in a namespace.
pub(crate) struct Rbac {
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    binding: bool,
}

/// Role.
pub(crate) static ROLE: Rbac = Rbac { kind: "Role", plural: "roles", namespaced: true, binding: false };
/// ClusterRole.
pub(crate) static CLUSTER_ROLE: Rbac =
    Rbac { kind: "ClusterRole", plural: "clusterroles", namespaced: false, binding: false };
/// RoleBinding.
pub(crate) static ROLE_BINDING: Rbac =
    Rbac { kind: "RoleBinding", plural: "rolebindings", namespaced: true, binding: true };
/// ClusterRoleBinding.
pub(crate) static CLUSTER_ROLE_BINDING: Rbac =
    Rbac { kind: "ClusterRoleBinding", plural: "clusterrolebindings", namespaced: false, binding: true };

/// The Role resource.
pub(crate) const ROLE_RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "rbac.authorization.k8s.io", kind: "Role", plural: "roles", singular: "role" },
    &ROLE,
    &super::types::TypeOf::<k8s_openapi::api::rbac::v1::Role>::NEW,
);

/// The RoleBinding resource.
pub(crate) const ROLE_BINDING_RESOURCE: super::Resource = super::Resource::stored(
    super::Names {
        group: "rbac.authorization.k8s.io",
        kind: "RoleBinding",
        plural: "rolebindings",
        singular: "rolebinding",
    },
    &ROLE_BINDING,
    &super::types::TypeOf::<k8s_openapi::api::rbac::v1::RoleBinding>::NEW,
);

/// The ClusterRole resource.
pub(crate) const CLUSTER_ROLE_RESOURCE: super::Resource = super::Resource::stored(
    super::Names {
        group: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        plural: "clusterroles",
        singular: "clusterrole",
    },
    &CLUSTER_ROLE,
    &super::types::TypeOf::<k8s_openapi::api::rbac::v1::ClusterRole>::NEW,
)
.cluster_scoped();

/// The ClusterRoleBinding resource.
pub(crate) const CLUSTER_ROLE_BINDING_RESOURCE: super::Resource = super::Resource::stored(
    super::Names {
        group: "rbac.authorization.k8s.io",
        kind: "ClusterRoleBinding",
        plural: "clusterrolebindings",
        singular: "clusterrolebinding",
    },
    &CLUSTER_ROLE_BINDING,
    &super::types::TypeOf::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::NEW,
)
.cluster_scoped();

impl Rbac {
    fn check(&self, name: &str, object: &Value, old: Option<&Value>) -> Result<(), StatusError> {
        let mut errors = Vec::new();
        if self.binding {
            validate_binding(self.namespaced, object, old, &mut errors);
        } else {
            validate_role(self.namespaced, object, &mut errors);
        }
        if errors.is_empty() {
            return Ok(());
        }
        Err(StatusError::invalid(format!("{}.{RBAC_GROUP} {name:?} is invalid: {}", self.kind, FieldErrors(errors))))
    }
}

impl Strategy for Rbac {
    fn name_problem(&self, name: &str) -> Option<String> {
        rbac_name_problem(name)
    }

    fn default(&self, _name: &str, object: &mut Value) -> Result<(), StatusError> {
        if self.binding {
            default_binding(object);
        }
        Ok(())
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        self.check(name, object, None)
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        self.check(name, object, Some(old))
    }

    fn printer(&self) -> Option<Printer> {
        if !self.binding {
            return None;
        }
        Some((
            vec![
                name_column(),
                column("Role", "string", "", "Role of the binding", 0),
                age_column(),
                column("Users", "string", "", "Users in the binding", 1),
                column("Groups", "string", "", "Groups in the binding", 1),
                column("ServiceAccounts", "string", "", "ServiceAccounts in the binding", 1),
            ],
            binding_cells,
        ))
    }

    /// The RBAC index caught up with the write before it is answered, so the writer may
    /// use it at once. (Roles aggregating this one follow when the controller manager's
    /// aggregation controller has seen it, as upstream.)
    fn after_write<'a>(&'a self, state: &'a AppState, write: AfterWrite<'a>) -> BoxFuture<'a, Result<(), StatusError>> {
        Box::pin(async move {
            state.rbac.wait_applied(self.plural, write.revision).await;
            Ok(())
        })
    }
}

fn binding_cells(binding: &Value, now: i64) -> Vec<Value> {
    let empty = Vec::new();
    let subjects = binding["subjects"].as_array().unwrap_or(&empty);
    let of = |kind: &str| -> String {
        let names: Vec<String> = subjects
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| match (kind, s["namespace"].as_str()) {
                ("ServiceAccount", Some(ns)) => format!("{ns}/{}", s["name"].as_str().unwrap_or("")),
                _ => s["name"].as_str().unwrap_or("").to_owned(),
            })
            .collect();
        names.join(", ")
    };
    vec![
        json!(text(binding, "/metadata/name")),
        json!(format!("{}/{}", text(binding, "/roleRef/kind"), text(binding, "/roleRef/name"))),
        json!(age(binding, "/metadata/creationTimestamp", now)),
        json!(of("User")),
        json!(of("Group")),
        json!(of("ServiceAccount")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The object as stored, or the refusal.
    fn admit_as(plural: &str, mut v: Value, old: Option<&Value>) -> Result<Value, StatusError> {
        let strategy = [&ROLE, &CLUSTER_ROLE, &ROLE_BINDING, &CLUSTER_ROLE_BINDING]
            .into_iter()
            .find(|s| s.plural == plural)
            .ok_or_else(|| StatusError::bad_request("no such kind"))?;
        let name = v["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        strategy.default(&name, &mut v)?;
        let checked = match old {
            Some(old) => strategy.validate_update(&name, &v, old),
            None => strategy.validate(&name, &v),
        };
        checked.map(|()| v)
    }

    #[test]
    fn bindings_are_defaulted_and_validated_as_upstream() {
        let b = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "sa"}]});
        let ok = admit_as("rolebindings", b.clone(), None).unwrap();
        assert_eq!(ok["roleRef"]["apiGroup"], json!(RBAC_GROUP));
        assert_eq!(ok["subjects"][0]["apiGroup"], json!(RBAC_GROUP));
        assert_eq!(ok["subjects"][1].get("apiGroup"), None);
        // a cluster binding needs the service account's namespace and a ClusterRole
        let err = admit_as("clusterrolebindings", b.clone(), None).unwrap_err().message;
        assert_eq!(
            err,
            r#"ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: subjects[1].namespace: Required value"#
        );
        let mut role = b.clone();
        role["roleRef"]["kind"] = json!("Role");
        let err = admit_as("clusterrolebindings", role, None).unwrap_err().message;
        assert!(err.contains(r#"roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole""#), "{err}");
        let mut bad = b.clone();
        bad["roleRef"]["name"] = json!("a/b");
        bad["subjects"] = json!([{"kind": "Robot", "name": ""}]);
        let err = admit_as("rolebindings", bad, None).unwrap_err().message;
        assert_eq!(
            err,
            r#"RoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.name: Invalid value: "a/b": may not contain '/', subjects[0].name: Required value, subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"]"#
        );
        // roleRef is immutable
        let mut other = b.clone();
        other["roleRef"]["name"] = json!("admin");
        let err = admit_as("rolebindings", other, Some(&ok)).unwrap_err().message;
        assert!(err.ends_with(r#"roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"admin"}: cannot change roleRef"#), "{err}");
    }

    #[test]
    fn rules_are_validated_as_upstream() {
        let role = |rules: Value| json!({"metadata": {"name": "r"}, "rules": rules});
        assert!(
            admit_as("roles", role(json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}])), None)
                .is_ok()
        );
        let err =
            admit_as("roles", role(json!([{"verbs": ["get"], "nonResourceURLs": ["/x"]}])), None).unwrap_err().message;
        assert!(err.ends_with(r#"rules[0].nonResourceURLs: Invalid value: []string{"/x"}: namespaced rules cannot apply to non-resource URLs"#), "{err}");
        assert!(admit_as("clusterroles", role(json!([{"verbs": ["get"], "nonResourceURLs": ["/x"]}])), None).is_ok());
        let err = admit_as("clusterroles", role(json!([{"apiGroups": [""]}])), None).unwrap_err().message;
        assert_eq!(
            err,
            r#"ClusterRole.rbac.authorization.k8s.io "r" is invalid: [rules[0].verbs: Required value: verbs must contain at least one value, rules[0].resources: Required value: resource rules must supply at least one resource]"#
        );
        let err =
            admit_as("clusterroles", role(json!([{"verbs": "get", "apiGroups": [""], "resources": ["x"]}])), None)
                .unwrap_err()
                .message;
        assert!(err.contains("rules[0].verbs: Invalid value: \"get\": must be a list of strings"), "{err}");
        let mut agg = role(json!([]));
        agg["aggregationRule"] = json!({"clusterRoleSelectors": []});
        assert!(
            admit_as("clusterroles", agg, None)
                .unwrap_err()
                .message
                .contains("aggregationRule.clusterRoleSelectors: Required value")
        );
    }

    #[test]
    fn rbac_names_are_path_segments_without_control_characters() {
        assert_eq!(rbac_name_problem("system:discovery"), None);
        assert_eq!(rbac_name_problem("with space"), None);
        assert!(rbac_name_problem("..").is_some());
        assert!(rbac_name_problem("a%2f").is_some());
        assert!(rbac_name_problem("nul\0").is_some());
        assert!(rbac_name_problem("line\nbreak").is_some());
    }
}
