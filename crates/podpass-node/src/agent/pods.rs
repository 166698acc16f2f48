//! The pods bound to this node: watched (kube-rs watcher, which relists after a 410 and
//! backs off while the API server is away) and handed to one worker each
//! ([`super::worker`]), at most [`MAX_CONCURRENT_SYNCS`] syncing at once. A pod with a
//! deletionTimestamp, deleted, or gone at a relist is torn down by its worker.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::admission;
use super::worker::{Shared, Work};

/// Pods synced at once (bounded concurrency; pulls are bounded again by the image manager).
pub const MAX_CONCURRENT_SYNCS: usize = 16;
/// How long a stopping agent waits for its workers to finish what they are writing.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The pod loop: the watch, and a worker per pod.
pub(crate) struct PodLoop {
    shared: Arc<Shared>,
    node: String,
    workers: HashMap<String, watch::Sender<Work>>,
    tasks: JoinSet<()>,
    /// `maxPods`: unfinished pods run at once.
    max_pods: u32,
    /// Pods refused admission (their status posted), until they go.
    rejected: HashSet<String>,
    /// Pods whose worker must act now (the eviction manager chose them).
    wake: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// The first listing is applied: pods arriving since are admitted under the node's
    /// pressure too (those of the listing were admitted before the agent started, as a
    /// restarted kubelet admits them before its eviction manager has observed anything).
    listed_once: bool,
}

impl PodLoop {
    pub(crate) fn new(
        shared: Arc<Shared>,
        node: &str,
        max_pods: u32,
        wake: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Self {
        Self {
            shared,
            node: node.to_owned(),
            workers: HashMap::new(),
            tasks: JoinSet::new(),
            max_pods,
            rejected: HashSet::new(),
            wake,
            listed_once: false,
        }
    }

    /// Watches and dispatches until `shutdown` completes, then lets the workers finish
    /// their current step (bounded by a grace period).
    pub(crate) async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let mut events = watcher(Api::<Pod>::all(self.shared.client.clone()), config).default_backoff().boxed();
        let mut gc = tokio::time::interval(std::time::Duration::from_secs(60));
        // The initial listing, applied whole in creation order (kubelet:
        // HandlePodAdditions sorts by creation time) so admission keeps the older pods.
        let mut listed: Option<Vec<Pod>> = None;
        let mut ticks: u64 = 0;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(uid) = self.wake.recv() => {
                    // The worker sees its work again and looks at its pending eviction.
                    if let Some(tx) = self.workers.get(&uid) {
                        tx.send_modify(|_| {});
                    }
                }
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Init)) => listed = Some(Vec::new()),
                    Some(Ok(watcher::Event::InitApply(pod))) => match listed.as_mut() {
                        Some(list) => list.push(pod),
                        None => self.apply(pod),
                    },
                    Some(Ok(watcher::Event::InitDone)) => {
                        let mut list = listed.take().unwrap_or_default();
                        list.sort_by(|a, b| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp));
                        let seen: HashSet<String> = list.iter().filter_map(|p| p.metadata.uid.clone()).collect();
                        for pod in list {
                            self.apply(pod);
                        }
                        self.listed_once = true;
                        // Pods gone while the watch was down were deleted.
                        let gone: Vec<String> = self.workers.keys().filter(|uid| !seen.contains(*uid)).cloned().collect();
                        for uid in gone {
                            self.tear_down_gone(&uid);
                        }
                        // kubelet cleanupOrphanedPodDirs: directories of pods that went
                        // while no agent was watching (a restart) are removed too.
                        let known: HashSet<String> = seen.into_iter().chain(self.workers.keys().cloned()).collect();
                        podpass_serve::spawn_named("runtime-orphans", remove_runtime_orphans(self.shared.clone(), known.clone()));
                        podpass_serve::spawn_named("orphaned-pod-dirs", remove_orphans(self.shared.root.clone(), known, std::time::SystemTime::now()));
                    }
                    Some(Ok(watcher::Event::Apply(pod))) => self.apply(pod),
                    Some(Ok(watcher::Event::Delete(pod))) => {
                        self.shared.pods.remove(&pod);
                        if let Some(uid) = pod.metadata.uid.clone() {
                            self.rejected.remove(&uid);
                            self.send(&uid, Work::TearDown { pod: Box::new(pod), confirm: false });
                        }
                    }
                    Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying with back-off"),
                    None => break,
                },
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
                _ = gc.tick() => {
                    self.workers.retain(|_, tx| !tx.is_closed());
                    // Records are pruned every fifth minute (the kubelet's image GC period).
                    ticks += 1;
                    // Off the loop: listing a runtime's images may take a while.
                    podpass_serve::spawn_named("housekeeping", super::worker::housekeeping(self.shared.clone(), ticks.is_multiple_of(5)));
                }
            }
        }
        self.workers.clear();
        if tokio::time::timeout(STOP_GRACE, async { while self.tasks.join_next().await.is_some() {} }).await.is_err() {
            tracing::warn!("pod workers still busy after the stop grace period; stopping them");
            self.tasks.abort_all();
        }
    }

    /// Hands `work` to the pod's worker, starting one when there is none. A worker tearing
    /// down keeps its entry until it ends (swept on the housekeeping tick), so later events
    /// of the going pod reach it instead of a second worker tearing down the same
    /// containers at the same time.
    fn send(&mut self, uid: &str, work: Work) {
        match self.workers.get(uid) {
            Some(tx) if tx.send(work.clone()).is_ok() => {}
            _ => {
                // Every line the worker logs carries the pod it works for.
                let pod = match &work {
                    Work::Sync(pod) | Work::TearDown { pod, .. } => pod,
                };
                let span = tracing::info_span!(
                    "pod",
                    namespace = pod.metadata.namespace.as_deref().unwrap_or(""),
                    pod = pod.metadata.name.as_deref().unwrap_or(""),
                    uid = %uid,
                );
                let (tx, rx) = watch::channel(work);
                self.tasks.spawn(super::worker::run(self.shared.clone(), rx).instrument(span));
                self.workers.insert(uid.to_owned(), tx);
            }
        }
    }

    fn apply(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        tracing::debug!(pod = %crate::PodRef::of(&pod), "pod event");
        self.shared.pods.upsert(&pod);
        if pod.metadata.deletion_timestamp.is_some() {
            self.rejected.remove(&uid);
            self.send(&uid, Work::TearDown { pod: Box::new(pod), confirm: true });
            return;
        }
        if !self.workers.contains_key(&uid) {
            // A pod new to this agent: one that already finished is not run again, and
            // one past maxPods is refused.
            if admission::is_terminal(&pod) || self.rejected.contains(&uid) {
                return;
            }
            let pressure =
                if self.listed_once { *self.shared.pressure.borrow() } else { super::pressure::Pressure::default() };
            let admitted = admission::admit_under_pressure(&pod, pressure)
                .and_then(|()| admission::admit(self.active(), self.max_pods));
            if let Err(rejection) = admitted {
                tracing::info!(pod = %crate::PodRef::of(&pod), reason = rejection.reason, message = %rejection.message, "pod rejected");
                self.rejected.insert(uid);
                let shared = self.shared.clone();
                self.tasks.spawn(async move { admission::reject(&shared, &pod, &rejection).await });
                return;
            }
        }
        self.send(&uid, Work::Sync(Box::new(pod)));
    }

    /// Admitted pods not finished (their workers still at work, tearing down included).
    fn active(&self) -> usize {
        self.workers
            .values()
            .filter(|tx| {
                !tx.is_closed()
                    && match &*tx.borrow() {
                        Work::Sync(pod) => !admission::is_terminal(pod),
                        Work::TearDown { .. } => true,
                    }
            })
            .count()
    }

    fn tear_down_gone(&mut self, uid: &str) {
        let Some(tx) = self.workers.get(uid) else { return };
        let pod = match &*tx.borrow() {
            Work::Sync(p) | Work::TearDown { pod: p, .. } => p.clone(),
        };
        self.shared.pods.remove(&pod);
        self.send(uid, Work::TearDown { pod, confirm: false });
    }
}

