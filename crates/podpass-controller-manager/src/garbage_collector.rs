//! The garbage collector (`pkg/controller/garbagecollector`), for the kinds podpass's
//! controllers own — pods, ReplicaSets, Deployments, DaemonSets, ControllerRevisions, Jobs,
//! CronJobs, Services and EndpointSlices, watched as metadata only — as
//! `generic-garbage-collector`:
//!
//! - a dependent whose owners are all gone (404, or another object of the same name: a UID
//!   mismatch is a dangling owner) is deleted, in the background — `kubectl delete rs`;
//! - one with a live owner keeps it and loses only the references that dangle;
//! - an owner deleted with `propagationPolicy: Orphan` keeps its `orphan` finalizer until
//!   no dependent names it (the references are patched out), then the finalizer goes;
//! - an owner deleted with `Foreground` keeps `foregroundDeletion` until its dependents
//!   that block it (`blockOwnerDeletion`) are gone, which the collector deletes.
//!
//! A dangling owner seen in the cache is checked live (GET, same UID) before anything is
//! deleted, as upstream's `isDangling`. The cache is swept every [`SWEEP`]; events would
//! be sooner, the sweep cannot miss one.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{DeleteParams, PartialObjectMeta, Patch, PatchParams, PropagationPolicy};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::credentials::Credentials;

/// The controller's name and service account.
pub const NAME: &str = "generic-garbage-collector";
/// How often the cache is swept.
const SWEEP: Duration = Duration::from_secs(1);
/// The finalizers the API server adds for Orphan and Foreground deletions.
const ORPHAN: &str = "orphan";
const FOREGROUND: &str = "foregroundDeletion";

/// An object the collector handles: its kind's API path pieces and its metadata.
#[derive(Debug, Clone)]
struct Item {
    kind: &'static str,
    meta: ObjectMeta,
}

/// What an owner reference points at, as upstream classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// There, with this UID, not waiting on its dependents.
    Solid,
    /// Gone, or another object now (UID mismatch).
    Dangling,
    /// Being deleted in the foreground: waiting on its dependents.
    Waiting,
}

/// What the collector does with one dependent, from its owners' states (pure:
/// `attemptToDeleteItem`'s decision).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Nothing to do.
    Keep,
    /// Patch out these references (by owner UID); a solid owner remains.
    RemoveReferences(Vec<String>),
    /// Delete it (background).
    Delete,
}

fn verdict(owners: &[(String, Owner)]) -> Verdict {
    if owners.is_empty() {
        return Verdict::Keep;
    }
    let solid = owners.iter().any(|(_, o)| *o == Owner::Solid);
    let gone: Vec<String> = owners.iter().filter(|(_, o)| *o != Owner::Solid).map(|(uid, _)| uid.clone()).collect();
    match (solid, gone.is_empty()) {
        (true, true) => Verdict::Keep,
        (true, false) => Verdict::RemoveReferences(gone),
        // No solid owner: every owner is dangling or deleting in the foreground.
        (false, _) => Verdict::Delete,
    }
}

fn finalizers(meta: &ObjectMeta) -> Vec<String> {
    meta.finalizers.clone().unwrap_or_default()
}

/// The kinds the collector watches (metadata only, as upstream's metadata informers):
/// the dependents and owners podpass's controllers make.
struct Caches {
    pods: Store<PartialObjectMeta<Pod>>,
    sets: Store<PartialObjectMeta<ReplicaSet>>,
    deployments: Store<PartialObjectMeta<Deployment>>,
    jobs: Store<PartialObjectMeta<Job>>,
    cron_jobs: Store<PartialObjectMeta<CronJob>>,
    services: Store<PartialObjectMeta<Service>>,
    slices: Store<PartialObjectMeta<EndpointSlice>>,
    daemon_sets: Store<PartialObjectMeta<DaemonSet>>,
    revisions: Store<PartialObjectMeta<ControllerRevision>>,
}

