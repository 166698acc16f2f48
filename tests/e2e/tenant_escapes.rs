//! End-to-end: what a tenant's pod spec tried against the node, through the real binary,
//! containerd and runc (security round 4). Each test names the attack it guards:
//!
//! - the subPath symlink-swap race (CVE-2021-25741): a container exchanges a directory of
//!   its emptyDir with a symlink to `/` in a loop (`renameat2(RENAME_EXCHANGE)`, a static
//!   helper built from `swap_exchange.c`) while twenty other containers of its pods mount
//!   `subPath: a/<the node's secret dir>`; none of them sees the node's file;
//! - a container without a seccomp profile runs under RuntimeDefault (`seccompDefault`)
//!   and without `CAP_NET_RAW`;
//! - an env of forty variables each doubling the one before fails its container with
//!   `CreateContainerConfigError`, and the agent's memory does not follow it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use podpass_node::runtime::archive::{self, Entry};
use podpass_node::runtime::containerd::{self as library, SANDBOX_IMAGE};
use reqwest::Method;
use serde_json::{Value, json};

mod containerd;
mod registry;
mod support;
use registry::free_port;
use support::*;

/// The tenant's image: busybox and the static swapping helper.
const TENANT_IMAGE: &str = "podpass.local/tenant:1";
/// The same content under a second name.
const TENANT_IMAGE_2: &str = "podpass.local/tenant:2";

/// Builds `swap_exchange.c` static (gcc and glibc's `libc.a`: install-test-deps).
fn build_swapper(dir: &Path) -> Vec<u8> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("swap_exchange.c");
    let out = dir.join("swap_exchange");
    let status = Command::new("cc").args(["-static", "-O2", "-o"]).arg(&out).arg(&source).status().expect("cc (gcc)");
    assert!(status.success(), "building the swapping helper static");
    std::fs::read(out).unwrap()
}

/// A containerd with podpass's sandbox image and [`TENANT_IMAGE`].
fn start_runtime(dir: &Path) -> containerd::Containerd {
    let ctd = containerd::Containerd::start(dir);
    let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
    let swapper = build_swapper(dir);
    let applets = ["sh", "cat", "echo", "sleep", "mkdir", "ln", "grep", "test", "[", "yes", "head"];
    let extra = vec![Entry::File { name: "bin/swap_exchange".into(), mode: 0o755, content: swapper }];
    let layer = archive::busybox_layer(&busybox, &applets, extra).unwrap();
    ctd.import(SANDBOX_IMAGE, library::sandbox_image(&busybox).unwrap());
    ctd.import(TENANT_IMAGE, archive::oci_image(TENANT_IMAGE, &layer, &[], &["/bin/sh"]).unwrap().0);
    ctd.import(TENANT_IMAGE_2, archive::oci_image(TENANT_IMAGE_2, &layer, &[], &["/bin/sh"]).unwrap().0);
    ctd
}

/// A control plane, a containerd and node n1 running containers on it with `kubelet_config`.
struct Cluster {
    d: std::path::PathBuf,
    s: Server,
    agent: Agent,
    runtime: containerd::Containerd,
    // Last: removed once everything that writes in it has stopped.
    _dir: tempfile::TempDir,
}

fn cluster(prefix: &str, kubelet_config: &str) -> Cluster {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in("/tmp").unwrap();
    let d = dir.path().to_owned();
    std::fs::create_dir(d.join("api")).unwrap();
    let s = start(&d.join("api"), &[]);
    let runtime = start_runtime(&d.join("c"));
    let kubeconfig = node_kubeconfig(&d.join("api"), &d.join("n1.kubeconfig"));
    std::fs::write(d.join("kubelet.yaml"), kubelet_config).unwrap();
    let (endpoint, port) = (runtime.endpoint.clone(), free_port().to_string());
    let config = d.join("kubelet.yaml");
    let agent = spawn_agent_with(
        &kubeconfig,
        &d.join("root"),
        Some(&d.join("agent.log")),
        &["--container-runtime-endpoint", &endpoint, "--port", &port, "--config", config.to_str().unwrap()],
    );
    wait_for("node n1 registered", Duration::from_secs(30), || {
        let (code, node) = admin_get(&s, "/api/v1/nodes/n1");
        (code == 200 && node["status"]["nodeInfo"].is_object()).then_some(node)
    });
    Cluster { _dir: dir, d, s, agent, runtime }
}

