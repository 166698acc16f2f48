//! The access policy: which service accounts may do what to which repositories. Deny by
//! default; a request is granted the intersection of what it asked and what the rules
//! allow (a partial grant is a token with less access, as the token protocol expects).
//!
//! ```yaml
//! rules:
//! - serviceAccount: {namespace: "*", name: "*"}   # globs; optional issuer: and annotations:
//!   repositories: ["{namespace}/*"]               # path globs; {namespace} {serviceaccount}
//!   actions: [pull]                               # pull, push, "*"
//! ```
//!
//! Annotations are matched only against the ones a request carries signed into an exchange
//! token (the credential-provider plugin forwards the opted-in service-account
//! annotations); a rule naming annotations never matches a bare service-account token.
//! Whoever may update a ServiceAccount may set its annotations: grant through annotations
//! only what that person may have anyway.

use std::collections::BTreeMap;
use std::path::Path;

use podpass_api::validation::FieldError;
use serde::Deserialize;
use thiserror::Error;

use crate::glob::Glob;
use crate::scope::Scope;

/// Policy files larger than this are refused.
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;
/// Rules per policy.
pub const MAX_RULES: usize = 10_000;

/// The actions a rule may list.
const ACTIONS: [&str; 3] = ["*", "pull", "push"];

/// A policy could not be loaded.
#[derive(Debug, Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("reading {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Not YAML of the policy's shape; names the field path.
    #[error("{path}: {reason}")]
    Decode {
        /// The file.
        path: String,
        /// The decoder's message, with the field path.
        reason: String,
    },
    /// The policy decoded but breaks the rules below; every problem is listed.
    #[error("{path}: {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The file.
        path: String,
        /// Each problem, by field path.
        errors: Vec<FieldError>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    rules: Vec<RuleFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuleFile {
    service_account: SubjectFile,
    repositories: Vec<String>,
    actions: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubjectFile {
    namespace: String,
    name: String,
    #[serde(default)]
    issuer: Option<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Who asks: a verified service-account identity.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The issuer (`iss`) of its token.
    pub issuer: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// Service-account name.
    pub name: &'a str,
    /// The annotations signed into an exchange token (empty otherwise).
    pub annotations: &'a BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct Rule {
    namespace: Glob,
    name: Glob,
    issuer: Option<Glob>,
    annotations: Vec<(String, Glob)>,
    /// Patterns with their placeholders, substituted per subject.
    repositories: Vec<String>,
    /// `None` = every action (`*`).
    actions: Option<Vec<String>>,
}

/// A loaded, validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
}

impl Policy {
    /// Reads and validates the policy at `path` (YAML or JSON).
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let shown = path.display().to_string();
        let read = |reason: String| PolicyError::Read { path: shown.clone(), reason };
        let meta = std::fs::metadata(path).map_err(|e| read(e.to_string()))?;
        if meta.len() > MAX_POLICY_BYTES {
            return Err(read(format!("larger than {MAX_POLICY_BYTES} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
        Self::parse(&text).map_err(|e| match e {
            PolicyError::Decode { reason, .. } => PolicyError::Decode { path: shown.clone(), reason },
            PolicyError::Invalid { errors, .. } => PolicyError::Invalid { path: shown.clone(), errors },
            other => other,
        })
    }

    /// Parses and validates policy text; errors name the field path (`rules[0].actions[1]`).
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let decode = |reason: String| PolicyError::Decode { path: "policy".into(), reason };
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        let file: PolicyFile = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            // serde_yaml_ng names the (parent's) path itself below the root: say the full
            // path once.
            let inner = match inner.split_once(": ") {
                Some((own, rest)) if !own.contains(' ') && path.starts_with(own) => rest.to_owned(),
                _ => inner,
            };
            decode(if path == "." { inner } else { format!("{path}: {inner}") })
        })?;
        let mut errors = Vec::new();
        if file.rules.is_empty() {
            errors.push(FieldError::required("rules", "a policy without rules denies everything"));
        }
        if file.rules.len() > MAX_RULES {
            errors.push(FieldError::invalid("rules", &file.rules.len().to_string(), format!("at most {MAX_RULES}")));
        }
        let rules =
            file.rules.iter().enumerate().map(|(i, r)| compile(r, &format!("rules[{i}]"), &mut errors)).collect();
        if errors.is_empty() { Ok(Self { rules }) } else { Err(PolicyError::Invalid { path: "policy".into(), errors }) }
    }

