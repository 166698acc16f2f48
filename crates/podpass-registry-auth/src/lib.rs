//! Registry token exchange: any registry that speaks the Docker token protocol (the CNCF
//! distribution registry, Harbor, Quay, …) trusts a pod's own service-account token.
//!
//! - [`Config`] → [`Config::prepare`] → [`RegistryAuth::bind`] → [`Bound::serve`]: the
//!   `podpass registry-auth` service (`/token`, `/jwks`, `/healthz`, `/metrics`).
//! - Trust in each cluster's issuer ([`IssuerTrust`]: OIDC discovery and JWKS from the
//!   configured URL only, refreshed, fail closed), the [`Policy`] (deny by default, the
//!   grant is the intersection of what was asked and what is allowed), node binding
//!   ([`NodeBinding`]: a node-bound pod token only from its node), registry tokens
//!   ([`RegistryTokenSigner`]: what registry 2.8 verifies) and exchange tokens; optionally
//!   the issuing cluster's TokenReview ([`TokenReviewer`]: the bound pod still exists).
//!
//! The kubelet plugin that calls it is its own crate, `podpass-credential-provider`, so
//! that what the kubelet execs per pull links none of this.

mod config;
mod exchange_token;
pub mod fetch;
mod glob;
mod http;
mod identity;
mod metrics;
mod node_binding;
mod policy;
mod registry_token;
mod review;
mod revocations;
mod scope;
mod service;
mod trust;

pub use config::{Bound, Config, RegistryAuth, RunError, TokenReviewKubeconfig};
pub use fetch::{DocumentFetcher, FetchError};
#[doc(hidden)]
pub use http::parse_for_fuzzing;
pub use identity::{Credential, Identity};
pub use metrics::RegistryAuthMetrics;
pub use node_binding::{NodeBinding, NodeBindingError, NodeCheck, NodeProof};
pub use policy::{Policy, PolicyError, Subject};
pub use registry_token::{RegistryToken, RegistryTokenSigner, SignError};
pub use review::{REVIEW_CACHE_TTL, ReviewConfigError, ReviewError, TokenReviewer};
pub use scope::{Scope, ScopeError};
pub use service::{ExchangeRequest, Grant, Refusal, TokenAnswer, TokenService};
pub use trust::{IssuerTrust, RefreshError, TrustError, TrustTimings, discover_keys};