/// The lines a container wrote (its first attempt), without the CRI prefix.
fn log_lines(d: &Path, pod: &Value, container: &str) -> Vec<String> {
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let name = pod["metadata"]["name"].as_str().unwrap();
    let log = std::fs::read_to_string(d.join(format!("root/logs/pods/default_{name}_{uid}/{container}/0.log")))
        .unwrap_or_default();
    log.lines().map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_owned()).collect()
}

#[test]
fn a_subpath_symlink_swap_race_never_mounts_the_nodes_files_into_a_pod() {
    let c = cluster("esc", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
    // The node's secret, outside every volume: what the escape read (the signing key).
    let secret_dir = c.d.join("node-secrets");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("signing.key"), "THE-NODES-SECRET").unwrap();
    let deep = secret_dir.strip_prefix("/").unwrap().display().to_string();

    // Per pod: the swapper first (the sync starts containers in order, each start racing
    // it), then ten victims mounting `a/<secret dir>`; `a` is a directory holding that same
    // path (a string check passes on it) exchanged with `b`, a symlink to `/`.
    let victims = 10;
    let pods = ["race-1", "race-2"];
    for name in pods {
        let mut containers = vec![json!({"name": "swapper", "image": TENANT_IMAGE, "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", format!(
                "mkdir -p /w/a/{deep} && ln -s / /w/b && exec /bin/swap_exchange /w/a /w/b")],
            "volumeMounts": [{"name": "work", "mountPath": "/w"}]})];
        for i in 0..victims {
            containers.push(json!({"name": format!("victim-{i}"), "image": TENANT_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c",
                    "if [ -e /m/signing.key ]; then echo ESCAPED; cat /m/signing.key; fi; echo checked; sleep 3600"],
                "volumeMounts": [{"name": "work", "mountPath": "/m", "subPath": format!("a/{deep}")}]}));
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
                "volumes": [{"name": "work", "emptyDir": {}}], "containers": containers}});
        assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod)).0, 201);
    }

    // Each victim starts once its preparation found `a` a directory; a preparation that
    // found the symlink is refused (CreateContainerConfigError) and tried again.
    for name in pods {
        let pod = wait_for(&format!("every victim of {name} running"), Duration::from_secs(300), || {
            let (_, p) = admin_get(&c.s, &format!("/api/v1/namespaces/default/pods/{name}"));
            let statuses = p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
            let running = statuses.iter().filter(|s| s["state"]["running"].is_object()).count();
            (running == victims + 1).then_some(p)
        });
        for i in 0..victims {
            let container = format!("victim-{i}");
            let lines = wait_for(&format!("{name}/{container} checked"), Duration::from_secs(30), || {
                let lines = log_lines(&c.d, &pod, &container);
                lines.iter().any(|l| l == "checked").then(|| json!(lines))
            });
            assert!(
                !lines.as_array().unwrap().iter().any(|l| l == "ESCAPED" || l == "THE-NODES-SECRET"),
                "{name}/{container} read the node's file through its subPath: {lines}"
            );
        }
    }
    // How the races fell, for the record: refusals are the kubelet's Failed events.
    let events = admin_get(&c.s, "/api/v1/namespaces/default/events").1;
    let refused: i64 = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["message"].as_str().is_some_and(|m| m.contains("not within volume path")))
        .map(|e| e["count"].as_i64().unwrap_or(1))
        .sum();
    eprintln!("{} victims started inside their volume; {refused} preparations refused", victims * pods.len());
    // The node wrote nothing into its own files on the pods' behalf.
    assert_eq!(std::fs::read_dir(&secret_dir).unwrap().count(), 1);

    // Deleting the pods unmounts and removes their subPath mounts.
    for name in pods {
        let uid = admin_get(&c.s, &format!("/api/v1/namespaces/default/pods/{name}")).1["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            admin_request(&c.s, Method::DELETE, &format!("/api/v1/namespaces/default/pods/{name}"), None).0,
            200
        );
        let pod_dir = c.d.join("root/pods").join(&uid);
        wait_for(&format!("{name}'s directory and subPath mounts removed"), Duration::from_secs(60), || {
            (!pod_dir.exists()).then_some(Value::Null)
        });
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(c.d.join("root").to_str().unwrap()), "no mount left under the node's root");
    drop(c.agent);
}

