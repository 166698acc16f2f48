//! The pods bound to this node: watched (kube-rs watcher, which relists after a 410 and
//! backs off while the API server is away), their projected volumes written and rewritten
//! when a token is due, and on deletion their volumes and tokens dropped before the deletion
//! is confirmed to the API (as a kubelet confirms once a pod is torn down).
//!
//! Pods are handled one at a time in watch order; images, status and events come next.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;

use crate::api::KubeTokenFetcher;
use crate::credential::provider::BoxFuture;
use crate::token::{IssuedToken, TokenKey, TokenManager, now_unix};
use crate::volumes::{ProjectionSources, remove_pod_volumes, sync_pod_volumes};

/// Config maps, secrets and tokens for projected volumes, read from the API as the node.
pub struct ApiSources {
    client: kube::Client,
    tokens: TokenManager<KubeTokenFetcher>,
}

impl ApiSources {
    /// Reads through `client`; tokens through a token manager of its own.
    pub fn new(client: kube::Client) -> Self {
        Self { tokens: TokenManager::new(KubeTokenFetcher::new(client.clone())), client }
    }

    /// The token manager (garbage collection, pod deletion).
    pub fn tokens(&self) -> &TokenManager<KubeTokenFetcher> {
        &self.tokens
    }
}

fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

impl ProjectionSources for ApiSources {
    fn config_map<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, Result<Option<ConfigMap>, String>> {
        Box::pin(async move {
            Api::<ConfigMap>::namespaced(self.client.clone(), namespace).get_opt(name).await.map_err(|e| message(&e))
        })
    }

    fn secret<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, Result<Option<Secret>, String>> {
        Box::pin(async move {
            Api::<Secret>::namespaced(self.client.clone(), namespace).get_opt(name).await.map_err(|e| message(&e))
        })
    }

    fn token<'a>(&'a self, key: &'a TokenKey) -> BoxFuture<'a, Result<IssuedToken, String>> {
        Box::pin(async move { self.tokens.get(key, now_unix()).await.map_err(|e| e.to_string()) })
    }
}

fn label(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The pod loop's state: the pods seen, and when each must be synced again.
pub struct PodLoop {
    client: kube::Client,
    node: String,
    root: PathBuf,
    sources: Arc<ApiSources>,
    pods: HashMap<String, Pod>,
    due: BTreeMap<String, i64>,
}

/// How often due syncs are looked for (token refreshes are due to the second).
const TICK: std::time::Duration = std::time::Duration::from_secs(1);
/// A sync that failed is retried after this long.
const RETRY_SECONDS: i64 = 10;

impl PodLoop {
    /// The loop for `node`, writing under `root`.
    pub fn new(client: kube::Client, node: &str, root: PathBuf) -> Self {
        let sources = Arc::new(ApiSources::new(client.clone()));
        Self { client, node: node.to_owned(), root, sources, pods: HashMap::new(), due: BTreeMap::new() }
    }

    /// Watches and syncs until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let mut events = watcher(Api::<Pod>::all(self.client.clone()), config).default_backoff().boxed();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut gc = tokio::time::interval(std::time::Duration::from_secs(60));
        let mut listed: Option<HashSet<String>> = None;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Init)) => listed = Some(HashSet::new()),
                    Some(Ok(watcher::Event::InitApply(pod))) => {
                        if let (Some(set), Some(uid)) = (listed.as_mut(), pod.metadata.uid.clone()) {
                            set.insert(uid);
                        }
                        self.apply(pod).await;
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        // Pods gone while the watch was down were deleted.
                        let seen = listed.take().unwrap_or_default();
                        let gone: Vec<Pod> =
                            self.pods.iter().filter(|(uid, _)| !seen.contains(*uid)).map(|(_, p)| p.clone()).collect();
                        for pod in gone {
                            self.forget(&pod).await;
                        }
                    }
                    Some(Ok(watcher::Event::Apply(pod))) => self.apply(pod).await,
                    Some(Ok(watcher::Event::Delete(pod))) => self.forget(&pod).await,
                    Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying with back-off"),
                    None => return,
                },
                _ = tick.tick() => self.sync_due().await,
                _ = gc.tick() => self.sources.tokens().collect_garbage(now_unix()),
            }
        }
    }

    async fn apply(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        if pod.metadata.deletion_timestamp.is_some() {
            self.tear_down(&pod).await;
            return;
        }
        self.pods.insert(uid.clone(), pod);
        self.due.insert(uid, 0);
        self.sync_due().await;
    }

    async fn sync_due(&mut self) {
        let now = now_unix();
        let due: Vec<String> = self.due.iter().filter(|(_, at)| **at <= now).map(|(uid, _)| uid.clone()).collect();
        for uid in due {
            let Some(pod) = self.pods.get(&uid).cloned() else {
                self.due.remove(&uid);
                continue;
            };
            let jitter = crate::token::random_jitter();
            match sync_pod_volumes(&self.root, &pod, self.sources.as_ref(), jitter).await {
                Ok(report) => {
                    if !report.written.is_empty() {
                        tracing::info!(pod = %label(&pod), volumes = ?report.written, "volumes written");
                    }
                    match report.next_refresh {
                        Some(at) => self.due.insert(uid, at),
                        None => self.due.remove(&uid),
                    };
                }
                Err(errors) => {
                    for e in &errors {
                        tracing::warn!(pod = %label(&pod), error = %e, "volume setup failed; retrying");
                    }
                    self.due.insert(uid, now + RETRY_SECONDS);
                }
            }
        }
    }

    /// A pod being deleted: volumes and tokens go, then the deletion is confirmed.
    async fn tear_down(&mut self, pod: &Pod) {
        self.forget(pod).await;
        let (Some(ns), Some(name), Some(uid)) =
            (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref(), pod.metadata.uid.clone())
        else {
            return;
        };
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::default()
        };
        match Api::<Pod>::namespaced(self.client.clone(), ns).delete(name, &params).await {
            Ok(_) => tracing::info!(pod = %label(pod), "pod torn down; deletion confirmed"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => tracing::warn!(pod = %label(pod), error = %message(&e), "confirming the deletion failed"),
        }
    }

    /// Drops what the agent holds for a pod.
    async fn forget(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        self.pods.remove(&uid);
        self.due.remove(&uid);
        self.sources.tokens().delete_for_pod(&uid);
        if let Err(e) = remove_pod_volumes(&self.root, &uid).await {
            tracing::warn!(pod = %label(pod), error = %e, "removing volumes failed");
        }
    }
}