/// Stops and removes what the runtime holds of pods not in `known` (deleted while the
/// agent was down); the pods listed are the node's, so nothing of another's is touched.
async fn remove_runtime_orphans(shared: Arc<Shared>, known: HashSet<String>) {
    let Some(rt) = &shared.runtime else { return };
    let uids = match super::containers::pod_uids(rt).await {
        Ok(uids) => uids,
        Err(e) => return tracing::warn!(error = %e, "listing the runtime's sandboxes failed"),
    };
    for uid in uids.into_iter().filter(|u| !known.contains(u)) {
        match super::containers::tear_down(rt, &uid, 0).await {
            Ok(()) => tracing::info!(pod_uid = %uid, "containers of a pod deleted while the agent was down removed"),
            Err(e) => tracing::warn!(pod_uid = %uid, error = %e, "removing an orphaned pod's containers failed"),
        }
    }
}

/// Removes `<root>/pods/<uid>` and `<root>/logs/pods/<ns>_<name>_<uid>` of every pod not in
/// `known` whose directory is older than `listed_at` (a pod that arrived after the listing
/// has a newer one): kubelet `cleanupOrphanedPodDirs` and the container GC's log sweep.
async fn remove_orphans(root: std::path::PathBuf, known: HashSet<String>, listed_at: std::time::SystemTime) {
    let logs = root.join("logs/pods");
    let (known_logs, logs_at) = (known.clone(), listed_at);
    let removed =
        tokio::task::spawn_blocking(move || super::containers::remove_orphaned_logs(&logs, &known_logs, logs_at))
            .await
            .unwrap_or_default();
    if removed > 0 {
        tracing::info!(directories = removed, "log directories of deleted pods removed");
    }
    let dir = root.join("pods");
    let listed = tokio::task::spawn_blocking(move || -> Vec<String> {
        std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < listed_at))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    })
    .await
    .unwrap_or_default();
    for uid in listed.into_iter().filter(|u| !known.contains(u)) {
        match crate::volumes::remove_pod_volumes(&root, &uid).await {
            Ok(()) => tracing::info!(pod_uid = %uid, "orphaned pod directory removed"),
            Err(e) => tracing::warn!(pod_uid = %uid, error = %e, "removing an orphaned pod directory failed"),
        }
    }
}