#[test]
fn containers_run_under_runtime_default_seccomp_without_net_raw_and_an_env_bomb_fails_alone() {
    let c =
        cluster("sec", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nseccompDefault: true\n");
    let pod = |name: &str, script: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "n1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": false,
                "containers": [{"name": "app", "image": TENANT_IMAGE, "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script]}]}})
    };
    let status = "grep -E '^(Seccomp|CapEff|CapBnd):' /proc/self/status";
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod("plain", status))).0, 201);
    let plain = wait_pod_phase(&c.s, "plain", "Succeeded");
    let lines = log_lines(&c.d, &plain, "app");
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("{name} in {lines:?}"))
    };
    assert_eq!(field("Seccomp:"), "2", "a seccomp filter (RuntimeDefault): {lines:?}");
    const NET_RAW: u64 = 1 << 13;
    for caps in ["CapEff:", "CapBnd:"] {
        let mask = u64::from_str_radix(&field(caps), 16).unwrap();
        assert_eq!(mask & NET_RAW, 0, "{caps} holds CAP_NET_RAW: {lines:?}");
        assert_ne!(mask, 0, "the rest of the default set stays");
    }
    // A pod that asks for NET_RAW does not get it; one that opts out of seccomp does.
    let mut greedy = pod("greedy", status);
    greedy["spec"]["securityContext"] = json!({"seccompProfile": {"type": "Unconfined"}});
    greedy["spec"]["containers"][0]["securityContext"] = json!({"capabilities": {"add": ["NET_RAW"]}});
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(greedy)).0, 201);
    let greedy = wait_pod_phase(&c.s, "greedy", "Succeeded");
    let lines = log_lines(&c.d, &greedy, "app");
    assert!(lines.iter().any(|l| l.starts_with("Seccomp:") && l.ends_with('0')), "{lines:?}");
    let eff = lines.iter().find_map(|l| l.strip_prefix("CapEff:")).unwrap().trim().to_owned();
    assert_eq!(u64::from_str_radix(&eff, 16).unwrap() & NET_RAW, 0, "{lines:?}");

    // The env bomb: 40 variables, each twice the one before (2^40 bytes if expanded).
    let hwm = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap().to_owned();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    let before = hwm(c.agent.0.id());
    let mut env = vec![json!({"name": "V0", "value": "x".repeat(1024)})];
    for i in 1..40 {
        env.push(json!({"name": format!("V{i}"), "value": format!("$(V{})$(V{})", i - 1, i - 1)}));
    }
    let mut bomb = pod("bomb", "echo never");
    bomb["spec"]["containers"][0]["env"] = json!(env);
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(bomb)).0, 201);
    let waiting = wait_for("the bomb's container refused", Duration::from_secs(60), || {
        let (_, p) = admin_get(&c.s, "/api/v1/namespaces/default/pods/bomb");
        let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CreateContainerConfigError").then_some(w)
    });
    assert!(waiting["message"].as_str().unwrap().contains("ARG_MAX"), "{waiting}");
    let grown = hwm(c.agent.0.id()).saturating_sub(before);
    assert!(grown < 100 << 20, "the agent's peak memory grew by {grown} bytes");
    // The node still runs other pods.
    assert_eq!(
        admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod("after", "echo ok"))).0,
        201
    );
    wait_pod_phase(&c.s, "after", "Succeeded");
}

