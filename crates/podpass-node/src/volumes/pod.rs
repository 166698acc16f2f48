//! A pod's projected volumes on disk: `<root-dir>/pods/<pod uid>/volumes/kubernetes.io~projected/<volume>/`,
//! as the kubelet lays them out, each published with the [`AtomicWriter`].

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, DownwardAPIProjection, Pod, ProjectedVolumeSource, SecretProjection, Volume, VolumeProjection,
};
use thiserror::Error;

use super::atomic_writer::{AtomicWriteError, AtomicWriter};
use super::medium::{
    MountError, VolumeMedium, detach_pod_volumes, memory_backed, set_up_memory_volume, tmpfs_size, unmount_all_under,
};
use super::projected::{ProjectionError, ProjectionSources, project};
use crate::token::refresh_due_at;

/// The kubelet's directory name for projected volumes.
pub const PROJECTED_PLUGIN_DIR: &str = "kubernetes.io~projected";

/// A volume this module writes, as a projection, and the kubelet's plugin directory of its
/// kind: projected volumes as they are; configMap, secret and downwardAPI volumes as the
/// one source they are (their files, modes and `optional` mean the same).
pub fn as_projection(volume: &Volume) -> Option<(&'static str, ProjectedVolumeSource)> {
    if let Some(p) = &volume.projected {
        return Some((PROJECTED_PLUGIN_DIR, p.clone()));
    }
    let one = |source: VolumeProjection, mode: Option<i32>| ProjectedVolumeSource {
        sources: Some(vec![source]),
        default_mode: mode,
    };
    if let Some(c) = &volume.config_map {
        let source = ConfigMapProjection { name: c.name.clone(), items: c.items.clone(), optional: c.optional };
        return Some((
            "kubernetes.io~configmap",
            one(VolumeProjection { config_map: Some(source), ..Default::default() }, c.default_mode),
        ));
    }
    if let Some(s) = &volume.secret {
        let source = SecretProjection {
            name: s.secret_name.clone().unwrap_or_default(),
            items: s.items.clone(),
            optional: s.optional,
        };
        return Some((
            "kubernetes.io~secret",
            one(VolumeProjection { secret: Some(source), ..Default::default() }, s.default_mode),
        ));
    }
    if let Some(d) = &volume.downward_api {
        let source = DownwardAPIProjection { items: d.items.clone() };
        return Some((
            "kubernetes.io~downward-api",
            one(VolumeProjection { downward_api: Some(source), ..Default::default() }, d.default_mode),
        ));
    }
    None
}

