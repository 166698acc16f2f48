//! End-to-end: ResourceQuota as kube-apiserver serves it, through the real kubectl: `kubectl
//! create quota`, quota admission refusing the pod past `pods: 2` with upstream's message
//! (also when the creates race), `kubectl describe quota` showing `2/2`, a compute quota
//! asking every pod to state its requests, and the controller giving back what a deleted
//! pod used.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

mod support;
use support::*;

fn pod(name: &str, resources: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "busybox", "resources": resources}]}})
}

#[test]
fn a_quota_refuses_past_its_hard_limit_as_upstream_even_under_racing_creates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(admin_kubectl(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    ok(admin_kubectl(d, &["-n", "team", "create", "quota", "two", "--hard=pods=2,count/configmaps=2"]), "create quota");
    let pods = "/api/v1/namespaces/team/pods";

    // Five creates at once: exactly two are admitted.
    let server = &s;
    let results: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..5)
            .map(|i| {
                scope.spawn(move || admin_request(server, Method::POST, pods, Some(pod(&format!("p{i}"), json!({})))))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let admitted = results.iter().filter(|(code, _)| *code == 201).count();
    assert_eq!(admitted, 2, "{results:?}");
    let refused = results.iter().find(|(code, _)| *code == 403).unwrap();
    let message = refused.1["message"].as_str().unwrap();
    assert!(
        message.contains("is forbidden: exceeded quota: two, requested: pods=1, used: pods=2, limited: pods=2"),
        "{message}"
    );
    let describe = ok(admin_kubectl(d, &["-n", "team", "describe", "quota", "two"]), "describe quota");
    let row = describe.lines().find(|l| l.trim_start().starts_with("pods")).unwrap_or_default().to_owned();
    assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["pods", "2", "2"], "{describe}");
    let table = ok(admin_kubectl(d, &["-n", "team", "get", "quota"]), "get quota");
    assert!(table.contains("pods: 2/2"), "{table}");

    // Object counts (kube-root-ca.crt counts, as upstream): a third config map is refused.
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/team/configmaps", Some(cm("a"))).0, 201);
    let (code, answer) = admin_request(&s, Method::POST, "/api/v1/namespaces/team/configmaps", Some(cm("b")));
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains(
            "exceeded quota: two, requested: count/configmaps=1, used: count/configmaps=2, limited: count/configmaps=2"
        ),
        "{answer}"
    );

    // A deleted pod's share comes back (the quota controller), and a new pod is admitted.
    let admitted_name =
        ["p0", "p1", "p2", "p3", "p4"].into_iter().find(|n| admin_get(&s, &format!("{pods}/{n}")).0 == 200).unwrap();
    assert_eq!(admin_request(&s, Method::DELETE, &format!("{pods}/{admitted_name}"), None).0, 200);
    wait_for("the quota's usage back to 1", Duration::from_secs(30), || {
        let (_, q) = admin_get(&s, "/api/v1/namespaces/team/resourcequotas/two");
        (q["status"]["used"]["pods"] == "1").then_some(q)
    });
    assert_eq!(admin_request(&s, Method::POST, pods, Some(pod("later", json!({})))).0, 201);

    // A compute quota: a pod must state what it tracks, and fits within it.
    ok(admin_kubectl(d, &["-n", "team", "create", "quota", "compute", "--hard=requests.cpu=1"]), "create quota");
    ok(admin_kubectl(d, &["-n", "team", "delete", "quota", "two"]), "delete quota");
    let (code, answer) = admin_request(&s, Method::POST, pods, Some(pod("vague", json!({}))));
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains("failed quota: compute: must specify requests.cpu"),
        "{answer}"
    );
    let sized = |name: &str, cpu: &str| pod(name, json!({"requests": {"cpu": cpu}}));
    assert_eq!(admin_request(&s, Method::POST, pods, Some(sized("small", "600m"))).0, 201);
    let (code, answer) = admin_request(&s, Method::POST, pods, Some(sized("big", "500m")));
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains(
            "exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=600m, limited: requests.cpu=1"
        ),
        "{answer}"
    );
    // A dry run reserves nothing.
    let (code, _) = admin_request(&s, Method::POST, &format!("{pods}?dryRun=All"), Some(sized("probe", "100m")));
    assert_eq!(code, 201);
    let (_, q) = admin_get(&s, "/api/v1/namespaces/team/resourcequotas/compute");
    assert_eq!(q["status"]["used"]["requests.cpu"], "600m", "{q}");

    // Local ephemeral storage is quota'd as cpu is (issue 51: a tenant's disk is bounded
    // before the node has to evict).
    ok(
        admin_kubectl(d, &["-n", "team", "create", "quota", "storage", "--hard=requests.ephemeral-storage=1Gi"]),
        "create quota",
    );
    let disk =
        |name: &str, storage: &str| pod(name, json!({"requests": {"cpu": "100m", "ephemeral-storage": storage}}));
    let (code, answer) = admin_request(&s, Method::POST, pods, Some(disk("disk-hog", "2Gi")));
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains(
            "exceeded quota: storage, requested: requests.ephemeral-storage=2Gi, used: requests.ephemeral-storage=0, limited: requests.ephemeral-storage=1Gi"
        ),
        "{answer}"
    );
    assert_eq!(admin_request(&s, Method::POST, pods, Some(disk("disk-fits", "512Mi"))).0, 201);
    wait_for("the storage quota's usage counted", Duration::from_secs(30), || {
        let (_, q) = admin_get(&s, "/api/v1/namespaces/team/resourcequotas/storage");
        (q["status"]["used"]["requests.ephemeral-storage"] == "512Mi").then_some(q)
    });
}