#[test]
fn logs_follow_the_pods_uid_and_leave_with_the_pod() {
    let c = cluster("logs", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
    let api = c.d.join("api");
    let pod = |name: &str, image: &str, script: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "n1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": false,
                "containers": [{"name": "app", "image": image, "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script]}]}})
    };
    // A tenant's pod writes its secret, then is deleted: its log directory goes with it.
    let first = pod("web", TENANT_IMAGE, "echo TENANT-A-SECRET");
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(first)).0, 201);
    let done = wait_pod_phase(&c.s, "web", "Succeeded");
    let uid = done["metadata"]["uid"].as_str().unwrap().to_owned();
    let logs = ok(admin_kubectl(&api, &["logs", "web"]), "kubectl logs");
    assert_eq!(logs.trim(), "TENANT-A-SECRET");
    let dir = c.d.join(format!("root/logs/pods/default_web_{uid}"));
    assert!(dir.exists());
    assert_eq!(admin_request(&c.s, Method::DELETE, "/api/v1/namespaces/default/pods/web", None).0, 200);
    wait_for("the deleted pod's log directory removed", Duration::from_secs(60), || {
        (!dir.exists()).then_some(Value::Null)
    });
    wait_for("the pod removed", Duration::from_secs(60), || {
        (admin_get(&c.s, "/api/v1/namespaces/default/pods/web").0 == 404).then_some(Value::Null)
    });

    // Leftovers of an earlier pod of the same name (a node restart, another agent): never
    // served for the new pod, whose container has not started.
    let stale = c.d.join("root/logs/pods/default_web_0a0a0a0a-0000-4000-8000-000000000000/app");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("0.log"), "2026-01-01T00:00:00.000000000Z stdout F TENANT-A-SECRET\n").unwrap();
    let second = pod("web", "podpass.local/absent:1", "true");
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(second)).0, 201);
    wait_for("the new pod's container waiting", Duration::from_secs(60), || {
        let (_, p) = admin_get(&c.s, "/api/v1/namespaces/default/pods/web");
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str().map(|r| json!(r))
    });
    let out = admin_kubectl(&api, &["logs", "web"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && !stdout.contains("TENANT-A-SECRET"), "{stdout}");
    assert!(stderr.contains("container \"app\" in pod \"web\" is waiting to start: "), "{stderr}");
}

