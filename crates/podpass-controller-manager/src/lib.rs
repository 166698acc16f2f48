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

use kube::config::{KubeConfigOptions, Kubeconfig};

/// The manager could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The kubeconfig could not be used.
    #[error("--kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// Leadership was lost (the manager exits, as kube-controller-manager does).
    #[error(transparent)]
    Lost(#[from] leader::ElectionError),
}

/// Runs the prepared manager until `shutdown` resolves or it stops leading.
pub async fn run(prepared: Prepared, shutdown: impl std::future::Future<Output = ()>) -> Result<(), RunError> {
    let err = |reason: String| RunError::Kubeconfig { path: prepared.kubeconfig.display().to_string(), reason };
    let kubeconfig = Kubeconfig::read_from(&prepared.kubeconfig).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    let root = kube::Client::try_from(config.clone()).map_err(|e| err(e.to_string()))?;
    let credentials = Credentials::new(root.clone(), config, prepared.per_controller);
    tokio::pin!(shutdown);
    let mut elector = prepared.election.map(|e| leader::Elector::new(root, e, "kube-controller-manager"));
    if let Some(elector) = elector.as_mut() {
        tokio::select! {
            () = elector.acquire() => {}
            () = &mut shutdown => return Ok(()),
        }
    }
    let controllers = futures::future::join_all(prepared.controllers.iter().map(|name| {
        let credentials = credentials.clone();
        async move {
            tracing::info!(controller = name, "starting controller");
            match *name {
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
    }));
    let lost = async {
        match elector.as_mut() {
            Some(elector) => elector.renew_until_lost().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        _ = controllers => Ok(()),
        lost = lost => Err(lost),
        () = &mut shutdown => Ok(()),
    };
    match outcome {
        Ok(()) => {
            if let Some(elector) = elector.as_mut() {
                elector.release().await;
            }
            Ok(())
        }
        Err(lost) => Err(lost.into()),
    }
}
