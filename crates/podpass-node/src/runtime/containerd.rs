//! A containerd of podpass's own: its root, state, sockets, CNI configuration and config
//! file under one directory (as interop-tested: `overlayfs`, the CRI plugin with a local
//! `sandbox_image`, loopback-only pod networks by podpass's own CNI plugin,
//! and per-registry `hosts.toml` for registries on loopback), and images loaded into it
//! with `ctr images import`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::archive::{self, ArchiveError};

/// The containerd namespace the CRI plugin uses.
pub const CRI_NAMESPACE: &str = "k8s.io";
/// The sandbox image podpass makes and loads.
pub const SANDBOX_IMAGE: &str = "podpass.local/pause:1";
/// Longest unix socket path (sun_path is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 100;

/// What went wrong with containerd.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    /// Writing its files.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The directory makes a socket path too long.
    #[error("containerd's socket {0} would be longer than {MAX_SOCKET_PATH} bytes; use a shorter data dir")]
    SocketPathTooLong(PathBuf),
    /// An image could not be made.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// `ctr` failed.
    #[error("ctr images import of {image}: {reason}")]
    Import {
        /// The image.
        image: String,
        /// Its stderr, or why it did not run.
        reason: String,
    },
}

/// The files of a containerd under `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The directory.
    pub dir: PathBuf,
    /// The snapshotter: `overlayfs`, or `native` where mounts must not outlive a test.
    pub snapshotter: String,
}

impl Layout {
    /// The layout under `dir` (which should be short: the socket lives there), with the
    /// overlayfs snapshotter.
    pub fn new(dir: &Path) -> Self {
        Layout { dir: dir.to_owned(), snapshotter: "overlayfs".into() }
    }

    /// `config.toml`.
    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// The gRPC socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("run/containerd.sock")
    }

    /// The endpoint the node agent is given (`--container-runtime-endpoint`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The CNI bin dir: [`cni::PLUGINS`](super::cni::PLUGINS), links to the podpass binary.
    pub fn cni_bin_dir(&self) -> PathBuf {
        self.dir.join("cni/bin")
    }

    /// Writes `config.toml`, the pod network (podpass's loopback-only CNI plugin, linked
    /// to `podpass`, the binary that serves it) and a `hosts.toml` per registry in
    /// `registries` (how containerd reaches it), creating the directories.
    pub fn write(&self, podpass: &Path, registries: &[RegistryHost]) -> Result<(), ContainerdError> {
        if self.socket().as_os_str().len() > MAX_SOCKET_PATH {
            return Err(ContainerdError::SocketPathTooLong(self.socket()));
        }
        let d = &self.dir;
        let write = |path: PathBuf, text: String| -> Result<(), ContainerdError> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|source| ContainerdError::Write { path: path.clone(), source })?;
            }
            std::fs::write(&path, text).map_err(|source| ContainerdError::Write { path, source })
        };
        for sub in ["root", "state", "run", "opt", "cni/bin"] {
            let path = d.join(sub);
            std::fs::create_dir_all(&path).map_err(|source| ContainerdError::Write { path, source })?;
        }
        write(self.config(), config_toml(d, &self.cni_bin_dir(), &self.snapshotter))?;
        // A pod's network namespace reaches nothing beyond itself: no bridge, no route out.
        write(
            d.join("cni/net.d/10-podpass-loopback.conflist"),
            format!(
                r#"{{"cniVersion": "{}", "name": "podpass-loopback", "plugins": [{{"type": "{}"}}]}}"#,
                super::cni::CNI_VERSION,
                super::cni::PLUGIN
            ),
        )?;
        for plugin in super::cni::PLUGINS {
            let link = self.cni_bin_dir().join(plugin);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(podpass, &link)
                .map_err(|source| ContainerdError::Write { path: link, source })?;
        }
        for registry in registries {
            let (host, text) = hosts_toml(registry);
            write(d.join("certs.d").join(host).join("hosts.toml"), text)?;
        }
        Ok(())
    }
}

/// The `hosts.toml` of `registry`, and the host it is for.
fn hosts_toml(registry: &RegistryHost) -> (&str, String) {
    match registry {
        RegistryHost::PlainHttp(host) => (
            host,
            format!(
                "server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        ),
        // The CA also verifies the token realm containerd asks for this host's credentials
        // (its authorizer uses the host's client).
        RegistryHost::Tls { host, ca, client } => {
            let mut text = format!(
                "server = \"https://{host}\"\n\n[host.\"https://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = {:?}\n",
                ca.display().to_string()
            );
            if let Some((cert, key)) = client {
                text.push_str(&format!(
                    "  client = [[{:?}, {:?}]]\n",
                    cert.display().to_string(),
                    key.display().to_string()
                ));
            }
            (host, text)
        }
        // containerd tries each [host] in order, then `server`: the mirror first.
        RegistryHost::Mirrored { mirror, origin } => {
            let (host, origin_text) = hosts_toml(origin);
            let (server, hosts) = origin_text.split_once("\n\n").unwrap_or((origin_text.as_str(), ""));
            let mirror_section = format!("[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n");
            (host, format!("{server}\n\n{mirror_section}\n{hosts}"))
        }
    }
}

/// How containerd reaches a registry (`hosts.toml` under `certs.d/<host>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryHost {
    /// `host:port` over plain HTTP (a registry on loopback in tests).
    PlainHttp(String),
    /// `host:port` over HTTPS, its certificate verified against the CA bundle at `ca`.
    Tls {
        /// `host:port`.
        host: String,
        /// A PEM CA bundle.
        ca: PathBuf,
        /// A client certificate and key shown when asked: the node's, which registry-auth
        /// takes as the node's proof when containerd fetches its token.
        client: Option<(PathBuf, PathBuf)>,
    },
    /// A registry pulled through a mirror first (`mirror`, a URL such as
    /// `http://127.0.0.1:5002`), then as `origin` says: a pull-through cache or P2P mirror in
    /// front of a registry.
    Mirrored {
        /// The mirror's URL.
        mirror: String,
        /// How the registry itself is reached.
        origin: Box<RegistryHost>,
    },
}

/// containerd's configuration (version 2) with everything under `dir`.
pub fn config_toml(dir: &Path, cni_bin_dir: &Path, snapshotter: &str) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/run/containerd.sock"

[ttrpc]
  address = "{d}/run/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  # Where the node may not lower a process's OOM score (no CAP_SYS_RESOURCE, as in a
  # container), keep it no lower than containerd's own instead of failing every sandbox.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{snapshotter}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{d}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#,
        cni = cni_bin_dir.display()
    )
}