#[test]
fn a_pod_deleted_while_containerd_is_down_is_stopped_once_it_is_back_and_only_then_removed() {
    let mut c = cluster("crash", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "long"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": TENANT_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}]}});
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod)).0, 201);
    let running = wait_pod_phase(&c.s, "long", "Running");
    let uid = running["metadata"]["uid"].as_str().unwrap().to_owned();

    // containerd dies (kill -9); its shims and the container keep running.
    c.runtime.child.kill().unwrap();
    c.runtime.child.wait().unwrap();
    assert_eq!(admin_request(&c.s, Method::DELETE, "/api/v1/namespaces/default/pods/long", None).0, 200);
    // The node cannot stop it: the pod stays, Terminating, past its grace (1 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        let (code, p) = admin_get(&c.s, "/api/v1/namespaces/default/pods/long");
        assert_eq!(code, 200, "the pod was removed while its container may still run");
        assert!(p["metadata"]["deletionTimestamp"].is_string());
        std::thread::sleep(Duration::from_millis(200));
    }

    // containerd is back: the node's retried teardown stops and removes everything, then
    // confirms the deletion.
    let replaced = containerd::Containerd::start(&c.d.join("c"));
    let endpoint = replaced.endpoint.clone();
    // The dead one is not dropped: its Drop would remove every sandbox through the new
    // containerd, doing the node's work for it.
    std::mem::forget(std::mem::replace(&mut c.runtime, replaced));
    wait_for("the pod removed once the node confirmed", Duration::from_secs(120), || {
        (admin_get(&c.s, "/api/v1/namespaces/default/pods/long").0 == 404).then_some(Value::Null)
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cri = rt.block_on(podpass_node::runtime::CriRuntime::connect(&endpoint)).unwrap();
    let of_pod = std::collections::HashMap::from([("io.kubernetes.pod.uid".to_owned(), uid)]);
    assert!(rt.block_on(cri.list_containers(of_pod.clone())).unwrap().is_empty(), "a container was left behind");
    assert!(rt.block_on(cri.list_pod_sandboxes(of_pod)).unwrap().is_empty(), "a sandbox was left behind");
}

#[test]
fn an_image_change_kills_the_container_and_starts_the_new_one_only_through_the_image_check() {
    let c = cluster("image", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": TENANT_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}]}});
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod)).0, 201);
    let running = wait_pod_phase(&c.s, "web", "Running");
    let uid = running["metadata"]["uid"].as_str().unwrap().to_owned();
    let first_id = running["status"]["containerStatuses"][0]["containerID"].as_str().unwrap().to_owned();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cri = rt.block_on(podpass_node::runtime::CriRuntime::connect(&c.runtime.endpoint)).unwrap();
    let of_pod = std::collections::HashMap::from([("io.kubernetes.pod.uid".to_owned(), uid)]);
    let running_images = || -> Vec<String> {
        rt.block_on(cri.list_containers(of_pod.clone()))
            .unwrap()
            .into_iter()
            .filter(|c| c.state == podpass_node::runtime::CONTAINER_RUNNING)
            .map(|c| c.image.map(|i| i.image).unwrap_or_default())
            .collect()
    };
    let set_image = |image: &str| {
        let patch = json!({"spec": {"containers": [{"name": "app", "image": image}]}});
        let (code, answer) = admin_raw_request(
            &c.s,
            Method::PATCH,
            "/api/v1/namespaces/default/pods/web",
            Some(("application/strategic-merge-patch+json", serde_json::to_vec(&patch).unwrap())),
        );
        assert_eq!(code, 200, "{answer}");
    };

    // An image the pod may not use (not on the node, pull policy Never): the old container
    // is killed, nothing runs, and the status says why — not the new image as if it ran.
    let began = std::time::Instant::now();
    set_image("podpass.local/absent:1");
    let waiting = wait_for("the changed container refused its image", Duration::from_secs(60), || {
        let (_, p) = admin_get(&c.s, "/api/v1/namespaces/default/pods/web");
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        (w["reason"] == "ErrImageNeverPull").then(|| p.clone())
    });
    assert!(waiting["status"]["containerStatuses"][0]["state"]["running"].is_null(), "{waiting}");
    wait_for("the old container stopped", Duration::from_secs(30), || {
        running_images().is_empty().then_some(Value::Null)
    });

    eprintln!("refused and stopped after {:?}", began.elapsed());
    // An image it may use: started through the check, the new image running.
    set_image(TENANT_IMAGE_2);
    let restarted = wait_for("the new container running", Duration::from_secs(60), || {
        let (_, p) = admin_get(&c.s, "/api/v1/namespaces/default/pods/web");
        let s = &p["status"]["containerStatuses"][0];
        (s["state"]["running"].is_object() && s["image"] == TENANT_IMAGE_2).then(|| s.clone())
    });
    eprintln!("restarted after {:?}", began.elapsed());
    assert_ne!(restarted["containerID"].as_str().unwrap(), first_id, "{restarted}");
    assert!(restarted["restartCount"].as_i64().unwrap() >= 1, "{restarted}");
    // One container runs: the new one (both names hold the same content, one image ID).
    assert_eq!(running_images().len(), 1);
    let events = admin_get(&c.s, "/api/v1/namespaces/default/events").1;
    assert!(
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "Killing"
                && e["message"].as_str().unwrap_or_default().contains("definition changed")),
        "{events}"
    );
    eprintln!("body done after {:?}", began.elapsed());
}

