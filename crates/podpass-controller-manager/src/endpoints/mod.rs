//! The Endpoints controller (`pkg/controller/endpoint`), on kube-runtime's Controller:
//! each Service with a selector gets an Endpoints object of its name listing its backends
//! ([`plan::desired`]), ready or not, rewritten only when that changes; woken by the
//! Service, its Endpoints and its namespace's pods. A Service's Endpoints go with it, and
//! at start Endpoints left by Services deleted meanwhile are removed
//! (`checkLeftoverEndpoints`). Writes are the controller's own
//! (`system:serviceaccount:kube-system:endpoint-controller`).

pub(crate) mod plan;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
use crate::service_pods;
pub use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "endpoints-controller";
/// Its service account (upstream's, `system:controller:endpoint-controller`).
pub const ACCOUNT: &str = "endpoint-controller";
/// `--concurrent-endpoint-syncs`' default.
const CONCURRENCY: u16 = 5;
/// Endpoints kept for leader election by old components, never removed as leftovers.
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

struct Context {
    credentials: Credentials,
    pods: Store<Pod>,
    endpoints: Store<Endpoints>,
    ready: tokio::sync::OnceCell<bool>,
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (pods, pod_events) = crate::cache::cached_events(Api::<Pod>::all(root.clone()));
    let (endpoints, endpoint_events) = crate::cache::cached_events(Api::<Endpoints>::all(root.clone()));
    let controller = Controller::new(Api::<Service>::all(root.clone()), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let services = controller.store();
    let context =
        Arc::new(Context { credentials: credentials.clone(), pods, endpoints, ready: tokio::sync::OnceCell::new() });
    let work = controller
        .watches_stream(pod_events, move |pod| {
            service_pods::services_in(&pod.namespace().unwrap_or_default(), &services)
        })
        .watches_stream(endpoint_events, |ep| {
            Some(ObjectRef::<Service>::new(&ep.name_any()).within(&ep.namespace().unwrap_or_default()))
        })
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "endpoints sync");
            }
        });
    tokio::join!(work, leftovers(credentials));
}

/// Removes the Endpoints of deleted Services: each deletion as it is seen, and after each
/// full list those whose Service is gone.
async fn leftovers(credentials: Credentials) {
    let root = credentials.root();
    let mut listed: HashSet<(String, String)> = HashSet::new();
    let mut events = std::pin::pin!(watcher(Api::<Service>::all(root), watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let key = |s: &Service| (s.namespace().unwrap_or_default(), s.name_any());
        match event {
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(s)) => {
                listed.insert(key(&s));
            }
            Ok(watcher::Event::InitDone) => {
                if let Err(e) = sweep(&credentials, &listed).await {
                    tracing::warn!(error = %e, "endpoints: leftover sweep failed");
                }
            }
            Ok(watcher::Event::Delete(s)) => {
                let (namespace, name) = key(&s);
                if let Err(e) = remove(&credentials, &namespace, &name).await {
                    tracing::warn!(error = %e, service = %format!("{namespace}/{name}"), "endpoints: not removed");
                }
            }
            Ok(watcher::Event::Apply(_)) => {}
            Err(e) => tracing::debug!(error = %e, "endpoints: service watch"),
        }
    }
}

/// `checkLeftoverEndpoints`: every Endpoints object whose Service is not in `services`.
async fn sweep(credentials: &Credentials, services: &HashSet<(String, String)>) -> Result<(), SyncError> {
    let all: Vec<Endpoints> = Api::<Endpoints>::all(credentials.root()).list(&ListParams::default()).await?.items;
    for ep in all {
        let key = (ep.namespace().unwrap_or_default(), ep.name_any());
        let leader = ep.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(LEADER_ANNOTATION));
        if !leader && !services.contains(&key) {
            remove(credentials, &key.0, &key.1).await?;
        }
    }
    Ok(())
}

async fn remove(credentials: &Credentials, namespace: &str, name: &str) -> Result<(), SyncError> {
    let api: Api<Endpoints> = Api::namespaced(credentials.client(ACCOUNT).await?, namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(endpoints = %format!("{namespace}/{name}"), "endpoints: removed with their Service");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn error_policy(_svc: Arc<Service>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "endpoints sync failed; retrying");
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
            ctx.pods.wait_until_ready().await.is_ok() && ctx.endpoints.wait_until_ready().await.is_ok()
        })
        .await;
    if !*ready {
        return Err(SyncError::CacheGone("pods"));
    }
    // Without a selector the Endpoints are their user's; a deleted Service's go with it.
    let spec = svc.spec.clone().unwrap_or_default();
    if spec.selector.as_ref().is_none_or(BTreeMap::is_empty) || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let state = ctx.pods.state();
    let pods: Vec<&Pod> =
        state.iter().filter(|p| p.namespace().as_deref() == Some(namespace.as_str())).map(|p| p.as_ref()).collect();
    let publish = spec.publish_not_ready_addresses.unwrap_or(false);
    let want = plan::desired(&svc, &service_pods::backends(&svc, &pods, publish));
    let current = ctx.endpoints.get(&ObjectRef::new(&name).within(&namespace));
    let mut annotations = current.as_ref().and_then(|c| c.metadata.annotations.clone()).unwrap_or_default();
    if want.truncated {
        annotations.insert(plan::OVER_CAPACITY.into(), "truncated".into());
    } else {
        annotations.remove(plan::OVER_CAPACITY);
    }
    let subsets = (!want.subsets.is_empty()).then_some(want.subsets);
    let labels = (!want.labels.is_empty()).then_some(want.labels);
    let annotations = (!annotations.is_empty()).then_some(annotations);
    if let Some(current) = &current
        && current.subsets.as_ref().filter(|s| !s.is_empty()) == subsets.as_ref()
        && current.metadata.labels.as_ref().filter(|l| !l.is_empty()) == labels.as_ref()
        && current.metadata.annotations.as_ref().filter(|a| !a.is_empty()) == annotations.as_ref()
    {
        return Ok(Action::await_change());
    }
    let api: Api<Endpoints> = Api::namespaced(ctx.credentials.client(ACCOUNT).await?, &namespace);
    let object = Endpoints {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels,
            annotations,
            resource_version: current.as_ref().and_then(|c| c.metadata.resource_version.clone()),
            ..current.as_ref().map(|c| c.metadata.clone()).unwrap_or_default()
        },
        subsets,
    };
    match current {
        Some(_) => api.replace(&name, &PostParams::default(), &object).await?,
        None => api.create(&PostParams::default(), &object).await?,
    };
    tracing::debug!("endpoints written");
    Ok(Action::await_change())
}