    /// Issuer patterns of the rules that name one, for checking them against the issuers
    /// served: `(field path, pattern matcher)`.
    pub fn issuer_patterns(&self) -> impl Iterator<Item = (String, &Glob)> {
        self.rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.issuer.as_ref().map(|g| (format!("rules[{i}].serviceAccount.issuer"), g)))
    }

    /// What `subject` is granted of `requested`: per scope, the asked actions the matching
    /// rules allow (`*` asked is granted only by a rule allowing `*`). Scopes granted
    /// nothing are left out; only `repository` scopes are ever granted.
    pub fn grant(&self, subject: &Subject<'_>, requested: &[Scope]) -> Vec<Scope> {
        let matching: Vec<&Rule> = self.rules.iter().filter(|r| r.applies_to(subject)).collect();
        let mut granted = Vec::new();
        for scope in requested.iter().filter(|s| s.resource_type == "repository") {
            let mut allowed_all = false;
            let mut allowed: Vec<&str> = Vec::new();
            for rule in matching.iter().filter(|r| r.covers_repository(subject, &scope.name)) {
                match &rule.actions {
                    None => allowed_all = true,
                    Some(actions) => allowed.extend(actions.iter().map(String::as_str)),
                }
            }
            let actions: Vec<String> =
                scope.actions.iter().filter(|a| allowed_all || allowed.contains(&a.as_str())).cloned().collect();
            if !actions.is_empty() {
                granted.push(Scope { actions, ..scope.clone() });
            }
        }
        granted
    }
}

impl Rule {
    fn applies_to(&self, s: &Subject<'_>) -> bool {
        self.namespace.matches(s.namespace)
            && self.name.matches(s.name)
            && self.issuer.as_ref().is_none_or(|g| g.matches(s.issuer))
            && self.annotations.iter().all(|(k, g)| s.annotations.get(k).is_some_and(|v| g.matches(v)))
    }

    fn covers_repository(&self, s: &Subject<'_>, repository: &str) -> bool {
        // The placeholders stand for the subject's names literally: a `*` in a name (which
        // no valid name holds, but a signed claim may) matches only a `*`.
        let values = [("{namespace}", s.namespace), ("{serviceaccount}", s.name)];
        self.repositories.iter().any(|p| Glob::path_substituted(p, &values).matches(repository))
    }
}

/// Characters a service-account name or namespace glob may hold (DNS-1123 plus `*`).
fn valid_name_glob(g: &str) -> bool {
    !g.is_empty()
        && g.len() <= 253
        && g.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.*".contains(&b))
}