/// A metadata cache of `K` and the stream that fills it.
fn cache<K>(root: &kube::Client) -> (Store<PartialObjectMeta<K>>, impl std::future::Future<Output = ()> + use<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<PartialObjectMeta<K>>();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<PartialObjectMeta<K>>::all(root.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects();
    (store, stream.for_each(|_| async {}))
}

/// Runs the collector until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let (pods, drive_pods) = cache::<Pod>(&root);
    let (sets, drive_sets) = cache::<ReplicaSet>(&root);
    let (deployments, drive_deployments) = cache::<Deployment>(&root);
    let (jobs, drive_jobs) = cache::<Job>(&root);
    let (cron_jobs, drive_cron_jobs) = cache::<CronJob>(&root);
    let (services, drive_services) = cache::<Service>(&root);
    let (slices, drive_slices) = cache::<EndpointSlice>(&root);
    let (daemon_sets, drive_daemon_sets) = cache::<DaemonSet>(&root);
    let (revisions, drive_revisions) = cache::<ControllerRevision>(&root);
    let caches = Caches { pods, sets, deployments, jobs, cron_jobs, services, slices, daemon_sets, revisions };
    let drive = futures::future::join(
        futures::future::join5(drive_pods, drive_sets, drive_deployments, drive_jobs, drive_cron_jobs),
        futures::future::join4(drive_services, drive_slices, drive_daemon_sets, drive_revisions),
    );
    let sweep = async {
        let ready = caches.pods.wait_until_ready().await.is_ok()
            && caches.sets.wait_until_ready().await.is_ok()
            && caches.deployments.wait_until_ready().await.is_ok()
            && caches.jobs.wait_until_ready().await.is_ok()
            && caches.cron_jobs.wait_until_ready().await.is_ok()
            && caches.services.wait_until_ready().await.is_ok()
            && caches.slices.wait_until_ready().await.is_ok()
            && caches.daemon_sets.wait_until_ready().await.is_ok()
            && caches.revisions.wait_until_ready().await.is_ok();
        if !ready {
            return;
        }
        loop {
            if let Err(e) = sweep_once(&credentials, &caches).await {
                tracing::warn!(controller = NAME, error = %e, "garbage collection pass");
            }
            tokio::time::sleep(SWEEP).await;
        }
    };
    tokio::select! {
        _ = drive => {}
        () = sweep => {}
    }
}

fn items(caches: &Caches) -> Vec<Item> {
    let p = caches.pods.state().into_iter().map(|m| Item { kind: "Pod", meta: m.metadata.clone() });
    let s = caches.sets.state().into_iter().map(|m| Item { kind: "ReplicaSet", meta: m.metadata.clone() });
    let d = caches.deployments.state().into_iter().map(|m| Item { kind: "Deployment", meta: m.metadata.clone() });
    let j = caches.jobs.state().into_iter().map(|m| Item { kind: "Job", meta: m.metadata.clone() });
    let c = caches.cron_jobs.state().into_iter().map(|m| Item { kind: "CronJob", meta: m.metadata.clone() });
    let v = caches.services.state().into_iter().map(|m| Item { kind: "Service", meta: m.metadata.clone() });
    let e = caches.slices.state().into_iter().map(|m| Item { kind: "EndpointSlice", meta: m.metadata.clone() });
    let ds = caches.daemon_sets.state().into_iter().map(|m| Item { kind: "DaemonSet", meta: m.metadata.clone() });
    let r = caches.revisions.state().into_iter().map(|m| Item { kind: "ControllerRevision", meta: m.metadata.clone() });
    p.chain(s).chain(d).chain(j).chain(c).chain(v).chain(e).chain(ds).chain(r).collect()
}

async fn sweep_once(credentials: &Credentials, caches: &Caches) -> Result<(), kube::Error> {
    let all = items(caches);
    // Owners the cache knows, by UID.
    let known: HashMap<String, &Item> = all.iter().filter_map(|i| i.meta.uid.clone().map(|uid| (uid, i))).collect();
    let client = match credentials.client(NAME).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(controller = NAME, error = %e, "no identity");
            return Ok(());
        }
    };
    for item in &all {
        owner_finalizers(&client, item, &all).await?;
        let refs = item.meta.owner_references.clone().unwrap_or_default();
        if refs.is_empty() || item.meta.deletion_timestamp.is_some() {
            continue;
        }
        let mut owners = Vec::new();
        for r in &refs {
            owners.push((r.uid.clone(), classify(&client, item, r, &known).await?));
        }
        match verdict(&owners) {
            Verdict::Keep => {}
            Verdict::RemoveReferences(uids) => remove_references(&client, item, &uids.into_iter().collect()).await?,
            Verdict::Delete => {
                // Every owner gone or waiting on it: waiting owners pass the foreground on.
                let waiting = owners.iter().any(|(_, o)| *o == Owner::Waiting);
                delete(&client, item, waiting && has_dependents(item, &all)).await?;
            }
        }
    }
    Ok(())
}

