//! The podpass control plane: the service-account slice of kube-apiserver.
//!
//! Today: [`store`], the object store (embedded on `redb`; etcd arrives with the RBAC
//! issue). The REST layer, token issuance and review build on it.

pub mod field;
pub mod files;
pub mod pki;
pub mod server;
pub mod store;
pub mod time;
pub mod token_file;

/// Decodes an API request body as the REST layer does before anything else sees it
/// (content type, JSON or kubectl's protobuf, nesting limit); for fuzzing and tools.
pub use server::rest::parse_body as decode_request_body;