fn compile(r: &RuleFile, at: &str, errors: &mut Vec<FieldError>) -> Rule {
    let sa = &r.service_account;
    for (field, value) in [("namespace", &sa.namespace), ("name", &sa.name)] {
        if !valid_name_glob(value) {
            errors.push(FieldError::invalid(
                &format!("{at}.serviceAccount.{field}"),
                value,
                "must be a DNS-1123 name or a glob of one (lower-case letters, digits, '-', '.', '*')",
            ));
        }
    }
    if let Some(issuer) = &sa.issuer
        && issuer.is_empty()
    {
        errors.push(FieldError::required(&format!("{at}.serviceAccount.issuer"), "omit it to match every issuer"));
    }
    for key in sa.annotations.keys() {
        if key.is_empty() || key.len() > 316 || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._/".contains(&b))
        {
            errors.push(FieldError::invalid(&format!("{at}.serviceAccount.annotations"), key, "not an annotation key"));
        }
    }
    if r.repositories.is_empty() {
        errors.push(FieldError::required(&format!("{at}.repositories"), "list the repositories this rule grants"));
    }
    for (j, pattern) in r.repositories.iter().enumerate() {
        if let Some(problem) = repository_pattern_problem(pattern) {
            errors.push(FieldError::invalid(&format!("{at}.repositories[{j}]"), pattern, problem));
        }
    }
    if r.actions.is_empty() {
        errors.push(FieldError::required(&format!("{at}.actions"), "pull, push or \"*\""));
    }
    for (j, action) in r.actions.iter().enumerate() {
        let path = format!("{at}.actions[{j}]");
        if !ACTIONS.contains(&action.as_str()) {
            errors.push(FieldError::not_supported(&path, action, &ACTIONS));
        } else if r.actions[..j].contains(action) {
            errors.push(FieldError::duplicate(&path, action));
        }
    }
    Rule {
        namespace: Glob::plain(&sa.namespace),
        name: Glob::plain(&sa.name),
        issuer: sa.issuer.as_deref().map(Glob::plain),
        annotations: sa.annotations.iter().map(|(k, v)| (k.clone(), Glob::plain(v))).collect(),
        repositories: r.repositories.clone(),
        actions: if r.actions.iter().any(|a| a == "*") { None } else { Some(r.actions.clone()) },
    }
}

/// Why a repository pattern is unusable, if it is: only the two placeholders, and the
/// characters of repository names plus `*`.
fn repository_pattern_problem(pattern: &str) -> Option<String> {
    if pattern.is_empty() || pattern.len() > 255 {
        return Some("must be 1 to 255 characters".into());
    }
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Some("unclosed '{'".into());
        };
        let name = &rest[open + 1..open + close];
        if name != "namespace" && name != "serviceaccount" {
            return Some(format!("unknown placeholder {{{name}}} (known: {{namespace}}, {{serviceaccount}})"));
        }
        rest = &rest[open + close + 1..];
    }
    let stripped = pattern.replace("{namespace}", "").replace("{serviceaccount}", "");
    if stripped.contains('}') {
        return Some("unmatched '}'".into());
    }
    if !stripped.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:*".contains(&b)) {
        return Some("repository patterns hold lower-case letters, digits, '.', '_', '-', '/', ':' and '*'".into());
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn subject<'a>(ns: &'a str, name: &'a str, annotations: &'a BTreeMap<String, String>) -> Subject<'a> {
        Subject { issuer: "https://cluster-a.example", namespace: ns, name, annotations }
    }

    fn scopes(list: &[&str]) -> Vec<Scope> {
        Scope::parse_all(list.iter().copied()).unwrap()
    }

    fn shown(granted: &[Scope]) -> Vec<String> {
        granted.iter().map(ToString::to_string).collect()
    }

    const MINIMUM: &str = r#"
rules:
- serviceAccount: {namespace: "*", name: "*"}
  repositories: ["{namespace}/*"]
  actions: [pull]
