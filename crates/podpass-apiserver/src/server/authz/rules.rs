//! RBAC policy rules as typed values, and the rule algebra upstream's escalation check is
//! built on (pkg/registry/rbac/validation: `Covers`, `BreakdownRule`, `CompactRules`, and
//! rbac/v1 helpers' `CompactString`).
//!
//! Pure functions of their inputs: the store is read elsewhere.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One `rbac.authorization.k8s.io/v1` PolicyRule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// Verbs (`*` = all).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups (`*` = all, `""` = core).
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// Resources (`*`, `pods`, `pods/log`, `*/status`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names (empty = any).
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Non-resource URL paths (`*` or a `prefix*`).
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// The rules of a role object (`rules`), skipping entries that are not rules. For stored
/// objects, written by this server after validation, nothing is skipped in practice; a
/// hand-edited store cannot widen anything by being malformed (a skipped rule grants less).
pub fn rules_of(role: &Value) -> Vec<PolicyRule> {
    role.get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| PolicyRule::deserialize(r).ok())
        .collect()
}

/// Full authority: what `system:masters` and `cluster-admin` hold (upstream's
/// `fullAuthority`, required to set an `aggregationRule`).
pub fn full_authority() -> Vec<PolicyRule> {
    let all = || vec!["*".to_owned()];
    vec![
        PolicyRule { verbs: all(), api_groups: all(), resources: all(), ..PolicyRule::default() },
        PolicyRule { verbs: all(), non_resource_urls: all(), ..PolicyRule::default() },
    ]
}

/// `BreakdownRule`: the rule as rules of at most one group, resource, verb and name (or one
/// non-resource URL and verb).
pub fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    verbs: one(verb),
                    api_groups: one(group),
                    resources: one(resource),
                    ..PolicyRule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    out.extend(
                        rule.resource_names.iter().map(|n| PolicyRule { resource_names: one(n), ..base.clone() }),
                    );
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule { verbs: one(verb), non_resource_urls: one(url), ..PolicyRule::default() });
        }
    }
    out
}

fn has(set: &[String], wanted: &str) -> bool {
    set.iter().any(|s| s == wanted)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

/// `resourceCoversAll`: `*`, exact names, or `*/<subresource>` for subresources.
fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, "*") || has_all(owner, wanted) {
        return true;
    }
    wanted
        .iter()
        .all(|path| has(owner, path) || path.split_once('/').is_some_and(|(_, sub)| has(owner, &format!("*/{sub}"))))
}

/// `nonResourceURLCovers`: exact, or the owner is `prefix*` and the path starts with it.
fn non_resource_url_covers(owner: &str, path: &str) -> bool {
    owner == path || owner.strip_suffix('*').is_some_and(|_| path.starts_with(owner.trim_end_matches('*')))
}

/// `ruleCovers`: whether `owner` grants everything the broken-down `sub` grants.
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resources_cover(&owner.resources, &sub.resources);
    let urls =
        sub.non_resource_urls.iter().all(|p| owner.non_resource_urls.iter().any(|o| non_resource_url_covers(o, p)));
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && names && urls
}

/// Most broken-down rules one escalation check examines. Upstream has no bound; a request
/// listing 100 groups × 100 resources × 100 verbs × 100 names would cost 10^8 comparisons
/// per owner rule, so a request past this is refused instead of checked.
pub const MAX_BREAKDOWN: usize = 100_000;

/// Why `wanted` rules are not covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncovered {
    /// These broken-down rules are granted by no owner rule (in order).
    Missing(Vec<PolicyRule>),
    /// The rules break down into more than [`MAX_BREAKDOWN`] pieces.
    TooLarge(usize),
}

/// How many rules [`breakdown`] makes of `rule` (saturating).
pub fn breakdown_len(rule: &PolicyRule) -> usize {
    let resource = rule
        .api_groups
        .len()
        .saturating_mul(rule.resources.len())
        .saturating_mul(rule.verbs.len())
        .saturating_mul(rule.resource_names.len().max(1));
    resource.saturating_add(rule.non_resource_urls.len().saturating_mul(rule.verbs.len()))
}

/// `Covers`: whether `owner` rules grant everything `wanted` rules grant; the uncovered
/// pieces otherwise (broken down, in order).
pub fn covers(owner: &[PolicyRule], wanted: &[PolicyRule]) -> Result<(), Uncovered> {
    // `rule_covers` is exact for one-valued rules and sufficient for any rule: a rule one
    // owner rule covers whole needs no breakdown (so cluster-admins are never limited).
    let open: Vec<&PolicyRule> = wanted.iter().filter(|w| !owner.iter().any(|o| rule_covers(o, w))).collect();
    let pieces = open.iter().map(|r| breakdown_len(r)).fold(0usize, usize::saturating_add);
    if pieces > MAX_BREAKDOWN {
        return Err(Uncovered::TooLarge(pieces));
    }
    let missing: Vec<PolicyRule> =
        open.into_iter().flat_map(breakdown).filter(|sub| !owner.iter().any(|o| rule_covers(o, sub))).collect();
    if missing.is_empty() { Ok(()) } else { Err(Uncovered::Missing(missing)) }
}

