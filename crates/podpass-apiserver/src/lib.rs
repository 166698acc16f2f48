//! The podpass control plane: the service-account slice of kube-apiserver.
//!
//! - [`ApiServerConfig`] (the flags of `podpass apiserver`, named as kube-apiserver's) →
//!   [`ApiServerConfig::prepare`] (every problem at once) → [`Prepared::bind`] (store
//!   connected, port bound, start-up reconcilers run) → [`Bound::serve`].
//! - What it serves: ServiceAccounts, Pods, Nodes, Secrets, ConfigMaps, Namespaces, Events,
//!   Leases and RBAC objects; TokenRequest (bound, audience-scoped tokens with node claims
//!   and `jti`), TokenReview (with bound-object checks), SubjectAccessReview, OIDC discovery
//!   and JWKS; authorization by RBAC (with escalation checks) and the Node authorizer,
//!   NodeRestriction admission (with the audience restriction), an audit log.
//! - Objects live in `podpass-store` (embedded on `redb` or etcd v3, with a watch cache).
//!
//! The modules are private; this list is the crate's interface.

use podpass_api::field;
mod files;
mod pki;
mod server;
use podpass_store as store;
mod time;
mod token_file;

pub use files::{WriteError, write_atomic};
pub use pki::{CertificateRequest, CertificateUse, PkiError, issue_certificate};
pub use server::{
    ApiServerConfig, Bound, DEFAULT_TOKEN_SUCCESS_CACHE_TTL, KUBE_MINOR, Prepared, RandomError, StartError, kubeconfig,
    random_token,
};
pub use time::parse_rfc3339;

/// Decodes an API request body as the REST layer does before anything else sees it
/// (content type, JSON or kubectl's protobuf, nesting limit). For the fuzz targets only
/// (feature `fuzzing`): not part of the crate's interface.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use server::rest::parse_body as decode_request_body;

/// A server-side apply of a configuration onto an object. For the fuzz targets only.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use server::rest::apply::apply_configuration;

/// Continue tokens of paged lists, as the REST layer reads and writes them. For the fuzz
/// targets only.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use server::rest::{decode_continue_token, encode_continue_token};
