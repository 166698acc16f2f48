//! The podpass controller manager (`podpass controller-manager`): kube-controller-manager's
//! controllers as clients of any Kubernetes API server. Each controller writes as its own
//! service account (`--use-service-account-credentials`), so its writes are authenticated,
//! authorized, admitted and audited as a user's; one manager at a time leads, through the
//! Lease `kube-system/kube-controller-manager` (client-go's election, [`leader`]).
//!
//! - [`Config`] → [`Config::prepare`] (every problem at once) → [`run`].
//! - The controllers: the Deployment, ReplicaSet, Job and CronJob controllers (the Job
//!   controller also deletes finished Jobs past their TTL), the Endpoints and EndpointSlice
//!   controllers, and the garbage collector.

mod claim;
use podpass_component::events;
pub use podpass_component::leader;
mod config;
mod credentials;
mod cron_job;
mod deployment;
mod endpoint_slice;
mod endpoints;
mod garbage_collector;
mod job;
mod replica_set;
mod service_pods;
mod sync_error;

pub use config::{CONTROLLERS, Config, Prepared};
pub use credentials::{CONTROLLER_NAMESPACE, CredentialError, Credentials};
pub use sync_error::SyncError;

pub use podpass_component::RunError;

/// Runs the prepared manager until `shutdown` resolves or it stops leading.
pub async fn run(prepared: Prepared, shutdown: impl std::future::Future<Output = ()>) -> Result<(), RunError> {
    let (root, config) = podpass_component::client(&prepared.kubeconfig).await?;
    let credentials = Credentials::new(root.clone(), config, prepared.per_controller);
    let controllers = prepared.controllers;
    let work = move || {
        futures::future::join_all(controllers.into_iter().map(move |name| {
            let credentials = credentials.clone();
            async move {
                tracing::info!(controller = name, "starting controller");
                match name {
                    deployment::NAME => deployment::run(credentials).await,
                    replica_set::NAME => replica_set::run(credentials).await,
                    job::NAME => job::run(credentials).await,
                    cron_job::NAME => cron_job::run(credentials).await,
                    garbage_collector::NAME => garbage_collector::run(credentials).await,
                    endpoints::NAME => endpoints::run(credentials).await,
                    endpoint_slice::NAME => endpoint_slice::run(credentials).await,
                    _ => {}
                }
            }
        }))
    };
    podpass_component::lead(root, prepared.election, "kube-controller-manager", work, shutdown).await
}
