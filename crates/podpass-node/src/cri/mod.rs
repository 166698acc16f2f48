//! CRI (k8s.io/cri-api `runtime.v1`), once: the connection to the runtime and the messages
//! of both services, hand-written with upstream's field numbers. The image service
//! (`images`) and the runtime service (`runtime`) are clients of this module.

mod channel;
mod image_api;
mod runtime_api;

pub(crate) use channel::{CallError, connect, unary};
pub use image_api::*;
pub use runtime_api::*;