/// Bytes under `dir`, recursively.
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[test]
fn a_crash_looping_log_writer_stays_within_its_bound_and_keeps_one_dead_instance() {
    // 1 MiB x 2 files per container: at most 2 MiB of logs by policy.
    let c = cluster(
        "gc",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 2\ncontainerLogMonitorInterval: 3s\n",
    );
    let limit: u64 = 2 << 20;
    // Each attempt writes 3 MiB as fast as it can, then fails.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noisy"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": TENANT_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "yes 0123456789abcdef0123456789abcdef | head -c 3145728; exit 1"]}]}});
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod)).0, 201);
    let p = wait_for("three attempts", Duration::from_secs(120), || {
        let (_, p) = admin_get(&c.s, "/api/v1/namespaces/default/pods/noisy");
        let s = &p["status"]["containerStatuses"][0];
        (s["restartCount"].as_i64().unwrap_or(0) >= 2 && s["state"]["waiting"]["reason"] == "CrashLoopBackOff")
            .then(|| p.clone())
    });
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let dir = c.d.join(format!("root/logs/pods/default_noisy_{uid}"));
    // The worker collects after its sync: wait for the state it promises.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cri = rt.block_on(podpass_node::runtime::CriRuntime::connect(&c.runtime.endpoint)).unwrap();
    let of_pod = std::collections::HashMap::from([("io.kubernetes.pod.uid".to_owned(), uid.clone())]);
    wait_for("dead instances collected and logs within the bound", Duration::from_secs(60), || {
        let instances = rt.block_on(cri.list_containers(of_pod.clone())).unwrap().len();
        let used = du(&dir);
        (instances <= 2 && used <= 2 * limit).then(|| json!([instances, used]))
    });
    // kubectl logs still reads the last attempt. Like the kubelet's, it reads the current
    // file only: one just rotated (or an attempt just starting) reads empty for a moment.
    wait_for("kubectl logs reads the last attempt", Duration::from_secs(60), || {
        let logs = ok(admin_kubectl(&c.d.join("api"), &["logs", "noisy", "--tail=3"]), "kubectl logs");
        logs.starts_with("0123456789abcdef0123456789abcdef\n").then_some(Value::Null)
    });
    // Deleted, the pod's logs go with it.
    assert_eq!(admin_request(&c.s, Method::DELETE, "/api/v1/namespaces/default/pods/noisy", None).0, 200);
    wait_for("the log directory removed with the pod", Duration::from_secs(60), || {
        (!dir.exists()).then_some(Value::Null)
    });
}

#[test]
fn half_open_connections_to_the_nodes_port_leave_kubectl_logs_working() {
    let c = cluster("flood", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"},
        "spec": {"nodeName": "n1", "restartPolicy": "Never", "automountServiceAccountToken": false,
            "containers": [{"name": "app", "image": TENANT_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "echo still-heard"]}]}});
    assert_eq!(admin_request(&c.s, Method::POST, "/api/v1/namespaces/default/pods", Some(pod)).0, 201);
    wait_pod_phase(&c.s, "talker", "Succeeded");
    let node = admin_get(&c.s, "/api/v1/nodes/n1").1;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_i64().unwrap();
    // 1050 anonymous half-open TLS connections to the node's log port, past its cap.
    let flood = Flood::start(&format!("127.0.0.1:{port}"), 1050, true);
    assert!(flood.1 >= 1000, "only {} connections opened", flood.1);
    let logs = ok(admin_kubectl(&c.d.join("api"), &["logs", "talker", "--request-timeout=30s"]), "kubectl logs");
    assert_eq!(logs.trim(), "still-heard");
    drop(flood);
}