/// A pod's volumes could not all be written; each failing volume is named.
#[derive(Debug, Error)]
pub enum PodVolumeError {
    /// The pod's UID or a volume name cannot be a directory name (the API server that sent
    /// the pod did not validate it; nothing is written outside the pod's directory).
    #[error("pod {pod}: {what} {value:?} is not a valid directory name")]
    UnsafeName {
        /// `namespace/name` of the pod.
        pod: String,
        /// `uid` or `volume name`.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// Sources of a volume failed.
    #[error("MountVolume.SetUp failed for volume {volume:?}: {source}")]
    Projection {
        /// The volume.
        volume: String,
        /// Why.
        source: ProjectionError,
    },
    /// Writing a volume failed.
    #[error("MountVolume.SetUp failed for volume {volume:?}: {source}")]
    Write {
        /// The volume.
        volume: String,
        /// Why.
        source: AtomicWriteError,
    },
    /// Mounting a volume's tmpfs failed.
    #[error("MountVolume.SetUp failed for volume {volume:?}: {source}")]
    Mount {
        /// The volume.
        volume: String,
        /// Why.
        source: MountError,
    },
    /// Unmounting a pod's volumes failed.
    #[error("UnmountVolume.TearDown failed: {0}")]
    Unmount(MountError),
    /// Removing a pod's directory failed.
    #[error("removing {path}: {source}")]
    Remove {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What a sync wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodVolumesReport {
    /// Volumes whose files changed.
    pub written: Vec<String>,
    /// Volumes already up to date.
    pub unchanged: Vec<String>,
    /// When the earliest token in them is due for refresh (Unix seconds): the next sync.
    pub next_refresh: Option<i64>,
}

/// A pod UID or volume name used as one directory name: a DNS-1123 label for volumes (API
/// validation), and for UIDs the characters of a UUID.
pub(crate) fn safe_segment(value: &str, uid: bool) -> bool {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (uid && c.is_ascii_uppercase());
    !value.is_empty() && value.len() <= 253 && value.chars().all(allowed) && !value.starts_with('-')
}

/// `<root>/pods/<uid>`.
pub fn pod_dir(root: &Path, pod_uid: &str) -> PathBuf {
    root.join("pods").join(pod_uid)
}

/// `<root>/pods/<uid>/volumes/<plugin>/<volume>`.
pub fn volume_dir(root: &Path, pod_uid: &str, plugin: &str, volume: &str) -> PathBuf {
    pod_dir(root, pod_uid).join("volumes").join(plugin).join(volume)
}

/// Writes every projected volume of `pod` under `root`; a volume whose payload is
/// unchanged is left as it is. Secret and projected volumes are tmpfs mounts under
/// [`VolumeMedium::Memory`] (plain directories with a warning, once, where this process
/// may not mount). All volumes are tried; the first failure is returned after.
pub async fn sync_pod_volumes(
    root: &Path,
    pod: &Pod,
    sources: &dyn ProjectionSources,
    jitter: i64,
    medium: VolumeMedium,
) -> Result<PodVolumesReport, Vec<PodVolumeError>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if !safe_segment(&uid, true) {
        return Err(vec![PodVolumeError::UnsafeName {
            pod: crate::PodRef::of(pod).to_string(),
            what: "uid",
            value: uid,
        }]);
    }
    let mut report = PodVolumesReport::default();
    let mut errors = Vec::new();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    for volume in volumes.into_iter().flatten() {
        let Some((plugin, projected)) = as_projection(volume) else { continue };
        let projected = &projected;
        if !safe_segment(&volume.name, false) {
            errors.push(PodVolumeError::UnsafeName {
                pod: crate::PodRef::of(pod).to_string(),
                what: "volume name",
                value: volume.name.clone(),
            });
            continue;
        }
        let projection = match project(pod, projected, sources).await {
            Ok(p) => p,
            Err(source) => {
                errors.push(PodVolumeError::Projection { volume: volume.name.clone(), source });
                continue;
            }
        };
        for (_, token) in &projection.tokens {
            if let Some(due) = refresh_due_at(token, jitter) {
                report.next_refresh = Some(report.next_refresh.map_or(due, |n: i64| n.min(due)));
            }
        }
        let dir = volume_dir(root, &uid, plugin, &volume.name);
        let mut payload = projection.payload;
        // SetVolumeOwnership: with an fsGroup every file is that group's and readable by it
        // (a token of mode 0600 becomes 0640).
        let fs_group = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()).and_then(|s| s.fs_group);
        if let Some(gid) = fs_group.and_then(|g| u32::try_from(g).ok()) {
            for file in payload.values_mut() {
                file.group = Some(gid);
                file.mode |= 0o040;
            }
        }
        let tmpfs = match medium {
            VolumeMedium::Memory { node_allocatable_memory } if memory_backed(plugin) => {
                Some(tmpfs_size(pod, node_allocatable_memory, None))
            }
            _ => None,
        };
        let name = volume.name.clone();
        let written = tokio::task::spawn_blocking(move || {
            if let Some(size) = tmpfs
                && let Err(source) = set_up_memory_volume(&dir, size)
            {
                return Err(PodVolumeError::Mount { volume: name, source });
            }
            AtomicWriter::new(&dir)
                .and_then(|w| w.write(&payload))
                .map_err(|source| PodVolumeError::Write { volume: name, source })
        })
        .await;
        match written {
            Ok(Ok(true)) => report.written.push(volume.name.clone()),
            Ok(Ok(false)) => report.unchanged.push(volume.name.clone()),
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(PodVolumeError::Write {
                volume: volume.name.clone(),
                source: AtomicWriteError::Io {
                    what: "writer task",
                    path: root.to_owned(),
                    source: std::io::Error::other(e),
                },
            }),
        }
    }
    if errors.is_empty() { Ok(report) } else { Err(errors) }
}

/// Removes a pod's directory and everything in it (absent is fine), its volumes' mounts
/// detached first.
pub async fn remove_pod_volumes(root: &Path, pod_uid: &str) -> Result<(), PodVolumeError> {
    if !safe_segment(pod_uid, true) {
        return Err(PodVolumeError::UnsafeName { pod: String::new(), what: "uid", value: pod_uid.to_owned() });
    }
    let dir = pod_dir(root, pod_uid);
    tokio::task::spawn_blocking(move || {
        let remove = |dir: &Path| match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        };
        // The subPath bind mounts first: they are what holds the volumes' files open.
        super::subpath::clean_sub_paths(&dir)
            .map_err(|source| PodVolumeError::Remove { path: dir.join(super::subpath::SUBPATHS_DIR), source })?;
        detach_pod_volumes(&dir).map_err(PodVolumeError::Unmount)?;
        match remove(&dir) {
            // Busy: a mount this agent did not make (or made at another path); the mount
            // table says which.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => {
                unmount_all_under(&dir).map_err(PodVolumeError::Unmount)?;
                remove(&dir)
            }
            other => other,
        }
        .map_err(|source| PodVolumeError::Remove { path: dir, source })
    })
    .await
    .unwrap_or_else(|e| Err(PodVolumeError::Remove { path: pod_dir(root, pod_uid), source: std::io::Error::other(e) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_map_secret_and_downward_api_volumes_are_projections_of_one_source() {
        let v: Volume = serde_json::from_value(serde_json::json!({"name": "s", "secret": {"secretName": "creds",
            "defaultMode": 256, "optional": true, "items": [{"key": "k", "path": "p"}]}}))
        .unwrap_or_default();
        let (plugin, p) = as_projection(&v).unwrap_or_default();
        assert_eq!(plugin, "kubernetes.io~secret");
        assert_eq!(p.default_mode, Some(256));
        let source = p.sources.unwrap_or_default()[0].secret.clone().unwrap_or_default();
        assert_eq!((source.name.as_str(), source.optional), ("creds", Some(true)));
        assert_eq!(source.items.unwrap_or_default()[0].path, "p");
        let cm: Volume = serde_json::from_value(serde_json::json!({"name": "c", "configMap": {"name": "settings"}}))
            .unwrap_or_default();
        assert_eq!(as_projection(&cm).map(|(p, _)| p), Some("kubernetes.io~configmap"));
        let empty: Volume =
            serde_json::from_value(serde_json::json!({"name": "e", "emptyDir": {}})).unwrap_or_default();
        assert!(as_projection(&empty).is_none());
    }
    use crate::token::{RequestedToken, TokenKey};
    use futures::future::BoxFuture;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use serde_json::json;

    struct Tokens;

    impl ProjectionSources for Tokens {
        fn config_map<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<ConfigMap>, crate::api::RequestError>> {
            Box::pin(async { Ok(None) })
        }
        fn secret<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<Secret>, crate::api::RequestError>> {
            Box::pin(async { Ok(None) })
        }
        fn token<'a>(&'a self, key: &'a TokenKey) -> BoxFuture<'a, Result<RequestedToken, crate::token::TokenError>> {
            Box::pin(async move {
                Ok(RequestedToken {
                    token: "jwt".into(),
                    expires_at: 10_000 + key.expiration_seconds,
                    expiration_seconds: Some(key.expiration_seconds),
                })
            })
        }
    }

    fn pod(uid: &str, volume: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "team", "uid": uid},
            "spec": {"containers": [], "volumes": [
                {"name": volume, "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}}]}},
                {"name": "other", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}},
                {"name": "scratch", "emptyDir": {}}]}}))
        .unwrap_or_default()
    }

    #[tokio::test]
    async fn volumes_land_in_the_kubelet_layout_and_the_next_refresh_is_the_earliest() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let _cleanup = super::super::UnmountOnDrop(dir.path().to_owned());
        let uid = "0d1f6b2e-0000-4000-8000-000000000001";
        let memory = VolumeMedium::Memory { node_allocatable_memory: 64 << 20 };
        let report = sync_pod_volumes(dir.path(), &pod(uid, "reg"), &Tokens, 0, memory)
            .await
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(report.written, ["reg", "other"]);
        // 600 s token issued at 10 000: due after 480 s
        assert_eq!(report.next_refresh, Some(10_481));
        let volume = dir.path().join(format!("pods/{uid}/volumes/kubernetes.io~projected/reg"));
        assert_eq!(std::fs::read_to_string(volume.join("token")).unwrap_or_default(), "jwt");
        let mounted = |p: &Path| super::super::medium::tests::mounts_at(p) > 0;
        // A test process allowed to mount: the token is on a tmpfs of its own.
        let probe = super::super::medium::set_up_tmpfs(&dir.path().join("probe"), None);
        let may_mount = !matches!(probe, Ok(super::super::TmpfsSetUp::NotPermitted(_)));
        assert_eq!(mounted(&volume), may_mount, "memory-backed exactly when this process may mount");
        let again = sync_pod_volumes(dir.path(), &pod(uid, "reg"), &Tokens, 0, memory)
            .await
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(again.unchanged, ["reg", "other"]);
        // a mount of another kind in the pod's directory (a memory emptyDir, say) is found
        // in the mount table when the directory cannot be removed
        let scratch = dir.path().join(format!("pods/{uid}/volumes/kubernetes.io~empty-dir/scratch"));
        if may_mount {
            super::super::medium::set_up_tmpfs(&scratch, None).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(scratch.join("f"), "x").unwrap_or_else(|e| panic!("{e}"));
        }
        remove_pod_volumes(dir.path(), uid).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(!mounted(&volume) && !mounted(&scratch));
        assert!(!dir.path().join(format!("pods/{uid}")).exists());
        remove_pod_volumes(dir.path(), uid).await.unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn names_from_the_api_never_leave_the_pod_directory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let errors =
            sync_pod_volumes(dir.path(), &pod("../../etc", "reg"), &Tokens, 0, VolumeMedium::Disk).await.unwrap_err();
        assert!(errors[0].to_string().contains(r#"uid "../../etc" is not a valid directory name"#), "{errors:?}");
        let errors =
            sync_pod_volumes(dir.path(), &pod("abc-1", "../../x"), &Tokens, 0, VolumeMedium::Disk).await.unwrap_err();
        assert_eq!(errors.len(), 1, "the other volume is still written: {errors:?}");
        assert!(errors[0].to_string().contains("volume name \"../../x\""));
        assert!(dir.path().join("pods/abc-1/volumes/kubernetes.io~projected/other/token").exists());
        assert!(!dir.path().join("x").exists());
        assert!(remove_pod_volumes(dir.path(), "..").await.is_err());
    }
}