#[test]
fn a_limit_range_defaults_and_bounds_a_tenants_containers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(admin_kubectl(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");
    let lr = json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "bounds"},
        "spec": {"limits": [{"type": "Container",
            "default": {"cpu": "500m", "memory": "128Mi", "ephemeral-storage": "1Gi"},
            "defaultRequest": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "512Mi"},
            "max": {"cpu": "1", "memory": "256Mi", "ephemeral-storage": "2Gi"}, "min": {"cpu": "50m"}}]}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/team/limitranges", Some(lr)).0, 201);
    let described = ok(admin_kubectl(d, &["-n", "team", "describe", "limitrange", "bounds"]), "describe limitrange");
    assert!(described.contains("Container") && described.contains("cpu") && described.contains("500m"), "{described}");

    // A pod stating nothing gets the defaults, and says so.
    let pods = "/api/v1/namespaces/team/pods";
    let (code, created) = admin_request(&s, Method::POST, pods, Some(pod("plain", json!({}))));
    assert_eq!(code, 201, "{created}");
    let resources = &created["spec"]["containers"][0]["resources"];
    assert_eq!(resources["limits"], json!({"cpu": "500m", "memory": "128Mi", "ephemeral-storage": "1Gi"}), "{created}");
    assert_eq!(
        resources["requests"],
        json!({"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "512Mi"}),
        "{created}"
    );
    assert_eq!(
        created["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, ephemeral-storage, memory request for container app; cpu, ephemeral-storage, memory limit for container app"
    );
    // Past max, under min: refused with upstream's words, every violation named.
    let greedy = pod(
        "greedy",
        json!({"limits": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "4Gi"}, "requests": {"cpu": "10m"}}),
    );
    let (code, answer) = admin_request(&s, Method::POST, pods, Some(greedy));
    assert_eq!(code, 403, "{answer}");
    let message = answer["message"].as_str().unwrap();
    for part in [
        "pods \"greedy\" is forbidden: [",
        "minimum cpu usage per Container is 50m, but request is 10m",
        "maximum cpu usage per Container is 1, but limit is 2",
        "maximum memory usage per Container is 256Mi, but limit is 1Gi",
        "maximum ephemeral-storage usage per Container is 2Gi, but limit is 4Gi",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
}
