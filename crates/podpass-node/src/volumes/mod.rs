//! Pod volumes the node agent writes: projected volumes (service-account tokens, config
//! maps, secrets, downward API) published with the kubelet's AtomicWriter.

mod atomic_writer;
mod projected;

pub use atomic_writer::{AtomicWriteError, AtomicWriter, FileProjection, validate_path};
pub use projected::{DEFAULT_TOKEN_EXPIRATION_SECONDS, Projection, ProjectionError, ProjectionSources, project};
