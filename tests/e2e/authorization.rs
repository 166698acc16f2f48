//! End-to-end: who may ask for what. A node identity from `podpass apiserver kubeconfig`
//! uses the real kubectl: tokens only for pods on its node, only for audiences the pod names
//! or RBAC grants (`request-serviceaccounts-token-audience`), never node-bound; and the
//! admin's `kubectl auth can-i --as` answers from the same authorizers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use support::*;

fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> Output {
    kubectl_with(kubeconfig, cache, args)
}

fn failed(out: Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} should have failed: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"NAME","namespace":"team"},
 "spec":{"serviceAccountName":"builder","nodeName":"NODE","containers":[{"name":"c","image":"registry.example/app:1"}],
  "volumes":[{"name":"registry-token","projected":{"sources":[{"serviceAccountToken":{"path":"token","audience":"registry.example"}}]}}]}}"#;

#[test]
fn nodes_get_tokens_only_for_their_pods_and_allowed_audiences() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _s = start(d, &[]);
    let admin_cfg = d.join("admin.kubeconfig");
    let admin = |args: &[&str]| kubectl(&admin_cfg, &d.join("cache-admin"), args);
    ok(admin(&["create", "namespace", "team"]), "namespace");
    wait_namespace_ready(&_s, "team");
    ok(admin(&["-n", "team", "create", "serviceaccount", "builder"]), "sa");
    ok(admin(&["-n", "team", "create", "serviceaccount", "other"]), "sa other");
    for (name, node) in [("web", "n1"), ("far", "n2")] {
        let path = d.join(format!("{name}.json"));
        std::fs::write(&path, POD.replace("NAME", name).replace("NODE", node)).unwrap();
        ok(admin(&["apply", "-f", path.to_str().unwrap()]), "apply pod");
    }
    let uid = |name: &str| ok(admin(&["-n", "team", "get", "pod", name, "-o", "jsonpath={.metadata.uid}"]), "get uid");
    let (web_uid, far_uid) = (uid("web"), uid("far"));

    let out = Command::new(PODPASS)
        .args(["apiserver", "kubeconfig", "--data-dir", d.to_str().unwrap()])
        .args(["--user", "system:node:n1", "--group", "system:nodes"])
        .output()
        .unwrap();
    let node_cfg = d.join("n1.kubeconfig");
    std::fs::write(&node_cfg, ok(out, "node kubeconfig")).unwrap();
    let node = |args: &[&str]| kubectl(&node_cfg, &d.join("cache-n1"), args);
    let token_for = |pod: &str, uid: &str, audience: &str| {
        node(&[
            "-n",
            "team",
            "create",
            "token",
            "builder",
            "--audience",
            audience,
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            pod,
            "--bound-object-uid",
            uid,
        ])
    };

    // the audience the pod's projected volume names: allowed
    let token = ok(token_for("web", &web_uid, "registry.example"), "token for web");
    assert!(token.trim().split('.').count() == 3);
    // an audience nothing allows: 403 naming the audience and the node
    let err = failed(token_for("web", &web_uid, "vault.example"), "unnamed audience");
    assert!(
        err.contains(r#"serviceaccounts "builder" is forbidden: audience "vault.example" not found in pod spec volume, system:node:n1 is not authorized to request tokens for this audience"#),
        "{err}"
    );
    // allowed once RBAC grants it (resource = the audience, name = the service account)
    // (`kubectl create clusterrole --resource` insists on a discoverable resource type, as
    // against a real cluster; an audience is not one, so the role is applied as a manifest)
    let role = d.join("role.json");
    std::fs::write(
        &role,
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"vault-audience"},
            "rules":[{"verbs":["request-serviceaccounts-token-audience"],"apiGroups":[""],
                      "resources":["vault.example"],"resourceNames":["builder"]}]}"#,
    )
    .unwrap();
    ok(admin(&["apply", "-f", role.to_str().unwrap()]), "clusterrole");
    ok(
        admin(&[
            "create",
            "clusterrolebinding",
            "n1-vault",
            "--clusterrole",
            "vault-audience",
            "--user",
            "system:node:n1",
        ]),
        "binding",
    );
    ok(token_for("web", &web_uid, "vault.example"), "after the grant");
    // a pod on another node, a stale UID, a node-bound token: refused
    let err = failed(token_for("far", &far_uid, "registry.example"), "pod on n2");
    assert!(err.contains("forbidden"), "{err}");
    let err = failed(token_for("web", "00000000-0000-0000-0000-000000000000", "registry.example"), "stale uid");
    assert!(err.contains("does not match the UID in record"), "{err}");
    let err = failed(
        node(&["-n", "team", "create", "token", "builder", "--bound-object-kind", "Node", "--bound-object-name", "n1"]),
        "node-bound",
    );
    assert!(err.contains("node requested token not bound to a pod") || err.contains("forbidden"), "{err}");
    // the node cannot read what its pods do not reference
    let err = failed(node(&["-n", "team", "get", "serviceaccount", "other"]), "unrelated sa");
    assert!(err.contains("no relationship found between node 'n1' and this object"), "{err}");
    assert!(ok(node(&["-n", "team", "get", "serviceaccount", "builder", "-o", "name"]), "own sa").contains("builder"));
    // one object by a metadata.name field selector (the kubelet's Watch strategy): listed
    // when a pod of the node references it, refused otherwise, and never the whole list
    let by_name = |name: &str| {
        node(&[
            "-n",
            "team",
            "get",
            "serviceaccounts",
            "--field-selector",
            &format!("metadata.name={name}"),
            "-o",
            "name",
        ])
    };
    assert_eq!(ok(by_name("builder"), "own sa by name").trim(), "serviceaccount/builder");
    assert!(failed(by_name("other"), "unrelated sa by name").contains("forbidden"));
    assert!(failed(node(&["-n", "team", "get", "serviceaccounts"]), "all sas").contains("forbidden"));
    let both =
        node(&["-n", "team", "get", "serviceaccounts", "--field-selector", "metadata.name=builder,metadata.name!=x"]);
    assert!(failed(both, "a selector naming no one object").contains("forbidden"));

    // kubectl auth can-i --as answers from the same authorizers
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", "system:node:n1", "--as-group", "system:nodes", "-n", "team"]);
        let out = admin(&all);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(can(&["create", "serviceaccounts/builder", "--subresource", "token"]), "yes");
    // kubectl prints the authorizer's reason after a "no"
    assert_eq!(
        can(&["create", "serviceaccounts/other", "--subresource", "token"]),
        "no - no relationship found between node 'n1' and this object"
    );
    assert_eq!(can(&["get", "pods/web"]), "yes");
    assert!(can(&["get", "pods/far"]).starts_with("no"));
    // upstream's reasons (authorizeReadNamespacedObject)
    assert_eq!(can(&["list", "secrets"]), "no - No Object name found");
    assert_eq!(can(&["create", "configmaps"]), "no - can only read resources of this type");
    // the node itself may not impersonate
    let err = failed(node(&["get", "pods", "-n", "team", "--as", "system:admin"]), "impersonation by a node");
    assert!(err.contains("cannot impersonate resource \"users\""), "{err}");
}