/// `CompactRules`: simple rules (one group, one resource, at most one name, nothing else)
/// that differ only in verbs are merged.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = rule.resource_names.len() <= 1
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            out.push(rule);
            continue;
        }
        match simple.iter_mut().find(|s| {
            s.api_groups == rule.api_groups && s.resources == rule.resources && s.resource_names == rule.resource_names
        }) {
            Some(existing) => {
                for verb in rule.verbs {
                    if !has(&existing.verbs, &verb) {
                        existing.verbs.push(verb);
                    }
                }
            }
            None => simple.push(rule),
        }
    }
    out.extend(simple);
    out
}

/// A string list as Go's `%q` prints a `[]string`: `["a" "b"]`.
pub fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| podpass_api::validation::quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// `CompactString`: `{APIGroups:["…"], Resources:["…"], NonResourceURLs:[…], ResourceNames:[…], Verbs:[…]}`
/// with empty fields left out.
pub fn compact_string(rule: &PolicyRule) -> String {
    let parts: Vec<String> = [
        ("APIGroups", &rule.api_groups),
        ("Resources", &rule.resources),
        ("NonResourceURLs", &rule.non_resource_urls),
        ("ResourceNames", &rule.resource_names),
        ("Verbs", &rule.verbs),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k}:{}", go_quoted_list(v)))
    .collect();
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn full_authority_covers_everything_and_nothing_covers_it_but_itself() {
        let wanted = vec![
            rule(
                json!({"verbs": ["get", "bind"], "apiGroups": ["", "apps"], "resources": ["pods/status", "x"], "resourceNames": ["a"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics", "/api/*"]})),
        ];
        assert_eq!(covers(&full_authority(), &wanted), Ok(()));
        assert_eq!(covers(&full_authority(), &full_authority()), Ok(()));
        let pods = vec![rule(json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}))];
        let Err(Uncovered::Missing(missing)) = covers(&pods, &full_authority()) else { panic!("covered") };
        assert_eq!(
            compact(missing).iter().map(compact_string).collect::<Vec<_>>(),
            // rules that are not simple first, then the merged simple ones (upstream order)
            vec![
                r#"{NonResourceURLs:["*"], Verbs:["*"]}"#.to_owned(),
                r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#.to_owned(),
            ]
        );
    }

    #[test]
    fn subresources_names_and_urls_follow_upstream_matching() {
        let owner = vec![
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*/status"]})),
            rule(
                json!({"verbs": ["update"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a", "b"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]})),
        ];
        let ok = |v: Value| covers(&owner, &[rule(v)]).is_ok();
        assert!(ok(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/status"]})));
        // `*/status` does not cover the object itself
        assert!(!ok(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})));
        assert!(ok(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]})));
        // a rule without names asks for every name: not covered by a named grant
        assert!(!ok(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["secrets"]})));
        assert!(!ok(json!({"verbs": ["update"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["c"]})));
        assert!(ok(json!({"verbs": ["get"], "nonResourceURLs": ["/apis/rbac", "/apis/*"]})));
        assert!(!ok(json!({"verbs": ["get"], "nonResourceURLs": ["/api"]})));
        // a wildcard verb is more than any list of verbs
        assert!(!ok(json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods/status"]})));
    }

    #[test]
    fn compaction_merges_verbs_of_simple_rules_only() {
        let missing = vec![
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})),
            rule(json!({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]})),
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["x"]})),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/x"]})),
        ];
        let text: Vec<String> = compact(missing).iter().map(compact_string).collect();
        assert_eq!(
            text,
            vec![
                r#"{NonResourceURLs:["/x"], Verbs:["get"]}"#,
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}"#,
                r#"{APIGroups:[""], Resources:["pods"], ResourceNames:["x"], Verbs:["get"]}"#,
            ]
        );
    }

    #[test]
    fn breakdown_is_the_cross_product() {
        let r = rule(
            json!({"verbs": ["get", "list"], "apiGroups": ["", "apps"], "resources": ["a"], "resourceNames": ["x", "y"]}),
        );
        assert_eq!(breakdown(&r).len(), 8);
        let u = rule(json!({"verbs": ["get", "post"], "nonResourceURLs": ["/a", "/b", "/c"]}));
        assert_eq!(breakdown(&u).len(), 6);
        assert!(breakdown(&PolicyRule::default()).is_empty());
    }

    #[test]
    fn huge_cross_products_are_refused_before_they_are_expanded() {
        let many = |p: &str| (0..40).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        let r = PolicyRule {
            verbs: many("v"),
            api_groups: many("g"),
            resources: many("r"),
            resource_names: many("n"),
            non_resource_urls: vec![],
        };
        assert_eq!(breakdown_len(&r), 40 * 40 * 40 * 40);
        assert_eq!(covers(&full_authority(), std::slice::from_ref(&r)), Ok(()));
        let pods = vec![rule(json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}))];
        assert_eq!(covers(&pods, &[r]), Err(Uncovered::TooLarge(2_560_000)));
    }

    #[test]
    fn malformed_rules_grant_nothing() {
        let role =
            json!({"rules": [{"verbs": "get"}, 7, {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]});
        assert_eq!(rules_of(&role).len(), 1);
        assert!(rules_of(&json!({"rules": "x"})).is_empty());
    }
}
