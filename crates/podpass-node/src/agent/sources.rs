//! What a node's projected volumes and container environments read from the API: config
//! maps and secrets through one watch per object ([`ObjectCache`]), service-account tokens
//! through the node's one token manager. Shared by the pod workers (`worker`) and the pod
//! loop (`pods`), depending on neither.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

use super::object_cache::ObjectCache;
use crate::api::KubeTokenFetcher;
use crate::token::{RequestedToken, TokenKey, TokenManager, now_unix};
use crate::volumes::ProjectionSources;

/// Config maps, secrets and tokens for projected volumes, read from the API as the node:
/// objects from per-object watches ([`ObjectCache`]), tokens through the token manager.
pub struct ApiSources {
    tokens: Arc<TokenManager<KubeTokenFetcher>>,
    config_maps: ObjectCache<ConfigMap>,
    secrets: ObjectCache<Secret>,
}

impl ApiSources {
    /// Reads through `client`; tokens through `tokens`, the node's one token manager (the
    /// credential providers' tokens come from it too, as the kubelet's).
    pub fn new(client: kube::Client, tokens: Arc<TokenManager<KubeTokenFetcher>>) -> Self {
        Self {
            tokens,
            config_maps: ObjectCache::new(client.clone(), |c: &ConfigMap| c.immutable == Some(true)),
            secrets: ObjectCache::new(client, |s: &Secret| s.immutable == Some(true)),
        }
    }

    /// The token manager (garbage collection, pod deletion).
    pub fn tokens(&self) -> &TokenManager<KubeTokenFetcher> {
        &self.tokens
    }

    /// A future that completes when a config map or secret a volume of `pod` reads changes
    /// (pending forever when its volumes read none); `None` when one of them cannot be
    /// watched ([`super::object_cache::MAX_WATCHED`]), so the pod must resync on a timer.
    /// Taken before a sync, it misses no change that sync did not see.
    pub fn changes(&self, pod: &Pod) -> Option<BoxFuture<'static, ()>> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut waits = Vec::new();
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some((_, projected)) = crate::volumes::as_projection(volume) else { continue };
            for source in projected.sources.iter().flatten() {
                if let Some(c) = &source.config_map {
                    waits.push(self.config_maps.changes(namespace, &c.name)?);
                }
                if let Some(s) = &source.secret {
                    waits.push(self.secrets.changes(namespace, &s.name)?);
                }
            }
        }
        if waits.is_empty() {
            return Some(Box::pin(std::future::pending()));
        }
        Some(Box::pin(async move {
            futures::future::select_all(waits).await;
        }))
    }

    /// Stops the object watches no pod read for a while; answers how many are left.
    pub fn recycle_idle_watches(&self) -> usize {
        self.config_maps.recycle_idle() + self.secrets.recycle_idle()
    }
}

impl ProjectionSources for ApiSources {
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConfigMap>, crate::api::RequestError>> {
        Box::pin(self.config_maps.get(namespace, name))
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, crate::api::RequestError>> {
        Box::pin(self.secrets.get(namespace, name))
    }

    fn token<'a>(&'a self, key: &'a TokenKey) -> BoxFuture<'a, Result<RequestedToken, crate::token::TokenError>> {
        Box::pin(async move { self.tokens.get(key, now_unix()).await })
    }
}