/// The state of the owner `r` of `item`: from the cache when it is there and solid, else
/// checked live (`isDangling`: a 404 or a UID mismatch).
async fn classify(
    client: &kube::Client,
    item: &Item,
    r: &OwnerReference,
    known: &HashMap<String, &Item>,
) -> Result<Owner, kube::Error> {
    // A namespaced dependent's owner is looked up in its own namespace only (upstream
    // `isDangling`): a reference to another namespace's object by UID does not find it.
    if let Some(owner) = known.get(&r.uid).filter(|o| o.meta.namespace == item.meta.namespace) {
        return Ok(state_of(&owner.meta));
    }
    let Some(kind) = KINDS.iter().find(|k| k.0 == r.kind && r.api_version == k.1).map(|k| k.0) else {
        // A kind the collector does not know: never taken for gone.
        return Ok(Owner::Solid);
    };
    let api = api_of(client, &Item { kind, meta: item.meta.clone() });
    Ok(match api.get_metadata_opt(&r.name).await? {
        Some(owner) if owner.metadata.uid.as_deref() == Some(r.uid.as_str()) => state_of(&owner.metadata),
        _ => Owner::Dangling,
    })
}

fn state_of(meta: &ObjectMeta) -> Owner {
    if meta.deletion_timestamp.is_some() && finalizers(meta).iter().any(|f| f == FOREGROUND) {
        Owner::Waiting
    } else {
        Owner::Solid
    }
}

/// The kinds the collector knows, by kind and apiVersion.
const KINDS: [(&str, &str); 9] = [
    ("Pod", "v1"),
    ("ReplicaSet", "apps/v1"),
    ("Deployment", "apps/v1"),
    ("Job", "batch/v1"),
    ("CronJob", "batch/v1"),
    ("Service", "v1"),
    ("EndpointSlice", "discovery.k8s.io/v1"),
    ("DaemonSet", "apps/v1"),
    ("ControllerRevision", "apps/v1"),
];

/// The API of `item`'s kind in its namespace.
fn api_of(client: &kube::Client, item: &Item) -> Api<kube::api::DynamicObject> {
    let ns = item.meta.namespace.clone().unwrap_or_default();
    let resource = match item.kind {
        "Pod" => kube::discovery::ApiResource::erase::<Pod>(&()),
        "Deployment" => kube::discovery::ApiResource::erase::<Deployment>(&()),
        "Job" => kube::discovery::ApiResource::erase::<Job>(&()),
        "CronJob" => kube::discovery::ApiResource::erase::<CronJob>(&()),
        "Service" => kube::discovery::ApiResource::erase::<Service>(&()),
        "EndpointSlice" => kube::discovery::ApiResource::erase::<EndpointSlice>(&()),
        "DaemonSet" => kube::discovery::ApiResource::erase::<DaemonSet>(&()),
        "ControllerRevision" => kube::discovery::ApiResource::erase::<ControllerRevision>(&()),
        _ => kube::discovery::ApiResource::erase::<ReplicaSet>(&()),
    };
    Api::namespaced_with(client.clone(), &ns, &resource)
}

/// Whether any of `all` names `item` as an owner (in its namespace).
fn has_dependents(item: &Item, all: &[Item]) -> bool {
    let Some(uid) = item.meta.uid.as_ref() else { return false };
    all.iter()
        .filter(|i| i.meta.namespace == item.meta.namespace)
        .any(|i| i.meta.owner_references.iter().flatten().any(|r| &r.uid == uid))
}

