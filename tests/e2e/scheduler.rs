//! End-to-end: the scheduler (`podpass scheduler`, its own process: the API server alone
//! schedules nothing) and `pods/binding`. `kubectl run` gets a pod
//! onto the Ready node the agent registered (with its machine's capacity and allocatable),
//! with a `Scheduled` event; a pod no node takes is `PodScheduled=False`/`Unschedulable`
//! with upstream's message and a `FailedScheduling` event, and is placed once a node
//! matches; a direct binding is refused when the pod already has a node.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

mod support;
use support::*;

fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

#[test]
fn pods_are_scheduled_onto_fitting_nodes_and_unschedulable_ones_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("api")).unwrap();
    let mut s = start(&d.join("api"), &[]);
    let api = d.join("api");

    // The API server alone decides nothing: with its scheduler stopped, a pod is left as
    // it was written (watched for a few seconds; the scheduler then takes it).
    let mut first = s.scheduler.take().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    ok(admin_kubectl(&api, &["run", "early", "--image=registry.example/app:1", "--restart=Never"]), "run early");
    std::thread::sleep(Duration::from_secs(3));
    let (_, untouched) = admin_get(&s, "/api/v1/namespaces/default/pods/early");
    assert!(condition(&untouched, "PodScheduled").is_none(), "nothing but the scheduler schedules: {untouched}");
    s.scheduler = Some(spawn_scheduler(&api));
    let lease = wait_for("the scheduler's lease", Duration::from_secs(30), || {
        let (code, lease) = admin_get(&s, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler");
        (code == 200 && lease["spec"]["holderIdentity"].is_string()).then_some(lease)
    });
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 15, "{lease}");

    // Before any node: a pod waits, and says there is no node.
    let early = wait_for("early pod marked unschedulable", Duration::from_secs(20), || {
        let (_, pod) = admin_get(&s, "/api/v1/namespaces/default/pods/early");
        condition(&pod, "PodScheduled").map(|_| pod.clone())
    });
    let c = condition(&early, "PodScheduled").unwrap();
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("Unschedulable")), "{c}");
    assert_eq!(c["message"], "no nodes available to schedule pods");

    let kubeconfig = node_kubeconfig(&api, &d.join("n1.kubeconfig"));
    let _agent = spawn_agent(&kubeconfig, &d.join("root"), Some(&d.join("agent.log")));
    let node = wait_for("node n1 with allocatable pods", Duration::from_secs(30), || {
        let (code, node) = admin_get(&s, "/api/v1/nodes/n1");
        (code == 200 && node["status"]["allocatable"]["pods"].is_string()).then_some(node)
    });
    assert_eq!(node["status"]["capacity"]["pods"], "110");
    assert!(node["status"]["allocatable"]["memory"].is_string() && node["status"]["capacity"]["cpu"].is_string());
    assert!(!node["status"]["nodeInfo"]["kernelVersion"].as_str().unwrap().is_empty(), "{node}");
    // kubectl describe node computes its percentages from allocatable
    let described = ok(admin_kubectl(&api, &["describe", "node", "n1"]), "describe node");
    assert!(described.contains("Allocatable:") && !described.contains("-9223372036854775808"), "{described}");

    // The waiting pod and a new one land on n1, each with a Scheduled event.
    ok(admin_kubectl(&api, &["run", "web", "--image=registry.example/app:1", "--restart=Never"]), "run web");
    for name in ["early", "web"] {
        let pod = wait_for(&format!("{name} scheduled"), Duration::from_secs(30), || {
            let (_, pod) = admin_get(&s, &format!("/api/v1/namespaces/default/pods/{name}"));
            (pod["spec"]["nodeName"] == "n1").then_some(pod)
        });
        assert_eq!(condition(&pod, "PodScheduled").unwrap()["status"], "True", "{pod}");
    }
    let events = wait_for("Scheduled event", Duration::from_secs(10), || {
        let (_, list) = admin_get(&s, "/api/v1/namespaces/default/events?fieldSelector=reason%3DScheduled");
        (list["items"].as_array().unwrap().len() >= 2).then_some(list)
    });
    let web = events["items"].as_array().unwrap().iter().find(|e| e["involvedObject"]["name"] == "web").unwrap();
    assert_eq!(web["message"], "Successfully assigned default/web to n1");
    assert_eq!(web["reportingComponent"], "default-scheduler");
    let described = ok(admin_kubectl(&api, &["describe", "pod", "web"]), "describe pod");
    assert!(described.contains("Successfully assigned default/web to n1"), "{described}");

    // A node selector nothing matches: Unschedulable with upstream's message, until a node
    // gets the label.
    let picky = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "picky"},
        "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c", "image": "registry.example/app:1"}]}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(picky)).0, 201);
    let picky = wait_for("picky unschedulable", Duration::from_secs(20), || {
        let (_, pod) = admin_get(&s, "/api/v1/namespaces/default/pods/picky");
        condition(&pod, "PodScheduled").map(|_| pod.clone())
    });
    assert_eq!(
        condition(&picky, "PodScheduled").unwrap()["message"],
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
    // The event follows the status write.
    wait_for("FailedScheduling event for picky", Duration::from_secs(10), || {
        let (_, failed) = admin_get(&s, "/api/v1/namespaces/default/events?fieldSelector=reason%3DFailedScheduling");
        failed["items"].as_array()?.iter().any(|e| e["involvedObject"]["name"] == "picky").then_some(failed)
    });
    ok(admin_kubectl(&api, &["label", "node", "n1", "disk=ssd"]), "label node");
    wait_for("picky scheduled once the node matches", Duration::from_secs(20), || {
        let (_, pod) = admin_get(&s, "/api/v1/namespaces/default/pods/picky");
        (pod["spec"]["nodeName"] == "n1").then_some(pod)
    });

    // exec reaches the pod's node, which says why it has no stream for it; a port-forward
    // that asks for no upgrade is refused as upstream's UpgradeAwareHandler refuses it.
    let out = admin_kubectl(&api, &["exec", "web", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && (stderr.contains("node n1 serves no container logs or streams")
                || stderr.contains("node n1 runs no containers")),
        "{stderr}"
    );
    let (code, answer) = admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods/web/portforward", None);
    assert_eq!(
        (code, answer["reason"].as_str(), answer["message"].as_str()),
        (400, Some("BadRequest"), Some("Upgrade request required")),
        "{answer}"
    );

    // pods/binding by hand, for a pod another scheduler owns.
    let manual = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "manual"},
        "spec": {"schedulerName": "my-scheduler", "containers": [{"name": "c", "image": "registry.example/app:1"}]}});
    assert_eq!(admin_request(&s, Method::POST, "/api/v1/namespaces/default/pods", Some(manual)).0, 201);
    let binding = |target: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "manual"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": target}})
    };
    let path = "/api/v1/namespaces/default/pods/manual/binding";
    let (code, answer) = admin_request(&s, Method::POST, path, Some(binding("")));
    assert_eq!(code, 422, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("target.name: Required value"), "{answer}");
    let (code, answer) = admin_request(&s, Method::POST, path, Some(binding("n1")));
    assert_eq!((code, answer["status"].as_str()), (201, Some("Success")), "{answer}");
    let (code, answer) = admin_request(&s, Method::POST, path, Some(binding("n2")));
    assert_eq!(code, 409, "{answer}");
    assert_eq!(
        answer["message"],
        "Operation cannot be fulfilled on pods/binding \"manual\": pod manual is already assigned to node \"n1\""
    );
    assert_eq!(admin_get(&s, "/api/v1/namespaces/default/pods/manual").1["spec"]["nodeName"], "n1");
}
