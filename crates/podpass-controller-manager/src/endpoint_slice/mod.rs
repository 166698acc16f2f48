//! The EndpointSlice controller (`pkg/controller/endpointslice`), on kube-runtime's
//! Controller: each Service with a selector gets the IPv4 slices of its backends
//! ([`plan`]), owned by the Service (the garbage collector removes them with it), woken by
//! the Service, its slices and its namespace's pods. Writes are the controller's own
//! (`system:serviceaccount:kube-system:endpointslice-controller`).
//!
//! Its slice cache lags its own creates; as upstream's endpoint-slice tracker, a Service
//! whose last created slices the cache has not shown yet is not synced again until it has
//! (or five minutes passed), so a slice is never created twice.

pub(crate) mod plan;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
use crate::service_pods;
pub use crate::sync_error::SyncError;

/// The controller's name and service account.
pub const NAME: &str = "endpointslice-controller";
/// `--concurrent-service-endpoint-syncs`' default.
const CONCURRENCY: u16 = 5;
/// Created slices the cache has not shown within this long are no longer waited for.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);
const EXPECTATIONS_RETRY: Duration = Duration::from_millis(500);

struct Context {
    credentials: Credentials,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
    /// Slices created by the last sync of a Service (by UID), not yet in the cache.
    created: Mutex<HashMap<String, (HashSet<String>, Instant)>>,
    ready: tokio::sync::OnceCell<bool>,
}

impl Context {
    fn satisfied(&self, uid: &str, namespace: &str) -> bool {
        let mut all = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((names, at)) = all.get(uid) else { return true };
        let seen = names.iter().all(|n| self.slices.get(&ObjectRef::new(n).within(namespace)).is_some());
        if seen || at.elapsed() > EXPECTATIONS_TIMEOUT {
            all.remove(uid);
            return true;
        }
        false
    }
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let pod_events = reflector::reflector(
        pod_writer,
        watcher(Api::<Pod>::all(root.clone()), watcher::Config::default()).default_backoff(),
    )
    .touched_objects();
    let (slices, slice_writer) = reflector::store::<EndpointSlice>();
    let managed = watcher::Config::default().labels(&format!("{}={}", plan::MANAGED_BY.0, plan::MANAGED_BY.1));
    let slice_events =
        reflector::reflector(slice_writer, watcher(Api::<EndpointSlice>::all(root.clone()), managed).default_backoff())
            .touched_objects();
    let controller = Controller::new(Api::<Service>::all(root), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let services = controller.store();
    let context =
        Arc::new(Context { credentials, pods, slices, created: Mutex::default(), ready: tokio::sync::OnceCell::new() });
    controller
        .watches_stream(pod_events, move |pod| {
            service_pods::services_in(&pod.namespace().unwrap_or_default(), &services)
        })
        .watches_stream(slice_events, |slice| {
            let service = slice.labels().get(plan::SERVICE_NAME)?;
            Some(ObjectRef::<Service>::new(service).within(&slice.namespace().unwrap_or_default()))
        })
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "endpointslice sync");
            }
        })
        .await;
}

fn error_policy(_svc: Arc<Service>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "endpointslice sync failed; retrying");
    Action::requeue(if error.is_conflict() { Duration::from_millis(200) } else { Duration::from_secs(5) })
}

async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, service = %format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any()));
    tracing::Instrument::instrument(sync(svc, ctx), span).await
}

async fn sync(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx
        .ready
        .get_or_init(|| async {
            ctx.pods.wait_until_ready().await.is_ok() && ctx.slices.wait_until_ready().await.is_ok()
        })
        .await;
    if !*ready {
        return Err(SyncError::CacheGone("pods"));
    }
    let spec = svc.spec.clone().unwrap_or_default();
    // Without a selector the slices are their user's (or mirrored); a deleted Service's
    // slices go with it, by their owner reference.
    if spec.selector.as_ref().is_none_or(BTreeMap::is_empty) || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = svc.namespace().unwrap_or_default();
    let uid = svc.metadata.uid.clone().unwrap_or_default();
    if !ctx.satisfied(&uid, &namespace) {
        return Ok(Action::requeue(EXPECTATIONS_RETRY));
    }
    let pod_state = ctx.pods.state();
    let pods: Vec<&Pod> =
        pod_state.iter().filter(|p| p.namespace().as_deref() == Some(namespace.as_str())).map(|p| p.as_ref()).collect();
    let desired = plan::desired(&svc, &service_pods::backends(&svc, &pods, true));
    let name = svc.name_any();
    let existing: Vec<EndpointSlice> = ctx
        .slices
        .state()
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|s| s.labels().get(plan::SERVICE_NAME) == Some(&name))
        .map(|s| s.as_ref().clone())
        .collect();
    let changes = plan::changes(&svc, existing, desired);
    if changes.create.is_empty() && changes.update.is_empty() && changes.delete.is_empty() {
        return Ok(Action::await_change());
    }
    let api: Api<EndpointSlice> = Api::namespaced(ctx.credentials.client(NAME).await?, &namespace);
    // Updates and deletes first, as upstream's reconciler: a slice is never briefly doubled.
    for slice in &changes.update {
        api.replace(&slice.name_any(), &PostParams::default(), slice).await?;
    }
    for gone in &changes.delete {
        match api.delete(gone, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut created = HashSet::new();
    let mut failed = None;
    for slice in &changes.create {
        match api.create(&PostParams::default(), slice).await {
            Ok(made) => {
                created.insert(made.name_any());
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if !created.is_empty() {
        ctx.created.lock().unwrap_or_else(PoisonError::into_inner).insert(uid, (created, Instant::now()));
    }
    tracing::debug!(
        created = changes.create.len(),
        updated = changes.update.len(),
        deleted = changes.delete.len(),
        "endpoint slices written"
    );
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(Action::await_change()),
    }
}
