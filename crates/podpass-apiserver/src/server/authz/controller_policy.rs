//! The bootstrap roles of kube-scheduler, of kube-controller-manager and of the controllers
//! it runs as their own service accounts (upstream `bootstrappolicy/policy.go`
//! `system:kube-scheduler`, `system:kube-controller-manager`,
//! `controller_policy.go` `buildControllerRoles`): ClusterRole `system:controller:<name>`
//! bound to `kube-system/<name>`, each holding only what that controller writes.

use serde_json::{Value, json};

const RBAC: &str = "rbac.authorization.k8s.io";

fn labelled(kind: &str, name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
           "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}})
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// upstream `eventsRule`.
fn events() -> Value {
    rule(&["create", "update", "patch"], &["", "events.k8s.io"], &["events"])
}

/// A controller's role and its binding to `kube-system/<name>`.
fn controller(name: &str, rules: Value) -> [(&'static str, Value); 2] {
    let mut role = labelled("ClusterRole", &format!("system:controller:{name}"));
    role["rules"] = rules;
    let mut binding = labelled("ClusterRoleBinding", &format!("system:controller:{name}"));
    binding["roleRef"] = json!({"apiGroup": RBAC, "kind": "ClusterRole", "name": format!("system:controller:{name}")});
    binding["subjects"] = json!([{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}]);
    [("clusterroles", role), ("clusterrolebindings", binding)]
}

/// A controller's Role in `namespace` and its binding to `kube-system/<name>` (upstream
/// `addNamespaceRole`).
fn namespaced_controller(namespace: &str, name: &str, rules: Value) -> [(&'static str, Value); 2] {
    let mut role = labelled("Role", &format!("system:controller:{name}"));
    role["metadata"]["namespace"] = json!(namespace);
    role["rules"] = rules;
    let mut binding = labelled("RoleBinding", &format!("system:controller:{name}"));
    binding["metadata"]["namespace"] = json!(namespace);
    binding["roleRef"] = json!({"apiGroup": RBAC, "kind": "Role", "name": format!("system:controller:{name}")});
    binding["subjects"] = json!([{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}]);
    [("roles", role), ("rolebindings", binding)]
}

/// `system:kube-scheduler` and its binding to the user of that name.
fn scheduler() -> [(&'static str, Value); 2] {
    const READ: [&str; 3] = ["get", "list", "watch"];
    let mut role = labelled("ClusterRole", "system:kube-scheduler");
    role["rules"] = json!([
        events(),
        rule(&["create"], &["coordination.k8s.io"], &["leases"]),
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kube-scheduler"],
         "verbs": ["get", "update"]},
        // Beyond upstream's role: podpass's scheduler reads the node leases to judge a
        // node reachable (upstream leaves that to the node lifecycle controller's taints).
        rule(&["list", "watch"], &["coordination.k8s.io"], &["leases"]),
        rule(&READ, &[""], &["nodes"]),
        rule(&["delete", "get", "list", "watch"], &[""], &["pods"]),
        rule(&["create"], &[""], &["bindings", "pods/binding"]),
        rule(&["patch", "update"], &[""], &["pods/status"]),
        rule(&READ, &[""], &["replicationcontrollers", "services", "namespaces"]),
        rule(&READ, &["apps", "extensions"], &["replicasets"]),
        rule(&READ, &["apps"], &["statefulsets"]),
        rule(&READ, &["policy"], &["poddisruptionbudgets"]),
        rule(&READ, &[""], &["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
        rule(&READ, &["storage.k8s.io"], &["csinodes", "csidrivers", "csistoragecapacities"]),
    ]);
    let mut binding = labelled("ClusterRoleBinding", "system:kube-scheduler");
    binding["roleRef"] = json!({"apiGroup": RBAC, "kind": "ClusterRole", "name": "system:kube-scheduler"});
    binding["subjects"] = json!([{"apiGroup": RBAC, "kind": "User", "name": "system:kube-scheduler"}]);
    [("clusterroles", role), ("clusterrolebindings", binding)]
}

/// The roles and bindings.
pub(crate) fn policy() -> Vec<(&'static str, Value)> {
    let mut manager = labelled("ClusterRole", "system:kube-controller-manager");
    manager["rules"] = json!([
        events(),
        rule(&["create"], &["coordination.k8s.io"], &["leases"]),
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kube-controller-manager"],
         "verbs": ["get", "update"]},
        // --use-service-account-credentials: the controllers' accounts and their tokens;
        // the tokens controller (which runs as the manager itself) fills token Secrets.
        rule(&["create"], &[""], &["secrets", "serviceaccounts"]),
        rule(&["delete"], &[""], &["secrets"]),
        rule(&["get"], &[""], &["namespaces", "secrets", "serviceaccounts", "configmaps"]),
        rule(&["update"], &[""], &["secrets", "serviceaccounts"]),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
        // Delegated authentication and authorization checks.
        rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
        // The shared informers.
        rule(&["list", "watch"], &["*"], &["*"]),
    ]);
    let mut manager_binding = labelled("ClusterRoleBinding", "system:kube-controller-manager");
    manager_binding["roleRef"] =
        json!({"apiGroup": RBAC, "kind": "ClusterRole", "name": "system:kube-controller-manager"});
    manager_binding["subjects"] = json!([{"apiGroup": RBAC, "kind": "User", "name": "system:kube-controller-manager"}]);
    let mut policy = vec![("clusterroles", manager), ("clusterrolebindings", manager_binding)];
    policy.extend(scheduler());
    policy.extend(controller(
        "replicaset-controller",
        json!([
            rule(&["get", "list", "watch", "update"], &["apps", "extensions"], &["replicasets"]),
            rule(&["update"], &["apps", "extensions"], &["replicasets/status"]),
            rule(&["update"], &["apps", "extensions"], &["replicasets/finalizers"]),
            rule(&["list", "watch", "patch", "create", "delete"], &[""], &["pods"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "daemon-set-controller",
        json!([
            rule(&["get", "list", "watch"], &["extensions", "apps"], &["daemonsets"]),
            rule(&["update"], &["extensions", "apps"], &["daemonsets/status"]),
            rule(&["update"], &["extensions", "apps"], &["daemonsets/finalizers"]),
            rule(&["list", "watch"], &[""], &["nodes"]),
            rule(&["list", "watch", "create", "delete", "patch"], &[""], &["pods"]),
            rule(&["create"], &[""], &["pods/binding"]),
            rule(&["get", "list", "watch", "create", "delete", "update", "patch"], &["apps"], &["controllerrevisions"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "deployment-controller",
        json!([
            rule(&["get", "list", "watch", "update"], &["apps", "extensions"], &["deployments"]),
            rule(&["update"], &["apps", "extensions"], &["deployments/status"]),
            rule(&["update"], &["apps", "extensions"], &["deployments/finalizers"]),
            rule(
                &["get", "list", "watch", "create", "update", "patch", "delete"],
                &["apps", "extensions"],
                &["replicasets"]
            ),
            // Recreate waits for the old pods; a pod is relabelled on adoption.
            rule(&["get", "list", "watch", "update"], &[""], &["pods"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "job-controller",
        json!([
            rule(&["get", "list", "watch", "update", "patch"], &["batch"], &["jobs"]),
            rule(&["update"], &["batch"], &["jobs/status"]),
            rule(&["update"], &["batch"], &["jobs/finalizers"]),
            rule(&["list", "watch", "create", "delete", "patch"], &[""], &["pods"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "cronjob-controller",
        json!([
            rule(&["get", "list", "watch", "update"], &["batch"], &["cronjobs"]),
            rule(&["get", "list", "watch", "create", "update", "delete", "patch"], &["batch"], &["jobs"]),
            rule(&["update"], &["batch"], &["cronjobs/status"]),
            rule(&["update"], &["batch"], &["cronjobs/finalizers"]),
            rule(&["list", "delete"], &[""], &["pods"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "endpoint-controller",
        json!([
            rule(&["get", "list", "watch"], &[""], &["services", "pods"]),
            rule(&["get", "list", "create", "update", "delete"], &[""], &["endpoints"]),
            rule(&["create"], &[""], &["endpoints/restricted"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "endpointslice-controller",
        json!([
            rule(&["get", "list", "watch"], &[""], &["services", "pods", "nodes"]),
            // The slices' owner references block their Service's deletion.
            rule(&["update"], &[""], &["services/finalizers"]),
            rule(&["get", "list", "create", "update", "delete"], &["discovery.k8s.io"], &["endpointslices"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "service-account-controller",
        json!([rule(&["create"], &[""], &["serviceaccounts"]), events()]),
    ));
    policy.extend(controller(
        "root-ca-cert-publisher",
        json!([rule(&["create", "update"], &[""], &["configmaps"]), events()]),
    ));
    policy.extend(controller(
        "resourcequota-controller",
        json!([
            // Counting any resource.
            rule(&["list", "watch"], &["*"], &["*"]),
            rule(&["update"], &[""], &["resourcequotas/status"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "pod-garbage-collector",
        json!([
            rule(&["list", "watch", "delete"], &[""], &["pods"]),
            rule(&["get", "list"], &[""], &["nodes"]),
            rule(&["patch"], &[""], &["pods/status"]),
        ]),
    ));
    policy.extend(controller(
        "node-controller",
        json!([
            rule(&["get", "list", "update", "delete", "patch"], &[""], &["nodes"]),
            rule(&["patch", "update"], &[""], &["nodes/status"]),
            // Pods marked not Ready on a silent node.
            rule(&["patch", "update"], &[""], &["pods/status"]),
            rule(&["list", "delete"], &[""], &["pods"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "taint-eviction-controller",
        json!([
            // The DisruptionTarget condition before the eviction.
            rule(&["patch", "update"], &[""], &["pods/status"]),
            rule(&["list", "get", "delete"], &[""], &["pods"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "namespace-controller",
        json!([
            rule(&["get", "list", "watch", "delete"], &[""], &["namespaces"]),
            rule(&["update"], &[""], &["namespaces/finalize", "namespaces/status"]),
            rule(&["get", "list", "delete", "deletecollection"], &["*"], &["*"]),
        ]),
    ));
    policy.extend(controller(
        "clusterrole-aggregation-controller",
        json!([rule(&["escalate", "get", "list", "patch", "update", "watch"], &[RBAC], &["clusterroles"])]),
    ));
    // The bootstrap token controllers (upstream's NamespaceRoles).
    policy.extend(namespaced_controller(
        "kube-system",
        "bootstrap-signer",
        json!([rule(&["get", "list", "watch"], &[""], &["secrets"])]),
    ));
    policy.extend(namespaced_controller(
        "kube-public",
        "bootstrap-signer",
        json!([
            rule(&["get", "list", "watch"], &[""], &["configmaps"]),
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cluster-info"], "verbs": ["update"]},
            events(),
        ]),
    ));
    policy.extend(namespaced_controller(
        "kube-system",
        "token-cleaner",
        json!([rule(&["delete", "get", "list", "watch"], &[""], &["secrets"]), events()]),
    ));
    policy.extend(controller(
        "certificate-controller",
        json!([
            rule(&["get", "list", "watch", "delete"], &["certificates.k8s.io"], &["certificatesigningrequests"]),
            rule(
                &["update"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests/status", "certificatesigningrequests/approval"]
            ),
            // Beyond upstream: podpass also approves a node's serving certificate whose
            // names and addresses are its Node's, reading that Node.
            {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"],
             "resourceNames": ["kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"]},
            rule(&["get"], &[""], &["nodes"]),
            {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["sign"],
             "resourceNames": ["kubernetes.io/legacy-unknown", "kubernetes.io/kube-apiserver-client",
                               "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"]},
            rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
            events(),
        ]),
    ));
    policy.extend(controller(
        "ttl-after-finished-controller",
        json!([rule(&["get", "list", "watch", "delete"], &["batch"], &["jobs"]), events()]),
    ));
    policy.extend(controller(
        "generic-garbage-collector",
        json!([rule(&["get", "list", "watch", "patch", "update", "delete"], &["*"], &["*"]), events()]),
    ));
    policy
}
