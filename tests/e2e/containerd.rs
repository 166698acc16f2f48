//! A real containerd (Debian `containerd`, CRI plugin) with a private root, state and
//! socket, started and stopped by the test (interop.md §2).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A containerd process, killed on drop.
pub struct Containerd {
    pub child: Child,
    /// `unix:///…/c.sock`.
    pub endpoint: String,
    pub dir: PathBuf,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Containerd {
    pub fn start(dir: &Path) -> Containerd {
        std::fs::create_dir_all(dir).unwrap();
        let d = dir.display();
        // The native snapshotter leaves no mounts behind when the test's temp dir goes.
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"
[debug]
  address = "{d}/d.sock"
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "127.0.0.1:1/pause:none"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let sock = dir.join("c.sock");
        assert!(sock.as_os_str().len() < 100, "socket path too long for sun_path: {}", sock.display());
        let child = Command::new("containerd")
            .args(["--config", dir.join("config.toml").to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("containerd.log")).unwrap())
            .spawn()
            .expect("containerd");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            assert!(Instant::now() < deadline, "containerd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Containerd { child, endpoint: format!("unix://{}", sock.display()), dir: dir.to_path_buf() }
    }
}
