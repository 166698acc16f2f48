//! The bootstrap RBAC policy kube-apiserver creates on start (plugin/pkg/auth/authorizer/rbac/
//! bootstrappolicy): the roles and bindings podpass's users rely on, among them the
//! user-facing `admin`, `edit` and `view`, aggregated (`rbac.authorization.k8s.io/
//! aggregate-to-*` labels) from `system:aggregate-to-*` as upstream's, so a role labelled
//! by an admin extends them (the controller manager's aggregation controller gathers the
//! rules).
//!
//! Reconciled on every start as upstream's `ensureRBACPolicy`: a missing object is created;
//! an existing one annotated `rbac.authorization.kubernetes.io/autoupdate` other than
//! `"false"` gets what it lacks (rules, aggregation selectors, labels; binding subjects and
//! the role it refers to) and keeps whatever the admin added; one annotated `"false"` is
//! left exactly as it is.

use serde_json::{Value, json};

use crate::server::AppState;
use crate::server::rest::objects::prepare_new;
use crate::server::rest::resources::find;
use crate::server::status::StatusError;
use crate::store::{ObjectKey, StoreError};

/// The annotation that lets an admin keep a bootstrap object as edited (`"false"`).
const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// `Read` of upstream's policy helpers.
const READ: [&str; 3] = ["get", "list", "watch"];
/// `Write`.
const WRITE: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

const RBAC: &str = "rbac.authorization.k8s.io";

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
           "rules": rules})
}

/// A ClusterRole whose rules are those of the roles its selectors match (labelled
/// `rbac.authorization.k8s.io/aggregate-to-<to>`), itself labelled with `labels`.
fn aggregated(name: &str, to: &str, labels: &[(&str, &str)]) -> Value {
    let mut r = role(name, json!([]));
    r["aggregationRule"] =
        json!({"clusterRoleSelectors": [{"matchLabels": {format!("{RBAC}/aggregate-to-{to}"): "true"}}]});
    for (k, v) in labels {
        r["metadata"]["labels"][*k] = json!(v);
    }
    r
}

/// A ClusterRole whose rules aggregate into `to` (`admin`, `edit` or `view`).
fn aggregate_to(to: &str, rules: Value) -> Value {
    let mut r = role(&format!("system:aggregate-to-{to}"), rules);
    r["metadata"]["labels"][format!("{RBAC}/aggregate-to-{to}")] = json!("true");
    r
}

/// A rule of `verbs` on `resources` of `group`.
fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
}

