//! The resource quota controller (`pkg/controller/resourcequota`), on kube-runtime's
//! Controller: every ResourceQuota's `status` says its `hard` limits and what its
//! namespace uses of them now, counted by the evaluator ResourceQuota admission uses
//! ([`podpass_api::quota`]). Admission itself decides on the live objects and writes the
//! status of what it admits; this controller puts right what went away: replenished at once
//! when a pod is deleted or finishes (upstream's replenishment controller), and every
//! [`RESYNC`] for the other counted objects (upstream `--resource-quota-sync-period`, 5 min;
//! shorter here so that a deleted Secret's room shows soon). Usage is read with live LISTs
//! of the namespace, not a cache, so a status is never written from a stale view of it.
//! Writes are the controller's own
//! (`system:serviceaccount:kube-system:resourcequota-controller`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersion;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use podpass_api::quota::{self, Usage};
use serde_json::Value;

use crate::credentials::Credentials;
pub use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "resourcequota-controller";
/// Its service account (upstream's, `system:controller:resourcequota-controller`).
pub const ACCOUNT: &str = "resourcequota-controller";
/// How often every quota is recounted.
const RESYNC: Duration = Duration::from_secs(5);
/// `--concurrent-resource-quota-syncs`' default.
const CONCURRENCY: u16 = 5;

struct Context {
    credentials: Credentials,
    /// What discovery said of each counted resource.
    resources: tokio::sync::Mutex<HashMap<String, Option<ApiResource>>>,
}

/// Whether a pod's event frees quota: it is gone, or finished.
fn frees_quota(event: &watcher::Event<Pod>) -> Option<&Pod> {
    match event {
        watcher::Event::Delete(pod) => Some(pod),
        watcher::Event::Apply(pod)
            if matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) =>
        {
            Some(pod)
        }
        _ => None,
    }
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let controller = Controller::new(Api::<ResourceQuota>::all(root.clone()), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let quotas = controller.store();
    let freed = watcher(Api::<Pod>::all(root), watcher::Config::default())
        .filter_map(|event| async move {
            match event {
                Ok(event) => frees_quota(&event).cloned().map(Ok),
                Err(e) => Some(Err(e)),
            }
        })
        .boxed();
    let context = Arc::new(Context { credentials, resources: Default::default() });
    controller
        .watches_stream(freed, move |pod| {
            let namespace = pod.namespace().unwrap_or_default();
            quotas
                .state()
                .into_iter()
                .filter(|q| q.namespace().as_deref() == Some(namespace.as_str()))
                .map(|q| ObjectRef::from_obj(q.as_ref()))
                .collect::<Vec<_>>()
        })
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "quota sync");
            }
        })
        .await;
}

fn error_policy(_quota: Arc<ResourceQuota>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    // Admission writes the status of what it admits: a lost race with it is routine.
    if error.is_conflict() {
        tracing::debug!(error = %error, "quota sync lost a race; retrying");
    } else {
        tracing::warn!(error = %error, "quota sync failed; retrying");
    }
    Action::requeue(if error.is_conflict() { Duration::from_millis(200) } else { RESYNC })
}

async fn reconcile(quota: Arc<ResourceQuota>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, quota = %format!("{}/{}", quota.namespace().unwrap_or_default(), quota.name_any()));
    tracing::Instrument::instrument(sync(quota, ctx), span).await
}

/// The resource `plural` (`secrets`, `deployments.apps`) names, from discovery once;
/// `None` when the cluster serves no such resource.
async fn resource(ctx: &Context, client: &kube::Client, plural: &str) -> Result<Option<ApiResource>, SyncError> {
    if let Some(known) = ctx.resources.lock().await.get(plural) {
        return Ok(known.clone());
    }
    let (name, group) = plural.split_once('.').unwrap_or((plural, ""));
    let found = if group.is_empty() {
        kube::discovery::pinned_group(client, &GroupVersion::gv("", "v1")).await
    } else {
        kube::discovery::group(client, group).await
    };
    let group = match found {
        Ok(group) => Some(group),
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(kube::Error::Discovery(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let known =
        group.and_then(|g| g.recommended_resources().into_iter().find(|(r, _)| r.plural == name)).map(|(r, _)| r);
    ctx.resources.lock().await.insert(plural.to_owned(), known.clone());
    Ok(known)
}

/// The number of objects of `plural` in `namespace`, by a metadata-only LIST.
async fn count(
    ctx: &Context,
    client: &kube::Client,
    namespace: &str,
    plural: &str,
) -> Result<Option<usize>, SyncError> {
    let Some(api_resource) = resource(ctx, client, plural).await? else { return Ok(None) };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &api_resource);
    Ok(Some(api.list_metadata(&ListParams::default()).await?.items.len()))
}

async fn sync(quota: Arc<ResourceQuota>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let namespace = quota.namespace().unwrap_or_default();
    let object = serde_json::to_value(quota.as_ref()).map_err(|e| SyncError::Internal(e.to_string()))?;
    let (hard, scopes) = (quota::hard_of(&object), quota::scopes_of(&object));
    let client = ctx.credentials.client(ACCOUNT).await?;
    let pods: Vec<Value> = if quota::tracks_pods(&hard) {
        let list = Api::<Pod>::namespaced(client.clone(), &namespace).list(&ListParams::default()).await?;
        list.items.iter().filter_map(|p| serde_json::to_value(p).ok()).collect()
    } else {
        Vec::new()
    };
    let mut counts = HashMap::new();
    for (_, plural) in quota::counted_plurals(&hard) {
        if let std::collections::hash_map::Entry::Vacant(slot) = counts.entry(plural) {
            let n = count(&ctx, &client, &namespace, slot.key()).await?;
            slot.insert(n);
        }
    }
    let used: Usage = quota::usage_of(&hard, &scopes, &pods, |plural| counts.get(plural).copied().flatten());
    let status = quota::status_of(&object, &used);
    if object.get("status") == Some(&status) {
        return Ok(Action::requeue(RESYNC));
    }
    let mut updated = object;
    updated["status"] = status;
    let api: Api<ResourceQuota> = Api::namespaced(client, &namespace);
    let body: ResourceQuota = serde_json::from_value(updated).map_err(|e| SyncError::Internal(e.to_string()))?;
    match api.replace_status(&quota.name_any(), &PostParams::default(), &body).await {
        Ok(_) => tracing::debug!("quota usage written"),
        // Deleted meanwhile: nothing to count for.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    }
    Ok(Action::requeue(RESYNC))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;

    fn pod(phase: Option<&str>) -> Pod {
        Pod { status: phase.map(|p| PodStatus { phase: Some(p.into()), ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn a_deleted_or_finished_pod_frees_quota_a_running_one_does_not() {
        assert!(frees_quota(&watcher::Event::Delete(pod(Some("Running")))).is_some());
        assert!(frees_quota(&watcher::Event::Apply(pod(Some("Succeeded")))).is_some());
        assert!(frees_quota(&watcher::Event::Apply(pod(Some("Failed")))).is_some());
        assert!(frees_quota(&watcher::Event::Apply(pod(Some("Running")))).is_none());
        assert!(frees_quota(&watcher::Event::Apply(pod(None))).is_none());
        assert!(frees_quota(&watcher::Event::InitApply(pod(Some("Failed")))).is_none(), "a relist is not a change");
    }
}
