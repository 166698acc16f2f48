//! End-to-end: ReplicaSets run by `podpass controller-manager`, a client of the API server
//! like any other — through the real kubectl. The controller creates a ReplicaSet's pods
//! as its own service account (the audit says so), adopts a matching orphan, replaces a
//! deleted pod, scales down (`kubectl scale`, the scale subresource), and a pod that Pod Security refuses is a `FailedCreate` event
//! and a `ReplicaFailure` condition naming the violation. One manager leads at a time: a
//! second waits on the Lease and writes nothing; killed, the leader's Lease is taken over
//! and every set is synced by the new leader. Deleting a set cascades as
//! `kubectl delete --cascade=background|foreground|orphan` asks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

mod support;
use support::*;

fn replica_set(ns: &str, name: &str, replicas: i64, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

fn busybox() -> Value {
    json!({"containers": [{"name": "app", "image": "busybox"}]})
}

fn apply(d: &Path, object: &Value) {
    let file = d.join(format!("{}.json", object["metadata"]["name"].as_str().unwrap()));
    std::fs::write(&file, object.to_string()).unwrap();
    ok(admin_kubectl(d, &["apply", "-f", file.to_str().unwrap()]), "kubectl apply");
}

/// The active pods a ReplicaSet controls, by name.
fn owned_pods(s: &Server, ns: &str, rs: &str) -> Vec<Value> {
    let (_, rs_obj) = admin_get(s, &format!("/apis/apps/v1/namespaces/{ns}/replicasets/{rs}"));
    let uid = rs_obj["metadata"]["uid"].clone();
    let (_, list) = admin_get(s, &format!("/api/v1/namespaces/{ns}/pods"));
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| {
            p["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|o| o.iter().any(|r| r["uid"] == uid && r["controller"] == true))
        })
        .collect()
}

fn wait_owned(s: &Server, ns: &str, rs: &str, n: usize) -> Vec<Value> {
    let found = wait_for(&format!("{n} pods of {ns}/{rs}"), Duration::from_secs(60), || {
        let pods = owned_pods(s, ns, rs);
        (pods.len() == n).then_some(Value::Array(pods))
    });
    found.as_array().cloned().unwrap_or_default()
}

fn names(pods: &[Value]) -> Vec<String> {
    let mut n: Vec<String> = pods.iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    n.sort();
    n
}

#[test]
fn replica_sets_run_from_the_controller_manager_as_its_own_service_account() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let audit = d.join("audit.log");
    let s = start_without_manager(d, &["--audit-log-path", audit.to_str().unwrap()]);
    let kubeconfig = d.join("cm.kubeconfig");
    std::fs::write(&kubeconfig, ok(identity_output(d, "system:kube-controller-manager", &[]), "cm identity")).unwrap();
    let leader = manager(&kubeconfig, &d.join("cm-1.log"));

    // An orphan that the set selects is adopted, not doubled.
    ok(admin_kubectl(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    let orphan = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan", "namespace": "team", "labels": {"app": "web"}}, "spec": busybox()});
    let (code, _) = admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/team/pods", Some(orphan));
    assert_eq!(code, 201);
    apply(d, &replica_set("team", "web", 3, busybox()));
    let pods = wait_owned(&s, "team", "web", 3);
    assert!(names(&pods).contains(&"orphan".to_owned()), "the orphan is adopted: {:?}", names(&pods));
    let status = wait_for("status.replicas 3", Duration::from_secs(60), || {
        let (_, rs) = admin_get(&s, "/apis/apps/v1/namespaces/team/replicasets/web");
        (rs["status"]["replicas"] == 3 && rs["status"]["observedGeneration"] == 1).then_some(rs)
    });
    assert_eq!(status["status"]["fullyLabeledReplicas"], 3);
    let table = ok(admin_kubectl(d, &["-n", "team", "get", "rs", "web"]), "kubectl get rs");
    assert!(table.lines().nth(1).is_some_and(|l| l.split_whitespace().take(3).eq(["web", "3", "3"])), "{table}");

    // The pods it created were created by its own service account, admitted and audited.
    let creators: Vec<String> = std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "pods" && e["stage"] == "ResponseComplete")
        .filter(|e| e["objectRef"]["namespace"] == "team" && e["responseStatus"]["code"] == 201)
        .map(|e| e["user"]["username"].as_str().unwrap_or_default().to_owned())
        .collect();
    let by_controller = creators.iter().filter(|u| *u == "system:serviceaccount:kube-system:replicaset-controller");
    assert_eq!(by_controller.count(), 2, "the two pods the controller made: {creators:?}");
    let events = ok(admin_kubectl(d, &["-n", "team", "get", "events", "-o", "json"]), "events");
    assert!(events.contains("SuccessfulCreate") && events.contains("Created pod: web-"), "{events}");

    // A deleted pod is replaced; scaling down removes pods.
    let first = names(&pods);
    ok(admin_kubectl(d, &["-n", "team", "delete", "pod", &first[0], "--wait=false"]), "delete a pod");
    let replaced = wait_for("a replacement pod", Duration::from_secs(60), || {
        let now = names(&owned_pods(&s, "team", "web"));
        (now.len() == 3 && !now.contains(&first[0])).then(|| json!(now))
    });
    assert_eq!(replaced.as_array().map(Vec::len), Some(3));
    ok(
        admin_kubectl(d, &["-n", "team", "patch", "rs", "web", "--type=merge", "-p", r#"{"spec":{"replicas":1}}"#]),
        "scale",
    );
    wait_owned(&s, "team", "web", 1);

    // Pod Security refuses the controller's pods as anyone's: FailedCreate and ReplicaFailure.
    ok(admin_kubectl(d, &["create", "namespace", "locked"]), "create namespace");
    ok(admin_kubectl(d, &["label", "namespace", "locked", "pod-security.kubernetes.io/enforce=baseline"]), "label");
    apply(
        d,
        &replica_set(
            "locked",
            "priv",
            1,
            json!({"hostNetwork": true, "containers": [{"name": "app", "image": "busybox"}]}),
        ),
    );
    let refused = wait_for("ReplicaFailure", Duration::from_secs(60), || {
        let (_, rs) = admin_get(&s, "/apis/apps/v1/namespaces/locked/replicasets/priv");
        let conditions = rs["status"]["conditions"].as_array().cloned().unwrap_or_default();
        conditions.into_iter().find(|c| c["type"] == "ReplicaFailure" && c["reason"] == "FailedCreate")
    });
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(r#"pods "priv-" is forbidden: violates PodSecurity "baseline:latest": host namespaces"#),
        "{message}"
    );
    let events = ok(admin_kubectl(d, &["-n", "locked", "get", "events", "-o", "json"]), "events");
    assert!(
        events.contains("FailedCreate") && events.contains("Error creating: pods \\\"priv-\\\" is forbidden"),
        "{events}"
    );
    assert!(owned_pods(&s, "locked", "priv").is_empty());

    // A second manager waits on the Lease; the leader killed, it takes over, and the sets'
    // pods are as many as asked, no more.
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager";
    let (_, lease) = admin_get(&s, lease_path);
    let first_holder = lease["spec"]["holderIdentity"].as_str().unwrap().to_owned();
    let standby = manager(&kubeconfig, &d.join("cm-2.log"));
    drop(leader);
    let taken = wait_for("the standby takes the lease", Duration::from_secs(60), || {
        let (_, lease) = admin_get(&s, lease_path);
        let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default();
        (!holder.is_empty() && holder != first_holder).then_some(lease)
    });
    assert!(taken["spec"]["leaseTransitions"].as_i64() >= Some(1), "a takeover is a transition: {taken}");
    ok(
        admin_kubectl(d, &["-n", "team", "patch", "rs", "web", "--type=merge", "-p", r#"{"spec":{"replicas":2}}"#]),
        "scale up",
    );
    wait_owned(&s, "team", "web", 2);
    let events = ok(admin_kubectl(d, &["-n", "kube-system", "get", "events", "-o", "json"]), "lease events");
    assert!(events.contains("LeaderElection") && events.contains(" became leader"), "{events}");

    // Garbage collection by ownerReferences, as `kubectl delete --cascade=…` asks it.
    cascades(&s, d);
    a_deployment_refused_pods_by_quota_says_so(&s, d, &audit);
    a_cron_job_fires_on_schedule_and_forbid_waits_for_its_job(&s, d, &audit);
    drop(standby);
}

/// A Deployment whose pods a quota refuses: its ReplicaSet (`<name>-<pod-template-hash>`,
/// created by the Deployment controller's own account) says `FailedCreate … exceeded quota`
/// in events and its `ReplicaFailure` condition, which the Deployment carries up; scaled
/// within the quota, the failure clears.
fn a_deployment_refused_pods_by_quota_says_so(s: &Server, d: &Path, audit: &Path) {
    ok(admin_kubectl(d, &["create", "namespace", "capped"]), "create namespace");
    ok(admin_kubectl(d, &["-n", "capped", "create", "quota", "pods", "--hard=pods=1"]), "create quota");
    ok(
        admin_kubectl(d, &["-n", "capped", "create", "deployment", "many", "--image=busybox", "--replicas=3"]),
        "create",
    );
    let path = "/apis/apps/v1/namespaces/capped/deployments/many";
    let failure = wait_for("the Deployment's ReplicaFailure", Duration::from_secs(60), || {
        let (_, dep) = admin_get(s, path);
        dep["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "ReplicaFailure").cloned()
    });
    let message = failure["message"].as_str().unwrap_or_default();
    assert_eq!(failure["reason"], "FailedCreate", "{failure}");
    assert!(message.contains("exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1"), "{message}");
    let (_, sets) = admin_get(s, "/apis/apps/v1/namespaces/capped/replicasets");
    let set = sets["items"][0].clone();
    let hash = set["metadata"]["labels"]["pod-template-hash"].as_str().unwrap().to_owned();
    assert_eq!(set["metadata"]["name"], format!("many-{hash}"), "{set}");
    assert_eq!(set["spec"]["selector"]["matchLabels"]["pod-template-hash"], hash.as_str(), "{set}");
    assert_eq!(set["metadata"]["ownerReferences"][0]["kind"], "Deployment", "{set}");
    assert_eq!(set["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1", "{set}");
    let events = ok(admin_kubectl(d, &["-n", "capped", "get", "events", "-o", "json"]), "events");
    assert!(
        events.contains("ScalingReplicaSet") && events.contains(&format!("Scaled up replica set many-{hash} to 3")),
        "{events}"
    );
    assert!(events.contains("FailedCreate") && events.contains("exceeded quota"), "{events}");
    let (_, dep) = admin_get(s, path);
    let available = dep["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Available").cloned();
    assert_eq!(available.map(|c| c["reason"].clone()), Some(json!("MinimumReplicasUnavailable")), "{dep}");
    assert_eq!(dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1", "{dep}");
    let table = ok(admin_kubectl(d, &["-n", "capped", "get", "deployment", "many"]), "kubectl get deployment");
    assert!(table.lines().nth(1).is_some_and(|l| l.split_whitespace().take(2).eq(["many", "0/3"])), "{table}");
    let by_controller = std::fs::read_to_string(audit).unwrap_or_default().lines().any(|l| {
        serde_json::from_str::<Value>(l).is_ok_and(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "replicasets"
                && e["objectRef"]["namespace"] == "capped"
                && e["user"]["username"] == "system:serviceaccount:kube-system:deployment-controller"
        })
    });
    assert!(by_controller, "the ReplicaSet was created by the Deployment controller's own account");

    // Within the quota: the set is scaled to 1 and the failure clears.
    ok(admin_kubectl(d, &["-n", "capped", "scale", "deployment", "many", "--replicas=1"]), "kubectl scale");
    wait_for("the failure cleared", Duration::from_secs(60), || {
        let (_, dep) = admin_get(s, path);
        let (_, rs) = admin_get(s, &format!("/apis/apps/v1/namespaces/capped/replicasets/many-{hash}"));
        let failing = dep["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "ReplicaFailure");
        (rs["spec"]["replicas"] == 1 && !failing).then_some(dep)
    });
    ok(admin_kubectl(d, &["delete", "namespace", "capped", "--wait=false"]), "delete namespace");
}

/// `--cascade=orphan`: the set goes, its pods stay and no longer name it;
/// `--cascade=foreground`: the pods go first, the set after; background (the default):
/// the set goes at once and the collector removes its pods.
fn cascades(s: &Server, d: &Path) {
    let set = |name: &str| replica_set("team", name, 2, busybox());
    apply(d, &set("orphaned"));
    let orphans = names(&wait_owned(s, "team", "orphaned", 2));
    ok(admin_kubectl(d, &["-n", "team", "delete", "rs", "orphaned", "--cascade=orphan"]), "delete --cascade=orphan");
    wait_for("the orphaning set gone", Duration::from_secs(60), || {
        let (code, _) = admin_get(s, "/apis/apps/v1/namespaces/team/replicasets/orphaned");
        (code == 404).then_some(Value::Null)
    });
    for name in &orphans {
        let (code, pod) = admin_get(s, &format!("/api/v1/namespaces/team/pods/{name}"));
        assert_eq!(code, 200, "{name} was orphaned, not deleted");
        assert!(pod["metadata"]["ownerReferences"].as_array().is_none_or(Vec::is_empty), "{pod}");
    }

    apply(d, &set("front"));
    let front = names(&wait_owned(s, "team", "front", 2));
    ok(
        admin_kubectl(d, &["-n", "team", "delete", "rs", "front", "--cascade=foreground", "--wait=false"]),
        "foreground",
    );
    // Until its pods are gone the set waits behind its finalizer (unless the collector was
    // quicker than this read).
    let (code, waiting) = admin_get(s, "/apis/apps/v1/namespaces/team/replicasets/front");
    let finalizers = waiting["metadata"]["finalizers"].to_string();
    assert!(code == 404 || finalizers.contains("foregroundDeletion"), "{code} {waiting}");
    wait_for("the foreground set and its pods gone", Duration::from_secs(60), || {
        let (code, _) = admin_get(s, "/apis/apps/v1/namespaces/team/replicasets/front");
        let left = front.iter().filter(|n| admin_get(s, &format!("/api/v1/namespaces/team/pods/{n}")).0 == 200).count();
        (code == 404 && left == 0).then_some(Value::Null)
    });

    apply(d, &set("back"));
    let back = names(&wait_owned(s, "team", "back", 2));
    ok(admin_kubectl(d, &["-n", "team", "delete", "rs", "back"]), "delete (background)");
    wait_for("the background set's pods collected", Duration::from_secs(60), || {
        let left = back.iter().filter(|n| admin_get(s, &format!("/api/v1/namespaces/team/pods/{n}")).0 == 200).count();
        (left == 0).then_some(Value::Null)
    });
}

/// A CronJob on `@every 5s` with `concurrencyPolicy: Forbid`: it fires a Job named for its
/// scheduled minute, created by the CronJob controller's own account and annotated with the
/// scheduled time, whose pod the Job controller creates; with that Job still active (no node
/// runs it) the next time waits (`JobAlreadyActive`); `kubectl create job --from=cronjob/…`
/// makes a manual one; deleting the CronJob takes its Jobs and their pods.
fn a_cron_job_fires_on_schedule_and_forbid_waits_for_its_job(s: &Server, d: &Path, audit: &Path) {
    ok(admin_kubectl(d, &["create", "namespace", "timed"]), "create namespace");
    let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick", "namespace": "timed"},
        "spec": {"schedule": "@every 5s", "concurrencyPolicy": "Forbid",
                 "jobTemplate": {"metadata": {"labels": {"run": "tick"}},
                                 "spec": {"template": {"spec": {"restartPolicy": "Never",
                                     "containers": [{"name": "c", "image": "busybox"}]}}}}}});
    apply(d, &cj);
    let job = wait_for("the CronJob's first Job", Duration::from_secs(60), || {
        let (_, jobs) = admin_get(s, "/apis/batch/v1/namespaces/timed/jobs");
        jobs["items"].as_array()?.first().cloned()
    });
    let name = job["metadata"]["name"].as_str().unwrap().to_owned();
    let scheduled = job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"].as_str().unwrap();
    let minutes = scheduled.parse::<jiff::Timestamp>().unwrap().as_second() / 60;
    assert_eq!(name, format!("tick-{minutes}"), "{job}");
    assert_eq!(job["metadata"]["labels"]["run"], "tick", "{job}");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob", "{job}");
    // The Job controller made its pod, tracked by the finalizer, labelled with its Job.
    let pod = wait_for("the Job's pod", Duration::from_secs(60), || {
        let (_, pods) = admin_get(
            s,
            &format!("/api/v1/namespaces/timed/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3D{name}"),
        );
        pods["items"].as_array()?.first().cloned()
    });
    assert!(pod["metadata"]["finalizers"].to_string().contains("batch.kubernetes.io/job-tracking"), "{pod}");
    let status = wait_for("status.active and lastScheduleTime", Duration::from_secs(30), || {
        let (_, cj) = admin_get(s, "/apis/batch/v1/namespaces/timed/cronjobs/tick");
        (cj["status"]["active"][0]["name"] == name.as_str() && cj["status"]["lastScheduleTime"].is_string())
            .then_some(cj)
    });
    assert_eq!(status["status"]["active"].as_array().map(Vec::len), Some(1), "{status}");
    // Forbid: while that Job runs, the next scheduled time makes none.
    wait_for("JobAlreadyActive", Duration::from_secs(60), || {
        let events = ok(admin_kubectl(d, &["-n", "timed", "get", "events", "-o", "json"]), "events");
        events.contains("JobAlreadyActive").then_some(Value::Null)
    });
    let (_, jobs) = admin_get(s, "/apis/batch/v1/namespaces/timed/jobs");
    assert_eq!(jobs["items"].as_array().map(Vec::len), Some(1), "Forbid made no second Job: {jobs}");
    let by_controller = std::fs::read_to_string(audit).unwrap_or_default().lines().any(|l| {
        serde_json::from_str::<Value>(l).is_ok_and(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "jobs"
                && e["objectRef"]["namespace"] == "timed"
                && e["user"]["username"] == "system:serviceaccount:kube-system:cronjob-controller"
        })
    });
    assert!(by_controller, "the Job was created by the CronJob controller's own account");
    let table = ok(admin_kubectl(d, &["-n", "timed", "get", "cronjob", "tick"]), "kubectl get cronjob");
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().take(5).eq(["tick", "@every", "5s", "<none>", "False"])),
        "{table}"
    );

    // kubectl create job --from=cronjob: a manual Job the CronJob owns.
    ok(admin_kubectl(d, &["-n", "timed", "create", "job", "by-hand", "--from=cronjob/tick"]), "create job --from");
    let (_, manual) = admin_get(s, "/apis/batch/v1/namespaces/timed/jobs/by-hand");
    assert_eq!(manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"], "manual", "{manual}");

    // Deleting the CronJob (background) takes its Jobs, and their pods after them.
    ok(admin_kubectl(d, &["-n", "timed", "delete", "cronjob", "tick"]), "delete cronjob");
    wait_for("the CronJob's Jobs and pods collected", Duration::from_secs(60), || {
        let (_, jobs) = admin_get(s, "/apis/batch/v1/namespaces/timed/jobs");
        let (_, pods) = admin_get(s, "/api/v1/namespaces/timed/pods");
        let none = |v: &Value| v["items"].as_array().is_some_and(Vec::is_empty);
        (none(&jobs) && none(&pods)).then_some(Value::Null)
    });
}
