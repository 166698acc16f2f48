//! The namespace controller (`pkg/controller/namespace` `NamespaceController` and its
//! `namespacedResourcesDeleter`), on kube-runtime's Controller: a namespace being deleted
//! (`Terminating`, its `kubernetes` finalizer in `spec.finalizers`) is emptied through the
//! API — every namespaced resource discovery lists that can be listed and deleted, by
//! DELETE of the collection where the resource allows it, else object by object, with
//! background propagation — and passed again until nothing is left: pods wait for their
//! nodes, objects with finalizers for their owners. Each pass says what it found in the
//! five conditions upstream keeps ([`plan::conditions`]). Once empty, the finalizer is
//! removed through `namespaces/{name}/finalize`, and the namespace deleted once more, which
//! the API server then carries out.
//!
//! Creates in a terminating namespace are refused by the API server (NamespaceLifecycle),
//! so nothing new appears behind the controller's back. Writes are the controller's own
//! (`system:serviceaccount:kube-system:namespace-controller`).

pub(crate) mod plan;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};
use kube::discovery::{Discovery, Scope};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
pub use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "namespace-controller";
/// Its service account (upstream's, `system:controller:namespace-controller`).
pub const ACCOUNT: &str = "namespace-controller";
/// The finalizer the API server puts on every namespace (`FinalizerKubernetes`).
const FINALIZER: &str = "kubernetes";
/// `--concurrent-namespace-syncs`' default.
const CONCURRENCY: u16 = 10;
/// Pause between passes while content is still going.
const RETRY: Duration = Duration::from_secs(1);
/// How long one discovery of the deletable resources is used.
const DISCOVERY_TTL: Duration = Duration::from_secs(30);

/// A namespaced resource the controller empties, and whether it takes a collection DELETE.
type Deletable = (ApiResource, bool);

struct Context {
    credentials: Credentials,
    discovered: tokio::sync::Mutex<Option<(Instant, Vec<Deletable>)>>,
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let controller = Controller::new(Api::<Namespace>::all(root), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let context = Arc::new(Context { credentials, discovered: tokio::sync::Mutex::new(None) });
    controller
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "namespace sync");
            }
        })
        .await;
}

fn error_policy(_ns: Arc<Namespace>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "namespace sync failed; retrying");
    Action::requeue(if error.is_conflict() { Duration::from_millis(200) } else { RETRY })
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, namespace = %ns.name_any());
    tracing::Instrument::instrument(sync(ns, ctx), span).await
}

/// The namespaced resources discovery lists that can be listed and deleted; `Err` with
/// what discovery said when it failed.
async fn deletable(ctx: &Context, client: &kube::Client) -> Result<Vec<Deletable>, String> {
    let mut cached = ctx.discovered.lock().await;
    if let Some((at, resources)) = cached.as_ref()
        && at.elapsed() < DISCOVERY_TTL
    {
        return Ok(resources.clone());
    }
    let discovery = Discovery::new(client.clone()).run().await.map_err(|e| e.to_string())?;
    let mut resources = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let deletes = caps.supports_operation("delete") || caps.supports_operation("deletecollection");
            if caps.scope == Scope::Namespaced && caps.supports_operation("list") && deletes {
                let collection = caps.supports_operation("deletecollection");
                resources.push((resource, collection));
            }
        }
    }
    *cached = Some((Instant::now(), resources.clone()));
    Ok(resources)
}

fn label(resource: &ApiResource) -> String {
    format!("{}.{}", resource.plural, resource.group)
}

/// `deleteAllContent` then `estimateGracefulTermination`: one pass over every resource.
async fn empty(client: &kube::Client, namespace: &str, resources: &[Deletable]) -> plan::Pass {
    let mut pass = plan::Pass::default();
    let background = DeleteParams::background();
    for (resource, collection) in resources {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        let deleted = if *collection {
            api.delete_collection(&background, &ListParams::default()).await.map(drop)
        } else {
            match api.list_metadata(&ListParams::default()).await {
                Ok(list) => {
                    let mut result = Ok(());
                    for item in list.items {
                        if let Err(e) = api.delete(&item.name_any(), &background).await
                            && !is_gone(&e)
                        {
                            result = Err(e);
                        }
                    }
                    result
                }
                Err(e) => Err(e),
            }
        };
        if let Err(e) = deleted
            && !is_gone(&e)
        {
            pass.delete_errors.push(format!("{}: {e}", label(resource)));
        }
    }
    for (resource, _) in resources {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        match api.list_metadata(&ListParams::default()).await {
            Ok(list) if !list.items.is_empty() => {
                pass.remaining.insert(label(resource), list.items.len());
                for item in &list.items {
                    for finalizer in item.metadata.finalizers.iter().flatten() {
                        *pass.finalizers.entry(finalizer.clone()).or_default() += 1;
                    }
                }
            }
            Ok(_) => {}
            Err(e) if is_gone(&e) => {}
            Err(e) => pass.delete_errors.push(format!("{}: {e}", label(resource))),
        }
    }
    pass
}

/// An answer that means there is nothing (left) to delete.
fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 405)
}

async fn sync(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    if ns.metadata.deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let client = ctx.credentials.client(ACCOUNT).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let finalizers: Vec<String> = ns.spec.as_ref().and_then(|s| s.finalizers.clone()).unwrap_or_default();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        // Ours is done; the namespace goes once the others' are too.
        if finalizers.is_empty() {
            delete(&namespaces, &ns).await?;
        }
        return Ok(Action::await_change());
    }
    let pass = match deletable(&ctx, &client).await {
        Ok(resources) => empty(&client, &name, &resources).await,
        Err(e) => plan::Pass { discovery_errors: vec![e], ..plan::Pass::default() },
    };
    let current = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let conditions = plan::conditions(&current, &pass, &now);
    if conditions != current {
        let mut updated = (*ns).clone();
        updated.status.get_or_insert_default().conditions = Some(conditions);
        namespaces.replace_status(&name, &PostParams::default(), &updated).await?;
    }
    if !pass.done() {
        tracing::debug!(remaining = ?pass.remaining, "namespace content remains");
        return Ok(Action::requeue(RETRY));
    }
    // finalizeNamespace: the rest of the finalizers, through `/finalize`.
    let latest = namespaces.get(&name).await?;
    let rest: Vec<String> = latest
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != FINALIZER)
        .collect();
    let mut finalized = latest.clone();
    finalized.spec.get_or_insert_default().finalizers = Some(rest.clone());
    namespaces.replace_subresource("finalize", &name, &PostParams::default(), &finalized).await?;
    tracing::info!("namespace emptied and finalized");
    if rest.is_empty() {
        delete(&namespaces, &latest).await?;
    }
    Ok(Action::await_change())
}

/// `deleteNamespace`: that namespace (its UID) only; gone already is done.
async fn delete(namespaces: &Api<Namespace>, ns: &Namespace) -> Result<(), SyncError> {
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: ns.metadata.uid.clone(), resource_version: None }),
        ..DeleteParams::default()
    };
    match namespaces.delete(&ns.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
