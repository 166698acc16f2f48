//! `podpass apiserver`: the service-account slice of kube-apiserver, split along its seams:
//! [`config`] (flags, validation, loading — nothing is bound on bad configuration),
//! [`startup`] (bind, derive, reconcile, serve), [`serve`] (TLS accept loop with timeouts
//! and a connection cap), [`routing`] (the request pipeline), [`authn`], [`authz`],
//! [`audit`] and [`metrics`], and the resource API under `rest`.

mod audit;
mod authn;
pub(crate) mod authz;
mod config;
mod event_ttl;
mod inflight;
mod informer;
mod kubernetes_service;
mod leader;
mod lookup;
mod metrics;
pub(crate) mod rest;
mod routing;
/// The accept loop and its bounds, shared with every podpass server.
mod serve {
    pub use podpass_serve::{ServeLimits, accept_loop, spawn_named};
}
mod revoked_tokens;
mod service_ips;
mod startup;
mod status;
mod token_authn;
mod token_cache;
mod token_revocation;

use std::sync::Arc;

use podpass_token::{Authenticator, TokenFeatures, TokenGenerator};

pub(crate) use self::authn::User;
pub use self::config::{ApiServerConfig, Prepared, RandomError, StartError, random_token};
pub(crate) use self::lookup::StoreLookup;
pub use self::startup::{Bound, kubeconfig};
/// How long a successful token authentication is remembered by default (upstream's
/// `TokenSuccessCacheTTL`).
pub use self::token_cache::DEFAULT_SUCCESS_TTL as DEFAULT_TOKEN_SUCCESS_CACHE_TTL;
use crate::store::Store;
use crate::token_file::TokenFile;

/// The minor version of the Kubernetes release whose behaviour podpass matches, as a
/// literal (for `concat!`, e.g. in `podpass --version`).
#[macro_export]
macro_rules! kube_minor {
    () => {
        "34"
    };
}

/// The Kubernetes version podpass's API matches.
pub const KUBE_MINOR: &str = kube_minor!();

/// Watches one user may hold open at once (a kubelet needs a handful; controllers tens).
const MAX_WATCHES_PER_USER: usize = 200;

/// Shared request state.
pub(crate) struct AppState {
    /// `--service-cluster-ip-range`.
    service_ips: service_ips::ServiceIpRange,
    store: Arc<dyn Store>,
    rbac: Arc<informer::Informer<authz::rbac_index::RbacIndex>>,
    nodes: Arc<informer::Informer<authz::node_graph::NodeGraph>>,
    authenticator: Authenticator,
    legacy_authenticator: podpass_token::LegacyAuthenticator,
    generator: TokenGenerator,
    features: TokenFeatures,
    api_audiences: Vec<String>,
    extend_expiration: bool,
    /// `--enable-bootstrap-token-auth`.
    bootstrap_token_auth: bool,
    max_token_expiration: Option<i64>,
    token_request_uid_validation: bool,
    authorization_modes: Vec<authz::AuthorizationMode>,
    node_audience_restriction: bool,
    /// Pod Security admission's defaults and exemptions.
    pod_security: rest::admission::pod_security::PodSecurityConfig,
    /// Quota admission's per-namespace locks.
    quota_locks: rest::admission::quota::QuotaLocks,
    /// Requests in flight per identity.
    inflight: inflight::InFlight,
    token_file: TokenFile,
    oidc_config: Vec<u8>,
    jwks: Vec<u8>,
    server_url: String,
    audit: Option<audit::AuditLog>,
    metrics: metrics::ApiServerMetrics,
    token_cache: token_cache::TokenCache,
    /// The revoked `jti`s, kept by a watch.
    revoked: revoked_tokens::Revocations,
    watches: rest::watch::WatchLimiter,
    /// Lists kept for their continue tokens.
    list_snapshots: rest::pagination::Snapshots,
    request_timeout: std::time::Duration,
    min_request_timeout: std::time::Duration,
    /// The HTTPS client to nodes (pods/log), with the kubelet client certificate; `None`
    /// without one.
    kubelet_client: Option<reqwest::Client>,
    /// Exec and attach streams open now, per user.
    streams: rest::pod_stream::StreamCounts,
}

impl AppState {
    /// What the authorizers read.
    pub(crate) fn authz(&self) -> authz::Sources<'_> {
        authz::Sources { store: self.store.as_ref(), rbac: self.rbac.view(), nodes: self.nodes.view() }
    }

    /// Counts a service-account token use (pkg/serviceaccount metrics).
    pub(crate) fn count_token_use(&self, a: &podpass_token::Authenticated) {
        if a.legacy {
            self.metrics.legacy_tokens.inc();
        }
        match a.freshness {
            podpass_token::Freshness::Valid => {
                self.metrics.valid_tokens.inc();
            }
            podpass_token::Freshness::Stale(_) => {
                self.metrics.stale_tokens.inc();
            }
            podpass_token::Freshness::NotTracked => {}
        }
        if let Some(kind) = a.verified_bound {
            self.metrics
                .bound_object_verified
                .get_or_create(&metrics::BoundObjectLabels { bound_object_kind: kind.kind().into() })
                .inc();
        }
        if a.pod_node_ref {
            self.metrics.pod_node_ref_verified.inc();
        }
    }
}