/// A kubeconfig for `user` (with `groups`) from `podpass apiserver kubeconfig`.
fn identity(d: &Path, user: &str, groups: &[&str]) -> std::path::PathBuf {
    let path = d.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, ok(identity_output(d, user, groups), "kubeconfig")).unwrap();
    path
}

const ESCALATION: &str = "is attempting to grant RBAC permissions not currently held:";

#[test]
fn tenant_cannot_escalate_through_rbac() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _s = start(d, &[]);
    let admin_cfg = d.join("admin.kubeconfig");
    let admin = |args: &[&str]| kubectl(&admin_cfg, &d.join("cache-admin"), args);
    ok(admin(&["create", "namespace", "team"]), "namespace");
    wait_namespace_ready(&_s, "team");
    // alice may manage RBAC objects in her namespace and read pods; nothing more
    ok(
        admin(&[
            "-n",
            "team",
            "create",
            "role",
            "rbac-manager",
            "--verb=create,update,patch,get",
            "--resource=rolebindings.rbac.authorization.k8s.io,roles.rbac.authorization.k8s.io",
        ]),
        "role",
    );
    ok(admin(&["-n", "team", "create", "role", "pod-reader", "--verb=get,list", "--resource=pods"]), "pod-reader");
    ok(admin(&["-n", "team", "create", "rolebinding", "alice-rbac", "--role=rbac-manager", "--user=alice"]), "bind");
    ok(admin(&["-n", "team", "create", "rolebinding", "alice-pods", "--role=pod-reader", "--user=alice"]), "bind");
    ok(
        admin(&[
            "create",
            "clusterrole",
            "crb-creator",
            "--verb=create",
            "--resource=clusterrolebindings,clusterroles",
        ]),
        "cr",
    );
    ok(admin(&["create", "clusterrolebinding", "alice-crb", "--clusterrole=crb-creator", "--user=alice"]), "crb");
    let alice_cfg = identity(d, "alice", &["team"]);
    let alice = |args: &[&str]| kubectl(&alice_cfg, &d.join("cache-alice"), args);

    // 1. a RoleBinding to cluster-admin for herself: refused with upstream's message
    let err = failed(
        alice(&["-n", "team", "create", "rolebinding", "pwn", "--clusterrole=cluster-admin", "--user=alice"]),
        "rolebinding to cluster-admin",
    );
    assert!(
        err.contains(&format!(
            "rolebindings.rbac.authorization.k8s.io \"pwn\" is forbidden: user \"alice\" (groups=[\"team\" \"system:authenticated\"]) {ESCALATION}\n{{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}}\n{{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}}"
        )),
        "{err}"
    );
    // 2. a ClusterRoleBinding to cluster-admin: refused
    let err = failed(
        alice(&["create", "clusterrolebinding", "pwn", "--clusterrole=cluster-admin", "--user=alice"]),
        "clusterrolebinding to cluster-admin",
    );
    assert!(err.contains(ESCALATION), "{err}");
    assert!(failed(admin(&["get", "clusterrolebinding", "pwn"]), "nothing stored").contains("NotFound"));
    // 3. widening a role bound to her (update and patch): refused; what she holds is fine
    let err = failed(
        alice(&[
            "-n",
            "team",
            "patch",
            "role",
            "pod-reader",
            "--type=merge",
            "-p",
            r#"{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}"#,
        ]),
        "widening patch",
    );
    assert!(
        err.contains(r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#) && err.contains(ESCALATION),
        "{err}"
    );
    let role = d.join("widened.json");
    std::fs::write(
        &role,
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"pod-reader","namespace":"team"},
            "rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","delete"]}]}"#,
    )
    .unwrap();
    let err = failed(alice(&["replace", "-f", role.to_str().unwrap()]), "widening update");
    assert!(err.contains(r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}"#), "{err}");
    ok(
        alice(&["-n", "team", "create", "role", "narrow", "--verb=get", "--resource=pods"]),
        "a role within her own rights",
    );
    ok(
        alice(&["-n", "team", "create", "rolebinding", "bob-pods", "--role=pod-reader", "--user=bob"]),
        "binding a role she holds",
    );
    // a binding to a role that does not exist: the role's 404, as upstream
    let err = failed(alice(&["-n", "team", "create", "rolebinding", "ghost", "--role=nope", "--user=bob"]), "ghost");
    assert!(err.contains(r#"roles.rbac.authorization.k8s.io "nope" not found"#), "{err}");

    // 4. `bind` on a role lets her bind it without holding it; `escalate` lets her write it
    ok(admin(&["create", "clusterrole", "secret-reader", "--verb=get", "--resource=secrets"]), "secret-reader");
    assert!(
        failed(
            alice(&["-n", "team", "create", "rolebinding", "bob-secrets", "--clusterrole=secret-reader", "--user=bob"]),
            "before bind"
        )
        .contains(ESCALATION)
    );
    ok(
        admin(&[
            "-n",
            "team",
            "create",
            "role",
            "binder",
            "--verb=bind",
            "--resource=clusterroles.rbac.authorization.k8s.io",
            "--resource-name=secret-reader",
        ]),
        "binder",
    );
    ok(admin(&["-n", "team", "create", "rolebinding", "alice-binder", "--role=binder", "--user=alice"]), "bind");
    ok(
        alice(&["-n", "team", "create", "rolebinding", "bob-secrets", "--clusterrole=secret-reader", "--user=bob"]),
        "with bind",
    );
    // … which did not give her the secrets herself
    assert!(failed(alice(&["-n", "team", "get", "secrets"]), "secrets").contains("forbidden"));
    ok(
        admin(&[
            "-n",
            "team",
            "create",
            "role",
            "escalator",
            "--verb=escalate",
            "--resource=roles.rbac.authorization.k8s.io",
        ]),
        "escalator",
    );
    ok(admin(&["-n", "team", "create", "rolebinding", "alice-escalator", "--role=escalator", "--user=alice"]), "bind");
    ok(alice(&["-n", "team", "create", "role", "wide", "--verb=*", "--resource=secrets"]), "with escalate");

    // 5. aggregation: only full authority may set an aggregationRule; aggregated rules count
    let agg = d.join("agg.json");
    std::fs::write(
        &agg,
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"gather"},
            "aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"example.com/aggregate-to-gather":"true"}}]}}"#,
    )
    .unwrap();
    let err = failed(alice(&["create", "-f", agg.to_str().unwrap()]), "aggregationRule by a tenant");
    assert!(err.contains("must have cluster-admin privileges to use the aggregationRule"), "{err}");
    ok(admin(&["create", "-f", agg.to_str().unwrap()]), "aggregated role");
    ok(admin(&["create", "clusterrole", "cm-reader", "--verb=get", "--resource=configmaps"]), "cm-reader");
    ok(admin(&["label", "clusterrole", "cm-reader", "example.com/aggregate-to-gather=true"]), "label");
    // gathered by the controller manager's aggregation controller, a moment later
    wait_for("the aggregated rule", Duration::from_secs(30), || {
        let rules = ok(admin(&["get", "clusterrole", "gather", "-o", "jsonpath={.rules}"]), "gathered");
        rules.contains("configmaps").then_some(serde_json::Value::Null)
    });
    // she cannot bind the aggregate, whose rules she does not hold; once bound to her, she can
    let err = failed(alice(&["create", "clusterrolebinding", "g", "--clusterrole=gather", "--user=alice"]), "agg");
    assert!(err.contains(r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}"#), "{err}");
    ok(admin(&["create", "clusterrolebinding", "alice-gather", "--clusterrole=gather", "--user=alice"]), "bind agg");
    ok(alice(&["create", "clusterrolebinding", "bob-gather", "--clusterrole=gather", "--user=bob"]), "now held");
    ok(alice(&["-n", "team", "get", "configmap", "kube-root-ca.crt"]), "aggregated rule is in force");
}

#[test]
fn a_node_writes_only_its_own_node_and_lease() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _s = start(d, &[]);
    let node_cfg = identity(d, "system:node:n1", &["system:nodes"]);
    let node = |args: &[&str]| kubectl(&node_cfg, &d.join("cache-n1"), args);
    let write = |name: &str, body: String| {
        let path = d.join(name);
        std::fs::write(&path, body).unwrap();
        path
    };
    let lease = |name: &str, ns: &str| {
        format!(
            r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"{ns}"}},
                "spec":{{"holderIdentity":"{name}","leaseDurationSeconds":40,"renewTime":"2026-11-24T00:00:00.000000Z"}}}}"#
        )
    };
    let node_obj = |name: &str| format!(r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{name}"}}}}"#);

    // its own Node and heartbeat Lease: created, renewed, read
    ok(node(&["create", "-f", write("n1.json", node_obj("n1")).to_str().unwrap()]), "own node");
    ok(node(&["create", "-f", write("l1.json", lease("n1", "kube-node-lease")).to_str().unwrap()]), "own lease");
    ok(
        node(&[
            "-n",
            "kube-node-lease",
            "patch",
            "lease",
            "n1",
            "--type=merge",
            "-p",
            r#"{"spec":{"renewTime":"2026-11-24T00:00:10.000000Z"}}"#,
        ]),
        "renew",
    );
    assert!(ok(node(&["-n", "kube-node-lease", "get", "lease", "n1", "-o", "name"]), "read").contains("n1"));
    // another node's Node or Lease, or a lease elsewhere: NodeRestriction's messages
    let err = failed(node(&["create", "-f", write("n2.json", node_obj("n2")).to_str().unwrap()]), "other node");
    assert!(err.contains(r#"node "n1" is not allowed to modify node "n2""#), "{err}");
    let err = failed(node(&["create", "-f", write("l2.json", lease("n2", "kube-node-lease")).to_str().unwrap()]), "n2");
    assert!(err.contains("can only access node lease with the same name as the requesting node"), "{err}");
    let err = failed(node(&["create", "-f", write("l3.json", lease("n1", "default")).to_str().unwrap()]), "default");
    assert!(err.contains(r#"can only access leases in the "kube-node-lease" system namespace"#), "{err}");
    let admin_cfg = d.join("admin.kubeconfig");
    ok(
        kubectl(&admin_cfg, &d.join("cache-admin"), &["create", "-f", d.join("l2.json").to_str().unwrap()]),
        "admin creates n2's lease",
    );
    let err = failed(node(&["-n", "kube-node-lease", "delete", "lease", "n2"]), "delete n2's lease");
    assert!(err.contains("can only access node lease with the same name as the requesting node"), "{err}");
}

#[test]
fn can_i_list_shows_the_rules_rbac_grants_and_local_reviews_stay_in_their_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _s = start(d, &[]);
    let kubectl = |args: &[&str]| kubectl_with(&d.join("admin.kubeconfig"), &d.join("kube-cache"), args);
    ok(kubectl(&["create", "namespace", "team"]), "namespace");
    wait_namespace_ready(&_s, "team");
    ok(kubectl(&["-n", "team", "create", "role", "reader", "--verb=get,list", "--resource=configmaps"]), "role");
    ok(kubectl(&["-n", "team", "create", "rolebinding", "alice-reads", "--role=reader", "--user=alice"]), "binding");
    let list = ok(kubectl(&["auth", "can-i", "--list", "-n", "team", "--as=alice"]), "can-i --list");
    let configmaps = list.lines().find(|l| l.starts_with("configmaps ")).unwrap_or_else(|| panic!("{list}"));
    assert!(configmaps.contains("[get list]"), "{list}");
    assert!(list.lines().any(|l| l.starts_with("selfsubjectrulesreviews.authorization.k8s.io")), "{list}");
    // in another namespace alice's role does not apply
    let elsewhere = ok(kubectl(&["auth", "can-i", "--list", "-n", "default", "--as=alice"]), "can-i --list default");
    assert!(!elsewhere.lines().any(|l| l.starts_with("configmaps ")), "{elsewhere}");
    // a node's rules cannot be enumerated: said, as upstream's Node authorizer does
    let node = kubectl(&["auth", "can-i", "--list", "--as=system:node:n1", "--as-group=system:nodes"]);
    let stderr = String::from_utf8_lossy(&node.stderr);
    assert!(stderr.contains("node authorizer does not support user rule resolution"), "{node:?}");

    // LocalSubjectAccessReview: answered in its namespace, refused for another
    let review = |ns: &str, attrs_ns: &str| {
        let body = serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
            "spec": {"user": "alice", "resourceAttributes": {"namespace": attrs_ns, "verb": "list", "resource": "configmaps"}}});
        let resp = client(d)
            .post(format!("{}/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews", _s.url))
            .bearer_auth(admin_token(d))
            .json(&body)
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.json::<serde_json::Value>().unwrap())
    };
    let (code, allowed) = review("team", "team");
    assert_eq!((code, allowed["status"]["allowed"].as_bool()), (201, Some(true)), "{allowed}");
    assert_eq!(allowed["kind"], "LocalSubjectAccessReview");
    let (code, status) = review("team", "default");
    assert_eq!(code, 422, "{status}");
    assert!(status["message"].as_str().unwrap().contains("must match metadata.namespace"), "{status}");
}