/// upstream `eventsRule`: writing Events in both groups.
fn events_rule() -> Value {
    json!({"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "update", "patch"]})
}

/// The user-facing roles and what aggregates into them (upstream's rules, including those
/// for kinds podpass does not serve, so a role means the same on both).
fn user_facing_roles() -> Vec<Value> {
    let read_write: Vec<&str> = READ.iter().chain(WRITE.iter()).copied().collect();
    vec![
        aggregated("admin", "admin", &[]),
        aggregated("edit", "edit", &[("rbac.authorization.k8s.io/aggregate-to-admin", "true")]),
        aggregated("view", "view", &[("rbac.authorization.k8s.io/aggregate-to-edit", "true")]),
        aggregate_to(
            "admin",
            json!([
                rule(&["create"], "authorization.k8s.io", &["localsubjectaccessreviews"]),
                rule(&read_write, RBAC, &["roles", "rolebindings"]),
            ]),
        ),
        aggregate_to(
            "edit",
            json!([
                rule(
                    &READ,
                    "",
                    &["pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"]
                ),
                rule(&["impersonate"], "", &["serviceaccounts"]),
                rule(&WRITE, "", &["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"]),
                rule(
                    &WRITE,
                    "",
                    &[
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                        "endpoints",
                        "persistentvolumeclaims",
                        "configmaps",
                        "secrets",
                    ],
                ),
                rule(
                    &WRITE,
                    "apps",
                    &[
                        "statefulsets",
                        "statefulsets/scale",
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "replicasets",
                        "replicasets/scale",
                    ],
                ),
                rule(&WRITE, "autoscaling", &["horizontalpodautoscalers"]),
                rule(&WRITE, "batch", &["jobs", "cronjobs"]),
                rule(
                    &WRITE,
                    "extensions",
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "ingresses",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                        "networkpolicies",
                    ],
                ),
                rule(&WRITE, "policy", &["poddisruptionbudgets"]),
                rule(&WRITE, "networking.k8s.io", &["networkpolicies", "ingresses"]),
            ]),
        ),
        aggregate_to(
            "view",
            json!([
                rule(
                    &READ,
                    "",
                    &[
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "configmaps",
                    ],
                ),
                rule(
                    &READ,
                    "",
                    &[
                        "limitranges",
                        "resourcequotas",
                        "bindings",
                        "events",
                        "pods/status",
                        "resourcequotas/status",
                        "namespaces/status",
                        "replicationcontrollers/status",
                        "pods/log",
                    ],
                ),
                // Reading namespaces at namespace scope: reading *this* namespace.
                rule(&READ, "", &["namespaces"]),
                rule(
                    &READ,
                    "apps",
                    &[
                        "controllerrevisions",
                        "statefulsets",
                        "statefulsets/status",
                        "statefulsets/scale",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/status",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/status",
                        "replicasets/scale",
                    ],
                ),
                rule(&READ, "autoscaling", &["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
                rule(&READ, "batch", &["jobs", "cronjobs", "cronjobs/status", "jobs/status"]),
                rule(
                    &READ,
                    "extensions",
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                        "networkpolicies",
                    ],
                ),
                rule(&READ, "policy", &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
                rule(&READ, "networking.k8s.io", &["networkpolicies", "ingresses", "ingresses/status"]),
            ]),
        ),
        role(
            "system:node-proxier",
            json!([
                rule(&["list", "watch"], "", &["services", "endpoints"]),
                rule(&READ, "", &["nodes"]),
                events_rule(),
                rule(&["list", "watch"], "discovery.k8s.io", &["endpointslices"]),
            ]),
        ),
        // A node's TLS bootstrap (bound by whoever runs the cluster, as kubeadm does).
        role(
            "system:node-bootstrapper",
            json!([rule(&["create", "get", "list", "watch"], "certificates.k8s.io", &["certificatesigningrequests"])]),
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            json!([rule(&["create"], "certificates.k8s.io", &["certificatesigningrequests/nodeclient"])]),
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            json!([rule(&["create"], "certificates.k8s.io", &["certificatesigningrequests/selfnodeclient"])]),
        ),
        // metrics-server's own role: the resource metrics, read by whoever may view.
        {
            let mut r = role(
                "system:aggregated-metrics-reader",
                json!([rule(&["get", "list", "watch"], "metrics.k8s.io", &["pods", "nodes"])]),
            );
            for to in ["view", "edit", "admin"] {
                r["metadata"]["labels"][format!("{RBAC}/aggregate-to-{to}")] = json!("true");
            }
            r
        },
    ]
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
    let mut node_proxier = binding("system:node-proxier", "system:node-proxier", &[]);
    node_proxier["subjects"] = json!([{"apiGroup": RBAC, "kind": "User", "name": "system:kube-proxy"}]);
    let mut policy: Vec<(&'static str, Value)> = user_facing_roles().into_iter().map(|r| ("clusterroles", r)).collect();
    policy.push(("clusterrolebindings", node_proxier));
    policy.extend(vec![
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
    ]);
    policy.extend(super::controller_policy::policy());
    policy
}

/// Creates whatever of the bootstrap policy is missing and reconciles what exists (see the
/// module).
pub(crate) async fn ensure(state: &AppState) -> Result<(), StatusError> {
    for (resource, mut object) in policy() {
        let res = find(RBAC, resource).ok_or_else(StatusError::not_found_path)?;
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        // upstream's NamespaceRoles: a Role and its binding in a system namespace.
        let namespace = object.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_owned);
        let key = match &namespace {
            Some(ns) => ObjectKey::namespaced(resource, ns, &name),
            None => ObjectKey::cluster(resource, &name),
        };
        match state.store.get(&key).await {
            Ok(current) => {
                if let Some(reconciled) = reconcile(&current.object, &object) {
                    match state.store.update(&key, reconciled, Some(current.revision)).await {
                        Ok(_) => tracing::info!(%resource, %name, "bootstrap RBAC: reconciled"),
                        // written meanwhile: the next start reconciles again
                        Err(StoreError::Conflict { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(StoreError::NotFound { .. }) => {
                prepare_new(res, namespace.as_deref(), &mut object, podpass_token::now_unix())?;
                match state.store.create(&key, object).await {
                    Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// What an existing bootstrap object becomes (`None`: nothing to change): `wanted`'s
/// rules, selectors, labels and subjects it lacks added, the role a binding refers to set,
/// everything else kept; unless its autoupdate annotation is `"false"`.
fn reconcile(current: &Value, wanted: &Value) -> Option<Value> {
    let autoupdate = current.pointer("/metadata/annotations").and_then(|a| a.get(AUTOUPDATE)).and_then(Value::as_str);
    if autoupdate == Some("false") {
        return None;
    }
    let mut next = current.clone();
    let add_missing = |next: &mut Value, path: &str| {
        let Some(wanted_items) = wanted.pointer(path).and_then(Value::as_array) else { return };
        let mut items = next.pointer(path).and_then(Value::as_array).cloned().unwrap_or_default();
        for item in wanted_items {
            if !items.contains(item) {
                items.push(item.clone());
            }
        }
        if let Some(slot) = next.pointer_mut(path) {
            *slot = Value::Array(items);
        } else if let Some((parent, field)) = path.rsplit_once('/')
            && let Some(obj) = (if parent.is_empty() { Some(&mut *next) } else { next.pointer_mut(parent) })
                .and_then(Value::as_object_mut)
        {
            obj.insert(field.to_owned(), Value::Array(items));
        }
    };
    if wanted.get("aggregationRule").is_some() {
        if !next["aggregationRule"].is_object() {
            next["aggregationRule"] = json!({"clusterRoleSelectors": []});
        }
        add_missing(&mut next, "/aggregationRule/clusterRoleSelectors");
    } else if wanted.get("rules").is_some() {
        add_missing(&mut next, "/rules");
    }
    if wanted.get("subjects").is_some() {
        add_missing(&mut next, "/subjects");
    }
    if let Some(role_ref) = wanted.get("roleRef") {
        next["roleRef"] = role_ref.clone();
    }
    if let Some(labels) = wanted.pointer("/metadata/labels").and_then(Value::as_object) {
        if !next["metadata"]["labels"].is_object() {
            next["metadata"]["labels"] = json!({});
        }
        for (k, v) in labels {
            if next["metadata"]["labels"].get(k) != Some(v) {
                next["metadata"]["labels"][k] = v.clone();
            }
        }
    }
    if autoupdate.is_none() {
        if !next["metadata"]["annotations"].is_object() {
            next["metadata"]["annotations"] = json!({});
        }
        next["metadata"]["annotations"][AUTOUPDATE] = json!("true");
    }
    (next != *current).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(resource: &str, name: &str) -> Value {
        policy()
            .into_iter()
            .find(|(r, o)| *r == resource && o["metadata"]["name"] == name)
            .map(|(_, o)| o)
            .unwrap_or_default()
    }

    #[test]
    fn user_facing_roles_aggregate_as_upstreams() {
        let mut roles: Vec<Value> =
            policy().into_iter().filter(|(r, _)| *r == "clusterroles").map(|(_, o)| o).collect();
        // as the aggregation controller: aggregations of aggregations settle in rounds
        for _ in 0..roles.len() {
            let snapshot = roles.clone();
            for role in &mut roles {
                if let Some(rules) = podpass_api::rbac_aggregation::aggregated_rules(role, &snapshot) {
                    role["rules"] = Value::Array(rules);
                }
            }
        }
        let rules_of = |name: &str| -> Vec<Value> {
            let role = roles.iter().find(|r| r["metadata"]["name"] == name).cloned().unwrap_or_default();
            role["rules"].as_array().cloned().unwrap_or_default()
        };
        let grants = |rules: &[Value], verb: &str, group: &str, resource: &str| {
            rules.iter().any(|r| {
                let has = |f: &str, v: &str| r[f].as_array().is_some_and(|a| a.iter().any(|x| x == v || x == "*"));
                has("verbs", verb) && has("apiGroups", group) && has("resources", resource)
            })
        };
        let (view, edit, admin) = (rules_of("view"), rules_of("edit"), rules_of("admin"));
        assert!(grants(&view, "list", "", "configmaps") && !grants(&view, "get", "", "secrets"));
        assert!(grants(&edit, "create", "", "configmaps") && grants(&edit, "get", "", "secrets"));
        assert!(grants(&edit, "list", "", "pods"), "edit includes view");
        assert!(!grants(&edit, "create", RBAC, "rolebindings"), "edit grants no RBAC");
        assert!(grants(&admin, "create", RBAC, "rolebindings") && grants(&admin, "create", "", "secrets"));
        assert!(!grants(&admin, "update", "", "resourcequotas"), "quota is the cluster admin's");
    }

    #[test]
    fn reconciling_adds_what_is_missing_and_keeps_the_admins_additions() {
        let view = wanted("clusterroles", "system:aggregate-to-view");
        let mut edited = view.clone();
        if let Some(rules) = edited["rules"].as_array_mut() {
            rules.remove(0);
            rules.push(json!({"apiGroups": ["x"], "resources": ["y"], "verbs": ["get"]}));
        }
        let fixed = reconcile(&edited, &view).unwrap_or_default();
        let rules = fixed["rules"].as_array().cloned().unwrap_or_default();
        assert!(rules.contains(&view["rules"][0]), "the removed rule is back");
        assert!(rules.iter().any(|r| r["apiGroups"][0] == "x"), "the admin's rule stays");
        assert_eq!(reconcile(&fixed, &view), None, "nothing more to do");

        let mut protected = edited.clone();
        protected["metadata"]["annotations"][AUTOUPDATE] = json!("false");
        assert_eq!(reconcile(&protected, &view), None, "autoupdate=false: left alone");

        let binding = wanted("clusterrolebindings", "cluster-admin");
        let mut no_subjects = binding.clone();
        no_subjects["subjects"] = json!([]);
        no_subjects["roleRef"]["name"] = json!("view");
        let fixed = reconcile(&no_subjects, &binding).unwrap_or_default();
        assert_eq!(fixed["subjects"], binding["subjects"]);
        assert_eq!(fixed["roleRef"]["name"], "cluster-admin");
    }
}
