//! The ClusterRole aggregation controller (`pkg/controller/clusterroleaggregation`), on
//! kube-runtime's Controller: a ClusterRole with an `aggregationRule` gets, as its `rules`,
//! every rule of the other ClusterRoles its selectors match
//! ([`podpass_api::rbac_aggregation::aggregated_rules`]), rewritten whenever any ClusterRole
//! changes. An aggregation of aggregations settles as each write wakes the roles above it.
//! Writes are the controller's own
//! (`system:serviceaccount:kube-system:clusterrole-aggregation-controller`, which may
//! `escalate`: it writes rules it does not hold).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::credentials::Credentials;
pub use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "clusterrole-aggregation-controller";
/// Its service account (upstream's, `system:controller:clusterrole-aggregation-controller`).
pub const ACCOUNT: &str = "clusterrole-aggregation-controller";

struct Context {
    credentials: Credentials,
    roles: Store<ClusterRole>,
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    let controller = Controller::new(Api::<ClusterRole>::all(root.clone()), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(1));
    let roles = controller.store();
    let every = roles.clone();
    // Any role's change may change what an aggregating role gathers: all of them are woken.
    let changes =
        watcher(Api::<ClusterRole>::all(root), watcher::Config::default()).default_backoff().touched_objects();
    let context = Arc::new(Context { credentials, roles });
    controller
        .watches_stream(changes, move |_| {
            every
                .state()
                .into_iter()
                .filter(|r| r.aggregation_rule.is_some())
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "aggregation sync");
            }
        })
        .await;
}

fn error_policy(_role: Arc<ClusterRole>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "aggregation sync failed; retrying");
    Action::requeue(if error.is_conflict() { Duration::from_millis(200) } else { Duration::from_secs(5) })
}

async fn reconcile(role: Arc<ClusterRole>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, clusterrole = %role.name_any());
    tracing::Instrument::instrument(sync(role, ctx), span).await
}

async fn sync(role: Arc<ClusterRole>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    if role.aggregation_rule.is_none() || ctx.roles.wait_until_ready().await.is_err() {
        return Ok(Action::await_change());
    }
    let to_json = |r: &ClusterRole| serde_json::to_value(r).map_err(|e| SyncError::Internal(e.to_string()));
    let mut all: Vec<Arc<ClusterRole>> = ctx.roles.state();
    all.sort_by_key(|r| r.name_any());
    let roles = all.iter().map(|r| to_json(r)).collect::<Result<Vec<Value>, _>>()?;
    let Some(rules) = podpass_api::rbac_aggregation::aggregated_rules(&to_json(&role)?, &roles) else {
        return Ok(Action::await_change());
    };
    let current =
        serde_json::to_value(role.rules.clone().unwrap_or_default()).map_err(|e| SyncError::Internal(e.to_string()))?;
    if current == Value::Array(rules.clone()) {
        return Ok(Action::await_change());
    }
    let mut updated = (*role).clone();
    updated.rules = Some(serde_json::from_value(Value::Array(rules)).map_err(|e| SyncError::Internal(e.to_string()))?);
    let api: Api<ClusterRole> = Api::all(ctx.credentials.client(ACCOUNT).await?);
    api.replace(&role.name_any(), &PostParams::default(), &updated).await?;
    tracing::info!("aggregated rules written");
    Ok(Action::await_change())
}