/// A bootstrap token Secret `kube-system/bootstrap-token-<id>` as `kubeadm token create`
/// writes it, expiring `ttl` seconds from now.
fn bootstrap_token_secret(token: &str, ttl: i64, usages: &[&str]) -> serde_json::Value {
    let expires = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_secs(ttl)).unwrap();
    let expires = expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    podpass_api::bootstrap_token::secret(
        token,
        Some(&expires),
        Some("e2e"),
        usages,
        &[podpass_api::bootstrap_token::NODE_GROUP],
    )
    .unwrap()
}

/// Bootstrap tokens as kubeadm uses them: with `--enable-bootstrap-token-auth` a token
/// authenticates as `system:bootstrap:<id>` in `system:bootstrappers` and its extra groups
/// while its Secret allows it; the controller manager's bootstrap signer (named, as kubeadm
/// names it) signs `kube-public/cluster-info` with each signing token in force, and its
/// token cleaner deletes an expired token's Secret, whose signature then goes too.
#[test]
fn bootstrap_tokens_authenticate_sign_cluster_info_and_are_cleaned_when_expired() {
    use podpass_api::bootstrap_token::detached_signature;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start_without_manager(d, &["--enable-bootstrap-token-auth=true"]);
    let cm = d.join("cm.kubeconfig");
    std::fs::write(&cm, ok(identity_output(d, "system:kube-controller-manager", &[]), "cm identity")).unwrap();
    let _manager = manager_with(&cm, &d.join("cm.log"), &["--controllers", "*,bootstrapsigner,tokencleaner"]);
    let post = |path: &str, body: serde_json::Value| {
        let (code, answer) = admin_request(&s, reqwest::Method::POST, path, Some(body));
        assert_eq!(code, 201, "{answer}");
    };
    let (long, short) = ("abcdef.0123456789abcdef", "zyxwvu.fedcba9876543210");
    let secrets = "/api/v1/namespaces/kube-system/secrets";
    // `podpass token create` as `kubeadm token create`: kubeadm's defaults (24 h, both
    // usages, the node group); a usage kubeadm does not know is refused naming the flag.
    let create = |args: &[&str]| {
        Command::new(PODPASS)
            .args(["token", "create", "--kubeconfig", d.join("admin.kubeconfig").to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    };
    assert_eq!(ok(create(&[long]), "token create").trim(), long);
    let refused = create(&["--usages", "signing,sudo"]);
    assert_eq!(refused.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--usages"), "{refused:?}");
    let random = ok(create(&["--ttl", "1h", "--description", "another"]), "random token");
    assert!(podpass_api::bootstrap_token::parse(random.trim()).is_some(), "{random}");
    let (_, made) = admin_get(&s, &format!("{secrets}/bootstrap-token-{}", &random.trim()[..6]));
    assert_eq!(made["type"], "bootstrap.kubernetes.io/token", "{made}");
    // Short-lived: in force for the first checks, expired for the last ones.
    post(secrets, bootstrap_token_secret(short, 20, &["authentication", "signing"]));
    post(secrets, bootstrap_token_secret("nosign.0123456789abcdef", 3600, &["signing"]));

    let whoami = |token: &str| {
        client(d)
            .post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url))
            .bearer_auth(token)
            .json(&serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
            .send()
            .unwrap()
    };
    let me = whoami(long);
    assert_eq!(me.status().as_u16(), 201);
    let me: serde_json::Value = me.json().unwrap();
    assert_eq!(me["status"]["userInfo"]["username"], "system:bootstrap:abcdef");
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        serde_json::json!([
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token",
            "system:authenticated"
        ])
    );
    assert_eq!(whoami("abcdef.0123456789abcdee").status().as_u16(), 401, "another secret");
    assert_eq!(whoami("nosign.0123456789abcdef").status().as_u16(), 401, "not for authentication");
    assert_eq!(whoami("qqqqqq.0123456789abcdef").status().as_u16(), 401, "no such token");
    assert_eq!(whoami(short).status().as_u16(), 201, "in force");

    // cluster-info, as kubeadm writes it, gets a signature per signing token in force.
    let kubeconfig =
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: https://127.0.0.1:6443\n";
    post(
        "/api/v1/namespaces/kube-public/configmaps",
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info"},
                           "data": {"kubeconfig": kubeconfig}}),
    );
    let info = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
    let signed = wait_for("cluster-info signed by the signing tokens", Duration::from_secs(60), || {
        let (_, cm) = admin_get(&s, info);
        let data = cm["data"].as_object().cloned().unwrap_or_default();
        (data.contains_key("jws-kubeconfig-abcdef") && data.contains_key("jws-kubeconfig-nosign")).then_some(cm)
    });
    assert_eq!(signed["data"]["jws-kubeconfig-abcdef"], detached_signature(kubeconfig, "abcdef", "0123456789abcdef"));
    // The short token signs while in force (a slow signer may first see it expired).
    if let Some(sig) = signed["data"].get("jws-kubeconfig-zyxwvu") {
        assert_eq!(sig, &detached_signature(kubeconfig, "zyxwvu", "fedcba9876543210"));
    }

    // Expired: refused at once, its Secret deleted by the cleaner, its signature removed.
    wait_for("the short token expired", Duration::from_secs(30), || {
        (whoami(short).status().as_u16() == 401).then_some(serde_json::Value::Null)
    });
    wait_for("the expired token's Secret deleted", Duration::from_secs(60), || {
        (admin_get(&s, &format!("{secrets}/bootstrap-token-zyxwvu")).0 == 404).then_some(serde_json::Value::Null)
    });
    wait_for("its signature removed", Duration::from_secs(60), || {
        let (_, cm) = admin_get(&s, info);
        cm["data"].get("jws-kubeconfig-zyxwvu").is_none().then_some(cm)
    });
    assert_eq!(admin_get(&s, &format!("{secrets}/bootstrap-token-abcdef")).0, 200, "the one in force stays");
}
