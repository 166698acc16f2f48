//! The service account controller (`pkg/controller/serviceaccount`
//! `ServiceAccountsController`), on kube-runtime's Controller: every `Active` namespace
//! holds the ServiceAccount `default`, created when the namespace appears and again when it
//! is deleted. A namespace terminating or gone gets none (the create goes through
//! NamespaceLifecycle, and that refusal is no error, as upstream). Writes are the
//! controller's own (`system:serviceaccount:kube-system:service-account-controller`).
//!
//! ServiceAccount admission waits a moment for this account (upstream retries its lookup of
//! `default`), so a pod created right after its namespace is admitted.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
pub use crate::sync_error::SyncError;

/// The controller's name (`--controllers`).
pub const NAME: &str = "serviceaccount-controller";
/// Its service account (upstream's, `system:controller:service-account-controller`).
pub const ACCOUNT: &str = "service-account-controller";
/// The account every namespace gets (`DefaultServiceAccountName`).
pub const DEFAULT_ACCOUNT: &str = "default";

struct Context {
    credentials: Credentials,
    accounts: Store<ServiceAccount>,
    ready: tokio::sync::OnceCell<bool>,
}

/// Whether a namespace is one content may be created in (`Active`, not being deleted).
pub(crate) fn is_active(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Active")
}

/// Whether a create was refused because its namespace is terminating or gone: nothing to
/// do then (upstream: `NamespaceTerminatingCause`, or the namespace not found).
pub(crate) fn namespace_went_away(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404
        || (s.code == 403 && s.message.contains("because it is being terminated")))
}

/// Runs the controller until its streams end.
pub async fn run(credentials: Credentials) {
    let root = credentials.root();
    // Only the accounts it keeps: a namespace with thousands of accounts costs nothing more.
    let defaults = watcher::Config::default().fields(&format!("metadata.name={DEFAULT_ACCOUNT}"));
    let (accounts, writer) = reflector::store::<ServiceAccount>();
    let account_events =
        reflector::reflector(writer, watcher(Api::<ServiceAccount>::all(root.clone()), defaults).default_backoff())
            .touched_objects();
    // Upstream runs one worker.
    let controller = Controller::new(Api::<Namespace>::all(root), watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(1));
    let context = Arc::new(Context { credentials, accounts, ready: tokio::sync::OnceCell::new() });
    controller
        .watches_stream(account_events, |sa| Some(ObjectRef::<Namespace>::new(&sa.namespace().unwrap_or_default())))
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "service account sync");
            }
        })
        .await;
}

fn error_policy(_ns: Arc<Namespace>, error: &SyncError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "service account sync failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = NAME, namespace = %ns.name_any());
    tracing::Instrument::instrument(sync(ns, ctx), span).await
}

async fn sync(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, SyncError> {
    let ready = ctx.ready.get_or_init(|| async { ctx.accounts.wait_until_ready().await.is_ok() }).await;
    if !*ready {
        return Err(SyncError::CacheGone("serviceaccounts"));
    }
    let name = ns.name_any();
    if !is_active(&ns) || ctx.accounts.get(&ObjectRef::new(DEFAULT_ACCOUNT).within(&name)).is_some() {
        return Ok(Action::await_change());
    }
    let api: Api<ServiceAccount> = Api::namespaced(ctx.credentials.client(ACCOUNT).await?, &name);
    let account = ServiceAccount {
        metadata: ObjectMeta { name: Some(DEFAULT_ACCOUNT.to_owned()), ..Default::default() },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &account).await {
        Ok(_) => tracing::info!(namespace = %name, "service account default created"),
        // The cache had not shown it yet.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) if namespace_went_away(&e) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NamespaceStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn namespace(phase: Option<&str>, deleting: bool) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("team".into()),
                deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            status: phase.map(|p| NamespaceStatus { phase: Some(p.into()), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn only_active_namespaces_get_content() {
        assert!(is_active(&namespace(Some("Active"), false)));
        assert!(is_active(&namespace(None, false)), "a namespace not yet given a phase is new");
        assert!(!is_active(&namespace(Some("Terminating"), false)));
        assert!(!is_active(&namespace(Some("Active"), true)), "marked for deletion");
    }

    #[test]
    fn a_terminating_or_missing_namespace_is_no_error() {
        let status = |code, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, if code == 404 { "NotFound" } else { "Forbidden" })
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(namespace_went_away(&status(404, "namespaces \"team\" not found")));
        assert!(namespace_went_away(&status(
            403,
            "serviceaccounts \"default\" is forbidden: unable to create new content in namespace team because it is being terminated"
        )));
        assert!(!namespace_went_away(&status(403, "serviceaccounts is forbidden: User \"x\" cannot create")));
        assert!(!namespace_went_away(&status(409, "already exists")));
    }
}
