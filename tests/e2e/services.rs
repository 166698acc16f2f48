//! End-to-end: Services as upstream serves them, through the real kubectl. The API server
//! allocates cluster IPs from `--service-cluster-ip-range` as `IPAddress` objects — static
//! and dynamic, refused in upstream's words when taken or out of range, none for a headless
//! Service or a dry run, released with the Service. The controller manager's Endpoints and
//! EndpointSlice controllers fill a Service exposed with `kubectl expose` from its pods on a
//! real node (containerd, the node agent): ready pods as addresses, a pod whose readiness
//! probe fails as not ready, and both go with the Service.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use containerd::APP_IMAGE;
use registry::free_port;
use support::*;

fn get(d: &std::path::Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(admin_kubectl(d, &all), "kubectl get")).unwrap()
}

fn refused(d: &std::path::Path, args: &[&str]) -> String {
    let out = admin_kubectl(d, args);
    assert!(!out.status.success(), "{args:?} should be refused");
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

/// The IPAddress objects as `name -> parentRef` lines.
fn addresses(d: &std::path::Path) -> Vec<String> {
    let list = get(d, &["get", "ipaddresses"]);
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let line = |a: &Value| {
        let p = &a["spec"]["parentRef"];
        format!(
            "{} -> {}/{}/{}",
            a["metadata"]["name"].as_str().unwrap(),
            p["resource"].as_str().unwrap(),
            p["namespace"].as_str().unwrap(),
            p["name"].as_str().unwrap()
        )
    };
    let mut lines: Vec<String> = items.iter().map(line).collect();
    lines.sort();
    lines
}

fn web_pod(name: &str, ready_file: bool) -> Value {
    let script = if ready_file { "touch /tmp/ready; exec httpd -f -p 9000 -h /" } else { "exec httpd -f -p 9000 -h /" };
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "app", "image": APP_IMAGE,
            "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script],
            "ports": [{"name": "web", "containerPort": 9000}],
            "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}}]}})
}

#[test]
fn services_get_cluster_ips_and_endpoints_from_their_ready_pods() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("sv").tempdir_in("/tmp").unwrap();
    let d = dir.path();
    let api = d.join("api");
    std::fs::create_dir(&api).unwrap();
    let audit = d.join("audit.log");
    let s = start_without_manager(
        &api,
        &["--service-cluster-ip-range", "10.96.0.0/16", "--audit-log-path", audit.to_str().unwrap()],
    );

    // The kubernetes Service's address is recorded as any other.
    wait_for("the kubernetes Service's IPAddress", Duration::from_secs(40), || {
        addresses(&api).contains(&"10.96.0.1 -> services/default/kubernetes".to_owned()).then_some(Value::Null)
    });
    // Static: the address asked for; taken, or outside the range: upstream's words.
    ok(
        admin_kubectl(&api, &["create", "service", "clusterip", "dns", "--clusterip=10.96.0.10", "--tcp=53:53"]),
        "static",
    );
    assert_eq!(
        refused(&api, &["create", "service", "clusterip", "again", "--clusterip=10.96.0.10", "--tcp=53:53"]),
        r#"error: failed to create ClusterIP service: Service "again" is invalid: spec.clusterIPs: Invalid value: []string{"10.96.0.10"}: failed to allocate IP 10.96.0.10: provided IP is already allocated"#
    );
    assert_eq!(
        refused(&api, &["create", "service", "clusterip", "far", "--clusterip=10.97.0.1", "--tcp=80:80"]),
        r#"error: failed to create ClusterIP service: Service "far" is invalid: spec.clusterIPs: Invalid value: []string{"10.97.0.1"}: failed to allocate IP 10.97.0.1: the provided IP (10.97.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/16"#
    );
    // A dry run takes nothing and answers the network's address, as upstream's.
    let dry = get(&api, &["create", "service", "clusterip", "dry", "--tcp=80:80", "--dry-run=server"]);
    assert_eq!(dry["spec"]["clusterIP"], "10.96.0.0", "{dry}");
    // Headless: no address; selectorless, dual by default.
    ok(admin_kubectl(&api, &["create", "service", "clusterip", "peers", "--clusterip=None"]), "headless");
    let peers = get(&api, &["get", "service", "peers"]);
    assert_eq!(peers["spec"]["clusterIPs"], json!(["None"]));
    assert_eq!(addresses(&api), ["10.96.0.1 -> services/default/kubernetes", "10.96.0.10 -> services/default/dns"]);

    // A node and the controller manager.
    let applets = ["sh", "cat", "touch", "httpd"];
    let runtime = containerd::Containerd::start_with_app(&d.join("c"), &applets);
    let kubeconfig = node_kubeconfig(&api, &d.join("n1.kubeconfig"));
    let port = free_port().to_string();
    let _agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &runtime.endpoint, "--port", &port],
    );
    let cm = d.join("cm.kubeconfig");
    std::fs::write(&cm, ok(identity_output(&api, "system:kube-controller-manager", &[]), "cm identity")).unwrap();
    let _manager = manager(&cm, &d.join("cm.log"));

    // Two ready pods and one whose readiness probe never passes.
    for (name, ready) in [("web-a", true), ("web-b", true), ("web-sick", false)] {
        let (code, body) =
            admin_request(&s, reqwest::Method::POST, "/api/v1/namespaces/default/pods", Some(web_pod(name, ready)));
        assert_eq!(code, 201, "{body}");
    }
    let ip_of = |name: &str| {
        let pod = wait_for(&format!("{name} running with an IP"), Duration::from_secs(120), || {
            let (_, pod) = admin_get(&s, &format!("/api/v1/namespaces/default/pods/{name}"));
            (pod["status"]["phase"] == "Running" && pod["status"]["podIP"].is_string()).then_some(pod)
        });
        pod["status"]["podIP"].as_str().unwrap().to_owned()
    };
    let (a, b, sick) = (ip_of("web-a"), ip_of("web-b"), ip_of("web-sick"));
    ok(
        admin_kubectl(
            &api,
            &[
                "expose",
                "pod",
                "web-a",
                "--name",
                "web",
                "--port",
                "80",
                "--target-port",
                "web",
                "--selector",
                "app=web",
            ],
        ),
        "expose",
    );
    let svc = get(&api, &["get", "service", "web"]);
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert!(cluster_ip.starts_with("10.96.") && cluster_ip != "10.96.0.0", "{svc}");
    // Dynamic allocation prefers the upper band: past the 256 addresses kept for static use.
    let last: u32 = cluster_ip.rsplit('.').next().unwrap().parse().unwrap();
    let third: u32 = cluster_ip.split('.').nth(2).unwrap().parse().unwrap();
    assert!(third * 256 + last > 256, "{cluster_ip}");
    assert!(addresses(&api).contains(&format!("{cluster_ip} -> services/default/web")));

    // Endpoints: the ready pods as addresses on the resolved port, the sick one not ready.
    let mut ready_ips = vec![a.clone(), b.clone()];
    ready_ips.sort();
    let endpoints = wait_for("web's endpoints", Duration::from_secs(90), || {
        let ep = get(&api, &["get", "endpoints", "web"]);
        let subset = &ep["subsets"][0];
        let ips: Vec<&str> = subset["addresses"].as_array()?.iter().filter_map(|a| a["ip"].as_str()).collect();
        let not_ready: Vec<&str> =
            subset["notReadyAddresses"].as_array()?.iter().filter_map(|a| a["ip"].as_str()).collect();
        (ips == ready_ips && not_ready == [sick.as_str()]).then_some(ep)
    });
    assert_eq!(endpoints["subsets"][0]["ports"], json!([{"port": 9000, "protocol": "TCP"}]), "{endpoints}");
    let table = ok(admin_kubectl(&api, &["get", "endpoints", "web"]), "kubectl get endpoints");
    assert!(table.contains(&format!("{}:9000", ready_ips[0])) && !table.contains(&sick), "{table}");
    // The slice: every backend with its conditions, owned by the Service.
    let slices = get(&api, &["get", "endpointslices", "-l", "kubernetes.io/service-name=web"]);
    let slice = &slices["items"][0];
    assert_eq!(slices["items"].as_array().unwrap().len(), 1, "{slices}");
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(slice["metadata"]["ownerReferences"][0]["uid"], svc["metadata"]["uid"]);
    assert_eq!(slice["ports"], json!([{"name": "", "port": 9000, "protocol": "TCP"}]));
    let conditions: Vec<(String, bool)> = slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["targetRef"]["name"].as_str().unwrap().to_owned(), e["conditions"]["ready"].as_bool().unwrap()))
        .collect();
    assert_eq!(conditions, [("web-a".to_owned(), true), ("web-b".to_owned(), true), ("web-sick".to_owned(), false)]);
    // The writes were the controllers' own, each as its service account, audited.
    let creators: Vec<(String, String)> = std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["verb"] == "create" && e["stage"] == "ResponseComplete" && e["responseStatus"]["code"] == 201)
        .filter(|e| e["objectRef"]["resource"] == "endpoints" || e["objectRef"]["resource"] == "endpointslices")
        .map(|e| {
            let resource = e["objectRef"]["resource"].as_str().unwrap_or_default().to_owned();
            (resource, e["user"]["username"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    for (resource, account) in [("endpoints", "endpoint-controller"), ("endpointslices", "endpointslice-controller")] {
        let by = format!("system:serviceaccount:kube-system:{account}");
        assert!(creators.contains(&(resource.to_owned(), by)), "{resource} by {account}: {creators:?}");
    }

    // A pod that goes is dropped.
    ok(admin_kubectl(&api, &["delete", "pod", "web-b", "--wait=false"]), "delete a pod");
    wait_for("web-b out of web's endpoints", Duration::from_secs(60), || {
        let ep = get(&api, &["get", "endpoints", "web"]);
        let ips: Vec<&str> =
            ep["subsets"][0]["addresses"].as_array()?.iter().filter_map(|a| a["ip"].as_str()).collect();
        (ips == [a.as_str()]).then_some(ep)
    });

    // The Service deleted: its address released, its Endpoints and slices gone.
    ok(admin_kubectl(&api, &["delete", "service", "web"]), "delete service");
    assert!(!addresses(&api).iter().any(|l| l.ends_with("/web")), "released");
    wait_for("web's endpoints and slices gone", Duration::from_secs(60), || {
        let ep = admin_kubectl(&api, &["get", "endpoints", "web"]);
        let slices = get(&api, &["get", "endpointslices", "-l", "kubernetes.io/service-name=web"]);
        (!ep.status.success() && slices["items"].as_array().is_some_and(Vec::is_empty)).then_some(Value::Null)
    });
    // The address is free again: taken statically by the next Service.
    ok(
        admin_kubectl(
            &api,
            &["create", "service", "clusterip", "reuse", &format!("--clusterip={cluster_ip}"), "--tcp=80:80"],
        ),
        "reuse the released address",
    );
}