/// Deletes `item`, in the foreground when `foreground` (a dependent of an owner deleted in
/// the foreground that has dependents of its own: upstream's `attemptToDeleteItem` passes
/// the foreground on, so the owner goes last of all), else in the background.
async fn delete(client: &kube::Client, item: &Item, foreground: bool) -> Result<(), kube::Error> {
    let api = api_of(client, item);
    let name = item.meta.name.clone().unwrap_or_default();
    let params = DeleteParams {
        propagation_policy: Some(if foreground {
            PropagationPolicy::Foreground
        } else {
            PropagationPolicy::Background
        }),
        preconditions: item
            .meta
            .uid
            .clone()
            .map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            tracing::info!(controller = NAME, kind = item.kind, name, "deleted: its owners are gone");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn remove_references(client: &kube::Client, item: &Item, uids: &HashSet<String>) -> Result<(), kube::Error> {
    let api = api_of(client, item);
    let kept: Vec<OwnerReference> =
        item.meta.owner_references.iter().flatten().filter(|r| !uids.contains(&r.uid)).cloned().collect();
    let patch = serde_json::json!({"metadata": {"uid": item.meta.uid, "ownerReferences": kept}});
    let name = item.meta.name.clone().unwrap_or_default();
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 || s.code == 422 => Ok(()),
        Err(e) => Err(e),
    }
}

/// An owner being deleted behind `orphan` or `foregroundDeletion`: its dependents
/// orphaned, or deleted, and its finalizer removed once none is left.
async fn owner_finalizers(client: &kube::Client, owner: &Item, all: &[Item]) -> Result<(), kube::Error> {
    if owner.meta.deletion_timestamp.is_none() {
        return Ok(());
    }
    let fin = finalizers(&owner.meta);
    let (orphan, foreground) = (fin.iter().any(|f| f == ORPHAN), fin.iter().any(|f| f == FOREGROUND));
    if !orphan && !foreground {
        return Ok(());
    }
    let uid = owner.meta.uid.clone().unwrap_or_default();
    // Only its own namespace's objects are its dependents: another tenant's pod naming this
    // UID is neither orphaned nor deleted on its behalf.
    let dependents: Vec<&Item> = all
        .iter()
        .filter(|i| i.meta.namespace == owner.meta.namespace)
        .filter(|i| i.meta.owner_references.iter().flatten().any(|r| r.uid == uid))
        .collect();
    if orphan {
        let one: HashSet<String> = [uid.clone()].into();
        for d in &dependents {
            remove_references(client, d, &one).await?;
        }
        if dependents.is_empty() {
            remove_finalizer(client, owner, ORPHAN).await?;
        }
        return Ok(());
    }
    // Foreground: the blocking dependents go first.
    let blocking: Vec<&&Item> = dependents
        .iter()
        .filter(|d| {
            d.meta.owner_references.iter().flatten().any(|r| r.uid == uid && r.block_owner_deletion == Some(true))
        })
        .collect();
    for d in &blocking {
        if d.meta.deletion_timestamp.is_none() {
            delete(client, d, has_dependents(d, all)).await?;
        }
    }
    if blocking.is_empty() {
        remove_finalizer(client, owner, FOREGROUND).await?;
    }
    Ok(())
}

async fn remove_finalizer(client: &kube::Client, owner: &Item, finalizer: &str) -> Result<(), kube::Error> {
    let api = api_of(client, owner);
    let kept: Vec<String> = finalizers(&owner.meta).into_iter().filter(|f| f != finalizer).collect();
    let patch = serde_json::json!({"metadata": {"uid": owner.meta.uid, "resourceVersion": owner.meta.resource_version, "finalizers": kept}});
    let name = owner.meta.name.clone().unwrap_or_default();
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::info!(controller = NAME, kind = owner.kind, name, finalizer, "finalizer removed");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependent_goes_only_when_no_owner_is_solid() {
        let uid = |s: &str| s.to_owned();
        assert_eq!(verdict(&[]), Verdict::Keep);
        assert_eq!(verdict(&[(uid("a"), Owner::Solid)]), Verdict::Keep);
        assert_eq!(verdict(&[(uid("a"), Owner::Dangling)]), Verdict::Delete);
        assert_eq!(verdict(&[(uid("a"), Owner::Waiting)]), Verdict::Delete, "its owner waits on it");
        assert_eq!(
            verdict(&[(uid("a"), Owner::Solid), (uid("b"), Owner::Dangling), (uid("c"), Owner::Waiting)]),
            Verdict::RemoveReferences(vec![uid("b"), uid("c")])
        );
        let meta = |finalizers: &[&str], deleting: bool| ObjectMeta {
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            deletion_timestamp: deleting
                .then(|| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())),
            ..Default::default()
        };
        assert_eq!(state_of(&meta(&[FOREGROUND], true)), Owner::Waiting);
        assert_eq!(state_of(&meta(&[FOREGROUND], false)), Owner::Solid);
        assert_eq!(state_of(&meta(&[ORPHAN], true)), Owner::Solid);
    }
}