/// The sandbox image: Debian's static busybox sleeping for ever as the pod's first process.
pub fn sandbox_image(busybox: &[u8]) -> Result<Vec<u8>, ArchiveError> {
    let layer = archive::busybox_layer(busybox, &["sleep"], Vec::new())?;
    Ok(archive::oci_image(SANDBOX_IMAGE, &layer, &["/bin/sleep"], &["2147483647"])?.0)
}

/// Loads an OCI archive into containerd's CRI namespace with `ctr` (`image` names it in
/// errors). Bounded by `timeout`.
pub async fn import(
    ctr: &Path,
    socket: &Path,
    archive: &Path,
    image: &str,
    timeout: Duration,
) -> Result<(), ContainerdError> {
    let err = |reason: String| ContainerdError::Import { image: image.to_owned(), reason };
    let run = tokio::process::Command::new(ctr)
        .arg("--address")
        .arg(socket)
        .args(["--namespace", CRI_NAMESPACE, "images", "import", "--no-unpack=false"])
        .arg(archive)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| err(format!("no answer within {} s", timeout.as_secs())))?
        .map_err(|e| err(format!("running {}: {e}", ctr.display())))?;
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_lives_under_the_directory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let layout = Layout::new(dir.path());
        let registries = [
            RegistryHost::PlainHttp("127.0.0.1:5001".into()),
            RegistryHost::Tls {
                host: "127.0.0.1:5443".into(),
                ca: dir.path().join("ca.crt"),
                client: Some((dir.path().join("n.crt"), dir.path().join("n.key"))),
            },
        ];
        layout.write(Path::new("/usr/bin/podpass"), &registries).unwrap_or_else(|e| panic!("{e}"));
        let plugin = std::fs::read_link(dir.path().join("cni/bin/podpass-loopback")).unwrap_or_default();
        assert_eq!(plugin, Path::new("/usr/bin/podpass"));
        let config = std::fs::read_to_string(layout.config()).unwrap_or_default();
        assert!(config.contains(&format!("address = \"{}\"", layout.socket().display())), "{config}");
        assert!(config.contains("sandbox_image = \"podpass.local/pause:1\""));
        let hosts = std::fs::read_to_string(dir.path().join("certs.d/127.0.0.1:5001/hosts.toml")).unwrap_or_default();
        assert!(hosts.starts_with("server = \"http://127.0.0.1:5001\""), "{hosts}");
        let tls = std::fs::read_to_string(dir.path().join("certs.d/127.0.0.1:5443/hosts.toml")).unwrap_or_default();
        assert!(tls.starts_with("server = \"https://127.0.0.1:5443\""), "{tls}");
        assert!(tls.contains(&format!("ca = \"{}\"", dir.path().join("ca.crt").display())), "{tls}");
        let client = format!(
            "client = [[\"{}\", \"{}\"]]",
            dir.path().join("n.crt").display(),
            dir.path().join("n.key").display()
        );
        assert!(tls.contains(&client), "{tls}");
        // A mirror in front: tried first, the registry's own host after it.
        let mirrored =
            RegistryHost::Mirrored { mirror: "http://127.0.0.1:5002".into(), origin: Box::new(registries[1].clone()) };
        layout.write(Path::new("/usr/bin/podpass"), &[mirrored]).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(dir.path().join("certs.d/127.0.0.1:5443/hosts.toml")).unwrap_or_default();
        let (mirror_at, origin_at) =
            (text.find("[host.\"http://127.0.0.1:5002\"]"), text.find("[host.\"https://127.0.0.1:5443\"]"));
        assert!(text.starts_with("server = \"https://127.0.0.1:5443\"\n\n"), "{text}");
        assert!(mirror_at.is_some() && mirror_at < origin_at && text.contains(&client), "{text}");
        let long = Layout::new(&Path::new("/tmp").join("x".repeat(100)));
        assert!(matches!(long.write(Path::new("/x"), &[]), Err(ContainerdError::SocketPathTooLong(_))));
    }
}
