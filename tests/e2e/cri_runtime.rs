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
    let (labels, sandbox_config) = sandbox_config(&logs, "uid-1");
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

/// A loopback-only pod sandbox `team/web` of `uid`, its logs under `logs`.
fn sandbox_config(logs: &std::path::Path, uid: &str) -> (HashMap<String, String>, PodSandboxConfig) {
    let labels: HashMap<String, String> = [("io.kubernetes.pod.uid".to_owned(), uid.to_owned())].into();
    let config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "web".into(),
            uid: uid.into(),
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
    (labels, config)
}

/// Everything a stream reader gives until its end.
async fn read_all(reader: &mut podpass_node::stream::spdy::StreamReader) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(chunk) = reader.next().await {
        all.extend(chunk);
    }
    all
}

/// The kubelet's streaming proxy meets containerd (issue 55): CRI `Exec` answers a URL of
/// containerd's stream server; podpass dials it, upgrades to SPDY/3.1 with the remote-command
/// protocol v4 and opens error, stdin, stdout and stderr streams. What is written to stdin
/// reaches the command, closing stdin is its end of input (the half-close a WebSocket v4
/// could not say), stdout and stderr come apart, and the exit code comes in the error
/// stream's Status; with a TTY, stderr is merged and a resize reaches the terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_streams_stdin_stdout_stderr_and_its_exit_code_over_spdy() {
    use podpass_node::stream::remote_command::{self, Channels};
    assert!(rustix::process::geteuid().is_root(), "running containers needs root");
    let dir = tempfile::Builder::new().prefix("ctd").tempdir_in("/tmp").unwrap();
    let ctd = containerd::Containerd::start(&dir.path().join("c"));
    let rt = connect(&ctd.endpoint).await;
    let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
    ctd.import(SANDBOX_IMAGE, ctd_lib::sandbox_image(&busybox).unwrap());
    let layer = archive::busybox_layer(&busybox, &["sh", "cat", "echo", "sleep", "stty", "wc"], vec![]).unwrap();
    ctd.import(APP_IMAGE, archive::oci_image(APP_IMAGE, &layer, &["/bin/sh"], &[]).unwrap().0);
    let (labels, sandbox_config) = sandbox_config(&dir.path().join("pods/team_web_uid-2"), "uid-2");
    let sandbox = rt.run_pod_sandbox(sandbox_config.clone()).await.unwrap();
    let config = ContainerConfig {
        metadata: Some(ContainerMetadata { name: "app".into(), attempt: 0 }),
        image: Some(ImageSpec { image: APP_IMAGE.into(), ..Default::default() }),
        command: vec!["/bin/sleep".into(), "3600".into()],
        labels: labels.clone(),
        log_path: "app/0.log".into(),
        ..Default::default()
    };
    let container = rt.create_container(&sandbox, config, sandbox_config).await.unwrap();
    rt.start_container(&container).await.unwrap();

    let all = Channels { stdin: true, stdout: true, stderr: true, tty: false };
    let cmd = ["/bin/sh", "-c", "cat; echo oops >&2; exit 3"].map(str::to_owned).to_vec();
    let url = rt.exec(&container, cmd, all).await.unwrap();
    let mut exec = remote_command::connect(&url, all).await.unwrap();
    let stdin = exec.stdin.take().unwrap();
    // More than one data frame's worth, so the command reads several.
    let input: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    stdin.write(&input).await.unwrap();
    stdin.close().await.unwrap();
    let (mut out, mut err) = (exec.stdout.take().unwrap(), exec.stderr.take().unwrap());
    let (out, err, status) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(read_all(&mut out), read_all(&mut err), read_all(&mut exec.error))
    })
    .await
    .expect("the exec ends once its input does");
    assert_eq!(out, input, "stdin reached the command and its output came back whole");
    assert_eq!(String::from_utf8_lossy(&err), "oops\n");
    assert_eq!(remote_command::exit_code(&status), Ok(3), "{}", String::from_utf8_lossy(&status));

    // A TTY: one output stream, a resize the terminal sees.
    let tty = Channels { stdin: true, stdout: true, stderr: true, tty: true };
    // The shell waits for the size it is told (bounded), so no ordering is assumed between
    // the resize stream and the command's start.
    let wait_for_size = "i=0; while [ \"$(stty size)\" != '37 91' ]; do i=$((i+1)); [ $i -gt 100000 ] && exit 9; done; read line; echo \"size-ok $line\"; echo to-stderr >&2";
    let cmd = ["/bin/sh", "-c", wait_for_size].map(str::to_owned).to_vec();
    let url = rt.exec(&container, cmd, tty).await.unwrap();
    let mut exec = remote_command::connect(&url, tty).await.unwrap();
    assert!(exec.stderr.is_none(), "a TTY merges stderr into stdout");
    exec.resize.as_ref().unwrap().write(br#"{"Width":91,"Height":37}"#).await.unwrap();
    exec.stdin.as_ref().unwrap().write(b"go\r").await.unwrap();
    let mut out = exec.stdout.take().unwrap();
    let (out, status) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(read_all(&mut out), read_all(&mut exec.error))
    })
    .await
    .expect("the TTY exec ends");
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("size-ok go"), "{text}");
    assert!(text.contains("to-stderr"), "{text}");
    assert_eq!(remote_command::exit_code(&status), Ok(0), "{}", String::from_utf8_lossy(&status));

    rt.stop_container(&container, 0).await.unwrap();
    rt.remove_container(&container).await.unwrap();
    rt.stop_pod_sandbox(&sandbox).await.unwrap();
    rt.remove_pod_sandbox(&sandbox).await.unwrap();
}