"#;

    #[test]
    fn the_minimum_policy_grants_pull_of_the_own_namespace_only() {
        let p = Policy::parse(MINIMUM).unwrap();
        let none = BTreeMap::new();
        let asked = scopes(&["repository:team-a/app:pull,push", "repository:team-b/app:pull", "registry:catalog:*"]);
        assert_eq!(shown(&p.grant(&subject("team-a", "builder", &none), &asked)), ["repository:team-a/app:pull"]);
        // a namespace that is a prefix of another gets nothing of it
        assert!(p.grant(&subject("team", "x", &none), &scopes(&["repository:team-a/app:pull"])).is_empty());
        assert!(p.grant(&subject("team-a", "x", &none), &scopes(&["repository:team-a/app/deep:pull"])).is_empty());
    }

    #[test]
    fn a_namespace_named_star_is_not_a_glob_over_every_namespace() {
        let p = Policy::parse(MINIMUM).unwrap();
        let none = BTreeMap::new();
        let asked = scopes(&["repository:team-a/app:pull"]);
        assert!(p.grant(&subject("*", "builder", &none), &asked).is_empty());
        assert!(p.grant(&subject("**", "builder", &none), &asked).is_empty());
    }

    #[test]
    fn rules_add_up_and_star_is_granted_only_by_star() {
        let p = Policy::parse(
            r#"
rules:
- serviceAccount: {namespace: ci, name: "builder-*", issuer: "https://cluster-a.*"}
  repositories: ["{namespace}/{serviceaccount}/**"]
  actions: [push]
- serviceAccount: {namespace: ci, name: "*"}
  repositories: ["ci/**"]
  actions: [pull]
- serviceAccount: {namespace: ops, name: admin}
  repositories: ["**"]
  actions: ["*"]
"#,
        )
        .unwrap();
        let none = BTreeMap::new();
        let asked = scopes(&["repository:ci/builder-x/img:pull,push,*"]);
        assert_eq!(
            shown(&p.grant(&subject("ci", "builder-x", &none), &asked)),
            ["repository:ci/builder-x/img:pull,push"]
        );
        let other_issuer = Subject { issuer: "https://cluster-b.example", ..subject("ci", "builder-x", &none) };
        assert_eq!(shown(&p.grant(&other_issuer, &asked)), ["repository:ci/builder-x/img:pull"]);
        assert_eq!(
            shown(&p.grant(&subject("ops", "admin", &none), &scopes(&["repository:x/y:*,pull"]))),
            ["repository:x/y:*,pull"]
        );
    }

    #[test]
    fn annotation_rules_need_the_signed_annotations() {
        let p = Policy::parse(
            "rules:\n- serviceAccount: {namespace: '*', name: '*', annotations: {podpass.dev/team: 'blue*'}}\n  repositories: [shared/*]\n  actions: [pull]\n",
        )
        .unwrap();
        let asked = scopes(&["repository:shared/base:pull"]);
        let none = BTreeMap::new();
        assert!(p.grant(&subject("a", "b", &none), &asked).is_empty());
        let blue = BTreeMap::from([("podpass.dev/team".to_owned(), "blue-1".to_owned())]);
        assert_eq!(shown(&p.grant(&subject("a", "b", &blue), &asked)), ["repository:shared/base:pull"]);
    }

    #[test]
    fn every_problem_is_named_by_its_field_path() {
        let err = Policy::parse(
            r#"
rules:
- serviceAccount: {namespace: "Team", name: ""}
  repositories: ["{team}/*", "Upper/x"]
  actions: [pull, pull, delete]
- serviceAccount: {namespace: a, name: b}
  repositories: []
  actions: []
"#,
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "rules[0].serviceAccount.namespace: Invalid value: \"Team\"",
            "rules[0].serviceAccount.name: Invalid value: \"\"",
            "rules[0].repositories[0]: Invalid value: \"{team}/*\": unknown placeholder {team}",
            "rules[0].repositories[1]: Invalid value: \"Upper/x\"",
            "rules[0].actions[1]: Duplicate value: \"pull\"",
            "rules[0].actions[2]: Unsupported value: \"delete\"",
            "rules[1].repositories: Required value",
            "rules[1].actions: Required value",
        ] {
            assert!(err.contains(expected), "{expected:?} missing from {err}");
        }
    }

    #[test]
    fn decoding_is_strict_and_names_the_path() {
        let err = Policy::parse(
            "rules:\n- serviceAccount: {namespace: a, name: b, nmae: c}\n  repositories: [x]\n  actions: [pull]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("rules[0].serviceAccount") && err.contains("unknown field `nmae`"), "{err}");
        assert_eq!(err.matches("rules[0].serviceAccount").count(), 1, "the path is said once: {err}");
        let err =
            Policy::parse("rules:\n- serviceAccount: {namespace: a, name: b}\n  repositories: x\n  actions: [pull]\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("rules[0].repositories"), "{err}");
        let err = Policy::parse("rules: []\nrules: []\n").unwrap_err().to_string();
        assert!(err.contains("duplicate"), "{err}");
        assert!(Policy::parse("rules: []\n").unwrap_err().to_string().contains("rules: Required value"));
    }
}
