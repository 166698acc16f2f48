//! Pod volumes the node agent writes: projected volumes (service-account tokens, config
//! maps, secrets, downward API) published with the kubelet's AtomicWriter.

mod atomic_writer;
mod medium;
mod pod;
mod projected;
pub(crate) use projected::subscripted;
mod subpath;

pub use atomic_writer::{AtomicWriter, FileProjection};
pub use medium::{
    TmpfsSetUp, UnmountOnDrop, VolumeMedium, set_up_memory_volume, set_up_tmpfs, tmpfs_size, unmount_all_under,
};
pub(crate) use pod::safe_segment;
pub use pod::{PodVolumeError, as_projection, pod_dir, remove_pod_volumes, sync_pod_volumes, volume_dir};
pub use projected::ProjectionSources;
pub use subpath::{SubPath, SubPathError, prepare_sub_path};
