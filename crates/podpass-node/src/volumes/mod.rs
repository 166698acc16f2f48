//! Pod volumes the node agent writes: projected volumes (service-account tokens, config
//! maps, secrets, downward API) published with the kubelet's AtomicWriter.

mod atomic_writer;
mod medium;
mod pod;
mod projected;
mod subpath;

pub use atomic_writer::{AtomicWriteError, AtomicWriter, FileProjection, validate_path};
pub use medium::{
    MountError, TmpfsSetUp, UnmountOnDrop, VolumeMedium, detach_pod_volumes, memory_backed, set_up_memory_volume,
    set_up_tmpfs, tmpfs_size, unmount_all_under,
};
pub(crate) use pod::safe_segment;
pub use pod::{
    PROJECTED_PLUGIN_DIR, PodVolumeError, PodVolumesReport, as_projection, pod_dir, projected_dir, remove_pod_volumes,
    sync_pod_volumes, volume_dir,
};
pub use projected::{DEFAULT_TOKEN_EXPIRATION_SECONDS, Projection, ProjectionError, ProjectionSources, project};
pub use subpath::{SUBPATHS_DIR, SubPath, SubPathError, clean_sub_paths, prepare_sub_path, sub_path_target};
