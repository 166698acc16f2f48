//! The CRI runtime client against a real containerd (Debian `containerd` + `runc`, run as
//! root, as the node runs it): podpass's own sandbox image and a busybox application image
//! made and imported locally, a pod sandbox on podpass's loopback-only network (its CNI
//! plugin is the podpass binary), a container that reads a read-only bind mount, sees only
//! its own network, writes its log in the kubelet's layout and exits with its code; then
//! everything stopped and removed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use podpass_node::runtime::containerd::{self as ctd_lib, SANDBOX_IMAGE};
use podpass_node::runtime::{
    CONTAINER_EXITED, ContainerConfig, ContainerMetadata, CriRuntime, ImageSpec, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, Mount, NAMESPACE_POD, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, archive,
};

mod containerd;

const APP_IMAGE: &str = "podpass.local/test-app:1";

async fn connect(endpoint: &str) -> CriRuntime {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(rt) = CriRuntime::connect(endpoint).await
            && rt.version().await.is_ok()
        {
            return rt;
        }
        assert!(Instant::now() < deadline, "containerd did not answer at {endpoint}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_runs_a_container_that_reads_its_mount_logs_and_exits_with_its_code() {
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("ctd").tempdir_in("/tmp").unwrap();
    // Dropped after everything below: whatever happens, the test's sandboxes go with it.
    let ctd = containerd::Containerd::start(&dir.path().join("c"));
    let rt = connect(&ctd.endpoint).await;
    assert_eq!(rt.version().await.unwrap().runtime_name, "containerd");

    let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
    ctd.import(SANDBOX_IMAGE, ctd_lib::sandbox_image(&busybox).unwrap());
    let layer = archive::busybox_layer(&busybox, &["sh", "cat", "echo", "ip", "hostname"], vec![]).unwrap();
    ctd.import(APP_IMAGE, archive::oci_image(APP_IMAGE, &layer, &["/bin/sh"], &[]).unwrap().0);

    let logs = dir.path().join("pods/team_web_uid-1");
    let labels: HashMap<String, String> = [("io.kubernetes.pod.uid".to_owned(), "uid-1".to_owned())].into();
    let sandbox_config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "web".into(),
            uid: "uid-1".into(),
            namespace: "team".into(),
            attempt: 0,
        }),
        hostname: "web".into(),
        log_directory: logs.display().to_string(),
        labels: labels.clone(),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NAMESPACE_POD,
                    pid: 1,
                    ipc: NAMESPACE_POD,
                    target_id: String::new(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox = rt.run_pod_sandbox(sandbox_config.clone()).await.unwrap();
    let listed = rt.list_pod_sandboxes(labels.clone()).await.unwrap();
    assert_eq!(listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [sandbox.as_str()]);
    // Its address is the plugin's: 127.128.0.0/9, derived from the sandbox ID.
    let ip = rt.pod_sandbox_status(&sandbox).await.unwrap().unwrap().network.unwrap().ip;
    assert_eq!(ip, podpass_node::runtime::cni::address_of(&sandbox));

    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("msg"), "from the host\n").unwrap();
    let config = ContainerConfig {
        metadata: Some(ContainerMetadata { name: "app".into(), attempt: 0 }),
        image: Some(ImageSpec { image: APP_IMAGE.into(), ..Default::default() }),
        command: vec!["/bin/sh".into()],
        args: vec![
            "-c".into(),
            "echo hello; cat /data/msg; hostname; ip -o addr; echo nope > /data/x || exit 3".into(),
        ],
        mounts: vec![Mount {
            container_path: "/data".into(),
            host_path: data.display().to_string(),
            readonly: true,
            ..Default::default()
        }],
        labels: labels.clone(),
        log_path: "app/0.log".into(),
        ..Default::default()
    };
    let container = rt.create_container(&sandbox, config, sandbox_config).await.unwrap();
    rt.start_container(&container).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let status = rt.container_status(&container).await.unwrap().unwrap();
        if status.state == CONTAINER_EXITED {
            break status;
        }
        assert!(Instant::now() < deadline, "the container did not exit: {status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((status.exit_code, status.reason.as_str()), (3, "Error"), "a read-only mount refuses the write");
    // containerd 1.6 may report a container that exits at once without its start time, or
    // with a finish a fraction of a millisecond before its start.
    assert!(status.finished_at > 0, "{status:?}");
    assert!(!data.join("x").exists());
    // The CRI log format: `<RFC 3339 nano> <stream> <F|P> <line>`.
    let log = std::fs::read_to_string(logs.join("app/0.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.iter().any(|l| l.ends_with(" stdout F hello")), "{log}");
    assert!(lines.iter().any(|l| l.ends_with(" stdout F from the host")), "{log}");
    assert!(lines.iter().any(|l| l.ends_with(" stdout F web")), "its own hostname: {log}");
    // Its own network namespace: loopback and the plugin's eth0, nothing of the host's.
    let addrs: Vec<&&str> = lines.iter().filter(|l| l.contains(" inet ")).collect();
    assert!(addrs.iter().any(|l| l.contains(" lo ") && l.contains("127.0.0.1/8")), "{log}");
    assert!(addrs.iter().any(|l| l.contains(" eth0") && l.contains(&format!("{ip}/32"))), "{log}");
    assert_eq!(addrs.len(), 2, "{log}");
    assert!(lines.iter().any(|l| l.contains(" stderr F ") && l.contains("Read-only file system")), "{log}");

    rt.remove_container(&container).await.unwrap();
    rt.stop_pod_sandbox(&sandbox).await.unwrap();
    rt.remove_pod_sandbox(&sandbox).await.unwrap();
    rt.remove_pod_sandbox(&sandbox).await.unwrap();
    assert!(rt.list_pod_sandboxes(labels).await.unwrap().is_empty());
}
