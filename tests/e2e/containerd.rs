//! A real containerd (Debian `containerd`, CRI plugin) for a test: podpass's own layout
//! (`runtime::containerd::Layout`: config, socket and state under the test's directory,
//! podpass's pod network), with the native snapshotter, which leaves no mounts behind.
//! Dropping it removes every sandbox the test made (mounts, network namespaces, shims go
//! with them), whatever happened, then kills containerd.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use podpass_node::runtime::containerd::{self as library, Layout, SANDBOX_IMAGE};
use podpass_node::runtime::{CriRuntime, archive};

/// The busybox application image [`Containerd::start_with_app`] loads.
pub const APP_IMAGE: &str = "podpass.local/app:1";
/// The in-cluster client image [`Containerd::start_with_client`] loads: busybox and a
/// static kubectl (a client-go build; with no kubeconfig it runs `rest.InClusterConfig()`).
pub const CLIENT_IMAGE: &str = "podpass.local/in-cluster-client:1";

/// A statically linked kubectl. Google Cloud SDK's `kubectl` is a dispatcher beside
/// versioned builds; a versioned one is taken when there.
fn static_kubectl() -> std::path::PathBuf {
    let found = Command::new("sh").args(["-c", "command -v kubectl"]).output().unwrap();
    let path = std::fs::canonicalize(String::from_utf8_lossy(&found.stdout).trim()).expect("kubectl on PATH");
    let dir = path.parent().unwrap().to_owned();
    ["kubectl.1.33", "kubectl.1.32"].iter().map(|n| dir.join(n)).find(|p| p.exists()).unwrap_or(path)
}

/// A containerd process, its sandboxes removed and itself killed on drop.
pub struct Containerd {
    pub child: Child,
    /// `unix:///…/run/containerd.sock`.
    pub endpoint: String,
    pub layout: Layout,
}

/// Runs `f` on a runtime of its own, on a thread of its own (callable from async tests).
fn on_own_runtime<T: Send + 'static>(f: impl std::future::Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f))
        .join()
        .unwrap()
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let endpoint = self.endpoint.clone();
        on_own_runtime(async move {
            if let Ok(cri) = CriRuntime::connect(&endpoint).await {
                let _ = cri.remove_pods(HashMap::new(), 0).await;
            }
        });
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Containerd {
    /// Starts containerd with its files under `dir` (short: the socket lives there) and
    /// waits for its socket.
    pub fn start(dir: &Path) -> Containerd {
        Containerd::start_with_registries(dir, &[])
    }

    /// [`Containerd::start`] reaching `registries` as their `hosts.toml` say.
    pub fn start_with_registries(dir: &Path, registries: &[library::RegistryHost]) -> Containerd {
        let mut layout = Layout::new(dir);
        layout.snapshotter = "native".into();
        layout.write(Path::new(env!("PODPASS_BIN")), registries).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(layout.config())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("containerd.log")).unwrap())
            .spawn()
            .expect("containerd (Debian package containerd)");
        let ctd = Containerd { child, endpoint: layout.endpoint(), layout };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(ctd.layout.socket()).is_err() {
            assert!(
                Instant::now() < deadline,
                "containerd did not start; see {}",
                dir.join("containerd.log").display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        ctd
    }

    /// [`Containerd::start`] with podpass's sandbox image and [`APP_IMAGE`] loaded: busybox
    /// with `applets`, `/bin/sh` its entrypoint.
    pub fn start_with_app(dir: &Path, applets: &[&str]) -> Containerd {
        let ctd = Containerd::start(dir);
        let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
        let layer = archive::busybox_layer(&busybox, applets, vec![]).unwrap();
        ctd.import(SANDBOX_IMAGE, library::sandbox_image(&busybox).unwrap());
        ctd.import(APP_IMAGE, archive::oci_image(APP_IMAGE, &layer, &[], &["/bin/sh"]).unwrap().0);
        ctd
    }

    /// [`Containerd::start`] with podpass's sandbox image and [`CLIENT_IMAGE`] loaded:
    /// busybox with `applets` and `/bin/kubectl`, `/bin/sh` its entrypoint.
    pub fn start_with_client(dir: &Path, applets: &[&str]) -> Containerd {
        let ctd = Containerd::start(dir);
        let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
        let kubectl = std::fs::read(static_kubectl()).unwrap();
        let extra = vec![archive::Entry::File { name: "bin/kubectl".into(), mode: 0o755, content: kubectl }];
        let layer = archive::busybox_layer(&busybox, applets, extra).unwrap();
        ctd.import(SANDBOX_IMAGE, library::sandbox_image(&busybox).unwrap());
        ctd.import(CLIENT_IMAGE, archive::oci_image(CLIENT_IMAGE, &layer, &[], &["/bin/sh"]).unwrap().0);
        ctd
    }

    /// Loads image `name`: busybox with `applets` and `extra`, `/bin/sh` its entrypoint.
    pub fn import_busybox_image(&self, name: &str, applets: &[&str], extra: Vec<archive::Entry>) {
        let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (Debian package busybox-static)");
        let layer = archive::busybox_layer(&busybox, applets, extra).unwrap();
        self.import(name, archive::oci_image(name, &layer, &[], &["/bin/sh"]).unwrap().0);
    }

    /// Loads the OCI archive `bytes` of image `name` (`runtime::containerd::import`).
    pub fn import(&self, name: &str, bytes: Vec<u8>) {
        let path = self.layout.dir.join("image.tar");
        std::fs::write(&path, bytes).unwrap();
        let (socket, name) = (self.layout.socket(), name.to_owned());
        on_own_runtime(async move {
            library::import(Path::new("ctr"), &socket, &path, &name, Duration::from_secs(60)).await
        })
        .unwrap();
    }
}
