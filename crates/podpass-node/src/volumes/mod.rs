//! Pod volumes the node agent writes: today the kubelet's AtomicWriter, on which the
//! projected service-account token volumes are built.

mod atomic_writer;

pub use atomic_writer::{AtomicWriteError, AtomicWriter, FileProjection, validate_path};
